"""``fastslow report``: one self-contained HTML page (plus PNG plots beside it) about where the project stands.

The page has five sections, each with a heading, a sentence for a newcomer, a plot and the numbers as a table:

1. the best leaderboard score of every producer per collection, with the oracle ceiling (synthetic data only);
2. the distribution of the per-graph scores of one submission;
3. predicted against true rank for a few layout graphs of that submission;
4. how much pruning to the configurable nodes keeps, per collection;
5. the learning curves of every training run found under ``runs/`` (``curves.csv``; not those of runs moved aside by
   a run with other settings).

A section whose inputs are missing says why instead of failing. The folder is written atomically: everything goes
into a temporary folder beside it, which then replaces the old report; only what a report wrote (listed in its
``.fastslow-report``) is ever replaced or removed.
"""

from __future__ import annotations

import argparse
import html
import os
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path

from competition.atomic import atomic_write_text, first_free, temp_sibling
from competition.collections import Collection, Split
from competition.dataroot import DATA_ROOT_HELP, DataRoot, collections_with_graphs, find_data_root
from competition.errors import printable
from competition.labels import HiddenLabelsError, SplitLabels, load_labels
from competition.protocol import DEFAULT_PROTOCOL, ValidProtocol, add_valid_configs_arg, protocol_from_args
from fastslow.board import DEFAULT_PATH, read_rows
from fastslow.display import plots_plain_text
from fastslow.report_sections import (
    PRUNING_MAX_GRAPHS,
    Section,
    curves_section,
    default_submission,
    leaderboard_rows,
    page_text,
    pruning_section,
    rank_section,
    scores_section,
    tau_section,
)

