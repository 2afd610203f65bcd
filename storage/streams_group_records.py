"""The `__consumer_offsets` records of a KIP-1071 streams group, in Kafka 4.4's own layouts, and the
group's state as they describe it (`StoredStreamsGroup`).

Kafka's group coordinator persists a streams group as six kinds of records (group-coordinator
module, `StreamsGroup*Key/Value.json`); a restart replays them and the group resumes with its
topology, epochs, members and task assignments. This module writes and reads them the same way:

    key type  key fields       value (version 0, flexible)
    17        group            StreamsGroupMetadataValue: epoch int32, metadataHash int64; tagged
                               0 validatedTopologyEpoch int32 (-1), 1 lastAssignmentConfigs
                               [key, value] (null), 2 storedDescriptionTopologyEpoch int32 (-1),
                               3 failedDescriptionTopologyEpoch int32 (-1)
    19        group, member    StreamsGroupMemberMetadataValue: instanceId string?, rackId string?,
                               clientId, clientHost, rebalanceTimeoutMs int32, topologyEpoch int32,
                               processId, userEndpoint {host, port uint16}?, clientTags [key, value]
    20        group            StreamsGroupTargetAssignmentMetadataValue: assignmentEpoch int32;
                               tagged 0 assignmentTimestamp int64 (0)
    21        group, member    StreamsGroupTargetAssignmentMemberValue: activeTasks, standbyTasks,
                               warmupTasks, each [subtopologyId, partitions [int32]]
    22        group, member    StreamsGroupCurrentMemberAssignmentValue: memberEpoch,
                               previousMemberEpoch int32, state int8, then six task lists (active,
                               standby, warm-up; the same pending revocation), each task list
                               [subtopologyId, partitions, tagged 0 assignmentEpochs [int32]?]
    23        group            StreamsGroupTopologyValue: epoch int32, subtopologies
                               [subtopologyId, sourceTopics, sourceTopicRegex, stateChangelogTopics
                               [TopicInfo], repartitionSinkTopics, repartitionSourceTopics
                               [TopicInfo], copartitionGroups [sourceTopics, sourceTopicRegex,
                               repartitionSourceTopics: [int16] each]]; TopicInfo: name,
                               partitions int32, replicationFactor int16, topicConfigs [key, value]
    null value: a tombstone (the key's record is deleted)

Keys are not flexible (an int16 type, then int16-length strings, as the consumer group's keys:
storage/consumer_group_records.py has the shared encoding). A tagged field is written only when it is
not its default, as Kafka's generated writers do; tags this module does not know are skipped when
read. The metadata hash is this broker's own (a hash of the topology's topics' names, ids and
partition counts): a Kafka broker reading it would find it different and rebalance the group once.

Every length is checked against the bytes there before anything is read (ValueError otherwise).
Pure: no I/O.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Callable, Mapping, TypeVar

from minibroker.protocol.records import write_uvarint
from minibroker.storage.consumer_group_records import (
    Record,
    _Reader,
    _Writer,
    consumer_key,
)

T = TypeVar("T")

STREAMS_GROUP_METADATA = 17
STREAMS_GROUP_MEMBER_METADATA = 19
STREAMS_GROUP_TARGET_ASSIGNMENT_METADATA = 20
STREAMS_GROUP_TARGET_ASSIGNMENT_MEMBER = 21
STREAMS_GROUP_CURRENT_MEMBER_ASSIGNMENT = 22
STREAMS_GROUP_TOPOLOGY = 23
STREAMS_RECORD_TYPES = frozenset({17, 19, 20, 21, 22, 23})
MEMBER_RECORD_TYPES = frozenset({STREAMS_GROUP_MEMBER_METADATA, STREAMS_GROUP_TARGET_ASSIGNMENT_MEMBER,
                                 STREAMS_GROUP_CURRENT_MEMBER_ASSIGNMENT})

_INT16 = struct.Struct(">h")
_INT64 = struct.Struct(">q")

Tasks = Mapping[str, frozenset[int]]  # subtopology id -> partitions (task ids); no empty sets
TasksWithEpochs = Mapping[str, Mapping[int, int]]  # subtopology id -> partition -> assignment epoch


# --- the state the records describe ------------------------------------------------------------


@dataclass(frozen=True)
class TopicInfo:
    """An internal topic a subtopology declares (its partitions 0: decided by the coordinator)."""

    name: str
    partitions: int = 0
    replication_factor: int = 0
    configs: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class CopartitionGroup:
    source_topics: tuple[int, ...] = ()  # indexes into the subtopology's source topics
    source_topic_regex: tuple[int, ...] = ()
    repartition_source_topics: tuple[int, ...] = ()  # indexes into its repartition source topics


@dataclass(frozen=True)
class Subtopology:
    subtopology_id: str
    source_topics: tuple[str, ...] = ()
    source_topic_regex: tuple[str, ...] = ()
    state_changelog_topics: tuple[TopicInfo, ...] = ()
    repartition_sink_topics: tuple[str, ...] = ()
    repartition_source_topics: tuple[TopicInfo, ...] = ()
    copartition_groups: tuple[CopartitionGroup, ...] = ()


@dataclass(frozen=True)
class StoredTopology:
    """A streams application's topology (type 23), as its first member sent it."""

    epoch: int
    subtopologies: tuple[Subtopology, ...]


