"""The real-data reader: root discovery, listing, records, streaming config reads and every validation error."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from competition.collections import Collection, Split
from competition.dataroot import DataRoot, find_data_root, list_graphs, load_secret_runtime
from competition.errors import DataFileError, DataRootNotFound
from competition.graphfile import infer_collection_split, validate_file
from competition.npzio import write_npz
from competition.reader import LayoutGraph, TileGraph, load_graph

TILE = Collection.TILE_XLA
LAYOUT = Collection.LAYOUT_XLA_RANDOM


# ---------------------------------------------------------------------------------------------------------------
# Hand-built files
# ---------------------------------------------------------------------------------------------------------------


def tile_arrays(n: int = 4, c: int = 3) -> dict[str, np.ndarray]:
    """A 4-node chain kernel with 3 configs, in the real key order and dtypes."""
    feat = np.arange(n * 140, dtype=np.float32).reshape(n, 140) / 7
    return {
        "node_feat": feat,
        "node_opcode": np.array([63, 63, 2, 59][:n], dtype=np.uint8),
        "edge_index": np.array([[2, 0], [2, 1], [3, 2]], dtype=np.int64),
        "config_feat": np.arange(c * 24, dtype=np.float32).reshape(c, 24),
        "config_runtime": np.array([300, 100, 200][:c], dtype=np.int64),
        "config_runtime_normalizers": np.array([100, 100, 50][:c], dtype=np.int64),
    }


def layout_arrays(n: int = 6, c: int = 5, nc: int = 2) -> dict[str, np.ndarray]:
    """A 6-node program, configurable nodes 2 and 4, 5 configs whose values identify (config, node, column)."""
    cfg = np.full((c, nc, 18), -1, dtype=np.float32)
    cfg[:, :, :3] = (np.arange(c)[:, None, None] + np.arange(nc)[None, :, None] + np.arange(3)) % 6
    return {
        "edge_index": np.array([[1, 0], [2, 1], [3, 2], [4, 3], [5, 4]], dtype=np.int64),
        "node_feat": np.ones((n, 140), dtype=np.float32),
        "node_opcode": np.array([63, 2, 26, 2, 75, 100], dtype=np.uint8),
        "node_config_feat": cfg,
        "node_config_ids": np.array([2, 4], dtype=np.int64),
        "node_splits": np.array([[0, 3, 6]], dtype=np.int64),
        "config_runtime": np.array([50, 40, 30, 20, 10], dtype=np.int64)[:c],
    }


def write(tmp_path: Path, collection: Collection, arrays: dict, stem: str = "g", split: str = "train") -> Path:
    path = tmp_path / "npz_all" / "npz" / Path(collection.relpath) / split / f"{stem}.npz"
    return write_npz(path, arrays)


def broken_tile(tmp_path: Path, **changes) -> Path:
    arrays = tile_arrays()
    arrays.update(changes)
    return write(tmp_path, TILE, {k: v for k, v in arrays.items() if v is not None}, stem="bad")


def broken_layout(tmp_path: Path, **changes) -> Path:
    arrays = layout_arrays()
    arrays.update(changes)
    return write(tmp_path, LAYOUT, {k: v for k, v in arrays.items() if v is not None}, stem="bad")


def raises(path: Path, **kw) -> DataFileError:
    with pytest.raises(DataFileError) as info:
        load_graph(path, **kw)
    return info.value


# ---------------------------------------------------------------------------------------------------------------
# Round trips
# ---------------------------------------------------------------------------------------------------------------


def test_tile_round_trip(tmp_path: Path):
    arrays = tile_arrays()
    path = write(tmp_path, TILE, arrays, stem="alexnet_-1bae")
    g = load_graph(path)
    assert isinstance(g, TileGraph)
    assert (g.collection, g.split, g.stem, g.path) == (TILE, Split.TRAIN, "alexnet_-1bae", path)
    for key, value in arrays.items():
        got = getattr(g, key)
        assert got.dtype == value.dtype and np.array_equal(got, value), key
    assert (g.num_nodes, g.num_edges, g.num_configs) == (4, 3, 3)
    assert not g.is_test
    np.testing.assert_array_equal(g.normalized_runtime(), [3.0, 1.0, 4.0])
    assert g.normalized_runtime().dtype == np.float64
    assert validate_file(path, deep=True) == []


def test_layout_round_trip_and_streamed_config_reads(tmp_path: Path):
    arrays = layout_arrays()
    path = write(tmp_path, LAYOUT, arrays)
    g = load_graph(path, deep=True)
    assert isinstance(g, LayoutGraph)
    assert (g.collection, g.split) == (LAYOUT, Split.TRAIN)
    for key, value in arrays.items():
        if key != "node_config_feat":
            assert np.array_equal(getattr(g, key), value), key
    assert (g.num_nodes, g.num_edges, g.num_configs, g.num_config_nodes) == (6, 5, 5, 2)
    full = arrays["node_config_feat"]
    whole = g.config_features()
    assert whole.dtype == np.float32 and whole.shape == (5, 2, 18)
    np.testing.assert_array_equal(whole, full)
    np.testing.assert_array_equal(g.config_features(slice(1, 4)), full[1:4])
    idx = np.array([4, 0, 4, 2, 0])
    np.testing.assert_array_equal(g.config_features(idx), full[idx])
    np.testing.assert_array_equal(g.config_features([3]), full[[3]])
    blocks = list(g.iter_config_blocks(2))
    assert [start for start, _ in blocks] == [0, 2, 4]
    np.testing.assert_array_equal(np.concatenate([b for _, b in blocks]), full)
    mask = np.array([False, True, False, False, True])
    np.testing.assert_array_equal(g.config_features(mask), full[mask])
    with pytest.raises(IndexError, match="row 5 out of range"):
        g.config_features([5])


def test_streaming_reads_in_small_blocks(tmp_path: Path):
    path = write(tmp_path, LAYOUT, layout_arrays())
    g = load_graph(path)
    g.block_bytes = 2 * 18 * 4  # one config per decompression step
    np.testing.assert_array_equal(g.config_features([4, 1, 1]), layout_arrays()["node_config_feat"][[4, 1, 1]])


def test_narrow_integers_are_widened(tmp_path: Path):
    arrays = layout_arrays()
    arrays.update(node_opcode=arrays["node_opcode"].astype(np.int32), edge_index=arrays["edge_index"].astype(np.int32),
                  node_config_ids=arrays["node_config_ids"].astype(np.int32),
                  config_runtime=arrays["config_runtime"].astype(np.int32))
    g = load_graph(write(tmp_path, LAYOUT, arrays))
    assert g.node_opcode.dtype == np.uint8 and g.edge_index.dtype == np.int64
    assert g.node_config_ids.dtype == np.int64 and g.config_runtime.dtype == np.int64
    np.testing.assert_array_equal(g.node_opcode, layout_arrays()["node_opcode"])


def test_collection_from_keys_when_the_path_does_not_tell(tmp_path: Path):
    tile = write_npz(tmp_path / "loose" / "t.npz", tile_arrays())
    layout = write_npz(tmp_path / "loose" / "l.npz", layout_arrays())
    assert load_graph(tile).collection is TILE
    g = load_graph(layout)
    assert isinstance(g, LayoutGraph) and g.collection is None and g.split is None
    assert load_graph(layout, Collection.LAYOUT_NLP_DEFAULT).collection is Collection.LAYOUT_NLP_DEFAULT
    assert load_graph(layout, "layout:nlp:random").collection is Collection.LAYOUT_NLP_RANDOM
    assert infer_collection_split(Path("/x/npz/layout/nlp/default/valid/a.npz")) == (
        Collection.LAYOUT_NLP_DEFAULT, Split.VALID)
    assert infer_collection_split(Path("/x/tile/xla/b.npz")) == (TILE, None)


def test_neither_tile_nor_layout_keys(tmp_path: Path):
    path = write_npz(tmp_path / "odd.npz", {"foo": np.zeros(3)})
    err = raises(path)
    assert "odd.npz" in str(err) and "members: foo" in str(err) and "config_feat" in err.expected


# ---------------------------------------------------------------------------------------------------------------
# Test files
# ---------------------------------------------------------------------------------------------------------------


def test_all_zero_runtimes_mark_a_test_file(tmp_path: Path):
    arrays = tile_arrays()
    arrays.update(config_runtime=np.zeros(3, np.int64), config_runtime_normalizers=np.ones(3, np.int64))
    g = load_graph(write(tmp_path, TILE, arrays, stem="d6f5f54247bd1e58a10b9e7062c636ab", split="test"))
    assert g.is_test and g.split is Split.TEST
    np.testing.assert_array_equal(g.normalized_runtime(), 0.0)
    lay = layout_arrays()
    lay["config_runtime"] = np.zeros(5, np.int64)
    assert load_graph(write(tmp_path, LAYOUT, lay, split="test")).is_test


def test_partly_zero_runtimes_are_an_error(tmp_path: Path):
    err = raises(broken_layout(tmp_path, config_runtime=np.array([5, 0, 3, 0, 1], np.int64)))
    assert err.key == "config_runtime"
    assert err.expected == "all runtimes > 0 ns (or all 0 in a test file)"
    assert err.found == "2 of 5 runtimes are 0 (first at config 1)"


def test_negative_runtime_is_an_error(tmp_path: Path):
    err = raises(broken_tile(tmp_path, config_runtime=np.array([3, -7, 2], np.int64)))
    assert (err.key, err.expected, err.found) == ("config_runtime", "runtimes >= 0 ns", "-7 at config 1 (1 negative)")


# ---------------------------------------------------------------------------------------------------------------
# Validation errors, one broken file each
# ---------------------------------------------------------------------------------------------------------------


def test_truncated_file(tmp_path: Path):
    path = write(tmp_path, LAYOUT, layout_arrays())
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    err = raises(path)
    assert err.path == path and err.key is None
    assert "bad.npz" not in str(err) and "g.npz" in str(err)
    assert err.expected == "a complete npz (zip) archive" and "truncated or corrupt" in err.found
    problems = validate_file(path, deep=True)
    assert len(problems) == 1 and problems[0].path == path


def test_corrupt_member_data_is_a_data_file_error(tmp_path: Path):
    path = write(tmp_path, TILE, tile_arrays())
    data = bytearray(path.read_bytes())
    # Scramble the middle of the first member's compressed stream, keeping the zip directory intact.
    for i in range(60, 160):
        data[i] ^= 0x5A
    path.write_bytes(bytes(data))
    err = raises(path)
    assert err.path == path and err.key == "node_feat"
    assert validate_file(path) and all(isinstance(p, DataFileError) for p in validate_file(path))


def test_missing_key_lists_present_ones(tmp_path: Path):
    err = raises(broken_tile(tmp_path, config_runtime_normalizers=None))
    assert err.key == "config_runtime_normalizers"
    assert err.expected == "member 'config_runtime_normalizers' (tile file)"
    assert err.found == "missing (members: node_feat, node_opcode, edge_index, config_feat, config_runtime)"
    assert "bad.npz [config_runtime_normalizers]: expected member" in str(err)


def test_wrong_float_dtype(tmp_path: Path):
    err = raises(broken_tile(tmp_path, node_feat=tile_arrays()["node_feat"].astype(np.float64)))
    assert (err.key, err.expected, err.found) == ("node_feat", "dtype float32", "dtype float64")


def test_float_runtime_is_refused(tmp_path: Path):
    err = raises(broken_layout(tmp_path, config_runtime=np.arange(1, 6, dtype=np.float32)))
    assert err.key == "config_runtime"
    assert err.expected == "dtype int64 (also accepted: int32, int64, uint8)" and err.found == "dtype float32"


def test_wrong_shape(tmp_path: Path):
    err = raises(broken_tile(tmp_path, node_feat=np.zeros((4, 139), np.float32)))
    assert (err.key, err.expected, err.found) == ("node_feat", "shape [N, 140]", "shape (4, 139)")
    err = raises(broken_tile(tmp_path, config_feat=np.zeros((3, 24, 1), np.float32)))
    assert (err.key, err.expected, err.found) == ("config_feat", "2-D shape [C, 24]", "3-D shape (3, 24, 1)")
    err = raises(broken_layout(tmp_path, node_config_feat=np.zeros((5, 2, 17), np.float32)))
    assert (err.key, err.expected, err.found) == ("node_config_feat", "shape [C, NC, 18]", "shape (5, 2, 17)")


def test_node_splits_must_be_one_row(tmp_path: Path):
    """``[1, S]``, or the 1-D ``[S]`` read as it (test_what_numpy_writes_reads_as_the_format_says); nothing else."""
    err = raises(broken_layout(tmp_path, node_splits=np.array([[[0, 3, 6]]], np.int64)))
    assert (err.key, err.expected, err.found) == ("node_splits", "2-D shape [1, S]", "3-D shape (1, 1, 3)")
    err = raises(broken_layout(tmp_path, node_splits=np.array([[0, 3], [3, 6]], np.int64)))
    assert (err.key, err.expected, err.found) == ("node_splits", "shape [1, S]", "shape (2, 2)")


def test_config_count_mismatch(tmp_path: Path):
    err = raises(broken_tile(tmp_path, config_runtime=np.array([1, 2], np.int64)))
    assert err.key == "config_runtime"
    assert err.expected == "shape [C] with C=3 (C from config_feat)" and err.found == "shape (2,)"
    err = raises(broken_layout(tmp_path, node_config_ids=np.array([2, 4, 5], np.int64)))
    assert err.key == "node_config_ids"
    assert err.expected == "shape [NC] with NC=2 (NC from node_config_feat)" and err.found == "shape (3,)"
    err = raises(broken_tile(tmp_path, node_opcode=np.array([63, 63, 2], np.uint8)))
    assert (err.key, err.found) == ("node_opcode", "shape (3,)") and "N=4 (N from node_feat)" in err.expected


def test_nan_in_node_feat(tmp_path: Path):
    feat = tile_arrays()["node_feat"]
    feat[2, 7] = np.nan
    feat[3, 0] = np.inf
    err = raises(broken_tile(tmp_path, node_feat=feat))
    assert (err.key, err.expected, err.found) == ("node_feat", "finite values", "nan at node 2, column 7 "
                                                  "(2 non-finite in all)")


def test_nan_in_node_config_feat_only_with_deep(tmp_path: Path):
    cfg = layout_arrays()["node_config_feat"]
    cfg[3, 1, 5] = np.nan
    path = broken_layout(tmp_path, node_config_feat=cfg)
    assert validate_file(path) == []
    load_graph(path)
    err = raises(path, deep=True)
    assert err.key == "node_config_feat" and err.expected == "finite values"
    assert err.found == "nan at config 3, configurable node 1, column 5 (1 non-finite in all)"


def test_node_config_feat_values_outside_the_layout_range(tmp_path: Path):
    cfg = layout_arrays()["node_config_feat"]
    cfg[1, 0, 2] = 2.5
    cfg[4, 1, 17] = 7
    problems = validate_file(broken_layout(tmp_path, node_config_feat=cfg), deep=True)
    assert [(p.key, p.expected, p.found) for p in problems] == [
        ("node_config_feat", "integer layout values in -1..5",
         "2.5 at config 1, configurable node 0, column 2 (2 such values in all)")]


def test_edge_index_out_of_range(tmp_path: Path):
    err = raises(broken_tile(tmp_path, edge_index=np.array([[2, 0], [4, 1], [3, 2]], np.int64)))
    assert (err.key, err.expected, err.found) == ("edge_index", "node indices in [0, 4) (N=4)",
                                                  "row 1 = [4, 1] (1 rows out of range)")


def test_self_loop(tmp_path: Path):
    err = raises(broken_tile(tmp_path, edge_index=np.array([[2, 0], [2, 2], [3, 2]], np.int64)))
    assert err.key == "edge_index" and err.found == "self loop at row 1 = [2, 2] (1 in all)"


def test_node_config_ids_unsorted(tmp_path: Path):
    err = raises(broken_layout(tmp_path, node_config_ids=np.array([4, 2], np.int64)))
    assert (err.key, err.expected, err.found) == ("node_config_ids", "strictly ascending node indices",
                                                  "4 then 2 at positions 0, 1")


def test_node_config_ids_out_of_range(tmp_path: Path):
    err = raises(broken_layout(tmp_path, node_config_ids=np.array([2, 6], np.int64)))
    assert (err.key, err.expected, err.found) == ("node_config_ids", "node indices in [0, 6) (N=6)",
                                                  "6 at position 1")


def test_node_splits_not_ending_at_n(tmp_path: Path):
    err = raises(broken_layout(tmp_path, node_splits=np.array([[0, 3, 5]], np.int64)))
    assert (err.key, err.expected, err.found) == ("node_splits", "last value N=6 (number of nodes)", "last value 5")
    err = raises(broken_layout(tmp_path, node_splits=np.array([[1, 4, 3, 6]], np.int64)))
    assert (err.key, err.found) == ("node_splits", "first value 1")


def test_opcode_out_of_table(tmp_path: Path):
    err = raises(broken_tile(tmp_path, node_opcode=np.array([63, 97, 2, 59], np.uint8)))
    assert err.key == "node_opcode" and err.expected == "opcode ids in 0..120 except the tombstoned 97 and 101"
    assert err.found == "97 at node 1 (1 nodes with unknown opcodes)"
    err = raises(broken_tile(tmp_path, node_opcode=np.array([63, 63, 300, 59], np.int32)))
    assert err.found == "300 at node 2 (1 nodes with unknown opcodes)"


def test_validate_file_lists_every_problem(tmp_path: Path):
    path = broken_layout(tmp_path, node_config_ids=np.array([4, 2], np.int64),
                         node_splits=np.array([[0, 3, 5]], np.int64),
                         edge_index=np.array([[1, 0], [9, 1]], np.int64))
    problems = validate_file(path, LAYOUT)
    assert [(p.key, p.found) for p in problems] == [
        ("edge_index", "row 1 = [9, 1] (1 rows out of range)"),
        ("node_config_ids", "4 then 2 at positions 0, 1"),
        ("node_splits", "last value 5"),
    ]
    assert all(p.path == path for p in problems)


def test_structural_problems_are_all_listed_before_values(tmp_path: Path):
    path = broken_tile(tmp_path, config_feat=None, node_feat=np.zeros((4, 140), np.float64))
    problems = validate_file(path)
    assert [p.key for p in problems] == ["config_feat", "node_feat"]


# ---------------------------------------------------------------------------------------------------------------
# Listing and iterating
# ---------------------------------------------------------------------------------------------------------------


def test_listing_and_available(tmp_path: Path):
    for stem in ("b", "a", "c"):
        write(tmp_path, TILE, tile_arrays(), stem=stem)
    (tmp_path / "npz_all/npz/tile/xla/train/.a.npz.x1y2.part").write_bytes(b"partial")
    root = find_data_root(tmp_path)
    assert [p.stem for p in list_graphs(root, TILE, Split.TRAIN)] == ["a", "b", "c"]
    assert list_graphs(root, TILE, Split.TEST) == []
    assert list_graphs(root, LAYOUT, Split.TRAIN) == []
    avail = root.available()
    assert avail[(TILE, Split.TRAIN)] == 3 and sum(avail.values()) == 3 and len(avail) == 15
    assert root.collection_dir(LAYOUT, Split.VALID) == tmp_path / "npz_all/npz/layout/xla/random/valid"


# ---------------------------------------------------------------------------------------------------------------
# Secret runtimes
# ---------------------------------------------------------------------------------------------------------------


def test_load_secret_runtime(tmp_path: Path):
    stem = "0123456789abcdef0123456789abcdef"
    visible = write(tmp_path, TILE, tile_arrays(), stem=stem, split="test")
    write_npz(tmp_path / "secret/tile/xla/test" / f"{stem}.npz",
              {"config_runtime": np.array([30, 10, 20], np.int64),
               "config_runtime_normalizers": np.array([10, 10, 10], np.int64)})
    write_npz(tmp_path / "secret/layout/xla/random/test/h.npz", {"config_runtime": np.array([5, 4], np.int32)})
    root = find_data_root(tmp_path)
    assert root.secret_dir == tmp_path / "secret"
    s = load_secret_runtime(root, TILE, visible)
    np.testing.assert_array_equal(s.config_runtime, [30, 10, 20])
    np.testing.assert_array_equal(s.config_runtime_normalizers, [10, 10, 10])
    lay = load_secret_runtime(root, LAYOUT, "h")
    assert lay.config_runtime.dtype == np.int64 and lay.config_runtime_normalizers is None
    with pytest.raises(DataFileError, match=r"h\.npz.*expected the secret file of layout:xla:random:h \(valid\)"):
        load_secret_runtime(root, LAYOUT, "h", split=Split.VALID)


def test_secret_runtime_without_secret_tree(tmp_path: Path):
    write(tmp_path, TILE, tile_arrays())
    root = find_data_root(tmp_path)
    assert root.secret_dir is None
    with pytest.raises(DataFileError, match="secret/ folder of hidden runtimes.*found no such folder"):
        load_secret_runtime(root, TILE, "g")


# ---------------------------------------------------------------------------------------------------------------
# Data root discovery
# ---------------------------------------------------------------------------------------------------------------


@pytest.fixture
def nowhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict:
    """Search settings under which nothing is found unless a test puts it there."""
    monkeypatch.delenv("FASTSLOW_DATA", raising=False)
    (tmp_path / "cwd").mkdir()
    return {"kaggle_input": tmp_path / "kaggle-input", "cwd": tmp_path / "cwd"}


def make_tree(base: Path, *, kaggle: bool = True, sample: bool = False) -> Path:
    npz = base / ("npz_all/npz" if kaggle else "npz")
    write_npz(npz / "tile/xla/train/t.npz", tile_arrays())
    if sample:
        (base / "sample_submission.csv").write_text("ID,TopConfigs\n")
    return npz


def test_explicit_kaggle_tree(tmp_path: Path, nowhere: dict):
    npz = make_tree(tmp_path / "comp", sample=True)
    root = find_data_root(tmp_path / "comp", **nowhere)
    assert root == DataRoot(tmp_path / "comp", npz, "kaggle", tmp_path / "comp/sample_submission.csv", None,
                            "explicit path")
    assert find_data_root(str(npz.parent), **nowhere).root == tmp_path / "comp", "npz_all/ itself"
    assert find_data_root(npz, **nowhere).root == tmp_path / "comp", "npz_all/npz itself"
    assert find_data_root(npz, **nowhere).tree_format == "kaggle"


def test_explicit_tarball_tree(tmp_path: Path, nowhere: dict):
    npz = make_tree(tmp_path / "tpugraphs", kaggle=False)
    for given in (tmp_path / "tpugraphs", npz):
        root = find_data_root(given, **nowhere)
        assert (root.root, root.npz_dir, root.tree_format) == (tmp_path / "tpugraphs", npz, "tarball")
        assert root.sample_submission is None


def test_a_root_with_the_generator_manifest_is_synthetic(tmp_path: Path, nowhere: dict):
    make_tree(tmp_path / "world")
    assert not find_data_root(tmp_path / "world", **nowhere).is_synthetic
    (tmp_path / "world" / "world.json").write_text("{}")
    root = find_data_root(tmp_path / "world", **nowhere)
    assert root.is_synthetic and root.world_scale is None  # a manifest that does not say
    (tmp_path / "world" / "world.json").write_text('{"config": {"scale": "demo", "seed": 0}}')
    assert find_data_root(tmp_path / "world", **nowhere).world_scale == "demo"
    (tmp_path / "world" / "world.json").write_text('{"config": {"scale": ')  # truncated
    assert find_data_root(tmp_path / "world", **nowhere).world_scale is None


def test_collection_kind_and_slug():
    assert [(c.kind, c.slug) for c in Collection] == [
        ("tile", "tile-xla"), ("layout", "layout-xla-default"), ("layout", "layout-xla-random"),
        ("layout", "layout-nlp-default"), ("layout", "layout-nlp-random")]
    assert all(Collection.parse(c.slug) is c for c in Collection)


def test_explicit_path_that_does_not_qualify_fails_at_once(tmp_path: Path, nowhere: dict):
    make_tree(tmp_path / "cwd" / "data")  # would be found by ./data, but an explicit path must not fall through
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "readme.txt").write_text("x")
    with pytest.raises(DataRootNotFound) as info:
        find_data_root(tmp_path / "empty", **nowhere)
    msg = str(info.value)
    assert f"data root {tmp_path / 'empty'}: expected a folder holding npz_all/npz/" in msg
    assert "found a folder without that tree (contents: readme.txt)" in msg
    with pytest.raises(DataRootNotFound, match="found no such folder"):
        find_data_root(tmp_path / "missing", **nowhere)


def test_env_var(tmp_path: Path, nowhere: dict, monkeypatch: pytest.MonkeyPatch):
    npz = make_tree(tmp_path / "world")
    monkeypatch.setenv("FASTSLOW_DATA", str(tmp_path / "world"))
    root = find_data_root(**nowhere)
    assert (root.npz_dir, root.source) == (npz, "$FASTSLOW_DATA")
    assert find_data_root(tmp_path / "world", **nowhere).source == "explicit path", "explicit beats env"
    monkeypatch.setenv("FASTSLOW_DATA", str(tmp_path / "gone"))
    with pytest.raises(DataRootNotFound, match=r"\$FASTSLOW_DATA=.*gone: expected .* found no such folder"):
        find_data_root(**nowhere)


def test_kaggle_mount(tmp_path: Path, nowhere: dict):
    make_tree(nowhere["kaggle_input"] / "some-other-dataset" / "copy")
    npz = make_tree(nowhere["kaggle_input"] / "competitions" / "predict-ai-model-runtime", sample=True)
    root = find_data_root(**nowhere)
    assert (root.npz_dir, root.tree_format, root.source) == (npz, "kaggle", "Kaggle mount")
    assert root.sample_submission == npz.parent.parent / "sample_submission.csv"


def test_kaggle_mount_classic_path(tmp_path: Path, nowhere: dict):
    npz = make_tree(nowhere["kaggle_input"] / "predict-ai-model-runtime")
    assert find_data_root(**nowhere).npz_dir == npz


def test_local_data_folder(tmp_path: Path, nowhere: dict):
    npz = make_tree(tmp_path / "cwd" / "data", kaggle=False)
    (tmp_path / "cwd/data/secret").mkdir()
    root = find_data_root(**nowhere)
    assert (root.npz_dir, root.source, root.secret_dir) == (npz, "./data", tmp_path / "cwd/data/secret")


def test_downloaded_and_demo_folders_are_found_after_data(tmp_path: Path, nowhere: dict):
    demo = make_tree(tmp_path / "cwd/data/synthetic-demo")
    assert find_data_root(**nowhere).npz_dir == demo
    assert find_data_root(**nowhere).source == "./data/synthetic-demo"
    kaggle = make_tree(tmp_path / "cwd/data/kaggle")
    assert (find_data_root(**nowhere).npz_dir, find_data_root(**nowhere).source) == (kaggle, "./data/kaggle")


def test_nothing_found_lists_every_place(tmp_path: Path, nowhere: dict):
    with pytest.raises(DataRootNotFound) as info:
        find_data_root(**nowhere)
    msg = str(info.value)
    lines = msg.splitlines()
    assert lines[0] == "no TpuGraphs data found. Searched, in order:"
    assert lines[1] == "  1. explicit path (--data): not given"
    assert lines[2] == "  2. $FASTSLOW_DATA: not set"
    assert lines[3].startswith(f"  3. Kaggle mount: {nowhere['kaggle_input']}/**/npz_all/npz")
    assert lines[3].endswith("does not exist")
    assert lines[4] == f"  4. ./data ({tmp_path / 'cwd' / 'data'}): no such folder"
    assert lines[5] == f"  5. ./data/kaggle ({tmp_path / 'cwd' / 'data' / 'kaggle'}): no such folder"
    assert lines[6] == f"  6. ./data/synthetic-demo ({tmp_path / 'cwd' / 'data' / 'synthetic-demo'}): no such folder"
    assert "fastslow kaggle download" in msg
    assert "fastslow data synth --scale demo --out data/synthetic-demo" in msg
    assert "--data DIR or set FASTSLOW_DATA=DIR" in msg


def test_zero_normalizer_in_a_train_file(tmp_path: Path):
    err = raises(broken_tile(tmp_path, config_runtime_normalizers=np.array([100, 0, 50], np.int64)))
    assert (err.key, err.expected, err.found) == ("config_runtime_normalizers", "normalizers > 0 ns",
                                                  "0 at config 1 (1 in all)")


def _rewritten_train_file(tiny_world: Path, tmp_path: Path, c: Collection,
                          change: Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]]
                          ) -> tuple[Path, Path, dict[str, np.ndarray]]:
    """The first train graph of ``c`` copied into a data root's tree under ``tmp_path`` and rewritten by
    ``np.savez`` with the members ``change`` returns: ``(original, copy, the arrays written)``."""
    import shutil

    from competition.dataroot import find_data_root, list_graphs
    from competition.npzio import NpzReader

    original = list_graphs(find_data_root(tiny_world), c, Split.TRAIN)[0]
    folder = tmp_path / "npz" / Path(*c.value.split(":")) / "train"
    folder.mkdir(parents=True)
    copy = Path(shutil.copy(original, folder / original.name))
    with NpzReader(copy) as r:
        arrays = {k: r.load(k) for k in r.keys()}
    arrays.update(change(arrays))
    with open(copy, "wb") as f:
        np.savez(f, **arrays)
    return original, copy, arrays


def test_what_numpy_writes_reads_as_the_format_says(tiny_world: Path, tmp_path: Path):
    """A 1-D ``node_splits`` (the official featurizer's) and Fortran-ordered members (numpy's ``savez`` of a
    transposed or column-selected array) read back as the C-ordered ``[1, S]`` arrays of the original."""
    from competition.npzio import NpzReader
    from competition.reader import load_graph

    c = Collection.LAYOUT_XLA_DEFAULT
    original, copy, arrays = _rewritten_train_file(tiny_world, tmp_path, c, lambda a: {
        "node_splits": a["node_splits"].reshape(-1), "node_feat": np.asfortranarray(a["node_feat"]),
        "edge_index": np.asfortranarray(a["edge_index"])})
    with NpzReader(copy) as r:
        assert r.info("node_splits").shape == (arrays["node_splits"].size,) and r.info("node_feat").fortran_order
    want, got = load_graph(original, c), load_graph(copy, c)
    assert got.node_splits.shape == want.node_splits.shape and got.node_splits.shape[0] == 1
    for key in ("node_splits", "node_feat", "edge_index", "node_opcode", "node_config_ids", "config_runtime"):
        np.testing.assert_array_equal(getattr(got, key), getattr(want, key))
        assert getattr(got, key).flags.c_contiguous
    np.testing.assert_array_equal(got.config_features(), want.config_features())


def test_a_fortran_ordered_node_config_feat_streams_from_a_c_ordered_copy(tiny_world: Path, tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch):
    """Its rows are not stored together: the reader copies it to C order in passes of ``convert_bytes`` of rows,
    each one forward pass over the member, and streams rows from the copy, which is removed when the reader
    closes. Every read gives the original's values."""
    from competition.npzio import NpzReader
    from competition.reader import load_graph

    c = Collection.LAYOUT_XLA_DEFAULT
    original, copy, arrays = _rewritten_train_file(tiny_world, tmp_path, c, lambda a: {
        "node_config_feat": np.asfortranarray(a["node_config_feat"])})
    want = np.ascontiguousarray(arrays["node_config_feat"])
    row_bytes = int(np.prod(want.shape[1:])) * want.itemsize
    opened: list[str] = []
    real_open = NpzReader._open_member

    def counting(self, key):
        opened.append(key)
        return real_open(self, key)

    monkeypatch.setattr(NpzReader, "_open_member", counting)
    with NpzReader(copy, convert_bytes=3 * row_bytes, block_bytes=2 * want.shape[0] * want.itemsize) as r:
        assert r.info("node_config_feat").fortran_order
        rows = np.array([5, 0, 7, 7, want.shape[0] - 1])
        np.testing.assert_array_equal(r.load_rows("node_config_feat", rows), want[rows])
        passes = opened.count("node_config_feat") - 2  # less the header read and the first open of load_rows
        assert passes == -(-want.shape[0] // 3)  # one pass per 3 rows
        np.testing.assert_array_equal(np.concatenate([b for _, b in r.iter_blocks("node_config_feat", 4)]), want)
        np.testing.assert_array_equal(np.concatenate([b for _, b in r.iter_rows("node_config_feat", [1, 2, 9])]),
                                      want[[1, 2, 9]])
        temp = r.c_ordered_copy("node_config_feat")
        # Made once per reader: the two later reads opened the member for its header only.
        assert temp.is_file() and opened.count("node_config_feat") == passes + 2 + 2
    assert not temp.exists()
    got = load_graph(copy, c)
    np.testing.assert_array_equal(got.config_features(), load_graph(original, c).config_features())
