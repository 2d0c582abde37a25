"""Competition metrics, per graph, per collection and combined.

Conventions: a *score* array gives one value per config where lower means predicted faster; an *order* lists
config indices fastest first (what a submission row holds); *targets* are what the same configs are ranked by
(:func:`competition.targets.ranking_target`: normalised runtimes for tile, runtimes in ns for layout), lower is faster.

:func:`graph_score` is the competition metric of one graph, and the only one: scoring a submission, early stopping,
the ensemble's weights and the oracle all call it. Given scores, it scores the order a written submission row would
list (:func:`submitted_order`: ties broken by config index, five configs for tile), so a score computed in memory is
the score of the file.

* Layout collections: Kendall tau-b (``scipy.stats.kendalltau``) between the predicted order and the targets.
* Tile: ``2 - min(target of the first k predicted) / min(target of all)`` with k = 5: 1.0 is perfect.
* Diagnostics per graph: OPA (ordered pair accuracy) and the top-k errors for k = 1, 5, 10.
* Final score: the unweighted mean of the five collection scores.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from competition.collections import Collection

if TYPE_CHECKING:
    import polars as pl

# scipy and polars are imported where they are used: every command that checks a file (and the error boundary of
# all of them) imports this module for its constants, and the two together take about a second to import.

TILE_TOP_K = 5
TOP_K_ERRORS = (1, 5, 10)


def predicted_order(scores: npt.ArrayLike) -> npt.NDArray[np.int64]:
    """Config indices fastest first: ascending score, ties broken by index (a stable order).

    Args:
        scores: ``[C]`` predicted scores, lower = faster.

    Returns:
        int64 ``[C]`` permutation of ``range(C)``.
    """
    return np.argsort(np.asarray(scores, dtype=np.float64), kind="stable").astype(np.int64)


def submitted_order(collection: Collection | str, scores: npt.ArrayLike,
                    rows: npt.ArrayLike | None = None) -> npt.NDArray[np.int64]:
    """The order a submission row lists for one graph's scores: :func:`predicted_order` (ties by index), the first
    :data:`TILE_TOP_K` for tile, every config for layout.

    Args:
        collection: the graph's collection, or its kind (``tile`` or ``layout``): the row depends on nothing else.
        scores: ``[C]`` predicted scores, lower = faster.
        rows: the graph's config index of each score (a valid subset, see :mod:`competition.protocol`); ``None``:
            the scores cover every config, and the order holds positions into them.

    Returns:
        int64 ``[m]`` config indices, fastest first (``m = min(5, C)`` for tile, ``C`` for layout).
    """
    order = predicted_order(scores)
    if rows is not None:
        order = np.asarray(rows, dtype=np.int64)[order]
    return order[:TILE_TOP_K] if _is_tile(collection) else order


def _is_tile(collection: Collection | str) -> bool:
    if collection in ("tile", "layout"):
        return collection == "tile"
    return Collection(collection).is_tile


def order_to_ranks(order: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """Position of each config in a full permutation: the inverse of :func:`predicted_order`.

    Args:
        order: int ``[C]`` permutation of ``range(C)``, fastest first.

    Returns:
        float64 ``[C]``: ``ranks[order[i]] = i``, usable as scores (lower = faster).
    """
    order = np.asarray(order, dtype=np.int64)
    if order.ndim != 1 or not np.array_equal(np.sort(order), np.arange(order.size)):
        raise ValueError(f"order must be a permutation of range({order.size}); got {order[:10]}...")
    ranks = np.empty(order.size, dtype=np.float64)
    ranks[order] = np.arange(order.size)
    return ranks


def kendall_tau(scores: npt.ArrayLike, runtimes: npt.ArrayLike) -> float:
    """Kendall tau-b between predicted scores and runtimes (both lower = faster).

    A perfect ranking gives 1.0 and the reversed one -1.0. Degenerate inputs (fewer than two configs, or a
    constant side) give 0.0 rather than NaN, so that averages stay defined.

    Args:
        scores: ``[C]`` predicted scores.
        runtimes: ``[C]`` runtimes.
    """
    s = np.asarray(scores, dtype=np.float64)
    r = np.asarray(runtimes, dtype=np.float64)
    if s.shape != r.shape:
        raise ValueError(f"scores {s.shape} and runtimes {r.shape} differ in shape")
    if s.size < 2:
        return 0.0
    from scipy.stats import kendalltau

    tau = kendalltau(s, r).statistic
    return 0.0 if np.isnan(tau) else float(tau)


def kendall_tau_of_order(order: npt.ArrayLike, runtimes: npt.ArrayLike) -> float:
    """Kendall tau-b of a submitted permutation (int ``[C]``, fastest first) against the runtimes ``[C]``."""
    return kendall_tau(order_to_ranks(order), runtimes)


def _check_runtimes(r: npt.NDArray[np.float64]) -> float:
    if r.size == 0:
        raise ValueError("no configs to score")
    best = float(r.min())
    if not best > 0:
        raise ValueError(f"runtimes must be positive to compute the slowdown; min is {best}")
    return best


def top_k_score(order: npt.ArrayLike, runtimes: npt.ArrayLike, k: int = TILE_TOP_K) -> float:
    """``2 - min(runtimes[order[:k]]) / min(runtimes)``: 1.0 when the best config is among the first k.

    Args:
        order: int ``[m]`` predicted config indices, fastest first (only the first k count).
        runtimes: ``[C]`` positive runtimes.
        k: how many of the first predicted configs count.
    """
    order = np.asarray(order, dtype=np.int64)
    r = np.asarray(runtimes, dtype=np.float64)
    best = _check_runtimes(r)
    if order.size == 0 or k < 1:
        raise ValueError("the order must name at least one config and k must be at least 1")
    return float(2.0 - r[order[:k]].min() / best)


def top_k_error(order: npt.ArrayLike, runtimes: npt.ArrayLike, k: int) -> float:
    """Relative slowdown of the best of the first k predicted configs: ``1 - top_k_score`` (0 is perfect)."""
    return 1.0 - top_k_score(order, runtimes, k)


def graph_score(collection: Collection | str, targets: npt.ArrayLike, *, order: npt.ArrayLike | None = None,
                scores: npt.ArrayLike | None = None, picks: npt.ArrayLike | None = None) -> float:
    """The competition score of one graph: the top-5 tile score, or the layout Kendall tau-b of the whole order.

    Give the submitted ``order``, or the predicted ``scores``: these are scored as the row a submission writes
    for them (:func:`submitted_order`), so ties among scores are broken by config index exactly as in the file.

    Args:
        collection: the graph's collection, or its kind (``tile`` or ``layout``): the metric depends on nothing else.
        targets: ``[C]`` what the configs rank by (:func:`competition.targets.ranking_target`), lower = faster.
        order: int ``[m]`` config indices (positions into ``targets``), fastest first: at least one for tile, a
            permutation of ``range(C)`` for layout.
        scores: ``[C]`` predicted scores, lower = faster.
        picks: layout only: positions into ``targets``, repeats allowed, over which the tau is taken instead of
            over each config once, as the official evaluation takes it over its listed config indices
            (:meth:`~competition.protocol.ValidProtocol.picks`): :func:`kendall_tau` of the order's ranks and the
            targets, both gathered at ``picks``.

    Raises:
        ValueError: both or neither of ``order`` and ``scores``; a layout order that is not a permutation; tile
            targets that are not positive; ``picks`` for tile.
    """
    if (order is None) == (scores is None):
        raise ValueError("give exactly one of order and scores")
    if order is None:
        order = submitted_order(collection, scores)
    if _is_tile(collection):
        if picks is not None:
            raise ValueError("picks apply to layout graphs only: tile graphs are scored on every config")
        return top_k_score(order, targets, TILE_TOP_K)
    if picks is not None:
        p = np.asarray(picks, dtype=np.int64)
        return kendall_tau(order_to_ranks(order)[p], np.asarray(targets, dtype=np.float64)[p])
    return kendall_tau_of_order(order, targets)


# --------------------------------------------------------------------------------------------------------------
# Ordered pair accuracy
# --------------------------------------------------------------------------------------------------------------


def _tied_pairs(*keys: npt.NDArray[np.float64]) -> int:
    """Number of pairs equal on every key (sum of g(g-1)/2 over groups of equal tuples)."""
    _, counts = np.unique(np.stack(keys, axis=1), axis=0, return_counts=True)
    counts = counts.astype(np.int64)
    return int((counts * (counts - 1) // 2).sum())


def _strict_inversions(a: npt.NDArray[np.int64]) -> int:
    """Pairs i < j with ``a[i] > a[j]``, for ``a`` holding ints in ``[0, n)``.

    Bottom-up merge sort, vectorised per level: after a level every block of width ``w`` is sorted, so for each
    element of a right block a searchsorted into its left partner counts the larger left values. Offsetting values
    by ``block pair * n`` keeps every pair of blocks apart in one global sorted array. O(n log^2 n) time, O(n)
    memory: never the n^2 pairs.
    """
    n = a.size
    a = a.astype(np.int64, copy=True)
    idx = np.arange(n, dtype=np.int64)
    total = 0
    w = 1
    while w < n:
        pair = idx // (2 * w)
        keys = pair * n + a
        is_left = (idx // w) % 2 == 0
        left_keys = keys[is_left]
        right_keys = keys[~is_left]
        right_pair = pair[~is_left]
        upper = np.searchsorted(left_keys, right_pair * n + n, side="left")
        le = np.searchsorted(left_keys, right_keys, side="right")
        total += int((upper - le).sum())
        a = np.sort(keys) - pair * n
        w *= 2
    return total


def ordered_pair_accuracy(scores: npt.ArrayLike, runtimes: npt.ArrayLike) -> float:
    """Share of config pairs with different runtimes that the scores order correctly; score ties count half.

    Exact (integer pair counts) in O(C log^2 C) time and O(C) memory, so C = 100,000 is fine.

    Args:
        scores: ``[C]`` predicted scores, lower = faster.
        runtimes: ``[C]`` runtimes.

    Returns:
        A value in [0, 1]; NaN when no pair has different runtimes.
    """
    s = np.asarray(scores, dtype=np.float64)
    r = np.asarray(runtimes, dtype=np.float64)
    if s.shape != r.shape or s.ndim != 1:
        raise ValueError(f"scores {s.shape} and runtimes {r.shape} must be equal-length vectors")
    n = s.size
    pairs = n * (n - 1) // 2
    differing = pairs - _tied_pairs(r) if n else 0
    if differing == 0:
        return math.nan
    # Sorted by runtime, equal runtimes by ascending score: a strict inversion of the score ranks is then exactly
    # a pair with r_i < r_j and s_i > s_j (within a runtime tie the scores never decrease).
    dense = np.unique(s, return_inverse=True)[1].astype(np.int64)
    by_runtime = np.lexsort((s, r))
    wrong = _strict_inversions(dense[by_runtime])
    score_ties_only = _tied_pairs(s) - _tied_pairs(r, s)
    return (differing - wrong - 0.5 * score_ties_only) / differing


def ordered_pair_accuracy_of_order(order: npt.ArrayLike, runtimes: npt.ArrayLike) -> float:
    """:func:`ordered_pair_accuracy` of a full permutation (int ``[C]``, fastest first)."""
    return ordered_pair_accuracy(order_to_ranks(order), runtimes)


# --------------------------------------------------------------------------------------------------------------
# Results
# --------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GraphResult:
    """The score of one graph and diagnostics.

    Attributes:
        id: the submission ID, ``<collection>:<stem>``.
        collection: the graph's collection.
        stem: the npz file stem.
        score: the competition score (Kendall tau-b for layout, tile score for tile).
        num_configs: C.
        opa: ordered pair accuracy; NaN when the order is not a full permutation (tile rows list 5 configs).
        top1_err, top5_err, top10_err: relative slowdown of the best of the first k predicted (0 perfect);
            NaN when the order names fewer than ``min(k, C)`` configs.
    """

    id: str
    collection: Collection
    stem: str
    score: float
    num_configs: int
    opa: float
    top1_err: float
    top5_err: float
    top10_err: float


def score_graph(collection: Collection, order: npt.ArrayLike, targets: npt.ArrayLike, *,
                stem: str = "", picks: npt.ArrayLike | None = None) -> GraphResult:
    """Score one graph from its submitted order: :func:`graph_score` and the diagnostics.

    Args:
        collection: the graph's collection; decides the metric.
        order: int ``[m]`` config indices (positions into ``targets``) fastest first; a full permutation for
            layout, at least ``min(5, C)`` for tile.
        targets: ``[C]`` what the configs rank by (:func:`competition.targets.ranking_target`).
        stem: the graph's file stem, to name it in the result.
        picks: layout only: positions into ``targets`` (repeats allowed) that the score and the diagnostics are
            taken over, as the official evaluation takes them (:func:`graph_score`); ``None``: each config once.

    Returns:
        A :class:`GraphResult`.
    """
    collection = Collection(collection)
    order = np.asarray(order, dtype=np.int64)
    r = np.asarray(targets, dtype=np.float64)
    c = r.size
    full = order.size == c and np.array_equal(np.sort(order), np.arange(c))
    if collection.is_layout and not full:
        raise ValueError(f"{collection.value}:{stem}: a layout order must be a permutation of range({c})")
    score = graph_score(collection, r, order=order, picks=picks)
    if picks is not None:  # the diagnostics over the listed indices too: ranks gathered, then ordered
        p = np.asarray(picks, dtype=np.int64)
        ranks, r = order_to_ranks(order)[p], r[p]
        order = predicted_order(ranks)
        errs = [top_k_error(order, r, k) for k in TOP_K_ERRORS]
        return GraphResult(f"{collection.value}:{stem}", collection, stem, score, c,
                           ordered_pair_accuracy(ranks, r), *errs)
    errs = [top_k_error(order, r, k) if order.size >= min(k, c) else math.nan for k in TOP_K_ERRORS]
    opa = ordered_pair_accuracy_of_order(order, r) if full else math.nan
    return GraphResult(f"{collection.value}:{stem}", collection, stem, score, c, opa, *errs)


@dataclass(frozen=True)
class CollectionResult:
    """Per-graph results of one collection; :attr:`score` is their mean (the collection's competition score)."""

    collection: Collection
    graphs: list[GraphResult] = field(default_factory=list)

    @property
    def score(self) -> float:
        """Mean graph score; NaN when no graph was scored."""
        return float(np.mean([g.score for g in self.graphs])) if self.graphs else math.nan

    def _mean(self, attr: str) -> float:
        values = [getattr(g, attr) for g in self.graphs if not math.isnan(getattr(g, attr))]
        return float(np.mean(values)) if values else math.nan

    @property
    def opa(self) -> float:
        """Mean OPA over the graphs where it is defined."""
        return self._mean("opa")

    def to_frame(self) -> pl.DataFrame:
        """One row per graph, worst score first, so the graphs dragging the score down come first."""
        import polars as pl

        rows = [{**g.__dict__, "collection": g.collection.value} for g in self.graphs]
        schema = {"id": pl.Utf8, "collection": pl.Utf8, "stem": pl.Utf8, "score": pl.Float64,
                  "num_configs": pl.Int64, "opa": pl.Float64, "top1_err": pl.Float64, "top5_err": pl.Float64,
                  "top10_err": pl.Float64}
        return pl.DataFrame(rows, schema=schema).sort("score")


def combined_score(scores: Mapping[Collection, float]) -> float:
    """Unweighted mean of the collection scores given (the final score when all five are there).

    Raises:
        ValueError: no scores, or a NaN among them.
    """
    values = list(scores.values())
    if not values:
        raise ValueError("no collection scores to combine")
    if any(math.isnan(v) for v in values):
        raise ValueError(f"NaN collection score in {dict(scores)}")
    return float(np.mean(values))


@dataclass(frozen=True)
class SubmissionScores:
    """Scores of a submission, per collection.

    Attributes:
        collections: the results of each collection scored, in :class:`Collection` order.
        protocol: which configs were scored (the valid protocol's description); empty for every config.
    """

    collections: dict[Collection, CollectionResult]
    protocol: str = ""

    def scores(self) -> dict[Collection, float]:
        """Score per collection present (collections with no graph left out)."""
        return {c: r.score for c, r in self.collections.items() if r.graphs}

    @property
    def combined(self) -> float:
        """Unweighted mean over the collections present; see :attr:`complete`. NaN when none is present."""
        s = self.scores()
        return combined_score(s) if s else math.nan

    @property
    def complete(self) -> bool:
        """Whether all five collections were scored (only then is :attr:`combined` the final score)."""
        return set(self.scores()) == set(Collection)

    def graphs(self) -> list[GraphResult]:
        """Every graph result, collection by collection."""
        return [g for r in self.collections.values() for g in r.graphs]

    def to_frame(self) -> pl.DataFrame:
        """All graphs of all collections, worst score first within each collection."""
        import polars as pl

        frames = [r.to_frame() for r in self.collections.values()]
        return pl.concat(frames) if frames else CollectionResult(Collection.TILE_XLA).to_frame()

    def format_table(self, oracle: Mapping[Collection, float] | None = None) -> str:
        """A text table: one line per collection (graphs, score, mean OPA, mean top-k errors), then combined.

        Args:
            oracle: optional best achievable score per collection, shown beside each score.
        """

        def f(v: float) -> str:
            return f"{v:8.4f}" if not math.isnan(v) else f"{'-':>8}"

        head = f"{'collection':20s} {'graphs':>6} {'score':>8}"
        head += f" {'oracle':>8}" if oracle is not None else ""
        head += f" {'opa':>8} {'top1err':>8} {'top5err':>8} {'top10err':>8}"
        lines = [head, "-" * len(head)]
        for c, r in self.collections.items():
            line = f"{c.value:20s} {len(r.graphs):6d} {f(r.score)}"
            if oracle is not None:
                line += f" {f(oracle.get(c, math.nan))}"
            line += f" {f(r.opa)} {f(r._mean('top1_err'))} {f(r._mean('top5_err'))} {f(r._mean('top10_err'))}"
            lines.append(line)
        n = len(self.scores())
        note = "" if self.complete else f"  (over {n} of 5 collections: not the final score)"
        comb = f"{'combined':20s} {'':6s} {f(self.combined)}"
        if oracle is not None:
            present = {c: oracle[c] for c in self.scores() if c in oracle and not math.isnan(oracle[c])}
            comb += f" {f(combined_score(present)) if len(present) == n and n else f(math.nan)}"
        lines.append(comb + note)
        if self.protocol:
            lines.append(f"scored on {self.protocol}")
        return "\n".join(lines)
