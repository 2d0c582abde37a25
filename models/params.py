"""What a hyper-parameter may be: its range or choices and one line of help (:class:`Param`), and the table of
them that ``fastslow params`` prints and ``docs/parameters.md`` holds (:func:`reference`).

Each leaf of a settings tree carries its :class:`Param` (:func:`models.settings.setting`); its type and default are
the leaf's own.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from competition.errors import shown

INF = math.inf


@dataclass(frozen=True)
class Param:
    """One hyper-parameter's allowed values and meaning.

    Attributes:
        name: the ``__init__`` argument.
        help: one line: what it does.
        low: the smallest number allowed (``None``: no bound).
        high: the largest number allowed (``None``: no bound).
        low_open: ``low`` itself is not allowed (a learning rate > 0).
        choices: the allowed values, for a parameter that takes a fixed set (text, or a special value such as
            ``"all"`` beside a range).
        runtime: the parameter changes how a model runs, not what it learns (device, folders, threads).
        allowed: the allowed values in words, for a parameter checked by ``valid`` (a device name).
        valid: tells whether a text value is allowed, where no list of choices can (``allowed`` says which): true
            or false, or a reason why a well-formed value cannot be used here (a CUDA device on a torch without it).
    """

    name: str
    help: str
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    choices: tuple[Any, ...] = ()
    runtime: bool = False
    allowed: str = ""
    valid: Callable[[str], bool | str] | None = None

    def describe(self) -> str:
        """The allowed values in words, e.g. ``> 0``, ``1 to 64``, ``'hinge' or 'listmle'``, ``>= 1 or 'all'``."""
        if self.allowed:
            return self.allowed
        parts = []
        if self.low is not None or self.high is not None:
            if self.low is not None and self.high is not None and not self.low_open:
                parts.append(f"{_num(self.low)} to {_num(self.high)}")
            elif self.low is not None:
                parts.append(f"{'>' if self.low_open else '>='} {_num(self.low)}"
                             + (f" and <= {_num(self.high)}" if self.high is not None else ""))
            else:
                parts.append(f"<= {_num(self.high)}")
        parts += [repr(c) for c in self.choices]
        return " or ".join(parts) or "any"

    def problem(self, value: object) -> str | None:
        """Why ``value`` is not allowed (its type already checked), or ``None``."""
        if any(type(value) is type(c) and value == c for c in self.choices):
            return None
        if value is None or isinstance(value, bool):
            return None
        if isinstance(value, int | float):
            if isinstance(value, float) and not math.isfinite(value):
                return self._expected(value)
            below = self.low is not None and (value <= self.low if self.low_open else value < self.low)
            above = self.high is not None and value > self.high
            unbounded = self.low is None and self.high is None
            return self._expected(value) if below or above or (unbounded and self.choices) else None
        if self.valid is not None and isinstance(value, str):
            verdict = self.valid(value)
            if isinstance(verdict, str):  # well-formed, but unusable here: why
                return f"{self.name} {shown(repr(value))}: {verdict}"
            return None if verdict else self._expected(value)
        return self._expected(value) if self.choices else None

    def _expected(self, value: object) -> str:
        return f"{self.name} must be {self.describe()}; got {shown(value if isinstance(value, int) else repr(value))}"


def _num(x: float) -> str:
    return f"{int(x):,}" if float(x).is_integer() and abs(x) < 1e15 else f"{x:g}"


def reference(rows: Sequence[tuple[str, str, str, Mapping[str, str], Param]]) -> str:
    """A Markdown table of hyper-parameters.

    Args:
        rows: ``(model, key, type, defaults, entry)``: ``defaults`` maps where a default applies (``all``, a kind,
            a collection) to the default's text.
    """
    out = ["| model | key | type | default | allowed | what it does |", "|---|---|---|---|---|---|"]
    for model, key, kind, defaults, entry in rows:
        default = "; ".join(f"{v}" if where == "all" else f"{where}: {v}" for where, v in defaults.items())
        out.append(f"| `{model}` | `{key}` | {kind} | {default.replace('|', '/')} | {entry.describe()} | "
                   f"{entry.help}{' (how it runs, not what it learns)' if entry.runtime else ''} |")
    return "\n".join(out) + "\n"
