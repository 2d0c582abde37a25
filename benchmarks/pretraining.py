"""The world as a pretraining source: a GNN fitted on a few of a real graph's own measured configs, from scratch or
starting from a world-fitted run (``train.init_from``), scored on the real graph's test configs.

Run it as::

    python -m benchmarks.pretraining                               # gnn-attn, 100 / 1,000 / 10,000 configs, 3 seeds
    python -m benchmarks.pretraining --sizes 100 --seeds 0 --model gnn    # a quick run

The real graph is alexnet's layout graph (:mod:`competition.real_layout`), split once into train / valid / test by
distinct config. For each size N, the first N distinct train configs (a fixed order) and every valid run make a data
root; each training seed fits the model on it twice with the same settings (``--param``): from scratch, and starting
from the run fitted on the world's ``--collection`` (``train.init_from``; the world fit uses the pipeline's settings
for its scale). Both are scored by Kendall tau on the graph's test configs (repeats averaged). Fits are saved under
``--work-dir`` and reused; nothing is written to ``runs/``.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.real_records import World, fit_cached, fit_folder, make_worlds, parse_params, world_params
from competition.collections import Collection
from competition.dataroot import find_data_root
from competition.dataset import open_collection
from competition.metrics import kendall_tau

FIT_PARAMS: dict[str, Any] = {"features.train_configs": "all", "train.valid_configs": 1000}
"""The own-runs fits keep every train config they are given and early-stop on 1,000 valid configs."""


def run(argv: Sequence[str] | None = None) -> tuple[list[dict[str, Any]], str]:
    """Parse the command line, fit and score everything; returns the records and the printed table."""
    from competition.real_layout import ALEXNET_COLLECTION, alexnet_root, alexnet_test

    parser = argparse.ArgumentParser(prog="python -m benchmarks.pretraining", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--model", default="gnn-attn", choices=["gnn", "gnn-attn"], help="the GNN fitted")
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 1000, 10000], metavar="N",
                        help="distinct own train configs of each fit")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], metavar="SEED",
                        help="training seeds (train.seed) of the own-runs fits")
    parser.add_argument("--data", default=None, metavar="ROOT", help="the world to pretrain on (default: the demo "
                        "world of --world-seed, generated under --work-dir)")
    parser.add_argument("--world-seed", type=int, default=0, metavar="SEED", help="the demo world's seed")
    parser.add_argument("--collection", default=Collection.LAYOUT_XLA_RANDOM.value,
                        choices=[c.value for c in Collection if c.is_layout], help="the world's collection")
    parser.add_argument("--param", action="append", default=[], metavar="MODEL.KEY=VALUE",
                        help="a setting of the own-runs fits (both kinds), e.g. --param gnn-attn.train.lr=0.001")
    parser.add_argument("--work-dir", default="bench-out/pretraining", metavar="DIR",
                        help="where the world, the real graph's roots and the fits are kept and reused")
    parser.add_argument("--json", default=None, metavar="FILE", help="also write the records as JSON")
    args = parser.parse_args(argv)
    if min(args.sizes) < 2 or min(args.seeds) < 0:
        parser.error("--sizes must be at least 2 and --seeds at least 0")
    try:
        given = parse_params(args.param, [args.model]).get(args.model, {})
    except ValueError as exc:
        parser.error(str(exc))
    started = time.perf_counter()
    work = Path(args.work_dir).resolve()
    cache = work / "runs"
    world = (World(Path(args.data).name, find_data_root(Path(args.data).resolve())) if args.data
             else make_worlds("demo", [args.world_seed], work / "worlds")[0])
    collection = Collection(args.collection)
    world_data = open_collection(world.root, collection)
    pre = world_params(args.model, {}, world, collection)
    print(f"{args.model} on world {world.label} ({collection.value}): the pretrained run", flush=True)
    fit_cached(args.model, pre, world_data, cache)
    source, _ = fit_folder(args.model, pre, world_data, cache)
    records: list[dict[str, Any]] = []
    for size in args.sizes:
        root = alexnet_root(work / "alexnet", size)
        data = open_collection(root, ALEXNET_COLLECTION)
        test = alexnet_test(root)
        for seed in args.seeds:
            for start, extra in (("scratch", {}), ("pretrained", {"train.init_from": str(source)})):
                params = {**FIT_PARAMS, **given, "train.seed": seed, **extra}
                print(f"{args.model}, {size:,} own configs ({data.train[0].num_configs:,} runs), seed {seed}, "
                      f"{start}", flush=True)
                model, seconds = fit_cached(args.model, params, data, cache)
                records.append(dict(size=size, seed=seed, start=start, seconds=seconds,
                                    tau=kendall_tau(model.predict(test), test.config_runtime)))
    table = format_table(records, args.model, world.label)
    command = shlex.join(["python", "-m", "benchmarks.pretraining", *(sys.argv[1:] if argv is None else argv)])
    report = f"{table}\n{time.perf_counter() - started:.0f} s in all\ncommand: {command}"
    print(report, flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps({"command": command, "world": str(world.root.root),
                                               "records": records}, indent=1) + "\n")
    return records, report


def format_table(records: Sequence[dict[str, Any]], model: str, world: str) -> str:
    """A row per size: mean and standard deviation over the seeds of each start, and the seeds pretraining won."""
    lines = [f"{model} on alexnet's own configs, Kendall tau on its test configs (mean ± sd over training seeds); "
             f"pretrained on world {world}",
             f"{'own configs':>12s}{'scratch':>18s}{'pretrained':>18s}{'pretrained wins':>18s}", "-" * 66]
    for size in dict.fromkeys(r["size"] for r in records):
        taus = {s: {r["seed"]: r["tau"] for r in records if r["size"] == size and r["start"] == s}
                for s in ("scratch", "pretrained")}
        cells = [f"{np.mean(list(t.values())):>11.4f} ± {np.std(list(t.values())):.3f}" for t in taus.values()]
        wins = sum(taus["pretrained"][k] > taus["scratch"][k] for k in taus["scratch"])
        won = f"{wins} of {len(taus['scratch'])}"
        lines.append(f"{size:>12,d}{cells[0]:>18s}{cells[1]:>18s}{won:>18s}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    run(argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
