"""The fields of a saved model or ensemble (a JSON file), checked before any of them reaches numpy, torch or LightGBM.

A saved run is data someone else may have written (a runs folder shared as a Kaggle dataset, a file edited by hand),
so every field is checked against what the model's own schema allows: its type, its range, its length, that a number
is finite, that an array's dtype is a plain number type and its shape the one the model expects. A field that fails
raises :class:`FieldError`, a ``ValueError`` whose message names the field by its path in the file
(``state.columns_.kept[3]``), what was expected and what was found: the loaders put the file's name in front, and the
command line prints it as its one ``error:`` line.

The checks never allocate more than the file already holds: an array's declared dtype and shape are checked against
its nested lists before numpy builds it (:func:`array_spec`), so a few bytes of JSON cannot ask for gigabytes.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

_DTYPE = re.compile(r"[<>|=]?[biuf][1248]")
"""The dtypes an encoded array may declare (``dtype.str`` of a plain number type): never a subarray
(``"(260000000,)f8"``), a structure, an object or a string."""


MAX_LISTED_KEYS = 8
"""An object's allowed keys are listed in a message up to this many (counted above)."""

_FLOAT_LIMIT = 2 ** 1024
"""A whole number at or past this converts to no float64 (numpy raises ``OverflowError``)."""


class FieldError(ValueError):
    """A field of a saved file that cannot be used.

    Args:
        field: where it is in the file, e.g. ``state.columns_.kept[3]``.
        expected: what a valid file has there.
        found: what this file has instead.
    """

    def __init__(self, field: str, expected: str, found: str) -> None:
        self.field = field
        self.expected = expected
        self.found = found
        super().__init__(f"{field}: expected {expected}; found {found}")

    def __reduce__(self):  # keeps the error picklable across process pools
        return (type(self), (self.field, self.expected, self.found))


