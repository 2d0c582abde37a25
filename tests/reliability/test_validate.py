"""``fastslow data validate`` finds what would later fail ``train`` or ``submit``; the reader skips hidden files and
refuses non-finite config features as it streams them."""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from competition.collections import Collection, Split
from competition.dataroot import find_data_root, hidden_files, list_graphs
from competition.errors import DataFileError
from competition.npzio import NpzReader, write_npz
from competition.reader import LayoutGraph, load_graph
from fastslow.cli import EXIT_PROBLEMS, main

TILE = Collection.TILE_XLA
NLP = Collection.LAYOUT_NLP_RANDOM
XLA = Collection.LAYOUT_XLA_DEFAULT


def _graphs(world: Path, c: Collection, split: Split) -> list[Path]:
    return list_graphs(find_data_root(world), c, split)


def _folder(world: Path, c: Collection, split: Split) -> Path:
    return find_data_root(world).collection_dir(c, split)


def _rewrite(path: Path, **changes: np.ndarray) -> None:
    with NpzReader(path) as r:
        arrays = {k: r.load(k) for k in r.keys()}
    arrays.update(changes)
    write_npz(path, arrays)


def _load(path: Path, key: str) -> np.ndarray:
    with NpzReader(path) as r:
        return r.load(key)


def _validate(world: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, list[str]]:
    code = main(["data", "validate", "--data", str(world), "--no-progress", *extra])
    out, err = capsys.readouterr()
    assert err == "" and "Traceback" not in out
    return code, out.splitlines()


# -- one damage per case: it returns the problem lines validate must print ---------------------------------------


def zero_train_runtimes(world: Path) -> list[str]:
    p = _graphs(world, TILE, Split.TRAIN)[0]
    n = _load(p, "config_runtime").size
    _rewrite(p, config_runtime=np.zeros(n, np.int64))
    return [f"tile:xla: {p} [config_runtime]: expected runtimes > 0 ns in a train file (only test files hide them "
            f"as all zeros); found all {n} runtimes are 0"]


def zero_valid_runtimes(world: Path) -> list[str]:
    p = _graphs(world, XLA, Split.VALID)[0]
    n = _load(p, "config_runtime").size
    _rewrite(p, config_runtime=np.zeros(n, np.int64))
    return [f"layout:xla:default: {p} [config_runtime]: expected runtimes > 0 ns in a valid file (only test files "
            f"hide them as all zeros); found all {n} runtimes are 0"]


def folder_named_npz(world: Path) -> list[str]:
    p = _folder(world, TILE, Split.TRAIN) / "x.npz"
    p.mkdir()
    return [f"tile:xla: {p}: expected an npz file; found a folder"]


def symlink_loop(world: Path) -> list[str]:
    p = _folder(world, TILE, Split.TRAIN) / "x.npz"
    p.symlink_to("x.npz")
    return [f"tile:xla: {p}: expected an npz file; found a symbolic link loop"]


def broken_link(world: Path) -> list[str]:
    p = _folder(world, XLA, Split.VALID) / "x.npz"
    p.symlink_to("nowhere.npz")
    return [f"layout:xla:default: {p}: expected an npz file; found a broken symbolic link"]


def nan_config_feat(world: Path) -> list[str]:
    p = _graphs(world, NLP, Split.TRAIN)[0]
    cfg = _load(p, "node_config_feat")
    cfg[1, 0, 3] = np.nan
    _rewrite(p, node_config_feat=cfg)
    return [f"layout:nlp:random: {p} [node_config_feat]: expected finite values; found nan at config 1, "
            "configurable node 0, column 3 (1 non-finite in all)"]


def inf_config_feat_test(world: Path) -> list[str]:
    p = _graphs(world, XLA, Split.TEST)[1]
    cfg = _load(p, "node_config_feat")
    cfg[-1, -1, -1] = -np.inf
    cfg[-1, 0, 0] = np.inf
    _rewrite(p, node_config_feat=cfg)
    return [f"layout:xla:default: {p} [node_config_feat]: expected finite values; found inf at config {len(cfg) - 1}, "
            "configurable node 0, column 0 (2 non-finite in all)"]


