"""Programs lowered from JAX (an MLP, a conv layer), parsed as text and as HloModuleProto, featurized and
written by ``fastslow featurize``; every file written passes the deep validation."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from competition import Collection, Split
from competition.dataroot import find_data_root, list_graphs, validate_root
from competition.graphfile import validate_file
from competition.hlo.features import featurize
from competition.hlo.proto import read_module_proto
from competition.hlo.text import parse_hlo_text
from competition.reader import load_graph
from fastslow.cli import main

if importlib.util.find_spec("jax") is None:  # looked for, not imported: jax runs only in processes of its own
    pytest.skip("could not import 'jax'", allow_module_level=True)

# JAX starts threads when imported, and a process that forks after that may deadlock (the pipeline's worker
# processes fork): the programs are lowered in a process of their own, and the tests read what it wrote.
LOWER = """
import pathlib, sys
import jax
import jax.numpy as jnp

def mlp(x, w1, b1, w2):
    return jnp.sum(jax.nn.relu(x @ w1 + b1) @ w2, axis=1)

def conv(x, k):
    y = jax.lax.conv_general_dilated(x, k, (2, 2), ((1, 1), (0, 1)), dimension_numbers=("NCHW", "OIHW", "NCHW"))
    return jnp.reshape(y, (y.shape[0], -1))

out = pathlib.Path(sys.argv[1])
programs = {"mlp": jax.jit(mlp).lower(jnp.zeros((8, 16)), jnp.zeros((16, 32)), jnp.zeros((32,)), jnp.zeros((32, 4))),
            "conv": jax.jit(conv).lower(jnp.zeros((2, 3, 9, 9)), jnp.zeros((4, 3, 3, 3)))}
for name, lowered in programs.items():
    (out / f"{name}.hlo").write_text(lowered.as_text(dialect="hlo"))
    (out / f"{name}.compiled.hlo").write_text(lowered.compile().as_text())
    (out / f"{name}.pb").write_bytes(lowered.compiler_ir("hlo").as_serialized_hlo_module_proto())
