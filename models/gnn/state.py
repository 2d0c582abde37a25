"""What a GNN training run holds and what its callbacks ask of it, in a module below both the loop
(:mod:`models.gnn.train`) and the callbacks (:mod:`models.gnn.callbacks`), as huggingface transformers'
``TrainerState`` and ``TrainerControl`` sit below its ``Trainer`` and ``TrainerCallback``:

- :class:`TrainState`: where the run stands (its progress, history and the weights it keeps), checkpointed whole
  after every finished epoch;
- :class:`TrainerControl`: what the callbacks ask of the loop, which reads it after their hooks: a stop and its
  reason, the weights the run returns, the time budget to ask.

Every hook is given the run's state and control, then a view of the rest of the run
(:class:`models.gnn.callbacks.TrainingRun`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Any, Protocol

import torch

from models.gnn.steps import average_states


@dataclass
class TrainState:
    """Where a run stands, checkpointed whole (with the weights, optimiser, schedule and RNG states) after every
    finished epoch.

    Attributes:
        epoch: the last finished epoch (0 before the first).
        step: optimiser steps taken in finished epochs.
        history: one row per finished epoch (:data:`models.gnn.runs.CURVE_COLUMNS`).
        best_state, best_metric, best_epoch: the best epoch's weights (CPU) and valid metric.
        bad_epochs: finished epochs since the best one.
        stopped: why the run stopped (``""`` while it runs): the reason its control gave
            (:attr:`TrainerControl.stop_reason`), recorded when the run settles.
        swa_states, swa_metric, swa_used: weight averaging's kept weights, its average's valid metric, and whether
            the average is what the run returns.
        finetune_state, finetune_metric, finetune_used: the head fine-tuning's weights (when kept), valid metric,
            and whether they are what the run returns.
    """

    epoch: int = 0
    step: int = 0
    history: list[dict[str, float]] = field(default_factory=list)
    best_state: dict[str, torch.Tensor] = field(default_factory=dict)
    best_metric: float = -math.inf
    best_epoch: int = 0
    bad_epochs: int = 0
    stopped: str = ""
    swa_states: list[dict[str, torch.Tensor]] = field(default_factory=list)
    swa_metric: float | None = None
    swa_used: bool = False
    finetune_state: dict[str, torch.Tensor] = field(default_factory=dict)
    finetune_metric: float | None = None
    finetune_used: bool = False

    def as_dict(self) -> dict[str, Any]:
        """The fields as a checkpoint holds them (the values themselves, not copies)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_checkpoint(cls, ckpt: dict[str, Any], steps_per_epoch: int) -> TrainState:
        """The state a checkpoint holds (one written before ``step`` was kept counts it from its epochs)."""
        values = {f.name: ckpt[f.name] for f in fields(cls) if f.name in ckpt}
        values.setdefault("step", ckpt["epoch"] * steps_per_epoch)
        return cls(**values)

    def restore(self, ckpt: dict[str, Any], steps_per_epoch: int) -> None:
        """Take the state a checkpoint holds (:meth:`from_checkpoint`: a field it lacks takes its default) in place,
        so that whoever holds this object (the trainer, a callback) sees it."""
        loaded = self.from_checkpoint(ckpt, steps_per_epoch)
        for f in fields(self):
            setattr(self, f.name, getattr(loaded, f.name))

    def kept_weights(self) -> dict[str, torch.Tensor]:
        """The weights a settled run returns: fine-tuned, averaged, or the best epoch's."""
        if self.finetune_used:
            return self.finetune_state
        return average_states(self.swa_states) if self.swa_used else self.best_state


class Budget(Protocol):
    """A time budget as the loop and the callbacks ask it (:class:`models.gnn.callbacks.TimeBudget` is one)."""

    def out_of_time(self, reserve: float = 0.0) -> bool:
        """Out of time on this rank's clock, keeping ``reserve`` seconds (no collective: asked inside a validation
        pass)."""
        ...

    def spent(self, reserve: float = 0.0) -> bool:
        """Out of time on any rank, keeping ``reserve`` seconds."""
        ...


@dataclass(eq=False)
class TrainerControl:
    """What the callbacks ask of the training loop, which reads it after their hooks; never checkpointed.

    Attributes:
        stop_reason: why the run is to stop (``""`` while it goes on): after the current step, or before the epoch
            when asked from ``on_epoch_begin``. :attr:`TrainState.stopped` records it when the run settles.
        weights: the weights the run returns: the best epoch's when it settles, unless an ``on_settle`` hook
            replaces them.
        budget: the time budget a callback registered (``None``: no limit), asked by :meth:`spent` and by each
            validation pass.
    """

    stop_reason: str = ""
    weights: dict[str, torch.Tensor] = field(default_factory=dict)
    budget: Budget | None = None

    @property
    def should_training_stop(self) -> bool:
        """Whether a stop was asked for."""
        return bool(self.stop_reason)

    def stop(self, why: str) -> None:
        """End the run after the current step (or before the epoch, from ``on_epoch_begin``), saying ``why``."""
        self.stop_reason = why

    def spent(self, reserve: float = 0.0) -> bool:
        """Whether the time budget (when there is one) is out on any rank, keeping ``reserve`` seconds."""
        return self.budget is not None and self.budget.spent(reserve)
