"""A KIP-1071 streams group and its members (Kafka 4.4's `StreamsGroup`, `StreamsGroupMember`,
`TasksTuple(WithEpochs)` and the streams `CurrentAssignmentBuilder`): the topology, the epochs, the
target assignment of tasks, and the reconciliation that moves each member towards its target.

A task is (subtopology id, partition): a subtopology of the application's topology runs as many
tasks as its largest input topic has partitions (topics.py configures that). A member holds active
tasks (it processes them; each carries the epoch it was assigned at, which OffsetCommit checks),
standby tasks (a copy of a stateful task's stores, kept from its changelog) and warm-up tasks
(Kafka 4.4's coordinator assigns none: its AssignmentRefiner leaves the target as the assignor made
it). Members of one Streams instance share a *process id*: a task may pass between two members of
one process only once the first has released it.

The epochs are the consumer group's (consumer_group.py): the group epoch goes up when what the
assignment depends on changes (a member joins, leaves, or changes its process, rack, client tags or
topology epoch; the topology's topics change; the assignment configs change); the assignment epoch is
the group epoch the target was computed for; a member's epoch is the assignment epoch it has caught
up with.

Reconciliation (`reconcile`, Kafka's streams CurrentAssignmentBuilder), member states:

    STABLE              epoch behind the target's -> compute the next step
    UNREVOKED_TASKS     waits until the member no longer reports any task pending revocation
                        (an unknown owned set counts as still holding them), then epoch + 1 and
                        the next step
    UNRELEASED_TASKS    computes the next step again (a task it waits for may be free now)
    UNKNOWN             a state a newer coordinator wrote: the member starts over if it owns
                        nothing, else FENCED_MEMBER_EPOCH

    next step, for each role: keep = current & target, revoke = current - keep, assign =
    target - keep minus the tasks not yet released by others (an active task held by any member;
    a standby or warm-up held on this process, ...); a task moving between roles on the member
    (active -> standby, standby <-> warm-up) changes at once, and a standby or warm-up becoming
    active keeps its old role until the active one is granted. Then: something to revoke that the
    member still owns -> UNREVOKED_TASKS at the same epoch; else the target epoch with the
    assigned tasks, UNRELEASED_TASKS while some target task is held elsewhere, else STABLE.

Group states (Kafka's StreamsGroupState): Empty (no members), NotReady (the topology is not
validated: source topics missing, internal topics being created, ...), Assigning (group epoch ahead
of the assignment epoch), Reconciling, Stable, and Dead once deleted.

Pure data and rules: no trio, no clock; deadlines are monotonic seconds the manager sets.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Callable, Iterable, Mapping

from minibroker.protocol.errors import ErrorCode
from minibroker.storage.streams_group_records import (
    StoredStreamsAssignment,
    StoredStreamsGroup,
    StoredStreamsGroupMetadata,
    StoredStreamsMember,
    StoredTasks,
    StoredTopology,
)

if TYPE_CHECKING:
    from minibroker.groups.streams_topics import ConfiguredTopology
    from minibroker.storage.group_records import OffsetAndMetadata

STREAMS = "streams"  # ListGroups v5's group type and the protocol type
LEAVE_GROUP_MEMBER_EPOCH = -1
LEAVE_GROUP_STATIC_MEMBER_EPOCH = -2

Tasks = dict[str, frozenset[int]]  # subtopology id -> partitions; no empty sets
ActiveTasks = dict[str, dict[int, int]]  # subtopology id -> partition -> the epoch it was assigned at


class MemberState(enum.IntEnum):
    """Kafka's streams MemberState, with its persisted byte values."""

    STABLE = 1
    UNREVOKED_TASKS = 2
    UNRELEASED_TASKS = 3
    UNKNOWN = 127

    @classmethod
    def from_value(cls, value: int) -> MemberState:
        try:
            return cls(value)
        except ValueError:
            return cls.UNKNOWN


class StreamsGroupState(enum.Enum):
    EMPTY = "Empty"
    NOT_READY = "NotReady"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"


class FencedMemberEpoch(Exception):
    """The member must give up its tasks and rejoin (FENCED_MEMBER_EPOCH)."""


def tasks_of(items: Mapping[str, Iterable[int]]) -> Tasks:
    return {s: frozenset(ps) for s, ps in items.items() if ps}


