"""Real TPU measurements as a benchmark: models ranking the measured configs of real XLA kernels and of one real
module, from the records shipped in competition/data/real_records/ (:mod:`competition.real_records`).

Run it as::

    python -m benchmarks.real_records                  # gbdt and gnn-attn, the demo world (make bench-real)
    python -m benchmarks.real_records --models gbdt    # a quick run

**Tile.** Each real kernel with at least 2 distinct configs is ranked by:

- ``random``: the exact expectation over uniformly random orders (no sampling);
- ``compiler-default``: the compiler's own choice alone (the records' default run), what XLA ships;
- ``default-first`` and every ``--models`` model, each fitted two ways: on a synthetic world's ``tile:xla`` train
  split, early-stopping on its valid split as the pipeline does (``/world``; the mean over ``--world-seeds``), and on
  the other real kernels, leaving the kernel ranked out (``/real``; no early stopping: too few graphs for a valid
  split). Kernels with one distinct config (the three reshapes, measured 2-3 times) have no order to learn and are
  left out of both.

Two tables, a row per kernel: the top-5 score (``2 - best of the first 5 / best``, 1 is best) and the top-1
slowdown (the first-ranked config's runtime / the best, 1 is best); then the mean over the kernels with at least
``--min-configs`` distinct configs, and over every scored kernel (geometric mean for the slowdown). The kernels are
few, so one kernel moves a mean a lot: read the rows.

**Layout.** The module's 112 measured runs, repeats of one config averaged (they agree within 0.004%), give 91
distinct configs, ranked by ``random`` (expected tau 0: the spread of 1,000 seeded random orders is printed as the
noise scale), ``default-first`` (no fit: configs that leave more nodes to the compiler first) and every model fitted
on a world's ``--layout-collection``; scored by Kendall tau. There is one module, so there is no leave-one-out; its
runs span about 1.6% of the runtime, so a tau here rests on small differences.

**The real layout graph** (:mod:`competition.real_layout`: alexnet's 38,084 measured layout runs, 23,924 distinct
configs) is split by distinct config, once and for all, into train / valid / test (60 / 20 / 20%). Its test configs
(repeats averaged) are ranked by ``random`` (the exact expected top-1; tau 0), ``default-first`` and every model
fitted two ways: on each world's ``--layout-collection`` (the fit the module's rows use) and on the graph's own train
runs, early-stopping on its valid runs (the ceiling; ``--own-configs N`` keeps the first N distinct train configs).
Scored by Kendall tau and the top-1 slowdown (the first-ranked config's runtime over the best). With two models or
more, their rank mean (equal weights) gets a row of its own, and so does the pipeline's ensemble, fitted on each
world's valid split as ``fastslow submit`` fits it.

Worlds are generated once under ``--work-dir`` (``fastslow data synth``) and reused; each fit is saved under
``--work-dir/runs/<digest of its key>/`` (:mod:`fastslow.saved_runs`: model, settings and data) and a finished one
reused, so a second run only predicts. Nothing is written to ``runs/``. A run holds ``--work-dir`` while it works (a
second run there is refused), and its arguments are checked before anything is written (:func:`checked_worlds`):
each refusal is one line and exit 2.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import math
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import numpy as np
import numpy.typing as npt

from competition.atomic import atomic_write_text
from competition.collections import Collection, Split
from competition.dataroot import DataRoot, find_data_root, list_graphs
from competition.dataset import CollectionData, open_collection, open_split
from competition.errors import EXIT_ERROR, UsageError, printable, shell_word
from competition.labels import distinct_groups, distinct_target
from competition.metrics import (
    TILE_TOP_K,
    graph_score,
    kendall_tau,
    submitted_order,
    top_k_error,
    top_k_score,
)
from competition.reader import LayoutGraph, TileGraph, load_graph
from competition.real_records import LAYOUT_COLLECTION, featurize_records
from competition.runlock import FolderBusy, hold_run_folder
from fastslow.worlds import world_dir

TILE = Collection.TILE_XLA
RANDOM, COMPILER = "random", "compiler-default"
REFERENCE_FIT = "default-first"
WORLD, REAL, OWN = "world", "real", "own"
RANDOM_ORDERS = 1000
"""Seeded random orders whose taus give the layout noise scale."""


class BenchmarkRefused(UsageError):
    """A run refused before its work: :func:`main` prints it as one line and exits with
    :data:`~competition.errors.EXIT_ERROR`."""


class _Parser(argparse.ArgumentParser):
    """argparse's own errors (an unknown option, a bad value) as one line, as :func:`main` prints every refusal."""

    def error(self, message: str) -> NoReturn:
        raise BenchmarkRefused(f"{self.prog}: {message}")


