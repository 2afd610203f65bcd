"""CreateAcls (key 30), v1-v3: add ACL bindings (Kafka's AclApis.handleCreateAcls and
AclControlManager.createAcls).

A binding with ANY for its resource type, operation or permission, or ANY or MATCH for its pattern
type, fails the whole request (UNKNOWN_SERVER_ERROR for every binding, no message: Kafka's
ResourcePattern and AccessControlEntry throw). Otherwise each binding is answered on its own:
INVALID_REQUEST (42) for an empty name, a CLUSTER resource not named kafka-cluster, or a principal
not of the form Type:name; else none, also for a binding that exists already (it is not added twice). The bindings are on disk before the answer
(minibroker.acls). A code that is no enum value at all (UNKNOWN) is a malformed request, which closes
the connection, as Kafka's CreateAclsRequest refuses to parse it. Without an authorizer:
SECURITY_DISABLED (54) for each. Needs ALTER on the cluster, else CLUSTER_AUTHORIZATION_FAILED (31).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from minibroker.acls import OPERATION_ANY, RESOURCE_ANY, AclBinding, PatternType, PermissionType, known_codes
from minibroker.auth import AclOperation
from minibroker.handlers import Reply, handler
from minibroker.protocol.errors import ErrorCode
from minibroker.protocol.messages import ProtocolError

if TYPE_CHECKING:
    from minibroker.context import RequestContext


@handler(30, 1, 3, client_throttles_from=1)
async def create_acls(ctx: RequestContext, request: Any) -> Reply:
    for c in request.creations:
        if not known_codes(c.resource_type, c.resource_pattern_type, c.operation, c.permission_type):
            raise ProtocolError(f"CreateAcls with unknown elements: {c}")
    if not ctx.authorize_cluster(AclOperation.ALTER):
        return _all(request, ErrorCode.cluster_authorization_failed, "Cluster authorization failed.")
    authorizer = ctx.auth.authorizer
    if authorizer is None or not hasattr(authorizer, "create_acls"):
        return _all(request, ErrorCode.security_disabled, "No Authorizer is configured.")
    if any(_not_a_binding(c) for c in request.creations):
        # Kafka's ResourcePattern and AccessControlEntry refuse ANY (and MATCH) outright: the request
        # fails as a whole, UNKNOWN_SERVER_ERROR without a message.
        return _all(request, ErrorCode.unknown_server_error, None)
    bindings = [AclBinding(c.resource_type, c.resource_name, c.resource_pattern_type, c.principal, c.host,
                           c.operation, c.permission_type) for c in request.creations]
    results = authorizer.create_acls(bindings)
    return Reply({"results": [{"error_code": ErrorCode.invalid_request if error else ErrorCode.none,
                               "error_message": error} for error in results]})


def _not_a_binding(creation: Any) -> bool:
    return (creation.resource_type == RESOURCE_ANY or creation.resource_pattern_type in (PatternType.ANY, PatternType.MATCH)
            or creation.operation == OPERATION_ANY or creation.permission_type == PermissionType.ANY)


def _all(request: Any, code: ErrorCode, message: str | None) -> Reply:
    return Reply({"results": [{"error_code": code, "error_message": message} for _ in request.creations]})
