"""The whole pipeline behind ``make submit``: data, models, submission, validation, offline score.

1. Find the data root (``--data``, ``FASTSLOW_DATA``, a Kaggle mount, ``./data``); when there is none, generate the
   synthetic demo world once (``data/synthetic-demo``) and use it.
2. Fit every available model per collection on the train split, predict the valid and test splits.
3. Score each model's valid predictions. With two models or more, fit an ensemble of them on the valid split
   (:class:`models.ensemble.Ensemble`, weights per collection) and score its cross-validated valid predictions (each
   graph scored with weights fitted without it) the same way. The best combined valid score among the models and
   the ensemble picks the test predictions that become ``submissions/submission.csv``.
4. Validate the submission against ``sample_submission.csv`` and the data, score it offline (the synthetic test split
   through ``secret/``; on real data only the valid split has labels), print the tables, and record every scoring in
   the leaderboard.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from tqdm.auto import tqdm

from competition.budget import FIT_FRACTION, TimeBudget, format_seconds
from competition.collections import Collection, Split
from competition.errors import DataRootNotFound
from competition.leaderboard import DEFAULT_PATH, append_row
from competition.npzio import NpzReader, atomic_write_text
from competition.protocol import DEFAULT_PROTOCOL, ValidProtocol
from competition.reader import DataRoot, find_data_root, list_graphs, load_graph
from competition.stats import oracle_score
from competition.submission import (
    ScoreReport,
    SubmissionError,
    SubmissionProblem,
    score_submission,
    submission_id,
    submission_text,
    validate_submission,
    write_submission,
)

if TYPE_CHECKING:
    from models.ensemble import Ensemble

log = logging.getLogger(__name__)

DEFAULT_SYNTH_DIR = Path("data") / "synthetic-demo"
DEFAULT_OUT_DIR = Path("submissions")
ENSEMBLE = "ensemble"
"""The producer name of the ensemble's submissions and leaderboard rows."""


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
    valid_reports: dict[str, ScoreReport] = field(default_factory=dict)
    test_report: ScoreReport | None = None
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
        generate_world(synth_dir, scale=scale, seed=seed, progress=progress)
        root = find_data_root(synth_dir)
    return root, is_synthetic(root)


def is_synthetic(root: DataRoot) -> bool:
    """A synthetic world carries its generator's ``world.json``."""
    return (root.root / "world.json").exists()


def _ids(collection: Collection, paths: Sequence[Path]) -> list[str]:
    return [submission_id(collection, p.stem) for p in paths]


def split_labels(root: DataRoot, collections: Sequence[Collection], split: Split,
                 protocol: ValidProtocol = DEFAULT_PROTOCOL) -> dict[str, np.ndarray]:
    """The runtimes each graph of a labelled split is ranked by, keyed by submission ID.

    Args:
        root: the data root.
        collections: the collections to read.
        split: a split whose runtimes are in its files (train or valid; not the Kaggle test split).
        protocol: on the valid split, the configs scored: labels are those of the protocol's subset, in the order of
            :meth:`~competition.reader.LayoutGraph.select_configs`.

    Returns:
        ``{ID: float64 [C]}``: tile graphs' normalised runtimes, layout graphs' ``config_runtime``.

    Raises:
        ValueError: a graph of the split has no runtimes (all zero, as in test files).
    """
    out: dict[str, np.ndarray] = {}
    for c in collections:
        paths = list_graphs(root, c, split)
        for path, gid in zip(paths, _ids(c, paths), strict=True):
            g = load_graph(path, c)
            if g.is_test:
                raise ValueError(f"{gid}: the {Split(split).value} split has no runtimes in {path}")
            g = protocol.select(g, c, split)
            out[gid] = g.normalized_runtime() if c.is_tile else g.config_runtime.astype(np.float64)
    return out


def split_rows(root: DataRoot, collections: Sequence[Collection], split: Split,
               protocol: ValidProtocol = DEFAULT_PROTOCOL) -> dict[str, np.ndarray | None]:
    """The configs of each graph that are predicted and scored (``None``: every config), keyed by submission ID.

    Config counts come from the npz headers only.
    """
    out: dict[str, np.ndarray | None] = {}
    for c in collections:
        paths = list_graphs(root, c, split)
        for path, gid in zip(paths, _ids(c, paths), strict=True):
            with NpzReader(path) as r:
                n = int(r.info("config_runtime").shape[0])
            out[gid] = protocol.configs(c, path.stem, n, split)
    return out


