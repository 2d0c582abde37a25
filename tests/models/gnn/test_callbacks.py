"""Each callback of the GNN training loop (models/gnn/callbacks.py) on its own, on a tiny trainer whose state the
test sets: early stopping, weight averaging, the head fine-tuning, the time budget, the checkpoint, the curves, the
distributed hooks, and the default list. Each hook is called as the loop calls it, with the trainer's state, its
control and the trainer itself. Whole runs with each are in test_callbacks_weight_averaging.py,
test_callbacks_head_finetune.py, test_callbacks_time_budget.py and tests/reliability/test_checkpoints.py; that the
callbacks know the trainer only through that view is in test_callbacks_view.py."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest
import torch

from models.gnn import callbacks as cb
from models.gnn.callbacks import (
    TIME_BUDGET_STOP,
    Checkpoint,
    Curves,
    DistributedSync,
    EarlyStopping,
    HeadFinetune,
    TimeBudget,
    WeightAveraging,
    default_callbacks,
    names,
)
from models.gnn.runs import CHECKPOINT, CURVES_CSV, CURVES_PNG, SETTINGS_FILE
from models.gnn.train import Trainer
from tests.models.gnn.test_trainer import CFG, tiny_trainer


def _row(epoch: int, metric: float, seconds: float = 0.0, valid_seconds: float = 0.0) -> dict[str, float]:
    return {"epoch": epoch, "train_loss": 1.0, "valid_metric": metric, "lr": 0.01, "seconds": seconds,
            "valid_seconds": valid_seconds}


def _finish_epoch(trainer: Trainer, metric: float, **times: float) -> None:
    trainer.state.epoch += 1
    trainer.state.history.append(_row(trainer.state.epoch, metric, **times))


def _same_state(a: object, b: object) -> bool:
    """Equal, tensors compared by value (a :class:`TrainState` holds state dicts)."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and torch.equal(a, b)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same_state(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same_state(x, y) for x, y in zip(a, b, strict=True))
    if hasattr(a, "as_dict") and hasattr(b, "as_dict"):
        return _same_state(a.as_dict(), b.as_dict())
    return a == b


def _weights(value: float, like: Trainer) -> dict[str, torch.Tensor]:
    return {k: torch.full_like(v, value) for k, v in like.snapshot().items()}


# -- EarlyStopping ----------------------------------------------------------------------------------------------

def test_early_stopping_keeps_the_best_epoch_and_stops_after_patience_epochs():
    trainer, stopping = tiny_trainer(), EarlyStopping(patience=2)
    for metric, best_epoch, bad in [(0.1, 1, 0), (0.3, 2, 0), (0.3 + 5e-7, 2, 1), (0.2, 2, 2)]:
        _finish_epoch(trainer, metric)
        stopping.on_epoch_end(trainer.state, trainer.control, trainer)
        assert (trainer.state.best_epoch, trainer.state.bad_epochs) == (best_epoch, bad)
        assert trainer.control.stop_reason == ("" if bad < 2 else "early stopping (no gain for 2 epochs)")
        assert trainer.control.should_training_stop is (bad >= 2) and trainer.state.stopped == ""  # until settled
    assert trainer.state.best_metric == 0.3  # a gain within 1e-6 is no gain


def test_early_stopping_copies_the_best_weights_when_they_are_best():
    trainer, stopping = tiny_trainer(), EarlyStopping(patience=5)
    _finish_epoch(trainer, 0.5)
    stopping.on_epoch_end(trainer.state, trainer.control, trainer)
    kept = trainer.state.best_state
    trainer.net.load_state_dict(_weights(3.0, trainer))
    _finish_epoch(trainer, 0.1)  # worse: the best weights stay those of epoch 1
    stopping.on_epoch_end(trainer.state, trainer.control, trainer)
    assert trainer.state.best_state is kept
    assert all(not torch.equal(kept[k], v) for k, v in trainer.snapshot().items() if v.numel())


