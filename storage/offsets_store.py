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

Committed offsets are the store's own (any group's); each group type's records are kept by that
type's `GroupRecords` (its record key types, their replay, the records a change writes), keyed by
group type: the classic type's (group_records.ClassicGroupRecords) and the consumer type's
(consumer_group_records.ConsumerGroupRecords) by default, and whatever types the coordinator is
given (a new group type brings its own, in a file of its own).

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
from typing import TYPE_CHECKING, Any, Callable, Iterable, Protocol, Sequence

from construct import ConstructError

from minibroker.protocol.records import BatchHeader, decode_records, encode_batch, read_control_record
from minibroker.protocol.records.batch import ATTR_TRANSACTIONAL
from minibroker.protocol.records.codec import CONTROL_ABORT, CONTROL_COMMIT
from minibroker.protocol.records.validation import CorruptRecordError
from minibroker.storage.consumer_group_records import ConsumerGroupRecords, StoredConsumerGroup
from minibroker.storage.coordinator_log import INTERNAL_TOPIC_CONFIGS, CoordinatorLog
from minibroker.storage.share_group_records import ShareGroupRecords
from minibroker.storage.group_records import (
    OFFSET_KEY,
    RECORD_KEY,
    ClassicGroupRecords,
    OffsetAndMetadata,
    StoredGroup,
    StoredMember,
    offset_key,
    offset_value,
    parse_offset_value,
)

if TYPE_CHECKING:
    from minibroker.storage.log import PartitionLog

__all__ = ["TOPIC", "TOPIC_CONFIGS", "GroupRecords", "OffsetAndMetadata", "OffsetsStore", "StoredConsumerGroup",
           "StoredGroup", "StoredMember", "default_group_records"]

log = logging.getLogger(__name__)

TOPIC = "__consumer_offsets"
TOPIC_CONFIGS = {**INTERNAL_TOPIC_CONFIGS, "compression.type": "producer"}

TopicPartition = tuple[str, int]
Record = tuple[bytes, bytes | None]
OFFSET_RECORD_TYPES = frozenset({0, OFFSET_KEY})  # the store's own: committed offsets


# --- one group type's records --------------------------------------------------------------------


class GroupRecords(Protocol):
    """One group type's records in `__consumer_offsets`: the record key types it owns, its replay,
    and the records a change of a group's state writes. `state` is the type's own (what its records
    describe); None means no records (a deleted group)."""

    @property
    def group_type(self) -> str:
        """The type's name, as ListGroups spells it ("classic", "consumer", ...)."""

    @property
    def record_types(self) -> frozenset[int]:
        """The key types (a key's first int16) it owns; never 0 or 1, the offsets' own."""

    def clear(self) -> None: ...

    def replay(self, record_type: int, key: bytes, value: bytes | None) -> None:
        """Apply one record read back (ValueError or ConstructError when it cannot be read)."""

    def group_ids(self) -> Iterable[str]:
        """The groups it holds records of."""

    def changes(self, group_id: str, state: Any) -> Sequence[Record]:
        """The records that turn the group's stored state into `state` (none when nothing changes)."""

    def apply(self, group_id: str, state: Any) -> None:
        """Make `state` the group's stored state (after its records are appended)."""


def default_group_records() -> list[GroupRecords]:
    """The records of the group types every broker has: classic, KIP-848 consumer, KIP-1071 streams
    (storage/streams_group_records.py) and KIP-932 share groups (storage/share_group_records.py)."""
    from minibroker.storage.streams_group_records import StreamsGroupRecords

    return [ClassicGroupRecords(), ConsumerGroupRecords(), StreamsGroupRecords(), ShareGroupRecords()]


# --- the store ---------------------------------------------------------------------------------


