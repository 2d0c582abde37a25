"""JSON and TOML files read with their nesting bounded: a file nested thousands deep (planted, or damaged) would end
Python's recursive parsers in a ``RecursionError``, a traceback, instead of the one line naming the file that any
other invalid file gets.

:func:`json_loads` is what fastslow reads its JSON files with (saved models and ensembles, runs' records, index
files, world manifests, ``submission.json``, ``kaggle.json``); a file nested deeper than :data:`MAX_JSON_DEPTH`
raises a :class:`json.JSONDecodeError` at the bracket past the limit, so that every reader names the file as it does
for any other invalid JSON. :func:`toml_load` does the same for ``--config`` files, with
:class:`tomllib.TOMLDecodeError`: in TOML every way into nesting is counted (table headers, dotted keys, arrays and
inline tables), since each makes the parsed document, and every reader that walks it, one level deeper.
"""

from __future__ import annotations

import json
import re
import tomllib
from dataclasses import dataclass
from typing import Any, BinaryIO

MAX_JSON_DEPTH = 64
"""The deepest nesting of arrays and objects a JSON file may have. fastslow's own files nest at most 7 deep (the deepest: a
GNN run's ``model.json`` and ``submission.json``, settings trees inside records), so 64 refuses only files no version
of fastslow wrote, long before Python's recursion limit (about 1,000)."""

MAX_TOML_DEPTH = MAX_JSON_DEPTH
"""The deepest nesting of tables, arrays and inline tables a ``--config`` TOML file may have, however it is written:
a table header (``[a.b.c]`` is 3 deep, ``[[a.b]]`` 3), a dotted key (``a.b.c = 1`` is 2 deep: the tables it
opens), an array or an inline table (1 each), added up as they nest. Real ones nest at most 5 deep
(``[gnn-attn."layout:xla:random".train]`` and a list of values)."""

_JSON_TOKENS = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]', re.DOTALL)
_TOML_NESTING = re.compile(r'"""(?:[^\\]|\\.)*?"""|\'\'\'.*?\'\'\'|"[^"\\\n]*(?:\\.[^"\\\n]*)*"|\'[^\'\n]*\'|#[^\n]*'
                           r'|[\[\]{}=,.\n]', re.DOTALL)


def too_deep(text: str, limit: int, *, toml: bool = False) -> int | None:
    """The offset in ``text`` of the first place nested deeper than ``limit``, outside strings (and, for ``toml``,
    comments; there :func:`toml_too_deep` counts tables too), or ``None`` when there is none. One scan, no recursion,
    whatever the depth."""
    if toml:
        found = toml_too_deep(text, limit)
        return None if found is None else found.offset
    depth = 0
    for m in _JSON_TOKENS.finditer(text):
        token = m.group()
        if token in "[{":
            depth += 1
            if depth > limit:
                return m.start()
        elif token in "]}":
            depth = max(depth - 1, 0)
    return None


@dataclass(frozen=True)
class TooDeep:
    """Where a TOML text first nests deeper than a limit.

    Attributes:
        offset: the character offset of the first place past the limit (the ``.`` of a header or key, or a
            bracket).
        line: its line, from 1.
        column: its column, from 1.
        what: what nests there: ``a table header``, ``a dotted key``, ``an array`` or ``an inline table``.
        deepest: the deepest nesting anywhere in the text.
    """

    offset: int
    line: int
    column: int
    what: str
    deepest: int


