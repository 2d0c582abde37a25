"""The whole pipeline behind ``make submit``: data, models, submission, validation, offline score.

:func:`run_pipeline` composes five stages, each taking what the one before produced:

1. :func:`open_data`: find the data root (``--data``, ``FASTSLOW_DATA``, a Kaggle mount, ``./data``; when there is
   none, generate the synthetic demo world once in ``data/synthetic-demo``), list it once, check it and open the
   dataset (:class:`OpenData`).
2. :func:`plan_run`: the models in the order they run, their settings, the time budget's shares, every folder
   written checked before any fitting (:class:`Plan`).
3. :func:`fit_models`: fit each model per collection on the train split, predict the valid and test splits
   (:func:`fastslow.fitting.predict_split`), score its valid predictions in memory against the valid labels read
   once (:meth:`competition.dataset.Dataset.labels`), write them as ``valid-<model>.csv``, and offer the best so far
   as the submission (:func:`offer`: validated against ``sample_submission.csv`` and the data, then promoted only
   when at least as good on valid as the ``submission.csv`` there).
4. :func:`ensemble_models`: with two learned models or more (:func:`models.registry.ensemble_members`), fit an
   ensemble of them on the valid split (:class:`models.ensemble.Ensemble`, weights per collection), score its
   cross-validated valid predictions (each graph scored with weights fitted without it) the same way, and offer it.
5. :func:`report_run`: score the submission offline (in memory: the synthetic test split through ``secret/``; on
   real data only the valid split has labels), print the tables; every scoring is recorded in the leaderboard. Only
   the commands that take a file (``fastslow score``, ``validate``, ``kaggle submit``) read submission files back.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from competition.atomic import atomic_write_text, output_problem
from competition.budget import TimeBudget
from competition.collections import Collection, Split
from competition.dataroot import DataRoot, Listing, find_data_root
from competition.dataset import Dataset
from competition.errors import DataRootNotFound
from competition.labels import SplitLabels
from competition.metrics import SubmissionScores
from competition.nesting import json_loads
from competition.protocol import DEFAULT_PROTOCOL, ValidProtocol
from competition.stats import oracle_scores
from competition.submission_checks import validate_submission
from competition.submission_format import (
    SubmissionError,
    SubmissionProblem,
    orders_text,
    problem_count,
    submission_orders,
    submission_text,
    write_submission,
)
from competition.submission_scoring import score_orders, score_predictions
from competition.workers import default_jobs
from fastslow.board import DEFAULT_PATH, append_row
from fastslow.fitting import collection_weights, predict_split
from fastslow.promotion import Promotion, SubmissionRecord, new_run_id, promote, save_ensemble

if TYPE_CHECKING:
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
    if data is None and root.is_synthetic and root.root.resolve() == Path(synth_dir).resolve():
        _renew_world(synth_dir, progress)
    return root, root.is_synthetic


def _renew_world(folder: str | Path, progress: bool) -> None:
    """A world in fastslow's own folder, found rather than given, made by another generator than this fastslow's
    (an older one, after an update): made again with the same settings (scale, seed, collections, limits), so that a fastslow update never fits on stale files. A world
    of other settings is the user's choice and is kept; one whose manifest cannot be read is left to the reader."""
    from competition.synthetic.scales import GENERATOR_VERSION
    from competition.synthetic.world import generate_world, read_world_config

    try:
        made = read_world_config(folder)
    except ValueError:
        return
    if made.generator == GENERATOR_VERSION:
        return
    print(f"{folder} holds a synthetic world made by generator {made.generator}; this fastslow's is "
          f"{GENERATOR_VERSION}: making it again with the same settings.")
    generate_world(folder, scale=made.scale, seed=made.seed, collections=made.collections, limit=made.limit,
                   tile_limit=made.tile_limit, programs=made.programs, progress=progress, force=True)


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
        leaderboard. The rows scored are the rows written (:func:`~competition.submission_format.submission_orders`).

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
    (:func:`fastslow.promotion.promote`). Prints what happened to earlier files.

    A file with problems is written nowhere: it is kept as ``<name>.rejected`` and
    :class:`~competition.atomic.RejectedOutput` (a ``ValueError``: one ``error:`` line on the command line) says so.
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


