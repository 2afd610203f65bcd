"""The records of `__consumer_offsets`, in Kafka's own layouts, so Kafka's tools read what this broker
writes (kafka-console-consumer with the offsets formatter, kafka-dump-log --offsets-decoder).

Kafka's group-coordinator module defines them (OffsetCommitKey/Value.json, GroupMetadataKey/Value.json);
they are not in the client message specs kio is generated from, so they are written out below as
construct schemas, field for field. Every key and value starts with an int16: in a key the record
type (Kafka's coordinator record "apiKey"), in a value its version. Integers are big-endian, a
string is an int16 length and UTF-8 bytes (-1: null where nullable), bytes an int32 length, an
array an int32 count.

    key    type 0 or 1  OffsetCommitKey    group string, topic string, partition int32
           type 2       GroupMetadataKey   group string
    value  OffsetCommitValue   v0, v2: offset int64, metadata string, commitTimestamp int64
                               v1: v0's fields, then expireTimestamp int64
                               v3: offset int64, leaderEpoch int32, metadata string,
                                   commitTimestamp int64
           GroupMetadataValue  protocolType string, generation int32, protocol string (nullable),
                               leader string (nullable), currentStateTimestamp int64 (v2+),
                               members [memberId string, groupInstanceId string (nullable, v3+),
                                        clientId string, clientHost string,
                                        rebalanceTimeout int32 (v1+), sessionTimeout int32,
                                        subscription bytes, assignment bytes]
           null: a tombstone (the key's offset or group is deleted)

Written as Kafka 4 writes them: OffsetCommitValue v3, or v1 when the commit has an expire timestamp
(OffsetCommit v2-v4's retention time; those versions carry no leader epoch, which v1 cannot hold);
GroupMetadataValue v3. Read: versions 0-3 of both. Version 4, the first flexible one (compact
strings, tagged fields), is not written by Kafka 4.x and not read here: such a record is
unreadable (the replay says so and keeps it in the log).

The layout this broker wrote before (version 0 of its own, not Kafka's v0) is still read, so an
existing data directory loads; the store writes Kafka's layout from then on, and the log cleaner
keeps an old record until its key is written again. A value of version 0 is read as that old layout when it parses exactly
as one (this broker never wrote Kafka's v0), else as Kafka's v0:

    offset  version 0, offset int64, leader_epoch int32, metadata string, commit_timestamp int64,
            expire_timestamp int64 (-1 none)
    group   version 0, protocol_type string ("" none), generation int32, protocol string ("" none),
            member count int32, state_timestamp int64
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from construct import (
    Adapter,
    Bytes,
    ConstructError,
    GreedyBytes,
    If,
    Int16sb,
    Int16ub,
    Int32sb,
    Int64sb,
    PascalString,
    Prefixed,
    PrefixedArray,
    Struct,
    Switch,
    Terminated,
    this,
)

# --- keys ------------------------------------------------------------------------------------------

OFFSET_KEY = 1  # Kafka's OffsetCommitKey record type (0 is its older, identical twin)
GROUP_KEY = 2  # GroupMetadataKey

_String = PascalString(Int16sb, "utf8")

RECORD_KEY = Struct(
    "type" / Int16sb,
    "key" / Switch(
        this.type,
        {
            0: Struct("group" / _String, "topic" / _String, "partition" / Int32sb),
            OFFSET_KEY: Struct("group" / _String, "topic" / _String, "partition" / Int32sb),
            GROUP_KEY: Struct("group" / _String),
        },
    ),
    Terminated,
)


# --- values ----------------------------------------------------------------------------------------


class _NullableString(Adapter):
    """Kafka's nullable string: int16 length, -1 for null."""

    def _decode(self, obj: Any, context: Any, path: Any) -> str | None:
        return None if obj.length < 0 else obj.data.decode("utf8")

    def _encode(self, obj: str | None, context: Any, path: Any) -> dict:
        if obj is None:
            return {"length": -1, "data": None}
        data = obj.encode("utf8")
        return {"length": len(data), "data": data}


_NullString = _NullableString(Struct("length" / Int16sb, "data" / If(this.length >= 0, Bytes(this.length))))
_Bytes = Prefixed(Int32sb, GreedyBytes)

OFFSET_VALUE_VERSION = 3  # what Kafka 4 writes (1 when the commit has an expire timestamp)
GROUP_VALUE_VERSION = 3

