"""``fastslow predict`` ranks with saved runs, without fitting; ``fastslow submit`` saves its fits and reuses a
finished one with the same settings and data."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from competition.collections import Collection, Split
from competition.dataroot import find_data_root, list_graphs
from competition.dataset import open_collection
from competition.errors import DataFileError
from competition.reader import load_graph
from fastslow.fitting import fit_collection
from fastslow.inference import Combination, predict_targets, split_targets
from models.registry import make_model
from tests.reliability.helpers import one_line, run

TILE = Collection.TILE_XLA
XLA_DEFAULT = Collection.LAYOUT_XLA_DEFAULT
QUICK_GNN = dict(hidden=8, layers=2, device="cpu", seed=0, epochs=2, steps_per_graph=1, configs_per_graph=16)
FITTED = {"gbdt": {"n_jobs": 1}, "gnn": QUICK_GNN, "default-first": {}, "random": {}}
"""One LightGBM thread: two spin against each other and any other load on a small machine, many times slower."""


def _quiet(_: str) -> None:
    pass


@pytest.fixture(scope="module")
def fitted(tiny_world: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    """A runs folder with every model of :data:`FITTED` fitted on tile:xla and layout:xla:default (as the pipeline
    fits and saves them), and the fitted models themselves."""
    runs = tmp_path_factory.mktemp("fitted") / "runs"
    cache = runs.parent / "cache"
    root = find_data_root(tiny_world)
    models = {}
    for name, params in FITTED.items():
        extra = {"runs_dir": str(runs), "cache_dir": str(cache)} if name == "gnn" else {}
        for c in (TILE, XLA_DEFAULT):
            fit = fit_collection(name, make_model(name, **params, **extra), open_collection(root, c), splits=(),
                                 progress=False, say=_quiet, runs_dir=runs)
            models[name, c] = fit.model
    return runs, models


def _copy(runs: Path, tmp_path: Path) -> Path:
    out = tmp_path / "runs"
    shutil.copytree(runs, out)
    return out


def test_predict_gives_the_scores_of_the_fitted_models(fitted, tiny_world: Path):
    runs, models = fitted
    root = find_data_root(tiny_world)
    for split in (Split.TEST, Split.VALID):
        targets = [t for t in split_targets(root, split) if t.collection in (TILE, XLA_DEFAULT)]
        for name in FITTED:
            got = predict_targets(targets, Combination([name], None, ""), runs, progress=False, say=_quiet)
            assert sorted(got) == sorted(t.sid for t in targets)
            for t in targets:
                expected = models[name, t.collection].predict(load_graph(t.path, t.collection))
                assert np.array_equal(got[t.sid], expected), (name, t.sid)


def _submit(world: Path, out: Path, runs: Path, *extra: str) -> list[object]:
    return ["submit", "--data", world, "--models", "random", "gbdt", "--out-dir", out, "--runs-dir", runs, "--jobs",
            "1", "--param", "gbdt.n_jobs=1", "--no-progress", *extra]


def test_the_submission_of_predict_is_the_submission_of_submit(tiny_world: Path, tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]):
    out, runs = tmp_path / "subs", tmp_path / "runs"
    code, _, err = run(_submit(tiny_world, out, runs), capsys)
    assert code == 0, err
    assert json.loads((out / "submission.json").read_text())["producer"] == "ensemble"
    predicted = tmp_path / "predicted.csv"
    code, text, err = run(["predict", "--data", tiny_world, "--runs-dir", runs, "--submissions", out, "--out",
                           predicted, "--no-progress"], capsys)
    assert code == 0 and err == ""
    assert predicted.read_bytes() == (out / "submission.csv").read_bytes()
    lines = text.splitlines()
    assert lines[0].startswith(f"as {out / 'submission.csv'} was made: the ensemble of random, gbdt; combined by "
                               f"{out / 'ensemble.json'} (")
    assert lines[-1].startswith(f"wrote {predicted}: a submission of 10 test graphs, valid against "
                                f"{find_data_root(tiny_world).sample_submission} (")
    # Without the ensemble submit fitted: a plain mean of the models' rank-normalised scores, said.
    code, text, err = run(["predict", "--data", tiny_world, "--runs-dir", runs, "--submissions", tmp_path / "none",
                           "--models", "random", "gbdt", "--out", tmp_path / "mean.csv", "--no-progress"], capsys)
    assert code == 0 and err == ""
    assert text.splitlines()[0] == (f"models named: random, gbdt; no {tmp_path / 'none' / 'ensemble.json'}: combined "
                                    "by a plain mean of their rank-normalised scores")
    # A model without a run.
    code, text, err = run(["predict", "--data", tiny_world, "--runs-dir", runs, "--models", "gbdt", "default-first",
                           "--out", tmp_path / "p2.csv", "--no-progress"], capsys)
    assert code == 2 and not (tmp_path / "p2.csv").exists()
    assert one_line(err) == (f"error: no saved run of default-first for tile:xla: no {runs}/default-first/tile-xla/"
                             f"model.json; fit one with `fastslow train --model default-first --collections tile:xla "
                             f"--runs-dir {runs}` or `fastslow submit --runs-dir {runs}`, or give --runs-dir")


def test_submit_reuses_its_finished_runs_and_writes_the_same_bytes(tiny_world: Path, tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]):
    out, runs = tmp_path / "subs", tmp_path / "runs"
    code, first, err = run(_submit(tiny_world, out, runs), capsys)
    assert code == 0, err
    assert ": reused the finished run" not in first
    files = ("submission.csv", "valid-random.csv", "valid-gbdt.csv", "valid-ensemble.csv", "ensemble.json",
             "settings-gbdt.json")
    before = {n: (out / n).read_bytes() for n in files}
    code, second, err = run(_submit(tiny_world, out, runs), capsys)
    assert code == 0, err
    reused = [line for line in second.splitlines() if ": reused the finished run" in line]
    assert reused == [f"{m} {c.value}: reused the finished run in {runs / m / c.slug} (same settings and data)"
                      for m in ("random", "gbdt") for c in Collection]
    assert {n: (out / n).read_bytes() for n in files} == before
    # A fit a deadline cut short (tile), or other settings (xla:default): fitted again.
    saved = runs / "gbdt" / "tile-xla" / "model.json"
    doc = json.loads(saved.read_text())
    saved.write_text(json.dumps({**doc, "fit": {**doc["fit"], "complete": False}}))
    code, third, err = run(_submit(tiny_world, out, runs, "--param", "gbdt.layout:xla:default.n_estimators=5"),
                           capsys)
    assert code == 0, err
    reused = [line.split(": reused")[0] for line in third.splitlines() if ": reused the finished run" in line]
    assert reused == [f"random {c.value}" for c in Collection] + [
        f"gbdt {c}" for c in ("layout:xla:random", "layout:nlp:default", "layout:nlp:random")]
    # A run fitted on other feature columns than this version computes (an older fastslow's): fitted again.
    saved = runs / "gbdt" / "layout-nlp-random" / "model.json"
    doc = json.loads(saved.read_text())
    names = doc["state"]["feature_names_"]
    saved.write_text(json.dumps({**doc, "state": {**doc["state"],
                                                  "feature_names_": ["a_column_of_another_version", *names[1:]]}}))
    code, fourth, err = run(_submit(tiny_world, out, runs, "--param", "gbdt.layout:xla:default.n_estimators=5"),
                            capsys)
    assert code == 0, err
    reused = [line.split(": reused")[0] for line in fourth.splitlines() if ": reused the finished run" in line]
    assert "gbdt layout:nlp:random" not in reused and "gbdt layout:nlp:default" in reused


def _hand_made(world: Path, folder: Path) -> list[Path]:
    """Two layout files of a tiny world's graph with hand-made configs, outside any data root: ``a`` with 4 configs
    setting 2, 0, 1 and 1 configurable nodes explicitly, ``b`` with 3 configs setting 1, 1 and 0."""
    source = list_graphs(find_data_root(world), XLA_DEFAULT, Split.TEST)[0]
    arrays = dict(np.load(source))
    nc = arrays["node_config_ids"].shape[0]
    out = []
    for name, counts in (("a", [2, 0, 1, 1]), ("b", [1, 1, 0])):
        feat = np.full((len(counts), nc, 18), -1.0, dtype=np.float32)
        for k, n in enumerate(counts):
            feat[k, :n, 0] = 0.0  # the output's minor-most dim set: that node is no longer left to the compiler
        path = folder / f"{name}.npz"
        np.savez_compressed(path, **{**arrays, "node_config_feat": feat,
                                     "config_runtime": np.zeros(len(counts), dtype=np.int64)})
        out.append(path)
    return out


def test_a_ranking_of_npz_files(fitted, tiny_world: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    runs, _ = fitted
    files = _hand_made(tiny_world, tmp_path)
    ranking = tmp_path / "ranking.csv"
    argv = ["predict", *files, "--collection", "layout:xla:default", "--models", "default-first", "--runs-dir", runs,
            "--out", ranking, "--no-progress"]
    code, text, err = run(argv, capsys)
    assert code == 0 and err == ""
    # default-first: the configs setting fewer nodes first, ties by index.
    assert ranking.read_text() == "ID,Ranking\nlayout:xla:default:a,1;2;3;0\nlayout:xla:default:b,2;0;1\n"
    assert text.splitlines()[-1].startswith(f"wrote {ranking}: the ranking of every config of 2 graphs of the files "
                                            "given, fastest first (")
    # Without --collection, a layout file outside a data root's tree cannot be placed.
    code, _, err = run(argv[:2] + argv[4:], capsys)
    assert code == 2 and one_line(err) == (f"error: {files[0]}: a layout file whose path does not say its collection "
                                           "(.../layout/<xla|nlp>/<default|random>/...): give --collection")


def test_a_valid_split_ranking_holds_every_config(fitted, tiny_world: Path, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]):
    runs, models = fitted
    tile_runs = tmp_path / "runs"
    shutil.copytree(runs / "gbdt", tile_runs / "gbdt")
    files = list_graphs(find_data_root(tiny_world), TILE, Split.VALID)
    ranking = tmp_path / "ranking.csv"
    code, _, err = run(["predict", *files, "--models", "gbdt", "--runs-dir", tile_runs, "--out", ranking,
                        "--no-progress"], capsys)
    assert code == 0 and err == ""
    expected = ["ID,Ranking"] + [
        f"tile:xla:{p.stem}," + ";".join(map(str, np.argsort(models["gbdt", TILE].predict(load_graph(p)),
                                                               kind="stable")))
        for p in sorted(files, key=lambda p: p.stem)]
    assert ranking.read_text().splitlines() == expected


def test_a_run_of_an_older_format_is_refused(fitted, tiny_world: Path, tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]):
    runs = _copy(fitted[0], tmp_path)
    path = runs / "gbdt" / "tile-xla" / "model.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "version": 0}))
    tile = list_graphs(find_data_root(tiny_world), TILE, Split.TEST)[0]
    code, out, err = run(["predict", tile, "--models", "gbdt", "--runs-dir", runs, "--out", tmp_path / "r.csv"],
                         capsys)
    assert code == 2 and not (tmp_path / "r.csv").exists()
    assert one_line(err) == (f"error: gbdt on tile:xla: {path}: expected model format version 1; found 0 (this "
                             f"fastslow cannot use it: `fastslow train --model gbdt --collections tile:xla --runs-dir "
                             f"{runs}` fits it again)")
    # A GNN saved before the settings tree loads; one trained with an option this version no longer has does not.
    gnn = runs / "gnn" / "tile-xla" / "model.json"
    gnn.write_text(json.dumps({"name": "gnn", "version": 1, "params": {"sibling": True}, "collection": "tile:xla",
                               "state": {}}))
    code, out, err = run(["predict", tile, "--models", "gnn", "--runs-dir", runs, "--out", tmp_path / "r.csv"],
                         capsys)
    assert code == 2 and one_line(err) == (
        f"error: gnn on tile:xla: {gnn}: trained with sibling=True, an option this version no longer has; retrain it "
        f"(this fastslow cannot use it: `fastslow train --model gnn --collections tile:xla --runs-dir {runs}` fits "
        "it again)")


def test_a_run_fitted_on_other_feature_columns_is_refused(fitted, tiny_world: Path, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]):
    runs = _copy(fitted[0], tmp_path)
    tile = list_graphs(find_data_root(tiny_world), TILE, Split.TEST)[0]
    gnn = runs / "gnn" / "tile-xla" / "model.json"
    doc = json.loads(gnn.read_text())
    width = doc["state"]["columns_"]["num_columns"]
    doc["state"]["columns_"]["num_columns"] = width + 3  # as a run trained on graphs with 3 more feature columns
    gnn.write_text(json.dumps(doc))
    code, _, err = run(["predict", tile, "--models", "gnn", "--runs-dir", runs, "--out", tmp_path / "r.csv"], capsys)
    assert code == 2 and one_line(err) == (
        f"error: gnn on tile:xla: {gnn} was trained on graphs of {width + 3} node feature columns after its feature "
        f"pipeline, and {tile} gives {width}: fit it again on data of this format")
    gbdt = runs / "gbdt" / "tile-xla" / "model.json"
    doc = json.loads(gbdt.read_text())
    names = doc["state"]["feature_names_"]
    doc["state"]["feature_names_"] = names[:3] + ["a_column_of_another_version"] + names[4:]
    gbdt.write_text(json.dumps(doc))
    code, _, err = run(["predict", tile, "--models", "gbdt", "--runs-dir", runs, "--out", tmp_path / "r.csv"],
                       capsys)
    assert code == 2 and one_line(err) == (
        f"error: gbdt on tile:xla: {gbdt} was fitted on {len(names)} feature columns and this fastslow computes "
        f"{len(names)} from {tile} (first differing at column 3: 'a_column_of_another_version' there, "
        f"{names[3]!r} here): fit it again on data of this format")
    assert not (tmp_path / "r.csv").exists()


def test_an_npz_the_reader_refuses(fitted, tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    broken = tmp_path / "root" / "npz" / "tile" / "xla" / "test" / "cut.npz"
    broken.parent.mkdir(parents=True)
    broken.write_bytes(b"PK\x03\x04 not a whole archive")
    with pytest.raises(DataFileError) as reader:
        load_graph(broken, TILE)
    code, _, err = run(["predict", broken, "--models", "gbdt", "--runs-dir", fitted[0], "--out", tmp_path / "r.csv"],
                       capsys)
    assert code == 2 and one_line(err) == f"error: {reader.value}"


def test_arguments_that_do_not_go_together(tiny_world: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    code, _, err = run(["predict", tmp_path / "x.npz", "--split", "valid"], capsys)
    assert code == 2 and one_line(err) == "error: --split: rank npz FILEs or a split of a data root, not both"
    code, _, err = run(["predict", "--data", tiny_world, "--models", "nope", "--runs-dir", tmp_path], capsys)
    assert code == 2 and one_line(err) == ("error: --models: unknown model 'nope'; expected one of default-first, "
                                           "gbdt, gnn, gnn-attn, random")
    code, _, err = run(["predict", "--data", tiny_world, "--runs-dir", tmp_path / "none", "--submissions", tmp_path],
                       capsys)
    assert code == 2 and one_line(err) == (
        f"error: no model has a saved run in {tmp_path / 'none'} for tile:xla, layout:xla:default, layout:xla:random, "
        f"layout:nlp:default, layout:nlp:random, and no {tmp_path / 'submission.json'} says which made a submission: "
        f"fit them with `fastslow submit --runs-dir {tmp_path / 'none'}` or `fastslow train --runs-dir "
        f"{tmp_path / 'none'}`, or give --runs-dir (and --models)")


def test_a_gnn_run_is_reused_when_its_checkpoints_say_it_finished(tiny_world: Path, tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]):
    out, runs = tmp_path / "subs", tmp_path / "runs"
    quick = [x for k, v in QUICK_GNN.items() for x in ("--param", f"gnn.{k}={v!r}")]
    argv = ["submit", "--data", tiny_world, "--models", "gnn", "--out-dir", out, "--runs-dir", runs, "--jobs", "1",
            "--no-progress", "--param", "gnn.run.cache_dir=" + repr(str(tmp_path / "cache")), *quick]
    code, first, err = run(argv, capsys)
    assert code == 0, err
    assert (runs / "gnn" / "tile-xla" / "checkpoint.pt").is_file() and ": reused the finished run" not in first
    before = {n: (out / n).read_bytes() for n in ("submission.csv", "valid-gnn.csv")}
    code, second, err = run(argv, capsys)
    assert code == 0, err
    assert [line for line in second.splitlines() if ": reused the finished run" in line] == [
        f"gnn {c.value}: reused the finished run in {runs / 'gnn' / c.slug} (same settings and data)"
        for c in Collection]
    assert {n: (out / n).read_bytes() for n in before} == before
    code, _, err = run(["predict", "--data", tiny_world, "--runs-dir", runs, "--submissions", out, "--out",
                        tmp_path / "p.csv", "--no-progress"], capsys)
    assert code == 0 and (tmp_path / "p.csv").read_bytes() == before["submission.csv"]
    # A checkpoint that does not say a finished stop (a run the time budget cut short): trained on, not reused.
    ckpt = runs / "gnn" / "tile-xla" / "checkpoint.pt"
    torch = pytest.importorskip("torch")
    state = torch.load(ckpt, weights_only=True)
    torch.save({**state, "stopped": ""}, ckpt)
    code, third, err = run(argv, capsys)
    assert code == 0, err
    assert [line.split(": reused")[0] for line in third.splitlines() if ": reused the finished run" in line] == [
        f"gnn {c.value}" for c in Collection if c != TILE]
