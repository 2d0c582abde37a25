"""GNNModel(refit=True) on the tiny world: after the early-stopped fit, a second network trained from scratch on the
train and valid graphs for the best epoch count scores the test graphs; the early-stopped one keeps scoring train and
valid. It is saved and loaded with the model, left out when the time budget cuts it short, and resumes from its own
run folder."""

from __future__ import annotations

import dataclasses
import importlib
import itertools
import json
import logging
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from competition.collections import Collection, Split
from competition.dataroot import find_data_root, list_graphs
from competition.dataset import open_collection
from competition.reader import LayoutGraph, load_graph
from models import settings as settings_tree
from models.base import NotFittedError, load_model
from models.gnn.config import GNNConfig
from models.gnn.model import GNNModel
from models.gnn.runs import CHECKPOINT, CURVES_CSV, SETTINGS_FILE, run_settings

LAYOUT = Collection.LAYOUT_NLP_RANDOM
QUICK = dict(hidden=16, layers=2, device="cpu", seed=0, epochs=3, steps_per_graph=1, configs_per_graph=16)
# The modules themselves: ``models.gnn.train`` as an attribute is the ``train`` function models/gnn/__init__.py
# re-exports.
gnn_model = importlib.import_module("models.gnn.model")
gnn_train = importlib.import_module("models.gnn.train")


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tmp_path_factory.mktemp("gnn-refit-cache"))


def _fit(root: Path, cache_dir: str, runs_dir: str | None = None, **params) -> GNNModel:
    return GNNModel(**{**QUICK, **params}, runs_dir=runs_dir, cache_dir=cache_dir).fit(
        open_collection(find_data_root(root), LAYOUT), progress=False)


@pytest.fixture(scope="module")
def plain(tiny_world: Path, cache_dir: str) -> GNNModel:
    return _fit(tiny_world, cache_dir)


@pytest.fixture(scope="module")
def refitted(tiny_world: Path, cache_dir: str) -> tuple[GNNModel, list[tuple[GNNConfig, list[str], int, dict]]]:
    """The refit=True model, and each ``train`` call of its fit: settings, training graphs, valid graph count and
    the other arguments."""
    calls: list[tuple[GNNConfig, list[str], int, dict]] = []
    real = gnn_model.train

    def recording(cfg, train_items, valid_items, **kwargs):
        calls.append((cfg, [it.key for it in train_items], len(valid_items), kwargs))
        return real(cfg, train_items, valid_items, **kwargs)

    with pytest.MonkeyPatch.context() as m:
        m.setattr(gnn_model, "train", recording)
        model = _fit(tiny_world, cache_dir, refit=True)
    return model, calls


def _graphs(root: Path) -> dict[str, list[LayoutGraph]]:
    """The tiny world's graphs by split, and its test graphs again with no split (``"none"``)."""
    data = find_data_root(root)
    out = {s.value: [load_graph(p, LAYOUT) for p in list_graphs(data, LAYOUT, s)] for s in Split}
    out["none"] = [dataclasses.replace(g, split=None) for g in out["test"]]
    assert all(len(graphs) == 2 for graphs in out.values())
    return out


def _one_network(model: GNNModel, weights: dict[str, np.ndarray]) -> GNNModel:
    """``model``'s fitted state with ``weights`` as its only network (no refitted one)."""
    other = GNNModel(**model.get_params())
    for key, value in model.learned_state().items():
        if not key.startswith("refit_"):
            setattr(other, key, value)
    other.weights_ = weights
    return other


def _assert_same(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> None:
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)


def test_without_refit_one_network_scores_every_split(tiny_world: Path, plain: GNNModel, refitted):
    model, _ = refitted
    assert not hasattr(plain, "refit_weights_") and not hasattr(plain, "refit_epochs_")
    assert plain.fit_splits_ == ["train", "valid"]
    _assert_same(plain.weights_, model.weights_)  # refit leaves the early-stopped training as it was
    early = _one_network(model, model.weights_)
    for split, graphs in _graphs(tiny_world).items():
        for graph in graphs:
            assert not plain.uses_refit(graph), split
            np.testing.assert_array_equal(plain.predict(graph), early.predict(graph), err_msg=split)
    with pytest.raises(NotFittedError, match="no refitted network"):
        plain.network(refit=True)


def test_refit_trains_on_train_and_valid_for_the_best_epoch_count(tiny_world: Path, refitted):
    model, calls = refitted
    root = find_data_root(tiny_world)
    train_stems = [p.stem for p in list_graphs(root, LAYOUT, Split.TRAIN)]
    valid_stems = [p.stem for p in list_graphs(root, LAYOUT, Split.VALID)]
    assert len(calls) == 2
    (first, first_graphs, first_valid, first_args), (second, second_graphs, second_valid, second_args) = calls
    assert sorted(first_graphs) == train_stems and first_valid == 2
    # The early-stopped run is the run without refit (same settings, so either resumes the other).
    assert first.train.refit is False and first.train.epochs == 3 and 1 <= model.best_epoch_ <= 3
    assert model.settings_["train"]["refit"] is True
    # From scratch on the train graphs then the valid ones, no early stopping, for the best epoch count; the other
    # settings are the first run's, the data key another.
    assert second_graphs == first_graphs + valid_stems and second_valid == 0
    assert second.train.epochs == model.best_epoch_ and second.train.refit is False and second.data_key != first.data_key
    assert dataclasses.replace(second.with_(epochs=3), data_key=first.data_key) == first
    assert first_args["run_dir"] is None and second_args["run_dir"] is None
    assert model.refit_epochs_ == model.best_epoch_ and model.fit_splits_ == ["train", "valid"]
    assert model.refit_weights_.keys() == model.weights_.keys()
    assert {k: v.dtype for k, v in model.refit_weights_.items()} == {k: v.dtype for k, v in model.weights_.items()}
    assert any(not np.array_equal(model.refit_weights_[k], model.weights_[k]) for k in model.weights_)


