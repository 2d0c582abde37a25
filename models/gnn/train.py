"""The training loop of the GNN rankers: AdamW, a cosine schedule, early stopping on the valid metric, a checkpoint
every epoch with resume, seeded sampling, and learning curves as CSV and PNG.

A run lives in one folder (``run_dir``)::

    settings.json    the run's settings (:class:`TrainConfig` as a dict), written when the run starts
    checkpoint.pt    everything needed to resume: settings, weights, optimiser, schedule, RNG states, history, best
    curves.csv       epoch, train_loss, valid_metric, lr, seconds (since the run began), valid_seconds (of
                     them, this epoch's validation); one row per finished epoch
    curves.png       the same, plotted (when the run ends, and every PLOT_SECONDS before)
    model.json       the fitted model, where the caller saves it there (``fastslow train`` does)
    <hash>/          earlier runs with other settings, one folder per settings hash (:func:`settings_hash`)

Re-running with the same settings resumes after the last finished epoch (a finished run returns at once). A run
with other settings never overwrites one: the files above are first moved into ``run_dir/<hash of their
settings>/``, and a later run with those settings moves them back and resumes them. So ``run_dir`` itself always
holds the latest run. The checkpoint holds only tensors and plain values and is read with
``torch.load(weights_only=True)``; one that cannot be read that way or does not fit the settings it names is
renamed to ``checkpoint.pt.corrupt``, named in a warning, and training starts afresh.

The valid metric is the collection's: mean Kendall tau (layout) or mean tile score (tile) over the valid graphs, each
:func:`competition.metrics.graph_score` of the predicted scores (ties broken by config index, as in a submission).

Each optimiser step trains on ``graphs_per_step`` graphs (*slots*) and averages their losses. Launched by torchrun on
several processes (:mod:`models.gnn.distributed`), each rank trains its share of every step's slots and
``DistributedDataParallel`` all-reduces the gradients; rank 0 alone reads and writes the run folder. A step
computes the same whoever runs each slot: with one graph per step the slot draws from the run's generators (as
training always did); with more, every slot draws its configs, GST segments and dropout from its own generators,
seeded by numbers the run's generator draws on every rank; and GST's history table is read as it was when the step
began and updated when it ends, with every slot's writes in slot order on every rank. So N processes of
``graphs_per_step`` G give the weights of one process of G, within float rounding.
"""

from __future__ import annotations

import contextlib
import copy
import csv
import hashlib
import io
import json
import logging
import math
import os
import random
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from tqdm.auto import tqdm

from competition.budget import format_seconds
from competition.collections import Collection
from competition.metrics import graph_score
from competition.npzio import atomic_path, atomic_write_stream, atomic_write_text, failures_named
from features.cache import UnusableFileError, load_plain, set_aside
from models.gnn import distributed
from models.gnn.gst import HistoryTable, gst_scores
from models.gnn.infer import (
    DEFAULT_PREDICT_CONTEXT,
    DEFAULT_REFERENCE_CONFIGS,
    PREDICT_CONTEXTS,
    LayoutPlan,
    LayoutStructure,
    ReferenceContext,
    config_codes,
    dedup_scores,
    reference_sets,
)
from models.gnn.losses import LOSSES, LossFn, loss_function
from models.gnn.net import RankNet, Segment

CHECKPOINT = "checkpoint.pt"
CURVES_CSV = "curves.csv"
CURVES_PNG = "curves.png"
MODEL_FILE = "model.json"
SETTINGS_FILE = "settings.json"
PLOT_SECONDS = 30.0
"""``curves.csv`` is written after every epoch, ``curves.png`` when the run ends and otherwise at most this often
(drawing it costs as much as several training steps of a small graph: lab/journal.md, "figures
moved out of docstrings")."""
RUN_FILES = (SETTINGS_FILE, CURVES_CSV, CURVES_PNG, MODEL_FILE, CHECKPOINT)
"""The files of one run, moved together; the checkpoint last, so an interrupted move is redone by the next run."""
CURVE_COLUMNS = ("epoch", "train_loss", "valid_metric", "lr", "seconds", "valid_seconds")
_ADDED_CURVE_COLUMNS = ("valid_seconds",)
"""Columns newer than some checkpoints: an older checkpoint's rows get NaN there instead of being refused."""
_CHECKPOINT_TYPES: dict[str, type | tuple[type, ...]] = {
    "settings": dict, "epoch": int, "model": dict, "optimizer": dict, "scheduler": dict, "rng": dict,
    "history": list, "best_state": dict, "best_metric": (int, float), "best_epoch": int, "bad_epochs": int,
    "stopped": str, "swa_states": list, "swa_metric": (float, type(None)), "swa_used": bool,
    "finetune_state": dict, "finetune_metric": (float, type(None)), "finetune_used": bool}

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TrainConfig:
    """Every setting of one GNN training run, frozen: a changed value starts the run over instead of resuming it, and
    :func:`settings_hash` of it names the folder the run is moved to when a run with other settings takes its place.

    The GNN hyper-parameters' defaults live here and nowhere else: the fields without a default differ by kind of
    collection and come from :data:`DEFAULTS`; the others are the same for both kinds.
    :class:`models.gnn.model.GNNModel` builds a run's settings from the kind's :data:`DEFAULTS` entry with
    ``dataclasses.replace`` (its hyper-parameters left at ``None`` keep these values), and :meth:`make_net` passes
    them to :class:`RankNet`, which has no defaults of its own.

    ``hops="all"`` keeps whole graphs (no pruning), ``train_configs="all"`` every config of a training graph.
    ``graphs_per_step`` counts the graphs of one optimiser step over all processes (see the module's docstring).
    ``num_features`` and ``data_key`` come from the data (set by :meth:`GNNModel.fit`).
    """

    kind: str
    hidden: int
    layers: int
    lr: float
    loss: str
    epochs: int
    configs_per_graph: int
    steps_per_graph: int
    patience: int
    hops: int | Literal["all"]
    train_configs: int | Literal["all"]
    opcode_dim: int = 16
    bidirectional: bool = True
    attention: bool = False
    join: str = "early"
    dropout: float = 0.0
    weight_decay: float = 1e-5
    pair_tolerance: float = 0.0  # pairwise losses: pairs whose runtimes differ by at most this fraction count as ties
    pad: bool = True
    segment_size: int | None = None  # None: full-graph training (no Graph Segment Training)
    backprop_segments: int = 1
    keep_prob: float = 0.5
    graphs_per_step: int = 1  # graphs per optimiser step, over all processes; their losses are averaged
    predict_batch: int = 128
    predict_context: str = DEFAULT_PREDICT_CONTEXT
    reference_configs: int = DEFAULT_REFERENCE_CONFIGS
    dim_tokens: bool = False  # layout: each config slot also carries the size features of the dimension it names
    swa_epochs: int = 0  # average the weights of the last this-many epochs (0: off)
    refit: bool = False  # after early stopping, train again on train + valid for the test split's predictions
    seeds: int = 1  # a seed ensemble: this many networks (seeds seed, seed+1, ...), their rank-normalised scores averaged
    gst_finetune_epochs: int = 0  # GST: epochs fine-tuning the head on every segment's fresh embeddings (0: off)
    seed: int = 0
    num_features: int = 0  # node feature columns after the feature pipeline
    data_key: str = ""  # identifies the training data (pipeline hash and graphs), so other data starts over

    def __post_init__(self) -> None:
        choices = {"kind": ("tile", "layout"), "join": ("early", "late"), "loss": tuple(LOSSES),
                   "predict_context": PREDICT_CONTEXTS}
        for name, allowed in choices.items():
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name} must be one of {', '.join(allowed)}; got {getattr(self, name)!r}")
        if self.hops != "all" and not (isinstance(self.hops, int) and 1 <= self.hops <= 5):
            raise ValueError(f"hops must be 1 to 5 or 'all' (whole graphs); got {self.hops!r}")
        if self.train_configs != "all" and not (isinstance(self.train_configs, int) and self.train_configs >= 1):
            raise ValueError(f"train_configs must be a positive count or 'all'; got {self.train_configs!r}")
        if not (isinstance(self.graphs_per_step, int) and self.graphs_per_step >= 1):
            raise ValueError(f"graphs_per_step must be a positive count; got {self.graphs_per_step!r}")
        if not (isinstance(self.swa_epochs, int) and self.swa_epochs >= 0):
            raise ValueError(f"swa_epochs must be a count of epochs, 0 for no weight averaging; got "
                             f"{self.swa_epochs!r}")
        if not (isinstance(self.seeds, int) and self.seeds >= 1):
            raise ValueError(f"seeds must be a positive count of networks, 1 for no seed ensemble; got {self.seeds!r}")
        if not (isinstance(self.gst_finetune_epochs, int) and self.gst_finetune_epochs >= 0):
            raise ValueError(f"gst_finetune_epochs must be a count of epochs, 0 for no head fine-tuning; got "
                             f"{self.gst_finetune_epochs!r}")
        loss_function(self.loss, self.pair_tolerance)  # refuses a tolerance it cannot take
        if self.gst_finetune_epochs and self.segment_size is None:
            raise ValueError("gst_finetune_epochs fine-tunes the head after Graph Segment Training: set segment_size "
                             "too (full-graph training has no stale embeddings to make up for)")

    def make_net(self) -> RankNet:
        return RankNet(self.kind, self.num_features, hidden=self.hidden, layers=self.layers,
                       opcode_dim=self.opcode_dim, bidirectional=self.bidirectional, attention=self.attention,
                       join=self.join, dropout=self.dropout, dim_tokens=self.dim_tokens)

    @property
    def uses_gst(self) -> bool:
        return self.segment_size is not None

    @property
    def max_train_configs(self) -> int | None:
        """``train_configs`` as the cache's ``max_configs`` (``None`` for every config)."""
        return None if self.train_configs == "all" else self.train_configs


