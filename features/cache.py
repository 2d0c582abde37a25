"""A disk cache of processed graphs: the one-time ``pre_transform`` of every graph of a split, kept between runs.

Layout on disk::

    cache_dir/<collection slug>/<split>/<pipeline hash>/
        pipeline.txt                  the pre_transform repr, max_configs, format version, data root (readable)
        manifest.json                 per graph: cached file, source identity, node / edge counts, seconds
        <stem>-<source key>.pt        one torch.save'd {"format", "data", "stats"} per graph (plain data only)

The pipeline hash covers the ``pre_transform`` repr, ``max_configs``, :data:`FORMAT_VERSION` and the data root's
resolved path, so a changed pipeline builds into a new folder and never reuses files made with other settings (as
the official baselines name their caches by a hash of the settings), and two data roots (two synthetic worlds) never
share a folder, where each build would remove the other's files as leftovers. The old folder is left in place until
:meth:`ProcessedGraphs.clean_stale` removes it (with those of other data roots). A graph's source key hashes the npz
file's path relative to the data root, its size, its content (:func:`competition.fingerprint.content_digest`) and its
stem, so a data file whose bytes change is rebuilt, even at the same size and modification time, and the others are
reused (a file merely touched among them).

Every cached file is written through :func:`competition.atomic.atomic_write_stream`: a build that is interrupted leaves
only complete files (reused by the next build) and ``.part`` temporary files, which never match a cached name and
are removed by the next build; one that finds the disk full stops with an ``OSError`` naming the file (not torch's
``RuntimeError``), and the files it completed are reused by the next build.

A cached file holds only tensors and plain values (the graph as ``Data.to_dict()``) and is read with
``torch.load(weights_only=True)``, so a planted file cannot run code. One that cannot be read that way (truncated,
not a torch file, holding other objects, another format) is renamed to ``<name>.corrupt`` (see :func:`set_aside`),
named in a warning, and rebuilt from its source.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import pickle
import shutil
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import torch
from torch_geometric.data import Data
from tqdm.auto import tqdm

from competition.atomic import atomic_write_stream, atomic_write_text, failures_named, remove_stale_temps
from competition.collections import Collection, Split
from competition.dataset import SplitGraphs
from competition.fingerprint import content_digest
from competition.protocol import ValidProtocol
from competition.reader import LayoutGraph, load_graph
from competition.workers import end_with_parent, pool_context, worker_count
from features.data import graph_to_data

FORMAT_VERSION = 3
"""Version of the cached file format; part of the pipeline hash, so bumping it rebuilds every cache.

