"""The real TPU records shipped as package data, their npz files, and the benchmark that ranks them
(``benchmarks/real_records.py``): counts and reference cells checked against values computed here from the records
themselves, a GBDT fitted on the tiny world and on the other real kernels, the tables printed, fits reused."""

from __future__ import annotations

import hashlib
import itertools
import json
import tomllib
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import kendalltau

from benchmarks import real_records as bench
from competition.collections import Collection, Split
from competition.dataroot import find_data_root, list_graphs
from competition.hlo.records import read_layout_records, read_tile_records
from competition.reader import load_graph
from competition.real_records import LAYOUT_RECORDS, RECORDS_DIR, SHA256, TILE_RECORDS, featurize_records

ROOT = Path(__file__).resolve().parents[1]
KERNELS = {"fusion.191": 579, "fusion.261": 16, "fusion.205": 16, "fusion.181": 5, "fusion.206": 3, "fusion.207": 3,
           "fusion.250": 2, "reshape.37": 3, "reshape.38": 2, "reshape.39": 2}
"""Configs written per kernel: its runs less the failed ones (fusion.191: 581 runs, 2 failed)."""
HEADLINE = ("fusion.191", "fusion.261", "fusion.205")


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A work folder holding the featurized records, shared by the module's tests."""
    out = tmp_path_factory.mktemp("real-records")
    featurize_records(out)
    return out


@pytest.fixture(scope="module")
def tile_runs() -> dict[str, list]:
    """Each kernel's runs as the records hold them, read without the featurizer."""
    return {rec.module.name: rec.runs for rec in read_tile_records(TILE_RECORDS.read_bytes())}


def test_the_records_ship_as_package_data():
    assert {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in RECORDS_DIR.glob("*.pb")} == SHA256
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert "competition.data.real_records" in declared["packages"]
    patterns = declared["package-data"]["competition.data.real_records"]
    assert {p.name for pattern in patterns for p in RECORDS_DIR.glob(pattern)} == {
        *SHA256, "README.md", "alexnet_layout_xla_80pct.npz"}
    readme = (RECORDS_DIR / "README.md").read_text()
    assert "Apache License, Version 2.0" in readme and all(digest in readme for digest in SHA256.values())


def test_the_records_featurize_once_into_one_file_per_kernel(work: Path, tile_runs: dict[str, list]):
    assert {name: sum(not r.error for r in runs) for name, runs in tile_runs.items()} == KERNELS
    root = find_data_root(featurize_records(work))
    assert len(list(work.iterdir())) == 1  # the second call reused the first's root
    kernels = {k.name: k for k in bench.read_kernels(root)}
    assert {name: k.configs for name, k in kernels.items()} == KERNELS
    assert {name: k.distinct for name, k in kernels.items() if k.distinct != k.configs} == {
        "reshape.37": 1, "reshape.38": 1, "reshape.39": 1}
    assert {k.default for k in kernels.values()} == {0}  # every kernel's default run is its first
    (layout,) = list_graphs(root, Collection.LAYOUT_XLA_RANDOM, Split.TRAIN)
    assert load_graph(layout, Collection.LAYOUT_XLA_RANDOM).num_configs == 112


def test_reference_cells_equal_the_values_computed_from_the_records(work: Path, tile_runs: dict[str, list]):
    kernels = {k.name: k for k in bench.read_kernels(find_data_root(featurize_records(work)))}
    for name in HEADLINE:
        runtimes = np.array([r.runtime_ns for r in tile_runs[name] if not r.error], dtype=np.float64)
        default = next(r.runtime_ns for r in tile_runs[name] if r.is_default)
        best = runtimes.min()
        k = kernels[name]
        # The compiler's default alone: its top-5 list is its one config.
        assert bench.order_tile_cell(k.targets, [k.default]) == pytest.approx((2 - default / best, default / best),
                                                                              rel=1e-12)
        top5, top1 = bench.random_tile_cell(k.targets)
        assert top1 == pytest.approx(runtimes.mean() / best, rel=1e-12)
        if runtimes.size <= 16:  # every 5-config head of a random order, equally likely
            heads = [runtimes[list(c)].min() for c in itertools.combinations(range(runtimes.size), 5)]
            assert top5 == pytest.approx(2 - np.mean(heads) / best, rel=1e-12)
        else:  # fusion.191: 20,000 seeded heads, within 4 standard errors
            rng = np.random.default_rng(0)
            scores = [2 - runtimes[rng.choice(runtimes.size, 5, replace=False)].min() / best for _ in range(20_000)]
            assert abs(top5 - np.mean(scores)) < 4 * np.std(scores) / np.sqrt(len(scores))
    assert kernels["fusion.191"].spread == pytest.approx(3963794 / 137344)


