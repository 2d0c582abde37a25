"""Graph Segment Training: gradients reach only the sampled segments, segment dropout rescales the sum, and the
history table serves (stale) embeddings of the other segments."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch_geometric.data import Data

from models.gnn.gst import HistoryTable, gst_scores
from models.gnn.net import LAYOUT_CONFIG_SLOTS, RankNet, make_segments

N, F, H, B = 12, 5, 8, 4
SEGMENT = 4  # 3 segments: [0, 4), [4, 8), [8, 12)


def _graph(seed: int = 0) -> tuple[Data, torch.Tensor, torch.Tensor]:
    """A 12-node chain with configurable slots at nodes 1, 5, 6 and 10; x is a leaf that wants gradients."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(N, F, generator=g).requires_grad_(True)
    src = torch.arange(N - 1)
    data = Data(x=x, op=torch.randint(0, 40, (N,), generator=g), edge_index=torch.stack([src, src + 1]),
                config_node_index=torch.tensor([1, 5, 6, 10]), num_nodes=N)
    config_feat = torch.randint(-1, 6, (B, 4, LAYOUT_CONFIG_SLOTS), generator=g).float()
    return data, x, config_feat


def _net(seed: int = 0, attention: bool = False) -> RankNet:
    torch.manual_seed(seed)
    return RankNet("layout", F, hidden=H, layers=2, opcode_dim=16, bidirectional=True, attention=attention,
                   join="early", dropout=0.0, dim_tokens=False, tile_columns=24)


POSITIONS = torch.arange(B)



@pytest.mark.parametrize("attention", [False, True])
def test_gradients_reach_only_the_chosen_segment(attention: bool):
    data, x, cf = _graph()
    net = _net(attention=attention)
    segs = make_segments(data, SEGMENT)
    assert [(s.start, s.stop) for s in segs] == [(0, 4), (4, 8), (8, 12)]
    seen = set()
    for seed in range(12):
        x.grad = None
        scores, chosen = gst_scores(net, segs, cf, POSITIONS, key="g", table=HistoryTable(),
                                    rng=np.random.default_rng(seed), backprop=1, keep_prob=1.0)
        assert scores.shape == (B,) and len(chosen) == 1
        scores.sum().backward()
        (c,) = chosen
        seen.add(c)
        row_has_grad = x.grad.abs().sum(1) > 0
        expected = torch.zeros(N, dtype=torch.bool)
        expected[segs[c].start:segs[c].stop] = True
        assert row_has_grad.tolist() == expected.tolist(), f"seed {seed}, chosen segment {c}"
    assert seen == {0, 1, 2}  # every segment got its turn


def test_backprop_two_segments_reaches_both():
    data, x, cf = _graph()
    net = _net()
    segs = make_segments(data, SEGMENT)
    scores, chosen = gst_scores(net, segs, cf, POSITIONS, key="g", table=HistoryTable(),
                                rng=np.random.default_rng(0), backprop=2, keep_prob=1.0)
    assert len(chosen) == 2 and chosen == sorted(chosen)
    scores.sum().backward()
    expected = torch.zeros(N, dtype=torch.bool)
    for c in chosen:
        expected[segs[c].start:segs[c].stop] = True
    assert (x.grad.abs().sum(1) > 0).tolist() == expected.tolist()


def test_keep_all_first_call_equals_full_forward():
    """A fresh table and keep_prob 1: every segment's embedding is computed now, so the scores are the full
    net's."""
    data, _, cf = _graph()
    net = _net()
    segs = make_segments(data, SEGMENT)
    table = HistoryTable()
    scores, chosen = gst_scores(net, segs, cf, POSITIONS, key="g", table=table, rng=np.random.default_rng(3),
                                backprop=1, keep_prob=1.0)
    torch.testing.assert_close(scores, net(segs, cf))
    assert len(table) == 3 * B  # every segment stored for every config
    for i, seg in enumerate(segs):
        stored, filled = table.get("g", i, POSITIONS)
        assert filled.all()
        torch.testing.assert_close(stored, net.segment_sum(seg, cf).detach())


def test_keep_prob_zero_drops_the_other_segments_and_rescales():
    data, _, cf = _graph()
    net = _net()
    segs = make_segments(data, SEGMENT)
    for seed in range(4):
        table = HistoryTable()
        scores, (c,) = gst_scores(net, segs, cf, POSITIONS, key="g", table=table,
                                  rng=np.random.default_rng(seed), backprop=1, keep_prob=0.0)
        # By hand: only the chosen segment, its sum scaled by N / its nodes (12 / 4 = 3).
        total = net.segment_sum(segs[c], cf) * (N / segs[c].num_nodes)
        torch.testing.assert_close(scores, net.score(total, N, cf))
        # The table holds the chosen segment only.
        assert len(table) == B
        stored, filled = table.get("g", c, POSITIONS)
        assert filled.all()
        for other in set(range(3)) - {c}:
            stored, filled = table.get("g", other, POSITIONS)
            assert stored is None and not filled.any()


