"""Write a synthetic TpuGraphs world to disk, in the Kaggle download's exact layout.

``generate_world(out, scale="demo", seed=0)`` writes::

    out/npz_all/npz/tile/xla/{train,valid,test}/*.npz
    out/npz_all/npz/layout/{xla,nlp}/{default,random}/{train,valid,test}/*.npz
    out/sample_submission.csv
    out/secret/<same relative paths>.npz   # hidden test runtimes and every split's noiseless runtimes
    out/world.json                         # what was generated, with which seed; lets a rerun resume

Every graph is seeded from ``(seed, collection source, split, index)`` alone, so the bytes do not depend on the
order or the number of worker processes, and a killed run resumes: every file is written atomically and a
rerun with the same settings skips the files that are complete and removes the temporary files the killed run
left. Worker processes end with the process that started them, even when it is killed.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt
from tqdm.auto import tqdm

from competition.collections import Collection, Split
from competition.hlo.features import featurize, layout_arrays, tile_arrays
from competition.hlo.ir import Module
from competition.nesting import json_loads
from competition.npzio import StreamedArray, atomic_write_text, remove_stale_temps, write_npz
from competition.synthetic.layout_physics import OUTPUT_FLIP, LayoutProblem
from competition.synthetic.physics import TILE_BUSY_SHARE, measure, measure_tile
from competition.synthetic.programs import build_program, tile_kernels
from competition.synthetic.tile_physics import TileProblem
from competition.workers import end_with_parent, pool_context

KAGGLE_SUBDIR = Path("npz_all") / "npz"
SECRET_SUBDIR = Path("secret")
MANIFEST = "world.json"
# Configs whose features are computed and written together: bounds the writer's memory to a few blocks.
CONFIG_BLOCK = 512
# Tile kernels written per generated program (tile graphs are cut from programs, several from each), by default.
KERNELS_PER_PROGRAM = 8

# How searches record their measurements, which is where duplicated configs come from (real figures in
# shared/spec/real-sizes.md: most graphs hold one group of about 40 identical configs, under 1% of the rows; a few
# are dominated by duplicates; re-measured tile configs exist).
BASELINE_REPEATS: tuple[int, int] = (20, 60)
"""A layout search measures its baseline, the compiler default, this many times (uniform, both ends included)..."""
BASELINE_MAX_SHARE: float = 0.009
"""...but in at most this share of its rows (none in a graph of under 1/0.009 = 112 configs)."""
STALL_SHARE: float = 0.06
"""Share of train/valid layout searches that stall: after a few distinct configs their proposals land on configs
already measured, which they measure again (tiny graphs of a few dozen configs always have)."""
STALL_DISTINCT: tuple[float, float] = (4e-4, 0.4)
"""A stalled search's distinct configs, as a share of its rows: log-uniform in this range (60-99.96% duplicates)."""
DEFAULT_NARROW_SHARE: float = 0.1
"""Share of ``default`` searches that stay near the default: every step picks a layout that changes at most one of
a node's tensors and no output layout, so their configs differ by near-ties that only noise orders (a real search
spans 1.6%). One graph in ``1 / share`` of each default collection's split, at an offset drawn per world
(:func:`narrow_search`), so that every split of 10 graphs or more holds one..."""
RANDOM_OUTPUT_FLIP: dict[str, float] = {"xla": OUTPUT_FLIP, "nlp": 1 / 5}
"""Per program source, the share of groups whose compiler output layout a ``random`` search leaves. xla's is the
real alexnet graph's (about 1 in 12, so that half of its configs tie within noise); the strongest teams rank the
real nlp:random graphs at a valid tau of 0.96, which leaves no room for such a plateau of near-ties, so the nlp
search leaves output layouts more often (the least share whose oracle reaches 0.96 on the demo world)."""
DEFAULT_EXPLORE: tuple[float, float] = (0.02, 0.2)
"""...the others let a step go anywhere in the node's search space with a probability drawn uniformly from this
range (:meth:`LayoutProblem.sample_configs`, ``explore``)."""
TILE_REMEASURE_SHARE: float = 0.15
"""Share of tile kernels (of 5 configs or more) whose autotuner measured its default config, and sometimes one
other, again: one or two more rows each."""


