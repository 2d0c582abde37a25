"""A serialized ``HloModuleProto`` (XLA's ``xla/service/hlo.proto``) read into a module, and a module written as
one. Only the fields the features use are read; field numbers are those of ``hlo.proto`` and ``xla_data.proto``.
"""

from __future__ import annotations

import os
from typing import Any

from competition.hlo.check import check_module, quoted
from competition.hlo.ir import (
    Computation,
    ConvDims,
    DotDims,
    HloFormatError,
    HloInstruction,
    Module,
    Shape,
    Window,
    known_opcode,
)
from competition.hlo.wire import Budget, Schema, WireError, WireLimit, count_fields, decode, encode
from competition.limits import (
    MAX_PROGRAM_BYTES,
    MAX_PROGRAM_INSTRUCTIONS,
    MAX_TUPLE_DEPTH,
    MAX_VALUES_PER_ITEM,
    PROTO_VALUES_FLOOR,
    file_over,
    over,
)

PRIMITIVE_TYPES: dict[int, str] = {
    0: "invalid", 1: "pred", 2: "s8", 3: "s16", 4: "s32", 5: "s64", 6: "u8", 7: "u16", 8: "u32", 9: "u64",
    10: "f16", 11: "f32", 12: "f64", 13: "tuple", 14: "opaque", 15: "c64", 16: "bf16", 17: "token", 18: "c128",
}
"""``xla.PrimitiveType`` numbers of the element types the format has a column for."""
PRIMITIVE_NUMBERS: dict[str, int] = {name: n for n, name in PRIMITIVE_TYPES.items()}

LAYOUT: Schema = {1: ("minor_to_major", "int64", True)}
SHAPE: Schema = {2: ("element_type", "int32", False), 3: ("dimensions", "int64", True),
                 5: ("layout", LAYOUT, False)}
SHAPE[4] = ("tuple_shapes", SHAPE, True)
WINDOW_DIMENSION: Schema = {
    1: ("size", "int64", False), 2: ("stride", "int64", False), 3: ("padding_low", "int64", False),
    4: ("padding_high", "int64", False), 5: ("window_dilation", "int64", False),
    6: ("base_dilation", "int64", False), 7: ("window_reversal", "bool", False),
}
WINDOW: Schema = {1: ("dimensions", WINDOW_DIMENSION, True)}
CONV_DIMS: Schema = {
    7: ("input_batch_dimension", "int64", False), 8: ("input_feature_dimension", "int64", False),
    11: ("input_spatial_dimensions", "int64", True), 3: ("kernel_input_feature_dimension", "int64", False),
    4: ("kernel_output_feature_dimension", "int64", False), 6: ("kernel_spatial_dimensions", "int64", True),
    9: ("output_batch_dimension", "int64", False), 10: ("output_feature_dimension", "int64", False),
    12: ("output_spatial_dimensions", "int64", True),
}
DOT_DIMS: Schema = {
    1: ("lhs_contracting_dimensions", "int64", True), 2: ("rhs_contracting_dimensions", "int64", True),
    3: ("lhs_batch_dimensions", "int64", True), 4: ("rhs_batch_dimensions", "int64", True),
}
SLICE_DIMENSION: Schema = {1: ("start", "int64", False), 2: ("limit", "int64", False), 3: ("stride", "int64", False)}
PADDING_DIMENSION: Schema = {1: ("edge_padding_low", "int64", False), 2: ("edge_padding_high", "int64", False),
                             3: ("interior_padding", "int64", False)}