def default_models() -> list[str]:
    """The learned models of :data:`models.registry.SUBMIT_MODELS`, and ``gnn-attn`` when it is not one of them."""
    from models.registry import MODELS, SUBMIT_MODELS

    learned = [n for n in SUBMIT_MODELS if not MODELS[n].reference]
    return learned if "gnn-attn" in learned else [*learned, "gnn-attn"]


@dataclass(frozen=True)
class Kernel:
    """One real kernel's npz file.

    Attributes:
        path: the file.
        name: the kernel's name in the records (the file stem less its fingerprint), e.g. ``fusion.191``.
        targets: float64 ``[C]``, what the configs rank by: runtime / the default's runtime
            (:meth:`competition.reader.TileGraph.normalized_runtime`).
        distinct: how many of the configs differ in their features.
        default: the compiler's default config (:func:`models.baselines.tile_default_index`: its runtime is the
            normalizer).
    """

    path: Path
    name: str
    targets: npt.NDArray[np.float64]
    distinct: int
    default: int

    @property
    def configs(self) -> int:
        return int(self.targets.size)

    @property
    def spread(self) -> float:
        """Worst / best."""
        return float(self.targets.max() / self.targets.min())


def read_kernels(root: DataRoot) -> list[Kernel]:
    """Every real kernel of the records' data root, in file order."""
    from models.baselines import tile_default_index

    out = []
    for path in list_graphs(root, TILE, Split.TRAIN):
        graph = load_graph(path, TILE)
        assert isinstance(graph, TileGraph)
        out.append(Kernel(path, path.stem.rsplit("_", 1)[0], graph.normalized_runtime(),
                          len(distinct_groups(graph.config_feat)[0]), tile_default_index(graph)))
    return out


def random_tile_cell(targets: npt.ArrayLike) -> tuple[float, float]:
    """The top-5 score and top-1 slowdown of a uniformly random order, in expectation, exactly.

    The first 5 of a random order are 5 configs drawn without replacement; the best of them is the ``i``-th fastest
    (from 0) with probability ``comb(C - 1 - i, k - 1) / comb(C, k)``, ``k = min(5, C)``. The first one is each
    config with probability ``1 / C``.
    """
    t = np.sort(np.asarray(targets, dtype=np.float64))
    c = t.size
    k = min(TILE_TOP_K, c)
    total = math.comb(c, k)
    top5 = sum(math.comb(c - 1 - i, k - 1) / total * top_k_score([i], t) for i in range(c - k + 1))
    top1 = sum(1.0 + top_k_error([i], t, 1) for i in range(c)) / c
    return float(top5), float(top1)


def order_tile_cell(targets: npt.ArrayLike, order: npt.ArrayLike) -> tuple[float, float]:
    """The top-5 score and top-1 slowdown of an order (config indices, fastest first)."""
    return graph_score(TILE, targets, order=order), 1.0 + top_k_error(order, targets, 1)


def scored_tile_cell(targets: npt.ArrayLike, scores: npt.ArrayLike) -> tuple[float, float]:
    """The top-5 score and top-1 slowdown of a model's scores (lower = faster), as a submission row lists them."""
    return order_tile_cell(targets, submitted_order(TILE, scores))


@dataclass(frozen=True)
class ModuleConfigs:
    """The layout module's distinct configs: the graph restricted to the first run of each, and each one's mean
    runtime over its repeats (ns)."""

    graph: LayoutGraph
    runtime: npt.NDArray[np.float64]
    runs: int

    @property
    def spread(self) -> float:
        """Worst / best - 1."""
        return float(self.runtime.max() / self.runtime.min() - 1.0)


def read_module(root: DataRoot) -> ModuleConfigs:
    """The records' layout module, its repeated configs averaged."""
    (path,) = list_graphs(root, LAYOUT_COLLECTION, Split.TRAIN)
    graph = load_graph(path, LAYOUT_COLLECTION)
    assert isinstance(graph, LayoutGraph)
    first, runtime = distinct_target(graph)  # layout: the target is the runtime in ns
    return ModuleConfigs(graph.select_configs(first), runtime, graph.num_configs)


def random_tau_spread(runtime: npt.ArrayLike, orders: int = RANDOM_ORDERS, seed: int = 0) -> float:
    """The standard deviation of Kendall tau over ``orders`` seeded uniformly random orders."""
    rng = np.random.default_rng(seed)
    r = np.asarray(runtime, dtype=np.float64)
    return float(np.std([kendall_tau(rng.permutation(r.size), r) for _ in range(orders)]))