RETIRED_SETTINGS: tuple[str, ...] = ("sibling", "kin", "bridge", "flow", "key_dims", "layout_match", "runtime_head",
                                     "links", "node_head", "runtime_sum", "tile_memory")
"""Settings that earlier versions had, off by default, for ideas that were measured, lost and left the code
(lab/journal.md, "ideas that lost leave the core"). A model saved by such a version holds them (its
hyper-parameters as ``None``, its settings as ``False``): :func:`without_retired` reads it without them, and refuses
one that turned any of them on."""


def without_retired(settings: dict[str, Any]) -> dict[str, Any]:
    """``settings`` (a model's hyper-parameters, or a run's settings) without the :data:`RETIRED_SETTINGS` they hold
    off (``False`` or ``None``).

    Raises:
        ValueError: one of them is on: the network was trained with an idea this version no longer has.
    """
    on = [name for name in RETIRED_SETTINGS if settings.get(name) not in (None, False)]
    if on:
        given = " and ".join(f"{name}={settings[name]!r}" for name in on)
        raise ValueError(f"trained with {given}, {'an option' if len(on) == 1 else 'options'} this version no longer "
                         "has; retrain it")
    return {k: v for k, v in settings.items() if k not in RETIRED_SETTINGS}


DEFAULTS: dict[str, TrainConfig] = {
    "tile": TrainConfig(kind="tile", hidden=64, layers=3, lr=1e-3, loss="listmle", epochs=12, configs_per_graph=32,
                        steps_per_graph=1, patience=3, hops="all", train_configs="all"),
    "layout": TrainConfig(kind="layout", hidden=32, layers=3, lr=1e-2, loss="hinge", epochs=10,
                          configs_per_graph=64, steps_per_graph=8, patience=4, hops=1, train_configs=1000,
                          dim_tokens=True),
}
"""Each kind's default settings (sized to train all five collections of the demo world on a 2-core CPU within the
``make submit`` budget); ``num_features`` and ``data_key`` are filled in from the data."""

COLLECTION_DEFAULTS: dict[str, dict[str, Any]] = {
    "layout:xla:default": {"seeds": 3},
    "layout:xla:random": {"steps_per_graph": 32, "seeds": 3},
}
"""Where a collection's defaults differ from its kind's in :data:`DEFAULTS`. The xla collections hold a third of
the nlp ones' train graphs (61-69 real ones against 198-207; on a bench world the same 61-69 against 28), and their
fits under-fit their own train graphs and vary with the training seed. On xla:random, 32 steps per graph and epoch
instead of 8 scored higher on every bench world and training seed pair it was measured on; on xla:default the same
change was within its noise, so it keeps the kind's 8 (lab/journal.md, "Bench xla: decision links and more steps",
"as many train graphs as the real data"). A seed ensemble of 3 networks scored at least as high as one network on
every bench world and xla collection it was measured on (lab/journal.md, "Bench xla: the seed ensemble"), and the
xla fits are the cheap ones on the real data. The demo world trains with the kind's values
instead (:func:`quick_settings`)."""


def default_config(of: str | Collection) -> TrainConfig:
    """The default settings of a kind (``"tile"``, ``"layout"``) or of a collection (its kind's, with its
    :data:`COLLECTION_DEFAULTS`)."""
    if of in ("tile", "layout"):
        return DEFAULTS[str(of)]
    collection = Collection(of)
    return replace(DEFAULTS[collection.kind], **COLLECTION_DEFAULTS.get(collection.value, {}))


def quick_settings(collection: str | Collection) -> dict[str, Any]:
    """The settings that give a collection back its kind's defaults where :data:`COLLECTION_DEFAULTS` raised them:
    what a quick run (the demo world, which ``make submit`` must finish in 5 minutes) trains with."""
    collection = Collection(collection)
    return {name: getattr(DEFAULTS[collection.kind], name) for name in COLLECTION_DEFAULTS.get(collection.value, {})}


@dataclass
class Item:
    """One graph ready for the model: its segments and its configs (features and runtimes).

    ``y`` is what configs rank by (layout runtime in ns, tile normalised runtime); NaN when unknown.
    """

    key: str
    segments: list[Segment]
    config_feat: torch.Tensor
    y: torch.Tensor
    _structure: LayoutStructure | None = field(default=None, init=False, repr=False, compare=False)

    def structure(self, net: RankNet) -> LayoutStructure:
        """The graph's :class:`models.gnn.infer.LayoutStructure` for ``net``'s kind of message passing, built at the
        first call and kept (the segments must not change after it)."""
        if self._structure is None:
            self._structure = LayoutStructure(self.segments, bidirectional=net.blocks[0].conv.lin_out is not None)
        return self._structure

    @property
    def num_configs(self) -> int:
        return int(self.config_feat.shape[0])

    @property
    def num_nodes(self) -> int:
        return sum(s.num_nodes for s in self.segments)


