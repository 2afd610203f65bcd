"""Frame splitting: any chunking of a byte stream yields the same frames; bad sizes are refused
before anything is buffered; a strict prefix of a frame never yields a frame."""

import struct

import pytest
from hypothesis import given, settings, strategies as st

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


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=70_000), min_size=1, max_size=5),
       st.lists(st.one_of(st.integers(min_value=1, max_value=7), st.integers(min_value=500, max_value=200_000)),
                min_size=1, max_size=6).filter(lambda sizes: max(sizes) >= 500))
def test_large_frames_split_across_reads_of_any_size(sizes, chunk_sizes):
    """Frames spanning several reads, several frames in one read, a read ending mid-prefix: the
    frames come out whole and in order, with `wants` and `buffered` telling the truth between."""
    bodies = [bytes([i % 251]) * size for i, size in enumerate(sizes)]
    stream = b"".join(frame(b) for b in bodies)
    decoder = FrameDecoder()
    got, position, i = [], 0, 0
    while position < len(stream):
        chunk = stream[position:position + chunk_sizes[i % len(chunk_sizes)]]
        position, i = position + len(chunk), i + 1
        decoder.receive_data(chunk)
        while (f := decoder.next_frame()) is not None:
            got.append(f)
        assert decoder.buffered == position - sum(len(b) + 4 for b in got)
        if position < len(stream):
            assert decoder.wants >= 1
    assert got == bodies
    assert all(type(f) is bytes for f in got)
    assert decoder.at_frame_boundary()


def test_a_reused_mutable_buffer_does_not_change_frames_already_received():
    """The decoder keeps received chunks without copying them, except buffers the caller may
    overwrite (a bytearray or memoryview read into again): those are copied."""
    buffer = bytearray(frame(b"hello"))
    decoder = FrameDecoder()
    decoder.receive_data(buffer[:6])  # the prefix and 'he'
    view = memoryview(buffer)
    decoder.receive_data(view[6:])
    buffer[4:] = b"XXXXX"
    assert decoder.next_frame() == b"hello"


def test_wants_counts_from_the_rest_of_a_frame_spread_over_reads():
    decoder = FrameDecoder()
    decoder.receive_data(struct.pack(">i", 100_000)[:3])
    assert decoder.next_frame() is None and decoder.wants == 1 and decoder.buffered == 3
    decoder.receive_data(struct.pack(">i", 100_000)[3:] + b"a" * 40_000)
    assert decoder.next_frame() is None and decoder.wants == 60_000 and decoder.buffered == 40_004
    decoder.receive_data(b"b" * 60_000 + frame(b"next")[:2])
    assert decoder.next_frame() == b"a" * 40_000 + b"b" * 60_000
    assert decoder.next_frame() is None and not decoder.at_frame_boundary()
    decoder.receive_data(frame(b"next")[2:])
    assert decoder.next_frame() == b"next" and decoder.at_frame_boundary()
