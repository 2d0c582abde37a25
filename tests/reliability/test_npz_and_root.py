"""npz files and the data root (issue 50): an npz is bounded by its zip directory and its members' ``.npy`` headers
before anything is inflated, its zip directory is checked (no member named twice, none encrypted), and nothing is
read outside the data root. Each case ends in one line naming the file (and the member), the limit and the value:
exit 2 for the commands that read the file, and the file listed among the problems (exit 1) by ``data validate``.

The zip bombs are built cheaply: a deflate block of zeros made once and repeated (each block self-contained after a
full flush), so a 1.6 MB file inflates to 1.68 GB; they are read in a process of their own under an address-space
limit and a timeout.
"""

from __future__ import annotations

import io
import os
import re
import shutil
import struct
import time
import zipfile
import zlib
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pytest

from competition import limits
from competition.collections import Collection, Split
from competition.dataroot import find_data_root, list_graphs
from competition.errors import DataFileError
from competition.npzio import NpzReader
from fastslow.cli import EXIT_ERROR, EXIT_OK, EXIT_PROBLEMS
from tests.reliability.helpers import limited, one_line, run, snapshot

TILE = Collection.TILE_XLA
XR = Collection.LAYOUT_XLA_RANDOM
BOMB_NODES = 3_000_000  # the bomb: node_feat of 1.68 GB in a 1.6 MB file


# -- writing zip files by hand: any declared size, flag or compressed stream ------------------------------------------


@dataclass(frozen=True)
class Member:
    """One zip member as written: its raw deflate stream, and what the zip directory says of it."""

    name: str
    stream: bytes
    size: int  # the uncompressed size the directory declares
    crc: int
    flags: int = 0
    method: int = 8  # deflate


def member(key: str, array: np.ndarray) -> Member:
    """``array`` as numpy writes it: an honest ``key.npy`` member."""
    buf = io.BytesIO()
    np.lib.format.write_array(buf, np.asarray(array), allow_pickle=False)
    data = buf.getvalue()
    c = zlib.compressobj(6, zlib.DEFLATED, -15)
    return Member(f"{key}.npy", c.compress(data) + c.flush(), len(data), zlib.crc32(data))


def _header(shape: tuple[int, ...], dtype: str) -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": dtype, "fortran_order": False, "shape": shape})
    return buf.getvalue()


def header_only(key: str, shape: tuple[int, ...], dtype: str) -> Member:
    """A member holding a header and no data, the directory declaring just the header."""
    head = _header(shape, dtype)
    c = zlib.compressobj(6, zlib.DEFLATED, -15)
    return Member(f"{key}.npy", c.compress(head) + c.flush(), len(head), zlib.crc32(head))


def bomb(key: str, shape: tuple[int, ...], dtype: str = "<f4", *, zeros: int | None = None,
         declared: int | None = None) -> Member:
    """A member whose header declares ``shape`` and whose stream inflates to that header and ``zeros`` zero bytes
    (default: what the shape holds), in a few kB a 1.68 MB block; the directory declares ``declared`` bytes (default:
    what the stream inflates to). The CRC is left at 0: nothing may read that far."""
    head = _header(shape, dtype)
    zeros = int(np.prod(shape)) * np.dtype(dtype).itemsize if zeros is None else zeros
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    parts = [c.compress(head) + c.flush(zlib.Z_FULL_FLUSH)]
    block = 1_680_000
    whole, rest = divmod(zeros, block)
    for size, count in ((block, whole), (rest, 1 if rest else 0)):
        if count:
            fresh = zlib.compressobj(9, zlib.DEFLATED, -15)  # no reference before its start: repeatable
            parts.append((fresh.compress(bytes(size)) + fresh.flush(zlib.Z_FULL_FLUSH)) * count)
    parts.append(zlib.compressobj(9, zlib.DEFLATED, -15).flush())  # the final, empty block
    return Member(f"{key}.npy", b"".join(parts), len(head) + zeros if declared is None else declared, 0)


class _Counting:
    """A zlib decompressor that counts the bytes it inflates."""

    def __init__(self, inner, counter: list[int]) -> None:
        self._inner, self._counter = inner, counter

    def decompress(self, data: bytes, max_length: int = 0) -> bytes:
        out = self._inner.decompress(data, max_length)
        self._counter[0] += len(out)
        return out

    def __getattr__(self, name: str):
        return getattr(self._inner, name)


