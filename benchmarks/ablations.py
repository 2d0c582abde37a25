"""The ablation table of the GNN: one idea at a time against the default `gnn-attn`, on several world seeds.

Each variant is fitted on the train split of every world (early stopping on valid, as the pipeline does) and scored
on the test split through the world's hidden runtimes; the table gives, per layout collection, the mean over the
worlds, the standard deviation, and the percentage of the oracle (per world, then averaged), and per variant the
difference to the default with its spread over the worlds (the mean of the per-world differences, which is the
fair comparison since every variant sees the same worlds)::

    python -m benchmarks.ablations --scale demo --world-seeds 0 1
    python -m benchmarks.ablations --scale bench --world-seeds 0 1 --variants default configs-64 listmle

A variant keeps what helps when its gain is larger than its spread. Worlds are generated (or reused) under
``data/synthetic-<scale>[-seed<k>]`` (:func:`fastslow.worlds.world_dir`); nothing is written to ``runs/``.
"""

from __future__ import annotations

import argparse
import math
import re
import sys
import textwrap
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from competition.collections import Collection, Split
from competition.dataroot import find_data_root
from competition.dataset import Dataset
from competition.labels import SplitLabels, load_labels
from competition.protocol import DEFAULT_PROTOCOL
from competition.stats import oracle_scores
from competition.submission_scoring import score_predictions
from fastslow.fitting import predict_split
from fastslow.worlds import world_dir

LAYOUT = [c for c in Collection if not c.is_tile]


@dataclass(frozen=True)
class Variant:
    """One line of the table.

    Attributes:
        name: its label.
        help: what it changes.
        model: the registered model fitted.
        params: hyper-parameters on top of the model's defaults (every collection).
        with_gbdt: add `gbdt` and combine both with the pipeline's ensemble (weights fitted on valid).
    """

    name: str
    help: str
    model: str = "gnn-attn"
    params: Mapping[str, Any] = field(default_factory=dict)
    with_gbdt: bool = False


