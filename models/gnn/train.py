"""The training loop of the GNN rankers: AdamW with a warm-up and cosine schedule over seeded visits of the training
graphs, one validation pass per epoch, the run's state in one object (:class:`models.gnn.state.TrainState`) and what
its callbacks ask of the loop in another (:class:`models.gnn.state.TrainerControl`), which the loop reads after
their hooks.

Everything else a run does is a callback (:mod:`models.gnn.callbacks`): early stopping on the valid metric, the
checkpoint with resume (the run folder: :mod:`models.gnn.runs`), the learning curves, the time budget, weight
averaging, the head fine-tuning after Graph Segment Training and the distributed hooks. Each hook is given the
state, the control and the :class:`Trainer` itself as the callbacks' view of the run
(:class:`models.gnn.callbacks.TrainingRun`). What one step and one validation pass do is :mod:`models.gnn.steps`.
"""

from __future__ import annotations

import copy
import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from models.gnn import distributed
from models.gnn.callbacks import TIME_BUDGET_STOP, Callback, default_callbacks
from models.gnn.config import GNNConfig
from models.gnn.footprint import check_fit_memory
from models.gnn.gst import HistoryTable
from models.gnn.losses import loss_function
from models.gnn.net import RankNet
from models.gnn.runs import run_settings, set_rng_state
from models.gnn.state import TrainerControl, TrainState
from models.gnn.steps import (
    Item,
    Slot,
    ValidationCut,
    cosine_schedule,
    evaluate,
    resolve_device,
    seed_everything,
    step_slots,
    training_step,
    validation_draw,
    visit_order,
)

log = logging.getLogger(__name__)

ALL_EPOCHS = "all epochs"
"""How a run that trained every epoch says why it stopped."""


def finished(stopped: str) -> bool:
    """Whether a run that says ``stopped`` ended for good (all epochs, or early stopping), not unsettled or cut short
    by the time budget."""
    return stopped not in ("", TIME_BUDGET_STOP)


@dataclass
class TrainResult:
    """What a run produced: the kept weights (CPU), the best epoch and its metric, and the per-epoch history.

    ``state`` is the best epoch's weights, or the average of the last epochs' when weight averaging
    (``swa_epochs``) kept it (``swa_used``); ``swa_metric`` is that average's valid metric (NaN without a valid
    metric; ``None`` when averaging is off or no epoch finished). Under Graph Segment Training with
    ``gst_finetune_epochs``, ``state`` is those weights with the head fine-tuned when the fine-tuning kept it
    (``finetune_used``); ``finetune_metric`` is the fine-tuned network's valid metric (NaN without a valid metric;
    ``None`` when the fine-tuning is off, skipped or cut by the time budget). ``best_metric`` stays the best epoch's.
    """

    state: dict[str, torch.Tensor]
    best_epoch: int
    best_metric: float
    history: list[dict[str, float]] = field(default_factory=list)
    stopped: str = ""
    swa_metric: float | None = None
    swa_used: bool = False
    finetune_metric: float | None = None
    finetune_used: bool = False

    @classmethod
    def of(cls, state: TrainState, weights: dict[str, torch.Tensor]) -> TrainResult:
        """The outcome ``state`` records, returning ``weights``."""
        return cls(weights, state.best_epoch, state.best_metric, state.history, state.stopped, state.swa_metric,
                   state.swa_used, state.finetune_metric, state.finetune_used)


