"""Worker processes that end with the process that started them.

A process pool's workers outlive a parent killed by SIGKILL (no clean-up runs), and go on writing files nobody
waits for. :func:`end_with_parent` is a pool initializer that prevents it; :func:`pool_context` gives the start
method under which the pool's creator really is the workers' parent, and :func:`end_with_process` does the same for
workers forked by a fork server (whose parent is the server). :func:`usable_cores` counts the cores workers
may share, and :func:`child_environment` sets what the processes started meanwhile inherit.
"""

from __future__ import annotations

import contextlib
import ctypes
import multiprocessing
import multiprocessing.context
import os
import select
import signal
import sys
import threading
import time
from collections.abc import Iterator

_PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>


def _parent_death_signal() -> bool:
    """Ask Linux to SIGKILL this process when its parent ends; ``False`` where that cannot be asked."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        return ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _watch_parent(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(1.0)
    os._exit(1)


def end_with_parent(parent: int) -> None:
    """Pool initializer (``initargs=(os.getpid(),)``): end this worker when ``parent`` ends, however it ends.

    On Linux the kernel sends the worker SIGKILL (``prctl(PR_SET_PDEATHSIG)``); elsewhere a daemon thread polls
    ``os.getppid()``. A parent that died before this ran is seen by its pid: the worker has already been handed to
    another parent.
    """
    if not _parent_death_signal():
        threading.Thread(target=_watch_parent, args=(parent,), name="end-with-parent", daemon=True).start()
    if os.getppid() != parent:
        os._exit(1)


def _wait_for_end(pid: int, handle: int | None) -> None:
    if handle is not None:
        select.select([handle], [], [])  # readable once the process has ended
    else:
        while True:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            except PermissionError:
                pass  # it exists, run by another user
            time.sleep(1.0)
    os._exit(1)


def end_with_process(pid: int) -> None:
    """End this process when process ``pid`` ends, whether or not it is this process's parent (a pool initializer,
    ``initargs=(os.getpid(),)``, for workers forked by a fork server, whose parent is the server).

    A daemon thread waits on a pidfd of ``pid`` where the platform has them (Linux 5.3 and later), else polls it every
    second. ``pid`` already gone when this runs ends this process now.
    """
    try:
        handle: int | None = os.pidfd_open(pid)
    except ProcessLookupError:
        os._exit(1)
    except (AttributeError, OSError):  # no pidfds here: the thread polls, the first time at once
        handle = None
    threading.Thread(target=_wait_for_end, args=(pid, handle), name="end-with-process", daemon=True).start()


def pool_context() -> multiprocessing.context.BaseContext:
    """Fork on Linux, spawn elsewhere: both make the pool's creator the workers' parent (a fork server would be
    their parent instead, and :func:`end_with_parent` watches the parent). Forked workers also inherit the
    imported modules (torch, PyG) where spawned ones spend seconds importing them again."""
    return multiprocessing.get_context("fork" if sys.platform.startswith("linux") else "spawn")


def usable_cores() -> int:
    """CPU cores this process may run on (its affinity mask where the platform has one)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


@contextlib.contextmanager
def child_environment(**values: str) -> Iterator[None]:
    """Environment variables set for the duration, for the processes started meanwhile (thread counts, progress
    settings), then restored as they were."""
    before = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