def fit_folder(name: str, params: dict[str, Any], data: CollectionData, cache: Path) -> tuple[Path, dict[str, Any]]:
    """Where :func:`fit_cached` saves ``name`` fitted on ``data`` with ``params``, and the settings it fits with
    (a GNN's run and cache folders under ``cache``)."""
    from fastslow.saved_runs import fit_key
    from models.base import run_folder
    from models.registry import MODELS, hyper_parameters, make_model

    key = fit_key(name, make_model(name, **params), data)
    base = cache / hashlib.sha256(json.dumps(key, sort_keys=True).encode("utf-8")).hexdigest()[:12]
    if "run.runs_dir" in hyper_parameters(MODELS[name]):
        params = {**params, "run.runs_dir": str(base), "run.cache_dir": str(cache / "processed")}
    return run_folder(base, name, data.collection), params


def fit_cached(name: str, params: dict[str, Any], data: CollectionData, cache: Path,
               say: Callable[[str], object] = print) -> tuple[Any, float | None]:
    """``name`` fitted on ``data``, or the finished fit saved for the same model, settings and data.

    Each fit is saved in ``cache/<12 hex digits of its key>/<model>/<collection>/``
    (:func:`fastslow.saved_runs.fit_key`, :func:`~fastslow.saved_runs.save_run`), a GNN's checkpoints beside
    it and its processed graphs in ``cache/processed``.

    Returns:
        ``(model, seconds)``; ``seconds`` is ``None`` when the saved fit was reused.
    """
    from fastslow.saved_runs import reusable_run, save_run
    from models.registry import make_model

    folder, params = fit_folder(name, params, data, cache)
    model = make_model(name, **params)
    saved = reusable_run(folder, name, model, data)
    if saved is not None:
        say(f"  reused {folder}")
        return saved, None
    started = time.perf_counter()
    model.fit(data, progress=False)
    seconds = time.perf_counter() - started
    save_run(folder, name, model, data, complete=True)
    say(f"  fitted in {seconds:.1f} s, saved in {folder}")
    return model, seconds


@dataclass(frozen=True)
class World:
    """A synthetic world fitted on: a label for the tables and its data root."""

    label: str
    root: DataRoot


def make_worlds(scale: str, seeds: Sequence[int], base: Path) -> list[World]:
    """The world of each seed under ``base``, generated by ``fastslow data synth`` when not complete there (the
    folder is the benchmark's own: a world of an older generator there is remade)."""
    from competition.errors import suggested_command

    worlds = []
    for seed in seeds:
        path = world_dir(scale, seed, base)
        cmd = [sys.executable, "-m", "fastslow", "data", "synth", "--scale", scale, "--seed", str(seed),
               "--out", str(path), "--force"]
        shown = suggested_command(*cmd[3:])
        print(f"world {scale} seed {seed}: {shown} (a complete current world is reused)", flush=True)
        done = subprocess.run(cmd)
        if done.returncode != 0:  # its own error is printed above
            raise BenchmarkRefused(f"world {scale} seed {seed}: `{shown}` failed with exit {done.returncode}")
        worlds.append(World(f"{scale}-seed{seed}", find_data_root(path)))
    return worlds


def world_params(name: str, params: dict[str, Any], world: World, collection: Collection) -> dict[str, Any]:
    """``params`` with the model's quick settings under them on a quick-scale world, as the pipeline fits it."""
    from fastslow.pipeline import QUICK_SCALES, with_quick_params
    from models.registry import ModelParams

    if world.root.world_scale not in QUICK_SCALES:
        return dict(params)
    quick = with_quick_params(name, ModelParams(common=params), [collection], str(world.root.world_scale))
    return quick.for_collection(collection)


def leave_one_out(root: DataRoot, kernels: Sequence[Kernel], held_out: Kernel) -> CollectionData:
    """The real kernels other than ``held_out`` with at least 2 distinct configs as train graphs; no early
    stopping (``eval`` is ``None``)."""
    train = open_split(root, TILE, Split.TRAIN)
    keep = [i for i, p in enumerate(train.paths) if p != held_out.path
            and next(k for k in kernels if k.path == p).distinct >= 2]
    empty = {s: open_split(root, TILE, s) for s in (Split.VALID, Split.TEST)}
    return CollectionData(TILE, train.subset(keep), None, empty[Split.VALID], empty[Split.TEST])


