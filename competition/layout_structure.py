"""What decides a layout graph's runtimes, in a few figures that a real graph and a world's graphs both give.

Over a graph's distinct configs (repeats averaged; a seeded sample of at most ``max_configs``):

- ``groups``: configurable nodes whose choices are equal in every config count as one (the real search ties nodes);
- ``additive``: the share of the variance of runtime / best that a linear fit on one-hot choices per group explains,
  and ``tau_add`` the Kendall tau of that fit's ranking (what a model that knew each choice's cost could reach);
- ``output``: the same share with each node's choice reduced to its output layout (slots 0-5): near ``additive``
  when input and kernel layouts do not matter;
- ``top``, ``second``: the largest and second-largest effect of one group (its worst choice's coefficient less its
  best one's) over the best runtime; ``above_1pct``: the groups whose effect exceeds 1% of the best;
- ``within_02``, ``within_5``: the share of configs within 0.2% and 5% of the best; ``p90``: the 90th percentile of
  runtime / best.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from competition.metrics import kendall_tau
from competition.reader import LayoutGraph

FIGURES = ("groups", "additive", "tau_add", "output", "top", "second", "above_1pct", "within_02", "within_5",
           "p90")


@dataclass(frozen=True)
class Structure:
    """The figures of one graph (see the module's docstring)."""

    nodes: int
    configs: int
    groups: int
    additive: float
    tau_add: float
    output: float
    top: float
    second: float
    above_1pct: int
    within_02: float
    within_5: float
    p90: float


def _codes(rows: npt.NDArray[np.float32]) -> npt.NDArray[np.int64]:
    """``[C, K]`` per node the index of its row among the node's distinct rows (``rows`` ``[C, K, S]``)."""
    out = np.empty(rows.shape[:2], dtype=np.int64)
    for k in range(rows.shape[1]):
        out[:, k] = np.unique(rows[:, k], axis=0, return_inverse=True)[1].reshape(-1)
    return out


def _one_hot(codes: npt.NDArray[np.int64]) -> tuple[npt.NDArray[np.float64], list[npt.NDArray[np.int64]]]:
    blocks, columns, start = [], [], 0
    for k in range(codes.shape[1]):
        m = int(codes[:, k].max()) + 1
        blocks.append(np.eye(m)[codes[:, k]])
        columns.append(np.arange(start, start + m))
        start += m
    return np.concatenate(blocks, axis=1), columns


def _fit(x: npt.NDArray[np.float64], y: npt.NDArray[np.float64]) -> tuple[npt.NDArray[np.float64], float]:
    w, *_ = np.linalg.lstsq(x, y, rcond=None)
    pred = x @ w
    total = float(((y - y.mean()) ** 2).sum())
    return w, (1.0 - float(((y - pred) ** 2).sum()) / total) if total > 0 else 1.0


def structure(config_feat: npt.ArrayLike, runtime: npt.ArrayLike, max_configs: int = 6000,
              seed: int = 0) -> Structure:
    """The figures of one graph's configs.

    Args:
        config_feat: ``[C, NC, 18]`` the configs' ``node_config_feat``.
        runtime: ``[C]`` their runtimes (ns); repeats of a config are averaged.
        max_configs: at most this many distinct configs (a seeded sample) are fitted.
        seed: the sample's seed.
    """
    feat = np.asarray(config_feat, dtype=np.float32)
    rt = np.asarray(runtime, dtype=np.float64)
    _, first, group = np.unique(feat.reshape(len(feat), -1), axis=0, return_index=True, return_inverse=True)
    group = group.reshape(-1)
    mean = np.bincount(group, weights=rt) / np.bincount(group)
    feat = feat[first]
    if len(mean) > max_configs:
        keep = np.sort(np.random.default_rng(seed).choice(len(mean), max_configs, replace=False))
        feat, mean = feat[keep], mean[keep]
    y = mean / mean.min()
    codes = _codes(feat)
    _, tied = np.unique(codes.T, axis=0, return_index=True)
    tied = np.sort(tied)
    x, columns = _one_hot(codes[:, tied])
    w, additive = _fit(x, y)
    effects = np.sort([float(np.ptp(w[c])) for c in columns])[::-1] if columns else np.zeros(0)
    out_codes = _codes(feat[:, :, :6])
    _, out_tied = np.unique(out_codes.T, axis=0, return_index=True)
    _, output = _fit(_one_hot(out_codes[:, np.sort(out_tied)])[0], y)
    return Structure(nodes=feat.shape[1], configs=len(y), groups=len(tied), additive=additive,
                     tau_add=kendall_tau(x @ w, y), output=output,
                     top=float(effects[0]) if effects.size else 0.0,
                     second=float(effects[1]) if effects.size > 1 else 0.0,
                     above_1pct=int((effects > 0.01).sum()), within_02=float((y <= 1.002).mean()),
                     within_5=float((y <= 1.05).mean()), p90=float(np.quantile(y, 0.9)))


def graph_structure(graph: LayoutGraph, max_configs: int = 6000, seed: int = 0) -> Structure:
    """:func:`structure` of a graph file's configs: at most ``max_configs`` rows (a seeded sample) are read, so a
    real-sized graph never holds all its configs x nodes in memory."""
    n = graph.num_configs
    rows = (np.arange(n) if n <= max_configs
            else np.sort(np.random.default_rng(seed).choice(n, max_configs, replace=False)))
    return structure(graph.config_features(rows), graph.config_runtime[rows], max_configs, seed)


