"""ListTransactions (key 66), v0-v2: the transactional ids the coordinator knows, filtered by state
(names as DescribeTransactions gives them; the filters no state has come back in
unknown_state_filters), producer id, v1 how long they have been running (KIP-994), v2 a regular
expression the transactional id matches (KIP-1152; a bad one is INVALID_REGULAR_EXPRESSION).

On a cluster each broker lists the transactional ids it coordinates (none on a broker that does
not lead __transaction_state; COORDINATOR_LOAD_IN_PROGRESS while it loads), as Kafka's do.

Authorization: only the transactional ids the principal may DESCRIBE are listed.
"""

from __future__ import annotations


from typing import TYPE_CHECKING, Any

from minibroker.auth import AclOperation, ResourceType
from minibroker.handlers import Reply, handler
from minibroker.regex import RegexError
from minibroker.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from minibroker.context import RequestContext


@handler(66, 0, 2)
async def list_transactions(ctx: RequestContext, request: Any) -> Reply:
    pattern = getattr(request, "transactional_id_pattern", None)
    if ctx.txns.status() == ErrorCode.coordinator_load_in_progress:
        return Reply({"error_code": ErrorCode.coordinator_load_in_progress, "unknown_state_filters": [],
                      "transaction_states": []})
    try:
        unknown, found = ctx.txns.list(
            request.state_filters, request.producer_id_filters, getattr(request, "duration_filter", -1), pattern)
    except RegexError:
        return Reply({"error_code": ErrorCode.invalid_regular_expression, "unknown_state_filters": [],
                      "transaction_states": []})
    return Reply({
        "error_code": ErrorCode.none,
        "unknown_state_filters": unknown,
        "transaction_states": [
            {"transactional_id": txn.transactional_id, "producer_id": txn.producer_id,
             "transaction_state": txn.state.kafka_name}
            for txn in found
            if ctx.authorize(AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, txn.transactional_id)
        ],
    })
