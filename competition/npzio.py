"""Streaming, atomic, deterministic npz input and output.

A real layout file's ``node_config_feat`` decompresses to gigabytes, so neither side ever holds a whole member:

* :func:`write_npz` writes members one after another into a deflate-compressed zip, taking any member as an
  iterator of row blocks (:class:`StreamedArray`), into a temporary file that is renamed into place only when
  complete (:func:`competition.atomic.atomic_path`). Zip timestamps are fixed, so the same arrays give the same
  bytes.
* :class:`NpzReader` reads a member's ``.npy`` header without touching its data, and reads chosen rows by
  decompressing the member block by block and keeping only the rows asked for. It is the one way fastslow opens an
  npz, and it checks what it opens before inflating anything: the zip directory when the file is opened (no member
  named twice, none encrypted, only numpy's compression methods, no declared size past
  :data:`~competition.limits.MAX_NPZ_MEMBER_BYTES`), and each member's header when the member is opened (its rows
  within the real-data bounds of :data:`MEMBER_ROW_LIMITS`, its size in the directory the size its header declares).

The files are ordinary ``.npz`` archives: ``numpy.load`` reads them, and these functions read numpy's.
"""

from __future__ import annotations

import errno
import math
import os
import tempfile
import zipfile
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np
import numpy.typing as npt

from competition.atomic import atomic_path, special_file
from competition.errors import DataFileError, printable
from competition.limits import (
    MAX_GRAPH_CONFIGS,
    MAX_GRAPH_EDGES,
    MAX_GRAPH_NODES,
    MAX_LAYOUT_CELLS,
    MAX_NPZ_LOAD_BYTES,
    MAX_NPZ_MEMBER_BYTES,
    over,
)

_ZIP_DATE = (1980, 1, 1, 0, 0, 0)
# Bytes decompressed per step when streaming rows: bounds the reader's working memory.
DEFAULT_BLOCK_BYTES = 8 * 1024 * 1024
CONVERT_BYTES = 256 * 1024 * 1024
"""Memory for copying a Fortran-ordered member to C order (:meth:`NpzReader.c_ordered_copy`): rows of at most this
many bytes per forward pass over the member."""

MEMBER_ROW_LIMITS: dict[str, tuple[int, int, str, str]] = {
    **{key: (0, MAX_GRAPH_NODES, "MAX_GRAPH_NODES", "nodes") for key in ("node_feat", "node_opcode")},
    "node_config_ids": (0, MAX_GRAPH_NODES, "MAX_GRAPH_NODES", "configurable nodes"),
    "node_splits": (-1, MAX_GRAPH_NODES + 1, "MAX_GRAPH_NODES + 1", "boundaries"),
    "edge_index": (0, MAX_GRAPH_EDGES, "MAX_GRAPH_EDGES", "edges"),
    **{key: (0, MAX_GRAPH_CONFIGS, "MAX_GRAPH_CONFIGS", "configs")
       for key in ("config_feat", "config_runtime", "config_runtime_normalizers", "node_config_feat",
                   "config_runtime_noiseless")},
}
"""Per member of the TpuGraphs format (graph files and a synthetic world's ``secret/`` files): the axis whose length
is counted, its limit, the limit's name and what it counts. Checked on the member's ``.npy`` header, before any of its
data is inflated; ``node_config_feat``'s configs x configurable nodes are bounded by
:data:`~competition.limits.MAX_LAYOUT_CELLS` too."""
_EXPECT_REAL = "a size within fastslow's bounds on real data"
# The compression methods numpy writes. The others Python reads (bzip2, lzma) inflate a whole compressed chunk at a
# time, however large its output: only these two keep every read within the size asked for.
_METHODS = frozenset({zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED})


