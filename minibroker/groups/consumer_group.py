"""A KIP-848 consumer group and its members (Kafka's `ConsumerGroup`, `ConsumerGroupMember`,
`MemberState` and `CurrentAssignmentBuilder`): epochs, the target assignment, and the
reconciliation that moves each member towards its target without ever letting two members own a
partition at once.

The epochs:

* the *group epoch* goes up whenever what the assignment depends on changes: a member joins,
  leaves or changes its subscription, or a subscribed topic gains or loses partitions;
* the *assignment epoch* is the group epoch the target assignment was computed for (the manager
  recomputes it when the group epoch is ahead);
* a member's *epoch* is the assignment epoch it has caught up with; it moves only by reconciling.

Reconciliation (`reconcile`, Kafka's CurrentAssignmentBuilder), with the member's current
assignment `A`, its target `T` and its partitions pending revocation `R`:

    STABLE                 member epoch != target epoch -> compute the next step
    UNREVOKED_PARTITIONS   waits until the member's heartbeat no longer reports any of R as owned,
                           then moves to epoch + 1 and computes the next step
    UNRELEASED_PARTITIONS  computes the next step again (a partition it waits for may be free now)

    next step:  keep A' = A & T; R' = A - A'; P = T - A' minus the partitions another member still
                holds (its partition epoch is set)
                R' not empty (and still owned)   -> UNREVOKED_PARTITIONS at the same epoch, A'
                P not empty                      -> target epoch, A' + P, STABLE or, if a target
                                                    partition is still held elsewhere,
                                                    UNRELEASED_PARTITIONS
                a target partition held elsewhere-> target epoch, A', UNRELEASED_PARTITIONS
                otherwise                        -> target epoch, A', STABLE

A partition leaves a member's (assigned + pending revocation) set only when its heartbeat shows it
revoked, and joins another's only when no member holds it (`ConsumerGroup.partition_epochs`, the
epoch of each partition's current holder, which `update_member` keeps and which refuses a partition
held twice: IllegalStateError, our bug). That is "revoke before assign".

The group's state (Kafka's ConsumerGroupState): Empty (no members), Assigning (group epoch ahead of
the assignment epoch), Reconciling (a member not yet at the assignment epoch, or not STABLE),
Stable, and Dead once deleted.

Pure data and rules: no trio, no clock; deadlines are monotonic seconds the manager sets.
"""

from __future__ import annotations

import enum
import uuid
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Callable, Iterable, Mapping

from minibroker.groups.api import CONSUMER, CONSUMER_PROTOCOL_TYPE
from minibroker.protocol.errors import ErrorCode
from minibroker.storage.consumer_group_records import (
    StoredConsumerGroup,
    StoredConsumerMember,
    StoredMemberAssignment,
    StoredTopicMetadata,
)

if TYPE_CHECKING:
    from minibroker.storage.group_records import OffsetAndMetadata

Assignment = Mapping[uuid.UUID, frozenset[int]]
EMPTY_ASSIGNMENT: Assignment = {}

LEAVE_GROUP_MEMBER_EPOCH = -1
LEAVE_GROUP_STATIC_MEMBER_EPOCH = -2


class MemberState(enum.IntEnum):
    """Kafka's MemberState, with its persisted byte values."""

    STABLE = 0
    UNREVOKED_PARTITIONS = 1
    UNRELEASED_PARTITIONS = 2
    UNKNOWN = 127

    @classmethod
    def from_value(cls, value: int) -> MemberState:
        try:
            return cls(value)
        except ValueError:
            return cls.UNKNOWN


class ConsumerGroupState(enum.Enum):
    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"


class IllegalStateError(AssertionError):
    """Our bug: a partition would be held by two members at once."""


class FencedMemberEpoch(Exception):
    """The member must give up its partitions and rejoin (FENCED_MEMBER_EPOCH)."""


def normalize(assignment: Mapping[uuid.UUID, Iterable[int]]) -> dict[uuid.UUID, frozenset[int]]:
    """An assignment without empty topics, its partitions as frozensets."""
    return {t: frozenset(ps) for t, ps in assignment.items() if ps}


