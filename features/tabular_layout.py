"""Tabular features of layout:* configs for gradient-boosted trees: one row per config (:func:`layout_features`).

Per configurable-node type (convolution, dot, reshape) counts of the chosen layouts, the distance from the
compiler's default, a link-disagreement count that stands in for the copies the compiler inserts between producer
and consumer layouts (:func:`layout_links`), how the convolution and dot outputs pad on the TPU's (8, 128) tiles
under each config's layouts (:func:`padding_table`), and graph aggregates
(:func:`features.tabular.graph_aggregates`). What a graph needs besides its configs is computed once
(:func:`layout_context`). Configs are streamed in blocks (a large graph's ``node_config_feat`` is never
materialised whole), each reduced to one byte per node and slot, and the columns are numpy reductions over a few
hundred configs at a time: no loop over configs.

Every column is named by :func:`layout_feature_names` (same order as the matrix); the docstring of
:func:`layout_features` describes each group.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator
from contextlib import closing
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from competition.opcodes import CONVOLUTION, DOT, RESHAPE
from competition.reader import LayoutGraph, RowSelection
from competition.schema import (
    COL_FEATURE_GROUP_COUNT,
    COL_SHAPE_PRODUCT,
    COLS_CONV_DIMS,
    COLS_LAYOUT,
    COLS_SHAPE,
    CONV_INPUT_FEATURE,
    CONV_KERNEL_INPUT_FEATURE,
    CONV_KERNEL_OUTPUT_FEATURE,
    CONV_OUTPUT_FEATURE,
    LAYOUT_SLOT_COLUMNS,
    MAX_RANK,
    TPU_LANES,
    TPU_SUBLANES,
)
from features.tabular import graph_aggregate_names, graph_aggregates, log2_size, pad_up

CONFIG_NODE_TYPES: tuple[tuple[str, int], ...] = (("conv", CONVOLUTION), ("dot", DOT), ("reshape", RESHAPE))
"""Configurable node types with their opcode ids, in column order."""

PADDING_NODE_TYPES: tuple[str, ...] = ("conv", "dot")
"""The :data:`CONFIG_NODE_TYPES` whose output padding has columns (:func:`layout_feature_names`), in column order:
a real graph's runtime follows how its convolutions' and dots' outputs pad on (8, 128) tiles."""


MINOR_VALUES: tuple[int, ...] = (-1, 0, 1, 2, 3, 4, 5)
"""Values a minor-most slot can hold: -1 (unset) or a dimension index."""

_SLOT_STRIDE = 6
"""The slots of :data:`LAYOUT_SLOT_COLUMNS` start every 6 columns of a config row (at 0, 6, 12)."""
assert tuple(col for _, col in LAYOUT_SLOT_COLUMNS) == tuple(range(0, 18, _SLOT_STRIDE))

_N_TYPES = len(CONFIG_NODE_TYPES)
_N_CODES = len(MINOR_VALUES)
"""Codes ``0..6`` stand for the minor-most values ``-1..5`` (code = value + 1)."""

_HIST_ROWS = 1 + len(LAYOUT_SLOT_COLUMNS) * _N_CODES
"""Histogram rows per node type: the default flag, then (slot, code) in column order."""

_LANE = 255
"""Longest run of nodes or links summed at once: runs are added up 8 configs at a time in the byte lanes of a
uint64, and a byte must not overflow."""

_NAN_OUT, _NAN_IN = 126, 127
"""Codes of NaN in the output and input slots: different, so that NaN agrees with nothing, itself included.
No output slot holds the code 127 (other values have codes up to 125)."""

_LINK_RUN_LENGTHS = np.array([*range(1, 9), 10, 12, 15, 19, 24, 30, 37, 46, 58, 72, 90, 112, 140, 175, 219, 255])
"""Lengths runs of links are padded to (at most 25% more rows): one group of runs per length."""

_PLANE_BYTES = 1 << 21
"""Bytes of one ``[NC, R]`` int8 code plane: sets the configs per compute block ``R`` (64 to 1024)."""

_LINK_CHUNK_BYTES = 1 << 19
"""Bytes of one ``[links, R]`` int8 gather: links are compared about this many at a time."""

_ENCODE_ROWS = 8192
"""(config, node) rows of float32 ``[.., 18]`` encoded per step (590 KB: the temporaries stay in cache), rounded
down to whole configs (one config at least)."""

_TWO_MINUS_ONES = np.array([-1, -1], dtype=np.float32).view(np.uint64)[0]
_EIGHT_TRUE = np.ones(8, dtype=np.bool_).view(np.uint64)[0]


@dataclass(frozen=True)
class RunGroups:
    """Runs of consecutive rows that are summed together, at most 255 rows each (the sums are taken in byte
    lanes, 8 configs per uint64), laid out so that runs of one length are side by side: a group of them is
    summed by one reshape.

    Attributes:
        items: int64 ``[S]``, the rows of each run that stand for something (a node, a link).
        length: int64 ``[S]``, rows per run, ascending: ``items`` and padding rows that add nothing to the sums
            (runs of links are padded to a few lengths, so that there are few groups).
        groups: int64 ``[G, 4]``, per group of runs of one length: first run, number of runs, run length, and
            first row.
    """

    items: npt.NDArray[np.int64]
    length: npt.NDArray[np.int64]
    groups: npt.NDArray[np.int64]


