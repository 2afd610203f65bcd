"""ListOffsets (key 2), v1-v11: offsets by timestamp and the special timestamps, as Kafka's
UnifiedLog.fetchOffsetByTimestamp answers them on a broker without tiered storage.

- a timestamp >= 0: the first record whose timestamp is at or after it, with that record's own
  timestamp (compressed batches included: the one batch that straddles the target is decompressed);
  offset -1 and timestamp -1 when no record is that recent;
- LATEST (-1): the high watermark, or with isolation_level=1
  (READ_COMMITTED, v2+) the last stable offset; EARLIEST (-2) and EARLIEST_LOCAL (-4, KIP-405; all of the log is
  local here): the log start offset; both with timestamp -1;
- MAX_TIMESTAMP (-3, KIP-734): the first record carrying the largest timestamp, with that timestamp;
- LATEST_TIERED (-5, KIP-1005) and EARLIEST_PENDING_UPLOAD (-6, KIP-1023): nothing is tiered, so
  offset -1, timestamp -1, leader epoch -1.

With READ_COMMITTED a lookup by timestamp (MAX_TIMESTAMP too) finds nothing at or past the last
stable offset (Kafka's Partition.fetchOffsetForTimestamp bounds it by the last fetchable offset).
The leader epoch answered is the one the offset was written in (the partition's leader-epoch
cache), the current one for LATEST.

A special timestamp asked at a version older than the one that introduced it, or a negative
timestamp that is none of these, is answered UNSUPPORTED_VERSION for its partition (Kafka's
ReplicaManager.isListOffsetsTimestampUnsupported). A partition this broker does not lead is
NOT_LEADER_OR_FOLLOWER; a current_leader_epoch (v4+) older or newer than the partition's is
FENCED_LEADER_EPOCH or UNKNOWN_LEADER_EPOCH.

Authorization: DESCRIBE on each topic, else its partitions are answered TOPIC_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from minibroker.auth import AclOperation, ResourceType
from minibroker.handlers import Reply, handler
from minibroker.handlers.common import error_answer
from minibroker.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from minibroker.context import RequestContext

LATEST, EARLIEST, MAX_TIMESTAMP, EARLIEST_LOCAL, LATEST_TIERED, EARLIEST_PENDING_UPLOAD = -1, -2, -3, -4, -5, -6
# The first ListOffsets version that may carry each special timestamp.
MIN_VERSION = {LATEST: 1, EARLIEST: 1, MAX_TIMESTAMP: 7, EARLIEST_LOCAL: 8, LATEST_TIERED: 9,
               EARLIEST_PENDING_UPLOAD: 11}


READ_COMMITTED = 1  # isolation_level


def _lookup(log, timestamp: int, fetchable_end: int) -> tuple[int, int, int]:
    """(offset, timestamp, leader epoch) for one partition; `fetchable_end`: the high watermark, or
    the last stable offset for READ_COMMITTED."""
    if timestamp == LATEST:
        return fetchable_end, -1, log.latest_epoch
    if timestamp in (EARLIEST, EARLIEST_LOCAL):
        return log.log_start_offset, -1, log.epoch_of(log.log_start_offset)
    if timestamp in (LATEST_TIERED, EARLIEST_PENDING_UPLOAD):
        return -1, -1, -1
    if timestamp == MAX_TIMESTAMP:
        offset, ts = log.latest_timestamp()
        if offset >= fetchable_end:
            return -1, -1, -1
        return offset, ts, log.epoch_of(offset) if offset >= 0 else -1
    found = log.offset_for_timestamp(timestamp)
    if found is None or found[0] >= fetchable_end:
        return -1, -1, -1
    return (*found, log.epoch_of(found[0]))


@handler(2, 1, 11, client_throttles_from=3)
async def list_offsets(ctx: RequestContext, request: Any) -> Reply:
    read_committed = getattr(request, "isolation_level", 0) == READ_COMMITTED
    allowed = set(ctx.filter_authorized(AclOperation.DESCRIBE, ResourceType.TOPIC, [t.name for t in request.topics]))
    topics = []
    for topic in request.topics:
        partitions = []
        for p in topic.partitions:
            log = ctx.logs.log(topic.name, p.partition_index)
            if topic.name not in allowed:
                error = ErrorCode.topic_authorization_failed
            elif p.timestamp < 0 and ctx.version < MIN_VERSION.get(p.timestamp, 1 << 15):
                error = ErrorCode.unsupported_version
            elif log is None:
                info = ctx.logs.topic(topic.name)
                hosted_elsewhere = info is not None and 0 <= p.partition_index < info.num_partitions
                error = ErrorCode.not_leader_or_follower if hosted_elsewhere else ErrorCode.unknown_topic_or_partition
            elif log.leader_epoch is None:
                error = ErrorCode.not_leader_or_follower
            elif 0 <= getattr(p, "current_leader_epoch", -1) != log.leader_epoch:
                error = (ErrorCode.fenced_leader_epoch if p.current_leader_epoch < log.leader_epoch
                         else ErrorCode.unknown_leader_epoch)
            else:
                error = ErrorCode.none
            if error or log is None:  # (an unauthorized topic is not said to exist or not)
                partitions.append({"partition_index": p.partition_index, "error_code": error,
                                   "timestamp": -1, "offset": -1, "leader_epoch": -1})
                continue
            try:
                if read_committed:
                    end = ctx.replicas.last_stable_offset(topic.name, p.partition_index, log)
                else:
                    end = log.high_watermark
                offset, ts, epoch = _lookup(log, p.timestamp, end)
            except OSError as exc:
                code, _ = error_answer(ctx.storage_errors, exc, f"{topic.name}-{p.partition_index}")
                partitions.append({"partition_index": p.partition_index, "error_code": code,
                                   "timestamp": -1, "offset": -1, "leader_epoch": -1})
                continue
            partitions.append({"partition_index": p.partition_index, "error_code": ErrorCode.none,
                               "timestamp": ts, "offset": offset, "leader_epoch": epoch})
        topics.append({"name": topic.name, "partitions": partitions})
    return Reply({"topics": topics})
