"""The `__consumer_offsets` records of a KIP-932 share group, in Kafka 4.4's own layouts, and the
group's state as they describe it (`StoredShareGroup`).

Kafka's group coordinator persists a share group as six kinds of records (group-coordinator module,
`ShareGroup*Key/Value.json`); a restart replays them and the group resumes with its epochs, members,
assignments and the share partitions it has initialized:

    key type  key fields      value (version 0, flexible)
    10        group, member   ShareGroupMemberMetadataValue: rackId string?, clientId string,
                              clientHost string, subscribedTopicNames [string]
    11        group           ShareGroupMetadataValue: epoch int32, metadataHash int64
    12        group           ShareGroupTargetAssignmentMetadataValue: assignmentEpoch int32,
                              tag 0: assignmentTimestamp int64 (written when not 0)
    13        group, member   ShareGroupTargetAssignmentMemberValue: topicPartitions [topicId uuid,
                              partitions [int32]]
    14        group, member   ShareGroupCurrentMemberAssignmentValue: memberEpoch int32,
                              previousMemberEpoch int32, state int8, assignedPartitions [topicId,
                              partitions]
    15        group           ShareGroupStatePartitionMetadataValue: initializingTopics,
                              initializedTopics [topicId uuid, topicName string, partitions
                              [int32]], deletingTopics [topicId uuid, topicName string]
    null value: a tombstone (the key's record is deleted)

Keys: an int16 record type, then int16-length strings. Values: storage/flexible_codec.py.
Every length is checked before anything is read (ValueError otherwise). Pure: no I/O.
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass, field
from typing import Callable, Mapping, TypeVar

from minibroker.storage.flexible_codec import FlexibleReader, FlexibleWriter, KeyReader, KeyWriter, start_value

T = TypeVar("T")

SHARE_GROUP_MEMBER_METADATA = 10
SHARE_GROUP_METADATA = 11
SHARE_GROUP_TARGET_ASSIGNMENT_METADATA = 12
SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER = 13
SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT = 14
SHARE_GROUP_STATE_PARTITION_METADATA = 15
SHARE_RECORD_TYPES = frozenset(range(10, 16))
MEMBER_RECORD_TYPES = frozenset({SHARE_GROUP_MEMBER_METADATA, SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER,
                                 SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT})
VALUE_VERSION = 0

Assignment = Mapping[uuid.UUID, frozenset[int]]  # topic id -> partitions; no empty sets


# --- the state the records describe ------------------------------------------------------------


@dataclass(frozen=True)
class StoredShareMember:
    """A member's client and subscription (type 10)."""

    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]


@dataclass(frozen=True)
class StoredShareAssignment:
    """A member's epochs and assigned partitions (type 14); `state` is Kafka's MemberState byte."""

    member_epoch: int
    previous_member_epoch: int
    state: int
    assigned: Assignment


@dataclass(frozen=True)
class TopicPartitionsInfo:
    """One topic of the share-partition metadata (type 15): its id, name and partitions."""

    topic_id: uuid.UUID
    name: str
    partitions: frozenset[int]


@dataclass(frozen=True)
class StoredStatePartitions:
    """Which share partitions the group has asked the share coordinator to initialize, which are
    initialized, and the topics whose state is being deleted (type 15)."""

    initializing: tuple[TopicPartitionsInfo, ...] = ()
    initialized: tuple[TopicPartitionsInfo, ...] = ()
    deleting: tuple[tuple[uuid.UUID, str], ...] = ()


@dataclass
class StoredShareGroup:
    """Everything the records of one share group hold; a field is None (or a member absent from a
    map) while no record for it exists."""

    epoch: tuple[int, int] | None = None  # (group epoch, metadata hash)
    assignment: tuple[int, int] | None = None  # (assignment epoch, assignment timestamp ms)
    members: dict[str, StoredShareMember] = field(default_factory=dict)
    target_assignments: dict[str, Assignment] = field(default_factory=dict)
    current_assignments: dict[str, StoredShareAssignment] = field(default_factory=dict)
    state_partitions: StoredStatePartitions | None = None

    def is_empty(self) -> bool:
        return (self.epoch is None and self.assignment is None and self.state_partitions is None
                and not self.members and not self.target_assignments and not self.current_assignments)


