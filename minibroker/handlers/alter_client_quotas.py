"""AlterClientQuotas (key 49), v0-v1: set or remove client quotas, live and persisted.

Behaviour (Kafka's ClientQuotaControlManager, via quotas.config.QuotaConfigStore): one result per
entity; an entity's changes apply all or none; INVALID_REQUEST with Kafka's message for an invalid
entity, key or value. Applied changes reach the quota managers at once (the next request of an
affected client sees the new limit) and are written to `client-quotas.json` in the data dir before
the response goes out. validate_only checks without applying. Its Kafka 4.4 clients throttle
themselves (AbstractResponse's default: the response has a throttle time). With `audit.enable`, the
entities altered are recorded in the audit stream with their new values
(minibroker.storage.audit_format).

Authorization: ALTER_CONFIGS on the cluster, else every entry is answered
CLUSTER_AUTHORIZATION_FAILED (31).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from minibroker.audit import quota_settings
from minibroker.auth import AclOperation
from minibroker.handlers import Reply, handler
from minibroker.protocol.errors import ErrorCode
from minibroker.quotas.callback import ClientQuotaEntity

if TYPE_CHECKING:
    from minibroker.context import RequestContext


@handler(49, 0, 1)
async def alter_client_quotas(ctx: RequestContext, request: Any) -> Reply:
    entries = [
        (
            [(e.entity_type, e.entity_name) for e in entry.entity],
            [(op.key, float(op.value), bool(op.remove)) for op in entry.ops],
        )
        for entry in request.entries
    ]
    if not ctx.authorize_cluster(AclOperation.ALTER_CONFIGS):
        denied = ErrorCode.cluster_authorization_failed
        return Reply({"entries": [{"error_code": denied, "error_message": "Cluster authorization failed.",
                                   "entity": [{"entity_type": t, "entity_name": n} for t, n in entity]}
                                  for entity, _ in entries]})
    results = ctx.quotas.alter(entries, bool(request.validate_only))
    audit = ctx.audit
    if audit is not None and not request.validate_only:
        store = ctx.quotas.store
        altered = [ClientQuotaEntity.from_pairs(entity) for entity, code, _ in results if code == ErrorCode.none]
        if altered:
            audit.record_quota_config(ctx.clock.now_ms(), [(e, store.quotas_for(e)) for e in altered],
                                      quota_settings(ctx.config), ctx)
    return Reply({
        "entries": [
            {
                "error_code": code,
                "error_message": message,
                "entity": [{"entity_type": t, "entity_name": n} for t, n in entity],
            }
            for entity, code, message in results
        ],
    })
