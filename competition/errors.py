"""Errors a user can act on: each names the file, the key, what was expected and what was found."""

from __future__ import annotations

import os
from pathlib import Path

EXIT_ERROR = 2
"""The exit code of a command that cannot run as asked (a bad argument, or a file or folder it cannot use)."""


def printable(text: object) -> str:
    """``text`` with every control or format character (``\\n``, ``\\r``, ``\\x1b``, U+202E, ...) written as its
    Python escape; other text is unchanged. The one escaping of text from inputs (names, keys, paths) wherever a
    message or a table shows it, so that it cannot forge a line or move the cursor."""
    s = str(text)
    if all(c.isprintable() for c in s):
        return s
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in s)


class UsageError(SystemExit):
    """A bad argument found after parsing: :func:`fastslow.cli.main` prints it as one line and exits with
    :data:`EXIT_ERROR`, as argparse does for the errors it finds."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.code = EXIT_ERROR


class DataFileError(ValueError):
    """A data file that cannot be used as it is.

    Args:
        path: the file.
        key: the npz member concerned, or ``None`` for the file as a whole.
        expected: what a valid file has there.
        found: what this file has instead.
    """

    def __init__(self, path: str | os.PathLike[str], key: str | None, expected: str, found: str) -> None:
        self.path = Path(path)
        self.key = key
        self.expected = expected
        self.found = found
        where = f"{self.path}" + (f" [{key}]" if key else "")
        super().__init__(f"{where}: expected {expected}; found {found}")

    def __reduce__(self):  # keeps the error picklable across process pools
        return (type(self), (self.path, self.key, self.expected, self.found))


class DataRootNotFound(FileNotFoundError):
    """No TpuGraphs data root was found; the message lists every place searched."""