PADDING_CONFIG: Schema = {1: ("dimensions", PADDING_DIMENSION, True)}
INSTRUCTION: Schema = {
    1: ("name", "string", False), 2: ("opcode", "string", False), 3: ("shape", SHAPE, False),
    9: ("parameter_number", "int64", False), 14: ("dimensions", "int64", True), 15: ("window", WINDOW, False),
    16: ("convolution_dimension_numbers", CONV_DIMS, False), 17: ("slice_dimensions", SLICE_DIMENSION, True),
    20: ("dynamic_slice_sizes", "int64", True), 21: ("padding_config", PADDING_CONFIG, False),
    30: ("dot_dimension_numbers", DOT_DIMS, False), 35: ("id", "int64", False),
    36: ("operand_ids", "int64", True), 38: ("called_computation_ids", "int64", True),
    50: ("feature_group_count", "int64", False), 58: ("batch_group_count", "int64", False),
    60: ("is_stable", "bool", False),
}
COMPUTATION: Schema = {1: ("name", "string", False), 2: ("instructions", INSTRUCTION, True),
                       5: ("id", "int64", False), 6: ("root_id", "int64", False)}
MODULE: Schema = {1: ("name", "string", False), 2: ("entry_computation_name", "string", False),
                  3: ("computations", COMPUTATION, True), 5: ("id", "int64", False),
                  6: ("entry_computation_id", "int64", False)}


def _shape(d: dict[str, Any], where: str, depth: int = 1) -> Shape:
    number = d.get("element_type", 0)
    element_type = PRIMITIVE_TYPES.get(number)
    if element_type is None:
        raise ValueError(f"{where}: element type number {number} has no column in the TpuGraphs format")
    if depth > MAX_TUPLE_DEPTH and d.get("tuple_shapes"):
        raise ValueError(f"{where}: tuple shapes nested more than {MAX_TUPLE_DEPTH} deep (MAX_TUPLE_DEPTH), far "
                         "deeper than any real program")
    tuple_shapes = tuple(_shape(t, where, depth + 1) for t in d.get("tuple_shapes", []))
    dims = tuple(d.get("dimensions", []))
    m2m = d.get("layout", {}).get("minor_to_major")
    layout = tuple(m2m) if m2m and element_type != "tuple" else None
    try:
        return Shape(element_type, dims, layout, tuple_shapes)
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None


def _window(d: dict[str, Any]) -> Window:
    dims = d.get("dimensions", [])
    return Window(
        size=tuple(w.get("size", 0) for w in dims), stride=tuple(w.get("stride", 0) for w in dims),
        pad_low=tuple(w.get("padding_low", 0) for w in dims), pad_high=tuple(w.get("padding_high", 0) for w in dims),
        window_dilation=tuple(w.get("window_dilation", 0) for w in dims),
        base_dilation=tuple(w.get("base_dilation", 0) for w in dims),
        reversal=tuple(w.get("window_reversal", False) for w in dims),
    )


def _conv_dims(d: dict[str, Any]) -> ConvDims:
    return ConvDims(
        d.get("input_batch_dimension", 0), d.get("input_feature_dimension", 0),
        tuple(d.get("input_spatial_dimensions", [])), d.get("kernel_input_feature_dimension", 0),
        d.get("kernel_output_feature_dimension", 0), tuple(d.get("kernel_spatial_dimensions", [])),
        d.get("output_batch_dimension", 0), d.get("output_feature_dimension", 0),
        tuple(d.get("output_spatial_dimensions", [])),
    )


