"""The share partitions of this broker, in the trio shell (Kafka 4.4's SharePartitionManager,
DelayedShareFetch and ShareFetchUtils): what ShareFetch and ShareAcknowledge call.

* `share_partition(...)` finds or loads a share partition (minibroker/share/partition.py): its state
  read from the share coordinator, its start offset resolved by `share.auto.offset.reset` when it
  has none yet (latest: the log end; earliest: the log start; by_duration: the first offset at or
  after now minus the duration);
* `fetch(...)` is a share fetch: it waits in the purgatory (a `DelayedShareFetch`, watched by the
  topic-partitions, so that a produce or a transaction marker wakes it, and by the share
  partitions, so that an acknowledgement, a release or an expired lock does) until a share
  partition can acquire records and the bytes there reach min_bytes, or max_wait passes; then it
  reads whole batches from each share partition's next fetch offset (read_committed: up to the last
  stable offset, with the aborted transactions), has the share partition acquire them for the
  member, and returns the batches that hold the acquired records;
* `acknowledge(...)` applies a member's acknowledgements (ShareFetch's or ShareAcknowledge's);
* `release_session(...)` / `connection_closed(...)`: a share session that ends (epoch -1, or its
  connection closed) releases the member's acquired records;
* `run()` is the timer task: acquisition locks expire on the broker's clock (`share.record.lock.
  duration.ms`), and `__share_group_state` is pruned every `share.coordinator.state.topic.prune.
  interval.ms`.

The share sessions are `sessions` (minibroker/share/session.py). Everything that waits asks the
broker clock, so trio's MockClock drives lock timeouts in tests and `BrokerClock.advance` expires
one broker's locks.
"""

from __future__ import annotations

import logging
import math
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterable

import trio

from minibroker.group_configs import parse_auto_offset_reset
from minibroker.protocol.errors import ErrorCode
from minibroker.protocol.records import iter_headers, read_control_record
from minibroker.protocol.records.codec import CONTROL_ABORT
from minibroker.protocol.records.validation import CorruptRecordError
from minibroker.purgatory import DelayedOperation, Purgatory
from minibroker.share.coordinator import ShareCoordinator, ShareStateError
from minibroker.share.partition import (
    AcknowledgementBatch,
    AcquiredRecords,
    FetchedBatch,
    SharePartition,
    SharePartitionError,
    persister_error,
)
from minibroker.share.session import ShareSessionCache
from minibroker.storage.errors import storage_error_message
from minibroker.storage.log import OffsetOutOfRangeError
from minibroker.storage.share_state import ShareStateKey

if TYPE_CHECKING:
    from minibroker.clock import BrokerClock
    from minibroker.replica_manager import ReplicaManager
    from minibroker.storage.log import PartitionLog
    from minibroker.storage.manager import LogManager

__all__ = ["PartitionResult", "ShareGroupConfigsView", "SharePartitionManager", "parse_auto_offset_reset"]

log = logging.getLogger(__name__)

PartitionKey = tuple[uuid.UUID, int]
# The errors that drop a share partition (Kafka's fencedSharePartitionHandler).
FENCED = (ErrorCode.not_leader_or_follower, ErrorCode.group_id_not_found, ErrorCode.unknown_topic_or_partition)

class ShareGroupConfigsView:
    """A group's share.* configs, its own or the broker's (Kafka's ShareGroupConfigProvider)."""

    def __init__(self, lookup: Callable[[str, str], Any]) -> None:
        self.lookup = lookup

    def lock_duration_ms(self, group_id: str) -> int:
        return int(self.lookup(group_id, "share.record.lock.duration.ms"))

    def delivery_count_limit(self, group_id: str) -> int:
        return int(self.lookup(group_id, "share.delivery.count.limit"))

    def max_record_locks(self, group_id: str) -> int:
        return int(self.lookup(group_id, "share.partition.max.record.locks"))

    def auto_offset_reset(self, group_id: str) -> str:
        return str(self.lookup(group_id, "share.auto.offset.reset"))

    def read_committed(self, group_id: str) -> bool:
        return str(self.lookup(group_id, "share.isolation.level")) == "read_committed"

    def renew_enabled(self, group_id: str) -> bool:
        value = self.lookup(group_id, "share.renew.acknowledge.enable")
        return value if isinstance(value, bool) else str(value).lower() == "true"


@dataclass
class PartitionResult:
    """One partition of a ShareFetch response (before the acknowledgement results are merged in)."""

    error: ErrorCode = ErrorCode.none
    message: str | None = None
    records: bytes = b""
    acquired: list[AcquiredRecords] = field(default_factory=list)


