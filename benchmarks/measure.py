"""What the benchmarks share: running one measurement in a fresh process, and peak resident memory."""

from __future__ import annotations

import json
import resource
import subprocess
import sys


def peak_mib(who: int = resource.RUSAGE_SELF) -> float:
    """Peak resident memory in MiB of this process (or of its finished children, with ``RUSAGE_CHILDREN``)."""
    return resource.getrusage(who).ru_maxrss / 1024.0


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
