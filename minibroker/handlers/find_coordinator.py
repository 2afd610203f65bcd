"""FindCoordinator (key 10), v0-v6: this broker coordinates every group (key type 0) and every
transactional id (key type 1; Kafka hashes it onto a `__transaction_state` partition, of which there
is one here). An empty transactional id, or a key type Kafka does not have, is INVALID_REQUEST.

v4+ batches keys in coordinator_keys and answers one Coordinator each.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from minibroker.handlers import Reply, handler
from minibroker.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from minibroker.context import RequestContext

GROUP, TRANSACTION, SHARE = 0, 1, 2


@handler(10, 0, 6, client_throttles_from=2)
async def find_coordinator(ctx: RequestContext, request: Any) -> Reply:
    endpoint = ctx.cluster.coordinator(ctx.connection.listener)
    found = {"error_code": ErrorCode.none, "error_message": None, "node_id": endpoint["node_id"],
             "host": endpoint["host"], "port": endpoint["port"]}
    key_type = getattr(request, "key_type", GROUP)

    def answer(key: str) -> dict[str, Any]:
        if key_type not in (GROUP, TRANSACTION, SHARE) or (key_type == TRANSACTION and not key):
            why = "an empty transactional id" if key_type == TRANSACTION else f"unknown key type {key_type}"
            return {"error_code": ErrorCode.invalid_request, "error_message": why, "node_id": -1,
                    "host": "", "port": -1}
        return found

    keys = getattr(request, "coordinator_keys", None)
    if keys is None:
        single = answer(request.key)
        if single["error_code"] == ErrorCode.none and ctx.version >= 1:
            # Kafka answers v1-v3 with Errors.NONE's message, "NONE" (its FindCoordinatorResponse).
            single = {**single, "error_message": "NONE"}
        return Reply(single)
    return Reply({"coordinators": [{"key": key, **answer(key)} for key in keys]})
