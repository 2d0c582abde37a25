"""Streaming, atomic, deterministic npz input and output.

A real layout file's ``node_config_feat`` decompresses to gigabytes, so neither side ever holds a whole member:

* :func:`write_npz` writes members one after another into a deflate-compressed zip, taking any member as an
  iterator of row blocks (:class:`StreamedArray`), into a temporary file that is renamed into place only when
  complete. Zip timestamps are fixed, so the same arrays give the same bytes.
* :class:`NpzReader` reads a member's ``.npy`` header without touching its data, and reads chosen rows by
  decompressing the member block by block and keeping only the rows asked for.

The files are ordinary ``.npz`` archives: ``numpy.load`` reads them, and these functions read numpy's.

Every file the toolkit writes goes through :func:`atomic_path` (or :func:`temp_sibling` for folders): a temporary
``.<name>.<random>.part`` beside the target, created with the mode the user's umask gives (not ``mkstemp``'s 0600),
locked while its writer lives, renamed into place when complete. What a killed writer leaves behind is removed by
the next writer of the same target (:func:`remove_stale_temps`).
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
import secrets
import shutil
import stat
import tempfile
import time
import zipfile
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, cast

import numpy as np
import numpy.typing as npt

from competition.errors import DataFileError

try:
    import fcntl
except ImportError:  # not on Windows: stale temporary files are then told by age alone
    fcntl = None  # type: ignore[assignment]

_ZIP_DATE = (1980, 1, 1, 0, 0, 0)
# Bytes decompressed per step when streaming rows: bounds the reader's working memory.
DEFAULT_BLOCK_BYTES = 8 * 1024 * 1024
CONVERT_BYTES = 256 * 1024 * 1024
"""Memory for copying a Fortran-ordered member to C order (:meth:`NpzReader.c_ordered_copy`): rows of at most this
many bytes per forward pass over the member."""
TEMP_SUFFIX = ".part"
STALE_UNLOCKED_SECONDS = 24 * 3600
"""Where files cannot be locked (no ``fcntl``, or a file system without ``flock``), the age (since the last
modification) after which a temporary file or folder is taken for one whose writer died."""


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
        check: see :func:`atomic_path`.
        exclusive: see :func:`atomic_path`: only where nothing is at ``path`` once the file is complete.

    Returns:
        The destination path.

    Raises:
        RejectedOutput: ``check`` found a problem.
        FileExistsError: ``exclusive``, and something is at ``path``.
    """
    with atomic_path(path, check=check, exclusive=exclusive) as tmp:
        with open(tmp, "wb") as raw:
            with zipfile.ZipFile(raw, "w", compression=zipfile.ZIP_DEFLATED, allowZip64=True) as zf:
                for key, value in arrays.items():
                    _write_member(zf, key, value, compress_level)
            raw.flush()
            os.fsync(raw.fileno())
    return Path(path)


def _proc_umask() -> int | None:
    """The umask as Linux shows it in ``/proc/self/status`` (kernel 4.7 on); ``None`` where it does not."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    return None


def _umask_by_setting() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


_UMASK_AT_IMPORT = _proc_umask()
if _UMASK_AT_IMPORT is None:
    _UMASK_AT_IMPORT = _umask_by_setting()


def umask() -> int:
    """The process's umask, read without changing it.

    Linux shows it in ``/proc/self/status``, read afresh on each call (a umask set later is honoured). Elsewhere it is
    the value read once at import, by setting and restoring it: ``os.umask`` has no read-only form, and changing it
    while other threads create files would give them the wrong mode.
    """
    mask = _proc_umask()
    return _UMASK_AT_IMPORT if mask is None else mask


def _try_lock(fd: int, *, wait: bool) -> bool | None:
    """Take an exclusive ``flock`` on ``fd``: ``True`` taken, ``False`` held by another open file (only when not
    ``wait``), ``None`` locks unsupported here."""
    if fcntl is None:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
    except BlockingIOError:
        return False
    except OSError:  # ENOLCK, EOPNOTSUPP: a file system without flock
        return None
    return True


def _names_file(path: Path, fd: int) -> bool:
    """Whether ``path`` still names the file or folder open as ``fd``."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    own = os.fstat(fd)
    return (st.st_dev, st.st_ino) == (own.st_dev, own.st_ino)


