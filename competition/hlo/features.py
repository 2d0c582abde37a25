"""Featurize a :class:`~competition.hlo.ir.Module` into TpuGraphs arrays: the one feature writer of both
sources of modules, real XLA programs (:mod:`competition.hlo.featurize`) and the synthetic world
(:mod:`competition.synthetic.writers`).

The column map is the one of the format spec (``docs`` / ``tpugraphs-format.md`` section 3.2), quirks included:
lists are truncated (6 entries, 2 for slice / dynamic-slice / pad, 4 for conv spatial dims), missing entries are 0,
``_sum`` / ``_product`` cover the whole list (empty list: sum 0, product 1), column 1 is always 0 and the layout
columns 134-139 are padded with 0, which clashes with dimension 0 exactly as in the real files. The window, slice,
dynamic-slice and pad groups are written for every instruction, as the real featurizer writes them from each
instruction's proto: on an op they do not apply to, their lists are empty, so their products
(:data:`~competition.schema.EMPTY_PRODUCT_COLUMNS`) are 1 and every other column of theirs is 0.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from competition import schema
from competition.hlo.ir import Instruction, Module, Shape

_TYPE_COLUMN: dict[str, int] = {t: 2 + k for k, t in enumerate(schema.ELEMENT_TYPES)}


@dataclass(frozen=True)
class FeaturizedGraph:
    """The graph arrays of one npz file.

    Attributes:
        node_feat: float32 ``[N, 140]``.
        node_opcode: uint8 ``[N]``.
        edge_index: int64 ``[E, 2]``, rows ``[consumer, producer]``, lexicographically sorted, unique, no self loops.
        node_splits: int64 ``[1, S]``: ``[[0, b1, ..., N]]``.
    """

    node_feat: npt.NDArray[np.float32]
    node_opcode: npt.NDArray[np.uint8]
    edge_index: npt.NDArray[np.int64]
    node_splits: npt.NDArray[np.int64]


def _group(values: Sequence[float], keep: int) -> list[float]:
    """``keep`` leading entries padded with 0, then the sum and product of the whole list."""
    head = [float(v) for v in values[:keep]]
    head += [0.0] * (keep - len(head))
    prod = 1.0
    for v in values:
        prod *= float(v)
    return head + [float(sum(values)), prod]


def _padded(values: Sequence[float], keep: int) -> list[float]:
    head = [float(v) for v in values[:keep]]
    return head + [0.0] * (keep - len(head))


def _shape_block(shape: Shape) -> npt.NDArray[np.float64]:
    """Columns 2..29 (type one-hot, dims, sum, product, tuple count) and 134..139 (layout) of a shape.

    Returns:
        float64 ``[34]``: the first 28 entries go to columns 2..29, the last 6 to columns 134..139.
    """
    out = np.zeros(34, dtype=np.float64)
    out[_TYPE_COLUMN[shape.element_type] - 2] = 1.0
    dims = shape.dims
    out[19:27] = _group(dims, 6)
    if shape.is_tuple:
        out[27] = len(shape.tuple_shapes)
        # A tuple has no array layout, so the layout columns stay 0.
    else:
        out[28:34] = _padded(shape.layout, 6)
    return out


def _instruction_row(ins: Instruction, row: npt.NDArray[np.float64]) -> None:
    """Fill the attribute columns (30..133) of one instruction into ``row`` (float64 ``[140]``)."""
    if ins.parameter_number is not None:
        row[30] = ins.parameter_number
    if ins.dimensions:
        row[31:37] = _padded(ins.dimensions, 6)
    w = ins.window
    if w is not None:
        row[37:45] = _group(w.size, 6)
        row[45:53] = _group(w.stride, 6)
        row[53:61] = _group(w.pad_low, 6)
        row[61:69] = _group(w.pad_high, 6)
        row[69:77] = _group(w.window_dilation, 6)
        row[77:85] = _group(w.base_dilation, 6)
        true_count = sum(bool(r) for r in w.reversal)
        row[85:93] = _padded([float(bool(r)) for r in w.reversal], 6) + [true_count, len(w.reversal) - true_count]
    cd = ins.conv_dims
    if cd is not None:
        row[93] = cd.input_batch
        row[94] = cd.input_feature
        row[95:99] = _padded(cd.input_spatial, 4)
        row[99] = cd.kernel_input_feature
        row[100] = cd.kernel_output_feature
        row[101:105] = _padded(cd.kernel_spatial, 4)
        row[105] = cd.output_batch
        row[106] = cd.output_feature
    if ins.opcode in ("convolution", "custom-call"):
        # XLA serializes group counts for convolutions and custom-calls only (the real alexnet graph holds 1 on
        # both); elsewhere the field does not apply and stays 0.
        row[107] = ins.feature_group_count
        row[108] = ins.batch_group_count
    if ins.opcode == "slice":
        row[109:113] = _group(ins.slice_starts, 2)
        row[113:117] = _group(ins.slice_strides, 2)
        row[117:121] = _group(ins.slice_limits, 2)
    if ins.opcode == "dynamic-slice":
        row[121:125] = _group(ins.dynamic_slice_sizes, 2)
    if ins.opcode == "pad":
        row[125:129] = _group(ins.pad_low, 2)
        row[129:133] = _group(ins.pad_high, 2)
    if ins.is_stable:
        row[133] = 1.0


def featurize(module: Module) -> FeaturizedGraph:
    """Turn a module into the ``node_feat`` / ``node_opcode`` / ``edge_index`` / ``node_splits`` arrays.

    Nodes are numbered computation by computation in ``module.computations`` order (see
    :meth:`Module.nodes`). Edges are one per (instruction, distinct operand) plus one from each caller to the
    root of each computation it calls, deduplicated, self loops dropped, sorted lexicographically.

    Args:
        module: the program; computations in post-order, entry last.

    Returns:
        The featurized graph (shapes in :class:`FeaturizedGraph`).
    """
    n = module.num_nodes
    feat = np.zeros((n, schema.NODE_FEAT_DIM), dtype=np.float64)
    feat[:, list(schema.EMPTY_PRODUCT_COLUMNS)] = 1.0  # the empty lists of ops without a window, slice or pad
    opcode = np.zeros(n, dtype=np.uint8)
    shape_cache: dict[Shape, npt.NDArray[np.float64]] = {}
    gid = 0
    for comp in module.computations:
        root = comp.root_index
        for i, ins in enumerate(comp.instructions):
            row = feat[gid]
            block = shape_cache.get(ins.shape)
            if block is None:
                block = shape_cache[ins.shape] = _shape_block(ins.shape)
            row[2:30] = block[:28]
            row[134:140] = block[28:]
            if i == root:
                row[0] = 1.0
            _instruction_row(ins, row)
            opcode[gid] = ins.opcode_id
            gid += 1

    edges = np.concatenate([module.operand_edges(), module.call_edges()], axis=0)
    edges = edges[edges[:, 0] != edges[:, 1]]
    # Encoding a pair as one integer makes dedup + lexicographic sort a single 1-D unique.
    keys = np.unique(edges[:, 0] * max(n, 1) + edges[:, 1])
    edge_index = np.stack([keys // max(n, 1), keys % max(n, 1)], axis=1).astype(np.int64).reshape(-1, 2)

    offsets = module.offsets
    bounds = [0]
    for k, comp in enumerate(module.computations):
        if any(tag in comp.name for tag in ("cluster", "while", "cond")):
            bounds.append(int(offsets[k + 1]))
    bounds.append(n)
    node_splits = np.unique(np.asarray(bounds, dtype=np.int64))[None, :]

    return FeaturizedGraph(
        node_feat=feat.astype(np.float32),
        node_opcode=opcode,
        edge_index=edge_index,
        node_splits=node_splits.astype(np.int64),
    )


def layout_arrays(graph: FeaturizedGraph, node_config_feat: object, node_config_ids: npt.NDArray[np.int64],
                  config_runtime: npt.NDArray[np.int64]) -> dict[str, object]:
    """The members of a layout npz file, in the format's order, for :func:`competition.npzio.write_npz`.

    Args:
        graph: the featurized program.
        node_config_feat: float32 ``[C, NC, 18]``, or a :class:`~competition.npzio.StreamedArray` of it.
        node_config_ids: int64 ``[NC]``, ascending.
        config_runtime: int64 ``[C]`` in ns (zeros where the runtimes are hidden or unknown).
    """
    return {
        "edge_index": graph.edge_index,
        "node_feat": graph.node_feat,
        "node_opcode": graph.node_opcode,
        "node_config_feat": node_config_feat,
        "node_config_ids": node_config_ids,
        "node_splits": graph.node_splits,
        "config_runtime": config_runtime,
    }


def tile_arrays(graph: FeaturizedGraph, config_feat: npt.NDArray[np.float32], config_runtime: npt.NDArray[np.int64],
                config_runtime_normalizers: npt.NDArray[np.int64]) -> dict[str, object]:
    """The members of a tile npz file, in the format's order, for :func:`competition.npzio.write_npz`.

    Args:
        graph: the featurized kernel.
        config_feat: float32 ``[C, 24]``.
        config_runtime: int64 ``[C]`` in ns (zeros where hidden or unknown).
        config_runtime_normalizers: int64 ``[C]``: the default config's runtime (ones where hidden or unknown).
    """
    return {
        "node_feat": graph.node_feat,
        "node_opcode": graph.node_opcode,
        "edge_index": graph.edge_index,
        "config_feat": config_feat,
        "config_runtime": config_runtime,
        "config_runtime_normalizers": config_runtime_normalizers,
    }
