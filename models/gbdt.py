"""LightGBM lambdarank on the tabular features, one model per collection.

The features are :mod:`features.tabular_tile`'s (tile) and :mod:`features.tabular_layout`'s (layout). Each training
graph is one query. Its distinct configs (a config's repeated runs count once, with their mean
target: :func:`competition.labels.distinct_target`; at most ``max_configs_per_graph``, sampled per graph with a
seeded generator) get relevance grades from their runtime ranks within the sample (see :func:`relevance_grades`):
the fastest config gets 30, the slowest 0, and configs with equal runtimes share a grade. Layout feature columns
are z-scored over the configs of their graph (``query_norm``, :func:`query_normalised`): trees then split on where
a config stands within its graph, which carries from one graph to another, where raw columns mostly say which graph
it is (a world holds a few dozen).

* Tile (scored by the top-5 slowdown): LightGBM's default exponential ``label_gain`` (grades 0..30), early stopping
  on NDCG@5.
* Layout (scored by Kendall tau over all configs): linear ``label_gain`` (gain = grade), no truncation of the
  lambdarank pairs (``lambdarank_truncation_level = max_configs_per_graph``), early stopping on NDCG over the whole
  query.

Early stopping uses the labelled graphs the caller gives (``data.eval`` of :meth:`GBDTModel.fit`, the valid split in
the pipeline), when there are any. Their features are kept in memory (:attr:`GBDTModel._feature_memo`, never saved):
predicting a valid graph's configs later reuses them instead of reading the file again.

The booster is saved as LightGBM's model string inside the JSON file of :meth:`RankingModel.save`, with the feature
names, so a loaded model predicts exactly as the saved one did.
"""

from __future__ import annotations

import hashlib
import inspect
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Self

import lightgbm
import numpy as np
import numpy.typing as npt
from lightgbm.callback import CallbackEnv
from scipy.stats import rankdata
from tqdm.auto import tqdm

from competition.collections import Collection
from competition.dataset import CollectionData, SplitGraphs
from competition.labels import distinct_target, graph_target
from competition.protocol import ValidProtocol
from competition.reader import LayoutGraph, TileGraph
from competition.workers import usable_cores
from features.tabular_layout import layout_feature_names, layout_features
from features.tabular_tile import tile_feature_names, tile_features
from models.base import Graph, NotFittedError, RankingModel
from models.booster import checked_model_string
from models.fields import check_int, check_list, check_number, check_str
from models.settings import Configured, Section, section, seed_setting, setting

_HAS_EVAL_X = "eval_X" in inspect.signature(lightgbm.LGBMRanker.fit).parameters

MAX_NUM_LEAVES = 4096
"""The most leaves per tree: 128 times the default 31 (LightGBM's own default; lambdarank solutions of the
competition used at most a few hundred). Each costs memory in every tree: :data:`MAX_TREE_LEAVES`."""
MAX_TREE_LEAVES = 10_000_000
"""The most ``n_estimators x num_leaves``: LightGBM allocates every tree's arrays at ``num_leaves``, about
:data:`_BYTES_PER_TREE_LEAF` bytes a leaf (about 1 GB at the limit) however few leaves the data lets it grow; the
default is 300 x 31 = 9,300."""
_BYTES_PER_TREE_LEAF = 100
MAX_N_JOBS = 256
"""The most LightGBM threads asked for; a fit uses at most the usable cores (more threads than cores only wait for
each other, and each reserves its own stack and buffers)."""
MAX_FEATURE_COLUMNS = 100_000
"""The most feature columns a saved GBDT may name: far above what :mod:`features.tabular_tile` and
:mod:`features.tabular_layout` compute."""

LAYOUT_FEATURE_FRACTION = 0.5
"""Layout trees draw half of the columns each (``booster.feature_fraction``'s default for layout): fitted on a
world's few dozen graphs, a tree that may not lean on the same columns each time carries further to other graphs
(lab/journal.md). Tile trees see every column: drawing half lowers their top-5 score."""

MAX_GRADE = 30
"""Highest relevance grade: LightGBM's default ``label_gain`` has 31 entries (grades 0..30)."""


