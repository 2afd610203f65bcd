"""DescribeQuorum (key 55), v0-v2: the KRaft metadata quorum, as Kafka's raft leader answers it
(KafkaRaftClient.handleDescribeQuorumRequest, RaftUtil.singletonDescribeQuorumResponse).

Clients send it to a broker, which forwards it to the active controller; this combined node is
that controller and answers it itself. The request must name exactly the topic `__cluster_metadata`
with exactly partition 0; anything else answers UNKNOWN_TOPIC_OR_PARTITION for each partition it
names, the partition's other fields left at the schema's defaults (leader 0, epoch 0, high watermark
0), as Kafka's RaftUtil.singletonDescribeQuorumResponse leaves them. The answer comes from the cluster view: one voter, this node, leading, with the modelled
metadata log's end offset as its log end offset and as the high watermark, no observers; the
leader's last fetch and caught-up times are now (Kafka reports the current time for the leader).
v2 adds each voter's directory id (the zero id, as for a statically configured voter) and the
voters' endpoints (this broker's listeners: a combined node's controller answers there).

Authorization: DESCRIBE on the cluster, else the top-level CLUSTER_AUTHORIZATION_FAILED (31).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from minibroker.cluster import METADATA_PARTITION, METADATA_TOPIC
from minibroker.auth import AclOperation
from minibroker.handlers import Reply, handler
from minibroker.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from minibroker.context import RequestContext

UNKNOWN_TOPIC_OR_PARTITION_MESSAGE = "This server does not host this topic-partition."


def _asks_for_the_metadata_partition(request) -> bool:
    topics = request.topics
    return (len(topics) == 1 and topics[0].topic_name == METADATA_TOPIC
            and len(topics[0].partitions) == 1 and topics[0].partitions[0].partition_index == METADATA_PARTITION)


@handler(55, 0, 2)
async def describe_quorum(ctx: RequestContext, request: Any) -> Reply:
    if not ctx.authorize_cluster(AclOperation.DESCRIBE):
        return Reply({"error_code": ErrorCode.cluster_authorization_failed, "error_message": None, "topics": (),
                      "nodes": ()})
    if not _asks_for_the_metadata_partition(request):
        topics = [{"topic_name": t.topic_name, "partitions": [
            {"partition_index": p.partition_index, "error_code": ErrorCode.unknown_topic_or_partition,
             "error_message": UNKNOWN_TOPIC_OR_PARTITION_MESSAGE, "leader_id": 0, "leader_epoch": 0,
             "high_watermark": 0, "current_voters": (), "observers": ()}
            for p in t.partitions]} for t in request.topics]
        return Reply({"error_code": ErrorCode.none, "error_message": None, "topics": topics, "nodes": ()})
    quorum = ctx.cluster.quorum()
    now = ctx.clock.now_ms()

    def replica(state) -> dict:
        timestamp = now if state.replica_id == quorum.leader_id else -1
        return {"replica_id": state.replica_id, "replica_directory_id": None, "log_end_offset": state.log_end_offset,
                "last_fetch_timestamp": timestamp, "last_caught_up_timestamp": timestamp}

    partition = {
        "partition_index": METADATA_PARTITION,
        "error_code": ErrorCode.none,
        "error_message": None,
        "leader_id": quorum.leader_id,
        "leader_epoch": quorum.leader_epoch,
        "high_watermark": quorum.high_watermark,
        "current_voters": [replica(v) for v in quorum.voters],
        "observers": [replica(o) for o in quorum.observers],
    }
    nodes = [{"node_id": v.replica_id, "listeners": [
        {"name": name, "host": host, "port": port} for name, (host, port) in ctx.cluster.listeners(v.replica_id).items()]}
        for v in quorum.voters if ctx.cluster.is_registered(v.replica_id)]
    return Reply({"error_code": ErrorCode.none, "error_message": None,
            "topics": [{"topic_name": METADATA_TOPIC, "partitions": [partition]}], "nodes": nodes})
