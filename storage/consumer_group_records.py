"""The `__consumer_offsets` records of a KIP-848 consumer group, in Kafka's own layouts, and the
group's state as they describe it (`StoredConsumerGroup`).

Kafka's group coordinator persists a consumer group as six kinds of records (group-coordinator
module, `ConsumerGroup*Key/Value.json`); a restart replays them and the group resumes with its
epochs, members and assignments. This module writes and reads them the same way, so a group
survives a restart of this broker and Kafka's offsets tools read what it wrote:

    key type  key fields          value (version 0, flexible)
    3         group               ConsumerGroupMetadataValue: epoch int32
    4         group               ConsumerGroupPartitionMetadataValue: topics [topicId uuid,
                                  topicName string, numPartitions int32, partitionMetadata
                                  [partition int32, racks [string]]]
    5         group, member       ConsumerGroupMemberMetadataValue: instanceId string?, rackId
                                  string?, clientId string, clientHost string, subscribedTopicNames
                                  [string], subscribedTopicRegex string?, rebalanceTimeoutMs int32,
                                  serverAssignor string?, tag 0: classicMemberMetadata
    6         group               ConsumerGroupTargetAssignmentMetadataValue: assignmentEpoch int32
    7         group, member       ConsumerGroupTargetAssignmentMemberValue: topicPartitions
                                  [topicId uuid, partitions [int32]]
    8         group, member       ConsumerGroupCurrentMemberAssignmentValue: memberEpoch int32,
                                  previousMemberEpoch int32, state int8, assignedPartitions
                                  [topicId, partitions], partitionsPendingRevocation [same]
    null value: a tombstone (the key's record is deleted)

Keys are not flexible: an int16 record type, then int16-length strings. Values are an int16 version
and then Kafka's flexible encoding: unsigned-varint lengths plus one (0: null) for strings and
arrays, a 16-byte uuid, and a tagged-field section after every struct. Tagged fields are skipped
when read (Kafka 4.1 adds some) and none are written; this broker never writes member records of
classic-protocol members (tag 0), as it has no mixed groups. Kafka 4.1+ stops writing type 4 and
keeps a metadata hash instead; 4.0 writes it, and so does this broker (racks empty: no racks here).

Every length is checked against the bytes there before anything is read (ValueError otherwise),
as for any input. Pure: no I/O.
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass, field
from typing import Callable, Mapping, TypeVar

from minibroker.protocol.records import read_uvarint, write_uvarint

T = TypeVar("T")

CONSUMER_GROUP_METADATA = 3
CONSUMER_GROUP_PARTITION_METADATA = 4
CONSUMER_GROUP_MEMBER_METADATA = 5
CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA = 6
CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER = 7
CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT = 8
CONSUMER_RECORD_TYPES = frozenset(range(3, 9))
MEMBER_RECORD_TYPES = frozenset({CONSUMER_GROUP_MEMBER_METADATA, CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER,
                                 CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT})

VALUE_VERSION = 0

Assignment = Mapping[uuid.UUID, frozenset[int]]  # topic id -> partitions; no empty sets


# --- the state the records describe ------------------------------------------------------------


@dataclass(frozen=True)
class StoredTopicMetadata:
    """One topic of the group's subscription metadata (type 4)."""

    topic_id: uuid.UUID
    name: str
    num_partitions: int


@dataclass(frozen=True)
class StoredConsumerMember:
    """A member's subscription and client (type 5)."""

    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str | None
    rebalance_timeout_ms: int
    server_assignor: str | None


@dataclass(frozen=True)
class StoredMemberAssignment:
    """A member's epochs and current assignment (type 8); `state` is Kafka's MemberState byte."""

    member_epoch: int
    previous_member_epoch: int
    state: int
    assigned: Assignment
    pending_revocation: Assignment


@dataclass
class StoredConsumerGroup:
    """Everything the records of one consumer group hold; a field is None (or a member absent from
    a map) while no record for it exists."""

    epoch: int | None = None
    subscription_metadata: tuple[StoredTopicMetadata, ...] | None = None
    assignment_epoch: int | None = None
    members: dict[str, StoredConsumerMember] = field(default_factory=dict)
    target_assignments: dict[str, Assignment] = field(default_factory=dict)
    current_assignments: dict[str, StoredMemberAssignment] = field(default_factory=dict)

    def record_count(self) -> int:
        return (sum(v is not None for v in (self.epoch, self.subscription_metadata, self.assignment_epoch))
                + len(self.members) + len(self.target_assignments) + len(self.current_assignments))

    def is_empty(self) -> bool:
        return self.record_count() == 0


# --- the flexible encoding ---------------------------------------------------------------------

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_INT8 = struct.Struct(">b")


