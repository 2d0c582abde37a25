"""``fastslow featurize``: XLA programs and tuning records in, TpuGraphs npz files out (a data root's tree)."""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from competition.collections import Collection, Split
from competition.errors import UsageError
from competition.hlo.featurize import (
    fusion_kernels,
    layout_from_records,
    layout_npz_arrays,
    safe_stem,
    sample_layouts,
    sample_tiles,
    seeded_rng,
    tile_npz_arrays,
    tiles_from_records,
)
from competition.hlo.ir import HloFormatError, Module
from competition.hlo.proto import read_module_proto
from competition.hlo.records import read_layout_records, read_tile_records
from competition.hlo.text import parse_hlo_text
from competition.limits import MAX_PROGRAM_BYTES, MAX_RECORD_BYTES, MAX_SAMPLE, file_over

LAYOUT_COLLECTIONS = [c.value for c in Collection if c.is_layout]


def read_program(path: str | os.PathLike[str]) -> Module:
    """Read one program: HLO text (a file starting with ``HloModule``) or a serialized ``HloModuleProto``.

    Raises:
        HloFormatError: neither, naming the file and what was found.
    """
    data = _read(path, MAX_PROGRAM_BYTES, "MAX_PROGRAM_BYTES")
    if data.lstrip(b"\xef\xbb\xbf \t\r\n").startswith(b"HloModule"):
        try:
            text = data.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise HloFormatError(path, f"HLO text with a byte that is not UTF-8 at {exc.start}") from None
        return parse_hlo_text(text, path)
    try:
        return read_module_proto(data, path)
    except HloFormatError as exc:
        if "not a serialized" not in exc.problem:
            raise
        start = data.lstrip().split(b"\n", 1)[0][:30].decode("utf-8", errors="replace")
        why = exc.problem.removeprefix("not a serialized HloModuleProto (").removesuffix(")")
        raise HloFormatError(path, f"neither HLO text (no first line 'HloModule <name>'; it starts {start!r}) nor "
                                   f"a serialized HloModuleProto ({why})") from None


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
                    "so it goes to the test split. Records carry measured runtimes and go to train by default.",
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


@dataclass(frozen=True)
class _Output:
    """One npz file to write: its members, its collection and the input it comes from."""

    arrays: dict[str, object]
    collection: Collection
    source: object


