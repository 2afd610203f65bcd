"""The broker's own records: batches it writes itself (committed offsets, the audit stream) and reads
back, and the record-level reading ListOffsets by timestamp needs. Clients' batches are never decoded
on the produce or fetch path (protocol.records.validation walks them without building records).
Uncompressed batches only, except `record_timestamps`, which decompresses one stored batch.

A record (Kafka's DefaultRecord): length, attributes i8, timestampDelta, offsetDelta, key and value
(each a length, -1 for null, then the bytes), header count, headers; every integer but the
attributes a zigzag varint.
"""

from __future__ import annotations

import struct
from typing import Iterator, Sequence

from crc32c import crc32c

from protocol.compression import DecompressionError, DecompressionLimitError, decompress
from protocol.records.batch import (
    ATTR_TIMESTAMP_TYPE,
    BATCH_HEADER,
    CRC_AT,
    CRC_START,
    HEADER_SIZE,
    LOG_OVERHEAD,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    read_header,
)
from protocol.records.validation import CorruptRecordError, InvalidRecordError
from protocol.records.varint import read_varint, write_varint

__all__ = ["decode_records", "encode_batch", "record_timestamps"]

_UINT32 = struct.Struct(">I")


def _read_varint(buf: bytes | bytearray | memoryview, pos: int) -> tuple[int, int]:
    return read_varint(buf, pos, error=CorruptRecordError)


def encode_batch(
    records: Sequence[tuple[bytes | None, bytes | None]],
    timestamp_ms: int,
    *,
    base_offset: int = 0,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = -1,
    base_sequence: int = NO_SEQUENCE,
) -> bytes:
    """One uncompressed v2 batch of (key, value) records, all stamped `timestamp_ms`, no headers."""
    if not records:
        raise ValueError("a record batch needs at least one record")
    body = bytearray()
    for delta, (key, value) in enumerate(records):
        record = bytearray(b"\0")  # attributes
        write_varint(0, record)  # timestamp delta
        write_varint(delta, record)  # offset delta
        for field in (key, value):
            if field is None:
                write_varint(-1, record)
            else:
                write_varint(len(field), record)
                record += field
        write_varint(0, record)  # header count
        write_varint(len(record), body)
        body += record
    count = len(records)
    header = bytearray(BATCH_HEADER.pack(
        base_offset, HEADER_SIZE - LOG_OVERHEAD + len(body), -1, 2, 0, 0, count - 1,
        timestamp_ms, timestamp_ms, producer_id, producer_epoch, base_sequence, count,
    ))
    _UINT32.pack_into(header, CRC_AT, crc32c(body, crc32c(memoryview(header)[CRC_START:])))
    return bytes(header + body)


def record_timestamps(
    batch: bytes | bytearray | memoryview, *, max_decompressed: int
) -> Iterator[tuple[int, int]]:
    """(offset, timestamp) of each record of one stored v2 batch, compressed or not, in order.

    For ListOffsets by timestamp, never the produce or fetch path. A LogAppendTime batch's records
    all carry the batch's max timestamp (Kafka's DefaultRecord.timestamp). A compressed batch is
    decompressed whole, at most `max_decompressed` bytes (protocol.compression); its codec's errors
    and a record that runs past its batch raise CorruptRecordError.
    """
    header = read_header(batch, 0)
    log_append_time = header.attributes & ATTR_TIMESTAMP_TYPE
    records: bytes | bytearray | memoryview = batch
    position, end = HEADER_SIZE, header.size
    if header.compression:
        try:
            records = decompress(header.compression, memoryview(batch)[HEADER_SIZE:end], max_decompressed)
        except DecompressionLimitError:
            raise
        except DecompressionError as exc:
            raise CorruptRecordError(str(exc)) from None
        position, end = 0, len(records)
    for _ in range(header.records_count):
        length, position = _read_varint(records, position)
        record_end = position + length
        if length < 0 or record_end > end:
            raise CorruptRecordError("record runs past the end of its batch")
        timestamp_delta, after = _read_varint(records, position + 1)  # after the attributes
        offset_delta, _ = _read_varint(records, after)
        timestamp = header.max_timestamp if log_append_time else header.base_timestamp + timestamp_delta
        yield header.base_offset + offset_delta, timestamp
        position = record_end


def decode_records(batch: bytes | bytearray | memoryview) -> Iterator[tuple[int, int, bytes | None, bytes | None]]:
    """(offset, timestamp, key, value) of each record in one uncompressed v2 batch (headers skipped)."""
    header = read_header(batch, 0)
    if header.is_control:
        return  # transaction markers: no data records
    if header.compression:
        raise InvalidRecordError(f"compressed batch (codec {header.compression}) cannot be decoded here")
    pos = HEADER_SIZE
    end = header.size
    for _ in range(header.records_count):
        length, pos = _read_varint(batch, pos)
        record_end = pos + length
        if record_end > end:
            raise CorruptRecordError("record runs past the end of its batch")
        pos += 1  # attributes
        ts_delta, pos = _read_varint(batch, pos)
        offset_delta, pos = _read_varint(batch, pos)
        fields: list[bytes | None] = []
        for _f in range(2):
            size, pos = _read_varint(batch, pos)
            if size < 0:
                fields.append(None)
            else:
                fields.append(bytes(batch[pos : pos + size]))
                pos += size
        yield header.base_offset + offset_delta, header.base_timestamp + ts_delta, fields[0], fields[1]
        pos = record_end
