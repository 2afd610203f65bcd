"""The group coordinator: Kafka's classic group protocol (JoinGroup/SyncGroup/Heartbeat/LeaveGroup)
and committed offsets, for every group (this broker coordinates them all).

It follows Apache Kafka's `GroupMetadataManager` / `ClassicGroup` / `ClassicGroupMember` (the
group-coordinator module, late-2024 trunk), including its state machine:

    Empty --join--> PreparingRebalance --all joined / rebalance timeout--> CompletingRebalance
    CompletingRebalance --leader's SyncGroup--> Stable
    Stable / CompletingRebalance --join with new metadata, leader join, leave, member expiry-->
        PreparingRebalance
    PreparingRebalance --every member gone when the join completes--> Empty
    any --deleted or all offsets expired--> Dead

Behaviour kept from Kafka: KIP-394 member ids (JoinGroup v4+ without a member id gets
MEMBER_ID_REQUIRED and a pending member id, which expires after the session timeout unless it
rejoins); the initial rebalance delay for the first join into an Empty group, extended while new
members keep arriving, up to the rebalance timeout; the join completing as soon as every known
member has rejoined and no pending member is outstanding, else at the rebalance timeout, dropping
the dynamic members that did not rejoin; a new leader chosen among the rejoined members; protocol
selection by vote among the protocols every member supports; followers' SyncGroup parked until the
leader's assignment arrives, and members that do not sync within the rebalance timeout removed
(Kafka's pending-sync timeout); session-timeout expiry of silent members (a member parked in a
join or sync counts as alive, except a brand-new member, which has 5 minutes); static membership
(group.instance.id): a rejoin with an unknown member id replaces the old member id, fencing it
(FENCED_INSTANCE_ID), and a Stable group whose protocol would not change skips the rebalance.

Offsets: a commit by a member of the current generation, or with generation -1 and no member id
while the group is Empty (a "simple" group of assign() consumers), is stored in `OffsetsStore`
(the `__consumer_offsets` log). Offsets of a group Empty for `offsets.retention.minutes` expire
(KIP-211), as do those of a simple group that long after their commit, on the check interval; a
group left Empty without offsets is then dropped. OffsetDelete removes offsets of topics the group's
consumers do not subscribe to (their subscriptions are read from the consumer protocol metadata at
each generation, as Kafka's computeSubscribedTopics). Not done: expiring offsets of topics a Stable
group no longer subscribes to, group max size, the KIP-848 consumer protocol, and transactional
offset commits.

Shape: the state machine is plain methods that take `now` (trio clock, seconds) and return either a
result or a `Pending` the handler waits on; timers are deadlines on the group and its members (also
kept in a heap, so a tick visits only the groups with something due), fired by `tick(now)`. The trio
side is small: `wait_for` parks a request in the purgatory as a
`DelayedJoin` / `DelayedSync` (completed when its Pending is, or at the group's deadline, when it
ticks), and `run` ticks at the next deadline. Wall-clock milliseconds (stored commit and state
timestamps) come from the injected `wall_clock_ms`.
"""

from __future__ import annotations

import enum
import heapq
import logging
import math
import time
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterable

import trio

from minibroker.purgatory import DelayedOperation, Purgatory
from protocol.errors import ErrorCode
from storage.errors import storage_error_message
from storage.offsets_store import OffsetAndMetadata, OffsetsStore, StoredGroup

if TYPE_CHECKING:
    from minibroker.config import BrokerConfig
    from storage.manager import LogManager

log = logging.getLogger(__name__)


CLASSIC = "classic"  # ListGroups v5 group type
CONSUMER_PROTOCOL_TYPE = "consumer"  # the Java consumer's (and every client's) protocol type
NEW_MEMBER_JOIN_TIMEOUT_MS = 300_000  # Kafka's classicGroupNewMemberJoinTimeoutMs
OFFSET_METADATA_MAX_BYTES = 4096  # Kafka's offset.metadata.max.bytes default


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


EMPTY = GroupState.EMPTY
PREPARING_REBALANCE = GroupState.PREPARING_REBALANCE
COMPLETING_REBALANCE = GroupState.COMPLETING_REBALANCE
STABLE = GroupState.STABLE
DEAD = GroupState.DEAD

# Kafka's ClassicGroupState: the states each state may be entered from.
VALID_PREVIOUS_STATES: dict[GroupState, frozenset[GroupState]] = {
    EMPTY: frozenset({PREPARING_REBALANCE}),
    PREPARING_REBALANCE: frozenset({STABLE, COMPLETING_REBALANCE, EMPTY}),
    COMPLETING_REBALANCE: frozenset({PREPARING_REBALANCE}),
    STABLE: frozenset({COMPLETING_REBALANCE}),
    DEAD: frozenset({STABLE, PREPARING_REBALANCE, COMPLETING_REBALANCE, EMPTY, DEAD}),
}


class IllegalStateTransition(AssertionError):
    """Our bug: the coordinator tried a transition Kafka's state machine does not have."""


@dataclass(frozen=True)
class GroupConfig:
    initial_rebalance_delay_ms: int = 0
    min_session_timeout_ms: int = 1000
    max_session_timeout_ms: int = 1_800_000
    offsets_retention_ms: int = 10080 * 60_000
    offsets_retention_check_interval_ms: int = 600_000
    new_member_join_timeout_ms: int = NEW_MEMBER_JOIN_TIMEOUT_MS
    offset_metadata_max_bytes: int = OFFSET_METADATA_MAX_BYTES

    @classmethod
    def from_broker(cls, config: BrokerConfig) -> GroupConfig:
        return cls(
            initial_rebalance_delay_ms=config["group.initial.rebalance.delay.ms"],
            min_session_timeout_ms=config["group.min.session.timeout.ms"],
            max_session_timeout_ms=config["group.max.session.timeout.ms"],
            offsets_retention_ms=config["offsets.retention.minutes"] * 60_000,
            offsets_retention_check_interval_ms=config["offsets.retention.check.interval.ms"],
        )


# --- results -------------------------------------------------------------------------------------


@dataclass
class JoinResult:
    error: int
    member_id: str = ""
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    members: list[tuple[str, str | None, bytes]] = field(default_factory=list)
    skip_assignment: bool = False


@dataclass
class SyncResult:
    error: int
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


class Pending:
    """A response that a later event (another member's request, a timer) will produce."""

    __slots__ = ("result",)

    def __init__(self, result: Any = None) -> None:
        self.result = result

    @property
    def done(self) -> bool:
        return self.result is not None


