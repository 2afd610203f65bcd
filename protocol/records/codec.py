"""The broker's own records: batches it writes itself (committed offsets, the audit stream) and reads
back, and the record-level reading ListOffsets by timestamp needs. Clients' batches are never decoded
on the produce or fetch path (minibroker.protocol.records.validation walks them without building records).
Uncompressed batches only, except `record_timestamps`, which decompresses one stored batch.

A record (Kafka's DefaultRecord): length, attributes i8, timestampDelta, offsetDelta, key and value
(each a length, -1 for null, then the bytes), header count, headers; every integer but the
attributes a zigzag varint.
"""

from __future__ import annotations

import struct
from typing import Iterator, NamedTuple, Sequence

from crc32c import crc32c

from minibroker.protocol.compression import DecompressionError, DecompressionLimitError, decompress
from minibroker.protocol.records.batch import (
    ATTR_CONTROL,
    ATTR_TIMESTAMP_TYPE,
    ATTR_TRANSACTIONAL,
    BATCH_HEADER,
    CRC_AT,
    CRC_START,
    HEADER_SIZE,
    LOG_OVERHEAD,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    read_header,
)
from minibroker.protocol.records.validation import CorruptRecordError, InvalidRecordError
from minibroker.protocol.records.varint import read_varint, write_varint

__all__ = [
    "CONTROL_ABORT",
    "CONTROL_COMMIT",
    "ControlRecord",
    "decode_records",
    "encode_batch",
    "encode_control_batch",
    "read_control_record",
    "record_timestamps",
]

_UINT32 = struct.Struct(">I")

# Control records (Kafka's ControlRecordType, EndTransactionMarker): the key is version i16 (0) and
# type i16; an end-transaction marker's value is version i16 (0) and coordinator epoch i32.
CONTROL_ABORT = 0
CONTROL_COMMIT = 1
_CONTROL_KEY = struct.Struct(">hh")
_END_TXN_VALUE = struct.Struct(">hi")


class ControlRecord(NamedTuple):
    """The one record of a control batch: its type (CONTROL_ABORT, CONTROL_COMMIT, or another
    type Kafka defines) and, for an end-transaction marker, the coordinator epoch (-1 otherwise)."""

    type: int
    coordinator_epoch: int

    @property
    def is_abort(self) -> bool:
        return self.type == CONTROL_ABORT


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
    attributes: int = 0,
) -> bytes:
    """One uncompressed v2 batch of (key, value) records, all stamped `timestamp_ms`, no headers.
    `attributes`: the batch's attribute bits (transactional, control; the codec must stay 0)."""
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
        base_offset, HEADER_SIZE - LOG_OVERHEAD + len(body), -1, 2, 0, attributes, count - 1,
        timestamp_ms, timestamp_ms, producer_id, producer_epoch, base_sequence, count,
    ))
    _UINT32.pack_into(header, CRC_AT, crc32c(body, crc32c(memoryview(header)[CRC_START:])))
    return bytes(header + body)


def encode_control_batch(producer_id: int, producer_epoch: int, coordinator_epoch: int, commit: bool,
                         timestamp_ms: int, *, base_offset: int = 0) -> bytes:
    """A COMMIT or ABORT marker as Kafka writes it (MemoryRecords.withEndTransactionMarker): one
    control record in a batch with the transactional and control bits, the producer's id and epoch,
    no sequence (-1)."""
    key = _CONTROL_KEY.pack(0, CONTROL_COMMIT if commit else CONTROL_ABORT)
    value = _END_TXN_VALUE.pack(0, coordinator_epoch)
    return encode_batch([(key, value)], timestamp_ms, base_offset=base_offset, producer_id=producer_id,
                        producer_epoch=producer_epoch, attributes=ATTR_TRANSACTIONAL | ATTR_CONTROL)


def read_control_record(batch: bytes | bytearray | memoryview) -> ControlRecord:
    """The control record of one stored control batch (Kafka's ControlRecordType.parse and
    EndTransactionMarker.deserializeValue). CorruptRecordError when its key or value cannot be read;
    a type other than ABORT/COMMIT is returned as it is, with coordinator epoch -1."""
    header = read_header(batch, 0)
    if not header.is_control or header.compression or header.records_count < 1:
        raise CorruptRecordError("not an uncompressed control batch")
    pos = HEADER_SIZE
    length, pos = _read_varint(batch, pos)
    end = pos + length
    if length < 0 or end > header.size:
        raise CorruptRecordError("control record runs past the end of its batch")
    pos += 1  # attributes
    _, pos = _read_varint(batch, pos)  # timestamp delta
    _, pos = _read_varint(batch, pos)  # offset delta
    (_, control_type), pos = _control_field(batch, pos, end, _CONTROL_KEY, "control record key")
    if control_type not in (CONTROL_ABORT, CONTROL_COMMIT):
        return ControlRecord(control_type, -1)
    (_, coordinator_epoch), _ = _control_field(batch, pos, end, _END_TXN_VALUE, "end transaction marker")
    return ControlRecord(control_type, coordinator_epoch)


def _control_field(batch: bytes | bytearray | memoryview, pos: int, end: int, layout: struct.Struct,
                   what: str) -> tuple[tuple, int]:
    """A control record's key or value at `pos` (its varint length, then `layout`, whose first field
    is a version >= 0): the fields, and the position after it."""
    size, pos = _read_varint(batch, pos)
    if size < layout.size or pos + size > end:
        raise CorruptRecordError(f"{what} of {size} bytes")
    fields = layout.unpack_from(batch, pos)
    if fields[0] < 0:
        raise CorruptRecordError(f"{what} version {fields[0]}")
    return fields, pos + size


def record_timestamps(
    batch: bytes | bytearray | memoryview, *, max_decompressed: int
) -> Iterator[tuple[int, int]]:
    """(offset, timestamp) of each record of one stored v2 batch, compressed or not, in order.

    For ListOffsets by timestamp, never the produce or fetch path. A LogAppendTime batch's records
    all carry the batch's max timestamp (Kafka's DefaultRecord.timestamp). A compressed batch is
    decompressed whole, at most `max_decompressed` bytes (minibroker.protocol.compression); its codec's errors
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
