"""Hyper-parameters on the command line: ``--param`` and ``--config`` read into each model's settings, and ``fastslow params``."""

from __future__ import annotations

import argparse
import logging
import typing
from collections.abc import Sequence
from pathlib import Path

from competition.collections import Collection
from competition.errors import UsageError
from fastslow.commands.common import EXIT_OK, refused

if typing.TYPE_CHECKING:
    from models.registry import ModelParams

log = logging.getLogger("fastslow")


PARAM_HELP = (
    "a hyper-parameter, repeatable: [MODEL.][COLLECTION.]KEY=VALUE. KEY is SECTION.NAME of the model's settings tree "
    "(`fastslow params` lists them; the NAME alone when it is unique), e.g. --param gnn-attn.train.lr=3e-3, "
    "--param gnn-attn.layout:xla:random.train.steps_per_graph=16, --param train.epochs=3 (every model of the run "
    "that has it); values are Python literals, else text. Overrides --config at the same level"
)


CONFIG_HELP = (
    "a TOML file of hyper-parameters, tables nesting as --param's addresses do: [gnn-attn.train] lr = 3e-3, "
    "[gnn-attn.\"layout:xla:random\".train] steps_per_graph = 16 (keys outside a model's table apply to every model "
    "that has them); per-collection values override per-model ones, which override the defaults"
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
    value)``; ``where`` names the origin for an error (``--param epochs=abc``, ``params.toml [gnn.train] epochs``).

    An address is ``[MODEL.][COLLECTION.]KEY``: a model's name, then a collection's (it holds a colon), then the
    key, which may itself be dotted (``train.lr``). In a TOML file, tables nest the same way
    (``[gnn-attn.train]``, ``[gnn-attn."layout:xla:random".train]``).
    """
    import io
    import tomllib

    from competition.limits import MAX_CONFIG_BYTES, MAX_CONFIG_KEYS, file_over, over
    from competition.nesting import toml_load

    out: list[tuple[str, str | None, str | None, str, object]] = []
    if args.config:
        path = Path(args.config)
        problem = file_over(path, MAX_CONFIG_BYTES, "MAX_CONFIG_BYTES")
        if problem is not None:
            raise refused(args, f"--config {path}: {problem}; not read")
        data = path.read_bytes()
        problem = over(data.count(b"="), MAX_CONFIG_KEYS, "MAX_CONFIG_KEYS", "keys ('=' counted before parsing)")
        if problem is not None:
            raise refused(args, f"--config {path}: {problem}; not parsed")
        try:
            doc = toml_load(io.BytesIO(data))
        except tomllib.TOMLDecodeError as exc:
            raise refused(args, f"--config {path}: expected TOML; found invalid TOML ({exc})") from None

        def walk(table: dict[str, object], prefix: list[str]) -> None:
            for name, value in table.items():
                if isinstance(value, dict):
                    walk(value, [*prefix, name])
                    continue
                where = f"{path} [{'.'.join(_toml_name(p) for p in prefix)}] {name}" if prefix else f"{path}: {name}"
                model, collection, key, _ = _address(args, [*prefix, name], where)
                out.append((where, model, collection, key, value))
        walk(doc, [])
    for item in args.param:
        key, sep, value = item.partition("=")
        parts = key.split(".")
        if not sep or not all(parts):
            raise refused(args, f"--param expects [MODEL.][COLLECTION.]KEY=VALUE, got {item!r}")
        model, collection, name, _ = _address(args, parts, f"--param {item}")
        out.append((f"--param {item}", model, collection, name, literal(value)))
    return out


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


def model_params(args: argparse.Namespace, models: Sequence[str], *, ensemble: bool = False) -> dict[str, ModelParams]:
    """The hyper-parameters of ``--config`` and ``--param`` for each of the run's ``models`` (and the ensemble's
    under ``ensemble``), checked before any fitting: model, collection and key names, value types, and values the
    models refuse.

    Raises:
        UsageError: naming the ``--param`` item or the ``--config`` entry, and what was expected.
    """
    from fastslow.pipeline import ENSEMBLE
    from models.ensemble import Ensemble
    from models.registry import MODELS, ModelParams, canonical_key, hyper_parameters, param_problem

    unknown = [m for m in models if m not in MODELS]
    if unknown:
        raise refused(args, f"unknown model {unknown[0]!r}; expected one of "
                         f"{', '.join(sorted(MODELS))}")
    owners: dict[str, type] = {m: MODELS[m] for m in models}
    if ensemble:
        owners[ENSEMBLE] = Ensemble
    common: dict[str, dict[str, object]] = {m: {} for m in owners}
    per_collection: dict[str, dict[Collection, dict[str, object]]] = {m: {} for m in owners}
    for where, model, collection, key, value in _given_params(args):
        typed = where.startswith("--param")  # typed on the command line, where values are Python literals
        if model is None:
            targets = [m for m in owners if _takes(owners[m], key, hyper_parameters)]
            if not targets:
                raise refused(args, f"{where}: none of the models of this run ({', '.join(owners)}) takes {key!r}")
        elif model not in owners:
            raise refused(args, f"{where}: {model!r} is not among the models of this run ({', '.join(owners)})")
        else:
            targets = [model]
        for m in targets:
            problem = param_problem(owners[m], key, value)
            if problem is not None:
                hint = (" (values are Python literals: --param epochs=20, --param device='cpu')"
                        if typed and " must be " not in problem else "")
                raise refused(args, f"{where}: {problem}{hint}")
            stored = canonical_key(owners[m], key)
            if collection is None:
                common[m][stored] = value
                continue
            if m == ENSEMBLE:
                raise refused(args, f"{where}: the ensemble takes one value for all collections; drop the collection")
            try:
                c = Collection.parse(collection)
            except ValueError as exc:
                raise refused(args, f"{where}: {exc}") from None
            per_collection[m].setdefault(c, {})[stored] = value
    out = {m: ModelParams(common[m], per_collection[m]) for m in owners}
    for m, params in out.items():
        for c in Collection:
            try:
                owners[m](**params.for_collection(c))  # values a model refuses fail here, before any fitting
            except (TypeError, ValueError) as exc:
                scope = f" on {c.value}" if params.per_collection.get(c) else ""
                raise refused(args, f"{m}{scope}: {exc}") from None
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
