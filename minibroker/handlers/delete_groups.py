"""DeleteGroups (key 42), v0-v2: remove Empty groups and their committed offsets.

Each group is answered on its own: GROUP_ID_NOT_FOUND for an unknown group, NON_EMPTY_GROUP while it
has members, INVALID_GROUP_ID for an empty id. Deletion writes tombstones to `__consumer_offsets`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from minibroker.handlers import Reply, handler

if TYPE_CHECKING:
    from minibroker.context import RequestContext


@handler(42, 0, 2, client_throttles_from=1)
async def delete_groups(ctx: RequestContext, request: Any) -> Reply:
    results = ctx.groups.delete_groups(ctx.clock.monotonic(), request.groups_names)
    return Reply({
        "results": [{"group_id": g, "error_code": results[g]} for g in request.groups_names],
    })
