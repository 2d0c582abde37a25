"""make submit's pipeline, end to end on tiny synthetic worlds."""

from __future__ import annotations

from pathlib import Path

import pytest

from competition.cli import main
from competition.collections import Collection, Split
from competition.leaderboard import read_rows
from competition.pipeline import run_pipeline
from competition.reader import find_data_root
from competition.submission import read_submission, validate_submission
from models.registry import available_models


def test_pipeline_on_tiny_world(tiny_world: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    res = run_pipeline(tiny_world, out_dir=tmp_path, progress=False)
    out = capsys.readouterr().out
    assert res.synthetic and res.submission == tmp_path / "submission.csv"
    root = find_data_root(tiny_world)
    assert validate_submission(res.submission, root, Split.TEST) == []
    assert len(read_submission(res.submission)) == 2 * len(Collection)
    assert set(res.valid_reports) == set(available_models())
    assert res.best_model == max(res.valid_reports, key=lambda n: res.valid_reports[n].combined)
    assert res.test_report is not None and res.test_report.complete
    rows = read_rows(tmp_path / "leaderboard.csv")
    assert [(r["producer"], r["split"]) for r in rows] == [
        *((name, "valid") for name in res.valid_reports), (res.best_model, "test")]
    assert f"{res.test_report.combined:.4f}" in out
    assert "say nothing about the Kaggle leaderboard" in out


def test_without_data_the_synthetic_world_is_generated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("FASTSLOW_DATA", raising=False)
    assert main(["submit", "--synth-dir", "world", "--synth-scale", "tiny", "--models", "default-first",
                 "--out-dir", "subs", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "No real TpuGraphs data found" in out
    assert (tmp_path / "world" / "world.json").exists()
    assert (tmp_path / "subs" / "submission.csv").exists()
    assert "combined" in out


def test_explicit_data_that_is_not_data_fails(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    assert main(["submit", "--data", str(tmp_path), "--no-progress"]) == 2
    assert str(tmp_path) in capsys.readouterr().err


def test_evaluate_prints_models_side_by_side_with_the_oracle(tiny_world: Path, tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]):
    from competition.pipeline import evaluate_models

    res = evaluate_models(tiny_world, models=["random", "default-first"], out_dir=tmp_path, progress=False)
    assert set(res) == {Split.VALID, Split.TEST}
    out = capsys.readouterr().out
    header = next(line for line in out.splitlines() if line.startswith("collection"))
    assert header.split() == ["collection", "random", "default-first", "oracle"]
    for split, reports in res.items():
        assert set(reports) == {"random", "default-first"}
        assert all(r.complete for r in reports.values())
        row = next(line for line in out.split(f"{split.value} split")[1].splitlines() if line.startswith("combined"))
        assert row.split()[1] == f"{reports['random'].combined:.4f}"
