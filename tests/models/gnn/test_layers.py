"""GNN building blocks: mean adjacency, propagation, bidirectional SAGE, cross-config attention, RankNet and
make_segments, each against hand-built graphs and known answers."""

from __future__ import annotations

import pytest
import torch
from torch_geometric.data import Data

from models.gnn.layers import BiSAGEConv, CrossConfigAttention, mean_adjacency, propagate
from models.gnn.net import LAYOUT_CONFIG_SLOTS, TILE_CONFIG_COLUMNS, RankNet, make_segments

# A 4-node graph, edges producer -> consumer: 0 -> 2, 1 -> 2, 2 -> 3.
EDGES = torch.tensor([[0, 1, 2], [2, 2, 3]])
# RankNet takes every setting explicitly (its defaults live in models.gnn.train): these, unless a test says otherwise.
NET = dict(hidden=8, layers=2, opcode_dim=16, bidirectional=True, attention=False, join="early", dropout=0.0,
           dim_tokens=False, tile_columns=24)


def test_mean_adjacency_forward_gathers_from_producers():
    a = mean_adjacency(EDGES, 4)
    assert a.is_sparse and a.dtype == torch.float32 and a.shape == (4, 4)
    expected = torch.tensor([
        [0.0, 0.0, 0.0, 0.0],  # node 0: no producer
        [0.0, 0.0, 0.0, 0.0],  # node 1: no producer
        [0.5, 0.5, 0.0, 0.0],  # node 2: mean of nodes 0 and 1
        [0.0, 0.0, 1.0, 0.0],  # node 3: node 2
    ])
    torch.testing.assert_close(a.to_dense(), expected, rtol=0, atol=0)


def test_mean_adjacency_reverse_gathers_from_consumers():
    a = mean_adjacency(EDGES, 4, reverse=True)
    expected = torch.tensor([
        [0.0, 0.0, 1.0, 0.0],  # node 0 feeds node 2
        [0.0, 0.0, 1.0, 0.0],  # node 1 feeds node 2
        [0.0, 0.0, 0.0, 1.0],  # node 2 feeds node 3
        [0.0, 0.0, 0.0, 0.0],  # node 3: no consumer
    ])
    torch.testing.assert_close(a.to_dense(), expected, rtol=0, atol=0)


def test_mean_adjacency_without_edges_is_all_zero():
    a = mean_adjacency(torch.zeros(2, 0, dtype=torch.long), 3)
    torch.testing.assert_close(a.to_dense(), torch.zeros(3, 3), rtol=0, atol=0)


def test_propagate_equals_dense_matmul_per_config():
    torch.manual_seed(0)
    h = torch.randn(2, 4, 3)
    for reverse in (False, True):
        a = mean_adjacency(EDGES, 4, reverse=reverse)
        out = propagate(a, h)
        assert out.shape == (2, 4, 3)
        expected = torch.stack([a.to_dense() @ h[b] for b in range(2)])
        torch.testing.assert_close(out, expected)
    # By hand, forward: node 2 of config 1 is the mean of nodes 0 and 1.
    torch.testing.assert_close(propagate(mean_adjacency(EDGES, 4), h)[1, 2], (h[1, 0] + h[1, 1]) / 2)


def test_propagate_takes_reduced_precision_in_float32():
    """Under autocast a bfloat16 ``h`` is propagated in float32 (CUDA has no bfloat16 sparse product: the tile
    forward pass failed there): float32 out, equal to the product of the bfloat16 values taken in float32."""
    torch.manual_seed(0)
    h = torch.randn(2, 4, 3).bfloat16()
    a = mean_adjacency(EDGES, 4)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = propagate(a, h)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, propagate(a, h.float()))


def _conv_outputs(conv: BiSAGEConv, h: torch.Tensor) -> torch.Tensor:
    return conv(h, mean_adjacency(EDGES, 4), mean_adjacency(EDGES, 4, reverse=True))


def test_bisage_unidirectional_ignores_consumers():
    torch.manual_seed(0)
    conv = BiSAGEConv(3, bidirectional=False)
    assert conv.lin_out is None
    h = torch.randn(1, 4, 3)
    changed = h.clone()
    changed[0, 3] += 5.0  # node 3 is the last consumer
    before, after = _conv_outputs(conv, h), _conv_outputs(conv, changed)
    torch.testing.assert_close(after[0, :3], before[0, :3], rtol=0, atol=0)  # nothing upstream moves
    assert not torch.allclose(after[0, 3], before[0, 3])  # its own output does
    # And the forward direction is there: changing a producer moves its consumer.
    changed = h.clone()
    changed[0, 0] += 5.0
    assert not torch.allclose(_conv_outputs(conv, changed)[0, 2], before[0, 2])


