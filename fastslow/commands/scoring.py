"""``fastslow validate``, ``score`` and ``leaderboard``: submission files checked, scored and ranked."""

from __future__ import annotations

import argparse
import logging
import os
import sys
import typing
from pathlib import Path

from competition.collections import Split
from fastslow.commands.common import EXIT_OK, EXIT_PROBLEMS, add_data_arg, check_output, protocol_of

if typing.TYPE_CHECKING:
    from competition.protocol import ValidProtocol

log = logging.getLogger("fastslow")


def add_validate_parser(sub: argparse._SubParsersAction) -> None:
    """``fastslow validate`` (a submission file)."""
    from competition.protocol import add_valid_configs_arg

    validate = sub.add_parser(
        "validate", help="check a submission file; exits 1 on any problem",
        description="Check a submission: header, every expected ID once, no unknown IDs, layout rows a permutation "
                    "of all configs, tile rows at least min(5, C) distinct valid indices. Each problem is printed "
                    "with its row and ID.",
    )
    validate.add_argument("file", metavar="FILE", help="the submission CSV")
    add_data_arg(validate)
    validate.add_argument("--split", choices=[s.value for s in Split], default="test",
                          help="split whose graphs the file ranks (default: %(default)s)")
    add_valid_configs_arg(validate)
    validate.set_defaults(func=_cmd_validate_submission)


def add_score_parser(sub: argparse._SubParsersAction) -> None:
    """``fastslow score``."""
    from competition.protocol import add_valid_configs_arg
    from fastslow.board import DEFAULT_PATH as DEFAULT_LEADERBOARD

    score = sub.add_parser(
        "score", help="score a submission offline and record it in the leaderboard",
        description="Score a submission against labelled data: the valid split (real or synthetic), or the "
                    "synthetic test split through its secret/ runtimes. Prints a table per collection and the "
                    "combined score, and appends a row to the leaderboard.",
    )
    score.add_argument("file", metavar="FILE", help="the submission CSV")
    add_data_arg(score)
    score.add_argument("--split", choices=["valid", "test"], default="test",
                       help="split the file ranks: test needs the synthetic secret/ tree (default: %(default)s)")
    score.add_argument("--producer", default="manual", help="what produced the file, for the leaderboard "
                                                            "(default: %(default)s)")
    score.add_argument("--leaderboard", default=str(DEFAULT_LEADERBOARD), metavar="CSV",
                       help="leaderboard file to append to (default: %(default)s)")
    score.add_argument("--per-graph", action="store_true", help="also list every graph's score, worst first")
    score.add_argument("--partial", action="store_true",
                       help="score a file that `fastslow validate` rejects because whole collections are missing: "
                            "the collections it holds are scored (each must be complete and valid) and the "
                            "leaderboard row says complete=false. Default: refuse it (exit 1)")
    add_valid_configs_arg(score)
    score.set_defaults(func=_cmd_score, outputs={"leaderboard": "file"})


def add_leaderboard_parser(sub: argparse._SubParsersAction) -> None:
    """``fastslow leaderboard``."""
    from fastslow.board import DEFAULT_PATH as DEFAULT_LEADERBOARD

    board = sub.add_parser("leaderboard", help="show the offline leaderboard, best first, and plot it",
                           description="Print the leaderboard history best first and write a PNG plot of the scores "
                                       "per collection over time.")
    board.add_argument("--leaderboard", default=str(DEFAULT_LEADERBOARD), metavar="CSV",
                       help="leaderboard file (default: %(default)s)")
    board.add_argument("--plot", default=None, metavar="PNG",
                       help="where to write the plot (default: beside the leaderboard, leaderboard.png)")
    board.add_argument("--top", type=int, default=20, metavar="N", help="rows to print (default: %(default)s)")
    board.set_defaults(func=_cmd_leaderboard, outputs={"plot": "file"})


def _cmd_validate_submission(args: argparse.Namespace) -> int:
    from competition.dataroot import find_data_root
    from competition.submission_checks import validate_submission
    from competition.submission_format import problem_count

    root = find_data_root(args.data)
    protocol = protocol_of(args)
    if Split(args.split) == Split.VALID:
        protocol.check_root(root)
    problems = validate_submission(args.file, root, Split(args.split), protocol=protocol)
    for p in problems:
        print(f"{args.file}: {p}")
    print(f"{args.file}: {'valid' if not problems else f'{problem_count(problems)} problem(s)'}")
    return EXIT_PROBLEMS if problems else EXIT_OK


