"""Fitting one model on every collection of a dataset, and predicting the splits: what ``fastslow submit``,
``fastslow train`` and ``fastslow evaluate`` share. Collections are fitted side by side in processes of their own
(``--jobs``), each within its share of the time budget."""

from __future__ import annotations

import json
import logging
import math
import multiprocessing
import multiprocessing.context
import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from tqdm.auto import tqdm

from competition.atomic import atomic_write_text
from competition.budget import FIT_FRACTION, concurrent_slots, format_seconds
from competition.collections import Collection, Split, submission_id
from competition.dataset import CollectionData, Dataset
from competition.submission_format import finite_scores
from competition.workers import (
    child_environment,
    end_with_process,
    interrupts_held,
    stop_by_parent,
    stop_pool,
    stoppable_job,
    usable_cores,
    worker_count,
)
from fastslow.progress import LOG_INTERVAL_SECONDS, line_progress

if TYPE_CHECKING:
    from models.base import RankingModel
    from models.registry import ModelParams

log = logging.getLogger(__name__)


def collection_weights(dataset: Dataset) -> dict[Collection, float]:
    """A size measure of each collection's training work, from the npz headers: train graphs plus thousands of
    train nodes. Used to share a model's time out across collections."""
    return {d.collection: len(d.train) + sum(d.train.header_rows("node_opcode")) / 1000 for d in dataset}


def predict_split(model_name: str, dataset: Dataset, *, params: ModelParams | None = None,
                  settings_file: Path | None = None, progress: bool = True, seconds: float = math.inf,
                  weights: dict[Collection, float] | None = None, jobs: int = 1,
                  runs_dir: Path | None = None) -> dict[str, dict[str, np.ndarray]]:
    """Fit ``model_name`` per collection of ``dataset`` on its train graphs; predict valid (the protocol's configs)
    and test.

    Args:
        model_name: a registered model.
        dataset: the collections to fit and predict, each with the graphs early stopping scores (the pipeline's
            valid split, which also picks the best model and fits the ensemble) and the valid protocol (which
            configs of each valid layout graph are predicted).
        params: the model's hyper-parameters, per collection (default: the model's defaults).
        settings_file: where the hyper-parameters used are written as JSON, per collection (``None``: nowhere);
            they are printed in any case, one line per collection.
        progress: show progress bars.
        seconds: this model's share of the run's time budget; each collection gets a part of what is left in
            proportion to ``weights`` (equal parts without them), of which :data:`~competition.budget.FIT_FRACTION`
            goes to fitting.
        weights: relative size of each collection (see :func:`collection_weights`); each is multiplied by the
            model's :meth:`~models.base.RankingModel.work_factor` for the collection's settings.
        jobs: fit up to this many collections at once, each in a process of its own with ``cores // jobs`` torch
            threads, where the model allows it (:meth:`~models.base.RankingModel.fits_concurrently`: the GNNs on
            the CPU); largest collection first, each with the slot :func:`~competition.budget.concurrent_slots`
            gives it when it starts, of what is left then (the time a fit leaves unused goes to those after it).
            The same fits as one at a time (:func:`fit_collections`) on as many threads. At most one per
            usable core and one per collection (:func:`competition.workers.worker_count`).
        runs_dir: where each collection's fitted model is saved, and a finished run with the same settings and data
            reused instead of fitted again (:mod:`fastslow.saved_runs`); ``None``: neither.

    Returns:
        ``{split: {submission ID: scores}}`` for ``valid`` and ``test``; a valid layout graph's scores follow
        the protocol's configs (:meth:`~competition.labels.SplitLabels.rows`).
    """
    from models.registry import ModelParams, make_model

    params = params or ModelParams()
    jobs = worker_count(jobs, len(dataset))
    if jobs > 1:
        models = {c: make_model(model_name, **params.for_collection(c)) for c in dataset.collections}
        if all(m.fits_concurrently() for m in models.values()):
            return _predict_concurrently(model_name, dataset, models, params, jobs=jobs,
                                         settings_file=settings_file, progress=progress,
                                         end=time.monotonic() + seconds, weights=weights, runs_dir=runs_dir)
    out: dict[str, dict[str, np.ndarray]] = {Split.VALID.value: {}, Split.TEST.value: {}}
    for fit in fit_collections(model_name, dataset, params=params, settings_file=settings_file, progress=progress,
                               seconds=seconds, weights=weights, runs_dir=runs_dir):
        for split, predictions in fit.predictions.items():
            out[split.value].update(predictions)
    return out


