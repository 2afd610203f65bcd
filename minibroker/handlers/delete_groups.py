"""DeleteGroups (key 42), v0-v2: remove Empty groups and their committed offsets.

Each group is answered on its own: GROUP_ID_NOT_FOUND for an unknown group, NON_EMPTY_GROUP while it
has members, INVALID_GROUP_ID for an empty id. Deletion writes tombstones to `__consumer_offsets`.

Authorization: DELETE on each group, else it is answered GROUP_AUTHORIZATION_FAILED (30).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from minibroker.auth import AclOperation, ResourceType
from minibroker.handlers import Reply, handler
from minibroker.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from minibroker.context import RequestContext


@handler(42, 0, 2, client_throttles_from=1)
async def delete_groups(ctx: RequestContext, request: Any) -> Reply:
    names = list(dict.fromkeys(request.groups_names))
    allowed = ctx.filter_authorized(AclOperation.DELETE, ResourceType.GROUP, names)
    results = ctx.groups.delete_groups(ctx.clock.monotonic(), allowed)
    denied = ErrorCode.group_authorization_failed
    return Reply({
        "results": [{"group_id": g, "error_code": results.get(g, denied)} for g in request.groups_names],
    })
