"""The whole pipeline behind ``make submit``: data, models, submission, validation, offline score.

1. Find the data root (``--data``, ``FASTSLOW_DATA``, a Kaggle mount, ``./data``); when there is none, generate the
   synthetic demo world once (``data/synthetic-demo``) and use it.
2. Fit every available model per collection on the train split, predict the valid and test splits.
3. Score each model's valid predictions in memory, against the valid labels read once per run
   (:func:`competition.labels.load_labels`), and write them as ``valid-<model>.csv``. With two models or more, fit an ensemble of them on the valid split
   (:class:`models.ensemble.Ensemble`, weights per collection; the learned models only when two or more ran, not
   the reference rankings, see :func:`models.registry.ensemble_members`) and score its cross-validated valid predictions (each
   graph scored with weights fitted without it) the same way. The best combined valid score among the models and
   the ensemble picks the test predictions that become ``submissions/submission.csv``.
4. Validate the written submission against ``sample_submission.csv`` and the data before it replaces the last one,
   score it offline (in memory: the synthetic test split through ``secret/``; on real data only the valid split has
   labels), print the tables, and record every scoring in the leaderboard. Only the commands that take a file
   (``fastslow score``, ``validate``, ``kaggle submit``) read submission files back.
"""

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
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from tqdm.auto import tqdm

from competition.budget import FIT_FRACTION, TimeBudget, concurrent_slots, format_seconds
from competition.collections import Collection, Split
from competition.dataset import CollectionData, Dataset
from competition.errors import DataRootNotFound
from competition.labels import SplitLabels, load_labels
from competition.leaderboard import DEFAULT_PATH, append_row
from competition.nesting import json_loads
from competition.npzio import atomic_write_text, output_problem
from competition.progress import LOG_INTERVAL_SECONDS, line_progress
from competition.promotion import Promotion, SubmissionRecord, new_run_id, promote, save_ensemble
from competition.protocol import DEFAULT_PROTOCOL, ValidProtocol
from competition.reader import DataRoot, find_data_root
from competition.stats import oracle_scores
from competition.submission import (
    SubmissionError,
    SubmissionProblem,
    SubmissionScores,
    finite_scores,
    orders_text,
    problem_count,
    score_orders,
    score_predictions,
    submission_id,
    submission_orders,
    submission_text,
    validate_submission,
    write_submission,
)
from competition.workers import (
    child_environment,
    end_with_process,
    interrupts_held,
    stop_by_parent,
    stop_pool,
    stoppable_job,
    usable_cores,
)

if TYPE_CHECKING:
    from models.base import RankingModel
    from models.ensemble import Ensemble
    from models.registry import ModelParams

log = logging.getLogger(__name__)

DEFAULT_SYNTH_DIR = Path("data") / "synthetic-demo"
DEFAULT_OUT_DIR = Path("submissions")
DEFAULT_RUNS_DIR = Path("runs")
"""Where ``fastslow submit`` saves each model's fit and ``fastslow predict`` finds them (``--runs-dir``): the GNN's
default run folder too."""
ENSEMBLE = "ensemble"
"""The producer name of the ensemble's submissions and leaderboard rows: :attr:`models.ensemble.Ensemble.name`,
written here so that this module does not import the models (a test checks the two are equal)."""


@dataclass
class PipelineResult:
    """What one pipeline run produced.

    Attributes:
        best_model: the producer of ``submission``: a model name or ``ensemble``.
        valid_reports: valid-split report per model, and ``ensemble`` when one was fitted.
        ensemble: the fitted ensemble (``None`` with fewer than two models or ``ensemble=False``).
        ensemble_path: where it was saved.
    """

    root: DataRoot
    synthetic: bool
    best_model: str
    submission: Path
    valid_reports: dict[str, SubmissionScores] = field(default_factory=dict)
    test_report: SubmissionScores | None = None
    seconds: float = 0.0
    ensemble: Ensemble | None = None
    ensemble_path: Path | None = None


