"""The TpuGraphs data root: where it is, which graphs it holds, their secret runtimes, what is wrong with it.

The real Kaggle download and the synthetic world share the layout:

* :func:`find_data_root` resolves the data root (``--data``, ``$FASTSLOW_DATA``, a Kaggle mount, ``./data``,
  ``./data/kaggle``, ``./data/synthetic-demo``).
* :func:`list_graphs` lists the graph files of one collection and split; a :class:`Listing` lists every folder once.
* :func:`load_secret_runtime` reads a graph's hidden runtimes from a synthetic world's ``secret/`` tree.
* :func:`validate_root` lists the problems no single file shows (a missing split, file names unusable in a
  submission, missing secret runtimes).

Nothing is read outside the data root: a graph file, a split folder or a secret file whose real path (symbolic links
followed) leaves it is refused, naming it (:func:`inside_root`); a link to another place inside the root is followed.

One graph file is read by :func:`competition.reader.load_graph` and checked by :mod:`competition.graphfile`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import numpy.typing as npt

from competition.collections import Collection, Split
from competition.errors import DataFileError, DataRootNotFound, printable
from competition.graphfile import guard, infer_collection_split, open_npz
from competition.nesting import json_loads
from competition.schema import ACCEPTED_INT_DTYPES

ENV_VAR = "FASTSLOW_DATA"
KAGGLE_INPUT = Path("/kaggle/input")
KAGGLE_SLUG = "predict-ai-model-runtime"
# Wildcard levels between the Kaggle input folder and npz_all/ (the 2026 mount adds competitions/).
KAGGLE_GLOB_DEPTH = 4

TreeFormat = Literal["kaggle", "tarball"]

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
        """Where the secret file of a graph would be, or ``None`` when this root has no ``secret/`` tree.

        Raises:
            DataFileError: something is there, but its real path leaves the data root (:func:`inside_root`).
        """
        if self.secret_dir is None:
            return None
        path = self.secret_dir / Collection(collection).relpath / Split(split).value / f"{stem}.npz"
        if os.path.lexists(path):
            inside_root(self, path, "secret file")
        return path

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


def _real(path: Path) -> Path:
    """``path`` with every symbolic link followed (as far as they lead: a broken link or a loop stays as written)."""
    return Path(os.path.realpath(path))


def inside_root(root: DataRoot, path: Path, what: str) -> Path:
    """``path``, after checking that its real path (every symbolic link followed) lies inside the data root: under
    its folder, or under its ``npz/`` tree (which may itself be a link to another disk). A link from one place of
    the root to another is allowed.

    Args:
        root: the data root.
        path: a path under the root's folders, as listed.
        what: what ``path`` is, for the message (``graph file``, ``folder``).

    Raises:
        DataFileError: the real path leaves the root, naming ``path`` and where it leads.
    """
    real = _real(path)
    for base in {_real(root.root), _real(root.npz_dir)}:
        if real == base or base in real.parents:
            return path
    raise DataFileError(path, None, f"a {what} inside the data root {printable(root.root)}",
                        f"a path leading to {printable(real)}, outside it, through a symbolic link (fastslow reads "
                        "nothing outside the data root: copy the file into it, or point --data at where it lies)")


def list_graphs(root: DataRoot, collection: Collection, split: Split) -> list[Path]:
    """The npz files of one collection and split, sorted by stem; empty if the folder is missing.

    Every entry named ``*.npz`` is listed, whatever it is: a folder, a broken link or a link loop so named is then
    refused by :func:`competition.reader.load_graph` with a message, never skipped without a word. Hidden entries
    (names starting with ``.``, see :func:`hidden_files`) are not listed, nor temporary files of an interrupted
    write (``.name.npz.XXXX.part``). The folder, and every entry that is a symbolic link, must lead to a place
    inside the data root (:func:`inside_root`).

    Raises:
        OSError: the folder exists but cannot be listed.
        DataFileError: the folder or a listed entry leads outside the data root.
    """
    d = root.collection_dir(collection, split)
    if not d.is_dir():
        return []
    inside_root(root, d, "folder")
    found = [p for p in d.iterdir() if p.suffix == ".npz" and not _hidden(p.name)]
    for p in found:
        # The folder's real path is inside: only an entry that is itself a link can lead elsewhere, and telling
        # costs one lstat, not a resolution of the whole path.
        if p.is_symlink():
            inside_root(root, p, "graph file")
    return sorted(found, key=lambda p: p.stem)


@dataclass(frozen=True)
class Listing:
    """Every collection and split folder of a data root, listed once: what a run passes on instead of the root, so
    that no later step lists a folder again (:func:`validate_root`,
    :func:`competition.submission_checks.sample_problems`, :meth:`competition.dataset.Dataset.open`).

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
        """List every collection and split folder of ``root`` now.

        Raises:
            DataFileError: a folder or graph file leads outside the data root (:func:`list_graphs`): the run is
                refused before anything is read.
        """
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

    Folders that cannot be listed, or that lead outside the data root, are passed over (:func:`validate_root` and
    :func:`list_graphs` report them).
    """
    out: list[Path] = []
    for c in list(Collection) if collections is None else collections:
        for s in list(Split) if splits is None else splits:
            d = root.collection_dir(c, s)
            try:
                if d.is_dir():
                    inside_root(root, d, "folder")
                out.extend(sorted(p for p in d.iterdir() if p.suffix == ".npz" and _hidden(p.name)))
            except (OSError, DataFileError):
                continue
    return out


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
            except DataFileError as exc:  # a folder or file leading outside the root
                graphs[s] = []
                if s in splits:
                    unlisted.append(exc)
        out.extend(unlisted)
        if not any(graphs.values()) and not unlisted:
            continue
        held = True
        for s in splits:
            d = root.collection_dir(c, s)
            if not graphs[s] and not any(p.path == d or p.path.parent == d for p in unlisted):
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
    out: list[DataFileError] = []
    missing: list[str] = []
    for p in paths:
        try:
            if not _is_file(root.secret_file(collection, Split.TEST, p.stem)):
                missing.append(p.stem)
        except DataFileError as exc:  # a secret file leading outside the root
            out.append(exc)
    outside = {exc.path.stem for exc in out}
    if missing:
        folder = root.secret_dir / collection.relpath / Split.TEST.value
        shown = ", ".join(missing[:5]) + (f", ... ({len(missing)} in all)" if len(missing) > 5 else "")
        out.append(DataFileError(folder, None, f"a secret file for every {collection.value} test graph",
                                 f"{len(missing)} missing: {shown}"))
    # Present is not enough: scoring the test split reads each one (small files: one runtime per config).
    for p in paths:
        if p.stem not in missing and p.stem not in outside:
            try:
                load_secret_runtime(root, collection, p.stem, split=Split.TEST)
            except DataFileError as exc:
                out.append(exc)
    return out


# --------------------------------------------------------------------------------------------------------------
# Secret runtimes
# --------------------------------------------------------------------------------------------------------------


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
    with open_npz(secret) as r:
        keys = guard(secret, None, r.keys)
        wanted = ["config_runtime"] + (["config_runtime_normalizers"] if collection.is_tile else [])
        out: dict[str, npt.NDArray[np.int64]] = {}
        for key in wanted:
            if key not in keys:
                raise DataFileError(secret, key, f"member {key!r} (hidden measured runtimes)",
                                    f"missing (members: {', '.join(map(printable, keys))}); only test graphs have them")
            a = guard(secret, key, lambda k=key: r.load(k))
            if a.ndim != 1 or a.dtype not in ACCEPTED_INT_DTYPES:
                raise DataFileError(secret, key, "an integer [C] array", f"{a.dtype} shape {a.shape}")
            out[key] = a.astype(np.int64, copy=False)
    return SecretRuntime(secret, out["config_runtime"], out.get("config_runtime_normalizers"))
