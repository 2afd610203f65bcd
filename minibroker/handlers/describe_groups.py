"""DescribeGroups (key 15), v0-v6: state, protocol and members of groups.

Member metadata and the protocol name are given only while the group is Stable (Kafka's rule);
assignments always. An unknown group, or a KIP-848 consumer group (ConsumerGroupDescribe describes
those), is described as Dead with no error before v6 and answered GROUP_ID_NOT_FOUND from v6
(KIP-1043), as Kafka 4 does. v3+ may ask for the authorized operations (KIP-430): the group
operations (READ, DELETE, DESCRIBE, DESCRIBE_CONFIGS, ALTER_CONFIGS) minibroker.auth allows, all of
them without an authorizer.

Authorization: DESCRIBE on each group, else it is answered GROUP_AUTHORIZATION_FAILED (30) (Kafka's
handleDescribeGroupsRequest).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from minibroker.handlers import Reply, handler
from minibroker.handlers.common import group_coordinator
from minibroker.auth import AclOperation, NO_AUTHORIZED_OPERATIONS, ResourceType
from minibroker.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from minibroker.context import RequestContext


def _dead(group_id: str, error: ErrorCode = ErrorCode.none, message: str | None = None) -> dict:
    return {"error_code": error, "error_message": message, "group_id": group_id, "group_state": "Dead",
            "protocol_type": "", "protocol_data": "", "members": [],
            "authorized_operations": NO_AUTHORIZED_OPERATIONS}


@handler(15, 0, 6, client_throttles_from=2)
@group_coordinator
async def describe_groups(ctx: RequestContext, request: Any) -> Reply:
    groups = ctx.groups
    include_operations = getattr(request, "include_authorized_operations", False)
    described = []
    for group_id in request.groups:
        if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
            # Kafka's DescribeGroupsResponse.groupError: no state at all.
            described.append({**_dead(group_id, ErrorCode.group_authorization_failed), "group_state": ""})
            continue
        if not group_id:
            described.append(_dead(group_id, ErrorCode.invalid_group_id))
            continue
        description = groups.describe_group(group_id)
        if description is None:
            if ctx.version >= 6:
                what = "is not a classic group" if groups.group_type(group_id) else "not found"
                described.append(_dead(group_id, ErrorCode.group_id_not_found, f"Group {group_id} {what}."))
            else:
                described.append(_dead(group_id))
            continue
        described.append({
            "error_code": ErrorCode.none,
            "error_message": None,
            "group_id": group_id,
            "group_state": description.state,
            "protocol_type": description.protocol_type,
            "protocol_data": description.protocol,
            "members": [
                {"member_id": m.member_id, "group_instance_id": m.group_instance_id,
                 "client_id": m.client_id, "client_host": m.client_host,
                 "member_metadata": m.metadata, "member_assignment": m.assignment}
                for m in description.members
            ],
            "authorized_operations": ctx.authorized_operations(ResourceType.GROUP, group_id)
            if include_operations else NO_AUTHORIZED_OPERATIONS,
        })
    return Reply({"groups": described})
