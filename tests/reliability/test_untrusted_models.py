"""A saved run is untrusted data: every field of ``model.json`` and ``ensemble.json`` is checked before any of it
reaches LightGBM, torch or numpy, and a model whose scores are not finite is refused, never written.

The cases are the probe's edits: a LightGBM model string whose child points back to the root or past the last node
(a hang), cut short or with wrong ``tree_sizes`` (SIGABRT), with a split feature or leaf out of range (ranked with
exit 0); a GNN state entry whose dtype asked numpy for gigabytes, a ``columns_.kept`` of -1, fields that disagree
(exit 3 with a traceback); weights of 1e38 (non-finite scores, written as the identity order); ensemble members
outside the runs folder or outside the registry, and weights or methods that ``fit`` never leaves. Each ends in
exit 2, one line naming the file and the field, and nothing written. Those that hung or crashed run in a process of
their own, under a time limit (and a memory limit for the allocation).
"""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import lightgbm
import numpy as np
import pytest

from competition.collections import Collection, Split
from competition.dataroot import find_data_root, list_graphs
from competition.dataset import open_collection
from competition.reader import load_graph
from fastslow.cli import EXIT_ERROR
from fastslow.fitting import fit_collection
from fastslow.promotion import ENSEMBLE_FILE, RECORD
from features.tabular_tile import tile_feature_names
from models.base import load_model
from models.booster import checked_model_string
from models.ensemble import Ensemble
from models.fields import FieldError, decode_array
from models.registry import make_model
from tests.reliability.helpers import one_line, run, snapshot

TILE = Collection.TILE_XLA
_LAST = len(tile_feature_names()) - 1
"""The last feature column of a tile gbdt model: the bound the split and header checks name."""
QUICK_GNN = dict(hidden=8, layers=2, device="cpu", seed=0, epochs=2, steps_per_graph=1, configs_per_graph=16)
FITTED = {"gbdt": {"n_jobs": 1, "n_estimators": 3, "early_stopping_rounds": 0}, "gnn": {**QUICK_GNN, "seeds": 1},
          "default-first": {}}
"""Three gbdt trees (no early stopping): ``tree_sizes`` has sizes to get wrong between trees."""
HANG_SECONDS = 60
"""Far beyond a refusal's few seconds; an edit that hung LightGBM's prediction never ended."""


def _quiet(_: str) -> None:
    pass


