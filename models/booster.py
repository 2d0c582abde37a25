"""LightGBM's model string (the text :class:`models.gbdt.GBDTModel` saves as ``booster_``), checked in Python before
LightGBM parses it.

LightGBM's parser trusts its input: a child index that points back to the root or past the last node makes
prediction loop for ever; a truncated string or ``tree_sizes`` that do not match the trees end the process
(``SIGABRT``); a split feature or leaf index out of range is read from outside its array, and the scores come out
with no error. :func:`checked_model_string` reads the string as LightGBM writes it for this model (one lambdarank
tree per iteration, numerical splits, no linear leaves), refuses anything else naming the field, and returns only the
part LightGBM is then given: the header and the trees, without the feature importances and parameters that follow
them (prediction uses neither).

The format, as LightGBM 4 writes it::

    tree
    version=v4
    num_class=1
    ...
    max_feature_idx=86
    objective=lambdarank
    feature_names=Column_0 ... Column_86
    feature_infos=[1:96] none ...
    tree_sizes=465 ...
    <blank line>
    Tree=0                       <- tree_sizes[0] characters from here
    num_leaves=3
    ...
    left_child=1 -1              <- a node index (1..num_leaves-2), or ~leaf (-1..-num_leaves)
    right_child=-2 -3
    leaf_value=...
    shrinkage=0.05
    <blank lines>
    Tree=1 ...
    end of trees
    ...
"""

from __future__ import annotations

import math
import re

from models.fields import FieldError, shown

MAX_TREES = 100_000
"""The most trees a model string may hold: the ``booster.n_estimators`` setting's upper bound, one tree per round."""

MAX_LEAVES = 131_072
"""The most leaves a tree may have: the ``booster.num_leaves`` setting's upper bound."""

MAX_TREE_LINES = 17
"""The most ``key=value`` lines LightGBM reads of a tree (it ignores the rest silently)."""

_HEADER_KEYS = ("version", "num_class", "num_tree_per_iteration", "label_index", "max_feature_idx", "objective",
                "feature_names", "feature_infos", "tree_sizes")
_NODE_FLOATS = ("split_gain", "threshold", "internal_value", "internal_weight")
_NODE_INTS = ("split_feature", "decision_type", "left_child", "right_child", "internal_count")
_LEAF_FLOATS = ("leaf_value", "leaf_weight")
_TREE_KEYS = ("num_leaves", "num_cat", *_NODE_FLOATS, *_NODE_INTS, *_LEAF_FLOATS, "leaf_count", "is_linear",
              "shrinkage")
_REQUIRED = ("num_leaves", "num_cat", "leaf_value")
_REQUIRED_SPLITS = ("split_feature", "threshold", "left_child", "right_child")
_INT = re.compile(r"-?[0-9]{1,10}")
_FLOAT = re.compile(r"[-+]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]{1,3})?")
_FEATURE_INFO = re.compile(r"none|\[[-+.0-9A-Za-z]+:[-+.0-9A-Za-z]+\]")
_INT32 = 2 ** 31
END_OF_TREES = "end of trees"


def _int(token: str, field: str, low: int | None = None, high: int | None = None) -> int:
    if not _INT.fullmatch(token) or not -_INT32 <= int(token) < _INT32:
        raise FieldError(field, "a whole number", shown(token))
    value = int(token)
    if (low is not None and value < low) or (high is not None and value > high):
        raise FieldError(field, f"a whole number in [{low}, {high}]" if high is not None else
                         f"a whole number >= {low}", shown(token))
    return value


def _float(token: str, field: str) -> float:
    value = float(token) if _FLOAT.fullmatch(token) else math.nan
    if not math.isfinite(value):
        raise FieldError(field, "a finite number", shown(token))
    return value


def _tokens(value: str, field: str, length: int) -> list[str]:
    tokens = value.split(" ") if value else []
    if len(tokens) != length:
        raise FieldError(field, f"{length} value(s) separated by single spaces", f"{len(tokens)}")
    return tokens


def _key_values(lines: list[str], field: str, known: tuple[str, ...]) -> dict[str, str]:
    """``key=value`` lines as a dict: each key known and given once."""
    out: dict[str, str] = {}
    for line in lines:
        key, eq, value = line.partition("=")
        if not eq:
            raise FieldError(field, "key=value lines", shown(line))
        if key not in known:
            raise FieldError(field, f"only the keys {', '.join(known)}", shown(key))
        if key in out:
            raise FieldError(f"{field} {key}", "one line", "two")
        out[key] = value
    return out