def test_without_a_valid_metric_every_epoch_counts_as_the_best():
    trainer, stopping = tiny_trainer(), EarlyStopping(patience=1)
    for _ in range(3):
        _finish_epoch(trainer, math.nan)
        stopping.on_epoch_end(trainer.state, trainer.control, trainer)
    assert (trainer.state.best_epoch, trainer.state.bad_epochs, trainer.control.stop_reason) == (3, 0, "")
    assert trainer.state.best_metric == -math.inf


# -- WeightAveraging --------------------------------------------------------------------------------------------

def test_weight_averaging_keeps_the_last_epochs_weights():
    trainer, swa = tiny_trainer(), WeightAveraging(epochs=2)
    for value in (1.0, 2.0, 4.0):
        trainer.net.load_state_dict(_weights(value, trainer))
        swa.on_epoch_end(trainer.state, trainer.control, trainer)
    kept = [next(iter(s.values())).flatten()[0].item() for s in trainer.state.swa_states]
    assert kept == [2.0, 4.0]


@pytest.mark.parametrize(("average_scores", "used"), [(0.5, True), (0.5 - 5e-7, True), (0.4, False),
                                                      (math.nan, True)])
def test_weight_averaging_returns_the_average_when_it_scores_as_well(average_scores: float, used: bool,
                                                                   monkeypatch: pytest.MonkeyPatch):
    trainer, swa = tiny_trainer(), WeightAveraging(epochs=2)
    trainer.state.swa_states = [_weights(1.0, trainer), _weights(3.0, trainer)]
    trainer.state.best_metric, trainer.control.weights = 0.5, trainer.state.best_state
    scored: list[dict[str, torch.Tensor]] = []
    monkeypatch.setattr(trainer, "evaluate", lambda net: scored.append(net.state_dict()) or average_scores)
    swa.on_settle(trainer.state, trainer.control, trainer)
    assert all(torch.all(v == 2.0) for k, v in scored[0].items() if v.is_floating_point())  # the average scored
    assert trainer.state.swa_used is used
    assert trainer.state.swa_metric is average_scores or trainer.state.swa_metric == average_scores
    expected = 2.0 if used else None
    if expected is None:
        assert trainer.control.weights is trainer.state.best_state
    else:
        assert all(torch.all(v == 2.0) for v in trainer.control.weights.values() if v.is_floating_point())


def test_weight_averaging_without_finished_epochs_keeps_the_best():
    trainer, swa = tiny_trainer(), WeightAveraging(epochs=3)
    trainer.control.weights = trainer.state.best_state
    swa.on_settle(trainer.state, trainer.control, trainer)
    assert (trainer.state.swa_metric, trainer.state.swa_used) == (None, False)
    assert trainer.control.weights is trainer.state.best_state


# -- HeadFinetune -----------------------------------------------------------------------------------------------

GST = CFG.with_(segment_size=3, gst_finetune_epochs=2)


def test_head_finetune_trains_the_head_alone(monkeypatch: pytest.MonkeyPatch):
    trainer = tiny_trainer(cfg=GST)
    trainer.state.best_metric, trainer.control.weights = 0.0, trainer.state.best_state
    monkeypatch.setattr(trainer, "evaluate", lambda net: 1.0)  # the fine-tuned head scores higher: kept
    steps: list[int] = []
    real = trainer.run_step
    monkeypatch.setattr(trainer, "run_step", lambda *a, **k: steps.append(1) or real(*a, **k))
    before = trainer.control.weights
    HeadFinetune(epochs=2).on_settle(trainer.state, trainer.control, trainer)
    assert len(steps) == 2 * trainer.steps_per_epoch
    assert trainer.state.finetune_used and trainer.state.finetune_metric == 1.0
    assert trainer.state.finetune_state is trainer.control.weights
    changed = {k for k in before if not torch.equal(before[k], trainer.control.weights[k])}
    assert changed and all(k.startswith(("head.", "late_attention.")) for k in changed)


def test_head_finetune_is_dropped_when_it_scores_lower(monkeypatch: pytest.MonkeyPatch):
    trainer = tiny_trainer(cfg=GST)
    trainer.state.best_metric, trainer.control.weights = 0.5, trainer.state.best_state
    monkeypatch.setattr(trainer, "evaluate", lambda net: 0.4)
    HeadFinetune(epochs=1).on_settle(trainer.state, trainer.control, trainer)
    assert (trainer.state.finetune_used, trainer.state.finetune_metric) == (False, 0.4)
    assert trainer.control.weights is trainer.state.best_state and trainer.state.finetune_state == {}