@dataclass(frozen=True)
class StoredStreamsGroupMetadata:
    """Type 17."""

    epoch: int
    metadata_hash: int
    validated_topology_epoch: int = -1
    last_assignment_configs: tuple[tuple[str, str], ...] | None = None
    stored_description_topology_epoch: int = -1
    failed_description_topology_epoch: int = -1


@dataclass(frozen=True)
class StoredStreamsMember:
    """Type 19: a member's client and process."""

    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    topology_epoch: int
    process_id: str
    user_endpoint: tuple[str, int] | None
    client_tags: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class StoredTasks:
    """Type 21: a member's target assignment."""

    active: Tasks
    standby: Tasks
    warmup: Tasks


@dataclass(frozen=True)
class StoredStreamsAssignment:
    """Type 22: a member's epochs and current assignment; `state` is Kafka's MemberState byte."""

    member_epoch: int
    previous_member_epoch: int
    state: int
    active: TasksWithEpochs
    standby: Tasks
    warmup: Tasks
    active_pending: TasksWithEpochs
    standby_pending: Tasks
    warmup_pending: Tasks


@dataclass
class StoredStreamsGroup:
    """Everything the records of one streams group hold; a field is None (or a member absent from
    a map) while no record for it exists."""

    metadata: StoredStreamsGroupMetadata | None = None
    topology: StoredTopology | None = None
    assignment_epoch: tuple[int, int] | None = None  # (epoch, timestamp ms), type 20
    members: dict[str, StoredStreamsMember] = field(default_factory=dict)
    target_assignments: dict[str, StoredTasks] = field(default_factory=dict)
    current_assignments: dict[str, StoredStreamsAssignment] = field(default_factory=dict)

    def record_count(self) -> int:
        return (sum(v is not None for v in (self.metadata, self.topology, self.assignment_epoch))
                + len(self.members) + len(self.target_assignments) + len(self.current_assignments))

    def is_empty(self) -> bool:
        return self.record_count() == 0


# --- encoding helpers ----------------------------------------------------------------------------


class _W(_Writer):
    def int16(self, value: int) -> None:
        self.out += _INT16.pack(value)

    def int64(self, value: int) -> None:
        self.out += _INT64.pack(value)

    def uint16(self, value: int) -> None:
        self.out += struct.pack(">H", value)

    def tags(self, tagged: list[tuple[int, bytes]]) -> None:
        write_uvarint(len(tagged), self.out)
        for tag, data in tagged:
            write_uvarint(tag, self.out)
            write_uvarint(len(data), self.out)
            self.out += data

    def strings(self, values: tuple[str, ...]) -> None:
        self.count(len(values))
        for value in values:
            self.string(value)

    def key_values(self, pairs: tuple[tuple[str, str], ...]) -> None:
        self.count(len(pairs))
        for key, value in pairs:
            self.string(key)
            self.string(value)
            self.no_tags()


class _R(_Reader):
    def int64(self) -> int:
        return _INT64.unpack(self._take(8))[0]

    def uint16(self) -> int:
        return struct.unpack(">H", self._take(2))[0]

    def tags(self) -> dict[int, bytes]:
        found: dict[int, bytes] = {}
        for _ in range(self._uvarint()):
            tag = self._uvarint()
            found[tag] = bytes(self._take(self._uvarint()))
        return found

    def strings(self) -> tuple[str, ...]:
        return tuple(self.string() for _ in range(self.count(1)))

    def key_values(self) -> tuple[tuple[str, str], ...]:
        pairs = []
        for _ in range(self.count(3)):
            pairs.append((self.string(), self.string()))
            self.skip_tags()
        return tuple(pairs)


