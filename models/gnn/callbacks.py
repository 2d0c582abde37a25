"""The parts of a GNN training run that are not the loop itself, each a small :class:`Callback` of
:class:`models.gnn.train.Trainer`: early stopping, weight averaging, the head fine-tuning after Graph Segment
Training, the time budget, the checkpoint with resume, the learning curves, and the distributed hooks.

A callback reads and changes the trainer's :class:`~models.gnn.train.TrainState` (``trainer.state``) and asks it to
stop (:meth:`~models.gnn.train.Trainer.stop`). The trainer calls, in the order of its callback list:

- ``on_train_begin``: once, before the first epoch (a checkpoint may then resume the run, or find it finished);
- ``on_epoch_begin``: before each epoch's steps (the time budget may decline to begin it);
- ``on_step_end``: after each optimiser step;
- ``on_epoch_end``: after an epoch's validation, its row already in the history (not for an epoch cut short);
- ``on_settle``: when the run ends, to choose the weights it returns (``trainer.weights``, the best epoch's when
  this begins);
- ``on_save``: after each finished epoch, the outcome settled when the run ended with it.

:func:`default_callbacks` is the list :func:`models.gnn.train.train` uses.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from competition.budget import format_seconds
from competition.npzio import atomic_write_stream, atomic_write_text, failures_named
from models.gnn import distributed
from models.gnn.gst import HistoryTable
from models.gnn.runs import (
    CHECKPOINT,
    PLOT_SECONDS,
    SETTINGS_FILE,
    discard,
    open_run,
    rng_state,
    write_curves,
)
from models.gnn.steps import (
    FreshHeadScores,
    GraphScores,
    average_states,
    cosine_schedule,
    dropout_seed,
    epoch_seconds,
    last_valid_seconds,
    step_slots,
    visit_order,
)

if TYPE_CHECKING:
    from models.gnn.config import GNNConfig
    from models.gnn.train import Trainer

log = logging.getLogger(__name__)

TIME_BUDGET_STOP = "time budget"
"""How a run that the time budget cut short says why it stopped (:attr:`models.gnn.train.TrainResult.stopped`): it
can resume."""

SAME_WITHIN = 1e-6
"""A valid metric at least the one it is compared with less this counts as scoring as well (early stopping's gain,
the average's and the fine-tuned head's choice)."""


class Callback:
    """A part of a training run; every hook does nothing unless a subclass says otherwise."""

    def on_train_begin(self, trainer: Trainer) -> None:
        """Once, before the first epoch."""

    def on_epoch_begin(self, trainer: Trainer, epoch: int) -> None:
        """Before the steps of ``epoch``; :meth:`Trainer.stop` here leaves it unbegun."""

    def on_step_end(self, trainer: Trainer) -> None:
        """After each optimiser step; :meth:`Trainer.stop` here cuts the epoch short (it is then dropped)."""

    def on_epoch_end(self, trainer: Trainer) -> None:
        """After an epoch's validation; its row is ``trainer.state.history[-1]``."""

    def on_settle(self, trainer: Trainer) -> None:
        """When the run ends: may replace ``trainer.weights``, the weights the run returns."""

    def on_save(self, trainer: Trainer) -> None:
        """After each finished epoch (and its settling, when the run ended with it)."""


class EarlyStopping(Callback):
    """Keeps the best epoch's weights on the valid metric and stops after ``patience`` epochs without a gain of more
    than :data:`SAME_WITHIN`. Without a valid metric (NaN) every epoch counts as the best, so the last is kept."""

    def __init__(self, patience: int) -> None:
        self.patience = patience

    def on_epoch_end(self, trainer: Trainer) -> None:
        state = trainer.state
        metric = state.history[-1]["valid_metric"]
        if math.isnan(metric) or metric > state.best_metric + SAME_WITHIN:
            state.best_metric = metric if not math.isnan(metric) else state.best_metric
            state.best_epoch, state.bad_epochs = state.epoch, 0
            state.best_state = trainer.snapshot()
            return
        state.bad_epochs += 1
        if state.bad_epochs >= self.patience:
            trainer.stop(f"early stopping (no gain for {self.patience} epochs)")


