"""Stale state is not taken for current: data is identified by its content, and a run by its seed ensemble.

- A saved run whose train file changed (the same size, its mtime set back) is fitted again, not reused.
- The processed-graph cache rebuilds a graph whose file was replaced with one of the same size and mtime.
- A run with ``run.seeds=1`` after one with ``run.seeds=3`` moves that run aside, its ``seed-<seed>/`` folders with
  it, and ``report`` shows the one network.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np

import competition.fingerprint as fingerprint
from competition.collections import Collection, Split
from competition.dataroot import find_data_root, list_graphs
from competition.dataset import open_split
from competition.fingerprint import content_digest, file_sha256
from competition.reader import load_graph
from features.cache import ProcessedGraphs
from features.data import graph_to_data
from models.base import load_model
from models.gnn.runs import CHECKPOINT, CURVES_CSV, settings_hash
from tests.reliability.helpers import run, snapshot

TILE = Collection.TILE_XLA
REUSED = ": reused the finished run"


def _world(tiny_world: Path, tmp_path: Path) -> Path:
    """A copy of the tiny world this test may change."""
    return shutil.copytree(tiny_world, tmp_path / "world")


def _train_file(world: Path, collection: Collection = TILE) -> Path:
    return list_graphs(find_data_root(world), collection, Split.TRAIN)[0]


def _rewrite(path: Path, change_runtimes: bool) -> None:
    """``path`` written again, uncompressed (``np.savez``): its arrays as they are, or its runtimes in reverse order
    (the same size: the same arrays of the same shapes), and its mtime set back to what it was."""
    st = path.stat()
    with np.load(path) as z:
        arrays = {k: z[k] for k in z.files}
    if change_runtimes:
        runtimes = arrays["config_runtime"]
        assert not np.array_equal(runtimes, runtimes[::-1])
        arrays["config_runtime"] = np.ascontiguousarray(runtimes[::-1])
    with open(path, "wb") as f:
        np.savez(f, **arrays)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def _same_size_and_mtime_other_runtimes(path: Path) -> None:
    before = path.stat()
    digest = file_sha256(path)
    _rewrite(path, change_runtimes=True)
    after = path.stat()
    assert (after.st_size, after.st_mtime_ns) == (before.st_size, before.st_mtime_ns)
    assert file_sha256(path) != digest


# -- the digest -------------------------------------------------------------------------------------------------------


def test_a_digest_is_read_once_and_again_whenever_the_file_changed(tmp_path: Path, monkeypatch):
    reads: list[str] = []
    real = fingerprint.file_sha256
    monkeypatch.setattr(fingerprint, "file_sha256", lambda p: reads.append(p) or real(p))
    monkeypatch.setattr(fingerprint, "RACY_SECONDS", 0.0)  # the files below were written a moment ago
    path = tmp_path / "a.bin"
    path.write_bytes(b"runtimes 1 2 3")
    st = path.stat()
    first = content_digest(path)
    assert first == real(path) and content_digest(path) == first and len(reads) == 1  # kept: the file is as it was
    path.write_bytes(b"runtimes 3 2 1")  # in place, the same size, the mtime set back
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert content_digest(path) == real(path) != first and len(reads) == 2
    other = tmp_path / "b.bin"  # another file renamed over it, with the same size and times
    other.write_bytes(b"runtimes 2 1 3")
    os.utime(other, ns=(st.st_atime_ns, st.st_mtime_ns))
    os.replace(other, path)
    assert content_digest(path) == real(path) and len(reads) == 3


def test_a_file_changed_moments_before_is_read_again(tmp_path: Path, monkeypatch):
    """Within :data:`~competition.fingerprint.RACY_SECONDS` of its last change, a second change could leave the
    file's status as it was: its digest is not kept."""
    reads: list[str] = []
    real = fingerprint.file_sha256
    monkeypatch.setattr(fingerprint, "file_sha256", lambda p: reads.append(p) or real(p))
    path = tmp_path / "a.bin"
    path.write_bytes(b"fresh")
    assert content_digest(path) == content_digest(path) and len(reads) == 2


# -- the saved-run key ------------------------------------------------------------------------------------------------


def _submit(world: Path, tmp_path: Path) -> list[object]:
    return ["submit", "--data", world, "--models", "gbdt", "--out-dir", tmp_path / "subs", "--runs-dir",
            tmp_path / "runs", "--jobs", "1", "--param", "gbdt.n_jobs=1", "--param", "gbdt.n_estimators=5",
            "--no-progress"]


def test_a_train_file_whose_runtimes_changed_at_the_same_size_is_fitted_again(tiny_world: Path, tmp_path: Path,
                                                                              capsys):
    world = _world(tiny_world, tmp_path)
    train = _train_file(world)
    _rewrite(train, change_runtimes=False)  # uncompressed, so that other runtimes keep the size
    code, first, err = run(_submit(world, tmp_path), capsys)
    assert code == 0, err
    assert REUSED not in first
    saved = tmp_path / "runs" / "gbdt" / TILE.slug / "model.json"
    key = json.loads(saved.read_text())["fit"]["key"]
    _same_size_and_mtime_other_runtimes(train)
    code, second, err = run(_submit(world, tmp_path), capsys)
    assert code == 0, err
    reused = [line.split(REUSED)[0] for line in second.splitlines() if REUSED in line]
    assert reused == [f"gbdt {c.value}" for c in Collection if c != TILE]  # every other collection as it was
    files = json.loads(saved.read_text())["fit"]["key"]["data"]["files"]["train"]
    assert files != key["data"]["files"]["train"]
    rel = train.relative_to(world).as_posix()
    assert [f for f in files if f[0] == rel] == [[rel, train.stat().st_size, file_sha256(train)]]
    code, third, err = run(_submit(world, tmp_path), capsys)  # now as it was fitted: reused
    assert code == 0, err
    assert sum(REUSED in line for line in third.splitlines()) == len(Collection)


