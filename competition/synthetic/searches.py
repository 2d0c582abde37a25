"""How a world's layout searches record their measurements: the configs each search draws, and the duplicated
configs a search measures again.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from competition.synthetic.layout_physics import OUTPUT_FLIP, LayoutProblem
from competition.synthetic.world_programs import graph_rng

# How searches record their measurements, which is where duplicated configs come from (real figures in
# shared/spec/real-sizes.md: most graphs hold one group of about 40 identical configs, under 1% of the rows; a few
# are dominated by duplicates; re-measured tile configs exist).
BASELINE_REPEATS: tuple[int, int] = (20, 60)
"""A layout search measures its baseline, the compiler default, this many times (uniform, both ends included)..."""
BASELINE_MAX_SHARE: float = 0.009
"""...but in at most this share of its rows (none in a graph of under 1/0.009 = 112 configs)."""
STALL_SHARE: float = 0.06
"""Share of train/valid layout searches that stall: after a few distinct configs their proposals land on configs
already measured, which they measure again (tiny graphs of a few dozen configs always have)."""
STALL_DISTINCT: tuple[float, float] = (4e-4, 0.4)
"""A stalled search's distinct configs, as a share of its rows: log-uniform in this range (60-99.96% duplicates)."""
DEFAULT_NARROW_SHARE: float = 0.1
"""Share of ``default`` searches that stay near the default: every step picks a layout that changes at most one of
a node's tensors and no output layout, so their configs differ by near-ties that only noise orders (a real search
spans 1.6%). One graph in ``1 / share`` of each default collection's split, at an offset drawn per world
(:func:`narrow_search`), so that every split of 10 graphs or more holds one..."""
RANDOM_OUTPUT_FLIP: dict[str, float] = {"xla": OUTPUT_FLIP, "nlp": 1 / 5}
"""Per program source, the share of groups whose compiler output layout a ``random`` search leaves. xla's is the
real alexnet graph's (about 1 in 12, so that half of its configs tie within noise); the strongest teams rank the
real nlp:random graphs at a valid tau of 0.96, which leaves no room for such a plateau of near-ties, so the nlp
search leaves output layouts more often (the least share whose oracle reaches 0.96 on the demo world)."""
DEFAULT_EXPLORE: tuple[float, float] = (0.02, 0.2)
"""...the others let a step go anywhere in the node's search space with a probability drawn uniformly from this
range (:meth:`LayoutProblem.sample_configs`, ``explore``)."""


def narrow_search(seed: int, collection: str, split: str, index: int) -> bool:
    """Whether layout graph ``index`` of a world's ``default`` collection and split stays near the default
    (:data:`DEFAULT_NARROW_SHARE`): every ``1 / share``-th graph of the split, from an offset drawn per world."""
    period = max(1, round(1 / DEFAULT_NARROW_SHARE))
    offset = int(graph_rng(seed, "narrow-search", collection, split).integers(period))
    return (index - offset) % period == 0


def search_rows(problem: LayoutProblem, search: str, n: int, rng: np.random.Generator, *,
                stalled: bool = False, baseline: bool = True, narrow: bool | None = None,
                flip: float = OUTPUT_FLIP) -> npt.NDArray[np.int32]:
    """The ``n`` config rows a layout search records, duplicates included, in random order.

    Distinct configs as the search draws them (:meth:`LayoutProblem.sample_distinct`; a ``default`` search stays
    near the default when ``narrow``, drawn with probability :data:`DEFAULT_NARROW_SHARE` when ``None``, else
    explores with a probability drawn from :data:`DEFAULT_EXPLORE`; a ``random`` search leaves a group's output
    layout with probability ``flip``), plus what it measures more than once: with ``baseline``, a group of
    :data:`BASELINE_REPEATS` rows of the compiler default (all choices 0) in at most :data:`BASELINE_MAX_SHARE` of
    the rows; when ``stalled``, only a :data:`STALL_DISTINCT` share (at
    least 2) of distinct configs. Rows beyond the distinct ones (a stalled search, or one whose reachable configs
    are fewer than ``n``) re-measure distinct configs, the faster ones more often (weight 1 / rank of the noiseless
    runtime: a tuner re-evaluates its best candidates).
    """
    group = 0
    if baseline:
        group = min(int(rng.integers(BASELINE_REPEATS[0], BASELINE_REPEATS[1] + 1)), int(n * BASELINE_MAX_SHARE))
    want = n - group
    if stalled:
        lo, hi = STALL_DISTINCT
        want = min(want, max(2, int(round(n * float(np.exp(rng.uniform(np.log(lo), np.log(hi))))))))
    if narrow is None:
        narrow = search == "default" and bool(rng.random() < DEFAULT_NARROW_SHARE)
    explore = 0.0
    if search == "default" and not narrow:
        explore = float(rng.uniform(*DEFAULT_EXPLORE))
    rows = problem.sample_distinct(search, want, rng, explore=explore, flip=flip)
    if rows.shape[0] == n:
        return rows  # in the search's own (random) order
    if rows.shape[0] + group < n and rows.shape[0]:
        rank = np.argsort(np.argsort(problem.runtime_ns(rows), kind="stable"), kind="stable")
        weight = 1.0 / (1.0 + rank)
        again = rng.choice(rows.shape[0], size=n - group - rows.shape[0], p=weight / weight.sum())
        rows = np.concatenate([rows, rows[again]])
    rows = np.concatenate([rows, np.zeros((n - rows.shape[0], rows.shape[1]), dtype=rows.dtype)])
    return rows[rng.permutation(n)]
