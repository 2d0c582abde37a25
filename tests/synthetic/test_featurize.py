"""Featurization of hand-built modules: every populated column checked against the format spec's map."""

from __future__ import annotations

import numpy as np
import pytest

from competition import schema
from competition.hlo.features import featurize
from competition.hlo.ir import Computation, ConvDims, Module, Shape, Window
from competition.opcodes import opcode_id

F32 = 2 + schema.ELEMENT_TYPES.index("f32")


def _expected_row() -> np.ndarray:
    """A row with nothing set: 0, but for the products of the window, slice, dynamic-slice and pad lists, which are
    empty on an op they do not apply to (product 1)."""
    row = np.zeros(schema.NODE_FEAT_DIM, dtype=np.float32)
    row[list(schema.EMPTY_PRODUCT_COLUMNS)] = 1.0
    return row


@pytest.fixture()
def exp_reduce_module() -> Module:
    """parameter f32[2,3] -> exponential -> reduce(add) over dim 1, the add computation first."""
    add = Computation("add.1")
    add.add("parameter", Shape("f32"), parameter_number=0)
    add.add("parameter", Shape("f32"), parameter_number=1)
    add.add("add", Shape("f32"), (0, 1))
    entry = Computation("main.2")
    p = entry.add("parameter", Shape("f32", (2, 3)), parameter_number=0)
    x = entry.add("exponential", Shape("f32", (2, 3)), (p,))
    c = entry.add("constant", Shape("f32"))
    entry.add("reduce", Shape("f32", (2,)), (x, c), dimensions=(1,), called=("add.1",))
    return Module("m", [add, entry])


def test_exp_reduce_every_column(exp_reduce_module: Module) -> None:
    g = featurize(exp_reduce_module)
    assert g.node_feat.dtype == np.float32 and g.node_feat.shape == (7, 140)
    assert g.node_opcode.dtype == np.uint8
    assert g.node_opcode.tolist() == [opcode_id(n) for n in
                                      ("parameter", "parameter", "add", "parameter", "exponential", "constant",
                                       "reduce")]
    rows = [_expected_row() for _ in range(7)]
    for r in rows:
        r[F32] = 1.0
        r[schema.COL_SHAPE_PRODUCT] = 1.0  # scalar (empty dims) product is 1
    rows[1][schema.COL_PARAMETER_NUMBER] = 1.0
    rows[2][schema.COL_IS_ROOT] = 1.0
    for k in (3, 4):  # f32[2,3], default layout {1,0}
        rows[k][21:23] = [2, 3]
        rows[k][schema.COL_SHAPE_SUM] = 5
        rows[k][schema.COL_SHAPE_PRODUCT] = 6
        rows[k][134:136] = [1, 0]
    rows[6][schema.COL_IS_ROOT] = 1.0
    rows[6][21] = 2
    rows[6][schema.COL_SHAPE_SUM] = 2
    rows[6][schema.COL_SHAPE_PRODUCT] = 2
    rows[6][31] = 1  # reduce dimensions {1}
    np.testing.assert_array_equal(g.node_feat, np.stack(rows))
    assert g.edge_index.dtype == np.int64
    assert g.edge_index.tolist() == [[2, 0], [2, 1], [4, 3], [6, 2], [6, 4], [6, 5]]
    assert g.node_splits.dtype == np.int64
    assert g.node_splits.tolist() == [[0, 7]]


