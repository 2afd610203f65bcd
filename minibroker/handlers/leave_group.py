"""LeaveGroup (key 13), v0-v5: members leave at once instead of waiting for their session to end.

v0-v2 name one member; v3+ a batch of members, each answered on its own (KIP-345), where an empty
member id with a group.instance.id removes that static member (the admin path). v5 adds a reason.

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


@handler(13, 0, 5, client_throttles_from=2)
@group_coordinator
async def leave_group(ctx: RequestContext, request: Any) -> Reply:
    groups = ctx.groups
    if not ctx.authorize(AclOperation.READ, ResourceType.GROUP, request.group_id):
        return Reply({"error_code": ErrorCode.group_authorization_failed, "members": []})
    batched = getattr(request, "members", None)
    if batched is None:
        error, errors = groups.leave_group(ctx.clock.monotonic(), request.group_id, [(request.member_id, None)])
        return Reply({"error_code": error or (errors[0] if errors else ErrorCode.none), "members": []})
    leaving = [(m.member_id, m.group_instance_id) for m in batched]
    error, errors = groups.leave_group(ctx.clock.monotonic(), request.group_id, leaving)
    members = [] if error else [
        {"member_id": member_id, "group_instance_id": instance_id, "error_code": code}
        for (member_id, instance_id), code in zip(leaving, errors)
    ]
    return Reply({"error_code": error, "members": members})
