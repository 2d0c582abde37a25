"""The synthetic world against real TPU records: the figures of competition/synthetic/calibration.py on a small world
and on the shipped records, and the world inside every range.

``world`` (module scope) is the demo world of seed 0, the world ``make submit`` runs on: its layout collections here;
a section's tests read only their own collections from it.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from competition.collections import Collection, Split
from competition.dataroot import find_data_root, list_graphs
from competition.opcodes import OPCODE_IDS
from competition.reader import load_graph
from competition.synthetic import calibration as cal

LAYOUT = cal.SECTIONS.index((cal.LAYOUT_FIGURES, cal._layout))
STRUCTURE = cal.SECTIONS.index((cal.STRUCTURE_FIGURES, cal._structure))
HARDNESS = cal.SECTIONS.index((cal.HARDNESS_FIGURES, cal._hardness))
LAYOUT_COLLECTIONS = ["layout:xla:default", "layout:xla:random", "layout:nlp:default", "layout:nlp:random"]


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo world (seed 0), its layout collections (about 10 s on 2 workers)."""
    from competition.synthetic.world import generate_world

    out = tmp_path_factory.mktemp("calibration-world")
    return generate_world(out, scale="demo", seed=0, collections=LAYOUT_COLLECTIONS, workers=2, progress=False)


