"""The ``fastslow`` command line (also ``python -m fastslow``).

:func:`main` is the one error boundary: every failure a user can meet (a bad argument, missing or unreadable
data, an unwritable output, a full disk, Ctrl-C, a closed output pipe) ends in one line on standard error that
names the file or argument and says what to do, with the exit codes of :data:`EXIT_CODES`; ``--verbose`` adds
the traceback. A bug (any other exception) prints its traceback: a long run should not have to be repeated to
report it.
"""

from __future__ import annotations

import argparse
import csv
import errno
import logging
import os
import sys
import traceback
import typing
from collections.abc import Sequence

from competition.errors import EXIT_ERROR, UsageError
from fastslow.commands.common import (
    EXIT_BUG,
    EXIT_CODES,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_PIPE_CLOSED,
    EXIT_PROBLEMS,
    INTERRUPTED,
    check_output,
    checked_seeds,
    verbose_everywhere,
)

if typing.TYPE_CHECKING:
    pass

log = logging.getLogger("fastslow")

__all__ = ["main", "build_parser", "EXIT_OK", "EXIT_PROBLEMS", "EXIT_ERROR", "EXIT_BUG", "EXIT_INTERRUPTED",
           "EXIT_PIPE_CLOSED", "EXIT_CODES", "INTERRUPTED"]
"""What the command line offers its callers: :func:`main`, the parser, and the exit codes (owned by
:mod:`fastslow.commands.common`)."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fastslow",
        description="Toolkit for the TpuGraphs 'Fast or Slow?' competition: read the real data or generate a\n"
                    "synthetic world in the same format, inspect and validate it.",
        epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,  # keeps the exit code table's lines
    )
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="log debug messages, and print the traceback of an error")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    # One function per command, in the order `fastslow --help` lists them. Modules the commands need are imported
    # inside them, not at the top: until main() runs, a Ctrl-C would end in Python's own traceback.
    from fastslow.commands.data import add_data_parsers
    from fastslow.commands.features import add_features_parsers
    from fastslow.commands.fit import add_evaluate_parser, add_submit_parser, add_train_parser
    from fastslow.commands.params import add_params_parser
    from fastslow.commands.scoring import add_leaderboard_parser, add_score_parser, add_validate_parser

    add_data_parsers(sub)
    add_validate_parser(sub)
    add_score_parser(sub)
    add_leaderboard_parser(sub)
    add_evaluate_parser(sub)
    add_features_parsers(sub)
    add_train_parser(sub)
    add_submit_parser(sub)
    add_params_parser(sub)

    from fastslow.commands.featurize import add_parser as add_featurize_parser
    from fastslow.inference import add_parser as add_predict_parser
    from fastslow.kaggle import add_parser as add_kaggle_parser
    from fastslow.report import add_parser as add_report_parser

    add_predict_parser(sub)
    add_featurize_parser(sub)
    add_kaggle_parser(sub)
    add_report_parser(sub)
    verbose_everywhere(parser)
    checked_seeds(parser)
    return parser




_OS_ERRORS = {  # what an OSError means to the user, and what to do
    errno.EACCES: "permission denied: change its permissions, or choose another path",
    errno.EPERM: "operation not permitted: change its permissions, or choose another path",
    errno.EROFS: "read-only file system: choose a path on a writable disk",
    errno.ENOSPC: "no space left on the device: free some space and re-run the same command",
    errno.EDQUOT: "disk quota exceeded: free some space and re-run the same command",
    errno.ENOENT: "no such file or folder",
    errno.EISDIR: "expected a file; found a folder",
    errno.ENOTDIR: "expected a folder; found a file (in this path)",
    errno.EEXIST: "already exists",
    errno.ELOOP: "a symbolic link loop",
    errno.EIO: "input/output error: check the disk (or network share) and re-run the same command",
    errno.EMFILE: "too many open files: raise the limit (ulimit -n) and re-run the same command",
    errno.ENAMETOOLONG: "file name too long: choose a shorter path",
}


def _outputs(args: argparse.Namespace) -> str:
    """The command's output arguments as given, e.g. ``--out-dir submissions``, for an error that names no file."""
    given = [(dest, getattr(args, dest, None)) for dest in getattr(args, "outputs", {})]
    return ", ".join(f"--{dest.replace('_', '-')} {value}" for dest, value in given if value)


