"""The ``fastslow`` command line (also ``python -m competition``)."""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections.abc import Sequence

from competition.collections import Collection, Split
from competition.errors import DataFileError, DataRootNotFound

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
    synth.add_argument("--scale", choices=["tiny", "demo", "full"], default="demo",
                       help="tiny: seconds, for tests; demo: the default of `make submit`; full: real counts "
                            "and sizes, for benchmarks (default: %(default)s)")
    synth.add_argument("--out", required=True, metavar="DIR", help="folder to write the world into")
    synth.add_argument("--seed", type=int, default=0, help="world seed; same seed and settings, same bytes "
                                                           "(default: %(default)s)")
    synth.add_argument("--collections", nargs="+", metavar="C", help=_COLLECTIONS_HELP)
    synth.add_argument("--limit", type=int, default=None, metavar="N",
                       help="at most N graphs per collection and split (default: the scale's counts)")
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
    return parser


def _cmd_synth(args: argparse.Namespace) -> int:
    from competition.synthetic.world import WorldMismatch, generate_world

    t0 = time.perf_counter()
    try:
        out = generate_world(args.out, scale=args.scale, seed=args.seed, collections=args.collections,
                             limit=args.limit, workers=args.workers, force=args.force,
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
        st = collection_stats(root, c, progress=not args.no_progress)
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
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO, format="%(levelname)s %(message)s")
    try:
        return args.func(args)
    except (DataRootNotFound, DataFileError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
