"""The suite is hermetic: what a user's checkout and environment hold does not reach a test."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PROBE = "tests/synthetic/test_world.py::test_a_world_of_an_older_generator_is_never_taken_for_current"


def test_each_test_starts_in_an_empty_folder_without_data_variables():
    assert "FASTSLOW_DATA" not in os.environ and not any(v.startswith("KAGGLE_") for v in os.environ)
    assert Path.cwd() != REPO and list(Path.cwd().iterdir()) == []


def test_a_test_that_resolves_the_default_data_passes_beside_make_submits_world(tiny_world: Path, tmp_path: Path):
    """Run from a folder that holds ``data/synthetic-demo`` (what ``make submit`` leaves) with ``$FASTSLOW_DATA``
    set, a test that resolves the default data still makes and uses its own world."""
    checkout = tmp_path / "checkout"
    (checkout / "data").mkdir(parents=True)
    (checkout / "data" / "synthetic-demo").symlink_to(tiny_world, target_is_directory=True)
    env = {**os.environ, "FASTSLOW_DATA": str(tiny_world), "KAGGLE_USERNAME": "someone", "KAGGLE_KEY": "0" * 32}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                           f"--rootdir={REPO}", str(REPO / PROBE)], cwd=checkout, env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "1 passed" in proc.stdout