def collection_weights(root: DataRoot, collections: Sequence[Collection]) -> dict[Collection, float]:
    """A size measure of each collection's training work, from the npz headers: train graphs plus thousands of
    train nodes. Used to share a model's time out across collections."""
    out: dict[Collection, float] = {}
    for c in collections:
        paths = list_graphs(root, c, Split.TRAIN)
        nodes = 0
        for path in paths:
            with NpzReader(path) as r:
                nodes += int(r.info("node_opcode").shape[0])
        out[c] = len(paths) + nodes / 1000
    return out


def predict_split(model_name: str, root: DataRoot, collections: Sequence[Collection], *,
                  progress: bool = True, protocol: ValidProtocol = DEFAULT_PROTOCOL, seconds: float = math.inf,
                  weights: dict[Collection, float] | None = None, **params: object
                  ) -> dict[str, dict[str, np.ndarray]]:
    """Fit ``model_name`` per collection on train; predict valid (the protocol's configs) and test.

    Args:
        model_name: a registered model.
        root: the data root.
        collections: the collections to fit and predict.
        progress: show progress bars.
        protocol: the valid protocol: which configs of each valid layout graph are predicted.
        seconds: this model's share of the run's time budget; each collection gets a part of what is left in
            proportion to ``weights`` (equal parts without them), of which :data:`~competition.budget.FIT_FRACTION`
            goes to fitting.
        weights: relative cost of each collection (see :func:`collection_weights`).
        **params: hyper-parameters of the model.

    Returns:
        ``{split: {submission ID: scores}}`` for ``valid`` and ``test``; a valid layout graph's scores follow
        :func:`split_rows`.
    """
    from models.registry import make_model

    out: dict[str, dict[str, np.ndarray]] = {Split.VALID.value: {}, Split.TEST.value: {}}
    end = time.monotonic() + seconds
    weights = weights or {c: 1.0 for c in collections}
    for k, c in enumerate(collections):
        left = sum(weights[x] for x in collections[k:])
        slot = max(0.0, end - time.monotonic()) * (weights[c] / left if left > 0 else 1.0)
        deadline = None if math.isinf(slot) else time.monotonic() + FIT_FRACTION * slot
        if deadline is not None and slot > 0:
            print(f"[budget] {model_name} {c.value}: {format_seconds(slot)} (fit until {format_seconds(FIT_FRACTION * slot)})",
                  flush=True)
        started = time.monotonic()
        model = make_model(model_name, **params).fit(root, c, split=Split.TRAIN, progress=progress,
                                                     valid=protocol, deadline=deadline)
        fitted = time.monotonic()
        for split in (Split.VALID, Split.TEST):
            paths = list_graphs(root, c, split)
            for path, gid in tqdm(list(zip(paths, _ids(c, paths), strict=True)), disable=not progress,
                                  desc=f"{model_name} {c.value} {split.value}", unit="graph", leave=False):
                out[split.value][gid] = model.predict(protocol.select(load_graph(path, c), c, split))
        print(f"{model_name} {c.value}: fit {fitted - started:.1f} s, predict valid and test "
              f"{time.monotonic() - fitted:.1f} s", flush=True)
    return out


@dataclass
class _Scoring:
    """How a run scores valid predictions: the protocol's rows of every valid graph (read once from the npz
    headers), the oracles, and where files and leaderboard rows go; shared by every model and the ensemble."""

    root: DataRoot
    collections: list[Collection]
    protocol: ValidProtocol
    out_dir: Path
    board: Path
    synthetic: bool
    oracles: dict[Collection, float] | None
    rows: dict[str, np.ndarray | None] = field(init=False)

    def __post_init__(self) -> None:
        self.rows = split_rows(self.root, self.collections, Split.VALID, self.protocol)

    def valid(self, producer: str, predictions: dict[str, np.ndarray], components: str = "") -> ScoreReport:
        """Write ``valid-<producer>.csv`` once it scores under the protocol, record it in the leaderboard.

        Raises:
            RejectedOutput: the new file is invalid; it is kept as ``valid-<producer>.csv.rejected``.
        """
        reports: list[ScoreReport] = []

        def score(tmp: Path) -> str | None:
            try:
                reports.append(score_submission(tmp, self.root, Split.VALID, protocol=self.protocol))
            except SubmissionError as exc:
                return _problems(exc.problems, Split.VALID, self.root)
            return None

        valid_file = atomic_write_text(self.out_dir / f"valid-{producer}.csv",
                                       submission_text(predictions, self.rows), check=score)
        report = reports[0]
        append_row(report.scores(), file=valid_file, producer=producer, split=Split.VALID.value,
                   data=self.root.root, synthetic=self.synthetic, path=self.board, components=components,
                   protocol=self.protocol.tag)
        return report


