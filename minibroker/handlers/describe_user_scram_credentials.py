"""DescribeUserScramCredentials (key 50), v0 (KIP-554): which SCRAM mechanisms each user has, with
their iteration counts (never a key). A null or empty user list means every user; per user,
RESOURCE_NOT_FOUND when it has no SCRAM credential and DUPLICATE_RESOURCE when named twice, as
Kafka's ScramImage.describe (see minibroker.scram_credentials).

Authorization: DESCRIBE on the cluster, else CLUSTER_AUTHORIZATION_FAILED (31), top-level and once
per user asked (without its name, as Kafka's getErrorResponse).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from minibroker.auth import AclOperation
from minibroker.handlers import Reply, handler
from minibroker.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from minibroker.context import RequestContext


@handler(50, 0, 0, client_throttles_from=0)
async def describe_user_scram_credentials(ctx: RequestContext, request: Any) -> Reply:
    if not ctx.authorize_cluster(AclOperation.DESCRIBE):
        denied, message = ErrorCode.cluster_authorization_failed, None  # Kafka's ApiError leaves it out
        return Reply({"error_code": denied, "error_message": message,
                      "results": [{"user": "", "error_code": denied, "error_message": message, "credential_infos": []}
                                  for _ in request.users or ()]})
    names = [user.name for user in request.users] if request.users else None
    results = ctx.auth.scram_credentials.describe(names)
    return Reply({"error_code": ErrorCode.none, "error_message": None, "results": results})
