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
from models.gnn.layers import CrossConfigAttention, GNNBlock, mean_adjacency

LAYOUT_CONFIG_SLOTS = LAYOUT_CONFIG_DIM
TILE_CONFIG_COLUMNS = 24
CONFIG_VALUES = LAYOUT_CONFIG_VALUES  # layout config values -1..5, embedded at value + 1
CONFIG_VALUE_DIM = 4
INPUT_CLIP = 10.0  # normalised node features are clipped to this, so an unseen extreme value cannot blow up
DIM_FEATURES = 8  # features of one dimension size (dimension_features)
SLOT_TENSOR = torch.arange(LAYOUT_CONFIG_SLOTS) // LAYOUT_SLOT_WIDTH  # each config slot's tensor (output, 2 operands)
_POWERS = torch.tensor([CONFIG_VALUES ** i for i in range(LAYOUT_CONFIG_SLOTS)], dtype=torch.long)


def layout_codes(config_feat: torch.Tensor) -> torch.Tensor:
    """Each slot's 18 config values packed into one int64 code ``sum_i d_i * 7**i`` (``d_i = trunc(value) + 1``
    clamped to 0..6, as :meth:`RankNet.segment_sum` embeds them), from float layout configs ``[B, NC, 18]`` on any
    device: ``[B, NC]``. :func:`models.gnn.infer.config_codes` computes the same from numpy or int8 configs."""
    values = config_feat.long().add(1).clamp(0, CONFIG_VALUES - 1)
    return (values * _POWERS.to(values.device)).sum(-1)


def code_values(codes: torch.Tensor) -> torch.Tensor:
    """The inverse of :func:`layout_codes`: int64 ``[..., 18]`` embedding indices (0..6)."""
    return torch.div(codes.unsqueeze(-1), _POWERS.to(codes.device), rounding_mode="floor") % CONFIG_VALUES


def dimension_features(sizes: torch.Tensor) -> torch.Tensor:
    """Features of dimension sizes (0: no dimension, all features 0): ``[...]`` -> float32 ``[..., 6]``.

    ``log2(size) / 10``; whether the size is a multiple of 128 (the lanes) and of 8 (the sublanes); the fraction
    of its padded size the dimension fills were it minor-most (``size / roundup(size, 128)``) or second minor-most
    (``size / roundup(size, 8)``); whether it is 1; and the ``log2`` of both fractions over 7 (-1 for a size of 1
    minor-most): an output's ``log2`` occupancy on (8, 128) tiles is minus the sum of its minor-most dimension's
    first and its second minor-most dimension's second, a linear function of the slots' features.
    """
    present = (sizes > 0).float()
    s = sizes.float().clamp(min=1)
    lane_fill = s / (torch.ceil(s / TPU_LANES) * TPU_LANES)
    sublane_fill = s / (torch.ceil(s / TPU_SUBLANES) * TPU_SUBLANES)
    feats = torch.stack([
        torch.log2(s) / 10,
        (s.remainder(TPU_LANES) == 0).float(),
        (s.remainder(TPU_SUBLANES) == 0).float(),
        lane_fill,
        sublane_fill,
        (s == 1).float(),
        torch.log2(lane_fill) / 7,
        torch.log2(sublane_fill) / 7,
    ], -1)
    return feats * present.unsqueeze(-1)


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

    @property
    def num_nodes(self) -> int:
        return self.stop - self.start

    def to(self, device: torch.device | str) -> Segment:
        return Segment(self.start, self.stop, self.x.to(device), self.op.to(device), self.adj_in.to(device),
                       self.adj_out.to(device), self.slots.to(device), self.slot_nodes.to(device),
                       None if self.slot_sizes is None else self.slot_sizes.to(device))


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
        ))
    return segments


