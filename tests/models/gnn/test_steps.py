"""The deduplicating training forward (models/gnn/infer.py dedup_scores): the same scores and gradients as the
plain forward pass, and training uses it for layout graphs exactly when it may (no dropout, no GST)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch

import models.gnn.infer as infer
from models.gnn.config import DEFAULTS
from models.gnn.gst import HistoryTable
from models.gnn.infer import LayoutStructure, config_codes, dedup_scores, layout_codes
from models.gnn.net import make_segments
from models.gnn.steps import GraphScores, Item, StepTable
from tests.models.gnn.test_infer import SLOT_NODES, _graph, _net


def _grads(net: torch.nn.Module, scores: torch.Tensor) -> list[torch.Tensor | None]:
    weights = torch.linspace(-1, 1, scores.shape[0])  # a loss that weighs every config differently
    return list(torch.autograd.grad((scores * weights).sum() + scores.pow(2).sum(), list(net.parameters()),
                                    allow_unused=True))


@pytest.mark.parametrize("segment_size", [None, 13])
@pytest.mark.parametrize("bidirectional", [True, False])
@pytest.mark.parametrize("attention", [False, True])
def test_dedup_scores_and_gradients_equal_the_forward_pass(attention: bool, bidirectional: bool,
                                                           segment_size: int | None):
    data, cf = _graph()
    net = _net(attention, bidirectional).train()
    segments = make_segments(data, segment_size)
    structure = LayoutStructure(segments, bidirectional=bidirectional)
    expected = net(segments, cf)
    got = dedup_scores(net, structure, cf)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    for g_dedup, g_plain, (name, _) in zip(_grads(net, got), _grads(net, net(segments, cf)),
                                           net.named_parameters(), strict=True):
        assert (g_dedup is None) == (g_plain is None), name
        if g_plain is not None:
            torch.testing.assert_close(g_dedup, g_plain, rtol=1e-4, atol=1e-4, msg=name)
    # Components whose configs are all alike are run once (nodes 50..59 have no slot).
    assert structure.num_dynamic_nodes < data.num_nodes
    # A one-segment graph's structure holds its features, not a copy (it lives as long as the fit).
    assert (structure.x is segments[0].x) == (len(segments) == 1)


def test_dedup_scores_with_dimension_tokens_and_a_single_config():
    data, cf = _graph()
    data.config_dim_sizes = torch.randint(1, 300, (len(SLOT_NODES), 3, 7),
                                          generator=torch.Generator().manual_seed(1)).float()
    net = _net(True, dim_tokens=True).train()
    segments = make_segments(data)
    structure = LayoutStructure(segments, bidirectional=True)
    for batch in (cf, cf[:1]):
        got = dedup_scores(net, structure, batch)
        torch.testing.assert_close(got, net(segments, batch), rtol=1e-5, atol=1e-5)
    grads = _grads(net, dedup_scores(net, structure, cf))
    for g_dedup, g_plain, (name, _) in zip(grads, _grads(net, net(segments, cf)), net.named_parameters(),
                                           strict=True):
        # gradients in the tens to hundreds here: float rounding grows with them
        torch.testing.assert_close(g_dedup, g_plain, rtol=1e-4, atol=max(1e-4, 1e-5 * float(g_plain.abs().max())),
                                   msg=name)



@pytest.mark.parametrize("temperature", [0.5, 1e-3])
def test_the_training_softmax_is_shifted_per_node(temperature: float, monkeypatch: pytest.MonkeyPatch):
    """The training attention's softmax is shifted by each node's own maximum, whatever the logits' range: a shared
    maximum leaves the sums of nodes far below it near exp(-80), finite, but the gradient of their reciprocal
    overflows (non-finite weights after a step). Scores equal the plain forward's, gradients are finite (a
    temperature of 1e-3 spreads the logits over thousands)."""
    data, cf = _graph()
    net = _net(True).train()
    with torch.no_grad():
        for block in net.blocks:
            block.attention.log_temperature.fill_(float(np.log(temperature)))
    segments = make_segments(data)
    structure = LayoutStructure(segments, bidirectional=True)
    per_node: list[int] = []
    real = torch.segment_reduce

    def spy(data: torch.Tensor, *args, **kwargs):
        per_node.append(data.shape[0])
        return real(data, *args, **kwargs)

    monkeypatch.setattr(torch, "segment_reduce", spy)
    got = dedup_scores(net, structure, cf)
    assert len(per_node) == 3  # once per attention layer
    monkeypatch.setattr(torch, "segment_reduce", real)
    expected = net(segments, cf)
    assert torch.isfinite(got).all()
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    for g_dedup, g_plain, (name, _) in zip(_grads(net, got), _grads(net, expected), net.named_parameters(),
                                           strict=True):
        if g_plain is None:
            continue
        assert torch.isfinite(g_dedup).all(), name
        if temperature > 0.01:  # near one-hot softmaxes: gradients there are rounding-sensitive, scores are not
            torch.testing.assert_close(g_dedup, g_plain, rtol=1e-4, atol=max(1e-4, 1e-5 * float(g_plain.abs().max())),
                                       msg=name)


def test_the_training_batch_is_run_once_per_distinct_key(monkeypatch: pytest.MonkeyPatch):
    """37 configs with repeats: the rows run through the layers are the components' nodes times their distinct
    keys, never configs x nodes."""
    data, cf = _graph()
    structure = LayoutStructure(make_segments(data), bidirectional=True)
    by_slot = layout_codes(cf).t().contiguous()
    ids, distinct = structure.keys(by_slot, 0, structure.num_components)
    sizes = structure.comp_nodes[1:] - structure.comp_nodes[:-1]
    seen: list[int] = []
    real = infer._train_block

    def spy(block, h, *args):
        seen.append(h.shape[0])
        return real(block, h, *args)

    monkeypatch.setattr(infer, "_train_block", spy)
    dedup_scores(_net(True).train(), structure, cf)
    static = data.num_nodes - structure.num_dynamic_nodes
    assert seen == [static] * 3 + [int((sizes * distinct).sum())] * 3  # 3 layers each
    assert int((sizes * distinct).sum()) < structure.num_dynamic_nodes * cf.shape[0]


def test_layout_codes_equal_config_codes():
    _, cf = _graph()
    cf[0, 0, :3] = torch.tensor([-1.0, 7.0, 2.9])  # clipped to 5 and truncated like the network reads them
    assert torch.equal(layout_codes(cf), config_codes(cf))
    assert torch.equal(layout_codes(cf.to(torch.int8).float()), config_codes(cf.to(torch.int8)))


@pytest.mark.parametrize(("dropout", "segment_size", "dedup"), [(0.0, None, True), (0.1, None, False),
                                                                  (0.0, 13, False)])
def test_training_uses_the_dedup_forward_only_where_it_is_exact(dropout: float, segment_size: int | None,
                                                                dedup: bool, monkeypatch: pytest.MonkeyPatch):
    """Dropout draws a mask per config and node (no rows to share) and GST runs segments apart: both keep the
    plain forward pass."""
    import models.gnn.steps as gnn_steps

    calls: list[str] = []
    real = gnn_steps.dedup_scores
    monkeypatch.setattr(gnn_steps, "dedup_scores", lambda *a: calls.append("dedup") or real(*a))
    data, cf = _graph()
    cfg = replace(DEFAULTS["layout"].with_(dropout=dropout, segment_size=segment_size, dim_tokens=False), num_features=5)
    net = _net(True).train()
    item = Item("g", make_segments(data, segment_size), cf, torch.arange(cf.shape[0]).double())
    scores = GraphScores(net)(item, cf, torch.arange(cf.shape[0]), cfg, StepTable(HistoryTable()),
                              np.random.default_rng(0))
    assert scores.shape == (cf.shape[0],)
    assert calls == (["dedup"] if dedup else [])
    if dedup:
        assert item.structure(net) is item.structure(net)  # built once per graph


def test_scoring_a_graph_gives_the_heap_back(monkeypatch: pytest.MonkeyPatch):
    """Each predict_scores call ends with release_heap (glibc's malloc_trim where there is one), even when it
    raises; release_heap itself runs on this platform."""
    import models.gnn.steps as steps

    steps.release_heap()  # the real one: no error here, whatever the C library
    calls: list[int] = []
    monkeypatch.setattr(steps, "release_heap", lambda: calls.append(1))
    data, cf = _graph()
    net = _net(True)
    segments = make_segments(data)
    scores = steps.predict_scores(net, segments, cf, batch=8, context="batches")
    assert scores.shape == (cf.shape[0],) and calls == [1]
    with pytest.raises(ValueError, match="cannot reshape"):  # configs of the wrong width
        steps.predict_scores(net, segments, cf[:, :, :3], batch=8)
    assert calls == [1, 1]
