"""Every input has a bound (issue 39, item 7): programs, tuning records, index files, ``--config`` files,
``featurize --sample`` and the hyper-parameters. An input past one is refused in one line naming the file, the limit
and the value (exit 2), before the work starts: each reproduction that used to take minutes or gigabytes runs in a
process of its own under an address-space limit and a timeout."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest

from competition import limits
from competition.hlo.featurize import sample_tiles, seeded_rng
from competition.hlo.proto import COMPUTATION, INSTRUCTION, SHAPE, write_module_proto
from competition.hlo.records import (
    CONFIG_PROFILE,
    ModuleRecords,
    Run,
    _run_to_dict,
    read_layout_records,
    write_layout_records,
)
from competition.hlo.text import parse_hlo_text
from competition.hlo.wire import encode
from fastslow.cli import EXIT_ERROR
from models.gbdt import MAX_NUM_LEAVES, MAX_TREE_LEAVES
from tests.hlo.conftest import HAND_HLO
from tests.reliability.helpers import field, limited, one_line, refused, run, snapshot, varint


def sparse(path: Path, size: int) -> Path:
    """A file of ``size`` bytes that takes no disk (read whole, it would take ``size`` of memory)."""
    with open(path, "wb") as f:
        f.truncate(size)
    return path


def featurize(tmp_path: Path, *args: object, memory: float = 1.0, timeout: float = 60
              ) -> subprocess.CompletedProcess[str]:
    return limited(["featurize", *args, "--out", tmp_path / "out"], memory=memory, timeout=timeout, cwd=tmp_path)


def nothing_written(tmp_path: Path) -> bool:
    out = tmp_path / "out"
    return not out.exists() or not any(p.is_file() for p in out.rglob("*"))


# 1. Programs: size before reading, instructions before building, nesting before recursing

def test_a_program_past_its_size_is_refused_before_it_is_read(tmp_path: Path):
    src = sparse(tmp_path / "huge.pb", limits.MAX_PROGRAM_BYTES + 1)
    line = refused(featurize(tmp_path, src))
    assert line == (f"error: {src}: {limits.MAX_PROGRAM_BYTES + 1:,} bytes, more than the limit of "
                    f"{limits.MAX_PROGRAM_BYTES:,} (MAX_PROGRAM_BYTES); not read")
    assert nothing_written(tmp_path)


def test_a_proto_of_too_many_instructions_is_refused_before_any_is_built(tmp_path: Path):
    """The issue's 48 MB ``HloModuleProto`` took 1.85 GB: its instructions are counted in its bytes first."""
    n = limits.MAX_PROGRAM_INSTRUCTIONS + 1
    body = encode({"name": "c"}, COMPUTATION) + field(2, b"") * n  # n empty instructions
    src = tmp_path / "many.pb"
    src.write_bytes(field(3, body))
    line = refused(featurize(tmp_path, src, timeout=30))
    assert line == (f"error: {src}: {n:,} instructions, more than the limit of "
                    f"{limits.MAX_PROGRAM_INSTRUCTIONS:,} (MAX_PROGRAM_INSTRUCTIONS); not read")
    assert nothing_written(tmp_path)


def test_a_proto_of_a_huge_field_is_refused_before_it_is_decoded(tmp_path: Path):
    """One instruction whose shape declares 20 million dimensions: within the size limit, refused by the values it
    would decode to, before the list is built."""
    shape = encode({"element_type": 11}, SHAPE) + field(3, b"\x01" * 20_000_000)
    ins = encode({"name": "p", "opcode": "parameter"}, INSTRUCTION) + field(3, shape)
    src = tmp_path / "wide.pb"
    src.write_bytes(field(3, encode({"name": "c"}, COMPUTATION) + field(2, ins)))
    line = refused(featurize(tmp_path, src, timeout=30))
    budget = limits.MAX_VALUES_PER_ITEM + limits.PROTO_VALUES_FLOOR
    assert line.startswith(f"error: {src}: HloModuleProto: more than {budget:,} values to decode "
                           "(MAX_VALUES_PER_ITEM for each of the 1 instructions, runs and run nodes it declares, and "
                           "PROTO_VALUES_FLOOR), far more than any real message at byte ")
    assert line.endswith("; not read further")
    assert nothing_written(tmp_path)


