"""Tile-size runtime model of the synthetic world: what a fused kernel costs under a tile config.

The model (constants here and in :mod:`competition.synthetic.physics`):

* A kernel's output (the root's shape) is cut into tiles of ``output_bounds`` (one size per dim; beyond 6 dims the
  leading dims are iterated one at a time). For a convolution or dot root the kernel (operand 1) is cut along its
  contracting (input-feature) dim by ``kernel_bounds``; its other kernel dims are whole. Each tile is one *step*
  per kernel chunk.
* ``time = (steps * TILE_OVERHEAD_NS + max(compute, traffic / bandwidth)) * spill``, where
  - compute is the *padded* work: each tile's most-minor size padded up to 128 lanes and second-minor to 8
    sublanes, each kernel chunk to 8; matrix work (conv/dot) at peak, the other ops of the kernel on the vector unit;
  - traffic is the output written once plus operand re-reads that fall as tiles grow: the input (operand 0) once per
    tile of the output's most-minor dim, the kernel once per tile of the other output dims; other kernels read their
    operands once plus a halo of :data:`HALO` per extra tile;
  - spill is 1 while the double-buffered working set (output tile, input and kernel footprints) fits in 16 MiB
    on-chip memory, and grows by :data:`SPILL_SLOPE` per doubling beyond it (a steep penalty).
* The default config is the compiler's heuristic: the best config under a slightly wrong model of this cost
  (:data:`HEURISTIC_OVERHEAD`, :data:`HEURISTIC_BANDWIDTH`, :data:`HEURISTIC_FILL`), found by exhaustive search (coordinate descent for huge spaces); good, not always the best.
* Sampled configs draw tile sizes among the powers of two up to each dim and the whole dim (lane dim from 128,
  sublane dim from 8, kernel chunk from 8; a dim at most one such tile wide: whole or half), within :data:`SAMPLE_WINDOW` of the
  default's size per dim. A *wide* search (``wide=True``, the full-scale world, whose kernels hold up to about
  10,000 configs as real ones do) also measures the sizes between powers of two (:data:`WIDE_STEPS`), in the same
  window.
* Config rows (24 float32 columns): 0-7 kernel_bounds 0-5, sum, product; 8-15 output_bounds 0-5, sum, product;
  16-23 input_bounds (all 0). Padding 0; an empty list has product 0.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from competition.hlo.ir import ITEMSIZE, Instruction, Module, Shape
from competition.schema import MAX_RANK
from competition.synthetic import physics

TILE_OVERHEAD_NS: float = 60.0
"""Fixed cost of one tile step (pipeline fill, DMA setup), ns."""

HALO: float = 0.02
"""Extra share of a non-matrix kernel's operand bytes re-read per extra tile."""

SPILL_SLOPE: float = 2.0
"""Time multiplier gained per doubling of the working set beyond on-chip memory (x3 at twice, x9 at 16 times)."""

HEURISTIC_OVERHEAD: float = 1.5
"""The compiler's default heuristic believes a tile step costs this many times its true overhead."""

HEURISTIC_BANDWIDTH: float = 1.3
"""The compiler's default heuristic believes memory is this many times faster than it is."""

HEURISTIC_FILL: float = 0.9
"""The compiler's default heuristic keeps a tile's working set within this share of on-chip memory."""

SAMPLE_WINDOW: float = 3.0
"""Sampled tile sizes lie within this factor of the default's, per dim (an autotuner searches around it)."""

WIDE_STEPS: tuple[float, ...] = (1.0, 1.125, 1.25, 1.375, 1.5, 1.625, 1.75, 1.875)
"""Wide search: tile sizes are granule x step x power of two, rounded to a whole number of granules, for these
steps (granule 128 on the lane dim, 8 on the sublane dim and the kernel chunk, 1 elsewhere), besides the powers of
two and the whole dim: eight sizes per octave instead of one."""

EXHAUSTIVE_LIMIT: int = 200_000
"""The default heuristic searches all tile combos up to this many; beyond, coordinate descent from whole dims."""

_FREE = frozenset({"parameter", "constant", "get-tuple-element", "tuple", "bitcast", "reshape", "broadcast"})


