"""Durable committed offsets: the internal `__consumer_offsets` topic, written and read back.

Kafka keeps consumer-group state in a compacted internal topic and rebuilds the coordinator's cache
by replaying it when it takes over a partition (GroupMetadataManager / CoordinatorLoaderImpl). This
does the same on one partition of the broker's own storage: every committed offset, every group
generation and every deletion is a record appended to `__consumer_offsets-0`; at start-up the log is
read from its start and the last record for each key wins (a tombstone, a null value, deletes).

The records are Kafka's own (OffsetCommitKey/Value, GroupMetadataKey/Value; storage/group_records.py
has their layouts and reads the layout this broker wrote before them; a KIP-848 consumer group's
six record types are in storage/consumer_group_records.py), inside ordinary uncompressed v2 record
batches, so the log stays readable by any Kafka client and by Kafka's offsets tools.

The topic is an ordinary compacted topic (cleanup.policy=compact, Kafka's settings): the broker's
log cleaner (minibroker.storage.cleaner) keeps the last record of each key and removes tombstones once
delete.retention.ms has passed, as Kafka's does for its offsets topic; the records are designed for
that (each key holds the whole of what it describes, so any cleaned log replays to the same state;
the cleaner stops at the last stable offset and keeps transaction markers, so pending transactional
offsets replay the same too). The replay and the appends are storage/coordinator_log.py's, shared
with `__transaction_state`. A record the replay cannot read (damage) is skipped and logged, and stays
in the log unless a later record of the same key supersedes it, where a person can still recover it.

This module does no I/O of its own beyond the PartitionLog it is given, never reads a clock and
never imports trio (it sits in storage/, below the shell): callers pass `now_ms` (wall-clock
milliseconds, the timestamps Kafka stores).
"""

from __future__ import annotations

import logging
import struct
from typing import TYPE_CHECKING, Callable, Iterable

from construct import ConstructError

from minibroker.protocol.records import BatchHeader, decode_records, encode_batch, read_control_record
from minibroker.protocol.records.batch import ATTR_TRANSACTIONAL
from minibroker.protocol.records.codec import CONTROL_ABORT, CONTROL_COMMIT
from minibroker.protocol.records.validation import CorruptRecordError
from minibroker.storage.consumer_group_records import (
    CONSUMER_RECORD_TYPES,
    StoredConsumerGroup,
    apply_record,
    diff_records,
    parse_consumer_key,
)
from minibroker.storage.coordinator_log import INTERNAL_TOPIC_CONFIGS, CoordinatorLog
from minibroker.storage.group_records import (
    GROUP_KEY,
    OFFSET_KEY,
    RECORD_KEY,
    OffsetAndMetadata,
    StoredGroup,
    StoredMember,
    group_key,
    group_value,
    offset_key,
    offset_value,
    parse_group_value,
    parse_offset_value,
)

if TYPE_CHECKING:
    from minibroker.storage.log import PartitionLog

__all__ = ["TOPIC", "TOPIC_CONFIGS", "OffsetAndMetadata", "OffsetsStore", "StoredConsumerGroup", "StoredGroup",
           "StoredMember"]

log = logging.getLogger(__name__)

TOPIC = "__consumer_offsets"
TOPIC_CONFIGS = {**INTERNAL_TOPIC_CONFIGS, "compression.type": "producer"}

TopicPartition = tuple[str, int]


# --- the store ---------------------------------------------------------------------------------


