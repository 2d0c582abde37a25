"""features.data and features.transforms on hand-built tiny graphs, with exact expected values."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from sklearn.exceptions import NotFittedError
from torch_geometric.data import Data
from torch_geometric.transforms import Compose

from competition.collections import Collection
from competition.npzio import write_npz
from competition.opcodes import OPCODE_IDS
from competition.reader import load_graph
from features import (
    DOT_CONV_COLUMNS,
    OPCODE_GROUP_NAMES,
    PLACEHOLDER_OPCODE,
    CollapseChains,
    ConfigDimensionSizes,
    DedupConfigs,
    DotConvFeatures,
    DropConstantColumns,
    LogTransform,
    Normalize,
    OpcodeGroupFeatures,
    PadLayoutMinusOne,
    PruneToConfigurable,
    SampleConfigs,
    ShapeAlignmentFeatures,
    graph_to_data,
    operand_nodes,
)
from features.transforms import _infer_dot
from models.gnn.net import dimension_features

OP = OPCODE_IDS


def graph(edges: list[tuple[int, int]], ops: list[str], config_nodes: list[int] | None, num_configs: int = 2) -> Data:
    """A layout-like Data: ``edges`` producer -> consumer, node i's x filled with i, ``num_configs`` configs."""
    n = len(ops)
    data = Data(
        x=torch.arange(n, dtype=torch.float32)[:, None].repeat(1, 140),
        op=torch.tensor([OP[o] for o in ops]),
        edge_index=torch.tensor(edges, dtype=torch.long).T.reshape(2, -1),
        y=torch.arange(num_configs, dtype=torch.float64),
        runtime=torch.arange(num_configs),
        config_ids=torch.arange(num_configs),
        num_nodes=n,
    )
    if config_nodes is not None:
        data.config_node_index = torch.tensor(config_nodes)
        data.config_feat = torch.zeros(num_configs, len(config_nodes), 18)
    return data


# 0 -> 1 -> 2 -> 3 -> 4 -> 6 and 1 -> 5 -> 6; configurable nodes 2 and 5.
DIAMOND_EDGES = [(0, 1), (1, 2), (2, 3), (3, 4), (4, 6), (1, 5), (5, 6)]
DIAMOND_OPS = ["parameter", "add", "dot", "add", "multiply", "convolution", "tuple"]


def diamond() -> Data:
    return graph(DIAMOND_EDGES, DIAMOND_OPS, [2, 5])


@pytest.mark.parametrize(
    ("hops", "direction", "kept", "edges", "config_nodes"),
    [
        (1, "both", [1, 2, 3, 5, 6], [[0, 1, 0, 3], [1, 2, 3, 4]], [1, 3]),
        (1, "in", [1, 2, 5], [[0, 0], [1, 2]], [1, 2]),
        (2, "in", [0, 1, 2, 5], [[0, 1, 1], [1, 2, 3]], [2, 3]),
        (2, "out", [2, 3, 4, 5, 6], [[0, 1, 2, 3], [1, 2, 4, 4]], [0, 3]),
        (2, "both", [0, 1, 2, 3, 4, 5, 6], [[0, 1, 2, 3, 4, 1, 5], [1, 2, 3, 4, 6, 5, 6]], [2, 5]),
    ],
)
def test_prune_to_configurable(hops, direction, kept, edges, config_nodes):
    out = PruneToConfigurable(hops, direction)(diamond())
    assert out.x[:, 0].tolist() == kept
    assert out.op.tolist() == [OP[DIAMOND_OPS[i]] for i in kept]
    assert out.edge_index.tolist() == edges
    assert out.config_node_index.tolist() == config_nodes
    assert out.num_nodes == len(kept)
    assert (out.num_nodes_before, out.num_edges_before) == (7, 7)
    # The configurable nodes are still the dot and the convolution.
    assert out.op[out.config_node_index].tolist() == [OP["dot"], OP["convolution"]]