def preflight(root: DataRoot, synthetic: bool, listing: Listing | None = None) -> None:
    """Refuse, before any fitting, a data root whose submission would fail at the end: a missing or empty split of
    a collection, a folder that cannot be listed, file names unusable in submission IDs, a sample submission that
    does not match the test files, missing or unreadable secret runtimes (:func:`competition.dataroot.validate_root`,
    :func:`competition.submission_checks.sample_problems`). The npz files are not opened: ``fastslow data validate``
    checks them. ``listing``: the root's folders as already listed (default: listed now).

    Raises:
        ValueError: naming the first problem and how many there are.
    """
    from competition.dataroot import validate_root
    from competition.errors import printable, suggested_command
    from competition.submission_checks import sample_problems

    problems = validate_root(root, synthetic=synthetic, listing=listing) + sample_problems(root, listing=listing)
    if problems:
        again = suggested_command("data", "validate", "--data", root.root)
        raise ValueError(f"{len(problems)} problem(s) of the data root {printable(root.root)}, found before any "
                         f"fitting (`{again}` lists them all); the first: {printable(problems[0])}")


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


@dataclass(frozen=True)
class OpenData:
    """The data of a run, opened once: its root, every folder listed once, the dataset fitted on, the valid
    protocol. Every later stage takes what it needs from here; none resolves or lists the root again.

    Attributes:
        root: the data root.
        synthetic: a synthetic world (its test split is scored through ``secret/``).
        listing: every collection and split folder, as listed once (:class:`competition.dataroot.Listing`).
        dataset: the collections with train graphs, each split's files taken from ``listing``.
        protocol: which configs of the valid graphs are predicted and scored.
    """

    root: DataRoot
    synthetic: bool
    listing: Listing
    dataset: Dataset
    protocol: ValidProtocol

    def labels(self, split: Split) -> SplitLabels:
        """The labels of ``split``'s graphs in the collections fitted (:meth:`competition.dataset.Dataset.labels`)."""
        return self.dataset.labels(split)


def open_data(data: str | Path | None, *, synth_dir: str | Path = DEFAULT_SYNTH_DIR, synth_scale: str = "demo",
              protocol: ValidProtocol = DEFAULT_PROTOCOL, progress: bool = True) -> OpenData:
    """Stage 1: find the data root (or generate the synthetic world), list it once, refuse it before any fitting
    when its submission would fail at the end (:func:`preflight`), open the dataset.

    Raises:
        DataRootNotFound: an explicit ``data`` that is not a data root.
        ValueError: a problem of the root, naming the first.
    """
    root, synthetic = resolve_data(data, synth_dir, scale=synth_scale, progress=progress)
    listing = Listing.of(root)
    preflight(root, synthetic, listing)
    opened = OpenData(root, synthetic, listing, Dataset.open(root, eval_split=Split.VALID, protocol=protocol,
                                                             listing=listing), protocol)
    print(f"data: {root.root} ({'synthetic world' if synthetic else 'real data'}; {root.source})")
    return opened


@dataclass(frozen=True)
class Plan:
    """What a run will fit and where it writes: stage 2's outcome.

    Attributes:
        names: the models, cheapest first (:data:`models.registry.COST_WEIGHTS`).
        params: hyper-parameters per model (quick ones under the given on a tiny or demo world).
        budget: the run's time budget.
        weights: each collection's share of a model's time (``None`` without a budget).
        jobs: collections fitted at once.
        runs_dir: where fits are saved and reused (``None``: neither).
        out_dir: where submissions go.
        board: the leaderboard file.
        run: the run's id (in ``submission.json``).
    """

    names: list[str]
    params: dict[str, ModelParams]
    budget: TimeBudget
    weights: dict[Collection, float] | None
    jobs: int
    runs_dir: Path | None
    out_dir: Path
    board: Path
    run: str


