"""Tabular per-config features for gradient-boosted trees: one row per config, fixed columns per collection.

* tile:xla: :func:`features.tabular_tile.tile_features`, the tile-size config columns, the share of the tiled
  array a tile covers, what a tile holds in on-chip memory, and graph aggregates;
* layout:*: :func:`features.tabular_layout.layout_features`, per configurable-node type counts of the chosen
  layouts, the distance from the compiler's default, link disagreements, output padding, and graph aggregates.

This module holds what both share: the graph aggregate columns (:func:`graph_aggregates`), the size of a tensor
(:func:`log2_size`) and the rounding of a dim up to the TPU's tiles (:func:`pad_up`). "Size" of a node is
``log2(1 + shape_dimensions_product)`` (node_feat column 28): the copy or relayout cost grows with the tensor.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from competition.opcodes import OPCODE_IDS
from competition.reader import LayoutGraph, TileGraph
from competition.schema import COL_SHAPE_PRODUCT

FREQUENT_OPCODES: tuple[str, ...] = (
    "parameter", "constant", "add", "multiply", "subtract", "divide", "maximum", "convert", "broadcast",
    "reshape", "transpose", "reduce", "dot", "convolution", "fusion", "tuple", "get-tuple-element", "select",
    "compare", "exponential", "rsqrt", "slice", "concatenate", "copy", "bitcast", "pad",
)
"""Opcodes counted in the graph aggregates (the convolution and dot counts are among them)."""


def pad_up(x: npt.NDArray[np.float64], multiple: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """``x`` rounded up to a multiple of ``multiple``: a TPU tile dim as its (8, 128) registers hold it."""
    return np.ceil(x / multiple) * multiple


def log2_size(x: npt.NDArray[np.floating]) -> npt.NDArray[np.float64]:
    """``log2(1 + x)`` in float64, negative ``x`` taken as 0: the size of a shape product or a byte count."""
    return np.log2(1.0 + np.maximum(x.astype(np.float64), 0.0))


def graph_aggregates(graph: TileGraph | LayoutGraph) -> npt.NDArray[np.float64]:
    """The graph aggregate columns (:func:`graph_aggregate_names`): node and edge counts, the sum of the nodes'
    sizes, and the count of each opcode of :data:`FREQUENT_OPCODES`."""
    counts = np.bincount(graph.node_opcode, minlength=256)
    shape_log = log2_size(graph.node_feat[:, COL_SHAPE_PRODUCT]).sum()
    return np.array([graph.num_nodes, graph.num_edges, shape_log,
                     *(counts[OPCODE_IDS[name]] for name in FREQUENT_OPCODES)], dtype=np.float64)


def graph_aggregate_names() -> list[str]:
    """Names of the :func:`graph_aggregates` columns, in order."""
    return ["graph_nodes", "graph_edges", "graph_sum_log2_shape_product",
            *(f"graph_count_{name}" for name in FREQUENT_OPCODES)]
