"""The GNN's settings tree (:class:`GNNConfig`: features, network, train, predict, run), its presets per kind and
per collection, and the settings that earlier versions had for ideas that left the code.

Every leaf is declared once below (:func:`models.settings.setting`): its type, its default, its allowed values and
one line of help. The defaults are the layout collections' (but for the layout-only ``network.dim_tokens``);
:data:`KIND_PRESETS` and :data:`COLLECTION_PRESETS`
hold, as data, where a kind or a collection differs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

from competition.collections import Collection
from features.tabular_tile import TILE_SHARE_NAMES
from models import settings as tree
from models.gnn.infer import DEFAULT_PREDICT_CONTEXT, DEFAULT_REFERENCE_CONFIGS, DEFAULT_TTA, PREDICT_CONTEXTS
from models.gnn.losses import LOSSES, loss_function
from models.gnn.net import TILE_CONFIG_COLUMNS, RankNet
from models.settings import Section, section, seed_setting, setting

INF = math.inf


def _is_device(name: str) -> bool | str:
    """Whether torch takes ``name`` as a device (``auto``: CUDA when available, else the CPU), and, for a CUDA
    device, why this torch or machine cannot run on it: refused with the other settings, before any work starts,
    not as a traceback at the first tensor moved there."""
    import torch

    try:
        device = torch.device("cpu" if name == "auto" else name)
    except (RuntimeError, ValueError):
        return False
    if device.type != "cuda":
        return True
    if not torch.backends.cuda.is_built():
        return f"this torch ({torch.__version__}) has no CUDA; use 'cpu' or 'auto'"
    count = torch.cuda.device_count()  # asks NVML where it can, so that forked workers can still use CUDA
    if count == 0:
        return "this machine has no CUDA device; use 'cpu' or 'auto'"
    if device.index is not None and device.index >= count:
        return f"this machine has {count} CUDA device(s), cuda:0 to cuda:{count - 1}"
    return True


@dataclass(frozen=True)
class FeatureSettings(Section):
    """How graphs become the network's inputs."""

    hops: int | Literal["all"] = setting(
        1, "layout pruning: neighbours kept this many hops from the configurable nodes, or whole graphs",
        low=1, high=5, choices=("all",))
    train_configs: int | Literal["all"] = setting(
        1000, "configs per training graph kept in the cache (evenly spaced), or all", low=2, choices=("all",))
    pad: bool = setting(True, "-1 padding of layouts and tile bounds")
    tile_shares: bool = setting(False, "tile: append to the config columns the share of each tiled dim one tile "
                                "covers, the kernel's tiles and the share one covers")


@dataclass(frozen=True)
class NetworkSettings(Section):
    """The network (:class:`models.gnn.net.RankNet`, which has no defaults of its own)."""

    attention: bool = setting(False, "cross-configuration attention in every layer")
    hidden: int = setting(32, "channels of every layer", low=1, high=1024)
    layers: int = setting(3, "message-passing layers", low=1, high=16)
    opcode_dim: int = setting(16, "width of the opcode embedding", low=1, high=256)
    bidirectional: bool = setting(True, "message passing producer-to-consumer and back, with separate weights")
    join: str = setting("early", "tile: the config joined to every node (early) or after pooling (late)",
                        choices=("early", "late"))
    dropout: float = setting(0.0, "dropout probability", low=0, high=0.99)
    dim_tokens: bool = setting(False, "layout: each config slot is encoded by the dimension it names")


@dataclass(frozen=True)
class TrainingSettings(Section):
    """The optimisation: AdamW with warm-up and a cosine schedule, early stopping, the extras at its end."""

    loss: str = setting("hinge", "the ranking loss", choices=tuple(LOSSES))
    lr: float = setting(1e-2, "AdamW peak learning rate (cosine schedule)", low=0, high=10, low_open=True)
    weight_decay: float = setting(1e-5, "AdamW weight decay", low=0, high=10)
    pair_tolerance: float = setting(
        0.0, "pairwise losses: configs whose runtimes differ by at most this fraction count as ties", low=0)
    epochs: int = setting(10, "training epochs at most (early stopping may end sooner)", low=1, high=100_000)
    patience: int = setting(4, "epochs without a better valid score before stopping", low=0, high=100_000)
    configs_per_graph: int = setting(64, "configs sampled per graph per step", low=2, high=10_000)
    steps_per_graph: int = setting(8, "training steps per graph per epoch, each with freshly sampled configs",
                                   low=1, high=100_000)
    graphs_per_step: int = setting(1, "graphs per optimiser step over all processes, their losses averaged",
                                   low=1, high=100_000)
    segment_size: int | None = setting(
        None, "Graph Segment Training with segments of this many nodes (None: whole graphs)", low=2)
    backprop_segments: int = setting(1, "segments backpropagated per step under Graph Segment Training", low=1)
    keep_prob: float = setting(0.5, "Graph Segment Training: keep probability of stale segments", low=0, high=1,
                               low_open=True)
    gst_finetune_epochs: int = setting(
        0, "Graph Segment Training: epochs fine-tuning the head alone (0: off)", low=0, high=100_000)
    swa_epochs: int = setting(0, "average the weights of the last this-many epochs (0: off)", low=0, high=100_000)
    refit: bool = setting(False, "after early stopping, train again on train and valid for the test predictions")
    seed: int = seed_setting("seeds initialisation and sampling")
    init_from: str = setting(
        "", "a warm start: each network starts from the weights of this saved GNN run, whose column selection and "
            "normalisation the fit reuses (its network settings must be the fit's); empty: from scratch",
        allowed="a saved GNN run's folder, its model.json, or a folder of runs holding the collection's; '' for none")
    valid_configs: int | None = setting(
        None, "the per-epoch validation scores at most this many configs of each valid graph the valid protocol "
              "does not choose configs of (a fixed draw; None: all of them)", low=2)


