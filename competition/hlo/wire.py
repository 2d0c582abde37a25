"""A small protobuf wire-format reader and writer, driven by field tables instead of generated code.

A schema is a dict ``field number -> (name, kind, repeated)``; ``kind`` is a scalar kind (``int64``, ``uint64``,
``int32``, ``bool``, ``string``, ``bytes``) or another schema (a sub-message). Only the fields a schema names are
decoded; the others are skipped after their wire type is checked. Repeated scalars are read packed or not, and
written packed (proto3). Messages decode to dicts of field name to value (a list for repeated fields); fields
absent from the input are absent from the dict, so a caller tells "unset" from a default value.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from competition.limits import MAX_PROTO_DEPTH

Schema = dict[int, tuple[str, Any, bool]]

_VARINT, _I64, _LEN, _I32 = 0, 1, 2, 5
_SCALAR_VARINT = frozenset({"int64", "uint64", "int32", "bool"})
_VALUE_ENDS = bytes(range(0x80))  # the bytes that end a varint (no continuation bit)


class WireError(ValueError):
    """Bytes that are not a protobuf message of the expected schema; ``offset`` is the byte where it shows."""

    def __init__(self, message: str, offset: int) -> None:
        self.offset = offset
        super().__init__(f"{message} at byte {offset}")


class WireLimit(WireError):
    """A message past one of the reader's limits (nesting, values): it may be well-formed, but is not read."""


