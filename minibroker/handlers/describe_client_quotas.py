"""DescribeClientQuotas (key 48), v0-v1: the configured client quotas matching a filter.

Behaviour (Kafka's ClientQuotasImage.describe, via quotas.config.QuotaConfigStore): components
{entity_type, match_type 0 exact / 1 default / 2 any, match}; `strict` leaves out entities with
types the filter does not name. Errors are top-level (INVALID_REQUEST, or UNSUPPORTED_VERSION for an
unknown entity type) with a null entry list. Entity names are null for a default entity. Its Kafka
4.4 clients throttle themselves (AbstractResponse's default: the response has a throttle time).

Authorization: DESCRIBE_CONFIGS on the cluster, else CLUSTER_AUTHORIZATION_FAILED (31) with a null
entry list.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from minibroker.auth import AclOperation
from minibroker.handlers import Reply, handler
from minibroker.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from minibroker.context import RequestContext


@handler(48, 0, 1)
async def describe_client_quotas(ctx: RequestContext, request: Any) -> Reply:
    if not ctx.authorize_cluster(AclOperation.DESCRIBE_CONFIGS):
        return Reply({"error_code": ErrorCode.cluster_authorization_failed, "error_message": None, "entries": None})
    code, message, found = ctx.quotas.store.describe(
        [(c.entity_type, int(c.match_type), c.match) for c in request.components], bool(request.strict)
    )
    entries = None
    if code == ErrorCode.none:
        entries = [
            {
                "entity": [{"entity_type": t, "entity_name": n} for t, n in entity.entries],
                "values": [{"key": k, "value": float(v)} for k, v in sorted(values.items())],
            }
            for entity, values in found
        ]
    return Reply({"error_code": code, "error_message": message, "entries": entries})
