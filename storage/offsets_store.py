"""Durable committed offsets: the internal `__consumer_offsets` topic, written and read back.

Kafka keeps consumer-group state in a compacted internal topic and rebuilds the coordinator's cache
by replaying it when it takes over a partition (GroupMetadataManager / CoordinatorLoaderImpl). This
does the same on one partition of the broker's own storage: every committed offset, every group
generation and every deletion is a record appended to `__consumer_offsets-0`; at start-up the log is
read from its start and the last record for each key wins (a tombstone, a null value, deletes).

The records are Kafka's own (OffsetCommitKey/Value, GroupMetadataKey/Value; storage/group_records.py
has their layouts and reads the layout this broker wrote before them), inside ordinary uncompressed
v2 record batches, so the log stays readable by any Kafka client and by Kafka's offsets tools.

There is no log cleaner in this broker (cleanup.policy=compact is stored but acts as delete), so the
store compacts itself: when the log holds many more records than live keys, it rolls a new segment,
rewrites the live state there, and moves the log start past the old records (DeleteRecords), which
deletes the old segments. A crash half-way leaves the old records in place, and replaying them
before the new copy gives the same state. retention.ms=-1 on the topic keeps time retention away.
A replay that had to skip unreadable records (damage) never compacts: the records it could not read
stay in the log, where a person can still recover them.

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

__all__ = ["TOPIC", "TOPIC_CONFIGS", "OffsetAndMetadata", "OffsetsStore", "StoredGroup", "StoredMember"]

log = logging.getLogger(__name__)

TOPIC = "__consumer_offsets"
# Kafka's offsets topic settings (offsets.topic.segment.bytes is 100 MiB), plus no time retention:
# without a cleaner, time retention would delete live commits.
TOPIC_CONFIGS = {
    "cleanup.policy": "compact",
    "retention.ms": "-1",
    "retention.bytes": "-1",
    "segment.bytes": str(100 * 1024 * 1024),
    "compression.type": "producer",
}

# Batches written here stay well under the default max.message.bytes.
MAX_RECORDS_PER_BATCH = 2000
# Compact when the log holds more than this many records beyond twice the live ones.
COMPACT_SLACK = 10_000
READ_CHUNK = 1 << 20


TopicPartition = tuple[str, int]


# --- the store ---------------------------------------------------------------------------------


class OffsetsStore:
    """Committed offsets and group records, in memory and (when given a log) on disk.

    `offsets[group][(topic, partition)]` and `groups[group]` are the live state; every change goes
    to the log first, then to memory, so what a client was told is committed is on disk.
    """

    def __init__(self, log: PartitionLog | None = None) -> None:
        self.log = log
        self.offsets: dict[str, dict[TopicPartition, OffsetAndMetadata]] = {}
        self.groups: dict[str, StoredGroup] = {}
        self.records_in_log = 0  # records replayed or appended since the log start
        self.skipped_records = 0  # records that could not be decoded at load
        self.replay_complete = True  # False when the load skipped or stopped short of anything

    @classmethod
    def open(cls, logs: LogManager, now_ms: int) -> OffsetsStore:
        """Open (creating if needed) the offsets topic in `logs` and replay it."""
        if logs.topic(TOPIC) is None:
            logs.create_topic(TOPIC, 1, TOPIC_CONFIGS, now_ms)
        store = cls(logs.log(TOPIC, 0))
        store.load()
        store.maybe_compact(now_ms)
        return store

    # -- loading ----------------------------------------------------------------------------------

    def load(self) -> None:
        self.offsets.clear()
        self.groups.clear()
        self.records_in_log = 0
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
            log.error("%s: the replay was incomplete (%d unreadable record(s)); the log is left as it "
                      "is (no compaction) so that nothing more is lost", TOPIC, self.skipped_records)

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
            self.records_in_log += 1
            try:
                self._replay(key, value)
            except (ConstructError, ValueError) as exc:
                self.skipped_records += 1
                log.warning("%s: skipping unreadable record near offset %d: %s", TOPIC, base_offset, exc)

    def _replay(self, key: bytes, value: bytes | None) -> None:
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
            self.records_in_log += len(chunk)

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
        """Tombstones for the group's offsets and its group record."""
        records: list[tuple[bytes | None, bytes | None]] = [
            (offset_key(group, t, p), None) for t, p in self.offsets.get(group, {})]
        if group in self.groups:
            records.append((group_key(group), None))
        self._append(records, now_ms)
        self.offsets.pop(group, None)
        self.groups.pop(group, None)

    # -- compaction -------------------------------------------------------------------------------

    def live_records(self) -> int:
        return sum(len(o) for o in self.offsets.values()) + len(self.groups)

    def maybe_compact(self, now_ms: int, slack: int = COMPACT_SLACK) -> bool:
        """Rewrite the live state and drop the old records when they are mostly dead."""
        if self.log is None or self.records_in_log <= 2 * self.live_records() + slack:
            return False
        if not self.replay_complete:
            # Compaction drops the old records; the ones the replay could not read would go with
            # them, and with them any chance of recovering those commits.
            return False
        start = self.log.roll(now_ms)
        records: list[tuple[bytes, bytes | None]] = []
        for group, stored in self.groups.items():
            records.append((group_key(group), group_value(stored)))
        for group, group_offsets in self.offsets.items():
            records.extend(
                (offset_key(group, t, p), offset_value(om)) for (t, p), om in group_offsets.items()
            )
        self.records_in_log = 0
        self._append(records, now_ms)
        self.log.delete_records_before(start)
        log.info("%s: compacted to %d live records", TOPIC, len(records))
        return True
