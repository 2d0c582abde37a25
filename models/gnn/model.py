"""The GNN rankers as :class:`models.base.RankingModel` s: ``gnn`` (the TpuGraphs baseline with bidirectional SAGE)
and ``gnn-attn`` (the same with cross-configuration attention).

:meth:`GNNModel.fit` builds the feature pipeline's disk cache for the train and valid splits, fits the column
selection and normalisation on the train graphs (stored with the model), trains with :func:`models.gnn.train.train`
(early stopping on the valid split), and keeps the best weights. :meth:`GNNModel.predict` runs the same pipeline on
one graph and streams a layout graph's configs block by block, so a 100,000-config graph is never in memory whole.

Hyper-parameters left at ``None`` take the collection's default from :data:`DEFAULTS` (sized to train all five
collections of the demo world on a 2-core CPU within the ``make submit`` budget).
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any, ClassVar, Self

import numpy as np
import numpy.typing as npt
import torch
from torch_geometric.data import Data
from torch_geometric.transforms import BaseTransform, Compose

from competition.collections import Collection, Split
from competition.protocol import DEFAULT_PROTOCOL, ValidProtocol
from competition.reader import DataRoot, LayoutGraph, TileGraph, list_graphs
from features.cache import ProcessedGraphs, collection_slug
from features.data import graph_to_data
from features.transforms import (
    DedupConfigs,
    DropConstantColumns,
    LogTransform,
    Normalize,
    OpcodeGroupFeatures,
    PadLayoutMinusOne,
    PruneToConfigurable,
    ShapeAlignmentFeatures,
)
from models.base import NotFittedError, RankingModel
from models.gnn.infer import (
    DEFAULT_PREDICT_CONTEXT,
    DEFAULT_REFERENCE_CONFIGS,
    DEFAULT_TTA,
    PREDICT_CONTEXTS,
    REFERENCE_WINDOW,
    LayoutPlan,
    ReferenceContext,
    config_codes,
    iter_code_blocks,
    reference_rows,
)
from models.gnn.net import RankNet, make_segments
from models.gnn.train import Item, TrainConfig, predict_scores, resolve_device, train

DEFAULTS: dict[str, dict[str, Any]] = {
    "tile": {"hidden": 64, "layers": 3, "lr": 1e-3, "loss": "listmle", "epochs": 6, "configs_per_graph": 32,
             "steps_per_graph": 1, "hops": None, "train_configs": None, "patience": 3},
    "layout": {"hidden": 32, "layers": 3, "lr": 1e-2, "loss": "hinge", "epochs": 10, "configs_per_graph": 32,
               "steps_per_graph": 4, "hops": 1, "train_configs": 1000, "patience": 4},
}
"""Per-kind defaults of the hyper-parameters left at ``None``."""

PREDICT_BLOCK = REFERENCE_WINDOW
"""Layout configs read from disk and scored per block (the first block holds the configs reference sets are drawn
from)."""


def feature_pipeline(kind: str, hops: int | None, pad: bool) -> BaseTransform:
    """The per-graph transforms of the GNNs (before the fitted column selection and normalisation).

    Layout graphs are pruned to the configurable nodes and their ``hops``-hop neighbourhood (``None``: whole graph);
    layouts are padded with -1 when ``pad``; heavy-tailed columns are log-transformed; opcode-group and TPU
    alignment columns are appended.
    """
    steps: list[BaseTransform] = []
    if kind == "layout" and hops is not None:
        steps.append(PruneToConfigurable(hops=hops))
    if pad:
        steps.append(PadLayoutMinusOne())
    steps += [LogTransform(), OpcodeGroupFeatures(), ShapeAlignmentFeatures()]
    return Compose(steps)


class GNNModel(RankingModel):
    """A GNN ranker, one per collection.

    Args:
        attention: cross-configuration attention in every layer.
        hidden: channels (default per kind).
        layers: message-passing layers.
        bidirectional: message passing producer-to-consumer and back, with separate weights.
        join: tile only: config joined ``"early"`` (to every node) or ``"late"`` (after pooling).
        loss: ``hinge``, ``listmle`` or ``margin``.
        epochs: training epochs (at most; early stopping may end sooner).
        configs_per_graph: configs sampled per graph per step.
        steps_per_graph: training steps per graph per epoch (each with freshly sampled configs).
        lr: AdamW peak learning rate (cosine schedule).
        weight_decay: AdamW weight decay.
        dropout: dropout probability.
        patience: epochs without valid gain before stopping.
        hops: layout pruning depth (``None`` keeps the whole graph).
        pad: -1 padding of layouts and tile bounds.
        segment_size: Graph Segment Training with segments of this many nodes (``None``: full-graph training). The
            historical table holds ``hidden`` floats per config per segment of every graph, so keep
            ``train_configs`` set (1000 configs x 20 segments x 32 channels is 2.5 MB per graph).
        backprop_segments: segments backpropagated per step under GST.
        keep_prob: GST segment-dropout keep probability for stale segments.
        train_configs: configs per training graph kept in the cache (evenly spaced; ``None`` for all).
        predict_batch: configs per batch at prediction (exactly this many when attention is on).
        tta: with attention, random orderings (``predict_context="batches"``) or reference sets
            (``"reference"``) averaged at prediction.
        predict_context: with attention, what each layout config is compared with at prediction
            (:data:`models.gnn.infer.PREDICT_CONTEXTS`): ``"reference"``, one fixed seeded set of
            ``predict_batch - 1`` configs of the graph, so every config is scored in the same context (one pass,
            deduplicated like a model without attention); ``"batches"``, random batches of ``predict_batch``.
        reference_configs: configs drawn per reference set (``None``: ``predict_batch - 1``); more than
            ``predict_batch - 1`` estimate the same context with less variance (see
            :class:`models.gnn.infer.ReferenceContext`).
        seed: seeds initialisation and sampling.
        device: ``auto`` (CUDA if available), ``cpu`` or ``cuda``.
        runs_dir: training runs (checkpoints, curves) go to ``runs_dir/<name>/<collection>``, which holds the
            latest run; a run with other settings found there is moved into a subfolder named by its settings hash
            (:func:`models.gnn.train.settings_hash`) and brought back when those settings train again. ``None``
            keeps none.
        cache_dir: the processed-graph cache.
        max_seconds: a training time cap per collection (``None``: none).

    Attributes:
        collection_: the collection fitted on.
        settings_: the resolved training settings (:class:`models.gnn.train.TrainConfig` as a dict).
        weights_: the network's weights, name to array.
        columns_: the fitted column selection (``DropConstantColumns`` state).
        normalize_: the fitted normalisation (``Normalize`` state).
        best_epoch_, best_metric_: when the kept weights were reached, and their valid metric.
        history_: per-epoch ``epoch, train_loss, valid_metric, lr, seconds``.
    """

    name: ClassVar[str] = "gnn"
    default_attention: ClassVar[bool] = False

    def __init__(self, attention: bool | None = None, hidden: int | None = None, layers: int | None = None,
                 bidirectional: bool = True, join: str = "early", loss: str | None = None,
                 epochs: int | None = None, configs_per_graph: int | None = None,
                 steps_per_graph: int | None = None, lr: float | None = None, weight_decay: float = 1e-5,
                 dropout: float = 0.0, patience: int | None = None,
                 hops: int | str | None = "default", pad: bool = True, segment_size: int | None = None,
                 backprop_segments: int = 1, keep_prob: float = 0.5, train_configs: int | str | None = "default",
                 predict_batch: int = 128, tta: int = DEFAULT_TTA,
                 predict_context: str = DEFAULT_PREDICT_CONTEXT,
                 reference_configs: int | None = DEFAULT_REFERENCE_CONFIGS, seed: int = 0,
                 device: str = "auto", runs_dir: str | None = "runs", cache_dir: str = ".cache/processed",
                 max_seconds: float | None = None) -> None:
        self.attention = attention
        self.hidden = hidden
        self.layers = layers
        self.bidirectional = bidirectional
        self.join = join
        self.loss = loss
        self.epochs = epochs
        self.configs_per_graph = configs_per_graph
        self.steps_per_graph = steps_per_graph
        self.lr = lr
        self.weight_decay = weight_decay
        self.dropout = dropout
        self.patience = patience
        self.hops = hops
        self.pad = pad
        self.segment_size = segment_size
        self.backprop_segments = backprop_segments
        self.keep_prob = keep_prob
        self.train_configs = train_configs
        self.predict_batch = predict_batch
        self.tta = tta
        if predict_context not in PREDICT_CONTEXTS:
            raise ValueError(f"predict_context must be one of {', '.join(PREDICT_CONTEXTS)}; got {predict_context!r}")
        self.predict_context = predict_context
        self.reference_configs = reference_configs
        self.seed = seed
        self.device = device
        self.runs_dir = runs_dir
        self.cache_dir = cache_dir
        self.max_seconds = max_seconds

    # -- settings -------------------------------------------------------------------------------------------------

    def _resolved(self, kind: str) -> dict[str, Any]:
        """Hyper-parameters with the kind's defaults filled in for those left at ``None`` / ``"default"``."""
        out = dict(DEFAULTS[kind])
        for key in ("hidden", "layers", "lr", "loss", "epochs", "configs_per_graph", "steps_per_graph", "patience"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        for key in ("hops", "train_configs"):
            if getattr(self, key) != "default":
                out[key] = getattr(self, key)
        out["attention"] = self.default_attention if self.attention is None else bool(self.attention)
        return out

    def _pipeline(self) -> BaseTransform:
        s = self.resolved_
        return feature_pipeline(self.settings_["kind"], s["hops"], self.pad)

    # -- fit ------------------------------------------------------------------------------------------------------

    def fit(self, root: DataRoot, collection: Collection, *, split: Split = Split.TRAIN,
            progress: bool = True, valid: ValidProtocol = DEFAULT_PROTOCOL, deadline: float | None = None) -> Self:
        collection = Collection(collection)
        kind = "tile" if collection.is_tile else "layout"
        r = self._resolved(kind)
        pipeline = feature_pipeline(kind, r["hops"], self.pad)
        train_set = ProcessedGraphs(root, collection, split, pre_transform=Compose([pipeline, DedupConfigs("min")]),
                                    cache_dir=self.cache_dir, max_configs=r["train_configs"], progress=progress)
        train_set.build()
        datas = [train_set[i] for i in range(len(train_set))]
        if not datas:
            raise ValueError(f"no {collection.value} graphs in the {split.value} split of {root.root}")
        valid_datas: list[Data] = []
        if split != Split.VALID and list_graphs(root, collection, Split.VALID):
            valid_set = ProcessedGraphs(root, collection, Split.VALID, pre_transform=pipeline,
                                        cache_dir=self.cache_dir, protocol=valid, progress=progress)
            valid_set.build()
            valid_datas = [valid_set[i] for i in range(len(valid_set))]
        columns = DropConstantColumns().fit(datas)
        normalize = Normalize().fit(columns(d.clone()) for d in datas)

        def item(data: Data) -> Item:
            data = normalize(columns(data.clone()))
            return Item(data.stem, make_segments(data, self.segment_size), data.config_feat, data.y.double())

        train_items = [item(d) for d in datas]
        # Valid configs are only ever scored: packed into one int64 code per configurable node, 8 bytes instead of
        # 18 (int8) or 72 (float32); memory then grows little with the number of valid graphs.
        valid_items = [it if kind == "tile" else replace(it, config_feat=config_codes(it.config_feat))
                       for it in map(item, valid_datas)]
        data_key = hashlib.sha256(("\n".join([repr(pipeline), str(root.root), str(r["train_configs"]), valid.tag,
                                              *sorted(d.stem for d in datas)])).encode()).hexdigest()[:16]
        cfg = TrainConfig(kind=kind, num_features=int(train_items[0].segments[0].x.shape[1]), hidden=r["hidden"],
                          layers=r["layers"], bidirectional=self.bidirectional, attention=r["attention"],
                          join=self.join, dropout=self.dropout, loss=r["loss"], epochs=r["epochs"],
                          configs_per_graph=r["configs_per_graph"],
                          steps_per_graph=r["steps_per_graph"], lr=r["lr"], weight_decay=self.weight_decay,
                          patience=r["patience"], segment_size=self.segment_size,
                          backprop_segments=self.backprop_segments, keep_prob=self.keep_prob,
                          predict_batch=self.predict_batch, predict_context=self.predict_context,
                          reference_configs=self.reference_configs, seed=self.seed, data_key=data_key)
        run_dir = None if self.runs_dir is None else Path(self.runs_dir) / self.name / collection_slug(collection)
        max_seconds = self.max_seconds
        if deadline is not None:
            left = max(0.0, deadline - time.monotonic())
            max_seconds = left if max_seconds is None else min(max_seconds, left)
        result = train(cfg, train_items, valid_items, run_dir=run_dir, device=self.device, progress=progress,
                       max_seconds=max_seconds, title=f"{self.name} {collection.value}")
        self.collection_ = collection
        self.resolved_ = r
        self.settings_ = asdict(cfg)
        self.weights_ = {k: v.float().numpy() if v.is_floating_point() else v.numpy()
                         for k, v in result.state.items()}
        self.columns_ = columns.state_dict()
        self.normalize_ = normalize.state_dict()
        self.best_epoch_ = result.best_epoch
        self.best_metric_ = result.best_metric
        self.history_ = result.history
        self.stopped_ = result.stopped
        self._net = None
        return self

    # -- predict --------------------------------------------------------------------------------------------------

    def network(self) -> RankNet:
        """The trained network (built from the stored weights on first use), in eval mode on the chosen device."""
        if not hasattr(self, "weights_"):
            raise NotFittedError(f"{type(self).__name__} is not fitted: call fit() or load a saved model")
        if getattr(self, "_net", None) is None:
            cfg = TrainConfig(**self.settings_)
            net = cfg.make_net()
            net.load_state_dict({k: torch.as_tensor(np.asarray(v)) for k, v in self.weights_.items()})
            self._net = net.to(resolve_device(self.device)).eval()
        return self._net

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
        """Scores of every config of ``graph`` (lower = predicted faster).

        Layout: the graph goes through :meth:`prepare` once, a :class:`models.gnn.infer.LayoutPlan` is built once,
        and the configs are streamed from disk ``PREDICT_BLOCK`` at a time as packed codes (the attention
        orderings mix configs within a block). On CUDA the network runs under bfloat16 autocast.
        """
        net = self.network()
        device = next(net.parameters()).device
        data = self.prepare(graph)
        segments = [s.to(device) for s in make_segments(data, self.settings_["segment_size"])]
        common = {"batch": self.predict_batch, "orderings": self.tta, "device": device}
        if isinstance(graph, TileGraph):
            return predict_scores(net, segments, data.config_feat, seed=self.seed, **common)
        plan = LayoutPlan(net, segments)
        reference: list[ReferenceContext] | None = None
        out = np.empty(graph.num_configs)
        for start, codes in iter_code_blocks(graph, PREDICT_BLOCK):
            if start == 0:
                reference = self._reference_sets(graph.num_configs, codes, plan, device)
            out[start:start + codes.shape[0]] = predict_scores(net, segments, codes, seed=self.seed + start,
                                                               plan=plan, context=self.predict_context,
                                                               reference=reference, **common)
        return out

    def _reference_sets(self, num_configs: int, first: torch.Tensor, plan: LayoutPlan, device: torch.device
                        ) -> list[ReferenceContext] | None:
        """The ``tta`` reference sets of a layout graph of ``num_configs`` configs, taken from the codes of its first
        block ``first`` (:data:`models.gnn.infer.REFERENCE_WINDOW`); ``None`` unless attention compares configs
        with a reference and the graph has more configs than one batch."""
        attention = any(w.attention for w in plan.blocks)
        if not attention or self.predict_context != "reference" or num_configs <= self.predict_batch:
            return None
        drawn = self.reference_configs or self.predict_batch - 1
        return [ReferenceContext(plan, first[torch.from_numpy(reference_rows(num_configs, drawn, self.seed, d))]
                                 .to(device), self.predict_batch - 1) for d in range(max(self.tta, 1))]


class GNNAttentionModel(GNNModel):
    """:class:`GNNModel` with cross-configuration attention on by default."""

    name: ClassVar[str] = "gnn-attn"
    default_attention: ClassVar[bool] = True
