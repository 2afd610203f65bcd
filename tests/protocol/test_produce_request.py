"""minibroker.protocol.produce_request against kio: the same requests, the same refusals, records not copied.

The reference is the path every other API takes, `decode_request` with the request guard and kio's
reader (the schema with its own decoder taken away). On the frames real clients sent (the corpus in
tests/data/frames) and on generated bodies of every Produce version the broker serves, valid and
hostile, both must accept or both refuse, and what they accept must be field for field the same.
kio's native reader can abort the process on a hostile length the guard missed, but the guard is
tested for that on its own (tests/protocol/test_guard.py); here the guard runs first, as in the
broker, so kio only ever sees what the guard passed.
"""

from __future__ import annotations

import dataclasses
import struct
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from minibroker.protocol.framing import BODY_BUFFER_MIN, READ_AHEAD, RECYCLE_MAX, FrameDecoder
from minibroker.protocol.messages import MalformedRequestError, api_schema, decode_request, parse_header
from minibroker.protocol.produce_request import FIRST_VERSION, LAST_VERSION, ProduceRequest
from minibroker.server import READ_SIZE
from tests.support.fuzzing import fuzz_settings, header, hostile_bodies, valid_bodies
from tests.support.frame_corpus import captured, read_corpus
from tests.support.produce_wire import produce_request

VERSIONS = range(FIRST_VERSION, LAST_VERSION + 1)


def fields(request) -> tuple:
    """Everything a Produce request says, in plain values (kio's objects or ours)."""
    return (
        request.transactional_id, request.acks, request.timeout,
        tuple((getattr(t, "name", None), getattr(t, "topic_id", None),
               tuple((p.index, None if p.records is None else bytes(p.records)) for p in t.partition_data))
              for t in request.topic_data),
    )


def both(frame: bytes):
    """(ours, kio's): each (fields, trailing) or the MalformedRequestError it raised."""
    version = struct.unpack_from(">h", frame, 2)[0]
    schema = api_schema(0, version)
    assert schema.decode is not None
    offset = parse_header(frame, schema.flexible).size
    out = []
    for s in (schema, dataclasses.replace(schema, decode=None)):
        try:
            request, trailing = decode_request(s, frame, offset)
            out.append((fields(request), trailing))
        except MalformedRequestError as exc:
            out.append(exc)
    return out


# The framing layer hands a body over as bytes (read-ahead) or as a bytearray (its recycled receive
# buffer, for bodies past the read-ahead); a decoder must read both, and a memoryview too.
BUFFER_TYPES = (bytes, bytearray, memoryview)


def assert_same(frame: bytes) -> tuple | None:
    """Ours against kio's on `frame` as bytes; ours again on it as every other buffer type, with the
    same answer."""
    ours, kio = both(frame)
    if isinstance(kio, MalformedRequestError):
        assert isinstance(ours, MalformedRequestError), f"kio refused ({kio}); ours decoded {ours}"
    else:
        assert not isinstance(ours, MalformedRequestError), f"ours refused ({ours}); kio decoded {kio}"
        assert ours == kio
    for kind in BUFFER_TYPES[1:]:
        again = ours_on(kind(frame))
        assert repr(again) == repr(ours), f"as {kind.__name__}: {again!r} where bytes gave {ours!r}"
    return None if isinstance(ours, MalformedRequestError) else ours


def ours_on(frame) -> tuple | MalformedRequestError:
    """Our decoder's (fields, trailing) on `frame` of any buffer type, or the error it raised."""
    version = struct.unpack_from(">h", frame, 2)[0]
    schema = api_schema(0, version)
    try:
        request, trailing = decode_request(schema, frame, parse_header(frame, schema.flexible).size)
    except MalformedRequestError as exc:
        return exc
    return fields(request), trailing


def test_every_version_the_broker_serves_has_the_decoder():
    from minibroker.handlers import load_all

    produce = load_all()[0]
    assert (produce.min_version, produce.max_version) == (FIRST_VERSION, LAST_VERSION)
    assert all(api_schema(0, v).decode is not None for v in VERSIONS)


