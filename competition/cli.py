"""The ``fastslow`` command line (also ``python -m competition``).

:func:`main` is the one error boundary: every failure a user can meet (a bad argument, missing or unreadable
data, an unwritable output, a full disk, Ctrl-C, a closed output pipe) ends in one line on standard error that
names the file or argument and says what to do, with the exit codes of :data:`EXIT_CODES`; ``--verbose`` adds
the traceback. A bug (any other exception) prints its traceback: a long run should not have to be repeated to
report it.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import errno
import logging
import os
import sys
import time
import traceback
import typing
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

from competition.collections import Collection, Split
from competition.errors import EXIT_ERROR, UsageError

if typing.TYPE_CHECKING:
    from competition.protocol import ValidProtocol
    from competition.reader import DataRoot
    from models.base import RankingModel
    from models.registry import ModelParams

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

_COLLECTIONS_HELP = (
    "collections to include, by submission prefix (tile:xla, layout:xla:default, layout:xla:random, "
    "layout:nlp:default, layout:nlp:random); default: all five"
)


def _protocol(args: argparse.Namespace) -> ValidProtocol:
    from competition.protocol import protocol_from_args

    return protocol_from_args(args)


def _collections(values: Sequence[str] | None) -> list[Collection]:
    return [Collection.parse(v) for v in values] if values else list(Collection)


def _add_data_arg(p: argparse.ArgumentParser) -> None:
    from competition.reader import DATA_ROOT_HELP

    p.add_argument("--data", metavar="DIR", default=None, help=DATA_ROOT_HELP)


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

    # One function per command, in the order `fastslow --help` lists them. Modules they need are imported
    # inside them, not at the top: until main() runs, a Ctrl-C would end in Python's own traceback.
    _data_parsers(sub)
    _validate_parser(sub)
    _score_parser(sub)
    _leaderboard_parser(sub)
    _evaluate_parser(sub)
    _features_parsers(sub)
    _train_parser(sub)
    _submit_parser(sub)
    _params_parser(sub)

    from competition.hlo.cli import add_parser as add_featurize_parser
    from competition.kaggle import add_parser as add_kaggle_parser
    from competition.predict import add_parser as add_predict_parser
    from competition.report import add_parser as add_report_parser

    add_predict_parser(sub)
    add_featurize_parser(sub)
    add_kaggle_parser(sub)
    add_report_parser(sub)
    _verbose_everywhere(parser)
    return parser


def _data_parsers(sub: argparse._SubParsersAction) -> None:
    """``fastslow data`` and its actions: synth, stats, validate, where."""
    data = sub.add_parser("data", help="generate, inspect and validate data",
                          description="Generate, inspect and validate TpuGraphs data.")
    dsub = data.add_subparsers(dest="data_command", metavar="ACTION", required=True)
    _synth_parser(dsub)
    _stats_parser(dsub)
    _data_validate_parser(dsub)
    _where_parser(dsub)
    _calibration_parser(dsub)


def _synth_parser(dsub: argparse._SubParsersAction) -> None:
    """``fastslow data synth``."""
    synth = dsub.add_parser(
        "synth", help="generate a synthetic world in the real on-disk format",
        description="Generate a synthetic TpuGraphs world (npz_all/npz/..., secret/ with hidden test runtimes, "
                    "sample_submission.csv). Scores on it say nothing about the Kaggle leaderboard.",
    )
    synth.add_argument("--scale", choices=["tiny", "demo", "bench", "full"], default="demo",
                       help="tiny: seconds, for tests; demo: the default of `make submit`; full: real counts "
                            "and sizes, for benchmarks (default: %(default)s)")
    synth.add_argument("--out", required=True, metavar="DIR", help="folder to write the world into")
    synth.add_argument("--seed", type=int, default=0, help="world seed; same seed and settings, same bytes "
                                                           "(default: %(default)s)")
    synth.add_argument("--collections", nargs="+", metavar="C", help=_COLLECTIONS_HELP)
    synth.add_argument("--limit", type=_count("--limit"), default=None, metavar="N",
                       help="at most N graphs per collection and split (default: the scale's counts)")
    synth.add_argument("--tile-limit", type=_count("--tile-limit"), default=None, metavar="N",
                       help="at most N tile kernels per split (default: --limit), e.g. --limit 12 --tile-limit 600 "
                            "for a full-scale part with 12 graphs per layout split")
    synth.add_argument("--workers", type=int, default=None, metavar="N",
                       help="worker processes (default: one per core)")
    synth.add_argument("--force", action="store_true",
                       help="regenerate when DIR holds a world made with other settings (default: refuse); a "
                            "world with the same settings is resumed, never regenerated")
    synth.add_argument("--programs", choices=["generator", "jax"], default="generator",
                       help="where the layout programs, and the programs tile kernels are cut from, come from: "
                            "generator, the world's own program generator; jax, a zoo of real JAX models (MLP, "
                            "ResNet-style CNN, transformer encoder, UNet and their training steps) lowered to HLO, "
                            "which needs jax (the dev extras). Runtime physics, searches and format are the same "
                            "(default: %(default)s)")
    synth.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    synth.set_defaults(func=_cmd_synth, outputs={"out": "folder"})


def _stats_parser(dsub: argparse._SubParsersAction) -> None:
    """``fastslow data stats``."""
    stats = dsub.add_parser(
        "stats", help="print counts, opcode histogram, runtime spread, duplicates, oracle score",
        description="Per collection: file counts, node/edge/configurable-node/config counts, opcode histogram, "
                    "runtime/best distribution, duplicate share and (synthetic worlds) the oracle score.",
    )
    stats.add_argument("dir", nargs="?", default=None, metavar="DIR",
                       help="data root (default: found as for --data)")
    stats.add_argument("--collections", nargs="+", metavar="C", help=_COLLECTIONS_HELP)
    stats.add_argument("--top-opcodes", type=int, default=12, metavar="K",
                       help="opcodes listed in the histogram (default: %(default)s)")
    stats.add_argument("--skip-bad", action="store_true",
                       help="leave out files that cannot be read (each is named in a warning) instead of stopping")
    stats.add_argument("--no-progress", action="store_true", help="hide progress bars")
    stats.set_defaults(func=_cmd_stats)


def _data_validate_parser(dsub: argparse._SubParsersAction) -> None:
    """``fastslow data validate`` (a data root; ``fastslow validate`` checks a submission)."""
    val = dsub.add_parser(
        "validate", help="check every file of a data root and list the problems",
        description="Check what train and submit need: keys, dtypes, shapes and consistency of every npz file, "
                    "finite values everywhere the models read (node_config_feat streamed block by block, never "
                    "whole), positive runtimes in train and valid files, every split of each collection present, "
                    "file names usable in submission IDs, sample_submission.csv against the test files, and the "
                    "secret/ runtimes of a synthetic world. Hidden files (names starting with '.', such as macOS "
                    "._x.npz) are skipped everywhere, with a note. Exits 1 if anything is wrong.",
    )
    _add_data_arg(val)
    val.add_argument("--collections", nargs="+", metavar="C", help=_COLLECTIONS_HELP)
    val.add_argument("--splits", nargs="+", choices=[s.value for s in Split], default=None,
                     help="splits to check (default: all)")
    val.add_argument("--deep", action="store_true",
                     help="also check that node_config_feat holds integer layout values in -1..5 (the models take "
                          "other values without failing)")
    val.add_argument("--quick", action="store_true",
                     help="do not stream node_config_feat (the longest part on real data: it decompresses every "
                          "layout config once); NaN/inf there are then found only when train or submit read them")
    val.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    val.set_defaults(func=_cmd_validate)


def _where_parser(dsub: argparse._SubParsersAction) -> None:
    """``fastslow data where``."""
    where = dsub.add_parser("where", help="show which data root is used and how many graphs it has",
                            description="Resolve the data root as every command does, and count its graphs.")
    _add_data_arg(where)
    where.set_defaults(func=_cmd_where)


def _calibration_parser(dsub: argparse._SubParsersAction) -> None:
    """``fastslow data calibration``."""
    cal = dsub.add_parser(
        "calibration", help="compare a data root's runtime figures with real TPU records, real | world | range",
        description="Compute the calibration figures (competition/synthetic/calibration.py: tile bounds, runtime "
                    "against tile size, spread, default against best; layout runtime/best, default-search spread, "
                    "opcode shares) on the train and valid graphs of a data root, beside the same figures of the "
                    "real tuning records shipped with fastslow, and the range a synthetic world must stay within; "
                    "then the world's tile physics on the real kernels' measured configs (Spearman, and the best "
                    "of its first five). Exits 1 when a figure is outside its range or the physics falls short.",
    )
    _add_data_arg(cal)
    cal.add_argument("--limit", type=_jobs, default=None, metavar="N",
                     help="read at most N graphs per collection and split (default: all)")
    cal.add_argument("--cache-dir", default=".cache", metavar="DIR",
                     help="where the featurized real records are kept (default: %(default)s)")
    cal.set_defaults(func=_cmd_calibration)


def _cmd_calibration(args: argparse.Namespace) -> int:
    from competition.reader import find_data_root
    from competition.real_records import TILE_RECORDS, featurize_records
    from competition.synthetic import calibration

    root = find_data_root(args.data)
    print(f"data root: {root.root} ({root.source})")
    real = calibration.figures(find_data_root(featurize_records(args.cache_dir)), splits=(Split.TRAIN,))
    world = calibration.figures(root, limit=args.limit)
    print(calibration.table(world, real))
    bad = calibration.failures(world)
    agreement = calibration.physics_agreement(TILE_RECORDS.read_bytes())
    print("\nThe world's tile physics on the real kernels' measured configs:")
    print(calibration.agreement_table(agreement))
    bad += calibration.agreement_failures(agreement)
    for line in bad:
        print(f"outside: {line}")
    return 1 if bad else 0


def _validate_parser(sub: argparse._SubParsersAction) -> None:
    """``fastslow validate`` (a submission file)."""
    from competition.protocol import add_valid_configs_arg

    validate = sub.add_parser(
        "validate", help="check a submission file; exits 1 on any problem",
        description="Check a submission: header, every expected ID once, no unknown IDs, layout rows a permutation "
                    "of all configs, tile rows at least min(5, C) distinct valid indices. Each problem is printed "
                    "with its row and ID.",
    )
    validate.add_argument("file", metavar="FILE", help="the submission CSV")
    _add_data_arg(validate)
    validate.add_argument("--split", choices=[s.value for s in Split], default="test",
                          help="split whose graphs the file ranks (default: %(default)s)")
    add_valid_configs_arg(validate)
    validate.set_defaults(func=_cmd_validate_submission)


def _score_parser(sub: argparse._SubParsersAction) -> None:
    """``fastslow score``."""
    from competition.leaderboard import DEFAULT_PATH as DEFAULT_LEADERBOARD
    from competition.protocol import add_valid_configs_arg

    score = sub.add_parser(
        "score", help="score a submission offline and record it in the leaderboard",
        description="Score a submission against labelled data: the valid split (real or synthetic), or the "
                    "synthetic test split through its secret/ runtimes. Prints a table per collection and the "
                    "combined score, and appends a row to the leaderboard.",
    )
    score.add_argument("file", metavar="FILE", help="the submission CSV")
    _add_data_arg(score)
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


def _leaderboard_parser(sub: argparse._SubParsersAction) -> None:
    """``fastslow leaderboard``."""
    from competition.leaderboard import DEFAULT_PATH as DEFAULT_LEADERBOARD

    board = sub.add_parser("leaderboard", help="show the offline leaderboard, best first, and plot it",
                           description="Print the leaderboard history best first and write a PNG plot of the scores "
                                       "per collection over time.")
    board.add_argument("--leaderboard", default=str(DEFAULT_LEADERBOARD), metavar="CSV",
                       help="leaderboard file (default: %(default)s)")
    board.add_argument("--plot", default=None, metavar="PNG",
                       help="where to write the plot (default: beside the leaderboard, leaderboard.png)")
    board.add_argument("--top", type=int, default=20, metavar="N", help="rows to print (default: %(default)s)")
    board.set_defaults(func=_cmd_leaderboard, outputs={"plot": "file"})


def _params_parser(sub: argparse._SubParsersAction) -> None:
    """``fastslow params``."""
    params = sub.add_parser("params", help="list every hyper-parameter: type, default, allowed values, meaning",
                            description="Print the hyper-parameters of the models (all, or those named) and of the "
                                        "ensemble: type, default (per kind or collection where they differ), the "
                                        "values allowed and what each does; --markdown prints docs/parameters.md.")
    params.add_argument("models", nargs="*", metavar="MODEL",
                        help="models to list (default: every registered model, then the ensemble)")
    params.add_argument("--markdown", action="store_true",
                        help="print the Markdown page docs/parameters.md instead of the terminal table")
    params.set_defaults(func=_cmd_params)


def _cmd_params(args: argparse.Namespace) -> int:
    from models.ensemble import Ensemble
    from models.registry import MODELS, parameter_reference, parameter_rows

    unknown = [m for m in args.models if m not in MODELS and m != Ensemble.name]
    if unknown:
        raise UsageError(f"unknown model {unknown[0]!r}; expected one of {', '.join([*sorted(MODELS), 'ensemble'])}")
    if args.markdown:
        print(parameter_reference(args.models or None), end="")
        return EXIT_OK
    names = args.models or [*sorted(MODELS), Ensemble.name]
    rows = parameter_rows(names)
    for model in names:
        print(f"{model}:")
        mine = [r for r in rows if r[0] == model]
        if not mine:
            print("  (no hyper-parameters)")
            continue
        width = max(len(r[1]) for r in mine)
        for _, key, kind, defaults, entry in mine:
            default = "; ".join(v if w == "all" else f"{w}: {v}" for w, v in defaults.items())
            print(f"  {key:{width}}  {kind}, default {default}; allowed {entry.describe()}\n"
                  f"  {'':{width}}  {entry.help}")
    return EXIT_OK


def _evaluate_parser(sub: argparse._SubParsersAction) -> None:
    """``fastslow evaluate``."""
    from competition.protocol import add_valid_configs_arg

    evaluate = sub.add_parser(
        "evaluate", help="compare models side by side per collection, with the oracle ceiling",
        description="Fit each model on the train split and print, per collection and combined, the score of every "
                    "model and (synthetic data) the oracle ceiling, on the valid split and on the synthetic test "
                    "split. Writes each model's predictions as submissions/<split>-<model>.csv. With --world-seeds, "
                    "the same on one synthetic world per seed, then the mean, the spread (standard deviation over "
                    "the worlds) and the percentage of the oracle per collection.",
    )
    _add_data_arg(evaluate)
    evaluate.add_argument("--world-seeds", nargs="+", type=int, metavar="SEED", default=None,
                          help="evaluate on one synthetic world per seed (generated once under "
                               "data/synthetic-<scale>[-seed<k>], reused after) and summarise over them, instead of "
                               "one data root; not with --data")
    evaluate.add_argument("--scale", default="bench", choices=["tiny", "demo", "bench", "full"],
                          help="scale of the --world-seeds worlds (default: %(default)s, the quality table's)")
    evaluate.add_argument("--models", nargs="+", metavar="NAME", default=None,
                          help="models to compare (default: random default-first gbdt gnn-attn)")
    evaluate.add_argument("--out-dir", default="submissions", metavar="DIR",
                          help="where the per-model prediction files go (default: %(default)s)")
    _add_param_args(evaluate)
    _add_jobs_arg(evaluate)
    evaluate.add_argument("--no-progress", action="store_true", help="hide progress bars")
    add_valid_configs_arg(evaluate)
    evaluate.set_defaults(func=_cmd_evaluate, outputs={"out_dir": "folder"})


def _features_parsers(sub: argparse._SubParsersAction) -> None:
    """``fastslow features`` and its action prune-stats."""
    feats = sub.add_parser("features", help="inspect feature pipelines",
                           description="Inspect what the feature pipelines do to the graphs.")
    fsub = feats.add_subparsers(dest="features_command", metavar="ACTION", required=True)
    _prune_stats_parser(fsub)


def _prune_stats_parser(fsub: argparse._SubParsersAction) -> None:
    """``fastslow features prune-stats``."""
    prune = fsub.add_parser(
        "prune-stats", help="nodes and edges before/after pruning, per collection",
        description="Apply a pruning transform to every graph of a split (nodes and edges only) and print, per "
                    "collection, the totals before and after and the pruning speed.",
    )
    _add_data_arg(prune)
    prune.add_argument("--hops", type=int, default=1, help="neighbourhood kept around configurable nodes, 0 to 5 "
                                                           "(default: %(default)s; 0 only with --collapse)")
    prune.add_argument("--direction", choices=["in", "out", "both"], default="both",
                       help="follow producers (in), consumers (out) or both (default: %(default)s)")
    prune.add_argument("--collapse", choices=["edge", "node"], default=None,
                       help="replace removed chains between kept nodes by a placeholder edge or node "
                            "(CollapseChains) instead of cutting them")
    prune.add_argument("--through", choices=["all", "elementwise"], default="all",
                       help="with --collapse: which removed nodes a bridged path may run through, any or only "
                            "elementwise ops (which pass their operand's layout on) (default: %(default)s)")
    prune.add_argument("--split", choices=[s.value for s in Split], default="train",
                       help="split to measure (default: %(default)s)")
    prune.add_argument("--collections", nargs="+", metavar="C", help=_COLLECTIONS_HELP)
    prune.add_argument("--no-progress", action="store_true", help="hide progress bars")
    prune.set_defaults(func=_cmd_prune_stats)


def _submit_parser(sub: argparse._SubParsersAction) -> None:
    """``fastslow submit``."""
    from competition.protocol import add_valid_configs_arg

    submit = sub.add_parser(
        "submit", help="run the whole pipeline: data, models, submission, validation, offline score",
        description="What `make submit` runs: use real data if found (else generate the synthetic demo world), fit "
                    "every model on train, pick the best on valid, write submissions/submission.csv, validate it "
                    "and print the offline score tables. submission.csv (with submission.json: its valid scores and "
                    "settings) is only replaced by a submission at least as good on the same valid protocol and "
                    "data; a worse one is written as submission.new.csv, and one whose score is unknown is kept as "
                    "submission.prev.csv.",
    )
    _add_data_arg(submit)
    submit.add_argument("--models", nargs="+", metavar="NAME", default=None,
                        help="models to try, ensembled when 2 or more (default: random default-first gbdt gnn-attn)")
    submit.add_argument("--out-dir", default="submissions", metavar="DIR",
                        help="where submission files and the leaderboard go (default: %(default)s)")
    submit.add_argument("--synth-dir", default="data/synthetic-demo", metavar="DIR",
                        help="where the synthetic demo world is generated when no real data is found "
                             "(default: %(default)s)")
    submit.add_argument("--synth-scale", choices=["tiny", "demo", "bench", "full"], default="demo",
                        help="scale of that synthetic world (default: %(default)s)")
    submit.add_argument("--runs-dir", default=None, metavar="DIR",
                        help="where each model's fit is saved per collection (<model>/<collection>/model.json, the "
                             "GNN's run folders too), and a finished run with the same settings and data reused "
                             "instead of fitted again; `fastslow predict` ranks with them (default: runs)")
    submit.add_argument("--time-budget", metavar="DURATION", default=None,
                        help="wall-clock budget for the whole run, e.g. 8h, 90m, 1h30m or seconds: models run "
                             "cheapest first, each gets a share by its cost, stops at it keeping its best weights, "
                             "and the run's best so far is written after every model (default: no limit)")
    _add_param_args(submit)
    _add_jobs_arg(submit)
    submit.add_argument("--no-progress", action="store_true", help="hide progress bars")
    add_valid_configs_arg(submit)
    submit.set_defaults(func=_cmd_submit, outputs={"out_dir": "folder", "runs_dir": "folder"})


def _train_parser(sub: argparse._SubParsersAction) -> None:
    from competition.protocol import add_valid_configs_arg

    trainp = sub.add_parser(
        "train", help="fit a model per collection and save it (GNN runs keep checkpoints and learning curves)",
        description="Fit a registered model on the train split of each collection (early stopping on valid where "
                    "the model supports it), save it as runs/<model>/<collection>/model.json, and print the "
                    "valid score per collection. A GNN run keeps checkpoint.pt, curves.csv and curves.png in the "
                    "same folder; re-running with the same settings resumes an interrupted run. The GNN models also "
                    "train on several processes (--nproc N, or `torchrun --nproc-per-node N -m competition train "
                    "...`, on one machine or several: docs/distributed.md).",
    )
    _add_data_arg(trainp)
    trainp.add_argument("--model", default="gnn", metavar="NAME",
                        help="registered model name: gnn, gnn-attn, gbdt, default-first, random "
                             "(default: %(default)s)")
    trainp.add_argument("--collections", nargs="+", metavar="C", help=_COLLECTIONS_HELP)
    trainp.add_argument("--runs-dir", default="runs", metavar="DIR",
                        help="where runs and saved models go (default: %(default)s)")
    trainp.add_argument("--init-from", default=None, metavar="RUN",
                        help="GNN models: start each network from the weights of a saved GNN run and fine-tune it "
                             "on this data with this run's settings (e.g. a lower --param train.lr): its folder "
                             "(runs/gnn/layout-xla-default), its model.json, or a folder of runs (runs/gnn) holding "
                             "each collection's; its column selection and normalisation are reused, and its network "
                             "settings must be this run's. Sets train.init_from (default: from scratch)")
    _add_param_args(trainp)
    trainp.add_argument("--no-progress", action="store_true", help="hide progress bars")
    add_valid_configs_arg(trainp)
    trainp.add_argument("--nproc", type=int, default=1, metavar="N",
                        help="GNN models: train on N processes of this machine, through `torchrun --nproc-per-node N "
                             "-m competition train` with the other arguments as given. Each process trains its "
                             "share of every optimiser step's graphs (graphs_per_step, at least N) on a GPU of its "
                             "own, or on the CPU's cores split between them, and scores its share of the valid "
                             "graphs; the first writes the run folder and prints (default: %(default)s)")
    trainp.add_argument("--backend", choices=["auto", "gloo", "nccl"], default="auto",
                        help="how several processes exchange gradients and scores (torch.distributed): auto is "
                             "nccl when they train on CUDA, gloo on the CPU (default: %(default)s)")
    trainp.add_argument("--dist-timeout", type=float, default=1800.0, metavar="SECONDS",
                        help="on several processes: how long each waits for the others at an exchange before "
                             "stopping with an error (a process that hangs; one that dies is noticed at once) "
                             "(default: %(default)s)")
    trainp.set_defaults(func=_cmd_train, outputs={"runs_dir": "folder"})


def _verbose_everywhere(parser: argparse.ArgumentParser) -> None:
    """Accept ``-v/--verbose`` after the command too (``fastslow score FILE -v``), not only before it."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                if not any("--verbose" in a.option_strings for a in sub._actions):
                    # SUPPRESS: left out, the value given before the command (or its default) stands.
                    sub.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS,
                                     help="log debug messages, and print the traceback of an error")
                _verbose_everywhere(sub)


