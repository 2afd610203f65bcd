"""Record batch v2 checks, without decoding every record.

The broker stores batches exactly as the producer sent them; it only assigns offsets (the first eight
bytes, outside the CRC) and checks the header. Everything here works per batch, never per record, so
the produce path stays cheap however many records a batch holds.

Layout of the 61-byte header (Kafka's DefaultRecordBatch):
baseOffset i64, batchLength i32, partitionLeaderEpoch i32, magic i8, crc u32, attributes i16,
lastOffsetDelta i32, baseTimestamp i64, maxTimestamp i64, producerId i64, producerEpoch i16,
baseSequence i32, recordsCount i32. The CRC32C covers byte 21 (attributes) to the end of the batch.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Iterator

from crc32c import crc32c

BATCH_HEADER = struct.Struct(">qiibIhiqqqhii")
assert BATCH_HEADER.size == 61
HEADER_SIZE = BATCH_HEADER.size
# baseOffset + batchLength: the part of the header that is not counted in batchLength.
LOG_OVERHEAD = 12
OFFSET_AND_LENGTH = struct.Struct(">qi")
CRC_START = 21
MAGIC_OFFSET = 16

ATTR_COMPRESSION_MASK = 0x07
ATTR_TIMESTAMP_TYPE = 0x08
ATTR_TRANSACTIONAL = 0x10
ATTR_CONTROL = 0x20

NO_PRODUCER_ID = -1
NO_SEQUENCE = -1


class InvalidRecordError(ValueError):
    """The records are malformed in a way Kafka answers with INVALID_RECORD (87)."""

    error_code = 87


class CorruptRecordError(InvalidRecordError):
    """The records fail their CRC or framing: Kafka answers CORRUPT_MESSAGE (2)."""

    error_code = 2


@dataclass(frozen=True, slots=True)
class BatchHeader:
    """The fields of one batch header the broker acts on."""

    position: int  # where the batch starts in the buffer it was read from
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def size(self) -> int:
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def last_sequence(self) -> int:
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        # Sequences wrap from Int.MaxValue to 0 (Kafka DefaultRecordBatch.incrementSequence).
        return (self.base_sequence + self.last_offset_delta) % 0x80000000

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & ATTR_TRANSACTIONAL)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & ATTR_CONTROL)

    @property
    def compression(self) -> int:
        return self.attributes & ATTR_COMPRESSION_MASK

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id >= 0


def read_header(buf: bytes | bytearray | memoryview, position: int = 0) -> BatchHeader:
    """Read one batch header at `position`. The caller has checked that 61 bytes are there."""
    return BatchHeader(position, *BATCH_HEADER.unpack_from(buf, position))


def iter_headers(buf: bytes | bytearray | memoryview) -> Iterator[BatchHeader]:
    """Yield the header of each whole batch in `buf`; a torn tail is not yielded.

    No CRC check: this is for data the broker itself wrote (reads, recovery scans), where the
    stored batches were checked on the way in. A partial batch at the end (a fetch cut at max_bytes,
    or a torn write) simply ends the iteration; use `valid_prefix_length` to find where.
    """
    end = len(buf)
    position = 0
    while position + HEADER_SIZE <= end:
        header = read_header(buf, position)
        if header.batch_length < HEADER_SIZE - LOG_OVERHEAD or position + header.size > end:
            return
        yield header
        position += header.size


def check_batch(buf: bytes | bytearray | memoryview, position: int = 0) -> BatchHeader:
    """Check the batch at `position` the way Kafka checks a produced batch, and return its header.

    Raises CorruptRecordError for framing and CRC faults, InvalidRecordError for a batch that is well
    formed but not acceptable (wrong magic, inconsistent counts).
    """
    available = len(buf) - position
    if available < LOG_OVERHEAD + 5:
        raise CorruptRecordError(f"record batch truncated: {available} bytes, need at least 17")
    _, batch_length = OFFSET_AND_LENGTH.unpack_from(buf, position)
    magic = buf[position + MAGIC_OFFSET]
    if magic != 2:
        raise InvalidRecordError(f"record batch magic {magic}: only magic v2 is accepted")
    if batch_length < HEADER_SIZE - LOG_OVERHEAD:
        raise CorruptRecordError(f"record batch length {batch_length} is below the v2 header size")
    if batch_length + LOG_OVERHEAD > available:
        raise CorruptRecordError(
            f"record batch length {batch_length} runs past the {available} bytes given"
        )
    header = read_header(buf, position)
    end = position + header.size
    actual = crc32c(memoryview(buf)[position + CRC_START : end])
    if actual != header.crc:
        raise CorruptRecordError(
            f"record batch CRC mismatch: stored {header.crc:#010x}, computed {actual:#010x}"
        )
    if header.records_count <= 0:
        raise InvalidRecordError(f"record batch holds {header.records_count} records")
    if header.last_offset_delta != header.records_count - 1:
        raise InvalidRecordError(
            f"record batch offset range {header.last_offset_delta + 1} differs from its "
            f"record count {header.records_count}"
        )
    if header.is_control:
        raise InvalidRecordError("producers may not send control batches")
    return header


def check_produce_records(buf: bytes | bytearray | memoryview) -> BatchHeader:
    """Check the records of one partition in a Produce request (v3+): exactly one v2 batch."""
    header = check_batch(buf, 0)
    if header.size != len(buf):
        raise InvalidRecordError(
            "Produce v3+ allows exactly one record batch per partition; found trailing bytes"
        )
    return header


def set_base_offset(buf: bytearray | memoryview, position: int, base_offset: int) -> None:
    """Assign the batch's offsets in place. baseOffset lies outside the CRC, so it stays valid."""
    struct.pack_into(">q", buf, position, base_offset)


