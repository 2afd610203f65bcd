"""`AuditLog`: the broker's audit stream of quota decisions, written to an internal topic.

Opt-in (`audit.enable`, default false). The request path calls `record(event)` once per decision (one
event per produced partition batch, per fetched partition, per InitProducerId; the fields are the
contract in `minibroker.storage.audit_format`); that only appends the dict to a list. The events become records
of partition 0 of `__minibroker_audit` when `flush(now_ms)` runs: from `maybe_flush` (every
`flush_interval_ms`), when `max_buffered` events are waiting, and at `close`. Each flush is one append
of uncompressed v2 batches (normally one batch; more only when the events outgrow the topic's
max.message.bytes): key = principal, value = compact JSON.

Keeping the stream in the broker's own storage is the Kafka way (like `__consumer_offsets`): any
Kafka client can consume it, retention bounds it, and the pipeline reads the segment files directly.
The topic is created on first flush, with one partition and the `topic_configs` given (retention.ms,
retention.bytes, ...); it is recreated the same way if someone deletes it.

Best effort: a flush that cannot write (disk full, a bad topic config) logs the error and drops those
events (counted in `dropped`); auditing never fails a client's request.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Iterable, Mapping

from minibroker.protocol.records import encode_batch
from minibroker.storage.audit_format import (
    API_FETCH,
    API_INIT_PRODUCER_ID,
    API_PRODUCE,
    AUDIT_FIELD_NAMES,
    AUDIT_TOPIC,
    HELD_BY_PID_QUOTA,
    QUOTA_SETTING_KEYS,
    encode_event,
    quota_config_event,
)
from minibroker.storage.manager import LogManager

__all__ = ["AuditLog", "quota_settings"]


def quota_settings(config: Any) -> dict[str, float]:
    """The settings a quota-configuration event carries, from the broker's config (any mapping of
    Kafka's names to values)."""
    return {key: float(config[key]) for key in QUOTA_SETTING_KEYS}

log = logging.getLogger(__name__)

_BYTES, _RECORDS, _THROTTLE, _QUOTA = (
    AUDIT_FIELD_NAMES.index(name) for name in ("bytes", "records", "throttle_time_ms", "throttle_quota")
)

# Bytes a record adds besides its key and value: length, attributes, two deltas, key and value
# lengths, header count (varints; generous).
_RECORD_OVERHEAD = 24
_BATCH_OVERHEAD = 61


