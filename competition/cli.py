"""The ``fastslow`` command line (also ``python -m competition``)."""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from competition.collections import Collection, Split
from competition.errors import DataFileError, DataRootNotFound
from competition.leaderboard import DEFAULT_PATH as DEFAULT_LEADERBOARD
from competition.progress import line_progress_when_logged
from competition.protocol import add_valid_configs_arg, protocol_from_args

log = logging.getLogger("fastslow")

_COLLECTIONS_HELP = (
    "collections to include, by submission prefix (tile:xla, layout:xla:default, layout:xla:random, "
    "layout:nlp:default, layout:nlp:random); default: all five"
)


def _collections(values: Sequence[str] | None) -> list[Collection]:
    return [Collection.parse(v) for v in values] if values else list(Collection)


def _add_data_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--data", metavar="DIR", default=None,
        help="data root (a folder holding npz_all/npz/ or npz/, or that folder itself). Default: $FASTSLOW_DATA, "
             "then a Kaggle mount under /kaggle/input, then ./data",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fastslow",
        description="Toolkit for the TpuGraphs 'Fast or Slow?' competition: read the real data or generate a "
                    "synthetic world in the same format, inspect and validate it.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug messages")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    data = sub.add_parser("data", help="generate, inspect and validate data",
                          description="Generate, inspect and validate TpuGraphs data.")
    dsub = data.add_subparsers(dest="data_command", metavar="ACTION", required=True)

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
    synth.add_argument("--limit", type=int, default=None, metavar="N",
                       help="at most N graphs per collection and split (default: the scale's counts)")
    synth.add_argument("--tile-limit", type=int, default=None, metavar="N",
                       help="at most N tile kernels per split (default: --limit), e.g. --limit 12 --tile-limit 600 "
                            "for a full-scale part with 12 graphs per layout split")
    synth.add_argument("--workers", type=int, default=None, metavar="N",
                       help="worker processes (default: one per core)")
    synth.add_argument("--force", action="store_true",
                       help="regenerate when DIR holds a world made with other settings (default: refuse); a "
                            "world with the same settings is resumed, never regenerated")
    synth.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    synth.set_defaults(func=_cmd_synth)

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

    val = dsub.add_parser(
        "validate", help="check every file of a data root and list the problems",
        description="Check keys, dtypes, shapes and consistency of every npz file; exits 1 if any is bad.",
    )
    _add_data_arg(val)
    val.add_argument("--collections", nargs="+", metavar="C", help=_COLLECTIONS_HELP)
    val.add_argument("--splits", nargs="+", choices=[s.value for s in Split], default=None,
                     help="splits to check (default: all)")
    val.add_argument("--deep", action="store_true",
                     help="also stream through node_config_feat (NaN/inf, values outside -1..5): slower")
    val.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    val.set_defaults(func=_cmd_validate)

    where = dsub.add_parser("where", help="show which data root is used and how many graphs it has",
                            description="Resolve the data root as every command does, and count its graphs.")
    _add_data_arg(where)
    where.set_defaults(func=_cmd_where)

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
    add_valid_configs_arg(score)
    score.set_defaults(func=_cmd_score)

    board = sub.add_parser("leaderboard", help="show the offline leaderboard, best first, and plot it",
                           description="Print the leaderboard history best first and write a PNG plot of the scores "
                                       "per collection over time.")
    board.add_argument("--leaderboard", default=str(DEFAULT_LEADERBOARD), metavar="CSV",
                       help="leaderboard file (default: %(default)s)")
    board.add_argument("--plot", default=None, metavar="PNG",
                       help="where to write the plot (default: beside the leaderboard, leaderboard.png)")
    board.add_argument("--top", type=int, default=20, metavar="N", help="rows to print (default: %(default)s)")
    board.set_defaults(func=_cmd_leaderboard)

    evaluate = sub.add_parser(
        "evaluate", help="compare models side by side per collection, with the oracle ceiling",
        description="Fit each model on the train split and print, per collection and combined, the score of every "
                    "model and (synthetic data) the oracle ceiling, on the valid split and on the synthetic test "
                    "split. Writes each model's predictions as submissions/<split>-<model>.csv.",
    )
    _add_data_arg(evaluate)
    evaluate.add_argument("--models", nargs="+", metavar="NAME", default=None,
                          help="models to compare (default: random default-first gbdt gnn-attn)")
    evaluate.add_argument("--out-dir", default="submissions", metavar="DIR",
                          help="where the per-model prediction files go (default: %(default)s)")
    evaluate.add_argument("--no-progress", action="store_true", help="hide progress bars")
    add_valid_configs_arg(evaluate)
    evaluate.set_defaults(func=_cmd_evaluate)

    feats = sub.add_parser("features", help="inspect feature pipelines",
                           description="Inspect what the feature pipelines do to the graphs.")
    fsub = feats.add_subparsers(dest="features_command", metavar="ACTION", required=True)
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
    prune.add_argument("--split", choices=[s.value for s in Split], default="train",
                       help="split to measure (default: %(default)s)")
    prune.add_argument("--collections", nargs="+", metavar="C", help=_COLLECTIONS_HELP)
    prune.add_argument("--no-progress", action="store_true", help="hide progress bars")
    prune.set_defaults(func=_cmd_prune_stats)

    trainp = sub.add_parser(
        "train", help="fit a model per collection and save it (GNN runs keep checkpoints and learning curves)",
        description="Fit a registered model on the train split of each collection (early stopping on valid where "
                    "the model supports it), save it as runs/<model>/<collection>/model.json, and print the "
                    "valid score per collection. A GNN run keeps checkpoint.pt, curves.csv and curves.png in the "
                    "same folder; re-running with the same settings resumes an interrupted run.",
    )
    _add_data_arg(trainp)
    trainp.add_argument("--model", default="gnn", metavar="NAME",
                        help="registered model name: gnn, gnn-attn, gbdt, default-first, random "
                             "(default: %(default)s)")
    trainp.add_argument("--collections", nargs="+", metavar="C", help=_COLLECTIONS_HELP)
    trainp.add_argument("--runs-dir", default="runs", metavar="DIR",
                        help="where runs and saved models go (default: %(default)s)")
    trainp.add_argument("--param", action="append", default=[], metavar="KEY=VALUE",
                        help="a hyper-parameter of the model, repeatable (e.g. --param epochs=20 --param "
                             "attention=True --param segment_size=2000); values are Python literals")
    trainp.add_argument("--no-progress", action="store_true", help="hide progress bars")
    add_valid_configs_arg(trainp)
    trainp.set_defaults(func=_cmd_train)

    submit = sub.add_parser(
        "submit", help="run the whole pipeline: data, models, submission, validation, offline score",
        description="What `make submit` runs: use real data if found (else generate the synthetic demo world), fit "
                    "every model on train, pick the best on valid, write submissions/submission.csv, validate it "
                    "and print the offline score tables.",
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
    submit.add_argument("--time-budget", metavar="DURATION", default=None,
                        help="wall-clock budget for the whole run, e.g. 8h, 90m, 1h30m or seconds: models run "
                             "cheapest first, each gets a share by its cost, stops at it keeping its best weights, "
                             "and submission.csv is rewritten after every model with the best so far "
                             "(default: no limit)")
    submit.add_argument("--no-progress", action="store_true", help="hide progress bars")
    add_valid_configs_arg(submit)
    submit.set_defaults(func=_cmd_submit)

    from competition.kaggle import add_parser as add_kaggle_parser
    from competition.report import add_parser as add_report_parser

    add_kaggle_parser(sub)
    add_report_parser(sub)
    return parser


def _cmd_validate_submission(args: argparse.Namespace) -> int:
    from competition.reader import find_data_root
    from competition.submission import validate_submission

    root = find_data_root(args.data)
    problems = validate_submission(args.file, root, Split(args.split), protocol=protocol_from_args(args))
    for p in problems:
        print(p)
    print(f"{args.file}: {'valid' if not problems else f'{len(problems)} problem(s)'}")
    return 1 if problems else 0


def _cmd_score(args: argparse.Namespace) -> int:
    from competition.leaderboard import append_row
    from competition.pipeline import is_synthetic, split_oracles
    from competition.reader import find_data_root
    from competition.submission import score_submission

    root = find_data_root(args.data)
    split = Split(args.split)
    protocol = protocol_from_args(args)
    report = score_submission(args.file, root, split, protocol=protocol)
    synthetic = is_synthetic(root)
    print(report.format_table(split_oracles(root, list(report.collections), split, protocol) if synthetic else None))
    if args.per_graph:
        for c, res in report.collections.items():
            for g in sorted(res.graphs, key=lambda g: g.score):
                print(f"  {c.value:20s} {g.stem:40s} {g.score:8.4f}")
    if synthetic:
        print("(synthetic data: this score says nothing about the Kaggle leaderboard)")
    append_row(report.scores(), file=args.file, producer=args.producer, split=split.value, data=root.root,
               synthetic=synthetic, path=args.leaderboard, protocol=protocol.tag if split == Split.VALID else "")
    return 0


def _cmd_leaderboard(args: argparse.Namespace) -> int:
    from competition.leaderboard import format_leaderboard, read_rows, save_plot

    rows = read_rows(args.leaderboard)
    if not rows:
        print(f"{args.leaderboard}: no scorings yet (run `fastslow score FILE` or `make submit`)")
        return 0
    print(format_leaderboard(rows, args.top))
    plot = args.plot or str(Path(args.leaderboard).with_name("leaderboard.png"))
    print(f"plot: {save_plot(rows, plot)}")
    return 0


def _cmd_evaluate(args: argparse.Namespace) -> int:
    from competition.pipeline import evaluate_models

    evaluate_models(args.data, models=args.models, out_dir=args.out_dir, progress=not args.no_progress,
                    protocol=protocol_from_args(args))
    return 0


def _cmd_prune_stats(args: argparse.Namespace) -> int:
    from competition.reader import find_data_root
    from features.report import format_pruning_report, pruning_report
    from features.transforms import CollapseChains, PruneToConfigurable

    root = find_data_root(args.data)
    if args.collapse:
        transform = CollapseChains(hops=args.hops, direction=args.direction, mode=args.collapse)
    else:
        transform = PruneToConfigurable(hops=args.hops, direction=args.direction)
    rows = pruning_report(root, transform, _collections(args.collections), Split(args.split),
                          progress=not args.no_progress)
    print(format_pruning_report(rows, transform))
    return 0


def _parse_params(items: Sequence[str]) -> dict[str, object]:
    import ast

    out: dict[str, object] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SystemExit(f"fastslow train: --param expects KEY=VALUE, got {item!r}")
        try:
            out[key] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            out[key] = value
    return out


def _cmd_train(args: argparse.Namespace) -> int:
    import numpy as np

    from competition.pipeline import split_labels
    from competition.reader import find_data_root, list_graphs, load_graph
    from competition.submission import submission_id
    from features.cache import collection_slug
    from models.gnn.train import graph_metric
    from models.registry import make_model

    root = find_data_root(args.data)
    protocol = protocol_from_args(args)
    params = _parse_params(args.param)
    if args.model.startswith("gnn"):
        params.setdefault("runs_dir", args.runs_dir)
    try:
        make_model(args.model, **params)  # unknown hyper-parameters fail here, before any fitting
    except TypeError as exc:
        raise SystemExit(f"fastslow train: {exc}") from None
    collections = [c for c in _collections(args.collections) if list_graphs(root, c, Split.TRAIN)]
    print(f"{'collection':20s} {'valid':>8s} {'graphs':>7s} {'seconds':>8s}  saved")
    for c in collections:
        t0 = time.perf_counter()
        model = make_model(args.model, **params).fit(root, c, progress=not args.no_progress, valid=protocol)
        seconds = time.perf_counter() - t0
        saved = model.save(Path(args.runs_dir) / args.model / collection_slug(c) / "model.json")
        paths = list_graphs(root, c, Split.VALID)
        labels = split_labels(root, [c], Split.VALID, protocol) if paths else {}
        values = []
        for p in paths:
            g = protocol.select(load_graph(p, c), c)
            values.append(graph_metric("tile" if c.is_tile else "layout", model.predict(g),
                                       labels[submission_id(c, p.stem)]))
        valid = f"{np.mean(values):8.4f}" if values else f"{'-':>8s}"
        print(f"{c.value:20s} {valid} {len(values):7d} {seconds:8.1f}  {saved}", flush=True)
    print(f"valid scored on {protocol.describe()}")
    return 0


def _cmd_submit(args: argparse.Namespace) -> int:
    from competition.budget import parse_duration
    from competition.pipeline import run_pipeline

    budget = None if args.time_budget is None else parse_duration(args.time_budget)
    run_pipeline(args.data, models=args.models, out_dir=args.out_dir, synth_dir=args.synth_dir,
                 synth_scale=args.synth_scale, progress=not args.no_progress, protocol=protocol_from_args(args),
                 time_budget=budget)
    return 0


def _cmd_synth(args: argparse.Namespace) -> int:
    from competition.synthetic.world import WorldMismatch, generate_world

    t0 = time.perf_counter()
    try:
        out = generate_world(args.out, scale=args.scale, seed=args.seed, collections=args.collections,
                             limit=args.limit, tile_limit=args.tile_limit, workers=args.workers, force=args.force,
                             progress=not args.no_progress)
    except WorldMismatch as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {args.scale} world (seed {args.seed}) to {out} in {time.perf_counter() - t0:.1f} s")
    return 0


def _cmd_stats(args: argparse.Namespace) -> int:
    from competition.reader import find_data_root
    from competition.stats import collection_stats, format_stats

    root = find_data_root(args.dir)
    print(f"data root: {root.root} ({root.source})")
    for c in _collections(args.collections):
        st = collection_stats(root, c, progress=not args.no_progress, skip_bad=args.skip_bad)
        print(format_stats(st, args.top_opcodes))
        print()
    return 0


def _cmd_validate(args: argparse.Namespace) -> int:
    from tqdm.auto import tqdm

    from competition.reader import find_data_root, list_graphs, validate_file

    root = find_data_root(args.data)
    splits = [Split(s) for s in args.splits] if args.splits else list(Split)
    jobs = [(c, p) for c in _collections(args.collections) for s in splits for p in list_graphs(root, c, s)]
    bad = 0
    for c, path in tqdm(jobs, desc="validate", unit="file", disable=args.no_progress):
        problems = validate_file(path, c, deep=args.deep)
        if problems:
            bad += 1
            for p in problems:
                tqdm.write(f"{c.value}: {p}")
    print(f"{len(jobs)} files checked, {bad} with problems")
    return 1 if bad else 0


def _cmd_where(args: argparse.Namespace) -> int:
    from competition.reader import find_data_root

    root = find_data_root(args.data)
    print(f"data root: {root.root}\n  found by: {root.source}\n  npz tree: {root.npz_dir} ({root.layout_kind})")
    print(f"  sample submission: {root.sample_submission or '-'}\n  secret runtimes: {root.secret_dir or '-'}")
    for (c, s), n in sorted(root.available().items(), key=lambda kv: (kv[0][0].value, kv[0][1].value)):
        print(f"  {c.value:20s} {s.value:5s} {n:6d} graphs")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    line_progress_when_logged()
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO, format="%(levelname)s %(message)s")
    try:
        return args.func(args)
    except (DataRootNotFound, DataFileError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
