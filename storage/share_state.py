"""Durable share-partition state: the internal `__share_group_state` topic, written and read back as
Kafka 4.4's share coordinator does (share-coordinator module: ShareCoordinatorShard,
PersisterStateBatchCombiner, ShareCoordinatorOffsetsManager).

Each share partition (group, topic id, partition) is one key. Its state is the share-partition start
offset, the state epoch (the group epoch when it was initialized), the leader epoch of the partition
when last read, the delivery-complete count, and state batches: offset ranges with a delivery state
(0 AVAILABLE, 2 ACKNOWLEDGED, 4 ARCHIVED; an ACQUIRED record is never written) and a delivery count.
Two record kinds hold it:

    key  type 0  ShareSnapshotKey  groupId string, topicId uuid, partition int32
         type 1  ShareUpdateKey    the same fields
    value ShareSnapshotValue (v0, flexible): snapshotEpoch int32, stateEpoch int32, leaderEpoch int32,
          startOffset int64, createTimestamp int64, writeTimestamp int64, stateBatches [firstOffset
          int64, lastOffset int64, deliveryState int8, deliveryCount int16], tag 0:
          deliveryCompleteCount int32 (default -1)
          ShareUpdateValue (v0, flexible): snapshotEpoch int32, leaderEpoch int32, startOffset int64
          (-1: unchanged), stateBatches [as above], tag 0: deliveryCompleteCount int32
    null value (of a snapshot key): the share partition's state is deleted

A snapshot is the whole state; an update carries only the batches that changed, merged into what
the key had (`combine_state_batches`). The share coordinator writes an update for each write and a
snapshot once `share.coordinator.snapshot.update.records.per.snapshot` updates followed the last one,
and at initialization. Replay is the same merge from the topic's start, so a restart (or kill -9)
finds every acknowledgement and delivery count the broker confirmed.

The topic is `cleanup.policy=delete` with `retention.ms=-1`, as Kafka creates it: nothing is
compacted; the share coordinator deletes the records below the oldest latest snapshot of any key
(`last_redundant_offset`, Kafka's ShareCoordinatorOffsetsManager) with DeleteRecords' log start
offset, every `share.coordinator.state.topic.prune.interval.ms`.

No I/O beyond the PartitionLog given, no clock (callers pass `now_ms`), no trio.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Iterable, NamedTuple

from minibroker.protocol.records import BatchHeader
from minibroker.storage.coordinator_log import CoordinatorLog
from minibroker.storage.flexible_codec import FlexibleWriter, KeyReader, KeyWriter, start_value

if TYPE_CHECKING:
    from minibroker.storage.log import PartitionLog

__all__ = ["TOPIC", "TOPIC_CONFIGS", "ShareStateKey", "SharePartitionState", "ShareStateStore", "StateBatch",
           "combine_state_batches"]

log = logging.getLogger(__name__)

TOPIC = "__share_group_state"
# Kafka's ShareCoordinatorService.shareGroupStateTopicConfigs (segment.bytes: its
# share.coordinator.state.topic.segment.bytes default).
TOPIC_CONFIGS = {
    "cleanup.policy": "delete",
    "compression.type": "producer",
    "segment.bytes": str(100 * 1024 * 1024),
    "retention.ms": "-1",
}

SHARE_SNAPSHOT = 0
SHARE_UPDATE = 1
VALUE_VERSION = 0

AVAILABLE, ACKNOWLEDGED, ARCHIVED = 0, 2, 4  # the delivery states a state batch may hold


class StateBatch(NamedTuple):
    """An offset range in one delivery state (Kafka's PersisterStateBatch)."""

    first_offset: int
    last_offset: int
    delivery_state: int
    delivery_count: int


class ShareStateKey(NamedTuple):
    group_id: str
    topic_id: uuid.UUID
    partition: int


@dataclass(frozen=True)
class SharePartitionState:
    """One share partition's state as the records describe it (Kafka's ShareGroupOffset)."""

    snapshot_epoch: int
    state_epoch: int
    leader_epoch: int
    start_offset: int
    delivery_complete_count: int = -1
    create_timestamp: int = 0
    write_timestamp: int = 0
    batches: tuple[StateBatch, ...] = ()


# --- merging state batches ---------------------------------------------------------------------


def combine_state_batches(so_far: Iterable[StateBatch], new: Iterable[StateBatch], start_offset: int) -> tuple[StateBatch, ...]:
    """Kafka's PersisterStateBatchCombiner: the batches of `so_far` and `new` below `start_offset`
    dropped (cut at it), and where batches overlap, the one with the higher delivery count wins,
    then the higher delivery state (a record's count and state only ever move forward, so the
    merge does not depend on which write came first); neighbours with the same state and count
    are joined."""
    batches: list[StateBatch] = []
    for batch in [*so_far, *new]:
        if start_offset != -1 and batch.last_offset < start_offset:
            continue
        if start_offset != -1 and batch.first_offset < start_offset:
            batch = batch._replace(first_offset=start_offset)
        batches.append(batch)
    if len(batches) <= 1:
        return tuple(batches)
    # A sweep over the batch edges: between two edges the winner is the active batch of highest
    # (delivery count, delivery state).
    edges = sorted({b.first_offset for b in batches} | {b.last_offset + 1 for b in batches})
    out: list[StateBatch] = []
    for start, end in zip(edges, edges[1:]):
        active = [b for b in batches if b.first_offset <= start and b.last_offset >= end - 1]
        if not active:
            continue
        winner = max(active, key=lambda b: (b.delivery_count, b.delivery_state))
        if out and out[-1].last_offset + 1 == start and (out[-1].delivery_state, out[-1].delivery_count) == (
                winner.delivery_state, winner.delivery_count):
            out[-1] = out[-1]._replace(last_offset=end - 1)
        else:
            out.append(StateBatch(start, end - 1, winner.delivery_state, winner.delivery_count))
    return tuple(out)


# --- the records -------------------------------------------------------------------------------


def state_key(record_type: int, key: ShareStateKey) -> bytes:
    return KeyWriter(record_type).string(key.group_id).uuid(key.topic_id).int32(key.partition).done()


def parse_state_key(data: bytes) -> tuple[int, ShareStateKey]:
    reader = KeyReader(data, "__share_group_state key")
    record_type = reader.int16()
    if record_type not in (SHARE_SNAPSHOT, SHARE_UPDATE):
        raise ValueError(f"record type {record_type} is not a share state record")
    key = ShareStateKey(reader.string(), reader.uuid(), reader.int32())
    reader.end()
    return record_type, key


def _write_batches(w: FlexibleWriter, batches: Iterable[StateBatch]) -> None:
    batches = list(batches)
    w.count(len(batches))
    for b in batches:
        w.int64(b.first_offset)
        w.int64(b.last_offset)
        w.int8(b.delivery_state)
        w.int16(b.delivery_count)
        w.tags()


def _complete_count_tag(count: int) -> dict[int, bytes]:
    return {} if count == -1 else {0: count.to_bytes(4, "big", signed=True)}


def snapshot_value(state: SharePartitionState) -> bytes:
    w = FlexibleWriter(VALUE_VERSION)
    w.int32(state.snapshot_epoch)
    w.int32(state.state_epoch)
    w.int32(state.leader_epoch)
    w.int64(state.start_offset)
    w.int64(state.create_timestamp)
    w.int64(state.write_timestamp)
    _write_batches(w, state.batches)
    w.tags(_complete_count_tag(state.delivery_complete_count))
    return w.done()


def update_value(snapshot_epoch: int, leader_epoch: int, start_offset: int, delivery_complete_count: int,
                 batches: Iterable[StateBatch]) -> bytes:
    w = FlexibleWriter(VALUE_VERSION)
    w.int32(snapshot_epoch)
    w.int32(leader_epoch)
    w.int64(start_offset)
    _write_batches(w, batches)
    w.tags(_complete_count_tag(delivery_complete_count))
    return w.done()


def _read_batches(r) -> tuple[StateBatch, ...]:
    batches = []
    for _ in range(r.count(8 + 8 + 1 + 2 + 1)):
        first, last, state, count = r.int64(), r.int64(), r.int8(), r.int16()
        r.tags()
        if last < first or state not in (AVAILABLE, ACKNOWLEDGED, ARCHIVED):
            raise ValueError(f"state batch {first}-{last} in delivery state {state} is not valid")
        batches.append(StateBatch(first, last, state, count))
    return tuple(batches)


def _complete_count(tags: dict[int, bytes]) -> int:
    data = tags.get(0)
    if data is None:
        return -1
    if len(data) != 4:
        raise ValueError("deliveryCompleteCount is not an int32")
    return int.from_bytes(data, "big", signed=True)


def parse_snapshot_value(value: bytes) -> SharePartitionState:
    r = start_value(value, "ShareSnapshotValue")
    snapshot_epoch, state_epoch, leader_epoch = r.int32(), r.int32(), r.int32()
    start_offset, created, written = r.int64(), r.int64(), r.int64()
    batches = _read_batches(r)
    count = _complete_count(r.tags())
    r.end()
    return SharePartitionState(snapshot_epoch, state_epoch, leader_epoch, start_offset, count, created, written,
                               batches)


def parse_update_value(value: bytes) -> tuple[int, int, int, int, tuple[StateBatch, ...]]:
    """(snapshot epoch, leader epoch, start offset, delivery-complete count, batches)."""
    r = start_value(value, "ShareUpdateValue")
    snapshot_epoch, leader_epoch, start_offset = r.int32(), r.int32(), r.int64()
    batches = _read_batches(r)
    count = _complete_count(r.tags())
    r.end()
    return snapshot_epoch, leader_epoch, start_offset, count, batches


def merge_update(state: SharePartitionState, leader_epoch: int, start_offset: int, delivery_complete_count: int,
                 batches: Iterable[StateBatch]) -> SharePartitionState:
    """An update applied to a state (Kafka's ShareCoordinatorShard.merge): -1 leaves the start
    offset or leader epoch as they were."""
    start = state.start_offset if start_offset == -1 else start_offset
    return replace(state, start_offset=start,
                   leader_epoch=state.leader_epoch if leader_epoch == -1 else leader_epoch,
                   delivery_complete_count=delivery_complete_count,
                   batches=combine_state_batches(state.batches, batches, start))


# --- the store ---------------------------------------------------------------------------------


class ShareStateStore(CoordinatorLog):
    """Every share partition's state, in memory and (with a log) in `__share_group_state`.

    `states[key]` is the state the records describe; `updates_since_snapshot[key]` counts the
    updates written after the key's last snapshot; `snapshot_offsets[key]` is the offset of that
    snapshot (for pruning). Writes go to the log first, then to memory.
    """

    topic = TOPIC
    topic_configs = TOPIC_CONFIGS
    created_lazily = True  # Kafka creates the topic when the first share group needs it

    def __init__(self, log: PartitionLog | None = None) -> None:
        super().__init__(log)
        self.states: dict[ShareStateKey, SharePartitionState] = {}
        self.updates_since_snapshot: dict[ShareStateKey, int] = {}
        self.snapshot_offsets: dict[ShareStateKey, int] = {}

    def _reset(self) -> None:
        self.states.clear()
        self.updates_since_snapshot.clear()
        self.snapshot_offsets.clear()

    def _replay_records(self, records: list[tuple[bytes, bytes | None]], header: BatchHeader) -> None:
        for index, (key, value) in enumerate(records):
            try:
                self._replay_at(key, value, header.base_offset + index)
            except ValueError as exc:
                self.skipped_records += 1
                log.warning("%s: skipping unreadable record at offset %d: %s", self.topic, header.base_offset + index, exc)

    def _replay(self, key: bytes, value: bytes | None) -> None:  # pragma: no cover - _replay_at is used
        raise NotImplementedError

    def _replay_at(self, key_bytes: bytes, value: bytes | None, offset: int) -> None:
        record_type, key = parse_state_key(key_bytes)
        if record_type == SHARE_SNAPSHOT:
            if value is None:
                self._forget(key)
                return
            self.states[key] = parse_snapshot_value(value)
            self.updates_since_snapshot[key] = 0
            self.snapshot_offsets[key] = offset
            return
        if value is None:
            raise ValueError("an update record without a value")
        _, leader_epoch, start_offset, count, batches = parse_update_value(value)
        current = self.states.get(key)
        if current is None:
            # An update without its snapshot (pruned or damaged): Kafka takes the update as the state.
            current = SharePartitionState(0, 0, leader_epoch, start_offset)
        self.states[key] = merge_update(current, leader_epoch, start_offset, count, batches)
        self.updates_since_snapshot[key] = self.updates_since_snapshot.get(key, 0) + 1

    def _forget(self, key: ShareStateKey) -> None:
        self.states.pop(key, None)
        self.updates_since_snapshot.pop(key, None)
        self.snapshot_offsets.pop(key, None)

    # -- writing ----------------------------------------------------------------------------------

    def write_snapshot(self, key: ShareStateKey, state: SharePartitionState, now_ms: int) -> None:
        self._append([(state_key(SHARE_SNAPSHOT, key), snapshot_value(state))], now_ms)
        self.states[key] = state
        self.updates_since_snapshot[key] = 0
        if self.log is not None:
            self.snapshot_offsets[key] = self.log.log_end_offset - 1

    def write_update(self, key: ShareStateKey, leader_epoch: int, start_offset: int, delivery_complete_count: int,
                     batches: tuple[StateBatch, ...], now_ms: int) -> None:
        current = self.states[key]
        self._append([(state_key(SHARE_UPDATE, key),
                       update_value(current.snapshot_epoch, leader_epoch, start_offset, delivery_complete_count,
                                    batches))], now_ms)
        self.states[key] = merge_update(current, leader_epoch, start_offset, delivery_complete_count, batches)
        self.updates_since_snapshot[key] = self.updates_since_snapshot.get(key, 0) + 1

    def delete(self, key: ShareStateKey, now_ms: int) -> None:
        """A tombstone of the key's snapshot: its state is gone."""
        self._append([(state_key(SHARE_SNAPSHOT, key), None)], now_ms)
        self._forget(key)

    def last_redundant_offset(self) -> int | None:
        """The offset below which no record is needed any more: the oldest of the keys' latest
        snapshots (None when nothing may go)."""
        if self.log is None or not self.snapshot_offsets:
            return None
        lowest = min(self.snapshot_offsets.values())
        return lowest if lowest > self.log.log_start_offset else None
