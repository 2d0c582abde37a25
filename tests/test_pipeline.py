"""make submit's pipeline, end to end on tiny synthetic worlds."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from competition.collections import Collection, Split
from competition.dataroot import find_data_root, list_graphs
from competition.errors import DataFileError
from competition.labels import load_labels
from competition.submission_checks import validate_submission
from competition.submission_reading import read_submission
from competition.submission_scoring import score_submission
from fastslow.board import COLUMNS, append_row, read_rows
from fastslow.cli import main
from fastslow.pipeline import run_pipeline
from models.baselines import DefaultFirstModel
from models.ensemble import Ensemble
from models.registry import ModelParams, default_models, ensemble_members


@pytest.mark.slow
def test_pipeline_on_tiny_world(tiny_world: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                monkeypatch: pytest.MonkeyPatch):
    monkeypatch.chdir(tmp_path)  # the GNN's runs/ and .cache/ go under the working directory
    # Three epochs of gnn-attn's ten: every stage runs as in `make submit`, in a third of the time.
    res = run_pipeline(tiny_world, out_dir=tmp_path, progress=False,
                       params={"gnn-attn": ModelParams(common={"train.epochs": 3})})
    out = capsys.readouterr().out
    assert res.synthetic and res.submission == tmp_path / "submission.csv"
    root = find_data_root(tiny_world)
    assert validate_submission(res.submission, root, Split.TEST) == []
    assert len(read_submission(res.submission)) == 2 * len(Collection)
    assert set(res.valid_reports) == {*default_models(), "ensemble"}
    assert (tmp_path / "runs" / "gnn-attn" / "layout-xla-default" / "curves.csv").is_file()
    assert res.valid_reports[res.best_model].combined == max(r.combined for r in res.valid_reports.values())
    assert res.test_report is not None and res.test_report.complete
    rows = read_rows(tmp_path / "leaderboard.csv")
    assert [(r["producer"], r["split"]) for r in rows] == [
        *((name, "valid") for name in res.valid_reports), (res.best_model, "test")]
    assert f"{res.test_report.combined:.4f}" in out
    assert "say nothing about the Kaggle leaderboard" in out
    # a tiny world runs quickly: one network of the layout kind's 8 steps per graph, not the xla collections' seed
    # ensemble of 3 (xla:random: 32 steps)
    settings = json.loads((tmp_path / "settings-gnn-attn.json").read_text())
    assert {c.value: (settings[c.value]["train.steps_per_graph"], settings[c.value]["run.seeds"]) for c in Collection
            if not c.is_tile} == {c.value: (8, 1) for c in Collection if not c.is_tile}
    assert "gnn-attn layout:xla:random: train.steps_per_graph=8, run.seeds=1 on the tiny world" in out
    assert "gnn-attn layout:xla:default: run.seeds=1 on the tiny world" in out


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
    from fastslow.pipeline import evaluate_models

    res = evaluate_models(tiny_world, models=["random", "default-first"], out_dir=tmp_path, progress=False)
    assert set(res.reports) == set(res.oracle) == {Split.VALID, Split.TEST}
    out = capsys.readouterr().out
    header = next(line for line in out.splitlines() if line.startswith("collection"))
    assert header.split() == ["collection", "random", "default-first", "oracle"]
    for split, reports in res.reports.items():
        assert set(reports) == {"random", "default-first"}
        assert all(r.complete for r in reports.values())
        row = next(line for line in out.split(f"{split.value} split")[1].splitlines() if line.startswith("combined"))
        assert row.split()[1] == f"{reports['random'].combined:.4f}"


def test_pipeline_ensembles_the_models(tiny_world: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    members = ["random", "default-first"]
    board = tmp_path / "lb.csv"
    res = run_pipeline(tiny_world, models=members, out_dir=tmp_path, leaderboard=board, progress=False)
    out = capsys.readouterr().out
    root = find_data_root(tiny_world)
    assert (tmp_path / "valid-ensemble.csv").is_file()
    assert res.ensemble is not None and res.ensemble_path == tmp_path / "ensemble.json"
    loaded = Ensemble.load(res.ensemble_path)
    assert loaded.describe() == res.ensemble.describe() and loaded.models_ == members
    assert set(res.valid_reports) == {*members, "ensemble"}
    # the ensemble's valid report is the score of its cross-validated predictions, scored like any model's
    labels = load_labels(root, list(res.valid_reports["random"].collections), Split.VALID)
    again = score_submission(tmp_path / "valid-ensemble.csv", root, Split.VALID)
    assert again.combined == res.valid_reports["ensemble"].combined
    assert set(read_submission(tmp_path / "valid-ensemble.csv")) == set(labels)
    rows = read_rows(board)
    assert [(r["producer"], r["split"]) for r in rows] == [
        ("random", "valid"), ("default-first", "valid"), ("ensemble", "valid"), (res.best_model, "test")]
    assert rows[2]["components"] == res.ensemble.describe() != ""
    assert rows[0]["components"] == "" and rows[1]["components"] == ""
    assert rows[3]["components"] == (res.ensemble.describe() if res.best_model == "ensemble" else "")
    chosen = res.valid_reports[res.best_model].combined
    assert all(chosen >= res.valid_reports[m].combined for m in members)
    assert res.best_model == ("ensemble" if res.valid_reports["ensemble"].combined
                              >= max(res.valid_reports[m].combined for m in members) else
                              max(members, key=lambda m: res.valid_reports[m].combined))
    assert validate_submission(res.submission, root, Split.TEST) == []
    header = next(line for line in out.split("all models on the valid split")[1].splitlines()
                  if line.startswith("collection"))
    assert header.split() == ["collection", "random", "default-first", "ensemble", "oracle"]
    assert f"components: {res.ensemble.describe()}" in out


def test_ensemble_members_leave_the_reference_rankings_out_when_two_learned_models_ran():
    assert ensemble_members(["random", "default-first", "gbdt", "gnn-attn"]) == ["gbdt", "gnn-attn"]
    assert ensemble_members(["default-first", "gbdt", "gnn", "random"]) == ["gbdt", "gnn"]
    # fewer than two learned models: every model named (two references still make an ensemble)
    assert ensemble_members(["random", "default-first", "gbdt"]) == ["random", "default-first", "gbdt"]
    assert ensemble_members(["random", "default-first"]) == ["random", "default-first"]


def test_pipeline_ensembles_the_learned_models_only(tiny_world: Path, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch):
    # default-first counted as learned: with gbdt that makes two, so random stays out of the ensemble
    monkeypatch.setattr(DefaultFirstModel, "reference", False)
    res = run_pipeline(tiny_world, models=["random", "default-first", "gbdt"], out_dir=tmp_path, progress=False)
    assert res.ensemble is not None and res.ensemble.models_ == ["default-first", "gbdt"]
    assert set(res.valid_reports) == {"random", "default-first", "gbdt", "ensemble"}


def test_pipeline_without_ensemble(tiny_world: Path, tmp_path: Path):
    res = run_pipeline(tiny_world, models=["random", "default-first"], out_dir=tmp_path, progress=False,
                       ensemble=False)
    assert res.ensemble is None and set(res.valid_reports) == {"random", "default-first"}
    assert not (tmp_path / "valid-ensemble.csv").exists() and not (tmp_path / "ensemble.json").exists()


def test_leaderboard_written_before_components_still_reads(tmp_path: Path):
    board = tmp_path / "lb.csv"
    old = [c for c in COLUMNS if c != "components"]
    board.write_text(",".join(old) + "\n" + ",".join("x" if c == "producer" else "" for c in old) + "\n")
    assert read_rows(board)[0]["components"] == "" and read_rows(board)[0]["producer"] == "x"
    sub = tmp_path / "s.csv"
    sub.write_text("ID,TopConfigs\n")
    append_row({Collection.TILE_XLA: 0.5}, file=sub, producer="ensemble", split="valid", data=tmp_path,
               synthetic=True, path=board, components="tile:xla best=gbdt; layout:xla:default mean rank a,b")
    rows = read_rows(board)
    assert [r["producer"] for r in rows] == ["x", "ensemble"]
    assert rows[1]["components"] == "tile:xla best=gbdt; layout:xla:default mean rank a,b"


# -- collections fitted at once (jobs) ---------------------------------------------------------------------------

_QUICK_GNN = {"epochs": 1, "seeds": 1, "runs_dir": None}  # no run folder: nothing for the second fit to resume


def _quick_split(root, collections, jobs: int, **kw):
    from competition.dataset import Dataset
    from fastslow.fitting import predict_split
    from models.registry import ModelParams

    return predict_split("gnn-attn", Dataset.open(root, collections), params=ModelParams(common=_QUICK_GNN),
                         progress=False, jobs=jobs, **kw)


def test_concurrent_fits_predict_what_one_fit_at_a_time_does(tiny_world: Path, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]):
    import fastslow.fitting as fitting

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(fitting, "usable_cores", lambda: 2)  # one torch thread per process, as in this test's
    root = find_data_root(tiny_world)
    collections = [Collection.TILE_XLA, Collection.LAYOUT_XLA_DEFAULT, Collection.LAYOUT_NLP_RANDOM]
    settings = tmp_path / "settings.json"
    one = _quick_split(root, collections, jobs=1)
    assert "at once" not in capsys.readouterr().out
    both = _quick_split(root, collections, jobs=2, settings_file=settings)
    out = capsys.readouterr().out
    assert "gnn-attn: fitting 2 collections at once, 1 torch thread each" in out
    assert set(json.loads(settings.read_text())) == {c.value for c in collections}
    for split in ("valid", "test"):
        assert list(both[split]) == list(one[split]) and len(one[split]) > 0  # the same IDs in the same order
        for gid, scores in one[split].items():
            np.testing.assert_array_equal(both[split][gid], scores, err_msg=f"{split} {gid}")


def test_a_failing_concurrent_fit_raises_what_one_fit_at_a_time_raises(tiny_world: Path, tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch):
    import shutil

    monkeypatch.chdir(tmp_path)
    world = tmp_path / "world"
    shutil.copytree(tiny_world, world)
    root = find_data_root(world)
    broken = list_graphs(root, Collection.LAYOUT_XLA_RANDOM, Split.TRAIN)[0]
    broken.write_bytes(broken.read_bytes()[:200])
    collections = [Collection.LAYOUT_XLA_DEFAULT, Collection.LAYOUT_XLA_RANDOM]
    with pytest.raises(DataFileError) as alone:
        _quick_split(root, collections, jobs=1)
    with pytest.raises(DataFileError) as together:
        _quick_split(root, collections, jobs=2)
    assert str(together.value) == str(alone.value) and broken.name in str(together.value)


def test_only_cpu_gnn_fits_run_concurrently():
    from models.registry import make_model

    assert make_model("gnn-attn", device="cpu").fits_concurrently()
    assert not make_model("gbdt").fits_concurrently() and not make_model("random").fits_concurrently()


def test_default_jobs_is_the_usable_cores_at_most_the_cap(monkeypatch: pytest.MonkeyPatch):
    import competition.workers as workers

    for cores, jobs in [(1, 1), (2, 2), (workers.MAX_AUTO_JOBS + 3, workers.MAX_AUTO_JOBS)]:
        monkeypatch.setattr(workers, "usable_cores", lambda cores=cores: cores)
        assert workers.default_jobs() == jobs


def test_jobs_option_refuses_what_is_not_a_positive_count(capsys: pytest.CaptureFixture[str]):
    for bad in ("0", "-1", "two"):
        with pytest.raises(SystemExit) as exc:
            main(["submit", "--jobs", bad])
        assert exc.value.code == 2
        assert f"--jobs: expected a whole number of at least 1, found {bad!r}" in capsys.readouterr().err
