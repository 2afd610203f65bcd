"""ConsumerGroupDescribe (key 69), v0-v1: KIP-848 consumer groups with their epochs, assignor and
members, each member's current and target assignment (what Java's Admin.describeConsumerGroups
asks first; it falls back to DescribeGroups for a group this answers GROUP_ID_NOT_FOUND, a classic
one).

Errors per group, with Kafka's messages: INVALID_GROUP_ID for an empty id, GROUP_ID_NOT_FOUND for an
unknown group ("Group g not found.") or a classic one ("Group g is not a consumer group."). Topics
are named by id and by name; a deleted topic is left out of an assignment, as Kafka does. v1 adds
each member's type (1: consumer protocol; classic-protocol members do not exist here). The
authorized operations (KIP-430) are the group operations minibroker.auth allows: all of them without
an authorizer. Its Kafka 4.4 clients throttle themselves (AbstractResponse's default: the response
has a throttle time).

Authorization (Kafka's handleConsumerGroupDescribe): DESCRIBE on each group, else
GROUP_AUTHORIZATION_FAILED (30) (these come first, as in Kafka); a group with a topic the principal
may not describe (subscribed, assigned or to be assigned) is answered TOPIC_AUTHORIZATION_FAILED
(29), its members not shown (KAFKA-18813).
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any, Mapping

from minibroker.handlers import Reply, handler
from minibroker.handlers.common import group_coordinator
from minibroker.auth import AclOperation, NO_AUTHORIZED_OPERATIONS, ResourceType
from minibroker.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from minibroker.context import RequestContext
    from minibroker.storage.manager import LogManager

CONSUMER_MEMBER = 1  # MemberType: -1 unknown, 0 classic protocol, 1 consumer protocol


def _assignment(logs: LogManager, assignment: Mapping[uuid.UUID, tuple[int, ...]]) -> dict:
    parts = []
    for topic_id, partitions in assignment.items():
        info = logs.topic_by_id(topic_id)
        if info is not None:
            parts.append({"topic_id": topic_id, "topic_name": info.name, "partitions": partitions})
    return {"topic_partitions": parts}


def _refused(group_id: str, code: ErrorCode) -> dict:
    return {"error_code": code, "error_message": None, "group_id": group_id, "group_state": "", "group_epoch": 0,
            "assignment_epoch": 0, "assignor_name": "", "members": [], "authorized_operations": NO_AUTHORIZED_OPERATIONS}


def _topics_describable(ctx: RequestContext, described: Any) -> bool:
    """KAFKA-18813: a group whose members hold or subscribe to a topic the principal may not describe
    is answered TOPIC_AUTHORIZATION_FAILED, its members not shown."""
    names: set[str] = set()
    for member in described.members:
        names.update(member.subscribed_topic_names or ())
        for assignment in (member.assignment, member.target_assignment):
            for topic_id in assignment:
                info = ctx.logs.topic_by_id(topic_id)
                if info is not None:
                    names.add(info.name)
    return len(ctx.filter_authorized(AclOperation.DESCRIBE, ResourceType.TOPIC, sorted(names))) == len(names)


@handler(69, 0, 1)
@group_coordinator
async def consumer_group_describe(ctx: RequestContext, request: Any) -> Reply:
    groups, logs = ctx.groups, ctx.logs
    if not groups.config.consumer_protocol_enabled:
        return Reply({"groups": [
            {"error_code": ErrorCode.unsupported_version, "group_id": g, "group_state": "", "group_epoch": 0,
             "assignment_epoch": 0, "assignor_name": "", "members": []} for g in request.group_ids]})
    described = []
    allowed = ctx.filter_authorized(AclOperation.DESCRIBE, ResourceType.GROUP, request.group_ids)
    for group_id in request.group_ids:
        if group_id not in allowed:
            described.append(_refused(group_id, ErrorCode.group_authorization_failed))
    for d in groups.consumer_group_describe(allowed):
        if not d.error and not _topics_describable(ctx, d):
            described.append(_refused(d.group_id, ErrorCode.topic_authorization_failed))
            continue
        described.append({
            "error_code": d.error,
            "error_message": d.message,
            "group_id": d.group_id,
            "group_state": d.state,
            "group_epoch": d.group_epoch,
            "assignment_epoch": d.assignment_epoch,
            "assignor_name": d.assignor,
            "members": [
                {"member_id": m.member_id, "instance_id": m.instance_id, "rack_id": m.rack_id,
                 "member_epoch": m.member_epoch, "client_id": m.client_id, "client_host": m.client_host,
                 "subscribed_topic_names": m.subscribed_topic_names,
                 "subscribed_topic_regex": m.subscribed_topic_regex or "",  # Kafka: "" without one
                 "assignment": _assignment(logs, m.assignment),
                 "target_assignment": _assignment(logs, m.target_assignment),
                 "member_type": CONSUMER_MEMBER}
                for m in d.members
            ],
            "authorized_operations": ctx.authorized_operations(ResourceType.GROUP, d.group_id)
            if request.include_authorized_operations and not d.error else NO_AUTHORIZED_OPERATIONS,
        })
    return Reply({"groups": described})
