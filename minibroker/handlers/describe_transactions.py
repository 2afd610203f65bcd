"""DescribeTransactions (key 65), v0: each transactional id's state, producer id and epoch, timeout,
start time (-1 when no transaction was started, as Kafka sends it) and partitions (KIP-664); an
unknown id TRANSACTIONAL_ID_NOT_FOUND; on a broker that does not coordinate it NOT_COORDINATOR
(COORDINATOR_LOAD_IN_PROGRESS while it loads).

Authorization (Kafka's handleDescribeTransactionsRequest): DESCRIBE on each transactional id, else
TRANSACTIONAL_ID_AUTHORIZATION_FAILED (53); the topics of a transaction the principal may not
describe are left out.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from minibroker.auth import AclOperation, ResourceType
from minibroker.handlers import Reply, handler
from minibroker.protocol.entities import duration, timestamp
from minibroker.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from minibroker.context import RequestContext


@handler(65, 0, 0)
async def describe_transactions(ctx: RequestContext, request: Any) -> Reply:
    states = []
    for tid in request.transactional_ids:
        txn = ctx.txns.describe(tid)
        if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, tid):
            states.append({"error_code": ErrorCode.transactional_id_authorization_failed, "transactional_id": tid,
                           "transaction_state": "", "transaction_timeout": duration(0),
                           "transaction_start_time": timestamp(0), "producer_id": 0, "producer_epoch": 0,
                           "topics": []})
            continue
        status = ctx.txns.status()
        if txn is None or status:
            # The other fields at their schema defaults, as Kafka leaves them.
            states.append({"error_code": status or ErrorCode.transactional_id_not_found, "transactional_id": tid,
                           "transaction_state": "", "transaction_timeout": duration(0),
                           "transaction_start_time": timestamp(0), "producer_id": 0, "producer_epoch": 0,
                           "topics": []})
            continue
        by_topic: dict[str, list[int]] = {}
        for topic, partition in sorted(txn.partitions):
            by_topic.setdefault(topic, []).append(partition)
        by_topic = {topic: parts for topic, parts in by_topic.items()
                    if ctx.authorize(AclOperation.DESCRIBE, ResourceType.TOPIC, topic)}
        states.append({
            "error_code": ErrorCode.none,
            "transactional_id": tid,
            "transaction_state": txn.state.kafka_name,
            "transaction_timeout": duration(txn.timeout_ms),
            "transaction_start_time": timestamp(txn.start_ms),
            "producer_id": txn.producer_id,
            "producer_epoch": txn.producer_epoch,
            "topics": [{"topic": topic, "partitions": parts} for topic, parts in by_topic.items()],
        })
    return Reply({"transaction_states": states})
