"""The README's end-to-end example: a JAX program lowered, featurized, validated and ranked by a saved model
(examples/rank_a_jax_program.py), run as a user runs it."""

from __future__ import annotations

import csv
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from fastslow.cli import main

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "rank_a_jax_program.py"


@pytest.mark.slow
def test_a_jax_program_is_ranked_by_a_saved_model(tiny_world: Path, tmp_path: Path):
    if importlib.util.find_spec("jax") is None:  # the example imports it, in a process of its own
        pytest.skip("could not import 'jax'")
    runs = tmp_path / "runs"
    assert main(["train", "--data", str(tiny_world), "--model", "gbdt", "--collections", "layout:xla:random",
                 "--runs-dir", str(runs), "--param", "run.n_jobs=1", "--no-progress"]) == 0
    out = tmp_path / "rankings.csv"
    done = subprocess.run([sys.executable, str(EXAMPLE), "--runs-dir", str(runs), "--models", "gbdt",
                           "--sample", "20", "--out", str(out)], capture_output=True, text=True, timeout=300,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "1 files checked, 0 with problems" in done.stdout
    with out.open() as f:
        rows = list(csv.DictReader(f))
    assert [r["ID"] for r in rows] == ["layout:xla:random:my_program"]
    ranking = [int(v) for v in rows[0]["Ranking"].split(";")]
    assert sorted(ranking) == list(range(21))  # the default layout and 20 sampled ones, each once
