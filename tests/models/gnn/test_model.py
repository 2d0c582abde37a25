"""GNN training on the tiny world: it learns, writes its run folder, is reproducible, resumes, saves and loads."""

from __future__ import annotations

import csv
import importlib
import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from torch_geometric.data import Data

from competition.collections import Collection, Split
from competition.dataroot import find_data_root, list_graphs
from competition.dataset import open_collection
from competition.metrics import kendall_tau
from competition.reader import load_graph
from models import settings as settings_tree
from models.base import NotFittedError, load_model
from models.gnn.config import DEFAULTS, RETIRED_SETTINGS, GNNConfig
from models.gnn.model import GNNAttentionModel, GNNModel, stored_settings
from models.gnn.net import LAYOUT_CONFIG_SLOTS, RankNet, make_segments
from models.gnn.runs import CHECKPOINT, CURVES_CSV, CURVES_PNG, SETTINGS_FILE, run_settings
from models.gnn.steps import predict_scores, visit_order

LAYOUT = Collection.LAYOUT_NLP_RANDOM
SMALL = dict(hidden=16, layers=2, device="cpu", seed=0)
QUICK = dict(SMALL, epochs=3, steps_per_graph=1, configs_per_graph=16)
NET = dict(hidden=8, layers=2, opcode_dim=16, bidirectional=True, attention=False, join="early", dropout=0.0,
           dim_tokens=False, tile_columns=24)
# The module itself: ``models.gnn.train`` as an attribute is the ``train`` function that models/gnn/__init__.py
# re-exports, so ``import models.gnn.train as m`` would bind the function.
gnn_train = importlib.import_module("models.gnn.train")
gnn_steps = importlib.import_module("models.gnn.steps")
gnn_callbacks = importlib.import_module("models.gnn.callbacks")



@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tmp_path_factory.mktemp("gnn-cache"))


