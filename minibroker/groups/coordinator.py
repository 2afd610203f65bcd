"""The group coordinator in the trio shell: what the handlers call (Kafka's
`GroupCoordinatorService` and the part of its `CoordinatorRuntime` this broker needs).

Each request method reads the clocks, runs the request on the pure `GroupCoordinatorShard`
(shard.py), then wakes the requests parked on the groups it answered and, when a deadline now comes
before the time the timer task sleeps until, the timer task. Waiting is the only trio here:

* `wait_for` parks a JoinGroup or a follower's SyncGroup in the purgatory as a `DelayedJoin` /
  `DelayedSync`, completed when its `Pending` is, or at the group's join or sync deadline (Kafka's
  delayed join and the rebalance timeout), when the coordinator ticks;
* `run` is the timer task: it sleeps until the shard's next deadline and ticks (session expiry,
  pending members, the join and sync timeouts, consumer group session and rebalance timeouts, the
  offsets retention check).

A KIP-848 ConsumerGroupHeartbeat never waits: it is answered at once, and a member learns of a new
assignment at its next heartbeat.

The classic and consumer protocols' requests have methods here; any group type's (groups/types.py)
can be reached without one: `manager(group_type)` is the type's manager on the shard, and
`apply(request)` runs `request(now, now_ms)` at the clocks' readings and wakes what it completed, as
every method here does.

Time is the broker's minibroker.clock.BrokerClock (`clock`; a new one by default): its monotonic
seconds are what every deadline is on, and the purgatory and the timer task wait on it, so that
trio's `MockClock(autojump_threshold=0)` drives every timeout of a test and `BrokerClock.advance`
moves this broker's groups alone. `wall_clock_ms`, the wall-clock milliseconds stored with commits
and group states, is the clock's `now_ms` unless given.
"""

from __future__ import annotations

import logging
import math
from typing import TYPE_CHECKING, Any, Callable, Iterable, TypeVar, cast

import trio

from minibroker.groups.api import (
    CLASSIC,
    CONSUMER,
    ConsumerGroupDescription,
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResult,
    Group,
    GroupConfig,
    GroupDescription,
    GroupOverview,
    JoinGroupRequest,
    Pending,
    TopicsImage,
)
from minibroker.clock import BrokerClock
from minibroker.groups.classic_manager import ClassicGroupManager
from minibroker.groups.consumer_manager import ConsumerGroupManager
from minibroker.groups.registry import DEFAULT_GROUP_TYPES
from minibroker.groups.runtime import GroupConfigLookup
from minibroker.groups.shard import GroupCoordinatorShard
from minibroker.groups.types import GroupTypeManager, GroupTypes
from minibroker.purgatory import DelayedOperation, Purgatory
from minibroker.protocol.errors import ErrorCode
from minibroker.storage.errors import InvalidReplicationFactorError, NotEnoughReplicasError
from minibroker.storage.offsets_store import TOPIC, OffsetAndMetadata, OffsetsStore

if TYPE_CHECKING:
    from minibroker.config import BrokerConfig
    from minibroker.replication import Replication
    from minibroker.storage.log import PartitionLog
    from minibroker.storage.manager import LogManager

TopicPartition = tuple[str, int]
T = TypeVar("T")

log = logging.getLogger(__name__)


class DelayedJoin(DelayedOperation):
    """A parked JoinGroup: done when the group completes its join phase (every known member
    rejoined, or the rebalance timeout passed and the coordinator ticked)."""

    def __init__(self, coordinator: GroupCoordinator, pending: Pending, deadline: float) -> None:
        super().__init__(deadline)
        self.coordinator = coordinator
        self.pending = pending

    def try_complete(self) -> bool:
        return self.pending.done and self.force_complete()

    def on_expiration(self) -> None:
        self.coordinator.tick(self.coordinator.clock.monotonic())


class DelayedSync(DelayedJoin):
    """A parked SyncGroup of a follower: done when the leader's assignment arrives, or when the
    group gives up on this generation (a new rebalance, or the sync timeout)."""


