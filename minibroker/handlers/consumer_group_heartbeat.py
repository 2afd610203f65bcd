"""ConsumerGroupHeartbeat (key 68), v0-v1: KIP-848's consumer group protocol, the one call a member
of a consumer group makes to join, stay, reconcile its assignment and leave (Java's
group.protocol=consumer, librdkafka's likewise).

Behaviour is the coordinator's (minibroker/groups/consumer_manager.py). Version quirks: v0 lets the
coordinator choose the member id of a joining member (an empty id); from v1 (KIP-1082) the member
generates it and an empty one is INVALID_REQUEST; v1 adds SubscribedTopicRegex. An error response
carries the code and Kafka's message only. Without `consumer` in
group.coordinator.rebalance.protocols the answer is UNSUPPORTED_VERSION, as Kafka's with the
protocol disabled, which tells Java's consumer to use group.protocol=classic. Its Kafka 4.4 clients
throttle themselves (AbstractResponse's default: the response has a throttle time).

Authorization (Kafka's handleConsumerGroupHeartbeat, KAFKA-18813): READ on the group, else
GROUP_AUTHORIZATION_FAILED (30); DESCRIBE on each subscribed topic name, else
TOPIC_AUTHORIZATION_FAILED (29) naming them. (Kafka also leaves the topics the member may not
describe out of a regex subscription; here a regex subscribes to every topic it matches.)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from minibroker.groups.api import ConsumerGroupHeartbeatRequest
from minibroker.auth import AclOperation, ResourceType
from minibroker.handlers import Reply, handler
from minibroker.handlers.common import group_coordinator
from minibroker.protocol.errors import ErrorCode
from minibroker.handlers.join_group import client_host
from minibroker.protocol.entities import to_ms

if TYPE_CHECKING:
    from minibroker.context import RequestContext


def _refused(ctx: RequestContext, request: Any) -> tuple[ErrorCode, str | None] | None:
    """READ on the group, then DESCRIBE on every subscribed topic name (KAFKA-18813)."""
    if not ctx.authorize(AclOperation.READ, ResourceType.GROUP, request.group_id):
        return ErrorCode.group_authorization_failed, None
    names = request.subscribed_topic_names
    if names:
        allowed = set(ctx.filter_authorized(AclOperation.DESCRIBE, ResourceType.TOPIC, names))
        unauthorized = [name for name in names if name not in allowed]
        if unauthorized:
            return ErrorCode.topic_authorization_failed, f"The following topics are unauthorized: {', '.join(unauthorized)}"
    return None


@handler(68, 0, 1)
@group_coordinator
async def consumer_group_heartbeat(ctx: RequestContext, request: Any) -> Reply:
    owned = request.topic_partitions
    groups = ctx.groups
    denied = _refused(ctx, request)
    if denied is not None:
        return Reply({"error_code": denied[0], "error_message": denied[1], "member_id": None, "member_epoch": 0,
                      "heartbeat_interval": 0, "assignment": None})
    result = groups.consumer_group_heartbeat(ctx.clock.monotonic(), ConsumerGroupHeartbeatRequest(
        group_id=request.group_id,
        member_id=request.member_id,
        member_epoch=request.member_epoch,
        client_id=ctx.client_id or "",
        client_host=client_host(ctx),
        instance_id=request.instance_id,
        rack_id=request.rack_id,
        rebalance_timeout_ms=to_ms(request.rebalance_timeout),
        subscribed_topic_names=request.subscribed_topic_names,
        subscribed_topic_regex=getattr(request, "subscribed_topic_regex", None),
        server_assignor=request.server_assignor,
        owned=None if owned is None else {tp.topic_id: tuple(tp.partitions) for tp in owned},
        api_version=ctx.version,
    ))
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
