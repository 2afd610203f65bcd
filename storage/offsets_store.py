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
log cleaner (storage.cleaner) keeps the last record of each key and removes tombstones once
delete.retention.ms has passed, as Kafka's does for its offsets topic; the records are designed for
that (each key holds the whole of what it describes, so any cleaned log replays to the same state).
A record the replay cannot read (damage) is skipped and logged, and stays in the log unless a later
record of the same key supersedes it, where a person can still recover it.

This module does no I/O of its own beyond the PartitionLog it is given, never reads a clock and
never imports trio (it sits in storage/, below the shell): callers pass `now_ms` (wall-clock
milliseconds, the timestamps Kafka stores).
"""

from __future__ import annotations

import logging
import struct
from typing import TYPE_CHECKING, Iterable, Sequence

from construct import ConstructError

from protocol.records import decode_records, encode_batch, iter_headers
from storage.consumer_group_records import (
    CONSUMER_RECORD_TYPES,
    StoredConsumerGroup,
    apply_record,
    diff_records,
    parse_consumer_key,
)
from storage.group_records import (
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
    from storage.log import PartitionLog
    from storage.manager import LogManager

__all__ = ["TOPIC", "TOPIC_CONFIGS", "OffsetAndMetadata", "OffsetsStore", "StoredConsumerGroup", "StoredGroup",
           "StoredMember"]

log = logging.getLogger(__name__)

TOPIC = "__consumer_offsets"
# Kafka's offsets topic settings (offsets.topic.segment.bytes is 100 MiB). A compact-only topic
# loses nothing to time or size retention (storage.retention).
TOPIC_CONFIGS = {
    "cleanup.policy": "compact",
    "segment.bytes": str(100 * 1024 * 1024),
    "compression.type": "producer",
}

# Batches written here stay well under the default max.message.bytes.
MAX_RECORDS_PER_BATCH = 2000
READ_CHUNK = 1 << 20


TopicPartition = tuple[str, int]


# --- the store ---------------------------------------------------------------------------------


class OffsetsStore:
    """Committed offsets and group records, in memory and (when given a log) on disk.

    `offsets[group][(topic, partition)]`, `groups[group]` (classic groups) and
    `consumer_groups[group]` (KIP-848 groups) are the live state; every change goes to the log
    first, then to memory, so what a client was told is committed is on disk.
    """

    def __init__(self, log: PartitionLog | None = None) -> None:
        self.log = log
        self.offsets: dict[str, dict[TopicPartition, OffsetAndMetadata]] = {}
        self.groups: dict[str, StoredGroup] = {}
        self.consumer_groups: dict[str, StoredConsumerGroup] = {}
        self.skipped_records = 0  # records that could not be decoded at load
        self.replay_complete = True  # False when the load skipped or stopped short of anything

    @classmethod
    def open(cls, logs: LogManager, now_ms: int) -> OffsetsStore:
        """Open (creating if needed) the offsets topic in `logs` and replay it."""
        if logs.topic(TOPIC) is None:
            logs.create_topic(TOPIC, 1, TOPIC_CONFIGS, now_ms)
        store = cls(logs.log(TOPIC, 0))
        store.load()
        return store

    # -- loading ----------------------------------------------------------------------------------

    def load(self) -> None:
        self.offsets.clear()
        self.groups.clear()
        self.consumer_groups.clear()
        self.skipped_records = 0
        self.replay_complete = True
        if self.log is None:
            return
        position = self.log.log_start_offset
        while position < self.log.log_end_offset:
            data = self.log.read(position, READ_CHUNK)
            if not data:
                break
            advanced = False
            for header in iter_headers(data):
                if header.last_offset < position:
                    continue
                batch = memoryview(data)[header.position : header.position + header.size]
                self._replay_batch(batch, header.base_offset)
                position = header.last_offset + 1
                advanced = True
            if not advanced:
                log.error("%s: cannot read past offset %d; stopping the replay", TOPIC, position)
                self.replay_complete = False
                break
        if self.skipped_records:
            self.replay_complete = False
        if not self.replay_complete:
            log.error("%s: the replay was incomplete (%d unreadable record(s)); they stay in the log "
                      "unless a later record of the same key supersedes them", TOPIC, self.skipped_records)

    def _replay_batch(self, batch: memoryview, base_offset: int) -> None:
        records: list[tuple[bytes, bytes | None]] = []
        try:
            for _, _, key, value in decode_records(batch):
                if key is None:
                    raise ValueError("record without a key")
                records.append((key, value))
        except (ValueError, struct.error) as exc:
            log.warning("%s: skipping unreadable batch at offset %d: %s", TOPIC, base_offset, exc)
            self.skipped_records += 1
            return
        for key, value in records:
            try:
                self._replay(key, value)
            except (ConstructError, ValueError) as exc:
                self.skipped_records += 1
                log.warning("%s: skipping unreadable record near offset %d: %s", TOPIC, base_offset, exc)

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

    def _append(self, records: Sequence[tuple[bytes | None, bytes | None]], now_ms: int) -> None:
        if self.log is None or not records:
            return
        for start in range(0, len(records), MAX_RECORDS_PER_BATCH):
            chunk = list(records[start : start + MAX_RECORDS_PER_BATCH])
            self.log.append(encode_batch(chunk, now_ms), now_ms)

    def commit(self, group: str, entries: dict[TopicPartition, OffsetAndMetadata], now_ms: int) -> None:
        """Store one OffsetCommit's offsets (one batch, as Kafka appends a commit atomically)."""
        if not entries:
            return
        self._append(
            [(offset_key(group, t, p), offset_value(om)) for (t, p), om in entries.items()], now_ms
        )
        self.offsets.setdefault(group, {}).update(entries)

    def remove_offsets(self, group: str, partitions: Iterable[TopicPartition], now_ms: int) -> None:
        partitions = list(partitions)
        self._append([(offset_key(group, t, p), None) for t, p in partitions], now_ms)
        group_offsets = self.offsets.get(group)
        if group_offsets is not None:
            for tp in partitions:
                group_offsets.pop(tp, None)
            if not group_offsets:
                del self.offsets[group]

    def store_group(self, group: str, stored: StoredGroup, now_ms: int) -> None:
        self._append([(group_key(group), group_value(stored))], now_ms)
        self.groups[group] = stored

    def delete_group(self, group: str, now_ms: int) -> None:
        """Tombstones for the group's offsets and its group records (of either type)."""
        records: list[tuple[bytes | None, bytes | None]] = [
            (offset_key(group, t, p), None) for t, p in self.offsets.get(group, {})]
        if group in self.groups:
            records.append((group_key(group), None))
        records.extend(diff_records(group, self.consumer_groups.get(group), None))
        self._append(records, now_ms)
        self.offsets.pop(group, None)
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
