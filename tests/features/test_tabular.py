"""Tabular features on hand-built graphs with exact expected values."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import numpy as np
import pytest
import torch

import features.tabular_layout
from competition.collections import Collection
from competition.npzio import write_npz
from competition.opcodes import CONVOLUTION, DOT, PARAMETER, RESHAPE, opcode_id
from competition.reader import LayoutGraph, TileGraph, load_graph
from competition.schema import COL_SHAPE_PRODUCT, ELEMENT_TYPES, LAYOUT_SLOT_COLUMNS, element_itemsize
from competition.synthetic.physics import physical_elements
from features.tabular_layout import (
    CONFIG_NODE_TYPES,
    MINOR_VALUES,
    PAD_COST_EXPONENT,
    PADDING_NODE_TYPES,
    layout_context,
    layout_feature_names,
    layout_features,
    layout_links,
    node_work,
    padding_table,
)
from features.tabular_tile import (
    TILE_SHARE_NAMES,
    tile_feature_names,
    tile_features,
    tile_shares,
    tiled_array,
)

LAYOUT = Collection.LAYOUT_XLA_RANDOM
TILE = Collection.TILE_XLA


def _cfg(out: list[int] | None = None, inp: list[int] | None = None) -> list[float]:
    row = [-1.0] * 18
    for start, dims in ((0, out), (6, inp)):
        for i, d in enumerate(dims or []):
            row[start + i] = d
    return row


@pytest.fixture
def layout_graph(tmp_path: Path) -> LayoutGraph:
    """7 nodes: conv A (1) -> add (2, same shape) -> dot B (3); A -> transpose (4, other shape) -> reshape C (5).

    Configurable nodes [A, B, C] at positions 0, 1, 2; sizes (shape products) 7, 15, 3, so log2(1 + p) = 3, 4, 2.
    Only (A, B) is a link: the path to C leaves A's shape at the transpose.
    """
    feat = np.zeros((7, 140), dtype=np.float32)
    feat[:, 21:23] = [4, 8]
    feat[4, 21:23] = [8, 4]
    feat[5, 21:23] = [32, 0]
    feat[[1, 3, 5], 28] = [7, 15, 3]
    configs = [
        [_cfg(), _cfg(), _cfg()],                                  # default everywhere
        [_cfg([1, 0]), _cfg([0, 1], [1, 0]), _cfg()],              # A writes minor 1, B reads minor 1
        [_cfg([0, 1]), _cfg([0, 1], [1, 0]), _cfg([0], [0])],      # A writes 0, B reads 1: a copy
        [_cfg(), _cfg([0, 1], [0, 1]), _cfg()],                    # A default (-1), B reads 0
    ]
    arrays = {
        "edge_index": np.array([[1, 0], [2, 1], [3, 2], [4, 1], [5, 4], [6, 3], [6, 5]], dtype=np.int64),
        "node_feat": feat,
        "node_opcode": np.array([63, 26, 2, 34, 98, 75, 100], dtype=np.uint8),
        "node_config_feat": np.array(configs, dtype=np.float32),
        "node_config_ids": np.array([1, 3, 5], dtype=np.int64),
        "node_splits": np.array([[0, 7]], dtype=np.int64),
        "config_runtime": np.array([40, 10, 30, 20], dtype=np.int64),
    }
    path = tmp_path / "npz_all" / "npz" / Path(LAYOUT.relpath) / "train" / "g.npz"
    graph = load_graph(write_npz(path, arrays), LAYOUT)
    assert isinstance(graph, LayoutGraph)
    return graph


def _columns(x: np.ndarray, names: list[str]) -> dict[str, list[float]]:
    return {n: x[:, i].tolist() for i, n in enumerate(names)}


def test_layout_links_follow_same_shape_chains_only(layout_graph: LayoutGraph):
    producer, consumer = layout_links(layout_graph)
    assert producer.tolist() == [0] and consumer.tolist() == [1]


def test_layout_features_exact(layout_graph: LayoutGraph):
    names = layout_feature_names()
    x = layout_features(layout_graph)
    assert x.shape == (4, len(names)) and x.dtype == np.float32
    assert len(set(names)) == len(names)
    col = _columns(x, names)
    assert col["conv_default_count"] == [1, 0, 0, 1]
    assert col["dot_default_count"] == [1, 0, 0, 0]
    assert col["reshape_default_count"] == [1, 1, 0, 1]
    assert col["reshape_default_size"] == [2, 2, 0, 2]
    assert col["nondefault_count"] == [0, 2, 3, 1]
    assert col["nondefault_size"] == [0, 7, 9, 4]
    assert col["link_disagree_count"] == [0, 0, 1, 1]
    assert col["link_disagree_size"] == [0, 0, 3, 3]
    assert col["link_disagree_both_set_count"] == [0, 0, 1, 0]
    assert col["conv_output_minor=-1_count"] == [1, 0, 0, 1]
    assert col["conv_output_minor=0_count"] == [0, 0, 1, 0]
    assert col["conv_output_minor=1_size"] == [0, 3, 0, 0]
    assert col["dot_input_minor=1_count"] == [0, 1, 1, 0]
    assert col["dot_input_minor=0_size"] == [0, 0, 0, 4]
    assert col["dot_kernel_minor=-1_count"] == [1, 1, 1, 1]
    assert col["reshape_input_minor=0_count"] == [0, 0, 1, 0]
    assert col["graph_nodes"] == [7] * 4 and col["graph_edges"] == [7] * 4
    assert col["graph_links"] == [1] * 4 and col["graph_configurable_nodes"] == [3] * 4
    assert col["graph_configurable_conv"] == [1] * 4 and col["graph_count_transpose"] == [1] * 4


def test_layout_rows_and_blocks_agree_with_the_whole(layout_graph: LayoutGraph):
    whole = layout_features(layout_graph)
    ctx = layout_context(layout_graph)
    np.testing.assert_array_equal(layout_features(layout_graph, block_rows=1), whole)
    np.testing.assert_array_equal(layout_features(layout_graph, [3, 0, 3], context=ctx, block_rows=2),
                                  whole[[3, 0, 3]])
    np.testing.assert_array_equal(layout_features(layout_graph, np.array([False, True, True, False])), whole[1:3])
    assert layout_features(layout_graph, []).shape == (0, whole.shape[1])


def _reference_layout(graph: LayoutGraph) -> np.ndarray:
    """The per-config layout columns (all but the graph aggregates), config by config, as documented."""
    ids = graph.node_config_ids
    ops = graph.node_opcode[ids]
    size = np.log2(1.0 + np.maximum(graph.node_feat[ids, 28].astype(np.float64), 0.0))
    producer, consumer = layout_links(graph)
    rows = []
    for cfg in graph.config_features():
        default = (cfg == -1).all(axis=1)
        row: list[float] = []
        for _, op in CONFIG_NODE_TYPES:
            typed = ops == op
            row += [(default & typed).sum(), size[default & typed].sum()]
            for _, col in LAYOUT_SLOT_COLUMNS:
                for v in MINOR_VALUES:
                    hit = typed & (cfg[:, col] == v)
                    row += [hit.sum(), size[hit].sum()]
        row += [(~default).sum(), size[~default].sum()]
        out, inp = cfg[producer, 0], cfg[consumer, 6]
        disagree = out != inp
        row += [disagree.sum(), size[producer][disagree].sum(), (disagree & (out != -1) & (inp != -1)).sum()]
        rows.append(row)
    return np.array(rows, dtype=np.float64).reshape(graph.num_configs, -1)


PADDING_NAMES = [f"{t}_out_pad_{c}" for t in PADDING_NODE_TYPES for c in ("log2_size", "excess_count")]


def _reference_occupancy(feat: np.ndarray, m: float, s: float) -> tuple[float, float]:
    """``(occupancy, smallest occupancy)`` of a node's output (``feat``, one node_feat row) under the output
    config values ``m, s``, as documented: through :func:`physical_elements`, one layout at a time."""
    dims: list[int] = []
    for d in feat[21:27]:
        if d <= 0:
            break
        dims.append(int(d))
    rank = len(dims)

    def is_dim(v: float) -> bool:
        return bool(v == math.floor(v) and 0 <= v < rank) if math.isfinite(v) else False

    def occupancy(order: list[int]) -> float:
        rest = [d for d in range(rank) if d not in order]
        return physical_elements(dims, order + rest) / math.prod(dims)

    own = [feat[134], feat[135]] if rank > 1 else [feat[134]]
    if not (all(is_dim(v) for v in own) and len(set(own)) == len(own)):
        own = [rank - 1, rank - 2][:rank]
    own = [int(v) for v in own]
    if rank == 0:
        return 1.0, 1.0
    if not is_dim(m):
        order = own
    elif rank == 1:
        order = [int(m)]
    elif is_dim(s) and s != m:
        order = [int(m), int(s)]
    else:
        order = [int(m), next(v for v in own if v != m)]
    options = [list(o) for o in itertools.permutations(range(rank), min(rank, 2))]
    return occupancy(order), min(occupancy(o) for o in options)


def _reference_padding(graph: LayoutGraph) -> np.ndarray:
    """The output padding columns, config by config and node by node."""
    ids = graph.node_config_ids
    ops = graph.node_opcode[ids]
    size = np.log2(1.0 + np.maximum(graph.node_feat[ids, 28].astype(np.float64), 0.0))
    types = dict(CONFIG_NODE_TYPES)
    rows = []
    for cfg in graph.config_features():
        row: list[float] = []
        for t in PADDING_NODE_TYPES:
            weighted, excess = 0.0, 0
            for k in np.flatnonzero(ops == types[t]):
                occ, smallest = _reference_occupancy(graph.node_feat[ids[k]], float(cfg[k, 0]), float(cfg[k, 1]))
                weighted += size[k] * math.log2(occ)
                excess += occ > smallest * (1 + 1e-9)
            row += [weighted, excess]
        rows.append(row)
    return np.array(rows, dtype=np.float64).reshape(graph.num_configs, len(PADDING_NAMES))


def _assert_matches_reference(graph: LayoutGraph, x: np.ndarray) -> None:
    ref = _reference_layout(graph)
    names = layout_feature_names()[:ref.shape[1]]
    counts = [i for i, n in enumerate(names) if not n.endswith("_size")]
    sizes = [i for i, n in enumerate(names) if n.endswith("_size")]
    assert x.dtype == np.float32
    np.testing.assert_array_equal(x[:, counts], ref[:, counts])
    # Sizes are float64 sums in another order, then float32: equal up to float32 rounding.
    np.testing.assert_allclose(x[:, sizes], ref[:, sizes], rtol=2 ** -22, atol=0)
    padding = _columns(x, layout_feature_names())
    ref_padding = _reference_padding(graph)
    for i, name in enumerate(PADDING_NAMES):
        if name.endswith("_count"):
            np.testing.assert_array_equal(padding[name], ref_padding[:, i], err_msg=name)
        else:
            np.testing.assert_allclose(padding[name], ref_padding[:, i], rtol=2 ** -20, atol=1e-4, err_msg=name)


def _write_layout(path: Path, feat: np.ndarray, opcode: np.ndarray, edges: list[tuple[int, int]],
                  config_ids: np.ndarray, configs: np.ndarray) -> LayoutGraph:
    n = feat.shape[0]
    arrays = {
        "edge_index": np.array([(c, p) for p, c in edges], dtype=np.int64).reshape(-1, 2),
        "node_feat": feat.astype(np.float32),
        "node_opcode": opcode.astype(np.uint8),
        "node_config_feat": configs.astype(np.float32),
        "node_config_ids": config_ids.astype(np.int64),
        "node_splits": np.array([[0, n]], dtype=np.int64),
        "config_runtime": np.arange(1, configs.shape[0] + 1, dtype=np.int64),
    }
    graph = load_graph(write_npz(path / "npz_all" / "npz" / Path(LAYOUT.relpath) / "train" / "g.npz", arrays),
                       LAYOUT, validate=False)
    assert isinstance(graph, LayoutGraph)
    return graph


def _random_layout(path: Path, seed: int, n: int = 160, configs: int = 150) -> LayoutGraph:
    """A random DAG: configurable nodes of the three types and one of another opcode (transpose), two shapes
    (so that same-shape chains make links), a few sizes; a third of the configs all default, the rest random
    values in -1..5 with some nodes left at the default."""
    rng = np.random.default_rng(seed)
    feat = np.zeros((n, 140), dtype=np.float32)
    feat[:, 21:23] = [4, 8]
    feat[rng.random(n) < 0.3, 21:23] = [8, 4]
    feat[:, 28] = rng.choice([7, 15, 63, 1000], n)
    opcode = np.full(n, opcode_id("add"))
    config_ids = np.sort(rng.choice(n, 60, replace=False))
    opcode[config_ids] = rng.choice([CONVOLUTION, DOT, RESHAPE, opcode_id("transpose")], config_ids.size,
                                    p=[0.4, 0.3, 0.2, 0.1])
    edges = sorted({(int(a), int(b)) for b in range(1, n) for a in rng.choice(b, min(b, 2), replace=False)})
    values = rng.integers(-1, 6, (configs, config_ids.size, 18)).astype(np.float32)
    values[rng.random((configs, config_ids.size)) < 0.5] = -1
    values[rng.random(configs) < 0.3] = -1
    return _write_layout(path, feat, opcode, edges, config_ids, values)


@pytest.fixture
def small_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    """The smallest compute blocks (64 configs), link chunks and encoding steps: many of each on a small graph."""
    monkeypatch.setattr(features.tabular_layout, "_PLANE_BYTES", 1)
    monkeypatch.setattr(features.tabular_layout, "_LINK_CHUNK_BYTES", 1)
    monkeypatch.setattr(features.tabular_layout, "_ENCODE_ROWS", 500)


@pytest.mark.parametrize("seed", [0, 1])
def test_layout_features_match_a_straightforward_reference(tmp_path: Path, seed: int):
    graph = _random_layout(tmp_path, seed)
    assert layout_links(graph)[0].size > 20
    x = layout_features(graph)
    _assert_matches_reference(graph, x)
    np.testing.assert_array_equal(layout_features(graph, block_rows=7), x)
    rows = [149, 3, 3, 0, 77]
    np.testing.assert_array_equal(layout_features(graph, rows, block_rows=5), x[rows])


def test_layout_features_in_small_steps(tmp_path: Path, small_steps: None):
    graph = _random_layout(tmp_path, 4)
    x = layout_features(graph)
    _assert_matches_reference(graph, x)
    np.testing.assert_array_equal(layout_features(graph, np.arange(149, -1, -2)), x[149::-2])


def test_layout_features_values_outside_the_layout_range(tmp_path: Path, small_steps: None):
    """Unvalidated files: NaN, infinities, fractions, -0.0, 6 and beyond count as the reference does (equal
    values agree, in whichever slot, NaN agrees with nothing, only exact -1..5 count in the minor columns)."""
    graph = _random_layout(tmp_path, 2, configs=40)
    values = graph.config_features().copy()
    odd = np.array([np.nan, np.inf, -np.inf, 0.5, 1e-30, 1 - 2 ** -24, -0.0, 6, 7, -3, 1e6], dtype=np.float32)
    rng = np.random.default_rng(3)
    for col in (0, 6, 12, 1, 17):
        hit = rng.random(values.shape[:2]) < 0.15
        hit[:10] = False
        values[:, :, col][hit] = rng.choice(odd, int(hit.sum()))
    # 60 configurable nodes: encoding steps of 500 rows hold configs 0..7, then 8..15 (whole configs).
    values[5, :, 0] = values[5, :, 6] = np.nan  # NaN on both ends of every link
    values[6, 0, 0] = 0.5  # an odd value in the output slot only
    values[8, :, 0] = values[8, :, 6] = 7  # equal odd values agree (rows 480..539)
    feat, ops = graph.node_feat, graph.node_opcode
    edges = [(int(p), int(c)) for c, p in graph.edge_index]
    odd_graph = _write_layout(tmp_path / "odd", feat, ops, edges, graph.node_config_ids, values)
    x = layout_features(odd_graph)
    _assert_matches_reference(odd_graph, x)
    col = _columns(x, layout_feature_names())
    assert col["link_disagree_count"][8] == 0 and col["link_disagree_both_set_count"][5] == len(layout_links(graph)[0])


def test_layout_runs_longer_than_255(tmp_path: Path):
    """300 dots of one size read the output of one convolution through an add: node and link runs are cut at
    255 (byte-lane sums) and padded."""
    n = 302
    feat = np.zeros((n, 140), dtype=np.float32)
    feat[:, 21:23] = [4, 8]
    feat[:, 28] = 15
    opcode = np.full(n, DOT)
    opcode[0], opcode[1] = CONVOLUTION, opcode_id("add")
    edges = [(0, 1)] + [(1, c) for c in range(2, n)]
    config_ids = np.array([0, *range(2, n)])
    rng = np.random.default_rng(0)
    values = rng.integers(-1, 3, (20, config_ids.size, 18)).astype(np.float32)
    values[:, :, 1:6] = values[:, :, 7:12] = values[:, :, 13:] = -1
    values[:4] = -1
    values[4, :, 0] = values[4, :, 6] = 2  # every link agrees
    graph = _write_layout(tmp_path, feat, opcode, edges, config_ids, values)
    assert layout_links(graph)[0].size == 300
    x = layout_features(graph)
    _assert_matches_reference(graph, x)
    col = _columns(x, layout_feature_names())
    assert col["link_disagree_count"][4] == 0 and col["link_disagree_size"][4] == 0
    assert col["dot_default_count"][0] == 300


def _padding_graph(path: Path) -> LayoutGraph:
    """Configurable nodes [A, B, C, D, R] at positions 0..4, opcodes conv, dot, dot, dot, reshape; sizes (from
    the shape product column, not the dims) log2(1 + p) = 3, 4, 2, 1, 5. Output dims and own layouts (134, 135):

    * A: [16, 8, 2, 64], own layout 3, 2: (3, 2) pads 64 -> 128 and 2 -> 8, occupancy 8; the cheapest, 2 (e.g.
      (3, 0): 64 -> 128, 16 stays);
    * B: [256, 4], own layout 1, 0: (1, 0) 4 -> 128, occupancy 32; (0, 1) 4 -> 8, occupancy 2, the cheapest;
    * C: [32] (rank 1), own layout 0: occupancy 4 (32 -> 128) whatever the config;
    * D: [2, 4, 8], own layout 0, 0 (unusable: row-major (2, 1), occupancy 16 * 2 = 32, the cheapest);
    * R: a reshape, not counted.
    """
    feat = np.zeros((7, 140), dtype=np.float32)
    for node, dims, own in ((1, [16, 8, 2, 64], [3, 2, 1, 0]), (2, [256, 4], [1, 0]), (3, [32], [0]),
                            (4, [2, 4, 8], [0, 0, 0]), (5, [4, 8], [1, 0])):
        feat[node, 21:21 + len(dims)] = dims
        feat[node, 134:134 + len(own)] = own
    feat[1:6, COL_SHAPE_PRODUCT] = [7, 15, 3, 1, 31]
    opcode = np.array([PARAMETER, CONVOLUTION, DOT, DOT, DOT, RESHAPE, opcode_id("tuple")])
    edges = [(0, 1), (1, 2), (2, 3), (3, 4), (4, 5), (5, 6)]
    configs = np.array([
        [_cfg(), _cfg(), _cfg(), _cfg(), _cfg()],  # all left to the compiler: the own layouts
        [_cfg([3, 0]), _cfg([0, 1]), _cfg([0]), _cfg([0, 1]), _cfg([0, 1])],
        [_cfg([2, 3]), _cfg([1, 0]), _cfg([3]), _cfg(), _cfg()],  # C's 3 is not a dim: its own layout
        [_cfg([0]), _cfg([0]), _cfg(), _cfg([2, 1]), _cfg()],  # second-minor unset: the own layout's next dim
        [_cfg([3, 3]), _cfg([0.5]), _cfg(), _cfg([1, 2]), _cfg()],  # s = m; 0.5 is no dim: the own layout
    ], dtype=np.float32)
    return _write_layout(path, feat, opcode, edges, np.array([1, 2, 3, 4, 5]), configs)


def test_layout_padding_columns_exact(tmp_path: Path):
    """Hand-computed: conv = 3 log2 occ(A); dot = 4 log2 occ(B) + 2 log2 occ(C) + 1 log2 occ(D); excess: nodes
    above their cheapest layout's occupancy."""
    names = layout_feature_names()
    first = names.index("link_disagree_both_set_count") + 1  # after the link columns, before the aggregates
    assert len(names) == 177 and names[first:first + 7] == [*PADDING_NAMES, "out_pad_waste_share",
                                                            "out_pad_work_share", "graph_nodes"]
    graph = _padding_graph(tmp_path)
    x = layout_features(graph)
    col = _columns(x, names)
    # A: own (3, 2) 8; (3, 0) 2; (2, 3) 2 -> 128 = 64; (0, own 3) 16 -> 128 = 8; (3, 3) -> (3, 2) 8.
    assert col["conv_out_pad_log2_size"] == [9, 3, 18, 9, 9]
    assert col["conv_out_pad_excess_count"] == [1, 0, 1, 1, 1]
    # B: own (1, 0) 32, (0, 1) 2, (1, 0) 32, (0, own 1) 2, 0.5 -> own 32. C: 4 always.
    # D: own row-major (2, 1) 32, (0, 1) 2 -> 128 and 4 -> 8 = 128, own 32, (2, 1) 32, (1, 2) 4 -> 128 = 32.
    assert col["dot_out_pad_log2_size"] == [4 * 5 + 2 * 2 + 5, 4 * 1 + 4 + 7, 29, 4 * 1 + 4 + 5, 29]
    assert col["dot_out_pad_excess_count"] == [1, 1, 1, 0, 1]
    # Waste: elements (column 28) 7, 15, 3, 1 x (occupancy - cheapest), over their cheapest padded elements
    # 7 * 2 + 15 * 2 + 3 * 4 + 1 * 32 = 88. Config 0: A 7 * (8 - 2) + B 15 * (32 - 2); 1: D 1 * (128 - 32);
    # 2: A 7 * (64 - 2) + B 450; 3: A 42; 4: A 42 + B 450.
    np.testing.assert_allclose(col["out_pad_waste_share"], np.array([492, 96, 884, 42, 492]) / 88, rtol=1e-6)
    # Work share: each node has one producer (A: the parameter, product 0 -> 1), so its work is
    # sqrt(|out| * |producer|^2): A sqrt(7), B 7 sqrt(15), C 15 sqrt(3), D 3; cost = work * occupancy^1.5.
    work = {"A": math.sqrt(7), "B": 7 * math.sqrt(15), "C": 15 * math.sqrt(3), "D": 3.0}

    def excess(node: str, occ: float, cheapest: float) -> float:
        return work[node] * (occ ** PAD_COST_EXPONENT - cheapest ** PAD_COST_EXPONENT)

    least = sum(work[n] * c ** PAD_COST_EXPONENT for n, c in (("A", 2), ("B", 2), ("C", 4), ("D", 32)))
    expected = [excess("A", 8, 2) + excess("B", 32, 2), excess("D", 128, 32), excess("A", 64, 2) + excess("B", 32, 2),
                excess("A", 8, 2), excess("A", 8, 2) + excess("B", 32, 2)]
    np.testing.assert_allclose(col["out_pad_work_share"], np.array(expected) / least, rtol=1e-6)
    _assert_matches_reference(graph, x)
    np.testing.assert_array_equal(layout_features(graph, [4, 0, 2], block_rows=1), x[[4, 0, 2]])


