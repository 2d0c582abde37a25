"""Reading TpuGraphs data: where it is, which graphs it holds, one graph per npz file, and what is wrong with one.

The same reader serves the real Kaggle download and the synthetic world, which share the on-disk format:

* :func:`find_data_root` resolves the data root (``--data``, ``$FASTSLOW_DATA``, a Kaggle mount, ``./data``,
  ``./data/kaggle``, ``./data/synthetic-demo``).
* :func:`list_graphs` lists the graph files of one collection and split.
* :func:`load_graph` reads one file into a :class:`TileGraph` or a :class:`LayoutGraph`. Every array is read
  eagerly except a layout file's ``node_config_feat`` (gigabytes once decompressed), which is only ever streamed:
  :meth:`LayoutGraph.config_features` reads chosen configs, :meth:`LayoutGraph.iter_config_blocks` walks them.
* :func:`validate_file` lists every problem of a file; :func:`load_graph` raises the first. Every problem is a
  :class:`~competition.errors.DataFileError` naming the file, the key, what was expected and what was found.

Where the real files disagree with the published format (integer widths, for one), the reader accepts what is
harmless and widens it, and refuses the rest with a message that says what it found.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import os
import re
import zipfile
import zlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal, Self

import numpy as np
import numpy.typing as npt

from competition.collections import Collection, Kind, Split
from competition.errors import DataFileError, DataRootNotFound
from competition.nesting import json_loads
from competition.npzio import DEFAULT_BLOCK_BYTES, MemberInfo, NpzReader
from competition.opcodes import VALID_OPCODES
from competition.schema import (
    ACCEPTED_INT_DTYPES,
    LAYOUT_ARRAYS,
    TILE_ARRAYS,
    ArraySpec,
)
from competition.targets import ranking_target

log = logging.getLogger(__name__)

ENV_VAR = "FASTSLOW_DATA"
KAGGLE_INPUT = Path("/kaggle/input")
KAGGLE_SLUG = "predict-ai-model-runtime"
# Wildcard levels between the Kaggle input folder and npz_all/ (the 2026 mount adds competitions/).
KAGGLE_GLOB_DEPTH = 4
# Layout slot values: -1 marks an unused slot, 0..5 a dimension index (at most 6 dims per tensor).
LAYOUT_VALUE_RANGE = (-1, 5)

TreeFormat = Literal["kaggle", "tarball"]
RowSelection = slice | Sequence[int] | npt.NDArray[np.integer] | None

_GET_DATA = (
    "To get data: `fastslow kaggle download` (the real data into ./data/kaggle; needs Kaggle credentials and "
    "the competition rules accepted), or `fastslow data synth --scale demo "
    f"--out data/synthetic-demo` (a synthetic world in the same format); then pass --data DIR or set {ENV_VAR}=DIR."
)
DATA_ROOT_HELP = (
    "data root (a folder holding npz_all/npz/ or npz/, or that folder itself). Default: the first found of "
    f"${ENV_VAR}, a Kaggle mount under {KAGGLE_INPUT}, ./data, ./data/kaggle (where `fastslow kaggle download` "
    "unpacks) and ./data/synthetic-demo (the world `make submit` generates); `fastslow data where` shows which"
)
"""The ``--data`` help of every command that finds the data root with :func:`find_data_root`: its search order."""
_ROOT_SHAPES = (
    "a folder holding npz_all/npz/ (the Kaggle download) or npz/ (the official tarball) with tile/ or layout/ "
    "inside, or that npz/ folder itself"
)


# --------------------------------------------------------------------------------------------------------------
# Data root
# --------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DataRoot:
    """A resolved data root.

    Args:
        root: the folder holding ``npz_all/`` or ``npz/`` (and ``sample_submission.csv``, ``secret/`` if any).
        npz_dir: the folder holding ``tile/`` and ``layout/``.
        tree_format: ``kaggle`` (``root/npz_all/npz``) or ``tarball`` (``root/npz``).
        sample_submission: ``root/sample_submission.csv`` if present.
        secret_dir: ``root/secret`` if present (synthetic worlds: hidden test runtimes, same relative paths as
            below ``npz_dir``).
        source: the rule that found it, e.g. ``$FASTSLOW_DATA``.
    """

    root: Path
    npz_dir: Path
    tree_format: TreeFormat
    sample_submission: Path | None
    secret_dir: Path | None
    source: str

    @property
    def is_synthetic(self) -> bool:
        """A synthetic world: its root carries the generator's manifest, ``world.json``."""
        return (self.root / "world.json").exists()

    @property
    def world_scale(self) -> str | None:
        """A synthetic world's scale (``tiny``, ``demo``, ``bench``, ``full``) from its manifest; ``None`` for real
        data or a manifest that does not say."""
        try:
            scale = json_loads((self.root / "world.json").read_text())["config"]["scale"]
        except (OSError, ValueError, KeyError, TypeError):
            return None
        return scale if isinstance(scale, str) else None

    def collection_dir(self, collection: Collection, split: Split) -> Path:
        """The folder of one collection and split, e.g. ``npz_dir/layout/xla/random/train`` (may not exist)."""
        return self.npz_dir / Collection(collection).relpath / Split(split).value

    def secret_file(self, collection: Collection, split: Split, stem: str) -> Path | None:
        """Where the secret file of a graph would be, or ``None`` when this root has no ``secret/`` tree."""
        if self.secret_dir is None:
            return None
        return self.secret_dir / Collection(collection).relpath / Split(split).value / f"{stem}.npz"

    def available(self) -> dict[tuple[Collection, Split], int]:
        """Number of graphs per (collection, split), every pair included (0 where the folder is missing)."""
        return {(c, s): len(list_graphs(self, c, s)) for c in Collection for s in Split}


def _has_tree(d: Path) -> bool:
    return (d / "tile").is_dir() or (d / "layout").is_dir()


