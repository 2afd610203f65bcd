"""FindCoordinator (key 10), v0-v6: the coordinator of a group (key type 0) is the leader of the
group's partition of `__consumer_offsets`, of a transactional id (key type 1) the leader of its
partition of `__transaction_state` (the key's Java hashCode modulo the partition count, as Kafka's
coordinators pick it; minibroker.cluster.ClusterView.coordinator). While the topic does not exist
yet, the broker asked coordinates (it creates the topic when first needed); a partition without a
leader up is COORDINATOR_NOT_AVAILABLE, which clients retry. An empty transactional id, or a key type
Kafka does not have, is INVALID_REQUEST.

v4+ batches keys in coordinator_keys and answers one Coordinator each.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from minibroker.handlers import Reply, handler
from minibroker.protocol.errors import ErrorCode
from minibroker.storage.offsets_store import TOPIC as OFFSETS_TOPIC
from minibroker.storage.transaction_store import TOPIC as TRANSACTIONS_TOPIC

if TYPE_CHECKING:
    from minibroker.context import RequestContext

GROUP, TRANSACTION, SHARE = 0, 1, 2


@handler(10, 0, 6, client_throttles_from=2)
async def find_coordinator(ctx: RequestContext, request: Any) -> Reply:
    key_type = getattr(request, "key_type", GROUP)
    topic = {GROUP: OFFSETS_TOPIC, TRANSACTION: TRANSACTIONS_TOPIC}.get(key_type)

    def answer(key: str) -> dict[str, Any]:
        if key_type not in (GROUP, TRANSACTION, SHARE) or (key_type == TRANSACTION and not key):
            why = "an empty transactional id" if key_type == TRANSACTION else f"unknown key type {key_type}"
            return {"error_code": ErrorCode.invalid_request, "error_message": why, "node_id": -1,
                    "host": "", "port": -1}
        endpoint = ctx.cluster.coordinator(ctx.connection.listener, topic, key)
        if endpoint["node_id"] < 0:
            return {"error_code": ErrorCode.coordinator_not_available,
                    "error_message": "The coordinator is not available.", "node_id": -1, "host": "", "port": -1}
        return {"error_code": ErrorCode.none, "error_message": None, "node_id": endpoint["node_id"],
                "host": endpoint["host"], "port": endpoint["port"]}

    keys = getattr(request, "coordinator_keys", None)
    if keys is None:
        single = answer(request.key)
        if single["error_code"] == ErrorCode.none and ctx.version >= 1:
            # Kafka answers v1-v3 with Errors.NONE's message, "NONE" (its FindCoordinatorResponse).
            single = {**single, "error_message": "NONE"}
        return Reply(single)
    return Reply({"coordinators": [{"key": key, **answer(key)} for key in keys]})
