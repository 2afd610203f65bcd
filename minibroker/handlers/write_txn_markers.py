"""WriteTxnMarkers (key 27), v1-v2: COMMIT/ABORT markers to partitions, as Kafka serves it to the
transaction coordinators of other brokers. Here the coordinator is in process and calls
`ReplicaManager.write_txn_markers` directly (minibroker.replica_manager, which says what each partition's error
code means); this handler answers the same thing over the wire (tools, tests). Kafka refuses it to
anyone but a broker (CLUSTER_ACTION); there are no ACLs here. `transaction_version` (v2) changes
nothing on the data side.

Authorization (Kafka's handleWriteTxnMarkersRequest): ALTER or CLUSTER_ACTION on the cluster, else
every partition is answered CLUSTER_AUTHORIZATION_FAILED (31).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from minibroker.auth import AclOperation
from minibroker.handlers import Reply, handler
from minibroker.protocol.errors import ErrorCode
from minibroker.txn_markers import TxnMarker

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
    markers = [
        TxnMarker(m.producer_id, m.producer_epoch, m.coordinator_epoch, m.transaction_result,
                  [(t.name, p) for t in m.topics for p in t.partition_indexes])
        for m in request.markers
    ]
    results = ctx.replicas.write_txn_markers(markers)
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
