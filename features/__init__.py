"""Feature pipelines shared by every model (transforms, tabular features, the processed-graph cache).

The names below are imported from their modules on first use (PEP 562's module ``__getattr__``), not when the
package is: ``import features.tabular_tile`` (the GBDT's and the baselines' features) then loads neither torch nor
PyTorch Geometric, which the cache, the graph data and the transforms need.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

__all__ = [
    "CONFIG_ATTRS",
    "DEFAULT_LOG_COLUMNS",
    "DOT_CONV_COLUMNS",
    "NODE_ATTRS",
    "OPCODE_GROUPS",
    "OPCODE_GROUP_NAMES",
    "PLACEHOLDER_OPCODE",
    "BuildStats",
    "CollapseChains",
    "ConfigDimensionSizes",
    "DedupConfigs",
    "DotConvFeatures",
    "DropConstantColumns",
    "LogTransform",
    "Normalize",
    "OpcodeGroupFeatures",
    "PadLayoutMinusOne",
    "ProcessedGraphs",
    "PruneToConfigurable",
    "SampleConfigs",
    "ShapeAlignmentFeatures",
    "evenly_spaced_configs",
    "graph_to_data",
    "num_configs",
    "operand_nodes",
    "select_configs",
]

_OPCODES = frozenset({"OPCODE_GROUP_NAMES", "OPCODE_GROUPS"})
_CACHE = frozenset({"BuildStats", "ProcessedGraphs", "evenly_spaced_configs"})
_DATA = frozenset({"CONFIG_ATTRS", "NODE_ATTRS", "graph_to_data", "num_configs", "select_configs"})


def _source(name: str) -> ModuleType | None:
    """The module ``name`` of :data:`__all__` comes from (imported now), or ``None`` for a name not exported."""
    if name not in __all__:
        return None
    if name in _OPCODES:
        import competition.opcodes

        return competition.opcodes
    if name in _CACHE:
        import features.cache

        return features.cache
    if name in _DATA:
        import features.data

        return features.data
    import features.transforms

    return features.transforms


def __getattr__(name: str) -> Any:
    source = _source(name)
    if source is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(source, name)
    globals()[name] = value  # the next look-up finds it without calling here
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
