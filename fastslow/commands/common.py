"""What the ``fastslow`` commands share: the exit codes, the data, collections, protocol and jobs arguments, the
output checks, and refusals."""

from __future__ import annotations

import argparse
import logging
import os
import typing
from collections.abc import Callable, Sequence

from competition.collections import Collection
from competition.errors import EXIT_ERROR, UsageError, printable, shown

if typing.TYPE_CHECKING:
    from competition.protocol import ValidProtocol

log = logging.getLogger("fastslow")

EXIT_OK = 0
EXIT_PROBLEMS = 1
EXIT_BUG = 3
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report a process stopped by Ctrl-C
EXIT_PIPE_CLOSED = 141  # 128 + SIGPIPE, as shells report a writer whose reader went away
EXIT_CODES = f"""exit codes:
  {EXIT_OK}    done
  {EXIT_PROBLEMS}    problems found: the submission or data checked is invalid (every problem is listed)
  {EXIT_ERROR}    cannot run as asked: a bad argument, or a file or folder that cannot be used (missing or corrupt
       data, permission denied, disk full, ...); one line names it and says what to do
  {EXIT_BUG}    internal error, a bug in fastslow: its traceback is printed, please report it
  {EXIT_INTERRUPTED}  interrupted (Ctrl-C): re-run the same command to resume
  129, 143  ended by SIGHUP or SIGTERM (128 + the signal's number), as by Ctrl-C: re-run the same command to resume
  {EXIT_PIPE_CLOSED}  the output was closed early (e.g. piped into `head`): nothing more is printed
-v/--verbose also prints the traceback of an error."""

INTERRUPTED = ("interrupted; re-run the same command to resume (data synth and GNN training go on where they "
               "stopped; finished files are kept, half-written ones never replace them)")

COLLECTIONS_HELP = (
    "collections to include, by submission prefix (tile:xla, layout:xla:default, layout:xla:random, "
    "layout:nlp:default, layout:nlp:random); default: all five"
)


def protocol_of(args: argparse.Namespace) -> ValidProtocol:
    from competition.protocol import protocol_from_args

    return protocol_from_args(args)


def collections_of(values: Sequence[str] | None) -> list[Collection]:
    return [Collection.parse(v) for v in values] if values else list(Collection)


def add_data_arg(p: argparse.ArgumentParser) -> None:
    from competition.dataroot import DATA_ROOT_HELP

    p.add_argument("--data", metavar="DIR", default=None, help=DATA_ROOT_HELP)


def refused(args: argparse.Namespace, message: str) -> UsageError:
    """The refusal ``message`` of the command, as one line: a control character that reached it from an input (a
    key, a path) is escaped (:func:`competition.errors.printable`)."""
    return UsageError(printable(f"fastslow {args.command}: {message}"))


def jobs_arg(text: str) -> int:
    try:
        jobs = int(text)
    except ValueError:
        jobs = 0
    if jobs < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 1, found {text!r}")
    return jobs


def count_arg(flag: str) -> Callable[[str], int]:
    """The ``type`` of an argument counting things, at least 1: a smaller one (``--limit 0`` would write an empty
    world every later command refuses) is refused while parsing, before anything is written, in one line."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = 0
        if value < 1:
            raise UsageError(f"{flag}: expected a whole number of at least 1; found {text!r}")
        return value

    return parse


def seed_arg(flag: str) -> Callable[[str], int]:
    """The ``type`` of a seed option: a whole number from 0 to :data:`~competition.limits.MAX_SEED`, the range of
    every seed setting too; another is refused while parsing, before anything is written, in one line naming the
    option."""
    from competition.limits import MAX_SEED

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:  # not a whole number, or one of more digits than Python reads
            value = -1
        if not 0 <= value <= MAX_SEED:
            raise UsageError(f"{flag}: expected a whole number from 0 to {MAX_SEED:,}; found {shown(repr(text))}")
        return value

    return parse


def seconds_arg(flag: str, most: float) -> Callable[[str], float]:
    """The ``type`` of an option counting seconds: a finite number above 0 and at most ``most``; another (``nan``,
    ``-1``, ``inf``) is refused while parsing, in one line naming the option."""
    import math

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not (math.isfinite(value) and 0 < value <= most):
            raise UsageError(f"{flag}: expected a number of seconds above 0 and at most {most:,g}; found "
                             f"{shown(repr(text))}")
        return value

    return parse


def checked_seeds(parser: argparse.ArgumentParser) -> None:
    """Give every ``--seed`` option of every command (declared as an ``int``) the range of :func:`seed_arg`, so that
    no command takes a seed another refuses (``--seed -5`` ended in a library's error once the work began)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                checked_seeds(sub)
        elif "--seed" in action.option_strings and action.type is int:
            action.type = seed_arg("--seed")


def add_jobs_arg(p: argparse.ArgumentParser) -> None:
    from competition.workers import MAX_AUTO_JOBS, WORKERS_RULE

    p.add_argument("--jobs", type=jobs_arg, default=None, metavar="N",
                   help="fit up to N collections at once, each in a process of its own with cores/N torch threads "
                        "(the GNN models on the CPU; gbdt uses every core itself). One fit per core beats one fit "
                        "on every core; each concurrent fit holds its own train graphs in memory (several GiB "
                        "for xla:random at the real counts: RESULTS.md). Default: the usable cores, at most "
                        f"{MAX_AUTO_JOBS}; 1 fits one collection at a time; however many are asked, "
                        f"{WORKERS_RULE} (a job fits one collection)")


def check_output(flag: str, value: str | os.PathLike[str], kind: str) -> None:
    """Refuse an output ``kind`` (``file`` or ``folder``) that cannot be written, before any work is done.

    The folder that would receive it (the output folder, or a file's folder) or its nearest existing ancestor must
    be a writable folder; an existing output must be of its kind. Writes can still fail later (a full disk): the
    error boundary says so then.
    """
    from competition.atomic import output_problem

    problem = output_problem(value, kind)
    if problem is not None:
        raise UsageError(f"{flag} {value}: {problem}")


def verbose_everywhere(parser: argparse.ArgumentParser) -> None:
    """Accept ``-v/--verbose`` after the command too (``fastslow score FILE -v``), not only before it."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                if not any("--verbose" in a.option_strings for a in sub._actions):
                    # SUPPRESS: left out, the value given before the command (or its default) stands.
                    sub.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS,
                                     help="log debug messages, and print the traceback of an error")
                verbose_everywhere(sub)