# --- keys --------------------------------------------------------------------------------------


def share_key(record_type: int, group: str, member: str | None = None) -> bytes:
    writer = KeyWriter(record_type).string(group)
    if member is not None:
        writer.string(member)
    return writer.done()


def parse_share_key(record_type: int, body: bytes) -> tuple[str, str | None]:
    """(group, member or None) from the bytes after a share record key's type."""
    reader = KeyReader(body, f"share group key type {record_type}")
    group = reader.string()
    member = reader.string() if record_type in MEMBER_RECORD_TYPES else None
    reader.end()
    return group, member


# --- values ------------------------------------------------------------------------------------


def member_metadata_value(member: StoredShareMember) -> bytes:
    w = FlexibleWriter(VALUE_VERSION)
    w.string(member.rack_id)
    w.string(member.client_id)
    w.string(member.client_host)
    w.count(len(member.subscribed_topic_names))
    for name in member.subscribed_topic_names:
        w.string(name)
    w.tags()
    return w.done()


def parse_member_metadata_value(value: bytes) -> StoredShareMember:
    r = start_value(value, "ShareGroupMemberMetadataValue")
    rack_id, client_id, client_host = r.nullable_string(), r.string(), r.string()
    names = tuple(r.string() for _ in range(r.count(1)))
    r.tags()
    r.end()
    return StoredShareMember(rack_id, client_id, client_host, names)


def group_metadata_value(epoch: tuple[int, int]) -> bytes:
    w = FlexibleWriter(VALUE_VERSION)
    w.int32(epoch[0])
    w.int64(epoch[1])
    w.tags()
    return w.done()


def parse_group_metadata_value(value: bytes) -> tuple[int, int]:
    r = start_value(value, "ShareGroupMetadataValue")
    epoch, metadata_hash = r.int32(), r.int64()
    r.tags()
    r.end()
    return epoch, metadata_hash


def assignment_metadata_value(assignment: tuple[int, int]) -> bytes:
    """(assignment epoch, assignment timestamp ms); the timestamp is tag 0, left out at 0 (its default)."""
    epoch, timestamp_ms = assignment
    w = FlexibleWriter(VALUE_VERSION)
    w.int32(epoch)
    w.tags({0: struct.pack(">q", timestamp_ms)} if timestamp_ms else None)
    return w.done()


def parse_assignment_metadata_value(value: bytes) -> tuple[int, int]:
    r = start_value(value, "ShareGroupTargetAssignmentMetadataValue")
    epoch = r.int32()
    tags = r.tags()
    r.end()
    timestamp = tags.get(0)
    if timestamp is not None and len(timestamp) != 8:
        raise ValueError(f"ShareGroupTargetAssignmentMetadataValue: assignmentTimestamp of {len(timestamp)} bytes")
    return epoch, struct.unpack(">q", timestamp)[0] if timestamp is not None else 0


def _write_assignment(w: FlexibleWriter, assignment: Assignment) -> None:
    items = sorted(assignment.items(), key=lambda item: str(item[0]))
    w.count(len(items))
    for topic_id, partitions in items:
        w.uuid(topic_id)
        w.count(len(partitions))
        for p in sorted(partitions):
            w.int32(p)
        w.tags()


def _read_assignment(r: FlexibleReader) -> dict[uuid.UUID, frozenset[int]]:
    assignment: dict[uuid.UUID, frozenset[int]] = {}
    for _ in range(r.count(16 + 1 + 1)):
        topic_id = r.uuid()
        partitions = frozenset(r.int32() for _ in range(r.count(4)))
        r.tags()
        if partitions:
            assignment[topic_id] = assignment.get(topic_id, frozenset()) | partitions
    return assignment