# -- the processed-graph cache ----------------------------------------------------------------------------------------


def test_a_file_replaced_with_the_same_size_and_mtime_is_processed_again(tiny_world: Path, tmp_path: Path,
                                                                         monkeypatch):
    monkeypatch.setattr(fingerprint, "RACY_SECONDS", 0.0)  # digests kept in this process, as for files of old
    world = _world(tiny_world, tmp_path)
    train = _train_file(world)
    _rewrite(train, change_runtimes=False)

    def cached() -> ProcessedGraphs:
        return ProcessedGraphs(open_split(find_data_root(world), TILE, Split.TRAIN), cache_dir=tmp_path / "cache",
                               workers=1, progress=False)

    graphs = cached()
    assert graphs.build().built == len(graphs)
    index = graphs.stems.index(train.stem)
    old = graphs[index].y.clone()
    _same_size_and_mtime_other_runtimes(train)
    again = cached()
    stats = again.build()
    assert (stats.built, stats.reused) == (1, len(graphs) - 1)
    new = again[index].y
    assert not np.array_equal(new.numpy(), old.numpy())
    np.testing.assert_array_equal(new.numpy(), graph_to_data(load_graph(train, TILE)).y.numpy())
    assert again.manifest()["graphs"][train.stem]["sha256"] == file_sha256(train)


# -- the seed ensemble in the run's identity --------------------------------------------------------------------------


def _train_gnn(world: Path, tmp_path: Path, seeds: int) -> list[object]:
    return ["train", "--data", world, "--model", "gnn", "--collections", TILE.value, "--runs-dir", tmp_path / "runs",
            "--param", "hidden=8", "--param", "epochs=2", "--param", "steps_per_graph=1", "--param",
            f"seeds={seeds}", "--param", f"cache_dir={str(tmp_path / 'cache')!r}", "--no-progress"]


def _report_runs(world: Path, tmp_path: Path) -> list[str]:
    """The runs of the learning-curves table of ``report`` on ``tmp_path / "runs"``."""
    from fastslow.report import build_report
    from tests.test_report import _parse, _table

    index = build_report(tmp_path / "report", root=world, leaderboard=tmp_path / "none.csv",
                         runs_dir=tmp_path / "runs", graphs=1, progress=False)
    return [row["run"] for row in _table(_parse(index), "curves-table")]


def test_fewer_seed_networks_move_the_ensemble_aside(tiny_world: Path, tmp_path: Path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run_dir = tmp_path / "runs" / "gnn" / TILE.slug
    code, _, err = run(_train_gnn(tiny_world, tmp_path, seeds=3), capsys)
    assert code == 0, err
    assert all((run_dir / f / CHECKPOINT).is_file() for f in ("", "seed-1", "seed-2"))
    three = json.loads((run_dir / "settings.json").read_text())
    ensemble = snapshot(run_dir)

    code, _, err = run(_train_gnn(tiny_world, tmp_path, seeds=1), capsys)
    assert code == 0, err
    assert not (run_dir / "seed-1").exists() and not (run_dir / "seed-2").exists()
    assert three["run"] == {"seeds": 3}
    assert json.loads((run_dir / "settings.json").read_text())["run"] == {"seeds": 1}
    assert load_model(run_dir / "model.json").num_networks == 1
    aside = run_dir / settings_hash(three)
    assert snapshot(aside) == ensemble  # the seeds=3 run whole, its members' folders with it
    assert _report_runs(tiny_world, tmp_path) == [f"gnn/{TILE.slug}"]
    assert sorted(p.relative_to(run_dir).as_posix() for p in run_dir.rglob(CURVES_CSV)) == sorted([
        CURVES_CSV, f"{aside.name}/{CURVES_CSV}", f"{aside.name}/seed-1/{CURVES_CSV}",
        f"{aside.name}/seed-2/{CURVES_CSV}"])

    # The seeds=3 model again: its run comes back whole, and every network of it returns at once.
    code, _, err = run(_train_gnn(tiny_world, tmp_path, seeds=3), capsys)
    assert code == 0, err
    assert not aside.exists()
    assert _report_runs(tiny_world, tmp_path) == [f"gnn/{TILE.slug}", f"gnn/{TILE.slug}/seed-1",
                                                  f"gnn/{TILE.slug}/seed-2"]
    assert load_model(run_dir / "model.json").num_networks == 3
    checkpoints = [CHECKPOINT, f"seed-1/{CHECKPOINT}", f"seed-2/{CHECKPOINT}"]
    assert {k: snapshot(run_dir)[k] for k in checkpoints} == {k: ensemble[k] for k in checkpoints}
