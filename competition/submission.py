"""The submission format: write, read, validate against the data, and score offline.

A submission is a CSV with header ``ID,TopConfigs``. ``ID`` is ``<collection>:<stem>`` (e.g.
``layout:xla:random:<stem>``); ``TopConfigs`` holds 0-based config indices joined by ``;``, fastest predicted
first: 5 for tile (all of them if the graph has fewer), a full permutation of ``range(C)`` for layout.

Rows held in memory are validated and scored exactly as the file holding them would be: :func:`submission_orders`
gives the rows a file writes for per-graph scores, :func:`score_orders` and :func:`score_predictions` score them
against a split's labels (:mod:`competition.labels`), and :func:`score_submission` parses a file into the same rows.

Row numbers in problems count data rows from 1; row 0 is the header (so row N is line N + 1 of the file).
"""

from __future__ import annotations

import csv
import io
import os
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from competition.collections import Collection, Split, submission_id
from competition.errors import DataFileError
from competition.labels import SplitLabels, load_labels
from competition.metrics import (
    TILE_TOP_K,
    CollectionResult,
    GraphResult,
    SubmissionScores,
    score_graph,
    submitted_order,
)
from competition.npzio import NpzReader, atomic_write_text
from competition.protocol import DEFAULT_PROTOCOL, ValidProtocol
from competition.reader import DataRoot, list_graphs

HEADER = ("ID", "TopConfigs")
MAX_LISTED = 5  # indices named per problem message
MAX_PROBLEMS_IN_MESSAGE = 20
CSV_FIELD_LIMIT = 2**31 - 1  # the largest the csv module takes on every platform
MAX_INDEX = np.iinfo(np.int64).max
_INTEGER = re.compile(r"\s*-?[0-9]+\s*")  # ASCII digits only: int() would take other scripts' digits


@dataclass(frozen=True)
class SubmissionProblem:
    """One problem of a submission file.

    Attributes:
        row: the data row (1-based; 0 is the header), or ``None`` for a problem of no row (a missing ID).
        id: the submission ID concerned, if known.
        message: what was expected and what was found.
        where: for a problem of the whole file, where it was found (``file``, ``line 7``).
    """

    row: int | None
    id: str | None
    message: str
    where: str | None = None

    @property
    def whole_file(self) -> bool:
        """The file as a whole is unusable (unreadable, not CSV, bad header): no row can be checked."""
        return self.row == 0 or self.where is not None

    def __str__(self) -> str:
        where = self.where or ("header" if self.row == 0 else
                               (f"row {self.row}" if self.row is not None else "missing row"))
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


# --------------------------------------------------------------------------------------------------------------
# IDs
# --------------------------------------------------------------------------------------------------------------


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


