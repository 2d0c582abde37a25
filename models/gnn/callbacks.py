"""The parts of a GNN training run that are not the loop itself, each a small :class:`Callback`: early stopping,
weight averaging, the head fine-tuning after Graph Segment Training, the time budget, the checkpoint with resume,
the learning curves, and the distributed hooks.

As with huggingface transformers' ``TrainerCallback``, every hook is given the run's state and control
(:mod:`models.gnn.state`) and nothing of the loop's module: it reads and changes the
:class:`~models.gnn.state.TrainState` (``state``), asks the loop through the
:class:`~models.gnn.state.TrainerControl` (``control``: stop with a reason, replace the weights the run returns,
register the time budget), and uses the rest of the run through :class:`TrainingRun` (``run``: the network, its
optimiser, the settings, the clock, the graphs...). The loop calls, in the order of its callback list:

- ``on_train_begin(state, control, run)``: once, before the first epoch (a checkpoint may then resume the run, or
  find it finished);
- ``on_epoch_begin(state, control, run, epoch)``: before each epoch's steps (the time budget may decline to begin
  it);
- ``on_step_end(state, control, run)``: after each optimiser step;
- ``on_epoch_end(state, control, run)``: after an epoch's validation, its row already in the history (not for an
  epoch cut short);
- ``on_settle(state, control, run)``: when the run ends, to choose the weights it returns (``control.weights``, the
  best epoch's when this begins);
- ``on_save(state, control, run)``: after each finished epoch, the outcome settled when the run ended with it.

:func:`default_callbacks` is the list a run trains with unless it is given another.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np
import torch

from competition.atomic import atomic_write_stream, atomic_write_text, failures_named
from competition.budget import format_seconds
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
from models.gnn.state import TrainerControl, TrainState
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
    from models.gnn.net import RankNet
    from models.gnn.steps import Item, Slot

log = logging.getLogger(__name__)

TIME_BUDGET_STOP = "time budget"
"""How a run that the time budget cut short says why it stopped (:attr:`models.gnn.state.TrainState.stopped`): it
can resume."""

SAME_WITHIN = 1e-6
"""A valid metric at least the one it is compared with less this counts as scoring as well (early stopping's gain,
the average's and the fine-tuned head's choice)."""


@runtime_checkable
class TrainingRun(Protocol):
    """What a callback may use of the run besides its state and control: the network and its optimiser, the
    settings, the graphs, the clock, and the run's own tools. The trainer passes itself.

    Attributes:
        cfg: the settings; ``settings``: them as the run folder stores them
            (:func:`models.gnn.runs.run_settings`).
        name: names the run in log lines (its title, else its kind); ``title``: on its curves.
        main: whether this process is rank 0; ``world``: how many processes train together.
        device: where the network and the graphs are.
        usable: the training graphs (those with two configs or more, on ``device``).
        steps_per_epoch: optimiser steps in an epoch.
        started: when this run's training began on :meth:`clock` (set after ``on_train_begin``).
        net, opt, sched: the network, its optimiser and its learning-rate schedule.
        gen, np_rng: the generators of the training's visits and config draws.
        resumed: the checkpoint the run resumed from (``None``: none), set by the callback that reads it.
        ddp: the graph forward under ``DistributedDataParallel`` (``None``: one process), set by the callback that
            wraps it.
    """

    cfg: GNNConfig
    settings: dict[str, Any]
    name: str
    title: str
    main: bool
    world: int
    device: torch.device
    usable: list[Item]
    steps_per_epoch: int
    started: float
    net: RankNet
    opt: torch.optim.Optimizer
    sched: torch.optim.lr_scheduler.LRScheduler
    gen: torch.Generator
    np_rng: np.random.Generator
    resumed: dict[str, Any] | None
    ddp: torch.nn.Module | None

    def clock(self) -> float:
        """The run's clock, in seconds (what the history's ``seconds`` and the time budget count)."""
        ...

    def snapshot(self) -> dict[str, torch.Tensor]:
        """The network's weights now, copied to the CPU."""
        ...

    def probe(self, weights: dict[str, torch.Tensor]) -> RankNet:
        """A copy of the network holding ``weights``, without gradients (to score, or fine-tune, apart)."""
        ...

    def evaluate(self, net: RankNet, out_of_time: Callable[[], bool] | None = None) -> float:
        """``net``'s valid metric."""
        ...

    def run_step(self, net: RankNet, slots: Sequence[Slot], opt: torch.optim.Optimizer, table: HistoryTable, *,
                 ddp: torch.nn.Module | None) -> dict[int, float]:
        """One optimiser step of ``net`` (the run's network, or a callback's copy) over ``slots``; each slot's loss
        by slot index."""
        ...

    def resume(self, ckpt: dict[str, Any]) -> None:
        """Load a checkpoint: weights, optimiser, schedule, RNG states and the state (in place).

        Raises:
            RuntimeError, ValueError, KeyError, TypeError, IndexError: it does not fit this network.
        """
        ...

    def restart(self) -> None:
        """A fresh network, optimiser, schedule and generators, seeded by ``cfg.train.seed``."""
        ...