class AuditLog:
    def __init__(
        self,
        logs: LogManager,
        *,
        topic: str = AUDIT_TOPIC,
        flush_interval_ms: int = 1000,
        max_buffered: int = 10_000,
        topic_configs: Mapping[str, str] | None = None,
        on_append: Callable[[str, int], object] | None = None,
    ) -> None:
        """`topic_configs`: the overrides the topic is created with (e.g. {"retention.ms": ...}).
        `on_append(topic, partition)` runs after each append (the broker passes its fetch-purgatory
        wake-up, so consumers long-polling the audit topic see new events at once)."""
        if max_buffered < 1:
            raise ValueError(f"max_buffered must be >= 1: {max_buffered}")
        self.logs = logs
        self.topic = topic
        self.flush_interval_ms = flush_interval_ms
        self.max_buffered = max_buffered
        self.topic_configs = dict(topic_configs or {})
        self.on_append = on_append
        self._buffer: list[dict[str, Any] | tuple] = []
        self._last_flush_ms: int | None = None
        self.written = 0  # events appended to the topic
        self.dropped = 0  # events lost to a failed flush

    def record(self, event: dict[str, Any]) -> None:
        """Buffer one event (the dict is kept, not copied: do not change it afterwards)."""
        buffer = self._buffer
        buffer.append(event)
        if len(buffer) >= self.max_buffered:
            self.flush(event["ts"])

    # -- the call sites' helpers: one event per decision, fields as minibroker.storage.audit_format says --------

    # The call sites' helpers buffer a tuple in AUDIT_FIELD_NAMES order (cheaper to build than a
    # dict); `flush` turns it into the event. Fields as minibroker.storage.audit_format says.

    def record_produce(self, ctx, topic: str | None, partition: int, records, outcome, now_ms: int) -> None:
        """One Produce partition. `outcome`: the handler's PartitionOutcome (response dict,
        throttle_ms of the producer-id quota, the batch header when it was read, pid_new); `now_ms`:
        the time given to the producer-id quota."""
        header = outcome.header
        throttle_ms = outcome.throttle_ms
        connection = ctx.connection
        if header is None:
            count, pid, epoch = 0, -1, -1
        else:
            count, pid, epoch = header.records_count, header.producer_id, header.producer_epoch
        self._append_tuple((
            now_ms, connection.principal, ctx.client_id, connection.listener, *API_PRODUCE, ctx.version,
            topic, partition, len(records) if records else 0, count, pid, epoch,
            outcome.response["error_code"], throttle_ms,
            "producer_ids_rate" if throttle_ms else (HELD_BY_PID_QUOTA if getattr(outcome, "held", False) else ""),
            outcome.pid_new,
        ))

    def record_fetch(self, ctx, topic: str | None, partition: int, nbytes: int, records: int, error_code: int,
                     throttle_ms: int, throttle_quota: str, now_ms: int) -> None:
        """One fetched partition: the bytes and records returned, the response's throttle."""
        connection = ctx.connection
        self._append_tuple((
            now_ms, connection.principal, ctx.client_id, connection.listener, *API_FETCH, ctx.version,
            topic, partition, nbytes, records, -1, -1, error_code, throttle_ms, throttle_quota, None,
        ))

    def record_init_producer_id(self, ctx, producer_id: int, producer_epoch: int, error_code: int,
                                throttle_ms: int, throttle_quota: str, now_ms: int) -> None:
        """One InitProducerId: the producer id and epoch handed out (-1 on error)."""
        connection = ctx.connection
        self._append_tuple((
            now_ms, connection.principal, ctx.client_id, connection.listener, *API_INIT_PRODUCER_ID,
            ctx.version, None, -1, 0, 0, producer_id, producer_epoch, error_code, throttle_ms,
            throttle_quota, None,
        ))

    def record_quota_config(self, now_ms: int, entities: Iterable, settings: dict[str, float], ctx=None) -> None:
        """The quota configuration (minibroker.storage.audit_format's quota-configuration event): at start
        (`ctx` None) every configured entity; after an AlterClientQuotas (its `ctx`) the entities it
        altered. `entities`: (ClientQuotaEntity, {key: value}) pairs."""
        quotas = [{"entity": dict(entity.entries), "values": dict(values)} for entity, values in entities]
        if ctx is None:
            event = quota_config_event(ts=now_ms, quotas=quotas, settings=settings)
        else:
            connection = ctx.connection
            event = quota_config_event(ts=now_ms, quotas=quotas, settings=settings, principal=connection.principal,
                                       client_id=ctx.client_id, listener=connection.listener, api_version=ctx.version)
        self.record(event)

    def mark(self) -> int:
        """Where the events of the request about to be handled will start (for `amend`)."""
        return len(self._buffer)

    def amend(self, mark: int, throttle_ms: int, quota: str, emptied: bool = False) -> None:
        """The request's own quotas are charged after its handler ran: give the events it recorded the
        request's throttle where it exceeds theirs, and for a fetch answered empty (throttled), no
        bytes or records. A flush in between (a full buffer) leaves those events as they were."""
        buffer = self._buffer
        for i in range(mark, len(buffer)):
            event = buffer[i]
            if not isinstance(event, tuple):
                continue
            fields = list(event)
            if throttle_ms > fields[_THROTTLE]:
                fields[_THROTTLE], fields[_QUOTA] = throttle_ms, quota
            if emptied:
                fields[_BYTES] = fields[_RECORDS] = 0
            buffer[i] = tuple(fields)

    def _append_tuple(self, fields: tuple) -> None:
        buffer = self._buffer
        buffer.append(fields)
        if len(buffer) >= self.max_buffered:
            self.flush(fields[0])

    @property
    def buffered(self) -> int:
        return len(self._buffer)

    def maybe_flush(self, now_ms: int) -> bool:
        """Flush when events are waiting and the last flush is `flush_interval_ms` old."""
        if not self._buffer:
            return False
        if self._last_flush_ms is None:
            self._last_flush_ms = now_ms  # the first interval starts with the first check
        if now_ms - self._last_flush_ms < self.flush_interval_ms:
            return False
        self.flush(now_ms)
        return True

    def flush(self, now_ms: int) -> int:
        """Append every buffered event to the topic; returns how many were written."""
        self._last_flush_ms = now_ms
        events = self._buffer
        if not events:
            return 0
        self._buffer = []
        try:
            partition_log = self.logs.log(self.topic, 0)
            if partition_log is None:
                self.logs.create_topic(self.topic, 1, self.topic_configs, now_ms)
                partition_log = self.logs.log(self.topic, 0)
                assert partition_log is not None
            limit = partition_log.config.max_message_bytes - _BATCH_OVERHEAD
            batches = []
            records: list[tuple[bytes, bytes]] = []
            size = 0
            for buffered in events:
                event = dict(zip(AUDIT_FIELD_NAMES, buffered)) if isinstance(buffered, tuple) else buffered
                key = event["principal"].encode()
                value = encode_event(event)
                record_size = len(key) + len(value) + _RECORD_OVERHEAD
                if records and size + record_size > limit:
                    batches.append(encode_batch(records, now_ms))
                    records, size = [], 0
                records.append((key, value))
                size += record_size
            batches.append(encode_batch(records, now_ms))
            partition_log.append(b"".join(batches) if len(batches) > 1 else batches[0], now_ms)
        except Exception:
            self.dropped += len(events)
            log.exception("audit: dropped %d event(s): could not write them to %s", len(events), self.topic)
            return 0
        self.written += len(events)
        if self.on_append is not None:
            self.on_append(self.topic, 0)
        return len(events)

    def close(self, now_ms: int) -> None:
        """Write what is buffered. Call before the LogManager closes."""
        self.flush(now_ms)
