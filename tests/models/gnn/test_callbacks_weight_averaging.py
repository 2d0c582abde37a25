"""Stochastic weight averaging (``swa_epochs``) in the GNN training loop, on hand-built layout graphs: the average of
the last epochs' weights, kept exactly when it scores at least as well as the best epoch (or there is no valid
metric), nothing changed when off, and resumed from the checkpoint as if never interrupted."""

from __future__ import annotations

import importlib
import math
import types
from pathlib import Path

import pytest
import torch

from models.gnn.config import GNNConfig
from models.gnn.runs import CHECKPOINT
from models.gnn.steps import Item
from models.gnn.train import TrainResult, train
from tests.models.gnn.test_trainer import tiny_item

# ``models.gnn.train`` as an attribute is the re-exported function; the module itself, for monkeypatching.
gnn_train = importlib.import_module("models.gnn.train")

F = 5
# Two train graphs at one graph per step and one visit per epoch: two steps per epoch.
BASE = dict(kind="layout", hidden=8, layers=2, lr=1e-2, loss="hinge", epochs=4, configs_per_graph=8,
            steps_per_graph=1, patience=10, hops="all", train_configs="all", num_features=F, data_key="swa-test")


TRAIN = [tiny_item("a", 0), tiny_item("b", 1)]
VALID = [tiny_item("v", 2), tiny_item("w", 3)]


def _train(valid: list[Item], run_dir: Path | None = None, max_seconds: float | None = None,
           **settings) -> TrainResult:
    cfg = GNNConfig.of(**{**BASE, **settings})
    return train(cfg, TRAIN, valid, run_dir=run_dir, device="cpu", progress=False, max_seconds=max_seconds)


def _spy_evaluate(monkeypatch: pytest.MonkeyPatch, metrics: list[float] | None = None) -> list[dict]:
    """Record the weights of every network ``evaluate`` scores (once per epoch, then the average); with
    ``metrics``, return those in turn instead of scoring."""
    seen: list[dict] = []
    real = gnn_train.evaluate

    def spy(net, items, cfg, device, **kwargs):
        seen.append({k: v.detach().clone() for k, v in net.state_dict().items()})
        return metrics[len(seen) - 1] if metrics is not None else real(net, items, cfg, device, **kwargs)

    monkeypatch.setattr(gnn_train, "evaluate", spy)
    return seen


def _mean(states: list[dict]) -> dict[str, torch.Tensor]:
    return {k: torch.stack([s[k].double() for s in states]).mean(0) for k in states[0]}