def test_layout_padding_columns_zero_without_conv_or_dot(layout_graph: LayoutGraph, tmp_path: Path):
    feat, ops = layout_graph.node_feat, layout_graph.node_opcode.copy()
    ops[ops == CONVOLUTION] = RESHAPE
    ops[ops == DOT] = RESHAPE
    edges = [(int(p), int(c)) for c, p in layout_graph.edge_index]
    graph = _write_layout(tmp_path, feat, ops, edges, layout_graph.node_config_ids, layout_graph.config_features())
    col = _columns(layout_features(graph), layout_feature_names())
    assert all(col[name] == [0] * 4 for name in PADDING_NAMES)


def test_node_work_counts_multiply_adds_of_convolutions_either_operand_order_and_dots():
    """The real alexnet's kernel gradient: f32[11,11,3,64] from the images [32,224,224,3] (the input, batch and
    feature roles swapped) and the output gradient [32,54,54,64] (the kernel: input feature its batch, output
    feature its 64): 11 * 11 * 3 * 64 outputs of 32 * 54 * 54 multiply-adds each, whichever producer comes first. A
    dot [8,16] x [16,4]: sqrt(32 * 128 * 64) = 8 * 16 * 4. A convolution whose producers fit no reading of its
    dimension numbers falls back to the same square root."""
    feat = np.zeros((9, 140), dtype=np.float32)
    for node, dims in ((0, [32, 224, 224, 3]), (1, [32, 54, 54, 64]), (2, [11, 11, 3, 64]), (3, [32, 224, 224, 3]),
                       (4, [11, 11, 3, 64]), (5, [8, 16]), (6, [16, 4]), (7, [8, 4]), (8, [11, 11, 3, 64])):
        feat[node, 21:21 + len(dims)] = dims
        feat[node, COL_SHAPE_PRODUCT] = np.prod(dims)
    for node in (2, 4, 8):  # input batch 3, feature 0; kernel input feature 0, output feature 3; output feature 3
        feat[node, 93:107] = [3, 0, 1, 2, 0, 0, 0, 3, 1, 2, 0, 0, 2, 3]
    feat[8, 93 + 7] = 2  # a kernel output feature that does not match the output's
    ops = np.full(9, PARAMETER)
    ops[[2, 4, 8]] = CONVOLUTION
    ops[7] = DOT
    # edge_index rows are [consumer, producer]; node 4's producers are (1, 3): the kernel comes first by id.
    edges = np.array([[2, 0], [2, 1], [4, 1], [4, 3], [7, 5], [7, 6], [8, 0], [8, 1]])
    work = node_work(feat, ops, edges, np.array([2, 4, 7, 8]))
    exact = 11 * 11 * 3 * 64 * 32 * 54 * 54
    np.testing.assert_allclose(work, [exact, exact, 8 * 16 * 4,
                                      math.sqrt(11 * 11 * 3 * 64 * 32 * 224 * 224 * 3 * 32 * 54 * 54 * 64)])