@dataclass(frozen=True)
class CountDist:
    """A distribution of configs per graph: a quantile curve, plus a small share of tiny graphs.

    A draw is, with probability ``tiny``, a uniform integer in ``tiny_range`` (both ends included); otherwise the
    quantile curve at a uniform ``u``: ``knots`` are ``(quantile, count)`` points from quantile 0 to 1, joined
    log-linearly. Two knots make a log-uniform draw; a steep last segment is a point mass (the real nlp graphs
    whose search stopped at its budget of about 100,000 configs). The draw order does not depend on the graph index,
    so the first graphs of a split are as big as any.

    Attributes:
        knots: ``((0.0, low), ..., (1.0, high))``, quantiles increasing, counts non-decreasing.
        tiny: probability of a tiny graph (0: none, and no random number is spent on it).
        tiny_range: ``(low, high)`` counts of a tiny graph.
    """

    knots: tuple[tuple[float, int], ...]
    tiny: float = 0.0
    tiny_range: tuple[int, int] = (2, 4)

    def __post_init__(self) -> None:
        qs = [q for q, _ in self.knots]
        counts = [c for _, c in self.knots]
        if len(qs) < 2 or qs[0] != 0.0 or qs[-1] != 1.0 or any(b <= a for a, b in zip(qs, qs[1:], strict=False)):
            raise ValueError(f"knots must run from quantile 0 to 1, increasing: {self.knots}")
        if counts[0] < 1 or any(b < a for a, b in zip(counts, counts[1:], strict=False)):
            raise ValueError(f"knot counts must be positive and non-decreasing: {self.knots}")
        if not 0.0 <= self.tiny < 1.0 or not 1 <= self.tiny_range[0] <= self.tiny_range[1]:
            raise ValueError(f"bad tiny share {self.tiny} or range {self.tiny_range}")

    @classmethod
    def loguniform(cls, low: int, high: int) -> CountDist:
        """Log-uniform between ``low`` and ``high``."""
        return cls(((0.0, low), (1.0, high)))

    @property
    def low(self) -> int:
        """The smallest count a draw can give."""
        return min(self.knots[0][1], self.tiny_range[0]) if self.tiny > 0 else self.knots[0][1]

    @property
    def high(self) -> int:
        """The largest count a draw can give."""
        return max(self.knots[-1][1], self.tiny_range[1]) if self.tiny > 0 else self.knots[-1][1]

    def quantile(self, u: float) -> int:
        """The body's count at quantile ``u`` in [0, 1) (the tiny share aside)."""
        j = 0
        while j + 2 < len(self.knots) and u >= self.knots[j + 1][0]:
            j += 1
        (q0, c0), (q1, c1) = self.knots[j], self.knots[j + 1]
        lo = np.log(c0)
        # Written as the historical log-uniform draw (lo + (hi - lo) * u), so two-knot scales keep their bytes.
        return int(round(np.exp(lo + (np.log(c1) - lo) * ((u - q0) / (q1 - q0)))))

    def draw(self, rng: np.random.Generator) -> int:
        """One count."""
        if self.tiny > 0 and rng.random() < self.tiny:
            return int(rng.integers(self.tiny_range[0], self.tiny_range[1] + 1))
        return self.quantile(float(rng.random()))

    def is_tiny(self, count: int) -> bool:
        """Whether ``count`` can only come from the tiny share (below the body's smallest count)."""
        return self.tiny > 0 and count <= self.tiny_range[1] and count < self.knots[0][1]

    def sample(self, rng: np.random.Generator, n: int) -> npt.NDArray[np.int64]:
        """``n`` counts (for inspection and tests)."""
        return np.asarray([self.draw(rng) for _ in range(n)], dtype=np.int64)


LayoutConfigs = dict[tuple[str, str], CountDist]
"""Configs per train/valid layout graph by ``(source, split)``: ``("xla" | "nlp", "train" | "valid")``."""


def _everywhere(dist: CountDist) -> LayoutConfigs:
    return {(src, split.value): dist for src in ("xla", "nlp") for split in (Split.TRAIN, Split.VALID)}


@dataclass(frozen=True)
class Scale:
    """Sizes of one world scale.

    Args:
        name: ``tiny``, ``demo``, ``bench`` or ``full``.
        layout_counts: graphs per split per layout collection ``{collection value: (train, valid, test)}``.
        tile_counts: tile graphs per split ``(train, valid, test)``.
        layout_nodes: ``(low, high)`` target node counts of layout programs, drawn log-uniformly.
        layout_configs: configs per train/valid layout graph by ``(source, split)`` (see :class:`CountDist`).
        layout_test_configs: configs per layout test graph.
        layout_test_extra: probability that a layout test file gets one config more (the real test set has two
            files of 1,001 among 50).
        max_config_cells: cap on configs x configurable nodes of one layout graph (bounds file sizes and time; a
            graph with many configurable nodes gets fewer configs, as in the real data).
        tile_program_nodes: ``(low, high)`` node counts of the programs tile kernels are cut from.
        tile_configs: configs per tile graph (see :class:`CountDist`).
        tile_wide: the wide tile search (``TileProblem.sample_configs(wide=True)``: eight tile sizes per octave
            instead of one, so kernels hold thousands of configs), and each file takes a kernel of its program
            whose config space holds the drawn count; without it kernels are taken in turn and give at most their
            narrow space (a few hundred configs).
        tile_kernels_per_program: tile files cut from one generated program (fewer: fewer files share a kernel).
    """

    name: str
    layout_counts: dict[str, tuple[int, int, int]]
    tile_counts: tuple[int, int, int]
    layout_nodes: tuple[int, int]
    layout_configs: LayoutConfigs
    layout_test_configs: int
    max_config_cells: int
    tile_program_nodes: tuple[int, int]
    tile_configs: CountDist
    layout_test_extra: float = 0.1
    tile_wide: bool = False
    tile_kernels_per_program: int = KERNELS_PER_PROGRAM


def _layout_counts(xd: Sequence[int], xr: Sequence[int], nd: Sequence[int], nr: Sequence[int]) -> dict:
    return {
        Collection.LAYOUT_XLA_DEFAULT.value: tuple(xd),
        Collection.LAYOUT_XLA_RANDOM.value: tuple(xr),
        Collection.LAYOUT_NLP_DEFAULT.value: tuple(nd),
        Collection.LAYOUT_NLP_RANDOM.value: tuple(nr),
    }


# Full scale, calibrated on the real figures (shared/spec/real-sizes.md; docs/synthetic.md has the table).
# xla valid, real (random search): 481, 4,688, 5,288, 5,704, 7,248, 17,360, 19,040.
FULL_XLA_CONFIGS = ((0.0, 450), (0.15, 4_000), (0.65, 8_000), (0.75, 16_000), (1.0, 20_000))
# nlp valid, real (default search): 11,163 and then 25,937 to 94,599 (11 graphs), then eight at 99,840-100,032.
FULL_NLP_CONFIGS = ((0.0, 10_500), (0.05, 24_000), (0.6, 99_800), (1.0, 100_040))
# A few real train graphs have only about 20 configs.
FULL_TINY_LAYOUT = (16, 24)
# Tile kernels, real test split: 2 to about 9,900 configs; 55 of 844 above 7,000, 16 with only 2-4.
FULL_TILE_CONFIGS = CountDist(((0.0, 10), (0.935, 7_000), (1.0, 9_900)), tiny=0.02, tiny_range=(2, 4))

