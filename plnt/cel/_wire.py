"""Just enough protobuf wire format to read and rewrite cel-cpp's checked expressions.

cel-expr-python hands out a compiled expression only as a serialized `cel.expr.CheckedExpr`
(inside an Any) and accepts one back (`Env.deserialize`); its descriptors are not exposed to
Python. A message here is a list of `Field(number, wire type, value)` (value: int for
varint/fixed, bytes for length-delimited), which keeps unknown parts byte for byte. Callers
may decode a length-delimited value further and keep the decoded form in a `Field` of their
own value type (plnt/cel/_checked.py keeps child expressions as nodes).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from typing import Generic, NamedTuple, TypeVar

VARINT, FIXED64, LEN, FIXED32 = 0, 1, 2, 5

V_co = TypeVar("V_co", covariant=True)


class Field(NamedTuple, Generic[V_co]):
    number: int
    wire: int
    value: V_co


Raw = int | bytes
Fields = list[Field[Raw]]


def read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7


def decode(buf: bytes) -> Fields:
    fields: Fields = []
    pos, end = 0, len(buf)
    while pos < end:
        key, pos = read_varint(buf, pos)
        number, wire = key >> 3, key & 7
        value: Raw
        if wire == VARINT:
            value, pos = read_varint(buf, pos)
        elif wire == LEN:
            size, pos = read_varint(buf, pos)
            value, pos = buf[pos : pos + size], pos + size
        elif wire == FIXED64:
            value, pos = struct.unpack_from("<Q", buf, pos)[0], pos + 8
        elif wire == FIXED32:
            value, pos = struct.unpack_from("<I", buf, pos)[0], pos + 4
        else:
            raise ValueError(f"unsupported wire type {wire}")
        fields.append(Field(number, wire, value))
    return fields


def _varint(value: int) -> bytes:
    value &= (1 << 64) - 1  # negative int64 as two's complement
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def encode(fields: Iterable[Field[Raw]]) -> bytes:
    out = bytearray()
    for number, wire, value in fields:
        out += _varint(number << 3 | wire)
        if wire == LEN:
            data = as_bytes(value)
            out += _varint(len(data)) + data
        elif wire == VARINT:
            out += _varint(as_int(value))
        elif wire == FIXED64:
            out += struct.pack("<Q", as_int(value))
        else:
            out += struct.pack("<I", as_int(value))
    return bytes(out)


def as_bytes(value: object) -> bytes:
    """A length-delimited value; anything else means the message is not what we expect."""
    if not isinstance(value, bytes):
        raise ValueError(f"expected a length-delimited field, got {type(value).__name__}")
    return value


def as_int(value: object) -> int:
    if not isinstance(value, int):
        raise ValueError(f"expected a numeric field, got {type(value).__name__}")
    return value


def first_bytes(fields: Iterable[Field[object]], number: int, default: bytes = b"") -> bytes:
    for field in fields:
        if field.number == number:
            return as_bytes(field.value)
    return default


def first_int(fields: Iterable[Field[object]], number: int, default: int = 0) -> int:
    for field in fields:
        if field.number == number:
            return as_int(field.value)
    return default


def every_bytes(fields: Iterable[Field[object]], number: int) -> list[bytes]:
    return [as_bytes(field.value) for field in fields if field.number == number]


def signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value
