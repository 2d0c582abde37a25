"""A catalogue of damaged data files, replayed end to end through the command line.

Each damage is a small named function that takes one npz file of a copy of the tiny world (or the world's root) and
damages it, returning the path a message must name. ``fastslow data validate`` must then exit with the documented
code and print, without a traceback, a line naming that file, the key and what is wrong; a representative subset is
also run through ``fastslow train`` and ``fastslow submit``, which must stop with one such line and leave the
previous submission as it was. Single damages of hand-built files are unit-tested in ``tests/test_reader.py``; this
module is the breadth: every class of damage, on tile and layout files, in the splits where it matters.
"""

from __future__ import annotations

import os
import re
import shutil
import struct
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from competition.collections import Collection, Split
from competition.dataroot import find_data_root, list_graphs
from competition.npzio import NpzReader
from fastslow.cli import EXIT_ERROR, EXIT_OK, EXIT_PROBLEMS, main

TILE = Collection.TILE_XLA
XD = Collection.LAYOUT_XLA_DEFAULT
XR = Collection.LAYOUT_XLA_RANDOM
ND = Collection.LAYOUT_NLP_DEFAULT
NR = Collection.LAYOUT_NLP_RANDOM
TRAIN, VALID, TEST = Split.TRAIN, Split.VALID, Split.TEST

Damage = Callable[[Path], Path]


# -- reading and rewriting members ---------------------------------------------------------------------------------


def _members(path: Path) -> dict[str, np.ndarray]:
    with NpzReader(path) as r:
        return {k: r.load(k) for k in r.keys()}


def _rewrite(path: Path, **changes: np.ndarray | None) -> None:
    """Rewrite ``path`` with some members replaced (``None``: removed), through numpy's own writer: unlike the
    toolkit's it writes anything numpy can, pickled object arrays included."""
    arrays = _members(path) | changes
    with open(path, "wb") as f:
        np.savez(f, **{k: v for k, v in arrays.items() if v is not None})


def _raw_member(path: Path, key: str, payload: Callable[[bytes], bytes]) -> None:
    """Replace the raw bytes of member ``key`` (its whole ``.npy`` file) by ``payload(old bytes)``."""
    with zipfile.ZipFile(path) as zf:
        members = [(info.filename, zf.read(info)) for info in zf.infolist()]
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in members:
            zf.writestr(name, payload(data) if name == f"{key}.npy" else data)


def _named(name: str, damage: Damage) -> Damage:
    damage.__name__ = damage.__qualname__ = name
    return damage


def _change(name: str, key: str, change: Callable[[np.ndarray], np.ndarray | None]) -> Damage:
    """A damage that replaces member ``key`` by ``change(its array)`` (a copy; ``None`` removes it)."""
    def damage(path: Path) -> Path:
        _rewrite(path, **{key: change(_members(path)[key].copy())})
        return path
    return _named(name, damage)


def _at(index: tuple[int, ...] | int, value: float) -> Callable[[np.ndarray], np.ndarray]:
    def put(a: np.ndarray) -> np.ndarray:
        a[index] = value
        return a
    return put


# -- the file as a whole -------------------------------------------------------------------------------------------


def truncated(path: Path) -> Path:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    return path


def empty_file(path: Path) -> Path:
    path.write_bytes(b"")
    return path


def not_a_zip(path: Path) -> Path:
    path.write_bytes(np.random.default_rng(0).bytes(4096))
    return path


def _flip_compressed(path: Path, info: zipfile.ZipInfo) -> Path:
    """Flip 16 bytes in the middle of a member's compressed data; the zip directory stays intact."""
    data = bytearray(path.read_bytes())
    name_len, extra_len = struct.unpack("<HH", data[info.header_offset + 26: info.header_offset + 30])
    middle = info.header_offset + 30 + name_len + extra_len + info.compress_size // 2
    for i in range(middle, middle + 16):
        data[i] ^= 0xFF
    path.write_bytes(bytes(data))
    return path


def corrupt_member(path: Path) -> Path:
    """The largest member's compressed data damaged."""
    with zipfile.ZipFile(path) as zf:
        return _flip_compressed(path, max(zf.infolist(), key=lambda i: i.compress_size))


def corrupt_node_config_feat(path: Path) -> Path:
    """The member that is only ever streamed, damaged."""
    with zipfile.ZipFile(path) as zf:
        return _flip_compressed(path, zf.getinfo("node_config_feat.npy"))


def not_npy_member(path: Path) -> Path:
    _raw_member(path, "edge_index", lambda _: b"edge list: see the wiki\n")
    return path


def short_member_data(path: Path) -> Path:
    """``config_runtime``'s header promises more values than its data holds."""
    _raw_member(path, "config_runtime", lambda data: data[:-8])
    return path


def folder_named_npz(path: Path) -> Path:
    path.unlink()
    path.mkdir()
    return path


def symlink_loop(path: Path) -> Path:
    path.unlink()
    path.symlink_to(path.name)
    return path


def broken_symlink(path: Path) -> Path:
    path.unlink()
    path.symlink_to("nowhere.npz")
    return path


def unreadable(path: Path) -> Path:
    path.chmod(0)
    return path


