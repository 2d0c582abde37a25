"""What a GNN fit needs in memory, estimated before its first step, and refused when this process cannot have it.

Every hyper-parameter has a range well above the presets, but their product is the memory of a training step:
``configs_per_graph`` configs of a graph, each with a state per node, ``hidden`` channels wide, through ``layers``
layers, all kept for the backward pass; and the networks' weights grow with ``hidden`` squared, ``layers`` and
``seeds``. The largest values together need several GB before the first graph is read, and a large
``configs_per_graph`` alone needs far more on a large real graph; a fit that would need more memory than the
machine (or the process's address-space or cgroup limit) leaves it is refused in one line naming the settings,
instead of ending in an out-of-memory kill minutes later.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from competition.limits import memory_available
from models.gnn.config import GNNConfig
from models.gnn.steps import Item

ACTIVATION_BYTES = 32
"""Bytes of kept activations per config, node, channel and layer (the input projection counting as one) of a
training step: about eight float32 tensors of that size per layer (the two message directions, the norm, the
activation, the residual) live until the backward pass."""
PREDICT_BYTES = 8
"""The same at prediction, where a layer's inputs are freed once its output is computed."""
STATE_BYTES = 16
"""Bytes per weight of the network being trained: the weights, their gradients and AdamW's two moments."""
KEPT_BYTES = 4
"""Bytes per weight of each network kept whole beside it (the best epoch's weights, the seed ensemble's members)."""


def network_weights(cfg: GNNConfig) -> int:
    """The weights of the network ``cfg`` builds, counted on the meta device (nothing allocated)."""
    with torch.device("meta"):
        net = cfg.make_net()
    return sum(p.numel() for p in net.parameters())


def fit_bytes(cfg: GNNConfig, items: Sequence[Item], valid: Sequence[Item] = ()) -> tuple[int, str]:
    """The estimated peak memory of a fit (the networks' states, and its largest training or prediction step) and
    what it is made of, in words."""
    weights = network_weights(cfg)
    n = cfg.network
    states = weights * (STATE_BYTES + KEPT_BYTES * (1 + cfg.run.seeds))
    step, what = 0, "no step"
    for item in items:
        configs = min(cfg.train.configs_per_graph, item.num_configs)
        nodes = item.num_nodes
        if cfg.uses_gst:
            nodes = min(nodes, cfg.train.segment_size * cfg.train.backprop_segments)
        size = configs * nodes * n.hidden * (n.layers + 1) * ACTIVATION_BYTES
        if size > step:
            step, what = size, (f"a training step on {item.key}: {configs:,} configs (train.configs_per_graph) x "
                                f"{nodes:,} nodes x {n.hidden:,} channels (network.hidden) x {n.layers} layers "
                                "(network.layers)")
    for item in [*items, *valid]:
        configs = cfg.predict.predict_batch if n.attention else min(cfg.predict.predict_batch, item.num_configs)
        size = configs * item.num_nodes * n.hidden * (n.layers + 1) * PREDICT_BYTES
        if size > step:
            step, what = size, (f"a prediction batch on {item.key}: {configs:,} configs (predict.predict_batch) x "
                                f"{item.num_nodes:,} nodes x {n.hidden:,} channels (network.hidden) x {n.layers} "
                                "layers (network.layers)")
    return states + step, f"{what}, and {weights:,} weights (network.hidden, network.layers) in {1 + cfg.run.seeds} " \
                          "copies (run.seeds)"


def check_fit_memory(cfg: GNNConfig, items: Sequence[Item], valid: Sequence[Item] = (), name: str = "") -> None:
    """Refuse a fit whose estimated memory (:func:`fit_bytes`) is more than this process can still allocate
    (:func:`competition.limits.memory_available`), before the network is built.

    Raises:
        ValueError: naming the estimate, what it is made of, and what is available.
    """
    available = memory_available()
    if available is None:
        return
    need, what = fit_bytes(cfg, items, valid)
    if need > available:
        raise ValueError(f"{name + ': ' if name else ''}these settings need about {_gb(need)} of memory ({what}), "
                         f"more than the {_gb(available)} this process can still use: lower "
                         "train.configs_per_graph, predict.predict_batch, network.hidden, network.layers or run.seeds "
                         "(or set train.segment_size)")


def _gb(n: int) -> str:
    return f"{n / 2**30:,.1f} GB"
