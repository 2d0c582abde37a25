"""A submission scored offline against a split's labels (:mod:`competition.labels`).

Rows held in memory are validated and scored exactly as the file holding them would be:
:func:`~competition.submission_format.submission_orders` gives the rows a file writes for per-graph scores,
:func:`score_orders` and :func:`score_predictions` score them, and :func:`score_submission` parses a file into
the same rows.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path

import numpy as np
import numpy.typing as npt

from competition.collections import Collection, Split
from competition.dataroot import DataRoot
from competition.labels import SplitLabels, load_labels
from competition.metrics import CollectionResult, GraphResult, SubmissionScores, score_graph
from competition.protocol import DEFAULT_PROTOCOL, ValidProtocol
from competition.submission_checks import check_rows, expected_ids
from competition.submission_format import (
    ProblemLog,
    SubmissionError,
    parse_submission_id,
    sorted_by_id,
    submission_orders,
)
from competition.submission_reading import SubmissionRow, parse_submission_file

IN_MEMORY = Path("<predictions in memory>")
"""What a :class:`~competition.submission_format.SubmissionError` of rows scored in memory
(:func:`score_orders`) names instead of a file."""


def _chosen(ids: Iterable[str], collections: Iterable[Collection] | None) -> list[Collection]:
    wanted = {parse_submission_id(sid)[0] for sid in ids} if collections is None else set(collections)
    return [c for c in Collection if c in wanted]


def _submission_scores(good: list[SubmissionRow], labels: SplitLabels, chosen: list[Collection], raw: bool
                       ) -> SubmissionScores:
    """Score rows that passed their checks, each against its graph's labels."""
    results: dict[Collection, list[GraphResult]] = {c: [] for c in chosen}
    for row in sorted(good, key=lambda r: r.id):
        lab = labels[row.id]
        results[lab.collection].append(score_graph(lab.collection, lab.local_order(row.order),
                                                   lab.target(raw=raw), stem=lab.stem, picks=lab.picks))
    return SubmissionScores({c: CollectionResult(c, g) for c, g in results.items()},
                       labels.protocol.describe() if labels.split == Split.VALID else "")


def score_orders(
    orders: Mapping[str, npt.ArrayLike],
    labels: SplitLabels,
    *,
    raw: bool = False,
    collections: Iterable[Collection] | None = None,
) -> SubmissionScores:
    """Validate and score submission rows held in memory, exactly as :func:`score_submission` scores the file
    holding them (:func:`~competition.submission_format.orders_text`).

    Args:
        orders: submission ID -> int config indices (the file's), fastest first
            (:func:`~competition.submission_format.submission_orders`).
        labels: the labels of the split (:func:`~competition.labels.load_labels`).
        raw: tile: rank by raw runtimes instead of normalised ones.
        collections: the collections to score; default those with at least one ID in ``orders``.

    Raises:
        SubmissionError: the rows are invalid for these collections (naming :data:`IN_MEMORY`).
    """
    chosen = _chosen(orders, collections)
    scored = labels.of(chosen)
    rows = [SubmissionRow(n, sid, np.asarray(o, dtype=np.int64))
            for n, (sid, o) in enumerate(sorted_by_id(orders), start=1)]
    seen = {r.id for r in rows}
    problems, good = check_rows(rows, ProblemLog(), seen, dict.fromkeys(scored), labels.split, chosen,
                                labels.protocol, scored)
    if problems:
        raise SubmissionError(IN_MEMORY, problems)
    return _submission_scores(good, scored, chosen, raw)


def score_predictions(predictions: Mapping[str, npt.ArrayLike], labels: SplitLabels, *, raw: bool = False
                      ) -> SubmissionScores:
    """Score per-graph scores (lower = faster) in memory: the score of the submission written from them.

    Args:
        predictions: submission ID -> ``[C']`` scores of the configs ``labels`` holds for the graph (the valid
            protocol's subset of a valid layout graph).
        labels: the labels of the split.
        raw: tile: rank by raw runtimes instead of normalised ones.
    """
    return score_orders(submission_orders(predictions, labels.rows()), labels, raw=raw)


def score_submission(
    path: str | os.PathLike[str],
    root: DataRoot,
    split: Split = Split.VALID,
    *,
    raw: bool = False,
    collections: Iterable[Collection] | None = None,
    protocol: ValidProtocol = DEFAULT_PROTOCOL,
    labels: SplitLabels | None = None,
) -> SubmissionScores:
    """Validate and score a submission file against labelled data.

    Labels come from the graph files for train and valid, and from the ``secret/`` tree for test (synthetic
    worlds only): :func:`~competition.labels.load_labels`.

    Args:
        path: the submission CSV.
        root: the data root.
        split: the split the submission is for.
        raw: tile: rank by raw runtimes instead of normalised ones.
        collections: the collections to score; default those with at least one ID in the file (the report's
            ``complete`` says whether all five were there).
        protocol: on the valid split, which configs of each layout graph are scored (default: at most 1,000 fixed
            ones; a full permutation is scored on them in its own order).
        labels: the split's labels when already loaded (their protocol then stands for ``protocol``).

    Returns:
        A :class:`SubmissionScores` with every graph's result.

    Raises:
        SubmissionError: the file is invalid for these collections.
        HiddenLabelsError: a test graph without hidden runtimes in ``secret/``.
    """
    split = Split(split)
    rows, parsed, seen = parse_submission_file(path)
    if parsed:
        raise SubmissionError(path, parsed.result())
    chosen = _chosen(seen, collections)
    if labels is None:
        labels = load_labels(root, chosen, split, protocol)
    labels = labels.of(chosen)
    expected = expected_ids(root, split, None, chosen)
    problems, good = check_rows(rows, parsed, seen, expected, split, chosen, labels.protocol, labels)
    if problems:
        raise SubmissionError(path, problems)
    return _submission_scores(good, labels, chosen, raw)
