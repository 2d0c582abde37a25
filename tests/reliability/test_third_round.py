"""Refusals of the third reliability round: a world of no graphs, a CUDA device this torch cannot use, and JSON or
TOML files nested thousands deep, each refused in one line (exit 2) before anything is written."""

from __future__ import annotations

from pathlib import Path

import pytest

from competition.cli import EXIT_ERROR
from tests.reliability.helpers import one_line, run

DEEP = 5000
"""Far deeper than Python's recursion limit: what ended in a RecursionError's traceback."""


# 1. data synth --limit below 1

@pytest.mark.parametrize(("flag", "value"), [("--limit", "0"), ("--limit", "-1"), ("--tile-limit", "0"),
                                             ("--limit", "two")])
def test_a_limit_below_one_is_refused_before_anything_is_written(flag, value, tmp_path: Path, capsys):
    out = tmp_path / "world"
    code, _, err = run(["data", "synth", "--scale", "tiny", "--out", out, flag, value, "--workers", 1,
                        "--no-progress"], capsys)
    assert code == EXIT_ERROR
    assert one_line(err) == f"error: {flag}: expected a whole number of at least 1; found {value!r}"
    assert not out.exists()


def test_generate_world_refuses_a_limit_below_one_too(tmp_path: Path):
    from competition.synthetic.world import generate_world

    with pytest.raises(ValueError, match="tile_limit: expected a whole number of at least 1; found 0"):
        generate_world(tmp_path / "w", scale="tiny", limit=2, tile_limit=0, workers=1, progress=False)
    assert not (tmp_path / "w").exists()
