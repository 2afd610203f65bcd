"""ElectLeaders (key 43), v0-v2: preferred (0) or unclean (1) leader elections, answered as Kafka's
controller answers them (ReplicationControlManager.electLeaders):

- a partition already led by its preferred replica (preferred), or that has a leader at all
  (unclean): ELECTION_NOT_NEEDED;
- an unknown topic or partition: UNKNOWN_TOPIC_OR_PARTITION ("No such topic as t");
- a null partition list means every partition, and then the partitions that need no election are
  left out of the answer (each topic is still listed);
- an election type other than 0 or 1: INVALID_REQUEST for the request and each partition named.

The cluster view says who leads; an election that is needed is the controller's
(minibroker.storage.controller `elect_leader`): the preferred replica when it is up and in the ISR
(else PREFERRED_LEADER_NOT_AVAILABLE), for an unclean election an ISR member up or else any replica
up (else ELIGIBLE_LEADERS_NOT_AVAILABLE). On one broker every partition is led by its only,
preferred, replica, so no election is ever needed.

Authorization: ALTER on the cluster, else the top-level CLUSTER_AUTHORIZATION_FAILED (31), and on
each partition named.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from minibroker.auth import AclOperation
from minibroker.handlers import Reply, handler
from minibroker.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from minibroker.context import RequestContext
    from minibroker.cluster import ClusterView

PREFERRED, UNCLEAN = 0, 1
ELECTION_NOT_NEEDED_MESSAGE = "Leader election not needed for topic partition."


def elect(cluster: ClusterView, topic: str, partition: int, election_type: int, now_ms: int) -> tuple[ErrorCode, str | None]:
    assignment = cluster.partition(topic, partition)
    if assignment is None:
        if not cluster.has_topic(topic):
            return ErrorCode.unknown_topic_or_partition, f"No such topic as {topic}"
        return ErrorCode.unknown_topic_or_partition, f"No such partition as {topic}-{partition}"
    if (election_type == PREFERRED and assignment.has_preferred_leader) or (
            election_type == UNCLEAN and assignment.leader >= 0):
        return ErrorCode.election_not_needed, ELECTION_NOT_NEEDED_MESSAGE
    # The controller elects (a new leader epoch; the brokers follow the metadata it commits).
    return cluster.controller.elect_leader(topic, partition, election_type == UNCLEAN, now_ms)


def _result(topic: str, partitions: list[dict]) -> dict:
    return {"topic": topic, "partition_result": partitions}


@handler(43, 0, 2, client_throttles_from=0)
async def elect_leaders(ctx: RequestContext, request: Any) -> Reply:
    election_type = getattr(request, "election_type", PREFERRED)  # v0 elects the preferred replica
    if not ctx.authorize_cluster(AclOperation.ALTER):
        denied = ErrorCode.cluster_authorization_failed
        results = [_result(t.topic, [{"partition_id": p, "error_code": denied, "error_message": None}
                                     for p in t.partitions]) for t in request.topic_partitions or ()]
        return Reply({"error_code": denied, "replica_election_results": results})
    if election_type not in (PREFERRED, UNCLEAN):
        unknown = f"Unknown election type {election_type}"
        results = [_result(t.topic, [{"partition_id": p, "error_code": ErrorCode.invalid_request, "error_message": unknown}
                                     for p in t.partitions]) for t in request.topic_partitions or ()]
        return Reply({"error_code": ErrorCode.invalid_request, "replica_election_results": results})
    results = []
    if request.topic_partitions is None:
        for info in ctx.logs.topics():
            partitions = []
            for p in range(info.num_partitions):
                code, message = elect(ctx.cluster, info.name, p, election_type, ctx.clock.now_ms())
                if code != ErrorCode.election_not_needed:
                    partitions.append({"partition_id": p, "error_code": code, "error_message": message})
            results.append(_result(info.name, partitions))
    else:
        for t in request.topic_partitions:
            partitions = []
            for p in t.partitions:
                code, message = elect(ctx.cluster, t.topic, p, election_type, ctx.clock.now_ms())
                partitions.append({"partition_id": p, "error_code": code, "error_message": message})
            results.append(_result(t.topic, partitions))
    return Reply({"error_code": ErrorCode.none, "replica_election_results": results})