@pytest.fixture()
def inflated(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """``[n]``: the bytes every zip member read in this test inflated (zipfile's deflate decompressor, counted)."""
    counter = [0]
    real = zlib.decompressobj
    monkeypatch.setattr(zlib, "decompressobj", lambda *a, **k: _Counting(real(*a, **k), counter))
    return counter


def write_zip(path: Path, members: list[Member]) -> Path:
    """A zip of ``members`` in order (duplicates kept), with exactly the sizes and flags they declare."""
    out = bytearray()
    central = bytearray()
    for m in members:
        name = m.name.encode()
        offset = len(out)
        fixed = struct.pack("<HHHHHIII", 20, m.flags, m.method, 0, 0x21, m.crc, len(m.stream), m.size)
        out += b"PK\x03\x04" + fixed + struct.pack("<HH", len(name), 0) + name + m.stream
        central += (b"PK\x01\x02" + struct.pack("<H", 20) + fixed
                    + struct.pack("<HHHHHII", len(name), 0, 0, 0, 0, 0o600 << 16, offset) + name)
    end = struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, len(members), len(members), len(central), len(out), 0)
    path.write_bytes(bytes(out + central + end))
    return path


def members_of(path: Path) -> list[Member]:
    """Every member of an npz, as honest :class:`Member` s."""
    with NpzReader(path) as r:
        return [member(k, r.load(k)) for k in r.keys()]


def swap(members: list[Member], new: Member) -> list[Member]:
    """``members`` with the one of ``new``'s name replaced by it."""
    return [new if m.name == new.name else m for m in members]


# -- commands ---------------------------------------------------------------------------------------------------------


@pytest.fixture()
def world(tiny_world: Path, tmp_path: Path) -> Path:
    """A copy of the tiny world, to damage."""
    return Path(shutil.copytree(tiny_world, tmp_path / "world", symlinks=True))


def first(world: Path, collection: Collection, split: Split) -> Path:
    return list_graphs(find_data_root(world), collection, split)[0]


def validate(world: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, list[str]]:
    """``data validate``: its exit code and the lines naming problems (the summary left out)."""
    code, out, err = run(["data", "validate", "--data", world, "--no-progress", "--quick"], capsys)
    assert err == "" and "Traceback" not in out, err
    lines = out.splitlines()
    assert re.fullmatch(r"\d+ files checked, \d+ with problems.*", lines[-1]), lines
    return code, lines[:-1]


def stats(world: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code, _, err = run(["data", "stats", world, "--no-progress", "--collections", TILE.value, XR.value], capsys)
    return code, err


def train(world: Path, collection: Collection, tmp_path: Path, capsys: pytest.CaptureFixture[str]
          ) -> tuple[int, str, Path]:
    runs = tmp_path / "runs"
    code, _, err = run(["train", "--model", "gbdt", "--param", "n_estimators=2", "--runs-dir", runs, "--collections",
                        collection.value, "--data", world, "--no-progress"], capsys)
    return code, err, runs


def refused(code: int, err: str) -> str:
    """The one line of a command refused with exit 2."""
    assert code == EXIT_ERROR, err
    line = one_line(err)
    assert line.startswith("error: "), line
    return line


# -- 2. zip bombs: bounded by the header and the zip directory before inflating ------------------------------------


def test_a_zip_bomb_is_refused_from_its_header_in_bounded_memory(world: Path, tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]):
    path = first(world, TILE, Split.TRAIN)
    write_zip(path, swap(members_of(path), bomb("node_feat", (BOMB_NODES, 140))))
    assert path.stat().st_size < 3 * 2**20  # a small file ...
    assert declared_sizes(path)["node_feat.npy"] > 1.6e9  # ... that inflates to gigabytes
    before = snapshot(world)
    expected = (f"{path} [node_feat]: expected a size within fastslow's bounds on real data; found 3,000,000 nodes, "
                "more than the limit of 500,000 (MAX_GRAPH_NODES) (shape (3000000, 140))")
    # In a process of its own under 1.5 GB: inflated, node_feat alone would take 1.68 GB.
    t0 = time.perf_counter()
    done = limited(["data", "validate", "--data", world, "--no-progress"], memory=1.5, timeout=60, cwd=tmp_path)
    assert time.perf_counter() - t0 < 30
    assert done.returncode == EXIT_PROBLEMS and done.stderr == "", done.stdout + done.stderr
    assert [line for line in done.stdout.splitlines() if str(path) in line] == [f"{TILE.value}: {expected}"]
    # The other readers go through the same opener: refused from the header, nothing inflated.
    assert refused(*stats(world, capsys)) == f"error: {expected}"
    code, err, runs = train(world, TILE, tmp_path, capsys)
    assert refused(code, err) == f"error: {expected}"
    assert snapshot(world) == before and not list(runs.rglob("model.json"))