def _csv_text(rows: list[tuple[str, str]]) -> str:
    """The file's text; the csv module quotes a field that needs it (an ID holding a comma, quote or newline)."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(HEADER)
    writer.writerows(rows)
    return buf.getvalue()


def submission_orders(
    predictions: Mapping[str, npt.ArrayLike] | Iterable[tuple[str, npt.ArrayLike]],
    rows: Mapping[str, npt.ArrayLike | None] | None = None,
) -> dict[str, npt.NDArray[np.int64]]:
    """The row a submission holds for each graph's scores (lower = faster), sorted by ID: what
    :func:`write_submission` writes, and what :func:`score_orders` scores in memory.

    Args:
        predictions: submission ID -> ``[C]`` scores (a mapping or ``(id, scores)`` pairs).
        rows: submission ID -> the config index of each score, for graphs predicted on a subset of their configs
            (the valid protocol, :meth:`~competition.labels.SplitLabels.rows`); IDs not in it (or mapped to
            ``None``) cover every config.

    Returns:
        Submission ID -> int64 config indices, fastest first (:func:`~competition.metrics.submitted_order`).

    Raises:
        ValueError: an ID with no known collection prefix, or an ID given twice.
    """
    rows = rows or {}
    return {sid: submitted_order(parse_submission_id(sid)[0], s, rows.get(sid)) for sid, s in _items(predictions)}


def orders_text(orders: Mapping[str, npt.ArrayLike] | Iterable[tuple[str, npt.ArrayLike]]) -> str:
    """The text of a submission holding these rows (int config indices, fastest first, written as given), sorted
    by ID."""
    return _csv_text([(sid, format_order(o)) for sid, o in _items(orders)])


def submission_text(
    predictions: Mapping[str, npt.ArrayLike] | Iterable[tuple[str, npt.ArrayLike]],
    rows: Mapping[str, npt.ArrayLike | None] | None = None,
) -> str:
    """The text of a submission from per-graph scores (lower = faster), rows sorted by ID: what
    :func:`write_submission` writes (see :func:`submission_orders` for the arguments)."""
    return orders_text(submission_orders(predictions, rows))


def write_submission(
    path: str | os.PathLike[str],
    predictions: Mapping[str, npt.ArrayLike] | Iterable[tuple[str, npt.ArrayLike]],
    rows: Mapping[str, npt.ArrayLike | None] | None = None,
) -> Path:
    """Write a submission from per-graph scores (lower = faster), rows sorted by ID, atomically.

    Args:
        path: the CSV to write.
        predictions: submission ID -> ``[C]`` scores (a mapping or ``(id, scores)`` pairs).
        rows: submission ID -> the config index of each score, for graphs predicted on a subset of their configs
            (the valid protocol); IDs not in it (or mapped to ``None``) cover every config.

    Returns:
        The path written.

    Raises:
        ValueError: an ID with no known collection prefix, or an ID given twice.
    """
    return atomic_write_text(path, submission_text(predictions, rows))


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
    ints = [int(t) for t in tokens]
    negative = [v for v in ints if v < 0]
    if negative:
        return None, f"negative index(es) {', '.join(map(str, negative[:MAX_LISTED]))} in TopConfigs"
    huge = [v for v in ints if v > MAX_INDEX]
    if huge:  # no graph has that many configs, and int64 cannot hold it
        return None, f"index(es) too large for any graph: {', '.join(map(str, huge[:MAX_LISTED]))} in TopConfigs"
    return np.array(ints, dtype=np.int64), None


def _parse(path: str | os.PathLike[str]) -> tuple[list[_Row], list[SubmissionProblem], set[str]]:
    """Rows that parse, every problem, and every ID seen (even on a bad row)."""
    rows: list[_Row] = []
    problems: list[SubmissionProblem] = []
    seen: dict[str, int] = {}
    try:
        with open(path, newline="", encoding="utf-8-sig") as f:
            reader = _csv_reader(f)
            try:
                _parse_rows(reader, rows, problems, seen)
            except csv.Error as exc:
                problems.append(SubmissionProblem(None, None, f"malformed CSV: {exc}", f"line {reader.line_num}"))
    except UnicodeDecodeError:
        found = _not_utf8(Path(path))
        problems.append(SubmissionProblem(None, None, f"expected UTF-8 text; found {found}", "file"))
    except IsADirectoryError:
        problems.append(SubmissionProblem(None, None, "expected a CSV file; found a folder", "file"))
    except OSError as exc:
        problems.append(SubmissionProblem(None, None, f"cannot be read ({exc.strerror or exc})", "file"))
    return rows, problems, set(seen)


def _not_utf8(path: Path) -> str:
    """What a file that does not decode as UTF-8 holds instead, and what to do."""
    try:
        data = path.read_bytes()
    except OSError:
        return "text that is not UTF-8"
    if data[:2] in (b"\xff\xfe", b"\xfe\xff"):
        return f"UTF-16 text (byte-order mark {data[:2].hex(' ').upper()} at the start): save it as UTF-8"
    nul = data.find(b"\0", 0, 1 << 16)
    if nul >= 0:
        return (f"NUL bytes (the first at byte {nul}): binary data, or UTF-16/32 text without a byte-order mark; "
                "save it as UTF-8 CSV")
    bom = 3 if data.startswith(b"\xef\xbb\xbf") else 0
    try:
        data[bom:].decode("utf-8")
    except UnicodeDecodeError as exc:
        at = bom + exc.start
        line = data.count(b"\n", 0, at) + 1
        return (f"byte 0x{data[at]:02X} at line {line} (byte {at}) that is not UTF-8 ({exc.reason}; latin-1 or "
                "another 8-bit encoding?): save it as UTF-8")
    return "text that is not UTF-8"  # changed since it was read


def _csv_reader(f: Iterable[str]) -> Iterator[list[str]]:
    """A strict CSV reader (a stray or unclosed quote is an error, not a guess) for fields of any length: a layout
    row of 100,000 configs is about 600 kB, above the ``csv`` module's default field limit of 128 kB."""
    csv.field_size_limit(CSV_FIELD_LIMIT)
    return csv.reader(f, strict=True)


