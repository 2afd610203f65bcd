"""Group types: what the shard needs of each, and the registry the coordinator is built with.

Kafka's coordinator knows several group types (classic, KIP-848 consumer, KIP-932 share, streams),
one type per group id. Here each type is a `GroupType`: its name (ListGroups' type), its records in
`__consumer_offsets` (a storage.offsets_store.GroupRecords: the record key types it owns, their
replay, the records a change writes) and its manager, built on the shard (`ShardRuntime`), which
answers the type's own requests (JoinGroup... for classic groups, ConsumerGroupHeartbeat for consumer
groups) and does for the shard what every type must:

    load            its groups, from its records, at start-up
    start_timers    the timers of groups it loaded (the timer task starts them)
    fire_timers     a group of its type has a deadline due
    parked_deadline when a request parked on one of its groups must be looked at again
    close           answer the requests parked on a group: the coordinator is going away

Listing, describing for ListGroups, deleting and committed offsets go through the `Group` interface
(groups/api.py) every type's groups implement: a type without committed offsets of the classic kind
(a share group) answers the offset validations with its own error. A new type is new files: its
group, its manager, its records (in storage/ or beside them), its handlers, and an entry in the
registry (`GroupTypes.with_type`, or groups/registry.py's default). The coordinator's type-agnostic
parts (the shard's timers, loading, ListGroups, DeleteGroups, offsets) find a group's type by
`group.group_type`, never by its class.

Pure: no trio, no clock.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Iterable, Protocol

if TYPE_CHECKING:
    from minibroker.groups.api import Group
    from minibroker.groups.runtime import ShardRuntime
    from minibroker.storage.offsets_store import GroupRecords

__all__ = ["GroupType", "GroupTypeManager", "GroupTypes", "SimpleGroupManager"]


class GroupTypeManager(Protocol):
    """One group type's requests and timers, on the groups of that type a shard holds."""

    def load(self, now_ms: int) -> Iterable[Group]:
        """Its groups as a restart finds them, from its records in the shard's store."""
        ...

    def start_timers(self, now: float) -> None:
        """Start the timers of groups loaded at start-up (called when the timer task starts and at
        every tick; a group's are started once)."""
        ...

    def fire_timers(self, group: Group, now: float, now_ms: int) -> None:
        """A deadline the type scheduled on `group` (ShardRuntime.schedule) may be due at `now`."""
        ...

    def parked_deadline(self, group: Group) -> float | None:
        """When a request parked on the group (GroupCoordinator.wait_for) must be looked at again;
        None when none can be parked."""
        ...

    def close(self, group: Group) -> None:
        """Answer every request parked on the group: the coordinator is going away."""
        ...


class SimpleGroupManager(GroupTypeManager, Protocol):
    """The manager of the type of simple groups (GroupTypes.simple) also creates them."""

    def create_group(self, group_id: str, now_ms: int) -> Group:
        """A new Empty group, not yet registered, as an OffsetCommit creates one."""
        ...


@dataclass(frozen=True)
class GroupType:
    name: str  # ListGroups v5's type: "classic", "consumer", ...
    manager: Callable[[ShardRuntime], GroupTypeManager]
    records: Callable[[], GroupRecords]  # a new, empty GroupRecords of the type


@dataclass(frozen=True)
class GroupTypes:
    """The group types one coordinator knows, in load order (where a damaged log holds records of
    two types for one group id, the later type's group is loaded), and the type of the group an
    OffsetCommit creates when there is none (a "simple" group of assign() consumers: classic)."""

    types: tuple[GroupType, ...]
    simple: str

    def __post_init__(self) -> None:
        names = [t.name for t in self.types]
        assert len(set(names)) == len(names), f"a group type is registered twice: {names}"
        assert self.simple in names, f"the simple groups' type {self.simple} is not registered"

    def with_type(self, group_type: GroupType) -> GroupTypes:
        """These types and one more (loaded last)."""
        return GroupTypes((*self.types, group_type), self.simple)

    def records(self) -> list[GroupRecords]:
        """A new GroupRecords of every type, for an offsets store."""
        return [t.records() for t in self.types]