def _varint(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    result = shift = 0
    start = pos
    while True:
        if pos >= end:
            raise WireError("truncated varint", start)
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            # A 10th byte carries bit 63 only: any higher bit is a value no 64-bit field holds.
            if result >> 64:
                raise WireError("a varint of more than 64 bits", start)
            return result, pos
        shift += 7
        if shift >= 70:
            raise WireError("varint longer than 10 bytes", start)


def _signed(v: int, kind: str) -> int:
    if kind == "int64" and v >= 1 << 63:
        return v - (1 << 64)
    if kind == "int32":
        v &= (1 << 64) - 1
        return v - (1 << 64) if v >= 1 << 63 else v
    return v


def _scalar(v: int, kind: str) -> Any:
    return bool(v) if kind == "bool" else _signed(v, kind)


class Interned:
    """A sub-message kind decoded once per distinct encoding: ``convert`` turns the decoded dict into a value that
    every equal encoding of the message shares (within one :func:`decode`). A record's runs repeat a few layouts of
    each node millions of times; interned, each costs a reference instead of its dicts and lists."""

    def __init__(self, schema: Schema, convert: Callable[[dict[str, Any]], Any]) -> None:
        self.schema = schema
        self.convert = convert


@dataclass
class Budget:
    """What one :func:`decode` may build: ``values`` left to decode (numbers, strings, sub-messages, interned
    references; ``what`` says how they were counted), and the deepest sub-message nesting it follows. Past either,
    :func:`decode` raises a :class:`WireLimit`."""

    values: int
    what: str = "the reader's budget"
    max_depth: int = MAX_PROTO_DEPTH
    limit: int = field(init=False)
    memo: dict[tuple[int, bytes], Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.limit = self.values

    def spend(self, n: int, offset: int) -> None:
        self.values -= n
        if self.values < 0:
            raise WireLimit(f"more than {self.limit:,} values to decode ({self.what}), far more than any real "
                            "message", offset)


def decode(buf: bytes, schema: Schema, start: int = 0, end: int | None = None, *,
           budget: Budget | None = None, depth: int = 1) -> dict[str, Any]:
    """Decode the message in ``buf[start:end]`` with ``schema``; ``budget`` bounds the values it decodes (and the
    sub-messages' nesting, at :data:`MAX_PROTO_DEPTH` without one).

    Raises:
        WireError: a truncated field, an unknown wire type, a wire type that does not fit the schema's kind, text
            that is not UTF-8 in a string field, sub-messages nested deeper than the limit, or more values than
            the budget.
    """
    end = len(buf) if end is None else end
    budget = budget if budget is not None else Budget(1 << 62)
    if depth > budget.max_depth:
        raise WireLimit(f"sub-messages nested more than {budget.max_depth} deep (MAX_PROTO_DEPTH)", start)
    out: dict[str, Any] = {}
    pos = start
    while pos < end:
        field_start = pos
        key, pos = _varint(buf, pos, end)
        number, wire = key >> 3, key & 7
        if number == 0:
            raise WireError("field number 0", field_start)
        if wire == _VARINT:
            value, pos = _varint(buf, pos, end)
            payload: Any = ("v", value)
        elif wire == _I64:
            if pos + 8 > end:
                raise WireError("truncated 64-bit field", field_start)
            payload, pos = ("f", int.from_bytes(buf[pos:pos + 8], "little")), pos + 8
        elif wire == _I32:
            if pos + 4 > end:
                raise WireError("truncated 32-bit field", field_start)
            payload, pos = ("f", int.from_bytes(buf[pos:pos + 4], "little")), pos + 4
        elif wire == _LEN:
            n, pos = _varint(buf, pos, end)
            if pos + n > end:
                raise WireError(f"field {number} declares {n} bytes, {end - pos} left (truncated)", field_start)
            payload, pos = ("l", (pos, pos + n)), pos + n
        else:
            raise WireError(f"wire type {wire} (groups and unknown types are not read)", field_start)
        spec = schema.get(number)
        if spec is None:
            continue
        name, kind, repeated = spec
        values = _values(buf, payload, kind, number, field_start, budget, depth)
        if repeated:
            out.setdefault(name, []).extend(values)
        else:
            out[name] = values[-1]
    return out


def _values(buf: bytes, payload: tuple[str, Any], kind: Any, number: int, offset: int, budget: Budget,
            depth: int) -> list[Any]:
    tag, value = payload
    budget.spend(1, offset)
    if isinstance(kind, dict | Interned):
        if tag != "l":
            raise WireError(f"field {number}: expected a sub-message", offset)
        if isinstance(kind, dict):
            return [decode(buf, kind, *value, budget=budget, depth=depth + 1)]
        key = (id(kind), bytes(buf[value[0]:value[1]]))
        if key not in budget.memo:
            budget.memo[key] = kind.convert(decode(buf, kind.schema, *value, budget=budget, depth=depth + 1))
        return [budget.memo[key]]
    if kind in ("string", "bytes"):
        if tag != "l":
            raise WireError(f"field {number}: expected a {kind}", offset)
        raw = bytes(buf[value[0]:value[1]])
        if kind == "bytes":
            return [raw]
        try:
            return [raw.decode("utf-8")]
        except UnicodeDecodeError:
            raise WireError(f"field {number}: a string that is not UTF-8", offset) from None
    if kind in _SCALAR_VARINT:
        if tag == "v":
            return [_scalar(value, kind)]
        if tag == "l":  # packed: each byte that ends a varint ends a value
            budget.spend(packed_count(buf, *value), offset)
            out, pos = [], value[0]
            while pos < value[1]:
                v, pos = _varint(buf, pos, value[1])
                out.append(_scalar(v, kind))
            return out
        raise WireError(f"field {number}: expected an integer", offset)
    raise AssertionError(f"unknown kind {kind!r}")


def count_fields(buf: bytes, numbers: set[int], start: int = 0, end: int | None = None
                 ) -> tuple[dict[int, int], dict[int, list[tuple[int, int]]]]:
    """The fields of the message in ``buf[start:end]`` with the given ``numbers``, counted without decoding them:
    ``(count per number, (start, end) of each length-delimited one)``. What a reader checks against its limits
    before it decodes (builds) anything; a varint of a packed field is counted by :func:`packed_count`.

    Raises:
        WireError: as :func:`decode`, for the message's own fields (not their contents).
    """
    end = len(buf) if end is None else end
    counts = dict.fromkeys(numbers, 0)
    spans: dict[int, list[tuple[int, int]]] = {n: [] for n in numbers}
    pos = start
    while pos < end:
        field_start = pos
        key, pos = _varint(buf, pos, end)
        number, wire = key >> 3, key & 7
        if number == 0:
            raise WireError("field number 0", field_start)
        if wire == _VARINT:
            _, pos = _varint(buf, pos, end)
        elif wire in (_I64, _I32):
            pos += 8 if wire == _I64 else 4
            if pos > end:
                raise WireError(f"truncated {64 if wire == _I64 else 32}-bit field", field_start)
        elif wire == _LEN:
            n, pos = _varint(buf, pos, end)
            if pos + n > end:
                raise WireError(f"field {number} declares {n} bytes, {end - pos} left (truncated)", field_start)
            if number in numbers:
                spans[number].append((pos, pos + n))
            pos += n
        else:
            raise WireError(f"wire type {wire} (groups and unknown types are not read)", field_start)
        if number in numbers:
            counts[number] += 1
    return counts, spans


def packed_count(buf: bytes, start: int, end: int) -> int:
    """How many varints a packed field's bytes ``buf[start:end]`` hold (the bytes that end one)."""
    seg = bytes(buf[start:end])
    return len(seg) - len(seg.translate(None, _VALUE_ENDS))


def _put_varint(out: bytearray, v: int) -> None:
    v &= (1 << 64) - 1
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return


def _put_len(out: bytearray, number: int, data: bytes) -> None:
    _put_varint(out, number << 3 | _LEN)
    _put_varint(out, len(data))
    out += data


def encode(message: dict[str, Any], schema: Schema) -> bytes:
    """Encode ``message`` (field name to value, as :func:`decode` returns) with ``schema``, fields in number
    order. Scalars equal to their default (0, False, empty) are left out, as proto3 does; a sub-message present
    in the dict is written even when empty."""
    out = bytearray()
    for number in sorted(schema):
        name, kind, repeated = schema[number]
        if name not in message:
            continue
        value = message[name]
        values = list(value) if repeated else [value]
        if isinstance(kind, dict | Interned):
            for v in values:
                _put_len(out, number, encode(v, kind.schema if isinstance(kind, Interned) else kind))
        elif kind in ("string", "bytes"):
            for v in values:
                data = v.encode("utf-8") if kind == "string" else bytes(v)
                if data or repeated:
                    _put_len(out, number, data)
        elif repeated:
            if values:
                packed = bytearray()
                for v in values:
                    _put_varint(packed, int(v))
                _put_len(out, number, bytes(packed))
        elif value:
            _put_varint(out, number << 3 | _VARINT)
            _put_varint(out, int(value))
    return bytes(out)