def test_real_clients_produce_frames_decode_as_kio_decodes_them():
    seen = set()
    for client, directory in captured().items():
        index, frames = read_corpus(directory)
        for entry, frame in zip(index["frames"], frames):
            if entry["api_key"] != 0:
                continue
            decoded = assert_same(frame)
            assert decoded is not None, f"{client}: a captured Produce frame was refused"
            assert any(p[1] for t in decoded[0][3] for p in t[2]), "a captured Produce carried no records"
            seen.add((client, entry["api_version"]))
    # Java sends v13 (topic ids, flexible); librdkafka, kafka-python and aiokafka older ones.
    assert {v for _, v in seen} >= {13}, seen
    assert len({c for c, _ in seen}) >= 3, seen


def test_records_are_views_of_the_frame_not_copies():
    for directory in captured().values():
        index, frames = read_corpus(directory)
        frame = next(f for e, f in zip(index["frames"], frames) if e["api_key"] == 0)
        schema = api_schema(0, struct.unpack_from(">h", frame, 2)[0])
        request, _ = decode_request(schema, frame, parse_header(frame, schema.flexible).size)
        assert isinstance(request, ProduceRequest)
        records = request.topic_data[0].partition_data[0].records
        assert isinstance(records, memoryview) and records.obj is frame


@pytest.mark.parametrize("version", VERSIONS)
@fuzz_settings(60)
@given(data=st.data())
def test_generated_requests_decode_as_kio_decodes_them(version, data):
    body = data.draw(valid_bodies(0, version))
    trailing = data.draw(st.sampled_from([b"", b"", b"\x00\x01\x02"]))
    assert assert_same(header(0, version, 7) + body + trailing) is not None


@pytest.mark.parametrize("version", VERSIONS)
@fuzz_settings(150)
@given(data=st.data())
def test_hostile_requests_are_refused_exactly_when_kio_and_the_guard_refuse_them(version, data):
    assert_same(header(0, version, 7) + data.draw(hostile_bodies(0, version)))


def _flexible_body(tagged: bytes, name: str = "t") -> bytes:
    """Produce v9: transactional_id null, acks -1, timeout 1000, one topic of one null partition,
    `tagged` as the partition's tagged section."""
    encoded = name.encode()
    return (b"\x00" + struct.pack(">hi", -1, 1000) + b"\x02" + bytes([len(encoded) + 1]) + encoded
            + b"\x02" + struct.pack(">i", 0) + b"\x00" + tagged + b"\x00" + b"\x00")


def test_unknown_tagged_fields_are_skipped_at_every_level():
    frame = header(0, 9, 1) + _flexible_body(b"\x02\x05\x02ab\x07\x00")
    decoded = assert_same(frame)
    assert decoded == (((None, -1, decoded[0][2], (("t", None, ((0, None),)),)), 0))


@pytest.mark.parametrize("tagged, why", [
    (b"\x01\x05\x09ab", "a tagged field longer than the bytes remaining"),
    (b"\x7f", "a tagged-field count the bytes cannot hold"),
    (b"\x01\xff\xff\xff\xff\xff\x01\x00", "a varint over 5 bytes"),
])
def test_bad_tagged_sections_are_refused(tagged, why):
    ours, kio = both(header(0, 9, 1) + _flexible_body(tagged))
    assert isinstance(ours, MalformedRequestError) and isinstance(kio, MalformedRequestError), why


def test_a_topic_name_that_is_not_utf8_is_refused_as_kio_refuses_it():
    ours, kio = both(header(0, 9, 1) + _flexible_body(b"\x00", "t").replace(b"\x02t", b"\x02\xff"))
    assert isinstance(ours, MalformedRequestError) and isinstance(kio, MalformedRequestError)
    assert "UTF-8" in str(ours)


def test_an_array_count_is_checked_before_any_element_is_read():
    body = b"\xff\xff" + struct.pack(">hi", 1, 0) + struct.pack(">i", 0x7FFFFFFF)
    ours, kio = both(header(0, 3, 1) + body)
    assert isinstance(ours, MalformedRequestError) and isinstance(kio, MalformedRequestError)
    assert "2147483647 element(s) of at least 6 byte(s)" in str(ours)


