"""A really full file system under every writer: the feature cache and the GNN's checkpoints (``torch.save``), the
GBDT's model (LightGBM's text), the synthetic world (npz), the leaderboard (CSV). Each ends in one line naming what
could not be written, exit 2, nothing written before damaged, no temporary left; once space is freed, the same
command succeeds.

The file system is a small tmpfs mounted for the test (root, or root of a user and mount namespace of its own:
the test then runs again inside ``unshare -rm``).
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pytest
import torch

from competition.atomic import atomic_write_stream
from fastslow.cli import EXIT_ERROR
from tests.reliability.helpers import run

FULL = "no space left on the device: free some space and re-run the same command"
SIZE = 8 * 1024 * 1024
IN_NAMESPACE = "FASTSLOW_TEST_IN_NAMESPACE"
GNN = ["--model", "gnn", "--param", "epochs=1", "--param", "hidden=8", "--param", "seeds=1", "--no-progress"]


class SmallFs:
    """A mounted tmpfs that can be filled up to a few bytes."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.filler = path / "filler.bin"

    def available(self) -> int:
        st = os.statvfs(self.path)
        return st.f_bavail * st.f_frsize

    def fill(self, leave: int) -> None:
        """Write zeros (a sparse file would take no space) until only ``leave`` bytes are free."""
        block = bytes(1 << 20)
        with open(self.filler, "ab") as f:
            while (gap := self.available() - leave) > 0:
                try:
                    f.write(block[:gap])
                    f.flush()
                except OSError as exc:
                    assert exc.errno == errno.ENOSPC
                    break
        assert self.available() <= leave

    def free(self) -> None:
        self.filler.unlink()


def _mount(point: Path) -> str | None:
    """Mount a tmpfs on ``point``; ``None`` if done, else why not."""
    if shutil.which("mount") is None:
        return "no mount command"
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={SIZE}", "tmpfs", str(point)], capture_output=True,
                          text=True)
    return None if done.returncode == 0 else (done.stderr.strip() or f"mount exited {done.returncode}")


def _unmount(point: Path) -> None:
    if subprocess.run(["umount", str(point)], capture_output=True).returncode != 0:
        subprocess.run(["umount", "-l", str(point)], capture_output=True)


@pytest.fixture()
def small_fs(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SmallFs | None]:
    """A tmpfs of :data:`SIZE` bytes; ``None`` when the test could only run in a namespace of its own, where it
    was run (and passed) already."""
    point = tmp_path / "small"
    point.mkdir()
    why = _mount(point)
    if why is None:
        try:
            yield SmallFs(point)
        finally:
            _unmount(point)
        return
    if os.environ.get(IN_NAMESPACE):
        pytest.fail(f"cannot mount a tmpfs even as root of a user namespace: {why}")
    if shutil.which("unshare") is None or subprocess.run(["unshare", "-rm", "true"], capture_output=True).returncode:
        pytest.skip(f"needs a small file system: mounting a tmpfs failed ({why}) and `unshare -rm` (a user and mount "
                    "namespace, where mounting is allowed) is not available")
    inner = subprocess.run(["unshare", "-rm", sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider",
                            request.node.nodeid], cwd=request.config.rootpath, env={**os.environ, IN_NAMESPACE: "1"},
                           capture_output=True, text=True, timeout=1200)
    if inner.returncode != 0:
        pytest.fail(f"in a user namespace (`unshare -rm`):\n{inner.stdout[-6000:]}\n{inner.stderr[-2000:]}")
    yield None


class Done(NamedTuple):
    returncode: int
    stderr: str


def fastslow(capsys: pytest.CaptureFixture[str], *argv: object) -> Done:
    """One command in this process (the test itself runs in a process of its own where it needs a namespace):
    its exit code and stderr."""
    code, _, err = run(list(argv), capsys)
    return Done(code, err)


def one_line(proc: Done) -> str:
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.endswith("\n") and proc.stderr.count("\n") == 1, proc.stderr
    return proc.stderr.rstrip("\n")


def succeeded(proc: Done) -> bool:
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.returncode == 0