@dataclass(frozen=True)
class PredictSettings(Section):
    """Scoring configs: in validation (which picks the kept epoch) and prediction."""

    predict_batch: int = setting(128, "configs per batch at prediction (exactly this many with attention)", low=1,
                                 high=10_000)
    predict_context: str = setting(DEFAULT_PREDICT_CONTEXT,
                                   "with attention: what each config is compared with at prediction",
                                   choices=tuple(PREDICT_CONTEXTS))
    reference_configs: int = setting(DEFAULT_REFERENCE_CONFIGS, "configs drawn per reference set at prediction",
                                     low=1, high=100_000)
    tta: int = setting(DEFAULT_TTA, "with attention: random orderings or reference sets averaged at prediction",
                       low=1, high=64, runtime=True)


@dataclass(frozen=True)
class RunSettings(Section):
    """How a model runs, not what one network learns: the seed ensemble, the device, the folders, the time cap."""

    seeds: int = setting(1, "a seed ensemble of this many networks, their rank-normalised scores averaged", low=1,
                         high=16)
    device: str = setting("auto", "where to train and predict", runtime=True,
                          allowed="'auto' (CUDA if available), 'cpu', 'cuda' or 'cuda:N'", valid=_is_device)
    runs_dir: str | None = setting("runs", "training runs (settings, checkpoints, curves) go to "
                                           "runs_dir/<model>/<collection> (None: none kept)", runtime=True)
    cache_dir: str = setting(".cache/processed", "the processed-graph cache", runtime=True)
    max_seconds: float | None = setting(None, "a training time cap per collection (None: none)", low=0,
                                        runtime=True)


@dataclass(frozen=True)
class GNNConfig:
    """Every setting of a GNN model, as a tree: :attr:`features`, :attr:`network`, :attr:`train`, :attr:`predict`
    and :attr:`run` (see each section). Frozen: a changed value that trains differently starts a run over instead of
    resuming it (:func:`models.gnn.runs.run_settings`).

    ``kind`` (``tile`` or ``layout``) comes from the collection, ``num_features`` and ``data_key`` from the data
    (set by :meth:`models.gnn.model.GNNModel.fit`); they are not settings.
    """

    kind: str = "layout"
    features: FeatureSettings = section(FeatureSettings)
    network: NetworkSettings = section(NetworkSettings)
    train: TrainingSettings = section(TrainingSettings)
    predict: PredictSettings = section(PredictSettings)
    run: RunSettings = section(RunSettings)
    num_features: int = 0  # node feature columns after the feature pipeline
    data_key: str = ""  # identifies the training data (pipeline, files and their content): other data starts over

    def __post_init__(self) -> None:
        if self.kind not in ("tile", "layout"):
            raise ValueError(f"kind must be 'tile' or 'layout'; got {self.kind!r}")
        loss_function(self.train.loss, self.train.pair_tolerance)  # refuses a tolerance it cannot take
        if self.train.gst_finetune_epochs and self.train.segment_size is None:
            raise ValueError("train.gst_finetune_epochs fine-tunes the head after Graph Segment Training: set "
                             "train.segment_size too (full-graph training has no stale embeddings to make up for)")

    @classmethod
    def of(cls, kind: str = "layout", num_features: int = 0, data_key: str = "", **values: Any) -> GNNConfig:
        """The defaults of ``kind`` with ``values`` (by name or ``section.name``) in their place."""
        return tree.updated(cls(kind=kind, num_features=num_features, data_key=data_key), values)

    def with_(self, **values: Any) -> GNNConfig:
        """This tree with ``values`` (by name) in place (:func:`models.settings.updated`)."""
        return tree.updated(self, values)

    def make_net(self) -> RankNet:
        n = self.network
        return RankNet(self.kind, self.num_features, hidden=n.hidden, layers=n.layers, opcode_dim=n.opcode_dim,
                       bidirectional=n.bidirectional, attention=n.attention, join=n.join, dropout=n.dropout,
                       dim_tokens=n.dim_tokens,
                       tile_columns=TILE_CONFIG_COLUMNS + (len(TILE_SHARE_NAMES) if self.features.tile_shares else 0))

    @property
    def uses_gst(self) -> bool:
        return self.train.segment_size is not None

    @property
    def max_train_configs(self) -> int | None:
        """``features.train_configs`` as the cache's ``max_configs`` (``None`` for every config)."""
        return None if self.features.train_configs == "all" else self.features.train_configs


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


