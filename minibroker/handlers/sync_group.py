"""SyncGroup (key 14), v0-v5: the leader hands in the assignment, every member gets its share.

A follower that arrives before the leader is parked (DelayedSync) until the assignment arrives or the
group starts another rebalance (REBALANCE_IN_PROGRESS). v5+ requests carry the protocol type and
name, checked against the group's (INCONSISTENT_GROUP_PROTOCOL), and responses echo them.

Authorization: READ on the group, else GROUP_AUTHORIZATION_FAILED (30).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from minibroker.groups.coordinator import DelayedSync
from minibroker.auth import AclOperation, ResourceType
from minibroker.handlers import Reply, handler
from minibroker.handlers.common import group_coordinator
from minibroker.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from minibroker.context import RequestContext


@handler(14, 0, 5, client_throttles_from=2)
@group_coordinator
async def sync_group(ctx: RequestContext, request: Any) -> Reply:
    groups = ctx.groups
    if not ctx.authorize(AclOperation.READ, ResourceType.GROUP, request.group_id):
        return Reply({"error_code": ErrorCode.group_authorization_failed, "protocol_type": None, "protocol_name": None,
                      "assignment": b""})
    pending = groups.sync_group(
        ctx.clock.monotonic(),
        group_id=request.group_id,
        generation_id=request.generation_id,
        member_id=request.member_id,
        group_instance_id=getattr(request, "group_instance_id", None),
        protocol_type=getattr(request, "protocol_type", None),
        protocol_name=getattr(request, "protocol_name", None),
        assignments={a.member_id: a.assignment for a in request.assignments},
    )
    result = await groups.wait_for(pending, request.group_id, DelayedSync)
    return Reply({
        "error_code": result.error,
        "protocol_type": result.protocol_type,
        "protocol_name": result.protocol_name,
        "assignment": result.assignment,
    })
