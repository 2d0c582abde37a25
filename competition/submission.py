"""The submission format: write, read, validate against the data, and score offline.

A submission is a CSV with header ``ID,TopConfigs``. ``ID`` is ``<collection>:<stem>`` (e.g.
``layout:xla:random:<stem>``); ``TopConfigs`` holds 0-based config indices joined by ``;``, fastest predicted
first: 5 for tile (all of them if the graph has fewer), a full permutation of ``range(C)`` for layout.

Rows held in memory are validated and scored exactly as the file holding them would be: :func:`submission_orders`
gives the rows a file writes for per-graph scores, :func:`score_orders` and :func:`score_predictions` score them
against a split's labels (:mod:`competition.labels`), and :func:`score_submission` parses a file into the same rows.

Row numbers in problems count data rows from 1; row 0 is the header (so row N is line N + 1 of the file).

IDs and the header are matched exactly, as Kaggle matches them: a space or tab around an ID is a problem, not
stripped. The reader streams the file and holds at most one row of it, of bounded length
(:data:`MAX_ROW_CHARS`); problems are kept up to :data:`MAX_PROBLEMS_PER_KIND` of each kind, the rest counted
in one summary per kind.
"""

from __future__ import annotations

import codecs
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
from competition.reader import DataRoot, Listing, list_graphs, listed_graphs

HEADER = ("ID", "TopConfigs")
MAX_LISTED = 5  # indices named per problem message
MAX_PROBLEMS_IN_MESSAGE = 20
MAX_PROBLEMS_PER_KIND = 20
"""Problems kept of each kind (a row's bad token, an unknown ID, ...); the rest are counted in one summary."""
CSV_FIELD_LIMIT = 2**31 - 1  # the largest the csv module takes on every platform
MAX_INDEX = np.iinfo(np.int64).max
MAX_INDEX_CHARS = 20
"""The longest index token read as a number (a sign and the 19 digits of int64); longer: out of range."""
MAX_CONFIGS = 1_000_000
"""The most configs a row may list: ten times the largest real graph (about 100,000 configs)."""
MAX_ID_CHARS = 300
"""The longest ID of a legal row: a collection prefix and a file stem (at most 255 characters)."""
MAX_ROWS = 100_000
"""The most rows read: a submission holds one row per graph, and the largest real split has 6,244 graphs."""
_SHOWN_CHARS = 80  # a token or header longer than this is shown shortened in a problem (an ID: MAX_ID_CHARS)


def _permutation_chars(n: int) -> int:
    """The length of ``0;1;...;n-1`` as :func:`format_order` writes it."""
    digits, width, start = 0, 1, 0
    while start < n:
        end = min(n, 10**width)
        digits += (end - start) * width
        start, width = end, width + 1
    return digits + max(n - 1, 0)


MAX_ROW_CHARS = MAX_ID_CHARS + 3 + _permutation_chars(MAX_CONFIGS)
"""The longest legal row, without its line end: an ID, a comma and a permutation of :data:`MAX_CONFIGS`
configs (and the quotes the csv module may add). A longer line is refused without being held whole."""
_INTEGER = re.compile(r"\s*-?[0-9]+\s*")  # ASCII digits only: int() would take other scripts' digits


def _quoted(text: str, limit: int = _SHOWN_CHARS) -> str:
    """``repr(text)``, shortened to about ``limit`` characters and its length when longer: a problem stays one
    line of bounded length whatever the file holds."""
    if len(text) <= limit:
        return repr(text)
    return f"{text[:limit - 20]!r}...{text[-12:]!r} ({len(text):,} characters)"


def _shown_id(sid: str) -> str:
    """An ID as a problem shows it: as is when plain, quoted when it holds spaces at its ends, control
    characters (a tab, a newline of a quoted field) or is long, so that what Kaggle would compare is
    visible."""
    if sid.isprintable() and sid == sid.strip() and len(sid) <= MAX_ID_CHARS:
        return sid
    return _quoted(sid, MAX_ID_CHARS)


