"""Paths at the edges: file arguments that are no regular file (a FIFO, a device, a socket, a folder) are refused
before anything opens them, and names at the file system's limits (255 bytes, a temporary's additions, PATH_MAX)
either work or end in one line naming the path."""

from __future__ import annotations

import os
import shutil
import socket
import stat
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from competition.atomic import (
    _temp_prefix,
    atomic_write_text,
    exclusive_lock,
    remove_stale_temps,
    special_file,
    temp_sibling,
)
from competition.collections import Collection, Split
from competition.dataroot import find_data_root, list_graphs
from fastslow.board import read_rows
from fastslow.cli import EXIT_ERROR, EXIT_PROBLEMS
from tests.reliability.helpers import one_line, run

TOO_LONG = "file name too long: choose a shorter path"


def _unblock_later(fifo: Path, stop: threading.Event, after: float = 30.0) -> None:
    """Should a reader wait on ``fifo`` (the bug under test), open and close its other end: the reader then gets
    end-of-file and the test fails instead of hanging."""
    if stop.wait(after):
        return
    try:
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
    except OSError:  # no reader: nothing waits
        pass


@pytest.fixture()
def special(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """A FIFO, a character device (a copy of /dev/null's: root only) or a bound socket in ``tmp_path``, and what an
    error calls it."""
    kind = request.param
    path = tmp_path / "odd.csv"
    stop = threading.Event()
    sock = None
    if kind == "fifo":
        os.mkfifo(path)
        threading.Thread(target=_unblock_later, args=(path, stop), daemon=True).start()
        what = "a named pipe (FIFO)"
    elif kind == "device":
        try:
            os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 3))
        except PermissionError:
            pytest.skip("making a device node needs root")
        what = "a character device"
    else:
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(path))
        what = "a socket"
    mode = os.stat(path).st_mode
    yield path, what
    stop.set()
    if sock is not None:
        sock.close()
    assert os.stat(path).st_mode == mode, "the special file was replaced"


def _board(path: Path) -> Path:
    path.write_text("time,file,producer,split,synthetic,combined\n")
    return path


def _commands(odd: Path, tiny_world: Path, perfect: Path, tmp_path: Path) -> dict[str, tuple[list[object], str]]:
    """Each command with ``odd`` as one of its file (or folder) arguments, and how its error names it."""
    board = _board(tmp_path / "lb.csv")
    return {
        "validate": (["validate", odd, "--data", tiny_world], f"{odd}: expected a file"),
        "score": (["score", odd, "--data", tiny_world, "--leaderboard", board], f"{odd}: expected a file"),
        "score-leaderboard": (["score", perfect, "--data", tiny_world, "--leaderboard", odd],
                              f"--leaderboard {odd}: expected a file"),
        "leaderboard": (["leaderboard", "--leaderboard", odd], f"--leaderboard {odd}: expected a file"),
        "leaderboard-plot": (["leaderboard", "--leaderboard", board, "--plot", odd], f"--plot {odd}: expected a file"),
        "train-config": (["train", "--data", tiny_world, "--model", "random", "--config", odd, "--runs-dir",
                          tmp_path / "runs", "--no-progress"], f"--config {odd}: expected a file"),
        "report-submission": (["report", "--data", tiny_world, "--submission", odd, "--out", tmp_path / "report",
                               "--no-progress"], f"--submission {odd}: expected a file"),
        "kaggle-submit": (["kaggle", "submit", odd, "-m", "x", "--dry-run", "--data", tiny_world],
                          f"{odd}: expected a file"),
        "data-stats": (["data", "stats", odd, "--no-progress"], f"{odd}: expected a folder"),
        "synth-out": (["data", "synth", "--scale", "tiny", "--out", odd, "--no-progress"],
                      f"--out {odd}: expected a folder"),
        "data-root": (["data", "validate", "--data", odd, "--no-progress"], f"--data {odd}: expected a folder"),
    }


COMMANDS = ["validate", "score", "score-leaderboard", "leaderboard", "leaderboard-plot", "train-config",
            "report-submission", "kaggle-submit", "data-stats", "synth-out", "data-root"]


@pytest.mark.parametrize("special", ["fifo", "device", "socket"], indirect=True)
@pytest.mark.parametrize("command", COMMANDS)
def test_a_special_file_argument_is_refused_before_it_is_opened(command, special, tiny_world, perfect, tmp_path,
                                                                capsys):
    odd, what = special
    argv, named = _commands(odd, tiny_world, perfect, tmp_path)[command]
    before = sorted(p.name for p in tmp_path.iterdir())
    code, _, err = run(argv, capsys)
    assert code == EXIT_ERROR
    assert one_line(err) == f"error: {named}; found {what}"
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing written: no report, no runs folder


@pytest.mark.parametrize("command", ["score-leaderboard", "leaderboard", "train-config", "report-submission",
                                     "kaggle-submit"])
def test_a_folder_given_for_a_file_is_refused(command, tiny_world, perfect, tmp_path, capsys):
    odd = tmp_path / "odd.csv"
    odd.mkdir()
    argv, named = _commands(odd, tiny_world, perfect, tmp_path)[command]
    code, _, err = run(argv, capsys)
    assert code == EXIT_ERROR and one_line(err) == f"error: {named}; found a folder"
    assert list(odd.iterdir()) == []


def test_a_folder_given_as_the_submission_is_one_of_its_problems(tiny_world, tmp_path, capsys):
    odd = tmp_path / "sub.csv"
    odd.mkdir()
    code, out, err = run(["validate", odd, "--data", tiny_world], capsys)
    assert code == EXIT_PROBLEMS and err == ""
    assert out == f"{odd}: file: expected a CSV file; found a folder\n{odd}: 1 problem(s)\n"