VARIANTS: dict[str, Variant] = {v.name: v for v in (
    Variant("default", "gnn-attn with its defaults"),
    Variant("no-attention", "the plain GNN (no cross-configuration attention)", model="gnn"),
    Variant("configs-16", "16 configs per graph and step", params={"configs_per_graph": 16}),
    Variant("configs-32", "32 configs per graph and step (half the layout default's; tile's default)",
            params={"configs_per_graph": 32}),
    Variant("configs-64", "64 configs per graph and step (the layout default)", params={"configs_per_graph": 64}),
    Variant("configs-128", "128 configs per graph and step (deduplicated steps cost less than twice 64's)",
            params={"configs_per_graph": 128}),
    Variant("listmle", "ListMLE loss instead of the pairwise hinge", params={"loss": "listmle"}),
    Variant("hops2-layers4", "deeper pruning (2 hops) with 4 layers", params={"hops": 2, "layers": 4}),
    Variant("gst", "Graph Segment Training, segments of 1,000 nodes", params={"segment_size": 1000}),
    Variant("hinge", "the pairwise hinge loss (the layout default; tile's is ListMLE)", params={"loss": "hinge"}),
    Variant("layers-4", "4 message-passing layers (the default's 3) at the default's 1-hop pruning",
            params={"layers": 4}),
    Variant("hidden-64", "64 channels (layout's default 32; tile's default)", params={"hidden": 64}),
    Variant("hidden-128", "128 channels (tile's default 64, layout's 32)", params={"hidden": 128}),
    Variant("late-join", "tile: the config joined after pooling instead of to every node", params={"join": "late"}),
    Variant("epochs-6", "6 epochs (at most; half the tile default's)", params={"epochs": 6}),
    Variant("epochs-12", "12 epochs (at most; early stopping as by default; the tile default)",
            params={"epochs": 12}),
    Variant("lr-3e-3", "peak learning rate 3e-3 (tile's default 1e-3, layout's 1e-2)", params={"lr": 3e-3}),
    Variant("epochs-20", "20 epochs (at most; early stopping as by default)", params={"epochs": 20}),
    Variant("no-dim-tokens", "config slots without the sizes of the dimensions they name (the layout default has "
            "them)", params={"dim_tokens": False}),
    Variant("wd-1e-2", "AdamW weight decay 1e-2 (the default's 1e-5 barely regularises; bench xla fits reach tau "
            "0.81 on their train graphs, 0.63-0.68 on valid and test)", params={"weight_decay": 1e-2}),
    Variant("wd-1e-1", "AdamW weight decay 1e-1", params={"weight_decay": 1e-1}),
    Variant("train-configs-4000", "4,000 configs cached per training graph instead of 1,000 (every config of a "
            "bench graph)", params={"train_configs": 4000}),
    Variant("margin", "pairwise margin ranking whose margin grows with the log-runtime gap, instead of the hinge",
            params={"loss": "margin"}),
    Variant("steps-4", "4 steps per graph and epoch (half the layout kind's default)",
            params={"steps_per_graph": 4}),
    Variant("steps-8", "8 steps per graph and epoch (the layout kind's default)", params={"steps_per_graph": 8}),
    Variant("steps-16", "16 steps per graph and epoch (twice the layout kind's default)",
            params={"steps_per_graph": 16}),
    Variant("steps-32", "32 steps per graph and epoch (4 times the layout kind's default; xla:random's default)",
            params={"steps_per_graph": 32}),
    Variant("steps-64", "64 steps per graph and epoch (twice xla:random's default)", params={"steps_per_graph": 64}),
    # the same with training seed 1: a second pair per world, so that a gain is told from one seed's luck
    *(Variant(f"steps-{n}-seed-1", f"{n} steps per graph and epoch with training seed 1",
              params={"steps_per_graph": n, "seed": 1}) for n in (8, 32, 64)),
    Variant("swa-3", "stochastic weight averaging of the last 3 epochs", params={"swa_epochs": 3}),
    Variant("full-schedule", "every epoch of the cosine schedule (patience 10: no early stop; the best epoch kept)",
            params={"patience": 10}),
    Variant("swa-3-full-schedule", "every epoch, then the average of the last 3 (low learning rate) epochs",
            params={"patience": 10, "swa_epochs": 3}),
    Variant("refit", "refit on train + valid for the best epoch count; the refit scores test", params={"refit": True}),
    Variant("seeds-3", "a seed ensemble: 3 networks (seeds 0, 1, 2), their rank-normalised scores averaged",
            params={"seeds": 3}),
    Variant("seeds-5", "a seed ensemble of 5 networks (seeds 0 to 4)", params={"seeds": 5}),
    Variant("seeds-1", "one network (no seed ensemble)", params={"seeds": 1}),
    # screening at one network's cost (against seeds-1): what helps there is then measured as an ensemble; more
    # one-network variants are derived from the variants above (ONE_NET_OF, below)
    *(Variant(f"dropout-{p}-one-net", f"dropout {p} in every layer and the head (the default's 0.0), one network",
              params={"dropout": p, "seeds": 1}) for p in (0.1, 0.2)),
    Variant("hidden-16-one-net", "16 channels (layout's default 32), one network", params={"hidden": 16, "seeds": 1}),
    Variant("layers-2-one-net", "2 message-passing layers (the default's 3), one network",
            params={"layers": 2, "seeds": 1}),
    Variant("pair-tol-1e-3-one-net", "pairwise hinge with pairs within a fraction 1e-3 of each other's runtime "
            "counted as ties (label noise on default-search graphs), one network",
            params={"pair_tolerance": 1e-3, "seeds": 1}),
    Variant("seed-1", "the default with training seed 1 (a control: its difference is training noise)",
            params={"seed": 1}),
    Variant("seed-2", "the default with training seed 2 (a control, as seed-1)", params={"seed": 2}),

    Variant("ensemble-gbdt", "the pipeline's ensemble of gnn-attn and gbdt (weights fitted on valid)",
            with_gbdt=True),
)}


def one_net(base: Variant) -> Variant:
    """``base`` screened at one network's cost: its settings plus ``seeds=1`` (the xla collections' default is a seed
    ensemble of 3), named ``<base>-one-net``; such screens are compared with ``seeds-1`` (``--baseline seeds-1``)."""
    return replace(base, name=f"{base.name}-one-net", help=f"{base.help}, one network",
                   params={**base.params, "seeds": 1})


ONE_NET_OF: tuple[str, ...] = (
    "steps-8", "configs-16", "configs-32", "configs-128", "layers-4", "epochs-20", "hops2-layers4", "no-attention",
    "seed-1",
    # the ideas the issue names, screened again at the real xla train counts
    "no-dim-tokens", "listmle", "gst", "swa-3", "refit",
)
"""The variants that also run as ``<name>-one-net`` (:func:`one_net`)."""
VARIANTS.update((v.name, v) for v in (one_net(VARIANTS[name]) for name in ONE_NET_OF))


_FITS: dict[tuple[str, str, str, str], dict[str, dict[str, np.ndarray]]] = {}
"""Predictions per (world, model, params, collections): a fit that several variants share (the default's is the
seed ensemble's first member and the ensemble's GNN member) is made once per world."""


def _fit_predict(model: str, root: Any, collections: Sequence[Collection], params: Mapping[str, Any],
                 progress: bool) -> dict[str, dict[str, np.ndarray]]:
    from models.registry import ModelParams

    key = (str(root.root), model, repr(sorted(params.items())), " ".join(c.value for c in collections))
    if key not in _FITS:
        common = {**params, **({"runs_dir": None} if model.startswith("gnn") else {})}
        _FITS[key] = predict_split(model, Dataset.open(root, collections), params=ModelParams(common=common),
                                   progress=progress)
    return _FITS[key]


