"""Tabular features on hand-built graphs with exact expected values."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from competition.collections import Collection
from competition.npzio import write_npz
from competition.reader import LayoutGraph, TileGraph, load_graph
from features.tabular import (
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


def test_tile_features_exact(tmp_path: Path):
    feat = np.zeros((2, 140), dtype=np.float32)
    feat[1, 0] = 1
    feat[1, 21:23] = [16, 256]
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