def test_refitted_network_scores_test_graphs_only(tiny_world: Path, plain: GNNModel, refitted):
    model, _ = refitted
    refit_only = _one_network(model, model.refit_weights_)
    for split, graphs in _graphs(tiny_world).items():
        for graph in graphs:
            pred = model.predict(graph)
            if split in ("train", "valid"):  # the early-stopped network: as without refit
                assert not model.uses_refit(graph)
                np.testing.assert_array_equal(pred, plain.predict(graph), err_msg=split)
            else:  # test, or no known split: the refitted network
                assert model.uses_refit(graph)
                np.testing.assert_array_equal(pred, refit_only.predict(graph), err_msg=split)
                assert not np.allclose(pred, plain.predict(graph)), split
    assert model.network(refit=True) is not model.network() and model.network(refit=True) is model.network(True)


def test_save_load_keeps_both_networks(tiny_world: Path, plain: GNNModel, refitted, tmp_path: Path):
    model, _ = refitted
    path = model.save(tmp_path / "gnn.json")
    loaded = load_model(path)
    assert isinstance(loaded, GNNModel) and loaded.get_params() == model.get_params()
    _assert_same(loaded.weights_, model.weights_)
    _assert_same(loaded.refit_weights_, model.refit_weights_)
    assert loaded.refit_epochs_ == model.refit_epochs_ and loaded.fit_splits_ == ["train", "valid"]
    graphs = _graphs(tiny_world)
    for split, group in graphs.items():
        for graph in group:
            np.testing.assert_array_equal(loaded.predict(graph), model.predict(graph), err_msg=split)

    # A model saved before refit existed (none of its attributes) loads and scores every graph early-stopped.
    doc = json.loads(path.read_text())
    for key in ("refit_weights_", "refit_epochs_", "fit_splits_"):
        del doc["state"][key]
    path.write_text(json.dumps(doc))
    old = load_model(path)
    assert not hasattr(old, "refit_weights_") and not hasattr(old, "fit_splits_")
    for graph in graphs["test"]:
        assert not old.uses_refit(graph)
        np.testing.assert_array_equal(old.predict(graph), plain.predict(graph))


def test_refit_cut_by_the_time_budget_is_left_out(tiny_world: Path, cache_dir: str, plain: GNNModel,
                                                  monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture):
    model = GNNModel(**QUICK, refit=True, max_seconds=1e5, runs_dir=None, cache_dir=cache_dir)
    root = find_data_root(tiny_world)
    model.fit(open_collection(root, LAYOUT), progress=False)
    assert hasattr(model, "refit_weights_")  # the budget is ample
    # The clock jumps past the budget between the early-stopped fit and the refit: the refit gets 0 s, so it stops
    # inside its first epoch, and this fit's model has no refitted network (nor the previous fit's).
    ticks = itertools.chain([0.0], itertools.repeat(1e6))
    monkeypatch.setattr(gnn_model, "time", SimpleNamespace(monotonic=lambda: next(ticks)))
    with caplog.at_level(logging.WARNING, logger="models.gnn.model"):
        model.fit(open_collection(root, LAYOUT), progress=False)
    assert not hasattr(model, "refit_weights_") and not hasattr(model, "refit_epochs_")
    _assert_same(model.weights_, plain.weights_)
    assert [r.getMessage() for r in caplog.records if r.name == "models.gnn.model"] == [
        f"gnn layout:nlp:random: the refit on train + valid ran out of time after 0 of {model.best_epoch_} epochs; "
        "only the early-stopped weights are kept"]
    for graph in _graphs(tiny_world)["test"]:
        np.testing.assert_array_equal(model.predict(graph), plain.predict(graph))


def test_refit_run_has_its_own_folder_and_resumes(tiny_world: Path, cache_dir: str, refitted, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch):
    reference, _ = refitted
    runs = str(tmp_path / "runs")
    model = _fit(tiny_world, cache_dir, runs, refit=True)
    run = tmp_path / "runs" / "gnn" / LAYOUT.slug
    assert {CHECKPOINT, CURVES_CSV, SETTINGS_FILE, "refit"} <= {p.name for p in run.iterdir()}
    ckpt = torch.load(run / "refit" / CHECKPOINT, map_location="cpu", weights_only=True)
    assert ckpt["epoch"] == model.best_epoch_ and ckpt["stopped"] == "all epochs"
    assert ckpt["settings"]["train"]["epochs"] == model.best_epoch_ and ckpt["settings"]["train"]["refit"] is False
    assert torch.load(run / CHECKPOINT, map_location="cpu", weights_only=True)["settings"] == run_settings(
        settings_tree.from_dict(GNNConfig, model.settings_).with_(refit=False))  # the early-stopped run is the run without refit
    _assert_same(model.weights_, reference.weights_)  # the same seed: the same networks as without a run folder
    _assert_same(model.refit_weights_, reference.refit_weights_)

    def no_training(*args, **kwargs):
        raise AssertionError("a finished run trained again")

    monkeypatch.setattr(gnn_train, "training_step", no_training)
    again = _fit(tiny_world, cache_dir, runs, refit=True)  # both runs finished: they return at once
    _assert_same(again.weights_, model.weights_)
    _assert_same(again.refit_weights_, model.refit_weights_)
    assert again.refit_epochs_ == model.refit_epochs_ and again.history_ == model.history_