class Trainer:
    """Trains a :class:`RankNet` per ``cfg`` on ``train_items``, scored each epoch on ``valid_items``.

    Launched on several processes (:mod:`models.gnn.distributed`), every rank builds it with the same arguments:
    each trains its share of every step's graphs and scores its share of ``valid_items``, and every rank returns
    the same result.

    Each callback hook is given :attr:`state` (:class:`~models.gnn.state.TrainState`), :attr:`control`
    (:class:`~models.gnn.state.TrainerControl`) and the trainer itself
    (:class:`models.gnn.callbacks.TrainingRun`); the loop reads the control after the hooks.

    Args:
        cfg: the settings.
        train_items: graphs to learn from (at least two configs each to contribute).
        valid_items: graphs for early stopping; when empty (or without runtimes) the last epoch is kept.
        device: ``auto``, ``cpu``, ``cuda``...
        progress: progress bars (rank 0's only).
        title: names the run in its log lines and on its curves.
        callbacks: the run's callbacks, called in this order (:func:`models.gnn.callbacks.default_callbacks`).
        init: the weights the network starts from (a warm start: ``train.init_from``); ``None`` for a random
            initialisation.

    Raises:
        ValueError: no training graph has two configs with known runtimes, or the settings need more memory than
            the process can have (:func:`models.gnn.footprint.check_fit_memory`).
        models.gnn.distributed.DistributedSetupError: more processes than training graphs, or than
            ``graphs_per_step``.
    """

    def __init__(self, cfg: GNNConfig, train_items: Sequence[Item], valid_items: Sequence[Item], *,
                 device: str | torch.device | None = "auto", progress: bool = True, title: str = "",
                 callbacks: Sequence[Callback] = (), init: Mapping[str, torch.Tensor] | None = None) -> None:
        self.cfg, self.title, self.name = cfg, title, title or cfg.kind
        self.init = init
        self.device = resolve_device(device)
        self.progress = progress
        self.settings = run_settings(cfg)
        self.world, self.main = distributed.world_size(), distributed.is_main()
        # Graphs go to the device once (a no-op on the CPU), not at every step.
        self.usable = [replace(it, segments=[s.to(self.device) for s in it.segments])
                       for it in train_items if it.num_configs >= 2]
        self.valid_items = [replace(validation_draw(it, cfg.train.valid_configs),
                                    segments=[s.to(self.device) for s in it.segments]) for it in valid_items]
        if not self.usable:
            raise ValueError("no training graph has two or more configs with known runtimes")
        if self.world > len(self.usable):
            raise distributed.DistributedSetupError(
                f"{self.name}: {len(self.usable)} training graphs for {self.world} processes, each of which trains "
                f"a graph of its own at every step: launch at most {len(self.usable)}")
        if cfg.train.graphs_per_step < self.world:
            raise distributed.DistributedSetupError(
                f"graphs_per_step={cfg.train.graphs_per_step} is less than the {self.world} processes, each of which "
                f"trains a graph of its own at every step: set graphs_per_step to {self.world} or more "
                f"(--param graphs_per_step={self.world})")
        check_fit_memory(cfg, self.usable, self.valid_items, self.name)
        # Every graph is visited steps_per_graph times per epoch; the last step is topped up to graphs_per_step.
        self.steps_per_epoch = max(1, math.ceil(len(self.usable) * cfg.train.steps_per_graph / cfg.train.graphs_per_step))
        self.total_steps = cfg.train.epochs * self.steps_per_epoch
        self.share = self.world / cfg.train.graphs_per_step  # DistributedDataParallel averages gradients over processes
        self.callbacks = list(callbacks)
        self.restart()
        self.loss_fn = loss_function(cfg.train.loss, cfg.train.pair_tolerance)
        self.table = HistoryTable()
        self.state = TrainState(best_state=self.snapshot())  # one object for the whole run: a resume loads into it
        self.control = TrainerControl()  # a stop, the weights the run returns, the time budget
        self.settled = False
        self.resumed: dict[str, Any] | None = None  # the checkpoint the run resumed from
        self.ddp: torch.nn.Module | None = None  # the graph forward under DistributedDataParallel
        self.started = time.perf_counter()

    # -- the loop ------------------------------------------------------------------------------------------------

    def fit(self) -> TrainResult:
        """Train to the end (all epochs, early stopping, or the time budget) and return the kept weights."""
        self.fire("on_train_begin")
        if finished(self.state.stopped):  # a finished run found in its folder: its outcome, at once
            return TrainResult.of(self.state, self.state.kept_weights())
        self.state.stopped = ""
        self.started = self.clock()
        elapsed_before = self.state.history[-1]["seconds"] if self.state.history else 0.0
        for epoch in range(self.state.epoch + 1, self.cfg.train.epochs + 1):
            self.fire("on_epoch_begin", epoch)
            if self.control.should_training_stop:
                break
            losses = self.train_epoch(epoch)
            validating = self.clock()
            metric = self.validate(epoch) if not self.control.should_training_stop else math.nan
            if self.control.should_training_stop:
                # A partial epoch, or one whose validation the budget cut, is neither recorded nor checkpointed: the
                # checkpoint of the last whole epoch (with its RNG states) stays, so a re-run redoes this epoch and
                # ends as an uninterrupted run would. Without a whole epoch, the weights trained so far are kept.
                if not self.state.history:
                    self.state.best_state = self.snapshot()
                break
            valid_seconds = self.clock() - validating
            every = {i: v for part in distributed.gather(losses) for i, v in part.items()}
            self.state.history.append({
                "epoch": epoch, "train_loss": float(np.mean([every[i] for i in sorted(every)])),
                "valid_metric": metric, "lr": float(self.sched.get_last_lr()[0]),
                "seconds": elapsed_before + self.clock() - self.started, "valid_seconds": valid_seconds})
            self.state.epoch = epoch
            self.state.step += self.steps_per_epoch
            self.fire("on_epoch_end")
            if epoch == self.cfg.train.epochs and not self.control.should_training_stop:
                self.control.stop(ALL_EPOCHS)
            # Settled before the checkpoint, which holds the outcome: a re-run returns it at once.
            if self.control.should_training_stop:
                self.settle()
            self.fire("on_save")
            if self.control.should_training_stop:
                break
        if not self.settled:  # stopped before an epoch's end, or during one
            self.settle()
        return TrainResult.of(self.state, self.control.weights)

    def train_epoch(self, epoch: int) -> dict[int, float]:
        """One epoch's steps (every graph's visits in a shuffled order, fresh configs at each visit); each slot's
        loss by slot index. A callback's stop (:meth:`~models.gnn.state.TrainerControl.stop`) ends it early."""
        self.net.train()
        order = visit_order(self.steps_per_epoch, self.cfg, len(self.usable), self.gen)
        losses: dict[int, float] = {}
        recent: list[float] = []
        bar = tqdm(range(self.steps_per_epoch), desc=f"{self.name} epoch {epoch}/{self.cfg.train.epochs}",
                   disable=not (self.progress and self.main), leave=False)
        for step in bar:
            slots = step_slots(order, step, self.usable, self.cfg, self.gen, self.np_rng)
            done = self.run_step(self.net, slots, self.opt, self.table, ddp=self.ddp)
            self.sched.step()
            losses.update(done)
            recent.extend(done.values())
            bar.set_postfix(loss=f"{np.mean(recent[-50:]):.4f}", refresh=False)  # drawn at the bar's own pace
            self.fire("on_step_end")
            if self.control.should_training_stop:
                break
        return losses

    def validate(self, epoch: int) -> float:
        """The epoch's valid metric; NaN, the run stopped, when the time budget ran out during the pass."""
        budget = self.control.budget
        try:
            return self.evaluate(self.net, out_of_time=budget.out_of_time if budget else None)
        except ValidationCut:
            self.control.stop(TIME_BUDGET_STOP)
            if self.main:
                log.info("%s: the time budget ran out while scoring epoch %d on valid; the epoch is left unscored",
                         self.name, epoch)
            return math.nan

    def settle(self) -> None:
        """Record why the run stopped in its state, and choose the weights it returns: the best epoch's, unless a
        callback's ``on_settle`` replaces them."""
        self.state.stopped = self.control.stop_reason
        self.control.weights = self.state.best_state
        self.fire("on_settle")
        self.settled = True

    def fire(self, event: str, *args: Any) -> None:
        """Call the hook ``event`` of every callback, in order, with the run's state, its control and this trainer
        (then ``args``)."""
        for callback in self.callbacks:
            getattr(callback, event)(self.state, self.control, self, *args)

    # -- what callbacks use (models.gnn.callbacks.TrainingRun) ---------------------------------------------------

    def run_step(self, net: RankNet, slots: Sequence[Slot], opt: torch.optim.Optimizer, table: HistoryTable, *,
                 ddp: torch.nn.Module | None) -> dict[int, float]:
        """One optimiser step of ``net`` (this network, or a callback's copy) over ``slots``
        (:func:`models.gnn.steps.training_step`)."""
        return training_step(net, slots, self.cfg, opt, self.loss_fn, table, device=self.device, share=self.share,
                             ddp=ddp)

    def clock(self) -> float:
        """The run's clock, in seconds (what the history's ``seconds`` and the time budget count)."""
        return time.perf_counter()

    def snapshot(self) -> dict[str, torch.Tensor]:
        """The network's weights now, copied to the CPU."""
        return {k: v.detach().cpu().clone() for k, v in self.net.state_dict().items()}

    def probe(self, weights: dict[str, torch.Tensor]) -> RankNet:
        """A copy of the network holding ``weights``, without gradients (to score, or fine-tune, apart)."""
        probe = copy.deepcopy(self.net)
        probe.load_state_dict(weights)
        probe.zero_grad(set_to_none=True)  # the copy's last training gradients would count in a fine-tuning's clip
        return probe

    def evaluate(self, net: RankNet, out_of_time: Callable[[], bool] | None = None) -> float:
        """``net``'s valid metric (:func:`models.gnn.steps.evaluate`)."""
        return evaluate(net, self.valid_items, self.cfg, self.device, out_of_time=out_of_time)

    def restart(self) -> None:
        """A fresh network (holding :attr:`init` when given), optimiser, schedule and generators, seeded by
        ``cfg.train.seed``."""
        seed_everything(self.cfg.train.seed)
        self.net = self.cfg.make_net()
        if self.init is not None:
            self.net.load_state_dict(self.init)
        self.net = self.net.to(self.device)
        self.opt = torch.optim.AdamW(self.net.parameters(), lr=self.cfg.train.lr, weight_decay=self.cfg.train.weight_decay)
        self.sched = torch.optim.lr_scheduler.LambdaLR(
            self.opt, cosine_schedule(self.total_steps, max(1, self.total_steps // 50)))
        self.gen = torch.Generator().manual_seed(self.cfg.train.seed)
        self.np_rng = np.random.default_rng(self.cfg.train.seed)

    def resume(self, ckpt: dict[str, Any]) -> None:
        """Load a checkpoint: weights, optimiser, schedule, RNG states and the :class:`~models.gnn.state.TrainState`
        (into :attr:`state`, in place).

        Raises:
            RuntimeError, ValueError, KeyError, TypeError, IndexError: it does not fit this network.
        """
        kept = [ckpt["best_state"], *ckpt["swa_states"], *([ckpt["finetune_state"]] if ckpt["finetune_used"] else [])]
        for weights in kept:
            self.net.load_state_dict(weights)  # only checks that the kept weights fit this network
        self.net.load_state_dict(ckpt["model"])
        self.opt.load_state_dict(ckpt["optimizer"])
        self.sched.load_state_dict(ckpt["scheduler"])
        set_rng_state(ckpt["rng"], self.gen, self.np_rng)
        self.state.restore(ckpt, self.steps_per_epoch)


def train(cfg: GNNConfig, train_items: Sequence[Item], valid_items: Sequence[Item], *,
          run_dir: str | Path | None = None, device: str | torch.device | None = "auto", progress: bool = True,
          max_seconds: float | None = None, keep_free: Callable[[float], float] | None = None,
          title: str = "", init: Mapping[str, torch.Tensor] | None = None) -> TrainResult:
    """Train a :class:`RankNet` per ``cfg`` with the default callbacks and return its kept weights.

    Args:
        cfg: the settings (``swa_epochs``, ``gst_finetune_epochs`` and ``patience`` choose callbacks).
        train_items: graphs to learn from.
        valid_items: graphs for early stopping (see :class:`Trainer`).
        run_dir: where checkpoints and curves go (``None``: kept in memory only, no resume); a run with other
            settings found there is moved into a subfolder named by its settings hash, not overwritten.
        device: ``auto``, ``cpu``, ``cuda``...
        progress: progress bars (rank 0's only).
        max_seconds: stop after this much training time (:class:`models.gnn.callbacks.TimeBudget`); the run stays
            resumable. Without a scored epoch the weights trained so far are returned.
        keep_free: with ``max_seconds``, the seconds to keep free at its end given the last validation pass's
            seconds (0 before the first): the time the caller's predictions will take.
        title: a title for the log lines and the curves plot.
        init: the weights the network starts from (see :class:`Trainer`); ``None`` for a random initialisation.
    """
    run = Path(run_dir) if run_dir is not None else None
    callbacks = default_callbacks(cfg, run_dir=run, max_seconds=max_seconds, keep_free=keep_free)
    return Trainer(cfg, train_items, valid_items, device=device, progress=progress, title=title,
                   callbacks=callbacks, init=init).fit()