def plan_run(opened: OpenData, budget: TimeBudget, *, models: Sequence[str] | None,
             params: Mapping[str, ModelParams] | None, ensemble: bool, jobs: int | None, runs_dir: str | Path | None,
             out_dir: str | Path, leaderboard: str | Path | None) -> Plan:
    """Stage 2: the models in the order they run, their settings, the budget and its shares, and every folder a
    run writes checked writable before any fitting.

    Raises:
        ValueError: a model named ``ensemble``, settings for a model not run, a folder that cannot be written.
    """
    from models.registry import COST_WEIGHTS, default_models

    print(f"valid protocol: {opened.protocol.describe()}; {budget.describe()}")
    names = sorted(models or default_models(), key=lambda n: COST_WEIGHTS.get(n, 1.0))
    if ensemble and ENSEMBLE in names:
        raise ValueError(f"a model may not be named {ENSEMBLE!r}: the ensemble's rows would be confused with it")
    given = dict(params or {})
    if set(given) - set(names):
        raise ValueError(f"hyper-parameters given for {', '.join(sorted(set(given) - set(names)))}, which this "
                         f"run does not fit (models: {', '.join(names)})")
    collections = opened.dataset.collections
    if opened.synthetic and opened.root.world_scale in QUICK_SCALES:
        given = {name: with_quick_params(name, given.get(name), collections, str(opened.root.world_scale))
                 for name in names}
    runs = None if runs_dir is None else Path(runs_dir)
    if runs is not None:
        given = {name: _runs_dir_param(name, given.get(name), runs) for name in names}
    out_dir = Path(out_dir)
    board = Path(leaderboard) if leaderboard else out_dir / DEFAULT_PATH.name
    check_writable({"the output folder": out_dir, "the leaderboard's folder": board.parent, "the runs folder": runs,
                    **model_folders(names, given, collections)})
    return Plan(names, given, budget, collection_weights(opened.dataset) if budget.limited else None,
                default_jobs() if jobs is None else jobs, runs, out_dir, board, new_run_id())


@dataclass
class Candidates:
    """Every producer's valid report and predictions, and the one whose test predictions stand as the run's
    submission: what stages 3 and 4 build.

    Attributes:
        valid_reports: per producer (model, or ``ensemble``), its valid report.
        valid_predictions: per producer, its valid predictions.
        test_predictions: per producer, its test predictions.
        best: the producer of :attr:`submission` (``None`` before the first model).
        submission: the file the best was written to.
        ensemble: the fitted ensemble, when one was.
        ensemble_path: where it was saved.
    """

    valid_reports: dict[str, SubmissionScores] = field(default_factory=dict)
    valid_predictions: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)
    test_predictions: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)
    best: str | None = None
    submission: Path | None = None
    ensemble: Ensemble | None = None
    ensemble_path: Path | None = None


def fit_models(opened: OpenData, plan: Plan, scoring: _Scoring, *, progress: bool = True) -> Candidates:
    """Stage 3: fit and predict each model in turn within its share of the budget, score it on valid, and offer
    it for the submission (:func:`offer`): a valid submission exists from the first model on.

    Raises:
        RuntimeError: no model ran.
    """
    from models.registry import COST_WEIGHTS

    found = Candidates()
    names = plan.names
    for k, name in enumerate(names):
        seconds = plan.budget.share(COST_WEIGHTS.get(name, 1.0), sum(COST_WEIGHTS.get(n, 1.0) for n in names[k:]))
        if k > 0 and plan.budget.limited and plan.budget.spendable() <= 0:
            print(f"\n[budget] {name}: skipped, the time budget is spent ({plan.budget.describe()})")
            continue
        started = time.monotonic()
        preds = predict_split(name, opened.dataset, params=plan.params.get(name),
                              settings_file=plan.out_dir / f"settings-{name}.json", progress=progress,
                              seconds=seconds, weights=plan.weights, jobs=plan.jobs, runs_dir=plan.runs_dir)
        report = scoring.valid(name, preds[Split.VALID.value])
        found.valid_reports[name] = report
        found.valid_predictions[name] = preds[Split.VALID.value]
        found.test_predictions[name] = preds[Split.TEST.value]
        print(f"\n{name}: valid split ({time.monotonic() - started:.0f} s; {plan.budget.describe()})\n"
              f"{report.format_table(scoring.oracles)}")
        if found.best is None or report.combined > found.valid_reports[found.best].combined:
            if offer(opened, plan, found, name, names[:k + 1]).in_place:
                print(f"submission.csv: now from {name} (this run's best on valid so far)")
    if found.best is None:
        raise RuntimeError("no model ran")
    return found


