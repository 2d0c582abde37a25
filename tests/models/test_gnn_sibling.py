"""Sibling training (``sibling=True``): a layout collection also trains on the train graphs of the same source searched
the other way; kin training (``kin=True``) on those of the other source searched the same way; early stopping stays on
its own valid split."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import models.gnn.model as gnn_model
from competition.collections import Collection, Split
from competition.reader import find_data_root, list_graphs
from models.gnn.model import GNNAttentionModel
from models.gnn.train import DEFAULTS, _visit_order, train

QUICK = dict(hidden=16, layers=2, device="cpu", seed=0, epochs=1, steps_per_graph=1, configs_per_graph=16,
             runs_dir=None)


C = Collection


@pytest.mark.parametrize(("relation", "expected"), [
    ("sibling", {C.LAYOUT_XLA_DEFAULT: C.LAYOUT_XLA_RANDOM, C.LAYOUT_XLA_RANDOM: C.LAYOUT_XLA_DEFAULT,
                 C.LAYOUT_NLP_DEFAULT: C.LAYOUT_NLP_RANDOM, C.LAYOUT_NLP_RANDOM: C.LAYOUT_NLP_DEFAULT,
                 C.TILE_XLA: None}),
    ("kin", {C.LAYOUT_XLA_DEFAULT: C.LAYOUT_NLP_DEFAULT, C.LAYOUT_NLP_DEFAULT: C.LAYOUT_XLA_DEFAULT,
             C.LAYOUT_XLA_RANDOM: C.LAYOUT_NLP_RANDOM, C.LAYOUT_NLP_RANDOM: C.LAYOUT_XLA_RANDOM, C.TILE_XLA: None}),
])
def test_collection_relations(relation: str, expected: dict):
    for collection, other in expected.items():
        assert getattr(collection, relation) is other, (collection, relation)


@pytest.mark.parametrize(("sibling", "kin"), [(False, False), (True, False), (False, True), (True, True)])
def test_sibling_graphs_join_the_training_set_only(tiny_world: Path, tmp_path: Path, sibling: bool, kin: bool,
                                                    monkeypatch: pytest.MonkeyPatch):
    root = find_data_root(tiny_world)
    collection = Collection.LAYOUT_XLA_DEFAULT
    seen = {}
    real_train = gnn_model.train

    def spy(cfg, train_items, valid_items, **kw):
        seen.update(train=[it.key for it in train_items], valid=len(valid_items), share=kw["epoch_share"])
        return real_train(cfg, train_items, valid_items, **kw)

    monkeypatch.setattr(gnn_model, "train", spy)
    model = GNNAttentionModel(**QUICK, sibling=sibling, kin=kin, cache_dir=str(tmp_path / "cache")).fit(
        root, collection, progress=False)
    own = sorted(p.stem for p in list_graphs(root, collection, Split.TRAIN))
    other = sorted(f"{Collection.LAYOUT_XLA_RANDOM.value}/{p.stem}"
                   for p in list_graphs(root, Collection.LAYOUT_XLA_RANDOM, Split.TRAIN))
    kin_graphs = sorted(f"{Collection.LAYOUT_NLP_DEFAULT.value}/{p.stem}"
                        for p in list_graphs(root, Collection.LAYOUT_NLP_DEFAULT, Split.TRAIN))
    assert own and other and kin_graphs
    extra = (other if sibling else []) + (kin_graphs if kin else [])
    assert sorted(seen["train"]) == sorted(own + extra)
    assert seen["valid"] == len(list_graphs(root, collection, Split.VALID))  # early stopping on its own valid split
    assert model.settings_["sibling"] is sibling and model.settings_["kin"] is kin
    # An epoch stays as long as without the added graphs: its steps are counted for the own graphs.
    assert seen["share"] == pytest.approx(len(own) / (len(own) + len(extra)))


def test_visit_order_spreads_an_epoch_over_every_graph():
    cfg = DEFAULTS["layout"]  # graphs_per_step 1
    # 12 slots over 6 graphs: each twice; 4 slots over 6 graphs: 4 distinct graphs (a random subset, not the first 4)
    order = _visit_order(12, cfg, 6, torch.Generator().manual_seed(0))
    assert sorted(order) == sorted(list(range(6)) * 2)
    subsets = {tuple(sorted(_visit_order(4, cfg, 6, torch.Generator().manual_seed(s)))) for s in range(20)}
    assert all(len(set(sub)) == 4 for sub in subsets) and len(subsets) > 1


def test_epoch_share_is_checked():
    with pytest.raises(ValueError, match="epoch_share"):
        train(DEFAULTS["layout"], [], [], epoch_share=0.0)
