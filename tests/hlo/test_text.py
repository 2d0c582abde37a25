"""HLO text parsed and featurized: values checked by hand on a module written by hand."""

from __future__ import annotations

import numpy as np
import pytest

from competition.hlo.features import featurize
from competition.hlo.featurize import configurable_nodes
from competition.hlo.ir import HloFormatError
from competition.hlo.proto import read_module_proto, write_module_proto
from competition.hlo.text import parse_hlo_text
from competition.schema import EMPTY_PRODUCT_COLUMNS


def test_structure(hand_text):
    m = parse_hlo_text(hand_text)
    assert [c.name for c in m.computations] == ["fused", "add_cond", "main"]
    assert [len(c) for c in m.computations] == [3, 3, 11]
    g = featurize(m)
    assert g.edge_index.tolist() == [
        [2, 0], [2, 1], [5, 3], [5, 4], [9, 2], [9, 6], [9, 7], [10, 9], [11, 8], [11, 10], [13, 5], [13, 11],
        [13, 12], [14, 11], [15, 12], [15, 14], [16, 11], [16, 13]]
    assert g.node_splits.tolist() == [[0, 6, 17]]  # a boundary after add_cond ("cond" in its name)
    assert g.node_opcode.tolist() == [63, 63, 26, 63, 63, 2, 63, 63, 63, 41, 75, 34, 24, 70, 92, 62, 100]
    assert np.flatnonzero(g.node_feat[:, 0]).tolist() == [2, 5, 16]
    assert [n.node_id for n in configurable_nodes(m)] == [2, 10, 11]


def _row(text: str, node: int) -> np.ndarray:
    return featurize(parse_hlo_text(text)).node_feat[node]


def test_convolution_columns(hand_text):
    r = _row(hand_text, 2)
    assert np.flatnonzero(r[2:21]).tolist() == [11]  # f32
    assert r[21:29].tolist() == [2, 4, 6, 6, 0, 0, 18, 288]
    assert r[37:45].tolist() == [3, 3, 0, 0, 0, 0, 6, 9]       # window size
    assert r[45:53].tolist() == [1, 1, 0, 0, 0, 0, 2, 1]       # stride (default 1)
    assert r[53:61].tolist() == [0, 1, 0, 0, 0, 0, 1, 0]       # padding low
    assert r[61:69].tolist() == [0, -1, 0, 0, 0, 0, -1, 0]     # padding high
    assert r[69:77].tolist() == [1, 2, 0, 0, 0, 0, 3, 2]       # window dilation (rhs_dilate)
    assert r[77:85].tolist() == [1, 1, 0, 0, 0, 0, 2, 1]       # base dilation
    assert r[85:93].tolist() == [0, 0, 0, 0, 0, 0, 0, 2]       # reversal: 0 true, 2 false
    # bf01_oi01->bf01: input b=0 f=1 spatial 2,3; kernel i=1 o=0 spatial 2,3; output b=0 f=1
    assert r[93:107].tolist() == [0, 1, 2, 3, 0, 0, 1, 0, 2, 3, 0, 0, 0, 1]
    assert r[107:109].tolist() == [1, 1]
    assert r[134:140].tolist() == [3, 2, 1, 0, 0, 0]


def test_dot_reshape_reduce_fusion_columns(hand_text):
    g = featurize(parse_hlo_text(hand_text)).node_feat
    dot, reshape, reduce, fusion = g[11], g[10], g[13], g[9]
    assert dot[21:29].tolist() == [2, 5, 0, 0, 0, 0, 7, 10] and dot[134:140].tolist() == [1, 0, 0, 0, 0, 0]
    # Dot dimension numbers have no column; the empty window, slice and pad lists give products of 1, nothing else.
    untouched = np.zeros(104)
    untouched[np.asarray(EMPTY_PRODUCT_COLUMNS) - 30] = 1.0
    assert dot[30:134].tolist() == untouched.tolist()
    assert reshape[21:29].tolist() == [2, 144, 0, 0, 0, 0, 146, 288] and reshape[30:134].tolist() == untouched.tolist()
    assert reduce[21:29].tolist() == [2, 0, 0, 0, 0, 0, 2, 2] and reduce[31:37].tolist() == [1, 0, 0, 0, 0, 0]
    assert reduce[134:140].tolist() == [0] * 6
    assert fusion[21:29].tolist() == [2, 4, 6, 6, 0, 0, 18, 288] and fusion[134:140].tolist() == [3, 2, 1, 0, 0, 0]
    assert g[8][30] == 2 and g[8][134:140].tolist() == [0, 1, 0, 0, 0, 0]  # parameter(2), layout {0,1}


def test_slice_pad_tuple_scalar_columns(hand_text):
    g = featurize(parse_hlo_text(hand_text)).node_feat
    assert g[14][109:121].tolist() == [0, 1, 1, 0, 1, 2, 3, 2, 2, 5, 7, 10]
    assert g[15][125:133].tolist() == [1, 2, 3, 2, 1, 2, 3, 2]
    t = g[16]
    assert t[18] == 1 and t[29] == 2 and t[21:29].tolist() == [0] * 7 + [1] and not t[134:140].any()
    assert g[12][27:29].tolist() == [0, 1]  # a scalar: sum 0, product 1


def test_proto_round_trip_keeps_every_feature(hand_text):
    m = parse_hlo_text(hand_text)
    back = read_module_proto(write_module_proto(m), "mem")
    assert back == m
    a, b = featurize(m), featurize(back)
    assert np.array_equal(a.node_feat, b.node_feat) and np.array_equal(a.edge_index, b.edge_index)


@pytest.mark.parametrize("edit, message", [
    (("add(f32[] %a", "frobnicate(f32[] %a"), "line 12: s: unknown opcode 'frobnicate'"),
    (("%w = f32[144,5]{0,1}", "%w = f32[144,x]{0,1}"), "line 18: cannot parse dimension 'x'"),
    (("dot(%r, %w)", "dot(%r, %nope)"), "line 21: d: operand '%nope' is not an instruction defined before it"),
    (("to_apply=%add_cond", "to_apply=%gone"), "line 23: red calls 'gone', a computation the module does not"),
    (("HloModule hand", "Module hand"), "not HLO text: expected a first line 'HloModule <name>, ...'"),
])
def test_errors_name_the_line(hand_text, edit, message):
    with pytest.raises(HloFormatError) as err:
        parse_hlo_text(hand_text.replace(*edit), "hand.hlo")
    assert str(err.value).startswith("hand.hlo: ") and message in str(err.value)
