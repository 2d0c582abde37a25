"""``competition/layout_structure.py``: the figures of a hand-made graph whose answers are known, and of the real
graph, whose figures docs/synthetic.md quotes."""

from __future__ import annotations

import numpy as np
import pytest

from competition.layout_structure import structure
from competition.real_layout import restore_arrays


def _graph() -> tuple[np.ndarray, np.ndarray]:
    """Three nodes over all 8 configs of two choices each: nodes 0 and 1 always agree (one group); node 0's output
    choice costs 50% of the best, node 2's kernel choice 0.1%; node 2's input slot never changes."""
    feat, runtime = [], []
    for a in (0, 1):
        for c in (0, 1):
            for repeat in (0, 1):  # node 2's kernel choice; each config measured twice, the mean is kept
                row = np.full((3, 18), -1.0, dtype=np.float32)
                row[0, 0] = row[1, 0] = a
                row[2, 12] = c
                feat.append(row)
                runtime.append(1000.0 * (1 + 0.5 * a + 0.001 * c) + (1 if repeat else -1))
    return np.stack(feat), np.asarray(runtime)


def test_a_hand_made_graph_has_the_figures_it_was_built_with():
    s = structure(*_graph())
    assert (s.nodes, s.configs, s.groups) == (3, 4, 2)
    assert s.additive == pytest.approx(1.0) and s.tau_add == pytest.approx(1.0)
    assert s.top == pytest.approx(0.5 / 1.0) and s.second == pytest.approx(0.001)
    assert s.above_1pct == 1
    assert s.within_02 == pytest.approx(0.5) and s.within_5 == pytest.approx(0.5)
    assert s.output < 1.0  # node 2's kernel choice is no output layout


def test_the_real_graph_is_additive_with_five_groups_that_matter():
    arrays = restore_arrays()
    s = structure(arrays["node_config_feat"], arrays["config_runtime"])  # a seeded sample of 6,000 configs
    assert (s.nodes, s.configs, s.groups, s.above_1pct) == (26, 6000, 9, 5)
    assert s.additive > 0.99999 and s.output > 0.99999
    assert s.top == pytest.approx(4.39, abs=0.01) and s.second == pytest.approx(1.31, abs=0.01)
    assert s.within_02 == pytest.approx(0.43, abs=0.01) and s.p90 == pytest.approx(2.31, abs=0.01)
    assert 0.80 < s.tau_add < 0.90
