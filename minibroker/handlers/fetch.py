"""Fetch (key 1), v4-v18: read whole batches, long-poll in the purgatory.

Behaviour: a fetch that finds fewer than min_bytes waits (up to max_wait_ms) as a DelayedFetch,
watched by its topic-partitions; a produce to any of them completes it at once. Partitions are
filled in request order within max_bytes (and fetch.max.bytes) and each partition's
partition_max_bytes; the first batch returned is always whole even when larger (KIP-74). An offset
outside [log start, log end] answers OFFSET_OUT_OF_RANGE for that partition. Incremental fetch
sessions (KIP-227, v7+) are kept by minibroker.fetch_sessions: a full fetch may open one, an
incremental fetch reads the session's partitions and is answered only those that changed.
v13+ names topics by id (UNKNOWN_TOPIC_ID for an unknown one). Consumers read up to the high
watermark (minibroker.storage.log: the log end while the partition has no other replica). A
file-system error reading a partition answers KAFKA_STORAGE_ERROR for that partition.

Transactions (KIP-98, Kafka's LocalLog.read / UnifiedLog.collectAbortedTransactions): every
response carries the partition's last stable offset (the first offset of its oldest open
transaction, else the high watermark), whatever the isolation level. isolation_level=1
(READ_COMMITTED) returns only batches below the LSO, and the aborted transactions (producer id, first
offset) overlapping the offsets returned, from the segments' `.txnindex` files, so the client drops
their records; READ_UNCOMMITTED returns everything up to the high watermark and a null list. Control
batches (the COMMIT/ABORT markers) are returned like any batch: clients skip them. A read_committed
fetch waiting for data is woken by a marker that moves the LSO, not only by new records.

Authorization (Kafka's handleFetchRequest): a consumer needs READ on each topic, else its partitions
are answered TOPIC_AUTHORIZATION_FAILED (29) whether or not the topic exists (an unknown topic id
stays UNKNOWN_TOPIC_ID); a follower's fetch (a replica id >= 0) needs CLUSTER_ACTION on the cluster,
else every partition is answered 29.

Leaders and followers (minibroker.replication): a partition this broker does not lead is answered
NOT_LEADER_OR_FOLLOWER, with its leader and leader epoch from v12 (current_leader) and the leader's
address from v16 (node_endpoints, KIP-951). A request naming a current_leader_epoch older than the
partition's is FENCED_LEADER_EPOCH, a newer one UNKNOWN_LEADER_EPOCH (KIP-320). A follower's fetch
(its replica id in replica_state, v15+, or replica_id) takes the same path: it reads up to the log
end rather than the high watermark, records the follower's progress (minibroker.replication:
caught up, the ISR, the high watermark), and, when the follower's last_fetched_epoch ends earlier
here than its fetch offset, answers diverging_epoch (the epoch and its end offset here) instead of
records, so the follower truncates (KIP-595's check, Kafka's Partition.fetchRecords).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from minibroker.auth import AclOperation, ResourceType
from minibroker.handlers import ByteRate, Reply, handler
from minibroker.handlers.common import error_answer
from minibroker.purgatory import DelayedOperation
from minibroker.protocol.entities import to_ms
from minibroker.protocol.errors import ErrorCode
from minibroker.protocol.records import iter_headers
from minibroker.storage.log import OffsetOutOfRangeError

READ_COMMITTED = 1  # isolation_level

if TYPE_CHECKING:
    from minibroker.audit import AuditLog
    from minibroker.context import RequestContext


class _FetchPlan:
    """The partitions one Fetch reads (the request's, or its session's), resolved once."""

    def __init__(self, ctx: RequestContext, request, wanted) -> None:
        self.replicas = ctx.replicas
        self.ctx = ctx
        self.storage_errors = ctx.storage_errors
        self.read_committed = getattr(request, "isolation_level", 0) == READ_COMMITTED
        self.replica_id = replica_id_of(request)
        self.in_process = ctx.connection.inter_broker  # another broker of the cluster (minibroker.replication)
        # The epochs each partition of the request names: (current_leader_epoch, last_fetched_epoch).
        self.epochs: dict[tuple[Any, int], tuple[int, int]] = {}
        for topic in request.topics:
            key = getattr(topic, "topic", None) or getattr(topic, "topic_id", None)
            for p in topic.partitions:
                self.epochs[(key, p.partition)] = (getattr(p, "current_leader_epoch", -1),
                                                   getattr(p, "last_fetched_epoch", -1))
        self.entries: list[Any] = []  # (topic name or None, topic id or None, info, partition, offset, max_bytes, log)
        self.denied: set[tuple[str | None, Any]] = set()  # (name, topic_id) of topics it may not read
        check = ctx.auth.authorizer is not None
        follower_allowed = None
        resolved: dict = {}
        for name, topic_id, partition, offset, max_bytes in wanted:
            info = resolved.get((name, topic_id), False)
            if info is False:
                info = resolved[(name, topic_id)] = ctx.logs.resolve(name, topic_id)
                topic_name = info.name if info is not None else name
                if check and topic_name is not None:
                    if self.replica_id >= 0:
                        if follower_allowed is None:
                            follower_allowed = ctx.authorize_cluster(AclOperation.CLUSTER_ACTION)
                        allowed = follower_allowed
                    else:
                        allowed = ctx.authorize(AclOperation.READ, ResourceType.TOPIC, topic_name)
                    if not allowed:
                        self.denied.add((name, topic_id))
                        info = resolved[(name, topic_id)] = None
            log = ctx.logs.log(info.name, partition) if info is not None else None
            self.entries.append((name, topic_id, info, partition, offset, max_bytes, log))
        if self.replica_id >= 0:  # a follower's fetch: its progress, as of this request
            now_ms = ctx.clock.now_ms()
            replication = ctx.replicas.replication
            for _, _, info, partition, offset, _, log in self.entries:
                if log is not None and log.leader_epoch is not None:
                    replication.update_follower(info.name, partition, self.replica_id, offset, now_ms)

    def keys(self):
        return [(info.name, part) for _, _, info, part, _, _, log in self.entries if log is not None]

    def fetchable_end(self, name: str, part: int, log) -> int:
        """Where this fetch's reads stop: the last stable offset for read_committed, else the high
        watermark."""
        if self.replica_id >= 0:
            return log.log_end_offset
        if self.read_committed:
            return self.replicas.last_stable_offset(name, part, log)
        return log.high_watermark

    def bytes_ready(self, min_bytes: int) -> bool:
        """Whether a read now would return at least min_bytes (or hit an error, which is final)."""
        total = 0
        try:
            for name, topic_id, info, part, offset, max_bytes, log in self.entries:
                if log is None or offset < log.log_start_offset or offset > log.log_end_offset:
                    return True
                if self._refusal(name, topic_id, part, offset, log) is not None:
                    return True
                end = self.fetchable_end(info.name, part, log)
                if end > offset:
                    if min_bytes <= 1:
                        return True
                    total += len(log.read(offset, max_bytes, max_offset=end))
                    if total >= min_bytes:
                        return True
        except OSError:  # loading or reading the log failed: the read below answers KAFKA_STORAGE_ERROR
            return True
        return False

    def read(self, max_bytes: int, quiet=None) -> list[dict]:
        """The response's topics. `quiet(index, log)`: a partition with nothing to answer in its
        fetch session, left out (minibroker.fetch_sessions.FetchContext.quiet)."""
        topics: list[dict] = []
        by_topic: dict = {}
        remaining = max_bytes
        for index, (name, topic_id, info, part, offset, part_max, log) in enumerate(self.entries):
            if quiet is not None and log is not None and quiet(index, log):
                continue
            key = (name, topic_id)
            if key not in by_topic:
                by_topic[key] = {"topic": name, "topic_id": topic_id, "partitions": []}
                topics.append(by_topic[key])
            if log is None and info is not None and 0 <= part < info.num_partitions:
                by_topic[key]["partitions"].append(self._not_leader(info.name, part))
                continue
            if log is None:
                code = ErrorCode.unknown_topic_or_partition if name is not None or info is not None else ErrorCode.unknown_topic_id
                if key in self.denied:
                    code = ErrorCode.topic_authorization_failed
                # Kafka's FetchResponse.partitionResponse: an empty (not null) aborted list.
                by_topic[key]["partitions"].append(_partition(part, code, aborted=[]))
                continue
            refusal = self._refusal(name, topic_id, part, offset, log)
            if refusal is not None:
                by_topic[key]["partitions"].append(refusal)
                continue
            aborted = None
            try:
                if self.replica_id >= 0:
                    lso = self.replicas.last_stable_offset(info.name, part, log)
                    # A follower in process appends the buffer as it is (never encoded): a read cut
                    # at the last whole batch is a view, not a copy (LogSegment.read).
                    data = log.read(offset, min(part_max, max(remaining, 0)), min_one_batch=remaining == max_bytes,
                                    view=self.in_process)
                else:
                    lso = self.replicas.last_stable_offset(info.name, part, log)
                    data = log.read(offset, min(part_max, max(remaining, 0)), min_one_batch=remaining == max_bytes,
                                    max_offset=lso if self.read_committed else log.high_watermark)
                if self.read_committed:
                    aborted = _aborted_transactions(log, offset, data)
            except OffsetOutOfRangeError:
                # Kafka's ReplicaManager answers a read error with no offsets at all (-1), the client
                # asks ListOffsets for them (its auto.offset.reset).
                by_topic[key]["partitions"].append(_partition(part, ErrorCode.offset_out_of_range))
                continue
            except OSError as exc:
                code, _ = error_answer(self.storage_errors, exc, f"{info.name}-{part}")
                by_topic[key]["partitions"].append(_partition(part, code))
                continue
            remaining -= len(data)
            by_topic[key]["partitions"].append(
                _partition(part, 0, log.high_watermark, log.log_start_offset, data, lso, aborted)
            )
        return topics


    def _refusal(self, name, topic_id, part: int, offset: int, log) -> dict[str, Any] | None:
        """The answer of a partition that is not read (module docstring): not led here, a leader
        epoch that does not match, or a follower's log that diverged; None to read it."""
        if log.leader_epoch is None:
            info = self.ctx.logs.resolve(name, topic_id)
            return self._not_leader(info.name if info is not None else name, part)
        current, last_fetched = self.epochs.get((name or topic_id, part), (-1, -1))
        if current >= 0 and current != log.leader_epoch:
            code = ErrorCode.fenced_leader_epoch if current < log.leader_epoch else ErrorCode.unknown_leader_epoch
            return _partition(part, code)
        if self.replica_id >= 0 and last_fetched >= 0:
            epoch, end = log.leader_epochs.end_offset_for(last_fetched, log.log_end_offset)
            if epoch < last_fetched or end < offset:
                answer = _partition(part, 0, log.high_watermark, log.log_start_offset)
                answer["diverging_epoch"] = {"epoch": epoch, "end_offset": end}
                return answer
        return None

    def _not_leader(self, topic: str, part: int) -> dict[str, Any]:
        answer = _partition(part, ErrorCode.not_leader_or_follower, aborted=[])
        registration = self.ctx.cluster.partition(topic, part)
        if registration is not None and registration.leader >= 0:
            answer["current_leader"] = {"leader_id": registration.leader, "leader_epoch": registration.leader_epoch}
        return answer