@dataclass(frozen=True)
class LayoutContext:
    """What the layout features need of a graph besides its configs, computed once per graph.

    The configs are reduced to int8 code planes ``[NC, R]`` (R configs side by side; codes 0..6 for the
    minor-most values -1..5), whose rows are the configurable nodes ordered so that nodes of one type and size
    are consecutive rows: their counts are a sum over a run of rows.

    Attributes:
        type_positions: per :data:`CONFIG_NODE_TYPES` entry, int64 positions (into ``node_config_ids``) of the
            configurable nodes of that type.
        size: float64 ``[NC]``, ``log2(1 + shape product)`` of each configurable node.
        link_producer: int64 ``[P]``, positions of the producer A of each link.
        link_consumer: int64 ``[P]``, positions of the consumer B of each link.
        per_graph: float64 ``[G]``, the graph aggregate columns.
        node_order: int64 ``[NC]``, the positions in code-plane row order.
        node_runs: runs of code-plane rows of one type and size.
        node_run_size: float64 ``[S]``, the size of each node run's nodes.
        node_run_weights: float64 ``[S, 2T]``, per node run and type t of :data:`CONFIG_NODE_TYPES`: columns
            ``2t, 2t + 1`` hold ``(1, size)`` for a run of type t, ``(0, 0)`` otherwise.
        link_consumer_rows: int64 ``[P']``, the code-plane row of each link's consumer, links of one run side by
            side; padding rows point at row ``NC``, which matches nothing.
        link_runs: runs of links of one producer.
        link_run_producer: int64 ``[L]``, the code-plane row of each link run's producer.
        link_run_size: float64 ``[L]``, the size of each link run's producer.
        pad_positions: int64 ``[P]``, positions (into ``node_config_ids``) of the nodes of the
            :data:`PADDING_NODE_TYPES` (convolutions, then dots).
        pad_log2: float64 ``[P * 49]``, per such node p and output config values ``(m, s)`` (the two most-minor
            dims, config columns 0 and 1, each -1..5): ``log2`` of the output's occupancy at flat index
            ``49 p + 7 (m + 1) + (s + 1)`` (:func:`padding_table`).
        pad_excess: float64 ``[P * 49]``, the same index: 1 where that occupancy exceeds the node's smallest.
        pad_weights: float64 ``[P, 2 K]`` (K padding types): columns ``2k, 2k + 1`` hold ``(size, 1)`` for a
            node of type k, ``(0, 0)`` otherwise.
        pad_waste: float64 ``[P * 49]``, indexed as ``pad_log2``: the node's padded output elements beyond its
            cheapest layout's, over the cheapest padded elements of all P nodes (``out_pad_waste_share``).
        pad_work_waste: float64 ``[P * 49]``, indexed as ``pad_log2``: the node's work times its occupancy to the
            power :data:`PAD_COST_EXPONENT` beyond its cheapest layout's, over the same cost of all P nodes at their
            cheapest (``out_pad_work_share``).
    """

    type_positions: tuple[npt.NDArray[np.int64], ...]
    size: npt.NDArray[np.float64]
    link_producer: npt.NDArray[np.int64]
    link_consumer: npt.NDArray[np.int64]
    per_graph: npt.NDArray[np.float64]
    node_order: npt.NDArray[np.int64]
    node_runs: RunGroups
    node_run_size: npt.NDArray[np.float64]
    node_run_weights: npt.NDArray[np.float64]
    link_consumer_rows: npt.NDArray[np.int64]
    link_runs: RunGroups
    link_run_producer: npt.NDArray[np.int64]
    link_run_size: npt.NDArray[np.float64]
    pad_positions: npt.NDArray[np.int64]
    pad_log2: npt.NDArray[np.float64]
    pad_excess: npt.NDArray[np.float64]
    pad_weights: npt.NDArray[np.float64]
    pad_waste: npt.NDArray[np.float64]
    pad_work_waste: npt.NDArray[np.float64]


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


