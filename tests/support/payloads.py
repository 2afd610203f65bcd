"""Records of any size that every client can write and check byte for byte, and a log of the
Produce frames the broker's framing layer handed over (their size and buffer type).

`payload(label, size)` is the same bytes as MiniClient.java's `payload` (the Java side compares what it
reads with it, the Python side with this): the SHA-256 digests of the UTF-8 label followed by the
8-byte big-endian block number 0, 1, 2 ..., each repeated 8 times (256 bytes a block: about 8 to 1 for
every codec), cut to `size` bytes.

`ProduceFrames.watch(running)` wraps the broker's `handle_frame` to note, for every Produce request,
the frame's size, its type (bytes for a body that came in one read, a bytearray for one received in
place: minibroker.protocol.framing) and how many partitions it carries, so that a test can assert that
the real clients' requests crossed the thresholds it is about. It keeps no reference to a frame
(which would stop the framing layer from recycling it).
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass

from minibroker.protocol.framing import BODY_BUFFER_MIN, READ_AHEAD, RECYCLE_MAX
from minibroker.protocol.messages import api_schema, parse_header, peek_api

KIB, MIB = 1024, 1024 * 1024
# The sizes every client writes and reads back (one record each): a small request, one received in
# place (over BODY_BUFFER_MIN), one past the read-ahead (over READ_AHEAD) and recycled, one past the
# recycle limit (over RECYCLE_MAX, never kept).
SIZES = (100, 100 * KIB, 1536 * KIB, 8 * MIB)
assert SIZES[1] > BODY_BUFFER_MIN and READ_AHEAD < SIZES[2] < RECYCLE_MAX < SIZES[3]
CODECS = ("gzip", "snappy", "lz4", "zstd")
CODEC_SIZE = SIZES[2]  # each codec writes a record of this size (compressed: over BODY_BUFFER_MIN)
# What the topics and clients are given so that an 8 MiB record fits: the topic's max.message.bytes,
# the producers' request size and the consumers' fetch sizes.
LIMIT = 16 * MIB


def payload(label: str, size: int) -> bytes:
    prefix = label.encode()
    blocks = (hashlib.sha256(prefix + struct.pack(">q", b)).digest() * 8 for b in range(-(-size // 256)))
    return b"".join(blocks)[:size]


def sizes(spec: str) -> list[int]:
    """The record sizes of a MiniClient SIZES argument: SIZE[*COUNT],... in record order."""
    out: list[int] = []
    for part in spec.split(","):
        size, _, count = part.partition("*")
        out += [int(size)] * int(count or 1)
    return out


def spec(record_sizes: list[int] | tuple[int, ...]) -> str:
    """The SIZES argument for records of these sizes."""
    return ",".join(str(size) for size in record_sizes)


@dataclass(frozen=True)
class ProduceFrame:
    size: int  # the frame body's bytes
    kind: str  # "bytes" or "bytearray": how the framing layer handed it over
    version: int
    partitions: int  # partitions (batches) the request carries


class ProduceFrames:
    """The Produce frames a broker was handed (see the module docstring)."""

    def __init__(self) -> None:
        self.frames: list[ProduceFrame] = []

    def watch(self, running) -> ProduceFrames:
        broker = running.broker
        original = broker.handle_frame

        async def handle_frame(frame, conn):
            api_key, version, _ = peek_api(frame)
            if api_key == 0:
                schema = api_schema(0, version)
                try:
                    request, _ = schema.decode(frame, parse_header(frame, schema.flexible).size)
                    partitions = sum(len(t.partition_data) for t in request.topic_data)
                    del request  # its records are views of the frame
                except Exception:  # the broker answers it; only counted here
                    partitions = -1
                self.frames.append(ProduceFrame(len(frame), type(frame).__name__, version, partitions))
            return await original(frame, conn)

        broker.handle_frame = handle_frame
        return self

    def sizes_seen(self) -> str:
        return ", ".join(f"{f.size} B as {f.kind} ({f.partitions} partitions, v{f.version})" for f in self.frames)

    def assert_crossed(self, *bounds: int) -> None:
        """Every range between the thresholds `bounds` (ascending) holds a Produce frame: the client's
        requests crossed each of them. Frames of BODY_BUFFER_MIN bytes and up must have come as a
        bytearray (received in place), smaller ones as bytes: the path the test means to take."""
        print(f"Produce requests: {self.sizes_seen()}")  # shown with -s, and on a failure
        edges = (0, *bounds, 1 << 62)
        for low, high in zip(edges, edges[1:]):
            assert any(low <= f.size < high for f in self.frames), (
                f"no Produce request of {low}..{high} bytes; seen: {self.sizes_seen()}")
        for f in self.frames:
            assert f.kind == ("bytearray" if f.size >= BODY_BUFFER_MIN else "bytes"), self.sizes_seen()
