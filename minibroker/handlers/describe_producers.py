"""DescribeProducers (key 61), v0: each partition's producer state, as Kafka's
ReplicaManager.activeProducerState answers it (the admin clients' describeProducers).

One entry per producer id with state on the partition: its epoch, the last sequence of its latest
batch (-1 when only a marker set its epoch), the time of its last append (what expiry measures from:
Kafka gives the batch's max timestamp), the coordinator epoch of its last marker (-1 when none) and
the first offset of its open transaction (-1 when none). Both producer state modes answer it (lean
mode knows only the latest batch, which is all this API shows). An unknown partition is
UNKNOWN_TOPIC_OR_PARTITION; a file-system error loading the state KAFKA_STORAGE_ERROR. Loading a
partition's producer state for this is the same lazy load a produce would do.

Authorization: READ on each topic, else its partitions are answered TOPIC_AUTHORIZATION_FAILED (29).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from minibroker.auth import AclOperation, ResourceType
from minibroker.handlers import Reply, handler
from minibroker.handlers.common import error_answer
from minibroker.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from minibroker.context import RequestContext


@handler(61, 0, 0)
async def describe_producers(ctx: RequestContext, request: Any) -> Reply:
    now_ms = ctx.clock.now_ms()
    topics = []
    for topic in request.topics:
        partitions = []
        allowed = ctx.authorize(AclOperation.READ, ResourceType.TOPIC, topic.name)
        for index in topic.partition_indexes:
            plog = ctx.logs.log(topic.name, index)
            if not allowed:
                partitions.append(_partition(index, ErrorCode.topic_authorization_failed, "Topic authorization failed."))
                continue
            info = ctx.logs.topic(topic.name)
            if (plog is None or plog.leader_epoch is None) and info is not None and 0 <= index < info.num_partitions:
                # Kafka's DescribeProducers is the partition leader's to answer.
                partitions.append(_partition(index, ErrorCode.not_leader_or_follower,
                                             f"this broker does not lead {topic.name}-{index}"))
                continue
            if plog is None:
                partitions.append(_partition(index, ErrorCode.unknown_topic_or_partition,
                                             f"{topic.name}-{index} does not exist"))
                continue
            try:
                psm = ctx.producer_states.manager(topic.name, index, plog, now_ms)
            except OSError as exc:
                code, message = error_answer(ctx.storage_errors, exc, f"{topic.name}-{index}")
                partitions.append(_partition(index, code, message))
                continue
            producers = [{
                "producer_id": entry.producer_id,
                "producer_epoch": entry.producer_epoch,
                "last_sequence": entry.last_seq,
                "last_timestamp": entry.last_append_ms,
                "coordinator_epoch": entry.coordinator_epoch,
                "current_txn_start_offset": entry.current_txn_first_offset,
            } for entry in psm.entries()]
            partitions.append(_partition(index, ErrorCode.none, None, producers))
        topics.append({"name": topic.name, "partitions": partitions})
    return Reply({"topics": topics})


def _partition(index: int, code: ErrorCode, message: str | None, producers: list | None = None) -> dict[str, Any]:
    return {"partition_index": index, "error_code": code, "error_message": message,
            "active_producers": producers or []}
