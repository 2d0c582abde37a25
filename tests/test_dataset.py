"""competition.dataset: each collection's splits listed once, the graphs read lazily, and models fitted on it that
never list a folder nor see the data root."""

from __future__ import annotations

import importlib
import inspect
import pickle
import typing
from contextlib import contextmanager
from pathlib import Path

import pytest

import competition.dataroot as dataroot_module
import competition.dataset as dataset_module
from competition.collections import Collection, Split
from competition.dataroot import DataRoot, find_data_root
from competition.dataset import CollectionData, Dataset, SplitGraphs, open_collection, open_split
from competition.protocol import DEFAULT_PROTOCOL, ValidProtocol
from competition.reader import LayoutGraph, TileGraph
from tests.test_reader import layout_arrays, tile_arrays, write

NLP = Collection.LAYOUT_NLP_DEFAULT
TILE = Collection.TILE_XLA


@pytest.fixture
def root(tmp_path: Path) -> DataRoot:
    """nlp:default with train a, b, valid v and test t; tile with train k only; xla:default with a valid graph only
    (no train graphs: not a collection the dataset fits)."""
    for stem in ("b", "a"):
        write(tmp_path, NLP, layout_arrays(), stem=stem, split="train")
    write(tmp_path, NLP, layout_arrays(c=4), stem="v", split="valid")
    write(tmp_path, NLP, {**layout_arrays(c=3), "config_runtime": layout_arrays(c=3)["config_runtime"] * 0},
          stem="t", split="test")
    write(tmp_path, TILE, tile_arrays(), stem="k", split="train")
    write(tmp_path, Collection.LAYOUT_XLA_DEFAULT, layout_arrays(), stem="x", split="valid")
    return find_data_root(tmp_path)


@pytest.fixture
def listings(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Collection, Split]]:
    """Every folder listed (:func:`competition.dataroot.list_graphs`), in order."""
    calls: list[tuple[Collection, Split]] = []
    real = dataroot_module.list_graphs

    def counting(root: DataRoot, collection: Collection, split: Split) -> list[Path]:
        calls.append((Collection(collection), Split(split)))
        return real(root, collection, split)

    monkeypatch.setattr(dataroot_module, "list_graphs", counting)
    return calls


# -- opening -----------------------------------------------------------------------------------------------------


def test_open_lists_each_split_of_each_collection_once(root: DataRoot, listings: list) -> None:
    data = Dataset.open(root)
    assert sorted(listings) == sorted((c, s) for c in Collection for s in Split)  # once each, nothing more
    assert data.collections == [TILE, NLP]  # with train graphs, in collection order
    listings.clear()
    nlp = data[NLP]
    _ = (nlp.train.paths, nlp.valid.stems, nlp.test.stems, len(nlp.train), nlp.train[0], list(nlp.valid))
    assert listings == []  # the parts hold their listings


def test_the_right_splits_in_each_part(root: DataRoot) -> None:
    nlp = Dataset.open(root)[NLP]
    assert all(isinstance(p, SplitGraphs) for p in (nlp.train, nlp.eval, nlp.valid, nlp.test))
    assert (nlp.collection, nlp.train.split, nlp.valid.split, nlp.test.split) == (NLP, Split.TRAIN, Split.VALID,
                                                                                  Split.TEST)
    assert (nlp.train.stems, nlp.valid.stems, nlp.test.stems) == (["a", "b"], ["v"], ["t"])
    assert nlp.eval is nlp.valid and nlp.predicted == (nlp.valid, nlp.test)
    assert nlp.train.paths == tuple(root.collection_dir(NLP, Split.TRAIN) / f"{s}.npz" for s in "ab")
    assert nlp.train.folder == root.collection_dir(NLP, Split.TRAIN)
    tile = Dataset.open(root)[TILE]
    assert (tile.train.stems, len(tile.valid), len(tile.test)) == (["k"], 0, 0)
    assert tile.eval is not None and len(tile.eval) == 0  # asked for, but empty: no early stopping
    with pytest.raises(KeyError, match="layout:xla:default"):
        Dataset.open(root)[Collection.LAYOUT_XLA_DEFAULT]