def offer(opened: OpenData, plan: Plan, found: Candidates, producer: str, settings_of: Sequence[str],
          ensemble: dict[str, Any] | None = None) -> Promotion:
    """Make ``producer`` the run's best and write its test predictions as the run's submission
    (:func:`_write_best`: ``submission.csv`` when at least as good on valid as the one there, beside it otherwise)."""
    found.best = producer
    record = _record(plan.run, producer, found.valid_reports[producer], opened.protocol, opened.root, plan.out_dir,
                     settings_of)
    done = _write_best(plan.out_dir, opened.root, found.test_predictions[producer], record, ensemble=ensemble)
    found.submission = done.path
    return done


def ensemble_models(opened: OpenData, plan: Plan, scoring: _Scoring, found: Candidates, *,
                    params: dict[str, object] | None = None) -> None:
    """Stage 4: with two learned models or more (:func:`models.registry.ensemble_members`), fit the ensemble on
    the valid split, score it cross-validated, and let it make the submission when at least as good as the best
    model; saved either way."""
    from models.registry import ensemble_members

    members = ensemble_members(list(found.valid_predictions))
    if len(members) < 2:
        return
    best = found.best
    assert best is not None
    fitted, found.valid_reports[ENSEMBLE], found.test_predictions[ENSEMBLE] = _run_ensemble(
        scoring, {m: found.valid_predictions[m] for m in members}, {m: found.test_predictions[m] for m in members},
        params=params)
    found.ensemble = fitted
    ens_combined, best_combined = found.valid_reports[ENSEMBLE].combined, found.valid_reports[best].combined
    if ens_combined >= best_combined:
        print(f"\nthe ensemble (valid combined {ens_combined:.4f}, cross-validated) is at least as good as the "
              f"best model {best} ({best_combined:.4f}): it makes the submission")
        done = offer(opened, plan, found, ENSEMBLE, plan.names, ensemble=fitted.document())
        found.ensemble_path = plan.out_dir / ("ensemble.json" if done.in_place else "ensemble.new.json")
    else:
        print(f"\nthe ensemble (valid combined {ens_combined:.4f}, cross-validated) is below the best model "
              f"{best} ({best_combined:.4f}): {best} makes the submission")
        found.ensemble_path = save_ensemble(plan.out_dir, plan.run, fitted.document())
    print(f"ensemble settings saved: {found.ensemble_path}")