def resolve_data(data: str | Path | None, synth_dir: str | Path = DEFAULT_SYNTH_DIR, *, scale: str = "demo",
                 seed: int = 0, progress: bool = True) -> tuple[DataRoot, bool]:
    """The data root to use, generating the synthetic world when no real data is found.

    An explicit ``data`` that is not a data root is an error (never silently replaced by synthetic data).

    Returns:
        ``(root, synthetic)``.
    """
    try:
        root = find_data_root(data)
    except DataRootNotFound:
        if data is not None:
            raise
        from competition.synthetic.world import generate_world

        print(f"No real TpuGraphs data found: using the synthetic {scale} world in {synth_dir} "
              "(scores on it say nothing about the Kaggle leaderboard).")
        # The folder is fastslow's own: a world of other settings or of an older generator there is remade.
        generate_world(synth_dir, scale=scale, seed=seed, progress=progress, force=True)
        root = find_data_root(synth_dir)
    return root, root.is_synthetic


def collection_weights(dataset: Dataset) -> dict[Collection, float]:
    """A size measure of each collection's training work, from the npz headers: train graphs plus thousands of
    train nodes. Used to share a model's time out across collections."""
    return {d.collection: len(d.train) + sum(d.train.header_rows("node_opcode")) / 1000 for d in dataset}


MAX_AUTO_JOBS = 4
"""The most collections :func:`default_jobs` fits at once (a Kaggle CPU notebook's 4 cores): each concurrent fit holds
its own train graphs, several GiB for the xla:random seed ensemble at the real counts (RESULTS.md, "Real size")."""


def default_jobs() -> int:
    """How many collections the pipeline fits at once by default: one per usable core, at most
    :data:`MAX_AUTO_JOBS`. One fit per core with a thread each beats one fit on every core: a fit's small sparse
    operations use a second thread poorly, so fits side by side on a thread each finish sooner than one at a time
    on every thread (lab/journal.md, "The two commands")."""
    return min(usable_cores(), MAX_AUTO_JOBS)


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
            The same fits as one at a time (:func:`fit_collections`) on as many threads.
        runs_dir: where each collection's fitted model is saved, and a finished run with the same settings and data
            reused instead of fitted again (:mod:`competition.saved_runs`); ``None``: neither.

    Returns:
        ``{split: {submission ID: scores}}`` for ``valid`` and ``test``; a valid layout graph's scores follow
        the protocol's configs (:meth:`~competition.labels.SplitLabels.rows`).
    """
    from models.registry import ModelParams, make_model

    params = params or ModelParams()
    jobs = min(jobs, len(dataset))
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
            (:func:`~competition.submission.finite_scores`, naming ``model_name``, the collection and the graph).
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

    With ``runs_dir``, the model is saved in its run folder (:func:`competition.saved_runs.run_folder`; a GNN's own
    ``runs_dir`` first), and a finished run saved there with the same settings and data is loaded instead of
    fitting (:func:`competition.saved_runs.reusable_run`), saying so."""
    from competition.saved_runs import reusable_run, save_run
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


FIT_PRELOAD: tuple[str, ...] = ("competition.pipeline", "models.registry")
"""What the fork server of concurrent fits imports before it forks them (torch, PyG, LightGBM and every model)."""


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


@dataclass
class _Scoring:
    """How a run scores valid predictions: the valid labels (read once: the runtimes and the protocol's configs of
    every valid graph), their oracles, and where files and leaderboard rows go; shared by every model and the
    ensemble."""

    root: DataRoot
    labels: SplitLabels
    out_dir: Path
    board: Path
    synthetic: bool
    oracles: dict[Collection, float] | None = field(init=False)

    def __post_init__(self) -> None:
        self.oracles = oracle_scores(self.labels)

    def valid(self, producer: str, predictions: dict[str, np.ndarray], components: str = "") -> SubmissionScores:
        """Score ``predictions`` in memory, write them as ``valid-<producer>.csv``, record the score in the
        leaderboard. The rows scored are the rows written (:func:`~competition.submission.submission_orders`).

        Raises:
            RejectedOutput: the predictions do not make a valid submission under the protocol; the file is kept as
                ``valid-<producer>.csv.rejected``.
        """
        orders = submission_orders(predictions, self.labels.rows())
        report: SubmissionScores | None = None
        reason: str | None = None
        try:
            report = score_orders(orders, self.labels)
        except SubmissionError as exc:
            reason = _problems(exc.problems, Split.VALID, self.root)
        valid_file = atomic_write_text(self.out_dir / f"valid-{producer}.csv", orders_text(orders),
                                       check=lambda _: reason)
        assert report is not None  # a rejected file raised above
        append_row(report.scores(), file=valid_file, producer=producer, split=Split.VALID.value,
                   data=self.root.root, synthetic=self.synthetic, path=self.board, components=components,
                   protocol=self.labels.protocol.tag)
        return report


