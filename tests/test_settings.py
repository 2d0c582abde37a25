"""Settings trees (models/settings.py) on a hand-built tree: leaves by key and by name, values refused with the key
and what it takes, updates, nested plain data and back, and a section that refuses a bad value when built."""

from __future__ import annotations

from dataclasses import FrozenInstanceError, dataclass
from typing import Literal

import pytest

from models import settings as tree
from models.settings import Configured, Section, section, setting


@dataclass(frozen=True)
class Shape(Section):
    width: int = setting(8, "channels", low=1, high=64)
    depth: int | Literal["all"] = setting(2, "layers, or all", low=1, choices=("all",))


@dataclass(frozen=True)
class Fit(Section):
    lr: float = setting(0.1, "learning rate", low=0, low_open=True)
    device: str = setting("cpu", "where", runtime=True, choices=("cpu", "cuda"))
    cap: float | None = setting(None, "seconds at most", low=0)


@dataclass(frozen=True)
class Tree:
    shape: Shape = section(Shape)
    fit: Fit = section(Fit)
    size: int = 0  # from the data: not a setting


class Toy(Configured):
    CONFIG = Tree

    def __init__(self, config: Tree | None = None, /, **settings: object) -> None:
        self._configure(config, settings)


def test_leaves_are_listed_by_key_in_declaration_order():
    leaves = tree.leaves(Tree)
    assert list(leaves) == ["shape.width", "shape.depth", "fit.lr", "fit.device", "fit.cap"]
    assert leaves["fit.lr"].default == 0.1 and leaves["fit.lr"].param.name == "fit.lr"
    assert tree.type_text(leaves["shape.depth"].hint) == "int or 'all'"


def test_a_leaf_is_found_by_key_or_by_name():
    assert tree.resolve(Tree, "fit.lr").key == tree.resolve(Tree, "lr").key == "fit.lr"
    with pytest.raises(KeyError, match=r"no setting 'fit\.lrr'; did you mean 'fit\.lr'\?"):
        tree.resolve(Tree, "fit.lrr")
    with pytest.raises(KeyError, match="sections fit, shape"):
        tree.resolve(Tree, "size")  # a plain field is not a setting


@pytest.mark.parametrize(("key", "value", "problem"), [
    ("width", 0, "shape.width must be 1 to 64; got 0"),
    ("shape.width", True, "shape.width takes int, not bool True"),
    ("width", 3.0, "shape.width takes int, not float 3.0"),
    ("depth", "all", None),
    ("depth", "some", "shape.depth takes int or 'all', not the text 'some'"),
    ("lr", 0, "fit.lr must be > 0; got 0"),
    ("lr", float("inf"), "fit.lr must be > 0; got inf"),
    ("lr", 1, None),  # an int for a float
    ("cap", None, None),
    ("device", "tpu", "fit.device must be 'cpu' or 'cuda'; got 'tpu'"),
])
def test_values_are_checked_against_their_declaration(key: str, value: object, problem: str | None):
    assert tree.problem(Tree, key, value) == problem


def test_updated_replaces_by_key_and_refuses_what_problem_refuses():
    base = Tree()
    new = tree.updated(base, {"width": 16, "fit.cap": 5.0})
    assert (new.shape.width, new.shape.depth, new.fit.cap) == (16, 2, 5.0)
    assert base.shape.width == 8  # frozen: a new tree
    with pytest.raises(FrozenInstanceError):
        new.shape.width = 3  # type: ignore[misc]
    with pytest.raises(ValueError, match="shape.width must be 1 to 64; got 99"):
        tree.updated(base, {"width": 99})


def test_a_section_refuses_a_bad_value_when_built():
    with pytest.raises(ValueError, match="shape.width must be 1 to 64; got 0|width must be 1 to 64; got 0"):
        Shape(width=0)


def test_nested_plain_data_round_trips():
    t = tree.updated(Tree(size=3), {"depth": "all", "device": "cuda"})
    data = tree.as_dict(t)
    assert data == {"shape": {"width": 8, "depth": "all"}, "fit": {"lr": 0.1, "device": "cuda", "cap": None},
                    "size": 3}
    assert tree.from_dict(Tree, data) == t
    assert tree.as_dict(t, learned_only=True, skip=("size",)) == {"shape": {"width": 8, "depth": "all"},
                                                                  "fit": {"lr": 0.1, "cap": None}}
    assert tree.flat(t) == {"width": 8, "depth": "all", "lr": 0.1, "device": "cuda", "cap": None}
    with pytest.raises(ValueError, match="no section or field 'train'"):
        tree.from_dict(Tree, {"train": {}})
    with pytest.raises(ValueError, match="shape: expected a table of settings"):
        tree.from_dict(Tree, {"shape": 3})


def test_a_configured_object_keeps_what_was_given_by_key():
    toy = Toy(width=4, **{"fit.lr": 0.5})
    assert toy.get_params() == {"shape.width": 4, "fit.lr": 0.5}
    assert toy.config.shape.width == 4 and toy.resolved_params()["fit.device"] == "cpu"
    assert Toy(**toy.get_params()).config == toy.config  # what a saved file holds builds it again
    whole = Toy(Tree())
    assert whole.get_params() == whole.resolved_params()
    with pytest.raises(TypeError, match="takes a Tree or settings by name"):
        Toy({"width": 4})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="no setting 'nope'"):
        Toy(nope=1)
