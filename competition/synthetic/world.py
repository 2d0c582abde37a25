"""Write a synthetic TpuGraphs world to disk, in the Kaggle download's exact layout.

``generate_world(out, scale="demo", seed=0)`` writes::

    out/npz_all/npz/tile/xla/{train,valid,test}/*.npz
    out/npz_all/npz/layout/{xla,nlp}/{default,random}/{train,valid,test}/*.npz
    out/sample_submission.csv
    out/secret/<same relative paths>.npz   # hidden test runtimes and every split's noiseless runtimes
    out/world.json                         # what was generated, with which seed; lets a rerun resume

Every graph is seeded from ``(seed, collection source, split, index)`` alone, so the bytes do not depend on the
order or the number of worker processes, and a killed run resumes: every file is written atomically and a
rerun with the same settings skips the files that are complete and removes the temporary files the killed run
left. Worker processes end with the process that started them, even when it is killed.

The parts of a world live beside this module: its sizes and settings in :mod:`competition.synthetic.scales`, the
program of each graph in :mod:`competition.synthetic.world_programs`, the layout searches in
:mod:`competition.synthetic.searches`, and the writing of each graph file in :mod:`competition.synthetic.writers`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from tqdm.auto import tqdm

from competition.atomic import atomic_write_text, remove_stale_temps
from competition.collections import Collection, Split
from competition.nesting import json_loads
from competition.synthetic.scales import GENERATOR_VERSION, SCALES, WorldConfig
from competition.synthetic.world_programs import PROGRAM_SOURCES
from competition.synthetic.writers import KAGGLE_SUBDIR, SECRET_SUBDIR, GraphJob, write_job
from competition.workers import end_with_parent, pool_context, worker_count

MANIFEST = "world.json"

_SPLITS = (Split.TRAIN, Split.VALID, Split.TEST)


def _remove_stale_temps(out: Path) -> None:
    """Remove the temporary files (``.<name>.<random>.part``) that killed runs left in the world's own folders (the
    graphs', the secret runtimes', and those of ``sample_submission.csv`` and ``world.json``); those of a concurrent
    run, still being written, are kept (see :func:`competition.atomic.remove_stale_temps`). Other folders of the data
    root are not looked into."""
    for name in ("sample_submission.csv", MANIFEST):
        remove_stale_temps(out, name)
    for sub in (KAGGLE_SUBDIR, SECRET_SUBDIR):
        for folder, _, _ in os.walk(out / sub):
            remove_stale_temps(folder)


def read_world_config(out: str | os.PathLike[str]) -> WorldConfig:
    """The settings a generated world (or part of one) was made with, from its ``world.json``.

    Raises:
        ValueError: ``out`` holds no readable ``world.json`` (not a generated world), naming the file.
    """
    manifest = Path(out) / MANIFEST
    try:
        config = json_loads(manifest.read_text())["config"]
        config["collections"] = tuple(config["collections"])
        return WorldConfig(**{"tile_limit": None, "generator": 1, **config})
    except FileNotFoundError:
        raise ValueError(f"{manifest}: no such file; {out} is not a generated synthetic world") from None
    except (json.JSONDecodeError, KeyError, TypeError) as e:
        raise ValueError(f"{manifest}: not a world manifest ({type(e).__name__}: {e})") from None


def plan_jobs(cfg: WorldConfig) -> list[GraphJob]:
    """The files of a world, as jobs; ``limit`` (``tile_limit`` for tile) caps graphs per collection and split."""
    sc = SCALES[cfg.scale]
    jobs: list[GraphJob] = []
    for value in cfg.collections:
        counts = sc.tile_counts if value == Collection.TILE_XLA.value else sc.layout_counts[value]
        for split, n in zip(_SPLITS, counts, strict=True):
            cap = cfg.cap(value)
            n = n if cap is None else min(n, cap)
            if value == Collection.TILE_XLA.value:
                per = sc.tile_kernels_per_program
                for j, start in enumerate(range(0, n, per)):
                    jobs.append(GraphJob(value, split.value, j, min(per, n - start)))
            else:
                jobs.extend(GraphJob(value, split.value, i) for i in range(n))
    # Big layout graphs first, so that the pool does not end on one long straggler.
    return sorted(jobs, key=lambda j: j.collection == Collection.TILE_XLA.value)


def _sample_submission(out: Path, cfg: WorldConfig) -> Path:
    """``ID,TopConfigs`` for every test graph: the identity order (tile: the first five)."""
    from competition.npzio import NpzReader

    rows = ["ID,TopConfigs"]
    for value in cfg.collections:
        collection = Collection(value)
        folder = out / KAGGLE_SUBDIR / collection.relpath / Split.TEST.value
        for path in sorted(folder.glob("*.npz")):
            with NpzReader(path) as r:
                n = r.info("config_runtime").shape[0]
            k = min(5, n) if collection.is_tile else n
            rows.append(f"{value}:{path.stem}," + ";".join(map(str, range(k))))
    return atomic_write_text(out / "sample_submission.csv", "\n".join(rows) + "\n")


class WorldMismatch(RuntimeError):
    """The output folder holds a world made with other settings, or data that is not a generated world."""


def _world_paths(out: Path) -> list[Path]:
    """What a world writes at the top of its data root: the folders of every collection's graphs and secret
    runtimes, and the sample submission."""
    return [out / "sample_submission.csv",
            *(out / sub / c.relpath for sub in (KAGGLE_SUBDIR, SECRET_SUBDIR) for c in Collection)]


def _check_foreign(out: Path, force: bool) -> None:
    """Refuse a non-empty ``out`` without ``world.json`` (real or hand-made data): a world would add graphs to it and
    replace its files. With ``force`` a world is written beside what is there, when nothing of it would be replaced.

    Raises:
        WorldMismatch: naming the folder, and with ``force`` the first path a world would replace.
    """
    for name in ("sample_submission.csv", MANIFEST):  # what a run killed while writing them left
        if out.is_dir():
            remove_stale_temps(out, name)
    try:
        with os.scandir(out) as it:
            entries = [e.name for e in it]
    except FileNotFoundError:
        return
    except NotADirectoryError:
        raise WorldMismatch(f"{out} is a file, not a folder: choose another --out") from None
    if not entries:
        return
    if not force:
        raise WorldMismatch(f"{out} is not empty and holds no {MANIFEST}: it is not a synthetic world, and a world "
                            "would add its graphs to what is there and replace its sample_submission.csv. Choose a "
                            "new or empty --out, or pass --force to write a world beside its files (nothing of "
                            "yours is replaced or deleted)")
    taken = [p for p in _world_paths(out) if os.path.lexists(p)]
    if taken:
        raise WorldMismatch(f"{out} holds no {MANIFEST}, and a world would replace {taken[0]}"
                            f"{f' (and {len(taken) - 1} more of its paths)' if len(taken) > 1 else ''}, which "
                            "fastslow did not write: --force never replaces or deletes your files. Choose a new or "
                            "empty --out")


def _read_manifest(manifest: Path) -> dict:
    """``world.json``'s content, or :class:`WorldMismatch` naming it when it cannot be read."""
    try:
        old = json_loads(manifest.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise WorldMismatch(f"{manifest}: not a world manifest ({type(exc).__name__}: {exc}); move it aside or "
                            "choose another --out") from None
    if not isinstance(old, dict):
        raise WorldMismatch(f"{manifest}: not a world manifest (expected a JSON object); move it aside or choose "
                            "another --out")
    return old


def generate_world(
    out: str | os.PathLike[str],
    *,
    scale: str = "demo",
    seed: int = 0,
    collections: Iterable[Collection | str] | None = None,
    limit: int | None = None,
    tile_limit: int | None = None,
    workers: int | None = None,
    force: bool = False,
    progress: bool = True,
    on_written: Callable[[Path], None] | None = None,
    programs: str = "generator",
) -> Path:
    """Generate (or finish generating) a synthetic world.

    Args:
        out: destination folder (the data root: it receives ``npz_all/``, ``secret/``, ``sample_submission.csv``).
        scale: ``tiny``, ``demo`` or ``full`` (see :data:`~competition.synthetic.scales.SCALES`).
        seed: world seed; the same seed and settings give identical bytes.
        collections: collections to generate (default: all five).
        limit: at most this many graphs per collection and split.
        tile_limit: at most this many tile kernels per split (default: ``limit``); a full-scale world part can then
            hold, say, 12 graphs per layout split and 600 tile kernels.
        workers: worker processes (default: one per usable core), at most one per usable core and one per job
            (:func:`competition.workers.worker_count`).
        force: regenerate over a world made with other settings (otherwise that is an error): only the files a world
            writes are removed. Into a non-empty folder that is not a world, write a world beside its files when
            none of them would be replaced (otherwise that is an error, ``force`` or not).
        progress: show a progress bar.
        on_written: called with each file written.
        programs: where the layout programs and the programs tile kernels are cut from come from (see
            :data:`~competition.synthetic.world_programs.PROGRAM_SOURCES`); the runtime physics, searches and
            format are the same for all.

    Returns:
        The data root ``out``.

    Raises:
        WorldMismatch: ``out`` holds a world made with other settings and ``force`` is false, or it is a non-empty
            folder without ``world.json`` (see :func:`_check_foreign`).
    """
    if scale not in SCALES:
        raise ValueError(f"unknown scale {scale!r}; expected one of {', '.join(SCALES)}")
    cols = tuple(Collection.parse(c) if isinstance(c, str) else c for c in (collections or list(Collection)))
    if programs not in PROGRAM_SOURCES:
        raise ValueError(f"unknown program source {programs!r}; expected one of {', '.join(PROGRAM_SOURCES)}")
    for name, value in (("limit", limit), ("tile_limit", tile_limit)):
        if value is not None and value < 1:  # zero graphs: an empty world every later command refuses
            raise ValueError(f"{name}: expected a whole number of at least 1; found {value}")
    if programs == "jax":
        from competition.synthetic.jax_programs import require_jax

        require_jax()
    cfg = WorldConfig(scale, int(seed), tuple(sorted(c.value for c in cols)), limit, tile_limit, programs)
    out = Path(out)
    manifest = out / MANIFEST
    if not manifest.exists():
        _check_foreign(out, force)
    else:
        old = _read_manifest(manifest)
        # Worlds written before tile_limit (or the generator version) existed hold no such key: it was None (1).
        made = {"tile_limit": None, "generator": 1, **(old.get("config") or {})}
        same = made == json.loads(json.dumps(cfg.as_dict()))
        if same and old.get("complete") and _all_present(out, cfg):
            return out
        if not same:
            if not force:
                older = (f" by an older generator (version {made['generator']}; this is {GENERATOR_VERSION})"
                         if made["generator"] != GENERATOR_VERSION else "")
                raise WorldMismatch(
                    f"{out} holds a world made{older} with {old.get('config')}; asked for {cfg.as_dict()}. "
                    "Choose another --out, or pass --force to regenerate it."
                )
            _clear_world(out)
    out.mkdir(parents=True, exist_ok=True)
    _remove_stale_temps(out)
    atomic_write_text(manifest, json.dumps({"config": cfg.as_dict(), "complete": False}, indent=2) + "\n")

    jobs = plan_jobs(cfg)
    total = sum(j.count for j in jobs)
    workers = worker_count(workers, len(jobs))
    bar = tqdm(total=total, desc=f"synth {scale}", unit="graph", disable=not progress)
    try:
        if workers <= 1:
            results: Iterable[list[Path]] = map(write_job, [(out, cfg, j) for j in jobs])
            for job, paths in zip(jobs, results, strict=True):
                _report(bar, job, paths, on_written)
        else:
            with ProcessPoolExecutor(max_workers=workers, mp_context=pool_context(),
                                     initializer=end_with_parent, initargs=(os.getpid(),)) as pool:
                for job, paths in zip(jobs, pool.map(write_job, [(out, cfg, j) for j in jobs]), strict=True):
                    _report(bar, job, paths, on_written)
    finally:
        bar.close()
    _sample_submission(out, cfg)
    atomic_write_text(manifest, json.dumps({"config": cfg.as_dict(), "complete": True}, indent=2) + "\n")
    return out


def _all_present(out: Path, cfg: WorldConfig) -> bool:
    """Whether every collection and split folder holds its planned number of files (a cheap completeness check)."""
    want: dict[tuple[str, str], int] = {}
    for job in plan_jobs(cfg):
        want[(job.collection, job.split)] = want.get((job.collection, job.split), 0) + job.count
    for (value, split), n in want.items():
        folder = out / KAGGLE_SUBDIR / Collection(value).relpath / split
        if len(list(folder.glob("*.npz"))) < n:
            return False
    return (out / "sample_submission.csv").exists()


def _report(bar: tqdm, job: GraphJob, paths: list[Path], on_written: Callable[[Path], None] | None) -> None:
    bar.update(job.count)
    if on_written:
        for p in paths:
            on_written(p)


def _clear_world(out: Path) -> None:
    """Remove the files of the world in ``out``: the graphs with their secret runtimes (each graph's ``.npz`` has a
    twin under ``secret/``; a file without one is not the world's and stays), the sample submission and the
    manifest, then the world's folders left empty. Nothing else of the data root is touched."""
    for c in Collection:
        graphs, secrets = out / KAGGLE_SUBDIR / c.relpath, out / SECRET_SUBDIR / c.relpath
        for split in _SPLITS:
            for path in _npz_files(graphs / split.value):
                twin = secrets / split.value / path.name
                if twin.is_file() and not twin.is_symlink():
                    path.unlink()
                    twin.unlink()
        for top in (graphs, secrets):
            _remove_empty(top, out)
    for name in ("sample_submission.csv", MANIFEST):
        path = out / name
        if path.is_file() and not path.is_symlink():
            path.unlink()


def _npz_files(folder: Path) -> list[Path]:
    try:
        with os.scandir(folder) as it:
            return [folder / e.name for e in it if e.name.endswith(".npz") and e.is_file(follow_symlinks=False)]
    except OSError:
        return []


def _remove_empty(folder: Path, stop: Path) -> None:
    """Remove ``folder``'s empty sub-folders, then ``folder`` and its parents up to ``stop`` while they are empty."""
    if not folder.is_dir() or folder.is_symlink():
        return
    for sub, _, _ in sorted(os.walk(folder), key=lambda t: -len(t[0])):
        try:
            os.rmdir(sub)
        except OSError:
            pass
    for parent in folder.parents:
        if parent == stop or stop not in parent.parents:
            break
        try:
            os.rmdir(parent)
        except OSError:
            break
