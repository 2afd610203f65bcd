"""Frame splitting: any chunking of a byte stream yields the same frames; bad sizes are refused
before anything is buffered; a strict prefix of a frame never yields a frame."""

import struct

import pytest
from hypothesis import given, settings, strategies as st

import minibroker.protocol.framing as framing
from minibroker.protocol.framing import FrameDecoder, FrameError, frame

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


def _receive_in_place(stream: bytes, reads: list[int], body_min: int, read_ahead: int,
                      allocations: list[tuple[int, int]]) -> list:
    """Feed `stream` as the server does: into `receive_buffer` when it offers one (recv_into: at most
    the read's size), else as a chunk. `allocations` gets (bytes of the frame received, bytes the
    buffer holds beyond them) at each offer."""
    decoder = FrameDecoder(body_buffer_min=body_min, read_ahead=read_ahead)
    got: list = []
    position = i = 0
    body_start = 4  # where the body of the frame in progress starts in the stream
    while position < len(stream):
        size = reads[i % len(reads)]
        i += 1
        target = decoder.receive_buffer()
        if target is not None:
            allocations.append((position - body_start, len(target)))
            count = min(size, len(target), len(stream) - position)
            target[:count] = stream[position : position + count]
            decoder.received_into(count)
        else:
            count = size
            decoder.receive_data(stream[position : position + count])
        position += count
        while (f := decoder.next_frame()) is not None:
            got.append(f)
            body_start += len(f) + 4
    assert decoder.at_frame_boundary()
    return got


@settings(max_examples=80, deadline=None)
@given(st.lists(st.binary(max_size=400), min_size=1, max_size=6),
       st.lists(st.integers(min_value=1, max_value=300), min_size=1, max_size=6),
       st.integers(min_value=0, max_value=120), st.integers(min_value=1, max_value=90))
def test_large_bodies_received_in_place_are_the_same_frames(bodies, reads, body_min, read_ahead):
    """A body of `body_buffer_min` bytes and up is received into a buffer of its own, whatever the
    reads: the frames are the same bytes as when assembled from chunks, nothing of the next frame
    lands in the buffer, and the buffer never holds more than `read_ahead` (or, once more arrived,
    what arrived) beyond the bytes received: a declared size is no allocation."""
    stream = b"".join(frame(b) for b in bodies)
    allocations: list[tuple[int, int]] = []
    got = _receive_in_place(stream, reads, body_min, read_ahead, allocations)
    assert [bytes(f) for f in got] == bodies
    assert all(len(f) >= body_min for f in got if type(f) is bytearray)
    assert all(ahead <= max(received, read_ahead) for received, ahead in allocations)
    if all(size < len(b) for b in bodies if len(b) >= body_min for size in reads):
        # every large body needed more than one read: each was received in place
        assert sum(type(f) is bytearray for f in got) == sum(len(b) >= body_min and len(b) > 0 for b in bodies)


def test_a_body_in_place_takes_bytes_given_as_chunks_too():
    """receive_data while a body is received in place (a stream that is not a socket) fills the
    body and keeps what follows it for the next frame."""
    decoder = FrameDecoder(body_buffer_min=4, read_ahead=3)
    decoder.receive_data(frame(b"abcdefgh")[:6])
    assert decoder.next_frame() is None
    target = decoder.receive_buffer()
    assert target is not None and len(target) == 3  # 2 bytes received, 3 ahead
    target[:1] = b"c"
    decoder.received_into(1)
    decoder.receive_data(b"defgh" + frame(b"next"))
    assert decoder.next_frame() == bytearray(b"abcdefgh")
    assert decoder.next_frame() == b"next"
    assert decoder.at_frame_boundary()


@pytest.fixture(params=["c-api", "portable"])
def allocation(request, monkeypatch):
    """Buffers made and resized through CPython's C API without writing their new bytes, and the
    portable way (zero-filled) where there is no such API: the same frames and the same memory kept."""
    if request.param == "portable":
        monkeypatch.setattr(framing, "_from_size", None)
        monkeypatch.setattr(framing, "_resize", None)
    return request.param


