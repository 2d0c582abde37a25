"""The labels of a split: what each graph's configs are ranked by, read once per run.

One owner for targets. Everything that scores (a submission file, the pipeline's in-memory predictions, the oracle,
the ensemble's fitting and cross-validation, the report) takes a graph's runtimes and its *target*, the array its
configs are ranked by, from here:

* tile: ``config_runtime / config_runtime_normalizers`` (:func:`ranking_target`), as the official README ranks them;
* layout: ``config_runtime`` in ns.

:func:`load_labels` reads them for a split, keyed by submission ID: train and valid labels from the graph files
(only the runtime members, never ``node_config_feat``), test labels from a synthetic world's ``secret/`` tree (the
Kaggle test split keeps them hidden: :class:`HiddenLabelsError`). On the valid split it keeps the valid protocol's
configs of each layout graph only (:mod:`competition.protocol`), and says which (:attr:`GraphLabels.rows`) and, under
index files that repeat indices, how often each counts (:attr:`GraphLabels.picks`). Where the
``secret/`` tree also holds the noiseless runtimes (synthetic worlds), they come along for the oracle score.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from competition.collections import Collection, Split, submission_id
from competition.dataroot import DataRoot, list_graphs, load_secret_runtime
from competition.graphfile import load_runtimes
from competition.npzio import NpzReader
from competition.protocol import DEFAULT_PROTOCOL, ValidProtocol
from competition.reader import LayoutGraph
from competition.schema import row_hashes
from competition.targets import ranking_target

if TYPE_CHECKING:
    from competition.reader import TileGraph


class HiddenLabelsError(ValueError):
    """A split whose runtimes are hidden (the Kaggle test split) was asked to be scored."""


def graph_target(graph: TileGraph | LayoutGraph) -> npt.NDArray[np.float64]:
    """:func:`ranking_target` of a graph record read with :func:`competition.reader.load_graph` (of its selected
    configs when restricted with ``select_configs``)."""
    return ranking_target(graph.config_runtime, getattr(graph, "config_runtime_normalizers", None))


def _first_appearance(keys: npt.NDArray[np.int64]) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    _, first, group = np.unique(keys, return_index=True, return_inverse=True)
    order = np.argsort(first)
    rank = np.empty_like(order)
    rank[order] = np.arange(order.size)
    return first[order].astype(np.int64), rank[group.reshape(-1)].astype(np.int64)


def distinct_groups(config_feat: npt.ArrayLike) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Runs (configs) with the same features grouped, in order of first appearance (tile ``config_feat`` or layout
    ``node_config_feat`` rows alike).

    Returns:
        ``(first [D], group [C])``: each distinct config's first run, ascending, and each run's distinct config.
    """
    rows = np.asarray(config_feat)
    return _first_appearance(row_hashes(rows.reshape(len(rows), -1)))


def graph_distinct_groups(graph: TileGraph | LayoutGraph) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """:func:`distinct_groups` of a graph's configs; a layout file's configs are read block by block (memory: a
    block and 8 bytes a config)."""
    if not isinstance(graph, LayoutGraph):
        return distinct_groups(graph.config_feat)
    keys = [row_hashes(block.reshape(len(block), -1)) for _, block in graph.iter_config_blocks()]
    return _first_appearance(np.concatenate([np.zeros(0, dtype=np.int64), *keys]))


def distinct_target(graph: TileGraph | LayoutGraph) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]:
    """A graph's distinct configs and what each is ranked by, its repeats' mean :func:`graph_target`.

    Returns:
        ``(first [D], target [D])``: each distinct config's first run (ascending) and its mean target.
    """
    first, group = graph_distinct_groups(graph)
    target = np.bincount(group, weights=graph_target(graph), minlength=first.size)
    return first, target / np.bincount(group, minlength=first.size)


