"""Hyper-parameters: one place for the GNN defaults, one frozen settings record per run (saved beside it), and
``--param`` / ``--config`` on submit, evaluate and train, checked before any fitting; who picks the early-stopping
graphs."""

from __future__ import annotations

import csv
import inspect
import json
from dataclasses import replace
from pathlib import Path

import pytest
from torch import nn

from competition.collections import Collection, Split
from competition.dataroot import find_data_root
from competition.dataset import open_collection
from fastslow.cli import main
from models import settings as settings_tree
from models.gbdt import GBDTModel
from models.gnn.config import DEFAULTS, GNNConfig
from models.gnn.layers import GNNBlock
from models.gnn.model import GNNAttentionModel, GNNModel
from models.gnn.net import RankNet
from models.gnn.runs import CURVES_CSV, SETTINGS_FILE, run_settings, settings_hash
from models.registry import MODELS, ModelParams, param_problem

LAYOUT = Collection.LAYOUT_NLP_RANDOM
QUICK = dict(hidden=8, layers=2, device="cpu", epochs=1, steps_per_graph=1, configs_per_graph=16)


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tmp_path_factory.mktemp("params-cache"))


# -- one place for the defaults ----------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["tile", "layout"])
def test_gnn_defaults_live_in_one_place(kind: str):
    """A model given nothing trains with DEFAULTS[kind]; the network and its layers have no defaults of their own
    that could disagree, so the net a run builds has exactly the default dropout, width and depth."""
    assert GNNModel().train_config(kind) == DEFAULTS[kind]
    assert GNNAttentionModel().train_config(kind) == DEFAULTS[kind].with_(attention=True)
    for cls in (RankNet, GNNBlock):
        defaulted = [p.name for p in inspect.signature(cls.__init__).parameters.values()
                     if p.default is not inspect.Parameter.empty]
        assert defaulted == [], f"{cls.__name__} has its own defaults for {defaulted}"
    cfg = replace(DEFAULTS[kind], num_features=7)
    net = cfg.make_net()
    assert [m.p for m in net.modules() if isinstance(m, nn.Dropout)] == [cfg.network.dropout] * (cfg.network.layers + 1)
    assert net.hidden == cfg.network.hidden and len(net.blocks) == cfg.network.layers
    assert net.opcode.embedding_dim == cfg.network.opcode_dim


def test_collection_defaults_and_the_quick_settings_that_undo_them(capsys: pytest.CaptureFixture[str]):
    """The xla collections train a seed ensemble (3 networks on xla:default, 2 on xla:random) and xla:random 32 steps per graph
    (COLLECTION_DEFAULTS), the others their kind's one network of 8; a value given wins; the quick settings give the
    xla collections the kind's values back, and the pipeline puts them under what the user gives, for every
    collection or for one."""
    from fastslow.pipeline import with_quick_params
    from models.base import RankingModel
    from models.gnn.config import COLLECTION_PRESETS, default_config, quick_settings

    raised = {Collection.LAYOUT_XLA_DEFAULT: {"run.seeds": 3},
              Collection.LAYOUT_XLA_RANDOM: {"train.steps_per_graph": 32, "run.seeds": 2}}
    quick = {Collection.LAYOUT_XLA_DEFAULT: {"run.seeds": 1},
             Collection.LAYOUT_XLA_RANDOM: {"train.steps_per_graph": 8, "run.seeds": 1}}
    assert COLLECTION_PRESETS == {c.value: v for c, v in raised.items()}
    for c in Collection:
        expected = DEFAULTS[c.kind].with_(**raised.get(c, {}))
        assert default_config(c) == expected and default_config(c.value) == expected
        assert GNNModel().train_config(c) == expected
        assert GNNModel(steps_per_graph=5).train_config(c).train.steps_per_graph == 5
        assert GNNModel(seeds=4).train_config(c).run.seeds == 4
        assert GNNModel().resolved_params(c)["train.steps_per_graph"] == expected.train.steps_per_graph
        assert GNNModel().resolved_params(c)["run.seeds"] == expected.run.seeds
        assert quick_settings(c) == quick.get(c, {})
        assert GNNAttentionModel.quick_params(c) == quick_settings(c) and GBDTModel.quick_params(c) == {}
    assert RankingModel.quick_params(Collection.TILE_XLA) == {}
    assert GNNModel().train_config("layout") == DEFAULTS["layout"]  # a kind: its own defaults
    collections = list(Collection)
    params = with_quick_params("gnn-attn", None, collections, "demo")
    assert params.for_collection(Collection.LAYOUT_XLA_RANDOM) == {"train.steps_per_graph": 8, "run.seeds": 1}
    assert params.for_collection(Collection.LAYOUT_XLA_DEFAULT) == {"run.seeds": 1}
    assert params.for_collection(Collection.LAYOUT_NLP_RANDOM) == {}
    assert capsys.readouterr().out.splitlines() == [
        f"gnn-attn {c.value}: {', '.join(f'{k}={v}' for k, v in quick[c].items())} on the demo world (its quick "
        "settings, so that the run stays short; --param sets them)" for c in collections if c in quick]
    given = ModelParams(common={"network.hidden": 16})
    params = with_quick_params("gnn-attn", given, collections, "demo")
    assert params.for_collection(Collection.LAYOUT_XLA_RANDOM) == {"network.hidden": 16, "train.steps_per_graph": 8,
                                                                   "run.seeds": 1}
    assert params.for_collection(Collection.LAYOUT_NLP_DEFAULT) == {"network.hidden": 16}
    given = ModelParams(common={"network.hidden": 16},
                        per_collection={Collection.LAYOUT_XLA_RANDOM: {"train.steps_per_graph": 2}})
    params = with_quick_params("gnn-attn", given, collections, "demo")
    assert params.for_collection(Collection.LAYOUT_XLA_RANDOM) == {"network.hidden": 16, "train.steps_per_graph": 2,
                                                                   "run.seeds": 1}
    common = with_quick_params("gnn-attn", ModelParams(common={"train.steps_per_graph": 4}), collections, "demo")
    assert common.for_collection(Collection.LAYOUT_XLA_RANDOM) == {"train.steps_per_graph": 4, "run.seeds": 1}
    assert with_quick_params("gbdt", None, collections, "demo") == ModelParams()