"""


class Lowered:
    """What the lowering process wrote for one program: its HLO text, the compiled text, the module proto."""

    def __init__(self, folder: Path, name: str) -> None:
        self.folder, self.name = folder, name

    def as_text(self, dialect: str = "hlo") -> str:
        return (self.folder / f"{self.name}.hlo").read_text()

    def compiled_text(self) -> str:
        return (self.folder / f"{self.name}.compiled.hlo").read_text()

    def module_proto(self) -> bytes:
        return (self.folder / f"{self.name}.pb").read_bytes()


@pytest.fixture(scope="module")
def lowered(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Lowered]:
    folder = tmp_path_factory.mktemp("lowered")
    subprocess.run([sys.executable, "-c", LOWER, str(folder)], check=True, timeout=300)
    return {name: Lowered(folder, name) for name in ("mlp", "conv")}


def _find(module, opcode):
    return [(gid, ins) for gid, _c, _i, ins in module.nodes() if ins.opcode == opcode]


def test_mlp_dots(lowered):
    m = parse_hlo_text(lowered["mlp"].as_text(dialect="hlo"))
    feat = featurize(m).node_feat
    (g1, _), (g2, _) = _find(m, "dot")
    assert feat[g1][21:29].tolist() == [8, 32, 0, 0, 0, 0, 40, 256]
    assert feat[g2][21:29].tolist() == [8, 4, 0, 0, 0, 0, 12, 32]
    assert feat[g1][134:140].tolist() == [1, 0, 0, 0, 0, 0]
    (gr, _), = _find(m, "reduce")
    assert feat[gr][31:37].tolist() == [1, 0, 0, 0, 0, 0] and feat[gr][21:29].tolist() == [8, 0, 0, 0, 0, 0, 8, 8]


def test_conv_layer(lowered):
    m = parse_hlo_text(lowered["conv"].as_text(dialect="hlo"))
    feat = featurize(m).node_feat
    (gc, _), = _find(m, "convolution")
    r = feat[gc]
    assert np.flatnonzero(r[2:21]).tolist() == [11] and r[21:29].tolist() == [2, 4, 5, 4, 0, 0, 15, 160]
    assert r[37:45].tolist() == [3, 3, 0, 0, 0, 0, 6, 9]
    assert r[45:53].tolist() == [2, 2, 0, 0, 0, 0, 4, 4]
    assert r[53:69].tolist() == [1, 0, 0, 0, 0, 0, 1, 0] + [1, 1, 0, 0, 0, 0, 2, 1]
    assert r[93:107].tolist() == [0, 1, 2, 3, 0, 0, 1, 0, 2, 3, 0, 0, 0, 1]
    assert r[134:140].tolist() == [3, 2, 1, 0, 0, 0]
    (gr, _), = _find(m, "reshape")
    assert feat[gr][21:29].tolist() == [2, 80, 0, 0, 0, 0, 82, 160]


def test_optimized_conv_has_its_transposed_labels(lowered):
    m = parse_hlo_text(lowered["conv"].compiled_text())
    (gc, ins), = _find(m, "convolution")
    # The CPU compiler moves the layer to NHWC: b01f_01io->b01f.
    assert featurize(m).node_feat[gc][93:107].tolist() == [0, 3, 1, 2, 0, 0, 2, 3, 0, 1, 0, 0, 0, 3]
    assert any(c.name.startswith("fused_computation") for c in m.computations)


@pytest.mark.parametrize("name", ["mlp", "conv"])
def test_proto_and_text_give_the_same_graph(lowered, name):
    lo = lowered[name]
    a = featurize(parse_hlo_text(lo.as_text(dialect="hlo")))
    b = featurize(read_module_proto(lo.module_proto(), "pb"))
    for key in ("node_feat", "node_opcode", "edge_index", "node_splits"):
        assert np.array_equal(getattr(a, key), getattr(b, key)), key


def test_featurize_command_writes_valid_files(lowered, tmp_path, capsys):
    (tmp_path / "mlp.hlo").write_text(lowered["mlp"].compiled_text())
    (tmp_path / "conv.hlo").write_text(lowered["conv"].as_text(dialect="hlo"))
    (tmp_path / "conv_pb.pb").write_bytes(lowered["conv"].module_proto())
    out = tmp_path / "root"
    argv = ["featurize", str(tmp_path / "mlp.hlo"), str(tmp_path / "conv.hlo"), str(tmp_path / "conv_pb.pb"),
            "--out", str(out), "--sample", "4", "--seed", "3"]
    assert main(argv) == 0
    assert capsys.readouterr().out.endswith("each checked as `fastslow data validate --deep` checks it\n")
    root = find_data_root(out)
    layout = list_graphs(root, Collection.LAYOUT_XLA_RANDOM, Split.TEST)
    tiles = list_graphs(root, Collection.TILE_XLA, Split.TEST)
    assert [p.stem for p in layout] == ["conv", "conv_pb", "mlp"]
    assert len(tiles) == 4  # one per fusion of the compiled MLP
    assert validate_root(root, [Collection.LAYOUT_XLA_RANDOM, Collection.TILE_XLA], [Split.TEST]) == []
    for p in layout + tiles:
        assert validate_file(p, deep=True) == []
    g = load_graph(layout[0])
    feats = g.config_features(np.arange(g.num_configs))
    assert g.num_configs == 5 and (feats[0] == -1).all() and not g.config_runtime.any()
    assert g.node_config_ids.tolist() == [gid for gid, _ in _find(parse_hlo_text(
        lowered["conv"].as_text(dialect="hlo")), "convolution")] + [3]
    t = load_graph(tiles[0])
    assert (t.config_runtime_normalizers == 1).all() and not t.config_runtime.any()
    # Same seed, same bytes.
    first = {p.name: p.read_bytes() for p in layout + tiles}
    assert main([*argv, "--force"]) == 0
    assert {p.name: p.read_bytes() for p in layout + tiles} == first
