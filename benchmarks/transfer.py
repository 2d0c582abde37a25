"""Transfer between program sources: a model fitted on the graphs of one source, scored on the test graphs of another.

For every world seed, two synthetic worlds are generated with the same scale, seed and collections, one from the
generator's own programs and one from the zoo of real JAX models (``fastslow data synth --programs jax``); the
runtime physics, searches and format are the same. Each model is fitted on each world's train split (early
stopping on that world's valid split, as the pipeline does) and scored on the test split of both worlds through
their hidden runtimes, beside the oracle of that test split::

    python -m benchmarks.transfer --scale demo --world-seeds 0 1 \\
        --collections layout:xla:random tile:xla --models gbdt gnn-attn

prints, per collection and model, a table whose rows are the train source and columns the test source (mean over
the world seeds of the mean per-graph score, the collection's metric), and the oracle of each test source. The
diagonal is the in-source score; an off-diagonal cell far below it says that what the model learned on one source
does not carry over to the other. Worlds are generated once under ``--worlds-dir`` and reused; nothing is written
to ``runs/``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.per_graph import graph_rows
from competition.collections import Collection, Split
from competition.dataroot import find_data_root
from competition.dataset import open_collection

SOURCES: tuple[str, ...] = ("generator", "jax")

# jax starts threads when imported, and a process that forks after that may deadlock (the fits fork workers): a
# jax world is generated in a process of its own.
_GENERATE = """
import sys
from competition.synthetic.world import generate_world
generate_world(sys.argv[1], scale=sys.argv[2], seed=int(sys.argv[3]), collections=sys.argv[5].split(","),
               programs=sys.argv[4], workers=int(sys.argv[6]) or None, progress=False)
"""


def world_path(base: Path, scale: str, seed: int, programs: str) -> Path:
    """Where the world of one scale, seed and program source lives under ``base``."""
    return base / f"{programs}-{scale}-seed{seed}"


def make_world(base: Path, scale: str, seed: int, programs: str, collections: Sequence[Collection],
               workers: int) -> Path:
    """Generate (or reuse) one world, in a process of its own."""
    path = world_path(base, scale, seed, programs)
    subprocess.run([sys.executable, "-c", _GENERATE, str(path), scale, str(seed), programs,
                    ",".join(c.value for c in collections), str(workers)], check=True)
    return path


def transfer_cells(models: Sequence[str], collections: Sequence[Collection], worlds: dict[tuple[str, int], Path],
                   seeds: Sequence[int], params: dict[str, dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """Fit every model on every world's train split and score it on the test split of each source's world of the
    same seed: one record per (model, collection, seed, train source, test source) with the mean per-graph score,
    the test set's mean oracle, its number of graphs, and the seconds from the start of the fit to the end of that
    scoring (the first test source's record holds the fit and one scoring, the second's both)."""
    from models.registry import MODELS, hyper_parameters

    records: list[dict[str, Any]] = []
    for seed in seeds:
        roots = {src: find_data_root(worlds[(src, seed)]) for src in SOURCES}
        for collection in collections:
            for name in models:
                kwargs = {"run.runs_dir": None} if "run.runs_dir" in hyper_parameters(MODELS[name]) else {}
                kwargs.update((params or {}).get(name, {}))
                for train_src in SOURCES:
                    t0 = time.perf_counter()
                    model = MODELS[name](**kwargs).fit(open_collection(roots[train_src], collection),
                                                       progress=False)
                    for test_src in SOURCES:
                        rows = graph_rows(model, roots[test_src], collection, Split.TEST)
                        records.append(dict(model=name, collection=collection.value, seed=seed, train=train_src,
                                            test=test_src, score=float(np.mean([r.score for r in rows])),
                                            oracle=float(np.mean([r.oracle for r in rows])), graphs=len(rows),
                                            seconds=round(time.perf_counter() - t0, 1)))
                        print(json.dumps(records[-1]), flush=True)
    return records


def format_table(records: Sequence[dict[str, Any]]) -> str:
    """Per collection: one line per (model, train source), a column per test source (mean over seeds), then the
    oracle of each test source."""
    lines = []
    for collection in dict.fromkeys(r["collection"] for r in records):
        of = [r for r in records if r["collection"] == collection]
        graphs = {t: sum(r["graphs"] for r in of if r["test"] == t and r["model"] == of[0]["model"]
                         and r["train"] == of[0]["train"]) for t in SOURCES}
        lines.append(f"{collection} (test graphs over the seeds: "
                     + ", ".join(f"{t} {graphs[t]}" for t in SOURCES) + ")")
        lines.append(f"  {'model':10s} {'trained on':10s} " + " ".join(f"{'test ' + t:>14s}" for t in SOURCES))
        for name in dict.fromkeys(r["model"] for r in of):
            for train in SOURCES:
                cells = []
                for test in SOURCES:
                    vals = [r["score"] for r in of if r["model"] == name and r["train"] == train and r["test"] == test]
                    cells.append(f"{np.mean(vals):14.4f}" if vals else f"{'':14s}")
                lines.append(f"  {name:10s} {train:10s} " + " ".join(cells))
        oracle = []
        for test in SOURCES:
            vals = [r["oracle"] for r in of if r["test"] == test and r["model"] == of[0]["model"]
                    and r["train"] == of[0]["train"]]
            oracle.append(f"{np.mean(vals):14.4f}")
        lines.append(f"  {'oracle':10s} {'':10s} " + " ".join(oracle))
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.transfer", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--scale", default="demo", choices=["tiny", "demo", "bench", "full"], help="world scale")
    parser.add_argument("--world-seeds", type=int, nargs="+", default=[0, 1], help="one pair of worlds per seed")
    parser.add_argument("--worlds-dir", default="data/transfer", help="where the worlds are generated or found")
    parser.add_argument("--collections", nargs="+", default=[Collection.LAYOUT_XLA_RANDOM.value,
                                                             Collection.TILE_XLA.value],
                        choices=[c.value for c in Collection], help="the collections fitted and scored")
    parser.add_argument("--models", nargs="+", default=["gbdt", "gnn-attn"], help="registered models, defaults")
    parser.add_argument("--workers", type=int, default=0, help="world generation processes (0: every core)")
    parser.add_argument("--json", default=None, metavar="FILE", help="also write the records as JSON")
    args = parser.parse_args(argv)
    from models.registry import MODELS

    unknown = [m for m in args.models if m not in MODELS]
    if unknown:
        parser.error(f"unknown model(s) {unknown}; registered: {sorted(MODELS)}")
    collections = [Collection(c) for c in args.collections]
    base = Path(args.worlds_dir)
    worlds = {(src, seed): make_world(base, args.scale, seed, src, collections, args.workers)
              for seed in args.world_seeds for src in SOURCES}
    records = transfer_cells(args.models, collections, worlds, args.world_seeds)
    print(format_table(records))
    if args.json:
        Path(args.json).write_text(json.dumps(records, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
