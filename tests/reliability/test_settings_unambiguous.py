"""Settings are unambiguous and bounded (issue 50): every way a ``--config`` TOML file nests is bounded before it is
parsed; a setting given twice, one scoped to a collection the run does not fit, index files that name none of the
data's graphs, a seed or a timeout out of range are refused when the command line is read, in one line (exit 2)
naming the option or file, the limit and the value, with control characters escaped, before anything is written."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from competition.collections import Collection
from competition.errors import shown
from competition.limits import MAX_DIST_TIMEOUT, MAX_SEED, MAX_SHOWN_CHARS
from competition.nesting import MAX_TOML_DEPTH, toml_too_deep
from fastslow.cli import EXIT_ERROR, EXIT_OK
from fastslow.commands.params import model_params
from models import settings as settings_tree
from models.ensemble import Ensemble
from models.registry import MODELS
from tests.reliability.helpers import one_line, run, snapshot

DEEP = 5000
"""Far deeper than Python's recursion limit: what ended in a RecursionError's traceback."""

BAD_SEED = 2**64
"""What LightGBM was handed as given, and what failed the GNN's fit only once it had started."""

XD_GRAPH = "tf2_bert_pretrain_dynamic_batch_size_1"
"""A valid graph of the tiny world's layout:xla:default (49 configs)."""


def _train(tiny_world: Path, runs: Path, *extra: object, model: str = "random") -> list[object]:
    return ["train", "--data", tiny_world, "--model", model, "--runs-dir", runs, "--no-progress", *extra]


def _params(*given: str, config: Path | None = None) -> argparse.Namespace:
    return argparse.Namespace(command="train", param=list(given), config=None if config is None else str(config))


