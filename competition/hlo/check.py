"""The one validation pass over a program read into the IR, and over the runs of its tuning records: what every
reader (HLO text, ``HloModuleProto``, layout and tile records) runs on what it built, before any feature is computed
or any file written.

A module is valid when:

- it has at least one computation, each named once and holding at least one instruction, its root one of them;
- within a computation, each named instruction is named once; each operand is another instruction of the same
  computation, and no instruction depends on itself through its operands (the operand graph is acyclic);
- the parameters of each computation are numbered 0 to P-1, each number once;
- every array dim is within 0 to :data:`~competition.limits.MAX_DIM`, and every integer attribute (``dimensions``,
  window, convolution and dot dimension numbers, group counts, slices, padding, parameter numbers) within
  -:data:`~competition.limits.MAX_DIM` to :data:`~competition.limits.MAX_DIM`;
- each called computation (``calls=``, ``to_apply=``, a while body or condition, ...) is one of the module's, never
  the entry computation (the last), and no computation calls itself, directly or through others (the call graph is
  acyclic).

Tuning records are valid when their module is, and:

- a record has at most one default run (``is_default``);
- a tile run's bounds (kernel, output, input, iteration) are counts of tiles: 1 to :data:`~competition.limits.MAX_DIM`;
- a layout record's ``config_index_to_node`` names distinct nodes of its module, every layout run configures each of
  them, and each tensor's layout (output first, then operands) is empty (not configured), its 2 most-minor dims or
  all its dims: distinct dims of that tensor.

Each refusal is a :class:`~competition.hlo.ir.HloFormatError` naming the file, then the computation and the
instruction (or the run, node and tensor) and the problem; names from the input are escaped
(:func:`competition.errors.printable`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING

from competition.errors import printable
from competition.hlo.ir import Computation, HloFormatError, Instruction, Module, Shape
from competition.limits import MAX_DIM

if TYPE_CHECKING:
    from competition.hlo.records import ModuleRecords


def quoted(name: object) -> str:
    """A name from the input as a message shows it: quoted, escaped."""
    return f"'{printable(name)}'"


def number(value: int) -> str:
    """An integer from the input as a message shows it: in full, or its first digits and its length when long."""
    text = str(value)
    digits = len(text.lstrip("-"))
    return text if digits <= 24 else f"{text[:12]}... (a {digits}-digit number)"


def instruction_name(ins: Instruction, index: int) -> str:
    return quoted(ins.name) if ins.name else f"#{index}"


def _where(comp: Computation, ins: Instruction | None = None, index: int = 0) -> str:
    where = f"computation {quoted(comp.name)}"
    return where if ins is None else f"{where}, instruction {instruction_name(ins, index)}"


def _dims_problem(shape: Shape) -> str | None:
    """Why a shape's dims are invalid (tuple elements included), or ``None``."""
    todo = [shape]
    while todo:
        s = todo.pop()
        todo.extend(s.tuple_shapes)
        for d in s.dims:
            if d < 0:
                return f"dimension {number(d)} of its shape is negative"
            if d > MAX_DIM:
                return (f"dimension {number(d)} of its shape is more than the limit of {MAX_DIM:,} (MAX_DIM, far "
                        "above any real array)")
    return None


def _attributes(ins: Instruction) -> Iterable[tuple[str, Sequence[int]]]:
    """The integer attributes of an instruction, by name."""
    yield "dimensions", ins.dimensions
    w = ins.window
    if w is not None:
        yield from (("window size", w.size), ("window stride", w.stride), ("window padding", w.pad_low + w.pad_high),
                    ("window dilation", w.window_dilation + w.base_dilation))
    cd = ins.conv_dims
    if cd is not None:
        yield "convolution dimension numbers", (cd.input_batch, cd.input_feature, *cd.input_spatial,
                                                cd.kernel_input_feature, cd.kernel_output_feature,
                                                *cd.kernel_spatial, cd.output_batch, cd.output_feature,
                                                *cd.output_spatial)
    dd = ins.dot_dims
    if dd is not None:
        yield "dot dimension numbers", (*dd.lhs_contracting, *dd.rhs_contracting, *dd.lhs_batch, *dd.rhs_batch)
    yield "feature_group_count", (ins.feature_group_count,)
    yield "batch_group_count", (ins.batch_group_count,)
    yield "slice", ins.slice_starts + ins.slice_limits + ins.slice_strides
    yield "dynamic_slice_sizes", ins.dynamic_slice_sizes
    yield "padding", ins.pad_low + ins.pad_high + ins.pad_interior
    if ins.parameter_number is not None:
        yield "parameter number", (ins.parameter_number,)