@dataclass(frozen=True)
class SubmissionProblem:
    """One problem of a submission file.

    Attributes:
        row: the data row (1-based; 0 is the header), or ``None`` for a problem of no row (a missing ID).
        id: the submission ID concerned, if known.
        message: what was expected and what was found.
        where: for a problem of the whole file, where it was found (``file``, ``line 7``).
        more: for the summary of a kind of problem found more than :data:`MAX_PROBLEMS_PER_KIND` times, how
            many more there are (``message`` names the kind); 0 for a problem itself.
    """

    row: int | None
    id: str | None
    message: str
    where: str | None = None
    more: int = 0

    @property
    def whole_file(self) -> bool:
        """The file as a whole is unusable (unreadable, not CSV, bad header): no row can be checked."""
        return not self.more and (self.row == 0 or self.where is not None)

    @property
    def count(self) -> int:
        """The problems this one stands for: ``more`` for a summary, else 1."""
        return self.more or 1

    def __str__(self) -> str:
        if self.more:
            return f"... and {self.more:,} more of this kind ({self.message})"
        where = self.where or ("header" if self.row == 0 else
                               (f"row {self.row}" if self.row is not None else "missing row"))
        return f"{where}" + (f" [{_shown_id(self.id)}]" if self.id else "") + f": {self.message}"


def problem_count(problems: Iterable[SubmissionProblem]) -> int:
    """How many problems a list stands for, counting the ones its summaries leave out (the number to print as
    "N problem(s)" after the list)."""
    return sum(p.count for p in problems)


class SubmissionError(ValueError):
    """A submission that cannot be used; carries every problem found.

    Args:
        path: the submission file.
        problems: the problems, in row order.
    """

    def __init__(self, path: str | os.PathLike[str], problems: list[SubmissionProblem]) -> None:
        self.path = Path(path)
        self.problems = list(problems)
        self.count = problem_count(self.problems)  # with those the per-kind summaries only count
        listed = self.problems[:MAX_PROBLEMS_IN_MESSAGE]
        shown = [f"  {p}" for p in listed]
        more = self.count - problem_count(listed)
        if more > 0:
            shown.append(f"  ... and {more} more")
        super().__init__(f"{self.path}: {self.count} problem(s)\n" + "\n".join(shown))

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
    raise ValueError(f"ID {_quoted(text, MAX_ID_CHARS)} is not one of {known}")


# --------------------------------------------------------------------------------------------------------------
# Writing
# --------------------------------------------------------------------------------------------------------------


