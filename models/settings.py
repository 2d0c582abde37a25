"""Settings trees: nested frozen dataclasses whose every leaf declares, once, its type, default, allowed values and
one line of help.

A tree is a frozen dataclass whose fields are *sections* (:func:`section`, each a :class:`Section` dataclass) and
maybe plain fields that are not settings (what the data decides). A section's fields are *leaves*, each declared
with :func:`setting`: the annotation is its type, the default its default, and the :class:`models.params.Param`
in its metadata its allowed values and help. A leaf's key is ``section.name`` (``train.lr``); its name alone
(``lr``) addresses it too, being unique in its tree.

- :func:`leaves` lists a tree's leaves (what ``fastslow params`` and ``docs/parameters.md`` show);
- :func:`problem` says why a value cannot be a leaf's (an unknown key, the wrong type, out of range), before any
  work starts: the command line's ``--param`` and ``--config`` ask it;
- :func:`updated` returns a tree with values replaced, refusing any :func:`problem`;
- :func:`as_dict` and :func:`from_dict` turn a tree into nested plain data and back (a run's settings file).

A section checks its own leaves when built, so a tree never holds a value its declarations refuse.
"""

from __future__ import annotations

import difflib
import functools
import types
import typing
from collections.abc import Mapping
from dataclasses import MISSING, dataclass, field, fields, is_dataclass, replace
from typing import Any, TypeVar

from competition.errors import shown
from competition.limits import MAX_SEED
from models.params import Param

T = TypeVar("T")
SPEC = "fastslow.setting"


def setting(default: Any, help: str, *, low: float | None = None, high: float | None = None,
            low_open: bool = False, choices: tuple[Any, ...] = (), runtime: bool = False, allowed: str = "",
            valid: typing.Callable[[str], bool | str] | None = None) -> Any:
    """A leaf of a settings tree: its default and its :class:`~models.params.Param` (name filled in by
    :func:`leaves`). ``runtime``: it changes how a model runs, not what it learns (left out of a run's settings)."""
    return field(default=default, metadata={SPEC: Param("", help, low, high, low_open, choices, runtime, allowed,
                                                        valid)})


def seed_setting(help: str) -> Any:
    """A seed leaf: default 0, from 0 to :data:`~competition.limits.MAX_SEED`, the one range of every seed (a value
    past what a library takes is refused when settings are parsed, not when that library first meets it)."""
    return setting(0, help, low=0, high=MAX_SEED)


def section(cls: type[T]) -> T:
    """A field holding a section, its leaves at their defaults unless given."""
    return field(default_factory=cls)  # type: ignore[return-value]


@dataclass(frozen=True)
class Section:
    """A group of leaves; refuses, when built, any value its declarations do not allow."""

    def __post_init__(self) -> None:
        hints = _hints(type(self))
        for f in fields(self):
            spec = f.metadata.get(SPEC)
            if spec is None:
                continue
            why = value_problem(f.name, hints[f.name], replace(spec, name=f.name), getattr(self, f.name))
            if why is not None:
                raise ValueError(why)


@dataclass(frozen=True)
class Leaf:
    """One setting of a tree: its key (``section.name``), its section and name, its type, its default and its
    :class:`~models.params.Param` (named by the key)."""

    key: str
    section: str
    name: str
    hint: Any
    default: Any
    param: Param


@functools.cache
def leaves(tree: type) -> dict[str, Leaf]:
    """Every leaf of the tree class ``tree``, by key, in declaration order."""
    out: dict[str, Leaf] = {}
    for sec in fields(tree):
        cls = _section_class(tree, sec.name)
        if cls is None:
            continue
        hints = _hints(cls)
        for f in fields(cls):
            spec = f.metadata.get(SPEC)
            if spec is None:
                continue
            key = f"{sec.name}.{f.name}"
            default = f.default if f.default is not MISSING else None
            out[key] = Leaf(key, sec.name, f.name, hints[f.name], default, replace(spec, name=key))
    return out


def resolve(tree: type, key: str) -> Leaf:
    """The leaf ``key`` names: ``section.name``, or the name alone.

    Raises:
        KeyError: no such leaf, with the closest keys.
    """
    known = leaves(tree)
    if key in known:
        return known[key]
    by_name = [leaf for leaf in known.values() if leaf.name == key]
    if len(by_name) == 1:
        return by_name[0]
    close = difflib.get_close_matches(key, [*known, *(leaf.name for leaf in known.values())], n=3, cutoff=0.6)
    hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
    sections = sorted({leaf.section for leaf in known.values()})
    raise KeyError(f"no setting {key!r}{hint} (keys are SECTION.NAME, sections {', '.join(sections)}: "
                   f"`fastslow params` lists them)")


def problem(tree: type, key: str, value: object) -> str | None:
    """Why ``value`` cannot be the setting ``key`` of ``tree`` (an unknown key, a value of the wrong type, out of its
    range or choices, a number that is not finite), or ``None`` when it can."""
    try:
        leaf = resolve(tree, key)
    except KeyError as exc:
        return str(exc.args[0])
    return value_problem(leaf.key, leaf.hint, leaf.param, value)


def value_problem(key: str, hint: Any, param: Param, value: object) -> str | None:
    """Why ``value`` does not fit the type ``hint`` or the allowed values of ``param`` (``key`` names it)."""
    kinds = typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) else (hint,)
    if not any(accepts(k, value) for k in kinds):
        found = (f"the text {shown(repr(value))}" if isinstance(value, str)
                 else f"{type(value).__name__} {shown(value if isinstance(value, int) else repr(value))}")
        return f"{key} takes {' or '.join(kind_name(k) for k in kinds)}, not {found}"
    return param.problem(value)


