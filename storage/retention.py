"""Which old segments retention deletes (Kafka's UnifiedLog.deleteOldSegments): whole segments from
the oldest, never the active one, while any of its three rules holds (the last two only when
cleanup.policy includes `delete`: a `compact`-only topic keeps its records until the cleaner
removes them, and loses segments only below its log start offset, as in Kafka):

* the segment lies entirely below the log start offset (DeleteRecords moved it past);
* its largest timestamp is older than retention.ms (a segment without timestamps counts from its
  file's modification time, as in Kafka); the largest timestamp comes from the time index, so it is
  checked against the log first, and a wrong entry is rebuilt before the rule is applied again;
* the log exceeds retention.bytes by at least the segment's size.
"""

from __future__ import annotations

import os
from typing import Sequence

from minibroker.storage.config import LogConfig
from minibroker.storage.segment import LogSegment

__all__ = ["segments_past_retention"]


def segments_past_retention(segments: Sequence[LogSegment], log_start_offset: int, size: int,
                            config: LogConfig, now_ms: int) -> int:
    """How many of the oldest `segments` (the log's, `size` bytes in all) retention deletes now."""
    n = 0
    last = len(segments) - 1  # the active segment stays
    while n < last and segments[n + 1].base_offset <= log_start_offset:
        n += 1
    if "delete" not in config.cleanup_policy.split(","):
        return n
    if config.retention_ms >= 0:
        while n < last and now_ms - _largest_timestamp(segments[n]) > config.retention_ms:
            if segments[n].verify_max_timestamp():
                n += 1
    if config.retention_bytes >= 0:
        excess = size - sum(segment.size for segment in segments[:n]) - config.retention_bytes
        while n < last and excess - segments[n].size >= 0:
            excess -= segments[n].size
            n += 1
    return n


def _largest_timestamp(segment: LogSegment) -> int:
    if segment.max_timestamp >= 0:
        return segment.max_timestamp
    return int(os.stat(segment.log_path).st_mtime * 1000)
