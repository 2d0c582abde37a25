"""The arrays of a TpuGraphs npz file: names, order, dtypes and shapes, and the feature column map.

Shapes use symbols: ``N`` nodes, ``E`` edges, ``C`` configs, ``NC`` configurable nodes, ``S`` split points.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

NODE_FEAT_DIM = 140
TILE_CONFIG_DIM = 24
LAYOUT_CONFIG_DIM = 18

TPU_LANES = 128
"""The TPU stores a tensor in (8, 128) tiles over its two minor-most dimensions: the minor-most is padded to a
multiple of 128 (the lanes)..."""
TPU_SUBLANES = 8
"""...and the second minor-most to a multiple of 8 (the sublanes). What a layout changes is which dimensions those
are; the simulator (:mod:`competition.synthetic.physics`), the GBDT's features and the GNN's all use these two."""


@dataclass(frozen=True)
class ArraySpec:
    """One npz member: its key, its dtype and its shape in symbols (ints are literal sizes)."""

    key: str
    dtype: np.dtype
    shape: tuple[str | int, ...]
    meaning: str


_F32, _U8, _I64 = np.dtype("float32"), np.dtype("uint8"), np.dtype("int64")

TILE_ARRAYS: tuple[ArraySpec, ...] = (
    ArraySpec("node_feat", _F32, ("N", NODE_FEAT_DIM), "per-node features"),
    ArraySpec("node_opcode", _U8, ("N",), "opcode id per node"),
    ArraySpec("edge_index", _I64, ("E", 2), "rows [consumer, producer]"),
    ArraySpec("config_feat", _F32, ("C", TILE_CONFIG_DIM), "tile size config per config"),
    ArraySpec("config_runtime", _I64, ("C",), "runtime in ns (zeros in test)"),
    ArraySpec("config_runtime_normalizers", _I64, ("C",), "runtime of the default tile config in ns"),
)

LAYOUT_ARRAYS: tuple[ArraySpec, ...] = (
    ArraySpec("edge_index", _I64, ("E", 2), "rows [consumer, producer]"),
    ArraySpec("node_feat", _F32, ("N", NODE_FEAT_DIM), "per-node features"),
    ArraySpec("node_opcode", _U8, ("N",), "opcode id per node"),
    ArraySpec("node_config_feat", _F32, ("C", "NC", LAYOUT_CONFIG_DIM), "layout per config per configurable node"),
    ArraySpec("node_config_ids", _I64, ("NC",), "node index of each configurable node, ascending"),
    ArraySpec("node_splits", _I64, (1, "S"), "computation boundaries [[0, ..., N]]"),
    ArraySpec("config_runtime", _I64, ("C",), "runtime in ns (zeros in test)"),
)

# Integer members whose real files are known to vary in width; the reader accepts these and widens to int64.
ACCEPTED_INT_DTYPES = (np.dtype("int32"), np.dtype("int64"), np.dtype("uint8"))

# node_feat column groups (see the format spec, section 3.2).
COL_IS_ROOT = 0
COL_ELEMENT_SIZE = 1
COLS_ELEMENT_TYPE = slice(2, 21)
ELEMENT_TYPES = (
    "invalid", "pred", "s8", "s16", "s32", "s64", "u8", "u16", "u32", "u64",
    "f16", "f32", "f64", "bf16", "c64", "c128", "tuple", "opaque", "token",
)
ELEMENT_ITEMSIZE: dict[str, int] = {
    "pred": 1, "s8": 1, "u8": 1, "s16": 2, "u16": 2, "f16": 2, "bf16": 2, "s32": 4, "u32": 4, "f32": 4,
    "s64": 8, "u64": 8, "f64": 8, "c64": 8, "c128": 16, "tuple": 0, "opaque": 0, "token": 0, "invalid": 0,
}
"""Bytes per element of each element type (0: no array data)."""
COLS_SHAPE = slice(21, 27)
COL_SHAPE_SUM = 27
COL_SHAPE_PRODUCT = 28
COL_TUPLE_COUNT = 29
COL_PARAMETER_NUMBER = 30
COLS_DIMENSIONS = slice(31, 37)
COLS_WINDOW_SIZE = slice(37, 45)
COLS_WINDOW_STRIDE = slice(45, 53)
COLS_WINDOW_PAD_LOW = slice(53, 61)
COLS_WINDOW_PAD_HIGH = slice(61, 69)
COLS_WINDOW_DILATION = slice(69, 77)
COLS_BASE_DILATION = slice(77, 85)
COLS_WINDOW_REVERSAL = slice(85, 93)
COLS_CONV_DIMS = slice(93, 107)
# Offsets into COLS_CONV_DIMS of the convolution dimension numbers the feature transforms read.
CONV_INPUT_BATCH, CONV_INPUT_FEATURE = 0, 1
CONV_KERNEL_INPUT_FEATURE, CONV_KERNEL_OUTPUT_FEATURE = 6, 7
CONV_OUTPUT_BATCH, CONV_OUTPUT_FEATURE = 12, 13
COL_FEATURE_GROUP_COUNT = 107
COL_BATCH_GROUP_COUNT = 108
COLS_SLICE = slice(109, 121)
COLS_DYNAMIC_SLICE = slice(121, 125)
COLS_PAD = slice(125, 133)
COL_IS_STABLE = 133
COLS_LAYOUT = slice(134, 140)
EMPTY_PRODUCT_COLUMNS: tuple[int, ...] = (44, 52, 60, 68, 76, 84, 112, 116, 120, 124, 128, 132)
"""The ``_product`` columns of the lists every instruction is featurized with, applicable or not (window size,
stride, padding low / high, window and base dilation; slice start / stride / limit; dynamic-slice sizes; pad
edges low / high): the real featurizer reads each from the instruction's proto, where an op without a window,
slice or padding has an empty list, whose product is 1. So they hold 1, not 0, on every node the field does not
apply to (the shape product, column 28, is 1 for a scalar by the same rule)."""

# Tile config_feat column groups (section 3.3).
COLS_KERNEL_BOUNDS = slice(0, 8)
COLS_OUTPUT_BOUNDS = slice(8, 16)
COLS_INPUT_BOUNDS = slice(16, 24)

# Layout node_config_feat slots (section 3.4): output, input (first operand), kernel (second operand).
LAYOUT_SLOTS = ("output", "input", "kernel")
LAYOUT_SLOT_WIDTH = 6
LAYOUT_CONFIG_VALUES = 7
"""Distinct layout config values: -1 (none) and the dimensions 0..5 (models index them at value + 1)."""
MAX_RANK = 6
"""Dimensions of a tensor the features show: ``node_feat``'s shape and dimension columns, a tile bound group's
leading columns, a layout slot."""
LAYOUT_SLOT_COLUMNS: tuple[tuple[str, int], ...] = tuple((name, k * LAYOUT_SLOT_WIDTH)
                                                         for k, name in enumerate(LAYOUT_SLOTS))
"""Each layout slot with the column of its minor-most dimension in a config row: output 0, input 6, kernel 12."""


_HASH_WEIGHTS = np.random.default_rng(12345).integers(1, 2**62, size=4096, dtype=np.int64)


def row_hashes(rows: np.ndarray, block: int = 4096) -> np.ndarray:
    """A 64-bit hash per config row (small integer values, as float or int): equal rows, equal hashes; distinct
    rows collide with negligible probability. Computed ``block`` rows at a time, so the int64 copy it needs stays
    at ``block`` rows however many configs there are.

    Args:
        rows: ``[n, ...]`` array; each row is flattened.
        block: rows hashed at a time.

    Returns:
        int64 ``[n]``.
    """
    rows = np.asarray(rows)
    n = rows.shape[0]
    flat = rows.reshape(n, -1)
    width = flat.shape[1]
    weights = np.resize(_HASH_WEIGHTS, width) * (np.arange(width, dtype=np.int64) | 1)
    out = np.empty(n, dtype=np.int64)
    with np.errstate(over="ignore"):
        for s in range(0, n, block):
            b = np.rint(flat[s: s + block] * 16).astype(np.int64)
            out[s: s + block] = (b * weights).sum(axis=1) ^ (b.sum(axis=1) << 40)
    return out


def element_itemsize(node_feat: npt.NDArray[np.floating]) -> npt.NDArray[np.float64]:
    """Bytes per element of each node's output, from its element-type one-hot columns (:data:`ELEMENT_ITEMSIZE`;
    0 where no column is set), float64 ``[N]``."""
    table = np.asarray([ELEMENT_ITEMSIZE[t] for t in ELEMENT_TYPES], dtype=np.float64)
    onehot = np.asarray(node_feat[:, COLS_ELEMENT_TYPE], dtype=np.float64)
    return np.where(onehot.max(axis=1, initial=0.0) > 0, table[onehot.argmax(axis=1)], 0.0)