@dataclass(frozen=True, eq=False)
class GraphLabels:
    """The labels of one graph: the runtimes of the configs that are scored, and what they are ranked by.

    Attributes:
        collection: the graph's collection.
        stem: the npz file stem.
        runtime: int64 ``[C']`` runtimes in ns of the scored configs.
        normalizers: int64 ``[C']`` tile normalizers, ``None`` for layout.
        rows: int64 ``[C']`` ascending: the file's config index of each label, when the valid protocol scores a
            subset; ``None`` when every config is scored (then ``C' = C``).
        num_configs: C, the configs in the file.
        noiseless: float64 ``[C']`` what the configs would be ranked by without measurement noise (synthetic worlds'
            ``secret/``; tile: noiseless runtime over the noiseless default runtime), for the oracle; ``None``
            on real data.
        picks: int64 positions into the scored configs, one per index the valid protocol's index files list for
            the graph, repeats included: the metric is taken over ``values[picks]``, as the official evaluation
            takes it (:meth:`~competition.protocol.ValidProtocol.picks`); ``None``: each scored config counts once.
    """

    collection: Collection
    stem: str
    runtime: npt.NDArray[np.int64]
    normalizers: npt.NDArray[np.int64] | None
    rows: npt.NDArray[np.int64] | None
    num_configs: int
    noiseless: npt.NDArray[np.float64] | None = None
    picks: npt.NDArray[np.int64] | None = None

    @property
    def id(self) -> str:
        """The submission ID, ``<collection>:<stem>``."""
        return submission_id(self.collection, self.stem)

    def target(self, *, raw: bool = False) -> npt.NDArray[np.float64]:
        """float64 ``[C']``: what the scored configs are ranked by (:func:`ranking_target`); ``raw``: tile ranked on
        raw runtimes instead of normalised ones."""
        return ranking_target(self.runtime, None if raw else self.normalizers)

    def local_order(self, order: npt.ArrayLike) -> npt.NDArray[np.int64]:
        """A submitted order (the file's config indices, fastest first) as positions into the scored configs.

        Without a subset this is the order itself; with one, the configs outside it are dropped (a full
        permutation of ``range(C)`` is scored on the subset in its own order).
        """
        order = np.asarray(order, dtype=np.int64)
        if self.rows is None:
            return order
        kept = order[np.isin(order, self.rows)]
        return np.searchsorted(self.rows, kept).astype(np.int64)


class SplitLabels(Mapping[str, GraphLabels]):
    """The labels of the graphs of one split, keyed by submission ID (in collection, then file order).

    Args:
        split: the split.
        protocol: the valid protocol the labels honour (on the valid split).
        graphs: the labels of each graph.
    """

    def __init__(self, split: Split, protocol: ValidProtocol, graphs: Iterable[GraphLabels]) -> None:
        self.split = Split(split)
        self.protocol = protocol
        self._graphs = {g.id: g for g in graphs}

    def __getitem__(self, sid: str) -> GraphLabels:
        return self._graphs[sid]

    def __iter__(self) -> Iterator[str]:
        return iter(self._graphs)

    def __len__(self) -> int:
        return len(self._graphs)

    def __repr__(self) -> str:
        return f"SplitLabels({self.split.value}, {self.protocol.tag}, {len(self)} graphs)"

    @property
    def collections(self) -> list[Collection]:
        """The collections with at least one graph, in :class:`Collection` order."""
        present = {g.collection for g in self._graphs.values()}
        return [c for c in Collection if c in present]

    def of(self, collections: Iterable[Collection]) -> SplitLabels:
        """The labels of these collections only."""
        wanted = {Collection(c) for c in collections}
        return SplitLabels(self.split, self.protocol, (g for g in self._graphs.values() if g.collection in wanted))

    def targets(self, *, raw: bool = False) -> dict[str, npt.NDArray[np.float64]]:
        """``{ID: float64 [C']}``: what each graph's scored configs are ranked by."""
        return {sid: g.target(raw=raw) for sid, g in self._graphs.items()}

    def picks(self) -> dict[str, npt.NDArray[np.int64] | None]:
        """``{ID: positions into its targets, repeats included}`` of the graphs the official valid protocol scores
        over its listed indices (``None``: each scored config once)."""
        return {sid: g.picks for sid, g in self._graphs.items()}

    def rows(self) -> dict[str, npt.NDArray[np.int64] | None]:
        """``{ID: the file's config index of each label}`` (``None``: every config): how predictions on the
        scored configs map to the file's configs when written."""
        return {sid: g.rows for sid, g in self._graphs.items()}


