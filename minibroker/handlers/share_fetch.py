"""ShareFetch (key 78), v1-v2: KIP-932's fetch of a share consumer, which acquires the records it
returns (minibroker/share/manager.py) and carries acknowledgements of earlier ones.

As Kafka 4.4's KafkaApis.handleShareFetchRequest, in order:

1. top-level answers: UNSUPPORTED_VERSION with share.version below 1; INVALID_REQUEST for a null
   group id ("Invalid group id in the request."), GROUP_AUTHORIZATION_FAILED without READ on it,
   INVALID_REQUEST for a member id empty or over 36 characters, and (v2) for IsRenewAck with any of
   MaxBytes, MinBytes, MaxRecords, MaxWaitMs not 0;
2. the share session (minibroker/share/session.py): epoch 0 opens it with the request's partitions
   (INVALID_REQUEST if the request carries acknowledgements); -1 is the final fetch (nothing is
   fetched; the session closes after the acknowledgements and the member's acquired records are
   released); any other epoch must be the session's (SHARE_SESSION_NOT_FOUND,
   INVALID_SHARE_SESSION_EPOCH), adds and forgets partitions and moves the epoch on. With
   `group.share.max.share.sessions` sessions open, a new one waits its max wait and is answered
   SHARE_SESSION_LIMIT_REACHED;
3. the acknowledgements (as ShareAcknowledge's, handlers/share_acknowledge.py), applied before the
   fetch, their result per partition in AcknowledgeErrorCode;
4. the fetch, of the session's partitions (rotated by the session epoch, so each gets its turn
   first): UNKNOWN_TOPIC_ID, TOPIC_AUTHORIZATION_FAILED, UNKNOWN_TOPIC_OR_PARTITION per partition;
   the rest wait (MaxWaitMs, MinBytes) and acquire up to MaxRecords in acquired batches of about
   BatchSize (record-limit mode with ShareAcquireMode 1), within MaxBytes (and fetch.max.bytes and
   the consumer_byte_rate quota's window, as Fetch), read_committed per the group's
   share.isolation.level.

The response: AcquisitionLockTimeoutMs (the group's share.record.lock.duration.ms), and per
partition the records (whole log batches holding the acquired records) and AcquiredRecords (first
offset, last offset, delivery count). After the first response of a session, a partition is
answered only with records, an error, an acknowledgement result, or when it is new in the session.
Charged to the consumer_byte_rate quota by the response's size; a throttled response carries no
partitions (the records it acquired come back when their locks expire, as in Kafka).
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from minibroker.auth import AclOperation, ResourceType
from minibroker.handlers import ByteRate, Reply, handler
from minibroker.handlers.share_acknowledge import (
    NO_LEADER,
    acknowledge,
    acknowledgement_batches,
    leader_hints,
    lock_timeout_ms,
    valid_member_id,
)
from minibroker.handlers.share_group_heartbeat import share_groups_enabled
from minibroker.protocol.entities import to_ms
from minibroker.protocol.errors import ErrorCode
from minibroker.share.session import FINAL_EPOCH, INITIAL_EPOCH, SharePartitionId, ShareSessionError

if TYPE_CHECKING:
    from minibroker.context import RequestContext

RECORD_LIMIT = 1  # ShareAcquireMode: 0 batch-optimized, 1 record-limit
# Kafka's Errors.INVALID_REQUEST message (what an exception without its own message says).
INVALID_REQUEST_MESSAGE = ("This most likely occurs because of a request being malformed by the client library or the "
                           "message was sent to an incompatible broker. See the broker logs for more details.")


def empty_response(body: dict[str, Any]) -> dict[str, Any]:
    """A throttled ShareFetch (Kafka's ShareSessionContext.throttleResponse): no partitions."""
    return {**body, "responses": [], "node_endpoints": []}


def _top_level(code: ErrorCode, message: str | None = None) -> Reply:
    return Reply({"error_code": code, "error_message": message, "acquisition_lock_timeout": 0,
                  "responses": [], "node_endpoints": []})


def _partition(index: int, code: ErrorCode = ErrorCode.none, message: str | None = None, records: bytes = b"",
               acquired: list | None = None) -> dict[str, Any]:
    return {"partition_index": index, "error_code": code, "error_message": message,
            "acknowledge_error_code": ErrorCode.none, "acknowledge_error_message": None,
            "current_leader": NO_LEADER, "records": records,
            "acquired_records": [{"first_offset": a.first_offset, "last_offset": a.last_offset,
                                  "delivery_count": a.delivery_count} for a in acquired or ()]}


# KIP-219: Kafka 4.4 clients wait out the throttle time of every response that carries one (KAFKA-20828).
@handler(78, 1, 2, client_throttles_from=1, byte_rate=ByteRate.FETCH, throttled_body=empty_response)
async def share_fetch(ctx: RequestContext, request: Any) -> Reply:
    if not share_groups_enabled(ctx):
        return _top_level(ErrorCode.unsupported_version)
    group_id, member_id, epoch = request.group_id, request.member_id, request.share_session_epoch
    if group_id is None:
        return _top_level(ErrorCode.invalid_request, "Invalid group id in the request.")
    if not ctx.authorize(AclOperation.READ, ResourceType.GROUP, group_id):
        return _top_level(ErrorCode.group_authorization_failed)
    if not valid_member_id(member_id):
        return _top_level(ErrorCode.invalid_request, "Invalid member id in the request.")
    max_wait_ms = to_ms(request.max_wait, 0)
    is_renew_ack = bool(getattr(request, "is_renew_ack", False))
    if is_renew_ack:
        wrong = [f"{name} must be set to 0, " for name, value in (
            ("maxBytes", request.max_bytes), ("minBytes", request.min_bytes), ("maxRecords", request.max_records),
            ("maxWaitMs", max_wait_ms)) if value != 0]
        if wrong:
            return _top_level(ErrorCode.invalid_request, "".join(wrong) + "if isRenewAck is true.")

    logs, shares = ctx.logs, ctx.shares
    has_acks = any(p.acknowledgement_batches for t in request.topics for p in t.partitions)
    requested = []
    for topic in request.topics:
        info = logs.topic_by_id(topic.topic_id)
        for p in topic.partitions:
            requested.append(SharePartitionId(topic.topic_id, None if info is None else info.name, p.partition_index))
    forgotten = [(t.topic_id, p) for t in request.forgotten_topics_data for p in t.partitions]

    sessions = shares.sessions
    try:
        if epoch == INITIAL_EPOCH:
            if has_acks:
                raise ShareSessionError(ErrorCode.invalid_request, INVALID_REQUEST_MESSAGE)
            session = sessions.open(group_id, member_id, ctx.connection.id, requested)
            fetch_partitions = requested
        else:
            session = sessions.existing(group_id, member_id, epoch)
            if epoch == FINAL_EPOCH:
                fetch_partitions = []
            else:
                session.update(requested, forgotten)
                sessions.advance(session)
                fetch_partitions = session.partition_list()
    except ShareSessionError as exc:
        if exc.error_code == ErrorCode.share_session_limit_reached:
            await ctx.clock.sleep_until(ctx.received_at + max_wait_ms / 1000)  # Kafka's idle share fetch timer
        return _top_level(exc.error_code, exc.message)

    # 3. The acknowledgements, then 4. the fetch.
    ack_results: dict = {}
    if has_acks or is_renew_ack:
        valid, erroneous = acknowledgement_batches(ctx, request.topics, is_renew_ack)
        ack_results = {**await acknowledge(ctx, group_id, member_id, valid), **erroneous}
    partitions: dict[tuple[uuid.UUID, int], dict[str, Any]] = {}
    if fetch_partitions and not is_renew_ack:
        rotation = epoch % len(fetch_partitions) if epoch > 0 else 0
        fetch_partitions = fetch_partitions[rotation:] + fetch_partitions[:rotation]
        to_fetch = []
        for tp in fetch_partitions:
            info = logs.topic_by_id(tp.topic_id)
            if info is None:
                partitions[(tp.topic_id, tp.partition)] = _partition(tp.partition, ErrorCode.unknown_topic_id)
            elif not ctx.authorize(AclOperation.READ, ResourceType.TOPIC, info.name):
                partitions[(tp.topic_id, tp.partition)] = _partition(tp.partition, ErrorCode.topic_authorization_failed)
            elif not 0 <= tp.partition < info.num_partitions:
                partitions[(tp.topic_id, tp.partition)] = _partition(tp.partition, ErrorCode.unknown_topic_or_partition)
            else:
                to_fetch.append((tp.topic_id, info.name, tp.partition))
        if to_fetch:
            max_bytes = min(request.max_bytes, ctx.config["fetch.max.bytes"])
            max_bytes = int(min(max_bytes, ctx.quotas.fetch_max_bytes(ctx.connection.quota_user, ctx.client_id)))
            results = await shares.fetch(
                group_id, member_id, to_fetch, max_wait_ms=max_wait_ms, min_bytes=min(request.min_bytes, max_bytes),
                max_bytes=max_bytes, max_records=request.max_records, batch_size=request.batch_size,
                record_limit=getattr(request, "share_acquire_mode", 0) == RECORD_LIMIT, received_at=ctx.received_at)
            for (topic_id, partition), result in results.items():
                partitions[(topic_id, partition)] = _partition(partition, result.error, result.message, result.records,
                                                               result.acquired)
    if epoch > 0:
        # Later fetches of a session answer only what must be answered (Kafka's ShareSessionContext).
        partitions = {key: value for key, value in partitions.items()
                      if session.must_respond(key[0], key[1], bool(value["records"]), value["error_code"] != 0)}
    for key, (code, message) in ack_results.items():
        entry = partitions.get(key)
        if entry is None:
            entry = partitions[key] = _partition(key[1])
        entry["acknowledge_error_code"] = code
        entry["acknowledge_error_message"] = message
    if epoch == FINAL_EPOCH:
        sessions.remove(group_id, member_id)
        shares.release_session(group_id, member_id, list(session.partitions))
    by_topic: dict[uuid.UUID, list[dict[str, Any]]] = {}
    for (topic_id, _), value in partitions.items():
        by_topic.setdefault(topic_id, []).append(value)
    endpoints = leader_hints(ctx, [(t, p) for t, ps in by_topic.items() for p in ps])
    return Reply({"error_code": ErrorCode.none, "error_message": None,
                  "acquisition_lock_timeout": lock_timeout_ms(ctx, group_id),
                  "responses": [{"topic_id": t, "partitions": ps} for t, ps in by_topic.items()],
                  "node_endpoints": endpoints})
