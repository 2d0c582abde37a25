"""Models that score configurations: baselines, GBDT, GNNs, and the ensembler.

The names below are imported from their modules on first use (PEP 562's module ``__getattr__``), not when the
package is: a run imports the models it names, and ``random`` or ``default-first`` neither LightGBM nor torch. The
registry alone is imported with the package, for :meth:`models.base.RankingModel.load` to know every saved name.
"""

from __future__ import annotations

from competition.lazy import lazy_exports
from models import registry as _registry  # noqa: F401 - registers the saved names (and imports no model)

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

__getattr__, __dir__ = lazy_exports(__name__, globals(), {
    "models.base": ("NotFittedError", "RankingModel", "load_model"),
    "models.baselines": ("DefaultFirstModel", "RandomModel"),
    "models.gbdt": ("GBDTModel",),
    "models.registry": ("MODELS", "available_models", "make_model"),
})
