"""Baselines that every learned model must beat: random scores, and the compiler's default config first.

* :class:`RandomModel` scores configs at random, reproducibly per ``(seed, graph stem)``.
* :class:`DefaultFirstModel` ranks configs by how far they are from the compiler's default:

  - **Layout**: a configurable node whose 18-value row is all -1 is left to the compiler's default layout, so a
    config's score is the number of configurable nodes it sets explicitly (0 for the default config). Configs are
    streamed block by block. Ties keep index order (the metrics' stable sort); no jitter is added.
  - **Tile**: the config features carry no default flag, so :meth:`DefaultFirstModel.fit` learns what the default
    looks like relative to the kernel's output shape (see :func:`tile_default_features`): in each training graph
    the default is the config whose ``config_runtime / config_runtime_normalizers`` is closest to 1, and the model
    stores, per feature, the median over these defaults and a robust spread (median absolute deviation, floored).
    The features are ``log2`` of the share of each tiled dim a tile covers, counted from the most-minor
    physical dim, and ``log2(kernel bounds)`` per kernel dim.
    A config's score is ``sum_j |x_j - median_j| / spread_j`` over the features it has (a robust L1 distance).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Self

import numpy as np
import numpy.typing as npt
from tqdm.auto import tqdm

from competition.dataset import CollectionData
from competition.opcodes import PARAMETER
from competition.reader import LayoutGraph, TileGraph
from competition.schema import COLS_KERNEL_BOUNDS, COLS_OUTPUT_BOUNDS, MAX_RANK
from features.tabular_tile import tiled_array
from models.base import Graph, NotFittedError, RankingModel
from models.fields import FieldError, check_int, decode_array
from models.settings import Configured, Section, section, seed_setting

TILE_FEATURES = tuple(f"log2(output tile share), minor dim {k}" for k in range(MAX_RANK)) + tuple(
    f"log2(kernel_bounds_{d})" for d in range(MAX_RANK)
)
"""Names of the tile features of :func:`tile_default_features`, in column order."""

MIN_SPREAD = 0.25
"""Floor on a feature's spread (log2 units): keeps a feature that never varied in training from dominating."""


@dataclass(frozen=True)
class RandomScores(Section):
    """The random scores."""

    seed: int = seed_setting("seeds the random scores (with each graph's name)")


@dataclass(frozen=True)
class RandomConfig:
    """The random ranking's settings: :attr:`scores`."""

    scores: RandomScores = section(RandomScores)


class RandomModel(Configured, RankingModel):
    """Random scores, the same for a graph whatever else was scored before it: ``scores.seed`` combined with the
    graph's stem seeds the generator."""

    name = "random"
    reference = True

    CONFIG: ClassVar[type[RandomConfig]] = RandomConfig

    def __init__(self, config: RandomConfig | None = None, /, **settings: Any) -> None:
        self._configure(config, settings)

    def fit(self, data: CollectionData, *, progress: bool = True, deadline: float | None = None,
            predict_by: float | None = None) -> Self:
        """Nothing to learn; records the collection and returns ``self``."""
        self.collection_ = data.collection
        return self

    def predict(self, graph: Graph) -> npt.NDArray[np.float64]:
        """Uniform [0, 1) scores, float64 ``[C]``, determined by ``(seed, graph.stem)``."""
        words = np.frombuffer(hashlib.sha256(graph.stem.encode("utf-8")).digest(), dtype=np.uint32)
        rng = np.random.default_rng(np.random.SeedSequence([int(self.config.scores.seed), *words.tolist()]))
        return rng.random(graph.num_configs)


def layout_default_distance(graph: LayoutGraph, block_rows: int | None = None) -> npt.NDArray[np.float64]:
    """Per config, the number of configurable nodes not left to the compiler's default layout.

    Args:
        graph: a layout graph; its configs are streamed, one block in memory at a time.
        block_rows: configs per block (default: the reader's block size).

    Returns:
        float64 ``[C]``, in ``[0, NC]``.
    """
    out = np.zeros(graph.num_configs, dtype=np.float64)
    for first, block in graph.iter_config_blocks(block_rows):
        out[first: first + block.shape[0]] = (block != -1).any(axis=2).sum(axis=1)
    return out


def tile_default_features(graph: TileGraph) -> npt.NDArray[np.float64]:
    """Shape-relative tile features of every config, NaN where a feature does not apply.

    Columns (:data:`TILE_FEATURES`): for k = 0..5, ``log2`` of the share of the tiled array's dim ``i = rank - 1 -
    k`` one tile covers, i.e. counted from the most-minor physical dim (the bounds count hardware tiles of the array
    :func:`features.tabular_tile.tiled_array` finds; ``rank`` its dims); then ``log2(kernel_bounds_d)`` for d = 0..5
    (where positive). Counting from the minor end lines up the lane and sublane dims of kernels of different ranks,
    which is where defaults differ most. Kernel tiles stay absolute.

    Args:
        graph: a tile graph.

    Returns:
        float64 ``[C, 12]``.
    """
    out_b = graph.config_feat[:, COLS_OUTPUT_BOUNDS][:, :MAX_RANK].astype(np.float64)
    ker_b = graph.config_feat[:, COLS_KERNEL_BOUNDS][:, :MAX_RANK].astype(np.float64)
    ratio = np.full((graph.num_configs, MAX_RANK), np.nan)
    array = tiled_array(graph.node_feat, out_b, candidates=graph.node_opcode != PARAMETER)
    with np.errstate(divide="ignore", invalid="ignore"):
        if array is not None:
            rank = array.dims.size
            share = array.elements(out_b[:, :rank]) / array.dims
            for k in range(rank):
                i = rank - 1 - k
                ratio[:, k] = np.where(out_b[:, i] > 0, np.log2(share[:, i]), np.nan)
        kernel = np.where(ker_b > 0, np.log2(ker_b), np.nan)
    return np.concatenate([ratio, kernel], axis=1)


