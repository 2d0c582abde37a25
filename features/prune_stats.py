"""How much a pruning pipeline keeps: nodes and edges before and after, per collection, and its speed (what
``fastslow features prune-stats`` prints and the HTML report plots)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from torch_geometric.transforms import BaseTransform
from tqdm.auto import tqdm

from competition.collections import Collection
from competition.dataset import SplitGraphs
from features.data import graph_to_data


@dataclass
class PruningRow:
    """Totals over one collection's graphs of one split."""

    collection: Collection
    graphs: int = 0
    nodes_before: int = 0
    nodes_after: int = 0
    edges_before: int = 0
    edges_after: int = 0
    seconds: float = 0.0

    @property
    def nodes_per_second(self) -> float:
        return self.nodes_before / self.seconds if self.seconds > 0 else float("inf")


def pruning_stats(splits: Sequence[SplitGraphs], transform: BaseTransform, *,
                  progress: bool = True) -> list[PruningRow]:
    """Apply ``transform`` to every graph of each of ``splits`` (nodes and edges only: no configs are read) and total
    the sizes: one row per item of ``splits`` (one split of a collection each,
    :func:`competition.dataset.open_split`).

    ``seconds`` counts the transform alone, not the reading.
    """
    rows = []
    for graphs in splits:
        c = graphs.collection
        row = PruningRow(c)
        for graph in tqdm(graphs, desc=f"prune {c.value}", disable=not progress, leave=False):
            data = graph_to_data(graph, config_rows=[])
            row.nodes_before += data.num_nodes
            row.edges_before += data.edge_index.shape[1]
            t0 = time.perf_counter()
            out = transform(data)
            row.seconds += time.perf_counter() - t0
            row.nodes_after += out.num_nodes
            row.edges_after += out.edge_index.shape[1]
            row.graphs += 1
        rows.append(row)
    return rows


def format_pruning_stats(rows: Sequence[PruningRow], transform: BaseTransform) -> str:
    """A table of :func:`pruning_stats`'s rows."""
    lines = [f"pipeline: {transform!r}".replace("\n", " "),
             f"{'collection':20s} {'graphs':>6s} {'nodes before':>13s} {'after':>9s} {'kept':>6s} "
             f"{'edges before':>13s} {'after':>9s} {'kept':>6s} {'nodes/s':>11s}"]
    for r in rows:
        nk = r.nodes_after / r.nodes_before if r.nodes_before else 1.0
        ek = r.edges_after / r.edges_before if r.edges_before else 1.0
        lines.append(f"{r.collection.value:20s} {r.graphs:6d} {r.nodes_before:13,d} {r.nodes_after:9,d} {nk:6.1%} "
                     f"{r.edges_before:13,d} {r.edges_after:9,d} {ek:6.1%} {r.nodes_per_second:11,.0f}")
    return "\n".join(lines)