def _as_root(d: Path, source: str) -> DataRoot | None:
    """The data root that folder ``d`` is or holds, or ``None``."""
    if not d.is_dir():
        return None
    if _has_tree(d / "npz_all" / "npz"):
        root, npz_dir, fmt = d, d / "npz_all" / "npz", "kaggle"
    elif _has_tree(d / "npz"):
        # Pointing at npz_all/ itself is the Kaggle tree seen one level down.
        root, npz_dir, fmt = (d.parent, d / "npz", "kaggle") if d.name == "npz_all" else (d, d / "npz", "tarball")
    elif _has_tree(d):
        if d.name == "npz" and d.parent.name == "npz_all":
            root, fmt = d.parent.parent, "kaggle"
        else:
            root, fmt = (d.parent if d.name == "npz" else d), "tarball"
        npz_dir = d
    else:
        return None
    sample = root / "sample_submission.csv"
    secret = root / "secret"
    return DataRoot(
        root=root,
        npz_dir=npz_dir,
        tree_format=fmt,  # type: ignore[arg-type]
        sample_submission=sample if sample.is_file() else None,
        secret_dir=secret if secret.is_dir() else None,
        source=source,
    )


def _describe_folder(d: Path) -> str:
    if not d.exists():
        return "no such folder"
    if not d.is_dir():
        return "a file, not a folder"
    names = sorted(p.name + ("/" if p.is_dir() else "") for p in d.iterdir())
    shown = ", ".join(names[:12]) + (", ..." if len(names) > 12 else "")
    return f"a folder without that tree (contents: {shown or 'empty'})"


def _explicit_root(path: Path, source: str, what: str) -> DataRoot:
    found = _as_root(path, source)
    if found is None:
        raise DataRootNotFound(
            f"{what}{path}: expected {_ROOT_SHAPES}; found {_describe_folder(path)}. {_GET_DATA}"
        )
    return found


def _kaggle_candidates(kaggle_input: Path) -> list[Path]:
    found: list[Path] = []
    for depth in range(KAGGLE_GLOB_DEPTH):
        pattern = "/".join(["*"] * depth + ["npz_all", "npz"])
        found.extend(p for p in kaggle_input.glob(pattern) if p.is_dir())
    # The competition's own mount first, then the shallowest: other mounted datasets may copy the tree.
    return sorted(set(found), key=lambda p: (KAGGLE_SLUG not in p.parts, len(p.parts), str(p)))


def find_data_root(
    explicit: str | os.PathLike[str] | None = None,
    *,
    env: Mapping[str, str] | None = None,
    kaggle_input: str | os.PathLike[str] = KAGGLE_INPUT,
    cwd: str | os.PathLike[str] | None = None,
) -> DataRoot:
    """Find the TpuGraphs data root.

    Searched in order: ``explicit`` (the CLI's ``--data``), ``$FASTSLOW_DATA``, a Kaggle mount (``npz_all/npz``
    up to 4 levels below ``kaggle_input``), then ``./data``, then ``./data/kaggle`` (where ``fastslow kaggle
    download`` unpacks), then ``./data/synthetic-demo`` (the synthetic world ``make submit`` generates when it
    finds no real data, so the other commands work on it too). A folder qualifies if it holds ``npz_all/npz/`` or
    ``npz/`` with ``tile/`` or ``layout/`` inside, or is such an ``npz/`` folder itself.

    Args:
        explicit: a path the user gave; if it does not qualify, this fails at once rather than searching on.
        env: environment to read ``FASTSLOW_DATA`` from (default ``os.environ``). Like ``explicit``, a set but
            unusable value fails at once: the user asked for that folder.
        kaggle_input: the Kaggle input folder (overridable for tests).
        cwd: folder that ``./data`` is relative to (default: the current directory).

    Returns:
        The resolved :class:`DataRoot`.

    Raises:
        DataRootNotFound: nothing qualifies; the message lists every place searched and how to get data.
    """
    env = os.environ if env is None else env
    if explicit is not None and str(explicit) != "":
        return _explicit_root(Path(explicit).expanduser().absolute(), "explicit path", "data root ")
    searched: list[str] = ["explicit path (--data): not given"]

    env_value = env.get(ENV_VAR, "")
    if env_value:
        return _explicit_root(Path(env_value).expanduser().absolute(), f"${ENV_VAR}", f"${ENV_VAR}=")
    searched.append(f"${ENV_VAR}: not set")

    kaggle_dir = Path(kaggle_input)
    for cand in _kaggle_candidates(kaggle_dir):
        found = _as_root(cand, "Kaggle mount")
        if found is not None:
            return found
    searched.append(f"Kaggle mount: {kaggle_dir}/**/npz_all/npz (up to {KAGGLE_GLOB_DEPTH - 1} folders deep): "
                    + ("nothing found" if kaggle_dir.is_dir() else f"{kaggle_dir} does not exist"))

    local = Path.cwd() if cwd is None else Path(cwd)
    data = (local / "data").absolute()
    found = _as_root(data, "./data")
    if found is not None:
        return found
    searched.append(f"./data ({data}): {_describe_folder(data)}")
    downloaded = data / "kaggle"  # where `fastslow kaggle download` unpacks the competition data
    found = _as_root(downloaded, "./data/kaggle")
    if found is not None:
        return found
    searched.append(f"./data/kaggle ({downloaded}): {_describe_folder(downloaded)}")
    demo = data / "synthetic-demo"  # the synthetic world `make submit` generates when it finds no real data
    found = _as_root(demo, "./data/synthetic-demo")
    if found is not None:
        return found
    searched.append(f"./data/synthetic-demo ({demo}): {_describe_folder(demo)}")

    places = "\n".join(f"  {i}. {s}" for i, s in enumerate(searched, 1))
    raise DataRootNotFound(
        f"no TpuGraphs data found. Searched, in order:\n{places}\n"
        f"A data root is {_ROOT_SHAPES}.\n{_GET_DATA}"
    )


def _hidden(name: str) -> bool:
    """Names starting with ``.``: macOS resource forks (``._x.npz``), editors' and our own temporary files."""
    return name.startswith(".")


