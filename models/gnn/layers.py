"""Building blocks of the GNN rankers: bidirectional SAGE message passing and cross-configuration attention.

Every layer works on a ``(B, N, H)`` tensor: ``B`` configs of one graph (or ``B = 1`` for parts that do not depend
on the config), ``N`` nodes, ``H`` channels. Message passing is linear in the node axis, so a graph's neighbour
means are taken once for all ``B`` configs with one sparse product on the ``(N, B * H)`` view.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


def mean_adjacency(edge_index: torch.Tensor, num_nodes: int, *, reverse: bool = False) -> torch.Tensor:
    """The row-normalised sparse adjacency ``A`` with ``(A @ X)[v] = mean of X[u]`` over the neighbours ``u`` of ``v``.

    Args:
        edge_index: int64 ``[2, E]``, row 0 the producer and row 1 the consumer.
        num_nodes: ``N``.
        reverse: ``False`` gathers from producers (data flows forward), ``True`` from consumers (backward).

    Returns:
        A sparse COO float32 ``[N, N]`` tensor; nodes without neighbours get an empty row (their mean is 0).
    """
    src, dst = (edge_index[1], edge_index[0]) if reverse else (edge_index[0], edge_index[1])
    degree = torch.zeros(num_nodes).index_add_(0, dst, torch.ones(dst.shape[0]))
    values = 1.0 / degree[dst].clamp_min(1.0)
    return torch.sparse_coo_tensor(torch.stack([dst, src]), values, (num_nodes, num_nodes),
                                   check_invariants=False).coalesce()


def propagate(adjacency: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    """``adjacency @ h`` along the node axis of ``h`` ``(B, N, H)``, all configs at once."""
    return propagate_many([adjacency], h)[0]


def propagate_many(adjacencies: list[torch.Tensor], h: torch.Tensor) -> list[torch.Tensor]:
    """``[A @ h for A in adjacencies]`` along the node axis, laying ``h`` out as ``(N, B * H)`` only once.

    The sparse products are taken in float32 whatever ``h``'s dtype (CUDA has no bfloat16 sparse product, and
    neighbour means are sums best kept in full precision under autocast); the results are float32."""
    b, n, c = h.shape
    with torch.autocast(h.device.type, enabled=False):
        flat = h.permute(1, 0, 2).reshape(n, b * c).float()
        return [torch.sparse.mm(a.float(), flat).reshape(n, b, c).permute(1, 0, 2) for a in adjacencies]


class BiSAGEConv(nn.Module):
    """GraphSAGE with separate weights for the two directions of data flow.

    ``out = W_self h + W_in mean(h over producers) + W_out mean(h over consumers)``.

    Args:
        channels: ``H`` in and out.
        bidirectional: ``False`` keeps only the producer-to-consumer direction (the plain SAGE baseline).
    """

    def __init__(self, channels: int, *, bidirectional: bool = True) -> None:
        super().__init__()
        self.bidirectional = bidirectional
        self.lin_self = nn.Linear(channels, channels)
        self.lin_in = nn.Linear(channels, channels, bias=False)
        self.lin_out = nn.Linear(channels, channels, bias=False) if bidirectional else None

    def forward(self, h: torch.Tensor, adj_in: torch.Tensor, adj_out: torch.Tensor | None) -> torch.Tensor:
        if self.lin_out is not None and adj_out is not None:
            agg_in, agg_out = propagate_many([adj_in, adj_out], h)
            return self.lin_self(h) + self.lin_in(agg_in) + self.lin_out(agg_out)
        return self.lin_self(h) + self.lin_in(propagate(adj_in, h))


class CrossConfigAttention(nn.Module):
    """Let the configs of one graph look at each other: attention across the config axis.

    For ``h`` shaped ``(B, N, H)``, weights ``a = B * softmax(h / T, dim=0)`` (per node and channel, over the ``B``
    configs; the factor ``B`` makes a uniform weighting 1 whatever the batch size) with a learnable temperature
    ``T`` (initially ``temperature``), and the output is ``Linear([h, a * h])``: each config's features are
    re-weighted by how they compare with the other configs'. Permuting the configs permutes the output the same
    way; with ``B = 1`` the weights are all 1.

    Args:
        channels: ``H``.
        temperature: the initial temperature.
    """

    def __init__(self, channels: int, temperature: float = 0.5) -> None:
        super().__init__()
        self.log_temperature = nn.Parameter(torch.tensor(math.log(temperature)))
        self.mix = nn.Linear(2 * channels, channels)

    @property
    def temperature(self) -> torch.Tensor:
        return self.log_temperature.exp()

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        weights = torch.softmax(h / self.temperature, dim=0) * h.shape[0]
        # mix([h, weights * h]) as two products: no [..., 2H] concatenation to build (and to split back)
        channels = h.shape[-1]
        return torch.add(F.linear(h, self.mix.weight[:, :channels], self.mix.bias),
                         F.linear(weights * h, self.mix.weight[:, channels:]))


class GNNBlock(nn.Module):
    """``h + dropout(act(attention?(conv(norm(h)))))``: one residual layer.

    Every argument is required: :class:`models.gnn.net.RankNet` passes the run's settings.

    Args:
        channels: ``H``.
        bidirectional: both directions of message passing (separate weights).
        attention: add a :class:`CrossConfigAttention` after the convolution.
        dropout: dropout probability.
    """

    def __init__(self, channels: int, *, bidirectional: bool, attention: bool, dropout: float) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(channels)
        self.conv = BiSAGEConv(channels, bidirectional=bidirectional)
        self.attention = CrossConfigAttention(channels) if attention else None
        self.act = nn.GELU()
        self.dropout = nn.Dropout(dropout)

    def forward(self, h: torch.Tensor, adj_in: torch.Tensor, adj_out: torch.Tensor | None) -> torch.Tensor:
        z = self.conv(self.norm(h), adj_in, adj_out)
        if self.attention is not None:
            z = self.attention(z)
        return h + self.dropout(self.act(z))
