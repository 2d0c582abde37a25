"""``fastslow featurize``: XLA programs and tuning records in, TpuGraphs npz files out (a data root's tree); the
work is :func:`competition.hlo.export.featurize_files`."""

from __future__ import annotations

import argparse
import sys

from competition.collections import Collection, Split
from competition.errors import UsageError
from competition.hlo.export import featurize_files
from competition.limits import MAX_SAMPLE

LAYOUT_COLLECTIONS = [c.value for c in Collection if c.is_layout]


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``featurize`` command to the ``fastslow`` sub-commands.

    Args:
        subparsers: the object returned by ``ArgumentParser.add_subparsers``.
    """
    p = subparsers.add_parser(
        "featurize", help="turn XLA programs (HLO text or HloModuleProto) and tuning records into npz files",
        description="Turn XLA programs and tuning records into TpuGraphs npz files, written in a data root's tree "
                    "(OUT/npz/layout/<source>/<search>/<split>/<stem>.npz and OUT/npz/tile/xla/<split>/<stem>.npz). "
                    "Every file is checked as `fastslow data validate --deep` checks one before any is written, and "
                    "again before it is put in place: an input whose file would fail is refused, nothing written. A "
                    "program without "
                    "records gets a layout file (the default layout and --sample sampled ones) and a tile file "
                    "per fusion (one tile over the whole output and --sample sampled output bounds); its "
                    "runtimes are unknown and written as test files hide theirs (all 0; tile normalizers all 1), "
                    "so it goes to the test split. Records carry measured runtimes and go to train by default. A run "
                    "stopped midway (a full disk, Ctrl-C) leaves OUT/featurize-incomplete-<id>.txt, which lists the "
                    "files it put in place: the same command resumes it.",
    )
    p.add_argument("programs", nargs="*", metavar="FILE",
                   help="a program: HLO text as XLA prints it (e.g. JAX's lower(...).as_text(dialect='hlo') or "
                        "compile().as_text()) or a serialized HloModuleProto; the file's stem names its outputs")
    p.add_argument("--layout-records", action="append", default=[], metavar="FILE",
                   help="a serialized ModuleTuningData (TpuGraphs tuning.proto): a program, its configurable "
                        "node ids and its measured layout runs; one layout file named after FILE's stem. "
                        "Repeatable")
    p.add_argument("--tile-records", action="append", default=[], metavar="FILE",
                   help="a serialized TuningData: fused kernels with their measured tile runs (each kernel needs "
                        "a default run, its runtime the normalizer); one tile file per kernel, named "
                        "<kernel module name>_<fingerprint as signed hex>. Repeatable")
    p.add_argument("--out", metavar="DIR", required=True,
                   help="data root to write into (created if missing); `fastslow data validate --data DIR "
                        "--splits SPLIT --deep` checks it afterwards")
    p.add_argument("--collection", choices=LAYOUT_COLLECTIONS, default=Collection.LAYOUT_XLA_RANDOM.value,
                   help="the layout collection the layout files go to (tile files always go to tile:xla) "
                        "(default: %(default)s)")
    p.add_argument("--split", choices=[s.value for s in Split], default=None,
                   help="split folder of every file written; train and valid need measured runtimes, so "
                        "programs without records only go to test. Default: train for records, test for programs")
    p.add_argument("--what", choices=["layout", "tile", "both"], default="both",
                   help="which files to write for a program without records: its layout file, a tile file per "
                        "fusion, or both (default: %(default)s)")
    p.add_argument("--sample", type=_sample, default=10, metavar="N",
                   help="sampled configs per file for programs without records, beside the default config "
                        f"(fewer when the program has fewer distinct ones; at most {MAX_SAMPLE:,}) "
                        "(default: %(default)s)")
    p.add_argument("--seed", type=int, default=0,
                   help="seed of the sampled configs; the same seed and file stem give the same configs "
                        "(default: %(default)s)")
    p.add_argument("--force", action="store_true",
                   help="replace npz files that already exist, with files that pass their checks (default: "
                        "refuse, naming the first one, also when another run wrote it meanwhile)")
    p.set_defaults(func=cmd_featurize, outputs={"out": "folder"})


def _sample(text: str) -> int:
    """``--sample``: 0 to :data:`MAX_SAMPLE`, refused in one line while parsing."""
    try:
        v = int(text)
    except ValueError:
        v = -1
    if v < 0:
        raise UsageError(f"--sample: expected a whole number of at least 0; found {text!r}")
    if v > MAX_SAMPLE:
        raise UsageError(f"--sample: {v:,}, more than the limit of {MAX_SAMPLE:,} (MAX_SAMPLE, 10 times the most "
                         "configs of a real graph)")
    return v


def cmd_featurize(args: argparse.Namespace) -> int:
    """Run ``fastslow featurize`` (:func:`competition.hlo.export.featurize_files`)."""
    featurize_files(args.programs, args.layout_records, args.tile_records, out=args.out, collection=args.collection,
                    split_name=args.split, what=args.what, sample=args.sample, seed=args.seed, force=args.force,
                    echo=_say)
    return 0


def _say(line: str) -> None:
    """Print a progress line in what the terminal can show: a character its encoding lacks (a non-ASCII folder
    under ``PYTHONIOENCODING=ascii``) is written as its escape, never failing the run between two files."""
    encoding = getattr(sys.stdout, "encoding", None) or "utf-8"
    print(line.encode(encoding, "backslashreplace").decode(encoding, "replace"), flush=True)
