"""Fast prediction for layout graphs: the same scores as :meth:`models.gnn.net.RankNet.forward`, computed once per
distinct config of each connected component instead of once per config and node.

Why it is exact. A layout config enters the network only at the configurable nodes, and messages only travel along
edges, so the states of a connected component of the (pruned) graph depend on the configs of the configurable
slots in that component and on nothing else of the config. Cross-configuration attention mixes the configs of a
batch, but only per node and channel through the softmax denominator ``sum over the batch of exp(h / T)``, which
is the same sum taken over the component's distinct configs weighted by how many configs of the batch share each.
So for a batch of ``B`` configs each component ``c`` is run for its ``U_c <= B`` distinct keys (the values of its
slots) only, and a config's pooled sum is the sum over components of the component sum of its key. Components
without a configurable slot are the same for every config: they are run once per graph (:class:`LayoutPlan`).

On the largest synthetic layout graphs (after 1-hop pruning, components of a few nodes each), a batch of
random-search configs holds few distinct keys per component, so the work per batch drops many times over
(lab/journal.md, "Prediction throughput"); default-search collections, where most nodes keep their
layout, gain much more. A graph that is one big component (``hops="all"`` on a connected program) gains nothing but
costs no more than the plain forward pass.

The results equal :meth:`RankNet.forward` in eval mode up to float rounding (sums are taken in another order, the
SAGE linear maps are applied before the neighbour means, ``A (z W) = (A z) W``, and the softmax is shifted by a
shared maximum where that cannot underflow; lab/journal.md, "figures moved out of
docstrings").

Rows are laid out node-major: node ``v`` of a component with ``U`` keys owns rows ``off[v] .. off[v] + U - 1``, row
``off[v] + u`` being its state under the component's key ``u``; per-node reductions over the keys (attention) are
then contiguous segment reductions.
"""

from __future__ import annotations

import math
import queue
import threading
import warnings
from collections.abc import Iterator

import numpy as np
import numpy.typing as npt
import torch
import torch.nn.functional as F
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

from competition.reader import LayoutGraph
from models.gnn.layers import GNNBlock
from models.gnn.net import (
    CONFIG_VALUES,
    INPUT_CLIP,
    RankNet,
    Segment,
    code_values,
    layout_codes,
)

_GROUP = 6  # config values packed per float32 product: 7**6 < 2**24, so the partial codes are exact in float32
_POWERS6 = (CONFIG_VALUES ** np.arange(_GROUP)).astype(np.float32)
_CODE_ROWS = 16  # configs converted to codes per step (small enough for the temporaries to stay in cache)
_EXP_RANGE = 80.0  # exp(-80) is still a normal float32
ROW_BUDGET = 1 << 14
"""Rows (a node under one key) run through the layers at once on the CPU: 2 MiB per float32 ``[rows, 32]``
tensor, so that the dozen passes of a layer over them stay in cache (faster than larger blocks: lab/journal.md,
"figures moved out of docstrings")."""
CUDA_ROW_BUDGET = 1 << 20
"""The same on a GPU, where fewer, larger kernels pay."""
KEY_BUDGET = 1 << 20
"""Component x config keys worked out at once (8 MiB of int64 per array of the sort)."""


PREDICT_CONTEXTS = ("reference", "batches")
"""How cross-configuration attention sees the other configs at prediction: ``reference``, every config against one
fixed, seeded set of configs of its graph standing for ``predict_batch - 1`` others (:class:`ReferenceContext`;
``tta`` reference sets averaged); ``batches``, random batches of exactly ``predict_batch`` configs (``tta`` random
orderings averaged)."""
DEFAULT_PREDICT_CONTEXT = "reference"
DEFAULT_REFERENCE_CONFIGS = 1024
"""Configs drawn per reference set. On demo valid and test graphs (``python -m benchmarks.gnn
--predict-quality``), one reference set of 1,024 configs scored above four orderings of random batches of 128, one
of 127 configs the same as they did (RESULTS.md, "GNN prediction settings and quality")."""
DEFAULT_TTA = 1
"""Reference sets (or random orderings) averaged at prediction: one large reference set is as good as four small
ones at a quarter of the cost (RESULTS.md, "GNN prediction settings and quality")."""


REFERENCE_WINDOW = 4096
"""Reference configs are drawn among a graph's first this many configs (file order), so that streamed prediction
takes them from its first block instead of reading the file twice (a second pass cost much of the prediction
time: lab/journal.md, "Prediction throughput"). Valid graphs under the default protocol and test graphs (1,000
configs) are drawn from whole."""


def reference_rows(num_configs: int, size: int, seed: int, draw: int = 0) -> npt.NDArray[np.int64]:
    """The configs of a graph's ``draw``-th reference set: ``min(size, window)`` distinct rows, sorted, among the
    first ``window = min(num_configs, REFERENCE_WINDOW)``, drawn from ``(seed, draw, num_configs)`` alone (the same
    for a graph however its configs are streamed)."""
    window = min(num_configs, REFERENCE_WINDOW)
    rng = np.random.default_rng([seed, draw, num_configs])
    return np.sort(rng.choice(window, size=min(size, window), replace=False)).astype(np.int64)