def _candidates(size: int, floor: int = 1) -> list[int]:
    """Tile sizes for a dim: the powers of two from ``floor`` below it, and the whole dim.

    The lane (minor) dim starts at 128 and the sublane dim at 8: smaller tiles there only waste padded work, and
    a compiler never offers them.
    """
    size = max(size, 1)
    if size < floor:  # a dim narrower than its lane/sublane tile: whole, or half of it
        return [size // 2, size] if size >= 2 else [size]
    out = [1 << k for k in range(size.bit_length()) if floor <= (1 << k) < size] + [size]
    # A dim exactly one tile wide may still be split in two (so a small kernel has a few configs, as real ones do).
    return [size // 2, size] if len(out) == 1 and size >= 2 else out


def _wide_candidates(size: int, floor: int = 1) -> list[int]:
    """The wide search's tile sizes for a dim: :func:`_candidates` plus ``floor * step * 2**k`` (``step`` in
    :data:`WIDE_STEPS`) below the dim."""
    base = _candidates(size, floor)
    if size <= floor:
        return base
    out = set(base)
    k = 1
    while k * floor < size:
        for step in WIDE_STEPS:
            v = int(round(k * step)) * floor
            if floor <= v < size:
                out.add(v)
        k *= 2
    return sorted(out)


def _pad(x: npt.NDArray[np.float64], to: int) -> npt.NDArray[np.float64]:
    return np.ceil(x / to) * to


class TileProblem:
    """The tile cost model of one fused kernel.

    Attributes:
        out_dims: the tiled output dims (the last up to 6 dims of the root's shape).
        kernel_dims: the kernel's dims (operand 1 of a convolution/dot root), empty otherwise.
    """

    def __init__(self, out_shape: Shape, lead: int, kernel_shape: Shape | None, kernel_contract: int,
                 matrix_flops: float, vector_ops: int, input_bytes: float, other_bytes: float) -> None:
        self.itemsize = ITEMSIZE[out_shape.element_type] or 4
        self.out_dims = tuple(int(d) for d in out_shape.dims[-MAX_RANK:]) or (1,)
        self.lead = lead  # product of the untiled leading dims, iterated one at a time
        self.kernel_dims = tuple(int(d) for d in kernel_shape.dims[:MAX_RANK]) if kernel_shape is not None else ()
        self.kernel_contract = kernel_contract
        self.kernel_itemsize = ITEMSIZE[kernel_shape.element_type] if kernel_shape is not None else 0
        self.matrix_flops = matrix_flops
        self.vector_ops = vector_ops
        self.input_bytes = input_bytes
        self.other_bytes = other_bytes
        r = len(self.out_dims)
        floors = [physics.LANE if i == r - 1 else physics.SUBLANE if i == r - 2 else 1 for i in range(r)]
        sizes = list(self.out_dims)
        if self.kernel_dims:
            sizes.append(self.kernel_dims[kernel_contract])
            floors.append(physics.SUBLANE)
        self._options = [_candidates(d, f) for d, f in zip(sizes, floors, strict=True)]
        self._wide_options = [_wide_candidates(d, f) for d, f in zip(sizes, floors, strict=True)]
        self._default: npt.NDArray[np.float32] | None = None

    @classmethod
    def from_kernel(cls, kernel: Module) -> TileProblem:
        """Analyse a kernel: a module with one computation whose root (last instruction) is the fusion root."""
        comp = kernel.computations[-1]
        insts = comp.instructions
        root: Instruction = insts[comp.root_index]
        out = root.shape.tuple_shapes[0] if root.shape.is_tuple and root.shape.tuple_shapes else root.shape
        lead = int(np.prod(out.dims[:-MAX_RANK])) if out.rank > MAX_RANK else 1
        vector_ops = sum(1 for i in insts if i.opcode not in _FREE and i.opcode not in ("convolution", "dot"))
        kshape: Shape | None = None
        contract = 0
        matrix = 0.0
        input_bytes = 0.0
        if root.opcode in ("convolution", "dot") and len(root.operands) >= 2:
            ishape, kshape = insts[root.operands[0]].shape, insts[root.operands[1]].shape
            if root.opcode == "convolution":
                cd = root.conv_dims
                contract = cd.kernel_input_feature if cd else max(kshape.rank - 2, 0)
                kout = kshape.dims[cd.kernel_output_feature] if cd else kshape.dims[-1]
                matrix = 2.0 * out.num_elements * kshape.num_elements / max(kout, 1) / max(root.feature_group_count, 1)
            else:
                dd = root.dot_dims
                contract = dd.rhs_contracting[0] if dd and dd.rhs_contracting else 0
                k = kshape.dims[contract] if kshape.rank else 1
                matrix = 2.0 * out.num_elements * k
            if kshape.rank > MAX_RANK or kshape.rank == 0 or contract >= MAX_RANK:
                kshape = None
            input_bytes = float(ishape.byte_size)
        params = sum(float(i.shape.byte_size) for i in insts if i.opcode == "parameter")
        other = max(params - input_bytes - (kshape.byte_size if kshape is not None else 0), 0.0)
        return cls(out, lead, kshape, contract, matrix, vector_ops, input_bytes, other)

    # -- configs -------------------------------------------------------------------------------------------------

    def _encode(self, combos: npt.NDArray[np.int64]) -> npt.NDArray[np.float32]:
        """Config rows from tile sizes ``[n, r (+1 kernel chunk)]``."""
        n, r = combos.shape[0], len(self.out_dims)
        feat = np.zeros((n, 24), dtype=np.float32)
        out = combos[:, :r].astype(np.float64)
        feat[:, 8: 8 + r] = out
        feat[:, 14] = out.sum(axis=1)
        feat[:, 15] = out.prod(axis=1)
        if self.kernel_dims:
            kern = np.tile(np.asarray(self.kernel_dims, dtype=np.float64), (n, 1))
            kern[:, self.kernel_contract] = combos[:, r]
            feat[:, 0: len(self.kernel_dims)] = kern
            feat[:, 6] = kern.sum(axis=1)
            feat[:, 7] = kern.prod(axis=1)
        return feat

    def _decode(self, config_feat: npt.ArrayLike) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
        f = np.asarray(config_feat, dtype=np.float64).reshape(-1, 24)
        r = len(self.out_dims)
        tiles = np.clip(f[:, 8: 8 + r], 1, np.asarray(self.out_dims, dtype=np.float64))
        if self.kernel_dims:
            kc = np.clip(f[:, self.kernel_contract], 1, self.kernel_dims[self.kernel_contract])
        else:
            kc = np.ones(f.shape[0])
        return tiles, kc

    def default_config(self) -> npt.NDArray[np.float32]:
        """The compiler's default tile config, float32 ``[24]``.

        The compiler picks tiles with its own analytic model, which is a little off: it believes a step costs
        :data:`HEURISTIC_OVERHEAD` times more and memory is :data:`HEURISTIC_BANDWIDTH` times faster than they
        are, and keeps the working set within :data:`HEURISTIC_FILL` of on-chip memory. It tries every combo (by
        coordinate descent from whole dims beyond :data:`EXHAUSTIVE_LIMIT`). So its pick is good, not always the best.
        """
        if self._default is None:
            self._default = self._search_default()
        return self._default.copy()

    def _search_default(self) -> npt.NDArray[np.float32]:
        counts = [len(o) for o in self._options]
        if math.prod(counts) <= EXHAUSTIVE_LIMIT:
            grid = np.stack(np.meshgrid(*self._options, indexing="ij"), axis=-1).reshape(-1, len(counts))
            return self._encode(grid[[int(np.argmin(self._heuristic_cost(grid)))]])[0]
        idx = [len(o) - 1 for o in self._options]
        for _ in range(4):
            for d, opts in enumerate(self._options):
                trial = np.asarray([[o[i] for o, i in zip(self._options, idx, strict=True)] for _ in opts])
                trial[:, d] = opts
                idx[d] = int(np.argmin(self._heuristic_cost(trial)))
        return self._encode(self._combo(idx))[0]

    def _heuristic_cost(self, sizes: npt.NDArray[np.int64]) -> npt.NDArray[np.float64]:
        """What the compiler believes tile sizes ``[n, dims]`` cost; inf for tiles it refuses."""
        tiles, kc = self._decode(self._encode(sizes))
        cost = self._time(tiles, kc, TILE_OVERHEAD_NS * HEURISTIC_OVERHEAD,
                          physics.HBM_BYTES_PER_NS * HEURISTIC_BANDWIDTH)
        ws = self._ws(tiles, kc)
        # It refuses tiles whose working set exceeds its budget (keeping the smallest if none fits).
        return np.where(ws <= max(HEURISTIC_FILL * physics.ONCHIP_BYTES, ws.min()), cost, np.inf)

    def _combo(self, idx: list[int]) -> npt.NDArray[np.int64]:
        return np.asarray([[o[i] for o, i in zip(self._options, idx, strict=True)]], dtype=np.int64)

    def sample_configs(self, n: int, rng: np.random.Generator, *, wide: bool = False) -> npt.NDArray[np.float32]:
        """Distinct tile configs, the default among them.

        Args:
            n: wanted count; fewer come back when the kernel has fewer distinct configs (see :meth:`config_space`).
            rng: the generator.
            wide: also draw the sizes between powers of two (:data:`WIDE_STEPS`), not only the powers of two and
                whole dims; both within :data:`SAMPLE_WINDOW` of the default's sizes.

        Returns:
            float32 ``[m, 24]`` with ``m = min(n, number of configs)``, at least 1.
        """
        dflt = self.default_config()
        options = self._window_options(wide)
        counts = [len(o) for o in options]
        total = int(np.prod(counts, dtype=np.float64)) if np.prod(counts, dtype=np.float64) < 2**62 else 2**62
        m = max(1, min(n, total))
        if total <= max(4 * m, 4096):
            flat = rng.permutation(total)[:m] if total > m else np.arange(total)
        else:
            picked: set[int] = set()
            while len(picked) < m:
                picked.update(int(x) for x in rng.integers(0, total, size=m - len(picked)))
            flat = np.fromiter(picked, dtype=np.int64)
        combos = np.stack(np.unravel_index(flat, tuple(counts)), axis=1)
        sizes = np.asarray([[o[int(i)] for o, i in zip(options, row, strict=True)] for row in combos],
                           dtype=np.int64).reshape(len(flat), len(counts))
        feats = self._encode(sizes)
        if not np.any(np.all(feats == dflt, axis=1)):
            feats[rng.integers(0, m)] = dflt
        return feats

    def config_space(self, wide: bool = False) -> int:
        """How many distinct configs :meth:`sample_configs` can return at most (capped at ``2**62``)."""
        total = np.prod([len(o) for o in self._window_options(wide)], dtype=np.float64)
        return int(total) if total < 2**62 else 2**62

    def _window_options(self, wide: bool) -> list[list[int]]:
        """The tile sizes per dim a search draws from: those of its grid within :data:`SAMPLE_WINDOW` of the
        default's sizes."""
        dflt = self.default_config()
        tiles, kc = self._decode(dflt[None])
        picks = np.concatenate([tiles[0], kc]) if self.kernel_dims else tiles[0]
        grid = self._wide_options if wide else self._options
        return [[c for c in o if picks[d] / SAMPLE_WINDOW <= c <= picks[d] * SAMPLE_WINDOW] for d, o in enumerate(grid)]

    # -- runtime -------------------------------------------------------------------------------------------------

    def _ws(self, tiles: npt.NDArray[np.float64], kc: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        """Double-buffered working set of one step, bytes ``[n]``."""
        out = np.asarray(self.out_dims, dtype=np.float64)
        frac = tiles.prod(axis=1) / out.prod()
        out_tile = self._padded(tiles) * self.itemsize
        ws = out_tile + frac * self.other_bytes
        if self.kernel_dims:
            kfrac = kc / self.kernel_dims[self.kernel_contract]
            major = tiles[:, :-1].prod(axis=1) / out[:-1].prod() if out.size > 1 else np.ones_like(kc)
            minor = tiles[:, -1] / out[-1]
            kbytes = float(np.prod(self.kernel_dims)) * self.kernel_itemsize
            ws = ws + self.input_bytes / self.lead * major * kfrac + kbytes * minor * kfrac
        return 2.0 * ws

    @staticmethod
    def _padded(tiles: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        p = tiles.copy()
        p[:, -1] = _pad(p[:, -1], physics.LANE)
        if p.shape[1] > 1:
            p[:, -2] = _pad(p[:, -2], physics.SUBLANE)
        return p.prod(axis=1)

    def runtime_ns(self, config_feat: npt.ArrayLike) -> npt.NDArray[np.float64]:
        """Noiseless runtimes of tile configs.

        Args:
            config_feat: float ``[n, 24]`` config rows (or one ``[24]`` row).

        Returns:
            float64 ``[n]`` ns.
        """
        tiles, kc = self._decode(config_feat)
        return self._time(tiles, kc, TILE_OVERHEAD_NS, physics.HBM_BYTES_PER_NS)

    def _time(self, tiles: npt.NDArray[np.float64], kc: npt.NDArray[np.float64], overhead: float,
              bandwidth: float) -> npt.NDArray[np.float64]:
        out = np.asarray(self.out_dims, dtype=np.float64)
        counts = np.ceil(out / tiles)
        n_tiles = counts.prod(axis=1) * self.lead
        pad_ratio = self._padded(tiles) * n_tiles / (out.prod() * self.lead)
        out_elems = out.prod() * self.lead
        out_bytes = out_elems * self.itemsize
        if self.kernel_dims:
            cin = self.kernel_dims[self.kernel_contract]
            chunks = np.ceil(cin / kc)
            k_pad = _pad(kc, physics.SUBLANE) * chunks / cin
            steps = n_tiles * chunks
            compute = self.matrix_flops * pad_ratio * k_pad / physics.PEAK_FLOPS_PER_NS
            kbytes = float(np.prod(self.kernel_dims)) * self.kernel_itemsize
            major = counts[:, :-1].prod(axis=1) * self.lead if out.size > 1 else np.full(kc.shape, self.lead)
            traffic = out_bytes + self.input_bytes * counts[:, -1] + kbytes * major + self.other_bytes
        else:
            steps = n_tiles
            compute = np.zeros(n_tiles.shape)
            traffic = out_bytes + (self.input_bytes + self.other_bytes) * (1.0 + HALO * (n_tiles - 1))
        compute = compute + self.vector_ops * out_elems * pad_ratio / physics.VECTOR_FLOPS_PER_NS
        spill = 1.0 + SPILL_SLOPE * np.log2(np.maximum(self._ws(tiles, kc) / physics.ONCHIP_BYTES, 1.0))
        body = np.maximum(compute, traffic / bandwidth)
        return (steps * overhead + body) * spill