def test_one_tree_for_the_settings():
    """The GNN takes a settings tree or settings by name, no keyword list of its own; a setting not given takes the
    collection's default; "all" (a value, not a sentinel) keeps whole graphs and every config."""
    params = inspect.signature(GNNModel.__init__).parameters
    assert [p.kind for p in params.values()] == [inspect.Parameter.POSITIONAL_ONLY,
                                                 inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.VAR_KEYWORD]
    assert GNNModel().get_params() == {} and GNNModel(hidden=8).get_params() == {"network.hidden": 8}
    tree = DEFAULTS["layout"].with_(hidden=8)
    assert GNNModel(tree).train_config("layout") == tree.with_(graphs_per_step=1)
    assert not [p for cls in MODELS.values() for p in inspect.signature(cls.__init__).parameters.values()
                if p.default == "default"]
    assert GNNModel(hops="all", train_configs="all").train_config("layout").max_train_configs is None
    with pytest.raises(ValueError, match="features.hops must be 1 to 5 or 'all'"):
        GNNModel(hops=9)
    with pytest.raises(ValueError, match="train.loss must be 'hinge' or 'listmle' or 'margin'; got 'nope'"):
        GNNModel(loss="nope")
    with pytest.raises(AttributeError):  # frozen: a run's settings are changed with dataclasses.replace only
        DEFAULTS["layout"].train.epochs = 3  # type: ignore[misc]


def test_settings_are_written_beside_the_run_and_name_the_folder_it_moves_to(tiny_world: Path, cache_dir: str,
                                                                            tmp_path: Path):
    root = find_data_root(tiny_world)
    first = GNNModel(**QUICK, runs_dir=str(tmp_path), cache_dir=cache_dir).fit(open_collection(root, LAYOUT),
                                                                               progress=False)
    run = tmp_path / "gnn" / LAYOUT.slug
    saved = json.loads((run / SETTINGS_FILE).read_text())
    # The run's settings: the tree it trained with but for how it ran (where and how fast, test-time orderings);
    # of the run section, the number of networks the model trains
    trained = settings_tree.from_dict(GNNConfig, first.settings_)
    assert saved == run_settings(trained) and saved["run"] == {"seeds": 1} and "tta" not in saved["predict"]
    assert settings_tree.from_dict(GNNConfig, saved) == trained
    assert saved["train"]["epochs"] == 1 and saved["network"]["hidden"] == 8 and saved["num_features"] > 0
    second = GNNModel(**{**QUICK, "epochs": 2}, runs_dir=str(tmp_path), cache_dir=cache_dir).fit(
        open_collection(root, LAYOUT), progress=False)
    assert json.loads((run / SETTINGS_FILE).read_text()) == run_settings(
        settings_tree.from_dict(GNNConfig, second.settings_))
    assert json.loads((run / settings_hash(saved) / SETTINGS_FILE).read_text()) == saved  # moved, not lost