def target_assignment_value(assignment: Assignment) -> bytes:
    w = FlexibleWriter(VALUE_VERSION)
    _write_assignment(w, assignment)
    w.tags()
    return w.done()


def parse_target_assignment_value(value: bytes) -> dict[uuid.UUID, frozenset[int]]:
    r = start_value(value, "ShareGroupTargetAssignmentMemberValue")
    assignment = _read_assignment(r)
    r.tags()
    r.end()
    return assignment


def current_assignment_value(current: StoredShareAssignment) -> bytes:
    w = FlexibleWriter(VALUE_VERSION)
    w.int32(current.member_epoch)
    w.int32(current.previous_member_epoch)
    w.int8(current.state)
    _write_assignment(w, current.assigned)
    w.tags()
    return w.done()


def parse_current_assignment_value(value: bytes) -> StoredShareAssignment:
    r = start_value(value, "ShareGroupCurrentMemberAssignmentValue")
    member_epoch, previous, state = r.int32(), r.int32(), r.int8()
    assigned = _read_assignment(r)
    r.tags()
    r.end()
    return StoredShareAssignment(member_epoch, previous, state, assigned)


def _write_topic_partitions(w: FlexibleWriter, topics: tuple[TopicPartitionsInfo, ...]) -> None:
    w.count(len(topics))
    for topic in sorted(topics, key=lambda t: str(t.topic_id)):
        w.uuid(topic.topic_id)
        w.string(topic.name)
        w.count(len(topic.partitions))
        for p in sorted(topic.partitions):
            w.int32(p)
        w.tags()


def _read_topic_partitions(r: FlexibleReader) -> tuple[TopicPartitionsInfo, ...]:
    topics = []
    for _ in range(r.count(16 + 1 + 1 + 1)):
        topic_id, name = r.uuid(), r.string()
        partitions = frozenset(r.int32() for _ in range(r.count(4)))
        r.tags()
        topics.append(TopicPartitionsInfo(topic_id, name, partitions))
    return tuple(topics)


def state_partitions_value(metadata: StoredStatePartitions) -> bytes:
    w = FlexibleWriter(VALUE_VERSION)
    _write_topic_partitions(w, metadata.initializing)
    _write_topic_partitions(w, metadata.initialized)
    w.count(len(metadata.deleting))
    for topic_id, name in sorted(metadata.deleting, key=lambda t: str(t[0])):
        w.uuid(topic_id)
        w.string(name)
        w.tags()
    w.tags()
    return w.done()


def parse_state_partitions_value(value: bytes) -> StoredStatePartitions:
    r = start_value(value, "ShareGroupStatePartitionMetadataValue")
    initializing, initialized = _read_topic_partitions(r), _read_topic_partitions(r)
    deleting = []
    for _ in range(r.count(16 + 1 + 1)):
        topic_id, name = r.uuid(), r.string()
        r.tags()
        deleting.append((topic_id, name))
    r.tags()
    r.end()
    return StoredStatePartitions(initializing, initialized, tuple(deleting))


# --- a group's records, read and written -------------------------------------------------------


def apply_record(group: StoredShareGroup, record_type: int, member: str | None, value: bytes | None) -> None:
    """Replay one record into the group's stored state: the value sets the key's part of the state,
    a tombstone clears it. Raises ValueError for unreadable bytes."""
    if record_type == SHARE_GROUP_METADATA:
        group.epoch = None if value is None else parse_group_metadata_value(value)
    elif record_type == SHARE_GROUP_TARGET_ASSIGNMENT_METADATA:
        group.assignment = None if value is None else parse_assignment_metadata_value(value)
    elif record_type == SHARE_GROUP_STATE_PARTITION_METADATA:
        group.state_partitions = None if value is None else parse_state_partitions_value(value)
    else:
        assert member is not None
        if record_type == SHARE_GROUP_MEMBER_METADATA:
            _replay(group.members, member, value, parse_member_metadata_value)
        elif record_type == SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER:
            _replay(group.target_assignments, member, value, parse_target_assignment_value)
        elif record_type == SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT:
            _replay(group.current_assignments, member, value, parse_current_assignment_value)
        else:
            raise ValueError(f"record type {record_type} is not a share group record")


