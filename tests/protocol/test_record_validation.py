"""Batches that lie are refused, with Kafka's error codes (docs/limits.md, "Bad input"): a record count that does not
match the records, a garbage body under a valid CRC, offset deltas that repeat, records whose fields
do not add up to their length, codecs 5-7, compressed data that does not decompress, and a
decompression bomb (bounded: it never takes more memory than the bound). Real clients' batches, in
every codec, pass. A Hypothesis property holds the record walk to a plain reference parser, and
others (with exhaustive single- and every-record faults) hold the run-at-a-time check to the walk:
what it covers, the walk accepts, and the verdict with it is the walk's alone."""

from __future__ import annotations

import gzip
import struct
import subprocess
import sys

import cramjam
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minibroker.protocol.records import (
    InvalidRecordError,
    check_produce_records,
)
from tests.support.batches import encode_record, make_batch, zigzag_varint
from tests.support.batches import TEMPLATE, rebatch

INVALID_RECORD, CORRUPT_MESSAGE, MESSAGE_TOO_LARGE, UNSUPPORTED_COMPRESSION_TYPE = 87, 2, 10, 76


def records(n: int, value: bytes = b"v" * 20, **kw) -> bytes:
    return b"".join(encode_record(i, 0, b"k%d" % i, value, **kw) for i in range(n))


def refused(data: bytes, **kw) -> InvalidRecordError:
    with pytest.raises(InvalidRecordError) as info:
        check_produce_records(data, **kw)
    return info.value


def test_a_record_count_that_does_not_match_the_records_is_invalid_record():
    # Header says 5 (and lastOffsetDelta 4, so the header alone is consistent); 3 records follow.
    error = refused(rebatch(TEMPLATE, records(3), count=5))
    assert error.error_code == INVALID_RECORD and "declares 5 records but holds 3" in str(error)
    error = refused(rebatch(TEMPLATE, records(5), count=3))
    assert error.error_code == INVALID_RECORD


def test_a_garbage_body_with_a_valid_crc_is_invalid_record():
    for garbage in (b"\xff" * 40, bytes(range(40)), b"\x00" * 40, b"\x06\x00\x00\x00\x01\x01\x00" * 3 + b"!"):
        assert refused(rebatch(TEMPLATE, garbage, count=3)).error_code == INVALID_RECORD


def test_repeated_offset_deltas_are_refused():
    """Consumers would read the same offset twice with different values."""
    body = encode_record(0, 0, b"a", b"1") + encode_record(0, 0, b"b", b"2")
    error = refused(rebatch(TEMPLATE, body, count=2))
    assert error.error_code == INVALID_RECORD and "offset delta" in str(error)
    # Past the one-byte varints too.
    body = records(200)[: -len(encode_record(199, 0, b"k199", b"v" * 20))] + encode_record(150, 0, b"k199", b"v" * 20)
    assert "record 199 has offset delta 150" in str(refused(rebatch(TEMPLATE, body, count=200)))


@pytest.mark.parametrize("record", [
    # length says 10, the fields take 9
    zigzag_varint(10) + b"\x00" + zigzag_varint(0) + zigzag_varint(0) + zigzag_varint(1) + b"k" + zigzag_varint(2) + b"vv" + b"\x00" + b"!",
    # a key longer than the record
    zigzag_varint(6) + b"\x00\x00\x00" + zigzag_varint(100) + b"kk",
    # a negative record length
    zigzag_varint(-3) + b"\x00" * 8,
    # a negative header count, and a header key of negative length
    zigzag_varint(5) + b"\x00\x00\x00\x01\x01" + zigzag_varint(-1),
    zigzag_varint(8) + b"\x00\x00\x00\x01\x01" + zigzag_varint(1) + zigzag_varint(-2) + b"\x00",
    # a varint that never ends
    b"\xff" * 12,
])
def test_records_whose_fields_do_not_add_up_are_invalid_record(record):
    assert refused(rebatch(TEMPLATE, record, count=1)).error_code == INVALID_RECORD


def test_bytes_after_the_last_record_are_invalid_record():
    assert refused(rebatch(TEMPLATE, records(2) + b"\x00", count=2)).error_code == INVALID_RECORD


