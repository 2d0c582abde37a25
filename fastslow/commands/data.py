"""``fastslow data``: synth, stats, validate, where and calibration."""

from __future__ import annotations

import argparse
import logging
import sys
import time
import typing
from collections.abc import Sequence
from pathlib import Path

from competition.collections import Collection, Split
from competition.workers import WORKERS_RULE
from fastslow.commands.common import (
    COLLECTIONS_HELP,
    EXIT_OK,
    EXIT_PROBLEMS,
    add_data_arg,
    collections_of,
    count_arg,
    jobs_arg,
)

if typing.TYPE_CHECKING:
    from competition.dataroot import DataRoot

log = logging.getLogger("fastslow")


def add_data_parsers(sub: argparse._SubParsersAction) -> None:
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
    synth.add_argument("--collections", nargs="+", metavar="C", help=COLLECTIONS_HELP)
    synth.add_argument("--limit", type=count_arg("--limit"), default=None, metavar="N",
                       help="at most N graphs per collection and split (default: the scale's counts)")
    synth.add_argument("--tile-limit", type=count_arg("--tile-limit"), default=None, metavar="N",
                       help="at most N tile kernels per split (default: --limit), e.g. --limit 12 --tile-limit 600 "
                            "for a full-scale part with 12 graphs per layout split")
    synth.add_argument("--workers", type=count_arg("--workers"), default=None, metavar="N",
                       help="worker processes (default: one per usable core); however many are asked, "
                            f"{WORKERS_RULE} (a job writes one layout graph, or the tile kernels of one program)")
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
    stats.add_argument("--collections", nargs="+", metavar="C", help=COLLECTIONS_HELP)
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
                    "sizes within the bounds of real data (from the zip directory and the array headers, before "
                    "anything is inflated), no member named twice or encrypted, no file or folder linking "
                    "outside the data root, finite values everywhere the models read (node_config_feat streamed "
                    "block by block, never whole), positive runtimes in train and valid files, every split of each collection present, "
                    "file names usable in submission IDs, sample_submission.csv against the test files, and the "
                    "secret/ runtimes of a synthetic world. Hidden files (names starting with '.', such as macOS "
                    "._x.npz) are skipped everywhere, with a note. Exits 1 if anything is wrong.",
    )
    add_data_arg(val)
    val.add_argument("--collections", nargs="+", metavar="C", help=COLLECTIONS_HELP)
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
    add_data_arg(where)
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
    add_data_arg(cal)
    cal.add_argument("--limit", type=jobs_arg, default=None, metavar="N",
                     help="read at most N graphs per collection and split (default: all)")
    cal.add_argument("--cache-dir", default=".cache", metavar="DIR",
                     help="where the featurized real records are kept (default: %(default)s)")
    cal.set_defaults(func=_cmd_calibration)


def _cmd_calibration(args: argparse.Namespace) -> int:
    from competition.dataroot import find_data_root, list_graphs
    from competition.errors import UsageError, printable
    from competition.real_records import TILE_RECORDS, featurize_records
    from competition.synthetic import calibration

    cache = Path(args.cache_dir)
    # Checked before any work, not when the records are first featurized into it.
    for place in (cache, *cache.parents):
        if place.exists():
            if not place.is_dir():
                what = "is a file" if place == cache else f"{printable(place)} is a file"
                raise UsageError(f"--cache-dir {printable(args.cache_dir)}: {what}, not a folder (the featurized "
                                 "real records are kept in a folder)")
            break
    root = find_data_root(args.data)
    measured = (Split.TRAIN, Split.VALID)
    # Figures are measured on these graphs only: without any, every figure would be absent and none outside.
    if not any(list_graphs(root, c, s) for c in Collection for s in measured):
        raise ValueError(f"data root {printable(root.root)}: no train or valid graphs in any collection, so no "
                         "calibration figure can be measured (the test split's runtimes are hidden)")
    print(f"data root: {root.root} ({root.source})")
    real = calibration.figures(find_data_root(featurize_records(cache)), splits=(Split.TRAIN,))
    world = calibration.figures(root, splits=measured, limit=args.limit)
    if not world:
        raise ValueError(f"data root {printable(root.root)}: none of the calibration figures could be measured on "
                         "its train and valid graphs (too few graphs or configs)")
    print(calibration.table(world, real))
    bad = calibration.failures(world)
    agreement = calibration.physics_agreement(TILE_RECORDS.read_bytes())
    print("\nThe world's tile physics on the real kernels' measured configs:")
    print(calibration.agreement_table(agreement))
    bad += calibration.agreement_failures(agreement)
    for line in bad:
        print(f"outside: {line}")
    return 1 if bad else 0


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
    from competition.dataroot import find_data_root
    from competition.stats import collection_stats, format_stats

    root = find_data_root(args.dir)
    print(f"data root: {root.root} ({root.source})")
    _note_hidden(root, collections_of(args.collections), list(Split))
    for c in collections_of(args.collections):
        st = collection_stats(root, c, progress=not args.no_progress, skip_bad=args.skip_bad)
        print(format_stats(st, args.top_opcodes))
        print()
    return 0


def _note_hidden(root: DataRoot, collections: Sequence[Collection], splits: Sequence[Split]) -> None:
    from competition.dataroot import hidden_files

    hidden = hidden_files(root, collections, splits)
    if hidden:
        more = f" and {len(hidden) - 1} more" if len(hidden) > 1 else ""
        print(f"note: skipped {len(hidden)} hidden file(s) (names starting with '.', such as macOS ._x.npz "
              f"resource forks): {hidden[0]}{more}")


def _listed_or_none(root: DataRoot, c: Collection, s: Split) -> list[Path]:
    from competition.dataroot import list_graphs
    from competition.errors import DataFileError

    try:
        return list_graphs(root, c, s)
    except (OSError, DataFileError):  # validate_root reports the folder, or the link leading out of the root
        return []


def _cmd_validate(args: argparse.Namespace) -> int:
    from tqdm.auto import tqdm

    from competition.dataroot import find_data_root, validate_root
    from competition.errors import DataFileError
    from competition.graphfile import validate_file
    from competition.submission_checks import sample_problems

    root = find_data_root(args.data)
    collections = collections_of(args.collections)
    splits = [Split(s) for s in args.splits] if args.splits else list(Split)
    _note_hidden(root, collections, splits)
    whole = validate_root(root, collections, splits, synthetic=root.is_synthetic)
    if Split.TEST in splits:
        try:
            whole += sample_problems(root, collections)
        except DataFileError as exc:  # a test folder or file leading outside the root: listed by validate_root
            if not any(p.path == exc.path for p in whole):
                whole.append(exc)
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
    from competition.dataroot import find_data_root

    root = find_data_root(args.data)
    print(f"data root: {root.root}\n  found by: {root.source}\n  npz tree: {root.npz_dir} ({root.tree_format})")
    print(f"  sample submission: {root.sample_submission or '-'}\n  secret runtimes: {root.secret_dir or '-'}")
    for (c, s), n in sorted(root.available().items(), key=lambda kv: (kv[0][0].value, kv[0][1].value)):
        print(f"  {c.value:20s} {s.value:5s} {n:6d} graphs")
    return 0


# --------------------------------------------------------------------------------------------------------------
# The error boundary
# --------------------------------------------------------------------------------------------------------------
