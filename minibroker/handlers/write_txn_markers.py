"""WriteTxnMarkers (key 27), v1-v2: COMMIT/ABORT markers to partitions, as Kafka serves it to the
transaction coordinators of other brokers. The coordinator sends it in process to the leader of
each partition of a transaction, its own broker included (minibroker.transactions.channel); it is
served over the wire too (tools, tests). The markers are written by
`ReplicaManager.write_txn_markers` (minibroker.replica_manager, which says what each partition's
error code means; a marker to `__consumer_offsets` commits or drops the transaction's offsets in
this broker's group coordinator). Kafka refuses it to
anyone but a broker (CLUSTER_ACTION). `transaction_version` (v2) changes nothing on the data side.

Markers are appended as Kafka appends them, with acks=-1: a partition whose ISR is below
min.insync.replicas is answered NOT_ENOUGH_REPLICAS (nothing written), the others once their high
watermark passes the marker (NOT_ENOUGH_REPLICAS_AFTER_APPEND, REQUEST_TIMED_OUT or
NOT_LEADER_OR_FOLLOWER when it does not); the coordinator sends those again. With the leader alone
in the ISR nothing waits.

Authorization (Kafka's handleWriteTxnMarkersRequest): ALTER or CLUSTER_ACTION on the cluster, else
every partition is answered CLUSTER_AUTHORIZATION_FAILED (31).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from minibroker.auth import AclOperation
from minibroker.handlers import Reply, handler
from minibroker.protocol.errors import ErrorCode
from minibroker.txn_markers import TxnMarker

MARKER_TIMEOUT_MS = 30_000  # Kafka's request.timeout.ms, what its WriteTxnMarkers append waits

if TYPE_CHECKING:
    from minibroker.context import RequestContext


@handler(27, 1, 2)
async def write_txn_markers(ctx: RequestContext, request: Any) -> Reply:
    if not (ctx.authorize_cluster(AclOperation.ALTER, log_if_denied=False)
            or ctx.authorize_cluster(AclOperation.CLUSTER_ACTION)):
        code = ErrorCode.cluster_authorization_failed
        return Reply({"markers": [
            {"producer_id": m.producer_id,
             "topics": [{"name": t.name, "partitions": [{"partition_index": p, "error_code": code}
                                                         for p in t.partition_indexes]} for t in m.topics]}
            for m in request.markers]})
    # acks=-1, as Kafka appends markers: refused up front under min.insync.replicas, answered once
    # the ISR has them.
    short = {(t.name, p) for m in request.markers for t in m.topics for p in t.partition_indexes
             if _under_min_isr(ctx, t.name, p)}
    markers = [
        TxnMarker(m.producer_id, m.producer_epoch, m.coordinator_epoch, m.transaction_result,
                  [(t.name, p) for t in m.topics for p in t.partition_indexes if (t.name, p) not in short])
        for m in request.markers
    ]
    results = ctx.replicas.write_txn_markers(markers)
    written: dict[tuple[str, int], int] = {}
    for result in results:
        for tp, code in result.items():
            plog = ctx.logs.log(*tp)
            if code == ErrorCode.none and plog is not None and plog.high_watermark < plog.log_end_offset:
                written[tp] = plog.log_end_offset
    if written:
        replicated = await ctx.replicas.replication.wait_replicated(written, MARKER_TIMEOUT_MS)
        for result in results:
            for tp in result:
                if tp in written and replicated.get(tp, ErrorCode.none) != ErrorCode.none:
                    result[tp] = replicated[tp]
    for result in results:
        result.update({tp: ErrorCode.not_enough_replicas for tp in short})
    answers = []
    for marker, result in zip(request.markers, results):
        answers.append({
            "producer_id": marker.producer_id,
            "topics": [{"name": t.name,
                        "partitions": [{"partition_index": p, "error_code": result[(t.name, p)]}
                                       for p in t.partition_indexes]}
                       for t in marker.topics],
        })
    return Reply({"markers": answers})


def _under_min_isr(ctx: RequestContext, topic: str, partition: int) -> bool:
    plog = ctx.logs.log(topic, partition)
    if plog is None or plog.leader_epoch is None:
        return False
    return len(ctx.replicas.replication.isr(topic, partition)) < plog.config.min_insync_replicas
