"""The ``kafka`` producer state: Apache Kafka's rules and memory shape.

It follows Apache Kafka (ProducerStateEntry, ProducerAppendInfo): the last
KAFKA_BATCHES_TO_RETAIN = 5 batches of the current epoch per producer id, as __slots__ objects. A
batch with the current epoch and exactly the first and last sequence of a retained batch is a
duplicate: answered NONE (0) with the ORIGINAL offsets and not appended. Otherwise rules 1-4 of
lean.py (an unknown producer id is accepted, KIP-360; an older epoch is fenced; a newer epoch must
start at sequence 0; the next sequence is accepted), and OUT_OF_ORDER_SEQUENCE_NUMBER for anything
else. `max_in_flight` plays no part in this mode.

Pure: no clock, no trio.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Iterator

from minibroker.protocol.errors import ErrorCode
from minibroker.storage.producer_state.manager import (
    ACCEPT,
    BatchMetadata,
    ProducerAppendInfo,
    ProducerStateEntry,
    ProducerStateManager,
    next_sequence,
)
from minibroker.storage.producer_state.snapshot import SEQUENCE_SPACE, SnapshotRow

if TYPE_CHECKING:
    from minibroker.protocol.records import BatchHeader

KAFKA_BATCHES_TO_RETAIN = 5  # ProducerStateEntry.NUM_BATCHES_TO_RETAIN


class _KafkaBatch:
    """Kafka's BatchMetadata: one of the retained batches of a producer id."""

    __slots__ = ("first_seq", "last_seq", "last_offset", "offset_delta", "timestamp")

    def __init__(
        self, first_seq: int, last_seq: int, last_offset: int, offset_delta: int, timestamp: int
    ) -> None:
        self.first_seq = first_seq
        self.last_seq = last_seq
        self.last_offset = last_offset
        self.offset_delta = offset_delta
        self.timestamp = timestamp  # the batch's max timestamp; -1 when loaded from a snapshot


class _KafkaEntry:
    """Kafka's ProducerStateEntry without the transaction fields (the manager keeps those for the
    producers that use transactions: manager.py)."""

    __slots__ = ("epoch", "last_append_ms", "batches")

    def __init__(self, epoch: int, last_append_ms: int, batches: list[_KafkaBatch]) -> None:
        self.epoch = epoch
        self.last_append_ms = last_append_ms
        self.batches = batches  # current epoch only, oldest first, at most 5; none after a marker's epoch


