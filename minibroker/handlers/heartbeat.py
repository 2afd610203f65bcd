"""Heartbeat (key 12), v0-v4: keeps a member's session alive.

REBALANCE_IN_PROGRESS while the group prepares a rebalance tells the member to rejoin; a stale
generation gets ILLEGAL_GENERATION, an unknown member UNKNOWN_MEMBER_ID, a fenced static member
FENCED_INSTANCE_ID (v3+ carries group.instance.id).

Authorization: READ on the group, else GROUP_AUTHORIZATION_FAILED (30).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from minibroker.auth import AclOperation, ResourceType
from minibroker.handlers import Reply, handler
from minibroker.handlers.common import group_coordinator
from minibroker.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from minibroker.context import RequestContext


@handler(12, 0, 4, client_throttles_from=2)
@group_coordinator
async def heartbeat(ctx: RequestContext, request: Any) -> Reply:
    if not ctx.authorize(AclOperation.READ, ResourceType.GROUP, request.group_id):
        return Reply({"error_code": ErrorCode.group_authorization_failed})
    error = ctx.groups.heartbeat(
        ctx.clock.monotonic(),
        group_id=request.group_id,
        generation_id=request.generation_id,
        member_id=request.member_id,
        group_instance_id=getattr(request, "group_instance_id", None),
    )
    return Reply({"error_code": error})