def module_from_dict(m: dict[str, Any], source: object) -> Module:
    """Build a module from a decoded ``HloModuleProto`` (computations and instructions in the proto's order).

    The computation ``entry_computation_id`` (or ``entry_computation_name``) names is put last, where XLA lists it;
    the module built is checked as a program (:func:`competition.hlo.check.check_module`).

    Raises:
        HloFormatError: no computation, an unknown opcode or element type, an operand, root or called computation
            id that names nothing, a computation or instruction id given twice, or a module that is not a valid
            program.
    """
    comps = m.get("computations", [])
    if not comps:
        raise HloFormatError(source, "an HloModuleProto without computations (is this an HLO module?)")
    names = {key: comps[k].get("name", "") for key, k in _ids(comps, "computation", None, source).items()}
    module = Module(m.get("name", ""))
    for c in comps:
        cname = c.get("name", "")
        instructions = c.get("instructions", [])
        local = _ids(instructions, "instruction", cname, source)
        comp = Computation(cname)
        for ins in instructions:
            iname, opcode = ins.get("name", ""), ins.get("opcode", "")
            where = f"computation {cname!r}, instruction {iname!r}"
            if not known_opcode(opcode):
                raise HloFormatError(source, f"{where}: unknown opcode {opcode!r}")
            try:
                shape = _shape(ins.get("shape", {}), where)
                operands = tuple(local[o] for o in ins.get("operand_ids", []))
                called = tuple(names[k] for k in ins.get("called_computation_ids", []))
            except KeyError as exc:
                raise HloFormatError(source, f"{where}: id {exc.args[0]} names no operand or computation") from None
            except ValueError as exc:
                raise HloFormatError(source, str(exc)) from None
            slices = ins.get("slice_dimensions", [])
            pads = ins.get("padding_config", {}).get("dimensions", [])
            dd = ins.get("dot_dimension_numbers")
            attrs: dict[str, Any] = dict(
                name=iname, dimensions=tuple(ins.get("dimensions", [])),
                window=_window(ins["window"]) if "window" in ins else None,
                conv_dims=_conv_dims(ins["convolution_dimension_numbers"])
                if "convolution_dimension_numbers" in ins else None,
                dot_dims=DotDims(tuple(dd.get("lhs_contracting_dimensions", [])),
                                 tuple(dd.get("rhs_contracting_dimensions", [])),
                                 tuple(dd.get("lhs_batch_dimensions", [])),
                                 tuple(dd.get("rhs_batch_dimensions", []))) if dd is not None else None,
                feature_group_count=ins.get("feature_group_count", 0) or 1,
                batch_group_count=ins.get("batch_group_count", 0) or 1,
                slice_starts=tuple(s.get("start", 0) for s in slices),
                slice_limits=tuple(s.get("limit", 0) for s in slices),
                slice_strides=tuple(s.get("stride", 0) for s in slices),
                dynamic_slice_sizes=tuple(ins.get("dynamic_slice_sizes", [])),
                pad_low=tuple(p.get("edge_padding_low", 0) for p in pads),
                pad_high=tuple(p.get("edge_padding_high", 0) for p in pads),
                pad_interior=tuple(p.get("interior_padding", 0) for p in pads),
                is_stable=bool(ins.get("is_stable", False)),
                parameter_number=ins.get("parameter_number", 0) if opcode == "parameter" else None,
                called=called,
            )
            comp.instructions.append(HloInstruction(opcode, shape, operands, **attrs))
        if not comp.instructions:
            raise HloFormatError(source, f"computation {cname!r} has no instructions")
        root = local.get(c.get("root_id", 0)) if "root_id" in c else len(comp.instructions) - 1
        if root is None:
            raise HloFormatError(source, f"computation {cname!r}: root id {c.get('root_id')} names no instruction")
        comp.root = root
        module.computations.append(comp)
    entry = _entry(m, comps, source)
    if entry is not None and entry != len(comps) - 1:
        # XLA lists the entry computation last (callees first), and node ids number it last.
        module.computations.append(module.computations.pop(entry))
    return check_module(module, source)


def _ids(items: list[dict[str, Any]], what: str, computation: str | None, source: object) -> dict[int, int]:
    """``id -> index`` of the computations or instructions ``items``, refused where two share an id (the message
    names both)."""
    out: dict[int, int] = {}
    for k, item in enumerate(items):
        key = item.get("id", 0)
        if key in out:
            where = f"computation {quoted(computation)}, " if computation is not None else ""
            first = items[out[key]].get("name", "")
            raise HloFormatError(source, f"{where}{what} {quoted(item.get('name', ''))}: id {key} is also that of "
                                         f"{what} {quoted(first)}; each {what} has an id of its own")
        out[key] = k
    return out