def _run_groups(*keys: npt.NDArray[Any], lengths: npt.NDArray[np.int64] | None = None,
                ) -> tuple[npt.NDArray[np.int64], RunGroups]:
    """Runs of equal consecutive ``keys`` (arrays of one length), cut every 255 rows, ordered by length.

    Args:
        keys: arrays of one length, equal keys consecutive.
        lengths: ascending run lengths to pad each run to (the first one not shorter), ending with 255;
            ``None`` for no padding.

    Returns:
        ``(rows, runs)``: ``rows[i]`` is the index (into ``keys``) of row ``i`` of the new order, -1 for padding.
    """
    n = keys[0].size
    change = np.zeros(n, dtype=np.bool_)
    change[:1] = True
    for k in keys:
        change[1:] |= k[1:] != k[:-1]
    starts = np.flatnonzero(change)
    pieces = -(-np.diff(np.append(starts, n)) // _LANE)
    first_piece = np.repeat(np.cumsum(pieces) - pieces, pieces)
    starts = np.repeat(starts, pieces) + (np.arange(int(pieces.sum())) - first_piece) * _LANE
    items = np.diff(np.append(starts, n)).astype(np.int64)
    length = items if lengths is None else lengths[np.searchsorted(lengths, items)]
    by_length = np.argsort(length, kind="stable")
    starts, items, length = starts[by_length], items[by_length], length[by_length].astype(np.int64)
    first_row = np.cumsum(length) - length
    run = np.repeat(np.arange(items.size), items)
    offset = np.arange(n) - np.repeat(np.cumsum(items) - items, items)
    rows = np.full(int(length.sum()), -1, dtype=np.int64)
    rows[first_row[run] + offset] = starts[run] + offset
    group = np.flatnonzero(np.diff(length, prepend=-1) != 0)
    count = np.diff(np.append(group, length.size))
    groups = np.stack([group, count, length[group], first_row[group]], axis=1).astype(np.int64).reshape(-1, 4)
    return rows, RunGroups(items=items, length=length, groups=groups)


def _occupancy(dims: npt.NDArray[np.float64], rank: npt.NDArray[np.int64], minor: npt.NDArray[np.int64],
               second: npt.NDArray[np.int64]) -> npt.NDArray[np.float64]:
    """Padded over logical elements of arrays ``dims`` ``[P, 6]`` of ``rank`` dims whose most-minor dim is
    ``minor`` (padded to a multiple of 128) and second-most-minor ``second`` (to a multiple of 8; none for rank 1):
    the other dims are not padded, so only those two count. Rank 0 (a scalar): 1."""
    rows = np.arange(dims.shape[0])
    a = dims[rows, np.clip(minor, 0, MAX_RANK - 1)]
    b = dims[rows, np.clip(second, 0, MAX_RANK - 1)]
    occ = pad_up(a, TPU_LANES) / a * np.where(rank >= 2, pad_up(b, TPU_SUBLANES) / b, 1.0)
    return np.where(rank >= 1, occ, 1.0)


def padding_table(node_feat: npt.NDArray[np.floating]) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.bool_]]:
    """Per node (rows of ``node_feat``), the output's occupancy on (8, 128) tiles for every pair of output config
    values: ``(log2 occupancy, exceeds the node's smallest)``, each ``[P, 7, 7]`` indexed by ``(m + 1, s + 1)``
    for the config's two most-minor output dims ``m, s`` (columns 0 and 1, each -1..5).

    The output's dims are node_feat columns 21..26, its rank the number of leading positive ones; occupancy is
    the padded over the logical elements, padding the most-minor dim to a multiple of 128 and the second-most-minor
    to a multiple of 8 (:func:`competition.synthetic.physics.physical_elements`). The dims the pair names:

    * ``m`` not a dim of the array (-1: left to the compiler): the node's own layout, the first two entries of its
      minor-to-major columns 134, 135, if they are two distinct dims of the array (one for rank 1), else row-major
      ``(rank - 1, rank - 2)``;
    * ``m`` a dim but ``s`` not a dim, or ``s = m``: ``m`` with the own layout's first dim other than ``m``.

    Every pair of distinct dims is an entry, so the smallest occupancy of the table is the node's cheapest layout.
    """
    dims = np.asarray(node_feat[:, COLS_SHAPE], dtype=np.float64)
    p = dims.shape[0]
    rank = np.cumprod(dims > 0, axis=1).sum(axis=1).astype(np.int64)
    own = np.asarray(node_feat[:, COLS_LAYOUT.start:COLS_LAYOUT.start + 2], dtype=np.float64)
    own_ok = (own == np.round(own)) & (own >= 0) & (own < rank[:, None])
    usable = np.where(rank >= 2, own_ok.all(axis=1) & (own[:, 0] != own[:, 1]), own_ok[:, 0])
    own_m = np.where(usable, own[:, 0], rank - 1).astype(np.int64)
    own_s = np.where(usable, own[:, 1], rank - 2).astype(np.int64)
    occ = np.empty((p, len(MINOR_VALUES), len(MINOR_VALUES)))
    for i, m in enumerate(MINOR_VALUES):
        for j, s in enumerate(MINOR_VALUES):
            m_dim = (m >= 0) & (m < rank)
            s_dim = (s >= 0) & (s < rank) & (s != m)
            minor = np.where(m_dim, m, own_m)
            second = np.where(m_dim, np.where(s_dim, s, np.where(own_m != m, own_m, own_s)), own_s)
            occ[:, i, j] = _occupancy(dims, rank, minor, second)
    smallest = occ.min(axis=(1, 2), keepdims=True, initial=np.inf)
    return np.log2(occ), occ > smallest * (1.0 + 1e-9)


PAD_COST_EXPONENT: float = 1.5
"""``out_pad_work_share`` charges a convolution's or dot's work times its output occupancy to this power. The
real alexnet graph's two largest layout effects order the power (lab/journal.md, "the real graph's tail ranked
in reverse"): its [11, 11, 3, 64] kernel gradient with the 3 minor (a tiny output from large operands) slows the
program several times more than 8 forward convolutions with their batch minor, which pad less but do more work
together. Plain wasted work (power 1) ranks the second above the first; 1.5 ranks them in the real order, 2
overshoots the real ratio between them."""