Gather = Callable[[dict[str, np.ndarray]], list[dict[str, np.ndarray]] | None]
"""Gives one process the predictions of every process of a launch (``None`` to the others)."""


def _say(line: str) -> None:
    """Print ``line`` at once (beside the output of fits in other processes)."""
    print(line, flush=True)


@dataclass(frozen=True)
class CollectionFit:
    """One collection's fit and predictions (:func:`fit_collection`).

    Attributes:
        collection: the collection.
        model: the fitted model (``None`` where the fit ran in another process).
        seconds: the time the fit took.
        predictions: per split predicted, ``{submission ID: scores}`` of the graphs predicted here (the valid
            protocol's configs of a valid layout graph).
    """

    collection: Collection
    model: RankingModel | None
    seconds: float
    predictions: dict[Split, dict[str, np.ndarray]]


def fit_collections(model_name: str, dataset: Dataset, *, params: ModelParams | None = None,
                    splits: Sequence[Split] = (Split.VALID, Split.TEST), progress: bool = True,
                    seconds: float = math.inf, weights: Mapping[Collection, float] | None = None,
                    settings_file: Path | None = None, say: Callable[[str], object] = _say,
                    holding: Callable[[Collection], AbstractContextManager[object]] | None = None,
                    after_fit: Callable[[Collection, RankingModel], object] | None = None,
                    shard: Callable[[Sequence[int]], Sequence[int]] | None = None,
                    gather: Gather | None = None, runs_dir: Path | None = None) -> Iterator[CollectionFit]:
    """Fit ``model_name`` on each collection of ``dataset`` in turn and predict the graphs of ``splits``: what the
    pipeline (:func:`predict_split`, one fit at a time) and ``fastslow train`` both run.

    Each collection's model is made with its hyper-parameters (``params``), its settings printed (and written to
    ``settings_file``), then :func:`fit_collection` fits it and predicts.

    Args:
        model_name: a registered model.
        dataset: the collections, with their graphs and valid protocol.
        params: the model's hyper-parameters, per collection (default: the model's defaults).
        splits: which of each collection's splits are predicted after its fit (``valid``, ``test``).
        progress: show progress bars.
        seconds: the time all the fits and predictions may take (:func:`predict_split`).
        weights: relative size of each collection (:func:`predict_split`).
        settings_file: where the hyper-parameters used are written as JSON, per collection (``None``: nowhere).
        say: prints a line (by default at once; a process that must stay silent passes a function that does
            nothing).
        holding: a context entered around each collection's fit and predictions (a run folder held, collectives
            watched), left before its result is yielded.
        after_fit: called with the collection and the fitted model before the predictions (to save it).
        shard: which of a split's graph indices this process predicts (default: all of them).
        gather: with ``shard``, collects every process's predictions of a split (:func:`fit_collection`).
        runs_dir: where fitted models are saved and finished runs reused (:func:`fit_collection`).

    Yields:
        One :class:`CollectionFit` per collection, in the dataset's order.
    """
    from models.registry import ModelParams, make_model

    params = params or ModelParams()
    end = time.monotonic() + seconds
    collections = dataset.collections
    models = {c: make_model(model_name, **params.for_collection(c)) for c in collections}
    used: dict[str, dict[str, object]] = {}
    sizes = weights or {c: 1.0 for c in collections}
    # The size measure times the model's work per unit of it with these settings (xla:random's 2 networks at 4
    # times the steps: 8 times the time of the kind's defaults on as many graphs).
    sizes = {c: sizes[c] * models[c].work_factor(c) for c in collections}
    for k, c in enumerate(collections):
        left = sum(sizes[x] for x in collections[k:])
        slot = max(0.0, end - time.monotonic()) * (sizes[c] / left if left > 0 else 1.0)
        deadline = None if math.isinf(slot) else time.monotonic() + FIT_FRACTION * slot
        predict_by = None if math.isinf(slot) else time.monotonic() + slot
        if deadline is not None and slot > 0:
            say(f"[budget] {model_name} {c.value}: {format_seconds(slot)} (fit until "
                f"{format_seconds(FIT_FRACTION * slot)})")
        used[c.value] = _announce(model_name, models[c], c, say)
        if settings_file is not None:
            atomic_write_text(settings_file, json.dumps(used, indent=1, default=repr) + "\n")
        with nullcontext() if holding is None else holding(c):
            fit = fit_collection(model_name, models[c], dataset[c], splits=splits, progress=progress,
                                 deadline=deadline, predict_by=predict_by, say=say, after_fit=after_fit,
                                 shard=shard, gather=gather, runs_dir=runs_dir)
        yield fit