@pytest.fixture(scope="module")
def tile_only_world(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A world of tile:xla alone: a run on it fits no layout collection."""
    from competition.synthetic.world import generate_world

    return generate_world(tmp_path_factory.mktemp("tile-only"), scale="tiny", seed=7, limit=1,
                          collections=[Collection.TILE_XLA], workers=1, progress=False)


# 7. TOML nesting: table headers and dotted keys are bounded as arrays and inline tables are

@pytest.mark.parametrize(("text", "what", "deepest", "column"), [
    ("[" + ".".join(["a"] * DEEP) + "]\nx = 1\n", "a table header", DEEP, 2 + 2 * MAX_TOML_DEPTH - 1),
    ("[[" + ".".join(["a"] * DEEP) + "]]\nx = 1\n", "a table header", DEEP + 1, 3 + 2 * (MAX_TOML_DEPTH - 1) - 1),
    (".".join(["a"] * DEEP) + " = 1\n", "a dotted key", DEEP - 1, 2 * MAX_TOML_DEPTH + 2),
    ("x = {" + ".".join(["a"] * DEEP) + " = 1}\n", "a dotted key", DEEP, 5 + 2 * MAX_TOML_DEPTH),
], ids=["header", "array-of-tables", "dotted-key", "dotted-key-in-inline-table"])
def test_a_deep_table_header_or_dotted_key_is_refused_before_parsing(text: str, what: str, deepest: int,
                                                                    column: int, tiny_world: Path, tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]):
    """Issue 50, case 7: 5,000 deep ended in a RecursionError (exit 3)."""
    config = tmp_path / "params.toml"
    config.write_text(text)
    runs = tmp_path / "runs"
    code, _, err = run(_train(tiny_world, runs, "--config", config), capsys)
    assert code == EXIT_ERROR
    assert one_line(err) == (f"error: fastslow train: --config {config}: expected TOML; found invalid TOML (nested "
                             f"{deepest:,} tables, arrays or inline tables deep, deeper than the limit of "
                             f"{MAX_TOML_DEPTH} (MAX_TOML_DEPTH): {what} passes it at line 1, column {column})")
    assert not runs.exists()


def test_every_way_into_toml_nesting_adds_up():
    """Headers, dotted keys (theirs and those inside inline tables), arrays and inline tables are counted as the
    parsed document nests; strings and comments are not."""
    text = '[a."b.c"]\nd.e = [{f.g = [1]}]  # [[[[ {{{{\nh = "[[[[ x.y.z"\n'
    assert toml_too_deep(text, 7) is None  # a, "b.c", d, e's array, its table, f, g's array: 7 deep
    found = toml_too_deep(text, 6)
    assert found is not None and (found.line, found.column, found.what, found.deepest) == (2, 15, "an array", 7)
    found = toml_too_deep(text, 5)
    assert found is not None and (found.line, found.column, found.what) == (2, 10, "a dotted key")
    assert toml_too_deep("[gnn-attn.\"layout:xla:random\".train]\nlr = 3e-3\nk = [1, 2]\n", 4) is None


# Settings given twice

@pytest.mark.parametrize(("given", "message"), [
    (["booster.seed=1", "booster.seed=2"], "--param booster.seed=2: gbdt's booster.seed is given twice, also by "
                                           "--param booster.seed=1; give it once"),
    (["seed=1", "booster.seed=2"], "--param booster.seed=2: gbdt's booster.seed is given twice, also by --param "
                                   "seed=1; give it once"),
    (["gbdt.seed=1", "gbdt.booster.seed=2"], "--param gbdt.booster.seed=2: gbdt's booster.seed is given twice, also "
                                             "by --param gbdt.seed=1; give it once"),
    (["gbdt.tile:xla.seed=1", "tile:xla.booster.seed=2"], None),  # two levels: the model's wins
    (["gbdt.tile:xla.seed=1", "gbdt.tile:xla.booster.seed=2"],
     "--param gbdt.tile:xla.booster.seed=2: gbdt's booster.seed on tile:xla is given twice, also by --param "
     "gbdt.tile:xla.seed=1; give it once"),
])
def test_a_setting_given_twice_is_refused(given: list[str], message: str | None, tiny_world: Path, tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]):
    """The last one won without a word."""
    if message is None:
        params = model_params(_params(*given), ["gbdt"], collections=[Collection.TILE_XLA])
        assert params["gbdt"].per_collection[Collection.TILE_XLA] == {"booster.seed": 1}
        return
    runs = tmp_path / "runs"
    code, _, err = run(_train(tiny_world, runs, "--collections", "tile:xla", *[a for g in given for a in
                                                                              ("--param", g)], model="gbdt"), capsys)
    assert code == EXIT_ERROR
    assert one_line(err) == f"error: fastslow train: {message}"
    assert not runs.exists()


def test_a_setting_given_twice_in_a_config_file_is_refused(tiny_world: Path, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]):
    config = tmp_path / "params.toml"
    config.write_text("[gbdt]\nseed = 1\n[gbdt.booster]\nseed = 2\n")
    runs = tmp_path / "runs"
    code, _, err = run(_train(tiny_world, runs, "--config", config, model="gbdt"), capsys)
    assert code == EXIT_ERROR
    assert one_line(err) == (f"error: fastslow train: {config} [gbdt.booster] seed: gbdt's booster.seed is given "
                             f"twice, also by {config} [gbdt] seed; give it once")
    assert not runs.exists()


@pytest.mark.parametrize("order", [1, -1])
def test_the_more_specific_level_wins_whatever_the_order(order: int, tmp_path: Path):
    """A model's value over one for every model, ``--param`` over ``--config``: the order on the line is no
    longer what decides."""
    params = model_params(_params(*["gbdt.seed=2", "seed=1"][::order]), ["gbdt", "random"])
    assert params["gbdt"].common == {"booster.seed": 2} and params["random"].common == {"scores.seed": 1}
    config = tmp_path / "params.toml"
    config.write_text("[gbdt]\nseed = 3\n")
    params = model_params(_params("seed=4", config=config), ["gbdt"])
    assert params["gbdt"].common == {"booster.seed": 4}


# Settings for a collection the run does not fit

@pytest.mark.parametrize("how", ["param", "config"])
def test_a_setting_for_a_collection_the_run_does_not_fit_is_refused(how: str, tiny_world: Path, tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]):
    """It was taken, and never used."""
    runs = tmp_path / "runs"
    if how == "param":
        given: list[object] = ["--param", "gbdt.layout:nlp:random.seed=3"]
        where = "--param gbdt.layout:nlp:random.seed=3"
    else:
        config = tmp_path / "params.toml"
        config.write_text('[gbdt."layout:nlp:random".booster]\nseed = 3\n')
        given, where = ["--config", config], f'{config} [gbdt."layout:nlp:random".booster] seed'
    code, _, err = run(_train(tiny_world, runs, "--collections", "tile:xla", "layout:xla:default", *given,
                              model="gbdt"), capsys)
    assert code == EXIT_ERROR
    assert one_line(err) == (f"error: fastslow train: {where}: this run fits no layout:nlp:random; it fits tile:xla, "
                             f"layout:xla:default (--collections and the train graphs of {tiny_world})")
    assert not runs.exists()


def test_a_setting_for_a_collection_the_data_lacks_is_refused(tile_only_world: Path, tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]):
    out = tmp_path / "out"
    code, _, err = run(["submit", "--data", tile_only_world, "--models", "random", "--out-dir", out,
                        "--runs-dir", tmp_path / "runs", "--no-progress", "--param",
                        "layout:xla:default.scores.seed=1"], capsys)
    assert code == EXIT_ERROR
    assert one_line(err) == ("error: fastslow submit: --param layout:xla:default.scores.seed=1: this run fits no "
                             f"layout:xla:default; it fits tile:xla (the train graphs of {tile_only_world})")
    assert not out.exists() and not (tmp_path / "runs").exists()


# --valid-indices files that name none of the data's graphs

@pytest.fixture
def foreign_indices(tmp_path: Path) -> Path:
    folder = tmp_path / "indices"
    folder.mkdir()
    (folder / "xla_default.json").write_text(json.dumps({"not_a_graph_of_this_data": [0, 1, 2]}))
    return folder


def _unmatched(folder: Path) -> str:
    return (f"{folder / 'xla_default.json'}: lists 1 graph(s) of layout:xla:default, none of them among the data's "
            "2 valid graph(s) of it (it lists 'not_a_graph_of_this_data'); these index files do not belong to this "
            "data: pass other --valid-indices, leave the option out, or add --force to score every graph they do "
            "not list on --valid-configs")


@pytest.mark.parametrize("command", ["score", "validate", "train", "submit"])
def test_index_files_naming_no_graph_of_the_data_are_refused(command: str, foreign_indices: Path, perfect: Path,
                                                             tiny_world: Path, tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]):
    """Only a note said that every graph fell back to the seeded protocol; the leaderboard row still carried the
    index files' name."""
    out, board = tmp_path / "out", tmp_path / "lb.csv"
    argv: list[object] = {
        "score": ["score", perfect, "--split", "valid", "--leaderboard", board],
        "validate": ["validate", perfect, "--split", "valid"],
        "train": ["train", "--model", "random", "--runs-dir", out],
        "submit": ["submit", "--models", "random", "--out-dir", out, "--runs-dir", tmp_path / "runs"],
    }[command]
    code, _, err = run([*argv, "--data", tiny_world, "--valid-indices", foreign_indices, "--no-progress"][
                       : None if command in ("train", "submit") else -1], capsys)
    assert code == EXIT_ERROR
    assert one_line(err) == f"error: {_unmatched(foreign_indices)}"
    assert not out.exists() and not board.exists()


def test_force_takes_index_files_naming_no_graph_of_the_data(foreign_indices: Path, tiny_world: Path,
                                                             tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    from competition.collections import Split
    from competition.dataroot import find_data_root
    from competition.labels import load_labels
    from competition.protocol import EvalIndices, EvalIndicesError, ValidProtocol

    runs = tmp_path / "runs"
    assert run(["train", "--data", tiny_world, "--model", "default-first", "--runs-dir", runs, "--collections",
                "layout:xla:default", "--valid-indices", foreign_indices, "--force", "--no-progress"],
               capsys)[0] == EXIT_OK
    assert (runs / "default-first" / "layout-xla-default" / "model.json").is_file()
    protocol = ValidProtocol(indices=EvalIndices.load(foreign_indices))
    root = find_data_root(tiny_world)
    with pytest.raises(EvalIndicesError, match="none of them among the data's 2 valid graph"):
        load_labels(root, [Collection.LAYOUT_XLA_DEFAULT], Split.VALID, protocol)
    forced = ValidProtocol(indices=protocol.indices, unmatched_ok=True)
    assert forced == protocol and forced.tag == protocol.tag  # the same protocol: only its check differs
    assert len(load_labels(root, [Collection.LAYOUT_XLA_DEFAULT], Split.VALID, forced)) == 2


def test_index_files_naming_some_graph_of_the_data_are_taken(tiny_world: Path, tmp_path: Path, perfect: Path,
                                                             capsys: pytest.CaptureFixture[str]):
    folder = tmp_path / "indices"
    folder.mkdir()
    (folder / "xla_default.json").write_text(json.dumps({XD_GRAPH: [0, 1, 2], "elsewhere": [0, 1]}))
    code, _, err = run(["validate", perfect, "--data", tiny_world, "--split", "valid", "--valid-indices", folder],
                       capsys)
    assert "none of them" not in err and code in (EXIT_OK, 1)


@pytest.mark.parametrize("command", ["train", "evaluate", "submit", "score", "validate", "report"])
def test_every_command_with_valid_indices_says_what_force_does(command: str, capsys: pytest.CaptureFixture[str]):
    code, out, _ = run([command, "--help"], capsys)
    assert code == EXIT_OK
    assert "--force" in out and "none of the data's valid graphs" in " ".join(out.split())


# Seeds and the distributed timeout, refused as they are parsed

@pytest.mark.parametrize(("model", "key"), [("gbdt", "booster.seed"), ("gnn", "train.seed"),
                                            ("gnn-attn", "train.seed"), ("random", "scores.seed"),
                                            ("ensemble", "fit.seed")])
@pytest.mark.parametrize("value", [BAD_SEED, -1, MAX_SEED + 1])
def test_every_seed_is_range_checked_before_any_work(model: str, key: str, value: int, tiny_world: Path,
                                                     tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                     monkeypatch: pytest.MonkeyPatch):
    """``booster.seed=2**64`` was printed as given and handed to LightGBM; the GNN's failed once its fit began with
    ``Overflow when unpacking long long``."""
    _no_data_opened(monkeypatch)
    out = tmp_path / "out"
    models = ["random", "default-first"] if model == "ensemble" else [model]
    code, _, err = run(["submit", "--data", tiny_world, "--models", *models, "--out-dir", out, "--runs-dir",
                        tmp_path / "runs", "--no-progress", "--param", f"{model}.{key}={value}"], capsys)
    assert code == EXIT_ERROR
    line = one_line(err)
    assert line.startswith(f"error: fastslow submit: --param {model}.{key}={value}: ")
    assert line.endswith(f"{key} must be 0 to {MAX_SEED:,}; got {value}")
    assert not out.exists() and not (tmp_path / "runs").exists()


@pytest.mark.parametrize(("argv", "flag", "value"), [
    (["data", "synth", "--scale", "tiny", "--limit", "1"], "--seed", "-5"),
    (["data", "synth", "--scale", "tiny", "--limit", "1"], "--seed", str(BAD_SEED)),
    (["featurize", "program.hlo"], "--seed", str(MAX_SEED + 1)),
    (["evaluate", "--models", "random"], "--world-seeds", "-5"),
])
def test_a_seed_option_out_of_range_names_the_option(argv: list[str], flag: str, value: str, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]):
    """``--seed -5`` said only ``expected non-negative integer``, once the world's generation had begun."""
    out = tmp_path / "out"
    code, _, err = run([*argv, "--out" if argv[0] != "evaluate" else "--out-dir", out, flag, value], capsys)
    assert code == EXIT_ERROR
    assert one_line(err) == f"error: {flag}: expected a whole number from 0 to {MAX_SEED:,}; found {value!r}"
    assert not out.exists()


@pytest.mark.parametrize("value", ["nan", "-1", "0", "inf", "1e300", "soon"])
def test_a_dist_timeout_that_is_not_a_positive_finite_time_is_refused(value: str, tiny_world: Path, tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]):
    runs = tmp_path / "runs"
    code, _, err = run(_train(tiny_world, runs, "--dist-timeout", value), capsys)
    assert code == EXIT_ERROR
    assert one_line(err) == (f"error: --dist-timeout: expected a number of seconds above 0 and at most "
                             f"{MAX_DIST_TIMEOUT:,}; found {value!r}")
    assert not runs.exists()


