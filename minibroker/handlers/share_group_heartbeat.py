"""ShareGroupHeartbeat (key 76), v1: KIP-932's share group protocol, the one call a share consumer
makes to join its share group, stay in it, learn its assignment and leave (Java's KafkaShareConsumer,
librdkafka's share consumer).

Behaviour is the coordinator's (minibroker/groups/share_manager.py). As Kafka's KafkaApis checks
first: with share.version below 1 the answer is UNSUPPORTED_VERSION; READ on the group, else
GROUP_AUTHORIZATION_FAILED; a member id that is empty or longer than 36 characters is
INVALID_REQUEST ("Invalid member id in the request."); DESCRIBE on every subscribed topic, else
TOPIC_AUTHORIZATION_FAILED. Version 0 (Kafka 4.0's early access) is gone from Kafka 4.4 and not
served. Its Kafka 4.4 clients throttle themselves (AbstractResponse's default: the response has a
throttle time)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from minibroker.auth import AclOperation, ResourceType
from minibroker.groups.share_group import SHARE
from minibroker.groups.share_manager import ShareGroupHeartbeatRequest, ShareGroupManager
from minibroker.handlers import Reply, handler
from minibroker.handlers.common import group_coordinator
from minibroker.handlers.join_group import client_host
from minibroker.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from minibroker.context import RequestContext


def share_groups_enabled(ctx: RequestContext) -> bool:
    """The share.version feature is finalized at 1 or more (Kafka's isShareGroupProtocolEnabled)."""
    return ctx.features.share_version >= 1


def share_manager(ctx: RequestContext) -> ShareGroupManager:
    manager = ctx.groups.manager(SHARE)
    assert isinstance(manager, ShareGroupManager)
    return manager


def _error(code: ErrorCode, message: str | None = None) -> Reply:
    return Reply({"error_code": code, "error_message": message, "member_id": None, "member_epoch": 0,
                  "heartbeat_interval": 0, "assignment": None})


# KIP-219: Kafka 4.4 clients wait out the throttle time of every response that carries one (KAFKA-20828).
@handler(76, 1, 1, client_throttles_from=1)
@group_coordinator
async def share_group_heartbeat(ctx: RequestContext, request: Any) -> Reply:
    if not share_groups_enabled(ctx):
        return _error(ErrorCode.unsupported_version)
    if not ctx.authorize(AclOperation.READ, ResourceType.GROUP, request.group_id):
        return _error(ErrorCode.group_authorization_failed)
    if not request.member_id or len(request.member_id) > 36:
        return _error(ErrorCode.invalid_request, "Invalid member id in the request.")
    topics = request.subscribed_topic_names
    if topics and len(ctx.filter_authorized(AclOperation.DESCRIBE, ResourceType.TOPIC, set(topics))) < len(set(topics)):
        return _error(ErrorCode.topic_authorization_failed)
    manager = share_manager(ctx)
    heartbeat = ShareGroupHeartbeatRequest(
        group_id=request.group_id, member_id=request.member_id, member_epoch=request.member_epoch,
        client_id=ctx.client_id or "", client_host=client_host(ctx), rack_id=request.rack_id,
        subscribed_topic_names=None if topics is None else tuple(topics))
    result = ctx.groups.apply(lambda now, now_ms: manager.heartbeat(now, now_ms, heartbeat))
    assignment = None
    if result.assignment is not None:
        assignment = {"topic_partitions": [{"topic_id": topic_id, "partitions": partitions}
                                           for topic_id, partitions in result.assignment.items()]}
    return Reply({
        "error_code": result.error,
        "error_message": result.message,
        "member_id": result.member_id,
        "member_epoch": result.member_epoch,
        "heartbeat_interval": result.heartbeat_interval_ms,
        "assignment": assignment,
    })
