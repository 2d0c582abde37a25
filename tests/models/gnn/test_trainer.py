"""The GNN training loop (models/gnn/train.py): the order it calls its callbacks in, what a stop at each point
leaves, the training state as a checkpoint holds it, and a finished run returned without training."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import pytest
import torch
from torch_geometric.data import Data

from models.gnn.callbacks import TIME_BUDGET_STOP, Callback, EarlyStopping, TrainingRun
from models.gnn.config import GNNConfig
from models.gnn.net import LAYOUT_CONFIG_SLOTS, make_segments
from models.gnn.state import TrainerControl, TrainState
from models.gnn.steps import Item
from models.gnn.train import ALL_EPOCHS, Trainer, TrainResult, finished

F, NODES, CONFIGS = 5, 8, 12
# Two train graphs, one graph per step, one visit per epoch: two steps per epoch.
CFG = GNNConfig.of(kind="layout", hidden=8, layers=2, lr=1e-2, loss="hinge", epochs=3, configs_per_graph=8,
                  steps_per_graph=1, patience=10, hops="all", train_configs="all", num_features=F, data_key="t")


def tiny_item(key: str, seed: int) -> Item:
    """An 8-node chain with configurable nodes 2 and 5 and 12 configs of distinct runtimes."""
    g = torch.Generator().manual_seed(seed)
    src = torch.arange(NODES - 1)
    data = Data(x=torch.randn(NODES, F, generator=g), op=torch.randint(0, 40, (NODES,), generator=g),
                edge_index=torch.stack([src, src + 1]), config_node_index=torch.tensor([2, 5]), num_nodes=NODES)
    config_feat = torch.randint(-1, 6, (CONFIGS, 2, LAYOUT_CONFIG_SLOTS), generator=g).float()
    y = torch.randperm(CONFIGS, generator=g).double() * 100 + 1000
    return Item(key, make_segments(data), config_feat, y)


TRAIN = [tiny_item("a", 0), tiny_item("b", 1)]
VALID = [tiny_item("v", 2)]


def tiny_trainer(callbacks: list[Callback] = (), cfg: GNNConfig = CFG, valid: list[Item] = VALID) -> Trainer:
    return Trainer(cfg, TRAIN, valid, device="cpu", progress=False, callbacks=callbacks)


class Recorder(Callback):
    """Records every hook call as ``(event, epoch as the state says)``; stops the run at ``stop_at``."""

    def __init__(self, stop_at: tuple[str, int] | None = None) -> None:
        self.calls: list[tuple[str, int]] = []
        self.stop_at = stop_at

    def _record(self, state: TrainState, control: TrainerControl, event: str, epoch: int | None = None) -> None:
        at = (event, state.epoch if epoch is None else epoch)
        self.calls.append(at)
        if at == self.stop_at:
            control.stop("told to")

    def on_train_begin(self, state: TrainState, control: TrainerControl, run: TrainingRun) -> None:
        self._record(state, control, "train_begin")

    def on_epoch_begin(self, state: TrainState, control: TrainerControl, run: TrainingRun, epoch: int) -> None:
        self._record(state, control, "epoch_begin", epoch)

    def on_step_end(self, state: TrainState, control: TrainerControl, run: TrainingRun) -> None:
        self._record(state, control, "step_end")

    def on_epoch_end(self, state: TrainState, control: TrainerControl, run: TrainingRun) -> None:
        self._record(state, control, "epoch_end")

    def on_settle(self, state: TrainState, control: TrainerControl, run: TrainingRun) -> None:
        self._record(state, control, "settle")

    def on_save(self, state: TrainState, control: TrainerControl, run: TrainingRun) -> None:
        self._record(state, control, "save")


def _epoch(n: int) -> list[tuple[str, int]]:
    """The calls of one whole epoch ``n`` of two steps (the state's epoch is the last finished one until its
    validation ends)."""
    return [("epoch_begin", n), ("step_end", n - 1), ("step_end", n - 1), ("epoch_end", n)]


def test_the_loop_calls_the_hooks_in_order():
    rec = Recorder()
    result = tiny_trainer([EarlyStopping(10), rec]).fit()
    assert rec.calls == [("train_begin", 0),
                         *_epoch(1), ("save", 1), *_epoch(2), ("save", 2), *_epoch(3), ("settle", 3), ("save", 3)]
    assert result.stopped == ALL_EPOCHS and finished(result.stopped)
    assert [row["epoch"] for row in result.history] == [1, 2, 3]


def test_a_stop_before_an_epoch_leaves_it_unbegun_and_settles_after_the_loop():
    rec = Recorder(stop_at=("epoch_begin", 2))
    trainer = tiny_trainer([EarlyStopping(10), rec])
    result = trainer.fit()
    assert rec.calls == [("train_begin", 0), *_epoch(1), ("save", 1), ("epoch_begin", 2), ("settle", 1)]
    assert len(result.history) == 1 and result.stopped == "told to"
    assert trainer.state.step == 2  # the steps of finished epochs
    assert trainer.state.stopped == trainer.control.stop_reason == "told to"  # the state records the control's reason


def test_a_stop_during_the_first_epoch_keeps_the_weights_trained_so_far():
    rec = Recorder(stop_at=("step_end", 0))
    trainer = tiny_trainer([EarlyStopping(10), rec])
    initial = trainer.snapshot()
    result = trainer.fit()
    assert rec.calls == [("train_begin", 0), ("epoch_begin", 1), ("step_end", 0), ("settle", 0)]
    assert result.history == [] and result.best_epoch == 0
    assert all(torch.equal(result.state[k], trainer.snapshot()[k]) for k in initial)  # one step's weights
    assert any(not torch.equal(result.state[k], initial[k]) for k in initial)


def test_a_warm_start_begins_from_the_weights_given_and_samples_as_a_cold_one():
    cold = tiny_trainer()
    cold_rng = torch.get_rng_state()
    init = {k: v + 1 for k, v in cold.snapshot().items()}  # weights no random initialisation gives
    trainer = Trainer(CFG, TRAIN, VALID, device="cpu", progress=False, init=init,
                      callbacks=[Recorder(stop_at=("epoch_begin", 1))])
    assert all(torch.equal(trainer.snapshot()[k], init[k]) for k in init)
    # The random states as a cold start leaves them: the same configs sampled, the same dropout; only the start differs.
    assert torch.equal(trainer.gen.get_state(), cold.gen.get_state()) and torch.equal(torch.get_rng_state(), cold_rng)
    result = trainer.fit()  # stopped before its first step: the weights it began with
    assert result.history == [] and all(torch.equal(result.state[k], init[k]) for k in init)


def test_a_stop_after_an_epochs_steps_drops_that_epoch():
    rec = Recorder(stop_at=("step_end", 1))  # the second epoch's first step
    result = tiny_trainer([EarlyStopping(10), rec]).fit()
    assert [row["epoch"] for row in result.history] == [1]
    assert ("epoch_end", 2) not in rec.calls and rec.calls[-1] == ("settle", 1)


def test_the_history_rows_hold_every_curve_column_and_a_running_clock():
    result = tiny_trainer([EarlyStopping(10)]).fit()
    for row in result.history:
        assert set(row) == {"epoch", "train_loss", "valid_metric", "lr", "seconds", "valid_seconds"}
        assert math.isfinite(row["train_loss"]) and -1 <= row["valid_metric"] <= 1
    seconds = [row["seconds"] for row in result.history]
    assert seconds == sorted(seconds) and all(row["valid_seconds"] <= row["seconds"] for row in result.history)


def test_without_valid_graphs_the_last_epoch_is_kept():
    trainer = tiny_trainer([EarlyStopping(1)], valid=[])
    result = trainer.fit()
    assert len(result.history) == 3 and result.best_epoch == 3 and result.best_metric == -math.inf
    assert all(math.isnan(row["valid_metric"]) for row in result.history)
    assert all(torch.equal(result.state[k], v) for k, v in trainer.snapshot().items())


def test_the_state_round_trips_through_a_checkpoint_dict():
    state = TrainState(epoch=2, step=4, history=[{"epoch": 1.0}], best_metric=0.5, best_epoch=1, bad_epochs=1,
                       stopped=TIME_BUDGET_STOP, swa_metric=0.25, swa_used=True)
    ckpt: dict[str, Any] = {"settings": {}, "model": {}, **state.as_dict()}
    assert TrainState.from_checkpoint(ckpt, steps_per_epoch=2) == state
    older = {k: v for k, v in ckpt.items() if k != "step"}  # written before the step count was kept
    assert TrainState.from_checkpoint(older, steps_per_epoch=3).step == 6


def test_a_state_restored_in_place_is_the_checkpoints():
    state = TrainState(epoch=5, best_metric=0.9, stopped="told to", swa_used=True)
    saved = TrainState(epoch=2, step=4, history=[{"epoch": 1.0}], best_metric=0.5, best_epoch=1)
    older = {k: v for k, v in saved.as_dict().items() if k not in ("step", "swa_used")}
    state.restore(older, steps_per_epoch=2)
    assert state == saved  # every field the checkpoint's, a missing one its default


def test_the_control_holds_what_the_callbacks_ask():
    control = TrainerControl()
    assert not control.should_training_stop and not control.spent(reserve=1e9) and control.weights == {}
    control.stop("told to")
    assert control.should_training_stop and control.stop_reason == "told to"


def test_the_result_is_what_the_state_records_with_the_weights_chosen():
    weights = {"w": torch.tensor([1.0])}
    state = TrainState(best_epoch=2, best_metric=0.5, history=[{"epoch": 2.0}], stopped=ALL_EPOCHS, swa_metric=0.25,
                       swa_used=True, finetune_metric=0.75, finetune_used=True)
    assert TrainResult.of(state, weights) == TrainResult(weights, 2, 0.5, [{"epoch": 2.0}], ALL_EPOCHS, 0.25, True,
                                                         0.75, True)


def test_kept_weights_follow_what_the_run_chose():
    best, other, tuned = ({"w": torch.tensor([float(v)])} for v in (1, 3, 7))
    state = TrainState(best_state=best, swa_states=[best, other])
    assert state.kept_weights() is best
    state.swa_used = True
    assert torch.equal(state.kept_weights()["w"], torch.tensor([2.0]))
    state.finetune_used, state.finetune_state = True, tuned
    assert state.kept_weights() is tuned


class _Finished(Callback):
    """Plays a checkpoint found finished: the state of a whole run, nothing to train."""

    def __init__(self, state: TrainState) -> None:
        self.state = state

    def on_train_begin(self, state: TrainState, control: TrainerControl, run: TrainingRun) -> None:
        state.restore(self.state.as_dict(), run.steps_per_epoch)


def test_a_finished_run_returns_its_outcome_without_training(monkeypatch: pytest.MonkeyPatch):
    weights = tiny_trainer().snapshot()
    done = TrainState(epoch=3, history=[{"epoch": 3}], best_state=weights, best_epoch=2, best_metric=0.4,
                      stopped="early stopping (no gain for 1 epochs)")
    trainer = tiny_trainer([_Finished(done)])
    monkeypatch.setattr(trainer, "train_epoch", lambda epoch: pytest.fail("trained a finished run"))
    result = trainer.fit()
    assert result.state is weights and result.best_epoch == 2 and result.stopped == done.stopped
    assert not trainer.control.should_training_stop  # returned as found, not stopped anew


def test_an_unfinished_state_resumes_after_its_last_epoch():
    rec = Recorder()
    partway = TrainState(epoch=2, history=[{"epoch": 1, "seconds": 1.0}, {"epoch": 2, "seconds": 2.0}],
                         best_state=tiny_trainer().snapshot(), stopped=TIME_BUDGET_STOP)
    result = tiny_trainer([_Finished(partway), EarlyStopping(10), rec]).fit()
    assert [row["epoch"] for row in result.history] == [1, 2, 3]
    assert rec.calls[1] == ("epoch_begin", 3)
    assert result.history[-1]["seconds"] >= 2.0  # counted on from the resumed run's time


def test_the_loop_refuses_training_graphs_without_two_configs():
    one = replace(TRAIN[0], config_feat=TRAIN[0].config_feat[:1], y=TRAIN[0].y[:1])
    with pytest.raises(ValueError, match="two or more configs"):
        Trainer(CFG, [one], VALID, device="cpu", progress=False)


def test_the_validation_draw_keeps_a_fixed_subset_of_each_graphs_configs_in_file_order():
    from models.gnn.steps import validation_draw

    item = tiny_item("v", 2)
    drawn = validation_draw(item, 5)
    assert drawn.num_configs == 5
    # the rows kept, found back by their runtimes (distinct): in file order, and the same at every call
    rows = [int((item.y == v).nonzero()) for v in drawn.y]
    assert rows == sorted(rows) and len(set(rows)) == 5
    torch.testing.assert_close(drawn.config_feat, item.config_feat[rows])
    assert torch.equal(validation_draw(item, 5).y, drawn.y)
    # another graph's name draws other rows; nothing is drawn without a limit, under it, or with the protocol's picks
    other = validation_draw(replace(item, key="w"), 5)
    assert not torch.equal(other.y, drawn.y)
    assert validation_draw(item, None) is item and validation_draw(item, CONFIGS) is item
    picked = replace(item, picks=torch.arange(CONFIGS).numpy())
    assert validation_draw(picked, 5) is picked


def test_the_trainer_validates_on_the_draw_when_valid_configs_is_set():
    from competition.metrics import graph_score
    from models.gnn.steps import predict_scores, validation_draw

    trainer = tiny_trainer(cfg=CFG.with_(valid_configs=5))
    assert [it.num_configs for it in trainer.valid_items] == [5]
    drawn = validation_draw(VALID[0], 5)
    scores = predict_scores(trainer.net, drawn.segments, drawn.config_feat, batch=CFG.predict.predict_batch)
    expected = graph_score("layout", drawn.y.numpy(), scores=scores)
    assert trainer.evaluate(trainer.net) == pytest.approx(expected)
    assert [it.num_configs for it in tiny_trainer().valid_items] == [CONFIGS]
