"""The program representation, which the HLO readers read programs into and the synthetic world builds its
programs in, and the error the readers raise.

A :class:`Module` is a list of :class:`Computation` in post-order (every called computation comes before its
callers; the entry computation is last), as XLA's ``module.computations()`` lists them. A computation is a list of
:class:`Instruction` whose operands refer to other instructions of the same computation by index: earlier ones, as
XLA lists them and as the synthetic world builds them (a serialized module is only checked to have no operand
cycle, :mod:`competition.hlo.check`). Node ids of the featurized graph number the instructions computation by
computation.

Both sources of modules, real XLA programs (:mod:`competition.hlo.text`, :mod:`competition.hlo.proto`) and the
synthetic world (:mod:`competition.synthetic.programs`), go through the same feature writer
(:mod:`competition.hlo.features`). One difference: an XLA program may hold opcodes the TpuGraphs opcode table
has no id for (``erf``, ``topk`` ...); the official featurizer gives them id 0 (unknown), and
:class:`HloInstruction` does the same, while a name that is no XLA opcode at all is refused by the readers.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import numpy.typing as npt

from competition.opcodes import OPCODE_IDS, opcode_id
from competition.schema import ELEMENT_ITEMSIZE

ITEMSIZE: dict[str, int] = ELEMENT_ITEMSIZE
"""Bytes per element of each element type (the format's table, :data:`competition.schema.ELEMENT_ITEMSIZE`)."""


@dataclass(frozen=True)
class Shape:
    """An array shape with element type and layout, or a tuple of shapes.

    Args:
        element_type: one of :data:`ITEMSIZE`'s keys (``f32``, ``bf16``, ``s32``, ``pred``, ``tuple`` ...).
        dims: dimension sizes, major to minor in logical order.
        minor_to_major: physical layout, most-minor dimension first; ``None`` is the default ``(rank-1, ..., 0)``.
        tuple_shapes: element shapes when ``element_type == "tuple"``.
    """

    element_type: str
    dims: tuple[int, ...] = ()
    minor_to_major: tuple[int, ...] | None = None
    tuple_shapes: tuple[Shape, ...] = ()

    def __post_init__(self) -> None:
        if self.element_type not in ITEMSIZE:
            raise ValueError(f"unknown element type {self.element_type!r}")
        if self.minor_to_major is not None and sorted(self.minor_to_major) != list(range(len(self.dims))):
            raise ValueError(f"layout {self.minor_to_major} is not a permutation of the {len(self.dims)} dims")

    @property
    def rank(self) -> int:
        return len(self.dims)

    @property
    def is_tuple(self) -> bool:
        return self.element_type == "tuple"

    @property
    def num_elements(self) -> int:
        return math.prod(int(d) for d in self.dims)  # exact: dims of up to MAX_DIM overflow int64 together

    @property
    def layout(self) -> tuple[int, ...]:
        """Minor-to-major order, the default one when none is set."""
        return self.minor_to_major if self.minor_to_major is not None else default_layout(self.rank)

    @property
    def byte_size(self) -> int:
        """Logical bytes (no tiling padding); a tuple counts its elements."""
        if self.is_tuple:
            return sum(s.byte_size for s in self.tuple_shapes)
        return self.num_elements * ITEMSIZE[self.element_type]


def default_layout(rank: int) -> tuple[int, ...]:
    """XLA's default minor-to-major order: the last logical dimension is the most minor."""
    return tuple(range(rank - 1, -1, -1))


@dataclass(frozen=True)
class Window:
    """Window of a convolution, reduce-window or select-and-scatter: one entry per spatial dimension."""

    size: tuple[int, ...]
    stride: tuple[int, ...]
    pad_low: tuple[int, ...]
    pad_high: tuple[int, ...]
    window_dilation: tuple[int, ...]
    base_dilation: tuple[int, ...]
    reversal: tuple[bool, ...]

    @classmethod
    def simple(cls, size: Sequence[int], stride: Sequence[int] | None = None,
               pad_low: Sequence[int] | None = None, pad_high: Sequence[int] | None = None) -> Window:
        n = len(size)
        return cls(tuple(size), tuple(stride or [1] * n), tuple(pad_low or [0] * n), tuple(pad_high or [0] * n),
                   (1,) * n, (1,) * n, (False,) * n)


@dataclass(frozen=True)
class ConvDims:
    """Convolution dimension numbers: which logical dimension of each tensor plays which role."""

    input_batch: int
    input_feature: int
    input_spatial: tuple[int, ...]
    kernel_input_feature: int
    kernel_output_feature: int
    kernel_spatial: tuple[int, ...]
    output_batch: int
    output_feature: int
    output_spatial: tuple[int, ...]


@dataclass(frozen=True)
class DotDims:
    """Dot dimension numbers (absent from ``node_feat``, as in the real data; used by the runtime model)."""

    lhs_contracting: tuple[int, ...]
    rhs_contracting: tuple[int, ...]
    lhs_batch: tuple[int, ...] = ()
    rhs_batch: tuple[int, ...] = ()


@dataclass
class Instruction:
    """One HLO instruction.

    Args:
        opcode: HLO opcode name as in :mod:`competition.opcodes` (``convolution``, ``add`` ...).
        shape: output shape.
        operands: indices of operand instructions in the same computation (smaller than this one's index where XLA
            or the synthetic world made the module).
        name: instruction name (informative only).
        dimensions: the instruction's ``dimensions`` attribute (reduce, broadcast, transpose, reverse, concatenate...).
        window: window for convolution / reduce-window / select-and-scatter.
        conv_dims: convolution dimension numbers.
        dot_dims: dot dimension numbers.
        feature_group_count, batch_group_count: convolution grouping.
        slice_starts, slice_limits, slice_strides: slice attributes.
        dynamic_slice_sizes: dynamic-slice sizes.
        pad_low, pad_high, pad_interior: edge and interior padding of a ``pad`` op, per dimension.
        is_stable: ``sort`` stability.
        parameter_number: the parameter's position, for ``parameter`` ops.
        called: names of the computations this instruction calls (fusion, while body and condition, reduce ...).
    """

    opcode: str
    shape: Shape
    operands: tuple[int, ...] = ()
    name: str = ""
    dimensions: tuple[int, ...] = ()
    window: Window | None = None
    conv_dims: ConvDims | None = None
    dot_dims: DotDims | None = None
    feature_group_count: int = 1
    batch_group_count: int = 1
    slice_starts: tuple[int, ...] = ()
    slice_limits: tuple[int, ...] = ()
    slice_strides: tuple[int, ...] = ()
    dynamic_slice_sizes: tuple[int, ...] = ()
    pad_low: tuple[int, ...] = ()
    pad_high: tuple[int, ...] = ()
    pad_interior: tuple[int, ...] = ()
    is_stable: bool = False
    parameter_number: int | None = None
    called: tuple[str, ...] = ()

    @property
    def opcode_id(self) -> int:
        return opcode_id(self.opcode)


@dataclass
class Computation:
    """A named list of instructions; the root is the last one unless ``root`` says otherwise."""

    name: str
    instructions: list[Instruction] = field(default_factory=list)
    root: int = -1

    def add(self, opcode: str, shape: Shape, operands: Sequence[int] = (), **attrs: object) -> int:
        """Append an instruction and return its index in this computation."""
        n = len(self.instructions)
        for o in operands:
            if not 0 <= o < n:
                raise ValueError(f"{self.name}: operand {o} of new {opcode} is not an earlier instruction")
        self.instructions.append(Instruction(opcode, shape, tuple(operands), **attrs))  # type: ignore[arg-type]
        return n

    @property
    def root_index(self) -> int:
        return self.root if self.root >= 0 else len(self.instructions) - 1

    def __len__(self) -> int:
        return len(self.instructions)

    def eliminate_dead_code(self) -> int:
        """Remove the instructions whose results nothing live uses, as XLA's dead-code elimination does: live are
        the root, the parameters, the ops with side effects (:data:`SIDE_EFFECT_OPS`) and, transitively, their
        operands. Operands and ``root`` are renumbered in place.

        Returns:
            How many instructions were removed.
        """
        n = len(self.instructions)
        live = np.zeros(n, dtype=bool)
        stack = [self.root_index] if n else []
        stack += [i for i, ins in enumerate(self.instructions)
                  if ins.opcode == "parameter" or ins.opcode in SIDE_EFFECT_OPS]
        while stack:
            i = stack.pop()
            if live[i]:
                continue
            live[i] = True
            stack.extend(o for o in self.instructions[i].operands if not live[o])
        if live.all():
            return 0
        new_index = np.cumsum(live) - 1
        root = int(new_index[self.root_index])
        kept = [ins for i, ins in enumerate(self.instructions) if live[i]]
        self.instructions = [replace(ins, operands=tuple(int(new_index[o]) for o in ins.operands)) for ins in kept]
        self.root = root if self.root >= 0 else -1
        return n - len(kept)


SIDE_EFFECT_OPS: frozenset[str] = frozenset({
    "outfeed", "infeed", "send", "send-done", "recv", "recv-done", "after-all", "rng", "custom-call",
})
"""Ops :meth:`Computation.eliminate_dead_code` keeps whether or not their results are used."""


@dataclass
class Module:
    """A program: computations in post-order, the entry computation last."""

    name: str
    computations: list[Computation] = field(default_factory=list)

    @property
    def entry(self) -> Computation:
        return self.computations[-1]

    def computation(self, name: str) -> Computation:
        for c in self.computations:
            if c.name == name:
                return c
        raise KeyError(f"{self.name}: no computation named {name!r}")

    @property
    def offsets(self) -> npt.NDArray[np.int64]:
        """Global node id of each computation's first instruction, plus the total at the end."""
        return np.concatenate([[0], np.cumsum([len(c) for c in self.computations])]).astype(np.int64)

    @property
    def num_nodes(self) -> int:
        return int(sum(len(c) for c in self.computations))

    def nodes(self) -> Iterator[tuple[int, Computation, int, Instruction]]:
        """Yield ``(global_id, computation, local_index, instruction)`` in node order."""
        gid = 0
        for comp in self.computations:
            for i, ins in enumerate(comp.instructions):
                yield gid, comp, i, ins
                gid += 1

    def instructions(self) -> list[Instruction]:
        """All instructions in node order (index = global node id)."""
        return [ins for c in self.computations for ins in c.instructions]

    def operand_edges(self) -> npt.NDArray[np.int64]:
        """``[consumer, producer]`` global id pairs, one per distinct operand, unsorted. Shape ``[E, 2]``."""
        rows: list[tuple[int, int]] = []
        for off, comp in zip(self.offsets[:-1], self.computations, strict=True):
            for i, ins in enumerate(comp.instructions):
                for o in dict.fromkeys(ins.operands):
                    rows.append((int(off) + i, int(off) + o))
        return np.asarray(rows, dtype=np.int64).reshape(-1, 2)

    def call_edges(self) -> npt.NDArray[np.int64]:
        """``[caller, callee root]`` global id pairs for every called computation. Shape ``[E, 2]``."""
        offsets = self.offsets
        index = {c.name: k for k, c in enumerate(self.computations)}
        rows: list[tuple[int, int]] = []
        for gid, _comp, _i, ins in self.nodes():
            for name in dict.fromkeys(ins.called):
                k = index[name]
                root = int(offsets[k]) + self.computations[k].root_index
                if root != gid:
                    rows.append((gid, root))
        return np.asarray(rows, dtype=np.int64).reshape(-1, 2)


UNLEARNED_OPCODES: frozenset[str] = frozenset({
    "erf", "topk", "ragged-all-to-all", "collective-broadcast", "ragged-dot", "trace", "tuple-select",
})
"""XLA opcodes without a TpuGraphs id (written as 0, unknown). Names in the table keep their own id."""


class HloFormatError(ValueError):
    """An input that cannot be read: the message names the file (and line or byte) and the problem.

    Args:
        source: the file (or a description of the input).
        problem: what is wrong, and where inside the file.
    """

    def __init__(self, source: object, problem: str) -> None:
        self.source = str(source)
        self.problem = problem
        super().__init__(f"{source}: {problem}")

    def __reduce__(self):
        return (type(self), (self.source, self.problem))


def known_opcode(name: str) -> bool:
    """Whether ``name`` is an XLA opcode this package can featurize (with its own id, or with id 0)."""
    return name in OPCODE_IDS or name in UNLEARNED_OPCODES


class HloInstruction(Instruction):
    """An instruction read from an XLA program: as :class:`Instruction`, with id 0 for the opcodes of
    :data:`UNLEARNED_OPCODES`."""

    @property
    def opcode_id(self) -> int:
        return OPCODE_IDS.get(self.opcode, 0)