def count(assignment: Assignment) -> int:
    return sum(len(ps) for ps in assignment.values())


@dataclass(frozen=True)
class ConsumerGroupMember:
    """One member of a consumer group (immutable: the manager builds updated copies, as Kafka's
    ConsumerGroupMember.Builder, and the group swaps them in with `update_member`)."""

    member_id: str
    member_epoch: int = 0
    previous_member_epoch: int = 0
    state: MemberState = MemberState.STABLE
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    assigned: Assignment = field(default_factory=dict)
    pending_revocation: Assignment = field(default_factory=dict)

    def is_reconciled_to(self, target_epoch: int) -> bool:
        return self.state is MemberState.STABLE and self.member_epoch == target_epoch

    def with_epoch(self, epoch: int, **changes) -> ConsumerGroupMember:
        """Kafka's updateMemberEpoch: the previous epoch is kept for a lost response."""
        return replace(self, member_epoch=epoch, previous_member_epoch=self.member_epoch, **changes)

    # -- records --------------------------------------------------------------------------------

    def stored_metadata(self) -> StoredConsumerMember:
        return StoredConsumerMember(self.instance_id, self.rack_id, self.client_id, self.client_host,
                                    self.subscribed_topic_names, self.subscribed_topic_regex,
                                    self.rebalance_timeout_ms, self.server_assignor)

    def stored_assignment(self) -> StoredMemberAssignment:
        return StoredMemberAssignment(self.member_epoch, self.previous_member_epoch, int(self.state),
                                      dict(self.assigned), dict(self.pending_revocation))

    @classmethod
    def from_records(cls, member_id: str, metadata: StoredConsumerMember | None,
                     current: StoredMemberAssignment | None) -> ConsumerGroupMember:
        """The member as its records describe it (a member with only one of its records, which a
        crash between two of Kafka's appends could leave, gets defaults for the other)."""
        member = cls(member_id)
        if metadata is not None:
            member = replace(member, instance_id=metadata.instance_id, rack_id=metadata.rack_id,
                             client_id=metadata.client_id, client_host=metadata.client_host,
                             subscribed_topic_names=tuple(metadata.subscribed_topic_names),
                             subscribed_topic_regex=metadata.subscribed_topic_regex,
                             rebalance_timeout_ms=metadata.rebalance_timeout_ms,
                             server_assignor=metadata.server_assignor)
        if current is not None:
            member = replace(member, member_epoch=current.member_epoch,
                             previous_member_epoch=current.previous_member_epoch,
                             state=MemberState.from_value(current.state),
                             assigned=normalize(current.assigned),
                             pending_revocation=normalize(current.pending_revocation))
        return member


@dataclass(frozen=True)
class TopicMetadata:
    """A subscribed topic as the group last saw it (Kafka's subscription metadata)."""

    topic_id: uuid.UUID
    name: str
    num_partitions: int


def held_partitions(member: ConsumerGroupMember) -> list[tuple[uuid.UUID, int]]:
    """The partitions a member holds: assigned, or pending revocation (not released yet)."""
    return [(t, p) for a in (member.assigned, member.pending_revocation) for t, ps in a.items() for p in ps]


def owns_any(owned: Mapping[uuid.UUID, Iterable[int]] | None, partitions: Assignment) -> bool:
    """Whether the member's reported partitions include any of `partitions`; unknown (None: the
    heartbeat did not say) counts as yes."""
    if owned is None:
        return True
    return any(p in partitions.get(topic_id, ()) for topic_id, ps in owned.items() for p in ps)