def test_head_finetune_is_skipped_when_the_budget_cannot_hold_it(monkeypatch: pytest.MonkeyPatch):
    trainer = tiny_trainer(cfg=GST)
    trainer.state.history = [_row(1, 0.1, seconds=10.0, valid_seconds=2.0)]
    trainer.control.weights = trainer.state.best_state
    asked: list[float] = []
    monkeypatch.setattr(trainer.control, "spent", lambda reserve=0.0: asked.append(reserve) or True)
    HeadFinetune(epochs=3).on_settle(trainer.state, trainer.control, trainer)
    assert asked == [3 * (10.0 - 2.0) + 2.0]  # three epochs of training steps and one validation pass
    assert (trainer.state.finetune_used, trainer.state.finetune_metric) == (False, None)
    assert trainer.control.weights is trainer.state.best_state


# -- TimeBudget -------------------------------------------------------------------------------------------------

class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _budgeted(max_seconds: float, keep_free=None) -> tuple[Trainer, TimeBudget, _Clock]:
    trainer, budget, clock = tiny_trainer(), TimeBudget(max_seconds, keep_free), _Clock()
    trainer.clock = clock  # type: ignore[method-assign]
    budget.on_train_begin(trainer.state, trainer.control, trainer)
    trainer.started = clock.now
    return trainer, budget, clock


def test_the_budget_does_not_begin_an_epoch_that_cannot_end_in_time():
    trainer, budget, clock = _budgeted(25.0)
    _finish_epoch(trainer, 0.1, seconds=10.0, valid_seconds=3.0)
    clock.now += 14.0  # 11 s left, an epoch takes 10: begun
    budget.on_epoch_begin(trainer.state, trainer.control, trainer, 2)
    assert trainer.control.stop_reason == "" and budget.reserve == 3.0
    clock.now += 2.0  # 9 s left: not begun
    budget.on_epoch_begin(trainer.state, trainer.control, trainer, 2)
    assert trainer.control.stop_reason == TIME_BUDGET_STOP
    assert trainer.control.budget is budget and math.isclose(budget.left(), 9.0)


def test_the_budget_stops_a_step_that_eats_into_the_validation_time():
    trainer, budget, clock = _budgeted(20.0)
    _finish_epoch(trainer, 0.1, seconds=5.0, valid_seconds=4.0)
    budget.on_epoch_begin(trainer.state, trainer.control, trainer, 2)
    clock.now += 15.5  # 4.5 s left, validation takes 4: go on
    budget.on_step_end(trainer.state, trainer.control, trainer)
    assert trainer.control.stop_reason == ""
    clock.now += 1.0  # 3.5 s left
    budget.on_step_end(trainer.state, trainer.control, trainer)
    assert trainer.control.stop_reason == TIME_BUDGET_STOP


def test_keep_free_takes_the_last_validation_time_off_the_budget():
    seen: list[float] = []
    trainer, budget, clock = _budgeted(30.0, keep_free=lambda valid_seconds: seen.append(valid_seconds) or 10.0)
    assert budget.limit() == 20.0 and seen == [0.0]  # before any epoch
    _finish_epoch(trainer, 0.1, seconds=5.0, valid_seconds=2.5)
    assert budget.limit() == 20.0 and seen[-1] == 2.5
    clock.now += 20.5
    assert budget.out_of_time() and trainer.control.spent()


def test_without_a_budget_nothing_is_ever_spent():
    assert not tiny_trainer().control.spent(reserve=1e9)


# -- Checkpoint and Curves --------------------------------------------------------------------------------------