def hidden_resource_fork(path: Path) -> Path:
    fork = path.with_name("._" + path.name)
    fork.write_bytes(b"\x00\x05\x16\x07\x00\x02\x00\x00Mac OS X        ")
    return fork


pickled_member = _change("pickled_member", "node_opcode",
                         lambda a: np.array([{"opcode": int(v)} for v in a], dtype=object))
fortran_order = _change("fortran_order", "node_feat", np.asfortranarray)
fortran_node_config_feat = _change("fortran_node_config_feat", "node_config_feat", np.asfortranarray)

# -- one key: missing, dtype, dimensions, lengths ------------------------------------------------------------------

TILE_KEYS = ("node_feat", "node_opcode", "edge_index", "config_feat", "config_runtime", "config_runtime_normalizers")
LAYOUT_KEYS = ("node_feat", "node_opcode", "edge_index", "node_config_feat", "node_config_ids", "node_splits",
               "config_runtime")
MISSING = {key: _change(f"missing_{key}", key, lambda a: None) for key in dict.fromkeys(TILE_KEYS + LAYOUT_KEYS)}


def _as(key: str, dtype: str) -> Damage:
    label = {"float32": "float", "float64": "float64", "int32": "int", "int64": "int", "bool": "bool",
             "complex64": "complex", "str": "string"}[dtype]
    return _change(f"{key}_as_{label}", key, lambda a: a.astype(dtype))


edge_index_as_float = _as("edge_index", "float32")
node_config_ids_as_float = _as("node_config_ids", "float32")
node_opcode_as_float = _as("node_opcode", "float32")
config_runtime_as_float = _as("config_runtime", "float64")
node_feat_as_int = _as("node_feat", "int32")
config_feat_as_int = _as("config_feat", "int64")
node_config_feat_as_int = _as("node_config_feat", "int32")
node_feat_as_float64 = _as("node_feat", "float64")
node_opcode_as_bool = _as("node_opcode", "bool")
node_splits_as_bool = _as("node_splits", "bool")
node_feat_as_complex = _as("node_feat", "complex64")
config_runtime_as_string = _as("config_runtime", "str")

node_feat_1d = _change("node_feat_1d", "node_feat", lambda a: a.reshape(-1))
edge_index_1d = _change("edge_index_1d", "edge_index", lambda a: a.reshape(-1))
node_opcode_2d = _change("node_opcode_2d", "node_opcode", lambda a: a[None])
config_runtime_2d = _change("config_runtime_2d", "config_runtime", lambda a: a[:, None])
node_config_feat_2d = _change("node_config_feat_2d", "node_config_feat", lambda a: a.reshape(a.shape[0], -1))
node_splits_1d = _change("node_splits_1d", "node_splits", lambda a: a.reshape(-1))
config_runtime_scalar = _change("config_runtime_scalar", "config_runtime", lambda a: np.asarray(a[0]))

node_opcode_one_short = _change("node_opcode_one_short", "node_opcode", lambda a: a[:-1])
config_runtime_one_short = _change("config_runtime_one_short", "config_runtime", lambda a: a[:-1])
normalizers_one_long = _change("normalizers_one_long", "config_runtime_normalizers", lambda a: np.r_[a, a[-1]])
node_config_ids_one_long = _change("node_config_ids_one_long", "node_config_ids", lambda a: np.r_[a, a[-1] + 1])
node_feat_139_columns = _change("node_feat_139_columns", "node_feat", lambda a: a[:, :139])
config_feat_23_columns = _change("config_feat_23_columns", "config_feat", lambda a: a[:, :23])
node_config_feat_17_columns = _change("node_config_feat_17_columns", "node_config_feat", lambda a: a[..., :17])
edge_index_three_columns = _change("edge_index_three_columns", "edge_index", lambda a: np.c_[a, a[:, :1]])


def no_nodes(path: Path) -> Path:
    m = _members(path)
    _rewrite(path, node_feat=m["node_feat"][:0], node_opcode=m["node_opcode"][:0], edge_index=m["edge_index"][:0])
    return path


def no_configs(path: Path) -> Path:
    m = _members(path)
    _rewrite(path, **{k: m[k][:0] for k in ("config_feat", "node_config_feat", "config_runtime",
                                             "config_runtime_normalizers") if k in m})
    return path


def extra_member(path: Path) -> Path:
    _rewrite(path, provenance=np.arange(3))
    return path


def big_endian(path: Path) -> Path:
    """Every member in big-endian byte order: the same values, which ``numpy.load`` reads as such."""
    _rewrite(path, **{k: a.astype(a.dtype.newbyteorder(">")) for k, a in _members(path).items()})
    return path


# -- values --------------------------------------------------------------------------------------------------------

nan_in_node_feat = _change("nan_in_node_feat", "node_feat", _at((0, 3), np.nan))
inf_in_node_feat = _change("inf_in_node_feat", "node_feat", _at((-1, 0), -np.inf))
nan_in_config_feat = _change("nan_in_config_feat", "config_feat", _at((1, 2), np.nan))
inf_in_config_feat = _change("inf_in_config_feat", "config_feat", _at((0, 0), np.inf))
nan_in_node_config_feat = _change("nan_in_node_config_feat", "node_config_feat", _at((1, 0, 3), np.nan))
inf_in_node_config_feat = _change("inf_in_node_config_feat", "node_config_feat", _at((-1, -1, -1), np.inf))
nan_in_config_runtime = _change("nan_in_config_runtime", "config_runtime",
                                lambda a: _at(0, np.nan)(a.astype(np.float64)))
