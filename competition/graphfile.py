"""One graph npz file: where it belongs, its members read with every failure named, and what is wrong with it.

* :func:`infer_collection_split` tells a file's collection and split from its path.
* :func:`validate_file` lists every problem of a file, :func:`validate_arrays` those a file would have if given
  arrays were written there; :func:`competition.reader.load_graph` raises the first (:func:`file_problems`). Every
  problem is a :class:`~competition.errors.DataFileError` naming the file, the key, what was expected and what was
  found.
* :func:`load_runtimes` reads a file's runtimes alone, checked the same way.
* :func:`open_npz`, :func:`guard` and :func:`guard_iter` read members so that any failure of the file surfaces as a
  :class:`~competition.errors.DataFileError` naming it.

Where the real files disagree with the published format (integer widths, for one), the checks accept what is
harmless (:func:`widen` widens it), and refuse the rest with a message that says what it found.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import zipfile
import zlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from competition.collections import Collection, Kind, Split
from competition.errors import DataFileError, printable
from competition.npzio import DEFAULT_BLOCK_BYTES, MemberInfo, NpzReader, bound_problem
from competition.opcodes import VALID_OPCODES
from competition.schema import (
    ACCEPTED_INT_DTYPES,
    LAYOUT_ARRAYS,
    TILE_ARRAYS,
    ArraySpec,
)

# Layout slot values: -1 marks an unused slot, 0..5 a dimension index (at most 6 dims per tensor).
LAYOUT_VALUE_RANGE = (-1, 5)


# --------------------------------------------------------------------------------------------------------------
# Low-level guards: every failure of a file surfaces as a DataFileError naming it
# --------------------------------------------------------------------------------------------------------------


def open_npz(path: Path, block_bytes: int | None = None) -> NpzReader:
    """An open :class:`~competition.npzio.NpzReader` of ``path`` (close it, or use it as a context manager)."""
    r = NpzReader(path) if block_bytes is None else NpzReader(path, block_bytes=block_bytes)
    r.open()
    return r


_RAW_ERRORS = (zipfile.BadZipFile, zlib.error, EOFError, OSError, ValueError, KeyError)


def _convert(path: Path, key: str | None, exc: BaseException) -> DataFileError:
    return DataFileError(path, key, "a readable npz member" if key else "a readable npz file",
                         f"{type(exc).__name__}: {exc} (truncated or corrupt?)")


def guard(path: Path, key: str | None, fn: Callable[[], Any]) -> Any:
    """``fn()``, with a raw reading error (a corrupt zip, a short read) raised as a :class:`DataFileError` naming
    ``path`` and ``key``."""
    try:
        return fn()
    except DataFileError:
        raise
    except _RAW_ERRORS as exc:
        raise _convert(path, key, exc) from exc


def guard_iter(path: Path, key: str, it: Iterator[Any]) -> Iterator[Any]:
    """The items of ``it``, with a raw reading error raised as :func:`guard` raises it."""
    while True:
        try:
            item = next(it)
        except StopIteration:
            return
        except DataFileError:
            raise
        except _RAW_ERRORS as exc:
            raise _convert(path, key, exc) from exc
        yield item


# --------------------------------------------------------------------------------------------------------------
# Where a file belongs
# --------------------------------------------------------------------------------------------------------------


def infer_collection_split(path: str | os.PathLike[str]) -> tuple[Collection | None, Split | None]:
    """Collection and split from a path like ``.../layout/xla/random/train/x.npz`` (``None`` where unknown)."""
    parts = Path(path).parent.parts
    split: Split | None = None
    if parts and parts[-1] in {s.value for s in Split}:
        split, parts = Split(parts[-1]), parts[:-1]
    if len(parts) >= 3 and parts[-3] == "layout":
        try:
            return Collection(":".join(parts[-3:])), split
        except ValueError:
            pass
    if len(parts) >= 2 and tuple(parts[-2:]) == ("tile", "xla"):
        return Collection.TILE_XLA, split
    return None, split


def _listed(keys: Sequence[str]) -> str:
    """A file's member keys as a message lists them (each escaped: the names come from the file)."""
    return ", ".join(printable(k) for k in keys) or "none"