def shown(value: Any, limit: int = 60) -> str:
    """A short description of a JSON value for a message: a scalar as written (cut to ``limit`` characters), a list
    or an object by its size."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return f"a list of {len(value)}"
    if isinstance(value, dict):
        return f"an object of {len(value)} key(s)"
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _range(low: float | None, high: float | None) -> str:
    def text(x: float) -> str:
        return str(x) if isinstance(x, int) else f"{x:.7g}"

    if low is not None and high is not None:
        return f" in [{text(low)}, {text(high)}]"
    if low is not None:
        return f" >= {text(low)}"
    if high is not None:
        return f" <= {text(high)}"
    return ""


def check_mapping(value: Any, field: str, *, required: Iterable[str] = (), optional: Iterable[str] | None = None,
                  ) -> dict[str, Any]:
    """``value`` when it is a JSON object holding every key of ``required`` and, unless ``optional`` is ``None``, no
    key outside ``required`` and ``optional``."""
    if not isinstance(value, dict):
        raise FieldError(field, "an object", shown(value))
    required = list(required)
    missing = [k for k in required if k not in value]
    if missing:
        raise FieldError(field, f"a key {missing[0]!r}", "none")
    if optional is not None:
        known = sorted({*required, *optional})
        unknown = sorted(k for k in value if k not in known)
        if unknown:
            listed = f"one of {', '.join(known)}" if 0 < len(known) <= MAX_LISTED_KEYS else f"{len(known)} known keys"
            raise FieldError(field, f"keys among {listed}" if known else "no keys", f"{unknown[0]!r}")
    return value


def check_list(value: Any, field: str, *, length: int | None = None, max_length: int | None = None) -> list[Any]:
    """``value`` when it is a JSON list of ``length`` items (at most ``max_length``)."""
    if not isinstance(value, list):
        raise FieldError(field, "a list", shown(value))
    if length is not None and len(value) != length:
        raise FieldError(field, f"a list of {length}", shown(value))
    if max_length is not None and len(value) > max_length:
        raise FieldError(field, f"a list of at most {max_length}", shown(value))
    return value


def check_int(value: Any, field: str, *, low: int | None = None, high: int | None = None) -> int:
    """``value`` when it is a whole number (not a boolean) within ``[low, high]``."""
    if not _is_int(value) or (low is not None and value < low) or (high is not None and value > high):
        raise FieldError(field, f"a whole number{_range(low, high)}", shown(value))
    return int(value)


def check_number(value: Any, field: str, *, low: float | None = None, high: float | None = None,
                 null: bool = False) -> float | None:
    """``value`` when it is a finite number within ``[low, high]`` (or ``null``, where ``null`` allows it: a saved
    NaN)."""
    if value is None and null:
        return None
    if (not _is_number(value) or not math.isfinite(value) or (low is not None and value < low)
            or (high is not None and value > high)):
        raise FieldError(field, f"a finite number{_range(low, high)}{' or null' if null else ''}", shown(value))
    return float(value)


def check_bool(value: Any, field: str) -> bool:
    """``value`` when it is ``true`` or ``false``."""
    if not isinstance(value, bool):
        raise FieldError(field, "true or false", shown(value))
    return value


def check_str(value: Any, field: str, *, choices: Sequence[str] | None = None, max_length: int = 10_000) -> str:
    """``value`` when it is a string (one of ``choices``, when given) of at most ``max_length`` characters."""
    if not isinstance(value, str):
        raise FieldError(field, "a string", shown(value))
    if len(value) > max_length:
        raise FieldError(field, f"a string of at most {max_length} characters", f"{len(value)} characters")
    if choices is not None and value not in choices:
        raise FieldError(field, f"one of {', '.join(map(repr, choices))}", shown(value))
    return value


def check_ints(value: Any, field: str, *, low: int | None = None, high: int | None = None,
               length: int | None = None, increasing: bool = False) -> list[int]:
    """``value`` when it is a list (of ``length``) of whole numbers within ``[low, high]``, strictly increasing
    where ``increasing``."""
    items = check_list(value, field, length=length)
    for k, item in enumerate(items):
        check_int(item, f"{field}[{k}]", low=low, high=high)
        if increasing and k and item <= items[k - 1]:
            raise FieldError(f"{field}[{k}]", f"a number above the one before ({items[k - 1]})", shown(item))
    return items


def check_numbers(value: Any, field: str, *, low: float | None = None, high: float | None = None,
                  length: int | None = None, null: bool = False) -> list[float | None]:
    """``value`` when it is a list (of ``length``) of finite numbers within ``[low, high]`` (or ``null``s, where
    ``null`` allows them)."""
    items = check_list(value, field, length=length)
    for k, item in enumerate(items):
        check_number(item, f"{field}[{k}]", low=low, high=high, null=null)
    return items


# --------------------------------------------------------------------------------------------------------------
# Arrays (numpy arrays as models.base saves them: {"__ndarray__": nested lists, "dtype": str, "shape": [int]})
# --------------------------------------------------------------------------------------------------------------


ARRAY_KEYS = ("__ndarray__", "dtype", "shape")
"""The keys of an encoded array, and its only ones."""


def is_array(value: Any) -> bool:
    """Whether ``value`` is an encoded array (an object with an ``__ndarray__`` key)."""
    return isinstance(value, dict) and "__ndarray__" in value


def array_spec(value: Any, field: str, *, kinds: str = "biuf", shape: Sequence[int] | None = None,
               ndim: int | None = None) -> tuple[np.dtype, tuple[int, ...]]:
    """The dtype and shape of an encoded array, checked against its nested lists without building it.

    Args:
        value: ``{"__ndarray__": nested lists, "dtype": str, "shape": [int]}``.
        field: its path, for messages.
        kinds: the dtype kinds allowed (numpy's ``dtype.kind``: ``b``, ``i``, ``u``, ``f``).
        shape: the shape the model expects, when it knows it.
        ndim: the number of dimensions expected, when the shape itself is not known.

    Raises:
        FieldError: not an encoded array; a dtype that is not a plain number type of ``kinds``; a shape that is not
            a list of whole numbers, or not the one expected; nested lists that do not have the declared shape;
            an item that is not a number of the dtype (``null`` stands for NaN in a float array).
    """
    check_mapping(value, field, required=ARRAY_KEYS, optional=())
    text = value["dtype"]
    if not isinstance(text, str) or not _DTYPE.fullmatch(text):
        raise FieldError(f"{field}.dtype", "a plain number type such as '<f4' or '<i8'", shown(text))
    dtype = np.dtype(text)
    if dtype.kind not in kinds:
        raise FieldError(f"{field}.dtype", f"a type of kind {' or '.join(kinds)} (numpy's dtype.kind)",
                         shown(text))
    declared = tuple(check_ints(value["shape"], f"{field}.shape", low=0, length=ndim))
    if shape is not None and declared != tuple(shape):
        raise FieldError(f"{field}.shape", f"{list(shape)}", f"{list(declared)}")
    level = [value["__ndarray__"]]
    for depth, size in enumerate(declared):
        below: list[Any] = []
        for item in level:
            if not isinstance(item, list) or len(item) != size:
                raise FieldError(f"{field}.__ndarray__", f"nested lists of shape {list(declared)}",
                                 f"{shown(item)} at depth {depth}")
            below.extend(item)
        level = below
    if dtype.kind == "b":
        def fits(x: Any) -> bool:
            return isinstance(x, bool)
    elif dtype.kind == "f":
        def fits(x: Any) -> bool:
            return x is None or isinstance(x, float) or (_is_int(x) and abs(x) < _FLOAT_LIMIT)
    else:
        info = np.iinfo(dtype)

        def fits(x: Any) -> bool:
            return _is_int(x) and info.min <= x <= info.max
    bad = next((x for x in level if not fits(x)), fits)
    if bad is not fits:
        raise FieldError(f"{field}.__ndarray__", f"items of dtype {text}", shown(bad))
    return dtype, declared


def decode_array(value: Any, field: str, *, kinds: str = "biuf", shape: Sequence[int] | None = None,
                 ndim: int | None = None, finite: bool = False) -> npt.NDArray[Any]:
    """The numpy array of an encoded array, once :func:`array_spec` has checked it; with ``finite``, every item
    must be finite in the declared dtype (a float32 array holding 1e39 holds inf).

    Raises:
        FieldError: as :func:`array_spec`; a non-finite item where ``finite``.
    """
    dtype, declared = array_spec(value, field, kinds=kinds, shape=shape, ndim=ndim)
    with np.errstate(over="ignore", invalid="ignore"):
        array = np.asarray(value["__ndarray__"], dtype=dtype).reshape(declared)
    if finite and dtype.kind == "f" and not np.isfinite(array).all():
        bad = int((~np.isfinite(array)).sum())
        raise FieldError(f"{field}.__ndarray__", f"finite numbers of dtype {dtype.str}",
                         f"{bad} that are not (null, or beyond its range)")
    return array


def decode_value(value: Any, field: str) -> Any:
    """A saved value with every encoded array in it decoded (:func:`decode_array`); the recursion goes no deeper
    than the JSON reader allowed (:data:`competition.nesting.MAX_JSON_DEPTH`)."""
    if is_array(value):
        return decode_array(value, field)
    if isinstance(value, dict):
        return {k: decode_value(v, f"{field}.{k}") for k, v in value.items()}
    if isinstance(value, list):
        return [decode_value(v, f"{field}[{k}]") for k, v in enumerate(value)]
    return value