def _header(text: str, field: str, num_features: int) -> list[int]:
    """Checks the header lines (``text``, up to the first tree); returns ``tree_sizes``."""
    lines = text.split("\n")
    if lines[0] != "tree" or lines[-2:] != ["", ""]:
        raise FieldError(field, "LightGBM's model text: a line 'tree', key=value lines, a blank line, then the trees",
                         shown(text[:40]))
    kv = _key_values([line for line in lines[1:] if line], field, _HEADER_KEYS)
    missing = [k for k in _HEADER_KEYS if k not in kv]
    if missing:
        raise FieldError(field, f"a header line {missing[0]}=...", "none")
    if not re.fullmatch(r"v[0-9]{1,3}", kv["version"]):
        raise FieldError(f"{field} version", "v and a number", shown(kv["version"]))
    for key, expected in (("num_class", 1), ("num_tree_per_iteration", 1), ("label_index", 0)):
        if _int(kv[key], f"{field} {key}") != expected:
            raise FieldError(f"{field} {key}", f"{expected} (a lambdarank model)", shown(kv[key]))
    if kv["objective"] != "lambdarank":
        raise FieldError(f"{field} objective", "lambdarank", shown(kv["objective"]))
    top = _int(kv["max_feature_idx"], f"{field} max_feature_idx")
    if top != num_features - 1:
        raise FieldError(f"{field} max_feature_idx", f"{num_features - 1} (the model's {num_features} feature "
                         "columns, less one)", shown(kv["max_feature_idx"]))
    names = _tokens(kv["feature_names"], f"{field} feature_names", num_features)
    bad = next((n for n in names if not n or not n.isprintable() or "=" in n), None)
    if bad is not None:
        raise FieldError(f"{field} feature_names", "names without spaces or '='", shown(bad))
    for k, info in enumerate(_tokens(kv["feature_infos"], f"{field} feature_infos", num_features)):
        if not _FEATURE_INFO.fullmatch(info):
            raise FieldError(f"{field} feature_infos[{k}]", "none or [low:high]", shown(info))
    sizes_text = kv["tree_sizes"]
    count = len(sizes_text.split(" ")) if sizes_text else 0
    if not 1 <= count <= MAX_TREES:
        raise FieldError(f"{field} tree_sizes", f"1 to {MAX_TREES} tree sizes (MAX_TREES)", f"{count}")
    return [_int(t, f"{field} tree_sizes[{k}]", low=1) for k, t in enumerate(_tokens(sizes_text, f"{field} tree_sizes",
                                                                                      count))]


