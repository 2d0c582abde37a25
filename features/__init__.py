"""Feature pipelines shared by every model (transforms, tabular features, the processed-graph cache).

The names below are imported from their modules on first use (PEP 562's module ``__getattr__``), not when the
package is: ``import features.tabular_tile`` (the GBDT's and the baselines' features) then loads neither torch nor
PyTorch Geometric, which the cache, the graph data and the transforms need.
"""

from __future__ import annotations

from competition.lazy import lazy_exports

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

__getattr__, __dir__ = lazy_exports(__name__, globals(), {
    "competition.opcodes": ("OPCODE_GROUP_NAMES", "OPCODE_GROUPS"),
    "features.cache": ("BuildStats", "ProcessedGraphs", "evenly_spaced_configs"),
    "features.data": ("CONFIG_ATTRS", "NODE_ATTRS", "graph_to_data", "num_configs", "select_configs"),
    "features.transforms": ("DEFAULT_LOG_COLUMNS", "DOT_CONV_COLUMNS", "PLACEHOLDER_OPCODE", "CollapseChains",
                            "ConfigDimensionSizes", "DedupConfigs", "DotConvFeatures", "DropConstantColumns",
                            "LogTransform", "Normalize", "OpcodeGroupFeatures", "PadLayoutMinusOne",
                            "PruneToConfigurable", "SampleConfigs", "ShapeAlignmentFeatures", "operand_nodes"),
})
