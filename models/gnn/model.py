"""The GNN rankers as :class:`models.base.RankingModel` s: ``gnn`` (the TpuGraphs baseline with bidirectional SAGE)
and ``gnn-attn`` (the same with cross-configuration attention).

:meth:`GNNModel.fit` builds the feature pipeline's disk cache for the train graphs and the graphs early stopping
scores (those the caller gives in :class:`competition.dataset.CollectionData`: the valid split's in the pipeline),
fits the column selection and normalisation on the train graphs (stored with the model), trains with
:func:`models.gnn.train.train`, and keeps the best weights; with ``refit``, it then trains a second network from
scratch on the train and eval graphs for the best epoch count, which scores the graphs of every other split (test);
with ``seeds`` N > 1, it trains N such networks with successive seeds (a seed ensemble). Warm-started
(``train.init_from``: :mod:`models.gnn.warm_start`), every network starts from a saved run's weights instead of a
random draw, and the saved run's column selection and normalisation are used instead of fitted ones.
:meth:`GNNModel.predict` runs the same pipeline on one graph and streams a layout graph's configs block by block, so
a 100,000-config graph is never in memory whole; a seed ensemble's networks each score every block, and their
rank-normalised scores are averaged.

Launched by torchrun on several processes (:mod:`models.gnn.distributed`), :meth:`GNNModel.fit` runs on every rank:
rank 0 builds the processed-graph cache while the others wait, then all read it and train together.

Hyper-parameters left at ``None`` take the collection's default: its kind's from :data:`models.gnn.train.DEFAULTS`,
with :data:`models.gnn.train.COLLECTION_DEFAULTS` where a collection differs, the one place the GNN defaults live
(:class:`models.gnn.train.GNNConfig`).
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar, Literal, Self

import numpy as np
import numpy.typing as npt
import torch
from torch_geometric.data import Data
from torch_geometric.transforms import BaseTransform, Compose

from competition.collections import Collection, Split
from competition.dataset import CollectionData, SplitGraphs
from competition.reader import LayoutGraph, TileGraph
from competition.runlock import hold_run_folder
from features.cache import ProcessedGraphs
from features.data import graph_to_data
from features.transforms import (
    ConfigDimensionSizes,
    DedupConfigs,
    DropConstantColumns,
    LogTransform,
    Normalize,
    OpcodeGroupFeatures,
    PadLayoutMinusOne,
    PruneToConfigurable,
    ShapeAlignmentFeatures,
    TileShares,
)
from models import settings as tree
from models.base import NotFittedError, RankingModel, run_folder
from models.fields import (
    FieldError,
    check_bool,
    check_int,
    check_ints,
    check_list,
    check_mapping,
    check_number,
    check_numbers,
    check_str,
    decode_array,
    shown,
)
from models.gnn import distributed
from models.gnn.config import (
    GNNConfig,
    RunSettings,
    default_config,
    from_flat,
    quick_settings,
    without_retired,
)
from models.gnn.infer import (
    REFERENCE_WINDOW,
    LayoutPlan,
    ReferenceContext,
    config_codes,
    iter_code_blocks,
    reference_sets,
)
from models.gnn.net import RankNet, make_segments
from models.gnn.runs import REFIT_FOLDER, member_folder
from models.gnn.steps import Item, predict_scores, resolve_device, validated_configs
from models.gnn.train import TrainResult, finished, train
from models.gnn.warm_start import KEY as INIT_KEY
from models.gnn.warm_start import Source, load_source, source_digest

log = logging.getLogger(__name__)

MAX_NODE_COLUMNS = 100_000
"""The most node feature columns a saved GNN may declare (``settings_.num_features``, ``columns_.num_columns``): far
above what its feature pipeline gives; :func:`fastslow.saved_runs.feature_problem` then checks the exact width
against the graphs predicted."""

MAX_EPOCHS = 100_000
"""The most rows a saved per-epoch history may hold: the ``train.epochs`` setting's upper bound."""

FLOAT32_MAX = float(np.finfo(np.float32).max)
FLOAT32_TINY = float(np.finfo(np.float32).tiny)

PREDICT_BLOCK = REFERENCE_WINDOW
"""Layout configs read from disk and scored per block (the first block holds the configs reference sets are drawn
from)."""


def feature_pipeline(kind: str, hops: int | Literal["all"], pad: bool, dim_tokens: bool,
                     tile_shares: bool = False) -> BaseTransform:
    """The per-graph transforms of the GNNs (before the fitted column selection and normalisation).

    Layout graphs are pruned to the configurable nodes and their ``hops``-hop neighbourhood (``"all"``: whole graph);
    layouts are padded with -1 when ``pad``; TPU alignment columns of the raw shape dims are appended; with
    ``dim_tokens`` (layout) the sizes of the dimensions config values name are attached
    (:class:`features.transforms.ConfigDimensionSizes`); with ``tile_shares`` (tile) the shares of the arrays each
    config cuts are appended to its columns (:class:`features.transforms.TileShares`); heavy-tailed columns are
    log-transformed; opcode-group columns are appended.
    """
    steps: list[BaseTransform] = []
    if kind == "tile" and tile_shares:
        steps.append(TileShares())  # reads the raw bounds and shapes: before the padding and the log
    if kind == "layout" and hops != "all":
        steps.append(PruneToConfigurable(hops=hops))
    if pad:
        steps.append(PadLayoutMinusOne())
    steps.append(ShapeAlignmentFeatures())  # reads the raw sizes: before the log
    if kind == "layout" and dim_tokens:
        steps.append(ConfigDimensionSizes())
    steps += [LogTransform(), OpcodeGroupFeatures()]
    return Compose(steps)