def _kind_from_keys(path: Path, keys: list[str]) -> Kind:
    ks = set(keys)
    if ks & {"node_config_feat", "node_config_ids", "node_splits"}:
        return "layout"
    if ks & {"config_feat", "config_runtime_normalizers"}:
        return "tile"
    raise DataFileError(
        path, None, "the members of a tile file (config_feat, ...) or of a layout file (node_config_feat, ...)",
        f"members: {_listed(keys)}",
    )


# --------------------------------------------------------------------------------------------------------------
# Checks. Each is a generator of problems: load_graph stops at the first, validate_file collects them all.
# --------------------------------------------------------------------------------------------------------------

_FLOAT_KEYS = frozenset({"node_feat", "config_feat", "node_config_feat"})
_SYMBOL_SOURCE = {  # which member fixes each size symbol, per kind
    "tile": {"N": ("node_feat", 0), "E": ("edge_index", 0), "C": ("config_feat", 0)},
    "layout": {"N": ("node_feat", 0), "E": ("edge_index", 0), "C": ("node_config_feat", 0),
               "NC": ("node_config_feat", 1)},
}


def _fmt_shape(shape: Sequence[str | int]) -> str:
    return "[" + ", ".join(str(s) for s in shape) + "]"


def _dtype_problem(path: Path, spec: ArraySpec, info: MemberInfo) -> DataFileError | None:
    dt = info.dtype.newbyteorder("=") if info.dtype.byteorder not in "|=" else info.dtype
    if spec.key in _FLOAT_KEYS:
        if dt != np.float32:
            return DataFileError(path, spec.key, "dtype float32", f"dtype {info.dtype}")
    elif spec.key == "node_opcode":
        # Narrowed to uint8 after the values are checked against the opcode table.
        if dt.kind not in "iu":
            return DataFileError(path, spec.key, "an integer dtype (uint8; wider integers accepted)",
                                 f"dtype {info.dtype}")
    elif dt not in ACCEPTED_INT_DTYPES:
        accepted = ", ".join(str(d) for d in ACCEPTED_INT_DTYPES)
        return DataFileError(path, spec.key, f"dtype {spec.dtype} (also accepted: {accepted})",
                             f"dtype {info.dtype}")
    return None


def _header_problems(path: Path, r: NpzReader | _ArrayMembers, kind: Kind) -> Iterator[DataFileError]:
    specs = TILE_ARRAYS if kind == "tile" else LAYOUT_ARRAYS
    keys = r.keys()
    present = [s for s in specs if s.key in keys]
    for s in specs:
        if s.key not in keys:
            yield DataFileError(path, s.key, f"member {s.key!r} ({kind} file)",
                                f"missing (members: {_listed(keys)})")
    infos: dict[str, MemberInfo] = {}
    for s in present:
        info = _as_specified(s.key, r.info(s.key))
        bad_dtype = _dtype_problem(path, s, info)
        if bad_dtype is not None:
            yield bad_dtype
        if len(info.shape) != len(s.shape):
            yield DataFileError(path, s.key, f"{len(s.shape)}-D shape {_fmt_shape(s.shape)}",
                                f"{len(info.shape)}-D shape {info.shape}")
            continue
        fixed = [(i, d) for i, d in enumerate(s.shape) if isinstance(d, int)]
        wrong = [(i, d) for i, d in fixed if info.shape[i] != d]
        if wrong:
            yield DataFileError(path, s.key, f"shape {_fmt_shape(s.shape)}", f"shape {info.shape}")
            continue
        infos[s.key] = info
    # Sizes that several members share must agree; each symbol is fixed by one member (_SYMBOL_SOURCE).
    sizes: dict[str, tuple[int, str]] = {}
    for sym, (key, axis) in _SYMBOL_SOURCE[kind].items():
        if key in infos:
            sizes[sym] = (infos[key].shape[axis], key)
    for s in present:
        info = infos.get(s.key)
        if info is None:
            continue
        for axis, sym in enumerate(s.shape):
            if isinstance(sym, int) or sym not in sizes:
                continue
            want, source = sizes[sym]
            if source == s.key:
                continue
            if info.shape[axis] != want:
                yield DataFileError(
                    path, s.key, f"shape {_fmt_shape(s.shape)} with {sym}={want} ({sym} from {source})",
                    f"shape {info.shape}",
                )
    if "node_feat" in infos and infos["node_feat"].shape[0] == 0:
        yield DataFileError(path, "node_feat", "at least one node", "shape (0, 140)")
    c_key = "config_feat" if kind == "tile" else "node_config_feat"
    if c_key in infos and infos[c_key].shape[0] == 0:
        yield DataFileError(path, c_key, "at least one config", f"shape {infos[c_key].shape}")
    if kind == "layout" and c_key in infos and infos[c_key].shape[1] == 0:
        yield DataFileError(path, c_key, "at least one configurable node (NC >= 1)",
                            f"shape {infos[c_key].shape}: configs that configure no node")