@dataclass
class _Wanted:
    """A partition of one share fetch: its key and its share partition (or the error instead)."""

    topic_id: uuid.UUID
    topic: str
    partition: int
    share_partition: SharePartition | None
    log: PartitionLog | None
    error: PartitionResult | None = None


class DelayedShareFetch(DelayedOperation):
    """A share fetch waiting until a share partition can acquire records and min_bytes are there
    (Kafka's DelayedShareFetch.tryComplete), or its max wait passes."""

    def __init__(self, deadline: float, manager: SharePartitionManager, wanted: list[_Wanted], min_bytes: int,
                 max_bytes: int, read_committed: bool) -> None:
        super().__init__(deadline)
        self.manager = manager
        self.wanted = wanted
        self.min_bytes = min_bytes
        self.max_bytes = max_bytes
        self.read_committed = read_committed

    def try_complete(self) -> bool:
        if any(self.manager.dropped(w) for w in self.wanted):
            return self.force_complete()  # its leader moved, or its state was changed: answered now
        acquirable = [w for w in self.wanted if w.share_partition is not None and w.share_partition.can_acquire_records()]
        if not acquirable:
            return False
        part_max = max(1, self.max_bytes // len(acquirable))
        total = 0
        for w in acquirable:
            assert w.share_partition is not None and w.log is not None
            offset = w.share_partition.next_fetch_offset()
            try:
                if offset < w.log.log_start_offset or offset > w.log.log_end_offset:
                    return self.force_complete()  # out of range: answered at once
                end = self.manager.fetchable_end(w.topic, w.partition, w.log, self.read_committed)
                if end <= offset:
                    continue
                if self.min_bytes <= 1:
                    return self.force_complete()
                total += len(w.log.read(offset, part_max, max_offset=end))
            except OSError:
                return self.force_complete()  # the read answers the storage error
            if total >= self.min_bytes:
                return self.force_complete()
        return False


class SharePartitionManager:
    def __init__(self, logs: LogManager, replicas: ReplicaManager, coordinator: ShareCoordinator, clock: BrokerClock,
                 purgatory: Purgatory, configs: ShareGroupConfigsView, *, max_sessions: Callable[[], int],
                 prune_interval_ms: Callable[[], int]) -> None:
        self.logs = logs
        self.replicas = replicas
        self.coordinator = coordinator
        self.clock = clock
        self.purgatory = purgatory
        self.configs = configs
        self.sessions = ShareSessionCache(max_sessions())
        self.prune_interval_ms = prune_interval_ms
        self.partitions: dict[tuple[str, uuid.UUID, int], SharePartition] = {}
        self._sleep_target = math.inf
        self._on_change: Callable[[], None] | None = None
        self.fetches = 0
        self.records_acquired = 0

    # -- share partitions --------------------------------------------------------------------------------

    def share_partition(self, group_id: str, topic_id: uuid.UUID, topic: str, partition: int) -> SharePartition:
        """The share partition, loaded from the share coordinator the first time (Kafka's
        getOrCreateSharePartition and maybeInitialize). SharePartitionError when it cannot be."""
        cache_key = (group_id, topic_id, partition)
        existing = self.partitions.get(cache_key)
        if existing is not None:
            return existing
        key = ShareStateKey(group_id, topic_id, partition)
        plog = self.logs.log(topic, partition)
        if plog is None or plog.leader_epoch is None:
            # Kafka's ReplicaManagerPartitionMetadataProvider: a share partition lives on its
            # partition's leader only (the handler checked that the partition exists).
            raise SharePartitionError(ErrorCode.not_leader_or_follower, None)
        leader_epoch = plog.leader_epoch
        try:
            state = self.coordinator.read_state(key, leader_epoch)
        except ShareStateError as exc:
            raise SharePartitionError(*persister_error(exc)) from None
        sp = SharePartition(
            key, topic, self.coordinator,
            max_delivery_count=lambda: self.configs.delivery_count_limit(group_id),
            max_in_flight=lambda: self.configs.max_record_locks(group_id),
            lock_duration_ms=lambda: self.configs.lock_duration_ms(group_id),
            renew_enabled=lambda: self.configs.renew_enabled(group_id), leader_epoch=leader_epoch)
        start = state.start_offset
        if start == -1:
            start = self._reset_offset(group_id, plog)
        try:
            sp.initialize(start, state.state_epoch, state.batches)
        except ValueError as exc:
            log.error("share partition %s-%s-%d failed to load: %s", group_id, topic, partition, exc)
            raise SharePartitionError(ErrorCode.unknown_server_error,
                                      f"Failed to initialize the share partition {group_id}-{topic}-{partition}") from None
        self.partitions[cache_key] = sp
        log.info("share partition %s-%s-%d loaded: start offset %d, %d record(s) in flight", group_id, topic, partition,
                 sp.start_offset, sp.in_flight_records())
        return sp

    def _reset_offset(self, group_id: str, plog: PartitionLog) -> int:
        """Kafka's startOffsetDuringInitialization for a share partition without a start offset."""
        try:
            strategy, duration_ms = parse_auto_offset_reset(self.configs.auto_offset_reset(group_id))
        except ValueError:
            strategy, duration_ms = "latest", 0
        if strategy == "earliest":
            return plog.log_start_offset
        if strategy == "by_duration":
            found = plog.offset_for_timestamp(self.clock.now_ms() - duration_ms)
            if found is not None:
                return found[0]
        return plog.log_end_offset

    def invalidate(self, group_id: str, topic_id: uuid.UUID | None = None) -> None:
        """Forget the group's loaded share partitions (of one topic): their state changed behind
        them (AlterShareGroupOffsets, DeleteShareGroupOffsets, DeleteGroups), the next fetch reloads."""
        for key in [k for k in self.partitions if k[0] == group_id and (topic_id is None or k[1] == topic_id)]:
            del self.partitions[key]
            self.purgatory.check_and_complete(("share", group_id, key[1], key[2]))

    def leadership_changed(self, topic: str, partition: int) -> None:
        """The partition's leader changed: its share partitions here are dropped (the new leader
        loads them from the share coordinator; Kafka's SharePartitionListener), and the share
        fetches waiting on them answer at once."""
        for key in [k for k, sp in self.partitions.items() if sp.topic == topic and k[2] == partition]:
            del self.partitions[key]
            self.purgatory.check_and_complete(("share", *key))

    def share_version_changed(self, share_version: int) -> None:
        """share.version went below 1 (UpdateFeatures): every share session and share partition is
        dropped (Kafka's onShareVersionToggle); they start again when it is raised."""
        if share_version >= 1:
            return
        self.sessions.sessions.clear()
        self.sessions.by_connection.clear()
        for key in list(self.partitions):
            del self.partitions[key]
            self.purgatory.check_and_complete(("share", *key))

    def dropped(self, w: _Wanted) -> bool:
        """Whether the share partition a fetch holds is no longer the one served here."""
        sp = w.share_partition
        return sp is not None and self.partitions.get((sp.key.group_id, w.topic_id, w.partition)) is not sp

    def forget_topic(self, topic_id: uuid.UUID) -> None:
        for key in [k for k in self.partitions if k[1] == topic_id]:
            del self.partitions[key]
        self.coordinator.forget_topic(topic_id)

    def fetchable_end(self, topic: str, partition: int, plog: PartitionLog, read_committed: bool) -> int:
        if read_committed:
            return self.replicas.last_stable_offset(topic, partition, plog)
        return plog.log_end_offset

    # -- fetching -----------------------------------------------------------------------------------------

    async def fetch(self, group_id: str, member_id: str, partitions: list[tuple[uuid.UUID, str, int]], *,
                    max_wait_ms: int, min_bytes: int, max_bytes: int, max_records: int, batch_size: int,
                    record_limit: bool, received_at: float) -> dict[PartitionKey, PartitionResult]:
        """A share fetch of `partitions` (topic id, name, index) for the member (see the module
        docstring); a result for each."""
        self.fetches += 1
        read_committed = self.configs.read_committed(group_id)
        wanted: list[_Wanted] = []
        for topic_id, topic, partition in partitions:
            try:
                sp = self.share_partition(group_id, topic_id, topic, partition)
            except SharePartitionError as exc:
                wanted.append(_Wanted(topic_id, topic, partition, None, None, PartitionResult(exc.error_code, exc.message)))
                continue
            wanted.append(_Wanted(topic_id, topic, partition, sp, self.logs.log(topic, partition)))
        valid = [w for w in wanted if w.error is None]
        if valid and max_records != 0 and max_bytes != 0:
            op = DelayedShareFetch(received_at + max(max_wait_ms, 0) / 1000, self, valid, min_bytes, max_bytes,
                                   read_committed)
            keys = [k for w in valid for k in ((w.topic, w.partition), ("share", group_id, w.topic_id, w.partition))]
            await self.purgatory.wait(op, keys)
        for w in valid:
            if self.dropped(w):
                # Dropped while the fetch waited: not led here any more (Kafka's DelayedShareFetch
                # checks the leadership before it reads), or reloaded at the next fetch.
                plog = self.logs.log(w.topic, w.partition)
                assert w.share_partition is not None
                moved = plog is None or plog.leader_epoch != w.share_partition.leader_epoch
                w.error = PartitionResult(ErrorCode.not_leader_or_follower) if moved else PartitionResult()
        results: dict[PartitionKey, PartitionResult] = {}
        acquirable = [w for w in valid if w.error is None and w.share_partition is not None
                      and w.share_partition.can_acquire_records()]
        acquired_count = 0
        remaining = max_bytes
        part_max = max(1, max_bytes // len(acquirable)) if acquirable else 0
        now = self.clock.monotonic()
        for w in wanted:
            if w.error is not None:
                results[(w.topic_id, w.partition)] = w.error
                continue
            if w not in acquirable or max_records - acquired_count <= 0 or remaining <= 0:
                results[(w.topic_id, w.partition)] = PartitionResult()
                continue
            result, count = self._read_and_acquire(w, member_id, min(part_max, remaining), remaining == max_bytes,
                                                   max_records - acquired_count, batch_size, record_limit,
                                                   read_committed, now)
            acquired_count += count
            remaining -= len(result.records)
            results[(w.topic_id, w.partition)] = result
        if acquired_count:
            self.records_acquired += acquired_count
            self._changed()
        return results

    def _read_and_acquire(self, w: _Wanted, member_id: str, part_max: int, min_one_batch: bool, max_records: int,
                          batch_size: int, record_limit: bool, read_committed: bool, now: float) -> tuple[PartitionResult, int]:
        sp, plog = w.share_partition, w.log
        assert sp is not None and plog is not None
        offset = sp.next_fetch_offset()
        try:
            end = self.fetchable_end(w.topic, w.partition, plog, read_committed)
            data = plog.read(offset, part_max, min_one_batch=min_one_batch, max_offset=end)
        except OffsetOutOfRangeError:
            # The log start moved past the share partition's start: its records below are gone
            # (Kafka's processFetchResponse: updateCacheAndOffsets, then an empty answer).
            sp.update_cache_and_offsets(plog.log_start_offset)
            return PartitionResult(), 0
        except OSError as exc:
            return PartitionResult(ErrorCode.kafka_storage_error, storage_error_message(exc)), 0
        if not data:
            return PartitionResult(), 0
        fetched, positions = _fetched_batches(data)
        aborted = None
        if read_committed and fetched:
            aborted = [(t.producer_id, t.first_offset)
                       for t in plog.aborted_transactions(offset, fetched[-1].last_offset + 1)]
        acquired = sp.acquire(member_id, fetched, offset, max_records, batch_size, now, record_limit=record_limit,
                              aborted=aborted)
        if not acquired:
            return PartitionResult(), 0
        count = sum(a.last_offset - a.first_offset + 1 for a in acquired)
        return PartitionResult(records=_slice(data, fetched, positions, acquired), acquired=acquired), count

    # -- acknowledging and releasing ------------------------------------------------------------------------

    def acknowledge(self, group_id: str, member_id: str,
                    acknowledgements: dict[PartitionKey, list[AcknowledgementBatch]]) -> dict[PartitionKey, tuple[ErrorCode, str | None]]:
        """Each partition's acknowledgements applied (Kafka's SharePartitionManager.acknowledge):
        UNKNOWN_TOPIC_OR_PARTITION for a share partition not loaded here, else the share
        partition's answer."""
        results: dict[PartitionKey, tuple[ErrorCode, str | None]] = {}
        now = self.clock.monotonic()
        for (topic_id, partition), batches in acknowledgements.items():
            sp = self.partitions.get((group_id, topic_id, partition))
            if sp is None:
                results[(topic_id, partition)] = (ErrorCode.unknown_topic_or_partition,
                                                  "This server does not host this topic-partition.")
                continue
            try:
                sp.acknowledge(member_id, batches, now)
                results[(topic_id, partition)] = (ErrorCode.none, None)
            except SharePartitionError as exc:
                results[(topic_id, partition)] = (exc.error_code, exc.message)
                self._maybe_fenced(group_id, topic_id, partition, sp, exc)
            self.purgatory.check_and_complete(("share", group_id, topic_id, partition))
        self._changed()
        return results

    def _maybe_fenced(self, group_id: str, topic_id: uuid.UUID, partition: int, sp: SharePartition,
                      exc: SharePartitionError) -> None:
        """Kafka's fencedSharePartitionHandler: a share partition whose state write was fenced (a
        newer leader or state epoch), or whose group or topic is gone, is dropped; the next fetch
        loads it again where it is led."""
        if exc.error_code in FENCED and self.partitions.get((group_id, topic_id, partition)) is sp:
            log.info("share partition %s-%s-%d is fenced: %s", group_id, sp.topic, partition, exc.message)
            del self.partitions[(group_id, topic_id, partition)]

    def release_session(self, group_id: str, member_id: str, partitions: Iterable[PartitionKey]) -> None:
        """The member's share session ended: its acquired records are released (Kafka's
        releaseSession / releaseAcquiredRecords)."""
        for topic_id, partition in partitions:
            sp = self.partitions.get((group_id, topic_id, partition))
            if sp is None:
                continue
            try:
                sp.release_acquired_records(member_id)
            except SharePartitionError as exc:
                log.error("share partition %s-%s-%d: releasing member %s's records failed: %s", group_id, sp.topic,
                          partition, member_id, exc.message)
            self.purgatory.check_and_complete(("share", group_id, topic_id, partition))

    def connection_closed(self, connection_id: int) -> None:
        """A client connection closed: its share sessions end (Kafka's connection disconnect listener)."""
        for session in self.sessions.connection_closed(connection_id):
            log.info("share session of member %s in group %s ended with its connection", session.member_id,
                     session.group_id)
            self.release_session(session.group_id, session.member_id, list(session.partitions))

    # -- time ------------------------------------------------------------------------------------------------

    def _changed(self) -> None:
        if self._on_change is None:
            return
        deadline = self.next_deadline()
        if deadline is not None and deadline < self._sleep_target:
            self._on_change()

    def next_deadline(self) -> float | None:
        return min((d for d in (sp.next_lock_deadline() for sp in self.partitions.values()) if d is not None),
                   default=None)

    def expire_locks(self, now: float) -> int:
        moved = 0
        for (group_id, topic_id, partition), sp in list(self.partitions.items()):
            deadline = sp.next_lock_deadline()
            if deadline is not None and deadline <= now:
                count = sp.expire_locks(now)
                if count:
                    moved += count
                    log.info("share partition %s-%s-%d: acquisition locks of %d record(s) expired", group_id, sp.topic,
                             partition, count)
                    self.purgatory.check_and_complete(("share", group_id, topic_id, partition))
        return moved

    async def run(self) -> None:
        """Expire acquisition locks at their deadlines and prune the share state topic, until
        cancelled (started next to the broker's other background work)."""
        wake = trio.Event()

        def changed() -> None:
            wake.set()

        self._on_change = changed
        next_prune = self.clock.monotonic() + self.prune_interval_ms() / 1000
        try:
            while True:
                deadline = self.next_deadline()
                self._sleep_target = min(deadline if deadline is not None else math.inf, next_prune)
                with self.clock.move_on_at(self._sleep_target):
                    await wake.wait()
                wake = trio.Event()
                self._sleep_target = -math.inf
                now = self.clock.monotonic()
                self.expire_locks(now)
                if now >= next_prune:
                    next_prune = now + self.prune_interval_ms() / 1000
                    self.coordinator.prune()
        finally:
            self._on_change = None
            self._sleep_target = math.inf


def _fetched_batches(data: bytes) -> tuple[list[FetchedBatch], list[tuple[int, int]]]:
    """The batches of a read, as acquisition needs them, and each one's (position, size)."""
    fetched = []
    positions = []
    for header in iter_headers(data):
        abort = False
        if header.is_control:
            try:
                abort = read_control_record(memoryview(data)[header.position:header.position + header.size]).type == CONTROL_ABORT
            except CorruptRecordError:
                abort = False
        fetched.append(FetchedBatch(header.base_offset, header.last_offset, header.producer_id,
                                    header.is_transactional, header.is_control, abort))
        positions.append((header.position, header.size))
    return fetched, positions


def _slice(data: bytes, fetched: list[FetchedBatch], positions: list[tuple[int, int]],
           acquired: list[AcquiredRecords]) -> bytes:
    """The batches holding acquired records: those before the one holding the first acquired
    offset and after the last acquired offset are left out (Kafka's maybeSliceFetchRecords)."""
    if len(fetched) <= 1:
        return data
    first, last = acquired[0].first_offset, acquired[-1].last_offset
    start = 0
    for i, batch in enumerate(fetched):
        if batch.base_offset <= first:
            start = i
    stop = start
    for i in range(start + 1, len(fetched)):
        if fetched[i].base_offset > last:
            break
        stop = i
    begin = positions[start][0]
    end = positions[stop][0] + positions[stop][1]
    return data if begin == 0 and end == len(data) else data[begin:end]