def run_variant(variant: Variant, root: Any, collections: Sequence[Collection], labels: Mapping[Split, SplitLabels],
                progress: bool = False) -> dict[str, np.ndarray]:
    """The variant's test predictions on one world."""
    from models.ensemble import PIPELINE_PARAMS, Ensemble

    preds = _fit_predict(variant.model, root, collections, dict(variant.params), progress)
    if not variant.with_gbdt:
        return preds[Split.TEST.value]
    gbdt = _fit_predict("gbdt", root, collections, {}, progress)
    valid = {variant.model: preds[Split.VALID.value], "gbdt": gbdt[Split.VALID.value]}
    test = {variant.model: preds[Split.TEST.value], "gbdt": gbdt[Split.TEST.value]}
    ens = Ensemble(**PIPELINE_PARAMS).fit(valid, labels[Split.VALID].targets())
    return ens.predict(test)


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Wraps help lines between words only: a variant's name (``configs-128-one-net``) stays whole."""

    def _split_lines(self, text: str, width: int) -> list[str]:
        return textwrap.wrap(" ".join(text.split()), width, break_on_hyphens=False)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.ablations", description=__doc__.split("\n\n")[0],
        formatter_class=_HelpFormatter)
    parser.add_argument("--scale", default="demo", choices=["tiny", "demo", "bench", "full"],
                        help="world scale (bench is the quality table's; demo is 5 times quicker)")
    parser.add_argument("--world-seeds", nargs="+", type=int, default=[0, 1], metavar="SEED",
                        help="world seeds: each variant is fitted and scored on every world")
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS), metavar="NAME",
                        help="variants to run, 'default' first (always run unless --without-default): " + "; ".join(
                            f"{v.name}: {v.help}" for v in VARIANTS.values()))
    parser.add_argument("--without-default", action="store_true",
                        help="do not fit the default: its line comes from another run's log (--from-logs assembles "
                             "them; a one-thread fit is deterministic, so the default's line is the same in every run)")
    parser.add_argument("--collections", nargs="+", default=[c.value for c in LAYOUT], metavar="C",
                        help="collections to fit and score")
    parser.add_argument("--worlds-dir", default="data", help="where the worlds are generated or found")
    parser.add_argument("--progress", action="store_true", help="show progress bars")
    parser.add_argument("--from-logs", nargs="+", metavar="LOG", default=None,
                        help="fit nothing: build the table from the per-variant lines of earlier runs' output "
                             "(runs split over processes or machines; --scale must be theirs, for the oracle); a "
                             "variant missing some world seeds gets a table of its own over the seeds it has")
    parser.add_argument("--baseline", default="default", metavar="NAME",
                        help="with --from-logs: the line every other is compared with ('vs default'), e.g. seeds-1 "
                             "for the variants screened at one network's cost")
    args = parser.parse_args(argv)
    from competition.synthetic.world import generate_world

    if args.from_logs:
        return _table_from_logs(args.from_logs, args.scale, args.worlds_dir, args.baseline)
    collections = [Collection(c) for c in args.collections]
    names = [*([] if args.without_default else ["default"]), *(n for n in args.variants if n != "default")]
    if not names:
        parser.error("--without-default leaves no variant to run")
    scores: dict[str, dict[Collection, list[float]]] = {n: {c: [] for c in collections} for n in names}
    oracles: dict[Collection, list[float]] = {c: [] for c in collections}
    started = time.perf_counter()
    for k, seed in enumerate(args.world_seeds, 1):
        path = world_dir(args.scale, seed, args.worlds_dir)
        generate_world(path, scale=args.scale, seed=seed, progress=args.progress)
        root = find_data_root(path)
        labels = {s: load_labels(root, collections, s, DEFAULT_PROTOCOL) for s in (Split.VALID, Split.TEST)}
        oracle = oracle_scores(labels[Split.TEST]) or {}
        for c in collections:
            oracles[c].append(oracle.get(c, math.nan))
        for j, name in enumerate(names, 1):
            t0 = time.perf_counter()
            report = score_predictions(run_variant(VARIANTS[name], root, collections, labels, args.progress),
                                       labels[Split.TEST])
            for c in collections:
                scores[name][c].append(report.scores()[c])
            print(f"[world {k}/{len(args.world_seeds)} seed {seed}] {name} ({j}/{len(names)}): "
                  + ", ".join(f"{c.value} {report.scores()[c]:.4f}" for c in collections)
                  + f"  ({time.perf_counter() - t0:.0f} s; {(time.perf_counter() - started) / 60:.1f} min so far)",
                  flush=True)
    if args.without_default:
        print("no table without the default's line: assemble it with --from-logs and a log that has it")
    else:
        print(format_table(scores, oracles, args.scale, args.world_seeds))
    return 0


