"""Fast layout prediction (models/gnn/infer.py): the same scores as RankNet.forward, whatever the graph's
components, segments, duplicates and budgets; config codes; streaming; and the CPU staying in float32."""

from __future__ import annotations

import contextlib
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from torch_geometric.data import Data

import models.gnn.infer as infer
from competition.collections import Collection, Split
from competition.dataroot import find_data_root, list_graphs
from competition.reader import load_graph
from models.gnn.infer import LayoutPlan, code_values, config_codes, iter_code_blocks
from models.gnn.net import CONFIG_VALUES, LAYOUT_CONFIG_SLOTS, RankNet, make_segments
from models.gnn.steps import inference_autocast, predict_scores

SLOT_NODES = [1, 4, 4, 9, 15, 16, 30, 44, 48]  # node 4 holds two slots; 1 and 4 share a component


def _graph(configs: int = 37, seed: int = 0) -> tuple[Data, torch.Tensor]:
    """60 nodes: chains cut every 7 nodes plus two cross edges, so some components hold several slots, some one,
    some none (nodes 50..59 are isolated); configs with repeats, so keys are shared."""
    g = torch.Generator().manual_seed(seed)
    edges = [[i, i + 1] for i in range(50) if i % 7 != 6] + [[3, 10], [20, 25]]
    data = Data(x=torch.randn(60, 5, generator=g), op=torch.randint(0, 40, (60,), generator=g),
                edge_index=torch.tensor(edges).t(), config_node_index=torch.tensor(SLOT_NODES), num_nodes=60)
    cf = torch.randint(-1, 3, (configs, len(SLOT_NODES), LAYOUT_CONFIG_SLOTS), generator=g).float()
    cf[5:10] = cf[0]  # identical configs
    cf[12:20, :4] = cf[3, :4]  # configs that agree on some components only
    return data, cf


def _net(attention: bool, bidirectional: bool = True, seed: int = 0, dim_tokens: bool = False) -> RankNet:
    torch.manual_seed(seed)
    net = RankNet("layout", 5, hidden=8, layers=3, opcode_dim=16, bidirectional=bidirectional, attention=attention,
                  join="early", dropout=0.0, dim_tokens=dim_tokens, tile_columns=24).eval()
    with torch.no_grad():  # away from the initialisation, so that every term matters
        for p in net.parameters():
            p.add_(torch.randn_like(p) * 0.3)
    return net


@pytest.mark.parametrize("segment_size", [None, 13])
@pytest.mark.parametrize("bidirectional", [True, False])
@pytest.mark.parametrize("attention", [False, True])
def test_plan_scores_equal_the_forward_pass(attention: bool, bidirectional: bool, segment_size: int | None):
    data, cf = _graph()
    net = _net(attention, bidirectional)
    segments = make_segments(data, segment_size)
    plan = LayoutPlan(net, segments)
    with torch.no_grad():
        expected = net(segments, cf)
    torch.testing.assert_close(plan.scores(config_codes(cf)), expected, rtol=1e-5, atol=1e-5)
    # Components whose configs are all alike are computed once per graph.
    assert plan.num_dynamic_nodes < data.num_nodes


@pytest.mark.parametrize("segment_size", [None, 13])
@pytest.mark.parametrize("attention", [False, True])
def test_plan_scores_equal_the_forward_pass_with_dimension_tokens(attention: bool, segment_size: int | None):
    data, cf = _graph()
    g = torch.Generator().manual_seed(1)
    sizes = torch.randint(1, 300, (len(SLOT_NODES), 3, 7), generator=g).float()
    sizes[:, :, 0] = 0  # value -1 names no dimension
    sizes[2, 1, 4:] = 0  # a rank-3 operand
    data.config_dim_sizes = sizes
    net = _net(attention, dim_tokens=True)
    segments = make_segments(data, segment_size)
    plan = LayoutPlan(net, segments)
    with torch.no_grad():
        expected = net(segments, cf)
    torch.testing.assert_close(plan.scores(config_codes(cf)), expected, rtol=1e-5, atol=1e-5)
    # The sizes matter: the same configs with other sizes score otherwise.
    data.config_dim_sizes = sizes.flip(0)
    with torch.no_grad():
        assert not torch.allclose(net(make_segments(data, segment_size), cf), expected)
    del data.config_dim_sizes
    with pytest.raises(ValueError, match="config_dim_sizes"):
        net(make_segments(data, segment_size), cf)


@pytest.mark.parametrize("attention", [False, True])
def test_plan_scores_do_not_depend_on_the_budgets(attention: bool, monkeypatch: pytest.MonkeyPatch):
    data, cf = _graph()
    net = _net(attention)
    plan = LayoutPlan(net, make_segments(data))
    whole = plan.scores(config_codes(cf))
    monkeypatch.setattr(infer, "ROW_BUDGET", 7)  # many runs of components, some above the budget alone
    monkeypatch.setattr(infer, "KEY_BUDGET", 40)  # keys worked out a component at a time
    torch.testing.assert_close(plan.scores(config_codes(cf)), whole, rtol=1e-6, atol=1e-6)