def finite_scores(scores: npt.ArrayLike, what: str) -> npt.NDArray[np.float64]:
    """``scores`` as float64, when every one is finite. The order of NaN or infinite scores is arbitrary (all NaN
    give the identity order), so a model whose scores are not finite is refused before anything of them is ranked
    or written: every submission, valid file and ranking passes here.

    Args:
        scores: ``[C]`` one graph's scores.
        what: what gave them, for the message (``ID <id>``, or the model and graph).

    Raises:
        ValueError: a score that is NaN or infinite.
    """
    with np.errstate(over="ignore", invalid="ignore"):
        s = np.asarray(scores, dtype=np.float64)
    bad = int(s.size - np.isfinite(s).sum())
    if bad:
        raise ValueError(f"{what}: {bad} of {s.size} scores are not finite (NaN or infinite): a model whose scores "
                         "are not finite ranks nothing; nothing written")
    return s


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
        ValueError: an ID with no known collection prefix, an ID given twice, or scores that are not finite
            (:func:`finite_scores`).
    """
    rows = rows or {}
    return {sid: submitted_order(parse_submission_id(sid)[0], finite_scores(s, f"ID {sid}"), rows.get(sid))
            for sid, s in _items(predictions)}


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


class _Problems:
    """The problems of a file as found: at most :data:`MAX_PROBLEMS_PER_KIND` of each kind are kept and the
    rest only counted, so that the memory they take and the lines they print are bounded whatever the file
    holds."""

    def __init__(self) -> None:
        self.kept: list[SubmissionProblem] = []
        self.counts: dict[str, int] = {}

    def add(self, kind: str, problem: SubmissionProblem) -> None:
        """Record a problem of a kind (a short description, which the summary of the kind names)."""
        n = self.counts.get(kind, 0)
        self.counts[kind] = n + 1
        if n < MAX_PROBLEMS_PER_KIND:
            self.kept.append(problem)

    def __bool__(self) -> bool:
        return bool(self.counts)

    @property
    def whole_file(self) -> bool:
        """A problem of the file as a whole was found: its rows cannot be checked against the data."""
        return any(p.whole_file for p in self.kept)

    def result(self) -> list[SubmissionProblem]:
        """The problems kept in row order (those of no row last, in the order found), then one summary of each
        kind with more."""
        ordered = sorted(self.kept, key=lambda p: (p.row is None, p.row or 0))
        shown = MAX_PROBLEMS_PER_KIND
        return ordered + [SubmissionProblem(None, None, f"{kind}: {n:,} in all, the first {shown} listed",
                                            more=n - shown)
                          for kind, n in self.counts.items() if n > shown]


class _RecordTooLong(Exception):
    """A record of several lines (line ends inside a quoted field) longer than any legal row."""

    def __init__(self, first: int, last: int, chars: int) -> None:
        super().__init__(first, last, chars)
        self.first, self.last, self.chars = first, last, chars


class _Lines:
    """A text file's lines for :func:`csv.reader`, read in chunks so that a line longer than ``limit``
    characters (its line end not counted) is never held whole.

    Such a line is read on to its end, recorded in :attr:`too_long` as ``(line number, characters, its first
    characters)`` and passed on as an empty line. A record of several lines (line ends inside a quoted field)
    longer than ``limit`` in all raises :class:`_RecordTooLong`; :meth:`record_done` starts the next record.
    """

    CHUNK = 1 << 16

    def __init__(self, f: io.TextIOBase, limit: int) -> None:
        self._f = f
        self._limit = limit
        self._ahead = ""  # the start of the next line, read to see whether a "\r" ended the previous one
        self._record_chars = 0
        self._record_first = 1
        self.line_num = 0
        self.records = 0  # records returned: the header is record 0, row N record N
        self.too_long: list[tuple[int, int, str]] = []

    def __iter__(self) -> _Lines:
        return self

    def record_done(self) -> None:
        """The csv reader has returned a record: the next line starts the next one."""
        self._record_chars = 0
        self._record_first = self.line_num + 1
        self.records += 1

    def _chunk(self) -> str:
        """The next piece of a line: the rest of it (with its line end), or :attr:`CHUNK` characters of it."""
        chunk, self._ahead = self._ahead, ""
        if not chunk:
            chunk = self._f.readline(self.CHUNK)
            if len(chunk) < self.CHUNK:
                return chunk
        if chunk.endswith("\r"):  # the read stopped at its size: a "\n" may follow, the rest of one line end
            after = self._f.readline(1)
            if after == "\n":
                return chunk + after
            self._ahead = after
        return chunk

    def __next__(self) -> str:
        parts: list[str] = []
        size = 0
        while chunk := self._chunk():
            parts.append(chunk)
            size += len(chunk)
            if chunk.endswith(("\n", "\r")):
                break
            if size > self._limit:
                start = parts[0][:MAX_ID_CHARS + 2]
                parts.clear()
                return self._skip(start, size)
        if not parts:
            raise StopIteration
        self.line_num += 1
        line = "".join(parts)
        chars = len(line.rstrip("\r\n"))
        if chars > self._limit:
            self.too_long.append((self.line_num, chars, line[:MAX_ID_CHARS + 2]))
            return "\n"
        self._record_chars += chars
        if self._record_chars > self._limit:
            raise _RecordTooLong(self._record_first, self.line_num, self._record_chars)
        return line

    def _skip(self, start: str, size: int) -> str:
        """Read a line too long to hold on to its end, record it, and pass on an empty line."""
        while chunk := self._chunk():
            if chunk.endswith(("\n", "\r")):
                size += len(chunk.rstrip("\r\n"))
                break
            size += len(chunk)
        self.line_num += 1
        self.too_long.append((self.line_num, size, start))
        return "\n"


def _leading_id(start: str) -> str | None:
    """The ID a line starts with (the text before its first comma), if it is plain (unquoted)."""
    comma = start.find(",")
    return start[:comma] if comma > 0 and '"' not in start[:comma] else None


def _parse_indices(text: str) -> tuple[npt.NDArray[np.int64] | None, str, str | None]:
    """The config indices of a ``TopConfigs`` field, or the kind of its problem and the problem."""
    if not text.strip():
        return None, "empty TopConfigs", "empty TopConfigs"
    tokens = text.split(";")
    bad = [t for t in tokens if _INTEGER.fullmatch(t) is None]
    if bad:
        shown = ", ".join(_quoted(t) for t in bad[:MAX_LISTED])
        return None, "non-integer tokens in TopConfigs", f"non-integer token(s) {shown} in TopConfigs"
    long = [t.strip() for t in tokens if len(t.strip()) > MAX_INDEX_CHARS]
    if long:  # not converted: int() of thousands of digits is slow, and refused above 4,300 digits
        return None, "indices out of range of any graph", (
            f"index(es) out of range of any graph (longer than {MAX_INDEX_CHARS} characters): "
            f"{', '.join(_quoted(t) for t in long[:MAX_LISTED])} in TopConfigs")
    ints = [int(t) for t in tokens]
    negative = [v for v in ints if v < 0]
    if negative:
        shown = ", ".join(map(str, negative[:MAX_LISTED]))
        return None, "negative indices", f"negative index(es) {shown} in TopConfigs"
    huge = [v for v in ints if v > MAX_INDEX]
    if huge:  # no graph has that many configs, and int64 cannot hold it
        shown = ", ".join(map(str, huge[:MAX_LISTED]))
        return None, "indices out of range of any graph", (f"index(es) too large for any graph: {shown} in "
                                                           "TopConfigs")
    return np.array(ints, dtype=np.int64), "", None


def _parse(path: str | os.PathLike[str]) -> tuple[list[_Row], _Problems, set[str]]:
    """Rows that parse, the problems, and every ID seen (even on a bad row)."""
    rows: list[_Row] = []
    problems = _Problems()
    seen: dict[str, int] = {}
    try:
        with open(path, newline="", encoding="utf-8-sig") as f:
            lines = _Lines(f, MAX_ROW_CHARS)
            reader = _csv_reader(lines)
            try:
                _parse_rows(reader, lines, rows, problems, seen)
            except csv.Error as exc:
                problems.add("malformed CSV", SubmissionProblem(None, None, f"malformed CSV: {exc}",
                                                                f"line {lines.line_num}"))
    except UnicodeDecodeError:
        found = _not_utf8(Path(path))
        problems.add("not UTF-8", SubmissionProblem(None, None, f"expected UTF-8 text; found {found}",
                                                    "file"))
    except IsADirectoryError:
        problems.add("not a file", SubmissionProblem(None, None, "expected a CSV file; found a folder",
                                                     "file"))
    except OSError as exc:
        problems.add("unreadable", SubmissionProblem(None, None, f"cannot be read ({exc.strerror or exc})",
                                                     "file"))
    return rows, problems, set(seen)


def _not_utf8(path: Path) -> str:
    """What a file that does not decode as UTF-8 holds instead, and what to do (read in bounded chunks)."""
    try:
        with open(path, "rb") as f:
            head = f.read(1 << 16)
            if head[:2] in (b"\xff\xfe", b"\xfe\xff"):
                mark = head[:2].hex(" ").upper()
                return f"UTF-16 text (byte-order mark {mark} at the start): save it as UTF-8"
            nul = head.find(b"\0")
            if nul >= 0:
                return (f"NUL bytes (the first at byte {nul}): binary data, or UTF-16/32 text without a "
                        "byte-order mark; save it as UTF-8 CSV")
            bom = 3 if head.startswith(b"\xef\xbb\xbf") else 0
            return _first_non_utf8(f, head[bom:], bom)
    except OSError:
        return "text that is not UTF-8"


def _first_non_utf8(f: io.BufferedIOBase, data: bytes, offset: int) -> str:
    """The first byte that is not UTF-8 in ``data`` (the bytes from ``offset``) or the rest of ``f``."""
    line = 1
    while True:
        more = f.read(1 << 20)
        try:
            _, used = codecs.utf_8_decode(data, "strict", not more)
        except UnicodeDecodeError as exc:
            at = offset + exc.start
            line += data.count(b"\n", 0, exc.start)
            return (f"byte 0x{data[exc.start]:02X} at line {line} (byte {at}) that is not UTF-8 "
                    f"({exc.reason}; latin-1 or another 8-bit encoding?): save it as UTF-8")
        if not more:
            return "text that is not UTF-8"  # changed since it was read
        line += data.count(b"\n", 0, used)
        data, offset = data[used:] + more, offset + used


def _csv_reader(f: Iterable[str]) -> Iterator[list[str]]:
    """A strict CSV reader (a stray or unclosed quote is an error, not a guess) for fields of any length: a layout
    row of 100,000 configs is about 600 kB, above the ``csv`` module's default field limit of 128 kB (the
    lines given, :class:`_Lines`, bound the length)."""
    csv.field_size_limit(CSV_FIELD_LIMIT)
    return csv.reader(f, strict=True)


def _header_problem(header: list[str]) -> str | None:
    """What is wrong with a submission's header, if anything: its names must be ``ID,TopConfigs`` exactly."""
    if tuple(header) == HEADER:
        return None
    found = _clipped(",".join(header))
    if tuple(h.strip() for h in header) == HEADER:
        names = ", ".join(map(_quoted, header))
        return (f"expected the header {','.join(HEADER)}; found {names}: Kaggle matches column names "
                "exactly, spaces around them included")
    missing = [h for h in HEADER if h not in header]
    extra = [h for h in header if h not in HEADER]
    shown = [_clipped(h) for h in extra[:MAX_LISTED]] + (["..."] if len(extra) > MAX_LISTED else [])
    detail = "; ".join(x for x in (f"missing column(s) {missing}" if missing else "",
                                   f"extra column(s) {shown}" if extra else "") if x)
    return f"expected the header {','.join(HEADER)}; found {found}" + (f" ({detail})" if detail else "")


