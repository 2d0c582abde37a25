"""Where a fitted model stands graph by graph: its score and the oracle's on every graph of the train, valid and test
splits of one collection of a synthetic world, with what the graph's configurable nodes are.

A fit's train-graph scores against its valid and test scores tell under-fitting (low on the graphs it trained on)
from a generalisation gap (high there, low elsewhere); the per-graph rows show which kinds of graph fall furthest
below their oracle::

    python -m benchmarks.per_graph --scale bench --world-seed 0 --collection layout:xla:default

On a synthetic world each graph is also scored against its noiseless runtimes (``clean``; the oracle scores 1
there): a model that ranks the truly fastest configs first scores 1 however the measurements fell, so the column
tells the model's own error from measurement luck (tile's top-5 slowdown is at the mercy of one lucky run).

The model is fitted with its defaults (early stopping on valid, as the pipeline does); nothing is written to
``runs/``. Train graphs are scored on every config, valid graphs on the valid protocol's, test graphs through the
world's hidden runtimes.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from competition.collections import Collection, Split
from competition.dataroot import DataRoot, find_data_root, list_graphs
from competition.dataset import open_collection
from competition.labels import load_labels
from competition.metrics import graph_score
from competition.opcodes import CONVOLUTION, DOT, RESHAPE
from competition.protocol import DEFAULT_PROTOCOL
from competition.reader import load_graph
from competition.stats import graph_noiseless_score, graph_oracle
from fastslow.worlds import world_dir


@dataclass(frozen=True)
class GraphRow:
    """One graph: its split and stem, sizes, configurable nodes by kind, scored configs, score and oracle, and the
    score against the noiseless runtimes (:func:`~competition.stats.graph_noiseless_score`; ``None`` on real
    data)."""

    split: Split
    stem: str
    nodes: int
    configurable: int
    convolutions: int
    dots: int
    reshapes: int
    configs: int
    score: float
    oracle: float | None
    noiseless: float | None = None


def graph_rows(model: Any, root: DataRoot, collection: Collection, split: Split) -> list[GraphRow]:
    """Score ``model`` (anything with ``predict(graph) -> scores``, lower = faster) on every graph of one split."""
    labels = load_labels(root, [collection], split, DEFAULT_PROTOCOL)
    rows = []
    for path in list_graphs(root, collection, split):
        graph = load_graph(path, collection)
        lab = labels[f"{collection.value}:{path.stem}"]
        scores = np.asarray(model.predict(graph))
        if lab.rows is not None:
            scores = scores[lab.rows]
        ops = graph.node_opcode
        kinds = ops[graph.node_config_ids] if not collection.is_tile else np.zeros(0, dtype=ops.dtype)
        rows.append(GraphRow(split, path.stem, len(ops), len(kinds), int((kinds == CONVOLUTION).sum()),
                             int((kinds == DOT).sum()), int((kinds == RESHAPE).sum()), len(lab.runtime),
                             graph_score(collection, lab.target(), scores=scores), graph_oracle(lab),
                             graph_noiseless_score(lab, scores)))
    return rows


def format_rows(rows: Sequence[GraphRow]) -> str:
    """One line per graph, then per split the mean score, the mean oracle and the mean score without noise
    (``clean``: against the noiseless runtimes, where the oracle scores 1)."""
    lines = [f"{'split':5s} {'graph':32s} {'nodes':>6s} {'conf':>5s} {'conv':>5s} {'dot':>5s} {'resh':>5s} "
             f"{'configs':>7s} {'score':>6s} {'oracle':>6s} {'clean':>6s}"]
    for r in rows:
        oracle = "" if r.oracle is None else f"{r.oracle:.3f}"
        clean = "" if r.noiseless is None else f"{r.noiseless:.3f}"
        lines.append(f"{r.split.value:5s} {r.stem[:32]:32s} {r.nodes:6d} {r.configurable:5d} {r.convolutions:5d} "
                     f"{r.dots:5d} {r.reshapes:5d} {r.configs:7d} {r.score:6.3f} {oracle:>6s} {clean:>6s}")
    for split in dict.fromkeys(r.split for r in rows):
        of = [r for r in rows if r.split == split]
        oracles = [r.oracle for r in of if r.oracle is not None]
        mean_oracle = f", oracle {np.mean(oracles):.4f}" if len(oracles) == len(of) else ""
        cleans = [r.noiseless for r in of if r.noiseless is not None]
        mean_clean = f", without noise {np.mean(cleans):.4f}" if len(cleans) == len(of) else ""
        lines.append(f"{split.value}: {len(of)} graphs, mean score {np.mean([r.score for r in of]):.4f}{mean_oracle}"
                     f"{mean_clean}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    from models.registry import MODELS

    parser = argparse.ArgumentParser(prog="python -m benchmarks.per_graph", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--scale", default="bench", choices=["tiny", "demo", "bench", "full"], help="world scale")
    parser.add_argument("--world-seed", type=int, default=0, help="world seed (generated once, then reused)")
    parser.add_argument("--worlds-dir", default="data", help="where the worlds are generated or found")
    parser.add_argument("--collection", default=Collection.LAYOUT_XLA_DEFAULT.value,
                        choices=[c.value for c in Collection], help="the collection fitted and scored")
    parser.add_argument("--model", default="gnn-attn", choices=sorted(MODELS), help="registered model, defaults")
    parser.add_argument("--param", action="append", default=[], metavar="KEY=VALUE",
                        help="a hyper-parameter of the model instead of its default (repeatable; the value a Python "
                             "literal, else text), e.g. --param dim_tokens=False --param steps_per_graph=16")
    args = parser.parse_args(argv)
    from models.registry import param_problem

    params: dict[str, Any] = {"runs_dir": None} if args.model.startswith("gnn") else {}
    for given in args.param:
        key, sep, text = given.partition("=")
        if not sep or not key:
            parser.error(f"--param {given!r}: expected KEY=VALUE")
        try:
            value = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            value = text
        if (problem := param_problem(MODELS[args.model], key, value)) is not None:
            parser.error(f"--param {given}: {problem}")
        params[key] = value
    from competition.synthetic.world import generate_world

    path = world_dir(args.scale, args.world_seed, args.worlds_dir)
    generate_world(path, scale=args.scale, seed=args.world_seed)
    root = find_data_root(path)
    collection = Collection(args.collection)
    model = MODELS[args.model](**params).fit(open_collection(root, collection), progress=False)
    rows = [row for split in (Split.TRAIN, Split.VALID, Split.TEST)
            for row in graph_rows(model, root, collection, split)]
    print(format_rows(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
