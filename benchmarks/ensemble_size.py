"""The seed ensemble's size, measured from one fit: ``python -m benchmarks.ensemble_size``.

A GNN with ``seeds`` N trains N networks with successive training seeds, each on its own, and averages their
rank-normalised scores. The first k networks of such a fit are exactly what a fit with ``seeds`` k trains (a
network's training does not depend on how many follow it), so one fit of N networks on a world gives the test and
valid score of every ensemble size 1..N, and each network's fitting time, without fitting N times::

    python -m benchmarks.ensemble_size --scale bench --world-seed 0 --collection layout:xla:random --seeds 3

It prints one line per size (test score, valid score, the fitting time of that many networks) and writes them as
JSON (``--out``). Run it on several world seeds (a process each) and compare the sizes per world: what a smaller
ensemble saves in time against what it loses beyond the spread between worlds.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from competition.atomic import atomic_write_text
from competition.collections import Collection, Split
from competition.dataroot import find_data_root
from competition.labels import load_labels
from competition.protocol import DEFAULT_PROTOCOL
from competition.stats import oracle_scores
from competition.submission_scoring import score_predictions
from fastslow.commands.params import literal as _literal
from fastslow.worlds import world_dir


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.ensemble_size",
                                     description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--scale", default="bench", choices=["tiny", "demo", "bench", "full"], help="world scale")
    parser.add_argument("--world-seed", type=int, default=0, help="the world's seed")
    parser.add_argument("--worlds-dir", default="data", help="where the world is generated or found")
    parser.add_argument("--data", default=None, metavar="DIR",
                        help="fit on this data root instead (a world with hidden test runtimes); --scale, "
                             "--world-seed and --worlds-dir then only label the lines")
    parser.add_argument("--collection", default="layout:xla:random", help="the collection fitted and scored")
    parser.add_argument("--model", default="gnn-attn", help="the GNN model")
    parser.add_argument("--seeds", type=int, default=3, help="networks trained (the largest ensemble scored)")
    parser.add_argument("--param", action="append", default=[], metavar="NAME=VALUE",
                        help="another setting of the model, as `fastslow train --param` takes it (repeatable)")
    parser.add_argument("--out", default=None, metavar="JSON",
                        help="where the lines are saved (default: bench-out/ensemble-size-<collection>-<seed>.json)")
    parser.add_argument("--progress", action="store_true", help="show progress bars")
    args = parser.parse_args(argv)

    from competition.dataset import Dataset
    from competition.synthetic.world import generate_world
    from fastslow.fitting import fit_collection, predict_graphs
    from models.registry import ModelParams, make_model

    if args.seeds < 1:
        parser.error(f"--seeds: at least 1 network; got {args.seeds}")
    collection = Collection.parse(args.collection)
    if args.data is None:
        path = world_dir(args.scale, args.world_seed, args.worlds_dir)
        generate_world(path, scale=args.scale, seed=args.world_seed, progress=args.progress)
    root = find_data_root(args.data or path)
    data = Dataset.open(root, [collection])[collection]
    labels = {s: load_labels(root, [collection], s, DEFAULT_PROTOCOL) for s in (Split.VALID, Split.TEST)}
    oracle = (oracle_scores(labels[Split.TEST]) or {}).get(collection)

    params = {**{name: _literal(value) for name, _, value in (p.partition("=") for p in args.param)}, "seeds": args.seeds, "runs_dir": None}
    model = make_model(args.model, **ModelParams(common=params).for_collection(collection))
    started = time.perf_counter()
    fit_collection(args.model, model, data, splits=(), progress=args.progress, say=lambda line: None)
    fit_seconds = time.perf_counter() - started
    members = list(getattr(model, "members_", []))
    networks = 1 + len(members)
    # Each network's own fitting time is not kept by the model; its epochs are, and the networks' epochs cost
    # alike (the same graphs and steps), so the fit's time is shared out by epochs run.
    epochs = [len(history) for history in model.histories()]
    per_epoch = fit_seconds / max(1, sum(epochs))

    lines = []
    for k in range(1, networks + 1):
        vars(model).pop("members_", None)
        if k > 1:
            model.members_ = members[:k - 1]
        model._nets = {}
        scores = {s.value: score_predictions(predict_graphs(args.model, model, data, s), labels[s]).scores()[collection]
                  for s in (Split.TEST, Split.VALID)}
        line = {"world_seed": args.world_seed, "networks": k, "test": scores["test"], "valid": scores["valid"],
                "fit_seconds": per_epoch * sum(epochs[:k]), "epochs": epochs[:k]}
        lines.append(line)
        print(f"[world seed {args.world_seed}] {collection.value} {args.model}, {k} network{'s' * (k > 1)}: "
              f"test {line['test']:.4f}, valid {line['valid']:.4f}, fit {line['fit_seconds']:.0f} s "
              f"(epochs {', '.join(map(str, epochs[:k]))})", flush=True)
    if oracle is not None:
        print(f"[world seed {args.world_seed}] oracle test {oracle:.4f}")
    out = Path(args.out or f"bench-out/ensemble-size-{collection.value.replace(':', '-')}-{args.world_seed}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out, json.dumps({"collection": collection.value, "model": args.model, "scale": args.scale,
                                       "params": {k: v for k, v in params.items() if k != "runs_dir"},
                                       "oracle_test": oracle, "lines": lines}, indent=1) + "\n")
    print(f"saved to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
