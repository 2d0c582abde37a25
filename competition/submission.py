"""The submission format: write, read, validate against the data, and score offline.

A submission is a CSV with header ``ID,TopConfigs``. ``ID`` is ``<collection>:<stem>`` (e.g.
``layout:xla:random:<stem>``); ``TopConfigs`` holds 0-based config indices joined by ``;``, fastest predicted
first: 5 for tile (all of them if the graph has fewer), a full permutation of ``range(C)`` for layout.

Row numbers in problems count data rows from 1; row 0 is the header (so row N is line N + 1 of the file).
"""

from __future__ import annotations

import csv
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from competition.collections import Collection, Split
from competition.metrics import CollectionResult, GraphResult, ScoreReport, predicted_order, score_graph
from competition.npzio import NpzReader, atomic_write_text
from competition.reader import DataRoot, list_graphs, load_secret_runtime

HEADER = ("ID", "TopConfigs")
TILE_TOP_K = 5
MAX_LISTED = 5  # indices named per problem message
MAX_PROBLEMS_IN_MESSAGE = 20
_INTEGER = re.compile(r"\s*-?[0-9]+\s*")  # ASCII digits only: int() would take other scripts' digits


@dataclass(frozen=True)
class SubmissionProblem:
    """One problem of a submission file.

    Attributes:
        row: the data row (1-based; 0 is the header), or ``None`` for a problem of no row (a missing ID).
        id: the submission ID concerned, if known.
        message: what was expected and what was found.
    """

    row: int | None
    id: str | None
    message: str

    def __str__(self) -> str:
        where = "header" if self.row == 0 else (f"row {self.row}" if self.row is not None else "missing row")
        return f"{where}" + (f" [{self.id}]" if self.id else "") + f": {self.message}"


class SubmissionError(ValueError):
    """A submission that cannot be used; carries every problem found.

    Args:
        path: the submission file.
        problems: the problems, in row order.
    """

    def __init__(self, path: str | os.PathLike[str], problems: list[SubmissionProblem]) -> None:
        self.path = Path(path)
        self.problems = list(problems)
        shown = [f"  {p}" for p in self.problems[:MAX_PROBLEMS_IN_MESSAGE]]
        more = len(self.problems) - len(shown)
        if more > 0:
            shown.append(f"  ... and {more} more")
        super().__init__(f"{self.path}: {len(self.problems)} problem(s)\n" + "\n".join(shown))

    def __reduce__(self):  # keeps the error picklable across process pools
        return (type(self), (self.path, self.problems))


class HiddenLabelsError(ValueError):
    """A split whose runtimes are hidden (the Kaggle test split) was asked to be scored."""


# --------------------------------------------------------------------------------------------------------------
# IDs
# --------------------------------------------------------------------------------------------------------------


def submission_id(collection: Collection, stem: str) -> str:
    """``<collection>:<stem>``, e.g. ``tile:xla:abc``."""
    return f"{Collection(collection).value}:{stem}"


def parse_submission_id(text: str) -> tuple[Collection, str]:
    """Split an ID into its collection and file stem.

    Raises:
        ValueError: no known collection prefix, or an empty stem.
    """
    for c in Collection:
        prefix = c.value + ":"
        if text.startswith(prefix) and len(text) > len(prefix) and ":" not in text[len(prefix):]:
            return c, text[len(prefix):]
    known = ", ".join(f"{c.value}:<stem>" for c in Collection)
    raise ValueError(f"ID {text!r} is not one of {known}")


# --------------------------------------------------------------------------------------------------------------
# Writing
# --------------------------------------------------------------------------------------------------------------


def format_order(order: npt.ArrayLike) -> str:
    """Config indices (int ``[m]``, fastest first) joined by ``;``."""
    return ";".join(str(int(i)) for i in np.asarray(order, dtype=np.int64))


def format_top_configs(collection: Collection, scores: npt.ArrayLike) -> str:
    """The ``TopConfigs`` field from per-config scores.

    Args:
        collection: decides how many indices are written: ``min(5, C)`` for tile, all C for layout.
        scores: ``[C]`` predicted scores, lower = faster; ties keep ascending index order.
    """
    order = predicted_order(scores)
    return format_order(order[:TILE_TOP_K] if Collection(collection).is_tile else order)


