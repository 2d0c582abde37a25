"""Warm starts (``train.init_from``, ``fastslow train --init-from``): a GNN fit that starts from a saved run's
networks, the source's column selection and normalisation reused; its keys hold the source's content; a source
that cannot start the fit is refused in one line naming it."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from competition.collections import Collection, Split
from competition.dataroot import find_data_root, list_graphs
from competition.dataset import CollectionData, open_collection
from competition.reader import load_graph
from fastslow.cli import EXIT_ERROR
from fastslow.saved_runs import fit_key, save_run
from models import settings as settings_tree
from models.base import MODEL_FILE, load_model
from models.gnn.config import GNNConfig
from models.gnn.model import GNNModel
from models.gnn.runs import run_settings
from models.gnn.warm_start import KEY, source_file
from tests.reliability.helpers import one_line, run

LAYOUT = Collection.LAYOUT_NLP_RANDOM
QUICK = dict(hidden=16, layers=2, device="cpu", seed=0, epochs=2, steps_per_graph=1, configs_per_graph=16)


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tmp_path_factory.mktemp("warm-cache"))


@pytest.fixture(scope="module")
def data(tiny_world: Path) -> CollectionData:
    return open_collection(find_data_root(tiny_world), LAYOUT)


@pytest.fixture(scope="module")
def source(data: CollectionData, cache_dir: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A saved run of ``gnn`` on the tiny world (the "world-fitted" run), as ``fastslow train`` saves one: its
    folder."""
    folder = tmp_path_factory.mktemp("world-runs") / "gnn" / LAYOUT.slug
    model = GNNModel(**QUICK, runs_dir=None, cache_dir=cache_dir).fit(data, progress=False)
    save_run(folder, "gnn", model, data, complete=True)
    return folder


def _fit(data: CollectionData, cache_dir: str, **params: object) -> GNNModel:
    return GNNModel(**{**QUICK, **params}, runs_dir=None, cache_dir=cache_dir).fit(data, progress=False)


def _same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Two weight or transform states hold the same values."""
    return a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


def test_a_warm_start_that_learns_nothing_predicts_what_its_source_does(tiny_world: Path, data: CollectionData,
                                                                        source: Path, cache_dir: str):
    # A learning rate of 1e-30 moves no float32 weight: the fit keeps the weights it started from.
    warm = _fit(data, cache_dir, init_from=str(source), lr=1e-30, epochs=1)
    saved = load_model(source / MODEL_FILE)
    assert isinstance(saved, GNNModel)
    assert _same(warm.columns_, saved.columns_) and _same(warm.normalize_, saved.normalize_)  # reused, not refitted
    root = find_data_root(tiny_world)
    for split in (Split.VALID, Split.TEST):
        for path in list_graphs(root, LAYOUT, split):
            graph = load_graph(path, LAYOUT)
            np.testing.assert_array_equal(warm.predict(graph), saved.predict(graph))


def test_a_warm_start_differs_from_a_fit_from_scratch_and_so_do_its_keys(data: CollectionData, source: Path,
                                                                         cache_dir: str, tmp_path: Path):
    scratch = _fit(data, cache_dir)
    warm = _fit(data, cache_dir, init_from=str(source))
    assert not _same(warm.weights_, scratch.weights_)
    # The run folder's settings (and so the folder a run is moved aside to) and the saved fit's key.
    trained = [settings_tree.from_dict(GNNConfig, m.settings_) for m in (scratch, warm)]
    assert run_settings(trained[0]) != run_settings(trained[1])
    assert trained[0].data_key != trained[1].data_key
    assert trained[1].train.init_from == str(source)
    scratch_key, warm_key = fit_key("gnn", scratch, data), fit_key("gnn", warm, data)
    assert "sources" not in scratch_key and scratch_key != warm_key
    # Other weights at the same path: another key (and, through the data key, another run folder hash).
    copy = tmp_path / "copy.json"
    copy.write_bytes((source / MODEL_FILE).read_bytes())
    before = GNNModel(**QUICK, init_from=str(copy))
    first = fit_key("gnn", before, data)
    doc = json.loads(copy.read_text())
    doc["state"]["weights_"]["head.4.bias"]["__ndarray__"][0] += 1.0
    copy.write_text(json.dumps(doc))
    assert fit_key("gnn", before, data)["sources"] != first["sources"]


def test_network_i_starts_from_the_saved_network_i_mod_n(source: Path):
    saved = load_model(source / MODEL_FILE)
    assert isinstance(saved, GNNModel) and saved.num_networks == 1
    assert _same({k: v.numpy() for k, v in saved.initial_weights(2).items()}, saved.weights_)
    other = {k: v + 1 for k, v in saved.weights_.items()}
    saved.members_ = [{"seed": 1, "weights": other, "best_epoch": 1, "best_metric": 0.0, "history": []}]
    for network, expected in enumerate([saved.weights_, other, saved.weights_]):
        assert _same({k: v.numpy() for k, v in saved.initial_weights(network).items()}, expected)


def test_train_init_from_fine_tunes_a_saved_run(tiny_world: Path, source: Path, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]):
    runs = tmp_path / "runs"
    code, _, err = run(["train", "--data", tiny_world, "--model", "gnn", "--collections", LAYOUT.value,
                        "--runs-dir", runs, "--init-from", source.parent, "--param", "hidden=16",
                        "--param", "layers=2", "--param", "epochs=1", "--param", "lr=1e-3",
                        "--param", f"cache_dir='{tmp_path / 'cache'}'", "--no-progress"], capsys)
    assert code == 0, err
    doc = json.loads((runs / "gnn" / LAYOUT.slug / MODEL_FILE).read_text())
    assert doc["params"][KEY] == str(source.parent)  # a folder of runs: the collection's run within
    assert source_file(str(source.parent), LAYOUT) == source / MODEL_FILE
    assert doc["fit"]["key"]["sources"] == {KEY: hashlib.sha256((source / MODEL_FILE).read_bytes()).hexdigest()}


@pytest.fixture(scope="module")
def gbdt_run(tiny_world: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A saved run of ``gbdt``: a model that is no GNN's."""
    from fastslow.cli import main

    runs = tmp_path_factory.mktemp("gbdt-runs")
    assert main(["train", "--data", str(tiny_world), "--model", "gbdt", "--collections", LAYOUT.value,
                 "--runs-dir", str(runs), "--param", "n_estimators=2", "--no-progress"]) == 0
    return runs / "gbdt" / LAYOUT.slug