DEFAULT_OUT_DIR = Path("submissions") / "report"
DEFAULT_RUNS_DIR = Path("runs")
_CSS = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1100px; color: #222; line-height: 1.4; }
h1 { border-bottom: 2px solid #444; padding-bottom: .2em; }
h2 { margin-top: 2em; border-bottom: 1px solid #bbb; }
p.explain { color: #444; font-style: italic; }
p.missing { background: #fff4e0; border-left: 4px solid #e0a030; padding: .4em .8em; }
p.note { color: #555; font-size: .9em; }
img { max-width: 100%; border: 1px solid #ddd; margin: .5em 0; }
table { border-collapse: collapse; margin: .5em 0 1em; font-size: .9em; }
th, td { border: 1px solid #ccc; padding: .25em .6em; }
th { background: #f0f0f0; text-align: left; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
dl.meta dt { font-weight: bold; float: left; clear: left; width: 9em; }
dl.meta dd { margin-left: 10em; }
"""


# --------------------------------------------------------------------------------------------------------------
# Page building blocks
# --------------------------------------------------------------------------------------------------------------


REPORT_MARKER = ".fastslow-report"
"""The file in a report folder that lists the files the report wrote, one name a line: only those are ever replaced
or removed by the next report."""


def _report_files(out_dir: Path) -> set[str] | None:
    """The names of the files a report wrote in ``out_dir`` (the marker's list), or ``None`` for a folder that is not
    a report. A report written before the marker existed is recognised by its page's title, with only PNG files
    beside it."""
    marker = out_dir / REPORT_MARKER
    if marker.is_file():
        try:
            names = marker.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError):
            return None
        return {n for n in names if n and "/" not in n and n not in (".", "..")} | {REPORT_MARKER}
    index = out_dir / "index.html"
    try:
        with open(index, encoding="utf-8") as f:
            head = f.read(400)
    except (OSError, UnicodeDecodeError):
        return None
    entries = {e.name for e in out_dir.iterdir()}
    if "<title>fastslow report</title>" in head and all(n == "index.html" or n.endswith(".png") for n in entries):
        return entries
    return None


def _check_out_dir(out_dir: Path, force: bool) -> None:
    if out_dir.exists() and not out_dir.is_dir():
        raise ValueError(f"{out_dir} exists and is not a folder")
    if not force and out_dir.is_dir() and any(out_dir.iterdir()) and _report_files(out_dir) is None:
        raise ValueError(f"{out_dir} is a non-empty folder that is not a fastslow report (no {REPORT_MARKER}): "
                         "refusing to write into it; choose another --out, or pass --force to write the report "
                         "beside its files (nothing of yours is replaced or deleted)")


def _replace_dir(tmp: Path, out_dir: Path) -> list[str]:
    """Put the finished report ``tmp`` in place of ``out_dir``, replacing or removing only what an earlier report
    wrote there (:data:`REPORT_MARKER`). Returns one line per file of the user's that was moved aside.

    A folder that holds nothing else is swapped whole (two renames; the old report waits in a locked temporary
    folder and is removed after; one a killed run left behind is removed by the next build, see
    :func:`competition.atomic.temp_sibling`). Otherwise the report's files are moved in one by one (index last), a
    file of the user's under a report file's name is first kept as ``<name>.orig``, and the earlier report's files
    that this one no longer has are removed.
    """
    new = sorted(p.name for p in tmp.iterdir())
    (tmp / REPORT_MARKER).write_text("".join(f"{n}\n" for n in new), encoding="utf-8")
    if out_dir.is_dir() and not any(out_dir.iterdir()):
        out_dir.rmdir()
    if not out_dir.exists():
        os.replace(tmp, out_dir)
        return []
    owned = _report_files(out_dir) or set()
    if {e.name for e in out_dir.iterdir()} <= owned:
        with temp_sibling(out_dir, directory=True) as old:
            os.replace(out_dir, old / "report")
            try:
                os.replace(tmp, out_dir)
            except BaseException:
                os.replace(old / "report", out_dir)
                raise
        return []
    said = []
    marker = out_dir / REPORT_MARKER
    # The marker first lists the old report's files and the new one's: a run killed half-way leaves nothing of the
    # user's unlisted, and nothing of ours that the next run would take for the user's.
    atomic_write_text(marker, "".join(f"{n}\n" for n in sorted((owned | set(new)) - {REPORT_MARKER})))
    for name in sorted(new, key=lambda n: (n == "index.html", n)):
        if name == REPORT_MARKER:
            continue
        target = out_dir / name
        if os.path.lexists(target) and name not in owned:
            kept = first_free(target.with_name(f"{name}.orig{'' if i == 0 else f'-{i}'}")
                              for i in range(10_000))
            os.replace(target, kept)
            said.append(f"kept your {target} as {kept.name}")
        os.replace(tmp / name, target)
    for name in sorted(owned - set(new) - {REPORT_MARKER}):
        stale = out_dir / name
        if stale.is_file() and not stale.is_symlink():
            stale.unlink()
    atomic_write_text(marker, "".join(f"{n}\n" for n in new))
    return said


def _check_readable(path: Path) -> None:
    """Refuse a submission given to study that cannot be read, before any work (the page would only say so)."""
    try:
        with open(path, "rb"):
            pass
    except FileNotFoundError:
        raise ValueError(f"--submission {printable(path)}: no such file") from None
    except OSError as exc:
        raise ValueError(f"--submission {printable(path)}: cannot be read ({exc.strerror or exc})") from None


def _unscorable(path: Path, root: DataRoot, split: Split, protocol: ValidProtocol, exc: Exception) -> str:
    """The one-line refusal of a submission given to study that cannot be scored: the first problem, how many there
    are, and the command that lists them all."""
    from competition.submission_format import SubmissionError
    from fastslow.commands.scoring import validate_command

    where = f"--submission {printable(path)}: cannot be scored on the {split.value} split of {printable(root.root)}"
    if not isinstance(exc, SubmissionError):
        return f"{where}: {printable(exc)}"
    first = printable(exc.problems[0]) if exc.problems else "no rows"
    return (f"{where}: {exc.count} problem(s), the first: {first} "
            f"(`{validate_command(path, root.root, split, protocol)}` lists them all)")


def _page(sections: Sequence[Section], meta: Sequence[tuple[str, str]]) -> str:
    toc = "".join(f'<li><a href="#{html.escape(s.anchor)}">{html.escape(s.title)}</a></li>' for s in sections)
    dl = "".join(f"<dt>{html.escape(k)}</dt><dd>{page_text(v)}</dd>" for k, v in meta)
    return ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>fastslow report</title>\n"
            f"<style>{_CSS}</style>\n</head>\n<body>\n<h1>fastslow report</h1>\n<dl class=\"meta\">{dl}</dl>\n"
            f"<ul>{toc}</ul>\n" + "\n".join(s.to_html() for s in sections) + "\n</body>\n</html>\n")


@plots_plain_text
def build_report(
    out_dir: str | os.PathLike[str] = DEFAULT_OUT_DIR,
    *,
    root: DataRoot | str | os.PathLike[str] | None,
    submission: str | os.PathLike[str] | None = None,
    split: Split | str = Split.VALID,
    leaderboard: str | os.PathLike[str] = DEFAULT_PATH,
    runs_dir: str | os.PathLike[str] = DEFAULT_RUNS_DIR,
    graphs: int = 4,
    progress: bool = True,
    pruning_max_graphs: int = PRUNING_MAX_GRAPHS,
    protocol: ValidProtocol = DEFAULT_PROTOCOL,
    force: bool = False,
) -> Path:
    """Write the report: ``out_dir/index.html`` and its PNG plots, replacing a previous report atomically.

    Args:
        out_dir: the report folder. Only what an earlier report wrote there is replaced or removed; a non-empty
            folder that is not a report is refused unless ``force`` (see :func:`_replace_dir`).
        root: the data root (a :class:`DataRoot`, or a path given to :func:`find_data_root`; ``None`` discovers it).
        submission: the submission to study in sections 2 and 3; default the best one of ``split`` on the
            leaderboard whose file exists.
        split: the split the scores and the submission are of (``valid`` or ``test``; test needs hidden runtimes,
            i.e. a synthetic world).
        leaderboard: the leaderboard CSV.
        runs_dir: the folder searched for ``**/curves.csv``.
        graphs: how many layout graphs section 3 plots.
        progress: show progress bars while pruning.
        protocol: which configs of each valid layout graph are scored (:mod:`competition.protocol`).
        pruning_max_graphs: per collection, the most graphs the pruning statistics read (an evenly spread sample
            beyond).
        force: write into a non-empty folder that is not a report, beside its files (a file of the user's under a
            report file's name is kept as ``<name>.orig``; nothing is deleted).

    Returns:
        The path of ``index.html``.

    Raises:
        ValueError: ``out_dir`` is a file, or a non-empty folder that is not a report and ``force`` is false; the
            leaderboard is not one (:func:`fastslow.board.read_rows`); ``submission`` cannot be read (checked before
            any work) or scored. Each in one line naming the file.
    """
    from competition.stats import oracle_scores
    from competition.submission_format import SubmissionError
    from competition.submission_reading import read_submission
    from competition.submission_scoring import score_submission

    t0 = time.perf_counter()
    out_dir = Path(out_dir)
    split = Split(split)
    leaderboard = Path(leaderboard)
    runs_dir = Path(runs_dir)
    if submission is not None:
        _check_readable(Path(submission))
    root = root if isinstance(root, DataRoot) else find_data_root(root)
    _check_out_dir(out_dir, force)
    synthetic = root.is_synthetic
    collections = collections_with_graphs(root, split)
    labels: SplitLabels | None
    try:
        labels, hidden = load_labels(root, collections, split, protocol), ""
    except HiddenLabelsError as exc:
        labels, hidden = None, str(exc)
    oracle = oracle_scores(labels) if labels is not None else None

    all_rows = read_rows(leaderboard)  # a file that is not a leaderboard is refused, as `fastslow leaderboard` does
    rows, matched = leaderboard_rows(all_rows, split, root)
    if submission is not None:
        sub_path: Path | None = Path(submission)
        how = f"given: {sub_path}"
    else:
        sub_path, how = default_submission(rows, leaderboard, split)

    report = orders = None
    why = how
    if sub_path is not None and labels is None:
        if submission is not None:
            raise ValueError(f"--submission {printable(sub_path)}: cannot be scored on the {split.value} split of "
                             f"{printable(root.root)}: {printable(hidden)}")
        why = f"Could not score {sub_path} on the {split.value} split of {root.root}: {hidden}"
    elif sub_path is not None:
        try:
            orders = read_submission(sub_path)
            report = score_submission(sub_path, root, split, labels=labels)
            why = f"Submission {sub_path} ({how})."
        except (OSError, SubmissionError) as exc:
            if submission is not None:  # the file asked for: refused, not only said in the page
                raise ValueError(_unscorable(sub_path, root, split, protocol, exc)) from None
            report = orders = None
            why = f"Could not score {sub_path} on the {split.value} split of {root.root}: {exc}"
    else:
        why = how[0].upper() + how[1:] + "."

    # A temporary folder with the umask's mode, removed on failure (and by the next run if this one is killed).
    with temp_sibling(out_dir, directory=True) as tmp:
        builders: list[Callable[[], Section]] = [
            lambda: scores_section(tmp, rows, matched, root, split, oracle, leaderboard),
            lambda: tau_section(tmp, report, why),
            lambda: rank_section(tmp, report, orders, labels, graphs, why),
            lambda: pruning_section(tmp, root, list(Collection), progress, pruning_max_graphs),
            lambda: curves_section(tmp, runs_dir),
        ]
        sections = [build() for build in builders]
        meta = [("data root", f"{root.root} ({'synthetic world' if synthetic else 'real data'})"),
                ("split", split.value + (f" (scored on {protocol.describe()})" if split == Split.VALID else "")),
                ("submission", str(sub_path) if report is not None else "-"),
                ("leaderboard", str(leaderboard)),
                ("runs", str(runs_dir)),
                ("generated", f"{datetime.now(UTC).isoformat(timespec='seconds')} "
                              f"in {time.perf_counter() - t0:.1f} s")]
        if synthetic:
            meta.append(("note", "synthetic data: these scores say nothing about the Kaggle leaderboard"))
        (tmp / "index.html").write_text(_page(sections, meta), encoding="utf-8")
        for line in _replace_dir(tmp, out_dir):
            print(line)
    return out_dir / "index.html"


# --------------------------------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------------------------------


def _cmd_report(args: argparse.Namespace) -> int:
    """Run ``fastslow report`` from parsed arguments; prints the path of ``index.html``."""
    index = build_report(args.out, root=args.data, submission=args.submission, split=Split(args.split),
                         leaderboard=args.leaderboard, runs_dir=args.runs, graphs=args.graphs,
                         progress=not args.no_progress, protocol=protocol_from_args(args), force=args.force)
    print(index)
    return 0


def _non_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a count >= 0, got {value}")
    return value


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``report`` command to the ``fastslow`` sub-commands.

    Args:
        subparsers: the object returned by ``ArgumentParser.add_subparsers``.
    """
    p = subparsers.add_parser(
        "report", help="write an HTML report with plots: scores, per-graph taus, ranks, pruning, learning curves",
        description="Write OUT/index.html and PNG plots beside it: the best leaderboard score per producer and "
                    "collection with the oracle ceiling, the per-graph score distribution and predicted-versus-true "
                    "ranks of one submission, pruning statistics, and the learning curves found under --runs.",
    )
    p.add_argument("--data", metavar="DIR", default=None, help=DATA_ROOT_HELP)
    p.add_argument("--submission", metavar="FILE", default=None,
                   help="submission CSV to study (default: the best one of --split on the leaderboard)")
    p.add_argument("--split", choices=[Split.VALID.value, Split.TEST.value], default=Split.VALID.value,
                   help="split of the scores and of the submission; test needs hidden runtimes (synthetic worlds) "
                        "(default: %(default)s)")
    p.add_argument("--leaderboard", metavar="CSV", default=str(DEFAULT_PATH),
                   help="leaderboard file (default: %(default)s)")
    p.add_argument("--runs", metavar="DIR", default=str(DEFAULT_RUNS_DIR),
                   help="folder searched for training runs' curves.csv (default: %(default)s)")
    p.add_argument("--out", metavar="DIR", default=str(DEFAULT_OUT_DIR),
                   help="report folder; only what an earlier report wrote there is replaced, and a non-empty folder "
                        "that is not a report is refused (default: %(default)s)")
    p.add_argument("--force", action="store_true",
                   help="write the report into a non-empty folder that is not a report, beside its files: a file "
                        "of yours under a report file's name is kept as <name>.orig, nothing is deleted")
    p.add_argument("--graphs", metavar="N", type=_non_negative, default=4,
                   help="layout graphs plotted as predicted versus true rank, spread over the collections "
                        "(default: %(default)s)")
    p.add_argument("--no-progress", action="store_true", help="hide progress bars")
    add_valid_configs_arg(p)
    p.set_defaults(func=_cmd_report)