def test_padding_table_of_the_real_alexnet_convolution():
    """The real f32[11,11,3,64] convolution output: dim 2 (3) most-minor pads 3 -> 128 (42.7x); dim 3 (64) minor
    and dim 2 second-minor: 64 -> 128 and 3 -> 8 (5.3x); the cheapest, (3, 0): 64 -> 128, 11 -> 16 (2.9x)."""
    feat = np.zeros((1, 140), dtype=np.float32)
    feat[0, 21:25] = [11, 11, 3, 64]
    feat[0, 134:138] = [3, 2, 1, 0]
    log2, excess = padding_table(feat)
    occ = 2.0 ** log2[0]
    np.testing.assert_allclose([occ[3, 4], occ[4, 3], occ[0, 0], occ.min()], [128 / 3, 16 / 3, 16 / 3, 32 / 11])
    assert excess[0, 3, 4] and excess[0, 0, 0] and not excess[0, 4, 1]


def test_layout_rows_read_the_file_once(layout_graph: LayoutGraph, monkeypatch: pytest.MonkeyPatch):
    opened = []
    real = LayoutGraph.iter_config_blocks

    def counting(self: LayoutGraph, block_rows: int | None = None):
        opened.append(block_rows)
        return real(self, block_rows)

    monkeypatch.setattr(LayoutGraph, "iter_config_blocks", counting)
    x = layout_features(layout_graph, [2, 0, 1], block_rows=1)
    assert len(opened) == 1 and x.shape[0] == 3
    with pytest.raises(IndexError):
        layout_features(layout_graph, [0, 4])
    with pytest.raises(IndexError):
        layout_features(layout_graph, np.array([True, False]))


