"""Combine several models' per-config scores into one ranking per graph, with weights fitted per collection.

Every model scores the configs of a graph (lower = predicted faster), on scales that differ from model to model. The
ensemble first maps each model's scores of a graph onto [0, 1] (:func:`normalize_scores`: ``rank`` or ``minmax``),
then adds them up with non-negative weights that sum to 1, one weight vector per collection:

* ``best``: all the weight on the single model with the best mean metric on the fitting graphs;
* ``mean``: equal weights;
* ``weighted``: the weight vector of a simplex grid (step 0.1 for up to 4 models, coarser above, see
  :func:`simplex_grid`) with the best mean metric on the fitting graphs (Kendall tau for layout collections, the
  top-5 tile score for ``tile:xla``); ties go to the tied vector closest to the centroid of all tied vectors;
* ``auto``: whichever of these (and, with ``normalization="auto"``, whichever normalisation) has the best
  cross-validated score over the fitting graphs (ties go to the simpler choice: best, then mean, then weighted;
  rank before minmax).

With ``min_graphs``, a collection with fewer fitting graphs than that gets none of these: all its weight goes to the
member that is best over the collections of its kind (``overall``: over the four layout collections for a layout
one; tile is scored by another metric, and the model best there need not be best on layout); the pipeline sets
:data:`MIN_FITTED_GRAPHS`.

Cross-validation splits a collection's graphs into ``folds`` groups (leave-one-graph-out when there are fewer graphs
than folds), reproducibly from ``seed``. :meth:`Ensemble.cross_val_predict` scores each graph with weights fitted
without it (and, for ``auto``, with the method chosen without it too, by cross-validation over the other graphs):
this is the honest score of the ensemble on the fitting split. :meth:`Ensemble.fit` fits on all the graphs, which is
what test predictions use. A graph with no other graph of its collection to fit on gets equal weights.

The per-graph metric of a candidate weight vector is exactly the one the submission is scored by:
:func:`~competition.metrics.graph_score` of the ensemble's scores, ranked as the written submission ranks them (ties
by index). Layout graphs with more than ``max_configs`` configs are
scored on a fixed random subset of their configs while fitting (never when predicting), to bound the cost.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Self

import numpy as np
import numpy.typing as npt
from scipy.stats import rankdata

from competition.atomic import atomic_write_text
from competition.collections import Collection
from competition.metrics import graph_score
from competition.submission_format import parse_submission_id
from models import settings as settings_tree
from models.base import NotFittedError, read_json_doc, registered_names
from models.fields import (
    FieldError,
    check_int,
    check_list,
    check_mapping,
    check_number,
    check_numbers,
    check_str,
    shown,
)
from models.settings import Configured, Section, section, seed_setting, setting

METHODS = ("auto", "weighted", "best", "mean")
FITTED_METHODS = ("weighted", "best", "mean", "overall")
"""The methods a fitted collection is combined by (``auto`` chooses one of the first three; ``overall`` is the
member best over the collections of its kind, below ``min_graphs``)."""
WEIGHT_SUM_TOLERANCE = 1e-6
"""How far a saved collection's weights may sum from 1 (fitted weights are multiples of a grid step, or equal)."""
NORMALIZATIONS = ("auto", "rank", "minmax")
FORMAT_VERSION = 1
_STATE_KEYS = ("models_", "collections_", "cv_score_", "member_scores_", "candidate_scores_", "num_graphs_")
MAX_GRID_POINTS = 300
"""Upper bound on the simplex grid's size: step 0.1 up to 4 models, the finest step that fits above."""
GRID_STEPS = 10
"""Grid resolution for up to 4 models: weights are multiples of ``1 / GRID_STEPS``."""

Predictions = Mapping[str, Mapping[str, npt.ArrayLike]]
"""``{model name: {submission ID: float scores [C]}}``, lower = predicted faster."""
Labels = Mapping[str, npt.ArrayLike]
"""``{submission ID: targets [C]}``: what each graph's configs rank by (:meth:`competition.labels.SplitLabels.targets`:
normalised runtimes for tile, ``config_runtime`` for layout)."""

MIN_FITTED_GRAPHS = 30
"""The pipeline's ensemble fits a collection's combination only with at least this many valid graphs; below, the
collection takes the member that is best over the collections of its kind (``min_graphs``). Fitted on the 4 (demo)
or 6 (bench) valid graphs of a layout collection, the combinations of gbdt and gnn-attn scored below gnn-attn alone
on the test split (on the demo world and on the bench worlds' xla:default), while tile's combination, fitted on 128
bench kernels, gained on one bench world and lost nothing on the other (lab/journal.md, "The ensemble: learned
members only, and no fitted combination on a handful of graphs"). The real valid split has 7-20 graphs per layout
collection and 676 tile kernels."""

