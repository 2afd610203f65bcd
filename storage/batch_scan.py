"""Walking the batches of a segment file, and writing them: what a segment does with raw bytes.

Reads go through a `pread(size, position) -> bytes` the segment supplies (it borrows the file's
descriptor for each call, never across a `yield`), in read-ahead chunks, so a scan costs one system
call per chunk, not per batch:

* `scan_headers`: the well-framed batches (batchLength at least a header's, magic 2, within the
  range), stopping at the first that is not: the walk of data the broker wrote and checked on the
  way in (reads, index lookups, a clean load's tail check);
* `scan_verified`: the same, reading every byte and stopping at the first CRC mismatch too: the
  recovery of a segment a crash may have torn.

`whole_batches_length` finds the whole-batch prefix of a read, `write_fully` writes a batch's
buffers with `os.writev` (finishing a short write).
"""

from __future__ import annotations

import os
from typing import Callable, Iterator, Sequence

from crc32c import crc32c

from minibroker.protocol.records.batch import (
    BATCH_HEADER,
    CRC_START,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MIN_BATCH_LENGTH,
    OFFSET_AND_LENGTH,
    BatchHeader,
)

__all__ = ["IOV_MAX", "scan_headers", "scan_verified", "whole_batches_length", "write_fully"]

HEADER_SCAN_CHUNK = 64 * 1024  # read-ahead when walking headers (most batches are small)
RECOVERY_CHUNK = 4 * 1024 * 1024  # read-ahead when checking CRCs (every byte is read anyway)
IOV_MAX = 1024

Pread = Callable[[int, int], bytes]  # (size, position) -> the bytes there (fewer at the end)


def scan_headers(pread: Pread, start: int, end: int) -> Iterator[BatchHeader]:
    """Headers of the well-framed batches in [start, end), stopping at the first malformed or torn
    one (no CRC check: this is data the broker wrote and already checked)."""
    position = start
    buf = b""
    buf_start = start
    while position + HEADER_SIZE <= end:
        relative = position - buf_start
        if relative < 0 or relative + HEADER_SIZE > len(buf):
            buf = pread(min(HEADER_SCAN_CHUNK, end - position), position)
            buf_start, relative = position, 0
            if len(buf) < HEADER_SIZE:
                return
        fields = BATCH_HEADER.unpack_from(buf, relative)
        length = fields[1]
        if length < MIN_BATCH_LENGTH or fields[3] != 2 or position + length + LOG_OVERHEAD > end:
            return
        yield BatchHeader(position, *fields)
        position += length + LOG_OVERHEAD


def scan_verified(pread: Pread, start: int, end: int) -> Iterator[BatchHeader]:
    """Like `scan_headers`, but reads every batch and stops at the first CRC mismatch."""
    position = start
    buf = b""
    buf_start = start
    while position + HEADER_SIZE <= end:
        relative = position - buf_start
        if relative + HEADER_SIZE > len(buf):
            buf = pread(min(RECOVERY_CHUNK, end - position), position)
            buf_start, relative = position, 0
            if len(buf) < HEADER_SIZE:
                return
        fields = BATCH_HEADER.unpack_from(buf, relative)
        length = fields[1]
        size = length + LOG_OVERHEAD
        if length < MIN_BATCH_LENGTH or fields[3] != 2 or position + size > end:
            return
        if relative + size > len(buf):
            buf = pread(max(size, min(RECOVERY_CHUNK, end - position)), position)
            buf_start, relative = position, 0
            if len(buf) < size:
                return
        if crc32c(memoryview(buf)[relative + CRC_START : relative + size]) != fields[4]:
            return
        yield BatchHeader(position, *fields)
        position += size


def whole_batches_length(data: bytes) -> int:
    """Length of the prefix of `data` made of whole batches."""
    end = len(data)
    position = 0
    unpack = OFFSET_AND_LENGTH.unpack_from
    while position + LOG_OVERHEAD <= end:
        _, length = unpack(data, position)
        if length < MIN_BATCH_LENGTH:
            break
        next_position = position + length + LOG_OVERHEAD
        if next_position > end:
            break
        position = next_position
    return position


def write_fully(fd: int, buffers: Sequence[bytes | bytearray | memoryview], total: int) -> None:
    """Write `buffers` (`total` bytes) at the descriptor's position, all of them or an OSError."""
    if len(buffers) <= IOV_MAX:
        written = os.writev(fd, buffers)
        if written == total:
            return
    else:
        written = 0
        for i in range(0, len(buffers), IOV_MAX):
            group = buffers[i : i + IOV_MAX]
            expected = sum(len(b) for b in group)
            n = os.writev(fd, group)
            written += n
            if n != expected:
                break
        if written == total:
            return
    # A short write (rare: a signal, a full disk): finish the rest from a flat copy.
    rest = memoryview(b"".join(bytes(b) for b in buffers))[written:]
    while rest:
        n = os.write(fd, rest)
        if n <= 0:
            raise OSError("short write to the log")
        rest = rest[n:]