def _clipped(text: str) -> str:
    """Text shown in a problem as is, shortened with its length when longer than :data:`_SHOWN_CHARS`."""
    if len(text) <= _SHOWN_CHARS:
        return text
    return f"{text[:_SHOWN_CHARS - 20]}...{text[-12:]} ({len(text):,} characters)"


def _parse_rows(reader: Iterator[list[str]], lines: _Lines, rows: list[_Row], problems: _Problems,
                seen: dict[str, int]) -> None:
    """Check the header and every row (the first :data:`MAX_ROWS`) of a file."""
    try:
        _parse_lines(reader, lines, rows, problems, seen)
    except _RecordTooLong as exc:
        row = "header" if lines.records == 0 else f"row {lines.records}"
        problems.add("rows longer than any legal row", SubmissionProblem(
            None, None, f"one record of {exc.chars:,} characters or more on lines {exc.first}-{exc.last}, "
                        f"longer than any legal row ({MAX_ROW_CHARS:,}): a quote left open?; the rest of the "
                        "file is not read", row))


def _parse_lines(reader: Iterator[list[str]], lines: _Lines, rows: list[_Row], problems: _Problems,
                 seen: dict[str, int]) -> None:
    header = next(reader, None)
    lines.record_done()
    expected = ",".join(HEADER)
    if lines.too_long:
        chars = lines.too_long[0][1]
        problems.add("bad header", SubmissionProblem(
            0, None, f"expected the header {expected}; found a line of {chars:,} characters"))
        return
    if header is None:
        problems.add("bad header", SubmissionProblem(0, None, f"empty file; expected the header {expected}"))
        return
    message = _header_problem(header)
    if message is not None:
        problems.add("bad header", SubmissionProblem(0, None, message))
        return
    for n, fields in enumerate(reader, start=1):
        lines.record_done()
        if n > MAX_ROWS:
            problems.add("too many rows", SubmissionProblem(
                None, None, f"more than {MAX_ROWS:,} rows (a submission holds one row per graph, and a split "
                            "has at most a few thousand graphs); the rest of the file is not read",
                f"row {n:,}"))
            return
        for line, chars, start in lines.too_long:
            sid = _leading_id(start)
            if sid is not None:
                seen.setdefault(sid, n)
            problems.add("rows longer than any legal row", SubmissionProblem(
                n, sid, f"line {line} holds {chars:,} characters, more than any legal row "
                        f"({MAX_ROW_CHARS:,}: an ID and a permutation of {MAX_CONFIGS:,} configs); not read"))
        lines.too_long.clear()
        if fields:
            _parse_row(n, fields, rows, problems, seen)


