"""A wall-clock budget for a whole run, shared out across models and collections.

``fastslow submit --time-budget 8h`` gives the pipeline :class:`TimeBudget`: models run cheapest first, each gets a
share of what is left in proportion to its cost weight (:data:`models.registry.COST_WEIGHTS`), and within a model
each collection gets a share of the model's time in proportion to its size (train graphs and nodes, read from the
npz headers). Time a model or collection leaves unused rolls over to the next ones. A model that reaches its share
stops training and keeps its best weights; a model that finds no time left at all is skipped. A part of the budget
(:data:`RESERVE_FRACTION`) is kept for the ensemble, writing and scoring.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from typing import TypeVar

K = TypeVar("K", bound=Hashable)

RESERVE_FRACTION = 0.05
"""Share of the budget kept for the ensemble, the submission and the offline score."""
MIN_RESERVE_SECONDS = 5.0
FIT_FRACTION = 0.8
"""Share of a (model, collection) slot spent fitting at most; the rest is left for predicting the valid and test
splits. A model that can forecast its prediction time (the GNN, from its validation passes) is also given the slot's
end (``predict_by``) and stops fitting earlier when its forecast needs more than the rest."""

_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_DURATION = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*", re.IGNORECASE)


def parse_duration(text: str) -> float:
    """Seconds from ``8h``, ``90m``, ``45s``, ``1h30m`` or a bare number of seconds.

    Raises:
        ValueError: anything else, or a duration that is not positive.
    """
    pos, total = 0, 0.0
    parts = 0
    while pos < len(text):
        m = _DURATION.match(text, pos)
        if m is None or m.end() == pos:
            break
        total += float(m.group(1)) * _UNITS[(m.group(2) or "s").lower()]
        pos, parts = m.end(), parts + 1
    if parts == 0 or pos != len(text) or not total > 0:
        raise ValueError(f"time budget: expected a positive duration such as 8h, 90m, 1h30m or 3600; found {text!r}")
    return total


def format_seconds(seconds: float) -> str:
    """``2h05m``, ``4m10s`` or ``12s``."""
    if math.isinf(seconds):
        return "unlimited"
    s = max(0, int(round(seconds)))
    if s >= 3600:
        return f"{s // 3600}h{(s % 3600) // 60:02d}m"
    if s >= 60:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s}s"


@dataclass
class TimeBudget:
    """Seconds allowed for a run, counted from construction.

    Args:
        seconds: the whole budget; ``None`` for no limit.
    """

    seconds: float | None = None
    started: float = field(default_factory=time.monotonic)

    @property
    def limited(self) -> bool:
        return self.seconds is not None

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def remaining(self) -> float:
        """Seconds left (``inf`` without a limit; never negative)."""
        return math.inf if self.seconds is None else max(0.0, self.seconds - self.elapsed())

    def reserve(self) -> float:
        """Seconds kept back for the ensemble, the submission and scoring."""
        return 0.0 if self.seconds is None else max(MIN_RESERVE_SECONDS, RESERVE_FRACTION * self.seconds)

    def spendable(self) -> float:
        """Seconds left for fitting and predicting models."""
        return max(0.0, self.remaining() - self.reserve())

    def share(self, weight: float, remaining_weights: float) -> float:
        """A slot of what is spendable now: ``spendable * weight / remaining_weights`` (``inf`` without a limit)."""
        if self.seconds is None:
            return math.inf
        if remaining_weights <= 0:
            return self.spendable()
        return self.spendable() * min(1.0, weight / remaining_weights)

    def describe(self) -> str:
        if self.seconds is None:
            return "no time budget"
        return f"{format_seconds(self.remaining())} of {format_seconds(self.seconds)} left"


def concurrent_slots(seconds: float, weights: Mapping[K, float], jobs: int, committed: float = 0.0
                     ) -> dict[K, float]:
    """Each part's slot of ``seconds`` when ``jobs`` parts run at once: ``jobs`` workers hold ``jobs * seconds`` in
    all, less the ``committed`` seconds parts already running still hold of their slots, shared in proportion to
    ``weights``, except that no part may run past the end: a part whose share would exceed ``seconds`` gets
    ``seconds``, and what it leaves of its share goes to the others, again in proportion (``inf`` without a limit;
    equal shares where every weight is 0)."""
    if jobs < 1:
        raise ValueError(f"jobs must be at least 1, got {jobs}")
    if math.isinf(seconds):
        return {k: math.inf for k in weights}
    slots: dict[K, float] = {}
    capacity = max(0.0, jobs * seconds - committed)
    left = dict(weights) if sum(weights.values()) > 0 else {k: 1.0 for k in weights}
    while left:
        total = sum(left.values())
        full = [k for k, w in left.items() if total > 0 and capacity * w / total >= seconds]
        if not full:
            slots.update({k: capacity * w / total if total > 0 else 0.0 for k, w in left.items()})
            break
        for k in full:
            slots[k] = seconds
            capacity -= seconds
            del left[k]
    return {k: slots[k] for k in weights}
