"""Tabular per-config features for gradient-boosted trees: one row per config, fixed columns per collection.

* :func:`tile_features` (tile:xla): the 24 tile-size config columns, the share of the tiled array a tile covers
  (bounds count hardware tiles, :mod:`competition.hlo.tiles`), log2 tile sizes, the number of tiles, what a tile
  holds in on-chip memory, and graph aggregates.
* :func:`layout_features` (layout:*): per configurable-node type (convolution, dot, reshape) counts of the chosen
  layouts, the distance from the compiler's default, a link-disagreement count that stands in for the copies the
  compiler inserts between producer and consumer layouts, how the convolution and dot outputs pad on the TPU's
  (8, 128) tiles under each config's layouts, and graph aggregates. Configs are streamed in blocks
  (a large graph's ``node_config_feat`` is never materialised whole), each reduced to one byte per node and
  slot, and the columns are numpy reductions over a few hundred configs at a time: no loop over configs.

Every column is named by :func:`tile_feature_names` / :func:`layout_feature_names` (same order as the matrix);
the docstrings of the two feature functions describe each group. "Size" of a node is
``log2(1 + shape_dimensions_product)`` (node_feat column 28): the copy or relayout cost grows with the tensor.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator
from contextlib import closing
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from competition.hlo.tiles import granules
from competition.opcodes import CONVOLUTION, DOT, OPCODE_IDS, PARAMETER, RESHAPE
from competition.reader import LayoutGraph, RowSelection, TileGraph
from competition.schema import (
    COL_IS_ROOT,
    COL_SHAPE_PRODUCT,
    COLS_KERNEL_BOUNDS,
    COLS_LAYOUT,
    COLS_OUTPUT_BOUNDS,
    COLS_SHAPE,
    LAYOUT_SLOT_COLUMNS,
    MAX_RANK,
    TPU_LANES,
    TPU_SUBLANES,
    element_itemsize,
)

FREQUENT_OPCODES: tuple[str, ...] = (
    "parameter", "constant", "add", "multiply", "subtract", "divide", "maximum", "convert", "broadcast",
    "reshape", "transpose", "reduce", "dot", "convolution", "fusion", "tuple", "get-tuple-element", "select",
    "compare", "exponential", "rsqrt", "slice", "concatenate", "copy", "bitcast", "pad",
)
"""Opcodes counted in the graph aggregates (the convolution and dot counts are among them)."""

CONFIG_NODE_TYPES: tuple[tuple[str, int], ...] = (("conv", CONVOLUTION), ("dot", DOT), ("reshape", RESHAPE))
"""Configurable node types with their opcode ids, in column order."""

PADDING_NODE_TYPES: tuple[str, ...] = ("conv", "dot")
"""The :data:`CONFIG_NODE_TYPES` whose output padding has columns (:func:`layout_feature_names`), in column order:
a real graph's runtime follows how its convolutions' and dots' outputs pad on (8, 128) tiles."""


MINOR_VALUES: tuple[int, ...] = (-1, 0, 1, 2, 3, 4, 5)
"""Values a minor-most slot can hold: -1 (unset) or a dimension index."""

TILE_CONFIG_NAMES: tuple[str, ...] = tuple(
    f"{group}_{d}" for group in ("kernel_bounds", "output_bounds", "input_bounds")
    for d in (*range(MAX_RANK), "sum", "product")
)


def tile_root(node_feat: npt.NDArray[np.float32]) -> int:
    """The node whose output the tile config cuts: the last node flagged ``is_root``, else the last node.

    Nodes are numbered computation by computation, with a fusion's body before the computation calling it, so
    the last root is the root of the outermost computation: the kernel's output.
    """
    roots = np.flatnonzero(node_feat[:, COL_IS_ROOT] > 0)
    return int(roots[-1]) if roots.size else node_feat.shape[0] - 1