def replica_id_of(request) -> int:
    """The follower a Fetch comes from (-1 for a consumer): replica_state's from v15, replica_id's before."""
    state = getattr(request, "replica_state", None)
    if state is not None:
        return state.replica_id
    return getattr(request, "replica_id", -1)


def node_endpoints(ctx: RequestContext, responses: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The brokers named as current leaders, as clients of this listener reach them (KIP-951)."""
    leaders = {p["current_leader"]["leader_id"] for t in responses for p in t["partitions"] if "current_leader" in p}
    endpoints = []
    for node in sorted(leaders):
        endpoint = ctx.cluster.broker_endpoint(ctx.connection.listener, node)
        endpoints.append({"node_id": node, "host": endpoint["host"], "port": endpoint["port"], "rack": endpoint["rack"]})
    return endpoints


def _aborted_transactions(log, offset: int, data: bytes) -> list[dict[str, int]]:
    """The aborted transactions overlapping the batches of `data` (read from `offset`), as Fetch
    answers them. Kafka bounds the search by the offset index entry after the data; the offset after
    its last batch is as good a bound and never looser."""
    if not data:
        return []
    last_offset = offset
    for header in iter_headers(data):
        last_offset = header.last_offset
    return [{"producer_id": txn.producer_id, "first_offset": txn.first_offset}
            for txn in log.aborted_transactions(offset, last_offset + 1)]


def _partition(index: int, code: int, high_watermark: int = -1, log_start: int = -1,
               records: bytes | memoryview = b"", last_stable_offset: int | None = None,
               aborted: list[dict[str, int]] | None = None) -> dict[str, Any]:
    return {
        "partition_index": index,
        "error_code": code,
        "high_watermark": high_watermark,
        "last_stable_offset": high_watermark if last_stable_offset is None else last_stable_offset,
        "log_start_offset": log_start,
        "aborted_transactions": aborted,  # null for READ_UNCOMMITTED and read errors, as Kafka sends it
        "preferred_read_replica": -1,
        "records": records,
    }


def empty_response(body: dict[str, Any]) -> dict[str, Any]:
    """A Fetch a client quota throttles is answered with no records (Kafka's KafkaApis): what is not
    returned does not count against the quota, nor as sent in the fetch session (`_on_discard`)."""
    on_discard = body.get("_on_discard")
    session_id = on_discard() if on_discard is not None else body.get("session_id", 0)
    return {**body, "error_code": ErrorCode.none, "session_id": session_id, "responses": (), "_on_discard": None}


class DelayedFetch(DelayedOperation):
    def __init__(self, deadline: float, plan: _FetchPlan, min_bytes: int) -> None:
        super().__init__(deadline)
        self.plan = plan
        self.min_bytes = min_bytes

    def try_complete(self) -> bool:
        if self.plan.bytes_ready(self.min_bytes):
            return self.force_complete()
        return False


@handler(1, 4, 18, client_throttles_from=8, byte_rate=ByteRate.FETCH, throttled_body=empty_response, audited=True)
async def fetch(ctx: RequestContext, request: Any) -> Reply:
    follower = replica_id_of(request) >= 0
    session = ctx.fetch_sessions.new_context(request, ctx.version, ctx.clock.now_ms(), privileged=follower)
    if session.error:
        return Reply({"error_code": session.error, "session_id": 0, "responses": ()})
    plan = _FetchPlan(ctx, request, session.wanted)
    if follower:  # replica.fetch.response.max.bytes bounds it; client quotas are not the followers'
        max_bytes = request.max_bytes
    else:
        max_bytes = min(request.max_bytes, ctx.config["fetch.max.bytes"])
        # A consumer_byte_rate quota caps one response at quota * (samples - 1) * window, as in Kafka.
        max_bytes = int(min(max_bytes, ctx.quotas.fetch_max_bytes(ctx.connection.quota_user, ctx.client_id)))
    max_wait_ms = to_ms(request.max_wait, 0)
    min_bytes = request.min_bytes
    if max_wait_ms > 0 and min_bytes > 0 and plan.entries:
        op = DelayedFetch(ctx.received_at + max_wait_ms / 1000, plan, min_bytes)
        await ctx.purgatory.wait(op, plan.keys())
    session_id, responses, on_discard = session.finish(
        plan.read(max_bytes, session.quiet if session.session is not None else None))
    if ctx.audit is not None and not follower:
        _audit(ctx, ctx.audit, plan, responses)
    body = {"error_code": ErrorCode.none, "session_id": session_id, "responses": responses}
    if ctx.version >= 16 and any("current_leader" in p for t in responses for p in t["partitions"]):
        body["node_endpoints"] = node_endpoints(ctx, responses)
    if on_discard is not None:
        body["_on_discard"] = on_discard
    return Reply(body)


def _audit(ctx: RequestContext, audit: AuditLog, plan: _FetchPlan, responses: list[dict[str, Any]]) -> None:
    """One audit event per fetched partition (batch headers only: the records are not decoded).
    Fetches of the audit topic itself are left out, so its readers do not feed it."""
    now_ms = ctx.clock.now_ms()
    infos = {(name, topic_id): info for name, topic_id, info, *_ in plan.entries}
    for topic in responses:
        info = infos[(topic["topic"], topic["topic_id"])]
        name = info.name if info is not None else topic["topic"]
        if name == audit.topic:
            continue
        for partition in topic["partitions"]:
            data = partition["records"]
            records = sum(h.records_count for h in iter_headers(data)) if data else 0
            audit.record_fetch(ctx, name, partition["partition_index"], len(data), records,
                               partition["error_code"], 0, "", now_ms)


__all__ = ["fetch"]