@contextmanager
def exclusive_lock(lock: Path) -> Iterator[bool]:
    """Hold an exclusive ``flock`` on the file ``lock`` (created if missing) for the ``with`` block; yields ``False``
    where the file system has no ``flock`` (then nothing is held).

    The lock file is removed on release, so none is left behind. A waiter may then hold a lock on the removed file:
    it checks, once it has the lock, that the name still leads to the file it locked, and tries again if not. A
    name too long for the file system (``.<a 250-byte name>.lock``) is shortened, the same way by every locker.
    """
    lock = Path(lock)
    lock = lock.with_name(_fitting(lock.name[: len(lock.name) - len(lock.suffix)], lock.suffix, lock.parent))
    while True:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            taken = _try_lock(fd, wait=True)
        except BaseException:  # interrupted while waiting
            os.close(fd)
            raise
        if taken is None:
            os.close(fd)
            yield False
            return
        if _names_file(lock, fd):
            break
        os.close(fd)
    try:
        yield True
    finally:
        lock.unlink(missing_ok=True)
        os.close(fd)  # releases the lock


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def _remove_if_stale(path: Path) -> bool:
    """Remove ``path``, a temporary file or folder of ours, if no writer holds it; ``True`` if removed.

    The lock is held while removing, so a writer that created the file but has not locked it yet finds it gone and
    makes another (see :func:`temp_sibling`).
    """
    try:
        st = os.lstat(path)
    except OSError:
        return False
    if not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
        return False  # symlinks and devices are never ours
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return False
    try:
        taken = _try_lock(fd, wait=False)
        if taken is False or (taken is None and time.time() - st.st_mtime < STALE_UNLOCKED_SECONDS):
            return False
        if not _names_file(path, fd):
            return False
        _remove(path)
        return not os.path.lexists(path)
    finally:
        os.close(fd)


def remove_stale_temps(folder: str | os.PathLike[str], target: str | None = None) -> list[Path]:
    """Remove the temporary files and folders that killed writers left in ``folder``; live ones are kept.

    Only entries named as :func:`temp_sibling` names them, ``.<target>.<random>.part`` (``<random>``: the 8
    characters ``tempfile`` draws; a target's name shortened
    where it is too long, as :func:`temp_sibling` shortens it), are considered, and of those only the ones no
    process holds: a live writer keeps an exclusive ``flock`` on its temporary for as long as it exists, and the
    kernel drops a process's locks however it ends (SIGKILL included), so a concurrent run's temporary, being
    written, is never removed. Where locks are unavailable, a temporary counts as stale after
    :data:`STALE_UNLOCKED_SECONDS` without modification.

    Args:
        folder: the folder to clean.
        target: the name of the file whose temporaries to remove; ``None``: those of any target.

    Returns:
        The paths removed.
    """
    folder = Path(folder)
    named = re.compile((re.escape(_temp_prefix(target, folder)) if target is not None else r"\..+\.")
                       + f"[a-z0-9_]{{{_TEMP_RANDOM_CHARS}}}" + re.escape(TEMP_SUFFIX), re.DOTALL)
    try:
        with os.scandir(folder) as it:
            names = [e.name for e in it if named.fullmatch(e.name)]
    except OSError:
        return []
    return [folder / n for n in sorted(names) if _remove_if_stale(folder / n)]


_TEMP_RANDOM_CHARS = 8
"""Random characters between a temporary's prefix and suffix (as many as ``tempfile`` draws)."""
_TEMP_CHARS = "abcdefghijklmnopqrstuvwxyz0123456789_"
"""What they are drawn from (``tempfile``'s alphabet: the names stay those of a ``tempfile`` temporary)."""


def _name_max(folder: Path) -> int:
    """The longest file name, in bytes, that ``folder`` takes (255 where the system does not say)."""
    try:
        return int(os.pathconf(folder, "PC_NAME_MAX"))
    except (OSError, ValueError, AttributeError, TypeError):
        return 255


def _fitting(stem: str, end: str, folder: Path, reserve: int = 0) -> str:
    """``stem + end``, or where that and ``reserve`` more bytes would pass ``folder``'s limit on a name's length,
    ``<as much of stem as fits>~<8 hex digits of the hash of stem>`` + ``end``: the same name for the same
    arguments, told apart from the names made for other stems."""
    limit = _name_max(folder) - reserve
    if len(os.fsencode(stem + end)) <= limit:
        return stem + end
    digest = hashlib.sha256(os.fsencode(stem)).hexdigest()[:8]
    keep = stem
    while keep and len(os.fsencode(f"{keep}~{digest}{end}")) > limit:
        keep = keep[:-1]
    return f"{keep}~{digest}{end}"


