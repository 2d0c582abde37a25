"""Graph records: one TpuGraphs npz file read into a :class:`TileGraph` or a :class:`LayoutGraph`.

The same reader serves the real Kaggle download and the synthetic world, which share the on-disk format.
:func:`load_graph` reads one file, checked as :mod:`competition.graphfile` checks it: it raises the first problem,
a :class:`~competition.errors.DataFileError` naming the file, the key, what was expected and what was found. Every
array is read eagerly except a layout file's ``node_config_feat`` (gigabytes once decompressed), which is only ever
streamed: :meth:`LayoutGraph.config_features` reads chosen configs, :meth:`LayoutGraph.iter_config_blocks` walks
them.

Finding the data root and listing its graphs is :mod:`competition.dataroot`'s job.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Self

import numpy as np
import numpy.typing as npt

from competition.collections import Collection, Split
from competition.errors import DataFileError
from competition.graphfile import file_problems, guard, guard_iter, open_npz, widen
from competition.npzio import DEFAULT_BLOCK_BYTES
from competition.targets import ranking_target

log = logging.getLogger(__name__)

RowSelection = slice | Sequence[int] | npt.NDArray[np.integer] | None


# --------------------------------------------------------------------------------------------------------------
# Records
# --------------------------------------------------------------------------------------------------------------


@dataclass(eq=False, kw_only=True)
class _Graph:
    path: Path
    collection: Collection | None
    split: Split | None
    node_feat: npt.NDArray[np.float32]
    node_opcode: npt.NDArray[np.uint8]
    edge_index: npt.NDArray[np.int64]
    config_runtime: npt.NDArray[np.int64]
    config_rows: npt.NDArray[np.int64] | None = None

    @property
    def stem(self) -> str:
        """The file name without ``.npz``: the graph's name in submission IDs."""
        return self.path.stem

    @property
    def num_nodes(self) -> int:
        return int(self.node_feat.shape[0])

    @property
    def num_edges(self) -> int:
        return int(self.edge_index.shape[0])

    @property
    def num_configs(self) -> int:
        return int(self.config_runtime.shape[0])

    @property
    def is_test(self) -> bool:
        """All runtimes are zero: the public test files hide their labels this way."""
        return self.num_configs > 0 and not self.config_runtime.any()

    def select_configs(self, rows: npt.ArrayLike | None) -> Self:
        """The same graph restricted to some of its configs (``None``: itself).

        Config ``i`` of the result is config ``rows[i]`` of this graph; :attr:`config_rows` keeps the indices
        into the file's configs, so predictions over the subset can be written with the original indices.

        Args:
            rows: ascending distinct config indices.

        Raises:
            IndexError: an index outside ``[0, C)``, or indices not ascending and distinct.
        """
        if rows is None:
            return self
        idx = np.asarray(rows, dtype=np.int64).reshape(-1)
        if idx.size and (idx[0] < 0 or idx[-1] >= self.num_configs or (np.diff(idx) <= 0).any()):
            raise IndexError(f"{self.path}: config subset must be ascending distinct indices in "
                             f"[0, {self.num_configs})")
        base = idx if self.config_rows is None else self.config_rows[idx]
        return replace(self, config_runtime=self.config_runtime[idx], config_rows=base,
                       **self._config_arrays(idx))

    def _config_arrays(self, idx: npt.NDArray[np.int64]) -> dict[str, Any]:
        return {}