STREAMED_MEMBERS = frozenset({"node_config_feat"})
"""Members read in blocks of rows, never whole: they must be C-ordered. Every other member is read whole, and may be
Fortran-ordered (as numpy writes a transposed or column-selected array): it is copied to C order."""


def _as_specified(key: str, info: MemberInfo) -> MemberInfo:
    """``info`` with a 1-D ``node_splits`` (what the official featurizer writes) seen as the ``[1, S]`` the format
    specifies; other members unchanged."""
    if key == "node_splits" and len(info.shape) == 1:
        return dataclasses.replace(info, shape=(1, info.shape[0]))
    return info


def _load_arrays(r: NpzReader | _ArrayMembers, kind: Kind) -> dict[str, npt.NDArray[Any]]:
    """Every member but the streamed ones, C-ordered, in the shapes the format specifies (:func:`_as_specified`)."""
    specs = TILE_ARRAYS if kind == "tile" else LAYOUT_ARRAYS
    out = {s.key: r.load(s.key) for s in specs if s.key not in STREAMED_MEMBERS}
    if "node_splits" in out and out["node_splits"].ndim == 1:
        out["node_splits"] = out["node_splits"].reshape(1, -1)
    return out


def _first_nonfinite(a: npt.NDArray[np.floating]) -> tuple[tuple[int, ...], float, int] | None:
    bad = ~np.isfinite(a)
    if not bad.any():
        return None
    where = tuple(int(i) for i in np.argwhere(bad)[0])
    return where, float(a[where]), int(bad.sum())


def _finite_problem(path: Path, key: str, a: npt.NDArray[np.floating], axes: Sequence[str]) -> DataFileError | None:
    hit = _first_nonfinite(a)
    if hit is None:
        return None
    where, value, count = hit
    at = ", ".join(f"{name} {i}" for name, i in zip(axes, where, strict=True))
    return DataFileError(path, key, "finite values", f"{value} at {at} ({count} non-finite in all)")


def _runtime_problems(path: Path, a: npt.NDArray[np.int64], key: str, split: Split | None
                      ) -> Iterator[DataFileError]:
    neg = np.flatnonzero(a < 0)
    if neg.size:
        yield DataFileError(path, key, "runtimes >= 0 ns", f"{int(a[neg[0]])} at config {int(neg[0])} "
                                                           f"({neg.size} negative)")
    zero = np.flatnonzero(a == 0)
    if a.size and zero.size == a.size and split in (Split.TRAIN, Split.VALID):
        # All zero is how test files hide their labels; a train or valid file so written has nothing to learn from.
        yield DataFileError(path, key, f"runtimes > 0 ns in a {split.value} file (only test files hide them as "
                                       "all zeros)", f"all {a.size} runtimes are 0")
    if 0 < zero.size < a.size:
        yield DataFileError(
            path, key, "all runtimes > 0 ns (or all 0 in a test file)",
            f"{zero.size} of {a.size} runtimes are 0 (first at config {int(zero[0])})",
        )


def _normalizer_problems(path: Path, norm: npt.NDArray[np.int64], runtime: npt.NDArray[np.int64]
                         ) -> Iterator[DataFileError]:
    is_test = runtime.size > 0 and not runtime.any()
    bad = np.flatnonzero(norm < 0 if is_test else norm <= 0)
    if bad.size:
        i = int(bad[0])
        need = "normalizers >= 0 ns (test file)" if is_test else "normalizers > 0 ns"
        yield DataFileError(path, "config_runtime_normalizers", need,
                            f"{int(norm[i])} at config {i} ({bad.size} in all)")


