"""Model names to classes: the CLI and saved files name models by these keys."""

from __future__ import annotations

import types
import typing
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from competition.collections import Collection
from models import settings as settings_tree
from models.base import RankingModel, register_names

_NAMES: tuple[str, ...] = ("random", "default-first", "gbdt", "gnn", "gnn-attn")
"""The registered names, in :data:`MODELS`' order (each class's :attr:`~models.base.RankingModel.name`)."""


def _model_class(name: str) -> type[RankingModel]:
    """The class registered as ``name`` (one of :data:`_NAMES`), its module imported now: LightGBM comes with
    ``gbdt``, torch and PyTorch Geometric with the GNNs, and neither with the others."""
    if name == "random":
        from models.baselines import RandomModel

        return RandomModel
    if name == "default-first":
        from models.baselines import DefaultFirstModel

        return DefaultFirstModel
    if name == "gbdt":
        from models.gbdt import GBDTModel

        return GBDTModel
    if name == "gnn":
        from models.gnn.model import GNNModel

        return GNNModel
    if name == "gnn-attn":
        from models.gnn.model import GNNAttentionModel

        return GNNAttentionModel
    raise KeyError(name)


class _Models(Mapping[str, type[RankingModel]]):
    """Model names to classes, read-only; a class (and what its module needs) is imported on its first look-up, so
    that listing the names (``in``, iteration, ``len``, ``sorted``) imports nothing and a run imports only the models
    it names."""

    def __init__(self, names: Sequence[str]) -> None:
        self._names = tuple(names)
        self._classes: dict[str, type[RankingModel]] = {}

    def __getitem__(self, name: str) -> type[RankingModel]:
        if name not in self._names:
            raise KeyError(name)
        cls = self._classes.get(name)
        if cls is None:
            cls = self._classes[name] = _model_class(name)
        return cls

    def __contains__(self, name: object) -> bool:
        return name in self._names

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)

    def __repr__(self) -> str:
        return f"<models: {', '.join(self._names)}>"


MODELS: Mapping[str, type[RankingModel]] = _Models(_NAMES)
"""Every registered model class by name, imported on first look-up (``MODELS["gbdt"]`` imports LightGBM)."""
register_names(MODELS)


SUBMIT_MODELS: tuple[str, ...] = ("random", "default-first", "gbdt", "gnn-attn")
"""What ``make submit`` fits when no models are named: every family once, within the demo budget on 2 cores (the
plain ``gnn`` is left out for time; name it with ``--models`` to add it to the ensemble)."""


COST_WEIGHTS: dict[str, float] = {"random": 0.0, "default-first": 0.0, "gbdt": 1.0, "gnn": 3.0, "gnn-attn": 4.0}
"""Relative cost of fitting and predicting each model: the pipeline runs models cheapest first and shares a time budget
out in these proportions; an unlisted model counts 1. Set by hand; for the real counts ``python -m benchmarks.scale``
projects default-first far below gbdt and gbdt far below gnn-attn (RESULTS.md, "Projected time per stage"), so
gnn-attn's share is, if anything, small."""


def default_models() -> list[str]:
    """The models the pipeline runs when none are named (:data:`SUBMIT_MODELS`)."""
    return list(SUBMIT_MODELS)


def ensemble_members(names: Sequence[str]) -> list[str]:
    """The models of a run that the ensemble combines: the learned ones (not :attr:`~models.base.RankingModel.
    reference`) when there are two or more, else every one named.

    A reference ranking is random, or random past the default config, on every graph, so a weight on it only adds
    noise; but fitted on a few valid graphs, a flat metric (tile's top-5 score is 1 on most kernels) ties many weight
    vectors and lets it in. On the demo world's tile valid kernels the cross-validated ensemble scored lower with the
    references (a fold picked equal weights, random included) than without them (lab/journal.md, "The ensemble:
    learned members only, and no fitted combination on a handful of graphs").
    """
    learned = [n for n in names if not MODELS[n].reference]
    return learned if len(learned) >= 2 else list(names)


def available_models() -> list[str]:
    """Registered model names, sorted."""
    return sorted(MODELS)


def make_model(name: str, **params: Any) -> RankingModel:
    """A new, unfitted model.

    Args:
        name: a registered name (see :func:`available_models`).
        **params: hyper-parameters for the model's ``__init__``.

    Raises:
        ValueError: unknown name.
    """
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; expected one of {', '.join(available_models())}")
    return MODELS[name](**params)


@dataclass(frozen=True)
class ModelParams:
    """The hyper-parameters given for one model of a run: ``common`` for every collection, ``per_collection`` on top
    of them. Per-collection values override common ones, which override the model's defaults.
    """

    common: Mapping[str, Any] = field(default_factory=dict)
    per_collection: Mapping[Collection, Mapping[str, Any]] = field(default_factory=dict)

    def for_collection(self, collection: Collection) -> dict[str, Any]:
        """What the model of ``collection`` is built with (``make_model(name, **params.for_collection(c))``)."""
        return {**self.common, **self.per_collection.get(Collection(collection), {})}