def _parse_rows(reader: Iterator[list[str]], rows: list[_Row], problems: list[SubmissionProblem],
                seen: dict[str, int]) -> None:
    header = next(reader, None)
    if header is None:
        problems.append(SubmissionProblem(0, None, f"empty file; expected the header {','.join(HEADER)}"))
        return
    if tuple(h.strip() for h in header) != HEADER:
        missing = [h for h in HEADER if h not in header]
        extra = [h for h in header if h not in HEADER]
        detail = "; ".join(x for x in (f"missing column(s) {missing}" if missing else "",
                                       f"extra column(s) {extra}" if extra else "") if x)
        problems.append(SubmissionProblem(0, None, f"expected the header {','.join(HEADER)}; found "
                                                   f"{','.join(header)}" + (f" ({detail})" if detail else "")))
        return
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
        for sid in read_sample_ids(sample_submission):
            c, stem = parse_submission_id(sid)
            if c in wanted:
                out[sid] = root.collection_dir(c, split) / f"{stem}.npz"
        return out
    for c in Collection:
        if c in wanted:
            out.update({submission_id(c, p.stem): p for p in list_graphs(root, c, split)})
    return out


def read_sample_ids(path: str | os.PathLike[str]) -> list[str]:
    """The IDs a sample submission (``sample_submission.csv``) lists, in file order; its ``TopConfigs`` are not read.

    Args:
        path: the CSV; it needs an ``ID`` column.

    Returns:
        Every ID, each once.

    Raises:
        DataFileError: the file cannot be read, is not UTF-8 CSV, has no ``ID`` column, or holds a malformed or
            repeated ID; the message names the file (and the line).
    """
    path = Path(path)
    try:
        with open(path, newline="", encoding="utf-8-sig") as f:
            reader = _csv_reader(f)
            header = [h.strip() for h in next(reader, [])]
            if "ID" not in header:
                raise DataFileError(path, None, f"a header with the column 'ID' ({','.join(HEADER)})",
                                    f"the header {','.join(header) or '(empty file)'}: no column 'ID'")
            col = header.index("ID")
            seen: dict[str, int] = {}
            for fields in reader:
                if not fields:
                    continue
                sid = fields[col].strip() if col < len(fields) else ""
                try:
                    parse_submission_id(sid)
                except ValueError as exc:
                    raise DataFileError(path, None, "an ID <collection>:<stem> on every row",
                                        f"line {reader.line_num}: {exc}") from None
                if sid in seen:
                    raise DataFileError(path, None, "each ID once",
                                        f"{sid} on lines {seen[sid]} and {reader.line_num}")
                seen[sid] = reader.line_num
    except UnicodeDecodeError:
        raise DataFileError(path, None, "UTF-8 text", _not_utf8(path)) from None
    except csv.Error as exc:
        raise DataFileError(path, None, "a well-formed CSV file", f"malformed CSV ({exc})") from None
    except IsADirectoryError:
        raise DataFileError(path, None, "a CSV file", "a folder") from None
    except OSError as exc:
        raise DataFileError(path, None, "a readable file", f"it cannot be read ({exc.strerror or exc})") from None
    return list(seen)