def test_only_the_collections_asked_for(root: DataRoot, listings: list) -> None:
    data = Dataset.open(root, [NLP, Collection.LAYOUT_XLA_DEFAULT])
    assert data.collections == [NLP] and len(data) == 1 and [d.collection for d in data] == [NLP]
    assert {c for c, _ in listings} == {NLP, Collection.LAYOUT_XLA_DEFAULT}
    assert Dataset.open(root).subset([NLP, TILE]).collections == [NLP, TILE]


def test_no_eval_split(root: DataRoot) -> None:
    assert open_collection(root, NLP, eval_split=None).eval is None
    assert open_collection(root, NLP, eval_split=Split.TRAIN).eval is None  # the graphs learnt from: none
    assert all(d.eval is None for d in Dataset.open(root, eval_split=None))
    test = open_collection(root, NLP, eval_split=Split.TEST)
    assert test.eval is not None and test.eval.split == Split.TEST


def test_the_protocol_is_carried(root: DataRoot) -> None:
    protocol = ValidProtocol(20, seed=3)
    assert open_collection(root, NLP).protocol == DEFAULT_PROTOCOL
    assert open_collection(root, NLP, protocol=protocol).protocol is protocol
    assert all(d.protocol is protocol for d in Dataset.open(root, protocol=protocol))


def test_graphs_are_read_when_asked_for(root: DataRoot, monkeypatch: pytest.MonkeyPatch) -> None:
    reads: list[Path] = []
    real = dataset_module.load_graph

    def counting(path: Path, collection: Collection | None = None) -> LayoutGraph | TileGraph:
        reads.append(Path(path))
        return real(path, collection)

    monkeypatch.setattr(dataset_module, "load_graph", counting)
    train = open_split(root, NLP, Split.TRAIN)
    assert reads == []
    first = train[0]
    assert isinstance(first, LayoutGraph) and first.stem == "a" and first.collection == NLP and reads == [
        train.paths[0]]
    assert [g.stem for g in train] == ["a", "b"] and len(reads) == 3  # one file at a time, nothing kept
    assert isinstance(open_split(root, TILE, "train")[0], TileGraph)
    with pytest.raises(IndexError):
        train[2]


def test_header_rows_subset_and_the_cache_keys(root: DataRoot) -> None:
    train = open_split(root, NLP, Split.TRAIN)
    assert train.header_rows("config_runtime") == [g.num_configs for g in train] == [5, 5]
    assert train.header_rows("node_opcode") == [6, 6]
    one = train.subset([1])
    assert one.stems == ["b"] and (one.collection, one.split, one.folder) == (NLP, Split.TRAIN, train.folder)
    assert train.data_id == str(root.root)
    assert train.relpath(train.paths[0]) == "npz_all/npz/layout/nlp/default/train/a.npz"
    assert "_root" not in repr(train) and "DataRoot" not in repr(train)  # private: not in the repr


def test_a_part_holds_one_collection(root: DataRoot) -> None:
    nlp, tile = open_collection(root, NLP), open_collection(root, TILE)
    with pytest.raises(ValueError, match="graphs of layout:nlp:default expected; found tile:xla"):
        CollectionData(NLP, nlp.train, tile.valid, nlp.valid, nlp.test)


def test_a_part_pickles(root: DataRoot) -> None:
    """Concurrent fits get their collection's data in another process."""
    nlp = open_collection(root, NLP, protocol=ValidProtocol(30, seed=2))
    again = pickle.loads(pickle.dumps(nlp))
    assert again == nlp and again.train.data_id == nlp.train.data_id and again.train[1].stem == "b"


