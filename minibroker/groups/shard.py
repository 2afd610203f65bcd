"""The group coordinator's state and decisions, without I/O of trio's or a clock (Kafka's
`GroupCoordinatorShard`, one per `__consumer_offsets` partition; this broker has one partition and
coordinates every group).

The shard owns what every group type shares: the registry of groups (`groups`, one type per group
id), the timer heap (`schedule`; a tick visits only the groups with something due), the wake-ups of
parked requests (`wake` / `take_woken`), the offsets store, loading at start-up, ListGroups,
DeleteGroups and the offsets retention check. Each group type (groups/types.py: classic and KIP-848
consumer groups by default, groups/registry.py) has a manager, in `managers` by type name, which
answers the type's own requests and fires its groups' timers:

    classic   ClassicGroupManager (classic_manager.py): JoinGroup, SyncGroup, Heartbeat,
              LeaveGroup, DescribeGroups, and the timeouts of classic groups
    consumer  ConsumerGroupManager (consumer_manager.py): ConsumerGroupHeartbeat,
              ConsumerGroupDescribe, and the timeouts of KIP-848 consumer groups
    offsets   OffsetMetadataManager (offsets.py): OffsetCommit, OffsetFetch, OffsetDelete, expiry
              (of any type's groups, through the Group interface)

A group's type is `group.group_type`: the shard dispatches on it, never on a group's class.
Consumer groups resolve their subscriptions against `topics` (the broker's LogManager; a
TopicsImage).

Every method takes `now` (monotonic seconds, what deadlines are on) and/or `now_ms` (wall-clock
milliseconds, what is stored). The trio shell (coordinator.py) reads the clocks, calls in, and after
each call wakes the requests `take_woken` names and its timer task when `next_deadline` moved earlier.
"""

from __future__ import annotations

import heapq
import logging
from typing import Iterable, cast

from minibroker.groups.api import Group, GroupConfig, GroupOverview, NoTopics, TopicsImage
from minibroker.groups.offsets import OffsetMetadataManager
from minibroker.groups.registry import DEFAULT_GROUP_TYPES
from minibroker.groups.runtime import GroupConfigLookup
from minibroker.groups.types import GroupTypeManager, GroupTypes, SimpleGroupManager
from minibroker.protocol.errors import ErrorCode
from minibroker.storage.errors import storage_error_message
from minibroker.storage.offsets_store import TOPIC, OffsetsStore

log = logging.getLogger(__name__)