class Callback:
    """A part of a training run; every hook does nothing unless a subclass says otherwise.

    Every hook is given the run's ``state`` (to read and change), its ``control`` (what it asks of the loop) and
    ``run`` (the rest of the run), in that order; ``on_epoch_begin`` the epoch about to begin too.
    """

    def on_train_begin(self, state: TrainState, control: TrainerControl, run: TrainingRun) -> None:
        """Once, before the first epoch."""

    def on_epoch_begin(self, state: TrainState, control: TrainerControl, run: TrainingRun, epoch: int) -> None:
        """Before the steps of ``epoch``; :meth:`~models.gnn.state.TrainerControl.stop` here leaves it unbegun."""

    def on_step_end(self, state: TrainState, control: TrainerControl, run: TrainingRun) -> None:
        """After each optimiser step; :meth:`~models.gnn.state.TrainerControl.stop` here cuts the epoch short (it is
        then dropped)."""

    def on_epoch_end(self, state: TrainState, control: TrainerControl, run: TrainingRun) -> None:
        """After an epoch's validation; its row is ``state.history[-1]``."""

    def on_settle(self, state: TrainState, control: TrainerControl, run: TrainingRun) -> None:
        """When the run ends: may replace ``control.weights``, the weights the run returns."""

    def on_save(self, state: TrainState, control: TrainerControl, run: TrainingRun) -> None:
        """After each finished epoch (and its settling, when the run ended with it)."""


class EarlyStopping(Callback):
    """Keeps the best epoch's weights on the valid metric and stops after ``patience`` epochs without a gain of more
    than :data:`SAME_WITHIN`. Without a valid metric (NaN) every epoch counts as the best, so the last is kept."""

    def __init__(self, patience: int) -> None:
        self.patience = patience

    def on_epoch_end(self, state: TrainState, control: TrainerControl, run: TrainingRun) -> None:
        metric = state.history[-1]["valid_metric"]
        if math.isnan(metric) or metric > state.best_metric + SAME_WITHIN:
            state.best_metric = metric if not math.isnan(metric) else state.best_metric
            state.best_epoch, state.bad_epochs = state.epoch, 0
            state.best_state = run.snapshot()
            return
        state.bad_epochs += 1
        if state.bad_epochs >= self.patience:
            control.stop(f"early stopping (no gain for {self.patience} epochs)")


