"""Idempotent producers in the shell: producer ids and epochs, and each partition's producer state.

`ProducerStates` owns one storage.producer_state.ProducerStateManager per partition, loaded lazily on
the first produce to that partition (so start-up stays fast however many partitions there are): the
newest valid snapshot, then the log after it replayed without checks. A snapshot is written when the
log rolls a segment and at clean shutdown. Idle producer ids expire every
`producer.id.expiration.check.interval.ms`.

`ProducerIds` answers InitProducerId. Without a transactional id, Kafka always hands out a fresh PID.
Here, as KIP-360 describes for producers that can recover by bumping their epoch, a request that
names its current PID and epoch gets the same PID with the epoch bumped (a fresh PID once the epoch
would pass 32767); an older epoch is fenced (PRODUCER_FENCED from v4, INVALID_PRODUCER_EPOCH before).
A PID this broker does not remember (expired, or from before a restart), or an epoch above the one it
handed out (a client that bumped locally), is bumped as asked: its partitions' state decides what its
batches may do.
"""

from __future__ import annotations

import dataclasses
import logging

from minibroker.config import BrokerConfig
from protocol.records import BatchHeader
from storage.log import AppendResult, PartitionLog
from storage.producer_ids import ProducerIdAllocator
from storage.producer_state import ProducerStateManager

log = logging.getLogger(__name__)

MAX_EPOCH = 32767
INVALID_PRODUCER_EPOCH = 47
PRODUCER_FENCED = 90


class ProducerStates:
    def __init__(self, config: BrokerConfig) -> None:
        self.mode: str = config["producer.state.mode"]
        self.max_in_flight: int = config["max.in.flight.sequence.number.per.connection"]
        self.expiration_ms: int = config["producer.id.expiration.ms"]
        self._managers: dict[tuple[str, int], tuple[PartitionLog, ProducerStateManager]] = {}

    def manager(self, topic: str, partition: int, plog: PartitionLog, now_ms: int) -> ProducerStateManager:
        entry = self._managers.get((topic, partition))
        if entry is not None and entry[0] is plog:
            return entry[1]
        psm = ProducerStateManager(self.mode, self.max_in_flight, self.expiration_ms)
        start = psm.load_snapshot(plog.directory, plog.log_end_offset)
        replayed = 0
        for header in plog.iter_batch_headers(max(start, plog.log_start_offset)):
            if header.last_offset < start or not header.has_producer_id:
                continue
            psm.update(header, now_ms)
            replayed += 1
        psm.remove_expired(now_ms)  # a snapshot keeps each producer's last-append time
        if start or replayed:
            log.info("%s-%d: producer state from snapshot at %d plus %d replayed batch(es): %d producer id(s)",
                     topic, partition, start, replayed, psm.entry_count)

        def snapshot_at_roll(new_base_offset: int) -> None:
            psm.write_snapshot(plog.directory, new_base_offset)
            psm.delete_snapshots_below(plog.directory, new_base_offset)

        plog.on_roll = snapshot_at_roll
        self._managers[(topic, partition)] = (plog, psm)
        return psm

    @staticmethod
    def update(psm: ProducerStateManager, header: BatchHeader, result: AppendResult, now_ms: int) -> None:
        psm.update(dataclasses.replace(header, base_offset=result.base_offset), now_ms)

    def forget(self, topic: str) -> None:
        for key in [k for k in self._managers if k[0] == topic]:
            del self._managers[key]

    def remove_expired(self, now_ms: int) -> int:
        return sum(psm.remove_expired(now_ms) for _, psm in self._managers.values())

    @property
    def entry_count(self) -> int:
        return sum(psm.entry_count for _, psm in self._managers.values())

    def memory_bytes(self) -> int:
        """Bytes held by the producer state of the loaded partitions (O(entries) to compute)."""
        return sum(psm.memory_bytes() for _, psm in self._managers.values())

    def snapshot_all(self) -> None:
        """At clean shutdown: a snapshot at each loaded partition's log end (before logs close)."""
        for (topic, partition), (plog, psm) in self._managers.items():
            try:
                psm.write_snapshot(plog.directory, plog.log_end_offset)
            except OSError:
                log.exception("could not snapshot producer state of %s-%d", topic, partition)


class ProducerIds:
    """InitProducerId for idempotent producers (see the module docstring)."""

    def __init__(self, allocator: ProducerIdAllocator, expiration_ms: int) -> None:
        self._allocator = allocator
        self._expiration_ms = expiration_ms
        self._epochs: dict[int, tuple[int, int]] = {}  # pid -> (epoch, last use ms)

    def init(self, producer_id: int, producer_epoch: int, now_ms: int, version: int) -> tuple[int, int, int]:
        """(error_code, producer_id, epoch)."""
        if producer_id < 0:
            return self._fresh(now_ms)
        known = self._epochs.get(producer_id)
        if known is not None and producer_epoch < known[0]:
            return (PRODUCER_FENCED if version >= 4 else INVALID_PRODUCER_EPOCH), -1, -1
        if producer_epoch + 1 > MAX_EPOCH:
            self._epochs.pop(producer_id, None)
            return self._fresh(now_ms)
        self._epochs[producer_id] = (producer_epoch + 1, now_ms)
        return 0, producer_id, producer_epoch + 1

    def _fresh(self, now_ms: int) -> tuple[int, int, int]:
        pid = self._allocator.next_id()
        self._epochs[pid] = (0, now_ms)
        return 0, pid, 0

    def remove_expired(self, now_ms: int) -> int:
        stale = [pid for pid, (_, used) in self._epochs.items() if now_ms - used >= self._expiration_ms]
        for pid in stale:
            del self._epochs[pid]
        return len(stale)