def tile_default_index(graph: TileGraph) -> int:
    """The training label of the default: the config whose runtime is closest to its normalizer (ratio ~ 1)."""
    return int(np.argmin(np.abs(np.log(graph.normalized_runtime()))))


class DefaultFirstModel(RankingModel):
    """The compiler's default config first, then configs by their distance from it (see the module docstring).

    Layout graphs need no fitting. Tile graphs need :meth:`fit` on a tile collection.

    Attributes:
        collection_: the collection fitted on.
        tile_center_: float64 ``[12]`` (tile only), per-feature median over the training defaults (NaN where no
            default had the feature).
        tile_spread_: float64 ``[12]`` (tile only), per-feature spread, at least :data:`MIN_SPREAD`.
        n_graphs_: number of training graphs learned from.
    """

    name = "default-first"
    reference = True
    STATE_OPTIONAL = ("collection_", "tile_center_", "tile_spread_", "n_graphs_")

    def __init__(self) -> None:
        pass

    def check_state(self, state: Mapping[str, Any]) -> None:
        """See :meth:`RankingModel.check_state`: the tile default's median and spread, float ``[12]`` each (the
        median NaN where no default had the feature, the spread finite and at least :data:`MIN_SPREAD`), both or
        neither."""
        super().check_state(state)
        if ("tile_center_" in state) != ("tile_spread_" in state):
            given, lacking = sorted(("tile_center_", "tile_spread_"), key=lambda k: k not in state)
            raise FieldError(f"state.{lacking}", f"the learned default's other half, beside state.{given}", "none")
        if "tile_center_" in state:
            width = (len(TILE_FEATURES),)
            center = decode_array(state["tile_center_"], "state.tile_center_", kinds="f", shape=width)
            if np.isinf(center).any():
                raise FieldError("state.tile_center_", "finite numbers, or null where no default had the feature",
                                 f"{int(np.isinf(center).sum())} infinite")
            spread = decode_array(state["tile_spread_"], "state.tile_spread_", kinds="f", shape=width, finite=True)
            if (spread < MIN_SPREAD).any():
                raise FieldError("state.tile_spread_", f"spreads of at least MIN_SPREAD ({MIN_SPREAD})",
                                 f"{float(spread.min())!r}")
        if "n_graphs_" in state:
            check_int(state["n_graphs_"], "state.n_graphs_", low=0)

    def fit(self, data: CollectionData, *, progress: bool = True, deadline: float | None = None,
            predict_by: float | None = None) -> Self:
        """Layout: nothing to learn. Tile: learn the typical default from the train graphs.

        Raises:
            ValueError: a tile collection without any train graph with known runtimes.
        """
        collection = data.collection
        self.collection_ = collection
        if collection.is_layout:
            return self
        rows = []
        for g in tqdm(data.train, desc=f"default-first {collection}", disable=not progress):
            if g.is_test or not isinstance(g, TileGraph):
                continue
            rows.append(tile_default_features(g)[tile_default_index(g)])
        if not rows:
            raise ValueError(f"{data.train.folder}: expected tile graphs with known runtimes to learn the default "
                             "from; found none")
        x = np.stack(rows)
        present = ~np.isnan(x).all(axis=0)
        center = np.full(x.shape[1], np.nan)
        spread = np.full(x.shape[1], MIN_SPREAD)
        center[present] = np.nanmedian(x[:, present], axis=0)
        spread[present] = np.maximum(np.nanmedian(np.abs(x[:, present] - center[present]), axis=0), MIN_SPREAD)
        self.tile_center_ = center
        self.tile_spread_ = spread
        self.n_graphs_ = len(rows)
        return self

    def predict(self, graph: Graph) -> npt.NDArray[np.float64]:
        """Distance of each config from the (learned, for tile) default, float64 ``[C]``; 0 is the default.

        Raises:
            NotFittedError: a tile graph and the model was not fitted on a tile collection.
        """
        if isinstance(graph, LayoutGraph):
            return layout_default_distance(graph)
        if not hasattr(self, "tile_center_"):
            raise NotFittedError("DefaultFirstModel needs fit() on the tile:xla collection before it can rank "
                                 f"tile graphs (asked to predict {graph.path})")
        with np.errstate(over="ignore"):  # a saved default far out gives infinite scores, which are refused
            z = np.abs(tile_default_features(graph) - self.tile_center_) / self.tile_spread_
            return np.nansum(z, axis=1)