SCALES: dict[str, Scale] = {
    "tiny": Scale(
        "tiny",
        _layout_counts((3, 2, 2), (3, 2, 2), (3, 2, 2), (3, 2, 2)),
        tile_counts=(16, 8, 8),
        layout_nodes=(120, 400),
        layout_configs=_everywhere(CountDist.loguniform(40, 120)),
        layout_test_configs=60,
        max_config_cells=200_000,
        tile_program_nodes=(150, 400),
        tile_configs=CountDist.loguniform(6, 60),
    ),
    "demo": Scale(
        "demo",
        _layout_counts((10, 4, 4), (10, 4, 4), (12, 4, 4), (12, 4, 4)),
        tile_counts=(320, 64, 64),
        layout_nodes=(400, 4000),
        layout_configs=_everywhere(CountDist.loguniform(300, 2000)),
        layout_test_configs=1000,
        max_config_cells=2_000_000,
        tile_program_nodes=(300, 1500),
        tile_configs=CountDist.loguniform(8, 400),
    ),
    # Between demo and full: the world the GNN quality table is measured on (more and larger graphs than demo,
    # still trainable on a 2-core CPU). The xla collections hold the real data's train counts (61, 69): with fewer,
    # the default scored clearly lower on the same test graphs (lab/journal.md, "Bench xla: as many train graphs as
    # the real data"); the nlp ones hold 28 of the real 198-207 (nlp graphs vary one family, and at real counts
    # their fits would take several times as long).
    "bench": Scale(
        "bench",
        _layout_counts((61, 6, 6), (69, 6, 6), (28, 6, 6), (28, 6, 6)),
        tile_counts=(960, 128, 128),
        layout_nodes=(400, 8000),
        layout_configs=_everywhere(CountDist.loguniform(500, 3000)),
        layout_test_configs=1000,
        max_config_cells=6_000_000,
        tile_program_nodes=(300, 2000),
        tile_configs=CountDist.loguniform(8, 1000),
    ),
    "full": Scale(
        "full",
        _layout_counts((61, 7, 8), (69, 7, 8), (198, 20, 17), (207, 20, 17)),
        tile_counts=(5709, 676, 844),
        layout_nodes=(400, 44_000),
        layout_configs={
            ("xla", Split.TRAIN.value): CountDist(FULL_XLA_CONFIGS, tiny=0.03, tiny_range=FULL_TINY_LAYOUT),
            ("xla", Split.VALID.value): CountDist(FULL_XLA_CONFIGS),
            ("nlp", Split.TRAIN.value): CountDist(FULL_NLP_CONFIGS, tiny=0.02, tiny_range=FULL_TINY_LAYOUT),
            ("nlp", Split.VALID.value): CountDist(FULL_NLP_CONFIGS),
        },
        layout_test_configs=1000,
        layout_test_extra=0.04,
        max_config_cells=60_000_000,
        tile_program_nodes=(300, 3000),
        tile_configs=FULL_TILE_CONFIGS,
        tile_wide=True,
        tile_kernels_per_program=4,
    ),
}

_SPLITS = (Split.TRAIN, Split.VALID, Split.TEST)


def _rng(seed: int, *key: str | int) -> np.random.Generator:
    """A generator seeded by ``seed`` and a textual key, independent of generation order."""
    digest = hashlib.sha256("/".join(str(k) for k in key).encode()).digest()
    words = np.frombuffer(digest[:16], dtype=np.uint32).tolist()
    return np.random.default_rng(np.random.SeedSequence([seed, *words]))


def _loguniform(rng: np.random.Generator, lo: int, hi: int) -> int:
    return int(round(np.exp(rng.uniform(np.log(lo), np.log(hi)))))


def _hex_stem(seed: int, *key: str | int) -> str:
    return hashlib.md5(("/".join(str(k) for k in (seed, *key))).encode()).hexdigest()


@dataclass(frozen=True)
class GraphJob:
    """One file to write (or, for tile, one program whose kernels become several files)."""

    collection: str
    split: str
    index: int
    count: int = 1  # tile: kernels taken from this program


GENERATOR_VERSION: int = 7
"""The version of the world's generator, stored in ``world.json``: raised whenever the same settings give other
bytes (2: tile bounds in hardware tiles and the tile physics calibrated to real records; 3: layout search spaces,
default heuristic and searches calibrated to real records; 4: a tile kernel in one chunk stays on chip; 5: a tile
kernel's last, partial chunk is computed whole; 6: layout physics and searches calibrated to a real layout
graph: only a convolution's or dot's output layout costs, searches tie nodes and rarely leave the compiler's output
layouts; 7: one default search in ten stays narrow, every split holding its share, instead of three in ten
drawn at random, a wandering one changes an output layout in a sixth of its steps, and nlp random searches leave
an output layout one time in 5), so that a world made by an older generator is never taken for a
current one. A manifest without it was made by version 1."""


@dataclass(frozen=True)
class WorldConfig:
    """What a world is made of; stored in ``world.json`` so that a rerun can tell whether it may resume."""

    scale: str
    seed: int
    collections: tuple[str, ...]
    limit: int | None
    tile_limit: int | None = None  # overrides ``limit`` for tile:xla
    programs: str = "generator"  # where programs come from: see PROGRAM_SOURCES
    generator: int = GENERATOR_VERSION

    def as_dict(self) -> dict:
        """The settings as ``world.json`` stores them; ``programs`` only when it is not the generator, so a
        generator world's manifest keeps its bytes."""
        d = asdict(self)
        if d["programs"] == "generator":
            del d["programs"]
        return d

    def cap(self, collection: str) -> int | None:
        """The most graphs per split of one collection (``None``: the scale's count)."""
        if collection == Collection.TILE_XLA.value and self.tile_limit is not None:
            return self.tile_limit
        return self.limit


