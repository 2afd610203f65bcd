"""AlterShareGroupOffsets (key 91), v0: set a share group's share-partition start offsets (Java's
Admin.alterShareGroupOffsets, kafka-share-groups --reset-offsets).

As Kafka 4.4: UNSUPPORTED_VERSION with share.version below 1, GROUP_AUTHORIZATION_FAILED without
READ on the group (top-level errors, no topics); per topic TOPIC_AUTHORIZATION_FAILED without READ
on it, UNKNOWN_TOPIC_OR_PARTITION for an unknown topic or partition. The group must be empty
(NON_EMPTY_GROUP) and a share group (GROUP_ID_NOT_FOUND, "Group g is not a share group."); an
unknown group id becomes an empty share group, as Kafka creates it. Each partition's share state is
initialized again at the new start offset (its in-flight records are forgotten).
On a cluster only the group coordinator answers (NOT_COORDINATOR elsewhere; handlers/common.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from minibroker.auth import AclOperation, ResourceType
from minibroker.groups.share_manager import Refused
from minibroker.handlers import Reply, handler
from minibroker.handlers.common import group_coordinator
from minibroker.handlers.share_group_heartbeat import share_groups_enabled, share_manager
from minibroker.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from minibroker.context import RequestContext


def _top_level(code: ErrorCode, message: str | None = None) -> Reply:
    return Reply({"error_code": code, "error_message": message, "responses": []})


# KIP-219: Kafka 4.4 clients wait out the throttle time of every response that carries one (KAFKA-20828).
@handler(91, 0, 0, client_throttles_from=0)
@group_coordinator
async def alter_share_group_offsets(ctx: RequestContext, request: Any) -> Reply:
    if not share_groups_enabled(ctx):
        return _top_level(ErrorCode.unsupported_version, "The version of API is not supported.")
    group_id = request.group_id
    if not ctx.authorize(AclOperation.READ, ResourceType.GROUP, group_id):
        return _top_level(ErrorCode.group_authorization_failed,
                          "Not authorized to access group: Group authorization failed.")
    responses: dict[str, dict[str, Any]] = {}
    wanted: dict[str, dict[int, int]] = {}
    for topic in request.topics:
        name = topic.topic_name
        info = ctx.logs.topic(name)
        error = None
        if not ctx.authorize(AclOperation.READ, ResourceType.TOPIC, name):
            error = (ErrorCode.topic_authorization_failed, "Topic authorization failed.")
        elif info is None:
            error = (ErrorCode.unknown_topic_or_partition, "This server does not host this topic-partition.")
        if error is not None:
            responses[name] = {"topic_name": name, "topic_id": info.topic_id if info is not None else None,
                               "partitions": [{"partition_index": p.partition_index, "error_code": error[0],
                                               "error_message": error[1]} for p in topic.partitions]}
            continue
        wanted[name] = {p.partition_index: p.start_offset for p in topic.partitions}
    manager = share_manager(ctx)
    try:
        results = ctx.groups.apply(lambda now, now_ms: manager.alter_offsets(now_ms, group_id, wanted))
    except Refused as refused:
        return _top_level(refused.error, refused.message)
    for name, partitions in results.items():
        info = ctx.logs.topic(name)
        responses[name] = {"topic_name": name, "topic_id": info.topic_id if info is not None else None,
                           "partitions": [{"partition_index": p, "error_code": code, "error_message": message}
                                          for p, (code, message) in partitions.items()]}
        if info is not None:
            ctx.shares.invalidate(group_id, info.topic_id)
    return Reply({"error_code": ErrorCode.none, "error_message": None,
                  "responses": [responses[t.topic_name] for t in request.topics if t.topic_name in responses]})
