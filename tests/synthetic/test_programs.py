"""Synthetic programs: valid HLO-like modules, sizes on target, configurable share, determinism, tile kernels."""

from __future__ import annotations

import re
import time
from collections import Counter

import numpy as np
import pytest

from competition.hlo.features import featurize
from competition.hlo.ir import Module
from competition.opcodes import CONFIGURABLE_OPCODES, NUM_OPCODES, OPCODE_NAMES
from competition.synthetic.programs import NLP_BATCH_SIZES, NLP_MODELS, build_program
from competition.synthetic.tile_kernels import tile_kernels

# Real nlp names: small_bert_bert_en_uncased_L-10_H-256_A-4_batch_size_64_train, albert_en_xlarge_batch_size_16_test.
NLP_NAME = re.compile(r"(?P<stem>[a-z][a-z_-]*?)(?:_L-(?P<L>\d+)_H-(?P<H>\d+)_A-(?P<A>\d+))?"
                      r"_batch_size_(?P<batch>\d+)_(?P<mode>train|test)")


def _check_valid(module: Module) -> None:
    names = [c.name for c in module.computations]
    assert len(set(names)) == len(names)
    for k, comp in enumerate(module.computations):
        for i, ins in enumerate(comp.instructions):
            assert all(0 <= o < i for o in ins.operands), (comp.name, i, ins.opcode)
            for callee in ins.called:
                assert callee in names[:k], f"{callee} must come before its caller {comp.name}"
            ops = [comp.instructions[o].shape for o in ins.operands]
            if ins.opcode == "reshape":
                assert ops[0].num_elements == ins.shape.num_elements
                assert ins.shape.rank <= 5
            elif ins.opcode == "dot":
                d = ins.dot_dims
                lhs, rhs = ops
                assert [lhs.dims[a] for a in d.lhs_contracting] == [rhs.dims[a] for a in d.rhs_contracting]
                assert [lhs.dims[a] for a in d.lhs_batch] == [rhs.dims[a] for a in d.rhs_batch]
                expect = [lhs.dims[a] for a in d.lhs_batch]
                expect += [x for a, x in enumerate(lhs.dims) if a not in d.lhs_contracting + d.lhs_batch]
                expect += [x for a, x in enumerate(rhs.dims) if a not in d.rhs_contracting + d.rhs_batch]
                assert list(ins.shape.dims) == expect
            elif ins.opcode == "convolution":
                assert ins.shape.rank in (4, 5) and ins.conv_dims is not None and ins.window is not None
                assert len(ins.window.size) == ins.shape.rank - 2
            elif ins.opcode in ("add", "multiply", "subtract", "divide", "maximum"):
                assert all(s.dims == ins.shape.dims for s in ops)
            elif ins.opcode == "concatenate":
                (axis,) = ins.dimensions
                assert sum(s.dims[axis] for s in ops) == ins.shape.dims[axis]
            elif ins.opcode == "transpose":
                assert tuple(ops[0].dims[p] for p in ins.dimensions) == ins.shape.dims


def _programs(source: str, target: int, seeds: range) -> list[Module]:
    return [build_program(source, np.random.default_rng(s), target) for s in seeds]


@pytest.mark.parametrize("source", ["xla", "nlp"])
@pytest.mark.parametrize("target", [120, 400, 1500, 6000])
def test_valid_and_on_target(source: str, target: int) -> None:
    for m in _programs(source, target, range(3)):
        _check_valid(m)
        if source == "nlp" and target < 200:
            # nlp programs are real architectures: the smallest is a 2-layer encoder of about 220 nodes.
            assert "_L-2_" in m.name and m.num_nodes < 300, (m.name, m.num_nodes)
        else:
            assert 0.65 * target <= m.num_nodes <= 1.35 * target, (m.name, m.num_nodes)
        g = featurize(m)
        assert g.node_feat.shape == (m.num_nodes, 140)
        assert np.all(g.edge_index[:, 0] > g.edge_index[:, 1])
        conf = int(np.isin(g.node_opcode, list(CONFIGURABLE_OPCODES)).sum())
        assert 0.01 <= conf / m.num_nodes <= 0.10, (m.name, conf, m.num_nodes)
        if target >= 400:
            assert conf >= 20, (m.name, conf)