def _cmd_validate_submission(args: argparse.Namespace) -> int:
    from competition.reader import find_data_root
    from competition.submission import problem_count, validate_submission

    root = find_data_root(args.data)
    problems = validate_submission(args.file, root, Split(args.split), protocol=_protocol(args))
    for p in problems:
        print(f"{args.file}: {p}")
    print(f"{args.file}: {'valid' if not problems else f'{problem_count(problems)} problem(s)'}")
    return EXIT_PROBLEMS if problems else EXIT_OK


def _cmd_score(args: argparse.Namespace) -> int:
    from competition.display import printable
    from competition.labels import load_labels
    from competition.leaderboard import append_row
    from competition.reader import collections_with_graphs, find_data_root
    from competition.stats import oracle_scores
    from competition.submission import SubmissionError, problem_count, score_submission, validate_submission

    root = find_data_root(args.data)
    split = Split(args.split)
    protocol = _protocol(args)
    problems = validate_submission(args.file, root, split, protocol=protocol)
    if problems and not args.partial:
        print(f"error: {SubmissionError(args.file, problems)}\nnot scored: `fastslow validate {args.file}` lists "
              "every problem; --partial scores the collections it holds in full", file=sys.stderr)
        return EXIT_PROBLEMS
    labels = load_labels(root, collections_with_graphs(root, split), split, protocol)
    report = score_submission(args.file, root, split, labels=labels)
    if not report.collections:
        print(f"error: {args.file}: nothing to score (no rows)", file=sys.stderr)
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
              "elsewhere (see `fastslow validate`); the leaderboard row says complete=false")
    append_row(report.scores(), file=args.file, producer=args.producer, split=split.value, data=root.root,
               synthetic=synthetic, path=args.leaderboard, protocol=protocol.tag if split == Split.VALID else "",
               partial=bool(problems))
    return EXIT_OK