def _fragment(write: Callable[[_W], None]) -> bytes:
    w = _W(0)
    write(w)
    return bytes(w.out[2:])  # without the version


def _start(value: bytes, what: str) -> _R:
    reader = _R(value, what)
    version = reader.int16()
    if version != 0:
        raise ValueError(f"{what} version {version} is not readable here (version 0 is)")
    return reader


def _write_tasks(w: _W, tasks: Tasks) -> None:
    w.count(len(tasks))
    for subtopology in sorted(tasks):
        w.string(subtopology)
        w.count(len(tasks[subtopology]))
        for p in sorted(tasks[subtopology]):
            w.int32(p)
        w.no_tags()


def _read_tasks(r: _R) -> dict[str, frozenset[int]]:
    tasks: dict[str, frozenset[int]] = {}
    for _ in range(r.count(3)):
        subtopology = r.string()
        partitions = frozenset(r.int32() for _ in range(r.count(4)))
        r.skip_tags()
        if partitions:
            tasks[subtopology] = tasks.get(subtopology, frozenset()) | partitions
    return tasks


def _write_tasks_with_epochs(w: _W, tasks: TasksWithEpochs) -> None:
    w.count(len(tasks))
    for subtopology in sorted(tasks):
        entries = sorted(tasks[subtopology].items())
        w.string(subtopology)
        w.count(len(entries))
        for p, _ in entries:
            w.int32(p)

        def epochs(f: _W, entries=entries) -> None:
            f.count(len(entries))
            for _, epoch in entries:
                f.int32(epoch)
        w.tags([(0, _fragment(epochs))])


def _read_tasks_with_epochs(r: _R) -> dict[str, dict[int, int]]:
    tasks: dict[str, dict[int, int]] = {}
    for _ in range(r.count(3)):
        subtopology = r.string()
        partitions = [r.int32() for _ in range(r.count(4))]
        tagged = r.tags()
        epochs: list[int] | None = None
        if 0 in tagged:
            t = _R(tagged[0], "AssignmentEpochs")
            n = t._uvarint() - 1
            if n >= 0:
                if n * 4 > len(t.data) - t.pos:
                    raise ValueError("AssignmentEpochs: more epochs declared than bytes")
                epochs = [t.int32() for _ in range(n)]
            t.end()
        if epochs is not None and len(epochs) != len(partitions):
            raise ValueError(f"subtopology {subtopology}: {len(partitions)} partitions but {len(epochs)} epochs")
        # Without epochs (a record written before they existed) a task counts as assigned at epoch 0.
        by_partition = {p: (epochs[i] if epochs is not None else 0) for i, p in enumerate(partitions)}
        if by_partition:
            tasks.setdefault(subtopology, {}).update(by_partition)
    return tasks


# --- keys --------------------------------------------------------------------------------------


def streams_key(record_type: int, group: str, member: str | None = None) -> bytes:
    return consumer_key(record_type, group, member)


def parse_streams_key(record_type: int, body: bytes) -> tuple[str, str | None]:
    """(group, member or None) from the bytes after a streams record key's type."""
    reader = _R(body, f"streams group key type {record_type}")
    strings = []
    for _ in range(2 if record_type in MEMBER_RECORD_TYPES else 1):
        length = reader.int16()
        try:
            strings.append(bytes(reader._take(length)).decode())
        except UnicodeDecodeError as exc:
            raise ValueError("a streams group key is not UTF-8") from exc
    reader.end()
    return strings[0], strings[1] if len(strings) > 1 else None


# --- values ------------------------------------------------------------------------------------


def metadata_value(m: StoredStreamsGroupMetadata) -> bytes:
    w = _W(0)
    w.int32(m.epoch)
    w.int64(m.metadata_hash)
    tagged: list[tuple[int, bytes]] = []
    if m.validated_topology_epoch != -1:
        tagged.append((0, _fragment(lambda f: f.int32(m.validated_topology_epoch))))
    if m.last_assignment_configs is not None:
        configs = m.last_assignment_configs
        tagged.append((1, _fragment(lambda f: f.key_values(configs))))
    if m.stored_description_topology_epoch != -1:
        tagged.append((2, _fragment(lambda f: f.int32(m.stored_description_topology_epoch))))
    if m.failed_description_topology_epoch != -1:
        tagged.append((3, _fragment(lambda f: f.int32(m.failed_description_topology_epoch))))
    w.tags(tagged)
    return bytes(w.out)


