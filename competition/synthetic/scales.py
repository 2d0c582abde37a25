"""The sizes and settings of a synthetic world: its scales (graphs per split, program sizes, configs per graph),
the distributions configs per graph are drawn from, and the settings a world's ``world.json`` stores.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np
import numpy.typing as npt

from competition.collections import Collection, Split

# Tile kernels written per generated program (tile graphs are cut from programs, several from each), by default.
KERNELS_PER_PROGRAM = 8


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


GENERATOR_VERSION: int = 9
"""The version of the world's generator, stored in ``world.json``: raised whenever the same settings give other
bytes (2: tile bounds in hardware tiles and the tile physics calibrated to real records; 3: layout search spaces,
default heuristic and searches calibrated to real records; 4: a tile kernel in one chunk stays on chip; 5: a tile
kernel's last, partial chunk is computed whole; 6: layout physics and searches calibrated to a real layout
graph: only a convolution's or dot's output layout costs, searches tie nodes and rarely leave the compiler's output
layouts; 7: one default search in ten stays narrow, every split holding its share, instead of three in ten
drawn at random, a wandering one changes an output layout in a sixth of its steps, and nlp random searches leave
an output layout one time in 5; 8: the products of the window, slice, dynamic-slice and pad lists are 1, not 0, on
ops those lists are empty on, as the real featurizer writes them; 9: xla programs include AlexNet- and VGG-like
plain CNNs, trained; a training step computes no gradient of its input data (the dead input gradient of the
first layer is removed, as XLA removes it) and trains its dense biases), so that a world made by an older
generator is never taken for a current one. A manifest without it was made by version 1."""


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
