"""Tabular features of tile:xla configs for gradient-boosted trees: one row per config (:func:`tile_features`).

The columns are the 24 tile-size config columns, the share of the tiled array a tile covers (bounds count hardware
tiles, :mod:`competition.hlo.tiles`), log2 tile sizes, the number of tiles, what a tile holds in on-chip memory,
how a matrix kernel's kernel is cut, and graph aggregates (:func:`features.tabular.graph_aggregates`). The array a
config cuts is found by its shape (:func:`tiled_array`). Every column is named by :func:`tile_feature_names`
(same order as the matrix); the docstring of :func:`tile_features` describes each group.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from competition.hlo.tiles import granules
from competition.opcodes import CONVOLUTION, DOT, PARAMETER
from competition.reader import TileGraph
from competition.schema import (
    COL_IS_ROOT,
    COL_SHAPE_PRODUCT,
    COLS_KERNEL_BOUNDS,
    COLS_LAYOUT,
    COLS_OUTPUT_BOUNDS,
    COLS_SHAPE,
    MAX_RANK,
    element_itemsize,
)
from features.tabular import graph_aggregate_names, graph_aggregates, log2_size, pad_up

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
    padded = pad_up(elems, array.granules)
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
    return np.stack([log2_size(b.tile_bytes), log2_size(operand_bytes),
                     log2_size(2.0 * (b.tile_bytes + operand_bytes)), log2_size(b.padded_elements)], axis=1)


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
    out[:, 2] = log2_size(operand_bytes)
    out[:, 3] = log2_size(2.0 * (b.tile_bytes + operand_bytes))
    if cut is None:
        return out
    kernel, elems = cut
    kernel_tile = pad_up(elems, kernel.granules).prod(axis=1) * kernel.itemsize
    kernel_bytes = float(kernel.dims.prod()) * kernel.itemsize
    share = b.dim_share
    minor = share[:, -1]
    major = share[:, :-1].prod(axis=1) if share.shape[1] > 1 else np.ones(c)
    contract = np.minimum((elems / kernel.dims).prod(axis=1) / np.maximum(minor, 1e-12), 1.0)
    input_fp = max(b.param_bytes - kernel_bytes, 0.0) * major * contract
    out[:, 0] = log2_size(kernel_tile)
    out[:, 1] = log2_size(kernel_tile)
    out[:, 2] = log2_size(input_fp)
    out[:, 3] = log2_size(2.0 * (b.tile_bytes + kernel_tile + input_fp))
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
        *graph_aggregate_names(),
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
    return np.stack([log2_size(columns[:, 0]), columns[:, 1]], axis=1)


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
      opcode of :data:`features.tabular.FREQUENT_OPCODES` (including convolution and dot).

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
    per_graph = np.concatenate([[rank], dims, graph_aggregates(graph)])
    x = np.concatenate([
        cfg, share, log2_size(ker_b), log2_size(out_b), np.log2(raw.num_tiles)[:, None],
        tile_memory(graph.node_feat, graph.node_opcode, graph.config_feat, raw=raw),
        _matrix_memory(raw, cut), _kernel_columns(_cut_columns(cut, c)),
        np.broadcast_to(per_graph, (c, per_graph.size)),
    ], axis=1)
    return x.astype(np.float32)