def nan_node_feat(world: Path) -> list[str]:
    p = _graphs(world, TILE, Split.TEST)[0]
    feat = _load(p, "node_feat")
    feat[0, 5] = np.nan
    _rewrite(p, node_feat=feat)
    return [f"tile:xla: {p} [node_feat]: expected finite values; found nan at node 0, column 5 (1 non-finite in all)"]


def missing_test_split(world: Path) -> list[str]:
    d = _folder(world, TILE, Split.TEST)
    stems = sorted(p.stem for p in list_graphs(find_data_root(world), TILE, Split.TEST))
    shutil.rmtree(d)
    return [f"{d}: expected tile:xla test graphs (the submission ranks them); found no such folder",
            f"{world / 'sample_submission.csv'}: expected a test file for every tile:xla ID listed; found "
            f"{len(stems)} ID(s) without one in {d}: {', '.join(stems)}"]


def missing_train_split(world: Path) -> list[str]:
    d = _folder(world, NLP, Split.TRAIN)
    shutil.rmtree(d)
    return [f"{d}: expected layout:nlp:random train graphs (models are fitted on them); found no such folder"]


def empty_valid_split(world: Path) -> list[str]:
    d = _folder(world, XLA, Split.VALID)
    for p in d.iterdir():
        p.unlink()
    return [f"{d}: expected layout:xla:default valid graphs (models are chosen and ensembled on them); found no "
            ".npz files"]


def _renamed(world: Path, name: str) -> Path:
    p = _graphs(world, TILE, Split.VALID)[0]
    return p.rename(p.with_name(name))


_NAME = ("expected a file name usable in a submission ID <collection>:<stem> (no ',', '\"', ':', control "
         "characters or surrounding spaces); found")


def comma_in_name(world: Path) -> list[str]:
    p = _renamed(world, "a,b.npz")
    return [f"{p}: {_NAME} ',' in 'a,b': rename the file"]


def quote_in_name(world: Path) -> list[str]:
    p = _renamed(world, 'a"b.npz')
    return [f"{p}: {_NAME} '\"' in 'a\"b': rename the file"]


def colon_in_name(world: Path) -> list[str]:
    p = _renamed(world, "a:b.npz")
    return [f"{p}: {_NAME} ':' in 'a:b': rename the file"]


def spaces_around_name(world: Path) -> list[str]:
    p = _renamed(world, " ab .npz")
    return [f"{p}: {_NAME} leading or trailing spaces in ' ab ': rename the file"]


def tab_in_name(world: Path) -> list[str]:
    p = _renamed(world, "a\tb.npz")
    return [f"{p}: {_NAME} '\\t' in 'a\\tb': rename the file"]


def sample_without_id_column(world: Path) -> list[str]:
    s = world / "sample_submission.csv"
    s.write_text(s.read_text().replace("ID,TopConfigs", "Id,TopConfigs", 1))
    return [f"{s}: expected a header with the column 'ID' (ID,TopConfigs); found the header Id,TopConfigs: no "
            "column 'ID'"]


def sample_lists_a_missing_graph(world: Path) -> list[str]:
    s = world / "sample_submission.csv"
    s.write_text(s.read_text() + "tile:xla:ffff,0\n")
    return [f"{s}: expected a test file for every tile:xla ID listed; found 1 ID(s) without one in "
            f"{_folder(world, TILE, Split.TEST)}: ffff"]


def sample_omits_a_graph(world: Path) -> list[str]:
    s = world / "sample_submission.csv"
    last = s.read_text().splitlines()[-1]
    s.write_text(s.read_text().replace(last + "\n", ""))
    stem = last.split(",")[0].split(":")[-1]
    return [f"{_folder(world, TILE, Split.TEST)}: expected only test graphs that sample_submission.csv lists; "
            f"found 1 it does not list: {stem}"]


def sample_repeats_an_id(world: Path) -> list[str]:
    s = world / "sample_submission.csv"
    lines = s.read_text().splitlines()
    s.write_text("\n".join([*lines, lines[1]]) + "\n")
    sid = lines[1].split(",")[0]
    return [f"{s}: expected each ID once; found {sid} on lines 2 and {len(lines) + 1}"]