def reconcile(member: ConsumerGroupMember, target_epoch: int, target: Assignment,
              partition_epoch: Callable[[uuid.UUID, int], int],
              owned: Mapping[uuid.UUID, Iterable[int]] | None) -> ConsumerGroupMember:
    """One step of Kafka's CurrentAssignmentBuilder (see the module docstring). `partition_epoch`
    is the epoch of a partition's current holder, -1 when free; `owned` what the member's heartbeat
    reported (None when it did not)."""
    if member.state is MemberState.STABLE:
        if member.member_epoch != target_epoch:
            return _next_assignment(member, member.member_epoch, target_epoch, target, partition_epoch, owned)
        return member
    if member.state is MemberState.UNREVOKED_PARTITIONS:
        if owns_any(owned, member.pending_revocation):
            return member
        return _next_assignment(member, member.member_epoch + 1, target_epoch, target, partition_epoch, owned)
    if member.state is MemberState.UNRELEASED_PARTITIONS:
        return _next_assignment(member, member.member_epoch, target_epoch, target, partition_epoch, owned)
    # UNKNOWN: a state a newer coordinator wrote. Start over from nothing, as Kafka does.
    if owned is None or any(owned.values()):
        raise FencedMemberEpoch("The consumer group member is in a unknown state. "
                                "The member must abandon all its partitions and rejoin.")
    return _next_assignment(member, target_epoch, target_epoch, target, partition_epoch, owned)


def _next_assignment(member: ConsumerGroupMember, epoch: int, target_epoch: int, target: Assignment,
                     partition_epoch: Callable[[uuid.UUID, int], int],
                     owned: Mapping[uuid.UUID, Iterable[int]] | None) -> ConsumerGroupMember:
    assigned: dict[uuid.UUID, frozenset[int]] = {}
    revoking: dict[uuid.UUID, frozenset[int]] = {}
    incoming: dict[uuid.UUID, frozenset[int]] = {}
    unreleased = False
    for topic_id in set(target) | set(member.assigned):
        wanted = target.get(topic_id, frozenset())
        current = member.assigned.get(topic_id, frozenset())
        keep = current & wanted
        if keep:
            assigned[topic_id] = keep
        if current - keep:
            revoking[topic_id] = current - keep
        free = frozenset(p for p in wanted - keep if partition_epoch(topic_id, p) == -1)
        if len(free) < len(wanted - keep):
            unreleased = True
        if free:
            incoming[topic_id] = free
    if revoking and owns_any(owned, revoking):
        # Revoke first: the member stays at its epoch until it acknowledges the revocation.
        return member.with_epoch(epoch, state=MemberState.UNREVOKED_PARTITIONS, assigned=assigned,
                                 pending_revocation=revoking)
    for topic_id, ps in incoming.items():
        assigned[topic_id] = assigned.get(topic_id, frozenset()) | ps
    state = MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE
    return member.with_epoch(target_epoch, state=state, assigned=assigned, pending_revocation={})


