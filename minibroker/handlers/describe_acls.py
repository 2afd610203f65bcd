"""DescribeAcls (key 29), v1-v3: the ACL bindings a filter matches (Kafka's AclApis.handleDescribeAcls).

The filter matches as Kafka's AclBindingFilter (minibroker.acls): resource type, name (null: any),
pattern type (ANY, MATCH: the patterns that apply to the name, LITERAL, PREFIXED), principal and host
(null: any), operation and permission (ANY). Bindings are answered grouped by resource pattern.
Without an authorizer: SECURITY_DISABLED (54) "No Authorizer is configured on the broker". Needs
DESCRIBE on the cluster, else CLUSTER_AUTHORIZATION_FAILED (31).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from minibroker.acls import AclBindingFilter
from minibroker.auth import AclOperation
from minibroker.handlers import Reply, handler
from minibroker.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from minibroker.context import RequestContext


@handler(29, 1, 3, client_throttles_from=1)
async def describe_acls(ctx: RequestContext, request: Any) -> Reply:
    if not ctx.authorize_cluster(AclOperation.DESCRIBE):
        return Reply({"error_code": ErrorCode.cluster_authorization_failed,
                      "error_message": "Cluster authorization failed.", "resources": []})
    authorizer = ctx.auth.authorizer
    if authorizer is None or not hasattr(authorizer, "acls"):
        return Reply({"error_code": ErrorCode.security_disabled,
                      "error_message": "No Authorizer is configured on the broker", "resources": []})
    found = authorizer.acls(AclBindingFilter(
        request.resource_type_filter, request.resource_name_filter, request.pattern_type_filter,
        request.principal_filter, request.host_filter, request.operation, request.permission_type))
    resources: dict[tuple[int, str, int], list[dict[str, Any]]] = {}
    for binding in found:
        resources.setdefault((binding.resource_type, binding.name, binding.pattern_type), []).append(
            {"principal": binding.principal, "host": binding.host, "operation": binding.operation,
             "permission_type": binding.permission})
    return Reply({"error_code": ErrorCode.none, "error_message": None, "resources": [
        {"resource_type": kind, "resource_name": name, "pattern_type": pattern, "acls": acls}
        for (kind, name, pattern), acls in resources.items()]})
