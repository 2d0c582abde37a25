"""What decides a layout graph's runtimes: the same figures for the real graph and for a world's graphs.

Run it as::

    python -m benchmarks.layout_structure                       # the real graph and the demo world
    python -m benchmarks.layout_structure --data ROOT [ROOT ...] --collection layout:xla:random

For each graph, the figures of :mod:`competition.layout_structure` (its docstring defines them).
The world's line is the median over its graphs of the collection and split.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

import numpy as np

from competition.collections import Collection, Split
from competition.dataroot import find_data_root, list_graphs
from competition.layout_structure import FIGURES, Structure, graph_structure, structure
from competition.reader import load_graph

HEADERS = ("groups", "additive", "tau-add", "output", "top", "2nd", ">1%", "<0.2%", "<5%", "p90")

def world_structures(root: Path, collection: Collection, split: Split, limit: int | None,
                     max_configs: int) -> list[Structure]:
    """:func:`graph_structure` of each of the first ``limit`` graphs of a world's collection and split."""
    data = find_data_root(root)
    return [graph_structure(load_graph(p, collection), max_configs)
            for p in list_graphs(data, collection, split)[:limit]]


def format_row(label: str, s: Structure | dict[str, float]) -> str:
    d = asdict(s) if isinstance(s, Structure) else s
    return f"{label:34s}" + "".join(f"{d[f]:>9.3f}" if isinstance(d[f], float) else f"{d[f]:>9d}" for f in FIGURES)


def median(structures: Sequence[Structure]) -> dict[str, float]:
    """The median of each figure over graphs."""
    return {f: float(np.median([getattr(s, f) for s in structures])) for f in FIGURES}


def main(argv: Sequence[str] | None = None) -> int:
    from competition.real_layout import restore_arrays

    parser = argparse.ArgumentParser(prog="python -m benchmarks.layout_structure", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--data", nargs="*", default=["data/synthetic-demo"], metavar="ROOT",
                        help="world roots whose graphs are measured beside the real one")
    parser.add_argument("--collection", default=Collection.LAYOUT_XLA_RANDOM.value,
                        choices=[c.value for c in Collection if c.is_layout], help="the worlds' collection")
    parser.add_argument("--split", default=Split.TRAIN.value, choices=[s.value for s in Split if s != Split.TEST],
                        help="the worlds' split")
    parser.add_argument("--limit", type=int, default=None, metavar="N", help="the first N graphs of each world")
    parser.add_argument("--max-configs", type=int, default=6000, metavar="N",
                        help="at most N distinct configs of a graph are fitted (a seeded sample)")
    args = parser.parse_args(argv)
    arrays = restore_arrays()
    print(f"{'graph':34s}" + "".join(f"{h:>9s}" for h in HEADERS))
    print(format_row("real: alexnet (layout:xla:random)", structure(arrays["node_config_feat"],
                                                                    arrays["config_runtime"], args.max_configs)))
    for root in args.data:
        found = world_structures(Path(root), Collection(args.collection), Split(args.split), args.limit,
                                 args.max_configs)
        if not found:
            print(f"{root}: no {args.collection} {args.split} graphs", file=sys.stderr)
            continue
        print(format_row(f"world {Path(root).name} (median of {len(found)})", median(found)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