# Messages that name what and where

def test_a_seed_of_thousands_of_digits_is_named_not_taken_for_text(tiny_world: Path, tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]):
    runs = tmp_path / "runs"
    digits = "1" * DEEP
    code, _, err = run(_train(tiny_world, runs, "--param", f"train.seed={digits}", model="gnn"), capsys)
    assert code == EXIT_ERROR
    line = one_line(err)
    assert line == (f"error: fastslow train: --param train.seed={digits[:MAX_SHOWN_CHARS - 11]}... "
                    f"({DEEP + 11:,} characters): a number of {DEEP:,} digits; no setting takes one so large "
                    "(`fastslow params` lists their ranges)")
    config = tmp_path / "params.toml"
    config.write_text(f"[gnn.train]\nlr = 0.1\nseed = {digits}\n")
    code, _, err = run(_train(tiny_world, runs, "--config", config, model="gnn"), capsys)
    assert code == EXIT_ERROR
    assert one_line(err) == (f"error: fastslow train: --config {config}: expected TOML; found a number of "
                             f"{DEEP:,} digits at line 3, column 8; no setting takes one so large (`fastslow "
                             "params` lists their ranges)")
    assert not runs.exists()


def test_an_index_of_thousands_of_digits_names_the_file_and_the_line(tiny_world: Path, perfect: Path,
                                                                    tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]):
    """Python's own ``Exceeds the limit (4300 digits) for integer string conversion`` named neither."""
    folder = tmp_path / "indices"
    folder.mkdir()
    (folder / "xla_default.json").write_text(f'{{\n  "{XD_GRAPH}": [0, {"7" * DEEP}]\n}}')
    code, _, err = run(["validate", perfect, "--data", tiny_world, "--split", "valid", "--valid-indices", folder],
                       capsys)
    assert code == EXIT_ERROR
    column = len(f'  "{XD_GRAPH}": [0, ') + 1
    assert one_line(err) == (f"error: {folder / 'xla_default.json'}: expected config indices below 2**62; found a "
                             f"number of {DEEP:,} digits (line 2, column {column})")


