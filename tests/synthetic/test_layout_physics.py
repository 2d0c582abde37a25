"""Layout runtime model: hand-computed runtimes, copy rules, features, vectorised == reference, searches."""

from __future__ import annotations

import numpy as np
import pytest

from competition.hlo.ir import Computation, ConvDims, DotDims, Module, Shape, Window, default_layout
from competition.synthetic import layout_physics as lp_mod
from competition.synthetic.layout_physics import ELEMENTWISE, NO_DEMAND, LayoutProblem
from competition.synthetic.physics import HBM_BYTES_PER_NS, LAUNCH_NS, PEAK_FLOPS_PER_NS

NHWC = ConvDims(input_batch=0, input_feature=3, input_spatial=(1, 2), kernel_input_feature=2,
                kernel_output_feature=3, kernel_spatial=(0, 1), output_batch=0, output_feature=3,
                output_spatial=(1, 2))


def random_module(rng: np.random.Generator, blocks: int = 20, name: str = "dev", filler: int = 0) -> Module:
    """A CNN/transformer-like chain: conv blocks, reshape + dot blocks, elementwise glue, side reductions."""
    c = Computation("main")
    dtype = str(rng.choice(["f32", "bf16"]))
    b = int(rng.choice([1, 2, 8, 32]))
    h = int(rng.choice([7, 14, 28, 56]))
    ch = int(rng.choice([3, 16, 64, 128]))
    x = c.add("parameter", Shape(dtype, (b, h, h, ch)), parameter_number=0)
    p = 1
    for _ in range(blocks):
        dims = c.instructions[x].shape.dims
        side = x
        for _ in range(filler):  # layout-independent side work, as the many small ops of a real graph
            side = c.add("negate" if side == x else "reduce" if rng.random() < 0.2 else "abs",
                         c.instructions[side].shape, (side,))
        kind = rng.random()
        if kind < 0.55:
            co = int(rng.choice([32, 64, 128, 256]))
            k = int(rng.choice([1, 3]))
            w = c.add("parameter", Shape(dtype, (k, k, dims[3], co)), parameter_number=p)
            p += 1
            y = c.add("convolution", Shape(dtype, dims[:3] + (co,)), (x, w), conv_dims=NHWC,
                      window=Window.simple((k, k), pad_low=(k // 2,) * 2, pad_high=(k // 2,) * 2))
            bias = c.add("parameter", Shape(dtype, (co,)), parameter_number=p)
            p += 1
            bb = c.add("broadcast", Shape(dtype, dims[:3] + (co,)), (bias,), dimensions=(3,))
            y = c.add("add", Shape(dtype, dims[:3] + (co,)), (y, bb))
            zero = c.add("constant", Shape(dtype, ()))
            zb = c.add("broadcast", Shape(dtype, dims[:3] + (co,)), (zero,))
            x = c.add("maximum", Shape(dtype, dims[:3] + (co,)), (y, zb))
        elif kind < 0.9:
            rows = dims[0] * dims[1] * dims[2]
            flat = c.add("reshape", Shape(dtype, (rows, dims[3])), (x,))
            d = int(rng.choice([64, 128, 256]))
            transposed = rng.random() < 0.5
            wshape = (d, dims[3]) if transposed else (dims[3], d)
            w = c.add("parameter", Shape(dtype, wshape), parameter_number=p)
            p += 1
            dd = DotDims(lhs_contracting=(1,), rhs_contracting=(1,) if transposed else (0,))
            y = c.add("dot", Shape(dtype, (rows, d)), (flat, w), dot_dims=dd)
            y = c.add("exponential", Shape(dtype, (rows, d)), (y,))
            x = c.add("reshape", Shape(dtype, dims[:3] + (d,)), (y,))
            x = c.add("multiply", Shape(dtype, dims[:3] + (d,)), (x, x))
        else:
            r = c.add("reduce", Shape(dtype, dims[:3]), (x,), dimensions=(3,))
            c.add("negate", Shape(dtype, dims[:3]), (r,))
            x = c.add("convert", Shape(dtype, dims), (x,))
    c.add("tuple", Shape("tuple", tuple_shapes=(c.instructions[x].shape,)), (x,))
    return Module(name, [c])


def _hand_module() -> Module:
    """parameter x f32[16,256], parameter w f32[256,128] -> dot f32[16,128] -> exponential -> reshape f32[2,8,128]."""
    c = Computation("main")
    x = c.add("parameter", Shape("f32", (16, 256)), parameter_number=0)
    w = c.add("parameter", Shape("f32", (256, 128)), parameter_number=1)
    d = c.add("dot", Shape("f32", (16, 128)), (x, w), dot_dims=DotDims((1,), (0,)))
    e = c.add("exponential", Shape("f32", (16, 128)), (d,))
    c.add("reshape", Shape("f32", (2, 8, 128)), (e,))
    return Module("hand", [c])


def _choice(problem: LayoutProblem, node: int, layouts: list[tuple[int, ...]]) -> int:
    """The explicit choice (> 0) of ``node`` with these full layouts."""
    for c in range(1, int(problem.num_choices[node])):
        if problem.layouts(node, c) == layouts:
            return c
    raise AssertionError(f"no choice with layouts {layouts}")


@pytest.fixture
def whole_space(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every layout combo of a node is one of its choices: the sweep keeps everything (the cost tests below name
    layouts a sweep would drop)."""
    monkeypatch.setattr(lp_mod, "SWEEP_SLACK", np.inf)


def _hand_terms() -> dict[str, float]:
    """The hand module's terms, ns. Default: dot out (1,0), stored as 16 x 128 (no padding, occupancy 1); its
    operands are read as their producers store them (row-major parameters). Bytes: out 16x128x4 = 8192, lhs
    16x256x4 = 16384, rhs 256x128x4 = 131072. The exponential reads and writes 8192 each; the reshape
    [16,128]->[2,8,128] row-major is a bitcast. B: dot output column-major (0,1): 16 minor, padded to 128, so stored
    128 x 128 = 65536 bytes (occupancy 8: the dot's time x 8 ** PAD_EXPONENT); the exponential follows in that
    layout; the reshape wants row-major input: a copy 65536 read + 8192 written."""
    flops = 2 * 16 * 128 * 256
    return dict(
        dot_default=max(flops / PEAK_FLOPS_PER_NS, (8192 + 16384 + 131072) / HBM_BYTES_PER_NS) + LAUNCH_NS,
        exp_default=max(2048 / PEAK_FLOPS_PER_NS, 2 * 8192 / HBM_BYTES_PER_NS) + LAUNCH_NS,
        dot_b=max(flops / PEAK_FLOPS_PER_NS, (65536 + 16384 + 131072) / HBM_BYTES_PER_NS) * 8 ** 1.5 + LAUNCH_NS,
        exp_b=max(2048 / PEAK_FLOPS_PER_NS, 2 * 65536 / HBM_BYTES_PER_NS) + LAUNCH_NS,
        copy=(65536 + 8192) / HBM_BYTES_PER_NS + LAUNCH_NS)


def test_hand_computed_runtimes(whole_space: None) -> None:
    assert lp_mod.PAD_EXPONENT == 1.5  # the terms below are written for it
    p = LayoutProblem.from_module(_hand_module())
    assert p.node_config_ids.tolist() == [2, 4]
    assert p.base_ns == 0.0  # only parameters outside the layout decisions
    t = _hand_terms()
    c_dot = _choice(p, 0, [(0, 1), (1, 0), (1, 0)])
    # The operands' layouts cost nothing: the same output with another lhs layout runs as long.
    c_lhs = _choice(p, 0, [(1, 0), (0, 1), (1, 0)])
    got = p.runtime_ns(np.asarray([[0, 0], [c_dot, 0], [c_lhs, 0]]))
    np.testing.assert_allclose(got, [t["dot_default"] + t["exp_default"], t["dot_b"] + t["exp_b"] + t["copy"],
                                     t["dot_default"] + t["exp_default"]], rtol=1e-12)
    # A dot's search swaps the two dims of each tensor (8 combos and the default); a reshape's keeps it a bitcast:
    # here only row-major in and out.
    assert p.num_choices.tolist() == [9, 2]
    assert p.layouts(1, 1) == [(2, 1, 0), (1, 0)]


def test_runtime_parts_by_hand_and_choices_read_back(whole_space: None) -> None:
    """The hand module's configs split into the model's terms: the dot's roofline is its own; the exponential
    working in the dot's output layout is the dot's unary term; the copy between the dot's output and the reshape's
    input is a link."""
    p = LayoutProblem.from_module(_hand_module())
    t = _hand_terms()
    choices = np.asarray([[0, 0], [_choice(p, 0, [(0, 1), (1, 0), (1, 0)]), 0]])
    parts = p.runtime_parts(choices)
    np.testing.assert_allclose(parts["base"], [0, 0])
    np.testing.assert_allclose(parts["own"], [t["dot_default"], t["dot_b"]], rtol=1e-12)
    np.testing.assert_allclose(parts["unary"], [t["exp_default"], t["exp_b"]], rtol=1e-12)
    np.testing.assert_allclose(parts["links"], [0, t["copy"]], rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(sum(parts.values()), p.runtime_ns(choices), rtol=1e-12)
    # A graph file's config rows give back the choices behind them.
    many = p.sample_configs("random", 50, np.random.default_rng(0))
    np.testing.assert_array_equal(p.choices_of(p.config_features(many)), many)
    bad = p.config_features(choices)
    bad[1, 0, 0] = 5  # a dim the dot's output does not have
    with pytest.raises(ValueError, match="config 1: node 0"):
        p.choices_of(bad)
    with pytest.raises(ValueError, match=r"\[n, 2, 18\]"):
        p.choices_of(bad[:, :1])


def test_copy_exactly_when_layouts_disagree(whole_space: None) -> None:
    module = _hand_module()
    p = LayoutProblem.from_module(module)
    out_shape = Shape("f32", (16, 128))
    seen = set()
    for c in range(int(p.num_choices[0])):
        out, lhs, rhs = p.layouts(0, c)
        if rhs != (1, 0):
            continue
        # Copies = total minus the ops' own times; the reshape keeps its default (row-major in and out).
        copies = p.runtime_ns(np.asarray([[c, 0]]))[0] - _reference_no_copies(p, module, [c, 0])
        expected = 0.0
        if out != (1, 0):  # dot output (through the exponential) -> reshape input
            expected += (lp_mod._phys_bytes(out_shape, out) + 8192) / HBM_BYTES_PER_NS + LAUNCH_NS
        # A dot reads its operands as they are stored: its lhs layout never costs a copy.
        assert copies == pytest.approx(expected, rel=1e-9, abs=1e-9)
        seen.add((out == (1, 0), lhs == (1, 0)))
    assert len(seen) == 4


def test_reshape_bitcast_rules() -> None:
    s_in, s_out = Shape("f32", (16, 128)), Shape("f32", (2, 8, 128))
    assert lp_mod._is_bitcast(s_in, (1, 0), s_out, (2, 1, 0))
    assert not lp_mod._is_bitcast(s_in, (0, 1), s_out, (2, 1, 0))
    assert not lp_mod._is_bitcast(s_in, (1, 0), s_out, (1, 2, 0))
    # Only unit dims inserted: any layout lines up if the non-unit dims keep their physical order.
    assert lp_mod._is_bitcast(Shape("f32", (4, 6)), (0, 1), Shape("f32", (4, 1, 6)), (0, 1, 2))
    assert not lp_mod._is_bitcast(Shape("f32", (4, 6)), (0, 1), Shape("f32", (4, 1, 6)), (2, 1, 0))
    # A row-major reshape that changes the lane dim moves data between (8, 128) tiles: no bitcast.
    assert not lp_mod._is_bitcast(Shape("f32", (16, 256)), (1, 0), Shape("f32", (32, 128)), (1, 0))


def test_features() -> None:
    p = LayoutProblem.from_module(random_module(np.random.default_rng(3), 12))
    rng = np.random.default_rng(0)
    choices = p.sample_configs("random", 50, rng)
    choices[0] = 0
    f = p.config_features(choices)
    assert f.shape == (50, p.num_choices.size, 18) and f.dtype == np.float32
    assert np.all(f[0] == -1)
    ids = p.node_config_ids
    mod_ins = random_module(np.random.default_rng(3), 12).instructions()
    for i in range(1, 50):
        for n in range(p.num_choices.size):
            c = int(choices[i, n])
            row = f[i, n]
            if c == 0:
                assert np.all(row == -1)
                continue
            lays = p.layouts(n, c)
            opcode = mod_ins[int(ids[n])].opcode
            for t, lay in enumerate(lays):
                written = [int(v) for v in row[6 * t: 6 * t + 6] if v >= 0]
                if opcode == "reshape":
                    assert written == list(lay)  # full rank
                else:
                    assert written == list(lay[: min(2, len(lay))])  # the two most-minor dims
                assert np.all(row[6 * t + len(written): 6 * t + 6] == -1)
            if opcode == "reshape":
                assert np.all(row[12:] == -1)


def _op_layouts(p: LayoutProblem, module: Module, config: list[int]) -> tuple[list, dict]:
    ins = module.instructions()
    index = {int(g): k for k, g in enumerate(p.node_config_ids)}
    out: list[tuple[int, ...]] = []
    chosen: dict[int, list[tuple[int, ...]]] = {}
    for g, i in enumerate(ins):
        if g in index:
            chosen[g] = p.layouts(index[g], config[index[g]])
            out.append(chosen[g][0])
        elif i.opcode in ELEMENTWISE and i.operands and ins[i.operands[0]].shape.dims == i.shape.dims:
            out.append(out[i.operands[0]])
        else:
            out.append(default_layout(i.shape.rank))
    return out, chosen


def _reference_no_copies(p: LayoutProblem, module: Module, config: list[int]) -> float:
    """Ops' own times only (single computation modules)."""
    ins = module.instructions()
    lay, chosen = _op_layouts(p, module, config)
    total = 0.0
    for g, i in enumerate(ins):
        ops = [ins[o].shape for o in i.operands]
        if g in chosen:
            if i.opcode == "reshape":
                if not lp_mod._is_bitcast(ops[0], chosen[g][1], i.shape, chosen[g][0]):
                    total += (lp_mod._phys_bytes(ops[0], chosen[g][1]) + lp_mod._phys_bytes(i.shape, chosen[g][0])) \
                        / HBM_BYTES_PER_NS + LAUNCH_NS
            else:
                shapes = [i.shape, *ops[:2]]
                logical = i.shape.num_elements * lp_mod.ITEMSIZE[i.shape.element_type]
                ineff = (lp_mod._phys_bytes(i.shape, chosen[g][0]) / logical) ** lp_mod.PAD_EXPONENT
                nbytes = lp_mod._phys_bytes(i.shape, chosen[g][0]) + sum(
                    lp_mod._phys_bytes(s, default_layout(s.rank)) for s in shapes[1:])
                total += max(lp_mod._flops(i, shapes) / PEAK_FLOPS_PER_NS, nbytes / HBM_BYTES_PER_NS) * ineff
                total += LAUNCH_NS
        elif i.opcode in ELEMENTWISE and i.operands and ins[i.operands[0]].shape.dims == i.shape.dims:
            total += lp_mod._elementwise_ns(i, ops, lay[g])
        else:
            total += lp_mod._default_op_ns(i, ops)
    return total


def _reference(p: LayoutProblem, module: Module, config: list[int]) -> float:
    """A slow, direct walk of the model for one config: each op's time plus each copy where layouts disagree."""
    ins = module.instructions()
    lay, chosen = _op_layouts(p, module, config)
    total = _reference_no_copies(p, module, config)

    def copy(shape: Shape, have: tuple[int, ...], want: tuple[int, ...]) -> float:
        if have == want:
            return 0.0
        return (lp_mod._phys_bytes(shape, have) + lp_mod._phys_bytes(shape, want)) / HBM_BYTES_PER_NS + LAUNCH_NS

    for g, i in enumerate(ins):
        for k, o in enumerate(dict.fromkeys(i.operands)):
            shape = ins[o].shape
            if shape.is_tuple or i.opcode in NO_DEMAND or (g in chosen and i.opcode != "reshape"):
                continue  # a convolution or dot reads its operands in any layout
            if g in chosen:
                want = chosen[g][k + 1] if k + 1 < len(chosen[g]) else default_layout(shape.rank)
            elif i.opcode in ELEMENTWISE and ins[i.operands[0]].shape.dims == i.shape.dims:
                if k == 0 or shape.dims != i.shape.dims:
                    continue
                want = lay[g]
            else:
                want = default_layout(shape.rank)
            total += copy(shape, lay[o], want)
    root = len(ins) - 1
    if not ins[root].shape.is_tuple:
        total += copy(ins[root].shape, lay[root], default_layout(ins[root].shape.rank))
    return total


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_vectorised_equals_reference(seed: int) -> None:
    module = random_module(np.random.default_rng(seed), 10, filler=2)
    p = LayoutProblem.from_module(module)
    rng = np.random.default_rng(seed)
    choices = np.concatenate([p.sample_configs("random", 15, rng), p.sample_configs("default", 5, rng),
                              (rng.random((10, p.num_choices.size)) * p.num_choices).astype(np.int64)])
    got = p.runtime_ns(choices, chunk=7)
    want = [_reference(p, module, row.tolist()) for row in choices]
    np.testing.assert_allclose(got, want, rtol=1e-10)
    assert len(set(np.round(got, 3))) > 5  # layouts matter


def test_default_search_differs_in_few_nodes() -> None:
    p = LayoutProblem.from_module(random_module(np.random.default_rng(5), 30))
    c = p.sample_configs("default", 300, np.random.default_rng(1))
    assert c.dtype == np.int32 and c.shape == (300, p.num_choices.size)
    # A change moves a whole tied group: count groups (their first node).
    changed = (c[:, p._leaders] != 0).sum(axis=1)
    assert changed.min() >= 1 and changed.max() <= 5
    assert np.all(c < p.num_choices) and np.all(c >= 0)
    r = p.sample_configs("random", 300, np.random.default_rng(1))
    assert (r != 0).sum(axis=1).max() > 5


def _two_sided(p: LayoutProblem) -> list[int]:
    """The group leaders with explicit choices that keep the compiler default's output layout and ones that
    change it."""
    out = []
    for k in p._leaders:
        sub = p._nodes[k].sub[0]
        if 0 < (sub[1:] == sub[0]).sum() < sub.size - 1:
            out.append(int(k))
    return out


def _output_changes(p: LayoutProblem, rows: np.ndarray, leaders: list[int]) -> np.ndarray:
    """Per row, how many of these groups take an output layout other than the compiler default's."""
    out = np.zeros(rows.shape[0], dtype=np.int64)
    for k in leaders:
        sub = p._nodes[k].sub[0]
        out += sub[rows[:, k]] != sub[0]
    return out


def test_a_search_leaves_output_layouts_as_often_as_it_is_set_to() -> None:
    """A random search leaves a group's output layout with probability ``flip`` (alexnet's 1 in 12 by default); a
    narrow default search never does, a wandering one does."""
    p = LayoutProblem.from_module(random_module(np.random.default_rng(5), 60))
    both = _two_sided(p)
    assert len(both) >= 5
    for flip in (lp_mod.OUTPUT_FLIP, 0.2):
        rows = p.sample_configs("random", 4000, np.random.default_rng(3), flip=flip)
        assert _output_changes(p, rows, both).mean() / len(both) == pytest.approx(flip, rel=0.1)
    narrow = p.sample_configs("default", 2000, np.random.default_rng(4))
    assert _output_changes(p, narrow, both).max() == 0
    wandering = p.sample_configs("default", 2000, np.random.default_rng(4), explore=0.05)
    assert 0.05 < (_output_changes(p, wandering, both) > 0).mean() < 0.8


def test_choice_lists() -> None:
    p = LayoutProblem.from_module(random_module(np.random.default_rng(6), 30))
    assert np.all(p.num_choices >= 2) and np.all(p.num_choices <= lp_mod.MAX_CHOICES + 1)
    for n in range(p.num_choices.size):
        # The default's concrete layout is among the explicit choices.
        assert any(p.layouts(n, c) == p.layouts(n, 0) for c in range(1, int(p.num_choices[n])))
    with pytest.raises(ValueError):
        p.runtime_ns(np.full((1, p.num_choices.size), 10_000))
