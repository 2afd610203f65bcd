"""Produce requests of any version (v3-v13) written by hand, down to an exact frame size, for the
tests that cross the framing layer's thresholds (minibroker.protocol.framing) with real frames.

`produce_request(version, size, ...)` is a whole request (header and body, no size prefix) of
exactly `size` bytes: one topic (by name, or by id from v13), one partition, one uncompressed batch
of one record whose value is padded to make up the size.
"""

from __future__ import annotations

import struct
import uuid

from minibroker.protocol.messages import api_schema
from tests.support.batches import make_batch
from tests.support.fuzzing import header


def _uvarint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def produce_body(version: int, topic: str, topic_id: uuid.UUID | None, partitions: list[tuple[int, bytes]],
                 acks: int = -1, timeout_ms: int = 30_000) -> bytes:
    """A Produce body: no transactional id, one topic (by name; by id from v13), `partitions` as
    (index, records)."""
    flexible = api_schema(0, version).flexible
    out = [b"\x00" if flexible else b"\xff\xff", struct.pack(">hi", acks, timeout_ms)]
    out.append(_uvarint(2) if flexible else struct.pack(">i", 1))
    if version >= 13:
        assert topic_id is not None
        out.append(topic_id.bytes)
    else:
        raw = topic.encode()
        out.append(_uvarint(len(raw) + 1) + raw if flexible else struct.pack(">h", len(raw)) + raw)
    out.append(_uvarint(len(partitions) + 1) if flexible else struct.pack(">i", len(partitions)))
    for index, records in partitions:
        out.append(struct.pack(">i", index))
        out.append(_uvarint(len(records) + 1) if flexible else struct.pack(">i", len(records)))
        out.append(records)
        if flexible:
            out.append(b"\x00")
    if flexible:
        out.append(b"\x00\x00")  # the topic's tagged fields, the request's
    return b"".join(out)


def produce_request(version: int, size: int, topic: str, topic_id: uuid.UUID | None = None,
                    correlation_id: int = 1, fill: int = 0) -> tuple[bytes, bytes]:
    """(request, batch): a Produce request of exactly `size` bytes (header and body) carrying one
    batch of one record to partition 0 (its value `fill`-derived bytes padded to the size)."""
    head = header(0, version, correlation_id, "mb-size-test")

    def build(value_size: int) -> tuple[bytes, bytes]:
        value = bytes((fill + i * 7) & 0xFF for i in range(min(value_size, 251))) * (value_size // 251 + 1)
        batch = make_batch([(b"k", value[:value_size])])
        return head + produce_body(version, topic, topic_id, [(0, batch)]), batch

    value_size = max(0, size - len(build(0)[0]))
    for _ in range(8):  # varint widths settle in a step or two
        request, batch = build(value_size)
        if len(request) == size:
            return request, batch
        value_size = max(0, value_size + size - len(request))
    raise ValueError(f"no Produce v{version} request of exactly {size} bytes")
