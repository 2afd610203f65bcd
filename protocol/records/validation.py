"""Record batch v2 checks, without building a record object: what a produced batch must pass.

The broker stores batches exactly as the producer sent them; it only assigns offsets (the first eight
bytes, outside the CRC). Before that, `check_produce_records` checks what Kafka's LogValidator checks
(a batch that lies about itself is refused, never stored and served):

* the header: magic 2, batchLength within the bytes given, CRC32C, records count > 0 and equal to
  lastOffsetDelta + 1, no control batch, a known codec (0-4; 5-7 are UNSUPPORTED_COMPRESSION_TYPE);
* the records: the records section (decompressed once for a compressed batch, with a bound: see
  minibroker.protocol.compression) holds exactly records_count records whose varint framing adds up: each
  record's length covers its attributes, timestamp delta, offset delta, key, value and headers
  exactly; offset deltas are 0, 1, 2, ... (so every offset is assigned once); no byte is left over.
  Keys are required on compacted topics (Kafka's validateKey).

The records are never decoded into objects. Runs of records of one shape (what producers write:
same size, same layout) are checked a framing column at a time, one strided slice per column for
the whole run (`_check_runs`, about 5 ns a record); the rest are walked with index arithmetic on the
bytes (`_walk_records`), one varint at a time (about 400 ns a record). The walk is the definition:
the run check accepts exactly the records the walk accepts (tests/protocol/test_record_validation.py holds
it to that) and leaves everything else, faults included, to the walk, which names them.

Errors follow Kafka: framing and CRC faults of the batch are CORRUPT_MESSAGE (2), records that do not
add up are INVALID_RECORD (87), codecs 5-7 UNSUPPORTED_COMPRESSION_TYPE (76); a compressed batch that
decompresses to more than the bound is MESSAGE_TOO_LARGE (10), which makes the Java producer split
the batch and retry. Two deliberate differences, both where Kafka answers UNKNOWN_SERVER_ERROR (it
throws IllegalArgumentException / KafkaException): codecs 5-7 get UNSUPPORTED_COMPRESSION_TYPE, and
undecodable compressed data INVALID_RECORD. And where Kafka silently rebuilds a compressed batch
whose offset deltas are not 0, 1, 2, ..., this broker, which never rewrites a producer's records,
refuses it (INVALID_RECORD); real clients always write them so.

The header's layout is minibroker.protocol.records.batch's.
"""

from __future__ import annotations

from crc32c import crc32c

from minibroker.protocol.compression import DecompressionError, DecompressionLimitError, decompress
from minibroker.protocol.errors import ApiError, ErrorCode
from minibroker.protocol.records.batch import (
    ATTR_COMPRESSION_MASK,
    ATTR_CONTROL,
    BATCH_HEADER,
    CRC_START,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    MIN_BATCH_LENGTH,
    OFFSET_AND_LENGTH,
    BatchHeader,
)
from minibroker.protocol.records.varint import read_uvarint

__all__ = [
    "CorruptRecordError",
    "InvalidRecordError",
    "MAX_COMPRESSION_RATIO",
    "MissingKeyError",
    "RecordsTooLargeError",
    "UnsupportedCompressionError",
    "check_batch",
    "check_produce_records",
    "check_records",
    "keyless_records",
]


class InvalidRecordError(ApiError, ValueError):
    """The records are malformed in a way Kafka answers with INVALID_RECORD."""

    error_code = ErrorCode.invalid_record


class MissingKeyError(InvalidRecordError):
    """A keyless record for a compacted topic (Kafka's validateKey): the produce path names every
    keyless record of the batch in the response's record_errors (KIP-467, `keyless_records`)."""


class CorruptRecordError(InvalidRecordError):
    """The records fail their CRC or framing: Kafka answers CORRUPT_MESSAGE."""

    error_code = ErrorCode.corrupt_message


class UnsupportedCompressionError(InvalidRecordError):
    """A codec Kafka does not have (5-7), or zstd before Produce v7: UNSUPPORTED_COMPRESSION_TYPE."""

    error_code = ErrorCode.unsupported_compression_type