def test_v13_names_topics_by_id_and_the_zero_id_reads_as_none():
    topic = uuid.uuid4()
    for topic_id, expected in ((topic.bytes, topic), (bytes(16), None)):
        body = (b"\x00" + struct.pack(">hi", 1, 5) + b"\x02" + topic_id + b"\x02" + struct.pack(">i", 3)
                + b"\x00\x00\x00\x00")
        decoded = assert_same(header(0, 13, 1) + body)
        assert decoded[0][3] == ((None, expected, ((3, None),)),)


# ---- real frames through the real framing layer, at sizes on both sides of each threshold -----------

# Request sizes (header and body) around each threshold of minibroker.protocol.framing as the server
# drives it: a first read of 64 KiB holds a whole frame of up to 65532 bytes; a body of BODY_BUFFER_MIN
# or more is received in place (a bytearray); that buffer starts at most READ_AHEAD beyond the bytes
# received and grows past it; a frame of up to RECYCLE_MAX is kept for the next large body.
THRESHOLDS = (65536 - 4, BODY_BUFFER_MIN, READ_AHEAD, RECYCLE_MAX)
THRESHOLD_SIZES = sorted({size + d for size in THRESHOLDS for d in (-1, 0, 1)})


def through_framing(decoder: FrameDecoder, data: bytes) -> bytes | bytearray:
    """One frame out of `decoder` fed `data` (a size prefix and a request) the way the server's
    connection loop feeds it (minibroker.server: reads of at least 64 KiB as chunks until the
    decoder offers a buffer of the frame's own, then received into that)."""
    position = 0
    while (frame := decoder.next_frame()) is None:
        target = decoder.receive_buffer()
        if target is not None:
            count = min(len(target), len(data) - position)
            target[:count] = data[position:position + count]
            del target
            decoder.received_into(count)
        else:
            count = min(READ_SIZE, max(decoder.wants, 65536), len(data) - position)
            decoder.receive_data(data[position:position + count])
        position += count
    assert position == len(data)
    return frame


@pytest.mark.parametrize("version", VERSIONS)
def test_frames_through_the_framing_layer_at_every_threshold_decode_as_kio_decodes_them(version):
    """Produce requests of each size around each threshold, one connection's decoder taking them in
    ascending then descending order (so that recycled buffers are cut down and reused): each frame
    comes out as the buffer type its size means, and decodes as kio decodes its bytes."""
    topic_id = uuid.UUID(int=version + 1)
    requests = {size: produce_request(version, size, "threshold-topic", topic_id, fill=size)
                for size in THRESHOLD_SIZES}
    decoder = FrameDecoder()
    for size in THRESHOLD_SIZES + THRESHOLD_SIZES[::-1]:
        request, batch = requests[size]
        frame = through_framing(decoder, struct.pack(">i", size) + request)
        assert type(frame) is (bytearray if size >= BODY_BUFFER_MIN else bytes), size
        decoded = ours_on(frame)
        assert not isinstance(decoded, MalformedRequestError), f"{size} bytes: {decoded}"
        assert decoded == both(request)[1], f"{size} bytes: not kio's reading"
        assert decoded[0][3] == (((None, topic_id) if version >= 13 else ("threshold-topic", None))
                                 + (((0, batch),),),)
        decoder.recycle(frame)
        del frame


@pytest.mark.parametrize("kind", BUFFER_TYPES)
def test_records_are_validated_where_they_lie_whatever_the_frame_is_a_view_of(kind):
    """The records' `origin` (where validation walks them, uncopied) is the frame they lie in and their
    position there, also when the frame is a view into a larger buffer (a position counted from the
    view's start is not one in the buffer it views)."""
    from minibroker.protocol.records import check_produce_records

    request, batch = produce_request(9, 300, "t")
    for before in (b"", b"\x00" * 7, bytes(range(256)) * 3):
        whole = kind(before + request + b"\xff" * 5)
        frame = memoryview(whole)[len(before):len(before) + len(request)] if before else whole
        schema = api_schema(0, 9)
        decoded, _ = decode_request(schema, frame, parse_header(frame, schema.flexible).size)
        (partition,) = decoded.topic_data[0].partition_data
        assert bytes(partition.records) == batch
        source, at = partition.origin
        assert bytes(source[at:at + len(batch)]) == batch
        header = check_produce_records(partition.records, origin=partition.origin)
        assert header.records_count == 1 and header.size == len(batch)