def toml_too_deep(text: str, limit: int) -> TooDeep | None:
    """Where the TOML ``text`` first nests tables, arrays and inline tables deeper than ``limit``, counted as
    :data:`MAX_TOML_DEPTH` says (a header's keys, a dotted key's tables, each bracket), or ``None``. One scan of the
    tokens that nest (strings and comments skipped whole), no parsing and no recursion, whatever the depth.

    The depth is the parsed document's: a key's value sits under the current header's tables, the tables of its own
    dotted key, and each array or inline table it is inside (with the tables of the dotted keys in those).
    """
    header = 0  # the tables the current header opened
    top = 0  # the tables the dotted key of the current top-level line opened
    stack: list[tuple[str, int]] = []  # per open bracket: (the bracket, the tables its current dotted key opened)
    inner = 0  # what the open brackets add: 1 each, and the tables of their dotted keys (kept as they change: the
    # stack of a planted file is a million deep, and summing it at each bracket would take hours)
    mode = "start"  # of a top-level line; "header", "rest" (of a header's line), "key", "value"
    dots = 0  # in the header or key being read
    first: tuple[int, str] | None = None
    deepest = 0

    def depth() -> int:
        return header + top + inner

    def reached(value: int, at: int, what: str) -> None:
        nonlocal first, deepest
        deepest = max(deepest, value)
        if value > limit and first is None:
            first = (at, what)

    for m in _TOML_NESTING.finditer(text):
        token, at = m.group(), m.start()
        if token[0] == "#":
            continue
        if mode == "start":
            if token == "\n":
                continue
            if token == "[":
                mode, dots = "header", 1
                if text.startswith("[[", at):  # an array of tables: its element is one table deeper
                    dots = 2
                top = 0
                reached(dots, at, "a table header")
                continue
            mode, dots, top = "key", 0, 0
        if mode == "header":
            if token == ".":
                dots += 1
                reached(dots, at, "a table header")
            elif token in ("]", "\n"):
                header, mode = dots, ("rest" if token == "]" else "start")
            continue
        if mode == "rest":
            if token == "\n":
                mode = "start"
            continue
        if token[0] in "\"'":  # a quoted key, or a string value
            continue
        if mode == "key":
            if token == ".":
                dots += 1
                reached(depth() + dots, at, "a dotted key")
            elif token == "=":
                if stack:
                    inner += dots - stack[-1][1]
                    stack[-1] = (stack[-1][0], dots)
                else:
                    top = dots
                mode = "value"
            elif token == "}" and stack:  # an empty inline table, or a trailing comma
                inner -= 1 + stack.pop()[1]
                mode = "value"
            elif token == "\n" and not stack:  # a line that is no key = value: the parser says why
                mode = "start"
            continue
        # mode == "value"
        if token in "[{":
            stack.append((token, 0))
            inner += 1
            reached(depth(), at, "an array" if token == "[" else "an inline table")
            if token == "{":
                mode, dots = "key", 0
        elif token in "]}":
            if stack:
                inner -= 1 + stack.pop()[1]
        elif token == ",":
            if stack and stack[-1][0] == "{":
                inner -= stack[-1][1]
                stack[-1] = ("{", 0)
                mode, dots = "key", 0
        elif token == "\n" and not stack:
            mode = "start"
    if first is None:
        return None
    at, what = first
    line = text.count("\n", 0, at) + 1
    return TooDeep(at, line, at - (text.rfind("\n", 0, at) + 1) + 1, what, deepest)


def long_number(text: str) -> tuple[int, int, int] | None:
    """``(line, column, digits)`` of the first run of digits longer than Python turns into a number
    (:func:`sys.get_int_max_str_digits`, 4,300 by default), where :func:`json.loads` and :func:`tomllib.loads` end
    in a ``ValueError`` that names neither the file nor the place; ``None`` when there is none (or no limit)."""
    import sys

    limit = sys.get_int_max_str_digits()
    if not limit:
        return None
    m = re.search(r"\d(?:_?\d){" + str(limit) + ",}", text)
    if m is None:
        return None
    at = m.start()
    digits = sum(c.isdigit() for c in m.group())
    return text.count("\n", 0, at) + 1, at - (text.rfind("\n", 0, at) + 1) + 1, digits


def json_loads(text: str | bytes, **kwargs: Any) -> Any:
    """:func:`json.loads`, refusing text nested deeper than :data:`MAX_JSON_DEPTH` first.

    Raises:
        json.JSONDecodeError: invalid JSON, or nested too deep (at the first bracket past the limit).
    """
    if isinstance(text, bytes | bytearray):
        text = text.decode("utf-8")
    at = too_deep(text, MAX_JSON_DEPTH)
    if at is not None:
        raise json.JSONDecodeError(f"nested deeper than {MAX_JSON_DEPTH} arrays or objects (MAX_JSON_DEPTH), "
                                   "deeper than any file fastslow writes", text, at)
    return json.loads(text, **kwargs)


def toml_load(f: BinaryIO) -> dict[str, Any]:
    """:func:`tomllib.load`, refusing a file nested deeper than :data:`MAX_TOML_DEPTH` first.

    Raises:
        tomllib.TOMLDecodeError: invalid TOML, or nested too deep (naming the line, the column, the depth and the
            limit).
        UnicodeDecodeError: not UTF-8 text.
    """
    text = f.read().decode("utf-8")
    found = toml_too_deep(text, MAX_TOML_DEPTH)
    if found is not None:
        raise tomllib.TOMLDecodeError(
            f"nested {found.deepest:,} tables, arrays or inline tables deep, deeper than the limit of "
            f"{MAX_TOML_DEPTH} (MAX_TOML_DEPTH): {found.what} passes it at line {found.line}, column "
            f"{found.column}")
    try:
        return tomllib.loads(text)
    except RecursionError:  # bounded above; kept as the one line any other invalid file gets all the same
        raise tomllib.TOMLDecodeError(f"nested too deep to parse (the limit is {MAX_TOML_DEPTH}, MAX_TOML_DEPTH)") \
            from None
