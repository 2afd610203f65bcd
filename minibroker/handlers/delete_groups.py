"""DeleteGroups (key 42), v0-v2: remove Empty groups and their committed offsets.

Each group is answered on its own: GROUP_ID_NOT_FOUND for an unknown group, NON_EMPTY_GROUP while it
has members, INVALID_GROUP_ID for an empty id. Deletion writes tombstones to `__consumer_offsets`.
"""

from __future__ import annotations

from minibroker.handlers import handler


@handler(42, 0, 2)
async def delete_groups(ctx, request):
    results = ctx.broker.groups.delete_groups(ctx.broker.clock.monotonic(), request.groups_names)
    return {
        "throttle_time": 0,
        "results": [{"group_id": g, "error_code": results[g]} for g in request.groups_names],
    }
