"""Hyper-parameters on the command line: ``--param`` and ``--config`` read into each model's settings, and ``fastslow params``."""

from __future__ import annotations

import argparse
import logging
import typing
from collections.abc import Sequence
from pathlib import Path

from competition.collections import Collection
from competition.errors import UsageError, printable, shown
from fastslow.commands.common import EXIT_OK, refused

if typing.TYPE_CHECKING:
    from models.registry import ModelParams

log = logging.getLogger("fastslow")


PARAM_HELP = (
    "a hyper-parameter, repeatable: [MODEL.][COLLECTION.]KEY=VALUE. KEY is SECTION.NAME of the model's settings tree "
    "(`fastslow params` lists them; the NAME alone when it is unique), e.g. --param gnn-attn.train.lr=3e-3, "
    "--param gnn-attn.layout:xla:random.train.steps_per_graph=16, --param train.epochs=3 (every model of the run "
    "that has it); values are Python literals, else text. A key is given once per level (twice is refused); a "
    "collection's value beats a model's, which beats one for every model, whatever the order; overrides --config"
)


CONFIG_HELP = (
    "a TOML file of hyper-parameters, tables nesting as --param's addresses do: [gnn-attn.train] lr = 3e-3, "
    "[gnn-attn.\"layout:xla:random\".train] steps_per_graph = 16 (keys outside a model's table apply to every model "
    "that has them); per-collection values override per-model ones, which override the defaults. A table for a "
    "collection the run does not fit is refused"
)


def add_param_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--param", action="append", default=[], metavar="[MODEL.[COLLECTION.]]KEY=VALUE",
                   help=PARAM_HELP)
    p.add_argument("--config", default=None, metavar="TOML", help=CONFIG_HELP)


def literal(text: str) -> object:
    import ast

    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return text


def _given_params(args: argparse.Namespace) -> list[tuple[str, str | None, str | None, str, object]]:
    """Every hyper-parameter of ``--config`` then ``--param``, in that order, as ``(where, model, collection, key,
    value)``; ``where`` names the origin for an error (``--param epochs=abc``, ``params.toml [gnn.train] epochs``),
    escaped (:func:`competition.errors.printable`), and a key or value cut as refusals show it
    (:func:`competition.errors.shown`).

    An address is ``[MODEL.][COLLECTION.]KEY``: a model's name, then a collection's (it holds a colon), then the
    key, which may itself be dotted (``train.lr``). In a TOML file, tables nest the same way
    (``[gnn-attn.train]``, ``[gnn-attn."layout:xla:random".train]``).
    """
    out: list[tuple[str, str | None, str | None, str, object]] = []
    if args.config:
        path = Path(args.config)
        for names, value in _config_entries(args, path):
            prefix, name = names[:-1], names[-1]
            where = (f"{printable(path)} [{shown('.'.join(_toml_name(p) for p in prefix))}] {shown(name)}" if prefix
                     else f"{printable(path)}: {shown(name)}")
            model, collection, key, _ = _address(args, names, where)
            out.append((where, model, collection, key, value))
    for item in args.param:
        key, sep, value = item.partition("=")
        parts = key.split(".")
        where = f"--param {shown(item)}"
        if not sep or not all(parts):
            raise refused(args, f"--param expects [MODEL.][COLLECTION.]KEY=VALUE, got {shown(repr(item))}")
        digits = _digits(value)
        if digits is not None:  # Python refuses to read it: said here, not taken for text
            raise refused(args, f"{where}: a number of {digits:,} digits; no setting takes one so large "
                                "(`fastslow params` lists their ranges)")
        model, collection, name, _ = _address(args, parts, where)
        out.append((where, model, collection, name, literal(value)))
    return out


def _digits(text: str) -> int | None:
    """The digits of ``text`` when it is a whole number too long for Python to read (more than
    :func:`sys.get_int_max_str_digits`), else ``None``."""
    import re
    import sys

    limit = sys.get_int_max_str_digits()
    stripped = text.strip()
    if not limit or not re.fullmatch(r"[+-]?\d(?:_?\d)*", stripped):
        return None
    digits = sum(c.isdigit() for c in stripped)
    return digits if digits > limit else None


