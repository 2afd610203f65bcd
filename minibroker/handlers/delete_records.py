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
"""

import logging

from minibroker.handlers import handler
from minibroker.handlers.common import (
    INVALID_TOPIC_EXCEPTION,
    KAFKA_STORAGE_ERROR,
    OFFSET_OUT_OF_RANGE,
    UNKNOWN_TOPIC_OR_PARTITION,
)
from storage.config import is_internal
from storage.log import OffsetOutOfRangeError

log = logging.getLogger(__name__)

POLICY_VIOLATION = 44
HIGH_WATERMARK = -1  # Kafka's DeleteRecordsRequest.HIGH_WATERMARK


def _delete(broker, topic: str, partition: int, offset: int) -> tuple[int, int]:
    """(error code, low watermark) for one partition."""
    plog = broker.logs.log(topic, partition)
    if plog is None:
        return UNKNOWN_TOPIC_OR_PARTITION, -1
    if is_internal(topic):
        return INVALID_TOPIC_EXCEPTION, -1
    if "delete" not in plog.config.cleanup_policy.split(","):
        return POLICY_VIOLATION, -1
    target = plog.log_end_offset if offset == HIGH_WATERMARK else offset
    if target < 0:
        return OFFSET_OUT_OF_RANGE, -1
    try:
        low_watermark = plog.delete_records_before(target)
    except OffsetOutOfRangeError:
        return OFFSET_OUT_OF_RANGE, -1
    except OSError as exc:
        log.error("DeleteRecords on %s-%d failed: %s", topic, partition, exc)
        return KAFKA_STORAGE_ERROR, -1
    broker.fetch_purgatory.check_and_complete((topic, partition))
    return 0, low_watermark


@handler(21, 0, 2)
async def delete_records(ctx, request):
    topics = []
    for topic in request.topics:
        partitions = []
        for p in topic.partitions:
            code, low_watermark = _delete(ctx.broker, topic.name, p.partition_index, p.offset)
            partitions.append({"partition_index": p.partition_index, "low_watermark": low_watermark,
                               "error_code": code})
        topics.append({"name": topic.name, "partitions": partitions})
    return {"throttle_time": 0, "topics": topics}