def _tree(block: str, index: int, field: str, num_features: int) -> None:
    """Checks one tree's block (``Tree=<index>`` to the next tree): its fields, their lengths and ranges, and that
    the children make one tree over every node and leaf."""
    where = f"{field} (Tree={index})"
    head = f"Tree={index}\n"
    sizes = f"{field} tree_sizes[{index}]"
    expected = "sizes that end each tree where the next begins"
    if not block.startswith(head):
        raise FieldError(sizes, expected, f"{shown(block[:12])} where {head.strip()!r} should begin")
    body, blank, rest = block[len(head):].partition("\n\n")
    if not blank:
        raise FieldError(sizes, expected, f"{len(block)}, which ends inside the tree's lines")
    if rest.strip("\n"):
        raise FieldError(sizes, expected, f"{len(block)}, which runs past the tree into {shown(rest.strip()[:20])}")
    lines = body.split("\n")
    if len(lines) > MAX_TREE_LINES:
        raise FieldError(where, f"at most {MAX_TREE_LINES} lines (LightGBM reads no more)", f"{len(lines)}")
    kv = _key_values(lines, where, _TREE_KEYS)
    missing = [k for k in _REQUIRED if k not in kv]
    if missing:
        raise FieldError(where, f"a line {missing[0]}=...", "none")
    leaves = _int(kv["num_leaves"], f"{where} num_leaves", low=1, high=MAX_LEAVES)
    if _int(kv["num_cat"], f"{where} num_cat") != 0:
        raise FieldError(f"{where} num_cat", "0 (no categorical splits)", shown(kv["num_cat"]))
    if "is_linear" in kv and _int(kv["is_linear"], f"{where} is_linear") != 0:
        raise FieldError(f"{where} is_linear", "0 (no linear leaves)", shown(kv["is_linear"]))
    if "shrinkage" in kv:
        _float(kv["shrinkage"], f"{where} shrinkage")
    if leaves == 1:  # LightGBM reads nothing past the leaf value of a single leaf (written with empty arrays)
        _float(_tokens(kv["leaf_value"], f"{where} leaf_value", 1)[0], f"{where} leaf_value[0]")
        return
    arrays: dict[str, list[str]] = {}
    for key in kv:
        if key in _NODE_FLOATS or key in _NODE_INTS:
            arrays[key] = _tokens(kv[key], f"{where} {key}", leaves - 1)
        elif key in (*_LEAF_FLOATS, "leaf_count"):
            arrays[key] = _tokens(kv[key], f"{where} {key}", leaves)
    for key in (*_NODE_FLOATS, *_LEAF_FLOATS):
        for k, token in enumerate(arrays.get(key, ())):
            _float(token, f"{where} {key}[{k}]")
    for key in ("internal_count", "leaf_count"):
        for k, token in enumerate(arrays.get(key, ())):
            _int(token, f"{where} {key}[{k}]", low=0)
    for k, token in enumerate(arrays.get("decision_type", ())):
        kind = _int(token, f"{where} decision_type[{k}]", low=0, high=15)
        if kind & 1 or (kind >> 2) & 3 == 3:
            raise FieldError(f"{where} decision_type[{k}]", "a numerical split (bit 0 clear, missing type 0-2)",
                             shown(token))
    missing = [k for k in _REQUIRED_SPLITS if k not in kv]
    if missing:
        raise FieldError(where, f"a line {missing[0]}=... (a tree of {leaves} leaves)", "none")
    for k, token in enumerate(arrays["split_feature"]):
        _int(token, f"{where} split_feature[{k}]", low=0, high=num_features - 1)
    children = {side: [_child(t, f"{where} {side}[{k}]", leaves) for k, t in enumerate(arrays[side])]
                for side in ("left_child", "right_child")}
    nodes, seen = {0}, set()
    stack = [0]
    while stack:
        node = stack.pop()
        for side in ("left_child", "right_child"):
            child = children[side][node]
            if child >= 0:
                if child in nodes:
                    raise FieldError(f"{where} {side}[{node}]", "a node no other split leads to (one tree, no "
                                     "cycle)", f"node {child} again")
                nodes.add(child)
                stack.append(child)
            else:
                if ~child in seen:
                    raise FieldError(f"{where} {side}[{node}]", "a leaf no other split leads to",
                                     f"leaf {~child} again")
                seen.add(~child)
    if len(nodes) != leaves - 1 or len(seen) != leaves:
        lost = next(iter(sorted(set(range(leaves - 1)) - nodes)), None)
        what = f"node {lost}" if lost is not None else f"leaf {min(set(range(leaves)) - seen)}"
        raise FieldError(where, "every node and leaf reached from the root", f"{what} is not")


def _child(token: str, field: str, leaves: int) -> int:
    value = _int(token, field)
    if 1 <= value <= leaves - 2 or -leaves <= value <= -1:
        return value
    nodes = f"a node in [1, {leaves - 2}] or " if leaves > 2 else ""
    raise FieldError(field, f"{nodes}a leaf as -1..-{leaves} (never the root, 0)", shown(token))


def checked_model_string(text: object, num_features: int, field: str = "state.booster_") -> str:
    """The part of a LightGBM model string LightGBM is to parse (the header and the trees), once every field of it
    is checked (see the module's docstring).

    Args:
        text: the saved string.
        num_features: the model's feature columns (``max_feature_idx`` must be one less).
        field: where the string is, for messages.

    Raises:
        FieldError: the first field that LightGBM could not parse safely, or that this model never writes.
    """
    if not isinstance(text, str):
        raise FieldError(field, "LightGBM's model text (a string)", shown(text))
    if not text.isascii() or "\r" in text or "\0" in text:
        raise FieldError(field, "ASCII text with \\n line ends", "other characters")
    start = text.find("\nTree=") + 1
    if start == 0:
        raise FieldError(field, "LightGBM's model text with at least one 'Tree=' block", shown(text[:40]))
    sizes = _header(text[:start], field, num_features)
    pos = start
    for index, size in enumerate(sizes):
        if pos + size > len(text):
            raise FieldError(f"{field} tree_sizes", f"sizes within the string ({len(text) - start} characters "
                             "from the first tree)", f"{sum(sizes)} in all: the string is cut short, or the sizes "
                             "are wrong")
        _tree(text[pos:pos + size], index, field, num_features)
        pos += size
    if not text.startswith(END_OF_TREES, pos):
        raise FieldError(f"{field} tree_sizes", f"{len(sizes)} tree(s) followed by {END_OF_TREES!r}",
                         shown(text[pos:pos + 20]))
    return text[:pos] + END_OF_TREES + "\n"
