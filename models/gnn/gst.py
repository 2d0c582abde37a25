"""Graph Segment Training (GST): train on graphs too large to backpropagate through whole.

A graph is cut into segments (:func:`models.gnn.net.make_segments`). Each training step backpropagates through a
random subset of ``backprop`` segments only; every other segment contributes its embedding (the sum of its final
node states, per config) from a historical table, computed without gradients the first time it is needed and
refreshed whenever the segment is trained. Stale table entries are dropped with probability ``1 - keep_prob``
(segment dropout); the kept segments' sum is rescaled by ``N / nodes kept`` so it still estimates the whole graph's
sum. Memory for activations is that of ``backprop`` segments, whatever the size of the graph.
"""

from __future__ import annotations

from collections.abc import Hashable

import numpy as np
import torch

from models.gnn.net import RankNet, Segment


class HistoryTable:
    """Segment embeddings per (graph, segment, config position), filled as training goes.

    Entries are detached float32 ``[H]`` rows on the device they were computed on.
    """

    def __init__(self) -> None:
        self._values: dict[tuple[Hashable, int], torch.Tensor] = {}
        self._filled: dict[tuple[Hashable, int], torch.Tensor] = {}

    def _slot(self, key: Hashable, segment: int, size: int, like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        k = (key, segment)
        if k not in self._values or self._values[k].shape[0] < size:
            values = torch.zeros(size, like.shape[1], dtype=like.dtype, device=like.device)
            filled = torch.zeros(size, dtype=torch.bool, device=like.device)
            if k in self._values:
                old = self._values[k].shape[0]
                values[:old], filled[:old] = self._values[k], self._filled[k]
            self._values[k], self._filled[k] = values, filled
        return self._values[k], self._filled[k]

    def get(self, key: Hashable, segment: int, positions: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor]:
        """``(values [B, H] or None, filled [B])`` for the configs at ``positions`` of a graph's segment."""
        k = (key, segment)
        if k not in self._values:
            return None, torch.zeros(positions.shape[0], dtype=torch.bool)
        values, filled = self._values[k], self._filled[k]
        inside = positions < values.shape[0]
        safe = positions.clamp_max(values.shape[0] - 1).to(values.device)
        return values[safe], (filled[safe] & inside.to(values.device)).cpu()

    def put(self, key: Hashable, segment: int, positions: torch.Tensor, values: torch.Tensor) -> None:
        if positions.numel() == 0:
            return
        size = int(positions.max()) + 1 if positions.numel() else 0
        store, filled = self._slot(key, segment, size, values)
        idx = positions.to(store.device)
        store[idx] = values.detach()
        filled[idx] = True

    def __len__(self) -> int:
        return int(sum(int(f.sum()) for f in self._filled.values()))

    def nbytes(self) -> int:
        return sum(v.numel() * v.element_size() for v in self._values.values())


def gst_scores(net: RankNet, segments: list[Segment], config_feat: torch.Tensor, positions: torch.Tensor, *,
               key: Hashable, table: HistoryTable, rng: np.random.Generator, backprop: int = 1,
               keep_prob: float = 0.5) -> tuple[torch.Tensor, list[int]]:
    """Scores of a block of configs with gradients through ``backprop`` random segments only.

    Args:
        net: the model.
        segments: the graph's segments.
        config_feat: the configs' features (see :meth:`RankNet.segment_sum`).
        positions: int64 ``[B]``, the configs' positions in the graph's config list (the table's keys).
        key: the graph's key in ``table``.
        table: the historical embeddings.
        rng: draws the segments and the dropout.
        backprop: segments trained per step.
        keep_prob: probability that a stale segment is kept (segment dropout).

    Returns:
        ``(scores [B], the segments backpropagated through)``.
    """
    num_nodes = sum(s.num_nodes for s in segments)
    chosen = sorted(rng.choice(len(segments), size=min(backprop, len(segments)), replace=False).tolist())
    total: torch.Tensor | None = None
    kept_nodes = 0
    for i, segment in enumerate(segments):
        if i in chosen:
            emb = net.segment_sum(segment, config_feat)
            table.put(key, i, positions, emb)
        else:
            if rng.random() >= keep_prob:
                continue
            stored, filled = table.get(key, i, positions)
            if stored is None or not bool(filled.all()):
                missing = (~filled).nonzero().flatten()  # only configs the table lacks are computed
                with torch.no_grad():
                    fresh = net.segment_sum(segment, config_feat[missing.to(config_feat.device)])
                table.put(key, i, positions[missing], fresh)
                if stored is None:
                    emb = fresh  # nothing stored yet: every config was missing
                else:
                    emb = stored.clone()
                    emb[missing.to(fresh.device)] = fresh
            else:
                emb = stored
            emb = emb.detach()
        total = emb if total is None else total + emb
        kept_nodes += segment.num_nodes
    assert total is not None  # the chosen segments are always included
    total = total * (num_nodes / kept_nodes)
    return net.score(total, num_nodes, config_feat), chosen
