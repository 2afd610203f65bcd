"""Produce (key 0), v3-v13: check each partition's batch, append it, wake waiting fetches.

Behaviour: every partition is answered on its own. A partition's records must be exactly one v2
batch (Kafka's rule from v3) whose records add up (minibroker.protocol.records: count, offset deltas, record
framing, a known codec that decompresses); framing and CRC faults answer CORRUPT_MESSAGE, records
that do not add up INVALID_RECORD, codecs 5-7 (and zstd before v7) UNSUPPORTED_COMPRESSION_TYPE, a
batch over the topic's max.message.bytes (or decompressing past 64 times it) MESSAGE_TOO_LARGE, a
keyless record on a compacted topic INVALID_RECORD. A file-system error (disk full, read-only data
directory, out of file descriptors) answers KAFKA_STORAGE_ERROR for the partition, with nothing
appended; the next produce tries the disk again, so the broker recovers by itself. acks=0 gets no
response at all. v13 names topics by id. Producing never creates a topic (Metadata does).

Leadership and replication (minibroker.replication): a partition this broker does not lead is
answered NOT_LEADER_OR_FOLLOWER, with the leader and its epoch from v10 (KIP-951's current_leader,
and the leader's address in node_endpoints), so the client goes there without a Metadata round trip.
acks=1 is answered once the leader has appended; acks=-1 (all) is refused NOT_ENOUGH_REPLICAS
before anything is appended while the ISR is smaller than min.insync.replicas, and otherwise
answered once the high watermark passes the records (every ISR member has them), or
REQUEST_TIMED_OUT after the request's timeout (the records stay appended, as in Kafka), or
NOT_LEADER_OR_FOLLOWER if leadership moved meanwhile, or NOT_ENOUGH_REPLICAS_AFTER_APPEND if the
ISR shrank below min.insync.replicas meanwhile. While the ISR is the leader alone, acks=-1 is
answered at once.

Authorization (Kafka's handleProduceRequest): a request holding transactional batches needs WRITE on
its transactional id, else every partition is answered TRANSACTIONAL_ID_AUTHORIZATION_FAILED (53);
each topic needs WRITE, else its partitions are answered TOPIC_AUTHORIZATION_FAILED (29), whether or
not the topic exists. Without an authorizer neither check costs anything.

Transactional batches (KIP-98) go through the same checks and the same producer state as
idempotent ones (minibroker.storage.producer_state: a non-transactional batch of a producer with a transaction
open is INVALID_TXN_STATE), after the producer-id quota (they count like any batch with a producer
id). Before they are appended, the transaction coordinator's `ctx.txns.verify_produce` (KIP-890
part 1: was the partition added to the producer's transaction? asked wherever the coordinator runs,
`append_verified`) may refuse them with its own error
code, which depends on the request's version (TRANSACTION_ABORTABLE from v11, INVALID_TXN_STATE
before); transaction.partition.verification.enable=false accepts every one. The broker's own topics
(`__consumer_offsets`, the other Kafka internal topics, `__minibroker_audit`) are refused with
INVALID_TOPIC_EXCEPTION, as Kafka refuses clients' appends to internal topics.

Producer-id quota (KIP-936, minibroker.quotas.producer_id_quota): before anything is appended, a batch whose
producer id is new for the connection's user while that user's window is full is rejected for its
partition (not appended, so no producer state is created) with `producer.id.quota.error.code` and
the response's throttle_time set; the connection is then muted for that long (KIP-219). A producer
id with producer state on this broker (this partition's, else any partition's) is known and never
throttled; the quota asks producer state only for users it tracks.

A throttled batch holds back the later batches of its producer id to the same partition on the same
connection (same epoch, higher sequence): they are refused with the same error code, throttle 0 and
without asking the quota, until the throttled batch comes back. Otherwise a client with several
batches in flight (Java, librdkafka) would have its SECOND batch admitted once the window frees (it
waited in the socket during the mute) and appended as the producer's first (KIP-360: an unknown
producer id may start at any sequence); the retried first batch would then sit below the latest
sequence and be answered DUPLICATE_SEQUENCE_NUMBER, which every client takes for a success: a record
silently lost. At most HELD_PER_CONNECTION entries per connection (the oldest goes first).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple, cast

from minibroker.auth import AclOperation, ResourceType
from minibroker.handlers import ByteRate, Reply, handler
from minibroker.handlers.common import broker_owned, error_answer
from minibroker.protocol.errors import ErrorCode
from minibroker.protocol.records import (
    MAX_COMPRESSION_RATIO,
    BatchHeader,
    InvalidRecordError,
    MissingKeyError,
    check_produce_records,
    keyless_records,
    record_timestamps,
)
from minibroker.storage.config import LONG_MAX
from minibroker.storage.producer_state import SEQUENCE_SPACE

if TYPE_CHECKING:
    from minibroker.context import Connection, RequestContext
    from minibroker.storage.log import PartitionLog
    from minibroker.storage.manager import TopicInfo

HELD_PER_CONNECTION = 256
MAX_DECOMPRESSED = 1 << 27  # reading timestamps of a batch already checked against its own bound


def _partition_result(index: int, code: int, message: str | None = None, base_offset: int = -1,
                      log_append_time: int = -1, log_start_offset: int = -1,
                      record_errors: tuple[dict[str, Any], ...] = ()) -> dict[str, Any]:
    return {
        "index": index,
        "error_code": code,
        "base_offset": base_offset,
        "log_append_time": log_append_time,
        "log_start_offset": log_start_offset,
        "record_errors": record_errors,
        "error_message": message,
    }


def not_leader(ctx: RequestContext, topic: str, partition: int) -> dict[str, Any]:
    """NOT_LEADER_OR_FOLLOWER with the partition's leader and epoch (KIP-951, v10+)."""
    result = _partition_result(partition, ErrorCode.not_leader_or_follower)
    registration = ctx.cluster.partition(topic, partition)
    if registration is not None and registration.leader >= 0:
        result["current_leader"] = {"leader_id": registration.leader, "leader_epoch": registration.leader_epoch}
    return result