def test_dev_zero_is_refused_not_read(tiny_world, tmp_path):
    """In a process of its own: were it read, it would be read until memory ran out."""
    done = subprocess.run([sys.executable, "-m", "fastslow", "validate", "/dev/zero", "--data", str(tiny_world)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == EXIT_ERROR and done.stdout == ""
    assert one_line(done.stderr) == "error: /dev/zero: expected a file; found a character device"


@pytest.fixture()
def world(tiny_world: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(tiny_world, tmp_path / "world"))


def test_a_fifo_among_the_data_files_is_named_not_opened(world, capsys):
    victim = list_graphs(find_data_root(world), Collection.TILE_XLA, Split.VALID)[0]
    victim.unlink()
    os.mkfifo(victim)
    stop = threading.Event()
    threading.Thread(target=_unblock_later, args=(victim, stop), daemon=True).start()
    try:
        code, out, err = run(["data", "validate", "--data", world, "--no-progress"], capsys)
        assert code == EXIT_PROBLEMS and err == ""
        assert f"tile:xla: {victim}: expected an npz file; found a named pipe (FIFO)\n" in out
        code, _, err = run(["data", "stats", world, "--collections", "tile:xla", "--no-progress"], capsys)
        assert code == EXIT_ERROR
        assert one_line(err) == f"error: {victim}: expected an npz file; found a named pipe (FIFO)"
    finally:
        stop.set()
    assert special_file(victim) == "a named pipe (FIFO)"


# -- names at the file system's limits -----------------------------------------------------------------------------


def _name(length: int, suffix: str) -> str:
    return "n" * (length - len(suffix)) + suffix


def test_names_of_255_bytes_work_everywhere(perfect, tiny_world, tmp_path, capsys):
    """A 250-byte output name once made a temporary ``.<name>.<random>.part`` (and a lock ``.<name>.lock``) too long
    for the file system."""
    sub = tmp_path / _name(255, ".csv")
    shutil.copyfile(perfect, sub)
    code, out, err = run(["validate", sub, "--data", tiny_world], capsys)
    assert code == 0 and out == f"{sub}: valid\n" and err == ""
    boards = tmp_path / "boards"
    boards.mkdir()
    board = boards / _name(250, ".csv")
    for _ in range(2):
        code, _, err = run(["score", sub, "--data", tiny_world, "--leaderboard", board], capsys)
        assert code == 0 and err == ""
    assert [r["file"] for r in read_rows(board)] == [str(sub), str(sub)]
    plot = boards / _name(255, ".png")
    code, out, err = run(["leaderboard", "--leaderboard", board, "--plot", plot], capsys)
    assert code == 0 and err == "" and f"plot: {plot}" in out
    assert sorted(p.name for p in boards.iterdir()) == sorted([board.name, plot.name])  # no temporary, no lock


def test_names_beyond_the_limits_are_one_line(perfect, tiny_world, tmp_path, capsys):
    long_name = tmp_path / _name(256, ".csv")
    code, _, err = run(["score", perfect, "--data", tiny_world, "--leaderboard", long_name], capsys)
    assert code == EXIT_ERROR and one_line(err) == f"error: {long_name}: {TOO_LONG}"
    code, out, _ = run(["validate", long_name, "--data", tiny_world], capsys)
    assert code == EXIT_PROBLEMS and out.startswith(f"{long_name}: file: cannot be read (File name too long)\n")

    deep = tmp_path.joinpath(*["d" * 200] * 21)  # beyond PATH_MAX (4096 bytes), each part a valid name
    for argv, named in [
        (["score", perfect, "--data", tiny_world, "--leaderboard", deep / "lb.csv"], deep / "lb.csv"),
        (["data", "synth", "--scale", "tiny", "--out", deep / "w", "--no-progress"], deep / "w"),
        (["train", "--data", tiny_world, "--model", "random", "--config", deep / "p.toml", "--runs-dir",
          tmp_path / "runs"], deep / "p.toml"),
    ]:
        code, _, err = run(argv, capsys)
        assert code == EXIT_ERROR and one_line(err) == f"error: {named}: {TOO_LONG}"
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_a_long_names_temporaries_are_short_enough_and_still_recognised(tmp_path):
    name = _name(250, ".csv")
    target = tmp_path / name
    with temp_sibling(target) as tmp:
        assert len(os.fsencode(tmp.name)) <= 255 and tmp.name.startswith(".nnn") and tmp.name.endswith(".part")
        assert remove_stale_temps(tmp_path, name) == []  # live: held by this writer
    atomic_write_text(target, "x\n")
    assert [p.name for p in tmp_path.iterdir()] == [name]

    other = _name(251, ".csv")  # the same first 240 bytes: told apart by the hash of the whole name
    stale = tmp_path / f"{_temp_prefix(name, tmp_path)}abcd1234.part"
    stale_other = tmp_path / f"{_temp_prefix(other, tmp_path)}abcd1234.part"
    assert stale != stale_other
    stale.write_text("left by a killed writer")
    stale_other.write_text("left by a killed writer")
    assert remove_stale_temps(tmp_path, name) == [stale]
    assert remove_stale_temps(tmp_path) == [stale_other]  # every target's, the shortened names included

    short = "ok.csv"
    assert _temp_prefix(short, tmp_path) == f".{short}."  # names that fit are unchanged


def test_a_lock_of_a_long_name_is_shortened_the_same_way_each_time(tmp_path):
    lock = tmp_path / f".{_name(250, '.csv')}.lock"
    names = []
    for _ in range(2):
        with exclusive_lock(lock):
            (held,) = list(tmp_path.iterdir())
            names.append(held.name)
    assert names[0] == names[1] and len(os.fsencode(names[0])) <= 255 and names[0].endswith(".lock")
    assert list(tmp_path.iterdir()) == []
