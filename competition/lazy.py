"""A package's exports imported on first use (PEP 562's module ``__getattr__``), not when the package is: importing
one module of a package then loads that module's own imports, not every other one's (torch and PyTorch Geometric come
with the GNN modules and the graph cache, LightGBM with the GBDT)."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any


def lazy_exports(package: str, namespace: dict[str, Any], sources: Mapping[str, Sequence[str]],
                 ) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of the package ``package`` (its globals: ``namespace``) that export the
    names of ``sources`` (module name -> the names it gives): a name's module is imported at its first look-up, and
    the value kept in ``namespace``, where the next look-up finds it.

    Usage, at the end of a package's ``__init__.py``::

        __getattr__, __dir__ = lazy_exports(__name__, globals(), {"features.cache": ("ProcessedGraphs",), ...})
    """
    where = {name: module for module, names in sources.items() for name in names}

    def __getattr__(name: str) -> Any:  # noqa: N807 - the module attribute PEP 562 looks for
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = namespace[name] = getattr(importlib.import_module(module), name)
        return value

    def __dir__() -> list[str]:  # noqa: N807
        return sorted({*namespace, *where})

    return __getattr__, __dir__