def declared_sizes(path: Path) -> dict[str, int]:
    """The uncompressed sizes the zip directory of ``path`` declares, by member name."""
    with zipfile.ZipFile(path) as zf:
        return {i.filename: i.file_size for i in zf.infolist()}


def _consistent_tile(nodes: int) -> list[Member]:
    """A tile graph of ``nodes`` nodes whose every member agrees with the others (node_feat left to the caller)."""
    return [member("node_opcode", np.full(nodes, 2, np.uint8)),
            member("edge_index", np.array([[1, 0]], np.int64)),
            member("config_feat", np.ones((3, 24), np.float32)),
            member("config_runtime", np.array([3, 2, 1], np.int64)),
            member("config_runtime_normalizers", np.ones(3, np.int64))]


def test_a_declared_size_that_lies_is_stopped_while_inflating(world: Path, tmp_path: Path):
    """The header and the directory agree on 40,000 nodes (22 MB), but the stream goes on to 1.68 GB: reading stops
    at the declared size, and the check of the member's CRC refuses it."""
    path = first(world, TILE, Split.TRAIN)
    nodes = 40_000
    honest = len(_header((nodes, 140), "<f4")) + nodes * 140 * 4
    lying = bomb("node_feat", (nodes, 140), zeros=BOMB_NODES * 140 * 4, declared=honest)
    write_zip(path, [lying, *_consistent_tile(nodes)])
    done = limited(["data", "validate", "--data", world, "--no-progress", "--collections", TILE.value],
                   memory=1.5, timeout=60, cwd=tmp_path)
    assert done.returncode == EXIT_PROBLEMS and "Traceback" not in done.stderr, done.stdout + done.stderr
    named = [line for line in done.stdout.splitlines() if str(path) in line]
    assert len(named) == 1 and "[node_feat]" in named[0] and "CRC" in named[0], done.stdout


def test_a_directory_size_other_than_the_header_is_refused_before_inflating(tmp_path: Path, inflated: list[int]):
    nodes = 40_000
    # The directory declares the 1.68 GB the stream holds; the header, 40,000 nodes.
    path = write_zip(tmp_path / "x.npz", [bomb("node_feat", (nodes, 140), zeros=BOMB_NODES * 140 * 4)])
    with NpzReader(path) as r, pytest.raises(DataFileError) as caught:
        r.info("node_feat")
    assert 0 < inflated[0] < 2**20  # the header (counted), not the data
    assert str(caught.value) == (
        f"{path} [node_feat]: expected 22,400,000 bytes of array data ({nodes}, 140) float32 after its header, as "
        "numpy writes; found 1,680,000,000 bytes in the zip directory's size of the member: the directory and the "
        "header disagree")
    # and a directory that declares less than the header does: truncated, before reading
    data = _header((nodes, 140), "<f4") + bytes(1000)
    c = zlib.compressobj(6, zlib.DEFLATED, -15)
    path = write_zip(tmp_path / "y.npz", [Member("node_feat.npy", c.compress(data) + c.flush(), len(data),
                                                 zlib.crc32(data))])
    with NpzReader(path) as r, pytest.raises(DataFileError, match=r"\[node_feat\]: expected 22400000 bytes of "
                                                                  r"array data .*; found only \d+ bytes \(truncated\)"):
        r.load("node_feat")


@dataclass(frozen=True)
class Bound:
    key: str
    shape: tuple[int, ...]
    found: str


