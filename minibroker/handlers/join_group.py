"""JoinGroup (key 11), v0-v9: join or rejoin a classic group; parked until the join phase ends.

Behaviour is the coordinator's (minibroker.groups). Version quirks: v0 has no rebalance timeout (the
session timeout stands in, as in Kafka); v4+ without a member id gets MEMBER_ID_REQUIRED and a fresh
id to rejoin with (KIP-394), unless the member is static (group.instance.id, v5+); v7+ answers the
protocol type and a nullable protocol name (older versions get "" when there is none); v9+ may tell a
rejoining static leader to skip the assignment.

Authorization: READ on the group, else GROUP_AUTHORIZATION_FAILED (30) (Kafka's
handleJoinGroupRequest).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from minibroker.groups.coordinator import DelayedJoin
from minibroker.auth import AclOperation, ResourceType
from minibroker.handlers import Reply, handler
from minibroker.handlers.common import group_coordinator
from minibroker.protocol.errors import ErrorCode
from minibroker.protocol.entities import to_ms

if TYPE_CHECKING:
    from minibroker.context import RequestContext


def client_host(ctx) -> str:
    """Kafka reports the client's address as "/<ip>"."""
    return "/" + ctx.connection.peer.rsplit(":", 1)[0]


@handler(11, 0, 9, client_throttles_from=3)
@group_coordinator
async def join_group(ctx: RequestContext, request: Any) -> Reply:
    version = ctx.version
    groups = ctx.groups
    if not ctx.authorize(AclOperation.READ, ResourceType.GROUP, request.group_id):
        return Reply({"error_code": ErrorCode.group_authorization_failed, "generation_id": -1, "protocol_type": None,
                      "protocol_name": None if version >= 7 else "", "leader": "", "skip_assignment": False,
                      "member_id": "", "members": []})
    session_timeout_ms = to_ms(request.session_timeout)
    rebalance_timeout = getattr(request, "rebalance_timeout", None)
    rebalance_timeout_ms = session_timeout_ms if rebalance_timeout is None else to_ms(rebalance_timeout)
    pending = groups.join_group(
        ctx.clock.monotonic(),
        group_id=request.group_id,
        member_id=request.member_id,
        group_instance_id=getattr(request, "group_instance_id", None),
        client_id=ctx.client_id,
        client_host=client_host(ctx),
        session_timeout_ms=session_timeout_ms,
        rebalance_timeout_ms=rebalance_timeout_ms,
        protocol_type=request.protocol_type,
        protocols=[(p.name, p.metadata) for p in request.protocols],
        require_known_member_id=version >= 4,
        supports_skip_assignment=version >= 9,
        reason=getattr(request, "reason", None),
    )
    result = await groups.wait_for(pending, request.group_id, DelayedJoin)
    protocol_name = result.protocol_name if version >= 7 else (result.protocol_name or "")
    return Reply({
        "error_code": result.error,
        "generation_id": result.generation_id,
        "protocol_type": result.protocol_type,
        "protocol_name": protocol_name,
        "leader": result.leader,
        "skip_assignment": result.skip_assignment,
        "member_id": result.member_id,
        "members": [
            {"member_id": member_id, "group_instance_id": instance_id, "metadata": metadata}
            for member_id, instance_id, metadata in result.members
        ],
    })
