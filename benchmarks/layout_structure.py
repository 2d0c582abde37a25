"""What decides a layout graph's runtimes: the same figures for the real graph and for a world's graphs.

Run it as::

    python -m benchmarks.layout_structure                       # the real graph and the demo world
    python -m benchmarks.layout_structure --data ROOT [ROOT ...] --collection layout:xla:random

For each graph, over its distinct configs (repeats averaged; at most ``--max-configs``, a seeded sample):

- ``groups``: configurable nodes whose choices are equal in every config count as one (the real search ties nodes);
- ``additive``: the share of the variance of runtime / best that a linear fit on one-hot choices per group explains,
  and ``tau-add`` the Kendall tau of that fit's ranking (what a model that knew each choice's cost could reach);
- ``output``: the same share with each node's choice reduced to its output layout (slots 0-5): near ``additive``
  when input and kernel layouts do not matter;
- ``top``, ``2nd``: the largest and second-largest effect of one group (its worst choice's coefficient less its best
  one's) over the best runtime, ``>1%``: the groups whose effect exceeds 1% of the best;
- ``<0.2%``, ``<5%``: the share of configs within 0.2% and 5% of the best, ``p90``: the 90th percentile of runtime /
  best.

The world's line is the median over its graphs of the collection and split.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from competition.collections import Collection, Split
from competition.metrics import kendall_tau
from competition.reader import LayoutGraph, find_data_root, list_graphs, load_graph

FIGURES = ("groups", "additive", "tau_add", "output", "top", "second", "above_1pct", "within_02", "within_5",
           "p90")
HEADERS = ("groups", "additive", "tau-add", "output", "top", "2nd", ">1%", "<0.2%", "<5%", "p90")


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


def graph_structure(graph: LayoutGraph, max_configs: int = 6000) -> Structure:
    """:func:`structure` of a graph file's configs."""
    return structure(graph.config_features(), graph.config_runtime, max_configs)


def world_structures(root: Path, collection: Collection, split: Split, limit: int | None,
                     max_configs: int) -> list[Structure]:
    """:func:`graph_structure` of each of the first ``limit`` graphs of a world's collection and split."""
    data = find_data_root(root)
    return [graph_structure(load_graph(p, collection), max_configs)
            for p in list_graphs(data, collection, split)[:limit]]


def format_row(label: str, s: Structure | dict[str, float]) -> str:
    d = asdict(s) if isinstance(s, Structure) else s
    return f"{label:34s}" + "".join(f"{d[f]:>9.3f}" if isinstance(d[f], float) else f"{d[f]:>9d}" for f in FIGURES)


def median(structures: Sequence[Structure]) -> dict[str, float]:
    """The median of each figure over graphs."""
    return {f: float(np.median([getattr(s, f) for s in structures])) for f in FIGURES}


def main(argv: Sequence[str] | None = None) -> int:
    from competition.real_layout import restore_arrays

    parser = argparse.ArgumentParser(prog="python -m benchmarks.layout_structure", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--data", nargs="*", default=["data/synthetic-demo"], metavar="ROOT",
                        help="world roots whose graphs are measured beside the real one")
    parser.add_argument("--collection", default=Collection.LAYOUT_XLA_RANDOM.value,
                        choices=[c.value for c in Collection if c.is_layout], help="the worlds' collection")
    parser.add_argument("--split", default=Split.TRAIN.value, choices=[s.value for s in Split if s != Split.TEST],
                        help="the worlds' split")
    parser.add_argument("--limit", type=int, default=None, metavar="N", help="the first N graphs of each world")
    parser.add_argument("--max-configs", type=int, default=6000, metavar="N",
                        help="at most N distinct configs of a graph are fitted (a seeded sample)")
    args = parser.parse_args(argv)
    arrays = restore_arrays()
    print(f"{'graph':34s}" + "".join(f"{h:>9s}" for h in HEADERS))
    print(format_row("real: alexnet (layout:xla:random)", structure(arrays["node_config_feat"],
                                                                    arrays["config_runtime"], args.max_configs)))
    for root in args.data:
        found = world_structures(Path(root), Collection(args.collection), Split(args.split), args.limit,
                                 args.max_configs)
        if not found:
            print(f"{root}: no {args.collection} {args.split} graphs", file=sys.stderr)
            continue
        print(format_row(f"world {Path(root).name} (median of {len(found)})", median(found)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