# ---- the broker's own records (internal topics) -------------------------------------------------
# Clients' batches are never decoded on the hot path; these are for batches the broker writes itself
# (committed offsets, the audit stream) and for tools that read them back. Uncompressed only.


def write_uvarint(value: int, out: bytearray) -> None:
    """Append `value` (>= 0) as an unsigned varint (records, tagged fields)."""
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def _zigzag_varint(value: int, out: bytearray) -> None:
    write_uvarint((value << 1) ^ (value >> 63), out)


def read_uvarint(buf, pos: int, *, max_bits: int = 64, what: str = "record",
                 error: type[Exception] = CorruptRecordError) -> tuple[int, int]:
    """(value, next position) of the unsigned varint at `pos`; `error` for truncated or overlong."""
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


def _read_zigzag_varint(buf, pos: int) -> tuple[int, int]:
    raw, pos = read_uvarint(buf, pos)
    return (raw >> 1) ^ -(raw & 1), pos


def encode_batch(
    records: list[tuple[bytes | None, bytes | None]],
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
        _zigzag_varint(0, record)  # timestamp delta
        _zigzag_varint(delta, record)  # offset delta
        for field in (key, value):
            if field is None:
                _zigzag_varint(-1, record)
            else:
                _zigzag_varint(len(field), record)
                record += field
        _zigzag_varint(0, record)  # header count
        _zigzag_varint(len(record), body)
        body += record
    count = len(records)
    header = bytearray(BATCH_HEADER.pack(
        base_offset, HEADER_SIZE - LOG_OVERHEAD + len(body), -1, 2, 0, 0, count - 1,
        timestamp_ms, timestamp_ms, producer_id, producer_epoch, base_sequence, count,
    ))
    crc = crc32c(bytes(header[CRC_START:]) + bytes(body))
    struct.pack_into(">I", header, 17, crc)
    return bytes(header + body)


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
        length, pos = _read_zigzag_varint(batch, pos)
        record_end = pos + length
        if record_end > end:
            raise CorruptRecordError("record runs past the end of its batch")
        pos += 1  # attributes
        ts_delta, pos = _read_zigzag_varint(batch, pos)
        offset_delta, pos = _read_zigzag_varint(batch, pos)
        fields = []
        for _f in range(2):
            size, pos = _read_zigzag_varint(batch, pos)
            if size < 0:
                fields.append(None)
            else:
                fields.append(bytes(batch[pos : pos + size]))
                pos += size
        yield header.base_offset + offset_delta, header.base_timestamp + ts_delta, fields[0], fields[1]
        pos = record_end