def _array(feat: np.ndarray, node: int, dtype: str, dims: list[int], minor_to_major: list[int] | None = None) -> None:
    """Node ``node`` of ``feat`` outputs a ``dtype`` array of logical ``dims``, laid out ``minor_to_major``
    (columns 134..: the default layout when not given)."""
    feat[node, 2 + ELEMENT_TYPES.index(dtype)] = 1
    feat[node, 21: 21 + len(dims)] = dims
    feat[node, COL_SHAPE_PRODUCT] = np.prod(dims)
    m2m = list(range(len(dims)))[::-1] if minor_to_major is None else minor_to_major
    feat[node, 134: 134 + len(dims)] = m2m


def test_tiled_array_of_a_tuple_root_is_the_larger_output_its_bounds_fit():
    """The real fusion.191: a convolution by an f32 [3,3,192,384] kernel whose fused computation returns a tuple of
    a u16 [32,12,384] reduce and a bf16 [32,12,12,384] convert of the f32 convolution output, all 4-d arrays but the
    kernel laid out {3,0,2,1}: physical dims (12, 12, 32, 384), units (12, 12, 4, 3). Its bounds reach those units
    (test_tiles.py), so they cut neither the input [32,12,12,192] (units (12, 12, 4, 2)) nor the kernel (units
    (3, 3, 24, 3)); the convolution and the convert tie, and the one nearest the root (the tuple's output) wins."""
    feat = np.zeros((7, 140), dtype=np.float32)
    nhwc = [3, 0, 2, 1]
    _array(feat, 0, "f32", [384])  # the bias
    _array(feat, 1, "bf16", [32, 12, 12, 192], nhwc)  # the input
    _array(feat, 2, "f32", [3, 3, 192, 384])  # the kernel
    _array(feat, 3, "f32", [32, 12, 12, 384], nhwc)  # the convolution
    _array(feat, 4, "u16", [32, 12, 384], [2, 0, 1])  # the reduce: the tuple's first output
    _array(feat, 5, "bf16", [32, 12, 12, 384], nhwc)  # the convert: the tuple's second output
    feat[6, 2 + ELEMENT_TYPES.index("tuple")] = 1  # the root: a tuple has no dims and no layout
    feat[6, 0] = 1
    out = np.zeros((3, 6), dtype=np.float32)
    out[:, :4] = [[12, 12, 4, 3], [1, 1, 1, 1], [6, 12, 2, 3]]
    a = tiled_array(feat, out)
    assert a is not None and a.node == 5 and a.itemsize == 2
    np.testing.assert_array_equal(a.dims, [12, 12, 32, 384])
    np.testing.assert_array_equal(a.granules, [1, 1, 8, 128])
    np.testing.assert_array_equal(a.units, [12, 12, 4, 3])
    # 12 x 12 x 32 x 384, 1 x 1 x 8 x 128 and 6 x 12 x 16 x 384 elements
    np.testing.assert_array_equal(a.elements(out[:, :4].astype(np.float64)),
                                  [[12, 12, 32, 384], [1, 1, 8, 128], [6, 12, 16, 384]])
    # without the convert, the convolution (f32) is the tightest array the bounds fit
    conv = tiled_array(feat, out, candidates=np.arange(7) != 5)
    assert conv is not None and conv.node == 3 and conv.itemsize == 4
    # the input's 2 lane units do not hold a bound of 3; the bounds' rank picks the 4-d arrays only
    assert tiled_array(feat, out, candidates=np.isin(np.arange(7), [0, 1, 2, 4, 6])) is None
    # the kernel bounds, among the parameters, cut the kernel: units (3, 3, 24, 3)
    ker = np.zeros((2, 6), dtype=np.float32)
    ker[:, :4] = [[3, 3, 24, 3], [1, 1, 4, 1]]
    k = tiled_array(feat, ker, candidates=np.isin(np.arange(7), [0, 1, 2]))
    assert k is not None and k.node == 2
    np.testing.assert_array_equal(k.units, [3, 3, 24, 3])
    assert tiled_array(feat, np.zeros((2, 6), dtype=np.float32)) is None  # no bounds


