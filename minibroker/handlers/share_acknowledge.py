"""ShareAcknowledge (key 79), v1-v2: a share consumer's acknowledgements of records it acquired
(ACCEPT, RELEASE, REJECT, GAP; and from v2 RENEW of KIP-1222, when IsRenewAck is set), outside a
ShareFetch: Java's KafkaShareConsumer sends it for commitSync/commitAsync and on close.

As Kafka's KafkaApis: UNSUPPORTED_VERSION with share.version below 1; INVALID_REQUEST for a null
group id ("Invalid group id in the request.") or a member id empty or longer than 36 characters;
GROUP_AUTHORIZATION_FAILED without READ on the group. The share session must exist: epoch 0 is
INVALID_SHARE_SESSION_EPOCH, an unknown session SHARE_SESSION_NOT_FOUND, another epoch than the
session's INVALID_SHARE_SESSION_EPOCH; the session's epoch moves on; epoch -1 closes it after the
acknowledgements (the member's other acquired records are released). Per partition: UNKNOWN_TOPIC_ID
for an unknown topic id, TOPIC_AUTHORIZATION_FAILED without READ on the topic, INVALID_REQUEST for
acknowledgement batches that are out of order, overlapping, inverted, without types, with a type
list whose length is not the batch's, or with an unknown type (RENEW only with IsRenewAck), and the
share partition's own answer (INVALID_RECORD_STATE for records not acquired by the member, ...).
The response carries the group's acquisition lock timeout (v2).
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any, Iterable

from minibroker.auth import AclOperation, ResourceType
from minibroker.handlers import Reply, handler
from minibroker.handlers.share_group_heartbeat import share_groups_enabled
from minibroker.protocol.errors import ErrorCode
from minibroker.share.partition import ACK_RENEW, AcknowledgementBatch
from minibroker.share.session import FINAL_EPOCH, INITIAL_EPOCH, ShareSessionError

if TYPE_CHECKING:
    from minibroker.context import RequestContext

PartitionKey = tuple[uuid.UUID, int]
# CurrentLeader is set only for NOT_LEADER_OR_FOLLOWER / FENCED_LEADER_EPOCH (a leader elsewhere);
# otherwise it keeps the generated message's defaults, as Kafka's responses do.
NO_LEADER = {"leader_id": 0, "leader_epoch": 0}
AckResult = tuple[ErrorCode, "str | None"]


def valid_member_id(member_id: str | None) -> bool:
    """Kafka's KafkaApis.isMemberIdValid."""
    return bool(member_id) and len(member_id or "") <= 36


def acknowledgement_batches(ctx: RequestContext, topics: Iterable[Any], is_renew_ack: bool
                            ) -> tuple[dict[PartitionKey, list[AcknowledgementBatch]], dict[PartitionKey, AckResult]]:
    """The request's acknowledgement batches by partition, and the partitions answered at once
    (Kafka's getAcknowledgeBatchesFromShare*Request and validateAcknowledgementBatches)."""
    valid: dict[PartitionKey, list[AcknowledgementBatch]] = {}
    erroneous: dict[PartitionKey, AckResult] = {}
    max_type = ACK_RENEW if ctx.version >= 2 else ACK_RENEW - 1
    for topic in topics:
        info = ctx.logs.topic_by_id(topic.topic_id)
        for partition in topic.partitions:
            key = (topic.topic_id, partition.partition_index)
            batches = partition.acknowledgement_batches
            if info is None:
                erroneous[key] = (ErrorCode.unknown_topic_id, None)
                continue
            previous_last = -1
            checked = []
            for batch in batches:
                types = tuple(batch.acknowledge_types)
                if (batch.first_offset > batch.last_offset or batch.first_offset < previous_last or not types
                        or (len(types) > 1 and batch.last_offset - batch.first_offset + 1 != len(types))
                        or any(t < 0 or t > max_type for t in types)
                        or (ACK_RENEW in types and not is_renew_ack)):
                    erroneous[key] = (ErrorCode.invalid_request, None)
                    break
                previous_last = batch.last_offset
                checked.append(AcknowledgementBatch(batch.first_offset, batch.last_offset, types))
            else:
                if not ctx.authorize(AclOperation.READ, ResourceType.TOPIC, info.name):
                    erroneous[key] = (ErrorCode.topic_authorization_failed, None)
                elif info.num_partitions <= partition.partition_index:
                    erroneous[key] = (ErrorCode.unknown_topic_or_partition, None)
                else:
                    valid[key] = checked
    return valid, erroneous


