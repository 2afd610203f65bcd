"""Clean a log to its end now, with the broker's log cleaner (minibroker.storage.cleaner), for tests of what
lives on compacted topics (the offsets store): the active segment rolled first, so everything
written so far can be cleaned, then rounds until none is due."""

from __future__ import annotations

from minibroker.storage.cleaner import CleaningRound, OffsetMap, choose_filthiest, clean, commit, log_to_clean
from minibroker.storage.log import PartitionLog
from kafka.record.default_records import DefaultRecordBatch
from minibroker.protocol.records import iter_headers
import struct
from crc32c import crc32c
from minibroker.protocol.compression import decompress


def clean_fully(log: PartitionLog, now_ms: int, *, memory: int = 1 << 20) -> int:
    """Roll and clean `log` until nothing is left to clean; how many rounds ran."""
    log.roll(now_ms)
    checkpoint = None
    rounds = 0
    while (target := choose_filthiest([log_to_clean("t", 0, log, checkpoint, now_ms)])) is not None:
        result = clean(CleaningRound.of(target, now_ms), OffsetMap(memory))
        commit(result)
        assert result.complete
        checkpoint = result.end_offset
        rounds += 1
        if checkpoint >= log.active_segment.base_offset:
            break
    return rounds


def read_all(log: PartitionLog) -> list[tuple[int, int, bytes | None, bytes | None, tuple]]:
    """(offset, timestamp, key, value, headers) of every record from the log start, decoded by
    kafka-python (decompressing as a client does)."""
    out = []
    data = log.read(log.log_start_offset, 1 << 30)
    for header in iter_headers(data):
        raw = bytearray(data[header.position:header.position + header.size])
        assert DefaultRecordBatch(raw).validate_crc()
        if header.compression in (2, 3, 4):  # kafka-python here lacks snappy, lz4, zstd: decompressed first
            raw = _decompressed(raw, header)
        for record in DefaultRecordBatch(raw):
            out.append((record.offset, record.timestamp, record.key, record.value, tuple(record.headers)))
    return out


def _decompressed(raw: bytearray, header) -> bytearray:
    body = decompress(header.compression, raw[61:], 1 << 24)
    out = bytearray(raw[:61]) + body
    struct.pack_into(">i", out, 8, len(out) - 12)
    struct.pack_into(">h", out, 21, header.attributes & ~7)
    struct.pack_into(">I", out, 17, crc32c(memoryview(out)[21:]))
    return out
