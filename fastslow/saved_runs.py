"""Saved runs: the fitted model that ``fastslow train`` and ``fastslow submit`` keep per model and collection, and
when ``submit`` reuses one instead of fitting again.

Every run lives in ``<runs dir>/<model>/<collection slug>/`` (the GNN's run folder, with its checkpoints) and holds
``model.json``, the fitted model (:meth:`models.base.RankingModel.save`), which ``fastslow predict`` loads, with one
more top-level entry, ``fit``: what it was fitted with (:func:`fit_key`: the model's settings and the data) and
whether the fit ran to its end. Inside the model's own file, the record goes wherever the model goes (a GNN run with
other settings moves its files aside, ``model.json`` among them); the loader reads past it.

A saved run is reused (:func:`reusable_run`) when its key equals the new fit's and it finished: the GNN's
checkpoints (the first network's, each seed-ensemble member's and each refit's) say a finished stop and it kept every
network its settings train; any other model's fit ran without a deadline (a GBDT cut short by the time budget would
differ from one fitted again). A reused model is the one a new fit would return: the GNN's fit of a finished run
returns its saved weights at once, and the GBDT's fit is deterministic for given settings and data. A run fitted on
other feature columns than this version computes (:func:`feature_problem`) is not reused.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from competition.collections import Collection
from competition.fingerprint import content_digest
from competition.nesting import json_loads
from models.base import MODEL_FILE

if TYPE_CHECKING:
    from competition.dataset import CollectionData
    from competition.reader import LayoutGraph, TileGraph
    from models.base import RankingModel

FIT_ENTRY = "fit"
RECORD_FORMAT = 1
PLACE_KEYS = ("run.runs_dir", "run.cache_dir")
"""Settings that say where a run keeps its files, not what it learns: left out of :func:`fit_key`."""


def data_key(data: CollectionData) -> dict[str, Any]:
    """What identifies the data a fit learns from: the data root, the valid protocol, and each file (path relative
    to the root, size and content: :func:`competition.fingerprint.content_digest`) of the train split and of the
    split early stopping scores. A file whose bytes change gives another key, whatever its size and times."""
    splits = [data.train] + ([] if data.eval is None else [data.eval])
    return {"root": data.train.data_id, "protocol": data.protocol.tag,
            "files": {g.split.value: [[g.relpath(p), os.stat(p).st_size, content_digest(p)] for p in g.paths]
                      for g in splits}}


def fit_key(model_name: str, model: RankingModel, data: CollectionData) -> dict[str, Any]:
    """The key of a fit: the model, the collection, every setting it fits with (defaults filled in, less
    :data:`PLACE_KEYS`), :func:`data_key`, and the content of any other file it starts from
    (:meth:`~models.base.RankingModel.source_digests`: a GNN's warm start), as plain JSON data.

    Raises:
        ValueError, OSError: such a file cannot be read.
    """
    settings = {k: v for k, v in model.resolved_params(data.collection).items() if k not in PLACE_KEYS}
    key = {"model": model_name, "collection": data.collection.value, "settings": settings, "data": data_key(data)}
    sources = model.source_digests(data.collection)
    if sources:  # only then: the keys of the models that start from nothing stay as they were
        key["sources"] = sources
    return json.loads(json.dumps(key, sort_keys=True, default=repr))


def save_run(folder: Path, model_name: str, model: RankingModel, data: CollectionData, *, complete: bool) -> Path:
    """Save a fitted ``model`` as ``folder/model.json``, its ``fit`` entry added (atomically).

    Args:
        complete: whether the fit ran to its end (no deadline cut it short); only a complete fit is reused.

    Returns:
        The model file.
    """
    record = {"format": RECORD_FORMAT, "complete": bool(complete), "key": fit_key(model_name, model, data)}
    return model.save(folder / MODEL_FILE, extra={FIT_ENTRY: record})


def reusable_run(folder: Path, model_name: str, model: RankingModel, data: CollectionData) -> RankingModel | None:
    """The model saved in ``folder`` when it can stand for fitting ``model`` on ``data`` (see the module's
    docstring), else ``None``."""
    try:
        doc = json_loads((folder / MODEL_FILE).read_text(encoding="utf-8"))
        record = doc.get(FIT_ENTRY) if isinstance(doc, dict) else None
        if not isinstance(record, dict) or record.get("format") != RECORD_FORMAT:
            return None
        if record.get("key") != fit_key(model_name, model, data):
            return None
        from models.base import load_model

        saved = load_model(folder / MODEL_FILE)
        if data.train.paths and _features_differ(saved, data):
            return None
    except (OSError, ValueError):
        return None
    if _instance_of(saved, "models.gnn.model", "GNNModel"):
        return saved if _gnn_finished(folder, saved, model, data.collection) else None
    return saved if record.get("complete") is True else None


def _instance_of(obj: object, module: str, name: str) -> bool:
    """``isinstance(obj, module.name)`` without importing ``module`` to ask (torch with the GNN, LightGBM with the
    GBDT): an object of the class exists only once its module is imported."""
    loaded = sys.modules.get(module)
    cls = getattr(loaded, name, None) if loaded is not None else None
    return isinstance(cls, type) and isinstance(obj, cls)


def _features_differ(saved: RankingModel, data: CollectionData) -> bool:
    """Whether the saved model was fitted on other feature columns than this version computes (a fastslow whose
    features changed since), judged on the first train graph."""
    from competition.reader import load_graph

    return feature_problem(saved, load_graph(data.train.paths[0], data.collection)) is not None


def _gnn_finished(folder: Path, saved: Any, model: Any, collection: Collection) -> bool:
    """Whether every network of the saved GNN finished its training: each run folder's checkpoint (the first
    network's, each member's ``seed-<seed>/``, and the ``refit/`` of each) says a finished stop, and the model kept
    as many networks as its settings train."""
    from models.gnn.runs import CHECKPOINT, REFIT_FOLDER, member_folder, read_checkpoint
    from models.gnn.train import finished

    if saved.num_networks != model.train_config(collection).run.seeds:
        return False
    folders = [folder] + [member_folder(folder, m["seed"]) for m in getattr(saved, "members_", ())]
    for run in folders:
        ckpt = read_checkpoint(run / CHECKPOINT)
        if ckpt is None or not finished(ckpt["stopped"]):
            return False
        if (run / REFIT_FOLDER / CHECKPOINT).is_file():
            refit = read_checkpoint(run / REFIT_FOLDER / CHECKPOINT)
            if refit is None or not finished(refit["stopped"]):
                return False
    return True


def feature_problem(model: RankingModel, graph: TileGraph | LayoutGraph) -> str | None:
    """Why ``model`` cannot score ``graph``'s features (fitted on other feature columns than this version computes
    from the graph), or ``None``: the GBDT's feature names, the GNN's fitted column selection, normalisation and
    network width against its feature pipeline's output."""
    from competition.reader import TileGraph

    tile = isinstance(graph, TileGraph)
    if _instance_of(model, "models.gbdt", "GBDTModel"):
        from features.tabular_layout import layout_feature_names
        from features.tabular_tile import tile_feature_names

        names = tile_feature_names() if tile else layout_feature_names()
        have = [str(n) for n in model.feature_names_]
        if have == names:
            return None
        first = next((k for k, (a, b) in enumerate(zip(have, names, strict=False)) if a != b), min(len(have), len(names)))
        there = repr(have[first]) if first < len(have) else "none"
        here = repr(names[first]) if first < len(names) else "none"
        return (f"was fitted on {len(have)} feature columns and this fastslow computes {len(names)} from {graph.path} "
                f"(first differing at column {first}: {there} there, {here} here)")
    if _instance_of(model, "models.gnn.model", "GNNModel"):
        import numpy as np

        from features.data import graph_to_data
        from models import settings as tree
        from models.gnn.config import GNNConfig
        from models.gnn.model import settings_pipeline

        cfg = tree.from_dict(GNNConfig, model.settings_)
        data = settings_pipeline(cfg)(graph_to_data(graph, None if tile else np.zeros(0, dtype=np.int64)))
        width, fitted = int(data.x.shape[1]), int(model.columns_["num_columns"])
        if width != fitted:
            return (f"was trained on graphs of {fitted} node feature columns after its feature pipeline, and "
                    f"{graph.path} gives {width}")
        kept, normalized = len(model.columns_["kept"]), len(model.normalize_["mean"])
        if not kept == normalized == cfg.num_features:
            return (f"keeps {kept} node feature columns, normalises {normalized} and its network takes "
                    f"{cfg.num_features}: its files do not fit together")
    return None
