"""What the benchmarks share: running one measurement in a fresh process (with the torch threads of ``--threads``),
its scratch folder, peak and current resident memory, and what the GNN benchmarks share."""

from __future__ import annotations

import contextlib
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

THREADS_ENV = "FASTSLOW_BENCH_THREADS"
"""The torch threads of every part a benchmark runs: set from its ``--threads``, read in each part's process by
:func:`part_threads`."""
BENCH_CACHE = "/tmp/gnn-bench-cache"
"""The processed-graph cache of the GNN benchmarks' fits (:mod:`benchmarks.gnn`, :mod:`benchmarks.gnn_scale`)."""


def peak_mib(who: int = resource.RUSAGE_SELF) -> float:
    """Peak resident memory in MiB of this process (or of its finished children, with ``RUSAGE_CHILDREN``)."""
    return resource.getrusage(who).ru_maxrss / 1024.0


def rss_mib() -> float:
    """Current resident memory of this process in MiB."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def part_threads() -> None:
    """In a part's process: torch's threads from :data:`THREADS_ENV`, where the benchmark's ``--threads`` set it."""
    if os.environ.get(THREADS_ENV):
        import torch

        torch.set_num_threads(int(os.environ[THREADS_ENV]))


@contextlib.contextmanager
def scratch(workdir: str | None, prefix: str) -> Iterator[Path]:
    """The folder ``workdir``, kept afterwards; or, without one, a temporary folder removed afterwards."""
    work = Path(workdir or tempfile.mkdtemp(prefix=prefix))
    work.mkdir(parents=True, exist_ok=True)
    try:
        yield work
    finally:
        if not workdir:
            shutil.rmtree(work, ignore_errors=True)


def print_total(t0: float) -> None:
    """A benchmark's last line: its seconds since ``t0`` (``time.perf_counter``) and its parts' largest peak."""
    print(f"\ntotal {time.perf_counter() - t0:.0f} s; peak of the parts: "
          f"{peak_mib(resource.RUSAGE_CHILDREN):.0f} MiB")


def use_plain_forward() -> None:
    """In this (GNN benchmark part's) process, layout training steps take the plain forward pass, every config
    through every node, instead of :func:`models.gnn.infer.dedup_scores`: the baseline of the side-by-side ratios."""
    from models.gnn.steps import GraphScores

    GraphScores.forward = lambda self, item, config_feat, *rest: self.net(item.segments, config_feat)


def run_part(module: str, *args: str) -> dict:
    """Run ``python -m module --part ARGS`` in a fresh process, so its peak memory is its own; its last stdout line
    is the JSON result."""
    res = subprocess.run([sys.executable, "-m", module, "--part", *args], capture_output=True, text=True)
    if res.returncode != 0:
        tail = "\n".join(res.stderr.strip().splitlines()[-25:])
        raise SystemExit(f"the benchmark part `{module} --part {' '.join(args)}` failed (exit {res.returncode}); "
                         f"its error output ends:\n{tail}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def head(data, n: int):  # noqa: ANN001, ANN201
    """``data`` (a :class:`competition.dataset.CollectionData`) with the first ``n`` graphs of each split."""
    from dataclasses import replace

    def first(graphs):  # noqa: ANN001, ANN202
        return None if graphs is None else graphs.subset(range(min(n, len(graphs))))

    return replace(data, train=first(data.train), eval=first(data.eval), valid=first(data.valid),
                   test=first(data.test))
