"""World scales: the full scale's graph and config counts against the real figures, without generating it.

Real figures: shared/spec/real-sizes.md (and the calibration table of docs/synthetic.md).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from competition.collections import Collection, Split
from competition.graphfile import validate_file
from competition.hlo.ir import Computation, Module, Shape
from competition.reader import load_graph
from competition.synthetic.physics import ONCHIP_BYTES
from competition.synthetic.scales import SCALES, CountDist, WorldConfig
from competition.synthetic.tile_physics import SAMPLE_STEPS, TileProblem
from competition.synthetic.world import generate_world, plan_jobs
from competition.synthetic.world_programs import graph_rng, loguniform
from competition.synthetic.writers import _fit_kernel, write_tile_graph

FULL = SCALES["full"]
DRAWS = 20_000


def _elementwise(dims: tuple[int, ...], dtype: str = "f32") -> Module:
    c = Computation("fused")
    x = c.add("parameter", Shape(dtype, dims), parameter_number=0)
    y = c.add("parameter", Shape(dtype, dims), parameter_number=1)
    c.add("add", Shape(dtype, dims), (x, y))
    return Module("ew", [c])


def _world_draws(collection: str, split: str, n: int, seed: int = 0) -> list[int]:
    """The config counts a full world draws (before the config-cell cap), by the world's own keys."""
    source = Collection(collection).source
    return [FULL.layout_configs[(source, split)].draw(graph_rng(seed, "layout-configs", collection, split, i))
            for i in range(n)]


# -- the distribution description -------------------------------------------------------------------------------


def test_two_knots_are_the_historical_loguniform_draw():
    """tiny/demo/bench keep their bytes: a two-knot CountDist spends and maps random numbers as before."""
    for lo, hi in ((40, 120), (300, 2000), (8, 400), (8, 1000), (1000, 100_000)):
        a, b = np.random.default_rng(lo), np.random.default_rng(lo)
        dist = CountDist.loguniform(lo, hi)
        assert [dist.draw(a) for _ in range(2000)] == [loguniform(b, lo, hi) for _ in range(2000)]
        assert a.random() == b.random()
    for name in ("tiny", "demo", "bench"):
        sc = SCALES[name]
        assert len({*sc.layout_configs.values()}) == 1 and sc.tile_wide is False
        assert all(len(d.knots) == 2 and d.tiny == 0 for d in (*sc.layout_configs.values(), sc.tile_configs))
        assert sc.layout_test_extra == 0.1 and sc.tile_kernels_per_program == 8


def test_count_dist_rejects_bad_knots():
    with pytest.raises(ValueError):
        CountDist(((0.0, 10), (0.5, 5), (1.0, 20)))
    with pytest.raises(ValueError):
        CountDist(((0.1, 10), (1.0, 20)))
    with pytest.raises(ValueError):
        CountDist(((0.0, 10), (1.0, 20)), tiny=1.5)


def test_quantile_curve_passes_through_its_knots():
    dist = CountDist(((0.0, 100), (0.5, 1000), (1.0, 1000)))
    assert dist.quantile(0.0) == 100 and dist.quantile(0.5) == 1000 and dist.quantile(0.999) == 1000
    assert dist.quantile(0.25) == 316  # log-linear: the geometric mean
    assert (dist.low, dist.high) == (100, 1000)


# -- full scale: counts ---------------------------------------------------------------------------------------


def test_full_graph_counts_are_the_real_ones():
    assert FULL.tile_counts == (5709, 676, 844)
    assert FULL.layout_counts == {
        "layout:xla:default": (61, 7, 8),
        "layout:xla:random": (69, 7, 8),
        "layout:nlp:default": (198, 20, 17),
        "layout:nlp:random": (207, 20, 17),
    }
    cfg = WorldConfig("full", 0, tuple(c.value for c in Collection), None)
    per: dict[tuple[str, str], int] = {}
    for job in plan_jobs(cfg):
        per[(job.collection, job.split)] = per.get((job.collection, job.split), 0) + job.count
    assert [per[("tile:xla", s.value)] for s in Split] == [5709, 676, 844]
    assert per[("layout:nlp:random", "train")] == 207
    limited = WorldConfig("full", 0, ("tile:xla",), 10)
    assert [j.count for j in plan_jobs(limited) if j.split == "valid"] == [4, 4, 2]