def _cmd_leaderboard(args: argparse.Namespace) -> int:
    from competition.leaderboard import format_leaderboard, read_rows, save_plot

    rows = read_rows(args.leaderboard)
    if not rows:
        print(f"{args.leaderboard}: no scorings yet (run `fastslow score FILE` or `make submit`)")
        return 0
    plot = args.plot or str(Path(args.leaderboard).with_name("leaderboard.png"))
    _check_output("--plot", plot, "file")
    print(format_leaderboard(rows, args.top))
    print(f"plot: {save_plot(rows, plot)}")
    return 0


def _cmd_evaluate(args: argparse.Namespace) -> int:
    from competition.pipeline import evaluate_models
    from models.registry import default_models

    params = _model_params(args, args.models or default_models())
    if args.world_seeds is not None:
        from competition.worlds import check_seeds, evaluate_worlds

        if args.data is not None:
            raise UsageError("--world-seeds generates its own worlds: give it or --data, not both")
        try:
            check_seeds(args.world_seeds)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        evaluate_worlds(args.world_seeds, scale=args.scale, models=args.models, out_dir=args.out_dir,
                        progress=not args.no_progress, protocol=_protocol(args), params=params, jobs=args.jobs)
        return 0
    evaluate_models(args.data, models=args.models, out_dir=args.out_dir, progress=not args.no_progress,
                    protocol=_protocol(args), params=params, jobs=args.jobs)
    return 0


