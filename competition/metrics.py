"""Competition metrics, per graph.

Conventions: a *score* array gives one value per config where lower means predicted faster; *runtimes* are the
measured (or hidden) runtimes of the same configs, lower is faster.

* Layout collections: Kendall tau-b (``scipy.stats.kendalltau``) between the predicted order and the runtimes.
* Tile: ``2 - min(runtime of the first k predicted) / min(runtime of all)`` with k = 5: 1.0 is perfect.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
from scipy.stats import kendalltau

TILE_TOP_K = 5


def predicted_order(scores: npt.ArrayLike) -> npt.NDArray[np.int64]:
    """Config indices fastest first: ascending score, ties broken by index (a stable order)."""
    return np.argsort(np.asarray(scores, dtype=np.float64), kind="stable").astype(np.int64)


def kendall_tau(scores: npt.ArrayLike, runtimes: npt.ArrayLike) -> float:
    """Kendall tau-b between predicted scores and runtimes (both lower = faster).

    A perfect ranking gives 1.0 and the reversed one -1.0. Degenerate inputs (fewer than two configs, or a
    constant side) give 0.0 rather than NaN, so that averages stay defined.
    """
    s = np.asarray(scores, dtype=np.float64)
    r = np.asarray(runtimes, dtype=np.float64)
    if s.shape != r.shape:
        raise ValueError(f"scores {s.shape} and runtimes {r.shape} differ in shape")
    if s.size < 2:
        return 0.0
    tau = kendalltau(s, r).statistic
    return 0.0 if np.isnan(tau) else float(tau)


def kendall_tau_of_order(order: npt.ArrayLike, runtimes: npt.ArrayLike) -> float:
    """Kendall tau of a submitted permutation (fastest first) against the runtimes."""
    order = np.asarray(order, dtype=np.int64)
    ranks = np.empty(order.size, dtype=np.float64)
    ranks[order] = np.arange(order.size)
    return kendall_tau(ranks, runtimes)


def top_k_score(order: npt.ArrayLike, runtimes: npt.ArrayLike, k: int = TILE_TOP_K) -> float:
    """``2 - min(runtimes[order[:k]]) / min(runtimes)``: 1.0 when the best config is among the first k."""
    order = np.asarray(order, dtype=np.int64)
    r = np.asarray(runtimes, dtype=np.float64)
    if r.size == 0:
        raise ValueError("no configs to score")
    best = float(r.min())
    if best <= 0:
        raise ValueError("runtimes must be positive to compute the slowdown")
    return float(2.0 - r[order[:k]].min() / best)


def top_k_error(order: npt.ArrayLike, runtimes: npt.ArrayLike, k: int) -> float:
    """Relative slowdown of the best of the first k predicted configs: ``1 - top_k_score`` (0 is perfect)."""
    return 1.0 - top_k_score(order, runtimes, k)

