"""ListOffsets by timestamp over a log's segments, down to the exact record (Kafka's
UnifiedLog.fetchOffsetByTimestamp, FileRecords.searchForTimestamp, RecordBatch.offsetOfMaxTimestamp).

The segment and the batch are found from the indexes and batch headers; only the one batch that
straddles the target is read record by record (decompressed if it must be, within a bound). Never on
the produce or fetch path.
"""

from __future__ import annotations

import logging
from typing import Iterator, Protocol, Sequence

from minibroker.protocol.compression import CODEC_NAMES, DecompressionLimitError
from minibroker.protocol.records import BatchHeader, InvalidRecordError, record_timestamps

__all__ = [
    "MAX_DECOMPRESSED_BATCH_BYTES",
    "TimedSegment",
    "first_record_at_or_after",
    "latest_timestamp",
    "offset_for_timestamp",
    "record_with_timestamp",
]

logger = logging.getLogger(__name__)

# A compressed batch is decompressed whole to find one record in it; one that would grow past this
# is answered at batch granularity instead (with a warning), so no batch costs unbounded memory.
MAX_DECOMPRESSED_BATCH_BYTES = 64 * 1024 * 1024


class TimedSegment(Protocol):
    """What the searches over a log's segments read of each one (storage.segment.LogSegment, which
    uses `first_record_at_or_after` from here: a protocol rather than an import keeps the two
    modules out of an import circle)."""

    @property
    def size(self) -> int: ...
    @property
    def next_offset(self) -> int: ...
    @property
    def max_timestamp(self) -> int: ...
    @property
    def offset_of_max_timestamp(self) -> int: ...

    def find_offset_by_timestamp(self, timestamp: int, start_offset: int) -> tuple[int, int] | None: ...
    def find_position(self, offset: int) -> int | None: ...
    def headers(self, position: int = 0) -> Iterator[BatchHeader]: ...
    def read_batch(self, header: BatchHeader) -> bytes: ...


def _records(batch: bytes, header: BatchHeader) -> Iterator[tuple[int, int]] | None:
    """(offset, timestamp) of each record of `batch`, or None when they cannot be read (logged)."""
    try:
        return iter(list(record_timestamps(batch, max_decompressed=MAX_DECOMPRESSED_BATCH_BYTES)))
    except (InvalidRecordError, DecompressionLimitError) as exc:
        logger.warning(
            "batch at offsets %d-%d (%s): records not readable, answering at batch granularity: %s",
            header.base_offset, header.last_offset, CODEC_NAMES.get(header.compression, "?"), exc,
        )
        return None


def first_record_at_or_after(
    batch: bytes, header: BatchHeader, timestamp: int, start_offset: int
) -> tuple[int, int] | None:
    """Kafka's FileRecords.searchForTimestamp within one batch: (offset, timestamp) of its first
    record with timestamp >= `timestamp` and offset >= `start_offset`, None when it has none.
    Compressed batches are decompressed (this one batch only); a LogAppendTime batch's records all
    carry its max timestamp."""
    records = _records(batch, header)
    if records is None:
        if header.max_timestamp >= timestamp and header.last_offset >= start_offset:
            return max(header.base_offset, start_offset), header.max_timestamp
        return None
    for record_offset, record_timestamp in records:
        if record_timestamp >= timestamp and record_offset >= start_offset:
            return record_offset, record_timestamp
    return None


def record_with_timestamp(batch: bytes, header: BatchHeader, timestamp: int) -> int:
    """Kafka's RecordBatch.offsetOfMaxTimestamp: the offset of the first record of `batch` carrying
    `timestamp` (the batch's max timestamp), for ListOffsets MAX_TIMESTAMP; the batch's base offset
    when its records cannot be read."""
    for record_offset, record_timestamp in _records(batch, header) or ():
        if record_timestamp == timestamp:
            return record_offset
    return header.base_offset


def offset_for_timestamp(segments: Sequence[TimedSegment], start: int, timestamp_ms: int) -> tuple[int, int] | None:
    """Kafka's answer to ListOffsets by timestamp: (offset, timestamp) of the first record at or after
    the log start offset `start` whose timestamp is >= `timestamp_ms`; None when no record is that
    recent."""
    for segment in segments:
        if segment.max_timestamp >= timestamp_ms and segment.next_offset > start:
            found = segment.find_offset_by_timestamp(timestamp_ms, start)
            if found is not None:
                return found
    return None


def latest_timestamp(segments: Sequence[TimedSegment], start: int) -> tuple[int, int]:
    """ListOffsets MAX_TIMESTAMP (KIP-734): (offset, timestamp) of the first record carrying the
    largest timestamp (Kafka: the first segment with that largest timestamp, its first batch with it,
    that batch's first record with it), or (-1, -1) when the log is empty. An offset below the log
    start offset `start` (DeleteRecords) is raised to it."""
    best: TimedSegment | None = None
    for segment in segments:
        if segment.size and segment.next_offset > start:
            if best is None or segment.max_timestamp > best.max_timestamp:
                best = segment
    if best is None:
        return -1, -1
    target = best.max_timestamp
    position = best.find_position(best.offset_of_max_timestamp)
    if position is not None:
        for header in best.headers(position):
            if header.max_timestamp == target:
                offset = record_with_timestamp(best.read_batch(header), header, target)
                return max(offset, start), target
    return max(best.offset_of_max_timestamp, start), target
