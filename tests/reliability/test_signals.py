"""Signals other than Ctrl-C's: SIGTERM and SIGHUP (``kill``, a supervisor, a closed terminal), to the command or to
its whole process group, end a command as Ctrl-C does: one line, exit 128 + the signal's number, no traceback, no
temporary left, no output half-written. SIGKILL, which nothing can catch, leaves temporaries that the re-run
removes, and the re-run's outputs are complete.

Each command runs in a process (and a session) of its own; the signal is sent once a marker file shows the
command is at work, with generous deadlines for a loaded machine.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
import typing
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

import fastslow.cli as cli
import fastslow.commands.data as data_commands
from fastslow.cli import EXIT_INTERRUPTED, INTERRUPTED, Terminated, _Finalizers, main
from tests.reliability.helpers import default_signals

DEADLINE = 180.0
GNN = ["--param", "hidden=8", "--param", "patience=100000", "--param", "seeds=1", "--no-progress"]


_started: list[subprocess.Popen[str]] = []


@pytest.fixture(autouse=True)
def _no_command_left_running():
    """A command a failed test did not stop is killed with its workers, not left to run (and load the machine)."""
    yield
    while _started:
        proc = _started.pop()
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()


def start(cwd: Path, *argv: object, preexec_fn: Callable[[], None] = default_signals,
          **kwargs) -> subprocess.Popen[str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "fastslow", *map(str, argv)], cwd=cwd, env=env,
                            start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=preexec_fn, **kwargs)
    _started.append(proc)
    return proc


def wait_for(proc: subprocess.Popen[str], ready: Callable[[], bool], poll: float = 0.005) -> None:
    """Until ``ready()``; fails if the command ends first."""
    deadline = time.monotonic() + DEADLINE
    while not ready():
        assert proc.poll() is None, f"the command ended before it could be stopped: {proc.communicate()}"
        assert time.monotonic() < deadline, "the command showed no sign of work"
        time.sleep(poll)


def send(proc: subprocess.Popen[str], signum: int, to: str) -> tuple[str, str]:
    """``signum`` to the command alone or to its process group (its workers too); its output once it ended."""
    (os.killpg if to == "group" else os.kill)(proc.pid, signum)
    try:
        return proc.communicate(timeout=DEADLINE)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def parts(root: Path) -> list[Path]:
    return list(root.rglob("*.part"))


def files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def complete_npz(root: Path) -> bool:
    """Every npz under ``root`` is a whole archive."""
    for path in root.rglob("*.npz"):
        with zipfile.ZipFile(path) as z:
            if z.testzip() is not None:
                return False
    return True


@pytest.mark.parametrize("to", ["process", "group"])
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_a_signal_ends_synth_as_ctrl_c_does(signum, to, tmp_path):
    """Sent to the command alone, its workers stop too, as on Ctrl-C (they do not go on with the queued graphs)."""
    out = tmp_path / "w"
    proc = start(tmp_path, "data", "synth", "--scale", "demo", "--out", out, "--workers", "2", "--no-progress")
    wait_for(proc, lambda: bool(parts(out)))  # a file is being written
    stdout, stderr = send(proc, signum, to)
    assert proc.returncode == 128 + signum
    assert stderr == INTERRUPTED + "\n" and stdout == ""
    assert parts(out) == [] and complete_npz(out)


def test_sigterm_ends_training_with_its_checkpoint_whole(tiny_world, tmp_path):
    runs = tmp_path / "runs"
    run = runs / "gnn" / "tile-xla"
    proc = start(tmp_path, "train", "--data", tiny_world, "--model", "gnn", "--collections", "tile:xla",
                 "--runs-dir", runs, "--param", "epochs=100000", *GNN)
    wait_for(proc, lambda: (run / "checkpoint.pt").is_file())
    _, stderr = send(proc, signal.SIGTERM, "process")
    assert proc.returncode == 128 + signal.SIGTERM and stderr == INTERRUPTED + "\n"
    assert parts(tmp_path) == [] and not (run / "model.json").exists()
    assert torch.load(run / "checkpoint.pt", weights_only=True)["epoch"] >= 1


def test_sighup_ends_submit_keeping_the_previous_submission(tiny_world, tmp_path):
    subs = tmp_path / "subs"
    subs.mkdir()
    (subs / "submission.csv").write_text("the previous submission\n")
    before = files(subs)
    proc = start(tmp_path, "submit", "--data", tiny_world, "--models", "gnn", "--jobs", "1", "--out-dir", subs,
                 "--param", "epochs=100000", *GNN)
    wait_for(proc, lambda: any((tmp_path / "runs").rglob("checkpoint.pt")))
    _, stderr = send(proc, signal.SIGHUP, "group")
    assert proc.returncode == 128 + signal.SIGHUP and stderr == INTERRUPTED + "\n"
    after = files(subs)
    assert {k: after[k] for k in before} == before and parts(tmp_path) == []


def test_an_ignored_sighup_stays_ignored(tmp_path):
    """Under ``nohup`` (SIGHUP ignored) the command goes on."""
    out = tmp_path / "w"
    proc = start(tmp_path, "data", "synth", "--scale", "demo", "--limit", "2", "--out", out, "--workers", "2",
                 "--no-progress", preexec_fn=lambda: (default_signals(), signal.signal(signal.SIGHUP, signal.SIG_IGN)))
    wait_for(proc, lambda: bool(parts(out)))
    stdout, stderr = send(proc, signal.SIGHUP, "group")
    assert proc.returncode == 0 and stderr == "" and stdout.startswith("wrote demo world")


def test_main_takes_the_signals_for_the_command_only(tiny_world, capsys, monkeypatch):
    seen = {}

    def where(args):
        seen["handler"] = signal.getsignal(signal.SIGTERM)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(60)  # the handler raises here
        return 0

    before = signal.getsignal(signal.SIGTERM)
    if before is not signal.SIG_DFL:
        pytest.skip("SIGTERM is handled by the test runner")
    monkeypatch.setattr(data_commands, "_cmd_where", where)
    t0 = time.monotonic()
    assert main(["data", "where", "--data", str(tiny_world)]) == 128 + signal.SIGTERM
    assert time.monotonic() - t0 < 30
    assert capsys.readouterr().err == INTERRUPTED + "\n"
    assert seen["handler"] is cli._raise_terminated
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL

    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a caller's choice is kept
    try:
        monkeypatch.setattr(data_commands, "_cmd_where", lambda args: seen.update(ignored=signal.getsignal(signal.SIGTERM)) or 0)
        assert main(["data", "where", "--data", str(tiny_world)]) == 0
        assert seen["ignored"] is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


# -- SIGKILL: nothing runs, the re-run cleans up ------------------------------------------------------------------


def test_a_world_killed_while_writing_is_whole_after_a_rerun(tmp_path):
    synth = ["data", "synth", "--scale", "demo", "--limit", "2", "--seed", "3", "--workers", "2", "--no-progress"]
    reference = subprocess.run([sys.executable, "-m", "fastslow", *synth, "--out", "ref"], cwd=tmp_path,
                               capture_output=True, text=True, timeout=DEADLINE)
    assert reference.returncode == 0, reference.stderr
    out = tmp_path / "w"
    proc = start(tmp_path, *synth, "--out", out)
    wait_for(proc, lambda: any(out.rglob(".*.npz.*.part")), poll=0.001)  # a graph being written
    send(proc, signal.SIGKILL, "group")
    rerun = subprocess.run([sys.executable, "-m", "fastslow", *synth, "--out", out], cwd=tmp_path,
                           capture_output=True, text=True, timeout=DEADLINE)
    assert rerun.returncode == 0 and "Traceback" not in rerun.stderr
    assert parts(out) == []
    assert files(out) == files(tmp_path / "ref")


def test_a_world_killed_while_writing_its_manifest_is_generated_on_a_rerun(tmp_path, capsys):
    out = tmp_path / "w"
    out.mkdir()
    (out / ".world.json.abcd1234.part").write_text('{"config": ')  # what the kill left; no process holds it
    assert main(["data", "synth", "--scale", "tiny", "--limit", "1", "--out", str(out), "--workers", "1",
                 "--no-progress"]) == 0
    assert parts(out) == []


@pytest.mark.slow
def test_training_killed_while_checkpointing_resumes_whole(tiny_world, tmp_path):
    runs = tmp_path / "runs"
    run = runs / "gnn" / "tile-xla"
    argv = ["train", "--data", tiny_world, "--model", "gnn", "--collections", "tile:xla", "--runs-dir", runs,
            "--param", "epochs=40", *GNN]
    proc = start(tmp_path, *argv)
    wait_for(proc, lambda: bool(parts(run)) if run.is_dir() else False, poll=0.001)  # a checkpoint being written
    send(proc, signal.SIGKILL, "group")
    rerun = subprocess.run([sys.executable, "-m", "fastslow", *map(str, argv)], cwd=tmp_path,
                           capture_output=True, text=True, timeout=DEADLINE)
    assert rerun.returncode == 0 and "Traceback" not in rerun.stderr
    assert parts(tmp_path) == []
    assert torch.load(run / "checkpoint.pt", weights_only=True)["epoch"] == 40
    assert (run / "model.json").is_file()


# -- Ctrl-C on submit --jobs 2: the parent stops the pool ---------------------------------------------------------


def _session_left(sid: int) -> list[str]:
    """The processes of session ``sid`` still running (not zombies), as ``pid command``."""
    import psutil

    left = []
    for pid in psutil.pids():
        with contextlib.suppress(OSError, psutil.Error):
            if os.getsid(pid) == sid and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                left.append(f"{pid} {' '.join(psutil.Process(pid).cmdline())[:120]}")
    return left


@pytest.mark.parametrize("moment", ["imports", "pool start", "fitting"])
@pytest.mark.slow
def test_ctrl_c_on_submit_with_two_jobs_is_one_line_and_leaves_no_process(moment, tiny_world, tmp_path):
    """Ctrl-C (SIGINT to the whole process group, as a terminal sends it) while the command imports, while the pool
    starts (its fork server importing torch: the parent read ``EOFError``, exit 3), and while the two fits train
    (stray worker tracebacks, a ``TypeError`` from concurrent.futures, a leaked-semaphore warning): exit 130, the
    one line, nothing else on stderr, no process left, no temporary."""
    runs = tmp_path / "runs"
    proc = start(tmp_path, "submit", "--data", tiny_world, "--models", "gnn", "--jobs", "2", "--out-dir",
                 tmp_path / "subs", "--runs-dir", runs, "--param", "epochs=100000", *GNN)
    threading.Thread(target=proc.stdout.read, daemon=True).start()  # type: ignore[union-attr]  # never full
    if moment == "imports":
        time.sleep(0.3)
    elif moment == "pool start":  # the fork server importing what the fits need (torch and the models: seconds)
        wait_for(proc, lambda: any("forkserver" in p for p in _session_left(proc.pid)), poll=0.001)
        time.sleep(0.3)
    else:
        wait_for(proc, lambda: len(list(runs.rglob("checkpoint.pt"))) == 2)  # both fits at work
    os.killpg(proc.pid, signal.SIGINT)
    try:
        stderr = proc.stderr.read()  # type: ignore[union-attr]  # to its end: every process holding it ended
        proc.wait(timeout=DEADLINE)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert (proc.returncode, stderr) == (EXIT_INTERRUPTED, INTERRUPTED + "\n")
    deadline = time.monotonic() + 10.0  # the fork server and the resource tracker end as the command ends
    while _session_left(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _session_left(proc.pid) == []
    assert parts(tmp_path) == []


def test_an_interrupt_inside_exec_still_exits_130(tiny_world, tmp_path):
    """CPython marks a KeyboardInterrupt raised in ``exec`` of a string (as when Ctrl-C lands in one of the
    dataclasses torch's import defines) as unhandled, even once caught, and ``python -m fastslow`` then ended by
    SIGINT (-2) instead of with 130."""
    (tmp_path / "interrupted_in_exec.py").write_text(
        "import fastslow.cli as cli\n"
        "import fastslow.commands.data as data\n"
        "data._cmd_where = lambda args: exec('raise KeyboardInterrupt')\n"
        f"raise SystemExit(cli.main(['data', 'where', '--data', {str(tiny_world)!r}]))\n")
    done = subprocess.run([sys.executable, "-m", "interrupted_in_exec"], capture_output=True, text=True,
                          timeout=DEADLINE, cwd=tmp_path, preexec_fn=default_signals)
    assert (done.returncode, done.stderr) == (EXIT_INTERRUPTED, INTERRUPTED + "\n")


# -- finalizers: a stop raised inside one, and what a stopped command abandoned ------------------------------------


class _Unraisable(typing.NamedTuple):
    exc_type: type
    exc_value: BaseException
    exc_traceback: object = None
    err_msg: str | None = None
    object: object = None


@pytest.mark.parametrize(("exc", "signum"), [(KeyboardInterrupt(), signal.SIGINT),
                                             (Terminated(signal.SIGHUP), signal.SIGHUP),
                                             (Terminated(signal.SIGTERM), signal.SIGTERM)])
def test_a_stop_raised_inside_a_finalizer_is_raised_again(exc, signum, monkeypatch):
    """A signal whose handler ran inside a ``__del__`` raised where Python can only print it: the command would go
    on to exit 0. The signal is raised again instead, so the command stops."""
    raised, printed = [], []
    monkeypatch.setattr(signal, "raise_signal", raised.append)
    hook = _Finalizers()
    hook.previous = printed.append
    hook(_Unraisable(type(exc), exc))
    assert raised == [signum] and printed == []


@pytest.mark.parametrize(("stopping", "verbose", "shown"), [(False, False, True), (True, False, False),
                                                            (True, True, True)])
def test_what_a_stopped_command_abandoned_is_finalized_quietly(stopping, verbose, shown, monkeypatch):
    raised, printed = [], []
    monkeypatch.setattr(signal, "raise_signal", raised.append)
    hook = _Finalizers()
    hook.previous, hook.stopping, hook.verbose = printed.append, stopping, verbose
    failure = _Unraisable(ValueError, ValueError("seek of closed file"))
    hook(failure)
    assert printed == ([failure] if shown else []) and raised == []


FINALIZED = """
import sys, zipfile
from fastslow.cli import _finalizers
_finalizers.install()
_finalizers.stopping = sys.argv[1] == "stopping"
raw = open(sys.argv[2], "wb")
zf = zipfile.ZipFile(raw, "w")  # interrupted before its with block: never closed
raw.close()
del zf
"""


@pytest.mark.parametrize("state", ["stopping", "running"])
def test_a_zip_file_abandoned_by_a_stopped_command_prints_nothing(state, tmp_path):
    """What a SIGHUP to a ``data synth`` once left on stderr under its one line: ``Exception ignored in: <function
    ZipFile.__del__ ...> ... ValueError: seek of closed file``."""
    done = subprocess.run([sys.executable, "-c", FINALIZED, state, str(tmp_path / "x.zip")], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0
    if state == "stopping":
        assert done.stderr == ""
    else:
        assert "Exception ignored in" in done.stderr and "seek of closed file" in done.stderr
