"""Fetch responses whose record data is sent as it was read, not copied into the response
(the broker's CPU per record: docs/benchmarks.md).

kio's writer copies every partition's `records` into the response buffer, and the buffer is then
copied out again: for a consumer that is two copies of every byte it reads, into freshly allocated
memory. `encode_fetch_response` lets kio encode everything else: each partition's records of at
least SPLICE_MIN_BYTES are replaced by a 16-byte marker (random per response, numbered per
partition), the response encoded as usual, and the marker (with its length prefix) cut out again,
the real length prefix put in its place and the records kept as a buffer of their own. The frame is
then a `FrameParts`: the bytes between the records, and the records themselves, to be sent one after
another (a vectored send). No length encloses a partition's records but their own prefix (arrays
count elements), so the frame size is the only other number to fix. The bytes are exactly kio's
encoding of the same response (tests/protocol/test_fetch_response.py checks every Fetch version).
"""

from __future__ import annotations

import os
import struct
from typing import Any, Iterator, Mapping

from minibroker.protocol.entities import build
from minibroker.protocol.messages import ApiSchema, encode_response

__all__ = ["FrameParts", "SPLICE_MIN_BYTES", "encode_fetch_response"]

# Smaller records are left in the encoded response: copying them costs less than a buffer more.
SPLICE_MIN_BYTES = 16 * 1024
_MARKER_ID = 12  # random bytes of a marker, then a 4-byte partition number
_INT32 = struct.Struct(">i")


class FrameParts:
    """A response frame as consecutive buffers (the size prefix is in the first)."""

    __slots__ = ("parts", "size")

    def __init__(self, parts: list[bytes | bytearray | memoryview]) -> None:
        self.parts = parts
        self.size = sum(len(part) for part in parts)

    def __len__(self) -> int:
        return self.size

    def __iter__(self) -> Iterator[bytes | bytearray | memoryview]:
        return iter(self.parts)

    def __bytes__(self) -> bytes:
        return b"".join(self.parts)


def _length_prefix(flexible: bool, size: int) -> bytes:
    """How a non-null `records` field of `size` bytes is prefixed: COMPACT_RECORDS (unsigned varint
    of size + 1) in flexible versions, an int32 before."""
    if not flexible:
        return _INT32.pack(size)
    value, out = size + 1, bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def encode_fetch_response(schema: ApiSchema, correlation_id: int, body: dict[str, Any],
                          tagged_fields: Mapping[int, bytes] | None = None) -> bytes | FrameParts:
    """The Fetch response frame for `body` (the handler's dicts, throttle_time included): bytes
    when no partition carries SPLICE_MIN_BYTES of records, else a FrameParts holding those records
    uncopied."""
    spliced: list[bytes | bytearray | memoryview] = []
    marker_id = b""
    topics = []
    for topic in body.get("responses", ()):
        partitions = []
        for partition in topic["partitions"]:
            records = partition.get("records")
            if records is not None and len(records) >= SPLICE_MIN_BYTES:
                if not marker_id:
                    marker_id = os.urandom(_MARKER_ID)
                partition = {**partition, "records": marker_id + _INT32.pack(len(spliced))}
                spliced.append(records)
            partitions.append(partition)
        topics.append({**topic, "partitions": partitions})
    if not spliced:
        return encode_response(schema, correlation_id, build(schema.response, body), tagged_fields)
    encoded = encode_response(schema, correlation_id, build(schema.response, {**body, "responses": topics}),
                              tagged_fields)
    flexible = schema.flexible
    marker_prefix = _length_prefix(flexible, _MARKER_ID + 4)
    parts: list[bytes | bytearray | memoryview] = []
    position = 0
    for number, records in enumerate(spliced):
        marker = marker_prefix + marker_id + _INT32.pack(number)
        at = encoded.find(marker, position)
        if at < 0:  # cannot happen with kio's layout; never send a frame that is not kio's
            raise AssertionError(f"records marker {number} not found in the encoded Fetch response")
        parts.append(memoryview(encoded)[position:at])
        parts.append(_length_prefix(flexible, len(records)))
        parts.append(records)
        position = at + len(marker)
    parts.append(memoryview(encoded)[position:])
    first = bytearray(parts[0])
    _INT32.pack_into(first, 0, sum(len(part) for part in parts) - 4)  # the frame's size, records in
    parts[0] = first
    # Join each run of small pieces (the metadata between two partitions' records) into one buffer.
    merged: list[bytes | bytearray | memoryview] = []
    run: list[bytes | bytearray | memoryview] = []
    for part in parts:
        if len(part) >= SPLICE_MIN_BYTES:
            if run:
                merged.append(b"".join(run))
                run = []
            merged.append(part)
        else:
            run.append(part)
    if run:
        merged.append(b"".join(run))
    return FrameParts(merged)