class _Writer:
    def __init__(self, version: int) -> None:
        self.out = bytearray(_INT16.pack(version))

    def int8(self, value: int) -> None:
        self.out += _INT8.pack(value)

    def int32(self, value: int) -> None:
        self.out += _INT32.pack(value)

    def uuid(self, value: uuid.UUID) -> None:
        self.out += value.bytes

    def string(self, value: str | None) -> None:
        if value is None:
            write_uvarint(0, self.out)
            return
        data = value.encode()
        write_uvarint(len(data) + 1, self.out)
        self.out += data

    def count(self, n: int) -> None:
        write_uvarint(n + 1, self.out)

    def no_tags(self) -> None:
        write_uvarint(0, self.out)


class _Reader:
    """Reads Kafka's flexible encoding; a truncated or inconsistent value raises ValueError."""

    def __init__(self, data: bytes, what: str) -> None:
        self.data = memoryview(data)
        self.what = what
        self.pos = 0

    def _take(self, n: int) -> memoryview:
        if n < 0 or self.pos + n > len(self.data):
            raise ValueError(f"{self.what}: {n} byte(s) wanted at {self.pos}, {len(self.data) - self.pos} there")
        chunk = self.data[self.pos:self.pos + n]
        self.pos += n
        return chunk

    def _uvarint(self) -> int:
        value, self.pos = read_uvarint(self.data, self.pos, max_bits=35, what=self.what, error=ValueError)
        return value

    def int8(self) -> int:
        return _INT8.unpack(self._take(1))[0]

    def int16(self) -> int:
        return _INT16.unpack(self._take(2))[0]

    def int32(self) -> int:
        return _INT32.unpack(self._take(4))[0]

    def uuid(self) -> uuid.UUID:
        return uuid.UUID(bytes=bytes(self._take(16)))

    def nullable_string(self) -> str | None:
        n = self._uvarint()
        if n == 0:
            return None
        try:
            return bytes(self._take(n - 1)).decode()
        except UnicodeDecodeError as exc:
            raise ValueError(f"{self.what}: a string is not UTF-8") from exc

    def string(self) -> str:
        value = self.nullable_string()
        if value is None:
            raise ValueError(f"{self.what}: a non-nullable string is null")
        return value

    def count(self, min_item_bytes: int) -> int:
        """An array's length, checked against the bytes left (each item takes at least
        `min_item_bytes`) before anything is built from it."""
        n = self._uvarint() - 1
        if n < 0:
            raise ValueError(f"{self.what}: a non-nullable array is null")
        if n * min_item_bytes > len(self.data) - self.pos:
            raise ValueError(f"{self.what}: {n} item(s) declared, {len(self.data) - self.pos} byte(s) left")
        return n

    def skip_tags(self) -> None:
        for _ in range(self._uvarint()):
            self._uvarint()  # tag
            self._take(self._uvarint())

    def end(self) -> None:
        if self.pos != len(self.data):
            raise ValueError(f"{self.what}: {len(self.data) - self.pos} byte(s) after the value")


def _start(value: bytes, what: str) -> _Reader:
    reader = _Reader(value, what)
    version = reader.int16()
    if version != VALUE_VERSION:
        raise ValueError(f"{what} version {version} is not readable here (version 0 is)")
    return reader


# --- keys --------------------------------------------------------------------------------------


def consumer_key(record_type: int, group: str, member: str | None = None) -> bytes:
    """The key of a consumer group record: int16 type, group, and the member for types 5, 7, 8."""
    out = bytearray(_INT16.pack(record_type))
    for text in (group,) if member is None else (group, member):
        data = text.encode()
        out += _INT16.pack(len(data)) + data
    return bytes(out)


def parse_consumer_key(record_type: int, body: bytes) -> tuple[str, str | None]:
    """(group, member or None) from the bytes after a consumer record key's type."""
    reader = _Reader(body, f"consumer group key type {record_type}")
    strings = []
    for _ in range(2 if record_type in MEMBER_RECORD_TYPES else 1):
        length = reader.int16()
        try:
            strings.append(bytes(reader._take(length)).decode())
        except UnicodeDecodeError as exc:
            raise ValueError("a consumer group key is not UTF-8") from exc
    reader.end()
    return strings[0], strings[1] if len(strings) > 1 else None


# --- values ------------------------------------------------------------------------------------


def epoch_value(epoch: int) -> bytes:
    """ConsumerGroupMetadataValue (type 3) and ConsumerGroupTargetAssignmentMetadataValue (type 6)
    have the same layout: one int32 epoch."""
    w = _Writer(VALUE_VERSION)
    w.int32(epoch)
    w.no_tags()
    return bytes(w.out)


def parse_epoch_value(value: bytes, what: str) -> int:
    r = _start(value, what)
    epoch = r.int32()
    r.skip_tags()
    r.end()
    return epoch