class WeightAveraging(Callback):
    """Stochastic weight averaging over the last ``epochs`` finished epochs: their weights are kept (in the
    checkpoint too), and when the run ends their average is scored on the valid graphs and returned instead of the
    best epoch's weights when it scores at least as well, or when there is no valid metric. A partial epoch cut by
    the time budget does not count."""

    def __init__(self, epochs: int) -> None:
        self.epochs = epochs

    def on_epoch_end(self, trainer: Trainer) -> None:
        trainer.state.swa_states = [*trainer.state.swa_states, trainer.snapshot()][-self.epochs:]

    def on_settle(self, trainer: Trainer) -> None:
        state = trainer.state
        if not state.swa_states:
            state.swa_metric, state.swa_used = None, False
            return
        average = average_states(state.swa_states)
        metric = trainer.evaluate(trainer.probe(average))  # the same on every rank, so is the choice
        used = math.isnan(metric) or metric >= state.best_metric - SAME_WITHIN
        if trainer.main and math.isnan(metric):
            log.info("%s: no valid metric; the average of the last %d epochs kept", trainer.name,
                     len(state.swa_states))
        elif trainer.main:
            log.info("%s: the average of the last %d epochs scores %.4f on valid against the best epoch's (%d) "
                     "%.4f: %s kept", trainer.name, len(state.swa_states), metric, state.best_epoch,
                     state.best_metric, "the average" if used else "the best epoch")
        state.swa_metric, state.swa_used = metric, used
        if used:
            trainer.weights = average