@dataclass(eq=False, kw_only=True)
class TileGraph(_Graph):
    """One tile graph (a kernel) and its tile-size configs.

    Attributes:
        path: the npz file.
        collection: ``Collection.TILE_XLA``.
        split: from the file's folder, ``None`` if the path does not tell.
        node_feat: float32 ``[N, 140]``.
        node_opcode: uint8 ``[N]``.
        edge_index: int64 ``[E, 2]``, rows ``[consumer, producer]``.
        config_runtime: int64 ``[C]``, ns; all zero in test files.
        config_feat: float32 ``[C, 24]``.
        config_runtime_normalizers: int64 ``[C]``, ns: the default config's runtime in the same run.
    """

    config_feat: npt.NDArray[np.float32]
    config_runtime_normalizers: npt.NDArray[np.int64]

    def _config_arrays(self, idx: npt.NDArray[np.int64]) -> dict[str, Any]:
        return {"config_feat": self.config_feat[idx],
                "config_runtime_normalizers": self.config_runtime_normalizers[idx]}

    def normalized_runtime(self) -> npt.NDArray[np.float64]:
        """``config_runtime / config_runtime_normalizers``: float64 ``[C]``, the quantity tile configs rank by
        (:func:`competition.targets.ranking_target`)."""
        return ranking_target(self.config_runtime, self.config_runtime_normalizers)


@dataclass(eq=False, kw_only=True)
class LayoutGraph(_Graph):
    """One layout graph (a whole program) and its layout configs.

    ``node_config_feat`` (float32 ``[C, NC, 18]``, gigabytes for the largest graphs) stays on disk: read chosen
    configs with :meth:`config_features` or walk them with :meth:`iter_config_blocks`. Each call opens the file
    anew, so a record holds no file handle and can be pickled or sent to another process.

    Attributes:
        path, collection, split, node_feat, node_opcode, edge_index, config_runtime: as for :class:`TileGraph`
            (``collection`` is ``None`` if neither the caller nor the path tells which layout collection).
        node_config_ids: int64 ``[NC]``, ascending node indices of the configurable nodes.
        node_splits: int64 ``[1, S]``, ``[[0, ..., N]]``: computation ``i`` spans nodes ``[s_i, s_{i+1})``.
        block_bytes: decompressed bytes handled per step when streaming configs.
        check_finite: refuse non-finite ``node_config_feat`` values as configs are read (each block is checked as
            it comes: no pass of its own); :func:`load_graph` sets it from ``validate``.
    """

    node_config_ids: npt.NDArray[np.int64]
    node_splits: npt.NDArray[np.int64]
    block_bytes: int = DEFAULT_BLOCK_BYTES
    check_finite: bool = True

    @property
    def num_config_nodes(self) -> int:
        return int(self.node_config_ids.shape[0])

    def config_features(self, rows: RowSelection = None) -> npt.NDArray[np.float32]:
        """Rows of ``node_config_feat``, streamed from the file.

        Args:
            rows: ``None`` for every config (only for graphs that fit in memory), a slice, config indices in
                any order (repeats allowed), or a boolean mask ``[C]``.

        Returns:
            float32 ``[len(rows), NC, 18]``, in the order of ``rows``.

        Raises:
            IndexError: an index is outside ``[0, C)``.
            DataFileError: the member is unreadable (truncated or corrupt file), or holds a non-finite value in the
                rows read (with ``check_finite``).
        """
        sel = slice(None) if rows is None else rows
        if isinstance(sel, np.ndarray) and sel.dtype == np.bool_:
            # A mask would otherwise be read as indices 0 and 1.
            if sel.shape != (self.num_configs,):
                raise IndexError(f"{self.path}: node_config_feat: mask of shape {sel.shape} for {self.num_configs} configs")
            sel = np.flatnonzero(sel)
        if self.config_rows is not None:
            sel = self.config_rows[sel]
        with open_npz(self.path, self.block_bytes) as r:
            out = guard(self.path, "node_config_feat", lambda: r.load_rows("node_config_feat", sel))
        if self.check_finite:
            _refuse_nonfinite(self.path, out, lambda: np.arange(self.num_configs)[sel] if isinstance(sel, slice)
                              else np.asarray(sel).reshape(-1))
        return _native(out)

    def iter_config_blocks(self, block_rows: int | None = None) -> Iterator[tuple[int, npt.NDArray[np.float32]]]:
        """Walk ``node_config_feat`` front to back, one block in memory at a time.

        Args:
            block_rows: configs per block (default: about ``block_bytes`` of data per block).

        Yields:
            ``(first_config, block)`` with ``block`` float32 ``[rows, NC, 18]``, read-only.
        """
        with open_npz(self.path, self.block_bytes) as r:
            blocks = (r.iter_blocks("node_config_feat", block_rows) if self.config_rows is None
                      else r.iter_rows("node_config_feat", self.config_rows, block_rows))
            for first, block in guard_iter(self.path, "node_config_feat", blocks):
                if self.check_finite:
                    _refuse_nonfinite(self.path, block, lambda f=first, n=block.shape[0]: np.arange(f, f + n)
                                      if self.config_rows is None else self.config_rows[f:f + n])
                yield first, _native(block)