@dataclass
class Slot:
    """One graph of an optimiser step, and the generators its sampling draws from.

    Attributes:
        index: the slot's position in the epoch (the same on every rank).
        item: the graph.
        gen: draws the configs.
        np_rng: draws GST's segments and segment dropout.
        seed: when set, dropout draws from the global RNG seeded with it (and left as it was afterwards); ``None``:
            from the global RNG as it goes (one graph per step, one process).
    """

    index: int
    item: Item
    gen: torch.Generator
    np_rng: np.random.Generator
    seed: int | None = None

    @classmethod
    def seeded(cls, index: int, item: Item, seed: int) -> Slot:
        """A slot whose every draw comes from ``seed``, whichever rank trains it."""
        return cls(index, item, torch.Generator().manual_seed(seed), np.random.default_rng(seed), seed)


class StepTable:
    """GST's history table as the slots of one optimiser step see it: read as it was when the step began, written
    when it ends (:meth:`commit`), every slot's writes in slot order on every rank. So the step computes the same
    whichever rank trains which slot, and every rank keeps the whole table."""

    def __init__(self, table: HistoryTable) -> None:
        self.table = table
        self.slot = 0
        self.writes: list[tuple[int, Any, int, torch.Tensor, torch.Tensor]] = []

    def get(self, key: Any, segment: int, positions: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor]:
        return self.table.get(key, segment, positions)

    def put(self, key: Any, segment: int, positions: torch.Tensor, values: torch.Tensor) -> None:
        self.writes.append((self.slot, key, segment, positions, values.detach()))

    def commit(self, device: torch.device) -> None:
        """Apply the step's writes (gathered from every rank when launched on several)."""
        writes = self.writes
        if distributed.active():
            parts = distributed.gather([(s, k, seg, pos.cpu(), val.cpu()) for s, k, seg, pos, val in writes])
            writes = sorted((w for part in parts for w in part), key=lambda w: w[0])  # stable: in-slot order kept
        for _, key, segment, positions, values in writes:
            self.table.put(key, segment, positions, values.to(device))
        self.writes = []


class GraphScores(nn.Module):
    """The training forward of one graph as one module call, the unit ``DistributedDataParallel`` synchronises:
    the sampled configs' scores through every segment, or through GST (some segments backpropagated, the others
    from the history table) when the settings use it and the graph has several segments."""

    def __init__(self, net: RankNet) -> None:
        super().__init__()
        self.net = net

    def forward(self, item: Item, config_feat: torch.Tensor, positions: torch.Tensor, cfg: TrainConfig,
                table: StepTable, np_rng: np.random.Generator) -> torch.Tensor:
        if cfg.uses_gst and len(item.segments) > 1:
            scores, _ = gst_scores(self.net, item.segments, config_feat, positions, key=item.key, table=table,
                                   rng=np_rng, backprop=cfg.backprop_segments, keep_prob=cfg.keep_prob)
            return scores
        if self.net.kind == "layout" and cfg.dropout == 0:
            return dedup_scores(self.net, item.structure(self.net), config_feat)
        return self.net(item.segments, config_feat)


class _FreshHeadScores(GraphScores):
    """The forward of the head fine-tuning after Graph Segment Training (``gst_finetune_epochs``, the GST paper's
    "+EFD"): every segment's sum computed afresh without gradients and added, the scores from the total, so the loss
    reaches the head alone. :func:`training_step` takes it as its forward (``ddp``), in
    ``DistributedDataParallel`` when launched on several processes; the caller puts the network in eval mode and
    its head in train mode."""

    def forward(self, item: Item, config_feat: torch.Tensor, positions: torch.Tensor, cfg: TrainConfig,
                table: StepTable, np_rng: np.random.Generator) -> torch.Tensor:
        with torch.no_grad():
            total = sum(self.net.segment_sum(s, config_feat) for s in item.segments)
        return self.net.score(total, item.num_nodes, config_feat)


TIME_BUDGET_STOP = "time budget"
"""How a run that the time budget cut short says why it stopped (:attr:`TrainResult.stopped`): it can resume."""


def finished(stopped: str) -> bool:
    """Whether a run that says ``stopped`` ended for good (all epochs, or early stopping), not unsettled or cut short
    by the time budget."""
    return stopped not in ("", TIME_BUDGET_STOP)


@dataclass
class TrainResult:
    """What a run produced: the kept weights (CPU), the best epoch and its metric, and the per-epoch history.

    ``state`` is the best epoch's weights, or the average of the last epochs' when weight averaging
    (``swa_epochs``) kept it (``swa_used``); ``swa_metric`` is that average's valid metric (NaN without a valid
    metric; ``None`` when averaging is off or no epoch finished). Under Graph Segment Training with
    ``gst_finetune_epochs``, ``state`` is those weights with the head fine-tuned when the fine-tuning kept it
    (``finetune_used``); ``finetune_metric`` is the fine-tuned network's valid metric (NaN without a valid metric;
    ``None`` when the fine-tuning is off, skipped or cut by the time budget). ``best_metric`` stays the best epoch's.
    """

    state: dict[str, torch.Tensor]
    best_epoch: int
    best_metric: float
    history: list[dict[str, float]] = field(default_factory=list)
    stopped: str = ""
    swa_metric: float | None = None
    swa_used: bool = False
    finetune_metric: float | None = None
    finetune_used: bool = False