def test_bisage_bidirectional_sees_consumers():
    torch.manual_seed(0)
    conv = BiSAGEConv(3, bidirectional=True)
    h = torch.randn(1, 4, 3)
    changed = h.clone()
    changed[0, 3] += 5.0
    before, after = _conv_outputs(conv, h), _conv_outputs(conv, changed)
    assert not torch.allclose(after[0, 2], before[0, 2])  # node 2 gathers from its consumer, node 3
    torch.testing.assert_close(after[0, :2], before[0, :2], rtol=0, atol=0)  # nodes 0, 1 are not node 3's neighbours
    # By hand: out = W_self h + W_in mean(producers) + W_out mean(consumers).
    a_in = mean_adjacency(EDGES, 4).to_dense()
    a_out = mean_adjacency(EDGES, 4, reverse=True).to_dense()
    expected = conv.lin_self(h[0]) + (a_in @ h[0]) @ conv.lin_in.weight.T + (a_out @ h[0]) @ conv.lin_out.weight.T
    torch.testing.assert_close(before[0], expected)


def test_attention_shape_and_config_permutation_equivariance():
    torch.manual_seed(0)
    att = CrossConfigAttention(8)
    h = torch.randn(5, 7, 8)
    out = att(h)
    assert out.shape == h.shape
    perm = torch.tensor([3, 0, 4, 1, 2])
    torch.testing.assert_close(att(h[perm]), out[perm])
    # The configs do see each other: changing config 0 changes config 1's output.
    changed = h.clone()
    changed[0] += 3.0
    assert not torch.allclose(att(changed)[1], out[1])


def test_attention_single_config_has_unit_weights():
    torch.manual_seed(0)
    att = CrossConfigAttention(8)
    h = torch.randn(1, 7, 8)
    # the weights are exactly 1; the mix is taken as two products, so equal up to float rounding
    torch.testing.assert_close(att(h), att.mix(torch.cat([h, h], dim=-1)), rtol=1e-6, atol=1e-6)


def test_attention_identical_configs_are_like_one():
    torch.manual_seed(0)
    att = CrossConfigAttention(8)
    h = torch.randn(1, 7, 8)
    torch.testing.assert_close(att(h.expand(4, -1, -1)), att(h).expand(4, -1, -1))


def test_attention_temperature_is_learnable():
    torch.manual_seed(0)
    att = CrossConfigAttention(8, temperature=0.5)
    assert att.temperature.item() == pytest.approx(0.5)
    assert att.log_temperature.requires_grad
    (att(torch.randn(3, 7, 8)) ** 2).sum().backward()
    assert att.log_temperature.grad is not None and float(att.log_temperature.grad.abs()) > 0


# -- RankNet -----------------------------------------------------------------------------------------------------

F = 5
N = 6