def _tagged_int32(data: bytes, what: str) -> int:
    r = _R(data, what)
    value = r.int32()
    r.end()
    return value


def parse_metadata_value(value: bytes) -> StoredStreamsGroupMetadata:
    r = _start(value, "StreamsGroupMetadataValue")
    epoch, metadata_hash = r.int32(), r.int64()
    tagged = r.tags()
    r.end()
    configs = None
    if 1 in tagged:
        t = _R(tagged[1], "LastAssignmentConfigs")
        n = t._uvarint() - 1
        if n >= 0:
            t.pos = 0
            configs = t.key_values()
        t.end()
    return StoredStreamsGroupMetadata(
        epoch, metadata_hash,
        _tagged_int32(tagged[0], "ValidatedTopologyEpoch") if 0 in tagged else -1,
        configs,
        _tagged_int32(tagged[2], "StoredDescriptionTopologyEpoch") if 2 in tagged else -1,
        _tagged_int32(tagged[3], "FailedDescriptionTopologyEpoch") if 3 in tagged else -1)


def target_metadata_value(epoch: int, timestamp_ms: int) -> bytes:
    w = _W(0)
    w.int32(epoch)
    w.tags([(0, _fragment(lambda f: f.int64(timestamp_ms)))] if timestamp_ms != 0 else [])
    return bytes(w.out)


def parse_target_metadata_value(value: bytes) -> tuple[int, int]:
    r = _start(value, "StreamsGroupTargetAssignmentMetadataValue")
    epoch = r.int32()
    tagged = r.tags()
    r.end()
    timestamp = 0
    if 0 in tagged:
        t = _R(tagged[0], "AssignmentTimestamp")
        timestamp = t.int64()
        t.end()
    return epoch, timestamp


def member_value(m: StoredStreamsMember) -> bytes:
    w = _W(0)
    w.string(m.instance_id)
    w.string(m.rack_id)
    w.string(m.client_id)
    w.string(m.client_host)
    w.int32(m.rebalance_timeout_ms)
    w.int32(m.topology_epoch)
    w.string(m.process_id)
    if m.user_endpoint is None:
        w.int8(-1)  # a null struct
    else:
        w.int8(1)
        w.string(m.user_endpoint[0])
        w.uint16(m.user_endpoint[1])
        w.no_tags()
    w.key_values(tuple(sorted(m.client_tags)))
    w.no_tags()
    return bytes(w.out)


def parse_member_value(value: bytes) -> StoredStreamsMember:
    r = _start(value, "StreamsGroupMemberMetadataValue")
    instance_id, rack_id = r.nullable_string(), r.nullable_string()
    client_id, client_host = r.string(), r.string()
    rebalance_timeout_ms, topology_epoch = r.int32(), r.int32()
    process_id = r.string()
    endpoint = None
    marker = r.int8()
    if marker >= 0:
        endpoint = (r.string(), r.uint16())
        r.skip_tags()
    tags = r.key_values()
    r.skip_tags()
    r.end()
    return StoredStreamsMember(instance_id, rack_id, client_id, client_host, rebalance_timeout_ms, topology_epoch,
                               process_id, endpoint, tags)


def target_value(t: StoredTasks) -> bytes:
    w = _W(0)
    _write_tasks(w, t.active)
    _write_tasks(w, t.standby)
    _write_tasks(w, t.warmup)
    w.no_tags()
    return bytes(w.out)


def parse_target_value(value: bytes) -> StoredTasks:
    r = _start(value, "StreamsGroupTargetAssignmentMemberValue")
    active, standby, warmup = _read_tasks(r), _read_tasks(r), _read_tasks(r)
    r.skip_tags()
    r.end()
    return StoredTasks(active, standby, warmup)


def current_value(c: StoredStreamsAssignment) -> bytes:
    w = _W(0)
    w.int32(c.member_epoch)
    w.int32(c.previous_member_epoch)
    w.int8(c.state)
    _write_tasks_with_epochs(w, c.active)
    _write_tasks(w, c.standby)
    _write_tasks(w, c.warmup)
    _write_tasks_with_epochs(w, c.active_pending)
    _write_tasks(w, c.standby_pending)
    _write_tasks(w, c.warmup_pending)
    w.no_tags()
    return bytes(w.out)


