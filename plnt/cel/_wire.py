"""Just enough protobuf wire format to read and rewrite cel-cpp's checked expressions.

cel-expr-python hands out a compiled expression only as a serialized `cel.expr.CheckedExpr`
(inside an Any) and accepts one back (`Env.deserialize`); its descriptors are not exposed to
Python. A message here is a list of `[field number, wire type, value]` (value: int for
varint/fixed, bytes for length-delimited), which keeps unknown parts byte for byte.
"""

from __future__ import annotations

import struct

VARINT, FIXED64, LEN, FIXED32 = 0, 1, 2, 5
Fields = list[list]


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
    fields, pos, end = [], 0, len(buf)
    while pos < end:
        key, pos = read_varint(buf, pos)
        number, wire = key >> 3, key & 7
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
        fields.append([number, wire, value])
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


def encode(fields: Fields) -> bytes:
    out = bytearray()
    for number, wire, value in fields:
        out += _varint(number << 3 | wire)
        if wire == VARINT:
            out += _varint(value)
        elif wire == LEN:
            out += _varint(len(value)) + value
        elif wire == FIXED64:
            out += struct.pack("<Q", value)
        else:
            out += struct.pack("<I", value)
    return bytes(out)


def first(fields: Fields, number: int, default: object = None) -> object:
    for field in fields:
        if field[0] == number:
            return field[2]
    return default


def every(fields: Fields, number: int) -> list:
    return [field[2] for field in fields if field[0] == number]


def signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value