def node_work(node_feat: npt.NDArray[np.floating], node_opcode: npt.NDArray[np.integer],
              edge_index: npt.NDArray[np.integer], nodes: npt.NDArray[np.integer]) -> npt.NDArray[np.float64]:
    """The multiply-adds of each convolution or dot of ``nodes`` (node ids), from the shapes of the node and of its
    first two producers (the file does not keep operand order; one producer counts twice).

    A convolution whose producers fit its dimension numbers (the kernel's output feature size is the output's
    feature size, the input's feature size the kernel's input feature size), either way round, gets exactly
    ``|out| * |kernel| / (kernel output features * feature groups)``, forward and gradient convolutions alike.
    Any other node gets ``sqrt(|out| * |a| * |b|)`` of the three element counts: exact for a dot without batch
    dims (``M * K * N``), and the square root of the batch size above it with them.
    """
    products = np.maximum(np.asarray(node_feat[:, COL_SHAPE_PRODUCT], dtype=np.float64), 1.0)
    nodes = np.asarray(nodes, dtype=np.int64)
    consumer = np.asarray(edge_index[:, 0], dtype=np.int64)
    producer = np.asarray(edge_index[:, 1], dtype=np.int64)
    sel = np.isin(consumer, nodes)
    consumer, producer = consumer[sel], producer[sel]
    order = np.lexsort((producer, consumer))
    consumer, producer = consumer[order], producer[order]
    start, stop = np.searchsorted(consumer, nodes), np.searchsorted(consumer, nodes, side="right")
    last = max(producer.size - 1, 0)
    first = np.where(stop > start, producer[np.minimum(start, last)] if producer.size else -1, -1)
    second = np.where(stop > start + 1, producer[np.minimum(start + 1, last)] if producer.size else -1, first)
    a = np.where(first >= 0, products[np.maximum(first, 0)], 1.0)
    b = np.where(second >= 0, products[np.maximum(second, 0)], a)
    work = np.sqrt(products[nodes] * a * b)
    dims = np.asarray(node_feat[:, COLS_SHAPE], dtype=np.float64)
    conv = np.asarray(node_feat[:, COLS_CONV_DIMS], dtype=np.float64)
    groups = np.maximum(np.asarray(node_feat[:, COL_FEATURE_GROUP_COUNT], dtype=np.float64), 1.0)
    for i in np.flatnonzero((second >= 0) & (np.asarray(node_opcode)[nodes] == CONVOLUTION)).tolist():
        node = int(nodes[i])
        cd = conv[node]
        if not (cd >= 0).all():
            continue
        idx = [int(v) for v in cd[[CONV_INPUT_FEATURE, CONV_KERNEL_INPUT_FEATURE, CONV_KERNEL_OUTPUT_FEATURE,
                                    CONV_OUTPUT_FEATURE]]]
        if max(idx) >= MAX_RANK:
            continue
        in_f, k_in, k_out, out_f = idx
        for inp, ker in ((int(first[i]), int(second[i])), (int(second[i]), int(first[i]))):
            kd, xd, od = dims[ker], dims[inp], dims[node]
            if kd[k_out] > 0 and kd[k_out] == od[out_f] and xd[in_f] == kd[k_in]:
                work[i] = products[node] * products[ker] / kd[k_out] / groups[node]
                break
    return work