def report_run(opened: OpenData, plan: Plan, scoring: _Scoring, found: Candidates,
               started: float) -> PipelineResult:
    """Stage 5: say which submission stands, score it on the synthetic test split (recorded in the leaderboard),
    print every model's valid scores side by side."""
    best, submission, out_dir = found.best, found.submission, plan.out_dir
    assert best is not None and submission is not None
    print(f"\nbest on valid: {best} (combined {found.valid_reports[best].combined:.4f}); wrote {submission}, valid "
          f"against {opened.root.sample_submission or 'the test files'}")
    if submission.name != "submission.csv":
        print(f"{out_dir / 'submission.csv'} is kept: a better submission of an earlier run (its valid scores and "
              f"settings are in {out_dir / 'submission.json'})")
    test_report = None
    if opened.synthetic:
        # The rows written to submission.csv, scored in memory (the file was validated before it replaced the last).
        test_labels = opened.labels(Split.TEST)
        test_report = score_predictions(found.test_predictions[best], test_labels)
        components = found.ensemble.describe() if best == ENSEMBLE and found.ensemble is not None else ""
        append_row(test_report.scores(), file=submission, producer=best, split=Split.TEST.value,
                   data=opened.root.root, synthetic=True, path=plan.board, components=components)
        print(f"\n{submission.name} on the synthetic test split (hidden runtimes in secret/):\n"
              f"{test_report.format_table(oracle_scores(test_labels))}")
        print("Synthetic scores say whether the machinery works; they say nothing about the Kaggle leaderboard.")
    else:
        print("Real data: test labels are hidden; the valid table above is the offline estimate. "
              f"Submit with: fastslow kaggle submit {out_dir / 'submission.csv'} (the best on valid of this run and "
              "the ones before)")
    print(f"\nall models on the valid split (scored on {opened.protocol.describe()}):\n"
          f"{format_comparison(found.valid_reports, scoring.oracles)}")
    seconds = time.perf_counter() - started
    print(f"\npipeline finished in {seconds:.0f} s ({plan.budget.describe()}); leaderboard: {plan.board}")
    return PipelineResult(opened.root, opened.synthetic, best, submission, found.valid_reports, test_report,
                          seconds, found.ensemble, found.ensemble_path)


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
    """Run data -> models -> submission -> validation -> offline score, printing the tables: the stages
    :func:`open_data`, :func:`plan_run`, :func:`fit_models`, :func:`ensemble_models` and :func:`report_run`.

    Args:
        data: explicit data root (default: discovered, else the synthetic demo world).
        models: model names to try (default: :data:`models.registry.SUBMIT_MODELS`); they run cheapest first
            (:data:`models.registry.COST_WEIGHTS`).
        out_dir: where submissions are written.
        synth_dir: where the synthetic world lives (generated once, when no real data is found).
        synth_scale: the scale of that world (``demo``; ``tiny`` for tests).
        leaderboard: leaderboard CSV (default ``<out_dir>/leaderboard.csv``).
        progress: show progress bars.
        ensemble: with two learned models or more (:func:`models.registry.ensemble_members`), also fit an ensemble
            of them on the valid split (scored by cross-validation, saved to ``<out_dir>/ensemble.json``) and let
            it compete for the submission.
        ensemble_params: hyper-parameters of :class:`models.ensemble.Ensemble` (default:
            :data:`models.ensemble.PIPELINE_PARAMS`).
        protocol: which configs of the valid graphs are predicted and scored, by every model, the ensemble and
            the leaderboard (default: at most 1,000 fixed configs per valid layout graph).
        time_budget: seconds for the whole run (``None``: no limit), shared out across models and collections
            (:mod:`competition.budget`); the best so far replaces ``submission.csv`` after every model when at
            least as good on valid as the one there (:mod:`fastslow.promotion`).
        params: hyper-parameters per model name (default: each model's defaults); the ones used are printed and
            written to ``<out_dir>/settings-<model>.json``.
        jobs: collections fitted at once, where a model allows it (default :func:`competition.workers.default_jobs`).
        runs_dir: where every model's fit is saved per collection and a finished one reused
            (:mod:`fastslow.saved_runs`); ``None``: neither.

    The valid split does three jobs: early stopping, the choice of the best model, and the ensemble's weights. So
    the valid figures of the model that makes the submission are optimistic: the synthetic test split, which none
    of this saw, scores lower.
    """
    started, budget = time.perf_counter(), TimeBudget(time_budget)  # the budget counts the data's generation too
    opened = open_data(data, synth_dir=synth_dir, synth_scale=synth_scale, protocol=protocol, progress=progress)
    plan = plan_run(opened, budget, models=models, params=params, ensemble=ensemble, jobs=jobs, runs_dir=runs_dir,
                    out_dir=out_dir, leaderboard=leaderboard)
    scoring = _Scoring(opened.root, opened.labels(Split.VALID), plan.out_dir, plan.board, opened.synthetic)
    found = fit_models(opened, plan, scoring, progress=progress)
    if ensemble:
        ensemble_models(opened, plan, scoring, found, params=ensemble_params)
    return report_run(opened, plan, scoring, found, started)


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
    The ensemble is saved with the run's submission (:mod:`fastslow.promotion`), not here.

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
    fitted at once, where a model allows it (:func:`predict_split`; default :func:`competition.workers.default_jobs`).

    Returns:
        The reports per split and model, and the oracle per split; the comparison tables are printed.
    """
    from models.registry import default_models

    root, synthetic = resolve_data(data, progress=progress)
    dataset = Dataset.open(root, eval_split=Split.VALID, protocol=protocol)
    splits = [s for s in splits if s != Split.TEST or synthetic]
    labels = {split: dataset.labels(split) for split in splits}
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