inf_in_config_runtime = _change("inf_in_config_runtime", "config_runtime",
                                lambda a: _at(-1, np.inf)(a.astype(np.float64)))

negative_runtime = _change("negative_runtime", "config_runtime", _at(1, -5))
zero_runtimes = _change("zero_runtimes", "config_runtime", np.zeros_like)
partly_zero_runtimes = _change("partly_zero_runtimes", "config_runtime", _at(1, 0))
zero_normalizers = _change("zero_normalizers", "config_runtime_normalizers", np.zeros_like)
negative_normalizer = _change("negative_normalizer", "config_runtime_normalizers", _at(0, -1))

edge_out_of_range = _change("edge_out_of_range", "edge_index", lambda a: _at((0, 0), a.max() + 1)(a))
negative_edge = _change("negative_edge", "edge_index", _at((0, 1), -1))
self_loop = _change("self_loop", "edge_index", lambda a: _at((0, 1), a[0, 0])(a))

tombstoned_opcode = _change("tombstoned_opcode", "node_opcode", _at(0, 97))
opcode_beyond_table = _change("opcode_beyond_table", "node_opcode", _at(1, 121))
opcode_too_wide = _change("opcode_too_wide", "node_opcode", lambda a: _at(2, 300)(a.astype(np.int32)))

config_id_out_of_range = _change("config_id_out_of_range", "node_config_ids", lambda a: _at(-1, 10**6)(a))
negative_config_id = _change("negative_config_id", "node_config_ids", _at(0, -1))
config_ids_unsorted = _change("config_ids_unsorted", "node_config_ids", lambda a: a[[1, 0, *range(2, a.size)]])
config_ids_duplicated = _change("config_ids_duplicated", "node_config_ids", lambda a: _at(1, a[0])(a))

splits_not_ending_at_n = _change("splits_not_ending_at_n", "node_splits", lambda a: _at((0, -1), a[0, -1] - 1)(a))
splits_not_starting_at_zero = _change("splits_not_starting_at_zero", "node_splits", _at((0, 0), 1))
splits_decreasing = _change("splits_decreasing", "node_splits",
                            lambda a: np.array([[0, a[0, -1], a[0, -1] - 1, a[0, -1]]], dtype=a.dtype))

layout_value_seven = _change("layout_value_seven", "node_config_feat", _at((0, 0, 0), 7))
layout_value_fraction = _change("layout_value_fraction", "node_config_feat", _at((1, 0, 2), 2.5))
layout_value_below_minus_one = _change("layout_value_below_minus_one", "node_config_feat", _at((-1, 0, 5), -2))


# -- the data root -------------------------------------------------------------------------------------------------


def _folder(world: Path, c: Collection, s: Split) -> Path:
    return find_data_root(world).collection_dir(c, s)


def _missing_split(c: Collection, s: Split) -> Damage:
    def damage(world: Path) -> Path:
        shutil.rmtree(_folder(world, c, s))
        return _folder(world, c, s)
    return _named(f"missing_{s.value}_split", damage)


def empty_split(world: Path) -> Path:
    d = _folder(world, XR, VALID)
    for p in d.iterdir():
        p.unlink()
    return d


def sample_omits_a_test_graph(world: Path) -> Path:
    sample = world / "sample_submission.csv"
    lines = sample.read_text().splitlines(keepends=True)
    sample.write_text("".join(line for line in lines if not line.startswith(f"{XD.value}:")))
    return _folder(world, XD, TEST)


def sample_lists_an_unknown_graph(world: Path) -> Path:
    sample = world / "sample_submission.csv"
    sample.write_text(sample.read_text() + f"{NR.value}:0123456789abcdef,0;1\n")
    return sample


def no_sample_submission(world: Path) -> Path:
    (world / "sample_submission.csv").unlink()
    return world / "sample_submission.csv"


def comma_in_name(world: Path) -> Path:
    p = list_graphs(find_data_root(world), ND, VALID)[0]
    return p.rename(p.with_name(p.stem.replace("_", ",", 1) + ".npz"))


def stray_text_file(world: Path) -> Path:
    p = _folder(world, TILE, TRAIN) / "README.txt"
    p.write_text("where these files came from\n")
    return p


def truncated_secret(world: Path) -> Path:
    p = list_graphs(find_data_root(world), XR, TEST)[0]
    return truncated(world / "secret" / XR.relpath / "test" / p.name)