def reference_sets(plan: LayoutPlan, codes: torch.Tensor, num_configs: int, *, batch: int, drawn: int, seed: int,
                   draws: int) -> list[ReferenceContext]:
    """The ``draws`` reference sets of a graph of ``num_configs`` configs: ``drawn`` configs each
    (:func:`reference_rows`), standing for ``batch - 1`` others.

    Args:
        plan: the graph's plan.
        codes: the codes of the graph's configs from its first one on: all of them, or at least the first
            ``min(num_configs, REFERENCE_WINDOW)`` (a streamed graph's first block).
    """
    return [ReferenceContext(plan, codes[torch.from_numpy(reference_rows(num_configs, drawn, seed, d))
                                         .to(codes.device)].to(plan.device), batch - 1)
            for d in range(max(draws, 1))]


def config_codes(config_feat: npt.NDArray[np.float32] | torch.Tensor) -> torch.Tensor:
    """Each slot's 18 config values packed into one int64 code: ``sum_i d_i * 7**i`` with ``d_i`` the embedding
    index :meth:`RankNet.segment_sum` uses (``trunc(value) + 1`` clamped to 0..6).

    Two slots get the same code exactly when the network sees the same config values at them.

    Args:
        config_feat: float or int8 ``[C, NC, 18]`` (numpy, possibly read-only, or torch on the CPU).

    Returns:
        int64 ``[C, NC]`` on the CPU.
    """
    a = config_feat.numpy() if isinstance(config_feat, torch.Tensor) else np.asarray(config_feat)
    if a.dtype.kind != "f":  # int8 from the cache
        a = a.astype(np.float32)
    c, nc = a.shape[0], a.shape[1]
    out = np.empty((c, nc), dtype=np.int64)
    scale = np.array([1, CONFIG_VALUES ** _GROUP, CONFIG_VALUES ** (2 * _GROUP)], dtype=np.int64)
    for i in range(0, c, _CODE_ROWS):
        t = np.trunc(a[i:i + _CODE_ROWS])
        np.clip(t, -1, CONFIG_VALUES - 2, out=t)
        t += 1
        parts = t.reshape(t.shape[0], nc, 3, _GROUP) @ _POWERS6  # [rows, NC, 3], exact integers in float32
        out[i:i + _CODE_ROWS] = parts.astype(np.int64) @ scale
    return torch.from_numpy(out)


