"""Refusals of the third reliability round: a world of no graphs, a CUDA device this torch cannot use, and JSON or
TOML files nested thousands deep, each refused in one line (exit 2) before anything is written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from competition.nesting import MAX_JSON_DEPTH, MAX_TOML_DEPTH, json_loads, too_deep
from fastslow.cli import EXIT_ERROR
from tests.reliability.helpers import one_line, run, snapshot

DEEP = 5000
"""Far deeper than Python's recursion limit: what ended in a RecursionError's traceback."""


# 1. data synth --limit below 1

@pytest.mark.parametrize(("flag", "value"), [("--limit", "0"), ("--limit", "-1"), ("--tile-limit", "0"),
                                             ("--limit", "two")])
def test_a_limit_below_one_is_refused_before_anything_is_written(flag, value, tmp_path: Path, capsys):
    out = tmp_path / "world"
    code, _, err = run(["data", "synth", "--scale", "tiny", "--out", out, flag, value, "--workers", 1,
                        "--no-progress"], capsys)
    assert code == EXIT_ERROR
    assert one_line(err) == f"error: {flag}: expected a whole number of at least 1; found {value!r}"
    assert not out.exists()


def test_generate_world_refuses_a_limit_below_one_too(tmp_path: Path):
    from competition.synthetic.world import generate_world

    with pytest.raises(ValueError, match="tile_limit: expected a whole number of at least 1; found 0"):
        generate_world(tmp_path / "w", scale="tiny", limit=2, tile_limit=0, workers=1, progress=False)
    assert not (tmp_path / "w").exists()


# 2. run.device='cuda' on a torch or machine without CUDA

@pytest.mark.skipif(torch.cuda.device_count() > 0, reason="this machine has a CUDA device")
@pytest.mark.parametrize(("command", "model", "device"), [("train", "gnn-attn", "cuda"), ("submit", "gnn", "cuda:0")])
def test_a_cuda_device_without_cuda_is_refused_before_any_work(command, model, device, tiny_world: Path,
                                                               tmp_path: Path, capsys):
    """The refusal comes before any fit: nothing written, the data untouched."""
    before = snapshot(tiny_world)
    runs, out = tmp_path / "runs", tmp_path / "out"
    argv = [command, "--data", tiny_world, "--runs-dir", runs, "--no-progress", "--param", f"{model}.run.device={device}"]
    argv += ["--model", model] if command == "train" else ["--models", model, "--out-dir", out]
    code, _, err = run(argv, capsys)
    assert code == EXIT_ERROR, err
    line = one_line(err)
    assert line.startswith(f"error: fastslow {command}: --param {model}.run.device={device}: ")
    why = ("has no CUDA" if not torch.backends.cuda.is_built() else "this machine has no CUDA device")
    assert f"run.device {device!r}: " in line and why in line and "use 'cpu' or 'auto'" in line
    assert not runs.exists() and not out.exists()
    assert snapshot(tiny_world) == before


def test_cpu_and_auto_stay_allowed():
    from models.gnn.config import _is_device

    assert _is_device("cpu") is True and _is_device("auto") is True and _is_device("tpu!") is False


# 3. JSON and TOML nested thousands deep

def test_the_scan_counts_brackets_outside_strings_only():
    assert too_deep('{"a": "' + "[" * 100 + '"}', 3) is None
    assert too_deep('["\\"[[[[", [[1]]]', 3) is None
    assert too_deep("[[[[1]]]]", 3) == 3
    assert too_deep('a = "[[[[" # [[[[\nb = [[1]]\n', 2, toml=True) is None
    assert too_deep("a = '''\n[[[[\n'''\nb = [[[1]]]\n", 2, toml=True) == 23
    assert json_loads("[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH) is not None
    with pytest.raises(json.JSONDecodeError, match=f"nested deeper than {MAX_JSON_DEPTH}"):
        json_loads("[" * (MAX_JSON_DEPTH + 1) + "]" * (MAX_JSON_DEPTH + 1))


def test_a_deep_model_json_is_refused_by_predict(tiny_world: Path, tmp_path: Path, capsys):
    runs = tmp_path / "runs"
    model = runs / "default-first" / "tile-xla" / "model.json"
    model.parent.mkdir(parents=True)
    model.write_text("[" * DEEP + "]" * DEEP)
    before, out = snapshot(runs), tmp_path / "out.csv"
    code, _, err = run(["predict", "--data", tiny_world, "--split", "valid", "--models", "default-first",
                        "--runs-dir", runs, "--out", out, "--no-progress"], capsys)
    assert code == EXIT_ERROR
    line = one_line(err)
    assert line.startswith(f"error: default-first on tile:xla: {model}: expected a saved model (JSON); found "
                           f"invalid JSON (nested deeper than {MAX_JSON_DEPTH} arrays or objects (MAX_JSON_DEPTH)")
    assert snapshot(runs) == before and not out.exists()


def test_a_deep_index_file_is_refused(tiny_world: Path, tmp_path: Path, perfect: Path, capsys):
    indices = tmp_path / "indices"
    indices.mkdir()
    deep = indices / "xla_default.json"
    deep.write_text('{"g": ' + "[" * DEEP + "]" * DEEP + "}")
    board = tmp_path / "lb.csv"
    code, _, err = run(["score", perfect, "--data", tiny_world, "--valid-indices", indices, "--leaderboard", board],
                       capsys)
    assert code == EXIT_ERROR
    assert one_line(err) == (f"error: {deep}: expected JSON mapping graph names to lists of config indices; found "
                             f"invalid JSON (line 1, column {6 + MAX_JSON_DEPTH}: nested deeper than "
                             f"{MAX_JSON_DEPTH} arrays or objects (MAX_JSON_DEPTH), deeper than any file fastslow "
                             "writes)")
    assert not board.exists()


@pytest.mark.parametrize("value", ["[" * DEEP + "1" + "]" * DEEP, "{a = " * DEEP + "1" + "}" * DEEP])
def test_a_deep_config_file_is_refused(value: str, tiny_world: Path, tmp_path: Path, capsys):
    config = tmp_path / "params.toml"
    config.write_text(f"x = {value}\n")
    runs = tmp_path / "runs"
    code, _, err = run(["train", "--data", tiny_world, "--model", "random", "--config", config, "--runs-dir", runs,
                        "--no-progress"], capsys)
    assert code == EXIT_ERROR
    column = 5 + MAX_TOML_DEPTH * (1 if value[0] == "[" else 5)
    what = "an array" if value[0] == "[" else "an inline table"
    assert one_line(err) == (f"error: fastslow train: --config {config}: expected TOML; found invalid TOML (nested "
                             f"{DEEP:,} tables, arrays or inline tables deep, deeper than the limit of "
                             f"{MAX_TOML_DEPTH} (MAX_TOML_DEPTH): {what} passes it at line 1, column {column})")
    assert not runs.exists()
