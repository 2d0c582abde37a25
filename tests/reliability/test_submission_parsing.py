"""Submission files as Kaggle reads them, replayed through the CLI: ``fastslow validate``, ``fastslow score``
and ``fastslow kaggle submit --dry-run``.

IDs and the header are matched exactly (no stripping); an index token is bounded before it is converted;
problems are capped per kind with a count of the rest; a line longer than any legal row is refused without
being held whole. Every problem is one line naming the file and the row; no command prints a traceback or
changes a file.
"""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable
from pathlib import Path

import pytest

import competition.submission_reading as reading
from competition.dataroot import find_data_root
from competition.submission_checks import validate_submission
from competition.submission_format import MAX_PROBLEMS_IN_MESSAGE, MAX_PROBLEMS_PER_KIND, problem_count
from fastslow.cli import EXIT_PROBLEMS, main


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, list[str], list[str]]:
    code = main(argv)
    out, err = capsys.readouterr()
    assert "Traceback" not in out and "Traceback" not in err
    return code, out.splitlines(), err.splitlines()


@pytest.fixture(scope="module")
def board(perfect: Path, tiny_world: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A leaderboard holding the perfect submission's row: no rejected file may touch it."""
    path = tmp_path_factory.mktemp("board") / "lb.csv"
    assert main(["score", str(perfect), "--data", str(tiny_world), "--leaderboard", str(path)]) == 0
    return path


def _snapshot(*paths: Path) -> dict[Path, bytes | list[str]]:
    """The bytes of each file and the names in its folder."""
    out: dict[Path, bytes | list[str]] = {p: p.read_bytes() for p in paths}
    out.update({p.parent: sorted(q.name for q in p.parent.iterdir()) for p in paths})
    return out


def _rejected(file: Path, problems: list[str], world: Path, board: Path,
              capsys: pytest.CaptureFixture[str]) -> None:
    """``validate``, ``kaggle submit --dry-run`` and ``score`` refuse ``file`` with exactly ``problems`` (one
    line each after ``FILE: ``), exit 1, and leave the file and the leaderboard as they were."""
    before = _snapshot(file, board)
    code, out, err = _run(["validate", str(file), "--data", str(world)], capsys)
    assert code == EXIT_PROBLEMS and err == []
    assert out == [f"{file}: {p}" for p in problems] + [f"{file}: {len(problems)} problem(s)"]

    code, out, err = _run(["kaggle", "submit", str(file), "-m", "m", "--data", str(world), "--dry-run"],
                          capsys)
    assert code == EXIT_PROBLEMS and err == []
    assert out[:-1] == [f"{file}: {p}" for p in problems]
    assert out[-1].startswith(f"{file}: {len(problems)} problem(s) against the test split")
    assert out[-1].endswith("nothing was sent to Kaggle")

    code, out, err = _run(["score", str(file), "--data", str(world), "--leaderboard", str(board)], capsys)
    assert code == EXIT_PROBLEMS and out == []
    assert err[0] == f"error: {file}: {len(problems)} problem(s)"
    assert err[1:1 + len(problems)] == [f"  {p}" for p in problems]
    assert err[-1].startswith("not scored: ")
    assert _snapshot(file, board) == before


def _lines(perfect: Path) -> list[str]:
    return perfect.read_text().splitlines(keepends=True)


def _first_id(perfect: Path) -> str:
    return _lines(perfect)[1].split(",")[0]


def _tile(perfect: Path) -> tuple[int, str]:
    """The first tile row: its number and ID."""
    rows = enumerate(_lines(perfect)[1:], start=1)
    n, line = next((n, line) for n, line in rows if line.startswith("tile:"))
    return n, line.split(",")[0]


def _missing(sid: str) -> str:
    return f"missing row [{sid}]: expected ID missing from the submission"


def _replace_id(perfect: Path, sid: str, new: str) -> str:
    return perfect.read_text().replace(f"\n{sid},", f"\n{new},", 1)


KAGGLE_EXACT = "Kaggle matches IDs exactly and would not find it"
OUT_OF_RANGE = "index(es) out of range of any graph (longer than 20 characters):"


# -- one case per function: the file's text, and the problems validate must print ----------------------------


def id_leading_space(perfect: Path) -> tuple[str, list[str]]:
    sid = _first_id(perfect)
    return _replace_id(perfect, sid, " " + sid), [
        f"row 1 [{' ' + sid!r}]: ID with leading whitespace: {KAGGLE_EXACT} (write {sid!r})", _missing(sid)]


def id_trailing_tab(perfect: Path) -> tuple[str, list[str]]:
    sid = _first_id(perfect)
    return _replace_id(perfect, sid, sid + "\t"), [
        f"row 1 [{sid + chr(9)!r}]: ID with trailing whitespace: {KAGGLE_EXACT} (write {sid!r})",
        _missing(sid)]


def tile_id_padded_both_ends(perfect: Path) -> tuple[str, list[str]]:
    n, sid = _tile(perfect)
    padded = f"\t{sid} "
    return _replace_id(perfect, sid, padded), [
        f"row {n} [{padded!r}]: ID with leading and trailing whitespace: {KAGGLE_EXACT} (write {sid!r})",
        _missing(sid)]


def id_no_break_space(perfect: Path) -> tuple[str, list[str]]:
    sid = _first_id(perfect)
    padded = sid + "\xa0"
    return _replace_id(perfect, sid, padded), [
        f"row 1 ['{sid}\\xa0']: ID with trailing whitespace: {KAGGLE_EXACT} (write {sid!r})", _missing(sid)]


def empty_id(perfect: Path) -> tuple[str, list[str]]:
    sid = _first_id(perfect)
    return _replace_id(perfect, sid, ""), ["row 1: empty ID", _missing(sid)]


def blank_id(perfect: Path) -> tuple[str, list[str]]:
    sid = _first_id(perfect)
    return _replace_id(perfect, sid, "  "), ["row 1: empty ID (only whitespace: '  ')", _missing(sid)]


def duplicated_id(perfect: Path) -> tuple[str, list[str]]:
    lines = _lines(perfect)
    sid = _first_id(perfect)
    return "".join(lines) + lines[1], [f"row {len(lines)} [{sid}]: duplicated ID (first on row 1)"]


def newline_in_quoted_id(perfect: Path) -> tuple[str, list[str]]:
    sid = _first_id(perfect)
    return _replace_id(perfect, sid, f'"{sid}\nx"'), [
        f"row 1 ['{sid}\\nx']: unknown ID: no such graph in the test split", _missing(sid)]


def nul_in_id(perfect: Path) -> tuple[str, list[str]]:
    sid = _first_id(perfect)
    return _replace_id(perfect, sid, sid + "\0"), [
        f"row 1 ['{sid}\\x00']: unknown ID: no such graph in the test split", _missing(sid)]


def three_fields(perfect: Path) -> tuple[str, list[str]]:
    lines = _lines(perfect)
    sid = _first_id(perfect)
    lines[1] = lines[1].rstrip("\n") + ",0\n"
    return "".join(lines), [f"row 1 [{sid}]: expected 2 fields; found 3", _missing(sid)]


def header_with_a_space(perfect: Path) -> tuple[str, list[str]]:
    return perfect.read_text().replace("ID,TopConfigs", "ID, TopConfigs", 1), [
        "header: expected the header ID,TopConfigs; found 'ID', ' TopConfigs': Kaggle matches column names "
        "exactly, spaces around them included"]


def index_of_5000_digits(perfect: Path) -> tuple[str, list[str]]:
    lines = _lines(perfect)
    sid = _first_id(perfect)
    lines[1] = f"{sid},0;{'9' * 5000};1\n"
    shown = f"'{'9' * 60}'...'{'9' * 12}' (5,000 characters)"
    return "".join(lines), [f"row 1 [{sid}]: {OUT_OF_RANGE} {shown} in TopConfigs"]


def index_of_21_digits(perfect: Path) -> tuple[str, list[str]]:
    n, sid = _tile(perfect)
    lines = _lines(perfect)
    lines[n] = f"{sid},0;1;2;3;{'1' * 21}\n"
    return "".join(lines), [f"row {n} [{sid}]: {OUT_OF_RANGE} '{'1' * 21}' in TopConfigs"]


def negative_index_of_30_digits(perfect: Path) -> tuple[str, list[str]]:
    n, sid = _tile(perfect)
    lines = _lines(perfect)
    lines[n] = f"{sid},0;1;2;3;-{'9' * 30}\n"
    return "".join(lines), [f"row {n} [{sid}]: {OUT_OF_RANGE} '-{'9' * 30}' in TopConfigs"]


def index_above_int64(perfect: Path) -> tuple[str, list[str]]:
    n, sid = _tile(perfect)
    lines = _lines(perfect)
    lines[n] = f"{sid},0;1;2;3;{2**63}\n"
    return "".join(lines), [f"row {n} [{sid}]: index(es) too large for any graph: {2**63} in TopConfigs"]


CASES: dict[str, Callable[[Path], tuple[str, list[str]]]] = {f.__name__: f for f in (
    id_leading_space, id_trailing_tab, tile_id_padded_both_ends, id_no_break_space, empty_id, blank_id,
    duplicated_id, newline_in_quoted_id, nul_in_id, three_fields, header_with_a_space, index_of_5000_digits,
    index_of_21_digits, negative_index_of_30_digits, index_above_int64,
)}


@pytest.mark.parametrize("case", list(CASES))
def test_each_case_is_one_line_naming_file_and_row(case: str, perfect: Path, tiny_world: Path, board: Path,
                                                   tmp_path: Path, no_credentials: Path,
                                                   capsys: pytest.CaptureFixture[str]):
    text, problems = CASES[case](perfect)
    file = tmp_path / f"{case}.csv"
    file.write_text(text, newline="")
    _rejected(file, problems, tiny_world, board, capsys)


# -- what Kaggle accepts is accepted -------------------------------------------------------------------------


ACCEPTED: dict[str, Callable[[bytes], bytes]] = {
    "utf8_byte_order_mark": lambda b: b"\xef\xbb\xbf" + b,
    "crlf_line_ends": lambda b: b.replace(b"\n", b"\r\n"),
    "cr_line_ends": lambda b: b.replace(b"\n", b"\r"),
    "byte_order_mark_and_crlf": lambda b: b"\xef\xbb\xbf" + b.replace(b"\n", b"\r\n"),
    "no_final_line_end": lambda b: b.rstrip(b"\n"),
    "blank_lines": lambda b: b.replace(b"\n", b"\n\n"),
}


@pytest.mark.parametrize("chunk", [reading._Lines.CHUNK, 3])
@pytest.mark.parametrize("case", list(ACCEPTED))
def test_line_ends_and_byte_order_mark_are_accepted(case: str, chunk: int, perfect: Path, tiny_world: Path,
                                                    tmp_path: Path, no_credentials: Path,
                                                    monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]):
    """Also with reads of 3 characters, which split a CRLF line end between two reads."""
    monkeypatch.setattr(reading._Lines, "CHUNK", chunk)
    file = tmp_path / f"{case}.csv"
    file.write_bytes(ACCEPTED[case](perfect.read_bytes()))
    assert _run(["validate", str(file), "--data", str(tiny_world)], capsys) == (0, [f"{file}: valid"], [])
    code, out, _ = _run(["kaggle", "submit", str(file), "-m", "m", "--data", str(tiny_world), "--dry-run"],
                        capsys)
    assert code == 0 and out[0].startswith("dry run: valid against")
    assert reading.read_submission(file).keys() == reading.read_submission(perfect).keys()