def secret_missing(world: Path) -> list[str]:
    p = _graphs(world, NLP, Split.TEST)[0]
    folder = world / "secret" / NLP.relpath / "test"
    (folder / p.name).unlink()
    return [f"{folder}: expected a secret file for every layout:nlp:random test graph; found 1 missing: {p.stem}"]


CASES: dict[str, Callable[[Path], list[str]]] = {f.__name__: f for f in (
    zero_train_runtimes, zero_valid_runtimes, folder_named_npz, symlink_loop, broken_link, nan_config_feat,
    inf_config_feat_test, nan_node_feat, missing_test_split, missing_train_split, empty_valid_split, comma_in_name,
    quote_in_name, colon_in_name, spaces_around_name, tab_in_name, sample_without_id_column,
    sample_lists_a_missing_graph, sample_omits_a_graph, sample_repeats_an_id, secret_missing,
)}


@pytest.fixture()
def world(tiny_world: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(tiny_world, tmp_path / "world"))


def test_the_tiny_world_is_valid(tiny_world: Path, capsys: pytest.CaptureFixture[str]):
    assert _validate(tiny_world, capsys) == (0, ["30 files checked, 0 with problems"])


@pytest.mark.parametrize("case", list(CASES))
def test_validate_finds_what_train_or_submit_would_meet(case: str, world: Path, capsys: pytest.CaptureFixture[str]):
    expected = CASES[case](world)
    root = find_data_root(world)
    checked = sum(len(list_graphs(root, c, s)) for c in Collection for s in Split)
    code, lines = _validate(world, capsys)
    assert code == EXIT_PROBLEMS
    assert sorted(lines[:-1]) == sorted(expected)
    of_files = sum(line.startswith(tuple(f"{c.value}: " for c in Collection)) for line in expected)
    whole = len(expected) - of_files
    assert lines[-1] == (f"{checked} files checked, {of_files} with problems"
                         + (f"; {whole} problem(s) of the data root as a whole (listed first)" if whole else ""))


def test_quick_leaves_node_config_feat_to_the_reader(world: Path, capsys: pytest.CaptureFixture[str]):
    nan_config_feat(world)
    assert _validate(world, capsys, "--quick") == (0, ["30 files checked, 0 with problems"])


def test_deep_adds_the_layout_value_range(world: Path, capsys: pytest.CaptureFixture[str]):
    p = _graphs(world, NLP, Split.VALID)[0]
    cfg = _load(p, "node_config_feat")
    cfg[0, 0, 0] = 7
    _rewrite(p, node_config_feat=cfg)
    assert _validate(world, capsys)[0] == 0
    code, lines = _validate(world, capsys, "--deep")
    assert code == EXIT_PROBLEMS and lines[0] == (f"layout:nlp:random: {p} [node_config_feat]: expected integer "
                                                  "layout values in -1..5; found 7.0 at config 0, configurable "
                                                  "node 0, column 0 (1 such values in all)")


def test_a_folder_that_cannot_be_listed(world: Path, capsys: pytest.CaptureFixture[str],
                                        monkeypatch: pytest.MonkeyPatch):
    d = _folder(world, XLA, Split.TRAIN)
    real = Path.iterdir

    def iterdir(self: Path):
        if self == d:
            raise PermissionError(13, "Permission denied", str(self))
        return real(self)

    monkeypatch.setattr(Path, "iterdir", iterdir)
    code, lines = _validate(world, capsys)
    assert code == EXIT_PROBLEMS
    assert lines[0] == f"{d}: expected a folder that can be listed; found it cannot be (Permission denied)"


def test_a_root_without_graphs_of_the_collections_asked(world: Path, capsys: pytest.CaptureFixture[str]):
    shutil.rmtree(world / "npz_all" / "npz" / "layout" / "xla")
    code, lines = _validate(world, capsys, "--collections", "layout:xla:default", "layout:xla:random")
    assert code == EXIT_PROBLEMS
    assert lines[0] == (f"{world / 'npz_all' / 'npz'}: expected graph files (.npz) in at least one collection; found "
                        "none in layout:xla:default, layout:xla:random")