def resolve_device(device: str | torch.device | None = "auto") -> torch.device:
    """``auto`` (or ``None``) picks CUDA when available, else the CPU."""
    if device is None or str(device) == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def _fill(order: np.ndarray, batch: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Split ``order`` into batches of exactly ``batch`` (the last one topped up with other configs) when there are
    at least ``batch`` configs; one batch of all otherwise."""
    n = order.shape[0]
    if n <= batch:
        return [order]
    out = [order[i:i + batch] for i in range(0, n, batch)]
    short = batch - out[-1].shape[0]
    if short:
        extra = rng.choice(order[: n - out[-1].shape[0]], size=short, replace=False)
        out[-1] = np.concatenate([out[-1], extra])
    return out


def inference_autocast(device: torch.device, enabled: bool = True) -> contextlib.AbstractContextManager[Any]:
    """Mixed precision for prediction: ``torch.autocast`` with bfloat16 (float16 where the GPU lacks bfloat16) on
    CUDA; nothing (float32) on the CPU or when not ``enabled``."""
    if enabled and device.type == "cuda":
        dtype = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        return torch.autocast("cuda", dtype=dtype)
    return contextlib.nullcontext()


@torch.inference_mode()
def predict_scores(net: RankNet, segments: list[Segment], config_feat: torch.Tensor, *, batch: int = 128,
                   orderings: int = 1, seed: int = 0, device: torch.device | None = None,
                   plan: LayoutPlan | None = None, mixed_precision: bool = True,
                   context: str = DEFAULT_PREDICT_CONTEXT, reference: list[ReferenceContext] | None = None,
                   reference_configs: int | None = DEFAULT_REFERENCE_CONFIGS) -> np.ndarray:
    """Scores of every config in ``config_feat`` (first dimension C), in batches, in eval mode.

    Without cross-config attention a config's score does not depend on its batch: one pass in file order. With
    it, ``context`` (:data:`models.gnn.infer.PREDICT_CONTEXTS`) says what each config is compared with:
    ``batches``: configs are scored in batches of exactly ``batch`` and the scores are averaged over
    ``orderings`` seeded random orderings, so every config is compared with several random sets of others;
    ``reference`` (layout): every config against the same reference set of ``reference_configs`` configs of the
    graph (``None``: ``batch - 1``) standing for ``batch - 1`` others, averaged over ``orderings`` seeded reference
    sets (:class:`models.gnn.infer.ReferenceContext`; pass ``reference`` to reuse sets built once for the whole
    graph). When one batch holds every config, it is scored once as that batch.

    Layout networks score through a :class:`models.gnn.infer.LayoutPlan` (each connected component run once per
    distinct config of the batch; the same scores as ``net(segments, ...)`` up to float rounding), all configs
    at once when there is no attention (the plan bounds its own memory). Pass ``plan`` to reuse one across calls
    on the same graph, and ``config_feat`` either as float ``[C, NC, 18]`` or already as int64 codes ``[C, NC]``
    (:func:`models.gnn.infer.config_codes`).

    Args:
        mixed_precision: autocast (bfloat16) on CUDA; the CPU always computes in float32.

    Returns:
        float64 ``[C]``, lower = predicted faster.
    """
    if context not in PREDICT_CONTEXTS:
        raise ValueError(f"context must be one of {', '.join(PREDICT_CONTEXTS)}; got {context!r}")
    device = device or next(net.parameters()).device
    was_training = net.training
    net.eval()
    n = int(config_feat.shape[0])
    attention = any(b.attention is not None for b in net.blocks) or net.late_attention is not None
    score: Callable[[np.ndarray], torch.Tensor]
    try:
        with inference_autocast(device, mixed_precision):
            if net.kind == "layout":
                layout_plan = plan if plan is not None else LayoutPlan(net, segments)
                codes = (config_feat if config_feat.dtype == torch.long else config_codes(config_feat)).to(device)
                if not attention:
                    return layout_plan.scores(codes).double().cpu().numpy()
                if context == "reference" and (n > batch or reference is not None):
                    sets = reference if reference is not None else reference_sets(
                        layout_plan, codes, n, batch=batch, drawn=reference_configs or batch - 1, seed=seed,
                        draws=orderings)
                    return np.mean([layout_plan.scores(codes, r).double().cpu().numpy() for r in sets], axis=0)

                def score(idx: np.ndarray) -> torch.Tensor:
                    return layout_plan.scores(codes[torch.from_numpy(idx).to(device)])
            else:
                def score(idx: np.ndarray) -> torch.Tensor:
                    return net(segments, config_feat[torch.from_numpy(idx)].to(device))
            rng = np.random.default_rng(seed)
            total = np.zeros(n)
            counts = np.zeros(n)
            passes = orderings if attention and n > batch else 1
            for p in range(passes):
                order = rng.permutation(n) if p > 0 else np.arange(n)
                chunks = _fill(order, batch, rng) if attention else [order[i:i + batch] for i in range(0, n, batch)]
                for idx in chunks:
                    scores = score(idx).double().cpu().numpy()
                    np.add.at(total, idx, scores)
                    np.add.at(counts, idx, 1)
    finally:
        net.train(was_training)
    return total / np.maximum(counts, 1)


def epoch_seconds(history: Sequence[dict[str, float]]) -> float:
    """How long the last epoch of ``history`` took, its validation included (``seconds`` counts from the run's
    start, resumed runs too)."""
    return history[-1]["seconds"] - (history[-2]["seconds"] if len(history) > 1 else 0.0)


def last_valid_seconds(history: Sequence[dict[str, float]]) -> float:
    """How long the last validation pass of ``history`` took (0 before the first; a checkpoint older than the
    ``valid_seconds`` column has none)."""
    return history[-1].get("valid_seconds", 0.0) if history else 0.0


class ValidationCut(Exception):
    """A validation pass left unfinished: the time budget ran out during it (:func:`evaluate`)."""


def evaluate(net: RankNet, items: Sequence[Item], cfg: TrainConfig, device: torch.device, *,
             orderings: int = 1, out_of_time: Callable[[], bool] | None = None) -> float:
    """The mean valid metric over ``items`` (NaN when there are none with known runtimes): the score each graph's
    submission row would get (:func:`~competition.metrics.graph_score`).

    Launched on several processes, each scores its share of ``items`` (:func:`models.gnn.distributed.shard`) and
    every rank returns the same mean, taken in the order of ``items``.

    Raises:
        ValidationCut: on every rank, when ``out_of_time`` (asked before each graph, on this process's clock: no
            collective) said so on any rank before its last graph was scored: a time budget is then not overrun
            by a whole validation pass.
    """
    mine: dict[int, float] = {}
    cut = False
    for i in distributed.shard(range(len(items))):
        if out_of_time is not None and out_of_time():
            cut = True
            break
        item = items[i]
        y = item.y.numpy()
        if item.num_configs < 2 or not np.isfinite(y).all():
            continue
        # The items are on the device (train() put them there); a layout plan reuses the graph's structure, built
        # at the first epoch, so that only the weights' part is redone each epoch.
        plan = LayoutPlan(net, item.segments, item.structure(net)) if cfg.kind == "layout" else None
        # float32 even on CUDA: the metric picks the kept epoch, so it is not left to reduced-precision rounding.
        scores = predict_scores(net, item.segments, item.config_feat, batch=cfg.predict_batch, orderings=orderings,
                                seed=cfg.seed, device=device, plan=plan, mixed_precision=False,
                                context=cfg.predict_context, reference_configs=cfg.reference_configs)
        mine[i] = graph_score(cfg.kind, y, scores=scores)
    parts = distributed.gather((mine, cut))
    if any(part_cut for _, part_cut in parts):
        raise ValidationCut
    every = {i: v for part, _ in parts for i, v in part.items()}
    values = [every[i] for i in sorted(every)]
    return float(np.mean(values)) if values else float("nan")


@contextlib.contextmanager
def _dropout_seed(seed: int | None, device: torch.device) -> Iterator[None]:
    """Inside: the global RNG (which dropout draws from) seeded with ``seed``; outside, as it was. Nothing when
    ``seed`` is ``None``."""
    if seed is None:
        yield
        return
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else [], device_type=device.type):
        torch.manual_seed(seed)
        yield


def training_step(net: RankNet, slots: Sequence[Slot], cfg: TrainConfig, opt: torch.optim.Optimizer,
                  loss_fn: LossFn, table: HistoryTable, *, device: torch.device, share: float = 1.0,
                  ddp: nn.Module | None = None) -> dict[int, float]:
    """One optimiser step over this process's slots of the step.

    For each slot: sample ``configs_per_graph`` configs, score them (through GST when the graph has several
    segments and ``cfg`` uses it), take the loss, backpropagate it times ``share`` (gradients add up over the
    slots). Then clip the gradients at norm 1 and step. GST's table is read as it was when the step began and
    updated once the step's slots are all done (:class:`StepTable`).

    Args:
        net: the network.
        slots: this process's slots; their items' segments already on ``device``.
        share: each slot's weight in the step's gradient: ``1 / graphs_per_step`` for the mean over the step's
            graphs, times the number of processes under ``DistributedDataParallel`` (which averages over them).
        ddp: ``DistributedDataParallel`` of :class:`GraphScores` of ``net`` when launched on several processes: it
            all-reduces the gradients during the last slot's backward.

    Returns:
        Each slot's loss (not weighted), by slot index.
    """
    forward = ddp if ddp is not None else GraphScores(net)
    view = StepTable(table)
    losses: dict[int, float] = {}
    opt.zero_grad(set_to_none=True)
    for n, slot in enumerate(slots):
        item = slot.item
        last = n == len(slots) - 1
        sync = ddp.no_sync() if isinstance(ddp, DistributedDataParallel) and not last else contextlib.nullcontext()
        with sync, _dropout_seed(slot.seed, device):
            k = min(cfg.configs_per_graph, item.num_configs)
            pos = torch.randperm(item.num_configs, generator=slot.gen)[:k]
            cf = item.config_feat[pos].to(device)
            if not cf.is_floating_point():  # layout configs kept as int8 (the cache's compact form)
                cf = cf.float()
            y = item.y[pos].to(device)
            view.slot = slot.index
            loss = loss_fn(forward(item, cf, pos, cfg, view, slot.np_rng), y)
            (loss if share == 1.0 else loss * share).backward()
        losses[slot.index] = float(loss.detach())
    torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
    opt.step()
    if cfg.uses_gst:
        view.commit(device)
    return losses


def _visit_order(steps_per_epoch: int, cfg: TrainConfig, graphs: int, gen: torch.Generator) -> list[int]:
    """An epoch's graph index for each of its ``steps_per_epoch * graphs_per_step`` slots, in a shuffled order drawn
    from ``gen``: every one of ``graphs`` graphs visited equally often (``steps_per_graph`` times; the last step
    topped up), or, when there are fewer slots than graphs, a random subset of the graphs once each."""
    slots = steps_per_epoch * cfg.graphs_per_step
    if slots < graphs:
        return torch.randperm(graphs, generator=gen)[:slots].tolist()
    return torch.randperm(slots, generator=gen).remainder(graphs).tolist()


def step_slots(order: Sequence[int], step: int, usable: Sequence[Item], cfg: TrainConfig, gen: torch.Generator,
               np_rng: np.random.Generator) -> list[Slot]:
    """This process's slots of an epoch's ``step`` (the step's slot ``j`` goes to rank ``j % world``), from the
    epoch's ``order`` of graph indices.

    With one graph per step the slot draws from the run's ``gen`` and ``np_rng``; with more, the step's slot seeds
    are drawn from ``gen`` on every rank, so every rank's ``gen`` stays the same.
    """
    per_step = cfg.graphs_per_step
    first = step * per_step
    if per_step == 1:
        return [Slot(first, usable[order[first]], gen, np_rng)]
    seeds = torch.randint(2**62, (per_step,), generator=gen).tolist()
    return [Slot.seeded(first + j, usable[order[first + j]], seeds[j])
            for j in range(distributed.rank(), per_step, distributed.world_size())]


def _cosine(total_steps: int, warmup: int) -> Callable[[int], float]:
    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        progress = min(1.0, (step - warmup) / max(1, total_steps - warmup))
        return 0.01 + 0.99 * 0.5 * (1 + math.cos(math.pi * progress))
    return factor


def write_curves(run_dir: Path, history: list[dict[str, float]], title: str = "", *, plot: bool = True) -> None:
    """Write ``curves.csv`` and, with ``plot``, ``curves.png`` (train loss and valid metric per epoch), atomically."""
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=CURVE_COLUMNS, lineterminator="\n")
    writer.writeheader()
    for row in history:
        writer.writerow({k: row[k] for k in CURVE_COLUMNS})
    with failures_named(run_dir / CURVES_CSV):
        atomic_write_text(run_dir / CURVES_CSV, buf.getvalue())
    if not plot:
        return
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9, 3.2))
    epochs = [r["epoch"] for r in history]
    ax1.plot(epochs, [r["train_loss"] for r in history], marker="o")
    ax1.set(xlabel="epoch", ylabel="train loss", title="training loss")
    ax2.plot(epochs, [r["valid_metric"] for r in history], marker="o", color="tab:green")
    ax2.set(xlabel="epoch", ylabel="valid metric", title="valid metric (higher is better)")
    for ax in (ax1, ax2):
        ax.grid(alpha=0.3)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    with failures_named(run_dir / CURVES_PNG), atomic_path(run_dir / CURVES_PNG) as tmp:
        fig.savefig(tmp, format="png", dpi=100)
    plt.close(fig)


def _rng_state(gen: torch.Generator, np_rng: np.random.Generator) -> dict[str, Any]:
    """Every RNG state as plain data (byte tensors, numpy's state dict of ints, Python's tuple of ints), so a
    checkpoint reads back with ``weights_only=True``."""
    return {"sampler": gen.get_state(), "numpy": np_rng.bit_generator.state, "torch": torch.get_rng_state(),
            "python": random.getstate(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None}


def _set_rng_state(state: dict[str, Any], gen: torch.Generator, np_rng: np.random.Generator) -> None:
    gen.set_state(state["sampler"])
    np_rng.bit_generator.state = state["numpy"]
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    # Only onto as many GPUs as it was taken from (rank 0's machine may have more than another rank's).
    if state.get("cuda") is not None and len(state["cuda"]) == torch.cuda.device_count() > 0:
        torch.cuda.set_rng_state_all(state["cuda"])


ENSEMBLE_SETTINGS = ("seeds",)
""":class:`TrainConfig` fields that say how many runs a model makes, not how one run trains: :func:`train` ignores
them, and a run's settings (its checkpoint's, ``settings.json``, :func:`settings_hash`) leave them out, so a member of
a seed ensemble resumes, or is resumed by, the run of a model without one."""


def run_settings(cfg: TrainConfig) -> dict[str, Any]:
    """The settings of one run of ``cfg`` as stored with it: :class:`TrainConfig` as a dict, without
    :data:`ENSEMBLE_SETTINGS`."""
    return {k: v for k, v in asdict(cfg).items() if k not in ENSEMBLE_SETTINGS}


def settings_hash(settings: dict[str, Any]) -> str:
    """12 hex digits of the SHA-256 of ``settings`` (a :class:`TrainConfig` as a dict) as sorted JSON: the name of
    the folder a run with these settings is moved to when a run with other settings takes its place."""
    text = json.dumps(settings, sort_keys=True, default=repr)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def _discard(path: Path, why: str) -> None:
    kept = set_aside(path)
    log.warning("%s: %s; kept as %s, training starts afresh", path, why, kept.name)


def _read_checkpoint(path: Path) -> dict[str, Any] | None:
    """The checkpoint at ``path`` if it is one (``None`` when absent; set aside with a warning when unusable)."""
    if not path.is_file():
        return None
    try:
        ckpt = load_plain(path)
        if not isinstance(ckpt, dict):
            raise UnusableFileError(f"not a checkpoint (a {type(ckpt).__name__}, expected a dict)")
        wrong = [k for k, t in _CHECKPOINT_TYPES.items() if not isinstance(ckpt.get(k), t)]
        if "settings" not in wrong and not all(v is None or isinstance(v, str | int | float)
                                               for v in ckpt["settings"].values()):
            wrong.insert(0, "settings")
        if wrong:
            raise UnusableFileError(f"not a checkpoint (missing or odd {', '.join(wrong)})")
        required = [c for c in CURVE_COLUMNS if c not in _ADDED_CURVE_COLUMNS]
        if not all(isinstance(r, dict) and set(required) <= r.keys() for r in ckpt["history"]):
            raise UnusableFileError(f"not a checkpoint (history rows lack {', '.join(required)})")
        for row in ckpt["history"]:
            for column in _ADDED_CURVE_COLUMNS:
                row.setdefault(column, float("nan"))
    except UnusableFileError as exc:
        _discard(path, str(exc))
        return None
    return ckpt


def _move_run(src: Path, dest: Path) -> None:
    """Move the :data:`RUN_FILES` of ``src`` into ``dest`` (replacing any there), the checkpoint last."""
    for name in RUN_FILES:
        if (src / name).is_file():
            dest.mkdir(parents=True, exist_ok=True)
            os.replace(src / name, dest / name)


def _open_run(run: Path, settings: dict[str, Any]) -> dict[str, Any] | None:
    """The checkpoint to resume the run of ``settings`` in ``run`` from, or ``None`` to start afresh.

    A run with other settings found there is moved into ``run/<its settings hash>/``; a run with ``settings`` moved
    away earlier is moved back.
    """
    ckpt = _read_checkpoint(run / CHECKPOINT)
    if ckpt is not None and ckpt["settings"] != settings:
        away = run / settings_hash(ckpt["settings"])
        _move_run(run, away)
        log.info("%s: the run there has other settings; moved it to %s (training with them again brings it "
                 "back)", run, away)
        ckpt = None
    earlier = run / settings_hash(settings)
    if ckpt is None and (earlier / CHECKPOINT).is_file():
        _move_run(earlier, run)
        with contextlib.suppress(OSError):  # left in place when it holds anything else
            earlier.rmdir()
        log.info("%s: brought back the earlier run with these settings from %s", run, earlier)
        ckpt = _read_checkpoint(run / CHECKPOINT)
    return ckpt


def _average_states(states: Sequence[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """The element-wise mean of ``states`` (state dicts of one network): float tensors averaged, the others
    (integer or bool buffers) taken from the last."""
    last = states[-1]
    return {k: torch.stack([s[k] for s in states]).mean(0) if v.is_floating_point() else v.clone()
            for k, v in last.items()}


def train(cfg: TrainConfig, train_items: Sequence[Item], valid_items: Sequence[Item], *,
          run_dir: str | Path | None = None, device: str | torch.device | None = "auto", progress: bool = True,
          max_seconds: float | None = None, keep_free: Callable[[float], float] | None = None,
          title: str = "") -> TrainResult:
    """Train a :class:`RankNet` per ``cfg`` and return its best weights on the valid metric.

    Launched on several processes (:mod:`models.gnn.distributed`), every rank calls this with the same arguments:
    each trains its share of every step's graphs and scores its share of ``valid_items``; rank 0 alone reads and
    writes ``run_dir`` (the others get its checkpoint from it), and every rank returns the same result.

    Args:
        cfg: the settings.
        train_items: graphs to learn from (at least two configs each to contribute).
        valid_items: graphs for early stopping; when empty (or without runtimes) the last epoch is kept (with
            ``swa_epochs``, the average).
        run_dir: where checkpoints and curves go (``None``: kept in memory only, no resume); a run with other
            settings found there is moved into a subfolder named by its :func:`settings_hash`, not overwritten.
        device: ``auto``, ``cpu``, ``cuda``...
        progress: progress bars (rank 0's only).
        max_seconds: stop after this much training time (checked every step, by every rank: the first out of time
            stops them all); the run stays resumable. An epoch is not begun when the last one (its validation
            included) took longer than the time left; its steps keep the time the last validation pass took; a
            validation pass stops when the time is out (checked before each graph). An epoch cut short either way
            is dropped (the last whole epoch's checkpoint stays, so a re-run redoes it), except the first: without a
            scored epoch the weights trained so far are returned.
        keep_free: with ``max_seconds``, the seconds to keep free at its end given the last validation pass's
            seconds (0 before the first): the time the caller's predictions will take, forecast from the
            validation pass. Training, validation and the fine-tuning then end ``keep_free(...)`` before
            ``max_seconds``.
        title: a title for the curves plot.

    With ``cfg.swa_epochs`` k >= 1 the weights at the end of each of the last k finished epochs are kept (in the
    checkpoint too); when training stops (a partial epoch cut by the time budget does not count) their average is
    scored on ``valid_items`` and kept instead of the best epoch's weights when it scores at least as well (within
    1e-6), or when there is no valid metric.

    Under Graph Segment Training with ``cfg.gst_finetune_epochs`` k >= 1 (the GST paper's "+EFD"), the weights so
    chosen then have their head (``head``, and ``late_attention`` when there is one) fine-tuned alone, every other
    parameter frozen: a new AdamW at ``cfg.lr`` with the training's schedule (warm-up, cosine) over k epochs of the
    training's visits (``steps_per_graph``, ``configs_per_graph``, ``graphs_per_step``, seeded by ``cfg.seed``),
    where each step computes every segment's sum afresh, without gradients and in eval mode, and trains the head on
    their total (:func:`training_step` with :class:`_FreshHeadScores`). The fine-tuned weights are kept when they
    score at least as well on ``valid_items`` as those before (within 1e-6), or when there is no valid metric. The
    fine-tuning is skipped when the time budget is spent, and dropped when it runs out during it; its outcome is
    checkpointed with the rest. Launched on several processes, it trains as training does (each rank its share of
    every step's graphs, the head's gradients all-reduced), so every rank ends with the same weights.

    Returns:
        The best weights (on the CPU), or their average, maybe with the head fine-tuned, with the history.

    Raises:
        models.gnn.distributed.DistributedSetupError: more processes than training graphs, or than
            ``graphs_per_step``.
    """
    device = resolve_device(device)
    run = Path(run_dir) if run_dir is not None else None
    settings = run_settings(cfg)
    world, main = distributed.world_size(), distributed.is_main()
    # Graphs go to the device once (a no-op on the CPU), not at every step.
    usable = [Item(it.key, [s.to(device) for s in it.segments], it.config_feat, it.y)
              for it in train_items if it.num_configs >= 2]
    valid_items = [Item(it.key, [s.to(device) for s in it.segments], it.config_feat, it.y) for it in valid_items]
    if not usable:
        raise ValueError("no training graph has two or more configs with known runtimes")
    if world > len(usable):
        raise distributed.DistributedSetupError(
            f"{title or cfg.kind}: {len(usable)} training graphs for {world} processes, each of which trains a "
            f"graph of its own at every step: launch at most {len(usable)}")
    if cfg.graphs_per_step < world:
        raise distributed.DistributedSetupError(
            f"graphs_per_step={cfg.graphs_per_step} is less than the {world} processes, each of which trains a graph "
            f"of its own at every step: set graphs_per_step to {world} or more (--param graphs_per_step={world})")
    # Every graph is visited steps_per_graph times per epoch; the last step is topped up to graphs_per_step.
    steps_per_epoch = max(1, math.ceil(len(usable) * cfg.steps_per_graph / cfg.graphs_per_step))
    total_steps = cfg.epochs * steps_per_epoch

    def fresh() -> tuple[RankNet, torch.optim.Optimizer, torch.optim.lr_scheduler.LambdaLR, torch.Generator,
                         np.random.Generator]:
        seed_everything(cfg.seed)
        net = cfg.make_net().to(device)
        opt = torch.optim.AdamW(net.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, _cosine(total_steps, max(1, total_steps // 50)))
        return net, opt, sched, torch.Generator().manual_seed(cfg.seed), np.random.default_rng(cfg.seed)

    def resume(ckpt: dict[str, Any]) -> None:
        for kept in [ckpt["best_state"], *ckpt["swa_states"], *([ckpt["finetune_state"]] if ckpt["finetune_used"]
                                                                 else [])]:
            net.load_state_dict(kept)  # only checks that the kept weights fit this network
        net.load_state_dict(ckpt["model"])
        opt.load_state_dict(ckpt["optimizer"])
        sched.load_state_dict(ckpt["scheduler"])
        _set_rng_state(ckpt["rng"], gen, np_rng)

    def snapshot() -> dict[str, torch.Tensor]:
        return {k: v.detach().cpu().clone() for k, v in net.state_dict().items()}

    def settle() -> tuple[dict[str, torch.Tensor], float | None, bool]:
        """The weights to return, the average's valid metric, and whether the average is kept (see above)."""
        if not swa_states:
            return best_state, None, False
        average = _average_states(swa_states)
        probe = copy.deepcopy(net)
        probe.load_state_dict(average)
        metric = evaluate(probe, valid_items, cfg, device)  # the same on every rank, so is the choice
        used = math.isnan(metric) or metric >= best_metric - 1e-6
        if main and math.isnan(metric):
            log.info("%s: no valid metric; the average of the last %d epochs kept", title or cfg.kind,
                     len(swa_states))
        elif main:
            log.info("%s: the average of the last %d epochs scores %.4f on valid against the best epoch's (%d) "
                     "%.4f: %s kept", title or cfg.kind, len(swa_states), metric, best_epoch, best_metric,
                     "the average" if used else "the best epoch")
        return (average if used else best_state), metric, used

    def limit() -> float:
        """The seconds this run may use: ``max_seconds`` less what ``keep_free`` keeps (history is the same on
        every rank, so is this)."""
        assert max_seconds is not None
        return max_seconds - (keep_free(last_valid_seconds(history)) if keep_free is not None else 0.0)

    def left() -> float:
        return max(0.0, limit() - (time.perf_counter() - started))

    def out_of_time(reserve: float = 0.0) -> bool:
        """Out of time on this rank's clock (no collective: asked inside a validation pass), keeping ``reserve``."""
        return max_seconds is not None and time.perf_counter() - started > limit() - reserve

    def spent(reserve: float = 0.0) -> bool:
        """Out of time on any rank, keeping ``reserve`` seconds."""
        return max_seconds is not None and distributed.any_rank(out_of_time(reserve))

    def finetune(kept: dict[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], float | None, bool]:
        """The weights to return after the head fine-tuning of ``kept`` (the weights :func:`settle` chose), the
        fine-tuned network's valid metric (``None`` when not run to the end), and whether it is kept (see above)."""
        if not (cfg.uses_gst and cfg.gst_finetune_epochs):
            return kept, None, False
        name = title or cfg.kind
        # Forecast from the last epoch: k epochs of its training steps, then one validation pass.
        scoring = last_valid_seconds(history)
        forecast = max(0.0, cfg.gst_finetune_epochs * (epoch_seconds(history) - scoring) + scoring) if history else 0.0
        if spent(reserve=forecast):
            if main:
                log.info("%s: the time budget left cannot hold the head fine-tuning (about %s); the head is not "
                         "fine-tuned", name, format_seconds(forecast))
            return kept, None, False
        probe = copy.deepcopy(net)
        probe.load_state_dict(kept)
        probe.zero_grad(set_to_none=True)  # the copy's last training gradients would count in the clipping
        heads = [m for m in (probe.head, probe.late_attention) if m is not None]
        probe.requires_grad_(False).eval()  # the segments' sums without dropout
        for m in heads:
            m.requires_grad_(True).train()
        steps = cfg.gst_finetune_epochs * steps_per_epoch
        head_opt = torch.optim.AdamW([p for m in heads for p in m.parameters()], lr=cfg.lr,
                                     weight_decay=cfg.weight_decay)
        head_sched = torch.optim.lr_scheduler.LambdaLR(head_opt, _cosine(steps, max(1, steps // 50)))
        forward = distributed.wrap(_FreshHeadScores(probe)) if world > 1 else _FreshHeadScores(probe)
        head_gen, head_rng = torch.Generator().manual_seed(cfg.seed), np.random.default_rng(cfg.seed)
        with _dropout_seed(cfg.seed, device):  # the head's dropout, when each slot has no seed of its own
            for _ in range(cfg.gst_finetune_epochs):
                order = _visit_order(steps_per_epoch, cfg, len(usable), head_gen)
                for step in range(steps_per_epoch):
                    slots = step_slots(order, step, usable, cfg, head_gen, head_rng)
                    training_step(probe, slots, cfg, head_opt, loss_fn, HistoryTable(), device=device, share=share,
                                  ddp=forward)  # the fresh sums write nothing to the table
                    head_sched.step()
                    if spent():
                        if main:
                            log.info("%s: the time budget ran out during the head fine-tuning; dropped", name)
                        return kept, None, False
        metric = evaluate(probe, valid_items, cfg, device)  # the same on every rank, so is the choice
        before = swa_metric if swa_used else best_metric
        used = math.isnan(metric) or metric >= before - 1e-6
        if main and math.isnan(metric):
            log.info("%s: no valid metric; the head fine-tuned for %d epochs kept", name, cfg.gst_finetune_epochs)
        elif main:
            log.info("%s: the head fine-tuned for %d epochs on every segment's fresh sum scores %.4f on valid "
                     "against %.4f before: %s kept", name, cfg.gst_finetune_epochs, metric, before,
                     "the fine-tuned head" if used else "the head before")
        if not used:
            return kept, metric, False
        return {k: v.detach().cpu().clone() for k, v in probe.state_dict().items()}, metric, True

    net, opt, sched, gen, np_rng = fresh()
    loss_fn = loss_function(cfg.loss, cfg.pair_tolerance)
    table = HistoryTable()
    history: list[dict[str, float]] = []
    best_state = snapshot()
    best_metric, best_epoch, bad_epochs, start_epoch, stopped = -math.inf, 0, 0, 1, ""
    swa_states: list[dict[str, torch.Tensor]] = []  # the last swa_epochs finished epochs' weights, oldest first
    swa_metric: float | None = None
    swa_used = False
    finetune_state: dict[str, torch.Tensor] = {}  # the fine-tuned weights, when kept
    finetune_metric: float | None = None
    finetune_used = False
    ckpt = _open_run(run, settings) if run is not None and main else None
    if run is not None and main:  # after _open_run, which moves another run's files (its settings.json too) away
        with failures_named(run / SETTINGS_FILE):
            atomic_write_text(run / SETTINGS_FILE, json.dumps(settings, indent=1, sort_keys=True) + "\n")
    if run is not None and ckpt is not None:
        try:
            resume(ckpt)
        except (RuntimeError, ValueError, KeyError, TypeError, IndexError) as exc:
            _discard(run / CHECKPOINT, f"does not fit the settings it names ({type(exc).__name__})")
            net, opt, sched, gen, np_rng = fresh()
            ckpt = None
    if run is not None and world > 1:
        ckpt = distributed.broadcast(ckpt)  # rank 0's, checked: every rank resumes from the same epoch
        if ckpt is not None and not main:
            resume(ckpt)
    if ckpt is not None:
        history, best_state = ckpt["history"], ckpt["best_state"]
        best_metric, best_epoch, bad_epochs = ckpt["best_metric"], ckpt["best_epoch"], ckpt["bad_epochs"]
        start_epoch, stopped = ckpt["epoch"] + 1, ckpt["stopped"]
        swa_states, swa_metric, swa_used = ckpt["swa_states"], ckpt["swa_metric"], ckpt["swa_used"]
        if finished(stopped):
            finetune_metric, finetune_used = ckpt["finetune_metric"], ckpt["finetune_used"]
            state = ckpt["finetune_state"] if finetune_used else _average_states(swa_states) if swa_used \
                else best_state
            return TrainResult(state, best_epoch, best_metric, history, stopped, swa_metric, swa_used,
                               finetune_metric, finetune_used)
        stopped = ""
    ddp = distributed.wrap(GraphScores(net), partial=cfg.uses_gst) if world > 1 else None
    share = world / cfg.graphs_per_step  # DistributedDataParallel averages the gradients over the processes
    started = plotted = time.perf_counter()
    elapsed_before = history[-1]["seconds"] if history else 0.0
    for epoch in range(start_epoch, cfg.epochs + 1):
        # With a time budget, an epoch that cannot end (its validation included) in the time left is not begun:
        # cut short, it would be discarded (its weights never scored), and its time is the prediction's. The last
        # whole epoch, its validation included, is the forecast.
        if history and spent(reserve=epoch_seconds(history)):
            if main:
                log.info("%s: the time budget leaves %s, less than an epoch takes (%s); epoch %d is not begun",
                         title or cfg.kind, format_seconds(left()),
                         format_seconds(epoch_seconds(history)), epoch)
            stopped = TIME_BUDGET_STOP
            break
        # Training keeps the time the last validation pass took, so that this epoch's validation ends in time too.
        reserve = last_valid_seconds(history)
        net.train()
        # Every graph's visits in a shuffled order (fresh configs at each visit), graphs_per_step per step.
        order = _visit_order(steps_per_epoch, cfg, len(usable), gen)
        losses: dict[int, float] = {}
        recent: list[float] = []
        bar = tqdm(range(steps_per_epoch), desc=f"{title or cfg.kind} epoch {epoch}/{cfg.epochs}",
                   disable=not (progress and main), leave=False)
        for step in bar:
            slots = step_slots(order, step, usable, cfg, gen, np_rng)
            done = training_step(net, slots, cfg, opt, loss_fn, table, device=device, share=share, ddp=ddp)
            sched.step()
            losses.update(done)
            recent.extend(done.values())
            bar.set_postfix(loss=f"{np.mean(recent[-50:]):.4f}", refresh=False)  # drawn at the bar's own pace
            if spent(reserve):
                stopped = TIME_BUDGET_STOP
                break
        validating = time.perf_counter()
        metric = math.nan
        if not stopped:
            try:
                metric = evaluate(net, valid_items, cfg, device, out_of_time=out_of_time)
            except ValidationCut:
                stopped = TIME_BUDGET_STOP
                if main:
                    log.info("%s: the time budget ran out while scoring epoch %d on valid; the epoch is left "
                             "unscored", title or cfg.kind, epoch)
        if stopped:
            # A partial epoch, or one whose validation the budget cut, is neither recorded nor checkpointed: the
            # checkpoint of the last whole epoch (with its RNG states) stays, so a re-run redoes this epoch and
            # ends as an uninterrupted run would. Without a whole epoch, the weights trained so far are kept.
            if not history:
                best_state = snapshot()
            break
        valid_seconds = time.perf_counter() - validating
        every = {i: v for part in distributed.gather(losses) for i, v in part.items()}
        seconds = elapsed_before + time.perf_counter() - started
        history.append({"epoch": epoch, "train_loss": float(np.mean([every[i] for i in sorted(every)])),
                        "valid_metric": metric, "lr": float(sched.get_last_lr()[0]), "seconds": seconds,
                        "valid_seconds": valid_seconds})
        if math.isnan(metric) or metric > best_metric + 1e-6:
            best_metric = metric if not math.isnan(metric) else best_metric
            best_epoch, bad_epochs = epoch, 0
            best_state = snapshot()
        else:
            bad_epochs += 1
            if bad_epochs >= cfg.patience:
                stopped = f"early stopping (no gain for {cfg.patience} epochs)"
        if epoch == cfg.epochs and not stopped:
            stopped = "all epochs"
        if cfg.swa_epochs:
            swa_states = [*swa_states, snapshot()][-cfg.swa_epochs:]
        if stopped:  # before the checkpoint, which holds the outcome: a finished run re-run returns it at once
            state, swa_metric, swa_used = settle()
            state, finetune_metric, finetune_used = finetune(state)
            finetune_state = state if finetune_used else {}
        if run is not None and main:
            run.mkdir(parents=True, exist_ok=True)
            ckpt = {"settings": settings, "epoch": epoch, "model": net.state_dict(), "optimizer": opt.state_dict(),
                    "scheduler": sched.state_dict(), "rng": _rng_state(gen, np_rng), "history": history,
                    "best_state": best_state, "best_metric": best_metric, "best_epoch": best_epoch,
                    "bad_epochs": bad_epochs, "stopped": stopped, "swa_states": swa_states,
                    "swa_metric": swa_metric, "swa_used": swa_used, "finetune_state": finetune_state,
                    "finetune_metric": finetune_metric, "finetune_used": finetune_used}
            # Through our own file object: a full disk is an OSError naming the checkpoint, not torch's RuntimeError.
            atomic_write_stream(run / CHECKPOINT, lambda f, ckpt=ckpt: torch.save(ckpt, f))
            plot = bool(stopped) or time.perf_counter() - plotted >= PLOT_SECONDS
            write_curves(run, history, title, plot=plot)
            plotted = time.perf_counter() if plot else plotted
        if stopped:
            break
    if not finished(stopped):  # not settled at the end of an epoch
        state, swa_metric, swa_used = settle()
        state, finetune_metric, finetune_used = finetune(state)
    return TrainResult(state, best_epoch, best_metric, history, stopped, swa_metric, swa_used, finetune_metric,
                       finetune_used)