def _layout_data(batch: int = 4, seed: int = 0) -> tuple[Data, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    data = Data(x=torch.randn(N, F, generator=g), op=torch.randint(0, 50, (N,), generator=g),
                edge_index=torch.tensor([[0, 1, 2, 3, 4], [1, 2, 3, 4, 5]]),
                config_node_index=torch.tensor([1, 4]), num_nodes=N)
    config_feat = torch.randint(-1, 6, (batch, 2, LAYOUT_CONFIG_SLOTS), generator=g).float()
    return data, config_feat


def _tile_data(batch: int = 4, seed: int = 0) -> tuple[Data, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    data = Data(x=torch.randn(N, F, generator=g), op=torch.randint(0, 50, (N,), generator=g),
                edge_index=torch.tensor([[0, 1, 2, 3, 4], [1, 2, 3, 4, 5]]), num_nodes=N)
    config_feat = torch.randint(0, 20, (batch, TILE_CONFIG_COLUMNS), generator=g).float()
    return data, config_feat


def test_ranknet_layout_scores_one_per_config():
    torch.manual_seed(0)
    data, cf = _layout_data(batch=4)
    net = RankNet("layout", F, **NET).eval()
    scores = net(make_segments(data), cf)
    assert scores.shape == (4,) and scores.dtype == torch.float32 and torch.isfinite(scores).all()
    # Different configs get different scores (the config enters the network).
    assert len(set(scores.tolist())) == 4


@pytest.mark.parametrize("join", ["early", "late"])
@pytest.mark.parametrize("attention", [False, True])
def test_ranknet_tile_scores_one_per_config(join: str, attention: bool):
    torch.manual_seed(0)
    data, cf = _tile_data(batch=4)
    net = RankNet("tile", F, **{**NET, "join": join, "attention": attention}).eval()
    scores = net(make_segments(data), cf)
    assert scores.shape == (4,) and torch.isfinite(scores).all()
    assert len(set(scores.tolist())) == 4


def test_ranknet_rejects_unknown_kind_and_join():
    with pytest.raises(ValueError, match="kind"):
        RankNet("graph", F, **NET)
    with pytest.raises(ValueError, match="join"):
        RankNet("tile", F, **{**NET, "join": "middle"})


@pytest.mark.parametrize("kind", ["layout", "tile"])
def test_ranknet_with_attention_is_permutation_equivariant(kind: str):
    torch.manual_seed(0)
    data, cf = (_layout_data if kind == "layout" else _tile_data)(batch=6)
    net = RankNet(kind, F, **{**NET, "attention": True, "join": "late"}).eval()
    segs = make_segments(data)
    scores = net(segs, cf)
    perm = torch.tensor([5, 2, 0, 4, 1, 3])
    torch.testing.assert_close(net(segs, cf[perm]), scores[perm])
    # With attention a config's score does depend on its batch mates.
    assert not torch.allclose(net(segs, cf[:3]), scores[:3])


@pytest.mark.parametrize("kind", ["layout", "tile"])
def test_ranknet_without_attention_scores_configs_independently(kind: str):
    torch.manual_seed(0)
    data, cf = (_layout_data if kind == "layout" else _tile_data)(batch=6)
    net = RankNet(kind, F, **NET).eval()
    segs = make_segments(data)
    full = net(segs, cf)
    torch.testing.assert_close(net(segs, cf[[0, 1, 2]]), full[[0, 1, 2]])
    torch.testing.assert_close(net(segs, cf[[0, 4, 5]]), full[[0, 4, 5]])
    torch.testing.assert_close(net(segs, cf[[0]]), full[[0]])


def test_ranknet_segments_sum_like_the_whole_graph_without_edges():
    """With no edges message passing is per node, so the sum over segments equals the whole graph's sum."""
    torch.manual_seed(0)
    data, cf = _layout_data(batch=3)
    data.edge_index = torch.zeros(2, 0, dtype=torch.long)
    net = RankNet("layout", F, **{**NET, "attention": True}).eval()
    whole = net(make_segments(data), cf)
    torch.testing.assert_close(net(make_segments(data, 2), cf), whole)


# -- make_segments -----------------------------------------------------------------------------------------------


def _chain(n: int, slot_nodes: list[int]) -> Data:
    src = torch.arange(n - 1)
    return Data(x=torch.arange(n * 2, dtype=torch.float32).reshape(n, 2), op=torch.arange(n),
                edge_index=torch.stack([src, src + 1]), config_node_index=torch.tensor(slot_nodes), num_nodes=n)


def test_make_segments_on_a_chain():
    data = _chain(10, [1, 5, 9, 4])  # slot 0 -> node 1, slot 1 -> node 5, slot 2 -> node 9, slot 3 -> node 4
    segs = make_segments(data, 4)
    assert [(s.start, s.stop) for s in segs] == [(0, 4), (4, 8), (8, 10)]
    assert [s.num_nodes for s in segs] == [4, 4, 2]
    # 9 chain edges, the 2 crossing ones (3 -> 4, 7 -> 8) dropped: 3 + 3 + 1 stay.
    assert [int(s.adj_in._nnz()) for s in segs] == [3, 3, 1]
    assert sum(int(s.adj_out._nnz()) for s in segs) == 9 - 2
    for s in segs:
        n = s.num_nodes
        chain = torch.diag(torch.ones(n - 1), -1)  # local node i gathers from local node i - 1
        torch.testing.assert_close(s.adj_in.to_dense(), chain, rtol=0, atol=0)
        torch.testing.assert_close(s.adj_out.to_dense(), chain.T, rtol=0, atol=0)
        torch.testing.assert_close(s.x, data.x[s.start:s.stop], rtol=0, atol=0)
        assert s.op.tolist() == list(range(s.start, s.stop))
    assert [s.slots.tolist() for s in segs] == [[0], [1, 3], [2]]
    assert [s.slot_nodes.tolist() for s in segs] == [[1], [1, 0], [1]]


def test_make_segments_whole_graph_and_bad_size():
    data = _chain(10, [1, 5])
    for size in (None, 10, 50):
        (seg,) = make_segments(data, size)
        assert (seg.start, seg.stop) == (0, 10) and int(seg.adj_in._nnz()) == 9
        assert seg.slots.tolist() == [0, 1] and seg.slot_nodes.tolist() == [1, 5]
    assert [(s.start, s.stop) for s in make_segments(data, 1)] == [(i, i + 1) for i in range(10)]
    with pytest.raises(ValueError, match="segment_size"):
        make_segments(data, 0)


def test_make_segments_tile_graph_has_no_slots():
    g = _chain(5, [])
    del g.config_node_index
    segs = make_segments(g, 2)
    assert [(s.start, s.stop) for s in segs] == [(0, 2), (2, 4), (4, 5)]
    assert all(s.slots.numel() == 0 and s.slot_nodes.numel() == 0 for s in segs)