def test_a_config_that_is_not_utf8_names_the_file_and_the_byte(tiny_world: Path, tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]):
    """It said "--verbose shows which"."""
    config = tmp_path / "params.toml"
    config.write_bytes(b"[gbdt]\nseed = 1 # \xff\n")
    runs = tmp_path / "runs"
    code, _, err = run(_train(tiny_world, runs, "--config", config, model="gbdt"), capsys)
    assert code == EXIT_ERROR
    assert one_line(err) == (f"error: fastslow train: --config {config}: expected UTF-8 TOML text; found byte 18 "
                             "undecodable (invalid start byte)")
    assert not runs.exists()


HOSTILE = "a\nb\u202e\x1b[31m"
"""A newline, a right-to-left override and an ANSI colour: what forged a line or repainted the terminal."""


@pytest.mark.parametrize("how", ["param", "config"])
def test_control_characters_of_a_key_are_escaped_everywhere_in_the_message(how: str, tiny_world: Path,
                                                                           tmp_path: Path,
                                                                           capsys: pytest.CaptureFixture[str]):
    runs = tmp_path / "runs"
    if how == "param":
        given: list[object] = ["--param", f"{HOSTILE}=1"]
    else:
        config = tmp_path / "params.toml"
        config.write_text(f"{json.dumps(HOSTILE)} = 1\n")
        given = ["--config", config]
    code, _, err = run(_train(tiny_world, runs, *given, model="gbdt"), capsys)
    assert code == EXIT_ERROR
    line = one_line(err)
    assert "\x1b" not in line and "\u202e" not in line
    assert line.count("a\\nb\\u202e\\x1b[31m") == 2  # where it was given, and the key no model takes
    assert not runs.exists()