def cmd_featurize(args: argparse.Namespace) -> int:
    """Run ``fastslow featurize``.

    Every output is made and checked in memory (as ``fastslow data validate --deep`` checks a file) before the first
    is written; a file that would fail refuses the whole run, naming its input. Each file is then written to a
    temporary file, checked again, and put in place only where nothing is yet (unless ``--force``): an exclusive
    create, so that two runs into one root never replace each other's files.
    """
    from competition.npzio import write_npz
    from competition.reader import validate_arrays, validate_file

    if not (args.programs or args.layout_records or args.tile_records):
        raise HloFormatError("fastslow featurize", "nothing to featurize: give program FILEs, --layout-records or "
                                                   "--tile-records")
    split = Split(args.split) if args.split else None
    if args.programs and split in (Split.TRAIN, Split.VALID):
        raise HloFormatError(args.programs[0], f"a program without records has no measured runtimes, and a "
                                               f"{split.value} file needs them: use --split test, or give its "
                                               "records (--layout-records / --tile-records)")
    root = Path(args.out) / "npz"
    layout_c, tile_c = Collection(args.collection), Collection.TILE_XLA
    planned: dict[Path, _Output] = {}

    def plan(collection: Collection, sp: Split, stem: str, arrays: dict[str, object], source: object,
             named_by: str) -> None:
        path = root / collection.relpath / sp.value / f"{stem}.npz"
        if path.name.startswith("."):
            raise HloFormatError(source, f"its output would be named {path.name!r}, a hidden file that every reader "
                                         f"skips (the name comes from {named_by}): rename it so that it does not "
                                         "start with '.'")
        if path in planned:
            raise HloFormatError(source, f"two outputs would both be {path}: rename one input")
        problems = validate_arrays(arrays, path, collection, deep=True)
        if problems:
            more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
            raise HloFormatError(source, f"its output would fail its checks, so nothing was written: "
                                         f"{problems[0]}{more}")
        if path.exists() and not args.force:
            raise HloFormatError(path, "exists already: --force replaces it")
        planned[path] = _Output(arrays, collection, source)

    # Values too large for float32 become inf here, and are refused by the checks above, naming the file and place.
    with np.errstate(over="ignore", invalid="ignore"):
        for program in args.programs:
            module = read_program(program)
            stem = safe_stem(Path(program).stem)
            sp = split or Split.TEST
            named_by = f"the file's name {Path(program).name!r}"
            if args.what in ("layout", "both"):
                ids, feat = sample_layouts(module, args.sample, seeded_rng(args.seed, stem), program)
                if ids.size:
                    plan(layout_c, sp, stem,
                         layout_npz_arrays(module, ids, feat, np.zeros(feat.shape[0], np.int64)), program, named_by)
                else:
                    print(f"{program}: no convolution, dot or reshape to configure: no layout file")
            if args.what in ("tile", "both"):
                for fusion, kernel in fusion_kernels(module):
                    kstem = f"{stem}_{safe_stem(fusion)}"
                    cfg = sample_tiles(kernel, args.sample, seeded_rng(args.seed, kstem))
                    n = cfg.shape[0]
                    plan(tile_c, sp, kstem,
                         tile_npz_arrays(kernel, cfg, np.zeros(n, np.int64), np.ones(n, np.int64)), program, named_by)
        for path in args.layout_records:
            rec = read_layout_records(_read(path, MAX_RECORD_BYTES, "MAX_RECORD_BYTES"), path)
            ids, feat, runtime = layout_from_records(rec, rec.module.num_nodes, path)
            plan(layout_c, split or Split.TRAIN, safe_stem(Path(path).stem),
                 layout_npz_arrays(rec.module, ids, feat, runtime), path, f"the file's name {Path(path).name!r}")
        for path in args.tile_records:
            for rec in read_tile_records(_read(path, MAX_RECORD_BYTES, "MAX_RECORD_BYTES"), path):
                feat, runtime, norm = tiles_from_records(rec, path)
                fp = rec.fingerprint - (1 << 64) if rec.fingerprint >= 1 << 63 else rec.fingerprint
                stem = safe_stem(f"{rec.module.name}_{'-' if fp < 0 else ''}{abs(fp):x}")
                plan(tile_c, split or Split.TRAIN, stem, tile_npz_arrays(rec.module, feat, runtime, norm), path,
                     f"the kernel's module name {rec.module.name!r}")

    for path, output in planned.items():
        def check(tmp: Path, collection: Collection = output.collection) -> str | None:
            problems = validate_file(tmp, collection, deep=True)
            return "; ".join(str(p) for p in problems[:3]) if problems else None

        try:
            write_npz(path, output.arrays, check=check, exclusive=not args.force)
        except FileExistsError:
            raise HloFormatError(path, "exists already: written since this run began (another run into the same "
                                       "root?); it is kept, and this run stops here: --force replaces it") from None
        print(f"wrote {path}")
    print(f"{len(planned)} file(s) written under {root}, each checked as `fastslow data validate --deep` checks it")
    return 0


def _read(path: str | os.PathLike[str], limit: int, name: str) -> bytes:
    """The bytes of ``path``, refused before they are read when its size (``os.stat``) passes ``limit``.

    Raises:
        HloFormatError: naming the file, its size and the limit.
    """
    problem = file_over(path, limit, name)
    if problem is not None:
        raise HloFormatError(path, f"{problem}; not read")
    with open(path, "rb") as f:
        return f.read()