OFFSET_COMMIT_VALUE = Struct(
    "version" / Int16sb,
    "offset" / Int64sb,
    "leader_epoch" / If(this.version >= 3, Int32sb),
    "metadata" / _String,
    "commit_timestamp" / Int64sb,
    "expire_timestamp" / If(this.version == 1, Int64sb),
    Terminated,
)

_MEMBER_METADATA = Struct(
    "member_id" / _String,
    "group_instance_id" / If(this._root.version >= 3, _NullString),
    "client_id" / _String,
    "client_host" / _String,
    "rebalance_timeout" / If(this._root.version >= 1, Int32sb),
    "session_timeout" / Int32sb,
    "subscription" / _Bytes,
    "assignment" / _Bytes,
)

GROUP_METADATA_VALUE = Struct(
    "version" / Int16sb,
    "protocol_type" / _String,
    "generation" / Int32sb,
    "protocol" / _NullString,
    "leader" / _NullString,
    "current_state_timestamp" / If(this.version >= 2, Int64sb),
    "members" / PrefixedArray(Int32sb, _MEMBER_METADATA),
    Terminated,
)

# This broker's layouts before it wrote Kafka's (read only).
_OwnString = PascalString(Int16ub, "utf8")
LEGACY_OFFSET_VALUE = Struct(
    "version" / Int16ub,
    "offset" / Int64sb,
    "leader_epoch" / Int32sb,
    "metadata" / _OwnString,
    "commit_timestamp" / Int64sb,
    "expire_timestamp" / Int64sb,
    Terminated,
)
LEGACY_GROUP_VALUE = Struct(
    "version" / Int16ub,
    "protocol_type" / _OwnString,
    "generation" / Int32sb,
    "protocol" / _OwnString,
    "members" / Int32sb,
    "state_timestamp" / Int64sb,
    Terminated,
)


@dataclass(frozen=True)
class OffsetAndMetadata:
    offset: int
    leader_epoch: int  # -1: none
    metadata: str
    commit_timestamp_ms: int
    expire_timestamp_ms: int = -1  # -1: none (only OffsetCommit v2-v4 retention_time sets it)