def relevance_grades(runtime: npt.ArrayLike) -> npt.NDArray[np.int32]:
    """Integer relevance grades of one query's configs, fastest highest.

    ``grade = floor(30 * (1 - rank / (C - 1)))`` where ``rank`` is the 0-based rank by runtime, ties taking the
    lowest rank of their group (so equal runtimes share a grade). A single config gets 30.

    Args:
        runtime: ``[C]`` runtimes (any unit; lower is faster).

    Returns:
        int32 ``[C]`` in ``0..30``.
    """
    r = np.asarray(runtime, dtype=np.float64)
    if r.size <= 1:
        return np.full(r.size, MAX_GRADE, dtype=np.int32)
    rank = rankdata(r, method="min") - 1
    return np.floor(MAX_GRADE * (1.0 - rank / (r.size - 1)) + 1e-9).astype(np.int32)


def query_normalised(x: npt.NDArray[np.float32], block: int = 65536) -> npt.NDArray[np.float32]:
    """``x`` ``[R, F]`` with each column z-scored over the distinct rows (the configs of one graph; repeated runs
    of a config count once, so that a file's repeats do not move the scale): mean 0, standard deviation 1; a
    column constant over the rows becomes 0. Rows are told apart by their bytes (no float64 copy of ``x``); the
    result is written ``block`` rows at a time."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    out = np.zeros_like(x)
    if not x.shape[0] or not x.shape[1]:
        return out
    _, first = np.unique(x.view(np.dtype((np.void, x.shape[1] * x.itemsize))).reshape(-1), return_index=True)
    distinct = x[np.sort(first)].astype(np.float64)
    mean, sd = distinct.mean(axis=0), distinct.std(axis=0)
    scale = np.where(sd > 1e-12 * np.maximum(np.abs(mean), 1.0), sd, np.inf)
    for s in range(0, x.shape[0], block):
        out[s:s + block] = (x[s:s + block] - mean) / scale
    return out


def _features(graph: Graph, rows: npt.NDArray[np.int64] | None = None, *,
              query_norm: bool = False) -> npt.NDArray[np.float32]:
    if isinstance(graph, TileGraph):
        x = tile_features(graph)
        return x if rows is None else x[rows]
    x = layout_features(graph, rows)
    return query_normalised(x) if query_norm else x


MemoKey = tuple[str, int, int, str]
"""``(path, file size, mtime in ns, digest of the file's config indices)``."""


def _memo_key(graph: Graph, rows: npt.NDArray[np.int64] | None = None) -> MemoKey:
    """Names the features of configs ``rows`` of ``graph`` (all of them for ``None``) by the file and the
    config indices into the file's configs (a graph restricted with ``select_configs`` keeps them)."""
    idx = np.arange(graph.num_configs) if rows is None else np.asarray(rows, dtype=np.int64)
    base = getattr(graph, "config_rows", None)
    file_rows = np.ascontiguousarray(idx if base is None else base[idx], dtype=np.int64)
    stat = os.stat(graph.path)
    digest = hashlib.blake2b(file_rows.tobytes(), digest_size=16).hexdigest()
    return str(os.path.abspath(graph.path)), stat.st_size, stat.st_mtime_ns, digest


def _stop_at(deadline: float) -> Callable[[CallbackEnv], None]:
    """A LightGBM callback that ends boosting at ``deadline`` (``time.monotonic()``), keeping the rounds so far."""

    def callback(env: CallbackEnv) -> None:
        if time.monotonic() > deadline:
            raise lightgbm.callback.EarlyStopException(env.iteration, env.evaluation_result_list or [])

    callback.order = 40  # type: ignore[attr-defined]  # after early stopping's own check (order 30)
    return callback


@dataclass(frozen=True)
class GBDTSampling(Section):
    """Which configs make the queries, and how their features are put to the trees."""

    max_configs_per_graph: int = setting(
        1000, "configs of each graph sampled into the training queries (LightGBM refuses queries above 10,000 rows)",
        low=2, high=10_000)
    query_norm: bool = setting(
        True, "layout: each feature column is z-scored over the graph's configs being ranked (a graph's mean 0 and "
        "standard deviation 1, a column constant over them 0), so that trees split on where a config stands "
        "within its graph, not on which graph it is")


@dataclass(frozen=True)
class BoosterSettings(Section):
    """LightGBM's lambdarank booster."""

    n_estimators: int = setting(300, "boosting rounds at most (early stopping on valid may end sooner)", low=1,
                                high=100_000)
    learning_rate: float = setting(0.05, "shrinkage of each tree", low=0, high=1, low_open=True)
    num_leaves: int = setting(31, "leaves per tree", low=2, high=MAX_NUM_LEAVES)
    feature_fraction: float | None = setting(
        None, "share of the feature columns each tree may split on (LightGBM's feature_fraction; None: "
        f"{LAYOUT_FEATURE_FRACTION} for layout, 1 for tile)", low=0, high=1, low_open=True)
    early_stopping_rounds: int = setting(
        30, "rounds without a better valid score before stopping (0: no early stopping)", low=0, high=100_000)
    seed: int = seed_setting("seeds the config sampling and LightGBM")


@dataclass(frozen=True)
class GBDTRunSettings(Section):
    """How the GBDT runs, not what it learns."""

    n_jobs: int = setting(2, "LightGBM threads (at most the usable cores)", low=1, high=MAX_N_JOBS, runtime=True)


@dataclass(frozen=True)
class GBDTConfig:
    """Every setting of the GBDT: :attr:`sampling`, :attr:`booster`, :attr:`run`.

    Raises:
        ValueError: ``n_estimators x num_leaves`` above :data:`MAX_TREE_LEAVES`.
    """

    sampling: GBDTSampling = section(GBDTSampling)
    booster: BoosterSettings = section(BoosterSettings)
    run: GBDTRunSettings = section(GBDTRunSettings)

    def __post_init__(self) -> None:
        b = self.booster
        if b.n_estimators * b.num_leaves > MAX_TREE_LEAVES:
            raise ValueError(
                f"booster.n_estimators x booster.num_leaves is {b.n_estimators:,} x {b.num_leaves:,} = "
                f"{b.n_estimators * b.num_leaves:,} tree leaves, more than the limit of {MAX_TREE_LEAVES:,} "
                f"(MAX_TREE_LEAVES: LightGBM holds every tree at num_leaves, about {_BYTES_PER_TREE_LEAF} bytes a "
                "leaf); lower one of them")


class GBDTModel(Configured, RankingModel):
    """LightGBM ``LGBMRanker(objective="lambdarank")`` over per-config tabular features.

    Its settings are a :class:`GBDTConfig` tree (``GBDTModel(config)``, or values by ``section.name`` or name:
    ``GBDTModel(learning_rate=0.1)``).

    Attributes:
        collection_: the collection fitted on.
        booster_: LightGBM model string.
        feature_names_: column names of the features, in order.
        best_iteration_: boosting rounds used for prediction.
        n_graphs_: training graphs (queries).
        n_rows_: training rows (sampled configs).
        fit_seconds_: wall time of the LightGBM fit (features excluded).
    """

    name = "gbdt"
    STATE_REQUIRED = ("collection_", "booster_", "feature_names_")
    STATE_OPTIONAL = ("best_iteration_", "n_graphs_", "n_rows_", "fit_seconds_")

    CONFIG: ClassVar[type[GBDTConfig]] = GBDTConfig

    def __init__(self, config: GBDTConfig | None = None, /, **settings: Any) -> None:
        self._configure(config, settings)

    def check_state(self, state: Mapping[str, Any]) -> None:
        """See :meth:`RankingModel.check_state`: the feature names (strings), the counts, and the booster string,
        whose every tree is checked before LightGBM parses it (:func:`models.booster.checked_model_string`)."""
        super().check_state(state)
        names = check_list(state["feature_names_"], "state.feature_names_", max_length=MAX_FEATURE_COLUMNS)
        for k, name in enumerate(names):
            check_str(name, f"state.feature_names_[{k}]", max_length=1000)
        checked_model_string(state["booster_"], len(names))
        for key in ("best_iteration_", "n_graphs_", "n_rows_"):
            if key in state:
                check_int(state[key], f"state.{key}", low=0)
        if "fit_seconds_" in state:
            check_number(state["fit_seconds_"], "state.fit_seconds_", low=0, null=True)

    def _queries(self, graphs: SplitGraphs, rng: np.random.Generator, progress: bool,
                 protocol: ValidProtocol | None = None, deadline: float | None = None,
                 memo: dict[MemoKey, npt.NDArray[np.float32]] | None = None,
                 ) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.int32], list[int]]:
        """Features ``[R, F]``, grades ``[R]`` and query sizes of the labelled ones of ``graphs``.

        On the valid split ``protocol`` chooses each graph's configs (capped at ``max_configs_per_graph``); past
        ``deadline`` no more graphs are read (one at least). Each graph's features go into ``memo`` too, if given.
        """
        collection, split = graphs.collection, graphs.split
        xs, ys, groups = [], [], []
        for index in tqdm(range(len(graphs)), desc=f"gbdt {collection} {split.value}", disable=not progress,
                          leave=False):
            if groups and deadline is not None and time.monotonic() > deadline:
                break
            graph = graphs[index]
            if graph.is_test or graph.num_configs == 0:
                continue
            if protocol is None:  # each distinct config once, its repeats' mean target
                rows, target = distinct_target(graph)
            else:
                rows, target = np.arange(graph.num_configs), graph_target(graph)
                chosen = protocol.configs(collection, graph.stem, graph.num_configs, split)
                if chosen is not None:
                    rows, target = chosen, target[chosen]
            if rows.size > self.config.sampling.max_configs_per_graph:
                keep = np.sort(rng.choice(rows.size, self.config.sampling.max_configs_per_graph, replace=False))
                rows, target = rows[keep], target[keep]
            features = _features(graph, rows, query_norm=self.config.sampling.query_norm)
            if memo is not None:
                features.flags.writeable = False
                memo[_memo_key(graph, rows)] = features
            xs.append(features)
            ys.append(relevance_grades(target))
            groups.append(rows.size)
        width = len(tile_feature_names() if collection.is_tile else layout_feature_names())
        x = np.concatenate(xs) if xs else np.zeros((0, width), dtype=np.float32)
        y = np.concatenate(ys) if ys else np.zeros(0, dtype=np.int32)
        return x, y, groups

    def _feature_fraction(self, collection: Collection) -> float:
        chosen = self.config.booster.feature_fraction
        if chosen is not None:
            return chosen
        return LAYOUT_FEATURE_FRACTION if collection.is_layout else 1.0

    def fit(self, data: CollectionData, *, progress: bool = True, deadline: float | None = None,
            predict_by: float | None = None) -> Self:
        """Fit one ranker on the labelled train graphs, early-stopping on the labelled ``data.eval`` graphs when
        there are some.

        Raises:
            ValueError: no train graph has known runtimes.
        """
        collection = data.collection
        booster = self.config.booster
        rng = np.random.default_rng(booster.seed)
        self._feature_memo: dict[MemoKey, npt.NDArray[np.float32]] = {}
        x, y, groups = self._queries(data.train, rng, progress, deadline=deadline)
        if not groups:
            raise ValueError(f"{data.train.folder}: expected graphs with known runtimes to fit the GBDT on; found "
                             "none")
        names = tile_feature_names() if collection.is_tile else layout_feature_names()
        # Layout is scored by Kendall tau over every config: linear gains, pairs beyond the top 30 (LightGBM's
        # default truncation) and NDCG over the whole query weigh every pair alike; on the demo world this lifts
        # mean valid tau well above the defaults', which stopped early (lab/journal.md, "figures
        # moved out of docstrings"). Tile is scored by the best of the top 5: the default exponential gains and
        # NDCG@5 favour the top.
        extra: dict[str, object] = {}
        eval_at = [5]
        if collection.is_layout:
            extra.update(label_gain=list(range(MAX_GRADE + 1)),
                         lambdarank_truncation_level=self.config.sampling.max_configs_per_graph)
            eval_at = [self.config.sampling.max_configs_per_graph]
        ranker = lightgbm.LGBMRanker(
            objective="lambdarank", n_estimators=booster.n_estimators, learning_rate=booster.learning_rate,
            num_leaves=booster.num_leaves, colsample_bytree=self._feature_fraction(collection), random_state=booster.seed, n_jobs=min(self.config.run.n_jobs, usable_cores()), verbose=-1,
            **extra,
        )
        fit_kwargs: dict[str, object] = {}
        if data.eval is not None and data.eval.split != data.train.split and booster.early_stopping_rounds > 0:
            vx, vy, vgroups = self._queries(data.eval, rng, progress, data.protocol, memo=self._feature_memo)
            if vgroups:
                fit_kwargs = dict(eval_group=[vgroups], eval_at=eval_at,
                                  callbacks=[lightgbm.early_stopping(booster.early_stopping_rounds, verbose=False)])
                # LightGBM 4.7 renamed eval_set (now deprecated, with a warning); pyproject allows 4.1 onwards.
                if _HAS_EVAL_X:
                    fit_kwargs.update(eval_X=(vx,), eval_y=(vy,))
                else:
                    fit_kwargs.update(eval_set=[(vx, vy)])
        if deadline is not None:
            fit_kwargs["callbacks"] = [*fit_kwargs.get("callbacks", []), _stop_at(deadline)]
        start = time.perf_counter()
        # Feature names are kept by us, not LightGBM: its own would be rewritten (it refuses some characters).
        ranker.fit(x, y, group=groups, **fit_kwargs)
        self.fit_seconds_ = time.perf_counter() - start
        self.collection_ = collection
        self.best_iteration_ = int(ranker.best_iteration_ or ranker.n_estimators_)
        self.booster_ = ranker.booster_.model_to_string(num_iteration=self.best_iteration_)
        self.feature_names_ = names
        self.n_graphs_ = len(groups)
        self.n_rows_ = int(x.shape[0])
        self._booster = None
        return self

    def _model(self) -> lightgbm.Booster:
        booster = getattr(self, "_booster", None)
        if booster is None:
            if not hasattr(self, "booster_"):
                raise NotFittedError("GBDTModel needs fit() before predict()")
            names = tile_feature_names() if Collection(self.collection_).is_tile else layout_feature_names()
            if list(self.feature_names_) != names:
                # a model saved by a version of the toolkit that computed other columns
                pairs = zip(self.feature_names_, names, strict=False)  # to the shorter list
                first = next((k for k, (a, b) in enumerate(pairs) if a != b), min(len(names), len(self.feature_names_)))
                raise ValueError(f"this GBDT was fitted on {len(self.feature_names_)} feature columns and this "
                                 f"version computes {len(names)}, first differing at column {first}: fit it again")
            # LightGBM is given only what was checked: a bad tree would hang or crash its parser.
            booster = self._booster = lightgbm.Booster(
                model_str=checked_model_string(self.booster_, len(self.feature_names_)))
        return booster

    def predict(self, graph: Graph) -> npt.NDArray[np.float64]:
        """Negated ranker scores, float64 ``[C]``: lower means predicted faster.

        Raises:
            NotFittedError: the model was not fitted.
            ValueError: the graph's kind (tile or layout) differs from the collection fitted on.
        """
        booster = self._model()
        is_layout = isinstance(graph, LayoutGraph)
        if is_layout != Collection(self.collection_).is_layout:
            raise ValueError(f"{graph.path}: expected a graph of {self.collection_} (the fitted collection); "
                             f"found a {'layout' if is_layout else 'tile'} graph")
        if graph.num_configs == 0:
            return np.zeros(0, dtype=np.float64)
        memo = getattr(self, "_feature_memo", {})
        x = memo.get(_memo_key(graph)) if memo else None
        if x is None:
            x = _features(graph, query_norm=self.config.sampling.query_norm)
        return -np.asarray(booster.predict(x), dtype=np.float64)