def _ends(sid: str) -> str:
    """Where an ID has whitespace: ``leading``, ``trailing`` or both."""
    ends = [name for name, bare in (("leading", sid.lstrip()), ("trailing", sid.rstrip())) if bare != sid]
    return " and ".join(ends)


def _parse_row(n: int, fields: list[str], rows: list[_Row], problems: _Problems,
               seen: dict[str, int]) -> None:
    """Check row ``n``'s fields; a row without problems joins ``rows``. IDs are compared exactly, as Kaggle
    compares them."""
    sid = fields[0]
    if len(fields) != len(HEADER):
        problems.add("rows of another number of fields", SubmissionProblem(
            n, sid or None, f"expected {len(HEADER)} fields; found {len(fields)}"))
        return
    if not sid.strip():
        blank = f" (only whitespace: {_quoted(sid)})" if sid else ""
        problems.add("empty IDs", SubmissionProblem(n, None, f"empty ID{blank}"))
        return
    if sid in seen:
        problems.add("duplicated IDs", SubmissionProblem(n, sid, f"duplicated ID (first on row {seen[sid]})"))
        return
    seen[sid] = n
    if sid != sid.strip():
        problems.add("IDs with whitespace around them", SubmissionProblem(
            n, sid, f"ID with {_ends(sid)} whitespace: Kaggle matches IDs exactly and would not find it "
                    f"(write {_quoted(sid.strip(), MAX_ID_CHARS)})"))
        return
    try:
        parse_submission_id(sid)
    except ValueError as exc:
        problems.add("IDs of no known collection", SubmissionProblem(n, sid, str(exc)))
        return
    order, kind, message = _parse_indices(fields[1])
    if message is not None:
        problems.add(kind, SubmissionProblem(n, sid, message))
        return
    assert order is not None
    rows.append(_Row(n, sid, order))