def _value_problems(path: Path, arrays: Mapping[str, npt.NDArray[Any]], kind: Kind, split: Split | None
                    ) -> Iterator[DataFileError]:
    n = arrays["node_feat"].shape[0]
    p = _finite_problem(path, "node_feat", arrays["node_feat"], ("node", "column"))
    if p is not None:
        yield p
    ops = arrays["node_opcode"]
    bad_ops = np.flatnonzero(~np.isin(ops, np.fromiter(VALID_OPCODES, dtype=np.int64)))
    if bad_ops.size:
        i = int(bad_ops[0])
        yield DataFileError(
            path, "node_opcode", "opcode ids in 0..120 except the tombstoned 97 and 101",
            f"{int(ops[i])} at node {i} ({bad_ops.size} nodes with unknown opcodes)",
        )
    e = arrays["edge_index"]
    out = np.flatnonzero(((e < 0) | (e >= n)).any(axis=1))
    if out.size:
        i = int(out[0])
        yield DataFileError(path, "edge_index", f"node indices in [0, {n}) (N={n})",
                            f"row {i} = {e[i].tolist()} ({out.size} rows out of range)")
    loops = np.flatnonzero(e[:, 0] == e[:, 1]) if e.size else np.zeros(0, np.int64)
    if loops.size:
        i = int(loops[0])
        yield DataFileError(path, "edge_index", "no self loops (the featurizer never writes one)",
                            f"self loop at row {i} = {e[i].tolist()} ({loops.size} in all)")
    runtime = arrays["config_runtime"]
    yield from _runtime_problems(path, runtime, "config_runtime", split)
    if kind == "tile":
        p = _finite_problem(path, "config_feat", arrays["config_feat"], ("config", "column"))
        if p is not None:
            yield p
        yield from _normalizer_problems(path, arrays["config_runtime_normalizers"], runtime)
        return
    ids = arrays["node_config_ids"]
    out = np.flatnonzero((ids < 0) | (ids >= n))
    if out.size:
        i = int(out[0])
        yield DataFileError(path, "node_config_ids", f"node indices in [0, {n}) (N={n})",
                            f"{int(ids[i])} at position {i}")
    steps = np.flatnonzero(np.diff(ids) <= 0)
    if steps.size:
        i = int(steps[0])
        yield DataFileError(path, "node_config_ids", "strictly ascending node indices",
                            f"{int(ids[i])} then {int(ids[i + 1])} at positions {i}, {i + 1}")
    splits = arrays["node_splits"].reshape(-1)
    if splits.size == 0 or splits[0] != 0:
        yield DataFileError(path, "node_splits", "[[0, ..., N]] starting at 0",
                            f"first value {int(splits[0])}" if splits.size else "an empty array")
    drops = np.flatnonzero(np.diff(splits) < 0)
    if drops.size:
        i = int(drops[0])
        yield DataFileError(path, "node_splits", "non-decreasing boundaries",
                            f"{int(splits[i])} then {int(splits[i + 1])} at positions {i}, {i + 1}")
    if splits.size and splits[-1] != n:
        yield DataFileError(path, "node_splits", f"last value N={n} (number of nodes)",
                            f"last value {int(splits[-1])}")


def _config_problems(path: Path, r: NpzReader | _ArrayMembers, *, ranges: bool) -> Iterator[DataFileError]:
    """Problems of ``node_config_feat``'s values, streamed: non-finite values, and with ``ranges`` values outside
    the layout range."""
    lo, hi = LAYOUT_VALUE_RANGE
    # One message per kind of problem, with the first place and a total: a broken member must not flood.
    first: dict[str, tuple[int, int, int, float]] = {}
    counts = {"nonfinite": 0, "off": 0}
    for start, block in guard_iter(path, "node_config_feat", r.iter_blocks("node_config_feat")):
        masks = {"nonfinite": ~np.isfinite(block)}
        if ranges:
            with np.errstate(invalid="ignore"):
                masks["off"] = ~masks["nonfinite"] & ((block != np.round(block)) | (block < lo) | (block > hi))
        for name, mask in masks.items():
            if mask.any():
                counts[name] += int(mask.sum())
                if name not in first:
                    c, k, j = (int(x) for x in np.argwhere(mask)[0])
                    first[name] = (start + c, k, j, float(block[c, k, j]))
    expected = {"nonfinite": "finite values", "off": f"integer layout values in {lo}..{hi}"}
    total = {"nonfinite": "non-finite in all", "off": "such values in all"}
    for name in ("nonfinite", "off"):
        if name in first:
            c, k, j, v = first[name]
            yield DataFileError(path, "node_config_feat", expected[name],
                                f"{v} at config {c}, configurable node {k}, column {j} ({counts[name]} {total[name]})")


