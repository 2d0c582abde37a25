"""A GNN training run's folder: its files, its settings and their hash, the checkpoint read back or set aside,
and runs with other settings moved out of the way instead of overwritten.

A run lives in one folder (``run_dir``)::

    settings.json    the run's settings (:class:`~models.gnn.config.GNNConfig` as a dict), written when it starts
    checkpoint.pt    everything needed to resume: settings, weights, optimiser, schedule, RNG states and the
                     training state (:class:`models.gnn.train.TrainState`)
    curves.csv       epoch, train_loss, valid_metric, lr, seconds (since the run began), valid_seconds (of
                     them, this epoch's validation); one row per finished epoch
    curves.png       the same, plotted (when the run ends, and every PLOT_SECONDS before)
    model.json       the fitted model, where the caller saves it there (``fastslow train`` does)
    refit/           the refitted network, a run of its own (:data:`REFIT_FOLDER`)
    seed-<seed>/     each other network of a seed ensemble, a run of its own (:func:`member_folder`)
    <hash>/          earlier runs with other settings, one folder per settings hash (:func:`settings_hash`)

Re-running with the same settings resumes after the last finished epoch (a finished run returns at once). A run
with other settings never overwrites one: the files above are first moved into ``run_dir/<hash of their
settings>/``, its refit and seed ensemble's folders with them, and a later run with those settings moves them back
and resumes them. So ``run_dir`` itself always holds the latest run, and only its networks. The checkpoint holds only tensors and plain values and is read with
``torch.load(weights_only=True)``; one that cannot be read that way or does not fit the settings it names is
renamed to ``checkpoint.pt.corrupt``, named in a warning, and training starts afresh.
"""

from __future__ import annotations

import contextlib
import csv
import hashlib
import io
import json
import logging
import os
import random
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from competition.atomic import atomic_path, atomic_write_text, failures_named
from features.cache import UnusableFileError, load_plain, set_aside
from models import settings as tree
from models.base import MODEL_FILE

if TYPE_CHECKING:
    from models.gnn.config import GNNConfig

log = logging.getLogger(__name__)

CHECKPOINT = "checkpoint.pt"
CURVES_CSV = "curves.csv"
CURVES_PNG = "curves.png"
SETTINGS_FILE = "settings.json"
PLOT_SECONDS = 30.0
"""``curves.csv`` is written after every epoch, ``curves.png`` when the run ends and otherwise at most this often
(drawing it costs as much as several training steps of a small graph: lab/journal.md, "figures
moved out of docstrings")."""
RUN_FILES = (SETTINGS_FILE, CURVES_CSV, CURVES_PNG, MODEL_FILE, CHECKPOINT)
"""The files of one run, moved together (after its :func:`network_folders`); the checkpoint last, so an interrupted
move is redone by the next run."""
REFIT_FOLDER = "refit"
"""The folder of a run's refitted network, inside the run's."""
_MEMBER_PREFIX = "seed-"
_HASH_NAME = re.compile(r"[0-9a-f]{12}")
CURVE_COLUMNS = ("epoch", "train_loss", "valid_metric", "lr", "seconds", "valid_seconds")
_ADDED_CURVE_COLUMNS = ("valid_seconds",)
"""Columns newer than some checkpoints: an older checkpoint's rows get NaN there instead of being refused."""
_CHECKPOINT_TYPES: dict[str, type | tuple[type, ...]] = {
    "settings": dict, "epoch": int, "model": dict, "optimizer": dict, "scheduler": dict, "rng": dict,
    "history": list, "best_state": dict, "best_metric": (int, float), "best_epoch": int, "bad_epochs": int,
    "stopped": str, "swa_states": list, "swa_metric": (float, type(None)), "swa_used": bool,
    "finetune_state": dict, "finetune_metric": (float, type(None)), "finetune_used": bool}


