"""Models that score configurations: baselines, GBDT, GNNs, and the ensembler."""

from models.base import NotFittedError, RankingModel, load_model
from models.baselines import DefaultFirstModel, RandomModel
from models.gbdt import GBDTModel
from models.registry import MODELS, available_models, make_model

__all__ = [
    "MODELS",
    "DefaultFirstModel",
    "GBDTModel",
    "NotFittedError",
    "RandomModel",
    "RankingModel",
    "available_models",
    "load_model",
    "make_model",
]
