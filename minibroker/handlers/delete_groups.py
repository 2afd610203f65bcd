"""DeleteGroups (key 42), v0-v2: remove Empty groups and their committed offsets.

Each group is answered on its own: GROUP_ID_NOT_FOUND for an unknown group, NON_EMPTY_GROUP while it
has members, INVALID_GROUP_ID for an empty id. Deletion writes tombstones to `__consumer_offsets`.
A share group's share-partition state goes with it (tombstones in `__share_group_state`, as Kafka's
group coordinator has the share coordinator delete it).

Authorization: DELETE on each group, else it is answered GROUP_AUTHORIZATION_FAILED (30).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from minibroker.auth import AclOperation, ResourceType
from minibroker.groups.share_group import SHARE
from minibroker.handlers import Reply, handler
from minibroker.handlers.common import group_coordinator
from minibroker.handlers.share_group_heartbeat import share_manager
from minibroker.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from minibroker.context import RequestContext


@handler(42, 0, 2, client_throttles_from=1)
@group_coordinator
async def delete_groups(ctx: RequestContext, request: Any) -> Reply:
    names = list(dict.fromkeys(request.groups_names))
    allowed = ctx.filter_authorized(AclOperation.DELETE, ResourceType.GROUP, names)
    groups = ctx.groups
    share_groups = {g: group for g in allowed
                    if (group := groups.groups.get(g)) is not None and group.group_type == SHARE}
    results = groups.delete_groups(ctx.clock.monotonic(), allowed)
    for group_id, group in share_groups.items():
        if results[group_id] == 0:
            share_manager(ctx).delete_share_state(group)  # type: ignore[arg-type]
            ctx.shares.invalidate(group_id)
    denied = ErrorCode.group_authorization_failed
    return Reply({
        "results": [{"group_id": g, "error_code": results.get(g, denied)} for g in request.groups_names],
    })