def sample_problems(root: DataRoot, collections: Iterable[Collection] | None = None) -> list[DataFileError]:
    """What is wrong between ``sample_submission.csv`` and the test split (empty: nothing, or no sample file).

    The sample lists the IDs a submission must have: each needs its test file, and a test file it does not list
    would make every submission written from the test split hold an unknown ID.

    Args:
        root: the data root.
        collections: the collections to compare (default: all five).
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
        files = {p.stem for p in list_graphs(root, c, Split.TEST)}
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


def _order_problems(row: _Row, collection: Collection, c: int, subset: npt.NDArray[np.int64] | None) -> list[str]:
    """What is wrong with a row's order for a graph of ``c`` configs; ``subset``: the valid protocol's configs
    (``None``: every config), of which a layout row may list exactly these or all ``c``."""
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
        if subset is not None and order.size != c:
            missing = np.setdiff1d(subset, order)
            extra = np.setdiff1d(order, subset)
            if missing.size or extra.size:
                out.append(f"not a permutation of the valid protocol's {subset.size} configs (nor of "
                           f"range({c})): missing {missing.size}" + (f" ({_listed(missing)})" if missing.size else "")
                           + (f", {extra.size} not in it ({_listed(extra)})" if extra.size else ""))
            return out
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
           collections: Iterable[Collection] | None, protocol: ValidProtocol = DEFAULT_PROTOCOL,
           labels: SplitLabels | None = None) -> tuple[list[SubmissionProblem], list[_Row]]:
    rows, problems, seen = _parse(path)
    if any(p.whole_file for p in problems):
        return problems, []
    expected = _expected_ids(root, Split(split), sample_submission, collections)
    return _check_rows(rows, problems, seen, expected, split, collections, protocol, labels)


def _check_rows(rows: list[_Row], problems: list[SubmissionProblem], seen: set[str],
                expected: Mapping[str, Path | None], split: Split, collections: Iterable[Collection] | None,
                protocol: ValidProtocol, labels: SplitLabels | None) -> tuple[list[SubmissionProblem], list[_Row]]:
    """The problems of parsed rows against the graphs ``expected`` (ID -> npz file), and the rows that passed.

    A graph's config count and scored subset come from ``labels`` when they hold it, else from its npz header.
    """
    chosen = None if collections is None else set(collections)
    good: list[_Row] = []
    for row in rows:
        if row.id not in expected:
            if chosen is None or parse_submission_id(row.id)[0] in chosen:
                problems.append(SubmissionProblem(row.row, row.id, f"unknown ID: no such graph in the "
                                                                   f"{Split(split).value} split"))
            continue
        collection, stem = parse_submission_id(row.id)
        known = labels.get(row.id) if labels is not None else None
        if known is not None:
            c, subset = known.num_configs, known.rows
        else:
            npz = expected[row.id]
            if npz is None or not npz.is_file():
                found = "is not a file" if npz is not None and os.path.lexists(npz) else "not found"
                problems.append(SubmissionProblem(row.row, row.id, f"data file {npz} {found}"))
                continue
            c = _num_configs(npz)
            subset = protocol.configs(collection, stem, c, split)
        found = _order_problems(row, collection, c, subset)
        problems.extend(SubmissionProblem(row.row, row.id, m) for m in found)
        if not found:
            good.append(row)
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
    protocol: ValidProtocol = DEFAULT_PROTOCOL,
) -> list[SubmissionProblem]:
    """Every problem of a submission file against the data (empty list: valid).

    Checked: the header and every row's syntax (as :func:`read_submission`), every expected ID present exactly
    once, no unknown ID, layout rows a permutation of ``range(C)`` (on the valid split, or of the valid protocol's
    configs), tile rows at least ``min(5, C)`` indices, all in range and distinct. Config counts come from the npz
    headers only.

    Args:
        path: the submission CSV.
        root: the data root.
        split: the split the submission is for.
        sample_submission: the file listing the expected IDs; default ``root.sample_submission`` for the test
            split (if present); otherwise the graph files of ``split`` in every collection.
        collections: restrict the check to these collections (IDs of others are then ignored).
        protocol: the valid split's protocol (:mod:`competition.protocol`): which layout rows are accepted.

    Returns:
        The problems, in row order, missing IDs last.
    """
    collections = None if collections is None else list(collections)
    return _check(path, root, split, sample_submission, collections, protocol)[0]


# --------------------------------------------------------------------------------------------------------------
# Offline scoring
# --------------------------------------------------------------------------------------------------------------


IN_MEMORY = Path("<predictions in memory>")
"""What a :class:`SubmissionError` of rows scored in memory (:func:`score_orders`) names instead of a file."""


def _chosen(ids: Iterable[str], collections: Iterable[Collection] | None) -> list[Collection]:
    wanted = {parse_submission_id(sid)[0] for sid in ids} if collections is None else set(collections)
    return [c for c in Collection if c in wanted]


def _submission_scores(good: list[_Row], labels: SplitLabels, chosen: list[Collection], raw: bool) -> SubmissionScores:
    """Score rows that passed their checks, each against its graph's labels."""
    results: dict[Collection, list[GraphResult]] = {c: [] for c in chosen}
    for row in sorted(good, key=lambda r: r.id):
        lab = labels[row.id]
        results[lab.collection].append(score_graph(lab.collection, lab.local_order(row.order),
                                                   lab.target(raw=raw), stem=lab.stem))
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
    holding them (:func:`orders_text`).

    Args:
        orders: submission ID -> int config indices (the file's), fastest first (:func:`submission_orders`).
        labels: the labels of the split (:func:`~competition.labels.load_labels`).
        raw: tile: rank by raw runtimes instead of normalised ones.
        collections: the collections to score; default those with at least one ID in ``orders``.

    Raises:
        SubmissionError: the rows are invalid for these collections (naming :data:`IN_MEMORY`).
    """
    chosen = _chosen(orders, collections)
    scored = labels.of(chosen)
    rows = [_Row(n, sid, np.asarray(o, dtype=np.int64)) for n, (sid, o) in enumerate(_items(orders), start=1)]
    seen = {r.id for r in rows}
    problems, good = _check_rows(rows, [], seen, dict.fromkeys(scored), labels.split, chosen, labels.protocol,
                                 scored)
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
    rows, problems, seen = _parse(path)
    if problems:
        raise SubmissionError(path, problems)
    chosen = _chosen(seen, collections)
    if labels is None:
        labels = load_labels(root, chosen, split, protocol)
    labels = labels.of(chosen)
    expected = _expected_ids(root, split, None, chosen)
    problems, good = _check_rows(rows, problems, seen, expected, split, chosen, labels.protocol, labels)
    if problems:
        raise SubmissionError(path, problems)
    return _submission_scores(good, labels, chosen, raw)