def test_xla_mixes_families_and_training() -> None:
    mods = _programs("xla", 2500, range(12))
    opsets = [{i.opcode for i in m.instructions()} for m in mods]
    assert any("while" in s and "all-reduce" in s for s in opsets)
    assert any("while" not in s for s in opsets)
    assert any("convolution" in s for s in opsets) and any("gather" in s for s in opsets)
    assert len({m.name.split(".")[0].split("_batch")[0] for m in mods}) >= 3
    for m in mods:
        if any(c.name.startswith("while_body") for c in m.computations):
            assert featurize(m).node_splits.shape[1] >= 4


def test_nlp_programs_are_named_and_sized_like_the_real_ones() -> None:
    """2 to 24 layers, hidden 128 to 1024, several batch sizes, train and test; the name tells the structure."""
    stems = {stem.split("_L-")[0]: variants for stem, variants, _ in NLP_MODELS}
    seen: Counter = Counter()
    for target in (250, 1500, 6000, 44_000):
        for m in _programs("nlp", target, range(5)):
            match = NLP_NAME.fullmatch(m.name)
            assert match, m.name
            assert match["stem"] in stems and int(match["batch"]) in NLP_BATCH_SIZES, m.name
            if match["L"]:
                layers, hidden = int(match["L"]), int(match["H"])
                assert int(match["A"]) == hidden // 64
            else:
                ((layers, hidden),) = stems[match["stem"]]
            assert 2 <= layers <= 24 and 128 <= hidden <= 1024
            assert (layers, hidden) in stems[match["stem"]], m.name
            # One softmax (exponential) per encoder layer, plus the classifier's unless the export is encoder-only.
            exps = sum(i.opcode == "exponential" for i in m.instructions())
            assert exps in (layers, layers + 1), (m.name, exps)
            seen.update([match["mode"], match["batch"], layers])
    assert seen["train"] and seen["test"] and len({k for k in seen if isinstance(k, int)}) >= 3
    assert len([k for k in seen if k in ("16", "32", "64")]) >= 2


def _share(m: Module, *opcodes: str) -> float:
    ops = Counter(OPCODE_NAMES[int(o)] for o in featurize(m).node_opcode)
    return sum(ops[o] for o in opcodes) / m.num_nodes


@pytest.mark.parametrize("source", ["xla", "nlp"])
def test_training_graphs_have_real_structure(source: str) -> None:
    """Real: about 1.7 edges per node; node_splits boundaries after cluster / while / cond computations, several
    per training graph (7 in a real 3,163-node module); select and compare about 6% of the nodes, few constants."""
    mods = _programs(source, 3000, range(10))
    train = [m for m in mods if any(i.opcode == "while" for i in m.instructions())
             and any(c.name.startswith("cond_") for c in m.computations)]
    assert len(train) >= 4
    for m in mods:
        g = featurize(m)
        tagged = [k for k, c in enumerate(m.computations) if any(t in c.name for t in ("cluster", "while", "cond"))]
        inner = set(g.node_splits[0, 1:-1].tolist())
        assert inner <= {int(m.offsets[k + 1]) for k in tagged}, m.name
        assert _share(m, "constant") < 0.04, m.name
    for m in train:
        g = featurize(m)
        assert 1.6 <= g.edge_index.shape[0] / m.num_nodes <= 2.0, m.name
        assert g.node_splits.shape[1] - 1 >= 5, m.name
    if source == "xla":  # f16 steps add the loss-scale conditional's two computations
        assert max(featurize(m).node_splits.shape[1] - 1 for m in train) == 7
    shares = [_share(m, "select", "compare") for m in train]
    assert min(shares) > 0.015 and max(shares) > 0.06 and 0.03 < np.mean(shares) < 0.09, shares


