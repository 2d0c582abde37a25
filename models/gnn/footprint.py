"""What a GNN fit needs in memory, estimated before its first step, and refused when this process cannot have it.

Every hyper-parameter has a range well above the presets, but their product is the memory of a fit. A fit goes
through three phases, and the estimate is the largest of them:

* training: the network's weights with their gradients and AdamW's two moments, the copies a run keeps (the best
  epoch's, the last ``swa_epochs`` epochs' for weight averaging, the seed ensemble's networks already trained), and
  its largest step: ``configs_per_graph`` configs of a graph, each with a state per node, ``hidden`` channels wide,
  through ``layers`` layers, all kept for the backward pass (more with cross-config attention); under Graph Segment
  Training the history table of every segment's sums and a step's ``graphs_per_step`` graphs' new sums; and the
  per-epoch validation pass, ``predict_batch`` configs at a time;
* saving: the fitted model is written as JSON, every weight of every network (``seeds``, twice with ``refit``) as
  a number in a list, all at once;
* prediction: every network built beside its stored weights, a prediction batch, and with attention the ``tta``
  reference sets of each network (``reference_configs`` configs each, at most
  :data:`~models.gnn.infer.REFERENCE_WINDOW`).

The graphs the fit reads (whole with ``features.hops='all'``, every config with ``features.train_configs='all'``)
count through their sizes. A fit that would need more memory than the machine (or the process's address-space or
cgroup limit) leaves it is refused in one line naming what the memory goes to and the settings to lower, instead
of ending in an out-of-memory error minutes later.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from competition.limits import memory_available
from models.gnn.config import GNNConfig
from models.gnn.infer import REFERENCE_WINDOW
from models.gnn.steps import Item

ACTIVATION_BYTES = 32
"""Bytes of kept activations per config, node, channel and layer (the input projection counting as one) of a
training step: about eight float32 tensors of that size per layer (the two message directions, the norm, the
activation, the residual) live until the backward pass."""
ATTENTION_BYTES = 16
"""The same, added by cross-configuration attention: its softmax weights, their product with the states and the two
products that mix them are kept for the backward pass too."""
PREDICT_BYTES = 8
"""The same at prediction, where a layer's inputs are freed once its output is computed."""
STATE_BYTES = 20
"""Bytes per weight of the network being trained: the weights, their gradients, AdamW's two moments and the best
epoch's copy."""
KEPT_BYTES = 4
"""Bytes per weight of each other copy of a network kept whole (an epoch's weights kept for averaging, the seed
ensemble's networks, a network built for prediction)."""
SAVE_BYTES = 160
"""Bytes per weight, at once, of a fitted model written as JSON (:meth:`models.base.RankingModel.save`): each
float32 weight becomes a Python float in an object array and in a list, then its text in the encoder's chunks;
reading the file back takes less."""
CODE_BYTES = 8
"""Bytes per config and configurable node of a reference set's codes (int64)."""
SUM_BYTES = 4
"""Bytes per config, segment and channel of Graph Segment Training's history table (float32 sums)."""


@dataclass(frozen=True)
class Part:
    """One thing a phase of the fit holds in memory: its bytes, what it is in words, the settings that grow it."""

    nbytes: int
    what: str
    settings: tuple[str, ...]


def network_weights(cfg: GNNConfig) -> int:
    """The weights of the network ``cfg`` builds, counted on the meta device (nothing allocated)."""
    with torch.device("meta"):
        net = cfg.make_net()
    return sum(p.numel() for p in net.parameters())


def networks_kept(cfg: GNNConfig) -> int:
    """The networks a fitted model holds: one per seed of the ensemble, twice that with ``train.refit``."""
    return cfg.run.seeds * (2 if cfg.train.refit else 1)


def _segments(cfg: GNNConfig, nodes: int) -> int:
    """How many segments Graph Segment Training cuts a graph of ``nodes`` nodes into (1: trained whole)."""
    size = cfg.train.segment_size
    return 1 if size is None or size >= nodes else math.ceil(nodes / size)


def _largest(parts: Sequence[Part]) -> Part | None:
    return max(parts, key=lambda p: p.nbytes, default=None)