def test_prune_leaves_tile_graphs_and_checks_arguments():
    data = graph(DIAMOND_EDGES, DIAMOND_OPS, None)
    assert PruneToConfigurable(2)(data).edge_index.shape == (2, 7)
    with pytest.raises(ValueError, match="hops"):
        PruneToConfigurable(6)
    with pytest.raises(ValueError, match="direction"):
        PruneToConfigurable(1, "up")


# A convolution (1) linked to a dot (5) through a chain of three elementwise nodes 2, 3, 4.
CHAIN_EDGES = [(0, 1), (1, 2), (2, 3), (3, 4), (4, 5), (5, 6)]
CHAIN_OPS = ["parameter", "convolution", "add", "multiply", "tanh", "dot", "tuple"]


def test_collapse_chains_edge_mode():
    out = CollapseChains(hops=0, mode="edge")(graph(CHAIN_EDGES, CHAIN_OPS, [1, 5]))
    assert out.x[:, 0].tolist() == [1, 5]
    assert out.edge_index.tolist() == [[0], [1]]
    assert out.config_node_index.tolist() == [0, 1]
    assert (out.num_nodes_before, out.num_edges_before) == (7, 6)


def test_collapse_chains_node_mode():
    out = CollapseChains(hops=0, mode="node")(graph(CHAIN_EDGES, CHAIN_OPS, [1, 5]))
    assert out.num_nodes == 3
    assert out.op.tolist() == [OP["convolution"], OP["dot"], PLACEHOLDER_OPCODE]
    assert out.x[2].abs().sum() == 0 and out.x[:2, 0].tolist() == [1, 5]
    assert out.edge_index.tolist() == [[0, 2], [2, 1]]
    assert out.config_node_index.tolist() == [0, 1]


def test_collapse_chains_with_hops_bridges_only_the_removed_middle():
    # Kept: 0, 1, 2 (hop of 1), 4 (hop of 5), 5, 6; removed: 3, so only 2 -> 4 is bridged.
    out = CollapseChains(hops=1, mode="edge")(graph(CHAIN_EDGES, CHAIN_OPS, [1, 5]))
    assert out.x[:, 0].tolist() == [0, 1, 2, 4, 5, 6]
    assert out.edge_index.tolist() == [[0, 1, 3, 4, 2], [1, 2, 4, 5, 3]]
    assert out.config_node_index.tolist() == [1, 4]


def test_collapse_chains_through_elementwise_only():
    # 0 (dot) -> 1 (add) -> 2 (reduce) -> 3 (dot) and 0 -> 4 (multiply) -> 5 (tanh) -> 6 (dot): only the path of
    # elementwise ops bridges; the reduce is a dead end.
    edges = [(0, 1), (1, 2), (2, 3), (0, 4), (4, 5), (5, 6)]
    ops = ["dot", "add", "reduce", "dot", "multiply", "tanh", "dot"]
    every = CollapseChains(hops=0)(graph(edges, ops, [0, 3, 6]))
    assert every.edge_index.tolist() == [[0, 0], [1, 2]]
    out = CollapseChains(hops=0, through="elementwise")(graph(edges, ops, [0, 3, 6]))
    assert out.edge_index.tolist() == [[0], [2]]
    assert out.config_node_index.tolist() == [0, 1, 2]
    assert "through='elementwise'" in repr(CollapseChains(through="elementwise"))
    with pytest.raises(ValueError, match="through"):
        CollapseChains(through="reduce")


def test_collapse_chains_branching_and_blocking():
    # 0 (dot) -> 1 (add) -> 2 (dot) and 1 -> 3 (add) -> 4 (dot) -> 5 (add) -> 6 (dot): the path 0 .. 6 runs through
    # the kept node 4, so it gives no bridge 0 -> 6.
    edges = [(0, 1), (1, 2), (1, 3), (3, 4), (4, 5), (5, 6)]
    ops = ["dot", "add", "dot", "add", "dot", "add", "dot"]
    out = CollapseChains(hops=0, mode="edge")(graph(edges, ops, [0, 2, 4, 6]))
    assert out.edge_index.tolist() == [[0, 0, 2], [1, 2, 3]]
    nodes = CollapseChains(hops=0, mode="node")(graph(edges, ops, [0, 2, 4, 6]))
    assert nodes.edge_index.tolist() == [[0, 0, 2, 4, 5, 6], [4, 5, 6, 1, 2, 3]]
    assert nodes.op.tolist() == [OP["dot"]] * 4 + [PLACEHOLDER_OPCODE] * 3


