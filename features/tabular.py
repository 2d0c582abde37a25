"""Tabular per-config features for gradient-boosted trees: one row per config, fixed columns per collection.

* :func:`tile_features` (tile:xla): the 24 tile-size config columns, tile sizes relative to the kernel's output
  shape, log2 tile sizes, the number of tiles, lane/sublane padding waste, and graph aggregates.
* :func:`layout_features` (layout:*): per configurable-node type (convolution, dot, reshape) counts of the chosen
  layouts, the distance from the compiler's default, a link-disagreement count that stands in for the copies the
  compiler inserts between producer and consumer layouts, and graph aggregates. Configs are streamed in blocks:
  a large graph's ``node_config_feat`` is never materialised whole.

Every column is named by :func:`tile_feature_names` / :func:`layout_feature_names` (same order as the matrix);
the docstrings of the two feature functions describe each group. "Size" of a node is
``log2(1 + shape_dimensions_product)`` (node_feat column 28): the copy or relayout cost grows with the tensor.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from competition.opcodes import CONVOLUTION, DOT, OPCODE_IDS, RESHAPE
from competition.reader import LayoutGraph, RowSelection, TileGraph
from competition.schema import (
    COL_IS_ROOT,
    COL_SHAPE_PRODUCT,
    COLS_KERNEL_BOUNDS,
    COLS_OUTPUT_BOUNDS,
    COLS_SHAPE,
)

MAX_DIMS = 6
LANE = 128
SUBLANE = 8

FREQUENT_OPCODES: tuple[str, ...] = (
    "parameter", "constant", "add", "multiply", "subtract", "divide", "maximum", "convert", "broadcast",
    "reshape", "transpose", "reduce", "dot", "convolution", "fusion", "tuple", "get-tuple-element", "select",
    "compare", "exponential", "rsqrt", "slice", "concatenate", "copy", "bitcast", "pad",
)
"""Opcodes counted in the graph aggregates (the convolution and dot counts are among them)."""

CONFIG_NODE_TYPES: tuple[tuple[str, int], ...] = (("conv", CONVOLUTION), ("dot", DOT), ("reshape", RESHAPE))
"""Configurable node types with their opcode ids, in column order."""

LAYOUT_SLOTS: tuple[tuple[str, int], ...] = (("output", 0), ("input", 6), ("kernel", 12))
"""The three tensors of a layout config row and the column of their minor-most dimension."""

MINOR_VALUES: tuple[int, ...] = (-1, 0, 1, 2, 3, 4, 5)
"""Values a minor-most slot can hold: -1 (unset) or a dimension index."""

TILE_CONFIG_NAMES: tuple[str, ...] = tuple(
    f"{group}_{d}" for group in ("kernel_bounds", "output_bounds", "input_bounds")
    for d in (*range(MAX_DIMS), "sum", "product")
)


def tile_root(node_feat: npt.NDArray[np.float32]) -> int:
    """The node whose output the tile config cuts: the last node flagged ``is_root``, else the last node.

    Nodes are numbered computation by computation, with a fusion's body before the computation calling it, so
    the last root is the root of the outermost computation: the kernel's output.
    """
    roots = np.flatnonzero(node_feat[:, COL_IS_ROOT] > 0)
    return int(roots[-1]) if roots.size else node_feat.shape[0] - 1


def _log2_size(x: npt.NDArray[np.floating]) -> npt.NDArray[np.float64]:
    return np.log2(1.0 + np.maximum(x.astype(np.float64), 0.0))


def _graph_aggregates(graph: TileGraph | LayoutGraph) -> npt.NDArray[np.float64]:
    counts = np.bincount(graph.node_opcode, minlength=256)
    shape_log = _log2_size(graph.node_feat[:, COL_SHAPE_PRODUCT]).sum()
    return np.array([graph.num_nodes, graph.num_edges, shape_log,
                     *(counts[OPCODE_IDS[name]] for name in FREQUENT_OPCODES)], dtype=np.float64)


def _graph_aggregate_names() -> list[str]:
    return ["graph_nodes", "graph_edges", "graph_sum_log2_shape_product",
            *(f"graph_count_{name}" for name in FREQUENT_OPCODES)]


# --------------------------------------------------------------------------------------------------------------
# Tile
# --------------------------------------------------------------------------------------------------------------


def tile_feature_names() -> list[str]:
    """Column names of :func:`tile_features`, in order."""
    return [
        *TILE_CONFIG_NAMES,
        *(f"output_bounds_{d}/shape_{d}" for d in range(MAX_DIMS)),
        *(f"log2_kernel_bounds_{d}" for d in range(MAX_DIMS)),
        *(f"log2_output_bounds_{d}" for d in range(MAX_DIMS)),
        "log2_num_tiles",
        "lane_pad_ratio",
        "sublane_pad_ratio",
        "root_rank",
        *(f"root_shape_{d}" for d in range(MAX_DIMS)),
        *_graph_aggregate_names(),
    ]


def tile_features(graph: TileGraph) -> npt.NDArray[np.float32]:
    """Per-config tile features.

    Columns (:func:`tile_feature_names`), with the kernel's output = the last node flagged ``is_root`` (else the
    last node), ``rank`` = its number of positive shape dims, dims counted as stored (0 = major-most):

    * the 24 ``config_feat`` columns as stored (kernel, output, input bounds: dims 0-5, sum, product);
    * ``output_bounds_d / shape_d`` for d = 0..5 (0 where either is not positive);
    * ``log2(1 + kernel_bounds_d)`` and ``log2(1 + output_bounds_d)`` for d = 0..5;
    * ``log2_num_tiles``: ``log2(prod_d ceil(shape_d / output_bounds_d))`` over the dims ``d < rank`` with a
      positive bound;
    * ``lane_pad_ratio`` / ``sublane_pad_ratio``: the tile of the minor-most output dim (``rank - 1``) rounded up
      to a multiple of 128, and of the next dim (``rank - 2``) rounded up to 8, divided by the tile itself: the
      TPU pads registers to (8, 128), so 1 means no waste; 1 where that dim or its bound is missing;
    * ``root_rank`` and the root's shape dims 0..5;
    * graph aggregates: node and edge counts, ``sum log2(1 + shape product)`` over nodes, and the count of each
      opcode of :data:`FREQUENT_OPCODES` (including convolution and dot).

    Args:
        graph: a tile graph.

    Returns:
        float32 ``[C, F]`` with ``F = len(tile_feature_names())``.
    """
    shape = graph.node_feat[tile_root(graph.node_feat), COLS_SHAPE].astype(np.float64)
    rank = int((shape > 0).sum())
    cfg = graph.config_feat.astype(np.float64)
    out_b = cfg[:, COLS_OUTPUT_BOUNDS][:, :MAX_DIMS]
    ker_b = cfg[:, COLS_KERNEL_BOUNDS][:, :MAX_DIMS]
    c = graph.num_configs
    valid = (out_b > 0) & (shape > 0)
    ratio = np.divide(out_b, shape, out=np.zeros_like(out_b), where=valid)
    tiles = np.divide(shape, out_b, out=np.ones_like(out_b), where=valid)
    log_tiles = np.log2(np.ceil(tiles)).sum(axis=1)

    def pad_ratio(dim: int, multiple: int) -> npt.NDArray[np.float64]:
        if dim < 0:
            return np.ones(c)
        b = out_b[:, dim]
        padded = np.ceil(b / multiple) * multiple
        return np.divide(padded, b, out=np.ones(c), where=b > 0)

    per_graph = np.concatenate([[rank], shape, _graph_aggregates(graph)])
    x = np.concatenate([
        cfg, ratio, _log2_size(ker_b), _log2_size(out_b), log_tiles[:, None],
        pad_ratio(rank - 1, LANE)[:, None], pad_ratio(rank - 2, SUBLANE)[:, None],
        np.broadcast_to(per_graph, (c, per_graph.size)),
    ], axis=1)
    return x.astype(np.float32)


# --------------------------------------------------------------------------------------------------------------
# Layout
# --------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LayoutContext:
    """What the layout features need of a graph besides its configs, computed once per graph.

    Attributes:
        type_positions: per :data:`CONFIG_NODE_TYPES` entry, int64 positions (into ``node_config_ids``) of the
            configurable nodes of that type.
        size: float64 ``[NC]``, ``log2(1 + shape product)`` of each configurable node.
        link_producer: int64 ``[P]``, positions of the producer A of each link.
        link_consumer: int64 ``[P]``, positions of the consumer B of each link.
        per_graph: float64 ``[G]``, the graph aggregate columns.
    """

    type_positions: tuple[npt.NDArray[np.int64], ...]
    size: npt.NDArray[np.float64]
    link_producer: npt.NDArray[np.int64]
    link_consumer: npt.NDArray[np.int64]
    per_graph: npt.NDArray[np.float64]


def layout_links(graph: LayoutGraph) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Producer-consumer pairs of configurable nodes whose layouts must meet.

    From each configurable node A a search follows data flow (producer to consumer) through non-configurable
    nodes whose output shape dims equal A's (elementwise chains keep the tensor, and so its layout); the first
    configurable node B met on each path forms a link (A, B), and the search does not pass beyond B. If the
    layout A writes differs from the one B reads, the compiler must insert a copy on that path.

    Args:
        graph: a layout graph.

    Returns:
        ``(producer, consumer)``: int64 ``[P]`` each, positions into ``node_config_ids``, sorted by (A, B),
        without repeats.
    """
    n = graph.num_nodes
    ids = graph.node_config_ids
    position = np.full(n, -1, dtype=np.int64)
    position[ids] = np.arange(ids.size)
    consumer, producer = graph.edge_index[:, 0], graph.edge_index[:, 1]
    order = np.argsort(producer, kind="stable")
    starts = np.searchsorted(producer[order], np.arange(n + 1))
    consumers_sorted = consumer[order]
    shapes = graph.node_feat[:, COLS_SHAPE]
    pairs: set[tuple[int, int]] = set()
    for a_pos, a in enumerate(ids.tolist()):
        seen = {a}
        queue = deque([a])
        while queue:
            u = queue.popleft()
            for v in consumers_sorted[starts[u]:starts[u + 1]].tolist():
                if v in seen:
                    continue
                seen.add(v)
                if position[v] >= 0:
                    pairs.add((a_pos, int(position[v])))
                elif np.array_equal(shapes[v], shapes[a]):
                    queue.append(v)
    links = np.array(sorted(pairs), dtype=np.int64).reshape(-1, 2)
    return links[:, 0], links[:, 1]