class ConsumerGroup:
    """A consumer group (KIP-848). Implements the api.Group interface."""

    group_type = CONSUMER
    protocol_type = CONSUMER_PROTOCOL_TYPE

    def __init__(self, group_id: str, now_ms: int = -1) -> None:
        self.group_id = group_id
        self.group_epoch = 0
        self.assignment_epoch = 0
        self.members: dict[str, ConsumerGroupMember] = {}
        self.static_members: dict[str, str] = {}  # instance id -> member id
        self.target_assignment: dict[str, Assignment] = {}
        self.subscription_metadata: dict[str, TopicMetadata] = {}
        # (topic id, partition) -> the epoch of the member holding it (assigned or revoking).
        self.partition_epochs: dict[tuple[uuid.UUID, int], int] = {}
        self.state = ConsumerGroupState.EMPTY
        self.state_timestamp_ms = now_ms
        # Deadlines, monotonic seconds: the session of each member, and for a member that must
        # revoke, (deadline, the epoch it must leave by then).
        self.session_deadlines: dict[str, float] = {}
        self.rebalance_deadlines: dict[str, tuple[float, int]] = {}
        self.sessions_started = True  # False for a group loaded at start-up, until its timers are set

    def __repr__(self) -> str:
        return (f"<ConsumerGroup {self.group_id} {self.state.value} epoch {self.group_epoch}/"
                f"{self.assignment_epoch} {list(self.members)}>")

    # -- the Group interface (api.Group) ------------------------------------------------------------

    @property
    def state_name(self) -> str:
        return self.state.value

    def is_dead(self) -> bool:
        return self.state is ConsumerGroupState.DEAD

    def is_empty(self) -> bool:
        return self.state is ConsumerGroupState.EMPTY

    def validate_offset_commit(self, generation_id: int, member_id: str, instance_id: str | None,
                               api_version: int = 9) -> ErrorCode:
        """Kafka's ConsumerGroup.validateOffsetCommit: epoch -1 commits (admin tools, assign()
        consumers) only while the group has no members; a member commits with its current epoch
        (STALE_MEMBER_EPOCH otherwise), with OffsetCommit v9 or later."""
        if self.is_dead():
            return ErrorCode.coordinator_not_available
        if generation_id < 0 and not self.members:
            return ErrorCode.none
        member = self.members.get(member_id)
        if member is None:
            return ErrorCode.unknown_member_id
        if api_version < 9:
            return ErrorCode.unsupported_version
        if generation_id != member.member_epoch:
            return ErrorCode.stale_member_epoch
        return ErrorCode.none

    def validate_offset_fetch(self, member_id: str | None, member_epoch: int) -> ErrorCode:
        """Kafka's validateOffsetFetch: no member id and epoch -1 (admin tools, classic clients)
        may always fetch; a member fetches with its current epoch."""
        if member_id is None and member_epoch < 0:
            return ErrorCode.none
        member = self.members.get(member_id or "")
        if member is None:
            return ErrorCode.unknown_member_id
        if member_epoch != member.member_epoch:
            return ErrorCode.stale_member_epoch
        return ErrorCode.none

    def validate_offset_delete(self) -> ErrorCode:
        return ErrorCode.none  # subscribed topics keep theirs: GROUP_SUBSCRIBED_TO_TOPIC per partition

    def validate_delete_group(self) -> ErrorCode:
        return ErrorCode.none if self.is_empty() else ErrorCode.non_empty_group

    def is_subscribed_to_topic(self, topic: str) -> bool:
        return any(topic in m.subscribed_topic_names for m in self.members.values()) or any(
            topic == name for name in self.subscription_metadata)

    def offset_expiration_base(self) -> Callable[[OffsetAndMetadata], int] | None:
        """A consumer group's offsets expire offsets.retention.minutes after their commit, and only
        those of topics it does not subscribe to (the offsets manager checks that)."""
        return lambda om: om.commit_timestamp_ms

    def mark_dead(self, now_ms: int) -> None:
        self.state = ConsumerGroupState.DEAD
        self.state_timestamp_ms = now_ms

    # -- members ------------------------------------------------------------------------------------

    def static_member(self, instance_id: str | None) -> ConsumerGroupMember | None:
        member_id = self.static_members.get(instance_id) if instance_id is not None else None
        return self.members.get(member_id) if member_id is not None else None

    def partition_epoch(self, topic_id: uuid.UUID, partition: int) -> int:
        return self.partition_epochs.get((topic_id, partition), -1)

    def _remove_partition_epochs(self, member: ConsumerGroupMember) -> None:
        for tp in held_partitions(member):
            held = self.partition_epochs.pop(tp, None)
            if held != member.member_epoch:
                raise IllegalStateError(
                    f"group {self.group_id}: {tp[0]}-{tp[1]} was held at epoch {held}, "
                    f"not at {member.member_id}'s epoch {member.member_epoch}")

    def _add_partition_epochs(self, member: ConsumerGroupMember) -> None:
        held = [(tp, self.partition_epochs[tp]) for tp in held_partitions(member) if tp in self.partition_epochs]
        if held:
            (topic_id, p), epoch = held[0]
            raise IllegalStateError(f"group {self.group_id}: {topic_id}-{p} given to {member.member_id} "
                                    f"while still held at epoch {epoch}")
        for tp in held_partitions(member):
            self.partition_epochs[tp] = member.member_epoch

    def update_member(self, member: ConsumerGroupMember) -> None:
        """Add or replace a member (Kafka's updateMember), keeping the partition epochs: a
        partition another member holds is never given to this one (IllegalStateError)."""
        old = self.members.get(member.member_id)
        if old is not None:
            self._remove_partition_epochs(old)
        try:
            self._add_partition_epochs(member)
        except IllegalStateError:
            if old is not None:
                self._add_partition_epochs(old)  # the group stays as it was
            raise
        if old is not None and old.instance_id is not None and old.instance_id != member.instance_id:
            self.static_members.pop(old.instance_id, None)
        self.members[member.member_id] = member
        if member.instance_id is not None:
            self.static_members[member.instance_id] = member.member_id

    def remove_member(self, member_id: str) -> ConsumerGroupMember | None:
        member = self.members.pop(member_id, None)
        if member is None:
            return None
        self._remove_partition_epochs(member)
        if member.instance_id is not None and self.static_members.get(member.instance_id) == member_id:
            del self.static_members[member.instance_id]
        self.target_assignment.pop(member_id, None)
        self.session_deadlines.pop(member_id, None)
        self.rebalance_deadlines.pop(member_id, None)
        return member

    def target_of(self, member_id: str, instance_id: str | None = None) -> Assignment:
        """A member's target assignment; a static member replacing another gets the one it
        replaces (Kafka's targetAssignment(memberId, instanceId))."""
        if member_id in self.target_assignment:
            return self.target_assignment[member_id]
        previous = self.static_members.get(instance_id) if instance_id is not None else None
        if previous is not None:
            return self.target_assignment.get(previous, EMPTY_ASSIGNMENT)
        return EMPTY_ASSIGNMENT

    # -- state ----------------------------------------------------------------------------------------

    def compute_state(self) -> ConsumerGroupState:
        if self.state is ConsumerGroupState.DEAD:
            return self.state
        if not self.members:
            return ConsumerGroupState.EMPTY
        if self.group_epoch > self.assignment_epoch:
            return ConsumerGroupState.ASSIGNING
        if any(not m.is_reconciled_to(self.assignment_epoch) for m in self.members.values()):
            return ConsumerGroupState.RECONCILING
        return ConsumerGroupState.STABLE

    def refresh_state(self, now_ms: int) -> None:
        state = self.compute_state()
        if state is not self.state:
            self.state = state
            self.state_timestamp_ms = now_ms

    # -- records --------------------------------------------------------------------------------------

    def to_stored(self) -> StoredConsumerGroup:
        """The group's records' content (what Kafka's records for it hold now)."""
        return StoredConsumerGroup(
            epoch=self.group_epoch,
            subscription_metadata=tuple(
                StoredTopicMetadata(t.topic_id, t.name, t.num_partitions)
                for _, t in sorted(self.subscription_metadata.items())),
            assignment_epoch=self.assignment_epoch,
            members={m.member_id: m.stored_metadata() for m in self.members.values()},
            target_assignments={k: dict(v) for k, v in self.target_assignment.items()},
            current_assignments={m.member_id: m.stored_assignment() for m in self.members.values()},
        )

    @classmethod
    def from_stored(cls, group_id: str, stored: StoredConsumerGroup, now_ms: int) -> ConsumerGroup:
        """The group as a restart finds it (Kafka replays the records the same way). Its members'
        sessions start when the coordinator's timers do (`sessions_started`)."""
        group = cls(group_id, now_ms)
        group.group_epoch = stored.epoch or 0
        group.assignment_epoch = stored.assignment_epoch if stored.assignment_epoch is not None else 0
        group.subscription_metadata = {
            t.name: TopicMetadata(t.topic_id, t.name, t.num_partitions) for t in stored.subscription_metadata or ()}
        for member_id in sorted(stored.members.keys() | stored.current_assignments.keys()):
            member = ConsumerGroupMember.from_records(member_id, stored.members.get(member_id),
                                                      stored.current_assignments.get(member_id))
            group.update_member(member)
        group.target_assignment = {m: normalize(a) for m, a in stored.target_assignments.items()}
        group.refresh_state(now_ms)
        group.sessions_started = not group.members
        return group