BOUNDS = [
    Bound("node_feat", (limits.MAX_GRAPH_NODES + 1, 140), "500,001 nodes, more than the limit of 500,000 "
                                                          "(MAX_GRAPH_NODES)"),
    Bound("node_opcode", (BOMB_NODES,), "3,000,000 nodes, more than the limit of 500,000 (MAX_GRAPH_NODES)"),
    Bound("node_config_ids", (10**6,), "1,000,000 configurable nodes, more than the limit of 500,000 "
                                       "(MAX_GRAPH_NODES)"),
    Bound("node_splits", (1, 10**6), "1,000,000 boundaries, more than the limit of 500,001 (MAX_GRAPH_NODES + 1)"),
    Bound("edge_index", (limits.MAX_GRAPH_EDGES + 1, 2), "16,000,001 edges, more than the limit of 16,000,000 "
                                                         "(MAX_GRAPH_EDGES)"),
    Bound("config_runtime", (limits.MAX_GRAPH_CONFIGS + 1,), "1,000,001 configs, more than the limit of 1,000,000 "
                                                             "(MAX_GRAPH_CONFIGS)"),
    Bound("config_feat", (2 * 10**6, 24), "2,000,000 configs, more than the limit of 1,000,000 (MAX_GRAPH_CONFIGS)"),
    Bound("config_runtime_normalizers", (10**7,), "10,000,000 configs, more than the limit of 1,000,000 "
                                                  "(MAX_GRAPH_CONFIGS)"),
    Bound("config_runtime_noiseless", (10**7,), "10,000,000 configs, more than the limit of 1,000,000 "
                                                "(MAX_GRAPH_CONFIGS)"),
    Bound("node_config_feat", (10**6 + 1, 2, 18), "1,000,001 configs, more than the limit of 1,000,000 "
                                                  "(MAX_GRAPH_CONFIGS)"),
    Bound("node_config_feat", (100_000, 1001, 18), "100,100,000 cells (configs x configurable nodes), more than the "
                                                   "limit of 100,000,000 (MAX_LAYOUT_CELLS)"),
    Bound("provenance", (2**33,), "68,719,476,736 bytes, more than the limit of 8,589,934,592 "
                                  "(MAX_NPZ_MEMBER_BYTES)"),
    Bound("node_feat", (2**62, 2**62), "4,611,686,018,427,387,904 nodes, more than the limit of 500,000 "
                                       "(MAX_GRAPH_NODES)"),
]


@pytest.mark.parametrize("bound", BOUNDS, ids=[f"{b.key}{list(b.shape)}" for b in BOUNDS])
def test_every_member_is_bounded_by_its_header(bound: Bound, tmp_path: Path):
    """Each member of the format (graph files and secret files), from the header alone: the directory here declares
    only the header, so anything read past it would fail otherwise."""
    dtype = "<i8" if "runtime" in bound.key or bound.key == "provenance" else "<f4"
    path = write_zip(tmp_path / "x.npz", [header_only(bound.key, bound.shape, dtype)])
    with NpzReader(path) as r, pytest.raises(DataFileError) as caught:
        r.info(bound.key)
    assert str(caught.value).startswith(f"{path} [{bound.key}]: expected a size within fastslow's bounds on real "
                                        f"data; found {bound.found} (shape"), caught.value


def test_arrays_are_bounded_before_they_are_written(tmp_path: Path):
    """What ``featurize`` checks before writing (:func:`~competition.graphfile.validate_arrays`): the same bounds,
    so that no file is written that the readers refuse."""
    from competition.graphfile import validate_arrays

    path = tmp_path / "npz" / "tile" / "xla" / "train" / "x.npz"
    arrays = {"node_feat": np.zeros((2, 140), np.float32), "node_opcode": np.zeros(limits.MAX_GRAPH_NODES + 1, np.uint8),
              "edge_index": np.array([[1, 0]]), "config_feat": np.ones((1, 24), np.float32),
              "config_runtime": np.ones(1, np.int64), "config_runtime_normalizers": np.ones(1, np.int64)}
    assert [str(p) for p in validate_arrays(arrays, path)] == [
        f"{path} [node_opcode]: expected a size within fastslow's bounds on real data; found 500,001 nodes, more than "
        "the limit of 500,000 (MAX_GRAPH_NODES) (shape (500001,))"]
    assert not path.exists()