def layout_context(graph: LayoutGraph) -> LayoutContext:
    """Precompute the per-graph parts of :func:`layout_features` (links, node types, sizes, aggregates)."""
    ops = graph.node_opcode[graph.node_config_ids]
    positions = tuple(np.flatnonzero(ops == op).astype(np.int64) for _, op in CONFIG_NODE_TYPES)
    producer, consumer = layout_links(graph)
    per_graph = np.concatenate([
        _graph_aggregates(graph), [graph.num_config_nodes], [p.size for p in positions], [producer.size],
    ])
    return LayoutContext(
        type_positions=positions,
        size=_log2_size(graph.node_feat[graph.node_config_ids, COL_SHAPE_PRODUCT]),
        link_producer=producer,
        link_consumer=consumer,
        per_graph=per_graph,
    )


def layout_feature_names() -> list[str]:
    """Column names of :func:`layout_features`, in order."""
    names: list[str] = []
    for t, _ in CONFIG_NODE_TYPES:
        names += [f"{t}_default_count", f"{t}_default_size"]
        for slot, _ in LAYOUT_SLOTS:
            for v in MINOR_VALUES:
                names += [f"{t}_{slot}_minor={v}_count", f"{t}_{slot}_minor={v}_size"]
    names += ["nondefault_count", "nondefault_size",
              "link_disagree_count", "link_disagree_size", "link_disagree_both_set_count"]
    names += [*_graph_aggregate_names(), "graph_configurable_nodes",
              *(f"graph_configurable_{t}" for t, _ in CONFIG_NODE_TYPES), "graph_links"]
    return names