def layout_row(shape: list[int], layout: list[int], tuple_count: int = 0) -> torch.Tensor:
    row = torch.zeros(140)
    row[21:21 + len(shape)] = torch.tensor(shape, dtype=torch.float32)
    row[29] = tuple_count
    row[134:134 + len(layout)] = torch.tensor(layout, dtype=torch.float32)
    return row


def test_pad_layout_minus_one_on_nodes_and_tile_configs():
    x = torch.stack([
        layout_row([4, 8], [1, 0]),
        layout_row([2, 3, 5], [2, 1, 0]),
        layout_row([], []),  # scalar
        layout_row([], [], tuple_count=2),
    ])
    bounds = torch.zeros(2, 24)
    bounds[0, [0, 1, 6, 7, 16, 22, 23]] = torch.tensor([1.0, 128.0, 129.0, 128.0, 8.0, 8.0, 8.0])
    data = Data(x=x, config_feat=bounds)
    out = PadLayoutMinusOne()(data)
    assert out.x[:, 134:].tolist() == [
        [1, 0, -1, -1, -1, -1],
        [2, 1, 0, -1, -1, -1],
        [-1] * 6,
        [-1] * 6,
    ]
    assert out.config_feat[0].tolist() == (
        [1, 128, -1, -1, -1, -1, 129, 128] + [-1] * 6 + [0, 0] + [8, -1, -1, -1, -1, -1, 8, 8]
    )
    assert out.config_feat[1].tolist() == [-1] * 6 + [0, 0] + [-1] * 6 + [0, 0] + [-1] * 6 + [0, 0]
    assert out.x[:, :134].equal(x[:, :134])


def test_pad_layout_minus_one_leaves_layout_configs():
    cfg = torch.tensor([[[0.0, 1.0] + [-1.0] * 16]])
    out = PadLayoutMinusOne()(Data(x=torch.stack([layout_row([4, 8], [0, 1])]), config_feat=cfg.clone()))
    assert out.config_feat.equal(cfg)
    assert out.x[0, 134:].tolist() == [0, 1, -1, -1, -1, -1]


def test_opcode_group_features():
    ops = ["add", "reduce", "dot", "all-reduce", "while", "reshape", "parameter"]
    data = Data(x=torch.zeros(7, 140), op=torch.tensor([OP[o] for o in ops]))
    out = OpcodeGroupFeatures()(data)
    assert OPCODE_GROUP_NAMES == (
        "elementwise", "reduction", "data_movement", "matrix", "collective", "control", "other"
    )
    assert out.x.shape == (7, 147)
    assert out.x[:, 140:].tolist() == [
        [1, 0, 0, 0, 0, 0, 0],
        [0, 1, 0, 0, 0, 0, 0],
        [0, 0, 0, 1, 0, 0, 0],
        [0, 0, 0, 0, 1, 0, 0],
        [0, 0, 0, 0, 0, 1, 0],
        [0, 0, 1, 0, 0, 0, 0],
        [0, 0, 0, 0, 0, 0, 1],
    ]


def test_shape_alignment_features():
    out = ShapeAlignmentFeatures()(Data(x=torch.stack([layout_row([130, 8, 257], [])])))
    assert out.x.shape == (1, 158)
    assert out.x[0, 140:].tolist() == [2, 8, 1, 0, 0, 0] + [1, 0, 2, 0, 0, 0] + [2, 0, 1, 0, 0, 0]