# -- bounded memory, bounded output --------------------------------------------------------------------------


def test_a_line_of_50_mb_is_refused_without_being_held(perfect: Path, tiny_world: Path, board: Path,
                                                        tmp_path: Path, no_credentials: Path,
                                                        capsys: pytest.CaptureFixture[str]):
    sid = _first_id(perfect)
    lines = _lines(perfect)
    file = tmp_path / "huge.csv"
    digits = 50 * 2**20
    with open(file, "w") as f:
        f.write(lines[0] + f"{sid},")
        for _ in range(50):
            f.write("1" * 2**20)
        f.write("\n" + "".join(lines[2:]))
    _run(["validate", str(perfect), "--data", str(tiny_world)], capsys)  # imports and caches out of the count
    tracemalloc.start()
    try:
        code, out, _ = _run(["validate", str(file), "--data", str(tiny_world)], capsys)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert code == EXIT_PROBLEMS
    assert peak < 20 * 2**20, f"peak {peak / 2**20:.1f} MiB of Python allocations"
    problem = (f"row 1 [{sid}]: line 2 holds {len(sid) + 1 + digits:,} characters, more than any legal row "
               f"({reading.MAX_ROW_CHARS:,}: an ID and a permutation of {reading.MAX_CONFIGS:,} configs); not read")
    assert out == [f"{file}: {problem}", f"{file}: 1 problem(s)"]
    _rejected(file, [problem], tiny_world, board, capsys)


