"""Dimension tokens (``dim_tokens=True``): config slots carry the sizes of the dimensions they name, end to end on
the tiny world (feature pipeline, cache, training, the streamed prediction and save/load)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from competition.collections import Collection, Split
from competition.reader import find_data_root, list_graphs, load_graph
from competition.schema import COLS_LAYOUT, COLS_SHAPE
from models.base import load_model
from models.gnn.model import GNNAttentionModel
from models.gnn.net import make_segments

LAYOUT = Collection.LAYOUT_XLA_RANDOM
QUICK = dict(hidden=16, layers=2, device="cpu", seed=0, epochs=1, steps_per_graph=1, configs_per_graph=16,
             seeds=1, runs_dir=None)  # one network: its scores are compared with its forward pass


@pytest.fixture(scope="module")
def model(tiny_world: Path, tmp_path_factory: pytest.TempPathFactory) -> GNNAttentionModel:
    cache = str(tmp_path_factory.mktemp("dim-cache"))
    model = GNNAttentionModel(**QUICK, cache_dir=cache)  # dim_tokens is the layout default
    return model.fit(find_data_root(tiny_world), LAYOUT, progress=False)


def test_prepared_graph_carries_the_named_sizes(tiny_world: Path, model: GNNAttentionModel):
    graph = load_graph(list_graphs(find_data_root(tiny_world), LAYOUT, Split.VALID)[0], LAYOUT)
    data = model.prepare(graph)
    sizes = data.config_dim_sizes
    assert sizes.shape == (graph.node_config_ids.shape[0], 3, 7)
    # Each slot's output sizes are its node's raw shape dims (the prepared x holds them log-transformed).
    raw = torch.from_numpy(graph.node_feat[graph.node_config_ids][:, COLS_SHAPE]).float()
    torch.testing.assert_close(sizes[:, 0, 1:], raw)
    assert (sizes[:, :, 0] == 0).all()  # value -1 names no dimension
    assert (sizes[:, 1, 1:] > 0).any()  # operands are found


def test_streamed_prediction_equals_the_forward_pass_and_survives_save_load(tiny_world: Path,
                                                                         model: GNNAttentionModel, tmp_path: Path):
    assert model.network().config_dims is not None
    graph = load_graph(list_graphs(find_data_root(tiny_world), LAYOUT, Split.VALID)[0], LAYOUT)
    scores = model.predict(graph)
    net = model.network()
    segments = make_segments(model.prepare(graph))
    cf = torch.from_numpy(graph.config_features())
    assert graph.num_configs <= model.settings_["predict_batch"]  # one batch: every config in one context
    with torch.no_grad():
        np.testing.assert_allclose(scores, net(segments, cf).double().numpy(), rtol=1e-5, atol=1e-5)
    loaded = load_model(model.save(tmp_path / "m"))
    np.testing.assert_array_equal(loaded.predict(graph), scores)
    plain = GNNAttentionModel(**QUICK, dim_tokens=False, cache_dir=model.cache_dir).fit(find_data_root(tiny_world), LAYOUT,
                                                                       progress=False)
    assert plain.network().config_dims is None
    assert "config_dim_sizes" not in plain.prepare(graph)


def test_key_dims_end_to_end(tiny_world: Path, model: GNNAttentionModel):
    """key_dims: the pipeline attaches the key flags, training and the streamed prediction use them."""
    root = find_data_root(tiny_world)
    keyed = GNNAttentionModel(**QUICK, key_dims=True, cache_dir=model.cache_dir).fit(root, LAYOUT, progress=False)
    graph = load_graph(list_graphs(root, LAYOUT, Split.VALID)[0], LAYOUT)
    data = keyed.prepare(graph)
    keys = data.config_dim_keys
    assert keys.shape == data.config_dim_sizes.shape and set(keys.unique().tolist()) <= {0.0, 1.0}
    assert (keys.sum(-1) <= 1).all()  # at most one key dim per tensor
    assert (keys[:, :, 0] == 0).all() and (keys[:, :, 1:] * (data.config_dim_sizes[:, :, 1:] == 0)).sum() == 0
    assert keys.sum() > 0  # the tiny world has convolutions or dots
    assert keyed.network().config_keys is not None and model.network().config_keys is None
    assert "config_dim_keys" not in model.prepare(graph)
    with torch.no_grad():
        expected = keyed.network()(make_segments(data), torch.from_numpy(graph.config_features()))
    np.testing.assert_allclose(keyed.predict(graph), expected.double().numpy(), rtol=1e-5, atol=1e-5)


def test_layout_match_end_to_end(tiny_world: Path, model: GNNAttentionModel, tmp_path: Path):
    """layout_match: the pipeline attaches the file's layouts of the slots' tensors; training, the streamed
    prediction and save/load use them; some configs of the tiny world keep a tensor's file layout, some do not."""
    root = find_data_root(tiny_world)
    matched = GNNAttentionModel(**QUICK, layout_match=True, cache_dir=model.cache_dir).fit(root, LAYOUT, progress=False)
    graph = load_graph(list_graphs(root, LAYOUT, Split.VALID)[0], LAYOUT)
    data = matched.prepare(graph)
    layouts = data.config_tensor_layouts
    assert layouts.shape == (graph.node_config_ids.shape[0], 18) and layouts.dtype == torch.long
    # The output tensor's entries are the slot node's own raw layout columns, -1 beyond its rank.
    raw = graph.node_feat[graph.node_config_ids]
    rank = (raw[:, COLS_SHAPE] != 0).sum(1)
    own = np.where(np.arange(6)[None, :] < rank[:, None], raw[:, COLS_LAYOUT], -1)
    np.testing.assert_array_equal(layouts[:, :6].numpy(), own)
    values = torch.from_numpy(graph.config_features()).long()  # [C, NC, 18]
    explicit = values >= 0
    equal = (values == layouts) & explicit
    assert equal.any() and (explicit & ~equal).any()
    assert matched.network().config_match is not None and model.network().config_match is None
    assert "config_tensor_layouts" not in model.prepare(graph)
    with torch.no_grad():
        expected = matched.network()(make_segments(data), torch.from_numpy(graph.config_features()))
    scores = matched.predict(graph)
    np.testing.assert_allclose(scores, expected.double().numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(load_model(matched.save(tmp_path / "m")).predict(graph), scores)


def test_links_end_to_end(tiny_world: Path, model: GNNAttentionModel, tmp_path: Path):
    """links: the pipeline finds the decision links on the whole graph, training fits the link term, and the
    streamed prediction (which looks the terms up in a table) gives the forward pass's scores, after save/load too."""
    root = find_data_root(tiny_world)
    linked = GNNAttentionModel(**QUICK, links=True, cache_dir=model.cache_dir).fit(root, LAYOUT, progress=False)
    graph = load_graph(list_graphs(root, LAYOUT, Split.VALID)[0], LAYOUT)
    data = linked.prepare(graph)
    index = data.link_index
    assert index.shape[1] == 4 and index.shape[0] > 0 and data.link_feat.shape == (index.shape[0], 14)
    assert int(index[:, [0, 2]].max()) < graph.node_config_ids.shape[0]  # slot numbers, unchanged by pruning
    assert "link_index" not in model.prepare(graph) and model.network().link_mlp is None
    net = linked.network()
    assert net.link_mlp is not None
    with torch.no_grad():
        expected = net(make_segments(data), torch.from_numpy(graph.config_features()))
    scores = linked.predict(graph)
    np.testing.assert_allclose(scores, expected.double().numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(load_model(linked.save(tmp_path / "m")).predict(graph), scores)
