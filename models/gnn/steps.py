"""What one training step and one validation pass of a GNN ranker do: the graphs as the trainer holds them
(:class:`Item`), the graphs of a step (:class:`Slot`) and their sampling, the forward of a graph, the step itself,
the valid metric, and prediction in batches.

Each optimiser step trains on ``graphs_per_step`` graphs (*slots*) and averages their losses. Launched by torchrun on
several processes (:mod:`models.gnn.distributed`), each rank trains its share of every step's slots and
``DistributedDataParallel`` all-reduces the gradients. A step computes the same whoever runs each slot: with one
graph per step the slot draws from the run's generators (as training always did); with more, every slot draws its
configs, GST segments and dropout from its own generators, seeded by numbers the run's generator draws on every
rank; and GST's history table is read as it was when the step began and updated when it ends, with every slot's
writes in slot order on every rank. So N processes of ``graphs_per_step`` G give the weights of one process of G,
within float rounding.

The valid metric is the collection's: mean Kendall tau (layout) or mean tile score (tile) over the valid graphs, each
:func:`competition.metrics.graph_score` of the predicted scores (ties broken by config index, as in a submission).
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import functools
import math
import random
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from competition.metrics import graph_score
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
from models.gnn.losses import LossFn
from models.gnn.net import RankNet, Segment

if TYPE_CHECKING:
    from models.gnn.config import GNNConfig

@dataclass
class Item:
    """One graph ready for the model: its segments and its configs (features and runtimes).

    ``y`` is what configs rank by (layout runtime in ns, tile normalised runtime); NaN when unknown. ``picks``: a
    valid graph's positions into its configs, repeats included, over which its metric is taken as the official
    evaluation takes it (:meth:`competition.protocol.ValidProtocol.picks`); ``None``: each config once.
    """

    key: str
    segments: list[Segment]
    config_feat: torch.Tensor
    y: torch.Tensor
    picks: np.ndarray | None = None
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


def validation_draw(item: Item, limit: int | None) -> Item:
    """``item`` as the per-epoch validation scores it: at most ``limit`` of its configs, a draw fixed by the graph's
    name (the same for every seed, run and machine), kept in file order; the whole item when ``limit`` is
    ``None``, when it has no more configs, or when the valid protocol chose its configs (``picks``)."""
    if validated_configs(item, limit) == item.num_configs:
        return item
    n = item.num_configs
    rng = np.random.default_rng(zlib.crc32(item.key.encode()))
    keep = torch.from_numpy(np.sort(rng.choice(n, size=limit, replace=False)))
    return replace(item, config_feat=item.config_feat[keep], y=item.y[keep])


def validated_configs(item: Item, limit: int | None) -> int:
    """How many configs of ``item`` the per-epoch validation scores (:func:`validation_draw`), without drawing."""
    if limit is None or item.picks is not None:
        return item.num_configs
    return min(item.num_configs, limit)


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

    def forward(self, item: Item, config_feat: torch.Tensor, positions: torch.Tensor, cfg: GNNConfig,
                table: StepTable, np_rng: np.random.Generator) -> torch.Tensor:
        if cfg.uses_gst and len(item.segments) > 1:
            scores, _ = gst_scores(self.net, item.segments, config_feat, positions, key=item.key, table=table,
                                   rng=np_rng, backprop=cfg.train.backprop_segments, keep_prob=cfg.train.keep_prob)
            return scores
        if self.net.kind == "layout" and cfg.network.dropout == 0:
            return dedup_scores(self.net, item.structure(self.net), config_feat)
        return self.net(item.segments, config_feat)


class FreshHeadScores(GraphScores):
    """The forward of the head fine-tuning after Graph Segment Training (``gst_finetune_epochs``, the GST paper's
    "+EFD"): every segment's sum computed afresh without gradients and added, the scores from the total, so the loss
    reaches the head alone. :func:`training_step` takes it as its forward (``ddp``), in
    ``DistributedDataParallel`` when launched on several processes; the caller puts the network in eval mode and
    its head in train mode."""

    def forward(self, item: Item, config_feat: torch.Tensor, positions: torch.Tensor, cfg: GNNConfig,
                table: StepTable, np_rng: np.random.Generator) -> torch.Tensor:
        with torch.no_grad():
            total = sum(self.net.segment_sum(s, config_feat) for s in item.segments)
        return self.net.score(total, item.num_nodes, config_feat)



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


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim``, or ``None`` where the C library has none (macOS, musl)."""
    name = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(name).malloc_trim if name else None
    except (OSError, AttributeError):
        return None


