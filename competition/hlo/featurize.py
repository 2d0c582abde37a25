"""Modules and tuning records turned into TpuGraphs layout and tile npz files.

The graph arrays come from the feature writer the synthetic world shares
(:func:`competition.hlo.features.featurize`), the members and their order from
:func:`~competition.hlo.features.layout_arrays` and :func:`~competition.hlo.features.tile_arrays`.

Configs come from records when there are any; without them:

- **layout**: every convolution, dot and reshape whose tensors have at most 6 dimensions is configurable. Config 0
  is the compiler's default (every slot -1), then up to ``n`` distinct sampled layouts: a convolution or dot gets
  the 2 most-minor dimensions of its output, first and second operand (as the real files specify them), a reshape
  the whole minor-to-major order of its output and operand;
- **tile**: one kernel per fusion instruction (its fused computation and what that calls, then an entry computation
  of parameters and the fusion). Config 0 is one tile over the whole output (each output bound the dim's count of
  hardware tiles, :mod:`competition.hlo.tiles`), then up to ``n`` distinct sampled output bounds (a divisor of that
  count, a power of two below it, or the whole count); kernel and input bounds stay empty.

Without records the runtimes are unknown: they are written as the public test files hide theirs (layout and tile
``config_runtime`` all 0, tile normalizers all 1), which the format accepts only in the test split.
"""

from __future__ import annotations

import itertools
import math
import re
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from competition import schema
from competition.hlo.features import featurize, layout_arrays, tile_arrays
from competition.hlo.ir import Computation, HloFormatError, HloInstruction, Instruction, Module, Shape
from competition.hlo.records import ModuleRecords, TileConfig
from competition.hlo.tiles import physical_dims, tile_sizes, tile_units, tiled_shape
from competition.limits import MAX_LAYOUT_CELLS, over

LAYOUT_OPCODES = ("convolution", "dot", "reshape")
_UNSAFE = re.compile(r"[^A-Za-z0-9_.\-]+")


def safe_stem(name: str) -> str:
    """A file stem usable in a submission ID: characters other than letters, digits, ``_.-`` become ``_``."""
    return _UNSAFE.sub("_", name).strip("_") or "module"


@dataclass(frozen=True)
class Node:
    """A configurable node: its global id and the shapes of its output and operands."""

    node_id: int
    opcode: str
    tensors: tuple[Shape, ...]


def configurable_nodes(module: Module) -> list[Node]:
    """The convolution, dot and reshape nodes whose output and operands are arrays of rank <= 6, ascending."""
    out = []
    for gid, comp, _i, ins in module.nodes():
        if ins.opcode not in LAYOUT_OPCODES:
            continue
        tensors = (ins.shape, *(comp.instructions[o].shape for o in ins.operands[:2]))
        if all(not t.is_tuple and t.rank <= schema.MAX_RANK for t in tensors):
            out.append(Node(gid, ins.opcode, tensors))
    return out


def _slot_tables(node: Node) -> list[npt.NDArray[np.int64]]:
    """Per tensor of ``node`` (at most 3), the rows a sampled layout may give it, one a row: every order of its dims
    for a reshape, every ordered pair of distinct dims otherwise (the 2 most-minor, as the real files give them); a
    scalar's one empty row."""
    out = []
    for shape in node.tensors[:3]:
        r = shape.rank
        width = r if node.opcode == "reshape" else min(r, 2)
        out.append(np.asarray(list(itertools.permutations(range(r), width)), dtype=np.int64).reshape(-1, width))
    return out


def layout_space(nodes: Sequence[Node], cap: int) -> int:
    """How many distinct sampled layout configs ``nodes`` have beside the default, counted up to ``cap`` (any
    larger count is returned as ``cap``): none when every tensor is a scalar (the one sampled row is the default
    one)."""
    if all(t.rank == 0 for nd in nodes for t in nd.tensors[:3]):
        return 0
    space = 1
    for nd in nodes:
        space *= math.prod(len(table) for table in _slot_tables(nd))
        if space >= cap:
            return cap
    return space


_CODE_SPACE = 1 << 62
"""The most configs numbered by one integer: a space larger than this is drawn by numbering a part of its choices
(still far more configs than any sample) and drawing the rest freely."""