class _ArrayMembers:
    """Arrays held in memory, read as :class:`~competition.npzio.NpzReader` reads a file's members: what
    :func:`validate_arrays` checks before they are written."""

    def __init__(self, arrays: Mapping[str, npt.ArrayLike], path: Path) -> None:
        self._arrays = {key: np.asarray(value) for key, value in arrays.items()}
        self._path = path

    def keys(self) -> list[str]:
        return list(self._arrays)

    def info(self, key: str) -> MemberInfo:
        """As :meth:`NpzReader.info`, bounds included: a file the readers would refuse is never written."""
        a = self._arrays[key]
        info = MemberInfo(key, tuple(int(d) for d in a.shape), a.dtype, False)
        problem = bound_problem(self._path, info)
        if problem is not None:
            raise problem
        return info

    def load(self, key: str) -> npt.NDArray[Any]:
        return np.ascontiguousarray(self._arrays[key])

    def iter_blocks(self, key: str, block_rows: int | None = None) -> Iterator[tuple[int, npt.NDArray[Any]]]:
        a = self._arrays[key]
        step = block_rows or max(1, DEFAULT_BLOCK_BYTES // max(self.info(key).row_bytes, 1))
        for start in range(0, a.shape[0], step):
            yield start, a[start:start + step]


def file_problems(
    path: Path, collection: Collection | None, *, validate: bool, deep: bool, sink: dict[str, Any],
    finite_configs: bool = False,
) -> Iterator[DataFileError]:
    """All problems of one file, in order; on success ``sink`` receives what a record needs."""
    with open_npz(path) as r:
        yield from _member_problems(path, r, collection, validate=validate, deep=deep, sink=sink,
                                    finite_configs=finite_configs)


def _member_problems(
    path: Path, r: NpzReader | _ArrayMembers, collection: Collection | None, *, validate: bool, deep: bool,
    sink: dict[str, Any], finite_configs: bool = False,
) -> Iterator[DataFileError]:
    """All problems of the members ``r`` reads (a file's, or arrays about to be written to ``path``)."""
    keys = guard(path, None, r.keys)
    path_collection, split = infer_collection_split(path)
    collection = Collection(collection) if collection is not None else path_collection
    kind: Kind
    if collection is not None:
        kind = Collection(collection).kind
    else:
        kind = _kind_from_keys(path, keys)
        collection = Collection.TILE_XLA if kind == "tile" else None
    header = guard(path, None, lambda: list(_header_problems(path, r, kind)))
    if header:
        yield from header
        return
    try:
        arrays = guard(path, None, lambda: _load_arrays(r, kind))
    except DataFileError as exc:
        yield exc
        return
    if validate:
        yield from _value_problems(path, arrays, kind, split)
        if (deep or finite_configs) and kind == "layout":
            try:
                yield from _config_problems(path, r, ranges=deep)
            except DataFileError as exc:
                yield exc
    sink.update(arrays=arrays, kind=kind, collection=collection, split=split)


def widen(arrays: dict[str, npt.NDArray[Any]]) -> dict[str, npt.NDArray[Any]]:
    """The members as a record holds them: float members as C-ordered float32, opcodes as uint8, other integers as
    int64.

    Raises:
        ValueError: an opcode id that does not fit uint8.
    """
    out = {}
    for key, a in arrays.items():
        if key in _FLOAT_KEYS:
            out[key] = np.ascontiguousarray(a, dtype=np.float32)
        elif key == "node_opcode":
            # Values were checked against the opcode table (or the caller opted out of checks): keep what fits.
            if a.dtype != np.uint8 and a.size and (a.min() < 0 or a.max() > 255):
                raise ValueError("opcode ids outside 0..255 cannot be stored as uint8")
            out[key] = a.astype(np.uint8, copy=False)
        else:
            out[key] = a.astype(np.int64, copy=False)
    return out


def load_runtimes(path: str | os.PathLike[str], collection: Collection
                  ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64] | None]:
    """The runtimes of one graph file, and a tile file's normalizers, read from those members alone (never
    ``node_config_feat``), checked as :func:`competition.reader.load_graph` checks them.

    Args:
        path: the npz file (its folder tells the split: a train or valid file may not hide its runtimes as zeros).
        collection: the file's collection.

    Returns:
        ``(config_runtime, config_runtime_normalizers)``: int64 ``[C]`` in ns; the normalizers ``None`` for layout.

    Raises:
        DataFileError: the first problem found, naming the file and the key.
    """
    path = Path(path)
    collection = Collection(collection)
    specs = {s.key: s for s in (TILE_ARRAYS if collection.is_tile else LAYOUT_ARRAYS)}
    wanted = ["config_runtime"] + (["config_runtime_normalizers"] if collection.is_tile else [])
    out: dict[str, npt.NDArray[np.int64]] = {}
    with open_npz(path) as r:
        keys = guard(path, None, r.keys)
        for key in wanted:
            if key not in keys:
                raise DataFileError(path, key, f"member {key!r}", f"missing (members: {_listed(keys)})")
            info = guard(path, key, lambda k=key: r.info(k))
            problem = _dtype_problem(path, specs[key], info)
            if problem is not None:
                raise problem
            if len(info.shape) != 1 or (out and info.shape[0] != out["config_runtime"].size):
                raise DataFileError(path, key, "shape [C]" + (" with C from config_runtime" if out else ""),
                                    f"shape {info.shape}")
            out[key] = guard(path, key, lambda k=key: r.load(k)).astype(np.int64)
    runtime, norm = out["config_runtime"], out.get("config_runtime_normalizers")
    problems = _runtime_problems(path, runtime, "config_runtime", infer_collection_split(path)[1])
    if norm is not None:
        problems = itertools.chain(problems, _normalizer_problems(path, norm, runtime))
    first = next(problems, None)
    if first is not None:
        raise first
    return runtime, norm


