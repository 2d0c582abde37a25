"""Decisions on more than one world: evaluate models on several synthetic worlds (one per world seed) and report,
per collection, the mean and the spread over the worlds, beside the oracle and the percentage of the oracle.

One world holds a handful of valid and test graphs per collection, so a difference between two models on it is often
within what another world seed would give. :func:`evaluate_worlds` generates (or reuses) one world per seed,
runs :func:`fastslow.pipeline.evaluate_models` on each, and :func:`summarize` folds the per-world reports into
one table per split::

    fastslow evaluate --world-seeds 0 1 --scale bench --models gbdt gnn-attn

The spread is the standard deviation over the worlds (``ddof=1``: with two worlds, ``|a - b| / sqrt 2``). The
percentage of the oracle is taken per world, then averaged: each world's ceiling differs.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from competition.collections import Collection, Split
from competition.protocol import DEFAULT_PROTOCOL, ValidProtocol

if TYPE_CHECKING:
    from fastslow.pipeline import Evaluation
    from models.registry import ModelParams

DEFAULT_WORLDS_DIR = Path("data")


def world_dir(scale: str, seed: int, base: str | Path = DEFAULT_WORLDS_DIR) -> Path:
    """Where the world of one scale and seed lives: ``data/synthetic-<scale>`` for seed 0 (the world ``make submit``
    and the docs use), ``data/synthetic-<scale>-seed<k>`` for the others."""
    return Path(base) / (f"synthetic-{scale}" if seed == 0 else f"synthetic-{scale}-seed{seed}")


@dataclass(frozen=True)
class Cell:
    """One model on one collection (or ``None`` for combined) of one split, over the worlds."""

    values: tuple[float, ...]
    oracle: tuple[float, ...]

    @property
    def mean(self) -> float:
        return float(np.mean(self.values))

    @property
    def spread(self) -> float:
        """Standard deviation over the worlds (``ddof=1``); NaN for one world."""
        return float(np.std(self.values, ddof=1)) if len(self.values) > 1 else math.nan

    @property
    def of_oracle(self) -> float:
        """Mean over the worlds of score / oracle, in percent; NaN without an oracle."""
        if len(self.oracle) != len(self.values):
            return math.nan
        return float(np.mean([100.0 * v / o for v, o in zip(self.values, self.oracle, strict=True)]))


@dataclass(frozen=True)
class Summary:
    """Per split, model and collection (``None``: combined), the :class:`Cell` over the worlds."""

    seeds: tuple[int, ...]
    cells: dict[Split, dict[str, dict[Collection | None, Cell]]]

    def format(self, split: Split) -> str:
        """A text table: one row per collection and combined; per model the mean, the spread and % of oracle."""
        models = self.cells[split]
        rows = [c for c in (*Collection, None) if any(c in m for m in models.values())]
        width = 22
        head = f"{'collection':20s}" + "".join(f"{name:>{width}s}" for name in models) + f"{'oracle':>9s}"
        lines = [head, "-" * len(head)]
        for c in rows:
            cells = ""
            oracle = math.nan
            for m in models.values():
                cell = m.get(c)
                if cell is None:
                    cells += f"{'-':>{width}s}"
                    continue
                pct = f" {cell.of_oracle:3.0f}%" if not math.isnan(cell.of_oracle) else ""
                spread = f"±{cell.spread:.3f}" if not math.isnan(cell.spread) else ""
                cells += f"{f'{cell.mean:.4f}{spread}{pct}':>{width}s}"
                if cell.oracle:
                    oracle = float(np.mean(cell.oracle))
            orc = f"{oracle:9.4f}" if not math.isnan(oracle) else f"{'-':>9s}"
            lines.append(f"{c.value if c is not None else 'combined':20s}{cells}{orc}")
        return "\n".join(lines)


def summarize(evaluations: Mapping[int, Evaluation]) -> Summary:
    """Fold the evaluations of several worlds (by seed) into one :class:`Summary`.

    A model, split or collection missing from any world is left out of that cell (every world must have it).
    """
    seeds = tuple(evaluations)
    if not seeds:
        raise ValueError("no world evaluated")
    first = evaluations[seeds[0]]
    cells: dict[Split, dict[str, dict[Collection | None, Cell]]] = {}
    for split, reports in first.reports.items():
        per_model: dict[str, dict[Collection | None, Cell]] = {}
        for name in reports:
            runs = [evaluations[s].reports.get(split, {}).get(name) for s in seeds]
            if any(r is None for r in runs):
                continue
            oracles = [evaluations[s].oracle.get(split) for s in seeds]
            row: dict[Collection | None, Cell] = {}
            for c in Collection:
                if not all(c in r.scores() for r in runs):  # type: ignore[union-attr]
                    continue
                values = tuple(r.scores()[c] for r in runs)  # type: ignore[union-attr]
                orc = tuple(o[c] for o in oracles if o and c in o)
                row[c] = Cell(values, orc if len(orc) == len(values) else ())
            present = list(row)
            if present:
                combined = tuple(float(np.mean([row[c].values[k] for c in present])) for k in range(len(seeds)))
                orc_ok = all(row[c].oracle for c in present)
                orc = tuple(float(np.mean([row[c].oracle[k] for c in present])) for k in range(len(seeds))) \
                    if orc_ok else ()
                row[None] = Cell(combined, orc)
            per_model[name] = row
        cells[split] = per_model
    return Summary(seeds, cells)


def check_seeds(seeds: Sequence[int]) -> None:
    """Raise ``ValueError`` unless ``seeds`` is one or more world seeds, none given twice."""
    if not seeds:
        raise ValueError("--world-seeds: give at least one world seed")
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"--world-seeds: a seed is given twice ({' '.join(map(str, seeds))})")


def evaluate_worlds(
    seeds: Sequence[int],
    *,
    scale: str = "bench",
    models: Sequence[str] | None = None,
    worlds_dir: str | Path = DEFAULT_WORLDS_DIR,
    out_dir: str | Path = "submissions",
    progress: bool = True,
    protocol: ValidProtocol = DEFAULT_PROTOCOL,
    params: Mapping[str, ModelParams] | None = None,
    jobs: int | None = None,
) -> Summary:
    """Generate (or reuse) the world of each seed at ``scale``, evaluate the models on each (predictions under
    ``out_dir/<scale>-seed<k>/``), print each world's tables, then the summary over the worlds; return it.

    Raises:
        ValueError: no seeds, or the same seed twice.
    """
    from competition.synthetic.world import generate_world
    from fastslow.pipeline import evaluate_models

    check_seeds(seeds)
    evaluations: dict[int, Evaluation] = {}
    for k, seed in enumerate(seeds, 1):
        path = world_dir(scale, seed, worlds_dir)
        print(f"\n=== world {k}/{len(seeds)}: {scale} scale, seed {seed} ({path}) ===", flush=True)
        generate_world(path, scale=scale, seed=seed, progress=progress, force=True)  # fastslow's own folder
        evaluations[seed] = evaluate_models(path, models=models, out_dir=Path(out_dir) / f"{scale}-seed{seed}",
                                            progress=progress, protocol=protocol, params=params, jobs=jobs)
    summary = summarize(evaluations)
    for split in summary.cells:
        print(f"\n{split.value} split over {len(seeds)} {scale} worlds (seeds {' '.join(map(str, seeds))}): "
              "mean ± standard deviation over the worlds, % of the oracle")
        print(summary.format(split))
    return summary
