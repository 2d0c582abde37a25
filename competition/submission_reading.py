"""Reading a submission file: a strict CSV parse into rows and problems, and a sample submission's IDs.

IDs and the header are matched exactly, as Kaggle matches them: a space or tab around an ID is a problem, not
stripped. The reader streams the file and holds at most one row of it, of bounded length
(:data:`MAX_ROW_CHARS`); problems are kept up to
:data:`~competition.submission_format.MAX_PROBLEMS_PER_KIND` of each kind, the rest counted in one summary per
kind.
"""

from __future__ import annotations

import codecs
import csv
import io
import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from competition.errors import DataFileError
from competition.submission_format import (
    HEADER,
    MAX_ID_CHARS,
    MAX_LISTED,
    ProblemLog,
    SubmissionError,
    SubmissionProblem,
    clipped,
    parse_submission_id,
    quoted,
)

CSV_FIELD_LIMIT = 2**31 - 1  # the largest the csv module takes on every platform
MAX_INDEX = np.iinfo(np.int64).max
MAX_INDEX_CHARS = 20
"""The longest index token read as a number (a sign and the 19 digits of int64); longer: out of range."""
MAX_CONFIGS = 1_000_000
"""The most configs a row may list: ten times the largest real graph (about 100,000 configs)."""
MAX_ROWS = 100_000
"""The most rows read: a submission holds one row per graph, and the largest real split has 6,244 graphs."""


def _permutation_chars(n: int) -> int:
    """The length of ``0;1;...;n-1`` as :func:`~competition.submission_format.format_order` writes it."""
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


@dataclass(frozen=True)
class SubmissionRow:
    """One row of a submission that parsed.

    Attributes:
        row: the data row (1-based).
        id: its submission ID.
        order: its config indices, fastest first.
    """

    row: int
    id: str
    order: npt.NDArray[np.int64]


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
        shown = ", ".join(quoted(t) for t in bad[:MAX_LISTED])
        return None, "non-integer tokens in TopConfigs", f"non-integer token(s) {shown} in TopConfigs"
    long = [t.strip() for t in tokens if len(t.strip()) > MAX_INDEX_CHARS]
    if long:  # not converted: int() of thousands of digits is slow, and refused above 4,300 digits
        return None, "indices out of range of any graph", (
            f"index(es) out of range of any graph (longer than {MAX_INDEX_CHARS} characters): "
            f"{', '.join(quoted(t) for t in long[:MAX_LISTED])} in TopConfigs")
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


def parse_submission_file(path: str | os.PathLike[str]) -> tuple[list[SubmissionRow], ProblemLog, set[str]]:
    """Parse a submission file, raising nothing: what :func:`read_submission` reads, and what the checks and
    scoring start from.

    Returns:
        The rows that parse, the problems found, and every ID seen (even on a bad row).
    """
    rows: list[SubmissionRow] = []
    problems = ProblemLog()
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
    found = clipped(",".join(header))
    if tuple(h.strip() for h in header) == HEADER:
        names = ", ".join(map(quoted, header))
        return (f"expected the header {','.join(HEADER)}; found {names}: Kaggle matches column names "
                "exactly, spaces around them included")
    missing = [h for h in HEADER if h not in header]
    extra = [h for h in header if h not in HEADER]
    shown = [clipped(h) for h in extra[:MAX_LISTED]] + (["..."] if len(extra) > MAX_LISTED else [])
    detail = "; ".join(x for x in (f"missing column(s) {missing}" if missing else "",
                                   f"extra column(s) {shown}" if extra else "") if x)
    return f"expected the header {','.join(HEADER)}; found {found}" + (f" ({detail})" if detail else "")


def _parse_rows(reader: Iterator[list[str]], lines: _Lines, rows: list[SubmissionRow], problems: ProblemLog,
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


def _parse_lines(reader: Iterator[list[str]], lines: _Lines, rows: list[SubmissionRow], problems: ProblemLog,
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


def _parse_row(n: int, fields: list[str], rows: list[SubmissionRow], problems: ProblemLog,
               seen: dict[str, int]) -> None:
    """Check row ``n``'s fields; a row without problems joins ``rows``. IDs are compared exactly, as Kaggle
    compares them."""
    sid = fields[0]
    if len(fields) != len(HEADER):
        problems.add("rows of another number of fields", SubmissionProblem(
            n, sid or None, f"expected {len(HEADER)} fields; found {len(fields)}"))
        return
    if not sid.strip():
        blank = f" (only whitespace: {quoted(sid)})" if sid else ""
        problems.add("empty IDs", SubmissionProblem(n, None, f"empty ID{blank}"))
        return
    if sid in seen:
        problems.add("duplicated IDs", SubmissionProblem(n, sid, f"duplicated ID (first on row {seen[sid]})"))
        return
    seen[sid] = n
    if sid != sid.strip():
        problems.add("IDs with whitespace around them", SubmissionProblem(
            n, sid, f"ID with {_ends(sid)} whitespace: Kaggle matches IDs exactly and would not find it "
                    f"(write {quoted(sid.strip(), MAX_ID_CHARS)})"))
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
    rows.append(SubmissionRow(n, sid, order))


def read_submission(path: str | os.PathLike[str]) -> dict[str, npt.NDArray[np.int64]]:
    """Read a submission file.

    Args:
        path: the CSV.

    Returns:
        Submission ID -> int64 ``[m]`` config indices, fastest first, in file order.

    Raises:
        SubmissionError: any malformed header, row, ID or index, with the problems found (at most
            :data:`~competition.submission_format.MAX_PROBLEMS_PER_KIND` of each kind, then a summary of the
            kind).
    """
    rows, problems, _ = parse_submission_file(path)
    if problems:
        raise SubmissionError(path, problems.result())
    return {r.id: r.order for r in rows}


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