def _assert_equal(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k


def _curves(history: list[dict[str, float]]) -> list[tuple]:
    """The history without the seconds, NaN metrics comparable."""
    return [(r["epoch"], r["train_loss"], repr(r["valid_metric"]), r["lr"]) for r in history]


def _differs(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return any(not torch.equal(a[k], b[k]) for k in a)


def test_without_valid_items_the_mean_of_the_last_epochs_is_kept(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    seen = _spy_evaluate(monkeypatch)
    result = _train([], run_dir=tmp_path, epochs=5, swa_epochs=3)
    assert len(seen) == 6  # one per epoch, then the average
    epochs, probe = seen[:5], seen[5]
    assert result.swa_used and math.isnan(result.swa_metric)
    assert result.best_epoch == 5 and result.stopped == "all epochs" and len(result.history) == 5
    expected = _mean(epochs[2:])  # epochs 3, 4 and 5
    for k, v in result.state.items():
        torch.testing.assert_close(v.double(), expected[k], rtol=1e-6, atol=1e-7)
    _assert_equal(probe, result.state)  # the average is what was scored
    assert _differs(result.state, epochs[-1])
    ckpt = torch.load(tmp_path / CHECKPOINT, weights_only=True)
    assert len(ckpt["swa_states"]) == 3 and ckpt["swa_used"] is True and math.isnan(ckpt["swa_metric"])
    for kept, epoch in zip(ckpt["swa_states"], epochs[2:], strict=True):
        _assert_equal(kept, epoch)
    # One epoch "averaged" is the last epoch: what training without averaging keeps when there is no valid metric.
    _assert_equal(_train([], epochs=5, swa_epochs=1).state, _train([], epochs=5).state)


# (valid metric per epoch, patience, the average's metric, kept?, best epoch, epochs run); swa_epochs=2.
CASES = {
    "better": ([0.1, 0.5, 0.3, 0.2], 10, 0.6, True, 2, 4),
    "equal": ([0.1, 0.5, 0.3, 0.2], 10, 0.5, True, 2, 4),
    "within 1e-6": ([0.1, 0.5, 0.3, 0.2], 10, 0.5 - 5e-7, True, 2, 4),
    "worse": ([0.1, 0.5, 0.3, 0.2], 10, 0.5 - 2e-6, False, 2, 4),
    "early stopping, worse": ([0.5, 0.1, 0.2], 2, 0.4, False, 1, 3),
    "early stopping, better": ([0.5, 0.1, 0.2], 2, 0.7, True, 1, 3),
}


@pytest.mark.parametrize("case", CASES)
def test_the_average_is_kept_exactly_when_it_scores_at_least_the_best_epoch(
        case: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    metrics, patience, average_metric, kept, best, ran = CASES[case]
    seen = _spy_evaluate(monkeypatch, [*metrics, average_metric])
    result = _train(VALID, run_dir=tmp_path, swa_epochs=2, patience=patience)
    assert len(seen) == ran + 1 and len(result.history) == ran
    assert [r["valid_metric"] for r in result.history] == metrics  # the average adds no row
    assert result.best_epoch == best and result.best_metric == metrics[best - 1]
    assert result.swa_used is kept and result.swa_metric == average_metric
    average, best_weights = seen[ran], seen[best - 1]
    assert _differs(average, best_weights)
    _assert_equal(result.state, average if kept else best_weights)
    assert result.stopped == ("all epochs" if ran == 4 else "early stopping (no gain for 2 epochs)")
    # Re-run, the finished run returns the same outcome at once, scoring nothing.
    again = _train(VALID, run_dir=tmp_path, swa_epochs=2, patience=patience)
    assert len(seen) == ran + 1
    assert (again.swa_used, again.swa_metric, again.history) == (kept, average_metric, result.history)
    _assert_equal(again.state, result.state)


def test_the_choice_on_a_real_valid_metric(monkeypatch: pytest.MonkeyPatch):
    seen = _spy_evaluate(monkeypatch)
    result = _train(VALID, epochs=5, swa_epochs=3)
    assert len(seen) == 6 and not math.isnan(result.swa_metric)
    assert result.swa_used == (result.swa_metric >= result.best_metric - 1e-6)
    _assert_equal(result.state, seen[5] if result.swa_used else seen[result.best_epoch - 1])


@pytest.mark.parametrize("valid", [VALID, []], ids=["valid", "no valid"])
def test_off_changes_nothing(valid: list[Item], monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    seen = _spy_evaluate(monkeypatch)
    off = _train(valid, run_dir=tmp_path, swa_epochs=0)
    assert len(seen) == 4  # once per epoch: no average scored
    assert off.swa_metric is None and off.swa_used is False
    _assert_equal(off.state, seen[off.best_epoch - 1])
    if not valid:
        assert off.best_epoch == 4
    ckpt = torch.load(tmp_path / CHECKPOINT, weights_only=True)
    assert (ckpt["swa_states"], ckpt["swa_metric"], ckpt["swa_used"]) == ([], None, False)
    unset = GNNConfig.of(**BASE)
    default = train(unset, TRAIN, valid, device="cpu", progress=False)
    _assert_equal(default.state, off.state)
    assert _curves(default.history) == _curves(off.history)


def _step_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """Training's clock reads one second per optimiser step taken."""
    steps: list[None] = []
    real_step = gnn_train.training_step

    def counting(*args, **kwargs):
        steps.append(None)
        return real_step(*args, **kwargs)

    monkeypatch.setattr(gnn_train, "training_step", counting)
    monkeypatch.setattr(gnn_train, "time", types.SimpleNamespace(perf_counter=lambda: float(len(steps))))


@pytest.mark.parametrize("valid", [VALID, []], ids=["valid", "no valid"])
def test_a_run_cut_by_the_time_budget_resumes_as_if_never_cut(valid: list[Item], monkeypatch: pytest.MonkeyPatch,
                                                             tmp_path: Path):
    straight = _train(valid, epochs=5, swa_epochs=3)
    with monkeypatch.context() as m:
        _step_clock(m)
        seen = _spy_evaluate(m)
        # Two steps per epoch: step 5 (of epoch 3) is past 4.5 s, so epochs 1 and 2 are finished.
        cut = _train(valid, run_dir=tmp_path, max_seconds=4.5, epochs=5, swa_epochs=3)
    assert cut.stopped == "time budget" and len(cut.history) == 2
    assert cut.swa_metric is not None and len(seen) == 3  # the two epochs' average, scored
    if not valid:
        assert cut.swa_used
        _assert_equal(cut.state, seen[2])
        for k, v in cut.state.items():
            torch.testing.assert_close(v.double(), _mean(seen[:2])[k], rtol=1e-6, atol=1e-7)
    ckpt = torch.load(tmp_path / CHECKPOINT, weights_only=True)
    assert ckpt["epoch"] == 2 and len(ckpt["swa_states"]) == 2 and ckpt["stopped"] == ""
    resumed = _train(valid, run_dir=tmp_path, epochs=5, swa_epochs=3)
    assert resumed.stopped == "all epochs" == straight.stopped
    assert (resumed.swa_used, repr(resumed.swa_metric)) == (straight.swa_used, repr(straight.swa_metric))
    assert resumed.best_epoch == straight.best_epoch
    _assert_equal(resumed.state, straight.state)
    finished = _train(valid, run_dir=tmp_path, epochs=5, swa_epochs=3)
    assert repr(finished.history) == repr(resumed.history)  # same seconds too: nothing was retrained
    assert (finished.swa_used, repr(finished.swa_metric)) == (resumed.swa_used, repr(resumed.swa_metric))
    _assert_equal(finished.state, straight.state)


def test_a_budget_spent_inside_the_first_epoch_averages_nothing():
    cut = _train([], max_seconds=0.0, swa_epochs=3)
    assert cut.stopped == "time budget" and cut.history == []
    assert cut.swa_metric is None and cut.swa_used is False


@pytest.mark.parametrize(("bad", "why"), [(-1, "train.swa_epochs must be 0 to 100,000; got -1"),
                                          (1.5, "train.swa_epochs takes int, not float 1.5")])
def test_swa_epochs_must_be_a_count(bad, why):
    with pytest.raises(ValueError, match=why):
        GNNConfig.of(**{**BASE, "swa_epochs": bad})
