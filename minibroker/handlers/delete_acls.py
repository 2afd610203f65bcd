"""DeleteAcls (key 31), v1-v3: remove the ACL bindings each filter matches (Kafka's
AclApis.handleDeleteAcls and AclControlManager.deleteAcls).

Each filter is answered with the bindings it removed (a binding two filters match is reported by
both); a filter with an UNKNOWN resource or pattern type is INVALID_REQUEST "Unknown patternFilter.",
with an UNKNOWN operation or permission "Unknown entryFilter.". The removal is on disk before the
answer. Without an authorizer: SECURITY_DISABLED (54) for each filter. Needs ALTER on the cluster,
else CLUSTER_AUTHORIZATION_FAILED (31).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from minibroker.acls import AclBindingFilter
from minibroker.auth import AclOperation
from minibroker.handlers import Reply, handler
from minibroker.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from minibroker.context import RequestContext


@handler(31, 1, 3, client_throttles_from=1)
async def delete_acls(ctx: RequestContext, request: Any) -> Reply:
    if not ctx.authorize_cluster(AclOperation.ALTER):
        return _all(request, ErrorCode.cluster_authorization_failed, "Cluster authorization failed.")
    authorizer = ctx.auth.authorizer
    if authorizer is None or not hasattr(authorizer, "delete_acls"):
        return _all(request, ErrorCode.security_disabled, "No Authorizer is configured.")
    filters = [AclBindingFilter(f.resource_type_filter, f.resource_name_filter, f.pattern_type_filter,
                                f.principal_filter, f.host_filter, f.operation, f.permission_type)
               for f in request.filters]
    results = []
    for error, removed in authorizer.delete_acls(filters):
        results.append({
            "error_code": ErrorCode.invalid_request if error else ErrorCode.none,
            "error_message": error,
            "matching_acls": [{"error_code": ErrorCode.none, "error_message": None,
                               "resource_type": b.resource_type, "resource_name": b.name,
                               "pattern_type": b.pattern_type, "principal": b.principal, "host": b.host,
                               "operation": b.operation, "permission_type": b.permission} for b in removed],
        })
    return Reply({"filter_results": results})


def _all(request: Any, code: ErrorCode, message: str) -> Reply:
    return Reply({"filter_results": [{"error_code": code, "error_message": message, "matching_acls": []}
                                     for _ in request.filters]})
