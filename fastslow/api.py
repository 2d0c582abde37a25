"""What a notebook calls: ``import fastslow``, then :func:`submit`, :func:`train`, :func:`predict`, :func:`score` and
:func:`leaderboard`. They run the same code as the ``fastslow`` commands of the same names, and their tables come
back as pandas DataFrames.

>>> import fastslow
>>> scores = fastslow.submit()              # the whole pipeline; valid scores per collection and producer
>>> fastslow.score("submissions/submission.csv", per_graph=True).sort_values("score").head()
>>> fastslow.leaderboard().head()

pandas is imported when one of them is called, not with the package: the command line does not need it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from competition.collections import Collection, Split

if TYPE_CHECKING:
    import pandas as pd

    from competition.metrics import SubmissionScores
    from models.registry import ModelParams

Params = Mapping[str, "Mapping[str, Any] | ModelParams"]
"""Hyper-parameters per model name: a mapping of keys (``train.lr``, ``steps_per_graph``...; ``fastslow params``
lists them) to values for every collection, or a :class:`models.registry.ModelParams`."""


def _pd() -> Any:
    import pandas

    return pandas


def _model_params(params: Params | None) -> dict[str, ModelParams]:
    from models.registry import ModelParams

    return {name: p if isinstance(p, ModelParams) else ModelParams(common=dict(p)) for name, p in (params or {}).items()}


def collection_scores(reports: Mapping[str, SubmissionScores]) -> pd.DataFrame:
    """Scores per collection (rows, in collection order, then ``combined``) and producer (columns).

    Args:
        reports: per producer (a model, the ensemble, a file), its scores.
    """
    pd = _pd()
    collections = [c for c in Collection if any(c in r.collections and r.collections[c].graphs
                                                for r in reports.values())]
    table = {name: [r.scores().get(c, float("nan")) for c in collections] + [r.combined]
             for name, r in reports.items()}
    frame = pd.DataFrame(table, index=[c.value for c in collections] + ["combined"])
    frame.index.name = "collection"
    return frame


def graph_scores(report: SubmissionScores) -> pd.DataFrame:
    """One row per graph scored: ``id``, ``collection``, ``stem``, ``score`` (Kendall tau on layout, the top-5
    score on tile), ``num_configs``, ``opa`` and the top-k slowdowns (:class:`competition.metrics.GraphResult`)."""
    from dataclasses import asdict

    rows = [{**asdict(g), "collection": g.collection.value} for r in report.collections.values() for g in r.graphs]
    return _pd().DataFrame(rows)


def submit(data: str | os.PathLike[str] | None = None, *, models: Sequence[str] | None = None,
           out_dir: str | os.PathLike[str] = "submissions", runs_dir: str | os.PathLike[str] = "runs",
           time_budget: float | str | None = None, params: Params | None = None, jobs: int | None = None,
           progress: bool = True) -> pd.DataFrame:
    """``fastslow submit``: the whole pipeline (:func:`fastslow.pipeline.run_pipeline`), its tables printed too.

    Args:
        data: the data root (default: found as the command finds it, else the synthetic demo world).
        models: the models to try (default: ``fastslow submit``'s).
        out_dir: where submissions and the leaderboard go.
        runs_dir: where each fit is saved and a finished one reused.
        time_budget: seconds, or text such as ``"8h"`` (default: no limit).
        params: hyper-parameters per model (:data:`Params`).
        jobs: collections fitted at once (default: the usable cores, at most 4).
        progress: progress bars.

    Returns:
        The valid scores per collection and producer (:func:`collection_scores`), with a column ``submission
        (test)`` on a synthetic world (the submission's test scores); ``attrs`` holds ``best`` (its producer) and
        ``submission`` (its path).
    """
    from competition.budget import parse_duration
    from fastslow.pipeline import run_pipeline

    budget = parse_duration(time_budget) if isinstance(time_budget, str) else time_budget
    result = run_pipeline(data, models=models, out_dir=out_dir, runs_dir=runs_dir, time_budget=budget,
                          params=_model_params(params), jobs=jobs, progress=progress)
    reports = dict(result.valid_reports)
    if result.test_report is not None:
        reports["submission (test)"] = result.test_report
    frame = collection_scores(reports)
    frame.attrs.update(best=result.best_model, submission=str(result.submission))
    return frame


def train(model: str = "gnn", data: str | os.PathLike[str] | None = None, *,
          collections: Sequence[str] | None = None, runs_dir: str | os.PathLike[str] = "runs",
          params: Mapping[str, Any] | None = None, progress: bool = True) -> pd.DataFrame:
    """``fastslow train``: fit ``model`` on each collection's train split and save it in ``runs_dir``, where
    :func:`submit` and :func:`predict` find it (:func:`fastslow.fitting.train_collections`).

    Args:
        model: a registered model name (``fastslow params`` lists their settings).
        data: the data root (default: found as the command finds it).
        collections: submission prefixes (default: every collection with train graphs).
        runs_dir: where the runs go.
        params: the model's hyper-parameters, for every collection.
        progress: progress bars.

    Returns:
        One row per collection: ``collection``, ``valid`` (score on the valid protocol's configs), ``graphs``,
        ``seconds``, ``saved`` (the saved model's path).
    """
    from competition.dataroot import find_data_root
    from competition.dataset import Dataset
    from fastslow.fitting import train_collections

    root = find_data_root(data)
    asked = [Collection.parse(c) for c in collections] if collections else None
    dataset = Dataset.open(root, asked, eval_split=Split.VALID)
    given = _model_params({model: params or {}})[model]
    if model.startswith("gnn") and "runs_dir" not in given.common:
        given = type(given)(common={**given.common, "runs_dir": str(runs_dir)}, per_collection=given.per_collection)
    rows = [{"collection": r.collection.value, "valid": r.valid, "graphs": r.graphs, "seconds": r.seconds,
             "saved": None if r.saved is None else str(r.saved)}
            for r in train_collections(model, dataset, params=given, runs_dir=runs_dir, progress=progress)]
    return _pd().DataFrame(rows, columns=["collection", "valid", "graphs", "seconds", "saved"])


def predict(data: str | os.PathLike[str] | None = None, *, files: Sequence[str | os.PathLike[str]] | None = None,
            split: str = "test", models: Sequence[str] | None = None, runs_dir: str | os.PathLike[str] = "runs",
            submissions: str | os.PathLike[str] = "submissions", progress: bool = True) -> pd.DataFrame:
    """``fastslow predict``: rank every config of a split's graphs (or of npz ``files``) with saved runs, without
    fitting (:func:`fastslow.inference.predict_targets`); nothing is written.

    Args:
        data: the data root whose ``split`` is ranked (default: found as the command finds it).
        files: npz files to rank instead of a split.
        split: the split ranked.
        models: the saved runs to use, combined as the command combines them (default: the ensemble or best model
            of the last ``submit``, see ``fastslow predict --help``).
        runs_dir: where the runs are.
        submissions: where ``submit`` left its ensemble and records.
        progress: a progress bar.

    Returns:
        One row per config: ``id`` (the graph's submission ID), ``config`` (its row in the file), ``score`` (lower is
        predicted faster) and ``rank`` (0 for the config predicted fastest).
    """
    import numpy as np

    from competition.dataroot import find_data_root
    from fastslow.inference import PredictRefused, choose_models, file_targets, predict_targets, split_targets

    if files:
        targets = file_targets(list(files))
    else:
        root = find_data_root(data)
        targets = split_targets(root, Split(split))
        if not targets:
            raise PredictRefused(f"{root.root}: no graphs in the {split} split")
    collections = list(dict.fromkeys(t.collection for t in targets))
    combination = choose_models(models, collections, Path(runs_dir), Path(submissions))
    scores = predict_targets(targets, combination, Path(runs_dir), progress=progress, say=lambda line: None)
    def join(parts: list[Any], dtype: Any) -> Any:
        return np.concatenate(parts) if parts else np.zeros(0, dtype)

    ids: list[Any] = []
    configs: list[Any] = []
    values: list[Any] = []
    ranks: list[Any] = []
    for sid, s in scores.items():
        rank = np.empty(s.size, dtype=np.int64)
        rank[np.argsort(s, kind="stable")] = np.arange(s.size)
        ids.append(np.full(s.size, sid, dtype=object))
        configs.append(np.arange(s.size))
        values.append(s)
        ranks.append(rank)
    return _pd().DataFrame({"id": join(ids, object), "config": join(configs, np.int64),
                            "score": join(values, np.float64), "rank": join(ranks, np.int64)})


def score(submission: str | os.PathLike[str], data: str | os.PathLike[str] | None = None, *, split: str = "test",
          per_graph: bool = False) -> pd.DataFrame:
    """``fastslow score``: a submission file validated and scored against ``split``'s labels (the test split only on
    a synthetic world, whose ``secret/`` tree holds them).

    Args:
        submission: the CSV.
        data: the data root (default: found as the command finds it).
        split: ``test`` or ``valid``.
        per_graph: one row per graph (:func:`graph_scores`) instead of one per collection.

    Returns:
        Scores per collection (:func:`collection_scores`, one column named after the file), or per graph.

    Raises:
        SubmissionError: the file is not a valid submission of ``split``, with every problem.
    """
    from competition.dataroot import collections_with_graphs, find_data_root
    from competition.labels import load_labels
    from competition.submission_checks import validate_submission
    from competition.submission_format import SubmissionError
    from competition.submission_scoring import score_submission

    root, which = find_data_root(data), Split(split)
    problems = validate_submission(submission, root, which)
    if problems:
        raise SubmissionError(submission, problems)
    labels = load_labels(root, collections_with_graphs(root, which), which)
    report = score_submission(submission, root, which, labels=labels)
    return graph_scores(report) if per_graph else collection_scores({Path(submission).name: report})


def leaderboard(path: str | os.PathLike[str] = "submissions/leaderboard.csv") -> pd.DataFrame:
    """The offline leaderboard (``fastslow leaderboard``), one row per scoring, in file order; the score columns as
    numbers, ``time`` as a timestamp."""
    from fastslow.board import read_rows

    pd = _pd()
    frame = pd.DataFrame(read_rows(path))
    if frame.empty:
        return frame
    for column in [c.value for c in Collection] + ["combined"]:
        if column in frame:
            frame[column] = pd.to_numeric(frame[column].replace("", None), errors="coerce")
    if "time" in frame:
        frame["time"] = pd.to_datetime(frame["time"], errors="coerce", utc=True)
    return frame