class RecordsTooLargeError(InvalidRecordError):
    """A compressed batch that decompresses past the bound: MESSAGE_TOO_LARGE."""

    error_code = ErrorCode.message_too_large


def check_batch(buf: bytes | bytearray | memoryview, position: int = 0) -> BatchHeader:
    """Check the batch at `position` the way Kafka checks a produced batch, and return its header.

    Raises CorruptRecordError for framing and CRC faults, InvalidRecordError for a batch that is well
    formed but not acceptable (wrong magic, inconsistent counts).
    """
    available = len(buf) - position
    if available < LOG_OVERHEAD + 5:
        raise CorruptRecordError(f"record batch truncated: {available} bytes, need at least 17")
    # The fields unpacked once and checked from the tuple (this is per produced batch); a buffer too
    # short for a header still fails the first check it fails.
    fields = BATCH_HEADER.unpack_from(buf, position) if available >= HEADER_SIZE else None
    batch_length = OFFSET_AND_LENGTH.unpack_from(buf, position)[1] if fields is None else fields[1]
    magic = buf[position + MAGIC_OFFSET]
    if magic != 2:
        raise InvalidRecordError(f"record batch magic {magic}: only magic v2 is accepted")
    if batch_length < MIN_BATCH_LENGTH:
        raise CorruptRecordError(f"record batch length {batch_length} is below the v2 header size")
    if batch_length + LOG_OVERHEAD > available or fields is None:  # (then it runs past: >= 61 bytes)
        raise CorruptRecordError(
            f"record batch length {batch_length} runs past the {available} bytes given"
        )
    _, _, _, _, crc, attributes, last_offset_delta, _, _, _, _, _, records_count = fields
    actual = crc32c(memoryview(buf)[position + CRC_START : position + LOG_OVERHEAD + batch_length])
    if actual != crc:
        raise CorruptRecordError(
            f"record batch CRC mismatch: stored {crc:#010x}, computed {actual:#010x}"
        )
    if records_count <= 0:
        raise InvalidRecordError(f"record batch holds {records_count} records")
    if last_offset_delta != records_count - 1:
        raise InvalidRecordError(
            f"record batch offset range {last_offset_delta + 1} differs from its "
            f"record count {records_count}"
        )
    if attributes & ATTR_CONTROL:
        raise InvalidRecordError("producers may not send control batches")
    return BatchHeader(position, *fields)


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
    origin: tuple[bytes, int] | None = None,
) -> BatchHeader:
    """Check the records of one partition in a Produce request (v3+): exactly one v2 batch, whose
    records add up (see the module docstring). `max_message_bytes` bounds decompression (times
    MAX_COMPRESSION_RATIO); `require_keys` for compacted topics. `origin`: when `buf` is a view of
    a larger bytes object (the request frame, minibroker.protocol.produce_request), that object and where
    `buf` starts in it, so that the records are walked where they are instead of copied out."""
    header = check_batch(buf, 0)
    if header.size != len(buf):
        raise InvalidRecordError(
            "Produce v3+ allows exactly one record batch per partition; found trailing bytes"
        )
    check_records(buf, header, max_message_bytes * MAX_COMPRESSION_RATIO, require_keys, produce_version, origin)
    return header


def check_records(
    buf: bytes | bytearray | memoryview,
    header: BatchHeader,
    max_uncompressed: int,
    require_keys: bool = False,
    produce_version: int | None = None,
    origin: tuple[bytes, int] | None = None,
) -> None:
    """Check the records section of the (header-checked) batch at header.position in `buf`
    (`origin`: see check_produce_records)."""
    codec = header.attributes & ATTR_COMPRESSION_MASK
    start = header.position + HEADER_SIZE
    end = header.position + header.size
    if codec == 0:
        # The walk needs bytes (or a bytearray): indexing them is fastest, and the run check's
        # strided slices of a memoryview are 7 times slower. A view is walked in the bytes it views
        # when they are known (a Produce frame, received in place or not: no copy at all), else
        # copied once.
        if type(buf) is not bytes:
            if origin is not None and type(origin[0]) in (bytes, bytearray):
                buf, at = origin
                start += at
                end += at
            else:
                buf = bytes(buf)
        _check_records_section(buf, start, end, header.records_count, require_keys)
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
    _check_records_section(records, 0, len(records), header.records_count, require_keys)