class OffsetsStore(CoordinatorLog):
    """Committed offsets and group records, in memory and (when given a log) on disk.

    `offsets[group][(topic, partition)]`, `groups[group]` (classic groups) and
    `consumer_groups[group]` (KIP-848 groups) are the live state; every change goes to the log
    first, then to memory, so what a client was told is committed is on disk.

    Transactional offsets (TxnOffsetCommit) are written as Kafka writes them: a transactional batch
    carrying the producer id and epoch, held in `pending[producer_id][group]` until the transaction's
    marker, a control batch on this partition, commits them (`complete_transaction`) or drops them.
    The replay does the same with the batches and markers it meets, so offsets of a transaction
    committed before a crash are committed after it, and those of an open one stay pending until the
    coordinator aborts it.
    """

    topic = TOPIC
    topic_configs = TOPIC_CONFIGS

    def __init__(self, log: PartitionLog | None = None,
                 append_transactional: Callable[[PartitionLog, bytes, int], object] | None = None) -> None:
        """`append_transactional(log, batch, now_ms)`: how a transactional batch goes into the log;
        a plain append by default. The shell passes an append that also records the batch in the
        partition's producer state, as every transactional append is: the last stable offset (where
        the cleaner stops) and the `.txnindex` entry of an abort (which keeps the aborted offsets
        from superseding committed ones) depend on it. It may refuse the batch (FencedEpochError:
        the producer's epoch was bumped on this partition); then nothing is appended and nothing
        goes pending."""
        super().__init__(log)
        self.offsets: dict[str, dict[TopicPartition, OffsetAndMetadata]] = {}
        self.groups: dict[str, StoredGroup] = {}
        self.consumer_groups: dict[str, StoredConsumerGroup] = {}
        self.pending: dict[int, dict[str, dict[TopicPartition, OffsetAndMetadata]]] = {}
        self.append_transactional: Callable[[PartitionLog, bytes, int], object] = (
            append_transactional if append_transactional is not None
            else lambda log, batch, now_ms: log.append(batch, now_ms))

    def _reset(self) -> None:
        self.offsets.clear()
        self.groups.clear()
        self.consumer_groups.clear()
        self.pending.clear()

    def _replay_batch(self, batch: memoryview, header: BatchHeader) -> None:
        if header.is_control:
            try:
                control = read_control_record(batch)
            except CorruptRecordError as exc:
                log.warning("%s: skipping unreadable marker at offset %d: %s", TOPIC, header.base_offset, exc)
                self.skipped_records += 1
                return
            if control.type in (CONTROL_ABORT, CONTROL_COMMIT):
                self._complete(header.producer_id, control.type == CONTROL_COMMIT)
            return
        if not header.is_transactional:
            super()._replay_batch(batch, header)
            return
        try:
            records = [(key, value) for _, _, key, value in decode_records(batch)]
            pending = self.pending.setdefault(header.producer_id, {})
            for key, value in records:
                body = RECORD_KEY.parse(key or b"").key
                if value is not None:
                    pending.setdefault(body.group, {})[(body.topic, body.partition)] = parse_offset_value(value)
        except (ConstructError, ValueError, struct.error) as exc:
            log.warning("%s: skipping unreadable transactional batch at offset %d: %s",
                        TOPIC, header.base_offset, exc)
            self.skipped_records += 1

    def _replay(self, key: bytes, value: bytes | None) -> None:
        if len(key) >= 2 and (record_type := int.from_bytes(key[:2], "big", signed=True)) in CONSUMER_RECORD_TYPES:
            group_id, member = parse_consumer_key(record_type, key[2:])
            group = self.consumer_groups.setdefault(group_id, StoredConsumerGroup())
            try:
                apply_record(group, record_type, member, value)
            finally:
                if group.is_empty():
                    del self.consumer_groups[group_id]
            return
        parsed = RECORD_KEY.parse(key)
        body = parsed.key
        if parsed.type in (0, OFFSET_KEY):
            tp = (body.topic, body.partition)
            if value is None:
                group_offsets = self.offsets.get(body.group)
                if group_offsets is not None:
                    group_offsets.pop(tp, None)
                    if not group_offsets:
                        del self.offsets[body.group]
                self._drop_pending(body.group, [tp])
                return
            self.offsets.setdefault(body.group, {})[tp] = parse_offset_value(value)
        elif parsed.type == GROUP_KEY:
            if value is None:
                self.groups.pop(body.group, None)
                return
            self.groups[body.group] = parse_group_value(value)
        else:
            raise ValueError(f"record type {parsed.type} is not one this broker reads")

    # -- writing ----------------------------------------------------------------------------------

    def commit(self, group: str, entries: dict[TopicPartition, OffsetAndMetadata], now_ms: int) -> None:
        """Store one OffsetCommit's offsets (one batch, as Kafka appends a commit atomically)."""
        if not entries:
            return
        self._append(
            [(offset_key(group, t, p), offset_value(om)) for (t, p), om in entries.items()], now_ms
        )
        self.offsets.setdefault(group, {}).update(entries)

    def commit_transactional(self, producer_id: int, producer_epoch: int, group: str,
                             entries: dict[TopicPartition, OffsetAndMetadata], now_ms: int) -> None:
        """Store one TxnOffsetCommit's offsets as pending for `producer_id` (one transactional batch)."""
        if not entries:
            return
        if self.log is not None:
            batch = encode_batch(
                [(offset_key(group, t, p), offset_value(om)) for (t, p), om in entries.items()], now_ms,
                producer_id=producer_id, producer_epoch=producer_epoch, attributes=ATTR_TRANSACTIONAL)
            self.append_transactional(self.log, batch, now_ms)
        self.pending.setdefault(producer_id, {}).setdefault(group, {}).update(entries)

    def has_pending(self, group: str, partitions: Iterable[TopicPartition] | None = None) -> bool:
        """Whether an open transaction holds offsets of `group` (of any of `partitions`)."""
        for groups in self.pending.values():
            offsets = groups.get(group)
            if offsets and (partitions is None or any(tp in offsets for tp in partitions)):
                return True
        return False

    def pending_partitions(self, group: str) -> set[TopicPartition]:
        """The partitions of `group` that an open transaction holds offsets of."""
        return {tp for groups in self.pending.values() for tp in groups.get(group, ())}

    def _drop_pending(self, group: str, partitions: Iterable[TopicPartition] | None = None) -> None:
        """A tombstone of a group's offset drops the open transactions' offsets of that partition
        too (`partitions` None: of the whole group), so their commit cannot bring it back: Kafka's
        OffsetMetadataManager.replay of a tombstone (GroupMetadata.removeOffsets in the older one)."""
        wanted = None if partitions is None else list(partitions)
        for producer_id in list(self.pending):
            groups = self.pending[producer_id]
            offsets = groups.get(group)
            if offsets is None:
                continue
            for tp in list(offsets) if wanted is None else wanted:
                offsets.pop(tp, None)
            if not offsets:
                del groups[group]
            if not groups:
                del self.pending[producer_id]

    def complete_transaction(self, producer_id: int, commit: bool) -> int:
        """The transaction's marker is in the log: its pending offsets become committed offsets, or are
        dropped. Returns how many offsets it held."""
        return self._complete(producer_id, commit)

    def _complete(self, producer_id: int, commit: bool) -> int:
        groups = self.pending.pop(producer_id, {})
        if commit:
            for group, entries in groups.items():
                self.offsets.setdefault(group, {}).update(entries)
        return sum(len(entries) for entries in groups.values())

    def remove_offsets(self, group: str, partitions: Iterable[TopicPartition], now_ms: int) -> None:
        """Tombstones for the group's offsets of `partitions`: committed and pending ones go."""
        partitions = list(partitions)
        self._append([(offset_key(group, t, p), None) for t, p in partitions], now_ms)
        group_offsets = self.offsets.get(group)
        if group_offsets is not None:
            for tp in partitions:
                group_offsets.pop(tp, None)
            if not group_offsets:
                del self.offsets[group]
        self._drop_pending(group, partitions)

    def store_group(self, group: str, stored: StoredGroup, now_ms: int) -> None:
        self._append([(group_key(group), group_value(stored))], now_ms)
        self.groups[group] = stored

    def delete_group(self, group: str, now_ms: int) -> None:
        """Tombstones for the group's offsets (committed, and pending in an open transaction: Kafka's
        deleteAllOffsets) and its group records (of either type)."""
        committed = self.offsets.get(group, {})
        records: list[tuple[bytes | None, bytes | None]] = [
            (offset_key(group, t, p), None) for t, p in [*committed, *sorted(self.pending_partitions(group) - set(committed))]]
        if group in self.groups:
            records.append((group_key(group), None))
        records.extend(diff_records(group, self.consumer_groups.get(group), None))
        self._append(records, now_ms)
        self.offsets.pop(group, None)
        self._drop_pending(group)
        self.groups.pop(group, None)
        self.consumer_groups.pop(group, None)

    def store_consumer_group(self, group: str, stored: StoredConsumerGroup | None, now_ms: int,
                             drop_classic_record: bool = False) -> int:
        """Write what changed in a consumer group's records since the last call (Kafka writes the
        same deltas); None deletes them all. `drop_classic_record` also tombstones the group's
        classic record in the same batch (an Empty classic group becoming a consumer group).
        Returns the number of records written."""
        records: list[tuple[bytes | None, bytes | None]] = []
        if drop_classic_record and group in self.groups:
            records.append((group_key(group), None))
        records.extend(diff_records(group, self.consumer_groups.get(group), stored))
        if not records:
            return 0
        self._append(records, now_ms)
        if drop_classic_record:
            self.groups.pop(group, None)
        if stored is None or stored.is_empty():
            self.consumer_groups.pop(group, None)
        else:
            self.consumer_groups[group] = stored
        return len(records)