PROGRAM_SOURCES: tuple[str, ...] = ("generator", "jax")
"""Where a world's programs come from: the generator's own (:mod:`competition.synthetic.programs`), or a zoo of
real JAX models lowered to HLO (:mod:`competition.synthetic.jax_programs`; needs jax)."""


def build_world_program(programs: str, source: str, rng: np.random.Generator, target: int) -> Module:
    """One program of ``source`` (``xla`` or ``nlp``) with about ``target`` nodes, from ``programs``."""
    if programs == "generator":
        return build_program(source, rng, target)
    if programs == "jax":
        from competition.synthetic.jax_programs import build_jax_program

        return build_jax_program(source, rng, target)
    raise ValueError(f"unknown program source {programs!r}; expected one of {', '.join(PROGRAM_SOURCES)}")


def _program_name(source: str, split: str, index: int, module_name: str) -> str:
    # Several programs can draw the same model name; the index keeps stems unique within a split.
    return f"{module_name}_{index}" if split != Split.TEST else module_name


def _layout_program(cfg: WorldConfig, sc: Scale, source: str, split: str, index: int):
    """The program behind layout graph ``index`` of ``source``/``split``: shared by default and random."""
    rng = _rng(cfg.seed, "layout-program", source, split, index)
    target = _loguniform(rng, *sc.layout_nodes)
    module = build_world_program(cfg.programs, source, rng, target)
    if split == Split.TEST:
        stem = _hex_stem(cfg.seed, "layout", source, index)
    else:
        stem = _program_name(source, split, index, module.name)
    return module, stem


def layout_module(scale: str, seed: int, source: str, split: str, index: int, programs: str = "generator"
                  ) -> tuple[Module, str]:
    """The program behind layout graph ``index`` of a world's ``source`` (``xla`` or ``nlp``) and split, and the
    stem of its files (both searches share it): what :func:`generate_world` built it from, for analyses of the
    world (``LayoutProblem.from_module(module)`` gives its cost tables)."""
    cfg = WorldConfig(scale=scale, seed=seed, collections=(), limit=None, programs=programs)
    return _layout_program(cfg, SCALES[scale], source, split, index)


def _paths(out: Path, collection: Collection, split: str, stem: str) -> tuple[Path, Path]:
    rel = Path(collection.relpath) / split / f"{stem}.npz"
    return out / KAGGLE_SUBDIR / rel, out / SECRET_SUBDIR / rel


def narrow_search(seed: int, collection: str, split: str, index: int) -> bool:
    """Whether layout graph ``index`` of a world's ``default`` collection and split stays near the default
    (:data:`DEFAULT_NARROW_SHARE`): every ``1 / share``-th graph of the split, from an offset drawn per world."""
    period = max(1, round(1 / DEFAULT_NARROW_SHARE))
    offset = int(_rng(seed, "narrow-search", collection, split).integers(period))
    return (index - offset) % period == 0


def search_rows(problem: LayoutProblem, search: str, n: int, rng: np.random.Generator, *,
                stalled: bool = False, baseline: bool = True, narrow: bool | None = None,
                flip: float = OUTPUT_FLIP) -> npt.NDArray[np.int32]:
    """The ``n`` config rows a layout search records, duplicates included, in random order.

    Distinct configs as the search draws them (:meth:`LayoutProblem.sample_distinct`; a ``default`` search stays
    near the default when ``narrow``, drawn with probability :data:`DEFAULT_NARROW_SHARE` when ``None``, else
    explores with a probability drawn from :data:`DEFAULT_EXPLORE`; a ``random`` search leaves a group's output
    layout with probability ``flip``), plus what it measures more than once: with ``baseline``, a group of
    :data:`BASELINE_REPEATS` rows of the compiler default (all choices 0) in at most :data:`BASELINE_MAX_SHARE` of
    the rows; when ``stalled``, only a :data:`STALL_DISTINCT` share (at
    least 2) of distinct configs. Rows beyond the distinct ones (a stalled search, or one whose reachable configs
    are fewer than ``n``) re-measure distinct configs, the faster ones more often (weight 1 / rank of the noiseless
    runtime: a tuner re-evaluates its best candidates).
    """
    group = 0
    if baseline:
        group = min(int(rng.integers(BASELINE_REPEATS[0], BASELINE_REPEATS[1] + 1)), int(n * BASELINE_MAX_SHARE))
    want = n - group
    if stalled:
        lo, hi = STALL_DISTINCT
        want = min(want, max(2, int(round(n * float(np.exp(rng.uniform(np.log(lo), np.log(hi))))))))
    if narrow is None:
        narrow = search == "default" and bool(rng.random() < DEFAULT_NARROW_SHARE)
    explore = 0.0
    if search == "default" and not narrow:
        explore = float(rng.uniform(*DEFAULT_EXPLORE))
    rows = problem.sample_distinct(search, want, rng, explore=explore, flip=flip)
    if rows.shape[0] == n:
        return rows  # in the search's own (random) order
    if rows.shape[0] + group < n and rows.shape[0]:
        rank = np.argsort(np.argsort(problem.runtime_ns(rows), kind="stable"), kind="stable")
        weight = 1.0 / (1.0 + rank)
        again = rng.choice(rows.shape[0], size=n - group - rows.shape[0], p=weight / weight.sum())
        rows = np.concatenate([rows, rows[again]])
    rows = np.concatenate([rows, np.zeros((n - rows.shape[0], rows.shape[1]), dtype=rows.dtype)])
    return rows[rng.permutation(n)]