def partition_metadata_value(topics: tuple[StoredTopicMetadata, ...]) -> bytes:
    w = _Writer(VALUE_VERSION)
    w.count(len(topics))
    for topic in topics:
        w.uuid(topic.topic_id)
        w.string(topic.name)
        w.int32(topic.num_partitions)
        w.count(0)  # partitionMetadata: racks per partition, none known here
        w.no_tags()
    w.no_tags()
    return bytes(w.out)


def parse_partition_metadata_value(value: bytes) -> tuple[StoredTopicMetadata, ...]:
    r = _start(value, "ConsumerGroupPartitionMetadataValue")
    topics = []
    for _ in range(r.count(16 + 1 + 4 + 1 + 1)):
        topic_id, name, num_partitions = r.uuid(), r.string(), r.int32()
        for _ in range(r.count(4 + 1 + 1)):  # racks are not used here: read past them
            r.int32()
            for _ in range(r.count(1)):
                r.string()
            r.skip_tags()
        r.skip_tags()
        topics.append(StoredTopicMetadata(topic_id, name, num_partitions))
    r.skip_tags()
    r.end()
    return tuple(topics)


def member_metadata_value(member: StoredConsumerMember) -> bytes:
    w = _Writer(VALUE_VERSION)
    w.string(member.instance_id)
    w.string(member.rack_id)
    w.string(member.client_id)
    w.string(member.client_host)
    w.count(len(member.subscribed_topic_names))
    for name in member.subscribed_topic_names:
        w.string(name)
    w.string(member.subscribed_topic_regex)
    w.int32(member.rebalance_timeout_ms)
    w.string(member.server_assignor)
    w.no_tags()
    return bytes(w.out)


def parse_member_metadata_value(value: bytes) -> StoredConsumerMember:
    r = _start(value, "ConsumerGroupMemberMetadataValue")
    instance_id, rack_id = r.nullable_string(), r.nullable_string()
    client_id, client_host = r.string(), r.string()
    names = tuple(r.string() for _ in range(r.count(1)))
    regex = r.nullable_string()
    rebalance_timeout_ms = r.int32()
    assignor = r.nullable_string()
    r.skip_tags()  # tag 0: a classic-protocol member's metadata
    r.end()
    return StoredConsumerMember(instance_id, rack_id, client_id, client_host, names, regex,
                                rebalance_timeout_ms, assignor)


def _write_assignment(w: _Writer, assignment: Assignment) -> None:
    items = sorted(assignment.items(), key=lambda item: str(item[0]))
    w.count(len(items))
    for topic_id, partitions in items:
        w.uuid(topic_id)
        w.count(len(partitions))
        for p in sorted(partitions):
            w.int32(p)
        w.no_tags()


def _read_assignment(r: _Reader) -> dict[uuid.UUID, frozenset[int]]:
    assignment: dict[uuid.UUID, frozenset[int]] = {}
    for _ in range(r.count(16 + 1 + 1)):
        topic_id = r.uuid()
        partitions = frozenset(r.int32() for _ in range(r.count(4)))
        r.skip_tags()
        if partitions:
            assignment[topic_id] = assignment.get(topic_id, frozenset()) | partitions
    return assignment


def target_assignment_value(assignment: Assignment) -> bytes:
    w = _Writer(VALUE_VERSION)
    _write_assignment(w, assignment)
    w.no_tags()
    return bytes(w.out)


def parse_target_assignment_value(value: bytes) -> dict[uuid.UUID, frozenset[int]]:
    r = _start(value, "ConsumerGroupTargetAssignmentMemberValue")
    assignment = _read_assignment(r)
    r.skip_tags()
    r.end()
    return assignment


def current_assignment_value(current: StoredMemberAssignment) -> bytes:
    w = _Writer(VALUE_VERSION)
    w.int32(current.member_epoch)
    w.int32(current.previous_member_epoch)
    w.int8(current.state)
    _write_assignment(w, current.assigned)
    _write_assignment(w, current.pending_revocation)
    w.no_tags()
    return bytes(w.out)


def parse_current_assignment_value(value: bytes) -> StoredMemberAssignment:
    r = _start(value, "ConsumerGroupCurrentMemberAssignmentValue")
    member_epoch, previous, state = r.int32(), r.int32(), r.int8()
    assigned, pending = _read_assignment(r), _read_assignment(r)
    r.skip_tags()
    r.end()
    return StoredMemberAssignment(member_epoch, previous, state, assigned, pending)


# --- a group's records, read and written -------------------------------------------------------


