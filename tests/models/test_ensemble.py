"""The ensembler: normalisation, fitting per collection, honest cross-validation, saving, errors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from competition.collections import Collection
from competition.metrics import graph_score, predicted_order, score_graph
from models.base import NotFittedError
from models.ensemble import Ensemble, normalize_scores, simplex_grid

TILE = Collection.TILE_XLA
LAYOUT = Collection.LAYOUT_XLA_DEFAULT


def _world(num_graphs: int = 4, seed: int = 0) -> tuple[dict[str, dict[str, np.ndarray]], dict[str, np.ndarray]]:
    """Model A ranks layout perfectly and tile at random; model B the reverse."""
    rng = np.random.default_rng(seed)
    preds: dict[str, dict[str, np.ndarray]] = {"A": {}, "B": {}}
    labels: dict[str, np.ndarray] = {}
    for g in range(num_graphs):
        sid = f"{LAYOUT.value}:g{g}"
        y = rng.permutation(30).astype(np.float64) + 1.0
        labels[sid], preds["A"][sid], preds["B"][sid] = y, 2.0 * y + 7.0, rng.random(30)
        sid = f"{TILE.value}:t{g}"
        y = rng.uniform(0.5, 2.0, 40)
        labels[sid], preds["A"][sid], preds["B"][sid] = y, rng.random(40), np.log(y)
    return preds, labels


def _mean_metric(scores: dict[str, np.ndarray], labels: dict[str, np.ndarray], collection: Collection) -> float:
    return float(np.mean([graph_score(collection, labels[sid], scores=s) for sid, s in scores.items()
                          if sid.startswith(collection.value + ":")]))


# ---------------------------------------------------------------------------------------------------------------
# Building blocks
# ---------------------------------------------------------------------------------------------------------------


def test_rank_normalisation_by_hand():
    np.testing.assert_array_equal(normalize_scores([3.0, 1.0, 2.0, 2.0], "rank"), [1.0, 0.0, 0.5, 0.5])
    np.testing.assert_array_equal(normalize_scores([10.0, -4.0, 0.0], "rank"), [1.0, 0.0, 0.5])


def test_minmax_normalisation_by_hand():
    np.testing.assert_array_equal(normalize_scores([0.0, 2.0, 1.0], "minmax"), [0.0, 1.0, 0.5])
    np.testing.assert_array_equal(normalize_scores([-1.0, 3.0, 0.0, 3.0], "minmax"), [0.0, 1.0, 0.25, 1.0])


@pytest.mark.parametrize("how", ["rank", "minmax"])
def test_constant_scores_map_to_one_half(how: str):
    np.testing.assert_array_equal(normalize_scores([4.0, 4.0, 4.0], how), [0.5, 0.5, 0.5])
    np.testing.assert_array_equal(normalize_scores([2.5], how), [0.5])


def test_normalisation_refuses_bad_input():
    with pytest.raises(ValueError, match="finite"):
        normalize_scores([1.0, np.nan])
    with pytest.raises(ValueError, match="'rank' or 'minmax'"):
        normalize_scores([1.0, 2.0], "zscore")


def test_simplex_grid():
    grid = simplex_grid(3)
    assert grid.shape == (66, 3)
    np.testing.assert_allclose(grid.sum(axis=1), 1.0)
    assert (grid >= 0).all() and [1.0, 0.0, 0.0] in grid.tolist() and [0.3, 0.7, 0.0] in grid.tolist()
    assert len(simplex_grid(4)) == 286 and len(simplex_grid(6)) <= 300


@pytest.mark.parametrize("collection", [TILE, LAYOUT])
def test_the_fitting_metric_is_the_submission_score(collection: Collection):
    from models.ensemble import _metric_rows

    rng = np.random.default_rng(3)
    y = rng.uniform(1.0, 3.0, 50)
    s = np.round(rng.random((3, 50)), 1)  # many ties: broken by index, as in the written submission
    expected = [score_graph(collection, predicted_order(row)[:5 if collection.is_tile else None], y).score
                for row in s]
    assert _metric_rows(collection, s, y).tolist() == expected


# ---------------------------------------------------------------------------------------------------------------
# Fitting
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["best", "auto"])
def test_each_collection_gets_its_perfect_model(method: str):
    preds, labels = _world()
    ens = Ensemble(method=method, normalization="auto" if method == "auto" else "rank").fit(preds, labels)
    assert ens.models_ == ["A", "B"]
    assert ens.collections_[LAYOUT.value]["weights"] == [1.0, 0.0]
    assert ens.collections_[TILE.value]["weights"] == [0.0, 1.0]
    assert ens.collections_[LAYOUT.value]["method"] == "best" and ens.collections_[TILE.value]["method"] == "best"
    assert ens.describe() == "tile:xla best=B; layout:xla:default best=A"
    assert ens.cv_score_ == {TILE.value: 1.0, LAYOUT.value: 1.0}
    assert ens.member_scores_[LAYOUT.value]["A"] == 1.0 and ens.member_scores_[LAYOUT.value]["B"] < 0.5
    assert ens.member_scores_[TILE.value]["B"] == 1.0 and ens.member_scores_[TILE.value]["A"] < 1.0
    cv = ens.cross_val_predict(preds, labels)
    assert sorted(cv) == sorted(labels)
    assert _mean_metric(cv, labels, LAYOUT) == 1.0 and _mean_metric(cv, labels, TILE) == 1.0
    fitted = ens.predict(preds)
    assert _mean_metric(fitted, labels, LAYOUT) == 1.0 and _mean_metric(fitted, labels, TILE) == 1.0


def test_mean_method_gives_equal_weights():
    preds, labels = _world()
    ens = Ensemble(method="mean", normalization="minmax").fit(preds, labels)
    assert ens.collections_[TILE.value] == {"method": "mean", "normalization": "minmax", "weights": [0.5, 0.5]}
    assert ens.describe() == "tile:xla mean minmax A,B; layout:xla:default mean minmax A,B"


def test_weighted_fit_finds_the_known_optimum():
    rng = np.random.default_rng(1)
    preds: dict[str, dict[str, np.ndarray]] = {"x": {}, "y": {}, "noise": {}}
    labels = {}
    for g in range(3):
        sid = f"{LAYOUT.value}:g{g}"
        x, y = rng.random(200), rng.random(200)
        x[:2], y[:2] = (0.0, 1.0), (1.0, 0.0)  # span [0, 1] exactly: minmax leaves them as they are
        labels[sid] = 0.3 * x + 0.7 * y
        preds["x"][sid], preds["y"][sid], preds["noise"][sid] = 5.0 * x - 2.0, 3.0 * y + 1.0, rng.random(200)
    ens = Ensemble(method="weighted", normalization="minmax").fit(preds, labels)
    np.testing.assert_allclose(ens.collections_[LAYOUT.value]["weights"], [0.3, 0.7, 0.0])
    assert ens.describe() == "layout:xla:default weighted minmax x=0.30,y=0.70"
    assert ens.cv_score_[LAYOUT.value] == pytest.approx(1.0)
    assert _mean_metric(ens.predict(preds), labels, LAYOUT) == pytest.approx(1.0)


def test_cv_score_is_the_score_of_cross_val_predict():
    preds, labels = _world(num_graphs=6, seed=5)
    rng = np.random.default_rng(9)
    for sid, y in labels.items():  # two imperfect models, so that the choice and the weights matter
        preds["A"][sid] = y + rng.normal(0, 1.0 * y.std(), y.size)
        preds["B"][sid] = y + rng.normal(0, 1.5 * y.std(), y.size)
    ens = Ensemble(method="auto", normalization="auto", folds=3).fit(preds, labels)
    cv = ens.cross_val_predict(preds, labels)
    for c in (TILE, LAYOUT):
        assert ens.cv_score_[c.value] == pytest.approx(_mean_metric(cv, labels, c), abs=1e-12)
        assert set(ens.candidate_scores_[c.value]) == {f"{m}/{n}" for m in ("best", "mean", "weighted")
                                                        for n in ("rank", "minmax")}


def test_cross_val_predict_never_uses_a_graphs_own_labels():
    rng = np.random.default_rng(2)
    preds: dict[str, dict[str, np.ndarray]] = {"A": {}, "B": {}}
    labels = {}
    for g in range(3):
        sid = f"{LAYOUT.value}:g{g}"
        y = rng.random(60)
        labels[sid] = y
        preds["A"][sid] = y + rng.normal(0, 0.15, 60)  # good, not perfect
        preds["B"][sid] = rng.random(60)  # random
    ens = Ensemble(method="best", folds=5)  # leave-one-graph-out on 3 graphs
    cv = ens.cross_val_predict(preds, labels)
    victim = f"{LAYOUT.value}:g0"
    adversarial = dict(labels)
    adversarial[victim] = preds["B"][victim].copy()  # makes B look perfect on the victim only
    cv2 = ens.cross_val_predict(preds, adversarial)
    np.testing.assert_array_equal(cv2[victim], cv[victim])
    changed = [sid for sid in cv if sid != victim and not np.array_equal(cv[sid], cv2[sid])]
    assert changed == [f"{LAYOUT.value}:g1", f"{LAYOUT.value}:g2"]
    # and the same holds for auto with its nested choice
    auto = Ensemble(method="auto", normalization="auto", folds=5)
    np.testing.assert_array_equal(auto.cross_val_predict(preds, adversarial)[victim],
                                  auto.cross_val_predict(preds, labels)[victim])


def test_a_lone_graph_gets_equal_weights_in_cross_validation():
    preds, labels = _world(num_graphs=1)
    cv = Ensemble(method="best").cross_val_predict(preds, labels)
    sid = f"{LAYOUT.value}:g0"
    expected = 0.5 * normalize_scores(preds["A"][sid]) + 0.5 * normalize_scores(preds["B"][sid])
    np.testing.assert_allclose(cv[sid], expected)


def test_fit_is_deterministic():
    preds, labels = _world(num_graphs=5, seed=4)
    a = Ensemble(method="auto", normalization="auto").fit(preds, labels)
    b = Ensemble(method="auto", normalization="auto").fit(preds, labels)
    assert a.collections_ == b.collections_ and a.cv_score_ == b.cv_score_


# ---------------------------------------------------------------------------------------------------------------
# Saving, errors
# ---------------------------------------------------------------------------------------------------------------


def _registered(preds: dict[str, dict[str, np.ndarray]]) -> dict[str, dict[str, np.ndarray]]:
    """The toy models A and B under registered model names: a saved ensemble names the models whose runs it opens."""
    return {"gbdt": preds["A"], "gnn": preds["B"]}


def test_save_load_round_trip_predicts_identically(tmp_path: Path):
    preds, labels = _world(num_graphs=4, seed=8)
    rng = np.random.default_rng(0)
    for sid, y in labels.items():
        preds["A"][sid] = y + rng.normal(0, y.std(), y.size)
    preds = _registered(preds)
    ens = Ensemble(method="weighted", normalization="rank").fit(preds, labels)
    path = ens.save(tmp_path / "ens.json")
    assert json.loads(path.read_text())["describe"] == ens.describe()
    back = Ensemble.load(path)
    assert back.describe() == ens.describe() and back.get_params() == ens.get_params()
    p1, p2 = ens.predict(preds), back.predict(preds)
    assert list(p1) == list(p2)
    for sid in p1:
        np.testing.assert_array_equal(p1[sid], p2[sid])


def test_load_refuses_foreign_files(tmp_path: Path):
    bad = tmp_path / "x.json"
    bad.write_text('{"name": "gbdt", "version": 1, "params": {}, "state": {}}')
    with pytest.raises(ValueError, match="saved ensemble"):
        Ensemble.load(bad)
    with pytest.raises(ValueError, match="no such file"):
        Ensemble.load(tmp_path / "missing.json")


def test_errors_name_missing_models_and_ids():
    preds, labels = _world()
    with pytest.raises(NotFittedError, match="not fitted"):
        Ensemble().predict(preds)
    ens = Ensemble(method="mean").fit(preds, labels)
    with pytest.raises(ValueError, match="lack model.*B"):
        ens.predict({"A": preds["A"]})
    partial = {"A": preds["A"], "B": {k: v for k, v in preds["B"].items() if k != f"{TILE.value}:t1"}}
    with pytest.raises(ValueError, match="B have no scores for ID tile:xla:t1"):
        ens.predict(partial)
    with pytest.raises(ValueError, match="no ensemble weights for collection.*layout:nlp:random"):
        ens.predict({"A": {"layout:nlp:random:z": np.zeros(3)}, "B": {"layout:nlp:random:z": np.zeros(3)}})
    with pytest.raises(ValueError, match="model B has no scores for 1 labelled ID"):
        Ensemble().fit(partial, labels)
    with pytest.raises(ValueError, match="disagree on the number of configs"):
        Ensemble().fit({"A": preds["A"], "B": {**preds["B"], f"{TILE.value}:t0": np.zeros(3)}}, labels)
    with pytest.raises(ValueError, match="method must be .auto. or .weighted. or .best. or .mean.; got .stack."):
        Ensemble(method="stack").fit(preds, labels)


def test_best_model_prediction_keeps_the_member_order():
    preds, labels = _world()
    ens = Ensemble(method="best").fit(preds, labels)
    out = ens.predict(preds)
    for sid, s in out.items():
        member = "A" if sid.startswith(LAYOUT.value) else "B"
        np.testing.assert_array_equal(predicted_order(s), predicted_order(preds[member][sid]))


def test_collections_with_fewer_graphs_than_min_graphs_take_the_overall_best_member():
    # xla:default, 10 graphs: A perfect, B random. xla:random, 3 graphs: B perfect, A noisy. A is best overall
    # (mean over the collections), so with min_graphs=5 the small collection takes A, though B wins there.
    rng = np.random.default_rng(3)
    small = Collection.LAYOUT_XLA_RANDOM
    preds: dict[str, dict[str, np.ndarray]] = {"A": {}, "B": {}}
    labels: dict[str, np.ndarray] = {}
    for g in range(10):
        sid, y = f"{LAYOUT.value}:g{g}", rng.permutation(30) + 1.0
        labels[sid], preds["A"][sid], preds["B"][sid] = y, y.copy(), rng.random(30)
    for g in range(3):
        sid, y = f"{small.value}:s{g}", rng.permutation(30) + 1.0
        labels[sid], preds["A"][sid], preds["B"][sid] = y, y + rng.normal(0, 8, 30), 3.0 * y
    plain = Ensemble(method="auto", normalization="auto").fit(preds, labels)
    assert plain.collections_[small.value]["weights"] == [0.0, 1.0]
    ens = Ensemble(method="auto", normalization="auto", min_graphs=5).fit(preds, labels)
    assert ens.collections_[small.value] == {"method": "overall", "normalization": "rank", "weights": [1.0, 0.0]}
    assert ens.collections_[LAYOUT.value]["weights"] == [1.0, 0.0]  # fitted: 10 graphs
    a_alone = _mean_metric({s: p for s, p in preds["A"].items() if s.startswith(small.value)}, labels, small)
    assert ens.cv_score_[small.value] == pytest.approx(a_alone) == ens.member_scores_[small.value]["A"]
    assert ens.candidate_scores_[small.value] == {}
    assert f"{small.value} overall=A" in ens.describe()
    # the cross-validated predictions of the small collection are A's, ranked; predict does the same
    cv = ens.cross_val_predict(preds, labels)
    for sid in labels:
        if sid.startswith(small.value):
            np.testing.assert_array_equal(cv[sid], normalize_scores(preds["A"][sid], "rank"))
            np.testing.assert_array_equal(ens.predict(preds)[sid], cv[sid])
    with pytest.raises(ValueError, match="min_graphs"):
        Ensemble(min_graphs=0).fit(preds, labels)


def test_min_graphs_survives_save_and_load(tmp_path: Path):
    preds, labels = _world(num_graphs=4)
    preds = _registered(preds)
    ens = Ensemble(min_graphs=10).fit(preds, labels)
    loaded = Ensemble.load(ens.save(tmp_path / "e.json"))
    assert loaded.get_params()["combine.min_graphs"] == 10 and loaded.collections_ == ens.collections_
    assert all(spec["method"] == "overall" for spec in loaded.collections_.values())
    for sid, scores in loaded.predict(preds).items():
        np.testing.assert_array_equal(scores, ens.predict(preds)[sid])


def test_the_overall_member_is_best_over_the_collections_of_the_same_kind():
    # Tile, 6 kernels: B ranks them perfectly, A in reverse (a large loss on the tile metric). Layout, 3 graphs each
    # of xla:default and nlp:random: A near perfect, B random. Over all three collections B has the better mean
    # (tile's gap outweighs layout's); over the layout ones A has. With min_graphs=5 the small layout collections
    # take A, and tile (6 kernels) gets its own fitted choice, B.
    rng = np.random.default_rng(7)
    nlp = Collection.LAYOUT_NLP_RANDOM
    preds: dict[str, dict[str, np.ndarray]] = {"A": {}, "B": {}}
    labels: dict[str, np.ndarray] = {}
    for g in range(6):
        sid, y = f"{TILE.value}:t{g}", np.geomspace(1.0, 50.0, 20)[rng.permutation(20)]
        labels[sid], preds["A"][sid], preds["B"][sid] = y, -y, y.copy()
    for c in (LAYOUT, nlp):
        for g in range(3):
            sid, y = f"{c.value}:g{g}", rng.permutation(30) + 1.0
            labels[sid], preds["A"][sid], preds["B"][sid] = y, y + rng.normal(0, 1, 30), rng.random(30)
    tile_a = _mean_metric(preds["A"], labels, TILE)
    layout_a = [_mean_metric(preds["A"], labels, c) for c in (LAYOUT, nlp)]
    layout_b = [_mean_metric(preds["B"], labels, c) for c in (LAYOUT, nlp)]
    assert _mean_metric(preds["B"], labels, TILE) == 1.0 and tile_a < -10
    assert np.mean([tile_a, *layout_a]) < np.mean([1.0, *layout_b])  # B is best over every collection
    assert np.mean(layout_a) > np.mean(layout_b)  # A over the layout ones
    ens = Ensemble(method="auto", normalization="auto", min_graphs=5).fit(preds, labels)
    for c in (LAYOUT, nlp):
        assert ens.collections_[c.value] == {"method": "overall", "normalization": "rank", "weights": [1.0, 0.0]}
    assert ens.collections_[TILE.value]["weights"] == [0.0, 1.0]
    cv = ens.cross_val_predict(preds, labels)
    for sid in labels:
        if not sid.startswith(TILE.value):
            np.testing.assert_array_equal(cv[sid], normalize_scores(preds["A"][sid], "rank"))