def test_a_long_value_is_cut_in_the_message():
    assert shown("x" * 1000) == "x" * MAX_SHOWN_CHARS + "... (1,000 characters)"
    assert shown(10**DEEP) == f"a whole number of about {DEEP:,} digits"
    assert shown(HOSTILE) == "a\\nb\\u202e\\x1b[31m"


# Every model's settings are range-checked when they are parsed

def _bad_value(leaf: settings_tree.Leaf) -> object:
    """A value the leaf refuses: below its range, above it, or of no type it takes."""
    p = leaf.param
    integral = "int" in settings_tree.type_text(leaf.hint).split(" or ")
    if p.low is not None:
        below = p.low if p.low_open else p.low - 1
        return int(below) if integral else float(below)
    if p.high is not None:
        return int(p.high) + 1 if integral else float(p.high) * 2
    return [1]


LEAVES = [(name, key, leaf) for name, cls in [*MODELS.items(), ("ensemble", Ensemble)] if hasattr(cls, "CONFIG")
          for key, leaf in settings_tree.leaves(cls.CONFIG).items()]


def _no_data_opened(monkeypatch: pytest.MonkeyPatch) -> None:
    """Opening the data fails the test: a refusal must come before it."""
    from competition.dataset import Dataset

    def opened(*args: object, **kwargs: object) -> None:
        raise AssertionError("the data was opened before the settings were checked")

    monkeypatch.setattr(Dataset, "open", classmethod(opened))


