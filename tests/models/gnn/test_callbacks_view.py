"""The callbacks (models/gnn/callbacks.py) know the training loop only through what their hooks are given: the
run's state and control (models/gnn/state.py) and the :class:`~models.gnn.callbacks.TrainingRun` view. Their module
never imports the loop's, not even for type checking, and the trainer is that view."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

from models.gnn import callbacks, state
from models.gnn.callbacks import Callback, TrainingRun
from tests.models.gnn.test_trainer import tiny_trainer

LOOP = "models.gnn.train"


def _imported(path: Path) -> set[str]:
    """Every module ``path`` imports, at the top, inside a function or under ``if TYPE_CHECKING:`` alike
    (``from a import b`` counts as both ``a`` and ``a.b``)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module is not None and node.level == 0:
            out |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
    return out


def _loop_modules(imported: set[str]) -> set[str]:
    return {m for m in imported if m == LOOP or m.startswith(f"{LOOP}.")}


def test_the_callbacks_never_import_the_training_loop():
    imported = _imported(Path(inspect.getfile(callbacks)))
    assert "models.gnn.state" in imported and not _loop_modules(imported)


def test_the_state_is_below_the_loop_and_the_callbacks():
    imported = _imported(Path(inspect.getfile(state)))
    assert not _loop_modules(imported) and "models.gnn.callbacks" not in imported


def test_the_callbacks_never_name_the_trainer():
    tree = ast.parse(Path(inspect.getfile(callbacks)).read_text(encoding="utf-8"))
    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    strings = [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)]
    assert "Trainer" not in names
    assert not [s for s in strings if LOOP in s]  # docstrings included: no cross-reference to the loop's module


def test_every_hook_is_given_the_state_the_control_and_the_view():
    for event in ("on_train_begin", "on_epoch_begin", "on_step_end", "on_epoch_end", "on_settle", "on_save"):
        params = list(inspect.signature(getattr(Callback, event)).parameters)
        assert params[:4] == ["self", "state", "control", "run"], event
    assert list(inspect.signature(Callback.on_epoch_begin).parameters)[4:] == ["epoch"]


def test_the_trainer_is_the_view_its_callbacks_are_given():
    assert isinstance(tiny_trainer(), TrainingRun)