def write_curves(run_dir: Path, history: list[dict[str, float]], title: str = "", *, plot: bool = True) -> None:
    """Write ``curves.csv`` and, with ``plot``, ``curves.png`` (train loss and valid metric per epoch), atomically."""
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=CURVE_COLUMNS, lineterminator="\n")
    writer.writeheader()
    for row in history:
        writer.writerow({k: row[k] for k in CURVE_COLUMNS})
    with failures_named(run_dir / CURVES_CSV):
        atomic_write_text(run_dir / CURVES_CSV, buf.getvalue())
    if not plot:
        return
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9, 3.2))
    epochs = [r["epoch"] for r in history]
    ax1.plot(epochs, [r["train_loss"] for r in history], marker="o")
    ax1.set(xlabel="epoch", ylabel="train loss", title="training loss")
    ax2.plot(epochs, [r["valid_metric"] for r in history], marker="o", color="tab:green")
    ax2.set(xlabel="epoch", ylabel="valid metric", title="valid metric (higher is better)")
    for ax in (ax1, ax2):
        ax.grid(alpha=0.3)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    with failures_named(run_dir / CURVES_PNG), atomic_path(run_dir / CURVES_PNG) as tmp:
        fig.savefig(tmp, format="png", dpi=100)
    plt.close(fig)


