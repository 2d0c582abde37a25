"""Atomic file writes: every file the toolkit writes appears whole, or not at all.

Every file the toolkit writes goes through :func:`atomic_path` (or :func:`temp_sibling` for folders): a temporary
``.<name>.<random>.part`` beside the target, created with the mode the user's umask gives (not ``mkstemp``'s 0600),
locked while its writer lives, renamed into place when complete. What a killed writer leaves behind is removed by
the next writer of the same target (:func:`remove_stale_temps`).

Around the writes: :func:`output_problem` says, before any work is done, why an output cannot be written where it
is asked for; :func:`special_file` tells a device or a pipe from a file without opening it; :func:`failures_named`
makes a failed write name its file; :func:`exclusive_lock` serialises the writers of one file.
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
import secrets
import shutil
import stat
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, cast

try:
    import fcntl
except ImportError:  # not on Windows: stale temporary files are then told by age alone
    fcntl = None  # type: ignore[assignment]

TEMP_SUFFIX = ".part"
STALE_UNLOCKED_SECONDS = 24 * 3600
"""Where files cannot be locked (no ``fcntl``, or a file system without ``flock``), the age (since the last
modification) after which a temporary file or folder is taken for one whose writer died."""


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
