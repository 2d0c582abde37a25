"""The GNN training loop under a time budget, on a fake clock: an epoch that cannot end in the time left is not
begun, training keeps the last validation pass's time, and a validation pass the budget runs out in is left
unfinished; the result is the same as a run whose budget was just long enough, and a re-run resumes."""

from __future__ import annotations

import importlib
import types
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from models.gnn.runs import CHECKPOINT
from models.gnn.steps import epoch_seconds
from models.gnn.train import TrainResult
from tests.models.gnn.test_callbacks_weight_averaging import BASE, TRAIN, VALID, _assert_equal, _train

gnn_train = importlib.import_module("models.gnn.train")
gnn_steps = importlib.import_module("models.gnn.steps")

# Two steps per epoch (two train graphs, one per step); two valid graphs.


def _clock(m: pytest.MonkeyPatch, graph_seconds: Callable[[int], float] = lambda scored: 2.0) -> list[str]:
    """Training's clock reads 1 s per optimiser step and ``graph_seconds(k)`` for the ``k``-th valid graph scored
    (from 0; 2 s each unless told); returns what happened, in order (``step`` and ``graph``)."""
    events: list[str] = []
    real_step, real_predict = gnn_train.training_step, gnn_steps.predict_scores

    def step(*args, **kwargs):
        events.append("step")
        return real_step(*args, **kwargs)

    def predict(*args, **kwargs):
        events.append("graph")
        return real_predict(*args, **kwargs)

    def now() -> float:
        graphs = [graph_seconds(k) for k in range(events.count("graph"))]
        return events.count("step") * 1.0 + sum(graphs)

    m.setattr(gnn_train, "training_step", step)
    m.setattr(gnn_steps, "predict_scores", predict)
    m.setattr(gnn_train, "time", types.SimpleNamespace(perf_counter=now))
    return events


def _epochs(result: TrainResult) -> list[int]:
    return [int(h["epoch"]) for h in result.history]


def test_epoch_seconds_counts_the_last_epoch_with_its_validation():
    assert epoch_seconds([{"seconds": 6.0}]) == 6.0
    assert epoch_seconds([{"seconds": 6.0}, {"seconds": 13.5}]) == 7.5


def test_an_epoch_that_cannot_end_in_time_is_not_begun(tmp_path: Path):
    # An epoch: 2 steps (2 s) and 2 valid graphs (4 s) = 6 s. With 15 s: epochs 1 and 2 end at 6 and 12; epoch 3
    # would end at 18, so it is not begun: no step is taken after 12 s.
    with pytest.MonkeyPatch.context() as m:
        seen = _clock(m)
        cut = _train(VALID, run_dir=tmp_path, max_seconds=15.0, epochs=4)
    assert cut.stopped == "time budget" and _epochs(cut) == [1, 2]
    assert seen == ["step", "step", "graph", "graph"] * 2
    assert [h["seconds"] for h in cut.history] == [6.0, 12.0]
    assert [h["valid_seconds"] for h in cut.history] == [4.0, 4.0]
    # A re-run resumes with epoch 3 and ends as a run never cut.
    ckpt = torch.load(tmp_path / CHECKPOINT, weights_only=True)
    assert ckpt["epoch"] == 2 and ckpt["stopped"] == ""
    with pytest.MonkeyPatch.context() as m:
        seen = _clock(m)
        resumed = _train(VALID, run_dir=tmp_path, epochs=4)
    assert resumed.stopped == "all epochs" and _epochs(resumed) == [1, 2, 3, 4]
    assert seen == ["step", "step", "graph", "graph"] * 2  # epochs 3 and 4 only
    straight = _train(VALID, epochs=4)
    _assert_equal(resumed.state, straight.state)


def test_training_keeps_the_last_validation_time(tmp_path: Path):
    # With 11 s: epoch 1 ends at 6 (its validation took 4 s); epoch 2 would end at 12 > 11, so it is not begun.
    # With 13 s it is begun (12 <= 13), and its steps keep 4 s for its validation.
    with pytest.MonkeyPatch.context() as m:
        seen = _clock(m)
        cut = _train(VALID, run_dir=tmp_path, max_seconds=11.0, epochs=4)
    assert _epochs(cut) == [1] and seen.count("step") == 2
    with pytest.MonkeyPatch.context() as m:
        seen = _clock(m)
        ran = _train(VALID, max_seconds=13.0, epochs=4)
    assert _epochs(ran) == [1, 2] and seen == ["step", "step", "graph", "graph"] * 2


