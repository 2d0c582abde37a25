"""One live run per run folder: a second run that would write the same checkpoints and model is refused.

A run holds an exclusive, non-blocking ``flock`` on ``.<folder name>.run.lock`` beside the folder (not in it: a
run folder's files are moved aside as a whole when its settings change) for as long as it writes there, and writes into that file who it is (process id, host, command line, start time), so that a refused run can
name the one in its way. The kernel drops the lock however the holder ends (SIGKILL included): a folder whose run
was killed is free at once, with nothing to clean. The lock file itself stays (removing it would let two runs lock
two different files of one name). A process may take the same folder again while it holds it (the command line
holds a collection's folder, then the model's fit asks for it too).
"""

from __future__ import annotations

import os
import socket
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

try:
    import fcntl
except ImportError:  # pragma: no cover - not on Linux
    fcntl = None  # type: ignore[assignment]

def lock_path(folder: Path) -> Path:
    """The lock file of run folder ``folder``: ``.<name>.run.lock`` beside it."""
    return folder.parent / f".{folder.name}.run.lock"


_held: dict[Path, int] = {}
"""The folders this process holds, with how many times it took each."""


class FolderBusy(ValueError):
    """Another live run holds the run folder."""


def _who() -> str:
    command = " ".join(os.path.basename(a) if i == 0 else a for i, a in enumerate(sys.argv))
    return (f"process {os.getpid()} on {socket.gethostname()}, started "
            f"{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime())}: {command[:300]}")


@contextmanager
def hold_run_folder(folder: str | os.PathLike[str], *, hint: str = "choose another --runs-dir") -> Iterator[Path]:
    """Hold ``folder`` (created if missing) for this run until the block ends.

    Args:
        folder: the run folder.
        hint: what the refusal suggests besides waiting.

    Raises:
        FolderBusy: another live process holds it, naming the folder and that run.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    key = folder.resolve()
    if key in _held:
        _held[key] += 1
        try:
            yield folder
        finally:
            _held[key] -= 1
        return
    lock = lock_path(folder)
    fd = os.open(lock, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o666)
    try:
        if fcntl is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                other = os.pread(fd, 1000, 0).decode("utf-8", "replace").strip() or "another process"
                raise FolderBusy(f"{folder}: in use by another run ({other}); wait for it to end, or {hint}") \
                    from None
            except OSError:  # a file system without flock: nothing to hold
                pass
        os.ftruncate(fd, 0)
        os.pwrite(fd, (_who() + "\n").encode("utf-8", "replace"), 0)
        _held[key] = 1
        try:
            yield folder
        finally:
            del _held[key]
    finally:
        os.close(fd)