def _items(mapping: Mapping[str, npt.ArrayLike] | Iterable[tuple[str, npt.ArrayLike]]
           ) -> list[tuple[str, npt.ArrayLike]]:
    items = list(mapping.items()) if isinstance(mapping, Mapping) else list(mapping)
    seen: set[str] = set()
    for sid, _ in items:
        parse_submission_id(sid)
        if sid in seen:
            raise ValueError(f"submission ID {sid!r} given twice")
        seen.add(sid)
    return sorted(items, key=lambda kv: kv[0])


def _write(path: str | os.PathLike[str], rows: list[tuple[str, str]]) -> Path:
    lines = [",".join(HEADER)] + [f"{sid},{top}" for sid, top in rows]
    return atomic_write_text(path, "\n".join(lines) + "\n")


def write_submission(
    path: str | os.PathLike[str],
    predictions: Mapping[str, npt.ArrayLike] | Iterable[tuple[str, npt.ArrayLike]],
) -> Path:
    """Write a submission from per-graph scores (lower = faster), rows sorted by ID, atomically.

    Args:
        path: the CSV to write.
        predictions: submission ID -> ``[C]`` scores (a mapping or ``(id, scores)`` pairs).

    Returns:
        The path written.

    Raises:
        ValueError: an ID with no known collection prefix, or an ID given twice.
    """
    items = _items(predictions)
    return _write(path, [(sid, format_top_configs(parse_submission_id(sid)[0], s)) for sid, s in items])


def write_submission_orders(
    path: str | os.PathLike[str],
    orders: Mapping[str, npt.ArrayLike] | Iterable[tuple[str, npt.ArrayLike]],
) -> Path:
    """Write a submission from explicit orders (int ``[m]`` config indices, fastest first), written as given.

    Args:
        path: the CSV to write.
        orders: submission ID -> order.

    Returns:
        The path written.
    """
    return _write(path, [(sid, format_order(o)) for sid, o in _items(orders)])


# --------------------------------------------------------------------------------------------------------------
# Reading
# --------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Row:
    row: int
    id: str
    order: npt.NDArray[np.int64]


def _parse_indices(text: str) -> tuple[npt.NDArray[np.int64] | None, str | None]:
    if not text.strip():
        return None, "empty TopConfigs"
    tokens = text.split(";")
    bad = [t for t in tokens if _INTEGER.fullmatch(t) is None]
    if bad:
        return None, f"non-integer token(s) {', '.join(repr(t) for t in bad[:MAX_LISTED])} in TopConfigs"
    values = np.array([int(t) for t in tokens], dtype=np.int64)
    negative = values[values < 0]
    if negative.size:
        return None, f"negative index(es) {', '.join(map(str, negative[:MAX_LISTED]))} in TopConfigs"
    return values, None


def _parse(path: str | os.PathLike[str]) -> tuple[list[_Row], list[SubmissionProblem], set[str]]:
    """Rows that parse, every problem, and every ID seen (even on a bad row)."""
    rows: list[_Row] = []
    problems: list[SubmissionProblem] = []
    seen: dict[str, int] = {}
    with open(path, newline="", encoding="utf-8-sig") as f:
        reader = csv.reader(f)
        header = next(reader, None)
        if header is None:
            return [], [SubmissionProblem(0, None, f"empty file; expected the header {','.join(HEADER)}")], set()
        if tuple(h.strip() for h in header) != HEADER:
            missing = [h for h in HEADER if h not in header]
            extra = [h for h in header if h not in HEADER]
            detail = "; ".join(x for x in (f"missing column(s) {missing}" if missing else "",
                                           f"extra column(s) {extra}" if extra else "") if x)
            problems.append(SubmissionProblem(0, None, f"expected the header {','.join(HEADER)}; found "
                                                       f"{','.join(header)}" + (f" ({detail})" if detail else "")))
            return [], problems, set()
        for n, fields in enumerate(reader, start=1):
            if not fields:
                continue
            sid = fields[0].strip() or None
            if len(fields) != len(HEADER):
                problems.append(SubmissionProblem(n, sid, f"expected {len(HEADER)} fields; found {len(fields)}"))
                continue
            if sid is None:
                problems.append(SubmissionProblem(n, None, "empty ID"))
                continue
            if sid in seen:
                problems.append(SubmissionProblem(n, sid, f"duplicated ID (first on row {seen[sid]})"))
                continue
            seen[sid] = n
            try:
                parse_submission_id(sid)
            except ValueError as exc:
                problems.append(SubmissionProblem(n, sid, str(exc)))
                continue
            order, message = _parse_indices(fields[1])
            if message is not None:
                problems.append(SubmissionProblem(n, sid, message))
                continue
            rows.append(_Row(n, sid, order))
    return rows, problems, set(seen)


