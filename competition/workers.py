"""Worker processes that end with the process that started them.

A process pool's workers outlive a parent killed by SIGKILL (no clean-up runs), and go on writing files nobody
waits for. :func:`end_with_parent` is a pool initializer that prevents it; :func:`pool_context` gives the start
method under which the pool's creator really is the workers' parent, and :func:`end_with_process` does the same for
workers forked by a fork server (whose parent is the server). :func:`usable_cores` counts the cores workers
may share, :func:`worker_count` caps a worker count by them and by the work, and
:func:`child_environment` sets what the processes started meanwhile inherit.

Ctrl-C reaches every process of the terminal's process group at once, a pool's workers and a fork server among
them. Where the parent stops its pool itself, they are kept out of it: the parent starts the pool's processes
within :func:`interrupts_held` (they begin with the stop signals blocked, and an interrupt never cuts a start
short), each worker runs :func:`stop_by_parent` and its job within :func:`stoppable_job`, and the parent ends them
with :func:`stop_pool`: one line and exit 130 from the parent, no worker's traceback or warning.
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
import typing
from collections.abc import Iterator
from concurrent.futures import Executor

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


MAX_AUTO_JOBS = 4
"""The most collections :func:`default_jobs` lets the pipeline fit at once (a Kaggle CPU notebook's 4 cores): each
concurrent fit holds its own train graphs, several GiB for the xla:random seed ensemble at the real counts
(RESULTS.md, "Real size")."""


def default_jobs() -> int:
    """How many collections the pipeline fits at once by default: one per usable core, at most
    :data:`MAX_AUTO_JOBS`. One fit per core with a thread each beats one fit on every core: a fit's small sparse
    operations use a second thread poorly, so fits side by side on a thread each finish sooner than one at a time
    on every thread (lab/journal.md, "The two commands")."""
    return min(usable_cores(), MAX_AUTO_JOBS)


WORKERS_RULE = "at most one per usable core and one per job"
"""How :func:`worker_count` caps a worker count, as the options' help says it."""


def worker_count(requested: int | None, work: int) -> int:
    """The processes to start for ``work`` independent jobs: ``requested`` (``None``: one per usable core), at most
    one per job and one per usable core, at least 1. The one rule of every worker or jobs option (``data synth
    --workers``, ``submit --jobs``, the processed-graph cache's workers): a process beyond the jobs would wait
    idle, and processes beyond the cores only share them, each with its own imports and heap, so that a huge count
    would fork until the machine stops answering."""
    cores = usable_cores()
    return max(1, min(cores if requested is None else requested, work, cores))


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


STOP_GRACE_SECONDS = 30.0
"""How long :func:`stop_pool` waits for the workers it asked to stop before it kills them."""
STOPPED_EXIT = 128 + int(signal.SIGTERM)
"""The exit status of a worker stopped outside its job."""
_in_job = False


def _signals(*names: str) -> list[int]:
    """The signals of ``names`` this platform has (no SIGHUP on Windows)."""
    return [getattr(signal, n) for n in names if hasattr(signal, n)]


_HELD = ("SIGINT", "SIGTERM", "SIGHUP")
_STOPPING = ("SIGTERM", "SIGHUP")


def _ignore(signum: int, frame: object) -> None:
    """A handler that does nothing: unlike ``SIG_IGN``, a signal that came just before it was set is taken quietly
    (CPython prints a traceback, "Signal N ignored due to race condition", for one found ignored)."""


@contextlib.contextmanager
def interrupts_held() -> Iterator[None]:
    """Ctrl-C (SIGINT) and the other stop signals this process handles (SIGTERM, SIGHUP) held back for the
    duration, then taken as they would have been (their handlers run then: a :class:`KeyboardInterrupt` is raised
    after the block). The processes started meanwhile begin with those signals blocked: a fork server, every worker
    it forks after (:func:`stop_by_parent` unblocks what a worker takes), and the resource tracker. Ctrl-C at a
    terminal, or a closed terminal's SIGHUP, sent to the whole process group, then reaches only the parent, which
    stops them.

    Around a pool's start: an interrupt neither kills a fork server in its imports (the parent's ``EOFError``) nor
    leaves a worker started that the pool does not know of. Outside the main thread, where no signal handler runs,
    it holds nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    seen: list[int] = []

    def hold(signum: int, frame: object) -> None:
        seen.append(signum)

    previous = {signum: signal.signal(signum, hold) for signum in _signals(*_HELD)
                if callable(signal.getsignal(signum))}
    blocking = hasattr(signal, "pthread_sigmask")
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, _signals(*_HELD)) if blocking else set()
    try:
        yield
    finally:
        if blocking:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)  # one that came meanwhile is taken by ``hold`` here
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        if seen:
            previous[seen[0]](seen[0], None)


def stop_by_parent() -> None:
    """Pool initializer part: the worker takes no Ctrl-C (its parent stops it: :func:`stop_pool`), and SIGTERM or
    SIGHUP stop it: inside :func:`stoppable_job` as Ctrl-C would (its own pools' processes ended, a
    :class:`KeyboardInterrupt` raised in the job, which removes its temporaries as it unwinds), else at once.
    Processes it forks (its own pools' workers) take those signals at their defaults."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    for signum in _signals(*_STOPPING):
        signal.signal(signum, _stop_job)
    if hasattr(signal, "pthread_sigmask"):  # blocked where the worker was started within interrupts_held
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _signals(*_STOPPING))
    if hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=_default_stop_signals)