def _other_columns(source: Path, folder: Path) -> Path:
    """A copy of ``source``'s model fitted, it says, on graphs of one node feature column more than this fastslow
    computes (as a run of another version could be)."""
    doc = json.loads((source / MODEL_FILE).read_text())
    doc["state"]["columns_"]["num_columns"] += 1
    folder.mkdir()
    (folder / MODEL_FILE).write_text(json.dumps(doc))
    return folder


@pytest.mark.parametrize(("case", "expected"), [
    ("missing", "no such file or folder"),
    ("gbdt", "a saved gbdt model, not a GNN's"),
    ("shape", "its networks' shapes differ from this fit's (network.hidden 16 there, 8 here)"),
    ("kind", "fitted on layout:nlp:random, a layout collection; this fit's tile:xla is tile"),
    ("empty folder", "found a folder with neither"),
    ("columns", "node feature columns after its feature pipeline, and this fit's give"),
])
def test_a_source_that_cannot_start_the_fit_is_refused_in_one_line(case: str, expected: str, tiny_world: Path,
                                                                   source: Path, tmp_path: Path,
                                                                   request: pytest.FixtureRequest,
                                                                   capsys: pytest.CaptureFixture[str]):
    given = {"missing": tmp_path / "nowhere", "gbdt": None, "shape": source, "kind": source,
             "empty folder": tmp_path, "columns": None}[case]
    if case == "gbdt":
        given = request.getfixturevalue("gbdt_run")
    if case == "columns":
        given = _other_columns(source, tmp_path / "other-version")
    collection = Collection.TILE_XLA if case == "kind" else LAYOUT
    runs = tmp_path / "runs"
    code, _, err = run(["train", "--data", tiny_world, "--model", "gnn", "--collections", collection.value,
                        "--runs-dir", runs, "--init-from", given, "--param", f"hidden={8 if case == 'shape' else 16}",
                        "--param", "layers=2", "--param", f"cache_dir='{tmp_path / 'cache'}'", "--no-progress"],
                       capsys)
    line = one_line(err)
    assert code == EXIT_ERROR
    assert line.startswith("error: ") and f"{KEY} {given}" in line and expected in line, line
    # Refused before any graph was read, but for the feature columns, which only the graphs tell.
    assert (tmp_path / "cache").exists() == (case == "columns")
    assert not (runs / "gnn" / collection.slug / MODEL_FILE).exists()


def test_init_from_is_for_the_gnn_models(tiny_world: Path, source: Path, tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]):
    code, _, err = run(["train", "--data", tiny_world, "--model", "gbdt", "--runs-dir", tmp_path,
                        "--init-from", source], capsys)
    assert code == EXIT_ERROR and "--init-from: only the GNN models" in one_line(err)


def test_a_source_in_the_fits_own_run_folder_is_refused(data: CollectionData, source: Path, cache_dir: str):
    runs = source.parent.parent  # the fit would save itself where its source is
    with pytest.raises(ValueError, match=f"{KEY} {source / MODEL_FILE}: the run folder this fit writes to"):
        GNNModel(**QUICK, init_from=str(source), runs_dir=str(runs), cache_dir=cache_dir).fit(data, progress=False)
