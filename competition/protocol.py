"""The valid protocol: which configs of a valid layout graph are scored, and how.

Real nlp valid graphs hold 25,000 to 100,000 configs each (about 1.4 million per collection). The official
evaluation scores 1,000 fixed configs per valid layout graph; by default fastslow does the same: a fixed, seeded
subset of at most :data:`DEFAULT_VALID_CONFIGS` configs per valid layout graph, drawn from the graph's ID and config
count only, so every consumer (early stopping, model choice, the ensemble, the leaderboard, the report) draws the
same subset without being told it. ``ValidProtocol(None)`` (``--valid-configs all``) scores every config.

The official protocol (``--valid-indices official``, or a folder of index files: :class:`EvalIndices`) scores each
valid layout graph its files list on exactly the listed config indices, as the official ``layout_evaluate.py``
does: runtimes and predictions gathered at the listed indices, repeats included, and Kendall tau-b taken between
them (a repeated index adds pairs tied on both sides, which tau-b leaves out, and weighs its pairs with the other
configs once per repeat). Graphs not listed (a synthetic world's) fall back to the seeded protocol, with a note.

Tile graphs are always scored on every config: the tile metric is the best of the first five among all configs, and
tile kernels hold at most about 10,000 configs.

A valid submission row for a layout graph lists the scored configs (:meth:`ValidProtocol.configs`: the distinct
config indices, original indices into the graph's configs), fastest first; a full permutation of ``range(C)`` is
accepted too, and is then scored on those configs in its own order.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import numpy as np
import numpy.typing as npt

from competition.collections import Collection, Split
from competition.errors import printable, shown
from competition.limits import MAX_INDEX_ENTRIES, MAX_INDEX_FILE_BYTES, MAX_INDEX_GRAPHS, file_over, over
from competition.nesting import json_loads, long_number

if TYPE_CHECKING:
    from competition.dataroot import DataRoot
    from competition.reader import LayoutGraph, TileGraph

    GraphT = TypeVar("GraphT", LayoutGraph, TileGraph)

log = logging.getLogger(__name__)

DEFAULT_VALID_CONFIGS = 1000
"""Configs scored per valid layout graph by default (as in the official evaluation files)."""
ALL = "all"
OFFICIAL = "official"
"""The ``--valid-indices`` value naming the official index files shipped with fastslow (:data:`OFFICIAL_DIR`)."""
OFFICIAL_DIR = Path(__file__).resolve().parent / "data" / "eval_indices"
"""The official evaluation's index files, shipped as package data (their source and license: README.md there)."""
INDEX_FILES: dict[Collection, str] = {
    Collection.LAYOUT_XLA_DEFAULT: "xla_default.json",
    Collection.LAYOUT_XLA_RANDOM: "xla_random.json",
    Collection.LAYOUT_NLP_DEFAULT: "nlp_default.json",
    Collection.LAYOUT_NLP_RANDOM: "nlp_random.json",
}
"""The index file of each layout collection, named as in the official repository."""


class EvalIndicesError(ValueError):
    """An index file or folder that cannot be used, or an index out of range for the graph it lists."""


def _no_repeated_keys(path: Path):
    def hook(pairs: list[tuple[str, object]]) -> dict[str, object]:
        out: dict[str, object] = {}
        for key, value in pairs:
            if key in out:
                raise EvalIndicesError(f"{path}: expected each graph listed once; found {key!r} twice")
            out[key] = value
        return out

    return hook