def _default_stop_signals() -> None:
    global _in_job
    _in_job = False
    for signum in _signals(*_STOPPING):
        signal.signal(signum, signal.SIG_DFL)


def _stop_job(signum: int, frame: object) -> None:
    for other in _signals(*_STOPPING):  # once: a second signal does not cut the unwinding short
        signal.signal(other, _ignore)
    if not _in_job:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(STOPPED_EXIT)
    for child in multiprocessing.active_children():  # its own pools' workers, which take no Ctrl-C either
        with contextlib.suppress(OSError):
            child.terminate()
    raise KeyboardInterrupt


@contextlib.contextmanager
def stoppable_job() -> Iterator[None]:
    """The job of a worker that :func:`stop_by_parent` set up: SIGTERM or SIGHUP raise :class:`KeyboardInterrupt`
    in it. The pool hands that to the parent as the job's exception (no traceback is printed), and the worker ends
    as after any job (its exit handlers run: no semaphore of its is left for the resource tracker to warn of)."""
    global _in_job
    _in_job = True
    try:
        yield
    finally:
        _in_job = False


def stop_pool(pool: Executor, grace: float = STOP_GRACE_SECONDS) -> None:
    """End a :class:`~concurrent.futures.ProcessPoolExecutor` now, and return once every process of it has ended.

    The pool shuts down, its queued jobs cancelled, while each of its processes gets SIGTERM (a worker that
    :func:`stop_by_parent` set up unwinds its job as on Ctrl-C), and SIGKILL when still running after ``grace``
    seconds; a worker the pool starts meanwhile (replacing one that ended) is stopped too. Signals are held
    meanwhile (:func:`interrupts_held`): a second Ctrl-C does not cut the stop short. The pool's table of processes
    is kept until its manager thread has ended (``shutdown(wait=False)`` drops it at once, and a worker ending then
    made the manager thread fail with a ``TypeError``).
    """
    with interrupts_held():
        processes: dict[int, typing.Any] = getattr(pool, "_processes", None) or {}
        shutdown = threading.Thread(target=pool.shutdown, kwargs={"wait": True, "cancel_futures": True},
                                    name="stop-pool", daemon=True)
        shutdown.start()
        stopped: set[int] = set()
        end = time.monotonic() + grace
        while shutdown.is_alive():
            late = time.monotonic() > end
            for process in list(processes.values()):  # the dict the pool's manager thread keeps current
                if process.is_alive() and (late or process.pid not in stopped):
                    with contextlib.suppress(OSError):
                        if late:
                            process.kill()
                        else:
                            process.terminate()
                    stopped.add(process.pid)
            shutdown.join(0.05)
