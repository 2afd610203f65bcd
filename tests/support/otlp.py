"""A small OpenTelemetry MetricsData encoder (protobuf by hand), for the client telemetry tests: what
a KIP-714 client pushes."""

from __future__ import annotations

import struct


def _varint(value: int) -> bytes:
    out = bytearray()
    value &= (1 << 64) - 1
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _field(number: int, data: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(data)) + data


def _fixed64(number: int, value: int) -> bytes:
    return _varint(number << 3 | 1) + struct.pack("<Q", value & ((1 << 64) - 1))


def _double(number: int, value: float) -> bytes:
    return _varint(number << 3 | 1) + struct.pack("<d", value)


def _key_value(key: str, value: str) -> bytes:
    return _field(1, key.encode()) + _field(2, _field(1, value.encode()))


def point(value: float | int, attributes: dict[str, str] | None = None, time_nano: int = 1) -> bytes:
    body = b"".join(_field(7, _key_value(k, v)) for k, v in (attributes or {}).items())
    body += _fixed64(3, time_nano)
    body += _fixed64(6, value) if isinstance(value, int) else _double(4, value)
    return body


def gauge(name: str, *points: bytes) -> bytes:
    return _field(1, name.encode()) + _field(5, b"".join(_field(1, p) for p in points))


def counter(name: str, *points: bytes, delta: bool = True) -> bytes:
    body = b"".join(_field(1, p) for p in points) + _varint(2 << 3) + _varint(1 if delta else 2) + _varint(3 << 3) + _varint(1)
    return _field(1, name.encode()) + _field(7, body)


def metrics_data(*metrics: bytes, resource: dict[str, str] | None = None) -> bytes:
    res = b"".join(_field(1, _key_value(k, v)) for k, v in (resource or {}).items())
    scope = b"".join(_field(2, m) for m in metrics)
    return _field(1, _field(1, res) + _field(2, scope))
