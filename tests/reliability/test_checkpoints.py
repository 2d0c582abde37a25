"""Checkpoints, cached graphs and run folders: files that run no code, damaged files set aside and rebuilt, runs
with other settings kept beside each other."""

from __future__ import annotations

import importlib
import logging
from pathlib import Path
from typing import Any

import pytest
import torch
from torch_geometric.data import Data

from competition.collections import Collection, Split
from competition.dataroot import find_data_root
from competition.dataset import open_collection, open_split
from fastslow.cli import main
from features.cache import FORMAT_VERSION, ProcessedGraphs, pipeline_description
from features.transforms import PruneToConfigurable
from models.base import load_model
from models.gnn.model import GNNModel
from models.gnn.runs import CHECKPOINT, CURVES_CSV, CURVES_PNG, MODEL_FILE, SETTINGS_FILE, settings_hash

LAYOUT = Collection.LAYOUT_NLP_RANDOM
QUICK = dict(hidden=8, layers=2, device="cpu", seed=0, epochs=2, steps_per_graph=1, configs_per_graph=16)
gnn_train = importlib.import_module("models.gnn.train")


class Payload:
    """Unpickling it opens (creates) ``marker``: what a planted file would do if it were loaded with pickle."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (open, (str(self.marker), "w"))


def plant(path: Path, marker: Path) -> None:
    torch.save({"settings": Payload(marker), "data": Payload(marker)}, path)


def test_a_planted_file_would_run_its_payload_under_pickle(tmp_path: Path):
    """The planted files of these tests are real: the loader we no longer use would create the marker."""
    plant(tmp_path / "x.pt", tmp_path / "marker")
    torch.load(tmp_path / "x.pt", weights_only=False)
    assert (tmp_path / "marker").exists()


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tmp_path_factory.mktemp("reliability-cache"))


def _fit(world: Path, cache_dir: str, runs_dir: Path, **params: Any) -> GNNModel:
    return GNNModel(**{**QUICK, **params}, runs_dir=str(runs_dir), cache_dir=cache_dir).fit(
        open_collection(find_data_root(world), LAYOUT), progress=False)


def _run(runs_dir: Path) -> Path:
    return runs_dir / "gnn" / "layout-nlp-random"


def _one_warning(caplog: pytest.LogCaptureFixture) -> str:
    lines = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(lines) == 1, lines
    assert "\n" not in lines[0]
    return lines[0]


# -- checkpoints -------------------------------------------------------------------------------------------------


def test_planted_checkpoint_runs_no_code_and_training_starts_afresh(tiny_world: Path, cache_dir: str, tmp_path: Path,
                                                                    caplog: pytest.LogCaptureFixture):
    run = _run(tmp_path / "runs")
    run.mkdir(parents=True)
    plant(run / CHECKPOINT, tmp_path / "marker")
    planted = (run / CHECKPOINT).read_bytes()
    with caplog.at_level(logging.INFO):
        model = _fit(tiny_world, cache_dir, tmp_path / "runs")
    assert not (tmp_path / "marker").exists()
    message = _one_warning(caplog)
    assert str(run / CHECKPOINT) in message and "checkpoint.pt.corrupt" in message and "afresh" in message
    assert (run / "checkpoint.pt.corrupt").read_bytes() == planted
    assert [r["epoch"] for r in model.history_] == [1, 2] and model.stopped_ == "all epochs"
    assert torch.load(run / CHECKPOINT, weights_only=True)["epoch"] == 2  # the new one is plain data


def test_truncated_checkpoint_is_set_aside_and_training_starts_afresh(tiny_world: Path, cache_dir: str,
                                                                      tmp_path: Path,
                                                                      caplog: pytest.LogCaptureFixture):
    first = _fit(tiny_world, cache_dir, tmp_path / "runs")
    run = _run(tmp_path / "runs")
    truncated = (run / CHECKPOINT).read_bytes()[:1000]
    (run / CHECKPOINT).write_bytes(truncated)
    (run / "checkpoint.pt.corrupt").write_bytes(b"an earlier one")  # never overwritten
    again = _fit(tiny_world, cache_dir, tmp_path / "runs")
    message = _one_warning(caplog)
    assert str(run / CHECKPOINT) in message and "unreadable (truncated" in message
    assert "checkpoint.pt.corrupt.1" in message
    assert (run / "checkpoint.pt.corrupt.1").read_bytes() == truncated
    assert (run / "checkpoint.pt.corrupt").read_bytes() == b"an earlier one"
    assert [r["epoch"] for r in again.history_] == [1, 2]
    for k, v in first.weights_.items():  # trained afresh with the same seed: the same weights
        assert (v == again.weights_[k]).all(), k


def test_checkpoint_not_fitting_its_settings_is_set_aside(tiny_world: Path, cache_dir: str, tmp_path: Path,
                                                          caplog: pytest.LogCaptureFixture):
    _fit(tiny_world, cache_dir, tmp_path / "runs", epochs=1)
    run = _run(tmp_path / "runs")
    ckpt = torch.load(run / CHECKPOINT, weights_only=True)
    ckpt["model"] = {"nothing": torch.zeros(1)}
    ckpt["stopped"] = ""
    torch.save(ckpt, run / CHECKPOINT)
    model = _fit(tiny_world, cache_dir, tmp_path / "runs", epochs=1)
    message = _one_warning(caplog)
    assert str(run / CHECKPOINT) in message and "does not fit" in message
    assert (run / "checkpoint.pt.corrupt").is_file() and [r["epoch"] for r in model.history_] == [1]


def test_checkpoint_without_its_keys_is_set_aside(tiny_world: Path, cache_dir: str, tmp_path: Path,
                                                  caplog: pytest.LogCaptureFixture):
    run = _run(tmp_path / "runs")
    run.mkdir(parents=True)
    torch.save({"settings": {"kind": torch.zeros(3)}, "epoch": "three"}, run / CHECKPOINT)
    _fit(tiny_world, cache_dir, tmp_path / "runs", epochs=1)
    assert "not a checkpoint (missing or odd settings, epoch, model" in _one_warning(caplog)


# -- cached graphs -----------------------------------------------------------------------------------------------


def _cache(world: Path, cache: Path) -> ProcessedGraphs:
    ds = ProcessedGraphs(open_split(find_data_root(world), LAYOUT, Split.TRAIN),
                         pre_transform=PruneToConfigurable(hops=1), cache_dir=cache, max_configs=16, workers=1,
                         progress=False)
    ds.build()
    return ds


def _same(a: Data, b: Data) -> None:
    assert sorted(a.keys()) == sorted(b.keys())
    for key in a.keys():
        assert torch.equal(a[key], b[key]) if isinstance(a[key], torch.Tensor) else a[key] == b[key], key


def test_cache_format_is_plain_and_its_version_names_the_folder(tiny_world: Path, tmp_path: Path):
    ds = _cache(tiny_world, tmp_path)
    assert FORMAT_VERSION == 3 and "format_version: 3" in pipeline_description(None, 16)
    record = torch.load(ds.paths[0], weights_only=True)
    assert record["format"] == 3 and isinstance(record["data"], dict) and isinstance(ds[0], Data)


@pytest.mark.parametrize("damage", ["planted", "truncated", "old pickled format"])
def test_damaged_cache_file_is_named_set_aside_and_rebuilt(tiny_world: Path, tmp_path: Path, damage: str,
                                                           caplog: pytest.LogCaptureFixture):
    ds = _cache(tiny_world, tmp_path)
    expected = ds[0]
    path = ds.paths[0]
    if damage == "planted":
        plant(path, tmp_path / "marker")
    elif damage == "truncated":
        path.write_bytes(path.read_bytes()[:3000])
    else:
        torch.save({"format": 2, "data": expected, "stats": {}}, path)  # what version 2 wrote: a pickled Data
    damaged = path.read_bytes()
    fresh = _cache(tiny_world, tmp_path)  # build() reuses the file: it is only read on access
    _same(fresh[0], expected)
    assert not (tmp_path / "marker").exists()
    message = _one_warning(caplog)
    assert str(path) in message and f"{path.name}.corrupt" in message and "rebuilding" in message
    assert path.with_name(f"{path.name}.corrupt").read_bytes() == damaged
    _same(_cache(tiny_world, tmp_path)[0], expected)  # the rebuilt file is kept
    _one_warning(caplog)  # still the one warning: nothing more to repair


# -- run folders keyed by settings ----------------------------------------------------------------------------


def _train(world: Path, runs: Path, cache: Path, epochs: int) -> None:
    assert main(["train", "--data", str(world), "--model", "gnn", "--collections", LAYOUT.value,
                 "--runs-dir", str(runs), "--param", f"epochs={epochs}", "--param", "hidden=8",
                 "--param", "layers=2", "--param", "steps_per_graph=1", "--param", "device='cpu'",
                 "--param", f"cache_dir='{cache}'", "--no-progress"]) == 0


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}


def test_other_settings_keep_the_first_run_and_equal_settings_return_at_once(tiny_world: Path, cache_dir: str,
                                                                             tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch):
    runs = tmp_path / "runs"
    run = _run(runs)
    _train(tiny_world, runs, Path(cache_dir), epochs=2)
    first = _files(run)
    assert set(first) == {CHECKPOINT, CURVES_CSV, CURVES_PNG, MODEL_FILE, SETTINGS_FILE}
    first_hash = settings_hash(torch.load(run / CHECKPOINT, weights_only=True)["settings"])

    _train(tiny_world, runs, Path(cache_dir), epochs=1)
    assert _files(run / first_hash) == first  # moved aside, byte for byte
    assert load_model(run / MODEL_FILE).settings_["train"]["epochs"] == 1  # the latest run is the folder's own
    second = _files(run)
    second_hash = settings_hash(torch.load(run / CHECKPOINT, weights_only=True)["settings"])
    assert second_hash != first_hash

    def no_training(*args: Any, **kwargs: Any) -> float:
        raise AssertionError("a finished run with equal settings must not train")

    monkeypatch.setattr(gnn_train, "training_step", no_training)
    _train(tiny_world, runs, Path(cache_dir), epochs=2)  # the first settings again: brought back, finished
    assert _files(run) == first
    assert _files(run / second_hash) == second and not (run / first_hash).exists()
    _train(tiny_world, runs, Path(cache_dir), epochs=2)  # and once more: returns at once, nothing moves
    assert _files(run) == first and sorted(p.name for p in run.iterdir() if p.is_dir()) == [second_hash]


# -- saved models ------------------------------------------------------------------------------------------------


def test_saved_models_are_json_and_a_damaged_one_is_named(tiny_world: Path, cache_dir: str, tmp_path: Path):
    import json

    from models.ensemble import Ensemble

    path = GNNModel(**{**QUICK, "epochs": 1}, runs_dir=None, cache_dir=cache_dir).fit(
        open_collection(find_data_root(tiny_world), LAYOUT), progress=False).save(tmp_path / "model.json")
    text = path.read_text()
    json.loads(text)  # plain JSON: nothing to unpickle
    doc = json.loads(text)
    path.write_text(json.dumps({**doc, "params": {**doc["params"], "bogus": 1}}))
    with pytest.raises(ValueError, match=f"^{path}: expected a saved GNNModel; .*bogus"):
        load_model(path)
    path.write_text(text[:500])
    with pytest.raises(ValueError, match=f"^{path}: .*invalid JSON"):
        load_model(path)
    ens = tmp_path / "ensemble.json"
    ens.write_text(json.dumps({"name": "ensemble", "version": 1, "params": {"bogus": 1}, "state": {}}))
    with pytest.raises(ValueError, match=f"^{ens}: expected ensemble params"):
        Ensemble.load(ens)
    ens.write_text(json.dumps({"name": "ensemble", "version": 1, "params": {}, "state": {"_cache": 1}}))
    with pytest.raises(ValueError, match=f"^{ens}: expected ensemble state with keys models_"):
        Ensemble.load(ens)