def test_a_world_of_some_collections_only_is_valid(world: Path, capsys: pytest.CaptureFixture[str]):
    """Absent collections are not missing splits: a partial world (synth --collections) validates."""
    shutil.rmtree(world / "npz_all" / "npz" / "layout")
    shutil.rmtree(world / "secret" / "layout")
    sample = world / "sample_submission.csv"
    sample.write_text("".join(line for line in sample.read_text().splitlines(keepends=True)
                              if not line.startswith("layout:")))
    assert _validate(world, capsys) == (0, ["6 files checked, 0 with problems"])


# -- hidden files --------------------------------------------------------------------------------------------------


def test_hidden_files_are_skipped_everywhere_with_one_note(world: Path, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]):
    places = ((TILE, Split.TRAIN), (TILE, Split.TEST), (NLP, Split.VALID))
    forks = [_folder(world, c, s) / "._x.npz" for c, s in places]
    for p in forks:
        p.write_bytes(b"\x00\x05\x16\x07 AppleDouble")
    root = find_data_root(world)
    assert hidden_files(root) == forks  # collection by collection, split by split
    assert all(p.name != "._x.npz" for c in Collection for s in Split for p in list_graphs(root, c, s))
    note = (f"note: skipped 3 hidden file(s) (names starting with '.', such as macOS ._x.npz resource forks): "
            f"{forks[0]} and 2 more")
    assert _validate(world, capsys) == (0, [note, "30 files checked, 0 with problems"])
    assert main(["data", "stats", str(world), "--no-progress", "--collections", "tile:xla"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1] == (f"note: skipped 2 hidden file(s) (names starting with '.', such as macOS ._x.npz resource "
                      f"forks): {forks[0]} and 1 more")
    assert main(["train", "--data", str(world), "--model", "default-first", "--collections", "tile:xla",
                 "--runs-dir", str(tmp_path / "runs"), "--no-progress"]) == 0
    assert "tile:xla" in capsys.readouterr().out


# -- the reader refuses non-finite config features as it streams them --------------------------------------------


def test_streamed_configs_refuse_nan_naming_file_key_and_config(world: Path):
    p = _graphs(world, NLP, Split.TRAIN)[0]
    cfg = _load(p, "node_config_feat")
    cfg[3, 1, 7] = np.nan
    _rewrite(p, node_config_feat=cfg)
    g = load_graph(p, NLP)  # the arrays loaded up front are fine: nothing is streamed yet
    assert isinstance(g, LayoutGraph)
    found = "nan at config 3, configurable node 1, column 7"
    message = f"{p} [node_config_feat]: expected finite values (`fastslow data validate` lists every such file); "
    with pytest.raises(DataFileError, match=f"^{re.escape(message + 'found ' + found)}$"):
        g.config_features()
    with pytest.raises(DataFileError, match=found):
        list(g.iter_config_blocks(block_rows=2))
    g.config_features([0, 1, 2])  # rows without the NaN read fine
    sub = g.select_configs(np.array([1, 3]))
    with pytest.raises(DataFileError, match=found):  # the file's config index, not the subset's position
        list(sub.iter_config_blocks())
    with pytest.raises(DataFileError, match=found):
        sub.config_features([1])
    unchecked = load_graph(p, NLP, validate=False)
    assert np.isnan(unchecked.config_features()[3, 1, 7])


def test_train_stops_at_nan_config_features_with_a_clear_error(world: Path, tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]):
    p = _graphs(world, NLP, Split.TRAIN)[0]
    cfg = _load(p, "node_config_feat")
    cfg[0, 0, 0] = np.inf
    _rewrite(p, node_config_feat=cfg)
    code = main(["train", "--data", str(world), "--model", "gbdt", "--collections", "layout:nlp:random",
                 "--param", "n_estimators=2", "--runs-dir", str(tmp_path / "runs"), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert err.splitlines()[-1] == (f"error: {p} [node_config_feat]: expected finite values (`fastslow data "
                                    "validate` lists every such file); found inf at config 0, configurable node 0, "
                                    "column 0")
    assert not os.path.exists(tmp_path / "runs" / "gbdt" / "layout-nlp-random" / "model.json")
