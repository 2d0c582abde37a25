"""JSON and TOML files read with their nesting bounded: a file nested thousands deep (planted, or damaged) would end
Python's recursive parsers in a ``RecursionError``, a traceback, instead of the one line naming the file that any
other invalid file gets.

:func:`json_loads` is what fastslow reads its JSON files with (saved models and ensembles, runs' records, index
files, world manifests, ``submission.json``, ``kaggle.json``); a file nested deeper than :data:`MAX_JSON_DEPTH`
raises a :class:`json.JSONDecodeError` at the bracket past the limit, so that every reader names the file as it does
for any other invalid JSON. :func:`toml_load` does the same for ``--config`` files, with
:class:`tomllib.TOMLDecodeError`.
"""

from __future__ import annotations

import json
import re
import tomllib
from typing import Any, BinaryIO

MAX_JSON_DEPTH = 64
"""The deepest nesting of arrays and objects a JSON file may have. fastslow's own files nest at most 7 deep (the deepest: a
GNN run's ``model.json`` and ``submission.json``, settings trees inside records), so 64 refuses only files no version
of fastslow wrote, long before Python's recursion limit (about 1,000)."""

MAX_TOML_DEPTH = MAX_JSON_DEPTH
"""The deepest nesting of arrays and inline tables a ``--config`` TOML file may have (its tables, ``[a.b.c]``, do not
nest brackets); real ones nest at most 2 deep (a list of values)."""

_JSON_TOKENS = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]', re.DOTALL)
_TOML_TOKENS = re.compile(r'"""(?:[^\\]|\\.)*?"""|\'\'\'.*?\'\'\'|"[^"\\\n]*(?:\\.[^"\\\n]*)*"|\'[^\'\n]*\'|#[^\n]*|[\[\]{}]',
                          re.DOTALL)


def too_deep(text: str, limit: int, *, toml: bool = False) -> int | None:
    """The offset in ``text`` of the first bracket (``[`` or ``{``) nested deeper than ``limit``, outside strings
    (and, for ``toml``, comments), or ``None`` when there is none. One scan, no recursion, whatever the depth."""
    depth = 0
    for m in (_TOML_TOKENS if toml else _JSON_TOKENS).finditer(text):
        token = m.group()
        if token in "[{":
            depth += 1
            if depth > limit:
                return m.start()
        elif token in "]}":
            depth = max(depth - 1, 0)
    return None


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
        tomllib.TOMLDecodeError: invalid TOML, or nested too deep.
        UnicodeDecodeError: not UTF-8 text.
    """
    text = f.read().decode("utf-8")
    at = too_deep(text, MAX_TOML_DEPTH, toml=True)
    if at is not None:
        line = text.count("\n", 0, at) + 1
        column = at - (text.rfind("\n", 0, at) + 1) + 1
        raise tomllib.TOMLDecodeError(f"nested deeper than {MAX_TOML_DEPTH} arrays or inline tables "
                                      f"(MAX_TOML_DEPTH) (at line {line}, column {column})")
    return tomllib.loads(text)