@pytest.fixture(scope="module")
def fitted(tiny_world: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A runs folder with every model of :data:`FITTED` fitted on tile:xla, as the pipeline saves them."""
    runs = tmp_path_factory.mktemp("fitted") / "runs"
    root = find_data_root(tiny_world)
    for name, params in FITTED.items():
        extra = {"runs_dir": str(runs), "cache_dir": str(runs.parent / "cache")} if name == "gnn" else {}
        fit_collection(name, make_model(name, **params, **extra), open_collection(root, TILE), splits=(),
                       progress=False, say=_quiet, runs_dir=runs)
    return runs


@pytest.fixture(scope="module")
def tile_file(tiny_world: Path) -> Path:
    return list_graphs(find_data_root(tiny_world), TILE, Split.TEST)[0]


def _runs(fitted: Path, tmp_path: Path, name: str, edit: Callable[[dict], None]) -> tuple[Path, Path]:
    """A copy of ``name``'s tile:xla run with ``edit`` applied to its model.json: the runs folder and the file."""
    runs = tmp_path / "runs"
    shutil.copytree(fitted / name, runs / name)
    path = runs / name / TILE.slug / "model.json"
    doc = json.loads(path.read_text())
    edit(doc["state"])
    path.write_text(json.dumps(doc))
    return runs, path


def _predict(tile_file: Path, runs: Path, out: Path, *models: str) -> list[object]:
    return ["predict", tile_file, "--models", *(models or ("gbdt",)), "--runs-dir", runs, "--out", out,
            "--no-progress"]


def _refused(argv: list[object], capsys: pytest.CaptureFixture[str], *watched: Path) -> str:
    """Run ``argv`` in-process: exit 2, one line, no traceback, and every folder of ``watched`` byte-identical;
    returns the line."""
    before = [snapshot(w) for w in watched]
    code, _, err = run(argv, capsys)
    assert code == EXIT_ERROR, err
    assert [snapshot(w) for w in watched] == before
    return one_line(err)


# --------------------------------------------------------------------------------------------------------------
# The LightGBM model string
# --------------------------------------------------------------------------------------------------------------


def _blocks(text: str) -> tuple[str, list[str], str]:
    """The header (to the first tree), each tree's block, and the rest (from ``end of trees``)."""
    start, end = text.index("\nTree=") + 1, text.index("end of trees")
    return text[:start], ["Tree=" + b for b in text[start:end].split("Tree=")[1:]], text[end:]


def _joined(header: str, blocks: list[str], rest: str) -> str:
    """The string of these blocks, its ``tree_sizes`` theirs (so only the edited field is wrong)."""
    lines = [f"tree_sizes={' '.join(str(len(b)) for b in blocks)}" if line.startswith("tree_sizes=") else line
             for line in header.split("\n")]
    return "\n".join(lines) + "".join(blocks) + rest


def _set(text: str, tree: int, key: str, value: str) -> str:
    """``text`` with line ``key`` of tree ``tree`` set to ``value``, the sizes kept right."""
    header, blocks, rest = _blocks(text)
    lines = blocks[tree].split("\n")
    at = next(k for k, line in enumerate(lines) if line.startswith(f"{key}="))
    lines[at] = f"{key}={value}"
    blocks[tree] = "\n".join(lines)
    return _joined(header, blocks, rest)


def _get(text: str, tree: int, key: str) -> list[str]:
    line = next(line for line in _blocks(text)[1][tree].split("\n") if line.startswith(f"{key}="))
    return line.split("=", 1)[1].split(" ")


def _token(text: str, tree: int, key: str, index: int, value: str) -> str:
    tokens = _get(text, tree, key)
    tokens[index] = value
    return _set(text, tree, key, " ".join(tokens))


def _booster_edit(edit: Callable[[str], str]) -> Callable[[dict], None]:
    def apply(state: dict) -> None:
        state["booster_"] = edit(state["booster_"])
    return apply


def _leaves(text: str) -> int:
    return int(_get(text, 0, "num_leaves")[0])


def _sizes(text: str, change: Callable[[list[int]], list[int]]) -> str:
    header = _blocks(text)[0]
    line = next(line for line in header.split("\n") if line.startswith("tree_sizes="))
    sizes = [int(t) for t in line.split("=")[1].split(" ")]
    return text.replace(line, "tree_sizes=" + " ".join(map(str, change(sizes))), 1)


NATIVE_FAILURES: dict[str, tuple[Callable[[str], str], str]] = {
    "a child pointing back to the root (a hang)": (
        lambda t: _token(t, 0, "left_child", 0, "0"),
        "state.booster_ (Tree=0) left_child[0]: expected a node in [1, 1] or a leaf as -1..-3 (never the root, 0); "
        "found '0'"),
    "a child past the last node (a hang)": (
        lambda t: _token(t, 0, "left_child", 0, str(_leaves(t))),
        "state.booster_ (Tree=0) left_child[0]: expected a node in [1, 1] or a leaf as -1..-3 (never the root, 0); "
        "found '3'"),
    "a string cut inside a tree (SIGABRT)": (
        lambda t: t[:t.index("leaf_value=") + 20],
        "state.booster_ tree_sizes: expected sizes within the string"),
    "a first tree size one too large (SIGABRT)": (
        lambda t: _sizes(t, lambda s: [s[0] + 1, *s[1:]]),
        "state.booster_ tree_sizes[0]: expected sizes that end each tree where the next begins; found"),
    "a tree size too many (SIGABRT)": (
        lambda t: _sizes(t, lambda s: [*s, s[-1]]),
        "state.booster_ tree_sizes[3]: expected sizes that end each tree where the next begins; found 'end of "
        "trees' where 'Tree=3' should begin"),
}


_DRIVER = """
import contextlib, io, json, resource, sys
from fastslow.cli import main
import models.registry  # torch, LightGBM and the models: imported before any limit
plan = json.loads(sys.argv[1])
if plan["headroom"] is not None:
    size = [int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmSize:")][0] * 1024
    resource.setrlimit(resource.RLIMIT_AS, (size + plan["headroom"], size + plan["headroom"]))
results = []
for argv in plan["commands"]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            code = main(argv)
        except SystemExit as exc:
            code = exc.code
    results.append([code, err.getvalue()])
print(json.dumps(results))
"""
"""Runs several commands in one process of their own (one start of torch for all), the address space limited to
``headroom`` bytes above what the imports took, when given; prints each command's exit code and stderr."""


def _in_a_process(commands: list[list[object]], cwd: Path, headroom: int | None = None) -> list[tuple[int, str]]:
    """:data:`_DRIVER` on ``commands``, under :data:`HANG_SECONDS`: a command that hangs or ends the process
    (SIGABRT) fails the test instead of the test run."""
    plan = {"headroom": headroom, "commands": [[str(a) for a in argv] for argv in commands]}
    done = subprocess.run([sys.executable, "-c", _DRIVER, json.dumps(plan)], capture_output=True, text=True,
                          errors="replace", timeout=HANG_SECONDS, cwd=cwd)
    assert done.returncode == 0, done.stderr[-2000:]
    return [(code, err) for code, err in json.loads(done.stdout.splitlines()[-1])]


def test_a_booster_that_hung_or_crashed_lightgbm_is_refused_before_it_is_parsed(fitted, tile_file, tmp_path):
    """Each edit of :data:`NATIVE_FAILURES` in a process with a time limit: the hangs and aborts they gave would end
    it, not the test run."""
    cases = {}
    for k, case in enumerate(NATIVE_FAILURES):
        runs, path = _runs(fitted, tmp_path / str(k), "gbdt", _booster_edit(NATIVE_FAILURES[case][0]))
        cases[case] = runs, path, snapshot(runs)
    out = tmp_path / "out"
    out.mkdir()
    results = _in_a_process([_predict(tile_file, runs, out / "r.csv") for runs, _, _ in cases.values()], tmp_path)
    for (case, (runs, path, before)), (code, err) in zip(cases.items(), results, strict=True):
        assert code == EXIT_ERROR, (case, err)
        line = one_line(err)
        assert line.startswith(f"error: gbdt on tile:xla: {path}: {NATIVE_FAILURES[case][1]}"), (case, line)
        assert snapshot(runs) == before, case
    assert not any(out.iterdir())


SILENT: dict[str, tuple[Callable[[str], str], str]] = {
    "a split feature past the last column": (
        lambda t: _token(t, 0, "split_feature", 0, str(_LAST + 7)),
        f"state.booster_ (Tree=0) split_feature[0]: expected a whole number in [0, {_LAST}]; found '{_LAST + 7}'"),
    "a leaf index past the last leaf": (
        lambda t: _token(t, 0, "right_child", 1, "-9"),
        "state.booster_ (Tree=0) right_child[1]: expected a node in [1, 1] or a leaf as -1..-3 (never the root, 0); "
        "found '-9'"),
    "a leaf reached twice": (
        lambda t: _token(t, 0, "right_child", 1, "-2"),
        "state.booster_ (Tree=0) right_child[1]: expected a leaf no other split leads to; found leaf 1 again"),
    "a leaf value that is not a number": (
        lambda t: _token(t, 1, "leaf_value", 0, "nan"),
        "state.booster_ (Tree=1) leaf_value[0]: expected a finite number; found 'nan'"),
    "a threshold that is infinite": (
        lambda t: _token(t, 0, "threshold", 0, "inf"),
        "state.booster_ (Tree=0) threshold[0]: expected a finite number; found 'inf'"),
    "a categorical split": (
        lambda t: _token(t, 0, "decision_type", 0, "1"),
        "state.booster_ (Tree=0) decision_type[0]: expected a numerical split (bit 0 clear, missing type 0-2); "
        "found '1'"),
    "fewer leaf values than leaves": (
        lambda t: _set(t, 0, "leaf_value", "0.1 0.2"),
        "state.booster_ (Tree=0) leaf_value: expected 3 value(s) separated by single spaces; found 2"),
    "a header naming more features than the model": (
        lambda t: t.replace(f"max_feature_idx={_LAST}", f"max_feature_idx={_LAST + 11}", 1),
        f"state.booster_ max_feature_idx: expected {_LAST} (the model's {_LAST + 1} feature columns, less one); "
        f"found '{_LAST + 11}'"),
    "another objective": (
        lambda t: t.replace("objective=lambdarank", "objective=regression", 1),
        "state.booster_ objective: expected lambdarank; found 'regression'"),
    "a line LightGBM would not read": (
        lambda t: _set(t, 0, "shrinkage", "0.05\nextra=1"),
        "state.booster_ (Tree=0): expected only the keys"),
}


@pytest.mark.parametrize("case", list(SILENT))
def test_a_booster_that_was_ranked_silently_is_refused(case, fitted, tile_file, tmp_path, capsys):
    edit, message = SILENT[case]
    runs, path = _runs(fitted, tmp_path, "gbdt", _booster_edit(edit))
    out = tmp_path / "out"
    out.mkdir()
    line = _refused(_predict(tile_file, runs, out / "r.csv"), capsys, runs, out)
    assert line.startswith(f"error: gbdt on tile:xla: {path}: {message}"), line


def test_lightgbm_is_given_only_the_checked_trees_and_predicts_as_before(fitted, tile_file):
    path = fitted / "gbdt" / TILE.slug / "model.json"
    text = json.loads(path.read_text())["state"]["booster_"]
    checked = checked_model_string(text, 89)
    assert text.startswith(checked[:-len("end of trees\n")]) and checked.endswith("\nend of trees\n")
    assert "parameters:" in text and "parameters:" not in checked
    x = np.random.default_rng(0).normal(0, 100, size=(64, 89))
    np.testing.assert_array_equal(lightgbm.Booster(model_str=checked).predict(x),
                                  lightgbm.Booster(model_str=text).predict(x))
    graph = load_graph(tile_file, TILE)
    assert np.isfinite(load_model(path).predict(graph)).all()


def test_a_tree_of_one_leaf_is_taken_as_lightgbm_writes_it():
    """Constant columns give trees of one leaf, written with empty split arrays, which LightGBM never reads."""
    x = np.ones((100, 3))
    ranker = lightgbm.LGBMRanker(n_estimators=2, verbose=-1, n_jobs=1).fit(x, np.arange(100) % 5, group=[10] * 10)
    text = ranker.booster_.model_to_string()
    assert _leaves(text) == 1 and "\nleaf_weight=\n" in text
    probe = np.random.default_rng(0).normal(size=(8, 3))
    np.testing.assert_array_equal(lightgbm.Booster(model_str=checked_model_string(text, 3)).predict(probe),
                                  ranker.booster_.predict(probe))
    with pytest.raises(FieldError, match=r"^state\.booster_ \(Tree=0\) leaf_value\[0\]: expected a finite number; "
                                         r"found 'nan'$"):
        checked_model_string(_set(text, 0, "leaf_value", "nan"), 3)


@pytest.fixture(scope="module")
def deep_booster() -> str:
    """A LightGBM lambdarank string with trees of 8 leaves (nodes below nodes), on 5 random columns."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(400, 5))
    y = np.clip((x[:, 0] * 3 + rng.normal(size=400)).round() + 3, 0, 6).astype(int)
    ranker = lightgbm.LGBMRanker(n_estimators=2, num_leaves=8, min_child_samples=2, verbose=-1, n_jobs=1)
    ranker.fit(x, y, group=[40] * 10)
    text = ranker.booster_.model_to_string()
    assert _leaves(text) == 8
    return text


def _tree_of(text: str) -> tuple[list[int], list[int]]:
    return [int(t) for t in _get(text, 0, "left_child")], [int(t) for t in _get(text, 0, "right_child")]


def test_a_cycle_below_the_root_is_refused(deep_booster: str):
    left, right = _tree_of(deep_booster)
    assert checked_model_string(deep_booster, 5).endswith("end of trees\n")
    parent = {c: p for p in range(7) for c in (left[p], right[p]) if c >= 0}
    child = next(c for c in parent if parent[c] >= 1)  # a node whose parent is not the root
    side = "left_child" if left[child] >= 0 else "right_child"
    edited = _token(deep_booster, 0, side, child, str(parent[child]))
    with pytest.raises(FieldError, match=rf"^state\.booster_ \(Tree=0\) {side}\[{child}\]: expected a node no other "
                                         rf"split leads to \(one tree, no cycle\); found node {parent[child]} again$"):
        checked_model_string(edited, 5)


def test_nodes_that_only_reach_each_other_are_refused():
    """Each node is some split's child once, but nodes 1 and 2 lead to each other and not from the root."""
    rng = np.random.default_rng(1)
    x = rng.normal(size=(300, 3))
    ranker = lightgbm.LGBMRanker(n_estimators=1, num_leaves=4, min_child_samples=2, verbose=-1, n_jobs=1)
    ranker.fit(x, (x[:, 0] > 0).astype(int) + (x[:, 1] > 0), group=[30] * 10)
    text = ranker.booster_.model_to_string()
    assert _leaves(text) == 4
    text = _set(_set(text, 0, "left_child", "-1 2 1"), 0, "right_child", "-2 -3 -4")
    with pytest.raises(FieldError, match=r"^state\.booster_ \(Tree=0\): expected every node and leaf reached from the "
                                         r"root; found node 1 is not$"):
        checked_model_string(text, 3)


# --------------------------------------------------------------------------------------------------------------
# The GNN's state
# --------------------------------------------------------------------------------------------------------------


def _set_path(path: list[object], value: object) -> Callable[[dict], None]:
    def apply(state: dict) -> None:
        node = state
        for key in path[:-1]:
            node = node[key]
        if value is _DROP:
            del node[path[-1]]
        else:
            node[path[-1]] = value
    return apply


_DROP = object()

GNN_FIELDS: dict[str, tuple[Callable[[dict], None], str]] = {
    # silently read the last column
    "a kept column of -1": (
        lambda s: s["columns_"]["kept"].__setitem__(0, -1),
        "state.columns_.kept[0]: expected a whole number in [0, 164]; found -1"),
    # exit 3 with a traceback, each
    "a kept column past the last": (
        lambda s: s["columns_"]["kept"].__setitem__(-1, 10 ** 6),
        "state.columns_.kept[32]: expected a whole number in [0, 164]; found 1000000"),
    "settings that are a list": (
        _set_path(["settings_"], []), "state.settings_: expected an object; found a list of 0"),
    "weights without an entry": (
        _set_path(["weights_", "head.4.bias"], _DROP), "state.weights_: expected a key 'head.4.bias'; found none"),
    "weights of another shape": (
        _set_path(["weights_", "head.4.bias"], {"__ndarray__": [0.0, 1.0], "dtype": "<f4", "shape": [2]}),
        "state.weights_.head.4.bias.shape: expected [1]; found [2]"),
    "weights of the other kind's network": (
        _set_path(["settings_", "kind"], "layout"),
        "state.settings_.kind: expected 'tile', the kind of state.collection_ (tile:xla); found 'layout'"),
    "a column selection that is text": (
        _set_path(["columns_"], "all"), "state.columns_: expected an object; found 'all'"),
    "a state key that is a method's name": (
        _set_path(["predict"], 1), "state: expected keys among 15 known keys; found 'predict'"),
    "weights that are a list": (
        _set_path(["weights_"], [1, 2]), "state.weights_: expected an object; found a list of 2"),
    "a seed ensemble member more than its settings train": (
        _set_path(["members_"], [{"seed": 1}]), "state.members_: expected a list of at most 0; found a list of 1"),
    "refitted weights of another network": (
        _set_path(["refit_weights_"], {"x": 1}), "state.refit_weights_: expected a key 'opcode.weight'; found none"),
    # refused before, with a message naming no field
    "a feature count that is text": (
        _set_path(["settings_", "num_features"], "x"),
        "state.settings_.num_features: expected a whole number in [1, 100000]; found 'x'"),
    "a spread of 0": (
        lambda s: s["normalize_"]["std"].__setitem__(0, 0.0),
        "state.normalize_.std[0]: expected a finite number in [1e-06, 3.402823e+38]; found 0.0"),
    "a weight that is null (NaN)": (
        _set_path(["weights_", "head.4.bias"], {"__ndarray__": [None], "dtype": "<f4", "shape": [1]}),
        "state.weights_.head.4.bias.__ndarray__: expected finite numbers of dtype <f4; found 1 that are not"),
    "ragged weights": (
        _set_path(["weights_", "head.4.weight"], {"__ndarray__": [[0.0] * 7, [1.0]], "dtype": "<f4",
                                                  "shape": [1, 8]}),
        "state.weights_.head.4.weight.__ndarray__: expected nested lists of shape [1, 8]; found a list of 2 at "
        "depth 0"),
    "fit splits that are text": (
        _set_path(["fit_splits_"], "train"), "state.fit_splits_: expected a list; found 'train'"),
}


@pytest.mark.parametrize("case", list(GNN_FIELDS))
def test_a_gnn_field_that_does_not_fit_is_refused_naming_it(case, fitted, tile_file, tmp_path, capsys):
    edit, message = GNN_FIELDS[case]
    runs, path = _runs(fitted, tmp_path, "gnn", edit)
    out = tmp_path / "out"
    out.mkdir()
    line = _refused(_predict(tile_file, runs, out / "r.csv", "gnn"), capsys, runs, out)
    assert line.startswith(f"error: gnn on tile:xla: {path}: {message}"), line


DEFAULT_FIRST_FIELDS: dict[str, tuple[Callable[[dict], None], str]] = {
    "a spread below MIN_SPREAD": (
        lambda s: s["tile_spread_"]["__ndarray__"].__setitem__(0, 0.0),
        "state.tile_spread_: expected spreads of at least MIN_SPREAD (0.25); found 0.0"),
    "an infinite median": (
        lambda s: s["tile_center_"]["__ndarray__"].__setitem__(0, math.inf),
        "state.tile_center_: expected finite numbers, or null where no default had the feature; found 1 infinite"),
    "a median without its spread": (
        _set_path(["tile_spread_"], _DROP),
        "state.tile_spread_: expected the learned default's other half, beside state.tile_center_; found none"),
    "a median of another width": (
        _set_path(["tile_center_"], {"__ndarray__": [0.0], "dtype": "<f8", "shape": [1]}),
        "state.tile_center_.shape: expected [12]; found [1]"),
}


@pytest.mark.parametrize("case", list(DEFAULT_FIRST_FIELDS))
def test_a_default_first_field_that_does_not_fit_is_refused(case, fitted, tile_file, tmp_path, capsys):
    edit, message = DEFAULT_FIRST_FIELDS[case]
    runs, path = _runs(fitted, tmp_path, "default-first", edit)
    out = tmp_path / "out"
    out.mkdir()
    line = _refused(_predict(tile_file, runs, out / "r.csv", "default-first"), capsys, runs, out)
    assert line.startswith(f"error: default-first on tile:xla: {path}: {message}"), line


@pytest.mark.skipif(not Path("/proc/self/status").is_file(), reason="reads the address space from /proc")
def test_a_state_entry_declaring_a_huge_dtype_is_refused_before_anything_is_allocated(fitted, tile_file, tmp_path):
    """A 90-byte entry, ``dtype "(260000000,)f8"``, made numpy allocate gigabytes: refused from its declaration, with
    the address space limited to 1 GiB above what the imports take, which predicting with the intact run stays
    within."""
    entry = {"__ndarray__": [0], "dtype": "(260000000,)f8", "shape": [1]}
    assert len(json.dumps(entry)) < 100
    runs, path = _runs(fitted, tmp_path, "gnn", _set_path(["weights_", "head.4.bias"], entry))
    out = tmp_path / "out"
    out.mkdir()
    (good, _), (code, err) = _in_a_process([_predict(tile_file, fitted, out / "g.csv", "gnn"),
                                            _predict(tile_file, runs, out / "r.csv", "gnn")], tmp_path, 2 ** 30)
    assert good == 0 and code == EXIT_ERROR, err
    assert one_line(err).startswith(
        f"error: gnn on tile:xla: {path}: state.weights_.head.4.bias.dtype: expected a plain number type such as "
        "'<f4' or '<i8'; found '(260000000,)f8'")
    assert not (out / "r.csv").exists()


def test_an_array_is_checked_against_its_declaration_before_numpy_builds_it():
    with pytest.raises(FieldError, match=r"^w\.__ndarray__: expected nested lists of shape \[3\]; found a list of 2 at "
                                         r"depth 0$"):
        decode_array({"__ndarray__": [1, 2], "dtype": "<f8", "shape": [3]}, "w")
    with pytest.raises(FieldError, match=r"^w\.__ndarray__: expected items of dtype \|i1; found 300$"):
        decode_array({"__ndarray__": [1, 300], "dtype": "|i1", "shape": [2]}, "w")
    with pytest.raises(FieldError, match=r"^w\.dtype: expected a plain number type"):
        decode_array({"__ndarray__": [], "dtype": "O", "shape": [0]}, "w")
    assert decode_array({"__ndarray__": [[1.5, None]], "dtype": "<f4", "shape": [1, 2]}, "w").dtype == np.float32


# --------------------------------------------------------------------------------------------------------------
# Scores that are not finite
# --------------------------------------------------------------------------------------------------------------


def _gnn_weights_1e38(state: dict) -> None:
    for entry in state["weights_"].values():
        entry["__ndarray__"] = np.full(entry["shape"], 1e38).tolist()


def _gbdt_leaves_1e308(state: dict) -> None:
    text = state["booster_"]
    for tree in range(len(_blocks(text)[1])):
        text = _set(text, tree, "leaf_value", " ".join(["1e308"] * len(_get(text, tree, "leaf_value"))))
    state["booster_"] = text


def _default_center_1e308(state: dict) -> None:
    state["tile_center_"]["__ndarray__"] = [1e308] * len(state["tile_center_"]["__ndarray__"])


NON_FINITE = {"gnn": _gnn_weights_1e38, "gbdt": _gbdt_leaves_1e308, "default-first": _default_center_1e308}


@pytest.mark.filterwarnings("error")  # a warning would be a second line on the command line
@pytest.mark.parametrize("name", list(NON_FINITE))
def test_a_model_whose_scores_are_not_finite_is_refused_never_written(name, fitted, tile_file, tmp_path, capsys):
    """Finite weights whose scores overflow (the identity order was written with exit 0), for every model kind."""
    runs, path = _runs(fitted, tmp_path, name, NON_FINITE[name])
    out = tmp_path / "out"
    out.mkdir()
    line = _refused(_predict(tile_file, runs, out / "r.csv", name), capsys, runs, out)
    assert line == (f"error: {name} on tile:xla: {path} gave graph tile:xla:{tile_file.stem}: 10 of 10 scores are "
                    "not finite (NaN or infinite): a model whose scores are not finite ranks nothing; nothing written")


def test_submit_refuses_scores_that_are_not_finite(tiny_world, tmp_path, capsys, monkeypatch):
    from models.baselines import RandomModel

    monkeypatch.setattr(RandomModel, "predict", lambda self, graph: np.full(graph.num_configs, math.nan))
    out = tmp_path / "subs"
    code, _, err = run(["submit", "--data", tiny_world, "--models", "random", "--out-dir", out, "--runs-dir",
                        tmp_path / "runs", "--jobs", 1, "--no-progress"], capsys)
    assert code == EXIT_ERROR
    assert one_line(err).startswith("error: random on tile:xla, graph tile:xla:")
    assert "scores are not finite (NaN or infinite): a model whose scores are not finite ranks nothing" in err
    assert not list(out.glob("*.csv"))


# --------------------------------------------------------------------------------------------------------------
# ensemble.json
# --------------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ensemble_doc(tile_file) -> dict:
    """A fitted ensemble of gbdt and default-first for tile:xla, as ``submit`` saves it."""
    rng = np.random.default_rng(0)
    preds: dict[str, dict[str, np.ndarray]] = {"gbdt": {}, "default-first": {}}
    labels = {}
    for g in range(6):
        sid = f"tile:xla:k{g}"
        labels[sid] = rng.uniform(0.5, 2.0, 20)
        preds["gbdt"][sid] = labels[sid] + rng.normal(0, 0.3, 20)
        preds["default-first"][sid] = rng.random(20)
    return Ensemble(method="weighted", normalization="rank").fit(preds, labels).document()


def _submissions(folder: Path, doc: dict, *, raw: str | None = None) -> Path:
    """A submissions folder whose record says the ensemble in ``doc`` (or the text ``raw``) made it."""
    folder.mkdir(parents=True)
    (folder / ENSEMBLE_FILE).write_text(raw if raw is not None else json.dumps(doc))
    (folder / RECORD).write_text(json.dumps({"format": 1, "run": "r", "producer": "ensemble", "combined": 0.5,
                                             "scores": {"tile:xla": 0.5}, "protocol": "p", "data": "d"}))
    return folder


def _predict_by_record(tile_file: Path, runs: Path, subs: Path, out: Path) -> list[object]:
    return ["predict", tile_file, "--runs-dir", runs, "--submissions", subs, "--out", out, "--no-progress"]


def test_the_saved_ensemble_ranks(ensemble_doc, fitted, tile_file, tmp_path, capsys):
    subs = _submissions(tmp_path / "subs", ensemble_doc)
    code, text, err = run(_predict_by_record(tile_file, fitted, subs, tmp_path / "r.csv"), capsys)
    assert code == 0, err
    assert "the ensemble of gbdt, default-first; combined by" in text and (tmp_path / "r.csv").is_file()


def _state(edit: Callable[[dict], None]) -> Callable[[dict], dict]:
    def apply(doc: dict) -> dict:
        doc = json.loads(json.dumps(doc))
        edit(doc["state"])
        return doc
    return apply


def _weights(*values: float) -> Callable[[dict], None]:
    return lambda s: s["collections_"]["tile:xla"].__setitem__("weights", list(values))


ENSEMBLE_FIELDS: dict[str, tuple[Callable[[dict], dict], str]] = {
    "a NaN weight": (_state(_weights(math.nan, 1.0)),
                     "state.collections_.tile:xla.weights[0]: expected a finite number in [0, 1]; found nan"),
    "a weight of 1e308": (_state(_weights(1e308, 0.0)),
                          "state.collections_.tile:xla.weights[0]: expected a finite number in [0, 1]; found 1e+308"),
    "a negative weight": (_state(_weights(-0.5, 1.5)),
                          "state.collections_.tile:xla.weights[0]: expected a finite number in [0, 1]; found -0.5"),
    "weights that do not sum to 1": (_state(_weights(0.5, 0.2)),
                                     "state.collections_.tile:xla.weights: expected weights that sum to 1; found a "
                                     "sum of 0.7"),
    "a weight too few": (_state(_weights(1.0)),
                         "state.collections_.tile:xla.weights: expected a list of 2; found a list of 1"),
    "an unknown method": (_state(lambda s: s["collections_"]["tile:xla"].__setitem__("method", "magic")),
                          "state.collections_.tile:xla.method: expected one of 'weighted', 'best', 'mean', 'overall'; "
                          "found 'magic'"),
    "an unknown normalisation": (
        _state(lambda s: s["collections_"]["tile:xla"].__setitem__("normalization", "zscore")),
        "state.collections_.tile:xla.normalization: expected one of 'rank', 'minmax'; found 'zscore'"),
    "the same member twice": (_state(lambda s: s.__setitem__("models_", ["gbdt", "gbdt"])),
                              "state.models_[1]: expected each model once; found 'gbdt' again"),
    "an unknown method setting": (lambda d: {**d, "params": {**d["params"], "combine.method": "magic"}},
                                  "params: "),
}


@pytest.mark.parametrize("case", list(ENSEMBLE_FIELDS))
def test_an_ensemble_field_fit_never_leaves_is_refused(case, ensemble_doc, fitted, tile_file, tmp_path, capsys):
    edit, message = ENSEMBLE_FIELDS[case]
    subs = _submissions(tmp_path / "subs", edit(ensemble_doc))
    out = tmp_path / "out"
    out.mkdir()
    line = _refused(_predict_by_record(tile_file, fitted, subs, out / "r.csv"), capsys, subs, out)
    assert line.startswith(f"error: {subs / ENSEMBLE_FILE}: {message}"), line
    assert line.endswith("; give --submissions another folder, or name --models")


def test_a_member_outside_the_runs_folder_is_never_opened(ensemble_doc, fitted, tile_file, tmp_path, capsys):
    """``../evilroot/gbdt`` made predict open and parse a model.json beside the runs folder; such a run there (a
    working one) is refused unread."""
    runs = tmp_path / "runs"
    shutil.copytree(fitted, runs)
    shutil.copytree(fitted / "gbdt", tmp_path / "evilroot" / "gbdt")
    doc = _state(lambda s: s.__setitem__("models_", ["../evilroot/gbdt", "default-first"]))(ensemble_doc)
    subs = _submissions(tmp_path / "subs", doc)
    out = tmp_path / "out"
    out.mkdir()
    line = _refused(_predict_by_record(tile_file, runs, subs, out / "r.csv"), capsys, subs, out, tmp_path / "evilroot")
    assert line.startswith(f"error: {subs / ENSEMBLE_FILE}: state.models_[0]: expected one of 'default-first', "
                           "'gbdt', 'gnn', 'gnn-attn', 'random'; found '../evilroot/gbdt'"), line


def test_shell_text_in_a_name_is_refused_and_never_suggested_unquoted(ensemble_doc, fitted, tile_file, tmp_path,
                                                                       capsys):
    doc = _state(lambda s: s.__setitem__("models_", ["gbdt; touch pwned", "default-first"]))(ensemble_doc)
    subs = _submissions(tmp_path / "subs", doc)
    out = tmp_path / "out"
    out.mkdir()
    line = _refused(_predict_by_record(tile_file, fitted, subs, out / "r.csv"), capsys, subs, out)
    assert "found 'gbdt; touch pwned'" in line and "fastslow train" not in line
    # A runs folder of shell text, in the command a missing run suggests: quoted.
    runs = tmp_path / "runs $(touch pwned)"
    line = _refused(_predict(tile_file, runs, out / "r.csv"), capsys, out)
    assert line.endswith("; fit one with `fastslow train --model gbdt --collections tile:xla --runs-dir "
                         f"'{runs}'` or `fastslow submit --runs-dir '{runs}'`, or give --runs-dir"), line
    assert not (tmp_path / "pwned").exists()