def _cmd_prune_stats(args: argparse.Namespace) -> int:
    from competition.dataset import open_split
    from competition.reader import find_data_root
    from features.prune_stats import format_pruning_stats, pruning_stats
    from features.transforms import CollapseChains, PruneToConfigurable

    root = find_data_root(args.data)
    if args.collapse:
        transform = CollapseChains(hops=args.hops, direction=args.direction, mode=args.collapse,
                                   through=args.through)
    else:
        transform = PruneToConfigurable(hops=args.hops, direction=args.direction)
    rows = pruning_stats([open_split(root, c, args.split) for c in _collections(args.collections)], transform,
                         progress=not args.no_progress)
    print(format_pruning_stats(rows, transform))
    return 0


PARAM_HELP = (
    "a hyper-parameter, repeatable: [MODEL.][COLLECTION.]KEY=VALUE. KEY is SECTION.NAME of the model's settings tree "
    "(`fastslow params` lists them; the NAME alone when it is unique), e.g. --param gnn-attn.train.lr=3e-3, "
    "--param gnn-attn.layout:xla:random.train.steps_per_graph=16, --param train.epochs=3 (every model of the run "
    "that has it); values are Python literals, else text. Overrides --config at the same level"
)
CONFIG_HELP = (
    "a TOML file of hyper-parameters, tables nesting as --param's addresses do: [gnn-attn.train] lr = 3e-3, "
    "[gnn-attn.\"layout:xla:random\".train] steps_per_graph = 16 (keys outside a model's table apply to every model "
    "that has them); per-collection values override per-model ones, which override the defaults"
)


