"""AlterPartitionReassignments (key 45), v0-v1: move a partition's replicas, or cancel a move in
progress, checked as Kafka's controller checks them (ReplicationControlManager
.alterPartitionReassignment), each partition answered on its own:

- unknown topic or partition: UNKNOWN_TOPIC_OR_PARTITION;
- a cancel (null replicas) when no reassignment is in progress: NO_REASSIGNMENT_IN_PROGRESS;
- an empty replica list, a broker that is not registered, or one named twice:
  INVALID_REPLICA_ASSIGNMENT, with Kafka's message;
- v1's allow_replication_factor_change=false and a target of another size: INVALID_REPLICATION_FACTOR
  ("The replication factor is changed from 1 to 2");
- a target equal to the current replicas: nothing to do, NONE.

A valid request starts the move in the controller (minibroker.storage.controller `reassign`), as
Kafka's does: the target replicas join (adding), catch up from the leader and enter the ISR, then
the replicas not in the target leave (removing) and a removed leader hands over to the first target
replica in the ISR. On one broker the only valid target is this broker, which already holds every
partition, so a valid request changes nothing.

Authorization: ALTER on the cluster, else CLUSTER_AUTHORIZATION_FAILED (31), top-level and on each
partition.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from minibroker.auth import AclOperation
from minibroker.handlers import Reply, handler
from minibroker.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from minibroker.context import RequestContext


def check_reassignment(cluster, topic: str, partition: int, replicas, allow_rf_change: bool):
    """(error code, message) for one partition's target replicas (None cancels)."""
    current = cluster.partition(topic, partition)
    if current is None:
        if not cluster.has_topic(topic):
            return ErrorCode.unknown_topic_or_partition, f"Unable to find a topic named {topic}."
        return ErrorCode.unknown_topic_or_partition, f"Unable to find partition {topic}:{partition}."
    if replicas is None:
        if not current.reassignment_in_progress:
            return ErrorCode.no_reassignment_in_progress, "No partition reassignment is in progress."
        return ErrorCode.none, None  # a revert: not reachable on one broker (nothing is ever in progress)
    if not replicas:
        return ErrorCode.invalid_replica_assignment, "The manual partition assignment includes an empty replica list."
    previous = None
    for broker_id in sorted(replicas):
        if not cluster.is_registered(broker_id):
            return ErrorCode.invalid_replica_assignment, (
                f"The manual partition assignment includes broker {broker_id}, but no such broker is registered.")
        if broker_id == previous:
            return ErrorCode.invalid_replica_assignment, (
                f"The manual partition assignment includes the broker {broker_id} more than once.")
        previous = broker_id
    if not allow_rf_change and len(replicas) != len(current.replicas):
        return ErrorCode.invalid_replication_factor, (
            f"The replication factor is changed from {len(current.replicas)} to {len(replicas)}")
    return ErrorCode.none, None


@handler(45, 0, 1, client_throttles_from=0)
async def alter_partition_reassignments(ctx: RequestContext, request: Any) -> Reply:
    cluster = ctx.cluster
    allow_rf_change = getattr(request, "allow_replication_factor_change", True)
    if not ctx.authorize_cluster(AclOperation.ALTER):
        denied, message = ErrorCode.cluster_authorization_failed, "Cluster authorization failed."
        return Reply({"allow_replication_factor_change": allow_rf_change, "error_code": denied, "error_message": message,
                      "responses": [{"name": t.name, "partitions": [
                          {"partition_index": p.partition_index, "error_code": denied, "error_message": message}
                          for p in t.partitions]} for t in request.topics]})
    responses = []
    for topic in request.topics:
        partitions = []
        for p in topic.partitions:
            code, message = check_reassignment(cluster, topic.name, p.partition_index, p.replicas, allow_rf_change)
            current = cluster.partition(topic.name, p.partition_index)
            if code == ErrorCode.none and current is not None and (
                    p.replicas is None or tuple(p.replicas) != current.replicas or current.reassignment_in_progress):
                # The controller starts (or cancels) it; the brokers follow the metadata it commits.
                cluster.controller.reassign(topic.name, p.partition_index, p.replicas, ctx.clock.now_ms())
            partitions.append({"partition_index": p.partition_index, "error_code": code, "error_message": message})
        responses.append({"name": topic.name, "partitions": partitions})
    return Reply({
        "allow_replication_factor_change": allow_rf_change,
        "error_code": ErrorCode.none,
        "error_message": None,
        "responses": responses,
    })