def _training(cfg: GNNConfig, weights: int, items: Sequence[Item], valid: Sequence[Item]) -> list[Part]:
    n, t = cfg.network, cfg.train
    layers = n.layers + 1  # the input projection counts as a layer
    per_cell = ACTIVATION_BYTES + (ATTENTION_BYTES if n.attention else 0)
    steps: list[Part] = []
    for item in items:
        configs = min(t.configs_per_graph, item.num_configs)
        nodes = item.num_nodes
        if cfg.uses_gst:
            nodes = min(nodes, t.segment_size * t.backprop_segments)
        attention = " with cross-config attention (network.attention)" if n.attention else ""
        steps.append(Part(configs * nodes * n.hidden * layers * per_cell,
                          f"a training step on {item.key}: {configs:,} configs (train.configs_per_graph) x "
                          f"{nodes:,} nodes x {n.hidden:,} channels (network.hidden) x {n.layers} layers "
                          f"(network.layers){attention}",
                          ("train.configs_per_graph", "network.hidden", "network.layers")
                          + (("train.segment_size",) if cfg.uses_gst else ())))
    for item in valid:
        configs = cfg.predict.predict_batch if n.attention else min(cfg.predict.predict_batch, item.num_configs)
        steps.append(Part(configs * item.num_nodes * n.hidden * layers * PREDICT_BYTES,
                          f"a validation batch on {item.key}: {configs:,} configs (predict.predict_batch) x "
                          f"{item.num_nodes:,} nodes x {n.hidden:,} channels (network.hidden) x {n.layers} layers "
                          "(network.layers)",
                          ("predict.predict_batch", "network.hidden", "network.layers")))
    parts = [p for p in [_largest(steps)] if p is not None]
    parts.append(Part(weights * STATE_BYTES,
                      f"{weights:,} weights (network.hidden, network.layers, network.opcode_dim) with their "
                      "gradients, AdamW's two moments and the best epoch's copy",
                      ("network.hidden", "network.layers", "network.opcode_dim")))
    if t.swa_epochs:
        # The last swa_epochs epochs' weights (an epoch's snapshot each), then their average and a network built
        # from it to score it.
        averaged = min(t.swa_epochs, t.epochs)
        parts.append(Part(weights * (averaged + 2) * KEPT_BYTES,
                          f"{averaged:,} epochs' copies for weight averaging (train.swa_epochs)",
                          ("train.swa_epochs",)))
    if cfg.uses_gst and t.gst_finetune_epochs:
        parts.append(Part(weights * 2 * KEPT_BYTES, "the head fine-tuning's network and its weights "
                          "(train.gst_finetune_epochs)", ("train.gst_finetune_epochs",)))
    others = networks_kept(cfg) - 1
    if others:
        parts.append(Part(weights * others * KEPT_BYTES,
                          f"{others} other networks' copies (run.seeds{', train.refit' if t.refit else ''})",
                          ("run.seeds",) + (("train.refit",) if t.refit else ())))
    if cfg.uses_gst:
        cut = [(it, _segments(cfg, it.num_nodes)) for it in items]
        cut = [(it, s) for it, s in cut if s > 1]
        if cut:
            table = sum(s * it.num_configs for it, s in cut) * n.hidden * SUM_BYTES
            parts.append(Part(table, f"Graph Segment Training's history table: {sum(s for _, s in cut):,} segments "
                                     f"(train.segment_size) x their graphs' configs x {n.hidden:,} channels "
                                     "(network.hidden)", ("train.segment_size", "network.hidden")))
            # A step's new sums are kept until the step ends: every segment of each of its graphs.
            widest = max(s * min(t.configs_per_graph, it.num_configs) for it, s in cut)
            parts.append(Part(t.graphs_per_step * widest * n.hidden * SUM_BYTES,
                              f"a step's segment sums: {t.graphs_per_step:,} graphs (train.graphs_per_step) x up "
                              f"to {widest:,} segments' configs (train.configs_per_graph) x {n.hidden:,} channels",
                              ("train.graphs_per_step", "train.configs_per_graph", "network.hidden")))
    return parts


def _saving(cfg: GNNConfig, weights: int) -> list[Part]:
    kept = networks_kept(cfg)
    return [Part(weights * kept * (KEPT_BYTES + SAVE_BYTES),
                 f"the fitted model written as JSON: {weights:,} weights (network.hidden, network.layers) x {kept} "
                 f"networks (run.seeds{', train.refit' if cfg.train.refit else ''}) at about "
                 f"{KEPT_BYTES + SAVE_BYTES} bytes a weight",
                 ("network.hidden", "network.layers", "run.seeds") + (("train.refit",) if cfg.train.refit else ()))]