@dataclass(frozen=True)
class GroupOverview:
    group_id: str
    protocol_type: str
    state: str
    group_type: str = CLASSIC


@dataclass(frozen=True)
class MemberDescription:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass(frozen=True)
class GroupDescription:
    group_id: str
    state: str
    protocol_type: str
    protocol: str
    members: list[MemberDescription]


# --- members and groups --------------------------------------------------------------------------


@dataclass(eq=False)
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]  # in the member's order of preference
    assignment: bytes = b""
    awaiting_join: Pending | None = None
    awaiting_sync: Pending | None = None
    is_new: bool = False
    heartbeat_deadline: float | None = None  # trio clock; None: no expiry scheduled

    @property
    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]

    def metadata(self, protocol: str | None) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol:
                return metadata
        return b""

    def vote(self, candidates: set[str]) -> str:
        for name, _ in self.protocols:
            if name in candidates:
                return name
        raise AssertionError(f"member {self.member_id} supports none of {candidates}")

    def matches(self, protocols: list[tuple[str, bytes]]) -> bool:
        return self.protocols == protocols

    def has_satisfied_heartbeat(self) -> bool:
        if self.is_new:
            return False  # new members expire even while parked in a join
        return self.awaiting_join is not None or self.awaiting_sync is not None


class ClassicGroup:
    def __init__(self, group_id: str, now_ms: int = -1) -> None:
        self.group_id = group_id
        self.state = EMPTY
        self.previous_state: GroupState | None = None
        self.state_timestamp_ms = now_ms  # wall clock, when the group entered its state
        self.protocol_type: str | None = None
        self.protocol_name: str | None = None
        self.generation_id = 0
        self.leader_id: str | None = None
        self.members: dict[str, Member] = {}  # in join order; the first is the fallback leader
        self.static_members: dict[str, str] = {}  # group.instance.id -> member id
        self.pending_members: dict[str, float] = {}  # KIP-394 member id -> expiry (trio clock)
        self.pending_sync: set[str] = set()
        self.new_member_added = False
        # The join timer: the rebalance timeout, or the (initial) delay of a first rebalance.
        self.join_deadline: float | None = None
        self.join_initial = False
        self.initial_delay_ms = 0
        self.initial_remaining_ms = 0
        self.sync_deadline: float | None = None
        self.sync_generation = -1
        # The topics the members subscribe to, as of the current generation (None: not known).
        self.subscribed_topics: frozenset[str] | None = None

    def __repr__(self) -> str:
        return f"<ClassicGroup {self.group_id} {self.state.value} gen {self.generation_id} {list(self.members)}>"

    def is_(self, *states: GroupState) -> bool:
        return self.state in states

    def transition_to(self, state: GroupState, now_ms: int) -> None:
        if self.state not in VALID_PREVIOUS_STATES[state]:
            raise IllegalStateTransition(
                f"group {self.group_id}: {self.state.value} -> {state.value} is not a valid transition"
            )
        self.previous_state = self.state
        self.state = state
        self.state_timestamp_ms = now_ms

    def can_rebalance(self) -> bool:
        return self.state in VALID_PREVIOUS_STATES[PREPARING_REBALANCE]

    # -- membership -------------------------------------------------------------------------------

    def add(self, member: Member, pending: Pending | None) -> None:
        if member.group_instance_id is not None:
            assert member.group_instance_id not in self.static_members
            self.static_members[member.group_instance_id] = member.member_id
        if not self.members:
            self.protocol_type = member.protocol_type
        assert self.protocol_type == member.protocol_type
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.members[member.member_id] = member
        member.awaiting_join = pending
        self.pending_members.pop(member.member_id, None)

    def remove(self, member_id: str) -> Member | None:
        member = self.members.pop(member_id, None)
        if member is not None and member.group_instance_id is not None:
            self.static_members.pop(member.group_instance_id, None)
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        self.pending_members.pop(member_id, None)
        self.pending_sync.discard(member_id)
        return member

    def replace_static_member(self, instance_id: str, old_id: str, new_id: str) -> Member:
        member = self.members.pop(old_id)
        member.member_id = new_id
        self.members[new_id] = member
        self.static_members[instance_id] = new_id
        if self.leader_id == old_id:
            self.leader_id = new_id
        if old_id in self.pending_sync:
            self.pending_sync.discard(old_id)
            self.pending_sync.add(new_id)
        return member

    def validate_member(self, member_id: str, instance_id: str | None) -> int:
        if instance_id is not None:
            existing = self.static_members.get(instance_id)
            if existing is None:
                return ErrorCode.unknown_member_id
            if existing != member_id:
                return ErrorCode.fenced_instance_id
        return ErrorCode.none if member_id in self.members else ErrorCode.unknown_member_id

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def has_all_members_joined(self) -> bool:
        return not self.pending_members and all(
            m.awaiting_join is not None for m in self.members.values()
        )

    def not_yet_rejoined(self) -> list[Member]:
        return [m for m in self.members.values() if m.awaiting_join is None]

    def maybe_elect_new_joined_leader(self) -> bool:
        """Keep the leader if it rejoined, else pick a rejoined member; False if none rejoined."""
        if self.leader_id is None:
            return False
        if self.members[self.leader_id].awaiting_join is not None:
            return True
        for member in self.members.values():
            if member.awaiting_join is not None:
                log.info("group %s: leader %s did not rejoin; %s leads now",
                         self.group_id, self.leader_id, member.member_id)
                self.leader_id = member.member_id
                return True
        return False

    # -- protocols --------------------------------------------------------------------------------

    def candidate_protocols(self) -> set[str]:
        members = iter(self.members.values())
        first = next(members, None)
        if first is None:
            return set()
        common = set(first.protocol_names)
        for member in members:
            common &= set(member.protocol_names)
        return common

    def supports_protocols(self, protocol_type: str, names: Iterable[str]) -> bool:
        names = list(names)
        if self.is_(EMPTY):
            return bool(protocol_type) and bool(names)
        if self.protocol_type != protocol_type:
            return False
        return any(all(n in m.protocol_names for m in self.members.values()) for n in names)

    def select_protocol(self) -> str:
        """Each member votes for its most preferred protocol that all support; most votes wins
        (ties: the protocol voted for first, in member order)."""
        candidates = self.candidate_protocols()
        votes: dict[str, int] = {}
        for member in self.members.values():
            choice = member.vote(candidates)
            votes[choice] = votes.get(choice, 0) + 1
        return max(votes, key=lambda name: votes[name])

    def current_member_metadata(self) -> list[tuple[str, str | None, bytes]]:
        return [
            (m.member_id, m.group_instance_id, m.metadata(self.protocol_name))
            for m in self.members.values()
        ]

    def init_next_generation(self, now_ms: int) -> None:
        self.generation_id += 1
        if self.members:
            self.protocol_name = self.select_protocol()
            self.transition_to(COMPLETING_REBALANCE, now_ms)
        else:
            self.protocol_name = None
            self.transition_to(EMPTY, now_ms)
        self.subscribed_topics = self.compute_subscribed_topics()
        self.pending_sync.clear()

    def compute_subscribed_topics(self) -> frozenset[str] | None:
        """Kafka's ClassicGroup.computeSubscribedTopics: for a group of consumers, the topics of every
        member's subscription (read as ConsumerProtocolSubscription v0, the prefix of every version);
        None when the group is not a consumer group, has no protocol yet, or a subscription does not
        parse."""
        if self.protocol_type != CONSUMER_PROTOCOL_TYPE:
            return None
        if not self.members:
            return frozenset()
        if self.protocol_name is None:
            return None
        topics: set[str] = set()
        for member in self.members.values():
            subscription = consumer_subscription_topics(member.metadata(self.protocol_name))
            if subscription is None:
                log.warning("group %s: member %s's subscription does not parse; its subscribed topics are "
                            "unknown", self.group_id, member.member_id)
                return None
            topics.update(subscription)
        return frozenset(topics)

    def is_subscribed_to_topic(self, topic: str) -> bool:
        """Kafka's isSubscribedToTopic: when the subscriptions are unknown, a consumer group counts as
        subscribed to everything (its offsets are not to be deleted under it)."""
        if self.subscribed_topics is not None:
            return topic in self.subscribed_topics
        return self.protocol_type == CONSUMER_PROTOCOL_TYPE


