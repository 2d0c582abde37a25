"""Refusals of the third reliability round: a world of no graphs, a CUDA device this torch cannot use, and JSON or
TOML files nested thousands deep, each refused in one line (exit 2) before anything is written."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from competition.cli import EXIT_ERROR
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
                                                               tmp_path: Path):
    """In a process of its own, as a user runs it, with a tight timeout: the refusal comes before any fit."""
    before = snapshot(tiny_world)
    runs, out = tmp_path / "runs", tmp_path / "out"
    argv = [sys.executable, "-m", "competition", command, "--data", str(tiny_world), "--runs-dir", str(runs),
            "--no-progress", "--param", f"{model}.run.device={device}"]
    argv += ["--model", model] if command == "train" else ["--models", model, "--out-dir", str(out)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == EXIT_ERROR, done.stderr
    line = one_line(done.stderr)
    assert line.startswith(f"error: fastslow {command}: --param {model}.run.device={device}: ")
    why = ("has no CUDA" if not torch.backends.cuda.is_built() else "this machine has no CUDA device")
    assert f"run.device {device!r}: " in line and why in line and "use 'cpu' or 'auto'" in line
    assert not runs.exists() and not out.exists()
    assert snapshot(tiny_world) == before


def test_cpu_and_auto_stay_allowed():
    from models.gnn.config import _is_device

    assert _is_device("cpu") is True and _is_device("auto") is True and _is_device("tpu!") is False
