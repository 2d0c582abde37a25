"""Text from users (producer names, file stems, paths) is escaped wherever it is drawn or printed: a leaderboard row
can neither break later plots (matplotlib's mathtext) nor forge a line of a printed table, nor run as a formula in
a spreadsheet."""

from __future__ import annotations

import csv
import shutil
from pathlib import Path

import pytest

from fastslow.board import read_rows
from fastslow.cli import EXIT_OK, main
from fastslow.display import csv_cell, plain_text, printable
from tests.reliability.helpers import run

PRODUCERS = ["$\\foo$", "a$b$c$", "two\nlines", "bell\x07 and \x1b[2J", "=HYPERLINK(\"http://x\")", "@sum(1)",
             "-1+2", "<b>bold</b> & 'q'"]


@pytest.fixture(scope="module")
def board(tiny_world: Path, perfect: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A leaderboard with one row per hostile producer name."""
    folder = tmp_path_factory.mktemp("board")
    board = folder / "lb.csv"
    for producer in PRODUCERS:
        assert main(["score", str(perfect), "--data", str(tiny_world), "--split", "test", "--leaderboard",
                     str(board), f"--producer={producer}"]) == EXIT_OK
    return board


def test_every_hostile_name_is_recorded_and_read_back(board: Path):
    rows = read_rows(board)
    assert [r["producer"] for r in rows] == [csv_cell(p) for p in PRODUCERS]
    # In the CSV, a cell a spreadsheet would run starts with a quote.
    with open(board, newline="") as f:
        cells = [r["producer"] for r in csv.DictReader(f)]
    assert all(not c.startswith(("=", "+", "-", "@")) for c in cells)


def test_leaderboard_prints_one_line_per_row_and_plots(board: Path, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]):
    plot = tmp_path / "lb.png"
    code, out, err = run(["leaderboard", "--leaderboard", board, "--plot", plot], capsys)
    assert code == EXIT_OK and err == "", err
    table = [line for line in out.splitlines() if line[:3].strip().isdigit()]
    assert len(table) == len(PRODUCERS)
    assert "\x1b" not in out and "\x07" not in out and "two\\nlines" in out
    assert plot.stat().st_size > 0
    # Again, and a second plot: nothing broke for good.
    code, out, err = run(["leaderboard", "--leaderboard", board, "--plot", plot], capsys)
    assert code == EXIT_OK and err == ""


def test_report_draws_and_escapes_the_names(board: Path, tiny_world: Path, tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]):
    local = tmp_path / "lb.csv"
    shutil.copy(board, local)
    out_dir = tmp_path / "report"
    code, out, err = run(["report", "--out", out_dir, "--data", tiny_world, "--leaderboard", local, "--split",
                          "test", "--runs", tmp_path / "none", "--graphs", "1", "--no-progress"], capsys)
    assert code == EXIT_OK, err
    page = (out_dir / "index.html").read_text()
    assert "<b>bold</b>" not in page and "&lt;b&gt;bold&lt;/b&gt;" in page
    # The producers' names are drawn in the scores plot, the graphs' stems in the ranks plot.
    assert (out_dir / "scores.png").stat().st_size > 0 and (out_dir / "ranks.png").stat().st_size > 0


def test_mathtext_is_off_only_inside_plain_text():
    import matplotlib

    before = matplotlib.rcParams["text.parse_math"]
    with plain_text():
        assert matplotlib.rcParams["text.parse_math"] is False
    assert matplotlib.rcParams["text.parse_math"] == before


@pytest.mark.parametrize(("text", "shown"), [("plain", "plain"), ("a\nb", "a\\nb"), ("\x1b[2J", "\\x1b[2J"),
                                             ("tab\there", "tab\\there"), ("é ü", "é ü"), ("\u202e", "\\u202e")])
def test_printable(text: str, shown: str):
    assert printable(text) == shown


@pytest.mark.parametrize(("text", "cell"), [("=1+1", "'=1+1"), ("+1", "'+1"), ("-x", "'-x"), ("@a", "'@a"),
                                            ("\tx", "'\tx"), ("gbdt", "gbdt"), ("", "")])
def test_csv_cell(text: str, cell: str):
    assert csv_cell(text) == cell