def layout_context(graph: LayoutGraph) -> LayoutContext:
    """Precompute the per-graph parts of :func:`layout_features` (links, node types, sizes, aggregates)."""
    ops = graph.node_opcode[graph.node_config_ids]
    positions = tuple(np.flatnonzero(ops == op).astype(np.int64) for _, op in CONFIG_NODE_TYPES)
    producer, consumer = layout_links(graph)
    size = log2_size(graph.node_feat[graph.node_config_ids, COL_SHAPE_PRODUCT])
    per_graph = np.concatenate([
        graph_aggregates(graph), [graph.num_config_nodes], [p.size for p in positions], [producer.size],
    ])
    kind = np.full(size.size, _N_TYPES, dtype=np.int64)  # _N_TYPES: an opcode outside CONFIG_NODE_TYPES
    for t, pos in enumerate(positions):
        kind[pos] = t
    by_kind = np.lexsort((size, kind))
    rows, node_runs = _run_groups(kind[by_kind], size[by_kind])
    order = by_kind[rows].astype(np.int64)
    row_of = np.empty_like(order)
    row_of[order] = np.arange(order.size)
    run_start = np.cumsum(node_runs.length) - node_runs.length
    run_kind, run_size = kind[order][run_start], size[order][run_start]
    weights = np.zeros((run_start.size, 2 * _N_TYPES))
    typed = np.flatnonzero(run_kind < _N_TYPES)
    weights[typed, 2 * run_kind[typed]] = 1.0
    weights[typed, 2 * run_kind[typed] + 1] = run_size[typed]
    link_producer, link_consumer = row_of[producer], row_of[consumer]
    by_producer = np.lexsort((link_consumer, link_producer))
    link_rows, link_runs = _run_groups(link_producer[by_producer], lengths=_LINK_RUN_LENGTHS)
    real = link_rows >= 0
    consumer_rows = np.full(link_rows.size, size.size, dtype=np.int64)  # padding: row NC, which matches nothing
    consumer_rows[real] = link_consumer[by_producer[link_rows[real]]]
    run_first = link_rows[np.cumsum(link_runs.length) - link_runs.length]  # a run starts with a link, not padding
    run_producer = link_producer[by_producer[run_first]].astype(np.int64)
    type_names = [t for t, _ in CONFIG_NODE_TYPES]
    pad_typed = [positions[type_names.index(t)] for t in PADDING_NODE_TYPES]
    pad_positions = np.concatenate([np.zeros(0, dtype=np.int64), *pad_typed]).astype(np.int64)
    pad_feat = graph.node_feat[graph.node_config_ids[pad_positions]]
    pad_log2, pad_excess = padding_table(pad_feat)
    elements = np.maximum(np.asarray(pad_feat[:, COL_SHAPE_PRODUCT], dtype=np.float64), 1.0)[:, None, None]
    least = elements * 2.0 ** pad_log2.min(axis=(1, 2), keepdims=True, initial=np.inf)
    pad_waste = (elements * 2.0 ** pad_log2 - least) / max(float(least.sum()), 1.0)
    work = node_work(graph.node_feat, graph.node_opcode, graph.edge_index, graph.node_config_ids[pad_positions])
    cost = work[:, None, None] * 2.0 ** (PAD_COST_EXPONENT * pad_log2)
    least_cost = cost.min(axis=(1, 2), keepdims=True, initial=np.inf)
    pad_work_waste = (cost - least_cost) / max(float(least_cost.sum()), 1.0)
    pad_weights = np.zeros((pad_positions.size, 2 * len(pad_typed)))
    first = 0
    for k, pos in enumerate(pad_typed):
        pad_weights[first:first + pos.size, 2 * k] = size[pos]
        pad_weights[first:first + pos.size, 2 * k + 1] = 1.0
        first += pos.size
    return LayoutContext(
        type_positions=positions,
        size=size,
        link_producer=producer,
        link_consumer=consumer,
        per_graph=per_graph,
        node_order=order,
        node_runs=node_runs,
        node_run_size=run_size,
        node_run_weights=weights,
        link_consumer_rows=consumer_rows,
        link_runs=link_runs,
        link_run_producer=run_producer,
        link_run_size=size[order][run_producer],
        pad_positions=pad_positions,
        pad_log2=pad_log2.reshape(-1),
        pad_excess=pad_excess.reshape(-1).astype(np.float64),
        pad_weights=pad_weights,
        pad_waste=pad_waste.reshape(-1),
        pad_work_waste=pad_work_waste.reshape(-1),
    )


def layout_feature_names() -> list[str]:
    """Column names of :func:`layout_features`, in order (its docstring defines each group): the per-type
    histograms, the distance from the default, the link columns, the output padding columns
    (``{t}_out_pad_log2_size``, ``{t}_out_pad_excess_count`` for t in conv, dot, then ``out_pad_waste_share``,
    ``out_pad_work_share``),
    then the graph aggregates."""
    names: list[str] = []
    for t, _ in CONFIG_NODE_TYPES:
        names += [f"{t}_default_count", f"{t}_default_size"]
        for slot, _ in LAYOUT_SLOT_COLUMNS:
            for v in MINOR_VALUES:
                names += [f"{t}_{slot}_minor={v}_count", f"{t}_{slot}_minor={v}_size"]
    names += ["nondefault_count", "nondefault_size",
              "link_disagree_count", "link_disagree_size", "link_disagree_both_set_count"]
    names += _padding_names()
    names += [*graph_aggregate_names(), "graph_configurable_nodes",
              *(f"graph_configurable_{t}" for t, _ in CONFIG_NODE_TYPES), "graph_links"]
    return names


def _padding_names() -> list[str]:
    """Names of the output padding columns (:func:`layout_features`): per type of :data:`PADDING_NODE_TYPES`, the
    size-weighted ``log2`` occupancy and the count of nodes padded more than their cheapest layout; then the share
    of padded output elements wasted over all of them, and the share of their work (:func:`node_work`)."""
    return [*(name for t in PADDING_NODE_TYPES for name in (f"{t}_out_pad_log2_size", f"{t}_out_pad_excess_count")),
            "out_pad_waste_share", "out_pad_work_share"]


