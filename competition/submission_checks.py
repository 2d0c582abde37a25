"""A submission checked against a data root: every expected ID present once, no unknown one, and each row's
indices in range, distinct and as many as its graph needs; and the sample submission checked against the test
split.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path

import numpy as np
import numpy.typing as npt

from competition.collections import Collection, Split, submission_id
from competition.dataroot import DataRoot, Listing, list_graphs, listed_graphs
from competition.errors import DataFileError
from competition.labels import SplitLabels
from competition.metrics import TILE_TOP_K
from competition.npzio import NpzReader
from competition.protocol import DEFAULT_PROTOCOL, ValidProtocol
from competition.submission_format import (
    MAX_LISTED,
    ProblemLog,
    SubmissionProblem,
    parse_submission_id,
)
from competition.submission_reading import SubmissionRow, parse_submission_file, read_sample_ids


def _listed(values: npt.ArrayLike) -> str:
    v = np.asarray(values)
    more = f", ... ({v.size} in all)" if v.size > MAX_LISTED else ""
    return ", ".join(map(str, v[:MAX_LISTED].tolist())) + more


def expected_ids(root: DataRoot, split: Split, sample_submission: Path | None,
                 collections: Iterable[Collection] | None) -> dict[str, Path]:
    """Expected submission ID -> npz file (which may be missing when the IDs come from a sample submission)."""
    wanted = set(Collection) if collections is None else {Collection(c) for c in collections}
    if sample_submission is None and split == Split.TEST:
        sample_submission = root.sample_submission
    out: dict[str, Path] = {}
    if sample_submission is not None and Path(sample_submission).is_file():
        for sid in read_sample_ids(sample_submission):
            c, stem = parse_submission_id(sid)
            if c in wanted:
                out[sid] = root.collection_dir(c, split) / f"{stem}.npz"
        return out
    for c in Collection:
        if c in wanted:
            out.update({submission_id(c, p.stem): p for p in list_graphs(root, c, split)})
    return out


def sample_problems(root: DataRoot, collections: Iterable[Collection] | None = None, *,
                    listing: Listing | None = None) -> list[DataFileError]:
    """What is wrong between ``sample_submission.csv`` and the test split (empty: nothing, or no sample file).

    The sample lists the IDs a submission must have: each needs its test file, and a test file it does not list
    would make every submission written from the test split hold an unknown ID.

    Args:
        root: the data root.
        collections: the collections to compare (default: all five).
        listing: the root's folders as already listed (:class:`~competition.dataroot.Listing`); default: listed now.
    """
    if root.sample_submission is None:
        return []
    try:
        ids = read_sample_ids(root.sample_submission)
    except DataFileError as exc:
        return [exc]
    listed: dict[Collection, set[str]] = {}
    for sid in ids:
        c, stem = parse_submission_id(sid)
        listed.setdefault(c, set()).add(stem)
    out: list[DataFileError] = []
    for c in Collection if collections is None else [Collection(x) for x in collections]:
        folder = root.collection_dir(c, Split.TEST)
        files = {p.stem for p in listed_graphs(root, c, Split.TEST, listing)}
        missing = sorted(listed.get(c, set()) - files)
        if missing:
            out.append(DataFileError(root.sample_submission, None, f"a test file for every {c.value} ID listed",
                                     f"{len(missing)} ID(s) without one in {folder}: {_listed(missing)}"))
        unlisted = sorted(files - listed.get(c, set()))
        if unlisted:
            out.append(DataFileError(folder, None, f"only test graphs that {root.sample_submission.name} lists",
                                     f"{len(unlisted)} it does not list: {_listed(unlisted)}"))
    return out


def _num_configs(path: Path) -> int:
    with NpzReader(path) as r:
        return int(r.info("config_runtime").shape[0])


def _order_problems(row: SubmissionRow, collection: Collection, c: int, subset: npt.NDArray[np.int64] | None
                    ) -> list[tuple[str, str]]:
    """What is wrong with a row's order for a graph of ``c`` configs, as ``(kind, problem)`` pairs;
    ``subset``: the valid protocol's configs (``None``: every config), of which a layout row may list exactly
    these or all ``c``."""
    order = row.order
    out: list[tuple[str, str]] = []
    bad = order[order >= c]
    if bad.size:
        out.append(("indices out of range", f"index(es) out of range [0, {c}): {_listed(bad)}"))
    values, counts = np.unique(order, return_counts=True)
    dup = values[counts > 1]
    if dup.size:
        out.append(("duplicated indices", f"duplicated index(es): {_listed(dup)}"))
    if collection.is_layout:
        if subset is not None and order.size != c:
            missing = np.setdiff1d(subset, order)
            extra = np.setdiff1d(order, subset)
            if missing.size or extra.size:
                out.append(("layout rows not a permutation",
                            f"not a permutation of the valid protocol's {subset.size} configs (nor of "
                            f"range({c})): missing {missing.size}"
                            + (f" ({_listed(missing)})" if missing.size else "")
                            + (f", {extra.size} not in it ({_listed(extra)})" if extra.size else "")))
            return out
        missing = np.setdiff1d(np.arange(c), order)
        if missing.size or order.size != c:
            out.append(("layout rows not a permutation",
                        f"not a permutation of range({c}): {order.size} indices given, missing {missing.size}"
                        + (f" ({_listed(missing)})" if missing.size else "")))
    else:
        need = min(TILE_TOP_K, c)
        if order.size < need:
            out.append(("tile rows of too few indices",
                        f"too few indices: {order.size} given, {need} expected (min(5, C) with C = {c})"))
    return out


def _check(path: str | os.PathLike[str], root: DataRoot, split: Split, sample_submission: Path | None,
           collections: Iterable[Collection] | None, protocol: ValidProtocol = DEFAULT_PROTOCOL,
           labels: SplitLabels | None = None) -> tuple[list[SubmissionProblem], list[SubmissionRow]]:
    rows, problems, seen = parse_submission_file(path)
    if problems.whole_file:
        return problems.result(), []
    expected = expected_ids(root, Split(split), sample_submission, collections)
    return check_rows(rows, problems, seen, expected, split, collections, protocol, labels)


def check_rows(rows: list[SubmissionRow], problems: ProblemLog, seen: set[str],
               expected: Mapping[str, Path | None], split: Split, collections: Iterable[Collection] | None,
               protocol: ValidProtocol, labels: SplitLabels | None
               ) -> tuple[list[SubmissionProblem], list[SubmissionRow]]:
    """The problems of parsed rows against the graphs ``expected`` (ID -> npz file), and the rows that passed.

    A graph's config count and scored subset come from ``labels`` when they hold it, else from its npz header.

    Returns:
        The problems (those ``problems`` already held, then these) as
        :meth:`~competition.submission_format.ProblemLog.result` gives them, and the rows without any.
    """
    chosen = None if collections is None else set(collections)
    good: list[SubmissionRow] = []
    for row in rows:
        if row.id not in expected:
            if chosen is None or parse_submission_id(row.id)[0] in chosen:
                problems.add("unknown IDs", SubmissionProblem(
                    row.row, row.id, f"unknown ID: no such graph in the {Split(split).value} split"))
            continue
        collection, stem = parse_submission_id(row.id)
        known = labels.get(row.id) if labels is not None else None
        if known is not None:
            c, subset = known.num_configs, known.rows
        else:
            npz = expected[row.id]
            if npz is None or not npz.is_file():
                found = "is not a file" if npz is not None and os.path.lexists(npz) else "not found"
                problems.add("graphs without their data file",
                             SubmissionProblem(row.row, row.id, f"data file {npz} {found}"))
                continue
            c = _num_configs(npz)
            subset = protocol.configs(collection, stem, c, split)
        found = _order_problems(row, collection, c, subset)
        for kind, message in found:
            problems.add(kind, SubmissionProblem(row.row, row.id, message))
        if not found:
            good.append(row)
    for sid in sorted(set(expected) - seen):
        problems.add("expected IDs missing",
                     SubmissionProblem(None, sid, "expected ID missing from the submission"))
    return problems.result(), good


def validate_submission(
    path: str | os.PathLike[str],
    root: DataRoot,
    split: Split = Split.TEST,
    *,
    sample_submission: Path | None = None,
    collections: Iterable[Collection] | None = None,
    protocol: ValidProtocol = DEFAULT_PROTOCOL,
) -> list[SubmissionProblem]:
    """Every problem of a submission file against the data (empty list: valid).

    Checked: the header and every row's syntax (as :func:`~competition.submission_reading.read_submission`),
    every expected ID present exactly once, no unknown ID, layout rows a permutation of ``range(C)`` (on the
    valid split, or of the valid protocol's configs), tile rows at least ``min(5, C)`` indices, all in range and
    distinct. Config counts come from the npz headers only.

    Args:
        path: the submission CSV.
        root: the data root.
        split: the split the submission is for.
        sample_submission: the file listing the expected IDs; default ``root.sample_submission`` for the test
            split (if present); otherwise the graph files of ``split`` in every collection.
        collections: restrict the check to these collections (IDs of others are then ignored).
        protocol: the valid split's protocol (:mod:`competition.protocol`): which layout rows are accepted.

    Returns:
        The problems, in row order, missing IDs last: at most
        :data:`~competition.submission_format.MAX_PROBLEMS_PER_KIND` of each kind, then a summary of each kind
        with more (:attr:`~competition.submission_format.SubmissionProblem.more`;
        :func:`~competition.submission_format.problem_count` counts them all).
    """
    collections = None if collections is None else list(collections)
    return _check(path, root, split, sample_submission, collections, protocol)[0]
