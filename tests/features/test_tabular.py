"""Tabular features on hand-built graphs with exact expected values."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import features.tabular
from competition.collections import Collection
from competition.npzio import write_npz
from competition.opcodes import CONVOLUTION, DOT, RESHAPE, opcode_id
from competition.reader import LayoutGraph, TileGraph, load_graph
from competition.schema import COL_SHAPE_PRODUCT, ELEMENT_TYPES, LAYOUT_SLOT_COLUMNS, element_itemsize
from features.tabular import (
    CONFIG_NODE_TYPES,
    MINOR_VALUES,
    layout_context,
    layout_feature_names,
    layout_features,
    layout_links,
    tile_feature_names,
    tile_features,
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


def _assert_matches_reference(graph: LayoutGraph, x: np.ndarray) -> None:
    ref = _reference_layout(graph)
    names = layout_feature_names()[:ref.shape[1]]
    counts = [i for i, n in enumerate(names) if not n.endswith("_size")]
    sizes = [i for i, n in enumerate(names) if n.endswith("_size")]
    assert x.dtype == np.float32
    np.testing.assert_array_equal(x[:, counts], ref[:, counts])
    # Sizes are float64 sums in another order, then float32: equal up to float32 rounding.
    np.testing.assert_allclose(x[:, sizes], ref[:, sizes], rtol=2 ** -22, atol=0)


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
    monkeypatch.setattr(features.tabular, "_PLANE_BYTES", 1)
    monkeypatch.setattr(features.tabular, "_LINK_CHUNK_BYTES", 1)
    monkeypatch.setattr(features.tabular, "_ENCODE_ROWS", 500)


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


def test_tile_features_exact(tmp_path: Path):
    feat = np.zeros((2, 140), dtype=np.float32)
    feat[1, 0] = 1
    feat[1, 21:23] = [16, 256]
    feat[1, 2 + ELEMENT_TYPES.index("f32")] = 1  # the root (a convolution): 4 bytes per element
    feat[0, 2 + ELEMENT_TYPES.index("bf16")] = 1  # the parameter: 1,000 elements of 2 bytes
    feat[0, COL_SHAPE_PRODUCT] = 1000
    bounds = np.array([[8, 128], [16, 200], [4, 256]], dtype=np.float32)
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
    names = tile_feature_names()
    x = tile_features(graph)
    assert x.shape == (3, len(names)) and len(set(names)) == len(names)
    col = _columns(x.astype(np.float64), names)
    np.testing.assert_array_equal(x[:, :24], cfg)
    np.testing.assert_allclose(col["output_bounds_0/shape_0"], [0.5, 1, 0.25])
    np.testing.assert_allclose(col["output_bounds_1/shape_1"], [0.5, 200 / 256, 1])
    assert col["output_bounds_2/shape_2"] == [0, 0, 0]
    assert col["log2_num_tiles"] == [2, 1, 2]
    np.testing.assert_allclose(col["lane_pad_ratio"], [1, 256 / 200, 1], rtol=1e-6)
    assert col["sublane_pad_ratio"] == [1, 1, 2]
    assert col["log2_kernel_bounds_0"] == [2, 2, 2]
    assert col["root_rank"] == [2] * 3 and col["graph_count_convolution"] == [1] * 3
    # Padded tiles (dim 0 to 8, dim 1 to 128): 8 x 128, 16 x 256, 8 x 256 elements of 4 bytes. Their share of the
    # 16 x 256 output: 1/4, 200/256, 1/4 of the parameter's 2,000 bytes.
    tile_bytes = np.array([8 * 128, 16 * 256, 8 * 256]) * 4.0
    operand_bytes = np.array([0.25, 200 / 256, 0.25]) * 2000
    np.testing.assert_allclose(col["log2_tile_bytes"], np.log2(1 + tile_bytes), rtol=1e-6)
    np.testing.assert_allclose(col["log2_tile_operand_bytes"], np.log2(1 + operand_bytes), rtol=1e-6)
    np.testing.assert_allclose(col["log2_working_set"], np.log2(1 + 2 * (tile_bytes + operand_bytes)), rtol=1e-6)
    # padded tile elements times the number of tiles (4, 2, 4)
    np.testing.assert_allclose(col["log2_padded_elements"], np.log2(1 + np.array([4096, 8192, 8192])), rtol=1e-6)
    # a root with one operand is no matrix kernel to cut: no kernel tile, the operand and working set as above
    assert col["log2_kernel_tile_bytes"] == [0] * 3 and col["log2_kernel_footprint"] == [0] * 3
    np.testing.assert_allclose(col["log2_input_footprint"], col["log2_tile_operand_bytes"])
    np.testing.assert_allclose(col["log2_matrix_working_set"], col["log2_working_set"])


@pytest.mark.parametrize("kernel_first", [False, True])
def test_tile_matrix_memory_of_a_batched_dot(tmp_path: Path, kernel_first: bool):
    """out[4, 16, 256] = input[4, 16, 32] x kernel[4, 32, 256], all f32, and a third parameter of 256 elements that
    the kernel's other ops read; the config's kernel tile keeps the batch and output-feature dims whole and cuts the
    contracting dim (8 or 32)."""
    feat = np.zeros((4, 140), dtype=np.float32)
    feat[:, 2 + ELEMENT_TYPES.index("f32")] = 1
    # edges are stored sorted, so the operand order is not in the file: the kernel is told by its shape
    shapes = ([4, 32, 256], [4, 16, 32]) if kernel_first else ([4, 16, 32], [4, 32, 256])
    for node, dims in enumerate((*shapes, [4, 16, 256], [256])):
        feat[node, 21:24] = dims
        feat[node, COL_SHAPE_PRODUCT] = np.prod(dims)
    feat[2, 0] = 1  # the root
    cfg = np.zeros((2, 24), dtype=np.float32)
    cfg[:, 0:3] = [[4, 8, 256], [4, 32, 256]]  # kernel tiles
    cfg[:, 8:11] = [[1, 16, 128], [4, 8, 256]]  # output tiles
    arrays = {
        "node_feat": feat,
        "node_opcode": np.array([opcode_id("parameter"), opcode_id("parameter"), DOT, opcode_id("parameter")],
                                dtype=np.uint8),
        "edge_index": np.array([[2, 0], [2, 1]], dtype=np.int64),
        "config_feat": cfg,
        "config_runtime": np.array([2, 1], dtype=np.int64),
        "config_runtime_normalizers": np.full(2, 2, dtype=np.int64),
    }
    graph = load_graph(write_npz(tmp_path / "npz_all/npz/tile/xla/train/t.npz", arrays), TILE)
    col = _columns(tile_features(graph).astype(np.float64), tile_feature_names())
    # kernel tiles 4 x 8 x 256 and 4 x 32 x 256 elements of 4 bytes; the output tile covers 128 / 256 and 256 / 256
    # of the output's columns; the input (8,192 bytes) is cut to the output tile's rows (1/4 x 16/16, 4/4 x 8/16)
    # and the contracting chunk (8 / 32, 32 / 32); the output tiles hold 1 x 16 x 128 and 4 x 8 x 256 elements;
    # the third parameter's 1,024 bytes are cut like the output (1/8, 1/2).
    kernel_tile = np.array([8192, 32768]) * 4.0
    kernel_fp = kernel_tile * [0.5, 1.0]
    input_fp = 8192 * np.array([0.25 * 0.25, 0.5 * 1.0])
    out_tile = np.array([2048, 8192]) * 4.0
    other = 1024 * np.array([1 / 8, 1 / 2])
    np.testing.assert_allclose(col["log2_kernel_tile_bytes"], np.log2(1 + kernel_tile), rtol=1e-6)
    np.testing.assert_allclose(col["log2_kernel_footprint"], np.log2(1 + kernel_fp), rtol=1e-6)
    np.testing.assert_allclose(col["log2_input_footprint"], np.log2(1 + input_fp), rtol=1e-6)
    np.testing.assert_allclose(col["log2_matrix_working_set"],
                               np.log2(1 + 2 * (out_tile + kernel_fp + input_fp + other)), rtol=1e-6)
    # both operands are cut like the output by tile_memory: it counts the kernel's 131,072 bytes at a 1/8 share in
    # the first config, which the matrix tiler holds at 16,384 bytes (half the kernel tile)
    np.testing.assert_allclose(col["log2_tile_operand_bytes"][0], np.log2(1 + (8192 + 131072 + 1024) / 8),
                               rtol=1e-6)


def test_element_itemsize_from_the_one_hot_columns():
    feat = np.zeros((4, 140), dtype=np.float32)
    for row, name in enumerate(("bf16", "f32", "c128")):
        feat[row, 2 + ELEMENT_TYPES.index(name)] = 1
    # the last row has no type column set (a tuple's elements, or padding): no bytes
    np.testing.assert_array_equal(element_itemsize(feat), [2, 4, 16, 0])