def test_dot_conv_features():
    x = torch.stack([
        layout_row([2, 3], [1, 0]),  # lhs, minor dim 1 (the contracting one)
        layout_row([3, 4], [0, 1]),  # rhs, minor dim 0 (the contracting one)
        layout_row([2, 4], [1, 0]),  # dot
        layout_row([8, 5, 5, 16], [3, 2, 1, 0]),  # conv input (NHWC), minor = feature dim 3
        layout_row([3, 3, 16, 32], [3, 2, 1, 0]),  # kernel (HWIO), minor = output feature dim 3
        layout_row([8, 5, 5, 32], [0, 3, 2, 1]),  # conv output, minor = batch dim 0
    ])
    x[5, 93:107] = torch.tensor([0, 3, 1, 2, 0, 0, 2, 3, 0, 1, 0, 0, 0, 3], dtype=torch.float32)
    data = Data(
        x=x,
        op=torch.tensor([OP["parameter"], OP["parameter"], OP["dot"], OP["parameter"], OP["parameter"],
                         OP["convolution"]]),
        edge_index=torch.tensor([[1, 0, 3, 4], [2, 2, 5, 5]]),
    )
    out = DotConvFeatures()(data)
    assert out.x.shape == (6, 140 + len(DOT_CONV_COLUMNS))
    extra = out.x[:, 140:]
    assert extra[2].tolist() == [0, 1, 0, 3, 1, 0, 1, 1] + [0] * 6
    assert extra[5].tolist() == [0] * 8 + [1, 0, 0, 1, 0, 1]
    assert extra[[0, 1, 3, 4]].abs().sum() == 0


def test_operand_nodes():
    # node 2 consumes 1 and 0 (listed out of order), node 5 consumes 4 only, node 3 nothing
    edge_index = torch.tensor([[1, 0, 4, 0], [2, 2, 5, 1]])
    first, second = operand_nodes(edge_index, torch.tensor([5, 2, 3]), 6)
    assert first.tolist() == [4, 0, -1] and second.tolist() == [4, 1, -1]


def test_config_dimension_sizes():
    x = torch.stack([
        layout_row([2, 300], [1, 0]),  # operand 0 of the dot
        layout_row([300, 4], [0, 1]),  # operand 1
        layout_row([2, 4], [1, 0]),  # dot (slot 0)
        layout_row([8, 16, 3], [2, 1, 0]),  # reshape (slot 1); its operand is not in the graph
    ])
    x[1, 29] = 2  # a tuple has no dims (its shape columns are ignored)
    data = Data(x=x, op=torch.tensor([OP["parameter"], OP["parameter"], OP["dot"], OP["reshape"]]),
                edge_index=torch.tensor([[1, 0], [2, 2]]), config_node_index=torch.tensor([2, 3]))
    sizes = ConfigDimensionSizes()(data).config_dim_sizes
    assert sizes.shape == (2, 3, 7)
    assert sizes[0].tolist() == [[0, 2, 4, 0, 0, 0, 0], [0, 2, 300, 0, 0, 0, 0], [0] * 7]
    assert sizes[1].tolist() == [[0, 8, 16, 3, 0, 0, 0], [0] * 7, [0] * 7]
    assert ConfigDimensionSizes()(Data(x=x[:1], op=torch.tensor([0]))).get("config_dim_sizes") is None


def test_dimension_features_by_hand():
    f = dimension_features(torch.tensor([0.0, 1.0, 256.0, 200.0, 12.0]))
    assert f[0].tolist() == [0] * 8
    torch.testing.assert_close(f[1], torch.tensor([0, 0, 0, 1 / 128, 1 / 8, 1, -1, -3 / 7]))
    torch.testing.assert_close(f[2], torch.tensor([0.8, 1, 1, 1, 1, 0, 0, 0]))
    torch.testing.assert_close(f[3], torch.tensor([np.log2(200) / 10, 0, 1, 200 / 256, 1, 0, np.log2(200 / 256) / 7,
                                                   0], dtype=torch.float32))
    torch.testing.assert_close(f[4], torch.tensor([np.log2(12) / 10, 0, 0, 12 / 128, 12 / 16, 0,
                                                   np.log2(12 / 128) / 7, np.log2(12 / 16) / 7], dtype=torch.float32))