class KafkaProducerStateManager(ProducerStateManager):
    mode = "kafka"

    def __init__(self, *args: int, **kwargs: int) -> None:
        super().__init__(*args, **kwargs)
        self._producers: dict[int, _KafkaEntry] = {}

    # --- inspection ---------------------------------------------------------------------------

    def _entry(self, producer_id: int) -> ProducerStateEntry | None:
        entry = self._producers.get(producer_id)
        if entry is None:
            return None
        batches = tuple(
            BatchMetadata(b.first_seq, b.last_seq, b.last_offset - b.offset_delta, b.last_offset)
            for b in entry.batches
        )
        return ProducerStateEntry(producer_id, entry.epoch, entry.last_append_ms, batches)

    def _memory_bytes(self) -> int:
        """Counts producer ids, entries, batch lists and batches with their fields. An int shared
        by several fields is counted each time."""
        total = sys.getsizeof(self._producers)
        for producer_id, entry in self._producers.items():
            total += sys.getsizeof(producer_id) + sys.getsizeof(entry) + sys.getsizeof(entry.batches)
            total += sys.getsizeof(entry.epoch) + sys.getsizeof(entry.last_append_ms)
            for batch in entry.batches:
                total += sys.getsizeof(batch) + sum(sys.getsizeof(getattr(batch, f)) for f in _KafkaBatch.__slots__)
        return total

    # --- validation ---------------------------------------------------------------------------

    def _validate(self, header: BatchHeader, producer_id: int, first: int) -> ProducerAppendInfo:
        entry = self._producers.get(producer_id)
        if entry is None:
            return ACCEPT
        batch_epoch = header.producer_epoch
        if batch_epoch == entry.epoch:
            last = header.last_sequence
            for batch in entry.batches:  # Kafka's findDuplicateBatch
                if batch.first_seq == first and batch.last_seq == last:
                    return ProducerAppendInfo(
                        ErrorCode.none,
                        (batch.last_offset - batch.offset_delta, batch.last_offset),
                        f"producer {producer_id} resent retained batch {first}..{last}",
                    )
            last_seq = entry.batches[-1].last_seq if entry.batches else -1  # -1: sequence 0 is next
            if first == next_sequence(last_seq):
                return ACCEPT
            return self._out_of_order(producer_id, first, last_seq)
        if batch_epoch < entry.epoch:
            return self._fenced(producer_id, batch_epoch, entry.epoch)
        if first == 0:
            return ACCEPT
        return self._new_epoch_not_at_zero(producer_id, batch_epoch, first, entry.epoch)

    # --- state changes ------------------------------------------------------------------------

    def _append_batch(self, header: BatchHeader, now_ms: int) -> None:
        delta = header.last_offset_delta
        batch = _KafkaBatch(
            header.base_sequence, header.last_sequence, header.base_offset + delta, delta, header.max_timestamp
        )
        entry = self._producers.get(header.producer_id)
        if entry is None:
            self._producers[header.producer_id] = _KafkaEntry(header.producer_epoch, now_ms, [batch])
            return
        if entry.epoch != header.producer_epoch:
            entry.epoch = header.producer_epoch
            entry.batches = [batch]
        else:
            batches = entry.batches
            if len(batches) >= KAFKA_BATCHES_TO_RETAIN:
                del batches[0]
            batches.append(batch)
        entry.last_append_ms = now_ms

    def _mark(self, producer_id: int, epoch: int, now_ms: int) -> None:
        entry = self._producers.get(producer_id)
        if entry is None:
            self._producers[producer_id] = _KafkaEntry(epoch, now_ms, [])
            return
        if entry.epoch != epoch:
            entry.epoch = epoch
            entry.batches = []
        entry.last_append_ms = now_ms

    def _remove_expired(self, cutoff_ms: int, keep) -> list[int]:
        gone = [pid for pid, entry in self._producers.items() if entry.last_append_ms <= cutoff_ms and pid not in keep]
        for producer_id in gone:
            del self._producers[producer_id]
        return gone

    def _clear_producers(self) -> None:
        self._producers = {}

    # --- snapshots ----------------------------------------------------------------------------

    def _snapshot_rows(self) -> Iterator[SnapshotRow]:
        for producer_id, entry in self._producers.items():
            if not entry.batches:  # only a marker set its epoch: no batch (Kafka writes -1, -1, 0)
                yield (producer_id, entry.epoch, -1, -1, 0, entry.last_append_ms, -1, -1)
                continue
            latest = entry.batches[-1]
            # coordinator_epoch and current_txn_first_offset: filled in by the manager.
            yield (producer_id, entry.epoch, latest.last_seq, latest.last_offset, latest.offset_delta,
                   entry.last_append_ms, -1, -1)

    def _load_rows(self, rows: list[SnapshotRow]) -> None:
        entries = {}
        for producer_id, epoch, last_seq, last_offset, delta, last_append_ms, _, _ in rows:
            if last_seq < 0:
                entries[producer_id] = _KafkaEntry(epoch, last_append_ms, [])
                continue
            first_seq = (last_seq - delta) % SEQUENCE_SPACE
            batch = _KafkaBatch(first_seq, last_seq, last_offset, delta, -1)
            entries[producer_id] = _KafkaEntry(epoch, last_append_ms, [batch])
        self._producers = entries
