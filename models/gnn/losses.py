"""Ranking losses over the configs of one graph. Scores: lower = predicted faster; targets: runtimes (lower = faster).

All losses take ``scores [B]`` and ``runtimes [B]`` of one graph and return a scalar. Pairs of equal runtime carry
no order and are ignored; a graph with fewer than two distinct runtimes gives a zero loss that still has a
gradient graph (so a training step never breaks on it). The pairwise losses also take a ``tolerance``: a pair
whose slower runtime is within that fraction of the faster one (``r_j <= r_i * (1 + tolerance)``) counts as a
tie, an order the measurement noise may have made (see :func:`loss_function`).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import torch

LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def _ordered_pairs(runtimes: torch.Tensor, tolerance: float = 0.0) -> torch.Tensor:
    """Boolean ``[B, B]``: ``True`` at ``(i, j)`` when config ``i`` is strictly faster than config ``j`` (with a
    ``tolerance``, by more than that fraction of ``i``'s runtime)."""
    if tolerance:
        r = runtimes.double()
        return r[:, None] * (1.0 + tolerance) < r[None, :]
    return runtimes[:, None] < runtimes[None, :]


def pairwise_hinge(scores: torch.Tensor, runtimes: torch.Tensor, margin: float = 1.0,
                   tolerance: float = 0.0) -> torch.Tensor:
    """Mean over ordered pairs (``i`` faster than ``j``, beyond ``tolerance``) of ``max(0, margin - (s_j - s_i))``.

    The TpuGraphs baseline's and the 1st-place team's pairwise hinge: the slower config's score must exceed the
    faster one's by ``margin``.
    """
    pairs = _ordered_pairs(runtimes, tolerance)
    if not pairs.any():
        return scores.sum() * 0.0
    gap = scores[None, :] - scores[:, None]  # (i, j) -> s_j - s_i
    return torch.relu(margin - gap)[pairs].mean()


def margin_ranking(scores: torch.Tensor, runtimes: torch.Tensor, scale: float = 1.0,
                   tolerance: float = 0.0) -> torch.Tensor:
    """Margin ranking with a margin that grows with the runtime gap.

    Mean over ordered pairs (beyond ``tolerance``) of ``max(0, m_ij - (s_j - s_i))`` with
    ``m_ij = scale * (log r_j - log r_i)``: a pair of nearly equal runtimes asks for a nearly equal score, a pair far apart for a wide gap (unlike
    :func:`pairwise_hinge`, whose margin is the same for every pair).
    """
    pairs = _ordered_pairs(runtimes, tolerance)
    if not pairs.any():
        return scores.sum() * 0.0
    log_r = torch.log(runtimes.double().clamp_min(1e-12)).to(scores.dtype)
    margin = scale * (log_r[None, :] - log_r[:, None])
    gap = scores[None, :] - scores[:, None]
    return torch.relu(margin - gap)[pairs].mean()


def list_mle(scores: torch.Tensor, runtimes: torch.Tensor) -> torch.Tensor:
    """ListMLE: the negative log-likelihood of the true order under the Plackett-Luce model, per config.

    With utilities ``u = -scores`` and the configs sorted fastest first (``pi``), the loss is
    ``(1 / B) * sum_i [log sum_{k >= i} exp(u_pi(k)) - u_pi(i)]``. Ties are broken by position (stable sort).
    """
    if scores.numel() < 2:
        return scores.sum() * 0.0
    order = torch.argsort(runtimes, stable=True)
    u = -scores[order]
    # log sum_{k >= i} exp(u_k): a reversed cumulative logsumexp.
    tail = torch.logcumsumexp(u.flip(0), dim=0).flip(0)
    return (tail - u).mean()


LOSSES: dict[str, LossFn] = {
    "hinge": pairwise_hinge,
    "listmle": list_mle,
    "margin": margin_ranking,
}


def get_loss(name: str) -> LossFn:
    """The loss registered as ``name`` (``hinge``, ``listmle`` or ``margin``)."""
    if name not in LOSSES:
        raise ValueError(f"unknown loss {name!r}; expected one of {', '.join(sorted(LOSSES))}")
    return LOSSES[name]


PAIRWISE: frozenset[str] = frozenset({"hinge", "margin"})
"""The losses over pairs of configs, which take a tie ``tolerance``."""


def loss_function(name: str, tolerance: float = 0.0) -> LossFn:
    """The loss ``name`` (:func:`get_loss`), with pairs within ``tolerance`` of each other's runtime counted as ties.

    Raises:
        ValueError: an unknown loss, a negative or non-finite tolerance, or a tolerance for a loss that is not
            over pairs (ListMLE orders every config).
    """
    fn = get_loss(name)
    if not (math.isfinite(tolerance) and tolerance >= 0):
        raise ValueError(f"pair_tolerance must be a finite fraction >= 0, got {tolerance!r}")
    if not tolerance:
        return fn
    if name not in PAIRWISE:
        raise ValueError(f"pair_tolerance applies to the pairwise losses ({', '.join(sorted(PAIRWISE))}), "
                         f"not to {name!r}")
    return functools.partial(fn, tolerance=tolerance)
