"""The synthetic world on disk: layout, test files, secrets, determinism, resume."""

from __future__ import annotations

import csv
import hashlib
import json
import re
from pathlib import Path

import numpy as np
import pytest

from competition.collections import Collection, Split
from competition.dataroot import find_data_root, list_graphs
from competition.graphfile import validate_file
from competition.npzio import NpzReader
from competition.reader import load_graph
from competition.schema import LAYOUT_ARRAYS, TILE_ARRAYS
from competition.synthetic.world import WorldMismatch, generate_world


def _digest(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and p.name != "world.json"}


def test_tree_matches_kaggle_layout(tiny_world: Path):
    root = find_data_root(tiny_world)
    assert root.npz_dir == tiny_world / "npz_all" / "npz"
    assert root.tree_format == "kaggle"
    for c in Collection:
        for s in Split:
            assert len(list_graphs(root, c, s)) == 2, (c, s)
    assert not list(tiny_world.rglob("*.part")), "no temporary files left behind"


def test_every_file_has_the_real_keys_dtypes_and_validates(tiny_world: Path):
    root = find_data_root(tiny_world)
    for c in Collection:
        specs = TILE_ARRAYS if c.is_tile else LAYOUT_ARRAYS
        for s in Split:
            for path in list_graphs(root, c, s):
                with NpzReader(path) as r:
                    assert r.keys() == [a.key for a in specs]
                    for a in specs:
                        assert r.info(a.key).dtype == a.dtype, (path, a.key)
                assert validate_file(path, c, deep=True) == []


def test_edges_point_from_consumer_to_earlier_producer(tiny_world: Path):
    root = find_data_root(tiny_world)
    for c in (Collection.TILE_XLA, Collection.LAYOUT_XLA_RANDOM):
        g = load_graph(list_graphs(root, c, Split.TRAIN)[0], c)
        e = g.edge_index
        assert (e[:, 0] > e[:, 1]).all()
        assert (np.lexsort((e[:, 1], e[:, 0])) == np.arange(len(e))).all()


def test_test_files_hide_runtimes_and_secret_holds_them(tiny_world: Path):
    root = find_data_root(tiny_world)
    tile = load_graph(list_graphs(root, Collection.TILE_XLA, Split.TEST)[0])
    assert tile.is_test
    assert (tile.config_runtime == 0).all() and (tile.config_runtime_normalizers == 1).all()
    assert re.fullmatch(r"[0-9a-f]{32}", tile.path.stem)
    with NpzReader(root.secret_dir / "tile" / "xla" / "test" / tile.path.name) as r:
        assert (r.load("config_runtime") > 0).all()
        assert r.load("config_runtime_normalizers").shape == tile.config_runtime.shape
    for src in ("xla", "nlp"):
        d = {p.stem for p in list_graphs(root, Collection(f"layout:{src}:default"), Split.TEST)}
        r = {p.stem for p in list_graphs(root, Collection(f"layout:{src}:random"), Split.TEST)}
        assert d == r, "each layout test stem is present under both default and random"
        stem = sorted(d)[0]
        gd = load_graph(root.npz_dir / "layout" / src / "default" / "test" / f"{stem}.npz")
        gr = load_graph(root.npz_dir / "layout" / src / "random" / "test" / f"{stem}.npz")
        assert (gd.node_feat == gr.node_feat).all(), "same graph"
        assert not np.array_equal(gd.config_features(slice(0, 10)), gr.config_features(slice(0, 10)))


def test_sample_submission_lists_every_test_graph(tiny_world: Path):
    root = find_data_root(tiny_world)
    with open(root.sample_submission, newline="") as f:
        rows = list(csv.DictReader(f))
    expected = {f"{c.value}:{p.stem}" for c in Collection for p in list_graphs(root, c, Split.TEST)}
    assert {r["ID"] for r in rows} == expected
    for r in rows:
        idx = [int(x) for x in r["TopConfigs"].split(";")]
        if r["ID"].startswith("tile:"):
            assert 1 <= len(idx) <= 5
        else:
            assert idx == list(range(len(idx)))


