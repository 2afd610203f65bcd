"""Kafka frames: an int32 size, then that many bytes. Sans-I/O, in the manner of h11.

The shell feeds whatever bytes the socket gave with `receive_data` and takes whole frames with
`next_frame`. The size prefix is checked against the limit (`socket.request.max.bytes`) before a single
byte of the body is buffered, so a hostile prefix costs nothing but the connection.
"""

from __future__ import annotations

import struct

SIZE = struct.Struct(">i")
DEFAULT_MAX_FRAME_BYTES = 104857600  # socket.request.max.bytes


class FrameError(Exception):
    """The peer sent bytes that cannot be a Kafka frame; the connection must be closed."""


class FrameDecoder:
    """Splits a byte stream into frames (bodies without their size prefix)."""

    __slots__ = ("_buffer", "_max_bytes", "_limit_name", "_needed")

    def __init__(self, max_bytes: int = DEFAULT_MAX_FRAME_BYTES, limit_name: str = "socket.request.max.bytes") -> None:
        self._buffer = bytearray()
        self._max_bytes = max_bytes
        self._limit_name = limit_name
        self._needed = -1  # body size of the frame being assembled, -1 while the prefix is unread

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
        self._buffer += data

    @property
    def buffered(self) -> int:
        return len(self._buffer)

    @property
    def wants(self) -> int:
        """How many more bytes the frame in progress needs (at least 1), for sizing reads."""
        if self._needed < 0:
            return max(1, SIZE.size - len(self._buffer))
        return max(1, SIZE.size + self._needed - len(self._buffer))

    def next_frame(self) -> bytes | None:
        """Return the next whole frame body, or None until more data arrives.

        Raises FrameError for a negative size or one over the limit.
        """
        buffer = self._buffer
        if self._needed < 0:
            if len(buffer) < SIZE.size:
                return None
            (size,) = SIZE.unpack_from(buffer, 0)
            if size < 0:
                raise FrameError(f"negative frame size {size}")
            if size > self._max_bytes:
                raise FrameError(f"frame size {size} exceeds {self._limit_name} ({self._max_bytes})")
            self._needed = size
        end = SIZE.size + self._needed
        if len(buffer) < end:
            return None
        frame = bytes(memoryview(buffer)[SIZE.size : end])
        del buffer[:end]
        self._needed = -1
        return frame

    def at_frame_boundary(self) -> bool:
        """True when no partial frame is buffered (a clean place for the peer to hang up)."""
        return not self._buffer


def frame(payload: bytes | bytearray) -> bytes:
    """Prefix `payload` with its size."""
    return SIZE.pack(len(payload)) + payload
