"""ListOffsets (key 2), v1-v11: earliest (-2), latest (-1), max timestamp (-3), by timestamp.

Quirks: the special timestamps answer timestamp -1 (except -3, which answers the largest timestamp
and its batch's offset); a timestamp past every record answers offset -1. Lookups by timestamp
resolve to the first batch whose max timestamp is at or after the target (record granularity inside
a batch is the client's to skip, as with fetches). -4 (earliest local) is the log start here.
"""

from minibroker.handlers import handler
from minibroker.handlers.common import KAFKA_STORAGE_ERROR, UNKNOWN_TOPIC_OR_PARTITION, log_storage_error
from storage.errors import storage_error_message

LATEST, EARLIEST, MAX_TIMESTAMP, EARLIEST_LOCAL, EARLIEST_TIERED = -1, -2, -3, -4, -5


def _lookup(log, timestamp: int) -> tuple[int, int]:
    if timestamp == LATEST:
        return log.log_end_offset, -1
    if timestamp in (EARLIEST, EARLIEST_LOCAL, EARLIEST_TIERED):
        return log.log_start_offset, -1
    if timestamp == MAX_TIMESTAMP:
        offset, ts = log.latest_timestamp()
        return offset, ts
    found = log.offset_for_timestamp(timestamp)
    return found if found is not None else (-1, -1)


@handler(2, 1, 11)
async def list_offsets(ctx, request):
    broker = ctx.broker
    topics = []
    for topic in request.topics:
        partitions = []
        for p in topic.partitions:
            log = broker.logs.log(topic.name, p.partition_index)
            if log is None:
                partitions.append({"partition_index": p.partition_index, "error_code": UNKNOWN_TOPIC_OR_PARTITION,
                                   "timestamp": -1, "offset": -1, "leader_epoch": -1})
                continue
            try:
                offset, ts = _lookup(log, p.timestamp)
            except OSError as exc:
                log_storage_error("%s-%d: %s", topic.name, p.partition_index, storage_error_message(exc))
                partitions.append({"partition_index": p.partition_index, "error_code": KAFKA_STORAGE_ERROR,
                                   "timestamp": -1, "offset": -1, "leader_epoch": -1})
                continue
            partitions.append({"partition_index": p.partition_index, "error_code": 0,
                               "timestamp": ts, "offset": offset, "leader_epoch": 0})
        topics.append({"name": topic.name, "partitions": partitions})
    return {"throttle_time": 0, "topics": topics}