def _read_index_file(path: Path) -> dict[str, npt.NDArray[np.int64]]:
    """One index file: graph stem -> int64 config indices, as listed (order and repeats kept); its size, graphs and
    indices are checked against their limits before it is parsed."""
    if not path.is_file():
        raise EvalIndicesError(f"{path}: expected an index file; found {'no file' if not path.exists() else 'not a regular file'}")
    problem = file_over(path, MAX_INDEX_FILE_BYTES, "MAX_INDEX_FILE_BYTES")
    if problem is not None:
        raise EvalIndicesError(f"{path}: {problem}; not read")
    data = path.read_bytes()
    problem = (over(data.count(b":"), MAX_INDEX_GRAPHS, "MAX_INDEX_GRAPHS", "graph names (':' counted before parsing)")
               or over(data.count(b","), MAX_INDEX_ENTRIES, "MAX_INDEX_ENTRIES",
                       "config indices (',' counted before parsing)"))
    if problem is not None:
        raise EvalIndicesError(f"{path}: {problem}; not parsed")
    try:
        doc = json_loads(data.decode("utf-8"), object_pairs_hook=_no_repeated_keys(path))
    except UnicodeDecodeError as exc:
        raise EvalIndicesError(f"{path}: expected JSON text; found byte {exc.start} undecodable ({exc.reason})") from None
    except json.JSONDecodeError as exc:
        raise EvalIndicesError(f"{path}: expected JSON mapping graph names to lists of config indices; found "
                               f"invalid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})") from None
    except EvalIndicesError:  # a graph listed twice (the hook's)
        raise
    except ValueError as exc:  # what json does not wrap: a number longer than Python reads, at no place it names
        found = long_number(data.decode("utf-8"))
        if found is None:
            raise EvalIndicesError(f"{path}: expected JSON mapping graph names to lists of config indices; found a "
                                   f"value Python cannot read ({shown(exc)})") from None
        line, column, digits = found
        raise EvalIndicesError(f"{path}: expected config indices below 2**62; found a number of {digits:,} digits "
                               f"(line {line}, column {column})") from None
    if not isinstance(doc, dict):
        raise EvalIndicesError(f"{path}: expected a JSON object mapping graph names to lists of config indices; "
                               f"found a JSON {type(doc).__name__}")
    out: dict[str, npt.NDArray[np.int64]] = {}
    for stem in list(doc):
        values = doc.pop(stem)  # each list dropped once its array is made
        where = f"{path}: graph {stem!r}"
        if not stem:
            raise EvalIndicesError(f"{path}: expected graph names; found an empty one")
        if not isinstance(values, list) or not all(type(v) is int for v in values):
            found = (f"a JSON {type(values).__name__}" if not isinstance(values, list) else
                     f"{next(v for v in values if type(v) is not int)!r} among them")
            raise EvalIndicesError(f"{where}: expected a list of config indices (non-negative integers); found {found}")
        if values and min(values) < 0:
            pos = int(np.argmin(values))
            raise EvalIndicesError(f"{where}: expected non-negative config indices; found {values[pos]} at position {pos}")
        if values and max(values) >= 2**62:
            raise EvalIndicesError(f"{where}: expected config indices below 2**62; found {max(values)}")
        arr = np.asarray(values, dtype=np.int64)
        if np.unique(arr).size < 2:
            raise EvalIndicesError(f"{where}: expected at least 2 distinct config indices to rank; found "
                                   f"{np.unique(arr).size}")
        arr.flags.writeable = False
        out[stem] = arr
    return out


@dataclass(frozen=True, eq=False)
class EvalIndices:
    """Fixed config indices per valid layout graph: the official evaluation's (:meth:`official`) or files of the same
    form in another folder (:meth:`load`). Two sets with the same content are equal, wherever they were read from.

    Attributes:
        source: the folder read, or :data:`OFFICIAL` for the shipped files.
        files: the index file of each collection that has one.
        lists: per collection, graph stem -> int64 config indices as listed (order and repeats kept).
        digest: SHA-256 of the content (collections, stems and indices, as listed).
    """

    source: str
    files: Mapping[Collection, Path]
    lists: Mapping[Collection, Mapping[str, npt.NDArray[np.int64]]]
    digest: str

    @classmethod
    def load(cls, folder: str | os.PathLike[str]) -> EvalIndices:
        """The index files of ``folder`` (:data:`INDEX_FILES`; others there are ignored), or the shipped ones when
        ``folder`` is :data:`OFFICIAL`.

        Raises:
            EvalIndicesError: no such folder, none of the four files in it, or a file that is not JSON of the
                expected form (an object of graph name -> list of at least two distinct non-negative integers).
        """
        if os.fspath(folder) == OFFICIAL:
            return cls.official()
        return _load(Path(folder), os.fspath(folder))

    @classmethod
    def official(cls) -> EvalIndices:
        """The official evaluation's index lists, shipped with fastslow (:data:`OFFICIAL_DIR`)."""
        return _official()

    @property
    def is_official(self) -> bool:
        """Whether these are the official evaluation's lists (by content)."""
        return self.digest == _official().digest

    @property
    def name(self) -> str:
        """``official``, or ``indices-`` and 12 hex digits of :attr:`digest`: what the protocol's tag says."""
        return OFFICIAL if self.is_official else f"indices-{self.digest[:12]}"

    def listed(self, collection: Collection, stem: str) -> npt.NDArray[np.int64] | None:
        """The indices listed for one graph, as listed; ``None`` when it is not listed."""
        return self.lists.get(Collection(collection), {}).get(stem)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, EvalIndices) and other.digest == self.digest

    def __hash__(self) -> int:
        return hash(self.digest)

    def __repr__(self) -> str:
        graphs = sum(len(v) for v in self.lists.values())
        return f"EvalIndices({self.source!r}, {graphs} graphs, {self.digest[:12]})"