def _nested_shape(depth: int) -> bytes:
    shape = encode({"element_type": 11, "dimensions": [2]}, SHAPE)
    for _ in range(depth):
        shape = encode({"element_type": 13}, SHAPE) + field(4, shape)
    return shape


@pytest.mark.parametrize(("depth", "problem"), [
    (1000, "HloModuleProto: sub-messages nested more than 100 deep (MAX_PROTO_DEPTH) at byte "),
    (limits.MAX_TUPLE_DEPTH + 1, "computation 'c', instruction 'p': tuple shapes nested more than 64 deep "
                                 "(MAX_TUPLE_DEPTH), far deeper than any real program"),
])
def test_a_proto_nested_deep_is_refused(depth: int, problem: str, tmp_path: Path):
    """Tuple shapes 1,000 deep ended in a RecursionError's traceback."""
    ins = encode({"name": "p", "opcode": "parameter"}, INSTRUCTION) + field(3, _nested_shape(depth))
    src = tmp_path / "deep.pb"
    src.write_bytes(field(3, encode({"name": "c"}, COMPUTATION) + field(2, ins)))
    line = refused(featurize(tmp_path, src, timeout=30))
    assert line.startswith(f"error: {src}: {problem}")
    assert nothing_written(tmp_path)


def test_hlo_text_nested_deep_is_refused_naming_the_line(tmp_path: Path):
    """Tuple shapes 500 deep in HLO text ended in a RecursionError's traceback."""
    shape = "(" * 500 + "f32[2]{0}" + ")" * 500
    src = tmp_path / "deep.hlo"
    src.write_text(f"HloModule deep\n\nENTRY %main () -> f32[2] {{\n  %p = {shape} parameter(0)\n"
                   "  ROOT %c = f32[2]{0} constant({1, 2})\n}\n")
    line = refused(featurize(tmp_path, src, timeout=30))
    assert line == (f"error: {src}: line 4: tuple shapes nested more than {limits.MAX_TUPLE_DEPTH} deep "
                    "(MAX_TUPLE_DEPTH), far deeper than any real program")


def test_hlo_text_of_too_many_lines_is_refused_before_it_is_split(tmp_path: Path):
    src = tmp_path / "lines.hlo"
    src.write_text("HloModule lines\n" + "\n" * limits.MAX_HLO_TEXT_LINES)
    line = refused(featurize(tmp_path, src, timeout=30))
    assert line == (f"error: {src}: {limits.MAX_HLO_TEXT_LINES + 1:,} lines, more than the limit of "
                    f"{limits.MAX_HLO_TEXT_LINES:,} (MAX_HLO_TEXT_LINES); not read")


def test_hlo_text_of_too_many_instructions_is_refused_before_any_is_built(tmp_path: Path):
    n = limits.MAX_PROGRAM_INSTRUCTIONS + 1
    src = tmp_path / "many.hlo"
    src.write_text("HloModule many\n\nENTRY %main () -> f32[] {\n" + "  %p = f32[] parameter(0)\n" * n + "}\n")
    line = refused(featurize(tmp_path, src, timeout=60))
    assert line == (f"error: {src}: {n:,} instructions, more than the limit of {limits.MAX_PROGRAM_INSTRUCTIONS:,} "
                    f"(MAX_PROGRAM_INSTRUCTIONS) by line {n + 4}; not read further")


# 2. Tuning records: size, runs and run nodes counted in their bytes

def _hand_record(runs: int) -> bytes:
    """A layout record of the hand module with ``runs`` copies of one measured run (built as bytes: the run's
    encoding repeated)."""
    module = parse_hlo_text(HAND_HLO)
    layout = (((1, 0), (0, 1), (3, 2)), ((1, 0), (3, 2, 1, 0)), ((0, 1), (1, 0), (0, 1)))
    head = write_layout_records(ModuleRecords(module, [], (2, 10, 11), fingerprint=5))
    return head + field(3, encode(_run_to_dict(Run(1200, layout)), CONFIG_PROFILE)) * runs