class GroupCoordinator:
    def __init__(
        self,
        config: GroupConfig | None = None,
        store: OffsetsStore | None = None,
        *,
        wall_clock_ms: Callable[[], int] | None = None,
        clock: BrokerClock | None = None,
        purgatory: Purgatory | None = None,
        topics: TopicsImage | None = None,
        group_configs: GroupConfigLookup | None = None,
        types: GroupTypes = DEFAULT_GROUP_TYPES,
    ) -> None:
        """`types`: the group types it coordinates (groups/registry.py's by default); `store`, when
        given, must keep the records of each (OffsetsStore(group_records=types.records()))."""
        self.clock = clock if clock is not None else BrokerClock()
        self.wall_clock_ms = wall_clock_ms if wall_clock_ms is not None else self.clock.now_ms
        self.purgatory = purgatory if purgatory is not None else Purgatory("Group", self.clock)
        self.shard = GroupCoordinatorShard(config or GroupConfig(),
                                           store if store is not None else OffsetsStore(group_records=types.records()),
                                           self.wall_clock_ms(), topics, group_configs, types)
        # The managers of the two protocols this coordinator has request methods for.
        self.classic = cast(ClassicGroupManager, self.shard.manager(CLASSIC))
        self.consumer = cast(ConsumerGroupManager, self.shard.manager(CONSUMER))
        self._sleep_target = math.inf  # when the timer task will next wake by itself
        self._on_change: Callable[[], None] | None = None
        # On a cluster (`replicate`): the broker's logs, where this broker's replica of
        # __consumer_offsets-0 is (if it hosts one), its replication, and offsets.commit.timeout.ms.
        self._logs: LogManager | None = None
        self._replication: Replication | None = None
        self.write_timeout_ms = 5000
        self.refused_appends = 0  # appends refused under min.insync.replicas (NOT_ENOUGH_REPLICAS)

    @classmethod
    def open(cls, config: BrokerConfig, logs: LogManager, clock: BrokerClock, *,
             append_transactional: Callable[[PartitionLog, bytes, int], object] | None = None,
             group_configs: GroupConfigLookup | None = None,
             types: GroupTypes = DEFAULT_GROUP_TYPES) -> GroupCoordinator:
        """The coordinator of the groups in `logs`' `__consumer_offsets`; `append_transactional`:
        how TxnOffsetCommit's batches are appended (minibroker.storage.offsets_store.OffsetsStore);
        `group_configs`: each group's own configs (Kafka 4's GROUP resource, minibroker.group_configs);
        `types`: the group types it coordinates."""
        store = OffsetsStore.open(logs, clock.now_ms(), append_transactional=append_transactional,
                                  group_records=types.records())
        return cls(GroupConfig.from_broker(config), store, clock=clock, purgatory=Purgatory("Group", clock),
                   topics=logs, group_configs=group_configs, types=types)

    @property
    def config(self) -> GroupConfig:
        return self.shard.config

    @property
    def store(self) -> OffsetsStore:
        return self.shard.store

    @property
    def groups(self) -> dict[str, Group]:
        return self.shard.groups

    @property
    def rebalances(self) -> int:
        """Completed join phases, for tests and metrics."""
        return self.classic.rebalances

    def manager(self, group_type: str) -> GroupTypeManager:
        """The manager of a group type on the shard (its own requests: see the module docstring)."""
        return self.shard.manager(group_type)

    def apply(self, request: Callable[[float, int], T]) -> T:
        """Run `request(now, now_ms)` on the shard (a group type's request) at the clocks' current
        readings, then wake the requests it completed and the timer task if a deadline moved."""
        try:
            return request(self.clock.monotonic(), self.wall_clock_ms())
        finally:
            self._after()

    # -- on a cluster: the coordinator of __consumer_offsets' leader, its writes acknowledged by the ISR

    def replicate(self, logs: LogManager, replication: Replication, write_timeout_ms: int) -> None:
        """Coordinate only while this broker leads __consumer_offsets-0, and answer a request only
        once what it wrote is replicated to the ISR (`written`), as Kafka's CoordinatorRuntime
        appends with acks=-1 and completes a write when the high watermark passes it."""
        self._logs = logs
        self._replication = replication
        self.write_timeout_ms = write_timeout_ms
        self.store.before_append = self._check_min_isr
        if not self.active():
            self.unload()

    def ensure_topic(self) -> bool:
        """Whether __consumer_offsets exists; if not (its replication factor is more than the
        brokers registered when it was to be made), try to create it again, as Kafka's
        FindCoordinator does."""
        if self._logs is None or self._logs.topic(TOPIC) is not None:
            return True
        try:
            self._logs.create_topic(TOPIC, 1, self.store.topic_configs, self.wall_clock_ms())
        except InvalidReplicationFactorError as exc:
            log.warning("Auto topic creation failed for %s with error 'INVALID_REPLICATION_FACTOR': %s", TOPIC, exc)
            return False
        if self.store.log is None:  # not loaded yet by the replication's announcement
            self.leadership_changed(TOPIC, 0, None)
        return True

    def active(self) -> bool:
        """Whether this broker coordinates the groups now: it leads its replica of
        __consumer_offsets-0 (always, off a cluster)."""
        if self._logs is None:
            return True
        plog = self.store.log
        return plog is not None and not plog.follower

    def _check_min_isr(self) -> None:
        """Before an append (Kafka's acks=-1): refused while the ISR is smaller than the topic's
        min.insync.replicas; nothing is written."""
        plog = self.store.log
        if self._replication is None or plog is None:
            return
        isr = self._replication.isr(TOPIC, 0)
        if len(isr) < plog.config.min_insync_replicas:
            self.refused_appends += 1
            raise NotEnoughReplicasError(
                f"{TOPIC}-0: the ISR {list(isr)} is smaller than min.insync.replicas "
                f"({plog.config.min_insync_replicas})")

    async def written(self, refused_before: int | None = None) -> ErrorCode:
        """Wait until everything appended to __consumer_offsets so far is acknowledged by the ISR
        (the high watermark passes it; at most offsets.commit.timeout.ms), as Kafka's coordinator
        completes a write, or a request that wrote nothing, only when the last written offset is
        committed. NONE; NOT_COORDINATOR when the leadership was lost meanwhile;
        COORDINATOR_NOT_AVAILABLE when it timed out, or when an append of this request (since
        `refused_appends` was `refused_before`) was refused under min.insync.replicas (Kafka's
        mapping of NOT_ENOUGH_REPLICAS and REQUEST_TIMED_OUT in GroupCoordinatorService)."""
        if refused_before is not None and self.refused_appends != refused_before:
            return ErrorCode.coordinator_not_available
        plog = self.store.log
        if self._replication is None or plog is None:
            return ErrorCode.none
        if plog.follower:
            return ErrorCode.not_coordinator
        end = plog.log_end_offset
        if plog.high_watermark >= end:
            return ErrorCode.none
        code = await self._replication.wait_written((TOPIC, 0), end, self.write_timeout_ms)
        if code in (ErrorCode.none, ErrorCode.not_enough_replicas_after_append):
            return ErrorCode.none  # the high watermark passed it
        if code == ErrorCode.not_leader_or_follower:
            return ErrorCode.not_coordinator
        return ErrorCode.coordinator_not_available

    def leadership_changed(self, topic: str, partition: int, registration: Any) -> None:
        """A replication listener (minibroker.replication): this broker came to lead
        __consumer_offsets-0 (load its groups), or stopped leading it (unload them)."""
        if topic != TOPIC or partition != 0 or self._logs is None:
            return
        if self.store.log is None:
            self.store.log = self._logs.log(TOPIC, 0)  # created, or hosted, since
        if self.active():
            plog = self.store.log
            log.info("%s-%d: leading it in epoch %s: loading the groups", topic, partition,
                     plog.leader_epoch if plog is not None else None)
            self.reload()
        elif self.shard.groups:
            log.info("%s-%d: no longer its leader: unloading the groups", topic, partition)
            self.unload()

    def reload(self) -> None:
        """This broker became the leader of __consumer_offsets (a coordinator move): answer what is
        parked, then rebuild every group from the replica of the log, as Kafka's coordinator loads
        its partition on election; the loaded members' sessions start now."""
        if self._logs is not None:
            self.store.log = self._logs.log(TOPIC, 0)  # a replica added since (a reassignment)
        self.unload()
        self.store.load()
        self.shard._load(self.wall_clock_ms())
        self.shard.start_timers(self.clock.monotonic())
        self._after()

    def unload(self) -> None:
        """This broker no longer coordinates the groups (Kafka's unload on resignation): what is
        parked is answered, the groups and their timers go; the store stays until the next load."""
        self.shard.close()
        self._after(notify=False)
        self.shard.groups.clear()
        self.shard._timers.clear()

    def close(self) -> None:
        """Answer every parked request (the broker is going away)."""
        self.shard.close()
        self._after(notify=False)

    def _after(self, notify: bool = True) -> None:
        """Wake the requests whose results are ready, and the timer task if a deadline now comes
        before the time it sleeps until."""
        for group_id in self.shard.take_woken():
            self.purgatory.check_and_complete(group_id)
        if notify and self._on_change is not None:
            deadline = self.shard.next_deadline()
            if deadline is not None and deadline < self._sleep_target:
                self._on_change()

    # -- the classic group protocol -------------------------------------------------------------

    def join_group(
        self,
        now: float,
        *,
        group_id: str,
        member_id: str,
        group_instance_id: str | None,
        client_id: str,
        client_host: str,
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        protocol_type: str,
        protocols: list[tuple[str, bytes]],
        require_known_member_id: bool,
        supports_skip_assignment: bool = False,
        reason: str | None = None,
    ) -> Pending:
        """Handle a JoinGroup; the Pending completes when the join phase does (`wait_for`)."""
        request = JoinGroupRequest(group_id, member_id, group_instance_id, client_id, client_host,
                                   session_timeout_ms, rebalance_timeout_ms, protocol_type, list(protocols),
                                   require_known_member_id, supports_skip_assignment, reason)
        try:
            return self.classic.join_group(now, self.wall_clock_ms(), request)
        finally:
            self._after()

    def sync_group(
        self,
        now: float,
        *,
        group_id: str,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        protocol_type: str | None,
        protocol_name: str | None,
        assignments: dict[str, bytes],
    ) -> Pending:
        try:
            return self.classic.sync_group(
                now, self.wall_clock_ms(), group_id=group_id, generation_id=generation_id,
                member_id=member_id, group_instance_id=group_instance_id, protocol_type=protocol_type,
                protocol_name=protocol_name, assignments=assignments)
        finally:
            self._after()

    def heartbeat(self, now: float, *, group_id: str, generation_id: int, member_id: str,
                  group_instance_id: str | None = None) -> ErrorCode:
        try:
            return self.classic.heartbeat(now, group_id=group_id, generation_id=generation_id,
                                                member_id=member_id, group_instance_id=group_instance_id)
        finally:
            self._after()

    def leave_group(self, now: float, group_id: str,
                    members: list[tuple[str, str | None]]) -> tuple[ErrorCode, list[ErrorCode]]:
        """(top-level error, one error per (member_id, group_instance_id) leaving)."""
        try:
            return self.classic.leave_group(now, self.wall_clock_ms(), group_id, members)
        finally:
            self._after()

    def describe_group(self, group_id: str) -> GroupDescription | None:
        """DescribeGroups' view of a classic group; None when there is none (no group, or a group
        of another type: `group_type` tells which)."""
        return self.classic.describe_group(group_id)

    def group_type(self, group_id: str) -> str | None:
        """"classic" or "consumer" (ListGroups' type), None for an unknown group."""
        group = self.shard.groups.get(group_id)
        return None if group is None or group.is_dead() else group.group_type

    # -- the consumer group protocol (KIP-848) ----------------------------------------------------

    def consumer_group_heartbeat(self, now: float, request: ConsumerGroupHeartbeatRequest
                                 ) -> ConsumerGroupHeartbeatResult:
        try:
            return self.consumer.heartbeat(now, self.wall_clock_ms(), request)
        finally:
            self._after()

    def consumer_group_describe(self, group_ids: Iterable[str]) -> list[ConsumerGroupDescription]:
        return self.consumer.describe(group_ids)

    # -- offsets ----------------------------------------------------------------------------------

    def commit_offsets(
        self,
        now: float,
        *,
        group_id: str,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        offsets: dict[TopicPartition, tuple[int, int, str | None]],
        retention_ms: int = -1,
        version: int = 8,
    ) -> dict[TopicPartition, ErrorCode]:
        """Store (offset, leader_epoch, metadata) per partition; returns an error per partition.
        The caller has already answered partitions of unknown topics."""
        try:
            return self.shard.offsets.commit_offsets(
                self.wall_clock_ms(), group_id=group_id, generation_id=generation_id, member_id=member_id,
                group_instance_id=group_instance_id, offsets=offsets, retention_ms=retention_ms,
                version=version)
        finally:
            self._after()

    def validate_offset_fetch(self, group_id: str, member_id: str | None, member_epoch: int) -> ErrorCode:
        """OffsetFetch v9+ names the fetching member: a consumer group checks its epoch."""
        return self.shard.offsets.validate_offset_fetch(group_id, member_id, member_epoch)

    def commit_transactional_offsets(
        self,
        *,
        group_id: str,
        producer_id: int,
        producer_epoch: int,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        offsets: dict[TopicPartition, tuple[int, int, str | None]],
    ) -> dict[TopicPartition, ErrorCode]:
        """TxnOffsetCommit: pending offsets for the producer's transaction (see offsets.py)."""
        try:
            return self.shard.offsets.commit_transactional_offsets(
                self.wall_clock_ms(), group_id=group_id, producer_id=producer_id,
                producer_epoch=producer_epoch, generation_id=generation_id, member_id=member_id,
                group_instance_id=group_instance_id, offsets=offsets)
        finally:
            self._after()

    def complete_transaction(self, producer_id: int, commit: bool) -> int:
        """Called once the transaction's marker is written to the offsets partition."""
        return self.shard.offsets.complete_transaction(producer_id, commit)

    def has_pending_offsets(self, group_id: str, partitions: list[TopicPartition] | None = None) -> bool:
        """Whether an open transaction holds offsets of the group (OffsetFetch's require_stable)."""
        return self.shard.offsets.has_pending(group_id, partitions)

    def fetch_offsets(self, group_id: str, partitions: list[TopicPartition] | None
                      ) -> list[tuple[TopicPartition, OffsetAndMetadata | None]]:
        """Committed offsets of `partitions` (None: every partition the group has offsets for)."""
        return self.shard.offsets.fetch_offsets(group_id, partitions)

    def delete_offsets(self, group_id: str, topics: dict[str, list[int]]
                       ) -> tuple[ErrorCode, dict[TopicPartition, ErrorCode]]:
        """OffsetDelete: (group error, error per partition)."""
        try:
            return self.shard.offsets.delete_offsets(self.wall_clock_ms(), group_id, topics)
        finally:
            self._after()

    def forget_topic(self, topic: str, now_ms: int) -> int:
        """A deleted topic's committed offsets go with it; returns how many."""
        return self.shard.offsets.forget_topic(topic, now_ms)

    def expire_offsets(self, now_ms: int) -> int:
        """KIP-211 retention now; returns how many offsets expired."""
        return self.shard.offsets.expire_offsets(now_ms)

    # -- ListGroups / DeleteGroups ----------------------------------------------------------------

    def list_groups(self, states_filter: Iterable[str] = (), types_filter: Iterable[str] = ()
                    ) -> list[GroupOverview]:
        return self.shard.list_groups(states_filter, types_filter)

    def delete_groups(self, now: float, group_ids: Iterable[str]) -> dict[str, ErrorCode]:
        try:
            return self.shard.delete_groups(self.wall_clock_ms(), group_ids)
        finally:
            self._after()

    # -- time -------------------------------------------------------------------------------------

    def tick(self, now: float) -> None:
        """Fire every timer due at `now` (monotonic seconds)."""
        self.shard.tick(now, self.wall_clock_ms())
        self._after()

    def next_deadline(self) -> float | None:
        """The earliest time a tick may have something to do (possibly a little early)."""
        return self.shard.next_deadline()

    async def wait_for(self, pending: Pending, group_id: str, kind: type[DelayedJoin] = DelayedJoin) -> Any:
        """Park a request in the purgatory until its Pending completes; returns the result."""
        while not pending.done:
            now = self.clock.monotonic()
            self.tick(now)
            if pending.done:
                break
            deadline = self.shard.parked_deadline(group_id)
            await self.purgatory.wait(kind(self, pending, now + 1.0 if deadline is None else deadline),
                                      (group_id,))
        return pending.result

    async def run(self) -> None:
        """Fire timers at their deadlines until cancelled (started next to the broker's other
        background work)."""
        wake = trio.Event()

        def changed() -> None:
            wake.set()

        self._on_change = changed
        self.shard.start_timers(self.clock.monotonic())
        try:
            while True:
                deadline = self.shard.next_deadline()
                self._sleep_target = deadline if deadline is not None else math.inf
                with self.clock.move_on_at(self._sleep_target):
                    await wake.wait()
                wake = trio.Event()
                self._sleep_target = -math.inf  # ticking: new deadlines are seen below
                self.shard.tick(self.clock.monotonic(), self.wall_clock_ms())
                self._after(notify=False)
        finally:
            self._on_change = None
            self._sleep_target = math.inf
