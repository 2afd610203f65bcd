"""Kafka's flexible encoding of coordinator records (the values of its `*Value.json` records from
version 0 with `flexibleVersions: 0+`), read and written by the share group's records in
`__consumer_offsets` (storage/share_group_records.py) and the share coordinator's records in
`__share_group_state` (storage/share_state_records.py).

A value is an int16 version and then: fixed-width big-endian integers, a 16-byte uuid, strings and
arrays as an unsigned varint of their length plus one (0: null), and a tagged-field section
(a varint count, then tag, size and bytes per field) after every struct. Keys are not flexible: an
int16 record type, then int16-length strings, uuids and int32s (`KeyWriter` / `KeyReader`).

Every length is checked against the bytes there before anything is read, and the reader raises
ValueError (never an IndexError or a struct.error) for a truncated or inconsistent value, as for
any input. Pure: no I/O.
"""

from __future__ import annotations

import struct
import uuid

from minibroker.protocol.records import read_uvarint, write_uvarint

__all__ = ["FlexibleReader", "FlexibleWriter", "KeyReader", "KeyWriter", "start_value"]

_INT8 = struct.Struct(">b")
_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")


class FlexibleWriter:
    """A flexible value under construction, its int16 version first."""

    def __init__(self, version: int) -> None:
        self.out = bytearray(_INT16.pack(version))

    def int8(self, value: int) -> None:
        self.out += _INT8.pack(value)

    def int16(self, value: int) -> None:
        self.out += _INT16.pack(value)

    def int32(self, value: int) -> None:
        self.out += _INT32.pack(value)

    def int64(self, value: int) -> None:
        self.out += _INT64.pack(value)

    def uuid(self, value: uuid.UUID) -> None:
        self.out += value.bytes

    def string(self, value: str | None) -> None:
        if value is None:
            write_uvarint(0, self.out)
            return
        data = value.encode()
        write_uvarint(len(data) + 1, self.out)
        self.out += data

    def count(self, n: int) -> None:
        write_uvarint(n + 1, self.out)

    def tags(self, fields: dict[int, bytes] | None = None) -> None:
        """The tagged-field section: none, or `fields` (tag -> encoded bytes) in tag order."""
        items = sorted((fields or {}).items())
        write_uvarint(len(items), self.out)
        for tag, data in items:
            write_uvarint(tag, self.out)
            write_uvarint(len(data), self.out)
            self.out += data

    def done(self) -> bytes:
        return bytes(self.out)


class FlexibleReader:
    """Reads a flexible value; `what` names it in the errors."""

    def __init__(self, data: bytes | memoryview, what: str) -> None:
        self.data = memoryview(data)
        self.what = what
        self.pos = 0

    def take(self, n: int) -> memoryview:
        if n < 0 or self.pos + n > len(self.data):
            raise ValueError(f"{self.what}: {n} byte(s) wanted at {self.pos}, {len(self.data) - self.pos} there")
        chunk = self.data[self.pos:self.pos + n]
        self.pos += n
        return chunk

    def uvarint(self) -> int:
        value, self.pos = read_uvarint(self.data, self.pos, max_bits=35, what=self.what, error=ValueError)
        return value

    def int8(self) -> int:
        return _INT8.unpack(self.take(1))[0]

    def int16(self) -> int:
        return _INT16.unpack(self.take(2))[0]

    def int32(self) -> int:
        return _INT32.unpack(self.take(4))[0]

    def int64(self) -> int:
        return _INT64.unpack(self.take(8))[0]

    def uuid(self) -> uuid.UUID:
        return uuid.UUID(bytes=bytes(self.take(16)))

    def nullable_string(self) -> str | None:
        n = self.uvarint()
        if n == 0:
            return None
        try:
            return bytes(self.take(n - 1)).decode()
        except UnicodeDecodeError as exc:
            raise ValueError(f"{self.what}: a string is not UTF-8") from exc

    def string(self) -> str:
        value = self.nullable_string()
        if value is None:
            raise ValueError(f"{self.what}: a non-nullable string is null")
        return value

    def count(self, min_item_bytes: int) -> int:
        """An array's length, checked against the bytes left (each item takes at least
        `min_item_bytes`) before anything is built from it."""
        n = self.uvarint() - 1
        if n < 0:
            raise ValueError(f"{self.what}: a non-nullable array is null")
        if n * min_item_bytes > len(self.data) - self.pos:
            raise ValueError(f"{self.what}: {n} item(s) declared, {len(self.data) - self.pos} byte(s) left")
        return n

    def tags(self) -> dict[int, bytes]:
        """The tagged fields of a struct, tag -> bytes (the caller reads the ones it knows)."""
        fields = {}
        for _ in range(self.uvarint()):
            tag = self.uvarint()
            fields[tag] = bytes(self.take(self.uvarint()))
        return fields

    def end(self) -> None:
        if self.pos != len(self.data):
            raise ValueError(f"{self.what}: {len(self.data) - self.pos} byte(s) after the value")


def start_value(value: bytes, what: str, readable: tuple[int, ...] = (0,)) -> FlexibleReader:
    """A reader past the value's version, which must be one of `readable`."""
    reader = FlexibleReader(value, what)
    version = reader.int16()
    if version not in readable:
        raise ValueError(f"{what} version {version} is not readable here (version {readable[-1]} is)")
    return reader


class KeyWriter:
    """A coordinator record key: int16 type, then its fields in Kafka's non-flexible encoding."""

    def __init__(self, record_type: int) -> None:
        self.out = bytearray(_INT16.pack(record_type))

    def string(self, value: str) -> KeyWriter:
        data = value.encode()
        self.out += _INT16.pack(len(data)) + data
        return self

    def uuid(self, value: uuid.UUID) -> KeyWriter:
        self.out += value.bytes
        return self

    def int32(self, value: int) -> KeyWriter:
        self.out += _INT32.pack(value)
        return self

    def done(self) -> bytes:
        return bytes(self.out)


class KeyReader(FlexibleReader):
    """Reads a key's fields after its int16 type (the caller has read the type)."""

    def string(self) -> str:
        n = self.int16()
        try:
            return bytes(self.take(n)).decode()
        except UnicodeDecodeError as exc:
            raise ValueError(f"{self.what}: a key string is not UTF-8") from exc