def list_graphs(root: DataRoot, collection: Collection, split: Split) -> list[Path]:
    """The npz files of one collection and split, sorted by stem; empty if the folder is missing.

    Every entry named ``*.npz`` is listed, whatever it is: a folder, a broken link or a link loop so named is then
    refused by :func:`load_graph` with a message, never skipped without a word. Hidden entries (names starting with
    ``.``, see :func:`hidden_files`) are not listed, nor temporary files of an interrupted write
    (``.name.npz.XXXX.part``).

    Raises:
        OSError: the folder exists but cannot be listed.
    """
    d = root.collection_dir(collection, split)
    if not d.is_dir():
        return []
    return sorted((p for p in d.iterdir() if p.suffix == ".npz" and not _hidden(p.name)), key=lambda p: p.stem)


@dataclass(frozen=True)
class Listing:
    """Every collection and split folder of a data root, listed once: what a run passes on instead of the root, so
    that no later step lists a folder again (:func:`validate_root`, :func:`competition.submission.sample_problems`,
    :meth:`competition.dataset.Dataset.open`).

    Attributes:
        root: the data root listed.
        graphs: per (collection, split), :func:`list_graphs`'s files (empty for a missing folder, or one that could
            not be listed).
        errors: per (collection, split) whose folder exists but could not be listed, the error.
    """

    root: DataRoot
    graphs: dict[tuple[Collection, Split], tuple[Path, ...]]
    errors: dict[tuple[Collection, Split], OSError]

    @classmethod
    def of(cls, root: DataRoot) -> Listing:
        """List every collection and split folder of ``root`` now."""
        graphs: dict[tuple[Collection, Split], tuple[Path, ...]] = {}
        errors: dict[tuple[Collection, Split], OSError] = {}
        for c in Collection:
            for s in Split:
                try:
                    graphs[(c, s)] = tuple(list_graphs(root, c, s))
                except OSError as exc:
                    graphs[(c, s)], errors[(c, s)] = (), exc
        return cls(root, graphs, errors)

    def paths(self, collection: Collection, split: Split) -> list[Path]:
        """The files of one collection and split, as :func:`list_graphs` listed them.

        Raises:
            OSError: the folder could not be listed.
        """
        key = (Collection(collection), Split(split))
        if key in self.errors:
            raise self.errors[key]
        return list(self.graphs[key])


def listed_graphs(root: DataRoot, collection: Collection, split: Split, listing: Listing | None) -> list[Path]:
    """The files of one collection and split: from ``listing`` when one is given (it must be of ``root``), else
    listed now (:func:`list_graphs`)."""
    if listing is None:
        return list_graphs(root, collection, split)
    if listing.root != root:
        raise ValueError(f"a listing of {listing.root.root} given for {root.root}")
    return listing.paths(collection, split)


def collections_with_graphs(root: DataRoot, split: Split,
                            collections: Sequence[Collection] | None = None) -> list[Collection]:
    """The ``collections`` (default: all five), in order, whose ``split`` holds at least one graph.

    Raises:
        OSError: a folder exists but cannot be listed.
    """
    return [c for c in (list(Collection) if collections is None else collections) if list_graphs(root, c, split)]


def hidden_files(root: DataRoot, collections: Sequence[Collection] | None = None,
                 splits: Sequence[Split] | None = None) -> list[Path]:
    """Hidden ``*.npz`` entries that :func:`list_graphs` leaves out (e.g. macOS ``._x.npz`` resource forks).

    Folders that cannot be listed are passed over (:func:`validate_root` reports them).
    """
    out: list[Path] = []
    for c in list(Collection) if collections is None else collections:
        for s in list(Split) if splits is None else splits:
            d = root.collection_dir(c, s)
            try:
                out.extend(sorted(p for p in d.iterdir() if p.suffix == ".npz" and _hidden(p.name)))
            except OSError:
                continue
    return out


_SPLIT_USE = {
    Split.TRAIN: "models are fitted on them",
    Split.VALID: "models are chosen and ensembled on them",
    Split.TEST: "the submission ranks them",
}
# Characters a submission ID cannot hold as written unquoted in CSV (``:`` separates the collection prefix).
_ID_UNSAFE = re.compile(r'[,":\x00-\x1f\x7f]')


def _stem_problem(path: Path) -> DataFileError | None:
    stem = path.stem
    unsafe = _ID_UNSAFE.search(stem)
    if stem == stem.strip() and unsafe is None:
        return None
    found = f"{unsafe.group()!r} in {stem!r}" if unsafe else f"leading or trailing spaces in {stem!r}"
    return DataFileError(path, None, "a file name usable in a submission ID <collection>:<stem> (no ',', '\"', "
                         "':', control characters or surrounding spaces)", f"{found}: rename the file")


