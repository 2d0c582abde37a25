"""The submission format: the file's header and IDs, the problems a file can have, and writing one.

A submission is a CSV with header ``ID,TopConfigs``. ``ID`` is ``<collection>:<stem>`` (e.g.
``layout:xla:random:<stem>``); ``TopConfigs`` holds 0-based config indices joined by ``;``, fastest predicted
first: 5 for tile (all of them if the graph has fewer), a full permutation of ``range(C)`` for layout.

Row numbers in problems count data rows from 1; row 0 is the header (so row N is line N + 1 of the file).
Problems are kept up to :data:`MAX_PROBLEMS_PER_KIND` of each kind (:class:`ProblemLog`), the rest counted in
one summary per kind.

A file is read by :mod:`competition.submission_reading`, checked against a data root by
:mod:`competition.submission_checks` and scored offline by :mod:`competition.submission_scoring`.
"""

from __future__ import annotations

import csv
import io
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from competition.atomic import atomic_write_text
from competition.collections import Collection
from competition.errors import quoted

HEADER = ("ID", "TopConfigs")
MAX_LISTED = 5  # indices named per problem message
MAX_PROBLEMS_IN_MESSAGE = 20
MAX_PROBLEMS_PER_KIND = 20
"""Problems kept of each kind (a row's bad token, an unknown ID, ...); the rest are counted in one summary."""
MAX_ID_CHARS = 300
"""The longest ID of a legal row: a collection prefix and a file stem (at most 255 characters)."""
_SHOWN_CHARS = 80  # a token or header longer than this is shown shortened in a problem (an ID: MAX_ID_CHARS)


def _shown_id(sid: str) -> str:
    """An ID as a problem shows it: as is when plain, quoted when it holds spaces at its ends, control
    characters (a tab, a newline of a quoted field) or is long, so that what Kaggle would compare is
    visible."""
    if sid.isprintable() and sid == sid.strip() and len(sid) <= MAX_ID_CHARS:
        return sid
    return quoted(sid, MAX_ID_CHARS)


def clipped(text: str) -> str:
    """Text shown in a problem as is, shortened with its length when longer than :data:`_SHOWN_CHARS`."""
    if len(text) <= _SHOWN_CHARS:
        return text
    return f"{text[:_SHOWN_CHARS - 20]}...{text[-12:]} ({len(text):,} characters)"


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


class ProblemLog:
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
    raise ValueError(f"ID {quoted(text, MAX_ID_CHARS)} is not one of {known}")


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


def sorted_by_id(mapping: Mapping[str, npt.ArrayLike] | Iterable[tuple[str, npt.ArrayLike]]
                 ) -> list[tuple[str, npt.ArrayLike]]:
    """A submission's ``(ID, value)`` pairs sorted by ID, as a file holds its rows.

    Raises:
        ValueError: an ID with no known collection prefix, or an ID given twice.
    """
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
    :func:`write_submission` writes, and what :func:`~competition.submission_scoring.score_orders` scores
    in memory.

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
    # Not at the top: the metrics bring scipy, and every command's error boundary imports this module.
    from competition.metrics import submitted_order

    rows = rows or {}
    return {sid: submitted_order(parse_submission_id(sid)[0], finite_scores(s, f"ID {sid}"), rows.get(sid))
            for sid, s in sorted_by_id(predictions)}


def orders_text(orders: Mapping[str, npt.ArrayLike] | Iterable[tuple[str, npt.ArrayLike]]) -> str:
    """The text of a submission holding these rows (int config indices, fastest first, written as given), sorted
    by ID."""
    return _csv_text([(sid, format_order(o)) for sid, o in sorted_by_id(orders)])


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