def _prediction(cfg: GNNConfig, weights: int, items: Sequence[Item], valid: Sequence[Item]) -> list[Part]:
    n, p = cfg.network, cfg.predict
    kept = networks_kept(cfg)
    parts = [Part(weights * kept * 2 * KEPT_BYTES,
                  f"{kept} networks (run.seeds) built beside their stored weights, {weights:,} weights each",
                  ("run.seeds", "network.hidden", "network.layers"))]
    batches: list[Part] = []
    for item in [*items, *valid]:
        configs = p.predict_batch if n.attention else min(p.predict_batch, item.num_configs)
        size = configs * item.num_nodes * n.hidden * (n.layers + 1) * PREDICT_BYTES
        references = 0
        if (n.attention and cfg.kind == "layout" and p.predict_context == "reference"
                and item.num_configs > p.predict_batch):
            # Each network keeps, per reference set (tta) and attention layer, a sum per node and channel, built
            # from the set's configs' codes (at most REFERENCE_WINDOW of them, the plan batching their states).
            drawn = min(p.reference_configs, REFERENCE_WINDOW, item.num_configs)
            references = cfg.run.seeds * p.tta * item.num_nodes * (n.layers * n.hidden * 4 + drawn * CODE_BYTES)
        what = (f"a prediction batch on {item.key}: {configs:,} configs (predict.predict_batch) x "
                f"{item.num_nodes:,} nodes x {n.hidden:,} channels (network.hidden) x {n.layers} layers "
                "(network.layers)")
        if references:
            what += (f", and {p.tta} reference sets (predict.tta) of up to {drawn:,} configs "
                     "(predict.reference_configs) per network")
        batches.append(Part(size + references, what,
                            ("predict.predict_batch", "network.hidden", "network.layers")
                            + (("predict.tta", "predict.reference_configs") if references else ())))
    return [*parts, *[b for b in [_largest(batches)] if b is not None]]


def fit_parts(cfg: GNNConfig, items: Sequence[Item], valid: Sequence[Item] = ()) -> list[Part]:
    """What the largest phase of a fit (training, saving or prediction) holds in memory, the largest part first.

    ``items`` and ``valid`` need only ``key``, ``num_nodes`` and ``num_configs``.
    """
    weights = network_weights(cfg)
    phases = [_training(cfg, weights, items, valid), _saving(cfg, weights), _prediction(cfg, weights, items, valid)]
    largest = max(phases, key=lambda parts: sum(p.nbytes for p in parts))
    return sorted((p for p in largest if p.nbytes), key=lambda p: -p.nbytes)


def fit_bytes(cfg: GNNConfig, items: Sequence[Item], valid: Sequence[Item] = ()) -> tuple[int, str]:
    """The estimated peak memory of a fit (:func:`fit_parts`) and what it is made of, in words, the largest part
    first."""
    parts = fit_parts(cfg, items, valid)
    return sum(p.nbytes for p in parts), ", ".join(p.what for p in parts) or "nothing"


def settings_to_lower(parts: Sequence[Part]) -> list[str]:
    """The settings that grow ``parts``, those of the largest part first, each once."""
    return list(dict.fromkeys(s for p in sorted(parts, key=lambda p: -p.nbytes) for s in p.settings))


def check_fit_memory(cfg: GNNConfig, items: Sequence[Item], valid: Sequence[Item] = (), name: str = "") -> None:
    """Refuse a fit whose estimated memory (:func:`fit_bytes`) is more than this process can still allocate
    (:func:`competition.limits.memory_available`), before the network is built.

    Raises:
        ValueError: naming the estimate, what it is made of, what is available and the settings to lower.
    """
    available = memory_available()
    if available is None:
        return
    parts = fit_parts(cfg, items, valid)
    need = sum(p.nbytes for p in parts)
    if need > available:
        lower = settings_to_lower(parts)
        hint = "" if cfg.uses_gst or cfg.kind != "layout" else " (or set train.segment_size)"
        raise ValueError(f"{name + ': ' if name else ''}these settings need about {_gb(need)} of memory "
                         f"({', '.join(p.what for p in parts)}), more than the {_gb(available)} this process can "
                         f"still use: lower {_or(lower)}{hint}")


def _or(names: Sequence[str]) -> str:
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"


def _gb(n: int) -> str:
    return f"{n / 2**30:,.1f} GB"
