"""The interface every ranking model follows, and saving and loading a fitted model as one JSON file.

A model is fitted per collection (one instance per collection) and follows scikit-learn's estimator contract:
hyper-parameters are stored unchanged in ``__init__``, :meth:`RankingModel.fit` returns ``self``, learned state is
held in public attributes whose names end with ``_``, and :meth:`RankingModel.predict` never refits.

Saving writes the model's name, hyper-parameters, collection, a format version and every learned attribute
(numpy arrays as lists with their dtype, NaN as null) to one strict JSON file; Python's float repr round-trips float64 exactly, so a
loaded model predicts exactly what the saved one did.
"""

from __future__ import annotations

import abc
import inspect
import json
import os
from collections import ChainMap
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar, Self

import numpy as np
import numpy.typing as npt
import sklearn.exceptions

from competition.atomic import atomic_write_text
from competition.collections import Collection
from competition.dataset import CollectionData
from competition.nesting import json_loads
from competition.reader import LayoutGraph, TileGraph
from models.fields import FieldError, check_mapping, check_str, decode_value, shown

FORMAT_VERSION = 1

Graph = TileGraph | LayoutGraph


class NotFittedError(sklearn.exceptions.NotFittedError):
    """A model that needs fitting was asked to predict before :meth:`RankingModel.fit` (scikit-learn's error, so
    code that catches that one catches this)."""


def init_params(obj: object) -> dict[str, Any]:
    """``obj``'s hyper-parameters as given to its ``__init__``, in the signature's order (each kept as an attribute of
    the same name): what a model's and the ensemble's ``get_params`` return."""
    names = [p for p in inspect.signature(type(obj).__init__).parameters if p != "self"]
    return {p: getattr(obj, p) for p in names}


MODEL_FILE = "model.json"
"""A saved run's fitted model, in its run folder."""


def run_folder(runs_dir: str | os.PathLike[str], model_name: str, collection: Collection | str) -> Path:
    """``<runs_dir>/<model>/<collection slug>``: where a model's run for a collection lives.

    Raises:
        ValueError: a model name that is not one plain folder name (a path such as ``../elsewhere/gbdt`` would lead
            out of ``runs_dir``).
    """
    if (not isinstance(model_name, str) or model_name in ("", ".", "..") or "/" in model_name or "\\" in model_name
            or "\0" in model_name):
        raise ValueError(f"expected a model name (one plain folder name in {runs_dir}); found {model_name!r}")
    return Path(runs_dir) / model_name / Collection(collection).slug


