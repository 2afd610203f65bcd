"""ListGroups (key 16), v0-v5: every group this broker coordinates (all of them).

v4+ filters by state (case-insensitive, as Kafka); v5+ by type: "classic", or "consumer" for a
KIP-848 consumer group (its protocol type is "consumer" too).

Authorization (Kafka's handleListGroupsRequest): with DESCRIBE on the cluster every group is listed,
else only the groups the principal may DESCRIBE.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from minibroker.auth import AclOperation, ResourceType
from minibroker.handlers import Reply, handler
from minibroker.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from minibroker.context import RequestContext


@handler(16, 0, 5, client_throttles_from=2)
async def list_groups(ctx: RequestContext, request: Any) -> Reply:
    overviews = ctx.groups.list_groups(
        getattr(request, "states_filter", ()), getattr(request, "types_filter", ())
    )
    if not ctx.authorize_cluster(AclOperation.DESCRIBE, log_if_denied=False):
        overviews = [g for g in overviews
                     if ctx.authorize(AclOperation.DESCRIBE, ResourceType.GROUP, g.group_id, log_if_denied=False)]
    return Reply({
        "error_code": ErrorCode.none,
        "groups": [
            {"group_id": g.group_id, "protocol_type": g.protocol_type, "group_state": g.state,
             "group_type": g.group_type}
            for g in overviews
        ],
    })