def _padding_block(raw: npt.NDArray[np.float32], ctx: LayoutContext) -> npt.NDArray[np.float64]:
    """The output padding columns of configs ``raw`` ``[q, NC, 18]``: the output's two most-minor values of the
    convolution and dot nodes (``[q, P, 2]``) looked up in the per-node tables of :func:`padding_table`. A value
    that is not a whole number in 0..5 counts as -1 (the node's own layout)."""
    q, p = raw.shape[0], ctx.pad_positions.size
    if p == 0:
        return np.zeros((q, len(_padding_names())))
    columns = (ctx.pad_positions[:, None] * raw.shape[2] + np.arange(2)).reshape(-1)
    values = np.take(raw.reshape(q, -1), columns, axis=1).reshape(q, p, 2)  # one gather, no [q, NC, 2] copy
    # Casting NaN or huge values to int8 is undefined (and warns): such values fail the check below.
    with np.errstate(invalid="ignore", over="ignore"):
        cast = values.astype(np.int8)
        if not ((cast == values).all() and cast.min() >= MINOR_VALUES[0] and cast.max() <= MINOR_VALUES[-1]):
            whole = (values >= 0) & (values <= MINOR_VALUES[-1]) & (values == np.floor(values))
            cast = np.where(whole, cast, -1).astype(np.int8)
    flat = cast[:, :, 0].astype(np.intp) * len(MINOR_VALUES) + cast[:, :, 1]
    flat += np.arange(p) * len(MINOR_VALUES) ** 2 + len(MINOR_VALUES) + 1  # codes value + 1, per node 49 entries
    k = ctx.pad_weights.shape[1]
    cols = np.empty((q, k + 2))
    cols[:, 0:k:2] = ctx.pad_log2[flat] @ ctx.pad_weights[:, 0::2]
    cols[:, 1:k:2] = ctx.pad_excess[flat] @ ctx.pad_weights[:, 1::2]
    cols[:, k] = ctx.pad_waste[flat].sum(axis=1)
    cols[:, k + 1] = ctx.pad_work_waste[flat].sum(axis=1)
    return cols


def _odd_codes(minor: npt.NDArray[np.float32], cast: npt.NDArray[np.int8]) -> npt.NDArray[np.int8]:
    """Codes of the minor-most values ``minor`` (``[(row, slot)]``, whole configs) where some are not integers in
    -1..5 (unvalidated files).

    Such values get codes from 7 on, equal codes for equal values in every slot; NaN gets :data:`_NAN_OUT` in the
    output slot and :data:`_NAN_IN` elsewhere, so that it agrees with nothing. Codes are compared within one
    config only: numbering the values of whole configs is enough.
    """
    ok = (cast == minor) & (cast >= MINOR_VALUES[0]) & (cast <= MINOR_VALUES[-1])
    codes = np.where(ok, cast + 1, 0).astype(np.int8)
    bad = np.flatnonzero(~ok)
    values = minor[bad]
    nan = np.isnan(values)
    distinct, inverse = np.unique(values[~nan], return_inverse=True)
    if distinct.size > _NAN_OUT - _N_CODES:
        raise ValueError(f"node_config_feat: {distinct.size} distinct minor-most values outside "
                         f"{MINOR_VALUES[0]}..{MINOR_VALUES[-1]} in one block; expected integer layout values "
                         f"(validate the file)")
    odd = np.empty(values.size, dtype=np.int8)
    odd[~nan] = _N_CODES + inverse.reshape(-1)
    odd[nan] = np.where(bad[nan] % len(LAYOUT_SLOT_COLUMNS) == 0, _NAN_OUT, _NAN_IN)
    codes[bad] = odd
    return codes