def tile_records(kernels: Sequence[Kernel], root: DataRoot, worlds: Sequence[World], models: Sequence[str],
                 params: dict[str, dict[str, Any]], cache: Path) -> list[dict[str, Any]]:
    """Every tile cell: one record per (kernel, column, world) with the top-5 score and the top-1 slowdown, and one
    per fit with its time."""
    scored = [k for k in kernels if k.distinct >= 2]
    records: list[dict[str, Any]] = []

    def cell(kernel: Kernel, model: str, fitted_on: str | None, values: tuple[float, float]) -> None:
        records.append(dict(part="tile", kernel=kernel.name, configs=kernel.configs, distinct=kernel.distinct,
                            spread=kernel.spread, model=model, fitted_on=fitted_on, top5=values[0],
                            top1=values[1]))

    for k in scored:
        cell(k, RANDOM, None, random_tile_cell(k.targets))
        cell(k, COMPILER, None, order_tile_cell(k.targets, [k.default]))
    for name in [REFERENCE_FIT, *models]:
        for world in worlds:
            print(f"{name} on world {world.label} ({TILE.value}, train; early stopping on valid)", flush=True)
            data = open_collection(world.root, TILE)
            model, seconds = fit_cached(name, world_params(name, params.get(name, {}), world, TILE), data, cache)
            records.append(dict(part="fit", model=name, collection=TILE.value, fitted_on=f"{WORLD}:{world.label}",
                                seconds=seconds))
            for k in scored:
                cell(k, name, f"{WORLD}:{world.label}", scored_tile_cell(k.targets, model.predict(load_graph(k.path, TILE))))
        for k in scored:
            data = leave_one_out(root, kernels, k)
            print(f"{name} on the {len(data.train)} other real kernels, {k.name} held out (no early stopping)",
                  flush=True)
            model, seconds = fit_cached(name, dict(params.get(name, {})), data, cache)
            records.append(dict(part="fit", model=name, collection=TILE.value, fitted_on=f"{REAL}:not {k.name}",
                                seconds=seconds))
            cell(k, name, REAL, scored_tile_cell(k.targets, model.predict(load_graph(k.path, TILE))))
    return records


def layout_records(module: ModuleConfigs, worlds: Sequence[World], models: Sequence[str],
                   params: dict[str, dict[str, Any]], collection: Collection, cache: Path) -> list[dict[str, Any]]:
    """Every layout row: one record per (model, world) with the Kendall tau over the module's distinct configs."""
    from models.registry import make_model

    graph, runtime = module.graph, module.runtime
    base = dict(part="layout", module=graph.stem, runs=module.runs, distinct=graph.num_configs, spread=module.spread)
    records = [dict(base, model=RANDOM, fitted_on=None, tau=0.0, tau_spread=random_tau_spread(runtime)),
               dict(base, model=REFERENCE_FIT, fitted_on=None,
                    tau=kendall_tau(make_model(REFERENCE_FIT).predict(graph), runtime))]
    for name in models:
        for world in worlds:
            print(f"{name} on world {world.label} ({collection.value}, train; early stopping on valid)", flush=True)
            data = open_collection(world.root, collection)
            model, seconds = fit_cached(name, world_params(name, params.get(name, {}), world, collection), data,
                                        cache)
            records.append(dict(part="fit", model=name, collection=collection.value,
                                fitted_on=f"{WORLD}:{world.label}", seconds=seconds))
            records.append(dict(base, model=name, fitted_on=f"{WORLD}:{world.label}",
                                tau=graph_score(collection, runtime, scores=model.predict(graph))))
    return records


def alexnet_records(work: Path, worlds: Sequence[World], models: Sequence[str], params: dict[str, dict[str, Any]],
                    collection: Collection, cache: Path, own_configs: int | None) -> list[dict[str, Any]]:
    """The real layout graph's rows: tau and top-1 slowdown over its test configs (:mod:`competition.real_layout`)
    for ``random`` (exact expectation), ``default-first`` and every model fitted on each world's ``collection``
    and on the graph's own train configs (early stopping on its valid configs; the first ``own_configs`` distinct
    train configs with a limit)."""
    from competition.real_layout import ALEXNET_COLLECTION, alexnet_root, alexnet_test
    from models.registry import make_model

    root = alexnet_root(work / "alexnet", own_configs)
    graph = alexnet_test(root)
    runtime = graph.config_runtime.astype(np.float64)
    own = open_collection(root, ALEXNET_COLLECTION)
    base = dict(part="alexnet", graph=graph.stem, distinct=graph.num_configs, train=own.train[0].num_configs,
                valid=own.valid[0].num_configs, spread=float(runtime.max() / runtime.min()))

    def row(model: str, fitted_on: str | None, scores: npt.ArrayLike) -> dict[str, Any]:
        order = submitted_order(ALEXNET_COLLECTION, scores)
        return dict(base, model=model, fitted_on=fitted_on, tau=kendall_tau(scores, runtime),
                    top1=1.0 + top_k_error(order, runtime, 1))

    records = [dict(base, model=RANDOM, fitted_on=None, tau=0.0, top1=float(runtime.mean() / runtime.min()),
                    tau_spread=random_tau_spread(runtime, orders=200)),
               row(REFERENCE_FIT, None, make_model(REFERENCE_FIT).predict(graph))]
    predicted: dict[str, dict[str, npt.NDArray[np.float64]]] = {}
    fitted: dict[str, dict[str, Any]] = {}
    opened: dict[str, CollectionData] = {}  # each world's collection, listed once
    for name in models:
        for world in worlds:
            print(f"{name} on world {world.label} ({collection.value}), ranking {graph.stem}'s test configs",
                  flush=True)
            # The module's rows fitted it already: the saved fit is reused, not counted again.
            source = f"{WORLD}:{world.label}"
            data = opened.setdefault(source, open_collection(world.root, collection))
            model, _ = fit_cached(name, world_params(name, params.get(name, {}), world, collection), data, cache,
                                  say=lambda _: None)
            scores = model.predict(graph)
            predicted.setdefault(source, {})[name] = scores
            fitted.setdefault(source, {})[name] = model
            records.append(row(name, source, scores))
        print(f"{name} on {graph.stem}'s own {base['train']:,} train runs (early stopping on its "
              f"{base['valid']:,} valid runs)", flush=True)
        model, seconds = fit_cached(name, dict(params.get(name, {})), own, cache)
        records.append(dict(part="fit", model=name, collection=ALEXNET_COLLECTION.value, fitted_on=OWN,
                            seconds=seconds))
        scores = model.predict(graph)
        predicted.setdefault(OWN, {})[name] = scores
        records.append(row(name, OWN, scores))
    if len(set(models)) > 1:  # the models' rank mean, as the pipeline's ensemble with equal weights
        for source, by_model in predicted.items():
            records.append(row("+".join(by_model), source, rank_mean(list(by_model.values()))))
        from models.ensemble import Ensemble

        for world in worlds:  # the pipeline's ensemble: its weights chosen on the world's valid split
            source = f"{WORLD}:{world.label}"
            records.append(row(Ensemble.name, source, world_ensemble(world, opened[source], fitted[source],
                                                                 graph.stem, predicted[source])))
    return records