def _os_message(exc: OSError, args: argparse.Namespace) -> str:
    what = _OS_ERRORS.get(exc.errno, exc.strerror or str(exc)) if exc.errno is not None else str(exc)
    if exc.filename is not None:
        where = f"{exc.filename}" + (f" -> {exc.filename2}" if exc.filename2 is not None else "")
    else:  # a failed write or flush: the file is one of the command's outputs
        where = _outputs(args) or f"fastslow {args.command}"
    return f"{where}: {what}"




def _check_outputs(args: argparse.Namespace) -> None:
    for dest, kind in getattr(args, "outputs", {}).items():
        value = getattr(args, dest, None)
        if value:
            check_output(f"--{dest.replace('_', '-')}", value, kind)


_PATH_METAVARS = {"FILE": "file", "CSV": "file", "TOML": "file", "PNG": "file", "DIR": "folder"}
"""The metavars of the arguments that name a file or folder, and which."""


def _path_arguments(parser: argparse.ArgumentParser, args: argparse.Namespace
                    ) -> list[tuple[str, str, str, str]]:
    """``(dest, name, value, kind)`` of every argument of the chosen command that names a file or a folder (by its
    metavar): ``name`` is how an error names it (``--config x.toml``, or the value of a positional argument)."""
    out: list[tuple[str, str, str, str]] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            chosen = action.choices.get(getattr(args, action.dest, None) or "")
            if chosen is not None:
                out += _path_arguments(chosen, args)
            continue
        kind = _PATH_METAVARS.get(action.metavar) if isinstance(action.metavar, str) else None
        value = getattr(args, action.dest, None) if kind else None
        for v in (value if isinstance(value, list) else [value]):
            if kind and isinstance(v, str | os.PathLike) and os.fspath(v):
                name = f"{action.option_strings[-1]} {v}" if action.option_strings else os.fspath(v)
                out.append((action.dest, name, os.fspath(v), kind))
    return out


_LISTED_AS_PROBLEMS = {("validate", "file"), ("score", "file")}
"""``(command, dest)`` of the file arguments whose command lists a folder given for them among the file's problems
(exit 1), with the others."""


