"""The reference idempotent producer's sans-I/O core: the producer side of the lean producer state
proposal (its phase 2).

In the manner of h11: bytes in (`receive_data`), bytes out (`data_to_send`), connection events
(`connection_made`, `connection_lost`) and the time as an argument; no sockets, no clock, no threads.
`producer.client.IdempotentProducer` drives it over a socket.

What the lean producer state proposal asks of a producer, and how this one does it:

- "Producer need keep a same value of max.in.flight.sequence.number.per.connection decided by
  broker ... Broker will piggyback the value ... on API response": the first request on every
  connection is ApiVersions v3, whose response carries the broker's window in tagged field 19778
  (minibroker.protocol.extensions); InitProducerId v4 carries it too. A broker that sends none (Kafka, or
  minibroker in `kafka` producer-state mode) keeps Kafka's 5 batches, so the producer keeps to
  Kafka's 5 batches in flight unless told otherwise (`max_in_flight_batches`).
- "max.in.flight.requests.per.connection ... will be obsolete": with a window, up to
  `max_in_flight_batches` (default 50) Produce requests are in flight on the connection, one batch
  each, instead of Kafka's 5.
- "Clients will throttle writes when the number of inflight sequences reaches
  max.in.flight.sequence.number.per.connection": per partition, the sequence numbers handed out and
  not yet resolved (acknowledged, or failed) never exceed the window; a batch that would pass it
  waits (counted in `stats.window_waits`). So everything this producer may ever resend lies within
  the window below the broker's latest appended sequence, which is what lets the broker answer a
  resend DUPLICATE_SEQUENCE_NUMBER from the latest batch alone.
- "When clients receive DUPLICATE_SEQUENCE_NUMBER, it will discard it and move on": the batch is
  delivered (its offset is the broker's, or -1 when the broker no longer knows it).
- "When clients receive OUT_OF_ORDER_SEQUENCE, it will handle as before - retry the send request":
  a batch answered OUT_OF_ORDER_SEQUENCE_NUMBER while an earlier batch of its partition is still
  unresolved (it failed, or is being resent) only arrived too early: it is resent after that one.
  When no earlier batch is unresolved the broker has lost track of the sequence (its state expired,
  or in `kafka` mode a resend fell outside the 5 batches it keeps): as the Java client does, the
  producer first resends, under the old epoch, every batch whose fate it does not know (sent on a
  connection lost before the answer), so the broker says which it has; then, with nothing in
  flight, it bumps its epoch (InitProducerId with its id and epoch, KIP-360) and sends every
  unresolved batch again from sequence 0. In `kafka` mode with more than 5 batches in flight a
  written batch can be answered OUT_OF_ORDER_SEQUENCE_NUMBER (Kafka keeps 5) and is then written
  twice: the benchmark (scripts/bench_lean_producer) counts how often, per mode.

Retriable errors (NOT_LEADER_OR_FOLLOWER, REQUEST_TIMED_OUT, NOT_ENOUGH_REPLICAS,
THROTTLING_QUOTA_EXCEEDED, ...) resend the batch; other errors fail its records. A connection lost
puts every in-flight batch back in front of its partition's queue, in sequence order, to be resent
on the next connection. KIP-219: a response's throttle_time_ms pauses sending for that long.
"""

from __future__ import annotations

import enum
from collections import deque
from dataclasses import dataclass
from typing import Any, Final

from kio.index import load_request_schema
from kio.schema.errors import ErrorCode

from minibroker.protocol.entities import build
from minibroker.protocol.extensions import read_max_in_flight_sequence
from minibroker.protocol.framing import FrameDecoder
from minibroker.protocol.messages import decode_response_tags, encode_request
from minibroker.protocol.records import encode_batch

__all__ = [
    "Delivery",
    "KAFKA_MAX_IN_FLIGHT",
    "ProducerCore",
    "ProducerError",
    "ProducerStats",
    "WINDOW_MAX_IN_FLIGHT",
]

NONE: Final = ErrorCode.none.value
OUT_OF_ORDER_SEQUENCE_NUMBER: Final = ErrorCode.out_of_order_sequence_number.value
DUPLICATE_SEQUENCE_NUMBER: Final = ErrorCode.duplicate_sequence_number.value
UNKNOWN_PRODUCER_ID: Final = ErrorCode.unknown_producer_id.value
# Errors after which Kafka's producer resends the batch as it is.
RETRIABLE: Final = frozenset(code.value for code in (
    ErrorCode.leader_not_available,
    ErrorCode.not_leader_or_follower,
    ErrorCode.request_timed_out,
    ErrorCode.network_exception,
    ErrorCode.not_enough_replicas,
    ErrorCode.not_enough_replicas_after_append,
    ErrorCode.throttling_quota_exceeded,
))