Version 2 stores a layout graph's ``config_feat`` as int8 (layout values are the integers -1..5): a quarter of the
float32 bytes, on disk and in the memory of whoever loads it. Version 3 stores the graph as a dict of tensors and
plain values instead of a pickled ``Data``, read with ``torch.load(weights_only=True)``; older (pickled) caches sit
in folders of another pipeline hash and are never loaded."""

DEFAULT_CACHE_DIR = Path(".cache/processed")
PIPELINE_FILE = "pipeline.txt"
MANIFEST_FILE = "manifest.json"
_KEY_CHARS = 12

Transform = Callable[[Data], Data]

log = logging.getLogger(__name__)


class UnusableFileError(ValueError):
    """A file of ours (cached graph, checkpoint) that cannot be used; the message says why."""


def load_plain(path: Path) -> Any:
    """``torch.load`` of a file that may hold only tensors and plain values (``weights_only=True``, on the CPU).

    Raises:
        UnusableFileError: the file is truncated, not a torch file, or holds other objects (which are not built:
            an older pickled format or a planted file runs no code).
        OSError: the file could not be read at all (left to the caller, as it says nothing about the content).
    """
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except OSError:
        raise
    except pickle.UnpicklingError:
        raise UnusableFileError("holds objects other than tensors and plain values, which are not loaded (an older "
                                "format, or planted code)") from None
    except Exception as exc:  # torch reports a damaged file as RuntimeError, EOFError, KeyError...
        raise UnusableFileError(f"unreadable (truncated, or not a torch file: {type(exc).__name__})") from None


def set_aside(path: Path) -> Path:
    """Rename an unusable ``path`` to ``<name>.corrupt`` (``<name>.corrupt.1``, ... when taken), for inspection.

    Returns:
        The new path.
    """
    dest = path.with_name(f"{path.name}.corrupt")
    n = 0
    while dest.exists():
        n += 1
        dest = path.with_name(f"{path.name}.corrupt.{n}")
    os.replace(path, dest)
    return dest


def _is_plain(value: Any) -> bool:
    if isinstance(value, list | tuple):
        return all(_is_plain(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _is_plain(v) for k, v in value.items())
    return value is None or isinstance(value, torch.Tensor | str | bool | int | float)


def read_record(path: Path) -> dict[str, Any]:
    """A cached graph file as ``{"format", "data": Data, "stats"}``.

    Raises:
        UnusableFileError: unreadable, or not a record of :data:`FORMAT_VERSION`.
    """
    record = load_plain(path)
    if not (isinstance(record, dict) and isinstance(record.get("data"), dict)
            and isinstance(record.get("stats"), dict)):
        raise UnusableFileError("not a cached graph (expected a dict with data and stats)")
    if record.get("format") != FORMAT_VERSION:
        raise UnusableFileError(f"cache format {record.get('format')!r}, expected {FORMAT_VERSION}")
    return {**record, "data": Data.from_dict(record["data"])}


def pipeline_description(pre_transform: Transform | None, max_configs: int | None,
                         protocol: ValidProtocol | None = None, root: str | os.PathLike[str] | None = None) -> str:
    """The settings that make a cache: what ``pipeline.txt`` holds and what the pipeline hash is taken of (with
    the data root's resolved path when given)."""
    text = f"format_version: {FORMAT_VERSION}\nmax_configs: {max_configs}\n"
    if protocol is not None:
        text += f"valid_protocol: {protocol.tag}\n"
    text += f"pre_transform: {pre_transform!r}\n"
    return text if root is None else text + f"data root: {Path(root).resolve()}\n"


def pipeline_hash(pre_transform: Transform | None, max_configs: int | None,
                  protocol: ValidProtocol | None = None, root: str | os.PathLike[str] | None = None) -> str:
    """16 hex digits of the SHA-256 of :func:`pipeline_description`."""
    return hashlib.sha256(pipeline_description(pre_transform, max_configs, protocol, root).encode()).hexdigest()[:16]


def evenly_spaced_configs(num_configs: int, max_configs: int | None) -> npt.NDArray[np.int64] | None:
    """The config rows a cache keeps: all (``None``) when ``max_configs`` is ``None`` or not smaller than the count.

    Rows are evenly spaced over the file (first and last included), which needs no seed, gives the same rows on
    every machine, and covers a layout file's configs whatever order its search wrote them in.

    Returns:
        int64 ``[max_configs]`` ascending distinct rows, or ``None`` for every row.
    """
    if max_configs is None or num_configs <= max_configs:
        return None
    if max_configs < 1:
        raise ValueError(f"max_configs must be >= 1 or None, got {max_configs}")
    # Distinct because the step (num_configs - 1) / (max_configs - 1) exceeds 1 when num_configs > max_configs.
    return np.linspace(0, num_configs - 1, max_configs).round().astype(np.int64)


@dataclass(frozen=True)
class SourceFile:
    """One npz file of the split and the name its processed graph is cached under.

    Attributes:
        path: the npz file.
        relpath: ``path`` relative to the data root (POSIX form).
        size: bytes.
        sha256: the SHA-256 of its bytes (:func:`competition.fingerprint.content_digest`).
        key: :data:`_KEY_CHARS` hex digits of the hash of ``(relpath, size, sha256, stem)``.
    """

    path: Path
    relpath: str
    size: int
    sha256: str
    key: str

    @property
    def stem(self) -> str:
        return self.path.stem

    @property
    def cache_name(self) -> str:
        return f"{self.stem}-{self.key}.pt"

    @classmethod
    def of(cls, path: Path, rel: str) -> SourceFile:
        """The file at ``path``, whose path relative to the data root is ``rel`` (POSIX form)."""
        size, digest = path.stat().st_size, content_digest(path)
        ident = json.dumps([rel, size, digest, path.stem])
        return cls(path, rel, size, digest, hashlib.sha256(ident.encode()).hexdigest()[:_KEY_CHARS])


@dataclass(frozen=True)
class BuildStats:
    """What :meth:`ProcessedGraphs.build` did.

    Attributes:
        built: graphs processed and written.
        reused: graphs whose cached file was already complete and current.
        removed: stale cached files and leftover temporary files deleted from the pipeline folder.
        seconds: wall time of the build.
    """

    built: int
    reused: int
    removed: int
    seconds: float


def compact_config_feat(config_feat: torch.Tensor) -> torch.Tensor:
    """A layout ``config_feat`` (float ``[C, NC, 18]``) as int8 when that loses nothing (layout values are the
    integers -1..5); anything else (tile's ``[C, 24]``, non-integral values) unchanged."""
    if config_feat.dim() != 3 or not config_feat.is_floating_point():
        return config_feat
    compact = config_feat.to(torch.int8)
    return compact if torch.equal(compact.to(config_feat.dtype), config_feat) else config_feat


def _process_one(source: str, collection: str, dest: str, pre_transform: Transform | None,
                 max_configs: int | None, protocol: ValidProtocol | None = None) -> dict[str, Any]:
    """Read, convert, pre-transform and save one graph (runs in a worker process); returns its stats."""
    graph = load_graph(source, Collection(collection))
    rows = None
    if protocol is not None:
        rows = protocol.configs(Collection(collection), graph.stem, graph.num_configs, Split.VALID)
    elif isinstance(graph, LayoutGraph):
        rows = evenly_spaced_configs(graph.num_configs, max_configs)
    data = graph_to_data(graph, rows)
    stats: dict[str, Any] = {"num_nodes_before": int(data.num_nodes),
                             "num_edges_before": int(data.edge_index.shape[1]),
                             "num_configs_file": graph.num_configs}
    t0 = time.perf_counter()
    if pre_transform is not None:
        data = pre_transform(data)
    stats.update(pre_transform_seconds=time.perf_counter() - t0, num_nodes=int(data.num_nodes),
                 num_edges=int(data.edge_index.shape[1]))
    data.config_feat = compact_config_feat(data.config_feat)
    fields = data.to_dict()
    odd = sorted(k for k, v in fields.items() if not _is_plain(v))
    if odd:
        raise TypeError(f"{source}: the pre_transform left attributes {', '.join(odd)} that are not tensors or "
                        "plain values; the cache stores only those")
    record = {"format": FORMAT_VERSION, "data": fields, "stats": stats}
    # Through our own file object: a full disk is an OSError naming the file, not torch's RuntimeError. No fsync:
    # a file cut short by a power loss is set aside and rebuilt when read.
    atomic_write_stream(dest, lambda f: torch.save(record, f), fsync=False)
    return stats


def _worker_init(parent: int) -> None:
    end_with_parent(parent)  # a killed build leaves no worker writing into the cache
    # Graphs are processed one per worker: torch's own threads would only oversubscribe the cores.
    torch.set_num_threads(1)


class ProcessedGraphs(Sequence[Data]):
    """The graphs of one collection and split after a ``pre_transform``, cached on disk; a sequence of ``Data``.

    Construction lists the source files and reads each once for its content digest (once per process:
    :func:`competition.fingerprint.content_digest`); :meth:`build` processes the missing and stale ones.
    Reading an item that is not built yet raises :class:`FileNotFoundError`.

    For layout graphs only ``max_configs`` configs are cached (see :func:`evenly_spaced_configs`), so a file
    with 100,000 configs stays bounded; ``node_config_feat`` is streamed from the file for just those rows.
    Tile graphs keep all their configs (a few thousand of 24 values each). On the valid split, ``protocol``
    chooses the configs instead (the valid protocol's subset, :mod:`competition.protocol`), so that early stopping
    scores exactly what the pipeline scores.

    Args:
        graphs: the collection and split's graphs (:func:`competition.dataset.open_split`); their data root's
            path names the cache folder (:attr:`~competition.dataset.SplitGraphs.data_id`) and their paths
            relative to it the cached files.
        pre_transform: applied once per graph before caching; its ``repr`` names the cache, so it must show every
            setting that changes the output (every transform in :mod:`features.transforms` does), and it must
            pickle (no lambdas) when :meth:`build` uses worker processes.
        transform: applied on every access, after loading.
        cache_dir: the cache root.
        max_configs: configs kept per layout graph, ``None`` for all.
        protocol: valid split only: keep the valid protocol's configs of each graph (``max_configs`` is then
            ignored).
        workers: worker processes of :meth:`build` (default: one per usable core; at most one per usable core
            and one per graph: :func:`competition.workers.worker_count`); 1 processes in this process.
        progress: show a progress bar while building.
    """

    def __init__(self, graphs: SplitGraphs, pre_transform: Transform | None = None,
                 transform: Transform | None = None, cache_dir: str | os.PathLike[str] = DEFAULT_CACHE_DIR,
                 max_configs: int | None = None, protocol: ValidProtocol | None = None, workers: int | None = None,
                 progress: bool = True) -> None:
        if max_configs is not None and max_configs < 1:
            raise ValueError(f"max_configs must be >= 1 or None, got {max_configs}")
        if protocol is not None and graphs.split != Split.VALID:
            raise ValueError(f"a valid protocol chooses configs of the valid split only; got split {graphs.split}")
        if protocol is not None:
            max_configs = None
        self.graphs = graphs
        self.collection = graphs.collection
        self.split = graphs.split
        self.pre_transform = pre_transform
        self.transform = transform
        self.cache_dir = Path(cache_dir)
        self.max_configs = max_configs
        self.protocol = protocol
        self.workers = workers
        self.progress = progress
        self.sources = [SourceFile.of(p, graphs.relpath(p)) for p in graphs.paths]

    @property
    def split_dir(self) -> Path:
        """``cache_dir/<collection slug>/<split>``: holds one folder per pipeline."""
        return self.cache_dir / self.collection.slug / self.split.value

    @functools.cached_property
    def processed_dir(self) -> Path:
        """The folder of this pipeline on this data root: ``split_dir/<hash of both>``. Two data roots (two
        synthetic worlds, or the real data and a world) never share a folder, so building one never removes the
        other's files as leftovers (two processes on two worlds with one cache crashed on that). Computed once
        (it resolves the data root's path): every graph's access names its file by it."""
        return self.split_dir / pipeline_hash(self.pre_transform, self.max_configs, self.protocol,
                                              self.graphs.data_id)

    @property
    def paths(self) -> list[Path]:
        """The cached file of each graph, in the order of :attr:`stems` (they may not exist before :meth:`build`)."""
        return [self.processed_dir / s.cache_name for s in self.sources]

    @property
    def stems(self) -> list[str]:
        """Graph names (file stems), sorted."""
        return [s.stem for s in self.sources]

    def __len__(self) -> int:
        return len(self.sources)

    def __getitem__(self, index: int) -> Data:  # type: ignore[override]
        data = self.load(index)["data"]
        return data if self.transform is None else self.transform(data)

    def load(self, index: int) -> dict[str, Any]:
        """The stored record of graph ``index``: ``{"format": int, "data": Data, "stats": dict}``.

        ``data`` is the graph after ``pre_transform`` only; ``stats`` holds ``num_nodes_before``,
        ``num_edges_before``, ``num_nodes``, ``num_edges``, ``num_configs_file`` and ``pre_transform_seconds``.
        A cached file that cannot be used is set aside (:func:`set_aside`), named in a warning and rebuilt.
        """
        path = self.processed_dir / self.sources[index].cache_name  # not self.paths: one graph, not all of them
        if not path.is_file():
            raise FileNotFoundError(f"{path}: graph {self.sources[index].relpath} is not processed for this "
                                    "pipeline; call build() first")
        try:
            return read_record(path)
        except UnusableFileError as exc:
            kept = set_aside(path)
            log.warning("%s: %s; kept as %s, rebuilding it", path, exc, kept.name)
        _process_one(*self._job(self.sources[index]))
        try:
            return read_record(path)
        except UnusableFileError as exc:
            raise UnusableFileError(f"{path}: {exc} even after a rebuild") from None

    def _job(self, source: SourceFile) -> tuple[Any, ...]:
        """The arguments of :func:`_process_one` for ``source``."""
        return (str(source.path), self.collection.value, str(self.processed_dir / source.cache_name),
                self.pre_transform, self.max_configs, self.protocol)

    def build(self) -> BuildStats:
        """Process every graph whose cached file is missing or stale, in parallel over files.

        Files already complete are kept, so a build resumes where an interrupted one stopped. Cached files of
        older versions of a source file and ``.part`` leftovers are removed, ``pipeline.txt`` and
        ``manifest.json`` (re)written.

        Returns:
            The counts of graphs built and reused and of files removed, and the wall time.
        """
        t0 = time.perf_counter()
        out = self.processed_dir
        out.mkdir(parents=True, exist_ok=True)
        with failures_named(out / PIPELINE_FILE):  # the cache is no output argument: name the file that failed
            atomic_write_text(out / PIPELINE_FILE, pipeline_description(self.pre_transform, self.max_configs,
                                                                        self.protocol, self.graphs.data_id))
        removed = self._remove_leftovers()
        todo = [s for s in self.sources if not (out / s.cache_name).is_file()]
        stats: dict[str, dict[str, Any]] = {}
        jobs = [self._job(s) for s in todo]
        workers = worker_count(self.workers, len(jobs))
        with tqdm(total=len(jobs), desc=f"process {self.collection.value} {self.split.value}", unit="graph",
                  disable=not self.progress) as bar:
            if workers <= 1:
                for source, job in zip(todo, jobs, strict=True):
                    stats[source.stem] = _process_one(*job)
                    bar.update()
            else:
                with ProcessPoolExecutor(workers, mp_context=pool_context(), initializer=_worker_init,
                                         initargs=(os.getpid(),)) as pool:
                    futures = {pool.submit(_process_one, *job): source for source, job in zip(todo, jobs, strict=True)}
                    for future in as_completed(futures):
                        stats[futures[future].stem] = future.result()
                        bar.update()
        self._write_manifest(stats)
        return BuildStats(built=len(todo), reused=len(self.sources) - len(todo), removed=removed,
                           seconds=time.perf_counter() - t0)

    def _remove_leftovers(self) -> int:
        """Delete cached files that no current source maps to, and the ``.part`` files of killed builds (those of a
        concurrent build, still being written, are kept: :func:`competition.atomic.remove_stale_temps`); returns
        how many."""
        wanted = {s.cache_name for s in self.sources}
        count = len(remove_stale_temps(self.processed_dir))
        for p in self.processed_dir.iterdir():
            if p.suffix == ".pt" and p.name not in wanted:
                p.unlink(missing_ok=True)
                count += 1
        return count

    def manifest(self) -> dict[str, Any]:
        """The manifest of the last build (``{}`` if none): pipeline settings and, per stem, file and stats."""
        path = self.processed_dir / MANIFEST_FILE
        return json.loads(path.read_text()) if path.is_file() else {}

    def _write_manifest(self, fresh: dict[str, dict[str, Any]]) -> None:
        old = self.manifest().get("graphs", {})
        graphs: dict[str, Any] = {}
        for i, s in enumerate(self.sources):
            known = old.get(s.stem)
            if s.stem in fresh:
                stats = fresh[s.stem]
            elif known is not None and known.get("file") == s.cache_name:
                stats = known["stats"]
            else:
                # Built by an interrupted run that never wrote its manifest: the file carries its stats.
                stats = self.load(i)["stats"]
            graphs[s.stem] = {"file": s.cache_name, "source": s.relpath, "size": s.size, "sha256": s.sha256,
                              "stats": stats}
        manifest = {"format_version": FORMAT_VERSION, "collection": self.collection.value,
                    "split": self.split.value, "pre_transform": repr(self.pre_transform),
                    "max_configs": self.max_configs,
                    "valid_protocol": None if self.protocol is None else self.protocol.tag, "graphs": graphs}
        with failures_named(self.processed_dir / MANIFEST_FILE):
            atomic_write_text(self.processed_dir / MANIFEST_FILE, json.dumps(manifest, indent=1) + "\n")

    def clean_stale(self) -> list[Path]:
        """Delete the folders of other pipelines beside this one, and stale files inside this one.

        Returns:
            The folders removed.
        """
        removed: list[Path] = []
        if not self.split_dir.is_dir():
            return removed
        for d in sorted(self.split_dir.iterdir()):
            if d.is_dir() and d != self.processed_dir:
                shutil.rmtree(d)
                removed.append(d)
        if self.processed_dir.is_dir():
            self._remove_leftovers()
        return removed

    def __repr__(self) -> str:
        return (f"{type(self).__name__}({self.collection.value}, {self.split.value}, {len(self)} graphs, "
                f"pre_transform={self.pre_transform!r}, transform={self.transform!r}, "
                f"max_configs={self.max_configs})")
