"""AddPartitionsToTxn (key 24), v0-v5: partitions join a producer's transaction (KIP-98).

v0-v3 is the client's form: one transaction, an error per partition (the transaction's error for
all of them; a partition of an unknown topic UNKNOWN_TOPIC_OR_PARTITION and the others
OPERATION_NOT_ATTEMPTED, nothing added). v4+ is the form brokers send each other (KIP-890 part 1),
as Kafka serves it: several transactions, each added (a partition leader's add for a transactions
version 2 batch, KIP-890 part 2, recorded as such) or, with verify_only, only checked (NONE for a
partition in the ongoing transaction, TRANSACTION_ABORTABLE for one not in it: INVALID_TXN_STATE in
v4, which has no TRANSACTION_ABORTABLE). On one broker the leader asks the coordinator in process
(Produce); on a cluster, the leader of a partition sends the coordinator's broker this form in
process (minibroker.transactions.channel), as Kafka's AddPartitionsToTxnManager does. A broker that
does not coordinate the transactional id answers NOT_COORDINATOR (COORDINATOR_LOAD_IN_PROGRESS while
it loads the state it was just given) for every partition. PRODUCER_FENCED is INVALID_PRODUCER_EPOCH before v2.

Authorization (Kafka's handleAddPartitionsToTxnRequest): before v4 (from producers), WRITE on the
transactional id, else every partition is answered TRANSACTIONAL_ID_AUTHORIZATION_FAILED (53), and
WRITE on each topic (never on an internal one), else TOPIC_AUTHORIZATION_FAILED (29) with the others
OPERATION_NOT_ATTEMPTED; v4+ (from brokers) needs CLUSTER_ACTION on the cluster, else the top-level
CLUSTER_AUTHORIZATION_FAILED (31).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from minibroker.auth import AclOperation, ResourceType
from minibroker.handlers import Reply, handler
from minibroker.protocol.errors import ErrorCode
from minibroker.storage.config import is_internal

if TYPE_CHECKING:
    from minibroker.context import RequestContext


def _topic_results(answers: dict[tuple[str, int], ErrorCode]) -> list[dict[str, Any]]:
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for (topic, partition), code in answers.items():
        by_topic.setdefault(topic, []).append({"partition_index": partition, "partition_error_code": code})
    return [{"name": topic, "results_by_partition": rows} for topic, rows in by_topic.items()]


async def _add(ctx: RequestContext, transactional_id: str, producer_id: int, producer_epoch: int, topics: Any,
         verify_only: bool = False) -> dict[tuple[str, int], ErrorCode]:
    logs = ctx.logs
    partitions = [(topic.name, p) for topic in topics for p in topic.partitions]
    if ctx.version < 4:  # (v4+ comes from a broker, authorized as one)
        if not ctx.authorize(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id):
            return {tp: ErrorCode.transactional_id_authorization_failed for tp in partitions}
        # Kafka's filter leaves the internal topics out: they are never the client's to write.
        allowed = set(ctx.filter_authorized(AclOperation.WRITE, ResourceType.TOPIC,
                                            [t for t, _ in partitions if not is_internal(t)]))
        if any(t not in allowed for t, _ in partitions):
            return {tp: ErrorCode.topic_authorization_failed if tp[0] not in allowed
                    else ErrorCode.operation_not_attempted for tp in partitions}
    unknown = {tp for tp in partitions
               if (info := logs.topic(tp[0])) is None or not 0 <= tp[1] < info.num_partitions}
    coordinator = ctx.txns
    if verify_only:
        error, by_partition = coordinator.verify(transactional_id, producer_id, producer_epoch, partitions)
        if ctx.version < 5:
            by_partition = {tp: ErrorCode.invalid_txn_state if code == ErrorCode.transaction_abortable else code
                            for tp, code in by_partition.items()}
        answers = {tp: error or by_partition[tp] for tp in partitions}
    elif unknown:
        answers = {tp: ErrorCode.unknown_topic_or_partition if tp in unknown else ErrorCode.operation_not_attempted
                   for tp in partitions}
    else:
        error = await coordinator.add_partitions(transactional_id, producer_id, producer_epoch, partitions,
                                           2 if ctx.version >= 4 else 0)
        answers = {tp: error for tp in partitions}
    if ctx.version < 2:
        answers = {tp: ErrorCode.invalid_producer_epoch if code == ErrorCode.producer_fenced else code
                   for tp, code in answers.items()}
    return answers


@handler(24, 0, 5, client_throttles_from=1)
async def add_partitions_to_txn(ctx: RequestContext, request: Any) -> Reply:
    transactions = getattr(request, "transactions", None)
    if transactions is None:
        answers = await _add(ctx, request.v3_and_below_transactional_id, request.v3_and_below_producer_id,
                       request.v3_and_below_producer_epoch, request.v3_and_below_topics)
        return Reply({"results_by_topic_v3_and_below": _topic_results(answers)})
    if not ctx.authorize_cluster(AclOperation.CLUSTER_ACTION):
        return Reply({"error_code": ErrorCode.cluster_authorization_failed, "results_by_transaction": []})
    results = []
    for txn in transactions:
        answers = await _add(ctx, txn.transactional_id, txn.producer_id, txn.producer_epoch, txn.topics, txn.verify_only)
        results.append({"transactional_id": txn.transactional_id, "topic_results": _topic_results(answers)})
    return Reply({"error_code": ErrorCode.none, "results_by_transaction": results})