def test_empty_and_missing_folders(tmp_path: Path) -> None:
    write(tmp_path, TILE, tile_arrays(), stem="k", split="train")
    root = find_data_root(tmp_path)
    data = open_collection(root, TILE)
    assert (len(data.train), len(data.valid), len(data.test)) == (1, 0, 0)
    assert list(data.valid) == [] and data.valid.stems == [] and data.valid.header_rows("config_runtime") == []
    assert Dataset.open(root, [NLP]).collections == []


# -- what models see ---------------------------------------------------------------------------------------------


def test_no_model_takes_a_data_root() -> None:
    """Every registered model's fit takes a CollectionData and keyword options, nothing that names a root; no model
    module lists a folder."""
    from models.base import RankingModel
    from models.registry import MODELS

    for cls in [RankingModel, *MODELS.values()]:
        params = list(inspect.signature(cls.fit).parameters.values())
        assert [p.name for p in params[:2]] == ["self", "data"], cls
        assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in params[2:]), cls
        hints = typing.get_type_hints(cls.fit)
        assert hints["data"] is CollectionData, cls
        assert DataRoot not in [a for h in hints.values() for a in (h, *typing.get_args(h))], cls
        assert not {"root", "collection", "split", "eval_split", "valid"} & {p.name for p in params}, cls
    for name in ("models.base", "models.baselines", "models.gbdt", "models.gnn.model"):
        source = inspect.getsource(importlib.import_module(name))
        assert "list_graphs" not in source and "DataRoot" not in source, name


