"""A program is checked as a program (issue 50): one validation pass over the IR that HLO text, an HloModuleProto
and tuning records all produce (:mod:`competition.hlo.check`), before any output; every way into a statement
measured; samplers that stop when the space is exhausted; a featurize run stopped midway that the same command
resumes. Each refusal is one line naming the file, the computation and the instruction (exit 2, nothing written);
hypothesis generates hostile programs for the class, not only the cases the probe found."""

from __future__ import annotations

import errno
import itertools
import math
import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from competition import limits
from competition.graphfile import validate_file
from competition.hlo.check import check_module, layout_problem
from competition.hlo.featurize import (
    configurable_nodes,
    fusion_kernels,
    layout_space,
    sample_layouts,
    sample_tiles,
    seeded_rng,
)
from competition.hlo.ir import Computation, HloFormatError, HloInstruction, Module, Shape
from competition.hlo.proto import MODULE, module_to_dict, read_module_proto, write_module_proto
from competition.hlo.records import (
    CONFIG_PROFILE,
    MODULE_TUNING,
    ModuleRecords,
    Run,
    TileConfig,
    _records_to_dict,
    _run_to_dict,
    read_layout_records,
    write_layout_records,
    write_tile_records,
)
from competition.hlo.text import parse_hlo_text
from competition.hlo.wire import encode
from fastslow.cli import EXIT_ERROR, EXIT_INTERRUPTED, EXIT_OK
from tests.hlo.conftest import HAND_HLO
from tests.reliability.helpers import field, limited, one_line, refused, run, snapshot, varint

REPO = Path(__file__).resolve().parents[2]
LAYOUT = (((1, 0), (0, 1), (3, 2)), ((1, 0), (3, 2, 1, 0)), ((0, 1), (1, 0), (0, 1)))
"""A valid layout of the hand module's configurable nodes: conv 2, reshape 10, dot 11."""
OVER_64_BITS = b"\x80" * 9 + b"\x40"
"""A 10-byte varint of 2^69: its last byte sets bit 69, past any 64-bit field."""


def _refused_in_process(tmp_path: Path, capsys: pytest.CaptureFixture[str], *args: object) -> str:
    """The one line of ``featurize ARGS --out tmp_path/out`` refused with exit 2, after checking that the root (a file
    there beforehand) is byte-identical and nothing else was written."""
    out = tmp_path / "out"
    keep = out / "npz" / "layout" / "xla" / "random" / "test" / "keep.npz"
    keep.parent.mkdir(parents=True, exist_ok=True)
    keep.write_bytes(b"a file featurize must not touch")
    before = snapshot(out)
    code, _, err = run(["featurize", *args, "--out", out], capsys)
    assert code == EXIT_ERROR, err
    assert snapshot(out) == before
    return one_line(err)


def _hand_with(old: str, new: str) -> str:
    assert old in HAND_HLO
    return HAND_HLO.replace(old, new, 1)


# 1. A program is checked as a program: HLO text

