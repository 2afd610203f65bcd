"""ShareGroupDescribe (key 77), v1: KIP-932 share groups with their epochs, assignor ("simple") and
members, each member's assignment with topic ids and names (Java's Admin.describeShareGroups,
kafka-share-groups --describe).

Errors per group, with Kafka's messages: GROUP_AUTHORIZATION_FAILED without DESCRIBE on the group,
GROUP_ID_NOT_FOUND for an unknown group ("Group g not found.") or one of another type ("Group g is
not a share group."). With share.version below 1 every group is answered UNSUPPORTED_VERSION. A
deleted topic is left out of an assignment. The authorized operations (KIP-430) are the group
operations minibroker.auth allows.

Authorization (Kafka's handleShareGroupDescribe): DESCRIBE on each group, else
GROUP_AUTHORIZATION_FAILED (30); a group with a topic the principal may not describe (subscribed or
assigned) is answered TOPIC_AUTHORIZATION_FAILED (29), its members not shown (KAFKA-18813).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from minibroker.auth import NO_AUTHORIZED_OPERATIONS, AclOperation, ResourceType
from minibroker.handlers import Reply, handler
from minibroker.handlers.common import group_coordinator
from minibroker.handlers.consumer_group_describe import _assignment
from minibroker.handlers.share_group_heartbeat import share_groups_enabled, share_manager
from minibroker.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from minibroker.context import RequestContext


def _group(group_id: str, code: ErrorCode, message: str | None = None) -> dict:
    return {"error_code": code, "error_message": message, "group_id": group_id, "group_state": "",
            "group_epoch": 0, "assignment_epoch": 0, "assignor_name": "", "members": [],
            "authorized_operations": NO_AUTHORIZED_OPERATIONS}


def _topics_describable(ctx: RequestContext, described: Any) -> bool:
    names: set[str] = set()
    for member in described.members:
        names.update(member.subscribed_topic_names or ())
        for topic_id in member.assignment:
            info = ctx.logs.topic_by_id(topic_id)
            if info is not None:
                names.add(info.name)
    return len(ctx.filter_authorized(AclOperation.DESCRIBE, ResourceType.TOPIC, sorted(names))) == len(names)


# KIP-219: Kafka 4.4 clients wait out the throttle time of every response that carries one (KAFKA-20828).
@handler(77, 1, 1, client_throttles_from=1)
@group_coordinator
async def share_group_describe(ctx: RequestContext, request: Any) -> Reply:
    if not share_groups_enabled(ctx):
        return Reply({"groups": [_group(g, ErrorCode.unsupported_version) for g in request.group_ids]})
    allowed = [g for g in request.group_ids if ctx.authorize(AclOperation.DESCRIBE, ResourceType.GROUP, g)]
    described = {d.group_id: d for d in share_manager(ctx).describe(allowed)}
    groups = []
    for group_id in request.group_ids:
        d = described.get(group_id)
        if d is None:
            groups.append(_group(group_id, ErrorCode.group_authorization_failed))
            continue
        if d.error:
            groups.append(_group(group_id, d.error, d.message))
            continue
        if not _topics_describable(ctx, d):
            groups.append(_group(group_id, ErrorCode.topic_authorization_failed))
            continue
        groups.append({
            "error_code": ErrorCode.none, "error_message": None, "group_id": group_id, "group_state": d.state,
            "group_epoch": d.group_epoch, "assignment_epoch": d.assignment_epoch, "assignor_name": d.assignor,
            "members": [
                {"member_id": m.member_id, "rack_id": m.rack_id, "member_epoch": m.member_epoch,
                 "client_id": m.client_id, "client_host": m.client_host,
                 "subscribed_topic_names": m.subscribed_topic_names, "assignment": _assignment(ctx.logs, m.assignment)}
                for m in d.members],
            "authorized_operations": ctx.authorized_operations(ResourceType.GROUP, group_id)
            if request.include_authorized_operations else NO_AUTHORIZED_OPERATIONS,
        })
    return Reply({"groups": groups})