def _problems(problems: Sequence[SubmissionProblem], split: Split, root: DataRoot) -> str:
    """One line on a rejected file's problems: how many, and the first."""
    return f"{len(problems)} problem(s) against the {split.value} split of {root.root}, the first: {problems[0]}"


def _write_best(out_dir: Path, root: DataRoot, predictions: dict[str, np.ndarray]) -> Path:
    """Write ``submission.csv`` from ``predictions`` once it passes validation against the test split.

    The new file is checked under its temporary name: one with problems never replaces the previous
    ``submission.csv``; it is kept as ``submission.csv.rejected`` and :class:`~competition.npzio.RejectedOutput`
    (a ``ValueError``: one ``error:`` line on the command line) says so.
    """
    def validate(tmp: Path) -> str | None:
        problems = validate_submission(tmp, root, Split.TEST)
        return _problems(problems, Split.TEST, root) if problems else None

    return atomic_write_text(out_dir / "submission.csv", submission_text(predictions), check=validate)


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
            cross-validation, saved to ``<out_dir>/ensemble.json``) and let it compete for the submission.
        ensemble_params: hyper-parameters of :class:`models.ensemble.Ensemble` (default: ``method="auto"``,
            ``normalization="auto"``).
        protocol: which configs of the valid graphs are predicted and scored, by every model, the ensemble and
            the leaderboard (default: at most 1,000 fixed configs per valid layout graph).
        time_budget: seconds for the whole run (``None``: no limit). Shared out across models and collections
            (:mod:`competition.budget`); ``submission.csv`` is rewritten after every model with the best so far, so
            a valid one exists from the first model on.
    """
    from models.registry import COST_WEIGHTS, default_models

    t0 = time.perf_counter()
    budget = TimeBudget(time_budget)
    out_dir = Path(out_dir)
    board = Path(leaderboard) if leaderboard else out_dir / DEFAULT_PATH.name
    root, synthetic = resolve_data(data, synth_dir, scale=synth_scale, progress=progress)
    preflight(root, synthetic)
    collections = [c for c in Collection if list_graphs(root, c, Split.TRAIN)]
    print(f"data: {root.root} ({'synthetic world' if synthetic else 'real data'}; {root.source})")
    print(f"valid protocol: {protocol.describe()}; {budget.describe()}")
    names = sorted(models or default_models(), key=lambda n: COST_WEIGHTS.get(n, 1.0))
    if ensemble and ENSEMBLE in names:
        raise ValueError(f"a model may not be named {ENSEMBLE!r}: the ensemble's rows would be confused with it")
    scoring = _Scoring(root, collections, protocol, out_dir, board, synthetic,
                       split_oracles(root, collections, Split.VALID, protocol))
    weights = collection_weights(root, collections) if budget.limited else None
    valid_reports: dict[str, ScoreReport] = {}
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
        preds = predict_split(name, root, collections, progress=progress, protocol=protocol, seconds=seconds,
                              weights=weights)
        report = scoring.valid(name, preds[Split.VALID.value])
        valid_reports[name] = report
        valid_predictions[name] = preds[Split.VALID.value]
        test_predictions[name] = preds[Split.TEST.value]
        print(f"\n{name}: valid split ({time.monotonic() - started:.0f} s; {budget.describe()})\n"
              f"{report.format_table(scoring.oracles)}")
        if best is None or report.combined > valid_reports[best].combined:
            best = name
            submission = _write_best(out_dir, root, test_predictions[best])
            print(f"submission.csv: now from {best} (the best on valid so far)")
    if best is None:
        raise RuntimeError("no model ran")
    fitted: Ensemble | None = None
    ensemble_path: Path | None = None
    components: dict[str, str] = {}
    if ensemble and len(valid_predictions) >= 2:
        fitted, ensemble_path, valid_reports[ENSEMBLE], test_predictions[ENSEMBLE] = _run_ensemble(
            scoring, valid_predictions, test_predictions, params=ensemble_params)
        components[ENSEMBLE] = fitted.describe()
        ens_combined = valid_reports[ENSEMBLE].combined
        if ens_combined >= valid_reports[best].combined:
            print(f"\nthe ensemble (valid combined {ens_combined:.4f}, cross-validated) is at least as good as the "
                  f"best model {best} ({valid_reports[best].combined:.4f}): it makes the submission")
            best = ENSEMBLE
            submission = _write_best(out_dir, root, test_predictions[best])
        else:
            print(f"\nthe ensemble (valid combined {ens_combined:.4f}, cross-validated) is below the best model "
                  f"{best} ({valid_reports[best].combined:.4f}): {best} makes the submission")
    print(f"\nbest on valid: {best} (combined {valid_reports[best].combined:.4f}); wrote {submission}, valid "
          f"against {root.sample_submission or 'the test files'}")
    test_report = None
    if synthetic:
        test_report = score_submission(submission, root, Split.TEST)
        append_row(test_report.scores(), file=submission, producer=best, split=Split.TEST.value, data=root.root,
                   synthetic=True, path=board, components=components.get(best, ""))
        print(f"\nsubmission.csv on the synthetic test split (hidden runtimes in secret/):\n"
              f"{test_report.format_table(split_oracles(root, collections, Split.TEST))}")
        print("Synthetic scores say whether the machinery works; they say nothing about the Kaggle leaderboard.")
    else:
        print("Real data: test labels are hidden; the valid table above is the offline estimate. "
              f"Submit with: fastslow kaggle submit {submission}")
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
) -> tuple[Ensemble, Path, ScoreReport, dict[str, np.ndarray]]:
    """Fit the ensemble on the valid split, score its cross-validated valid predictions, predict the test split.

    Weights are never fitted on the graphs they score: the valid report comes from
    :meth:`~models.ensemble.Ensemble.cross_val_predict`; the test predictions use weights fitted on every valid graph.

    Returns:
        ``(ensemble, its JSON file, valid report, test predictions)``.
    """
    from models.ensemble import Ensemble

    labels = split_labels(scoring.root, scoring.collections, Split.VALID, scoring.protocol)
    ens = Ensemble(**{"method": "auto", "normalization": "auto", **(params or {})})  # type: ignore[arg-type]
    ens.fit(valid_predictions, labels)
    report = scoring.valid(ENSEMBLE, ens.cross_val_predict(valid_predictions, labels), components=ens.describe())
    path = ens.save(scoring.out_dir / "ensemble.json")
    print(f"\n{ENSEMBLE}: valid split (cross-validated: each graph scored with weights fitted without it)\n"
          f"{report.format_table(scoring.oracles)}\ncomponents: {ens.describe()}\nsaved: {path}")
    return ens, path, report, ens.predict(test_predictions)


def format_comparison(reports: dict[str, ScoreReport], oracle: dict[Collection, float] | None = None) -> str:
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


def evaluate_models(
    data: str | Path | None = None,
    *,
    models: Sequence[str] | None = None,
    splits: Sequence[Split] = (Split.VALID, Split.TEST),
    out_dir: str | Path = DEFAULT_OUT_DIR,
    progress: bool = True,
    protocol: ValidProtocol = DEFAULT_PROTOCOL,
) -> dict[Split, dict[str, ScoreReport]]:
    """Fit each model on train and score it on every labelled split asked for (test only on synthetic data).

    Returns:
        ``{split: {model: report}}``; the comparison tables are printed.
    """
    from models.registry import default_models

    root, synthetic = resolve_data(data, progress=progress)
    collections = [c for c in Collection if list_graphs(root, c, Split.TRAIN)]
    splits = [s for s in splits if s != Split.TEST or synthetic]
    rows = split_rows(root, collections, Split.VALID, protocol)
    out: dict[Split, dict[str, ScoreReport]] = {s: {} for s in splits}
    for name in models or default_models():
        preds = predict_split(name, root, collections, progress=progress, protocol=protocol)
        for split in splits:
            path = write_submission(Path(out_dir) / f"{split.value}-{name}.csv", preds[split.value],
                                    rows if split == Split.VALID else None)
            out[split][name] = score_submission(path, root, split, protocol=protocol)
    for split in splits:
        scored = f"; scored on {protocol.describe()}" if split == Split.VALID else ""
        print(f"\n{split.value} split ({'synthetic world' if synthetic else 'real data'}: {root.root}{scored})")
        print(format_comparison(out[split], split_oracles(root, collections, split, protocol)))
    if synthetic:
        print("Synthetic scores say whether the machinery works; they say nothing about the Kaggle leaderboard.")
    return out


def split_oracles(root: DataRoot, collections: Sequence[Collection], split: Split,
                  protocol: ValidProtocol = DEFAULT_PROTOCOL) -> dict[Collection, float] | None:
    values = {c: oracle_score(root, c, split, protocol) for c in collections}
    present = {c: v for c, v in values.items() if v is not None}
    return present or None