def test_log_fills_sum_to_minus_the_log_occupancy():
    """A [11, 11, 3, 64] output with 3 minor-most and 64 second: occupancy 128 / 3 * 64 / 64; the minor-most dim's
    lane column plus the second one's sublane column is -log2(occupancy) / 7."""
    f = dimension_features(torch.tensor([3.0, 64.0]))
    torch.testing.assert_close(-(f[0, 6] + f[1, 7]) * 7, torch.tensor(np.log2(128 / 3), dtype=torch.float32))


def test_infer_dot_batch_and_failure():
    assert _infer_dot([5, 2, 3], [5, 3, 4], [5, 2, 4]) == (1, 2, 1)
    assert _infer_dot([2, 3], [3, 4], [2, 4]) == (0, 1, 0)
    assert _infer_dot([2, 3], [7, 4], [2, 4]) is None


def test_log_transform_default_and_repr():
    x = torch.zeros(1, 140)
    x[0, 21], x[0, 30], x[0, 110] = float(np.e - 1), 5.0, -(float(np.e) ** 2 - 1)
    out = LogTransform()(Data(x=x))
    assert out.x[0, 21].item() == pytest.approx(1.0)
    assert out.x[0, 30].item() == 5.0
    assert out.x[0, 110].item() == pytest.approx(-2.0)
    assert repr(LogTransform()) == "LogTransform(columns=DEFAULT_LOG_COLUMNS)"
    assert repr(LogTransform([1, 2])) == "LogTransform(columns=[1, 2])"


def test_drop_constant_columns_fit_apply_state():
    train = [Data(x=torch.tensor([[1.0, 2.0, 3.0], [1.0, 5.0, 3.0]])), Data(x=torch.tensor([[1.0, 0.0, 4.0]]))]
    drop = DropConstantColumns().fit(train)
    assert drop.kept_.tolist() == [1, 2]
    assert repr(drop) == "DropConstantColumns(kept=2 of 3)"
    restored = DropConstantColumns.from_state_dict(drop.state_dict())
    assert restored.state_dict() == {"kept": [1, 2], "num_columns": 3}
    assert restored(Data(x=torch.tensor([[9.0, 8.0, 7.0]]))).x.tolist() == [[8.0, 7.0]]
    with pytest.raises(NotFittedError, match="DropConstantColumns is not fitted"):
        DropConstantColumns()(Data(x=torch.zeros(1, 3)))


def test_normalize_fit_apply_state():
    norm = Normalize().fit([Data(x=torch.tensor([[1.0, 10.0], [3.0, 10.0]]))])
    assert norm.mean_.tolist() == [2.0, 10.0]
    assert norm.std_.tolist() == [1.0, pytest.approx(1e-6)]
    restored = Normalize.from_state_dict(norm.state_dict())
    out = restored(Data(x=torch.tensor([[1.0, 10.0], [4.0, 10.0]])))
    assert out.x.tolist() == [[-1.0, 0.0], [2.0, 0.0]]
    assert repr(restored) == "Normalize(std_floor=1e-06, fitted on 2 columns)"
    with pytest.raises(NotFittedError, match="Normalize is not fitted"):
        Normalize()(Data(x=torch.zeros(1, 2)))


def tile_configs() -> Data:
    a, b, c = [1.0] * 24, [2.0] * 24, [3.0] * 24
    return Data(
        x=torch.zeros(1, 140),
        config_feat=torch.tensor([a, b, a, c, b]),
        y=torch.tensor([3.0, 5.0, 1.0, 2.0, 4.0], dtype=torch.float64),
        runtime=torch.tensor([30, 50, 10, 20, 40]),
        config_ids=torch.tensor([10, 11, 12, 13, 14]),
    )