def test_a_full_scale_member_is_opened_from_its_header_alone(tmp_path: Path, inflated: list[int]):
    """Real-size files cost nothing to check: a 3.6 GB node_config_feat (50 million cells, twice the largest real
    file's) in a few MB opens, and its header reads, without inflating its data."""
    shape = (1000, 50_000, 18)
    path = write_zip(tmp_path / "big.npz", [bomb("node_config_feat", shape)])
    with NpzReader(path) as r:
        assert r.info("node_config_feat").shape == shape
    assert 0 < inflated[0] < 2**20  # the header (counted), not the data


def test_the_zip_directory_is_bounded_before_any_member_opens(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    path = write_zip(tmp_path / "x.npz", [member("node_opcode", np.zeros(100, np.uint8))])
    monkeypatch.setattr("competition.npzio.MAX_NPZ_MEMBER_BYTES", 64)
    with pytest.raises(DataFileError) as caught:
        NpzReader(path).open()
    assert str(caught.value) == (f"{path} [node_opcode]: expected a size within fastslow's bounds on real data; found "
                                 "228 bytes, more than the limit of 64 (MAX_NPZ_MEMBER_BYTES), declared in the zip "
                                 "directory")


def test_a_member_read_whole_is_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    path = write_zip(tmp_path / "x.npz", [member("node_feat", np.zeros((10, 140), np.float32))])
    monkeypatch.setattr("competition.npzio.MAX_NPZ_LOAD_BYTES", 1000)
    with NpzReader(path) as r:
        assert r.info("node_feat").shape == (10, 140)
        with pytest.raises(DataFileError, match=r"\[node_feat\]: expected a member small enough to read whole .*; "
                                                r"found 5,600 bytes, more than the limit of 1,000 "
                                                r"\(MAX_NPZ_LOAD_BYTES\)"):
            r.load("node_feat")
        assert r.load_rows("node_feat", [3]).shape == (1, 140)  # streamed rows are not read whole


def test_negative_dimensions_are_refused(tmp_path: Path):
    path = write_zip(tmp_path / "x.npz", [header_only("node_feat", (-5, 3), "<f4")])
    with NpzReader(path) as r, pytest.raises(DataFileError, match=r"expected non-negative dimensions; found shape "
                                                                  r"\(-5, 3\)"):
        r.info("node_feat")


# -- 8. encrypted members, and other zip features numpy never writes ------------------------------------------------


def test_an_encrypted_member_is_one_line_naming_file_and_member(world: Path, tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]):
    path = first(world, TILE, Split.TRAIN)
    write_zip(path, [replace(m, flags=1) if m.name == "config_runtime.npy" else m for m in members_of(path)])
    before = snapshot(world)
    expected = (f"{path} [config_runtime]: expected an unencrypted member (numpy writes no other); found a member "
                "marked encrypted in the zip directory")
    code, lines = validate(world, capsys)
    assert code == EXIT_PROBLEMS and lines == [f"{TILE.value}: {expected}"], lines
    assert refused(*stats(world, capsys)) == f"error: {expected}"
    code, err, runs = train(world, TILE, tmp_path, capsys)
    assert refused(code, err) == f"error: {expected}"
    assert not list(runs.rglob("model.json")) and snapshot(world) == before


@pytest.mark.parametrize(("change", "found"), [
    ({"flags": 0x20}, "a member marked as patched data or strongly encrypted in the zip directory"),
    ({"flags": 0x41}, "a member marked encrypted in the zip directory"),
    ({"method": 12}, "zip compression method 12"),
    ({"method": 14}, "zip compression method 14"),
])
def test_zip_features_numpy_never_writes_are_refused(change: dict[str, int], found: str, tmp_path: Path):
    path = write_zip(tmp_path / "x.npz", [replace(member("node_opcode", np.zeros(4, np.uint8)), **change)])
    with pytest.raises(DataFileError) as caught:
        NpzReader(path).open()
    assert str(caught.value).startswith(f"{path} [node_opcode]: expected ") and str(caught.value).endswith(found)


# -- two members of one name --------------------------------------------------------------------------------------