def validate_root(
    root: DataRoot,
    collections: Sequence[Collection] | None = None,
    splits: Sequence[Split] | None = None,
    *,
    synthetic: bool = False,
    listing: Listing | None = None,
) -> list[DataFileError]:
    """Problems of a data root that no single file shows, each naming the folder or file concerned.

    Checked, for each collection holding any graph: every split asked for is there with at least one graph (fitting
    needs train, choosing models needs valid, the submission ranks test), every folder can be listed, valid and
    test file names make usable submission IDs, and in a synthetic world every test graph has its ``secret/``
    runtimes, readable (the offline score of the test split reads them). A root without any graph is a problem too.

    Args:
        root: the data root.
        collections: the collections to check (default: all five).
        splits: the splits to check (default: all three).
        synthetic: the root is a synthetic world (``world.json``): test graphs need their secret files.
        listing: the root's folders as already listed (:class:`Listing`); default: listed now.

    Returns:
        The problems, in collection and split order.
    """
    collections = list(Collection) if collections is None else [Collection(c) for c in collections]
    splits = list(Split) if splits is None else [Split(s) for s in splits]
    out: list[DataFileError] = []
    held = False
    for c in collections:
        graphs: dict[Split, list[Path]] = {}
        unlisted: list[DataFileError] = []
        for s in Split:
            try:
                graphs[s] = listed_graphs(root, c, s, listing)
            except OSError as exc:
                graphs[s] = []
                if s in splits:
                    unlisted.append(DataFileError(root.collection_dir(c, s), None, "a folder that can be listed",
                                                  f"it cannot be ({exc.strerror or exc})"))
        out.extend(unlisted)
        if not any(graphs.values()) and not unlisted:
            continue
        held = True
        for s in splits:
            d = root.collection_dir(c, s)
            if not graphs[s] and not any(p.path == d for p in unlisted):
                found = "no .npz files" if d.is_dir() else "no such folder"
                out.append(DataFileError(d, None, f"{c.value} {s.value} graphs ({_SPLIT_USE[s]})", found))
        for s in (Split.VALID, Split.TEST):
            if s in splits:
                out.extend(p for p in map(_stem_problem, graphs[s]) if p is not None)
        if synthetic and Split.TEST in splits and graphs[Split.TEST]:
            out.extend(_secret_problems(root, c, graphs[Split.TEST]))
    if not held:
        out.append(DataFileError(root.npz_dir, None, "graph files (.npz) in at least one collection",
                                 f"none in {', '.join(c.value for c in collections)}"))
    return out


def _is_file(path: Path | None) -> bool:
    return path is not None and path.is_file()


def _secret_problems(root: DataRoot, collection: Collection, paths: Sequence[Path]) -> list[DataFileError]:
    if root.secret_dir is None:
        return [DataFileError(root.root / "secret", None, "the secret/ folder of a synthetic world (the test "
                              "split is scored with its runtimes)", "no such folder")]
    missing = [p.stem for p in paths if not _is_file(root.secret_file(collection, Split.TEST, p.stem))]
    out: list[DataFileError] = []
    if missing:
        folder = root.secret_dir / collection.relpath / Split.TEST.value
        shown = ", ".join(missing[:5]) + (f", ... ({len(missing)} in all)" if len(missing) > 5 else "")
        out.append(DataFileError(folder, None, f"a secret file for every {collection.value} test graph",
                                 f"{len(missing)} missing: {shown}"))
    # Present is not enough: scoring the test split reads each one (small files: one runtime per config).
    for p in paths:
        if p.stem not in missing:
            try:
                load_secret_runtime(root, collection, p.stem, split=Split.TEST)
            except DataFileError as exc:
                out.append(exc)
    return out


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
        with _open(self.path, self.block_bytes) as r:
            out = _guard(self.path, "node_config_feat", lambda: r.load_rows("node_config_feat", sel))
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
        with _open(self.path, self.block_bytes) as r:
            blocks = (r.iter_blocks("node_config_feat", block_rows) if self.config_rows is None
                      else r.iter_rows("node_config_feat", self.config_rows, block_rows))
            for first, block in _guard_iter(self.path, "node_config_feat", blocks):
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


@dataclass(frozen=True)
class SecretRuntime:
    """Hidden runtimes of one graph, from a synthetic world's ``secret/`` tree.

    Attributes:
        path: the secret file.
        config_runtime: int64 ``[C]``, ns, as measured.
        config_runtime_normalizers: int64 ``[C]`` for tile graphs, ``None`` for layout graphs.
    """

    path: Path
    config_runtime: npt.NDArray[np.int64]
    config_runtime_normalizers: npt.NDArray[np.int64] | None = None


# --------------------------------------------------------------------------------------------------------------
# Low-level guards: every failure of a file surfaces as a DataFileError naming it
# --------------------------------------------------------------------------------------------------------------


def _open(path: Path, block_bytes: int | None = None) -> NpzReader:
    r = NpzReader(path) if block_bytes is None else NpzReader(path, block_bytes=block_bytes)
    r.open()
    return r


_RAW_ERRORS = (zipfile.BadZipFile, zlib.error, EOFError, OSError, ValueError, KeyError)


def _convert(path: Path, key: str | None, exc: BaseException) -> DataFileError:
    return DataFileError(path, key, "a readable npz member" if key else "a readable npz file",
                         f"{type(exc).__name__}: {exc} (truncated or corrupt?)")


