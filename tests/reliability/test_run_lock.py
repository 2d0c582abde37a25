"""A run folder is held by one live run at a time: a second run into it is refused with a message naming the other
run, before any work, and the first run's files are left as they were."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from competition.dataset import open_collection
from competition.runlock import FolderBusy, hold_run_folder, lock_path
from fastslow.cli import EXIT_ERROR, EXIT_OK
from models.base import load_model
from tests.reliability.helpers import run, snapshot

HOLDER = """
import sys, time
from competition.runlock import hold_run_folder
with hold_run_folder(sys.argv[1]):
    print("held", flush=True)
    time.sleep(600)
"""


@pytest.fixture()
def holder(tmp_path: Path):
    """Start another process that holds a folder: ``hold(folder)`` returns it once the folder is held."""
    procs: list[subprocess.Popen] = []

    def hold(folder: Path) -> subprocess.Popen:
        proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(folder)], stdout=subprocess.PIPE, text=True,
                                cwd=Path(__file__).resolve().parents[2])
        procs.append(proc)
        assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
        return proc

    yield hold
    for proc in procs:
        proc.kill()
        proc.wait()


def test_a_second_train_into_a_held_run_folder_is_refused(tiny_world: Path, tmp_path: Path, holder,
                                                          capsys: pytest.CaptureFixture[str]):
    runs = tmp_path / "runs"
    args = ["train", "--data", tiny_world, "--model", "default-first", "--collections", "tile:xla", "--runs-dir",
            runs, "--no-progress"]
    assert run(args, capsys)[0] == EXIT_OK
    folder = runs / "default-first" / "tile-xla"
    before = snapshot(folder)
    other = holder(folder)
    code, _, err = run(args, capsys)
    assert code == EXIT_ERROR and err.count("\n") == 1 and "Traceback" not in err
    assert str(folder) in err and "in use by another run" in err and f"process {other.pid}" in err
    assert snapshot(folder) == before
    # Once the other run ends (killed, here), the folder is free at once.
    other.send_signal(signal.SIGKILL)
    other.wait()
    assert run(args, capsys)[0] == EXIT_OK


@pytest.mark.slow
def test_two_concurrent_trains_lose_no_model(tiny_world: Path, tmp_path: Path):
    """Two real runs with different settings started together: each either saves its model or is refused with the
    other named; never two "saved" lines for one model file."""
    runs = tmp_path / "runs"
    cmd = [sys.executable, "-m", "fastslow.cli", "train", "--data", str(tiny_world), "--model", "random",
           "--collections", "tile:xla", "--runs-dir", str(runs), "--no-progress"]
    procs = [subprocess.Popen([*cmd, "--param", f"random.seed={s}"], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, cwd=Path(__file__).resolve().parents[2])
             for s in (1, 2)]
    results = [(p.wait(timeout=300), p.stdout.read(), p.stderr.read()) for p in procs]
    saved = [r for r in results if r[0] == 0]
    refused = [r for r in results if r[0] != 0]
    assert saved, results
    for code, _, err in refused:
        assert code == EXIT_ERROR and "in use by another run" in err and "Traceback" not in err
    # Whoever saved last, the file is one whole model of one of the two runs.
    assert load_model(runs / "random" / "tile-xla" / "model.json").config.scores.seed in (1, 2)


def test_the_same_process_may_take_a_folder_again(tmp_path: Path):
    with hold_run_folder(tmp_path / "r") as folder, hold_run_folder(folder):
        assert lock_path(folder).is_file() and not list(folder.iterdir())
    # Released: another process may hold it now.
    out = subprocess.run([sys.executable, "-c", HOLDER.replace("time.sleep(600)", "pass"), str(tmp_path / "r")],
                         capture_output=True, text=True, cwd=Path(__file__).resolve().parents[2], timeout=120)
    assert out.stdout.strip() == "held", out.stderr


def test_a_held_folder_refuses_in_process_callers_too(tmp_path: Path, holder):
    holder(tmp_path / "r")
    with pytest.raises(FolderBusy, match=f"{tmp_path / 'r'}: in use by another run"):
        with hold_run_folder(tmp_path / "r"):
            pass


def test_a_gnn_fit_holds_its_run_folder(tiny_world: Path, tmp_path: Path, holder):
    from competition.collections import Collection
    from competition.dataroot import find_data_root
    from models.gnn.model import GNNModel

    holder(tmp_path / "runs" / "gnn" / "tile-xla")
    model = GNNModel(runs_dir=str(tmp_path / "runs"), cache_dir=str(tmp_path / "cache"), epochs=1)
    start = time.monotonic()
    with pytest.raises(FolderBusy, match="in use by another run"):
        model.fit(open_collection(find_data_root(tiny_world), Collection.TILE_XLA), progress=False)
    assert time.monotonic() - start < 60 and not (tmp_path / "cache").exists()
    assert os.listdir(tmp_path / "runs" / "gnn" / "tile-xla") == []