def test_fitting_lists_no_folder(tiny_world: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Once the data is open, fitting every kind of model (early stopping on valid, the GNN's cache built) lists
    nothing."""
    from models.registry import make_model

    data = Dataset.open(find_data_root(tiny_world), [TILE, Collection.LAYOUT_NLP_RANDOM])

    def refuse(*args: object, **kw: object) -> list[Path]:
        raise AssertionError("a folder listed while fitting")

    monkeypatch.setattr(dataroot_module, "list_graphs", refuse)
    gnn = {"epochs": 1, "hidden": 8, "seeds": 1, "steps_per_graph": 1, "runs_dir": None,
           "cache_dir": str(tmp_path / "cache"), "device": "cpu"}
    for part in data:
        for name, params in (("random", {}), ("default-first", {}), ("gbdt", {"n_estimators": 5, "n_jobs": 1}),
                             ("gnn", gnn)):
            model = make_model(name, **params)
            assert model.fit(part, progress=False) is model and model.collection_ == part.collection


# -- the shared orchestration ------------------------------------------------------------------------------------


def test_fit_collections_holds_saves_then_predicts(tiny_world: Path) -> None:
    from competition.collections import submission_id
    from fastslow.fitting import fit_collections

    data = Dataset.open(find_data_root(tiny_world), [TILE, NLP])
    events: list[str] = []

    @contextmanager
    def holding(c: Collection):
        events.append(f"hold {c.value}")
        yield
        events.append(f"free {c.value}")

    def after_fit(c: Collection, model: object) -> None:
        events.append(f"fitted {c.value}")

    fits = []
    for fit in fit_collections("random", data, splits=(Split.VALID,), progress=False, say=events.append,
                               holding=holding, after_fit=after_fit):
        events.append(f"yielded {fit.collection.value}")
        fits.append(fit)
    assert [e for e in events if not e.startswith("random ")] == [
        f"{what} {c.value}" for c in (TILE, NLP) for what in ("hold", "fitted", "free", "yielded")]
    assert "random tile:xla settings: scores.seed=0" in events
    for fit in fits:
        assert list(fit.predictions) == [Split.VALID] and fit.model is not None and fit.seconds >= 0
        assert list(fit.predictions[Split.VALID]) == [submission_id(fit.collection, s)
                                                      for s in data[fit.collection].valid.stems]
    # Shared out: this process predicts the even graphs and is given the rest by the gather; a process that is
    # given nothing keeps no predictions.
    every = fits[1].predictions[Split.VALID]
    ids = list(every)

    def gather(mine: dict) -> list[dict]:
        assert list(mine) == ids[0::2]
        return [{k: every[k] for k in ids[1::2]}, mine]

    shared = next(iter(fit_collections("random", data.subset([NLP]), splits=(Split.VALID,), progress=False,
                                       say=lambda _: None, shard=lambda idx: list(idx)[0::2], gather=gather)))
    assert list(shared.predictions[Split.VALID]) == ids
    silent = next(iter(fit_collections("random", data.subset([NLP]), progress=False, say=lambda _: None,
                                       gather=lambda mine: None)))
    assert silent.predictions == {}


def test_predict_graphs_scores_the_chosen_graphs_on_the_protocols_configs(tiny_world: Path) -> None:
    import numpy as np

    from competition.collections import submission_id
    from fastslow.fitting import predict_graphs
    from models.registry import make_model

    part = Dataset.open(find_data_root(tiny_world), [NLP])[NLP]
    model = make_model("random").fit(part, progress=False)
    valid = part.valid
    every = predict_graphs("random", model, part, Split.VALID)
    assert list(every) == [submission_id(NLP, s) for s in valid.stems]
    for i, stem in enumerate(valid.stems):  # a valid layout graph: the protocol's configs, in its order
        chosen = part.protocol.select(valid[i], NLP, Split.VALID)
        np.testing.assert_array_equal(every[submission_id(NLP, stem)], model.predict(chosen))
    last = len(valid) - 1
    assert list(predict_graphs("random", model, part, Split.VALID, [last])) == [submission_id(NLP, valid.stems[last])]
    test = predict_graphs("random", model, part, Split.TEST)
    assert [len(v) for v in test.values()] == [part.test[i].num_configs for i in range(len(part.test))]

    class NaNModel:
        def predict(self, graph: object) -> np.ndarray:
            return np.full(graph.num_configs, np.nan)  # type: ignore[attr-defined]

    with pytest.raises(ValueError, match=f"nan-model on {NLP.value}, graph {submission_id(NLP, valid.stems[0])}"):
        predict_graphs("nan-model", NaNModel(), part, Split.VALID)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="valid and test splits; got 'train'"):
        predict_graphs("random", model, part, Split.TRAIN)


def test_train_and_submit_fit_through_the_same_function(tiny_world: Path, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    import fastslow.fitting as fitting
    import fastslow.pipeline as pipeline
    from fastslow.cli import main

    monkeypatch.chdir(tmp_path)
    called: list[tuple[str, list[Collection]]] = []
    real = fitting.fit_collections

    def spy(model_name: str, data: Dataset, **kw: typing.Any) -> typing.Iterator[fitting.CollectionFit]:
        called.append((model_name, data.collections))
        return real(model_name, data, **kw)

    monkeypatch.setattr(fitting, "fit_collections", spy)
    assert main(["train", "--data", str(tiny_world), "--model", "random", "--collections", "tile:xla",
                 "--runs-dir", str(tmp_path / "runs"), "--no-progress"]) == 0
    assert called == [("random", [TILE])]
    pipeline.run_pipeline(tiny_world, models=["random"], out_dir=tmp_path / "out", progress=False, jobs=1)
    assert called[1:] == [("random", list(Collection))]


def test_a_pipeline_run_lists_each_folder_once(tiny_world: Path, tmp_path: Path, listings: list) -> None:
    """``run_pipeline`` opens the data once (:func:`fastslow.pipeline.open_data`): the checks, the dataset, the
    valid and test labels and the submission's validation all take its listing; no folder is listed twice."""
    from fastslow.pipeline import run_pipeline

    run_pipeline(tiny_world, models=["random", "default-first"], out_dir=tmp_path / "out", progress=False, jobs=1)
    assert sorted(listings) == sorted((c, s) for c in Collection for s in Split)