def test_same_seed_same_bytes_and_resume(tmp_path: Path):
    kw = dict(scale="tiny", seed=3, limit=1, collections=["tile:xla", "layout:nlp:random"], progress=False)
    a = generate_world(tmp_path / "a", workers=1, **kw)
    b = generate_world(tmp_path / "b", workers=2, **kw)
    da, db = _digest(a), _digest(b)
    assert da == db and len(da) > 6
    victim = next(p for p in sorted((b / "npz_all").rglob("*.npz")))
    victim.unlink()
    generate_world(b, workers=1, **kw)
    assert _digest(b) == da, "a rerun regenerates the missing file, byte for byte"
    assert json.loads((b / "world.json").read_text())["complete"] is True


def test_other_settings_refuse_without_force(tmp_path: Path):
    kw = dict(scale="tiny", limit=1, collections=["tile:xla"], progress=False, workers=1)
    generate_world(tmp_path, seed=1, **kw)
    with pytest.raises(WorldMismatch, match="--force"):
        generate_world(tmp_path, seed=2, **kw)
    generate_world(tmp_path, seed=2, force=True, **kw)
    assert json.loads((tmp_path / "world.json").read_text())["config"]["seed"] == 2


def test_a_world_of_an_older_generator_is_never_taken_for_current(tmp_path: Path):
    """A manifest of the same settings made by an older generator (version 1 wrote no ``generator`` key) is another
    world: refused without --force, naming the versions; remade with it; and the pipeline's own folder is remade."""
    from competition.synthetic.scales import GENERATOR_VERSION
    from competition.synthetic.world import read_world_config
    from fastslow.pipeline import resolve_data

    kw = dict(scale="tiny", seed=1, limit=1, collections=["tile:xla"], progress=False, workers=1)
    generate_world(tmp_path, **kw)
    manifest = tmp_path / "world.json"
    doc = json.loads(manifest.read_text())
    assert doc["config"]["generator"] == GENERATOR_VERSION
    del doc["config"]["generator"]
    manifest.write_text(json.dumps(doc))
    assert read_world_config(tmp_path).generator == 1
    with pytest.raises(WorldMismatch, match=f"older generator \\(version 1; this is {GENERATOR_VERSION}\\)"):
        generate_world(tmp_path, **kw)
    generate_world(tmp_path, force=True, **kw)
    assert read_world_config(tmp_path).generator == GENERATOR_VERSION

    demo = tmp_path / "own"
    generate_world(demo, scale="tiny", seed=0, progress=False, workers=1)
    doc = json.loads((demo / "world.json").read_text())
    doc["config"]["generator"] = 1
    (demo / "world.json").write_text(json.dumps(doc))
    resolve_data(None, demo, scale="tiny", progress=False)
    assert read_world_config(demo).generator == GENERATOR_VERSION


def test_the_pipeline_remakes_its_own_world_found_stale_with_the_same_settings(tmp_path: Path,
                                                                                monkeypatch: pytest.MonkeyPatch):
    """``make submit`` finds ``./data/synthetic-demo`` as a data root before it would generate one: a world there
    made by an older generator is made again, with the settings it was made with; one of the current generator and
    other settings is the user's and is used as it is."""
    from competition.synthetic.scales import GENERATOR_VERSION
    from competition.synthetic.world import read_world_config
    from fastslow.pipeline import resolve_data

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("FASTSLOW_DATA", raising=False)
    own = Path("data/synthetic-demo")
    generate_world(own, scale="tiny", seed=3, limit=1, collections=["tile:xla"], progress=False, workers=1)
    manifest = own / "world.json"
    kept = manifest.read_text()
    root, synthetic = resolve_data(None, own, progress=False)  # current generator, other settings: kept
    assert synthetic and root.root.resolve() == own.resolve() and manifest.read_text() == kept

    doc = json.loads(kept)
    doc["config"]["generator"] = GENERATOR_VERSION - 1
    manifest.write_text(json.dumps(doc))
    stale = next(own.rglob("*.npz"))
    stale.write_bytes(b"stale")
    resolve_data(None, own, progress=False)
    made = read_world_config(own)
    assert made.generator == GENERATOR_VERSION
    assert (made.scale, made.seed, made.limit, made.collections) == ("tiny", 3, 1, ("tile:xla",))
    assert stale.read_bytes() != b"stale"