def apply_record(group: StoredConsumerGroup, record_type: int, member: str | None, value: bytes | None) -> None:
    """Replay one record into the group's stored state (Kafka's replay methods): the value sets
    the key's part of the state, a tombstone clears it. Raises ValueError for unreadable bytes."""
    if record_type == CONSUMER_GROUP_METADATA:
        group.epoch = None if value is None else parse_epoch_value(value, "ConsumerGroupMetadataValue")
    elif record_type == CONSUMER_GROUP_PARTITION_METADATA:
        group.subscription_metadata = None if value is None else parse_partition_metadata_value(value)
    elif record_type == CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA:
        group.assignment_epoch = (None if value is None
                                  else parse_epoch_value(value, "ConsumerGroupTargetAssignmentMetadataValue"))
    else:
        assert member is not None
        if record_type == CONSUMER_GROUP_MEMBER_METADATA:
            _replay(group.members, member, value, parse_member_metadata_value)
        elif record_type == CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER:
            _replay(group.target_assignments, member, value, parse_target_assignment_value)
        elif record_type == CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT:
            _replay(group.current_assignments, member, value, parse_current_assignment_value)
        else:
            raise ValueError(f"record type {record_type} is not a consumer group record")


def _replay(table: dict[str, T], member: str, value: bytes | None, parse: Callable[[bytes], T]) -> None:
    if value is None:
        table.pop(member, None)
    else:
        table[member] = parse(value)


Record = tuple[bytes, bytes | None]


def diff_records(group_id: str, old: StoredConsumerGroup | None, new: StoredConsumerGroup | None) -> list[Record]:
    """The records that turn `old` into `new` (None: no records at all), in the order Kafka writes
    them: member subscriptions, subscription metadata, group epoch, target assignments, target
    epoch, current assignments; and tombstones in the reverse order (current assignments first)."""
    old = old or StoredConsumerGroup()
    new = new or StoredConsumerGroup()
    writes: list[Record] = []
    tombstones: list[Record] = []

    def members(record_type: int, before: Mapping, after: Mapping, encode) -> None:
        for member, value in after.items():
            if before.get(member) != value:
                writes.append((consumer_key(record_type, group_id, member), encode(value)))
        for member in before.keys() - after.keys():
            tombstones.append((consumer_key(record_type, group_id, member), None))

    def single(record_type: int, before, after, encode) -> None:
        if after is not None and before != after:
            writes.append((consumer_key(record_type, group_id), encode(after)))
        elif after is None and before is not None:
            tombstones.append((consumer_key(record_type, group_id), None))

    members(CONSUMER_GROUP_MEMBER_METADATA, old.members, new.members, member_metadata_value)
    single(CONSUMER_GROUP_PARTITION_METADATA, old.subscription_metadata, new.subscription_metadata,
           partition_metadata_value)
    single(CONSUMER_GROUP_METADATA, old.epoch, new.epoch, epoch_value)
    members(CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER, old.target_assignments, new.target_assignments,
            target_assignment_value)
    single(CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA, old.assignment_epoch, new.assignment_epoch, epoch_value)
    members(CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT, old.current_assignments, new.current_assignments,
            current_assignment_value)
    # Tombstones were collected member records first; Kafka deletes current assignments, then
    # targets, then subscriptions, then the group-level records.
    order = {CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT: 0, CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER: 1,
             CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA: 2, CONSUMER_GROUP_MEMBER_METADATA: 3,
             CONSUMER_GROUP_PARTITION_METADATA: 4, CONSUMER_GROUP_METADATA: 5}
    tombstones.sort(key=lambda record: order[_INT16.unpack_from(record[0])[0]])
    return writes + tombstones


# --- the consumer group type's records in the offsets store ------------------------------------


class ConsumerGroupRecords:
    """The records of KIP-848 consumer groups in `__consumer_offsets` (the six kinds above), as
    storage.offsets_store.OffsetsStore replays and writes them: the store's `GroupRecords` for the
    type "consumer". `groups[group_id]` is the state each group's records describe; writes are the
    difference from it (Kafka writes the same deltas)."""

    group_type = "consumer"
    record_types = CONSUMER_RECORD_TYPES

    def __init__(self) -> None:
        self.groups: dict[str, StoredConsumerGroup] = {}

    def clear(self) -> None:
        self.groups.clear()

    def replay(self, record_type: int, key: bytes, value: bytes | None) -> None:
        group_id, member = parse_consumer_key(record_type, key[2:])
        group = self.groups.setdefault(group_id, StoredConsumerGroup())
        try:
            apply_record(group, record_type, member, value)
        finally:
            if group.is_empty():
                del self.groups[group_id]

    def group_ids(self) -> list[str]:
        return list(self.groups)

    def changes(self, group_id: str, state: StoredConsumerGroup | None) -> list[Record]:
        return diff_records(group_id, self.groups.get(group_id), state)

    def apply(self, group_id: str, state: StoredConsumerGroup | None) -> None:
        if state is None or state.is_empty():
            self.groups.pop(group_id, None)
        else:
            self.groups[group_id] = state
