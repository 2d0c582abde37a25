"""``fastslow features``: what the feature pipelines do to the graphs (``prune-stats``)."""

from __future__ import annotations

import argparse
import logging
import typing

from competition.collections import Split
from fastslow.commands.common import COLLECTIONS_HELP, add_data_arg, collections_of

if typing.TYPE_CHECKING:
    pass

log = logging.getLogger("fastslow")


def add_features_parsers(sub: argparse._SubParsersAction) -> None:
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
    add_data_arg(prune)
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
    prune.add_argument("--collections", nargs="+", metavar="C", help=COLLECTIONS_HELP)
    prune.add_argument("--no-progress", action="store_true", help="hide progress bars")
    prune.set_defaults(func=_cmd_prune_stats)


def _cmd_prune_stats(args: argparse.Namespace) -> int:
    from competition.dataroot import find_data_root
    from competition.dataset import open_split
    from features.prune_stats import format_pruning_stats, pruning_stats
    from features.transforms import CollapseChains, PruneToConfigurable

    root = find_data_root(args.data)
    if args.collapse:
        transform = CollapseChains(hops=args.hops, direction=args.direction, mode=args.collapse,
                                   through=args.through)
    else:
        transform = PruneToConfigurable(hops=args.hops, direction=args.direction)
    rows = pruning_stats([open_split(root, c, args.split) for c in collections_of(args.collections)], transform,
                         progress=not args.no_progress)
    print(format_pruning_stats(rows, transform))
    return 0