def test_a_record_past_its_size_is_refused_before_it_is_read(tmp_path: Path):
    src = sparse(tmp_path / "huge.pb", limits.MAX_RECORD_BYTES + 1)
    line = refused(featurize(tmp_path, "--layout-records", src))
    assert line == (f"error: {src}: {limits.MAX_RECORD_BYTES + 1:,} bytes, more than the limit of "
                    f"{limits.MAX_RECORD_BYTES:,} (MAX_RECORD_BYTES); not read")
    assert nothing_written(tmp_path)


@pytest.mark.parametrize("flag", ["--layout-records", "--tile-records"])
def test_a_record_of_too_many_runs_is_refused_before_any_is_decoded(flag: str, tmp_path: Path):
    n = limits.MAX_RECORD_RUNS + 1
    module = field(1, write_module_proto(parse_hlo_text(HAND_HLO)))
    tuning = module + field(3, b"") * n  # a ModuleTuningData of n empty runs
    src = tmp_path / "runs.pb"
    src.write_bytes(tuning if flag == "--layout-records" else field(1, tuning))
    line = refused(featurize(tmp_path, flag, src, timeout=30))
    assert line == (f"error: {src}: {n:,} runs, more than the limit of {limits.MAX_RECORD_RUNS:,} "
                    "(MAX_RECORD_RUNS); not read")
    assert nothing_written(tmp_path)


def test_a_record_of_too_many_run_nodes_is_refused_before_any_is_decoded(tmp_path: Path):
    nodes, runs = 10_000, limits.MAX_LAYOUT_CELLS // 10_000 + 1
    src = tmp_path / "cells.pb"
    src.write_bytes(field(1, write_module_proto(parse_hlo_text(HAND_HLO))) + field(3, b"") * runs
                    + field(4, b"".join(varint(k) for k in range(nodes))))
    line = refused(featurize(tmp_path, "--layout-records", src, timeout=30))
    assert line == (f"error: {src}: {runs * nodes:,} run nodes (runs x configurable nodes), more than the limit of "
                    f"{limits.MAX_LAYOUT_CELLS:,} (MAX_LAYOUT_CELLS); not read")


def test_a_record_of_200k_runs_is_featurized_in_bounded_memory(tmp_path: Path):
    """The issue's 200k-run record took 952 MB: each node's layout is now decoded once per distinct encoding, and
    the configs are gathered from those rows."""
    runs = 200_000
    src = tmp_path / "runs.pb"
    src.write_bytes(_hand_record(runs))
    done = featurize(tmp_path, "--layout-records", src, memory=1.0, timeout=120)
    assert done.returncode == 0, done.stderr
    npz = tmp_path / "out" / "npz" / "layout" / "xla" / "random" / "train" / "runs.npz"
    with np.load(npz) as z:
        feat = z["node_config_feat"]
        assert feat.shape == (runs, 3, 18) and z["config_runtime"].tolist() == [1200] * runs
        assert feat[0, 0, :6].tolist() == [1, 0, -1, -1, -1, -1] and feat[-1, 1, 6:12].tolist() == [3, 2, 1, 0, -1, -1]


def test_equal_node_layouts_are_read_once_and_shared():
    rec = read_layout_records(_hand_record(3))
    assert len(rec.runs) == 3 and rec.runs[0] == rec.runs[2]
    assert all(a is b for a, b in zip(rec.runs[0].layout, rec.runs[2].layout, strict=True))
    assert rec.runs[1].layout[1] == ((1, 0), (3, 2, 1, 0))


# 3. featurize --sample: a constant, and what the program can give

@pytest.mark.parametrize(("value", "message"), [
    ("1000000000", f"--sample: 1,000,000,000, more than the limit of {limits.MAX_SAMPLE:,} (MAX_SAMPLE, 10 times "
                   "the most configs of a real graph)"),
    ("-1", "--sample: expected a whole number of at least 0; found '-1'"),
])
def test_sample_past_its_limit_is_refused_while_parsing(value: str, message: str, tmp_path: Path, capsys):
    src = tmp_path / "hand.hlo"
    src.write_text(HAND_HLO)
    code, _, err = run(["featurize", src, "--out", tmp_path / "out", "--sample", value], capsys)
    assert code == EXIT_ERROR and one_line(err) == f"error: {message}"
    assert not (tmp_path / "out").exists()


