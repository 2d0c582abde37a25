"""Dimension tokens (``dim_tokens=True``): config slots carry the sizes of the dimensions they name, end to end on
the tiny world (feature pipeline, cache, training, the streamed prediction and save/load)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from competition.collections import Collection, Split
from competition.dataroot import find_data_root, list_graphs
from competition.dataset import open_collection
from competition.reader import load_graph
from competition.schema import COLS_SHAPE
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
    return model.fit(open_collection(find_data_root(tiny_world), LAYOUT), progress=False)


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
    assert graph.num_configs <= model.settings_["predict"]["predict_batch"]  # one batch: every config in one context
    with torch.no_grad():
        np.testing.assert_allclose(scores, net(segments, cf).double().numpy(), rtol=1e-5, atol=1e-5)
    loaded = load_model(model.save(tmp_path / "m"))
    np.testing.assert_array_equal(loaded.predict(graph), scores)
    plain = GNNAttentionModel(**QUICK, dim_tokens=False, cache_dir=model.cache_dir).fit(
        open_collection(find_data_root(tiny_world), LAYOUT), progress=False)
    assert plain.network().config_dims is None
    assert "config_dim_sizes" not in plain.prepare(graph)


def test_the_config_dimension_features_are_those_of_each_named_size():
    """The config embedding computes the dimension features once per size a slot can name and gathers them: the
    same values as the features of each named size (`dimension_features(sizes[index])`), to the bit."""
    from models.gnn.net import CONFIG_VALUES, LAYOUT_SLOTS, SLOT_TENSOR, RankNet, dimension_features

    torch.manual_seed(0)
    net = RankNet("layout", 5, hidden=8, layers=1, opcode_dim=4, bidirectional=True, attention=True, join="early",
                  dropout=0.0, dim_tokens=True, tile_columns=24)
    sizes = torch.tensor([0, 1, 7, 8, 128, 130, 4096]).repeat(4, 3, 1).float()  # [S=4, 3, 7], 0 = no dimension
    values = torch.randint(0, CONFIG_VALUES, (10, 4, 18))
    slot = torch.arange(4)
    index = (slot.unsqueeze(-1) * len(LAYOUT_SLOTS) + SLOT_TENSOR) * CONFIG_VALUES + values
    expected = (net.config_in(net.config_value(values).flatten(-2))
                + net.config_dims(dimension_features(sizes.flatten()[index]).flatten(-2)))
    assert torch.equal(net.config_embedding(values, slot, sizes), expected)