PIPELINE_PARAMS: dict[str, Any] = {"combine.method": "auto", "combine.normalization": "auto",
                                   "combine.min_graphs": MIN_FITTED_GRAPHS}
"""The hyper-parameters the pipeline (and the benchmarks that stand for it) fit :class:`Ensemble` with."""

_CANDIDATE_ORDER = ("best", "mean", "weighted")  # tie-break of auto: the simpler choice first


# --------------------------------------------------------------------------------------------------------------
# Building blocks
# --------------------------------------------------------------------------------------------------------------


def normalize_scores(scores: npt.ArrayLike, how: str = "rank") -> npt.NDArray[np.float64]:
    """Map one graph's scores onto [0, 1], keeping their order.

    Args:
        scores: ``[C]`` finite scores, lower = faster.
        how: ``rank``: average ranks (ties share their mean rank), scaled so the lowest is 0 and the highest 1;
            ``minmax``: ``(s - min) / (max - min)``.

    Returns:
        float64 ``[C]``; all 0.5 when the scores are constant (or there is a single config).

    Raises:
        ValueError: an unknown ``how``, a non-vector, or a non-finite score.
    """
    s = np.asarray(scores, dtype=np.float64)
    if s.ndim != 1:
        raise ValueError(f"scores must be a vector; got shape {s.shape}")
    if not np.isfinite(s).all():
        raise ValueError(f"scores must be finite; found {int((~np.isfinite(s)).sum())} non-finite value(s)")
    if how not in ("rank", "minmax"):
        raise ValueError(f"normalization must be 'rank' or 'minmax'; got {how!r}")
    if s.size == 0:
        return s.copy()
    lo, hi = float(s.min()), float(s.max())
    if lo == hi:
        return np.full(s.size, 0.5)
    if how == "rank":
        return (rankdata(s, method="average") - 1.0) / (s.size - 1.0)
    return (s - lo) / (hi - lo)


def combine(weights: npt.ArrayLike, normalized: Sequence[npt.NDArray[np.float64]]) -> npt.NDArray[np.float64]:
    """Weighted sum of normalised score vectors, added in model order (zero weights skipped).

    Args:
        weights: ``[M]`` weights.
        normalized: ``M`` arrays ``[C]`` (a ``[P, C]`` stack per model also works, with ``weights`` ``[P, M]``).

    Returns:
        float64 ``[C]`` (or ``[P, C]``).
    """
    w = np.asarray(weights, dtype=np.float64)
    acc: npt.NDArray[np.float64] = np.zeros(np.broadcast_shapes(w[..., 0:1].shape, normalized[0].shape))
    for m, n in enumerate(normalized):
        if w.ndim == 1:
            if w[m] != 0.0:
                acc = acc + w[m] * n
        else:
            acc = acc + w[:, m: m + 1] * n
    return acc


def _metric_rows(collection: Collection, scores: npt.NDArray[np.float64], targets: npt.NDArray[np.float64],
                 picks: npt.NDArray[np.int64] | None = None) -> npt.NDArray[np.float64]:
    """The metric (:func:`~competition.metrics.graph_score`) of each row of ``scores`` ``[P, C]`` against ``targets``
    ``[C]``, taken over ``picks`` (positions, repeats included) when given."""
    return np.array([graph_score(collection, targets, scores=row, picks=picks) for row in scores])


def simplex_grid(num_models: int, steps: int | None = None) -> npt.NDArray[np.float64]:
    """Every weight vector with non-negative multiples of ``1 / steps`` summing to 1, in lexicographic order.

    Args:
        num_models: M.
        steps: the resolution; default :data:`GRID_STEPS` when that gives at most :data:`MAX_GRID_POINTS`
            points, else the largest resolution that does (at least 1: the M vertices).

    Returns:
        float64 ``[P, M]``; the vertices (single models) are always included.
    """
    if num_models < 1:
        raise ValueError("at least one model is needed")
    if steps is None:
        steps = GRID_STEPS
        while steps > 1 and math.comb(steps + num_models - 1, num_models - 1) > MAX_GRID_POINTS:
            steps -= 1
    return np.array(sorted(_compositions(steps, num_models), reverse=True), dtype=np.float64) / steps


def _compositions(total: int, parts: int) -> list[tuple[int, ...]]:
    if parts == 1:
        return [(total,)]
    return [(k, *rest) for k in range(total + 1) for rest in _compositions(total - k, parts - 1)]


# --------------------------------------------------------------------------------------------------------------
# Per-collection tables
# --------------------------------------------------------------------------------------------------------------