@dataclass(frozen=True)
class StreamedArray:
    """An array given as consecutive row blocks along axis 0, for writing without materialising it.

    Args:
        shape: full shape of the array.
        dtype: element type; each block is cast to it.
        blocks: iterable of arrays of shape ``(rows_i, *shape[1:])`` whose ``rows_i`` sum to ``shape[0]``.
    """

    shape: tuple[int, ...]
    dtype: np.dtype
    blocks: Iterable[npt.NDArray[Any]]


def _npy_header(shape: tuple[int, ...], dtype: np.dtype) -> dict[str, Any]:
    return {"descr": np.lib.format.dtype_to_descr(np.dtype(dtype)), "fortran_order": False, "shape": tuple(shape)}


def _write_member(zf: zipfile.ZipFile, key: str, value: npt.ArrayLike | StreamedArray, level: int) -> None:
    info = zipfile.ZipInfo(f"{key}.npy", date_time=_ZIP_DATE)
    info.compress_type = zipfile.ZIP_DEFLATED
    info._compresslevel = level  # ZipInfo has no public setter; ZipFile.open honours this attribute.
    info.external_attr = 0o600 << 16
    with zf.open(info, "w", force_zip64=True) as fp:
        if isinstance(value, StreamedArray):
            _write_streamed(fp, key, value)
        else:
            arr = np.asarray(value)
            # np.ascontiguousarray would turn a 0-d array into shape (1,): copy only when needed.
            arr = arr if arr.flags.c_contiguous else arr.copy(order="C")
            np.lib.format.write_array_header_1_0(fp, _npy_header(arr.shape, arr.dtype))
            fp.write(memoryview(arr.reshape(-1)).cast("B") if arr.size else b"")


def _write_streamed(fp: IO[bytes], key: str, value: StreamedArray) -> None:
    dtype = np.dtype(value.dtype)
    np.lib.format.write_array_header_1_0(fp, _npy_header(value.shape, dtype))
    rows = 0
    for block in value.blocks:
        block = np.ascontiguousarray(block, dtype=dtype)
        if block.shape[1:] != tuple(value.shape[1:]):
            raise ValueError(f"{key}: block of shape {block.shape} does not fit array shape {value.shape}")
        rows += block.shape[0]
        if rows > value.shape[0]:
            raise ValueError(f"{key}: blocks give more than the {value.shape[0]} rows declared")
        if block.size:
            fp.write(memoryview(block.reshape(-1)).cast("B"))
    if rows != value.shape[0]:
        raise ValueError(f"{key}: blocks gave {rows} rows, {value.shape[0]} declared")


def write_npz(
    path: str | os.PathLike[str],
    arrays: Mapping[str, npt.ArrayLike | StreamedArray],
    *,
    compress_level: int = 6,
    check: Callable[[Path], str | None] | None = None,
    exclusive: bool = False,
) -> Path:
    """Write ``arrays`` as a deflate-compressed npz, atomically and deterministically.

    Members are written in the mapping's order. The file appears at ``path`` only once it is complete (a temporary
    file in the same folder is renamed over it), so an interrupted write leaves no partial file behind.

    Args:
        path: destination; its folder is created if missing.
        arrays: key to array, or to :class:`StreamedArray` for members too large to hold in memory.
        compress_level: zlib level 0-9.
        check: see :func:`~competition.atomic.atomic_path`.
        exclusive: see :func:`~competition.atomic.atomic_path`: only where nothing is at ``path`` once the file is
            complete.

    Returns:
        The destination path.

    Raises:
        RejectedOutput: ``check`` found a problem (:class:`competition.atomic.RejectedOutput`).
        FileExistsError: ``exclusive``, and something is at ``path``.
    """
    with atomic_path(path, check=check, exclusive=exclusive) as tmp:
        with open(tmp, "wb") as raw:
            zf = zipfile.ZipFile(raw, "w", compression=zipfile.ZIP_DEFLATED, allowZip64=True)
            try:
                for key, value in arrays.items():
                    _write_member(zf, key, value, compress_level)
            except BaseException:
                # Interrupted (a signal, a full disk): the temporary file is dropped unfinished. Closing the zip
                # would write its directory, or fail where a member's write was cut short (and the garbage
                # collector would print that failure at exit): forget its file instead.
                zf.fp = None
                raise
            zf.close()
            raw.flush()
            os.fsync(raw.fileno())
    return Path(path)