def world_ensemble(world: World, data: CollectionData, fitted: dict[str, Any], stem: str,
                   scores: dict[str, npt.NDArray[np.float64]]) -> npt.NDArray[np.float64]:
    """A graph's scores by the pipeline's ensemble of ``fitted`` (``{model: fitted model}``): fitted as ``fastslow
    submit`` fits it, on the models' predictions of the world's valid graphs of ``data`` (one collection), then
    applied to the models' ``scores`` of the graph (``{model: [C]}``) as to a graph of that collection named
    ``stem``."""
    from competition.collections import submission_id
    from competition.labels import load_labels
    from fastslow.fitting import predict_graphs
    from models.ensemble import PIPELINE_PARAMS, Ensemble

    collection = data.collection
    valid = {name: predict_graphs(name, model, data, Split.VALID) for name, model in fitted.items()}
    labels = load_labels(world.root, [collection], Split.VALID, data.protocol)
    ensemble = Ensemble(**PIPELINE_PARAMS).fit(valid, labels.targets(), picks=labels.picks())
    sid = submission_id(collection, stem)
    return ensemble.predict({name: {sid: s} for name, s in scores.items()})[sid]


def rank_mean(scores: Sequence[npt.ArrayLike]) -> npt.NDArray[np.float64]:
    """The equal-weight mean of the models' rank-normalised scores of one graph (:mod:`models.ensemble`)."""
    from models.ensemble import combine, normalize_scores

    return combine(np.full(len(scores), 1.0 / len(scores)), [normalize_scores(s) for s in scores])


def format_alexnet(records: Sequence[dict[str, Any]]) -> str:
    """The real layout graph's table: a row per model, tau and top-1 slowdown fitted on the worlds (mean) and on
    the graph's own runs."""
    rows = [r for r in records if r["part"] == "alexnet"]
    if not rows:
        return ""
    r0 = rows[0]
    lines = ["", f"LAYOUT, the real graph {r0['graph']} (layout:xla): Kendall tau / top-1 slowdown (first-ranked "
                 f"config's runtime / best) over its {r0['distinct']:,} test configs (repeats averaged; worst/best "
                 f"{r0['spread']:.2f}); own runs: {r0['train']:,} train, {r0['valid']:,} valid",
             f"{'model':16s}{'fitted on the world(s)':>26s}{'fitted on its own runs':>26s}", "-" * 68]

    def cell(model: str, source: str | None) -> str:
        chosen = [r for r in rows if r["model"] == model and (r["fitted_on"] or "").split(":")[0] == (source or "")]
        if not chosen:
            return f"{'':>26s}"
        tau = float(np.mean([r["tau"] for r in chosen]))
        top1 = float(np.exp(np.mean(np.log([r["top1"] for r in chosen]))))
        return f"{tau:>17.4f} / {top1:5.3f}"

    for model in dict.fromkeys(r["model"] for r in rows):
        if model == RANDOM:
            r = next(r for r in rows if r["model"] == RANDOM and r["fitted_on"] is None)
            lines.append(f"{RANDOM:16s}{'':>26s}{'':>26s}  expected: tau 0 (sd {r['tau_spread']:.4f}), top-1 "
                         f"{r['top1']:.3f}")
            if any(r["model"] == RANDOM and r["fitted_on"] for r in rows):  # the registered model, fitted
                lines.append(f"{model:16s}{cell(model, WORLD)}{cell(model, OWN)}")
        elif model == REFERENCE_FIT:
            lines.append(f"{model:16s}{cell(model, None)}   (no fit)")
        else:
            lines.append(f"{model:16s}{cell(model, WORLD)}{cell(model, OWN)}")
    return "\n".join(lines)


