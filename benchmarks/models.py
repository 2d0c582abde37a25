"""Model benchmarks: ``python -m benchmarks.models`` (part of ``make bench``).

1. Fits the GBDT baseline per collection on the demo world (generated once if missing) and prints the training time
   and the valid score beside the default-first baseline's.
2. Times the GBDT's layout features (:func:`features.tabular_layout.layout_features`) on one generated layout graph the
   size of the largest real ones (:func:`benchmarks.data_layer._big_module`: about 40,000 nodes, 1,800-2,400
   configurable nodes) with 5,000 configs, in a fresh process with one BLAS thread: configs per second over every
   config (the file streamed once), beside reading ``node_config_feat`` alone, and over 1,000 sampled configs (as
   ``fit`` reads a training graph).
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

from benchmarks.measure import peak_mib, run_part
from competition.collections import Collection, Split
from competition.dataroot import list_graphs
from competition.dataset import open_collection
from competition.labels import graph_target
from competition.metrics import graph_score
from competition.reader import load_graph
from competition.workers import child_environment
from fastslow.pipeline import DEFAULT_SYNTH_DIR, resolve_data
from models.registry import make_model

LAYOUT_COLLECTION = Collection.LAYOUT_NLP_RANDOM
LAYOUT_CONFIGS = 5_000
"""Configs of the generated graph of the layout-features benchmark."""
SAMPLED_CONFIGS = 1_000
"""Configs per training graph that ``GBDTModel.fit`` reads by default (``max_configs_per_graph``)."""


def _valid_score(model, root, collection: Collection) -> float:
    values = []
    for path in list_graphs(root, collection, Split.VALID):
        g = load_graph(path, collection)
        values.append(graph_score(collection, graph_target(g), scores=model.predict(g)))
    return sum(values) / len(values)


def fit_table(data: str | None) -> None:
    """Fit the GBDT per collection and print the training time and the valid score beside default-first's."""
    root, _ = resolve_data(data, DEFAULT_SYNTH_DIR, progress=False)
    print(f"GBDT training on {root.root}")
    print(f"{'collection':20s} {'train graphs':>12s} {'fit s':>7s} {'gbdt valid':>11s} {'default-first':>14s}")
    for c in Collection:
        t0 = time.perf_counter()
        gbdt = make_model("gbdt").fit(open_collection(root, c), progress=False)
        seconds = time.perf_counter() - t0
        base = make_model("default-first").fit(open_collection(root, c), progress=False)
        print(f"{c.value:20s} {len(list_graphs(root, c, Split.TRAIN)):12d} {seconds:7.2f} "
              f"{_valid_score(gbdt, root, c):11.4f} {_valid_score(base, root, c):14.4f}")


def part_layout_graph(work: Path, configs: int) -> dict:
    """Write the big layout graph (:func:`benchmarks.data_layer._big_module`) with ``configs`` configs under
    ``work``."""
    import numpy as np

    from benchmarks.data_layer import _big_module
    from competition.synthetic.writers import write_layout_graph

    path = work / "npz" / Path(LAYOUT_COLLECTION.relpath) / "train" / "big.npz"
    secret = work / "secret" / Path(LAYOUT_COLLECTION.relpath) / "train" / "big.npz"
    t0 = time.perf_counter()
    write_layout_graph(path, secret, _big_module(0), "random", configs, np.random.default_rng(1), duplicates=False)
    return {"path": str(path), "seconds": time.perf_counter() - t0}


def part_layout_features(path: Path) -> dict:
    """Time the layout features of the graph at ``path``: the per-graph context, every config streamed, reading
    ``node_config_feat`` alone, and :data:`SAMPLED_CONFIGS` sampled configs."""
    import numpy as np

    from features.tabular_layout import layout_context, layout_features

    graph = load_graph(path, LAYOUT_COLLECTION)
    before_mib = peak_mib()  # imports and the graph's arrays
    t0 = time.perf_counter()
    ctx = layout_context(graph)
    context_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    for _ in graph.iter_config_blocks():
        pass
    read_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    x = layout_features(graph, context=ctx)
    all_s = time.perf_counter() - t0
    rows = np.sort(np.random.default_rng(2).choice(graph.num_configs, min(SAMPLED_CONFIGS, graph.num_configs),
                                                   replace=False))
    t0 = time.perf_counter()
    sampled = layout_features(graph, rows, context=ctx)
    sampled_s = time.perf_counter() - t0
    assert np.array_equal(sampled, x[rows]), "sampled and streamed layout features disagree"
    return {"nodes": graph.num_nodes, "config_nodes": graph.num_config_nodes, "configs": graph.num_configs,
            "links": int(ctx.link_producer.size), "context_s": context_s, "read_s": read_s, "all_s": all_s,
            "sampled": int(rows.size), "sampled_s": sampled_s, "before_mib": before_mib, "peak_mib": peak_mib()}


def bench_layout_features(configs: int = LAYOUT_CONFIGS) -> None:
    """Print the layout features' throughput on a generated graph (:func:`part_layout_features`, one BLAS
    thread, in a fresh process)."""
    work = Path(tempfile.mkdtemp(prefix="fastslow-bench-layout-"))
    try:
        with child_environment(OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1"):
            made = run_part("benchmarks.models", "layout-graph", str(work), str(configs))
            r = run_part("benchmarks.models", "layout-features", made["path"])
    finally:
        shutil.rmtree(work, ignore_errors=True)
    n = r["configs"]
    print(f"GBDT layout features on a generated graph: {r['nodes']:,} nodes, {r['config_nodes']:,} configurable, "
          f"{n:,} configs, {r['links']:,} links (one BLAS thread)")
    print(f"  per-graph context (links, node groups): {r['context_s']:.2f} s, once per graph")
    print(f"  every config, streamed: {n / r['all_s']:8,.0f} configs/s ({r['all_s']:.2f} s); reading "
          f"node_config_feat alone: {n / r['read_s']:,.0f} configs/s")
    if r["all_s"] > r["read_s"]:
        print(f"  features beyond the read: {n / (r['all_s'] - r['read_s']):8,.0f} configs/s")
    print(f"  {r['sampled']:,} sampled configs (as fit reads a graph): {r['sampled'] / r['sampled_s']:,.0f} configs/s "
          f"({r['sampled_s']:.2f} s: the file is read up to the last one)")
    print(f"  peak memory {r['peak_mib']:.0f} MiB, of which {r['before_mib']:.0f} MiB before the features (imports, "
          f"the graph's arrays)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--part", nargs="+", help=argparse.SUPPRESS)
    ap.add_argument("--data", default=None, help="data root (default: as make submit finds it)")
    ap.add_argument("--layout-configs", type=int, default=LAYOUT_CONFIGS,
                    help="configs of the graph of the layout-features benchmark (default %(default)s; 0 skips it)")
    ap.add_argument("--only-layout-features", action="store_true", help="skip the GBDT training table")
    args = ap.parse_args()
    if args.part:
        name, *rest = args.part
        result = (part_layout_graph(Path(rest[0]), int(rest[1])) if name == "layout-graph"
                  else part_layout_features(Path(rest[0])))
        print(json.dumps(result))
        return
    if not args.only_layout_features:
        fit_table(args.data)
    if args.layout_configs > 0:
        bench_layout_features(args.layout_configs)


if __name__ == "__main__":
    main()