def _temp_prefix(name: str, folder: Path) -> str:
    """The start of the temporaries' names of ``folder/name``: ``.<name>.``, or where that, the random part and
    :data:`TEMP_SUFFIX` would pass the folder's limit on a name's length (a 250-byte file name), ``.<as much of
    the name as fits>~<8 hex digits of its hash>.``."""
    return _fitting(f".{name}", ".", folder, _TEMP_RANDOM_CHARS + len(TEMP_SUFFIX))


@contextmanager
def temp_sibling(path: str | os.PathLike[str], *, directory: bool = False) -> Iterator[Path]:
    """A new temporary file (or folder) ``.<name>.<random>.part`` beside ``path``, held for the ``with`` block (with
    the name shortened where it would be too long for the file system: :func:`_temp_prefix`).

    The temporaries that killed writers of ``path`` left are removed first (:func:`remove_stale_temps`). The new one
    gets the mode the umask gives an ordinary file (folder), and an exclusive lock that marks it as live until the
    block ends. Write into it in place (open the path; do not put another file under its name): the lock is on this
    file. Whatever is still under its name when the block ends is removed: rename it to keep it.

    Args:
        path: the file or folder the temporary stands in for; its folder is created if missing.
        directory: make a folder instead of a file.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temps(path.parent, path.name)
    mode = (0o777 if directory else 0o666) & ~umask()
    prefix = _temp_prefix(path.name, path.parent)
    made: str | None = None  # assigned as soon as it exists (one assignment: no interrupt can come in between)
    fd: int | None = None
    try:  # from the creation on: an interrupt (Ctrl-C, SIGTERM) anywhere removes what was made
        for _ in range(8):
            # Named before it is made: an interrupt that lands right after the creation (inside a library call
            # that makes and names the file at once, nothing would say which) still finds it here.
            made = os.path.join(path.parent, prefix + "".join(secrets.choice(_TEMP_CHARS)
                                                              for _ in range(_TEMP_RANDOM_CHARS)) + TEMP_SUFFIX)
            try:
                if directory:
                    os.mkdir(made, 0o700)
                    os.chmod(made, mode)
                    fd = os.open(made, os.O_RDONLY)
                else:
                    fd = os.open(made, os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
                    os.fchmod(fd, mode)
            except (FileExistsError, FileNotFoundError):  # the name is taken; or removed as stale before locked
                made = None
                continue
            # A sweeper that locked the new file before us has removed it: start over with another.
            if _try_lock(fd, wait=True) is not False and _names_file(Path(made), fd):
                break
            os.close(fd)
            fd = made = None
        else:
            raise OSError(f"{path.parent}: could not create a temporary file for {path.name}")
        yield Path(made)
    finally:
        try:
            if made is not None and (fd is None or _names_file(Path(made), fd)):
                _remove(Path(made))
        finally:
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:  # closed already, by an interrupted retry
                    pass


class RejectedOutput(ValueError):
    """A new file failed its own checks: it was not put in place, the previous file (if any) is unchanged, and the
    new one is kept beside it for inspection.

    Attributes:
        path: the file that was to be written.
        rejected: where the new file was kept (``<path>.rejected``).
        reason: what its checks found.
        previous: whether ``path`` existed (and was kept unchanged).
    """

    def __init__(self, path: Path, rejected: Path, reason: str, previous: bool) -> None:
        self.path, self.rejected, self.reason, self.previous = Path(path), Path(rejected), reason, previous
        kept = "the previous one is unchanged" if previous else "there was no previous one"
        super().__init__(f"{self.path} was not replaced ({kept}): the new file failed its checks: "
                         f"{' '.join(reason.split())}; it is kept as {self.rejected}")

    def __reduce__(self):  # keeps the error picklable across process pools
        return (type(self), (self.path, self.rejected, self.reason, self.previous))


@contextmanager
def atomic_path(path: str | os.PathLike[str], *, check: Callable[[Path], str | None] | None = None,
                exclusive: bool = False) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on success it is renamed to ``path``, on failure removed.

    Readers therefore see either the old file or the complete new one, never a partial write. The temporary file is
    made by :func:`temp_sibling` (mode from the umask; stale temporaries of ``path`` removed first): write into it in
    place.

    Args:
        path: the destination; its folder is created if missing.
        check: called with the complete temporary file before the rename; a returned reason (``None``: fine) keeps
            the file from replacing ``path``: it is moved to ``<path>.rejected`` instead and :class:`RejectedOutput`
            is raised.
        exclusive: put the file in place only if nothing is there when it is complete (:func:`promote_new`), as
            an exclusive create would: a writer that checked earlier cannot replace what another wrote since.

    Raises:
        RejectedOutput: ``check`` found a problem.
        FileExistsError: ``exclusive``, and something is at ``path``.
    """
    path = Path(path)
    with temp_sibling(path) as tmp:
        yield tmp
        reason = check(tmp) if check is not None else None
        if reason is not None:
            rejected = path.with_name(path.name + ".rejected")
            previous = path.exists()
            os.replace(tmp, rejected)
            raise RejectedOutput(path, rejected, reason, previous)
        if exclusive:
            promote_new(tmp, path)
        else:
            os.replace(tmp, path)