def test_while_splits_and_tuple_columns() -> None:
    elems = (Shape("s32"), Shape("f32", (4,)))
    tup = Shape("tuple", tuple_shapes=elems)
    cond = Computation("while_cond.3")
    t = cond.add("parameter", tup, parameter_number=0)
    i = cond.add("get-tuple-element", Shape("s32"), (t,))
    n = cond.add("constant", Shape("s32"))
    cond.add("compare", Shape("pred"), (i, n))
    body = Computation("while_body.4")
    t = body.add("parameter", tup, parameter_number=0)
    i = body.add("get-tuple-element", Shape("s32"), (t,))
    v = body.add("get-tuple-element", Shape("f32", (4,)), (t,))
    body.add("tuple", tup, (i, v))
    entry = Computation("entry.5")
    a = entry.add("parameter", Shape("s32"), parameter_number=0)
    b = entry.add("parameter", Shape("f32", (4,)), parameter_number=1)
    tt = entry.add("tuple", tup, (a, b))
    w = entry.add("while", tup, (tt,), called=("while_cond.3", "while_body.4"))
    entry.add("get-tuple-element", Shape("f32", (4,)), (w,))
    g = featurize(Module("w", [cond, body, entry]))
    assert g.node_splits.tolist() == [[0, 4, 8, 13]]
    # The while node (global 11) points at both called roots (3 and 7) and its operand (10).
    assert g.edge_index[g.edge_index[:, 0] == 11].tolist() == [[11, 3], [11, 7], [11, 10]]
    assert np.all(np.diff(g.edge_index[:, 0] * 100 + g.edge_index[:, 1]) > 0)
    tuple_row = g.node_feat[10]
    assert tuple_row[2 + schema.ELEMENT_TYPES.index("tuple")] == 1.0
    assert tuple_row[schema.COL_TUPLE_COUNT] == 2
    assert tuple_row[schema.COL_SHAPE_SUM] == 0 and tuple_row[schema.COL_SHAPE_PRODUCT] == 1
    assert np.all(tuple_row[134:140] == 0)
    assert g.node_feat[9, schema.COL_PARAMETER_NUMBER] == 1
    assert g.node_feat[[3, 7, 12], schema.COL_IS_ROOT].tolist() == [1, 1, 1]
    assert g.node_feat[:, schema.COL_IS_ROOT].sum() == 3
    assert g.node_feat[3, 2 + schema.ELEMENT_TYPES.index("pred")] == 1
    assert g.node_feat[1, 2 + schema.ELEMENT_TYPES.index("s32")] == 1


def test_convolution_columns() -> None:
    comp = Computation("cluster_7")
    x = comp.add("parameter", Shape("bf16", (8, 32, 32, 16)), parameter_number=0)
    k = comp.add("parameter", Shape("bf16", (3, 3, 16, 64)), parameter_number=1)
    window = Window((3, 3), (2, 2), (0, 0), (1, 1), (1, 1), (1, 1), (True, False))
    cd = ConvDims(0, 3, (1, 2), 2, 3, (0, 1), 0, 3, (1, 2))
    comp.add("convolution", Shape("bf16", (8, 16, 16, 64), (0, 3, 2, 1)), (x, k), window=window, conv_dims=cd)
    g = featurize(Module("c", [comp]))
    row = g.node_feat[2]
    assert row[2 + schema.ELEMENT_TYPES.index("bf16")] == 1
    assert row[21:29].tolist() == [8, 16, 16, 64, 0, 0, 104, 8 * 16 * 16 * 64]
    assert row[37:45].tolist() == [3, 3, 0, 0, 0, 0, 6, 9]
    assert row[45:53].tolist() == [2, 2, 0, 0, 0, 0, 4, 4]
    assert row[53:61].tolist() == [0, 0, 0, 0, 0, 0, 0, 0]
    assert row[61:69].tolist() == [1, 1, 0, 0, 0, 0, 2, 1]
    assert row[69:77].tolist() == [1, 1, 0, 0, 0, 0, 2, 1]
    assert row[77:85].tolist() == [1, 1, 0, 0, 0, 0, 2, 1]
    assert row[85:93].tolist() == [1, 0, 0, 0, 0, 0, 1, 1]
    assert row[93:107].tolist() == [0, 3, 1, 2, 0, 0, 2, 3, 0, 1, 0, 0, 0, 3]
    assert row[107:109].tolist() == [1, 1]
    assert row[134:140].tolist() == [0, 3, 2, 1, 0, 0]
    assert row[0] == 1 and row[1] == 0
    # Group counts do not apply to the parameters, and their window lists are empty (product 1).
    assert np.all(g.node_feat[:2, 107:109] == 0)
    np.testing.assert_array_equal(g.node_feat[:2, 37:134], np.broadcast_to(_expected_row()[37:134], (2, 97)))
    assert g.node_splits.tolist() == [[0, 3]]
    assert g.edge_index.tolist() == [[2, 0], [2, 1]]