def release_heap() -> None:
    """Give the C heap's free pages back to the system (glibc's ``malloc_trim``; nothing elsewhere).

    Scoring a graph allocates and frees many large temporaries of varying sizes. glibc keeps freed blocks for
    reuse and grows the heap around the ones still in use, so a fit's resident size rose with every graph scored
    instead of staying at the largest graph's need (lab/journal.md, "The real counts in three hours, second
    round")."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


def _releases_heap(fn: Callable[..., np.ndarray]) -> Callable[..., np.ndarray]:
    """``fn``, then :func:`release_heap`."""
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> np.ndarray:
        try:
            return fn(*args, **kwargs)
        finally:
            release_heap()
    return wrapper


@_releases_heap
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


def evaluate(net: RankNet, items: Sequence[Item], cfg: GNNConfig, device: torch.device, *,
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
        scores = predict_scores(net, item.segments, item.config_feat, batch=cfg.predict.predict_batch, orderings=orderings,
                                seed=cfg.train.seed, device=device, plan=plan, mixed_precision=False,
                                context=cfg.predict.predict_context, reference_configs=cfg.predict.reference_configs)
        mine[i] = graph_score(cfg.kind, y, scores=scores, picks=item.picks)
    parts = distributed.gather((mine, cut))
    if any(part_cut for _, part_cut in parts):
        raise ValidationCut
    every = {i: v for part, _ in parts for i, v in part.items()}
    values = [every[i] for i in sorted(every)]
    return float(np.mean(values)) if values else float("nan")


@contextlib.contextmanager
def dropout_seed(seed: int | None, device: torch.device) -> Iterator[None]:
    """Inside: the global RNG (which dropout draws from) seeded with ``seed``; outside, as it was. Nothing when
    ``seed`` is ``None``."""
    if seed is None:
        yield
        return
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else [], device_type=device.type):
        torch.manual_seed(seed)
        yield


def training_step(net: RankNet, slots: Sequence[Slot], cfg: GNNConfig, opt: torch.optim.Optimizer,
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
        with sync, dropout_seed(slot.seed, device):
            k = min(cfg.train.configs_per_graph, item.num_configs)
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


def visit_order(steps_per_epoch: int, cfg: GNNConfig, graphs: int, gen: torch.Generator) -> list[int]:
    """An epoch's graph index for each of its ``steps_per_epoch * graphs_per_step`` slots, in a shuffled order drawn
    from ``gen``: every one of ``graphs`` graphs visited equally often (``steps_per_graph`` times; the last step
    topped up), or, when there are fewer slots than graphs, a random subset of the graphs once each."""
    slots = steps_per_epoch * cfg.train.graphs_per_step
    if slots < graphs:
        return torch.randperm(graphs, generator=gen)[:slots].tolist()
    return torch.randperm(slots, generator=gen).remainder(graphs).tolist()


def step_slots(order: Sequence[int], step: int, usable: Sequence[Item], cfg: GNNConfig, gen: torch.Generator,
               np_rng: np.random.Generator) -> list[Slot]:
    """This process's slots of an epoch's ``step`` (the step's slot ``j`` goes to rank ``j % world``), from the
    epoch's ``order`` of graph indices.

    With one graph per step the slot draws from the run's ``gen`` and ``np_rng``; with more, the step's slot seeds
    are drawn from ``gen`` on every rank, so every rank's ``gen`` stays the same.
    """
    per_step = cfg.train.graphs_per_step
    first = step * per_step
    if per_step == 1:
        return [Slot(first, usable[order[first]], gen, np_rng)]
    seeds = torch.randint(2**62, (per_step,), generator=gen).tolist()
    return [Slot.seeded(first + j, usable[order[first + j]], seeds[j])
            for j in range(distributed.rank(), per_step, distributed.world_size())]


def cosine_schedule(total_steps: int, warmup: int) -> Callable[[int], float]:
    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        progress = min(1.0, (step - warmup) / max(1, total_steps - warmup))
        return 0.01 + 0.99 * 0.5 * (1 + math.cos(math.pi * progress))
    return factor



def average_states(states: Sequence[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """The element-wise mean of ``states`` (state dicts of one network): float tensors averaged, the others
    (integer or bool buffers) taken from the last."""
    last = states[-1]
    return {k: torch.stack([s[k] for s in states]).mean(0) if v.is_floating_point() else v.clone()
            for k, v in last.items()}


