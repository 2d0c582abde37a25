"""The HLO-like IR's dead-code elimination, on a computation whose live set is known."""

from __future__ import annotations

from competition.hlo.ir import Computation, Shape


def test_dead_code_is_removed_and_operands_renumbered() -> None:
    f = Shape("f32", (4, 8))
    c = Computation("body")
    p0 = c.add("parameter", f, parameter_number=0)
    p1 = c.add("parameter", f, parameter_number=1)  # unused, but a parameter: kept
    dead = c.add("negate", f, (p0,))
    c.add("exponential", f, (dead,))  # uses only dead values: dead too
    token = c.add("after-all", Shape("token"))
    c.add("outfeed", Shape("token"), (p0, token))  # a side effect: kept with its operands
    live = c.add("add", f, (p0, p0))
    c.add("multiply", f, (live, p0))  # the root
    assert c.eliminate_dead_code() == 2
    assert [i.opcode for i in c.instructions] == ["parameter", "parameter", "after-all", "outfeed", "add",
                                                  "multiply"]
    assert [i.operands for i in c.instructions] == [(), (), (), (0, 2), (0, 0), (4, 0)]
    assert c.root_index == 5 and p1 == 1
    assert c.eliminate_dead_code() == 0


def test_an_explicit_root_follows_its_instruction() -> None:
    f = Shape("f32", (2,))
    c = Computation("entry")
    p = c.add("parameter", f, parameter_number=0)
    c.add("negate", f, (p,))  # dead
    root = c.add("abs", f, (p,))
    c.add("sqrt", f, (p,))  # after the root, and dead
    c.root = root
    assert c.eliminate_dead_code() == 2
    assert c.root == 1 and c.instructions[c.root].opcode == "abs"