class HeadFinetune(Callback):
    """After Graph Segment Training, the head fine-tuned alone (the GST paper's "+EFD") for ``epochs`` epochs.

    The weights chosen so far have their head (``head``, and ``late_attention`` when there is one) trained, every
    other parameter frozen: a new AdamW at ``cfg.train.lr`` with the training's schedule (warm-up, cosine) over the
    training's visits (``steps_per_graph``, ``configs_per_graph``, ``graphs_per_step``, seeded by ``cfg.train.seed``),
    where each step computes every segment's sum afresh, without gradients and in eval mode, and trains the head on
    their total (:class:`models.gnn.steps.FreshHeadScores`). The fine-tuned weights are kept when they score at
    least as well on the valid graphs as those before, or when there is no valid metric. Skipped when the time
    budget cannot hold it (forecast from the last epoch), dropped when the budget runs out during it. Launched on
    several processes, each rank trains its share of every step's graphs, so every rank ends with the same weights.
    """

    def __init__(self, epochs: int) -> None:
        self.epochs = epochs

    def on_settle(self, trainer: Trainer) -> None:
        state = trainer.state
        state.finetune_metric, state.finetune_used, state.finetune_state = None, False, {}
        cfg, history = trainer.cfg, state.history
        # Forecast from the last epoch: this many epochs of its training steps, then one validation pass.
        scoring = last_valid_seconds(history)
        forecast = max(0.0, self.epochs * (epoch_seconds(history) - scoring) + scoring) if history else 0.0
        if trainer.spent(reserve=forecast):
            if trainer.main:
                log.info("%s: the time budget left cannot hold the head fine-tuning (about %s); the head is not "
                         "fine-tuned", trainer.name, format_seconds(forecast))
            return
        probe = trainer.probe(trainer.weights)
        heads = [m for m in (probe.head, probe.late_attention) if m is not None]
        probe.requires_grad_(False).eval()  # the segments' sums without dropout
        for m in heads:
            m.requires_grad_(True).train()
        steps = self.epochs * trainer.steps_per_epoch
        opt = torch.optim.AdamW([p for m in heads for p in m.parameters()], lr=cfg.train.lr, weight_decay=cfg.train.weight_decay)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, cosine_schedule(steps, max(1, steps // 50)))
        forward = distributed.wrap(FreshHeadScores(probe)) if trainer.world > 1 else FreshHeadScores(probe)
        gen, np_rng = torch.Generator().manual_seed(cfg.train.seed), np.random.default_rng(cfg.train.seed)
        with dropout_seed(cfg.train.seed, trainer.device):  # the head's dropout, when each slot has no seed of its own
            for _ in range(self.epochs):
                order = visit_order(trainer.steps_per_epoch, cfg, len(trainer.usable), gen)
                for step in range(trainer.steps_per_epoch):
                    slots = step_slots(order, step, trainer.usable, cfg, gen, np_rng)
                    trainer.run_step(probe, slots, opt, HistoryTable(), ddp=forward)  # fresh sums: no table writes
                    sched.step()
                    if trainer.spent():
                        if trainer.main:
                            log.info("%s: the time budget ran out during the head fine-tuning; dropped",
                                     trainer.name)
                        return
        metric = trainer.evaluate(probe)  # the same on every rank, so is the choice
        before = state.swa_metric if state.swa_used else state.best_metric
        used = math.isnan(metric) or metric >= before - SAME_WITHIN
        if trainer.main and math.isnan(metric):
            log.info("%s: no valid metric; the head fine-tuned for %d epochs kept", trainer.name, self.epochs)
        elif trainer.main:
            log.info("%s: the head fine-tuned for %d epochs on every segment's fresh sum scores %.4f on valid "
                     "against %.4f before: %s kept", trainer.name, self.epochs, metric, before,
                     "the fine-tuned head" if used else "the head before")
        state.finetune_metric, state.finetune_used = metric, used
        if used:
            trainer.weights = {k: v.detach().cpu().clone() for k, v in probe.state_dict().items()}
            state.finetune_state = trainer.weights


class TimeBudget(Callback):
    """Stops training after ``max_seconds``, less ``keep_free(last validation pass's seconds)`` kept free at the end
    for the caller's predictions. The run stays resumable.

    An epoch is not begun when the last one (its validation included) took longer than the time left; its steps
    keep the time the last validation pass took; a validation pass stops when the time is out (checked before each
    graph). Checked by every rank: the first out of time stops them all.
    """

    def __init__(self, max_seconds: float, keep_free: Callable[[float], float] | None = None) -> None:
        self.max_seconds = max_seconds
        self.keep_free = keep_free
        self.reserve = 0.0
        self.trainer: Trainer | None = None

    def on_train_begin(self, trainer: Trainer) -> None:
        self.trainer = trainer
        trainer.budget = self

    def limit(self) -> float:
        """The seconds this run may use (the history is the same on every rank, so is this)."""
        assert self.trainer is not None
        history = self.trainer.state.history
        return self.max_seconds - (self.keep_free(last_valid_seconds(history)) if self.keep_free else 0.0)

    def left(self) -> float:
        assert self.trainer is not None
        return max(0.0, self.limit() - (self.trainer.clock() - self.trainer.started))

    def out_of_time(self, reserve: float = 0.0) -> bool:
        """Out of time on this rank's clock (no collective: asked inside a validation pass), keeping ``reserve``."""
        assert self.trainer is not None
        return self.trainer.clock() - self.trainer.started > self.limit() - reserve

    def spent(self, reserve: float = 0.0) -> bool:
        """Out of time on any rank, keeping ``reserve`` seconds."""
        return distributed.any_rank(self.out_of_time(reserve))

    def on_epoch_begin(self, trainer: Trainer, epoch: int) -> None:
        # Cut short, an epoch would be discarded (its weights never scored), and its time is the prediction's.
        history = trainer.state.history
        if history and self.spent(reserve=epoch_seconds(history)):
            if trainer.main:
                log.info("%s: the time budget leaves %s, less than an epoch takes (%s); epoch %d is not begun",
                         trainer.name, format_seconds(self.left()), format_seconds(epoch_seconds(history)), epoch)
            trainer.stop(TIME_BUDGET_STOP)
            return
        # Training keeps the time the last validation pass took, so that this epoch's validation ends in time too.
        self.reserve = last_valid_seconds(history)

    def on_step_end(self, trainer: Trainer) -> None:
        if self.spent(self.reserve):
            trainer.stop(TIME_BUDGET_STOP)


class Checkpoint(Callback):
    """The run folder: on begin, another run's files moved away (:func:`models.gnn.runs.open_run`), the settings
    written, and the run resumed from its checkpoint (set aside with a warning when it does not fit the settings it
    names); after each finished epoch, the whole state checkpointed atomically. Rank 0 alone reads and writes."""

    def __init__(self, run: Path) -> None:
        self.run = run

    def on_train_begin(self, trainer: Trainer) -> None:
        if not trainer.main:
            return
        ckpt = open_run(self.run, trainer.settings)
        # After open_run, which moves another run's files (its settings.json too) away.
        with failures_named(self.run / SETTINGS_FILE):
            atomic_write_text(self.run / SETTINGS_FILE, json.dumps(trainer.settings, indent=1, sort_keys=True) + "\n")
        if ckpt is not None:
            try:
                trainer.resume(ckpt)
            except (RuntimeError, ValueError, KeyError, TypeError, IndexError) as exc:
                discard(self.run / CHECKPOINT, f"does not fit the settings it names ({type(exc).__name__})")
                trainer.restart()
                ckpt = None
        trainer.resumed = ckpt

    def on_save(self, trainer: Trainer) -> None:
        if not trainer.main:
            return
        self.run.mkdir(parents=True, exist_ok=True)
        ckpt: dict[str, Any] = {"settings": trainer.settings, "model": trainer.net.state_dict(),
                                "optimizer": trainer.opt.state_dict(), "scheduler": trainer.sched.state_dict(),
                                "rng": rng_state(trainer.gen, trainer.np_rng), **trainer.state.as_dict()}
        # Through our own file object: a full disk is an OSError naming the checkpoint, not torch's RuntimeError.
        atomic_write_stream(self.run / CHECKPOINT, lambda f: torch.save(ckpt, f))


class Curves(Callback):
    """``curves.csv`` after every finished epoch; ``curves.png`` when the run ends and otherwise at most every
    :data:`models.gnn.runs.PLOT_SECONDS` (rank 0)."""

    def __init__(self, run: Path) -> None:
        self.run = run
        self.plotted = time.perf_counter()

    def on_train_begin(self, trainer: Trainer) -> None:
        self.plotted = time.perf_counter()

    def on_save(self, trainer: Trainer) -> None:
        if not trainer.main:
            return
        plot = bool(trainer.state.stopped) or time.perf_counter() - self.plotted >= PLOT_SECONDS
        write_curves(self.run, trainer.state.history, trainer.title, plot=plot)
        self.plotted = time.perf_counter() if plot else self.plotted


class DistributedSync(Callback):
    """Launched on several processes: every rank resumes from rank 0's checkpoint (when there is a run folder), and
    the graph forward is wrapped in ``DistributedDataParallel`` (which all-reduces the gradients)."""

    def __init__(self, checkpointed: bool) -> None:
        self.checkpointed = checkpointed

    def on_train_begin(self, trainer: Trainer) -> None:
        if self.checkpointed:
            ckpt = distributed.broadcast(trainer.resumed)  # rank 0's, checked: every rank resumes the same epoch
            if ckpt is not None and not trainer.main:
                trainer.resume(ckpt)
        trainer.ddp = distributed.wrap(GraphScores(trainer.net), partial=trainer.cfg.uses_gst)


def default_callbacks(cfg: GNNConfig, *, run_dir: Path | None = None, max_seconds: float | None = None,
                      keep_free: Callable[[float], float] | None = None) -> list[Callback]:
    """The callbacks of a run of ``cfg``, in the order they are called: the run folder first (it may resume the
    run), the distributed hooks, early stopping, weight averaging, the head fine-tuning, the curves after the
    checkpoint, the time budget."""
    callbacks: list[Callback] = []
    if run_dir is not None:
        callbacks.append(Checkpoint(run_dir))
    if distributed.world_size() > 1:
        callbacks.append(DistributedSync(checkpointed=run_dir is not None))
    callbacks.append(EarlyStopping(cfg.train.patience))
    if cfg.train.swa_epochs:
        callbacks.append(WeightAveraging(cfg.train.swa_epochs))
    if cfg.uses_gst and cfg.train.gst_finetune_epochs:
        callbacks.append(HeadFinetune(cfg.train.gst_finetune_epochs))
    if run_dir is not None:
        callbacks.append(Curves(run_dir))
    if max_seconds is not None:
        callbacks.append(TimeBudget(max_seconds, keep_free))
    return callbacks


def names(callbacks: Sequence[Callback]) -> list[str]:
    """The class names of ``callbacks``, in order (what a run's log and the tests name them by)."""
    return [type(c).__name__ for c in callbacks]

