"""Idempotent producers in the shell: producer ids and epochs, and each partition's producer state.

`ProducerStates` owns one storage.producer_state.ProducerStateManager per partition, loaded lazily on
the first produce to that partition, or the first fetch or ListOffsets that needs its last stable
offset (so start-up stays fast however many partitions there are): the newest valid snapshot, then
the log after it replayed without checks (markers included: the open transactions, hence the last
stable offset, are right after a crash; an ABORT the replay meets whose `.txnindex` entry a crash
lost is written again). A snapshot is written when the
log rolls a segment and at clean shutdown. Idle producer ids expire every
`producer.id.expiration.check.interval.ms`. `holds(pid)` answers "does this producer id have live
producer state on this broker?" for the producer-id quota (KIP-936: known ids are never throttled)
and InitProducerId: the batch's own partition first, then every partition, loading the partitions not
loaded yet once (the first time a producer id is looked up broker-wide after a start).

`ProducerIds` answers InitProducerId. Without a transactional id, Kafka blindly hands out a fresh PID
and keeps nothing per id; so does minibroker: a fresh PID costs one counter step (and a file write per
block of 1000), nothing per id, so a storm of InitProducerId leaves no trace the producer-id quota
does not cover. A request that names its current PID and epoch (v3+, KIP-360) gets the same PID with
the epoch bumped (a fresh PID once the epoch would pass 32767), as KIP-360 describes for producers
that can recover by bumping. The epoch it is judged against comes from producer state, the source of
truth: the highest epoch the PID holds on any partition, or the epoch this broker handed it in an
earlier bump while it had producer state (kept only for such PIDs, and dropped with their state);
an older epoch is fenced (PRODUCER_FENCED from v4, INVALID_PRODUCER_EPOCH before). A PID with no
producer state (never produced, expired, or from a deleted topic) is bumped as asked, remembering
nothing: its partitions' state decides what its batches may do.

Recovery (docs/benchmarks.md): after an unclean stop, replaying a large log past its newest snapshot takes
seconds (about 2.3 us a batch), which the first produce (or InitProducerId's broker-wide look-up)
would spend on the event loop while every connection waits. So the broker calls `rebuild_recovered`
before its listeners open: the partitions the log manager recovered whose log runs at least
EAGER_REBUILD_BYTES past their newest snapshot are rebuilt then (on num.recovery.threads.per.data.dir
threads when there are several), each followed by a snapshot at its log end so that a second crash
does not replay it again. Smaller partitions, and all of them after a clean stop, stay lazy: a
replay under EAGER_REBUILD_BYTES costs a few milliseconds, and 10,000 of them at start-up would not.
"""

from __future__ import annotations

import logging
import time
from bisect import bisect_right
from concurrent.futures import ThreadPoolExecutor
from typing import Iterable

from minibroker.config import BrokerConfig
from minibroker.log_context import in_current_context
from minibroker.protocol.errors import ErrorCode
from minibroker.protocol.records import BatchHeader
from minibroker.storage.log import AppendResult, PartitionLog
from minibroker.storage.manager import LogManager
from minibroker.storage.producer_ids import ProducerIdAllocator
from minibroker.storage.producer_state import ProducerStateManager
from minibroker.storage.producer_state.snapshot import list_snapshots

log = logging.getLogger(__name__)

MAX_EPOCH = 32767
# Log past the newest snapshot from which a recovered partition's producer state is rebuilt at
# start-up rather than at its first use: about 10,000 small batches, some 25 ms of replay.
EAGER_REBUILD_BYTES = 1 << 20


def replay_bytes(plog: PartitionLog) -> int:
    """The bytes of `plog` a producer-state load would replay: from the batch holding the newest
    snapshot's offset (at or below the log end; the log start without one) to the log end."""
    end = plog.log_end_offset
    snapshots = [offset for offset, _ in list_snapshots(plog.directory) if offset <= end]
    start = max(snapshots[-1] if snapshots else 0, plog.log_start_offset)
    if start >= end:
        return 0
    segments = plog.segments
    i = max(0, bisect_right([s.base_offset for s in segments], start) - 1)
    position = segments[i].find_position(start) if start > segments[i].base_offset else 0
    first = segments[i].size - (segments[i].size if position is None else position)
    return first + sum(segment.size for segment in segments[i + 1:])