def read_submission(path: str | os.PathLike[str]) -> dict[str, npt.NDArray[np.int64]]:
    """Read a submission file.

    Args:
        path: the CSV.

    Returns:
        Submission ID -> int64 ``[m]`` config indices, fastest first, in file order.

    Raises:
        SubmissionError: any malformed header, row, ID or index, with the problems found (at most
            :data:`MAX_PROBLEMS_PER_KIND` of each kind, then a summary of the kind).
    """
    rows, problems, _ = _parse(path)
    if problems:
        raise SubmissionError(path, problems.result())
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
            lines = _Lines(f, MAX_ROW_CHARS)
            reader = _csv_reader(lines)
            header = [h.strip() for h in next(reader, [])]
            _refuse_long_lines(path, lines)
            if "ID" not in header:
                raise DataFileError(path, None, f"a header with the column 'ID' ({','.join(HEADER)})",
                                    f"the header {','.join(header) or '(empty file)'}: no column 'ID'")
            col = header.index("ID")
            seen: dict[str, int] = {}
            for fields in reader:
                _refuse_long_lines(path, lines)
                lines.record_done()
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
    except _RecordTooLong as exc:
        raise DataFileError(path, None, f"rows of at most {MAX_ROW_CHARS:,} characters",
                            f"lines {exc.first}-{exc.last}: one record of {exc.chars:,} characters or more "
                            "(a quote left open?)") from None
    except IsADirectoryError:
        raise DataFileError(path, None, "a CSV file", "a folder") from None
    except OSError as exc:
        raise DataFileError(path, None, "a readable file", f"it cannot be read ({exc.strerror or exc})") from None
    return list(seen)


def _refuse_long_lines(path: Path, lines: _Lines) -> None:
    """Raise if the lines read hold one longer than any legal row.

    Raises:
        DataFileError: naming the file and the line.
    """
    if lines.too_long:
        line, chars, _ = lines.too_long[0]
        raise DataFileError(path, None, f"rows of at most {MAX_ROW_CHARS:,} characters",
                            f"line {line}: {chars:,} characters")


def sample_problems(root: DataRoot, collections: Iterable[Collection] | None = None, *,
                    listing: Listing | None = None) -> list[DataFileError]:
    """What is wrong between ``sample_submission.csv`` and the test split (empty: nothing, or no sample file).

    The sample lists the IDs a submission must have: each needs its test file, and a test file it does not list
    would make every submission written from the test split hold an unknown ID.

    Args:
        root: the data root.
        collections: the collections to compare (default: all five).
        listing: the root's folders as already listed (:class:`~competition.reader.Listing`); default: listed now.
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


def _order_problems(row: _Row, collection: Collection, c: int, subset: npt.NDArray[np.int64] | None
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
           labels: SplitLabels | None = None) -> tuple[list[SubmissionProblem], list[_Row]]:
    rows, problems, seen = _parse(path)
    if problems.whole_file:
        return problems.result(), []
    expected = _expected_ids(root, Split(split), sample_submission, collections)
    return _check_rows(rows, problems, seen, expected, split, collections, protocol, labels)


def _check_rows(rows: list[_Row], problems: _Problems, seen: set[str],
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
        The problems, in row order, missing IDs last: at most :data:`MAX_PROBLEMS_PER_KIND` of each kind, then
        a summary of each kind with more (:attr:`SubmissionProblem.more`; :func:`problem_count` counts them
        all).
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
    problems, good = _check_rows(rows, _Problems(), seen, dict.fromkeys(scored), labels.split, chosen,
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
    rows, parsed, seen = _parse(path)
    if parsed:
        raise SubmissionError(path, parsed.result())
    chosen = _chosen(seen, collections)
    if labels is None:
        labels = load_labels(root, chosen, split, protocol)
    labels = labels.of(chosen)
    expected = _expected_ids(root, split, None, chosen)
    problems, good = _check_rows(rows, parsed, seen, expected, split, chosen, labels.protocol, labels)
    if problems:
        raise SubmissionError(path, problems)
    return _submission_scores(good, labels, chosen, raw)
