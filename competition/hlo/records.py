"""Tuning records, as the TpuGraphs repository's ``tuning.proto`` defines them, read and written.

- A **layout record** is one ``ModuleTuningData``: the program (``module``, an ``HloModuleProto``), its
  ``config_index_to_node`` (the node ids of the configurable nodes, in the featurized graph's numbering) and its
  ``runs``, each a ``ConfigProfile`` whose ``module_config.layout_config`` gives, per configurable node, the layout
  (minor-to-major dims) of up to 3 tensors (output, then operands), with the measured
  ``profile.compute_time_ns``.
- A **tile record file** is one ``TuningData``: a ``ModuleTuningData`` per fused kernel, its runs carrying
  ``op_config.tile_size_config`` (kernel, output, input and iteration bounds) and ``is_default`` on the
  compiler's own choice.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from competition.hlo.check import check_layout_record, check_tile_record
from competition.hlo.ir import HloFormatError, Module
from competition.hlo.proto import (
    MODULE,
    check_instructions,
    count_instructions,
    limit_error,
    module_from_dict,
    module_to_dict,
    proto_budget,
)
from competition.hlo.wire import (
    Interned,
    Schema,
    WireError,
    WireLimit,
    count_fields,
    decode,
    encode,
    packed_count,
)
from competition.limits import MAX_LAYOUT_CELLS, MAX_RECORD_BYTES, MAX_RECORD_RUNS, over

EXECUTION_PROFILE: Schema = {4: ("compute_time_ns", "int64", False)}
TILE_SIZE_CONFIG: Schema = {1: ("kernel_bounds", "int64", True), 2: ("output_bounds", "int64", True),
                            3: ("input_bounds", "int64", True), 4: ("iteration_bounds", "int64", True)}
OP_CONFIG: Schema = {1: ("tile_size_config", TILE_SIZE_CONFIG, False)}
TENSOR_LAYOUT: Schema = {1: ("dims", "int32", True)}
NODE_LAYOUT: Schema = {1: ("tensors", TENSOR_LAYOUT, True)}


def _node_layout(d: dict[str, Any]) -> tuple[tuple[int, ...], ...]:
    """A decoded ``NodeLayout``: per tensor, its minor-to-major dims."""
    return tuple(tuple(t.get("dims", [])) for t in d.get("tensors", []))


LAYOUT_CONFIG: Schema = {1: ("nodes", Interned(NODE_LAYOUT, _node_layout), True)}
"""A run's layouts: each node's decoded once per distinct encoding (a node takes a few layouts over thousands of
runs), so a record's runs cost a reference a node."""
MODULE_CONFIG: Schema = {1: ("layout_config", LAYOUT_CONFIG, False)}
CONFIG_PROFILE: Schema = {1: ("op_config", OP_CONFIG, False), 2: ("module_config", MODULE_CONFIG, False),
                          3: ("error", "bool", False), 4: ("profile", EXECUTION_PROFILE, False),
                          5: ("is_default", "bool", False)}
MODULE_TUNING: Schema = {1: ("module", MODULE, False), 2: ("fingerprint", "uint64", False),
                         3: ("runs", CONFIG_PROFILE, True), 4: ("config_index_to_node", "uint64", True)}
TUNING_DATA: Schema = {1: ("modules", MODULE_TUNING, True)}


@dataclass(frozen=True)
class TileConfig:
    """One ``TileSizeConfig``."""

    kernel_bounds: tuple[int, ...] = ()
    output_bounds: tuple[int, ...] = ()
    input_bounds: tuple[int, ...] = ()
    iteration_bounds: tuple[int, ...] = ()


@dataclass(frozen=True)
class Run:
    """One ``ConfigProfile``.

    Attributes:
        runtime_ns: ``profile.compute_time_ns``; ``None`` when the run has no profile.
        layout: per configurable node, per tensor, the minor-to-major dims (a layout run), else ``None``.
        tile: the tile config (a tile run), else ``None``.
        is_default: the compiler's default config.
        error: the run failed (such runs are never featurized).
    """

    runtime_ns: int | None
    layout: tuple[tuple[tuple[int, ...], ...], ...] | None = None
    tile: TileConfig | None = None
    is_default: bool = False
    error: bool = False


@dataclass
class ModuleRecords:
    """One ``ModuleTuningData``: a program (or fused kernel) and its measured runs."""

    module: Module
    runs: list[Run] = field(default_factory=list)
    config_index_to_node: tuple[int, ...] = ()
    fingerprint: int = 0


def _run_from_dict(d: dict[str, Any]) -> Run:
    profile = d.get("profile")
    layout = None
    if "module_config" in d:
        layout = tuple(d["module_config"].get("layout_config", {}).get("nodes", []))
    tile = None
    if "op_config" in d and "tile_size_config" in d["op_config"]:
        t = d["op_config"]["tile_size_config"]
        tile = TileConfig(*(tuple(t.get(k, [])) for k in
                            ("kernel_bounds", "output_bounds", "input_bounds", "iteration_bounds")))
    return Run(profile.get("compute_time_ns", 0) if profile is not None else None, layout, tile,
               bool(d.get("is_default", False)), bool(d.get("error", False)))


def _run_to_dict(run: Run) -> dict[str, Any]:
    d: dict[str, Any] = {"error": run.error, "is_default": run.is_default}
    if run.runtime_ns is not None:
        d["profile"] = {"compute_time_ns": run.runtime_ns}
    if run.layout is not None:
        d["module_config"] = {"layout_config": {"nodes": [
            {"tensors": [{"dims": list(t)} for t in node]} for node in run.layout]}}
    if run.tile is not None:
        t = run.tile
        d["op_config"] = {"tile_size_config": {
            "kernel_bounds": list(t.kernel_bounds), "output_bounds": list(t.output_bounds),
            "input_bounds": list(t.input_bounds), "iteration_bounds": list(t.iteration_bounds)}}
    return d


