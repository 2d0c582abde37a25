"""Baselines on hand-built graphs with exact expected scores, the model contract, save/load and the registry."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from competition.collections import Collection, Split
from competition.dataroot import find_data_root, list_graphs
from competition.dataset import open_collection
from competition.metrics import kendall_tau, predicted_order
from competition.npzio import write_npz
from competition.reader import LayoutGraph, TileGraph, load_graph
from models import (
    DefaultFirstModel,
    NotFittedError,
    RandomModel,
    RankingModel,
    available_models,
    load_model,
    make_model,
)
from models.baselines import MIN_SPREAD, layout_default_distance, tile_default_features

TILE = Collection.TILE_XLA
LAYOUT = Collection.LAYOUT_XLA_DEFAULT


# ---------------------------------------------------------------------------------------------------------------
# Hand-built files
# ---------------------------------------------------------------------------------------------------------------


def write_layout(tmp_path: Path, non_default: list[int], stem: str = "g", nc: int = 3) -> LayoutGraph:
    """A 6-node program with ``nc`` configurable nodes; config j sets the first ``non_default[j]`` of them."""
    cfg = np.full((len(non_default), nc, 18), -1, dtype=np.float32)
    for j, k in enumerate(non_default):
        cfg[j, :k, :2] = [1, 0]
    arrays = {
        "edge_index": np.array([[1, 0], [2, 1], [3, 2], [4, 3], [5, 4]], dtype=np.int64),
        "node_feat": np.ones((6, 140), dtype=np.float32),
        "node_opcode": np.array([63, 26, 34, 75, 2, 100], dtype=np.uint8),
        "node_config_feat": cfg,
        "node_config_ids": np.arange(1, 1 + nc, dtype=np.int64),
        "node_splits": np.array([[0, 6]], dtype=np.int64),
        "config_runtime": np.arange(10, 10 * (len(non_default) + 1), 10, dtype=np.int64),
    }
    path = tmp_path / "npz_all" / "npz" / Path(LAYOUT.relpath) / "train" / f"{stem}.npz"
    graph = load_graph(write_npz(path, arrays), LAYOUT)
    assert isinstance(graph, LayoutGraph)
    return graph


def write_tile(root: Path, stem: str, shape: tuple[int, int], bounds: list[tuple[int, int]],
               runtime: list[int], normalizer: int, split: str = "train") -> TileGraph:
    """A 2-node kernel whose root (node 1) has a rank-2 output ``shape`` (default layout); config j tiles it by
    ``bounds[j]``, in units: rows 8 and columns 128 a unit (``shape`` of 8 x 128 multiples, so a tile of ``(b0,
    b1)`` covers ``8 b0`` rows and ``128 b1`` columns)."""
    feat = np.zeros((2, 140), dtype=np.float32)
    feat[1, 0] = 1  # is_root
    feat[1, 21:23] = shape
    cfg = np.zeros((len(bounds), 24), dtype=np.float32)
    cfg[:, 8:10] = bounds
    cfg[:, 14] = np.sum(bounds, axis=1)
    cfg[:, 15] = np.prod(bounds, axis=1)
    arrays = {
        "node_feat": feat,
        "node_opcode": np.array([63, 2], dtype=np.uint8),
        "edge_index": np.array([[1, 0]], dtype=np.int64),
        "config_feat": cfg,
        "config_runtime": np.asarray(runtime, dtype=np.int64),
        "config_runtime_normalizers": np.full(len(bounds), normalizer, dtype=np.int64),
    }
    path = root / "npz_all" / "npz" / "tile" / "xla" / split / f"{stem}.npz"
    graph = load_graph(write_npz(path, arrays), TILE)
    assert isinstance(graph, TileGraph)
    return graph


@pytest.fixture
def tile_root_dir(tmp_path: Path) -> Path:
    """Three train graphs whose default tiles the whole major dim and half the minor one.

    In each, the default's runtime equals the normalizer; one other config is faster than the default, so only
    the normalizer (not the fastest runtime) identifies it. Shapes [16, 512], [32, 1024], [64, 512]: units (2, 4),
    (4, 8), (8, 4).
    """
    for i, (s0, s1) in enumerate([(16, 512), (32, 1024), (64, 512)]):
        u0, u1 = s0 // 8, s1 // 128
        bounds = [(u0 // 2, u1), (u0, u1 // 2), (u0, u1 // 4), (u0 // 2, u1 // 2)]
        write_tile(tmp_path, f"k{i}", (s0, s1), bounds, runtime=[1500, 1000, 900, 1200], normalizer=1000)
    return tmp_path


# ---------------------------------------------------------------------------------------------------------------
# DefaultFirst
# ---------------------------------------------------------------------------------------------------------------


def test_layout_default_first_counts_non_default_nodes(tmp_path: Path):
    graph = write_layout(tmp_path, [0, 2, 1, 0])
    model = DefaultFirstModel()
    scores = model.predict(graph)  # layout needs no fitting
    assert scores.dtype == np.float64
    assert scores.tolist() == [0.0, 2.0, 1.0, 0.0]
    assert predicted_order(scores).tolist() == [0, 3, 2, 1], "ties keep index order"


def test_layout_distance_is_the_same_streamed_one_config_at_a_time(tmp_path: Path):
    graph = write_layout(tmp_path, [3, 0, 2, 1, 3, 0])
    assert layout_default_distance(graph, block_rows=1).tolist() == [3, 0, 2, 1, 3, 0]
    assert layout_default_distance(graph, block_rows=4).tolist() == [3, 0, 2, 1, 3, 0]


def test_layout_fit_learns_nothing_and_returns_self(tmp_path: Path):
    write_layout(tmp_path, [0, 1])
    model = DefaultFirstModel()
    assert model.fit(open_collection(find_data_root(tmp_path), LAYOUT), progress=False) is model
    assert model.learned_state() == {"collection_": LAYOUT}


def test_tile_features_count_dims_from_the_minor_end(tmp_path: Path):
    # [32, 1024]: units (4, 8); tiles of 32 x 512 and 8 x 1024 elements
    g = write_tile(tmp_path, "t", (32, 1024), [(4, 4), (1, 8)], runtime=[5, 6], normalizer=5)
    f = tile_default_features(g)
    assert f.shape == (2, 12)
    # column 0 the minor dim's share (512 / 1024, 1024 / 1024), column 1 the major's (32 / 32, 8 / 32)
    np.testing.assert_array_equal(f[:, :2], [[-1.0, 0.0], [0.0, -2.0]])
    assert np.isnan(f[:, 2:]).all(), "rank 2, and no kernel bounds"


def test_tile_learns_the_default_and_ranks_it_first_on_a_held_out_graph(tile_root_dir: Path):
    model = DefaultFirstModel()
    assert model.fit(open_collection(find_data_root(tile_root_dir), TILE), progress=False) is model
    assert model.n_graphs_ == 3
    np.testing.assert_array_equal(model.tile_center_[:2], [-1.0, 0.0])  # minor dim halved, major dim whole
    np.testing.assert_array_equal(model.tile_spread_[:2], [MIN_SPREAD, MIN_SPREAD])
    assert np.isnan(model.tile_center_[2:]).all()
    # Held out: a new shape [32, 2048], units (4, 16), the default (whole major, half minor) at index 2: tiles of
    # 32 x 2048, 8 x 1024, 32 x 1024 and 32 x 512 elements.
    held = write_tile(tile_root_dir, "new", (32, 2048), [(4, 16), (1, 8), (4, 8), (4, 4)],
                      runtime=[1, 1, 1, 1], normalizer=1, split="valid")
    np.testing.assert_array_equal(tile_default_features(held)[:, :2], [[0, 0], [-1, -2], [-1, 0], [-2, 0]])
    scores = model.predict(held)
    # |minor - (-1)| / 0.25 + |major - 0| / 0.25 per config.
    np.testing.assert_allclose(scores, [4.0, 8.0, 0.0, 4.0])
    assert predicted_order(scores)[0] == 2


def test_tile_predict_before_fit_raises_a_clear_error(tmp_path: Path):
    g = write_tile(tmp_path, "t", (8, 256), [(1, 2), (1, 1)], runtime=[5, 6], normalizer=5)
    with pytest.raises(NotFittedError, match="fit"):
        DefaultFirstModel().predict(g)
    with pytest.raises(NotFittedError):
        DefaultFirstModel().fit(open_collection(find_data_root(tmp_path), LAYOUT), progress=False).predict(g)


def test_tile_fit_without_graphs_says_where_it_looked(tmp_path: Path):
    write_layout(tmp_path, [0])
    with pytest.raises(ValueError, match="tile/xla/train"):
        DefaultFirstModel().fit(open_collection(find_data_root(tmp_path), TILE), progress=False)


def test_predict_does_not_refit(tile_root_dir: Path):
    model = DefaultFirstModel().fit(open_collection(find_data_root(tile_root_dir), TILE), progress=False)
    before = {k: np.copy(v) if isinstance(v, np.ndarray) else v for k, v in model.learned_state().items()}
    g = load_graph(list_graphs(find_data_root(tile_root_dir), TILE, Split.TRAIN)[0], TILE)
    model.predict(g)
    after = model.learned_state()
    assert before.keys() == after.keys()
    for k, v in before.items():
        np.testing.assert_array_equal(after[k], v)


# ---------------------------------------------------------------------------------------------------------------
# Random
# ---------------------------------------------------------------------------------------------------------------


def test_random_is_deterministic_per_stem_and_differs_across_stems(tmp_path: Path):
    a = write_layout(tmp_path / "a", [0, 1, 2, 3, 0, 1, 2, 3], stem="alpha")
    b = write_layout(tmp_path / "b", [0, 1, 2, 3, 0, 1, 2, 3], stem="beta")
    a_again = write_layout(tmp_path / "c", [0, 1, 2, 3, 0, 1, 2, 3], stem="alpha")
    model = RandomModel(seed=3)
    first = model.predict(a)
    model.predict(b)  # calls in between change nothing
    assert first.dtype == np.float64 and first.shape == (8,)
    assert ((first >= 0) & (first < 1)).all()
    np.testing.assert_array_equal(model.predict(a), first)
    np.testing.assert_array_equal(RandomModel(seed=3).predict(a_again), first)
    assert not np.array_equal(model.predict(b), first)
    assert not np.array_equal(RandomModel(seed=4).predict(a), first)


def test_random_fit_returns_self(tmp_path: Path):
    write_layout(tmp_path, [0, 1])
    model = RandomModel()
    assert model.fit(open_collection(find_data_root(tmp_path), LAYOUT)) is model


# ---------------------------------------------------------------------------------------------------------------
# Save / load, params, registry
# ---------------------------------------------------------------------------------------------------------------


def test_save_load_round_trip_gives_identical_predictions(tile_root_dir: Path, tmp_path: Path):
    held = write_tile(tile_root_dir, "new", (32, 2048), [(4, 16), (1, 8), (4, 8)],
                      runtime=[1, 1, 1], normalizer=1, split="valid")
    layout = write_layout(tmp_path / "layout", [0, 2, 1, 0])
    tile_model = DefaultFirstModel().fit(open_collection(find_data_root(tile_root_dir), TILE), progress=False)
    random_model = RandomModel(seed=11)
    for model, graph in [(tile_model, held), (random_model, held), (random_model, layout)]:
        path = model.save(tmp_path / "models" / f"{model.name}.json")
        json.loads(path.read_text(), parse_constant=pytest.fail)  # strict JSON: no NaN or Infinity
        loaded = load_model(path)
        assert type(loaded) is type(model)
        assert loaded.get_params() == model.get_params()
        np.testing.assert_array_equal(loaded.predict(graph), model.predict(graph))
        np.testing.assert_array_equal(type(model).load(path).predict(graph), model.predict(graph))
    assert load_model(tmp_path / "models" / "default-first.json").collection_ is TILE


def test_load_refuses_another_models_file(tmp_path: Path):
    path = RandomModel().save(tmp_path / "r.json")
    with pytest.raises(ValueError, match="default-first"):
        DefaultFirstModel.load(path)
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(ValueError, match="lacks"):
        load_model(tmp_path / "bad.json")


def test_params_are_stored_unchanged_and_registry_makes_models():
    assert RandomModel(seed=7).get_params() == {"scores.seed": 7}
    assert DefaultFirstModel().get_params() == {}
    assert {"random", "default-first"} <= set(available_models())
    model = make_model("random", seed=2)
    assert isinstance(model, RandomModel) and isinstance(model, RankingModel) and model.config.scores.seed == 2
    assert repr(model) == "RandomModel(scores.seed=2)"
    with pytest.raises(ValueError, match="unknown model 'nope'"):
        make_model("nope")


# ---------------------------------------------------------------------------------------------------------------
# The tiny synthetic world
# ---------------------------------------------------------------------------------------------------------------


def test_default_first_beats_random_on_tiny_world_layout(tiny_world: Path):
    root = find_data_root(tiny_world)
    default_first = DefaultFirstModel().fit(open_collection(root, LAYOUT), progress=False)
    random = RandomModel().fit(open_collection(root, LAYOUT))
    taus: dict[str, list[float]] = {"default-first": [], "random": []}
    for split in (Split.TRAIN, Split.VALID):
        for path in list_graphs(root, LAYOUT, split):
            g = load_graph(path, LAYOUT)
            for name, model in (("default-first", default_first), ("random", random)):
                taus[name].append(kendall_tau(model.predict(g), g.config_runtime))
    mean = {k: float(np.mean(v)) for k, v in taus.items()}
    assert len(taus["random"]) == 4
    assert mean["default-first"] > mean["random"], mean
