"""Tuning records written from hand-built modules, read back, and featurized into train files."""

from __future__ import annotations

import pytest

from competition import Collection, Split
from competition.dataroot import find_data_root, list_graphs, validate_root
from competition.graphfile import validate_file
from competition.hlo.featurize import fusion_kernels, sample_layouts, sample_tiles, seeded_rng
from competition.hlo.proto import write_module_proto
from competition.hlo.records import (
    ModuleRecords,
    Run,
    TileConfig,
    read_layout_records,
    read_tile_records,
    write_layout_records,
    write_tile_records,
)
from competition.hlo.text import parse_hlo_text
from competition.reader import load_graph
from fastslow.cli import main

# Configurable nodes of the hand module: conv 2, reshape 10, dot 11 (conftest).
LAYOUTS = [
    (((1, 0), (0, 1), (3, 2)), ((1, 0), (3, 2, 1, 0)), ((0, 1), (1, 0), (0, 1))),
    ((), ((0, 1), (0, 1, 2, 3)), ()),
]


def _layout_records(module, order=(2, 10, 11)):
    """The runs of LAYOUTS, each node's layout in the record's column of that node (``order``)."""
    at = [(2, 10, 11).index(node) for node in order]
    layouts = [tuple(layout[k] for k in at) for layout in LAYOUTS]
    runs = [Run(1200, layouts[0], is_default=True), Run(900, layouts[1]), Run(None, layouts[1]),
            Run(700, layouts[1], error=True)]
    return ModuleRecords(module, runs, order, fingerprint=2**64 - 5)


def test_layout_records_round_trip(hand_text):
    rec = _layout_records(parse_hlo_text(hand_text))
    assert read_layout_records(write_layout_records(rec)) == rec


def test_tile_records_round_trip(hand_text):
    (_, kernel), = fusion_kernels(parse_hlo_text(hand_text))
    recs = [ModuleRecords(kernel, [Run(50, tile=TileConfig((3, 3), (2, 4, 6, 6), (), (1, 1))),
                                   Run(0, tile=TileConfig((), (1, 2)), is_default=True)], fingerprint=7)]
    assert read_tile_records(write_tile_records(recs)) == recs


def test_kernel_of_a_fusion(hand_text):
    (name, kernel), = fusion_kernels(parse_hlo_text(hand_text))
    assert name == "f" and [c.name for c in kernel.computations] == ["fused", "f.entry"]
    assert [i.opcode for i in kernel.entry.instructions] == ["parameter", "parameter", "fusion"]
    assert kernel.entry.instructions[2].operands == (0, 1) and kernel.entry.instructions[2].called == ("fused",)


def test_sampled_layouts(hand_text):
    ids, feat = sample_layouts(parse_hlo_text(hand_text), 6, seeded_rng(0, "hand"))
    assert ids.tolist() == [2, 10, 11] and feat.shape == (7, 3, 18)
    assert (feat[0] == -1).all()
    assert len({f.tobytes() for f in feat}) == 7
    for row in feat[1:]:
        conv, reshape, dot = row
        assert sorted(reshape[0:2]) == [0, 1] and sorted(reshape[6:10]) == [0, 1, 2, 3]
        assert (reshape[10:] == -1).all() and (conv[2:6] == -1).all() and (dot[14:] == -1).all()
        assert sorted(conv[12:14]) != [-1, -1] and len(set(dot[0:2])) == 2


TRANSPOSED = """\
HloModule t

%fused (p0: f32[300,20]) -> f32[300,20] {
  %p0 = f32[300,20]{0,1} parameter(0)
  ROOT %e = f32[300,20]{0,1} exponential(%p0)
}

ENTRY %main (x: f32[300,20]) -> f32[300,20] {
  %x = f32[300,20]{0,1} parameter(0)
  ROOT %f = f32[300,20]{0,1} fusion(%x), kind=kLoop, calls=%fused
}
"""


