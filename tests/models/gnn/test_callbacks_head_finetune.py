"""Head fine-tuning after Graph Segment Training (``gst_finetune_epochs``, the GST paper's "+EFD"), on hand-built
graphs cut into two segments: only the head learns, on every segment's fresh sum; the fine-tuned weights are kept
exactly when they score at least as well as those before; nothing changes when off or without GST; a finished run
re-run returns the same weights; the time budget skips or drops the fine-tuning."""

from __future__ import annotations

import importlib
import math
import os
import socket
import types
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.multiprocessing as mp
from torch_geometric.data import Data

from models.gnn import distributed
from models.gnn.config import GNNConfig
from models.gnn.gst import HistoryTable
from models.gnn.net import LAYOUT_CONFIG_SLOTS, TILE_CONFIG_COLUMNS, make_segments
from models.gnn.runs import CHECKPOINT
from models.gnn.steps import FreshHeadScores, Item, StepTable
from models.gnn.train import TrainResult, train

# ``models.gnn.train`` as an attribute is the re-exported function; the module itself, for monkeypatching.
gnn_train = importlib.import_module("models.gnn.train")
gnn_callbacks = importlib.import_module("models.gnn.callbacks")

F, NODES, CONFIGS, SEGMENT = 5, 8, 12, 4  # two segments per graph: nodes [0, 4) and [4, 8)
# Two train graphs at one graph per step and one visit per epoch: two steps per epoch (and per fine-tuning epoch).
BASE = dict(kind="layout", hidden=8, layers=2, lr=1e-2, loss="hinge", epochs=3, configs_per_graph=8,
            steps_per_graph=1, patience=10, hops="all", train_configs="all", num_features=F, data_key="efd-test",
            segment_size=SEGMENT)
TILE = dict(BASE, kind="tile", loss="listmle", attention=True, join="late")  # with a late attention before the head


def _item(key: str, seed: int, kind: str = "layout") -> Item:
    """An 8-node chain (layout: configurable nodes 2 and 5, one per segment) with 12 configs of distinct
    runtimes."""
    g = torch.Generator().manual_seed(seed)
    src = torch.arange(NODES - 1)
    data = Data(x=torch.randn(NODES, F, generator=g), op=torch.randint(0, 40, (NODES,), generator=g),
                edge_index=torch.stack([src, src + 1]), num_nodes=NODES)
    if kind == "layout":
        data.config_node_index = torch.tensor([2, 5])
        config_feat = torch.randint(-1, 6, (CONFIGS, 2, LAYOUT_CONFIG_SLOTS), generator=g).float()
    else:
        config_feat = torch.rand(CONFIGS, TILE_CONFIG_COLUMNS, generator=g) * 8
    y = torch.randperm(CONFIGS, generator=g).double() * 100 + 1000
    return Item(key, make_segments(data, SEGMENT), config_feat, y)


TRAIN = [_item("a", 0), _item("b", 1)]
VALID = [_item("v", 2), _item("w", 3)]
TILE_TRAIN = [_item("a", 0, "tile"), _item("b", 1, "tile")]


def _train(valid: list[Item], run_dir: Path | None = None, max_seconds: float | None = None,
           items: list[Item] = TRAIN, base: dict = BASE, **settings) -> TrainResult:
    cfg = GNNConfig.of(**{**base, **settings})
    return train(cfg, items, valid, run_dir=run_dir, device="cpu", progress=False, max_seconds=max_seconds)


def _spy(monkeypatch: pytest.MonkeyPatch, metrics: list[float] | None = None) -> tuple[list[dict], list[None]]:
    """Record the weights of every network ``evaluate`` scores (with ``metrics``, return those in turn instead of
    scoring) and count the optimiser steps; training's clock reads one second per step and per scoring."""
    seen: list[dict] = []
    steps: list[None] = []
    real_evaluate, real_step = gnn_train.evaluate, gnn_train.training_step

    def evaluate(net, items, cfg, device, **kwargs):
        seen.append({k: v.detach().clone() for k, v in net.state_dict().items()})
        return metrics[len(seen) - 1] if metrics is not None else real_evaluate(net, items, cfg, device, **kwargs)

    def training_step(*args, **kwargs):
        steps.append(None)
        return real_step(*args, **kwargs)

    monkeypatch.setattr(gnn_train, "evaluate", evaluate)
    monkeypatch.setattr(gnn_train, "training_step", training_step)
    monkeypatch.setattr(gnn_train, "time", types.SimpleNamespace(perf_counter=lambda: float(len(seen) + len(steps))))
    return seen, steps


