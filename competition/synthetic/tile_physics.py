"""Tile-size runtime model of the synthetic world: what a fused kernel costs under a tile config.

Units: the bounds of a tile config count hardware tiles, not elements, as :mod:`competition.hlo.tiles` defines
them (the real records' units).

The model (constants here and in :mod:`competition.synthetic.physics`):

* A kernel's *tiled array* (:func:`~competition.hlo.tiles.tiled_shape`: its root's output, the largest of a
  tuple, a reduce's operand), its last up to 6 physical dims tiled by ``output_bounds``; leading dims beyond 6 are
  iterated one at a time. For a convolution or dot root the kernel (operand 1) is tiled by ``kernel_bounds`` over
  all its dims: its output-feature dim follows the output tile's most-minor dim, a batched dot's batch dims follow
  the output tile's batch dims, its other dims (the contracting dim, and a convolution's spatial dims) are chunked
  freely. Each output tile is one *step* per kernel chunk.
* ``time = KERNEL_LAUNCH_NS + (step cost + max(C, T) + min(C, T) / steps) * spill`` with ``C`` the compute and
  ``T = traffic / bandwidth``: a double-buffered pipeline overlaps a step's transfers with another step's compute,
  all but the first load and the last compute, so a kernel of few big tiles pays for not overlapping (the best real
  configs are not the largest tiles); where
  - the step cost is :data:`TILE_OVERHEAD_NS` per step (an output tile times a kernel chunk);
  - compute is the *padded* work: each output tile padded to whole granules (a last, partial one only to granules
    of its own), each kernel chunk padded to whole granules and a last, partial chunk computed whole (a reduction
    runs in blocks of one size, the excess masked); matrix work (conv/dot) at peak, the other ops of the kernel on
    the vector unit;
  - traffic is the output written once plus operand re-reads that fall as tiles grow: the input (operand 0) once per
    tile of the output's most-minor dim and per chunk of a convolution's spatial kernel window, the kernel once per
    tile of the other output dims when it is cut in chunks, and once in all when it is not (a block whose index does
    not change between steps stays on chip, so a kernel in one chunk is not fetched again); other kernels read
    their operands once plus a halo of :data:`HALO` per extra tile;
  - spill is 1 while the double-buffered working set (output tile, input and kernel footprints) fits in on-chip
    memory, and grows by :data:`SPILL_SLOPE` per doubling beyond it. Searches measure only configs that fit (the
    compiler refuses the others), so within a kernel's measured configs a larger tile is faster, as in every real
    kernel.
* The default config is the compiler's heuristic: the best config under a slightly wrong model of this cost
  (:data:`HEURISTIC_OVERHEAD`, :data:`HEURISTIC_BANDWIDTH`, :data:`HEURISTIC_FILL`), by exhaustive search up to
  :data:`EXHAUSTIVE_LIMIT` combos, coordinate descent beyond; good, not always the best.
* A search draws distinct configs among the sizes per dim (:func:`~competition.hlo.tiles.tile_sizes`: the
  divisors of its unit count, the powers of two below it and the whole dim; a *wide* search, ``wide=True``, also
  the sizes between powers of two of :data:`WIDE_STEPS`) whose working set fits on chip and whose number of steps
  is at most :data:`SAMPLE_STEPS` times the default's (an autotuner searches around the compiler's pick).
* Config rows (24 float32 columns): 0-7 kernel_bounds 0-5, sum, product; 8-15 output_bounds 0-5, sum, product;
  16-23 input_bounds (empty, as in the real records). Padding 0; an empty list has product 0.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from competition.hlo.ir import ITEMSIZE, Instruction, Module
from competition.hlo.tiles import granules, physical_dims, tile_sizes, tile_units, tiled_shape
from competition.schema import MAX_RANK
from competition.synthetic import physics

TILE_OVERHEAD_NS: float = 150.0
"""Fixed cost of one step (an output tile with one kernel chunk: DMA setup, pipeline bookkeeping), ns."""

KERNEL_LAUNCH_NS: float = 400.0
"""Fixed cost of launching a kernel whatever its tiles, ns."""

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

SAMPLE_STEPS: float = 64
"""A search measures configs of at most this many times the default's steps (tiles times kernel chunks)."""

