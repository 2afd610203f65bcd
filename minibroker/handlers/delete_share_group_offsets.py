"""DeleteShareGroupOffsets (key 92), v0: delete a share group's share-partition state of some topics
(Java's Admin.deleteShareGroupOffsets, kafka-share-groups --delete-offsets): the group reads them
from share.auto.offset.reset again when it next subscribes.

As Kafka 4.4: UNSUPPORTED_VERSION with share.version below 1, GROUP_AUTHORIZATION_FAILED without
DELETE on the group, INVALID_GROUP_ID for an empty id (top-level); GROUP_ID_NOT_FOUND for an unknown
group or one of another type, NON_EMPTY_GROUP while it has members (top-level, with Kafka's
messages); per topic TOPIC_AUTHORIZATION_FAILED without READ on it, UNKNOWN_TOPIC_OR_PARTITION for
an unknown topic or one without state ("There is no offset information to delete.").
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
@handler(92, 0, 0, client_throttles_from=0)
@group_coordinator
async def delete_share_group_offsets(ctx: RequestContext, request: Any) -> Reply:
    if not share_groups_enabled(ctx):
        return _top_level(ErrorCode.unsupported_version, "The version of API is not supported.")
    group_id = request.group_id
    if not ctx.authorize(AclOperation.DELETE, ResourceType.GROUP, group_id):
        return _top_level(ErrorCode.group_authorization_failed,
                          "Not authorized to access group: Group authorization failed.")
    if not group_id:
        return _top_level(ErrorCode.invalid_group_id, "The configured groupId is invalid.")
    responses = []
    allowed = []
    for topic in request.topics:
        if not ctx.authorize(AclOperation.READ, ResourceType.TOPIC, topic.topic_name):
            responses.append({"topic_name": topic.topic_name, "topic_id": None,
                              "error_code": ErrorCode.topic_authorization_failed,
                              "error_message": "Topic authorization failed."})
        else:
            allowed.append(topic.topic_name)
    manager = share_manager(ctx)
    try:
        results = ctx.groups.apply(lambda now, now_ms: manager.delete_offsets(now_ms, group_id, allowed))
    except Refused as refused:
        return _top_level(refused.error, refused.message)
    for name, (topic_id, code, message) in results.items():
        responses.append({"topic_name": name, "topic_id": topic_id, "error_code": code, "error_message": message})
        if topic_id is not None:
            ctx.shares.invalidate(group_id, topic_id)
    return Reply({"error_code": ErrorCode.none, "error_message": None, "responses": responses})
