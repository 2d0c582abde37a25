"""Warm starts: a GNN fit whose networks start from the weights of a saved GNN run (``train.init_from``), e.g. one
fitted on the synthetic world, fine-tuned on other data.

:func:`load_source` finds the saved run (:func:`source_file`), loads it and checks it against the new fit (a GNN's,
of the same kind, with networks of the same shapes) before any graph is read. The fit then reuses its column
selection and normalisation, the inputs its weights were learnt on, and starts its network i from the saved network
i mod n (:meth:`models.gnn.model.GNNModel.fit`). The saved model file's content is part of the fit's keys
(:func:`source_digest`): a changed source is another run, never resumed nor reused for the old one.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from competition.collections import Collection
from competition.fingerprint import content_digest
from models import settings as tree
from models.base import MODEL_FILE, load_model

if TYPE_CHECKING:
    from models.base import RankingModel
    from models.gnn.config import GNNConfig

KEY = "train.init_from"
"""The setting naming the saved run (what every refusal starts with)."""


@dataclass(frozen=True)
class Source:
    """A saved GNN run a fit starts from: its model file and the model it holds."""

    file: Path
    model: RankingModel  # a GNN model (load_source checks its class)

    def digest(self) -> str:
        """The model file's SHA-256."""
        return content_digest(self.file)


def source_file(value: str, collection: Collection) -> Path:
    """The model file ``value`` (a ``train.init_from``) names for a fit of ``collection``: the file itself, a run
    folder's ``model.json``, or, in a model's folder of runs (``runs/gnn``), the collection's run's.

    Raises:
        ValueError: naming ``value``, when it names none of these.
    """
    path = Path(value)
    if not path.exists():
        raise ValueError(f"{KEY} {value}: no such file or folder")
    if path.is_file():
        return path
    for candidate in (path / MODEL_FILE, path / collection.slug / MODEL_FILE):
        if candidate.is_file():
            return candidate
    raise ValueError(f"{KEY} {value}: expected a saved run's folder (with {MODEL_FILE}), its {MODEL_FILE}, or a "
                     f"folder of runs with {collection.slug}/{MODEL_FILE}; found a folder with neither")


def source_digest(value: str, collection: Collection) -> str:
    """The SHA-256 of the model file ``value`` names for ``collection`` (:func:`source_file`): what a fit's keys
    hold of its source, so that other weights at the same path make another fit.

    Raises:
        ValueError: no such model file.
        OSError: it cannot be read.
    """
    return content_digest(source_file(value, collection))


def load_source(value: str, cfg: GNNConfig, collection: Collection, gnn: type) -> Source:
    """The saved GNN run ``value`` names, checked to start a fit of ``collection`` with the settings ``cfg``.

    ``gnn`` is the GNN model class (the caller's: this module is imported by it).

    Raises:
        ValueError: one line naming the path and the problem: no such file or folder, not a saved model this
            fastslow loads, a model that is not a GNN, of another kind (tile, layout), or whose networks' shapes
            differ from those ``cfg`` builds (its node feature columns taken as the source's, which the fit reuses).
    """
    from models.gnn.config import GNNConfig

    path = source_file(value, collection)
    try:
        model = load_model(path)
    except ValueError as exc:  # the loader's message names the file
        raise ValueError(f"{KEY}: {exc}") from None
    if not isinstance(model, gnn):
        raise ValueError(f"{KEY} {path}: a saved {model.name} model, not a GNN's (gnn, gnn-attn): only a GNN's "
                         "networks can start a GNN fit")
    there = tree.from_dict(GNNConfig, model.settings_)
    if there.kind != cfg.kind:
        raise ValueError(f"{KEY} {path}: fitted on {model.collection_.value}, a {there.kind} collection; this fit's "
                         f"{collection.value} is {cfg.kind}")
    theirs = {k: tuple(np.shape(v)) for k, v in model.weights_.items()}
    here = _shapes(replace(cfg, num_features=there.num_features))
    if theirs != here:
        raise ValueError(f"{KEY} {path}: its networks' shapes differ from this fit's ({_why(there, cfg, theirs, here)}); "
                         "fit with the network settings it was fitted with")
    return Source(path, model)


def _shapes(cfg: GNNConfig) -> dict[str, tuple[int, ...]]:
    """Each weight's shape in the network ``cfg`` builds, on torch's ``meta`` device (which allocates nothing)."""
    with torch.device("meta"):
        return {k: tuple(v.shape) for k, v in cfg.make_net().state_dict().items()}


def _why(there: GNNConfig, here_cfg: GNNConfig, theirs: dict[str, tuple[int, ...]],
         here: dict[str, tuple[int, ...]]) -> str:
    """Why two networks' shapes differ, in words: the settings that shape them and differ (dropout has no weights
    of its own), else the first weight whose shape differs."""
    shaping = [k for k in tree.leaves(type(there)) if k.startswith("network.") and k != "network.dropout"]
    differ = [f"{k} {tree.get(there, k)!r} there, {tree.get(here_cfg, k)!r} here"
              for k in [*shaping, "features.tile_shares"] if tree.get(there, k) != tree.get(here_cfg, k)]
    if differ:
        return "; ".join(differ)
    name = next(k for k in sorted(theirs.keys() | here.keys()) if theirs.get(k) != here.get(k))
    return f"weight {name}: {theirs.get(name, 'none')} there, {here.get(name, 'none')} here"