# -- who picks the early-stopping graphs -------------------------------------------------------------------------


def test_the_caller_names_the_early_stopping_split(tiny_world: Path):
    root = find_data_root(tiny_world)
    params = dict(n_estimators=30, num_leaves=7, max_configs_per_graph=100, early_stopping_rounds=1, n_jobs=1)
    default = GBDTModel(**params).fit(open_collection(root, LAYOUT), progress=False)
    named = GBDTModel(**params).fit(open_collection(root, LAYOUT, eval_split=Split.VALID), progress=False)
    unstopped = GBDTModel(**params).fit(open_collection(root, LAYOUT, eval_split=None), progress=False)
    assert named.booster_ == default.booster_  # the default is the valid split, as before
    assert default.best_iteration_ < 30 and unstopped.best_iteration_ == 30


# -- the command line --------------------------------------------------------------------------------------------


def _epochs_run(runs: Path, model: str, c: Collection) -> int:
    with (runs / model / c.slug / CURVES_CSV).open() as f:
        return len(list(csv.DictReader(f)))


def test_submit_params_and_config_change_what_is_trained(tiny_world: Path, tmp_path: Path, cache_dir: str,
                                                         capsys: pytest.CaptureFixture[str]):
    """--config sets [gnn] epochs = 2 and one collection's epochs = 2; --param gnn.epochs=1 beats the config's
    per-model value, not its per-collection one. The runs train that many epochs, and the settings are printed and
    saved beside the run and beside the submission files."""
    runs, out = tmp_path / "runs", tmp_path / "subs"
    config = tmp_path / "params.toml"
    config.write_text(f'[gnn]\nepochs = 2\nhidden = 8\nlayers = 2\nconfigs_per_graph = 16\nsteps_per_graph = 1\n'
                      f'device = "cpu"\ncache_dir = "{cache_dir}"\nruns_dir = "{runs}"\n\n'
                      f'[gnn."{LAYOUT.value}"]\nepochs = 2\n')
    assert main(["submit", "--data", str(tiny_world), "--models", "gnn", "--out-dir", str(out), "--config",
                 str(config), "--param", "gnn.epochs=1", "--no-progress"]) == 0
    printed = capsys.readouterr().out
    for c in Collection:
        epochs = 2 if c == LAYOUT else 1
        assert _epochs_run(runs, "gnn", c) == epochs
        assert json.loads((runs / "gnn" / c.slug / SETTINGS_FILE).read_text())["train"]["epochs"] == epochs
        line = next(s for s in printed.splitlines() if s.startswith(f"gnn {c.value} settings: "))
        assert f"epochs={epochs}," in line and "hidden=8," in line and "dropout=0.0," in line
    beside = json.loads((out / "settings-gnn.json").read_text())
    assert {c: s["train.epochs"] for c, s in beside.items()} == {c.value: 2 if c == LAYOUT else 1 for c in Collection}


def test_evaluate_takes_params_for_every_model_that_has_them(tiny_world: Path, tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]):
    """An unscoped --param goes to every model of the run that takes it (seed: random and gbdt; default-first has
    none); a scoped one to its model only."""
    assert main(["evaluate", "--data", str(tiny_world), "--models", "random", "default-first", "gbdt",
                 "--out-dir", str(tmp_path), "--param", "seed=3", "--param", "gbdt.n_estimators=5",
                 "--param", "gbdt.n_jobs=1", "--no-progress"]) == 0
    printed = capsys.readouterr().out
    assert "random tile:xla settings: scores.seed=3\n" in printed
    assert "default-first tile:xla settings: (none)\n" in printed
    gbdt = json.loads((tmp_path / "settings-gbdt.json").read_text())
    assert set(gbdt) == {c.value for c in Collection}
    assert all(s["booster.seed"] == 3 and s["booster.n_estimators"] == 5 and s["booster.learning_rate"] == 0.05 for s in gbdt.values())