def test_attention_softmax_falls_back_to_per_node_shift(monkeypatch: pytest.MonkeyPatch):
    """With a spread too wide for one shared shift the per-node maximum is used: same scores."""
    data, cf = _graph()
    net = _net(True)
    plan = LayoutPlan(net, make_segments(data))
    shared = plan.scores(config_codes(cf))
    monkeypatch.setattr(infer, "_EXP_RANGE", 0.0)
    torch.testing.assert_close(plan.scores(config_codes(cf)), shared, rtol=1e-5, atol=1e-6)


def _reference_forward(net: RankNet, segments, reference: torch.Tensor, cf: torch.Tensor) -> torch.Tensor:
    """The plain forward pass, written out: the reference batch is run as one batch, each attention layer's
    ``log sum exp(o / T)`` over it kept per node and channel (per segment, in call order); then each config
    alone, its attention weight ``(|R| + 1) sigmoid(o / T - kept)``."""
    from models.gnn.layers import CrossConfigAttention

    kept: list[torch.Tensor] = []
    original = CrossConfigAttention.forward

    def record(self, h):
        # A segment without slots runs once (B = 1) standing for |R| identical configs.
        same = math.log(reference.shape[0]) if h.shape[0] == 1 else 0.0
        kept.append(torch.logsumexp(h / self.temperature, dim=0) + same)
        return original(self, h)

    def against(self, h):
        weights = (reference.shape[0] + 1) * torch.sigmoid(h / self.temperature - kept[against.layer])
        against.layer += 1
        return self.mix(torch.cat([h, weights * h], dim=-1))

    with torch.no_grad(), pytest.MonkeyPatch.context() as mp:
        mp.setattr(CrossConfigAttention, "forward", record)
        net(segments, reference)
        mp.setattr(CrossConfigAttention, "forward", against)
        out = []
        for row in cf:
            against.layer = 0
            out.append(net(segments, row[None]))
    return torch.cat(out)