def test_dedup_configs_min_and_mean():
    out = DedupConfigs("min")(tile_configs())
    assert out.y.tolist() == [1.0, 4.0, 2.0]
    assert out.runtime.tolist() == [10, 40, 20]
    assert out.config_ids.tolist() == [10, 11, 13]
    assert out.config_feat[:, 0].tolist() == [1.0, 2.0, 3.0]
    assert out.num_configs_before == 5
    mean = DedupConfigs("mean")(tile_configs())
    assert mean.y.tolist() == [2.0, 4.5, 2.0]
    assert mean.runtime.tolist() == [20, 45, 20]
    assert mean.runtime.dtype == torch.int64 and mean.y.dtype == torch.float64


def test_dedup_layout_configs():
    cfg = torch.full((3, 2, 18), -1.0)
    cfg[0, 0, 0] = cfg[2, 0, 0] = 1.0
    data = Data(x=torch.zeros(1, 140), config_feat=cfg, y=torch.tensor([7.0, 8.0, 6.0], dtype=torch.float64),
                runtime=torch.tensor([7, 8, 6]), config_ids=torch.tensor([0, 1, 2]))
    out = DedupConfigs()(data)
    assert out.config_ids.tolist() == [0, 1]
    assert out.y.tolist() == [6.0, 8.0]
    assert out.config_feat.shape == (2, 2, 18)


def sample_data(c: int = 10) -> Data:
    ids = torch.arange(100, 100 + c)
    return Data(x=torch.zeros(1, 140), config_ids=ids, y=ids.double() * 1.5, runtime=ids * 3,
                config_feat=ids.float()[:, None].repeat(1, 24))


def test_sample_configs_deterministic_and_consistent():
    first, second = SampleConfigs(4, seed=0), SampleConfigs(4, seed=0)
    runs = [[t(sample_data()).config_ids.tolist() for _ in range(3)] for t in (first, second)]
    assert runs[0] == runs[1]
    assert len({tuple(r) for r in runs[0]}) > 1  # a new subset per call
    out = SampleConfigs(4, seed=1)(sample_data())
    assert len(out.config_ids) == 4 and out.config_ids.tolist() == sorted(out.config_ids.tolist())
    assert out.y.equal(out.config_ids.double() * 1.5)
    assert out.runtime.equal(out.config_ids * 3)
    assert out.config_feat[:, 0].equal(out.config_ids.float())
    assert SampleConfigs(20, seed=0)(sample_data()).config_ids.tolist() == list(range(100, 110))


def test_compose_repr_and_pipeline():
    pipeline = Compose([
        PruneToConfigurable(2, "in"),
        PadLayoutMinusOne(),
        OpcodeGroupFeatures(),
        ShapeAlignmentFeatures(),
        DotConvFeatures(),
        LogTransform(),
        SampleConfigs(1, seed=3),
    ])
    assert repr(pipeline) == (
        "Compose([\n"
        "  PruneToConfigurable(hops=2, direction='in'),\n"
        "  PadLayoutMinusOne(),\n"
        "  OpcodeGroupFeatures(),\n"
        "  ShapeAlignmentFeatures(),\n"
        "  DotConvFeatures(),\n"
        "  LogTransform(columns=DEFAULT_LOG_COLUMNS),\n"
        "  SampleConfigs(k=1, seed=3)\n"
        "])"
    )
    out = pipeline(diamond())
    assert out.x.shape == (4, 140 + 7 + 18 + 14)
    assert out.y.shape == (1,) and out.config_feat.shape == (1, 2, 18)


def random_dag(num_nodes: int, num_config: int, seed: int = 0) -> Data:
    """Each node after the first consumes two earlier nodes; ``num_config`` random configurable nodes."""
    gen = torch.Generator().manual_seed(seed)
    dst = torch.arange(1, num_nodes).repeat_interleave(2)
    src = (torch.rand(dst.shape[0], generator=gen) * dst).long()
    config = torch.randperm(num_nodes, generator=gen)[:num_config].sort().values
    return Data(x=torch.zeros(num_nodes, 140), op=torch.zeros(num_nodes, dtype=torch.long),
                edge_index=torch.stack([src, dst]), config_node_index=config, num_nodes=num_nodes)


