"""What a group type's manager may use of the shard that holds its groups (shard.py implements it):
the registry of groups (every type's: a group id is one type at a time), the timer heap, the
wake-ups of parked requests, the offsets store, the configuration and the topics. The managers are
given this, not the shard itself, so the shard can import them without an import circle.

Pure: no trio, no clock.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from minibroker.groups.api import Group, GroupConfig, TopicsImage
    from minibroker.storage.offsets_store import OffsetsStore

__all__ = ["GroupConfigLookup", "ShardRuntime"]


class GroupConfigLookup(Protocol):
    """A group's own value of a group config (Kafka 4's GROUP resource, minibroker.group_configs)."""

    def value(self, group_id: str, name: str) -> int: ...


class ShardRuntime(Protocol):
    config: GroupConfig
    store: OffsetsStore
    topics: TopicsImage
    groups: dict[str, Group]  # every group, whatever its type
    group_configs: GroupConfigLookup | None

    def schedule(self, group_id: str, deadline: float) -> float:
        """Make sure the group's timers are looked at by `deadline`; returns the deadline."""
        ...

    def wake(self, group_id: str) -> None:
        """A request parked on the group has its answer."""
        ...

    def register(self, group: Group) -> None:
        """The group joins the registry (a group id is one type at a time: it replaces any other)."""
        ...

    def remove_group(self, group_id: str, now_ms: int) -> None:
        """The group is gone: Dead, its records and offsets tombstoned, out of the registry."""
        ...

    def drop_group_records(self, group_id: str, now_ms: int) -> None:
        """An Empty group that becomes a group of another type: Dead and out of the registry, its
        type's records tombstoned; its committed offsets stay (Kafka's online migration)."""
        ...

    def create_simple_group(self, group_id: str, now_ms: int) -> Group:
        """The group an offset commit creates when there is none (GroupTypes.simple), registered."""
        ...