class ProducerStates:
    def __init__(self, config: BrokerConfig, logs: LogManager | None = None) -> None:
        self.mode: str = config["producer.state.mode"]
        self.max_in_flight: int = config["max.in.flight.sequence.number.per.connection"]
        self.expiration_ms: int = config["producer.id.expiration.ms"]
        self._logs = logs
        self._all_loaded = logs is None
        self._managers: dict[tuple[str, int], tuple[PartitionLog, ProducerStateManager]] = {}

    def manager(self, topic: str, partition: int, plog: PartitionLog, now_ms: int) -> ProducerStateManager:
        entry = self._managers.get((topic, partition))
        if entry is not None and entry[0] is plog:
            return entry[1]
        psm = ProducerStateManager.for_mode(self.mode, self.max_in_flight, self.expiration_ms)
        start = psm.truncate_and_reload(plog.directory, plog.log_end_offset)
        replayed = 0
        aborted = []
        for header, marker in plog.iter_batches(max(start, plog.log_start_offset)):
            if header.last_offset < start or not header.has_producer_id:
                continue
            aborted_txn = psm.update(header, now_ms, marker)
            if aborted_txn is not None:
                aborted.append(aborted_txn)
            replayed += 1
        for aborted_txn in aborted:  # the transaction index entries a crash may have lost
            try:
                plog.ensure_aborted_txn(aborted_txn)
            except OSError:
                log.exception("%s-%d: could not repair the transaction index", topic, partition)
        psm.remove_expired_producers(now_ms)  # a snapshot keeps each producer's last-append time
        if start or replayed:
            log.info("%s-%d: producer state from snapshot at %d plus %d replayed batch(es): %d producer id(s)",
                     topic, partition, start, replayed, psm.producer_id_count)

        def snapshot_at_roll(new_base_offset: int) -> None:
            psm.take_snapshot(plog.directory, new_base_offset)
            psm.delete_snapshots_before(plog.directory, new_base_offset)

        plog.on_roll = snapshot_at_roll
        self._managers[(topic, partition)] = (plog, psm)
        return psm

    def last_data_offsets(self, topic: str, partition: int, plog: PartitionLog) -> dict[int, int] | None:
        """Producer id -> the last offset of its last data batch, for the partition's live producers
        (Kafka's lastRecordsOfActiveProducers, what the log cleaner keeps); None when the partition's
        producer state is not loaded (the cleaner then keeps every producer id's last batch)."""
        entry = self._managers.get((topic, partition))
        if entry is None or entry[0] is not plog:
            return None
        psm = entry[1]
        offsets = {}
        for producer_id in psm.producer_ids():
            last = psm.last_entry(producer_id)
            if last is not None and last.batch_metadata and last.last_data_offset >= 0:
                offsets[producer_id] = last.last_data_offset
        return offsets

    def load_all(self, now_ms: int) -> None:
        """Load every partition's producer state not loaded yet (once: partitions created later start
        empty and are loaded at their first produce)."""
        if self._all_loaded:
            return
        self._all_loaded = True
        before = len(self._managers)
        for topic, partition, plog in list(self._logs.logs()):  # type: ignore[union-attr]
            if plog.leader_epoch is not None:  # the partitions this broker leads (a follower's is rebuilt later)
                self.manager(topic, partition, plog, now_ms)
        if len(self._managers) > before:
            log.info("loaded the producer state of %d more partition(s) to look producer ids up broker-wide",
                     len(self._managers) - before)

    def rebuild_recovered(self, recovered: Iterable[tuple[str, int]], now_ms: int, threads: int = 1) -> int:
        """At start-up, before the listeners open: load the producer state of the `recovered`
        partitions (those an unclean stop left; see the module docstring) whose replay is at least
        EAGER_REBUILD_BYTES, and snapshot each at its log end. Returns how many were rebuilt."""
        started = time.perf_counter()
        todo = []
        for topic, partition in recovered:
            plog = self._logs.log(topic, partition) if self._logs is not None else None
            # size_bytes bounds the replay at no cost: most recovered partitions stop there.
            if plog is not None and plog.size_bytes >= EAGER_REBUILD_BYTES \
                    and (size := replay_bytes(plog)) >= EAGER_REBUILD_BYTES:
                todo.append((topic, partition, plog, size))
        if not todo:
            return 0

        def rebuild(entry: tuple[str, int, PartitionLog, int]) -> None:
            topic, partition, plog, _ = entry
            psm = self.manager(topic, partition, plog, now_ms)
            try:
                psm.take_snapshot(plog.directory, plog.log_end_offset)
            except OSError:
                log.exception("could not snapshot producer state of %s-%d", topic, partition)

        workers = min(max(1, threads), len(todo))
        if workers > 1:
            with ThreadPoolExecutor(workers, thread_name_prefix="producer-state") as pool:
                for _ in pool.map(in_current_context(rebuild), todo):
                    pass
        else:
            for entry in todo:
                rebuild(entry)
        log.info("rebuilt the producer state of %d partition(s) recovered from an unclean stop "
                 "(%.1f MB of log past their snapshots) in %.0f ms%s, before opening the listeners",
                 len(todo), sum(entry[3] for entry in todo) / 1e6, (time.perf_counter() - started) * 1000,
                 f" on {workers} threads" if workers > 1 else "")
        return len(todo)

    def holds(self, producer_id: int, now_ms: int, psm: ProducerStateManager | None = None) -> bool:
        """Whether `producer_id` has producer state on any partition of this broker (`psm`, the
        partition at hand, is asked first: it is where a producer's next batch usually goes)."""
        if psm is not None and producer_id in psm:
            return True
        self.load_all(now_ms)
        return any(producer_id in m for _, m in self._managers.values())

    def latest_epoch(self, producer_id: int, now_ms: int) -> int | None:
        """The highest epoch `producer_id` holds on any partition, None when it has no state."""
        self.load_all(now_ms)
        epochs = [entry.producer_epoch for _, m in self._managers.values()
                  if (entry := m.last_entry(producer_id)) is not None]
        return max(epochs) if epochs else None

    def last_stable_offset(self, topic: str, partition: int, plog: PartitionLog, now_ms: int) -> int:
        """The partition's last stable offset (Kafka's UnifiedLog.lastStableOffset): the first offset
        of its oldest open transaction (never below the log start), else the high watermark. Loads
        the partition's producer state if it was not."""
        first = self.manager(topic, partition, plog, now_ms).first_unstable_offset
        end = plog.high_watermark
        if first is None:
            return end
        return min(max(first, plog.log_start_offset), end)

    @staticmethod
    def update(psm: ProducerStateManager, header: BatchHeader, result: AppendResult, now_ms: int) -> None:
        psm.update(header.at_offset(result.base_offset), now_ms)

    def forget(self, topic: str) -> None:
        for key in [k for k in self._managers if k[0] == topic]:
            del self._managers[key]

    def forget_partition(self, topic: str, partition: int) -> None:
        """Drop a partition's producer state (its replica became a follower: the state is rebuilt
        from the replicated log when it leads again, as at a restart)."""
        entry = self._managers.pop((topic, partition), None)
        if entry is not None:
            entry[0].on_roll = None

    def remove_expired(self, now_ms: int) -> int:
        return sum(psm.remove_expired_producers(now_ms) for _, psm in self._managers.values())

    @property
    def entry_count(self) -> int:
        return sum(psm.producer_id_count for _, psm in self._managers.values())

    def memory_bytes(self) -> int:
        """Bytes held by the producer state of the loaded partitions (O(entries) to compute)."""
        return sum(psm.memory_bytes() for _, psm in self._managers.values())

    def snapshot_all(self) -> None:
        """At clean shutdown: a snapshot at each loaded partition's log end (before logs close)."""
        for (topic, partition), (plog, psm) in self._managers.items():
            try:
                psm.take_snapshot(plog.directory, plog.log_end_offset)
            except OSError:
                log.exception("could not snapshot producer state of %s-%d", topic, partition)