@dataclass(frozen=True)
class TiledArray:
    """The array a tile config's bounds cut, read from node features: its dims in physical order (major to minor,
    from the layout columns) and the elements per bound unit of each (:func:`competition.hlo.tiles.granules`).

    Attributes:
        node: the node whose output it is.
        dims: float64 ``[r]``, physical dims.
        granules: float64 ``[r]``, elements per unit.
        itemsize: bytes per element.
    """

    node: int
    dims: npt.NDArray[np.float64]
    granules: npt.NDArray[np.float64]
    itemsize: float

    @property
    def units(self) -> npt.NDArray[np.float64]:
        """Units per dim: the largest bound of each."""
        return np.maximum(np.ceil(self.dims / self.granules), 1.0)

    def elements(self, bounds: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        """The elements per dim a tile of ``bounds`` (``[C, r]``, units) covers; a missing bound (0) the whole
        dim."""
        return np.where(bounds > 0, np.minimum(bounds * self.granules, self.dims), self.dims)


def _physical(node_feat: npt.NDArray[np.floating], node: int) -> npt.NDArray[np.float64]:
    shape = node_feat[node, COLS_SHAPE].astype(np.float64)
    rank = int((shape > 0).sum())
    shape = shape[:rank]
    m2m = node_feat[node, COLS_LAYOUT].astype(np.int64)[:rank]
    if rank <= MAX_RANK and sorted(m2m.tolist()) == list(range(rank)):
        return shape[m2m[::-1]]
    return shape


def tiled_array(node_feat: npt.NDArray[np.floating], bounds: npt.NDArray[np.floating],
                candidates: npt.NDArray[np.bool_] | None = None) -> TiledArray | None:
    """The array ``bounds`` (``[C, 6]``, units, 0 past the rank) cut: among the nodes of as many positive dims as
    the bounds have entries whose units hold every config's bounds, the one with the fewest units (the tightest),
    the last one on ties (nearest the root); ``None`` without bounds or without such a node.

    Real kernels' outputs are often tuples (multi-output fusions) and a reduce walks its operand's space, so the
    array is found by its shape, not taken from the root. ``candidates``: a mask of the nodes to consider.
    """
    b = np.asarray(bounds, dtype=np.float64)
    rank = int((b > 0).any(axis=0).sum()) if b.size else 0
    if rank == 0:
        return None
    need = b[:, :rank].max(axis=0)
    grans = np.asarray(granules(rank), dtype=np.float64)
    ranks = (node_feat[:, COLS_SHAPE] > 0).sum(axis=1)
    mask = ranks == rank if candidates is None else (ranks == rank) & candidates
    best: tuple[float, int] | None = None
    for node in np.flatnonzero(mask):
        dims = _physical(node_feat, int(node))
        units = np.maximum(np.ceil(dims / grans), 1.0)
        if np.all(units >= need):
            key = (float(np.prod(units)), -int(node))
            best = key if best is None else min(best, key)
    if best is None:
        return None
    node = -best[1]
    itemsize = float(element_itemsize(node_feat[node: node + 1])[0]) or 4.0
    return TiledArray(node, _physical(node_feat, node), grans, itemsize)


def _pad_up(x: npt.NDArray[np.float64], multiple: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """``x`` rounded up to a multiple of ``multiple``: a TPU tile dim as its (8, 128) registers hold it."""
    return np.ceil(x / multiple) * multiple


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


TILE_MEMORY_NAMES: tuple[str, ...] = ("log2_tile_bytes", "log2_tile_operand_bytes", "log2_working_set",
                                      "log2_padded_elements")
"""The columns of :func:`tile_memory`, in order."""


@dataclass(frozen=True)
class _TileBytes:
    """What :func:`tile_memory`, :func:`tile_matrix_memory` and :func:`tile_features` share, before the log: the
    tiled array (:func:`tiled_array`; ``None`` without output bounds), per config the padded output tile's bytes, the
    share of each tiled dim a tile covers (``[C, r]``), the number of tiles, all tiles' padded elements; the
    parameters' bytes."""

    array: TiledArray | None
    tile_bytes: npt.NDArray[np.float64]
    dim_share: npt.NDArray[np.float64]
    num_tiles: npt.NDArray[np.float64]
    padded_elements: npt.NDArray[np.float64]
    param_bytes: float

    @property
    def operand_bytes(self) -> npt.NDArray[np.float64]:
        """The parameters' bytes cut like the output: every operand taken as tiled like the output."""
        return self.dim_share.prod(axis=1) * self.param_bytes


def _tile_bytes(node_feat: npt.NDArray[np.floating], node_opcode: npt.NDArray[np.integer],
                config_feat: npt.NDArray[np.floating]) -> _TileBytes:
    """Bounds count hardware tiles of the tiled array's physical dims (:mod:`competition.hlo.tiles`): a tile of
    ``b`` units covers ``min(b * granule, dim)`` elements, padded to whole granules in memory."""
    out_b = np.asarray(config_feat, dtype=np.float64)[:, COLS_OUTPUT_BOUNDS][:, :MAX_RANK]
    array = tiled_array(node_feat, out_b, candidates=np.asarray(node_opcode) != PARAMETER)
    itemsize = element_itemsize(node_feat)
    params = np.asarray(node_opcode) == PARAMETER
    param_bytes = float((node_feat[params, COL_SHAPE_PRODUCT].astype(np.float64) * itemsize[params]).sum())
    c = out_b.shape[0]
    if array is None:  # no output bounds (a kernel the records tile as a whole): one tile of everything
        root = tile_root(node_feat)
        whole = float(node_feat[root, COL_SHAPE_PRODUCT]) * (itemsize[root] or 4.0)
        return _TileBytes(None, np.full(c, whole), np.ones((c, 1)), np.ones(c), np.full(c, whole), param_bytes)
    r = array.dims.size
    elems = array.elements(out_b[:, :r])
    padded = _pad_up(elems, array.granules)
    num_tiles = np.ceil(array.dims / elems).prod(axis=1)
    tile_elems = padded.prod(axis=1)
    return _TileBytes(array, tile_elems * array.itemsize, elems / array.dims, num_tiles, tile_elems * num_tiles,
                      param_bytes)


def tile_memory(node_feat: npt.NDArray[np.floating], node_opcode: npt.NDArray[np.integer],
                config_feat: npt.NDArray[np.floating], *, raw: _TileBytes | None = None) -> npt.NDArray[np.float64]:
    """What one tile of each config holds in on-chip memory, whose overflow (a spill) costs a kernel several times
    its runtime: float64 ``[C, 4]``, columns :data:`TILE_MEMORY_NAMES`, each ``log2(1 + x)`` of

    * the output tile's bytes: the elements its bounds cover in the tiled array (:func:`tiled_array`), each dim
      padded to whole granules as the TPU's (8, 128) registers hold it, times the array's bytes per element;
    * the kernel's parameters' bytes times the share of the tiled array one tile covers: each operand taken as cut
      like the output;
    * twice their sum: the double-buffered working set;
    * the padded elements of all tiles (the padded tile times the number of tiles): the work the units do.

    Raw ``node_feat`` and tile ``config_feat`` (zeros, not -1, where a bound is missing), as stored; bounds in the
    records' units (:mod:`competition.hlo.tiles`). ``raw``: the same arrays' :func:`_tile_bytes`, if the caller has
    it.
    """
    b = _tile_bytes(node_feat, node_opcode, config_feat) if raw is None else raw
    operand_bytes = b.operand_bytes
    return np.stack([_log2_size(b.tile_bytes), _log2_size(operand_bytes),
                     _log2_size(2.0 * (b.tile_bytes + operand_bytes)), _log2_size(b.padded_elements)], axis=1)


TILE_MATRIX_NAMES: tuple[str, ...] = ("log2_kernel_tile_bytes", "log2_kernel_footprint", "log2_input_footprint",
                                      "log2_matrix_working_set")
"""The columns of :func:`tile_matrix_memory`, in order."""


_KernelCut = tuple[TiledArray, npt.NDArray[np.float64]]


def _kernel_cut(node_feat: npt.NDArray[np.floating], node_opcode: npt.NDArray[np.integer],
                config_feat: npt.NDArray[np.floating]) -> _KernelCut | None:
    """The kernel array of a matrix kernel (a convolution or dot in it, with kernel bounds: :func:`tiled_array` of
    the kernel bounds among the parameters) and the elements per dim each config's kernel tile covers (``[C, r]``);
    ``None`` for other kernels or where the kernel array is not found."""
    ker_b = np.asarray(config_feat, dtype=np.float64)[:, COLS_KERNEL_BOUNDS][:, :MAX_RANK]
    opcodes = np.asarray(node_opcode)
    if ker_b.shape[0] == 0 or not np.isin(opcodes, (CONVOLUTION, DOT)).any() or not (ker_b > 0).any():
        return None
    kernel = tiled_array(node_feat, ker_b, candidates=opcodes == PARAMETER)
    if kernel is None:
        return None
    return kernel, kernel.elements(ker_b[:, : kernel.dims.size])


TILE_KERNEL_CUT_NAMES: tuple[str, ...] = ("kernel_chunks", "kernel_tile_share")
"""The columns of :func:`tile_kernel_cut`, in order."""


def tile_kernel_cut(node_feat: npt.NDArray[np.floating], node_opcode: npt.NDArray[np.integer],
                    config_feat: npt.NDArray[np.floating]) -> npt.NDArray[np.float64]:
    """How each config cuts the kernel of a matrix kernel: float64 ``[C, 2]``, columns
    :data:`TILE_KERNEL_CUT_NAMES`:

    * the number of kernel tiles: the product over the kernel array's dims of ``ceil(dim / tile)``, with the
      tile the elements its bounds cover (the output-feature dim's follows the output tile, so this counts the
      chunks a step walks times the output-feature tiles);
    * the share of the kernel one kernel tile covers (1: the whole kernel in one tile).

    A kernel whose tile does not change from step to step stays on chip and is read once (1 chunk), a cut one is
    read again for every output tile, so these say what a TPU's kernel traffic depends on. Kernels without kernel
    bounds (or whose kernel array is not found) get 0 in both. Raw ``node_feat`` and tile ``config_feat`` (zeros,
    not -1, where a bound is missing), as stored.
    """
    return _cut_columns(_kernel_cut(node_feat, node_opcode, config_feat), np.asarray(config_feat).shape[0])


def _cut_columns(cut: _KernelCut | None, num_configs: int) -> npt.NDArray[np.float64]:
    """:func:`tile_kernel_cut` of a kernel's :func:`_kernel_cut`."""
    out = np.zeros((num_configs, len(TILE_KERNEL_CUT_NAMES)))
    if cut is not None:
        kernel, elems = cut
        out[:, 0] = np.ceil(kernel.dims / elems).prod(axis=1)
        out[:, 1] = (elems / kernel.dims).prod(axis=1)
    return out


def tile_matrix_memory(node_feat: npt.NDArray[np.floating], node_opcode: npt.NDArray[np.integer],
                       edge_index: npt.NDArray[np.integer], config_feat: npt.NDArray[np.floating], *,
                       raw: _TileBytes | None = None) -> npt.NDArray[np.float64]:
    """What one step of a matrix kernel (a convolution or dot in it, with kernel bounds) holds on chip: float64
    ``[C, 4]``, columns :data:`TILE_MATRIX_NAMES`, each ``log2(1 + x)`` of

    * the kernel tile's bytes: the elements the kernel bounds cover in the kernel array (:func:`tiled_array` of the
      kernel bounds among the parameters), padded to whole granules, times its bytes per element; 0 without kernel
      bounds;
    * the kernel's footprint per step: the kernel tile (its output-feature dim already follows the output tile's
      most-minor dim, so the tile is what a step needs);
    * the input's footprint per step: the other parameters' bytes times the share of the output's other dims a tile
      covers, times the share of the contracting dims the kernel tile holds (a tile of output rows needs those rows
      of the input, one contracting chunk at a time), taken as the kernel tile's share over the output tile's share
      of its most-minor dim (the kernel's output-feature dim follows it, as in the real records);
    * twice the sum of the padded output tile's bytes and both footprints: the double-buffered working set of a
      step.

    Kernels without kernel bounds (or whose kernel array is not found) get 0 kernel bytes, :func:`tile_memory`'s
    operand bytes as the input footprint and its working set. ``edge_index`` is accepted for the callers' sake.
    ``raw``: the same arrays' :func:`_tile_bytes`, if the caller has it.
    """
    b = _tile_bytes(node_feat, node_opcode, config_feat) if raw is None else raw
    return _matrix_memory(b, _kernel_cut(node_feat, node_opcode, config_feat))


def _matrix_memory(b: _TileBytes, cut: _KernelCut | None) -> npt.NDArray[np.float64]:
    """:func:`tile_matrix_memory` of a kernel's :func:`_tile_bytes` and :func:`_kernel_cut`."""
    operand_bytes = b.operand_bytes
    c = operand_bytes.shape[0]
    out = np.zeros((c, len(TILE_MATRIX_NAMES)))
    out[:, 2] = _log2_size(operand_bytes)
    out[:, 3] = _log2_size(2.0 * (b.tile_bytes + operand_bytes))
    if cut is None:
        return out
    kernel, elems = cut
    kernel_tile = _pad_up(elems, kernel.granules).prod(axis=1) * kernel.itemsize
    kernel_bytes = float(kernel.dims.prod()) * kernel.itemsize
    share = b.dim_share
    minor = share[:, -1]
    major = share[:, :-1].prod(axis=1) if share.shape[1] > 1 else np.ones(c)
    contract = np.minimum((elems / kernel.dims).prod(axis=1) / np.maximum(minor, 1e-12), 1.0)
    input_fp = max(b.param_bytes - kernel_bytes, 0.0) * major * contract
    out[:, 0] = _log2_size(kernel_tile)
    out[:, 1] = _log2_size(kernel_tile)
    out[:, 2] = _log2_size(input_fp)
    out[:, 3] = _log2_size(2.0 * (b.tile_bytes + kernel_tile + input_fp))
    return out


def tile_feature_names() -> list[str]:
    """Column names of :func:`tile_features`, in order."""
    return [
        *TILE_CONFIG_NAMES,
        *(f"output_tile_share_{d}" for d in range(MAX_RANK)),
        *(f"log2_kernel_bounds_{d}" for d in range(MAX_RANK)),
        *(f"log2_output_bounds_{d}" for d in range(MAX_RANK)),
        "log2_num_tiles",
        *TILE_MEMORY_NAMES,
        *TILE_MATRIX_NAMES,
        f"log2_{TILE_KERNEL_CUT_NAMES[0]}", *TILE_KERNEL_CUT_NAMES[1:],
        "tiled_rank",
        *(f"tiled_dim_{d}" for d in range(MAX_RANK)),
        *_graph_aggregate_names(),
    ]


def _output_shares(raw: _TileBytes) -> npt.NDArray[np.float64]:
    """The share of each tiled dim one output tile covers, ``[C, 6]`` (0 past the tiled array's rank)."""
    share = np.zeros((raw.tile_bytes.shape[0], MAX_RANK))
    if raw.array is not None:
        share[:, : raw.array.dims.size] = raw.dim_share
    return share


TILE_SHARE_NAMES: tuple[str, ...] = (*(f"output_tile_share_{d}" for d in range(MAX_RANK)), *TILE_KERNEL_CUT_NAMES)
"""The columns of :func:`tile_shares`, in order."""


def tile_shares(node_feat: npt.NDArray[np.floating], node_opcode: npt.NDArray[np.integer],
                config_feat: npt.NDArray[np.floating]) -> npt.NDArray[np.float64]:
    """What share of its arrays each tile config cuts: float64 ``[C, 8]``, columns :data:`TILE_SHARE_NAMES`: the
    share of each tiled dim one output tile covers (dims 0-5, 0 past the rank; :func:`tiled_array`), then
    :func:`tile_kernel_cut` (the kernel's tiles and the share one covers). The bounds alone do not say it: a bound of
    24 is a whole dim of 192 elements and a third of one of 576. Raw arrays, as stored (zeros where a bound is
    missing)."""
    raw = _tile_bytes(node_feat, node_opcode, config_feat)
    return np.concatenate([_output_shares(raw), tile_kernel_cut(node_feat, node_opcode, config_feat)], axis=1)


def _kernel_columns(columns: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """:func:`tile_kernel_cut` as :func:`tile_features` holds it: the kernel tiles as ``log2(1 + x)``."""
    return np.stack([_log2_size(columns[:, 0]), columns[:, 1]], axis=1)


def tile_features(graph: TileGraph) -> npt.NDArray[np.float32]:
    """Per-config tile features.

    Columns (:func:`tile_feature_names`). Bounds count hardware tiles of the tiled array's physical dims
    (:mod:`competition.hlo.tiles`); the tiled array is found by :func:`tiled_array` (real kernels' roots are often
    tuples), dims counted major to minor:

    * the 24 ``config_feat`` columns as stored (kernel, output, input bounds: dims 0-5, sum, product);
    * ``output_tile_share_d`` for d = 0..5: the share of tiled dim ``d`` one tile covers (0 past the rank);
    * ``log2(1 + kernel_bounds_d)`` and ``log2(1 + output_bounds_d)`` for d = 0..5;
    * ``log2_num_tiles``: ``log2`` of the number of output tiles;
    * what one tile holds in on-chip memory (:func:`tile_memory`), and what one step of a matrix kernel holds
      (:func:`tile_matrix_memory`);
    * how the config cuts a matrix kernel's kernel (:func:`tile_kernel_cut`): ``log2(1 + kernel tiles)`` and the
      share one kernel tile covers;
    * ``tiled_rank`` and the tiled array's physical dims 0..5 (0 past the rank);
    * graph aggregates: node and edge counts, ``sum log2(1 + shape product)`` over nodes, and the count of each
      opcode of :data:`FREQUENT_OPCODES` (including convolution and dot).

    A tile is always whole (8, 128) registers in these units, so no column measures per-config padding waste; a
    kernel's last, partial chunk shows as kernel tiles times ``kernel_tile_share`` above 1.

    Args:
        graph: a tile graph.

    Returns:
        float32 ``[C, F]`` with ``F = len(tile_feature_names())``.
    """
    cfg = graph.config_feat.astype(np.float64)
    out_b = cfg[:, COLS_OUTPUT_BOUNDS][:, :MAX_RANK]
    ker_b = cfg[:, COLS_KERNEL_BOUNDS][:, :MAX_RANK]
    c = graph.num_configs
    raw = _tile_bytes(graph.node_feat, graph.node_opcode, graph.config_feat)
    cut = _kernel_cut(graph.node_feat, graph.node_opcode, graph.config_feat)  # the kernel array, found once
    share = _output_shares(raw)
    dims = np.zeros(MAX_RANK)
    rank = 0
    if raw.array is not None:
        rank = raw.array.dims.size
        dims[:rank] = raw.array.dims
    per_graph = np.concatenate([[rank], dims, _graph_aggregates(graph)])
    x = np.concatenate([
        cfg, share, _log2_size(ker_b), _log2_size(out_b), np.log2(raw.num_tiles)[:, None],
        tile_memory(graph.node_feat, graph.node_opcode, graph.config_feat, raw=raw),
        _matrix_memory(raw, cut), _kernel_columns(_cut_columns(cut, c)),
        np.broadcast_to(per_graph, (c, per_graph.size)),
    ], axis=1)
    return x.astype(np.float32)


# --------------------------------------------------------------------------------------------------------------
# Layout
# --------------------------------------------------------------------------------------------------------------


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
    occ = _pad_up(a, TPU_LANES) / a * np.where(rank >= 2, _pad_up(b, TPU_SUBLANES) / b, 1.0)
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


def layout_context(graph: LayoutGraph) -> LayoutContext:
    """Precompute the per-graph parts of :func:`layout_features` (links, node types, sizes, aggregates)."""
    ops = graph.node_opcode[graph.node_config_ids]
    positions = tuple(np.flatnonzero(ops == op).astype(np.int64) for _, op in CONFIG_NODE_TYPES)
    producer, consumer = layout_links(graph)
    size = _log2_size(graph.node_feat[graph.node_config_ids, COL_SHAPE_PRODUCT])
    per_graph = np.concatenate([
        _graph_aggregates(graph), [graph.num_config_nodes], [p.size for p in positions], [producer.size],
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
    )


def layout_feature_names() -> list[str]:
    """Column names of :func:`layout_features`, in order (its docstring defines each group): the per-type
    histograms, the distance from the default, the link columns, the output padding columns
    (``{t}_out_pad_log2_size``, ``{t}_out_pad_excess_count`` for t in conv, dot, then ``out_pad_waste_share``),
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
    names += [*_graph_aggregate_names(), "graph_configurable_nodes",
              *(f"graph_configurable_{t}" for t, _ in CONFIG_NODE_TYPES), "graph_links"]
    return names


def _padding_names() -> list[str]:
    """Names of the output padding columns (:func:`layout_features`): per type of :data:`PADDING_NODE_TYPES`, the
    size-weighted ``log2`` occupancy and the count of nodes padded more than their cheapest layout; then the share
    of padded output elements wasted over all of them."""
    return [*(name for t in PADDING_NODE_TYPES for name in (f"{t}_out_pad_log2_size", f"{t}_out_pad_excess_count")),
            "out_pad_waste_share"]


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
    cols = np.empty((q, k + 1))
    cols[:, 0:k:2] = ctx.pad_log2[flat] @ ctx.pad_weights[:, 0::2]
    cols[:, 1:k:2] = ctx.pad_excess[flat] @ ctx.pad_weights[:, 1::2]
    cols[:, k] = ctx.pad_waste[flat].sum(axis=1)
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
    * graph aggregates (same for every config): node and edge counts, ``sum log2(1 + shape product)``, the
      opcode counts of :data:`FREQUENT_OPCODES`, configurable nodes in all and per type, and the number of links.

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
