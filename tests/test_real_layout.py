"""The real layout graph (``competition/real_layout.py``): its recovered column positions checked against relations
that only the right positions satisfy, the restored file, the fixed split of its distinct configs, and its rows in
``benchmarks/real_records.py`` (a GBDT fitted on a few hundred of its own configs ranks its test configs well)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest

from benchmarks import real_records as bench
from competition.collections import Split
from competition.dataset import open_collection
from competition.opcodes import opcode_id
from competition.real_layout import (
    ALEXNET_COLLECTION,
    ALEXNET_FILE,
    ALEXNET_SHA256,
    CONFIG_COLUMNS,
    NODE_COLUMNS,
    alexnet_root,
    alexnet_test,
    distinct_groups,
    restore_arrays,
    split_configs,
)
from competition.schema import EMPTY_PRODUCT_COLUMNS

CONV, DOT, RESHAPE = 26, 34, 75


@pytest.fixture(scope="module")
def full() -> dict[str, np.ndarray]:
    return restore_arrays()


def test_the_graph_ships_unchanged():
    assert hashlib.sha256(ALEXNET_FILE.read_bytes()).hexdigest() == ALEXNET_SHA256
    assert ALEXNET_SHA256 in (ALEXNET_FILE.parent / "README.md").read_text()


def test_restoring_puts_every_kept_column_in_place_and_fills_the_rest(full: dict[str, np.ndarray]):
    with np.load(ALEXNET_FILE) as z:
        feat, conf = z["node_feat"], z["node_config_feat"]
    assert full["node_feat"].shape == (372, 140) and full["node_config_feat"].shape == (38084, 26, 18)
    np.testing.assert_array_equal(full["node_feat"][:, list(NODE_COLUMNS)], feat)
    np.testing.assert_array_equal(full["node_config_feat"][:, :, list(CONFIG_COLUMNS)], conf)
    dropped = sorted(set(range(140)) - set(NODE_COLUMNS))
    expected = np.asarray([1.0 if c in EMPTY_PRODUCT_COLUMNS else 0.0 for c in dropped])
    np.testing.assert_array_equal(full["node_feat"][:, dropped], np.broadcast_to(expected, (372, len(dropped))))
    assert (full["node_config_feat"][:, :, sorted(set(range(18)) - set(CONFIG_COLUMNS))] == -1).all()


def test_sums_and_products_sit_beside_the_lists_they_sum(full: dict[str, np.ndarray]):
    """Shape dims (21-24, sum 27, product 28), window size / stride / dilation (sum and product of 4 entries) and
    padding (2 entries): only the right positions make every row add up."""
    f = full["node_feat"]
    rank = (f[:, 21:27] > 0).sum(axis=1)
    dims = np.where(np.arange(6) < rank[:, None], f[:, 21:27], 1.0)
    np.testing.assert_array_equal(f[:, 27], f[:, 21:27].sum(axis=1))
    np.testing.assert_array_equal(f[:, 28], dims.prod(axis=1))
    windowed = f[:, 37] > 0
    assert windowed.sum() == 20
    for first, count in ((37, 4), (45, 4), (69, 4)):  # size, stride, window dilation: 6 entries, sum, product
        entries = f[windowed, first:first + count]
        np.testing.assert_array_equal(f[windowed, first + 6], entries.sum(axis=1))
        np.testing.assert_array_equal(f[windowed, first + 7], np.where(entries > 0, entries, 1).prod(axis=1))
    for first in (53, 61):  # padding low / high: entries 0-1 of a 2-D window carry it all
        np.testing.assert_array_equal(f[:, first + 6], f[:, first:first + 6].sum(axis=1))
    np.testing.assert_array_equal(f[windowed, 91] + f[windowed, 92], (f[windowed, 37:43] > 0).sum(axis=1))


def test_convolution_dimension_numbers_are_permutations(full: dict[str, np.ndarray]):
    f, op = full["node_feat"], full["node_opcode"]
    conv = f[op == CONV]
    assert len(conv) == 14
    for cols in ((93, 94, 95, 96), (99, 100, 101, 102)):  # input; kernel (batch/feature and 2 spatial dims)
        assert all(sorted(row) == [0, 1, 2, 3] for row in conv[:, cols].astype(int).tolist())
    assert (conv[:, 105] != conv[:, 106]).all() and (conv[:, 107] == 1).all() and (conv[:, 108] == 1).all()
    out_feature = conv[:, 106].astype(int)  # the output's feature dim holds the kernel's output-feature size
    kernel_out = conv[:, 100].astype(int)
    assert (conv[np.arange(14), 21 + out_feature] > 0).all() and set(kernel_out) <= {2, 3}


def test_config_slots_follow_the_tensors_ranks(full: dict[str, np.ndarray]):
    """A reshape names its output's and input's full rank (slots 0-5 and 6-11), a convolution or dot the two most
    minor dims of three tensors (slots 0-1, 6-7, 12-13): the kept slots fit no other reading."""
    f, op, ids, conf = full["node_feat"], full["node_opcode"], full["node_config_ids"], full["node_config_feat"]
    operand = {int(c): int(p) for c, p in full["edge_index"]}
    for k, node in enumerate(ids.tolist()):
        used = np.nonzero((conf[:, k] >= 0).any(axis=0))[0].tolist()
        rank = int((f[node, 21:27] > 0).sum())
        if op[node] == RESHAPE:
            in_rank = int((f[operand[node], 21:27] > 0).sum())
            assert used == [*range(rank), *range(6, 6 + in_rank)] if in_rank > 1 else used == list(range(rank))
        else:
            assert op[node] in (CONV, DOT) and used == [0, 1, 6, 7, 12, 13]
        output = conf[:, k][:, [u for u in used if u < 6]]
        assert output.max() < max(rank, 1)


def test_the_split_is_fixed_and_keeps_every_repeat_on_one_side(full: dict[str, np.ndarray]):
    split = split_configs(full["node_config_feat"])
    sizes = {s: len(p) for s, p in split.parts.items()}
    assert sizes == {Split.TRAIN: 14354, Split.VALID: 4785, Split.TEST: 4785}
    every = np.concatenate(list(split.parts.values()))
    assert np.array_equal(np.sort(every), np.arange(23924))
    runs = {s: split.runs(s) for s in split.parts}
    assert sum(r.size for r in runs.values()) == 38084
    assert not set(split.group[runs[Split.TRAIN]]) & set(split.group[runs[Split.TEST]])
    again = split_configs(full["node_config_feat"])
    assert all(np.array_equal(again.parts[s], split.parts[s]) for s in split.parts)
    np.testing.assert_array_equal(split.runs(Split.TRAIN, 5), np.nonzero(np.isin(split.group,
                                                                                   split.parts[Split.TRAIN][:5]))[0])


def test_distinct_groups_number_configs_in_order_of_first_run():
    first, group = distinct_groups(np.array([[3, 1], [0, 0], [3, 1], [2, 2], [0, 0]]))
    assert first.tolist() == [0, 1, 3] and group.tolist() == [0, 1, 0, 2, 1]


def test_the_root_holds_train_and_valid_runs_and_the_test_configs_averaged(tmp_path: Path,
                                                                           full: dict[str, np.ndarray]):
    root = alexnet_root(tmp_path, train_limit=300)
    assert alexnet_root(tmp_path, train_limit=300).root == root.root  # written once, then reused
    data = open_collection(root, ALEXNET_COLLECTION)
    split = split_configs(full["node_config_feat"])
    assert data.train[0].num_configs == split.runs(Split.TRAIN, 300).size
    assert data.valid[0].num_configs == split.runs(Split.VALID).size and len(data.test) == 0
    test = alexnet_test(root)
    assert test.num_configs == 4785
    chosen = split.parts[Split.TEST][0]
    runs = full["config_runtime"][split.group == chosen]
    position = int(np.searchsorted(np.sort(split.parts[Split.TEST]), chosen))
    assert test.config_runtime[position] == round(runs.mean())
    np.testing.assert_array_equal(test.config_features(np.array([position]))[0],
                                  full["node_config_feat"][split.group == chosen][0])


def test_the_benchmark_ranks_the_real_graph_fitted_on_a_world_and_on_its_own_runs(
        tmp_path: Path, tiny_world: Path):
    argv = ["--data", str(tiny_world), "--models", "gbdt", "--parts", "layout", "--own-configs", "300",
            "--param", "gbdt.booster.n_estimators=30", "--param", "gbdt.run.n_jobs=1", "--work-dir", str(tmp_path)]
    records, report = bench.run(argv)
    rows = {(r["model"], r["fitted_on"]): r for r in records if r["part"] == "alexnet"}
    assert set(rows) == {("random", None), ("default-first", None), ("gbdt", f"world:{tiny_world.name}"),
                         ("gbdt", "own")}
    test = alexnet_test(alexnet_root(tmp_path / "alexnet", 300))
    runtime = test.config_runtime
    assert rows[("random", None)]["top1"] == pytest.approx(runtime.mean() / runtime.min())
    assert rows[("gbdt", "own")]["tau"] > 0.6 and rows[("gbdt", "own")]["top1"] < 1.01
    assert "the real graph alexnet_train_batch_32" in report and "4,785 test configs" in report
    fits = [r for r in records if r["part"] == "fit"]
    assert [(r["model"], r["fitted_on"]) for r in fits] == [("gbdt", f"world:{tiny_world.name}"), ("gbdt", "own")]


def test_the_rank_mean_averages_the_models_normalised_ranks():
    np.testing.assert_allclose(bench.rank_mean([[1.0, 2.0, 3.0], [30.0, 10.0, 20.0]]), [0.5, 0.25, 0.75])
    np.testing.assert_allclose(bench.rank_mean([[5.0, 5.0, 1.0]]), [0.75, 0.75, 0.0])


def test_two_models_give_their_rank_mean_a_row_per_source(tmp_path: Path, tiny_world: Path):
    argv = ["--data", str(tiny_world), "--models", "gbdt", "random", "--parts", "layout", "--own-configs", "300",
            "--param", "gbdt.booster.n_estimators=30", "--param", "gbdt.run.n_jobs=1", "--work-dir", str(tmp_path)]
    records, report = bench.run(argv)
    rows = {(r["model"], r["fitted_on"]): r for r in records if r["part"] == "alexnet"}
    for source in (f"world:{tiny_world.name}", "own"):
        assert ("gbdt+random", source) in rows
    # The pipeline's ensemble, fitted on the world's valid split: on the world only.
    assert ("ensemble", f"world:{tiny_world.name}") in rows and ("ensemble", "own") not in rows
    # Half the weight on a random order dilutes the GBDT's own-runs ranking but keeps its sign.
    assert 0.0 < rows[("gbdt+random", "own")]["tau"] < rows[("gbdt", "own")]["tau"]
    assert "gbdt+random" in report


def test_ops_without_a_window_have_window_products_of_one_as_the_featurizer_writes(full: dict[str, np.ndarray]):
    """The real graph's kept window-product columns (size 44, stride 52, padding 60 and 68, dilation 76) hold 1 on
    every node with no window, as :func:`competition.hlo.features.featurize` writes them (an empty list's
    product), not 0: a world featurized otherwise would show a real graph's nodes values it never trained on."""
    windowed = np.isin(full["node_opcode"], [opcode_id(op) for op in ("convolution", "reduce-window",
                                                                      "select-and-scatter")])
    kept = [c for c in EMPTY_PRODUCT_COLUMNS if c in NODE_COLUMNS]
    assert kept == [44, 52, 60, 68, 76]
    assert 300 < int((~windowed).sum()) < 372
    assert (full["node_feat"][~windowed][:, kept] == 1.0).all()
