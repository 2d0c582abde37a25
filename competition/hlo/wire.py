"""A small protobuf wire-format reader and writer, driven by field tables instead of generated code.

A schema is a dict ``field number -> (name, kind, repeated)``; ``kind`` is a scalar kind (``int64``, ``uint64``,
``int32``, ``bool``, ``string``, ``bytes``) or another schema (a sub-message). Only the fields a schema names are
decoded; the others are skipped after their wire type is checked. Repeated scalars are read packed or not, and
written packed (proto3). Messages decode to dicts of field name to value (a list for repeated fields); fields
absent from the input are absent from the dict, so a caller tells "unset" from a default value.
"""

from __future__ import annotations

from typing import Any

Schema = dict[int, tuple[str, Any, bool]]

_VARINT, _I64, _LEN, _I32 = 0, 1, 2, 5
_SCALAR_VARINT = frozenset({"int64", "uint64", "int32", "bool"})


class WireError(ValueError):
    """Bytes that are not a protobuf message of the expected schema; ``offset`` is the byte where it shows."""

    def __init__(self, message: str, offset: int) -> None:
        self.offset = offset
        super().__init__(f"{message} at byte {offset}")


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


def decode(buf: bytes, schema: Schema, start: int = 0, end: int | None = None) -> dict[str, Any]:
    """Decode the message in ``buf[start:end]`` with ``schema``.

    Raises:
        WireError: a truncated field, an unknown wire type, a wire type that does not fit the schema's kind, or
            text that is not UTF-8 in a string field.
    """
    end = len(buf) if end is None else end
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
        values = _values(buf, payload, kind, number, field_start)
        if repeated:
            out.setdefault(name, []).extend(values)
        else:
            out[name] = values[-1]
    return out


def _values(buf: bytes, payload: tuple[str, Any], kind: Any, number: int, offset: int) -> list[Any]:
    tag, value = payload
    if isinstance(kind, dict):
        if tag != "l":
            raise WireError(f"field {number}: expected a sub-message", offset)
        return [decode(buf, kind, *value)]
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
        if tag == "l":  # packed
            out, pos = [], value[0]
            while pos < value[1]:
                v, pos = _varint(buf, pos, value[1])
                out.append(_scalar(v, kind))
            return out
        raise WireError(f"field {number}: expected an integer", offset)
    raise AssertionError(f"unknown kind {kind!r}")


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
        if isinstance(kind, dict):
            for v in values:
                _put_len(out, number, encode(v, kind))
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
