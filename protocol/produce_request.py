"""Produce requests (v3-v13) decoded straight from the frame, records left in place
(the broker's CPU per record: docs/benchmarks.md).

kio's reader builds a full request object and copies every partition's records out of the frame
into a bytes object of its own; on the produce path that copy and the object construction were
most of `decode_request`'s share of the broker's CPU. This decoder reads only what the Produce
handler uses and hands each partition's records on as a memoryview of the frame: the bytes the
socket delivered are the bytes validation walks and `os.writev` writes.

It gives exactly what kio plus the request guard (minibroker.protocol.guard) give for the same frame, field
for field (tests/protocol/test_produce_request.py compares the two on the captured client frames and on
generated requests of every version):

* the same fields: `transactional_id`, `acks`, `timeout` (a timedelta, as kio's i32Timedelta;
  `timeout_ms` is the raw int), `topic_data` of `name` (v3-v12) or `topic_id` (v13; the all-zero
  id reads as None, as kio reads it) and `partition_data` of `index` and `records` (None for a
  null; else a memoryview of the frame, whose `origin` lets validation walk the frame); the attributes a version lacks are None, so `getattr(t, "name", None)` works as on kio's
  objects;
* the same refusals, with the guard's messages: a declared length or array count beyond the bytes
  remaining (checked before anything is read), a null where the schema allows none, a negative
  length other than -1, a varint over 5 bytes, a tagged-field count larger than the bytes allow,
  a tagged field running past the end, a truncated body; and kio's own: a string that is not UTF-8;
* unknown tagged fields (Produce defines none at any level) skipped, as Kafka skips them and as the
  guard cuts them out before kio reads.

Pure: bytes in, objects out.
"""

from __future__ import annotations

import datetime
import struct
import typing
import uuid
from typing import Callable

from minibroker.protocol.guard import RequestRejected
from minibroker.protocol.records.varint import read_uvarint

__all__ = ["PartitionProduceData", "ProduceRequest", "TopicProduceData", "produce_decoder"]

_I16 = struct.Struct(">h").unpack_from
_I32 = struct.Struct(">i").unpack_from
_ACKS_TIMEOUT = struct.Struct(">hi").unpack_from
_ZERO_UUID = bytes(16)


class PartitionProduceData:
    __slots__ = ("index", "records", "records_at")

    def __init__(self, index: int, records: memoryview | None, records_at: int = -1) -> None:
        self.index = index
        self.records = records  # a view of the frame
        self.records_at = records_at  # where `records` starts in the frame

    @property
    def origin(self) -> tuple[bytes, int] | None:
        """(frame, position) of the records, for minibroker.protocol.records.check_produce_records to walk
        them in the frame rather than copy them out; None for null records."""
        return None if self.records is None else (typing.cast(bytes, self.records.obj), self.records_at)

    def __repr__(self) -> str:
        size = None if self.records is None else len(self.records)
        return f"PartitionProduceData(index={self.index}, records=<{size} bytes>)"


class TopicProduceData:
    __slots__ = ("name", "topic_id", "partition_data")

    def __init__(self, name: str | None, topic_id: uuid.UUID | None,
                 partition_data: tuple[PartitionProduceData, ...]) -> None:
        self.name = name
        self.topic_id = topic_id
        self.partition_data = partition_data

    def __repr__(self) -> str:
        return f"TopicProduceData(name={self.name!r}, topic_id={self.topic_id}, partition_data={self.partition_data})"


class ProduceRequest:
    __slots__ = ("version", "transactional_id", "acks", "timeout_ms", "topic_data")

    def __init__(self, version: int, transactional_id: str | None, acks: int, timeout_ms: int,
                 topic_data: tuple[TopicProduceData, ...]) -> None:
        self.version = version
        self.transactional_id = transactional_id
        self.acks = acks
        self.timeout_ms = timeout_ms
        self.topic_data = topic_data

    @property
    def timeout(self) -> datetime.timedelta:
        return datetime.timedelta(milliseconds=self.timeout_ms)

    def __repr__(self) -> str:
        return (f"ProduceRequest(v{self.version}, transactional_id={self.transactional_id!r}, acks={self.acks}, "
                f"timeout_ms={self.timeout_ms}, topic_data={self.topic_data})")


# ---- field readers (the guard's rules; `where` names the field as the guard does) ----------------


def _uvarint(buf: bytes, pos: int, where: str) -> tuple[int, int]:
    return read_uvarint(buf, pos, max_bits=35, what=where, error=RequestRejected)


def _short(where: str, length: int, remaining: int, what: str = "byte(s)") -> RequestRejected:
    if remaining < 0:
        return RequestRejected(f"truncated before {where}")
    return RequestRejected(f"{where} declares {length} {what} but only {remaining} byte(s) remain")


def _length(buf: bytes, pos: int, flexible: bool, unpack, width: int, nullable: bool,
            where: str) -> tuple[int, int]:
    """A length or count prefix: in flexible versions an unsigned varint of length + 1 (0 for
    null), else a signed int16 or int32 (`unpack`, `width` bytes; -1 for null). (length, position
    after it), the length -1 for a null; a null where the field allows none is refused, as is any
    other negative length."""
    if flexible:
        n = buf[pos]
        if n < 128:
            pos += 1
        else:
            n, pos = _uvarint(buf, pos, where)
        n -= 1
    else:
        (n,) = unpack(buf, pos)
        pos += width
    if n < 0:
        if n != -1:
            raise RequestRejected(f"{where} has length {n}")
        if not nullable:
            raise RequestRejected(f"non-nullable field {where} was serialized as null")
    return n, pos