def hyper_parameters(cls: type) -> dict[str, Any]:
    """A model's or the ensemble's hyper-parameters: the leaves of its settings tree (``CONFIG``,
    :mod:`models.settings`) by ``section.name``, each with its annotation; none for a class without a tree."""
    if not hasattr(cls, "CONFIG"):
        return {}
    return {key: leaf.hint for key, leaf in settings_tree.leaves(cls.CONFIG).items()}


def param_problem(cls: type, key: str, value: object) -> str | None:
    """Why ``value`` cannot be ``cls``'s hyper-parameter ``key`` (an unknown key, a value of the wrong type, outside
    its range or choices, a number that is not finite: :func:`models.settings.problem`), or ``None`` when it can."""
    if not hasattr(cls, "CONFIG"):
        return f"{cls.__name__} takes no hyper-parameters"
    problem = settings_tree.problem(cls.CONFIG, key, value)
    return None if problem is None else f"{cls.__name__}: {problem}"


def canonical_key(cls: type, key: str) -> str:
    """The key a hyper-parameter is stored by: its settings tree's ``section.name`` (``lr`` is ``train.lr``)."""
    return settings_tree.resolve(cls.CONFIG, key).key if hasattr(cls, "CONFIG") else key


def format_params(params: Mapping[str, Any]) -> str:
    """``key=value, ...`` on one line, values as Python literals (``(none)`` for a model without any)."""
    return ", ".join(f"{k}={v!r}" for k, v in params.items()) or "(none)"


def _defaults_by_scope(name: str) -> dict[str, dict[str, Any]]:
    """Each hyper-parameter's default per scope: ``{"all": v}`` when every collection has the same, else per kind
    (``tile``, ``layout``) with the collections that differ from their kind listed by name."""
    from models.ensemble import PIPELINE_PARAMS, Ensemble

    if name == Ensemble.name:
        ens = Ensemble(**PIPELINE_PARAMS)
        return {k: {"all": settings_tree.get(ens.config, k)} for k in settings_tree.leaves(Ensemble.CONFIG)}
    model = make_model(name)
    per = {c: model.resolved_params(c) for c in Collection}
    out: dict[str, dict[str, Any]] = {}
    for key in hyper_parameters(MODELS[name]):
        values = {c: per[c].get(key) for c in Collection}
        if len({repr(v) for v in values.values()}) == 1:
            out[key] = {"all": values[Collection.TILE_XLA]}
            continue
        scopes: dict[str, Any] = {}
        kinds = {kind: model.kind_params(kind).get(key) for kind in ("tile", "layout")}
        scopes.update(kinds)
        for c in Collection:
            if repr(values[c]) != repr(kinds[str(c.kind)]):
                scopes[c.value] = values[c]
        out[key] = scopes
    return out


def parameter_rows(names: Sequence[str] | None = None) -> list[tuple[str, str, str, dict[str, str], Any]]:
    """The rows of the parameter reference (:func:`models.params.reference`): every hyper-parameter of the models
    ``names`` (default: every registered one, then the ensemble) with its type, defaults and entry."""
    from models.ensemble import Ensemble

    rows = []
    for name in names or [*available_models(), Ensemble.name]:
        cls = Ensemble if name == Ensemble.name else MODELS[name]
        entries = {k: leaf.param for k, leaf in settings_tree.leaves(cls.CONFIG).items()} if hasattr(cls, "CONFIG") \
            else {}
        hints = hyper_parameters(cls)
        for key, defaults in _defaults_by_scope(name).items():
            scopes = {w: repr(v) for w, v in defaults.items()}
            kinds = typing.get_args(hints[key]) if typing.get_origin(hints[key]) in (typing.Union, types.UnionType) \
                else (hints[key],)
            shown = [k for k in kinds if k is not type(None) or any(v == "None" for v in scopes.values())]
            kind = " or ".join(settings_tree.kind_name(k) for k in shown)
            rows.append((name, key, kind, scopes, entries[key]))
    return rows


PARAMETER_DOC_HEADER = """# Hyper-parameters

Generated by `fastslow params --markdown > docs/parameters.md` from the models' settings trees (each leaf declared
once, with its type, default, range and help: `models/settings.py`; the GNN's presets per kind and collection:
`models/gnn/config.py`); a test fails when this file is stale. A key is `SECTION.NAME` (the name alone where it is
unique). Set a value with `--param MODEL.KEY=VALUE` (one collection: `--param MODEL.COLLECTION.KEY=VALUE`, e.g.
`--param gnn-attn.layout:xla:random.train.steps_per_graph=16`) or a `--config` TOML file (`[gnn-attn.train]`); a
value outside the allowed range is refused before any work starts. Defaults that differ by kind (`tile`, `layout`)
or collection are listed per scope; the ensemble's are those the pipeline fits it with.

"""


def parameter_reference(names: Sequence[str] | None = None) -> str:
    """``docs/parameters.md``: :data:`PARAMETER_DOC_HEADER` and the table of :func:`parameter_rows`."""
    from models.params import reference

    return PARAMETER_DOC_HEADER + reference(parameter_rows(names))