def read_submission(path: str | os.PathLike[str]) -> dict[str, npt.NDArray[np.int64]]:
    """Read a submission file.

    Args:
        path: the CSV.

    Returns:
        Submission ID -> int64 ``[m]`` config indices, fastest first, in file order.

    Raises:
        SubmissionError: any malformed header, row, ID or index, with every problem found.
    """
    rows, problems, _ = _parse(path)
    if problems:
        raise SubmissionError(path, problems)
    return {r.id: r.order for r in rows}


# --------------------------------------------------------------------------------------------------------------
# Validation against the data
# --------------------------------------------------------------------------------------------------------------


def _listed(values: npt.ArrayLike) -> str:
    v = np.asarray(values)
    more = f", ... ({v.size} in all)" if v.size > MAX_LISTED else ""
    return ", ".join(map(str, v[:MAX_LISTED].tolist())) + more


def _expected_ids(root: DataRoot, split: Split, sample_submission: Path | None,
                  collections: Iterable[Collection] | None) -> dict[str, Path]:
    """Expected submission ID -> npz file (which may be missing when the IDs come from a sample submission)."""
    wanted = set(Collection) if collections is None else {Collection(c) for c in collections}
    if sample_submission is None and split == Split.TEST:
        sample_submission = root.sample_submission
    out: dict[str, Path] = {}
    if sample_submission is not None and Path(sample_submission).is_file():
        with open(sample_submission, newline="", encoding="utf-8-sig") as f:
            for rec in csv.DictReader(f):
                c, stem = parse_submission_id(rec["ID"].strip())
                if c in wanted:
                    out[rec["ID"].strip()] = root.collection_dir(c, split) / f"{stem}.npz"
        return out
    for c in Collection:
        if c in wanted:
            out.update({submission_id(c, p.stem): p for p in list_graphs(root, c, split)})
    return out


def _num_configs(path: Path) -> int:
    with NpzReader(path) as r:
        return int(r.info("config_runtime").shape[0])


def _order_problems(row: _Row, collection: Collection, c: int) -> list[str]:
    order = row.order
    out: list[str] = []
    bad = order[order >= c]
    if bad.size:
        out.append(f"index(es) out of range [0, {c}): {_listed(bad)}")
    values, counts = np.unique(order, return_counts=True)
    dup = values[counts > 1]
    if dup.size:
        out.append(f"duplicated index(es): {_listed(dup)}")
    if collection.is_layout:
        missing = np.setdiff1d(np.arange(c), order)
        if missing.size or order.size != c:
            out.append(f"not a permutation of range({c}): {order.size} indices given, missing {missing.size}"
                       + (f" ({_listed(missing)})" if missing.size else ""))
    else:
        need = min(TILE_TOP_K, c)
        if order.size < need:
            out.append(f"too few indices: {order.size} given, {need} expected (min(5, C) with C = {c})")
    return out


def _check(path: str | os.PathLike[str], root: DataRoot, split: Split, sample_submission: Path | None,
           collections: Iterable[Collection] | None
           ) -> tuple[list[SubmissionProblem], list[tuple[_Row, Path]]]:
    rows, problems, seen = _parse(path)
    if any(p.row == 0 for p in problems):
        return problems, []
    expected = _expected_ids(root, Split(split), sample_submission, collections)
    good: list[tuple[_Row, Path]] = []
    for row in rows:
        npz = expected.get(row.id)
        if npz is None:
            if collections is None or parse_submission_id(row.id)[0] in set(collections):
                problems.append(SubmissionProblem(row.row, row.id, f"unknown ID: no such graph in the "
                                                                   f"{Split(split).value} split"))
            continue
        if not npz.is_file():
            problems.append(SubmissionProblem(row.row, row.id, f"data file {npz} not found"))
            continue
        found = _order_problems(row, parse_submission_id(row.id)[0], _num_configs(npz))
        problems.extend(SubmissionProblem(row.row, row.id, m) for m in found)
        if not found:
            good.append((row, npz))
    problems.sort(key=lambda p: p.row if p.row is not None else 0)
    problems.extend(SubmissionProblem(None, sid, "expected ID missing from the submission")
                    for sid in sorted(set(expected) - seen))
    return problems, good


