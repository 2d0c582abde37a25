"""Text from users (producer names, file stems, paths) shown safely: in the terminal, in plots and in CSV files.

* :func:`printable` (owned by :mod:`competition.errors`, so that every layer escapes alike): control characters
  (a newline, a carriage return, an escape sequence) are shown as escapes, so
  that a name cannot forge a line of a printed table or move the cursor.
* :func:`plain_text`: matplotlib draws text as it is; by default it parses ``$...$`` as mathtext, and a name such
  as ``$\\foo$`` makes every later plot fail.
* :func:`csv_cell`: a cell that a spreadsheet would run as a formula (starting ``=``, ``+``, ``-``, ``@``, a tab or
  a carriage return) is written with a leading ``'``, as spreadsheets themselves mark text.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import ParamSpec, TypeVar

from competition.errors import printable

P = ParamSpec("P")
R = TypeVar("R")

_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(text: str) -> str:
    """``text`` as a CSV cell that a spreadsheet shows as text, never runs as a formula."""
    return "'" + text if text.startswith(_FORMULA_START) else text


def plot_label(text: object, limit: int | None = None) -> str:
    """A user's text for a plot label: :func:`printable`, cut to ``limit`` characters."""
    s = printable(text)
    return s if limit is None else s[:limit]


@contextmanager
def plain_text() -> Iterator[None]:
    """Within the block, matplotlib draws every text as it is (no mathtext); the settings before are restored
    after."""
    import matplotlib

    with matplotlib.rc_context({"text.parse_math": False}):
        yield


def plots_plain_text(fn: Callable[P, R]) -> Callable[P, R]:
    """Run ``fn`` (a function that makes or saves plots) within :func:`plain_text`."""
    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        with plain_text():
            return fn(*args, **kwargs)

    return wrapper
