"""Kafka frames: an int32 size, then that many bytes. Sans-I/O, in the manner of h11.

The shell feeds whatever bytes the socket gave with `receive_data` and takes whole frames with
`next_frame`. The size prefix is checked against the limit (`socket.request.max.bytes`) before a single
byte of the body is buffered, so a hostile prefix costs nothing but the connection.
"""

from __future__ import annotations

import struct
import sys
from collections import deque
from typing import Any

SIZE = struct.Struct(">i")
DEFAULT_MAX_FRAME_BYTES = 104857600  # socket.request.max.bytes
# A frame body at least this large is received into a buffer of its own (`receive_buffer`) instead
# of being assembled from the chunks reads return.
BODY_BUFFER_MIN = 1 << 16
# That buffer starts at most this far ahead of the bytes received and grows as they come: a declared
# size is not memory until the peer sends it.
READ_AHEAD = 1 << 20
# A frame received in place is kept for the next large body only up to this size, so that a connection
# holds at most this much between requests (Java's max.request.size and librdkafka's batches are 1 MiB).
RECYCLE_MAX = 2 << 20
_EMPTY_BYTEARRAY_SIZE = sys.getsizeof(bytearray())

# CPython's C API makes and resizes a bytearray without writing its new bytes:
# PyByteArray_FromStringAndSize(NULL, n) and PyByteArray_Resize. A buffer about to be received into
# need not be zero-filled first (for a Produce request a memset of half a megabyte); elsewhere (no
# ctypes, not CPython) it is.
_from_size: Any
_resize: Any
try:
    import ctypes

    _from_size = ctypes.pythonapi.PyByteArray_FromStringAndSize
    _from_size.restype = ctypes.py_object
    _from_size.argtypes = (ctypes.c_void_p, ctypes.c_ssize_t)
    _resize = ctypes.pythonapi.PyByteArray_Resize  # raises (PyDLL) when the bytearray is exported
    _resize.restype = ctypes.c_int
    _resize.argtypes = (ctypes.py_object, ctypes.c_ssize_t)
except (ImportError, AttributeError):
    _from_size = _resize = None


def _unfilled(size: int) -> bytearray:
    """A bytearray of `size` bytes that the caller overwrites before anything reads them."""
    return _from_size(None, size) if _from_size is not None else bytearray(size)


def _cut_to(buffer: bytearray, size: int) -> None:
    """Make `buffer` `size` bytes long, at most its capacity and at least half of it (so its memory
    stays), the bytes it gains unwritten (the caller overwrites them)."""
    if _resize is not None:
        _resize(buffer, size)
    elif len(buffer) > size:
        del buffer[size:]
    else:
        buffer.extend(bytes(size - len(buffer)))


class FrameError(Exception):
    """The peer sent bytes that cannot be a Kafka frame; the connection must be closed. `size`: the
    frame size refused, when a size was (its bytes may say what the peer speaks instead)."""

    def __init__(self, message: str, size: int | None = None) -> None:
        super().__init__(message)
        self.size = size