# --- the purgatory side ----------------------------------------------------------------------------


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
        self.coordinator.tick(trio.current_time())


class DelayedSync(DelayedJoin):
    """A parked SyncGroup of a follower: done when the leader's assignment arrives, or when the
    group gives up on this generation (a new rebalance, or the sync timeout)."""


# --- the coordinator -----------------------------------------------------------------------------


class GroupCoordinator:
    def __init__(
        self,
        config: GroupConfig | None = None,
        store: OffsetsStore | None = None,
        *,
        wall_clock_ms: Callable[[], int] = _wall_clock_ms,
        purgatory: Purgatory | None = None,
    ) -> None:
        self.config = config or GroupConfig()
        self.store = store if store is not None else OffsetsStore()
        self.wall_clock_ms = wall_clock_ms
        self.purgatory = purgatory if purgatory is not None else Purgatory("Group")
        self.groups: dict[str, ClassicGroup] = {}
        # Every deadline set on a group or member is also pushed here, so a tick visits only the
        # groups with something due (an entry whose deadline moved later just finds nothing).
        self._timers: list[tuple[float, str]] = []
        self._sleep_target = math.inf  # when the timer task will next wake by itself
        self._timers_moved = False
        self.rebalances = 0  # completed join phases, for tests and metrics
        self._wake: set[str] = set()
        self._on_change: Callable[[], None] | None = None
        self._next_retention_check: float | None = None
        self._load()

    @classmethod
    def open(cls, config: BrokerConfig, logs: LogManager,
             wall_clock_ms: Callable[[], int] = _wall_clock_ms) -> GroupCoordinator:
        store = OffsetsStore.open(logs, wall_clock_ms())
        return cls(GroupConfig.from_broker(config), store, wall_clock_ms=wall_clock_ms,
                   purgatory=Purgatory("Group"))

    def _load(self) -> None:
        now_ms = self.wall_clock_ms()
        for group_id in set(self.store.groups) | set(self.store.offsets):
            group = ClassicGroup(group_id, now_ms)
            stored = self.store.groups.get(group_id)
            if stored is not None:
                group.protocol_type = stored.protocol_type or None
                group.generation_id = stored.generation
                if stored.members == 0 and stored.state_timestamp_ms >= 0:
                    group.state_timestamp_ms = stored.state_timestamp_ms
            group.subscribed_topics = group.compute_subscribed_topics()
            self.groups[group_id] = group

    def close(self) -> None:
        """Answer every parked request (the broker is going away) and compact the offsets log."""
        for group in self.groups.values():
            for member in group.members.values():
                self._complete_join(group, member, JoinResult(ErrorCode.coordinator_not_available, member.member_id))
                self._complete_sync(group, member, SyncResult(ErrorCode.coordinator_not_available))
        self._after(notify=False)
        try:
            self.store.maybe_compact(self.wall_clock_ms())
        except Exception:  # our bug or a disk fault: the logs must still be closed
            log.exception("compacting %s at shutdown failed", "__consumer_offsets")

    # -- plumbing ---------------------------------------------------------------------------------

    def _complete_join(self, group: ClassicGroup, member: Member, result: JoinResult) -> bool:
        pending, member.awaiting_join = member.awaiting_join, None
        if pending is None or pending.done:
            return False
        pending.result = result
        self._wake.add(group.group_id)
        return True

    def _complete_sync(self, group: ClassicGroup, member: Member, result: SyncResult) -> bool:
        pending, member.awaiting_sync = member.awaiting_sync, None
        if pending is None or pending.done:
            return False
        pending.result = result
        self._wake.add(group.group_id)
        return True

    def _after(self, notify: bool = True) -> None:
        """Wake the requests whose results are ready, and the timer task if a deadline now comes
        before the time it sleeps until."""
        woken, self._wake = self._wake, set()
        for group_id in woken:
            self.purgatory.check_and_complete(group_id)
        moved, self._timers_moved = self._timers_moved, False
        if notify and moved and self._on_change is not None:
            self._on_change()

    def _timer(self, group: ClassicGroup, deadline: float) -> float:
        heapq.heappush(self._timers, (deadline, group.group_id))
        if deadline < self._sleep_target:
            self._timers_moved = True
        return deadline

    def _schedule_heartbeat(self, group: ClassicGroup, member: Member, now: float,
                            timeout_ms: int | None = None) -> None:
        timeout = member.session_timeout_ms if timeout_ms is None else timeout_ms
        member.heartbeat_deadline = self._timer(group, now + timeout / 1000)

    def _drop_member(self, group: ClassicGroup, member: Member) -> None:
        """Remove a member, answering any request it has parked with UNKNOWN_MEMBER_ID."""
        self._complete_join(group, member, JoinResult(ErrorCode.unknown_member_id))
        self._complete_sync(group, member, SyncResult(ErrorCode.unknown_member_id))
        group.remove(member.member_id)

    # -- JoinGroup --------------------------------------------------------------------------------

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
        """Handle a JoinGroup; the Pending completes when the join phase does."""
        pending = Pending()
        try:
            if not group_id:
                pending.result = JoinResult(ErrorCode.invalid_group_id, member_id)
            elif not (self.config.min_session_timeout_ms <= session_timeout_ms
                      <= self.config.max_session_timeout_ms):
                pending.result = JoinResult(ErrorCode.invalid_session_timeout, member_id)
            else:
                group = self.groups.get(group_id)
                if group is None:
                    if member_id:
                        pending.result = JoinResult(ErrorCode.unknown_member_id, member_id)
                        return pending
                    group = self.groups[group_id] = ClassicGroup(group_id, self.wall_clock_ms())
                request = _JoinRequest(member_id, group_instance_id, client_id, client_host,
                                       session_timeout_ms, rebalance_timeout_ms, protocol_type,
                                       list(protocols), require_known_member_id,
                                       supports_skip_assignment, reason)
                if member_id:
                    self._join_existing_member(now, group, request, pending)
                else:
                    self._join_new_member(now, group, request, pending)
            return pending
        finally:
            self._after()

    def _join_new_member(self, now: float, group: ClassicGroup, req: _JoinRequest, pending: Pending) -> None:
        if group.is_(DEAD):
            pending.result = JoinResult(ErrorCode.coordinator_not_available)
            return
        if not group.supports_protocols(req.protocol_type, (n for n, _ in req.protocols)):
            pending.result = JoinResult(ErrorCode.inconsistent_group_protocol)
            return
        new_id = f"{req.group_instance_id or req.client_id}-{uuid.uuid4()}"
        if req.group_instance_id is not None:
            existing = group.static_members.get(req.group_instance_id)
            if existing is not None:
                self._replace_static_member(now, group, req, existing, new_id, pending)
            else:
                self._add_member_and_rebalance(now, group, req, new_id, pending)
        elif req.require_known_member_id:
            # KIP-394: hand out the id and wait for the member to come back with it.
            group.pending_members[new_id] = self._timer(group, now + req.session_timeout_ms / 1000)
            pending.result = JoinResult(ErrorCode.member_id_required, new_id)
        else:
            self._add_member_and_rebalance(now, group, req, new_id, pending)

    def _join_existing_member(self, now: float, group: ClassicGroup, req: _JoinRequest, pending: Pending) -> None:
        member_id = req.member_id
        if group.is_(DEAD):
            pending.result = JoinResult(ErrorCode.coordinator_not_available, member_id)
            return
        if not group.supports_protocols(req.protocol_type, (n for n, _ in req.protocols)):
            pending.result = JoinResult(ErrorCode.inconsistent_group_protocol, member_id)
            return
        if member_id in group.pending_members:
            self._add_member_and_rebalance(now, group, req, member_id, pending)
            return
        error = group.validate_member(member_id, req.group_instance_id)
        if error:
            pending.result = JoinResult(error, member_id)
            return
        member = group.members[member_id]
        if group.is_(PREPARING_REBALANCE):
            self._update_member_and_rebalance(now, group, member, req, pending)
        elif group.is_(COMPLETING_REBALANCE):
            if member.matches(req.protocols):
                # It lost the join response: give it this generation's again.
                pending.result = self._current_generation(
                    group, member_id, with_members=member_id == group.leader_id)
            else:
                self._update_member_and_rebalance(now, group, member, req, pending)
        elif group.is_(STABLE):
            if member_id == group.leader_id or not member.matches(req.protocols):
                # A leader's join forces a rebalance (e.g. its topics' metadata changed).
                self._update_member_and_rebalance(now, group, member, req, pending)
            else:
                pending.result = self._current_generation(group, member_id, with_members=False)
        else:
            pending.result = JoinResult(ErrorCode.unknown_member_id, member_id)

    def _current_generation(self, group: ClassicGroup, member_id: str, with_members: bool,
                            leader: str | None = None, skip_assignment: bool = False) -> JoinResult:
        return JoinResult(
            ErrorCode.none,
            member_id,
            group.generation_id,
            group.protocol_type,
            group.protocol_name,
            (leader if leader is not None else group.leader_id) or "",
            group.current_member_metadata() if with_members else [],
            skip_assignment,
        )

    def _add_member_and_rebalance(self, now: float, group: ClassicGroup, req: _JoinRequest,
                                  member_id: str, pending: Pending) -> None:
        member = Member(member_id, req.group_instance_id, req.client_id, req.client_host,
                        req.rebalance_timeout_ms, req.session_timeout_ms, req.protocol_type,
                        req.protocols, is_new=True)
        if group.is_(PREPARING_REBALANCE) and group.previous_state is EMPTY:
            group.new_member_added = True  # lets the initial delay stretch
        group.add(member, pending)
        # A parked new member cannot heartbeat and its disconnect is not noticed, so it gets a
        # generous deadline of its own (Kafka's new-member join timeout).
        self._schedule_heartbeat(group, member, now, self.config.new_member_join_timeout_ms)
        self._maybe_prepare_rebalance_or_complete_join(now, group, f"new member {member_id} joined")

    def _update_member_and_rebalance(self, now: float, group: ClassicGroup, member: Member,
                                     req: _JoinRequest, pending: Pending) -> None:
        if member.awaiting_join is not None:
            # A duplicate join (the client gave up on the first): the newest request gets the answer.
            self._complete_join(group, member, JoinResult(ErrorCode.rebalance_in_progress, member.member_id))
        member.protocols = req.protocols
        member.rebalance_timeout_ms = req.rebalance_timeout_ms
        member.session_timeout_ms = req.session_timeout_ms
        member.awaiting_join = pending
        self._maybe_prepare_rebalance_or_complete_join(
            now, group, f"member {member.member_id} rejoined ({req.reason or 'no reason given'})")

    def _replace_static_member(self, now: float, group: ClassicGroup, req: _JoinRequest,
                               old_id: str, new_id: str, pending: Pending) -> None:
        current_leader = group.leader_id
        old = group.members[old_id]
        # Fence whatever the old incarnation has parked.
        self._complete_join(group, old, JoinResult(ErrorCode.fenced_instance_id, old_id))
        self._complete_sync(group, old, SyncResult(ErrorCode.fenced_instance_id))
        member = group.replace_static_member(req.group_instance_id, old_id, new_id)
        self._schedule_heartbeat(group, member, now)
        member.protocols = req.protocols
        member.rebalance_timeout_ms = req.rebalance_timeout_ms
        member.session_timeout_ms = req.session_timeout_ms
        log.info("group %s: static member %s replaces %s with %s",
                 group.group_id, req.group_instance_id, old_id, new_id)
        if group.is_(STABLE):
            if group.protocol_name == group.select_protocol():
                # Nothing the assignment depends on changed: no rebalance. A v9+ leader is told
                # to skip the assignment; an older one is not told it leads.
                if req.supports_skip_assignment:
                    is_leader = group.leader_id == new_id
                    pending.result = self._current_generation(
                        group, new_id, with_members=is_leader, skip_assignment=is_leader)
                else:
                    pending.result = self._current_generation(
                        group, new_id, with_members=False, leader=current_leader or "")
                self._persist_group(group)
                return
            member.awaiting_join = pending
            self._maybe_prepare_rebalance_or_complete_join(now, group, "static member changed protocols")
        elif group.is_(COMPLETING_REBALANCE):
            member.awaiting_join = pending
            self._prepare_rebalance(now, group, f"static member {req.group_instance_id} rejoined")
        else:
            member.awaiting_join = pending
            self._maybe_complete_join_phase(now, group)

    # -- the join phase ---------------------------------------------------------------------------

    def _maybe_prepare_rebalance_or_complete_join(self, now: float, group: ClassicGroup, reason: str) -> None:
        if group.can_rebalance():
            self._prepare_rebalance(now, group, reason)
        else:
            self._maybe_complete_join_phase(now, group)

    def _prepare_rebalance(self, now: float, group: ClassicGroup, reason: str) -> None:
        if group.is_(COMPLETING_REBALANCE):
            self._reset_and_propagate_assignment_error(now, group, ErrorCode.rebalance_in_progress)
        group.pending_sync.clear()
        group.sync_deadline = None
        initial = group.is_(EMPTY)
        if initial:
            delay = self.config.initial_rebalance_delay_ms
            group.join_initial = True
            group.initial_delay_ms = delay
            group.initial_remaining_ms = max(group.rebalance_timeout_ms() - delay, 0)
            group.join_deadline = self._timer(group, now + delay / 1000)
            group.new_member_added = False
        group.transition_to(PREPARING_REBALANCE, self.wall_clock_ms())
        log.info("group %s: preparing to rebalance (generation %d): %s",
                 group.group_id, group.generation_id, reason)
        if not initial:
            if group.has_all_members_joined():
                self._complete_join_phase(now, group)
            else:
                group.join_initial = False
                group.join_deadline = self._timer(group, now + group.rebalance_timeout_ms() / 1000)

    def _maybe_complete_join_phase(self, now: float, group: ClassicGroup) -> None:
        if (group.is_(PREPARING_REBALANCE) and group.previous_state is not EMPTY
                and group.has_all_members_joined()):
            self._complete_join_phase(now, group)

    def _join_timer_fired(self, now: float, group: ClassicGroup) -> None:
        group.join_deadline = None
        if not group.is_(PREPARING_REBALANCE):
            return
        if group.join_initial and group.new_member_added and group.initial_remaining_ms:
            # New members are still arriving: give them another delay, within the rebalance timeout.
            group.new_member_added = False
            delay = min(self.config.initial_rebalance_delay_ms, group.initial_remaining_ms)
            group.initial_remaining_ms = max(group.initial_remaining_ms - group.initial_delay_ms, 0)
            group.initial_delay_ms = delay
            group.join_deadline = self._timer(group, now + delay / 1000)
            return
        self._complete_join_phase(now, group)

    def _complete_join_phase(self, now: float, group: ClassicGroup) -> None:
        group.join_deadline = None
        group.join_initial = False
        for member in group.not_yet_rejoined():
            if member.group_instance_id is None:
                log.info("group %s: removing member %s, which did not rejoin in time",
                         group.group_id, member.member_id)
                self._drop_member(group, member)
        if group.is_(DEAD):
            return
        if group.members and not group.maybe_elect_new_joined_leader():
            # Only static members that did not rejoin are left: wait for them (or their expiry).
            group.join_deadline = self._timer(group, now + max(group.rebalance_timeout_ms(), 1) / 1000)
            return
        group.init_next_generation(self.wall_clock_ms())
        self.rebalances += 1
        self._persist_group(group)
        if group.is_(EMPTY):
            log.info("group %s: generation %d is empty", group.group_id, group.generation_id)
            return
        log.info("group %s: generation %d with %d member(s), protocol %s, leader %s",
                 group.group_id, group.generation_id, len(group.members), group.protocol_name,
                 group.leader_id)
        for member in group.members.values():
            is_leader = member.member_id == group.leader_id
            self._complete_join(group, member, self._current_generation(group, member.member_id, is_leader))
            self._schedule_heartbeat(group, member, now)
            member.is_new = False
            group.pending_sync.add(member.member_id)
        group.sync_deadline = self._timer(group, now + group.rebalance_timeout_ms() / 1000)
        group.sync_generation = group.generation_id

    def _persist_group(self, group: ClassicGroup) -> None:
        try:
            self.store.store_group(
                group.group_id,
                StoredGroup(group.protocol_type or "", group.generation_id, group.protocol_name or "",
                            len(group.members), group.state_timestamp_ms),
                self.wall_clock_ms(),
            )
        except OSError as exc:
            # The running group is in memory; the record only lets a restart list and describe it.
            log.error("group %s: storing the group record failed: %s", group.group_id, storage_error_message(exc))

    # -- SyncGroup --------------------------------------------------------------------------------

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
        pending = Pending()
        try:
            if not group_id:
                pending.result = SyncResult(ErrorCode.invalid_group_id)
                return pending
            group = self.groups.get(group_id)
            if group is None or group.is_(EMPTY):
                pending.result = SyncResult(ErrorCode.unknown_member_id)
                return pending
            if group.is_(DEAD):
                pending.result = SyncResult(ErrorCode.coordinator_not_available)
                return pending
            error = group.validate_member(member_id, group_instance_id)
            if not error and generation_id != group.generation_id:
                error = ErrorCode.illegal_generation
            if not error and (_inconsistent(protocol_type, group.protocol_type)
                              or _inconsistent(protocol_name, group.protocol_name)):
                error = ErrorCode.inconsistent_group_protocol
            if error:
                pending.result = SyncResult(error)
            elif group.is_(PREPARING_REBALANCE):
                pending.result = SyncResult(ErrorCode.rebalance_in_progress)
            elif group.is_(COMPLETING_REBALANCE):
                member = group.members[member_id]
                if member.awaiting_sync is not None:
                    self._complete_sync(group, member, SyncResult(ErrorCode.rebalance_in_progress))
                member.awaiting_sync = pending
                self._synced(group, member_id)
                if member_id == group.leader_id:
                    log.info("group %s: assignment for generation %d from leader %s",
                             group.group_id, group.generation_id, member_id)
                    for other in group.members.values():
                        other.assignment = assignments.get(other.member_id, b"")
                    self._propagate_assignment(now, group, ErrorCode.none)
                    group.transition_to(STABLE, self.wall_clock_ms())
            else:  # Stable
                self._synced(group, member_id)
                pending.result = SyncResult(ErrorCode.none, group.protocol_type, group.protocol_name,
                                            group.members[member_id].assignment)
            return pending
        finally:
            self._after()

    @staticmethod
    def _synced(group: ClassicGroup, member_id: str) -> None:
        group.pending_sync.discard(member_id)
        if not group.pending_sync:
            group.sync_deadline = None

    def _propagate_assignment(self, now: float, group: ClassicGroup, error: int) -> None:
        for member in group.members.values():
            result = SyncResult(error, assignment=member.assignment)
            if error == ErrorCode.none:
                result.protocol_type, result.protocol_name = group.protocol_type, group.protocol_name
            if self._complete_sync(group, member, result):
                # Its session restarts now: any expiry while it was parked was ignored.
                self._schedule_heartbeat(group, member, now)

    def _reset_and_propagate_assignment_error(self, now: float, group: ClassicGroup, error: int) -> None:
        for member in group.members.values():
            member.assignment = b""
        self._propagate_assignment(now, group, error)

    def _sync_timer_fired(self, now: float, group: ClassicGroup) -> None:
        group.sync_deadline = None
        if group.sync_generation != group.generation_id or not group.is_(COMPLETING_REBALANCE, STABLE):
            return
        if group.pending_sync:
            laggards = sorted(group.pending_sync)
            for member_id in laggards:
                member = group.members.get(member_id)
                if member is not None:
                    self._drop_member(group, member)
            self._prepare_rebalance(now, group, f"members {laggards} did not sync in time")

    # -- Heartbeat --------------------------------------------------------------------------------

    def heartbeat(self, now: float, *, group_id: str, generation_id: int, member_id: str,
                  group_instance_id: str | None = None) -> int:
        try:
            if not group_id:
                return ErrorCode.invalid_group_id
            group = self.groups.get(group_id)
            if group is None:
                return ErrorCode.unknown_member_id
            if group.is_(DEAD):
                return ErrorCode.coordinator_not_available
            error = group.validate_member(member_id, group_instance_id)
            if error:
                return error
            if generation_id != group.generation_id:
                return ErrorCode.illegal_generation
            if group.is_(EMPTY):
                return ErrorCode.unknown_member_id
            self._schedule_heartbeat(group, group.members[member_id], now)
            if group.is_(PREPARING_REBALANCE):
                return ErrorCode.rebalance_in_progress  # rejoin, please
            return ErrorCode.none
        finally:
            self._after()

    # -- LeaveGroup -------------------------------------------------------------------------------

    def leave_group(self, now: float, group_id: str,
                    members: list[tuple[str, str | None]]) -> tuple[int, list[int]]:
        """(top-level error, one error per (member_id, group_instance_id) leaving)."""
        try:
            if not group_id:
                return ErrorCode.invalid_group_id, []
            group = self.groups.get(group_id)
            if group is None:
                return ErrorCode.unknown_member_id, []
            if group.is_(DEAD):
                return ErrorCode.coordinator_not_available, []
            errors = []
            for member_id, instance_id in members:
                if not member_id:
                    # Administrative removal by group.instance.id.
                    existing = group.static_members.get(instance_id) if instance_id else None
                    if existing is None:
                        errors.append(ErrorCode.unknown_member_id)
                        continue
                    self._drop_member(group, group.members[existing])
                elif member_id in group.pending_members:
                    del group.pending_members[member_id]
                else:
                    error = group.validate_member(member_id, instance_id)
                    if error:
                        errors.append(error)
                        continue
                    self._drop_member(group, group.members[member_id])
                log.info("group %s: member %s left", group.group_id, member_id or instance_id)
                errors.append(ErrorCode.none)
            if ErrorCode.none in errors:
                if group.is_(STABLE, COMPLETING_REBALANCE):
                    self._maybe_prepare_rebalance_or_complete_join(now, group, "members left")
                elif group.is_(PREPARING_REBALANCE):
                    self._maybe_complete_join_phase(now, group)
            return ErrorCode.none, errors
        finally:
            self._after()

    # -- timers -----------------------------------------------------------------------------------

    def tick(self, now: float) -> None:
        """Fire every timer due at `now`: join and sync timeouts, session expiries, pending member
        expiries, and the offsets retention check."""
        self._tick(now)
        self._after()

    def _tick(self, now: float) -> None:
        due: set[str] = set()
        while self._timers and self._timers[0][0] <= now:
            due.add(heapq.heappop(self._timers)[1])
        for group_id in sorted(due):
            group = self.groups.get(group_id)
            if group is None:
                continue
            # Each event clears or moves its own deadline; the bound guards against our own bug.
            for _ in range(10_000):
                event = self._next_due(group, now)
                if event is None:
                    break
                event()
            else:
                log.error("group %s: timers keep firing at %.3f; giving up this tick", group.group_id, now)
        if self._next_retention_check is None:
            self._next_retention_check = now + self.config.offsets_retention_check_interval_ms / 1000
        elif now >= self._next_retention_check:
            self._next_retention_check = now + self.config.offsets_retention_check_interval_ms / 1000
            now_ms = self.wall_clock_ms()
            try:
                self.expire_offsets(now_ms)
                self.store.maybe_compact(now_ms)
            except OSError as exc:  # tried again at the next check
                log.error("%s: offset expiry or compaction failed: %s", "__consumer_offsets",
                          storage_error_message(exc))

    def _next_due(self, group: ClassicGroup, now: float) -> Callable[[], None] | None:
        best: tuple[float, Callable[[], None]] | None = None

        def consider(deadline: float | None, action: Callable[[], None]) -> None:
            nonlocal best
            if deadline is not None and deadline <= now and (best is None or deadline < best[0]):
                best = (deadline, action)

        consider(group.join_deadline, lambda: self._join_timer_fired(now, group))
        consider(group.sync_deadline, lambda: self._sync_timer_fired(now, group))
        for member_id, deadline in group.pending_members.items():
            consider(deadline, lambda m=member_id: self._pending_member_expired(now, group, m))
        for member in group.members.values():
            consider(member.heartbeat_deadline, lambda m=member: self._heartbeat_expired(now, group, m))
        return best[1] if best is not None else None

    def _pending_member_expired(self, now: float, group: ClassicGroup, member_id: str) -> None:
        log.info("group %s: pending member %s did not rejoin within its session", group.group_id, member_id)
        group.pending_members.pop(member_id, None)
        if group.is_(PREPARING_REBALANCE) and group.has_all_members_joined():
            self._complete_join_phase(now, group)

    def _heartbeat_expired(self, now: float, group: ClassicGroup, member: Member) -> None:
        member.heartbeat_deadline = None
        if member.has_satisfied_heartbeat():
            return  # parked in a rebalance: its deadline restarts when the rebalance answers it
        log.info("group %s: member %s's session expired; removing it", group.group_id, member.member_id)
        self._drop_member(group, member)
        if group.is_(STABLE, COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance_or_complete_join(now, group, f"member {member.member_id} expired")
        elif group.is_(PREPARING_REBALANCE) and group.has_all_members_joined():
            self._complete_join_phase(now, group)

    def next_deadline(self) -> float | None:
        """The earliest time a tick may have something to do (possibly a little early)."""
        deadlines = [self._timers[0][0]] if self._timers else []
        if self._next_retention_check is not None:
            deadlines.append(self._next_retention_check)
        return min(deadlines, default=None)

    # -- offsets ----------------------------------------------------------------------------------

    def commit_offsets(
        self,
        now: float,
        *,
        group_id: str,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        offsets: dict[tuple[str, int], tuple[int, int, str | None]],
        retention_ms: int = -1,
        version: int = 8,
    ) -> dict[tuple[str, int], int]:
        """Store (offset, leader_epoch, metadata) per partition; returns an error per partition.
        The caller has already answered partitions of unknown topics."""
        try:
            error = self._validate_commit(group_id, generation_id, member_id, group_instance_id, version)
            if error:
                return {tp: error for tp in offsets}
            now_ms = self.wall_clock_ms()
            expire_ms = now_ms + retention_ms if retention_ms >= 0 else -1
            errors: dict[tuple[str, int], int] = {}
            accepted: dict[tuple[str, int], OffsetAndMetadata] = {}
            for tp, (offset, leader_epoch, metadata) in offsets.items():
                metadata = metadata or ""
                if len(metadata) > self.config.offset_metadata_max_bytes:
                    errors[tp] = ErrorCode.offset_metadata_too_large
                else:
                    accepted[tp] = OffsetAndMetadata(offset, leader_epoch, metadata, now_ms, expire_ms)
                    errors[tp] = ErrorCode.none
            try:
                self.store.commit(group_id, accepted, now_ms)
            except OSError as exc:
                # Kafka's GroupMetadataManager maps a failed append to the offsets topic
                # (KAFKA_STORAGE_ERROR) to NOT_COORDINATOR: the client finds the coordinator
                # again and retries the commit. Nothing was stored.
                log.error("group %s: committing offsets failed: %s", group_id, storage_error_message(exc))
                return {tp: ErrorCode.not_coordinator if code == ErrorCode.none else code for tp, code in errors.items()}
            return errors
        finally:
            self._after()

    def _validate_commit(self, group_id: str, generation_id: int, member_id: str,
                         instance_id: str | None, version: int) -> int:
        if not group_id:
            return ErrorCode.invalid_group_id
        group = self.groups.get(group_id)
        if group is None:
            if generation_id >= 0:
                return ErrorCode.group_id_not_found if version >= 9 else ErrorCode.illegal_generation
            # A "simple" group: offsets only, no group management.
            group = self.groups[group_id] = ClassicGroup(group_id, self.wall_clock_ms())
        if group.is_(DEAD):
            return ErrorCode.coordinator_not_available
        if generation_id < 0 and group.is_(EMPTY):
            return ErrorCode.none
        if generation_id >= 0 or member_id or instance_id is not None:
            error = group.validate_member(member_id, instance_id)
            if error:
                return error
            if generation_id != group.generation_id:
                return ErrorCode.illegal_generation
        elif not group.is_(EMPTY):
            return ErrorCode.unknown_member_id
        if group.is_(COMPLETING_REBALANCE):
            return ErrorCode.rebalance_in_progress
        return ErrorCode.none

    def fetch_offsets(self, group_id: str, partitions: list[tuple[str, int]] | None
                      ) -> list[tuple[tuple[str, int], OffsetAndMetadata | None]]:
        """Committed offsets of `partitions` (None: every partition the group has offsets for)."""
        group_offsets = self.store.offsets.get(group_id, {}) if group_id in self.groups else {}
        if partitions is None:
            return sorted(group_offsets.items())
        return [(tp, group_offsets.get(tp)) for tp in partitions]

    def forget_topic(self, topic: str, now_ms: int) -> int:
        """A deleted topic's committed offsets go with it (Kafka's onPartitionsDeleted)."""
        removed = 0
        for group_id, offsets in list(self.store.offsets.items()):
            gone = [tp for tp in offsets if tp[0] == topic]
            if gone:
                try:
                    self.store.remove_offsets(group_id, gone, now_ms)
                except OSError as exc:
                    log.error("group %s: removing the offsets of deleted topic %s failed: %s",
                              group_id, topic, storage_error_message(exc))
                    continue
                removed += len(gone)
        return removed

    def expire_offsets(self, now_ms: int) -> int:
        """KIP-211 retention; drops groups left Empty without offsets. Returns offsets expired."""
        retention = self.config.offsets_retention_ms
        expired_total = 0
        for group_id, group in list(self.groups.items()):
            offsets = self.store.offsets.get(group_id, {})
            if group.protocol_type:
                if not group.is_(EMPTY):
                    continue  # members may still need them
                base: Callable[[OffsetAndMetadata], int] = (
                    (lambda om, ts=group.state_timestamp_ms: ts) if group.state_timestamp_ms >= 0
                    else (lambda om: om.commit_timestamp_ms))
            else:
                base = lambda om: om.commit_timestamp_ms  # noqa: E731 - a simple group
            expired = [
                tp for tp, om in offsets.items()
                if now_ms >= (om.expire_timestamp_ms if om.expire_timestamp_ms >= 0 else base(om) + retention)
            ]
            if expired:
                self.store.remove_offsets(group_id, expired, now_ms)
                expired_total += len(expired)
                log.info("group %s: %d committed offset(s) expired", group_id, len(expired))
            if group.is_(EMPTY) and group_id not in self.store.offsets:
                log.info("group %s: empty without offsets; removing it", group_id)
                group.transition_to(DEAD, now_ms)
                self.store.delete_group(group_id, now_ms)
                del self.groups[group_id]
        return expired_total

    def delete_offsets(self, group_id: str, topics: dict[str, list[int]]) -> tuple[int, dict[tuple[str, int], int]]:
        """OffsetDelete (Kafka's OffsetMetadataManager.deleteOffsets): (group error, error per partition).

        The group must exist (ErrorCode.group_id_not_found) and, unless Empty, be a consumer group
        (NON_EMPTY_GROUP otherwise). A topic the members subscribe to keeps its offsets: each of its
        partitions answers GROUP_SUBSCRIBED_TO_TOPIC. Elsewhere an offset is removed (a tombstone in
        __consumer_offsets) and a partition without one is answered NONE all the same."""
        try:
            if not group_id:
                return ErrorCode.invalid_group_id, {}
            group = self.groups.get(group_id)
            if group is None or group.is_(DEAD):
                return ErrorCode.group_id_not_found, {}
            if not group.is_(EMPTY) and group.protocol_type != CONSUMER_PROTOCOL_TYPE:
                return ErrorCode.non_empty_group, {}
            committed = self.store.offsets.get(group_id, {})
            errors: dict[tuple[str, int], int] = {}
            removed = []
            for topic, partitions in topics.items():
                subscribed = group.is_subscribed_to_topic(topic)
                for partition in partitions:
                    errors[(topic, partition)] = ErrorCode.group_subscribed_to_topic if subscribed else ErrorCode.none
                    if not subscribed and (topic, partition) in committed:
                        removed.append((topic, partition))
            if removed:
                try:
                    self.store.remove_offsets(group_id, removed, self.wall_clock_ms())
                except OSError as exc:
                    # As a failed commit: Kafka maps the storage error to NOT_COORDINATOR, top-level.
                    log.error("group %s: deleting offsets failed: %s", group_id, storage_error_message(exc))
                    return ErrorCode.not_coordinator, {}
                log.info("group %s: deleted %d committed offset(s)", group_id, len(removed))
            return ErrorCode.none, errors
        finally:
            self._after()

    # -- ListGroups / DescribeGroups / DeleteGroups -----------------------------------------------

    def list_groups(self, states_filter: Iterable[str] = (), types_filter: Iterable[str] = ()
                    ) -> list[GroupOverview]:
        states = {s.lower() for s in states_filter}
        types = {t.lower() for t in types_filter}
        if types and CLASSIC not in types:
            return []
        return [
            GroupOverview(g.group_id, g.protocol_type or "", g.state.value)
            for g in sorted(self.groups.values(), key=lambda g: g.group_id)
            if not g.is_(DEAD) and (not states or g.state.value.lower() in states)
        ]

    def describe_group(self, group_id: str) -> GroupDescription | None:
        group = self.groups.get(group_id)
        if group is None or group.is_(DEAD):
            return None
        stable = group.is_(STABLE)
        return GroupDescription(
            group.group_id,
            group.state.value,
            group.protocol_type or "",
            (group.protocol_name or "") if stable else "",
            [
                MemberDescription(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                                  m.metadata(group.protocol_name) if stable else b"", m.assignment)
                for m in group.members.values()
            ],
        )

    def delete_groups(self, now: float, group_ids: Iterable[str]) -> dict[str, int]:
        try:
            results: dict[str, int] = {}
            for group_id in group_ids:
                group = self.groups.get(group_id)
                if not group_id:
                    results[group_id] = ErrorCode.invalid_group_id
                elif group is None or group.is_(DEAD):
                    results[group_id] = ErrorCode.group_id_not_found
                elif not group.is_(EMPTY):
                    results[group_id] = ErrorCode.non_empty_group
                else:
                    now_ms = self.wall_clock_ms()
                    group.transition_to(DEAD, now_ms)
                    self.store.delete_group(group_id, now_ms)
                    del self.groups[group_id]
                    log.info("group %s: deleted", group_id)
                    results[group_id] = ErrorCode.none
            return results
        finally:
            self._after()

    # -- the trio side ----------------------------------------------------------------------------

    async def wait_for(self, pending: Pending, group_id: str, kind: type[DelayedJoin] = DelayedJoin) -> Any:
        """Park a request in the purgatory until its Pending completes; returns the result."""
        while not pending.done:
            now = trio.current_time()
            self.tick(now)
            if pending.done:
                break
            group = self.groups.get(group_id)
            deadlines = [] if group is None else [
                d for d in (group.join_deadline, group.sync_deadline) if d is not None]
            deadline = min(deadlines, default=now + 1.0)
            await self.purgatory.wait(kind(self, pending, deadline), (group_id,))
        return pending.result

    async def run(self) -> None:
        """Fire timers at their deadlines until cancelled (started next to the broker's other
        background work)."""
        wake = trio.Event()

        def changed() -> None:
            wake.set()

        self._on_change = changed
        if self._next_retention_check is None:
            self._next_retention_check = (
                trio.current_time() + self.config.offsets_retention_check_interval_ms / 1000)
        try:
            while True:
                deadline = self.next_deadline()
                self._sleep_target = deadline if deadline is not None else math.inf
                with trio.move_on_at(self._sleep_target):
                    await wake.wait()
                wake = trio.Event()
                self._sleep_target = -math.inf  # ticking: new deadlines are seen below
                self._tick(trio.current_time())
                self._after(notify=False)
        finally:
            self._on_change = None
            self._sleep_target = math.inf


@dataclass
class _JoinRequest:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    require_known_member_id: bool
    supports_skip_assignment: bool
    reason: str | None


def consumer_subscription_topics(metadata: bytes) -> list[str] | None:
    """The topics of a ConsumerProtocolSubscription (the JoinGroup metadata of protocol type
    "consumer"), read as v0, the prefix every version keeps: version int16, then an array (int32
    count) of int16-length strings. None when the bytes do not hold that (lengths are checked
    against the bytes there before anything is read)."""
    view = memoryview(metadata)
    if len(view) < 6:
        return None
    count = int.from_bytes(view[2:6], "big", signed=True)
    if count < 0 or count * 2 > len(view) - 6:
        return None
    position = 6
    topics = []
    for _ in range(count):
        if position + 2 > len(view):
            return None
        length = int.from_bytes(view[position:position + 2], "big", signed=True)
        position += 2
        if length < 0 or position + length > len(view):
            return None
        try:
            topics.append(bytes(view[position:position + length]).decode())
        except UnicodeDecodeError:
            return None
        position += length
    return topics


def _inconsistent(requested: str | None, current: str | None) -> bool:
    return requested is not None and current is not None and requested != current
