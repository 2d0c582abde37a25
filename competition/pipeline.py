"""The whole pipeline behind ``make submit``: data, models, submission, validation, offline score.

1. Find the data root (``--data``, ``FASTSLOW_DATA``, a Kaggle mount, ``./data``); when there is none, generate the
   synthetic demo world once (``data/synthetic-demo``) and use it.
2. Fit every available model per collection on the train split, predict the valid and test splits.
3. Score each model's valid predictions; the best combined valid score picks the model whose test predictions
   become ``submissions/submission.csv``.
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

import numpy as np
from tqdm.auto import tqdm

from competition.collections import Collection, Split
from competition.errors import DataRootNotFound
from competition.leaderboard import DEFAULT_PATH, append_row
from competition.reader import DataRoot, find_data_root, list_graphs, load_graph
from competition.stats import oracle_score
from competition.submission import ScoreReport, score_submission, validate_submission, write_submission

log = logging.getLogger(__name__)

DEFAULT_SYNTH_DIR = Path("data") / "synthetic-demo"
DEFAULT_OUT_DIR = Path("submissions")


@dataclass
class PipelineResult:
    """What one pipeline run produced."""

    root: DataRoot
    synthetic: bool
    best_model: str
    submission: Path
    valid_reports: dict[str, ScoreReport] = field(default_factory=dict)
    test_report: ScoreReport | None = None
    seconds: float = 0.0


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
    return [f"{collection.value}:{p.stem}" for p in paths]


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
) -> PipelineResult:
    """Run data -> models -> submission -> validation -> offline score, printing the tables.

    Args:
        data: explicit data root (default: discovered, else the synthetic demo world).
        models: model names to try (default: every registered model).
        out_dir: where submissions are written.
        synth_dir: where the synthetic world lives (generated once, when no real data is found).
        synth_scale: the scale of that world (``demo``; ``tiny`` for tests).
        leaderboard: leaderboard CSV (default ``<out_dir>/leaderboard.csv``).
        progress: show progress bars.
    """
    from models.registry import available_models

    t0 = time.perf_counter()
    out_dir = Path(out_dir)
    board = Path(leaderboard) if leaderboard else out_dir / DEFAULT_PATH.name
    root, synthetic = resolve_data(data, synth_dir, scale=synth_scale, progress=progress)
    collections = [c for c in Collection if list_graphs(root, c, Split.TRAIN)]
    print(f"data: {root.root} ({'synthetic world' if synthetic else 'real data'}; {root.source})")
    names = list(models or available_models())
    valid_oracles = split_oracles(root, collections, Split.VALID)
    valid_reports: dict[str, ScoreReport] = {}
    test_predictions: dict[str, dict[str, np.ndarray]] = {}
    for name in names:
        preds = predict_split(name, root, collections, progress=progress)
        valid_file = write_submission(out_dir / f"valid-{name}.csv", preds[Split.VALID.value])
        report = score_submission(valid_file, root, Split.VALID)
        append_row(report.scores(), file=valid_file, producer=name, split=Split.VALID.value, data=root.root,
                   synthetic=synthetic, path=board)
        valid_reports[name] = report
        test_predictions[name] = preds[Split.TEST.value]
        print(f"\n{name}: valid split\n{report.format_table(valid_oracles)}")
    best = max(names, key=lambda n: valid_reports[n].combined)
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
                   synthetic=True, path=board)
        print(f"\nsubmission.csv on the synthetic test split (hidden runtimes in secret/):\n"
              f"{test_report.format_table(split_oracles(root, collections, Split.TEST))}")
        print("Synthetic scores say whether the machinery works; they say nothing about the Kaggle leaderboard.")
    else:
        print("Real data: test labels are hidden; the valid table above is the offline estimate. "
              f"Submit with: fastslow kaggle submit {submission}")
    print(f"\nall models on the valid split:\n{format_comparison(valid_reports, valid_oracles)}")
    seconds = time.perf_counter() - t0
    print(f"\npipeline finished in {seconds:.0f} s; leaderboard: {board}")
    return PipelineResult(root, synthetic, best, submission, valid_reports, test_report, seconds)


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
    from models.registry import available_models

    root, synthetic = resolve_data(data, progress=progress)
    collections = [c for c in Collection if list_graphs(root, c, Split.TRAIN)]
    splits = [s for s in splits if s != Split.TEST or synthetic]
    out: dict[Split, dict[str, ScoreReport]] = {s: {} for s in splits}
    for name in models or available_models():
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