WIDE_STEPS: tuple[float, ...] = (1.0, 1.125, 1.25, 1.375, 1.5, 1.625, 1.75, 1.875)
"""Wide search: bounds of ``step x 2**k`` (rounded) for these steps, besides the divisors and powers of two: eight
sizes per octave."""

EXHAUSTIVE_LIMIT: int = 200_000
"""The default heuristic searches all tile combos up to this many; beyond, coordinate descent from whole dims."""

_FREE = frozenset({"parameter", "constant", "get-tuple-element", "tuple", "bitcast", "reshape", "broadcast"})


def _pad(x: npt.NDArray[np.float64], to: npt.ArrayLike) -> npt.NDArray[np.float64]:
    return np.ceil(x / to) * to


def _partial_pad(size: npt.ArrayLike, tile: npt.NDArray[np.float64], granule: npt.ArrayLike
                 ) -> npt.NDArray[np.float64]:
    """Elements a dim of ``size`` costs in tiles of ``tile``: whole tiles padded to whole granules, and the last,
    partial tile padded only to whole granules of its own (the machine shrinks it, it does not redo a whole tile)."""
    return _pad(tile, granule) * np.floor(size / tile) + _pad(np.mod(size, tile), granule)


class TileProblem:
    """The tile cost model of one fused kernel.

    Attributes:
        out_dims: the tiled dims of the kernel's tiled array, physical order (the last up to 6).
        out_units: units per tiled dim: the largest output bound of each.
        kernel_dims: the kernel's physical dims (operand 1 of a convolution/dot root), empty otherwise.
        kernel_units: units per kernel dim.
        kernel_free: the kernel dims a config chunks (all but :attr:`kernel_tied` and :attr:`kernel_batch`).
        kernel_tied: the kernel dim whose tile follows the output tile's most-minor dim.
        kernel_batch: ``(kernel dim, output dim)`` pairs of a batched dot: the kernel's batch dim follows the output
            tile's batch dim.
        kernel_spatial: a convolution's spatial kernel dims (among :attr:`kernel_free`): each chunk of them reads
            its input window again.
    """

    def __init__(self, out_dims: Sequence[int], lead: int, itemsize: int, out_bytes: float,
                 kernel_dims: Sequence[int] = (), kernel_tied: int = -1, kernel_itemsize: int = 0,
                 matrix_flops: float = 0.0, vector_ops: int = 0, input_bytes: float = 0.0,
                 other_bytes: float = 0.0, kernel_batch: Sequence[tuple[int, int]] = (),
                 kernel_spatial: Sequence[int] = ()) -> None:
        self.out_dims = tuple(int(d) for d in out_dims) or (1,)
        self.out_granules = np.asarray(granules(len(self.out_dims)), dtype=np.float64)
        self.out_units = tile_units(self.out_dims)
        self.lead = lead
        self.itemsize = itemsize
        self.out_bytes = out_bytes
        self.kernel_dims = tuple(int(d) for d in kernel_dims)
        self.kernel_units = tile_units(self.kernel_dims) if self.kernel_dims else []
        self.kernel_granules = np.asarray(granules(len(self.kernel_dims)), dtype=np.float64)
        self.kernel_tied = kernel_tied if self.kernel_dims else -1
        self.kernel_batch = [(int(j), int(i)) for j, i in kernel_batch] if self.kernel_dims else []
        tied = {self.kernel_tied, *(j for j, _ in self.kernel_batch)}
        self.kernel_free = [j for j in range(len(self.kernel_dims)) if j not in tied]
        self.kernel_spatial = [int(j) for j in kernel_spatial if j in self.kernel_free]
        self.kernel_itemsize = kernel_itemsize
        self.matrix_flops = matrix_flops
        self.vector_ops = vector_ops
        self.input_bytes = input_bytes
        self.other_bytes = other_bytes
        self._default: npt.NDArray[np.float32] | None = None
        self._limits: tuple[float, float] | None = None  # (working set, steps) a search may measure at most

    @classmethod
    def from_kernel(cls, kernel: Module) -> TileProblem:
        """Analyse a kernel: a module with one computation whose root (last instruction) is the fusion root."""
        comp = kernel.computations[-1]
        insts = comp.instructions
        root: Instruction = insts[comp.root_index]
        out = root.shape.tuple_shapes[0] if root.shape.is_tuple and root.shape.tuple_shapes else root.shape
        itemsize = ITEMSIZE[out.element_type] or 4
        out_bytes = float(out.num_elements * itemsize)
        dims = physical_dims(tiled_shape(kernel))
        lead = int(np.prod(dims[:-MAX_RANK])) if len(dims) > MAX_RANK else 1
        vector_ops = sum(1 for i in insts if i.opcode not in _FREE and i.opcode not in ("convolution", "dot"))
        kdims: tuple[int, ...] = ()
        tied = -1
        batch: list[tuple[int, int]] = []
        spatial: list[int] = []
        kitem = 0
        matrix = 0.0
        input_bytes = 0.0
        if root.opcode in ("convolution", "dot") and len(root.operands) >= 2:
            ishape, kshape = insts[root.operands[0]].shape, insts[root.operands[1]].shape
            if root.opcode == "convolution":
                cd = root.conv_dims
                kout = cd.kernel_output_feature if cd else kshape.rank - 1
                matrix = (2.0 * out.num_elements * kshape.num_elements / max(kshape.dims[kout], 1)
                          / max(root.feature_group_count, 1))
            else:
                dd = root.dot_dims
                skip = set(dd.rhs_contracting) | set(dd.rhs_batch) if dd else {0}
                kout = max((d for d in range(kshape.rank) if d not in skip), default=kshape.rank - 1)
                k = int(np.prod([kshape.dims[d] for d in (dd.rhs_contracting if dd else (0,))]))
                matrix = 2.0 * out.num_elements * k
            input_bytes = float(ishape.byte_size)
            if 0 < kshape.rank <= MAX_RANK:
                kdims = physical_dims(kshape)
                korder = list(reversed(kshape.layout))
                tied = korder.index(kout) if 0 <= kout < kshape.rank else -1
                kitem = ITEMSIZE[kshape.element_type] or 4
                if root.opcode == "convolution" and root.conv_dims:
                    spatial = [korder.index(d) for d in root.conv_dims.kernel_spatial if d < kshape.rank]
                # A dot's output starts with its batch dims, in the order of the operands' batch dims.
                oorder = list(reversed(out.layout))[-len(dims[-MAX_RANK:]):] if root.opcode == "dot" else []
                for b, kd in enumerate(root.dot_dims.rhs_batch if root.opcode == "dot" and root.dot_dims else ()):
                    if b in oorder and kd < kshape.rank:
                        batch.append((korder.index(kd), oorder.index(b)))
        params = sum(float(i.shape.byte_size) for i in insts if i.opcode == "parameter")
        kbytes = float(np.prod(kdims)) * kitem if kdims else 0.0
        other = max(params - input_bytes - kbytes, 0.0)
        return cls(dims[-MAX_RANK:], lead, itemsize, out_bytes, kdims, tied, kitem, matrix, vector_ops,
                   input_bytes, other, batch, spatial)

    # -- configs -------------------------------------------------------------------------------------------------

    def _grid(self, wide: bool) -> list[list[int]]:
        """Bounds tried per output dim, then per free kernel dim."""
        steps = WIDE_STEPS if wide else ()
        return [tile_sizes(u, steps) for u in self.out_units] + [tile_sizes(self.kernel_units[j], steps)
                                                                  for j in self.kernel_free]

    def _kernel_row(self, combos: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        """Full kernel bounds ``[n, kernel rank]`` of combos: the free dims' chunks, the tied dim's units covering
        the output tile's most-minor dim."""
        r = len(self.out_dims)
        kb = np.zeros((combos.shape[0], len(self.kernel_dims)))
        for i, j in enumerate(self.kernel_free):
            kb[:, j] = combos[:, r + i]
        for j, i in ([(self.kernel_tied, r - 1)] if self.kernel_tied >= 0 else []) + self.kernel_batch:
            elems = np.minimum(combos[:, i] * self.out_granules[i], self.out_dims[i])
            kb[:, j] = np.clip(np.ceil(elems / self.kernel_granules[j]), 1, self.kernel_units[j])
        return kb

    def _encode(self, combos: npt.ArrayLike) -> npt.NDArray[np.float32]:
        """Config rows from bounds ``[n, output rank + free kernel dims]`` (units)."""
        combos = np.asarray(combos, dtype=np.float64)
        n, r = combos.shape[0], len(self.out_dims)
        feat = np.zeros((n, 24), dtype=np.float32)
        out = combos[:, :r]
        feat[:, 8: 8 + r] = out
        feat[:, 14] = out.sum(axis=1)
        feat[:, 15] = out.prod(axis=1)
        if self.kernel_dims:
            kern = self._kernel_row(combos)
            feat[:, 0: len(self.kernel_dims)] = kern
            feat[:, 6] = kern.sum(axis=1)
            feat[:, 7] = kern.prod(axis=1)
        return feat

    def _decode(self, config_feat: npt.ArrayLike) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
        """Element tiles of the output ``[n, r]`` and of the kernel ``[n, kernel rank]`` (``[n, 0]`` without one)."""
        f = np.asarray(config_feat, dtype=np.float64).reshape(-1, 24)
        r = len(self.out_dims)
        dims = np.asarray(self.out_dims, dtype=np.float64)
        tiles = np.clip(f[:, 8: 8 + r] * self.out_granules, 1, dims)
        if self.kernel_dims:
            kd = np.asarray(self.kernel_dims, dtype=np.float64)
            ktiles = np.clip(f[:, : len(kd)] * self.kernel_granules, 1, kd)
        else:
            ktiles = np.zeros((f.shape[0], 0))
        return tiles, ktiles

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
        options = self._grid(False)
        counts = [len(o) for o in options]
        if math.prod(counts) <= EXHAUSTIVE_LIMIT:
            grid = np.stack(np.meshgrid(*options, indexing="ij"), axis=-1).reshape(-1, len(counts))
            return self._encode(grid[[int(np.argmin(self._heuristic_cost(grid)))]])[0]
        idx = [len(o) - 1 for o in options]
        for _ in range(4):
            for d, opts in enumerate(options):
                trial = np.asarray([[o[i] for o, i in zip(options, idx, strict=True)] for _ in opts])
                trial[:, d] = opts
                idx[d] = int(np.argmin(self._heuristic_cost(trial)))
        return self._encode([[o[i] for o, i in zip(options, idx, strict=True)]])[0]

    def _heuristic_cost(self, combos: npt.NDArray[np.int64]) -> npt.NDArray[np.float64]:
        """What the compiler believes combos cost; inf for tiles it refuses."""
        tiles, ktiles = self._decode(self._encode(combos))
        cost = self._time(tiles, ktiles, TILE_OVERHEAD_NS * HEURISTIC_OVERHEAD,
                          physics.HBM_BYTES_PER_NS * HEURISTIC_BANDWIDTH)
        ws = self._ws(tiles, ktiles)
        # It refuses tiles whose working set exceeds its budget (keeping the smallest if none fits).
        return np.where(ws <= max(HEURISTIC_FILL * physics.ONCHIP_BYTES, ws.min()), cost, np.inf)

    def _allowed(self, combos: npt.NDArray[np.int64]) -> npt.NDArray[np.bool_]:
        """Which combos a search may measure: they fit on chip (or are no bigger than the default) and take at
        most :data:`SAMPLE_STEPS` times the default's steps."""
        if self._limits is None:
            tiles, ktiles = self._decode(self.default_config()[None])
            self._limits = (max(physics.ONCHIP_BYTES, float(self._ws(tiles, ktiles)[0])),
                            SAMPLE_STEPS * float(self._steps(tiles, ktiles)[0]))
        max_ws, max_steps = self._limits
        tiles, ktiles = self._decode(self._encode(combos))
        return (self._ws(tiles, ktiles) <= max_ws) & (self._steps(tiles, ktiles) <= max_steps)

    @staticmethod
    def _combos(options: list[list[int]], flat: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        """The combos at flat indices ``flat`` of the grid ``options`` (one list of bounds per dim)."""
        idx = np.unravel_index(flat, tuple(len(o) for o in options))
        return np.stack([np.asarray(options[d], dtype=np.int64)[i] for d, i in enumerate(idx)],
                        axis=1).reshape(len(flat), len(options))

    def sample_configs(self, n: int, rng: np.random.Generator, *, wide: bool = False) -> npt.NDArray[np.float32]:
        """Distinct tile configs, the default among them.

        Args:
            n: wanted count; fewer come back when the kernel has fewer distinct configs (see :meth:`config_space`).
            rng: the generator.
            wide: also draw the sizes between powers of two (:data:`WIDE_STEPS`).

        Returns:
            float32 ``[m, 24]`` with ``1 <= m <= n``.
        """
        dflt = self.default_config()
        options = self._grid(wide)
        total = math.prod(len(o) for o in options)
        if total <= max(64 * n, 65_536):
            flat = np.arange(total, dtype=np.int64)
            flat = flat[self._allowed(self._combos(options, flat))]
            flat = rng.permutation(flat)[: max(n, 1)]
        else:
            picked: list[int] = []
            seen: set[int] = set()
            for _ in range(64):
                draw = rng.integers(0, total, size=4 * n)
                draw = np.asarray([x for x in dict.fromkeys(draw.tolist()) if x not in seen], dtype=np.int64)
                seen.update(draw.tolist())
                if draw.size:
                    picked.extend(draw[self._allowed(self._combos(options, draw))].tolist())
                if len(picked) >= n:
                    break
            flat = np.asarray(picked[:n], dtype=np.int64)
        feats = self._encode(self._combos(options, flat)) if flat.size else dflt[None].copy()
        if not np.any(np.all(feats == dflt, axis=1)):
            if feats.shape[0] < n:
                feats = np.concatenate([feats, dflt[None]])
            else:
                feats[rng.integers(0, feats.shape[0])] = dflt
        return feats

    def config_space(self, wide: bool = False) -> int:
        """How many distinct configs :meth:`sample_configs` can return at most (estimated from a sample of the grid
        when it is large; capped at ``2**62``)."""
        options = self._grid(wide)
        total = math.prod(len(o) for o in options)
        exact = total <= 65_536
        flat = np.arange(total, dtype=np.int64) if exact else np.random.default_rng(0).integers(0, total, size=8192)
        n = float(np.count_nonzero(self._allowed(self._combos(options, flat))))
        if not exact:
            n = n * (1.0 / 8192) * total
        return max(1, min(int(n), 2**62))

    # -- runtime -------------------------------------------------------------------------------------------------

    def _counts(self, tiles: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        return np.ceil(np.asarray(self.out_dims, dtype=np.float64) / tiles)

    def _chunks(self, ktiles: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        if not self.kernel_free:
            return np.ones(ktiles.shape[0])
        kd = np.asarray(self.kernel_dims, dtype=np.float64)[self.kernel_free]
        return np.ceil(kd / ktiles[:, self.kernel_free]).prod(axis=1)

    def _steps(self, tiles: npt.NDArray[np.float64], ktiles: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        return self._counts(tiles).prod(axis=1) * self.lead * self._chunks(ktiles)

    def _ws(self, tiles: npt.NDArray[np.float64], ktiles: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        """Double-buffered working set of one step, bytes ``[n]``."""
        out = np.asarray(self.out_dims, dtype=np.float64)
        frac = tiles.prod(axis=1) / out.prod()
        ws = _pad(tiles, self.out_granules).prod(axis=1) * self.itemsize + frac * self.other_bytes / self.lead
        if self.kernel_dims:
            kd = np.asarray(self.kernel_dims, dtype=np.float64)
            kfrac = (ktiles / kd).prod(axis=1)
            major = tiles[:, :-1].prod(axis=1) / out[:-1].prod() if out.size > 1 else np.ones(tiles.shape[0])
            ws = ws + self.input_bytes / self.lead * major * kfrac + kd.prod() * self.kernel_itemsize * kfrac
        return 2.0 * ws

    def runtime_ns(self, config_feat: npt.ArrayLike) -> npt.NDArray[np.float64]:
        """Noiseless runtimes of tile configs.

        Args:
            config_feat: float ``[n, 24]`` config rows (or one ``[24]`` row).

        Returns:
            float64 ``[n]`` ns.
        """
        tiles, ktiles = self._decode(config_feat)
        return self._time(tiles, ktiles, TILE_OVERHEAD_NS, physics.HBM_BYTES_PER_NS)

    def _time(self, tiles: npt.NDArray[np.float64], ktiles: npt.NDArray[np.float64], overhead: float,
              bandwidth: float) -> npt.NDArray[np.float64]:
        out = np.asarray(self.out_dims, dtype=np.float64)
        counts = self._counts(tiles)
        n_tiles = counts.prod(axis=1) * self.lead
        # Work over padded tiles: each tile padded to whole granules (a last, partial tile only to its own), over the
        # true elements.
        pad_ratio = (_partial_pad(out, tiles, self.out_granules) / out).prod(axis=1)
        out_elems = out.prod() * self.lead
        steps = self._steps(tiles, ktiles)
        if self.kernel_dims:
            kd = np.asarray(self.kernel_dims, dtype=np.float64)[self.kernel_free]
            kt = ktiles[:, self.kernel_free]
            kg = self.kernel_granules[self.kernel_free]
            # Each chunk padded to whole granules, a last, partial chunk computed whole (masked).
            k_pad = (np.ceil(kd / kt) * _pad(kt, kg) / kd).prod(axis=1)
            compute = self.matrix_flops * pad_ratio * k_pad / physics.PEAK_FLOPS_PER_NS
            kbytes = float(np.prod(self.kernel_dims)) * self.kernel_itemsize
            major = counts[:, :-1].prod(axis=1) * self.lead if out.size > 1 else np.full(n_tiles.shape, self.lead)
            # A batched dot's tile reads only its batch dims' share of the kernel.
            batch = np.ones(n_tiles.shape)
            for _, i in self.kernel_batch:
                batch = batch * tiles[:, i] / out[i]
            # The input once per tile of the output's most-minor dim, and again for each chunk of the kernel's
            # spatial window (each reads its own shifted window).
            windows = np.ones(n_tiles.shape)
            for j in self.kernel_spatial:
                windows = windows * np.ceil(self.kernel_dims[j] / ktiles[:, j])
            # A kernel in one chunk (as many steps as output tiles) stays on chip across the output tiles: read once.
            kreads = np.where(steps > n_tiles, major * batch, 1.0)
            traffic = (self.out_bytes + self.input_bytes * counts[:, -1] * windows + kbytes * kreads
                       + self.other_bytes)
        else:
            compute = np.zeros(n_tiles.shape)
            traffic = self.out_bytes + (self.input_bytes + self.other_bytes) * (1.0 + HALO * (n_tiles - 1))
        compute = compute + self.vector_ops * out_elems * pad_ratio / physics.VECTOR_FLOPS_PER_NS
        spill = 1.0 + SPILL_SLOPE * np.log2(np.maximum(self._ws(tiles, ktiles) / physics.ONCHIP_BYTES, 1.0))
        # A double-buffered pipeline overlaps each step's transfers with another step's compute, except the first
        # step's load and the last one's compute: max(C, T) + min(C, T) / steps.
        memory = traffic / bandwidth
        body = np.maximum(compute, memory) + np.minimum(compute, memory) / steps
        return KERNEL_LAUNCH_NS + (steps * overhead + body) * spill