def test_the_layout_module_has_91_distinct_configs_repeats_averaged(work: Path):
    module = bench.read_module(find_data_root(featurize_records(work)))
    runs = [r for r in read_layout_records(LAYOUT_RECORDS.read_bytes()).runs if not r.error]
    groups: dict[tuple, list[int]] = {}
    for run in runs:
        groups.setdefault(run.layout, []).append(run.runtime_ns)
    assert (module.runs, module.graph.num_configs, len(groups)) == (112, 91, 91)
    assert np.allclose(module.runtime, [np.mean(g) for g in groups.values()], rtol=0, atol=1e-6)
    assert module.spread == pytest.approx(max(r.runtime_ns for r in runs) / min(r.runtime_ns for r in runs) - 1)
    # default-first on layout needs no fit: configs that set fewer nodes' layouts first.
    set_nodes = [sum(any(len(t) for t in node) for node in layout) for layout in groups]
    records = bench.layout_records(module, [], [], {}, Collection.LAYOUT_XLA_RANDOM, work / "runs")
    by_model = {r["model"]: r for r in records}
    assert by_model["default-first"]["tau"] == pytest.approx(kendalltau(set_nodes, module.runtime).statistic)
    assert by_model["random"]["tau"] == 0.0 and 0.05 < by_model["random"]["tau_spread"] < 0.09


def test_leave_one_out_trains_on_the_other_kernels_that_have_an_order(work: Path):
    root = find_data_root(featurize_records(work))
    kernels = bench.read_kernels(root)
    held = next(k for k in kernels if k.name == "fusion.191")
    data = bench.leave_one_out(root, kernels, held)
    assert data.eval is None and len(data.valid) == len(data.test) == 0
    assert sorted(s.rsplit("_", 1)[0] for s in data.train.stems) == [
        "fusion.181", "fusion.205", "fusion.206", "fusion.207", "fusion.250", "fusion.261"]


def test_the_benchmark_prints_its_tables_and_reuses_its_fits(work: Path, tiny_world: Path,
                                                               capsys: pytest.CaptureFixture[str]):
    out = work / "records.json"
    argv = ["--data", str(tiny_world), "--models", "gbdt", "--param", "gbdt.booster.n_estimators=5",
            "--param", "gbdt.run.n_jobs=1", "--work-dir", str(work), "--json", str(out), "--own-configs", "300"]
    records, report = bench.run(argv)
    printed = capsys.readouterr().out
    assert report in printed
    fits = [r for r in records if r["part"] == "fit"]
    # default-first and gbdt on the world's tile split, on each of the 7 leave-one-out sets; gbdt on layout, and
    # on the real layout graph's own runs.
    assert len(fits) == 2 * (1 + 7) + 1 + 1 and not any(r["seconds"] is None for r in fits)
    tile = {(r["kernel"], r["model"], r["fitted_on"]): r for r in records if r["part"] == "tile"}
    assert len(tile) == 7 * (2 + 2 * 2)
    assert tile[("fusion.191", "compiler-default", None)]["top1"] == pytest.approx(151565 / 137344)
    for line in ("mean, 3 kernels >= 10 configs", "mean, 7 kernels >= 2 configs", "gbdt/world", "gbdt/real",
                 "default-first/real", "91 distinct configs", "One module: no leave-one-out",
                 "the real graph alexnet_train_batch_32",
                 "not scored (one distinct config, nothing to rank): reshape.37 (3 runs)",
                 f"fitted on: world {tiny_world.name}", "command: python -m benchmarks.real_records --data"):
        assert line in report
    lines = report.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("kernel"))
    assert [line.split()[0] for line in lines[head + 2:head + 9]] == [
        "fusion.191", "fusion.205", "fusion.261", "fusion.181", "fusion.206", "fusion.207", "fusion.250"]
    doc = json.loads(out.read_text())
    assert doc["records"] == json.loads(json.dumps(records)) and doc["worlds"][0]["label"] == tiny_world.name

    again, report_again = bench.run(argv)
    assert report_again.split("\nfits:")[0] == report.split("\nfits:")[0]
    assert all(r["seconds"] is None for r in again if r["part"] == "fit")