def settings_pipeline(settings: GNNConfig) -> BaseTransform:
    """:func:`feature_pipeline` with a run's settings (:meth:`GNNModel.train_config`, or a saved model's)."""
    return feature_pipeline(settings.kind, settings.features.hops, settings.features.pad, settings.network.dim_tokens,
                            settings.features.tile_shares)


def stored_settings(cfg: GNNConfig) -> dict[str, Any]:
    """What a fitted model keeps of the tree it trained with (``settings_``): all but the ``run`` section (how it
    ran: device, folders, time cap, seed-ensemble size)."""
    return tree.as_dict(cfg, skip=("run",))


def _key(name: str) -> str:
    """A setting's ``section.name`` (a name that is no setting is kept, for the tree to refuse naming it)."""
    try:
        return tree.resolve(GNNConfig, name).key
    except KeyError:
        return name


class GNNModel(RankingModel):
    """A GNN ranker, one per collection.

    Its settings are a :class:`models.gnn.config.GNNConfig` tree (features, network, train, predict, run; each
    leaf's type, default, range and help declared there once): ``GNNModel(config)`` trains every collection with
    that tree (its kind set by the collection), and ``GNNModel(**settings)`` with each collection's defaults
    (:func:`models.gnn.config.default_config`: :data:`~models.gnn.config.KIND_PRESETS`, then
    :data:`~models.gnn.config.COLLECTION_PRESETS`) and ``settings`` in their place, by ``section.name`` or name
    (``GNNModel(**{"train.lr": 3e-3})``, ``GNNModel(hidden=64)``). ``network.attention`` defaults to the class's
    :attr:`default_attention`. A value a tree refuses is refused here. A model saved by an earlier version (its
    settings by name, some ``None`` for "the default", maybe with :data:`~models.gnn.config.RETIRED_SETTINGS`
    off) loads; one that turned a retired idea on is refused.

    Attributes:
        collection_: the collection fitted on.
        settings_: the run's settings (:class:`models.gnn.train.GNNConfig` as a dict; ``settings.json`` in the
            run folder).
        weights_: the network's weights, name to array.
        columns_: the fitted column selection (``DropConstantColumns`` state; a warm start's source's).
        normalize_: the fitted normalisation (``Normalize`` state; a warm start's source's).
        best_epoch_, best_metric_: when the kept weights were reached, and their valid metric.
        history_: per-epoch ``epoch, train_loss, valid_metric, lr, seconds``.
        swa_used_: whether the kept weights are the average of the last ``swa_epochs`` epochs (with no valid
            split, the average is kept whenever ``swa_epochs`` is set).
        finetune_used_: whether the kept weights carry the head fine-tuned after GST (``gst_finetune_epochs``).
        fit_splits_: the splits the early-stopped network saw (trained on, or stopped on): it scores their graphs.
        members_: with ``seeds`` above 1, the seed ensemble's other networks the fit kept, each a dict of its
            ``seed``, ``weights`` (as ``weights_``), ``best_epoch``, ``best_metric`` and ``history`` (as
            :attr:`history_`), and ``refit_weights`` where it has a refitted network; absent with one network.
        refit_weights_, refit_epochs_: with ``refit``, the refitted network's weights (as ``weights_``) and its
            epoch count; absent without ``refit``, without eval graphs, or when the time budget cut the refit short
            (a warning says so).
    """

    name: ClassVar[str] = "gnn"
    default_attention: ClassVar[bool] = False
    STATE_REQUIRED = ("collection_", "settings_", "weights_", "columns_", "normalize_")
    STATE_OPTIONAL = ("best_epoch_", "best_metric_", "history_", "stopped_", "swa_used_", "finetune_used_",
                      "fit_splits_", "refit_weights_", "refit_epochs_", "members_")

    CONFIG: ClassVar[type[GNNConfig]] = GNNConfig

    def __init__(self, config: GNNConfig | None = None, /, **settings: Any) -> None:
        if config is not None and not isinstance(config, GNNConfig):
            raise TypeError(f"{type(self).__name__} takes a GNNConfig or settings by name; got "
                            f"{type(config).__name__}")
        self.config = config
        self.settings = {_key(k): v for k, v in settings.items()}
        # A value no run could take is refused now, not after the data is read. The run and predict sections are
        # the same for every collection: what the properties below read.
        self._layout = self.train_config("layout")

    def get_params(self) -> dict[str, Any]:
        """The settings given, by ``section.name`` (a whole tree's, when built from one)."""
        if self.config is not None:
            return {k: tree.get(self.config, k) for k in tree.leaves(GNNConfig)}
        return dict(self.settings)

    @property
    def run_settings(self) -> RunSettings:
        """How this model runs (device, folders, time cap): the same for every collection."""
        return self._layout.run

    @property
    def device(self) -> str:
        return self.run_settings.device

    @property
    def runs_dir(self) -> str | None:
        return self.run_settings.runs_dir

    @property
    def cache_dir(self) -> str:
        return self.run_settings.cache_dir

    @property
    def max_seconds(self) -> float | None:
        return self.run_settings.max_seconds

    @property
    def tta(self) -> int:
        return self._layout.predict.tta

    @classmethod
    def upgrade_saved(cls, params: dict[str, Any], state: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        """A model saved by an earlier version holds its hyper-parameters by name, ``None`` for "the default", and
        its ``settings_`` flat, maybe with :data:`~models.gnn.config.RETIRED_SETTINGS`: read as the tree (retired
        settings dropped when off, refused when on: :func:`~models.gnn.config.without_retired`)."""
        state = {k: v for k, v in state.items() if k != "resolved_"}  # an early version's copy of its parameters
        if isinstance(state.get("settings_"), dict) and "train" not in state["settings_"]:
            old = state["settings_"]
            state = {**state, "settings_": stored_settings(from_flat(str(old.get("kind", "layout")), old))}
        if any("." in k for k in params):
            return params, state
        return {k: v for k, v in without_retired(params).items() if v is not None}, state

    def check_state(self, state: Mapping[str, Any]) -> None:
        """See :meth:`RankingModel.check_state`: the settings (a tree this version trains, of the collection's kind),
        the column selection and normalisation (``settings_.num_features`` columns, indices within the pipeline's
        ``num_columns``, finite float32 numbers, positive spreads), every network's weights (the names, shapes and
        dtypes of the network its settings build, taken from a network on torch's ``meta`` device, which allocates
        nothing), and the records of the fit."""
        super().check_state(state)
        settings = check_mapping(state["settings_"], "state.settings_", required=("kind", "num_features",
                                                                                   "data_key"))
        try:
            cfg = tree.from_dict(GNNConfig, settings)
        except (TypeError, ValueError) as exc:
            raise FieldError("state.settings_", "the settings of a network this version trains", str(exc)) from None
        collection = Collection(state["collection_"])
        if settings["kind"] != collection.kind:
            raise FieldError("state.settings_.kind", f"{str(collection.kind)!r}, the kind of state.collection_ "
                             f"({collection.value})", shown(settings["kind"]))
        width = check_int(settings["num_features"], "state.settings_.num_features", low=1, high=MAX_NODE_COLUMNS)
        check_str(settings["data_key"], "state.settings_.data_key", max_length=1000)
        columns = check_mapping(state["columns_"], "state.columns_", required=("kept", "num_columns"), optional=())
        fitted = check_int(columns["num_columns"], "state.columns_.num_columns", low=1, high=MAX_NODE_COLUMNS)
        check_ints(columns["kept"], "state.columns_.kept", low=0, high=fitted - 1, length=width, increasing=True)
        normalize = check_mapping(state["normalize_"], "state.normalize_", required=("mean", "std", "std_floor"),
                                  optional=())
        floor = check_number(normalize["std_floor"], "state.normalize_.std_floor", low=FLOAT32_TINY,
                             high=FLOAT32_MAX)
        check_numbers(normalize["mean"], "state.normalize_.mean", low=-FLOAT32_MAX, high=FLOAT32_MAX, length=width)
        check_numbers(normalize["std"], "state.normalize_.std", low=floor, high=FLOAT32_MAX, length=width)
        with torch.device("meta"):
            expected = {k: (tuple(v.shape), "f" if v.is_floating_point() else "iub")
                        for k, v in cfg.make_net().state_dict().items()}

        def weights(value: Any, field: str) -> None:
            check_mapping(value, field, required=expected, optional=())
            for key, (shape, kinds) in expected.items():
                decode_array(value[key], f"{field}.{key}", kinds=kinds, shape=shape, finite=True)

        weights(state["weights_"], "state.weights_")
        if "refit_weights_" in state:
            weights(state["refit_weights_"], "state.refit_weights_")
        seeds = self.train_config(collection).run.seeds
        members = check_list(state.get("members_", []), "state.members_", max_length=seeds - 1)
        for k, member in enumerate(members):
            field = f"state.members_[{k}]"
            check_mapping(member, field, required=("seed", "weights", "best_epoch", "best_metric", "history"),
                          optional=("refit_weights",))
            check_int(member["seed"], f"{field}.seed", low=0)
            weights(member["weights"], f"{field}.weights")
            if "refit_weights" in member:
                weights(member["refit_weights"], f"{field}.refit_weights")
            check_int(member["best_epoch"], f"{field}.best_epoch", low=0)
            check_number(member["best_metric"], f"{field}.best_metric", null=True)
            _check_history(member["history"], f"{field}.history")
        for k, split in enumerate(check_list(state.get("fit_splits_", []), "state.fit_splits_", max_length=3)):
            check_str(split, f"state.fit_splits_[{k}]", choices=[s.value for s in Split])
        for key in ("best_epoch_", "refit_epochs_"):
            if key in state:
                check_int(state[key], f"state.{key}", low=0)
        if "best_metric_" in state:
            check_number(state["best_metric_"], "state.best_metric_", null=True)
        if "history_" in state:
            _check_history(state["history_"], "state.history_")
        if "stopped_" in state:
            check_str(state["stopped_"], "state.stopped_", max_length=1000)
        for key in ("swa_used_", "finetune_used_"):
            if key in state:
                check_bool(state[key], f"state.{key}")

    # -- settings -------------------------------------------------------------------------------------------------

    def train_config(self, of: str | Collection) -> GNNConfig:
        """The settings this model trains a collection (or any collection of a kind, ``"tile"`` or ``"layout"``)
        with: :func:`~models.gnn.train.default_config` (the kind's :data:`~models.gnn.train.DEFAULTS` with the
        collection's :data:`~models.gnn.train.COLLECTION_DEFAULTS`), with :attr:`default_attention` and then every
        hyper-parameter given (not ``None``) in their place; ``num_features`` and ``data_key`` are left for
        :meth:`fit`. Launched on several processes, ``graphs_per_step`` not given is at least their number.

        Raises:
            ValueError: a value a run cannot take (an unknown loss, ``hops=9``, ...).
        """
        if self.config is not None:
            kind = of if of in ("tile", "layout") else Collection(of).kind
            return replace(self.config, kind=str(kind), num_features=0, data_key="")
        defaults = default_config(of)
        given = {"network.attention": self.default_attention, **self.settings}
        if "train.graphs_per_step" not in given:
            given["train.graphs_per_step"] = max(defaults.train.graphs_per_step, distributed.world_size())
        return tree.updated(defaults, given)

    def warm_start(self, collection: Collection) -> Source | None:
        """The saved GNN run this model's fit of ``collection`` starts from (``train.init_from``), loaded and
        checked against the fit's settings (:func:`models.gnn.warm_start.load_source`); ``None`` from scratch.

        Raises:
            ValueError: one line naming the path and why it cannot start this fit (also: it is the run folder
                this fit writes to).
        """
        settings = self.train_config(collection)
        if not settings.train.init_from:
            return None
        source = load_source(settings.train.init_from, settings, Collection(collection), GNNModel)
        if self.runs_dir is not None and source.file.parent.resolve() == run_folder(
                self.runs_dir, self.name, collection).resolve():
            # The fit would move that run aside (its settings differ) and save itself in its place.
            raise ValueError(f"{INIT_KEY} {source.file}: the run folder this fit writes to; fit into another "
                             "runs folder (--runs-dir), or copy the run elsewhere first")
        return source

    def source_digests(self, collection: Collection) -> dict[str, str]:
        """See :meth:`RankingModel.source_digests`: a warm start's model file (``train.init_from``)."""
        value = self.train_config(collection).train.init_from
        return {INIT_KEY: source_digest(value, Collection(collection))} if value else {}

    @classmethod
    def quick_params(cls, collection: Collection) -> dict[str, Any]:
        """The kind's defaults where the collection's are higher (:func:`models.gnn.train.quick_settings`): xla:random's
        32 steps per graph would take ``make submit`` on the demo world past its 5 minutes."""
        return quick_settings(collection)

    def fits_concurrently(self) -> bool:
        """On the CPU and in a single process: a fit's small sparse operations use a second core poorly
        (lab/journal.md, "The two commands"), so two fits on one core each finish sooner. Not on a GPU,
        which concurrent fits would share, nor in a torchrun launch, whose processes already split the work."""
        return resolve_device(self.device).type == "cpu" and distributed.world_size() == 1

    def work_factor(self, collection: Collection) -> float:
        """The training work of ``collection``'s settings relative to its kind's defaults (:data:`DEFAULTS`):
        networks (``seeds``) x steps per graph x epochs, twice that with ``refit`` (a second training of about as
        many epochs). xla:random's defaults (2 networks of 32 steps) make 8."""
        def work(cfg: GNNConfig) -> int:
            return cfg.run.seeds * cfg.train.steps_per_graph * cfg.train.epochs * (2 if cfg.train.refit else 1)

        return work(self.train_config(collection)) / work(default_config(Collection(collection).kind))

    def kind_params(self, kind: str) -> dict[str, Any]:
        return self._filled(kind)

    def resolved_params(self, collection: Collection) -> dict[str, Any]:
        return self._filled(Collection(collection))

    def _filled(self, of: str | Collection) -> dict[str, Any]:
        """Every setting ``of`` (a kind or a collection) is trained with, by ``section.name``."""
        cfg = self.train_config(of)
        return {k: tree.get(cfg, k) for k in tree.leaves(GNNConfig)}

    def _trained_config(self) -> GNNConfig:
        """The tree the fitted network was trained with (``settings_``), built once per fit or load (prediction asks
        for it at every graph)."""
        kept = vars(self).get("_trained")
        if kept is None or kept[0] is not self.settings_:
            kept = self._trained = (self.settings_, tree.from_dict(GNNConfig, self.settings_))
        return kept[1]

    def _pipeline(self) -> BaseTransform:
        return settings_pipeline(self._trained_config())

    # -- fit ------------------------------------------------------------------------------------------------------

    def fit(self, data: CollectionData, *, progress: bool = True, deadline: float | None = None,
            predict_by: float | None = None) -> Self:
        """See :meth:`RankingModel.fit`. With ``predict_by``, each network's training also ends early enough for
        the predictions of the valid and test graphs by then, forecast from its last validation pass
        (:func:`prediction_factor`: the configs predicted over those scored in a pass, times the networks
        trained so far and the overhead of reading and preparing graphs).

        The run folder (``runs_dir/<name>/<collection>``) is held for the whole fit
        (:func:`competition.runlock.hold_run_folder`): a second live fit into it is refused before any work.
        """
        if self.runs_dir is None or not distributed.is_main():
            return self._fit(data, progress=progress, deadline=deadline, predict_by=predict_by)
        with hold_run_folder(run_folder(self.runs_dir, self.name, data.collection)):
            return self._fit(data, progress=progress, deadline=deadline, predict_by=predict_by)

    def _fit(self, data: CollectionData, *, progress: bool, deadline: float | None,
             predict_by: float | None) -> Self:
        collection = data.collection
        kind = collection.kind
        split = data.train.split
        eval_graphs = data.eval if data.eval is not None and data.eval.split != split else None
        eval_split = None if eval_graphs is None else eval_graphs.split
        valid = data.protocol
        settings = self.train_config(collection)
        pipeline = settings_pipeline(settings)
        progress = progress and distributed.is_main()
        source = self.warm_start(collection)  # refused here, before any graph is read

        def training_set(graphs: SplitGraphs) -> ProcessedGraphs:
            """``graphs`` processed for training (deduplicated, ``train_configs`` kept)."""
            return ProcessedGraphs(graphs, pre_transform=Compose([pipeline, DedupConfigs("min")]),
                                   cache_dir=self.cache_dir, max_configs=settings.max_train_configs,
                                   progress=progress)

        train_set = training_set(data.train)
        if not len(train_set):
            raise ValueError(f"no {collection.value} graphs in the {split.value} split ({data.train.folder})")
        datas = _built(train_set)
        valid_datas: list[Data] = []
        valid_files: list[str] = []
        if eval_graphs is not None and len(eval_graphs):
            valid_set = ProcessedGraphs(eval_graphs, pre_transform=pipeline, cache_dir=self.cache_dir,
                                        protocol=valid, progress=progress)
            valid_datas = _built(valid_set)
            valid_files = _files(valid_set)
        if source is None:
            columns = DropConstantColumns().fit(datas)
            normalize = Normalize().fit(columns(d.clone()) for d in datas)
        else:
            # The source's weights were learnt on its columns and normalisation; fitted again on a few graphs of
            # one program, most columns would be constant and dropped.
            width, fitted = int(datas[0].x.shape[1]), int(source.model.columns_["num_columns"])
            if width != fitted:
                raise ValueError(f"{INIT_KEY} {source.file}: fitted on graphs of {fitted} node feature columns after "
                                 f"its feature pipeline, and this fit's give {width} (other feature settings, or "
                                 "another fastslow version)")
            columns = DropConstantColumns.from_state_dict(source.model.columns_)
            normalize = Normalize.from_state_dict(source.model.normalize_)

        def item(data: Data) -> Item:
            data = normalize(columns(data.clone()))
            return Item(data.stem, make_segments(data, settings.train.segment_size), data.config_feat, data.y.double())

        train_items = [item(d) for d in datas]
        # Valid configs are only ever scored: packed into one int64 code per configurable node, 8 bytes instead of
        # 18 (int8) or 72 (float32); memory then grows little with the number of valid graphs.
        valid_items = [it if kind == "tile" else replace(it, config_feat=config_codes(it.config_feat))
                       for it in map(item, valid_datas)]
        if valid_items and valid.indices is not None and eval_graphs is not None:
            # The official protocol counts a repeated listed config once per listing: early stopping does too.
            counts = dict(zip(eval_graphs.stems, eval_graphs.header_rows("config_runtime"), strict=True))
            valid_items = [replace(it, picks=valid.picks(collection, it.key, counts[it.key], eval_graphs.split))
                           for it in valid_items]
        stopping = f"{eval_split.value}:{valid.tag}" if valid_datas and eval_split is not None else "none"
        # A warm start's source by its content: other weights at the same path are another run.
        init_key = [] if source is None else [f"init:{source.digest()}"]
        data_key = _data_key(repr(pipeline), data.train.data_id, str(settings.max_train_configs), stopping,
                             *_files(train_set), *(valid_files if valid_datas else []), *init_key)
        cfg = replace(settings, num_features=int(train_items[0].segments[0].x.shape[1]), data_key=data_key)
        run_dir = None if self.runs_dir is None else run_folder(self.runs_dir, self.name, collection)
        max_seconds = self.max_seconds
        if deadline is not None:
            remaining = max(0.0, deadline - time.monotonic())
            max_seconds = remaining if max_seconds is None else min(max_seconds, remaining)
        end = None if max_seconds is None else time.monotonic() + max_seconds  # the rest get what is left
        factor = (None if predict_by is None or not valid_items
                  else prediction_factor(data, sum(validated_configs(it, settings.train.valid_configs)
                                                for it in valid_items), self.tta))

        def budget(seconds: float | None, networks: int) -> tuple[float | None, Callable[[float], float] | None]:
            """A network's ``max_seconds`` and ``keep_free`` for :func:`train`: ``seconds`` at most, and ending
            early enough to predict with ``networks`` networks by ``predict_by``."""
            if predict_by is None:
                return seconds, None
            horizon = max(0.0, predict_by - time.monotonic())
            cap = horizon if seconds is None else min(seconds, horizon)

            def keep_free(valid_seconds: float) -> float:
                forecast = 0.0 if factor is None else factor * networks * valid_seconds
                return max(horizon - cap, forecast)

            return horizon, keep_free

        def left() -> float | None:
            return None if end is None else max(0.0, end - time.monotonic())

        def fit_member(seed: int, member_dir: Path | None, title: str, seconds: float | None
                       ) -> tuple[TrainResult, TrainResult | None]:
            """One network of the ensemble: the early-stopped run with ``seed`` (``seconds`` at most), and its refit
            (``None`` without one, or when the time budget cut it short)."""
            # The early-stopped run does not depend on refit: it resumes, or is resumed by, the same run without it.
            member = cfg.with_(refit=False, seed=seed)
            limit, keep_free = budget(seconds, seed - settings.train.seed + 1)
            init = None if source is None else source.model.initial_weights(seed - settings.train.seed)
            result = train(member, train_items, valid_items, run_dir=member_dir, device=self.device,
                           progress=progress, max_seconds=limit, keep_free=keep_free, title=title, init=init)
            if not (settings.train.refit and valid_datas and eval_graphs is not None and result.best_epoch >= 1):
                return result, None
            # From scratch (or from the warm start's weights) on the train and eval graphs (the eval split's
            # processed for training as the train split's are, through the same column selection and normalisation)
            # for the best epoch count, without early stopping: the last epoch is kept.
            extra_set = training_set(eval_graphs)
            extra = _built(extra_set)
            refit_cfg = replace(member.with_(epochs=result.best_epoch),
                                data_key=_data_key(data_key, f"refit:{eval_graphs.split.value}", *_files(extra_set)))
            refit = train(refit_cfg, train_items + [item(d) for d in extra], [],
                          run_dir=None if member_dir is None else member_dir / REFIT_FOLDER, device=self.device,
                          progress=progress, max_seconds=left(), title=f"{title} refit", init=init)
            if len(refit.history) < refit_cfg.train.epochs:
                if distributed.is_main():
                    log.warning("%s: the refit on %s + %s ran out of time after %d of %d epochs; only the "
                                "early-stopped weights are kept", title, split.value, eval_graphs.split.value,
                                len(refit.history), refit_cfg.train.epochs)
                return result, None
            return result, refit

        title = f"{self.name} {collection.value}"
        result, refit = fit_member(settings.train.seed, run_dir, title, max_seconds)
        # The seed ensemble's other networks, each trained as the first with the next seed, in a run folder of its
        # own; one the time budget cuts short (or its refit, where the first has one) is left out, and so are the
        # rest.
        members: list[dict[str, Any]] = []
        for seed in range(settings.train.seed + 1, settings.train.seed + settings.run.seeds):
            other, other_refit = fit_member(seed, None if run_dir is None else member_folder(run_dir, seed),
                                            f"{title} seed {seed}", left())
            if not finished(other.stopped) or (refit is not None and other_refit is None):
                if distributed.is_main():
                    log.warning("%s: the time budget ran out while training the seed ensemble's network with seed "
                                "%d; the ensemble keeps %d of its %d networks", title, seed, len(members) + 1,
                                settings.run.seeds)
                break
            members.append({"seed": seed, "weights": _arrays(other.state), "best_epoch": other.best_epoch,
                            "best_metric": other.best_metric, "history": other.history,
                            **({} if other_refit is None else {"refit_weights": _arrays(other_refit.state)})})
        self.collection_ = collection
        self.settings_ = stored_settings(cfg)
        self.weights_ = _arrays(result.state)
        self.columns_ = columns.state_dict()
        self.normalize_ = normalize.state_dict()
        self.best_epoch_ = result.best_epoch
        self.best_metric_ = result.best_metric
        self.history_ = result.history
        self.stopped_ = result.stopped
        self.swa_used_ = result.swa_used
        self.finetune_used_ = result.finetune_used
        self.fit_splits_ = [split.value] + ([eval_split.value] if eval_split is not None else [])
        for name in ("refit_weights_", "refit_epochs_", "members_"):  # a previous fit's
            vars(self).pop(name, None)
        if refit is not None:
            self.refit_weights_ = _arrays(refit.state)
            self.refit_epochs_ = len(refit.history)
        if members:
            self.members_ = members
        self._nets = {}
        return self

    # -- predict --------------------------------------------------------------------------------------------------

    def network(self, refit: bool = False, member: int = 0) -> RankNet:
        """The early-stopped network, or with ``refit`` the refitted one (each built from its stored weights on
        first use), in eval mode on the chosen device; ``member`` k >= 1 is the seed ensemble's k-th other network
        (:attr:`members_`).

        Raises:
            NotFittedError: not fitted, ``refit`` asked of a model without refitted weights, or a member it does
                not have.
        """
        if not hasattr(self, "weights_"):
            raise NotFittedError(f"{type(self).__name__} is not fitted: call fit() or load a saved model")
        if not 0 <= member < self.num_networks:
            raise NotFittedError(f"{type(self).__name__} has {self.num_networks} network(s) in its seed ensemble; "
                                 f"there is no member {member}")
        if refit and not hasattr(self, "refit_weights_"):
            raise NotFittedError(f"{type(self).__name__} has no refitted network: fit with refit=True and an eval "
                                 "split")
        nets = vars(self).setdefault("_nets", {})
        if (member, refit) not in nets:
            cfg = self._trained_config()
            net = cfg.make_net()
            net.load_state_dict(_tensors(self._networks()[member]["refit_weights" if refit else "weights"]))
            nets[member, refit] = net.to(resolve_device(self.device)).eval()
        return nets[member, refit]

    @property
    def num_networks(self) -> int:
        """The networks that score each graph: 1, or the seed ensemble's networks the fit kept (``seeds`` or fewer,
        when the time budget cut its training short)."""
        return 1 + len(getattr(self, "members_", ()))

    def _networks(self) -> list[dict[str, Any]]:
        """Every network's ``seed``, ``weights`` and (where there is one) ``refit_weights``, the first's from the
        model's own attributes, then :attr:`members_`."""
        first = {"seed": self._trained_config().train.seed, "weights": self.weights_}
        if hasattr(self, "refit_weights_"):
            first["refit_weights"] = self.refit_weights_
        return [first, *getattr(self, "members_", ())]

    def initial_weights(self, network: int) -> dict[str, torch.Tensor]:
        """The weights a warm-started fit's network ``network`` starts from (this model as its ``train.init_from``):
        the early-stopped weights of this model's network ``network`` mod :attr:`num_networks`, so that a seed
        ensemble starts from one, and from as many networks as this model has."""
        return _tensors(self._networks()[network % self.num_networks]["weights"])

    def histories(self) -> list[list[dict[str, Any]]]:
        """Every network's epoch history (:attr:`history_` for the first, then each of :attr:`members_`'), in the
        order the networks were trained."""
        return [self.history_, *(m["history"] for m in getattr(self, "members_", ()))]

    def uses_refit(self, graph: TileGraph | LayoutGraph) -> bool:
        """Whether the refitted network scores ``graph``: when there is one and the graph's split is none the
        early-stopped network saw (:attr:`fit_splits_`: test graphs, or graphs of no known split)."""
        return hasattr(self, "refit_weights_") and graph.split not in getattr(self, "fit_splits_", ())

    def prepare(self, graph: TileGraph | LayoutGraph) -> Data:
        """The graph through the feature pipeline and the fitted normalisation, without layout configs."""
        kind = self.settings_["kind"]
        rows = None if kind == "tile" else np.zeros(0, dtype=np.int64)
        data = graph_to_data(graph, rows)
        data = self._pipeline()(data)
        columns = DropConstantColumns.from_state_dict(self.columns_)
        normalize = Normalize.from_state_dict(self.normalize_)
        return normalize(columns(data))

    def predict(self, graph: TileGraph | LayoutGraph) -> npt.NDArray[np.float64]:
        """Scores of every config of ``graph`` (lower = predicted faster), by the refitted network when there is one
        and the graph's split is not one the early-stopped network saw (:meth:`uses_refit`), else by the
        early-stopped one, so scores on the valid split stay honest. A seed ensemble (:attr:`num_networks` > 1)
        scores with each of its networks so chosen and returns the mean of their rank-normalised scores
        (:func:`models.ensemble.normalize_scores`: each network's ranks scaled to [0, 1]).

        Layout: the graph goes through :meth:`prepare` once, a :class:`models.gnn.infer.LayoutPlan` is built once
        per network, and the configs are streamed from disk ``PREDICT_BLOCK`` at a time as packed codes (the
        attention orderings mix configs within a block), each block scored by every network. On CUDA the network
        runs under bfloat16 autocast.
        """
        from models.ensemble import normalize_scores

        refit = self.uses_refit(graph)
        nets = [self.network(refit=refit, member=k) for k in range(self.num_networks)]
        seeds = [m["seed"] for m in self._networks()]
        device = next(nets[0].parameters()).device
        data = self.prepare(graph)
        s = self._trained_config()
        segments = [seg.to(device) for seg in make_segments(data, s.train.segment_size)]
        common = {"batch": s.predict.predict_batch, "orderings": self.tta, "device": device}
        if isinstance(graph, TileGraph):
            outs = [predict_scores(net, segments, data.config_feat, seed=seed, **common)
                    for net, seed in zip(nets, seeds, strict=True)]
        else:
            plans = [LayoutPlan(net, segments) for net in nets]
            references: list[list[ReferenceContext] | None] = []
            outs = [np.empty(graph.num_configs) for _ in nets]
            for start, codes in iter_code_blocks(graph, PREDICT_BLOCK):
                if start == 0:
                    references = [self._reference_sets(graph.num_configs, codes, plan, seed)
                                  for plan, seed in zip(plans, seeds, strict=True)]
                for net, plan, reference, seed, out in zip(nets, plans, references, seeds, outs, strict=True):
                    out[start:start + codes.shape[0]] = predict_scores(
                        net, segments, codes, seed=seed + start, plan=plan, context=s.predict.predict_context,
                        reference=reference, **common)
        if len(outs) == 1:
            return outs[0]
        # A network whose scores are not finite leaves the ensemble none: its scores are returned as they are, for
        # the caller's check (competition.submission_format.finite_scores) to refuse them naming the model and the graph.
        broken = next((out for out in outs if not np.isfinite(out).all()), None)
        if broken is not None:
            return broken
        return np.mean([normalize_scores(out) for out in outs], axis=0)

    def _reference_sets(self, num_configs: int, first: torch.Tensor, plan: LayoutPlan, seed: int
                        ) -> list[ReferenceContext] | None:
        """The ``tta`` reference sets of a layout graph of ``num_configs`` configs for the network of ``plan``
        (drawn with ``seed``), taken from the codes of its first block ``first``
        (:data:`models.gnn.infer.REFERENCE_WINDOW`); ``None`` unless attention compares configs with a reference
        and the graph has more configs than one batch."""
        s = self._trained_config()
        attention = any(w.attention for w in plan.blocks)
        if not attention or s.predict.predict_context != "reference" or num_configs <= s.predict.predict_batch:
            return None
        return reference_sets(plan, first, num_configs, batch=s.predict.predict_batch, drawn=s.predict.reference_configs,
                              seed=seed, draws=self.tta)


PREDICT_OVERHEAD = 1.6
"""A prediction's seconds per config over a validation pass's: each graph read from its file and prepared on top of
the scoring: the largest ratio seen on full-scale world parts, the tile GNN's beside another fit (lab/journal.md,
"Collections fitted at once, at full scale" and "figures moved out of docstrings"). The largest is
kept: a forecast too short overruns the budget."""


def prediction_factor(data: CollectionData, validated: int, tta: int) -> float:
    """Seconds one network takes to predict the valid and test graphs of ``data`` (the configs its valid protocol
    scores, every test config) per second of a validation pass over ``validated`` configs: the count of configs
    predicted over ``validated``, times ``tta`` and :data:`PREDICT_OVERHEAD`. Config counts come from the npz
    headers."""
    predicted = 0
    for graphs in data.predicted:
        for stem, count in zip(graphs.stems, graphs.header_rows("config_runtime"), strict=True):
            chosen = data.protocol.configs(data.collection, stem, count, graphs.split)
            predicted += count if chosen is None else len(chosen)
    return PREDICT_OVERHEAD * max(1, tta) * predicted / max(1, validated)


def _data_key(*parts: str) -> str:
    """16 hex digits of the SHA-256 of ``parts``, one a line: a run's ``data_key``."""
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def _files(graphs: ProcessedGraphs) -> list[str]:
    """Each source file of ``graphs`` as ``<stem>:<SHA-256 of its bytes>``, sorted: the data in a run's ``data_key``,
    so a run whose data changed (a file's content, even at the same size and times) starts afresh instead of resuming
    or returning the weights learnt from the old data."""
    return sorted(f"{s.stem}:{s.sha256}" for s in graphs.sources)


def _check_history(value: Any, field: str) -> None:
    """A saved per-epoch history: a list of objects of numbers (``null`` for a NaN)."""
    for k, row in enumerate(check_list(value, field, max_length=MAX_EPOCHS)):
        for key, number in check_mapping(row, f"{field}[{k}]").items():
            check_number(number, f"{field}[{k}].{key}", null=True)


def _arrays(state: dict[str, torch.Tensor]) -> dict[str, npt.NDArray[Any]]:
    """A network's weights as stored with the model: name to numpy array, floating point as float32."""
    return {k: v.float().numpy() if v.is_floating_point() else v.numpy() for k, v in state.items()}


def _tensors(weights: Mapping[str, Any]) -> dict[str, torch.Tensor]:
    """A network's weights as stored with the model (:func:`_arrays`, or lists in a file just loaded) as tensors."""
    return {k: torch.as_tensor(np.asarray(v)) for k, v in weights.items()}


def _built(dataset: ProcessedGraphs) -> list[Data]:
    """Every graph of ``dataset``, its cache built first: launched on several processes, by rank 0 while the others
    wait (:func:`models.gnn.distributed.build_once`), so no two processes ever write the same cache."""

    def read() -> list[Data]:
        return [dataset[i] for i in range(len(dataset))]

    def build() -> list[Data]:
        dataset.build()
        return read()  # rank 0 reads every file before the others do: it alone sets aside and rebuilds a bad one

    return distributed.build_once(build, read, ready=lambda: all(p.is_file() for p in dataset.paths))


class GNNAttentionModel(GNNModel):
    """:class:`GNNModel` with cross-configuration attention on by default."""

    name: ClassVar[str] = "gnn-attn"
    default_attention: ClassVar[bool] = True