@pytest.fixture(scope="module")
def train_only_root(tiny_world: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny world's train graphs of LAYOUT alone: no valid split, so no early stopping, the last epoch is kept."""
    src = find_data_root(tiny_world)
    graphs = list_graphs(src, LAYOUT, Split.TRAIN)
    out = tmp_path_factory.mktemp("train-only")
    dest = out / "npz" / "layout" / "nlp" / "random" / "train"
    dest.mkdir(parents=True)
    for path in graphs:
        shutil.copy(path, dest / path.name)
    return out


@pytest.fixture(scope="module")
def learned(train_only_root: Path, cache_dir: str) -> GNNModel:
    model = GNNModel(**SMALL, epochs=20, steps_per_graph=8, configs_per_graph=64, lr=1e-2, runs_dir=None,
                     cache_dir=cache_dir)
    assert model.fit(open_collection(find_data_root(train_only_root), LAYOUT), progress=False) is model
    return model


def _run_dir(runs_dir: str | Path, name: str = "gnn") -> Path:
    return Path(runs_dir) / name / LAYOUT.slug



def interrupt_after_epoch_1(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make training raise KeyboardInterrupt right after epoch 1's checkpoint and curves are written."""
    real_write = gnn_callbacks.write_curves

    def write_then_interrupt(run_dir, history, title="", *, plot=True):
        real_write(run_dir, history, title, plot=plot)
        if history[-1]["epoch"] == 1:
            raise KeyboardInterrupt

    monkeypatch.setattr(gnn_callbacks, "write_curves", write_then_interrupt)

def test_small_model_learns_the_tiny_world(train_only_root: Path, learned: GNNModel):
    root = find_data_root(train_only_root)
    graphs = [load_graph(p, LAYOUT) for p in list_graphs(root, LAYOUT, Split.TRAIN)]
    assert len(graphs) == 2
    taus = [kendall_tau(learned.predict(g), g.config_runtime) for g in graphs]
    # Half a random search's configs tie within the noise (as in the real graph), which caps tau near 0.8.
    assert np.mean(taus) > 0.7, taus
    assert learned.stopped_ == "all epochs" and learned.best_epoch_ == 20  # no valid split: the last epoch
    losses = [row["train_loss"] for row in learned.history_]
    assert losses[-1] < 0.5 * losses[0]


def test_run_folder_has_checkpoint_and_curves(tiny_world: Path, cache_dir: str, tmp_path: Path):
    model = _fit(tiny_world, cache_dir, str(tmp_path / "runs"))
    run = _run_dir(tmp_path / "runs")
    assert sorted(p.name for p in run.iterdir()) == sorted([CHECKPOINT, CURVES_CSV, CURVES_PNG, SETTINGS_FILE])
    with (run / CURVES_CSV).open(newline="") as f:
        rows = list(csv.reader(f))
    assert rows[0] == ["epoch", "train_loss", "valid_metric", "lr", "seconds", "valid_seconds"]
    assert [int(r[0]) for r in rows[1:]] == [1, 2, 3]  # one row per epoch
    for row, hist in zip(rows[1:], model.history_, strict=True):
        assert [float(v) for v in row] == pytest.approx([hist[k] for k in rows[0]])
        assert float(row[1]) >= 0 and float(row[3]) > 0 and -1 <= float(row[2]) <= 1  # loss, lr, Kendall tau
    seconds = [float(r[4]) for r in rows[1:]]
    assert seconds == sorted(seconds)
    # Each epoch's validation is part of its time: between 0 and the time since the previous epoch ended.
    valid_seconds = [float(r[5]) for r in rows[1:]]
    assert all(0 < v <= s - before for v, s, before in zip(valid_seconds, seconds, [0.0, *seconds], strict=False))
    assert (run / CURVES_PNG).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    ckpt = torch.load(run / CHECKPOINT, map_location="cpu", weights_only=False)
    assert ckpt["epoch"] == 3 and ckpt["stopped"] == "all epochs" and ckpt["history"] == model.history_
    # The run's settings: what the model trained with, but for how it ran (the run section, test-time orderings)
    assert ckpt["settings"] == run_settings(settings_tree.from_dict(GNNConfig, model.settings_))


def test_save_load_predicts_identically(tiny_world: Path, learned: GNNModel, tmp_path: Path):
    loaded = load_model(learned.save(tmp_path / "gnn.json"))
    assert isinstance(loaded, GNNModel) and loaded.get_params() == learned.get_params()
    assert loaded.collection_ == LAYOUT and loaded.settings_ == learned.settings_
    root = find_data_root(tiny_world)
    for split in (Split.TRAIN, Split.VALID, Split.TEST):
        for path in list_graphs(root, LAYOUT, split):
            graph = load_graph(path, LAYOUT)
            pred = loaded.predict(graph)
            assert pred.dtype == np.float64 and pred.shape == (graph.num_configs,) and np.isfinite(pred).all()
            np.testing.assert_array_equal(pred, learned.predict(graph))


def _as_saved_before(model: GNNModel, path: Path) -> dict:
    """``model`` saved as a version before the settings tree wrote it, which still had the
    :data:`RETIRED_SETTINGS`: its hyper-parameters by name (``None`` for a default, the retired ones too), its
    settings flat (the retired ones ``False``)."""
    doc = json.loads(model.save(path).read_text())
    cfg = settings_tree.from_dict(GNNConfig, doc["state"]["settings_"])
    runtime = {"device": "auto", "runs_dir": "runs", "cache_dir": ".cache/processed", "max_seconds": None, "tta": 1}
    doc["params"] = {**{leaf.name: None for leaf in settings_tree.leaves(GNNConfig).values()}, **runtime,
                     **{k.split(".")[-1]: v for k, v in doc["params"].items()}, **dict.fromkeys(RETIRED_SETTINGS)}
    doc["state"]["settings_"] = {"kind": cfg.kind, "num_features": cfg.num_features, "data_key": cfg.data_key,
                                 **{k: v for k, v in settings_tree.flat(cfg).items() if k not in runtime},
                                 **dict.fromkeys(RETIRED_SETTINGS, False)}
    return doc


def test_a_model_saved_with_the_retired_settings_off_loads_and_predicts_identically(tiny_world: Path,
                                                                                    learned: GNNModel,
                                                                                    tmp_path: Path):
    old = tmp_path / "old.json"
    old.write_text(json.dumps(_as_saved_before(learned, tmp_path / "gnn.json")))
    loaded = load_model(old)
    assert isinstance(loaded, GNNModel)
    assert all(stored_settings(loaded.train_config(c)) == stored_settings(learned.train_config(c)) for c in Collection)
    assert loaded.settings_ == learned.settings_
    graph = load_graph(list_graphs(find_data_root(tiny_world), LAYOUT, Split.VALID)[0], LAYOUT)
    np.testing.assert_array_equal(loaded.predict(graph), learned.predict(graph))
    # The settings are gone from the code: not a hyper-parameter, nor a field of a run's settings.
    assert not set(RETIRED_SETTINGS) & (set(learned.get_params()) | set(GNNConfig.__dataclass_fields__))
    with pytest.raises(ValueError, match="no setting 'sibling'"):  # only a saved file may hold them
        GNNModel(runs_dir=None, sibling=False)


@pytest.mark.parametrize("where", ["params", "settings"])
@pytest.mark.parametrize("name", RETIRED_SETTINGS)
def test_a_model_trained_with_a_retired_setting_on_is_refused(name: str, where: str, learned: GNNModel,
                                                              tmp_path: Path):
    doc = _as_saved_before(learned, tmp_path / "gnn.json")
    (doc["params"] if where == "params" else doc["state"]["settings_"])[name] = True
    path = tmp_path / "old.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(ValueError) as refused:
        load_model(path)
    message = str(refused.value)
    assert message == f"{path}: trained with {name}=True, an option this version no longer has; retrain it"


def test_predict_streams_blocks_like_the_forward_pass(train_only_root: Path, learned: GNNModel,
                                                      monkeypatch: pytest.MonkeyPatch):
    """model.predict reads a layout graph's configs block by block (here 5 at a time, in a background thread) and
    scores them through the deduplicating plan: the same scores as the network's forward pass on all of them."""
    monkeypatch.setattr(importlib.import_module("models.gnn.model"), "PREDICT_BLOCK", 5)
    root = find_data_root(train_only_root)
    graph = load_graph(list_graphs(root, LAYOUT, Split.TRAIN)[0], LAYOUT)
    assert graph.num_configs > 10
    net = learned.network()
    segments = make_segments(learned.prepare(graph))
    with torch.no_grad():
        expected = net(segments, torch.from_numpy(graph.config_features())).double().numpy()
    # float32 sums taken in another order: differences of a few 1e-6 on scores of order 1 to 25.
    np.testing.assert_allclose(learned.predict(graph), expected, rtol=1e-5, atol=2e-5)


def test_predict_before_fit_raises(tiny_world: Path):
    graph = load_graph(list_graphs(find_data_root(tiny_world), LAYOUT, Split.TRAIN)[0], LAYOUT)
    with pytest.raises(NotFittedError):
        GNNModel(**SMALL).predict(graph)


def _assert_same_weights(a: GNNModel, b: GNNModel) -> None:
    assert a.weights_.keys() == b.weights_.keys()
    for k in a.weights_:
        np.testing.assert_array_equal(a.weights_[k], b.weights_[k], err_msg=k)


def _fit(root: Path, cache_dir: str, runs_dir: str | None, **params) -> GNNModel:
    return GNNModel(**{**QUICK, **params}, runs_dir=runs_dir, cache_dir=cache_dir).fit(
        open_collection(find_data_root(root), LAYOUT), progress=False)


def test_same_seed_same_weights_and_resume_after_interrupt(tiny_world: Path, cache_dir: str, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch):
    straight = _fit(tiny_world, cache_dir, str(tmp_path / "a"))
    again = _fit(tiny_world, cache_dir, None)
    _assert_same_weights(straight, again)  # same seed: identical weights
    assert [r["epoch"] for r in straight.history_] == [1, 2, 3] and straight.stopped_ == "all epochs"
    other = _fit(tiny_world, cache_dir, None, seed=1)
    assert any(not np.array_equal(other.weights_[k], straight.weights_[k]) for k in straight.weights_)

    with monkeypatch.context() as m:  # interrupted right after epoch 1's checkpoint and curves are written
        interrupt_after_epoch_1(m)
        with pytest.raises(KeyboardInterrupt):
            _fit(tiny_world, cache_dir, str(tmp_path / "b"))
    ckpt = torch.load(_run_dir(tmp_path / "b") / CHECKPOINT, map_location="cpu", weights_only=False)
    assert ckpt["epoch"] == 1 and [r["epoch"] for r in ckpt["history"]] == [1]

    resumed = _fit(tiny_world, cache_dir, str(tmp_path / "b"))
    assert [r["epoch"] for r in resumed.history_] == [1, 2, 3]
    assert resumed.history_[0] == ckpt["history"][0]  # epoch 1 kept from the checkpoint, not redone
    for mine, theirs in zip(resumed.history_, straight.history_, strict=True):
        timings = ("seconds", "valid_seconds")
        assert {k: v for k, v in mine.items() if k not in timings} == {
            k: v for k, v in theirs.items() if k not in timings}
    _assert_same_weights(resumed, straight)  # as if never interrupted
    assert resumed.best_epoch_ == straight.best_epoch_ and resumed.stopped_ == "all epochs"

    # A finished run re-fitted with the same settings returns at once with what it had.
    finished = _fit(tiny_world, cache_dir, str(tmp_path / "a"))
    assert finished.history_ == straight.history_  # same seconds too: nothing was retrained
    _assert_same_weights(finished, straight)
    # Other settings start the run over.
    changed = _fit(tiny_world, cache_dir, str(tmp_path / "a"), lr=3e-3, epochs=2)
    assert [r["epoch"] for r in changed.history_] == [1, 2]
    ckpt = torch.load(_run_dir(tmp_path / "a") / CHECKPOINT, map_location="cpu", weights_only=False)
    assert ckpt["settings"]["train"]["lr"] == 3e-3 and ckpt["epoch"] == 2


def test_time_budget_stops_and_the_run_continues(tiny_world: Path, cache_dir: str, tmp_path: Path):
    runs = str(tmp_path / "runs")
    first = _fit(tiny_world, cache_dir, runs, max_seconds=0.0)
    # The budget ran out inside epoch 1: that partial epoch is neither recorded nor checkpointed.
    assert first.stopped_ == "time budget" and first.history_ == []
    assert not (tmp_path / "runs" / "gnn" / "layout-nlp-random" / "checkpoint.pt").exists()
    rest = _fit(tiny_world, cache_dir, runs)  # max_seconds is not a setting: the same run goes on
    assert [r["epoch"] for r in rest.history_] == [1, 2, 3] and rest.stopped_ == "all epochs"


def test_time_budget_resume_matches_an_uninterrupted_run(tiny_world: Path, cache_dir: str, tmp_path: Path):
    straight = _fit(tiny_world, cache_dir, None)
    runs = str(tmp_path / "runs")
    _fit(tiny_world, cache_dir, runs, max_seconds=0.0)  # stops after the first of epoch 1's two steps
    _assert_same_weights(_fit(tiny_world, cache_dir, runs), straight)


def test_gst_training_runs_and_predicts(tiny_world: Path, cache_dir: str, monkeypatch: pytest.MonkeyPatch):
    calls = []
    real_gst = gnn_steps.gst_scores

    def counting(net, segments, *args, **kwargs):
        calls.append(len(segments))
        return real_gst(net, segments, *args, **kwargs)

    monkeypatch.setattr(gnn_steps, "gst_scores", counting)
    model = _fit(tiny_world, cache_dir, None, segment_size=50, hops="all", epochs=2, keep_prob=0.5)
    assert calls and min(calls) > 1  # every step went through GST, on graphs of several segments
    assert model.settings_["train"]["segment_size"] == 50
    root = find_data_root(tiny_world)
    for path in list_graphs(root, LAYOUT, Split.VALID):
        graph = load_graph(path, LAYOUT)
        pred = model.predict(graph)
        assert pred.shape == (graph.num_configs,) and np.isfinite(pred).all()


def test_tile_model_fits_and_predicts(tiny_world: Path, cache_dir: str):
    root = find_data_root(tiny_world)
    model = GNNModel(**QUICK, runs_dir=None, cache_dir=cache_dir, join="late").fit(
        open_collection(root, Collection.TILE_XLA), progress=False)
    assert model.settings_["kind"] == "tile"
    for split in (Split.VALID, Split.TEST):
        for path in list_graphs(root, Collection.TILE_XLA, split):
            graph = load_graph(path, Collection.TILE_XLA)
            pred = model.predict(graph)
            assert pred.shape == (graph.num_configs,) and np.isfinite(pred).all()


def test_visit_order_spreads_an_epoch_over_every_graph():
    cfg = DEFAULTS["layout"]  # graphs_per_step 1
    # 12 slots over 6 graphs: each twice; 4 slots over 6 graphs: 4 distinct graphs (a random subset, not the first 4)
    order = visit_order(12, cfg, 6, torch.Generator().manual_seed(0))
    assert sorted(order) == sorted(list(range(6)) * 2)
    subsets = {tuple(sorted(visit_order(4, cfg, 6, torch.Generator().manual_seed(s)))) for s in range(20)}
    assert all(len(set(sub)) == 4 for sub in subsets) and len(subsets) > 1


# -- predict_scores ----------------------------------------------------------------------------------------------


def _layout_graph(configs: int = 10) -> tuple[list, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    data = Data(x=torch.randn(6, 5, generator=g), op=torch.randint(0, 40, (6,), generator=g),
                edge_index=torch.tensor([[0, 1, 2, 3, 4], [1, 2, 3, 4, 5]]), config_node_index=torch.tensor([1, 4]),
                num_nodes=6)
    return make_segments(data), torch.randint(-1, 6, (configs, 2, LAYOUT_CONFIG_SLOTS), generator=g).float()


def test_predict_scores_with_attention_is_seeded():
    torch.manual_seed(0)
    net = RankNet("layout", 5, **{**NET, "attention": True}).train()
    segs, cf = _layout_graph(10)
    a = predict_scores(net, segs, cf, batch=4, orderings=3, seed=0, context="batches")
    b = predict_scores(net, segs, cf, batch=4, orderings=3, seed=0, context="batches")
    assert a.dtype == np.float64 and a.shape == (10,)
    np.testing.assert_array_equal(a, b)  # same seed, same orderings, same scores
    assert not np.allclose(a, predict_scores(net, segs, cf, batch=4, orderings=3, seed=1, context="batches"))
    assert net.training  # the mode is restored
    # One batch holding every config, one ordering: exactly the net's eval-mode scores.
    whole = predict_scores(net, segs, cf, batch=128, orderings=1)
    net.eval()
    with torch.no_grad():
        np.testing.assert_allclose(whole, net(segs, cf).double().numpy(), rtol=1e-6)


def test_predict_scores_without_attention_ignores_batching():
    torch.manual_seed(0)
    net = RankNet("layout", 5, **NET).eval()
    segs, cf = _layout_graph(10)
    whole = predict_scores(net, segs, cf, batch=128)
    np.testing.assert_allclose(predict_scores(net, segs, cf, batch=3, orderings=5, seed=7), whole, rtol=1e-6)
    with torch.no_grad():
        np.testing.assert_allclose(whole, net(segs, cf).double().numpy(), rtol=1e-6)


def test_attention_model_predicts_deterministically(tiny_world: Path, cache_dir: str):
    root = find_data_root(tiny_world)
    model = GNNAttentionModel(**{**QUICK, "epochs": 1}, predict_batch=16, tta=3, runs_dir=None,
                              cache_dir=cache_dir).fit(open_collection(root, LAYOUT), progress=False)
    assert model.settings_["network"]["attention"] is True
    graph = load_graph(list_graphs(root, LAYOUT, Split.VALID)[0], LAYOUT)
    assert graph.num_configs > 16  # several batches, so the orderings matter
    first = model.predict(graph)
    assert np.isfinite(first).all()
    np.testing.assert_array_equal(model.predict(graph), first)
    model._nets.clear()  # rebuilt from the stored weights: still the same scores
    np.testing.assert_array_equal(model.predict(graph), first)


def test_reference_context_scores_stream_like_the_whole_graph(tiny_world: Path, cache_dir: str,
                                                              monkeypatch: pytest.MonkeyPatch):
    """With ``predict_context="reference"`` model.predict draws its reference sets once per graph (seeded, from
    the config count alone, among the first REFERENCE_WINDOW configs: its first block), so streaming the configs
    5 at a time gives the scores of one call over all of them; they differ from the batch orderings' and from
    another seed's references."""
    monkeypatch.setattr(importlib.import_module("models.gnn.infer"), "REFERENCE_WINDOW", 5)
    root = find_data_root(tiny_world)
    model = GNNAttentionModel(**{**QUICK, "epochs": 1}, predict_batch=4, tta=2, predict_context="reference",
                              reference_configs=3, runs_dir=None, cache_dir=cache_dir).fit(open_collection(root, LAYOUT),
                                                                                           progress=False)
    graph = load_graph(list_graphs(root, LAYOUT, Split.VALID)[0], LAYOUT)
    assert graph.num_configs > 8  # several blocks of 5
    net = model.network()
    segments = make_segments(model.prepare(graph))
    whole = predict_scores(net, segments, torch.from_numpy(graph.config_features()), batch=4, orderings=2,
                           seed=model.settings_["train"]["seed"], context="reference", reference_configs=None)
    monkeypatch.setattr(importlib.import_module("models.gnn.model"), "PREDICT_BLOCK", 5)
    np.testing.assert_allclose(model.predict(graph), whole, rtol=1e-6, atol=1e-7)
    batches = predict_scores(net, segments, torch.from_numpy(graph.config_features()), batch=4, orderings=2,
                             seed=model.settings_["train"]["seed"], context="batches")
    assert not np.allclose(batches, whole)
    assert not np.allclose(predict_scores(net, segments, torch.from_numpy(graph.config_features()), batch=4,
                                          orderings=2, seed=model.settings_["train"]["seed"] + 1, context="reference",
                                          reference_configs=None), whole)
    with pytest.raises(ValueError, match="predict_context must be 'reference' or 'batches'"):
        GNNAttentionModel(predict_context="ordered")


def test_a_checkpoint_from_before_valid_seconds_still_resumes(tiny_world: Path, cache_dir: str, tmp_path: Path):
    """Checkpoints written before curves had ``valid_seconds`` are read (the column NaN), not set aside."""
    straight = _fit(tiny_world, cache_dir, str(tmp_path / "runs"))
    path = _run_dir(tmp_path / "runs") / CHECKPOINT
    ckpt = torch.load(path, map_location="cpu", weights_only=True)
    for row in ckpt["history"]:
        del row["valid_seconds"]
    torch.save(ckpt, path)
    again = _fit(tiny_world, cache_dir, str(tmp_path / "runs"))  # a finished run: returned at once
    assert path.exists() and not path.with_name(CHECKPOINT + ".corrupt").exists()
    assert [r["epoch"] for r in again.history_] == [r["epoch"] for r in straight.history_]
    assert all(math.isnan(r["valid_seconds"]) for r in again.history_)
    _assert_same_weights(again, straight)
