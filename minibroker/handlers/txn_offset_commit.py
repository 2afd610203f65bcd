"""TxnOffsetCommit (key 28), v0-v5: a group's offsets committed inside a producer's transaction
(KIP-98; v3+ carries the group's generation and member id, KIP-447).

The group's offsets partition must be in the transaction (AddOffsetsToTxn first, KIP-890 part 1:
INVALID_TXN_STATE, TRANSACTION_ABORTABLE from v4) and the producer's epoch current
(INVALID_PRODUCER_EPOCH); the group checks the generation and member as for OffsetCommit. The offsets
are then pending: the COMMIT marker makes them visible, ABORT drops them (minibroker.groups.offsets).
Partitions of unknown topics get UNKNOWN_TOPIC_OR_PARTITION. v5 is transactions version 2 (KIP-890
part 2): the client sends no AddOffsetsToTxn, the group's offsets partition is added to the
transaction here (as Kafka's ADD_PARTITION for TxnOffsetCommit above v4). Either way the transaction
coordinator is asked wherever it runs (on a cluster, an AddPartitionsToTxn to its broker, in process).

Authorization (Kafka's handleTxnOffsetCommitRequest): WRITE on the transactional id, else every
partition is answered TRANSACTIONAL_ID_AUTHORIZATION_FAILED (53); READ on the group, else
GROUP_AUTHORIZATION_FAILED (30); READ on each topic, else its partitions TOPIC_AUTHORIZATION_FAILED
(29).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from minibroker.auth import AclOperation, ResourceType
from minibroker.handlers import Reply, handler
from minibroker.handlers.common import group_coordinator
from minibroker.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from minibroker.context import RequestContext


@handler(28, 0, 5, client_throttles_from=1)
@group_coordinator
async def txn_offset_commit(ctx: RequestContext, request: Any) -> Reply:
    logs = ctx.logs
    refused = None
    if not ctx.authorize(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id):
        refused = ErrorCode.transactional_id_authorization_failed
    elif not ctx.authorize(AclOperation.READ, ResourceType.GROUP, request.group_id):
        refused = ErrorCode.group_authorization_failed
    if refused is not None:
        return Reply({"topics": [{"name": t.name, "partitions": [
            {"partition_index": p.partition_index, "error_code": refused} for p in t.partitions]}
            for t in request.topics]})
    allowed = set(ctx.filter_authorized(AclOperation.READ, ResourceType.TOPIC, [t.name for t in request.topics]))
    offsets: dict[tuple[str, int], tuple[int, int, str | None]] = {}
    unknown: set[tuple[str, int]] = set()
    denied: set[tuple[str, int]] = set()
    for topic in request.topics:
        info = logs.topic(topic.name)
        for p in topic.partitions:
            tp = (topic.name, p.partition_index)
            if topic.name not in allowed:
                denied.add(tp)
            elif info is None or not 0 <= p.partition_index < info.num_partitions:
                unknown.add(tp)
            else:
                offsets[tp] = (p.committed_offset, getattr(p, "committed_leader_epoch", -1), p.committed_metadata)
    error = ErrorCode.invalid_group_id if not request.group_id else await ctx.txns.verify_offsets(
        request.transactional_id, request.producer_id, request.producer_epoch, request.group_id, ctx.version)
    if error:
        errors = {tp: error for tp in offsets}
    else:
        errors = ctx.groups.commit_transactional_offsets(
            group_id=request.group_id,
            producer_id=request.producer_id,
            producer_epoch=request.producer_epoch,
            generation_id=getattr(request, "generation_id", -1),
            member_id=getattr(request, "member_id", ""),
            group_instance_id=getattr(request, "group_instance_id", None),
            offsets=offsets,
        )
    errors.update({tp: ErrorCode.unknown_topic_or_partition for tp in unknown})
    errors.update({tp: ErrorCode.topic_authorization_failed for tp in denied})
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for (topic_name, partition), code in errors.items():
        by_topic.setdefault(topic_name, []).append({"partition_index": partition, "error_code": code})
    return Reply({"topics": [{"name": name, "partitions": rows} for name, rows in by_topic.items()]})