def _string(buf: bytes, pos: int, flexible: bool, nullable: bool, where: str) -> tuple[str | None, int]:
    n, pos = _length(buf, pos, flexible, _I16, 2, nullable, where)
    if n < 0:
        return None, pos
    end = pos + n
    if end > len(buf):
        raise _short(where, n, len(buf) - pos)
    try:
        return str(buf[pos:end], "utf-8"), end
    except UnicodeDecodeError as exc:  # kio's reader refuses it too
        raise RequestRejected(f"{where} is not UTF-8: {exc}") from None


def _count(buf: bytes, pos: int, flexible: bool, element_min: int, where: str) -> tuple[int, int]:
    """A non-nullable array's element count, checked against the bytes remaining (Kafka: each
    element takes at least `element_min` bytes) before a single element is read."""
    c, pos = _length(buf, pos, flexible, _I32, 4, False, where)
    if c * element_min > len(buf) - pos:
        raise _short(where, c, len(buf) - pos, f"element(s) of at least {element_min} byte(s)")
    return c, pos


def _skip_tagged(buf: bytes, pos: int, where: str) -> int:
    """A tagged-field section: Produce defines no tagged field, so every one is skipped."""
    count = buf[pos]
    if count == 0:
        return pos + 1
    count, pos = _uvarint(buf, pos, where)
    if count * 2 > len(buf) - pos:
        raise _short(where, count, len(buf) - pos, "tagged field(s) of at least 2 bytes")
    for _ in range(count):
        tag, pos = _uvarint(buf, pos, where)
        size, pos = _uvarint(buf, pos, where)
        end = pos + size
        if end > len(buf):
            raise _short(f"{where} (tag {tag})", size, len(buf) - pos)
        pos = end
    return pos


# ---- the decoder ---------------------------------------------------------------------------------


def _decoder(version: int) -> Callable[[bytes, int], tuple[ProduceRequest, int]]:
    flexible = version >= 9
    by_id = version >= 13
    # Smallest wire size of one element, as the guard computes it: fields plus the tagged section.
    partition_min = 4 + (1 + 1 if flexible else 4)
    topic_min = (16 if by_id else (1 if flexible else 2)) + (1 if flexible else 4) + (1 if flexible else 0)
    null_marker, null_size = (0, 1) if flexible else (0xFF, 2)  # a null string: compact 0, or int16 -1

    def decode(frame: bytes, offset: int) -> tuple[ProduceRequest, int]:
        if type(frame) is memoryview:
            # The records' `origin` is the object they are views of (`.obj`) and their position in
            # it: a view into a larger buffer would put that position off by the view's start.
            # (The framing layer hands over bytes or a bytearray; a view is copied once.)
            frame = bytes(frame)
        view = memoryview(frame)
        size = len(frame)
        # Fast paths inline (a null transactional id, one-byte counts, empty tagged sections): this
        # runs once per Produce request; anything else goes through the helpers above.
        if frame[offset] == null_marker and (flexible or frame[offset + 1] == 0xFF):
            transactional_id, pos = None, offset + null_size
        else:
            transactional_id, pos = _string(frame, offset, flexible, True, "transactional_id")
        acks, timeout_ms = _ACKS_TIMEOUT(frame, pos)
        pos += 6
        topic_count, pos = _count(frame, pos, flexible, topic_min, "topic_data")
        topics = []
        for _ in range(topic_count):
            if by_id:
                # bytes() whatever the frame's type: the framing layer hands over a bytearray (its
                # recycled receive buffer) for large bodies, and uuid.UUID accepts bytes only.
                raw = bytes(frame[pos:pos + 16])
                if len(raw) < 16:
                    raise RequestRejected("truncated before topic_data.topic_id")
                topic_id, name = (None if raw == _ZERO_UUID else uuid.UUID(bytes=raw)), None
                pos += 16
            else:
                name, pos = _string(frame, pos, flexible, False, "topic_data.name")
                topic_id = None
            partition_count, pos = _count(frame, pos, flexible, partition_min, "topic_data.partition_data")
            partitions = []
            for _ in range(partition_count):
                (index,) = _I32(frame, pos)
                pos += 4
                n, pos = _length(frame, pos, flexible, _I32, 4, True, "topic_data.partition_data.records")
                at = pos
                if n < 0:
                    records = None
                else:
                    pos += n
                    if pos > size:
                        raise _short("topic_data.partition_data.records", n, size - at)
                    records = view[at:pos]
                if flexible:
                    if frame[pos] == 0:
                        pos += 1
                    else:
                        pos = _skip_tagged(frame, pos, "topic_data.partition_data tagged fields")
                partitions.append(PartitionProduceData(index, records, at))
            if flexible:
                if frame[pos] == 0:
                    pos += 1
                else:
                    pos = _skip_tagged(frame, pos, "topic_data tagged fields")
            topics.append(TopicProduceData(name, topic_id, tuple(partitions)))
        if flexible:
            pos = _skip_tagged(frame, pos, "ProduceRequest tagged fields")
        return ProduceRequest(version, transactional_id, acks, timeout_ms, tuple(topics)), pos

    return decode


_DECODERS = {version: _decoder(version) for version in range(3, 14)}
FIRST_VERSION, LAST_VERSION = 3, 13


def produce_decoder(version: int) -> Callable[[bytes, int], tuple[ProduceRequest, int]] | None:
    """`decode(frame, offset) -> (request, end)` for Produce `version`, or None for a version this
    module does not decode (kio's reader then serves it). Raises RequestRejected for bytes that the
    guard or kio would refuse; IndexError and struct.error mean a truncated body (the caller says so)."""
    return _DECODERS.get(version)
