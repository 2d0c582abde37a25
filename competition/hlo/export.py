"""XLA programs and tuning records in, TpuGraphs npz files out, written into a data root's tree: what
``fastslow featurize`` runs, and what :func:`competition.real_records.records_root` builds the shipped records' root
with."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from competition.collections import Collection, Split
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
from competition.limits import MAX_PROGRAM_BYTES, MAX_RECORD_BYTES, file_over


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


@dataclass(frozen=True)
class _Output:
    """One npz file to write: its members, its collection and the input it comes from."""

    arrays: dict[str, object]
    collection: Collection
    source: object


def featurize_files(programs: Sequence[str | os.PathLike[str]] = (),
                    layout_records: Sequence[str | os.PathLike[str]] = (),
                    tile_records: Sequence[str | os.PathLike[str]] = (), *, out: str | os.PathLike[str],
                    collection: str = Collection.LAYOUT_XLA_RANDOM.value, split_name: str | None = None,
                    what: str = "both", sample: int = 10, seed: int = 0, force: bool = False,
                    echo: Callable[[str], object] = print) -> list[Path]:
    """Featurize programs and tuning records into ``out/npz/...``.

    Every output is made and checked in memory (as ``fastslow data validate --deep`` checks a file) before the first
    is written; a file that would fail refuses the whole run, naming its input. Each file is then written to a
    temporary file, checked again, and put in place only where nothing is yet (unless ``force``): an exclusive
    create, so that two runs into one root never replace each other's files.

    Args:
        programs: HLO text or serialized HloModuleProto files, without records (their runtimes unknown: test split).
        layout_records: serialized ModuleTuningData files (one layout file each).
        tile_records: serialized TuningData files (one tile file per kernel).
        out: the data root to write into.
        collection: the layout collection of the layout files.
        split_name: the split of every file; default train for records, test for programs.
        what: ``layout``, ``tile`` or ``both``: the files of a program without records.
        sample: sampled configs per file for a program without records, beside the default.
        seed: seed of the sampled configs.
        force: replace existing files.
        echo: where the lines saying what was written go.

    Returns:
        The paths written.

    Raises:
        HloFormatError: an input, or an output that would fail its checks, naming the file and the problem.
    """
    from competition.graphfile import validate_arrays, validate_file
    from competition.npzio import write_npz

    if not (programs or layout_records or tile_records):
        raise HloFormatError("fastslow featurize", "nothing to featurize: give program FILEs, --layout-records or "
                                                   "--tile-records")
    split = Split(split_name) if split_name else None
    if programs and split in (Split.TRAIN, Split.VALID):
        raise HloFormatError(programs[0], f"a program without records has no measured runtimes, and a "
                                               f"{split.value} file needs them: use --split test, or give its "
                                               "records (--layout-records / --tile-records)")
    root = Path(out) / "npz"
    layout_c, tile_c = Collection(collection), Collection.TILE_XLA
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
        if path.exists() and not force:
            raise HloFormatError(path, "exists already: --force replaces it")
        planned[path] = _Output(arrays, collection, source)

    # Values too large for float32 become inf here, and are refused by the checks above, naming the file and place.
    with np.errstate(over="ignore", invalid="ignore"):
        for program in programs:
            module = read_program(program)
            stem = safe_stem(Path(program).stem)
            sp = split or Split.TEST
            named_by = f"the file's name {Path(program).name!r}"
            if what in ("layout", "both"):
                ids, feat = sample_layouts(module, sample, seeded_rng(seed, stem), program)
                if ids.size:
                    plan(layout_c, sp, stem,
                         layout_npz_arrays(module, ids, feat, np.zeros(feat.shape[0], np.int64)), program, named_by)
                else:
                    echo(f"{program}: no convolution, dot or reshape to configure: no layout file")
            if what in ("tile", "both"):
                for fusion, kernel in fusion_kernels(module):
                    kstem = f"{stem}_{safe_stem(fusion)}"
                    cfg = sample_tiles(kernel, sample, seeded_rng(seed, kstem))
                    n = cfg.shape[0]
                    plan(tile_c, sp, kstem,
                         tile_npz_arrays(kernel, cfg, np.zeros(n, np.int64), np.ones(n, np.int64)), program, named_by)
        for path in layout_records:
            rec = read_layout_records(_read(path, MAX_RECORD_BYTES, "MAX_RECORD_BYTES"), path)
            ids, feat, runtime = layout_from_records(rec, rec.module.num_nodes, path)
            plan(layout_c, split or Split.TRAIN, safe_stem(Path(path).stem),
                 layout_npz_arrays(rec.module, ids, feat, runtime), path, f"the file's name {Path(path).name!r}")
        for path in tile_records:
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
            write_npz(path, output.arrays, check=check, exclusive=not force)
        except FileExistsError:
            raise HloFormatError(path, "exists already: written since this run began (another run into the same "
                                       "root?); it is kept, and this run stops here: --force replaces it") from None
        echo(f"wrote {path}")
    echo(f"{len(planned)} file(s) written under {root}, each checked as `fastslow data validate --deep` checks it")
    return list(planned)




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