def test_tiled_array_of_a_non_default_layout_counts_physical_dims():
    """fusion.261's f32 [4096,1000]{0,1}: the 4096 dim is the most minor, so the physical dims are (1000, 4096),
    8 and 128 elements a unit: units (125, 32). In the default layout {1,0} the units would be (512, 8), which do
    not hold a bound of 32 on the minor dim."""
    feat = np.zeros((2, 140), dtype=np.float32)
    _array(feat, 0, "f32", [4096, 1000], [0, 1])
    feat[1] = feat[0]
    feat[1, 134:136] = [1, 0]
    out = np.zeros((2, 6), dtype=np.float32)
    out[:, :2] = [[125, 32], [8, 4]]
    a = tiled_array(feat, out)
    assert a is not None and a.node == 0 and a.itemsize == 4
    np.testing.assert_array_equal(a.dims, [1000, 4096])
    np.testing.assert_array_equal(a.units, [125, 32])
    np.testing.assert_array_equal(a.elements(out[:, :2].astype(np.float64)), [[1000, 4096], [64, 512]])
    assert tiled_array(feat, out, candidates=np.array([False, True])) is None
    d = tiled_array(feat, out[1:], candidates=np.array([False, True]))  # (8, 4) fits the default layout too
    assert d is not None and d.node == 1
    np.testing.assert_array_equal(d.dims, [4096, 1000])
    np.testing.assert_array_equal(d.units, [512, 8])


