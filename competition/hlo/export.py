"""XLA programs and tuning records in, TpuGraphs npz files out, written into a data root's tree: what
``fastslow featurize`` runs, and what :func:`competition.real_records.records_root` builds the shipped records' root
with."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

try:
    import fcntl
except ImportError:  # pragma: no cover - not on Linux: markers are not locked
    fcntl = None  # type: ignore[assignment]

from competition.collections import Collection, Split
from competition.errors import printable
from competition.fingerprint import file_sha256
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
        del data  # the text is a copy: the bytes are not kept while it is parsed
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

    Every input is checked as a program (:mod:`competition.hlo.check`) when it is read, and every output is made
    and checked in memory (as ``fastslow data validate --deep`` checks a file) before the first is written; a file
    that would fail refuses the whole run, naming its input. Each file is then written to a temporary file, checked
    again, and put in place only where nothing is yet (unless ``force``): an exclusive create, so that two runs into
    one root never replace each other's files.

    While the files are written, ``out/featurize-incomplete-<plan>.txt`` marks the root as holding some of them
    (:class:`_Progress`): a run stopped midway (a full disk, Ctrl-C) says how many are in place, and the same command
    resumes it, keeping the files whose bytes are those it listed; another command that would write over one of them
    is refused naming the marker.

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
        HloFormatError: an input, or an output that would fail its checks, naming the file and the problem; a file
            that could not be written, saying how many of the run's files are in place.
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
                    echo(f"{printable(program)}: no convolution, dot or reshape to configure: no layout file")
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

    progress = _Progress(Path(out), planned)
    try:
        kept = progress.resume(force)
        for path in planned:
            if not force and path not in kept and os.path.lexists(path):
                raise HloFormatError(path, f"exists already{progress.left_by(path)}: --force replaces it")
        progress.start()
        for path, output in planned.items():
            if path in kept:
                echo(f"kept {printable(path)}, written by the run that stopped midway")
                continue

            def check(tmp: Path, path: Path = path, collection: Collection = output.collection) -> str | None:
                problems = validate_file(tmp, collection, deep=True)
                if problems:
                    return "; ".join(str(p) for p in problems[:3])
                progress.record(path, tmp)  # before it is put in place: a file in place is always listed
                return None

            try:
                try:
                    write_npz(path, output.arrays, check=check, exclusive=not force)
                except BaseException:
                    progress.forget(path)  # listed before the failure, but not put in place
                    raise
            except FileExistsError:
                raise HloFormatError(path, "exists already: written since this run began (another run into the "
                                           "same root?); it is kept, and this run stops here: --force replaces it"
                                           f"{progress.so_far()}") from None
            except Exception as exc:
                raise progress.stopped(path, exc) from exc
            echo(f"wrote {printable(path)}")
    except BaseException:
        progress.close()
        raise
    progress.finish()
    again = f" ({len(kept)} of them kept from the run that stopped midway)" if kept else ""
    echo(f"{len(planned)} file(s) written under {printable(root)}{again}, each checked as `fastslow data validate "
         "--deep` checks it")
    return list(planned)


MARKER_PREFIX = "featurize-incomplete-"
"""How the marker of a ``featurize`` run that stopped midway is named in the data root: this, 16 hex digits of the
run's plan (its outputs' paths and arrays), ``.txt``."""


class _Progress:
    """The marker of one run's plan in the data root, while its files are written: the root holds some of them, not
    all.

    The marker is named by a digest of the plan (every output's path and arrays), so the same command finds the
    marker of its own earlier run. It lists each file put in place with the SHA-256 of its bytes, recorded before the
    file is put in place; it is removed once every file is written. A run holds an exclusive ``flock`` on it while
    it writes (the kernel drops it however the run ends): a marker nobody holds is that of a run that stopped, and
    the same command resumes it, keeping the files whose bytes are still those listed; a marker a live run holds is
    left alone (two runs of one command at once: one of them is refused, as without a marker).
    """

    def __init__(self, out: Path, planned: dict[Path, _Output]) -> None:
        self.out = out
        self.planned = planned
        digest = hashlib.sha256()
        for path, output in sorted(planned.items()):
            digest.update(f"{path.relative_to(out)}\0".encode())
            for key, value in output.arrays.items():
                a = np.ascontiguousarray(value)
                digest.update(f"{key}\0{a.dtype.str}\0{a.shape}\0".encode())
                digest.update(a.reshape(-1).view(np.uint8))
        self.path = out / f"{MARKER_PREFIX}{digest.hexdigest()[:16]}.txt"
        self.fd: int | None = None
        self.created = False
        self.recorded: dict[str, str] = {}
        self.header = (f"# fastslow featurize stopped before it wrote all of its {len(planned)} files into this root: "
                       "the same command resumes it (the files listed here, with their SHA-256, are kept)\n")

    def _rel(self, path: Path) -> str:
        return path.relative_to(self.out).as_posix()

    def resume(self, force: bool) -> set[Path]:
        """Take over the marker of this plan left by a run that stopped, if there is one; the planned files it
        lists whose bytes are unchanged (none with ``force``: every file is written again)."""
        try:
            fd = os.open(self.path, os.O_RDWR | getattr(os, "O_NOFOLLOW", 0))
        except OSError:
            return set()
        if not _lock(fd, self.path):
            return set()
        self.fd = fd
        self.recorded = _listed(self.path)
        if force:
            return set()
        return {path for path in self.planned
                if self.recorded.get(self._rel(path)) is not None and path.is_file() and not path.is_symlink()
                and file_sha256(path) == self.recorded[self._rel(path)]}

    def left_by(self, path: Path) -> str:
        """What an existing ``path`` was left by, when a marker of another plan lists it."""
        rel = self._rel(path)
        for marker in sorted(self.out.glob(f"{MARKER_PREFIX}*.txt")):
            if marker != self.path and rel in _listed(marker):
                return (f", left by a featurize run that stopped midway ({printable(marker)} marks the root "
                        "incomplete; the command that wrote it resumes it)")
        return ""

    def start(self) -> None:
        """Hold the marker (created if missing), listing the files of this plan in place now."""
        if self.fd is None:
            self.out.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o666)
            if not _lock(fd, self.path):
                return  # a live run of the same plan took it meanwhile: this one writes without a marker
            self.fd, self.created = fd, True
        rel = {self._rel(p) for p in self.planned}
        self.recorded = {k: v for k, v in self.recorded.items() if k in rel}
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, (self.header + "".join(f"{v}  {k}\n" for k, v in self.recorded.items())).encode(), 0)
        os.fsync(self.fd)

    def record(self, path: Path, tmp: Path) -> None:
        """List ``path`` with the SHA-256 of ``tmp``, its complete temporary, before it is put in place."""
        if self.fd is None:
            return
        rel, sha = self._rel(path), file_sha256(tmp)
        self.recorded[rel] = sha
        os.lseek(self.fd, 0, os.SEEK_END)
        os.write(self.fd, f"{sha}  {rel}\n".encode())
        os.fsync(self.fd)

    def forget(self, path: Path) -> None:
        """``path`` was listed but not put in place: it no longer counts (a later run finds other bytes there, or
        none, and does not keep it)."""
        self.recorded.pop(self._rel(path), None)

    def in_place(self) -> int:
        return sum(1 for rel in self.recorded if os.path.lexists(self.out / rel))

    def so_far(self) -> str:
        done = self.in_place()
        if not done or self.fd is None:
            return ""
        return (f"; {done} of its {len(self.planned)} files are in place, and {printable(self.path)} marks the root "
                "incomplete")

    def stopped(self, path: Path, exc: Exception) -> HloFormatError:
        """The error of a run that stopped while writing ``path``."""
        if isinstance(exc, OSError) and exc.errno is not None:
            why = exc.strerror or os.strerror(exc.errno)
            where = f" ({printable(exc.filename)})" if exc.filename is not None else ""
            what = f"{why.lower() if why else exc}{where}"
        else:
            what = str(exc)
        if self.fd is None or not self.in_place():
            return HloFormatError(path, f"not written: {what}; nothing of this run is in place")
        return HloFormatError(path, f"not written: {what}; {self.in_place()} of the run's {len(self.planned)} files "
                                    f"are in place, and {printable(self.path)} marks the root incomplete: re-run the "
                                    "same command to write the rest")

    def finish(self) -> None:
        """Every file is written: the marker goes."""
        if self.fd is not None:
            self.path.unlink(missing_ok=True)
        self.close()

    def close(self) -> None:
        """Let go of the marker (kept while some files of the plan are in place, removed otherwise)."""
        if self.fd is None:
            return
        if not self.in_place():
            self.path.unlink(missing_ok=True)
        os.close(self.fd)
        self.fd = None


def _lock(fd: int, path: Path) -> bool:
    """Take an exclusive, non-blocking ``flock`` on ``fd``, the file ``path`` names; close it and return ``False``
    where a live process holds it, or ``path`` names another file since."""
    try:
        if fcntl is not None:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        st, own = os.lstat(path), os.fstat(fd)
        if (st.st_dev, st.st_ino) == (own.st_dev, own.st_ino):
            return True
    except OSError:
        pass
    os.close(fd)
    return False


def _listed(marker: Path) -> dict[str, str]:
    """The files a marker lists: relative path -> SHA-256 (a line cut short by a crash is left out)."""
    try:
        with open(marker, encoding="utf-8", errors="replace") as f:
            lines = f.read(16 * 2**20).splitlines()
    except OSError:
        return {}
    out = {}
    for line in lines[1:]:
        sha, _, rel = line.partition("  ")
        if len(sha) == 64 and rel:
            out[rel] = sha
    return out




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