@dataclass(frozen=True)
class MemberInfo:
    """A member's ``.npy`` header: what the array is, read without decompressing its data."""

    key: str
    shape: tuple[int, ...]
    dtype: np.dtype
    fortran_order: bool

    @property
    def row_bytes(self) -> int:
        # Python integers: a hostile header's dimensions must not wrap around as int64 products would.
        return math.prod(self.shape[1:]) * self.dtype.itemsize

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize


def bound_problem(path: str | os.PathLike[str], info: MemberInfo) -> DataFileError | None:
    """The problem of a member whose header takes more than real data does, or ``None``: a negative dimension,
    more rows than :data:`MEMBER_ROW_LIMITS` allow, more configs x configurable nodes than
    :data:`~competition.limits.MAX_LAYOUT_CELLS`, more bytes than :data:`~competition.limits.MAX_NPZ_MEMBER_BYTES`.
    What :class:`NpzReader` checks of every member it opens, and what arrays about to be written are checked
    against (:func:`competition.graphfile.validate_arrays`)."""
    key, shape = info.key, info.shape
    if any(d < 0 for d in shape):
        return DataFileError(path, key, "non-negative dimensions", f"shape {shape}")
    bound = MEMBER_ROW_LIMITS.get(key)
    if bound is not None and shape:
        axis, limit, name, unit = bound
        problem = over(shape[axis], limit, name, unit)
        if problem is not None:
            return DataFileError(path, key, _EXPECT_REAL, f"{problem} (shape {shape})")
    if key == "node_config_feat" and len(shape) >= 2:
        problem = over(shape[0] * shape[1], MAX_LAYOUT_CELLS, "MAX_LAYOUT_CELLS", "cells (configs x configurable "
                       "nodes)")
        if problem is not None:
            return DataFileError(path, key, _EXPECT_REAL, f"{problem} (shape {shape})")
    problem = over(info.nbytes, MAX_NPZ_MEMBER_BYTES, "MAX_NPZ_MEMBER_BYTES", "bytes")
    if problem is not None:
        return DataFileError(path, key, _EXPECT_REAL, f"{problem} (shape {shape} {info.dtype})")
    return None


def _key(name: str) -> str:
    """A member's key: its name in the zip without the ``.npy`` suffix."""
    return name[: -len(".npy")] if name.endswith(".npy") else name


