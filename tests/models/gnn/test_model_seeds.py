"""GNNModel(seeds=N) on the tiny world: a seed ensemble of N networks, each trained as a one-network model with the
next seed is, in a run folder of its own; every graph is scored by each and the mean of their rank-normalised scores
returned. It is saved and loaded with the model, resumes, keeps what the time budget allowed, and works with refit
and on tile graphs."""

from __future__ import annotations

import importlib
import itertools
import logging
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from competition.collections import Collection, Split
from competition.dataroot import find_data_root, list_graphs
from competition.dataset import open_collection
from competition.reader import load_graph
from models.base import NotFittedError, load_model
from models.ensemble import normalize_scores
from models.gnn.model import GNNModel
from models.gnn.runs import CHECKPOINT

LAYOUT = Collection.LAYOUT_NLP_RANDOM
QUICK = dict(hidden=16, layers=2, device="cpu", epochs=2, steps_per_graph=1, configs_per_graph=16)
gnn_model = importlib.import_module("models.gnn.model")
gnn_train = importlib.import_module("models.gnn.train")


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tmp_path_factory.mktemp("gnn-seeds-cache"))


def _fit(root: Path, cache_dir: str, collection: Collection = LAYOUT, runs_dir: str | None = None,
         **params) -> GNNModel:
    return GNNModel(**{**QUICK, **params}, runs_dir=runs_dir, cache_dir=cache_dir).fit(
        open_collection(find_data_root(root), collection), progress=False)


@pytest.fixture(scope="module")
def singles(tiny_world: Path, cache_dir: str) -> list[GNNModel]:
    """One-network models with seeds 0, 1 and 2."""
    return [_fit(tiny_world, cache_dir, seed=s) for s in range(3)]


@pytest.fixture(scope="module")
def ensemble(tiny_world: Path, cache_dir: str) -> tuple[GNNModel, list]:
    """The seeds=3 model, and the settings of each ``train`` call of its fit."""
    calls = []
    real = gnn_model.train

    def recording(cfg, train_items, valid_items, **kwargs):
        calls.append(cfg)
        return real(cfg, train_items, valid_items, **kwargs)

    with pytest.MonkeyPatch.context() as m:
        m.setattr(gnn_model, "train", recording)
        model = _fit(tiny_world, cache_dir, seeds=3)
    return model, calls


def _graphs(root: Path, collection: Collection = LAYOUT) -> list:
    data = find_data_root(root)
    return [load_graph(p, collection) for s in Split for p in list_graphs(data, collection, s)]


def _assert_same(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> None:
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)


def test_each_network_is_the_one_network_model_of_its_seed(ensemble, singles: list[GNNModel]):
    model, calls = ensemble
    assert [c.train.seed for c in calls] == [0, 1, 2]
    assert len({c.with_(seed=0) for c in calls}) == 1  # they differ in the seed alone
    assert model.train_config(model.collection_).run.seeds == 3 and model.num_networks == 3
    assert [m["seed"] for m in model.members_] == [1, 2]
    _assert_same(model.weights_, singles[0].weights_)
    def untimed(history: list[dict[str, float]]) -> list[dict[str, float]]:
        return [{k: v for k, v in h.items() if "seconds" not in k} for h in history]

    assert model.best_epoch_ == singles[0].best_epoch_ and untimed(model.history_) == untimed(singles[0].history_)
    for member, single in zip(model.members_, singles[1:], strict=True):
        _assert_same(member["weights"], single.weights_)
        assert member["best_epoch"] == single.best_epoch_ and member["best_metric"] == single.best_metric_
        assert untimed(member["history"]) == untimed(single.history_)
        assert "refit_weights" not in member
    assert not any(np.array_equal(model.weights_[k], model.members_[0]["weights"][k]) for k in model.weights_
                   if model.weights_[k].size > 1)  # another initialisation
    assert not hasattr(singles[0], "members_") and singles[0].num_networks == 1
    with pytest.raises(NotFittedError, match="no member 3"):
        model.network(member=3)


def test_scores_are_the_mean_of_the_networks_rank_normalised_scores(tiny_world: Path, ensemble,
                                                                    singles: list[GNNModel]):
    model, _ = ensemble
    for graph in _graphs(tiny_world):
        expected = np.mean([normalize_scores(s.predict(graph)) for s in singles], axis=0)
        np.testing.assert_allclose(model.predict(graph), expected, rtol=0, atol=1e-12)
        assert model.predict(graph).shape == (graph.num_configs,)


def test_save_load_keeps_every_network(tiny_world: Path, ensemble, tmp_path: Path):
    model, _ = ensemble
    loaded = load_model(model.save(tmp_path / "gnn.json"))
    assert isinstance(loaded, GNNModel) and loaded.num_networks == 3
    for member, again in zip(model.members_, loaded.members_, strict=True):
        _assert_same(again["weights"], member["weights"])
        assert again["seed"] == member["seed"]
    for graph in _graphs(tiny_world):
        np.testing.assert_array_equal(loaded.predict(graph), model.predict(graph))


