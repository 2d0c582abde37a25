"""GNN rankers (PyTorch Geometric data, PyTorch layers): bidirectional SAGE, cross-configuration attention, ranking
losses, Graph Segment Training, and the training loop.

The names below are imported from their modules on first use (PEP 562's module ``__getattr__``), not when the
package is: importing one module of it (``models.gnn.footprint``, ``models.gnn.launch_env``) loads that module's own
imports, not every other one's.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

__all__ = [
    "DEFAULTS",
    "LOSSES",
    "BiSAGEConv",
    "CrossConfigAttention",
    "GNNAttentionModel",
    "GNNBlock",
    "GNNModel",
    "HistoryTable",
    "Item",
    "RankNet",
    "Segment",
    "GNNConfig",
    "TrainResult",
    "feature_pipeline",
    "get_loss",
    "gst_scores",
    "list_mle",
    "make_segments",
    "margin_ranking",
    "mean_adjacency",
    "pairwise_hinge",
    "predict_scores",
    "propagate",
]

_CONFIG = frozenset({"DEFAULTS", "GNNConfig"})
_GST = frozenset({"HistoryTable", "gst_scores"})
_LAYERS = frozenset({"BiSAGEConv", "CrossConfigAttention", "GNNBlock", "mean_adjacency", "propagate"})
_LOSSES = frozenset({"LOSSES", "get_loss", "list_mle", "margin_ranking", "pairwise_hinge"})
_MODEL = frozenset({"GNNAttentionModel", "GNNModel", "feature_pipeline"})
_NET = frozenset({"RankNet", "Segment", "make_segments"})
_STEPS = frozenset({"Item", "predict_scores"})


def _source(name: str) -> ModuleType | None:
    """The module ``name`` of :data:`__all__` comes from (imported now), or ``None`` for a name not exported."""
    if name not in __all__:
        return None
    if name in _CONFIG:
        import models.gnn.config

        return models.gnn.config
    if name in _GST:
        import models.gnn.gst

        return models.gnn.gst
    if name in _LAYERS:
        import models.gnn.layers

        return models.gnn.layers
    if name in _LOSSES:
        import models.gnn.losses

        return models.gnn.losses
    if name in _MODEL:
        import models.gnn.model

        return models.gnn.model
    if name in _NET:
        import models.gnn.net

        return models.gnn.net
    if name in _STEPS:
        import models.gnn.steps

        return models.gnn.steps
    import models.gnn.train

    return models.gnn.train


def __getattr__(name: str) -> Any:
    source = _source(name)
    if source is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(source, name)
    globals()[name] = value  # the next look-up finds it without calling here
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
