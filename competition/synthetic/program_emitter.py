"""Emitting the synthetic programs' instructions.

:class:`Program` is the module-wide state of one program being built (its random stream, instruction ids and the
scalar reducer computations it shares); :class:`Emitter` appends instructions to one computation, deriving each
output shape from the operands.

Equal scalar constants and their broadcasts are one node per computation (:meth:`Emitter.const`,
:meth:`Emitter.full`), as XLA's common-subexpression pass leaves them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from competition.hlo.ir import Computation, DotDims, Shape, Window

# The initial value of a reduction of each kind (what its constant operand holds).
_INIT = {"add": "zero", "maximum": "lowest", "minimum": "highest", "and": "true", "or": "false"}


def prod(dims: tuple[int, ...] | list[int]) -> int:
    out = 1
    for d in dims:
        out *= int(d)
    return out


@dataclass
class Program:
    """Module-wide state: the name, the random stream, and the helper computations created on demand."""

    name: str
    rng: np.random.Generator
    subs: list[Computation] = field(default_factory=list)
    reducers: dict[tuple[str, str], str] = field(default_factory=dict)
    counter: int = 0

    def uid(self) -> int:
        self.counter += 1
        return self.counter

    def reducer(self, kind: str, dtype: str) -> str:
        """Name of a 3-node scalar ``kind`` (add / maximum / ...) computation over ``dtype``, created once."""
        key = (kind, dtype)
        if key not in self.reducers:
            name = f"{kind}_{dtype.upper()}.{self.uid()}" if kind != "ge" else f"ge_{dtype.upper()}.{self.uid()}"
            comp = Computation(name)
            scalar = Shape(dtype)
            comp.add("parameter", scalar, name="lhs", parameter_number=0)
            comp.add("parameter", scalar, name="rhs", parameter_number=1)
            if kind == "ge":
                comp.add("compare", Shape("pred"), (0, 1), name="cmp")
            else:
                comp.add(kind, scalar, (0, 1), name=kind)
            self.subs.append(comp)
            self.reducers[key] = name
        return self.reducers[key]


class Emitter:
    """Appends instructions to one computation, deriving output shapes from operands."""

    def __init__(self, prog: Program, comp: Computation) -> None:
        self.prog = prog
        self.comp = comp
        self.nparam = 0
        self.consts: dict[tuple[str, str], int] = {}
        self.cse: dict[tuple[str, tuple[int, ...], str], int] = {}
        self.splats: dict[tuple[int, tuple[int, ...]], int] = {}

    def sh(self, x: int) -> Shape:
        return self.comp.instructions[x].shape

    def op(self, opcode: str, shape: Shape, operands: tuple[int, ...] | list[int] = (), **attrs: object) -> int:
        return self.comp.add(opcode, shape, tuple(operands), name=f"{opcode}.{self.prog.uid()}", **attrs)

    def param(self, shape: Shape) -> int:
        self.nparam += 1
        return self.op("parameter", shape, parameter_number=self.nparam - 1)

    def const(self, dtype: str, value: str = "zero") -> int:
        """The scalar constant ``value`` (a name: ``zero``, ``one``, ``eps``...) of ``dtype``: one node per value and
        dtype in the computation, because XLA's common-subexpression pass merges equal constants."""
        key = (dtype, value)
        if key not in self.consts:
            self.consts[key] = self.op("constant", Shape(dtype))
        return self.consts[key]

    def full(self, dtype: str, dims: tuple[int, ...], value: str = "zero") -> int:
        """The constant ``value`` broadcast to ``dims`` (how XLA spells ``zeros`` / ``eps`` tensors); equal
        broadcasts are merged like equal constants."""
        key = (dtype, dims, value)
        if key not in self.cse:
            c = self.const(dtype, value)
            self.cse[key] = self.op("broadcast", Shape(dtype, dims), (c,), dimensions=()) if dims else c
        return self.cse[key]

    def splat(self, x: int, dims: tuple[int, ...]) -> int:
        """Scalar ``x`` broadcast to ``dims``, once per shape."""
        key = (x, dims)
        if key not in self.splats:
            self.splats[key] = self.bcast(x, dims, ()) if dims else x
        return self.splats[key]

    def ew(self, opcode: str, *xs: int) -> int:
        s = self.sh(xs[0])
        if opcode == "compare":
            s = Shape("pred", s.dims)
        return self.op(opcode, Shape(s.element_type, s.dims) if opcode != "compare" else s, xs)

    def convert(self, x: int, dtype: str) -> int:
        return self.op("convert", Shape(dtype, self.sh(x).dims), (x,))

    def bcast(self, x: int, dims: tuple[int, ...], mapping: tuple[int, ...]) -> int:
        return self.op("broadcast", Shape(self.sh(x).element_type, dims), (x,), dimensions=mapping)

    def reshape(self, x: int, dims: tuple[int, ...]) -> int:
        s = self.sh(x)
        if prod(dims) != s.num_elements:
            raise ValueError(f"reshape {s.dims} -> {dims} changes the element count")
        return self.op("reshape", Shape(s.element_type, tuple(dims)), (x,))

    def transpose(self, x: int, perm: tuple[int, ...]) -> int:
        s = self.sh(x)
        return self.op("transpose", Shape(s.element_type, tuple(s.dims[p] for p in perm)), (x,), dimensions=perm)

    def reduce(self, x: int, axes: tuple[int, ...], kind: str = "add") -> int:
        s = self.sh(x)
        init = self.const(s.element_type, _INIT[kind])
        out = tuple(d for k, d in enumerate(s.dims) if k not in axes)
        return self.op("reduce", Shape(s.element_type, out), (x, init), dimensions=tuple(axes),
                       called=(self.prog.reducer(kind, s.element_type),))

    def dot(self, x: int, y: int, lc: tuple[int, ...], rc: tuple[int, ...], lb: tuple[int, ...] = (),
            rb: tuple[int, ...] = ()) -> int:
        a, b = self.sh(x), self.sh(y)
        for i, j in zip(lc, rc, strict=True):
            if a.dims[i] != b.dims[j]:
                raise ValueError(f"dot contracts {a.dims}[{i}] with {b.dims}[{j}]")
        out = [a.dims[i] for i in lb]
        out += [d for k, d in enumerate(a.dims) if k not in lc and k not in lb]
        out += [d for k, d in enumerate(b.dims) if k not in rc and k not in rb]
        return self.op("dot", Shape(a.element_type, tuple(out)), (x, y), dot_dims=DotDims(lc, rc, lb, rb))

    def concat(self, xs: list[int], dim: int) -> int:
        s = self.sh(xs[0])
        dims = list(s.dims)
        dims[dim] = sum(self.sh(x).dims[dim] for x in xs)
        return self.op("concatenate", Shape(s.element_type, tuple(dims)), xs, dimensions=(dim,))

    def slice(self, x: int, starts: tuple[int, ...], limits: tuple[int, ...]) -> int:
        s = self.sh(x)
        dims = tuple(hi - lo for lo, hi in zip(starts, limits, strict=True))
        return self.op("slice", Shape(s.element_type, dims), (x,), slice_starts=starts, slice_limits=limits,
                       slice_strides=(1,) * len(dims))

    def pad(self, x: int, low: tuple[int, ...], high: tuple[int, ...]) -> int:
        s = self.sh(x)
        value = self.const(s.element_type)
        dims = tuple(d + lo + hi for d, lo, hi in zip(s.dims, low, high, strict=True))
        return self.op("pad", Shape(s.element_type, dims), (x, value), pad_low=low, pad_high=high,
                       pad_interior=(0,) * len(dims))

    def tuple_(self, xs: list[int]) -> int:
        return self.op("tuple", Shape("tuple", tuple_shapes=tuple(self.sh(x) for x in xs)), xs)

    def gte(self, t: int, k: int) -> int:
        return self.op("get-tuple-element", self.sh(t).tuple_shapes[k], (t,))

    def window_op(self, x: int, window: Window, kind: str) -> int:
        s = self.sh(x)
        init = self.const(s.element_type, _INIT[kind])
        out = tuple(
            (d + lo + hi - k) // st + 1
            for d, k, st, lo, hi in zip(s.dims, window.size, window.stride, window.pad_low, window.pad_high,
                                        strict=True)
        )
        return self.op("reduce-window", Shape(s.element_type, out), (x, init), window=window,
                       called=(self.prog.reducer(kind, s.element_type),))