_NO_HARD_LINKS = frozenset(e for e in (getattr(errno, n, None) for n in ("EPERM", "ENOTSUP", "EOPNOTSUPP", "EMLINK",
                                                                      "ENOSYS", "EXDEV")) if e is not None)


def promote_new(tmp: Path, path: Path) -> None:
    """Put the complete file ``tmp`` in place as ``path`` only if nothing is there, in one step: a hard link, which
    the kernel refuses where ``path`` exists (``tmp``'s own name is left for its :func:`temp_sibling` to remove).
    Where the file system has no hard links, the check and the rename are made under a lock on ``path``'s name.

    Raises:
        FileExistsError: something is at ``path``, naming it.
    """
    try:
        os.link(tmp, path)
        return
    except FileExistsError:
        raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), os.fspath(path)) from None
    except OSError as exc:
        if exc.errno not in _NO_HARD_LINKS:
            raise
    with exclusive_lock(path.with_name(f".{path.name}.lock")):
        if os.path.lexists(path):
            raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), os.fspath(path))
        os.replace(tmp, path)


def atomic_write_text(path: str | os.PathLike[str], text: str, *,
                      check: Callable[[Path], str | None] | None = None) -> Path:
    """Write a text file atomically (temporary file in the same folder, then rename); see :func:`atomic_path` for
    ``check``."""
    with atomic_path(path, check=check) as tmp:
        with open(tmp, "w", encoding="utf-8", newline="") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
    return Path(path)