async def acknowledge(ctx: RequestContext, group_id: str, member_id: str,
                      valid: dict[PartitionKey, list[AcknowledgementBatch]]) -> dict[PartitionKey, AckResult]:
    """Apply the valid acknowledgements; an empty list is answered NONE at once. Those applied
    are answered once the share coordinator's writes are acknowledged by the ISR of
    `__share_group_state` (Kafka's persister completes a write then; on one broker at once), else
    COORDINATOR_NOT_AVAILABLE."""
    results: dict[PartitionKey, AckResult] = {k: (ErrorCode.none, None) for k, batches in valid.items() if not batches}
    todo = {k: batches for k, batches in valid.items() if batches}
    if todo:
        applied = ctx.shares.acknowledge(group_id, member_id, todo)
        if any(code == ErrorCode.none for code, _ in applied.values()):
            code = await ctx.shares.coordinator.written()
            if code != ErrorCode.none:
                message = "The share coordinator's write was not acknowledged by its in-sync replicas."
                applied = {k: (code, message) if c == ErrorCode.none else (c, m) for k, (c, m) in applied.items()}
        results.update(applied)
    return results


def leader_hints(ctx: RequestContext, partitions: Iterable[tuple[uuid.UUID, dict[str, Any]]]) -> list[dict[str, Any]]:
    """Kafka's processShareFetchResponse / processShareAcknowledgeResponse: each partition answered
    NOT_LEADER_OR_FOLLOWER or FENCED_LEADER_EPOCH gets its current leader and leader epoch
    (CurrentLeader), and the leaders' addresses on this listener are the response's NodeEndpoints
    (KIP-951), so the client goes to the leader without a Metadata round trip. The endpoints."""
    leaders: set[int] = set()
    for topic_id, entry in partitions:
        if entry["error_code"] not in (ErrorCode.not_leader_or_follower, ErrorCode.fenced_leader_epoch):
            continue
        info = ctx.logs.topic_by_id(topic_id)
        registration = ctx.cluster.partition(info.name, entry["partition_index"]) if info is not None else None
        leader, epoch = (registration.leader, registration.leader_epoch) if registration is not None else (-1, -1)
        entry["current_leader"] = {"leader_id": leader, "leader_epoch": epoch}
        if leader >= 0 and leader in ctx.cluster.broker_ids():  # getAliveBrokerNode
            leaders.add(leader)
    endpoints = []
    for node in sorted(leaders):
        endpoint = ctx.cluster.broker_endpoint(ctx.connection.listener, node)
        endpoints.append({"node_id": node, "host": endpoint["host"], "port": endpoint["port"], "rack": endpoint["rack"]})
    return endpoints


def lock_timeout_ms(ctx: RequestContext, group_id: str) -> int:
    return int(ctx.group_configs.get(group_id, "share.record.lock.duration.ms"))


def _top_level(ctx: RequestContext, code: ErrorCode, message: str | None = None, lock_ms: int = 0) -> Reply:
    return Reply({"error_code": code, "error_message": message, "acquisition_lock_timeout": lock_ms,
                  "responses": [], "node_endpoints": []})


# KIP-219: Kafka 4.4 clients wait out the throttle time of every response that carries one (KAFKA-20828).
@handler(79, 1, 2, client_throttles_from=1)
async def share_acknowledge(ctx: RequestContext, request: Any) -> Reply:
    if not share_groups_enabled(ctx):
        return _top_level(ctx, ErrorCode.unsupported_version)
    group_id, member_id, epoch = request.group_id, request.member_id, request.share_session_epoch
    if group_id is None:
        return _top_level(ctx, ErrorCode.invalid_request, "Invalid group id in the request.")
    if not ctx.authorize(AclOperation.READ, ResourceType.GROUP, group_id):
        return _top_level(ctx, ErrorCode.group_authorization_failed)
    if not valid_member_id(member_id):
        return _top_level(ctx, ErrorCode.invalid_request, "Invalid member id in the request.")
    sessions = ctx.shares.sessions
    try:
        if epoch == INITIAL_EPOCH:
            raise ShareSessionError(ErrorCode.invalid_share_session_epoch, "The share session epoch is invalid.")
        session = sessions.existing(group_id, member_id, epoch)
        if epoch != FINAL_EPOCH:
            sessions.advance(session)
    except ShareSessionError as exc:
        return _top_level(ctx, exc.error_code, exc.message)
    is_renew_ack = bool(getattr(request, "is_renew_ack", False))
    valid, erroneous = acknowledgement_batches(ctx, request.topics, is_renew_ack)
    results = {**await acknowledge(ctx, group_id, member_id, valid), **erroneous}
    if epoch == FINAL_EPOCH:
        sessions.remove(group_id, member_id)
        ctx.shares.release_session(group_id, member_id, list(session.partitions))
    by_topic: dict[uuid.UUID, list[dict[str, Any]]] = {}
    for (topic_id, partition), (code, message) in results.items():
        by_topic.setdefault(topic_id, []).append({
            "partition_index": partition, "error_code": code, "error_message": message,
            "current_leader": NO_LEADER})
    endpoints = leader_hints(ctx, [(t, p) for t, ps in by_topic.items() for p in ps])
    return Reply({"error_code": ErrorCode.none, "error_message": None,
                  "acquisition_lock_timeout": lock_timeout_ms(ctx, group_id),
                  "responses": [{"topic_id": t, "partitions": ps} for t, ps in by_topic.items()],
                  "node_endpoints": endpoints})