def _check_records_section(buf: bytes, start: int, end: int, count: int, require_keys: bool) -> None:
    """Runs of same-shaped records a column at a time (`_check_runs`), the rest record by record."""
    i, pos = _check_runs(buf, start, end, 0, count, require_keys) if count >= MIN_RUN else (0, start)
    _walk_records(buf, pos, end, count, require_keys, i)


# Records whose offset delta takes 1, 2, 3 varint bytes: indexes [0, 64), [64, 8192), [8192, 2**20).
_OFFSET_WIDTHS = ((1, 0, 64), (2, 64, 8192), (3, 8192, 1 << 20))
_offset_delta_columns: dict[int, list[bytes]] = {}  # width -> the j-th byte of zigzag(i), per i


def _offset_columns(width: int) -> list[bytes]:
    """Byte j of the varint of zigzag(i) = 2i, for every i of that width (from the width's first
    index): built once per width, from runs (C speed), at most 3 MiB in all."""
    columns = _offset_delta_columns.get(width)
    if columns is None:
        low, high = _OFFSET_WIDTHS[width - 1][1:]
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
    return columns


# Runs shorter than this are walked: checking a run costs about 1.6 us whatever its length (a dozen
# slices and the Python around them), what walking 4 records costs; at 6, a batch whose records
# change shape every 6 records costs what walking it costs, and a batch of 6-15 records of one
# shape (which used to be walked) half.
MIN_RUN = 6
# 1 for a byte with the varint continuation bit set, 0 for one without: a timestamp-delta column
# translated by it must be all 1 (a byte the varint goes on from) or all 0 (its last byte).
_CONTINUES = bytes(b >> 7 for b in range(256))

# A record shape: the layout of one record of a run, as the walk reads it, relative to where the
# record starts: (size, constants, continued, last, offset_at, null_key), where `constants` are
# (column, the byte it holds) for the length's bytes, the key's and the value's lengths and the
# header count (0); `continued` the columns of the timestamp delta's bytes before its `last`;
# `offset_at` the offset delta's first byte (its width is the record index's); `null_key` whether
# the key is null (which a compacted topic refuses). Any record whose bytes in those columns are
# these (and whose timestamp-delta and offset-delta bytes are valid) is one the walk accepts with
# exactly this layout. Shapes are cached by the record's first two bytes and the offset width, a
# guess that the columns then check: a producer sends the same few shapes batch after batch.
_Shape = tuple[int, tuple[tuple[int, bytes], ...], range, int, int, bool]
_shapes: dict[tuple[bytes, int], _Shape] = {}
_MAX_SHAPES = 256