def validate_submission(
    path: str | os.PathLike[str],
    root: DataRoot,
    split: Split = Split.TEST,
    *,
    sample_submission: Path | None = None,
    collections: Iterable[Collection] | None = None,
) -> list[SubmissionProblem]:
    """Every problem of a submission file against the data (empty list: valid).

    Checked: the header and every row's syntax (as :func:`read_submission`), every expected ID present exactly
    once, no unknown ID, layout rows a permutation of ``range(C)``, tile rows at least ``min(5, C)`` indices, all
    in range and distinct. Config counts come from the npz headers only.

    Args:
        path: the submission CSV.
        root: the data root.
        split: the split the submission is for.
        sample_submission: the file listing the expected IDs; default ``root.sample_submission`` for the test
            split (if present); otherwise the graph files of ``split`` in every collection.
        collections: restrict the check to these collections (IDs of others are then ignored).

    Returns:
        The problems, in row order, missing IDs last.
    """
    collections = None if collections is None else list(collections)
    return _check(path, root, split, sample_submission, collections)[0]


# --------------------------------------------------------------------------------------------------------------
# Offline scoring
# --------------------------------------------------------------------------------------------------------------


def _labels(root: DataRoot, collection: Collection, split: Split, npz: Path
            ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64] | None]:
    if split != Split.TEST:
        with NpzReader(npz) as r:
            y = r.load("config_runtime").astype(np.int64)
            norm = r.load("config_runtime_normalizers").astype(np.int64) if collection.is_tile else None
        return y, norm
    secret = root.secret_file(collection, split, npz.stem)
    if secret is None or not secret.is_file():
        raise HiddenLabelsError(
            f"{submission_id(collection, npz.stem)}: test runtimes are hidden (no {secret or root.root / 'secret'}); "
            "only synthetic worlds ship them in secret/. On real data score the valid split instead.")
    s = load_secret_runtime(root, collection, npz.stem, split=split)
    return s.config_runtime, s.config_runtime_normalizers


def score_submission(
    path: str | os.PathLike[str],
    root: DataRoot,
    split: Split = Split.VALID,
    *,
    raw: bool = False,
    collections: Iterable[Collection] | None = None,
) -> ScoreReport:
    """Validate and score a submission against labelled data.

    Labels come from the graph files for train and valid, and from the ``secret/`` tree for test (synthetic
    worlds only).

    Args:
        path: the submission CSV.
        root: the data root.
        split: the split the submission is for.
        raw: tile: rank by raw runtimes instead of normalised ones.
        collections: the collections to score; default those with at least one ID in the file (the report's
            ``complete`` says whether all five were there).

    Returns:
        A :class:`ScoreReport` with every graph's result.

    Raises:
        SubmissionError: the file is invalid for these collections.
        HiddenLabelsError: a test graph without hidden runtimes in ``secret/``.
    """
    split = Split(split)
    if collections is None:
        rows, problems, _ = _parse(path)
        if problems:
            raise SubmissionError(path, problems)
        collections = {parse_submission_id(r.id)[0] for r in rows}
    chosen = [c for c in Collection if c in set(collections)]
    problems, good = _check(path, root, split, None, chosen)
    if problems:
        raise SubmissionError(path, problems)
    results: dict[Collection, list[GraphResult]] = {c: [] for c in chosen}
    for row, npz in sorted(good, key=lambda rn: rn[0].id):
        c, stem = parse_submission_id(row.id)
        y, norm = _labels(root, c, split, npz)
        results[c].append(score_graph(c, row.order, y, norm, raw=raw, stem=stem))
    return ScoreReport({c: CollectionResult(c, g) for c, g in results.items()})

