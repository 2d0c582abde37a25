"""What models are fitted on: the graphs of each collection's splits, listed once, without the data root.

The pipeline (and ``fastslow train``) opens the data once (:meth:`Dataset.open`): each collection's train, valid and
test folders are listed once, into a :class:`CollectionData` per collection. A model's
:meth:`~models.base.RankingModel.fit` takes one :class:`CollectionData` and never lists a folder nor sees the data
root: it reads the graphs it is given (:class:`SplitGraphs`, read lazily, one file at a time), early-stops on the
graphs it is given (:attr:`CollectionData.eval`), on the configs the valid protocol it is given chooses
(:attr:`CollectionData.protocol`).

The data root stays inside :class:`SplitGraphs`, private. What the processed-graph cache
(:class:`features.cache.ProcessedGraphs`) and a GNN run's data key need of it is given as an opaque key
(:attr:`SplitGraphs.data_id`) and each file's path relative to the root (:meth:`SplitGraphs.relpath`), so caches and
runs keep the names they had when they were keyed by the root itself.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from competition.collections import Collection, Split
from competition.dataroot import DataRoot, Listing, listed_graphs
from competition.labels import GraphLabels, SplitLabels, graph_labels
from competition.npzio import NpzReader
from competition.protocol import DEFAULT_PROTOCOL, ValidProtocol
from competition.reader import LayoutGraph, TileGraph, load_graph

Graph = TileGraph | LayoutGraph


@dataclass(frozen=True)
class SplitGraphs(Sequence[Graph]):
    """The graph files of one collection and split, listed once; a sequence of graphs, each read when asked for.

    Build it with :func:`open_split` (or :meth:`Dataset.open`), which lists the folder; indexing reads that file
    (:func:`competition.reader.load_graph`), iterating reads one file at a time.

    Attributes:
        collection: the collection.
        split: the split.
        paths: the npz files, sorted by stem (:func:`competition.dataroot.list_graphs`).
    """

    collection: Collection
    split: Split
    paths: tuple[Path, ...]
    _root: DataRoot = field(repr=False)

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int) -> Graph:  # type: ignore[override]
        """Graph ``index``, read from its file now (nothing is kept)."""
        return load_graph(self.paths[index], self.collection)

    def __iter__(self) -> Iterator[Graph]:
        for path in self.paths:
            yield load_graph(path, self.collection)

    @property
    def stems(self) -> list[str]:
        """Graph names (file stems), in order."""
        return [p.stem for p in self.paths]

    @property
    def folder(self) -> Path:
        """The folder the files were listed from, for messages."""
        return self._root.collection_dir(self.collection, self.split)

    @property
    def data_id(self) -> str:
        """An opaque key naming the data these graphs come from (the data root's path as text): part of the cache
        and run keys, so that two data roots (two synthetic worlds) never share a cache folder or a run. Not for
        reading files: every file of the split is in :attr:`paths`."""
        return str(self._root.root)

    def labels(self, protocol: ValidProtocol = DEFAULT_PROTOCOL) -> list[GraphLabels]:
        """Each graph's labels, in order (:func:`competition.labels.graph_labels`: test labels from a synthetic
        world's ``secret/`` tree), the valid split's on the configs ``protocol`` keeps."""
        return [graph_labels(self._root, self.collection, self.split, p, protocol) for p in self.paths]

    def relpath(self, path: str | os.PathLike[str]) -> str:
        """``path`` relative to the data root, POSIX form: what names a file in the cache keys."""
        return Path(os.path.relpath(path, self._root.root)).as_posix()

    def subset(self, indices: Sequence[int]) -> SplitGraphs:
        """The graphs at ``indices`` (in that order), without listing the folder again."""
        return SplitGraphs(self.collection, self.split, tuple(self.paths[i] for i in indices), self._root)

    def header_rows(self, member: str) -> list[int]:
        """Per file, the number of rows of array ``member`` (e.g. ``config_runtime``: the configs,
        ``node_opcode``: the nodes), read from the npz headers only."""
        out = []
        for path in self.paths:
            with NpzReader(path) as r:
                out.append(int(r.info(member).shape[0]))
        return out


def open_split(root: DataRoot, collection: Collection | str, split: Split | str, *,
               listing: Listing | None = None) -> SplitGraphs:
    """The graphs of one collection and split of ``root``, the folder listed now (empty when it is missing), or
    taken from ``listing`` (:class:`~competition.dataroot.Listing`) when given.

    Raises:
        OSError: the folder exists but cannot be listed.
    """
    collection, split = Collection(collection), Split(split)
    return SplitGraphs(collection, split, tuple(listed_graphs(root, collection, split, listing)), root)


@dataclass(frozen=True)
class CollectionData:
    """Everything a model is fitted on for one collection: what :meth:`~models.base.RankingModel.fit` takes.

    Attributes:
        collection: the collection the model will rank.
        train: the graphs learned from (their runtimes must be known).
        eval: the graphs early stopping scores, in models that stop early (the GBDT's rounds, the GNN's kept epoch),
            on the configs :attr:`protocol` chooses; ``None`` for no early stopping. It may be empty.
        valid: the valid split's graphs, which the caller predicts after the fit.
        test: the test split's graphs, which the caller predicts after the fit.
        protocol: which configs of each valid layout graph are scored, by early stopping and by the caller.
    """

    collection: Collection
    train: SplitGraphs
    eval: SplitGraphs | None
    valid: SplitGraphs
    test: SplitGraphs
    protocol: ValidProtocol = DEFAULT_PROTOCOL

    def __post_init__(self) -> None:
        parts = [self.train, self.valid, self.test] + ([] if self.eval is None else [self.eval])
        wrong = [p for p in parts if p.collection != self.collection]
        if wrong:
            raise ValueError(f"graphs of {self.collection.value} expected; found {wrong[0].collection.value} "
                             f"({wrong[0].split.value})")

    @property
    def predicted(self) -> tuple[SplitGraphs, SplitGraphs]:
        """The graphs the caller predicts after the fit: :attr:`valid`, then :attr:`test`."""
        return self.valid, self.test


def open_collection(root: DataRoot, collection: Collection | str, *, eval_split: Split | None = Split.VALID,
                    protocol: ValidProtocol = DEFAULT_PROTOCOL, listing: Listing | None = None) -> CollectionData:
    """One collection of ``root``, each of its splits listed once, fitted on the train split.

    Args:
        root: the data root.
        collection: the collection.
        eval_split: the split early stopping scores (``None``, or the train split, for none).
        protocol: the valid protocol.
        listing: the root's folders as already listed (:class:`~competition.dataroot.Listing`); default: listed now.

    Raises:
        EvalIndicesError: the protocol's index files list a config index out of range for a valid graph, or list
            none of the collection's valid graphs (:meth:`~competition.protocol.ValidProtocol.check_listed`),
            checked now, from the npz headers, before any model is fitted.
    """
    collection = Collection(collection)
    splits = {s: open_split(root, collection, s, listing=listing) for s in Split}
    if protocol.indices is not None and collection.is_layout:
        valid = splits[Split.VALID]
        protocol.check_listed(collection, valid.stems)
        for stem, count in zip(valid.stems, valid.header_rows("config_runtime"), strict=True):
            protocol.listed(collection, stem, count)
    use_eval = eval_split is not None and Split(eval_split) != Split.TRAIN
    return CollectionData(collection, splits[Split.TRAIN], splits[Split(eval_split)] if use_eval else None,
                          splits[Split.VALID], splits[Split.TEST], protocol)


@dataclass(frozen=True)
class Dataset:
    """The collections a run fits, each opened once (:class:`CollectionData`): those of the ones asked for that have
    train graphs, in collection order.

    Attributes:
        parts: one :class:`CollectionData` per collection.
    """

    parts: tuple[CollectionData, ...]

    @classmethod
    def open(cls, root: DataRoot, collections: Sequence[Collection] | None = None, *,
             eval_split: Split | None = Split.VALID, protocol: ValidProtocol = DEFAULT_PROTOCOL,
             listing: Listing | None = None) -> Dataset:
        """The ``collections`` of ``root`` (default: all five) that hold train graphs, each listed once
        (:func:`open_collection`), or taken from ``listing`` (:class:`~competition.dataroot.Listing`) when given.

        Raises:
            OSError: a folder exists but cannot be listed.
        """
        asked = list(Collection) if collections is None else [Collection(c) for c in collections]
        opened = (open_collection(root, c, eval_split=eval_split, protocol=protocol, listing=listing) for c in asked)
        return cls(tuple(d for d in opened if len(d.train)))

    @property
    def collections(self) -> list[Collection]:
        """The collections held, in order."""
        return [d.collection for d in self.parts]

    def __getitem__(self, collection: Collection | str) -> CollectionData:
        collection = Collection(collection)
        for d in self.parts:
            if d.collection == collection:
                return d
        raise KeyError(f"{collection.value}: no train graphs in this dataset")

    def __iter__(self) -> Iterator[CollectionData]:
        return iter(self.parts)

    def __len__(self) -> int:
        return len(self.parts)

    def subset(self, collections: Sequence[Collection]) -> Dataset:
        """The same data, only ``collections`` (each must be held), in the order given."""
        return Dataset(tuple(self[c] for c in collections))

    def labels(self, split: Split) -> SplitLabels:
        """The labels of every graph of ``split`` in the collections held, from the files listed when the dataset
        was opened (:meth:`SplitGraphs.labels`); the valid split's on each collection's protocol."""
        split = Split(split)
        protocol = self.parts[0].protocol if self.parts else DEFAULT_PROTOCOL
        graphs = {Split.TRAIN: lambda d: d.train, Split.VALID: lambda d: d.valid, Split.TEST: lambda d: d.test}[split]
        return SplitLabels(split, protocol, (g for d in self.parts for g in graphs(d).labels(d.protocol)))