def _shape_at(buf: bytes | bytearray, pos: int, width: int) -> _Shape | None:
    """The shape of the record at `pos` (offset delta `width` bytes), parsed as the walk parses it,
    or None when it is not one a run can have: a negative length, headers, a timestamp delta
    longer than the walk allows, or fields that do not add up to the length. Its bytes may lie past
    the records (the caller bounds the run by the records' end)."""
    try:
        raw = buf[pos]
        if raw < 0x80:
            at = pos + 1
        elif buf[pos + 1] < 0x80:
            raw, at = (raw & 0x7F) | (buf[pos + 1] << 7), pos + 2
        else:
            raw, at = _varint(buf, pos, 5)
        if raw & 1:
            return None
        record_end = at + (raw >> 1)
        ts_at = at + 1  # after the attributes, which the walk does not check
        off_at = ts_at
        while buf[off_at] >= 0x80:
            off_at += 1
            if off_at - ts_at == 10:  # its 10th byte goes on: the walk refuses a varlong that long
                return None
        off_at += 1
        key_at = off_at + width
        raw, key_data = _varint(buf, key_at, 5)
        null_key = bool(raw & 1)  # any negative length is null, as Kafka reads it
        value_at = key_data if null_key else key_data + (raw >> 1)
        raw, value_data = _varint(buf, value_at, 5)
        headers_at = value_data if raw & 1 else value_data + (raw >> 1)
        if buf[headers_at] != 0 or headers_at + 1 != record_end:
            return None
    except (IndexError, InvalidRecordError):
        return None
    constants = tuple((column - pos, bytes(buf[column : column + 1]))
                      for column in (*range(pos, at), *range(key_at, key_data), *range(value_at, value_data),
                                     headers_at))
    return record_end - pos, constants, range(ts_at - pos, off_at - 1 - pos), off_at - 1 - pos, off_at - pos, null_key


def _agreeing(actual: bytes | bytearray, expected: bytes | bytearray) -> int:
    """How many leading bytes of `actual` equal `expected`'s (which differs from it somewhere):
    a binary search over prefixes, each compared by memcmp."""
    if actual[0] != expected[0]:
        return 0
    low, high = 1, len(actual)  # actual[:low] == expected[:low]; actual[:high] != expected[:high]
    while high - low > 1:
        middle = (low + high) // 2
        if actual[:middle] == expected[:middle]:
            low = middle
        else:
            high = middle
    return low


