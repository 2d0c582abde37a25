"""GBDT ranker: grades, the model contract, a sanity fit on the tiny world, save/load and the registry."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest

import models.gbdt
from competition.collections import Collection, Split
from competition.dataroot import find_data_root, list_graphs
from competition.dataset import open_collection
from competition.metrics import kendall_tau
from competition.protocol import ValidProtocol
from competition.reader import load_graph
from models import GBDTModel, NotFittedError, RandomModel, available_models, load_model
from models.gbdt import query_normalised, relevance_grades

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
    assert model.fit(open_collection(find_data_root(tiny_world), LAYOUT), progress=False) is model
    return model


def test_fit_beats_random_on_its_training_graphs(tiny_world: Path, fitted: GBDTModel):
    root = find_data_root(tiny_world)
    graphs = [load_graph(p, LAYOUT) for p in list_graphs(root, LAYOUT, Split.TRAIN)]
    rnd = RandomModel().fit(open_collection(root, LAYOUT), progress=False)
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
    tile = GBDTModel(**SMALL).fit(open_collection(root, Collection.TILE_XLA), progress=False)
    graph = load_graph(list_graphs(root, Collection.TILE_XLA, Split.VALID)[0], Collection.TILE_XLA)
    assert tile.predict(graph).shape == (graph.num_configs,)
    with pytest.raises(ValueError, match="expected a graph of layout"):
        fitted.predict(graph)


def test_valid_features_computed_once_across_fit_and_predict(tiny_world: Path, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch):
    calls: Counter[str] = Counter()
    features = models.gbdt._features

    def counting(graph, rows=None, **kw):
        calls[graph.path.name] += 1
        return features(graph, rows, **kw)

    monkeypatch.setattr(models.gbdt, "_features", counting)
    root = find_data_root(tiny_world)
    protocol = ValidProtocol(40)  # the tiny valid graphs hold 59 and 100 configs: a fixed subset of each
    model = GBDTModel(**SMALL).fit(open_collection(root, LAYOUT, protocol=protocol), progress=False)
    valid = [load_graph(p, LAYOUT) for p in list_graphs(root, LAYOUT, Split.VALID)]
    assert len(model._feature_memo) == len(valid)  # only the valid graphs' features are kept
    subsets = [g.select_configs(protocol.configs(LAYOUT, g.stem, g.num_configs)) for g in valid]
    predictions = [model.predict(g) for g in subsets]
    assert [p.shape for p in predictions] == [(40,)] * len(valid)
    np.testing.assert_array_equal(model.predict(subsets[0]), predictions[0])
    assert {g.path.name: calls[g.path.name] for g in valid} == {g.path.name: 1 for g in valid}

    # Other configs of a graph are not in the memo: computed afresh.
    model.predict(valid[0].select_configs(np.arange(10)))
    assert calls[valid[0].path.name] == 2

    # The memo is never saved; the features it held are those computed afresh.
    path = model.save(tmp_path / "gbdt.json")
    assert "_feature_memo" not in path.read_text()
    loaded = load_model(path)
    assert not hasattr(loaded, "_feature_memo")
    for g, pred in zip(subsets, predictions, strict=True):
        np.testing.assert_array_equal(loaded.predict(g), pred)


def test_registered():
    assert "gbdt" in available_models()


def test_a_model_saved_with_other_feature_columns_asks_for_a_fit(tiny_world: Path, fitted: GBDTModel,
                                                                 tmp_path: Path):
    import json

    path = fitted.save(tmp_path / "gbdt.json")
    doc = json.loads(path.read_text())
    names = doc["state"]["feature_names_"]
    doc["state"]["feature_names_"] = names[:-1] + ["an_old_column"]  # as saved by a version with another column
    path.write_text(json.dumps(doc))
    graph = load_graph(list_graphs(find_data_root(tiny_world), LAYOUT, Split.VALID)[0], LAYOUT)
    with pytest.raises(ValueError, match=f"fitted on {len(names)} feature columns and this version computes "
                                         f"{len(names)}, first differing at column {len(names) - 1}: fit it again"):
        load_model(path).predict(graph)
    # Names that disagree with the booster's own column count: a file no version wrote, refused when read.
    doc["state"]["feature_names_"] = names[:-1]
    path.write_text(json.dumps(doc))
    with pytest.raises(ValueError, match=rf"state\.booster_ max_feature_idx: expected {len(names) - 2} \(the "
                                         rf"model's {len(names) - 1} feature columns, less one\); found "
                                         rf"'{len(names) - 1}'"):
        load_model(path)


def test_query_normalised_by_hand():
    """Columns z-scored over the distinct rows: a repeated row counts once; a constant column is 0."""
    x = np.array([[0, 5, 1], [2, 5, 1], [2, 5, 1], [4, 5, 1]], dtype=np.float32)
    z = query_normalised(x)
    # distinct rows (0, 2, 4): mean 2, standard deviation sqrt(8 / 3)
    np.testing.assert_allclose(z[:, 0], np.array([-2, 0, 0, 2]) / np.sqrt(8 / 3), rtol=1e-6)
    assert (z[:, 1:] == 0).all() and z.dtype == np.float32
    assert query_normalised(np.zeros((0, 3), dtype=np.float32)).shape == (0, 3)


def test_training_queries_hold_each_distinct_config_once(tmp_path: Path):
    """A layout file whose runs repeat configs: the training query holds each distinct config once, graded by its
    repeats' mean runtime; the same file without the repeats gives the same query."""
    from competition.npzio import write_npz

    rng = np.random.default_rng(0)
    configs = rng.integers(-1, 3, size=(6, 2, 18)).astype(np.float32)
    runtime = np.array([10, 20, 30, 40, 50, 60], dtype=np.int64)
    arrays = dict(node_feat=np.zeros((3, 140), dtype=np.float32), node_opcode=np.array([26, 26, 25], np.uint8),
                  edge_index=np.array([[1, 0], [2, 1]], np.int64), node_config_ids=np.array([0, 1], np.int64),
                  node_splits=np.array([[0, 3]], np.int64))
    arrays["node_feat"][:2, 21:23] = [[8, 128], [16, 256]]
    folder = tmp_path / "npz" / "layout" / "xla" / "random"
    # runs: config 0 twice (10, 30), config 1 once (20), config 2 three times (40, 50, 60) -> means 20, 20, 50
    order = [0, 1, 0, 2, 2, 2]
    write_npz(folder / "train" / "g.npz", dict(arrays, node_config_feat=configs[order], config_runtime=runtime))
    write_npz(folder / "valid" / "g.npz", dict(arrays, node_config_feat=configs[[0, 1, 2]],
                                               config_runtime=np.array([20, 20, 50], np.int64)))
    root = find_data_root(tmp_path)
    model = GBDTModel(**SMALL)
    data = open_collection(root, "layout:xla:random")
    x, y, groups = model._queries(data.train, np.random.default_rng(0), progress=False)
    vx, vy, vgroups = model._queries(data.valid, np.random.default_rng(0), progress=False)
    assert groups == vgroups == [3]
    np.testing.assert_array_equal(y, vy)
    np.testing.assert_array_equal(x, vx)
    assert y.tolist() == [30, 30, 0]
