"""A better result is never replaced by a worse one: ``submission.csv`` is only replaced by a submission at least as
good on the same valid protocol and data; a worse one goes beside it, one of unknown score is kept aside; the
submission and its ensemble settings come from one run; output folders are checked before the first fit."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

import fastslow.pipeline as pipeline
from fastslow.cli import EXIT_ERROR, EXIT_OK
from fastslow.promotion import SubmissionRecord, promote, read_record
from tests.reliability.helpers import run


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def submit(world: Path, out: Path, *extra: object) -> list[object]:
    return ["submit", "--data", world, "--out-dir", out, "--no-progress", "--jobs", "1", *extra]


@pytest.fixture()
def good(tiny_world: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    """An output folder after a run of the better models: its submission comes from the ensemble."""
    out = tmp_path / "subs"
    code, _, err = run(submit(tiny_world, out, "--models", "default-first", "random"), capsys)
    assert code == EXIT_OK, err
    return out


def test_a_worse_run_writes_beside_the_better_submission(good: Path, tiny_world: Path,
                                                         capsys: pytest.CaptureFixture[str]):
    record = read_record(good / "submission.json")
    assert record is not None and record.producer == "ensemble" and record.sha256 == sha(good / "submission.csv")
    assert record.settings["ensemble"] == json.loads((good / "ensemble.json").read_text())
    assert set(record.settings) == {"default-first", "random", "ensemble"}
    before = {n: sha(good / n) for n in ("submission.csv", "submission.json", "ensemble.json")}
    code, out, err = run(submit(tiny_world, good, "--models", "random"), capsys)
    assert code == EXIT_OK, err
    assert {n: sha(good / n) for n in before} == before
    assert "submission.csv kept: it scored" in out and str(good / "submission.new.csv") in out
    new = read_record(good / "submission.new.json")
    assert new is not None and new.producer == "random" and new.combined < record.combined
    assert new.sha256 == sha(good / "submission.new.csv")


def test_a_better_run_replaces_the_submission_with_its_ensemble(tiny_world: Path, tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]):
    out = tmp_path / "subs"
    assert run(submit(tiny_world, out, "--models", "random"), capsys)[0] == EXIT_OK
    assert not (out / "ensemble.json").exists()
    code, text, err = run(submit(tiny_world, out, "--models", "default-first", "random"), capsys)
    assert code == EXIT_OK, err
    record = read_record(out / "submission.json")
    assert record is not None and record.producer == "ensemble" and record.sha256 == sha(out / "submission.csv")
    assert record.settings["ensemble"] == json.loads((out / "ensemble.json").read_text())
    assert not (out / "submission.prev.csv").exists()


@pytest.mark.parametrize("how", ["no record", "edited", "other protocol"])
def test_a_submission_of_unknown_score_is_kept_aside(how: str, good: Path, tiny_world: Path,
                                                     capsys: pytest.CaptureFixture[str]):
    if how == "no record":
        (good / "submission.json").unlink()
    elif how == "edited":
        with open(good / "submission.csv", "a") as f:
            f.write("\n")
    before = {n: sha(good / n) for n in ("submission.csv", "ensemble.json")}
    extra = ["--valid-configs", "all"] if how == "other protocol" else []
    code, out, err = run(submit(tiny_world, good, "--models", "random", *extra), capsys)
    assert code == EXIT_OK, err
    assert sha(good / "submission.prev.csv") == before["submission.csv"]
    assert sha(good / "ensemble.prev.json") == before["ensemble.json"]
    assert f"{good / 'submission.csv'} kept as submission.prev.csv" in out
    assert read_record(good / "submission.json").producer == "random"
    # A second time: the earlier one kept aside is not replaced either.
    (good / "submission.json").unlink()
    second = sha(good / "submission.csv")
    assert run(submit(tiny_world, good, "--models", "random", *extra), capsys)[0] == EXIT_OK
    assert sha(good / "submission.prev.csv") == before["submission.csv"]
    assert sha(good / "submission.prev-1.csv") == second


def test_a_run_under_a_tiny_budget_or_failing_keeps_the_better_submission(good: Path, tiny_world: Path,
                                                                          capsys: pytest.CaptureFixture[str],
                                                                          monkeypatch: pytest.MonkeyPatch):
    before = {n: sha(good / n) for n in ("submission.csv", "submission.json", "ensemble.json")}
    code, _, err = run(submit(tiny_world, good, "--models", "random", "--time-budget", "1"), capsys)
    assert code == EXIT_OK, err
    assert {n: sha(good / n) for n in before} == before

    real = pipeline.predict_split

    def fail_on_the_second(name, *args, **kwargs):
        if name == "default-first":
            raise OSError(28, "No space left on device")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(pipeline, "predict_split", fail_on_the_second)
    code, _, err = run(submit(tiny_world, good, "--models", "random", "default-first"), capsys)
    assert code == EXIT_ERROR and "no space left" in err
    assert {n: sha(good / n) for n in before} == before


def test_the_same_run_replaces_its_own_submission_when_it_improves(tmp_path: Path):
    out = tmp_path / "subs"

    def record(run: str, combined: float) -> SubmissionRecord:
        return SubmissionRecord(run=run, producer="m", combined=combined, scores={"tile:xla": combined},
                                protocol="1000@0", data="/d")

    ok = lambda _: None  # noqa: E731
    assert promote(out, "a\n", record("r1", 0.5), validate=ok).in_place
    assert not promote(out, "b\n", record("r2", 0.4), validate=ok).in_place
    assert (out / "submission.csv").read_text() == "a\n" and (out / "submission.new.csv").read_text() == "b\n"
    # Equal is at least as good; the same run may replace its own.
    assert promote(out, "c\n", record("r2", 0.5), validate=ok).in_place
    assert not (out / "submission.new.csv").exists()  # the same run's worse file goes once its own is in place
    assert promote(out, "d\n", record("r2", 0.45), validate=ok).in_place
    assert (out / "submission.csv").read_text() == "d\n"
    # A rejected file replaces nothing.
    with pytest.raises(ValueError, match="failed its checks"):
        promote(out, "e\n", record("r3", 0.9), validate=lambda _: "bad rows")
    assert (out / "submission.csv").read_text() == "d\n" and (out / "submission.csv.rejected").read_text() == "e\n"


@pytest.mark.parametrize("which", ["runs_dir", "cache_dir"])
def test_an_unwritable_runs_or_cache_folder_is_refused_before_any_fit(which: str, tiny_world: Path, tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str],
                                                                      monkeypatch: pytest.MonkeyPatch):
    blocked = tmp_path / "a-file"
    blocked.write_text("not a folder")
    fitted = []
    monkeypatch.setattr(pipeline, "predict_split", lambda *a, **k: fitted.append(1))
    code, _, err = run(submit(tiny_world, tmp_path / "subs", "--models", "random", "gnn",
                              "--param", f"gnn.{which}={blocked / 'x'}"), capsys)
    assert code == EXIT_ERROR and f"gnn's {which}" in err and str(blocked) in err and "Traceback" not in err
    assert not fitted and not (tmp_path / "subs" / "submission.csv").exists()
    assert blocked.read_text() == "not a folder"


def test_unwritable_folders_are_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    ro = tmp_path / "ro"
    ro.mkdir()
    real = os.access
    monkeypatch.setattr(os, "access", lambda p, m, *a, **k: False if Path(p) == ro else real(p, m, *a, **k))
    with pytest.raises(ValueError, match=f"the output folder {ro / 'x'}: cannot write into {ro}"):
        pipeline.check_writable({"the output folder": ro / "x"})
    pipeline.check_writable({"the output folder": tmp_path / "new" / "deeper", "none": None})


def test_train_refuses_an_unwritable_cache_folder_before_any_fit(tiny_world: Path, tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]):
    blocked = tmp_path / "a-file"
    blocked.write_text("not a folder")
    code, _, err = run(["train", "--data", tiny_world, "--model", "gnn", "--runs-dir", tmp_path / "runs",
                        "--param", f"gnn.cache_dir={blocked / 'cache'}", "--no-progress"], capsys)
    assert code == EXIT_ERROR and "gnn's cache_dir" in err and str(blocked) in err and "Traceback" not in err
    assert not (tmp_path / "runs").exists() and blocked.read_text() == "not a folder"
