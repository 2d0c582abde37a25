"""Metrics: hand-computed values, OPA against a brute-force reference, result types."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from competition.collections import Collection
from competition.labels import ranking_target
from competition.metrics import (
    CollectionResult,
    SubmissionScores,
    combined_score,
    graph_score,
    kendall_tau,
    kendall_tau_of_order,
    ordered_pair_accuracy,
    ordered_pair_accuracy_of_order,
    predicted_order,
    score_graph,
    submitted_order,
    top_k_error,
    top_k_score,
)


def _opa_brute(scores, runtimes) -> float:
    num = den = 0.0
    for i in range(len(scores)):
        for j in range(len(scores)):
            if runtimes[i] < runtimes[j]:
                den += 1
                num += 1.0 if scores[i] < scores[j] else (0.5 if scores[i] == scores[j] else 0.0)
    return num / den if den else math.nan


def test_predicted_order_is_stable_on_ties():
    assert predicted_order([3.0, 1.0, 1.0, 0.5]).tolist() == [3, 1, 2, 0]


def test_perfect_and_reversed_layout_order():
    r = np.array([30, 10, 20, 40])
    assert kendall_tau_of_order([1, 2, 0, 3], r) == 1.0
    assert kendall_tau_of_order([3, 0, 2, 1], r) == -1.0
    assert kendall_tau_of_order([0, 2, 1], [3, 1, 2]) == -1.0


def test_tau_b_with_tied_runtimes_by_hand():
    # runtimes [1, 1, 2]: of the 3 pairs, (0, 1) is tied in runtime only, the other two decide.
    # tau-b = (P - Q) / sqrt((n0 - n1)(n0 - n2)) with n0 = 3, n1 = 0 (no rank ties), n2 = 1.
    r = [1, 1, 2]
    assert kendall_tau_of_order([0, 1, 2], r) == pytest.approx(2 / math.sqrt(6))
    # order [2, 0, 1] -> ranks [1, 2, 0]: both deciding pairs are discordant.
    assert kendall_tau_of_order([2, 0, 1], r) == pytest.approx(-2 / math.sqrt(6))
    assert kendall_tau([5.0], [1.0]) == 0.0 and kendall_tau([1, 1, 1], [1, 2, 3]) == 0.0


def test_layout_order_must_be_a_permutation():
    with pytest.raises(ValueError, match="permutation"):
        kendall_tau_of_order([0, 0, 1], [1, 2, 3])


def test_tile_best_config_predicted_sixth():
    r = np.array([5, 4, 3, 8, 7, 2, 6])
    order = np.arange(7)  # best (index 5, runtime 2) comes 6th
    assert top_k_score(order, r) == pytest.approx(2 - 3 / 2)
    assert top_k_error(order, r, 1) == pytest.approx(5 / 2 - 1)
    assert top_k_error(order, r, 5) == pytest.approx(0.5)
    assert top_k_error(order, r, 10) == 0.0
    assert top_k_score([5, 0, 1, 2, 3], r) == 1.0


def test_tile_raw_versus_normalised():
    runtimes = np.array([10, 20, 30, 40, 50, 60])
    normalizers = np.array([1, 1, 1, 1, 1, 10])  # normalised: [10, 20, 30, 40, 50, 6]
    order = [5, 4, 3, 2, 1, 0]
    normalised, raw = ranking_target(runtimes, normalizers), ranking_target(runtimes)
    assert graph_score(Collection.TILE_XLA, normalised, order=order) == 1.0
    assert graph_score(Collection.TILE_XLA, raw, order=order) == pytest.approx(2 - 20 / 10)
    g = score_graph(Collection.TILE_XLA, order[:5], normalised, stem="g")
    assert (g.score, g.id, g.num_configs) == (1.0, "tile:xla:g", 6)
    assert math.isnan(g.opa) and math.isnan(g.top10_err), "five indices cannot rank all six configs"
    assert score_graph(Collection.TILE_XLA, order[:5], raw).score == pytest.approx(0.0)


def test_submitted_order_is_the_written_row():
    scores = [0.5, 0.1, 0.5, 0.0, 0.9, 0.2, 0.5]
    assert submitted_order(Collection.TILE_XLA, scores).tolist() == [3, 1, 5, 0, 2]
    assert submitted_order("layout", scores).tolist() == [3, 1, 5, 0, 2, 6, 4]
    assert submitted_order(Collection.LAYOUT_NLP_RANDOM, [2.0, 1.0], rows=[7, 40]).tolist() == [40, 7]


def test_graph_score_layout_ties_by_hand():
    # Scores [1, 1, 2] tie configs 0 and 1; the written row breaks the tie by index: order [0, 1, 2].
    # Against runtimes [2, 1, 3] that order is discordant on (0, 1), concordant on (0, 2) and (1, 2): tau = 1/3,
    # whereas tau-b of the tied scores themselves leaves (0, 1) out: 2 / sqrt(2 * 3).
    scores, runtimes = [1.0, 1.0, 2.0], [2, 1, 3]
    assert graph_score("layout", runtimes, scores=scores) == pytest.approx(1 / 3)
    assert graph_score(Collection.LAYOUT_XLA_DEFAULT, runtimes, order=[0, 1, 2]) == pytest.approx(1 / 3)
    assert kendall_tau(scores, runtimes) == pytest.approx(2 / math.sqrt(6))
    assert graph_score("layout", runtimes, scores=[2.0, 1.0, 2.0]) == pytest.approx(1.0)  # tie (0, 2) kept in order


def test_graph_score_tile_ties_by_hand():
    # Seven configs all scored alike: the row lists 0..4, missing the best (config 6, target 2): 2 - 3 / 2.
    targets = [5.0, 4.0, 3.0, 8.0, 7.0, 6.0, 2.0]
    assert graph_score(Collection.TILE_XLA, targets, scores=np.zeros(7)) == pytest.approx(0.5)
    assert graph_score("tile", targets, scores=[1, 1, 1, 1, 1, 1, 0]) == 1.0
    # Ties among the first five do not matter, only which five are listed.
    assert graph_score("tile", targets, scores=[0, 0, 0, 1, 1, 1, 0]) == 1.0
    with pytest.raises(ValueError, match="exactly one"):
        graph_score("tile", targets)
    with pytest.raises(ValueError, match="exactly one"):
        graph_score("tile", targets, order=[0], scores=np.zeros(7))


def test_opa_by_hand():
    # pairs by runtime: (0,1) score tie -> 0.5, (0,2) and (1,2) right -> 2.5 / 3
    assert ordered_pair_accuracy([0, 0, 1], [1, 2, 3]) == pytest.approx(2.5 / 3)
    assert ordered_pair_accuracy_of_order([2, 1, 0], [1, 2, 3]) == 0.0
    assert math.isnan(ordered_pair_accuracy([1, 2], [5, 5]))


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 4), st.integers(0, 4)), min_size=0, max_size=40))
def test_opa_matches_brute_force_with_ties(pairs):
    s = [p[0] for p in pairs]
    r = [p[1] for p in pairs]
    fast, slow = ordered_pair_accuracy(s, r), _opa_brute(s, r)
    assert (math.isnan(fast) and math.isnan(slow)) or fast == pytest.approx(slow, abs=1e-12)


def test_opa_large_is_fast_and_sane():
    rng = np.random.default_rng(0)
    r = rng.integers(0, 500, 100_000)
    assert ordered_pair_accuracy(r, r) == 1.0
    assert ordered_pair_accuracy(-r, r) == 0.0
    assert 0.45 < ordered_pair_accuracy(rng.random(r.size), r) < 0.55


def test_score_graph_layout_and_result_types():
    r = np.array([3, 1, 2])
    g = score_graph(Collection.LAYOUT_XLA_RANDOM, [1, 2, 0], r, stem="a")
    assert (g.score, g.opa, g.top1_err, g.top5_err, g.top10_err) == (1.0, 1.0, 0.0, 0.0, 0.0)
    bad = score_graph(Collection.LAYOUT_XLA_RANDOM, [0, 1, 2], r, stem="b")  # pairs: 2 discordant, 1 concordant
    assert bad.score == pytest.approx(-1 / 3) and bad.top1_err == pytest.approx(2.0)
    res = CollectionResult(Collection.LAYOUT_XLA_RANDOM, [g, bad])
    assert res.score == pytest.approx((1 - 1 / 3) / 2)
    frame = res.to_frame()
    assert frame["stem"].to_list() == ["b", "a"], "worst graph first"
    report = SubmissionScores({Collection.LAYOUT_XLA_RANDOM: res})
    assert not report.complete and report.combined == pytest.approx(res.score)
    table = report.format_table({Collection.LAYOUT_XLA_RANDOM: 1.0})
    assert "layout:xla:random" in table and "over 1 of 5" in table


def test_combined_is_the_unweighted_mean_of_five():
    values = dict(zip(Collection, [0.9, 0.5, 0.3, 0.2, 0.1], strict=True))
    assert combined_score(values) == pytest.approx(2.0 / 5)
    with pytest.raises(ValueError):
        combined_score({})
    report = SubmissionScores({c: CollectionResult(c, [score_graph(c, [0, 1], [1, 2], stem="x")])
                          for c in Collection})
    assert report.complete and report.combined == 1.0
