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


def shown(value: object) -> str:
    """``value`` as a refusal echoes it: :func:`printable`, cut at :data:`~competition.limits.MAX_SHOWN_CHARS` with
    its length said, so that a long value (a pasted file, a huge number) leaves the refusal one readable line; a
    whole number past a few hundred digits by its number of digits (Python refuses to print one past 4,300)."""
    import math

    from competition.limits import MAX_SHOWN_CHARS

    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 4 * MAX_SHOWN_CHARS:
        return f"a whole number of about {value.bit_length() * math.log10(2):,.0f} digits"
    text = printable(value)
    if len(text) <= MAX_SHOWN_CHARS:
        return text
    return f"{text[:MAX_SHOWN_CHARS]}... ({len(text):,} characters)"


def quoted(text: str, limit: int = 80) -> str:
    """``repr(text)``, shortened to about ``limit`` characters and its length when longer: a token from an input
    (a submission's cell, a program's word) shown in a problem, which stays one line of bounded length whatever the
    file holds."""
    if len(text) <= limit:
        return repr(text)
    return f"{text[:limit - 20]!r}...{text[-12:]!r} ({len(text):,} characters)"


def shell_word(arg: object) -> str:
    """``arg`` as one word of a command line a message suggests, to paste into a shell as it is shown: quoted where
    a shell would split or expand it (:func:`shlex.quote`: spaces, ``;``, quotes, ``$``); one holding a control or
    format character (a newline, an escape, U+202E) is written in ANSI-C quoting (``$'a\\nb'``, which bash, zsh
    and ksh read), so that the message stays one line and shows no raw control character, and the pasted word is
    still the same. A path (an :class:`os.PathLike`) that starts with ``-`` is written ``./-...``, so that no
    parser takes it for an option."""
    import shlex

    text = str(arg)
    if isinstance(arg, os.PathLike) and text.startswith("-"):
        text = f"./{text}"
    if all(c.isprintable() for c in text):
        return shlex.quote(text)
    out = []
    for c in text:
        if c in "\\'":
            out.append("\\" + c)
        elif c.isprintable():
            out.append(c)
        elif ord(c) < 0x100:
            out.append(f"\\x{ord(c):02x}")
        elif ord(c) < 0x10000:
            out.append(f"\\u{ord(c):04x}")
        else:
            out.append(f"\\U{ord(c):08x}")
    return "$'" + "".join(out) + "'"


def suggested_command(*argv: object) -> str:
    """``fastslow ARGV`` as a message suggests it: a command line that runs as shown when pasted into a shell, each
    argument a :func:`shell_word`. The one builder of every ``fastslow ...`` command a message or a page suggests,
    so that each is quoted whatever the paths and names in it hold."""
    return " ".join(["fastslow", *(shell_word(a) for a in argv)])


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
