"""A classic group and its state machine (Kafka's `ClassicGroup`, `ClassicGroupMember` and
`ClassicGroupState`): the members, the generation, the protocol vote, and the transition table

    Empty --join--> PreparingRebalance --all joined / rebalance timeout--> CompletingRebalance
    CompletingRebalance --leader's SyncGroup--> Stable
    Stable / CompletingRebalance --join with new metadata, leader join, leave, member expiry-->
        PreparingRebalance
    PreparingRebalance --every member gone when the join completes--> Empty
    any --deleted or all offsets expired--> Dead

enforced by `transition_to` (a transition outside the table is our bug: IllegalStateTransition).

Pure data and rules: no trio, no clock. State timestamps are wall-clock milliseconds passed in as
`now_ms`; the deadlines kept on the group and its members (`join_deadline`, `heartbeat_deadline`,
...) are monotonic seconds that classic_manager.py sets and fires. What the protocol does with a
group (joins, syncs, heartbeats, timeouts) is in classic_manager.py; this module is what a group is.
"""

from __future__ import annotations

import enum
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Iterable

from minibroker.groups.api import CLASSIC, CONSUMER_PROTOCOL_TYPE, GroupDescription, MemberDescription, Pending
from minibroker.protocol.errors import ErrorCode
from minibroker.storage.group_records import StoredGroup, StoredMember

if TYPE_CHECKING:
    from minibroker.storage.group_records import OffsetAndMetadata

log = logging.getLogger(__name__)


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


