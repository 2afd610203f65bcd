"""Kafka's varints: the one reader and writer (record fields, KIP-482 tagged fields, request headers).

Unsigned varints are little-endian base-128 (protobuf's); a zigzag varint maps a signed value to an
unsigned one first (0, -1, 1, -2, ... -> 0, 1, 2, 3, ...). The reader checks both ways a declared
varint can lie, against the bytes that exist: it runs past the end of the buffer, or it is longer
than its type allows; either raises the caller's error class (a malformed record, a malformed request
header), never an IndexError.
"""

from __future__ import annotations

__all__ = ["read_uvarint", "read_varint", "write_uvarint", "write_varint"]


def read_uvarint(buf: bytes | bytearray | memoryview, pos: int, *, max_bits: int = 64,
                 what: str = "record", error: type[Exception] = ValueError) -> tuple[int, int]:
    """(value, next position) of the unsigned varint at `pos`; `error` for truncated or overlong
    (longer than `max_bits` allow: 35 bits is Kafka's 5-byte varint, 70 its 10-byte varlong)."""
    result = 0
    shift = 0
    while True:
        if pos >= len(buf):
            raise error(f"truncated varint in {what}")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift >= max_bits:
            raise error(f"varint too long in {what}")


def read_varint(buf: bytes | bytearray | memoryview, pos: int, *, max_bits: int = 64, what: str = "record",
                error: type[Exception] = ValueError) -> tuple[int, int]:
    """(value, next position) of the zigzag (signed) varint at `pos`."""
    raw, pos = read_uvarint(buf, pos, max_bits=max_bits, what=what, error=error)
    return (raw >> 1) ^ -(raw & 1), pos


def write_uvarint(value: int, out: bytearray) -> None:
    """Append `value` (>= 0) as an unsigned varint."""
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def write_varint(value: int, out: bytearray) -> None:
    """Append `value` (a signed 64-bit integer) as a zigzag varint."""
    write_uvarint((value << 1) ^ (value >> 63), out)
