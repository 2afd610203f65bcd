"""Fetch responses with their records spliced in uncopied (minibroker.protocol.fetch_response) are byte for
byte kio's encoding of the same response, in every Fetch version the broker serves, and go out
whole over a real socket however the kernel splits the vectored send (minibroker.server.send_frame).
"""

from __future__ import annotations

import os
import socket
import uuid

import pytest
import trio
from hypothesis import given, settings, strategies as st

from minibroker.handlers import load_all
from minibroker.server import send_frame
from minibroker.protocol.entities import build
from minibroker.protocol.fetch_response import SPLICE_MIN_BYTES, FrameParts, encode_fetch_response
from minibroker.protocol.messages import api_schema, encode_response

FETCH = load_all()[1]
VERSIONS = range(FETCH.min_version, FETCH.max_version + 1)


def partition(index: int, records: bytes | None, code: int = 0, aborted=()) -> dict:
    return {"partition_index": index, "error_code": code, "high_watermark": 10_000, "last_stable_offset": 9_000,
            "log_start_offset": 3, "aborted_transactions": aborted, "preferred_read_replica": -1,
            "records": records}


def body(topics: list[list[dict]], throttle_ms: int = 0) -> dict:
    return {"throttle_time": throttle_ms, "error_code": 0, "session_id": 0, "responses": [
        {"topic": f"topic-{i}", "topic_id": uuid.UUID(int=i + 1), "partitions": parts}
        for i, parts in enumerate(topics)]}


def kio_encoding(version: int, response: dict, correlation_id: int = 42) -> bytes:
    schema = api_schema(1, version)
    return encode_response(schema, correlation_id, build(schema.response, response))


@pytest.mark.parametrize("version", VERSIONS)
def test_spliced_frame_is_kios_encoding_in_every_version(version):
    large = [os.urandom(size) for size in (SPLICE_MIN_BYTES, 200_000, 1_048_576 + 17)]
    response = body([
        [partition(0, large[0]), partition(1, b"small" * 10), partition(2, None, code=1),
         partition(3, b"", aborted=[{"producer_id": 7, "first_offset": 5}])],
        [partition(0, large[1]), partition(1, large[2], aborted=None)],
    ], throttle_ms=250)
    frame = encode_fetch_response(api_schema(1, version), 42, response)
    assert isinstance(frame, FrameParts)
    assert bytes(frame) == kio_encoding(version, response)
    assert len(frame) == len(kio_encoding(version, response))
    # The large records are sent from the buffers they were read into: never copied.
    assert [part for part in frame if any(part is records for records in large)] == large


@pytest.mark.parametrize("version", [FETCH.min_version, 11, 12, FETCH.max_version])
def test_responses_without_large_records_stay_one_buffer(version):
    response = body([[partition(0, b"x" * (SPLICE_MIN_BYTES - 1)), partition(1, None, code=3)]])
    frame = encode_fetch_response(api_schema(1, version), 9, response)
    assert type(frame) is bytes and frame == kio_encoding(version, response, 9)


@settings(max_examples=30, deadline=None)
@given(st.sampled_from(list(VERSIONS)),
       st.lists(st.lists(st.one_of(st.none(), st.integers(0, 70_000)), min_size=1, max_size=4), min_size=1,
                max_size=3))
def test_any_mix_of_record_sizes_encodes_as_kio_does(version, sizes):
    response = body([[partition(i, None if size is None else bytes([i]) * size) for i, size in enumerate(topic)]
                     for topic in sizes])
    assert bytes(encode_fetch_response(api_schema(1, version), 1, response)) == kio_encoding(version, response, 1)


def test_send_frame_delivers_every_byte_through_partial_sends():
    """A small send buffer makes the kernel take a few kilobytes per sendmsg: the rest of a buffer
    sent in part, and the buffers after it, follow in order."""
    large = [os.urandom(300_000), os.urandom(SPLICE_MIN_BYTES + 5)]
    frame = encode_fetch_response(api_schema(1, 12), 5, body([[partition(0, large[0]), partition(1, large[1])]]))
    expected = bytes(frame)

    async def main():
        a, b = trio.socket.socketpair()
        a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
        received = bytearray()
        async with trio.SocketStream(a) as sender, trio.SocketStream(b) as receiver:
            async def receive():
                while len(received) < len(expected):
                    received.extend(await receiver.receive_some(5000))

            async with trio.open_nursery() as nursery:
                nursery.start_soon(receive)
                await send_frame(sender, frame)
        assert bytes(received) == expected

    trio.run(main)


@pytest.mark.parametrize("version", VERSIONS)
def test_records_of_every_buffer_type_and_length_prefix_width_splice_as_kio_encodes(version):
    """The records a partition carries may be bytes (a read of the log), a bytearray or a memoryview;
    their length prefix (a compact varint of length + 1 from v12) takes 3 bytes from SPLICE_MIN_BYTES
    and 4 from 2 MiB - 1: each is spliced as itself, its prefix as kio writes it."""
    sizes = [SPLICE_MIN_BYTES - 1, SPLICE_MIN_BYTES, (1 << 21) - 2, (1 << 21) - 1]
    kinds = [bytes, bytearray, lambda data: memoryview(b"<" + data + b">")[1:-1]]
    records = [kind(bytes([i]) * size) for i, (size, kind) in enumerate((s, k) for s in sizes for k in kinds)]
    response = body([[partition(i, r) for i, r in enumerate(records)]])
    frame = encode_fetch_response(api_schema(1, version), 3, response)
    plain = body([[partition(i, bytes(r)) for i, r in enumerate(records)]])
    assert bytes(frame) == kio_encoding(version, plain, 3)
    spliced = [part for part in frame if any(part is r for r in records)]
    assert [id(part) for part in spliced] == [id(r) for r in records if len(r) >= SPLICE_MIN_BYTES]


def test_send_frame_sends_more_buffers_than_one_sendmsg_takes():
    """A response with more record buffers than MAX_IOV goes out in several vectored sends, whole and
    in order."""
    from minibroker.server import MAX_IOV

    count = MAX_IOV + 30  # each spliced partition is two buffers or more: well over MAX_IOV
    records = [bytes([i % 256]) * SPLICE_MIN_BYTES for i in range(count)]
    frame = encode_fetch_response(api_schema(1, 12), 6, body([[partition(i, r) for i, r in enumerate(records)]]))
    assert isinstance(frame, FrameParts) and len(frame.parts) > MAX_IOV
    expected = bytes(frame)

    async def main():
        a, b = trio.socket.socketpair()
        received = bytearray()
        async with trio.SocketStream(a) as sender, trio.SocketStream(b) as receiver:
            async def receive():
                while len(received) < len(expected):
                    received.extend(await receiver.receive_some(1 << 16))

            async with trio.open_nursery() as nursery:
                nursery.start_soon(receive)
                await send_frame(sender, frame)
        assert bytes(received) == expected

    trio.run(main)