TWO_LAYOUTS = """\
HloModule two

ENTRY %main (x: f32[8]) -> f32[8] {
  %x = f32[8]{0} parameter(0)
  ROOT %r = f32[8]{0} reshape(%x)
}
"""
"""One configurable reshape of rank-1 arrays: its default layout and one other."""


def test_a_sample_larger_than_the_program_stops_at_its_distinct_configs(tmp_path: Path):
    """``--sample 1000000`` on a program of 2 layouts drew 20 million times."""
    src = tmp_path / "two.hlo"
    src.write_text(TWO_LAYOUTS)
    done = featurize(tmp_path, src, "--sample", limits.MAX_SAMPLE, "--what", "layout", timeout=30)
    assert done.returncode == 0, done.stderr
    with np.load(tmp_path / "out" / "npz" / "layout" / "xla" / "random" / "test" / "two.npz") as z:
        assert z["node_config_feat"].shape == (2, 1, 18)


def test_the_tile_sampler_stops_at_its_distinct_configs():
    from competition.hlo.featurize import fusion_kernels

    (_, kernel), = fusion_kernels(parse_hlo_text(HAND_HLO))
    few = sample_tiles(kernel, limits.MAX_SAMPLE, seeded_rng(0, "hand"))
    assert len({row.tobytes() for row in few}) == few.shape[0] < 10_000


def test_a_sample_past_the_layout_limit_is_refused_before_drawing(tmp_path: Path):
    """101 configurable reshapes of rank-6 arrays have far more than a million layouts: a million of them is more
    than MAX_LAYOUT_CELLS."""
    lines = ["HloModule wide", "", "ENTRY %main (x: f32[2,2,2,2,2,2]) -> f32[2,2,2,2,2,2] {",
             "  %x = f32[2,2,2,2,2,2]{5,4,3,2,1,0} parameter(0)"]
    lines += [f"  %r{k} = f32[2,2,2,2,2,2]{{5,4,3,2,1,0}} reshape(%x)" for k in range(101)]
    lines += ["  ROOT %t = f32[2,2,2,2,2,2]{5,4,3,2,1,0} copy(%r100)", "}"]
    src = tmp_path / "wide.hlo"
    src.write_text("\n".join(lines) + "\n")
    line = refused(featurize(tmp_path, src, "--sample", limits.MAX_SAMPLE, "--what", "layout", timeout=30))
    cells = (limits.MAX_SAMPLE + 1) * 101
    assert line == (f"error: {src}: {cells:,} config nodes ({limits.MAX_SAMPLE + 1:,} configs x 101 configurable "
                    f"nodes), more than the limit of {limits.MAX_LAYOUT_CELLS:,} (MAX_LAYOUT_CELLS); not written")
    assert nothing_written(tmp_path)


# 4. --valid-indices files: size, graphs and indices counted before parsing

@pytest.mark.parametrize(("content", "problem"), [
    (None, f"{limits.MAX_INDEX_FILE_BYTES + 1:,} bytes, more than the limit of {limits.MAX_INDEX_FILE_BYTES:,} "
           "(MAX_INDEX_FILE_BYTES); not read"),
    ("{" + ", ".join(f'"g{k}": [0, 1]' for k in range(limits.MAX_INDEX_GRAPHS + 1)) + "}",
     f"{limits.MAX_INDEX_GRAPHS + 1:,} graph names (':' counted before parsing), more than the limit of "
     f"{limits.MAX_INDEX_GRAPHS:,} (MAX_INDEX_GRAPHS); not parsed"),
    ('{"g": [' + "0," * (limits.MAX_INDEX_ENTRIES + 1) + "1]}",
     f"{limits.MAX_INDEX_ENTRIES + 1:,} config indices (',' counted before parsing), more than the limit of "
     f"{limits.MAX_INDEX_ENTRIES:,} (MAX_INDEX_ENTRIES); not parsed"),
], ids=["size", "graphs", "indices"])
def test_an_index_file_past_a_limit_is_refused_before_it_is_parsed(content: str | None, problem: str,
                                                                   tiny_world: Path, perfect: Path, tmp_path: Path):
    """The issue's 29 MB index file took 67 s and 1.6 GB."""
    folder = tmp_path / "indices"
    folder.mkdir()
    index = folder / "xla_default.json"
    if content is None:
        sparse(index, limits.MAX_INDEX_FILE_BYTES + 1)
    else:
        index.write_text(content)
    board = tmp_path / "lb.csv"
    done = limited(["score", perfect, "--data", tiny_world, "--valid-indices", folder, "--leaderboard", board],
                   memory=3, timeout=60, cwd=tmp_path)
    assert refused(done) == f"error: {index}: {problem}"
    assert not board.exists()


