"""GNN rankers (PyTorch Geometric data, PyTorch layers): bidirectional SAGE, cross-configuration attention, ranking
losses, Graph Segment Training, and the training loop."""

from models.gnn.config import DEFAULTS, GNNConfig
from models.gnn.gst import HistoryTable, gst_scores
from models.gnn.layers import BiSAGEConv, CrossConfigAttention, GNNBlock, mean_adjacency, propagate
from models.gnn.losses import LOSSES, get_loss, list_mle, margin_ranking, pairwise_hinge
from models.gnn.model import GNNAttentionModel, GNNModel, feature_pipeline
from models.gnn.net import RankNet, Segment, make_segments
from models.gnn.steps import Item, predict_scores
from models.gnn.train import TrainResult

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