class RankNet(nn.Module):
    """Scores the configs of one graph.

    Every argument is required: the defaults live in :class:`models.gnn.train.GNNConfig` (and its per-kind
    :data:`models.gnn.train.DEFAULTS`), whose :meth:`~models.gnn.train.GNNConfig.make_net` builds this network.

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
        tile_columns: tile only: config columns (the 24 stored, and any a feature transform appends).
    """

    def __init__(self, kind: str, num_features: int, *, hidden: int, layers: int, opcode_dim: int,
                 bidirectional: bool, attention: bool, join: str, dropout: float, dim_tokens: bool,
                 tile_columns: int) -> None:
        super().__init__()
        if kind not in ("tile", "layout"):
            raise ValueError(f"kind must be 'tile' or 'layout', got {kind!r}")
        if join not in ("early", "late"):
            raise ValueError(f"join must be 'early' or 'late', got {join!r}")
        self.kind = kind
        self.join = join if kind == "tile" else "early"
        self.opcode = nn.Embedding(NUM_OPCODES, opcode_dim)
        self.node_in = nn.Linear(num_features + opcode_dim, hidden)
        if kind == "layout":
            self.config_value = nn.Embedding(CONFIG_VALUES, CONFIG_VALUE_DIM)
            self.config_in = nn.Linear(LAYOUT_CONFIG_SLOTS * CONFIG_VALUE_DIM, hidden)
            self.config_dims = nn.Linear(LAYOUT_CONFIG_SLOTS * DIM_FEATURES, hidden, bias=False) if dim_tokens \
                else None
        else:
            self.config_in = nn.Sequential(nn.Linear(tile_columns, hidden), nn.GELU(),
                                           nn.Linear(hidden, hidden))
            self.config_dims = None
        self.blocks = nn.ModuleList(GNNBlock(hidden, bidirectional=bidirectional, attention=attention,
                                             dropout=dropout) for _ in range(layers))
        head_in = 2 * hidden + (hidden if self.join == "late" else 0)
        self.late_attention = CrossConfigAttention(head_in) if attention and self.join == "late" else None
        self.head = nn.Sequential(nn.LayerNorm(head_in), nn.Linear(head_in, hidden), nn.GELU(), nn.Dropout(dropout),
                                  nn.Linear(hidden, 1))
        self.hidden = hidden

    def config_embedding(self, values: torch.Tensor, slot: torch.Tensor, sizes: torch.Tensor | None) -> torch.Tensor:
        """The embedding of layout config values, added to their nodes' states.

        Args:
            values: int64 ``[..., 18]``, config values + 1 (0..6).
            slot: int64 ``[...]`` (broadcast against ``values.shape[:-1]``), each row's index into ``sizes``.
            sizes: float32 ``[S, 3, 7]`` (:attr:`Segment.slot_sizes`); used (and required) with ``dim_tokens``.

        Returns:
            ``[..., H]``: ``Linear(value embeddings)``, plus with ``dim_tokens`` ``Linear(dimension features of the
            size each value names)``; only the named sizes are gathered, never a ``[..., 18, 7]`` table.
        """
        emb = self.config_in(self.config_value(values).flatten(-2))
        if self.config_dims is None:
            return emb
        if sizes is None:
            raise ValueError("this network encodes config dimensions (dim_tokens): its graphs need "
                             "config_dim_sizes (features.transforms.ConfigDimensionSizes in the feature pipeline)")
        tensor = SLOT_TENSOR.to(values.device)
        index = (slot.unsqueeze(-1) * len(LAYOUT_SLOTS) + tensor) * CONFIG_VALUES + values  # into sizes.flatten()
        # The features of every size the slots can name, then gathered: [S * 21] sizes instead of one per value.
        return emb + self.config_dims(dimension_features(sizes.flatten())[index].flatten(-2))

    def _tile_config(self, config_feat: torch.Tensor) -> torch.Tensor:
        return self.config_in(signed_log(config_feat))

    def segment_sum(self, segment: Segment, config_feat: torch.Tensor) -> torch.Tensor:
        """Run the layers on one segment for a block of configs.

        Args:
            segment: from :func:`make_segments`.
            config_feat: layout float ``[B, NC, 18]`` (all slots of the graph; the segment picks its own), tile
                float ``[B, 24]``.

        Returns:
            float32 ``[B, H]``: the sum of the segment's final node states, per config.
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
                emb = self.config_embedding(values, slot, segment.slot_sizes)  # [B, s, H]
                h = h.index_add(1, segment.slot_nodes, emb)
        elif self.join == "early":
            h = h + self._tile_config(config_feat).unsqueeze(1)
        for block in self.blocks:
            h = block(h, segment.adj_in, segment.adj_out)
        pooled = h.sum(1)
        return pooled.expand(b, -1) if pooled.shape[0] == 1 and b > 1 else pooled

    def head_input(self, total: torch.Tensor, num_nodes: int, config_feat: torch.Tensor) -> torch.Tensor:
        pooled = torch.cat([signed_log(total), total / max(num_nodes, 1)], dim=1)
        if self.join == "late":
            pooled = torch.cat([pooled, self._tile_config(config_feat)], dim=1)
            if self.late_attention is not None:
                pooled = self.late_attention(pooled.unsqueeze(1)).squeeze(1)
        return pooled

    def forward(self, segments: list[Segment], config_feat: torch.Tensor) -> torch.Tensor:
        """Scores ``[B]`` of a block of configs, every segment with gradients (full-graph training and prediction).

        Args:
            segments: the graph's segments (:func:`make_segments`).
            config_feat: the configs' features (see :meth:`segment_sum`).
        """
        total = sum(self.segment_sum(s, config_feat) for s in segments)
        num_nodes = sum(s.num_nodes for s in segments)
        return self.score(total, num_nodes, config_feat)

    def score(self, total: torch.Tensor, num_nodes: int, config_feat: torch.Tensor) -> torch.Tensor:
        """Scores ``[B]`` from the sum over the graph of the nodes' final states ``total [B, H]`` and its node
        count: the head of :meth:`head_input`."""
        return self.head(self.head_input(total, num_nodes, config_feat)).squeeze(1)