def _check_runs(buf: bytes | bytearray, pos: int, end: int, i: int, count: int, require_keys: bool) -> tuple[int, int]:
    """Check the records from index `i` at `pos` a run at a time, for as long as they come in runs of
    at least MIN_RUN records of one shape, and return (index, position) of the first record not
    checked (the caller walks the rest, which decides and names any fault).

    A run is records of one shape (see _Shape): the same length, timestamp-delta width, key and
    value lengths, no headers. Producers write batches of such runs: the offset delta widens at
    records 64 and 8192 and the timestamp delta at 64 ms, 8192 ms ..., and fixed-size payloads do
    the rest. Within a run every framing byte sits at a fixed distance from the record's start, so
    each framing column is compared for the whole run at once with one strided slice (a C loop)
    instead of a Python loop per record: the constant bytes against the shape's, the offset delta
    against the expected column, the timestamp delta's bytes by their continuation bits. The run
    is taken to reach as far as the records and the offset width allow; a column that differs from
    what it must hold at record m cuts it to its first m records, whose columns all hold, so that
    each starts where the previous one's length says (by induction from the first) and is what
    `_walk_records` accepts. The records' attributes byte is not checked, as the walk (and Kafka's
    DefaultRecord.readFrom) does not check it."""
    guessed = None  # a cached shape that did not fit the record at `pos`: its own is parsed
    # How far a run is looked for: a column's slice costs the records it spans, so after a run cut
    # short by a column, the next one is looked for over at most twice its length, and the reach
    # doubles with each run that fills it (records in short runs of changing shape cost a bounded
    # multiple of what they would cost walked, instead of a slice to the end of the batch each).
    reach = 1 << 20
    while i < count:
        if i < 64:
            width, high, first = 1, 64, 0
        elif i < 8192:
            width, high, first = 2, 8192, 64
        elif i < 1 << 20:
            width, high, first = 3, 1 << 20, 8192
        else:
            return i, pos
        key = (bytes(buf[pos : pos + 2]), width)  # (bytes of bytes is itself; a bytearray's are copied)
        shape = _shapes.get(key) if guessed is None else None
        if shape is None:
            shape = _shape_at(buf, pos, width)
            if shape is None or shape == guessed:
                return i, pos
            if len(_shapes) >= _MAX_SHAPES:
                _shapes.clear()
            _shapes[key] = shape
            guessed = None
        else:
            guessed = shape
        size, constants, continued, last, offset_at, null_key = shape
        n = extent = 0 if null_key and require_keys else min(count, high, i + reach, i + (end - pos) // size) - i
        if n >= MIN_RUN:
            # Each column against what it must hold for the whole run; a column that first differs
            # at record m cuts the run to m records.
            stop = pos + n * size
            for column, byte in constants:
                actual = buf[pos + column : stop : size]
                if actual != byte * n:
                    n = _agreeing(actual, byte * n)
                    if n < MIN_RUN:
                        break
                    stop = pos + n * size
            else:
                actual = buf[pos + last : stop : size]  # the timestamp delta's last byte, then the rest
                if not actual.isascii():
                    n = _agreeing(actual.translate(_CONTINUES), bytes(n))
                for column in continued:
                    if n < MIN_RUN:
                        break
                    stop = pos + n * size
                    actual = buf[pos + column : stop : size].translate(_CONTINUES)
                    if actual != b"\x01" * n:
                        n = _agreeing(actual, b"\x01" * n)
                columns = _offset_delta_columns.get(width) or _offset_columns(width)  # the offset delta
                for j in range(width):
                    if n < MIN_RUN:
                        break
                    stop = pos + n * size
                    actual = buf[pos + offset_at + j : stop : size]
                    expected = columns[j][i - first : i - first + n]
                    if actual != expected:
                        n = _agreeing(actual, expected)
        if n < MIN_RUN:
            if guessed is not None:
                continue  # try again with the record's own shape
            return i, pos
        i += n
        pos += n * size
        guessed = None
        reach = 2 * n if n < extent else 2 * reach
    return i, pos


def _walk_records(buf: bytes, pos: int, end: int, count: int, require_keys: bool, first: int = 0) -> None:
    """Walk `count` records in buf[pos:end] by their varint framing (Kafka's DefaultRecord layout:
    length, attributes i8, timestampDelta varlong, offsetDelta varint, key (length + bytes, -1 null),
    value (the same), header count, headers), checking that they fill it exactly and that offset
    delta i is on record i. Raises InvalidRecordError.

    This is the produce path's only per-record work, so it is written for CPython's interpreter:
    indexing bytes, one- and two-byte varints decoded inline (longer ones by `_varint`), the expected
    offset delta kept in its zigzag form (2i)."""
    i = first
    i2 = 2 * first  # zigzag(i)
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
                    raise MissingKeyError(f"record {i} has no key, which a compacted topic requires")
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


def _varint(buf: bytes | bytearray, pos: int, max_bytes: int) -> tuple[int, int]:
    """(raw zigzag value, next position) of the varint at `pos`, at most `max_bytes` long: the walk's
    slow path, for the varints it does not decode inline."""
    return read_uvarint(buf, pos, max_bits=7 * max_bytes, error=InvalidRecordError)


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




def keyless_records(buf: bytes | bytearray | memoryview, header: BatchHeader, max_uncompressed: int) -> list[int]:
    """The indexes of the keyless records of one batch that `check_records` has accepted without
    requiring keys (only the error path of a compacted topic's produce reads them)."""
    codec = header.attributes & ATTR_COMPRESSION_MASK
    start, end = header.position + HEADER_SIZE, header.position + header.size
    records = bytes(buf[start:end]) if codec == 0 else bytes(decompress(codec, memoryview(buf)[start:end], max_uncompressed))
    keyless = []
    pos = 0
    for i in range(header.records_count):
        length, pos = _signed_varint(records, pos)
        record_end = pos + length
        _, at = _signed_varint(records, pos + 1)  # timestamp delta, after the attributes
        _, at = _signed_varint(records, at)  # offset delta
        key_length, _ = _signed_varint(records, at)
        if key_length < 0:
            keyless.append(i)
        pos = record_end
    return keyless


def _signed_varint(buf: bytes, pos: int) -> tuple[int, int]:
    raw, pos = _varint(buf, pos, 10)
    return (raw >> 1) ^ -(raw & 1), pos