def test_a_buffer_not_zero_filled_is_overwritten_before_it_is_a_frame(allocation):
    """A new buffer holds whatever its memory held (the C API's): what the frame shows of it is only
    what was received into it."""
    decoder = FrameDecoder(body_buffer_min=8, read_ahead=4096)
    for fill in (b"x", b"y"):
        garbage = bytearray(fill * 5000)  # freed memory the next buffer may be made of
        del garbage
        body = bytes(range(256)) * 12
        got, offered = _large_frame_in_place(decoder, body)
        assert offered == len(body) - 2 and bytes(got) == body


def _large_frame_in_place(decoder: FrameDecoder, body: bytes) -> tuple[bytes | bytearray, int]:
    """`body` as a frame received in place (its first 2 bytes as a chunk with the size prefix, the
    rest into the buffers offered): the frame, and how many bytes the buffer first offered."""
    data = frame(body)
    decoder.receive_data(data[:6])
    position = 6
    offered = -1
    while (got := decoder.next_frame()) is None:
        target = decoder.receive_buffer()
        assert target is not None
        if offered < 0:
            offered = len(target)
        count = min(len(target), len(data) - position)
        target[:count] = data[position : position + count]
        decoder.received_into(count)
        position += count
        del target
    assert got == body
    return got, offered


def test_a_recycled_frame_takes_the_next_large_body_when_nothing_holds_it(allocation):
    """A recycled frame's memory is used whole for the next body (more than the read-ahead of 16
    would offer); not while a memoryview of it or another reference is alive."""
    decoder = FrameDecoder(body_buffer_min=8, read_ahead=16)
    first, offered = _large_frame_in_place(decoder, b"a" * 100)
    assert offered == 16  # nothing kept yet: 2 bytes in, the read-ahead beyond them
    decoder.recycle(first)
    del first
    second, offered = _large_frame_in_place(decoder, b"b" * 90)
    assert offered == 88  # the kept 100 bytes, cut to the 90 of this body, 2 of them in

    kept = memoryview(second)[10:20]  # a view of it is still alive: not reused
    decoder.recycle(second)
    third, offered = _large_frame_in_place(decoder, b"c" * 95)
    assert offered == 16 and kept.tobytes() == b"b" * 10

    also = third  # a second reference to it: not reused either
    decoder.recycle(third)
    fourth, offered = _large_frame_in_place(decoder, b"d" * 120)
    assert offered == 16 and fourth is not also and also == b"c" * 95


def test_a_connection_keeps_its_largest_buffer_whatever_the_order_of_sizes(allocation):
    """A body under half of the kept memory gets a buffer of its own rather than cut that memory
    down (CPython would give it back and the next large body would fault in fresh pages); of two
    recycled frames the larger memory is kept; the kept memory is offered whole again, however
    short the last body in it was."""
    decoder = FrameDecoder(body_buffer_min=8, read_ahead=16)
    big, _ = _large_frame_in_place(decoder, b"a" * 100)
    decoder.recycle(big)
    del big
    small, offered = _large_frame_in_place(decoder, b"b" * 40)
    assert offered == 16  # a buffer of its own: the read-ahead beyond the 2 bytes in
    decoder.recycle(small)  # smaller than the memory kept: not kept over it
    del small
    shorter, offered = _large_frame_in_place(decoder, b"c" * 60)
    assert offered == 58  # the 100 bytes kept, cut to this body
    capacity = framing._capacity(shorter)
    assert capacity >= 100
    decoder.recycle(shorter)
    del shorter
    longer, offered = _large_frame_in_place(decoder, b"d" * 95)
    assert offered == 93  # the same memory offered up to this body again, not only the 60 it last held
    assert framing._capacity(longer) == capacity


def test_a_frame_over_recycle_max_is_not_kept(monkeypatch, allocation):
    """A connection keeps at most RECYCLE_MAX bytes between requests: a larger frame's memory is
    freed; a kept one is used whole for the next body (more than the read-ahead would allocate)."""
    import minibroker.protocol.framing as framing

    monkeypatch.setattr(framing, "RECYCLE_MAX", 100)
    decoder = FrameDecoder(body_buffer_min=8, read_ahead=16)

    def first_offer(body: bytes) -> int:
        got, offered = _large_frame_in_place(decoder, body)
        decoder.recycle(got)
        return offered

    assert first_offer(b"a" * 101) == 16  # nothing kept yet: the read-ahead
    assert first_offer(b"b" * 50) == 16  # 101 bytes were over RECYCLE_MAX: not kept
    assert first_offer(b"c" * 90) == 48  # the kept 50 bytes, used whole