def _is_head(name: str) -> bool:
    return name.startswith(("head.", "late_attention."))


def _assert_equal(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k


def _assert_only_the_head_differs(tuned: dict[str, torch.Tensor], before: dict[str, torch.Tensor]) -> None:
    assert tuned.keys() == before.keys()
    for k in tuned:
        assert torch.equal(tuned[k], before[k]) != _is_head(k), k


def test_the_forward_is_the_full_graph_with_gradients_into_the_head_alone():
    cfg = GNNConfig.of(**BASE)
    torch.manual_seed(0)
    net = cfg.make_net().eval()
    item, cf = TRAIN[0], TRAIN[0].config_feat[:6]
    assert len(item.segments) == 2
    scores = FreshHeadScores(net)(item, cf, torch.arange(6), cfg, StepTable(HistoryTable()),
                                              np.random.default_rng(0))
    assert torch.equal(scores, net(item.segments, cf))  # every segment, fresh: the full (cut) graph's scores
    scores.sum().backward()
    assert {k for k, p in net.named_parameters() if p.grad is not None} == \
        {k for k, _ in net.named_parameters() if _is_head(k)}


@pytest.mark.parametrize("kind", ["layout", "tile"])
def test_only_the_head_is_fine_tuned(kind: str, monkeypatch: pytest.MonkeyPatch):
    items, base = (TRAIN, BASE) if kind == "layout" else (TILE_TRAIN, TILE)
    seen, steps = _spy(monkeypatch)
    result = _train([], items=items, base=base, gst_finetune_epochs=2)  # no valid metric: the fine-tuning is kept
    assert len(steps) == 3 * 2 + 2 * 2  # 3 epochs of training, 2 of fine-tuning, 2 steps each
    assert len(seen) == 4  # every epoch, then the fine-tuned network
    assert result.finetune_used and math.isnan(result.finetune_metric)
    assert result.best_epoch == 3 and result.stopped == "all epochs" and len(result.history) == 3
    _assert_equal(result.state, seen[3])  # what was scored is what is returned
    _assert_only_the_head_differs(result.state, seen[2])  # from the last epoch's weights, every head tensor moved
    if kind == "tile":
        assert any(k.startswith("late_attention.") for k in result.state)
    again = _train([], items=items, base=base, gst_finetune_epochs=2)  # seeded: the same weights again
    _assert_equal(again.state, result.state)


# (valid metric per epoch, swa_epochs, the average's metric, the fine-tuned metric, fine-tuning kept?); 3 epochs.
CASES = {
    "better": ([0.1, 0.5, 0.3], 0, None, 0.6, True),
    "equal": ([0.1, 0.5, 0.3], 0, None, 0.5, True),
    "within 1e-6": ([0.1, 0.5, 0.3], 0, None, 0.5 - 5e-7, True),
    "worse": ([0.1, 0.5, 0.3], 0, None, 0.5 - 2e-6, False),
    "after the average, worse than it": ([0.1, 0.5, 0.3], 2, 0.6, 0.55, False),
    "after the average, as good": ([0.1, 0.5, 0.3], 2, 0.6, 0.6, True),
    "after the best epoch, the average worse": ([0.1, 0.5, 0.3], 2, 0.4, 0.45, False),
}


@pytest.mark.parametrize("case", CASES)
def test_the_fine_tuning_is_kept_exactly_when_it_scores_at_least_as_well(case: str, monkeypatch: pytest.MonkeyPatch,
                                                                         tmp_path: Path):
    metrics, swa, average_metric, tuned_metric, kept = CASES[case]
    scripted = [*metrics, *([average_metric] if swa else []), tuned_metric]
    seen, _ = _spy(monkeypatch, scripted)
    result = _train(VALID, run_dir=tmp_path, gst_finetune_epochs=1, swa_epochs=swa)
    assert len(seen) == len(scripted)
    assert result.best_epoch == 2 and result.best_metric == 0.5  # the best epoch's, whatever is kept
    assert result.finetune_metric == tuned_metric and result.finetune_used is kept
    # The fine-tuning starts from what would be returned without it: the average when kept, else the best epoch.
    before = seen[3] if swa and result.swa_used else seen[1]
    assert result.swa_used is (swa > 0 and average_metric >= 0.5)
    tuned = seen[-1]
    _assert_only_the_head_differs(tuned, before)
    _assert_equal(result.state, tuned if kept else before)
    ckpt = torch.load(tmp_path / CHECKPOINT, weights_only=True)
    assert (ckpt["finetune_metric"], ckpt["finetune_used"]) == (tuned_metric, kept)
    _assert_equal(ckpt["finetune_state"], tuned if kept else {})
    # Re-run, the finished run returns the same outcome at once, training and scoring nothing.
    seen.clear()
    again = _train(VALID, run_dir=tmp_path, gst_finetune_epochs=1, swa_epochs=swa)
    assert seen == []
    assert (again.finetune_used, again.finetune_metric, again.swa_used) == (kept, tuned_metric, result.swa_used)
    _assert_equal(again.state, result.state)


@pytest.mark.parametrize("settings", [dict(gst_finetune_epochs=0), dict(segment_size=None, gst_finetune_epochs=0)],
                         ids=["off", "without GST"])
@pytest.mark.parametrize("valid", [VALID, []], ids=["valid", "no valid"])
def test_off_changes_nothing(settings: dict, valid: list[Item], monkeypatch: pytest.MonkeyPatch,
                                            tmp_path: Path):
    with monkeypatch.context() as m:
        seen, steps = _spy(m)
        result = _train(valid, run_dir=tmp_path, **settings)
    assert len(steps) == 3 * 2 and len(seen) == 3  # training alone
    assert result.finetune_metric is None and result.finetune_used is False
    _assert_equal(result.state, seen[result.best_epoch - 1])
    ckpt = torch.load(tmp_path / CHECKPOINT, weights_only=True)
    assert (ckpt["finetune_state"], ckpt["finetune_metric"], ckpt["finetune_used"]) == ({}, None, False)
    unset = {k: v for k, v in {**BASE, **settings}.items() if k != "gst_finetune_epochs"}
    today = train(GNNConfig.of(**unset), TRAIN, valid, device="cpu", progress=False)
    _assert_equal(today.state, result.state)
    assert [(r["train_loss"], repr(r["valid_metric"])) for r in today.history] == \
        [(r["train_loss"], repr(r["valid_metric"])) for r in result.history]


def test_a_finished_run_re_run_returns_the_fine_tuned_weights_without_training(monkeypatch: pytest.MonkeyPatch,
                                                                              tmp_path: Path):
    first = _train([], run_dir=tmp_path, gst_finetune_epochs=2)
    assert first.finetune_used
    ckpt = torch.load(tmp_path / CHECKPOINT, weights_only=True)
    _assert_only_the_head_differs(ckpt["finetune_state"], ckpt["best_state"])
    seen, steps = _spy(monkeypatch)
    again = _train([], run_dir=tmp_path, gst_finetune_epochs=2)
    assert steps == [] and seen == []
    assert again.finetune_used and math.isnan(again.finetune_metric)
    assert repr(again.history) == repr(first.history)
    _assert_equal(again.state, first.state)


# max_seconds on a clock of one second per step and per scoring: epoch 1's steps at 1 and 2, its scoring at 3 (an
# epoch: 3 s); epoch 2 begins when 3 s are left, its steps at 4 and 5, its scoring at 6; the fine-tuning (forecast:
# 2 epochs of 2 steps, then a scoring: 5 s) begins when 5 s are left, its first step at 7. "Forecast too low": the
# forecasts read 0 s, so the fine-tuning begins and runs out of time during it.
BUDGETS = {"the second epoch would not fit": (5.5, "time budget", 2, False),
           "spent when training ends": (6.0, "all epochs", 4, False),
           "the fine-tuning would not fit": (10.5, "all epochs", 4, False),
           "forecast too low, ends during the fine-tuning": (6.5, "all epochs", 5, True),
           "spent in the first epoch": (0.0, "time budget", 1, False)}


@pytest.mark.parametrize("budget", BUDGETS)
def test_the_time_budget_skips_or_drops_the_fine_tuning(budget: str, monkeypatch: pytest.MonkeyPatch,
                                                        tmp_path: Path):
    max_seconds, stopped, ran, no_forecast = BUDGETS[budget]
    with monkeypatch.context() as m:
        seen, steps = _spy(m)
        if no_forecast:
            m.setattr(gnn_callbacks, "epoch_seconds", lambda history: 0.0)
        result = _train(VALID, run_dir=tmp_path, max_seconds=max_seconds, epochs=2, gst_finetune_epochs=2)
    assert len(steps) == ran and result.stopped == stopped
    assert result.finetune_metric is None and result.finetune_used is False
    assert len(seen) == len(result.history)  # the fine-tuned network never scored
    before = seen[result.best_epoch - 1] if result.history else result.state
    _assert_equal(result.state, before)
    GNNConfig.of(**BASE).make_net().load_state_dict(result.state)  # a whole network's weights
    if stopped == "all epochs":  # finished: re-run, the same weights at once
        seen, steps = _spy(monkeypatch)
        again = _train(VALID, run_dir=tmp_path, epochs=2, gst_finetune_epochs=2)
        assert steps == [] and seen == [] and again.finetune_used is False
        _assert_equal(again.state, result.state)


# One train graph per rank at every step, dropout on (each slot seeded): the fine-tuning trains as training does.
TWO_RANKS = dict(graphs_per_step=2, dropout=0.3, gst_finetune_epochs=2)


def _rank(rank: int, port: int, out: str) -> None:
    """One of two ranks, in the environment torchrun would give it."""
    os.environ.update(RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port))
    torch.set_num_threads(1)
    with distributed.process_group(torch.device("cpu"), backend="gloo", timeout=60):
        result = _train(VALID, **TWO_RANKS)
    torch.save((result.state, result.finetune_metric, result.finetune_used), Path(out) / f"rank-{rank}.pt")


