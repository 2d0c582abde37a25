"""The command line's error boundary: every expected failure is one line on stderr naming the file or argument and
what to do, with a documented exit code; nothing good is overwritten; only a bug prints a traceback."""

from __future__ import annotations

import csv
import errno
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import fastslow.commands.data as data_commands
from competition.collections import Collection, Split, submission_id
from competition.dataroot import find_data_root, list_graphs
from competition.errors import DataFileError
from fastslow.board import COLUMNS, read_rows
from fastslow.cli import (
    EXIT_BUG,
    EXIT_ERROR,
    EXIT_INTERRUPTED,
    EXIT_PIPE_CLOSED,
    EXIT_PROBLEMS,
    INTERRUPTED,
    main,
)
from tests.reliability.helpers import default_signals, one_line, run


@pytest.fixture()
def world(tiny_world: Path, tmp_path: Path) -> Path:
    """A copy of the tiny world to damage."""
    return Path(shutil.copytree(tiny_world, tmp_path / "world"))


def _board(path: Path, rows: int = 2) -> Path:
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, COLUMNS, lineterminator="\n")
        writer.writeheader()
        for i in range(rows):
            writer.writerow({k: "" for k in COLUMNS} | {"time": f"2026-01-01T00:00:{i:02d}+00:00", "file": f"f{i}.csv",
                                                        "producer": f"p{i}", "split": "test", "synthetic": "true",
                                                        "tile:xla": "0.5", "combined": "0.5", "complete": "false"})
    return path


# -- outputs that cannot be written -----------------------------------------------------------------------------


@pytest.mark.parametrize(("command", "flag", "name"), [
    ("score", "--leaderboard", "lb.csv"),
    ("synth", "--out", "w"),
    ("submit", "--out-dir", "s"),
    ("evaluate", "--out-dir", "s"),
    ("train", "--runs-dir", "r"),
    ("leaderboard", "--plot", "x.png"),
])
def test_a_read_only_output_folder_is_refused_before_any_work(command, flag, name, read_only, tiny_world, perfect,
                                                              tmp_path, capsys):
    target = read_only / name
    argv = {
        "score": ["score", perfect, "--data", tiny_world, "--leaderboard", target],
        "synth": ["data", "synth", "--scale", "tiny", "--out", target, "--no-progress"],
        "submit": ["submit", "--data", tiny_world, "--models", "random", "--out-dir", target, "--no-progress"],
        "evaluate": ["evaluate", "--data", tiny_world, "--models", "random", "--out-dir", target, "--no-progress"],
        "train": ["train", "--data", tiny_world, "--model", "random", "--runs-dir", target, "--no-progress"],
        "leaderboard": ["leaderboard", "--leaderboard", _board(tmp_path / "lb.csv"), "--plot", target],
    }[command]
    code, out, err = run(argv, capsys)
    assert code == EXIT_ERROR and out == ""
    assert one_line(err) == (f"error: {flag} {target}: cannot write into {read_only} (permission denied): change "
                             "its permissions, or choose another path")
    assert list(read_only.iterdir()) == []


def test_a_write_refused_midway_names_the_file(perfect, tiny_world, tmp_path, capsys, monkeypatch):
    board = _board(tmp_path / "lb.csv")
    before = board.read_bytes()
    lock = tmp_path / ".lb.csv.lock"
    real = os.open

    def denied(path, *args, **kwargs):
        if Path(path) == lock:
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", denied)
    code, _, err = run(["score", perfect, "--data", tiny_world, "--leaderboard", board], capsys)
    assert code == EXIT_ERROR
    assert one_line(err) == f"error: {lock}: permission denied: change its permissions, or choose another path"
    assert board.read_bytes() == before