@pytest.mark.parametrize(("model", "key", "leaf"), LEAVES, ids=[f"{m}.{k}" for m, k, _ in LEAVES])
def test_every_setting_of_every_model_is_checked_before_the_data_is_opened(model: str, key: str, leaf: object,
                                                                          tiny_world: Path, tmp_path: Path,
                                                                          capsys: pytest.CaptureFixture[str],
                                                                          monkeypatch: pytest.MonkeyPatch):
    _no_data_opened(monkeypatch)
    value = _bad_value(leaf)  # type: ignore[arg-type]
    out = tmp_path / "out"
    models = ["random", "default-first"] if model == "ensemble" else [model]
    code, _, err = run(["submit", "--data", tiny_world, "--models", *models, "--out-dir", out, "--runs-dir",
                        tmp_path / "runs", "--no-progress", "--param", f"{model}.{key}={value!r}"], capsys)
    assert code == EXIT_ERROR, err
    line = one_line(err)
    assert line.startswith(f"error: fastslow submit: --param {model}.{key}=") and f"{key} " in line
    assert not out.exists() and not (tmp_path / "runs").exists()


def test_a_value_one_collection_refuses_is_refused_before_the_data_is_opened(tiny_world: Path, tmp_path: Path,
                                                                            capsys: pytest.CaptureFixture[str],
                                                                            monkeypatch: pytest.MonkeyPatch):
    """``pair_tolerance`` suits the layout collections' pairwise loss, not the tile kind's ListMLE: that was found
    once the tile collection's fit was set up."""
    _no_data_opened(monkeypatch)
    before = snapshot(tiny_world)
    out = tmp_path / "out"
    code, _, err = run(["submit", "--data", tiny_world, "--models", "gnn", "--out-dir", out, "--no-progress",
                        "--param", "gnn.pair_tolerance=0.1"], capsys)
    assert code == EXIT_ERROR
    assert one_line(err) == ("error: fastslow submit: gnn on tile:xla: pair_tolerance applies to the pairwise "
                             "losses (hinge, margin), not to 'listmle'")
    assert not out.exists() and snapshot(tiny_world) == before