def write_layout_graph(
    path: Path,
    secret: Path,
    module,
    search: str,
    n_configs: int,
    rng: np.random.Generator,
    *,
    hidden: bool = False,
    duplicates: bool = True,
    stalled: bool = False,
    narrow: bool | None = None,
    flip: float = OUTPUT_FLIP,
    max_config_cells: int | None = None,
) -> None:
    """Write one layout graph of ``module`` with ``n_configs`` configs drawn by ``search``, and its secret file.

    The rows come from :func:`search_rows`: with ``duplicates`` (and not ``hidden``) they include the baseline's
    repeated measurements and, when ``stalled``, the re-measurements of a stalled search; otherwise they are all
    distinct; ``narrow`` is :func:`search_rows`'s. ``node_config_feat`` is computed and compressed block by block, so memory stays at a few blocks
    however many configs there are. ``max_config_cells`` caps configs x configurable nodes (at least 2 configs are
    kept). With ``hidden`` (test files) the visible runtimes are zeros and the measured ones go to ``secret``; the
    secret file always holds the noiseless runtimes (for the oracle score).
    """
    graph = featurize(module)
    problem = LayoutProblem.from_module(module)
    nc = int(problem.node_config_ids.size)
    if max_config_cells is not None:
        n_configs = max(2, min(n_configs, max_config_cells // max(nc, 1)))
    records = duplicates and not hidden
    choices = search_rows(problem, search, n_configs, rng, stalled=stalled and records, baseline=records,
                          narrow=narrow, flip=flip)
    true_ns = np.concatenate(
        [problem.runtime_ns(choices[i : i + CONFIG_BLOCK]) for i in range(0, n_configs, CONFIG_BLOCK)]
    )
    observed = measure(true_ns, rng)
    feats = StreamedArray(
        (n_configs, nc, 18),
        np.dtype(np.float32),
        (problem.config_features(choices[i : i + CONFIG_BLOCK]) for i in range(0, n_configs, CONFIG_BLOCK)),
    )
    arrays = layout_arrays(graph, feats, problem.node_config_ids.astype(np.int64),
                           np.zeros_like(observed) if hidden else observed)
    # The secret file first: a visible file is only ever complete together with its secret.
    write_npz(secret, _secret_arrays(module.name, true_ns, observed if hidden else None))
    write_npz(path, arrays)


def _write_layout(out: Path, cfg: WorldConfig, sc: Scale, job: GraphJob) -> list[Path]:
    collection = Collection(job.collection)
    module, stem = _layout_program(cfg, sc, collection.source, job.split, job.index)
    path, secret = _paths(out, collection, job.split, stem)
    if path.exists() and secret.exists():
        return []
    rng = _rng(cfg.seed, "layout-configs", job.collection, job.split, job.index)
    stalled = False
    if job.split == Split.TEST:
        n_configs = sc.layout_test_configs + int(rng.random() < sc.layout_test_extra)
    else:
        dist = sc.layout_configs[(collection.source, job.split)]
        n_configs = dist.draw(rng)
        stalled = dist.is_tiny(n_configs) or rng.random() < STALL_SHARE
    search = collection.search or "random"
    write_layout_graph(path, secret, module, search, n_configs, rng,
                       max_config_cells=sc.max_config_cells, stalled=stalled, hidden=job.split == Split.TEST,
                       narrow=search == "default" and narrow_search(cfg.seed, job.collection, job.split, job.index),
                       flip=RANDOM_OUTPUT_FLIP[collection.source])
    return [path]


def _secret_arrays(input_name: str, true_ns: np.ndarray, observed: np.ndarray | None,
                   normalizers: np.ndarray | None = None, true_default_ns: float | None = None) -> dict:
    arrays: dict[str, np.ndarray] = {"input_file": np.asarray(input_name)}
    if observed is not None:
        arrays["config_runtime"] = observed
    if normalizers is not None:
        arrays["config_runtime_normalizers"] = normalizers
    arrays["config_runtime_noiseless"] = true_ns.astype(np.float64)
    if true_default_ns is not None:
        arrays["default_runtime_noiseless"] = np.asarray(true_default_ns, dtype=np.float64)
    return arrays


def write_tile_graph(
    path: Path,
    secret: Path,
    kernel,
    problem: TileProblem,
    n_configs: int,
    rng: np.random.Generator,
    *,
    hidden: bool = False,
    wide: bool = False,
) -> int:
    """Write one tile graph of ``kernel`` with up to ``n_configs`` configs, and its secret file.

    The configs come from ``problem.sample_configs`` (``wide``: the wide search), so a kernel with a small config
    space gives fewer (at least 2 when its space holds 2). With :data:`TILE_REMEASURE_SHARE` (5 configs or more)
    one or two of the rows re-measure the default config (and another config). Runtimes and normalizers (the
    default re-measured beside every row) are measured by :func:`~competition.synthetic.physics.measure_tile`,
    on a busy host for :data:`~competition.synthetic.physics.TILE_BUSY_SHARE` of the kernels. With ``hidden``
    (test files) the visible runtimes are zeros and the normalizers ones; the measured ones go to ``secret``.

    Returns:
        The number of configs written.
    """
    graph = featurize(kernel)
    again = int(rng.integers(1, 3)) if n_configs >= 5 and rng.random() < TILE_REMEASURE_SHARE else 0
    config_feat = problem.sample_configs(n_configs - again, rng, wide=wide).astype(np.float32)
    if again and config_feat.shape[0] >= 5:  # (a kernel with room for fewer configs re-measures none)
        dflt = int(np.nonzero(np.all(config_feat == problem.default_config(), axis=1))[0][0])
        repeat = [dflt, int(rng.integers(config_feat.shape[0]))][:again]
        config_feat = np.concatenate([config_feat, config_feat[repeat]])
        config_feat = config_feat[rng.permutation(config_feat.shape[0])]
    true_ns = problem.runtime_ns(config_feat)
    true_default = float(problem.runtime_ns(problem.default_config()[None, :])[0])
    busy = bool(rng.random() < TILE_BUSY_SHARE)
    observed = measure_tile(true_ns, rng, busy)
    normalizers = measure_tile(np.full(true_ns.shape, true_default), rng, busy)
    arrays = tile_arrays(graph, config_feat, np.zeros_like(observed) if hidden else observed,
                         np.ones_like(normalizers) if hidden else normalizers)
    write_npz(secret, _secret_arrays(
        kernel.name, true_ns, observed if hidden else None, normalizers if hidden else None, true_default))
    write_npz(path, arrays)
    return int(config_feat.shape[0])


def _fit_kernel(order: Sequence[int], k: int, spaces: Sequence[int], n: int, used: set[int]) -> int:
    """The kernel for file ``k`` wanting ``n`` configs: the first in ``order`` from position ``k`` on (cyclically)
    whose config space holds ``n``, one not ``used`` yet by preference; else the one with the largest space."""
    turn = [int(order[(k + j) % len(order)]) for j in range(len(order))]
    fits = [i for i in turn if spaces[i] >= n]
    return next((i for i in fits if i not in used), fits[0] if fits else max(turn, key=lambda i: spaces[i]))


def _write_tile_program(out: Path, cfg: WorldConfig, sc: Scale, job: GraphJob) -> list[Path]:
    collection = Collection.TILE_XLA
    rng = _rng(cfg.seed, "tile-program", job.split, job.index)
    module = build_world_program(cfg.programs, "xla", rng, _loguniform(rng, *sc.tile_program_nodes))
    # A kernel with a single possible tile config (a scalar output) has nothing to rank: real files have >= 2.
    kernels = [(k, TileProblem.from_kernel(k)) for k in tile_kernels(module, rng)]
    kernels = [(k, p) for k, p in kernels if p.config_space() >= 2]
    if not kernels:
        raise RuntimeError(f"program {module.name} gave no tile kernel with two or more configs")
    # The wide search assigns kernels to all the program's files at once, also when --limit writes only some of
    # them, so that a file does not depend on the limit.
    per = sc.tile_kernels_per_program if sc.tile_wide else job.count
    picks = rng.permutation(len(kernels)) if len(kernels) >= per else rng.integers(0, len(kernels), per)
    krngs = [_rng(cfg.seed, "tile-configs", job.split, job.index, k) for k in range(per)]
    signs = [int.from_bytes(krng.bytes(8), "little", signed=True) for krng in krngs]
    wants = [sc.tile_configs.draw(krng) for krng in krngs]
    if sc.tile_wide:
        # The biggest wants choose first, so that they do not all land on the one kernel with room for them.
        spaces = [p.config_space(wide=True) for _, p in kernels]
        chosen: dict[int, int] = {}
        for k in sorted(range(per), key=lambda k: (-wants[k], k)):
            chosen[k] = _fit_kernel(picks, k, spaces, wants[k], set(chosen.values()))
    else:
        chosen = {k: int(picks[k]) for k in range(per)}
    written = []
    for k in range(job.count):
        kernel, problem = kernels[chosen[k]]
        if job.split == Split.TEST:
            stem = _hex_stem(cfg.seed, "tile", job.split, job.index, k)
        else:
            stem = f"{module.name}_{'-' if signs[k] < 0 else ''}{abs(signs[k]):x}"
        path, secret = _paths(out, collection, job.split, stem)
        if path.exists() and secret.exists():
            continue
        write_tile_graph(path, secret, kernel, problem, wants[k], krngs[k], hidden=job.split == Split.TEST,
                         wide=sc.tile_wide)
        written.append(path)
    return written


def _remove_stale_temps(out: Path) -> None:
    """Remove the temporary files (``.<name>.<random>.part``) that killed runs left in the world's own folders (the
    graphs', the secret runtimes', and those of ``sample_submission.csv`` and ``world.json``); those of a concurrent
    run, still being written, are kept (see :func:`competition.npzio.remove_stale_temps`). Other folders of the data
    root are not looked into."""
    for name in ("sample_submission.csv", MANIFEST):
        remove_stale_temps(out, name)
    for sub in (KAGGLE_SUBDIR, SECRET_SUBDIR):
        for folder, _, _ in os.walk(out / sub):
            remove_stale_temps(folder)


def _run_job(args: tuple[Path, WorldConfig, GraphJob]) -> list[Path]:
    out, cfg, job = args
    sc = SCALES[cfg.scale]
    if job.collection == Collection.TILE_XLA.value:
        return _write_tile_program(out, cfg, sc, job)
    return _write_layout(out, cfg, sc, job)


def read_world_config(out: str | os.PathLike[str]) -> WorldConfig:
    """The settings a generated world (or part of one) was made with, from its ``world.json``.

    Raises:
        ValueError: ``out`` holds no readable ``world.json`` (not a generated world), naming the file.
    """
    manifest = Path(out) / MANIFEST
    try:
        config = json_loads(manifest.read_text())["config"]
        config["collections"] = tuple(config["collections"])
        return WorldConfig(**{"tile_limit": None, "generator": 1, **config})
    except FileNotFoundError:
        raise ValueError(f"{manifest}: no such file; {out} is not a generated synthetic world") from None
    except (json.JSONDecodeError, KeyError, TypeError) as e:
        raise ValueError(f"{manifest}: not a world manifest ({type(e).__name__}: {e})") from None


def plan_jobs(cfg: WorldConfig) -> list[GraphJob]:
    """The files of a world, as jobs; ``limit`` (``tile_limit`` for tile) caps graphs per collection and split."""
    sc = SCALES[cfg.scale]
    jobs: list[GraphJob] = []
    for value in cfg.collections:
        counts = sc.tile_counts if value == Collection.TILE_XLA.value else sc.layout_counts[value]
        for split, n in zip(_SPLITS, counts, strict=True):
            cap = cfg.cap(value)
            n = n if cap is None else min(n, cap)
            if value == Collection.TILE_XLA.value:
                per = sc.tile_kernels_per_program
                for j, start in enumerate(range(0, n, per)):
                    jobs.append(GraphJob(value, split.value, j, min(per, n - start)))
            else:
                jobs.extend(GraphJob(value, split.value, i) for i in range(n))
    # Big layout graphs first, so that the pool does not end on one long straggler.
    return sorted(jobs, key=lambda j: j.collection == Collection.TILE_XLA.value)


def _sample_submission(out: Path, cfg: WorldConfig) -> Path:
    """``ID,TopConfigs`` for every test graph: the identity order (tile: the first five)."""
    from competition.npzio import NpzReader

    rows = ["ID,TopConfigs"]
    for value in cfg.collections:
        collection = Collection(value)
        folder = out / KAGGLE_SUBDIR / collection.relpath / Split.TEST.value
        for path in sorted(folder.glob("*.npz")):
            with NpzReader(path) as r:
                n = r.info("config_runtime").shape[0]
            k = min(5, n) if collection.is_tile else n
            rows.append(f"{value}:{path.stem}," + ";".join(map(str, range(k))))
    return atomic_write_text(out / "sample_submission.csv", "\n".join(rows) + "\n")


class WorldMismatch(RuntimeError):
    """The output folder holds a world made with other settings, or data that is not a generated world."""


def _world_paths(out: Path) -> list[Path]:
    """What a world writes at the top of its data root: the folders of every collection's graphs and secret
    runtimes, and the sample submission."""
    return [out / "sample_submission.csv",
            *(out / sub / c.relpath for sub in (KAGGLE_SUBDIR, SECRET_SUBDIR) for c in Collection)]


def _check_foreign(out: Path, force: bool) -> None:
    """Refuse a non-empty ``out`` without ``world.json`` (real or hand-made data): a world would add graphs to it and
    replace its files. With ``force`` a world is written beside what is there, when nothing of it would be replaced.

    Raises:
        WorldMismatch: naming the folder, and with ``force`` the first path a world would replace.
    """
    for name in ("sample_submission.csv", MANIFEST):  # what a run killed while writing them left
        if out.is_dir():
            remove_stale_temps(out, name)
    try:
        with os.scandir(out) as it:
            entries = [e.name for e in it]
    except FileNotFoundError:
        return
    except NotADirectoryError:
        raise WorldMismatch(f"{out} is a file, not a folder: choose another --out") from None
    if not entries:
        return
    if not force:
        raise WorldMismatch(f"{out} is not empty and holds no {MANIFEST}: it is not a synthetic world, and a world "
                            "would add its graphs to what is there and replace its sample_submission.csv. Choose a "
                            "new or empty --out, or pass --force to write a world beside its files (nothing of "
                            "yours is replaced or deleted)")
    taken = [p for p in _world_paths(out) if os.path.lexists(p)]
    if taken:
        raise WorldMismatch(f"{out} holds no {MANIFEST}, and a world would replace {taken[0]}"
                            f"{f' (and {len(taken) - 1} more of its paths)' if len(taken) > 1 else ''}, which "
                            "fastslow did not write: --force never replaces or deletes your files. Choose a new or "
                            "empty --out")


def _read_manifest(manifest: Path) -> dict:
    """``world.json``'s content, or :class:`WorldMismatch` naming it when it cannot be read."""
    try:
        old = json_loads(manifest.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise WorldMismatch(f"{manifest}: not a world manifest ({type(exc).__name__}: {exc}); move it aside or "
                            "choose another --out") from None
    if not isinstance(old, dict):
        raise WorldMismatch(f"{manifest}: not a world manifest (expected a JSON object); move it aside or choose "
                            "another --out")
    return old


def generate_world(
    out: str | os.PathLike[str],
    *,
    scale: str = "demo",
    seed: int = 0,
    collections: Iterable[Collection | str] | None = None,
    limit: int | None = None,
    tile_limit: int | None = None,
    workers: int | None = None,
    force: bool = False,
    progress: bool = True,
    on_written: Callable[[Path], None] | None = None,
    programs: str = "generator",
) -> Path:
    """Generate (or finish generating) a synthetic world.

    Args:
        out: destination folder (the data root: it receives ``npz_all/``, ``secret/``, ``sample_submission.csv``).
        scale: ``tiny``, ``demo`` or ``full`` (see :data:`SCALES`).
        seed: world seed; the same seed and settings give identical bytes.
        collections: collections to generate (default: all five).
        limit: at most this many graphs per collection and split.
        tile_limit: at most this many tile kernels per split (default: ``limit``); a full-scale world part can then
            hold, say, 12 graphs per layout split and 600 tile kernels.
        workers: worker processes (default: the machine's cores).
        force: regenerate over a world made with other settings (otherwise that is an error): only the files a world
            writes are removed. Into a non-empty folder that is not a world, write a world beside its files when
            none of them would be replaced (otherwise that is an error, ``force`` or not).
        progress: show a progress bar.
        on_written: called with each file written.
        programs: where the layout programs and the programs tile kernels are cut from come from (see
            :data:`PROGRAM_SOURCES`); the runtime physics, searches and format are the same for all.

    Returns:
        The data root ``out``.

    Raises:
        WorldMismatch: ``out`` holds a world made with other settings and ``force`` is false, or it is a non-empty
            folder without ``world.json`` (see :func:`_check_foreign`).
    """
    if scale not in SCALES:
        raise ValueError(f"unknown scale {scale!r}; expected one of {', '.join(SCALES)}")
    cols = tuple(Collection.parse(c) if isinstance(c, str) else c for c in (collections or list(Collection)))
    if programs not in PROGRAM_SOURCES:
        raise ValueError(f"unknown program source {programs!r}; expected one of {', '.join(PROGRAM_SOURCES)}")
    for name, value in (("limit", limit), ("tile_limit", tile_limit)):
        if value is not None and value < 1:  # zero graphs: an empty world every later command refuses
            raise ValueError(f"{name}: expected a whole number of at least 1; found {value}")
    if programs == "jax":
        from competition.synthetic.jax_programs import require_jax

        require_jax()
    cfg = WorldConfig(scale, int(seed), tuple(sorted(c.value for c in cols)), limit, tile_limit, programs)
    out = Path(out)
    manifest = out / MANIFEST
    if not manifest.exists():
        _check_foreign(out, force)
    else:
        old = _read_manifest(manifest)
        # Worlds written before tile_limit (or the generator version) existed hold no such key: it was None (1).
        made = {"tile_limit": None, "generator": 1, **(old.get("config") or {})}
        same = made == json.loads(json.dumps(cfg.as_dict()))
        if same and old.get("complete") and _all_present(out, cfg):
            return out
        if not same:
            if not force:
                older = (f" by an older generator (version {made['generator']}; this is {GENERATOR_VERSION})"
                         if made["generator"] != GENERATOR_VERSION else "")
                raise WorldMismatch(
                    f"{out} holds a world made{older} with {old.get('config')}; asked for {cfg.as_dict()}. "
                    "Choose another --out, or pass --force to regenerate it."
                )
            _clear_world(out)
    out.mkdir(parents=True, exist_ok=True)
    _remove_stale_temps(out)
    atomic_write_text(manifest, json.dumps({"config": cfg.as_dict(), "complete": False}, indent=2) + "\n")

    jobs = plan_jobs(cfg)
    total = sum(j.count for j in jobs)
    workers = workers or os.cpu_count() or 1
    bar = tqdm(total=total, desc=f"synth {scale}", unit="graph", disable=not progress)
    try:
        if workers <= 1:
            results: Iterable[list[Path]] = map(_run_job, [(out, cfg, j) for j in jobs])
            for job, paths in zip(jobs, results, strict=True):
                _report(bar, job, paths, on_written)
        else:
            with ProcessPoolExecutor(max_workers=workers, mp_context=pool_context(),
                                     initializer=end_with_parent, initargs=(os.getpid(),)) as pool:
                for job, paths in zip(jobs, pool.map(_run_job, [(out, cfg, j) for j in jobs]), strict=True):
                    _report(bar, job, paths, on_written)
    finally:
        bar.close()
    _sample_submission(out, cfg)
    atomic_write_text(manifest, json.dumps({"config": cfg.as_dict(), "complete": True}, indent=2) + "\n")
    return out


def _all_present(out: Path, cfg: WorldConfig) -> bool:
    """Whether every collection and split folder holds its planned number of files (a cheap completeness check)."""
    want: dict[tuple[str, str], int] = {}
    for job in plan_jobs(cfg):
        want[(job.collection, job.split)] = want.get((job.collection, job.split), 0) + job.count
    for (value, split), n in want.items():
        folder = out / KAGGLE_SUBDIR / Collection(value).relpath / split
        if len(list(folder.glob("*.npz"))) < n:
            return False
    return (out / "sample_submission.csv").exists()


def _report(bar: tqdm, job: GraphJob, paths: list[Path], on_written: Callable[[Path], None] | None) -> None:
    bar.update(job.count)
    if on_written:
        for p in paths:
            on_written(p)


def _clear_world(out: Path) -> None:
    """Remove the files of the world in ``out``: the graphs with their secret runtimes (each graph's ``.npz`` has a
    twin under ``secret/``; a file without one is not the world's and stays), the sample submission and the
    manifest, then the world's folders left empty. Nothing else of the data root is touched."""
    for c in Collection:
        graphs, secrets = out / KAGGLE_SUBDIR / c.relpath, out / SECRET_SUBDIR / c.relpath
        for split in _SPLITS:
            for path in _npz_files(graphs / split.value):
                twin = secrets / split.value / path.name
                if twin.is_file() and not twin.is_symlink():
                    path.unlink()
                    twin.unlink()
        for top in (graphs, secrets):
            _remove_empty(top, out)
    for name in ("sample_submission.csv", MANIFEST):
        path = out / name
        if path.is_file() and not path.is_symlink():
            path.unlink()


def _npz_files(folder: Path) -> list[Path]:
    try:
        with os.scandir(folder) as it:
            return [folder / e.name for e in it if e.name.endswith(".npz") and e.is_file(follow_symlinks=False)]
    except OSError:
        return []


def _remove_empty(folder: Path, stop: Path) -> None:
    """Remove ``folder``'s empty sub-folders, then ``folder`` and its parents up to ``stop`` while they are empty."""
    if not folder.is_dir() or folder.is_symlink():
        return
    for sub, _, _ in sorted(os.walk(folder), key=lambda t: -len(t[0])):
        try:
            os.rmdir(sub)
        except OSError:
            pass
    for parent in folder.parents:
        if parent == stop or stop not in parent.parents:
            break
        try:
            os.rmdir(parent)
        except OSError:
            break
