"""Graph records as PyTorch Geometric ``Data``: the input of every transform in :mod:`features.transforms`.

Attribute names follow PyG's batching rule: ``config_node_index`` contains ``index`` so that it is offset by the
number of nodes when graphs are batched; ``config_ids`` (rows of the file) must not be offset and so does not.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
import torch
from torch_geometric.data import Data

from competition.labels import graph_target
from competition.reader import LayoutGraph, TileGraph

# Attributes with one entry per config (first dimension C); transforms that select configs keep them aligned.
CONFIG_ATTRS: tuple[str, ...] = ("y", "runtime", "config_feat", "config_ids")
# Attributes with one row per node (first dimension N), besides the indices into nodes (config_node_index).
NODE_ATTRS: tuple[str, ...] = ("x", "op")


def graph_to_data(
    graph: TileGraph | LayoutGraph,
    config_rows: slice | Sequence[int] | npt.NDArray[np.integer] | None = None,
) -> Data:
    """Convert one graph record into a PyG ``Data``.

    Args:
        graph: a record from :func:`competition.reader.load_graph`.
        config_rows: the configs to carry (rows of the file, any order); ``None`` for all of them. For a layout
            graph only these rows of ``node_config_feat`` are read from disk, so pass a selection for big graphs.

    Returns:
        A ``Data`` with:

        * ``x``: float32 ``[N, 140]``, ``node_feat``.
        * ``op``: int64 ``[N]``, opcode ids.
        * ``edge_index``: int64 ``[2, E]`` in data-flow direction, row 0 the producer and row 1 the consumer
          (the file stores rows ``[consumer, producer]``).
        * ``y``: float64 ``[C]``, what configs rank by: tile ``config_runtime / config_runtime_normalizers``,
          layout ``config_runtime`` (ns). NaN for a tile test graph (its runtimes are zero).
        * ``runtime``: int64 ``[C]``, raw ``config_runtime`` in ns.
        * ``config_feat``: float32, tile ``[C, 24]``; layout ``[C, NC, 18]`` (``node_config_feat`` rows,
          -1 = unused slot).
        * ``config_node_index``: int64 ``[NC]``, layout only: the node of each configurable slot.
        * ``config_ids``: int64 ``[C]``, which rows of the file the configs are.
        * ``collection``: str, the collection value (e.g. ``layout:xla:random``; ``""`` if unknown).
        * ``stem``: str, the file stem.
    """
    everything = np.arange(graph.num_configs)
    rows = everything if config_rows is None else np.asarray(everything[config_rows] if isinstance(
        config_rows, slice) else config_rows, dtype=np.int64)
    y = graph_target(graph)[rows]
    if isinstance(graph, TileGraph):
        config_feat = torch.from_numpy(graph.config_feat[rows])
    else:
        config_feat = torch.from_numpy(graph.config_features(None if config_rows is None else rows))
    data = Data(
        x=torch.from_numpy(graph.node_feat),
        op=torch.from_numpy(graph.node_opcode.astype(np.int64)),
        edge_index=torch.from_numpy(np.ascontiguousarray(graph.edge_index[:, ::-1].T)),
        y=torch.from_numpy(np.ascontiguousarray(y)),
        runtime=torch.from_numpy(graph.config_runtime[rows]),
        config_feat=config_feat,
        config_ids=torch.from_numpy(rows),
        collection=graph.collection.value if graph.collection is not None else "",
        stem=graph.stem,
    )
    if isinstance(graph, LayoutGraph):
        data.config_node_index = torch.from_numpy(graph.node_config_ids.copy())
    data.num_nodes = graph.num_nodes
    return data


def select_configs(data: Data, index: torch.Tensor) -> Data:
    """Keep the configs at ``index`` (int64 ``[K]``) in every config-indexed attribute, in place."""
    for key in CONFIG_ATTRS:
        value = data.get(key)
        if isinstance(value, torch.Tensor):
            data[key] = value[index]
    return data


def num_configs(data: Data) -> int:
    """The number of configs a ``Data`` carries (0 if none)."""
    for key in CONFIG_ATTRS:
        value = data.get(key)
        if isinstance(value, torch.Tensor):
            return int(value.shape[0])
    return 0
