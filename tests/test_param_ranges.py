"""Every hyper-parameter has a declared range (or choices) and one line of help: values outside are refused before
any work starts, with the key, the allowed values and the value given; the generated reference
(``docs/parameters.md``, ``fastslow params``) is current."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from fastslow.cli import EXIT_ERROR, EXIT_OK
from fastslow.pipeline import ENSEMBLE
from models import settings as settings_tree
from models.ensemble import Ensemble
from models.params import Param
from models.registry import MODELS, hyper_parameters, parameter_reference
from tests.reliability.helpers import run

DOC = Path(__file__).resolve().parents[1] / "docs" / "parameters.md"


@pytest.mark.parametrize("cls", [*MODELS.values(), Ensemble], ids=lambda c: c.__name__)
def test_every_hyper_parameter_is_a_leaf_of_a_tree(cls: type):
    """A class with hyper-parameters declares them as a settings tree, each leaf with its help; its constructor
    takes the tree or values, not a keyword list of its own."""
    import inspect

    named = [p.name for p in inspect.signature(cls.__init__).parameters.values()
             if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name != "self"]
    assert named == []
    if not hasattr(cls, "CONFIG"):
        assert hyper_parameters(cls) == {}
        return
    leaves = settings_tree.leaves(cls.CONFIG)
    assert leaves and all(leaf.param.help and leaf.param.name == key for key, leaf in leaves.items())
    assert set(hyper_parameters(cls)) == set(leaves)


def test_the_ensembles_name_has_one_value():
    assert ENSEMBLE == Ensemble.name


def test_the_parameter_reference_is_current():
    assert DOC.read_text(encoding="utf-8") == parameter_reference(), (
        "docs/parameters.md is stale: run `fastslow params --markdown > docs/parameters.md`")


@pytest.mark.parametrize(("param", "value", "problem"), [
    (Param("lr", "", low=0, high=1, low_open=True), 0.0, "lr must be > 0 and <= 1; got 0.0"),
    (Param("lr", "", low=0, high=1, low_open=True), 1.0, None),
    (Param("lr", "", low=0, high=1, low_open=True), math.inf, "lr must be > 0 and <= 1; got inf"),
    (Param("lr", "", low=0, high=1, low_open=True), math.nan, "lr must be > 0 and <= 1; got nan"),
    (Param("n", "", low=1, high=64), 0, "n must be 1 to 64; got 0"),
    (Param("n", "", low=1, high=64), 64, None),
    (Param("n", "", low=1, high=64), 65, "n must be 1 to 64; got 65"),
    (Param("hops", "", low=0, choices=("all",)), "all", None),
    (Param("hops", "", low=0, choices=("all",)), "some", "hops must be >= 0 or 'all'; got 'some'"),
    (Param("hops", "", low=0, choices=("all",)), -1, "hops must be >= 0 or 'all'; got -1"),
    (Param("loss", "", choices=("hinge", "listmle")), "mse", "loss must be 'hinge' or 'listmle'; got 'mse'"),
    (Param("size", "", low=1), None, None),
    (Param("flag", ""), True, None),
])
def test_param_problem_by_hand(param: Param, value: object, problem: str | None):
    assert param.problem(value) == problem


@pytest.mark.parametrize(("given", "message"), [
    ("gbdt.learning_rate=0", "learning_rate must be > 0 and <= 1; got 0"),
    ("gbdt.num_leaves=0", "num_leaves must be 2 to 4,096; got 0"),
    ("gbdt.n_estimators=-1", "n_estimators must be 1 to 100,000; got -1"),
    ("gbdt.learning_rate=1e999", "learning_rate must be > 0 and <= 1; got inf"),
    ("gbdt.layout:xla:random.num_leaves=1", "num_leaves must be 2 to 4,096; got 1"),
    ("gnn.hidden=0", "hidden must be 1 to 1,024; got 0"),
    ("gnn.layers=0", "layers must be 1 to 16; got 0"),
    ("gnn.device='x'", "device must be 'auto' (CUDA if available), 'cpu', 'cuda' or 'cuda:N'; got 'x'"),
    ("gnn.epochs=-1", "epochs must be 1 to 100,000; got -1"),
    ("gnn.steps_per_graph=0", "steps_per_graph must be 1 to 100,000; got 0"),
    ("gnn.patience=-1", "train.patience must be 0 to 100,000; got -1"),
    ("gnn.predict_batch=0", "predict.predict_batch must be 1 to 10,000; got 0"),
    ("gnn.lr=1e999", "lr must be > 0 and <= 10; got inf"),
    ("gnn.layout:nlp:random.seeds=0", "seeds must be 1 to 16; got 0"),
    ("ensemble.folds=1", "folds must be 2 to 1,000; got 1"),
    ("gnn.train.lr=0", "GNNModel: train.lr must be > 0 and <= 10; got 0"),
    ("gnn.layout:xla:random.train.steps_per_graph=0", "train.steps_per_graph must be 1 to 100,000; got 0"),
    ("gnn.train.lrr=1", "no setting 'train.lrr'; did you mean 'train.lr'"),
    ("gnn.network.lr=1", "no setting 'network.lr'"),
    ("gbdt.booster.num_leaves=1.5", "GBDTModel: booster.num_leaves takes int, not float 1.5"),
    ("ensemble.combine.method='x'", "combine.method must be 'auto' or 'weighted' or 'best' or 'mean'; got 'x'"),
    ("ensemble.method='best-of'", "method must be 'auto' or 'weighted' or 'best' or 'mean'; got 'best-of'"),
])
def test_bad_values_are_refused_before_any_work(given: str, message: str, tiny_world: Path, tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]):
    out = tmp_path / "subs"
    code, _, err = run(["submit", "--data", tiny_world, "--models", "random", "gbdt", "gnn", "--out-dir", out,
                        "--param", given, "--no-progress"], capsys)
    assert code == EXIT_ERROR and "Traceback" not in err and err.count("\n") == 1, err
    assert given.split("=")[0] in err and message in err
    assert not out.exists()


def test_params_prints_every_model(capsys: pytest.CaptureFixture[str]):
    code, out, _ = run(["params"], capsys)
    assert code == EXIT_OK
    for name in [*MODELS, "ensemble"]:
        assert f"{name}:\n" in out
    code, out, _ = run(["params", "--markdown"], capsys)
    assert code == EXIT_OK and out == parameter_reference()
    code, _, err = run(["params", "nope"], capsys)
    assert code == EXIT_ERROR and "unknown model 'nope'" in err