def _merge(a: Mapping[str, Iterable[int]], b: Mapping[str, Iterable[int]]) -> Tasks:
    out: dict[str, frozenset[int]] = {s: frozenset(ps) for s, ps in a.items() if ps}
    for s, ps in b.items():
        if ps:
            out[s] = out.get(s, frozenset()) | frozenset(ps)
    return out


@dataclass(frozen=True)
class TaskSet:
    """Kafka's TasksTuple: a target or an owned set of tasks, by role."""

    active: Tasks = field(default_factory=dict)
    standby: Tasks = field(default_factory=dict)
    warmup: Tasks = field(default_factory=dict)

    def is_empty(self) -> bool:
        return not (self.active or self.standby or self.warmup)

    def contains_any(self, other: AssignedTasks) -> bool:
        """Whether any of `other`'s tasks is in this set, role by role."""
        return (any(not ps.isdisjoint(other.active.get(s, {})) for s, ps in self.active.items())
                or any(not ps.isdisjoint(other.standby.get(s, ())) for s, ps in self.standby.items())
                or any(not ps.isdisjoint(other.warmup.get(s, ())) for s, ps in self.warmup.items()))


EMPTY_TASKS = TaskSet()


@dataclass(frozen=True)
class AssignedTasks:
    """Kafka's TasksTupleWithEpochs: a member's tasks, the active ones with their assignment epochs."""

    active: ActiveTasks = field(default_factory=dict)
    standby: Tasks = field(default_factory=dict)
    warmup: Tasks = field(default_factory=dict)

    def is_empty(self) -> bool:
        return not (self.active or self.standby or self.warmup)

    def task_set(self) -> TaskSet:
        return TaskSet({s: frozenset(ps) for s, ps in self.active.items() if ps}, dict(self.standby),
                       dict(self.warmup))

    def merge(self, other: AssignedTasks) -> AssignedTasks:
        active = {s: dict(ps) for s, ps in self.active.items()}
        for s, ps in other.active.items():
            active.setdefault(s, {}).update(ps)
        return AssignedTasks({s: ps for s, ps in active.items() if ps}, _merge(self.standby, other.standby),
                             _merge(self.warmup, other.warmup))

    def with_epochs_zero(self) -> AssignedTasks:
        """Kafka's resetAssignedTasksEpochsToZero (a static member leaving for a while)."""
        return replace(self, active={s: dict.fromkeys(ps, 0) for s, ps in self.active.items()})


NO_TASKS = AssignedTasks()


@dataclass(frozen=True)
class StreamsGroupMember:
    """One member of a streams group (immutable, as Kafka's StreamsGroupMember)."""

    member_id: str
    member_epoch: int = 0
    previous_member_epoch: int = 0
    state: MemberState = MemberState.STABLE
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    client_id: str = ""
    client_host: str = ""
    topology_epoch: int = -1
    process_id: str = ""
    user_endpoint: tuple[str, int] | None = None
    client_tags: tuple[tuple[str, str], ...] = ()
    assigned: AssignedTasks = NO_TASKS
    pending_revocation: AssignedTasks = NO_TASKS

    def is_reconciled_to(self, target_epoch: int) -> bool:
        return self.state is MemberState.STABLE and self.member_epoch == target_epoch

    def with_epoch(self, epoch: int, **changes) -> StreamsGroupMember:
        """Kafka's updateMemberEpoch: the previous epoch is kept for a lost response."""
        return replace(self, member_epoch=epoch, previous_member_epoch=self.member_epoch, **changes)

    def metadata(self) -> tuple:
        """What the member metadata record holds (a change writes the record)."""
        return (self.instance_id, self.rack_id, self.client_id, self.client_host, self.rebalance_timeout_ms,
                self.topology_epoch, self.process_id, self.user_endpoint, tuple(sorted(self.client_tags)))

    def stored_metadata(self) -> StoredStreamsMember:
        return StoredStreamsMember(self.instance_id, self.rack_id, self.client_id, self.client_host,
                                   self.rebalance_timeout_ms, self.topology_epoch, self.process_id,
                                   self.user_endpoint, tuple(sorted(self.client_tags)))

    def stored_assignment(self) -> StoredStreamsAssignment:
        a, r = self.assigned, self.pending_revocation
        return StoredStreamsAssignment(self.member_epoch, self.previous_member_epoch, int(self.state),
                                       a.active, a.standby, a.warmup, r.active, r.standby, r.warmup)

    @classmethod
    def from_records(cls, member_id: str, metadata: StoredStreamsMember | None,
                     current: StoredStreamsAssignment | None) -> StreamsGroupMember:
        member = cls(member_id)
        if metadata is not None:
            member = replace(member, instance_id=metadata.instance_id, rack_id=metadata.rack_id,
                             client_id=metadata.client_id, client_host=metadata.client_host,
                             rebalance_timeout_ms=metadata.rebalance_timeout_ms,
                             topology_epoch=metadata.topology_epoch, process_id=metadata.process_id,
                             user_endpoint=metadata.user_endpoint, client_tags=tuple(metadata.client_tags))
        if current is not None:
            member = replace(
                member, member_epoch=current.member_epoch, previous_member_epoch=current.previous_member_epoch,
                state=MemberState.from_value(current.state),
                assigned=AssignedTasks({s: dict(ps) for s, ps in current.active.items()}, tasks_of(current.standby),
                                       tasks_of(current.warmup)),
                pending_revocation=AssignedTasks({s: dict(ps) for s, ps in current.active_pending.items()},
                                                 tasks_of(current.standby_pending), tasks_of(current.warmup_pending)))
        return member