def _attribute_problem(ins: Instruction) -> str | None:
    for name, values in _attributes(ins):
        for v in values:
            if not -MAX_DIM <= v <= MAX_DIM:
                return (f"{name} {number(v)} is outside -{MAX_DIM:,} to {MAX_DIM:,} (MAX_DIM, far above any real "
                        "dimension)")
    return None


def _operand_cycle(comp: Computation) -> list[int] | None:
    """The instructions of an operand cycle of ``comp`` (the first repeated at the end), or ``None``. Operands
    that all come before their consumer, as XLA lists them, make no cycle: the search runs only otherwise."""
    if all(o < i for i, ins in enumerate(comp.instructions) for o in ins.operands):
        return None
    return _cycle(len(comp.instructions), lambda i: comp.instructions[i].operands)


def _cycle(n: int, successors: Callable[[int], Iterable[int]]) -> list[int] | None:
    """A cycle of the graph of ``n`` nodes and ``successors(node)``: its nodes, the first repeated at the end; an
    iterative depth-first search (no recursion, whatever the depth)."""
    state = [0] * n  # 0 unseen, 1 on the current path, 2 done
    for start in range(n):
        if state[start]:
            continue
        path, stack = [start], [iter(successors(start))]
        state[start] = 1
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                state[path.pop()] = 2
                stack.pop()
            elif state[nxt] == 1:
                return [*path[path.index(nxt):], nxt]
            elif state[nxt] == 0:
                state[nxt] = 1
                path.append(nxt)
                stack.append(iter(successors(nxt)))
    return None


def check_module(module: Module, source: object) -> Module:
    """Refuse a module that is not a valid program (the rules of this module's docstring); return it otherwise.

    Raises:
        HloFormatError: the first problem found, naming ``source``, the computation and the instruction.
    """
    if not module.computations:
        raise HloFormatError(source, "no computation in the module")
    index: dict[str, int] = {}
    for k, comp in enumerate(module.computations):
        if comp.name in index:
            raise HloFormatError(source, f"{_where(comp)}: defined twice (a module names each computation once)")
        index[comp.name] = k
    entry = module.computations[-1].name
    for comp in module.computations:
        _check_computation(comp, index, entry, source)
    calls = [sorted({index[c] for ins in comp.instructions for c in ins.called}) for comp in module.computations]
    cycle = _cycle(len(module.computations), lambda k: calls[k])
    if cycle is not None:
        comp = module.computations[cycle[0]]
        callee = module.computations[cycle[1]].name
        i, ins = next((i, ins) for i, ins in enumerate(comp.instructions) if callee in ins.called)
        through = " -> ".join(quoted(module.computations[k].name) for k in cycle)
        raise HloFormatError(source, f"{_where(comp, ins, i)}: a call cycle ({through}): a computation never calls "
                                     "itself, directly or through others")
    return module


def _check_computation(comp: Computation, index: dict[str, int], entry: str, source: object) -> None:
    n = len(comp.instructions)
    if n == 0:
        raise HloFormatError(source, f"{_where(comp)}: no instructions")
    if not 0 <= comp.root_index < n:
        raise HloFormatError(source, f"{_where(comp)}: its root {comp.root_index} is none of its {n} instructions")
    names: dict[str, int] = {}
    params: dict[int, int] = {}
    for i, ins in enumerate(comp.instructions):
        if ins.name:
            if ins.name in names:
                raise HloFormatError(source, f"{_where(comp, ins, i)}: defined twice in this computation")
            names[ins.name] = i
        problem = _dims_problem(ins.shape) or _attribute_problem(ins)
        if problem is not None:
            raise HloFormatError(source, f"{_where(comp, ins, i)}: {problem}")
        for o in ins.operands:
            if o == i:
                raise HloFormatError(source, f"{_where(comp, ins, i)}: is its own operand")
            if not 0 <= o < n:
                raise HloFormatError(source, f"{_where(comp, ins, i)}: operand {o} is none of the computation's "
                                             f"{n} instructions")
        for callee in ins.called:
            if callee not in index:
                raise HloFormatError(source, f"{_where(comp, ins, i)}: calls {quoted(callee)}, a computation the "
                                             "module does not define")
            if callee == entry:
                raise HloFormatError(source, f"{_where(comp, ins, i)}: calls the entry computation {quoted(entry)}, "
                                             "which nothing calls")
        if ins.opcode == "parameter":
            p = ins.parameter_number if ins.parameter_number is not None else 0
            if p in params:
                other = comp.instructions[params[p]]
                raise HloFormatError(source, f"{_where(comp, ins, i)}: parameter number {p} is also that of "
                                             f"instruction {instruction_name(other, params[p])}")
            params[p] = i
    count = len(params)
    for p, i in params.items():
        if not 0 <= p < count:
            raise HloFormatError(source, f"{_where(comp, comp.instructions[i], i)}: parameter number {number(p)}, "
                                         f"but the computation has {count} parameter(s), numbered 0 to {count - 1}")
    cycle = _operand_cycle(comp)
    if cycle is not None:
        i = cycle[0]
        through = " -> ".join(instruction_name(comp.instructions[k], k) for k in cycle)
        raise HloFormatError(source, f"{_where(comp, comp.instructions[i], i)}: an operand cycle ({through}): no "
                                     "instruction depends on itself")