class GroupCoordinatorShard:
    def __init__(self, config: GroupConfig, store: OffsetsStore, now_ms: int,
                 topics: TopicsImage | None = None, group_configs: GroupConfigLookup | None = None,
                 types: GroupTypes = DEFAULT_GROUP_TYPES) -> None:
        """`group_configs`: per-group overrides of group configs; `types`: the group types it knows;
        `store` must hold each one's records (an OffsetsStore made with `types.records()`)."""
        self.config = config
        self.store = store
        # Per-group overrides of the group.consumer.* settings (minibroker.group_configs); None: the
        # GroupConfig's values for every group.
        self.group_configs = group_configs
        self.topics: TopicsImage = topics if topics is not None else NoTopics()
        self.types = types
        missing = [t.name for t in types.types if t.name not in store.records]
        if missing:
            raise ValueError(f"the offsets store keeps no records of group type(s) {', '.join(missing)}")
        # Every group, whatever its type.
        self.groups: dict[str, Group] = {}
        # Every deadline set on a group or member is also pushed here, so a tick visits only the
        # groups with something due (an entry whose deadline moved later just finds nothing).
        self._timers: list[tuple[float, str]] = []
        self._woken: set[str] = set()
        self._next_retention_check: float | None = None
        self.managers: dict[str, GroupTypeManager] = {t.name: t.manager(self) for t in types.types}
        self.offsets = OffsetMetadataManager(self)
        self._load(now_ms)

    def manager(self, group_type: str) -> GroupTypeManager:
        """The manager of a group type (KeyError for a type this shard does not know)."""
        return self.managers[group_type]

    def _load(self, now_ms: int) -> None:
        """Rebuild the groups from the store (Kafka replays __consumer_offsets the same way): each
        type's groups from its records, in the registry's order, and simple groups from offsets
        alone."""
        for name, manager in self.managers.items():
            for group in manager.load(now_ms):
                other = self.groups.get(group.group_id)
                if other is not None:
                    # Two types' records for one id: only a damaged log holds that (a conversion
                    # tombstones the old type's records in the batch that creates the new group).
                    log.warning("group %s has both %s and %s group records; loading the %s group",
                                group.group_id, other.group_type, name, name)
                self.groups[group.group_id] = group
        for group_id in sorted(set(self.store.offsets) - set(self.groups)):
            self.groups[group_id] = self._simple_groups().create_group(group_id, now_ms)

    def close(self) -> None:
        """Answer every parked request (the broker is going away)."""
        for group in self.groups.values():
            self.managers[group.group_type].close(group)

    # -- the registry -----------------------------------------------------------------------------

    def _simple_groups(self) -> SimpleGroupManager:
        return cast(SimpleGroupManager, self.managers[self.types.simple])

    def register(self, group: Group) -> None:
        self.groups[group.group_id] = group

    def create_simple_group(self, group_id: str, now_ms: int) -> Group:
        group = self.groups[group_id] = self._simple_groups().create_group(group_id, now_ms)
        return group

    def remove_group(self, group_id: str, now_ms: int) -> None:
        """The group is gone: Dead, its records tombstoned, out of the registry."""
        self.groups[group_id].mark_dead(now_ms)
        self.store.delete_group(group_id, now_ms)
        del self.groups[group_id]

    def drop_group_records(self, group_id: str, now_ms: int) -> None:
        """An Empty group that a request of another type's protocol turns into a group of that type
        (Kafka's online migration, e.g. maybeDeleteEmptyConsumerGroup): out of the registry, its
        records tombstoned; its offsets stay."""
        group = self.groups.pop(group_id)
        group.mark_dead(now_ms)
        try:
            self.store.write_group(group.group_type, group_id, None, now_ms)
        except OSError as exc:
            log.error("group %s: tombstoning the %s group's records failed: %s", group_id, group.group_type,
                      storage_error_message(exc))

    # -- timers and wake-ups ----------------------------------------------------------------------

    def schedule(self, group_id: str, deadline: float) -> float:
        """Make sure the group's timers are looked at by `deadline`; returns the deadline."""
        heapq.heappush(self._timers, (deadline, group_id))
        return deadline

    def wake(self, group_id: str) -> None:
        """A request parked on the group has its answer."""
        self._woken.add(group_id)

    def take_woken(self) -> set[str]:
        woken, self._woken = self._woken, set()
        return woken

    def next_deadline(self) -> float | None:
        """The earliest time a tick may have something to do (possibly a little early)."""
        deadlines = [self._timers[0][0]] if self._timers else []
        if self._next_retention_check is not None:
            deadlines.append(self._next_retention_check)
        return min(deadlines, default=None)

    def start_retention_checks(self, now: float) -> None:
        if self._next_retention_check is None:
            self._next_retention_check = now + self.config.offsets_retention_check_interval_ms / 1000

    def start_timers(self, now: float) -> None:
        """What the timer task does first: the retention checks, and the timers of the groups
        loaded at start-up (the sessions of consumer group members, ...)."""
        self.start_retention_checks(now)
        for manager in self.managers.values():
            manager.start_timers(now)

    def parked_deadline(self, group_id: str) -> float | None:
        """When a request parked on the group must be looked at again (its type says)."""
        group = self.groups.get(group_id)
        return None if group is None else self.managers[group.group_type].parked_deadline(group)

    def tick(self, now: float, now_ms: int) -> None:
        """Fire every timer due at `now` (each group's type fires its own: join and sync timeouts,
        session expiries, ...), and the offsets retention check."""
        for manager in self.managers.values():
            manager.start_timers(now)
        due: set[str] = set()
        while self._timers and self._timers[0][0] <= now:
            due.add(heapq.heappop(self._timers)[1])
        for group_id in sorted(due):
            group = self.groups.get(group_id)
            if group is not None:
                self.managers[group.group_type].fire_timers(group, now, now_ms)
        if self._next_retention_check is None:
            self.start_retention_checks(now)
        elif now >= self._next_retention_check:
            self._next_retention_check = now + self.config.offsets_retention_check_interval_ms / 1000
            try:
                self.offsets.expire_offsets(now_ms)
            except OSError as exc:  # tried again at the next check
                log.error("%s: offset expiry failed: %s", TOPIC, storage_error_message(exc))

    # -- ListGroups / DeleteGroups ----------------------------------------------------------------

    def list_groups(self, states_filter: Iterable[str] = (), types_filter: Iterable[str] = ()
                    ) -> list[GroupOverview]:
        states = {s.lower() for s in states_filter}
        types = {t.lower() for t in types_filter}
        groups = sorted(self.groups.values(), key=lambda g: g.group_id)
        return [
            GroupOverview(g.group_id, g.protocol_type or "", g.state_name, g.group_type)
            for g in groups
            if not g.is_dead() and (not states or g.state_name.lower() in states)
            and (not types or g.group_type in types)
        ]

    def delete_groups(self, now_ms: int, group_ids: Iterable[str]) -> dict[str, ErrorCode]:
        results: dict[str, ErrorCode] = {}
        for group_id in group_ids:
            group = self.groups.get(group_id)
            if not group_id:
                results[group_id] = ErrorCode.invalid_group_id
            elif group is None or group.is_dead():
                results[group_id] = ErrorCode.group_id_not_found
            elif error := group.validate_delete_group():
                results[group_id] = error
            else:
                self.remove_group(group_id, now_ms)
                log.info("group %s: deleted", group_id)
                results[group_id] = ErrorCode.none
        return results