def _cmd_score(args: argparse.Namespace) -> int:
    from competition.dataroot import collections_with_graphs, find_data_root
    from competition.labels import load_labels
    from competition.stats import oracle_scores
    from competition.submission_checks import validate_submission
    from competition.submission_format import SubmissionError, problem_count
    from competition.submission_scoring import score_submission
    from fastslow.board import append_row
    from fastslow.display import printable

    root = find_data_root(args.data)
    split = Split(args.split)
    protocol = protocol_of(args)
    if split == Split.VALID:
        protocol.check_root(root)
    problems = validate_submission(args.file, root, split, protocol=protocol)
    listed = validate_command(args.file, root.root, split, protocol)  # the command that lists them all
    if problems and not args.partial:
        # One problem a line, each escaped: a file's name or rows cannot forge a line or move the cursor.
        found = "\n".join(map(printable, str(SubmissionError(args.file, problems)).split("\n")))
        print(f"error: {found}\nnot scored: `{listed}` lists every problem; --partial scores the collections it "
              "holds in full", file=sys.stderr)
        return EXIT_PROBLEMS
    labels = load_labels(root, collections_with_graphs(root, split), split, protocol)
    report = score_submission(args.file, root, split, labels=labels)
    if not report.collections:
        print(f"error: {printable(args.file)}: nothing to score (no rows)", file=sys.stderr)
        return EXIT_PROBLEMS
    synthetic = root.is_synthetic
    print(report.format_table(oracle_scores(labels.of(report.collections)) if synthetic else None))
    if args.per_graph:
        for c, res in report.collections.items():
            for g in sorted(res.graphs, key=lambda g: g.score):
                print(f"  {c.value:20s} {printable(g.stem):40s} {g.score:8.4f}")
    if synthetic:
        print("(synthetic data: this score says nothing about the Kaggle leaderboard)")
    if problems:
        print(f"partial: {', '.join(c.value for c in report.collections)} scored; {problem_count(problems)} problem(s) "
              f"elsewhere (see `{listed}`); the leaderboard row says complete=false")
    append_row(report.scores(), file=args.file, producer=args.producer, split=split.value, data=root.root,
               synthetic=synthetic, path=args.leaderboard, protocol=protocol.tag if split == Split.VALID else "",
               partial=bool(problems))
    return EXIT_OK


def validate_command(file: str | os.PathLike[str], root: str | os.PathLike[str], split: Split | str,
                     protocol: ValidProtocol) -> str:
    """The ``fastslow validate`` command that lists every problem of the submission ``file`` as it was checked: on
    the data root ``root``, its ``split`` and (valid split) ``protocol``, quoted to paste."""
    from competition.errors import suggested_command
    from competition.protocol import ALL

    split = Split(split)
    argv: list[object] = ["validate", Path(file), "--data", Path(root), "--split", split.value]
    if split == Split.VALID:
        argv += ["--valid-configs", ALL if protocol.max_configs is None else protocol.max_configs]
        if protocol.indices is not None:
            argv += ["--valid-indices", protocol.indices.source]
        if protocol.unmatched_ok:
            argv.append("--force")
    return suggested_command(*argv)


def _cmd_leaderboard(args: argparse.Namespace) -> int:
    from fastslow.board import format_leaderboard, read_rows, save_plot

    rows = read_rows(args.leaderboard)
    if not rows:
        from competition.errors import printable, suggested_command

        print(f"{printable(args.leaderboard)}: no scorings yet (run "
              f"`{suggested_command('score', 'FILE', '--leaderboard', Path(args.leaderboard))}` or `make submit`)")
        return 0
    plot = args.plot or str(Path(args.leaderboard).with_name("leaderboard.png"))
    check_output("--plot", plot, "file")
    print(format_leaderboard(rows, args.top))
    print(f"plot: {save_plot(rows, plot)}")
    return 0