def test_two_members_of_one_name_are_refused(world: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    path = first(world, TILE, Split.TRAIN)
    members = members_of(path)
    # numpy would read the last: nodes of another graph, in a file whose first node_feat validates
    write_zip(path, [*members, member("node_feat", np.zeros((len(members), 140), np.float32))])
    before = snapshot(world)
    expected = (f"{path} [node_feat]: expected one member of each name; found two or more members named 'node_feat' "
                "(numpy would read only the last)")
    code, lines = validate(world, capsys)
    assert code == EXIT_PROBLEMS and lines == [f"{TILE.value}: {expected}"], lines
    code, err, runs = train(world, TILE, tmp_path, capsys)
    assert refused(code, err) == f"error: {expected}"
    assert not list(runs.rglob("model.json")) and snapshot(world) == before


def test_a_key_with_and_without_its_suffix_is_one_name(tmp_path: Path):
    a = member("node_opcode", np.zeros(4, np.uint8))
    path = write_zip(tmp_path / "x.npz", [a, replace(a, name="node_opcode")])
    with pytest.raises(DataFileError, match=r"found two or more members named 'node_opcode'"):
        NpzReader(path).open()


def test_member_names_are_escaped_in_messages(tmp_path: Path):
    a = member("node_opcode", np.zeros(4, np.uint8))
    path = write_zip(tmp_path / "x.npz", [a, replace(a, name="evil\x1b[2J\nname.npy", flags=1)])
    with pytest.raises(DataFileError) as caught:
        NpzReader(path).open()
    assert "\x1b" not in str(caught.value) and "\n" not in str(caught.value)
    assert "evil\\x1b[2J\\nname" in str(caught.value)


# -- submit: a bad file stops it before anything is replaced --------------------------------------------------------


def _bombed(world: Path, tmp_path: Path) -> Path:
    path = first(world, XR, Split.TEST)
    write_zip(path, swap(members_of(path), bomb("node_feat", (BOMB_NODES, 140))))
    return path


def _encrypted(world: Path, tmp_path: Path) -> Path:
    path = first(world, TILE, Split.TEST)
    write_zip(path, [replace(m, flags=1) if m.name == "node_opcode.npy" else m for m in members_of(path)])
    return path


def _twice(world: Path, tmp_path: Path) -> Path:
    path = first(world, XR, Split.TEST)
    members = members_of(path)
    write_zip(path, [*members, next(m for m in members if m.name == "config_runtime.npy")])
    return path


def _linked_out(world: Path, tmp_path: Path) -> Path:
    path = first(world, TILE, Split.TEST)
    elsewhere = tmp_path / "elsewhere.npz"
    shutil.move(path, elsewhere)
    path.symlink_to(elsewhere)
    return path


@pytest.fixture(scope="module")
def good_submission(tiny_world: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An output folder holding the submission ``fastslow submit`` writes from the clean world."""
    base = tmp_path_factory.mktemp("good-submission")
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(base)
        from fastslow.cli import main

        assert main(["submit", "--data", str(tiny_world), "--models", "default-first", "--out-dir", "out",
                     "--no-progress"]) == EXIT_OK
    return base / "out"


@pytest.mark.parametrize("damage", [_bombed, _encrypted, _twice, _linked_out], ids=lambda d: d.__name__[1:])
def test_submit_stops_at_a_bad_file_and_keeps_the_previous_submission(
        damage, world: Path, good_submission: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch):
    monkeypatch.chdir(tmp_path)
    path = damage(world, tmp_path)
    out = Path(shutil.copytree(good_submission, tmp_path / "out"))
    # settings-<model>.json records the settings of the latest run, whatever its end (here another data root's)
    kept = {name for name in snapshot(out) if not name.startswith("settings-")}
    before = {name: sha for name, sha in snapshot(out).items() if name in kept}
    assert {"submission.csv", "leaderboard.csv"} <= kept, kept
    code, _, err = run(["submit", "--data", world, "--models", "default-first", "--out-dir", out, "--no-progress"],
                       capsys)
    line = refused(code, err)
    assert line.startswith(f"error: {path}"), line
    assert {name: sha for name, sha in snapshot(out).items() if name in kept} == before


# -- data calibration -----------------------------------------------------------------------------------------------


def test_calibration_without_train_or_valid_graphs_measures_nothing_and_says_so(
        world: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    root = find_data_root(world)
    for c in Collection:
        for s in (Split.TRAIN, Split.VALID):
            shutil.rmtree(root.collection_dir(c, s), ignore_errors=True)
    cache = tmp_path / "cache"
    code, out, err = run(["data", "calibration", "--data", world, "--cache-dir", cache], capsys)
    assert refused(code, err) == (f"error: data root {world}: no train or valid graphs in any collection, so no "
                                  "calibration figure can be measured (the test split's runtimes are hidden)")
    assert out == "" and "all in range" not in out and not cache.exists()


def test_calibration_cache_dir_that_is_a_file(world: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                              monkeypatch: pytest.MonkeyPatch):
    monkeypatch.chdir(tmp_path)
    Path("a_file").write_text("mine\n")
    code, out, err = run(["data", "calibration", "--data", world, "--cache-dir", "a_file"], capsys)
    assert refused(code, err) == ("error: --cache-dir a_file: is a file, not a folder (the featurized real records "
                                  "are kept in a folder)")
    assert Path("a_file").read_text() == "mine\n" and out == ""
    code, out, err = run(["data", "calibration", "--data", world, "--cache-dir", "a_file/cache"], capsys)
    assert refused(code, err) == ("error: --cache-dir a_file/cache: a_file is a file, not a folder (the featurized "
                                  "real records are kept in a folder)")
    assert Path("a_file").read_text() == "mine\n" and out == ""


# -- reads outside the data root ------------------------------------------------------------------------------------


def test_a_graph_file_linking_out_of_the_root_is_refused(world: Path, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]):
    path = first(world, TILE, Split.TRAIN)
    elsewhere = tmp_path / "elsewhere" / "other.npz"
    elsewhere.parent.mkdir()
    shutil.move(path, elsewhere)
    path.symlink_to(elsewhere)
    before = snapshot(world) | snapshot(elsewhere.parent)
    expected = (f"{path}: expected a graph file inside the data root {world}; found a path leading to {elsewhere}, "
                "outside it, through a symbolic link (fastslow reads nothing outside the data root: copy the file "
                "into it, or point --data at where it lies)")
    code, lines = validate(world, capsys)
    assert code == EXIT_PROBLEMS and lines == [expected], lines
    assert refused(*stats(world, capsys)) == f"error: {expected}"
    code, err, runs = train(world, TILE, tmp_path, capsys)
    assert refused(code, err) == f"error: {expected}"
    assert not runs.exists() or not list(runs.rglob("model.json"))
    assert snapshot(world) | snapshot(elsewhere.parent) == before


def test_a_split_folder_linking_out_of_the_root_is_refused(world: Path, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]):
    folder = find_data_root(world).collection_dir(XR, Split.TEST)
    shutil.rmtree(folder)
    folder.symlink_to("/etc")
    expected = f"{folder}: expected a folder inside the data root {world}; found a path leading to /etc, outside it"
    code, err = stats(world, capsys)
    assert refused(code, err).startswith(f"error: {expected}"), err
    code, lines = validate(world, capsys)
    assert code == EXIT_PROBLEMS and [line for line in lines if str(folder) in line][0].startswith(expected), lines
    code, out, err = run(["data", "where", "--data", world], capsys)
    assert refused(code, err).startswith(f"error: {expected}")


def test_a_link_inside_the_root_to_another_place_inside_it_is_followed(world: Path, capsys: pytest.CaptureFixture[str]):
    path = first(world, TILE, Split.TRAIN)
    kept = world / "kept" / path.name
    kept.parent.mkdir()
    shutil.move(path, kept)
    path.symlink_to(os.path.relpath(kept, path.parent))
    code, lines = validate(world, capsys)
    assert code == EXIT_OK and lines == [], lines
    assert path in list_graphs(find_data_root(world), TILE, Split.TRAIN)


def test_a_secret_file_linking_out_of_the_root_is_refused(world: Path, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]):
    graph = first(world, XR, Split.TEST)
    secret = find_data_root(world).secret_file(XR, Split.TEST, graph.stem)
    assert secret is not None
    elsewhere = tmp_path / "secret.npz"
    shutil.move(secret, elsewhere)
    secret.symlink_to(elsewhere)
    code, lines = validate(world, capsys)
    assert code == EXIT_PROBLEMS and lines == [
        f"{secret}: expected a secret file inside the data root {world}; found a path leading to {elsewhere}, outside "
        "it, through a symbolic link (fastslow reads nothing outside the data root: copy the file into it, or point "
        "--data at where it lies)"], lines