def test_plain_cnns_are_trained_with_alexnets_strided_stem(monkeypatch: pytest.MonkeyPatch) -> None:
    """The plain CNN family (AlexNet, VGG) is built as a training step: its forward convolutions carry biases and
    no batch norm, AlexNet's stem is an 11x11 window at stride 4, and the backward pass turns that stride into the
    kernel gradient's window dilation (as the real alexnet graph's convolutions hold it). No gradient of the input
    images is computed: as in the real graph, 14 convolutions for 5 layers, not 15."""
    import competition.synthetic.programs as programs

    draw = programs._draw_config

    def plain(source: str, rng: np.random.Generator, target: int) -> dict:
        while True:
            cfg = draw(source, rng, target)
            if cfg["family"] == "plaincnn":
                return cfg

    monkeypatch.setattr(programs, "_draw_config", plain)
    seen: set[tuple[int, int]] = set()
    for seed in range(4):
        m = build_program("xla", np.random.default_rng(seed), 420)
        _check_valid(m)
        assert m.name.startswith(("alexnet_train_batch_", "vgg")), m.name
        assert any(i.opcode == "while" for i in m.instructions()), m.name
        assert 0.65 * 420 <= m.num_nodes <= 1.35 * 420, (m.name, m.num_nodes)
        convs = [i for i in m.instructions() if i.opcode == "convolution"]
        stem = max(convs, key=lambda i: i.window.stride[0])
        seen.add((stem.window.size[0], stem.window.stride[0]))
        stride = stem.window.stride[0]
        assert any(i.window.window_dilation[0] == stride for i in convs), m.name  # kernel gradient
        input_grads = sum(i.window.reversal[0] for i in convs)  # the flipped kernel
        assert len(convs) == 3 * (input_grads + 1) - 1, m.name  # per layer forward, kernel and input gradients
        assert not any(i.window.base_dilation[0] == stride for i in convs), m.name
        assert not any(i.opcode == "rsqrt" for i in m.instructions()), m.name  # no normalisation
        g = featurize(m)
        conf = int(np.isin(g.node_opcode, list(CONFIGURABLE_OPCODES)).sum())
        assert 0.03 <= conf / m.num_nodes <= 0.10, (m.name, conf, m.num_nodes)
    assert (11, 4) in seen


def test_deterministic() -> None:
    for source in ("xla", "nlp"):
        a = build_program(source, np.random.default_rng(11), 900)
        b = build_program(source, np.random.default_rng(11), 900)
        assert a.name == b.name
        fa, fb = featurize(a), featurize(b)
        for key in ("node_feat", "node_opcode", "edge_index", "node_splits"):
            np.testing.assert_array_equal(getattr(fa, key), getattr(fb, key))


def _mean_pairwise_cosine(mods: list[Module]) -> float:
    hists = []
    for m in mods:
        h = np.bincount(featurize(m).node_opcode, minlength=NUM_OPCODES).astype(float)
        hists.append(h / np.linalg.norm(h))
    h = np.stack(hists)
    sim = h @ h.T
    return float(sim[np.triu_indices(len(mods), 1)].mean())


def test_nlp_graphs_resemble_each_other_more_than_xla() -> None:
    nlp = _mean_pairwise_cosine(_programs("nlp", 1200, range(8)))
    xla = _mean_pairwise_cosine(_programs("xla", 1200, range(8)))
    assert nlp > xla + 0.02, (nlp, xla)


def test_tile_kernels() -> None:
    roots: set[str] = set()
    for seed in range(4):
        rng = np.random.default_rng(seed)
        m = build_program("xla", rng, 800)
        kernels = tile_kernels(m, rng)
        assert len(kernels) >= 4
        for k in kernels:
            assert len(k.computations) == 1
            comp = k.computations[0]
            assert comp.name.startswith("fused_computation.")
            assert 2 <= k.num_nodes <= 80
            ops = [i.opcode for i in comp.instructions]
            n_params = ops.count("parameter")
            assert ops[:n_params] == ["parameter"] * n_params
            assert "parameter" not in ops[n_params:] and n_params < len(ops)
            assert [i.parameter_number for i in comp.instructions[:n_params]] == list(range(n_params))
            _check_valid(k)
            roots.add(ops[-1])
            g = featurize(k)
            assert g.node_feat[-1, 0] == 1 and g.node_feat[:, 0].sum() == 1
            assert g.node_splits.tolist() == [[0, k.num_nodes]]
    assert {"convolution", "dot", "reduce"} <= roots
    assert roots - {"convolution", "dot", "reduce"}


def test_44k_program_is_fast() -> None:
    t0 = time.perf_counter()
    m = build_program("xla", np.random.default_rng(3), 44_000)
    g = featurize(m)
    elapsed = time.perf_counter() - t0
    assert 0.65 * 44_000 <= m.num_nodes <= 1.35 * 44_000
    assert g.edge_index.shape[0] > m.num_nodes
    assert elapsed < 10.0
