"""The classic group protocol: JoinGroup, SyncGroup, Heartbeat and LeaveGroup, the join and sync
phases, and the timeouts of a classic group (the classic half of Kafka's `GroupMetadataManager`,
group-coordinator module, late-2024 trunk).

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
Not done: group max size. A group id is one type at a time: a JoinGroup turns an Empty KIP-848
consumer group into a classic group (its offsets stay) and is refused INCONSISTENT_GROUP_PROTOCOL by
one with members; SyncGroup, Heartbeat and LeaveGroup find no classic member there
(UNKNOWN_MEMBER_ID).

Shape: each request is a plain method taking `now` (monotonic seconds, for deadlines) and, where the
group's state may change, `now_ms` (wall-clock milliseconds, for the timestamps stored). It answers
at once or returns a `Pending` that a later event completes (another member's request, a timer);
completing one asks the shard to wake whoever waits on the group. Timers are deadlines on the group
and its members, registered with the shard (`schedule`), which calls `fire_timers` for a group when
one is due. No trio, no clock: the shell (coordinator.py) supplies the times and does the waiting.
"""

from __future__ import annotations

import logging
import uuid
from functools import partial
from typing import TYPE_CHECKING, Callable, Iterable, cast

from minibroker.groups.api import (
    CLASSIC,
    CONSUMER,
    GroupDescription,
    JoinGroupRequest,
    JoinResult,
    Pending,
    SyncResult,
)
from minibroker.groups.classic_group import (
    COMPLETING_REBALANCE,
    DEAD,
    EMPTY,
    PREPARING_REBALANCE,
    STABLE,
    ClassicGroup,
    ClassicGroupMember,
)
from minibroker.groups.types import GroupType
from minibroker.protocol.errors import ErrorCode
from minibroker.storage.errors import storage_error_message
from minibroker.storage.group_records import ClassicGroupRecords

if TYPE_CHECKING:
    from minibroker.groups.api import Group
    from minibroker.groups.runtime import ShardRuntime

log = logging.getLogger(__name__)