BIG = "9" * 400
TEXT_CASES = {  # name: (the program, the refusal after "error: <file>: ")
    "a negative dim": (
        _hand_with("%w = f32[144,5]{0,1}", "%w = f32[-5,3]{0,1}"),
        "computation 'main', instruction 'w': dimension -5 of its shape is negative"),
    "a dim of 2^63": (
        _hand_with("%w = f32[144,5]{0,1}", f"%w = f32[{2**63},5]{{0,1}}"),
        f"computation 'main', instruction 'w': dimension {2**63} of its shape is more than the limit of "
        f"{limits.MAX_DIM:,} (MAX_DIM, far above any real array)"),
    "a dim of 2^64": (
        _hand_with("%w = f32[144,5]{0,1}", f"%w = f32[{2**64},5]{{0,1}}"),
        f"computation 'main', instruction 'w': dimension {2**64} of its shape is more than the limit of "
        f"{limits.MAX_DIM:,} (MAX_DIM, far above any real array)"),
    "a 400-digit dim": (
        _hand_with("%w = f32[144,5]{0,1}", f"%w = f32[{BIG},5]{{0,1}}"),
        f"computation 'main', instruction 'w': dimension 999999999999... (a 400-digit number) of its shape is more "
        f"than the limit of {limits.MAX_DIM:,} (MAX_DIM, far above any real array)"),
    "a 400-digit feature_group_count": (
        _hand_with("feature_group_count=1", f"feature_group_count={BIG}"),
        f"computation 'fused', instruction 'conv': feature_group_count 999999999999... (a 400-digit number) is "
        f"outside -{limits.MAX_DIM:,} to {limits.MAX_DIM:,} (MAX_DIM, far above any real dimension)"),
    "400-digit dimensions=": (
        _hand_with("dimensions={1}", f"dimensions={{{BIG}}}"),
        f"computation 'main', instruction 'red': dimensions 999999999999... (a 400-digit number) is outside "
        f"-{limits.MAX_DIM:,} to {limits.MAX_DIM:,} (MAX_DIM, far above any real dimension)"),
    "a 400-digit parameter(N)": (
        _hand_with("parameter(2)", f"parameter({BIG})"),
        f"computation 'main', instruction 'w': parameter number 999999999999... (a 400-digit number) is outside "
        f"-{limits.MAX_DIM:,} to {limits.MAX_DIM:,} (MAX_DIM, far above any real dimension)"),
    "a duplicate parameter number": (
        _hand_with("parameter(2)", "parameter(1)"),
        "computation 'main', instruction 'w': parameter number 1 is also that of instruction 'k'"),
    "a parameter number past the parameters": (
        _hand_with("parameter(2)", "parameter(3)"),
        "computation 'main', instruction 'w': parameter number 3, but the computation has 3 parameter(s), "
        "numbered 0 to 2"),
    "two ROOTs in one computation": (
        _hand_with("  %z = f32[] constant(0)", "  ROOT %z = f32[] constant(0)"),
        "line 26: computation 'main', instruction 't': a second ROOT (the first is 'z' on line 22); a computation "
        "has one"),
    "a stray ')' after an instruction": (
        _hand_with("%x = f32[2,3,8,8]{3,2,1,0} parameter(0)", "%x = f32[2,3,8,8]{3,2,1,0} parameter(0))"),
        "line 16: x: expected ', attribute=value' or the end of the line after the operands, found ')'"),
    "a stray word after an instruction": (
        _hand_with("%k = f32[4,3,3,3]{3,2,1,0} parameter(1)", "%k = f32[4,3,3,3]{3,2,1,0} parameter(1), oops"),
        "line 17: k: expected an attribute 'key=value', found 'oops'"),
    "duplicate computation names": (
        _hand_with("%add_cond (a", "%fused (a").replace("to_apply=%add_cond", "to_apply=%fused"),
        "computation 'fused': defined twice (a module names each computation once)"),
    "a cycle through to_apply=": (
        _hand_with("ROOT %s = f32[] add(f32[] %a, f32[] %b)", "ROOT %s = f32[] call(%a, %b), to_apply=%add_cond"),
        "computation 'add_cond', instruction 's': a call cycle ('add_cond' -> 'add_cond'): a computation never "
        "calls itself, directly or through others"),
    "a cycle through calls= (fusion to fusion)": (
        _hand_with("ROOT %conv = f32[2,4,6,6]{3,2,1,0} convolution",
                   "%again = f32[2,4,6,6]{3,2,1,0} fusion(%p0, %p1), kind=kLoop, calls=%fused\n"
                   "  ROOT %conv = f32[2,4,6,6]{3,2,1,0} convolution"),
        "computation 'fused', instruction 'again': a call cycle ('fused' -> 'fused'): a computation never calls "
        "itself, directly or through others"),
    "a cycle through a while body and condition": (
        _hand_with("ROOT %s = f32[] add(f32[] %a, f32[] %b)",
                   "ROOT %s = f32[] while(%a), condition=%add_cond, body=%fused"),
        "computation 'add_cond', instruction 's': a call cycle ('add_cond' -> 'add_cond'): a computation never "
        "calls itself, directly or through others"),
    "a fusion that calls ENTRY": (
        _hand_with("ROOT %conv = f32[2,4,6,6]{3,2,1,0} convolution",
                   "%up = f32[2,4,6,6]{3,2,1,0} fusion(%p0, %p1), kind=kLoop, calls=%main\n"
                   "  ROOT %conv = f32[2,4,6,6]{3,2,1,0} convolution"),
        "computation 'fused', instruction 'up': calls the entry computation 'main', which nothing calls"),
    "two ENTRY computations": (
        _hand_with("%add_cond (a", "ENTRY %add_cond (a"),
        "line 15: computation 'main' is a second ENTRY (the first is 'add_cond' on line 9); a module has one"),
}


