"""Feature pipelines shared by every model (transforms, tabular features, the processed-graph cache)."""

from competition.opcodes import OPCODE_GROUP_NAMES, OPCODE_GROUPS
from features.cache import BuildStats, ProcessedGraphs, evenly_spaced_configs
from features.data import CONFIG_ATTRS, NODE_ATTRS, graph_to_data, num_configs, select_configs
from features.transforms import (
    DEFAULT_LOG_COLUMNS,
    DOT_CONV_COLUMNS,
    PLACEHOLDER_OPCODE,
    CollapseChains,
    ConfigDimensionSizes,
    DedupConfigs,
    DotConvFeatures,
    DropConstantColumns,
    LogTransform,
    Normalize,
    OpcodeGroupFeatures,
    PadLayoutMinusOne,
    PruneToConfigurable,
    SampleConfigs,
    ShapeAlignmentFeatures,
    operand_nodes,
)

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