def _refused(args: argparse.Namespace, message: str) -> UsageError:
    return UsageError(f"fastslow {args.command}: {message}")


def _jobs(text: str) -> int:
    try:
        jobs = int(text)
    except ValueError:
        jobs = 0
    if jobs < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 1, found {text!r}")
    return jobs


def _count(flag: str) -> Callable[[str], int]:
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


def _add_jobs_arg(p: argparse.ArgumentParser) -> None:
    from competition.pipeline import MAX_AUTO_JOBS

    p.add_argument("--jobs", type=_jobs, default=None, metavar="N",
                   help="fit up to N collections at once, each in a process of its own with cores/N torch threads "
                        "(the GNN models on the CPU; gbdt uses every core itself). One fit per core beats one fit "
                        "on every core; each concurrent fit holds its own train graphs in memory (several GiB "
                        "for xla:random at the real counts: RESULTS.md). Default: the usable cores, at most "
                        f"{MAX_AUTO_JOBS}; 1 fits one collection at a time")


def _add_param_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--param", action="append", default=[], metavar="[MODEL.[COLLECTION.]]KEY=VALUE",
                   help=PARAM_HELP)
    p.add_argument("--config", default=None, metavar="TOML", help=CONFIG_HELP)


def _literal(text: str) -> object:
    import ast

    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return text


