"""Bridged pruning (``bridge=True``): the layout pipeline keeps an edge between kept nodes that a path through
removed nodes joined, end to end on the tiny world (pipeline, cache, training, the streamed prediction, save/load)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from competition.collections import Collection, Split
from competition.reader import find_data_root, list_graphs, load_graph
from features.data import graph_to_data
from features.transforms import CollapseChains, PruneToConfigurable
from models.base import load_model
from models.gnn.model import GNNAttentionModel, feature_pipeline
from models.gnn.net import make_segments

LAYOUT = Collection.LAYOUT_XLA_DEFAULT
QUICK = dict(hidden=16, layers=2, device="cpu", seed=0, epochs=1, steps_per_graph=1, configs_per_graph=16,
             seeds=1, runs_dir=None)  # one network: its scores are compared with its forward pass


def _edges(data) -> set[tuple[int, int]]:
    return set(map(tuple, data.edge_index.t().tolist()))


def test_pipeline_bridges_what_pruning_cuts(tiny_world: Path):
    graph = load_graph(list_graphs(find_data_root(tiny_world), LAYOUT, Split.TRAIN)[0], LAYOUT)
    rows = np.arange(min(8, graph.num_configs))
    plain = feature_pipeline("layout", 1, True, True, False, False, False, False)(graph_to_data(graph, rows))
    bridged = feature_pipeline("layout", 1, True, True, True, False, False, False)(graph_to_data(graph, rows))
    # The same nodes, features and slots; the kept edges plus the bridges, each of which pruning had cut.
    torch.testing.assert_close(bridged.x, plain.x)
    assert torch.equal(bridged.config_node_index, plain.config_node_index)
    extra = _edges(bridged) - _edges(plain)
    assert _edges(plain) <= _edges(bridged) and extra
    expected = CollapseChains(hops=1, through="elementwise")(graph_to_data(graph, rows))
    assert _edges(expected) == _edges(bridged)
    assert isinstance(feature_pipeline("layout", 1, True, True, False, False, False, False).transforms[0],
                      PruneToConfigurable)
    # "all" keeps whole graphs: nothing to bridge; tile graphs are never pruned
    for kind in ("layout", "tile"):
        pipeline = feature_pipeline(kind, "all", True, kind == "layout", True, False, False, False)
        assert not any(isinstance(t, CollapseChains) for t in pipeline.transforms)


def test_bridged_model_fits_predicts_and_survives_save_load(tiny_world: Path, tmp_path: Path):
    root = find_data_root(tiny_world)
    model = GNNAttentionModel(**QUICK, bridge=True, cache_dir=str(tmp_path / "cache")).fit(root, LAYOUT,
                                                                                          progress=False)
    assert model.settings_["bridge"] is True
    graph = load_graph(list_graphs(root, LAYOUT, Split.VALID)[0], LAYOUT)
    data = model.prepare(graph)
    plain = feature_pipeline("layout", 1, True, True, False, False, False, False)(
        graph_to_data(graph, np.zeros(0, dtype=np.int64)))
    assert data.edge_index.shape[1] > plain.edge_index.shape[1]  # prediction sees the bridges too
    scores = model.predict(graph)
    cf = torch.from_numpy(graph.config_features())
    with torch.no_grad():
        np.testing.assert_allclose(scores, model.network()(make_segments(data), cf).double().numpy(),
                                   rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(load_model(model.save(tmp_path / "m")).predict(graph), scores)


def test_bridge_is_off_by_default():
    assert GNNAttentionModel(runs_dir=None).train_config("layout").bridge is False
    assert GNNAttentionModel(runs_dir=None, bridge=True).train_config("layout").bridge is True
    with pytest.raises(TypeError):
        # every setting is passed: the defaults live in TrainConfig
        feature_pipeline("layout", 1, True, True, False, False, False)
