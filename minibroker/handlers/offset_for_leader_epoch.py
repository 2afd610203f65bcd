"""OffsetForLeaderEpoch (key 23), v2-v4: where a leader epoch ends on this partition's leader (KIP-101,
KIP-320), as Kafka's Partition.lastOffsetForLeaderEpoch answers it.

Consumers send it to validate their position after a leader change (KIP-320: the epoch of the last
record they consumed): the answer is the largest epoch at most the one asked for and the offset it
ends at (the start of the next epoch, or the log end for the latest), from the partition's
leader-epoch cache (minibroker.storage.leader_epoch); a consumer whose position lies past it
truncates its position there. Per partition: UNKNOWN_TOPIC_OR_PARTITION for an unknown one,
NOT_LEADER_OR_FOLLOWER where this broker does not lead it, FENCED_LEADER_EPOCH /
UNKNOWN_LEADER_EPOCH when the request's current_leader_epoch is older / newer than the partition's;
an epoch older than every epoch known answers epoch -1 and offset -1 (UNDEFINED), as Kafka does.

Authorization: DESCRIBE on each topic, else its partitions are answered TOPIC_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from minibroker.auth import AclOperation, ResourceType
from minibroker.handlers import Reply, handler
from minibroker.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from minibroker.context import RequestContext


def _answer(ctx: RequestContext, topic: str, p: Any) -> dict[str, Any]:
    result = {"partition": p.partition, "error_code": ErrorCode.none, "leader_epoch": -1, "end_offset": -1}
    info = ctx.logs.topic(topic)
    if info is None or not 0 <= p.partition < info.num_partitions:
        return {**result, "error_code": ErrorCode.unknown_topic_or_partition}
    log = ctx.logs.log(topic, p.partition)
    if log is None or log.leader_epoch is None:
        return {**result, "error_code": ErrorCode.not_leader_or_follower}
    current = p.current_leader_epoch
    if current >= 0 and current != log.leader_epoch:
        code = ErrorCode.fenced_leader_epoch if current < log.leader_epoch else ErrorCode.unknown_leader_epoch
        return {**result, "error_code": code}
    epochs = log.leader_epochs
    if not epochs.entries and p.leader_epoch == log.leader_epoch:
        return {**result, "leader_epoch": log.leader_epoch, "end_offset": log.log_end_offset}
    epoch, end = epochs.end_offset_for(p.leader_epoch, log.log_end_offset)
    return {**result, "leader_epoch": epoch, "end_offset": end}


@handler(23, 2, 4, client_throttles_from=2)
async def offset_for_leader_epoch(ctx: RequestContext, request: Any) -> Reply:
    allowed = set(ctx.filter_authorized(AclOperation.DESCRIBE, ResourceType.TOPIC, [t.topic for t in request.topics]))
    denied = {"error_code": ErrorCode.topic_authorization_failed, "leader_epoch": -1, "end_offset": -1}
    return Reply({"topics": [{"topic": t.topic, "partitions": [
        _answer(ctx, t.topic, p) if t.topic in allowed else {"partition": p.partition, **denied} for p in t.partitions]}
        for t in request.topics]})


__all__ = ["offset_for_leader_epoch"]