class ClassicGroupManager:
    """The classic protocol's requests and timers, on the groups the shard holds (the classic
    group type's GroupTypeManager, groups/types.py)."""

    def __init__(self, shard: ShardRuntime) -> None:
        self.shard = shard
        self.config = shard.config
        self.rebalances = 0  # completed join phases, for tests and metrics
        self._loaded: list[str] = []  # groups loaded with members, whose sessions start at the next tick

    # -- the group type (groups/types.py) ---------------------------------------------------------

    def classic_group(self, group_id: str) -> ClassicGroup | None:
        """The classic group of that id; None when there is none, or the id is another type's."""
        group = self.shard.groups.get(group_id)
        return cast(ClassicGroup, group) if group is not None and group.group_type == CLASSIC else None

    def create_group(self, group_id: str, now_ms: int) -> ClassicGroup:
        """A new Empty classic group (not yet registered): as a JoinGroup or an OffsetCommit of a
        simple consumer creates one."""
        return ClassicGroup(group_id, now_ms)

    def load(self, now_ms: int) -> Iterable[Group]:
        """The classic groups of the store's GroupMetadata records, with their members
        (ClassicGroup.from_record)."""
        stored = self.shard.store.group_records(CLASSIC).groups
        groups = [ClassicGroup.from_record(group_id, record, now_ms) for group_id, record in stored.items()]
        self._loaded = [g.group_id for g in groups if g.members]
        return groups

    def start_timers(self, now: float) -> None:
        """A session for each member of the groups loaded (Kafka's onLoaded reschedules every
        member's heartbeat): a member that does not heartbeat the new coordinator within its
        session timeout expires, and the group rebalances without it."""
        loaded, self._loaded = self._loaded, []
        for group_id in loaded:
            classic = self.classic_group(group_id)
            if classic is None:
                continue
            for member in classic.members.values():
                if member.heartbeat_deadline is None:
                    self._schedule_heartbeat(classic, member, now)

    def close(self, group: Group) -> None:
        """Answer every request parked on the group: the coordinator is going away."""
        classic = cast(ClassicGroup, group)
        for member in classic.members.values():
            self._complete_join(classic, member, JoinResult(ErrorCode.coordinator_not_available, member.member_id))
            self._complete_sync(classic, member, SyncResult(ErrorCode.coordinator_not_available))

    # -- plumbing ---------------------------------------------------------------------------------

    def _complete_join(self, group: ClassicGroup, member: ClassicGroupMember, result: JoinResult) -> bool:
        pending, member.awaiting_join = member.awaiting_join, None
        if pending is None or pending.done:
            return False
        pending.result = result
        self.shard.wake(group.group_id)
        return True

    def _complete_sync(self, group: ClassicGroup, member: ClassicGroupMember, result: SyncResult) -> bool:
        pending, member.awaiting_sync = member.awaiting_sync, None
        if pending is None or pending.done:
            return False
        pending.result = result
        self.shard.wake(group.group_id)
        return True

    def _schedule_heartbeat(self, group: ClassicGroup, member: ClassicGroupMember, now: float,
                            timeout_ms: int | None = None) -> None:
        timeout = member.session_timeout_ms if timeout_ms is None else timeout_ms
        member.heartbeat_deadline = self.shard.schedule(group.group_id, now + timeout / 1000)

    def _drop_member(self, group: ClassicGroup, member: ClassicGroupMember) -> None:
        """Remove a member, answering any request it has parked with UNKNOWN_MEMBER_ID."""
        self._complete_join(group, member, JoinResult(ErrorCode.unknown_member_id))
        self._complete_sync(group, member, SyncResult(ErrorCode.unknown_member_id))
        group.remove(member.member_id)

    # -- JoinGroup --------------------------------------------------------------------------------

    def join_group(self, now: float, now_ms: int, request: JoinGroupRequest) -> Pending:
        """Handle a JoinGroup; the Pending completes when the join phase does."""
        pending = Pending()
        group_id, member_id = request.group_id, request.member_id
        if not group_id:
            pending.result = JoinResult(ErrorCode.invalid_group_id, member_id)
        elif not (self.config.min_session_timeout_ms <= request.session_timeout_ms
                  <= self.config.max_session_timeout_ms):
            pending.result = JoinResult(ErrorCode.invalid_session_timeout, member_id)
        else:
            existing = self.shard.groups.get(group_id)
            if existing is not None and existing.group_type != CLASSIC:
                if existing.group_type != CONSUMER or not existing.is_empty():
                    # Kafka 4 would take the member into a consumer group as a classic-protocol
                    # member (a mixed group); this broker keeps a group id to one type.
                    log.info("group %s: a classic member cannot join the %s group%s", group_id,
                             existing.group_type, ", which has members" if not existing.is_empty() else "")
                    pending.result = JoinResult(ErrorCode.inconsistent_group_protocol, member_id)
                    return pending
                # Kafka's maybeDeleteEmptyConsumerGroup: its records are tombstoned, its offsets stay.
                self.shard.drop_group_records(group_id, now_ms)
                log.info("group %s: the Empty consumer group becomes a classic group (its offsets stay)", group_id)
            group = self.classic_group(group_id)
            if group is None:
                if member_id:
                    pending.result = JoinResult(ErrorCode.unknown_member_id, member_id)
                    return pending
                group = self.create_group(group_id, now_ms)
                self.shard.register(group)
            if member_id:
                self._join_existing_member(now, now_ms, group, request, pending)
            else:
                self._join_new_member(now, now_ms, group, request, pending)
        return pending

    def _join_new_member(self, now: float, now_ms: int, group: ClassicGroup, req: JoinGroupRequest,
                         pending: Pending) -> None:
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
                self._replace_static_member(now, now_ms, group, req, existing, new_id, pending)
            else:
                self._add_member_and_rebalance(now, now_ms, group, req, new_id, pending)
        elif req.require_known_member_id:
            # KIP-394: hand out the id and wait for the member to come back with it.
            expiry = now + req.session_timeout_ms / 1000
            group.pending_members[new_id] = self.shard.schedule(group.group_id, expiry)
            pending.result = JoinResult(ErrorCode.member_id_required, new_id)
        else:
            self._add_member_and_rebalance(now, now_ms, group, req, new_id, pending)

    def _join_existing_member(self, now: float, now_ms: int, group: ClassicGroup, req: JoinGroupRequest,
                              pending: Pending) -> None:
        member_id = req.member_id
        if group.is_(DEAD):
            pending.result = JoinResult(ErrorCode.coordinator_not_available, member_id)
            return
        if not group.supports_protocols(req.protocol_type, (n for n, _ in req.protocols)):
            pending.result = JoinResult(ErrorCode.inconsistent_group_protocol, member_id)
            return
        if member_id in group.pending_members:
            self._add_member_and_rebalance(now, now_ms, group, req, member_id, pending)
            return
        error = group.validate_member(member_id, req.group_instance_id)
        if error:
            pending.result = JoinResult(error, member_id)
            return
        member = group.members[member_id]
        if group.is_(PREPARING_REBALANCE):
            self._update_member_and_rebalance(now, now_ms, group, member, req, pending)
        elif group.is_(COMPLETING_REBALANCE):
            if member.matches(req.protocols):
                # It lost the join response: give it this generation's again.
                pending.result = self._current_generation(
                    group, member_id, with_members=member_id == group.leader_id)
            else:
                self._update_member_and_rebalance(now, now_ms, group, member, req, pending)
        elif group.is_(STABLE):
            if member_id == group.leader_id or not member.matches(req.protocols):
                # A leader's join forces a rebalance (e.g. its topics' metadata changed).
                self._update_member_and_rebalance(now, now_ms, group, member, req, pending)
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

    def _add_member_and_rebalance(self, now: float, now_ms: int, group: ClassicGroup, req: JoinGroupRequest,
                                  member_id: str, pending: Pending) -> None:
        member = ClassicGroupMember(member_id, req.group_instance_id, req.client_id, req.client_host,
                        req.rebalance_timeout_ms, req.session_timeout_ms, req.protocol_type,
                        req.protocols, is_new=True)
        if group.is_(PREPARING_REBALANCE) and group.previous_state is EMPTY:
            group.new_member_added = True  # lets the initial delay stretch
        group.add(member, pending)
        # A parked new member cannot heartbeat and its disconnect is not noticed, so it gets a
        # generous deadline of its own (Kafka's new-member join timeout).
        self._schedule_heartbeat(group, member, now, self.config.new_member_join_timeout_ms)
        self._maybe_prepare_rebalance_or_complete_join(now, now_ms, group, f"new member {member_id} joined")

    def _update_member_and_rebalance(self, now: float, now_ms: int, group: ClassicGroup,
                                     member: ClassicGroupMember,
                                     req: JoinGroupRequest, pending: Pending) -> None:
        if member.awaiting_join is not None:
            # A duplicate join (the client gave up on the first): the newest request gets the answer.
            self._complete_join(group, member, JoinResult(ErrorCode.rebalance_in_progress, member.member_id))
        member.protocols = req.protocols
        member.rebalance_timeout_ms = req.rebalance_timeout_ms
        member.session_timeout_ms = req.session_timeout_ms
        member.awaiting_join = pending
        self._maybe_prepare_rebalance_or_complete_join(
            now, now_ms, group, f"member {member.member_id} rejoined ({req.reason or 'no reason given'})")

    def _replace_static_member(self, now: float, now_ms: int, group: ClassicGroup, req: JoinGroupRequest,
                               old_id: str, new_id: str, pending: Pending) -> None:
        current_leader = group.leader_id
        old = group.members[old_id]
        # Fence whatever the old incarnation has parked.
        self._complete_join(group, old, JoinResult(ErrorCode.fenced_instance_id, old_id))
        self._complete_sync(group, old, SyncResult(ErrorCode.fenced_instance_id))
        instance_id = req.group_instance_id
        assert instance_id is not None, "only a static member is replaced"
        member = group.replace_static_member(instance_id, old_id, new_id)
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
                self._persist_group(group, now_ms)
                return
            member.awaiting_join = pending
            self._maybe_prepare_rebalance_or_complete_join(now, now_ms, group, "static member changed protocols")
        elif group.is_(COMPLETING_REBALANCE):
            member.awaiting_join = pending
            self._prepare_rebalance(now, now_ms, group, f"static member {req.group_instance_id} rejoined")
        else:
            member.awaiting_join = pending
            self._maybe_complete_join_phase(now, now_ms, group)

    # -- the join phase ---------------------------------------------------------------------------

    def _maybe_prepare_rebalance_or_complete_join(self, now: float, now_ms: int, group: ClassicGroup,
                                                  reason: str) -> None:
        if group.can_rebalance():
            self._prepare_rebalance(now, now_ms, group, reason)
        else:
            self._maybe_complete_join_phase(now, now_ms, group)

    def _prepare_rebalance(self, now: float, now_ms: int, group: ClassicGroup, reason: str) -> None:
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
            group.join_deadline = self.shard.schedule(group.group_id, now + delay / 1000)
            group.new_member_added = False
        group.transition_to(PREPARING_REBALANCE, now_ms)
        log.info("group %s: preparing to rebalance (generation %d): %s",
                 group.group_id, group.generation_id, reason)
        if not initial:
            if group.has_all_members_joined():
                self._complete_join_phase(now, now_ms, group)
            else:
                group.join_initial = False
                deadline = now + group.rebalance_timeout_ms() / 1000
                group.join_deadline = self.shard.schedule(group.group_id, deadline)

    def _maybe_complete_join_phase(self, now: float, now_ms: int, group: ClassicGroup) -> None:
        if (group.is_(PREPARING_REBALANCE) and group.previous_state is not EMPTY
                and group.has_all_members_joined()):
            self._complete_join_phase(now, now_ms, group)

    def _join_timer_fired(self, now: float, now_ms: int, group: ClassicGroup) -> None:
        group.join_deadline = None
        if not group.is_(PREPARING_REBALANCE):
            return
        if group.join_initial and group.new_member_added and group.initial_remaining_ms:
            # New members are still arriving: give them another delay, within the rebalance timeout.
            group.new_member_added = False
            delay = min(self.config.initial_rebalance_delay_ms, group.initial_remaining_ms)
            group.initial_remaining_ms = max(group.initial_remaining_ms - group.initial_delay_ms, 0)
            group.initial_delay_ms = delay
            group.join_deadline = self.shard.schedule(group.group_id, now + delay / 1000)
            return
        self._complete_join_phase(now, now_ms, group)

    def _complete_join_phase(self, now: float, now_ms: int, group: ClassicGroup) -> None:
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
            group.join_deadline = self.shard.schedule(group.group_id, now + max(group.rebalance_timeout_ms(), 1) / 1000)
            return
        group.init_next_generation(now_ms)
        self.rebalances += 1
        self._persist_group(group, now_ms)
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
        group.sync_deadline = self.shard.schedule(group.group_id, now + group.rebalance_timeout_ms() / 1000)
        group.sync_generation = group.generation_id

    def _persist_group(self, group: ClassicGroup, now_ms: int) -> None:
        try:
            self.shard.store.write_group(CLASSIC, group.group_id, group.to_record(), now_ms)
        except OSError as exc:
            # The running group is in memory; the record only lets a restart list and describe it.
            log.error("group %s: storing the group record failed: %s", group.group_id, storage_error_message(exc))

    # -- SyncGroup --------------------------------------------------------------------------------

    def sync_group(
        self,
        now: float,
        now_ms: int,
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
        if not group_id:
            pending.result = SyncResult(ErrorCode.invalid_group_id)
            return pending
        group = self.classic_group(group_id)
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
                group.transition_to(STABLE, now_ms)
                self._persist_group(group, now_ms)  # with the assignment, as Kafka stores it at sync
        else:  # Stable
            self._synced(group, member_id)
            pending.result = SyncResult(ErrorCode.none, group.protocol_type, group.protocol_name,
                                        group.members[member_id].assignment)
        return pending

    @staticmethod
    def _synced(group: ClassicGroup, member_id: str) -> None:
        group.pending_sync.discard(member_id)
        if not group.pending_sync:
            group.sync_deadline = None

    def _propagate_assignment(self, now: float, group: ClassicGroup, error: ErrorCode) -> None:
        for member in group.members.values():
            result = SyncResult(error, assignment=member.assignment)
            if error == ErrorCode.none:
                result.protocol_type, result.protocol_name = group.protocol_type, group.protocol_name
            if self._complete_sync(group, member, result):
                # Its session restarts now: any expiry while it was parked was ignored.
                self._schedule_heartbeat(group, member, now)

    def _reset_and_propagate_assignment_error(self, now: float, group: ClassicGroup, error: ErrorCode) -> None:
        for member in group.members.values():
            member.assignment = b""
        self._propagate_assignment(now, group, error)

    def _sync_timer_fired(self, now: float, now_ms: int, group: ClassicGroup) -> None:
        group.sync_deadline = None
        if group.sync_generation != group.generation_id or not group.is_(COMPLETING_REBALANCE, STABLE):
            return
        if group.pending_sync:
            laggards = sorted(group.pending_sync)
            for member_id in laggards:
                member = group.members.get(member_id)
                if member is not None:
                    self._drop_member(group, member)
            self._prepare_rebalance(now, now_ms, group, f"members {laggards} did not sync in time")

    # -- Heartbeat --------------------------------------------------------------------------------

    def heartbeat(self, now: float, *, group_id: str, generation_id: int, member_id: str,
                  group_instance_id: str | None = None) -> ErrorCode:
        if not group_id:
            return ErrorCode.invalid_group_id
        group = self.classic_group(group_id)
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

    # -- LeaveGroup -------------------------------------------------------------------------------

    def leave_group(self, now: float, now_ms: int, group_id: str,
                    members: list[tuple[str, str | None]]) -> tuple[ErrorCode, list[ErrorCode]]:
        """(top-level error, one error per (member_id, group_instance_id) leaving)."""
        if not group_id:
            return ErrorCode.invalid_group_id, []
        if group_id in self.shard.groups and self.classic_group(group_id) is None:
            # A consumer group: none of its members use the classic protocol (Kafka's
            # classicGroupLeaveToConsumerGroup answers each UNKNOWN_MEMBER_ID).
            return ErrorCode.none, [ErrorCode.unknown_member_id] * len(members)
        group = self.classic_group(group_id)
        if group is None:
            return ErrorCode.unknown_member_id, []
        if group.is_(DEAD):
            return ErrorCode.coordinator_not_available, []
        errors: list[ErrorCode] = []
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
                self._maybe_prepare_rebalance_or_complete_join(now, now_ms, group, "members left")
            elif group.is_(PREPARING_REBALANCE):
                self._maybe_complete_join_phase(now, now_ms, group)
        return ErrorCode.none, errors

    # -- timers -----------------------------------------------------------------------------------

    def fire_timers(self, group: Group, now: float, now_ms: int) -> None:
        """Fire every deadline of `group` due at `now`, earliest first: the join and sync timeouts,
        session expiries, pending member expiries."""
        classic = cast(ClassicGroup, group)
        # Each event clears or moves its own deadline; the bound guards against our own bug.
        for _ in range(10_000):
            event = self._next_due(classic, now, now_ms)
            if event is None:
                return
            event()
        log.error("group %s: timers keep firing at %.3f; giving up this tick", group.group_id, now)

    def parked_deadline(self, group: Group) -> float | None:
        """When a request parked on the group is answered at the latest, unless something happens
        first: the end of the join phase or of the sync phase (None: no such deadline now)."""
        classic = cast(ClassicGroup, group)
        return min((d for d in (classic.join_deadline, classic.sync_deadline) if d is not None), default=None)

    def _next_due(self, group: ClassicGroup, now: float, now_ms: int) -> Callable[[], None] | None:
        best: tuple[float, Callable[[], None]] | None = None

        def consider(deadline: float | None, action: Callable[[], None]) -> None:
            nonlocal best
            if deadline is not None and deadline <= now and (best is None or deadline < best[0]):
                best = (deadline, action)

        consider(group.join_deadline, partial(self._join_timer_fired, now, now_ms, group))
        consider(group.sync_deadline, partial(self._sync_timer_fired, now, now_ms, group))
        for member_id, deadline in group.pending_members.items():
            consider(deadline, partial(self._pending_member_expired, now, now_ms, group, member_id))
        for member in group.members.values():
            consider(member.heartbeat_deadline, partial(self._heartbeat_expired, now, now_ms, group, member))
        return best[1] if best is not None else None

    def _pending_member_expired(self, now: float, now_ms: int, group: ClassicGroup, member_id: str) -> None:
        log.info("group %s: pending member %s did not rejoin within its session", group.group_id, member_id)
        group.pending_members.pop(member_id, None)
        if group.is_(PREPARING_REBALANCE) and group.has_all_members_joined():
            self._complete_join_phase(now, now_ms, group)

    def _heartbeat_expired(self, now: float, now_ms: int, group: ClassicGroup,
                           member: ClassicGroupMember) -> None:
        member.heartbeat_deadline = None
        if member.has_satisfied_heartbeat():
            return  # parked in a rebalance: its deadline restarts when the rebalance answers it
        log.info("group %s: member %s's session expired; removing it", group.group_id, member.member_id)
        self._drop_member(group, member)
        if group.is_(STABLE, COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance_or_complete_join(now, now_ms, group,
                                                           f"member {member.member_id} expired")
        elif group.is_(PREPARING_REBALANCE) and group.has_all_members_joined():
            self._complete_join_phase(now, now_ms, group)

    # -- DescribeGroups ---------------------------------------------------------------------------

    def describe_group(self, group_id: str) -> GroupDescription | None:
        group = self.classic_group(group_id)
        if group is None or group.is_(DEAD):
            return None
        return group.describe()


def _inconsistent(requested: str | None, current: str | None) -> bool:
    return requested is not None and current is not None and requested != current


# The classic group type (groups/types.py): its records are GroupMetadata records.
CLASSIC_GROUP_TYPE = GroupType(CLASSIC, ClassicGroupManager, ClassicGroupRecords)