KIND_PRESETS: dict[str, dict[str, Any]] = {
    "layout": {"network.dim_tokens": True},
    "tile": {"network.hidden": 64, "train.loss": "listmle", "train.lr": 1e-3,
             "train.epochs": 12, "train.patience": 3, "train.configs_per_graph": 32, "train.steps_per_graph": 1,
             "features.hops": "all", "features.train_configs": "all", "train.valid_configs": 500, "run.seeds": 2,
             "features.tile_shares": True},
}
"""Where a kind's defaults differ from the tree's (which are the layout collections', but for the layout-only
``network.dim_tokens``), sized to train all five
collections of the demo world on a 2-core CPU within the ``make submit`` budget. A tile epoch validates on at most
500 configs of each valid kernel: real kernels hold up to about 10,000, and scoring all of them every epoch cost more
than the epoch's training at the real counts, for the same kept epochs on the bench worlds and the full-scale tile
parts it was measured on (lab/journal.md, "The real counts in three hours"). Tile trains a seed ensemble of 2
networks: on the real tile records one network's first pick of a kernel varied with the world and the training
seed, and two were never worse on any world and kernel measured; on the bench worlds they were within the noise of
one (lab/journal.md, "The tile seed ensemble"). Tile configs carry the shares of the arrays they cut
(``features.tile_shares``): a bound counts hardware tiles, and whether 24 of them is a whole kernel dim, which a TPU
keeps on chip, or a third of one is what the real records' runtimes turned on (lab/journal.md, "the kernel's
residency and the tile shares")."""

COLLECTION_PRESETS: dict[str, dict[str, Any]] = {
    "layout:xla:default": {"run.seeds": 3},
    "layout:xla:random": {"train.steps_per_graph": 32, "run.seeds": 2},
}
"""Where a collection's defaults differ from its kind's in :data:`KIND_PRESETS`. The xla collections hold a third of
the nlp ones' train graphs (61-69 real ones against 198-207; on a bench world the same 61-69 against 28), and their
fits under-fit their own train graphs and vary with the training seed. On xla:random, 32 steps per graph and epoch
instead of 8 scored higher on every bench world and training seed pair it was measured on; on xla:default the same
change was within its noise, so it keeps the kind's 8 (lab/journal.md, "Bench xla: decision links and more steps",
"as many train graphs as the real data"). A seed ensemble of 3 networks scored at least as high as one network on
every bench world and xla collection it was measured on (lab/journal.md, "Bench xla: the seed ensemble"). On
xla:random, whose fit is the pipeline's longest at the real counts, the ensemble is 2 networks: a third added little
on the calibrated bench worlds for half as much training again, which the 3-hour target on 2 cores could not
afford (lab/journal.md, "The real counts in three hours, second round"). The demo world trains with the kind's
values instead (:func:`quick_settings`)."""


def default_config(of: str | Collection) -> GNNConfig:
    """The default settings of a kind (``"tile"``, ``"layout"``) or of a collection (its kind's, with its
    :data:`COLLECTION_PRESETS`)."""
    if of in ("tile", "layout"):
        return GNNConfig.of(str(of), **KIND_PRESETS[str(of)])
    collection = Collection(of)
    return GNNConfig.of(collection.kind, **KIND_PRESETS[collection.kind],
                        **COLLECTION_PRESETS.get(collection.value, {}))


DEFAULTS: dict[str, GNNConfig] = {kind: default_config(kind) for kind in ("tile", "layout")}
"""Each kind's default settings; ``num_features`` and ``data_key`` are filled in from the data."""


def quick_settings(collection: str | Collection) -> dict[str, Any]:
    """The settings that give a collection back its kind's defaults where :data:`COLLECTION_PRESETS` raised them:
    what a quick run (the demo world, which ``make submit`` must finish in 5 minutes) trains with."""
    collection = Collection(collection)
    return {key: tree.get(DEFAULTS[collection.kind], key) for key in COLLECTION_PRESETS.get(collection.value, {})}


def from_flat(kind: str, values: dict[str, Any]) -> GNNConfig:
    """The tree of settings stored flat by name (a model or run saved by a version before the tree), without the
    :data:`RETIRED_SETTINGS` it holds off.

    Raises:
        ValueError: a retired idea on, or a name this version does not know.
    """
    values = {k: v for k, v in without_retired(values).items() if k not in ("kind",)}
    plain = {k: values.pop(k) for k in ("num_features", "data_key") if k in values}
    return GNNConfig.of(kind, **plain, **values)