def _columns(tile: Sequence[dict[str, Any]]) -> list[tuple[str, str, str | None]]:
    """``(header, model, source)`` of each tile column, in order."""
    out: list[tuple[str, str, str | None]] = [(RANDOM, RANDOM, None), (COMPILER, COMPILER, None)]
    for model in dict.fromkeys(r["model"] for r in tile if r["fitted_on"] is not None):
        out += [(f"{model}/{WORLD}", model, WORLD), (f"{model}/{REAL}", model, REAL)]
    return out


def _values(tile: Sequence[dict[str, Any]], kernel: str, model: str, source: str | None, metric: str) -> list[float]:
    return [r[metric] for r in tile if r["kernel"] == kernel and r["model"] == model
            and (r["fitted_on"] if source is None else (r["fitted_on"] or "").split(":")[0]) == source]


def _mean(values: Sequence[float], metric: str) -> float:
    """The arithmetic mean of top-5 scores, the geometric mean of slowdowns."""
    return float(np.mean(values)) if metric == "top5" else float(np.exp(np.mean(np.log(values))))


def format_tile(records: Sequence[dict[str, Any]], min_configs: int) -> str:
    """The two tile tables (top-5 score, top-1 slowdown): a row per kernel, then the two means."""
    tile = [r for r in records if r["part"] == "tile"]
    if not tile:
        return ""
    columns = _columns(tile)
    info = {r["kernel"]: r for r in tile}
    kernels = sorted(info, key=lambda k: (-info[k]["distinct"], k))
    widths = [max(9, len(h) + 2) for h, _, _ in columns]

    def row(first: str, cells: Sequence[float] | Sequence[str]) -> str:
        return first + "".join(f"{c:>{w}.4f}" if isinstance(c, float) else f"{c:>{w}s}"
                               for c, w in zip(cells, widths, strict=True))

    lines = []
    for metric, title in (("top5", "top-5 score: 2 - best of the first 5 / best (1 is best; mean)"),
                          ("top1", "top-1 slowdown: runtime of the first-ranked config / best (1 is best; "
                                   "geometric mean)")):
        head = row(f"{'kernel':12s}{'configs':>8s}{'worst/best':>11s}", [h for h, _, _ in columns])
        lines += ["", f"TILE, {title}", head, "-" * len(head)]
        per_kernel = {k: [_mean(_values(tile, k, m, s, metric), metric) for _, m, s in columns] for k in kernels}
        lines += [row(f"{k:12s}{info[k]['distinct']:8d}{info[k]['spread']:11.2f}", per_kernel[k]) for k in kernels]
        lines.append("-" * len(head))
        for least in (min_configs, 2):
            chosen = [k for k in kernels if info[k]["distinct"] >= least]
            label = f"mean, {len(chosen)} kernels >= {least} configs"
            if not chosen:
                lines.append(f"{label}: none")
                continue
            lines.append(row(f"{label:31s}", [_mean([per_kernel[k][j] for k in chosen], metric)
                                               for j in range(len(columns))]))
    return "\n".join(lines)


def format_layout(records: Sequence[dict[str, Any]]) -> str:
    """The layout table: a row per (model, world) with its Kendall tau."""
    rows = [r for r in records if r["part"] == "layout"]
    if not rows:
        return ""
    r0 = rows[0]
    lines = ["", f"LAYOUT, Kendall tau over the distinct configs of the real module {r0['module']}:",
             f"{r0['runs']} measured runs, {r0['distinct']} distinct configs (repeats averaged); spread worst/best - 1 "
             f"= {100 * r0['spread']:.2f}%",
             f"{'model':16s}{'fitted on':28s}{'tau':>8s}", "-" * 52]
    for r in rows:
        if r["model"] == RANDOM and r["fitted_on"] is None:
            lines.append(f"{RANDOM:16s}{'-':28s}{0.0:8.4f}  expected; sd over {RANDOM_ORDERS:,} random orders "
                         f"{r['tau_spread']:.4f}")
        elif r["fitted_on"] is None:
            lines.append(f"{r['model']:16s}{'- (layout needs no fit)':28s}{r['tau']:8.4f}")
        else:
            lines.append(f"{r['model']:16s}{r['fitted_on']:28s}{r['tau']:8.4f}")
    lines.append("One module: no leave-one-out for layout; a tau here is one graph's, within the noise scale above.")
    return "\n".join(lines)