def test_many_bad_rows_print_a_bounded_list_and_the_count_of_the_rest(tiny_world: Path, board: Path,
                                                                      tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]):
    file = tmp_path / "bad.csv"
    n = 100_000
    with open(file, "w") as f:
        f.write("ID,TopConfigs\n")
        f.writelines(f"tile:xla:g{i},x\n" for i in range(n))
    before = _snapshot(file, board)
    code, out, err = _run(["validate", str(file), "--data", str(tiny_world)], capsys)
    assert code == EXIT_PROBLEMS and err == []
    graphs = len(reading.read_sample_ids(find_data_root(tiny_world).sample_submission))
    kept = MAX_PROBLEMS_PER_KIND
    assert len(out) == kept + min(graphs, kept) + (graphs > kept) + 2
    assert out[:kept] == [f"{file}: row {i + 1} [tile:xla:g{i}]: non-integer token(s) 'x' in TopConfigs"
                          for i in range(kept)]
    summary = (f"{file}: ... and {n - kept:,} more of this kind (non-integer tokens in TopConfigs: {n:,} in "
               f"all, the first {kept} listed)")
    assert summary in out
    code, out, err = _run(["score", str(file), "--data", str(tiny_world), "--leaderboard", str(board)],
                          capsys)
    assert code == EXIT_PROBLEMS and out == [] and len(err) <= MAX_PROBLEMS_IN_MESSAGE + 3
    assert err[0] == f"error: {file}: {n + graphs} problem(s)"
    assert err[-2] == f"  ... and {n + graphs - MAX_PROBLEMS_IN_MESSAGE} more"
    assert _snapshot(file, board) == before