def _given_params(args: argparse.Namespace) -> list[tuple[str, str | None, str | None, str, object]]:
    """Every hyper-parameter of ``--config`` then ``--param``, in that order, as ``(where, model, collection, key,
    value)``; ``where`` names the origin for an error (``--param epochs=abc``, ``params.toml [gnn.train] epochs``).

    An address is ``[MODEL.][COLLECTION.]KEY``: a model's name, then a collection's (it holds a colon), then the
    key, which may itself be dotted (``train.lr``). In a TOML file, tables nest the same way
    (``[gnn-attn.train]``, ``[gnn-attn."layout:xla:random".train]``).
    """
    import io
    import tomllib

    from competition.limits import MAX_CONFIG_BYTES, MAX_CONFIG_KEYS, file_over, over
    from competition.nesting import toml_load

    out: list[tuple[str, str | None, str | None, str, object]] = []
    if args.config:
        path = Path(args.config)
        problem = file_over(path, MAX_CONFIG_BYTES, "MAX_CONFIG_BYTES")
        if problem is not None:
            raise _refused(args, f"--config {path}: {problem}; not read")
        data = path.read_bytes()
        problem = over(data.count(b"="), MAX_CONFIG_KEYS, "MAX_CONFIG_KEYS", "keys ('=' counted before parsing)")
        if problem is not None:
            raise _refused(args, f"--config {path}: {problem}; not parsed")
        try:
            doc = toml_load(io.BytesIO(data))
        except tomllib.TOMLDecodeError as exc:
            raise _refused(args, f"--config {path}: expected TOML; found invalid TOML ({exc})") from None

        def walk(table: dict[str, object], prefix: list[str]) -> None:
            for name, value in table.items():
                if isinstance(value, dict):
                    walk(value, [*prefix, name])
                    continue
                where = f"{path} [{'.'.join(_toml_name(p) for p in prefix)}] {name}" if prefix else f"{path}: {name}"
                model, collection, key, _ = _address(args, [*prefix, name], where)
                out.append((where, model, collection, key, value))
        walk(doc, [])
    for item in args.param:
        key, sep, value = item.partition("=")
        parts = key.split(".")
        if not sep or not all(parts):
            raise _refused(args, f"--param expects [MODEL.][COLLECTION.]KEY=VALUE, got {item!r}")
        model, collection, name, _ = _address(args, parts, f"--param {item}")
        out.append((f"--param {item}", model, collection, name, _literal(value)))
    return out


def _toml_name(name: str) -> str:
    return f'"{name}"' if ":" in name else name


def _address(args: argparse.Namespace, parts: list[str], where: str) -> tuple[str | None, str | None, str, object]:
    """``(model, collection, key, value placeholder)`` of a dotted address (see :func:`_given_params`); the value
    is filled in by the caller (TOML values come with the address)."""
    from competition.pipeline import ENSEMBLE
    from models.registry import MODELS

    model = parts[0] if len(parts) > 1 and (parts[0] in MODELS or parts[0] == ENSEMBLE) else None
    rest = parts[1:] if model is not None else parts
    collection = rest[0] if len(rest) > 1 and ":" in rest[0] else None
    rest = rest[1:] if collection is not None else rest
    if not rest:
        raise _refused(args, f"{where}: no key after {'.'.join(parts)!r}")
    return model, collection, ".".join(rest), None


def _model_params(args: argparse.Namespace, models: Sequence[str], *, ensemble: bool = False) -> dict[str, ModelParams]:
    """The hyper-parameters of ``--config`` and ``--param`` for each of the run's ``models`` (and the ensemble's
    under ``ensemble``), checked before any fitting: model, collection and key names, value types, and values the
    models refuse.

    Raises:
        UsageError: naming the ``--param`` item or the ``--config`` entry, and what was expected.
    """
    from competition.pipeline import ENSEMBLE
    from models.ensemble import Ensemble
    from models.registry import MODELS, ModelParams, canonical_key, hyper_parameters, param_problem

    unknown = [m for m in models if m not in MODELS]
    if unknown:
        raise _refused(args, f"unknown model {unknown[0]!r}; expected one of "
                         f"{', '.join(sorted(MODELS))}")
    owners: dict[str, type] = {m: MODELS[m] for m in models}
    if ensemble:
        owners[ENSEMBLE] = Ensemble
    common: dict[str, dict[str, object]] = {m: {} for m in owners}
    per_collection: dict[str, dict[Collection, dict[str, object]]] = {m: {} for m in owners}
    for where, model, collection, key, value in _given_params(args):
        typed = where.startswith("--param")  # typed on the command line, where values are Python literals
        if model is None:
            targets = [m for m in owners if _takes(owners[m], key, hyper_parameters)]
            if not targets:
                raise _refused(args, f"{where}: none of the models of this run ({', '.join(owners)}) takes {key!r}")
        elif model not in owners:
            raise _refused(args, f"{where}: {model!r} is not among the models of this run ({', '.join(owners)})")
        else:
            targets = [model]
        for m in targets:
            problem = param_problem(owners[m], key, value)
            if problem is not None:
                hint = (" (values are Python literals: --param epochs=20, --param device='cpu')"
                        if typed and " must be " not in problem else "")
                raise _refused(args, f"{where}: {problem}{hint}")
            stored = canonical_key(owners[m], key)
            if collection is None:
                common[m][stored] = value
                continue
            if m == ENSEMBLE:
                raise _refused(args, f"{where}: the ensemble takes one value for all collections; drop the collection")
            try:
                c = Collection.parse(collection)
            except ValueError as exc:
                raise _refused(args, f"{where}: {exc}") from None
            per_collection[m].setdefault(c, {})[stored] = value
    out = {m: ModelParams(common[m], per_collection[m]) for m in owners}
    for m, params in out.items():
        for c in Collection:
            try:
                owners[m](**params.for_collection(c))  # values a model refuses fail here, before any fitting
            except (TypeError, ValueError) as exc:
                scope = f" on {c.value}" if params.per_collection.get(c) else ""
                raise _refused(args, f"{m}{scope}: {exc}") from None
    return out


def _takes(cls: type, key: str, hyper_parameters: typing.Callable[[type], dict[str, object]]) -> bool:
    """Whether the model class ``cls`` has the hyper-parameter ``key`` (by ``section.name`` or name, for a settings
    tree)."""
    if hasattr(cls, "CONFIG"):
        from models.settings import resolve

        try:
            resolve(cls.CONFIG, key)
        except KeyError:
            return False
        return True
    return key in hyper_parameters(cls)


