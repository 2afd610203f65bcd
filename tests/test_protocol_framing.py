"""Frame splitting: any chunking of a byte stream yields the same frames; bad sizes are refused
before anything is buffered; a strict prefix of a frame never yields a frame."""

import struct

import pytest
from hypothesis import given, strategies as st

from protocol.framing import FrameDecoder, FrameError, frame

payloads = st.lists(st.binary(max_size=300), max_size=8)


@given(payloads, st.lists(st.integers(min_value=1, max_value=64), min_size=1))
def test_any_chunking_yields_the_same_frames(bodies, chunk_sizes):
    stream = b"".join(frame(b) for b in bodies)
    decoder = FrameDecoder()
    got = []
    position = 0
    i = 0
    while position < len(stream):
        size = chunk_sizes[i % len(chunk_sizes)]
        decoder.receive_data(stream[position : position + size])
        position += size
        i += 1
        while (f := decoder.next_frame()) is not None:
            got.append(f)
    assert got == bodies
    assert decoder.at_frame_boundary()


@given(st.binary(min_size=0, max_size=200))
def test_every_strict_prefix_is_incomplete_not_an_error(body):
    data = frame(body)
    for cut in range(len(data)):
        decoder = FrameDecoder()
        decoder.receive_data(data[:cut])
        assert decoder.next_frame() is None
        assert decoder.at_frame_boundary() == (cut == 0)


def test_negative_size_is_refused():
    decoder = FrameDecoder()
    decoder.receive_data(struct.pack(">i", -1))
    with pytest.raises(FrameError, match="negative"):
        decoder.next_frame()


def test_oversized_frame_is_refused_from_its_prefix_alone():
    decoder = FrameDecoder(max_bytes=1000)
    decoder.receive_data(struct.pack(">i", 1001))
    with pytest.raises(FrameError, match="socket.request.max.bytes"):
        decoder.next_frame()
    # Exactly at the limit is fine.
    ok = FrameDecoder(max_bytes=1000)
    ok.receive_data(struct.pack(">i", 1000) + b"x" * 1000)
    assert ok.next_frame() == b"x" * 1000


def test_wants_asks_for_the_rest_of_the_frame():
    decoder = FrameDecoder()
    assert decoder.wants == 4
    decoder.receive_data(struct.pack(">i", 10) + b"abc")
    assert decoder.next_frame() is None
    assert decoder.wants == 7
