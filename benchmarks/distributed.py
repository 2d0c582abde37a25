"""Data-parallel GNN training: ``python -m benchmarks.distributed`` (part of ``make bench``).

Optimiser steps per second of the GNN's training loop (``GNNModel.fit``, default layout settings, the same global
batch of ``--graphs-per-step`` graphs per step) on full-scale synthetic layout graphs, run through torchrun in 1
process and in N processes (``gloo`` on the CPU; with ``--device cuda``, ``nccl``, one GPU per process), side by
side, with the ratio to 1 process. On the CPU each process gets cores / N torch threads, as ``fastslow train
--nproc N`` gives them; 1 process is also measured with 1 thread, the share of one process of 2.

The graphs: the first ``--graphs`` train graphs of ``--collection`` in ``--world`` (``bench-out/scale-world``, which
``make bench-scale`` generates, else a small full-scale part generated into ``bench-out/dist-world``). A run trains
2 epochs without a valid split; the second epoch's training time (the history's ``seconds``, which leaves out
start-up, reading the cache and building the model) gives the steps per second.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

MODULE = "benchmarks.distributed"
SCALE_WORLD = Path("bench-out") / "scale-world"
OWN_WORLD = Path("bench-out") / "dist-world"
WORK = Path("bench-out") / "dist-work"


def part_steps(root: str, collection: str, cache: str, per_step: int, steps: int, threads: int,
               device: str) -> dict:
    """In each process of a launch: fit 2 epochs of ``steps`` steps; rank 0 returns the second epoch's rate."""
    import torch

    from competition.collections import Collection, Split
    from competition.dataroot import find_data_root, list_graphs
    from competition.dataset import open_collection
    from models.gnn import distributed
    from models.gnn.model import GNNModel
    from models.gnn.steps import resolve_device

    torch.set_num_threads(threads)
    data = find_data_root(root)
    c = Collection.parse(collection)
    with distributed.process_group(resolve_device(device)) as on:
        graphs = len(list_graphs(data, c, Split.TRAIN))
        steps_per_graph = math.ceil(steps * per_step / graphs)
        model = GNNModel(graphs_per_step=per_step, steps_per_graph=steps_per_graph, epochs=2, device=str(on),
                         runs_dir=None, cache_dir=cache).fit(open_collection(data, c, eval_split=None),
                                                             progress=False)
        done = math.ceil(graphs * steps_per_graph / per_step)
        seconds = model.history_[1]["seconds"] - model.history_[0]["seconds"]
        return {"world": distributed.world_size(), "steps": done, "seconds": seconds, "steps_per_s": done / seconds,
                "graphs": graphs, "threads": threads, "device": str(on)}


def run_launch(nproc: int, threads: int, *args: str) -> dict:
    """``part_steps`` in ``nproc`` processes through torchrun; rank 0's JSON line."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}", "-m", MODULE,
           "--part", *args, str(threads)]
    res = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env)
    return json.loads([line for line in res.stdout.splitlines() if line.startswith("{")][-1])


def graphs_root(world: Path, collection: str, graphs: int) -> Path:
    """A data root holding (as links) the first ``graphs`` train graphs of ``collection`` in ``world``."""
    from competition.collections import Collection, Split
    from competition.dataroot import find_data_root, list_graphs

    c = Collection.parse(collection)
    paths = list_graphs(find_data_root(world), c, Split.TRAIN)[:graphs]
    if len(paths) < graphs:
        raise SystemExit(f"{world}: {len(paths)} {collection} train graphs, fewer than --graphs {graphs}")
    root = WORK / "root"
    shutil.rmtree(root, ignore_errors=True)
    dest = root / "npz" / "layout" / c.source / c.search / "train"
    dest.mkdir(parents=True)
    for p in paths:
        (dest / p.name).symlink_to(p.resolve())
    return root


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--part", nargs="+", help=argparse.SUPPRESS)
    ap.add_argument("--world", default=None, metavar="DIR",
                    help=f"a full-scale world (default: {SCALE_WORLD} if there, else {OWN_WORLD}, generated when "
                         "missing)")
    ap.add_argument("--collection", default="layout:xla:default", metavar="C",
                    help="a layout collection (default: %(default)s)")
    ap.add_argument("--graphs", type=int, default=4, metavar="N", help="train graphs (default: %(default)s)")
    ap.add_argument("--graphs-per-step", type=int, default=2, metavar="G",
                    help="graphs per optimiser step, the same for every process count (default: %(default)s)")
    ap.add_argument("--steps", type=int, default=40, metavar="N", help="steps per epoch, about (default: %(default)s)")
    ap.add_argument("--nproc", type=int, default=2, metavar="N", help="processes to compare with 1 (default: %(default)s)")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                    help="cpu: gloo, cores split between the processes; cuda: nccl, one GPU each (default: %(default)s)")
    args = ap.parse_args()
    if args.part:
        root, collection, cache, per_step, steps, device, threads = args.part
        result = part_steps(root, collection, cache, int(per_step), int(steps), int(threads), device)
        if result["world"] == 1 or os.environ.get("RANK") == "0":
            print(json.dumps(result), flush=True)
        return

    from competition.synthetic.world import generate_world

    world = Path(args.world) if args.world else SCALE_WORLD if (SCALE_WORLD / "world.json").exists() else OWN_WORLD
    if not (world / "world.json").exists():
        t0 = time.perf_counter()
        generate_world(world, scale="full", seed=0, collections=[args.collection], limit=max(args.graphs, 2),
                       progress=True)
        print(f"generated {args.graphs} full-scale {args.collection} graphs per split in "
              f"{time.perf_counter() - t0:.0f} s: {world}")
    WORK.mkdir(parents=True, exist_ok=True)
    root = graphs_root(world, args.collection, args.graphs)
    cache = WORK / "cache"
    shutil.rmtree(cache, ignore_errors=True)
    cores = os.cpu_count() or 1
    common = (str(root), args.collection, str(cache), str(args.graphs_per_step), str(args.steps), args.device)
    runs = [(1, cores if args.device == "cpu" else 1)]
    if args.device == "cpu":
        runs.append((1, max(1, cores // args.nproc)))
    runs.append((args.nproc, max(1, cores // args.nproc)))
    print(f"{args.collection}: {args.graphs} full-scale train graphs of {world}, default layout settings, "
          f"graphs_per_step={args.graphs_per_step}, {cores} cores, {args.device}")
    print(f"  {'processes':>9s} {'threads':>7s} {'steps':>6s} {'seconds':>8s} {'steps/s':>8s}")
    measured = []
    for nproc, threads in dict.fromkeys(runs):
        r = run_launch(nproc, threads, *common)
        measured.append((nproc, threads, r))
        print(f"  {nproc:9d} {threads:7d} {r['steps']:6d} {r['seconds']:8.2f} {r['steps_per_s']:8.2f}", flush=True)
    many = measured[-1][2]["steps_per_s"]
    for nproc, threads, r in measured[:-1]:
        print(f"{args.nproc} processes: {many / r['steps_per_s']:.2f}x the steps/s of {nproc} process with {threads} "
              f"thread{'s' if threads > 1 else ''}")


if __name__ == "__main__":
    main()
