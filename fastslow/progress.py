"""Progress bars that stay readable in logs.

In a terminal, tqdm redraws its bar in place with carriage returns. Written to a log file (``make submit >
log``, a Kaggle notebook's saved output, CI), the same bars become one carriage return per step: a demo run's log
held thousands. :func:`line_progress_when_logged` makes every bar of the process print a whole line at most every
:data:`LOG_INTERVAL_SECONDS` instead, when standard error is not a terminal.
"""

from __future__ import annotations

import io
import os
import sys
from typing import TextIO

LOG_INTERVAL_SECONDS = 5
"""Seconds between two progress lines of one bar in a log."""


class LineWriter(io.TextIOBase):
    """Wraps a text stream so that a redraw (``\\r`` + bar) becomes a line of its own.

    Text without a carriage return passes through unchanged; blank redraws (a bar clearing itself) are dropped, and
    so are cursor-up escapes (nested bars).
    """

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self._open_line = False  # the last write left a line without its newline

    def write(self, text: str) -> int:
        if "\r" not in text and "\x1b[A" not in text:
            if text == "\n" and not self._open_line:
                return len(text)  # a bar's closing newline after its last redraw, already ended
            self.stream.write(text)
            self._open_line = not text.endswith("\n") and bool(text)
            return len(text)
        for part in text.replace("\x1b[A", "").split("\r"):
            if part.strip():
                self.stream.write(part.rstrip("\n") + "\n")
        self._open_line = False
        self.stream.flush()
        return len(text)

    def flush(self) -> None:
        self.stream.flush()

    def isatty(self) -> bool:
        return False

    def fileno(self) -> int:
        return self.stream.fileno()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self.stream, "encoding", "utf-8")


def line_progress_when_logged(stream_name: str = "stderr") -> bool:
    """When ``sys.<stream_name>`` is not a terminal, make progress bars print a line every few seconds.

    Sets tqdm's default ``mininterval`` (through its ``TQDM_MININTERVAL`` environment default, unless already set)
    and wraps the stream in a :class:`LineWriter`. Returns whether it did.
    """
    stream = getattr(sys, stream_name)
    if stream is None or isinstance(stream, LineWriter) or stream.isatty():
        return False
    return line_progress(stream_name)


def line_progress(stream_name: str = "stderr") -> bool:
    """Make progress bars print a line every few seconds on ``sys.<stream_name>``, terminal or not: for processes
    that share a terminal (bars of several processes redrawn in place would overwrite each other). Returns whether
    it wrapped the stream (not when there is none or it is wrapped already)."""
    stream = getattr(sys, stream_name)
    if stream is None or isinstance(stream, LineWriter):
        return False
    os.environ.setdefault("TQDM_MININTERVAL", str(LOG_INTERVAL_SECONDS))
    setattr(sys, stream_name, LineWriter(stream))
    return True