def _problems(problems: Sequence[SubmissionProblem], split: Split, root: DataRoot) -> str:
    """One line on a rejected file's problems: how many, and the first."""
    return f"{problem_count(problems)} problem(s) against the {split.value} split of {root.root}, the first: {problems[0]}"


def _write_best(out_dir: Path, root: DataRoot, predictions: dict[str, np.ndarray], record: SubmissionRecord,
                ensemble: dict[str, Any] | None = None) -> Promotion:
    """Write a run's best submission from ``predictions`` once it passes validation against the test split: as
    ``submission.csv`` when it scores at least as well on valid as the one there, beside it otherwise
    (:func:`competition.promotion.promote`). Prints what happened to earlier files.

    A file with problems is written nowhere: it is kept as ``<name>.rejected`` and
    :class:`~competition.npzio.RejectedOutput` (a ``ValueError``: one ``error:`` line on the command line) says so.
    """
    def validate(tmp: Path) -> str | None:
        problems = validate_submission(tmp, root, Split.TEST)
        return _problems(problems, Split.TEST, root) if problems else None

    done = promote(out_dir, submission_text(predictions), record, validate=validate, ensemble=ensemble)
    for line in done.said:
        print(line)
    return done


def _record(run: str, producer: str, report: SubmissionScores, protocol: ValidProtocol, root: DataRoot,
            out_dir: Path, names: Sequence[str]) -> SubmissionRecord:
    """What ``submission.json`` says of a submission of ``producer``: its valid scores and the run's settings (the
    ``settings-<model>.json`` of each model run so far)."""
    settings: dict[str, Any] = {}
    for name in names:
        try:
            settings[name] = json_loads((out_dir / f"settings-{name}.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
    return SubmissionRecord(run=run, producer=producer, combined=float(report.combined),
                            scores={c.value: float(v) for c, v in report.scores().items()}, protocol=protocol.tag,
                            data=str(Path(root.root).absolute()), settings=settings)


def check_writable(paths: Mapping[str, str | os.PathLike[str] | None]) -> None:
    """Refuse, before any fitting, an output folder that cannot be written: each must be a folder, or not exist
    yet under a writable folder.

    Args:
        paths: what each folder is for (named in the error), and the folder.

    Raises:
        ValueError: naming the first folder that cannot be written and why.
    """
    for what, value in paths.items():
        problem = None if value is None else output_problem(value, "folder")
        if problem is not None:
            raise ValueError(f"{what} {value}: {problem}")


def model_folders(names: Sequence[str], params: Mapping[str, ModelParams],
                  collections: Sequence[Collection]) -> dict[str, Path | None]:
    """The folders the models ``names`` write into with these settings: the runs and cache folders of each model
    that has them, for :func:`check_writable`."""
    from models.registry import make_model

    folders: dict[str, Path | None] = {}
    for name in names:
        given = params.get(name)
        for c in collections:
            model = make_model(name, **(given.for_collection(c) if given is not None else {}))
            for attr in ("runs_dir", "cache_dir"):
                value = getattr(model, attr, None)
                if value is not None:
                    folders[f"{name}'s {attr}"] = Path(value)
    return folders


def preflight(root: DataRoot, synthetic: bool) -> None:
    """Refuse, before any fitting, a data root whose submission would fail at the end: a missing or empty split of
    a collection, a folder that cannot be listed, file names unusable in submission IDs, a sample submission that
    does not match the test files, missing or unreadable secret runtimes (:func:`competition.reader.validate_root`,
    :func:`competition.submission.sample_problems`). The npz files are not opened: ``fastslow data validate`` checks
    them.

    Raises:
        ValueError: naming the first problem and how many there are.
    """
    from competition.reader import validate_root
    from competition.submission import sample_problems

    problems = validate_root(root, synthetic=synthetic) + sample_problems(root)
    if problems:
        raise ValueError(f"{len(problems)} problem(s) of the data root {root.root}, found before any fitting "
                         f"(`fastslow data validate {root.root}` lists them all); the first: {problems[0]}")


QUICK_SCALES: tuple[str, ...] = ("tiny", "demo")
"""Synthetic world scales the pipeline runs quickly: each model's :meth:`~models.base.RankingModel.quick_params` go
under the hyper-parameters given (``make submit`` must finish on the demo world in 5 minutes)."""


def with_quick_params(name: str, given: ModelParams | None, collections: Sequence[Collection],
                      scale: str) -> ModelParams:
    """``given`` with model ``name``'s quick parameters under it: a quick value is used for a collection only where
    the user set that hyper-parameter neither for every collection nor for that one. Prints what it changes."""
    from models.registry import MODELS, ModelParams, format_params

    given = given or ModelParams()
    per_collection = {Collection(c): dict(p) for c, p in given.per_collection.items()}
    for c in collections:
        own = per_collection.get(c, {})
        quick = {k: v for k, v in MODELS[name].quick_params(c).items() if k not in given.common and k not in own}
        if quick:
            print(f"{name} {c.value}: {format_params(quick)} on the {scale} world (its quick settings, so that the "
                  "run stays short; --param sets them)")
            per_collection[c] = {**quick, **own}
    return ModelParams(common=dict(given.common), per_collection=per_collection)


def _runs_dir_param(name: str, given: ModelParams | None, runs_dir: Path) -> ModelParams:
    """``given`` with ``run.runs_dir`` set to ``runs_dir`` for a model that keeps run folders (the GNNs), unless
    given."""
    from models.registry import MODELS, ModelParams, hyper_parameters

    given = given or ModelParams()
    if "run.runs_dir" not in hyper_parameters(MODELS[name]) or "run.runs_dir" in given.common:
        return given
    return ModelParams(common={**given.common, "run.runs_dir": str(runs_dir)}, per_collection=given.per_collection)


def run_pipeline(
    data: str | Path | None = None,
    *,
    models: Sequence[str] | None = None,
    out_dir: str | Path = DEFAULT_OUT_DIR,
    synth_dir: str | Path = DEFAULT_SYNTH_DIR,
    synth_scale: str = "demo",
    leaderboard: str | Path | None = None,
    progress: bool = True,
    ensemble: bool = True,
    ensemble_params: dict[str, object] | None = None,
    protocol: ValidProtocol = DEFAULT_PROTOCOL,
    time_budget: float | None = None,
    params: Mapping[str, ModelParams] | None = None,
    jobs: int | None = None,
    runs_dir: str | Path | None = None,
) -> PipelineResult:
    """Run data -> models -> submission -> validation -> offline score, printing the tables.

    Args:
        data: explicit data root (default: discovered, else the synthetic demo world).
        models: model names to try (default: :data:`models.registry.SUBMIT_MODELS`); they run cheapest first
            (:data:`models.registry.COST_WEIGHTS`).
        out_dir: where submissions are written.
        synth_dir: where the synthetic world lives (generated once, when no real data is found).
        synth_scale: the scale of that world (``demo``; ``tiny`` for tests).
        leaderboard: leaderboard CSV (default ``<out_dir>/leaderboard.csv``).
        progress: show progress bars.
        ensemble: with two models or more, also fit an ensemble of them on the valid split (scored by
            cross-validation, saved to ``<out_dir>/ensemble.json``) and let it compete for the submission; with two
            learned models or more, of those only (:func:`models.registry.ensemble_members`).
        ensemble_params: hyper-parameters of :class:`models.ensemble.Ensemble` (default:
            :data:`models.ensemble.PIPELINE_PARAMS`: ``method="auto"``, ``normalization="auto"``, ``min_graphs``
            :data:`~models.ensemble.MIN_FITTED_GRAPHS`).
        protocol: which configs of the valid graphs are predicted and scored, by every model, the ensemble and
            the leaderboard (default: at most 1,000 fixed configs per valid layout graph).
        time_budget: seconds for the whole run (``None``: no limit). Shared out across models and collections
            (:mod:`competition.budget`); after every model that beats the run's best so far, its submission
            replaces ``submission.csv`` when at least as good on valid as the one there
            (:mod:`competition.promotion`), so a valid one exists from the first model on.
        params: hyper-parameters per model name (default: each model's defaults); the ones used are printed and
            written to ``<out_dir>/settings-<model>.json``.
        jobs: collections fitted at once, where a model allows it (:func:`predict_split`; default
            :func:`default_jobs`).
        runs_dir: where every model's fit is saved per collection (``<runs_dir>/<model>/<collection slug>/``, the
            GNN's run folders too unless its ``run.runs_dir`` is given), and a finished run with the same settings
            and data reused instead of fitted again (:mod:`competition.saved_runs`); ``None``: neither (the GNN
            keeps its run folders where its own ``run.runs_dir`` says).

    The valid split does three jobs: early stopping (GBDT rounds, GNN epochs), the choice of the best model, and the
    ensemble's weights. So the valid figures of the model that makes the submission are optimistic: the synthetic
    test split, which none of this saw, scores lower.
    """
    from models.registry import COST_WEIGHTS, default_models, ensemble_members

    t0 = time.perf_counter()
    budget = TimeBudget(time_budget)
    out_dir = Path(out_dir)
    board = Path(leaderboard) if leaderboard else out_dir / DEFAULT_PATH.name
    root, synthetic = resolve_data(data, synth_dir, scale=synth_scale, progress=progress)
    preflight(root, synthetic)
    dataset = Dataset.open(root, eval_split=Split.VALID, protocol=protocol)
    collections = dataset.collections
    print(f"data: {root.root} ({'synthetic world' if synthetic else 'real data'}; {root.source})")
    print(f"valid protocol: {protocol.describe()}; {budget.describe()}")
    names = sorted(models or default_models(), key=lambda n: COST_WEIGHTS.get(n, 1.0))
    if ensemble and ENSEMBLE in names:
        raise ValueError(f"a model may not be named {ENSEMBLE!r}: the ensemble's rows would be confused with it")
    params = params or {}
    if set(params) - set(names):
        raise ValueError(f"hyper-parameters given for {', '.join(sorted(set(params) - set(names)))}, which this "
                         f"run does not fit (models: {', '.join(names)})")
    if synthetic and root.world_scale in QUICK_SCALES:
        params = {name: with_quick_params(name, params.get(name), collections, str(root.world_scale))
                  for name in names}
    if runs_dir is not None:
        params = {name: _runs_dir_param(name, params.get(name), Path(runs_dir)) for name in names}
    check_writable({"the output folder": out_dir, "the leaderboard's folder": board.parent,
                    "the runs folder": None if runs_dir is None else Path(runs_dir),
                    **model_folders(names, params, collections)})
    run = new_run_id()
    scoring = _Scoring(root, load_labels(root, collections, Split.VALID, protocol), out_dir, board, synthetic)
    weights = collection_weights(dataset) if budget.limited else None
    valid_reports: dict[str, SubmissionScores] = {}
    valid_predictions: dict[str, dict[str, np.ndarray]] = {}
    test_predictions: dict[str, dict[str, np.ndarray]] = {}
    best: str | None = None
    submission = out_dir / "submission.csv"
    for k, name in enumerate(names):
        seconds = budget.share(COST_WEIGHTS.get(name, 1.0), sum(COST_WEIGHTS.get(n, 1.0) for n in names[k:]))
        if k > 0 and budget.limited and budget.spendable() <= 0:
            print(f"\n[budget] {name}: skipped, the time budget is spent ({budget.describe()})")
            continue
        started = time.monotonic()
        preds = predict_split(name, dataset, params=params.get(name), settings_file=out_dir / f"settings-{name}.json",
                              progress=progress, seconds=seconds, weights=weights,
                              jobs=default_jobs() if jobs is None else jobs,
                              runs_dir=None if runs_dir is None else Path(runs_dir))
        report = scoring.valid(name, preds[Split.VALID.value])
        valid_reports[name] = report
        valid_predictions[name] = preds[Split.VALID.value]
        test_predictions[name] = preds[Split.TEST.value]
        print(f"\n{name}: valid split ({time.monotonic() - started:.0f} s; {budget.describe()})\n"
              f"{report.format_table(scoring.oracles)}")
        if best is None or report.combined > valid_reports[best].combined:
            best = name
            done = _write_best(out_dir, root, test_predictions[best],
                               _record(run, best, report, protocol, root, out_dir, names[:k + 1]))
            submission = done.path
            if done.in_place:
                print(f"submission.csv: now from {best} (this run's best on valid so far)")
    if best is None:
        raise RuntimeError("no model ran")
    fitted: Ensemble | None = None
    ensemble_path: Path | None = None
    components: dict[str, str] = {}
    members = ensemble_members(list(valid_predictions))
    if ensemble and len(members) >= 2:
        fitted, valid_reports[ENSEMBLE], test_predictions[ENSEMBLE] = _run_ensemble(
            scoring, {m: valid_predictions[m] for m in members}, {m: test_predictions[m] for m in members},
            params=ensemble_params)
        components[ENSEMBLE] = fitted.describe()
        ens_combined = valid_reports[ENSEMBLE].combined
        if ens_combined >= valid_reports[best].combined:
            print(f"\nthe ensemble (valid combined {ens_combined:.4f}, cross-validated) is at least as good as the "
                  f"best model {best} ({valid_reports[best].combined:.4f}): it makes the submission")
            best = ENSEMBLE
            done = _write_best(out_dir, root, test_predictions[best],
                               _record(run, best, valid_reports[best], protocol, root, out_dir, names),
                               ensemble=fitted.document())
            submission = done.path
            ensemble_path = out_dir / ("ensemble.json" if done.in_place else "ensemble.new.json")
        else:
            print(f"\nthe ensemble (valid combined {ens_combined:.4f}, cross-validated) is below the best model "
                  f"{best} ({valid_reports[best].combined:.4f}): {best} makes the submission")
            ensemble_path = save_ensemble(out_dir, run, fitted.document())
        print(f"ensemble settings saved: {ensemble_path}")
    print(f"\nbest on valid: {best} (combined {valid_reports[best].combined:.4f}); wrote {submission}, valid "
          f"against {root.sample_submission or 'the test files'}")
    if submission.name != "submission.csv":
        print(f"{out_dir / 'submission.csv'} is kept: a better submission of an earlier run (its valid scores and "
              f"settings are in {out_dir / 'submission.json'})")
    test_report = None
    if synthetic:
        # The rows written to submission.csv, scored in memory (the file was validated before it replaced the last).
        test_labels = load_labels(root, collections, Split.TEST)
        test_report = score_predictions(test_predictions[best], test_labels)
        append_row(test_report.scores(), file=submission, producer=best, split=Split.TEST.value, data=root.root,
                   synthetic=True, path=board, components=components.get(best, ""))
        print(f"\n{submission.name} on the synthetic test split (hidden runtimes in secret/):\n"
              f"{test_report.format_table(oracle_scores(test_labels))}")
        print("Synthetic scores say whether the machinery works; they say nothing about the Kaggle leaderboard.")
    else:
        print("Real data: test labels are hidden; the valid table above is the offline estimate. "
              f"Submit with: fastslow kaggle submit {out_dir / 'submission.csv'} (the best on valid of this run and "
              "the ones before)")
    print(f"\nall models on the valid split (scored on {protocol.describe()}):\n"
          f"{format_comparison(valid_reports, scoring.oracles)}")
    seconds = time.perf_counter() - t0
    print(f"\npipeline finished in {seconds:.0f} s ({budget.describe()}); leaderboard: {board}")
    return PipelineResult(root, synthetic, best, submission, valid_reports, test_report, seconds, fitted,
                          ensemble_path)


def _run_ensemble(
    scoring: _Scoring,
    valid_predictions: dict[str, dict[str, np.ndarray]],
    test_predictions: dict[str, dict[str, np.ndarray]],
    *,
    params: dict[str, object] | None,
) -> tuple[Ensemble, SubmissionScores, dict[str, np.ndarray]]:
    """Fit the ensemble on the valid split, score its cross-validated valid predictions, predict the test split.

    Weights are never fitted on the graphs they score: the valid report comes from
    :meth:`~models.ensemble.Ensemble.cross_val_predict`; the test predictions use weights fitted on every valid graph.
    The ensemble is saved with the run's submission (:mod:`competition.promotion`), not here.

    Returns:
        ``(ensemble, valid report, test predictions)``.
    """
    from models.ensemble import PIPELINE_PARAMS, Ensemble

    labels = scoring.labels.targets()
    ens = Ensemble(**{**PIPELINE_PARAMS, **(params or {})})
    picks = scoring.labels.picks()
    ens.fit(valid_predictions, labels, picks=picks)
    report = scoring.valid(ENSEMBLE, ens.cross_val_predict(valid_predictions, labels, picks=picks),
                           components=ens.describe())
    print(f"\n{ENSEMBLE}: valid split (cross-validated: each graph scored with weights fitted without it)\n"
          f"{report.format_table(scoring.oracles)}\ncomponents: {ens.describe()}")
    return ens, report, ens.predict(test_predictions)


def format_comparison(reports: dict[str, SubmissionScores], oracle: dict[Collection, float] | None = None) -> str:
    """One row per collection (and the combined score), one column per model, and the oracle ceiling if known."""
    names = list(reports)
    width = max([10, *(len(n) + 2 for n in names)])
    head = f"{'collection':20s}" + "".join(f"{n:>{width}s}" for n in names) + (f"{'oracle':>{width}s}" if oracle else "")
    lines = [head, "-" * len(head)]
    collections = [c for c in Collection if any(c in r.collections for r in reports.values())]
    for c in collections:
        cells = "".join(f"{reports[n].scores()[c]:>{width}.4f}" if c in reports[n].collections else f"{'-':>{width}}"
                        for n in names)
        orc = f"{oracle[c]:>{width}.4f}" if oracle and c in oracle else (f"{'-':>{width}}" if oracle else "")
        lines.append(f"{c.value:20s}{cells}{orc}")
    comb = "".join(f"{reports[n].combined:>{width}.4f}" for n in names)
    orc = f"{float(np.mean([oracle[c] for c in collections if c in oracle])):>{width}.4f}" if oracle else ""
    lines.append(f"{'combined':20s}{comb}{orc}")
    return "\n".join(lines)


@dataclass(frozen=True)
class Evaluation:
    """What :func:`evaluate_models` measured on one data root.

    Attributes:
        reports: ``{split: {model: report}}``.
        oracle: ``{split: oracle score per collection}`` (``None`` on real data, which has no noiseless runtimes).
    """

    root: DataRoot
    synthetic: bool
    reports: dict[Split, dict[str, SubmissionScores]]
    oracle: dict[Split, dict[Collection, float] | None]


def evaluate_models(
    data: str | Path | None = None,
    *,
    models: Sequence[str] | None = None,
    splits: Sequence[Split] = (Split.VALID, Split.TEST),
    out_dir: str | Path = DEFAULT_OUT_DIR,
    progress: bool = True,
    protocol: ValidProtocol = DEFAULT_PROTOCOL,
    params: Mapping[str, ModelParams] | None = None,
    jobs: int | None = None,
) -> Evaluation:
    """Fit each model on train and score it on every labelled split asked for (test only on synthetic data).

    ``params`` gives hyper-parameters per model name (default: each model's defaults); the ones used are printed and
    written to ``<out_dir>/settings-<model>.json``. Early stopping scores the valid split. ``jobs``: collections
    fitted at once, where a model allows it (:func:`predict_split`; default :func:`default_jobs`).

    Returns:
        The reports per split and model, and the oracle per split; the comparison tables are printed.
    """
    from models.registry import default_models

    root, synthetic = resolve_data(data, progress=progress)
    dataset = Dataset.open(root, eval_split=Split.VALID, protocol=protocol)
    collections = dataset.collections
    splits = [s for s in splits if s != Split.TEST or synthetic]
    labels = {split: load_labels(root, collections, split, protocol) for split in splits}
    out: dict[Split, dict[str, SubmissionScores]] = {s: {} for s in splits}
    for name in models or default_models():
        preds = predict_split(name, dataset, params=(params or {}).get(name),
                              settings_file=Path(out_dir) / f"settings-{name}.json", progress=progress,
                              jobs=default_jobs() if jobs is None else jobs)
        for split in splits:
            write_submission(Path(out_dir) / f"{split.value}-{name}.csv", preds[split.value], labels[split].rows())
            out[split][name] = score_predictions(preds[split.value], labels[split])
    oracle = {split: oracle_scores(labels[split]) for split in splits}
    for split in splits:
        scored = f"; scored on {protocol.describe()}" if split == Split.VALID else ""
        print(f"\n{split.value} split ({'synthetic world' if synthetic else 'real data'}: {root.root}{scored})")
        print(format_comparison(out[split], oracle[split]))
    if synthetic:
        print("Synthetic scores say whether the machinery works; they say nothing about the Kaggle leaderboard.")
    return Evaluation(root, synthetic, out, oracle)