KAFKA_MAX_IN_FLIGHT: Final = 5  # what Kafka's 5 retained batches allow (no window announced)
WINDOW_MAX_IN_FLIGHT: Final = 50  # the default with a lean-producer-state broker
SEQUENCE_SPACE: Final = 1 << 31

API_VERSIONS, INIT_PRODUCER_ID, PRODUCE = 18, 22, 0
API_VERSIONS_VERSION, INIT_PRODUCER_ID_VERSION, PRODUCE_VERSION = 3, 4, 9


class ProducerError(Exception):
    """The broker refused something this producer cannot recover from."""


@dataclass(slots=True)
class Delivery:
    """One record: where it went. `offset` is None until delivered, -1 when the broker acknowledged
    it as a duplicate without an offset; `error` is the error code of a record that failed."""

    topic: str
    partition: int
    value: bytes | None
    key: bytes | None = None
    timestamp_ms: int = 0
    offset: int | None = None
    error: int | None = None

    @property
    def done(self) -> bool:
        return self.offset is not None or self.error is not None


@dataclass
class ProducerStats:
    batches_sent: int = 0  # Produce requests written, resends included
    resends: int = 0  # of those, batches sent again
    duplicates: int = 0  # DUPLICATE_SEQUENCE_NUMBER answers: delivered before
    out_of_order: int = 0  # OUT_OF_ORDER_SEQUENCE_NUMBER answers resent behind an earlier batch
    sequence_gaps: int = 0  # OUT_OF_ORDER_SEQUENCE_NUMBER with nothing earlier unresolved
    retriable_errors: int = 0
    epoch_bumps: int = 0
    connections: int = 0
    window_waits: int = 0  # times a partition's next batch waited for the sequence window
    throttled_ms: int = 0  # KIP-219 pauses asked by the broker
    max_in_flight_batches_seen: int = 0
    max_in_flight_sequences_seen: int = 0  # per partition: handed out and not yet resolved
    delivered: int = 0  # records
    failed: int = 0  # records


class _Batch:
    __slots__ = ("partition", "records", "order", "base_sequence", "epoch", "sends", "in_doubt")

    def __init__(self, partition: _Partition, records: list[Delivery], order: int) -> None:
        self.partition = partition
        self.records = records
        self.order = order  # position in the partition's stream; never wraps, unlike sequences
        self.base_sequence = -1
        self.epoch = -1
        self.sends = 0
        self.in_doubt = False  # sent, and the connection was lost before its answer: written or not?


class _Partition:
    __slots__ = ("topic", "index", "open", "ready", "unresolved", "next_sequence", "next_order",
                 "unresolved_sequences", "waiting")

    def __init__(self, topic: str, index: int) -> None:
        self.topic = topic
        self.index = index
        self.open: deque[Delivery] = deque()  # records not yet in a batch
        self.ready: list[_Batch] = []  # closed batches waiting to be sent, oldest (by order) first
        self.unresolved: dict[int, _Batch] = {}  # order -> batch, sent or ready, not yet resolved
        self.next_sequence = 0
        self.next_order = 0
        self.unresolved_sequences = 0
        self.waiting = False  # the window holds its next batch back

    def requeue(self, batch: _Batch) -> None:
        """Put a batch back for sending, keeping `ready` in sequence order."""
        ready = self.ready
        at = len(ready)
        while at and ready[at - 1].order > batch.order:
            at -= 1
        ready.insert(at, batch)


class _State(enum.Enum):
    DISCONNECTED = "disconnected"
    NEGOTIATING = "negotiating"  # ApiVersions sent
    INITIALISING = "initialising"  # InitProducerId sent (a new id, or an epoch bump)
    READY = "ready"