# -- the catalogue -------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """One damage on one file (``on``: the first graph of that collection and split) or on the root (``None``).

    Attributes:
        problem: a regex that the output line naming the damaged path must match (``code`` 0: a note, or nothing).
        code: the exit code of ``fastslow data validate``.
        deep: the problem is found only with ``--deep`` (without it, validate exits 0).
    """

    damage: Damage
    on: tuple[Collection, Split] | None
    problem: str = ""
    code: int = EXIT_PROBLEMS
    deep: bool = False

    @property
    def name(self) -> str:
        where = "root" if self.on is None else f"{self.on[0].value}:{self.on[1].value}"
        return f"{self.damage.__name__}@{where}"


_DTYPE = r"expected dtype (float32|int64 \(also accepted: int32, int64, uint8\)); found dtype "
_INT = r"expected an integer dtype \(uint8; wider integers accepted\); found dtype "
# (The largest member may be node_config_feat, which is streamed: "expected rows ...".)
_CORRUPT = (r"\[\w+\]: expected (a \.npy header|array data .*|rows .*); found (unreadable header|corrupt compressed "
            r"data) "
            r"\(.*(decompressing|CRC)")
_ARCHIVE = r"expected a complete npz \(zip\) archive; found unreadable archive \(.*\); truncated or corrupt\?"


def _pair(damage: Damage, problem: str, tile: Split, layout: tuple[Collection, Split]) -> tuple[Case, Case]:
    """The same damage of a key that both kinds of file have, on a tile file and on a layout file."""
    return Case(damage, (TILE, tile), problem), Case(damage, layout, problem)


def _missing(key: str, on: tuple[Collection, Split]) -> Case:
    kind = on[0].kind
    return Case(MISSING[key], on, rf"\[{key}\]: expected member '{key}' \({kind} file\); found missing \(members: ")


CATALOGUE: list[Case] = [
    # the file as a whole
    Case(truncated, (TILE, TRAIN), _ARCHIVE),
    Case(truncated, (XD, VALID), _ARCHIVE),
    Case(empty_file, (TILE, TEST), _ARCHIVE),
    Case(empty_file, (NR, TRAIN), _ARCHIVE),
    Case(not_a_zip, (TILE, VALID), _ARCHIVE),
    Case(not_a_zip, (XR, TEST), _ARCHIVE),
    Case(corrupt_member, (TILE, TRAIN), _CORRUPT),
    Case(corrupt_member, (NR, TRAIN), _CORRUPT),
    Case(corrupt_node_config_feat, (XD, TRAIN), r"\[node_config_feat\]: expected rows .*; found corrupt compressed "
                                                r"data \(.*\)"),
    Case(pickled_member, (TILE, TEST), r"\[node_opcode\]: expected a numeric array; found an object array"),
    Case(pickled_member, (XD, TRAIN), r"\[node_opcode\]: expected a numeric array; found an object array"),
    Case(not_npy_member, (TILE, VALID), r"\[edge_index\]: expected a \.npy header; found unreadable header"),
    Case(not_npy_member, (XR, TRAIN), r"\[edge_index\]: expected a \.npy header; found unreadable header"),
    Case(short_member_data, (TILE, TRAIN), r"\[config_runtime\]: expected \d+ bytes of array data .*; found only "
                                           r"\d+ bytes \(truncated\)"),
    Case(short_member_data, (ND, VALID), r"\[config_runtime\]: expected \d+ bytes of array data .*; found only "
                                         r"\d+ bytes \(truncated\)"),
    Case(fortran_order, (TILE, TRAIN), code=EXIT_OK),
    Case(fortran_order, (XD, TEST), code=EXIT_OK),
    Case(fortran_node_config_feat, (XD, TRAIN), code=EXIT_OK),
    Case(folder_named_npz, (TILE, TRAIN), r": expected an npz file; found a folder$"),
    Case(folder_named_npz, (NR, TEST), r": expected an npz file; found a folder$"),
    Case(symlink_loop, (TILE, VALID), r": expected an npz file; found a symbolic link loop$"),
    Case(symlink_loop, (XD, TRAIN), r": expected an npz file; found a symbolic link loop$"),
    Case(broken_symlink, (TILE, TEST), r": expected an npz file; found a broken symbolic link$"),
    Case(broken_symlink, (ND, VALID), r": expected an npz file; found a broken symbolic link$"),
    Case(unreadable, (TILE, TRAIN), r": expected an npz file that can be read; found permission denied$"),
    Case(unreadable, (XR, VALID), r": expected an npz file that can be read; found permission denied$"),
    Case(hidden_resource_fork, (TILE, TRAIN), r"^note: skipped 1 hidden file\(s\) \(names starting with '\.'",
         EXIT_OK),
    Case(hidden_resource_fork, (NR, TEST), r"^note: skipped 1 hidden file\(s\) \(names starting with '\.'",
         EXIT_OK),
    # a key missing, of the wrong dtype, dimensions or length
    *(_missing(key, (TILE, split)) for key, split in zip(TILE_KEYS, [TRAIN, VALID, TEST] * 2, strict=True)),
    *(_missing(key, (c, split)) for key, c, split in zip(LAYOUT_KEYS, [XD, XR, ND, NR, XD, XR, ND],
                                                          [TRAIN, VALID, TEST, TRAIN, VALID, TEST, TRAIN],
                                                          strict=True)),
    Case(edge_index_as_float, (TILE, TRAIN), r"\[edge_index\]: " + _DTYPE + "float32$"),
    Case(edge_index_as_float, (XR, TEST), r"\[edge_index\]: " + _DTYPE + "float32$"),
    Case(node_config_ids_as_float, (XD, VALID), r"\[node_config_ids\]: " + _DTYPE + "float32$"),
    *_pair(node_opcode_as_float, r"\[node_opcode\]: " + _INT + "float32$", VALID, (NR, TEST)),
    *_pair(config_runtime_as_float, r"\[config_runtime\]: " + _DTYPE + "float64$", TRAIN, (XR, VALID)),
    *_pair(node_feat_as_int, r"\[node_feat\]: " + _DTYPE + "int32$", TEST, (XD, TRAIN)),
    Case(config_feat_as_int, (TILE, TRAIN), r"\[config_feat\]: " + _DTYPE + "int64$"),
    Case(node_config_feat_as_int, (NR, TRAIN), r"\[node_config_feat\]: " + _DTYPE + "int32$"),
    *_pair(node_feat_as_float64, r"\[node_feat\]: " + _DTYPE + "float64$", VALID, (ND, TRAIN)),
    *_pair(node_opcode_as_bool, r"\[node_opcode\]: " + _INT + "bool$", TRAIN, (XR, TRAIN)),
    Case(node_splits_as_bool, (ND, TEST), r"\[node_splits\]: " + _DTYPE + "bool$"),
    *_pair(node_feat_as_complex, r"\[node_feat\]: " + _DTYPE + "complex64$", VALID, (ND, VALID)),
    *_pair(config_runtime_as_string, r"\[config_runtime\]: " + _DTYPE + "<U\\d+$", TEST, (XD, TRAIN)),
    *_pair(node_feat_1d, r"\[node_feat\]: expected 2-D shape \[N, 140\]; found 1-D shape", TRAIN, (NR, TEST)),
    *_pair(edge_index_1d, r"\[edge_index\]: expected 2-D shape \[E, 2\]; found 1-D shape", TEST, (XR, VALID)),
    *_pair(node_opcode_2d, r"\[node_opcode\]: expected 1-D shape \[N\]; found 2-D shape", VALID, (ND, TRAIN)),
    *_pair(config_runtime_2d, r"\[config_runtime\]: expected 1-D shape \[C\]; found 2-D shape", VALID,
           (XD, TEST)),
    *_pair(config_runtime_scalar, r"\[config_runtime\]: expected 1-D shape \[C\]; found 0-D shape", TRAIN,
           (NR, VALID)),
    Case(node_config_feat_2d, (XD, TRAIN), r"\[node_config_feat\]: expected 3-D shape \[C, NC, 18\]; found 2-D"),
    Case(node_splits_1d, (NR, TRAIN), code=EXIT_OK),
    Case(node_opcode_one_short, (TILE, TRAIN), r"\[node_opcode\]: expected shape \[N\] with N=\d+ \(N from "
                                               r"node_feat\); found shape"),
    Case(node_opcode_one_short, (XR, TEST), r"\[node_opcode\]: expected shape \[N\] with N=\d+ \(N from "
                                           r"node_feat\); found shape"),
    Case(config_runtime_one_short, (TILE, TEST), r"\[config_runtime\]: expected shape \[C\] with C=\d+ \(C from "
                                                 r"config_feat\); found shape"),
    Case(config_runtime_one_short, (XD, VALID), r"\[config_runtime\]: expected shape \[C\] with C=\d+ \(C from "
                                                r"node_config_feat\); found shape"),
    Case(normalizers_one_long, (TILE, VALID), r"\[config_runtime_normalizers\]: expected shape \[C\] with C=\d+ "
                                              r"\(C from config_feat\); found shape"),
    Case(node_config_ids_one_long, (ND, TRAIN), r"\[node_config_ids\]: expected shape \[NC\] with NC=\d+ \(NC from "
                                                r"node_config_feat\); found shape"),
    *_pair(node_feat_139_columns, r"\[node_feat\]: expected shape \[N, 140\]; found shape \(\d+, 139\)", TRAIN,
           (XR, TEST)),
    Case(config_feat_23_columns, (TILE, TEST), r"\[config_feat\]: expected shape \[C, 24\]; found shape \(\d+, 23\)"),
    Case(node_config_feat_17_columns, (NR, VALID), r"\[node_config_feat\]: expected shape \[C, NC, 18\]; found"),
    Case(edge_index_three_columns, (TILE, VALID), r"\[edge_index\]: expected shape \[E, 2\]; found shape \(\d+, 3\)"),
    Case(edge_index_three_columns, (XD, TEST), r"\[edge_index\]: expected shape \[E, 2\]; found shape \(\d+, 3\)"),
    Case(no_nodes, (TILE, TRAIN), r"\[node_feat\]: expected at least one node; found shape \(0, 140\)"),
    Case(no_nodes, (XR, TRAIN), r"\[node_feat\]: expected at least one node; found shape \(0, 140\)"),
    Case(no_configs, (TILE, VALID), r"\[config_feat\]: expected at least one config; found shape \(0, 24\)"),
    Case(no_configs, (ND, TEST), r"\[node_config_feat\]: expected at least one config; found shape \(0, \d+, 18\)"),
    Case(extra_member, (TILE, TRAIN), code=EXIT_OK),
    Case(extra_member, (XR, TEST), code=EXIT_OK),
    Case(big_endian, (TILE, VALID), code=EXIT_OK),
    Case(big_endian, (NR, TRAIN), code=EXIT_OK),
    # values
    *_pair(nan_in_node_feat, r"\[node_feat\]: expected finite values; found nan at node 0, column 3", TRAIN,
           (ND, TEST)),
    *_pair(inf_in_node_feat, r"\[node_feat\]: expected finite values; found -inf at node \d+, column 0", TEST,
           (XD, VALID)),
    Case(nan_in_config_feat, (TILE, VALID), r"\[config_feat\]: expected finite values; found nan at config 1, "
                                            r"column 2"),
    Case(inf_in_config_feat, (TILE, TEST), r"\[config_feat\]: expected finite values; found inf at config 0, "
                                           r"column 0"),
    Case(nan_in_node_config_feat, (NR, TRAIN), r"\[node_config_feat\]: expected finite values; found nan at config "
                                               r"1, configurable node 0, column 3"),
    Case(inf_in_node_config_feat, (XR, TEST), r"\[node_config_feat\]: expected finite values; found inf at config "
                                              r"\d+, configurable node \d+, column 17"),
    *_pair(nan_in_config_runtime, r"\[config_runtime\]: " + _DTYPE + "float64$", TRAIN, (XR, TRAIN)),
    *_pair(inf_in_config_runtime, r"\[config_runtime\]: " + _DTYPE + "float64$", VALID, (ND, VALID)),
    *_pair(negative_runtime, r"\[config_runtime\]: expected runtimes >= 0 ns; found -5 at config 1", TRAIN,
           (XD, VALID)),
    Case(zero_runtimes, (TILE, TRAIN), r"\[config_runtime\]: expected runtimes > 0 ns in a train file .*; found "
                                       r"all \d+ runtimes are 0"),
    Case(zero_runtimes, (TILE, VALID), r"\[config_runtime\]: expected runtimes > 0 ns in a valid file .*; found "
                                       r"all \d+ runtimes are 0"),
    Case(zero_runtimes, (XR, TRAIN), r"\[config_runtime\]: expected runtimes > 0 ns in a train file .*; found "
                                     r"all \d+ runtimes are 0"),
    Case(zero_runtimes, (NR, VALID), r"\[config_runtime\]: expected runtimes > 0 ns in a valid file .*; found "
                                     r"all \d+ runtimes are 0"),
    Case(zero_runtimes, (TILE, TEST), code=EXIT_OK),  # how test files hide their labels
    Case(zero_runtimes, (XD, TEST), code=EXIT_OK),
    *_pair(partly_zero_runtimes, r"\[config_runtime\]: expected all runtimes > 0 ns \(or all 0 in a test file\); "
                                 r"found 1 of \d+ runtimes are 0 \(first at config 1\)", VALID, (ND, TRAIN)),
    Case(zero_normalizers, (TILE, TRAIN), r"\[config_runtime_normalizers\]: expected normalizers > 0 ns; found 0 "
                                          r"at config 0 \(\d+ in all\)"),
    Case(negative_normalizer, (TILE, VALID), r"\[config_runtime_normalizers\]: expected normalizers > 0 ns; found "
                                             r"-1 at config 0 \(1 in all\)"),
    Case(negative_normalizer, (TILE, TEST), r"\[config_runtime_normalizers\]: expected normalizers >= 0 ns \(test "
                                            r"file\); found -1 at config 0"),
    Case(zero_normalizers, (TILE, TEST), code=EXIT_OK),  # unused where runtimes are hidden
    *_pair(edge_out_of_range, r"\[edge_index\]: expected node indices in \[0, (\d+)\) \(N=\1\); found row 0 = "
                              r"\[\1, \d+\]", TRAIN, (XD, TEST)),
    *_pair(negative_edge, r"\[edge_index\]: expected node indices in \[0, \d+\) .*; found row 0 = \[\d+, -1\]",
           TEST, (NR, VALID)),
    *_pair(self_loop, r"\[edge_index\]: expected no self loops .*; found self loop at row 0", VALID, (XR, TRAIN)),
    *_pair(tombstoned_opcode, r"\[node_opcode\]: expected opcode ids in 0\.\.120 except the tombstoned 97 and 101; "
                              r"found 97 at node 0", TRAIN, (XD, TEST)),
    *_pair(opcode_beyond_table, r"\[node_opcode\]: expected opcode ids in 0\.\.120 .*; found 121 at node 1", VALID,
           (ND, VALID)),
    *_pair(opcode_too_wide, r"\[node_opcode\]: expected opcode ids in 0\.\.120 .*; found 300 at node 2", TEST,
           (NR, TRAIN)),
    Case(config_id_out_of_range, (XD, TRAIN), r"\[node_config_ids\]: expected node indices in \[0, \d+\) .*; found "
                                              r"1000000 at position \d+"),
    Case(negative_config_id, (NR, TEST), r"\[node_config_ids\]: expected node indices in \[0, \d+\) .*; found -1 "
                                         r"at position 0"),
    Case(config_ids_unsorted, (XR, VALID), r"\[node_config_ids\]: expected strictly ascending node indices; found "
                                           r"\d+ then \d+ at positions 0, 1"),
    Case(config_ids_duplicated, (ND, TRAIN), r"\[node_config_ids\]: expected strictly ascending node indices; found "
                                             r"(\d+) then \1 at positions 0, 1"),
    Case(splits_not_ending_at_n, (XD, VALID), r"\[node_splits\]: expected last value N=(\d+) \(number of nodes\); "
                                              r"found last value"),
    Case(splits_not_starting_at_zero, (NR, TRAIN), r"\[node_splits\]: expected \[\[0, \.\.\., N\]\] starting at 0; "
                                                   r"found first value 1"),
    Case(splits_decreasing, (XR, TEST), r"\[node_splits\]: expected non-decreasing boundaries; found (\d+) then "
                                        r"\d+ at positions 1, 2"),
    Case(layout_value_seven, (XD, TRAIN), r"\[node_config_feat\]: expected integer layout values in -1\.\.5; found "
                                          r"7\.0 at config 0, configurable node 0, column 0", deep=True),
    Case(layout_value_fraction, (NR, VALID), r"\[node_config_feat\]: expected integer layout values in -1\.\.5; "
                                             r"found 2\.5 at config 1", deep=True),
    Case(layout_value_below_minus_one, (XR, TEST), r"\[node_config_feat\]: expected integer layout values in "
                                                   r"-1\.\.5; found -2\.0 at config \d+", deep=True),
    # the data root
    Case(_missing_split(NR, TRAIN), None, r": expected layout:nlp:random train graphs \(models are fitted on "
                                          r"them\); found no such folder$"),
    Case(_missing_split(XD, VALID), None, r": expected layout:xla:default valid graphs \(models are chosen and "
                                          r"ensembled on them\); found no such folder$"),
    Case(_missing_split(TILE, TEST), None, r": expected tile:xla test graphs \(the submission ranks them\); found "
                                           r"no such folder$"),
    Case(empty_split, None, r": expected layout:xla:random valid graphs .*; found no \.npz files$"),
    Case(sample_omits_a_test_graph, None, r": expected only test graphs that sample_submission\.csv lists; found 2 "
                                          r"it does not list"),
    Case(sample_lists_an_unknown_graph, None, r": expected a test file for every layout:nlp:random ID listed; found "
                                              r"1 ID\(s\) without one in .*: 0123456789abcdef$"),
    Case(comma_in_name, None, r": expected a file name usable in a submission ID .*; found ',' in '.*': rename the "
                              r"file$"),
    Case(truncated_secret, None, _ARCHIVE),
    Case(no_sample_submission, None, code=EXIT_OK),  # the official tarball has none
    Case(stray_text_file, None, code=EXIT_OK),
]

CASES = {case.name: case for case in CATALOGUE}


# -- fixtures ------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pristine(tiny_world: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """This module's own copy of the tiny world, copied per test (the session's world is never touched)."""
    return Path(shutil.copytree(tiny_world, tmp_path_factory.mktemp("bad-files") / "world", symlinks=True))


@pytest.fixture(scope="module")
def good_submission(pristine: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An output folder holding the submission that ``fastslow submit`` writes from the clean world."""
    base = tmp_path_factory.mktemp("good-submission")
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(base)
        assert main(["submit", "--data", str(pristine), "--models", "default-first", "--out-dir", "out",
                     "--no-progress"]) == EXIT_OK
    assert (base / "out" / "submission.csv").is_file()
    return base / "out"