def _cmd_train(args: argparse.Namespace) -> int:
    from competition.dataset import Dataset
    from competition.labels import load_labels
    from competition.pipeline import check_writable, fit_collections, model_folders
    from competition.reader import find_data_root, validate_root
    from competition.runlock import hold_run_folder
    from competition.saved_runs import save_run
    from competition.submission import score_predictions
    from models.base import run_folder
    from models.gnn import distributed
    from models.gnn.model import GNNModel
    from models.gnn.steps import resolve_device
    from models.registry import make_model

    launched = distributed.launched_world()  # above 1 in a process that torchrun started
    world = launched if launched > 1 else args.nproc

    def refuse(message: str) -> SystemExit:
        # Every process of a launch finds the same problem: the first says it, the others stop without a word.
        return UsageError(message) if os.environ.get("RANK", "0") == "0" else SystemExit(EXIT_ERROR)

    def relaunched() -> list[str]:
        """The arguments that parse to ``args``, less --nproc: what each process that torchrun starts runs."""
        subs = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
        out = ["train"]
        for action in subs.choices["train"]._actions:
            value = getattr(args, action.dest, None)
            if (not action.option_strings or action.dest in ("help", "nproc") or value is None
                    or value == action.default):
                continue
            flag = action.option_strings[-1]
            if action.nargs == 0:
                out += [flag] if value is True else []
            elif isinstance(value, list):
                out += [flag, *map(str, value)] if action.nargs in ("+", "*") else [x for v in value for x in (flag, v)]
            else:
                out += [flag, str(value)]
        return out

    if args.nproc < 1:
        raise refuse(f"--nproc {args.nproc}: expected 1 or more processes")
    if args.nproc > 1 and launched > 1:
        raise refuse(f"--nproc {args.nproc}: this process is already one of {launched} that torchrun started; leave "
                     "out --nproc")
    root = find_data_root(args.data)
    protocol = _protocol(args)
    params = _model_params(args, [args.model])[args.model]
    gnn = args.model.startswith("gnn")
    if gnn and "runs_dir" not in params.common:
        params = replace(params, common={**params.common, "runs_dir": args.runs_dir})
    if args.init_from is not None:
        if not gnn:
            raise refuse(f"--init-from: only the GNN models (gnn, gnn-attn) start from saved weights; --model "
                         f"{args.model} does not")
        params = replace(params, common={**params.common, "train.init_from": args.init_from})
    asked = _collections(args.collections)
    # A collection whose train split is missing would otherwise be passed over without a word (exit 0).
    missing = validate_root(root, asked, [Split.TRAIN])
    if missing:
        raise missing[0]
    dataset = Dataset.open(root, asked, eval_split=Split.VALID, protocol=protocol)
    collections = dataset.collections
    absent = [c.value for c in asked if c not in collections]
    if args.collections and absent:  # named on the command line, but the data has none of them
        raise UsageError(f"--collections: {root.root} holds no graphs of {', '.join(absent)}")
    check_writable(model_folders([args.model], {args.model: params}, collections))
    for c in collections:  # a warm start's source refused before any collection is fitted (each fit checks again)
        model = make_model(args.model, **params.for_collection(c))
        if not isinstance(model, GNNModel):
            break
        try:
            model.warm_start(c)
        except ValueError as exc:
            raise refuse(f"{args.model} {c.value}: {exc}") from None
    device = resolve_device(params.common.get("device", "auto")) if gnn else resolve_device("cpu")
    if world > 1:  # what would stop every process, found before any starts
        if not gnn:
            raise refuse(f"--model {args.model} trains in one process; only the GNN models (gnn, gnn-attn) train "
                         "on several")
        for c in collections:
            graphs = len(dataset[c].train)
            if graphs < world:
                raise refuse(f"{c.value}: {graphs} train graphs for {world} processes, each of which trains a graph "
                             f"of its own at every step: launch at most {graphs}, or leave {c.value} out "
                             "(--collections)")
            per_step = params.for_collection(c).get("train.graphs_per_step")
            if isinstance(per_step, int) and per_step < world:
                raise refuse(f"graphs_per_step={per_step} on {c.value}: less than the {world} processes, each of "
                             f"which trains a graph of its own at every step; set it to {world} or more, or leave "
                             f"it out (it is then {world})")
        try:
            distributed.choose_backend(args.backend, device)
        except distributed.DistributedSetupError as exc:
            raise refuse(str(exc)) from None
    if args.nproc > 1:
        try:
            distributed.launch(args.nproc, relaunched(), verbose=args.verbose)
        except distributed.LaunchError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return exc.exit_code
        return 0
    with distributed.process_group(device, backend=args.backend, timeout=args.dist_timeout) as device:
        if distributed.active() and device.type == "cuda":  # this process's own GPU
            params = replace(params, common={**params.common, "device": str(device)})
        main = distributed.is_main()
        say = print if main else (lambda *_, **__: None)
        say(f"{'collection':20s} {'valid':>8s} {'graphs':>7s} {'seconds':>8s}  saved", flush=True)
        saved: dict[Collection, Path] = {}

        def holding(c: Collection) -> contextlib.ExitStack:
            """Around each fit: the collectives watched, and (by the first process) the run folder held."""
            stack = contextlib.ExitStack()
            stack.enter_context(distributed.collectives(f"{args.model} on {c.value}"))
            if main:
                stack.enter_context(hold_run_folder(run_folder(args.runs_dir, args.model, c)))
            return stack

        def save(c: Collection, model: RankingModel) -> None:
            if main:  # with its fit record: `fastslow submit` reuses the run when its settings and data match
                saved[c] = save_run(run_folder(args.runs_dir, args.model, c), args.model, model, dataset[c],
                                    complete=True)

        # Each process predicts its share of the valid graphs; the first gathers them.
        for fit in fit_collections(args.model, dataset, params=params, splits=(Split.VALID,),
                                   progress=not args.no_progress, say=lambda line: say(line, flush=True),
                                   holding=holding, after_fit=save, shard=distributed.shard,
                                   gather=distributed.gather_to_main):
            if Split.VALID not in fit.predictions:
                continue
            c = fit.collection
            preds = fit.predictions[Split.VALID]
            report = score_predictions(preds, load_labels(root, [c], Split.VALID, protocol)) if preds else None
            valid = f"{report.scores()[c]:8.4f}" if report is not None else f"{'-':>8s}"
            print(f"{c.value:20s} {valid} {len(preds):7d} {fit.seconds:8.1f}  {saved.get(c)}", flush=True)
        say(f"valid scored on {protocol.describe()}")
    return 0