# 5. --config: size and keys before parsing

def test_a_config_of_too_many_keys_is_refused_before_it_is_parsed(tiny_world: Path, tmp_path: Path):
    """``--config`` with 5 million keys took 52 s and 1.9 GB before refusing its first."""
    config = tmp_path / "params.toml"
    config.write_text("".join(f"k{k} = 1\n" for k in range(limits.MAX_CONFIG_KEYS + 1)))
    runs = tmp_path / "runs"
    done = limited(["train", "--data", tiny_world, "--model", "random", "--config", config, "--runs-dir", runs,
                    "--no-progress"], memory=3, timeout=60, cwd=tmp_path)
    assert refused(done) == (f"error: fastslow train: --config {config}: {limits.MAX_CONFIG_KEYS + 1:,} keys ('=' "
                             f"counted before parsing), more than the limit of {limits.MAX_CONFIG_KEYS:,} "
                             "(MAX_CONFIG_KEYS); not parsed")
    assert not runs.exists()


def test_a_config_past_its_size_is_refused_before_it_is_read(tiny_world: Path, tmp_path: Path, capsys):
    config = sparse(tmp_path / "params.toml", limits.MAX_CONFIG_BYTES + 1)
    runs = tmp_path / "runs"
    code, _, err = run(["train", "--data", tiny_world, "--model", "random", "--config", config, "--runs-dir", runs,
                        "--no-progress"], capsys)
    assert code == EXIT_ERROR
    assert one_line(err) == (f"error: fastslow train: --config {config}: {limits.MAX_CONFIG_BYTES + 1:,} bytes, more "
                             f"than the limit of {limits.MAX_CONFIG_BYTES:,} (MAX_CONFIG_BYTES); not read")
    assert not runs.exists()


# 6. Hyper-parameters: every maximum together

GBDT_MAXIMA = ["gbdt.sampling.max_configs_per_graph=10000", "gbdt.booster.n_estimators=100000",
               f"gbdt.booster.num_leaves={MAX_NUM_LEAVES}", "gbdt.booster.early_stopping_rounds=100000",
               "gbdt.booster.learning_rate=1", "gbdt.run.n_jobs=256"]
GNN_MAXIMA = ["features.hops='all'", "features.train_configs='all'", "network.hidden=1024", "network.layers=16",
              "network.opcode_dim=256", "network.dropout=0.99", "train.epochs=100000", "train.patience=100000",
              "train.configs_per_graph=10000", "train.steps_per_graph=100000", "train.graphs_per_step=100000",
              "train.segment_size=1000000", "train.backprop_segments=1000", "train.keep_prob=1",
              "train.gst_finetune_epochs=100000", "train.swa_epochs=100000", "predict.predict_batch=10000",
              "predict.reference_configs=100000", "predict.tta=64", "run.seeds=16"]


def _params(items: list[str], model: str | None = None) -> list[str]:
    return [a for item in items for a in ("--param", f"{model}.{item}" if model else item)]


