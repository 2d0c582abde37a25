"""GBDT ranker: grades, the model contract, a sanity fit on the tiny world, save/load and the registry."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from competition.collections import Collection, Split
from competition.metrics import kendall_tau
from competition.reader import find_data_root, list_graphs, load_graph
from models import GBDTModel, NotFittedError, RandomModel, available_models, load_model
from models.gbdt import relevance_grades

LAYOUT = Collection.LAYOUT_XLA_RANDOM
SMALL = dict(n_estimators=40, num_leaves=7, max_configs_per_graph=200, n_jobs=1)


def test_relevance_grades_fastest_highest_and_ties_shared():
    assert relevance_grades([5, 1, 3, 3]).tolist() == [0, 30, 20, 20]
    assert relevance_grades([7]).tolist() == [30]
    g = relevance_grades(np.arange(1000.0))
    assert g.min() == 0 and g.max() == 30 and np.all(np.diff(g) <= 0)


def test_predict_before_fit_raises(tiny_world: Path):
    graph = load_graph(list_graphs(find_data_root(tiny_world), LAYOUT, Split.TRAIN)[0], LAYOUT)
    with pytest.raises(NotFittedError):
        GBDTModel().predict(graph)


@pytest.fixture(scope="module")
def fitted(tiny_world: Path) -> GBDTModel:
    model = GBDTModel(**SMALL)
    assert model.fit(find_data_root(tiny_world), LAYOUT, progress=False) is model
    return model


def test_fit_beats_random_on_its_training_graphs(tiny_world: Path, fitted: GBDTModel):
    root = find_data_root(tiny_world)
    graphs = [load_graph(p, LAYOUT) for p in list_graphs(root, LAYOUT, Split.TRAIN)]
    rnd = RandomModel().fit(root, LAYOUT, progress=False)
    gbdt_tau = np.mean([kendall_tau(fitted.predict(g), g.config_runtime) for g in graphs])
    rnd_tau = np.mean([kendall_tau(rnd.predict(g), g.config_runtime) for g in graphs])
    assert gbdt_tau > rnd_tau + 0.1
    assert fitted.n_graphs_ == len(graphs) and len(fitted.feature_names_) > 0


def test_save_load_predicts_identically(tiny_world: Path, fitted: GBDTModel, tmp_path: Path):
    loaded = load_model(fitted.save(tmp_path / "gbdt.json"))
    assert isinstance(loaded, GBDTModel) and loaded.get_params() == fitted.get_params()
    assert loaded.collection_ == LAYOUT and loaded.feature_names_ == fitted.feature_names_
    for path in list_graphs(find_data_root(tiny_world), LAYOUT, Split.VALID):
        graph = load_graph(path, LAYOUT)
        pred = loaded.predict(graph)
        assert pred.dtype == np.float64 and pred.shape == (graph.num_configs,)
        np.testing.assert_array_equal(pred, fitted.predict(graph))


def test_tile_fit_and_kind_mismatch(tiny_world: Path, fitted: GBDTModel):
    root = find_data_root(tiny_world)
    tile = GBDTModel(**SMALL).fit(root, Collection.TILE_XLA, progress=False)
    graph = load_graph(list_graphs(root, Collection.TILE_XLA, Split.VALID)[0], Collection.TILE_XLA)
    assert tile.predict(graph).shape == (graph.num_configs,)
    with pytest.raises(ValueError, match="expected a graph of layout"):
        fitted.predict(graph)


def test_registered():
    assert "gbdt" in available_models()
