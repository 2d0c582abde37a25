"""Data-layer benchmarks: ``make bench`` (``python -m benchmarks.data_layer``).

Each measurement runs in a fresh subprocess, so its peak resident memory (``ru_maxrss``) is its own:

1. generating the demo world (target: under 2 minutes on 2 cores);
2. generating one layout graph the size of the largest real ones (about 40,000 nodes, 2,000 configurable
   nodes, 20,000 configs: 2.9 GB of ``node_config_feat`` as float32), target under 60 s and 4 GiB peak;
3. reading 1,000 configs of that graph, streamed, side by side with ``numpy.load`` of the whole member
   (target: at least 10x less memory).
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks.measure import peak_mib, run_part

BIG_NODES = 40_000
BIG_CONFIG_NODES = (1_800, 2_400)
BIG_CONFIGS = 20_000
READ_CONFIGS = 1_000




def _big_module(seed: int):
    """A ~40k-node program whose configurable-node count falls in :data:`BIG_CONFIG_NODES`."""
    from competition.opcodes import CONFIGURABLE_OPCODES
    from competition.synthetic.programs import build_program

    for attempt in range(64):
        for source in ("nlp", "xla"):
            module = build_program(source, np.random.default_rng([seed, attempt]), BIG_NODES)
            nc = sum(ins.opcode_id in CONFIGURABLE_OPCODES for ins in module.instructions())
            if BIG_CONFIG_NODES[0] <= nc <= BIG_CONFIG_NODES[1]:
                return module
    raise RuntimeError(f"no program with {BIG_CONFIG_NODES} configurable nodes found")


def part_demo(out: Path) -> dict:
    from competition.synthetic.world import generate_world

    t0 = time.perf_counter()
    generate_world(out, scale="demo", seed=0, progress=False)
    return {"seconds": time.perf_counter() - t0, "peak_mib_main": peak_mib()}


def part_big(out: Path) -> dict:
    from competition.synthetic.writers import write_layout_graph

    module = _big_module(0)
    t0 = time.perf_counter()
    path = out / "npz" / "layout" / "nlp" / "random" / "train" / "big.npz"
    secret = out / "secret" / "layout" / "nlp" / "random" / "train" / "big.npz"
    write_layout_graph(path, secret, module, "random", BIG_CONFIGS, np.random.default_rng(1), duplicates=False)
    seconds = time.perf_counter() - t0
    from competition.npzio import NpzReader

    with NpzReader(path) as r:
        info = r.info("node_config_feat")
    return {"seconds": seconds, "peak_mib": peak_mib(), "nodes": module.num_nodes, "shape": list(info.shape),
            "member_gb": info.nbytes / 1e9, "file_mb": path.stat().st_size / 1e6, "path": str(path)}


def part_read(path: Path, how: str) -> dict:
    from competition.npzio import NpzReader

    with NpzReader(path) as r:
        n = r.info("node_config_feat").shape[0]
    rows = np.random.default_rng(2).choice(n, size=READ_CONFIGS, replace=False)
    t0 = time.perf_counter()
    if how == "streamed":
        with NpzReader(path) as r:
            got = r.load_rows("node_config_feat", rows)
    else:
        got = np.load(path)["node_config_feat"][rows]
    return {"seconds": time.perf_counter() - t0, "peak_mib": peak_mib(), "checksum": float(got.sum())}




def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--part", nargs="+", help=argparse.SUPPRESS)
    ap.add_argument("--skip-demo", action="store_true", help="skip the demo-world generation timing")
    ap.add_argument("--workdir", default=None, help="scratch folder (default: a temporary one, removed after)")
    args = ap.parse_args()
    if args.part:
        name, *rest = args.part
        fn = {"demo": lambda: part_demo(Path(rest[0])), "big": lambda: part_big(Path(rest[0])),
              "read": lambda: part_read(Path(rest[0]), rest[1])}[name]
        print(json.dumps(fn()))
        return

    work = Path(args.workdir or tempfile.mkdtemp(prefix="fastslow-bench-"))
    try:
        if not args.skip_demo:
            demo = run_part("benchmarks.data_layer", "demo", str(work / "demo"))
            print(f"demo world generated in {demo['seconds']:.1f} s (target < 120 s): "
                  f"{'PASS' if demo['seconds'] < 120 else 'FAIL'}")
            shutil.rmtree(work / "demo", ignore_errors=True)
        big = run_part("benchmarks.data_layer", "big", str(work / "big"))
        c, nc, _ = big["shape"]
        print(f"big layout graph: {big['nodes']:,} nodes, {nc:,} configurable, {c:,} configs, "
              f"node_config_feat {big['member_gb']:.2f} GB decompressed, {big['file_mb']:.1f} MB on disk")
        print(f"  generated in {big['seconds']:.1f} s (target < 60 s), peak {big['peak_mib']:.0f} MiB "
              f"(target < 4096 MiB): {'PASS' if big['seconds'] < 60 and big['peak_mib'] < 4096 else 'FAIL'}")
        streamed = run_part("benchmarks.data_layer", "read", big["path"], "streamed")
        whole = run_part("benchmarks.data_layer", "read", big["path"], "numpy")
        assert streamed["checksum"] == whole["checksum"], "streamed and numpy reads disagree"
        ratio = whole["peak_mib"] / streamed["peak_mib"]
        print(f"read {READ_CONFIGS} configs:      time      peak memory")
        print(f"  streamed (NpzReader) {streamed['seconds']:7.2f} s  {streamed['peak_mib']:8.0f} MiB")
        print(f"  numpy.load whole     {whole['seconds']:7.2f} s  {whole['peak_mib']:8.0f} MiB")
        print(f"  memory ratio {ratio:.1f}x (target >= 10x), time ratio {whole['seconds'] / streamed['seconds']:.2f}x: "
              f"{'PASS' if ratio >= 10 else 'FAIL'}")
    finally:
        if not args.workdir:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