def test_tile_features_exact(tmp_path: Path):
    """An f32 [16, 300] output, units (2, 3): 8 rows and 128 columns a unit, the last column unit partial (44 of
    128). Its one parameter, a bf16 [10, 100] of 1,000 elements, has units (2, 1): too few for the bounds."""
    feat = np.zeros((2, 140), dtype=np.float32)
    _array(feat, 0, "bf16", [10, 100])  # the parameter: 2,000 bytes
    _array(feat, 1, "f32", [16, 300])  # the root (a convolution): 4 bytes per element
    feat[1, 0] = 1
    # 8 x 256, 16 x 300 (the whole output) and 8 x 128 elements
    bounds = np.array([[1, 2], [2, 3], [1, 1]], dtype=np.float32)
    cfg = np.zeros((3, 24), dtype=np.float32)
    cfg[:, 0] = 3
    cfg[:, 8:10] = bounds
    arrays = {
        "node_feat": feat,
        "node_opcode": np.array([63, 26], dtype=np.uint8),
        "edge_index": np.array([[1, 0]], dtype=np.int64),
        "config_feat": cfg,
        "config_runtime": np.array([3, 2, 1], dtype=np.int64),
        "config_runtime_normalizers": np.full(3, 2, dtype=np.int64),
    }
    graph = load_graph(write_npz(tmp_path / "npz_all/npz/tile/xla/train/t.npz", arrays), TILE)
    assert isinstance(graph, TileGraph)
    array = tiled_array(graph.node_feat, graph.config_feat[:, 8:14])
    assert array is not None and array.node == 1 and array.itemsize == 4
    np.testing.assert_array_equal(array.units, [2, 3])
    names = tile_feature_names()
    assert not {"lane_pad_ratio", "sublane_pad_ratio"} & set(names), "a tile is whole registers in these units"
    x = tile_features(graph)
    assert x.shape == (3, len(names)) and len(set(names)) == len(names)
    col = _columns(x.astype(np.float64), names)
    np.testing.assert_array_equal(x[:, :24], cfg)
    # shares of the 16 rows (8, 16, 8) and of the 300 columns (256, min(384, 300) = 300, 128)
    np.testing.assert_allclose(col["output_tile_share_0"], [0.5, 1, 0.5])
    np.testing.assert_allclose(col["output_tile_share_1"], [256 / 300, 1, 128 / 300], rtol=1e-6)
    assert col["output_tile_share_2"] == [0, 0, 0]
    # 2 x 2, 1 x 1 and 2 x 3 tiles
    np.testing.assert_allclose(col["log2_num_tiles"], [2, 0, np.log2(6)], rtol=1e-6)
    assert col["log2_kernel_bounds_0"] == [2, 2, 2]
    np.testing.assert_allclose(col["log2_output_bounds_1"], np.log2([3, 4, 2]), rtol=1e-6)
    assert col["tiled_rank"] == [2] * 3 and col["graph_count_convolution"] == [1] * 3
    assert col["tiled_dim_0"] == [16] * 3 and col["tiled_dim_1"] == [300] * 3 and col["tiled_dim_2"] == [0] * 3
    # Padded tiles (whole units): 8 x 256, 16 x 384, 8 x 128 elements of 4 bytes. Their share of the 16 x 300
    # output: 1/2 x 256/300, 1, 1/2 x 128/300 of the parameter's 2,000 bytes.
    tile_bytes = np.array([8 * 256, 16 * 384, 8 * 128]) * 4.0
    operand_bytes = np.array([0.5 * 256 / 300, 1, 0.5 * 128 / 300]) * 2000
    np.testing.assert_allclose(tile_bytes, [8192, 24576, 4096])
    np.testing.assert_allclose(operand_bytes, [2560 / 3, 2000, 1280 / 3])
    np.testing.assert_allclose(col["log2_tile_bytes"], np.log2(1 + tile_bytes), rtol=1e-6)
    np.testing.assert_allclose(col["log2_tile_operand_bytes"], np.log2(1 + operand_bytes), rtol=1e-6)
    np.testing.assert_allclose(col["log2_working_set"], np.log2(1 + 2 * (tile_bytes + operand_bytes)), rtol=1e-6)
    # padded tile elements times the number of tiles: 2,048 x 4, 6,144 x 1, 1,024 x 6 (the 4,800 elements padded)
    np.testing.assert_allclose(col["log2_padded_elements"], np.log2(1 + np.array([8192, 6144, 6144])), rtol=1e-6)
    # the kernel bounds (rank 1) fit no parameter of rank 1, so no kernel array: no kernel tile, the operand and
    # working set as above
    assert col["log2_kernel_tile_bytes"] == [0] * 3 and col["log2_kernel_footprint"] == [0] * 3
    np.testing.assert_allclose(col["log2_input_footprint"], col["log2_tile_operand_bytes"])
    np.testing.assert_allclose(col["log2_matrix_working_set"], col["log2_working_set"])
    assert col["log2_kernel_chunks"] == [0] * 3 and col["kernel_tile_share"] == [0] * 3


