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
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from tqdm.auto import tqdm

from competition.collections import Collection, Split
from competition.errors import DataRootNotFound
from competition.leaderboard import DEFAULT_PATH, append_row
from competition.reader import DataRoot, find_data_root, list_graphs, load_graph
from competition.stats import oracle_score
from competition.submission import (
    ScoreReport,
    score_submission,
    submission_id,
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


def split_labels(root: DataRoot, collections: Sequence[Collection], split: Split) -> dict[str, np.ndarray]:
    """The runtimes each graph of a labelled split is ranked by, keyed by submission ID.

    Args:
        root: the data root.
        collections: the collections to read.
        split: a split whose runtimes are in its files (train or valid; not the Kaggle test split).

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
            out[gid] = g.normalized_runtime() if c.is_tile else g.config_runtime.astype(np.float64)
    return out


def predict_split(model_name: str, root: DataRoot, collections: Sequence[Collection], *,
                  progress: bool = True, **params: object) -> dict[str, dict[str, np.ndarray]]:
    """Fit ``model_name`` per collection on train; predict valid and test.

    Returns:
        ``{split: {submission ID: scores}}`` for ``valid`` and ``test``.
    """
    from models.registry import make_model

    out: dict[str, dict[str, np.ndarray]] = {Split.VALID.value: {}, Split.TEST.value: {}}
    for c in collections:
        model = make_model(model_name, **params).fit(root, c, split=Split.TRAIN, progress=progress)
        for split in (Split.VALID, Split.TEST):
            paths = list_graphs(root, c, split)
            for path, gid in tqdm(list(zip(paths, _ids(c, paths), strict=True)), disable=not progress,
                                  desc=f"{model_name} {c.value} {split.value}", leave=False):
                out[split.value][gid] = model.predict(load_graph(path, c))
    return out


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
) -> PipelineResult:
    """Run data -> models -> submission -> validation -> offline score, printing the tables.

    Args:
        data: explicit data root (default: discovered, else the synthetic demo world).
        models: model names to try (default: :data:`models.registry.SUBMIT_MODELS`).
        out_dir: where submissions are written.
        synth_dir: where the synthetic world lives (generated once, when no real data is found).
        synth_scale: the scale of that world (``demo``; ``tiny`` for tests).
        leaderboard: leaderboard CSV (default ``<out_dir>/leaderboard.csv``).
        progress: show progress bars.
        ensemble: with two models or more, also fit an ensemble of them on the valid split (scored by
            cross-validation, saved to ``<out_dir>/ensemble.json``) and let it compete for the submission.
        ensemble_params: hyper-parameters of :class:`models.ensemble.Ensemble` (default: ``method="auto"``,
            ``normalization="auto"``).
    """
    from models.registry import default_models

    t0 = time.perf_counter()
    out_dir = Path(out_dir)
    board = Path(leaderboard) if leaderboard else out_dir / DEFAULT_PATH.name
    root, synthetic = resolve_data(data, synth_dir, scale=synth_scale, progress=progress)
    collections = [c for c in Collection if list_graphs(root, c, Split.TRAIN)]
    print(f"data: {root.root} ({'synthetic world' if synthetic else 'real data'}; {root.source})")
    names = list(models or default_models())
    if ensemble and ENSEMBLE in names:
        raise ValueError(f"a model may not be named {ENSEMBLE!r}: the ensemble's rows would be confused with it")
    valid_oracles = split_oracles(root, collections, Split.VALID)
    valid_reports: dict[str, ScoreReport] = {}
    valid_predictions: dict[str, dict[str, np.ndarray]] = {}
    test_predictions: dict[str, dict[str, np.ndarray]] = {}
    for name in names:
        preds = predict_split(name, root, collections, progress=progress)
        valid_file = write_submission(out_dir / f"valid-{name}.csv", preds[Split.VALID.value])
        report = score_submission(valid_file, root, Split.VALID)
        append_row(report.scores(), file=valid_file, producer=name, split=Split.VALID.value, data=root.root,
                   synthetic=synthetic, path=board)
        valid_reports[name] = report
        valid_predictions[name] = preds[Split.VALID.value]
        test_predictions[name] = preds[Split.TEST.value]
        print(f"\n{name}: valid split\n{report.format_table(valid_oracles)}")
    best = max(names, key=lambda n: valid_reports[n].combined)
    fitted: Ensemble | None = None
    ensemble_path: Path | None = None
    components: dict[str, str] = {}
    if ensemble and len(names) >= 2:
        fitted, ensemble_path, valid_reports[ENSEMBLE], test_predictions[ENSEMBLE] = _run_ensemble(
            root, collections, valid_predictions, test_predictions, out_dir=out_dir, board=board,
            synthetic=synthetic, oracles=valid_oracles, params=ensemble_params)
        components[ENSEMBLE] = fitted.describe()
        ens_combined = valid_reports[ENSEMBLE].combined
        if ens_combined >= valid_reports[best].combined:
            print(f"\nthe ensemble (valid combined {ens_combined:.4f}, cross-validated) is at least as good as the "
                  f"best model {best} ({valid_reports[best].combined:.4f}): it makes the submission")
            best = ENSEMBLE
        else:
            print(f"\nthe ensemble (valid combined {ens_combined:.4f}, cross-validated) is below the best model "
                  f"{best} ({valid_reports[best].combined:.4f}): {best} makes the submission")
    submission = write_submission(out_dir / "submission.csv", test_predictions[best])
    problems = validate_submission(submission, root, Split.TEST)
    if problems:
        raise RuntimeError(f"{submission} failed validation:\n" + "\n".join(map(str, problems)))
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
    print(f"\nall models on the valid split:\n{format_comparison(valid_reports, valid_oracles)}")
    seconds = time.perf_counter() - t0
    print(f"\npipeline finished in {seconds:.0f} s; leaderboard: {board}")
    return PipelineResult(root, synthetic, best, submission, valid_reports, test_report, seconds, fitted,
                          ensemble_path)


def _run_ensemble(
    root: DataRoot,
    collections: Sequence[Collection],
    valid_predictions: dict[str, dict[str, np.ndarray]],
    test_predictions: dict[str, dict[str, np.ndarray]],
    *,
    out_dir: Path,
    board: Path,
    synthetic: bool,
    oracles: dict[Collection, float] | None,
    params: dict[str, object] | None,
) -> tuple[Ensemble, Path, ScoreReport, dict[str, np.ndarray]]:
    """Fit the ensemble on the valid split, score its cross-validated valid predictions, predict the test split.

    Weights are never fitted on the graphs they score: the valid report comes from
    :meth:`~models.ensemble.Ensemble.cross_val_predict`; the test predictions use weights fitted on every valid graph.

    Returns:
        ``(ensemble, its JSON file, valid report, test predictions)``.
    """
    from models.ensemble import Ensemble

    labels = split_labels(root, collections, Split.VALID)
    ens = Ensemble(**{"method": "auto", "normalization": "auto", **(params or {})})  # type: ignore[arg-type]
    ens.fit(valid_predictions, labels)
    valid_file = write_submission(out_dir / f"valid-{ENSEMBLE}.csv", ens.cross_val_predict(valid_predictions, labels))
    report = score_submission(valid_file, root, Split.VALID)
    append_row(report.scores(), file=valid_file, producer=ENSEMBLE, split=Split.VALID.value, data=root.root,
               synthetic=synthetic, path=board, components=ens.describe())
    path = ens.save(out_dir / "ensemble.json")
    print(f"\n{ENSEMBLE}: valid split (cross-validated: each graph scored with weights fitted without it)\n"
          f"{report.format_table(oracles)}\ncomponents: {ens.describe()}\nsaved: {path}")
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
) -> dict[Split, dict[str, ScoreReport]]:
    """Fit each model on train and score it on every labelled split asked for (test only on synthetic data).

    Returns:
        ``{split: {model: report}}``; the comparison tables are printed.
    """
    from models.registry import default_models

    root, synthetic = resolve_data(data, progress=progress)
    collections = [c for c in Collection if list_graphs(root, c, Split.TRAIN)]
    splits = [s for s in splits if s != Split.TEST or synthetic]
    out: dict[Split, dict[str, ScoreReport]] = {s: {} for s in splits}
    for name in models or default_models():
        preds = predict_split(name, root, collections, progress=progress)
        for split in splits:
            path = write_submission(Path(out_dir) / f"{split.value}-{name}.csv", preds[split.value])
            out[split][name] = score_submission(path, root, split)
    for split in splits:
        print(f"\n{split.value} split ({'synthetic world' if synthetic else 'real data'}: {root.root})")
        print(format_comparison(out[split], split_oracles(root, collections, split)))
    if synthetic:
        print("Synthetic scores say whether the machinery works; they say nothing about the Kaggle leaderboard.")
    return out


def split_oracles(root: DataRoot, collections: Sequence[Collection], split: Split) -> dict[Collection, float] | None:
    values = {c: oracle_score(root, c, split) for c in collections}
    present = {c: v for c, v in values.items() if v is not None}
    return present or None
