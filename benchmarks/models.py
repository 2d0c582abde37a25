"""Model benchmarks: ``python -m benchmarks.models`` (part of ``make bench``).

Fits the GBDT baseline per collection on the demo world (generated once if missing) and prints the training time and
the valid score beside the default-first baseline's.
"""

from __future__ import annotations

import argparse
import time

from competition.collections import Collection, Split
from competition.metrics import predicted_order, score_graph
from competition.pipeline import DEFAULT_SYNTH_DIR, resolve_data
from competition.reader import list_graphs, load_graph
from models.registry import make_model


def _valid_score(model, root, collection: Collection) -> float:
    values = []
    for path in list_graphs(root, collection, Split.VALID):
        g = load_graph(path, collection)
        normalizers = g.config_runtime_normalizers if collection.is_tile else None
        values.append(score_graph(collection, predicted_order(model.predict(g)), g.config_runtime, normalizers).score)
    return sum(values) / len(values)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=None, help="data root (default: as make submit finds it)")
    args = ap.parse_args()
    root, _ = resolve_data(args.data, DEFAULT_SYNTH_DIR, progress=False)
    print(f"GBDT training on {root.root}")
    print(f"{'collection':20s} {'train graphs':>12s} {'fit s':>7s} {'gbdt valid':>11s} {'default-first':>14s}")
    for c in Collection:
        t0 = time.perf_counter()
        gbdt = make_model("gbdt").fit(root, c, progress=False)
        seconds = time.perf_counter() - t0
        base = make_model("default-first").fit(root, c, progress=False)
        print(f"{c.value:20s} {len(list_graphs(root, c, Split.TRAIN)):12d} {seconds:7.2f} "
              f"{_valid_score(gbdt, root, c):11.4f} {_valid_score(base, root, c):14.4f}")


if __name__ == "__main__":
    main()