LEGEND = (f"{RANDOM}: the exact expectation over uniformly random orders; {COMPILER}: the records' default config "
          f"alone (what XLA ships); MODEL/{WORLD}: fitted on the synthetic world(s), early-stopping on valid (mean "
          f"over the worlds); MODEL/{REAL}: fitted on the other real kernels with 2 configs or more, no early "
          "stopping (leave one out)")


def format_report(records: Sequence[dict[str, Any]], min_configs: int) -> str:
    """Every table, with the tile columns' legend."""
    tile = format_tile(records, min_configs)
    legend = textwrap.fill(LEGEND, width=118) if tile else ""
    return "\n".join(part for part in (tile, legend, format_layout(records), format_alexnet(records)) if part)


def parse_params(given: Sequence[str], models: Sequence[str]) -> dict[str, dict[str, Any]]:
    """``MODEL.KEY=VALUE`` items as ``{model: {key: value}}`` (values Python literals, else text).

    Raises:
        ValueError: an item without ``=`` or a model, a model not fitted, or a value the model refuses.
    """
    from models.registry import MODELS, canonical_key, param_problem

    out: dict[str, dict[str, Any]] = {}
    for item in given:
        address, sep, text = item.partition("=")
        model, dot, key = address.partition(".")
        if not sep or not dot or not key:
            raise ValueError(f"--param {item!r}: expected MODEL.KEY=VALUE")
        if model not in (REFERENCE_FIT, *models):
            raise ValueError(f"--param {item}: {model!r} is not fitted here ({', '.join([REFERENCE_FIT, *models])})")
        try:
            value: Any = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            value = text
        if (problem := param_problem(MODELS[model], key, value)) is not None:
            raise ValueError(f"--param {item}: {problem}")
        out.setdefault(model, {})[canonical_key(MODELS[model], key)] = value
    return out


def run(argv: Sequence[str] | None = None) -> tuple[list[dict[str, Any]], str]:
    """Parse the command line, fit and score everything; returns the records and the printed report."""
    from fastslow.commands.common import count_arg, seed_arg
    from models.registry import MODELS

    parser = _Parser(prog="python -m benchmarks.real_records", description=__doc__.split("\n\n")[0],
                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--models", nargs="+", default=default_models(), metavar="MODEL",
                        help="learned models, each fitted on every world and (tile) on the other real kernels; "
                             f"default-first is always fitted. Registered: {', '.join(sorted(MODELS))}")
    parser.add_argument("--data", nargs="+", default=None, metavar="ROOT",
                        help="synthetic world roots to fit on, instead of generating --scale worlds")
    parser.add_argument("--scale", default="demo", choices=["tiny", "demo", "bench", "full"],
                        help="scale of the worlds generated (without --data)")
    parser.add_argument("--world-seeds", type=seed_arg("--world-seeds"), nargs="+", default=None, metavar="SEED",
                        help="one world per seed, each seed once (without --data); /world cells are the mean over "
                             "them (default: 0)")
    parser.add_argument("--work-dir", default="bench-out/real-records", metavar="DIR",
                        help="where the records' npz files, the worlds (worlds/) and the fits (runs/) are kept "
                             "and reused")
    parser.add_argument("--min-configs", type=count_arg("--min-configs"), default=10, metavar="N",
                        help="the first tile mean is over the kernels with at least N distinct configs")
    parser.add_argument("--layout-collection", default=Collection.LAYOUT_XLA_RANDOM.value,
                        choices=[c.value for c in Collection if c.is_layout],
                        help="the world's layout collection the layout models are fitted on")
    parser.add_argument("--parts", nargs="+", default=["tile", "layout"], choices=["tile", "layout"],
                        help="which parts to run")
    parser.add_argument("--param", action="append", default=[], metavar="MODEL.KEY=VALUE",
                        help="a hyper-parameter instead of its default, for every fit of MODEL (repeatable; "
                             "`fastslow params MODEL` lists them), e.g. --param gbdt.booster.n_estimators=50")
    parser.add_argument("--own-configs", type=count_arg("--own-configs"), default=None, metavar="N",
                        help="fit the real layout graph's own-runs models on its first N distinct train configs "
                             "(of a fixed order) instead of all of them")
    parser.add_argument("--json", default=None, metavar="FILE", help="also write the records as JSON")
    args = parser.parse_args(argv)
    unknown = [m for m in args.models if m not in MODELS]
    if unknown:
        parser.error(f"--models: unknown model(s) {', '.join(map(printable, unknown))}; registered: "
                     f"{', '.join(sorted(MODELS))}")
    models = [m for m in args.models if m != REFERENCE_FIT]
    try:
        params = parse_params(args.param, models)
    except ValueError as exc:
        parser.error(printable(exc))
    given = checked_worlds(args)
    work = Path(args.work_dir).resolve()
    try:
        with hold_run_folder(work, hint="choose another --work-dir"):
            return _run(args, argv, work, given, models, params)
    except FolderBusy as exc:
        raise BenchmarkRefused(f"--work-dir {printable(exc)}") from None