def test_full_nlp_valid_configs():
    # Real nlp valid (default search), sorted: 11,163; 25,937 ... 94,599 (11 graphs); eight at 99,840-100,032.
    draws = FULL.layout_configs[("nlp", "valid")].sample(np.random.default_rng(0), DRAWS)
    assert draws.min() >= 10_500 and draws.max() <= 100_040
    at_cap = (draws >= 99_800).mean()
    assert 0.37 < at_cap < 0.43
    assert (draws < 25_000).mean() < 0.07
    body = draws[draws < 99_800]
    assert 40_000 < np.median(body) < 60_000  # real body median about 52,000
    for collection in ("layout:nlp:default", "layout:nlp:random"):
        world = np.asarray(_world_draws(collection, "valid", 20))
        assert world.min() >= 10_500 and world.max() <= 100_040
        assert (world >= 99_800).sum() >= 5
        # --limit takes the first graphs of a split: they must already hold graphs at the ~100k budget.
        assert (world[:12] >= 90_000).sum() >= 2, collection


def test_full_xla_valid_configs():
    # Real xla valid (random search): 481, 4,688, 5,288, 5,704, 7,248, 17,360, 19,040.
    draws = FULL.layout_configs[("xla", "valid")].sample(np.random.default_rng(1), DRAWS)
    assert draws.min() >= 450 and draws.max() <= 20_000
    assert 5_000 < np.median(draws) < 7_500
    assert 0.15 < (draws > 15_000).mean() < 0.3
    assert 0.03 < (draws < 1_500).mean() < 0.12
    assert 50_000 < 7 * draws.mean() < 70_000  # real: 60,000-66,000 configs per xla valid split


@pytest.mark.parametrize(("source", "share"), [("xla", 0.03), ("nlp", 0.02)])
def test_full_train_has_a_few_tiny_graphs(source: str, share: float):
    train = FULL.layout_configs[(source, "train")].sample(np.random.default_rng(2), DRAWS)
    valid = FULL.layout_configs[(source, "valid")]
    tiny = train <= 24
    assert abs(tiny.mean() - share) < 0.006 and train[tiny].min() >= 16
    assert valid.tiny == 0 and valid.knots == FULL.layout_configs[(source, "train")].knots


def test_full_config_cells_leave_realistic_configurable_nodes_at_100k_configs():
    # A real nlp file: node_config_feat (100040, 121, 18). A 100k-config graph may have several hundred.
    assert FULL.max_config_cells // 100_040 >= 500


def test_full_test_split_has_1000_configs_and_rarely_1001():
    assert FULL.layout_test_configs == 1000
    counts = []
    for c in Collection:
        if c.is_tile:
            continue
        for i in range(FULL.layout_counts[c.value][2]):
            rng = graph_rng(0, "layout-configs", c.value, "test", i)
            counts.append(FULL.layout_test_configs + int(rng.random() < FULL.layout_test_extra))
    assert len(counts) == 50 and set(counts) <= {1000, 1001}
    assert 1 <= counts.count(1001) <= 4  # real: two of the 50 layout test files


def test_full_tile_configs():
    # Real test split: 2 to about 9,900 configs; 55 of 844 kernels above 7,000, 16 with only 2-4.
    draws = FULL.tile_configs.sample(np.random.default_rng(3), DRAWS)
    assert draws.min() == 2 and draws.max() <= 9_900
    few = (draws >= 2) & (draws <= 4)
    assert 0.014 < few.mean() < 0.026
    assert 0.05 < (draws > 7_000).mean() < 0.08


# -- tile kernels: wide search and fitting ----------------------------------------------------------------------


def test_wide_tile_search_holds_thousands_of_configs():
    """The full world wants up to ~9,900 configs of a kernel: the narrow grid (divisors and powers of two per dim,
    including the kernel's chunked dims) of this conv holds a few thousand, the wide one far more, and the wide
    search really returns 9,900 distinct configs, all of them ones a search may measure."""
    from tests.synthetic.test_tile_physics import _by_hand, _conv

    p = TileProblem.from_kernel(_conv(8, 56, 256, 256))
    assert p.out_units == [8, 56, 7, 2] and p.kernel_units == [3, 3, 32, 2] and p.kernel_free == [0, 1, 2]
    # Narrow grid 4 x 10 x 4 x 2 (output) x 3 x 3 x 6 (kernel chunks) = 17,280 combos: counted exactly, and a search
    # asking for more returns all of them.
    narrow = p.config_space()
    assert 1000 < narrow < 9_900
    assert len(p.sample_configs(20_000, np.random.default_rng(0))) == narrow
    # The wide grid (725,760 combos) is estimated from a sample of it (about three quarters fit).
    assert 450_000 < p.config_space(wide=True) < 650_000
    f = p.sample_configs(9_900, np.random.default_rng(0), wide=True)
    assert f.shape == (9_900, 24) and len(np.unique(f, axis=0)) == 9_900
    assert np.any(np.all(f == p.default_config(), axis=1))
    assert np.isfinite(p.runtime_ns(f)).all()
    ws, steps = _by_hand(p, f)
    d_ws, d_steps = _by_hand(p, p.default_config())
    assert ws.max() <= max(ONCHIP_BYTES, d_ws[0]) and steps.max() <= SAMPLE_STEPS * d_steps[0]
    # The narrow search is unchanged by the wide grid's existence.
    n1 = p.sample_configs(50, np.random.default_rng(5))
    n2 = p.sample_configs(50, np.random.default_rng(5), wide=False)
    np.testing.assert_array_equal(n1, n2)