# --- reconciliation (Kafka's streams CurrentAssignmentBuilder) ---------------------------------


@dataclass(frozen=True)
class TaskHolders:
    """Who holds each task now, by process (the group's current assignment, all members)."""

    active: Callable[[str, int], str | None]  # the process id running the active task
    standby: Callable[[str, int], frozenset[str]]
    warmup: Callable[[str, int], frozenset[str]]


def _diff(current: Mapping[str, Iterable[int]], target: Tasks, unreleased: Callable[[str, int], bool]
          ) -> tuple[dict[str, set[int]], dict[str, set[int]], dict[str, set[int]], bool]:
    """(kept, to revoke, to assign now, whether some target task is unreleased)."""
    kept: dict[str, set[int]] = {}
    revoke: dict[str, set[int]] = {}
    assign: dict[str, set[int]] = {}
    waiting = False
    for s in set(target) | set(current):
        have = set(current.get(s, ()))
        want = set(target.get(s, ()))
        if have & want:
            kept[s] = have & want
        if have - want:
            revoke[s] = have - want
        incoming = {p for p in want - have if not unreleased(s, p)}
        if len(incoming) < len(want - have):
            waiting = True
        if incoming:
            assign[s] = incoming
    return kept, revoke, assign, waiting


def _has(tasks: Mapping[str, Iterable[int]], s: str, p: int) -> bool:
    return p in tasks.get(s, ())


def _take(tasks: dict[str, set[int]], s: str, p: int) -> None:
    ps = tasks.get(s)
    if ps is not None and p in ps:
        ps.discard(p)
        if not ps:
            del tasks[s]


def _grant(pending: dict[str, set[int]], assigned: dict[str, set[int]], s: str, p: int) -> None:
    _take(pending, s, p)
    assigned.setdefault(s, set()).add(p)


def reconcile(member: StreamsGroupMember, target_epoch: int, target: TaskSet, holders: TaskHolders,
              owned: TaskSet | None) -> StreamsGroupMember:
    """One step of Kafka's streams CurrentAssignmentBuilder (see the module docstring). `owned`:
    the tasks the member's heartbeat reported, None when it did not report them."""

    def not_released(tasks: AssignedTasks) -> bool:
        return owned is None or owned.contains_any(tasks)

    if member.state is MemberState.STABLE:
        if member.member_epoch != target_epoch:
            return _next(member, member.member_epoch, target_epoch, target, holders, not_released)
        return member
    if member.state is MemberState.UNREVOKED_TASKS:
        if not_released(member.pending_revocation):
            return member
        return _next(member, member.member_epoch + 1, target_epoch, target, holders, not_released)
    if member.state is MemberState.UNRELEASED_TASKS:
        return _next(member, member.member_epoch, target_epoch, target, holders, not_released)
    if owned is not None and owned.is_empty():
        return _next(member, target_epoch, target_epoch, target, holders, not_released)
    raise FencedMemberEpoch("The streams group member is in a unknown state. The member must abandon all its "
                            "tasks and rejoin.")


