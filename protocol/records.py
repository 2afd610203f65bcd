"""Record batch v2 checks, without building a record object.

The broker stores batches exactly as the producer sent them; it only assigns offsets (the first eight
bytes, outside the CRC). Before that, `check_produce_records` checks what Kafka's LogValidator checks
(a batch that lies about itself is refused, never stored and served):

* the header: magic 2, batchLength within the bytes given, CRC32C, records count > 0 and equal to
  lastOffsetDelta + 1, no control batch, a known codec (0-4; 5-7 are UNSUPPORTED_COMPRESSION_TYPE);
* the records: the records section (decompressed once for a compressed batch, with a bound: see
  protocol.compression) holds exactly records_count records whose varint framing adds up: each
  record's length covers its attributes, timestamp delta, offset delta, key, value and headers
  exactly; offset deltas are 0, 1, 2, ... (so every offset is assigned once); no byte is left over.
  Keys are required on compacted topics (Kafka's validateKey).

The records are walked with index arithmetic on the bytes (`_walk_records`), one varint at a time,
never decoded into objects: that walk is the only per-record work on the produce path.

Errors follow Kafka: framing and CRC faults of the batch are CORRUPT_MESSAGE (2), records that do not
add up are INVALID_RECORD (87), codecs 5-7 UNSUPPORTED_COMPRESSION_TYPE (76); a compressed batch that
decompresses to more than the bound is MESSAGE_TOO_LARGE (10), which makes the Java producer split
the batch and retry. Two deliberate differences, both where Kafka answers UNKNOWN_SERVER_ERROR (it
throws IllegalArgumentException / KafkaException): codecs 5-7 get UNSUPPORTED_COMPRESSION_TYPE, and
undecodable compressed data INVALID_RECORD. And where Kafka silently rebuilds a compressed batch
whose offset deltas are not 0, 1, 2, ..., this broker, which never rewrites a producer's records,
refuses it (INVALID_RECORD); real clients always write them so.

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

from protocol.compression import DecompressionError, DecompressionLimitError, decompress

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


class UnsupportedCompressionError(InvalidRecordError):
    """A codec Kafka does not have (5-7), or zstd before Produce v7: UNSUPPORTED_COMPRESSION_TYPE (76)."""

    error_code = 76


class RecordsTooLargeError(InvalidRecordError):
    """A compressed batch that decompresses past the bound: MESSAGE_TOO_LARGE (10)."""

    error_code = 10


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


ZSTD = 4
ZSTD_MIN_PRODUCE_VERSION = 7  # Kafka's ProduceRequest.validateRecords
# A compressed batch may decompress to at most this many times the topic's max.message.bytes (64 MiB
# at the default 1 MiB): the most memory checking one batch can take.
MAX_COMPRESSION_RATIO = 64


def check_produce_records(
    buf: bytes | bytearray | memoryview,
    *,
    max_message_bytes: int = 1 << 20,
    require_keys: bool = False,
    produce_version: int | None = None,
) -> BatchHeader:
    """Check the records of one partition in a Produce request (v3+): exactly one v2 batch, whose
    records add up (see the module docstring). `max_message_bytes` bounds decompression (times
    MAX_COMPRESSION_RATIO); `require_keys` for compacted topics."""
    header = check_batch(buf, 0)
    if header.size != len(buf):
        raise InvalidRecordError(
            "Produce v3+ allows exactly one record batch per partition; found trailing bytes"
        )
    check_records(buf, header, max_message_bytes * MAX_COMPRESSION_RATIO, require_keys, produce_version)
    return header


def check_records(
    buf: bytes | bytearray | memoryview,
    header: BatchHeader,
    max_uncompressed: int,
    require_keys: bool = False,
    produce_version: int | None = None,
) -> None:
    """Check the records section of the (header-checked) batch at header.position in `buf`."""
    codec = header.attributes & ATTR_COMPRESSION_MASK
    start = header.position + HEADER_SIZE
    end = header.position + header.size
    if codec == 0:
        if type(buf) is not bytes:  # indexing bytes is the fastest way to walk
            buf = bytes(buf)
        if not _uniform_records_ok(buf, start, end, header.records_count, require_keys):
            _walk_records(buf, start, end, header.records_count, require_keys)
        return
    if codec > ZSTD:
        raise UnsupportedCompressionError(f"unknown compression codec {codec} in record batch attributes")
    if codec == ZSTD and produce_version is not None and produce_version < ZSTD_MIN_PRODUCE_VERSION:
        raise UnsupportedCompressionError(
            f"Produce requests with version {produce_version} are not allowed to use ZStandard compression"
        )
    try:
        records = decompress(codec, memoryview(buf)[start:end], max_uncompressed)
    except DecompressionLimitError as exc:
        raise RecordsTooLargeError(str(exc)) from None
    except DecompressionError as exc:
        raise InvalidRecordError(str(exc)) from None
    if not _uniform_records_ok(records, 0, len(records), header.records_count, require_keys):
        _walk_records(records, 0, len(records), header.records_count, require_keys)


# Records whose offset delta takes 1, 2, 3 varint bytes: indexes [0, 64), [64, 8192), [8192, 2**20).
_OFFSET_WIDTHS = ((1, 0, 64), (2, 64, 8192), (3, 8192, 1 << 20))
_offset_delta_columns: dict[int, list[bytes]] = {}  # width -> the j-th byte of zigzag(i), per i


def _offset_column(width: int, j: int, first: int, last: int) -> bytes:
    """Byte j of the varint of zigzag(i) = 2i, for i in [first, last) (all of the same width)."""
    low, high = next((lo, hi) for w, lo, hi in _OFFSET_WIDTHS if w == width)
    columns = _offset_delta_columns.get(width)
    if columns is None:  # once per width, from runs (C speed): at most 3 MiB in all
        columns = []
        for k in range(width):
            more = 0x80 if k < width - 1 else 0
            if k == 0:  # (2i) & 0x7f: 0, 2, ..., 126, repeating every 64 indexes
                column = bytes(range(more, more + 128, 2)) * ((high - low) // 64)
            else:  # (2i >> 7k) & 0x7f = (i >> (7k - 1)) & 0x7f: runs of 2 ** (7k - 1)
                shift = 7 * k - 1
                column = b"".join(bytes(((v & 0x7F) | more,)) * (1 << shift)
                                  for v in range(low >> shift, high >> shift))
            columns.append(column)
        _offset_delta_columns[width] = columns
    return columns[j][first - low : last - low]


def _uniform_records_ok(buf: bytes, start: int, end: int, count: int, require_keys: bool) -> bool:
    """A fast, exact check for the common batch whose records all have the same key and value
    lengths, no headers, attributes 0 and one-byte timestamp deltas (producers of fixed-size
    records, benchmarks and load tests among them). Their layout is then fixed by the record's
    index alone, so every framing byte of every record can be compared at once, a column at a
    time, with strided slices (C loops) instead of a Python loop per record. True means the batch
    is valid (exactly what `_walk_records` would accept); False means "not this shape": the caller
    walks the records, which decides (and names the fault)."""
    if count < 16 or count > _OFFSET_WIDTHS[-1][2]:
        return False
    try:
        # The shape, from record 0: length, attributes 0, timestamp delta, offset delta 0, key, value.
        raw_length, pos = _varint(buf, start, 5)
        if buf[pos] != 0 or buf[pos + 1] >= 0x80 or buf[pos + 2] != 0:
            return False
        raw_key, key_at = _varint(buf, pos + 3, 5)
        key_size = raw_key >> 1 if not raw_key & 1 else -1
        if raw_key & 1 and (raw_key != 1 or require_keys):
            return False
        raw_value, value_at = _varint(buf, key_at + max(key_size, 0), 5)
        value_size = raw_value >> 1 if not raw_value & 1 else -1
        if raw_value & 1 and raw_value != 1:
            return False
    except (IndexError, InvalidRecordError):
        return False
    key_varint = buf[pos + 3 : key_at]
    value_varint = buf[key_at + max(key_size, 0) : value_at]
    # body after the length varint: attributes, ts, offset delta (width w), key, value, header count
    fixed = 2 + len(key_varint) + max(key_size, 0) + len(value_varint) + max(value_size, 0) + 1
    position = start
    for width, low, high in _OFFSET_WIDTHS:
        first, last = low, min(high, count)
        if first >= last:
            break
        body = fixed + width
        length_varint = _zigzag_bytes(body)
        size = len(length_varint) + body
        n = last - first
        stop = position + n * size
        if stop > end:
            return False
        column = position
        for byte in length_varint:
            if buf[column : stop : size] != bytes((byte,)) * n:
                return False
            column += 1
        if buf[column : stop : size] != bytes(n):  # attributes
            return False
        if not buf[column + 1 : stop : size].isascii():  # timestamp delta: one byte
            return False
        column += 2
        for j in range(width):
            if buf[column + j : stop : size] != _offset_column(width, j, first, last):
                return False
        column += width
        for byte in key_varint:
            if buf[column : stop : size] != bytes((byte,)) * n:
                return False
            column += 1
        column += max(key_size, 0)
        for byte in value_varint:
            if buf[column : stop : size] != bytes((byte,)) * n:
                return False
            column += 1
        if buf[position + size - 1 : stop : size] != bytes(n):  # header count 0
            return False
        position = stop
    return position == end


def _zigzag_bytes(value: int) -> bytes:
    out = bytearray()
    _zigzag_varint(value, out)
    return bytes(out)


def _walk_records(buf: bytes, pos: int, end: int, count: int, require_keys: bool) -> None:
    """Walk `count` records in buf[pos:end] by their varint framing (Kafka's DefaultRecord layout:
    length, attributes i8, timestampDelta varlong, offsetDelta varint, key (length + bytes, -1 null),
    value (the same), header count, headers), checking that they fill it exactly and that offset
    delta i is on record i. Raises InvalidRecordError.

    This is the produce path's only per-record work, so it is written for CPython's interpreter:
    indexing bytes, one- and two-byte varints decoded inline (longer ones by `_varint`), the expected
    offset delta kept in its zigzag form (2i)."""
    i = 0
    i2 = 0  # zigzag(i)
    try:
        while pos < end:
            # length
            b = buf[pos]
            if b < 0x80:
                pos += 1
            else:
                v = buf[pos + 1]
                if v < 0x80:
                    b = (b & 0x7F) | (v << 7)
                    pos += 2
                else:
                    b, pos = _varint(buf, pos, 5)
            if b & 1:
                raise InvalidRecordError(f"record {i} has a negative length")
            record_end = pos + (b >> 1)
            if record_end > end:
                raise InvalidRecordError(f"record {i} runs past the end of its batch")
            # attributes (unused in v2); the timestamp delta, skipped (pos stops on its last byte)
            pos += 1
            if buf[pos] >= 0x80:  # a varlong of at most 10 bytes
                _, pos = _varint(buf, pos, 10)
                pos -= 1
            # offset delta: must be i
            if i2 < 0x80:
                if buf[pos + 1] != i2:
                    raise InvalidRecordError(f"record {i} has offset delta {_zigzag_at(buf, pos + 1)}")
                pos += 3
            elif i2 < 0x4000 and buf[pos + 1] == (i2 & 0x7F) | 0x80 and buf[pos + 2] == i2 >> 7:
                pos += 4
            else:
                v, pos = _varint(buf, pos + 1, 5)
                if v != i2:
                    raise InvalidRecordError(f"record {i} has offset delta {(v >> 1) ^ -(v & 1)}")
                pos += 1
            # key (pos is one past its length's first byte); a negative length is null, as Kafka reads it
            b = buf[pos - 1]
            if b >= 0x80:
                b, pos = _varint(buf, pos - 1, 5)
            if b & 1:
                if require_keys:
                    raise InvalidRecordError(f"record {i} has no key, which a compacted topic requires")
            else:
                pos += b >> 1
            # value
            b = buf[pos]
            if b < 0x80:
                pos += 1
            else:
                v = buf[pos + 1]
                if v < 0x80:
                    b = (b & 0x7F) | (v << 7)
                    pos += 2
                else:
                    b, pos = _varint(buf, pos, 5)
            if not b & 1:
                pos += b >> 1
            # headers: almost always none
            if buf[pos]:
                pos = _skip_headers(buf, pos, record_end, i)
            else:
                pos += 1
            if pos != record_end:
                raise InvalidRecordError(
                    f"record {i}: its fields take {pos - record_end:+d} bytes more than its length says"
                )
            i += 1
            i2 += 2
            if i > count:
                break
    except IndexError:
        raise InvalidRecordError(f"record {i} is truncated") from None
    if i != count:
        raise InvalidRecordError(f"record batch declares {count} records but holds {i}")
    if pos != end:
        raise InvalidRecordError("record batch has bytes after its last record")


def _zigzag_at(buf: bytes, pos: int) -> int:
    raw, _ = _varint(buf, pos, 5)
    return (raw >> 1) ^ -(raw & 1)


def _varint(buf: bytes, pos: int, max_bytes: int) -> tuple[int, int]:
    """(raw zigzag value, next position) of the varint at `pos`, at most `max_bytes` long."""
    value = 0
    shift = 0
    limit = pos + max_bytes
    while pos < limit:
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos
        shift += 7
    raise InvalidRecordError(f"varint longer than {max_bytes} bytes in a record")


def _skip_headers(buf: bytes, pos: int, record_end: int, i: int) -> int:
    raw, pos = _varint(buf, pos, 5)
    count = (raw >> 1) ^ -(raw & 1)
    if count < 0 or count > record_end - pos:
        raise InvalidRecordError(f"record {i} has an invalid header count {count}")
    for _ in range(count):
        raw, pos = _varint(buf, pos, 5)
        if raw & 1:
            raise InvalidRecordError(f"record {i} has a header with a negative key length")
        pos += raw >> 1
        raw, pos = _varint(buf, pos, 5)
        if not raw & 1:
            pos += raw >> 1
        if pos > record_end:
            raise InvalidRecordError(f"record {i}: its headers run past its end")
    return pos


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
        length, position = _read_zigzag_varint(records, position)
        record_end = position + length
        if length < 0 or record_end > end:
            raise CorruptRecordError("record runs past the end of its batch")
        timestamp_delta, after = _read_zigzag_varint(records, position + 1)  # after the attributes
        offset_delta, _ = _read_zigzag_varint(records, after)
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