@pytest.fixture()
def world(pristine: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(pristine, tmp_path / "world", symlinks=True))


def _apply(case: Case, world: Path) -> Path:
    if case.damage is unreadable and os.geteuid() == 0:
        pytest.skip("root reads a file whatever its permissions")
    if case.on is None:
        return case.damage(world)
    c, s = case.on
    return case.damage(list_graphs(find_data_root(world), c, s)[0])


def _validate(world: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, list[str]]:
    code = main(["data", "validate", "--data", str(world), "--no-progress", *extra])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err and err == "", err
    return code, out.splitlines()


# -- validate ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(CASES))
def test_validate_names_the_file_and_the_problem(name: str, world: Path, capsys: pytest.CaptureFixture[str]):
    case = CASES[name]
    damaged = _apply(case, world)
    if case.deep:
        assert _validate(world, capsys)[0] == EXIT_OK, "the layout value range is checked only with --deep"
    code, lines = _validate(world, capsys, *(["--deep"] if case.deep else []))
    summary = lines[-1]
    assert re.fullmatch(r"\d+ files checked, \d+ with problems(; \d+ problem\(s\) of the data root as a whole "
                        r"\(listed first\))?", summary), lines
    assert code == case.code, lines
    named = [line for line in lines[:-1] if str(damaged) in line]
    if case.code == EXIT_OK and not case.problem:
        assert lines == [summary] and summary.endswith(" 0 with problems"), lines
        return
    assert any(re.search(case.problem, line) for line in named), lines
    if case.on is not None:  # a damaged file is the only problem: nothing else is reported
        assert named == lines[:-1], lines
        if case.code == EXIT_PROBLEMS:
            assert summary.endswith(" 1 with problems"), lines