def _check_inputs(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Refuse a file or folder argument that is a FIFO, a device or a socket, before anything opens it (a FIFO
    would wait for a writer for ever, ``/dev/zero`` would be read until memory runs out), and a folder given for a
    file (taken for a missing file, or read as an empty one, otherwise)."""
    from competition.atomic import special_file

    for dest, name, value, kind in _path_arguments(parser, args):
        special = special_file(value)
        if special is not None:
            raise UsageError(f"{name}: expected a {kind}; found {special}")
        if kind == "file" and (args.command, dest) not in _LISTED_AS_PROBLEMS and os.path.isdir(value):
            raise UsageError(f"{name}: expected a file; found a folder")


def _close_stdout() -> None:
    """After a closed pipe: point stdout at /dev/null, so that the flush at exit has nowhere to fail (the Python
    documentation's recipe for SIGPIPE)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # no real stdout (a captured one): nothing will be flushed to the pipe
        pass


def _expected(exc: BaseException) -> bool:
    """Failures of the input, the arguments or the machine, not of fastslow's code: one line, no traceback."""
    from fastslow.kaggle import KaggleError

    return isinstance(exc, (OSError, ValueError, csv.Error, OverflowError, MemoryError, KaggleError))


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP (``kill``, a supervisor, a closed terminal), raised in the main thread as SIGINT raises
    :class:`KeyboardInterrupt`: the command ends as on Ctrl-C (temporaries removed, finished files kept, one line),
    with the exit code 128 + the signal's number, as shells report a process the signal ended.

    Attributes:
        signum: the signal.
    """

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum

    def __str__(self) -> str:
        import signal

        return signal.Signals(self.signum).name


_STOP_SIGNALS = ("SIGTERM", "SIGHUP")


_installed: dict[int, typing.Any] = {}  # signal -> the handler it had before main() installed its own


class _Finalizers:
    """What main() does with an exception raised where Python cannot raise it (a ``__del__``, a weak reference's
    callback, a generator closed by the garbage collector): ``sys.unraisablehook`` while a command runs.

    * A stop (Ctrl-C, SIGTERM, SIGHUP) whose handler ran inside such a finalizer would be printed and lost, and the
      command would go on to exit 0: its signal is raised again, so that the command stops where it is.
    * Once a command is stopping, objects it abandoned mid-write (a ``ZipFile`` whose file was closed under it) fail
      to finalize; that is not news to the user, who sees the one line, so it is not printed (``--verbose`` prints
      it).
    * Anything else is printed as Python prints it.
    """

    def __init__(self) -> None:
        self.stopping = False
        self.verbose = False
        self.previous: typing.Any = None

    def __call__(self, unraisable: typing.Any) -> None:
        import signal

        exc = unraisable.exc_value
        if isinstance(exc, KeyboardInterrupt) and not self.stopping:
            signal.raise_signal(exc.signum if isinstance(exc, Terminated) else signal.SIGINT)
            return
        if self.stopping and not self.verbose:
            return
        (self.previous or sys.__unraisablehook__)(unraisable)

    def install(self) -> None:
        self.stopping = False
        if sys.unraisablehook is not self:  # left by an earlier command of this process that was stopped
            self.previous = sys.unraisablehook
        sys.unraisablehook = self

    def uninstall(self) -> None:
        if sys.unraisablehook is self:
            sys.unraisablehook = self.previous or sys.__unraisablehook__


_finalizers = _Finalizers()


_CHILD_GRACE_SECONDS = 5.0
"""How long a forked child that got SIGTERM or SIGHUP waits for the SIGINT of its parent before it dies of it."""


def _raise_terminated(signum: int, frame: object) -> None:
    """SIGTERM or SIGHUP in the main process: the workers of its process pools get SIGINT, so that they stop as on
    Ctrl-C (their temporaries removed), not by going on with the queued jobs a pool's shutdown waits for; then
    :class:`Terminated` is raised here."""
    import multiprocessing
    import signal

    for child in multiprocessing.active_children():
        try:
            os.kill(child.pid, signal.SIGINT)  # type: ignore[arg-type]
        except OSError:  # ended meanwhile
            pass
    raise Terminated(signum)


def _child_stop(signum: int, frame: object) -> None:
    """SIGTERM or SIGHUP in a forked child (a pool's worker): it dies of the signal after
    :data:`_CHILD_GRACE_SECONDS`, going on meanwhile. Sent to the whole process group, the signal reached the
    parent too, whose SIGINT follows at once: the child then stops as on Ctrl-C (temporaries removed) before the
    grace ends. Sent by a pool that ends its workers, nothing follows: the child dies, as a worker always did (one
    that raised instead could go on waiting for jobs, and the pool's shutdown for it)."""
    import signal
    import threading

    signal.signal(signum, signal.SIG_DFL)
    timer = threading.Timer(_CHILD_GRACE_SECONDS, os.kill, (os.getpid(), signum))
    timer.daemon = True
    timer.start()


def _in_forked_child() -> None:
    """After a fork: the signals main() handles get :func:`_child_stop` instead of :func:`_raise_terminated`."""
    import signal

    for signum in list(_installed):
        try:
            signal.signal(signum, _child_stop)
        except (ValueError, OSError):
            pass
    _installed.clear()


def _stop_on_signals() -> None:
    """Make SIGTERM and SIGHUP raise :class:`Terminated` until :func:`_restore_signals`.

    Only signals left at their default action are taken: one that is ignored (``nohup``) or handled by the caller
    stays so. Nothing is installed outside the main thread, nor in a process that torchrun started (torchrun stops
    its ranks with SIGTERM, and reports how they ended).
    """
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread() or "TORCHELASTIC_RUN_ID" in os.environ:
        return
    if not getattr(_stop_on_signals, "at_fork", False) and hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=_in_forked_child)
        _stop_on_signals.at_fork = True  # type: ignore[attr-defined]
    for name in _STOP_SIGNALS:
        signum = getattr(signal, name, None)  # no SIGHUP on Windows
        if signum is None or signum in _installed:
            continue
        try:
            if signal.getsignal(signum) is signal.SIG_DFL:
                _installed[signum] = signal.signal(signum, _raise_terminated)
        except (ValueError, OSError):
            pass


def _restore_signals() -> None:
    """Give the signals :func:`_stop_on_signals` took their earlier handlers back."""
    import signal

    for signum, previous in list(_installed.items()):
        try:
            signal.signal(signum, previous)
        except (ValueError, OSError):
            pass
    _installed.clear()


def main(argv: Sequence[str] | None = None) -> int:
    """Run one ``fastslow`` command; returns its exit code (see :data:`EXIT_CODES`).

    Raises:
        SystemExit: a usage error (argparse's, or :class:`UsageError`), after printing it.
    """
    args: argparse.Namespace | None = None
    _finalizers.install()
    try:
        _stop_on_signals()
        parser = build_parser()
        args = parser.parse_args(argv)
        from fastslow.progress import line_progress_when_logged

        line_progress_when_logged()
        logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                            format="%(levelname)s %(message)s")
        # torch sets its loggers' levels when its import ends; one cut short by Ctrl-C left them to the level above,
        # and torch's exit handlers logged their statistics under the one line.
        logging.getLogger("torch").setLevel(logging.WARNING)
        _check_outputs(args)
        _check_inputs(parser, args)
        code = args.func(args)
        sys.stdout.flush()  # a closed pipe shows here, inside the boundary, not in the flush at exit
        return code
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise
    except KeyboardInterrupt as exc:
        _forget_interrupt()
        _finalizers.stopping, _finalizers.verbose = True, bool(args is not None and args.verbose)
        if args is not None and args.verbose:
            traceback.print_exc()
        print(INTERRUPTED, file=sys.stderr)
        return 128 + exc.signum if isinstance(exc, Terminated) else EXIT_INTERRUPTED
    except BrokenPipeError:
        _close_stdout()
        return EXIT_PIPE_CLOSED
    except Exception as exc:
        from competition.submission_format import SubmissionError

        if args is None or not _expected(exc):
            traceback.print_exc()
            print(f"internal error (a bug in fastslow, not a problem of the input): {type(exc).__name__}: {exc}; "
                  "please report it with the traceback above", file=sys.stderr)
            return EXIT_BUG
        if args.verbose:
            traceback.print_exc()
        print(f"error: {_message(exc, args)}", file=sys.stderr)
        return EXIT_PROBLEMS if isinstance(exc, SubmissionError) else EXIT_ERROR
    finally:
        _restore_signals()
        if not _finalizers.stopping:  # a stopping command's abandoned objects are finalized at exit, quietly
            _finalizers.uninstall()


def _forget_interrupt() -> None:
    """CPython marks a :class:`KeyboardInterrupt` raised inside ``exec`` or ``eval`` of a string (a dataclass or a
    named tuple being defined, as imports of torch do by the thousand) as unhandled even once it is caught, and
    ``python -m fastslow`` then ends by SIGINT at exit instead of with its exit code. Each such evaluation clears
    the mark as it starts: an empty one clears it."""
    exec("", {})


def _message(exc: BaseException, args: argparse.Namespace) -> str:
    from competition.errors import DataRootNotFound

    if isinstance(exc, OSError) and not isinstance(exc, DataRootNotFound) and exc.errno is not None:
        return _os_message(exc, args)
    if isinstance(exc, UnicodeDecodeError):  # a reader that did not name its file: the traceback (-v) does
        return (f"a file read by `fastslow {args.command}` is not UTF-8 text (byte {exc.start}: {exc.reason}); "
                "--verbose shows which")
    if isinstance(exc, csv.Error):
        return f"a file read by `fastslow {args.command}` is malformed CSV ({exc}); --verbose shows which"
    if isinstance(exc, MemoryError):
        return (f"out of memory in `fastslow {args.command}`: free memory (or choose smaller settings) and re-run "
                "the same command")
    return str(exc)


if __name__ == "__main__":
    raise SystemExit(main())