@pytest.mark.slow
def test_two_processes_fine_tune_as_one(tmp_path: Path):
    one = _train(VALID, **TWO_RANKS)
    assert one.finetune_metric is not None  # fine-tuned to the end, then scored
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    context = mp.start_processes(_rank, args=(port, str(tmp_path)), nprocs=2, join=False, start_method="spawn")
    for process in context.processes:
        process.join(120)
    assert [p.exitcode for p in context.processes] == [0, 0]
    (state, metric, used), (state_1, metric_1, used_1) = (torch.load(tmp_path / f"rank-{r}.pt", weights_only=True)
                                                          for r in (0, 1))
    _assert_equal(state_1, state)  # every rank ends with the same weights
    assert (metric_1, used_1) == (metric, used) == (pytest.approx(one.finetune_metric, abs=1e-3), one.finetune_used)
    for k in state:  # those of one process, within the rounding of the gradients' mean (see test_distributed.py)
        torch.testing.assert_close(state[k], one.state[k], rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize(("bad", "why"), [(-1, "train.gst_finetune_epochs must be 0 to 100,000; got -1"),
                                          (1.5, "train.gst_finetune_epochs takes int, not float 1.5")])
def test_gst_finetune_epochs_must_be_a_count(bad, why):
    with pytest.raises(ValueError, match=why):
        GNNConfig.of(**{**BASE, "gst_finetune_epochs": bad})


def test_gst_finetune_epochs_needs_gst():
    with pytest.raises(ValueError, match="set train.segment_size too"):
        GNNConfig.of(**{**BASE, "segment_size": None, "gst_finetune_epochs": 2})