def parse_current_value(value: bytes) -> StoredStreamsAssignment:
    r = _start(value, "StreamsGroupCurrentMemberAssignmentValue")
    member_epoch, previous, state = r.int32(), r.int32(), r.int8()
    active, standby, warmup = _read_tasks_with_epochs(r), _read_tasks(r), _read_tasks(r)
    active_pending, standby_pending, warmup_pending = _read_tasks_with_epochs(r), _read_tasks(r), _read_tasks(r)
    r.skip_tags()
    r.end()
    return StoredStreamsAssignment(member_epoch, previous, state, active, standby, warmup, active_pending,
                                   standby_pending, warmup_pending)


def _write_topic_info(w: _W, info: TopicInfo) -> None:
    w.string(info.name)
    w.int32(info.partitions)
    w.int16(info.replication_factor)
    w.key_values(info.configs)
    w.no_tags()


def _read_topic_info(r: _R) -> TopicInfo:
    name, partitions, replication = r.string(), r.int32(), r.int16()
    configs = r.key_values()
    r.skip_tags()
    return TopicInfo(name, partitions, replication, configs)


def _write_int16s(w: _W, values: tuple[int, ...]) -> None:
    w.count(len(values))
    for v in values:
        w.int16(v)


def _read_int16s(r: _R) -> tuple[int, ...]:
    return tuple(r.int16() for _ in range(r.count(2)))


def topology_value(t: StoredTopology) -> bytes:
    w = _W(0)
    w.int32(t.epoch)
    w.count(len(t.subtopologies))
    for s in t.subtopologies:
        w.string(s.subtopology_id)
        w.strings(s.source_topics)
        w.strings(s.source_topic_regex)
        w.count(len(s.state_changelog_topics))
        for info in s.state_changelog_topics:
            _write_topic_info(w, info)
        w.strings(s.repartition_sink_topics)
        w.count(len(s.repartition_source_topics))
        for info in s.repartition_source_topics:
            _write_topic_info(w, info)
        w.count(len(s.copartition_groups))
        for g in s.copartition_groups:
            _write_int16s(w, g.source_topics)
            _write_int16s(w, g.source_topic_regex)
            _write_int16s(w, g.repartition_source_topics)
            w.no_tags()
        w.no_tags()
    w.no_tags()
    return bytes(w.out)


def parse_topology_value(value: bytes) -> StoredTopology:
    r = _start(value, "StreamsGroupTopologyValue")
    epoch = r.int32()
    subtopologies = []
    for _ in range(r.count(8)):
        subtopology_id = r.string()
        sources, regexes = r.strings(), r.strings()
        changelogs = tuple(_read_topic_info(r) for _ in range(r.count(9)))
        sinks = r.strings()
        repartition_sources = tuple(_read_topic_info(r) for _ in range(r.count(9)))
        groups = []
        for _ in range(r.count(4)):
            groups.append(CopartitionGroup(_read_int16s(r), _read_int16s(r), _read_int16s(r)))
            r.skip_tags()
        r.skip_tags()
        subtopologies.append(Subtopology(subtopology_id, sources, regexes, changelogs, sinks, repartition_sources,
                                         tuple(groups)))
    r.skip_tags()
    r.end()
    return StoredTopology(epoch, tuple(subtopologies))


# --- a group's records, read and written -------------------------------------------------------


def apply_record(group: StoredStreamsGroup, record_type: int, member: str | None, value: bytes | None) -> None:
    """Replay one record into the group's stored state (Kafka's replay methods): the value sets
    the key's part of the state, a tombstone clears it. Raises ValueError for unreadable bytes."""
    if record_type == STREAMS_GROUP_METADATA:
        group.metadata = None if value is None else parse_metadata_value(value)
    elif record_type == STREAMS_GROUP_TOPOLOGY:
        group.topology = None if value is None else parse_topology_value(value)
    elif record_type == STREAMS_GROUP_TARGET_ASSIGNMENT_METADATA:
        group.assignment_epoch = None if value is None else parse_target_metadata_value(value)
    else:
        assert member is not None
        if record_type == STREAMS_GROUP_MEMBER_METADATA:
            _replay(group.members, member, value, parse_member_value)
        elif record_type == STREAMS_GROUP_TARGET_ASSIGNMENT_MEMBER:
            _replay(group.target_assignments, member, value, parse_target_value)
        elif record_type == STREAMS_GROUP_CURRENT_MEMBER_ASSIGNMENT:
            _replay(group.current_assignments, member, value, parse_current_value)
        else:
            raise ValueError(f"record type {record_type} is not a streams group record")