def check_default_runs(rec: ModuleRecords, what: str, source: object) -> None:
    """Refuse a record with more than one default run."""
    defaults = [k for k, run in enumerate(rec.runs) if run.is_default]
    if len(defaults) > 1:
        raise HloFormatError(source, f"{what}: runs {defaults[0]} and {defaults[1]} are both the default "
                                     "(is_default); a record has one")


def check_tile_record(rec: ModuleRecords, source: object) -> None:
    """Refuse a kernel's tile record with more than one default run or a tile bound outside 1 to
    :data:`~competition.limits.MAX_DIM`."""
    what = f"kernel {quoted(rec.module.name)}"
    check_default_runs(rec, what, source)
    for k, run in enumerate(rec.runs):
        if run.tile is None:
            continue
        for group in ("kernel_bounds", "output_bounds", "input_bounds", "iteration_bounds"):
            for v in getattr(run.tile, group):
                if not 1 <= v <= MAX_DIM:
                    raise HloFormatError(source, f"{what}, run {k}: {group.removesuffix('s').replace('_', ' ')} "
                                                 f"{number(v)} is not a count of tiles (1 to {MAX_DIM:,}, MAX_DIM)")


def layout_problem(dims: Sequence[int], rank: int) -> str | None:
    """Why ``dims`` is not a layout of a tensor of ``rank`` dims as a layout run gives it (none, the 2 most-minor
    or all of its dims, each once), or ``None``."""
    if any(not 0 <= d < rank for d in dims):
        return f"layout {tuple(dims)} names a dim outside the tensor's {rank} (0 to {rank - 1})" if rank else \
            f"layout {tuple(dims)} of a tensor of no dims"
    if len(set(dims)) != len(dims):
        return f"layout {tuple(dims)} repeats a dim"
    if len(dims) not in (0, min(2, rank), rank):
        return (f"layout {tuple(dims)} gives {len(dims)} of the tensor's {rank} dims (a layout gives none, its 2 "
                "most-minor or all of them)")
    return None


def check_layout_record(rec: ModuleRecords, source: object) -> None:
    """Refuse a layout record whose ``config_index_to_node`` or layout runs do not fit its module (the rules of this
    module's docstring)."""
    module = rec.module
    check_default_runs(rec, "the record", source)
    nodes = {gid: (comp, i, ins) for gid, comp, i, ins in module.nodes()}
    ids = rec.config_index_to_node
    seen: dict[int, int] = {}
    for k, node in enumerate(ids):
        if node not in nodes:
            raise HloFormatError(source, f"config_index_to_node[{k}] is node {number(node)}, but the module has "
                                         f"{len(nodes)} nodes (0 to {len(nodes) - 1})")
        if node in seen:
            raise HloFormatError(source, f"config_index_to_node[{k}] repeats node {node} (also entry {seen[node]})")
        seen[node] = k
    tensors = []
    for node in ids:
        comp, i, ins = nodes[node]
        tensors.append((_where(comp, ins, i), [ins.shape, *(comp.instructions[o].shape for o in ins.operands)]))
    checked: set[tuple[int, tuple[tuple[int, ...], ...]]] = set()
    for r, run in enumerate(rec.runs):
        if run.layout is None:
            continue
        if len(run.layout) != len(ids):
            raise HloFormatError(source, f"run {r} configures {len(run.layout)} nodes; config_index_to_node lists "
                                         f"{len(ids)}")
        for k, layout in enumerate(run.layout):
            key = (k, layout)
            if key in checked:  # a node takes a few layouts over all the runs: each is checked once
                continue
            checked.add(key)
            where, shapes = tensors[k]
            for t, dims in enumerate(layout):
                if t >= len(shapes):
                    if dims:
                        raise HloFormatError(source, f"run {r}, node {ids[k]} ({where}), tensor {t}: a layout for "
                                                     "a tensor the instruction does not have (its output and "
                                                     f"{len(shapes) - 1} operand(s))")
                    continue
                problem = layout_problem(dims, shapes[t].rank)
                if problem is not None:
                    raise HloFormatError(source, f"run {r}, node {ids[k]} ({where}), tensor {t}: {problem}")
