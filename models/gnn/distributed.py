"""Data-parallel GNN training and prediction over several processes with ``torch.distributed``, as ``torchrun``
launches them: one process (a *rank*) per GPU, or several on the CPU, on one machine or several.

``torchrun --nproc-per-node N -m fastslow train ...`` (or ``fastslow train --nproc N ...``, which runs torchrun
through :func:`launch`) starts N copies of the command. Each finds ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
``MASTER_ADDR`` and ``MASTER_PORT`` in its environment and joins the process group with :func:`init`: ``nccl`` when
it trains on CUDA (one GPU per local rank), ``gloo`` on the CPU. What the ranks then do together:

- training (:func:`models.gnn.train.train`): every rank holds every graph; the ``graphs_per_step`` graphs of each
  optimiser step are dealt out (the step's graph ``j`` to rank ``j % world``) and ``DistributedDataParallel``
  (:func:`wrap`) all-reduces the gradients; rank 0 alone reads and writes the run folder and sends the checkpoint
  to the others (:func:`broadcast`);
- scoring (:func:`shard`, :func:`gather`, :func:`gather_to_main`): the graphs of a split are dealt out the same way
  and the scores gathered;
- the processed-graph cache (:func:`build_once`): built by rank 0 while the others wait, then read by all.

Outside a launch every helper is the one-process case: rank 0 of 1, :func:`shard` keeps everything,
:func:`gather` returns ``[obj]``, and no collective runs.

When a rank dies, the others' next collective fails (gloo notices the closed connection at once; a rank that hangs
is given up after the process group's timeout); :func:`collectives` turns that into one line
(:class:`RankLostError`), and torchrun stops whatever is left of the launch. Training checkpoints every epoch, so
the same command resumes.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import signal
from collections.abc import Callable, Iterator, Sequence
from datetime import timedelta
from typing import Any, TypeVar

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

# Read without torch (models.gnn.launch_env), so that a command that trains no GNN checks its launch without it.
from models.gnn.launch_env import DistributedSetupError, launched_world
from models.gnn.launch_env import env_int as _env_int

T = TypeVar("T")

BACKENDS = ("auto", "gloo", "nccl")
"""``auto``: ``nccl`` when training on CUDA, else ``gloo``."""
DEFAULT_TIMEOUT = 1800.0
"""Seconds a rank waits for the others at a collective (gradients, scores) before giving up; torch's own default."""
BUILD_TIMEOUT = timedelta(days=1)
"""How long the other ranks wait for rank 0 to build the processed-graph cache (hours on the real data)."""
LAUNCH_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
"""What torchrun sets for each process it starts."""

_wait_group: Any = None  # a gloo group with BUILD_TIMEOUT, for waiting on rank 0's cache build


class RankLostError(ConnectionError):
    """Another rank of the launch stopped (died, or stopped answering within the timeout): this one stops too."""


class LaunchError(ConnectionError):
    """A process started by :func:`launch` failed; ``exit_code`` is its exit code (the first to fail)."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


# -- who am I -------------------------------------------------------------------------------------------------------


def active() -> bool:
    """Whether this process is one rank of several (the process group is joined)."""
    return dist.is_available() and dist.is_initialized()


def rank() -> int:
    """This process's rank, 0 to :func:`world_size` - 1 (0 outside a launch)."""
    return dist.get_rank() if active() else 0


def world_size() -> int:
    """The number of ranks (1 outside a launch)."""
    return dist.get_world_size() if active() else 1


def local_rank() -> int:
    """This process's rank on its machine (its GPU's index); 0 outside a launch."""
    return _env_int("LOCAL_RANK", 0, minimum=0) if active() else 0


def is_main() -> bool:
    """Whether this process is rank 0, the one that writes files and prints."""
    return rank() == 0


# -- joining and leaving ------------------------------------------------------------------------------------------


def choose_backend(backend: str, device: torch.device) -> str:
    """The process-group backend for ``backend`` (one of :data:`BACKENDS`) when training on ``device``.

    Raises:
        DistributedSetupError: an unknown name, or a backend this machine or torch build lacks.
    """
    if backend not in BACKENDS:
        raise DistributedSetupError(f"backend {backend!r}: expected one of {', '.join(BACKENDS)}")
    name = ("nccl" if device.type == "cuda" else "gloo") if backend == "auto" else backend
    if name == "nccl" and not (dist.is_nccl_available() and device.type == "cuda"):
        why = (f"this torch ({torch.__version__}) is built without NCCL" if not dist.is_nccl_available()
               else f"training runs on {device.type}, and nccl needs CUDA")
        raise DistributedSetupError(f"backend nccl is not available: {why}; use --backend gloo, or auto (nccl on "
                                    "GPUs, gloo on the CPU)")
    if name == "gloo" and not dist.is_gloo_available():
        raise DistributedSetupError(f"backend gloo is not available: this torch ({torch.__version__}) is built "
                                    "without it; use --backend nccl on GPUs")
    return name


