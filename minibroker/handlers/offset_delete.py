"""OffsetDelete (key 47), v0: delete a group's committed offsets for some partitions, as Kafka's
KafkaApis.handleOffsetDeleteRequest and OffsetMetadataManager.deleteOffsets answer it.

Partitions of a topic or partition that does not exist answer UNKNOWN_TOPIC_OR_PARTITION. The group
errors are top-level and leave the topic list empty: INVALID_GROUP_ID for an empty id,
GROUP_ID_NOT_FOUND for an unknown group, NON_EMPTY_GROUP for a group with members that is not a
consumer group. A consumer group with members keeps the offsets of the topics they subscribe to:
those partitions answer GROUP_SUBSCRIBED_TO_TOPIC. Every other partition answers NONE, whether it
had an offset (now removed, by a tombstone in __consumer_offsets) or not.

Authorization (Kafka's handleOffsetDeleteRequest): DELETE on the group, else the top-level
GROUP_AUTHORIZATION_FAILED (30); READ on each topic, else its partitions TOPIC_AUTHORIZATION_FAILED
(29).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from minibroker.auth import AclOperation, ResourceType
from minibroker.handlers import Reply, handler
from minibroker.handlers.common import group_coordinator
from minibroker.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from minibroker.context import RequestContext


@handler(47, 0, 0, client_throttles_from=1)
@group_coordinator
async def offset_delete(ctx: RequestContext, request: Any) -> Reply:
    logs = ctx.logs
    if not ctx.authorize(AclOperation.DELETE, ResourceType.GROUP, request.group_id):
        return Reply({"error_code": ErrorCode.group_authorization_failed, "topics": ()})
    allowed = set(ctx.filter_authorized(AclOperation.READ, ResourceType.TOPIC, [t.name for t in request.topics]))
    errors: dict[tuple[str, int], int] = {}
    wanted: dict[str, list[int]] = {}
    for topic in request.topics:
        info = logs.topic(topic.name)
        for p in topic.partitions:
            if topic.name not in allowed:
                errors[(topic.name, p.partition_index)] = ErrorCode.topic_authorization_failed
            elif info is None or not 0 <= p.partition_index < info.num_partitions:
                errors[(topic.name, p.partition_index)] = ErrorCode.unknown_topic_or_partition
            else:
                wanted.setdefault(topic.name, []).append(p.partition_index)
    group_error, deleted = ctx.groups.delete_offsets(request.group_id, wanted)
    if group_error:
        return Reply({"error_code": group_error, "topics": ()})
    errors.update(deleted)
    topics: dict[str, list[dict]] = {}
    for topic in request.topics:
        partitions = topics.setdefault(topic.name, [])
        for p in topic.partitions:
            partitions.append({"partition_index": p.partition_index, "error_code": errors[(topic.name, p.partition_index)]})
    return Reply({
        "error_code": ErrorCode.none,
        "topics": [{"name": name, "partitions": partitions} for name, partitions in topics.items()],
    })