_HASH_CHUNK = 65536


def _load(folder: Path, source: str) -> EvalIndices:
    if not folder.is_dir():
        raise EvalIndicesError(f"--valid-indices {source}: expected a folder of index files ({', '.join(INDEX_FILES.values())}) "
                               f"or {OFFICIAL!r}; found {'no such folder' if not folder.exists() else 'not a folder'}")
    files = {c: folder / name for c, name in INDEX_FILES.items() if os.path.lexists(folder / name)}
    if not files:
        raise EvalIndicesError(f"--valid-indices {source}: expected at least one of {', '.join(INDEX_FILES.values())} "
                               "in the folder; found none")
    lists = {c: _read_index_file(p) for c, p in files.items()}
    h = hashlib.sha256()
    for c, graphs in lists.items():
        h.update(f"{c.value}\n".encode())
        for stem in sorted(graphs):
            h.update(f"{stem}:".encode())
            arr = graphs[stem]
            for k in range(0, arr.size, _HASH_CHUNK):  # the text of every index, a chunk at a time
                h.update(("," if k else "").encode() + ",".join(map(str, arr[k:k + _HASH_CHUNK].tolist())).encode())
            h.update(b"\n")
    return EvalIndices(source, files, lists, h.hexdigest())


@cache
def _official() -> EvalIndices:
    return _load(OFFICIAL_DIR, OFFICIAL)


_noted: set[str] = set()
"""Index sets whose fallback note was given in this process: one note each."""


