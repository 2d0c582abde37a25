"""The graph files of a synthetic world: one layout graph or one program's tile graphs written, with their
secret runtimes, where the Kaggle download keeps them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from competition.collections import Collection, Split
from competition.hlo.features import featurize, layout_arrays, tile_arrays
from competition.npzio import StreamedArray, write_npz
from competition.synthetic.layout_physics import OUTPUT_FLIP, LayoutProblem
from competition.synthetic.physics import TILE_BUSY_SHARE, measure, measure_tile
from competition.synthetic.scales import SCALES, Scale, WorldConfig
from competition.synthetic.searches import RANDOM_OUTPUT_FLIP, STALL_SHARE, narrow_search, search_rows
from competition.synthetic.tile_kernels import tile_kernels
from competition.synthetic.tile_physics import TileProblem
from competition.synthetic.world_programs import (
    build_world_program,
    graph_rng,
    hex_stem,
    layout_program,
    loguniform,
)

KAGGLE_SUBDIR = Path("npz_all") / "npz"
SECRET_SUBDIR = Path("secret")
# Configs whose features are computed and written together: bounds the writer's memory to a few blocks.
CONFIG_BLOCK = 512
TILE_REMEASURE_SHARE: float = 0.15
"""Share of tile kernels (of 5 configs or more) whose autotuner measured its default config, and sometimes one
other, again: one or two more rows each."""


@dataclass(frozen=True)
class GraphJob:
    """One file to write (or, for tile, one program whose kernels become several files)."""

    collection: str
    split: str
    index: int
    count: int = 1  # tile: kernels taken from this program


def _paths(out: Path, collection: Collection, split: str, stem: str) -> tuple[Path, Path]:
    rel = Path(collection.relpath) / split / f"{stem}.npz"
    return out / KAGGLE_SUBDIR / rel, out / SECRET_SUBDIR / rel


def write_layout_graph(
    path: Path,
    secret: Path,
    module,
    search: str,
    n_configs: int,
    rng: np.random.Generator,
    *,
    hidden: bool = False,
    duplicates: bool = True,
    stalled: bool = False,
    narrow: bool | None = None,
    flip: float = OUTPUT_FLIP,
    max_config_cells: int | None = None,
) -> None:
    """Write one layout graph of ``module`` with ``n_configs`` configs drawn by ``search``, and its secret file.

    The rows come from :func:`~competition.synthetic.searches.search_rows`: with ``duplicates`` (and not
    ``hidden``) they include the baseline's repeated measurements and, when ``stalled``, the re-measurements of a
    stalled search; otherwise they are all distinct; ``narrow`` is ``search_rows``'s. ``node_config_feat`` is
    computed and compressed block by block, so memory stays at a few blocks however many configs there are.
    ``max_config_cells`` caps configs x configurable nodes (at least 2 configs are kept). With ``hidden`` (test
    files) the visible runtimes are zeros and the measured ones go to ``secret``; the secret file always holds the
    noiseless runtimes (for the oracle score).
    """
    graph = featurize(module)
    problem = LayoutProblem.from_module(module)
    nc = int(problem.node_config_ids.size)
    if max_config_cells is not None:
        n_configs = max(2, min(n_configs, max_config_cells // max(nc, 1)))
    records = duplicates and not hidden
    choices = search_rows(problem, search, n_configs, rng, stalled=stalled and records, baseline=records,
                          narrow=narrow, flip=flip)
    true_ns = np.concatenate(
        [problem.runtime_ns(choices[i : i + CONFIG_BLOCK]) for i in range(0, n_configs, CONFIG_BLOCK)]
    )
    observed = measure(true_ns, rng)
    feats = StreamedArray(
        (n_configs, nc, 18),
        np.dtype(np.float32),
        (problem.config_features(choices[i : i + CONFIG_BLOCK]) for i in range(0, n_configs, CONFIG_BLOCK)),
    )
    arrays = layout_arrays(graph, feats, problem.node_config_ids.astype(np.int64),
                           np.zeros_like(observed) if hidden else observed)
    # The secret file first: a visible file is only ever complete together with its secret.
    write_npz(secret, _secret_arrays(module.name, true_ns, observed if hidden else None))
    write_npz(path, arrays)


def _write_layout(out: Path, cfg: WorldConfig, sc: Scale, job: GraphJob) -> list[Path]:
    collection = Collection(job.collection)
    module, stem = layout_program(cfg, sc, collection.source, job.split, job.index)
    path, secret = _paths(out, collection, job.split, stem)
    if path.exists() and secret.exists():
        return []
    rng = graph_rng(cfg.seed, "layout-configs", job.collection, job.split, job.index)
    stalled = False
    if job.split == Split.TEST:
        n_configs = sc.layout_test_configs + int(rng.random() < sc.layout_test_extra)
    else:
        dist = sc.layout_configs[(collection.source, job.split)]
        n_configs = dist.draw(rng)
        stalled = dist.is_tiny(n_configs) or rng.random() < STALL_SHARE
    search = collection.search or "random"
    write_layout_graph(path, secret, module, search, n_configs, rng,
                       max_config_cells=sc.max_config_cells, stalled=stalled, hidden=job.split == Split.TEST,
                       narrow=search == "default" and narrow_search(cfg.seed, job.collection, job.split, job.index),
                       flip=RANDOM_OUTPUT_FLIP[collection.source])
    return [path]


def _secret_arrays(input_name: str, true_ns: np.ndarray, observed: np.ndarray | None,
                   normalizers: np.ndarray | None = None, true_default_ns: float | None = None) -> dict:
    arrays: dict[str, np.ndarray] = {"input_file": np.asarray(input_name)}
    if observed is not None:
        arrays["config_runtime"] = observed
    if normalizers is not None:
        arrays["config_runtime_normalizers"] = normalizers
    arrays["config_runtime_noiseless"] = true_ns.astype(np.float64)
    if true_default_ns is not None:
        arrays["default_runtime_noiseless"] = np.asarray(true_default_ns, dtype=np.float64)
    return arrays


def write_tile_graph(
    path: Path,
    secret: Path,
    kernel,
    problem: TileProblem,
    n_configs: int,
    rng: np.random.Generator,
    *,
    hidden: bool = False,
    wide: bool = False,
) -> int:
    """Write one tile graph of ``kernel`` with up to ``n_configs`` configs, and its secret file.

    The configs come from ``problem.sample_configs`` (``wide``: the wide search), so a kernel with a small config
    space gives fewer (at least 2 when its space holds 2). With :data:`TILE_REMEASURE_SHARE` (5 configs or more)
    one or two of the rows re-measure the default config (and another config). Runtimes and normalizers (the
    default re-measured beside every row) are measured by :func:`~competition.synthetic.physics.measure_tile`,
    on a busy host for :data:`~competition.synthetic.physics.TILE_BUSY_SHARE` of the kernels. With ``hidden``
    (test files) the visible runtimes are zeros and the normalizers ones; the measured ones go to ``secret``.

    Returns:
        The number of configs written.
    """
    graph = featurize(kernel)
    again = int(rng.integers(1, 3)) if n_configs >= 5 and rng.random() < TILE_REMEASURE_SHARE else 0
    config_feat = problem.sample_configs(n_configs - again, rng, wide=wide).astype(np.float32)
    if again and config_feat.shape[0] >= 5:  # (a kernel with room for fewer configs re-measures none)
        dflt = int(np.nonzero(np.all(config_feat == problem.default_config(), axis=1))[0][0])
        repeat = [dflt, int(rng.integers(config_feat.shape[0]))][:again]
        config_feat = np.concatenate([config_feat, config_feat[repeat]])
        config_feat = config_feat[rng.permutation(config_feat.shape[0])]
    true_ns = problem.runtime_ns(config_feat)
    true_default = float(problem.runtime_ns(problem.default_config()[None, :])[0])
    busy = bool(rng.random() < TILE_BUSY_SHARE)
    observed = measure_tile(true_ns, rng, busy)
    normalizers = measure_tile(np.full(true_ns.shape, true_default), rng, busy)
    arrays = tile_arrays(graph, config_feat, np.zeros_like(observed) if hidden else observed,
                         np.ones_like(normalizers) if hidden else normalizers)
    write_npz(secret, _secret_arrays(
        kernel.name, true_ns, observed if hidden else None, normalizers if hidden else None, true_default))
    write_npz(path, arrays)
    return int(config_feat.shape[0])


def _fit_kernel(order: Sequence[int], k: int, spaces: Sequence[int], n: int, used: set[int]) -> int:
    """The kernel for file ``k`` wanting ``n`` configs: the first in ``order`` from position ``k`` on (cyclically)
    whose config space holds ``n``, one not ``used`` yet by preference; else the one with the largest space."""
    turn = [int(order[(k + j) % len(order)]) for j in range(len(order))]
    fits = [i for i in turn if spaces[i] >= n]
    return next((i for i in fits if i not in used), fits[0] if fits else max(turn, key=lambda i: spaces[i]))


def _write_tile_program(out: Path, cfg: WorldConfig, sc: Scale, job: GraphJob) -> list[Path]:
    collection = Collection.TILE_XLA
    rng = graph_rng(cfg.seed, "tile-program", job.split, job.index)
    module = build_world_program(cfg.programs, "xla", rng, loguniform(rng, *sc.tile_program_nodes))
    # A kernel with a single possible tile config (a scalar output) has nothing to rank: real files have >= 2.
    kernels = [(k, TileProblem.from_kernel(k)) for k in tile_kernels(module, rng)]
    kernels = [(k, p) for k, p in kernels if p.config_space() >= 2]
    if not kernels:
        raise RuntimeError(f"program {module.name} gave no tile kernel with two or more configs")
    # The wide search assigns kernels to all the program's files at once, also when --limit writes only some of
    # them, so that a file does not depend on the limit.
    per = sc.tile_kernels_per_program if sc.tile_wide else job.count
    picks = rng.permutation(len(kernels)) if len(kernels) >= per else rng.integers(0, len(kernels), per)
    krngs = [graph_rng(cfg.seed, "tile-configs", job.split, job.index, k) for k in range(per)]
    signs = [int.from_bytes(krng.bytes(8), "little", signed=True) for krng in krngs]
    wants = [sc.tile_configs.draw(krng) for krng in krngs]
    if sc.tile_wide:
        # The biggest wants choose first, so that they do not all land on the one kernel with room for them.
        spaces = [p.config_space(wide=True) for _, p in kernels]
        chosen: dict[int, int] = {}
        for k in sorted(range(per), key=lambda k: (-wants[k], k)):
            chosen[k] = _fit_kernel(picks, k, spaces, wants[k], set(chosen.values()))
    else:
        chosen = {k: int(picks[k]) for k in range(per)}
    written = []
    for k in range(job.count):
        kernel, problem = kernels[chosen[k]]
        if job.split == Split.TEST:
            stem = hex_stem(cfg.seed, "tile", job.split, job.index, k)
        else:
            stem = f"{module.name}_{'-' if signs[k] < 0 else ''}{abs(signs[k]):x}"
        path, secret = _paths(out, collection, job.split, stem)
        if path.exists() and secret.exists():
            continue
        write_tile_graph(path, secret, kernel, problem, wants[k], krngs[k], hidden=job.split == Split.TEST,
                         wide=sc.tile_wide)
        written.append(path)
    return written


def write_job(args: tuple[Path, WorldConfig, GraphJob]) -> list[Path]:
    """Write one job's files (those not complete yet) into the data root; ``args`` is ``(out, cfg, job)``, one
    argument so that a process pool can map it. Returns the paths of the graph files written."""
    out, cfg, job = args
    sc = SCALES[cfg.scale]
    if job.collection == Collection.TILE_XLA.value:
        return _write_tile_program(out, cfg, sc, job)
    return _write_layout(out, cfg, sc, job)
