"""ListConfigResources (key 74), v0-v1: the resources that have configs, as Kafka 4.1+ lists them
(KIP-1142; v0 is KIP-1000's ListClientMetricsResources).

v0 lists client-metrics subscriptions only. v1 takes resource types, an empty list meaning every
type Kafka supports there: GROUP (32), CLIENT_METRICS (16), BROKER_LOGGER (8), BROKER (4) and TOPIC
(2), listed in that order; a type outside those fails the whole request with UNSUPPORTED_VERSION and
no resources. Client-metrics subscriptions are the client telemetry subscriptions (KIP-714,
minibroker.telemetry); there are no group configs (a group is listed here only for configs of its
own, which groups cannot have here); the broker lists itself as a broker and as a broker logger, by
node id, and every topic. Its Kafka 4.4 clients throttle themselves (AbstractResponse's default: the
response has a throttle time).

Authorization: DESCRIBE_CONFIGS on the cluster, else CLUSTER_AUTHORIZATION_FAILED (31).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from minibroker.auth import AclOperation
from minibroker.handlers import Reply, handler
from minibroker.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from minibroker.context import RequestContext

TOPIC, BROKER, BROKER_LOGGER, CLIENT_METRICS, GROUP = 2, 4, 8, 16, 32
SUPPORTED = (GROUP, CLIENT_METRICS, BROKER_LOGGER, BROKER, TOPIC)  # also the order of the answer


def _resources(ctx: RequestContext, resource_type: int) -> list[str]:
    if resource_type in (BROKER, BROKER_LOGGER):
        return [str(node) for node in ctx.cluster.broker_ids()]
    if resource_type == TOPIC:
        return [info.name for info in ctx.logs.topics()]
    if resource_type == GROUP:  # the groups that have configs of their own (minibroker.group_configs)
        return sorted(ctx.group_configs.overrides)
    if resource_type == CLIENT_METRICS:  # client telemetry subscriptions (KIP-714)
        return ctx.client_metrics.names()
    return []


@handler(74, 0, 1)
async def list_config_resources(ctx: RequestContext, request: Any) -> Reply:
    if not ctx.authorize_cluster(AclOperation.DESCRIBE_CONFIGS):
        return Reply({"error_code": ErrorCode.cluster_authorization_failed, "config_resources": ()})
    if ctx.version == 0:
        wanted = {CLIENT_METRICS}
    else:
        wanted = set(request.resource_types) or set(SUPPORTED)
        if not wanted <= set(SUPPORTED):
            return Reply({"error_code": ErrorCode.unsupported_version, "config_resources": ()})
    resources = [
        {"resource_name": name, "resource_type": resource_type}
        for resource_type in SUPPORTED if resource_type in wanted
        for name in _resources(ctx, resource_type)
    ]
    return Reply({"error_code": ErrorCode.none, "config_resources": resources})