@pytest.mark.parametrize("kernel_first", [False, True])
def test_tile_matrix_memory_of_a_batched_dot(tmp_path: Path, kernel_first: bool):
    """out[4, 16, 256] = input[4, 16, 32] x kernel[4, 32, 256], all f32, and a third parameter of 256 elements that
    the kernel's other ops read. Units: output (4, 2, 2), kernel (4, 4, 2), input (4, 2, 1), third (1). The
    config's kernel tile keeps the batch dim whole, follows the output tile's columns in its output-feature dim
    (as the real records do) and cuts the contracting dim (8 or 32: 1 or 4 units)."""
    feat = np.zeros((4, 140), dtype=np.float32)
    # the kernel is told by its shape (the array the kernel bounds fit among the parameters), not by operand order
    shapes = ([4, 32, 256], [4, 16, 32]) if kernel_first else ([4, 16, 32], [4, 32, 256])
    for node, dims in enumerate((*shapes, [4, 16, 256], [256])):
        _array(feat, node, "f32", dims)
    feat[2, 0] = 1  # the root
    cfg = np.zeros((2, 24), dtype=np.float32)
    cfg[:, 0:3] = [[4, 1, 1], [4, 4, 2]]  # kernel tiles: 4 x 8 x 128 and 4 x 32 x 256 elements
    cfg[:, 8:11] = [[1, 2, 1], [4, 1, 2]]  # output tiles: 1 x 16 x 128 and 4 x 8 x 256 elements
    opcode = np.array([opcode_id("parameter"), opcode_id("parameter"), DOT, opcode_id("parameter")], dtype=np.uint8)
    arrays = {
        "node_feat": feat,
        "node_opcode": opcode,
        "edge_index": np.array([[2, 0], [2, 1]], dtype=np.int64),
        "config_feat": cfg,
        "config_runtime": np.array([2, 1], dtype=np.int64),
        "config_runtime_normalizers": np.full(2, 2, dtype=np.int64),
    }
    graph = load_graph(write_npz(tmp_path / "npz_all/npz/tile/xla/train/t.npz", arrays), TILE)
    output = tiled_array(graph.node_feat, graph.config_feat[:, 8:14])  # the input's 1 lane unit holds no 2
    kernel = tiled_array(graph.node_feat, graph.config_feat[:, 0:6], candidates=graph.node_opcode == PARAMETER)
    assert output is not None and output.node == 2
    assert kernel is not None and kernel.node == (0 if kernel_first else 1)
    col = _columns(tile_features(graph).astype(np.float64), tile_feature_names())
    # Output tile shares (batch, rows, columns): (1/4, 1, 1/2) and (1, 1/2, 1); padded tiles 2,048 and 8,192
    # elements. Kernel tiles 4 x 8 x 128 and 4 x 32 x 256 elements of 4 bytes (whole units, no padding): shares
    # 1/8 and 1 of the kernel, its output-feature share that of the output tile's columns (1/2, 1), so the
    # contracting chunk is 1/4 and 1. The input footprint: the parameters other than the kernel (the input's
    # 8,192 bytes and the third's 1,024) cut to the output tile's batch and rows (1/4 x 1, 1 x 1/2) and the
    # contracting chunk (1/4, 1).
    out_tile = np.array([2048, 8192]) * 4.0
    kernel_tile = np.array([4096, 32768]) * 4.0
    input_fp = (8192 + 1024) * np.array([0.25 * 0.25, 0.5 * 1.0])
    np.testing.assert_allclose(input_fp, [576, 4608])
    np.testing.assert_allclose(col["log2_tile_bytes"], np.log2(1 + out_tile), rtol=1e-6)
    np.testing.assert_allclose(col["log2_kernel_tile_bytes"], np.log2(1 + kernel_tile), rtol=1e-6)
    np.testing.assert_allclose(col["log2_kernel_footprint"], np.log2(1 + kernel_tile), rtol=1e-6)
    np.testing.assert_allclose(col["log2_input_footprint"], np.log2(1 + input_fp), rtol=1e-6)
    # 2 x (8,192 + 16,384 + 576) and 2 x (32,768 + 131,072 + 4,608)
    np.testing.assert_allclose(col["log2_matrix_working_set"], np.log2(1 + np.array([50304, 336896])), rtol=1e-6)
    np.testing.assert_allclose(col["log2_matrix_working_set"], np.log2(1 + 2 * (out_tile + kernel_tile + input_fp)),
                               rtol=1e-6)
    # every parameter (140,288 bytes) is cut like the output by tile_memory: it counts the kernel's 131,072 bytes at
    # a 1/8 share in the first config, which the matrix tiler holds as a 16,384-byte kernel tile
    np.testing.assert_allclose(col["log2_tile_operand_bytes"], np.log2(1 + np.array([140288 / 8, 140288 / 2])),
                               rtol=1e-6)
    # The kernel [4, 32, 256] cut into 1 x 4 x 2 = 8 tiles of 4 x 8 x 128 (a share of 1/8), and kept whole.
    np.testing.assert_allclose(col["log2_kernel_chunks"], np.log2([1 + 8, 1 + 1]), rtol=1e-6)
    np.testing.assert_allclose(col["kernel_tile_share"], [1 / 8, 1])
    shares = tile_shares(graph.node_feat, graph.node_opcode, graph.config_feat)
    assert shares.shape == (2, len(TILE_SHARE_NAMES))
    np.testing.assert_allclose(shares, [[1 / 4, 1, 1 / 2, 0, 0, 0, 8, 1 / 8], [1, 1 / 2, 1, 0, 0, 0, 1, 1]])
    # The GNNs' transform appends the same columns to the stored ones; a layout graph's configs are left alone.
    from torch_geometric.data import Data

    from features.data import graph_to_data
    from features.transforms import TileShares

    data = TileShares()(graph_to_data(graph))
    assert tuple(data.config_feat.shape) == (2, 24 + len(TILE_SHARE_NAMES))
    np.testing.assert_array_equal(data.config_feat[:, :24].numpy(), graph.config_feat)
    np.testing.assert_allclose(data.config_feat[:, 24:].numpy(), shares, rtol=1e-6)
    layout = torch.zeros(2, 3, 18)
    assert TileShares()(Data(x=torch.zeros(1, 140), op=torch.zeros(1, dtype=torch.long),
                             config_feat=layout)).config_feat is layout


def test_element_itemsize_from_the_one_hot_columns():
    feat = np.zeros((4, 140), dtype=np.float32)
    for row, name in enumerate(("bf16", "f32", "c128")):
        feat[row, 2 + ELEMENT_TYPES.index(name)] = 1
    # the last row has no type column set (a tuple's elements, or padding): no bytes
    np.testing.assert_array_equal(element_itemsize(feat), [2, 4, 16, 0])
