"""DeleteRecords (key 21), v0-v2: move a partition's log start offset (its low watermark) up, as
Kafka's ReplicaManager.deleteRecords and UnifiedLog.maybeIncrementLogStartOffset do.

Per partition: UNKNOWN_TOPIC_OR_PARTITION when it does not exist; INVALID_TOPIC_EXCEPTION for
Kafka's internal topics (__consumer_offsets, ...); POLICY_VIOLATION when the topic's cleanup.policy
does not include delete; an offset of -1 means the high watermark, any other negative offset or one
beyond the high watermark (the log end on one broker) is OFFSET_OUT_OF_RANGE. Otherwise the log start
offset becomes max(itself, offset) and is answered as the low watermark.

The new start is written (atomically) to the partition's `log-start-offset` file before the answer,
so it holds across restarts; segments wholly below it are deleted at once, and retention deletes the
one it falls in once the segment is no longer active. From then on a fetch below it answers
OFFSET_OUT_OF_RANGE and ListOffsets EARLIEST answers it; a fetch parked on the partition is woken.

Authorization: DELETE on each topic, else its partitions are answered TOPIC_AUTHORIZATION_FAILED
(29).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from minibroker.auth import AclOperation, ResourceType
from minibroker.handlers import Reply, handler
from minibroker.handlers.common import error_answer
from minibroker.protocol.errors import ApiError, ErrorCode
from minibroker.storage.config import is_internal

if TYPE_CHECKING:
    from minibroker.context import RequestContext

HIGH_WATERMARK = -1  # Kafka's DeleteRecordsRequest.HIGH_WATERMARK


def _delete(ctx: RequestContext, topic: str, partition: int, offset: int) -> tuple[int, int]:
    """(error code, low watermark) for one partition."""
    plog = ctx.logs.log(topic, partition)
    if plog is None or plog.leader_epoch is None:
        info = ctx.logs.topic(topic)
        if info is not None and 0 <= partition < info.num_partitions:
            return ErrorCode.not_leader_or_follower, -1  # its leader takes it (Kafka's)
        return ErrorCode.unknown_topic_or_partition, -1
    if is_internal(topic):
        return ErrorCode.invalid_topic_exception, -1
    policies = [p for p in plog.config.cleanup_policy.split(",") if p]
    if policies and "delete" not in policies:  # an empty policy (KIP-1161) deletes as "delete" does
        return ErrorCode.policy_violation, -1
    high_watermark = plog.high_watermark
    target = high_watermark if offset == HIGH_WATERMARK else offset
    if target < 0 or target > high_watermark:  # Kafka's UnifiedLog.deleteRecordsToOffset bound
        return ErrorCode.offset_out_of_range, -1
    try:
        low_watermark = plog.delete_records_before(target)
    except (ApiError, OSError) as exc:  # OffsetOutOfRangeError, or a storage fault
        return error_answer(ctx.storage_errors, exc, f"DeleteRecords on {topic}-{partition}")[0], -1
    ctx.purgatory.check_and_complete((topic, partition))
    return ErrorCode.none, low_watermark


@handler(21, 0, 2, client_throttles_from=1)
async def delete_records(ctx: RequestContext, request: Any) -> Reply:
    topics = []
    allowed = set(ctx.filter_authorized(AclOperation.DELETE, ResourceType.TOPIC, [t.name for t in request.topics]))
    for topic in request.topics:
        partitions = []
        for p in topic.partitions:
            code: int
            if topic.name not in allowed:
                code, low_watermark = ErrorCode.topic_authorization_failed, -1
            else:
                code, low_watermark = _delete(ctx, topic.name, p.partition_index, p.offset)
            partitions.append({"partition_index": p.partition_index, "low_watermark": low_watermark,
                               "error_code": code})
        topics.append({"name": topic.name, "partitions": partitions})
    return Reply({"topics": topics})