@pytest.mark.parametrize("segment_size", [None, 13])
def test_reference_context_equals_scoring_each_config_against_the_reference(segment_size: int | None,
                                                                           monkeypatch: pytest.MonkeyPatch):
    data, cf = _graph()
    net = _net(True)
    segments = make_segments(data, segment_size)
    plan = LayoutPlan(net, segments)
    reference = cf[[2, 7, 11, 12, 30, 31]]
    context = infer.ReferenceContext(plan, config_codes(reference))
    expected = _reference_forward(net, segments, reference, cf)
    got = plan.scores(config_codes(cf), context)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    # A config's score depends on it and the reference only: the same in any block, alone or with others.
    torch.testing.assert_close(plan.scores(config_codes(cf[20:23]), context), got[20:23], rtol=1e-6, atol=1e-6)
    # ... and on no budget.
    monkeypatch.setattr(infer, "ROW_BUDGET", 7)
    monkeypatch.setattr(infer, "KEY_BUDGET", 40)
    torch.testing.assert_close(plan.scores(config_codes(cf), context), got, rtol=1e-5, atol=1e-6)
    # A reference drawn larger than the batch it stands for is scaled to it: the set twice over, standing for
    # itself once, is the same context.
    twice = infer.ReferenceContext(plan, config_codes(torch.cat([reference, reference])), size=reference.shape[0])
    assert twice.size == context.size == 6
    torch.testing.assert_close(plan.scores(config_codes(cf), twice), got, rtol=1e-5, atol=1e-6)
    # Recording with the per-node shift (a spread too wide for one shared shift) gives the same reference.
    monkeypatch.setattr(infer, "_EXP_RANGE", 0.0)
    wide = infer.ReferenceContext(plan, config_codes(reference))
    for a, b in zip(wide.log_sums, context.log_sums, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_reference_context_without_attention_changes_nothing():
    data, cf = _graph()
    net = _net(False)
    plan = LayoutPlan(net, make_segments(data))
    context = infer.ReferenceContext(plan, config_codes(cf[:5]))
    assert context.log_sums == []
    torch.testing.assert_close(plan.scores(config_codes(cf), context), plan.scores(config_codes(cf)))


def test_graph_without_slots_scores_every_config_alike():
    data, cf = _graph()
    data.config_node_index = torch.zeros(0, dtype=torch.long)
    net = _net(True)
    plan = LayoutPlan(net, make_segments(data))
    assert plan.num_components == 0
    scores = plan.scores(config_codes(cf[:, :0]))
    with torch.no_grad():
        expected = net(make_segments(data), cf[:, :0])
    torch.testing.assert_close(scores, expected, rtol=1e-5, atol=1e-5)
    assert torch.all(scores == scores[0])


def test_config_codes_pack_what_the_embedding_sees():
    g = torch.Generator().manual_seed(1)
    cf = torch.randint(-1, 6, (50, 7, LAYOUT_CONFIG_SLOTS), generator=g).float()
    cf[0, 0, :4] = torch.tensor([-3.0, 9.0, 2.7, -0.5])  # out of range and fractional: clamped and truncated
    codes = config_codes(cf)
    assert codes.dtype == torch.long and codes.shape == (50, 7)
    expected = cf.long().add(1).clamp(0, CONFIG_VALUES - 1)  # RankNet.segment_sum's embedding indices
    assert torch.equal(code_values(codes), expected)
    assert torch.equal(config_codes(cf.numpy()), codes)  # numpy in, the same codes
    assert config_codes(np.zeros((0, 3, LAYOUT_CONFIG_SLOTS), np.float32)).shape == (0, 3)


@pytest.mark.parametrize("attention", [False, True])
def test_predict_scores_takes_codes_or_features(attention: bool):
    data, cf = _graph(40)
    net = _net(attention)
    segments = make_segments(data)
    a = predict_scores(net, segments, cf, batch=16, orderings=3, seed=5)
    b = predict_scores(net, segments, config_codes(cf), batch=16, orderings=3, seed=5,
                       plan=LayoutPlan(net, segments))
    np.testing.assert_array_equal(a, b)


def test_one_batch_holding_every_config_is_scored_once():
    """Every ordering of a batch that holds all configs is the same batch: the orderings change nothing."""
    data, cf = _graph(20)
    net = _net(True)
    segments = make_segments(data)
    once = predict_scores(net, segments, cf, batch=32, orderings=1)
    np.testing.assert_array_equal(predict_scores(net, segments, cf, batch=32, orderings=4, seed=3), once)
    with torch.no_grad():
        np.testing.assert_allclose(once, net(segments, cf).double().numpy(), rtol=1e-5, atol=1e-6)


def test_autocast_is_skipped_on_the_cpu():
    """On the CPU prediction stays in float32: no autocast context, the same scores with or without it."""
    assert isinstance(inference_autocast(torch.device("cpu")), contextlib.nullcontext)
    assert isinstance(inference_autocast(torch.device("cuda"), enabled=False), contextlib.nullcontext)
    data, cf = _graph()
    net = _net(True)
    segments = make_segments(data)
    np.testing.assert_array_equal(predict_scores(net, segments, cf, batch=16, orderings=2, mixed_precision=True),
                                  predict_scores(net, segments, cf, batch=16, orderings=2, mixed_precision=False))


@pytest.mark.parametrize("attention", [False, True])
def test_plan_runs_under_autocast(attention: bool):
    """The reduced-precision path (what CUDA runs) keeps its reductions in float32: exercised here with the
    CPU's bfloat16 autocast, the scores stay close to the float32 ones."""
    data, cf = _graph()
    net = _net(attention)
    plan = LayoutPlan(net, make_segments(data))
    exact = plan.scores(config_codes(cf))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        mixed = plan.scores(config_codes(cf))
    assert mixed.dtype == torch.float32
    torch.testing.assert_close(mixed, exact, rtol=0.05, atol=0.05)


# -- streaming ----------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def layout_graph(tiny_world: Path):
    root = find_data_root(tiny_world)
    return load_graph(list_graphs(root, Collection.LAYOUT_NLP_RANDOM, Split.TRAIN)[0], Collection.LAYOUT_NLP_RANDOM)


@pytest.mark.parametrize("prefetch", [False, True])
def test_code_blocks_cover_every_config_in_order(layout_graph, prefetch: bool):
    everything = config_codes(layout_graph.config_features())
    n = everything.shape[0]
    blocks = list(iter_code_blocks(layout_graph, 7, read_rows=3, prefetch=prefetch))
    assert [start for start, _ in blocks] == list(range(0, n, 7))
    assert torch.equal(torch.cat([b for _, b in blocks]), everything)


def test_code_blocks_stop_early_and_pass_errors_on(layout_graph, monkeypatch: pytest.MonkeyPatch):
    it = iter_code_blocks(layout_graph, 2, read_rows=1)
    next(it)
    it.close()  # the reader thread is told to stop and joined: no hang

    def broken(*args, **kwargs):
        yield 0, np.zeros((1, layout_graph.num_config_nodes, LAYOUT_CONFIG_SLOTS), np.float32)
        raise OSError("disk gone")

    monkeypatch.setattr(type(layout_graph), "iter_config_blocks", broken)
    with pytest.raises(OSError, match="disk gone"):
        list(iter_code_blocks(layout_graph, 1))