def test_sampled_tiles_count_hardware_tiles(hand_text):
    """Without records a kernel's output bounds count hardware tiles of its output's physical dims: config 0 is
    one tile over the whole output (the units themselves), the others distinct bounds within them."""
    (_, kernel), = fusion_kernels(parse_hlo_text(hand_text))
    # f32[2,4,6,6]{3,2,1,0}: units [2, 4, ceil(6/8), ceil(6/128)] = [2, 4, 1, 1]: 2 x 3 sizes, 6 configs.
    feat = sample_tiles(kernel, 10, seeded_rng(0, "hand"))
    assert feat.shape == (6, 24) and len({f.tobytes() for f in feat}) == 6
    assert feat[0].tolist() == [0] * 8 + [2, 4, 1, 1, 0, 0, 8, 8] + [0] * 8
    assert sorted(tuple(f[8:12]) for f in feat) == [(a, b, 1, 1) for a in (1, 2) for b in (1, 2, 4)]
    assert (feat[:, :8] == 0).all() and (feat[:, 16:] == 0).all()
    assert (feat[:, 14] == feat[:, 8:14].sum(axis=1)).all() and (feat[:, 15] == feat[:, 8:12].prod(axis=1)).all()
    # Fewer asked for: 1 + n, still within the units.
    few = sample_tiles(kernel, 3, seeded_rng(0, "hand"))
    assert few.shape == (4, 24) and few[0].tolist() == feat[0].tolist()
    assert ((few[:, 8:12] >= 1) & (few[:, 8:12] <= [2, 4, 1, 1])).all()
    # f32[300,20]{0,1}: physical [20, 300] (the 300 dim most minor): units [ceil(20/8), ceil(300/128)] = [3, 3],
    # where logical order would have given [38, 1].
    (_, kernel), = fusion_kernels(parse_hlo_text(TRANSPOSED))
    feat = sample_tiles(kernel, 20, seeded_rng(0, "t"))
    assert feat[0].tolist() == [0] * 8 + [3, 3, 0, 0, 0, 0, 6, 9] + [0] * 8
    assert sorted(tuple(f[8:10]) for f in feat) == [(a, b) for a in (1, 2, 3) for b in (1, 2, 3)]
    assert (feat[:, 10:14] == 0).all()


def test_records_featurized_into_train(hand_text, tmp_path, capsys):
    module = parse_hlo_text(hand_text)
    (tmp_path / "hand.pb").write_bytes(write_layout_records(_layout_records(module, order=(11, 2, 10))))
    (_, kernel), = fusion_kernels(module)
    runs = [Run(80, tile=TileConfig(output_bounds=(2, 4, 6, 6)), is_default=True),
            Run(60, tile=TileConfig((3, 3), (1, 4, 6, 6))), Run(1, tile=TileConfig(output_bounds=(1, 1))),
            Run(40, tile=TileConfig(output_bounds=(2, 2)), error=True)]
    (tmp_path / "tiles.pb").write_bytes(write_tile_records([ModuleRecords(kernel, runs, fingerprint=2**64 - 0x1b)]))
    out = tmp_path / "root"
    assert main(["featurize", "--layout-records", str(tmp_path / "hand.pb"), "--tile-records",
                 str(tmp_path / "tiles.pb"), "--out", str(out), "--collection", "layout:nlp:default"]) == 0
    capsys.readouterr()
    root = find_data_root(out)
    (lp,) = list_graphs(root, Collection.LAYOUT_NLP_DEFAULT, Split.TRAIN)
    (tp,) = list_graphs(root, Collection.TILE_XLA, Split.TRAIN)
    assert lp.stem == "hand" and tp.stem == "hand.f_-1b"
    assert validate_root(root, [Collection.LAYOUT_NLP_DEFAULT, Collection.TILE_XLA], [Split.TRAIN]) == []
    assert validate_file(lp, deep=True) == [] and validate_file(tp, deep=True) == []
    g = load_graph(lp)
    assert g.node_config_ids.tolist() == [2, 10, 11]  # sorted; the record listed 11, 2, 10
    assert g.config_runtime.tolist() == [1200, 900]   # the run without a profile and the failed one are dropped
    f = g.config_features([0, 1])
    # Record column k belonged to node (11, 2, 10)[k]: after sorting, conv (2) holds column 1's layouts, the
    # reshape (10) column 2's and the dot (11) column 0's.
    assert f[0, 0].tolist() == [1, 0, -1, -1, -1, -1, 0, 1, -1, -1, -1, -1, 3, 2, -1, -1, -1, -1]
    assert f[0, 1].tolist() == [1, 0, -1, -1, -1, -1, 3, 2, 1, 0, -1, -1] + [-1] * 6
    assert f[0, 2].tolist() == [0, 1, -1, -1, -1, -1, 1, 0, -1, -1, -1, -1, 0, 1, -1, -1, -1, -1]
    assert f[1, 0].tolist() == [-1] * 18 and f[1, 2].tolist() == [-1] * 18
    assert f[1, 1].tolist()[:10] == [0, 1, -1, -1, -1, -1, 0, 1, 2, 3]
    t = load_graph(tp)
    assert t.config_runtime.tolist() == [80, 60] and t.config_runtime_normalizers.tolist() == [80, 80]
    assert t.config_feat[0].tolist() == [0] * 8 + [2, 4, 6, 6, 0, 0, 18, 288] + [0] * 8
    assert t.config_feat[1].tolist() == [3, 3, 0, 0, 0, 0, 6, 9, 1, 4, 6, 6, 0, 0, 17, 144] + [0] * 8