def test_prune_big_random_dag_keeps_invariants():
    data = random_dag(44_000, 500)
    config_before = data.config_node_index.clone()
    data.x[:, 0] = torch.arange(44_000, dtype=torch.float32)
    out = PruneToConfigurable(hops=1)(data)
    assert out.x[out.config_node_index, 0].long().equal(config_before)
    assert out.edge_index.max() < out.num_nodes
    assert out.num_nodes < 44_000


def write_layout(tmp_path: Path) -> Path:
    cfg = np.full((3, 2, 18), -1, dtype=np.float32)
    cfg[:, :, 0] = np.arange(3)[:, None]
    path = tmp_path / "npz" / "layout" / "xla" / "random" / "train" / "g.npz"
    return write_npz(path, {
        "edge_index": np.array([[1, 0], [2, 1], [3, 2]], dtype=np.int64),
        "node_feat": np.arange(4 * 140, dtype=np.float32).reshape(4, 140),
        "node_opcode": np.array([63, 34, 2, 75], dtype=np.uint8),
        "node_config_feat": cfg,
        "node_config_ids": np.array([1, 3], dtype=np.int64),
        "node_splits": np.array([[0, 4]], dtype=np.int64),
        "config_runtime": np.array([30, 10, 20], dtype=np.int64),
    })


def test_graph_to_data_layout(tmp_path: Path):
    data = graph_to_data(load_graph(write_layout(tmp_path)), config_rows=[2, 0])
    assert data.edge_index.tolist() == [[0, 1, 2], [1, 2, 3]]
    assert data.x.shape == (4, 140) and data.x.dtype == torch.float32
    assert data.op.tolist() == [63, 34, 2, 75] and data.op.dtype == torch.int64
    assert data.y.tolist() == [20.0, 30.0] and data.y.dtype == torch.float64
    assert data.runtime.tolist() == [20, 30]
    assert data.config_feat[:, 0, 0].tolist() == [2.0, 0.0]
    assert data.config_ids.tolist() == [2, 0]
    assert data.config_node_index.tolist() == [1, 3]
    assert (data.collection, data.stem) == (Collection.LAYOUT_XLA_RANDOM.value, "g")


def test_graph_to_data_tile(tmp_path: Path):
    path = write_npz(tmp_path / "npz" / "tile" / "xla" / "train" / "t.npz", {
        "node_feat": np.zeros((2, 140), dtype=np.float32),
        "node_opcode": np.array([63, 2], dtype=np.uint8),
        "edge_index": np.array([[1, 0]], dtype=np.int64),
        "config_feat": np.arange(2 * 24, dtype=np.float32).reshape(2, 24),
        "config_runtime": np.array([300, 100], dtype=np.int64),
        "config_runtime_normalizers": np.array([100, 50], dtype=np.int64),
    })
    data = graph_to_data(load_graph(path))
    assert data.edge_index.tolist() == [[0], [1]]
    assert data.y.tolist() == [3.0, 2.0]
    assert data.runtime.tolist() == [300, 100]
    assert data.config_feat.shape == (2, 24)
    assert data.config_ids.tolist() == [0, 1]
    assert "config_node_index" not in data
    assert data.collection == "tile:xla"


def test_graph_to_data_takes_a_slice_like_the_reader(tmp_path):
    from competition.collections import Collection, Split
    from competition.dataroot import find_data_root, list_graphs
    from competition.reader import load_graph
    from competition.synthetic.world import generate_world
    from features.data import graph_to_data

    root = find_data_root(generate_world(tmp_path, scale="tiny", seed=1, limit=1, workers=1, progress=False,
                                         collections=["layout:xla:random"]))
    g = load_graph(list_graphs(root, Collection.LAYOUT_XLA_RANDOM, Split.TRAIN)[0])
    by_slice = graph_to_data(g, config_rows=slice(2, 7))
    by_index = graph_to_data(g, config_rows=[2, 3, 4, 5, 6])
    assert by_slice.config_ids.tolist() == [2, 3, 4, 5, 6]
    assert torch.equal(by_slice.config_feat, by_index.config_feat)
    assert torch.equal(by_slice.y, by_index.y)