def files(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` but the filler, by relative path."""
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and p.name != "filler.bin"}


def temporaries(root: Path) -> list[Path]:
    return [p for p in root.rglob("*.part")]


@pytest.mark.slow
def test_the_feature_cache_on_a_full_disk(small_fs, tiny_world, tmp_path, capsys):
    if small_fs is None:
        return  # ran whole in a user namespace
    cache = small_fs.path / "cache"
    runs = tmp_path / "runs"
    assert succeeded(fastslow(capsys, "train", "--data", tiny_world, "--collections", "tile:xla", "--runs-dir", runs,
                              "--param", f"cache_dir={cache}", *GNN))
    before = files(cache)
    small_fs.fill(leave=8192)  # room for the pipeline's description, not for a cached graph (32 KB and more)
    argv = ["train", "--data", tiny_world, "--collections", "layout:xla:default", "--runs-dir", runs, "--param",
            f"cache_dir={cache}", *GNN]
    failed = fastslow(capsys, *argv)
    assert failed.returncode == EXIT_ERROR
    message = one_line(failed)
    assert message.startswith(f"error: {cache}/layout-xla-default/train/") and message.endswith(f".pt: {FULL}")
    after = files(cache)
    assert {k: after[k] for k in before} == before
    assert temporaries(cache) == []
    small_fs.free()
    assert succeeded(fastslow(capsys, *argv))
    assert temporaries(cache) == []


@pytest.mark.slow
def test_a_checkpoint_on_a_full_disk(small_fs, tiny_world, tmp_path, capsys):
    if small_fs is None:
        return  # ran whole in a user namespace
    argv = ["train", "--data", tiny_world, "--collections", "tile:xla", "--param", f"cache_dir={tmp_path / 'cache'}",
            *GNN]
    first, second = small_fs.path / "r1", small_fs.path / "r2"
    assert succeeded(fastslow(capsys, *argv, "--runs-dir", first))
    before = files(first)
    small_fs.fill(leave=16384)  # room for the run's settings, not for its checkpoint (100 KB and more)
    failed = fastslow(capsys, *argv, "--runs-dir", second)
    assert failed.returncode == EXIT_ERROR
    assert one_line(failed) == f"error: {second}/gnn/tile-xla/checkpoint.pt: {FULL}"
    assert files(first) == before
    assert temporaries(small_fs.path) == []
    small_fs.free()
    assert succeeded(fastslow(capsys, *argv, "--runs-dir", second))
    assert (second / "gnn" / "tile-xla" / "model.json").is_file() and temporaries(small_fs.path) == []


@pytest.mark.slow
def test_lightgbm_numpy_and_csv_writers_on_a_full_disk(small_fs, tiny_world, perfect, tmp_path, capsys):
    """The GBDT's model is LightGBM's text, written by us (LightGBM writes no file of its own); worlds are npz;
    the leaderboard is CSV."""
    if small_fs is None:
        return  # ran whole in a user namespace
    board = small_fs.path / "lb.csv"
    score = ["score", perfect, "--data", tiny_world, "--leaderboard", board]
    assert succeeded(fastslow(capsys, *score))
    before = files(small_fs.path)
    small_fs.fill(leave=0)
    commands = {
        "--runs-dir": ["train", "--data", tiny_world, "--model", "gbdt", "--collections", "tile:xla", "--runs-dir",
                       small_fs.path / "runs", "--no-progress"],
        "--out": ["data", "synth", "--scale", "tiny", "--limit", "1", "--out", small_fs.path / "world", "--workers",
                  "1", "--no-progress"],
        "--leaderboard": score,
    }
    for flag, argv in commands.items():
        failed = fastslow(capsys, *argv)
        assert failed.returncode == EXIT_ERROR, failed.stderr
        assert one_line(failed) == f"error: {flag} {argv[argv.index(flag) + 1]}: {FULL}"
    after = files(small_fs.path)
    assert {k: after[k] for k in before} == before and temporaries(small_fs.path) == []
    small_fs.free()
    for argv in commands.values():
        assert succeeded(fastslow(capsys, *argv))
    assert temporaries(small_fs.path) == []


def test_torch_save_through_our_writer_raises_the_disk_error(small_fs):
    """``torch.save`` onto a full disk raises ``RuntimeError: ... unexpected pos``; through
    :func:`atomic_write_stream` the OSError itself, naming the file, and the previous file stays whole."""
    if small_fs is None:
        return  # ran whole in a user namespace
    path = small_fs.path / "state.pt"
    atomic_write_stream(path, lambda f: torch.save({"w": torch.arange(10)}, f))
    before = path.read_bytes()
    small_fs.fill(leave=4096)
    big = {"w": torch.from_numpy(np.random.default_rng(0).random(100_000))}
    with pytest.raises(OSError) as caught:
        atomic_write_stream(path, lambda f: torch.save(big, f))
    assert caught.value.errno == errno.ENOSPC and caught.value.filename == str(path)
    assert path.read_bytes() == before and temporaries(small_fs.path) == []
    small_fs.free()
    atomic_write_stream(path, lambda f: torch.save(big, f))
    assert torch.equal(torch.load(path, weights_only=True)["w"], big["w"])


def test_an_error_a_serializer_swallows_is_raised_as_it_was(tmp_path):
    """A serializer that catches the failure of a write and reports its own error instead (as torch.save does):
    the failure itself is raised, and nothing is put in place."""
    path = tmp_path / "x.bin"

    def swallowing(f):
        try:
            f.write("text, where bytes are expected")
        except TypeError:
            pass
        raise RuntimeError("unexpected pos 128 vs 0")

    with pytest.raises(TypeError):
        atomic_write_stream(path, swallowing)

    def going_on(f):
        try:
            f.write("text")
        except TypeError:
            pass
        f.write(b"rest")

    with pytest.raises(TypeError):
        atomic_write_stream(path, going_on)
    assert list(tmp_path.iterdir()) == []
