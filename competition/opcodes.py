"""HLO opcode ids as TpuGraphs numbers them (``LEARNED_HLO_OPCODE_LIST``).

0 means unknown; 97 (``trace``) and 101 (``tuple-select``) are tombstoned and never appear in data.
"""

from __future__ import annotations

OPCODE_NAMES: dict[int, str] = {
    1: 'abs',
    2: 'add',
    3: 'add-dependency',
    4: 'after-all',
    5: 'all-reduce',
    6: 'all-to-all',
    7: 'atan2',
    8: 'batch-norm-grad',
    9: 'batch-norm-inference',
    10: 'batch-norm-training',
    11: 'bitcast',
    12: 'bitcast-convert',
    13: 'broadcast',
    14: 'call',
    15: 'ceil',
    16: 'cholesky',
    17: 'clamp',
    18: 'collective-permute',
    19: 'count-leading-zeros',
    20: 'compare',
    21: 'complex',
    22: 'concatenate',
    23: 'conditional',
    24: 'constant',
    25: 'convert',
    26: 'convolution',
    27: 'copy',
    28: 'copy-done',
    29: 'copy-start',
    30: 'cosine',
    31: 'custom-call',
    32: 'divide',
    33: 'domain',
    34: 'dot',
    35: 'dynamic-slice',
    36: 'dynamic-update-slice',
    37: 'exponential',
    38: 'exponential-minus-one',
    39: 'fft',
    40: 'floor',
    41: 'fusion',
    42: 'gather',
    43: 'get-dimension-size',
    44: 'set-dimension-size',
    45: 'get-tuple-element',
    46: 'imag',
    47: 'infeed',
    48: 'iota',
    49: 'is-finite',
    50: 'log',
    51: 'log-plus-one',
    52: 'and',
    53: 'not',
    54: 'or',
    55: 'xor',
    56: 'map',
    57: 'maximum',
    58: 'minimum',
    59: 'multiply',
    60: 'negate',
    61: 'outfeed',
    62: 'pad',
    63: 'parameter',
    64: 'partition-id',
    65: 'popcnt',
    66: 'power',
    67: 'real',
    68: 'recv',
    69: 'recv-done',
    70: 'reduce',
    71: 'reduce-precision',
    72: 'reduce-window',
    73: 'remainder',
    74: 'replica-id',
    75: 'reshape',
    76: 'reverse',
    77: 'rng',
    78: 'rng-get-and-update-state',
    79: 'rng-bit-generator',
    80: 'round-nearest-afz',
    81: 'rsqrt',
    82: 'scatter',
    83: 'select',
    84: 'select-and-scatter',
    85: 'send',
    86: 'send-done',
    87: 'shift-left',
    88: 'shift-right-arithmetic',
    89: 'shift-right-logical',
    90: 'sign',
    91: 'sine',
    92: 'slice',
    93: 'sort',
    94: 'sqrt',
    95: 'subtract',
    96: 'tanh',
    97: 'trace',
    98: 'transpose',
    99: 'triangular-solve',
    100: 'tuple',
    101: 'tuple-select',
    102: 'while',
    103: 'cbrt',
    104: 'all-gather',
    105: 'collective-permute-start',
    106: 'collective-permute-done',
    107: 'logistic',
    108: 'dynamic-reshape',
    109: 'all-reduce-start',
    110: 'all-reduce-done',
    111: 'reduce-scatter',
    112: 'all-gather-start',
    113: 'all-gather-done',
    114: 'opt-barrier',
    115: 'async-start',
    116: 'async-update',
    117: 'async-done',
    118: 'round-nearest-even',
    119: 'stochastic-convert',
    120: 'tan',
}
TOMBSTONED: frozenset[int] = frozenset({97, 101})
MAX_OPCODE = 120
NUM_OPCODES = MAX_OPCODE + 1
OPCODE_IDS: dict[str, int] = {name: i for i, name in OPCODE_NAMES.items() if i not in TOMBSTONED}
VALID_OPCODES: frozenset[int] = frozenset(range(NUM_OPCODES)) - TOMBSTONED

CONVOLUTION = OPCODE_IDS["convolution"]
DOT = OPCODE_IDS["dot"]
RESHAPE = OPCODE_IDS["reshape"]
PARAMETER = OPCODE_IDS["parameter"]
CONFIGURABLE_OPCODES: frozenset[int] = frozenset({CONVOLUTION, DOT, RESHAPE})


def opcode_id(name: str) -> int:
    """The id of an opcode name; raises ``KeyError`` naming the unknown opcode."""
    try:
        return OPCODE_IDS[name]
    except KeyError:
        raise KeyError(f"unknown HLO opcode {name!r}") from None


def _ids(*names: str) -> list[int]:
    return [OPCODE_IDS[n] for n in names]


OPCODE_GROUPS: dict[str, list[int]] = {
    "elementwise": _ids(
        "abs", "add", "atan2", "bitcast-convert", "cbrt", "ceil", "clamp", "compare", "complex", "convert",
        "cosine", "count-leading-zeros", "divide", "exponential", "exponential-minus-one", "floor", "imag",
        "is-finite", "log", "log-plus-one", "logistic", "and", "not", "or", "xor", "map", "maximum", "minimum",
        "multiply", "negate", "popcnt", "power", "real", "reduce-precision", "remainder", "round-nearest-afz",
        "round-nearest-even", "rsqrt", "select", "shift-left", "shift-right-arithmetic", "shift-right-logical",
        "sign", "sine", "sqrt", "stochastic-convert", "subtract", "tan", "tanh",
    ),
    "reduction": _ids("reduce", "reduce-window", "select-and-scatter", "batch-norm-grad", "batch-norm-inference",
                      "batch-norm-training"),
    "data_movement": _ids(
        "bitcast", "broadcast", "concatenate", "copy", "copy-start", "copy-done", "dynamic-slice",
        "dynamic-update-slice", "dynamic-reshape", "gather", "scatter", "pad", "reshape", "reverse", "slice",
        "transpose", "sort",
    ),
    "matrix": _ids("convolution", "dot"),
    "collective": _ids(
        "all-reduce", "all-reduce-start", "all-reduce-done", "all-gather", "all-gather-start", "all-gather-done",
        "all-to-all", "collective-permute", "collective-permute-start", "collective-permute-done",
        "reduce-scatter", "send", "send-done", "recv", "recv-done", "partition-id", "replica-id",
    ),
    "control": _ids(
        "while", "conditional", "call", "fusion", "tuple", "get-tuple-element", "after-all", "add-dependency",
        "opt-barrier", "domain", "async-start", "async-update", "async-done",
    ),
}
"""Opcode ids of each group but the last, ``other`` (everything not listed, including 0 = unknown)."""
OPCODE_GROUP_NAMES: tuple[str, ...] = (*OPCODE_GROUPS, "other")


OPCODE_GROUP_OF: tuple[int, ...] = tuple(
    next((g for g, ids in enumerate(OPCODE_GROUPS.values()) if i in ids), len(OPCODE_GROUPS))
    for i in range(NUM_OPCODES))
"""The group of each opcode id, an index into :data:`OPCODE_GROUP_NAMES`."""
