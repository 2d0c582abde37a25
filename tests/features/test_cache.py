"""features.cache: building, reusing, invalidating and resuming the processed-graph cache on a tiny world."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from torch_geometric.data import Data
from torch_geometric.transforms import Compose

from competition.collections import Collection, Split
from competition.dataroot import DataRoot, find_data_root
from competition.dataset import open_split
from competition.reader import load_graph
from features import (
    PadLayoutMinusOne,
    ProcessedGraphs,
    PruneToConfigurable,
    evenly_spaced_configs,
    graph_to_data,
)
from features.cache import MANIFEST_FILE, PIPELINE_FILE, pipeline_description, pipeline_hash

LAYOUT = Collection.LAYOUT_XLA_RANDOM


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> DataRoot:
    from competition.synthetic.world import generate_world

    out = tmp_path_factory.mktemp("cache-world")
    generate_world(out, scale="tiny", seed=3, limit=2, workers=1, progress=False,
                   collections=[LAYOUT, Collection.TILE_XLA])
    return find_data_root(out)


def pipeline(hops: int = 1) -> Compose:
    return Compose([PruneToConfigurable(hops=hops), PadLayoutMinusOne()])


def assert_same(a: Data, b: Data) -> None:
    assert sorted(a.keys()) == sorted(b.keys())
    for key in a.keys():
        if isinstance(a[key], torch.Tensor):
            assert torch.equal(a[key], b[key]) or torch.allclose(a[key], b[key], equal_nan=True), key
        else:
            assert a[key] == b[key], key


def make(world: DataRoot, cache: Path, **kw: object) -> ProcessedGraphs:
    kw = {"pre_transform": pipeline(), "workers": 1, "progress": False, "max_configs": 16, **kw}
    return ProcessedGraphs(open_split(world, LAYOUT, Split.TRAIN), cache_dir=cache, **kw)  # type: ignore[arg-type]



def _built(ds: ProcessedGraphs) -> bool:
    """Every graph has its current cached file."""
    return all(p.is_file() for p in ds.paths)

def test_evenly_spaced_configs() -> None:
    assert evenly_spaced_configs(10, None) is None
    assert evenly_spaced_configs(10, 10) is None
    assert evenly_spaced_configs(10, 4).tolist() == [0, 3, 6, 9]
    rows = evenly_spaced_configs(100_000, 1000)
    assert len(np.unique(rows)) == 1000 and rows[0] == 0 and rows[-1] == 99_999


def test_build_reuse_and_items(world: DataRoot, tmp_path: Path) -> None:
    ds = make(world, tmp_path)
    assert len(ds) == 2 and not _built(ds)
    report = ds.build()
    assert (report.built, report.reused) == (2, 0)
    assert _built(ds)
    assert ds.processed_dir.parent == tmp_path / "layout-xla-random" / "train"
    assert "PruneToConfigurable(hops=1" in (ds.processed_dir / PIPELINE_FILE).read_text()
    again = make(world, tmp_path).build()
    assert (again.built, again.reused) == (0, 2)
    manifest = ds.manifest()
    assert sorted(manifest["graphs"]) == ds.stems
    for i, path in enumerate(ds.sources):
        graph = load_graph(path.path, LAYOUT)
        expected = pipeline()(graph_to_data(graph, evenly_spaced_configs(graph.num_configs, 16)))
        assert_same(ds[i], expected)
        assert ds[i].y.shape[0] == min(16, graph.num_configs)
        stats = manifest["graphs"][ds.stems[i]]["stats"]
        assert stats["num_nodes_before"] == graph.num_nodes and stats["num_nodes"] == expected.num_nodes
    with pytest.raises(IndexError):
        ds[len(ds)]


def test_cache_keys_are_those_the_data_root_gave(world: DataRoot, tmp_path: Path) -> None:
    """Built from the dataset's split, the cache keeps the names it had when it took the data root itself: the
    pipeline folder hashes the root's resolved path, each file's key its path relative to the root, size, content
    (SHA-256) and stem."""
    ds = make(world, tmp_path)
    assert ds.processed_dir == ds.split_dir / pipeline_hash(pipeline(), 16, None, world.root)
    assert f"data root: {world.root.resolve()}\n" in pipeline_description(pipeline(), 16, None, ds.graphs.data_id)
    for source, path in zip(ds.sources, sorted(world.collection_dir(LAYOUT, Split.TRAIN).glob("*.npz")),
                            strict=True):
        rel = path.relative_to(world.root).as_posix()
        st = path.stat()
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        key = hashlib.sha256(json.dumps([rel, st.st_size, digest, path.stem]).encode()).hexdigest()[:12]
        assert (source.path, source.relpath, source.cache_name) == (path, rel, f"{path.stem}-{key}.pt")


def test_transform_applied_per_access(world: DataRoot, tmp_path: Path) -> None:
    calls: list[int] = []

    def mark(data: Data) -> Data:
        calls.append(1)
        data.marked = True
        return data

    ds = make(world, tmp_path, transform=mark)
    ds.build()
    assert ds[0].marked and ds[0].marked and len(calls) == 2
    assert "marked" not in ds.load(0)["data"]


def test_changed_pipeline_uses_new_folder(world: DataRoot, tmp_path: Path) -> None:
    one = make(world, tmp_path)
    one.build()
    two = make(world, tmp_path, pre_transform=pipeline(hops=2))
    assert two.processed_dir != one.processed_dir
    assert (two.build().built, make(world, tmp_path, max_configs=8).build().built) == (2, 2)
    assert _built(one)  # the old folder is left until clean_stale
    assert sorted(two.clean_stale()) == sorted([one.processed_dir, make(world, tmp_path, max_configs=8).processed_dir])
    assert not one.processed_dir.exists() and _built(two)


def test_two_data_roots_share_a_cache_without_removing_each_others_files(world: DataRoot, tmp_path: Path) -> None:
    # A second world with the same relative paths and stems (a copy, so its files are other files): its build must
    # not take the first world's cached files for leftovers, nor the other way round.
    other = find_data_root(shutil.copytree(world.root, tmp_path / "other-world", copy_function=shutil.copy))
    cache = tmp_path / "cache"
    one, two = make(world, cache), make(other, cache)
    assert one.processed_dir != two.processed_dir and one.split_dir == two.split_dir
    assert one.build().built == 2 and two.build().built == 2
    assert _built(one) and _built(two)
    assert (one.build().reused, two.build().reused) == (2, 2)  # nothing rebuilt, nothing removed
    assert f"data root: {Path(other.root).resolve()}" in (two.processed_dir / PIPELINE_FILE).read_text()


def test_rewritten_source_rebuilds_only_that_graph(world: DataRoot, tmp_path: Path) -> None:
    ds = make(world, tmp_path)
    ds.build()
    old_paths = ds.paths
    source = ds.sources[1].path
    st = source.stat()
    os.utime(source, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))  # touched: the same bytes
    try:
        assert make(world, tmp_path).build().reused == 2
    finally:
        os.utime(source, ns=(st.st_atime_ns, st.st_mtime_ns))
    copy = find_data_root(shutil.copytree(world.root, tmp_path / "copy"))
    ds = make(copy, tmp_path / "cache")
    ds.build()
    old_paths = ds.paths
    other = ds.sources[0].path.read_bytes()
    ds.sources[1].path.write_bytes(other)
    fresh = make(copy, tmp_path / "cache")
    report = fresh.build()
    assert (report.built, report.reused, report.removed) == (1, 1, 1)
    assert fresh.paths[0] == old_paths[0] and fresh.paths[1] != old_paths[1]
    assert not old_paths[1].exists() and _built(fresh)


def test_interrupted_build_is_completed(world: DataRoot, tmp_path: Path) -> None:
    ds = make(world, tmp_path)
    ds.build()
    expected = ds[0]
    ds.paths[0].unlink()
    (ds.processed_dir / MANIFEST_FILE).unlink()
    leftover = ds.processed_dir / f".{ds.paths[0].name}.abc123xy.part"
    leftover.write_bytes(b"half a file")
    assert not _built(ds)
    with pytest.raises(FileNotFoundError, match="build"):
        ds[0]
    report = make(world, tmp_path).build()
    assert (report.built, report.reused, report.removed) == (1, 1, 1)
    assert not leftover.exists()
    assert_same(ds[0], expected)
    assert sorted(ds.manifest()["graphs"]) == ds.stems


def test_parallel_build_matches_serial(world: DataRoot, tmp_path: Path) -> None:
    serial = make(world, tmp_path / "serial")
    serial.build()
    parallel = make(world, tmp_path / "parallel", workers=2)
    assert parallel.build().built == 2
    for i in range(len(serial)):
        assert_same(serial[i], parallel[i])


def test_tile_graphs(world: DataRoot, tmp_path: Path) -> None:
    ds = ProcessedGraphs(open_split(world, "tile:xla", "valid"), pre_transform=pipeline(), cache_dir=tmp_path,
                         workers=1, progress=False, max_configs=1)
    assert ds.build().built == len(ds) > 0
    graph = load_graph(ds.sources[0].path, Collection.TILE_XLA)
    # Tile graphs keep every config, and pruning leaves them unchanged (they have no configurable nodes).
    assert_same(ds[0], pipeline()(graph_to_data(graph)))
    assert ds[0].y.shape[0] == graph.num_configs > 1


def test_layout_configs_are_cached_as_int8_without_loss(world: DataRoot, tmp_path: Path):
    from features.cache import compact_config_feat

    layout = torch.tensor([[[-1.0, 0.0, 5.0], [2.0, -1.0, 1.0]]]).repeat(4, 1, 1)
    compact = compact_config_feat(layout)
    assert compact.dtype == torch.int8 and torch.equal(compact.float(), layout)
    assert compact_config_feat(layout + 0.5).dtype == torch.float32  # not integral: kept as it is
    tile = torch.arange(48, dtype=torch.float32).reshape(2, 24)
    assert compact_config_feat(tile) is tile
    ds = make(world, tmp_path, pre_transform=pipeline(), max_configs=7, workers=1, progress=False)
    ds.build()
    data = ds[0]
    graph = load_graph(ds.sources[0].path, LAYOUT)
    rows = np.linspace(0, graph.num_configs - 1, 7).round().astype(np.int64)
    assert data.config_feat.dtype == torch.int8
    assert torch.equal(data.config_feat.float(), torch.from_numpy(graph.config_features(rows)))