class ProducerIds:
    """InitProducerId for idempotent producers (see the module docstring)."""

    def __init__(self, allocator: ProducerIdAllocator, states: ProducerStates) -> None:
        self._allocator = allocator
        self._states = states
        # pid -> the epoch an earlier bump handed out, only while the pid has producer state.
        self._bumped: dict[int, int] = {}

    def allocate(self) -> int:
        """A fresh producer id from the persisted block (the transaction coordinator's too)."""
        return self._allocator.next_id()

    def init(self, producer_id: int, producer_epoch: int, now_ms: int, version: int) -> tuple[ErrorCode, int, int]:
        """(error_code, producer_id, epoch)."""
        if producer_id < 0:
            return ErrorCode.none, self.allocate(), 0
        current = self._states.latest_epoch(producer_id, now_ms)
        if current is None:
            self._bumped.pop(producer_id, None)
        elif producer_epoch < max(current, self._bumped.get(producer_id, -1)):
            return (ErrorCode.producer_fenced if version >= 4 else ErrorCode.invalid_producer_epoch), -1, -1
        if producer_epoch + 1 > MAX_EPOCH:
            self._bumped.pop(producer_id, None)
            return ErrorCode.none, self.allocate(), 0
        if current is not None:
            self._bumped[producer_id] = producer_epoch + 1
        return ErrorCode.none, producer_id, producer_epoch + 1

    def remove_expired(self, now_ms: int) -> int:
        """Forget the bumps of producer ids whose producer state is gone."""
        stale = [pid for pid in self._bumped if not self._states.holds(pid, now_ms)]
        for pid in stale:
            del self._bumped[pid]
        return len(stale)

    @property
    def remembered(self) -> int:
        """Producer ids with a remembered bump (all of them have producer state)."""
        return len(self._bumped)
