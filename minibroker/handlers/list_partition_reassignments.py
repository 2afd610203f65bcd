"""ListPartitionReassignments (key 46), v0: the reassignments in progress, as Kafka's controller
lists them (ReplicationControlManager.listPartitionReassignments).

A null topic list asks for every reassigning partition; a named list for those of its partitions
that are reassigning. Partitions that are not (and unknown topics or partitions) are left out, and
a topic with none left is not listed. The cluster view knows which are reassigning: on one broker
none ever is, so the answer is an empty list with no error.

Authorization: DESCRIBE on the cluster, else CLUSTER_AUTHORIZATION_FAILED (31).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from minibroker.auth import AclOperation
from minibroker.handlers import Reply, handler
from minibroker.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from minibroker.context import RequestContext


@handler(46, 0, 0, client_throttles_from=0)
async def list_partition_reassignments(ctx: RequestContext, request: Any) -> Reply:
    cluster = ctx.cluster
    if not ctx.authorize_cluster(AclOperation.DESCRIBE):
        return Reply({"error_code": ErrorCode.cluster_authorization_failed,
                      "error_message": "Cluster authorization failed.", "topics": []})
    ongoing = cluster.reassigning_partitions()
    if request.topics is None:
        wanted = sorted(ongoing)
    else:
        wanted = [(t.name, p) for t in request.topics for p in t.partition_indexes]
    by_topic: dict[str, list[dict]] = {}
    for topic, partition in wanted:
        assignment = ongoing.get((topic, partition))
        if assignment is not None:
            by_topic.setdefault(topic, []).append({
                "partition_index": partition,
                "replicas": assignment.replicas,
                "adding_replicas": assignment.adding_replicas,
                "removing_replicas": assignment.removing_replicas,
            })
    return Reply({
        "error_code": ErrorCode.none,
        "error_message": None,
        "topics": [{"name": name, "partitions": parts} for name, parts in by_topic.items()],
    })