def _config_entries(args: argparse.Namespace, path: Path) -> list[tuple[list[str], object]]:
    """The settings of the ``--config`` file ``path``: each leaf of its tables (a value that is not a table) with
    the table names leading to it, in the file's order. The file is bounded before it is parsed (size, keys and
    nesting: :func:`competition.nesting.toml_load`), and walked without recursion.

    Raises:
        UsageError: too large, not UTF-8, not TOML, or nested too deep, naming the file and where.
    """
    import io
    import tomllib

    from competition.limits import MAX_CONFIG_BYTES, MAX_CONFIG_KEYS, file_over, over
    from competition.nesting import long_number, toml_load

    name = printable(path)
    problem = file_over(path, MAX_CONFIG_BYTES, "MAX_CONFIG_BYTES")
    if problem is not None:
        raise refused(args, f"--config {name}: {problem}; not read")
    data = path.read_bytes()
    problem = over(data.count(b"="), MAX_CONFIG_KEYS, "MAX_CONFIG_KEYS", "keys ('=' counted before parsing)")
    if problem is not None:
        raise refused(args, f"--config {name}: {problem}; not parsed")
    try:
        doc = toml_load(io.BytesIO(data))
    except UnicodeDecodeError as exc:
        raise refused(args, f"--config {name}: expected UTF-8 TOML text; found byte {exc.start:,} undecodable "
                            f"({exc.reason})") from None
    except tomllib.TOMLDecodeError as exc:
        raise refused(args, f"--config {name}: expected TOML; found invalid TOML ({exc})") from None
    except ValueError as exc:  # what tomllib does not wrap: a number longer than Python reads
        found = long_number(data.decode("utf-8"))
        if found is None:
            raise refused(args, f"--config {name}: expected TOML; found a value Python cannot read "
                                f"({shown(exc)})") from None
        line, column, digits = found
        raise refused(args, f"--config {name}: expected TOML; found a number of {digits:,} digits at line {line}, "
                            f"column {column}; no setting takes one so large (`fastslow params` lists their "
                            "ranges)") from None
    entries: list[tuple[list[str], object]] = []
    pending: list[tuple[list[str], object]] = [([k], v) for k, v in reversed(doc.items())]
    while pending:  # depth-first, in the file's order
        names, value = pending.pop()
        if isinstance(value, dict):
            pending += [([*names, k], v) for k, v in reversed(value.items())]
        else:
            entries.append((names, value))
    return entries


def _toml_name(name: str) -> str:
    return f'"{name}"' if ":" in name else name


def _address(args: argparse.Namespace, parts: list[str], where: str) -> tuple[str | None, str | None, str, object]:
    """``(model, collection, key, value placeholder)`` of a dotted address (see :func:`_given_params`); the value
    is filled in by the caller (TOML values come with the address)."""
    from fastslow.pipeline import ENSEMBLE
    from models.registry import MODELS

    model = parts[0] if len(parts) > 1 and (parts[0] in MODELS or parts[0] == ENSEMBLE) else None
    rest = parts[1:] if model is not None else parts
    collection = rest[0] if len(rest) > 1 and ":" in rest[0] else None
    rest = rest[1:] if collection is not None else rest
    if not rest:
        raise refused(args, f"{where}: no key after {'.'.join(parts)!r}")
    return model, collection, ".".join(rest), None


