"""The group coordinator's state and decisions, without I/O of trio's or a clock (Kafka's
`GroupCoordinatorShard`, one per `__consumer_offsets` partition; this broker has one partition and
coordinates every group).

The shard owns what every group type shares: the registry of groups (`groups`), the timer heap
(`schedule`; a tick visits only the groups with something due), the wake-ups of parked requests
(`wake` / `take_woken`), the offsets store, loading at start-up, ListGroups, DeleteGroups and the
offsets retention check. Requests go to the manager of their kind:

    classic   ClassicGroupManager (classic_manager.py): JoinGroup, SyncGroup, Heartbeat,
              LeaveGroup, DescribeGroups, and the timeouts of classic groups
    consumer  ConsumerGroupManager (consumer_manager.py): ConsumerGroupHeartbeat,
              ConsumerGroupDescribe, and the timeouts of KIP-848 consumer groups
    offsets   OffsetMetadataManager (offsets.py): OffsetCommit, OffsetFetch, OffsetDelete, expiry

Both types share the registry (a group id is one type at a time); offsets, listing and deletion go
through the Group interface. Consumer groups resolve their subscriptions against `topics` (the
broker's LogManager; a TopicsImage).

Every method takes `now` (monotonic seconds, what deadlines are on) and/or `now_ms` (wall-clock
milliseconds, what is stored). The trio shell (coordinator.py) reads the clocks, calls in, and after
each call wakes the requests `take_woken` names and its timer task when `next_deadline` moved earlier.
"""

from __future__ import annotations

import heapq
import logging
from typing import Iterable

from minibroker.groups.api import Group, GroupConfig, GroupOverview, NoTopics, TopicsImage
from minibroker.groups.classic_group import ClassicGroup
from minibroker.groups.classic_manager import ClassicGroupManager
from minibroker.groups.consumer_group import ConsumerGroup
from minibroker.groups.consumer_manager import ConsumerGroupManager
from minibroker.groups.offsets import OffsetMetadataManager
from minibroker.groups.runtime import GroupConfigLookup
from minibroker.protocol.errors import ErrorCode
from minibroker.storage.errors import storage_error_message
from minibroker.storage.offsets_store import TOPIC, OffsetsStore

log = logging.getLogger(__name__)


class GroupCoordinatorShard:
    def __init__(self, config: GroupConfig, store: OffsetsStore, now_ms: int,
                 topics: TopicsImage | None = None, group_configs: GroupConfigLookup | None = None) -> None:
        self.config = config
        self.store = store
        # Per-group overrides of the group.consumer.* settings (minibroker.group_configs); None: the
        # GroupConfig's values for every group.
        self.group_configs = group_configs
        self.topics: TopicsImage = topics if topics is not None else NoTopics()
        # Every group, whatever its type.
        self.groups: dict[str, ClassicGroup | ConsumerGroup] = {}
        # Every deadline set on a group or member is also pushed here, so a tick visits only the
        # groups with something due (an entry whose deadline moved later just finds nothing).
        self._timers: list[tuple[float, str]] = []
        self._woken: set[str] = set()
        self._next_retention_check: float | None = None
        self.classic = ClassicGroupManager(self)
        self.consumer = ConsumerGroupManager(self)
        self.offsets = OffsetMetadataManager(self)
        self._load(now_ms)

    def _load(self, now_ms: int) -> None:
        """Rebuild the groups from the store (Kafka replays __consumer_offsets the same way): consumer
        groups from their records (their members' sessions start with the timers), classic groups
        from GroupMetadata records, and simple groups from offsets alone."""
        for group_id, stored in self.store.consumer_groups.items():
            if group_id in self.store.groups:
                # Both types' records: only a damaged log holds that (a conversion writes the
                # classic tombstone in the batch that creates the consumer group).
                log.warning("group %s has both classic and consumer group records; loading the consumer "
                            "group", group_id)
            self.groups[group_id] = ConsumerGroup.from_stored(group_id, stored, now_ms)
        for group_id in (set(self.store.groups) | set(self.store.offsets)) - set(self.groups):
            self.groups[group_id] = ClassicGroup.from_record(group_id, self.store.groups.get(group_id), now_ms)

    def close(self) -> None:
        """Answer every parked request (the broker is going away)."""
        for group in self.groups.values():
            if isinstance(group, ClassicGroup):
                self.classic.close(group)

    # -- the registry -----------------------------------------------------------------------------

    def create_classic_group(self, group_id: str, now_ms: int) -> ClassicGroup:
        group = self.groups[group_id] = ClassicGroup(group_id, now_ms)
        return group

    def remove_group(self, group_id: str, now_ms: int) -> None:
        """The group is gone: Dead, its records tombstoned, out of the registry."""
        self.groups[group_id].mark_dead(now_ms)
        self.store.delete_group(group_id, now_ms)
        del self.groups[group_id]

    def classic_group(self, group_id: str) -> ClassicGroup | None:
        group = self.groups.get(group_id)
        return group if isinstance(group, ClassicGroup) else None

    def drop_empty_consumer_group(self, group_id: str, now_ms: int) -> None:
        """An Empty consumer group a classic JoinGroup turns into a classic group (Kafka's
        maybeDeleteEmptyConsumerGroup): its records are tombstoned, its offsets stay."""
        group = self.groups.pop(group_id)
        group.mark_dead(now_ms)
        try:
            self.store.store_consumer_group(group_id, None, now_ms)
        except OSError as exc:
            log.error("group %s: tombstoning the consumer group's records failed: %s", group_id,
                      storage_error_message(exc))
        log.info("group %s: the Empty consumer group becomes a classic group (its offsets stay)", group_id)

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
        """What the timer task does first: the retention checks, and the sessions of the consumer
        group members loaded at start-up."""
        self.start_retention_checks(now)
        self.consumer.start_sessions(now)

    def tick(self, now: float, now_ms: int) -> None:
        """Fire every timer due at `now`: join and sync timeouts, session expiries, pending member
        expiries, consumer group session and rebalance timeouts, and the offsets retention check."""
        self.consumer.start_sessions(now)
        due: set[str] = set()
        while self._timers and self._timers[0][0] <= now:
            due.add(heapq.heappop(self._timers)[1])
        for group_id in sorted(due):
            group = self.groups.get(group_id)
            if isinstance(group, ConsumerGroup):
                self.consumer.fire_timers(group, now, now_ms)
            elif group is not None:
                self.classic.fire_timers(group, now, now_ms)
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
        groups: list[Group] = sorted(self.groups.values(), key=lambda g: g.group_id)
        return [
            GroupOverview(g.group_id, g.protocol_type or "", g.state_name, g.group_type)
            for g in groups
            if not g.is_dead() and (not states or g.state_name.lower() in states)
            and (not types or g.group_type in types)
        ]

    def delete_groups(self, now_ms: int, group_ids: Iterable[str]) -> dict[str, ErrorCode]:
        results: dict[str, ErrorCode] = {}
        for group_id in group_ids:
            group: Group | None = self.groups.get(group_id)
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