def _guard(path: Path, key: str | None, fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except DataFileError:
        raise
    except _RAW_ERRORS as exc:
        raise _convert(path, key, exc) from exc


def _guard_iter(path: Path, key: str, it: Iterator[Any]) -> Iterator[Any]:
    while True:
        try:
            item = next(it)
        except StopIteration:
            return
        except DataFileError:
            raise
        except _RAW_ERRORS as exc:
            raise _convert(path, key, exc) from exc
        yield item


# --------------------------------------------------------------------------------------------------------------
# Where a file belongs
# --------------------------------------------------------------------------------------------------------------


def infer_collection_split(path: str | os.PathLike[str]) -> tuple[Collection | None, Split | None]:
    """Collection and split from a path like ``.../layout/xla/random/train/x.npz`` (``None`` where unknown)."""
    parts = Path(path).parent.parts
    split: Split | None = None
    if parts and parts[-1] in {s.value for s in Split}:
        split, parts = Split(parts[-1]), parts[:-1]
    if len(parts) >= 3 and parts[-3] == "layout":
        try:
            return Collection(":".join(parts[-3:])), split
        except ValueError:
            pass
    if len(parts) >= 2 and tuple(parts[-2:]) == ("tile", "xla"):
        return Collection.TILE_XLA, split
    return None, split


def data_root_of(path: str | os.PathLike[str]) -> DataRoot | None:
    """The data root whose tree holds the file ``path`` (``<root>/npz/layout/xla/random/test/x.npz``), or ``None``
    for a file outside any data root's tree."""
    collection, split = infer_collection_split(path)
    if collection is None:
        return None
    npz_dir = Path(path).parent
    for _ in range(len(collection.relpath.parts) + (split is not None)):
        npz_dir = npz_dir.parent
    return _as_root(npz_dir, f"the tree of {path}")


def _kind_from_keys(path: Path, keys: list[str]) -> Kind:
    ks = set(keys)
    if ks & {"node_config_feat", "node_config_ids", "node_splits"}:
        return "layout"
    if ks & {"config_feat", "config_runtime_normalizers"}:
        return "tile"
    raise DataFileError(
        path, None, "the members of a tile file (config_feat, ...) or of a layout file (node_config_feat, ...)",
        f"members: {', '.join(keys) or 'none'}",
    )


# --------------------------------------------------------------------------------------------------------------
# Checks. Each is a generator of problems: load_graph stops at the first, validate_file collects them all.
# --------------------------------------------------------------------------------------------------------------

_FLOAT_KEYS = frozenset({"node_feat", "config_feat", "node_config_feat"})
_SYMBOL_SOURCE = {  # which member fixes each size symbol, per kind
    "tile": {"N": ("node_feat", 0), "E": ("edge_index", 0), "C": ("config_feat", 0)},
    "layout": {"N": ("node_feat", 0), "E": ("edge_index", 0), "C": ("node_config_feat", 0),
               "NC": ("node_config_feat", 1)},
}


def _fmt_shape(shape: Sequence[str | int]) -> str:
    return "[" + ", ".join(str(s) for s in shape) + "]"


def _dtype_problem(path: Path, spec: ArraySpec, info: MemberInfo) -> DataFileError | None:
    dt = info.dtype.newbyteorder("=") if info.dtype.byteorder not in "|=" else info.dtype
    if spec.key in _FLOAT_KEYS:
        if dt != np.float32:
            return DataFileError(path, spec.key, "dtype float32", f"dtype {info.dtype}")
    elif spec.key == "node_opcode":
        # Narrowed to uint8 after the values are checked against the opcode table.
        if dt.kind not in "iu":
            return DataFileError(path, spec.key, "an integer dtype (uint8; wider integers accepted)",
                                 f"dtype {info.dtype}")
    elif dt not in ACCEPTED_INT_DTYPES:
        accepted = ", ".join(str(d) for d in ACCEPTED_INT_DTYPES)
        return DataFileError(path, spec.key, f"dtype {spec.dtype} (also accepted: {accepted})",
                             f"dtype {info.dtype}")
    return None


def _header_problems(path: Path, r: NpzReader | _ArrayMembers, kind: Kind) -> Iterator[DataFileError]:
    specs = TILE_ARRAYS if kind == "tile" else LAYOUT_ARRAYS
    keys = r.keys()
    present = [s for s in specs if s.key in keys]
    for s in specs:
        if s.key not in keys:
            yield DataFileError(path, s.key, f"member {s.key!r} ({kind} file)",
                                f"missing (members: {', '.join(keys) or 'none'})")
    infos: dict[str, MemberInfo] = {}
    for s in present:
        info = _as_specified(s.key, r.info(s.key))
        bad_dtype = _dtype_problem(path, s, info)
        if bad_dtype is not None:
            yield bad_dtype
        if len(info.shape) != len(s.shape):
            yield DataFileError(path, s.key, f"{len(s.shape)}-D shape {_fmt_shape(s.shape)}",
                                f"{len(info.shape)}-D shape {info.shape}")
            continue
        fixed = [(i, d) for i, d in enumerate(s.shape) if isinstance(d, int)]
        wrong = [(i, d) for i, d in fixed if info.shape[i] != d]
        if wrong:
            yield DataFileError(path, s.key, f"shape {_fmt_shape(s.shape)}", f"shape {info.shape}")
            continue
        infos[s.key] = info
    # Sizes that several members share must agree; each symbol is fixed by one member (_SYMBOL_SOURCE).
    sizes: dict[str, tuple[int, str]] = {}
    for sym, (key, axis) in _SYMBOL_SOURCE[kind].items():
        if key in infos:
            sizes[sym] = (infos[key].shape[axis], key)
    for s in present:
        info = infos.get(s.key)
        if info is None:
            continue
        for axis, sym in enumerate(s.shape):
            if isinstance(sym, int) or sym not in sizes:
                continue
            want, source = sizes[sym]
            if source == s.key:
                continue
            if info.shape[axis] != want:
                yield DataFileError(
                    path, s.key, f"shape {_fmt_shape(s.shape)} with {sym}={want} ({sym} from {source})",
                    f"shape {info.shape}",
                )
    if "node_feat" in infos and infos["node_feat"].shape[0] == 0:
        yield DataFileError(path, "node_feat", "at least one node", "shape (0, 140)")
    c_key = "config_feat" if kind == "tile" else "node_config_feat"
    if c_key in infos and infos[c_key].shape[0] == 0:
        yield DataFileError(path, c_key, "at least one config", f"shape {infos[c_key].shape}")
    if kind == "layout" and c_key in infos and infos[c_key].shape[1] == 0:
        yield DataFileError(path, c_key, "at least one configurable node (NC >= 1)",
                            f"shape {infos[c_key].shape}: configs that configure no node")


STREAMED_MEMBERS = frozenset({"node_config_feat"})
"""Members read in blocks of rows, never whole: they must be C-ordered. Every other member is read whole, and may be
Fortran-ordered (as numpy writes a transposed or column-selected array): it is copied to C order."""


def _as_specified(key: str, info: MemberInfo) -> MemberInfo:
    """``info`` with a 1-D ``node_splits`` (what the official featurizer writes) seen as the ``[1, S]`` the format
    specifies; other members unchanged."""
    if key == "node_splits" and len(info.shape) == 1:
        return dataclasses.replace(info, shape=(1, info.shape[0]))
    return info


def _load_arrays(r: NpzReader | _ArrayMembers, kind: Kind) -> dict[str, npt.NDArray[Any]]:
    """Every member but the streamed ones, C-ordered, in the shapes the format specifies (:func:`_as_specified`)."""
    specs = TILE_ARRAYS if kind == "tile" else LAYOUT_ARRAYS
    out = {s.key: r.load(s.key) for s in specs if s.key not in STREAMED_MEMBERS}
    if "node_splits" in out and out["node_splits"].ndim == 1:
        out["node_splits"] = out["node_splits"].reshape(1, -1)
    return out


def _first_nonfinite(a: npt.NDArray[np.floating]) -> tuple[tuple[int, ...], float, int] | None:
    bad = ~np.isfinite(a)
    if not bad.any():
        return None
    where = tuple(int(i) for i in np.argwhere(bad)[0])
    return where, float(a[where]), int(bad.sum())


def _finite_problem(path: Path, key: str, a: npt.NDArray[np.floating], axes: Sequence[str]) -> DataFileError | None:
    hit = _first_nonfinite(a)
    if hit is None:
        return None
    where, value, count = hit
    at = ", ".join(f"{name} {i}" for name, i in zip(axes, where, strict=True))
    return DataFileError(path, key, "finite values", f"{value} at {at} ({count} non-finite in all)")


def _runtime_problems(path: Path, a: npt.NDArray[np.int64], key: str, split: Split | None
                      ) -> Iterator[DataFileError]:
    neg = np.flatnonzero(a < 0)
    if neg.size:
        yield DataFileError(path, key, "runtimes >= 0 ns", f"{int(a[neg[0]])} at config {int(neg[0])} "
                                                           f"({neg.size} negative)")
    zero = np.flatnonzero(a == 0)
    if a.size and zero.size == a.size and split in (Split.TRAIN, Split.VALID):
        # All zero is how test files hide their labels; a train or valid file so written has nothing to learn from.
        yield DataFileError(path, key, f"runtimes > 0 ns in a {split.value} file (only test files hide them as "
                                       "all zeros)", f"all {a.size} runtimes are 0")
    if 0 < zero.size < a.size:
        yield DataFileError(
            path, key, "all runtimes > 0 ns (or all 0 in a test file)",
            f"{zero.size} of {a.size} runtimes are 0 (first at config {int(zero[0])})",
        )


def _normalizer_problems(path: Path, norm: npt.NDArray[np.int64], runtime: npt.NDArray[np.int64]
                         ) -> Iterator[DataFileError]:
    is_test = runtime.size > 0 and not runtime.any()
    bad = np.flatnonzero(norm < 0 if is_test else norm <= 0)
    if bad.size:
        i = int(bad[0])
        need = "normalizers >= 0 ns (test file)" if is_test else "normalizers > 0 ns"
        yield DataFileError(path, "config_runtime_normalizers", need,
                            f"{int(norm[i])} at config {i} ({bad.size} in all)")


def _value_problems(path: Path, arrays: Mapping[str, npt.NDArray[Any]], kind: Kind, split: Split | None
                    ) -> Iterator[DataFileError]:
    n = arrays["node_feat"].shape[0]
    p = _finite_problem(path, "node_feat", arrays["node_feat"], ("node", "column"))
    if p is not None:
        yield p
    ops = arrays["node_opcode"]
    bad_ops = np.flatnonzero(~np.isin(ops, np.fromiter(VALID_OPCODES, dtype=np.int64)))
    if bad_ops.size:
        i = int(bad_ops[0])
        yield DataFileError(
            path, "node_opcode", "opcode ids in 0..120 except the tombstoned 97 and 101",
            f"{int(ops[i])} at node {i} ({bad_ops.size} nodes with unknown opcodes)",
        )
    e = arrays["edge_index"]
    out = np.flatnonzero(((e < 0) | (e >= n)).any(axis=1))
    if out.size:
        i = int(out[0])
        yield DataFileError(path, "edge_index", f"node indices in [0, {n}) (N={n})",
                            f"row {i} = {e[i].tolist()} ({out.size} rows out of range)")
    loops = np.flatnonzero(e[:, 0] == e[:, 1]) if e.size else np.zeros(0, np.int64)
    if loops.size:
        i = int(loops[0])
        yield DataFileError(path, "edge_index", "no self loops (the featurizer never writes one)",
                            f"self loop at row {i} = {e[i].tolist()} ({loops.size} in all)")
    runtime = arrays["config_runtime"]
    yield from _runtime_problems(path, runtime, "config_runtime", split)
    if kind == "tile":
        p = _finite_problem(path, "config_feat", arrays["config_feat"], ("config", "column"))
        if p is not None:
            yield p
        yield from _normalizer_problems(path, arrays["config_runtime_normalizers"], runtime)
        return
    ids = arrays["node_config_ids"]
    out = np.flatnonzero((ids < 0) | (ids >= n))
    if out.size:
        i = int(out[0])
        yield DataFileError(path, "node_config_ids", f"node indices in [0, {n}) (N={n})",
                            f"{int(ids[i])} at position {i}")
    steps = np.flatnonzero(np.diff(ids) <= 0)
    if steps.size:
        i = int(steps[0])
        yield DataFileError(path, "node_config_ids", "strictly ascending node indices",
                            f"{int(ids[i])} then {int(ids[i + 1])} at positions {i}, {i + 1}")
    splits = arrays["node_splits"].reshape(-1)
    if splits.size == 0 or splits[0] != 0:
        yield DataFileError(path, "node_splits", "[[0, ..., N]] starting at 0",
                            f"first value {int(splits[0])}" if splits.size else "an empty array")
    drops = np.flatnonzero(np.diff(splits) < 0)
    if drops.size:
        i = int(drops[0])
        yield DataFileError(path, "node_splits", "non-decreasing boundaries",
                            f"{int(splits[i])} then {int(splits[i + 1])} at positions {i}, {i + 1}")
    if splits.size and splits[-1] != n:
        yield DataFileError(path, "node_splits", f"last value N={n} (number of nodes)",
                            f"last value {int(splits[-1])}")


def _config_problems(path: Path, r: NpzReader | _ArrayMembers, *, ranges: bool) -> Iterator[DataFileError]:
    """Problems of ``node_config_feat``'s values, streamed: non-finite values, and with ``ranges`` values outside
    the layout range."""
    lo, hi = LAYOUT_VALUE_RANGE
    # One message per kind of problem, with the first place and a total: a broken member must not flood.
    first: dict[str, tuple[int, int, int, float]] = {}
    counts = {"nonfinite": 0, "off": 0}
    for start, block in _guard_iter(path, "node_config_feat", r.iter_blocks("node_config_feat")):
        masks = {"nonfinite": ~np.isfinite(block)}
        if ranges:
            with np.errstate(invalid="ignore"):
                masks["off"] = ~masks["nonfinite"] & ((block != np.round(block)) | (block < lo) | (block > hi))
        for name, mask in masks.items():
            if mask.any():
                counts[name] += int(mask.sum())
                if name not in first:
                    c, k, j = (int(x) for x in np.argwhere(mask)[0])
                    first[name] = (start + c, k, j, float(block[c, k, j]))
    expected = {"nonfinite": "finite values", "off": f"integer layout values in {lo}..{hi}"}
    total = {"nonfinite": "non-finite in all", "off": "such values in all"}
    for name in ("nonfinite", "off"):
        if name in first:
            c, k, j, v = first[name]
            yield DataFileError(path, "node_config_feat", expected[name],
                                f"{v} at config {c}, configurable node {k}, column {j} ({counts[name]} {total[name]})")


class _ArrayMembers:
    """Arrays held in memory, read as :class:`~competition.npzio.NpzReader` reads a file's members: what
    :func:`validate_arrays` checks before they are written."""

    def __init__(self, arrays: Mapping[str, npt.ArrayLike]) -> None:
        self._arrays = {key: np.asarray(value) for key, value in arrays.items()}

    def keys(self) -> list[str]:
        return list(self._arrays)

    def info(self, key: str) -> MemberInfo:
        a = self._arrays[key]
        return MemberInfo(key, tuple(int(d) for d in a.shape), a.dtype, False)

    def load(self, key: str) -> npt.NDArray[Any]:
        return np.ascontiguousarray(self._arrays[key])

    def iter_blocks(self, key: str, block_rows: int | None = None) -> Iterator[tuple[int, npt.NDArray[Any]]]:
        a = self._arrays[key]
        step = block_rows or max(1, DEFAULT_BLOCK_BYTES // max(self.info(key).row_bytes, 1))
        for start in range(0, a.shape[0], step):
            yield start, a[start:start + step]


def _problems(
    path: Path, collection: Collection | None, *, validate: bool, deep: bool, sink: dict[str, Any],
    finite_configs: bool = False,
) -> Iterator[DataFileError]:
    """All problems of one file, in order; on success ``sink`` receives what a record needs."""
    with _open(path) as r:
        yield from _member_problems(path, r, collection, validate=validate, deep=deep, sink=sink,
                                    finite_configs=finite_configs)


def _member_problems(
    path: Path, r: NpzReader | _ArrayMembers, collection: Collection | None, *, validate: bool, deep: bool,
    sink: dict[str, Any], finite_configs: bool = False,
) -> Iterator[DataFileError]:
    """All problems of the members ``r`` reads (a file's, or arrays about to be written to ``path``)."""
    keys = _guard(path, None, r.keys)
    path_collection, split = infer_collection_split(path)
    collection = Collection(collection) if collection is not None else path_collection
    kind: Kind
    if collection is not None:
        kind = Collection(collection).kind
    else:
        kind = _kind_from_keys(path, keys)
        collection = Collection.TILE_XLA if kind == "tile" else None
    header = _guard(path, None, lambda: list(_header_problems(path, r, kind)))
    if header:
        yield from header
        return
    try:
        arrays = _guard(path, None, lambda: _load_arrays(r, kind))
    except DataFileError as exc:
        yield exc
        return
    if validate:
        yield from _value_problems(path, arrays, kind, split)
        if (deep or finite_configs) and kind == "layout":
            try:
                yield from _config_problems(path, r, ranges=deep)
            except DataFileError as exc:
                yield exc
    sink.update(arrays=arrays, kind=kind, collection=collection, split=split)


def _widen(arrays: dict[str, npt.NDArray[Any]]) -> dict[str, npt.NDArray[Any]]:
    out = {}
    for key, a in arrays.items():
        if key in _FLOAT_KEYS:
            out[key] = np.ascontiguousarray(a, dtype=np.float32)
        elif key == "node_opcode":
            # Values were checked against the opcode table (or the caller opted out of checks): keep what fits.
            if a.dtype != np.uint8 and a.size and (a.min() < 0 or a.max() > 255):
                raise ValueError("opcode ids outside 0..255 cannot be stored as uint8")
            out[key] = a.astype(np.uint8, copy=False)
        else:
            out[key] = a.astype(np.int64, copy=False)
    return out


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
    problems = _problems(path, collection, validate=validate, deep=deep, sink=sink)
    try:
        first = next(problems, None)
    finally:
        problems.close()  # releases the file now, not when the generator is collected
    if first is not None:
        raise first
    try:
        a = _widen(sink["arrays"])
    except ValueError as exc:
        raise DataFileError(path, "node_opcode", "opcode ids that fit uint8", str(exc)) from None
    common = dict(path=path, collection=sink["collection"], split=sink["split"], node_feat=a["node_feat"],
                  node_opcode=a["node_opcode"], edge_index=a["edge_index"], config_runtime=a["config_runtime"])
    if sink["kind"] == "tile":
        return TileGraph(**common, config_feat=a["config_feat"],
                         config_runtime_normalizers=a["config_runtime_normalizers"])
    return LayoutGraph(**common, node_config_ids=a["node_config_ids"], node_splits=a["node_splits"],
                       check_finite=validate)


def load_runtimes(path: str | os.PathLike[str], collection: Collection
                  ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64] | None]:
    """The runtimes of one graph file, and a tile file's normalizers, read from those members alone (never
    ``node_config_feat``), checked as :func:`load_graph` checks them.

    Args:
        path: the npz file (its folder tells the split: a train or valid file may not hide its runtimes as zeros).
        collection: the file's collection.

    Returns:
        ``(config_runtime, config_runtime_normalizers)``: int64 ``[C]`` in ns; the normalizers ``None`` for layout.

    Raises:
        DataFileError: the first problem found, naming the file and the key.
    """
    path = Path(path)
    collection = Collection(collection)
    specs = {s.key: s for s in (TILE_ARRAYS if collection.is_tile else LAYOUT_ARRAYS)}
    wanted = ["config_runtime"] + (["config_runtime_normalizers"] if collection.is_tile else [])
    out: dict[str, npt.NDArray[np.int64]] = {}
    with _open(path) as r:
        keys = _guard(path, None, r.keys)
        for key in wanted:
            if key not in keys:
                raise DataFileError(path, key, f"member {key!r}", f"missing (members: {', '.join(keys) or 'none'})")
            info = _guard(path, key, lambda k=key: r.info(k))
            problem = _dtype_problem(path, specs[key], info)
            if problem is not None:
                raise problem
            if len(info.shape) != 1 or (out and info.shape[0] != out["config_runtime"].size):
                raise DataFileError(path, key, "shape [C]" + (" with C from config_runtime" if out else ""),
                                    f"shape {info.shape}")
            out[key] = _guard(path, key, lambda k=key: r.load(k)).astype(np.int64)
    runtime, norm = out["config_runtime"], out.get("config_runtime_normalizers")
    problems = _runtime_problems(path, runtime, "config_runtime", infer_collection_split(path)[1])
    if norm is not None:
        problems = itertools.chain(problems, _normalizer_problems(path, norm, runtime))
    first = next(problems, None)
    if first is not None:
        raise first
    return runtime, norm


def validate_file(
    path: str | os.PathLike[str], collection: Collection | None = None, deep: bool = False, *,
    finite_configs: bool = False,
) -> list[DataFileError]:
    """Every problem of one file (empty list: the file is good).

    Structure is checked first; if the structure is wrong the values are not examined, since their meaning is
    then unclear. See :func:`load_graph` for what is checked.

    Args:
        path: the npz file.
        collection: as for :func:`load_graph`.
        deep: also stream through ``node_config_feat`` checking every value (finite, integer, in -1..5).
        finite_configs: also stream through ``node_config_feat`` checking only that it is finite, as reading the
            record's configs would (the cost is decompressing the member once; the check itself is cheap).

    Returns:
        The problems, each a :class:`DataFileError`, in the order found.
    """
    path = Path(path)
    problems: list[DataFileError] = []
    try:
        problems.extend(_problems(path, collection, validate=True, deep=deep, sink={},
                                  finite_configs=finite_configs))
    except DataFileError as exc:
        problems.append(exc)
    return problems


def validate_arrays(arrays: Mapping[str, npt.ArrayLike], path: str | os.PathLike[str],
                    collection: Collection | None = None, deep: bool = False) -> list[DataFileError]:
    """Every problem the file ``path`` would have if ``arrays`` were written there, found before it is written: the
    checks of :func:`validate_file` (its split told by ``path``), on the arrays in memory.

    Args:
        arrays: the members, as :func:`~competition.npzio.write_npz` takes them (no streamed ones).
        path: where they are to be written (its folders tell the collection and split).
        collection: as for :func:`load_graph`.
        deep: as for :func:`validate_file`.

    Returns:
        The problems, each a :class:`DataFileError` naming ``path``, in the order found.
    """
    problems: list[DataFileError] = []
    try:
        problems.extend(_member_problems(Path(path), _ArrayMembers(arrays), collection, validate=True, deep=deep,
                                         sink={}))
    except DataFileError as exc:
        problems.append(exc)
    return problems


def load_secret_runtime(
    root: DataRoot,
    collection: Collection,
    path_or_stem: str | os.PathLike[str],
    *,
    split: Split | None = None,
) -> SecretRuntime:
    """The hidden runtimes of a graph, from the ``secret/`` tree of a synthetic world.

    Args:
        root: the data root; must have a ``secret/`` folder.
        collection: the graph's collection.
        path_or_stem: the graph's npz path (its folder gives the split) or its stem.
        split: the split, if ``path_or_stem`` does not tell; default test.

    Returns:
        A :class:`SecretRuntime`: int64 ``[C]`` runtimes in ns, and for tile also the normalizers.

    Raises:
        DataFileError: no secret tree or file, or the file lacks or mangles ``config_runtime``.
    """
    collection = Collection(collection)
    given = Path(path_or_stem)
    stem = given.stem if given.suffix == ".npz" else given.name
    if split is None:
        split = infer_collection_split(given)[1] if given.suffix == ".npz" else None
    split = split or Split.TEST
    secret = root.secret_file(collection, split, stem)
    if secret is None:
        raise DataFileError(root.root / "secret", None,
                            "a secret/ folder of hidden runtimes (synthetic worlds only; Kaggle keeps them hidden)",
                            "no such folder")
    if not secret.is_file():
        raise DataFileError(secret, None, f"the secret file of {collection.value}:{stem} ({split.value})",
                            "no such file")
    with _open(secret) as r:
        keys = _guard(secret, None, r.keys)
        wanted = ["config_runtime"] + (["config_runtime_normalizers"] if collection.is_tile else [])
        out: dict[str, npt.NDArray[np.int64]] = {}
        for key in wanted:
            if key not in keys:
                raise DataFileError(secret, key, f"member {key!r} (hidden measured runtimes)",
                                    f"missing (members: {', '.join(keys)}); only test graphs have them")
            a = _guard(secret, key, lambda k=key: r.load(k))
            if a.ndim != 1 or a.dtype not in ACCEPTED_INT_DTYPES:
                raise DataFileError(secret, key, "an integer [C] array", f"{a.dtype} shape {a.shape}")
            out[key] = a.astype(np.int64, copy=False)
    return SecretRuntime(secret, out["config_runtime"], out.get("config_runtime_normalizers"))