def test_a_validation_pass_the_budget_runs_out_in_is_left_unfinished(tmp_path: Path):
    # The first epoch has no forecast: its steps end at 2 s, its first valid graph at 4 s, past the 3 s budget, so
    # the second graph is not scored; no epoch is recorded, and the weights trained in it are kept.
    with pytest.MonkeyPatch.context() as m:
        seen = _clock(m)
        cut = _train(VALID, run_dir=tmp_path, max_seconds=3.0, epochs=4)
    assert seen == ["step", "step", "graph"]
    assert cut.stopped == "time budget" and cut.history == [] and cut.best_epoch == 0
    assert not (tmp_path / CHECKPOINT).exists()  # nothing to resume: a re-run starts afresh
    # The kept weights are those after the epoch's two steps: a run of one epoch without validation holds them.
    one = _train([], epochs=1)
    _assert_equal(cut.state, one.state)


def test_after_a_scored_epoch_a_cut_validation_keeps_the_best_epoch(tmp_path: Path):
    # Epoch 1 ends at 6 s (forecast: 6 s), so with 12.5 s epoch 2 is begun; its steps end at 8 s, but its valid
    # graphs take 5 s each: its first ends at 13 s, past the budget, and its second is not scored. Epoch 2 is not
    # recorded: the result is epoch 1's, checkpointed, and a re-run redoes epoch 2.
    with pytest.MonkeyPatch.context() as m:
        seen = _clock(m, lambda scored: 2.0 if scored < 2 else 5.0)
        cut = _train(VALID, run_dir=tmp_path, max_seconds=12.5, epochs=4)
    assert seen == ["step", "step", "graph", "graph", "step", "step", "graph"]
    assert cut.stopped == "time budget" and _epochs(cut) == [1] and cut.best_epoch == 1
    assert torch.load(tmp_path / CHECKPOINT, weights_only=True)["epoch"] == 1
    straight = _train(VALID, epochs=4)
    assert cut.best_metric == straight.history[0]["valid_metric"]
    with pytest.MonkeyPatch.context() as m:
        seen = _clock(m)
        resumed = _train(VALID, run_dir=tmp_path, epochs=4)
    assert seen.count("step") == 6 and _epochs(resumed) == [1, 2, 3, 4]
    _assert_equal(resumed.state, straight.state)


def test_keep_free_ends_training_early_enough_to_predict(tmp_path: Path):
    # An epoch: 6 s, its validation 4 s. With 20 s: epochs end at 6, 12, 18. Keeping twice the validation time
    # free (8 s once a pass is measured; nothing before) leaves 12 s: epoch 2 ends at 12, epoch 3 is not begun.
    with pytest.MonkeyPatch.context() as m:
        _clock(m)
        free = _train(VALID, max_seconds=20.0, epochs=4)
    with pytest.MonkeyPatch.context() as m:
        seen = _clock(m)
        kept = gnn_train.train(gnn_train.GNNConfig.of(**{**BASE, "epochs": 4}), TRAIN, VALID, device="cpu",
                               progress=False, max_seconds=20.0, keep_free=lambda valid_seconds: 2 * valid_seconds)
    assert _epochs(free) == [1, 2, 3] and _epochs(kept) == [1, 2]
    assert seen == ["step", "step", "graph", "graph"] * 2
    # Before any validation pass, keep_free(0) counts: 8 s kept of 9 s leaves 1 s, one step of the first epoch.
    with pytest.MonkeyPatch.context() as m:
        seen = _clock(m)
        first = gnn_train.train(gnn_train.GNNConfig.of(**{**BASE, "epochs": 4}), TRAIN, VALID, device="cpu",
                                progress=False, max_seconds=9.0, keep_free=lambda valid_seconds: 8.0)
    assert seen == ["step", "step"] and first.history == []  # the check follows each step: past 1 s after step 2