@dataclass(frozen=True)
class StoredMember:
    """One member in a group record (GroupMetadataValue's MemberMetadata)."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes  # its metadata for the group's protocol
    assignment: bytes


@dataclass(frozen=True)
class StoredGroup:
    """What survives a restart of a group: enough to list, describe and expire it, and (as Kafka
    keeps it) its members at the last generation."""

    protocol_type: str  # "" for a group that only stores offsets
    generation: int
    protocol: str  # "" when none
    members: int
    state_timestamp_ms: int  # when it last changed state (when it became Empty if members == 0); -1 unknown
    leader: str | None = None
    member_metadata: tuple[StoredMember, ...] = ()  # empty in records of the old layout


# --- encoding ----------------------------------------------------------------------------------


def offset_key(group: str, topic: str, partition: int) -> bytes:
    return RECORD_KEY.build({"type": OFFSET_KEY, "key": {"group": group, "topic": topic, "partition": partition}})


def group_key(group: str) -> bytes:
    return RECORD_KEY.build({"type": GROUP_KEY, "key": {"group": group}})


def offset_value(om: OffsetAndMetadata) -> bytes:
    """OffsetCommitValue v3, or v1 when the offset has an expire timestamp (Kafka's choice)."""
    version = 1 if om.expire_timestamp_ms >= 0 else OFFSET_VALUE_VERSION
    return OFFSET_COMMIT_VALUE.build({
        "version": version,
        "offset": om.offset,
        "leader_epoch": om.leader_epoch,
        "metadata": om.metadata,
        "commit_timestamp": om.commit_timestamp_ms,
        "expire_timestamp": om.expire_timestamp_ms,
    })


def group_value(group: StoredGroup) -> bytes:
    """GroupMetadataValue v3. A group read from the old layout has a member count but no members:
    it is written with no members and an unknown state time, which a restart treats as it treated
    the old record (a group that had members at its last record)."""
    state_timestamp = group.state_timestamp_ms
    if group.members != len(group.member_metadata):
        state_timestamp = -1
    return GROUP_METADATA_VALUE.build({
        "version": GROUP_VALUE_VERSION,
        "protocol_type": group.protocol_type,
        "generation": group.generation,
        "protocol": group.protocol or None,
        "leader": group.leader,
        "current_state_timestamp": state_timestamp,
        "members": [
            {"member_id": m.member_id, "group_instance_id": m.group_instance_id, "client_id": m.client_id,
             "client_host": m.client_host, "rebalance_timeout": m.rebalance_timeout_ms,
             "session_timeout": m.session_timeout_ms, "subscription": m.subscription,
             "assignment": m.assignment}
            for m in group.member_metadata
        ],
    })


# --- decoding ----------------------------------------------------------------------------------


def _check_version(value: bytes, kind: str) -> int:
    if len(value) < 2:
        raise ValueError(f"{kind} of {len(value)} byte(s) has no version")
    version = int.from_bytes(value[:2], "big", signed=True)
    if not 0 <= version <= 3:
        raise ValueError(f"{kind} version {version} is not readable here (versions 0-3 are)")
    return version


def _legacy(schema: Struct, value: bytes) -> Any:
    try:
        return schema.parse(value)
    except ConstructError:
        return None


def parse_offset_value(value: bytes) -> OffsetAndMetadata:
    """Any OffsetCommitValue of versions 0-3, or this broker's old layout. Raises ConstructError or
    ValueError for bytes that are none of those."""
    version = _check_version(value, "OffsetCommitValue")
    if version == 0 and (old := _legacy(LEGACY_OFFSET_VALUE, value)) is not None:
        return OffsetAndMetadata(old.offset, old.leader_epoch, old.metadata, old.commit_timestamp,
                                 old.expire_timestamp)
    v = OFFSET_COMMIT_VALUE.parse(value)
    return OffsetAndMetadata(
        v.offset,
        v.leader_epoch if v.leader_epoch is not None else -1,
        v.metadata,
        v.commit_timestamp,
        v.expire_timestamp if v.expire_timestamp is not None else -1,
    )


def parse_group_value(value: bytes) -> StoredGroup:
    """Any GroupMetadataValue of versions 0-3, or this broker's old layout."""
    version = _check_version(value, "GroupMetadataValue")
    if version == 0 and (old := _legacy(LEGACY_GROUP_VALUE, value)) is not None:
        return StoredGroup(old.protocol_type, old.generation, old.protocol, old.members, old.state_timestamp)
    v = GROUP_METADATA_VALUE.parse(value)
    members = tuple(
        StoredMember(
            m.member_id, m.group_instance_id, m.client_id, m.client_host,
            m.rebalance_timeout if m.rebalance_timeout is not None else m.session_timeout,
            m.session_timeout, m.subscription, m.assignment,
        )
        for m in v.members
    )
    state_timestamp = v.current_state_timestamp if v.current_state_timestamp is not None else -1
    return StoredGroup(v.protocol_type, v.generation, v.protocol or "", len(members), state_timestamp,
                       v.leader, members)


# --- the classic group type's records in the offsets store -------------------------------------


class ClassicGroupRecords:
    """The records of the classic group type in `__consumer_offsets` (GroupMetadataKey/Value, one
    per group), as storage.offsets_store.OffsetsStore replays and writes them: the store's
    `GroupRecords` for the type "classic". `groups[group_id]` is each group's last record."""

    group_type = "classic"
    record_types = frozenset({GROUP_KEY})

    def __init__(self) -> None:
        self.groups: dict[str, StoredGroup] = {}

    def clear(self) -> None:
        self.groups.clear()

    def replay(self, record_type: int, key: bytes, value: bytes | None) -> None:
        group = RECORD_KEY.parse(key).key.group
        if value is None:
            self.groups.pop(group, None)
        else:
            self.groups[group] = parse_group_value(value)

    def group_ids(self) -> list[str]:
        return list(self.groups)

    def changes(self, group_id: str, state: StoredGroup | None) -> list[tuple[bytes, bytes | None]]:
        """The records that make `state` the group's (None: a tombstone, if it has a record)."""
        if state is None:
            return [(group_key(group_id), None)] if group_id in self.groups else []
        return [(group_key(group_id), group_value(state))]

    def apply(self, group_id: str, state: StoredGroup | None) -> None:
        if state is None:
            self.groups.pop(group_id, None)
        else:
            self.groups[group_id] = state