@pytest.fixture(scope="module")
def records(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The shipped real records as a data root (the layout module under ``layout:xla:random``)."""
    from competition.real_records import featurize_records

    return featurize_records(tmp_path_factory.mktemp("real-records"))


# -- layout -----------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_the_demo_world_stays_inside_every_layout_range(world: Path) -> None:
    values = cal.figures(find_data_root(world), sections=[LAYOUT])
    assert set(values) == {f.key for f in cal.LAYOUT_FIGURES}
    assert cal.failures(values) == []


def test_the_demo_world_has_the_real_layout_graphs_structure(world: Path) -> None:
    """What decides runtimes (tied groups, additivity, only output layouts, near-ties) as in the real alexnet
    graph: a world where input or kernel layouts matter, or where no config ties, leaves a range."""
    values = cal.figures(find_data_root(world), sections=[STRUCTURE])
    assert set(values) == {f.key for f in cal.STRUCTURE_FIGURES}
    assert cal.failures(values) == []


def test_the_demo_world_leaves_room_for_what_the_strongest_teams_reached(world: Path) -> None:
    """Per layout collection, the oracle (noiseless runtimes ranked against the measured ones) reaches the real
    valid tau of the strongest teams: a world whose near-ties the noise alone orders is harder than the real data."""
    values = cal.figures(find_data_root(world), sections=[HARDNESS])
    assert set(values) == {f.key for f in cal.HARDNESS_FIGURES}
    assert cal.failures(values) == []
    # The searches set it: the default collections' oracle below the random ones', nlp:random's near 1.
    assert values["hardness.layout:xla:default.oracle"] < values["hardness.layout:xla:random.oracle"]
    assert values["hardness.layout:nlp:random.oracle"] > 0.96


def test_a_world_whose_configs_tie_within_noise_is_too_hard(tmp_path: Path) -> None:
    """The hardness figure of a root whose noiseless runtimes all tie (only noise orders them) is near 0, outside
    its range; without noiseless runtimes (real data) there is no figure."""
    from competition.npzio import write_npz
    from tests.test_reader import layout_arrays, write

    root = tmp_path / "w"
    rng = np.random.default_rng(0)
    collection = Collection.LAYOUT_XLA_DEFAULT
    for i in range(3):
        runtime = (1_000_000 * (1 + 3e-4 * rng.standard_normal(200))).astype(np.int64)
        write(root, collection, {**layout_arrays(c=200), "config_runtime": runtime}, stem=f"g{i}")
    assert cal.figures(find_data_root(root), sections=[HARDNESS]) == {}
    for i in range(3):
        write_npz(root / "secret" / collection.relpath / "train" / f"g{i}.npz",
                  {"config_runtime_noiseless": np.full(200, 1e6)})
    values = cal.figures(find_data_root(root), sections=[HARDNESS])
    assert abs(values["hardness.layout:xla:default.oracle"]) < 0.1
    assert [line.split(" =")[0] for line in cal.failures(values)] == ["hardness.layout:xla:default.oracle"]


def test_the_real_layout_graph_lies_inside_its_structure_ranges(tmp_path: Path) -> None:
    from competition.real_layout import alexnet_root

    values = cal.figures(alexnet_root(tmp_path), sections=[STRUCTURE])
    assert values["layout.xla.random.groups_share"] == pytest.approx(9 / 26)
    assert cal.failures(values) == []
    assert cal.failures({**values, "layout.xla.random.within_02": 0.05}) != []  # a world where no config ties


def test_the_records_module_gives_its_stated_figures(records: Path) -> None:
    """The records' layout module: 112 runs spanning 1.6%, 8.3% select + compare, 1.7% constants (README). Its
    spread is one a default collection's narrowest graph may have; its random-search quantiles are not the alexnet
    figures the random rows rest on, so the table shows those rows' stated values."""
    root = find_data_root(records)
    real = cal.figures(root, splits=(Split.TRAIN,), sections=[LAYOUT])
    assert real["layout.xla.select_compare"] == pytest.approx(264 / 3163)
    assert real["layout.xla.constant"] == pytest.approx(53 / 3163)
    (path,) = list_graphs(root, cal.Collection.LAYOUT_XLA_RANDOM, Split.TRAIN)
    module = cal.search_figures([load_graph(path)], "m", quantiles=True)
    assert module["m.spread_min"] == pytest.approx(0.0162, abs=1e-4)
    assert module["m.p50"] < 1.0001 and module["m.max"] < 1.017
    spread = {f.key: f for f in cal.LAYOUT_FIGURES}["layout.xla.default.spread_min"]
    assert spread.holds(module["m.spread_min"])
    assert cal.failures({k: v for k, v in real.items() if not k.startswith("layout.xla.random")}) == []
    table = cal.table(real, real)
    assert "| 1.0016 (alexnet" in table and "| 0.08347 |" in table


def _graph(runtime: list[float], opcodes: list[str] | None = None, stem: str = "g") -> SimpleNamespace:
    op = np.asarray([OPCODE_IDS[o] for o in opcodes or ["add"]], dtype=np.uint8)
    return SimpleNamespace(config_runtime=np.asarray(runtime, dtype=np.int64), node_opcode=op,
                           path=Path(f"{stem}.npz"))


def test_search_figures_count_every_row_and_take_medians_over_graphs() -> None:
    flat = _graph([1000] * 60 + [1010] * 20 + [3000] * 20)  # p50 1, p75 1.01, p90 3, max 3
    wide = _graph(list(range(1000, 1200)))                  # p50 ~1.1, max 1.199
    few = _graph([1000, 9000])                              # under MIN_SEARCH_ROWS: left out
    hidden = _graph([0] * 200)                              # a test file: no runtimes
    got = cal.search_figures([flat, wide, few, hidden], "x", quantiles=True)
    assert got["x.spread_min"] == pytest.approx(0.199)
    assert got["x.p50"] == pytest.approx((1.0 + 1.0995) / 2)
    assert got["x.max"] == pytest.approx((3.0 + 1.199) / 2)
    assert set(cal.search_figures([flat], "y", quantiles=False)) == {"y.spread_min"}
    assert np.isnan(cal.search_figures([few], "z", quantiles=False)["z.spread_min"])


def test_opcode_figures_pool_training_graphs_once_each() -> None:
    step = _graph([1], ["all-reduce", "select", "compare", "constant", "add"], "step")
    again = _graph([1], ["all-reduce", "select", "compare", "constant", "add"], "step")  # its other search
    other = _graph([1], ["all-reduce", "add", "add", "add", "add"], "other")
    inference = _graph([1], ["select", "select"], "inference")
    got = cal.opcode_figures([step, again, other, inference], "x")
    assert got == {"x.select_compare": pytest.approx(2 / 10), "x.constant": pytest.approx(1 / 10)}
    assert all(np.isnan(v) for v in cal.opcode_figures([inference], "x").values())


def test_a_world_far_from_the_best_leaves_the_random_ranges() -> None:
    """The check can fail: a random search whose typical config is 24% off its best (the world before this
    calibration, pooled) or whose tail stops at 1.3x is outside the ranges."""
    slow = cal.search_figures([_graph(list(np.linspace(1000, 1600, 300)))], "layout.xla.random", quantiles=True)
    assert slow["layout.xla.random.p50"] > 1.2
    bad = cal.failures(slow)
    assert any(line.startswith("layout.xla.random.p50") for line in bad)
    assert any(line.startswith("layout.xla.random.p75") for line in bad)
