"""The speed benchmark: ``make bench-speed`` (``python -m benchmarks.speed``).

The default GNN (``gnn-attn``) against the defaults it replaced (:data:`PREVIOUS_DEFAULTS`), side by side in one
run on one machine: per collection, one epoch of each network of the collection's seed ensemble (``run.seeds``),
fitted on a slice of a full-scale world (``--tile-kernels`` tile kernels per split; ``--layout-graphs`` graphs per
layout split), each fit in a fresh process with one torch thread, the previous settings and the current ones
alternating ``--repeats`` times. It prints the networks, the seconds of an epoch's training steps and of its
validation pass (summed over the networks), the prediction speed on the valid graphs (configs per second, the valid
protocol's configs, every network scoring), and the ratio of the previous to the current (above 1: the current is
faster).

The world is generated when missing (``fastslow data synth --scale full`` with ``--limit``/``--tile-limit``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

from benchmarks.measure import head, peak_mib, run_part

DEFAULT_WORLD = Path("bench-out") / "speed-world"
MODEL = "gnn-attn"

PREVIOUS_DEFAULTS: dict[str, dict[str, Any]] = {
    "tile:xla": {"train.valid_configs": None},
    "layout:xla:random": {"run.seeds": 3},
}
"""Per collection, the settings that give back the defaults before the last speed change (an empty dict: the
collection's defaults did not change; it is still measured, twice, as the noise of a ratio)."""


def part_fit(world: str, collection: str, which: str, tile_kernels: int, layout_graphs: int, cache: str) -> dict:
    import torch

    from competition.collections import Collection, Split
    from competition.dataroot import find_data_root
    from competition.dataset import open_collection
    from fastslow.fitting import predict_graphs
    from models.registry import make_model

    torch.set_num_threads(1)
    c = Collection(collection)
    data = open_collection(find_data_root(world), c)
    data = head(data, tile_kernels if c.is_tile else layout_graphs)
    params: dict[str, Any] = {"epochs": 1, "patience": 1, "runs_dir": None, "cache_dir": cache, "device": "cpu"}
    if which == "previous":
        params.update(PREVIOUS_DEFAULTS.get(collection, {}))
    # The cache is built before the clock starts (both settings share it): the epoch alone is measured.
    make_model(MODEL, **{**params, "max_seconds": 0.0}).fit(data, progress=False)
    t0 = time.perf_counter()
    model = make_model(MODEL, **params).fit(data, progress=False)
    fit = time.perf_counter() - t0
    epochs = [history[-1] for history in model.histories()]  # one epoch of each network of the seed ensemble
    t0 = time.perf_counter()
    scores = predict_graphs(MODEL, model, data, Split.VALID)  # the valid protocol's configs, as the pipeline does
    predict = time.perf_counter() - t0
    configs = sum(int(v.shape[0]) for v in scores.values())
    return {"fit": fit, "networks": len(epochs), "train": sum(e["seconds"] - e["valid_seconds"] for e in epochs),
            "valid": sum(e["valid_seconds"] for e in epochs), "metric": epochs[0]["valid_metric"],
            "predict_configs": configs, "predict": predict, "graphs": len(data.train), "peak_mib": peak_mib()}


def _median(runs: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in runs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--part", nargs="+", help=argparse.SUPPRESS)
    ap.add_argument("--world", default=str(DEFAULT_WORLD), metavar="DIR",
                    help="the full-scale world to measure on, generated there if missing (default: %(default)s)")
    ap.add_argument("--collections", nargs="+", default=None, metavar="C", help="collections (default: all five)")
    ap.add_argument("--tile-kernels", type=int, default=100, metavar="N",
                    help="tile kernels per split fitted and predicted (default: %(default)s)")
    ap.add_argument("--layout-graphs", type=int, default=1, metavar="N",
                    help="graphs per layout split fitted and predicted (default: %(default)s)")
    ap.add_argument("--repeats", type=int, default=1, metavar="N",
                    help="fits per setting, alternating; the median is shown (default: %(default)s)")
    ap.add_argument("--out", default="bench-out/speed.json", metavar="JSON",
                    help="where the measurements are saved (default: %(default)s)")
    args = ap.parse_args()
    if args.part:
        name, world, c, which, tiles, layouts, cache = args.part
        print(json.dumps(part_fit(world, c, which, int(tiles), int(layouts), cache)))
        return

    from competition.collections import Collection
    from competition.synthetic.world import generate_world

    collections = [Collection.parse(c) for c in args.collections] if args.collections else list(Collection)
    world = Path(args.world)
    if not (world / "world.json").exists():
        t0 = time.perf_counter()
        generate_world(world, scale="full", seed=0, collections=[c.value for c in collections],
                       limit=args.layout_graphs, tile_limit=args.tile_kernels, progress=True)
        print(f"generated the full-scale world in {time.perf_counter() - t0:.0f} s: {world}")
    cache = str(Path("bench-out") / "speed-cache")
    results: dict[str, dict[str, list[dict]]] = {}
    for c in collections:
        runs: dict[str, list[dict]] = {"previous": [], "current": []}
        for r in range(args.repeats):
            for which in ("previous", "current"):
                print(f"{c.value}: {which} defaults ({r + 1}/{args.repeats})", flush=True)
                runs[which].append(run_part("benchmarks.speed", "fit", str(world), c.value, which,
                                            str(args.tile_kernels), str(args.layout_graphs), cache))
        results[c.value] = runs
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(results, indent=1) + "\n")  # what is measured so far
    print(format_table(results))
    print(f"saved: {args.out}")


def format_table(results: dict[str, dict[str, list[dict]]]) -> str:
    """Per collection: the networks fitted, previous and current seconds of an epoch's training and validation (all
    networks), prediction configs per second, and the ratios previous / current (time) and current / previous
    (speed): above 1, the current is faster."""
    head = (f"{'collection':20s} {'graphs':>6s} {'nets':>5s} {'train s prev/now':>17s} {'ratio':>6s} {'valid s prev/now':>17s} "
            f"{'ratio':>6s} {'epoch ratio':>11s} {'predict cfg/s prev/now':>23s} {'ratio':>6s}")
    lines = [f"{MODEL}: one epoch of each network and the valid graphs' prediction, the previous defaults against "
             "the current (ratio > 1: the current is faster)", head]
    for c, runs in results.items():
        p, n = runs["previous"], runs["current"]
        tp, tn = _median(p, "train"), _median(n, "train")
        vp, vn = _median(p, "valid"), _median(n, "valid")
        pp = statistics.median(r["predict_configs"] / max(r["predict"], 1e-9) for r in p)
        pn = statistics.median(r["predict_configs"] / max(r["predict"], 1e-9) for r in n)
        nets = f"{p[0].get('networks', 1)}/{n[0].get('networks', 1)}"
        lines.append(f"{c:20s} {p[0]['graphs']:6d} {nets:>5s} {tp:8.1f}/{tn:8.1f} {tp / max(tn, 1e-9):6.2f} {vp:8.1f}/{vn:8.1f} "
                     f"{vp / max(vn, 1e-9):6.2f} {(tp + vp) / max(tn + vn, 1e-9):11.2f} {pp:11.0f}/{pn:11.0f} "
                     f"{pn / max(pp, 1e-9):6.2f}")
    changed = {c: v for c, v in PREVIOUS_DEFAULTS.items() if c in results}
    lines.append("previous defaults: " + ("; ".join(f"{c}: {', '.join(f'{k}={v!r}' for k, v in d.items())}"
                                                    for c, d in changed.items()) or "the same as now"))
    return "\n".join(lines)


if __name__ == "__main__":
    main()