def _replay(table: dict[str, T], member: str, value: bytes | None, parse: Callable[[bytes], T]) -> None:
    if value is None:
        table.pop(member, None)
    else:
        table[member] = parse(value)


def diff_records(group_id: str, old: StoredStreamsGroup | None, new: StoredStreamsGroup | None) -> list[Record]:
    """The records that turn `old` into `new` (None: no records at all), in the order Kafka's
    heartbeat writes them: the topology, member metadata, the group metadata (epoch), target
    assignments, the target epoch, current assignments; tombstones in the order of Kafka's
    createGroupTombstoneRecords (current assignments, targets, the target epoch, members, the group
    metadata, the topology)."""
    old = old or StoredStreamsGroup()
    new = new or StoredStreamsGroup()
    writes: list[Record] = []
    tombstones: list[Record] = []

    def members(record_type: int, before: Mapping, after: Mapping, encode) -> None:
        for member, value in after.items():
            if before.get(member) != value:
                writes.append((streams_key(record_type, group_id, member), encode(value)))
        for member in sorted(before.keys() - after.keys()):
            tombstones.append((streams_key(record_type, group_id, member), None))

    def single(record_type: int, before, after, encode) -> None:
        if after is not None and before != after:
            writes.append((streams_key(record_type, group_id), encode(after)))
        elif after is None and before is not None:
            tombstones.append((streams_key(record_type, group_id), None))

    single(STREAMS_GROUP_TOPOLOGY, old.topology, new.topology, topology_value)
    members(STREAMS_GROUP_MEMBER_METADATA, old.members, new.members, member_value)
    single(STREAMS_GROUP_METADATA, old.metadata, new.metadata, metadata_value)
    members(STREAMS_GROUP_TARGET_ASSIGNMENT_MEMBER, old.target_assignments, new.target_assignments, target_value)
    single(STREAMS_GROUP_TARGET_ASSIGNMENT_METADATA, old.assignment_epoch, new.assignment_epoch,
           lambda v: target_metadata_value(*v))
    members(STREAMS_GROUP_CURRENT_MEMBER_ASSIGNMENT, old.current_assignments, new.current_assignments, current_value)
    order = {STREAMS_GROUP_CURRENT_MEMBER_ASSIGNMENT: 0, STREAMS_GROUP_TARGET_ASSIGNMENT_MEMBER: 1,
             STREAMS_GROUP_TARGET_ASSIGNMENT_METADATA: 2, STREAMS_GROUP_MEMBER_METADATA: 3,
             STREAMS_GROUP_METADATA: 4, STREAMS_GROUP_TOPOLOGY: 5}
    tombstones.sort(key=lambda record: order[_INT16.unpack_from(record[0])[0]])
    return writes + tombstones


# --- the streams group type's records in the offsets store -------------------------------------


class StreamsGroupRecords:
    """The records of KIP-1071 streams groups in `__consumer_offsets` (the six kinds above), as
    storage.offsets_store.OffsetsStore replays and writes them: the store's `GroupRecords` for the
    type "streams"."""

    group_type = "streams"
    record_types = STREAMS_RECORD_TYPES

    def __init__(self) -> None:
        self.groups: dict[str, StoredStreamsGroup] = {}

    def clear(self) -> None:
        self.groups.clear()

    def replay(self, record_type: int, key: bytes, value: bytes | None) -> None:
        group_id, member = parse_streams_key(record_type, key[2:])
        group = self.groups.setdefault(group_id, StoredStreamsGroup())
        try:
            apply_record(group, record_type, member, value)
        finally:
            if group.is_empty():
                del self.groups[group_id]

    def group_ids(self) -> list[str]:
        return list(self.groups)

    def changes(self, group_id: str, state: StoredStreamsGroup | None) -> list[Record]:
        return diff_records(group_id, self.groups.get(group_id), state)

    def apply(self, group_id: str, state: StoredStreamsGroup | None) -> None:
        if state is None or state.is_empty():
            self.groups.pop(group_id, None)
        else:
            self.groups[group_id] = state