def checked_worlds(args: argparse.Namespace) -> list[World] | None:
    """Refuse, right after parsing and before anything is written, what the run could not use: a ``--work-dir``
    or ``--json`` that cannot be written as such (a file for the folder, a folder for the file, under a file,
    read-only), a ``--data`` that is no data root, the same world twice (``--world-seeds 0 0`` would fit one world
    twice and count it twice in the mean), and ``--world-seeds`` with ``--data``. Returns the worlds of ``--data``
    (``None`` without it: the ``--world-seeds`` worlds are generated).

    Raises:
        BenchmarkRefused: naming the option, the value and why.
    """
    from competition.atomic import output_problem
    from competition.errors import DataRootNotFound

    for flag, value, kind in (("--work-dir", args.work_dir, "folder"), ("--json", args.json, "file")):
        problem = None if value is None else output_problem(value, kind)
        if problem is not None:
            raise BenchmarkRefused(f"{flag} {printable(value)}: {printable(problem)}")
    if args.data and args.world_seeds is not None:
        raise BenchmarkRefused("--world-seeds: not with --data (the worlds are the data roots given)")
    if args.world_seeds is None:
        args.world_seeds = [0]
    repeated = sorted({s for s in args.world_seeds if args.world_seeds.count(s) > 1})
    if repeated:
        raise BenchmarkRefused(f"--world-seeds: {', '.join(map(str, repeated))} given more than once; each seed is "
                               "one world, fitted and counted in the mean once")
    if not args.data:
        return None
    worlds: list[World] = []
    for d in args.data:
        try:
            root = find_data_root(Path(d).resolve())
        except DataRootNotFound as exc:
            raise BenchmarkRefused(f"--data {printable(d)}: {printable(exc)}") from None
        if any(w.root.root == root.root for w in worlds):
            raise BenchmarkRefused(f"--data {printable(d)}: {printable(root.root)} given more than once; each world "
                                   "is fitted and counted in the mean once")
        worlds.append(World(Path(d).name, root))
    return worlds


def _run(args: argparse.Namespace, argv: Sequence[str] | None, work: Path, given: list[World] | None,
         models: list[str], params: dict[str, dict[str, Any]]) -> tuple[list[dict[str, Any]], str]:
    """Fit and score everything, ``work`` held by this run."""
    started = time.perf_counter()
    root = find_data_root(featurize_records(work))
    print(f"real records: {root.root}", flush=True)
    worlds = given if given is not None else make_worlds(args.scale, args.world_seeds, work / "worlds")
    cache = work / "runs"
    kernels = read_kernels(root)
    records: list[dict[str, Any]] = []
    if "tile" in args.parts:
        records += tile_records(kernels, root, worlds, models, params, cache)
    if "layout" in args.parts:
        records += layout_records(read_module(root), worlds, models, params, Collection(args.layout_collection),
                                  cache)
        records += alexnet_records(work, worlds, models, params, Collection(args.layout_collection), cache,
                                   args.own_configs)
    command = " ".join(["python", "-m", "benchmarks.real_records",
                        *map(shell_word, sys.argv[1:] if argv is None else argv)])
    fits = [r for r in records if r["part"] == "fit"]
    left_out = [k for k in kernels if k.distinct < 2]
    report = "\n".join([
        format_report(records, args.min_configs),
        "",
        *(["not scored (one distinct config, nothing to rank): "
           + ", ".join(f"{k.name} ({k.configs} runs)" for k in left_out)] if left_out and "tile" in args.parts
          else []),
        "fitted on: " + "; ".join(f"world {w.label} ({w.root.root})" for w in worlds)
        + ("; tile also on the other real kernels (leave one out)" if "tile" in args.parts else ""),
        f"fits: {len(fits)}, {sum(r['seconds'] is None for r in fits)} reused, "
        f"{sum(r['seconds'] or 0.0 for r in fits):.0f} s fitting; {time.perf_counter() - started:.0f} s in all",
        f"command: {command}",
    ])
    print(report, flush=True)
    if args.json:
        doc = {"command": command, "worlds": [{"label": w.label, "root": str(w.root.root)} for w in worlds],
               "records_root": str(root.root), "records": records}
        atomic_write_text(args.json, json.dumps(doc, indent=1) + "\n")
    return records, report


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark; a refusal (a bad argument, a folder in use) is one line on stderr and exit 2."""
    try:
        run(argv)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    return 0


if __name__ == "__main__":
    sys.exit(main())