def updated(tree: T, values: Mapping[str, Any]) -> T:
    """``tree`` with ``values`` (by key or name) in place of its own.

    Raises:
        ValueError: a :func:`problem` with a key or value, naming it.
    """
    by_section: dict[str, dict[str, Any]] = {}
    for key, value in values.items():
        why = problem(type(tree), key, value)
        if why is not None:
            raise ValueError(why)
        leaf = resolve(type(tree), key)
        by_section.setdefault(leaf.section, {})[leaf.name] = value
    return replace(tree, **{s: replace(getattr(tree, s), **v) for s, v in by_section.items()})  # type: ignore[type-var]


def get(tree: object, key: str) -> Any:
    """The value of the setting ``key`` (or name) in ``tree``."""
    leaf = resolve(type(tree), key)
    return getattr(getattr(tree, leaf.section), leaf.name)


def as_dict(tree: object, *, learned_only: bool = False, skip: tuple[str, ...] = ()) -> dict[str, Any]:
    """``tree`` as nested plain data: each section a dict of its leaves, other fields as they are. With
    ``learned_only``, the leaves marked ``runtime`` are left out; ``skip`` leaves out whole sections or fields."""
    out: dict[str, Any] = {}
    for f in fields(tree):  # type: ignore[arg-type]
        if f.name in skip:
            continue
        value = getattr(tree, f.name)
        if isinstance(value, Section):
            out[f.name] = {g.name: getattr(value, g.name) for g in fields(value)
                           if not (learned_only and g.metadata.get(SPEC) and g.metadata[SPEC].runtime)}
        else:
            out[f.name] = value
    return out


def from_dict(tree: type[T], data: Mapping[str, Any]) -> T:
    """The tree ``data`` (from :func:`as_dict`) describes; sections or leaves it lacks keep their defaults.

    Raises:
        ValueError: an unknown section or leaf, or a value :func:`problem` refuses.
    """
    known = {f.name for f in fields(tree)}  # type: ignore[arg-type]
    values: dict[str, Any] = {}
    plain: dict[str, Any] = {}
    for name, value in data.items():
        if name not in known:
            raise ValueError(f"no section or field {name!r} (expected {', '.join(sorted(known))})")
        if _section_class(tree, name) is not None:
            if not isinstance(value, Mapping):
                raise ValueError(f"{name}: expected a table of settings, found {type(value).__name__}")
            values.update({f"{name}.{k}": v for k, v in value.items()})
        else:
            plain[name] = value
    return updated(tree(**plain), values)


def flat(tree: object) -> dict[str, Any]:
    """Every leaf's value by name (names are unique in a tree)."""
    return {leaf.name: get(tree, key) for key, leaf in leaves(type(tree)).items()}


def accepts(kind: object, value: object) -> bool:
    """Whether ``value`` fits the annotation ``kind`` (an int for a float; not a bool for an int); other kinds are
    not checked."""
    if kind is type(None):
        return value is None
    if kind is bool:
        return isinstance(value, bool)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if kind is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind is str:
        return isinstance(value, str)
    if typing.get_origin(kind) is typing.Literal:
        return value in typing.get_args(kind)
    return True


def kind_name(kind: object) -> str:
    """An annotation in words: ``int``, ``None``, ``'all'``."""
    if kind is type(None):
        return "None"
    if typing.get_origin(kind) is typing.Literal:
        return " or ".join(repr(a) for a in typing.get_args(kind))
    return getattr(kind, "__name__", str(kind))


def type_text(hint: Any) -> str:
    """A leaf's type in words, for the parameter reference."""
    kinds = typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) else (hint,)
    return " or ".join(kind_name(k) for k in kinds)


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _section_class(tree: type, name: str) -> type | None:
    hint = _hints(tree).get(name)
    return hint if isinstance(hint, type) and is_dataclass(hint) and issubclass(hint, Section) else None


class Configured:
    """Hyper-parameters as a settings tree: the class names its tree in ``CONFIG``; an instance is built from a whole
    tree or from values (by ``section.name`` or name) over the tree's defaults, each refused as :func:`problem`
    says. ``config`` is the tree in use; :meth:`get_params` the values given, by key (what a saved file keeps)."""

    CONFIG: typing.ClassVar[type]

    def _configure(self, config: object | None, values: Mapping[str, Any]) -> None:
        if config is not None and not isinstance(config, self.CONFIG):
            raise TypeError(f"{type(self).__name__} takes a {self.CONFIG.__name__} or settings by name; got "
                            f"{type(config).__name__}")
        self.config = updated(config if config is not None else self.CONFIG(), values)
        self._given = ({key: get(self.config, key) for key in leaves(self.CONFIG)} if config is not None
                       else {resolve(self.CONFIG, k).key: v for k, v in values.items()})

    def get_params(self) -> dict[str, Any]:
        """The settings given, by ``section.name`` (a whole tree's, when built from one)."""
        return dict(self._given)

    def resolved_params(self, collection: object = None) -> dict[str, Any]:
        """Every setting in use, by ``section.name`` (the same for every collection)."""
        return {key: get(self.config, key) for key in leaves(self.CONFIG)}

    def kind_params(self, kind: str) -> dict[str, Any]:
        """Every setting in use, by ``section.name`` (the same for both kinds)."""
        return self.resolved_params()