def _native(a: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """``a`` in the machine's byte order: a member may be stored big-endian (numpy writes and reads it), which
    torch refuses; the other members are widened to native dtypes by :func:`load_graph` already."""
    return a if a.dtype.isnative else a.astype(a.dtype.newbyteorder("="))


def _refuse_nonfinite(path: Path, block: npt.NDArray[np.float32],
                      configs: Callable[[], npt.NDArray[np.integer]]) -> None:
    """Raise on the first non-finite value of a block of ``node_config_feat`` rows (``[rows, NC, 18]``);
    ``configs()`` gives the file's config index of each row, asked for only then."""
    bad = ~np.isfinite(block)
    if not bad.any():
        return
    i, k, j = (int(x) for x in np.argwhere(bad)[0])
    raise DataFileError(path, "node_config_feat", "finite values (`fastslow data validate` lists every such file)",
                        f"{float(block[i, k, j])} at config {int(configs()[i])}, configurable node {k}, column {j}")


def load_graph(
    path: str | os.PathLike[str],
    collection: Collection | None = None,
    *,
    validate: bool = True,
    deep: bool = False,
) -> TileGraph | LayoutGraph:
    """Read one npz file into a graph record.

    Keys, dtypes and shapes are always checked (from the member headers, without reading data). With ``validate``
    the values are checked too (finite features, opcodes in the table, edges and configurable nodes in range,
    ``node_splits`` from 0 to N, runtimes all positive, or all zero in a file not known to be of the train or valid
    split), and a layout record refuses any non-finite ``node_config_feat`` value when its configs are read; with
    ``deep`` also every value of a layout file's ``node_config_feat`` up front (streamed, one block in memory at a
    time).

    Args:
        path: the npz file.
        collection: the file's collection; inferred from the path (``tile/xla/...``, ``layout/nlp/random/...``)
            when ``None``, or else from the keys (a layout file's collection then stays ``None``).
        validate: check values, not only the structure.
        deep: also check ``node_config_feat`` values (slower: decompresses the whole member once).

    Returns:
        A :class:`TileGraph` or a :class:`LayoutGraph`; integer members are widened to int64, opcodes to uint8.

    Raises:
        DataFileError: the first problem found, naming the file, the key, the expected and the found.
    """
    path = Path(path)
    sink: dict[str, Any] = {}
    problems = file_problems(path, collection, validate=validate, deep=deep, sink=sink)
    try:
        first = next(problems, None)
    finally:
        problems.close()  # releases the file now, not when the generator is collected
    if first is not None:
        raise first
    try:
        a = widen(sink["arrays"])
    except ValueError as exc:
        raise DataFileError(path, "node_opcode", "opcode ids that fit uint8", str(exc)) from None
    common = dict(path=path, collection=sink["collection"], split=sink["split"], node_feat=a["node_feat"],
                  node_opcode=a["node_opcode"], edge_index=a["edge_index"], config_runtime=a["config_runtime"])
    if sink["kind"] == "tile":
        return TileGraph(**common, config_feat=a["config_feat"],
                         config_runtime_normalizers=a["config_runtime_normalizers"])
    return LayoutGraph(**common, node_config_ids=a["node_config_ids"], node_splits=a["node_splits"],
                       check_finite=validate)