def _encode(raw: npt.NDArray[np.float32], order: npt.NDArray[np.int64], packed: npt.NDArray[np.uint32]) -> None:
    """Write configs ``raw`` ``[q, NC, 18]`` into ``packed[NC, q]``, rows in ``order``: per (node, config) one
    word of 4 bytes, the codes of the output, input and kernel minor-most values and the default flag (1 where
    all 18 values are -1).

    The default flag compares the 18 values as 9 uint64 with the bits of two -1.0 (the only float equal to -1
    has those bits), then reads the first 8 of the 9 match flags of a row as one uint64 (unaligned).
    """
    q, nc = raw.shape[:2]
    flat = np.ascontiguousarray(raw).reshape(q * nc, 18)
    words = np.empty((q * nc, 4), dtype=np.int8)
    slots = len(LAYOUT_SLOT_COLUMNS)
    step = max(1, _ENCODE_ROWS // max(nc, 1)) * max(nc, 1)  # whole configs: _odd_codes numbers per step
    # Casting NaN or huge values to int8 is undefined (and warns): such values fail the check and take _odd_codes.
    with np.errstate(invalid="ignore", over="ignore"):
        for start in range(0, q * nc, step):
            part = flat[start:start + step]
            n = part.shape[0]
            w = words[start:start + n]
            match = part.view(np.uint64) == _TWO_MINUS_ONES  # [n, 9], rows of 9 bytes
            first8 = np.ndarray((n,), dtype=np.uint64, buffer=match, strides=(9,))  # bytes 0..7 of each row
            np.logical_and(first8 == _EIGHT_TRUE, match[:, 8], out=w[:, 3].view(np.bool_))
            minor = part.reshape(-1, _SLOT_STRIDE)[:, 0].copy()  # columns 0, 6, 12 of each row: [(row, slot)]
            cast = minor.astype(np.int8)
            codes = cast + np.int8(1)  # -1..5 become 0..6; anything else is caught below
            if not ((cast == minor).all() and codes.view(np.uint8).max() < _N_CODES):
                codes = _odd_codes(minor, cast)
            for k in range(slots):
                w[:, k] = codes[k::slots]
    packed[...] = words.view(np.uint32).reshape(q, nc).T[order]


def _unpack(packed: npt.NDArray[np.uint32]) -> npt.NDArray[np.int8]:
    """``[4, NC + 1, R]`` int8 planes (three codes and the default flag) of the words ``packed[NC, R]``, and a
    last row for the padding of link runs, whose input code :data:`_NAN_IN` equals no output code."""
    nc, r = packed.shape
    planes = np.empty((4, nc + 1, r), dtype=np.int8)
    by_byte = packed.view(np.int8).reshape(nc, r, 4)
    for k in range(4):
        planes[k, :nc] = by_byte[:, :, k]
    planes[:, nc] = 0
    planes[1, nc] = _NAN_IN
    return planes


def _run_sums(mask: npt.NDArray[np.bool_], runs: RunGroups) -> npt.NDArray[np.uint8]:
    """``[S, R]``: per run of rows of ``mask[rows, R]`` (R a multiple of 8), its true entries per config."""
    lanes = np.ascontiguousarray(mask).view(np.uint64)  # 8 configs per uint64, one byte each
    sums = np.empty((runs.length.size, lanes.shape[1]), dtype=np.uint64)
    for first, count, length, row in runs.groups.tolist():
        np.add.reduce(lanes[row:row + count * length].reshape(count, length, -1), axis=1,
                      out=sums[first:first + count])
    return sums.view(np.uint8)


def _link_sums(out_plane: npt.NDArray[np.int8], in_plane: npt.NDArray[np.int8],
               ctx: LayoutContext) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.uint8]]:
    """``(agree, unset)``, uint8 ``[L, R]``: per run of links (one producer), the links whose consumer reads the
    minor-most dim the producer writes, and those whose consumer's input is unset (code 0)."""
    runs, r = ctx.link_runs, out_plane.shape[1]
    agree = np.empty((runs.length.size, r // 8), dtype=np.uint64)
    unset = np.empty_like(agree)
    step = max(_LANE, _LINK_CHUNK_BYTES // r)
    for first, count, length, row in runs.groups.tolist():
        per = max(1, step // length)
        for i in range(0, count, per):
            m = min(per, count - i)
            lo = row + i * length
            consumer_in = np.take(in_plane, ctx.link_consumer_rows[lo:lo + m * length], axis=0).reshape(m, length, r)
            producer_out = np.take(out_plane, ctx.link_run_producer[first + i:first + i + m], axis=0)
            np.add.reduce((consumer_in == producer_out[:, None, :]).view(np.uint64), axis=1,
                          out=agree[first + i:first + i + m])
            np.add.reduce((consumer_in == 0).view(np.uint64), axis=1, out=unset[first + i:first + i + m])
    return agree.view(np.uint8), unset.view(np.uint8)


def _code_block(packed: npt.NDArray[np.uint32], n: int, ctx: LayoutContext) -> npt.NDArray[np.float64]:
    """Per-config columns (all but the graph aggregates) of the first ``n`` configs of ``packed[NC, R]``."""
    r = -(-n // 8) * 8
    cols = np.zeros((r, _N_TYPES * 2 * _HIST_ROWS + 5))
    if ctx.size.size == 0:
        return cols[:n]
    planes = _unpack(packed[:, :r])
    weights_t = ctx.node_run_weights.T
    hist = np.empty((_HIST_ROWS, 2 * _N_TYPES, r))
    default_runs = _run_sums(planes[3].view(np.bool_), ctx.node_runs).astype(np.float64)
    hist[0] = weights_t @ default_runs
    for k in range(len(LAYOUT_SLOT_COLUMNS)):
        for v in range(_N_CODES):
            hist[1 + k * _N_CODES + v] = weights_t @ _run_sums(planes[k] == v, ctx.node_runs).astype(np.float64)
    # [j, (t, count|size), r] -> [r, t, j, count|size]: the column order of layout_feature_names().
    width = _N_TYPES * 2 * _HIST_ROWS
    cols[:, :width] = hist.reshape(_HIST_ROWS, _N_TYPES, 2, r).transpose(3, 1, 0, 2).reshape(r, width)
    set_runs = ctx.node_runs.items[:, None] - default_runs
    cols[:, width] = set_runs.sum(axis=0)
    cols[:, width + 1] = ctx.node_run_size @ set_runs
    if ctx.link_consumer_rows.size:
        agree, unset = _link_sums(planes[0], planes[1], ctx)
        disagree = ctx.link_runs.items.astype(np.int16)[:, None] - agree
        # A set producer output: links both set and disagreeing = consumers set minus those agreeing.
        both = (disagree - unset) * (np.take(planes[0], ctx.link_run_producer, axis=0) != 0)
        disagree64 = disagree.astype(np.float64)
        cols[:, width + 2] = disagree64.sum(axis=0)
        cols[:, width + 3] = ctx.link_run_size @ disagree64
        cols[:, width + 4] = both.sum(axis=0, dtype=np.int64)
    return cols[:n]


def _layout_rows(blocks: Iterable[npt.NDArray[np.float32]], n: int, ctx: LayoutContext) -> npt.NDArray[np.float32]:
    """Feature rows of ``n`` configs given as consecutive blocks ``[rows, NC, 18]``."""
    nc = ctx.size.size
    out = np.empty((n, len(layout_feature_names())), dtype=np.float32)
    out[:, out.shape[1] - ctx.per_graph.size:] = ctx.per_graph
    padding = slice(out.shape[1] - ctx.per_graph.size - len(_padding_names()), out.shape[1] - ctx.per_graph.size)
    per_config = padding.start
    cap = int(np.clip(-(-_PLANE_BYTES // max(nc, 1) // 8) * 8, 64, 1024))
    packed = np.zeros((nc, cap), dtype=np.uint32)
    done = filled = 0
    for block in blocks:
        k = 0
        while k < block.shape[0]:
            take = min(cap - filled, block.shape[0] - k)
            if done + filled + take > n:
                raise ValueError(f"layout features: expected {n} configs, read more")
            _encode(block[k:k + take], ctx.node_order, packed[:, filled:filled + take])
            out[done + filled:done + filled + take, padding] = _padding_block(block[k:k + take], ctx)
            filled += take
            k += take
            if filled == cap:
                out[done:done + filled, :per_config] = _code_block(packed, filled, ctx)
                done, filled = done + filled, 0
    if filled:
        out[done:done + filled, :per_config] = _code_block(packed, filled, ctx)
        done += filled
    if done != n:
        raise ValueError(f"layout features: expected {n} configs, read {done}")
    return out


def _selected_blocks(graph: LayoutGraph, rows: npt.NDArray[np.int64],
                     block_rows: int | None) -> Iterator[npt.NDArray[np.float32]]:
    """The configs ``rows`` (ascending, distinct) in one pass over the file, stopping after the last."""
    if rows.size == 0:
        return
    k = 0
    with closing(graph.iter_config_blocks(block_rows)) as blocks:
        for first, block in blocks:
            j = int(np.searchsorted(rows, first + block.shape[0]))
            if j > k:
                yield block[rows[k:j] - first]
                k = j
            if k == rows.size:
                return


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
    * output padding, per node type t in conv, dot (:data:`PADDING_NODE_TYPES`), from the output's two most-minor
      dims (config columns 0, 1) and the node's output dims (node_feat 21..26) through :func:`padding_table`
      (occupancy: padded over logical elements of the output on (8, 128) tiles; a node left to the compiler
      takes its own layout, node_feat 134, 135, or row-major): ``{t}_out_pad_log2_size``, the sum over nodes of
      ``size * log2(occupancy)``; ``{t}_out_pad_excess_count``, the nodes whose occupancy exceeds that of their
      cheapest layout (the smallest over every pair of distinct dims); ``out_pad_waste_share``, over the
      convolution and dot nodes together, the padded elements beyond each node's cheapest layout
      (``elements * (occupancy - cheapest occupancy)``, elements the shape product) over the sum of their cheapest
      padded elements: the share of the graph's matrix-unit output work a config wastes, comparable across graphs;
      ``out_pad_work_share``, the same with each node weighted by its multiply-adds (:func:`node_work`) and its
      occupancy raised to :data:`PAD_COST_EXPONENT`: a small output computed from large operands (a kernel
      gradient) wastes its whole computation when it pads, which the element count does not see;
    * graph aggregates (same for every config): node and edge counts, ``sum log2(1 + shape product)``, the
      opcode counts of :data:`features.tabular.FREQUENT_OPCODES`, configurable nodes in all and per type, and the
      number of links.

    The file is read once, front to back (for ``rows``, up to the last one asked for); each block of configs is
    reduced to int8 codes of columns 0, 6, 12 and a default flag per node, and the columns are computed a few
    hundred configs at a time with numpy reductions over runs of nodes and links (no loop over configs): memory
    stays at a few MB besides the reader's block and the result. The padding columns look the columns 0, 1 of
    the convolution and dot nodes of those configs up in per-node tables of 7 x 7 values (``[configs, P]``).

    Args:
        graph: a layout graph.
        rows: configs to compute (as for :meth:`LayoutGraph.config_features`); ``None`` for all.
        context: :func:`layout_context` of the graph, if already computed.
        block_rows: configs per block read (default: the reader's block size).

    Returns:
        float32 ``[len(rows), F]`` (``[C, F]`` for ``rows=None``) with ``F = len(layout_feature_names())``.

    Raises:
        IndexError: a row outside ``[0, C)``, or a mask of the wrong shape.
    """
    ctx = layout_context(graph) if context is None else context
    if rows is None:
        return _layout_rows((block for _, block in graph.iter_config_blocks(block_rows)), graph.num_configs, ctx)
    if isinstance(rows, slice):
        rows = np.arange(graph.num_configs)[rows]
    rows = np.asarray(rows)
    if rows.dtype == np.bool_:
        if rows.shape != (graph.num_configs,):
            raise IndexError(f"{graph.path}: node_config_feat: mask of shape {rows.shape} for "
                             f"{graph.num_configs} configs")
        rows = np.flatnonzero(rows)
    rows = rows.astype(np.int64).reshape(-1)
    if rows.size and (rows.min() < 0 or rows.max() >= graph.num_configs):
        bad = int(rows[(rows < 0) | (rows >= graph.num_configs)][0])
        raise IndexError(f"{graph.path}: node_config_feat: row {bad} out of range for {graph.num_configs} rows")
    wanted, inverse = np.unique(rows, return_inverse=True)
    x = _layout_rows(_selected_blocks(graph, wanted, block_rows), wanted.size, ctx)
    return x if np.array_equal(wanted, rows) else x[inverse.reshape(-1)]