class ProducerCore:
    """The state of one idempotent producer on one broker connection at a time (see the module)."""

    def __init__(self, client_id: str = "minibroker-producer", *, max_in_flight_batches: int | None = None,
                 batch_records: int = 100, timeout_ms: int = 30_000) -> None:
        if max_in_flight_batches is not None and max_in_flight_batches < 1:
            raise ValueError(f"max_in_flight_batches must be at least 1, not {max_in_flight_batches}")
        if batch_records < 1:
            raise ValueError(f"batch_records must be at least 1, not {batch_records}")
        self.client_id = client_id
        self.requested_max_in_flight = max_in_flight_batches
        self.max_in_flight_batches = max_in_flight_batches or KAFKA_MAX_IN_FLIGHT
        self.batch_records = batch_records
        self.timeout_ms = timeout_ms
        self.window: int | None = None  # the broker's max.in.flight.sequence.number.per.connection
        self.producer_id = -1
        self.epoch = -1
        self.stats = ProducerStats()
        self._state = _State.DISCONNECTED
        self._partitions: dict[tuple[str, int], _Partition] = {}
        self._decoder = FrameDecoder()
        self._out = bytearray()
        self._correlation_id = 0
        # (correlation id, api key, batch or None, sent at ms), in the order sent = answered
        self._pending: deque[tuple[int, int, _Batch | None, int]] = deque()
        self._produce_in_flight = 0
        self._paused_until_ms = 0
        self._bump_needed = False

    # ---- the application's side --------------------------------------------------------------

    def send(self, topic: str, partition: int, value: bytes | None, key: bytes | None = None,
             timestamp_ms: int = 0) -> Delivery:
        """Queue one record; it is delivered once `done` (see `Delivery`)."""
        tp = self._partitions.get((topic, partition))
        if tp is None:
            tp = self._partitions[(topic, partition)] = _Partition(topic, partition)
        delivery = Delivery(topic, partition, value, key, timestamp_ms)
        tp.open.append(delivery)
        return delivery

    @property
    def all_done(self) -> bool:
        """Every record queued so far is delivered or failed."""
        return all(not tp.open and not tp.unresolved for tp in self._partitions.values())

    # ---- connection events --------------------------------------------------------------------

    def connection_made(self, now_ms: int) -> None:
        """A new connection to the broker: negotiate (ApiVersions) before anything else."""
        if self._state is not _State.DISCONNECTED:
            raise RuntimeError("connection_made while connected")
        self.stats.connections += 1
        self._state = _State.NEGOTIATING
        request = build(load_request_schema(API_VERSIONS, API_VERSIONS_VERSION), {
            "client_software_name": "minibroker-producer", "client_software_version": "1"})
        self._write(request, API_VERSIONS, None, now_ms)

    def connection_lost(self) -> None:
        """The connection is gone: every batch in flight goes back to be resent, in order."""
        for _cid, api_key, batch, _sent in self._pending:
            if batch is not None:
                batch.in_doubt = True
                batch.partition.requeue(batch)
        self._pending.clear()
        self._produce_in_flight = 0
        self._out.clear()
        self._decoder = FrameDecoder()
        self._paused_until_ms = 0
        self._state = _State.DISCONNECTED

    def timed_out(self, now_ms: int) -> bool:
        """The oldest request has waited longer than `timeout_ms`: give the connection up."""
        return bool(self._pending) and now_ms - self._pending[0][3] > self.timeout_ms

    def next_deadline_ms(self, now_ms: int) -> int | None:
        """When the core next needs the driver without any bytes arriving: the end of a KIP-219
        pause still running with something to send, or the oldest request's timeout."""
        deadlines = []
        if self._paused_until_ms > now_ms and not self.all_done:
            deadlines.append(self._paused_until_ms)
        if self._pending:
            deadlines.append(self._pending[0][3] + self.timeout_ms + 1)
        return min(deadlines) if deadlines else None

    # ---- bytes --------------------------------------------------------------------------------

    def data_to_send(self, now_ms: int) -> bytes:
        """The bytes to write now: requests that may go out (possibly none)."""
        if self._state is _State.READY and now_ms >= self._paused_until_ms:
            if self._bump_needed:
                # Before a new epoch renumbers them, batches whose fate is unknown are resent under
                # the old one, so the broker says whether it has them (written batches would
                # otherwise be written twice); only then, with nothing in flight, the bump.
                self._fill(now_ms, in_doubt_only=True)
                if not self._produce_in_flight and not any(
                        b.in_doubt for tp in self._partitions.values() for b in tp.ready):
                    self._start_epoch_bump(now_ms)
            else:
                self._fill(now_ms)
        out = bytes(self._out)
        self._out.clear()
        return out

    def receive_data(self, data: bytes, now_ms: int) -> None:
        """Bytes from the broker: handle every whole response in them."""
        self._decoder.receive_data(data)
        while (frame := self._decoder.next_frame()) is not None:
            if not self._pending:
                raise ProducerError("a response arrived with no request outstanding")
            correlation_id, api_key, batch, _sent = self._pending.popleft()
            version = {API_VERSIONS: API_VERSIONS_VERSION, INIT_PRODUCER_ID: INIT_PRODUCER_ID_VERSION,
                       PRODUCE: PRODUCE_VERSION}[api_key]
            got_id, response, tags = decode_response_tags(api_key, version, bytes(frame))  # bytes: no copy
            if got_id != correlation_id:
                raise ProducerError(f"response {got_id} to request {correlation_id}: out of order")
            throttle_ms = _ms(getattr(response, "throttle_time", 0))
            if throttle_ms > 0:
                self.stats.throttled_ms += throttle_ms
                self._paused_until_ms = max(self._paused_until_ms, now_ms + throttle_ms)
            if api_key == API_VERSIONS:
                self._on_api_versions(response, tags, now_ms)
            elif api_key == INIT_PRODUCER_ID:
                self._on_init_producer_id(response, tags)
            else:
                assert batch is not None  # a Produce request is sent with its batch
                self._produce_in_flight -= 1
                self._on_produce(response, batch)

    # ---- internals ----------------------------------------------------------------------------

    def _write(self, request: Any, api_key: int, batch: _Batch | None, now_ms: int) -> None:
        self._correlation_id += 1
        self._out += encode_request(request, self._correlation_id, self.client_id)
        self._pending.append((self._correlation_id, api_key, batch, now_ms))

    def _on_api_versions(self, response: Any, tags: dict[int, bytes], now_ms: int) -> None:
        if response.error_code.value != NONE:
            raise ProducerError(f"ApiVersions v{API_VERSIONS_VERSION} refused: {response.error_code.name}")
        served = {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in response.api_keys}
        for api_key, version in ((PRODUCE, PRODUCE_VERSION), (INIT_PRODUCER_ID, INIT_PRODUCER_ID_VERSION)):
            low, high = served.get(api_key, (0, -1))
            if not low <= version <= high:
                raise ProducerError(f"the broker does not serve api {api_key} v{version} (it has {low}-{high})")
        self._learn_window(tags)
        if self.producer_id < 0:
            self._state = _State.INITIALISING
            self._init_producer_id(-1, -1, now_ms)
        else:
            self._state = _State.READY

    def _learn_window(self, tags: dict[int, bytes]) -> None:
        window = read_max_in_flight_sequence(tags)
        if window is None and self.window is not None:
            return  # InitProducerId of an older broker version: keep what ApiVersions said
        self.window = window
        if self.requested_max_in_flight is None:
            self.max_in_flight_batches = WINDOW_MAX_IN_FLIGHT if window is not None else KAFKA_MAX_IN_FLIGHT

    def _init_producer_id(self, producer_id: int, epoch: int, now_ms: int) -> None:
        request = build(load_request_schema(INIT_PRODUCER_ID, INIT_PRODUCER_ID_VERSION), {
            "transactional_id": None, "transaction_timeout": 60_000, "producer_id": producer_id,
            "producer_epoch": epoch})
        self._write(request, INIT_PRODUCER_ID, None, now_ms)

    def _on_init_producer_id(self, response: Any, tags: dict[int, bytes]) -> None:
        if response.error_code.value != NONE:
            raise ProducerError(f"InitProducerId refused: {response.error_code.name}")
        self._learn_window(tags)
        bumped = self.producer_id >= 0
        self.producer_id, self.epoch = int(response.producer_id), int(response.producer_epoch)
        if bumped:
            # A new epoch starts every partition's sequences at 0: renumber what is unresolved.
            self.stats.epoch_bumps += 1
            self._bump_needed = False
            for tp in self._partitions.values():
                tp.next_sequence = 0
                for batch in tp.ready:
                    self._assign_sequence(tp, batch)
        self._state = _State.READY

    def _start_epoch_bump(self, now_ms: int) -> None:
        self._state = _State.INITIALISING
        self._init_producer_id(self.producer_id, self.epoch, now_ms)

    def _assign_sequence(self, tp: _Partition, batch: _Batch) -> None:
        batch.base_sequence = tp.next_sequence
        batch.epoch = self.epoch
        tp.next_sequence = (tp.next_sequence + len(batch.records)) % SEQUENCE_SPACE

    def _fill(self, now_ms: int, in_doubt_only: bool = False) -> None:
        """Write Produce requests while the in-flight limit allows: resends first, then new batches
        within each partition's sequence window, taking partitions in turn (`in_doubt_only`: only
        resends of batches whose fate is unknown)."""
        progress = True
        while progress and self._produce_in_flight < self.max_in_flight_batches:
            progress = False
            for tp in self._partitions.values():
                if self._produce_in_flight >= self.max_in_flight_batches:
                    break
                if in_doubt_only:
                    at = next((i for i, b in enumerate(tp.ready) if b.in_doubt), None)
                    batch = tp.ready.pop(at) if at is not None else None
                else:
                    batch = tp.ready.pop(0) if tp.ready else self._close_batch(tp)
                if batch is not None:
                    self._write_produce(batch, now_ms)
                    progress = True

    def _close_batch(self, tp: _Partition) -> _Batch | None:
        if not tp.open:
            return None
        count = min(len(tp.open), self.batch_records)
        if self.window is not None:
            count = min(count, self.window)  # a batch wider than the window could never be sent
            if tp.unresolved_sequences + count > self.window:
                if not tp.waiting:  # count each wait once, not each time it is looked at
                    tp.waiting = True
                    self.stats.window_waits += 1
                return None
        tp.waiting = False
        batch = _Batch(tp, [tp.open.popleft() for _ in range(count)], tp.next_order)
        tp.next_order += 1
        self._assign_sequence(tp, batch)
        tp.unresolved[batch.order] = batch
        tp.unresolved_sequences += count
        if tp.unresolved_sequences > self.stats.max_in_flight_sequences_seen:
            self.stats.max_in_flight_sequences_seen = tp.unresolved_sequences
        return batch

    def _write_produce(self, batch: _Batch, now_ms: int) -> None:
        tp = batch.partition
        records = encode_batch(
            [(d.key, d.value) for d in batch.records], batch.records[0].timestamp_ms,
            producer_id=self.producer_id, producer_epoch=batch.epoch, base_sequence=batch.base_sequence)
        request = build(load_request_schema(PRODUCE, PRODUCE_VERSION), {
            "transactional_id": None, "acks": -1, "timeout": self.timeout_ms,
            "topic_data": [{"name": tp.topic, "partition_data": [{"index": tp.index, "records": records}]}]})
        self._write(request, PRODUCE, batch, now_ms)
        batch.sends += 1
        self.stats.batches_sent += 1
        if batch.sends > 1:
            self.stats.resends += 1
        self._produce_in_flight += 1
        if self._produce_in_flight > self.stats.max_in_flight_batches_seen:
            self.stats.max_in_flight_batches_seen = self._produce_in_flight

    def _on_produce(self, response: Any, batch: _Batch) -> None:
        [topic] = response.responses
        [answer] = topic.partition_responses
        code = answer.error_code.value
        tp = batch.partition
        if code in (NONE, DUPLICATE_SEQUENCE_NUMBER, OUT_OF_ORDER_SEQUENCE_NUMBER, UNKNOWN_PRODUCER_ID):
            # A verdict of the broker's sequence check: whether it holds the batch is now known.
            # (A retriable error says only that THIS send was not written, nothing of earlier ones.)
            batch.in_doubt = False
        if code == NONE:
            self._resolve(batch, int(answer.base_offset))
        elif code == DUPLICATE_SEQUENCE_NUMBER:
            self.stats.duplicates += 1
            self._resolve(batch, int(answer.base_offset))
        elif code in (OUT_OF_ORDER_SEQUENCE_NUMBER, UNKNOWN_PRODUCER_ID):
            if min(tp.unresolved) < batch.order:
                self.stats.out_of_order += 1  # arrived before an earlier batch: resend after it
            else:
                self.stats.sequence_gaps += 1  # the broker lost track: new epoch, resend all
                self._bump_needed = True
            tp.requeue(batch)
        elif code in RETRIABLE:
            self.stats.retriable_errors += 1
            tp.requeue(batch)
        else:
            self._fail(batch, code)

    def _resolve(self, batch: _Batch, base_offset: int) -> None:
        tp = batch.partition
        del tp.unresolved[batch.order]
        tp.unresolved_sequences -= len(batch.records)
        for i, delivery in enumerate(batch.records):
            delivery.offset = base_offset + i if base_offset >= 0 else -1
        self.stats.delivered += len(batch.records)

    def _fail(self, batch: _Batch, code: int) -> None:
        tp = batch.partition
        del tp.unresolved[batch.order]
        tp.unresolved_sequences -= len(batch.records)
        for delivery in batch.records:
            delivery.error = code
        self.stats.failed += len(batch.records)


def _ms(value: Any) -> int:
    """A kio duration (timedelta) or a plain number, in whole milliseconds."""
    if hasattr(value, "total_seconds"):
        return round(value.total_seconds() * 1000)
    return int(value or 0)