def _next(member: StreamsGroupMember, epoch: int, target_epoch: int, target: TaskSet, holders: TaskHolders,
          not_released: Callable[[AssignedTasks], bool]) -> StreamsGroupMember:
    assigned, process = member.assigned, member.process_id

    def held_elsewhere_here(where: Callable[[str, int], frozenset[str]], mine: Tasks, s: str, p: int) -> bool:
        return process in where(s, p) and not _has(mine, s, p)

    def active_unreleased(s: str, p: int) -> bool:
        return (holders.active(s, p) is not None or held_elsewhere_here(holders.standby, assigned.standby, s, p)
                or held_elsewhere_here(holders.warmup, assigned.warmup, s, p))

    def standby_unreleased(s: str, p: int) -> bool:
        run_here_by_other = holders.active(s, p) == process and not _has(assigned.active, s, p)
        return (run_here_by_other or process in holders.standby(s, p)
                or held_elsewhere_here(holders.warmup, assigned.warmup, s, p))

    def warmup_unreleased(s: str, p: int) -> bool:
        return (holders.active(s, p) == process or held_elsewhere_here(holders.standby, assigned.standby, s, p)
                or process in holders.warmup(s, p))

    # Active tasks keep their assignment epochs; new ones get the target epoch.
    a_kept_sets, a_revoke_sets, a_assign_sets, a_waiting = _diff(assigned.active, target.active, active_unreleased)
    a_kept = {s: {p: assigned.active[s][p] for p in ps} for s, ps in a_kept_sets.items()}
    a_revoke = {s: {p: assigned.active[s][p] for p in ps} for s, ps in a_revoke_sets.items()}
    s_kept, s_revoke, s_assign, s_waiting = _diff(assigned.standby, target.standby, standby_unreleased)
    w_kept, w_revoke, w_assign, w_waiting = _diff(assigned.warmup, target.warmup, warmup_unreleased)

    # An active task becoming a standby on this member: at once.
    for s, by_partition in assigned.active.items():
        for p in by_partition:
            if _has(s_assign, s, p):
                _grant(s_assign, s_kept, s, p)
    # Standby <-> warm-up on this member: at once, and the old role is not revoked.
    for outgoing, out_revoke, in_assign, in_kept in ((assigned.standby, s_revoke, w_assign, w_kept),
                                                     (assigned.warmup, w_revoke, s_assign, s_kept)):
        for s, ps in outgoing.items():
            for p in ps:
                if _has(in_assign, s, p):
                    _grant(in_assign, in_kept, s, p)
                    _take(out_revoke, s, p)
    # A standby or warm-up that becomes active is not revoked; it stays until the active task is granted.
    for mine, revoke in ((assigned.standby, s_revoke), (assigned.warmup, w_revoke)):
        for s, ps in mine.items():
            for p in ps:
                if _has(target.active, s, p):
                    _take(revoke, s, p)
    pending = AssignedTasks({s: ps for s, ps in a_revoke.items() if ps}, tasks_of(s_revoke), tasks_of(w_revoke))
    revoking = not pending.is_empty() and not_released(pending)
    for mine, kept in ((assigned.standby, s_kept), (assigned.warmup, w_kept)):
        for s, ps in mine.items():
            for p in ps:
                promoted_now = not revoking and p in a_assign_sets.get(s, ())
                if _has(target.active, s, p) and not promoted_now:
                    kept.setdefault(s, set()).add(p)

    kept_tasks = AssignedTasks(a_kept, tasks_of(s_kept), tasks_of(w_kept))
    if revoking:
        return member.with_epoch(epoch, state=MemberState.UNREVOKED_TASKS, assigned=kept_tasks,
                                 pending_revocation=pending)
    incoming = AssignedTasks({s: dict.fromkeys(ps, target_epoch) for s, ps in a_assign_sets.items() if ps},
                             tasks_of(s_assign), tasks_of(w_assign))
    waiting = a_waiting or s_waiting or w_waiting
    state = MemberState.UNRELEASED_TASKS if waiting else MemberState.STABLE
    return member.with_epoch(target_epoch, state=state, assigned=kept_tasks.merge(incoming) if not incoming.is_empty()
                             else kept_tasks, pending_revocation=NO_TASKS)


# --- the group ---------------------------------------------------------------------------------------