def special_file(path: str | os.PathLike[str]) -> str | None:
    """What ``path`` is when it is neither a regular file nor a folder (``"a named pipe (FIFO)"``, ``"a character
    device"``, ...), found without opening it: opening a FIFO waits for a writer, reading ``/dev/zero`` never
    ends. ``None`` for a regular file or a folder (or a link to one), and for a path that cannot be looked at (its
    user says why when it opens it)."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return None
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return None
    for test, what in ((stat.S_ISFIFO, "a named pipe (FIFO)"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return what
    return "not a regular file"


def output_problem(path: str | os.PathLike[str], kind: str) -> str | None:
    """Why an output ``kind`` (``file`` or ``folder``) cannot be written at ``path``, found before any work is done,
    or ``None``: a device or pipe in its place (an atomic write would put a regular file there), an existing path of
    the other kind, or a receiving folder (the output folder or a file's folder, else its nearest existing ancestor)
    that is a file or cannot be written. Writes can still fail later (a full disk)."""
    path = Path(path)
    special = special_file(path)
    if special is not None:
        return f"expected a {kind}; found {special}"
    if path.exists() and path.is_dir() != (kind == "folder"):
        return f"expected a {kind}; found a {'folder' if path.is_dir() else 'file'}"
    into = path if kind == "folder" else path.parent
    existing = next(p for p in (into.absolute(), *into.absolute().parents) if p.exists())
    if not existing.is_dir():
        return f"{existing} is a file, not a folder"
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"cannot write into {existing} (permission denied): change its permissions, or choose another path"
    return None


def first_free(candidates: Iterable[Path]) -> Path:
    """The first of ``candidates`` that names nothing yet (where a file is kept aside without replacing another).

    Raises:
        OSError: every candidate is taken.
    """
    for path in candidates:
        if not os.path.lexists(path):
            return path
    raise OSError("no free name to keep a file under")


@contextmanager
def failures_named(path: str | os.PathLike[str]) -> Iterator[None]:
    """Name ``path`` in an :class:`OSError` of the ``with`` block that names no file.

    A failed ``write``, ``flush``, ``fsync`` or ``close`` (a full disk, a quota, an I/O error) raises an error with
    an errno but no file name; this one says which file could not be written. Errors that name a file already, and
    those without an errno, pass unchanged.
    """
    try:
        yield
    except OSError as exc:
        if exc.filename is not None or exc.errno is None:
            raise
        raise OSError(exc.errno, exc.strerror or os.strerror(exc.errno), os.fspath(path)) from exc


class _Recorder:
    """A binary file's ``write`` and ``flush`` that keep the first exception they raise.

    A serializer that reports a failed write as an error of its own loses the cause: ``torch.save`` into a file
    object turns the ``OSError`` of a full disk into ``RuntimeError: ... unexpected pos``, and goes on writing
    after an interrupt raised inside ``write``.
    """

    def __init__(self, raw: IO[bytes]) -> None:
        self._raw = raw
        self.error: BaseException | None = None

    def _recorded(self, call: Callable[[], Any]) -> Any:
        try:
            return call()
        except BaseException as exc:
            if self.error is None:
                self.error = exc
            raise

    def write(self, data: Any) -> int:
        return self._recorded(lambda: self._raw.write(data))

    def flush(self) -> None:
        self._recorded(self._raw.flush)

    def writable(self) -> bool:
        return True


def atomic_write_stream(path: str | os.PathLike[str], write: Callable[[IO[bytes]], object], *, fsync: bool = True,
                        check: Callable[[Path], str | None] | None = None) -> Path:
    """Write a file atomically through ``write``, a function that writes into the binary file object it is given
    (``lambda f: torch.save(obj, f)``); see :func:`atomic_path` for ``check``.

    The bytes go through this module's own file object, so a failure of the file itself (a full disk, a quota, an
    I/O error) raises an :class:`OSError` with its errno that names ``path``, even where ``write`` reported it as an
    error of its own (``torch.save`` to a path raises ``RuntimeError: PytorchStreamWriter failed writing file`` or
    ``unexpected pos``, which says neither what failed nor where). An interrupt raised while ``write`` wrote is
    raised as such. Nothing replaces ``path`` unless ``write`` completed.

    Args:
        path: the destination; its folder is created if missing.
        write: writes the whole content into the file object it is given (``write`` and ``flush`` only).
        fsync: flush the file to the disk before the rename (leave it out for files that can be rebuilt).
        check: see :func:`atomic_path`.

    Returns:
        The destination path.
    """
    path = Path(path)
    with failures_named(path), atomic_path(path, check=check) as tmp:
        with open(tmp, "wb") as raw:
            out = _Recorder(raw)
            try:
                write(cast(IO[bytes], out))
            except BaseException:
                if out.error is not None:
                    raise out.error from None
                raise
            if out.error is not None:  # swallowed by ``write``, which went on: the file is not complete
                raise out.error
            raw.flush()
            if fsync:
                os.fsync(raw.fileno())
    return path


@dataclass(frozen=True)
class MemberInfo:
    """A member's ``.npy`` header: what the array is, read without decompressing its data."""

    key: str
    shape: tuple[int, ...]
    dtype: np.dtype
    fortran_order: bool

    @property
    def row_bytes(self) -> int:
        return int(np.prod(self.shape[1:], dtype=np.int64)) * self.dtype.itemsize

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize


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
        return [n[: -len(".npy")] if n.endswith(".npy") else n for n in self.zip.namelist()]

    def _member_name(self, key: str) -> str:
        names = self.zip.namelist()
        for name in (f"{key}.npy", key):
            if name in names:
                return name
        raise DataFileError(self.path, key, f"member {key!r}", f"missing (members: {', '.join(self.keys())})")

    def _open_member(self, key: str) -> tuple[IO[bytes], MemberInfo]:
        fp = self.zip.open(self._member_name(key))
        try:
            version = np.lib.format.read_magic(fp)
            if version == (1, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_1_0(fp, max_header_size=1 << 20)
            else:
                shape, fortran, dtype = np.lib.format.read_array_header_2_0(fp, max_header_size=1 << 20)
        except (ValueError, EOFError, zlib.error, zipfile.BadZipFile, OSError) as exc:
            fp.close()
            raise DataFileError(self.path, key, "a .npy header", f"unreadable header ({exc})") from None
        if dtype.hasobject:
            fp.close()
            raise DataFileError(self.path, key, "a numeric array", "an object array (refused: unsafe to load)")
        info = MemberInfo(key, tuple(int(s) for s in shape), np.dtype(dtype), bool(fortran))
        self._infos[key] = info
        return fp, info

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
        """The whole member as an array (for members that fit in memory)."""
        fp, info = self._open_member(key)
        with fp:
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