def _layout_block(block: npt.NDArray[np.float32], ctx: LayoutContext) -> npt.NDArray[np.float64]:
    is_default = (block == -1).all(axis=2)
    cols: list[npt.NDArray[np.float64]] = []
    for pos in ctx.type_positions:
        w = ctx.size[pos]
        d = is_default[:, pos]
        cols += [d.sum(axis=1), d @ w]
        for _, col in LAYOUT_SLOTS:
            minor = block[:, pos, col]
            for v in MINOR_VALUES:
                hit = minor == v
                cols += [hit.sum(axis=1), hit @ w]
    cols += [(~is_default).sum(axis=1), (~is_default) @ ctx.size]
    out_minor = block[:, ctx.link_producer, 0]
    in_minor = block[:, ctx.link_consumer, 6]
    disagree = out_minor != in_minor
    cols += [disagree.sum(axis=1), disagree @ ctx.size[ctx.link_producer],
             (disagree & (out_minor != -1) & (in_minor != -1)).sum(axis=1)]
    x = np.stack([np.asarray(c, dtype=np.float64) for c in cols], axis=1)
    return np.concatenate([x, np.broadcast_to(ctx.per_graph, (x.shape[0], ctx.per_graph.size))], axis=1)


def layout_features(graph: LayoutGraph, rows: RowSelection = None, *, context: LayoutContext | None = None,
                    block_rows: int | None = None) -> npt.NDArray[np.float32]:
    """Per-config layout features, computed block by block.

    Columns (:func:`layout_feature_names`); "size" columns weight each node by ``log2(1 + shape product)``:

    * per node type t in conv, dot, reshape:
      ``{t}_default_count/size``: nodes left at the compiler's default (all 18 values -1);
      ``{t}_{slot}_minor={v}_count/size`` for slot in output, input, kernel (columns 0, 6, 12: the minor-most
      dim of each tensor) and v in -1..5: nodes whose slot holds v;
    * ``nondefault_count/size``: the distance from the default config (nodes set explicitly);
    * ``link_disagree_count/size``: links (A, B) of :func:`layout_links` where A's output minor-most dim
      (column 0) differs from B's input minor-most dim (column 6), i.e. likely inserted copies, weighted by A's
      size; ``link_disagree_both_set_count``: the same, counting only links where both values are set (not -1);
    * graph aggregates (same for every config): node and edge counts, ``sum log2(1 + shape product)``, the
      opcode counts of :data:`FREQUENT_OPCODES`, configurable nodes in all and per type, and the number of links.

    Args:
        graph: a layout graph.
        rows: configs to compute (as for :meth:`LayoutGraph.config_features`); ``None`` for all, streamed.
        context: :func:`layout_context` of the graph, if already computed.
        block_rows: configs per block (default: the reader's block size).

    Returns:
        float32 ``[len(rows), F]`` (``[C, F]`` for ``rows=None``) with ``F = len(layout_feature_names())``.
    """
    ctx = layout_context(graph) if context is None else context
    if rows is None:
        out = np.zeros((graph.num_configs, len(layout_feature_names())), dtype=np.float32)
        for first, block in graph.iter_config_blocks(block_rows):
            out[first: first + block.shape[0]] = _layout_block(block, ctx)
        return out
    if isinstance(rows, slice):
        rows = np.arange(graph.num_configs)[rows]
    rows = np.asarray(rows)
    if rows.dtype == np.bool_:
        rows = np.flatnonzero(rows)
    step = block_rows or max(1, graph.block_bytes // max(1, graph.num_config_nodes * 18 * 4))
    parts = [_layout_block(graph.config_features(rows[i: i + step]), ctx) for i in range(0, rows.size, step)]
    if not parts:
        return np.zeros((0, len(layout_feature_names())), dtype=np.float32)
    return np.concatenate(parts).astype(np.float32)
