"""What the reliability tests share: running one command in-process, and the bytes of a folder."""

from __future__ import annotations

import hashlib
import os
import resource
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from fastslow.cli import EXIT_ERROR, main


def run(argv: list[object], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """Exit code, stdout and stderr of one command; a usage error's SystemExit counts as its code."""
    try:
        code = main([str(a) for a in argv])
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


def one_line(err: str) -> str:
    """``err`` as its one line, after checking it is one line and no traceback."""
    assert "Traceback" not in err
    assert err.endswith("\n") and err.count("\n") == 1, err
    return err.rstrip("\n")


def snapshot(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` (relative path) with its SHA-256: what must be byte-identical afterwards."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def default_signals() -> None:
    """For ``preexec_fn``: the command starts with SIGINT, SIGTERM and SIGHUP at their defaults, as from a terminal,
    whatever the test runner inherited (``nohup`` ignores SIGHUP, a shell's background job SIGINT), so that the
    command takes them as it would for a user."""
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, signal.SIG_DFL)


def varint(v: int) -> bytes:
    """``v`` as a protobuf varint."""
    out = bytearray()
    while True:
        b, v = v & 0x7F, v >> 7
        out.append(b | 0x80 if v else b)
        if not v:
            return bytes(out)


def field(number: int, payload: bytes) -> bytes:
    """A length-delimited field (a sub-message, a string, a packed list)."""
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def limited(argv: list[object], *, memory: float, timeout: float, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``fastslow argv`` in a process of its own with ``memory`` GiB of address space and one BLAS thread, killed
    after ``timeout`` seconds (which fails the test): the memory and time bounds of the hostile-input tests."""

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (int(memory * 2**30), int(memory * 2**30)))

    env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "fastslow", *map(str, argv)], capture_output=True, text=True,
                          timeout=timeout, preexec_fn=cap, cwd=cwd, env=env)


def refused(done: subprocess.CompletedProcess[str]) -> str:
    """The one line of a command (run by :func:`limited`) refused with exit 2."""
    assert done.returncode == EXIT_ERROR, done.stderr
    return one_line(done.stderr)
