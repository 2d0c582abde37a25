"""Models that score configurations: baselines, GBDT, GNNs, and the ensembler.

The names below are imported from their modules on first use (PEP 562's module ``__getattr__``), not when the
package is: a run imports the models it names, and ``random`` or ``default-first`` neither LightGBM nor torch. The
registry alone is imported with the package, for :meth:`models.base.RankingModel.load` to know every saved name.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from models import registry as _registry  # registers the saved names (and imports no model)

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

_BASE = frozenset({"NotFittedError", "RankingModel", "load_model"})
_BASELINES = frozenset({"DefaultFirstModel", "RandomModel"})
_GBDT = frozenset({"GBDTModel"})


def _source(name: str) -> ModuleType | None:
    """The module ``name`` of :data:`__all__` comes from (imported now), or ``None`` for a name not exported."""
    if name not in __all__:
        return None
    if name in _BASE:
        import models.base

        return models.base
    if name in _BASELINES:
        import models.baselines

        return models.baselines
    if name in _GBDT:
        import models.gbdt

        return models.gbdt
    return _registry


def __getattr__(name: str) -> Any:
    source = _source(name)
    if source is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(source, name)
    globals()[name] = value  # the next look-up finds it without calling here
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
