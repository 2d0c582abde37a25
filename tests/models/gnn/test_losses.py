"""Ranking losses against values worked out by hand on 3-config examples."""

from __future__ import annotations

import math

import pytest
import torch

from models.gnn.losses import LOSSES, get_loss, list_mle, margin_ranking, pairwise_hinge


def t(values: list[float], grad: bool = False) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float32, requires_grad=grad)


def rt(values: list[float]) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float64)


def test_pairwise_hinge_by_hand():
    # runtimes [1, 2, 3]: ordered pairs (0,1), (0,2), (1,2); gap = s_slower - s_faster.
    # scores [0, 0.5, 2]: gaps 0.5, 2, 1.5 -> relu(1-0.5)=0.5, relu(1-2)=0, relu(1-1.5)=0 -> mean 0.5/3 = 1/6.
    loss = pairwise_hinge(t([0.0, 0.5, 2.0]), rt([1, 2, 3]))
    assert float(loss) == pytest.approx(1 / 6)
    # scores [1, 0, 0]: gaps -1, -1, 0 -> 2, 2, 1 -> mean 5/3.
    assert float(pairwise_hinge(t([1.0, 0.0, 0.0]), rt([1, 2, 3]))) == pytest.approx(5 / 3)
    # margin 3, scores [0, 0.5, 2]: 2.5, 1, 1.5 -> mean 5/3.
    assert float(pairwise_hinge(t([0.0, 0.5, 2.0]), rt([1, 2, 3]), margin=3.0)) == pytest.approx(5 / 3)
    # Order of the configs in the arrays does not matter: same example, shuffled.
    assert float(pairwise_hinge(t([2.0, 0.0, 0.5]), rt([3, 1, 2]))) == pytest.approx(1 / 6)


def test_pairwise_hinge_gradient_by_hand():
    # Only pair (0,1) is active: loss = (1 - (s1 - s0)) / 3 -> d/ds0 = 1/3, d/ds1 = -1/3, d/ds2 = 0.
    s = t([0.0, 0.5, 2.0], grad=True)
    pairwise_hinge(s, rt([1, 2, 3])).backward()
    torch.testing.assert_close(s.grad, t([1 / 3, -1 / 3, 0.0]))


def test_pairwise_hinge_well_separated_is_zero():
    # gaps 1, 2, 1 with margin 1: relu(0) = relu(-1) = 0.
    assert float(pairwise_hinge(t([0.0, 1.0, 2.0]), rt([1, 2, 3]))) == 0.0
    assert float(pairwise_hinge(t([-5.0, 10.0, 30.0]), rt([10, 20, 30]))) == 0.0


def test_margin_ranking_by_hand():
    # runtimes [1, e, e^3] -> log r = [0, 1, 3]; margins m_01 = 1, m_02 = 3, m_12 = 2.
    # scores [0, 0.5, 2]: gaps 0.5, 2, 1.5 -> relu(1-0.5)=0.5, relu(3-2)=1, relu(2-1.5)=0.5 -> mean 2/3.
    r = rt([1.0, math.e, math.e**3])
    assert float(margin_ranking(t([0.0, 0.5, 2.0]), r)) == pytest.approx(2 / 3, rel=1e-5)
    # scale 2: margins 2, 6, 4 -> 1.5, 4, 2.5 -> mean 8/3.
    assert float(margin_ranking(t([0.0, 0.5, 2.0]), r, scale=2.0)) == pytest.approx(8 / 3, rel=1e-5)
    # scale 0.5: margins 0.5, 1.5, 1 -> 0, 0, 0.
    assert float(margin_ranking(t([0.0, 0.5, 2.0]), r, scale=0.5)) == pytest.approx(0.0, abs=1e-7)
    # The margin only depends on the runtime ratio: runtimes x 1000 give the same loss.
    assert float(margin_ranking(t([0.0, 0.5, 2.0]), r * 1000)) == pytest.approx(2 / 3, rel=1e-5)