def test_table_serves_stale_embeddings():
    """After the weights change, a kept segment that is not trained contributes its OLD embedding."""
    data, _, cf = _graph()
    net = _net()
    segs = make_segments(data, SEGMENT)
    table = HistoryTable()
    gst_scores(net, segs, cf, POSITIONS, key="g", table=table, rng=np.random.default_rng(0), backprop=1,
               keep_prob=1.0)
    with torch.no_grad():
        old = [net.segment_sum(s, cf) for s in segs]
        net.node_in.bias.add_(0.5)  # "a training step"
        new = [net.segment_sum(s, cf) for s in segs]
    assert not torch.allclose(old[0], new[0])
    scores, (c,) = gst_scores(net, segs, cf, POSITIONS, key="g", table=table, rng=np.random.default_rng(1),
                              backprop=1, keep_prob=1.0)
    total = sum(new[i] if i == c else old[i] for i in range(3))
    torch.testing.assert_close(scores, net.score(total, N, cf))
    assert not torch.allclose(scores, net(segs, cf))  # not the fresh full-graph scores
    # The trained segment's entry is refreshed; the others keep the old one.
    for i in range(3):
        torch.testing.assert_close(table.get("g", i, POSITIONS)[0], new[i] if i == c else old[i])


def test_table_fills_only_missing_configs():
    """Configs seen before come from the table (stale); configs never seen are computed fresh and stored."""
    data, _, cf = _graph()
    net = _net()
    segs = make_segments(data, SEGMENT)
    table = HistoryTable()
    gst_scores(net, segs, cf[:2], POSITIONS[:2], key="g", table=table, rng=np.random.default_rng(0), backprop=1,
               keep_prob=1.0)
    with torch.no_grad():
        old = [net.segment_sum(s, cf) for s in segs]
        net.node_in.bias.add_(0.5)
        new = [net.segment_sum(s, cf) for s in segs]
    scores, (c,) = gst_scores(net, segs, cf, POSITIONS, key="g", table=table, rng=np.random.default_rng(1),
                              backprop=1, keep_prob=1.0)
    # Unchosen segments: rows 0, 1 stale (stored by the first call), rows 2, 3 fresh.
    mixed = [new[i] if i == c else torch.cat([old[i][:2], new[i][2:]]) for i in range(3)]
    torch.testing.assert_close(scores, net.score(sum(mixed), N, cf))
    assert len(table) == 3 * B


def test_history_table_round_trip_filled_mask_and_growth():
    table = HistoryTable()
    assert len(table) == 0 and table.nbytes() == 0
    stored, filled = table.get("a", 0, torch.tensor([0, 1]))
    assert stored is None and filled.tolist() == [False, False]

    values = torch.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True) * 1
    table.put("a", 0, torch.tensor([2, 5]), values)
    stored, filled = table.get("a", 0, torch.tensor([5, 2, 0, 9]))
    assert filled.tolist() == [True, True, False, False]  # 0 never put; 9 beyond the table
    torch.testing.assert_close(stored[:2], torch.tensor([[3.0, 4.0], [1.0, 2.0]]))
    assert not stored.requires_grad  # entries are detached
    assert len(table) == 2 and table.nbytes() == 6 * 2 * 4  # 6 rows of 2 float32
    # Other segments and graphs are separate entries.
    assert table.get("a", 1, torch.tensor([2]))[0] is None
    assert table.get("b", 0, torch.tensor([2]))[0] is None

    # A larger position grows the table and keeps what was there.
    table.put("a", 0, torch.tensor([9]), torch.tensor([[7.0, 8.0]]))
    stored, filled = table.get("a", 0, torch.tensor([2, 5, 9, 0]))
    assert filled.tolist() == [True, True, True, False]
    torch.testing.assert_close(stored[:3], torch.tensor([[1.0, 2.0], [3.0, 4.0], [7.0, 8.0]]))
    assert len(table) == 3 and table.nbytes() == 10 * 2 * 4
    # Overwriting an entry replaces it.
    table.put("a", 0, torch.tensor([5]), torch.tensor([[0.5, 0.5]]))
    torch.testing.assert_close(table.get("a", 0, torch.tensor([5]))[0], torch.tensor([[0.5, 0.5]]))
    assert len(table) == 3
