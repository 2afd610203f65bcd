"""A third group type, for tests only: "lease" groups, plugged into the group coordinator through
its registry (minibroker.groups.types) without a line of the classic or consumer group modules.

A member acquires a lease on the group (`LeaseGroupManager.acquire`, the type's own request, as a
share group has its own heartbeat) and holds it for LEASE_S unless it renews it; the coordinator's
timer task ends the leases that ran out. The group's records in `__consumer_offsets` are the type's
own (one record per group, key type LEASE_RECORD, the holders as JSON): a restart finds the group
and its holders, whose leases start again. A lease group has no committed offsets: OffsetCommit,
OffsetFetch and OffsetDelete are answered GROUP_ID_NOT_FOUND, as for a group of no kind they know;
DeleteGroups deletes it once no one holds a lease (NON_EMPTY_GROUP before).
"""

from __future__ import annotations

import json
import struct
from typing import Callable, Iterable

from minibroker.groups.api import Group
from minibroker.groups.registry import DEFAULT_GROUP_TYPES
from minibroker.groups.runtime import ShardRuntime
from minibroker.groups.types import GroupType
from minibroker.protocol.errors import ErrorCode
from minibroker.storage.offsets_store import OffsetAndMetadata

LEASE = "lease"
LEASE_RECORD = 1000  # the key type of a lease group's record
LEASE_S = 5.0

_KEY = struct.Struct(">hH")


def lease_key(group_id: str) -> bytes:
    name = group_id.encode()
    return _KEY.pack(LEASE_RECORD, len(name)) + name


class LeaseGroupRecords:
    """The type's records: `groups[group_id]` is the sorted holders of its last record."""

    group_type = LEASE
    record_types = frozenset({LEASE_RECORD})

    def __init__(self) -> None:
        self.groups: dict[str, tuple[str, ...]] = {}

    def clear(self) -> None:
        self.groups.clear()

    def replay(self, record_type: int, key: bytes, value: bytes | None) -> None:
        _, length = _KEY.unpack_from(key)
        group_id = key[_KEY.size:_KEY.size + length].decode()
        if value is None:
            self.groups.pop(group_id, None)
        else:
            self.groups[group_id] = tuple(json.loads(value)["holders"])

    def group_ids(self) -> list[str]:
        return list(self.groups)

    def changes(self, group_id: str, state: tuple[str, ...] | None) -> list[tuple[bytes, bytes | None]]:
        if state is None:
            return [(lease_key(group_id), None)] if group_id in self.groups else []
        if self.groups.get(group_id) == state:
            return []
        return [(lease_key(group_id), json.dumps({"holders": list(state)}).encode())]

    def apply(self, group_id: str, state: tuple[str, ...] | None) -> None:
        if state is None:
            self.groups.pop(group_id, None)
        else:
            self.groups[group_id] = state


class LeaseGroup:
    """A lease group: who holds a lease, until when (monotonic seconds; None until the timers start
    after a restart). It implements minibroker.groups.api.Group."""

    group_type = LEASE
    protocol_type = None

    def __init__(self, group_id: str, now_ms: int, holders: Iterable[str] = ()) -> None:
        self.group_id = group_id
        self.state_timestamp_ms = now_ms
        self.leases: dict[str, float | None] = {holder: None for holder in holders}
        self.dead = False

    @property
    def state_name(self) -> str:
        return "Dead" if self.dead else "Stable" if self.leases else "Empty"

    def holders(self) -> tuple[str, ...]:
        return tuple(sorted(self.leases))

    def is_dead(self) -> bool:
        return self.dead

    def is_empty(self) -> bool:
        return not self.leases

    def validate_offset_commit(self, generation_id: int, member_id: str, instance_id: str | None,
                               api_version: int = 9) -> ErrorCode:
        return ErrorCode.group_id_not_found

    def validate_offset_fetch(self, member_id: str | None, member_epoch: int) -> ErrorCode:
        return ErrorCode.group_id_not_found

    def validate_offset_delete(self) -> ErrorCode:
        return ErrorCode.group_id_not_found

    def validate_delete_group(self) -> ErrorCode:
        return ErrorCode.non_empty_group if self.leases else ErrorCode.none

    def is_subscribed_to_topic(self, topic: str) -> bool:
        return False

    def offset_expiration_base(self) -> Callable[[OffsetAndMetadata], int] | None:
        return None

    def mark_dead(self, now_ms: int) -> None:
        self.dead = True
        self.state_timestamp_ms = now_ms


class LeaseGroupManager:
    """The lease type's requests and timers (a minibroker.groups.types.GroupTypeManager)."""

    def __init__(self, shard: ShardRuntime) -> None:
        self.shard = shard
        self.expired = 0  # leases the timers ended

    def _group(self, group_id: str) -> LeaseGroup | None:
        group = self.shard.groups.get(group_id)
        return group if isinstance(group, LeaseGroup) else None  # its own type, in its own module

    def acquire(self, now: float, now_ms: int, group_id: str, member_id: str) -> ErrorCode:
        """Take or renew `member_id`'s lease on the group (created when there is none)."""
        existing = self.shard.groups.get(group_id)
        if existing is not None and existing.group_type != LEASE:
            return ErrorCode.inconsistent_group_protocol  # one group id, one type
        group = self._group(group_id)
        if group is None:
            group = LeaseGroup(group_id, now_ms)
            self.shard.register(group)
        group.leases[member_id] = self.shard.schedule(group_id, now + LEASE_S)
        self._persist(group, now_ms)
        return ErrorCode.none

    def describe(self, group_id: str) -> tuple[str, tuple[str, ...]] | None:
        group = self._group(group_id)
        return None if group is None else (group.state_name, group.holders())

    def _persist(self, group: LeaseGroup, now_ms: int) -> None:
        self.shard.store.write_group(LEASE, group.group_id, group.holders(), now_ms)

    # -- the group type ------------------------------------------------------------------------------

    def load(self, now_ms: int) -> Iterable[Group]:
        return [LeaseGroup(group_id, now_ms, holders)
                for group_id, holders in self.shard.store.group_records(LEASE).groups.items()]

    def start_timers(self, now: float) -> None:
        for group in list(self.shard.groups.values()):
            if isinstance(group, LeaseGroup):
                for holder, deadline in group.leases.items():
                    if deadline is None:
                        group.leases[holder] = self.shard.schedule(group.group_id, now + LEASE_S)

    def fire_timers(self, group: Group, now: float, now_ms: int) -> None:
        assert isinstance(group, LeaseGroup)
        ended = [holder for holder, deadline in group.leases.items() if deadline is not None and deadline <= now]
        for holder in ended:
            del group.leases[holder]
            self.expired += 1
        if ended:
            self._persist(group, now_ms)

    def parked_deadline(self, group: Group) -> float | None:
        return None

    def close(self, group: Group) -> None:
        pass


LEASE_GROUP_TYPE = GroupType(LEASE, LeaseGroupManager, LeaseGroupRecords)
WITH_LEASE_GROUPS = DEFAULT_GROUP_TYPES.with_type(LEASE_GROUP_TYPE)