def _records_from_dict(d: dict[str, Any], source: object) -> ModuleRecords:
    if "module" not in d:
        raise HloFormatError(source, "a ModuleTuningData without its module")
    return ModuleRecords(module_from_dict(d["module"], source), [_run_from_dict(r) for r in d.get("runs", [])],
                         tuple(d.get("config_index_to_node", [])), int(d.get("fingerprint", 0)))


def _records_to_dict(rec: ModuleRecords) -> dict[str, Any]:
    return {"module": module_to_dict(rec.module), "fingerprint": rec.fingerprint,
            "runs": [_run_to_dict(r) for r in rec.runs], "config_index_to_node": list(rec.config_index_to_node)}


def _decode(data: bytes, schema: Schema, what: str, source: object, modules: list[tuple[int, int]],
            runs: int, cells: int = 0) -> dict[str, Any]:
    """Decode a record after checking what its bytes declare: ``modules`` (the spans of its ``ModuleTuningData``
    messages), ``runs`` in all and ``cells`` (runs x configurable nodes) against the limits."""
    instructions = 0
    try:
        for a, b in modules:
            _, spans = count_fields(data, {1}, a, b)
            instructions += sum(count_instructions(data, *span) for span in spans[1])
    except WireError as exc:
        raise HloFormatError(source, f"not a serialized {what} ({exc})") from None
    check_instructions(instructions, source)
    for problem in (over(runs, MAX_RECORD_RUNS, "MAX_RECORD_RUNS", "runs"),
                    over(cells, MAX_LAYOUT_CELLS, "MAX_LAYOUT_CELLS", "run nodes (runs x configurable nodes)")):
        if problem is not None:
            raise HloFormatError(source, f"{problem}; not read")
    try:
        return decode(data, schema, budget=proto_budget(instructions + runs + cells))
    except WireLimit as exc:
        raise limit_error(exc, what, source) from None
    except WireError as exc:
        raise HloFormatError(source, f"not a serialized {what} ({exc})") from None


def _check_bytes(data: bytes, source: object) -> None:
    problem = over(len(data), MAX_RECORD_BYTES, "MAX_RECORD_BYTES", "bytes")
    if problem is not None:
        raise HloFormatError(source, f"{problem}; not read")


def _count(data: bytes, numbers: set[int], what: str, source: object, start: int = 0, end: int | None = None
           ) -> tuple[dict[int, int], dict[int, list[tuple[int, int]]]]:
    try:
        return count_fields(data, numbers, start, end)
    except WireError as exc:
        raise HloFormatError(source, f"not a serialized {what} ({exc})") from None


def read_layout_records(data: bytes, source: object = "<bytes>") -> ModuleRecords:
    """Decode a serialized ``ModuleTuningData`` (a program with its layout runs): at most
    :data:`MAX_RECORD_BYTES`, :data:`MAX_RECORD_RUNS` runs, :data:`MAX_LAYOUT_CELLS` runs x configurable nodes and
    :data:`~competition.limits.MAX_PROGRAM_INSTRUCTIONS` instructions, counted in its bytes before decoding.

    The module and the runs are checked (:func:`competition.hlo.check.check_module`,
    :func:`competition.hlo.check.check_layout_record`) before the record is returned.

    Raises:
        HloFormatError: bytes that are not one, past a limit, a module that is not a valid program, or runs that do
            not fit it.
    """
    _check_bytes(data, source)
    counts, spans = _count(data, {3, 4}, "ModuleTuningData", source)
    nodes = counts[4] - len(spans[4]) + sum(packed_count(data, *span) for span in spans[4])
    d = _decode(data, MODULE_TUNING, "ModuleTuningData", source, [(0, len(data))], counts[3], counts[3] * nodes)
    rec = _records_from_dict(d, source)
    check_layout_record(rec, source)
    return rec


def read_tile_records(data: bytes, source: object = "<bytes>") -> list[ModuleRecords]:
    """Decode a serialized ``TuningData`` (fused kernels with their tile runs): at most :data:`MAX_RECORD_BYTES`,
    :data:`MAX_RECORD_RUNS` runs and :data:`~competition.limits.MAX_PROGRAM_INSTRUCTIONS` instructions (all
    kernels together), counted in its bytes before decoding.

    Each kernel's module and runs are checked (:func:`competition.hlo.check.check_module`,
    :func:`competition.hlo.check.check_tile_record`) before they are returned.

    Raises:
        HloFormatError: bytes that are not one, past a limit, no kernel in it, a kernel that is not a valid program,
            or runs that are not valid tile runs.
    """
    _check_bytes(data, source)
    _, spans = _count(data, {1}, "TuningData", source)
    runs = sum(_count(data, {3}, "TuningData", source, a, b)[0][3] for a, b in spans[1])
    d = _decode(data, TUNING_DATA, "TuningData", source, spans[1], runs)
    if not d.get("modules"):
        raise HloFormatError(source, "a TuningData without any module (is this a tile record file?)")
    recs = [_records_from_dict(m, source) for m in d["modules"]]
    for rec in recs:
        check_tile_record(rec, source)
    return recs


def write_layout_records(rec: ModuleRecords) -> bytes:
    """Serialize a ``ModuleTuningData``."""
    return encode(_records_to_dict(rec), MODULE_TUNING)


def write_tile_records(recs: list[ModuleRecords]) -> bytes:
    """Serialize a ``TuningData`` holding ``recs``."""
    return encode({"modules": [_records_to_dict(r) for r in recs]}, TUNING_DATA)


def read_file(path: str | os.PathLike[str]) -> bytes:
    with open(path, "rb") as f:
        return f.read()