class StreamsGroup:
    """A streams group (KIP-1071). Implements the api.Group interface."""

    group_type = STREAMS
    protocol_type = STREAMS

    def __init__(self, group_id: str, now_ms: int = -1) -> None:
        self.group_id = group_id
        self.group_epoch = 0
        self.metadata_hash = 0
        self.validated_topology_epoch = -1
        self.last_assignment_configs: tuple[tuple[str, str], ...] | None = None
        self.assignment_epoch = 0
        self.assignment_timestamp_ms = 0
        self.topology: StoredTopology | None = None
        self.configured: ConfiguredTopology | None = None  # not persisted: recomputed from the topology
        self.members: dict[str, StreamsGroupMember] = {}
        self.static_members: dict[str, str] = {}
        self.target_assignment: dict[str, TaskSet] = {}
        self.shutdown_requested_by: str | None = None
        self.endpoint_information_epoch = 0  # in memory, as Kafka's
        self.state = StreamsGroupState.EMPTY
        self.state_timestamp_ms = now_ms
        self.session_deadlines: dict[str, float] = {}
        self.rebalance_deadlines: dict[str, tuple[float, int]] = {}
        self.initial_delay_deadline: float | None = None
        self.sessions_started = True

    def __repr__(self) -> str:
        return (f"<StreamsGroup {self.group_id} {self.state.value} epoch {self.group_epoch}/"
                f"{self.assignment_epoch} {list(self.members)}>")

    # -- the Group interface ----------------------------------------------------------------------

    @property
    def state_name(self) -> str:
        return self.state.value

    def is_dead(self) -> bool:
        return self.state is StreamsGroupState.DEAD

    def is_empty(self) -> bool:
        return self.state is StreamsGroupState.EMPTY

    def validate_offset_commit(self, generation_id: int, member_id: str, instance_id: str | None,
                               api_version: int = 9) -> ErrorCode:
        """Kafka's StreamsGroup.validateOffsetCommit: epoch -1 while the group has no members; a
        member with OffsetCommit v9+ and its epoch (a greater one is STALE_MEMBER_EPOCH; an older
        one is taken: Kafka then checks per partition that the task was assigned at or before it,
        which is not checked here)."""
        if self.is_dead():
            return ErrorCode.coordinator_not_available
        if generation_id < 0 and not self.members:
            return ErrorCode.none
        member = self.members.get(member_id)
        if member is None:
            return ErrorCode.unknown_member_id
        if api_version < 9:
            return ErrorCode.unsupported_version
        if generation_id > member.member_epoch:
            return ErrorCode.stale_member_epoch
        return ErrorCode.none

    def validate_offset_fetch(self, member_id: str | None, member_epoch: int) -> ErrorCode:
        if member_id is None and member_epoch < 0:
            return ErrorCode.none
        member = self.members.get(member_id or "")
        if member is None:
            return ErrorCode.unknown_member_id
        if member_epoch != member.member_epoch:
            return ErrorCode.stale_member_epoch
        return ErrorCode.none

    def validate_offset_delete(self) -> ErrorCode:
        return ErrorCode.none

    def validate_delete_group(self) -> ErrorCode:
        return ErrorCode.none if self.is_empty() else ErrorCode.non_empty_group

    def is_subscribed_to_topic(self, topic: str) -> bool:
        """Kafka's: while the group has members, the topics its topology reads (sources and
        repartition sources)."""
        if self.state in (StreamsGroupState.EMPTY, StreamsGroupState.DEAD) or self.topology is None:
            return False
        return any(topic in s.source_topics or any(t.name == topic for t in s.repartition_source_topics)
                   for s in self.topology.subtopologies)

    def offset_expiration_base(self) -> Callable[[OffsetAndMetadata], int] | None:
        return lambda om: om.commit_timestamp_ms

    def mark_dead(self, now_ms: int) -> None:
        self.state = StreamsGroupState.DEAD
        self.state_timestamp_ms = now_ms

    # -- members ------------------------------------------------------------------------------------

    def static_member(self, instance_id: str | None) -> StreamsGroupMember | None:
        member_id = self.static_members.get(instance_id) if instance_id is not None else None
        return self.members.get(member_id) if member_id is not None else None

    def update_member(self, member: StreamsGroupMember) -> None:
        old = self.members.get(member.member_id)
        if old is not None and old.instance_id is not None and old.instance_id != member.instance_id:
            self.static_members.pop(old.instance_id, None)
        self.members[member.member_id] = member
        if member.instance_id is not None:
            self.static_members[member.instance_id] = member.member_id

    def remove_member(self, member_id: str) -> StreamsGroupMember | None:
        member = self.members.pop(member_id, None)
        if member is None:
            return None
        if member.instance_id is not None and self.static_members.get(member.instance_id) == member_id:
            del self.static_members[member.instance_id]
        self.target_assignment.pop(member_id, None)
        self.session_deadlines.pop(member_id, None)
        self.rebalance_deadlines.pop(member_id, None)
        return member

    def holders(self, excluding: str | None = None) -> TaskHolders:
        """Who holds each task (assigned or pending revocation), by process: Kafka's
        currentActiveTaskProcessId and current{Standby,Warmup}TaskProcessIds."""
        active: dict[tuple[str, int], str] = {}
        standby: dict[tuple[str, int], set[str]] = {}
        warmup: dict[tuple[str, int], set[str]] = {}
        for m in self.members.values():
            if m.member_id == excluding:
                continue
            for tasks in (m.assigned, m.pending_revocation):
                for s, ps in tasks.active.items():
                    for p in ps:
                        active[(s, p)] = m.process_id
                for s, ids in tasks.standby.items():
                    for p in ids:
                        standby.setdefault((s, p), set()).add(m.process_id)
                for s, ids in tasks.warmup.items():
                    for p in ids:
                        warmup.setdefault((s, p), set()).add(m.process_id)
        return TaskHolders(lambda s, p: active.get((s, p)),
                           lambda s, p: frozenset(standby.get((s, p), ())),
                           lambda s, p: frozenset(warmup.get((s, p), ())))

    def target_of(self, member_id: str) -> TaskSet:
        return self.target_assignment.get(member_id, EMPTY_TASKS)

    # -- state ----------------------------------------------------------------------------------------

    def compute_state(self) -> StreamsGroupState:
        if self.state is StreamsGroupState.DEAD:
            return self.state
        if not self.members:
            return StreamsGroupState.EMPTY
        if self.topology is None or self.topology.epoch != self.validated_topology_epoch:
            return StreamsGroupState.NOT_READY
        if self.group_epoch > self.assignment_epoch:
            return StreamsGroupState.ASSIGNING
        if any(not m.is_reconciled_to(self.assignment_epoch) for m in self.members.values()):
            return StreamsGroupState.RECONCILING
        return StreamsGroupState.STABLE

    def refresh_state(self, now_ms: int) -> None:
        state = self.compute_state()
        if state is StreamsGroupState.EMPTY:
            self.shutdown_requested_by = None
        if state is not self.state:
            self.state = state
            self.state_timestamp_ms = now_ms

    # -- records --------------------------------------------------------------------------------------

    def to_stored(self) -> StoredStreamsGroup:
        return StoredStreamsGroup(
            metadata=StoredStreamsGroupMetadata(self.group_epoch, self.metadata_hash, self.validated_topology_epoch,
                                                self.last_assignment_configs),
            topology=self.topology,
            assignment_epoch=(self.assignment_epoch, self.assignment_timestamp_ms),
            members={m.member_id: m.stored_metadata() for m in self.members.values()},
            target_assignments={k: StoredTasks(v.active, v.standby, v.warmup) for k, v in self.target_assignment.items()},
            current_assignments={m.member_id: m.stored_assignment() for m in self.members.values()},
        )

    @classmethod
    def from_stored(cls, group_id: str, stored: StoredStreamsGroup, now_ms: int) -> StreamsGroup:
        group = cls(group_id, now_ms)
        if stored.metadata is not None:
            group.group_epoch = stored.metadata.epoch
            group.metadata_hash = stored.metadata.metadata_hash
            group.validated_topology_epoch = stored.metadata.validated_topology_epoch
            group.last_assignment_configs = stored.metadata.last_assignment_configs
        group.topology = stored.topology
        if stored.assignment_epoch is not None:
            group.assignment_epoch, group.assignment_timestamp_ms = stored.assignment_epoch
        for member_id in sorted(stored.members.keys() | stored.current_assignments.keys()):
            group.update_member(StreamsGroupMember.from_records(member_id, stored.members.get(member_id),
                                                                stored.current_assignments.get(member_id)))
        group.target_assignment = {m: TaskSet(tasks_of(t.active), tasks_of(t.standby), tasks_of(t.warmup))
                                   for m, t in stored.target_assignments.items()}
        group.refresh_state(now_ms)
        group.sessions_started = not group.members
        return group
