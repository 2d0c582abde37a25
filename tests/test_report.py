"""``fastslow report``: the HTML page, its plots and tables, on the tiny synthetic world."""

from __future__ import annotations

import argparse
from html.parser import HTMLParser
from pathlib import Path

import pytest

from competition.collections import Collection
from fastslow.board import read_rows
from fastslow.report import add_parser, build_report
from fastslow.report_sections import read_curves

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
CURVES = ("epoch,train_loss,valid_metric,lr,seconds\n"
          "1,1.50,0.10,0.001,2.0\n2,1.10,0.30,0.001,2.0\n3,0.90,0.35,0.0005,2.0\n")


class _Page(HTMLParser):
    """Collects every ``<img src>``, every table (by id, as rows of cell texts) and the text of each section."""

    def __init__(self) -> None:
        super().__init__()
        self.images: list[str] = []
        self.tables: dict[str, list[list[str]]] = {}
        self.sections: dict[str, str] = {}
        self._table: str | None = None
        self._cell: list[str] | None = None
        self._section: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "img":
            self.images.append(a["src"] or "")
        elif tag == "table":
            self._table = a["id"]
            self.tables[self._table or ""] = []
        elif tag == "tr" and self._table is not None:
            self.tables[self._table].append([])
        elif tag in ("td", "th"):
            self._cell = []
        elif tag == "section":
            self._section = a["id"]
            self.sections[self._section or ""] = ""

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None and self._table is not None:
            self.tables[self._table][-1].append("".join(self._cell))
            self._cell = None
        elif tag == "table":
            self._table = None
        elif tag == "section":
            self._section = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)
        if self._section is not None:
            self.sections[self._section] += data


def _parse(index: Path) -> _Page:
    page = _Page()
    page.feed(index.read_text(encoding="utf-8"))
    return page


def _table(page: _Page, table_id: str) -> list[dict[str, str]]:
    header, *rows = page.tables[table_id]
    return [dict(zip(header, r, strict=True)) for r in rows]


