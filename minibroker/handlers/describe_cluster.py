"""DescribeCluster (key 60), v0-v2: one broker, which is also the controller.

endpoint_type 2 (controllers, v1+) answers the same single node; fenced brokers do not exist here.
Its Kafka 4.4 clients throttle themselves (AbstractResponse's default: the response has a throttle
time).

Authorization: none (Kafka checks nothing); the cluster's authorized operations are 0 without
DESCRIBE on the cluster.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from minibroker.handlers import Reply, handler
from minibroker.auth import AclOperation, CLUSTER_RESOURCE, NO_AUTHORIZED_OPERATIONS, ResourceType
from minibroker.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from minibroker.context import RequestContext


def _cluster_operations(ctx: RequestContext, asked: bool) -> int:
    """Kafka's AuthHelper.computeDescribeClusterResponse: 0 without DESCRIBE on the cluster."""
    if not asked:
        return NO_AUTHORIZED_OPERATIONS
    if not ctx.authorize_cluster(AclOperation.DESCRIBE):
        return 0
    return ctx.authorized_operations(ResourceType.CLUSTER, CLUSTER_RESOURCE)


@handler(60, 0, 2)
async def describe_cluster(ctx: RequestContext, request: Any) -> Reply:
    return Reply({
        "error_code": ErrorCode.none,
        "error_message": None,
        "endpoint_type": getattr(request, "endpoint_type", 1),
        "cluster_id": ctx.cluster.cluster_id,
        "controller_id": ctx.cluster.controller_id,
        "brokers": [{**b, "is_fenced": False} for b in ctx.cluster.brokers(ctx.connection.listener)],
        "cluster_authorized_operations": _cluster_operations(ctx, request.include_cluster_authorized_operations),
    })
