"""Which program each graph of a synthetic world is built from, and the seeded generators every draw of a graph
comes from.

Every graph is seeded from ``(seed, collection source, split, index)`` alone (:func:`graph_rng`), so what it draws
does not depend on the order or the number of worker processes.
"""

from __future__ import annotations

import hashlib

import numpy as np

from competition.collections import Split
from competition.hlo.ir import Module
from competition.synthetic.programs import build_program
from competition.synthetic.scales import SCALES, Scale, WorldConfig


def graph_rng(seed: int, *key: str | int) -> np.random.Generator:
    """A generator seeded by ``seed`` and a textual key, independent of generation order."""
    digest = hashlib.sha256("/".join(str(k) for k in key).encode()).digest()
    words = np.frombuffer(digest[:16], dtype=np.uint32).tolist()
    return np.random.default_rng(np.random.SeedSequence([seed, *words]))


def loguniform(rng: np.random.Generator, lo: int, hi: int) -> int:
    """An integer drawn log-uniformly between ``lo`` and ``hi`` (rounded)."""
    return int(round(np.exp(rng.uniform(np.log(lo), np.log(hi)))))


def hex_stem(seed: int, *key: str | int) -> str:
    """The file stem of a test graph: 32 hex digits of ``seed`` and a textual key, as the real test files are
    named."""
    return hashlib.md5(("/".join(str(k) for k in (seed, *key))).encode()).hexdigest()


PROGRAM_SOURCES: tuple[str, ...] = ("generator", "jax")
"""Where a world's programs come from: the generator's own (:mod:`competition.synthetic.programs`), or a zoo of
real JAX models lowered to HLO (:mod:`competition.synthetic.jax_programs`; needs jax)."""


def build_world_program(programs: str, source: str, rng: np.random.Generator, target: int) -> Module:
    """One program of ``source`` (``xla`` or ``nlp``) with about ``target`` nodes, from ``programs``."""
    if programs == "generator":
        return build_program(source, rng, target)
    if programs == "jax":
        from competition.synthetic.jax_programs import build_jax_program

        return build_jax_program(source, rng, target)
    raise ValueError(f"unknown program source {programs!r}; expected one of {', '.join(PROGRAM_SOURCES)}")


def _program_name(source: str, split: str, index: int, module_name: str) -> str:
    # Several programs can draw the same model name; the index keeps stems unique within a split.
    return f"{module_name}_{index}" if split != Split.TEST else module_name


def layout_program(cfg: WorldConfig, sc: Scale, source: str, split: str, index: int):
    """The program behind layout graph ``index`` of ``source``/``split``: shared by default and random."""
    rng = graph_rng(cfg.seed, "layout-program", source, split, index)
    target = loguniform(rng, *sc.layout_nodes)
    module = build_world_program(cfg.programs, source, rng, target)
    if split == Split.TEST:
        stem = hex_stem(cfg.seed, "layout", source, index)
    else:
        stem = _program_name(source, split, index, module.name)
    return module, stem


def layout_module(scale: str, seed: int, source: str, split: str, index: int, programs: str = "generator"
                  ) -> tuple[Module, str]:
    """The program behind layout graph ``index`` of a world's ``source`` (``xla`` or ``nlp``) and split, and the
    stem of its files (both searches share it): what :func:`~competition.synthetic.world.generate_world` built it
    from, for analyses of the world (``LayoutProblem.from_module(module)`` gives its cost tables)."""
    cfg = WorldConfig(scale=scale, seed=seed, collections=(), limit=None, programs=programs)
    return layout_program(cfg, SCALES[scale], source, split, index)