def test_compacted_topics_require_keys():
    batch = make_batch([(None, b"no key")])
    assert check_produce_records(batch).records_count == 1
    error = refused(batch, require_keys=True)
    assert error.error_code == INVALID_RECORD and "compacted" in str(error)
    assert check_produce_records(make_batch([(b"k", None)]), require_keys=True)


@pytest.mark.parametrize("codec", [5, 6, 7])
def test_unknown_codecs_are_unsupported_compression_type(codec):
    error = refused(rebatch(TEMPLATE, records(1), codec=codec))
    assert error.error_code == UNSUPPORTED_COMPRESSION_TYPE and str(codec) in str(error)


def test_zstd_before_produce_v7_is_unsupported_compression_type():
    data = rebatch(TEMPLATE, bytes(cramjam.zstd.compress(records(2))), count=2, codec=4)
    assert check_produce_records(data, produce_version=7).records_count == 2
    assert refused(data, produce_version=6).error_code == UNSUPPORTED_COMPRESSION_TYPE


def _compress(codec: int, data: bytes) -> bytes:
    if codec == 1:
        return gzip.compress(data)
    if codec == 2:
        return bytes(cramjam.snappy.compress_raw(data))
    if codec == 3:
        return bytes(cramjam.lz4.compress(data))
    return bytes(cramjam.zstd.compress(data))


def _xerial(data: bytes, block: int = 1000) -> bytes:
    out = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
    for i in range(0, len(data), block):
        raw = bytes(cramjam.snappy.compress_raw(data[i : i + block]))
        out += struct.pack(">i", len(raw)) + raw
    return out


@pytest.mark.parametrize("codec", [1, 2, 3, 4])
def test_compressed_batches_are_checked_inside(codec):
    good = rebatch(TEMPLATE, _compress(codec, records(50)), count=50, codec=codec)
    assert check_produce_records(good).records_count == 50
    # The same lies as uncompressed ones, under compression.
    assert refused(rebatch(TEMPLATE, _compress(codec, records(50)), count=51, codec=codec)).error_code == INVALID_RECORD
    assert refused(rebatch(TEMPLATE, _compress(codec, b"\x01" * 64), count=3, codec=codec)).error_code == INVALID_RECORD
    # Data its codec cannot decode.
    undecodable = refused(rebatch(TEMPLATE, b"\x13\x37" * 40, count=1, codec=codec))
    assert undecodable.error_code == INVALID_RECORD and "cannot be decompressed" in str(undecodable)
    truncated = _compress(codec, records(50))[:-7]
    assert refused(rebatch(TEMPLATE, truncated, count=50, codec=codec)).error_code == INVALID_RECORD


def test_snappy_in_java_clients_xerial_framing():
    assert check_produce_records(rebatch(TEMPLATE, _xerial(records(300)), count=300, codec=2)).records_count == 300
    torn = _xerial(records(300))[:-5]
    assert refused(rebatch(TEMPLATE, torn, count=300, codec=2)).error_code == INVALID_RECORD


@pytest.mark.parametrize("codec", [1, 2, 3, 4])
def test_a_decompression_bomb_is_message_too_large(codec):
    bomb = rebatch(TEMPLATE, _compress(codec, bytes(3 << 20)), count=1, codec=codec)
    error = refused(bomb, max_message_bytes=32 * 1024)  # bound: 64 x 32 KiB = 2 MiB
    assert error.error_code == MESSAGE_TOO_LARGE and "more than 2097152 bytes" in str(error)


BOMB_PROBE = """
import resource, sys
import cramjam
from minibroker.protocol.records import InvalidRecordError, check_produce_records
from tests.support.batches import TEMPLATE, rebatch
codec = int(sys.argv[1])
chunk = bytes(1 << 20)
if codec == 1:
    import zlib
    c = zlib.compressobj(9, wbits=31)
    body = b"".join(c.compress(chunk) for _ in range(2048)) + c.flush()
else:
    mod = {3: cramjam.lz4, 4: cramjam.zstd}[codec]
    c = mod.Compressor()
    for _ in range(2048):
        c.compress(chunk)
    body = bytes(c.finish())
bomb = rebatch(TEMPLATE, body, count=1, codec=codec)
del chunk, c
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
try:
    check_produce_records(bomb)  # the default bound: 64 x 1 MiB
except InvalidRecordError as e:
    print(e.error_code, (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) // 1024)
"""