def _announce(model_name: str, model: RankingModel, collection: Collection,
              say: Callable[[str], object] = _say) -> dict[str, object]:
    """Print the settings ``model`` fits ``collection`` with, and return them."""
    from models.registry import format_params

    used = model.resolved_params(collection)
    say(f"{model_name} {collection.value} settings: {format_params(used)}")
    return used


def predict_graphs(model_name: str, model: RankingModel, data: CollectionData, split: Split,
                   indices: Sequence[int] | None = None, *, progress: bool = False) -> dict[str, np.ndarray]:
    """A fitted ``model``'s scores of the graphs of ``split`` (``valid`` or ``test``) at ``indices`` (default:
    all), by submission ID, each checked finite; a valid layout graph is scored on the protocol's configs
    (:meth:`~competition.protocol.ValidProtocol.select`).

    Raises:
        ValueError: ``split`` is the train split; or a graph's scores are not finite
            (:func:`~competition.submission_format.finite_scores`, naming ``model_name``, the collection and the
            graph).
    """
    collection = data.collection
    if Split(split) not in (Split.VALID, Split.TEST):
        raise ValueError(f"predictions are made for the valid and test splits; got {Split(split).value!r}")
    graphs = data.valid if Split(split) is Split.VALID else data.test
    chosen = range(len(graphs)) if indices is None else indices
    out = {}
    for i in tqdm(chosen, disable=not progress, unit="graph", leave=False,
                  desc=f"{model_name} {collection.value} {graphs.split.value}"):
        sid = submission_id(collection, graphs.stems[i])
        out[sid] = finite_scores(model.predict(data.protocol.select(graphs[i], collection, graphs.split)),
                                 f"{model_name} on {collection.value}, graph {sid}")
    return out