def test_margin_ranking_accepts_integer_runtimes():
    # runtimes [2, 4, 8] (int64): log ratios log 2, log 4, log 2; scores all 0 -> mean (log2 + log4 + log2) / 3.
    loss = margin_ranking(t([0.0, 0.0, 0.0]), torch.tensor([2, 4, 8]))
    assert float(loss) == pytest.approx(4 * math.log(2) / 3, rel=1e-6)


@pytest.mark.parametrize("fn", [pairwise_hinge, margin_ranking])
def test_pairwise_losses_ignore_ties(fn):
    # runtimes [1, 1, e]: the tie (0,1) carries no order; pairs (0,2), (1,2) only.
    # scores [0, 5, 0.5]: gaps 0.5, -4.5. Had the tie counted, either direction would change the mean.
    r = rt([1.0, 1.0, math.e])  # log-gap 1 for both pairs, so margin_ranking's margins equal the hinge's 1
    # relu(1 - 0.5) = 0.5, relu(1 + 4.5) = 5.5 -> mean 3.
    assert float(fn(t([0.0, 5.0, 0.5]), r)) == pytest.approx(3.0, rel=1e-5)


@pytest.mark.parametrize("fn", [pairwise_hinge, margin_ranking, list_mle])
def test_losses_on_all_equal_runtimes_are_zero_with_a_graph(fn):
    s = t([0.3, -1.0, 2.0], grad=True)
    loss = fn(s, rt([5, 5, 5])) if fn is not list_mle else fn(s[:1], rt([5]))
    assert loss.item() == 0.0 and loss.requires_grad
    loss.backward()
    assert s.grad is not None and float(s.grad.abs().sum()) == 0.0


def test_list_mle_by_hand():
    # runtimes [3, 1, 2] -> fastest first: configs 1, 2, 0; utilities u = -scores in that order = [-0.5, -2, 0].
    # loss = ( [log(e^-0.5 + e^-2 + e^0) + 0.5] + [log(e^-2 + e^0) + 2] + [log(e^0) - 0] ) / 3.
    expected = (math.log(math.exp(-0.5) + math.exp(-2) + 1) + 0.5 + math.log(math.exp(-2) + 1) + 2 + 0) / 3
    assert float(list_mle(t([0.0, 0.5, 2.0]), rt([3, 1, 2]))) == pytest.approx(expected, rel=1e-6)


def test_list_mle_prefers_the_right_order():
    # Right order (fastest lowest score) vs reversed: the right one has the smaller loss; both are positive.
    r = rt([1, 2, 3])
    good, bad = float(list_mle(t([0.0, 1.0, 2.0]), r)), float(list_mle(t([2.0, 1.0, 0.0]), r))
    assert 0 < good < bad
    # By hand, good: u = [0, -1, -2]: [log(1 + e^-1 + e^-2) - 0] + [log(e^-1 + e^-2) + 1] + 0, over 3.
    expected = (math.log(1 + math.exp(-1) + math.exp(-2)) + math.log(math.exp(-1) + math.exp(-2)) + 1) / 3
    assert good == pytest.approx(expected, rel=1e-6)
    # Far apart scores in the right order give a loss near 0.
    assert float(list_mle(t([0.0, 50.0, 100.0]), r)) == pytest.approx(0.0, abs=1e-6)


def test_list_mle_breaks_ties_by_position():
    # runtimes [2, 1, 1] -> stable order 1, 2, 0; u = [-s1, -s2, -s0] = [-1, -3, 0].
    expected = (math.log(math.exp(-1) + math.exp(-3) + 1) + 1 + math.log(math.exp(-3) + 1) + 3 + 0) / 3
    assert float(list_mle(t([0.0, 1.0, 3.0]), rt([2, 1, 1]))) == pytest.approx(expected, rel=1e-6)


def test_list_mle_is_stable_for_large_scores():
    loss = list_mle(t([1000.0, -1000.0, 0.0]), rt([1, 2, 3]))
    assert math.isfinite(float(loss))
    # u = [-1000, 1000, 0]: [~1000 + 1000] + [~1000 - 1000] + 0 -> 2000 / 3.
    assert float(loss) == pytest.approx(2000 / 3, rel=1e-6)