def test_the_catalogue_is_broad():
    kinds = {case.damage.__name__ for case in CATALOGUE}
    assert len(CASES) == len(CATALOGUE), "two cases share a name"
    assert len(CATALOGUE) >= 57 and len(kinds) >= 57, (len(CATALOGUE), len(kinds))
    tile_or_layout: dict[str, set[bool]] = {}
    for case in CATALOGUE:
        if case.on is not None:
            tile_or_layout.setdefault(case.damage.__name__, set()).add(case.on[0].is_tile)
    both = [kind for kind, tiles in tile_or_layout.items() if tiles == {True, False}]
    assert len(both) >= 45, both  # the others concern a key that one kind of file has


# -- train and submit stop at a bad file they read, and read what validate accepts -------------------------------

# (case, command that reads the damaged file). `submit` fits default-first, which reads no layout train file.
REFUSED = [
    ("truncated@tile:xla:train", "train"),
    ("truncated@layout:xla:default:valid", "submit"),
    ("corrupt_member@layout:nlp:random:train", "train"),
    ("corrupt_node_config_feat@layout:xla:default:train", "train"),
    ("pickled_member@tile:xla:test", "submit"),
    ("missing_node_config_ids@layout:xla:default:valid", "submit"),
    ("missing_node_splits@layout:xla:random:test", "submit"),
    ("edge_index_as_float@layout:xla:random:test", "submit"),
    ("config_runtime_as_float64@tile:xla:train", "train"),
    ("nan_in_node_config_feat@layout:nlp:random:train", "train"),
    ("inf_in_node_config_feat@layout:xla:random:test", "submit"),
    ("edge_out_of_range@layout:xla:default:test", "submit"),
    ("edge_out_of_range@tile:xla:train", "submit"),
    ("missing_train_split@root", "train"),
    ("missing_train_split@root", "submit"),
    ("missing_test_split@root", "submit"),
    ("folder_named_npz@tile:xla:train", "train"),
    ("folder_named_npz@layout:nlp:random:test", "submit"),
    ("symlink_loop@tile:xla:valid", "submit"),
    ("zero_runtimes@tile:xla:train", "train"),
    ("zero_runtimes@layout:nlp:random:valid", "submit"),
    ("zero_normalizers@tile:xla:train", "submit"),
    ("truncated_secret@root", "submit"),
]
ACCEPTED = [
    ("big_endian@layout:nlp:random:train", "train-gnn"),
    ("big_endian@tile:xla:valid", "submit"),
    ("extra_member@layout:xla:random:test", "submit"),
    ("zero_normalizers@tile:xla:test", "submit"),
    ("hidden_resource_fork@layout:nlp:random:test", "submit"),
    ("no_sample_submission@root", "submit"),
    ("node_splits_1d@layout:nlp:random:train", "train-gnn"),
    ("fortran_order@tile:xla:train", "train"),
    ("fortran_node_config_feat@layout:xla:default:train", "train"),
    ("fortran_order@layout:xla:default:test", "submit"),
]