def test_runs_have_their_own_folders_and_resume(tiny_world: Path, cache_dir: str, ensemble, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch):
    reference, _ = ensemble
    runs = str(tmp_path / "runs")
    model = _fit(tiny_world, cache_dir, runs_dir=runs, seeds=3)
    run = tmp_path / "runs" / "gnn" / LAYOUT.slug
    for folder in (run, run / "seed-1", run / "seed-2"):
        assert (folder / CHECKPOINT).is_file(), folder
    _assert_same(model.weights_, reference.weights_)
    for member, expected in zip(model.members_, reference.members_, strict=True):
        _assert_same(member["weights"], expected["weights"])

    def no_training(*args, **kwargs):
        raise AssertionError("a finished run trained again")

    monkeypatch.setattr(gnn_train, "training_step", no_training)
    again = _fit(tiny_world, cache_dir, runs_dir=runs, seeds=3)  # every run finished: they return at once
    for member, expected in zip(again.members_, model.members_, strict=True):
        _assert_same(member["weights"], expected["weights"])
    # The number of networks is part of a run's identity: the one-network model moves the ensemble's run aside,
    # its members' folders with it, and trains its network afresh (to the same weights: the same seed and data);
    # the seeds=3 model then brings its run back, and every network of it returns at once.
    monkeypatch.undo()
    one = _fit(tiny_world, cache_dir, runs_dir=runs)
    assert one.num_networks == 1
    _assert_same(one.weights_, model.weights_)
    assert not (run / "seed-1").exists() and not (run / "seed-2").exists()
    monkeypatch.setattr(gnn_train, "training_step", no_training)
    back = _fit(tiny_world, cache_dir, runs_dir=runs, seeds=3)
    for member, expected in zip(back.members_, model.members_, strict=True):
        _assert_same(member["weights"], expected["weights"])


def test_networks_the_time_budget_cuts_short_are_left_out(tiny_world: Path, cache_dir: str, singles: list[GNNModel],
                                                          monkeypatch: pytest.MonkeyPatch,
                                                          caplog: pytest.LogCaptureFixture):
    model = GNNModel(**QUICK, seeds=3, max_seconds=1e5, runs_dir=None, cache_dir=cache_dir)
    root = find_data_root(tiny_world)
    model.fit(open_collection(root, LAYOUT), progress=False)
    assert model.num_networks == 3  # the budget is ample
    # The clock jumps past the budget after the first network: the second gets 0 s and stops inside its first
    # epoch, so the model keeps the first alone (and none of the previous fit's members).
    ticks = itertools.chain([0.0], itertools.repeat(1e6))
    monkeypatch.setattr(gnn_model, "time", SimpleNamespace(monotonic=lambda: next(ticks)))
    with caplog.at_level(logging.WARNING, logger="models.gnn.model"):
        model.fit(open_collection(root, LAYOUT), progress=False)
    assert model.num_networks == 1 and not hasattr(model, "members_")
    _assert_same(model.weights_, singles[0].weights_)
    assert [r.getMessage() for r in caplog.records if r.name == "models.gnn.model"] == [
        "gnn layout:nlp:random: the time budget ran out while training the seed ensemble's network with seed 1; "
        "the ensemble keeps 1 of its 3 networks"]
    for graph in _graphs(tiny_world):
        np.testing.assert_array_equal(model.predict(graph), singles[0].predict(graph))


def test_with_refit_every_network_is_refitted(tiny_world: Path, cache_dir: str):
    model = _fit(tiny_world, cache_dir, seeds=2, refit=True, epochs=1)
    second = _fit(tiny_world, cache_dir, seed=1, refit=True, epochs=1)
    first = _fit(tiny_world, cache_dir, refit=True, epochs=1)
    assert model.num_networks == 2
    _assert_same(model.members_[0]["refit_weights"], second.refit_weights_)
    _assert_same(model.refit_weights_, first.refit_weights_)
    for graph in _graphs(tiny_world):  # test graphs by the refitted networks, the others by the early-stopped
        expected = np.mean([normalize_scores(m.predict(graph)) for m in (first, second)], axis=0)
        np.testing.assert_allclose(model.predict(graph), expected, rtol=0, atol=1e-12)
    assert model.network(refit=True, member=1) is not model.network(member=1)


def test_tile_graphs_are_scored_by_every_network(tiny_world: Path, cache_dir: str):
    tile = Collection.TILE_XLA
    model = _fit(tiny_world, cache_dir, tile, seeds=2, epochs=1)
    singles = [_fit(tiny_world, cache_dir, tile, seed=s, seeds=1, epochs=1) for s in (0, 1)]
    assert model.num_networks == 2
    for graph in _graphs(tiny_world, tile)[:6]:
        expected = np.mean([normalize_scores(s.predict(graph)) for s in singles], axis=0)
        np.testing.assert_allclose(model.predict(graph), expected, rtol=0, atol=1e-12)


def test_an_ensemble_with_a_network_whose_scores_are_not_finite_gives_them_back(tiny_world: Path, cache_dir: str,
                                                                               monkeypatch: pytest.MonkeyPatch):
    """One network's NaN scores are returned as they are (not ranked with the others' nor refused with a message
    that names nothing), so the pipeline's finite check refuses them naming the model and the graph."""
    import models.gnn.model as model_module

    tile = Collection.TILE_XLA
    model = _fit(tiny_world, cache_dir, tile, seeds=2, epochs=1)
    graph = _graphs(tiny_world, tile)[0]
    real = model_module.predict_scores
    calls: list[int] = []

    def second_broken(*args, **kwargs):
        calls.append(1)
        out = real(*args, **kwargs)
        return out * np.nan if len(calls) == 2 else out

    monkeypatch.setattr(model_module, "predict_scores", second_broken)
    scores = model.predict(graph)
    assert len(calls) == 2 and scores.shape == (graph.num_configs,) and np.isnan(scores).all()


def test_a_count_that_is_not_positive_is_refused():
    for bad in (0, -1, 1.5):
        with pytest.raises(ValueError, match="run.seeds (must be|takes int)"):
            GNNModel(seeds=bad)