def _cmd_submit(args: argparse.Namespace) -> int:
    from competition.budget import parse_duration
    from competition.pipeline import DEFAULT_RUNS_DIR, ENSEMBLE, run_pipeline
    from models.registry import default_models

    budget = None if args.time_budget is None else parse_duration(args.time_budget)
    params = _model_params(args, args.models or default_models(), ensemble=True)
    ensemble_params = dict(params.pop(ENSEMBLE).common)
    run_pipeline(args.data, models=args.models, out_dir=args.out_dir, synth_dir=args.synth_dir,
                 synth_scale=args.synth_scale, progress=not args.no_progress, protocol=_protocol(args),
                 time_budget=budget, params=params, ensemble_params=ensemble_params or None, jobs=args.jobs,
                 runs_dir=args.runs_dir or DEFAULT_RUNS_DIR)
    return 0


def _cmd_synth(args: argparse.Namespace) -> int:
    from competition.synthetic.jax_programs import JaxUnavailable
    from competition.synthetic.world import WorldMismatch, generate_world

    t0 = time.perf_counter()
    try:
        out = generate_world(args.out, scale=args.scale, seed=args.seed, collections=args.collections,
                             limit=args.limit, tile_limit=args.tile_limit, workers=args.workers, force=args.force,
                             progress=not args.no_progress, programs=args.programs)
    except (WorldMismatch, JaxUnavailable) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {args.scale} world (seed {args.seed}) to {out} in {time.perf_counter() - t0:.1f} s")
    return 0


def _cmd_stats(args: argparse.Namespace) -> int:
    from competition.reader import find_data_root
    from competition.stats import collection_stats, format_stats

    root = find_data_root(args.dir)
    print(f"data root: {root.root} ({root.source})")
    _note_hidden(root, _collections(args.collections), list(Split))
    for c in _collections(args.collections):
        st = collection_stats(root, c, progress=not args.no_progress, skip_bad=args.skip_bad)
        print(format_stats(st, args.top_opcodes))
        print()
    return 0


def _note_hidden(root: DataRoot, collections: Sequence[Collection], splits: Sequence[Split]) -> None:
    from competition.reader import hidden_files

    hidden = hidden_files(root, collections, splits)
    if hidden:
        more = f" and {len(hidden) - 1} more" if len(hidden) > 1 else ""
        print(f"note: skipped {len(hidden)} hidden file(s) (names starting with '.', such as macOS ._x.npz "
              f"resource forks): {hidden[0]}{more}")


def _listed_or_none(root: DataRoot, c: Collection, s: Split) -> list[Path]:
    from competition.reader import list_graphs

    try:
        return list_graphs(root, c, s)
    except OSError:  # validate_root reports the folder
        return []


def _cmd_validate(args: argparse.Namespace) -> int:
    from tqdm.auto import tqdm

    from competition.reader import find_data_root, validate_file, validate_root
    from competition.submission import sample_problems

    root = find_data_root(args.data)
    collections = _collections(args.collections)
    splits = [Split(s) for s in args.splits] if args.splits else list(Split)
    _note_hidden(root, collections, splits)
    whole = validate_root(root, collections, splits, synthetic=root.is_synthetic)
    if Split.TEST in splits:
        whole += sample_problems(root, collections)
    for p in whole:
        print(p)
    jobs = [(c, p) for c in collections for s in splits for p in _listed_or_none(root, c, s)]
    bad = 0
    for c, path in tqdm(jobs, desc="validate", unit="file", disable=args.no_progress):
        problems = validate_file(path, c, deep=args.deep, finite_configs=not args.quick)
        if problems:
            bad += 1
            for p in problems:
                tqdm.write(f"{c.value}: {p}")
    print(f"{len(jobs)} files checked, {bad} with problems"
          + (f"; {len(whole)} problem(s) of the data root as a whole (listed first)" if whole else ""))
    return EXIT_PROBLEMS if bad or whole else EXIT_OK


def _cmd_where(args: argparse.Namespace) -> int:
    from competition.reader import find_data_root

    root = find_data_root(args.data)
    print(f"data root: {root.root}\n  found by: {root.source}\n  npz tree: {root.npz_dir} ({root.tree_format})")
    print(f"  sample submission: {root.sample_submission or '-'}\n  secret runtimes: {root.secret_dir or '-'}")
    for (c, s), n in sorted(root.available().items(), key=lambda kv: (kv[0][0].value, kv[0][1].value)):
        print(f"  {c.value:20s} {s.value:5s} {n:6d} graphs")
    return 0


# --------------------------------------------------------------------------------------------------------------
# The error boundary
# --------------------------------------------------------------------------------------------------------------

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


def _check_output(flag: str, value: str | os.PathLike[str], kind: str) -> None:
    """Refuse an output ``kind`` (``file`` or ``folder``) that cannot be written, before any work is done.

    The folder that would receive it (the output folder, or a file's folder) or its nearest existing ancestor must
    be a writable folder; an existing output must be of its kind. Writes can still fail later (a full disk): the
    error boundary says so then.
    """
    from competition.npzio import output_problem

    problem = output_problem(value, kind)
    if problem is not None:
        raise UsageError(f"{flag} {value}: {problem}")


def _check_outputs(args: argparse.Namespace) -> None:
    for dest, kind in getattr(args, "outputs", {}).items():
        value = getattr(args, dest, None)
        if value:
            _check_output(f"--{dest.replace('_', '-')}", value, kind)


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
    from competition.npzio import special_file

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
    from competition.kaggle import KaggleError

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
    try:
        _stop_on_signals()
        parser = build_parser()
        args = parser.parse_args(argv)
        from competition.progress import line_progress_when_logged

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
        if args is not None and args.verbose:
            traceback.print_exc()
        print(INTERRUPTED, file=sys.stderr)
        return 128 + exc.signum if isinstance(exc, Terminated) else EXIT_INTERRUPTED
    except BrokenPipeError:
        _close_stdout()
        return EXIT_PIPE_CLOSED
    except Exception as exc:
        from competition.submission import SubmissionError

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


def _forget_interrupt() -> None:
    """CPython marks a :class:`KeyboardInterrupt` raised inside ``exec`` or ``eval`` of a string (a dataclass or a
    named tuple being defined, as imports of torch do by the thousand) as unhandled even once it is caught, and
    ``python -m competition`` then ends by SIGINT at exit instead of with its exit code. Each such evaluation clears
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