def test_get_loss():
    assert get_loss("hinge") is pairwise_hinge
    assert get_loss("listmle") is list_mle
    assert get_loss("margin") is margin_ranking
    assert set(LOSSES) == {"hinge", "listmle", "margin"}
    with pytest.raises(ValueError, match="unknown loss 'mse'.*hinge, listmle, margin"):
        get_loss("mse")


def test_pair_tolerance_by_hand():
    # runtimes [1000, 1000.5, 1003]: with tolerance 1e-3 the pair (0, 1) differs by 0.05% and is a tie; (0, 2) by
    # 0.3% and (1, 2) by about 0.25% stay. Scores [0, 0.5, 2]: gaps 2 and 1.5 -> both met -> loss 0 (without the
    # tolerance, the (0, 1) gap 0.5 gives 0.5 over 3 pairs: 1/6).
    r = rt([1000.0, 1000.5, 1003.0])
    assert float(pairwise_hinge(t([0.0, 0.5, 2.0]), r)) == pytest.approx(1 / 6)
    assert float(pairwise_hinge(t([0.0, 0.5, 2.0]), r, tolerance=1e-3)) == 0.0
    # scores [1, 0, 0]: the kept pairs' gaps -1 and 0 -> relu 2 and 1 -> mean 3/2.
    assert float(pairwise_hinge(t([1.0, 0.0, 0.0]), r, tolerance=1e-3)) == pytest.approx(3 / 2)
    # margin ranking keeps the same two pairs: margins log(1003/1000) and log(1003/1000.5), gaps 2 and 1.5 -> 0.
    assert float(margin_ranking(t([0.0, 0.5, 2.0]), r, tolerance=1e-3)) == 0.0
    # Every pair within the tolerance: a zero loss that still has a gradient graph.
    s = t([0.0, 1.0, 2.0], grad=True)
    loss = pairwise_hinge(s, rt([1000.0, 1000.2, 1000.4]), tolerance=1e-3)
    loss.backward()
    assert float(loss.detach()) == 0.0 and s.grad is not None


def test_loss_function_tolerance():
    from models.gnn.losses import loss_function

    assert loss_function("hinge") is pairwise_hinge and loss_function("listmle", 0.0) is list_mle
    fn = loss_function("hinge", 1e-3)
    r = rt([1000.0, 1000.5, 1003.0])
    assert float(fn(t([1.0, 0.0, 0.0]), r)) == pytest.approx(3 / 2)
    with pytest.raises(ValueError, match="pairwise losses"):
        loss_function("listmle", 1e-3)
    for bad in (-1e-3, math.nan, math.inf):
        with pytest.raises(ValueError, match="finite fraction"):
            loss_function("hinge", bad)


def test_pair_tolerance_setting():
    from models.gnn.config import default_config
    from models.gnn.model import GNNModel

    assert default_config("layout").train.pair_tolerance == 0.0
    assert GNNModel(pair_tolerance=1e-3).train_config("layout").train.pair_tolerance == 1e-3
    with pytest.raises(ValueError, match="pairwise losses"):
        default_config("tile").with_(pair_tolerance=1e-3)  # tile's loss is ListMLE


def test_pair_tolerance_reaches_training(tiny_world, tmp_path):
    """A tolerance wider than any runtime gap of the tiny world (every pair a tie) leaves every training step a
    zero loss; without it the same fit's losses are positive."""
    from competition.collections import Collection
    from competition.dataroot import find_data_root
    from competition.dataset import open_collection
    from models.gnn.model import GNNModel

    quick = dict(hidden=8, layers=1, device="cpu", epochs=1, steps_per_graph=1, configs_per_graph=8,
                 runs_dir=None, cache_dir=str(tmp_path))
    data = open_collection(find_data_root(tiny_world), Collection.LAYOUT_XLA_DEFAULT)
    ties = GNNModel(**quick, pair_tolerance=1e9).fit(data, progress=False)
    plain = GNNModel(**quick).fit(data, progress=False)
    assert ties.settings_["train"]["pair_tolerance"] == 1e9
    assert [h["train_loss"] for h in ties.history_] == [0.0]
    assert plain.history_[0]["train_loss"] > 0.0