@dataclass
class _Table:
    """One collection's fitting graphs and the metric of every candidate weight vector on each of them.

    ``weights`` ``[P, M]`` holds the grid then (if it is not on the grid) the mean; ``scores[norm]`` is ``[G, P]``.
    """

    collection: Collection
    ids: list[str]
    weights: npt.NDArray[np.float64]
    grid: npt.NDArray[np.int64]
    vertices: npt.NDArray[np.int64]
    mean: int
    scores: dict[str, npt.NDArray[np.float64]]


def _member_scores(t: _Table, member: int) -> npt.NDArray[np.float64]:
    """Per graph, the metric of one member alone (its vertex of the grid; the same under either normalisation)."""
    return next(iter(t.scores.values()))[:, t.vertices[member]]


def _candidates(num_models: int) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.int64], npt.NDArray[np.int64], int]:
    grid = simplex_grid(num_models)
    mean = np.full(num_models, 1.0 / num_models)
    vertices = np.array([int(np.flatnonzero((grid == np.eye(num_models)[m]).all(axis=1))[0])
                         for m in range(num_models)], dtype=np.int64)
    on_grid = np.flatnonzero((grid == mean).all(axis=1))
    if on_grid.size:
        return grid, np.arange(len(grid)), vertices, int(on_grid[0])
    return np.vstack([grid, mean]), np.arange(len(grid)), vertices, len(grid)


def _subsample(sid: str, size: int, max_configs: int | None, seed: int) -> npt.NDArray[np.int64] | None:
    if max_configs is None or size <= max_configs:
        return None
    words = np.frombuffer(hashlib.sha256(sid.encode("utf-8")).digest(), dtype=np.uint32)
    rng = np.random.default_rng(np.random.SeedSequence([int(seed), *words.tolist()]))
    return np.sort(rng.choice(size, max_configs, replace=False))


# --------------------------------------------------------------------------------------------------------------
# The ensemble
# --------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CombineSettings(Section):
    """How each collection combines the models."""

    method: str = setting("auto", "how each collection combines the models: chosen by cross-validation (auto), fitted "
                                  "weights, the best model, or the mean", choices=METHODS)
    normalization: str = setting("rank", "how scores are made comparable before combining: ranks, min-max, or "
                                         "chosen by cross-validation (auto)", choices=NORMALIZATIONS)
    min_graphs: int = setting(1, "fewer fitting graphs than this: the collection takes the model best over its kind",
                              low=1)


@dataclass(frozen=True)
class EnsembleFitSettings(Section):
    """How the combination is fitted and scored."""

    folds: int = setting(5, "cross-validation folds per collection (leave-one-graph-out with fewer graphs)", low=2,
                         high=1000)
    seed: int = seed_setting("seeds the folds and the config subsets of large layout graphs")
    max_configs: int | None = setting(
        2000, "configs of a layout graph scored while fitting (a fixed random subset; None: all)", low=1)


@dataclass(frozen=True)
class EnsembleConfig:
    """The ensemble's settings: :attr:`combine`, :attr:`fit`."""

    combine: CombineSettings = section(CombineSettings)
    fit: EnsembleFitSettings = section(EnsembleFitSettings)


