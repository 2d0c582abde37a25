"""HLO text with a bracket or string left open: refused at once, naming the line that opened it, in time linear in
the file (the statement joiner used to re-scan the joined text after every line: 8,000 lines took minutes)."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from competition.hlo import text as hlo_text
from competition.hlo.ir import HloFormatError
from competition.hlo.text import parse_hlo_text
from tests.reliability.helpers import one_line


def program(n: int, *, edit: tuple[int, str, str] | None = None, tail: str = "") -> str:
    """An entry computation of ``n`` instructions (a chain of adds, each with its metadata), one per line: line 4
    holds the parameter, line ``k + 4`` the ``k``-th add. ``edit`` (line number, old, new) changes one line."""
    lines = ["HloModule big, entry_computation_layout={(f32[8]{0})->f32[8]{0}}", "",
             "ENTRY %main (p0: f32[8]) -> f32[8] {",
             '  %p0 = f32[8]{0} parameter(0), metadata={op_name="p0" source_file="model.py" source_line=1}']
    for k in range(1, n):
        root = "ROOT " if k == n - 1 else ""
        prev = "p0" if k == 1 else f"a{k - 1}"
        lines.append(f"  {root}%a{k} = f32[8]{{0}} add(f32[8]{{0}} %{prev}, %p0), "
                     f'metadata={{op_name="jit(f)/add_{k}" source_file="model.py" source_line={k}}}')
    lines.append("}")
    if edit is not None:
        at, old, new = edit
        assert old in lines[at - 1]
        lines[at - 1] = lines[at - 1].replace(old, new)
    return "\n".join(lines) + "\n" + tail


UNCLOSED_BRACE = (5, "source_line=1}", "source_line=1")  # %a1's metadata={ is never closed


class CountedScans:
    """Counts the characters the parser reads while joining statements and splitting them."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.chars = 0
        carry, scan = hlo_text._carry, hlo_text._scan

        def counted_carry(text: str, depth: int, quote: bool) -> tuple[int, bool]:
            self.chars += len(text)
            return carry(text, depth, quote)

        def counted_scan(text: str, start: int = 0):
            for item in scan(text, start):
                self.chars += 1
                yield item

        monkeypatch.setattr(hlo_text, "_carry", counted_carry)
        monkeypatch.setattr(hlo_text, "_scan", counted_scan)


def test_featurize_refuses_an_unclosed_brace_at_once(tmp_path: Path) -> None:
    src = tmp_path / "prog.hlo"
    src.write_text(program(8000, edit=UNCLOSED_BRACE))
    out = tmp_path / "out"
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "fastslow", "featurize", str(src), "--out", str(out)],
                          capture_output=True, text=True, timeout=60)
    elapsed = time.monotonic() - start
    assert done.returncode == 2, done.stderr
    line = one_line(done.stderr)
    assert str(src) in line and "line 5: '{' opened here" in line, line
    assert elapsed < 10, f"took {elapsed:.1f}s"  # minutes before the fix; about a second of it is Python starting
    assert not out.exists() or not any(out.rglob("*"))


@pytest.mark.parametrize("n", [2000, 4000, 8000])
def test_an_unclosed_brace_is_found_in_linear_work(n: int, monkeypatch: pytest.MonkeyPatch) -> None:
    text = program(n, edit=UNCLOSED_BRACE)
    counted = CountedScans(monkeypatch)
    with pytest.raises(HloFormatError) as err:
        parse_hlo_text(text, "prog.hlo")
    assert str(err.value).startswith("prog.hlo: line 5: '{' opened here is n")
    assert counted.chars <= 2 * len(text)


def test_the_statement_bound_stops_a_runaway_early(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hlo_text, "MAX_STATEMENT_CHARS", 10_000)
    with pytest.raises(HloFormatError) as err:
        parse_hlo_text(program(1000, edit=UNCLOSED_BRACE), "prog.hlo")
    message = str(err.value)
    assert message.startswith("prog.hlo: line 5: '{' opened here is not closed within 10000 characters"), message
    by = int(re.search(r"\(by line (\d+)\)", message).group(1))
    assert 50 < by < 150  # about 10,000 characters (lines of about 120) after line 5, not the file's end (1004)


@pytest.mark.parametrize("edit, opened", [
    ((7, '"jit(f)/add_3"', '"jit(f)/add_3'), "line 7: '\"' opened here is never closed"),
    ((7, '%p0), metadata', '%p0, metadata'), "line 7: '(' opened here is never closed"),
    ((7, "source_line=3}", "source_line=3"), "line 7: '{' opened here is never closed"),
    ((4, "parameter(0)", "parameter(0"), "line 4: '(' opened here is never closed"),
])
def test_the_error_names_the_opening_line(edit: tuple[int, str, str], opened: str) -> None:
    with pytest.raises(HloFormatError) as err:
        parse_hlo_text(program(50, edit=edit), "prog.hlo")
    assert str(err.value) == f"prog.hlo: {opened}"


def test_a_later_computation_does_not_hide_the_opening_line() -> None:
    callee = program(20, edit=(9, "source_line=5}", "source_line=5")).replace("ENTRY %main", "%callee")
    text = callee + "\nENTRY %top (q: f32[8]) -> f32[8] {\n  ROOT %q = f32[8]{0} parameter(0)\n}\n"
    with pytest.raises(HloFormatError) as err:
        parse_hlo_text(text, "prog.hlo")
    assert str(err.value) == "prog.hlo: line 9: '{' opened here is never closed"


def test_compiled_sections_after_the_body_do_not_hide_the_opening_line() -> None:
    text = program(20, edit=UNCLOSED_BRACE, tail='\nFileNames\n1 "model.py"\n\nFunctionNames\n1 "f"\n')
    with pytest.raises(HloFormatError) as err:
        parse_hlo_text(text, "prog.hlo")
    assert str(err.value) == "prog.hlo: line 5: '{' opened here is never closed"


def test_a_well_formed_program_parses_in_linear_work(monkeypatch: pytest.MonkeyPatch) -> None:
    small, large = program(2000), program(20000)
    counted = CountedScans(monkeypatch)
    assert len(parse_hlo_text(small).computations[0]) == 2000
    small_chars, counted.chars = counted.chars, 0
    assert len(parse_hlo_text(large).computations[0]) == 20000
    assert counted.chars <= 5 * len(large)
    assert counted.chars <= 11 * small_chars


def test_a_statement_over_several_lines_parses_as_its_one_line_form() -> None:
    one = program(5)
    split = one.replace('%p0), metadata={op_name="jit(f)/add_2" source_file="model.py" source_line=2}',
                        '%p0), metadata={\n      op_name="jit(f)/add_2"\n      source_file="model.py"\n'
                        '      source_line=2\n  }')
    split = split.replace("add(f32[8]{0} %a2, %p0)", "add(\n    f32[8]{0} %a2, /*x=1*/\n    %p0\n  )")
    split = split.replace('op_name="jit(f)/add_4"', 'op_name="jit(f)/{add(_4"')  # brackets in a string
    assert split.count("\n") == one.count("\n") + 7
    assert parse_hlo_text(split) == parse_hlo_text(one)
    with pytest.raises(HloFormatError) as err:  # the line numbers are those where each statement starts
        parse_hlo_text(split.replace("%a3 = f32[8]{0} add(", "%a3 = f32[8]{0} frobnicate("), "prog.hlo")
    assert str(err.value) == "prog.hlo: line 11: a3: unknown opcode 'frobnicate'"