def rng_state(gen: torch.Generator, np_rng: np.random.Generator) -> dict[str, Any]:
    """Every RNG state as plain data (byte tensors, numpy's state dict of ints, Python's tuple of ints), so a
    checkpoint reads back with ``weights_only=True``."""
    return {"sampler": gen.get_state(), "numpy": np_rng.bit_generator.state, "torch": torch.get_rng_state(),
            "python": random.getstate(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None}


def set_rng_state(state: dict[str, Any], gen: torch.Generator, np_rng: np.random.Generator) -> None:
    gen.set_state(state["sampler"])
    np_rng.bit_generator.state = state["numpy"]
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    # Only onto as many GPUs as it was taken from (rank 0's machine may have more than another rank's).
    if state.get("cuda") is not None and len(state["cuda"]) == torch.cuda.device_count() > 0:
        torch.cuda.set_rng_state_all(state["cuda"])


def run_settings(cfg: GNNConfig) -> dict[str, Any]:
    """The settings of one run of ``cfg`` as stored with it (its checkpoint's, ``settings.json``,
    :func:`settings_hash`): the tree as nested plain data, without the leaves that change how a model runs, not what
    it learns (where and how fast). The ``run`` section keeps ``seeds``, the number of networks the model trains: a
    model with another seed ensemble is another run, which moves this one aside with its ``seed-<seed>/`` folders
    instead of leaving them beside a model that does not have them."""
    return tree.as_dict(cfg, learned_only=True)


def member_folder(run: Path, seed: int) -> Path:
    """The run folder of the seed ensemble's network with ``seed``, inside the first network's ``run``."""
    return run / f"{_MEMBER_PREFIX}{seed}"


def network_folders(run: Path) -> list[Path]:
    """The folders inside ``run`` that belong to its run: its refit's and its seed ensemble's networks'."""
    if not run.is_dir():
        return []
    return sorted(p for p in run.iterdir() if p.is_dir() and (
        p.name == REFIT_FOLDER or (p.name.startswith(_MEMBER_PREFIX) and p.name[len(_MEMBER_PREFIX):].isdigit())))


def moved_aside(relpath: Path) -> bool:
    """Whether a path inside a runs folder lies in a run moved aside by one with other settings (a folder named by
    :func:`settings_hash` on its way): not a current run."""
    return any(_HASH_NAME.fullmatch(part) for part in relpath.parts)


def older_format(settings: dict[str, Any]) -> bool:
    """Whether a checkpoint's ``settings`` are stored flat, as versions before the settings tree stored them."""
    return "lr" in settings and "train" not in settings


def settings_hash(settings: dict[str, Any]) -> str:
    """12 hex digits of the SHA-256 of ``settings`` (a :class:`GNNConfig` as a dict) as sorted JSON: the name of
    the folder a run with these settings is moved to when a run with other settings takes its place."""
    text = json.dumps(settings, sort_keys=True, default=repr)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def discard(path: Path, why: str) -> None:
    kept = set_aside(path)
    log.warning("%s: %s; kept as %s, training starts afresh", path, why, kept.name)


def read_checkpoint(path: Path) -> dict[str, Any] | None:
    """The checkpoint at ``path`` if it is one (``None`` when absent; set aside with a warning when unusable)."""
    if not path.is_file():
        return None
    try:
        ckpt = load_plain(path)
        if not isinstance(ckpt, dict):
            raise UnusableFileError(f"not a checkpoint (a {type(ckpt).__name__}, expected a dict)")
        wrong = [k for k, t in _CHECKPOINT_TYPES.items() if not isinstance(ckpt.get(k), t)]
        if "settings" not in wrong and not all(_plain(v) for v in ckpt["settings"].values()):
            wrong.insert(0, "settings")
        if wrong:
            raise UnusableFileError(f"not a checkpoint (missing or odd {', '.join(wrong)})")
        required = [c for c in CURVE_COLUMNS if c not in _ADDED_CURVE_COLUMNS]
        if not all(isinstance(r, dict) and set(required) <= r.keys() for r in ckpt["history"]):
            raise UnusableFileError(f"not a checkpoint (history rows lack {', '.join(required)})")
        for row in ckpt["history"]:
            for column in _ADDED_CURVE_COLUMNS:
                row.setdefault(column, float("nan"))
    except UnusableFileError as exc:
        discard(path, str(exc))
        return None
    return ckpt


def _plain(value: object) -> bool:
    """A settings value: a number, text or None, or a table of them."""
    if isinstance(value, dict):
        return all(isinstance(k, str) and _plain(v) for k, v in value.items())
    return value is None or isinstance(value, str | int | float)


def move_run(src: Path, dest: Path) -> None:
    """Move the run in ``src`` into ``dest``: its :func:`network_folders` first (one whose name is taken in ``dest``
    is left where it is: nothing is deleted, and a network folder resumes or moves aside on its own settings), then
    the :data:`RUN_FILES` (replacing any there), the checkpoint last."""
    for folder in network_folders(src):
        if not (dest / folder.name).exists():
            dest.mkdir(parents=True, exist_ok=True)
            os.replace(folder, dest / folder.name)
    for name in RUN_FILES:
        if (src / name).is_file():
            dest.mkdir(parents=True, exist_ok=True)
            os.replace(src / name, dest / name)


def open_run(run: Path, settings: dict[str, Any]) -> dict[str, Any] | None:
    """The checkpoint to resume the run of ``settings`` in ``run`` from, or ``None`` to start afresh.

    A run with other settings found there is moved into ``run/<its settings hash>/``; a run with ``settings`` moved
    away earlier is moved back.
    """
    ckpt = read_checkpoint(run / CHECKPOINT)
    if ckpt is not None and ckpt["settings"] != settings:
        away = run / settings_hash(ckpt["settings"])
        move_run(run, away)
        if older_format(ckpt["settings"]):
            log.info("%s: the run there was saved by an older fastslow (flat settings, before the settings tree) "
                     "and cannot resume; moved it to %s", run, away)
        else:
            log.info("%s: the run there has other settings; moved it to %s (training with them again brings it "
                     "back)", run, away)
        ckpt = None
    earlier = run / settings_hash(settings)
    if ckpt is None and (earlier / CHECKPOINT).is_file():
        move_run(earlier, run)
        with contextlib.suppress(OSError):  # left in place when it holds anything else
            earlier.rmdir()
        log.info("%s: brought back the earlier run with these settings from %s", run, earlier)
        ckpt = read_checkpoint(run / CHECKPOINT)
    return ckpt