class NpzReader:
    """Reads members of one npz file, whole or by rows, naming the file in every error.

    Use as a context manager. Rows are read by decompressing the member front to back in blocks of about
    ``block_bytes`` and keeping only the requested rows, so memory stays at one block plus the result. A
    Fortran-ordered member (as ``np.savez`` writes a transposed or column-selected array), whose rows are not stored
    together, is first copied to C order into a temporary file (:meth:`c_ordered_copy`), removed when the reader
    closes; its rows are then streamed from that copy.

    Args:
        path: the npz file.
        block_bytes: decompressed bytes handled per step when streaming rows.
        convert_bytes: memory for copying a Fortran-ordered member to C order.
    """

    def __init__(self, path: str | os.PathLike[str], *, block_bytes: int = DEFAULT_BLOCK_BYTES,
                 convert_bytes: int = CONVERT_BYTES) -> None:
        self.path = Path(path)
        self.block_bytes = int(block_bytes)
        self.convert_bytes = int(convert_bytes)
        self._zip: zipfile.ZipFile | None = None
        self._infos: dict[str, MemberInfo] = {}
        self._copies: dict[str, Path] = {}

    def __enter__(self) -> NpzReader:
        self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def open(self) -> None:
        if self._zip is not None:
            return
        special = special_file(self.path)
        if special is not None:  # opening a FIFO would wait for a writer, /dev/zero would be read for ever
            raise DataFileError(self.path, None, "an npz file", special)
        try:
            self._zip = zipfile.ZipFile(self.path)
        except FileNotFoundError:
            found = "a broken symbolic link" if self.path.is_symlink() else "no such file"
            raise DataFileError(self.path, None, "an npz file", found) from None
        except IsADirectoryError:
            raise DataFileError(self.path, None, "an npz file", "a folder") from None
        except PermissionError:
            raise DataFileError(self.path, None, "an npz file that can be read", "permission denied") from None
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise DataFileError(self.path, None, "an npz file", "a symbolic link loop") from None
            raise DataFileError(self.path, None, "a complete npz (zip) archive",
                                f"unreadable archive ({exc}); truncated or corrupt?") from None
        except (zipfile.BadZipFile, EOFError) as exc:
            raise DataFileError(
                self.path, None, "a complete npz (zip) archive", f"unreadable archive ({exc}); truncated or corrupt?"
            ) from None
        try:
            self._check_directory(self._zip)
        except BaseException:
            self.close()
            raise

    def _check_directory(self, zf: zipfile.ZipFile) -> None:
        """Refuse what the zip directory shows before any member is inflated: a key given twice (numpy reads the
        last, so two readers could see two arrays), an encrypted or patched member, a compression method numpy does
        not write, a declared size past :data:`~competition.limits.MAX_NPZ_MEMBER_BYTES`."""
        seen: set[str] = set()
        for zinfo in zf.infolist():
            key = _key(zinfo.filename)
            if key in seen:
                raise DataFileError(self.path, printable(key), "one member of each name",
                                    f"two or more members named {printable(key)!r} (numpy would read only the last)")
            seen.add(key)
            if zinfo.flag_bits & 0x1:
                raise DataFileError(self.path, printable(key), "an unencrypted member (numpy writes no other)",
                                    "a member marked encrypted in the zip directory")
            if zinfo.flag_bits & 0x60:
                raise DataFileError(self.path, printable(key), "a plain zip member (numpy writes no other)",
                                    "a member marked as patched data or strongly encrypted in the zip directory")
            if zinfo.compress_type not in _METHODS:
                raise DataFileError(self.path, printable(key), "a stored or deflate-compressed member (what numpy "
                                    "writes)", f"zip compression method {zinfo.compress_type}")
            big = over(zinfo.file_size, MAX_NPZ_MEMBER_BYTES, "MAX_NPZ_MEMBER_BYTES", "bytes")
            if big is not None:
                raise DataFileError(self.path, printable(key), _EXPECT_REAL, f"{big}, declared in the zip directory")

    def close(self) -> None:
        if self._zip is not None:
            self._zip.close()
            self._zip = None
        for path in self._copies.values():
            path.unlink(missing_ok=True)
        self._copies.clear()

    @property
    def zip(self) -> zipfile.ZipFile:
        self.open()
        assert self._zip is not None
        return self._zip

    def keys(self) -> list[str]:
        """Member keys in file order, without the ``.npy`` suffix."""
        return [_key(n) for n in self.zip.namelist()]

    def _member_name(self, key: str) -> str:
        names = self.zip.namelist()
        for name in (f"{key}.npy", key):
            if name in names:
                return name
        raise DataFileError(self.path, key, f"member {key!r}",
                            f"missing (members: {', '.join(printable(k) for k in self.keys())})")

    def _open_member(self, key: str) -> tuple[IO[bytes], MemberInfo]:
        name = self._member_name(key)
        try:
            fp = self.zip.open(name)
        except (NotImplementedError, RuntimeError, zipfile.BadZipFile, EOFError, OSError) as exc:
            # The directory was checked when the file was opened: a local header that disagrees with it.
            raise DataFileError(self.path, key, "a readable zip member", f"{printable(exc)} (truncated or corrupt?)"
                                ) from None
        try:
            try:
                version = np.lib.format.read_magic(fp)
                if version == (1, 0):
                    shape, fortran, dtype = np.lib.format.read_array_header_1_0(fp, max_header_size=1 << 20)
                else:
                    shape, fortran, dtype = np.lib.format.read_array_header_2_0(fp, max_header_size=1 << 20)
                header_bytes = fp.tell()
            except (ValueError, EOFError, zlib.error, zipfile.BadZipFile, OSError) as exc:
                raise DataFileError(self.path, key, "a .npy header", f"unreadable header ({exc})") from None
            if dtype.hasobject:
                raise DataFileError(self.path, key, "a numeric array", "an object array (refused: unsafe to load)")
            info = MemberInfo(key, tuple(int(s) for s in shape), np.dtype(dtype), bool(fortran))
            self._check_header(info, header_bytes, self.zip.getinfo(name).file_size)
        except BaseException:
            fp.close()
            raise
        self._infos[key] = info
        return fp, info

    def _check_header(self, info: MemberInfo, header_bytes: int, declared: int) -> None:
        """Refuse, from a member's header alone, what :func:`bound_problem` refuses, and a size in the zip directory
        other than the header's: numpy writes the header and the data, nothing after them, and the zip reader
        inflates no more than the directory's size, so with the two equal no read inflates past what the header
        declares."""
        problem = bound_problem(self.path, info)
        if problem is not None:
            raise problem
        key, shape = info.key, info.shape
        data = declared - header_bytes
        if data < info.nbytes:
            raise DataFileError(self.path, key, f"{info.nbytes} bytes of array data {shape} {info.dtype}",
                                f"only {max(data, 0)} bytes (truncated)")
        if data > info.nbytes:
            raise DataFileError(self.path, key, f"{info.nbytes:,} bytes of array data {shape} {info.dtype} after "
                                "its header, as numpy writes", f"{data:,} bytes in the zip directory's size of the "
                                "member: the directory and the header disagree")

    def info(self, key: str) -> MemberInfo:
        """The member's shape and dtype, read from its header only."""
        if key not in self._infos:
            fp, _ = self._open_member(key)
            fp.close()
        return self._infos[key]

    def _read_exact(self, fp: IO[bytes], nbytes: int, key: str, what: str) -> bytes:
        try:
            data = fp.read(nbytes)
        except (zlib.error, zipfile.BadZipFile, EOFError, OSError) as exc:
            raise DataFileError(self.path, key, f"{what}", f"corrupt compressed data ({exc})") from None
        if len(data) != nbytes:
            raise DataFileError(self.path, key, f"{nbytes} bytes of {what}", f"only {len(data)} bytes (truncated)")
        return data

    def load(self, key: str) -> npt.NDArray[Any]:
        """The whole member as an array (for members that fit in memory: at most
        :data:`~competition.limits.MAX_NPZ_LOAD_BYTES`)."""
        fp, info = self._open_member(key)
        with fp:
            problem = over(info.nbytes, MAX_NPZ_LOAD_BYTES, "MAX_NPZ_LOAD_BYTES", "bytes")
            if problem is not None:
                raise DataFileError(self.path, key, "a member small enough to read whole (only node_config_feat is "
                                    "streamed)", f"{problem} (shape {info.shape} {info.dtype})")
            data = self._read_exact(fp, info.nbytes, key, f"array data {info.shape} {info.dtype}")
        order = "F" if info.fortran_order else "C"
        return np.frombuffer(data, dtype=info.dtype).reshape(info.shape, order=order).copy()

    def load_rows(self, key: str, rows: slice | Sequence[int] | npt.NDArray[np.integer]) -> npt.NDArray[Any]:
        """Rows of a member along axis 0, streamed: the member is never decompressed whole into memory.

        Args:
            key: member name.
            rows: a slice, or indices in any order (repeats allowed); the result follows their order.

        Returns:
            Array of shape ``(len(rows), *shape[1:])``.
        """
        fp, info = self._open_rows(key)
        with fp:
            n = info.shape[0] if info.shape else 0
            idx = np.arange(n)[rows] if isinstance(rows, slice) else np.asarray(rows, dtype=np.int64).reshape(-1)
            self._check_range(key, idx, n)
            out = np.empty((idx.size, *info.shape[1:]), dtype=info.dtype)
            order = np.argsort(idx, kind="stable")
            for k, j, values in self._stream_rows(fp, info, key, idx[order]):
                out[order[k:j]] = values
            return out

    def _open_rows(self, key: str) -> tuple[IO[bytes], MemberInfo]:
        """The member's data stream positioned at its first row, C-ordered (a Fortran-ordered member's copy)."""
        fp, info = self._open_member(key)
        if not (info.fortran_order and len(info.shape) > 1):
            return fp, info
        fp.close()
        path = self.c_ordered_copy(key)
        copy = path.open("rb")
        np.lib.format.read_magic(copy)
        np.lib.format.read_array_header_1_0(copy, max_header_size=1 << 20)
        return copy, MemberInfo(key, info.shape, info.dtype, False)

    def c_ordered_copy(self, key: str) -> Path:
        """A C-ordered ``.npy`` copy of a Fortran-ordered member, in a temporary file removed at :meth:`close`.

        Made in passes of at most ``convert_bytes`` of rows: each pass reads the member front to back (a column of
        every row at a time, in blocks of about ``block_bytes``) and keeps its rows' part, so the member is never
        held whole in memory, at the cost of one decompression per pass.
        """
        if key in self._copies:
            return self._copies[key]
        info = self.info(key)
        n, inner_shape = info.shape[0], info.shape[1:]
        inner = int(np.prod(inner_shape, dtype=np.int64))
        item = info.dtype.itemsize
        # Column j of the stream is the inner index unravelled in Fortran order; where it sits in a C-ordered row.
        where = np.ravel_multi_index(np.unravel_index(np.arange(inner), inner_shape, order="F"), inner_shape)
        per_pass = max(1, self.convert_bytes // max(inner * item, 1))
        columns = max(1, self.block_bytes // max(n * item, 1))
        fd, name = tempfile.mkstemp(prefix=".fastslow-", suffix=f"-{key}.npy")
        path = Path(name)
        try:
            with os.fdopen(fd, "wb") as out:
                np.lib.format.write_array_header_1_0(out, {"descr": np.lib.format.dtype_to_descr(info.dtype),
                                                          "fortran_order": False, "shape": info.shape})
                for first in range(0, n, per_pass):
                    stop = min(n, first + per_pass)
                    rows = np.empty((stop - first, inner), dtype=info.dtype)
                    fp, _ = self._open_member(key)
                    with fp:
                        for j in range(0, inner, columns):
                            k = min(inner, j + columns)
                            buf = self._read_exact(fp, (k - j) * n * item, key, f"columns {j}..{k - 1}")
                            block = np.frombuffer(buf, dtype=info.dtype).reshape(k - j, n)
                            rows[:, where[j:k]] = block[:, first:stop].T
                    out.write(memoryview(rows).cast("B"))  # no second copy of the rows
        except BaseException:
            path.unlink(missing_ok=True)
            raise
        self._copies[key] = path
        return path

    def _check_range(self, key: str, idx: npt.NDArray[np.int64], n: int) -> None:
        if idx.size and (idx.min() < 0 or idx.max() >= n):
            bad = int(idx[(idx < 0) | (idx >= n)][0])
            raise IndexError(f"{self.path}: {key}: row {bad} out of range for {n} rows")

    def _stream_rows(self, fp: IO[bytes], info: MemberInfo, key: str, wanted: npt.NDArray[np.int64]
                     ) -> Iterator[tuple[int, int, npt.NDArray[Any]]]:
        """One forward pass over a member for ascending ``wanted`` rows (repeats allowed), one decompressed block
        in memory at a time: yields ``(k, j, rows wanted[k:j])``; nothing past the last wanted row is read."""
        n = info.shape[0] if info.shape else 0
        row_bytes = max(info.row_bytes, 1)
        read_rows = max(1, self.block_bytes // row_bytes)
        pos = 0  # next row the stream will yield
        k = 0
        while k < wanted.size:
            first = int(wanted[k])
            if first > pos:
                self._skip(fp, (first - pos) * row_bytes, key)
                pos = first
            stop = min(n, pos + read_rows, int(wanted[-1]) + 1)
            buf = self._read_exact(fp, (stop - pos) * row_bytes, key, f"rows {pos}..{stop - 1}")
            block = np.frombuffer(buf, dtype=info.dtype).reshape(stop - pos, *info.shape[1:])
            j = int(np.searchsorted(wanted, stop, side="left"))
            yield k, j, block[wanted[k:j] - pos]
            k = j
            pos = stop

    def _skip(self, fp: IO[bytes], nbytes: int, key: str) -> None:
        step = max(self.block_bytes, 1)
        while nbytes > 0:
            chunk = self._read_exact(fp, min(step, nbytes), key, "row data")
            nbytes -= len(chunk)

    def iter_blocks(self, key: str, block_rows: int | None = None) -> Iterator[tuple[int, npt.NDArray[Any]]]:
        """Yield ``(first_row, block)`` over a whole member, front to back, one block in memory at a time."""
        fp, info = self._open_rows(key)
        with fp:
            n = info.shape[0] if info.shape else 0
            row_bytes = max(info.row_bytes, 1)
            step = block_rows or max(1, self.block_bytes // row_bytes)
            for start in range(0, n, step):
                stop = min(n, start + step)
                buf = self._read_exact(fp, (stop - start) * row_bytes, key, f"rows {start}..{stop - 1}")
                yield start, np.frombuffer(buf, dtype=info.dtype).reshape(stop - start, *info.shape[1:])

    def iter_rows(self, key: str, rows: npt.ArrayLike,
                  block_rows: int | None = None) -> Iterator[tuple[int, npt.NDArray[Any]]]:
        """Yield ``(position, block)`` of chosen rows, in one pass over the member.

        Args:
            key: member name.
            rows: ascending row indices (repeats not allowed).
            block_rows: chosen rows per yielded block (default: about ``block_bytes`` of data).

        Yields:
            ``(position, block)``: ``block`` holds ``rows[position : position + len(block)]``, a fresh array.
        """
        wanted = np.asarray(rows, dtype=np.int64).reshape(-1)
        if wanted.size > 1 and not (np.diff(wanted) > 0).all():
            raise ValueError(f"{self.path}: {key}: rows must be strictly ascending")
        # One forward pass: reading each block with load_rows would decompress the member's front once per block.
        fp, info = self._open_rows(key)
        with fp:
            self._check_range(key, wanted, info.shape[0] if info.shape else 0)
            step = block_rows or max(1, self.block_bytes // max(info.row_bytes, 1))
            out = np.empty((min(step, wanted.size), *info.shape[1:]), dtype=info.dtype)
            filled = start = 0
            for _, _, values in self._stream_rows(fp, info, key, wanted):
                while values.shape[0]:
                    take = min(values.shape[0], out.shape[0] - filled)
                    out[filled:filled + take] = values[:take]
                    values, filled = values[take:], filled + take
                    if filled == out.shape[0]:
                        yield start, out
                        start += filled
                        out = np.empty((min(step, wanted.size - start), *info.shape[1:]), dtype=info.dtype)
                        filled = 0
