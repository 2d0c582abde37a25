"""Evaluation over several world seeds: the summary's means, spreads and % of oracle, by hand and end to end."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from competition.collections import Collection, Split
from fastslow.pipeline import Evaluation
from fastslow.worlds import Cell, evaluate_worlds, summarize, world_dir

XD, NR = Collection.LAYOUT_XLA_DEFAULT, Collection.LAYOUT_NLP_RANDOM


class _Report:
    def __init__(self, scores: dict[Collection, float]) -> None:
        self._scores = scores

    def scores(self) -> dict[Collection, float]:
        return self._scores


def _evaluation(model: dict[Collection, float], oracle: dict[Collection, float] | None) -> Evaluation:
    return Evaluation(Path("."), True, {Split.TEST: {"m": _Report(model)}}, {Split.TEST: oracle})  # type: ignore[dict-item]


def test_cell_mean_spread_and_percent_of_oracle_by_hand():
    cell = Cell((0.4, 0.6), (0.8, 0.75))
    assert cell.mean == pytest.approx(0.5)
    assert cell.spread == pytest.approx(0.2 / math.sqrt(2))  # |a - b| / sqrt 2 for two worlds
    assert cell.of_oracle == pytest.approx((50.0 + 80.0) / 2)  # per world, then averaged
    assert math.isnan(Cell((0.4,), (0.8,)).spread)
    assert math.isnan(Cell((0.4, 0.6), ()).of_oracle)


def test_summarize_folds_worlds_per_collection_and_combined():
    summary = summarize({0: _evaluation({XD: 0.4, NR: 0.8}, {XD: 0.8, NR: 1.0}),
                         7: _evaluation({XD: 0.6, NR: 0.9}, {XD: 0.75, NR: 0.9})})
    cells = summary.cells[Split.TEST]["m"]
    assert summary.seeds == (0, 7)
    assert cells[XD].values == (0.4, 0.6) and cells[XD].oracle == (0.8, 0.75)
    assert cells[None].values == pytest.approx((0.6, 0.75))  # combined: mean of the collections, per world
    assert cells[None].oracle == pytest.approx((0.9, 0.825))
    table = summary.format(Split.TEST)
    row = next(line for line in table.splitlines() if line.startswith("layout:xla:default"))
    assert row.split() == ["layout:xla:default", "0.5000±0.141", "65%", "0.7750"]


def test_summarize_leaves_out_what_a_world_lacks():
    summary = summarize({0: _evaluation({XD: 0.4, NR: 0.8}, None), 1: _evaluation({XD: 0.5}, None)})
    cells = summary.cells[Split.TEST]["m"]
    assert set(cells) == {XD, None} and cells[XD].oracle == ()
    assert "oracle" in summary.format(Split.TEST) and "%" not in summary.format(Split.TEST)


def test_world_dir_keeps_seed_zero_where_make_submit_puts_it():
    assert world_dir("demo", 0) == Path("data/synthetic-demo")
    assert world_dir("bench", 3, "w") == Path("w/synthetic-bench-seed3")


def test_evaluate_worlds_end_to_end_on_two_tiny_worlds(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    summary = evaluate_worlds([0, 5], scale="tiny", models=["default-first"], worlds_dir=tmp_path / "w",
                              out_dir=tmp_path / "out", progress=False)
    assert (tmp_path / "w" / "synthetic-tiny-seed5" / "world.json").is_file()
    assert (tmp_path / "out" / "tiny-seed5" / "test-default-first.csv").is_file()
    out = capsys.readouterr().out
    cells = summary.cells[Split.TEST]["default-first"]
    assert set(cells) == {*Collection, None}
    # The summary's combined cell holds each world's own combined test score, as its evaluate table printed it.
    printed = [float(next(line for line in part.splitlines() if line.startswith("combined")).split()[1])
               for part in out.split("test split (synthetic world")[1:]]
    assert cells[None].values == pytest.approx(printed, abs=5e-5)
    assert len(cells[None].oracle) == 2 and "over 2 tiny worlds (seeds 0 5)" in out
    with pytest.raises(ValueError, match="twice"):
        evaluate_worlds([1, 1], scale="tiny", worlds_dir=tmp_path / "w")


def test_cli_refuses_world_seeds_with_data_or_twice(tiny_world: Path, capsys: pytest.CaptureFixture[str]):
    from fastslow.cli import main

    for args, expected in ((["--world-seeds", "0", "--data", str(tiny_world)], "give it or --data, not both"),
                           (["--world-seeds", "3", "3"], "a seed is given twice (3 3)")):
        with pytest.raises(SystemExit) as exc:
            main(["evaluate", *args, "--models", "random"])
        assert exc.value.code == 2
        err = capsys.readouterr().err.splitlines()
        assert len(err) == 1 and expected in err[0]


def test_cli_evaluates_over_world_seeds(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                        monkeypatch: pytest.MonkeyPatch):
    from fastslow.cli import main

    monkeypatch.chdir(tmp_path)
    assert main(["evaluate", "--world-seeds", "0", "2", "--scale", "tiny", "--models", "default-first",
                 "--out-dir", "out", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert (tmp_path / "data" / "synthetic-tiny-seed2" / "world.json").is_file()
    summary = out.split("test split over 2 tiny worlds (seeds 0 2)")[1]
    assert next(line for line in summary.splitlines() if line.startswith("combined")).split()[2].endswith("%")