def test_a_checkpoint_holds_the_whole_state_and_resumes_it(tmp_path: Path):
    run = tmp_path / "run"
    first = tiny_trainer([Checkpoint(run)])
    first.fire("on_train_begin")
    assert json.loads((run / SETTINGS_FILE).read_text()) == json.loads(json.dumps(first.settings))
    _finish_epoch(first, 0.25, seconds=3.0)
    first.state.best_metric, first.state.best_epoch, first.state.step = 0.25, 1, 2
    first.net.load_state_dict(_weights(0.5, first))
    first.fire("on_save")
    second = tiny_trainer([Checkpoint(run)])
    state = second.state
    second.fire("on_train_begin")
    assert second.resumed is not None and _same_state(second.state, first.state)
    assert second.state is state  # resumed in place: a callback holding the state sees it
    assert all(torch.equal(second.net.state_dict()[k], v) for k, v in first.net.state_dict().items())


def test_a_checkpoint_that_does_not_fit_is_set_aside(tmp_path: Path, caplog: pytest.LogCaptureFixture):
    run = tmp_path / "run"
    first = tiny_trainer([Checkpoint(run)])
    first.fire("on_train_begin")
    _finish_epoch(first, 0.25)
    first.state.best_state = {"not.a.weight": torch.zeros(1)}
    first.fire("on_save")
    second = tiny_trainer([Checkpoint(run)])
    second.fire("on_train_begin")
    assert second.resumed is None and second.state.epoch == 0
    assert (run / f"{CHECKPOINT}.corrupt").is_file() and "does not fit the settings it names" in caplog.text


def test_curves_write_every_epoch_and_plot_at_the_end(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    trainer, curves = tiny_trainer(), Curves(tmp_path)
    curves.on_train_begin(trainer.state, trainer.control, trainer)
    _finish_epoch(trainer, 0.25, seconds=1.0)
    curves.on_save(trainer.state, trainer.control, trainer)
    with (tmp_path / CURVES_CSV).open() as f:
        assert [float(r["valid_metric"]) for r in csv.DictReader(f)] == [0.25]
    assert not (tmp_path / CURVES_PNG).exists()  # not plotted between epochs within PLOT_SECONDS
    _finish_epoch(trainer, 0.5, seconds=2.0)
    trainer.state.stopped = "all epochs"  # as the run settled records it
    curves.on_save(trainer.state, trainer.control, trainer)
    assert (tmp_path / CURVES_PNG).stat().st_size > 0
    with (tmp_path / CURVES_CSV).open() as f:
        assert [int(r["epoch"]) for r in csv.DictReader(f)] == [1, 2]


# -- DistributedSync --------------------------------------------------------------------------------------------

def test_the_distributed_hooks_resume_every_rank_from_rank_zeros_checkpoint(monkeypatch: pytest.MonkeyPatch):
    zero = tiny_trainer()
    zero.net.load_state_dict(_weights(0.75, zero))
    _finish_epoch(zero, 0.1)
    ckpt = {"settings": zero.settings, "model": zero.net.state_dict(), "optimizer": zero.opt.state_dict(),
            "scheduler": zero.sched.state_dict(), "rng": cb.rng_state(zero.gen, zero.np_rng),
            **zero.state.as_dict()}
    other = tiny_trainer()
    other.main = False
    wrapped: list[object] = []
    monkeypatch.setattr(cb.distributed, "broadcast", lambda value: ckpt)
    monkeypatch.setattr(cb.distributed, "wrap", lambda module, partial=False: wrapped.append(module) or module)
    DistributedSync(checkpointed=True).on_train_begin(other.state, other.control, other)
    assert _same_state(other.state, zero.state) and other.ddp is wrapped[0]
    assert all(torch.all(v == 0.75) for v in other.net.state_dict().values() if v.is_floating_point())


# -- the default list -------------------------------------------------------------------------------------------

def test_the_default_callbacks_follow_the_settings(tmp_path: Path):
    assert names(default_callbacks(CFG)) == ["EarlyStopping"]
    every = default_callbacks(CFG.with_(swa_epochs=2, segment_size=3, gst_finetune_epochs=1), run_dir=tmp_path,
                              max_seconds=60.0)
    assert names(every) == ["Checkpoint", "EarlyStopping", "WeightAveraging", "HeadFinetune", "Curves",
                            "TimeBudget"]