def test_every_gbdt_maximum_together_is_refused_before_fitting(tiny_world: Path, tmp_path: Path):
    """``num_leaves=131072`` took 2.6 GB on the tiny world: LightGBM holds each tree at ``num_leaves``, so the
    product with the rounds is bounded."""
    runs = tmp_path / "runs"
    before = snapshot(tiny_world)
    done = limited(["train", "--data", tiny_world, "--model", "gbdt", "--runs-dir", runs, "--no-progress",
                    *_params(GBDT_MAXIMA)], memory=3, timeout=60, cwd=tmp_path)
    leaves = 100_000 * MAX_NUM_LEAVES
    assert refused(done) == (
        f"error: fastslow train: gbdt: booster.n_estimators x booster.num_leaves is 100,000 x {MAX_NUM_LEAVES:,} = "
        f"{leaves:,} tree leaves, more than the limit of {MAX_TREE_LEAVES:,} (MAX_TREE_LEAVES: LightGBM holds "
        "every tree at num_leaves, about 100 bytes a leaf); lower one of them")
    assert not runs.exists() and snapshot(tiny_world) == before


def test_the_largest_gbdt_fits_in_bounded_memory(tiny_world: Path, tmp_path: Path):
    """Every maximum, with as many rounds as the tree-leaf limit allows at the most leaves (early stopping on)."""
    rounds = MAX_TREE_LEAVES // MAX_NUM_LEAVES
    settings = [p for p in GBDT_MAXIMA if "n_estimators" not in p and "early_stopping" not in p]
    done = limited(["train", "--data", tiny_world, "--model", "gbdt", "--runs-dir", tmp_path / "runs",
                    "--no-progress", "--collections", "tile:xla", *_params(settings),
                    "--param", f"gbdt.booster.n_estimators={rounds}"], memory=3, timeout=240, cwd=tmp_path)
    assert done.returncode == 0, done.stderr


def test_every_gnn_maximum_together_is_refused_before_fitting(tiny_world: Path, tmp_path: Path):
    """Every maximum of ``fastslow params`` together passed 4 GB in 15 s: the fit's memory is estimated from the
    settings and the graphs, and refused when the process cannot have it (here: its 3 GB address space). The
    attention model: the maxima of ``gnn`` and more."""
    model, runs = "gnn-attn", tmp_path / "runs"
    done = limited(["train", "--data", tiny_world, "--model", model, "--runs-dir", runs, "--no-progress",
                    "--collections", "tile:xla", *_params(GNN_MAXIMA, model)], memory=3, timeout=120, cwd=tmp_path)
    line = refused(done)
    assert line.startswith(f"error: {model} tile:xla: these settings need about "), line
    assert "1,024 channels (network.hidden) x 16 layers (network.layers)" in line and "copies (run.seeds)" in line
    # The settings to lower, those of the largest part first: the 100,000 epochs' copies weight averaging keeps.
    assert "100,000 epochs' copies for weight averaging (train.swa_epochs)" in line
    assert "this process can still use: lower train.swa_epochs, predict.predict_batch, network.hidden" in line


def test_the_fit_estimate_grows_with_the_settings_and_refuses_only_past_what_is_left(monkeypatch):
    from types import SimpleNamespace

    from models.gnn import footprint
    from models.gnn.config import default_config

    graph = SimpleNamespace(key="g", num_configs=1000, num_nodes=500)
    cfg = default_config("layout")
    small, what = footprint.fit_bytes(cfg, [graph])
    assert "64 configs (train.configs_per_graph) x 500 nodes x 32 channels" in what
    big, _ = footprint.fit_bytes(cfg.with_(configs_per_graph=1000), [graph])
    assert big > 10 * small
    monkeypatch.setattr(footprint, "memory_available", lambda: small + 1)
    footprint.check_fit_memory(cfg, [graph])
    with pytest.raises(ValueError, match=r"^gnn: these settings need about .* GB of memory \(a training step on g: "
                                         r"1,000 configs \(train.configs_per_graph\) x 500 nodes"):
        footprint.check_fit_memory(cfg.with_(configs_per_graph=1000), [graph], name="gnn")
    monkeypatch.setattr(footprint, "memory_available", lambda: None)  # nothing known: nothing refused
    footprint.check_fit_memory(cfg.with_(configs_per_graph=1000), [graph])