@pytest.mark.parametrize(("args", "config", "expected"), [
    (["--param", "gnn-attn.epochs=abc"], None,
     "--param gnn-attn.epochs=abc: GNNAttentionModel: train.epochs takes int, not the text 'abc'"),
    (["--param", "gbdt.bogus=1"], None, "--param gbdt.bogus=1: GBDTModel: no setting 'bogus'"),
    (["--models", "random", "gbdt", "--param", "epochs=3"], None,
     "--param epochs=3: none of the models of this run (random, gbdt, ensemble) takes 'epochs'"),
    (["--param", "gnn.epochs=1"], None, "--param gnn.epochs=1: 'gnn' is not among the models of this run"),
    (["--param", "gnn-attn.layout:xla:foo.epochs=1"], None, "unknown collection 'layout:xla:foo'"),
    (["--param", "gnn-attn.loss='nope'"], None, "--param gnn-attn.loss='nope': GNNAttentionModel: train.loss must be"),
    (["--param", "gnn-attn.layout:xla:default.hops=9"], None,
     "--param gnn-attn.layout:xla:default.hops=9: GNNAttentionModel: features.hops must be 1 to 5 or 'all'; got 9"),
    (["--param", "ensemble.layout:xla:default.method='best'"], None, "the ensemble takes one value"),
    (["--param", "epochs"], None, "--param expects [MODEL.][COLLECTION.]KEY=VALUE"),
    ([], '[gbdt]\nn_estimators = "many"\n', "[gbdt] n_estimators: GBDTModel: booster.n_estimators takes int, not the text 'many'"),
    ([], '[gnn-attn."layout:xla:default"]\nepochs = 1.5\n', 'epochs: GNNAttentionModel: train.epochs takes int, not float 1.5'),
    ([], "[gbdt\n", "expected TOML; found invalid TOML"),
])
def test_a_wrong_key_or_value_is_refused_before_any_fitting(tiny_world: Path, tmp_path: Path, args: list[str],
                                                            config: str | None, expected: str,
                                                            capsys: pytest.CaptureFixture[str]):
    if config is not None:
        (tmp_path / "params.toml").write_text(config)
        args = [*args, "--config", str(tmp_path / "params.toml")]
    with pytest.raises(SystemExit) as exc:
        main(["submit", "--data", str(tiny_world), "--out-dir", str(tmp_path / "subs"), *args])
    assert exc.value.code == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and expected in err[0]
    assert not (tmp_path / "subs").exists()  # nothing fitted, nothing written


def test_train_and_evaluate_refuse_like_submit(tiny_world: Path, tmp_path: Path):
    with pytest.raises(SystemExit, match=r"--param gnn\.hidden=big: GNNModel: network.hidden takes int"):
        main(["train", "--data", str(tiny_world), "--model", "gnn", "--param", "gnn.hidden=big",
              "--runs-dir", str(tmp_path)])
    with pytest.raises(SystemExit, match="'gnn-attn' is not among the models of this run"):
        main(["train", "--data", str(tiny_world), "--model", "gnn", "--param", "gnn-attn.hidden=8",
              "--runs-dir", str(tmp_path)])
    with pytest.raises(SystemExit, match="GBDTModel: no setting 'epochs'"):
        main(["evaluate", "--data", str(tiny_world), "--models", "gbdt", "--param", "gbdt.epochs=3",
              "--out-dir", str(tmp_path)])


def test_per_collection_values_override_common_ones():
    params = ModelParams({"epochs": 3, "hidden": 8}, {LAYOUT: {"epochs": 20}})
    assert params.for_collection(LAYOUT) == {"epochs": 20, "hidden": 8}
    assert params.for_collection(Collection.TILE_XLA) == {"epochs": 3, "hidden": 8}
    assert param_problem(GNNModel, "hops", "all") is None
    assert param_problem(GNNModel, "hops", "some") is not None
    assert param_problem(GBDTModel, "learning_rate", 1) is None  # an int is a float
    assert param_problem(GBDTModel, "n_estimators", True) is not None  # a bool is not an int


def test_a_tile_network_saved_before_tile_shares_reads_without_them():
    """The tile preset appends the config shares (``features.tile_shares``); a saved tile network's settings that
    lack the key (an earlier version's) read as the tree's default, off, so its 24-column input layer still fits."""
    from models.gnn.config import default_config
    from models.settings import as_dict, from_dict

    cfg = replace(default_config("tile"), num_features=7)
    assert cfg.features.tile_shares
    assert cfg.make_net().config_in[0].in_features == 24 + 8
    saved = as_dict(cfg)
    del saved["features"]["tile_shares"]
    old = from_dict(type(cfg), saved)
    assert not old.features.tile_shares and old.make_net().config_in[0].in_features == 24