class WeightAveraging(Callback):
    """Stochastic weight averaging over the last ``epochs`` finished epochs: their weights are kept (in the
    checkpoint too), and when the run ends their average is scored on the valid graphs and returned instead of the
    best epoch's weights when it scores at least as well, or when there is no valid metric. A partial epoch cut by
    the time budget does not count."""

    def __init__(self, epochs: int) -> None:
        self.epochs = epochs

    def on_epoch_end(self, state: TrainState, control: TrainerControl, run: TrainingRun) -> None:
        state.swa_states = [*state.swa_states, run.snapshot()][-self.epochs:]

    def on_settle(self, state: TrainState, control: TrainerControl, run: TrainingRun) -> None:
        if not state.swa_states:
            state.swa_metric, state.swa_used = None, False
            return
        average = average_states(state.swa_states)
        metric = run.evaluate(run.probe(average))  # the same on every rank, so is the choice
        used = math.isnan(metric) or metric >= state.best_metric - SAME_WITHIN
        if run.main and math.isnan(metric):
            log.info("%s: no valid metric; the average of the last %d epochs kept", run.name,
                     len(state.swa_states))
        elif run.main:
            log.info("%s: the average of the last %d epochs scores %.4f on valid against the best epoch's (%d) "
                     "%.4f: %s kept", run.name, len(state.swa_states), metric, state.best_epoch,
                     state.best_metric, "the average" if used else "the best epoch")
        state.swa_metric, state.swa_used = metric, used
        if used:
            control.weights = average


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

    def on_settle(self, state: TrainState, control: TrainerControl, run: TrainingRun) -> None:
        state.finetune_metric, state.finetune_used, state.finetune_state = None, False, {}
        cfg, history = run.cfg, state.history
        # Forecast from the last epoch: this many epochs of its training steps, then one validation pass.
        scoring = last_valid_seconds(history)
        forecast = max(0.0, self.epochs * (epoch_seconds(history) - scoring) + scoring) if history else 0.0
        if control.spent(reserve=forecast):
            if run.main:
                log.info("%s: the time budget left cannot hold the head fine-tuning (about %s); the head is not "
                         "fine-tuned", run.name, format_seconds(forecast))
            return
        probe = run.probe(control.weights)
        heads = [m for m in (probe.head, probe.late_attention) if m is not None]
        probe.requires_grad_(False).eval()  # the segments' sums without dropout
        for m in heads:
            m.requires_grad_(True).train()
        steps = self.epochs * run.steps_per_epoch
        opt = torch.optim.AdamW([p for m in heads for p in m.parameters()], lr=cfg.train.lr, weight_decay=cfg.train.weight_decay)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, cosine_schedule(steps, max(1, steps // 50)))
        forward = distributed.wrap(FreshHeadScores(probe)) if run.world > 1 else FreshHeadScores(probe)
        gen, np_rng = torch.Generator().manual_seed(cfg.train.seed), np.random.default_rng(cfg.train.seed)
        with dropout_seed(cfg.train.seed, run.device):  # the head's dropout, when each slot has no seed of its own
            for _ in range(self.epochs):
                order = visit_order(run.steps_per_epoch, cfg, len(run.usable), gen)
                for step in range(run.steps_per_epoch):
                    slots = step_slots(order, step, run.usable, cfg, gen, np_rng)
                    run.run_step(probe, slots, opt, HistoryTable(), ddp=forward)  # fresh sums: no table writes
                    sched.step()
                    if control.spent():
                        if run.main:
                            log.info("%s: the time budget ran out during the head fine-tuning; dropped", run.name)
                        return
        metric = run.evaluate(probe)  # the same on every rank, so is the choice
        before = state.swa_metric if state.swa_used else state.best_metric
        used = math.isnan(metric) or metric >= before - SAME_WITHIN
        if run.main and math.isnan(metric):
            log.info("%s: no valid metric; the head fine-tuned for %d epochs kept", run.name, self.epochs)
        elif run.main:
            log.info("%s: the head fine-tuned for %d epochs on every segment's fresh sum scores %.4f on valid "
                     "against %.4f before: %s kept", run.name, self.epochs, metric, before,
                     "the fine-tuned head" if used else "the head before")
        state.finetune_metric, state.finetune_used = metric, used
        if used:
            control.weights = {k: v.detach().cpu().clone() for k, v in probe.state_dict().items()}
            state.finetune_state = control.weights


class TimeBudget(Callback):
    """Stops training after ``max_seconds``, less ``keep_free(last validation pass's seconds)`` kept free at the end
    for the caller's predictions. The run stays resumable.

    An epoch is not begun when the last one (its validation included) took longer than the time left; its steps
    keep the time the last validation pass took; a validation pass stops when the time is out (checked before each
    graph). Checked by every rank: the first out of time stops them all. Registered as the run's budget
    (``control.budget``) when the run begins; it keeps the run's state and view to read its history and clock.
    """

    def __init__(self, max_seconds: float, keep_free: Callable[[float], float] | None = None) -> None:
        self.max_seconds = max_seconds
        self.keep_free = keep_free
        self.reserve = 0.0
        self.state: TrainState | None = None
        self.run: TrainingRun | None = None

    def on_train_begin(self, state: TrainState, control: TrainerControl, run: TrainingRun) -> None:
        self.state, self.run = state, run
        control.budget = self

    def limit(self) -> float:
        """The seconds this run may use (the history is the same on every rank, so is this)."""
        assert self.state is not None
        history = self.state.history
        return self.max_seconds - (self.keep_free(last_valid_seconds(history)) if self.keep_free else 0.0)

    def left(self) -> float:
        assert self.run is not None
        return max(0.0, self.limit() - (self.run.clock() - self.run.started))

    def out_of_time(self, reserve: float = 0.0) -> bool:
        """Out of time on this rank's clock (no collective: asked inside a validation pass), keeping ``reserve``."""
        assert self.run is not None
        return self.run.clock() - self.run.started > self.limit() - reserve

    def spent(self, reserve: float = 0.0) -> bool:
        """Out of time on any rank, keeping ``reserve`` seconds."""
        return distributed.any_rank(self.out_of_time(reserve))

    def on_epoch_begin(self, state: TrainState, control: TrainerControl, run: TrainingRun, epoch: int) -> None:
        # Cut short, an epoch would be discarded (its weights never scored), and its time is the prediction's.
        history = state.history
        if history and self.spent(reserve=epoch_seconds(history)):
            if run.main:
                log.info("%s: the time budget leaves %s, less than an epoch takes (%s); epoch %d is not begun",
                         run.name, format_seconds(self.left()), format_seconds(epoch_seconds(history)), epoch)
            control.stop(TIME_BUDGET_STOP)
            return
        # Training keeps the time the last validation pass took, so that this epoch's validation ends in time too.
        self.reserve = last_valid_seconds(history)

    def on_step_end(self, state: TrainState, control: TrainerControl, run: TrainingRun) -> None:
        if self.spent(self.reserve):
            control.stop(TIME_BUDGET_STOP)


class Checkpoint(Callback):
    """The run folder: on begin, another run's files moved away (:func:`models.gnn.runs.open_run`), the settings
    written, and the run resumed from its checkpoint (set aside with a warning when it does not fit the settings it
    names); after each finished epoch, the whole state checkpointed atomically. Rank 0 alone reads and writes.

    Args:
        folder: the run folder.
    """

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def on_train_begin(self, state: TrainState, control: TrainerControl, run: TrainingRun) -> None:
        if not run.main:
            return
        ckpt = open_run(self.folder, run.settings)
        # After open_run, which moves another run's files (its settings.json too) away.
        with failures_named(self.folder / SETTINGS_FILE):
            atomic_write_text(self.folder / SETTINGS_FILE, json.dumps(run.settings, indent=1, sort_keys=True) + "\n")
        if ckpt is not None:
            try:
                run.resume(ckpt)
            except (RuntimeError, ValueError, KeyError, TypeError, IndexError) as exc:
                discard(self.folder / CHECKPOINT, f"does not fit the settings it names ({type(exc).__name__})")
                run.restart()
                ckpt = None
        run.resumed = ckpt

    def on_save(self, state: TrainState, control: TrainerControl, run: TrainingRun) -> None:
        if not run.main:
            return
        self.folder.mkdir(parents=True, exist_ok=True)
        ckpt: dict[str, Any] = {"settings": run.settings, "model": run.net.state_dict(),
                                "optimizer": run.opt.state_dict(), "scheduler": run.sched.state_dict(),
                                "rng": rng_state(run.gen, run.np_rng), **state.as_dict()}
        # Through our own file object: a full disk is an OSError naming the checkpoint, not torch's RuntimeError.
        atomic_write_stream(self.folder / CHECKPOINT, lambda f: torch.save(ckpt, f))


class Curves(Callback):
    """``curves.csv`` after every finished epoch; ``curves.png`` when the run ends and otherwise at most every
    :data:`models.gnn.runs.PLOT_SECONDS` (rank 0).

    Args:
        folder: the run folder.
    """

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.plotted = time.perf_counter()

    def on_train_begin(self, state: TrainState, control: TrainerControl, run: TrainingRun) -> None:
        self.plotted = time.perf_counter()

    def on_save(self, state: TrainState, control: TrainerControl, run: TrainingRun) -> None:
        if not run.main:
            return
        plot = bool(state.stopped) or time.perf_counter() - self.plotted >= PLOT_SECONDS
        write_curves(self.folder, state.history, run.title, plot=plot)
        self.plotted = time.perf_counter() if plot else self.plotted


class DistributedSync(Callback):
    """Launched on several processes: every rank resumes from rank 0's checkpoint (when there is a run folder), and
    the graph forward is wrapped in ``DistributedDataParallel`` (which all-reduces the gradients)."""

    def __init__(self, checkpointed: bool) -> None:
        self.checkpointed = checkpointed

    def on_train_begin(self, state: TrainState, control: TrainerControl, run: TrainingRun) -> None:
        if self.checkpointed:
            ckpt = distributed.broadcast(run.resumed)  # rank 0's, checked: every rank resumes the same epoch
            if ckpt is not None and not run.main:
                run.resume(ckpt)
        run.ddp = distributed.wrap(GraphScores(run.net), partial=run.cfg.uses_gst)


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

