"""Worker processes that end with the process that started them.

A process pool's workers outlive a parent killed by SIGKILL (no clean-up runs), and go on writing files nobody
waits for. :func:`end_with_parent` is a pool initializer that prevents it; :func:`pool_context` gives the start
method under which the pool's creator really is the workers' parent. :func:`usable_cores` counts the cores workers
may share, and :func:`child_environment` sets what the processes started meanwhile inherit.
"""

from __future__ import annotations

import contextlib
import ctypes
import multiprocessing
import multiprocessing.context
import os
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