@pytest.fixture()
def full_disk(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every write fails as on a full disk when it is flushed to it."""
    def fsync(fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", fsync)


FULL = "no space left on the device: free some space and re-run the same command"


def test_a_full_disk_while_scoring_keeps_the_leaderboard(perfect, tiny_world, tmp_path, capsys, full_disk):
    board = _board(tmp_path / "lb.csv")
    before = board.read_bytes()
    code, _, err = run(["score", perfect, "--data", tiny_world, "--leaderboard", board], capsys)
    assert code == EXIT_ERROR
    assert one_line(err) == f"error: --leaderboard {board}: {FULL}"
    assert board.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["lb.csv"]


def test_a_full_disk_while_generating_a_world(tmp_path, capsys, full_disk):
    out = tmp_path / "w"
    code, _, err = run(["data", "synth", "--scale", "tiny", "--out", out, "--workers", "1", "--no-progress"], capsys)
    assert code == EXIT_ERROR and one_line(err) == f"error: --out {out}: {FULL}"


def test_a_full_disk_while_submitting_keeps_the_submission(tiny_world, tmp_path, capsys, full_disk):
    out = tmp_path / "subs"
    out.mkdir()
    (out / "submission.csv").write_text("the previous submission\n")
    code, _, err = run(["submit", "--data", tiny_world, "--models", "random", "--out-dir", out, "--no-progress"],
                       capsys)
    assert code == EXIT_ERROR and one_line(err) == f"error: --out-dir {out}: {FULL}"
    assert (out / "submission.csv").read_text() == "the previous submission\n"


def test_synth_out_pointing_at_a_file(tmp_path, capsys):
    target = tmp_path / "notes.txt"
    target.write_text("keep me")
    code, _, err = run(["data", "synth", "--scale", "tiny", "--out", target, "--no-progress"], capsys)
    assert code == EXIT_ERROR and one_line(err) == f"error: --out {target}: expected a folder; found a file"
    assert target.read_text() == "keep me"
    code, _, err = run(["data", "synth", "--scale", "tiny", "--out", target / "w", "--no-progress"], capsys)
    assert code == EXIT_ERROR and one_line(err) == f"error: --out {target / 'w'}: {target} is a file, not a folder"


# -- submission files ------------------------------------------------------------------------------------------


def test_an_index_beyond_int64_is_a_problem_naming_file_and_row(perfect, tiny_world, tmp_path, capsys):
    lines = perfect.read_text().splitlines()
    row = len(lines) - 1  # the last row: a tile graph (rows are sorted by ID)
    sid = lines[row].split(",")[0]
    lines[row] = f"{sid},99999999999999999999999;0;1"
    path = tmp_path / "overflow.csv"
    path.write_text("\n".join(lines) + "\n")
    problem = (f"row {row} [{sid}]: index(es) out of range of any graph (longer than 20 characters): "
               "'99999999999999999999999' in TopConfigs")
    code, out, err = run(["validate", path, "--data", tiny_world], capsys)
    assert code == EXIT_PROBLEMS and out == f"{path}: {problem}\n{path}: 1 problem(s)\n" and err == ""
    code, out, err = run(["score", path, "--data", tiny_world, "--leaderboard", tmp_path / "lb.csv"], capsys)
    assert code == EXIT_PROBLEMS and f"error: {path}: 1 problem(s)\n  {problem}\n" in err and "Traceback" not in err
    assert not (tmp_path / "lb.csv").exists()
    code, out, err = run(["kaggle", "submit", path, "-m", "x", "--dry-run", "--data", tiny_world], capsys)
    assert code == EXIT_PROBLEMS and f"{path}: {problem}\n" in out and "Traceback" not in err


@pytest.mark.parametrize(("content", "found"), [
    ("ID,TopConfigs\n".encode("utf-16"), "UTF-16 text (byte-order mark FF FE at the start): save it as UTF-8"),
    ("ID,TopConfigs\ntile:xla:caf\u00e9,0\n".encode("latin-1"),
     "byte 0xE9 at line 2 (byte 26) that is not UTF-8 (invalid continuation byte; latin-1 or another 8-bit "
     "encoding?): save it as UTF-8"),
    (bytes(range(256)), "NUL bytes (the first at byte 0): binary data, or UTF-16/32 text without a byte-order "
                        "mark; save it as UTF-8 CSV"),
])
def test_a_submission_not_in_utf8_is_named_with_what_it_holds(content, found, tiny_world, tmp_path, capsys):
    path = tmp_path / "sub.csv"
    path.write_bytes(content)
    code, out, err = run(["validate", path, "--data", tiny_world], capsys)
    assert code == EXIT_PROBLEMS and err == ""
    assert out == f"{path}: file: expected UTF-8 text; found {found}\n{path}: 1 problem(s)\n"
    code, out, err = run(["score", path, "--data", tiny_world, "--leaderboard", tmp_path / "lb.csv"], capsys)
    assert code == EXIT_PROBLEMS and f"file: expected UTF-8 text; found {found}" in err and str(path) in err


@pytest.mark.parametrize("kind", ["missing", "folder"])
def test_a_submission_that_is_not_a_file(kind, tiny_world, tmp_path, capsys):
    path = tmp_path / "sub.csv"
    if kind == "folder":
        path.mkdir()
    found = "cannot be read (No such file or directory)" if kind == "missing" else "expected a CSV file; found a folder"
    code, out, _ = run(["validate", path, "--data", tiny_world], capsys)
    assert code == EXIT_PROBLEMS and out == f"{path}: file: {found}\n{path}: 1 problem(s)\n"
    code, _, err = run(["score", path, "--data", tiny_world, "--leaderboard", tmp_path / "lb.csv"], capsys)
    assert code == EXIT_PROBLEMS and err.startswith(f"error: {path}: 1 problem(s)\n  file: {found}\n")
    assert not (tmp_path / "lb.csv").exists()


# -- what score accepts ----------------------------------------------------------------------------------------


def test_score_refuses_what_validate_rejects_unless_partial(perfect, tiny_world, tmp_path, capsys):
    root = find_data_root(tiny_world)
    tests = {c: len(list_graphs(root, c, Split.TEST)) for c in Collection}
    layout = sum(n for c, n in tests.items() if c.is_layout)
    board = tmp_path / "lb.csv"
    header_only = tmp_path / "header.csv"
    header_only.write_text("ID,TopConfigs\n")
    code, _, err = run(["score", header_only, "--data", tiny_world, "--leaderboard", board], capsys)
    assert code == EXIT_PROBLEMS and f"error: {header_only}: {sum(tests.values())} problem(s)\n" in err
    assert "missing row [layout:nlp:default:" in err and "--partial scores the collections it holds" in err
    code, _, err = run(["score", header_only, "--data", tiny_world, "--leaderboard", board, "--partial"], capsys)
    assert code == EXIT_PROBLEMS and one_line(err) == f"error: {header_only}: nothing to score (no rows)"
    assert not board.exists()

    tile_only = tmp_path / "tile.csv"
    tile_only.write_text("".join(line for line in perfect.read_text().splitlines(keepends=True)
                                 if not line.startswith("layout:")))
    code, _, err = run(["score", tile_only, "--data", tiny_world, "--leaderboard", board], capsys)
    assert code == EXIT_PROBLEMS and f"error: {tile_only}: {layout} problem(s)\n" in err and not board.exists()
    code, out, err = run(["score", tile_only, "--data", tiny_world, "--leaderboard", board, "--partial"], capsys)
    assert code == 0 and err == "" and f"partial: tile:xla scored; {layout} problem(s) elsewhere" in out
    code, _, _ = run(["score", perfect, "--data", tiny_world, "--leaderboard", board, "--partial"], capsys)
    assert code == 0
    rows = read_rows(board)
    assert [(r["file"], r["complete"], r["tile:xla"]) for r in rows] == [
        (str(tile_only), "false", "1.000000"), (str(perfect), "true", "1.000000")]


# -- data and arguments ----------------------------------------------------------------------------------------


def test_a_sample_submission_without_an_id_column(world, perfect, capsys):
    sample = world / "sample_submission.csv"
    sample.write_text(sample.read_text().replace("ID,TopConfigs", "Id,TopConfigs", 1))
    code, _, err = run(["validate", perfect, "--data", world], capsys)
    assert code == EXIT_ERROR
    assert one_line(err) == (f"error: {sample}: expected a header with the column 'ID' (ID,TopConfigs); found the "
                             "header Id,TopConfigs: no column 'ID'")


def test_a_malformed_sample_submission(world, perfect, capsys):
    sample = world / "sample_submission.csv"
    sample.write_text(sample.read_text() + '"tile:xla:open,0\n')
    code, _, err = run(["validate", perfect, "--data", world], capsys)
    assert code == EXIT_ERROR and one_line(err) == (f"error: {sample}: expected a well-formed CSV file; found "
                                                    "malformed CSV (unexpected end of data)")


def test_a_corrupt_data_file_is_named(world, tmp_path, capsys):
    root = find_data_root(world)
    victim = list_graphs(root, Collection.TILE_XLA, Split.VALID)[0]
    victim.write_bytes(victim.read_bytes()[:100])
    sub = tmp_path / "v.csv"
    sub.write_text(f"ID,TopConfigs\n{submission_id(Collection.TILE_XLA, victim.stem)},0;1\n")
    code, _, err = run(["score", sub, "--data", world, "--split", "valid", "--leaderboard", tmp_path / "lb.csv"],
                       capsys)
    assert code == EXIT_ERROR
    assert one_line(err).startswith(f"error: {victim}: expected a complete npz (zip) archive; found unreadable")


@pytest.mark.parametrize(("param", "message"), [
    ("epochs=abc", "--param epochs=abc: GNNModel: train.epochs takes int, not the text 'abc'"),
    ("hidden=True", "--param hidden=True: GNNModel: network.hidden takes int, not bool True"),
    ("lr='fast'", "--param lr='fast': GNNModel: train.lr takes float, not the text 'fast'"),
])
def test_a_param_of_the_wrong_type_is_refused_before_fitting(param, message, tiny_world, tmp_path, capsys):
    runs = tmp_path / "runs"
    code, _, err = run(["train", "--data", tiny_world, "--model", "gnn", "--param", param, "--runs-dir", runs],
                       capsys)
    assert code == EXIT_ERROR
    assert one_line(err).startswith(f"error: fastslow train: {message} (values are Python literals")
    assert not runs.exists()


@pytest.mark.parametrize("kind", ["data file", "cache file"])
def test_an_error_of_a_component_is_one_line_and_verbose_adds_the_traceback(kind, tmp_path, capsys, monkeypatch):
    from features.cache import UnusableFileError

    damaged = tmp_path / "checkpoint.pt"
    error, message = {
        "data file": (DataFileError(damaged, None, "a torch checkpoint", "a truncated file"),
                      f"{damaged}: expected a torch checkpoint; found a truncated file"),
        "cache file": (UnusableFileError(f"{damaged}: unreadable (truncated) even after a rebuild"),
                       f"{damaged}: unreadable (truncated) even after a rebuild"),
    }[kind]

    def fails(*args, **kwargs):
        raise error

    monkeypatch.setattr("fastslow.pipeline.run_pipeline", fails)
    code, _, err = run(["submit", "--out-dir", tmp_path / "s", "--no-progress"], capsys)
    assert code == EXIT_ERROR and one_line(err) == f"error: {message}"
    code, _, err = run(["submit", "--out-dir", tmp_path / "s", "--no-progress", "--verbose"], capsys)
    assert code == EXIT_ERROR and err.startswith("Traceback") and err.endswith(f"error: {message}\n")


def test_a_bug_prints_its_traceback_and_says_so(tiny_world, capsys, monkeypatch):
    def broken(args):
        return 1 // 0

    monkeypatch.setattr(data_commands, "_cmd_where", broken)
    code, _, err = run(["data", "where", "--data", tiny_world], capsys)
    assert code == EXIT_BUG
    assert err.startswith("Traceback") and "ZeroDivisionError" in err
    assert err.splitlines()[-1].startswith("internal error (a bug in fastslow, not a problem of the input): "
                                           "ZeroDivisionError: integer division or modulo by zero; please report")


def test_help_documents_the_exit_codes(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    for code in (EXIT_PROBLEMS, EXIT_ERROR, EXIT_BUG, EXIT_INTERRUPTED, EXIT_PIPE_CLOSED):
        assert f"\n  {code} " in out


# -- signals and pipes, in a process of their own ----------------------------------------------------------------


def test_ctrl_c_is_one_line_and_exit_130(tmp_path: Path):
    out = tmp_path / "w"
    proc = subprocess.Popen([sys.executable, "-m", "fastslow", "data", "synth", "--scale", "demo", "--out",
                             str(out), "--workers", "2", "--no-progress"], cwd=tmp_path, start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=default_signals)
    deadline = time.monotonic() + 120
    while not any(out.rglob("*.npz")) and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    assert proc.poll() is None, "generation ended before it could be interrupted"
    os.killpg(proc.pid, signal.SIGINT)  # as Ctrl-C does: to the whole foreground process group, workers included
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == EXIT_INTERRUPTED
    assert stderr == INTERRUPTED + "\n" and stdout == ""


def test_output_piped_into_head_ends_quietly(tmp_path: Path):
    board = _board(tmp_path / "lb.csv", rows=3000)  # far more than a pipe holds
    proc = subprocess.Popen([sys.executable, "-m", "fastslow", "leaderboard", "--leaderboard", str(board),
                             "--top", "3000", "--plot", str(tmp_path / "p.png")], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout.readline().split()[:2] == [b"#", b"combined"]
    proc.stdout.close()  # what `| head -1` does once it has its line
    stderr = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == EXIT_PIPE_CLOSED
    assert stderr == ""
    assert not (tmp_path / "p.png").exists()


def test_train_refuses_a_named_collection_the_data_lacks(world: Path, capsys: pytest.CaptureFixture[str],
                                                         monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    """A collection named with --collections but absent from the data (every split) is an error, not a silent
    skip with exit 0."""
    root = find_data_root(world)
    for split in Split:
        shutil.rmtree(root.collection_dir(Collection.LAYOUT_NLP_RANDOM, split))
    monkeypatch.chdir(tmp_path)
    capsys.readouterr()
    code, _, err = run(["train", "--data", world, "--model", "gbdt", "--collections", "tile:xla",
                        "layout:nlp:random"], capsys)
    assert code == EXIT_ERROR
    assert one_line(err) == f"error: --collections: {root.root} holds no graphs of layout:nlp:random"