def _replay(table: dict[str, T], member: str, value: bytes | None, parse: Callable[[bytes], T]) -> None:
    if value is None:
        table.pop(member, None)
    else:
        table[member] = parse(value)


Record = tuple[bytes, bytes | None]

# Kafka writes a share group's tombstones current assignments first, the group epoch last
# (ShareGroup.createGroupTombstoneRecords).
_TOMBSTONE_ORDER = {SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT: 0, SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER: 1,
                    SHARE_GROUP_TARGET_ASSIGNMENT_METADATA: 2, SHARE_GROUP_MEMBER_METADATA: 3,
                    SHARE_GROUP_STATE_PARTITION_METADATA: 4, SHARE_GROUP_METADATA: 5}


def diff_records(group_id: str, old: StoredShareGroup | None, new: StoredShareGroup | None) -> list[Record]:
    """The records that turn `old` into `new` (None: no records at all), in the order Kafka writes
    them: member subscriptions, group epoch, share-partition metadata, target assignments, target
    epoch, current assignments; and the tombstones after them (current assignments first)."""
    old = old or StoredShareGroup()
    new = new or StoredShareGroup()
    writes: list[Record] = []
    tombstones: list[tuple[int, Record]] = []

    def members(record_type: int, before: Mapping, after: Mapping, encode) -> None:
        for member, value in after.items():
            if before.get(member) != value:
                writes.append((share_key(record_type, group_id, member), encode(value)))
        for member in before.keys() - after.keys():
            tombstones.append((record_type, (share_key(record_type, group_id, member), None)))

    def single(record_type: int, before, after, encode) -> None:
        if after is not None and before != after:
            writes.append((share_key(record_type, group_id), encode(after)))
        elif after is None and before is not None:
            tombstones.append((record_type, (share_key(record_type, group_id), None)))

    members(SHARE_GROUP_MEMBER_METADATA, old.members, new.members, member_metadata_value)
    single(SHARE_GROUP_METADATA, old.epoch, new.epoch, group_metadata_value)
    single(SHARE_GROUP_STATE_PARTITION_METADATA, old.state_partitions, new.state_partitions, state_partitions_value)
    members(SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER, old.target_assignments, new.target_assignments,
            target_assignment_value)
    single(SHARE_GROUP_TARGET_ASSIGNMENT_METADATA, old.assignment, new.assignment, assignment_metadata_value)
    members(SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT, old.current_assignments, new.current_assignments,
            current_assignment_value)
    tombstones.sort(key=lambda item: _TOMBSTONE_ORDER[item[0]])
    return writes + [record for _, record in tombstones]


# --- the share group type's records in the offsets store ---------------------------------------


class ShareGroupRecords:
    """The records of share groups in `__consumer_offsets` (the six kinds above), as
    storage.offsets_store.OffsetsStore replays and writes them: the store's `GroupRecords` for the
    type "share". `groups[group_id]` is the state each group's records describe; a write is the
    difference from it."""

    group_type = "share"
    record_types = SHARE_RECORD_TYPES

    def __init__(self) -> None:
        self.groups: dict[str, StoredShareGroup] = {}

    def clear(self) -> None:
        self.groups.clear()

    def replay(self, record_type: int, key: bytes, value: bytes | None) -> None:
        group_id, member = parse_share_key(record_type, key[2:])
        group = self.groups.setdefault(group_id, StoredShareGroup())
        try:
            apply_record(group, record_type, member, value)
        finally:
            if group.is_empty():
                del self.groups[group_id]

    def group_ids(self) -> list[str]:
        return list(self.groups)

    def changes(self, group_id: str, state: StoredShareGroup | None) -> list[Record]:
        return diff_records(group_id, self.groups.get(group_id), state)

    def apply(self, group_id: str, state: StoredShareGroup | None) -> None:
        if state is None or state.is_empty():
            self.groups.pop(group_id, None)
        else:
            self.groups[group_id] = state
