"""Statistics of a data root, real or synthetic: what ``fastslow data stats`` prints.

Per collection: file counts per split; node, edge, configurable-node and config counts, edges per node and
``node_splits`` segments; the opcode histogram; the distribution of runtime / best runtime within each graph; the
share of duplicated configs (overall and per graph) and how much re-measured configs differ; and, where the
``secret/`` tree holds noiseless runtimes (synthetic worlds), the oracle score: the score of the submission that
ranks the configs by their noiseless runtimes, against the noisy observed ones, a ceiling no model can pass.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import numpy.typing as npt
from tqdm.auto import tqdm

from competition.collections import Collection, Split
from competition.dataroot import DataRoot, list_graphs
from competition.errors import DataFileError
from competition.labels import GraphLabels, SplitLabels, graph_labels
from competition.metrics import graph_score
from competition.opcodes import OPCODE_IDS, OPCODE_NAMES
from competition.protocol import ValidProtocol
from competition.reader import load_graph
from competition.schema import row_hashes

log = logging.getLogger(__name__)

@dataclass
class CollectionStats:
    """Everything ``data stats`` reports for one collection."""

    collection: Collection
    files: dict[str, int] = field(default_factory=dict)
    nodes: list[int] = field(default_factory=list)
    edges: list[int] = field(default_factory=list)
    config_nodes: list[int] = field(default_factory=list)
    configs: list[int] = field(default_factory=list)
    opcodes: Counter = field(default_factory=Counter)
    ratios: list[npt.NDArray[np.float64]] = field(default_factory=list)
    spreads: list[float] = field(default_factory=list)
    best_over_default: list[float] = field(default_factory=list)
    worst_over_default: list[float] = field(default_factory=list)
    duplicates: int = 0
    duplicate_rows: int = 0
    duplicate_shares: list[float] = field(default_factory=list)
    repeat_diffs: list[npt.NDArray[np.float64]] = field(default_factory=list)
    repeat_spreads: list[float] = field(default_factory=list)
    segments: list[int] = field(default_factory=list)
    oracle: dict[str, list[float]] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)

    def ratio_quantiles(self) -> dict[str, float]:
        if not self.ratios:
            return {}
        r = np.concatenate(self.ratios)
        return {"median": float(np.median(r)), "p75": float(np.quantile(r, 0.75)),
                "p90": float(np.quantile(r, 0.9)), "max": float(r.max())}

    def opcode_share(self, *names: str) -> float:
        """Share of all nodes whose opcode is one of ``names``."""
        ids = {OPCODE_IDS[name] for name in names}
        return sum(v for k, v in self.opcodes.items() if k in ids) / max(sum(self.opcodes.values()), 1)

    def oracle_score(self, split: str) -> float | None:
        vals = self.oracle.get(split)
        return float(np.mean(vals)) if vals else None


def repeat_differences(hashes: npt.NDArray[np.int64],
                       runtime: npt.NDArray[np.float64]) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """How much re-measured configs differ: for every row repeating an earlier one (equal ``hashes``), the relative
    difference ``|runtime / first runtime - 1|`` to the group's first row; and per group of equal rows, its spread
    ``max / min - 1``.

    Returns:
        ``(differences, spreads)``, float64, empty when no row repeats.
    """
    _, first, inverse = np.unique(hashes, return_index=True, return_inverse=True)
    again = np.arange(hashes.size) != first[inverse]
    if not again.any():
        return np.zeros(0), np.zeros(0)
    base = runtime[first[inverse]]
    diffs = np.abs(runtime[again] / base[again] - 1.0)
    groups = np.unique(inverse[again])
    lo = np.full(first.size, np.inf)
    hi = np.zeros(first.size)
    np.minimum.at(lo, inverse, runtime)
    np.maximum.at(hi, inverse, runtime)
    return diffs, hi[groups] / lo[groups] - 1.0


def _secret_path(root: DataRoot, collection: Collection, split: Split, stem: str) -> Path | None:
    p = root.secret_file(collection, split, stem)
    return p if p is not None and p.exists() else None


def graph_oracle(labels: GraphLabels) -> float | None:
    """The oracle score of one graph: :func:`~competition.metrics.graph_score` of the noiseless runtimes taken as
    predicted scores (ties broken by config index, as any submission's are); ``None`` without noiseless runtimes."""
    if labels.noiseless is None:
        return None
    return graph_score(labels.collection, labels.target(), scores=labels.noiseless, picks=labels.picks)


def graph_noiseless_score(labels: GraphLabels, scores: npt.ArrayLike) -> float | None:
    """How a submission's ``scores`` of one graph would score without measurement noise:
    :func:`~competition.metrics.graph_score` against the noiseless runtimes instead of the measured ones (the
    oracle's is 1 by construction); ``None`` without noiseless runtimes. Beside the measured score it tells a
    model's own error from the luck of the measurements: a tile kernel whose repeated runs spread widely can cost a
    model that picks the truly fastest configs a whole point of the top-5 slowdown."""
    if labels.noiseless is None:
        return None
    return graph_score(labels.collection, labels.noiseless, scores=np.asarray(scores, dtype=np.float64),
                       picks=labels.picks)


def oracle_scores(labels: SplitLabels) -> dict[Collection, float] | None:
    """Mean oracle score per collection of a split's labels (on the valid protocol's configs, as a submission is
    scored); a collection with a graph lacking noiseless runtimes is left out, ``None`` when none is left (real
    data)."""
    values: dict[Collection, list[float | None]] = {}
    for lab in labels.values():
        values.setdefault(lab.collection, []).append(graph_oracle(lab))
    out = {c: float(np.mean(v)) for c, v in values.items() if None not in v}
    return out or None


def collection_stats(root: DataRoot, collection: Collection, *, progress: bool = True,
                     skip_bad: bool = False) -> CollectionStats:
    """Gather :class:`CollectionStats` over every split of one collection (streams large config arrays).

    A file that cannot be read raises :class:`DataFileError` naming it, or with ``skip_bad`` is left out, logged
    and listed in ``skipped``. A folder or graph file leading outside the data root is refused whatever
    ``skip_bad`` says (:func:`competition.dataroot.list_graphs`): nothing there is read, not even its name.
    """
    st = CollectionStats(collection)
    for split in Split:
        paths = list_graphs(root, collection, split)
        st.files[split.value] = len(paths)
        for path in tqdm(paths, desc=f"{collection.value} {split.value}", disable=not progress, leave=False):
            try:
                g = load_graph(path, collection, validate=False)
            except DataFileError as exc:
                if not skip_bad:
                    raise
                log.warning("skipping %s", exc)
                st.skipped.append(str(exc))
                continue
            st.nodes.append(g.num_nodes)
            st.edges.append(g.num_edges)
            st.configs.append(g.num_configs)
            ops, counts = np.unique(g.node_opcode, return_counts=True)
            st.opcodes.update(dict(zip(ops.tolist(), counts.tolist(), strict=True)))
            runtime = g.config_runtime.astype(np.float64)
            if collection.is_tile:
                normalizers = g.config_runtime_normalizers.astype(np.float64)
                hashes = row_hashes(g.config_feat)
            else:
                normalizers = None
                st.config_nodes.append(g.num_config_nodes)
                hashes = np.concatenate([row_hashes(b) for _, b in g.iter_config_blocks()])
            st.duplicate_rows += hashes.size
            repeats = hashes.size - np.unique(hashes).size
            st.duplicates += repeats
            st.duplicate_shares.append(repeats / max(hashes.size, 1))
            if not collection.is_tile:
                st.segments.append(int(g.node_splits.size) - 1)
            if not g.is_test and repeats and runtime.min() > 0:
                diffs, spreads = repeat_differences(hashes, runtime)
                st.repeat_diffs.append(diffs)
                st.repeat_spreads.extend(spreads.tolist())
            if not g.is_test and runtime.size and runtime.min() > 0:
                y = runtime / normalizers if normalizers is not None else runtime
                st.ratios.append(y / y.min())
                st.spreads.append(float(y.max() / y.min() - 1.0))
                if normalizers is not None:
                    st.best_over_default.append(float(y.min()))
                    st.worst_over_default.append(float(y.max()))
            try:
                # A secret file that leads out of the data root is refused as an unreadable one is.
                secret = _secret_path(root, collection, split, path.stem)
                score = None if secret is None else graph_oracle(graph_labels(root, collection, split, path,
                                                                              ValidProtocol(None)))
            except DataFileError as exc:
                if not skip_bad:
                    raise
                log.warning("no oracle score: %s", exc)
                continue
            if score is not None:
                st.oracle.setdefault(split.value, []).append(score)
    return st


def _q(values: list[int] | list[float]) -> str:
    if not values:
        return "-"
    a = np.asarray(values, dtype=np.float64)
    return f"{a.min():,.0f} / {np.median(a):,.0f} / {a.max():,.0f}"


def format_stats(st: CollectionStats, top_opcodes: int = 12) -> str:
    """A readable block of text for one collection."""
    lines = [f"== {st.collection.value} ==",
             "files (train/valid/test): " + " / ".join(str(st.files.get(s.value, 0)) for s in Split)]
    lines.append(f"nodes   min/median/max: {_q(st.nodes)}")
    lines.append(f"edges   min/median/max: {_q(st.edges)}")
    if st.nodes:
        per = np.asarray(st.edges, dtype=np.float64) / np.maximum(np.asarray(st.nodes, dtype=np.float64), 1)
        lines.append(f"edges per node        : {per.min():.2f} / {np.median(per):.2f} / {per.max():.2f}")
    if st.segments:
        lines.append(f"node_splits segments  : {_q(st.segments)}")
    if st.collection.is_layout:
        lines.append(f"configurable nodes    : {_q(st.config_nodes)}")
    lines.append(f"configs min/median/max: {_q(st.configs)}")
    total = sum(st.opcodes.values()) or 1
    top = ", ".join(f"{OPCODE_NAMES.get(int(k), k)} {v / total:.1%}" for k, v in st.opcodes.most_common(top_opcodes))
    lines.append(f"opcodes (top {top_opcodes})  : {top}")
    if st.opcodes:
        lines.append(f"select+compare {st.opcode_share('select', 'compare'):.1%}, "
                     f"constant {st.opcode_share('constant'):.1%} of nodes")
    q = st.ratio_quantiles()
    if q:
        what = "runtime/best (normalised)" if st.collection.is_tile else "runtime/best"
        lines.append(f"{what}: median {q['median']:.4f}, p75 {q['p75']:.4f}, p90 {q['p90']:.3f}, max {q['max']:.2f}")
        lines.append(f"per-graph spread (worst/best - 1): median {np.median(st.spreads):.2%}, "
                     f"min {np.min(st.spreads):.2%}")
    if st.best_over_default:
        lines.append(f"best/default: {np.min(st.best_over_default):.3f} .. {np.max(st.best_over_default):.3f}; "
                     f"worst/default: {np.min(st.worst_over_default):.2f} .. {np.max(st.worst_over_default):.2f}")
    if st.duplicate_rows:
        lines.append(f"duplicated configs    : {st.duplicates / st.duplicate_rows:.1%} of {st.duplicate_rows:,} rows")
        shares = np.asarray(st.duplicate_shares)
        lines.append(f"duplicates per graph  : median {np.median(shares):.2%}, p90 {np.quantile(shares, 0.9):.1%}, "
                     f"max {shares.max():.2%}; {int((shares >= 0.5).sum())} of {shares.size} graphs at 50% or more")
    if st.repeat_diffs:
        d = np.concatenate(st.repeat_diffs)
        lines.append(f"re-measured configs   : differ by median {np.median(d):.3%}, p90 {np.quantile(d, 0.9):.3%}, "
                     f"max {d.max():.2%} ({d.size:,} repeats); a group's runs spread at most "
                     f"{1 + max(st.repeat_spreads):.2f}x")
    if st.skipped:
        lines.append(f"skipped (unreadable): {len(st.skipped)} file(s)")
    for split in (Split.VALID, Split.TEST, Split.TRAIN):
        score = st.oracle_score(split.value)
        if score is not None:
            lines.append(f"oracle score ({split.value:5s})  : {score:.4f} over {len(st.oracle[split.value])} graphs")
    return "\n".join(lines)