def _noiseless(root: DataRoot, collection: Collection, split: Split, stem: str,
               rows: npt.NDArray[np.int64] | None) -> npt.NDArray[np.float64] | None:
    secret = root.secret_file(collection, split, stem)
    if secret is None or not secret.is_file():
        return None
    with NpzReader(secret) as r:
        keys = r.keys()
        if "config_runtime_noiseless" not in keys:
            return None
        true_ns = r.load("config_runtime_noiseless")
        default = r.load("default_runtime_noiseless") if "default_runtime_noiseless" in keys else None
    if rows is not None:
        true_ns = true_ns[rows]
    if collection.is_tile:
        return true_ns / (float(default) if default is not None else 1.0)
    return np.asarray(true_ns, dtype=np.float64)


def graph_labels(root: DataRoot, collection: Collection, split: Split, path: Path,
                 protocol: ValidProtocol = DEFAULT_PROTOCOL) -> GraphLabels:
    """The labels of one graph file of ``split``; see :func:`load_labels`."""
    collection, split, path = Collection(collection), Split(split), Path(path)
    if split == Split.TEST:
        secret = root.secret_file(collection, split, path.stem)
        if secret is None or not secret.is_file():
            raise HiddenLabelsError(
                f"{submission_id(collection, path.stem)}: test runtimes are hidden (no "
                f"{secret or root.root / 'secret'}); only synthetic worlds ship them in secret/. On real data score "
                "the valid split instead.")
        s = load_secret_runtime(root, collection, path.stem, split=split)
        runtime, normalizers = s.config_runtime, s.config_runtime_normalizers
    else:
        runtime, normalizers = load_runtimes(path, collection)
    rows = protocol.configs(collection, path.stem, runtime.size, split)
    num_configs = runtime.size
    if rows is not None:
        runtime, normalizers = runtime[rows], None if normalizers is None else normalizers[rows]
    return GraphLabels(collection, path.stem, runtime, normalizers, rows, num_configs,
                       _noiseless(root, collection, split, path.stem, rows),
                       protocol.picks(collection, path.stem, num_configs, split))


def load_labels(root: DataRoot, collections: Sequence[Collection], split: Split,
                protocol: ValidProtocol = DEFAULT_PROTOCOL) -> SplitLabels:
    """The labels of every graph of a split in these collections; load them once per run and pass them on.

    Args:
        root: the data root.
        collections: the collections to read.
        split: train and valid labels come from the graph files (the runtime members only), test labels from the
            ``secret/`` tree of a synthetic world.
        protocol: on the valid split, which configs of each layout graph are kept.

    Returns:
        The :class:`SplitLabels`.

    Raises:
        HiddenLabelsError: a test graph without a secret file (real data: the labels are hidden).
        EvalIndicesError: the protocol's index files list none of a collection's valid graphs
            (:meth:`~competition.protocol.ValidProtocol.check_listed`).
        DataFileError: a file that cannot be read, or whose runtimes are missing, malformed, or (train, valid)
            all zero.
    """
    split = Split(split)
    paths = {c: list_graphs(root, c, split) for c in collections}
    if split == Split.VALID:  # index files that list none of the graphs are refused before any is read
        for c, found in paths.items():
            protocol.check_listed(c, [p.stem for p in found])
    return SplitLabels(split, protocol, (graph_labels(root, c, split, p, protocol)
                                         for c, found in paths.items() for p in found))
