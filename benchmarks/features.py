"""Feature-cache benchmark: ``python -m benchmarks.features``.

Generates (or reuses, with ``--workdir``) a full-scale synthetic ``layout:xla:random`` collection, then builds the
processed-graph cache (:class:`features.cache.ProcessedGraphs`) of its train split with
``PruneToConfigurable(hops=1)`` from scratch, in a fresh subprocess so that its peak resident memory
(``ru_maxrss``, of the process and of its largest worker) is its own. Prints the node and edge counts before and
after pruning, the pruning speed (nodes in per second of ``pre_transform``), the cache build time and a rebuild
that reuses every file.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import tempfile
import time
from pathlib import Path

from benchmarks.measure import peak_mib, run_part

COLLECTION = "layout:xla:random"




def part_generate(out: Path, limit: int, workers: int | None) -> dict:
    from competition.synthetic.world import generate_world

    t0 = time.perf_counter()
    generate_world(out, scale="full", collections=[COLLECTION], limit=limit, workers=workers, progress=False)
    return {"seconds": time.perf_counter() - t0}


def part_build(data: Path, cache: Path, hops: int, max_configs: int, workers: int | None) -> dict:
    from competition.dataroot import find_data_root
    from competition.dataset import open_split
    from features import ProcessedGraphs, PruneToConfigurable

    def make() -> ProcessedGraphs:
        return ProcessedGraphs(open_split(find_data_root(data), COLLECTION, "train"),
                               pre_transform=PruneToConfigurable(hops=hops), cache_dir=cache, max_configs=max_configs,
                               workers=workers, progress=False)

    ds = make()
    shutil.rmtree(ds.processed_dir, ignore_errors=True)
    first = ds.build()
    second = make().build()
    graphs = [g["stats"] for g in ds.manifest()["graphs"].values()]
    cache_bytes = sum(p.stat().st_size for p in ds.paths)
    return {
        "graphs": len(graphs), "built": first.built, "seconds": first.seconds,
        "reused": second.reused, "reuse_seconds": second.seconds,
        "nodes_before": sum(g["num_nodes_before"] for g in graphs), "nodes_after": sum(g["num_nodes"] for g in graphs),
        "edges_before": sum(g["num_edges_before"] for g in graphs), "edges_after": sum(g["num_edges"] for g in graphs),
        "max_nodes": max(g["num_nodes_before"] for g in graphs),
        "prune_seconds": sum(g["pre_transform_seconds"] for g in graphs),
        "cache_mb": cache_bytes / 1e6,
        "peak_mib": peak_mib(resource.RUSAGE_SELF), "peak_worker_mib": peak_mib(resource.RUSAGE_CHILDREN),
    }




def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--part", nargs="+", help=argparse.SUPPRESS)
    ap.add_argument("--limit", type=int, default=20, help="train graphs to generate and process (default 20)")
    ap.add_argument("--hops", type=int, default=1, help="PruneToConfigurable radius (default 1)")
    ap.add_argument("--max-configs", type=int, default=100, help="configs cached per graph (default 100)")
    ap.add_argument("--workers", type=int, default=None, help="worker processes (default: the machine's cores)")
    ap.add_argument("--workdir", default=None,
                    help="folder for the world and the cache, kept and reused (default: a temporary one, removed)")
    args = ap.parse_args()
    workers = None if args.workers is None else str(args.workers)
    if args.part:
        name, *rest = args.part
        count = None if rest[-1] == "None" else int(rest[-1])
        if name == "generate":
            result = part_generate(Path(rest[0]), int(rest[1]), count)
        else:
            result = part_build(Path(rest[0]), Path(rest[1]), int(rest[2]), int(rest[3]), count)
        print(json.dumps(result))
        return

    work = Path(args.workdir or tempfile.mkdtemp(prefix="fastslow-bench-features-"))
    try:
        world = work / f"world-full-{args.limit}"
        gen = run_part("benchmarks.features", "generate", str(world), str(args.limit), str(workers))
        print(f"world: full-scale {COLLECTION}, limit {args.limit}, ready in {gen['seconds']:.1f} s "
              f"({'reused' if gen['seconds'] < 1 else 'generated'})")
        b = run_part("benchmarks.features", "build", str(world), str(work / "cache"), str(args.hops), str(args.max_configs), str(workers))
        print(f"graphs: {b['graphs']} train graphs (largest {b['max_nodes']:,} nodes)")
        print(f"nodes:  {b['nodes_before']:,} -> {b['nodes_after']:,} "
              f"({b['nodes_after'] / b['nodes_before']:.1%} kept by PruneToConfigurable(hops={args.hops}))")
        print(f"edges:  {b['edges_before']:,} -> {b['edges_after']:,} ({b['edges_after'] / b['edges_before']:.1%} kept)")
        print(f"pruning: {b['nodes_before'] / b['prune_seconds']:,.0f} nodes/s "
              f"({b['prune_seconds']:.2f} s of pre_transform in all)")
        print(f"cache build: {b['built']} graphs in {b['seconds']:.1f} s (max {args.max_configs} configs each, "
              f"{b['cache_mb']:.1f} MB); rebuild reusing {b['reused']} in {b['reuse_seconds']:.2f} s")
        print(f"peak memory: {b['peak_mib']:.0f} MiB (build process), {b['peak_worker_mib']:.0f} MiB (largest worker)")
    finally:
        if not args.workdir:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
