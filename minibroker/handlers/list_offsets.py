"""ListOffsets (key 2), v1-v11: offsets by timestamp and the special timestamps, as Kafka's
UnifiedLog.fetchOffsetByTimestamp answers them on a broker without tiered storage.

- a timestamp >= 0: the first record whose timestamp is at or after it, with that record's own
  timestamp (compressed batches included: the one batch that straddles the target is decompressed);
  offset -1 and timestamp -1 when no record is that recent;
- LATEST (-1): the log end offset; EARLIEST (-2) and EARLIEST_LOCAL (-4, KIP-405; all of the log is
  local here): the log start offset; both with timestamp -1;
- MAX_TIMESTAMP (-3, KIP-734): the first record carrying the largest timestamp, with that timestamp;
- LATEST_TIERED (-5, KIP-1005) and EARLIEST_PENDING_UPLOAD (-6, KIP-1023): nothing is tiered, so
  offset -1, timestamp -1, leader epoch -1.

A special timestamp asked at a version older than the one that introduced it, or a negative
timestamp that is none of these, is answered UNSUPPORTED_VERSION for its partition (Kafka's
ReplicaManager.isListOffsetsTimestampUnsupported).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from minibroker.handlers import Reply, handler
from minibroker.handlers.common import error_answer
from protocol.errors import ErrorCode

if TYPE_CHECKING:
    from minibroker.broker import RequestContext

LATEST, EARLIEST, MAX_TIMESTAMP, EARLIEST_LOCAL, LATEST_TIERED, EARLIEST_PENDING_UPLOAD = -1, -2, -3, -4, -5, -6
# The first ListOffsets version that may carry each special timestamp.
MIN_VERSION = {LATEST: 1, EARLIEST: 1, MAX_TIMESTAMP: 7, EARLIEST_LOCAL: 8, LATEST_TIERED: 9,
               EARLIEST_PENDING_UPLOAD: 11}
LEADER_EPOCH = 0  # the one broker leads every partition in epoch 0 (as Metadata says)


def _lookup(log, timestamp: int) -> tuple[int, int, int]:
    """(offset, timestamp, leader epoch) for one partition."""
    if timestamp == LATEST:
        return log.log_end_offset, -1, LEADER_EPOCH
    if timestamp in (EARLIEST, EARLIEST_LOCAL):
        return log.log_start_offset, -1, LEADER_EPOCH
    if timestamp in (LATEST_TIERED, EARLIEST_PENDING_UPLOAD):
        return -1, -1, -1
    if timestamp == MAX_TIMESTAMP:
        offset, ts = log.latest_timestamp()
        return offset, ts, LEADER_EPOCH if offset >= 0 else -1
    found = log.offset_for_timestamp(timestamp)
    return (*found, LEADER_EPOCH) if found is not None else (-1, -1, -1)


@handler(2, 1, 11, client_throttles_from=3)
async def list_offsets(ctx: RequestContext, request: Any) -> Reply:
    broker = ctx.broker
    topics = []
    for topic in request.topics:
        partitions = []
        for p in topic.partitions:
            log = broker.logs.log(topic.name, p.partition_index)
            if p.timestamp < 0 and ctx.version < MIN_VERSION.get(p.timestamp, 1 << 15):
                error = ErrorCode.unsupported_version
            else:
                error = ErrorCode.unknown_topic_or_partition if log is None else ErrorCode.none
            if error:
                partitions.append({"partition_index": p.partition_index, "error_code": error,
                                   "timestamp": -1, "offset": -1, "leader_epoch": -1})
                continue
            try:
                offset, ts, epoch = _lookup(log, p.timestamp)
            except OSError as exc:
                code, _ = error_answer(broker, exc, f"{topic.name}-{p.partition_index}")
                partitions.append({"partition_index": p.partition_index, "error_code": code,
                                   "timestamp": -1, "offset": -1, "leader_epoch": -1})
                continue
            partitions.append({"partition_index": p.partition_index, "error_code": ErrorCode.none,
                               "timestamp": ts, "offset": offset, "leader_epoch": epoch})
        topics.append({"name": topic.name, "partitions": partitions})
    return Reply({"topics": topics})
