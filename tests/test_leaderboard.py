"""The offline leaderboard: rows appended and read back, ordering, the plot."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from competition.collections import Collection
from fastslow.board import COLUMNS, append_row, format_leaderboard, read_rows, save_plot


def _submission(tmp_path: Path, text: str) -> Path:
    p = tmp_path / f"{abs(hash(text))}.csv"
    p.write_text(text)
    return p


def test_rows_are_appended_and_read_back(tmp_path: Path):
    board = tmp_path / "lb.csv"
    sub = _submission(tmp_path, "ID,TopConfigs\n")
    scores = {c: 0.1 * (i + 1) for i, c in enumerate(Collection)}
    row = append_row(scores, file=sub, producer="random", split="test", data=tmp_path, synthetic=True, path=board,
                     now=datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC))
    assert row["combined"] == "0.300000" and row["complete"] == "true"
    append_row({Collection.TILE_XLA: 0.9}, file=sub, producer="tile-only", split="valid", data=tmp_path,
               synthetic=False, path=board)
    rows = read_rows(board)
    assert [r["producer"] for r in rows] == ["random", "tile-only"]
    assert rows[0]["time"] == "2026-01-02T03:04:05+00:00"
    assert rows[0]["layout:nlp:random"] == "0.500000" and rows[0]["tile:xla"] == "0.100000"
    assert rows[1]["combined"] == "0.900000" and rows[1]["complete"] == "false" and rows[1]["layout:xla:default"] == ""
    assert len(rows[0]["sha256"]) == 64
    table = format_leaderboard(rows).splitlines()
    assert "tile-only" in table[1] and "(partial)" in table[1], "best combined first"
    assert "random" in table[2]


def test_foreign_csv_is_refused(tmp_path: Path):
    board = tmp_path / "lb.csv"
    board.write_text("a,b\n1,2\n")
    with pytest.raises(ValueError, match="expected leaderboard columns"):
        read_rows(board)


def test_plot_is_written(tmp_path: Path):
    board = tmp_path / "lb.csv"
    sub = _submission(tmp_path, "x")
    for v in (0.2, 0.4):
        append_row({c: v for c in Collection}, file=sub, producer="m", split="test", data=".", synthetic=True,
                   path=board)
    png = save_plot(read_rows(board), tmp_path / "plot.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert set(COLUMNS) >= {"combined", "commit", "sha256"}