def _entry(m: dict[str, Any], comps: list[dict[str, Any]], source: object) -> int | None:
    """The index of the entry computation the module names (by id, else by name), ``None`` where it names none."""
    if "entry_computation_id" in m:
        found = [k for k, c in enumerate(comps) if c.get("id", 0) == m["entry_computation_id"]]
        what = f"entry_computation_id {m['entry_computation_id']}"
    elif m.get("entry_computation_name"):
        found = [k for k, c in enumerate(comps) if c.get("name", "") == m["entry_computation_name"]]
        what = f"entry_computation_name {quoted(m['entry_computation_name'])}"
    else:
        return None
    if not found:
        raise HloFormatError(source, f"{what} names none of the module's computations")
    return found[0]


def count_instructions(data: bytes, start: int = 0, end: int | None = None) -> int:
    """The instructions of the ``HloModuleProto`` in ``data[start:end]``, counted in its bytes (nothing decoded).

    Raises:
        WireError: bytes that are not a message.
    """
    _, spans = count_fields(data, {3}, start, end)
    return sum(count_fields(data, {2}, a, b)[0][2] for a, b in spans[3])


def proto_budget(items: int) -> Budget:
    """The decoding budget of a message declaring ``items`` instructions, runs and run nodes in all."""
    return Budget(MAX_VALUES_PER_ITEM * items + PROTO_VALUES_FLOOR,
                  f"MAX_VALUES_PER_ITEM for each of the {items:,} instructions, runs and run nodes it declares, and "
                  "PROTO_VALUES_FLOOR")


def check_instructions(count: int, source: object) -> None:
    """Refuse a program of more than :data:`MAX_PROGRAM_INSTRUCTIONS` instructions.

    Raises:
        HloFormatError: naming ``source``, the count and the limit.
    """
    problem = over(count, MAX_PROGRAM_INSTRUCTIONS, "MAX_PROGRAM_INSTRUCTIONS", "instructions")
    if problem is not None:
        raise HloFormatError(source, f"{problem}; not read")


def limit_error(exc: WireLimit, what: str, source: object) -> HloFormatError:
    """A :class:`WireLimit` of a ``what`` message as the reader's one line."""
    return HloFormatError(source, f"{what}: {exc}; not read further")


def read_module_proto(data: bytes, source: object) -> Module:
    """Decode a serialized ``HloModuleProto``: at most :data:`MAX_PROGRAM_BYTES` and
    :data:`MAX_PROGRAM_INSTRUCTIONS` (counted before decoding), decoding to at most :data:`MAX_VALUES_PER_ITEM`
    values an instruction.

    Raises:
        HloFormatError: bytes that are not such a message (truncated, wrong wire types), past a limit, or a module
            that cannot be featurized; the message names ``source``.
    """
    problem = over(len(data), MAX_PROGRAM_BYTES, "MAX_PROGRAM_BYTES", "bytes")
    if problem is not None:
        raise HloFormatError(source, f"{problem}; not read")
    try:
        count = count_instructions(data)
        check_instructions(count, source)
        m = decode(data, MODULE, budget=proto_budget(count))
    except WireLimit as exc:
        raise limit_error(exc, "HloModuleProto", source) from None
    except WireError as exc:
        raise HloFormatError(source, f"not a serialized HloModuleProto ({exc})") from None
    return module_from_dict(m, source)


def _shape_dict(s: Shape) -> dict[str, Any]:
    d: dict[str, Any] = {"element_type": PRIMITIVE_NUMBERS[s.element_type], "dimensions": list(s.dims)}
    if s.is_tuple:
        d["tuple_shapes"] = [_shape_dict(t) for t in s.tuple_shapes]
    elif s.minor_to_major is not None:
        d["layout"] = {"minor_to_major": list(s.minor_to_major)}
    return d