class Ensemble(Configured):
    """Per-collection weighted combination of models' normalised scores.

    Follows scikit-learn's estimator contract: hyper-parameters are stored unchanged, :meth:`fit` returns ``self``
    and learned state lives in attributes ending with ``_``.

    Settings (:class:`EnsembleConfig`; ``Ensemble(config)``, or values by ``section.name`` or name):
        combine.method: ``auto`` (chosen per collection by cross-validation), ``weighted``, ``best`` or ``mean``.
        combine.normalization: ``rank``, ``minmax``, or ``auto`` (chosen per collection by cross-validation).
        fit.folds: cross-validation folds per collection (leave-one-graph-out when a collection has fewer graphs).
        fit.seed: seeds the fold assignment and the config subsets of large layout graphs.
        fit.max_configs: layout graphs with more configs are scored on this many (a fixed random subset) while
            fitting; ``None`` scores every config.
        combine.min_graphs: a collection with fewer fitting graphs gets no combination of its own: all the weight goes to
            the member with the best mean score over the collections fitted of its kind (method ``overall``), as
            a pipeline picks its best model; a choice among candidates made on a handful of graphs is mostly their
            noise. 1 (the default) fits every collection.

    Attributes (after :meth:`fit`):
        models_: the model names, in the order weights are listed.
        collections_: ``{collection value: {"method", "normalization", "weights"}}``: what :meth:`predict` uses.
        cv_score_: ``{collection value: mean metric of the cross-validated predictions}`` (the honest score).
        member_scores_: ``{collection value: {model: mean metric}}`` on the fitting graphs (members are not fitted
            on them, so this is their honest score too).
        candidate_scores_: ``{collection value: {"method/normalization": cross-validated score}}`` of each
            candidate the choice was made among.
        num_graphs_: ``{collection value: graphs fitted on}``.
    """

    name: ClassVar[str] = "ensemble"
    """The producer name of its submissions and leaderboard rows, and how ``--param`` addresses it."""

    CONFIG: ClassVar[type[EnsembleConfig]] = EnsembleConfig

    def __init__(self, config: EnsembleConfig | None = None, /, **settings: Any) -> None:
        self._configure(config, settings)
        self._cache: tuple[str, dict[Collection, _Table]] | None = None
        self._picks: dict[str, npt.NDArray[np.int64]] = {}

    # ---------------------------------------------------------------------------------------------------------
    # Public API
    # ---------------------------------------------------------------------------------------------------------

    def __repr__(self) -> str:
        return f"Ensemble({', '.join(f'{k}={v!r}' for k, v in self.get_params().items())})"

    def fit(self, predictions: Predictions, labels: Labels,
            picks: Mapping[str, npt.NDArray[np.int64] | None] | None = None) -> Self:
        """Choose and fit each collection's weights on every labelled graph.

        Args:
            predictions: ``{model: {ID: scores [C]}}``; every model must score every labelled ID.
            labels: ``{ID: targets [C]}`` of the fitting graphs (:data:`Labels`).
            picks: ``{ID: positions into its targets, repeats included}`` for graphs the official valid protocol
                scores over its listed indices (:meth:`competition.protocol.ValidProtocol.picks`); the metric of
                such a graph is taken over them, as the official evaluation takes it.

        Returns:
            ``self``.

        Raises:
            ValueError: bad hyper-parameters, no models or labels, a model missing an ID, a predicted ID without
                labels, shapes that disagree, or non-finite scores.
        """
        self._check_params()
        self._picks = {sid: p for sid, p in (picks or {}).items() if p is not None}
        models, tables = self._tables(predictions, labels)
        self.models_ = models
        self.collections_: dict[str, dict[str, Any]] = {}
        self.cv_score_: dict[str, float] = {}
        self.member_scores_: dict[str, dict[str, float]] = {}
        self.candidate_scores_: dict[str, dict[str, float]] = {}
        self.num_graphs_: dict[str, int] = {}
        overall = self._overall_best(tables)
        for c, t in tables.items():
            rows = np.arange(len(t.ids))
            folds = self._folds(len(t.ids))
            self.member_scores_[c.value] = {m: float(_member_scores(t, i).mean()) for i, m in enumerate(models)}
            self.num_graphs_[c.value] = len(t.ids)
            if len(t.ids) < self.config.combine.min_graphs:
                self.collections_[c.value] = {"method": "overall", "normalization": "rank",
                                              "weights": t.weights[t.vertices[overall[c.kind]]].tolist()}
                self.candidate_scores_[c.value] = {}
                self.cv_score_[c.value] = self.member_scores_[c.value][models[overall[c.kind]]]
                continue
            cand, cand_scores = self._choose(t, rows, folds)
            self.collections_[c.value] = {"method": cand[0], "normalization": cand[1],
                                          "weights": t.weights[self._fit_column(t, cand, rows)].tolist()}
            self.candidate_scores_[c.value] = {f"{m}/{n}": s for (m, n), s in cand_scores.items()}
            plan = self._cv_plan(t, folds)
            self.cv_score_[c.value] = float(np.mean([t.scores[n][g, p] for g, (n, p) in enumerate(plan)]))
        return self

    def predict(self, predictions: Predictions) -> dict[str, npt.NDArray[np.float64]]:
        """The ensemble's scores of every graph the models scored, with the weights fitted by :meth:`fit`.

        Args:
            predictions: ``{model: {ID: scores [C]}}`` of any split; models with zero weight in a collection may
                be absent.

        Returns:
            ``{ID: float64 scores [C]}`` (lower = faster), IDs sorted.

        Raises:
            NotFittedError: not fitted (a ``ValueError``, as scikit-learn's).
            ValueError: a collection not fitted on, a needed model missing or missing an ID, shapes
                that disagree, or non-finite scores.
        """
        if not hasattr(self, "collections_"):
            raise NotFittedError("this Ensemble is not fitted: call fit(predictions, labels) first")
        ids = sorted({sid for per in predictions.values() for sid in per})
        by_collection: dict[Collection, list[str]] = {}
        for sid in ids:
            by_collection.setdefault(parse_submission_id(sid)[0], []).append(sid)
        unknown = [c.value for c in by_collection if c.value not in self.collections_]
        if unknown:
            raise ValueError(f"no ensemble weights for collection(s) {', '.join(unknown)}; fitted on "
                             f"{', '.join(self.collections_) or 'none'}")
        out: dict[str, npt.NDArray[np.float64]] = {}
        for c, cids in by_collection.items():
            spec = self.collections_[c.value]
            w = np.asarray(spec["weights"], dtype=np.float64)
            needed = [m for m, wm in zip(self.models_, w, strict=True) if wm != 0.0]
            missing = [m for m in needed if m not in predictions]
            if missing:
                raise ValueError(f"predictions lack model(s) {', '.join(missing)} needed for {c.value} "
                                 f"(have {', '.join(predictions) or 'none'})")
            for sid in cids:
                lacking = [m for m in needed if sid not in predictions[m]]
                if lacking:
                    raise ValueError(f"model(s) {', '.join(lacking)} have no scores for ID {sid}")
                vectors = self._vectors(predictions, self.models_, sid, skip=set(self.models_) - set(needed))
                normed = [normalize_scores(v, spec["normalization"]) if v is not None else None for v in vectors]
                size = next(n.size for n in normed if n is not None)
                out[sid] = combine(w, [n if n is not None else np.zeros(size) for n in normed])
        return out

    def cross_val_predict(self, predictions: Predictions, labels: Labels,
                          picks: Mapping[str, npt.NDArray[np.int64] | None] | None = None,
                          ) -> dict[str, npt.NDArray[np.float64]]:
        """Each labelled graph scored by an ensemble fitted without it (choice of method included).

        Uses the hyper-parameters only (the ensemble need not be fitted, and its fitted state is left alone).

        Args:
            predictions: ``{model: {ID: scores [C]}}``.
            labels: ``{ID: targets [C]}`` (:data:`Labels`).
            picks: as for :meth:`fit`.

        Returns:
            ``{ID: float64 scores [C]}`` for every labelled ID, sorted.

        Raises:
            ValueError: as for :meth:`fit`.
        """
        self._check_params()
        self._picks = {sid: p for sid, p in (picks or {}).items() if p is not None}
        models, tables = self._tables(predictions, labels)
        overall = self._overall_best(tables)
        out: dict[str, npt.NDArray[np.float64]] = {}
        for c, t in tables.items():
            if len(t.ids) < self.config.combine.min_graphs:
                plan = [("rank", int(t.vertices[overall[c.kind]]))] * len(t.ids)
            else:
                plan = self._cv_plan(t, self._folds(len(t.ids)))
            for sid, (norm, p) in zip(t.ids, plan, strict=True):
                vectors = self._vectors(predictions, models, sid)
                out[sid] = combine(t.weights[p], [normalize_scores(v, norm) for v in vectors])
        return dict(sorted(out.items()))

    def describe(self) -> str:
        """One line: per collection the method, normalisation and weights.

        E.g. ``tile:xla weighted rank gbdt=0.70,gnn=0.30; layout:xla:default overall=gnn``.
        """
        if not hasattr(self, "collections_"):
            return "unfitted " + repr(self)
        parts = []
        for c in Collection:
            spec = self.collections_.get(c.value)
            if spec is None:
                continue
            w = spec["weights"]
            if spec["method"] in ("best", "overall"):
                parts.append(f"{c.value} {spec['method']}={self.models_[int(np.argmax(w))]}")
            elif spec["method"] == "mean":
                parts.append(f"{c.value} mean {spec['normalization']} " + ",".join(self.models_))
            else:
                listed = ",".join(f"{m}={x:.2f}" for m, x in zip(self.models_, w, strict=True) if x > 0)
                parts.append(f"{c.value} weighted {spec['normalization']} {listed}")
        return "; ".join(parts)

    def document(self) -> dict[str, Any]:
        """The fitted ensemble as the JSON document :meth:`save` writes.

        Raises:
            ValueError: not fitted.
        """
        if not hasattr(self, "collections_"):
            raise ValueError("this Ensemble is not fitted: nothing to save")
        state = {k: getattr(self, k) for k in _STATE_KEYS}
        return {"name": self.name, "version": FORMAT_VERSION, "params": self.get_params(),
                "describe": self.describe(), "state": state}

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the fitted ensemble to a JSON file, atomically.

        Returns:
            The path written.

        Raises:
            ValueError: not fitted.
        """
        return atomic_write_text(path, json.dumps(self.document(), indent=1, allow_nan=False) + "\n")

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Ensemble:
        """Read an ensemble written by :meth:`save`; it predicts exactly as the saved one did.

        Every field is checked first (:meth:`check_state`): the file names the models whose runs are then opened,
        so a name that is no registered model (a path such as ``../elsewhere/gbdt``) is refused, and so are weights
        that are not finite or not in [0, 1], and a method this version does not fit.

        Raises:
            ValueError: no such file, invalid JSON, or not a saved ensemble of this format version (with its
                parameters and exactly its learned attributes, each as :meth:`fit` leaves it), naming the field.
        """
        path = Path(path)
        doc = read_json_doc(path, "ensemble")
        if not isinstance(doc, dict) or doc.get("name") != "ensemble" or "state" not in doc or "params" not in doc:
            raise ValueError(f"{path}: expected a saved ensemble (name 'ensemble' with params and state)")
        if doc.get("version") != FORMAT_VERSION:
            raise ValueError(f"{path}: expected ensemble format version {FORMAT_VERSION}; "
                             f"found {shown(doc.get('version'))}")
        params, state = doc["params"], doc["state"]
        leaves = settings_tree.leaves(EnsembleConfig)
        known = {*leaves, *(leaf.name for leaf in leaves.values())}  # by key, or by name as earlier versions saved
        if not isinstance(params, dict) or not set(params) <= known:
            raise ValueError(f"{path}: expected ensemble params among {', '.join(leaves)}; found {shown(params)}")
        if not isinstance(state, dict) or set(state) != set(_STATE_KEYS):
            raise ValueError(f"{path}: expected ensemble state with keys {', '.join(_STATE_KEYS)}; "
                             f"found {sorted(state) if isinstance(state, dict) else type(state).__name__}")
        try:
            model = cls(**params)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{path}: params: {exc}") from None
        try:
            cls.check_state(state)
        except ValueError as exc:  # a FieldError names the field
            raise ValueError(f"{path}: {exc}") from None
        for key, value in state.items():
            setattr(model, key, value)
        return model

    @staticmethod
    def check_state(state: Mapping[str, Any]) -> None:
        """Refuse a saved state that :meth:`fit` could not have left, naming the field: ``models_`` registered
        model names, each once; per collection, a method :meth:`fit` chooses (:data:`FITTED_METHODS`), a
        normalisation, and one weight per model, each finite and in [0, 1], summing to 1; the scores finite
        numbers (or ``null``) of the collections and models listed; the graph counts whole numbers.

        Raises:
            models.fields.FieldError: the first field that cannot be used.
        """
        names = registered_names()
        models = check_list(state["models_"], "state.models_", max_length=len(names))
        if not models:
            raise FieldError("state.models_", "at least one model name", "none")
        for k, name in enumerate(models):
            check_str(name, f"state.models_[{k}]", choices=names)
            if name in models[:k]:
                raise FieldError(f"state.models_[{k}]", "each model once", f"{name!r} again")
        collections = check_mapping(state["collections_"], "state.collections_",
                                    optional=[c.value for c in Collection])
        for c, spec in collections.items():
            field = f"state.collections_.{c}"
            check_mapping(spec, field, required=("method", "normalization", "weights"), optional=())
            check_str(spec["method"], f"{field}.method", choices=FITTED_METHODS)
            check_str(spec["normalization"], f"{field}.normalization", choices=("rank", "minmax"))
            weights = check_numbers(spec["weights"], f"{field}.weights", low=0.0, high=1.0, length=len(models))
            total = math.fsum(w for w in weights if w is not None)
            if abs(total - 1.0) > WEIGHT_SUM_TOLERANCE:
                raise FieldError(f"{field}.weights", "weights that sum to 1", f"a sum of {total!r}")
        listed = list(collections)
        for key in ("cv_score_", "num_graphs_", "member_scores_", "candidate_scores_"):
            for c, value in check_mapping(state[key], f"state.{key}", optional=listed).items():
                field = f"state.{key}.{c}"
                if key == "cv_score_":
                    check_number(value, field, null=True)
                elif key == "num_graphs_":
                    check_int(value, field, low=0)
                else:
                    inner = check_mapping(value, field, optional=models if key == "member_scores_" else None)
                    for name, score in inner.items():
                        check_number(score, f"{field}.{name}", null=True)

    # ---------------------------------------------------------------------------------------------------------
    # Internals
    # ---------------------------------------------------------------------------------------------------------

    def _check_params(self) -> None:
        if self.config.combine.method not in METHODS:
            raise ValueError(f"method must be one of {', '.join(METHODS)}; got {self.config.combine.method!r}")
        if self.config.combine.normalization not in NORMALIZATIONS:
            raise ValueError(f"normalization must be one of {', '.join(NORMALIZATIONS)}; got {self.config.combine.normalization!r}")
        if not isinstance(self.config.fit.folds, int) or self.config.fit.folds < 2:
            raise ValueError(f"folds must be an integer >= 2; got {self.config.fit.folds!r}")
        if self.config.fit.max_configs is not None and self.config.fit.max_configs < 2:
            raise ValueError(f"max_configs must be None or >= 2; got {self.config.fit.max_configs!r}")
        if not isinstance(self.config.combine.min_graphs, int) or self.config.combine.min_graphs < 1:
            raise ValueError(f"min_graphs must be an integer >= 1; got {self.config.combine.min_graphs!r}")

    def _overall_best(self, tables: Mapping[Collection, _Table]) -> dict[str, int]:
        """Per kind of the collections in ``tables`` (``tile``, ``layout``), the member with the best mean, over
        that kind's collections, of its mean score per collection (what a pipeline's combined score ranks models
        by, within one kind); ties go to the first."""
        out: dict[str, int] = {}
        for kind in {c.kind for c in tables}:
            same = [t for c, t in tables.items() if c.kind == kind]
            means = np.mean([[_member_scores(t, i).mean() for i in range(len(t.vertices))] for t in same], axis=0)
            out[kind] = int(np.argmax(means))
        return out

    def _candidate_list(self) -> list[tuple[str, str]]:
        methods = list(_CANDIDATE_ORDER) if self.config.combine.method == "auto" else [self.config.combine.method]
        normalization = self.config.combine.normalization
        norms = ["rank", "minmax"] if normalization == "auto" else [normalization]
        return [(m, n) for n in norms for m in methods]

    @staticmethod
    def _vectors(predictions: Predictions, models: Sequence[str], sid: str,
                 skip: set[str] | None = None) -> list[npt.NDArray[np.float64] | None]:
        vectors: list[npt.NDArray[np.float64] | None] = []
        for m in models:
            if skip and m in skip:
                vectors.append(None)
                continue
            v = np.asarray(predictions[m][sid], dtype=np.float64)
            if v.ndim != 1 or not np.isfinite(v).all():
                raise ValueError(f"model {m} gave {'non-finite' if v.ndim == 1 else f'shape {v.shape}'} scores "
                                 f"for ID {sid}; expected a finite vector")
            vectors.append(v)
        sizes = {m: v.size for m, v in zip(models, vectors, strict=True) if v is not None}
        if len(set(sizes.values())) > 1:
            raise ValueError(f"models disagree on the number of configs of ID {sid}: {sizes}")
        return vectors

    def _tables(self, predictions: Predictions, labels: Labels) -> tuple[list[str], dict[Collection, _Table]]:
        models = list(predictions)
        if not models:
            raise ValueError("no models: predictions must map at least one model name to its scores")
        if not labels:
            raise ValueError("no labels: the ensemble needs the runtimes of the graphs it is fitted on")
        ids = sorted(labels)
        for m in models:
            missing = [sid for sid in ids if sid not in predictions[m]]
            if missing:
                raise ValueError(f"model {m} has no scores for {len(missing)} labelled ID(s): "
                                 f"{', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''}")
            extra = sorted(set(predictions[m]) - set(labels))
            if extra:
                raise ValueError(f"model {m} scores {len(extra)} ID(s) without labels: "
                                 f"{', '.join(extra[:5])}{' ...' if len(extra) > 5 else ''}")
        key = self._fingerprint(predictions, labels, models)
        if self._cache is not None and self._cache[0] == key:
            return models, self._cache[1]
        weights, grid, vertices, mean = _candidates(len(models))
        normalization = self.config.combine.normalization
        norms = ["rank", "minmax"] if normalization == "auto" else [normalization]
        by_collection: dict[Collection, list[str]] = {}
        for sid in ids:
            by_collection.setdefault(parse_submission_id(sid)[0], []).append(sid)
        tables: dict[Collection, _Table] = {}
        for c in sorted(by_collection, key=list(Collection).index):
            cids = by_collection[c]
            scores = {n: np.empty((len(cids), len(weights))) for n in norms}
            for g, sid in enumerate(cids):
                vectors = self._vectors(predictions, models, sid)
                y = np.asarray(labels[sid], dtype=np.float64)
                if y.shape != vectors[0].shape:  # type: ignore[union-attr]
                    raise ValueError(f"labels of ID {sid} have shape {y.shape}; the scores "
                                     f"{vectors[0].shape}")  # type: ignore[union-attr]
                fit = self.config.fit
                sub = _subsample(sid, y.size, fit.max_configs, fit.seed) if c.is_layout else None
                picks = self._picks.get(sid) if sub is None else None  # a subset's positions are not the list's
                if sub is not None:
                    vectors = [v[sub] for v in vectors]  # type: ignore[index]
                    y = y[sub]
                for n in norms:
                    normed = [normalize_scores(v, n) for v in vectors]
                    scores[n][g] = _metric_rows(c, combine(weights, [x[None, :] for x in normed]), y, picks)
            tables[c] = _Table(c, cids, weights, grid, vertices, mean, scores)
        self._cache = (key, tables)
        return models, tables

    def _fingerprint(self, predictions: Predictions, labels: Labels, models: list[str]) -> str:
        """A digest of the inputs and of the parameters the tables depend on (the tables are cached on it)."""
        h = hashlib.sha256(repr((self.config.combine.normalization, self.config.fit.max_configs,
                                 self.config.fit.seed)).encode())
        for sid in sorted(self._picks):
            h.update(sid.encode() + b"\2" + np.ascontiguousarray(self._picks[sid]).tobytes())
        for m in models:
            h.update(m.encode() + b"\0")
            for sid in sorted(predictions[m]):
                h.update(sid.encode() + b"\0")
                h.update(np.ascontiguousarray(np.asarray(predictions[m][sid], dtype=np.float64)).tobytes())
        for sid in sorted(labels):
            h.update(sid.encode() + b"\1")
            h.update(np.ascontiguousarray(np.asarray(labels[sid], dtype=np.float64)).tobytes())
        return h.hexdigest()

    def _folds(self, n: int) -> npt.NDArray[np.int64]:
        """Fold of each of ``n`` graphs (sorted by ID): a seeded permutation dealt round-robin."""
        k = min(self.config.fit.folds, n)
        perm = np.random.default_rng(self.config.fit.seed).permutation(n)
        out = np.empty(n, dtype=np.int64)
        out[perm] = np.arange(n) % max(k, 1)
        return out

    @staticmethod
    def _fit_column(t: _Table, cand: tuple[str, str], rows: npt.NDArray[np.int64]) -> int:
        """The candidate column a method picks when fitted on ``rows`` (equal weights when there are none)."""
        method, norm = cand
        if method == "mean" or rows.size == 0:
            return t.mean
        means = t.scores[norm][rows].mean(axis=0)
        if method == "best":
            return int(t.vertices[int(np.argmax(means[t.vertices]))])
        grid_means = means[t.grid]
        tied = t.grid[np.flatnonzero(grid_means == grid_means.max())]
        centroid = t.weights[tied].mean(axis=0)
        dist = ((t.weights[tied] - centroid) ** 2).sum(axis=1)
        return int(tied[int(np.argmin(dist))])

    def _cv_candidate_scores(self, t: _Table, rows: npt.NDArray[np.int64],
                             folds: npt.NDArray[np.int64]) -> dict[tuple[str, str], float]:
        """Cross-validated score of each candidate over ``rows`` split by ``folds`` (aligned with ``rows``)."""
        out: dict[tuple[str, str], float] = {}
        for cand in self._candidate_list():
            per_graph = np.empty(rows.size)
            for f in np.unique(folds):
                held = folds == f
                p = self._fit_column(t, cand, rows[~held])
                per_graph[held] = t.scores[cand[1]][rows[held], p]
            out[cand] = float(per_graph.mean())
        return out

    def _choose(self, t: _Table, rows: npt.NDArray[np.int64], folds: npt.NDArray[np.int64]
                ) -> tuple[tuple[str, str], dict[tuple[str, str], float]]:
        """The candidate (method, normalisation) to fit on ``rows``, chosen without fitting and scoring alike.

        With a single candidate there is nothing to choose. Otherwise candidates are cross-validated over the
        folds of ``rows``; when those hold one fold only, ``rows`` is re-split (leave-one-graph-out up to
        ``folds`` groups); a single graph is scored in-sample (it is still never a graph being predicted).
        """
        cands = self._candidate_list()
        if rows.size == 0:
            return ("mean", cands[0][1]), {}
        if np.unique(folds).size < 2:
            folds = self._folds(rows.size)
        if rows.size == 1:
            scores = {c: float(t.scores[c[1]][rows[0], self._fit_column(t, c, rows)]) for c in cands}
        else:
            scores = self._cv_candidate_scores(t, rows, folds)
        if len(cands) == 1:
            return cands[0], scores
        best = max(scores.values())
        return next(c for c in cands if scores[c] == best), scores

    def _cv_plan(self, t: _Table, folds: npt.NDArray[np.int64]) -> list[tuple[str, int]]:
        """Per graph, the (normalisation, candidate column) chosen and fitted without the graph's fold."""
        plan: list[tuple[str, int]] = [("rank", t.mean)] * len(t.ids)
        rows = np.arange(len(t.ids))
        for f in np.unique(folds):
            held = folds == f
            train = rows[~held]
            cand, _ = self._choose(t, train, folds[~held])
            p = self._fit_column(t, cand, train)
            for g in rows[held]:
                plan[g] = (cand[1], p)
        return plan
