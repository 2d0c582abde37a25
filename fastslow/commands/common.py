"""What the ``fastslow`` commands share: the exit codes, the data, collections, protocol and jobs arguments, the
output checks, and refusals."""

from __future__ import annotations

import argparse
import logging
import os
import typing
from collections.abc import Callable, Sequence

from competition.collections import Collection
from competition.errors import EXIT_ERROR, UsageError

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
    return UsageError(f"fastslow {args.command}: {message}")


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


def add_jobs_arg(p: argparse.ArgumentParser) -> None:
    from competition.workers import MAX_AUTO_JOBS

    p.add_argument("--jobs", type=jobs_arg, default=None, metavar="N",
                   help="fit up to N collections at once, each in a process of its own with cores/N torch threads "
                        "(the GNN models on the CPU; gbdt uses every core itself). One fit per core beats one fit "
                        "on every core; each concurrent fit holds its own train graphs in memory (several GiB "
                        "for xla:random at the real counts: RESULTS.md). Default: the usable cores, at most "
                        f"{MAX_AUTO_JOBS}; 1 fits one collection at a time")


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