@pytest.mark.parametrize("codec", [1, 4])
def test_a_2_gib_bomb_costs_at_most_the_bound_in_memory(codec):
    """2 GiB of zeros in a few MiB: checking it stops at the bound (64 MiB at the default
    max.message.bytes) instead of allocating what it expands to."""
    result = subprocess.run([sys.executable, "-c", BOMB_PROBE, str(codec)], capture_output=True, text=True,
                            timeout=240)
    code, grown_mb = map(int, result.stdout.split())
    assert code == MESSAGE_TOO_LARGE
    assert grown_mb < 200, f"peak RSS grew by {grown_mb} MiB"


# ---- the walk against a plain reference parser ----------------------------------------------------

def _reference_ok(body: bytes, count: int) -> bool:
    """A straightforward reading of Kafka's DefaultRecord.readFrom (plus offset delta == index)."""
    def varint(pos, max_bytes):
        value = shift = 0
        for k in range(max_bytes):
            if pos + k >= len(body):
                raise ValueError
            b = body[pos + k]
            value |= (b & 0x7F) << shift
            if b < 0x80:
                return (value >> 1) ^ -(value & 1), pos + k + 1
            shift += 7
        raise ValueError
    try:
        pos = 0
        for i in range(count):
            length, pos = varint(pos, 5)
            end = pos + length
            if length < 0 or end > len(body):
                return False
            pos += 1
            _, pos = varint(pos, 10)
            delta, pos = varint(pos, 5)
            if delta != i:
                return False
            for _ in range(2):
                size, pos = varint(pos, 5)
                pos += max(size, 0)
            headers, pos = varint(pos, 5)
            if headers < 0 or headers > end - pos:
                return False
            for _ in range(headers):
                size, pos = varint(pos, 5)
                if size < 0:
                    return False
                pos += size
                size, pos = varint(pos, 5)
                pos += max(size, 0)
            if pos != end:
                return False
        return pos == len(body)
    except ValueError:
        return False


record_st = st.tuples(
    st.integers(-(2**40), 2**40), st.one_of(st.none(), st.binary(max_size=70)),
    st.one_of(st.none(), st.binary(max_size=300)),
    st.lists(st.tuples(st.text(max_size=5), st.one_of(st.none(), st.binary(max_size=5))), max_size=2),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(record_st, min_size=1, max_size=150), st.data())
def test_the_walk_accepts_exactly_what_the_reference_accepts(recs, data):
    body = b"".join(encode_record(i, ts, k, v, h) for i, (ts, k, v, h) in enumerate(recs))
    assert check_produce_records(rebatch(TEMPLATE, body, count=len(recs))).records_count == len(recs)
    # Damage the body: flip, drop or insert a byte; the walk and the reference must agree.
    mutated = bytearray(body)
    position = data.draw(st.integers(0, len(body) - 1))
    kind = data.draw(st.sampled_from(["flip", "drop", "insert"]))
    if kind == "flip":
        mutated[position] ^= data.draw(st.integers(1, 255))
    elif kind == "drop":
        del mutated[position]
    else:
        mutated.insert(position, data.draw(st.integers(0, 255)))
    count = len(recs) + data.draw(st.integers(-1, 1)) or 1
    batch = rebatch(TEMPLATE, bytes(mutated), count=count)
    expected = _reference_ok(bytes(mutated), count)
    try:
        check_produce_records(batch)
        accepted = True
    except InvalidRecordError as error:
        assert error.error_code == INVALID_RECORD
        accepted = False
    assert accepted == expected


# ---- real clients' compressed batches pass ---------------------------------------------------------

@pytest.mark.interop
@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_confluent_kafka_batches_in_every_codec_are_accepted_and_read_back(broker, unique, codec):
    from tests.support.clients import Confluent, Message

    client = Confluent()
    topic = unique(f"codec-{codec}")
    client.create_topic(broker.bootstrap, topic, 1)
    messages = [Message(0, b"k%d" % i, (b"value %d " % i) * 20, (("h", b"x"),) if i % 7 == 0 else ())
                for i in range(2000)]
    offsets = client.produce(broker.bootstrap, topic, messages, **{"compression.type": codec, "linger.ms": 20})
    assert offsets == list(range(2000))
    got = client.consume(broker.bootstrap, topic, 1, 2000)
    assert [(o, k, v) for _, o, k, v, _ in got] == [(i, m.key, m.value) for i, m in enumerate(messages)]