def test_fit_kernel_prefers_a_kernel_with_room_not_used_yet():
    spaces = [2, 50, 10_000, 8_000]
    order = [0, 1, 2, 3]
    assert _fit_kernel(order, 0, spaces, 3, set()) == 1  # kernel 0 has only two configs
    assert _fit_kernel(order, 0, spaces, 2, set()) == 0
    assert _fit_kernel(order, 0, spaces, 9_000, set()) == 2
    assert _fit_kernel(order, 0, spaces, 7_000, {2}) == 3
    assert _fit_kernel(order, 0, spaces, 9_000, {2}) == 2  # reused rather than truncated
    assert _fit_kernel(order, 1, spaces, 20_000, set()) == 2  # nothing fits: the largest


@pytest.mark.parametrize("split", ["train", "test"])
def test_two_config_tile_kernel_round_trips(tmp_path: Path, split: str):
    # Rank 1: units of 1024 elements, so 2048 elements are 2 units: bounds 1 or 2 (the wide steps between 1 and 2
    # round to 1 or 2 too). [128] would be one unit, one config.
    kernel = _elementwise((2048,))
    p = TileProblem.from_kernel(kernel)
    assert p.out_units == [2] and TileProblem.from_kernel(_elementwise((128,))).config_space(wide=True) == 1
    assert p.config_space() == p.config_space(wide=True) == 2
    path = tmp_path / "npz" / "tile" / "xla" / split / "k.npz"
    secret = tmp_path / "secret" / "tile" / "xla" / split / "k.npz"
    written = write_tile_graph(path, secret, kernel, p, 5, np.random.default_rng(0), hidden=split == "test",
                               wide=True)
    assert written == 2
    assert validate_file(path, Collection.TILE_XLA, deep=True) == []
    g = load_graph(path)
    assert g.config_feat.shape == (2, 24) and g.config_runtime.shape == (2,)
    assert len(np.unique(g.config_feat, axis=0)) == 2 and sorted(g.config_feat[:, 8].tolist()) == [1, 2]
    if split == "test":
        assert g.is_test and (g.config_runtime == 0).all()
    else:
        assert (g.config_runtime > 0).all() and (g.config_runtime_normalizers > 0).all()


def test_full_tile_part_generates_and_validates(tmp_path: Path):
    """A few full-scale tile files (the --limit path): real format, counts from the full distribution, and the
    same bytes whatever the limit (the last program of a split may be cut short)."""
    assert FULL.tile_kernels_per_program == 4
    a = generate_world(tmp_path / "a", scale="full", collections=["tile:xla"], limit=2, workers=1, progress=False)
    b = generate_world(tmp_path / "b", scale="full", collections=["tile:xla"], limit=4, workers=1, progress=False)
    files = sorted((a / "npz_all").rglob("*.npz"))
    assert len(files) == 6 and len(list((b / "npz_all").rglob("*.npz"))) == 12
    for f in files:
        assert validate_file(f, Collection.TILE_XLA) == []
        assert 2 <= load_graph(f).config_feat.shape[0] <= FULL.tile_configs.high
        assert f.read_bytes() == (b / f.relative_to(a)).read_bytes()


def test_bench_xla_collections_hold_the_real_train_counts():
    """The bench world's xla collections train on as many graphs as the real data's (the full scale's); with fewer the
    defaults scored clearly lower on the same test graphs (lab/journal.md)."""
    for value in ("layout:xla:default", "layout:xla:random"):
        assert SCALES["bench"].layout_counts[value][0] == FULL.layout_counts[value][0]
    assert SCALES["bench"].layout_counts["layout:nlp:default"][0] < FULL.layout_counts["layout:nlp:default"][0]