@dataclass(eq=False)
class ClassicGroupMember:
    """One member of a classic group (Kafka's ClassicGroupMember)."""

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
    heartbeat_deadline: float | None = None  # monotonic seconds; None: no expiry scheduled

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
    """A group of the classic protocol (JoinGroup/SyncGroup), or a "simple" group that only stores
    offsets (no protocol type). Implements the api.Group interface."""

    def __init__(self, group_id: str, now_ms: int = -1) -> None:
        self.group_id = group_id
        self.state = EMPTY
        self.previous_state: GroupState | None = None
        self.state_timestamp_ms = now_ms  # wall clock, when the group entered its state
        self.protocol_type: str | None = None
        self.protocol_name: str | None = None
        self.generation_id = 0
        self.leader_id: str | None = None
        self.members: dict[str, ClassicGroupMember] = {}  # in join order; the first is the fallback leader
        self.static_members: dict[str, str] = {}  # group.instance.id -> member id
        self.pending_members: dict[str, float] = {}  # KIP-394 member id -> expiry (monotonic seconds)
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

    @classmethod
    def from_record(cls, group_id: str, stored: StoredGroup | None, now_ms: int) -> ClassicGroup:
        """The group as a new coordinator finds it (Kafka's ClassicGroup.fromRecord): the generation,
        protocol type and protocol of its last record, and its members with their metadata for that
        protocol and their assignments, Stable (Empty without members). The coordinator then gives
        each member a session (`ClassicGroupManager.start_timers`, Kafka's onLoaded): a member that
        goes on heartbeating is answered as before, with no rebalance; one that does not expires.
        A simple group when only offsets were stored; a record of the old layout (a member count
        without the members) loads Empty, its members rejoin."""
        group = cls(group_id, now_ms)
        if stored is not None:
            group.protocol_type = stored.protocol_type or None
            group.generation_id = stored.generation
            if stored.members == 0 and stored.state_timestamp_ms >= 0:
                group.state_timestamp_ms = stored.state_timestamp_ms
            if stored.member_metadata:
                group.protocol_name = stored.protocol or None
                for m in stored.member_metadata:
                    member = ClassicGroupMember(
                        m.member_id, m.group_instance_id, m.client_id, m.client_host, m.rebalance_timeout_ms,
                        m.session_timeout_ms, group.protocol_type or "", [(stored.protocol, m.subscription)],
                        m.assignment)
                    group.members[m.member_id] = member
                    if m.group_instance_id is not None:
                        group.static_members[m.group_instance_id] = m.member_id
                group.leader_id = stored.leader if stored.leader in group.members else next(iter(group.members))
                group.state = STABLE
                if stored.state_timestamp_ms >= 0:
                    group.state_timestamp_ms = stored.state_timestamp_ms
        group.subscribed_topics = group.compute_subscribed_topics()
        return group

    def to_record(self) -> StoredGroup:
        """The group's record in __consumer_offsets (Kafka's newGroupMetadataRecord): each member
        with its metadata for the group's protocol and its current assignment."""
        members = tuple(
            StoredMember(m.member_id, m.group_instance_id, m.client_id, m.client_host, m.rebalance_timeout_ms,
                         m.session_timeout_ms, m.metadata(self.protocol_name), m.assignment)
            for m in self.members.values()
        )
        return StoredGroup(self.protocol_type or "", self.generation_id, self.protocol_name or "",
                           len(members), self.state_timestamp_ms, self.leader_id, members)

    def describe(self) -> GroupDescription:
        """DescribeGroups' view (Kafka's asDescribedGroup): member metadata and the protocol only
        while Stable, assignments always."""
        stable = self.is_(STABLE)
        return GroupDescription(
            self.group_id,
            self.state.value,
            self.protocol_type or "",
            (self.protocol_name or "") if stable else "",
            [
                MemberDescription(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                                  m.metadata(self.protocol_name) if stable else b"", m.assignment)
                for m in self.members.values()
            ],
        )

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

    # -- the Group interface (api.Group), for the registry, ListGroups, DeleteGroups and offsets --

    group_type = CLASSIC

    @property
    def state_name(self) -> str:
        return self.state.value

    def is_dead(self) -> bool:
        return self.state is DEAD

    def is_empty(self) -> bool:
        return self.state is EMPTY

    def validate_offset_commit(self, generation_id: int, member_id: str, instance_id: str | None,
                               api_version: int = 9) -> ErrorCode:
        """Kafka's ClassicGroup.validateOffsetCommit: a member of the current generation commits,
        except while the assignment is being handed out; so does a "simple" committer (generation
        -1, no member id) while the group is Empty."""
        if self.is_(DEAD):
            return ErrorCode.coordinator_not_available
        if generation_id < 0 and self.is_(EMPTY):
            return ErrorCode.none
        if generation_id >= 0 or member_id or instance_id is not None:
            error = self.validate_member(member_id, instance_id)
            if error:
                return error
            if generation_id != self.generation_id:
                return ErrorCode.illegal_generation
        elif not self.is_(EMPTY):
            return ErrorCode.unknown_member_id
        if self.is_(COMPLETING_REBALANCE):
            return ErrorCode.rebalance_in_progress
        return ErrorCode.none

    def validate_offset_fetch(self, member_id: str | None, member_epoch: int) -> ErrorCode:
        """A classic group does not check who fetches (Kafka's ClassicGroup.validateOffsetFetch)."""
        return ErrorCode.none

    def validate_offset_delete(self) -> ErrorCode:
        """Offsets of a group with members may be deleted only when it is a consumer group (whose
        subscriptions say which topics are in use)."""
        if not self.is_(EMPTY) and self.protocol_type != CONSUMER_PROTOCOL_TYPE:
            return ErrorCode.non_empty_group
        return ErrorCode.none

    def validate_delete_group(self) -> ErrorCode:
        return ErrorCode.none if self.is_(EMPTY) else ErrorCode.non_empty_group

    def offset_expiration_base(self) -> Callable[[OffsetAndMetadata], int] | None:
        """KIP-211: a group's offsets expire `offsets.retention.minutes` after it became Empty (after
        their commit when that time is unknown); a simple group's (no protocol type) after their
        commit. Members may still need the offsets of a group that is not Empty: None."""
        if not self.protocol_type:
            return lambda om: om.commit_timestamp_ms
        if not self.is_(EMPTY):
            return None
        if self.state_timestamp_ms >= 0:
            became_empty = self.state_timestamp_ms
            return lambda om: became_empty
        return lambda om: om.commit_timestamp_ms

    def mark_dead(self, now_ms: int) -> None:
        self.transition_to(DEAD, now_ms)

    # -- membership -------------------------------------------------------------------------------

    def add(self, member: ClassicGroupMember, pending: Pending | None) -> None:
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

    def remove(self, member_id: str) -> ClassicGroupMember | None:
        member = self.members.pop(member_id, None)
        if member is not None and member.group_instance_id is not None:
            self.static_members.pop(member.group_instance_id, None)
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        self.pending_members.pop(member_id, None)
        self.pending_sync.discard(member_id)
        return member

    def replace_static_member(self, instance_id: str, old_id: str, new_id: str) -> ClassicGroupMember:
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

    def validate_member(self, member_id: str, instance_id: str | None) -> ErrorCode:
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

    def not_yet_rejoined(self) -> list[ClassicGroupMember]:
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