_LINE = re.compile(r"^\[world \d+/\d+ seed (?P<seed>\d+)\] (?P<name>\S+) \(\d+/\d+\): (?P<scores>.+?)  \(")


def parse_log(lines: Iterable[str]) -> dict[str, dict[int, dict[Collection, float]]]:
    """The per-variant lines of a run's output: variant -> world seed -> collection -> test score (a later line for
    the same variant and seed replaces an earlier one)."""
    out: dict[str, dict[int, dict[Collection, float]]] = {}
    for line in lines:
        m = _LINE.match(line)
        if m:
            cells = (cell.rsplit(" ", 1) for cell in m["scores"].split(", "))
            out.setdefault(m["name"], {})[int(m["seed"])] = {Collection(c): float(v) for c, v in cells}
    return out


def _table_from_logs(paths: Sequence[str], scale: str, worlds_dir: str, baseline: str = "default") -> int:
    found: dict[str, dict[int, dict[Collection, float]]] = {}
    for path in paths:
        with open(path, encoding="utf-8") as f:
            for name, per_seed in parse_log(f).items():
                for seed, per_collection in per_seed.items():  # runs split by collection merge per collection
                    found.setdefault(name, {}).setdefault(seed, {}).update(per_collection)
    if baseline not in found:
        raise SystemExit(f"error: no '{baseline}' lines in {', '.join(paths)}")
    default = found[baseline]
    oracle_of: dict[int, dict[Collection, float]] = {}
    for seed in sorted({s for per in found.values() for s in per}):
        root = find_data_root(world_dir(scale, seed, worlds_dir))
        collections = sorted({c for per in default.values() for c in per}, key=list(Collection).index)
        oracle_of[seed] = oracle_scores(load_labels(root, collections, Split.TEST, DEFAULT_PROTOCOL)) or {}
    # one table per set of (world seeds, collections) that a variant shares with the default
    groups: dict[tuple[tuple[int, ...], tuple[Collection, ...]], list[str]] = {}
    for name, per in found.items():
        seeds = tuple(sorted(set(per) & set(default)))
        shared = set.intersection(*({c for c in per[s] if c in default[s]} for s in seeds)) if seeds else set()
        groups.setdefault((seeds, tuple(sorted(shared, key=list(Collection).index))), []).append(name)
    for (seeds, collections), names in sorted(groups.items(), key=lambda kv: (-len(kv[0][0]), -len(kv[0][1]))):
        if not seeds or not collections:
            continue
        scores = {n: {c: [found[n][s][c] for s in seeds] for c in collections}
                  for n in [baseline, *(n for n in names if n != baseline)]}
        oracles = {c: [oracle_of[s].get(c, math.nan) for s in seeds] for c in collections}
        print(format_table(scores, oracles, scale, seeds, baseline))
    return 0


def format_table(scores: Mapping[str, Mapping[Collection, Sequence[float]]],
                 oracles: Mapping[Collection, Sequence[float]], scale: str, seeds: Sequence[int],
                 baseline: str = "default") -> str:
    """Per variant and collection: mean ± sd over the worlds and % of oracle; then the mean difference to
    ``baseline`` over the collections, ± the sd over the worlds of that per-world difference."""
    collections = list(oracles)
    base = scores[baseline]
    w = max(15, *(len(name) + 1 for name in scores))  # the variant column
    lines = [f"\ntest split, {scale} worlds (seeds {' '.join(map(str, seeds))}): mean ± sd over the worlds, "
             f"% of the oracle; 'vs {baseline}' = mean over the collections of the per-world difference, ± its sd",
             f"{'variant':{w}s}" + "".join(f"{c.value:>24s}" for c in collections) + f"{'vs ' + baseline:>18s}"]
    lines.append("-" * len(lines[-1]))
    for name, per in scores.items():
        cells = ""
        for c in collections:
            v = np.asarray(per[c])
            sd = float(np.std(v, ddof=1)) if len(v) > 1 else math.nan
            pct = float(np.mean(100 * v / np.asarray(oracles[c])))
            cells += f"{f'{v.mean():.4f}±{sd:.3f} {pct:3.0f}%':>24s}"
        diff = np.mean([np.asarray(per[c]) - np.asarray(base[c]) for c in collections], axis=0)  # per world
        dsd = float(np.std(diff, ddof=1)) if len(diff) > 1 else math.nan
        vs = "" if name == baseline else f"{diff.mean():+.4f}±{dsd:.4f}"
        lines.append(f"{name:{w}s}{cells}{vs:>18s}")
    orc = "".join(f"{float(np.mean(oracles[c])):>24.4f}" for c in collections)
    lines.append(f"{'oracle':{w}s}{orc}")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