def test_slice_pad_dynamic_slice_sort_and_truncation() -> None:
    comp = Computation("main")
    p = comp.add("parameter", Shape("f32", (10, 20, 30)), parameter_number=0)
    comp.add("slice", Shape("f32", (4, 5, 27)), (p,), slice_starts=(1, 2, 3), slice_limits=(5, 12, 30),
             slice_strides=(1, 2, 1))
    v = comp.add("constant", Shape("f32"))
    comp.add("pad", Shape("f32", (11, 23, 33)), (p, v), pad_low=(1, 0, 2), pad_high=(0, 3, 1),
             pad_interior=(0, 0, 0))
    i = comp.add("constant", Shape("s32"))
    comp.add("dynamic-slice", Shape("f32", (2, 4, 6)), (p, i, i, i), dynamic_slice_sizes=(2, 4, 6))
    comp.add("sort", Shape("f32", (10, 20, 30)), (p,), dimensions=(2,), is_stable=True)
    comp.add("parameter", Shape("f32", (1, 2, 3, 4, 5, 6, 7)), parameter_number=1)
    g = featurize(Module("s", [comp]))
    f = g.node_feat
    assert f[1, 109:121].tolist() == [1, 2, 6, 6, 1, 2, 4, 2, 5, 12, 47, 1800]
    assert f[3, 125:133].tolist() == [1, 0, 3, 0, 0, 3, 4, 0]
    assert f[5, 121:125].tolist() == [2, 4, 12, 48]
    assert f[6, 133] == 1 and f[6, 31] == 2
    assert f[7, 21:29].tolist() == [1, 2, 3, 4, 5, 6, 28, 5040]
    assert f[7, 134:140].tolist() == [6, 5, 4, 3, 2, 1]
    assert f[7, 30] == 1
    # Nothing leaks into attribute columns of ops they do not apply to: their lists are empty (sum 0, product 1).
    np.testing.assert_array_equal(f[[0, 2, 4, 7], 31:134], np.broadcast_to(_expected_row()[31:134], (4, 103)))
    # The slice has no window and no padding, the pad no slice: their lists are empty too.
    assert f[1, [44, 52, 60, 68, 76, 84, 124, 128, 132]].tolist() == [1] * 9
    assert f[3, [44, 84, 112, 116, 120, 124]].tolist() == [1] * 6
    assert np.all(f[:, 1] == 0)
    # The dynamic-slice uses one index operand three times: one edge.
    assert g.edge_index[g.edge_index[:, 0] == 5].tolist() == [[5, 0], [5, 4]]


def test_group_counts_are_written_for_convolutions_and_custom_calls_only() -> None:
    """As XLA serializes them (the real alexnet graph: 1 on its 14 convolutions and 3 custom-calls, 0 elsewhere)."""
    comp = Computation("main")
    p = comp.add("parameter", Shape("f32", (4,)), parameter_number=0)
    comp.add("custom-call", Shape("f32", (4,)), (p,))
    comp.add("negate", Shape("f32", (4,)), (p,))
    g = featurize(Module("cc", [comp]))
    assert g.node_feat[:, [schema.COL_FEATURE_GROUP_COUNT, schema.COL_BATCH_GROUP_COUNT]].tolist() == [
        [0, 0], [1, 1], [0, 0]]


def test_empty_window_lists_product_one() -> None:
    comp = Computation("main")
    p = comp.add("parameter", Shape("f32", (4,)), parameter_number=0)
    c = comp.add("constant", Shape("f32"))
    comp.add("reduce-window", Shape("f32", (4,)), (p, c), window=Window.simple((1,)), called=())
    g = featurize(Module("r", [comp]))
    assert g.node_feat[2, 37:45].tolist() == [1, 0, 0, 0, 0, 0, 1, 1]
    assert g.node_feat[2, 85:93].tolist() == [0, 0, 0, 0, 0, 0, 0, 1]
    assert g.node_feat[2, 107] == 0