class FrameDecoder:
    """Splits a byte stream into frames (bodies without their size prefix).

    The bytes received are kept as the chunks they came in (views into them once partly used), not
    appended to one growing buffer: a frame is then one copy of its bytes (a `b"".join` of the
    chunks it spans, or a slice of the one chunk holding it), and none when a chunk is exactly one
    frame body. Appending to a bytearray and cutting the frame out of it cost two copies of every
    byte, plus the buffer's reallocations as it grew (a tenth of the broker's CPU under
    a produce load).

    A large body (BODY_BUFFER_MIN and up: Produce requests) need not be copied at all: once its
    size prefix is read, `receive_buffer` offers the rest of a bytearray of its own for the shell to
    receive into (`socket.recv_into`, then `received_into`), and that bytearray is the frame. Such
    reads stop at the frame's end, so nothing of the next frame lands in it. The buffer is allocated
    when first asked for (after the shell has taken the frame's bytes from queued.max.request.bytes),
    at most READ_AHEAD beyond the bytes received, and grows as they arrive, never to more than twice
    them (or READ_AHEAD beyond them). Once the shell is done with such a frame, `recycle` keeps its
    memory (up to RECYCLE_MAX) for the next large body when nothing else holds it: no allocation, no
    zero-filling, no fresh pages to fault in for every request (on this project's VMs a fresh page
    costs a fault in the hypervisor too); memory held already is used whole, up to the body's size.
    A body under half that memory gets a buffer of its own instead (cut down that far, CPython's
    bytearray would give its memory back), and of two recycled frames the larger memory is kept: the
    connection keeps its largest buffer, whatever the order of sizes. (librdkafka's Produce requests
    under a load run from 70 KB to 1 MB; before this, two in five of them faulted in fresh pages.)
    A new buffer, or kept memory lengthened, is not zero-filled where CPython's C API allows
    (`_unfilled`, `_cut_to`): the bytes are received over before the frame is returned (under
    bench_load's four producers, 2.4% less broker CPU per record than a memset of each body)."""

    __slots__ = ("_chunks", "_buffered", "_max_bytes", "_limit_name", "_needed", "_body", "_filled",
                 "_body_min", "_read_ahead", "_spare")

    def __init__(self, max_bytes: int = DEFAULT_MAX_FRAME_BYTES, limit_name: str = "socket.request.max.bytes",
                 body_buffer_min: int = BODY_BUFFER_MIN, read_ahead: int = READ_AHEAD) -> None:
        self._chunks: deque[bytes | memoryview] = deque()
        self._buffered = 0  # bytes in _chunks (after the size prefix, once it is read)
        self._max_bytes = max_bytes
        self._limit_name = limit_name
        self._needed = -1  # body size of the frame being assembled, -1 while the prefix is unread
        self._body: bytearray | None = None  # the large body being received in place (see above)
        self._filled = 0  # bytes of it received
        self._body_min = body_buffer_min
        self._read_ahead = read_ahead
        self._spare: bytearray | None = None  # a recycled frame's memory, for the next large body

    def set_limit(self, max_bytes: int, limit_name: str) -> None:
        """Change the largest frame accepted from the next size prefix on (before SASL
        authentication a connection gets sasl.server.max.receive.size)."""
        self._max_bytes = max_bytes
        self._limit_name = limit_name

    @property
    def pending_size(self) -> int:
        """The declared body size of the frame being assembled; -1 until its prefix is read."""
        return self._needed

    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        if not data:
            return
        if self._body is not None:  # a large body in progress takes what is its own
            take = min(len(data), self._needed - self._filled)
            self._reserve(self._filled + take)
            self._body[self._filled : self._filled + take] = data[:take]
            self._filled += take
            self._buffered += take
            data = data[take:]
            if not data:
                return
        # Kept as it is; a mutable buffer is copied, as the caller may reuse it.
        self._chunks.append(data if isinstance(data, bytes) else bytes(data))
        self._buffered += len(data)

    def receive_buffer(self) -> memoryview | None:
        """Where to receive the next bytes of a large frame body (into which `socket.recv_into` may
        write, then report with `received_into`), or None when the frame in progress is small or
        its size prefix is not read yet (then read a chunk and give it to `receive_data`)."""
        needed = self._needed
        if needed < self._body_min:
            return None
        if self._body is None:  # the bytes buffered so far are all this frame's: move them in
            size = min(needed, self._buffered + self._read_ahead)
            body = self._spare
            if body is not None:
                capacity = _capacity(body)
                if 2 * needed < capacity:
                    body = None  # cut to this size it would give its memory back: kept for a larger body
                else:
                    self._spare = None
                    size = min(needed, max(size, capacity))  # memory held already is used whole
                    if size <= capacity:  # resized in place: no allocation, no fresh pages
                        _cut_to(body, size)
                    else:  # grown, it would be reallocated with its old bytes copied: a new one instead
                        body = None
            if body is None:
                body = _unfilled(size)
            self._body = body
            position = 0
            for chunk in self._chunks:
                body[position : position + len(chunk)] = chunk
                position += len(chunk)
            self._chunks.clear()
            self._filled = position
        elif self._filled == len(self._body):  # all it holds has arrived: grow, at most doubling it
            self._reserve(min(needed, self._filled + max(self._filled, self._read_ahead)))
        return memoryview(self._body)[self._filled :]

    def recycle(self, frame: bytes | bytearray) -> None:
        """The shell is done with `frame` (and drops its own reference next): a frame received in
        place (of at most RECYCLE_MAX bytes) gives its memory to the next large body, unless
        something still holds it: another reference, or a memoryview of it (which holds one)."""
        if type(frame) is bytearray and len(frame) <= RECYCLE_MAX and _refcount(frame) <= _UNSHARED_REFS:
            spare = self._spare
            if spare is None or _capacity(frame) > _capacity(spare):  # the larger memory is kept
                self._spare = frame

    def received_into(self, count: int) -> None:
        """`count` bytes were written at the start of the last `receive_buffer`."""
        self._filled += count
        self._buffered += count

    def _reserve(self, size: int) -> None:
        """Make the body at least `size` bytes: a new buffer with what was received copied in (the
        last `receive_buffer` view may still be alive, so the bytearray cannot be resized)."""
        body = self._body
        assert body is not None
        if len(body) < size:
            grown = _unfilled(size)
            grown[: self._filled] = memoryview(body)[: self._filled]
            self._body = grown

    @property
    def buffered(self) -> int:
        """Bytes received and not yet returned in a frame (a size prefix read counts)."""
        return self._buffered + (SIZE.size if self._needed >= 0 else 0)

    @property
    def wants(self) -> int:
        """How many more bytes the frame in progress needs (at least 1), for sizing reads."""
        if self._needed < 0:
            return max(1, SIZE.size - self._buffered)
        return max(1, self._needed - self._buffered)

    def _take(self, count: int) -> bytes:
        """The next `count` buffered bytes (there are at least that many), as one bytes object."""
        chunks = self._chunks
        self._buffered -= count
        first = chunks[0]
        if len(first) == count:
            chunks.popleft()
            return first if isinstance(first, bytes) else bytes(first)
        if len(first) > count:
            view = first if isinstance(first, memoryview) else memoryview(first)
            chunks[0] = view[count:]
            return bytes(view[:count])
        parts = []
        while count:
            chunk = chunks[0]
            if len(chunk) <= count:
                parts.append(chunks.popleft())
                count -= len(chunk)
            else:
                view = chunk if isinstance(chunk, memoryview) else memoryview(chunk)
                parts.append(view[:count])
                chunks[0] = view[count:]
                count = 0
        return b"".join(parts)

    def next_frame(self) -> bytes | bytearray | None:
        """Return the next whole frame body, or None until more data arrives: bytes, or a bytearray
        when it was received in place (`receive_buffer`).

        Raises FrameError for a negative size or one over the limit.
        """
        if self._body is not None:
            if self._filled < self._needed:
                return None
            body = self._body
            self._body = None
            self._buffered -= self._needed
            self._needed = -1
            return body
        if self._needed < 0:
            if self._buffered < SIZE.size:
                return None
            first = self._chunks[0]
            (size,) = SIZE.unpack_from(first if len(first) >= SIZE.size else self._peek(SIZE.size), 0)
            if size < 0:
                raise FrameError(f"negative frame size {size}")
            if size > self._max_bytes:
                raise FrameError(f"frame size {size} exceeds {self._limit_name} ({self._max_bytes})", size)
            end = SIZE.size + size
            if len(first) >= end:  # the whole frame in the first chunk (small requests): one slice
                if len(first) == end:
                    self._chunks.popleft()
                else:
                    self._chunks[0] = (first if isinstance(first, memoryview) else memoryview(first))[end:]
                self._buffered -= end
                return bytes(first[SIZE.size:end])
            self._take(SIZE.size)
            self._needed = size
        if self._buffered < self._needed:
            return None
        frame = self._take(self._needed) if self._needed else b""
        self._needed = -1
        return frame

    def _peek(self, count: int) -> bytes:
        """The next `count` buffered bytes, left buffered (a size prefix split across chunks)."""
        data = b"".join(self._chunks)
        self._chunks.clear()
        self._chunks.append(data)
        return data[:count]

    def at_frame_boundary(self) -> bool:
        """True when no partial frame is buffered (a clean place for the peer to hang up)."""
        return not self._buffered and self._needed < 0


def _capacity(buffer: bytearray) -> int:
    """The length `buffer` may grow to without a reallocation: CPython's ob_alloc (which __sizeof__
    reports) less its trailing NUL. Cut by less than half, a bytearray keeps that memory."""
    return max(0, sys.getsizeof(buffer) - _EMPTY_BYTEARRAY_SIZE - 1)


def _refcount(obj: object) -> int:
    return sys.getrefcount(obj)


def _calibrate_refs() -> int:
    """What `_refcount` says, called as `recycle` calls it, of an object only its caller holds: the
    interpreter's own references differ between CPython versions (3.14 borrows some)."""
    probe = bytearray(1)
    return _through(probe)


def _through(frame: bytearray) -> int:
    return _refcount(frame)


_UNSHARED_REFS = _calibrate_refs()


def frame(payload: bytes | bytearray) -> bytes:
    """Prefix `payload` with its size."""
    return SIZE.pack(len(payload)) + payload