def fit_collection(model_name: str, model: RankingModel, data: CollectionData, *,
                   splits: Sequence[Split] = (Split.VALID, Split.TEST), progress: bool = True,
                   deadline: float | None = None, predict_by: float | None = None,
                   say: Callable[[str], object] = _say,
                   after_fit: Callable[[Collection, RankingModel], object] | None = None,
                   shard: Callable[[Sequence[int]], Sequence[int]] | None = None,
                   gather: Gather | None = None, runs_dir: Path | None = None) -> CollectionFit:
    """Fit ``model`` on one collection's train graphs (until ``deadline``, and early enough to predict by
    ``predict_by`` where the model can tell), call ``after_fit``, and predict the graphs of ``splits`` (a valid
    layout graph on the protocol's configs).

    Several processes that fit together (a torchrun launch) share the predictions out: each predicts the graphs of
    the indices ``shard`` keeps, and ``gather`` gives every process's predictions to one of them (``None`` to the
    others), which puts them back in the graphs' order; the others' result then holds no predictions.

    With ``runs_dir``, the model is saved in its run folder (:func:`fastslow.saved_runs.run_folder`; a GNN's own
    ``runs_dir`` first), and a finished run saved there with the same settings and data is loaded instead of
    fitting (:func:`fastslow.saved_runs.reusable_run`), saying so."""
    from fastslow.saved_runs import reusable_run, save_run
    from models.base import run_folder

    collection = data.collection
    started = time.monotonic()
    folder = None if runs_dir is None else run_folder(getattr(model, "runs_dir", None) or runs_dir, model_name,
                                                      collection)
    saved = None if folder is None else reusable_run(folder, model_name, model, data)
    if saved is not None:
        model = saved
        say(f"{model_name} {collection.value}: reused the finished run in {folder} (same settings and data)")
    else:
        model.fit(data, progress=progress, deadline=deadline, predict_by=predict_by)
        if folder is not None:
            save_run(folder, model_name, model, data, complete=deadline is None and predict_by is None)
    fitted = time.monotonic()
    if after_fit is not None:
        after_fit(collection, model)
    out: dict[Split, dict[str, np.ndarray]] = {}
    for split in splits:
        graphs = {Split.VALID: data.valid, Split.TEST: data.test}[Split(split)]
        ids = [submission_id(collection, stem) for stem in graphs.stems]
        chosen = list(range(len(graphs))) if shard is None else list(shard(range(len(graphs))))
        mine = predict_graphs(model_name, model, data, Split(split), chosen, progress=progress)
        if gather is None:
            out[Split(split)] = mine
            continue
        parts = gather(mine)
        if parts is not None:
            every = {k: v for part in parts for k, v in part.items()}
            out[Split(split)] = {k: every[k] for k in ids}
    say(f"{model_name} {collection.value}: fit {fitted - started:.1f} s, predict "
        f"{' and '.join(Split(s).value for s in splits)} {time.monotonic() - fitted:.1f} s")
    return CollectionFit(collection, model, fitted - started, out)


