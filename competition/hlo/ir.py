"""The program objects the HLO readers build, and the error they raise.

Modules are those of :mod:`competition.synthetic.hlo`, so the synthetic world and a real XLA program go through
the same feature writer. One difference: an XLA program may hold opcodes the TpuGraphs opcode table has no id for
(``erf``, ``topk`` ...); the official featurizer gives them id 0 (unknown), and :class:`HloInstruction` does the
same, while a name that is no XLA opcode at all is refused by the readers.
"""

from __future__ import annotations

from competition.opcodes import OPCODE_IDS
from competition.synthetic.hlo import Instruction

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