def _dense_rank(keys: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per row of ``keys`` ``[M, B]``: each entry's rank among the row's distinct values (0, 1, ...), and the
    number of distinct values per row ``[M]``."""
    sorted_keys, order = keys.sort(dim=1)
    new = torch.ones_like(sorted_keys)
    new[:, 0] = 0
    new[:, 1:] = (sorted_keys[:, 1:] != sorted_keys[:, :-1]).long()
    rank_sorted = new.cumsum(1)
    ranks = torch.empty_like(rank_sorted).scatter_(1, order, rank_sorted)
    return ranks, rank_sorted[:, -1] + 1


def _offsets(lengths: torch.Tensor) -> torch.Tensor:
    """Exclusive cumulative sum."""
    return lengths.cumsum(0) - lengths


def _bounds(lengths: torch.Tensor) -> torch.Tensor:
    """``[0, l0, l0 + l1, ...]``: the ``len + 1`` boundaries of consecutive ranges of ``lengths``."""
    out = torch.zeros(lengths.shape[0] + 1, dtype=torch.long, device=lengths.device)
    torch.cumsum(lengths, 0, out=out[1:])
    return out


def _expand(lengths: torch.Tensor, total: int) -> tuple[torch.Tensor, torch.Tensor]:
    """For ranges of ``lengths``: which range each of the ``total`` positions falls in, and its place in it."""
    which = torch.repeat_interleave(torch.arange(lengths.shape[0], device=lengths.device), lengths,
                                    output_size=total)
    place = torch.arange(total, device=lengths.device) - _offsets(lengths)[which]
    return which, place


def _csr(crow: torch.Tensor, col: torch.Tensor, values: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta state")
        return torch.sparse_csr_tensor(crow, col, values, size, check_invariants=False)


def _runs(ends: torch.Tensor, budget: int) -> list[tuple[int, int]]:
    """Consecutive ranges of items whose cumulative sizes are ``ends``, each of about ``budget`` at most (an item
    larger than ``budget`` alone)."""
    total, count = int(ends[-1]), ends.shape[0]
    if total <= budget:
        return [(0, count)]
    marks = torch.arange(budget, total, budget, device=ends.device)
    bounds = sorted({0, count, *torch.searchsorted(ends, marks, right=True).tolist()})
    return list(zip(bounds[:-1], bounds[1:], strict=True))


class _Edges:
    """One mean adjacency as ``(dst, src, weight)`` triples, in the coalesced order of the sparse tensor."""

    def __init__(self, dst: torch.Tensor, src: torch.Tensor, weight: torch.Tensor) -> None:
        self.dst, self.src, self.weight = dst, src, weight

    def select(self, keep: torch.Tensor, new_id: torch.Tensor) -> _Edges:
        """The triples whose ends are kept (``keep`` per edge), nodes relabelled with ``new_id``."""
        return _Edges(new_id[self.dst[keep]], new_id[self.src[keep]], self.weight[keep])


class _Stencil:
    """What a SAGE convolution sums at each node, as one sparse row per node: the node itself (part 0, weight 1),
    its producers (part 1, weights of ``adj_in``) and its consumers (part 2, ``adj_out``; absent when
    unidirectional). :meth:`matrix` lays it out for the node-major rows of a batch."""

    def __init__(self, num_nodes: int, adjacencies: list[_Edges]) -> None:
        device = adjacencies[0].dst.device
        every = torch.arange(num_nodes, device=device)
        self.parts = 1 + len(adjacencies)
        dst = torch.cat([every] + [a.dst for a in adjacencies])
        node = torch.cat([every] + [a.src for a in adjacencies])
        part = torch.cat([torch.full((a.dst.shape[0],), i, dtype=torch.long, device=device)
                          for i, a in enumerate([_Edges(every, every, every)] + adjacencies)])
        weight = torch.cat([torch.ones(num_nodes, device=device)] + [a.weight.float() for a in adjacencies])
        order = torch.argsort((dst * self.parts + part) * max(num_nodes, 1) + node)  # columns sorted per row
        self.node, self.part, self.weight = node[order], part[order], weight[order]
        self.length = torch.bincount(dst, minlength=num_nodes)
        self.first = _offsets(self.length)

    def matrix(self, node_of_row: torch.Tensor, key_of_row: torch.Tensor, first_row: torch.Tensor,
               node_offset: int = 0) -> torch.Tensor:
        """Sparse CSR ``[R, parts * R]`` with ``conv = matrix @ stack([z W_self^T, z W_in^T, z W_out^T]).view(-1, H)``
        for rows ``z`` ``[R, H]``: row ``r`` (node ``v`` under key ``u``) gathers rows ``first_row[w] + u`` of its
        neighbours ``w`` (column ``part * R + row``). The rows may cover a run of whole components only, nodes
        ``node_offset ..`` (``first_row`` indexed from there)."""
        rows = node_of_row.shape[0]
        row_length = self.length[node_of_row]
        crow = _bounds(row_length)
        which, place = _expand(row_length, int(crow[-1]))
        entry = self.first[node_of_row[which]] + place
        col = first_row[self.node[entry] - node_offset] + key_of_row[which] + self.part[entry] * rows
        return _csr(crow, col, self.weight[entry], (rows, self.parts * rows))


class _BlockWeights:
    """One :class:`GNNBlock`'s weights laid out for :func:`_block` (taken once per plan)."""

    def __init__(self, block: GNNBlock) -> None:
        conv = block.conv
        weights = [conv.lin_self.weight, conv.lin_in.weight] + ([conv.lin_out.weight] if conv.lin_out else [])
        self.norm = block.norm
        self.act = block.act
        self.conv = [w.t().contiguous() for w in weights]  # [H, H] each
        self.bias = conv.lin_self.bias
        self.attention = block.attention is not None
        if block.attention is not None:
            h = self.bias.shape[0]
            mix = block.attention.mix
            self.inv_temperature = float(1.0 / block.attention.temperature)
            self.mix_self = mix.weight[:, :h].t().contiguous()
            self.mix_weighted = mix.weight[:, h:].t().contiguous()
            self.mix_bias = mix.bias


def _block(w: _BlockWeights, h: torch.Tensor, conv_matrix: torch.Tensor, rows_of: torch.Tensor | None = None,
           lengths: torch.Tensor | None = None, node_of_row: torch.Tensor | None = None,
           batch: int = 1, context: _Context | None = None) -> torch.Tensor:
    """``h + act(attention?(conv(norm(h))))``: one :class:`GNNBlock` in eval mode (dropout is the identity), on
    rows ``h`` ``[R, H]`` (float32; ``h`` is updated in place).

    Args:
        conv_matrix: from :meth:`_Stencil.matrix`.
        rows_of: sparse CSR ``[nodes, R]``: node ``v``'s rows, each valued by how many configs of the batch it
            stands for (rows are node-major). ``None`` when every node has one row standing for all the configs.
        lengths: rows per node; node_of_row: int64 ``[R]``.
        batch: ``B``, the configs of the batch.
        context: attention against a fixed reference set instead of the batch (see :class:`ReferenceContext`):
            ``log_sum`` is this layer's ``[nodes, H]`` log-denominators of the rows' nodes, or it is filled from
            this batch when ``record`` is set.
    """
    rows, channels = h.shape
    z = w.norm(h)
    # The linear maps before the neighbour means (A (z W) = (A z) W), stacked for one sparse product. Three
    # [R, H] x [H, H] products, not one [H, 3H]: MKL is much slower on the latter for many rows (lab/journal.md,
    # "figures moved out of docstrings").
    if torch.is_autocast_enabled(h.device.type):
        y = torch.stack([(z @ weight).float() for weight in w.conv])
    else:
        y = torch.empty(len(w.conv), rows, channels, dtype=h.dtype, device=h.device)
        for i, weight in enumerate(w.conv):
            torch.mm(z, weight, out=y[i])
    with torch.autocast(h.device.type, enabled=False):
        out = torch.sparse.mm(conv_matrix, y.view(-1, channels))
    out += w.bias
    if w.attention:
        if context is not None and not context.record:
            # Each row against the reference set and itself: B * exp(o / T) / (sum_ref exp(o_j / T) + exp(o / T))
            # = B * sigmoid(o / T - log sum_ref exp(o_j / T)), with B = reference size + 1.
            assert node_of_row is not None
            with torch.autocast(h.device.type, enabled=False):
                logits = torch.mul(out, w.inv_temperature).sub_(context.take().index_select(0, node_of_row))
                weighted = logits.sigmoid_().mul_(context.size + 1).mul_(out)
        elif rows_of is None:
            weighted = out  # one row per node standing for B identical configs: the weights are all 1
        else:
            assert node_of_row is not None
            # softmax over the batch per node and channel, times B: exp(out / T - shift) / (sum over the configs),
            # a row counting for the configs it stands for. Any shift constant per node and channel gives the
            # same weights; the global maximum is one pass instead of a per-node one, used when no exp() can
            # underflow with it (else the per-node maximum, as torch.softmax does).
            with torch.autocast(h.device.type, enabled=False):
                low, high = torch.aminmax(out)
                if float(high - low) * w.inv_temperature < _EXP_RANGE:
                    shift: torch.Tensor = high
                    e = torch.sub(out, high)
                else:
                    shift = torch.segment_reduce(out, "max", lengths=lengths, axis=0, unsafe=True)
                    e = out - shift.index_select(0, node_of_row)
                e.mul_(w.inv_temperature).exp_()
                denominator = torch.sparse.mm(rows_of, e)  # [nodes, H]
                if context is not None:  # recording the reference: log sum exp(o / T) per node and channel
                    context.put(denominator.log() + shift * w.inv_temperature)
                scale = denominator.reciprocal_().mul_(batch)  # B / denominator
            weighted = e.mul_(out).mul_(scale.index_select(0, node_of_row))
        mixed = torch.addmm(w.mix_bias, out, w.mix_self)
        if mixed.dtype == weighted.dtype:
            out = mixed.addmm_(weighted, w.mix_weighted)
        else:  # autocast: the products are in reduced precision, their sum in float32
            out = mixed.float() + (weighted @ w.mix_weighted).float()
    return h.add_(w.act(out))


def _run_blocks(blocks: list[_BlockWeights], h: torch.Tensor, conv_matrix: torch.Tensor,
                rows_of: torch.Tensor | None = None, lengths: torch.Tensor | None = None,
                node_of_row: torch.Tensor | None = None, batch: int = 1,
                context: _Context | None = None) -> torch.Tensor:
    for w in blocks:
        h = _block(w, h, conv_matrix, rows_of, lengths, node_of_row, batch, context)
    return h


class _Context:
    """The reference log-denominators seen by one run of components (nodes ``n0 .. n1`` of the dynamic nodes),
    handed to the attention layers in order: :meth:`take` gives the next layer's ``[n1 - n0, H]`` slice, or, when
    ``record``, :meth:`put` stores it."""

    def __init__(self, log_sums: list[torch.Tensor], n0: int, n1: int, size: int, record: bool) -> None:
        self.log_sums, self.n0, self.n1, self.size, self.record = log_sums, n0, n1, size, record
        self.layer = 0

    def take(self) -> torch.Tensor:
        out = self.log_sums[self.layer][self.n0:self.n1]
        self.layer += 1
        return out

    def put(self, value: torch.Tensor) -> None:
        self.log_sums[self.layer][self.n0:self.n1] = value
        self.layer += 1


class ReferenceContext:
    """Cross-configuration attention against one fixed reference set of configs, so that every config of a graph
    is scored in the same context and independently of the others.

    With batches, a config's attention weights depend on which configs share its batch, so configs scored in
    different batches are compared in different contexts (what averaging several random orderings, ``tta``,
    smooths out at several times the cost). Here the reference set ``R`` (``predict_batch - 1`` configs of the
    graph, seeded) is run once as one batch; each attention layer's per-node, per-channel
    ``log sum over R of exp(o_j / T)`` is kept, and any config ``x`` is then scored as the last member of a batch
    ``R + {x}`` whose other members' states are the reference's: its weight is
    ``B exp(o_x / T) / (sum_R exp(o_j / T) + exp(o_x / T)) = B sigmoid(o_x / T - log sum_R exp(o_j / T))`` with
    ``B = |R| + 1``. A config's score then depends on the config and the reference only, so a whole block of configs
    is deduplicated as without attention (each component once per distinct key of the block), the scores are
    deterministic, and one pass replaces the orderings. Nodes outside any component with slots get weight 1, as
    in a batch.

    A reference drawn larger than the batch it stands for (``size`` configs) estimates the same sums with less
    variance: its sums are scaled by ``size / len(codes)``, so the weights stay those of a batch of ``size + 1``.

    Args:
        plan: the graph's :class:`LayoutPlan`.
        codes: int64 ``[R, NC]``, the reference configs' codes (:func:`config_codes`).
        size: how many configs the reference stands for (default ``R``).

    Attributes:
        size: the configs the reference stands for, ``B - 1``.
        log_sums: per attention layer, float32 ``[dynamic nodes, H]``.
    """

    @torch.inference_mode()
    def __init__(self, plan: LayoutPlan, codes: torch.Tensor, size: int | None = None) -> None:
        layers = sum(1 for w in plan.blocks if w.attention)
        channels = plan.base.shape[1]
        drawn = int(codes.shape[0])
        self.size = drawn if size is None else int(size)
        self.log_sums = [torch.zeros(plan.num_dynamic_nodes, channels, device=plan.device) for _ in range(layers)]
        if drawn:
            plan.totals(codes, record=self)
            if self.size != drawn:
                for log_sum in self.log_sums:
                    log_sum += math.log(self.size / drawn)


class LayoutStructure:
    """What :class:`LayoutPlan` and :func:`dedup_scores` need of one layout graph that depends neither on the
    configs nor on the network's weights: its connected components (edges either way) and which slots lie in each,
    the nodes of the components without slots, and the stencils of both parts. Built once per graph and kept
    (:meth:`models.gnn.train.Item.structure`), so that a plan per evaluation and a training step cost no graph
    analysis.

    Args:
        segments: the graph's segments (:func:`models.gnn.net.make_segments`; several under GST, whose
            between-segment edges are dropped as in the forward pass).
        bidirectional: whether the network gathers from consumers too (its blocks have ``lin_out``).

    Attributes:
        x, op: every node's features (not yet clipped) and opcode, in graph order.
        static: the nodes of the components without slots; static_matrix: their stencil, one row per node.
        dyn_nodes: the other nodes, sorted by component (so a run of components is a run of nodes);
            stencil: the graph they induce; node_comp: each one's component ``0..K-1``; comp_nodes: ``[K + 1]``
            bounds of each component's nodes.
        slot_ids, slot_rows, slot_comp: the configurable slots sorted by component: each one's column in the
            configs, its row among ``dyn_nodes``, its component; slot_order: each sorted slot's row in
            ``slot_sizes``; comp_slots: ``[K + 1]`` bounds; slot_rank: its place in its component.
    """

    def __init__(self, segments: list[Segment], *, bidirectional: bool) -> None:
        with torch.inference_mode(False), torch.no_grad():
            self._build(segments, bidirectional)

    def _build(self, segments: list[Segment], bidirectional: bool) -> None:
        device = segments[0].x.device
        self.device = device
        self.num_nodes = n = sum(s.num_nodes for s in segments)
        # The segment's own tensors when there is one (a training graph's structure lives as long as the fit: no
        # copy of its features), clipped where they are used (:meth:`node_input`).
        self.x = segments[0].x if len(segments) == 1 else torch.cat([s.x for s in segments])
        self.op = segments[0].op if len(segments) == 1 else torch.cat([s.op for s in segments])

        def edges(adj_name: str) -> _Edges:
            parts = []
            for s in segments:
                a = getattr(s, adj_name).coalesce()
                idx = a.indices() + s.start
                parts.append((idx[0], idx[1], a.values()))
            return _Edges(*(torch.cat([p[i] for p in parts]) for i in range(3)))

        adjacencies = [edges("adj_in")] + ([edges("adj_out")] if bidirectional else [])
        slot_ids = torch.cat([s.slots for s in segments])
        slot_nodes = torch.cat([s.slot_nodes + s.start for s in segments])

        # Connected components (edges either way), on the CPU.
        src, dst = adjacencies[0].src.cpu().numpy(), adjacencies[0].dst.cpu().numpy()
        graph = coo_matrix((np.ones(src.shape[0], dtype=np.int8), (dst, src)), shape=(n, n))
        comp = torch.from_numpy(connected_components(graph, directed=False)[1].astype(np.int64)).to(device)
        has_slot = torch.zeros(int(comp.max()) + 1 if n else 0, dtype=torch.bool, device=device)
        has_slot[comp[slot_nodes]] = True
        dynamic = has_slot[comp]  # nodes whose states depend on the config

        def subgraph(nodes: torch.Tensor) -> tuple[torch.Tensor, _Stencil]:
            """``nodes`` relabelled 0.. in the given order, and the stencil of the graph they induce."""
            keep = torch.zeros(n, dtype=torch.bool, device=device)
            keep[nodes] = True
            new_id = torch.full((n,), -1, dtype=torch.long, device=device)
            new_id[nodes] = torch.arange(nodes.numel(), device=device)
            return new_id, _Stencil(nodes.numel(), [a.select(keep[a.dst], new_id) for a in adjacencies])

        # The components without slots: one row per node standing for every config.
        self.static = (~dynamic).nonzero().flatten()
        _, static_stencil = subgraph(self.static)
        every = torch.arange(self.static.numel(), device=device)
        self.static_matrix = static_stencil.matrix(every, torch.zeros_like(every), every)

        # The components with slots, numbered 0..K-1, their nodes 0..Nd-1 sorted by component, slot entries
        # sorted by component.
        dyn_nodes = dynamic.nonzero().flatten()
        labels, comp_dyn = torch.unique(comp[dyn_nodes], return_inverse=True)
        order = torch.argsort(comp_dyn, stable=True)
        self.dyn_nodes, comp_dyn = dyn_nodes[order], comp_dyn[order]
        dyn_id, self.stencil = subgraph(self.dyn_nodes)
        self.num_components = int(labels.numel())
        self.node_comp = comp_dyn  # [Nd]
        self.comp_nodes = _bounds(torch.bincount(comp_dyn, minlength=self.num_components))  # [K + 1]
        slot_rows, slot_comp = dyn_id[slot_nodes], comp_dyn[dyn_id[slot_nodes]]
        order = torch.argsort(slot_comp, stable=True)
        self.slot_ids, self.slot_rows, self.slot_comp = slot_ids[order], slot_rows[order], slot_comp[order]
        self.slot_order = order  # each sorted slot entry's row in slot_sizes
        sizes = [s.slot_sizes for s in segments]
        self.slot_sizes = None if any(z is None for z in sizes) else torch.cat(sizes)
        per_comp = torch.bincount(self.slot_comp, minlength=self.num_components)
        self.comp_slots = _bounds(per_comp)  # [K + 1]
        self.slot_rank = torch.arange(order.numel(), device=device) - self.comp_slots[self.slot_comp]
        self.max_slots = int(per_comp.max()) if per_comp.numel() else 0

    @property
    def num_dynamic_nodes(self) -> int:
        return int(self.dyn_nodes.shape[0])

    def node_input(self, net: RankNet) -> torch.Tensor:
        """Every node's state before any config ``[N, H]``, as :meth:`RankNet.segment_sum` starts it."""
        return net.node_in(torch.cat([self.x.clamp(-INPUT_CLIP, INPUT_CLIP), net.opcode(self.op)], dim=1))

    def keys(self, by_slot: torch.Tensor, c0: int, c1: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The key of each component ``c0 <= c < c1`` per config: ``(ids [k, B] in 0..U_c-1, U [k])``, from the
        codes by slot ``[NC, B]``; a key is the codes of all the component's slots."""
        s0, s1 = int(self.comp_slots[c0]), int(self.comp_slots[c1])
        rank, comp = self.slot_rank[s0:s1], self.slot_comp[s0:s1] - c0
        ids, distinct = _dense_rank(by_slot[self.slot_ids[s0:s1][rank == 0]])  # every component has a slot
        for r in range(1, self.max_slots):
            more = rank == r
            if not bool(more.any()):
                break
            comps = comp[more]
            column, _ = _dense_rank(by_slot[self.slot_ids[s0:s1][more]])
            ids[comps], distinct[comps] = _dense_rank(ids[comps] * by_slot.shape[1] + column)
        return ids, distinct

    def rows(self, ids: torch.Tensor, distinct: torch.Tensor, c0: int, c1: int) -> _Rows:
        """The rows of components ``c0 <= c < c1`` run once per distinct key (their ``ids`` and ``distinct`` from
        :meth:`keys`), laid out node-major."""
        return _Rows(self, ids, distinct, c0, c1)


class _Rows:
    """The bookkeeping of one run of components over a batch of ``B`` configs: node ``v`` (of the run) with ``U``
    keys owns rows ``first_row[v] .. first_row[v] + U - 1``; a *group* is a (component, key); ``gid [k, B]`` is
    each config's group per component and ``count`` how many configs of the batch each group stands for."""

    def __init__(self, st: LayoutStructure, ids: torch.Tensor, distinct: torch.Tensor, c0: int, c1: int) -> None:
        device = ids.device
        b = ids.shape[1]
        self.n0, self.n1 = int(st.comp_nodes[c0]), int(st.comp_nodes[c1])
        self.s0, self.s1 = int(st.comp_slots[c0]), int(st.comp_slots[c1])
        group_first = _offsets(distinct)
        self.groups = int(distinct.sum())
        self.gid = ids + group_first.unsqueeze(1)  # [k, B]
        representative = torch.empty(self.groups, dtype=torch.long, device=device)  # a config of each group
        representative.scatter_(0, self.gid.flatten(), torch.arange(b, device=device).repeat(ids.shape[0]))
        self.count = torch.bincount(self.gid.flatten(), minlength=self.groups).float()
        node_comp = st.node_comp[self.n0:self.n1] - c0
        self.lengths = distinct[node_comp]  # rows per node
        self.total = int(self.lengths.sum())
        first_row = _offsets(self.lengths)
        self.node_of_row, key_of_row = _expand(self.lengths, self.total)
        self.group_of_row = group_first[node_comp[self.node_of_row]] + key_of_row
        # Each slot of the run under each key of its component: the config standing for the key, and its row.
        slot_comp = st.slot_comp[self.s0:self.s1] - c0
        slot_lengths = distinct[slot_comp]
        self.slot_entry, key = _expand(slot_lengths, int(slot_lengths.sum()))
        self.slot_config = representative[group_first[slot_comp[self.slot_entry]] + key]
        self.slot_row = first_row[st.slot_rows[self.s0:self.s1][self.slot_entry] - self.n0] + key
        self.conv_matrix = st.stencil.matrix(self.node_of_row + self.n0, key_of_row, first_row, self.n0)

    def rows_of(self) -> torch.Tensor:
        """Sparse CSR ``[nodes, R]``: each node's rows, valued by how many configs of the batch each stands for."""
        return _csr(_bounds(self.lengths), torch.arange(self.total, device=self.lengths.device),
                    self.count[self.group_of_row], (self.lengths.shape[0], self.total))

    def slot_values(self, st: LayoutStructure, by_slot: torch.Tensor) -> torch.Tensor:
        """int64 ``[P, 18]``: the config values of each slot of the run under each key of its component."""
        return code_values(by_slot[st.slot_ids[self.s0:self.s1][self.slot_entry], self.slot_config])

    def pooled(self, h: torch.Tensor) -> torch.Tensor:
        """Each config's sum of the run's nodes' rows ``h`` ``[R, H]`` (their final states): ``[B, H]``."""
        group_sum = torch.zeros(self.groups, h.shape[1], dtype=h.dtype, device=h.device).index_add(
            0, self.group_of_row, h)
        return F.embedding_bag(self.gid.t().contiguous(), group_sum, mode="sum")


class LayoutPlan:
    """Everything about one layout graph that does not depend on the configs, for :meth:`scores`.

    Built once per graph (and network weights): the node states before any config, the graph's
    :class:`LayoutStructure` (built here unless given), and the pooled sum of the components without slots (run
    once). :meth:`totals` works through the components a few at a time, so that at most about :data:`ROW_BUDGET`
    rows (:data:`CUDA_ROW_BUDGET` on a GPU) are in flight whatever the batch size.

    Args:
        net: a layout :class:`RankNet` (its weights must not change while the plan is used).
        segments: the graph's segments (:func:`models.gnn.net.make_segments`; several under GST, whose
            between-segment edges are dropped as in the forward pass), on the network's device.
        structure: the graph's structure, built once and reused across plans (default: built here).
    """

    @torch.inference_mode()
    def __init__(self, net: RankNet, segments: list[Segment], structure: LayoutStructure | None = None) -> None:
        if net.kind != "layout":
            raise ValueError("LayoutPlan is for layout networks")
        self.net = net
        st = structure if structure is not None else LayoutStructure(
            segments, bidirectional=net.blocks[0].conv.lin_out is not None)
        self.structure = st
        self.device = st.device
        base = st.node_input(net).float()  # [N, H]
        self.blocks = [_BlockWeights(block) for block in net.blocks]
        self.static_total = _run_blocks(self.blocks, base[st.static], st.static_matrix).sum(0)  # [H]
        self.base = base[st.dyn_nodes]

    @property
    def num_nodes(self) -> int:
        return self.structure.num_nodes

    @property
    def num_components(self) -> int:
        return self.structure.num_components

    @property
    def num_dynamic_nodes(self) -> int:
        return self.structure.num_dynamic_nodes

    @torch.inference_mode()
    def totals(self, codes: torch.Tensor, context: ReferenceContext | None = None,
               record: ReferenceContext | None = None) -> torch.Tensor:
        """The sum of the nodes' final states per config ``[B, H]`` for a batch of configs given by their
        codes (:func:`config_codes`, ``[B, NC]``): what ``sum(net.segment_sum(s, config_feat) for s in segments)``
        gives for the same batch.

        With ``context``, the attention layers compare each config with the reference set instead of the batch
        (see :class:`ReferenceContext`); ``record`` fills a reference from this batch."""
        b = codes.shape[0]
        total = self.static_total.expand(b, -1).clone()
        if self.num_components == 0 or b == 0:
            return total
        st = self.structure
        by_slot = codes.to(self.device).t().contiguous()  # [NC, B]
        step = max(1, KEY_BUDGET // b)
        budget = ROW_BUDGET if self.device.type == "cpu" else CUDA_ROW_BUDGET
        sizes = st.comp_nodes[1:] - st.comp_nodes[:-1]
        for c0 in range(0, self.num_components, step):
            c1 = min(self.num_components, c0 + step)
            ids, distinct = st.keys(by_slot, c0, c1)
            for lo, hi in _runs(torch.cumsum(sizes[c0:c1] * distinct, 0), budget):
                total += self._run(st.rows(ids[lo:hi], distinct[lo:hi], c0 + lo, c0 + hi), by_slot,
                                   context or record, record is not None)
        return total

    def _run(self, run: _Rows, by_slot: torch.Tensor, reference: ReferenceContext | None = None,
             record: bool = False) -> torch.Tensor:
        """A run of components, once per distinct key: their pooled sum per config ``[B, H]``."""
        st = self.structure
        h = self.base[run.n0:run.n1].repeat_interleave(run.lengths, dim=0, output_size=run.total)
        emb = self.net.config_embedding(run.slot_values(st, by_slot), st.slot_order[run.s0:run.s1][run.slot_entry],
                                        st.slot_sizes).float()
        h.index_add_(0, run.slot_row, emb)
        rows_of = None if reference is not None and not record else run.rows_of()
        context = None if reference is None else _Context(reference.log_sums, run.n0, run.n1, reference.size,
                                                          record)
        h = _run_blocks(self.blocks, h, run.conv_matrix, rows_of, run.lengths, run.node_of_row, by_slot.shape[1],
                        context)
        return run.pooled(h)

    @torch.inference_mode()
    def scores(self, codes: torch.Tensor, context: ReferenceContext | None = None) -> torch.Tensor:
        """Scores ``[B]`` (float32, lower = faster) of a batch of configs given by their codes (each against the
        reference set ``context`` when given, see :class:`ReferenceContext`)."""
        total = self.totals(codes, context)
        empty = torch.zeros(0, device=self.device)
        return self.net.score(total, self.num_nodes, empty).float()


def _train_block(block: GNNBlock, h: torch.Tensor, conv_matrix: torch.Tensor, rows_of: torch.Tensor | None,
                 lengths: torch.Tensor | None, node_of_row: torch.Tensor | None, batch: int) -> torch.Tensor:
    """One :class:`GNNBlock` on rows ``h`` ``[R, H]`` with gradients: what :func:`_block` computes in eval mode,
    out of place (``rows_of`` ``None``: every row stands for the whole batch, so the attention weights are 1)."""
    conv = block.conv
    z = block.norm(h)
    weights = [conv.lin_self.weight, conv.lin_in.weight] + ([conv.lin_out.weight] if conv.lin_out is not None
                                                            else [])
    y = torch.stack([z @ w.t() for w in weights])  # the linear maps before the neighbour means: A (z W) = (A z) W
    out = torch.sparse.mm(conv_matrix, y.view(-1, y.shape[-1])) + conv.lin_self.bias
    attention = block.attention
    if attention is not None:
        if rows_of is None:
            weighted = out
        else:
            assert lengths is not None and node_of_row is not None
            # softmax over the batch per node and channel, times B, a row counting for the configs it stands for;
            # shifted by the per-node maximum (a constant to the softmax, so outside the gradient). Not by the
            # global one, as _block may: a node's sum far below it stays finite, but the gradient of its
            # reciprocal (1 / sum^2) overflows.
            logits = out / attention.temperature
            shift = torch.segment_reduce(logits.detach(), "max", lengths=lengths, axis=0, unsafe=True)
            e = (logits - shift.index_select(0, node_of_row)).exp()
            scale = torch.sparse.mm(rows_of, e).reciprocal() * batch  # B / (sum over the batch), [nodes, H]
            weighted = e * scale.index_select(0, node_of_row) * out
        # attention.mix of [out, weighted] as two products: no [R, 2H] concatenation to build and to split back
        mix, channels = attention.mix, out.shape[-1]
        out = torch.addmm(mix.bias, out, mix.weight[:, :channels].t()).addmm(weighted, mix.weight[:, channels:].t())
    return h + block.dropout(block.act(out))


def dedup_scores(net: RankNet, structure: LayoutStructure, config_feat: torch.Tensor) -> torch.Tensor:
    """Scores ``[B]`` of a batch of layout configs, with gradients: ``net(segments, config_feat)`` (the training
    forward pass, dropout off) computed the way :class:`LayoutPlan` does, each connected component once per
    distinct key of the batch instead of once per config, in one run.

    The same function of the weights up to float rounding, so the same gradients; a batch of random-search configs
    holds several times fewer rows than configs x nodes, and a training step takes several times less time and less
    memory, the more so on a graph the size of the largest real ones (``python -m benchmarks.gnn --throughput``,
    ``--train-scale``; RESULTS.md, "GNN training throughput"). A batch whose configs differ in
    every component gains nothing: the same rows, plus a sparse stencil over them instead of one adjacency.

    Args:
        net: a layout network without dropout (dropout draws a mask per config and node: no rows to share).
        structure: the graph's :class:`LayoutStructure`, on the network's device.
        config_feat: float ``[B, NC, 18]``.
    """
    st = structure
    b = config_feat.shape[0]
    x = st.node_input(net)  # [N, H]
    total = x.new_zeros(b, net.hidden)
    if st.static.numel():
        h = x.index_select(0, st.static)
        for block in net.blocks:
            h = _train_block(block, h, st.static_matrix, None, None, None, b)
        total = total + h.sum(0)
    if st.num_components and b:
        by_slot = layout_codes(config_feat).t().contiguous()  # [NC, B]
        ids, distinct = st.keys(by_slot, 0, st.num_components)
        run = st.rows(ids, distinct, 0, st.num_components)
        h = x.index_select(0, st.dyn_nodes[run.node_of_row])
        emb = net.config_embedding(run.slot_values(st, by_slot), st.slot_order[run.slot_entry], st.slot_sizes)
        h = h.index_add(0, run.slot_row, emb)
        attention = any(block.attention is not None for block in net.blocks)
        rows_of = run.rows_of() if attention else None
        for block in net.blocks:
            h = _train_block(block, h, run.conv_matrix, rows_of, run.lengths, run.node_of_row, b)
        total = total + run.pooled(h)
    return net.score(total, st.num_nodes, config_feat)


READ_ROWS = 512
"""Configs read from disk per step when streaming a layout graph's configs (about 85 MB of float32 for 2,354
configurable nodes); each step is packed into codes (8 bytes per slot instead of 72) at once."""


def iter_code_blocks(graph: LayoutGraph, block_rows: int, read_rows: int = READ_ROWS, *,
                     prefetch: bool = True) -> Iterator[tuple[int, torch.Tensor]]:
    """Walk a layout graph's configs front to back as :func:`config_codes`, ``block_rows`` configs per block
    (``(first_config, int64 [rows, NC])``), reading ``read_rows`` configs at a time.

    With ``prefetch`` the reading (decompression) and packing run in a background thread, one block ahead, so
    they overlap with the scoring of the previous block (zlib and numpy release the GIL). In memory at most: one
    read step of float features, the block being filled, one finished block waiting and the block being scored.
    """
    blocks = _code_blocks(graph, block_rows, read_rows)
    if not prefetch:
        yield from blocks
        return
    ready: queue.Queue[tuple[int, torch.Tensor] | BaseException | None] = queue.Queue(maxsize=1)
    stop = threading.Event()

    def put(item: tuple[int, torch.Tensor] | BaseException | None) -> bool:
        while not stop.is_set():
            try:
                ready.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False  # the consumer is gone

    def produce() -> None:
        try:
            for item in blocks:
                if not put(item):
                    return
            put(None)
        except BaseException as exc:  # handed to the consumer, raised there
            put(exc)

    worker = threading.Thread(target=produce, name="fastslow-config-reader", daemon=True)
    worker.start()
    try:
        while (item := ready.get()) is not None:
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        worker.join()


def _code_blocks(graph: LayoutGraph, block_rows: int, read_rows: int) -> Iterator[tuple[int, torch.Tensor]]:
    parts: list[torch.Tensor] = []
    first = have = 0
    for _start, block in graph.iter_config_blocks(read_rows):
        codes = config_codes(block)
        while codes.shape[0]:
            take = min(codes.shape[0], block_rows - have)
            parts.append(codes[:take])
            codes, have = codes[take:], have + take
            if have == block_rows:
                yield first, torch.cat(parts)
                parts, first, have = [], first + have, 0
    if have:
        yield first, torch.cat(parts)
