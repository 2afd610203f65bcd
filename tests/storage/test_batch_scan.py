"""minibroker.storage.batch_scan across its thresholds: the header walk reads 64 KiB at a time
(HEADER_SCAN_CHUNK), the recovery walk 4 MiB at a time (RECOVERY_CHUNK), and a batch's buffers are
written IOV_MAX at a time. Batches whose header straddles a chunk's end, batches larger than a chunk,
a torn tail and a damaged CRC after them: the walks find exactly the batches a plain reading finds."""

from __future__ import annotations

import os

from minibroker.protocol.records import HEADER_SIZE, iter_headers
from minibroker.storage.batch_scan import (
    HEADER_SCAN_CHUNK,
    IOV_MAX,
    RECOVERY_CHUNK,
    scan_headers,
    scan_verified,
    whole_batches_length,
    write_fully,
)
from tests.support.batches import make_batch


def batch_of(size: int, fill: int = 0) -> bytes:
    """One batch of exactly `size` bytes (a record's value padded to it)."""
    overhead = len(make_batch([(None, b"")]))
    value = bytes([fill]) * max(0, size - overhead)
    for _ in range(4):
        batch = make_batch([(None, value)])
        if len(batch) == size:
            return batch
        value = value[: len(value) + size - len(batch)] if len(batch) > size else value + bytes(size - len(batch))
    raise ValueError(size)


def log_of_thresholds() -> bytes:
    """Batches laid out so that headers straddle the end of the first header chunk and of the first
    recovery chunk, and some batches are larger than either chunk."""
    batches = [batch_of(1000, i) for i in range(60)]  # 60,000 bytes
    position = sum(map(len, batches))
    batches.append(batch_of(HEADER_SCAN_CHUNK - 20 - position, 1))  # the next header crosses 64 KiB
    batches.append(batch_of(HEADER_SCAN_CHUNK + 5, 2))  # larger than a header chunk
    position = sum(map(len, batches))
    batches.append(batch_of(RECOVERY_CHUNK - 30 - position, 3))  # the next header crosses 4 MiB
    batches.append(batch_of(RECOVERY_CHUNK + 77, 4))  # larger than a recovery chunk
    batches += [batch_of(300 + i, 5) for i in range(5)]
    return b"".join(batches)


def test_the_walks_find_every_batch_across_chunk_edges():
    data = log_of_thresholds()
    expected = [(h.position, h.batch_length, h.crc) for h in iter_headers(data)]
    assert sum(h.size for h in iter_headers(data)) == len(data)
    edges = {HEADER_SCAN_CHUNK, RECOVERY_CHUNK}
    assert all(any(p < edge < p + HEADER_SIZE for p, _, _ in expected) for edge in edges)  # headers straddle

    def pread(size: int, position: int) -> bytes:
        return data[position:position + size]

    for scan in (scan_headers, scan_verified):
        assert [(h.position, h.batch_length, h.crc) for h in scan(pread, 0, len(data))] == expected, scan.__name__
        # From a batch inside the walk, to an end that cuts the last batch (torn): stops before it.
        start = expected[3][0]
        got = [(h.position, h.batch_length, h.crc) for h in scan(pread, start, len(data) - 10)]
        assert got == expected[3:-1], scan.__name__
    assert whole_batches_length(data) == len(data)
    for cut in (HEADER_SCAN_CHUNK, RECOVERY_CHUNK, RECOVERY_CHUNK + 100, len(data) - 1):
        assert whole_batches_length(data[:cut]) == max(p + length + 12 for p, length, _ in expected
                                                       if p + length + 12 <= cut)


def test_the_recovery_walk_stops_at_a_damaged_batch_after_a_large_one():
    data = bytearray(log_of_thresholds())
    headers = list(iter_headers(data))
    damaged = headers[-3]  # after the batch larger than RECOVERY_CHUNK
    data[damaged.position + damaged.size - 1] ^= 0xFF

    def pread(size: int, position: int) -> bytes:
        return bytes(data[position:position + size])

    assert [h.position for h in scan_verified(pread, 0, len(data))] == [h.position for h in headers[:-3]]
    assert len(list(scan_headers(pread, 0, len(data)))) == len(headers)  # no CRC check there


def test_write_fully_writes_more_buffers_than_one_writev_takes(tmp_path):
    buffers = [bytes([i % 256]) * (1 + i % 7) for i in range(2 * IOV_MAX + 5)]
    buffers[10] = bytearray(buffers[10])
    buffers[11] = memoryview(b"<" + buffers[11] + b">")[1:-1]
    total = sum(len(b) for b in buffers)
    path = tmp_path / "segment"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        os.write(fd, b"head")
        write_fully(fd, buffers, total)
    finally:
        os.close(fd)
    assert path.read_bytes() == b"head" + b"".join(bytes(b) for b in buffers)