@dataclass(frozen=True)
class ValidProtocol:
    """Which configs of each valid layout graph are predicted and scored.

    Args:
        max_configs: at most this many configs per valid layout graph; ``None`` for every config.
        seed: seeds the subsets (together with each graph's collection and stem).
        indices: fixed config indices per graph (:class:`EvalIndices`): a graph they list is scored on those, as
            the official evaluation does; the others by ``max_configs`` and ``seed``. ``None``: no graph is listed.
        unmatched_ok: take index files that list none of the data's valid graphs of their collection
            (:meth:`check_listed`); by default they are refused (``--force`` takes them). Not part of the protocol:
            it scores the same either way.
    """

    max_configs: int | None = DEFAULT_VALID_CONFIGS
    seed: int = 0
    indices: EvalIndices | None = None
    unmatched_ok: bool = field(default=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.max_configs is not None and self.max_configs < 2:
            raise ValueError(f"valid configs per graph must be at least 2 (or {ALL!r}); got {self.max_configs}")

    @classmethod
    def parse(cls, text: str | int | None, seed: int = 0, indices: EvalIndices | None = None) -> ValidProtocol:
        """From a CLI value: ``all`` or a positive count (``None`` gives the default)."""
        if text is None:
            return cls(seed=seed, indices=indices)
        if isinstance(text, str) and text.strip().lower() == ALL:
            return cls(None, seed, indices)
        try:
            n = int(text)
        except ValueError:
            raise ValueError(f"valid configs: expected {ALL!r} or a count of at least 2; found {text!r}") from None
        return cls(n, seed, indices)

    @property
    def is_all(self) -> bool:
        return self.max_configs is None

    @property
    def seeded(self) -> ValidProtocol:
        """This protocol without its index lists: how the graphs they do not list are scored."""
        return ValidProtocol(self.max_configs, self.seed)

    def listed(self, collection: Collection, stem: str, num_configs: int,
               split: Split = Split.VALID) -> npt.NDArray[np.int64] | None:
        """The indices :attr:`indices` list for one graph, as listed (order and repeats kept); ``None`` for a graph
        they do not list (then the seeded protocol scores it, with a note the first time), a tile graph, or
        another split.

        Raises:
            EvalIndicesError: an index out of range for the graph's ``num_configs`` configs, naming the file, the
                graph and the index.
        """
        collection = Collection(collection)
        if self.indices is None or Split(split) != Split.VALID or collection.is_tile:
            return None
        arr = self.indices.listed(collection, stem)
        if arr is None:
            if self.indices.digest not in _noted:
                _noted.add(self.indices.digest)
                log.warning("valid protocol: %s:%s is not listed in %s; it and every other valid layout graph not "
                            "listed there are scored on %s", collection.value, stem, self._source_text(),
                            self.seeded.describe())
            return None
        if arr.max() >= num_configs:
            pos = int(np.argmax(arr >= num_configs))
            raise EvalIndicesError(
                f"{self.indices.files[collection]}: graph {stem!r} lists config index {int(arr[pos])} (position "
                f"{pos}), out of range for the {num_configs:,} configs of {collection.value}:{stem}; these index "
                "files do not belong to this data: pass other --valid-indices, or leave the option out")
        return arr

    def unmatched(self, collection: Collection, stems: Sequence[str]) -> str | None:
        """Why :attr:`indices` do not belong to data whose valid graphs of ``collection`` are ``stems``: their file
        of the collection lists graphs, none of them among ``stems``; ``None`` when one is, or when there is
        nothing to match (no index file of the collection, no valid graph of it, a tile collection)."""
        collection = Collection(collection)
        if self.indices is None or collection.is_tile or not stems:
            return None
        lists = self.indices.lists.get(collection)
        if not lists or any(stem in lists for stem in stems):
            return None
        first = shown(repr(next(iter(lists))))
        return (f"{printable(self.indices.files[collection])}: lists {len(lists):,} graph(s) of {collection.value}, "
                f"none of them among the data's {len(stems):,} valid graph(s) of it (it lists {first}"
                f"{', ...' if len(lists) > 1 else ''}); these index files do not belong to this data: pass other "
                "--valid-indices, leave the option out, or add --force to score every graph they do not list on "
                "--valid-configs")

    def check_listed(self, collection: Collection, stems: Sequence[str]) -> None:
        """Refuse :attr:`indices` that list none of ``stems``, the data's valid graphs of ``collection``
        (:meth:`unmatched`), unless :attr:`unmatched_ok`: every graph would be scored on the seeded protocol, under
        the index files' name, with nothing but a note to say so.

        Raises:
            EvalIndicesError: naming the index file, the collection, and what to do.
        """
        problem = self.unmatched(collection, stems)
        if problem is not None and not self.unmatched_ok:
            raise EvalIndicesError(problem)

    def check_root(self, root: DataRoot, collections: Sequence[Collection] | None = None) -> None:
        """:meth:`check_listed` for each of ``collections`` (default: every one :attr:`indices` has a file of)
        against the valid graphs of the data root ``root``.

        Raises:
            EvalIndicesError: as :meth:`check_listed`.
            OSError: a valid folder exists but cannot be listed.
        """
        from competition.dataroot import list_graphs

        if self.indices is None:
            return
        for c in (self.indices.lists if collections is None else collections):
            if Collection(c) in self.indices.lists:
                self.check_listed(c, [p.stem for p in list_graphs(root, Collection(c), Split.VALID)])

    def configs(self, collection: Collection, stem: str, num_configs: int,
                split: Split = Split.VALID) -> npt.NDArray[np.int64] | None:
        """The configs scored of one graph: ascending int64 indices, or ``None`` for every config.

        A graph :attr:`indices` list gets its distinct listed indices. Otherwise only valid layout graphs with more
        than ``max_configs`` configs are subset; the same graph (collection, stem, config count) always gets the
        same subset for the same seed.
        """
        collection = Collection(collection)
        listed = self.listed(collection, stem, num_configs, split)
        if listed is not None:
            return np.unique(listed)
        if (self.max_configs is None or Split(split) != Split.VALID or collection.is_tile
                or num_configs <= self.max_configs):
            return None
        key = f"{self.seed}/{collection.value}/{stem}/{num_configs}".encode()
        words = np.frombuffer(hashlib.sha256(key).digest()[:16], dtype=np.uint32).tolist()
        rng = np.random.default_rng(np.random.SeedSequence(words))
        return np.sort(rng.choice(num_configs, self.max_configs, replace=False)).astype(np.int64)

    def picks(self, collection: Collection, stem: str, num_configs: int,
              split: Split = Split.VALID) -> npt.NDArray[np.int64] | None:
        """How the official evaluation counts the scored configs of one graph: positions into :meth:`configs`, one
        per listed index, repeats included (the metric is taken over ``values[picks]``); ``None`` when each scored
        config counts once (no index repeated, or a graph not listed)."""
        listed = self.listed(collection, stem, num_configs, split)
        if listed is None:
            return None
        distinct = np.unique(listed)
        return None if distinct.size == listed.size else np.searchsorted(distinct, listed).astype(np.int64)

    def select(self, graph: GraphT, collection: Collection, split: Split = Split.VALID) -> GraphT:
        """``graph`` restricted to the configs this protocol scores (itself when that is every config)."""
        return graph.select_configs(self.configs(collection, graph.stem, graph.num_configs, split))

    def _source_text(self) -> str:
        assert self.indices is not None
        return ("the official evaluation's index files (eval_indices)" if self.indices.is_official
                else f"the index files of {self.indices.source}")

    def describe(self) -> str:
        """One line naming the protocol, printed above every valid table and stored in the leaderboard."""
        if self.max_configs is None:
            seeded = "every config of every valid graph"
        else:
            seeded = f"at most {self.max_configs:,} fixed configs per valid layout graph (seed {self.seed})"
        if self.indices is None:
            return seeded
        return (f"the config indices in {self._source_text()} for the valid layout graphs listed there, counted as "
                f"the official evaluation counts them (repeats included); other graphs: {seeded}")

    @property
    def tag(self) -> str:
        """Short form for tables, the leaderboard, caches and runs: ``all`` or ``1000@0``; with index lists
        ``official`` (or ``indices-<12 hex digits>`` of their content), followed by ``+`` and the seeded part
        when that is not the default ``1000@0``."""
        seeded = ALL if self.max_configs is None else f"{self.max_configs}@{self.seed}"
        if self.indices is None:
            return seeded
        return self.indices.name + ("" if seeded == DEFAULT_PROTOCOL.tag else f"+{seeded}")


DEFAULT_PROTOCOL = ValidProtocol()


def add_valid_configs_arg(parser: argparse.ArgumentParser) -> None:
    """The ``--valid-configs N|all`` and ``--valid-indices DIR|official`` options, shared by every command that
    predicts or scores the valid split."""
    parser.add_argument(
        "--valid-configs", metavar="N|all", default=str(DEFAULT_VALID_CONFIGS),
        help="valid protocol: score at most N fixed, seeded configs per valid layout graph (as the official "
             "evaluation does), or 'all' for every config; tile graphs are always scored whole. Every model, early "
             "stopping, the ensemble and the leaderboard use the same configs (default: %(default)s)",
    )
    parser.add_argument(
        "--valid-indices", metavar="DIR|official", default=None,
        help="score each valid layout graph listed in the index files of DIR (xla_default.json, xla_random.json, "
             "nlp_default.json, nlp_random.json: graph name -> config indices) on exactly those indices, as the "
             "official evaluation does; 'official' for the official evaluation's files, shipped with fastslow. "
             "Graphs not listed fall back to --valid-configs; a file that lists none of the data's valid graphs "
             "of its collection is refused, unless --force (default: no index files)",
    )
    force = _FORCE_INDICES_HELP
    existing = next((a for a in parser._actions if "--force" in a.option_strings), None)
    if existing is None:
        parser.add_argument("--force", action="store_true", help=force[0].upper() + force[1:])
    else:  # the command's own --force (what it writes) takes the index files too
        existing.help = f"{existing.help}; also: {force}"


_FORCE_INDICES_HELP = ("take --valid-indices files that list none of the data's valid graphs of their collection "
                       "(every graph then falls back to --valid-configs, with a note)")


def protocol_from_args(args: argparse.Namespace) -> ValidProtocol:
    """The protocol chosen by :func:`add_valid_configs_arg`'s options (a bad value is a ``ValueError``)."""
    source = getattr(args, "valid_indices", None)
    protocol = ValidProtocol.parse(args.valid_configs, indices=None if source is None else EvalIndices.load(source))
    return replace(protocol, unmatched_ok=bool(getattr(args, "force", False)))