def module_to_dict(module: Module) -> dict[str, Any]:
    """The ``HloModuleProto`` fields of a module (ids: computations and instructions numbered from 1 in order)."""
    comp_ids = {c.name: k + 1 for k, c in enumerate(module.computations)}
    comps = []
    next_id = 1
    for comp in module.computations:
        ids = list(range(next_id, next_id + len(comp.instructions)))
        next_id += len(comp.instructions)
        out = []
        for iid, ins in zip(ids, comp.instructions, strict=True):
            d: dict[str, Any] = {"name": ins.name, "opcode": ins.opcode, "shape": _shape_dict(ins.shape), "id": iid,
                                 "operand_ids": [ids[o] for o in ins.operands],
                                 "called_computation_ids": [comp_ids[n] for n in ins.called],
                                 "dimensions": list(ins.dimensions),
                                 "dynamic_slice_sizes": list(ins.dynamic_slice_sizes), "is_stable": ins.is_stable}
            if ins.parameter_number is not None:
                d["parameter_number"] = ins.parameter_number
            if ins.window is not None:
                w = ins.window
                d["window"] = {"dimensions": [
                    {"size": a, "stride": b, "padding_low": c, "padding_high": e, "window_dilation": f,
                     "base_dilation": g, "window_reversal": r}
                    for a, b, c, e, f, g, r in zip(w.size, w.stride, w.pad_low, w.pad_high, w.window_dilation,
                                                   w.base_dilation, w.reversal, strict=True)]}
            if ins.conv_dims is not None:
                cd = ins.conv_dims
                d["convolution_dimension_numbers"] = {
                    "input_batch_dimension": cd.input_batch, "input_feature_dimension": cd.input_feature,
                    "input_spatial_dimensions": list(cd.input_spatial),
                    "kernel_input_feature_dimension": cd.kernel_input_feature,
                    "kernel_output_feature_dimension": cd.kernel_output_feature,
                    "kernel_spatial_dimensions": list(cd.kernel_spatial),
                    "output_batch_dimension": cd.output_batch, "output_feature_dimension": cd.output_feature,
                    "output_spatial_dimensions": list(cd.output_spatial)}
            if ins.dot_dims is not None:
                dd = ins.dot_dims
                d["dot_dimension_numbers"] = {
                    "lhs_contracting_dimensions": list(dd.lhs_contracting),
                    "rhs_contracting_dimensions": list(dd.rhs_contracting),
                    "lhs_batch_dimensions": list(dd.lhs_batch), "rhs_batch_dimensions": list(dd.rhs_batch)}
            if ins.opcode == "convolution":
                d["feature_group_count"] = ins.feature_group_count
                d["batch_group_count"] = ins.batch_group_count
            if ins.slice_starts or ins.slice_limits:
                d["slice_dimensions"] = [{"start": a, "limit": b, "stride": c} for a, b, c in
                                         zip(ins.slice_starts, ins.slice_limits, ins.slice_strides, strict=True)]
            if ins.pad_low or ins.pad_high:
                interior = ins.pad_interior or (0,) * len(ins.pad_low)
                d["padding_config"] = {"dimensions": [
                    {"edge_padding_low": a, "edge_padding_high": b, "interior_padding": c}
                    for a, b, c in zip(ins.pad_low, ins.pad_high, interior, strict=True)]}
            out.append(d)
        comps.append({"name": comp.name, "instructions": out, "id": comp_ids[comp.name],
                      "root_id": ids[comp.root_index]})
    entry = module.computations[-1] if module.computations else None
    return {"name": module.name, "entry_computation_name": entry.name if entry else "",
            "computations": comps, "entry_computation_id": comp_ids[entry.name] if entry else 0}


def write_module_proto(module: Module) -> bytes:
    """A module serialized as an ``HloModuleProto`` (the fields :func:`read_module_proto` reads)."""
    return encode(module_to_dict(module), MODULE)


def read_module_file(path: str | os.PathLike[str]) -> Module:
    """Read a serialized ``HloModuleProto`` file, refused before it is read past :data:`MAX_PROGRAM_BYTES`."""
    problem = file_over(path, MAX_PROGRAM_BYTES, "MAX_PROGRAM_BYTES")
    if problem is not None:
        raise HloFormatError(path, f"{problem}; not read")
    with open(path, "rb") as f:
        return read_module_proto(f.read(), path)