@pytest.mark.interop
def test_kafka_python_gzip_batches_are_accepted(broker, unique):
    from tests.support.clients import KafkaPython, Message

    client = KafkaPython()
    topic = unique("gzip")
    client.create_topic(broker.bootstrap, topic, 1)
    offsets = client.produce(broker.bootstrap, topic, [Message(0, None, b"x" * 500, ())] * 100,
                             compression_type="gzip")
    assert sorted(offsets) == list(range(100))


# ---- the run-at-a-time fast path agrees with the reference too ------------------------------------

@settings(max_examples=300, deadline=None)
@given(
    count=st.integers(16, 300),
    key=st.one_of(st.none(), st.integers(0, 70)),
    value=st.one_of(st.none(), st.integers(0, 200)),
    timestamps=st.lists(st.integers(0, 9000), min_size=1, max_size=5),
    growing=st.booleans(),
    data=st.data(),
)
def test_the_run_fast_path_accepts_exactly_what_the_reference_accepts(count, key, value, timestamps, growing, data):
    """Records of one shape are checked a run at a time; the runs must cover a batch whose records
    all share a shape, and agree with the plain reference parser before and after one-byte damage.
    `growing` spreads timestamp deltas over the batch, as a producer's linger does, so the records
    come in runs whose timestamp-delta width steps up (1, 2 bytes), besides the offset delta's."""
    from minibroker.protocol.records.validation import MIN_RUN, _check_runs

    if growing:
        timestamps = sorted(timestamps)
        stamp = [timestamps[i * len(timestamps) // count] for i in range(count)]
    else:
        stamp = [timestamps[i % len(timestamps)] for i in range(count)]
    body = b"".join(
        encode_record(i, stamp[i], None if key is None else bytes(key), None if value is None else b"v" * value)
        for i in range(count)
    )
    covered, position = _check_runs(body, 0, len(body), 0, count, False)
    if len({len(encode_record(0, t, None, None)) for t in stamp}) == 1:
        # One timestamp width: one run, or two where the offset delta widens at record 64 (the
        # second walked when shorter than MIN_RUN).
        assert covered == (64 if 64 < count < 64 + MIN_RUN else count)
        assert position == len(b"".join(encode_record(i, stamp[i], None if key is None else bytes(key),
                                                      None if value is None else b"v" * value)
                                         for i in range(covered)))
    assert check_produce_records(rebatch(TEMPLATE, body, count=count)).records_count == count
    mutated = bytearray(body)
    where = data.draw(st.integers(0, len(body) - 1))
    mutated[where] ^= data.draw(st.integers(1, 255))
    expected = _reference_ok(bytes(mutated), count)
    covered, position = _check_runs(bytes(mutated), 0, len(mutated), 0, count, False)
    if covered == count:
        assert expected and position == len(mutated)
    try:
        check_produce_records(rebatch(TEMPLATE, bytes(mutated), count=count))
        accepted = True
    except InvalidRecordError:
        accepted = False
    assert accepted == expected


def test_a_producers_batch_under_load_is_checked_in_runs():
    """A batch as librdkafka builds it when the broker is busy: 9,000 records of 100 B lingering
    for 300 ms, so the timestamp delta takes one byte, then two, while the offset delta takes one,
    two, then three. The runs cover it all, and with one byte flipped anywhere, the batch is
    refused exactly when the reference parser refuses it (a flipped payload byte is a valid batch)."""
    from minibroker.protocol.records.validation import _check_runs

    count = 9000
    body = b"".join(encode_record(i, i * 300 // count, None, b"x" * 100) for i in range(count))
    assert _check_runs(body, 0, len(body), 0, count, False) == (count, len(body))
    batch = rebatch(TEMPLATE, body, count=count)
    assert check_produce_records(batch).records_count == count
    refused = 0
    for where in range(0, len(body), len(body) // 60 + 1):
        mutated = bytearray(body)
        mutated[where] ^= 0x40
        try:
            check_produce_records(rebatch(TEMPLATE, bytes(mutated), count=count))
            accepted = True
        except InvalidRecordError:
            accepted, refused = False, refused + 1
        assert accepted == _reference_ok(bytes(mutated), count), where
    assert refused > 0


def _verdict(data, **kw):
    try:
        return check_produce_records(data, **kw).records_count
    except InvalidRecordError as exc:
        return type(exc), exc.error_code


@settings(max_examples=150, deadline=None, database=None)
@given(count=st.integers(1, 90), value=st.integers(0, 40), flip=st.integers(0, 10**6), xor=st.integers(1, 255),
       cut=st.integers(0, 10**6), cut_it=st.booleans(), after=st.binary(max_size=40), before=st.binary(max_size=9))
def test_records_walked_in_place_in_a_frame_get_the_verdict_of_a_copy(count, value, flip, xor, cut, cut_it,
                                                                      after, before):
    """A Produce frame's records are validated where they lie (`origin`), not copied out: with a
    byte flipped, the records section cut short, and arbitrary frame bytes around the batch (which
    a walk running past the batch would read), the verdict and error code are those of the batch
    checked on its own."""
    body = bytearray(records(count, b"v" * value))
    body[flip % len(body)] ^= xor
    if cut_it:
        del body[cut % len(body):]
    batch = rebatch(TEMPLATE, bytes(body), count=count)
    for kind in (bytes, bytearray):  # a frame as one read gave it, or received in place
        frame = kind(before + batch + after)
        view = memoryview(frame)[len(before):len(before) + len(batch)]
        assert _verdict(view, origin=(frame, len(before))) == _verdict(batch)
        assert _verdict(view) == _verdict(batch)  # a view without its origin: copied, same verdict


# ---- the run check proves exactly what the walk accepts (adversarial) ------------------------------

def _framed_record(index: int, timestamp: int, key: bytes | None, value: bytes | None, headers: int,
                   attributes: int, ts_padding: int, slack: bool = False) -> tuple[bytes, list[int]]:
    """One record as a producer writes it (the timestamp delta with `ts_padding` extra continuation
    bytes, a varint the walk still reads when it stays within 10 bytes) and the positions of its
    framing bytes: the length, the attributes, the timestamp and offset deltas, the key's and the
    value's lengths, the header count (everything but key, value and header bytes)."""
    ts = zigzag_varint(timestamp)
    if ts_padding:
        ts = bytes(b | 0x80 for b in ts) + b"\x80" * (ts_padding - 1) + b"\x00"
    parts = [bytes([attributes]), ts, zigzag_varint(index)]
    parts += [zigzag_varint(-1)] if key is None else [zigzag_varint(len(key)), key]
    parts += [zigzag_varint(-1)] if value is None else [zigzag_varint(len(value)), value]
    parts.append(zigzag_varint(headers))
    parts += [zigzag_varint(1), b"h", zigzag_varint(1), b"x"] * headers
    body = b"".join(parts) + b"\x00" * slack
    length = zigzag_varint(len(body))
    at = len(length) + 1 + len(ts) + len(zigzag_varint(index))
    framing = list(range(at))  # the length, attributes, timestamp and offset deltas
    for field in (key, value):
        width = len(zigzag_varint(-1 if field is None else len(field)))
        framing += range(at, at + width)
        at += width + (0 if field is None else len(field))
    framing.append(at)
    return length + body, framing


def _timestamp_of_width(width: int, draw) -> int:
    """A timestamp delta whose zigzag varint takes `width` bytes (1-10), of either sign."""
    low = 0 if width == 1 else 1 << (7 * (width - 1) - 1)
    high = min((1 << (7 * width - 1)) - 1, (1 << 63) - 1)
    magnitude = draw(st.integers(low, high))
    return -magnitude - 1 if draw(st.booleans()) else magnitude


def _covered_prefix_is_walked(body: bytes, first: int, covered: int, position: int, require_keys: bool) -> None:
    """What the run check says it checked, the walk accepts: `covered` records from index `first`
    end exactly at `position` (raises InvalidRecordError otherwise)."""
    from minibroker.protocol.records.validation import _walk_records

    if covered > first:
        _walk_records(body, 0, position, covered, require_keys, first)
    else:
        assert position == 0


def _verdicts(buf: bytes, end: int, first: int, count: int, require_keys: bool):
    """(runs then walk, walk alone): whether each accepts the records `first`..`count` - 1 in
    buf[:end] (the bytes after `end` are not records)."""
    from minibroker.protocol.records.validation import _check_runs, _walk_records

    covered, position = _check_runs(buf, 0, end, first, count, require_keys)
    assert position <= end
    _covered_prefix_is_walked(buf, first, covered, position, require_keys)
    results = []
    for start, at in ((covered, position), (first, 0)):
        try:
            _walk_records(buf, at, end, count, require_keys, start)
            results.append(True)
        except InvalidRecordError:
            results.append(False)
    return (covered, position), results


segment_st = st.tuples(
    st.tuples(st.integers(0, 5), st.integers(16, 100), st.integers(1, 15))  # records: mostly a run's worth
    .map(lambda chance_long_short: chance_long_short[2] if chance_long_short[0] == 3 else chance_long_short[1]),
    st.one_of(st.none(), st.integers(0, 70)),  # key size (70: a 2-byte length)
    st.one_of(st.none(), st.integers(0, 200)),  # value size
    st.integers(1, 10),  # timestamp delta width
    st.sampled_from([0] * 10 + [1, "10", "11", 11]),  # padding: +1, to 10 bytes, to 11 (refused), +11
    st.booleans(),  # one timestamp for the segment, or one per record (of that width)
    # a fault in every record of the segment, so that a column compared only against the segment's
    # first record would pass it: (which framing byte, its new value), or "slack": a byte after the
    # fields that the length counts
    st.tuples(st.integers(0, 5), st.tuples(st.integers(-2, 12), st.integers(0, 255)) | st.just("slack"))
    .map(lambda chance_fault: chance_fault[1] if chance_fault[0] == 3 else None),
)


@settings(max_examples=400, deadline=None)
@given(data=st.data(), first=st.one_of(st.sampled_from([0, 1, 47, 48, 63, 64, 65, 8175, 8176, 8191, 8192]),
                                       st.integers(0, 9000)),
       segments=st.lists(segment_st, min_size=1, max_size=3),
       odd=st.lists(st.tuples(st.integers(0, 300), st.sampled_from(["headers", "attributes"])), max_size=3),
       require_keys=st.sampled_from([False, False, True]), warm=st.booleans())
def test_the_run_check_accepts_only_what_the_walk_accepts(data, first, segments, odd, require_keys, warm):
    """Batches made of runs (segments of records of one shape: null or present keys of 0-70 bytes,
    values of 0-200, timestamp deltas of 1-10 bytes, some padded with extra continuation bytes up
    to 10 bytes or past them, a few records with headers or attributes set), starting at any
    record index (so that runs cross the offset delta's widening at 64 and 8192), with one byte
    changed in a framing column of one record: whatever the run check says it covered, the walk
    accepts record by record, and the verdict with the run check is the walk's alone. Run with the
    shape cache warm from the same batch (its shapes guessed) or emptied (each shape parsed)."""
    from hypothesis import event

    from minibroker.protocol.records import validation

    odd = dict(odd)
    records, framings = [], []
    index = first
    for length, key, value, ts_width, padding, spread, fault in segments:
        timestamp = _timestamp_of_width(ts_width, data.draw)
        padding = max(0, int(padding) - ts_width) if isinstance(padding, str) else padding
        for _ in range(length):
            if spread:
                timestamp = _timestamp_of_width(ts_width, data.draw)
            n = len(records)
            record, framing = _framed_record(index, timestamp, None if key is None else b"k" * key,
                                             None if value is None else (bytes(range(256)) * 2)[:value],
                                             int(odd.get(n) == "headers"), 0x55 * (odd.get(n) == "attributes"),
                                             padding, fault == "slack")
            if isinstance(fault, tuple):
                record = bytearray(record)
                record[framing[fault[0] % len(framing)]] = fault[1]
                record = bytes(record)
            framings.append([sum(map(len, records)) + f for f in framing])
            records.append(record)
            index += 1
    # The last `hidden` records lie after the records' end, as frame bytes would (a batch that
    # declares more records than it holds, followed by bytes a run reaching past the end would find
    # well formed); the count includes them or not.
    hidden = data.draw(st.integers(0, min(3, len(records) - 1)))
    body = b"".join(records[: len(records) - hidden])
    trailer = b"".join(records[len(records) - hidden :]) + b"\x00" * data.draw(st.integers(0, 20))
    framings = framings[: len(records) - hidden]
    count = index - (0 if data.draw(st.booleans()) else hidden)
    if warm:
        _verdicts(body + trailer, len(body), first, count, require_keys)
    else:
        validation._shapes.clear()
    (covered, position), (with_runs, walk_alone) = _verdicts(body + trailer, len(body), first, count, require_keys)
    assert with_runs == walk_alone
    event(f"runs covered {'none' if covered == first else 'all' if covered == count else 'some'}")
    # Damage one framing byte of one record.
    victim = data.draw(st.integers(0, len(framings) - 1))
    where = data.draw(st.sampled_from(framings[victim]))
    mutated = bytearray(body)
    mutated[where] ^= data.draw(st.sampled_from([0x80, 0x80, 0x01, 0x40, 0xFF]) | st.integers(1, 255))
    if not warm:
        validation._shapes.clear()
    _, (with_runs, walk_alone) = _verdicts(bytes(mutated) + trailer, len(body), first, count, require_keys)
    assert with_runs == walk_alone


def test_runs_of_one_shape_are_covered_whatever_the_cached_guess():
    """The runs do cover what they should (so the property above is not vacuous): records of one
    shape at every timestamp-delta width, across the offset delta's widening; also when the cache
    holds another layout with the same first bytes (a key of 3 and a value of 10 bytes against a key
    of 4 and a value of 9: the same length), which the columns refute and the record's own shape
    replaces."""
    from minibroker.protocol.records import validation
    from minibroker.protocol.records.validation import _check_runs

    for ts_width in range(1, 11):
        stamp = (1 << (7 * (ts_width - 1) - 1)) if ts_width > 1 else 3
        body = b"".join(_framed_record(i, stamp, None, b"v" * 100, 0, 0, 0)[0] for i in range(300))
        assert _check_runs(body, 0, len(body), 0, 300, False) == (300, len(body))
        assert _check_runs(body, 0, len(body), 0, 300, True) == (0, 0)  # null keys on a compacted topic
    validation._shapes.clear()
    a = b"".join(encode_record(i, 0, b"k" * 3, b"v" * 10) for i in range(40))
    b = b"".join(encode_record(i, 0, b"k" * 4, b"v" * 9) for i in range(40))
    assert a[:2] == b[:2] and len(a) == len(b)
    assert _check_runs(a, 0, len(a), 0, 40, True) == (40, len(a))
    assert _check_runs(b, 0, len(b), 0, 40, True) == (40, len(b))
    assert _check_runs(bytearray(a), 0, len(a), 0, 40, True) == (40, len(a))  # a frame received in place
    # runs of 8 records whose size alternates, across the widening at 64: each is a run (each run
    # cut short narrows how far the next is looked for; the reach then doubles back)
    d = b"".join(encode_record(i, 0, None, b"v" * (10 + (i // 8) % 2)) for i in range(304))
    assert _check_runs(d, 0, len(d), 0, 304, False) == (304, len(d))
    # a run whose record 20 has another value length but the same size ends there
    c = bytearray(a)
    c[20 * (len(a) // 40) + 7] = zigzag_varint(9)[0]  # the value's length, in record 20
    c[20 * (len(a) // 40) + 4] = zigzag_varint(4)[0]  # and the key's: the length still adds up
    assert _check_runs(bytes(c), 0, len(c), 0, 40, True) == (20, 20 * (len(a) // 40))


def test_a_run_check_that_accepted_a_walk_refused_record_would_fail_this_file():
    """The differential tests above hold the run check to the walk through
    `_covered_prefix_is_walked`; it refuses a prefix that the walk refuses (a run check that
    covered too much would be caught)."""
    body = b"".join(encode_record(i, 0, None, b"v" * 10) for i in range(20))
    bad = bytearray(body)
    bad[len(body) // 20 * 5 + 3] = 0x7E  # record 5's offset delta
    with pytest.raises(InvalidRecordError):
        _covered_prefix_is_walked(bytes(bad), 0, 20, len(bad), False)


@pytest.mark.parametrize("first", [0, 40, 8180])
@pytest.mark.parametrize("key, ts_width", [(None, 1), (b"k" * 70, 2), (b"", 10)])
def test_every_framing_byte_of_a_run_damaged_gets_the_walks_verdict(first, key, ts_width):
    """Exhaustively, for runs that cross the offset delta's widening (64, 8192) at timestamp-delta
    widths 1, 2 and 10: each framing byte of a record in the middle of a run changed (to several
    values), and each framing column changed in every record of the run (a fault a check against
    the run's first record would not see): the run check covers only what the walk accepts, and
    the verdict is the walk's."""
    from minibroker.protocol.records import validation

    stamp = 3 if ts_width == 1 else (1 << (7 * (ts_width - 1) - 1))
    built = [_framed_record(first + i, stamp, key, b"v" * 30, 0, 0, 0) for i in range(48)]
    sizes = [len(record) for record, _ in built]
    body = b"".join(record for record, _ in built)
    count = first + len(built)
    starts = [sum(sizes[:k]) for k in range(len(built))]
    victim = 30 if first != 40 else 20  # inside the run after the widening (at 64) too
    for column in built[victim][1]:
        for xor in (0x80, 0x01, 0x40, 0xFF):
            for records in ([victim], range(victim, len(built)) if sizes[victim] == sizes[-1] else [victim]):
                mutated = bytearray(body)
                for k in records:
                    mutated[starts[k] + column] ^= xor
                for warm, kind in ((False, bytes), (True, bytes), (True, bytearray)):  # a frame received in place
                    if not warm:
                        validation._shapes.clear()
                    _, (with_runs, walk_alone) = _verdicts(kind(mutated), len(body), first, count, False)
                    assert with_runs == walk_alone, (column, xor, len(records), warm, kind)


@pytest.mark.parametrize("codec", [0, 1, 2, 3, 4])
@pytest.mark.parametrize("kind", [bytes, bytearray])
def test_a_batch_in_a_frame_of_either_buffer_type_gets_the_verdict_of_the_batch_alone(codec, kind):
    """Compressed or not, a batch checked where it lies in a frame (bytes, or a bytearray received in
    place) gets the verdict, and the error, it gets on its own: the good one and a damaged one."""
    good = rebatch(TEMPLATE, _compress(codec, records(40)) if codec else records(40), count=40, codec=codec or None)
    bad = rebatch(TEMPLATE, _compress(codec, records(40)) if codec else records(40), count=41, codec=codec or None)
    for batch in (good, bad):
        frame = kind(b"\x01" * 13 + batch + b"\x7f" * 3)
        view = memoryview(frame)[13:13 + len(batch)]
        assert _verdict(view, origin=(frame, 13)) == _verdict(view) == _verdict(bytes(batch))
    assert _verdict(good) == 40 and _verdict(bad)[1] == INVALID_RECORD


def test_a_batch_of_more_than_a_million_records_is_checked_past_the_run_checks_last_offset_width():
    """The run check covers offset deltas of up to 3 varint bytes (records 0 to 2**20 - 1); the walk
    takes the records after them (4 bytes). A batch on both sides of that is accepted, and a record
    with a wrong offset delta on either side refused."""
    import numpy as np

    count = (1 << 20) + 8
    widths = [(0, 64, 1), (64, 8192, 2), (8192, 1 << 20, 3), (1 << 20, count, 4)]  # offset delta varint bytes

    def records_of(low: int, high: int, width: int, wrong: int = -1) -> bytes:
        """Records low..high-1 (a null key, an empty value; record `wrong` with the delta of the one
        before it), built a column at a time: length, attributes, timestamp delta, offset delta,
        key -1, value 0, no headers."""
        rows = np.zeros((high - low, 6 + width), np.uint8)
        rows[:, 0] = 2 * (5 + width)
        deltas = 2 * np.arange(low, high, dtype=np.int64)
        if low <= wrong < high:
            deltas[wrong - low] -= 2
        for k in range(width):
            rows[:, 3 + k] = (deltas >> (7 * k)) & 0x7F | (0x80 if k < width - 1 else 0)
        rows[:, 3 + width] = 1
        return rows.tobytes()

    body = b"".join(records_of(*w) for w in widths)
    assert check_produce_records(rebatch(TEMPLATE, body, count=count)).records_count == count
    for wrong in ((1 << 20) - 2, (1 << 20) + 3):
        damaged = b"".join(records_of(*w, wrong=wrong) for w in widths)
        assert refused(rebatch(TEMPLATE, damaged, count=count)).error_code == INVALID_RECORD, wrong
    small = b"".join(records_of(*w) for w in widths[:2])  # the same columns, walked: the same records
    assert small == b"".join(encode_record(i, 0, None, b"") for i in range(8192))