@pytest.mark.parametrize("case", list(TEXT_CASES))
def test_an_invalid_hlo_text_program_is_refused(case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    text, problem = TEXT_CASES[case]
    src = tmp_path / "bad.hlo"
    src.write_text(text)
    assert _refused_in_process(tmp_path, capsys, src) == f"error: {src}: {problem}"


# 1. ... an HloModuleProto

def _hand_dict() -> dict:
    return module_to_dict(parse_hlo_text(HAND_HLO))


def _instruction(d: dict, comp: str, name: str) -> dict:
    c = next(c for c in d["computations"] if c["name"] == comp)
    return next(i for i in c["instructions"] if i["name"] == name)


def _proto_case(edit) -> bytes:  # type: ignore[no-untyped-def]
    d = _hand_dict()
    edit(d)
    return encode(d, MODULE)


def _operand_cycle(d: dict) -> None:
    f, r = _instruction(d, "main", "f"), _instruction(d, "main", "r")
    f["operand_ids"].append(r["id"])


def _self_operand(d: dict) -> None:
    dot = _instruction(d, "main", "d")
    dot["operand_ids"].append(dot["id"])


def _duplicate_instruction_id(d: dict) -> None:
    _instruction(d, "main", "k")["id"] = _instruction(d, "main", "x")["id"]


def _duplicate_computation_id(d: dict) -> None:
    d["computations"][1]["id"] = d["computations"][0]["id"]


def _call_cycle(d: dict) -> None:
    conv = _instruction(d, "fused", "conv")
    conv["called_computation_ids"] = [d["computations"][0]["id"]]


def _negative_dim(d: dict) -> None:
    _instruction(d, "main", "w")["shape"]["dimensions"] = [-5, 3]


def _hand_ids() -> dict[str, int]:
    return {i["name"]: i["id"] for c in _hand_dict()["computations"] for i in c["instructions"]}


PROTO_CASES = {  # name: (the module's bytes, the refusal after "error: <file>: ")
    "an operand cycle": (
        _proto_case(_operand_cycle),
        "computation 'main', instruction 'f': an operand cycle ('f' -> 'r' -> 'f'): no instruction depends on "
        "itself"),
    "a self-operand": (_proto_case(_self_operand), "computation 'main', instruction 'd': is its own operand"),
    "duplicate instruction ids": (
        _proto_case(_duplicate_instruction_id),
        f"computation 'main', instruction 'k': id {_hand_ids()['x']} is also that of instruction 'x'; each "
        "instruction has an id of its own"),
    "duplicate computation ids": (
        _proto_case(_duplicate_computation_id),
        "computation 'add_cond': id 1 is also that of computation 'fused'; each computation has an id of its own"),
    "a computation calling itself": (
        _proto_case(_call_cycle),
        "computation 'fused', instruction 'conv': a call cycle ('fused' -> 'fused'): a computation never calls "
        "itself, directly or through others"),
    "a negative dim": (
        _proto_case(_negative_dim), "computation 'main', instruction 'w': dimension -5 of its shape is negative"),
}


@pytest.mark.parametrize("case", list(PROTO_CASES))
def test_an_invalid_module_proto_is_refused(case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    data, problem = PROTO_CASES[case]
    src = tmp_path / "bad.pb"
    src.write_bytes(data)
    assert _refused_in_process(tmp_path, capsys, src) == f"error: {src}: {problem}"


def test_a_parameter_number_of_2_69_from_a_10_byte_varint_is_refused(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]):
    shape = encode({"element_type": 11, "dimensions": [2]}, {2: ("element_type", "int32", False),
                                                             3: ("dimensions", "int64", True)})
    ins = field(1, b"p") + field(2, b"parameter") + field(3, shape) + varint(9 << 3) + OVER_64_BITS
    src = tmp_path / "bad.pb"
    src.write_bytes(field(1, b"m") + field(3, field(1, b"c") + field(2, ins)))
    line = _refused_in_process(tmp_path, capsys, src)
    offset = src.read_bytes().index(OVER_64_BITS)
    assert line.startswith(f"error: {src}: neither HLO text")
    assert line.endswith(f"nor a serialized HloModuleProto (a varint of more than 64 bits at byte {offset})")


# 1. ... tuning records

FIVE = """\
HloModule five

ENTRY %e (p: f32[1,2,3,4,5]) -> f32[120] {
  %p = f32[1,2,3,4,5]{4,3,2,1,0} parameter(0)
  ROOT %r = f32[120]{0} reshape(%p)
}
"""


def _layout_record(runs: list[Run], nodes: tuple[int, ...] = (2, 10, 11), text: str = HAND_HLO) -> bytes:
    return write_layout_records(ModuleRecords(parse_hlo_text(text), runs, nodes))


def _kernel() -> Module:
    (_, kernel), = fusion_kernels(parse_hlo_text(HAND_HLO))
    return kernel


def _tile_record(runs: list[Run]) -> bytes:
    return write_tile_records([ModuleRecords(_kernel(), runs, fingerprint=7)])


def _runtime_over_64_bits() -> bytes:
    rec = ModuleRecords(parse_hlo_text(HAND_HLO), [], (2, 10, 11))
    run_bytes = encode(_run_to_dict(Run(None, LAYOUT, is_default=True)), CONFIG_PROFILE)
    run_bytes += field(4, varint(4 << 3) + OVER_64_BITS)  # profile.compute_time_ns = 2^69
    return encode(_records_to_dict(rec), MODULE_TUNING) + field(3, run_bytes)


RECORD_CASES = {  # name: (flag, the record's bytes, the refusal after "error: <file>: ")
    "two default layout runs": (
        "--layout-records", _layout_record([Run(1200, LAYOUT, is_default=True), Run(900, LAYOUT, is_default=True)]),
        "the record: runs 0 and 1 are both the default (is_default); a record has one"),
    "two default runs in one kernel": (
        "--tile-records", _tile_record([Run(80, tile=TileConfig(output_bounds=(2, 4, 1, 1)), is_default=True),
                                        Run(60, tile=TileConfig(output_bounds=(1, 4, 1, 1)), is_default=True)]),
        "kernel 'hand.f': runs 0 and 1 are both the default (is_default); a record has one"),
    "a negative tile bound": (
        "--tile-records", _tile_record([Run(80, tile=TileConfig(output_bounds=(2, -4, 1, 1)), is_default=True)]),
        f"kernel 'hand.f', run 0: output bound -4 is not a count of tiles (1 to {limits.MAX_DIM:,}, MAX_DIM)"),
    "a zero kernel bound": (
        "--tile-records", _tile_record([Run(80, tile=TileConfig((0, 2), (2, 4, 1, 1)), is_default=True)]),
        f"kernel 'hand.f', run 0: kernel bound 0 is not a count of tiles (1 to {limits.MAX_DIM:,}, MAX_DIM)"),
    "a layout (0, 0)": (
        "--layout-records", _layout_record([Run(1200, (((0, 0), (0, 1), (3, 2)), *LAYOUT[1:]))]),
        "run 0, node 2 (computation 'fused', instruction 'conv'), tensor 0: layout (0, 0) repeats a dim"),
    "a layout (1, 0) for a rank-0 tensor": (
        "--layout-records", _layout_record([Run(1200, (((1, 0),),))], nodes=(12,)),
        "run 0, node 12 (computation 'main', instruction 'z'), tensor 0: layout (1, 0) of a tensor of no dims"),
    "a layout (3, 2, 1, 0) for a rank-5 tensor": (
        "--layout-records", _layout_record([Run(1200, (((0,), (3, 2, 1, 0)),))], nodes=(1,), text=FIVE),
        "run 0, node 1 (computation 'e', instruction 'r'), tensor 1: layout (3, 2, 1, 0) gives 4 of the tensor's 5 "
        "dims (a layout gives none, its 2 most-minor or all of them)"),
    "a layout for a tensor the node lacks": (
        "--layout-records", _layout_record([Run(1200, (((0,), (3, 2, 1, 0, 4), (0,)),))], nodes=(1,), text=FIVE),
        "run 0, node 1 (computation 'e', instruction 'r'), tensor 2: a layout for a tensor the instruction does not "
        "have (its output and 1 operand(s))"),
}


@pytest.mark.parametrize("case", list(RECORD_CASES))
def test_an_invalid_record_is_refused(case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    flag, data, problem = RECORD_CASES[case]
    src = tmp_path / "bad.pb"
    src.write_bytes(data)
    assert _refused_in_process(tmp_path, capsys, flag, src) == f"error: {src}: {problem}"


def test_a_layout_runtime_of_2_69_is_refused_naming_the_byte(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    """It used to end in ``Python int too large to convert to C long``."""
    src = tmp_path / "bad.pb"
    src.write_bytes(_runtime_over_64_bits())
    line = _refused_in_process(tmp_path, capsys, "--layout-records", src)
    assert line.startswith(f"error: {src}: not a serialized ModuleTuningData (a varint of more than 64 bits at byte ")


@pytest.mark.parametrize("path", ["competition/data/real_records", "../shared/spec/real-records"])
def test_the_real_records_are_valid_programs(path: str):
    folder = REPO / path
    if not folder.is_dir():
        pytest.skip(f"{folder} is not here")
    from competition.hlo.records import read_tile_records

    rec = read_layout_records((folder / "module_tuning_data_layout.pb").read_bytes(), "layout")
    assert rec.module.num_nodes == 3163 and len(rec.config_index_to_node) == 62
    kernels = read_tile_records((folder / "op_tuning_data_10_kernels.pb").read_bytes(), "tile")
    assert len(kernels) == 10


# 2. Every way into a statement is measured: one line, and lines joined under an open bracket

def test_a_one_line_statement_past_the_limit_is_refused_before_parsing(tmp_path: Path):
    """A 128 MiB metadata string on one line was scanned character by character (250 MiB: 3.9 GB, 38 s)."""
    meta = "x" * (128 << 20)
    src = tmp_path / "long.hlo"
    src.write_text(_hand_with('metadata={op_name="c" source_file="x.py"}', f'metadata={{op_name="{meta}"}}'))
    started = time.monotonic()
    line = refused(limited(["featurize", src, "--out", tmp_path / "out"], memory=0.75, timeout=60, cwd=tmp_path))
    assert time.monotonic() - started < 30
    old, new = 'metadata={op_name="c" source_file="x.py"}', 'metadata={op_name=""}'
    length = len(HAND_HLO.splitlines()[5]) - len(old) + len(new) + len(meta)
    assert line == (f"error: {src}: line 6: {length:,} characters, more than the limit of 1,048,576 for one "
                    "statement (MAX_STATEMENT_CHARS), far more than any instruction XLA prints; not read")
    assert not (tmp_path / "out").exists()


def test_both_ways_into_a_statement_share_the_limit(monkeypatch: pytest.MonkeyPatch):
    from competition.hlo import text as hlo_text

    monkeypatch.setattr(hlo_text, "MAX_STATEMENT_CHARS", 1000)
    one_line_text = _hand_with('op_name="c"', 'op_name="' + "c" * 1000 + '"')
    with pytest.raises(HloFormatError, match=r"line 6: 1,\d{3} characters, more than the limit of 1,000 for one"):
        parse_hlo_text(one_line_text, "one")
    joined = _hand_with('op_name="c"', 'op_name="c"' + " x=(1,\n" * 200 + "2" + ")" * 200)
    with pytest.raises(HloFormatError, match="is not closed within 1000 characters"):
        parse_hlo_text(joined, "joined")


# 3. Loops over samples end when the space is exhausted

def test_sample_the_documented_maximum_on_the_hand_module(tmp_path: Path):
    """``--sample 1000000`` on the 17-instruction module ran past 120 s: its 663,552 distinct layouts were
    coupon-collected. Every distinct config is drawn once, in seconds, for both the layout and the tile file."""
    src = tmp_path / "hand.hlo"
    src.write_text(HAND_HLO)
    done = limited(["featurize", src, "--sample", limits.MAX_SAMPLE, "--out", tmp_path / "out"], memory=3.0,
                   timeout=120, cwd=tmp_path)
    assert done.returncode == EXIT_OK, done.stderr
    layout = tmp_path / "out" / "npz" / "layout" / "xla" / "random" / "test" / "hand.npz"
    tile = tmp_path / "out" / "npz" / "tile" / "xla" / "test" / "hand_f.npz"
    with np.load(layout) as z:
        feat = z["node_config_feat"]
    space = 12**3 * (2 * 24) * 2**3  # conv: 3 tensors of rank 4 (12 pairs); reshape: 2! x 4!; dot: 3 of rank 2
    assert feat.shape == (1 + space, 3, 18)
    assert distinct_rows(feat) == 1 + space
    with np.load(tile) as z:
        assert distinct_rows(z["config_feat"]) == z["config_feat"].shape[0] == 6


def test_the_tile_sampler_draws_a_large_space_without_repeats():
    d = "720720"
    shape = f"f32[{d},{d},{d},{d},{d},{d}]"
    text = (f"HloModule k\n\n%fused (p: {shape}) -> {shape} {{\n  ROOT %p = {shape}{{5,4,3,2,1,0}} parameter(0)\n}}\n\n"
            f"ENTRY %e (x: {shape}) -> {shape} {{\n  %x = {shape}{{5,4,3,2,1,0}} parameter(0)\n"
            f"  ROOT %f = {shape}{{5,4,3,2,1,0}} fusion(%x), kind=kLoop, calls=%fused\n}}\n")
    (_, kernel), = fusion_kernels(parse_hlo_text(text))
    started = time.monotonic()
    feat = sample_tiles(kernel, limits.MAX_SAMPLE, seeded_rng(0, "k"))
    assert time.monotonic() - started < 30
    assert feat.shape == (1 + limits.MAX_SAMPLE, 24)
    assert distinct_rows(feat) == feat.shape[0]
    assert feat[0, 8:14].tolist() == [720720, 720720, 720720, 720720, 90090, 5631]  # the whole output first


def distinct_rows(a: np.ndarray) -> int:
    """How many distinct rows (first axis) ``a`` has."""
    return len(set(map(bytes, np.ascontiguousarray(a).reshape(a.shape[0], -1))))


# 4. An interrupted write can be re-run

class FailOnWrite:
    """``write_npz`` that raises ``error`` on its ``at``-th call (counted from 1)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, at: int, error: BaseException) -> None:
        import competition.npzio as npzio

        self.calls, self.at, self.error, self.real = 0, at, error, npzio.write_npz
        monkeypatch.setattr(npzio, "write_npz", self)

    def __call__(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        self.calls += 1
        if self.calls == self.at:
            raise self.error
        return self.real(*args, **kwargs)


def _markers(out: Path) -> list[Path]:
    return sorted(out.glob("featurize-incomplete-*.txt"))


@pytest.mark.parametrize("stop", ["a full disk", "Ctrl-C"])
def test_a_run_stopped_midway_is_named_and_the_same_command_resumes_it(
        stop: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch):
    src, out = tmp_path / "hand.hlo", tmp_path / "out"
    src.write_text(HAND_HLO)
    argv = ["featurize", src, "--out", out]
    layout = out / "npz" / "layout" / "xla" / "random" / "test" / "hand.npz"
    tile = out / "npz" / "tile" / "xla" / "test" / "hand_f.npz"
    with monkeypatch.context() as m:
        error = OSError(errno.ENOSPC, "No space left on device") if stop == "a full disk" else KeyboardInterrupt()
        FailOnWrite(m, 2, error)
        code, _, err = run(argv, capsys)
    marker, = _markers(out)
    if stop == "a full disk":
        assert code == EXIT_ERROR
        assert one_line(err) == (f"error: {tile}: not written: no space left on device; 1 of the run's 2 files are "
                                 f"in place, and {marker} marks the root incomplete: re-run the same command to "
                                 "write the rest")
    else:
        assert code == EXIT_INTERRUPTED and "re-run the same command" in one_line(err)
    assert layout.is_file() and not tile.exists()
    assert str(layout.relative_to(out)) in marker.read_text()
    partial = snapshot(out)
    # Another command (another seed: other configs) is refused, naming the marker; nothing changes.
    code, _, err = run([*argv, "--seed", "1"], capsys)
    assert code == EXIT_ERROR
    assert one_line(err) == (f"error: {layout}: exists already, left by a featurize run that stopped midway "
                             f"({marker} marks the root incomplete; the command that wrote it resumes it): --force "
                             "replaces it")
    assert snapshot(out) == partial
    # The same command resumes: the file in place is kept, the other written, the marker removed.
    code, stdout, err = run(argv, capsys)
    assert code == EXIT_OK, err
    assert f"kept {layout}, written by the run that stopped midway" in stdout
    assert f"wrote {tile}" in stdout and "(1 of them kept from the run that stopped midway)" in stdout
    assert _markers(out) == []
    assert validate_file(layout, deep=True) == [] and validate_file(tile, deep=True) == []
    assert snapshot(out)[str(layout.relative_to(out))] == partial[str(layout.relative_to(out))]


def test_a_changed_file_is_not_kept_on_resume(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                              monkeypatch: pytest.MonkeyPatch):
    src, out = tmp_path / "hand.hlo", tmp_path / "out"
    src.write_text(HAND_HLO)
    argv = ["featurize", src, "--out", out]
    with monkeypatch.context() as m:
        FailOnWrite(m, 2, OSError(errno.ENOSPC, "No space left on device"))
        assert run(argv, capsys)[0] == EXIT_ERROR
    layout = out / "npz" / "layout" / "xla" / "random" / "test" / "hand.npz"
    layout.write_bytes(b"changed since")
    code, _, err = run(argv, capsys)
    assert code == EXIT_ERROR
    assert one_line(err).startswith(f"error: {layout}: exists already")
    assert layout.read_bytes() == b"changed since"


def test_a_first_write_that_fails_leaves_no_marker(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                   monkeypatch: pytest.MonkeyPatch):
    src, out = tmp_path / "hand.hlo", tmp_path / "out"
    src.write_text(HAND_HLO)
    with monkeypatch.context() as m:
        FailOnWrite(m, 1, OSError(errno.ENOSPC, "No space left on device"))
        code, _, err = run(["featurize", src, "--out", out], capsys)
    assert code == EXIT_ERROR
    assert one_line(err).endswith("not written: no space left on device; nothing of this run is in place")
    assert snapshot(out) == {}


def test_a_folder_the_terminal_cannot_show_does_not_stop_the_run(tmp_path: Path):
    """Under ``PYTHONIOENCODING=ascii`` a non-ASCII ``--out`` failed after writing 1 of 2 files."""
    src, out = tmp_path / "hand.hlo", tmp_path / "sortie-\u00e9t\u00e9"
    src.write_text(HAND_HLO)
    done = subprocess.run([sys.executable, "-m", "fastslow", "featurize", str(src), "--out", str(out)],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path,
                          env={**os.environ, "PYTHONIOENCODING": "ascii"})
    assert done.returncode == EXIT_OK, done.stderr
    assert "sortie-\\xe9t\\xe9" in done.stdout and "2 file(s) written" in done.stdout
    assert len([p for p in out.rglob("*.npz")]) == 2 and _markers(out) == []


# 5. Hostile programs, generated: every defect of the class refused by the validator, every valid program passing

OPCODES = ("constant", "negate", "add", "call", "fusion")


@st.composite
def shapes(draw: st.DrawFn) -> Shape:
    dims = tuple(draw(st.lists(st.integers(0, 9), max_size=3)))
    return Shape("f32", dims, tuple(draw(st.permutations(range(len(dims))))) or None)


@st.composite
def modules(draw: st.DrawFn) -> Module:
    """A valid module: 1 to 4 computations (the entry last), each of parameters numbered 0 to P-1 in any order, then
    constants, unary and binary ops on earlier instructions and calls of earlier computations."""
    count = draw(st.integers(1, 4))
    module = Module("m")
    for c in range(count):
        comp = Computation("main" if c == count - 1 else f"c{c}")
        params = draw(st.integers(0, 2))
        for p in draw(st.permutations(range(params))):
            comp.instructions.append(HloInstruction("parameter", draw(shapes()), name=f"p{p}", parameter_number=p))
        for k in range(draw(st.integers(0 if params else 1, 4))):
            n = len(comp.instructions)
            opcode = draw(st.sampled_from(OPCODES if c else OPCODES[:3]))
            arity = {"constant": 0, "negate": 1, "add": 2}.get(opcode, draw(st.integers(0, 2)))
            operands = tuple(draw(st.integers(0, n - 1)) for _ in range(arity)) if n else ()
            if not n:
                opcode = "constant"
                operands = ()
            called = (module.computations[draw(st.integers(0, c - 1))].name,) if opcode in ("call", "fusion") else ()
            comp.instructions.append(HloInstruction(opcode, draw(shapes()), operands, name=f"i{k}", called=called))
        comp.root = draw(st.integers(0, len(comp.instructions) - 1))
        module.computations.append(comp)
    return module


def _shape_text(s: Shape) -> str:
    return f"f32[{','.join(map(str, s.dims))}]{{{','.join(map(str, s.layout))}}}"


def render(module: Module, *, second_root: bool = False, stray: bool = False) -> str:
    """``module`` as HLO text, as XLA prints it; optionally with a second ROOT or a stray ')' in the entry."""
    out = [f"HloModule {module.name}", ""]
    for comp in module.computations:
        out.append(f"{'ENTRY ' if comp is module.entry else ''}%{comp.name} {{")
        roots = {comp.root_index}
        if second_root and comp is module.entry:
            roots.add(1 if comp.root_index == 0 else 0)
        for i, ins in enumerate(comp.instructions):
            root = "ROOT " if i in roots else ""
            if ins.opcode == "parameter":
                inside = str(ins.parameter_number)
            elif ins.opcode == "constant":
                inside = "0"
            else:
                inside = ", ".join(f"%{comp.instructions[o].name}" for o in ins.operands)
            attrs = "".join(f", {'to_apply' if ins.opcode == 'call' else 'calls'}=%{c}" for c in ins.called)
            extra = ")" if stray and comp is module.entry and i == len(comp.instructions) - 1 else ""
            out.append(f"  {root}%{ins.name} = {_shape_text(ins.shape)} {ins.opcode}({inside}){extra}{attrs}")
        out += ["}", ""]
    return "\n".join(out)


def _structure(module: Module) -> list:
    return [(c.name, c.root_index, [(i.opcode, i.shape, i.operands, i.called, i.parameter_number)
                                    for i in c.instructions]) for c in module.computations]


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(modules())
def test_a_valid_generated_program_passes_every_reader(module: Module):
    assert check_module(module, "generated") is module
    from_text = parse_hlo_text(render(module), "generated.hlo")
    assert _structure(from_text) == _structure(module)
    assert _structure(read_module_proto(write_module_proto(from_text), "generated.pb")) == _structure(module)


def _inject(module: Module, defect: str, data: st.DataObject) -> str:
    """Put ``defect`` into ``module``; the part of the refusal it must give."""
    comps = module.computations
    pick = data.draw(st.integers(0, len(comps) - 1))
    comp = comps[pick]
    i = data.draw(st.integers(0, len(comp.instructions) - 1))
    ins = comp.instructions[i]
    if defect == "a negative dim":
        comp.instructions[i] = replace(ins, shape=Shape("f32", (data.draw(st.integers(-2**70, -1)), 2)))
        return "of its shape is negative"
    if defect == "a dim past MAX_DIM":
        comp.instructions[i] = replace(ins, shape=Shape("f32", (2, data.draw(st.integers(limits.MAX_DIM + 1)))))
        return "(MAX_DIM, far above any real array)"
    if defect == "an attribute past MAX_DIM":
        big = data.draw(st.integers(limits.MAX_DIM + 1, 10**400)) * data.draw(st.sampled_from([1, -1]))
        comp.instructions[i] = replace(ins, dimensions=(0, big))
        return "(MAX_DIM, far above any real dimension)"
    if defect == "a self operand":
        ins.operands += (i,)
        return "is its own operand"
    if defect == "an operand past the computation":
        ins.operands += (len(comp.instructions) + data.draw(st.integers(0, 5)),)
        return "is none of the computation's"
    if defect == "an operand cycle":
        comp.instructions.append(HloInstruction("negate", Shape("f32"), (len(comp.instructions) + 1,), name="y1"))
        comp.instructions.append(HloInstruction("negate", Shape("f32"), (len(comp.instructions) - 1,), name="y2"))
        return "an operand cycle"
    if defect == "a duplicate computation name" and len(comps) > 1:
        other = comps[(pick + 1) % len(comps)]
        comp.name = other.name
        return "defined twice (a module names each computation once)"
    if defect == "a duplicate instruction name" and len(comp.instructions) > 1:
        comp.instructions[i].name = comp.instructions[i - 1].name
        return "defined twice in this computation"
    if defect == "a duplicate parameter number":
        number = data.draw(st.integers(0, 1))
        comp.instructions += [HloInstruction("parameter", Shape("f32"), name=f"q{k}", parameter_number=number)
                              for k in range(2)]
        return f"parameter number {number} is also that of"
    if defect == "a parameter number past the parameters":
        count = sum(x.opcode == "parameter" for x in comp.instructions) + 1
        comp.instructions.append(HloInstruction("parameter", Shape("f32"), name="q", parameter_number=count))
        return f"parameter number {count}, but the computation has {count} parameter(s)"
    if defect == "a call of the entry":
        ins.called += (module.entry.name,)
        return f"calls the entry computation '{module.entry.name}', which nothing calls"
    if defect == "an undefined callee":
        ins.called += ("nowhere",)
        return "calls 'nowhere', a computation the module does not define"
    if defect == "a call cycle" and len(comps) > 1:
        # A computation that calls one whose calls lead back to it (or itself).
        j = data.draw(st.integers(0, len(comps) - 2))
        k = data.draw(st.integers(0, len(comps) - 2))
        comps[j].instructions[0].called += (comps[k].name,)
        comps[k].instructions[-1].called += (comps[j].name,)
        return "a call cycle"
    return ""


DEFECTS = ("a negative dim", "a dim past MAX_DIM", "an attribute past MAX_DIM", "a self operand",
           "an operand past the computation", "an operand cycle", "a duplicate computation name",
           "a duplicate instruction name", "a duplicate parameter number", "a parameter number past the parameters",
           "a call of the entry", "an undefined callee", "a call cycle")


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(modules(), st.sampled_from(DEFECTS), st.data())
def test_a_generated_program_with_a_defect_is_refused_naming_it(module: Module, defect: str, data: st.DataObject):
    expected = _inject(module, defect, data)
    if not expected:  # the defect needs two computations or instructions the module has not
        return
    with pytest.raises(HloFormatError) as caught:
        check_module(module, "generated.pb")
    message = str(caught.value)
    assert message.startswith("generated.pb: ") and "\n" not in message
    assert expected in message, (defect, message)


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(modules(), st.sampled_from(["a second ROOT", "a stray ')'"]))
def test_a_generated_text_with_a_defect_is_refused(module: Module, defect: str):
    if defect == "a second ROOT" and len(module.entry.instructions) < 2:
        return
    text = render(module, second_root=defect == "a second ROOT", stray=defect == "a stray ')'")
    with pytest.raises(HloFormatError, match="a second ROOT" if defect == "a second ROOT" else
                       "expected ', attribute=value' or the end of the line after the operands, found '\\)"):
        parse_hlo_text(text, "generated.hlo")


@settings(max_examples=80, deadline=None)
@given(st.integers(0, 6), st.lists(st.integers(-2, 7), max_size=7))
def test_a_layout_is_none_the_2_most_minor_or_all_dims_of_its_tensor(rank: int, dims: list[int]):
    valid = (all(0 <= d < rank for d in dims) and len(set(dims)) == len(dims)
             and len(dims) in {0, min(2, rank), rank})
    assert (layout_problem(tuple(dims), rank) is None) == valid


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(1, 4), min_size=1, max_size=3), st.integers(0, 2000))
def test_the_layout_sampler_stops_at_the_distinct_configs(ranks: list[int], n: int):
    """Reshapes of small ranks: ``n`` more than the space gives every distinct config once, fewer gives ``n``
    distinct ones; the default always first."""
    lines = ["HloModule r", "", "ENTRY %e {"]
    for k, r in enumerate(ranks):
        dims = ",".join(["2"] * r)
        layout = ",".join(map(str, range(r - 1, -1, -1)))
        lines += [f"  %p{k} = f32[{dims}]{{{layout}}} parameter({k})",
                  f"  %r{k} = f32[{dims}]{{{layout}}} reshape(%p{k})"]
    lines.append("}")
    module = parse_hlo_text("\n".join(lines) + "\n", "r.hlo")
    space = math.prod(math.factorial(r) ** 2 for r in ranks)
    assert layout_space(configurable_nodes(module), n + 1) == min(space, n + 1)
    _, feat = sample_layouts(module, n, seeded_rng(0, "r"))
    assert feat.shape[0] == 1 + min(n, space)
    assert (feat[0] == -1).all()
    assert distinct_rows(feat) == feat.shape[0]


def test_every_permutation_is_a_config_the_layout_sampler_can_give():
    """The sampler's tables hold every order of a reshape's dims and every pair of a dot's: none is missed."""
    module = parse_hlo_text(FIVE, "five")
    _, feat = sample_layouts(module, 10**6, seeded_rng(0, "five"))
    outputs = {tuple(int(v) for v in row[0, :1]) for row in feat[1:]}
    operands = {tuple(int(v) for v in row[0, 6:11]) for row in feat[1:]}
    assert outputs == {(0,)} and operands == set(itertools.permutations(range(5)))


def test_a_token_the_reader_cannot_parse_is_shown_shortened(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    """A dim of 5,000 digits (past what Python converts) was echoed whole: a 10 kB error line."""
    huge = "9" * 5000
    src = tmp_path / "huge.hlo"
    src.write_text(_hand_with("%w = f32[144,5]{0,1}", f"%w = f32[{huge},5]{{0,1}}"))
    line = _refused_in_process(tmp_path, capsys, src)
    assert "cannot parse dimension '9999999999" in line and "(5,000 characters)" in line
    assert len(line) < 500
