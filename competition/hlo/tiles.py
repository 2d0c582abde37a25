"""The units of tile configs: what a ``TileSizeConfig``'s bounds count.

A tile config's bounds count (8, 128) *hardware tiles*, not elements, as the real tuning records show (a
``[32,5,5,256]`` f32 output is tiled ``[8,5,1,2]``: 8 x 5 x 5 x 256 elements). An array's dims are taken in physical
order, major to minor (its layout's ``minor_to_major`` reversed); the most-minor dim is counted in tiles of
:data:`~competition.schema.TPU_LANES` elements, the second-minor in tiles of :data:`~competition.schema.TPU_SUBLANES`,
the others in elements, and a rank-1 array in tiles of ``TPU_LANES * TPU_SUBLANES`` (XLA's ``T(1024)``). A bound of
``b`` on a dim of ``u`` units covers ``min(b * granule, size)`` elements, with ``1 <= b <= u``. XLA's tiled layouts
(``F32[3,5]{1,0:T(2,2)}``) count the same way: an array of ``d`` elements along a dim is ``ceil(d / t)`` tiles.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import numpy as np

from competition.hlo.ir import Module, Shape
from competition.schema import TPU_LANES, TPU_SUBLANES


def granules(rank: int) -> list[int]:
    """Elements per unit of each physical dim (major to minor) of an array of ``rank`` dims: ``1, ..., 1,
    TPU_SUBLANES, TPU_LANES``; a rank-1 array ``TPU_LANES * TPU_SUBLANES``."""
    if rank <= 0:
        return []
    if rank == 1:
        return [TPU_LANES * TPU_SUBLANES]
    return [1] * (rank - 2) + [TPU_SUBLANES, TPU_LANES]


def physical_dims(shape: Shape) -> tuple[int, ...]:
    """An array's dims in physical order, major to minor."""
    return tuple(int(shape.dims[d]) for d in reversed(shape.layout))


def tile_units(dims: Sequence[int]) -> list[int]:
    """How many units each physical dim (major to minor) holds: the largest bound a config may give it."""
    return [max(1, -(-int(d) // g)) for d, g in zip(dims, granules(len(dims)), strict=True)]


def tile_sizes(units: int, steps: Sequence[float] = ()) -> list[int]:
    """The bounds a tile search tries for a dim of ``units`` units: its divisors, the powers of two below it and the
    whole dim; with ``steps``, also ``round(step * 2**k)`` below it for each step (sizes between powers of two)."""
    units = max(int(units), 1)
    out = set(_divisors(units))
    out |= {1 << k for k in range(units.bit_length()) if (1 << k) < units}
    k = 1
    while steps and k < units:
        out |= {v for s in steps if 1 <= (v := int(round(k * s))) < units}
        k *= 2
    return sorted(out)


@functools.lru_cache(maxsize=4096)
def _divisors(units: int) -> tuple[int, ...]:
    """The divisors of ``units``, searched up to its square root at once (a dim of up to
    :data:`~competition.limits.MAX_DIM` is a million candidates), and kept: a program repeats its dims."""
    small = np.arange(1, math.isqrt(units) + 1, dtype=np.int64)
    small = small[units % small == 0]
    return tuple(sorted({int(d) for d in small} | {units // int(d) for d in small}))


def tiled_shape(module: Module) -> Shape:
    """The array a fused kernel's output bounds cut: the root of its entry computation, looked through a fusion into
    the fused computation's root; of a tuple root the largest element; of a reduce its operand (the space the kernel
    walks). The real records tile this way: a multi-output fusion by its largest output, a reduce fusion by the
    reduced operand."""
    comp = module.entry
    ins = comp.instructions[comp.root_index]
    for _ in range(len(module.computations)):
        if ins.opcode != "fusion" or not ins.called:
            break
        comp = module.computation(ins.called[0])
        ins = comp.instructions[comp.root_index]
    if ins.opcode == "tuple" and ins.operands:
        ins = max((comp.instructions[i] for i in ins.operands), key=lambda i: i.shape.num_elements)
    if ins.opcode == "reduce" and ins.operands and comp.instructions[ins.operands[0]].shape.rank > ins.shape.rank:
        return comp.instructions[ins.operands[0]].shape
    shape = ins.shape
    while shape.is_tuple and shape.tuple_shapes:
        shape = max(shape.tuple_shapes, key=lambda s: s.num_elements)
    return shape