@pytest.fixture(scope="module")
def built(tiny_world: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """A pipeline run (random and default-first) plus one hand-written training run, and the report on them.

    Returns:
        ``(index.html, leaderboard CSV, work folder)``.
    """
    from fastslow.pipeline import run_pipeline

    work = tmp_path_factory.mktemp("report")
    board = work / "lb.csv"
    run_pipeline(data=tiny_world, models=["random", "default-first"], out_dir=work / "subs", leaderboard=board,
                 progress=False)
    curves = work / "runs" / "gnn" / "layout-xla-default" / "curves.csv"
    curves.parent.mkdir(parents=True)
    curves.write_text(CURVES, encoding="utf-8")
    index = build_report(work / "report", root=tiny_world, leaderboard=board, runs_dir=work / "runs", graphs=3,
                         progress=False)
    return index, board, work


def test_every_image_is_an_existing_png(built: tuple[Path, Path, Path]):
    index, _, _ = built
    assert index.is_file() and index.name == "index.html"
    page = _parse(index)
    assert sorted(page.images) == ["curves.png", "per-graph.png", "pruning.png", "ranks.png", "scores.png"]
    for src in page.images:
        png = index.parent / src
        assert png.parent == index.parent and png.is_file() and png.stat().st_size > 1000
        assert png.read_bytes()[:8] == PNG_MAGIC
    assert not [p for p in index.parent.parent.iterdir() if p.name.startswith(".report.")]  # no temp folder left


def test_score_table_matches_the_leaderboard(built: tuple[Path, Path, Path], tiny_world: Path):
    index, board, _ = built
    rows = {r["producer"]: r for r in read_rows(board) if r["split"] == "valid"}
    table = _table(_parse(index), "scores-table")
    assert [r["producer"] for r in table] == [
        *sorted(rows, key=lambda p: float(rows[p]["combined"]), reverse=True), "oracle ceiling"]
    for r in table[:-1]:
        for name in [c.value for c in Collection] + ["combined"]:
            assert r[name] == f"{float(rows[r['producer']][name]):.4f}"
    oracle = table[-1]
    assert all(float(oracle[c.value]) >= float(r[c.value]) - 1e-9 for r in table[:-1] for c in Collection)


def test_sections_name_their_inputs(built: tuple[Path, Path, Path]):
    index, board, _ = built
    page = _parse(index)
    assert "gnn/layout-xla-default" in page.sections["curves"]
    curves = _table(page, "curves-table")
    assert curves == [{"run": "gnn/layout-xla-default", "epochs": "3", "last train_loss": "0.9000",
                       "last valid_metric": "0.3500", "best valid_metric": "0.3500", "at epoch": "3",
                       "last lr": "0.0005", "seconds": "6.0000"}]
    ranks = _table(page, "ranks-table")
    assert len(ranks) == 3 and len({r["graph"].rsplit(":", 1)[0] for r in ranks}) == 3  # spread over collections
    per_graph = _table(page, "per-graph-table")
    assert [r["collection"] for r in per_graph] == [c.value for c in Collection]
    assert {r["collection"] for r in _table(page, "pruning-table")} == {c.value for c in Collection}
    best = max((r for r in read_rows(board) if r["split"] == "valid"), key=lambda r: float(r["combined"]))
    assert Path(best["file"]).name in page.sections["per-graph"]  # the best valid submission is studied


def test_without_leaderboard_runs_or_submission_the_report_says_what_is_missing(tiny_world: Path, tmp_path: Path):
    index = build_report(tmp_path / "out", root=tiny_world, leaderboard=tmp_path / "none.csv",
                         runs_dir=tmp_path / "runs", progress=False)
    page = _parse(index)
    assert "No leaderboard at" in page.sections["scores"]
    assert "no training runs found under" in page.sections["curves"].lower()
    assert "no submission given" in page.sections["per-graph"].lower()
    assert "no submission given" in page.sections["ranks"].lower()
    assert page.images == ["pruning.png"] and (index.parent / "pruning.png").stat().st_size > 0


def test_a_report_replaces_the_old_one_and_refuses_other_folders(built: tuple[Path, Path, Path], tiny_world: Path,
                                                                  tmp_path: Path):
    _, board, work = built
    out = tmp_path / "rep"
    build_report(out, root=tiny_world, leaderboard=board, runs_dir=tmp_path / "none", graphs=0, progress=False)
    listed = (out / ".fastslow-report").read_text(encoding="utf-8").split()
    assert sorted(listed) == sorted(p.name for p in out.iterdir() if p.name != ".fastslow-report")
    # A file the old report wrote and the new one does not is removed; the report folder is swapped whole.
    (out / "stale.png").write_bytes(b"x")
    (out / ".fastslow-report").write_text("\n".join([*listed, "stale.png"]) + "\n", encoding="utf-8")
    sub = next((work / "subs").glob("valid-random.csv"))
    index = build_report(out, root=tiny_world, submission=sub, leaderboard=board, runs_dir=tmp_path / "none",
                         graphs=0, progress=False)
    assert not (out / "stale.png").exists() and "valid-random.csv" in index.read_text(encoding="utf-8")
    assert "--graphs 0" in _parse(index).sections["ranks"]
    # The old report waited in a temporary sibling, removed after: only the report is left beside it.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rep"]
    # A file of the user's put into the report folder survives the next report.
    (out / "notes.txt").write_text("keep", encoding="utf-8")
    build_report(out, root=tiny_world, leaderboard=board, runs_dir=tmp_path / "none", graphs=0, progress=False)
    assert (out / "notes.txt").read_text(encoding="utf-8") == "keep" and "notes.txt" not in (
        out / ".fastslow-report").read_text(encoding="utf-8")
    other = tmp_path / "mine"
    other.mkdir()
    (other / "notes.txt").write_text("keep", encoding="utf-8")
    with pytest.raises(ValueError, match="refusing"):
        build_report(other, root=tiny_world, leaderboard=board, runs_dir=tmp_path / "none", progress=False)
    assert (other / "notes.txt").read_text(encoding="utf-8") == "keep"


def test_bad_curves_file_is_reported(tmp_path: Path):
    bad = tmp_path / "curves.csv"
    bad.write_text("epoch,loss\n1,2\n", encoding="utf-8")
    with pytest.raises(ValueError, match="missing column"):
        read_curves(bad)
    bad.write_bytes("epoch,train_loss\n1,\u00e9\n".encode("latin-1"))
    with pytest.raises(ValueError, match=f"^{bad}: not a readable curves CSV \\(UnicodeDecodeError"):
        read_curves(bad)


def _parser() -> tuple[argparse.ArgumentParser, argparse.ArgumentParser]:
    parser = argparse.ArgumentParser(prog="fastslow")
    sub = parser.add_subparsers(dest="command", required=True)
    add_parser(sub)
    return parser, sub.choices["report"]


def test_every_option_has_help(capsys: pytest.CaptureFixture[str]):
    parser, report = _parser()
    options = {o for a in report._actions for o in a.option_strings}
    assert options == {"-h", "--help", "--data", "--submission", "--split", "--leaderboard", "--runs", "--out",
                       "--graphs", "--no-progress", "--valid-configs", "--valid-indices", "--force"}
    assert all(a.help for a in report._actions)
    with pytest.raises(SystemExit) as exc:
        parser.parse_args(["report", "--help"])
    assert exc.value.code == 0
    text = capsys.readouterr().out
    assert all(o in text for o in options)


def test_command_prints_the_index_path(built: tuple[Path, Path, Path], tiny_world: Path, tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]):
    _, board, _ = built
    parser, _ = _parser()
    out = tmp_path / "cli-report"
    args = parser.parse_args(["report", "--data", str(tiny_world), "--leaderboard", str(board), "--runs",
                              str(tmp_path / "none"), "--out", str(out), "--split", "test", "--graphs", "1",
                              "--no-progress"])
    assert args.func(args) == 0
    assert capsys.readouterr().out.strip() == str(out / "index.html")
    page = _parse(out / "index.html")
    assert len(_table(page, "ranks-table")) == 1  # the synthetic test split is scored through secret/
    with pytest.raises(SystemExit):
        parser.parse_args(["report", "--split", "train"])