def test_rows_past_the_row_limit_are_not_read(tiny_world: Path, board: Path, tmp_path: Path,
                                              no_credentials: Path, monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]):
    monkeypatch.setattr(reading, "MAX_ROWS", 30)
    file = tmp_path / "long.csv"
    file.write_text("ID,TopConfigs\n" + "".join(f"tile:xla:g{i},0;1;2;3;4\n" for i in range(40)))
    _rejected(file, ["row 31: more than 30 rows (a submission holds one row per graph, and a split has at "
                     "most a few thousand graphs); the rest of the file is not read"], tiny_world, board,
              capsys)


def test_an_unclosed_quote_stops_at_the_row_limit(tiny_world: Path, board: Path, tmp_path: Path,
                                                  no_credentials: Path, monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]):
    """A quote left open swallows the lines after it into one field: the record is refused at the length of
    the longest legal row, not read to the end of the file."""
    monkeypatch.setattr(reading, "MAX_ROW_CHARS", 1000)
    file = tmp_path / "quote.csv"
    file.write_text('ID,TopConfigs\ntile:xla:a,"0;1\n' + "2;3;4;5;6;7;8;9\n" * 1000)
    _rejected(file, ["row 1: one record of 1,005 characters or more on lines 2-68, longer than any legal "
                     "row (1,000): a quote left open?; the rest of the file is not read"], tiny_world, board,
              capsys)


def test_a_header_longer_than_any_row(tiny_world: Path, board: Path, tmp_path: Path, no_credentials: Path,
                                      monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]):
    monkeypatch.setattr(reading, "MAX_ROW_CHARS", 1000)
    file = tmp_path / "header.csv"
    file.write_text("ID,TopConfigs" + ",x" * 1000 + "\n")
    _rejected(file, ["header: expected the header ID,TopConfigs; found a line of 2,013 characters"],
              tiny_world, board, capsys)


def test_data_problems_are_capped_per_kind(perfect: Path, tiny_world: Path, board: Path, tmp_path: Path,
                                           no_credentials: Path, capsys: pytest.CaptureFixture[str]):
    file = tmp_path / "unknown.csv"
    file.write_text(perfect.read_text() + "".join(f"tile:xla:nosuch{i:02},0;1;2;3;4\n" for i in range(50)))
    rows = len(_lines(perfect)) - 1
    problems = [f"row {rows + 1 + i} [tile:xla:nosuch{i:02}]: unknown ID: no such graph in the test split"
                for i in range(20)]
    code, out, _ = _run(["validate", str(file), "--data", str(tiny_world)], capsys)
    assert code == EXIT_PROBLEMS
    assert out == [f"{file}: {p}" for p in problems] + [
        f"{file}: ... and 30 more of this kind (unknown IDs: 50 in all, the first 20 listed)",
        f"{file}: 50 problem(s)"]
    assert problem_count(validate_submission(file, find_data_root(tiny_world))) == 50


def test_a_byte_that_is_not_utf8_deep_in_a_large_file(tiny_world: Path, board: Path, tmp_path: Path,
                                                       no_credentials: Path,
                                                       capsys: pytest.CaptureFixture[str]):
    file = tmp_path / "latin1.csv"
    body = b"ID,TopConfigs\n" + b"".join(b"tile:xla:g%d,0;1;2;3;4\n" % i for i in range(60_000))
    file.write_bytes(body + b"tile:xla:caf\xe9,0\n")
    problem = (f"file: expected UTF-8 text; found byte 0xE9 at line 60002 (byte {len(body) + 12}) that is "
               "not UTF-8 (invalid continuation byte; latin-1 or another 8-bit encoding?): save it as UTF-8")
    _rejected(file, [problem], tiny_world, board, capsys)