def _run(command: str, case: Case, world: Path, good: Path, tmp_path: Path,
         capsys: pytest.CaptureFixture[str]) -> tuple[int, str, Path]:
    """Exit code and standard error of ``command`` on the damaged world, and the output folder it wrote into
    (for ``submit``, a copy of ``good``)."""
    if command == "submit":
        out = Path(shutil.copytree(good, tmp_path / "out"))
        argv = ["submit", "--models", "default-first", "--out-dir", str(out)]
    else:
        out = tmp_path / "runs"
        model, param = ("gnn", "epochs=1") if command == "train-gnn" else ("gbdt", "n_estimators=2")
        argv = ["train", "--model", model, "--param", param, "--runs-dir", str(out),
                "--collections", (case.on[0] if case.on else NR).value]
    code = main([*argv, "--data", str(world), "--no-progress"])
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return code, err, out


def test_the_cli_cases_are_in_the_catalogue():
    named = {name for name, _ in REFUSED + ACCEPTED}
    assert named <= set(CASES), named - set(CASES)
    assert all(CASES[name].code == EXIT_OK for name, _ in ACCEPTED)


@pytest.mark.parametrize(("name", "command"), REFUSED, ids=[f"{c}-{n}" for n, c in REFUSED])
def test_train_and_submit_stop_with_one_line_naming_the_file(name: str, command: str, world: Path,
                                                             good_submission: Path, tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str],
                                                             monkeypatch: pytest.MonkeyPatch):
    monkeypatch.chdir(tmp_path)
    case = CASES[name]
    damaged = _apply(case, world)
    code, err, out = _run(command, case, world, good_submission, tmp_path, capsys)
    assert code in (EXIT_ERROR, EXIT_PROBLEMS), err
    assert err.count("\n") == 1 and err.startswith("error: ") and str(damaged) in err, err
    if command == "submit":
        assert (out / "submission.csv").read_bytes() == (good_submission / "submission.csv").read_bytes()
    else:
        assert not list(out.rglob("model.json"))


@pytest.mark.parametrize(("name", "command"), ACCEPTED, ids=[f"{c}-{n}" for n, c in ACCEPTED])
def test_what_validate_accepts_train_and_submit_read(name: str, command: str, world: Path, good_submission: Path,
                                                     tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                     monkeypatch: pytest.MonkeyPatch):
    monkeypatch.chdir(tmp_path)
    _apply(CASES[name], world)
    code, err, out = _run(command, CASES[name], world, good_submission, tmp_path, capsys)
    assert code == EXIT_OK and err == "", err
    assert (out / "submission.csv").is_file() if command == "submit" else list(out.rglob("model.json"))
