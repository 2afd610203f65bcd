"""Build valid v2 record batches for tests (uncompressed), the way a producer would.

`make_batch` encodes records (varint lengths, zigzag deltas) and the 61-byte header with a correct
CRC32C; tests/storage/test_log.py checks it byte for byte against kafka-python's
DefaultRecordBatchBuilder.
"""

from __future__ import annotations

import struct
from typing import Sequence

from crc32c import crc32c
import gzip
import cramjam
from minibroker.protocol.records import (
    HEADER_SIZE,
)
from minibroker.protocol.records import BatchHeader

_HEADER = struct.Struct(">qiibIhiqqqhii")
DEFAULT_TIMESTAMP_MS = 1_700_000_000_000
ATTR_TRANSACTIONAL = 0x10


def zigzag_varint(value: int) -> bytes:
    raw = (value << 1) ^ (value >> 63)
    raw &= (1 << 64) - 1
    out = bytearray()
    while raw >= 0x80:
        out.append((raw & 0x7F) | 0x80)
        raw >>= 7
    out.append(raw)
    return bytes(out)


def _bytes_field(data: bytes | None) -> bytes:
    if data is None:
        return zigzag_varint(-1)
    return zigzag_varint(len(data)) + data


def encode_record(
    offset_delta: int,
    timestamp_delta: int,
    key: bytes | None,
    value: bytes | None,
    headers: Sequence[tuple[str, bytes | None]] = (),
) -> bytes:
    body = bytearray(b"\x00")  # attributes (unused)
    body += zigzag_varint(timestamp_delta)
    body += zigzag_varint(offset_delta)
    body += _bytes_field(key)
    body += _bytes_field(value)
    body += zigzag_varint(len(headers))
    for header_key, header_value in headers:
        body += _bytes_field(header_key.encode())
        body += _bytes_field(header_value)
    return zigzag_varint(len(body)) + bytes(body)


def make_batch(
    records: Sequence[tuple[bytes | None, bytes | None]],
    *,
    base_offset: int = 0,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    timestamp_ms: int = DEFAULT_TIMESTAMP_MS,
    timestamps: Sequence[int] | None = None,
    headers: Sequence[tuple[str, bytes | None]] = (),
    partition_leader_epoch: int = -1,
    transactional: bool = False,
    attributes: int = 0,
    compression: str | None = None,
) -> bytes:
    """One v2 batch of `records` (key, value). Every record gets `timestamp_ms` unless
    `timestamps` gives one per record, and carries `headers`. `compression` compresses the records
    the way a producer does (see `compress`)."""
    if not records:
        raise ValueError("a batch holds at least one record")
    if timestamps is None:
        timestamps = [timestamp_ms] * len(records)
    if len(timestamps) != len(records):
        raise ValueError("one timestamp per record")
    first_timestamp = timestamps[0]
    body = b"".join(
        encode_record(i, ts - first_timestamp, key, value, headers)
        for i, ((key, value), ts) in enumerate(zip(records, timestamps))
    )
    attrs = attributes | (ATTR_TRANSACTIONAL if transactional else 0)
    if compression is not None:
        codec, body = compress(compression, body)
        attrs |= codec
    header = bytearray(
        _HEADER.pack(
            base_offset,
            _HEADER.size - 12 + len(body),
            partition_leader_epoch,
            2,
            0,
            attrs,
            len(records) - 1,
            first_timestamp,
            max(timestamps),
            producer_id,
            producer_epoch,
            base_sequence,
            len(records),
        )
    )
    crc = crc32c(body, crc32c(memoryview(header)[21:]))
    struct.pack_into(">I", header, 17, crc)
    return bytes(header) + body


CODECS = {"gzip": 1, "snappy": 2, "snappy-xerial": 2, "lz4": 3, "zstd": 4}


def compress(name: str, data: bytes) -> tuple[int, bytes]:
    """(codec bits, compressed bytes) as producers write them: a gzip stream; snappy as one raw
    block (librdkafka) or in xerial framing with small blocks (Java, kafka-python); an LZ4 frame; a
    zstd frame."""


    if name == "gzip":
        return 1, gzip.compress(data)
    if name == "snappy":
        return 2, bytes(cramjam.snappy.compress_raw(data))
    if name == "snappy-xerial":
        out = bytearray(b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1))
        for i in range(0, len(data), 64):  # several blocks, to cover the framing
            block = bytes(cramjam.snappy.compress_raw(data[i : i + 64]))
            out += struct.pack(">i", len(block)) + block
        return 2, bytes(out)
    if name == "lz4":
        return 3, bytes(cramjam.lz4.compress(data))
    if name == "zstd":
        return 4, bytes(cramjam.zstd.compress(data))
    raise ValueError(name)


def make_value_batch(count: int = 1, size: int = 10, ts: int = DEFAULT_TIMESTAMP_MS, **kwargs) -> bytes:
    """A batch of `count` keyless records of `size` bytes each ("AAA...", "BBB...", ...), all at
    `ts`; `kwargs` as make_batch's."""
    return make_batch([(None, bytes([65 + i % 26]) * size) for i in range(count)], timestamp_ms=ts, **kwargs)


def rebatch(template: bytes, body: bytes, *, count: int | None = None, codec: int | None = None) -> bytes:
    """`template`'s header around a new records section, with batchLength, counts and CRC made
    consistent: the lie is only in the records."""
    header = bytearray(template[:HEADER_SIZE])
    struct.pack_into(">i", header, 8, HEADER_SIZE - 12 + len(body))
    if count is not None:
        struct.pack_into(">i", header, 23, count - 1)  # lastOffsetDelta
        struct.pack_into(">i", header, 57, count)
    if codec is not None:
        (attributes,) = struct.unpack_from(">h", header, 21)
        struct.pack_into(">h", header, 21, (attributes & ~7) | codec)
    struct.pack_into(">I", header, 17, crc32c(bytes(header[21:]) + body))
    return bytes(header) + body


TEMPLATE = make_batch([(b"k", b"v")])


PID = 4242


def batch(
    pid: int = PID,
    epoch: int = 0,
    first_seq: int = 0,
    count: int = 1,
    base_offset: int = 0,
    timestamp: int = 1_700_000_000_000,
    attributes: int = 0,
) -> BatchHeader:
    return BatchHeader(
        position=0,
        base_offset=base_offset,
        batch_length=49 + 10 * count,
        partition_leader_epoch=0,
        magic=2,
        crc=0,
        attributes=attributes,
        last_offset_delta=count - 1,
        base_timestamp=timestamp,
        max_timestamp=timestamp,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=first_seq,
        records_count=count,
    )
