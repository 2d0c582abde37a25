"""How searches record their measurements: duplicated configs (baseline repeats, stalled searches, saturated
spaces) and the measurement noise of layout and tile runs, against the real figures of shared/spec/real-sizes.md."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from competition.collections import Collection, Split
from competition.dataroot import find_data_root, list_graphs
from competition.graphfile import validate_file
from competition.reader import load_graph
from competition.stats import collection_stats, repeat_differences, row_hashes
from competition.synthetic import physics
from competition.synthetic.layout_physics import LayoutProblem
from competition.synthetic.scales import SCALES, WorldConfig
from competition.synthetic.searches import (
    BASELINE_MAX_SHARE,
    BASELINE_REPEATS,
    DEFAULT_NARROW_SHARE,
    STALL_DISTINCT,
    narrow_search,
    search_rows,
)
from competition.synthetic.tile_physics import TileProblem
from competition.synthetic.world import generate_world
from competition.synthetic.world_programs import graph_rng
from competition.synthetic.writers import GraphJob, _write_tile_program, write_tile_graph
from tests.synthetic.test_layout_physics import _hand_module, random_module
from tests.synthetic.test_tile_physics import _conv


def _distinct(rows: np.ndarray) -> int:
    return len(np.unique(rows, axis=0))


@pytest.fixture(scope="module")
def problem() -> LayoutProblem:
    return LayoutProblem.from_module(random_module(np.random.default_rng(5), 60))


# -- layout searches --------------------------------------------------------------------------------------------


def test_row_keys_tell_rows_apart() -> None:
    rows = np.asarray([[0, 1, 2], [2, 1, 0], [0, 1, 2], [0, 0, 0], [1, 0, 0]], dtype=np.int32)
    k = row_hashes(rows, block=2)
    assert k[0] == k[2] and len(set(k.tolist())) == 4


@pytest.mark.parametrize("search", ["default", "random"])
def test_sample_distinct_never_repeats(problem: LayoutProblem, search: str) -> None:
    rows = problem.sample_distinct(search, 3000, np.random.default_rng(0))
    assert rows.shape == (3000, problem.num_choices.size) and _distinct(rows) == 3000
    assert not np.any(np.all(rows == 0, axis=1)), "the default config is the baseline's, not the search's"


@pytest.mark.parametrize("search", ["default", "random"])
def test_a_typical_search_repeats_only_its_baseline(problem: LayoutProblem, search: str) -> None:
    """Real: most graphs hold one group of about 40 identical configs, under 1% of the rows."""
    n = 3000
    rows = search_rows(problem, search, n, np.random.default_rng(1))
    assert rows.shape == (n, problem.num_choices.size)
    default = np.all(rows == 0, axis=1)
    assert BASELINE_REPEATS[0] <= default.sum() <= min(BASELINE_REPEATS[1], n * BASELINE_MAX_SHARE)
    assert _distinct(rows[~default]) == n - default.sum()
    share = 1 - _distinct(rows) / n
    assert 0 < share < 0.01
    # No baseline group in a small graph (it would exceed 0.9% of the rows), nor without duplicates.
    assert _distinct(search_rows(problem, search, 100, np.random.default_rng(2))) == 100
    assert _distinct(search_rows(problem, search, 500, np.random.default_rng(2), baseline=False)) == 500


def test_every_split_holds_its_share_of_narrow_default_searches() -> None:
    """One default search in ten stays narrow (its configs tie within noise, as a real 1.6% search's), at an offset
    drawn per world, collection and split: any ten graphs in a row hold exactly one."""
    period = round(1 / DEFAULT_NARROW_SHARE)
    offsets = set()
    for seed in range(6):
        for collection in ("layout:xla:default", "layout:nlp:default"):
            for split in ("train", "valid", "test"):
                narrow = [narrow_search(seed, collection, split, i) for i in range(3 * period)]
                assert all(sum(narrow[i:i + period]) == 1 for i in range(2 * period))
                offsets.add(narrow.index(True))
    assert len(offsets) > 3


def test_a_narrow_default_search_differs_by_near_ties_only(problem: LayoutProblem) -> None:
    """A narrow search's configs differ in layouts that cost nothing, so its runtimes span less than the noise's
    reach; a wandering one's span more than a percent."""
    narrow = search_rows(problem, "default", 500, np.random.default_rng(1), narrow=True, baseline=False)
    wide = search_rows(problem, "default", 500, np.random.default_rng(1), narrow=False, baseline=False)
    spread = [float(np.ptp(problem.runtime_ns(r)) / problem.runtime_ns(r).min()) for r in (narrow, wide)]
    assert spread[0] < 1e-9 < 0.01 < spread[1]


def test_a_stalled_search_is_dominated_by_duplicates(problem: LayoutProblem) -> None:
    """Real: a few graphs are dominated by duplicates (99,992 of 100,040 rows; 58,910 of 100,040)."""
    n = 4000
    shares = []
    for seed in range(12):
        rows = search_rows(problem, "random", n, np.random.default_rng(seed), stalled=True)
        assert rows.shape[0] == n
        shares.append(1 - _distinct(rows) / n)
    shares = np.asarray(shares)
    assert shares.min() >= 1 - STALL_DISTINCT[1] - 0.01 and shares.max() <= 1 - 2 / n
    assert shares.max() > 0.95
    # The re-measured configs are the faster ones more often (a tuner re-evaluates its best candidates).
    rows = search_rows(problem, "random", n, np.random.default_rng(3), stalled=True, baseline=False)
    runtime = problem.runtime_ns(rows)
    uniq, counts = np.unique(row_hashes(rows), return_counts=True)
    by_key = dict(zip(row_hashes(rows).tolist(), runtime.tolist(), strict=True))
    times = np.asarray([by_key[k] for k in uniq.tolist()])
    # Configs that differ only in layouts that cost nothing tie: take every one at the best runtime.
    assert counts[times <= times.min() * (1 + 1e-12)].mean() > np.median(counts)


def test_a_saturated_space_is_measured_again() -> None:
    """Two configurable nodes under the default search reach a few dozen configs: a search of more re-measures."""
    p = LayoutProblem.from_module(_hand_module())
    reachable = p.sample_distinct("default", 10_000, np.random.default_rng(0), explore=1.0)
    assert 2 <= reachable.shape[0] < 100
    rows = search_rows(p, "default", 1000, np.random.default_rng(1), baseline=False)
    assert rows.shape[0] == 1000 and _distinct(rows) == reachable.shape[0]


# -- noise ------------------------------------------------------------------------------------------------------


def test_repeat_differences() -> None:
    hashes = np.asarray([5, 7, 5, 5, 9, 7])
    runtime = np.asarray([100.0, 10.0, 102.0, 99.0, 3.0, 30.0])
    diffs, spreads = repeat_differences(hashes, runtime)
    np.testing.assert_allclose(sorted(diffs), [0.01, 0.02, 2.0])
    np.testing.assert_allclose(sorted(spreads), [102 / 99 - 1, 2.0])
    assert repeat_differences(np.arange(4), np.ones(4))[0].size == 0


def test_tile_noise_is_a_few_percent_and_spreads_on_a_busy_host() -> None:
    """Real: a re-measured tile config differed by 3.8%; one kernel's three runs of one config spread 2.1x.
    Layout runs (a whole program) stay at a median 0.03%."""
    rng = np.random.default_rng(4)
    true = np.full(100_000, 2e5)
    a, b = physics.measure_tile(true, rng), physics.measure_tile(true, rng)
    rel = np.abs(a / b - 1)
    assert 0.012 < np.median(rel) < 0.017  # 0.954 sigma, sigma 1.5%
    assert 0.02 < np.quantile(rel, 0.9) < 0.05 and rel.max() < 0.15
    short = np.abs(physics.measure_tile(np.full(20_000, 100.0), rng) / 100.0 - 1)
    assert np.median(short) > np.median(np.abs(a / true - 1)) * 1.5  # timer jitter dominates a 100 ns kernel
    runs = physics.measure_tile(np.full((20_000, 3), 2e5), rng, busy=True)
    spread = runs.max(axis=1) / runs.min(axis=1)
    assert 0.3 < (spread > 1.1).mean() < 0.6 and spread.max() > 2.0
    layout = np.abs(physics.measure(true, rng) / physics.measure(true, rng) - 1)
    assert 0.00025 < np.median(layout) < 0.00035


def test_tile_files_re_measure_some_configs(tmp_path: Path) -> None:
    p = TileProblem.from_kernel(_conv(8, 28, 64, 128))
    repeated = 0
    for seed in range(30):
        path, secret = tmp_path / "npz" / f"{seed}.npz", tmp_path / "secret" / f"{seed}.npz"
        n = write_tile_graph(path, secret, _conv(8, 28, 64, 128), p, 20, np.random.default_rng(seed))
        g = load_graph(path, Collection.TILE_XLA)
        hashes = row_hashes(g.config_feat)
        again = n - len(np.unique(hashes))
        assert n == 20 and again <= 2
        if again:
            repeated += 1
            dflt = row_hashes(p.default_config()[None].astype(np.float32))[0]
            assert (hashes == dflt).sum() >= 2, "the default is the config measured again"
    assert 1 <= repeated <= 12  # 15% of the kernels


# -- in a generated world ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def demo_part(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("demo-part")
    return generate_world(out, scale="demo", collections=["layout:xla:random", "layout:nlp:default"], limit=4,
                          workers=1, progress=False)


def test_world_duplicates_are_a_small_group_in_typical_graphs(demo_part: Path) -> None:
    root = find_data_root(demo_part)
    for c in (Collection.LAYOUT_XLA_RANDOM, Collection.LAYOUT_NLP_DEFAULT):
        st = collection_stats(root, c, progress=False)
        shares = np.asarray(st.duplicate_shares)
        assert np.median(shares) < 0.01, (c, shares)
        train_valid = st.files["train"] + st.files["valid"]
        assert (shares[:train_valid] > 0).mean() >= 0.5, "most train/valid graphs carry a baseline group"
        assert (shares[train_valid:] == 0).all(), "test files hold distinct configs"
        d = np.concatenate(st.repeat_diffs)
        assert np.median(d) < 0.001 and d.max() < 0.0022  # real: median 0.027%, at most 0.18%


def test_world_graph_structure(demo_part: Path) -> None:
    """Real: about 1.7 edges per node; node_splits cut after cluster / while / cond computations."""
    root = find_data_root(demo_part)
    per_node, segments = [], []
    for path in list_graphs(root, Collection.LAYOUT_NLP_DEFAULT, Split.TRAIN):
        g = load_graph(path)
        per_node.append(g.num_edges / g.num_nodes)
        segments.append(g.node_splits.size - 1)
        if "_train" in path.stem:
            assert segments[-1] >= 3, path.stem
    assert 1.2 < min(per_node) and max(per_node) < 2.0 and 1.45 < np.median(per_node) < 1.9


def test_full_scale_has_tile_kernels_of_two_to_four_configs(tmp_path: Path) -> None:
    """Real test split: 16 of 844 kernels have only 2-4 configs; the world's first such file is written with its
    count and validates."""
    full = SCALES["full"]
    per = full.tile_kernels_per_program
    found = None
    for index in range(200):
        for k in range(per):
            krng = graph_rng(0, "tile-configs", "train", index, k)
            krng.bytes(8)
            if full.tile_configs.draw(krng) <= 4:
                found = (index, k)
                break
        if found:
            break
    assert found is not None
    cfg = WorldConfig("full", 0, ("tile:xla",), None)
    written = _write_tile_program(tmp_path, cfg, full, GraphJob("tile:xla", "train", found[0], per))
    g = load_graph(written[found[1]], Collection.TILE_XLA)
    assert 2 <= g.config_feat.shape[0] <= 4
    assert validate_file(written[found[1]], Collection.TILE_XLA, deep=True) == []