def test_module_proto_is_read_as_a_program(hand_text, tmp_path, capsys):
    (tmp_path / "hand.pb").write_bytes(write_module_proto(parse_hlo_text(hand_text)))
    assert main(["featurize", str(tmp_path / "hand.pb"), "--out", str(tmp_path / "o"), "--what", "layout"]) == 0
    capsys.readouterr()
    (p,) = list_graphs(find_data_root(tmp_path / "o"), Collection.LAYOUT_XLA_RANDOM, Split.TEST)
    assert load_graph(p).node_config_ids.tolist() == [2, 10, 11]


@pytest.mark.parametrize("make, message", [
    (lambda m: b"hello, world\n", "neither HLO text (no first line 'HloModule <name>'; it starts 'hello, world')"),
    (lambda m: write_module_proto(m)[:-9], "nor a serialized HloModuleProto (field 3 declares"),
    (lambda m: write_module_proto(m).replace(b"\x12\x03add", b"\x12\x03abc"), "unknown opcode 'abc'"),
    (lambda m: b"HloModule bad\n\nENTRY %e {\n  %p = f32[2,?] parameter(0)\n}\n", "line 4: cannot parse dimension"),
])
def test_bad_input_is_one_line_and_exit_2(hand_text, tmp_path, capsys, make, message):
    bad = tmp_path / "bad.in"
    bad.write_bytes(make(parse_hlo_text(hand_text)))
    assert main(["featurize", str(bad), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith(f"error: {bad}: ") and message in err
    assert not (tmp_path / "o" / "npz").exists()


def test_programs_refuse_train_and_records_need_a_default(hand_text, tmp_path, capsys):
    (tmp_path / "h.hlo").write_text(hand_text)
    assert main(["featurize", str(tmp_path / "h.hlo"), "--out", str(tmp_path / "o"), "--split", "train"]) == 2
    assert "has no measured runtimes" in capsys.readouterr().err
    (_, kernel), = fusion_kernels(parse_hlo_text(hand_text))
    (tmp_path / "t.pb").write_bytes(write_tile_records([ModuleRecords(kernel, [Run(5, tile=TileConfig())])]))
    assert main(["featurize", "--tile-records", str(tmp_path / "t.pb"), "--out", str(tmp_path / "o")]) == 2
    assert "no default run" in capsys.readouterr().err
    assert main(["featurize", str(tmp_path / "h.hlo"), "--out", str(tmp_path / "o")]) == 0
    assert main(["featurize", str(tmp_path / "h.hlo"), "--out", str(tmp_path / "o")]) == 2
    assert "exists already: --force replaces it" in capsys.readouterr().err