def _node_endpoints(ctx: RequestContext, responses: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The brokers named as current leaders, as clients of this listener reach them (KIP-951)."""
    leaders = {p["current_leader"]["leader_id"] for t in responses for p in t["partition_responses"]
               if "current_leader" in p}
    endpoints = []
    for node in sorted(leaders):
        endpoint = ctx.cluster.broker_endpoint(ctx.connection.listener, node)
        endpoints.append({"node_id": node, "host": endpoint["host"], "port": endpoint["port"], "rack": endpoint["rack"]})
    return endpoints


def _rejected_records(index: int, code: int, log_start_offset: int, errors: list[tuple[int, str]]) -> PartitionOutcome:
    """A batch refused whole for some of its records (Kafka's RecordValidationException, KIP-467):
    each named in record_errors, so that a client fails those records and retries nothing in vain;
    the answer carries the log start offset, as Kafka's does."""
    record_errors = tuple({"batch_index": i, "batch_index_error_message": message} for i, message in errors)
    return PartitionOutcome(_partition_result(index, code, errors[0][1], log_start_offset=log_start_offset,
                                              record_errors=record_errors))


def _timestamp_errors(records: bytes | memoryview, header: BatchHeader, config: Any, now_ms: int,
                      ) -> list[tuple[int, str]]:
    """The records of a CreateTime batch whose timestamps are outside [now - message.timestamp.before.max.ms,
    now + message.timestamp.after.max.ms] (Kafka's LogValidator.validateTimestamp), with Kafka's message."""
    if config.log_append_time:
        return []
    before, after = config.message_timestamp_before_max_ms, config.message_timestamp_after_max_ms
    if header.max_timestamp <= now_ms + after and before >= LONG_MAX:
        return []  # the fast path: the batch's newest timestamp is in range and nothing is too old
    low, high = now_ms - before, now_ms + after
    errors = []
    for i, (_, timestamp) in enumerate(record_timestamps(bytes(records), max_decompressed=MAX_DECOMPRESSED)):
        if not low <= timestamp <= high:
            errors.append((i, f"Timestamp {timestamp} of message with offset {i} is out of range. "
                              f"The timestamp should be within [{low}, {high}]"))
    return errors


class PartitionOutcome(NamedTuple):
    response: dict[str, Any]
    throttle_ms: int = 0  # producer-id quota throttle for this partition's batch
    header: BatchHeader | None = None
    pid_new: bool | None = None  # what the producer-id quota made of the batch's PID (None: not asked)
    held: bool = False  # refused behind a throttled earlier batch of its producer id (see above)
    verify: tuple[Any, bytes | memoryview] | None = None  # a transactional batch to verify: (log, records)


def _later_than_held(held: dict, key: tuple, header: BatchHeader) -> bool:
    """True when a throttled earlier batch of this producer id to this partition is still to come
    back (`held`: the connection's entries); forgets the entry when this batch is that one (or an
    earlier one, or another epoch)."""
    entry = held.get(key)
    if entry is None:
        return False
    epoch, sequence = entry
    if header.producer_epoch == epoch and 0 < (header.base_sequence - sequence) % SEQUENCE_SPACE < SEQUENCE_SPACE // 2:
        return True
    del held[key]
    return False


def _hold(conn, key: tuple, header: BatchHeader) -> None:
    held = conn.held_batches
    if held is None:
        held = conn.held_batches = {}
    elif key not in held and len(held) >= HELD_PER_CONNECTION:
        del held[next(iter(held))]
    held[key] = (header.producer_epoch, header.base_sequence)


def append_partition(ctx: RequestContext, topic: TopicInfo | None, partition_index: int,
                     records: bytes | memoryview | None, now_ms: int, conn: Connection, version: int = 13,
                     transactional_id: str | None = None, origin: tuple[bytes, int] | None = None,
                     acks: int = 1) -> PartitionOutcome:
    """Check and append one partition's records (`conn`: the Connection they came on;
    `transactional_id`: the request's; `origin`: where a view `records` lies in its frame, so
    validation reads it there, uncopied; see minibroker.protocol.produce_request)."""
    log = ctx.logs.log(topic.name, partition_index) if topic is not None else None
    if topic is None or log is None or log.leader_epoch is None:
        if topic is not None and 0 <= partition_index < topic.num_partitions:
            return PartitionOutcome(not_leader(ctx, topic.name, partition_index))
        return PartitionOutcome(_partition_result(partition_index, ErrorCode.unknown_topic_or_partition))
    if not records:
        return PartitionOutcome(_partition_result(partition_index, ErrorCode.invalid_record, "no records"))
    if len(records) > log.config.max_message_bytes:
        return PartitionOutcome(_partition_result(
            partition_index,
            ErrorCode.message_too_large,
            f"batch of {len(records)} bytes exceeds max.message.bytes {log.config.max_message_bytes}",
        ))
    config = log.config
    try:
        header = check_produce_records(
            records,
            max_message_bytes=config.max_message_bytes,
            require_keys="compact" in config.cleanup_policy,
            produce_version=version,
            origin=origin,
        )
    except MissingKeyError:
        header = check_produce_records(records, max_message_bytes=config.max_message_bytes, produce_version=version,
                                       origin=origin)
        message = f"Compacted topic cannot accept message without key in topic partition {topic.name}-{partition_index}"
        keyless = keyless_records(records, header, config.max_message_bytes * MAX_COMPRESSION_RATIO)
        return _rejected_records(partition_index, ErrorCode.invalid_record, log.log_start_offset,
                                 [(i, message) for i in keyless])
    except InvalidRecordError as exc:
        return PartitionOutcome(_partition_result(partition_index, exc.error_code, str(exc)))
    if errors := _timestamp_errors(records, header, config, now_ms):
        return _rejected_records(partition_index, ErrorCode.invalid_timestamp, log.log_start_offset, errors)
    if acks == -1 and log.config.min_insync_replicas > 1 and \
            len(ctx.replicas.replication.isr(topic.name, partition_index)) < log.config.min_insync_replicas:
        isr = ctx.replicas.replication.isr(topic.name, partition_index)
        return PartitionOutcome(_partition_result(
            partition_index, ErrorCode.not_enough_replicas,
            f"The size of the current ISR {set(isr)} is insufficient to satisfy the min.isr requirement of "
            f"{log.config.min_insync_replicas} for partition {topic.name}-{partition_index}"))
    pid_new = None
    if header.has_producer_id:
        producer_id = header.producer_id
        held = conn.held_batches
        if held and _later_than_held(held, (topic.name, partition_index, producer_id), header):
            message = (f"an earlier batch of producer id {producer_id} to this partition was throttled by the "
                       "producer id quota: retry it first")
            return PartitionOutcome(_partition_result(partition_index, ctx.config["producer.id.quota.error.code"],
                                                      message), 0, header, None, True)
        user = conn.quota_user
        states = ctx.producer_states

        def has_state() -> bool:
            return states.holds(producer_id, now_ms, states.manager(topic.name, partition_index, log, now_ms))

        verdict = ctx.quotas.pid.track(user, producer_id, now_ms, has_state)
        pid_new = None if not verdict.tracked else not verdict.known
        if verdict.throttle_time_ms > 0:
            _hold(conn, (topic.name, partition_index, producer_id), header)
            message = f"producer id quota exceeded for user {user!r}: new producer id {producer_id} throttled"
            return PartitionOutcome(_partition_result(partition_index, ctx.config["producer.id.quota.error.code"],
                                                      message), verdict.throttle_time_ms, header, pid_new)
    if header.is_transactional:
        # KIP-890: the coordinator is asked first (`append_verified`, awaited by the handler).
        return PartitionOutcome(_partition_result(partition_index, ErrorCode.none), 0, header, pid_new,
                                verify=(log, records))
    return _append(ctx, topic, partition_index, log, header, records, now_ms, pid_new)


async def append_verified(ctx: RequestContext, topic: TopicInfo, partition_index: int, outcome: PartitionOutcome,
                          now_ms: int, transactional_id: str | None, version: int) -> PartitionOutcome:
    """A transactional batch `append_partition` checked: the transaction coordinator says whether
    its partition is in the producer's transaction (KIP-890 part 1; from v12 it adds it, part 2),
    wherever the coordinator runs, then it is appended. A marker of the producer written to the
    partition while the coordinator was asked voids the answer (Kafka's verification guard: the
    transaction it was verified in has ended), as does a leadership lost meanwhile."""
    assert outcome.header is not None and outcome.verify is not None
    header, (log, records) = outcome.header, outcome.verify
    log = cast("PartitionLog", log)
    replicas = ctx.replicas
    guard = replicas.verification_guard(topic.name, partition_index, header.producer_id)
    code = await ctx.txns.verify_produce(transactional_id, header.producer_id, header.producer_epoch,
                                         topic.name, partition_index, version)
    if code == ErrorCode.none and not replicas.guard_holds(topic.name, partition_index, header.producer_id, guard):
        code = ErrorCode.transaction_abortable if version >= 11 else ErrorCode.invalid_txn_state
    if code != ErrorCode.none:
        replicas.drop_guard(topic.name, partition_index, header.producer_id, guard)
        message = (f"transactional batch of producer {header.producer_id} (transactional id "
                   f"{transactional_id!r}) refused for {topic.name}-{partition_index}")
        return PartitionOutcome(_partition_result(partition_index, code, message), 0, header, outcome.pid_new)
    if ctx.logs.log(topic.name, partition_index) is not log or log.leader_epoch is None:
        return PartitionOutcome(not_leader(ctx, topic.name, partition_index), 0, header, outcome.pid_new)
    return _append(ctx, topic, partition_index, log, header, records, now_ms, outcome.pid_new)


def _append(ctx: RequestContext, topic: TopicInfo, partition_index: int, log: Any, header: BatchHeader,
            records: bytes | memoryview, now_ms: int, pid_new: bool | None) -> PartitionOutcome:
    try:
        result = ctx.replicas.append_checked(topic.name, partition_index, log, header, records, now_ms)
    except OSError as exc:
        # Disk full, read-only, out of descriptors: nothing was appended (the log rolls a failed
        # write back), so the client may retry; the next append tries the disk again.
        code, message = error_answer(ctx.storage_errors, exc, f"{topic.name}-{partition_index}")
        return PartitionOutcome(_partition_result(partition_index, code, message), 0, header, pid_new)
    return PartitionOutcome(_partition_result(
        partition_index,
        result.error_code,
        result.error_message,
        base_offset=result.base_offset,
        log_append_time=result.log_append_time_ms,
        log_start_offset=result.log_start_offset,
    ), 0, header, pid_new)


@handler(0, 3, 13, client_throttles_from=6, byte_rate=ByteRate.PRODUCE, audited=True)
async def produce(ctx: RequestContext, request: Any) -> Reply | None:
    now_ms = ctx.clock.now_ms()
    acks = request.acks
    logs, audit = ctx.logs, ctx.audit
    throttle_ms = 0
    responses = []
    denied = _denied_topics(ctx, request) if ctx.auth.authorizer is not None else None
    if denied is ALL_DENIED:
        code = ErrorCode.transactional_id_authorization_failed
        return Reply({"responses": [
            {"name": getattr(t, "name", None), "topic_id": getattr(t, "topic_id", None),
             "partition_responses": [_partition_result(p.index, code) for p in t.partition_data]}
            for t in request.topic_data]}) if acks != 0 else None
    waiting: dict[tuple[str, int], tuple[int, dict[str, Any]]] = {}
    for topic_data in request.topic_data:
        name = getattr(topic_data, "name", None)
        topic_id = getattr(topic_data, "topic_id", None)
        topic = logs.resolve(name, topic_id)
        if denied and (topic.name if topic is not None else name) in denied:
            code = ErrorCode.topic_authorization_failed
            partitions = [_partition_result(p.index, code) for p in topic_data.partition_data]
        elif acks not in (0, 1, -1):
            partitions = [_partition_result(p.index, ErrorCode.invalid_required_acks) for p in topic_data.partition_data]
        elif topic is None and name is None:
            partitions = [_partition_result(p.index, ErrorCode.unknown_topic_id) for p in topic_data.partition_data]
        elif topic is not None and broker_owned(topic.name):
            # Kafka's ReplicaManager: "Cannot append to internal topic" (InvalidTopicException).
            message = f"Cannot append to internal topic {topic.name}"
            partitions = [_partition_result(p.index, ErrorCode.invalid_topic_exception, message) for p in topic_data.partition_data]
        else:
            partitions = []
            for p in topic_data.partition_data:
                outcome = append_partition(ctx, topic, p.index, p.records, now_ms, ctx.connection, ctx.version,
                                           request.transactional_id, p.origin, acks)
                if outcome.verify is not None and topic is not None:
                    outcome = await append_verified(ctx, topic, p.index, outcome, now_ms, request.transactional_id,
                                                    ctx.version)
                partitions.append(outcome.response)
                throttle_ms = max(throttle_ms, outcome.throttle_ms)
                if acks == -1 and outcome.response["error_code"] == ErrorCode.none and outcome.header is not None \
                        and outcome.response["base_offset"] >= 0 and topic is not None:
                    last = outcome.response["base_offset"] + outcome.header.last_offset_delta + 1
                    log = logs.log(topic.name, p.index)
                    if log is not None and log.high_watermark < last:
                        waiting[(topic.name, p.index)] = (last, outcome.response)
                if audit is not None:
                    audit.record_produce(ctx, topic.name if topic else name, p.index, p.records, outcome, now_ms)
        responses.append({"name": name, "topic_id": topic_id, "partition_responses": partitions})
    if waiting:  # acks=all: the high watermark must pass each partition's records first
        errors = await ctx.replicas.replication.wait_replicated(
            {tp: last for tp, (last, _) in waiting.items()}, request.timeout_ms)
        for tp, (_, response) in waiting.items():
            code = errors.get(tp, ErrorCode.none)
            if code != ErrorCode.none:
                response["error_code"] = code
                if code == ErrorCode.not_leader_or_follower:
                    response.update({k: v for k, v in not_leader(ctx, *tp).items() if k == "current_leader"})
    if acks == 0:
        return None
    body: dict[str, Any] = {"responses": responses}
    if ctx.version >= 10 and any("current_leader" in p for t in responses for p in t["partition_responses"] or ()):
        body["node_endpoints"] = _node_endpoints(ctx, responses)
    return Reply(body, throttle_ms)


ALL_DENIED: frozenset[str] = frozenset({"<all>"})
_TRANSACTIONAL = 0x10  # the attributes bit of a transactional batch
_ATTRIBUTES_AT = 21  # base offset 8, length 4, leader epoch 4, magic 1, crc 4


def _denied_topics(ctx: RequestContext, request: Any) -> frozenset[str]:
    """The topics of the request its principal may not write to; ALL_DENIED when it holds
    transactional batches and may not write to its transactional id."""
    transactional = any(len(p.records or b"") > _ATTRIBUTES_AT + 1 and p.records[_ATTRIBUTES_AT + 1] & _TRANSACTIONAL
                        for t in request.topic_data for p in t.partition_data)
    if transactional and (request.transactional_id is None or not ctx.authorize(
            AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id)):
        return ALL_DENIED
    names = []
    for topic_data in request.topic_data:
        topic = ctx.logs.resolve(getattr(topic_data, "name", None), getattr(topic_data, "topic_id", None))
        name = topic.name if topic is not None else getattr(topic_data, "name", None)
        if name is not None:
            names.append(name)
    allowed = set(ctx.filter_authorized(AclOperation.WRITE, ResourceType.TOPIC, names))
    return frozenset(name for name in names if name not in allowed)