def _distinct_codes(space: int, count: int, rng: np.random.Generator) -> npt.NDArray[np.int64]:
    """``count`` distinct integers of ``[0, space)`` (``count <= space``), drawn uniformly. Half the space or more:
    a permutation's first ``count``; less: draws in batches, repeats dropped, until ``count`` are found (each draw
    is new with a chance above one half, so a few batches do)."""
    if 2 * count >= space:
        return rng.permutation(space)[:count].astype(np.int64)
    found = np.empty(0, dtype=np.int64)
    while found.size < count:
        need = count - found.size
        draws = np.concatenate([found, rng.integers(0, space, size=need + need // 2 + 16, dtype=np.int64)])
        _, first = np.unique(draws, return_index=True)
        found = draws[np.sort(first)][:count]
    return found


def distinct_choices(sizes: Sequence[int], count: int, rng: np.random.Generator) -> list[npt.NDArray[np.int64]]:
    """``count`` distinct combinations of one choice per slot (slot ``j`` has ``sizes[j]`` choices; ``count`` at
    most their product), as one index array per slot. No loop draws repeats for ever: the combinations are numbered
    and drawn without replacement; where there are more than :data:`_CODE_SPACE`, the leading slots whose product
    fits are numbered (their combinations distinct, so the whole ones are) and the others drawn freely."""
    numbered = 0
    space = 1
    while numbered < len(sizes) and space * sizes[numbered] <= _CODE_SPACE:
        space *= sizes[numbered]
        numbered += 1
    codes = _distinct_codes(space, count, rng)
    out = []
    for size in sizes[:numbered]:
        out.append(codes % size)
        codes = codes // size
    out += [rng.integers(0, size, size=count, dtype=np.int64) for size in sizes[numbered:]]
    return out


def sample_layouts(module: Module, n: int, rng: np.random.Generator, source: object = "<module>"
                   ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float32]]:
    """The configurable nodes and ``1 + n`` layout configs (the default first, then distinct sampled ones, drawn
    without replacement; fewer when the program has fewer: then every one of them).

    Returns:
        ``(node_config_ids int64 [NC], node_config_feat float32 [C, NC, 18])``.

    Raises:
        HloFormatError: more configs x configurable nodes than :data:`~competition.limits.MAX_LAYOUT_CELLS`
            (naming ``source``), before any is drawn.
    """
    nodes = configurable_nodes(module)
    target = layout_space(nodes, n) if nodes else 0
    check_layout_cells(1 + target, len(nodes), source)
    ids = np.asarray([nd.node_id for nd in nodes], dtype=np.int64)
    feat = np.full((1 + target, len(nodes), schema.LAYOUT_CONFIG_DIM), -1, dtype=np.float32)
    if target:
        slots = [(k, t, table) for k, nd in enumerate(nodes) for t, table in enumerate(_slot_tables(nd))]
        picks = distinct_choices([len(table) for _, _, table in slots], target, rng)
        for (k, t, table), pick in zip(slots, picks, strict=True):
            start = t * schema.LAYOUT_SLOT_WIDTH
            feat[1:, k, start:start + table.shape[1]] = table[pick]
    return ids, feat


def layout_from_records(rec: ModuleRecords, num_nodes: int, source: object
                        ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float32], npt.NDArray[np.int64]]:
    """The configs of a layout record: runs with a layout and a profile, not failed.

    Returns:
        ``(node_config_ids [NC] ascending, node_config_feat [C, NC, 18], config_runtime [C])``; node columns
        sorted by node id when the record lists them in another order.

    Raises:
        HloFormatError: no usable run, a node id out of range or repeated, a run with another node count, more
            than 3 tensors or a dimension outside 0..5.
    """
    ids = np.asarray(rec.config_index_to_node, dtype=np.int64)
    if ids.size and (ids.min() < 0 or ids.max() >= num_nodes):
        raise HloFormatError(source, f"config_index_to_node holds node ids outside [0, {num_nodes})")
    if np.unique(ids).size != ids.size:
        raise HloFormatError(source, "config_index_to_node repeats a node id")
    runs = [r for r in rec.runs if r.layout is not None and not r.error and r.runtime_ns]
    if not runs:
        raise HloFormatError(source, "no run with a layout config and a measured runtime (> 0 ns)")
    check_layout_cells(len(runs), ids.size, source)
    table: dict[tuple[tuple[int, ...], ...], int] = {}  # a node's layout -> its row of ``rows``
    rows: list[list[float]] = []
    index = np.empty((len(runs), ids.size), dtype=np.int32)
    for c, run in enumerate(runs):
        assert run.layout is not None
        if len(run.layout) != ids.size:
            raise HloFormatError(source, f"run {c} configures {len(run.layout)} nodes; config_index_to_node "
                                         f"lists {ids.size}")
        for k, node in enumerate(run.layout):
            if node not in table:
                table[node] = len(rows)
                rows.append(_layout_row(node, c, int(ids[k]), source))
        index[c] = [table[node] for node in run.layout]
    order = np.argsort(ids, kind="stable")
    feat = np.asarray(rows, dtype=np.float32).reshape(-1, schema.LAYOUT_CONFIG_DIM)[index[:, order]]
    runtime = np.asarray([r.runtime_ns for r in runs], dtype=np.int64)
    return ids[order], feat, runtime


def _layout_row(node: tuple[tuple[int, ...], ...], run: int, node_id: int, source: object) -> list[float]:
    """The 18 ``node_config_feat`` columns of one node's layout (per tensor slot, its minor-to-major dims; -1
    where none), checked."""
    if len(node) > len(schema.LAYOUT_SLOTS):
        raise HloFormatError(source, f"run {run}, node {node_id}: {len(node)} tensors (at most 3)")
    row = [-1.0] * schema.LAYOUT_CONFIG_DIM
    for t, dims in enumerate(node):
        dims = dims[:schema.LAYOUT_SLOT_WIDTH]
        if any(not 0 <= d < schema.MAX_RANK for d in dims):
            raise HloFormatError(source, f"run {run}, node {node_id}: layout dims {list(dims)} outside 0..5")
        row[t * schema.LAYOUT_SLOT_WIDTH:t * schema.LAYOUT_SLOT_WIDTH + len(dims)] = [float(d) for d in dims]
    return row


def check_layout_cells(configs: int, nodes: int, source: object) -> None:
    """Refuse a layout file of more than :data:`~competition.limits.MAX_LAYOUT_CELLS` configs x configurable
    nodes, before its ``node_config_feat`` is allocated.

    Raises:
        HloFormatError: naming ``source``, the count and the limit.
    """
    problem = over(configs * nodes, MAX_LAYOUT_CELLS, "MAX_LAYOUT_CELLS",
                   f"config nodes ({configs:,} configs x {nodes:,} configurable nodes)")
    if problem is not None:
        raise HloFormatError(source, f"{problem}; not written")


def _bounds(values: Sequence[int]) -> list[float]:
    """A tile bound group: 6 leading values padded with 0, the sum, the product (0 for an empty list)."""
    head = [float(v) for v in values[:schema.MAX_RANK]] + [0.0] * (schema.MAX_RANK - min(len(values), 6))
    prod = float(np.prod(values, dtype=np.float64)) if len(values) else 0.0
    return head + [float(sum(values)), prod]


def tile_row(config: TileConfig) -> list[float]:
    """The 24 ``config_feat`` columns of a tile config: kernel, output and input bounds."""
    return _bounds(config.kernel_bounds) + _bounds(config.output_bounds) + _bounds(config.input_bounds)


def sample_tiles(kernel: Module, n: int, rng: np.random.Generator) -> npt.NDArray[np.float32]:
    """``1 + n`` tile configs of a kernel (one tile over the whole output first, then distinct sampled output
    bounds, drawn without replacement; fewer when the kernel has fewer: then every one of them), float32 ``[C, 24]``.
    Bounds count hardware tiles of the physical dims of the array the kernel tiles
    (:func:`~competition.hlo.tiles.tiled_shape`), as real tile configs do."""
    units = tile_units(physical_dims(tiled_shape(kernel))[-schema.MAX_RANK:])
    choices = [np.asarray(tile_sizes(u), dtype=np.int64) for u in units]
    whole = np.asarray(units, dtype=np.int64).reshape(1, len(units))
    target = min(n, math.prod(len(c) for c in choices) - 1)
    configs = whole
    if target > 0:
        # One more than needed, so that the whole-output config, drawn or not, can be left out.
        picks = distinct_choices([len(c) for c in choices], target + 1, rng)
        drawn = np.stack([c[p] for c, p in zip(choices, picks, strict=True)], axis=1)
        same = np.flatnonzero((drawn == whole).all(axis=1))
        configs = np.concatenate([whole, np.delete(drawn, same[0] if same.size else target, axis=0)])
    return tile_rows(configs)


def tile_rows(output_bounds: npt.NDArray[np.int64]) -> npt.NDArray[np.float32]:
    """:func:`tile_row` of configs with these output bounds (``[C, R]``, ``R`` at most 6) and no kernel or input
    bounds, at once: float32 ``[C, 24]``."""
    bounds = np.asarray(output_bounds, dtype=np.float64)
    rank = bounds.shape[1]
    out = np.zeros((bounds.shape[0], 3 * (schema.MAX_RANK + 2)), dtype=np.float64)
    first = schema.MAX_RANK + 2  # the output group follows the kernel group
    out[:, first:first + rank] = bounds
    out[:, first + schema.MAX_RANK] = bounds.sum(axis=1)
    out[:, first + schema.MAX_RANK + 1] = bounds.prod(axis=1) if rank else 0.0
    return out.astype(np.float32)


def tiles_from_records(rec: ModuleRecords, source: object
                       ) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """The configs of one kernel's record: tile runs not failed, measured above 1 ns; the normalizer is the
    default run's runtime.

    Returns:
        ``(config_feat [C, 24], config_runtime [C], config_runtime_normalizers [C])``.

    Raises:
        HloFormatError: no usable run, or no default run among them.
    """
    runs = [r for r in rec.runs if r.tile is not None and not r.error and (r.runtime_ns or 0) > 1]
    name = rec.module.name
    if not runs:
        raise HloFormatError(source, f"kernel {name!r}: no tile run with a measured runtime")
    default = next((r for r in runs if r.is_default), None)
    if default is None:
        raise HloFormatError(source, f"kernel {name!r}: no default run (is_default) to normalize by")
    feat = np.asarray([tile_row(r.tile) for r in runs if r.tile is not None], dtype=np.float32)
    runtime = np.asarray([r.runtime_ns for r in runs], dtype=np.int64)
    return feat, runtime, np.full(runtime.shape, default.runtime_ns, dtype=np.int64)


def _reachable(module: Module, start: str) -> list[Computation]:
    """``start`` and every computation it calls, directly or not, in module order."""
    by_name = {c.name: c for c in module.computations}
    seen, todo = {start}, [start]
    while todo:
        for ins in by_name[todo.pop()].instructions:
            for c in ins.called:
                if c not in seen:
                    seen.add(c)
                    todo.append(c)
    return [c for c in module.computations if c.name in seen]


def fusion_kernels(module: Module) -> list[tuple[str, Module]]:
    """One kernel module per fusion instruction outside fused computations: ``(fusion name, kernel)``."""
    fused = {c for _g, _comp, _i, ins in module.nodes() if ins.opcode == "fusion" for c in ins.called}
    out = []
    for comp in module.computations:
        if comp.name in fused:
            continue
        for ins in comp.instructions:
            if ins.opcode != "fusion" or not ins.called:
                continue
            entry = Computation(f"{ins.name}.entry")
            for k, o in enumerate(ins.operands):
                entry.instructions.append(HloInstruction("parameter", comp.instructions[o].shape,
                                                         name=f"param.{k}", parameter_number=k))
            entry.instructions.append(_copy_as(ins, tuple(range(len(ins.operands)))))
            entry.root = len(entry.instructions) - 1
            kernel = Module(f"{module.name}.{ins.name}", [*_reachable(module, ins.called[0]), entry])
            out.append((ins.name, kernel))
    return out


def _copy_as(ins: Instruction, operands: tuple[int, ...]) -> Instruction:
    fields = {k: getattr(ins, k) for k in ins.__dataclass_fields__ if k not in ("opcode", "shape", "operands")}
    return type(ins)(ins.opcode, ins.shape, operands, **fields)


def seeded_rng(seed: int, stem: str) -> np.random.Generator:
    """The generator of one output file: the same seed and stem, the same configs."""
    return np.random.default_rng([seed, zlib.crc32(stem.encode("utf-8"))])


def layout_npz_arrays(module: Module, node_config_ids: npt.NDArray[np.int64],
                      node_config_feat: npt.NDArray[np.float32], config_runtime: npt.NDArray[np.int64]
                      ) -> dict[str, object]:
    """The layout npz members of a module with its configs."""
    return layout_arrays(featurize(module), node_config_feat, node_config_ids.astype(np.int64),
                         config_runtime.astype(np.int64))


def tile_npz_arrays(kernel: Module, config_feat: npt.NDArray[np.float32], config_runtime: npt.NDArray[np.int64],
                    normalizers: npt.NDArray[np.int64]) -> dict[str, object]:
    """The tile npz members of a kernel with its configs."""
    return tile_arrays(featurize(kernel), config_feat.astype(np.float32), config_runtime.astype(np.int64),
                       normalizers.astype(np.int64))