def model_params(args: argparse.Namespace, models: Sequence[str], *, ensemble: bool = False,
                 collections: Sequence[Collection] | None = None, fits: str = "") -> dict[str, ModelParams]:
    """The hyper-parameters of ``--config`` and ``--param`` for each of the run's ``models`` (and the ensemble's
    under ``ensemble``), checked before any work: model, collection and key names, value types, values the models
    refuse (on each collection the run fits, with that collection's defaults), and that they are unambiguous.

    A setting is given once per model and level: the same one twice in ``--param`` (``--param seed=1 --param
    seed=2``, or by two spellings of its key), or twice in ``--config``, is refused, naming both. Between levels the
    more specific wins whatever the order (a collection's value over a model's, a model's over one for every model
    that has it), and ``--param`` over ``--config``.

    Args:
        collections: the collections the run fits (default: all five); a value scoped to another is refused, naming
            the run's.
        fits: what decided ``collections``, for that refusal (``--collections``, ``the data``).

    Raises:
        UsageError: naming the ``--param`` item or the ``--config`` entry, and what was expected.
    """
    from fastslow.pipeline import ENSEMBLE
    from models.ensemble import Ensemble
    from models.registry import MODELS, ModelParams, canonical_key, hyper_parameters, param_problem

    unknown = [m for m in models if m not in MODELS]
    if unknown:
        raise refused(args, f"unknown model {shown(repr(unknown[0]))}; expected one of "
                         f"{', '.join(sorted(MODELS))}")
    run_collections = list(Collection) if collections is None else [Collection(c) for c in collections]
    owners: dict[str, type] = {m: MODELS[m] for m in models}
    if ensemble:
        owners[ENSEMBLE] = Ensemble
    common: dict[str, dict[str, object]] = {m: {} for m in owners}
    per_collection: dict[str, dict[Collection, dict[str, object]]] = {m: {} for m in owners}
    # (model, collection or None, key) -> (where, rank): rank orders the levels, (from --param, model named)
    given: dict[tuple[str, Collection | None, str], tuple[str, tuple[bool, bool]]] = {}
    for where, model, collection, key, value in _given_params(args):
        typed = where.startswith("--param")  # typed on the command line, where values are Python literals
        if model is None:
            targets = [m for m in owners if _takes(owners[m], key, hyper_parameters)]
            if not targets:
                raise refused(args, f"{where}: none of the models of this run ({', '.join(owners)}) takes "
                                    f"{shown(repr(key))}")
        elif model not in owners:
            raise refused(args, f"{where}: {model!r} is not among the models of this run ({', '.join(owners)})")
        else:
            targets = [model]
        scope: Collection | None = None
        if collection is not None:
            try:
                scope = Collection.parse(collection)
            except ValueError as exc:
                raise refused(args, f"{where}: {shown(exc)}") from None
            if scope not in run_collections:
                decided = f" ({fits})" if fits else ""
                raise refused(args, f"{where}: this run fits no {scope.value}; it fits "
                                    f"{', '.join(c.value for c in run_collections) or 'no collection'}{decided}")
        rank = (typed, model is not None)
        for m in targets:
            problem = param_problem(owners[m], key, value)
            if problem is not None:
                hint = (" (values are Python literals: --param epochs=20, --param device='cpu')"
                        if typed and " must be " not in problem else "")
                raise refused(args, f"{where}: {problem}{hint}")
            if scope is not None and m == ENSEMBLE:
                raise refused(args, f"{where}: the ensemble takes one value for all collections; drop the collection")
            stored = canonical_key(owners[m], key)
            slot = (m, scope, stored)
            before = given.get(slot)
            if before is not None and before[1] == rank:
                on = f" on {scope.value}" if scope is not None else ""
                raise refused(args, f"{where}: {m}'s {stored}{on} is given twice, also by {before[0]}; give it once")
            if before is not None and before[1] > rank:
                continue  # a more specific value, or one from --param, stands
            given[slot] = (where, rank)
            if scope is None:
                common[m][stored] = value
            else:
                per_collection[m].setdefault(scope, {})[stored] = value
    out = {m: ModelParams(common[m], per_collection[m]) for m in owners}
    for m, params in out.items():
        for c in run_collections or list(Collection):  # none fitted: the command says why; values are still checked
            on = f" on {c.value}" if params.per_collection.get(c) else ""
            try:
                built = owners[m](**params.for_collection(c))  # values a model refuses fail here, before any work
            except (TypeError, ValueError) as exc:
                raise refused(args, f"{m}{on}: {exc}") from None
            try:  # with the collection's own defaults (a GNN's per kind and collection): what its fit would use
                built.resolved_params(c)
            except (TypeError, ValueError) as exc:
                raise refused(args, f"{m} on {c.value}: {exc}") from None
    return out


def _takes(cls: type, key: str, hyper_parameters: typing.Callable[[type], dict[str, object]]) -> bool:
    """Whether the model class ``cls`` has the hyper-parameter ``key`` (by ``section.name`` or name, for a settings
    tree)."""
    if hasattr(cls, "CONFIG"):
        from models.settings import resolve

        try:
            resolve(cls.CONFIG, key)
        except KeyError:
            return False
        return True
    return key in hyper_parameters(cls)


def add_params_parser(sub: argparse._SubParsersAction) -> None:
    """``fastslow params``."""
    params = sub.add_parser("params", help="list every hyper-parameter: type, default, allowed values, meaning",
                            description="Print the hyper-parameters of the models (all, or those named) and of the "
                                        "ensemble: type, default (per kind or collection where they differ), the "
                                        "values allowed and what each does; --markdown prints docs/parameters.md.")
    params.add_argument("models", nargs="*", metavar="MODEL",
                        help="models to list (default: every registered model, then the ensemble)")
    params.add_argument("--markdown", action="store_true",
                        help="print the Markdown page docs/parameters.md instead of the terminal table")
    params.set_defaults(func=_cmd_params)


def _cmd_params(args: argparse.Namespace) -> int:
    from models.ensemble import Ensemble
    from models.registry import MODELS, parameter_reference, parameter_rows

    unknown = [m for m in args.models if m not in MODELS and m != Ensemble.name]
    if unknown:
        raise UsageError(f"unknown model {unknown[0]!r}; expected one of {', '.join([*sorted(MODELS), 'ensemble'])}")
    if args.markdown:
        print(parameter_reference(args.models or None), end="")
        return EXIT_OK
    names = args.models or [*sorted(MODELS), Ensemble.name]
    rows = parameter_rows(names)
    for model in names:
        print(f"{model}:")
        mine = [r for r in rows if r[0] == model]
        if not mine:
            print("  (no hyper-parameters)")
            continue
        width = max(len(r[1]) for r in mine)
        for _, key, kind, defaults, entry in mine:
            default = "; ".join(v if w == "all" else f"{w}: {v}" for w, v in defaults.items())
            print(f"  {key:{width}}  {kind}, default {default}; allowed {entry.describe()}\n"
                  f"  {'':{width}}  {entry.help}")
    return EXIT_OK