def init(device: torch.device, *, backend: str = "auto", timeout: float = DEFAULT_TIMEOUT) -> torch.device:
    """Join the process group of a torchrun launch (nothing outside one, or when already joined).

    Args:
        device: where training runs (``cuda`` becomes this rank's GPU, ``cuda:LOCAL_RANK``).
        backend: one of :data:`BACKENDS`.
        timeout: seconds a collective waits for the other ranks.

    Returns:
        This rank's device.

    Raises:
        DistributedSetupError: the backend is not available, this machine has fewer GPUs than local ranks, the
            environment is incomplete, or the rendezvous failed.
    """
    global _wait_group
    world = launched_world()
    if world <= 1 or active():
        return device
    missing = [name for name in LAUNCH_ENV if not os.environ.get(name)]
    if missing:
        raise DistributedSetupError(f"WORLD_SIZE={world} but ${', $'.join(missing)} unset: launch with torchrun "
                                    "(or fastslow train --nproc N), which sets them all")
    me, local = _env_int("RANK", 0, minimum=0), _env_int("LOCAL_RANK", 0, minimum=0)
    if device.type == "cuda":
        count = torch.cuda.device_count()
        if local >= count:
            raise DistributedSetupError(f"local rank {local} has no GPU of its own: this machine has {count}; "
                                        f"launch at most {count} processes per machine (--nproc-per-node {count})")
        device = torch.device("cuda", local)
        torch.cuda.set_device(device)
    name = choose_backend(backend, device)
    if timeout <= 0:
        raise DistributedSetupError(f"timeout {timeout}: expected a positive number of seconds")
    where = f"{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}"
    try:
        dist.init_process_group(name, timeout=timedelta(seconds=timeout),
                                device_id=device if name == "nccl" else None)
        _wait_group = dist.new_group(backend="gloo", timeout=BUILD_TIMEOUT) if dist.is_gloo_available() else None
    except (RuntimeError, ValueError) as exc:
        raise DistributedSetupError(f"rank {me} of {world} could not join the others at {where} ({_reason(exc)}): "
                                    "check that every machine reaches that address and port") from exc
    return device


def teardown() -> None:
    """Leave the process group (nothing when not in one)."""
    global _wait_group
    if active():
        dist.destroy_process_group()
    _wait_group = None


@contextlib.contextmanager
def process_group(device: torch.device, *, backend: str = "auto",
                  timeout: float = DEFAULT_TIMEOUT) -> Iterator[torch.device]:
    """:func:`init` on entry (yielding this rank's device), :func:`teardown` on exit."""
    joined = not active()
    out = init(device, backend=backend, timeout=timeout)
    try:
        yield out
    finally:
        if joined:
            teardown()


# -- working together -----------------------------------------------------------------------------------------


def shard(items: Sequence[T]) -> list[T]:
    """This rank's share of ``items``: every :func:`world_size`-th one from its :func:`rank` (all of them outside a
    launch)."""
    return list(items[rank()::world_size()])


def gather(obj: T) -> list[T]:
    """``obj`` of every rank, by rank, on every rank (``[obj]`` outside a launch). ``obj`` must pickle."""
    if not active():
        return [obj]
    out: list[Any] = [None] * world_size()
    dist.all_gather_object(out, obj)
    return out


def gather_to_main(obj: T) -> list[T] | None:
    """``obj`` of every rank, by rank, on rank 0; ``None`` on the others."""
    if not active():
        return [obj]
    out: list[Any] | None = [None] * world_size() if is_main() else None
    dist.gather_object(obj, out, dst=0)
    return out


def broadcast(obj: T) -> T:
    """Rank 0's ``obj`` on every rank (the others' ``obj`` is ignored)."""
    if not active():
        return obj
    box = [obj if is_main() else None]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def any_rank(flag: bool) -> bool:
    """Whether ``flag`` is true on at least one rank (so that every rank takes the same branch)."""
    if not active():
        return flag
    on = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else torch.device("cpu")
    value = torch.tensor([int(flag)], device=on)
    dist.all_reduce(value, op=dist.ReduceOp.MAX)
    return bool(value.item())


