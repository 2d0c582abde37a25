"""Streaming npz I/O: round trips, determinism, atomic writes, streamed row reads."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from competition.errors import DataFileError
from competition.npzio import NpzReader, StreamedArray, write_npz


def _blocks(a: np.ndarray, step: int):
    return (a[i : i + step] for i in range(0, a.shape[0], step))


def test_round_trip_with_numpy_and_zero_d(tmp_path: Path):
    a = np.arange(5 * 3 * 18, dtype=np.float32).reshape(5, 3, 18)
    path = write_npz(tmp_path / "x.npz", {
        "big": StreamedArray(a.shape, np.dtype(np.float32), _blocks(a, 2)),
        "scalar": np.asarray(2.5),
        "runtime": np.array([7, 2**40], dtype=np.int64),
    })
    with np.load(path) as z:
        assert list(z.keys()) == ["big", "scalar", "runtime"]
        assert np.array_equal(z["big"], a)
        assert z["scalar"].shape == () and z["scalar"] == 2.5
        assert z["runtime"].dtype == np.int64 and z["runtime"][1] == 2**40
    numpy_file = tmp_path / "np.npz"
    np.savez_compressed(numpy_file, big=a)
    with NpzReader(numpy_file) as r:
        assert np.array_equal(r.load_rows("big", [4, 0]), a[[4, 0]])


def test_same_arrays_same_bytes(tmp_path: Path):
    arrays = {"a": np.arange(100, dtype=np.int64), "b": np.ones((4, 140), np.float32)}
    h = [hashlib.sha256(write_npz(tmp_path / f"{i}.npz", arrays).read_bytes()).hexdigest() for i in range(2)]
    assert h[0] == h[1]


def test_failed_write_leaves_nothing_and_keeps_old_file(tmp_path: Path):
    path = write_npz(tmp_path / "g.npz", {"a": np.zeros(3)})
    before = path.read_bytes()

    def broken():
        yield np.zeros((2, 4), np.float32)
        raise RuntimeError("interrupted")

    with pytest.raises(RuntimeError, match="interrupted"):
        write_npz(path, {"a": StreamedArray((4, 4), np.dtype(np.float32), broken())})
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["g.npz"]


@pytest.mark.parametrize("where", ["opening a member", "writing a member"])
def test_an_interrupted_write_raises_the_interrupt_and_leaves_no_complaint(tmp_path: Path, where: str,
                                                                           monkeypatch: pytest.MonkeyPatch):
    """A signal that lands while a member is opened (the zip then holds a write handle that never came to be)
    or written ends the write with the interrupt itself, leaves no file, and nothing for the garbage collector
    to print at exit ("Exception ignored in ZipFile.__del__")."""
    import gc
    import sys
    import zipfile

    handle = zipfile._ZipWriteFile  # what ZipFile.open(..., "w") returns
    if where == "opening a member":
        def interrupted_open(self, *args, **kwargs):
            raise KeyboardInterrupt
        monkeypatch.setattr(handle, "__init__", interrupted_open)
    else:
        real_write = handle.write

        def interrupted_write(self, data):
            real_write(self, data)
            raise KeyboardInterrupt
        monkeypatch.setattr(handle, "write", interrupted_write)
    complaints: list[object] = []
    monkeypatch.setattr(sys, "unraisablehook", complaints.append)
    with pytest.raises(KeyboardInterrupt):
        write_npz(tmp_path / "a.npz", {"x": np.arange(1000)})
    gc.collect()
    assert complaints == [] and list(tmp_path.iterdir()) == []


def test_streamed_rows_must_match_declared_shape(tmp_path: Path):
    with pytest.raises(ValueError, match="blocks gave 2 rows, 3 declared"):
        write_npz(tmp_path / "s.npz", {"a": StreamedArray((3, 2), np.dtype(np.float32), [np.zeros((2, 2))])})
    assert not list(tmp_path.iterdir())


@settings(max_examples=40, deadline=None)
@given(rows=st.lists(st.integers(0, 49), max_size=30), block=st.integers(1, 2000))
def test_load_rows_equals_fancy_indexing(tmp_path_factory, rows, block):
    a = np.random.default_rng(0).normal(size=(50, 3, 4)).astype(np.float32)
    path = tmp_path_factory.getbasetemp() / "rows.npz"
    if not path.exists():
        write_npz(path, {"a": a})
    with NpzReader(path, block_bytes=block) as r:
        assert np.array_equal(r.load_rows("a", rows), a[rows])
        assert np.array_equal(r.load_rows("a", slice(3, 40, 5)), a[3:40:5])
        assert np.array_equal(np.concatenate([b for _, b in r.iter_blocks("a", 7)]), a)


def test_out_of_range_row_and_missing_member(tmp_path: Path):
    path = write_npz(tmp_path / "r.npz", {"a": np.zeros((4, 2), np.float32)})
    with NpzReader(path) as r:
        with pytest.raises(IndexError, match="row 4 out of range for 4 rows"):
            r.load_rows("a", [1, 4])
        with pytest.raises(DataFileError, match=r"\[b\]: expected member 'b'; found missing \(members: a\)"):
            r.load("b")


def test_truncated_member_data_is_named(tmp_path: Path):
    path = write_npz(tmp_path / "t.npz", {"a": np.random.default_rng(1).normal(size=(2000, 64)).astype(np.float32)})
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(DataFileError, match="t.npz.*truncated or corrupt"):
        NpzReader(path).load("a")