class RankingModel(abc.ABC):
    """Scores the configs of one graph; lower score means predicted faster.

    Subclasses set :attr:`name` (their registry key), store their hyper-parameters unchanged in ``__init__`` under
    the same names as the arguments, and keep learned state in attributes ending with ``_`` (JSON-able values or
    numpy arrays), which :meth:`save` and :meth:`load` carry.
    """

    name: ClassVar[str]
    STATE_REQUIRED: ClassVar[tuple[str, ...]] = ()
    """The learned attributes a saved model of this class must hold (:meth:`check_state`)."""
    STATE_OPTIONAL: ClassVar[tuple[str, ...]] = ("collection_",)
    """The learned attributes it may hold besides (an unfitted model saves none); a saved state with any other is
    refused."""
    reference: ClassVar[bool] = False
    """A reference ranking that learns no ranking of its own (random, default-first): scored beside the others,
    kept out of the ensemble when two learned models are there (see :func:`models.registry.ensemble_members`)."""

    @abc.abstractmethod
    def fit(self, data: CollectionData, *, progress: bool = True, deadline: float | None = None,
            predict_by: float | None = None) -> Self:
        """Learn from the graphs of one collection.

        The caller decides which graphs the model learns from (``data.train``), which graphs early stopping scores
        (``data.eval``) and on which configs (``data.protocol``); a model never lists a folder, picks another split
        nor sees the data root itself.

        Args:
            data: the collection's graphs (:class:`competition.dataset.CollectionData`): ``train`` to learn from
                (their runtimes must be known); ``eval``, the graphs early stopping scores in models that stop early
                (the GBDT's rounds, the GNN's kept epoch), ``None`` for no early stopping; ``protocol``, which
                configs of those graphs it scores (the pipeline's valid protocol); ``valid`` and ``test``, the
                graphs the caller predicts afterwards.
            progress: show a progress bar.
            deadline: a ``time.monotonic()`` value by which fitting stops, keeping the best state reached (a
                share of the run's time budget); ``None`` for no limit.
            predict_by: a ``time.monotonic()`` value by which the caller's predictions of the collection's valid
                and test graphs are also to be done (the end of the model's share of the budget); a model that can
                forecast its prediction time ends fitting early enough for it (the GNN); the others ignore it.

        Returns:
            ``self``.
        """

    @abc.abstractmethod
    def predict(self, graph: Graph) -> npt.NDArray[np.float64]:
        """Scores of the graph's configs, float64 ``[C]``; lower means predicted faster. Never refits.

        Raises:
            NotFittedError: the model needs fitting and was not fitted.
        """

    def get_params(self) -> dict[str, Any]:
        """Hyper-parameters as given to ``__init__``."""
        return init_params(self)

    def resolved_params(self, collection: Collection) -> dict[str, Any]:
        """The hyper-parameters this model fits ``collection`` with, defaults filled in: what the pipeline prints and
        saves beside its outputs. The same as :meth:`get_params` unless a model has per-collection defaults."""
        return self.get_params()

    def kind_params(self, kind: str) -> dict[str, Any]:
        """The hyper-parameters this model fits a collection of ``kind`` (``tile``, ``layout``) with when the
        collection sets none of its own: the same as :meth:`get_params` unless a model has per-kind defaults."""
        return self.get_params()

    @classmethod
    def quick_params(cls, collection: Collection) -> dict[str, Any]:
        """Hyper-parameters for a quick run of ``collection`` (the demo world, which ``make submit`` must finish in
        5 minutes), in place of defaults that cost more than such a run can hold; the pipeline applies them under
        any the user gives. None by default."""
        return {}

    def fits_concurrently(self) -> bool:
        """Whether the pipeline may fit several collections with this model at once, each in a process of its own
        with a share of the CPU cores (``jobs``). False by default: a model whose library already spreads one fit
        over every core gains nothing from it."""
        return False

    def source_digests(self, collection: Collection) -> dict[str, str]:
        """The files besides the data whose content a fit of ``collection`` starts from, each by the setting naming
        it, as its SHA-256 (the GNN's ``train.init_from``): part of a saved fit's key
        (:func:`fastslow.saved_runs.fit_key`), so that other content at the same path is another fit. None by
        default.

        Raises:
            ValueError, OSError: a file named that cannot be read.
        """
        return {}

    def work_factor(self, collection: Collection) -> float:
        """How much more fitting ``collection`` costs with this model's hyper-parameters than with the settings the
        pipeline's per-collection size measure (:func:`fastslow.fitting.collection_weights`) stands for: the
        time budget shares a model's time out across collections by that measure times this. 1 by default."""
        return 1.0

    def learned_state(self) -> dict[str, Any]:
        """Learned attributes (names ending with ``_``), as stored on the instance."""
        return {k: v for k, v in vars(self).items() if k.endswith("_") and not k.startswith("_")}

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.get_params().items())
        return f"{type(self).__name__}({args})"

    def save(self, path: str | os.PathLike[str], *, extra: Mapping[str, Any] | None = None) -> Path:
        """Write the model to a JSON file, atomically.

        Args:
            path: destination (conventionally ``*.json``).
            extra: more top-level entries (plain JSON data) for what keeps records beside the model (a saved
                run's ``fit``: :mod:`fastslow.saved_runs`); the loader reads past them.

        Returns:
            The destination path.
        """
        state = self.learned_state()
        collection = state.get("collection_")
        doc = {
            "name": self.name,
            "version": FORMAT_VERSION,
            "params": self.get_params(),
            "collection": None if collection is None else str(collection),
            "state": {k: _encode(v) for k, v in state.items()},
            **(extra or {}),
        }
        return atomic_write_text(path, json.dumps(doc, indent=1, allow_nan=False) + "\n")

    @classmethod
    def upgrade_saved(cls, params: dict[str, Any], state: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        """The hyper-parameters and state of a file saved by an earlier version, as this version takes them (the same
        here; a model whose settings changed overrides it).

        Raises:
            ValueError: a file this version cannot take, saying why.
        """
        return params, state

    def check_state(self, state: Mapping[str, Any]) -> None:
        """Refuse a saved state (as read from the file, before anything in it is decoded) that this model cannot
        take, naming the field: a saved model is data someone else may have written, and nothing of it reaches
        numpy, torch or LightGBM unchecked (:mod:`models.fields`).

        Here: the keys (every one of :attr:`STATE_REQUIRED`, none outside it and :attr:`STATE_OPTIONAL`) and
        ``collection_``; a model with more state checks it too (by overriding this and calling it).

        Raises:
            models.fields.FieldError: the first field that cannot be used.
        """
        check_mapping(state, "state", required=self.STATE_REQUIRED, optional=self.STATE_OPTIONAL)
        if "collection_" in state:
            check_str(state["collection_"], "state.collection_", choices=[c.value for c in Collection])

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> RankingModel:
        """Read a model written by :meth:`save`; on the base class, dispatch on the saved name.

        Args:
            path: a file written by :meth:`save`.

        Returns:
            The model, predicting exactly as the saved one did.

        Raises:
            ValueError: the file is not a saved model of this class (or of any registered one), or holds a field
                the model cannot take (:meth:`check_state`).
        """
        path = Path(path)
        doc = _read_doc(path)
        if cls is RankingModel:
            if doc["name"] not in _NAMED:
                raise ValueError(f"{path}: expected a saved model named one of {sorted(_NAMED)}; "
                                 f"found name {doc['name']!r}")
            cls = _NAMED[doc["name"]]
        elif doc["name"] != cls.name:
            raise ValueError(f"{path}: expected a saved {cls.__name__} (name {cls.name!r}); "
                             f"found name {doc['name']!r}")
        try:
            params, state = cls.upgrade_saved(dict(doc["params"]), dict(doc["state"]))
        except ValueError as exc:
            raise ValueError(f"{path}: {exc}") from None
        except (TypeError, KeyError, AttributeError) as exc:
            raise ValueError(f"{path}: expected a saved {cls.__name__}; found an earlier version's parameters or "
                             f"state it cannot take ({type(exc).__name__}: {exc})") from exc
        try:
            model = cls(**params)
        except (TypeError, ValueError, KeyError, AttributeError) as exc:
            raise ValueError(f"{path}: expected a saved {cls.__name__}; found parameters or state it cannot take "
                             f"({type(exc).__name__}: {exc})") from exc
        try:
            model.check_state(state)
            decoded = {key: decode_value(value, f"state.{key}") for key, value in state.items()}
        except ValueError as exc:  # a FieldError names the field
            raise ValueError(f"{path}: {exc}") from None
        except (TypeError, KeyError, AttributeError) as exc:
            raise ValueError(f"{path}: expected a saved {cls.__name__}; found state it cannot take "
                             f"({type(exc).__name__}: {exc})") from exc
        for key, value in decoded.items():
            setattr(model, key, Collection(value) if key == "collection_" else value)
        return model


_NAMED: ChainMap[str, type[RankingModel]] = ChainMap()
"""The model classes by the name their files are saved under, for :meth:`RankingModel.load`: given by
:mod:`models.registry` (:func:`register_names`), which the package imports whenever any of its modules is."""


def register_names(classes: Mapping[str, type[RankingModel]]) -> None:
    """Make :meth:`RankingModel.load` read files saved under these names with these classes (over any registered
    before). ``classes`` is kept, not copied: a mapping that imports each class on its first look-up
    (:data:`models.registry.MODELS`) imports only the class of a file loaded."""
    _NAMED.maps.insert(0, classes)


def registered_names() -> list[str]:
    """The names saved models and ensemble members may have (:mod:`models.registry`'s), sorted."""
    return sorted(_NAMED)


def load_model(path: str | os.PathLike[str]) -> RankingModel:
    """Load any saved model, choosing its class by the name stored in the file."""
    return RankingModel.load(path)


def read_json_doc(path: Path, what: str) -> Any:
    """The parsed JSON of a saved ``what`` (e.g. ``"model"``), or a ``ValueError`` naming the file and the problem."""
    try:
        return json_loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ValueError(f"{path}: expected a saved {what}; found no such file") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: expected a saved {what} (JSON); found invalid JSON ({exc})") from None


def _read_doc(path: Path) -> dict[str, Any]:
    doc = read_json_doc(path, "model")
    missing = [k for k in ("name", "version", "params", "state") if not isinstance(doc, dict) or k not in doc]
    if missing:
        raise ValueError(f"{path}: expected a saved model with keys name, version, params, state; "
                         f"found it lacks {', '.join(missing)}")
    if doc["version"] != FORMAT_VERSION:
        raise ValueError(f"{path}: expected model format version {FORMAT_VERSION}; found {shown(doc['version'])}")
    try:
        check_str(doc["name"], "name", max_length=100)
        check_mapping(doc["params"], "params")
        check_mapping(doc["state"], "state")
    except FieldError as exc:
        raise ValueError(f"{path}: {exc}") from None
    return doc


def _encode(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        data: Any = value.tolist()
        if value.dtype.kind == "f":
            # Strict JSON has no NaN: null stands for it, and numpy reads None back as NaN in a float array.
            data = np.where(np.isnan(value), None, value.astype(object)).tolist()
        return {"__ndarray__": data, "dtype": value.dtype.str, "shape": list(value.shape)}
    if isinstance(value, np.generic):
        return _encode(value.item())
    if isinstance(value, float) and not np.isfinite(value):
        return None  # strict JSON has no NaN or inf
    if isinstance(value, dict):
        return {str(k): _encode(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_encode(v) for v in value]
    return value
