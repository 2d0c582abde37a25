"""Statistics of a data root, real or synthetic: what ``fastslow data stats`` prints.

Per collection: file counts per split; node, edge, configurable-node and config counts; the opcode histogram;
the distribution of runtime / best runtime within each graph; the share of duplicated configs; and, where the
``secret/`` tree holds noiseless runtimes (synthetic worlds), the oracle score: the competition metric of the
noiseless runtimes ranked against the noisy observed ones, a ceiling no model can pass.
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
from competition.errors import DataFileError
from competition.metrics import kendall_tau, predicted_order, top_k_score
from competition.npzio import NpzReader
from competition.opcodes import OPCODE_NAMES
from competition.protocol import DEFAULT_PROTOCOL, ValidProtocol
from competition.reader import DataRoot, list_graphs, load_graph

log = logging.getLogger(__name__)

_HASH_WEIGHTS = np.random.default_rng(12345).integers(1, 2**62, size=4096, dtype=np.int64)


def row_hashes(rows: npt.NDArray[np.floating]) -> npt.NDArray[np.int64]:
    """A 64-bit hash per row of small integer-valued features (config rows): equal rows, equal hashes.

    Args:
        rows: ``[n, ...]`` array; each row is flattened.

    Returns:
        int64 ``[n]``.
    """
    flat = np.rint(np.asarray(rows).reshape(rows.shape[0], -1) * 16).astype(np.int64)
    width = flat.shape[1]
    weights = np.resize(_HASH_WEIGHTS, width) * (np.arange(width, dtype=np.int64) | 1)
    with np.errstate(over="ignore"):
        return (flat * weights).sum(axis=1) ^ (flat.sum(axis=1) << 40)


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
    oracle: dict[str, list[float]] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)

    def ratio_quantiles(self) -> dict[str, float]:
        if not self.ratios:
            return {}
        r = np.concatenate(self.ratios)
        return {"median": float(np.median(r)), "p75": float(np.quantile(r, 0.75)),
                "p90": float(np.quantile(r, 0.9)), "max": float(r.max())}

    def oracle_score(self, split: str) -> float | None:
        vals = self.oracle.get(split)
        return float(np.mean(vals)) if vals else None


def _secret_path(root: DataRoot, collection: Collection, split: Split, stem: str) -> Path | None:
    p = root.secret_file(collection, split, stem)
    return p if p is not None and p.exists() else None


def _oracle(collection: Collection, secret: Path, observed: np.ndarray, normalizers: np.ndarray | None,
            subset: np.ndarray | None = None) -> float | None:
    with NpzReader(secret) as r:
        keys = r.keys()
        if "config_runtime_noiseless" not in keys:
            return None
        true_ns = r.load("config_runtime_noiseless")
        if "config_runtime" in keys:
            observed = r.load("config_runtime")
        if "config_runtime_normalizers" in keys:
            normalizers = r.load("config_runtime_normalizers")
        true_default = r.load("default_runtime_noiseless") if "default_runtime_noiseless" in keys else None
    if subset is not None:
        true_ns, observed = true_ns[subset], observed[subset]
        normalizers = None if normalizers is None else normalizers[subset]
    if collection.is_tile:
        y = observed / normalizers
        pred = true_ns / (float(true_default) if true_default is not None else 1.0)
        return top_k_score(predicted_order(pred), y)
    return kendall_tau(true_ns, observed)


def oracle_score(root: DataRoot, collection: Collection, split: Split,
                 protocol: ValidProtocol = DEFAULT_PROTOCOL) -> float | None:
    """Mean oracle score of one split of a collection, or ``None`` where no noiseless runtimes exist (real data).

    On the valid split only the protocol's configs of each graph are scored, as for a submission.
    """
    values = []
    for path in list_graphs(root, collection, split):
        secret = _secret_path(root, collection, split, path.stem)
        if secret is None:
            return None
        with NpzReader(path) as r:
            observed = r.load("config_runtime").astype(np.float64)
            normalizers = r.load("config_runtime_normalizers").astype(np.float64) if collection.is_tile else None
        subset = protocol.configs(collection, path.stem, observed.size, split)
        score = _oracle(collection, secret, observed, normalizers, subset)
        if score is None:
            return None
        values.append(score)
    return float(np.mean(values)) if values else None


def collection_stats(root: DataRoot, collection: Collection, *, progress: bool = True,
                     skip_bad: bool = False) -> CollectionStats:
    """Gather :class:`CollectionStats` over every split of one collection (streams large config arrays).

    A file that cannot be read raises :class:`DataFileError` naming it, or with ``skip_bad`` is left out, logged
    and listed in ``skipped``.
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
            st.duplicates += hashes.size - np.unique(hashes).size
            if not g.is_test and runtime.size and runtime.min() > 0:
                y = runtime / normalizers if normalizers is not None else runtime
                st.ratios.append(y / y.min())
                st.spreads.append(float(y.max() / y.min() - 1.0))
                if normalizers is not None:
                    st.best_over_default.append(float(y.min()))
                    st.worst_over_default.append(float(y.max()))
            secret = _secret_path(root, collection, split, path.stem)
            if secret is not None:
                score = _oracle(collection, secret, runtime, normalizers)
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
    if st.collection.is_layout:
        lines.append(f"configurable nodes    : {_q(st.config_nodes)}")
    lines.append(f"configs min/median/max: {_q(st.configs)}")
    total = sum(st.opcodes.values()) or 1
    top = ", ".join(f"{OPCODE_NAMES.get(int(k), k)} {v / total:.1%}" for k, v in st.opcodes.most_common(top_opcodes))
    lines.append(f"opcodes (top {top_opcodes})  : {top}")
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
    if st.skipped:
        lines.append(f"skipped (unreadable): {len(st.skipped)} file(s)")
    for split in (Split.VALID, Split.TEST, Split.TRAIN):
        score = st.oracle_score(split.value)
        if score is not None:
            lines.append(f"oracle score ({split.value:5s})  : {score:.4f} over {len(st.oracle[split.value])} graphs")
    return "\n".join(lines)
