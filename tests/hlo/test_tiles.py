"""The units of tile configs (competition/hlo/tiles.py), against the real tuning records' bounds."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from competition.hlo.ir import Shape
from competition.hlo.tiles import granules, physical_dims, tile_sizes, tile_units

ROOT = Path(__file__).resolve().parents[2]
TILE_RECORDS = "op_tuning_data_10_kernels.pb"


def test_granules():
    assert granules(0) == [] and granules(1) == [1024] and granules(2) == [8, 128]
    assert granules(4) == [1, 1, 8, 128] and granules(6) == [1, 1, 1, 1, 8, 128]


def test_the_real_example_default_layout():
    # copy.24's f32 [32,5,5,256] output is tiled [8,5,1,2] (8 x 5 x 5 x 256 elements) in the real records.
    shape = Shape("f32", (32, 5, 5, 256))
    assert physical_dims(shape) == (32, 5, 5, 256)
    units = tile_units(physical_dims(shape))
    assert units == [32, 5, 1, 2]  # 5 rows are one (partial) sublane tile, 256 lanes two lane tiles
    assert all(1 <= b <= u for b, u in zip((8, 5, 1, 2), units, strict=True))
    assert all(1 <= b <= u for b, u in zip((16, 5, 1, 2), units, strict=True))


def test_a_non_default_layout_counts_physical_dims():
    # fusion.261's f32[4096,1000]{0,1} output: the 4096 dim is the most minor. Its largest real bounds are 125, 32.
    shape = Shape("f32", (4096, 1000), minor_to_major=(0, 1))
    assert physical_dims(shape) == (1000, 4096)
    assert tile_units(physical_dims(shape)) == [125, 32]  # 1000 / 8, 4096 / 128
    assert tile_units(physical_dims(Shape("f32", (4096, 1000)))) == [512, 8]  # the default layout: 4096/8, ceil(1000/128)
    assert physical_dims(Shape("f32", (2, 3, 4), minor_to_major=(1, 2, 0))) == (2, 4, 3)


def test_rank_one_counts_tiles_of_1024():
    # fusion.250's f32[4096] output: default bound 4, its only other config too.
    assert tile_units(physical_dims(Shape("f32", (4096,)))) == [4]
    assert tile_units([1000]) == [1] and tile_units([1025]) == [2] and tile_units([2048]) == [2]


def test_units_of_one():
    # A dim smaller than its granule is one unit (a partial tile); so is an empty dim; a scalar has no dims.
    assert tile_units([1, 1]) == [1, 1] and tile_units([8, 128]) == [1, 1] and tile_units([3, 5]) == [1, 1]
    assert tile_units([0]) == [1] and tile_units([]) == [] and physical_dims(Shape("f32", ())) == ()
    assert tile_units([9, 129]) == [2, 2] and tile_units([7, 1, 1]) == [7, 1, 1]
    assert tile_sizes(1) == [1] and tile_sizes(1, (1.0, 1.5)) == [1] and tile_sizes(0) == [1]


def test_tile_sizes():
    # Divisors of 12 and the powers of two below it, and the whole dim.
    assert tile_sizes(12) == [1, 2, 3, 4, 6, 8, 12]
    assert tile_sizes(2) == [1, 2] and tile_sizes(7) == [1, 2, 4, 7] and tile_sizes(64) == [1, 2, 4, 8, 16, 32, 64]
    # With steps: round(step x 2**k) below the dim for each k from 1 while 2**k < units. For 40, steps 1 and 1.5:
    # k = 1: 1, 2; 2: 2, 3; 4: 4, 6; 8: 8, 12; 16: 16, 24; 32: 32 (48 is not below 40); besides the divisors
    # 1, 2, 4, 5, 8, 10, 20, 40 and the powers 1 ... 32.
    assert tile_sizes(40) == [1, 2, 4, 5, 8, 10, 16, 20, 32, 40]
    assert tile_sizes(40, (1.0, 1.5)) == [1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 20, 24, 32, 40]
    # Python rounds halves to even: 1.25 x 2 = 2.5 -> 2; 1.25 x 4 = 5, x 8 = 10.
    assert tile_sizes(12, (1.25,)) == [1, 2, 3, 4, 5, 6, 8, 10, 12]
    # The wide search's eight steps per octave fill a dim of 12 units completely.
    from competition.synthetic.tile_physics import WIDE_STEPS

    assert tile_sizes(12, WIDE_STEPS) == list(range(1, 13))


def _records_file() -> Path:
    for folder in (ROOT / "competition" / "data" / "real_records", Path("/work/shared/spec/real-records")):
        if (folder / TILE_RECORDS).is_file():
            return folder / TILE_RECORDS
    pytest.skip(f"the real tile records ({TILE_RECORDS}) are neither in competition/data/real_records/ nor in "
                "/work/shared/spec/real-records/")


TILED = {
    # kernel: (the array its output bounds tile, the largest bound per dim reached in its runs)
    "fusion.191": (Shape("f32", (32, 12, 12, 384), minor_to_major=(3, 0, 2, 1)), [12, 12, 4, 3]),  # 2nd output
    "fusion.261": (Shape("f32", (4096, 1000), minor_to_major=(0, 1)), [125, 32]),
    "fusion.205": (Shape("f32", (32, 1000)), [4, 8]),  # 2nd output
    "fusion.181": (Shape("f32", (32, 4096)), [2, 32]),
    "fusion.206": (Shape("f32", (32, 1000)), [4, 8]),  # the reduce root's operand
    "fusion.207": (Shape("f32", (32, 1000)), [2, 8]),  # the reduce roots' operand
    "fusion.250": (Shape("f32", (4096,)), [4]),
}
"""The real fusions' tiled arrays, read from their fused computations by hand: a multi-output fusion tiles its
largest output; a reduce tiles its operand (element types do not change units)."""


def test_real_records_count_hardware_tiles():
    """Every real fusion's output bounds lie within the units of its tiled array (most reach them), and a
    convolution's / dot's kernel bounds within its kernel's, the output-feature dim tied to the output's minor."""
    from competition.hlo.records import read_tile_records

    recs = {r.module.name: r for r in read_tile_records(_records_file().read_bytes())}
    assert set(TILED) <= set(recs)
    for name, (shape, largest) in TILED.items():
        units = tile_units(physical_dims(shape))
        bounds = [r.tile.output_bounds for r in recs[name].runs if r.tile is not None]
        assert bounds and all(len(b) == len(units) and all(1 <= x <= u for x, u in zip(b, units, strict=True))
                              for b in bounds), name
        assert [max(b[i] for b in bounds) for i in range(len(units))] == largest, name
    # fusion.191: a convolution by an f32 [3,3,192,384] kernel, default layout: units [3,3,24,3]; the output-feature
    # (minor, 128 a unit) bound equals the output's minor bound in every run.
    runs = [r.tile for r in recs["fusion.191"].runs if r.tile is not None]
    assert [max(t.kernel_bounds[i] for t in runs) for i in range(4)] == tile_units((3, 3, 192, 384)) == [3, 3, 24, 3]
    assert all(t.kernel_bounds[3] == t.output_bounds[3] for t in runs)
    # fusion.205: a convolution (a matmul) by [4096,1000]{0,1}: physical [1000,4096], units [125,32]; the output
    # feature (1000) is its major dim, 8 a unit: its bound covers the output tile's 128 x b columns,
    # ceil(min(128 b, 1000) / 8).
    runs = [r.tile for r in recs["fusion.205"].runs if r.tile is not None]
    assert [max(t.kernel_bounds[i] for t in runs) for i in range(2)] == [125, 32]
    assert all(t.kernel_bounds[0] == math.ceil(min(128 * t.output_bounds[1], 1000) / 8) for t in runs)


def test_featurized_real_records_keep_the_units(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    """``fastslow featurize --tile-records`` writes the records' bounds as they are: within the units of each
    fusion's tiled array, reaching the same largest bounds; and in the real kernels a larger tile is faster (the
    Spearman correlation of runtime with the output-bounds product is negative in each kernel with 5 or more
    distinct configs: -1.00 to -0.63, shared/spec/real-records/README.md)."""
    import numpy as np
    from scipy.stats import spearmanr

    from competition import Collection, Split
    from competition.dataroot import find_data_root, list_graphs
    from competition.reader import load_graph
    from fastslow.cli import main

    records = _records_file()
    assert main(["featurize", "--tile-records", str(records), "--out", str(tmp_path / "o")]) == 0
    capsys.readouterr()
    graphs = {p.stem.rsplit("_", 1)[0]: load_graph(p)
              for p in list_graphs(find_data_root(tmp_path / "o"), Collection.TILE_XLA, Split.TRAIN)}
    assert set(TILED) <= set(graphs) and len(graphs) == 10
    rhos = {}
    for name, (shape, largest) in TILED.items():
        feat = graphs[name].config_feat
        units = tile_units(physical_dims(shape))
        out = feat[:, 8: 8 + len(units)]
        assert (feat[:, 8 + len(units): 14] == 0).all() and (feat[:, 16:] == 0).all(), name
        assert ((out >= 1) & (out <= units)).all() and out.max(axis=0).tolist() == largest, name
        assert (feat[:, 15] == out.prod(axis=1)).all(), name
        if len(np.unique(feat, axis=0)) >= 5:
            rhos[name] = spearmanr(graphs[name].config_runtime, feat[:, 15]).statistic
    assert set(rhos) == {"fusion.191", "fusion.261", "fusion.205", "fusion.181"}
    assert all(-1.0 <= r < -0.6 for r in rhos.values()), rhos
