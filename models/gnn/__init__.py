"""GNN rankers (PyTorch Geometric data, PyTorch layers): bidirectional SAGE, cross-configuration attention, ranking
losses, Graph Segment Training, and the training loop.

The names below are imported from their modules on first use (PEP 562's module ``__getattr__``), not when the
package is: importing one module of it (``models.gnn.footprint``, ``models.gnn.launch_env``) loads that module's own
imports, not every other one's.
"""

from __future__ import annotations

from competition.lazy import lazy_exports

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

__getattr__, __dir__ = lazy_exports(__name__, globals(), {
    "models.gnn.config": ("DEFAULTS", "GNNConfig"),
    "models.gnn.gst": ("HistoryTable", "gst_scores"),
    "models.gnn.layers": ("BiSAGEConv", "CrossConfigAttention", "GNNBlock", "mean_adjacency", "propagate"),
    "models.gnn.losses": ("LOSSES", "get_loss", "list_mle", "margin_ranking", "pairwise_hinge"),
    "models.gnn.model": ("GNNAttentionModel", "GNNModel", "feature_pipeline"),
    "models.gnn.net": ("RankNet", "Segment", "make_segments"),
    "models.gnn.steps": ("Item", "predict_scores"),
    "models.gnn.train": ("TrainResult",),
})