def _predict_concurrently(model_name: str, dataset: Dataset, models: dict[Collection, RankingModel],
                          params: ModelParams, *, jobs: int, settings_file: Path | None, progress: bool, end: float,
                          weights: dict[Collection, float] | None,
                          runs_dir: Path | None = None) -> dict[str, dict[str, np.ndarray]]:
    """:func:`predict_split` with ``jobs`` collections fitted at once, in processes of their own."""
    from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait

    collections = dataset.collections
    # Largest first (the size measure is read from npz headers: cheap), so that the last fit to start is a short one.
    size = weights or collection_weights(dataset)
    size = {c: size[c] * models[c].work_factor(c) for c in collections}
    order = sorted(collections, key=lambda c: -size[c])
    used = {c.value: _announce(model_name, models[c], c) for c in collections}
    if settings_file is not None:
        atomic_write_text(settings_file, json.dumps(used, indent=1, default=repr) + "\n")
    threads = max(1, usable_cores() // jobs)
    print(f"{model_name}: fitting {jobs} collections at once, {threads} torch thread{'s' * (threads > 1)} each "
          f"(largest first: {', '.join(c.value for c in order)})", flush=True)
    out: dict[str, dict[str, np.ndarray]] = {Split.VALID.value: {}, Split.TEST.value: {}}
    # Not fork (competition.workers.pool_context's choice on Linux): a forked child of a process whose torch thread
    # pool already ran can hang. A fork server instead, where the platform has one: it imports torch and the models
    # once (FIT_PRELOAD, before any thread pool runs) and forks each fit's process from that, where a spawned
    # process imports them again (lab/journal.md, "The two commands"). One collection per process: a process that
    # fitted one keeps its heap, and the next fit in it adds to that (a full-scale run peaked higher so than with a
    # process each: lab/journal.md, "Collections fitted at once, at full scale").
    # The pool's processes (and the resource tracker its queues start) begin with the stop signals blocked, and an
    # interrupt waits for a start to end: competition.workers.interrupts_held.
    with interrupts_held():
        pool = ProcessPoolExecutor(jobs, mp_context=_fit_context(), initializer=_init_job,
                                   initargs=(os.getpid(), threads, progress), max_tasks_per_child=1)
    pending = list(order)
    running: dict[Future[Any], tuple[Collection, float]] = {}  # each fit: its collection and its slot's end
    results: dict[Collection, tuple[dict[str, np.ndarray], dict[str, np.ndarray]]] = {}

    def start(c: Collection) -> None:
        """Submit ``c``'s fit with its slot, shared out now: what is left of the run on every worker, less what
        the running fits still hold of theirs, among ``c`` and the fits not yet started (so the time a fit left
        unused goes to those after it)."""
        now = time.monotonic()
        left = max(0.0, end - now)
        committed = 0.0 if math.isinf(left) else sum(max(0.0, e - now) for _, e in running.values())
        slot = concurrent_slots(left, {p: size[p] for p in [c, *pending]}, jobs, committed)[c]
        if not math.isinf(slot):
            print(f"[budget] {model_name} {c.value}: {format_seconds(slot)} (fit until at most "
                  f"{format_seconds(FIT_FRACTION * slot)} after it starts)", flush=True)
        # The process starts at the submit, with this environment: torch sizes its thread pool from
        # OMP_NUM_THREADS, and tqdm reads its defaults when imported (progress lines every few seconds); the fork
        # server, started by the run's first submit, passes on the environment of its start.
        with interrupts_held(), child_environment(
                OMP_NUM_THREADS=str(threads),
                TQDM_MININTERVAL=os.environ.get("TQDM_MININTERVAL", str(LOG_INTERVAL_SECONDS))):
            future = pool.submit(_collection_job, model_name, params.for_collection(c), dataset[c], progress, slot,
                                 end, runs_dir)
        running[future] = (c, now + slot)

    try:
        while pending or running:
            while pending and len(running) < jobs:
                start(pending.pop(0))
            done, _ = wait(list(running), return_when=FIRST_COMPLETED)
            finished = [f for f in running if f in done]  # in the order they started
            failed = [f for f in finished if f.exception() is not None]
            if failed:  # the first failure, as one fit at a time would have raised it
                raise failed[0].exception()  # type: ignore[misc]
            for future in finished:
                results[running.pop(future)[0]] = future.result()
        for c in collections:  # in the order one fit at a time gives
            out[Split.VALID.value].update(results[c][0])
            out[Split.TEST.value].update(results[c][1])
        pool.shutdown()
    except BaseException:
        # Stop the other fits now (an error, or Ctrl-C) instead of waiting hours for them, each unwinding as on
        # Ctrl-C, and return once they have ended.
        stop_pool(pool)
        raise
    return out


FIT_PRELOAD: tuple[str, ...] = ("fastslow.pipeline", "models.registry", "models.gnn.model")
"""What the fork server of concurrent fits imports before it forks them: the pipeline, and the GNNs (torch and PyG),
the only models that fit concurrently (:meth:`~models.base.RankingModel.fits_concurrently`); the registry imports a
model's module on its first look-up, which would be in every fit's process otherwise."""


def _fit_context() -> multiprocessing.context.BaseContext:
    """The start method of concurrent fits' processes: a fork server where the platform has one (Linux, macOS),
    which imports :data:`FIT_PRELOAD` once and forks each fit's process from that; spawn elsewhere (each process
    imports what it needs)."""
    if "forkserver" in multiprocessing.get_all_start_methods():
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(list(FIT_PRELOAD))
        return context
    return multiprocessing.get_context("spawn")


def _init_job(pipeline: int, threads: int, progress: bool) -> None:
    """Start of a concurrent fit's process: it ends with the ``pipeline`` process
    (:func:`~competition.workers.end_with_process`, not its parent, which is the fork server: a killed pipeline leaves
    no fit writing its run folder; the server, which each fit holds open, ends after them), runs torch on its share
    of the cores (set here as well as by the inherited ``OMP_NUM_THREADS``: with the variable alone, predictions
    differed in the 7th digit from those of a process that set its threads), prints its progress bars as whole
    lines (bars of several processes redrawn in place on one terminal would overwrite each other), and takes no
    Ctrl-C: the pipeline stops it (:func:`~competition.workers.stop_by_parent`)."""
    stop_by_parent()
    import torch

    end_with_process(pipeline)
    torch.set_num_threads(threads)
    if progress:
        line_progress()


def _collection_job(model_name: str, params: dict[str, object], data: CollectionData, progress: bool, slot: float,
                    end: float, runs_dir: Path | None = None) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """One collection's fit and predictions in a concurrent fit's process: fitting stops after
    :data:`~competition.budget.FIT_FRACTION` of ``slot`` and early enough to predict by ``end`` (monotonic clock
    values are the machine's, the same in every process). Stopped by the pipeline, it unwinds as on Ctrl-C and
    ends with :class:`KeyboardInterrupt` (:func:`~competition.workers.stoppable_job`)."""
    from models.registry import make_model

    started = time.monotonic()
    deadline = (None if math.isinf(slot)
                else max(started, min(started + FIT_FRACTION * slot, end - (1 - FIT_FRACTION) * slot)))
    predict_by = None if math.isinf(slot) else max(started, min(started + slot, end))
    with stoppable_job():
        fit = fit_collection(model_name, make_model(model_name, **params), data, progress=progress,
                             deadline=deadline, predict_by=predict_by, runs_dir=runs_dir)
    return fit.predictions[Split.VALID], fit.predictions[Split.TEST]


@dataclass(frozen=True)
class TrainedCollection:
    """One collection of a ``fastslow train`` run.

    Attributes:
        collection: the collection.
        valid: its valid score on the protocol's configs (``None`` without valid graphs).
        graphs: the valid graphs predicted.
        seconds: the fit's time.
        saved: the run folder's ``model.json`` (``None`` in the processes of a launch but the first).
    """

    collection: Collection
    valid: float | None
    graphs: int
    seconds: float
    saved: Path | None


def train_collections(model_name: str, dataset: Dataset, *, params: ModelParams, runs_dir: str | Path,
                      progress: bool = True, say: Callable[[str], object] = _say,
                      watch: Callable[[Collection], AbstractContextManager[object]] | None = None,
                      shard: Callable[[Sequence[int]], Sequence[int]] | None = None,
                      gather: Gather | None = None, main: bool = True) -> Iterator[TrainedCollection]:
    """What ``fastslow train`` runs: fit ``model_name`` on each collection of ``dataset`` (:func:`fit_collections`),
    save each fit with its record in ``<runs_dir>/<model>/<collection>/`` (``fastslow submit`` and ``predict``
    reuse it), the folder held while it fits, and score the valid predictions.

    Args:
        watch: around each fit besides the folder's hold (a launch's collectives watched); ``None`` for none.
        shard, gather: a launch's share of the valid graphs and their gathering to the first process
            (:func:`fit_collections`).
        main: this process saves and holds the folders (the first of a launch).

    Yields:
        One :class:`TrainedCollection` per collection predicted on valid, as each ends.
    """
    import contextlib

    from competition.runlock import hold_run_folder
    from competition.submission_scoring import score_predictions
    from fastslow.saved_runs import save_run
    from models.base import run_folder

    saved: dict[Collection, Path] = {}

    def holding(c: Collection) -> contextlib.ExitStack:
        stack = contextlib.ExitStack()
        if watch is not None:
            stack.enter_context(watch(c))
        if main:
            stack.enter_context(hold_run_folder(run_folder(runs_dir, model_name, c)))
        return stack

    def save(c: Collection, model: RankingModel) -> None:
        if main:
            saved[c] = save_run(run_folder(runs_dir, model_name, c), model_name, model, dataset[c], complete=True)

    for fit in fit_collections(model_name, dataset, params=params, splits=(Split.VALID,), progress=progress,
                               say=say, holding=holding, after_fit=save, shard=shard, gather=gather):
        if Split.VALID not in fit.predictions:
            continue
        c, preds = fit.collection, fit.predictions[Split.VALID]
        report = score_predictions(preds, dataset.subset([c]).labels(Split.VALID)) if preds else None
        yield TrainedCollection(c, report.scores()[c] if report is not None else None, len(preds), fit.seconds,
                                saved.get(c))