class OffsetsStore(CoordinatorLog):
    """Committed offsets and group records, in memory and (when given a log) on disk.

    `offsets[group][(topic, partition)]` and each group type's records (`records[group_type]`, a
    `GroupRecords`) are the live state; every change goes to the log first, then to memory, so what
    a client was told is committed is on disk.

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
                 append_transactional: Callable[[PartitionLog, bytes, int], object] | None = None,
                 group_records: Iterable[GroupRecords] | None = None) -> None:
        """`append_transactional(log, batch, now_ms)`: how a transactional batch goes into the log;
        a plain append by default. The shell passes an append that also records the batch in the
        partition's producer state, as every transactional append is: the last stable offset (where
        the cleaner stops) and the `.txnindex` entry of an abort (which keeps the aborted offsets
        from superseding committed ones) depend on it. It may refuse the batch (FencedEpochError:
        the producer's epoch was bumped on this partition); then nothing is appended and nothing
        goes pending. `group_records`: each group type's records (`default_group_records()` when
        None)."""
        super().__init__(log)
        self.offsets: dict[str, dict[TopicPartition, OffsetAndMetadata]] = {}
        self.records: dict[str, GroupRecords] = {}
        self._by_record_type: dict[int, GroupRecords] = {}
        for family in (default_group_records() if group_records is None else group_records):
            assert family.group_type not in self.records, f"group type {family.group_type} given twice"
            for record_type in family.record_types:
                assert record_type not in OFFSET_RECORD_TYPES and record_type not in self._by_record_type, (
                    f"record type {record_type} of group type {family.group_type} is taken")
                self._by_record_type[record_type] = family
            self.records[family.group_type] = family
        self.pending: dict[int, dict[str, dict[TopicPartition, OffsetAndMetadata]]] = {}
        self.append_transactional: Callable[[PartitionLog, bytes, int], object] = (
            append_transactional if append_transactional is not None
            else lambda log, batch, now_ms: log.append(batch, now_ms))

    def _reset(self) -> None:
        self.offsets.clear()
        for family in self.records.values():
            family.clear()
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
        if len(key) < 2:
            raise ValueError("a record key without its type")
        record_type = int.from_bytes(key[:2], "big", signed=True)
        family = self._by_record_type.get(record_type)
        if family is not None:
            family.replay(record_type, key, value)
            return
        if record_type not in OFFSET_RECORD_TYPES:
            raise ValueError(f"record type {record_type} is not one this broker reads")
        body = RECORD_KEY.parse(key).key
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
            if self.before_append is not None:
                self.before_append()
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

    def group_records(self, group_type: str) -> Any:
        """The group type's records (its `GroupRecords`: e.g. `.groups`, the stored state by group)."""
        return self.records[group_type]

    def write_group(self, group_type: str, group: str, state: Any, now_ms: int, replacing: str | None = None) -> int:
        """Write what changed in the group's records of `group_type` (`state`: the type's stored state
        of the group; None deletes its records). `replacing` also tombstones the group's records of
        that other type in the same batch (a group id is one type at a time: an Empty group of one
        type becoming one of another). Returns the number of records written."""
        family = self.records[group_type]
        records: list[Record] = []
        previous = self.records[replacing] if replacing is not None else None
        if previous is not None:
            records.extend(previous.changes(group, None))
        records.extend(family.changes(group, state))
        if not records:
            return 0
        self._append(records, now_ms)
        if previous is not None:
            previous.apply(group, None)
        family.apply(group, state)
        return len(records)

    def delete_group(self, group: str, now_ms: int) -> None:
        """Tombstones for the group's offsets (committed, and pending in an open transaction: Kafka's
        deleteAllOffsets) and its group records (of any type)."""
        committed = self.offsets.get(group, {})
        records: list[Record] = [
            (offset_key(group, t, p), None) for t, p in [*committed, *sorted(self.pending_partitions(group) - set(committed))]]
        for family in self.records.values():
            records.extend(family.changes(group, None))
        self._append(records, now_ms)
        self.offsets.pop(group, None)
        self._drop_pending(group)
        for family in self.records.values():
            family.apply(group, None)