def wrap(module: nn.Module, *, partial: bool = False) -> nn.Module:
    """``module`` in ``DistributedDataParallel`` inside a launch, as it is outside one.

    Args:
        partial: some forwards may leave parameters out (GST: a segment without configurable nodes leaves the
            config embedding out). A gradient one rank lacks then counts as zero in the average, and one that every
            rank lacks stays ``None``, as in one process. It costs a walk over the autograd graph per forward.
    """
    if not active():
        return module
    return DistributedDataParallel(module, find_unused_parameters=partial)


def build_once(build: Callable[[], T], read: Callable[[], T], ready: Callable[[], bool]) -> T:
    """Build something on disk once (the processed-graph cache), never by two processes at once.

    Rank 0 runs ``build`` while the others wait; then, on each other machine whose disk does not show rank 0's
    result (``ready()`` is false: the cache folder is not shared), its local rank 0 runs ``build`` while the rest
    wait; then every other rank runs ``read``.

    Returns:
        What ``build`` returned on the ranks that ran it, what ``read`` returned on the others.
    """
    if not active():
        return build()
    built = is_main()
    out = build() if built else None
    _wait_for_builders()
    if not built and local_rank() == 0 and not ready():
        built, out = True, build()
    _wait_for_builders()
    return out if built else read()  # type: ignore[return-value]


def _wait_for_builders() -> None:
    if _wait_group is not None:
        dist.barrier(group=_wait_group)
    else:
        dist.barrier()


# -- failures -----------------------------------------------------------------------------------------------------

_LOST = ("connection closed", "connection reset", "broken pipe", "timed out", "timeout", "gloo/", "nccl")


def _reason(exc: BaseException) -> str:
    """The first line of a torch.distributed error without gloo's ``[file:line]`` prefix or its advice."""
    lines = str(exc).strip().splitlines() or [type(exc).__name__]
    text = re.sub(r"^\[[^\]]*\]\s*", "", lines[0])
    return text.split(". ")[0].rstrip(".")


@contextlib.contextmanager
def collectives(what: str) -> Iterator[None]:
    """Turn the failure of a collective inside the block (another rank died or hung) into
    :class:`RankLostError`, naming this rank and ``what`` it was doing; other errors pass unchanged.

    Raises:
        RankLostError: with advice to re-run the same command, which resumes from the last checkpoint.
    """
    try:
        yield
    except RuntimeError as exc:  # torch.distributed.DistError is one, and gloo raises plain RuntimeErrors
        text = str(exc).lower()
        if not active() or not (isinstance(exc, dist.DistError) or any(m in text for m in _LOST)):
            raise
        raise RankLostError(f"rank {rank()} of {world_size()} lost the other ranks during {what} ({_reason(exc)}); "
                            "it stops too. Re-run the same command: training resumes from the last checkpoint"
                            ) from exc


# -- launching ----------------------------------------------------------------------------------------------------


def launch(nproc: int, module: str, argv: Sequence[str], *, verbose: bool = False) -> None:
    """Run ``python -m MODULE ARGV`` (the caller's entry point) as ``nproc`` ranks on this machine through torchrun
    (``torch.distributed.run`` with a standalone rendezvous on a free port) and wait for them.

    Each rank gets ``OMP_NUM_THREADS`` = cores / ``nproc`` unless it is set. torchrun's own log lines are shown
    with ``verbose`` only.

    Raises:
        LaunchError: a rank failed (torchrun then stopped the others); its own error is printed above.
        KeyboardInterrupt: interrupted (the ranks are stopped).
    """
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import get_args_parser, run

    if nproc < 1:
        raise DistributedSetupError(f"--nproc {nproc}: expected 1 or more processes")
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // nproc)))
    config = get_args_parser().parse_args(["--standalone", f"--nproc-per-node={nproc}", "--module", module,
                                           *argv])
    # torchrun's loggers each have their own level: quiet them one by one (the ranks' own output is untouched).
    quiet = [logging.getLogger(name) for name in list(logging.root.manager.loggerDict)
             if name.startswith("torch.distributed")] if not verbose else []
    levels = [q.level for q in quiet]
    for q in quiet:
        q.setLevel(logging.CRITICAL)
    try:
        run(config)
    except ChildFailedError as exc:
        failed, failure = exc.get_first_failure()
        code = failure.exitcode
        if code >= 0:
            how = f"stopped with exit code {code} (its error is above)"
        else:
            how = f"was killed ({signal.Signals(-code).name})" if -code in signal.valid_signals() else "was killed"
        raise LaunchError(f"rank {failed} of {nproc} {how}, and torchrun stopped the others; re-run the same "
                          "command: training resumes from the last checkpoint", code if code > 0 else 2) from None
    except SignalException as exc:
        raise KeyboardInterrupt from exc
    finally:
        for q, level in zip(quiet, levels, strict=True):
            q.setLevel(level)