def validate_file(
    path: str | os.PathLike[str], collection: Collection | None = None, deep: bool = False, *,
    finite_configs: bool = False,
) -> list[DataFileError]:
    """Every problem of one file (empty list: the file is good).

    Structure is checked first; if the structure is wrong the values are not examined, since their meaning is
    then unclear. See :func:`competition.reader.load_graph` for what is checked.

    Args:
        path: the npz file.
        collection: as for :func:`competition.reader.load_graph`.
        deep: also stream through ``node_config_feat`` checking every value (finite, integer, in -1..5).
        finite_configs: also stream through ``node_config_feat`` checking only that it is finite, as reading the
            record's configs would (the cost is decompressing the member once; the check itself is cheap).

    Returns:
        The problems, each a :class:`DataFileError`, in the order found.
    """
    path = Path(path)
    problems: list[DataFileError] = []
    try:
        problems.extend(file_problems(path, collection, validate=True, deep=deep, sink={},
                                  finite_configs=finite_configs))
    except DataFileError as exc:
        problems.append(exc)
    return problems


def validate_arrays(arrays: Mapping[str, npt.ArrayLike], path: str | os.PathLike[str],
                    collection: Collection | None = None, deep: bool = False) -> list[DataFileError]:
    """Every problem the file ``path`` would have if ``arrays`` were written there, found before it is written: the
    checks of :func:`validate_file` (its split told by ``path``), on the arrays in memory.

    Args:
        arrays: the members, as :func:`~competition.npzio.write_npz` takes them (no streamed ones).
        path: where they are to be written (its folders tell the collection and split).
        collection: as for :func:`competition.reader.load_graph`.
        deep: as for :func:`validate_file`.

    Returns:
        The problems, each a :class:`DataFileError` naming ``path``, in the order found.
    """
    problems: list[DataFileError] = []
    try:
        problems.extend(_member_problems(Path(path), _ArrayMembers(arrays, Path(path)), collection, validate=True,
                                         deep=deep, sink={}))
    except DataFileError as exc:
        problems.append(exc)
    return problems
