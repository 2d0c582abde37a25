"""The GNN ranker: opcode embedding + node features, residual bidirectional SAGE layers, sum and mean pooling, and a
feed-forward head giving one score per config (lower = predicted faster).

A graph is cut into :class:`Segment` s (one segment holding the whole graph for full-graph training and
prediction; several for Graph Segment Training). A segment is an induced subgraph: its own nodes, the edges
between them, and the configurable slots that fall in it. :meth:`RankNet.segment_sum` runs the layers on one
segment for a block of configs and returns the sum of its final node states; :meth:`RankNet.head` turns the sum
over segments into scores. With one segment this is plain full-graph message passing.

How configs enter:

* layout: each configurable node's 18 config values (-1..5) are embedded (4 channels each), projected to ``H``
  and added to that node's state, so one graph yields one ``(N, H)`` state per config; with ``dim_tokens`` each
  slot also carries :func:`dimension_features` of the dimension its value names (see
  :meth:`RankNet.config_embedding`);
* tile: the 24 config columns (signed log) are projected to ``H`` and either added to every node (``join="early"``)
  or concatenated with the pooled graph vector (``join="late"``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn
from torch_geometric.data import Data

from competition.opcodes import NUM_OPCODES
from competition.schema import (
    LAYOUT_CONFIG_DIM,
    LAYOUT_CONFIG_VALUES,
    LAYOUT_SLOT_WIDTH,
    LAYOUT_SLOTS,
    TPU_LANES,
    TPU_SUBLANES,
)
from features.tabular import TILE_MEMORY_NAMES
from features.transforms import LINK_FEATURES
from models.gnn.layers import CrossConfigAttention, GNNBlock, mean_adjacency

LAYOUT_CONFIG_SLOTS = LAYOUT_CONFIG_DIM
TILE_CONFIG_COLUMNS = 24
CONFIG_VALUES = LAYOUT_CONFIG_VALUES  # layout config values -1..5, embedded at value + 1
CONFIG_VALUE_DIM = 4
INPUT_CLIP = 10.0  # normalised node features are clipped to this, so an unseen extreme value cannot blow up
DIM_FEATURES = 6  # features of one dimension size (dimension_features)
NODE_TIME_CLIP = 30.0  # a node's predicted log-time is clipped to +-this before exp (a graph's sum stays finite)
RUNTIME_STD_FLOOR = 1e-7  # runtime_sum: a batch's spread counts as at least this fraction of its mean (no 0 / 0)
TIME_SCALE_INIT = 1.0  # the runtime head's initial weight on the predicted log-runtime
SLOT_TENSOR = torch.arange(LAYOUT_CONFIG_SLOTS) // LAYOUT_SLOT_WIDTH  # each config slot's tensor (output, 2 operands)
_POWERS = torch.tensor([CONFIG_VALUES ** i for i in range(LAYOUT_CONFIG_SLOTS)], dtype=torch.long)
LINK_FEATURE_COUNT = len(LINK_FEATURES)
LINK_PATTERN_BITS = LAYOUT_SLOT_WIDTH + 2  # per value position: equal; then a's tensor all -1, b's tensor all -1
LINK_PATTERNS = 1 << LINK_PATTERN_BITS
LINK_ENTRIES = 1 << 20  # link x config entries compared per chunk (bounds link_term's temporaries)


def layout_codes(config_feat: torch.Tensor) -> torch.Tensor:
    """Each slot's 18 config values packed into one int64 code ``sum_i d_i * 7**i`` (``d_i = trunc(value) + 1``
    clamped to 0..6, as :meth:`RankNet.segment_sum` embeds them), from float layout configs ``[B, NC, 18]`` on any
    device: ``[B, NC]``. :func:`models.gnn.infer.config_codes` computes the same from numpy or int8 configs."""
    values = config_feat.long().add(1).clamp(0, CONFIG_VALUES - 1)
    return (values * _POWERS.to(values.device)).sum(-1)


def code_values(codes: torch.Tensor) -> torch.Tensor:
    """The inverse of :func:`layout_codes`: int64 ``[..., 18]`` embedding indices (0..6)."""
    return torch.div(codes.unsqueeze(-1), _POWERS.to(codes.device), rounding_mode="floor") % CONFIG_VALUES


def _packed_digits() -> torch.Tensor:
    """Every tensor code ``sum_k d_k * 7**k`` (6 digits 0..6) as ``sum_k d_k << 3k``: a digit per 3 bits."""
    code = torch.arange(_TENSOR_CODES)
    packed = torch.zeros_like(code)
    for k in range(LAYOUT_SLOT_WIDTH):
        packed |= torch.div(code, CONFIG_VALUES ** k, rounding_mode="floor") % CONFIG_VALUES << (3 * k)
    return packed


def _differ_masks() -> torch.Tensor:
    """For a value with bits only at ``3k`` (``k < 6``), the 6-bit mask with bit ``k`` where bit ``3k`` is set."""
    y = torch.arange(1 << (3 * LAYOUT_SLOT_WIDTH))
    return sum(((y >> (3 * k)) & 1) << k for k in range(LAYOUT_SLOT_WIDTH))


_TENSOR_CODES = CONFIG_VALUES ** LAYOUT_SLOT_WIDTH
_PACKED = _packed_digits()
_DIFFER = _differ_masks()
_LOW_BITS = sum(1 << (3 * k) for k in range(LAYOUT_SLOT_WIDTH))  # bit 0 of every 3-bit digit
_ALL_EQUAL = (1 << LAYOUT_SLOT_WIDTH) - 1


def link_patterns(codes: torch.Tensor, link_index: torch.Tensor) -> torch.Tensor:
    """How the two tensors of each link compare under each config: int64 ``[B, L]`` in ``0..LINK_PATTERNS - 1``,
    bit ``k < 6`` set when the two tensors' ``k``-th config values are equal, bit 6 when ``a``'s values are all -1
    (the compiler's default layout), bit 7 when ``b``'s are.

    Each tensor that ends a link is read once per config (its 6 digits of the slot's code, repacked 3 bits per
    digit by a table), and a link's two tensors are compared with one XOR: a few passes over ``B x L`` integers,
    no per-digit division per link.

    Args:
        codes: ``[B, NC]`` (:func:`layout_codes`).
        link_index: ``[L, 4]`` (slot a, tensor a, slot b, tensor b; :class:`features.transforms.DecisionLinks`).
    """
    device = codes.device
    ends = (link_index[:, [0, 2]] * len(LAYOUT_SLOTS) + link_index[:, [1, 3]]).flatten()
    keys, inverse = torch.unique(ends, return_inverse=True)  # the tensors ending links, each read once
    slot, tensor = keys // len(LAYOUT_SLOTS), keys % len(LAYOUT_SLOTS)
    scale = torch.tensor([_TENSOR_CODES ** t for t in range(len(LAYOUT_SLOTS))], device=device)[tensor]
    packed = _PACKED.to(device)[torch.div(codes[:, slot], scale, rounding_mode="floor") % _TENSOR_CODES]  # [B, U]
    a, b = packed[:, inverse[0::2]], packed[:, inverse[1::2]]  # [B, L]
    x = a ^ b
    differ = _DIFFER.to(device)[(x | (x >> 1) | (x >> 2)) & _LOW_BITS]
    return (_ALL_EQUAL ^ differ) | (a == 0).long() << LAYOUT_SLOT_WIDTH | (b == 0).long() << (LAYOUT_SLOT_WIDTH + 1)


def dimension_features(sizes: torch.Tensor) -> torch.Tensor:
    """Features of dimension sizes (0: no dimension, all features 0): ``[...]`` -> float32 ``[..., 6]``.

    ``log2(size) / 10``; whether the size is a multiple of 128 (the lanes) and of 8 (the sublanes); the fraction
    of its padded size the dimension fills were it minor-most (``size / roundup(size, 128)``) or second minor-most
    (``size / roundup(size, 8)``); whether it is 1.
    """
    present = (sizes > 0).float()
    s = sizes.float().clamp(min=1)
    feats = torch.stack([
        torch.log2(s) / 10,
        (s.remainder(TPU_LANES) == 0).float(),
        (s.remainder(TPU_SUBLANES) == 0).float(),
        s / (torch.ceil(s / TPU_LANES) * TPU_LANES),
        s / (torch.ceil(s / TPU_SUBLANES) * TPU_SUBLANES),
        (s == 1).float(),
    ], -1)
    return feats * present.unsqueeze(-1)


def check_heads(*, runtime_head: bool, node_head: bool, runtime_sum: bool) -> None:
    """Refuse settings that ask :class:`RankNet` for two heads at once (``runtime_head``, ``node_head`` and
    ``runtime_sum``)."""
    chosen = [name for name, on in (("runtime_head", runtime_head), ("node_head", node_head),
                                    ("runtime_sum", runtime_sum)) if on]
    if len(chosen) > 1:
        raise ValueError(f"{' and '.join(chosen)} are {len(chosen)} heads: choose one")


def signed_log(x: torch.Tensor) -> torch.Tensor:
    return torch.sign(x) * torch.log1p(x.abs())


@dataclass
class Segment:
    """One induced subgraph of a graph: what :meth:`RankNet.segment_sum` needs.

    Attributes:
        start, stop: the node range ``[start, stop)`` of the graph this segment is.
        x: float32 ``[n, F]`` node features; op: int64 ``[n]`` opcodes.
        adj_in, adj_out: row-normalised sparse adjacencies (see :func:`models.gnn.layers.mean_adjacency`).
        slots: int64 ``[s]``, which configurable slots (columns of a layout ``config_feat``) lie in the segment.
        slot_nodes: int64 ``[s]``, their nodes, relabelled into the segment.
        slot_sizes: float32 ``[s, 3, 7]``, the sizes of the dimensions each slot's config values name
            (:class:`features.transforms.ConfigDimensionSizes`), or ``None`` when the graph has none.
        slot_keys: float32 ``[s, 3, 7]``, 1 where a value names its tensor's key dimension
            (:class:`features.transforms.ConfigKeyDims`), or ``None`` when the graph has none.
        slot_layouts: int64 ``[s, 18]``, the layout the graph file gives each tensor a slot's config values speak of
            (:class:`features.transforms.ConfigTensorLayouts`), or ``None`` when the graph has none.
        link_index, link_feat: the whole graph's decision links (:class:`features.transforms.DecisionLinks`:
            int64 ``[L, 4]`` in slot numbers, float32 ``[L, 14]``), the same tensors in every segment of a graph (a
            link's term is per config, not per segment), or ``None`` when the graph has none.
    """

    start: int
    stop: int
    x: torch.Tensor
    op: torch.Tensor
    adj_in: torch.Tensor
    adj_out: torch.Tensor
    slots: torch.Tensor
    slot_nodes: torch.Tensor
    slot_sizes: torch.Tensor | None = None
    slot_keys: torch.Tensor | None = None
    slot_layouts: torch.Tensor | None = None
    link_index: torch.Tensor | None = None
    link_feat: torch.Tensor | None = None

    @property
    def num_nodes(self) -> int:
        return self.stop - self.start

    def to(self, device: torch.device | str) -> Segment:
        def move(t: torch.Tensor | None) -> torch.Tensor | None:
            return None if t is None else t.to(device)

        return Segment(self.start, self.stop, self.x.to(device), self.op.to(device), self.adj_in.to(device),
                       self.adj_out.to(device), self.slots.to(device), self.slot_nodes.to(device),
                       move(self.slot_sizes), move(self.slot_keys), move(self.slot_layouts), move(self.link_index),
                       move(self.link_feat))


def make_segments(data: Data, segment_size: int | None = None) -> list[Segment]:
    """Cut a graph's nodes into contiguous ranges of at most ``segment_size`` nodes (all of them when ``None``).

    Node ids follow the file's order, which is a topological order of the computation, so contiguous ranges are
    connected stretches of the program. Edges between segments are dropped; every node is in exactly one segment.

    Args:
        data: a ``Data`` from :func:`features.data.graph_to_data` (after any transforms).
        segment_size: nodes per segment, ``None`` for a single segment.

    Returns:
        The segments, in node order.
    """
    n = int(data.num_nodes)
    size = n if segment_size is None or segment_size >= n else int(segment_size)
    if size < 1:
        raise ValueError(f"segment_size must be >= 1, got {segment_size}")
    edge_index = data.edge_index
    slot_node = data.get("config_node_index")
    slot_node = torch.zeros(0, dtype=torch.long) if slot_node is None else slot_node
    sizes = data.get("config_dim_sizes")
    keys = data.get("config_dim_keys")
    layouts = data.get("config_tensor_layouts")
    link_index, link_feat = data.get("link_index"), data.get("link_feat")
    segments = []
    for start in range(0, max(n, 1), size):
        stop = min(start + size, n)
        inside = ((edge_index >= start) & (edge_index < stop)).all(0)
        local = edge_index[:, inside] - start
        slots = ((slot_node >= start) & (slot_node < stop)).nonzero().flatten()
        segments.append(Segment(
            start, stop, data.x[start:stop], data.op[start:stop],
            mean_adjacency(local, stop - start), mean_adjacency(local, stop - start, reverse=True),
            slots, slot_node[slots] - start, None if sizes is None else sizes[slots],
            None if keys is None else keys[slots], None if layouts is None else layouts[slots], link_index, link_feat,
        ))
    return segments


class RankNet(nn.Module):
    """Scores the configs of one graph.

    Every argument is required: the defaults live in :class:`models.gnn.train.TrainConfig` (and its per-kind
    :data:`models.gnn.train.DEFAULTS`), whose :meth:`~models.gnn.train.TrainConfig.make_net` builds this network.

    Args:
        kind: ``"tile"`` or ``"layout"``.
        num_features: node feature columns ``F`` (after the feature pipeline).
        hidden: channels ``H``.
        layers: residual message-passing layers.
        opcode_dim: width of the opcode embedding (concatenated with the node features).
        bidirectional: message passing in both directions, with separate weights.
        attention: cross-configuration attention in every layer (and, for a late tile join, before the head).
        join: tile only: ``"early"`` (config joined to every node) or ``"late"`` (after pooling).
        dropout: dropout probability.
        dim_tokens: layout only: each config slot also carries the :func:`dimension_features` of the dimension it
            names (the segments must then hold ``slot_sizes``).
        key_dims: layout only: each config slot also says whether the dimension it names is its tensor's key
            dimension (:class:`features.transforms.ConfigKeyDims`; the segments must then hold ``slot_keys``).
        runtime_head: every node also predicts its log-time ``t_n`` (a linear map of its final state); the graph's
            predicted runtime ``sum_n exp(t_n)`` is pooled with the states (:meth:`readout`), and the score adds a
            learned positive multiple of its log (:meth:`score`). A roofline runtime is a sum of per-op times that
            span orders of magnitude, while the node features are logs of sizes: a linear map of them is a log-time,
            and summing in linear space weighs a layout change at a large op by what it costs there, which the
            states' plain sum cannot.
        node_head: the score is the sum over the nodes of a scalar each computes from its final state (a 2-layer
            MLP), instead of an MLP of the pooled states: a config's runtime is a sum of per-op and per-copy terms,
            so the score is one too, and a change at a few nodes moves it by those nodes' terms alone.
        layout_match: layout only: each config slot also says whether its value equals the graph file's layout of
            its tensor at that position, and each tensor whether its whole layout does
            (:class:`features.transforms.ConfigTensorLayouts`; the segments must then hold ``slot_layouts``).
        runtime_sum: the score is the predicted runtime ``R = sum_n exp(t_n)`` alone (``t_n`` as with
            ``runtime_head``), no head over the pooled states: in training standardised over the batch's configs
            (``(R - mean) / std``), so that a difference of a fraction of a percent between a graph's configs, as
            default-search runtimes differ, is as large as the loss wants it whatever the graph's total; in
            evaluation ``log R``, the same order. A layout change then moves the score by what it changes at each
            op in linear time, as a runtime is a sum of per-op times; ``runtime_head`` mixed ``log R`` with the
            head's score at a learned scale that had to grow a thousandfold before such differences counted.
        links: layout only: the score adds one term per decision link (:meth:`link_term`; the segments must then
            hold ``link_index`` and ``link_feat``).
        tile_memory: tile only: each config also carries the 4 on-chip memory columns of
            :class:`features.transforms.TileMemoryFeatures` after its 24 (``config_feat [B, 28]``).
    """

    def __init__(self, kind: str, num_features: int, *, hidden: int, layers: int, opcode_dim: int,
                 bidirectional: bool, attention: bool, join: str, dropout: float, dim_tokens: bool,
                 key_dims: bool, layout_match: bool, runtime_head: bool, links: bool, node_head: bool,
                 tile_memory: bool, runtime_sum: bool) -> None:
        super().__init__()
        check_heads(runtime_head=runtime_head, node_head=node_head, runtime_sum=runtime_sum)
        if kind not in ("tile", "layout"):
            raise ValueError(f"kind must be 'tile' or 'layout', got {kind!r}")
        if join not in ("early", "late"):
            raise ValueError(f"join must be 'early' or 'late', got {join!r}")
        self.kind = kind
        self.join = join if kind == "tile" else "early"
        if runtime_sum and self.join == "late":
            raise ValueError("runtime_sum scores the nodes' times alone: a tile config joined after pooling (join="
                             "'late') would not reach them; use join='early'")
        self.opcode = nn.Embedding(NUM_OPCODES, opcode_dim)
        self.node_in = nn.Linear(num_features + opcode_dim, hidden)
        if kind == "layout":
            self.config_value = nn.Embedding(CONFIG_VALUES, CONFIG_VALUE_DIM)
            self.config_in = nn.Linear(LAYOUT_CONFIG_SLOTS * CONFIG_VALUE_DIM, hidden)
            self.config_dims = nn.Linear(LAYOUT_CONFIG_SLOTS * DIM_FEATURES, hidden, bias=False) if dim_tokens \
                else None
            self.config_keys = nn.Linear(LAYOUT_CONFIG_SLOTS, hidden, bias=False) if key_dims else None
            self.config_match = nn.Linear(LAYOUT_CONFIG_SLOTS + len(LAYOUT_SLOTS), hidden, bias=False) \
                if layout_match else None
        else:
            columns = TILE_CONFIG_COLUMNS + (len(TILE_MEMORY_NAMES) if tile_memory else 0)
            self.config_in = nn.Sequential(nn.Linear(columns, hidden), nn.GELU(), nn.Linear(hidden, hidden))
            self.config_dims = self.config_keys = self.config_match = None
        self.blocks = nn.ModuleList(GNNBlock(hidden, bidirectional=bidirectional, attention=attention,
                                             dropout=dropout) for _ in range(layers))
        head_in = 2 * hidden + (hidden if self.join == "late" else 0)
        self.late_attention = CrossConfigAttention(head_in) if attention and self.join == "late" else None
        self.head = nn.Sequential(nn.LayerNorm(head_in), nn.Linear(head_in, hidden), nn.GELU(), nn.Dropout(dropout),
                                  nn.Linear(hidden, 1))
        self.hidden = hidden
        self.node_time = nn.Linear(hidden, 1) if runtime_head or runtime_sum else None
        self.runtime_sum = runtime_sum
        self.time_scale = nn.Parameter(torch.tensor(math.log(TIME_SCALE_INIT))) if runtime_head else None
        self.node_score = nn.Sequential(nn.Linear(hidden, hidden), nn.GELU(), nn.Linear(hidden, 1)) if node_head \
            else None
        self.link_mlp = nn.Sequential(nn.Linear(LINK_FEATURE_COUNT + LINK_PATTERN_BITS, hidden), nn.GELU(),
                                      nn.Linear(hidden, 1)) if links and kind == "layout" else None

    @property
    def pooled_width(self) -> int:
        """Channels of the per-config sum the layers' states are pooled into (:meth:`readout`)."""
        return self.hidden + (1 if self.node_time is not None or self.node_score is not None else 0)

    def readout(self, h: torch.Tensor) -> torch.Tensor:
        """What each node contributes to its config's pooled sum: ``[..., H]`` final states -> ``[..., P]``
        (:attr:`pooled_width`): the states, and with ``runtime_head`` the node's predicted time
        ``exp(clip(t_n))`` as a last channel (float32 at least: the sums it makes differ between configs by a
        fraction of a percent); with ``node_head`` the node's score ``s_n`` as a last channel (float32 likewise)."""
        if self.node_time is None and self.node_score is None:
            return h
        h = h if h.dtype == torch.float64 else h.float()
        with torch.autocast(h.device.type, enabled=False):  # not in bfloat16 under the prediction's autocast
            if self.node_score is not None:
                return torch.cat([h, self.node_score(h)], dim=-1)
            t = self.node_time(h).clamp(-NODE_TIME_CLIP, NODE_TIME_CLIP).exp()
        return torch.cat([h, t], dim=-1)

    def config_embedding(self, values: torch.Tensor, slot: torch.Tensor, sizes: torch.Tensor | None,
                         keys: torch.Tensor | None, layouts: torch.Tensor | None) -> torch.Tensor:
        """The embedding of layout config values, added to their nodes' states.

        Args:
            values: int64 ``[..., 18]``, config values + 1 (0..6).
            slot: int64 ``[...]`` (broadcast against ``values.shape[:-1]``), each row's index into ``sizes``.
            sizes: float32 ``[S, 3, 7]`` (:attr:`Segment.slot_sizes`); used (and required) with ``dim_tokens``.
            keys: float32 ``[S, 3, 7]`` (:attr:`Segment.slot_keys`); used (and required) with ``key_dims``.
            layouts: int64 ``[S, 18]`` (:attr:`Segment.slot_layouts`); used (and required) with ``layout_match``.

        Returns:
            ``[..., H]``: ``Linear(value embeddings)``, plus with ``dim_tokens`` ``Linear(dimension features of the
            size each value names)``, plus with ``key_dims`` ``Linear(whether each value names its tensor's key
            dimension)``, plus with ``layout_match`` ``Linear(whether each explicit value equals the file's layout
            of its tensor at its position; whether each tensor's six values all do)``; only the named entries are
            gathered, never a ``[..., 18, 7]`` table.
        """
        emb = self.config_in(self.config_value(values).flatten(-2))
        if self.config_match is not None:
            if layouts is None:
                raise ValueError("this network compares config values with the file's layouts (layout_match): its "
                                 "graphs need config_tensor_layouts (features.transforms.ConfigTensorLayouts in the "
                                 "feature pipeline)")
            equal = values == layouts[slot] + 1  # [..., 18]; -1 (no dimension) is embedding index 0
            explicit = values > 0
            per_tensor = (len(LAYOUT_SLOTS), LAYOUT_SLOT_WIDTH)
            whole = equal.unflatten(-1, per_tensor).all(-1) & explicit.unflatten(-1, per_tensor).any(-1)  # [..., 3]
            flags = torch.cat([equal & explicit, whole], -1)
            emb = emb + self.config_match(flags.to(emb.dtype))
        if self.config_dims is None and self.config_keys is None:
            return emb
        tensor = SLOT_TENSOR.to(values.device)
        index = (slot.unsqueeze(-1) * len(LAYOUT_SLOTS) + tensor) * CONFIG_VALUES + values  # into sizes.flatten()
        if self.config_dims is not None:
            if sizes is None:
                raise ValueError("this network encodes config dimensions (dim_tokens): its graphs need "
                                 "config_dim_sizes (features.transforms.ConfigDimensionSizes in the feature pipeline)")
            emb = emb + self.config_dims(dimension_features(sizes.flatten()[index]).flatten(-2))
        if self.config_keys is not None:
            if keys is None:
                raise ValueError("this network encodes key dimensions (key_dims): its graphs need config_dim_keys "
                                 "(features.transforms.ConfigKeyDims in the feature pipeline)")
            emb = emb + self.config_keys(keys.flatten()[index].to(emb.dtype))
        return emb

    def _tile_config(self, config_feat: torch.Tensor) -> torch.Tensor:
        return self.config_in(signed_log(config_feat))

    def segment_sum(self, segment: Segment, config_feat: torch.Tensor) -> torch.Tensor:
        """Run the layers on one segment for a block of configs.

        Args:
            segment: from :func:`make_segments`.
            config_feat: layout float ``[B, NC, 18]`` (all slots of the graph; the segment picks its own), tile
                float ``[B, 24]``.

        Returns:
            float32 ``[B, P]``: the sum of the segment's final node states (:meth:`readout`), per config.
        """
        b = config_feat.shape[0]
        x = segment.x.clamp(-INPUT_CLIP, INPUT_CLIP)
        h = self.node_in(torch.cat([x, self.opcode(segment.op)], dim=1)).unsqueeze(0)  # [1, n, H]
        if self.kind == "layout":
            # A segment without configurable slots has the same states for every config: run it once (B = 1;
            # cross-config attention over identical rows is the identity, so this changes nothing).
            if segment.slots.numel():
                h = h.expand(b, -1, -1)
                values = config_feat[:, segment.slots].long().add(1).clamp(0, CONFIG_VALUES - 1)  # [B, s, 18]
                slot = torch.arange(values.shape[1], device=values.device)
                emb = self.config_embedding(values, slot, segment.slot_sizes, segment.slot_keys,
                                            segment.slot_layouts)  # [B, s, H]
                h = h.index_add(1, segment.slot_nodes, emb)
        elif self.join == "early":
            h = h + self._tile_config(config_feat).unsqueeze(1)
        for block in self.blocks:
            h = block(h, segment.adj_in, segment.adj_out)
        pooled = self.readout(h).sum(1)
        return pooled.expand(b, -1) if pooled.shape[0] == 1 and b > 1 else pooled

    def head_input(self, total: torch.Tensor, num_nodes: int, config_feat: torch.Tensor) -> torch.Tensor:
        pooled = torch.cat([signed_log(total), total / max(num_nodes, 1)], dim=1)
        if self.join == "late":
            pooled = torch.cat([pooled, self._tile_config(config_feat)], dim=1)
            if self.late_attention is not None:
                pooled = self.late_attention(pooled.unsqueeze(1)).squeeze(1)
        return pooled

    def _link_rows(self, link_feat: torch.Tensor, link: torch.Tensor, pattern: torch.Tensor) -> torch.Tensor:
        bits = (pattern.unsqueeze(-1) >> torch.arange(LINK_PATTERN_BITS, device=pattern.device)) & 1
        dtype = self.link_mlp[0].weight.dtype
        with torch.autocast(link_feat.device.type, enabled=False):  # summed over links: not in bfloat16
            return self.link_mlp(torch.cat([link_feat[link].to(dtype), bits.to(dtype)], -1)).squeeze(-1)

    def link_table(self, link_feat: torch.Tensor) -> torch.Tensor:
        """Every link's term under every pattern: ``[L, LINK_PATTERNS]`` (what :meth:`link_term` looks up; a
        prediction plan builds it once per graph)."""
        assert self.link_mlp is not None
        links = link_feat.shape[0]
        link = torch.arange(links, device=link_feat.device).repeat_interleave(LINK_PATTERNS)
        pattern = torch.arange(LINK_PATTERNS, device=link_feat.device).repeat(links)
        return self._link_rows(link_feat, link, pattern).view(links, LINK_PATTERNS)

    def link_term(self, codes: torch.Tensor, link_index: torch.Tensor | None, link_feat: torch.Tensor | None,
                  table: torch.Tensor | None = None) -> torch.Tensor:
        """The decision links' part of the score, ``[B]``: ``sum_l MLP([link_feat[l], pattern bits])``, where the
        pattern (:func:`link_patterns`) says which config values of the link's two tensors agree and whether either
        is the compiler's default. A copy between two decisions costs in the physics (and in XLA) when their layouts
        differ, a function of both configs that no sum of per-node terms holds; the MLP learns per link, from its
        size and kinds, what each way of (dis)agreeing costs.

        The MLP runs once per distinct (link, pattern) of the batch (a batch's configs share most patterns), or
        the terms are looked up in ``table`` (:meth:`link_table`), without gradients; configs are compared
        :data:`LINK_ENTRIES` link x config entries at a time.

        Args:
            codes: int64 ``[B, NC]`` (:func:`layout_codes`).
            link_index, link_feat: the graph's links (:attr:`Segment.link_index`, :attr:`Segment.link_feat`).
            table: optional, :meth:`link_table` of ``link_feat`` with the current weights.
        """
        if self.link_mlp is None:
            raise ValueError("this network has no link term (links=False)")
        if link_index is None or link_feat is None:
            raise ValueError("this network scores decision links (links): its graphs need link_index and "
                             "link_feat (features.transforms.DecisionLinks in the feature pipeline)")
        b, links = codes.shape[0], link_index.shape[0]
        if links == 0 or b == 0:
            return torch.zeros(b, dtype=self.link_mlp[0].weight.dtype, device=codes.device)
        parts = []
        offset = torch.arange(links, device=codes.device) * LINK_PATTERNS
        for i in range(0, b, max(1, LINK_ENTRIES // links)):
            pattern = link_patterns(codes[i:i + max(1, LINK_ENTRIES // links)], link_index)  # [b', L]
            if table is not None:
                parts.append(table.flatten()[pattern + offset].sum(-1))
                continue
            key, inverse = torch.unique(pattern + offset, return_inverse=True)
            parts.append(self._link_rows(link_feat, key // LINK_PATTERNS, key % LINK_PATTERNS)[inverse].sum(-1))
        return torch.cat(parts)

    def forward(self, segments: list[Segment], config_feat: torch.Tensor) -> torch.Tensor:
        """Scores ``[B]`` of a block of configs, every segment with gradients (full-graph training and prediction).

        Args:
            segments: the graph's segments (:func:`make_segments`).
            config_feat: the configs' features (see :meth:`segment_sum`).
        """
        total = sum(self.segment_sum(s, config_feat) for s in segments)
        num_nodes = sum(s.num_nodes for s in segments)
        return self.with_links(self.score(total, num_nodes, config_feat), config_feat, segments[0].link_index,
                               segments[0].link_feat)

    def with_links(self, scores: torch.Tensor, config_feat: torch.Tensor, link_index: torch.Tensor | None,
                   link_feat: torch.Tensor | None) -> torch.Tensor:
        """``scores`` plus :meth:`link_term` of float layout configs ``[B, NC, 18]`` (unchanged without links)."""
        if self.link_mlp is None:
            return scores
        return scores + self.link_term(layout_codes(config_feat), link_index, link_feat).to(scores.dtype)

    def score(self, total: torch.Tensor, num_nodes: int, config_feat: torch.Tensor) -> torch.Tensor:
        """Scores ``[B]`` from the sum over the graph of the nodes' :meth:`readout` ``total [B, P]`` and its node
        count; with ``runtime_head``, the head's score plus ``exp(time_scale) * log(predicted runtime)``; with
        ``node_head``, the sum of the nodes' scores alone; with ``runtime_sum`` the predicted runtime alone,
        standardised over the configs in training, its log in evaluation."""
        if self.node_score is not None:
            return total[:, -1]
        if self.runtime_sum:
            runtime = total[:, -1]
            if not self.training:
                return torch.log(runtime.clamp_min(torch.finfo(runtime.dtype).tiny))
            centred = runtime - runtime.mean()
            return centred / (centred.pow(2).mean().sqrt() + RUNTIME_STD_FLOOR * runtime.mean().abs())
        if self.node_time is None:
            return self.head(self.head_input(total, num_nodes, config_feat)).squeeze(1)
        assert self.time_scale is not None
        states, runtime = total[:, :-1], total[:, -1]
        head = self.head(self.head_input(states.to(self.time_scale.dtype), num_nodes, config_feat)).squeeze(1)
        return head + self.time_scale.exp() * torch.log(runtime.clamp_min(torch.finfo(runtime.dtype).tiny))
