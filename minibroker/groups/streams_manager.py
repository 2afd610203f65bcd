"""The KIP-1071 streams rebalance protocol: StreamsGroupHeartbeat, StreamsGroupDescribe and the
timeouts of streams groups (the streams half of Kafka 4.4's `GroupMetadataManager`).

A heartbeat does, as Kafka's streamsGroupHeartbeat (and GroupCoordinatorService's checks before it):

1. validate the request (INVALID_REQUEST with Kafka's messages; a changelog topic with a partition
   count or a source topic regex is refused as Kafka 4.4 refuses them); epoch -1 (leave) and -2 (a
   static member leaving for a while) go to `_leave`;
2. find the group, creating it for a join (epoch 0): a new id, or an Empty classic group, which
   becomes a streams group keeping its committed offsets; GROUP_MAX_SIZE_REACHED
   (`group.streams.max.size`); any other group type is GROUP_ID_NOT_FOUND;
3. find or create the member: UNKNOWN_MEMBER_ID, FENCED_MEMBER_EPOCH (an epoch ahead of, or behind
   the member's unless it is the previous one and the member owns only tasks it still has), and for
   static members UNRELEASED_INSTANCE_ID, FENCED_INSTANCE_ID, or the replacement of a member that
   left with epoch -2;
4. update the member (process, rack, client tags, endpoint, topology epoch); a change of those bumps
   the group epoch (any change for a dynamic member);
5. the topology: the first member's initializes the group's (the topology record); a later join
   with an older epoch keeps the group's; another topology at the same epoch is INVALID_REQUEST
   ("Topology updates are not supported yet."). The topology is configured against the topics
   (streams_topics.py) when it is new or the metadata hash of its topics changed, which bumps the
   group epoch; a configured topology that is not ready answers its status (MISSING_SOURCE_TOPICS,
   INCORRECTLY_PARTITIONED_TOPICS, MISSING_INTERNAL_TOPICS) and assigns no task, and the internal
   topics to create are handed to the caller (the handler creates them, as Kafka's KafkaApis does);
6. a new validated topology epoch or changed assignment configs (`num.standby.replicas`) bump the
   group epoch; the target assignment is recomputed with the sticky assignor (streams_assignor.py)
   when the group epoch is ahead, unless `group.streams.initial.rebalance.delay.ms` is running for a
   new group or the last one was computed less than `group.streams.assignment.interval.ms` ago
   (ASSIGNMENT_DELAYED; the next heartbeat computes it);
7. reconcile the member (streams_group.reconcile), schedule its session timeout and, while it must
   revoke, its rebalance timeout;
8. answer the member's epoch, the heartbeat interval, its tasks when it joined or they changed, the
   statuses (STALE_TOPOLOGY, SHUTDOWN_APPLICATION after a member asked for it, ...), and the
   endpoints of Interactive Queries when its endpoint epoch is behind the group's;
9. persist what changed as Kafka's records (storage/streams_group_records.py).

Not done: per-group streams.* configs (GROUP config resources), rack-aware standby placement
(client tags are kept and shown, not used), warm-up tasks (Kafka 4.4 assigns none either), the
topology description plugin and StreamsGroupTopologyDescriptionUpdate (StreamsGroupHeartbeat v1).

Pure: `now` is monotonic seconds (deadlines), `now_ms` wall-clock milliseconds.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Iterable, cast

from minibroker.groups.api import CLASSIC
from minibroker.groups.streams_assignor import MemberSpec, SubtopologySpec, TaskAssignorError, assign
from minibroker.groups.streams_group import (
    LEAVE_GROUP_MEMBER_EPOCH,
    LEAVE_GROUP_STATIC_MEMBER_EPOCH,
    STREAMS,
    AssignedTasks,
    FencedMemberEpoch,
    MemberState,
    StreamsGroup,
    StreamsGroupMember,
    TaskSet,
    reconcile,
    tasks_of,
)
from minibroker.groups.streams_topics import (
    ASSIGNMENT_DELAYED,
    SHUTDOWN_APPLICATION,
    STALE_TOPOLOGY,
    InternalTopic,
    InvalidTopology,
    configure_topics,
    metadata_hash,
)
from minibroker.groups.types import GroupType
from minibroker.protocol.errors import ErrorCode
from minibroker.storage.errors import storage_error_message
from minibroker.storage.offsets_store import TOPIC
from minibroker.storage.streams_group_records import StoredTopology, StreamsGroupRecords

if TYPE_CHECKING:
    from minibroker.groups.api import Group
    from minibroker.groups.runtime import ShardRuntime

log = logging.getLogger(__name__)


class Refused(Exception):
    def __init__(self, error: ErrorCode, message: str | None) -> None:
        super().__init__(message)
        self.error = error
        self.message = message


def _blank(value: str | None) -> bool:
    # Kafka's throwIfEmptyString: Java's trim() drops every character at or below U+0020.
    return value is not None and not value.strip("".join(chr(c) for c in range(33)))


@dataclass(frozen=True)
class StreamsGroupHeartbeatRequest:
    """A StreamsGroupHeartbeat as the coordinator sees it; None: not sent (unchanged)."""

    group_id: str
    member_id: str
    member_epoch: int
    endpoint_information_epoch: int = 0
    client_id: str = ""
    client_host: str = ""
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    topology: StoredTopology | None = None
    active: dict[str, tuple[int, ...]] | None = None
    standby: dict[str, tuple[int, ...]] | None = None
    warmup: dict[str, tuple[int, ...]] | None = None
    process_id: str | None = None
    user_endpoint: tuple[str, int] | None = None
    client_tags: tuple[tuple[str, str], ...] | None = None
    task_offsets: tuple[tuple[str, int, int], ...] | None = None
    task_end_offsets: tuple[tuple[str, int, int], ...] | None = None
    shutdown_application: bool = False


@dataclass
class StreamsGroupHeartbeatResult:
    error: ErrorCode
    message: str | None = None
    member_id: str = ""
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    acceptable_recovery_lag: int = 0
    task_offset_interval_ms: int = 0
    status: list[tuple[int, str]] | None = None
    active: dict[str, tuple[int, ...]] | None = None
    standby: dict[str, tuple[int, ...]] | None = None
    warmup: dict[str, tuple[int, ...]] | None = None
    endpoint_information_epoch: int = 0
    # (host, port, active partitions {topic: partitions}, standby partitions) per member with an endpoint
    partitions_by_endpoint: list[tuple[str, int, dict[str, list[int]], dict[str, list[int]]]] | None = None
    to_create: dict[str, InternalTopic] = field(default_factory=dict)


@dataclass(frozen=True)
class StreamsMemberDescription:
    member: StreamsGroupMember
    target: TaskSet
    task_offsets: dict[str, dict[int, int]]
    task_end_offsets: dict[str, dict[int, int]]


@dataclass(frozen=True)
class StreamsGroupDescription:
    group_id: str
    error: ErrorCode = ErrorCode.none
    message: str | None = None
    group: StreamsGroup | None = None
    members: tuple[StreamsMemberDescription, ...] = ()


def _sorted_tasks(tasks: dict[str, frozenset[int]] | dict[str, dict[int, int]]) -> dict[str, tuple[int, ...]]:
    return {s: tuple(sorted(ps)) for s, ps in sorted(tasks.items())}


class StreamsGroupManager:
    """The streams group protocol's requests and timers (the streams type's GroupTypeManager)."""

    def __init__(self, shard: ShardRuntime) -> None:
        self.shard = shard
        self.config = shard.config
        self.rebalances = 0
        # Task offsets members report (Kafka keeps them in memory only): group -> member -> ...
        self.task_offsets: dict[str, dict[str, tuple[dict[str, dict[int, int]], dict[str, dict[int, int]]]]] = {}

    # -- the group type -------------------------------------------------------------------------------

    def load(self, now_ms: int) -> Iterable[Group]:
        stored = self.shard.store.group_records(STREAMS).groups
        return [StreamsGroup.from_stored(group_id, record, now_ms) for group_id, record in stored.items()]

    def parked_deadline(self, group: Group) -> float | None:
        return None

    def close(self, group: Group) -> None:
        """Nothing: no request waits on a streams group."""

    def start_timers(self, now: float) -> None:
        """The sessions (and pending rebalance timeouts) of members of groups loaded at start-up."""
        for any_group in list(self.shard.groups.values()):
            if any_group.group_type != STREAMS:
                continue
            group = cast(StreamsGroup, any_group)
            if not group.sessions_started:
                group.sessions_started = True
                for member in group.members.values():
                    self._schedule_session(group, member.member_id, now)
                    if member.state is MemberState.UNREVOKED_TASKS:
                        self._schedule_rebalance(group, member, now)

    def fire_timers(self, any_group: Group, now: float, now_ms: int) -> None:
        group = cast(StreamsGroup, any_group)
        for member_id, deadline in sorted(group.session_deadlines.items(), key=lambda item: item[1]):
            member = group.members.get(member_id)
            if deadline <= now and member is not None:
                log.info("group %s: streams member %s fenced from the group because the member session expired.",
                         group.group_id, member_id)
                self.fence(group, member, now_ms)
        for member_id, (deadline, epoch) in sorted(group.rebalance_deadlines.items(), key=lambda item: item[1]):
            if deadline > now:
                continue
            del group.rebalance_deadlines[member_id]
            member = group.members.get(member_id)
            if member is not None and member.member_epoch == epoch:
                log.info("group %s: member %s fenced from the group because it failed to transition from epoch %d "
                         "within %dms.", group.group_id, member_id, epoch, member.rebalance_timeout_ms)
                self.fence(group, member, now_ms)
        if group.initial_delay_deadline is not None and group.initial_delay_deadline <= now:
            group.initial_delay_deadline = None  # the next heartbeat computes the assignment

    # -- settings -----------------------------------------------------------------------------------

    def _assignment_configs(self) -> tuple[tuple[str, str], ...]:
        return (("num.standby.replicas", str(self.config.streams_num_standby_replicas)),)

    # -- StreamsGroupHeartbeat ----------------------------------------------------------------------

    def heartbeat(self, now: float, now_ms: int, request: StreamsGroupHeartbeatRequest) -> StreamsGroupHeartbeatResult:
        self.start_timers(now)
        try:
            self._validate(request)
            if request.member_epoch in (LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH):
                return self._leave(now_ms, request)
            return self._heartbeat(now, now_ms, request)
        except Refused as refused:
            return StreamsGroupHeartbeatResult(refused.error, refused.message)

    @staticmethod
    def _validate(req: StreamsGroupHeartbeatRequest) -> None:
        """GroupCoordinatorService's throwIfStreamsGroupHeartbeatRequestIs(UsingUnsupportedFeatures|Invalid)."""
        invalid = ErrorCode.invalid_request
        if req.topology is not None and any(s.source_topic_regex for s in req.topology.subtopologies):
            raise Refused(invalid, "Regular expressions for source topics are not supported yet.")
        if _blank(req.member_id) or not req.member_id:
            raise Refused(invalid, "MemberId can't be empty.")
        if _blank(req.group_id) or not req.group_id:
            raise Refused(invalid, "GroupId can't be empty.")
        if _blank(req.instance_id):
            raise Refused(invalid, "InstanceId can't be empty.")
        if _blank(req.rack_id):
            raise Refused(invalid, "RackId can't be empty.")
        if req.member_epoch == 0:
            if req.rebalance_timeout_ms == -1:
                raise Refused(invalid, "RebalanceTimeoutMs must be provided in first request.")
            for name, tasks in (("ActiveTasks", req.active), ("StandbyTasks", req.standby),
                                ("WarmupTasks", req.warmup)):
                if tasks:
                    raise Refused(invalid, f"{name} must be empty when (re-)joining.")
            if req.topology is None:
                raise Refused(invalid, "Topology must be non-null when (re-)joining.")
            for s in req.topology.subtopologies:
                for info in s.state_changelog_topics:
                    if info.partitions != 0:
                        raise Refused(ErrorCode.streams_invalid_topology,
                                      f"Changelog topic {info.name} must have an undefined partition count, but it "
                                      f"is set to {info.partitions}.")
        elif req.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            if req.instance_id is None:
                raise Refused(invalid, "InstanceId can't be null.")
        elif req.member_epoch < LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            raise Refused(invalid, f"MemberEpoch is {req.member_epoch}, but must be greater than or equal to -2.")
        if (req.active, req.standby, req.warmup) != (None, None, None) and None in (req.active, req.standby, req.warmup):
            raise Refused(invalid, "If one task-type is non-null, all must be non-null.")
        if req.member_epoch != 0 and req.topology is not None:
            raise Refused(invalid, "Topology can only be provided when (re-)joining.")

    def streams_group(self, group_id: str) -> StreamsGroup:
        group = self.shard.groups.get(group_id)
        if group is None or group.is_dead():
            raise Refused(ErrorCode.group_id_not_found, f"Streams group {group_id} not found.")
        if group.group_type != STREAMS:
            raise Refused(ErrorCode.group_id_not_found, f"Group {group_id} is not a streams group.")
        return cast(StreamsGroup, group)

    def _find_group(self, group_id: str, create: bool, now_ms: int) -> tuple[StreamsGroup, Group | None]:
        existing = self.shard.groups.get(group_id)
        if existing is None or existing.is_dead():
            if not create:
                raise Refused(ErrorCode.group_id_not_found, f"Streams group {group_id} not found.")
            return StreamsGroup(group_id, now_ms), None
        if existing.group_type == STREAMS:
            return cast(StreamsGroup, existing), None
        if create and existing.group_type == CLASSIC and existing.is_empty():
            return StreamsGroup(group_id, now_ms), existing
        raise Refused(ErrorCode.group_id_not_found, f"Group {group_id} is not a streams group.")

    @staticmethod
    def _check_epoch(member: StreamsGroupMember, req: StreamsGroupHeartbeatRequest) -> None:
        received = req.member_epoch
        if received == 0:
            return
        if received > member.member_epoch:
            raise Refused(ErrorCode.fenced_member_epoch,
                          f"The streams group member has a greater member epoch ({received}) than the one known by the "
                          f"group coordinator ({member.member_epoch}). The member must abandon all its partitions and "
                          f"rejoin.")
        if received < member.member_epoch:
            a = member.assigned

            def contained(owned, mine) -> bool:
                return owned is not None and all(p in mine.get(s, ()) for s, ps in owned.items() for p in ps)
            if received != member.previous_member_epoch or not (
                    contained(req.active, a.active) and contained(req.standby, a.standby)
                    and contained(req.warmup, a.warmup)):
                raise Refused(ErrorCode.fenced_member_epoch,
                              f"The streams group member has a smaller member epoch ({received}) than the one known "
                              f"by the group coordinator ({member.member_epoch}). The member must abandon all its "
                              f"partitions and rejoin.")

    def _find_member(self, group: StreamsGroup, req: StreamsGroupHeartbeatRequest
                     ) -> tuple[StreamsGroupMember, StreamsGroupMember | None]:
        """(the member, the static member it replaces)."""
        joining = req.member_epoch == 0
        if req.instance_id is None:
            member = group.members.get(req.member_id)
            if member is None:
                if not joining:
                    raise Refused(ErrorCode.unknown_member_id,
                                  f"Member {req.member_id} is not a member of group {group.group_id}.")
                member = StreamsGroupMember(req.member_id)
            self._check_epoch(member, req)
            if joining:
                log.info("group %s: member %s joins the streams group", group.group_id, req.member_id)
            return member, None
        existing = group.static_member(req.instance_id)
        if joining:
            if existing is None:
                log.info("group %s: static member %s with instance id %s joins the streams group", group.group_id,
                         req.member_id, req.instance_id)
                return group.members.get(req.member_id) or StreamsGroupMember(req.member_id), None
            if existing.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH:
                raise Refused(ErrorCode.unreleased_instance_id,
                              f"Static member {req.member_id} with instance id {req.instance_id} cannot join the group "
                              f"because the instance id is owned by {existing.member_id} member.")
            log.info("group %s: static member with instance id %s re-joins the streams group, replacing %s",
                     group.group_id, req.instance_id, existing.member_id)
            return replace(existing, member_id=req.member_id, member_epoch=0, previous_member_epoch=0), existing
        if existing is None:
            raise Refused(ErrorCode.unknown_member_id, f"Instance id {req.instance_id} is unknown.")
        if existing.member_id != req.member_id:
            raise Refused(ErrorCode.fenced_instance_id,
                          f"Static member {req.member_id} with instance id {req.instance_id} was fenced by member "
                          f"{existing.member_id}.")
        self._check_epoch(existing, req)
        return existing, None

    def _heartbeat(self, now: float, now_ms: int, req: StreamsGroupHeartbeatRequest) -> StreamsGroupHeartbeatResult:
        joining = req.member_epoch == 0
        group, replaced_classic = self._find_group(req.group_id, joining, now_ms)
        if joining and group.static_member(req.instance_id) is None and req.member_id not in group.members and (
                len(group.members) >= self.config.streams_max_size):
            raise Refused(ErrorCode.group_max_size_reached,
                          f"The streams group has reached its maximum capacity of {self.config.streams_max_size} "
                          f"members.")
        member, replaced = self._find_member(group, req)
        updated = replace(
            member,
            instance_id=req.instance_id if req.instance_id is not None else member.instance_id,
            rack_id=req.rack_id if req.rack_id is not None else member.rack_id,
            rebalance_timeout_ms=req.rebalance_timeout_ms if req.rebalance_timeout_ms != -1 else member.rebalance_timeout_ms,
            topology_epoch=req.topology.epoch if req.topology is not None else member.topology_epoch,
            client_id=req.client_id, client_host=req.client_host,
            process_id=req.process_id if req.process_id is not None else member.process_id,
            client_tags=tuple(sorted(req.client_tags)) if req.client_tags is not None else member.client_tags,
            user_endpoint=req.user_endpoint if joining or req.user_endpoint is not None else member.user_endpoint)
        recompute = False
        if updated.metadata() != member.metadata() or replaced is not None:
            if req.instance_id is None:
                recompute = True
            else:
                recompute = (member.topology_epoch, member.rack_id, member.client_tags, member.process_id) != (
                    updated.topology_epoch, updated.rack_id, updated.client_tags, updated.process_id)

        # The topology: initialized by the first member, then checked.
        statuses: list[tuple[int, str]] = []
        topology = group.topology
        if req.topology is not None:
            if topology is None:
                log.info("group %s: member %s initialized the topology with epoch %d", group.group_id,
                         req.member_id, req.topology.epoch)
                topology = req.topology
            elif topology.epoch > req.topology.epoch:
                log.info("group %s: member %s joined with stale topology epoch %d", group.group_id, req.member_id,
                         req.topology.epoch)
            elif topology != req.topology:
                raise Refused(ErrorCode.invalid_request, "Topology updates are not supported yet.")
        if topology is None:
            raise Refused(ErrorCode.invalid_request, "The topology is null and the group topology is also null.")
        if updated.topology_epoch < topology.epoch:
            statuses.append((STALE_TOPOLOGY, f"The member's topology epoch {updated.topology_epoch} is behind the "
                                             f"group's topology epoch {topology.epoch}."))
        hash_value = metadata_hash(topology, self.shard.topics)
        configured = group.configured
        if configured is None or topology is not group.topology or hash_value != group.metadata_hash or (
                not configured.ready):
            if hash_value != group.metadata_hash:
                recompute = True
            try:
                configured = configure_topics(topology, self.shard.topics, hash_value)
            except InvalidTopology as exc:
                raise Refused(ErrorCode.streams_invalid_topology, str(exc)) from None
        validated_epoch = -1
        if configured.ready:
            validated_epoch = topology.epoch
            assert configured.subtopologies is not None
            for tasks in (req.active, req.standby, req.warmup):
                for s, ps in (tasks or {}).items():
                    sub = configured.subtopologies.get(s)
                    if sub is None:
                        raise Refused(ErrorCode.invalid_request, f"Subtopology {s} does not exist in the topology.")
                    for p in ps:
                        if not 0 <= p < sub.number_of_tasks:
                            raise Refused(ErrorCode.invalid_request,
                                          f"Task {p} for subtopology {s} is invalid. Number of tasks for this "
                                          f"subtopology: {sub.number_of_tasks}")
        if validated_epoch != group.validated_topology_epoch:
            recompute = True
        configs = self._assignment_configs()
        if not recompute and configs != group.last_assignment_configs:
            log.info("group %s: assignment configurations changed to %s; triggering a rebalance", group.group_id,
                     dict(configs))
            recompute = True

        # Nothing was refused so far: apply.
        if self.shard.groups.get(group.group_id) is not group:
            self.shard.register(group)
            if replaced_classic is not None:
                log.info("group %s: converted the empty classic group to a streams group", group.group_id)
        was_empty = not group.members
        if replaced is not None:
            group.target_assignment[updated.member_id] = group.target_of(replaced.member_id)
            group.remove_member(replaced.member_id)
        group.topology = topology
        group.configured = configured
        group.metadata_hash = hash_value
        group.validated_topology_epoch = validated_epoch
        if req.task_offsets is not None or req.task_end_offsets is not None:
            offsets, ends = self.task_offsets.setdefault(group.group_id, {}).get(req.member_id, ({}, {}))
            for table, reported in ((offsets, req.task_offsets), (ends, req.task_end_offsets)):
                for s, p, offset in reported or ():
                    table.setdefault(s, {})[p] = offset
            self.task_offsets[group.group_id][req.member_id] = (offsets, ends)
        if recompute:
            group.group_epoch += 1
            group.last_assignment_configs = configs
            self.rebalances += 1
            log.info("group %s: bumped streams group epoch to %d (validated topology epoch %d)", group.group_id,
                     group.group_epoch, validated_epoch)
        if was_empty and self.config.streams_initial_rebalance_delay_ms > 0 and group.group_epoch > group.assignment_epoch:
            if group.initial_delay_deadline is None:
                group.initial_delay_deadline = self.shard.schedule(
                    group.group_id, now + self.config.streams_initial_rebalance_delay_ms / 1000)
        group.update_member(updated)

        # The target assignment.
        if group.initial_delay_deadline is not None and group.initial_delay_deadline > now:
            statuses.append((ASSIGNMENT_DELAYED, "Assignment delayed due to the configured initial rebalance delay."))
        elif group.assignment_epoch < group.group_epoch:
            interval = self.config.streams_assignment_interval_ms
            if group.assignment_timestamp_ms and interval and now_ms < group.assignment_timestamp_ms + interval:
                statuses.append((ASSIGNMENT_DELAYED, "Assignment delayed due to the configured assignment interval."))
            else:
                self._compute_target(group, now_ms)
        target = group.target_of(updated.member_id)

        # Reconcile the member.
        owned = None
        if req.active is not None and req.standby is not None and req.warmup is not None:
            owned = TaskSet(tasks_of(req.active), tasks_of(req.standby), tasks_of(req.warmup))
        current = group.members[updated.member_id]
        if not current.is_reconciled_to(group.assignment_epoch):
            try:
                reconciled = reconcile(current, group.assignment_epoch, target, group.holders(), owned)
            except FencedMemberEpoch as exc:
                raise Refused(ErrorCode.fenced_member_epoch, str(exc)) from None
            if reconciled != current:
                group.update_member(reconciled)
                if reconciled.state is MemberState.UNREVOKED_TASKS:
                    self._schedule_rebalance(group, reconciled, now)
                else:
                    group.rebalance_deadlines.pop(reconciled.member_id, None)
        self._schedule_session(group, updated.member_id, now)
        if req.shutdown_application:
            group.shutdown_requested_by = req.member_id
        group.refresh_state(now_ms)
        self._persist(group, now_ms, drop_classic_record=replaced_classic is not None)

        final = group.members[updated.member_id]
        result = StreamsGroupHeartbeatResult(
            ErrorCode.none, None, final.member_id, final.member_epoch, self.config.streams_heartbeat_interval_ms,
            self.config.streams_acceptable_recovery_lag, self.config.streams_task_offset_interval_ms)
        if joining or final.assigned != member.assigned:
            result.active = _sorted_tasks(final.assigned.active)
            result.standby = _sorted_tasks(final.assigned.standby)
            result.warmup = _sorted_tasks(final.assigned.warmup)
        endpoint_changed = member.user_endpoint != final.user_endpoint
        if endpoint_changed or (final.assigned != member.assigned and final.user_endpoint is not None):
            group.endpoint_information_epoch += 1
        if group.endpoint_information_epoch != req.endpoint_information_epoch:
            result.partitions_by_endpoint = self._endpoints(group)
        result.endpoint_information_epoch = group.endpoint_information_epoch
        if configured.error is not None:
            result.to_create = dict(configured.to_create)
            statuses.append((configured.error.status, str(configured.error)))
        if group.shutdown_requested_by is not None:
            statuses.append((SHUTDOWN_APPLICATION,
                             f"Streams group member {group.shutdown_requested_by} encountered a fatal error and "
                             f"requested a shutdown for the entire application."))
        result.status = statuses
        return result

    def _compute_target(self, group: StreamsGroup, now_ms: int) -> None:
        """Kafka's TargetAssignmentBuilder with the sticky assignor (no task while the topology is
        not ready)."""
        configured = group.configured
        targets: dict[str, TaskSet] = {}
        if configured is not None and configured.ready and configured.subtopologies is not None:
            offsets = self.task_offsets.get(group.group_id, {})
            specs = {m.member_id: MemberSpec(m.process_id, m.assigned.task_set().active, dict(m.assigned.standby),
                                             offsets.get(m.member_id, ({}, {}))[0])
                     for m in group.members.values()}
            subtopologies = {s: SubtopologySpec(c.number_of_tasks, c.stateful)
                             for s, c in configured.subtopologies.items()}
            try:
                result = assign(specs, subtopologies, self.config.streams_num_standby_replicas)
            except TaskAssignorError as exc:
                message = f"Failed to compute a new target assignment for epoch {group.group_epoch}: {exc}"
                log.error("group %s: %s", group.group_id, message)
                raise Refused(ErrorCode.unknown_server_error, message) from None
            targets = {m: TaskSet(active, standby, {}) for m, (active, standby) in result.items()}
        else:
            targets = {m: TaskSet() for m in group.members}
        group.target_assignment = targets
        group.assignment_epoch = group.group_epoch
        group.assignment_timestamp_ms = now_ms
        log.info("group %s: computed a new target assignment for epoch %d with the sticky assignor",
                 group.group_id, group.group_epoch)

    def _endpoints(self, group: StreamsGroup) -> list[tuple[str, int, dict[str, list[int]], dict[str, list[int]]]]:
        """Kafka's EndpointToPartitionsManager: for each member with an endpoint, the partitions of the
        source and repartition source topics of its active tasks, and of its standby and warm-up ones."""
        configured = group.configured
        if configured is None or configured.subtopologies is None:
            return []
        subs = configured.subtopologies
        out = []

        def partitions(tasks: Iterable[tuple[str, Iterable[int]]]) -> dict[str, list[int]]:
            found: dict[str, set[int]] = {}
            for s, ps in tasks:
                sub = subs.get(s)
                if sub is None:
                    continue
                for topic in sorted(sub.source_topics | set(sub.repartition_source_topics)):
                    info = self.shard.topics.topic(topic)
                    n = info.num_partitions if info is not None else 0
                    found.setdefault(topic, set()).update(p for p in ps if p < n)
            return {t: sorted(ps) for t, ps in sorted(found.items())}
        for m in sorted(group.members.values(), key=lambda m: m.member_id):
            if m.user_endpoint is None:
                continue
            out.append((m.user_endpoint[0], m.user_endpoint[1], partitions(m.assigned.active.items()),
                        partitions([*m.assigned.standby.items(), *m.assigned.warmup.items()])))
        return out

    # -- leaving and fencing ------------------------------------------------------------------------

    def _leave(self, now_ms: int, req: StreamsGroupHeartbeatRequest) -> StreamsGroupHeartbeatResult:
        """Kafka's streamsGroupLeave."""
        group = self.streams_group(req.group_id)
        if req.shutdown_application:
            group.shutdown_requested_by = req.member_id
        if req.instance_id is None:
            member = group.members.get(req.member_id)
            if member is None:
                raise Refused(ErrorCode.unknown_member_id,
                              f"Member {req.member_id} is not a member of group {group.group_id}.")
            log.info("group %s: member %s left the streams group", group.group_id, member.member_id)
            self.fence(group, member, now_ms)
        else:
            member = group.static_member(req.instance_id)
            if member is None:
                raise Refused(ErrorCode.unknown_member_id, f"Instance id {req.instance_id} is unknown.")
            if member.member_id != req.member_id:
                raise Refused(ErrorCode.fenced_instance_id,
                              f"Static member {req.member_id} with instance id {req.instance_id} was fenced by member "
                              f"{member.member_id}.")
            if req.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
                log.info("group %s: static member %s with instance id %s temporarily left the streams group",
                         group.group_id, member.member_id, req.instance_id)
                group.update_member(replace(member, member_epoch=LEAVE_GROUP_STATIC_MEMBER_EPOCH,
                                            pending_revocation=AssignedTasks(),
                                            assigned=member.assigned.with_epochs_zero()))
                group.rebalance_deadlines.pop(member.member_id, None)
                group.refresh_state(now_ms)
                self._persist(group, now_ms)
            else:
                log.info("group %s: static member %s with instance id %s left the streams group", group.group_id,
                         member.member_id, req.instance_id)
                self.fence(group, member, now_ms)
        return StreamsGroupHeartbeatResult(ErrorCode.none, None, req.member_id, req.member_epoch, status=[])

    def fence(self, group: StreamsGroup, member: StreamsGroupMember, now_ms: int) -> None:
        """Kafka's streamsGroupFenceMember: the member goes, the group epoch goes up; the last
        member's leaving sets the assignment epoch too (an Empty group has nothing to assign)."""
        last = len(group.members) == 1
        group.remove_member(member.member_id)
        self.task_offsets.get(group.group_id, {}).pop(member.member_id, None)
        group.group_epoch += 1
        self.rebalances += 1
        if last:
            group.assignment_epoch = group.group_epoch
            group.assignment_timestamp_ms = 0
        group.refresh_state(now_ms)
        self._persist(group, now_ms)

    # -- timers ---------------------------------------------------------------------------------------

    def _schedule_session(self, group: StreamsGroup, member_id: str, now: float) -> None:
        deadline = now + self.config.streams_session_timeout_ms / 1000
        group.session_deadlines[member_id] = deadline
        self.shard.schedule(group.group_id, deadline)

    def _schedule_rebalance(self, group: StreamsGroup, member: StreamsGroupMember, now: float) -> None:
        deadline = now + max(member.rebalance_timeout_ms, 0) / 1000
        group.rebalance_deadlines[member.member_id] = (deadline, member.member_epoch)
        self.shard.schedule(group.group_id, deadline)

    # -- StreamsGroupDescribe -----------------------------------------------------------------------

    def describe(self, group_ids: Iterable[str]) -> list[StreamsGroupDescription]:
        described = []
        for group_id in group_ids:
            try:
                group = self.streams_group(group_id)
            except Refused as refused:
                described.append(StreamsGroupDescription(group_id, refused.error, refused.message))
                continue
            offsets = self.task_offsets.get(group_id, {})
            described.append(StreamsGroupDescription(group_id, group=group, members=tuple(
                StreamsMemberDescription(m, group.target_of(m.member_id), *offsets.get(m.member_id, ({}, {})))
                for m in group.members.values())))
        return described

    # -- persistence --------------------------------------------------------------------------------

    def _persist(self, group: StreamsGroup, now_ms: int, drop_classic_record: bool = False) -> None:
        try:
            self.shard.store.write_group(STREAMS, group.group_id, group.to_stored(), now_ms,
                                         replacing=CLASSIC if drop_classic_record else None)
        except OSError as exc:
            log.error("group %s: storing the streams group's records in %s failed: %s", group.group_id, TOPIC,
                      storage_error_message(exc))


# The KIP-1071 streams group type (groups/types.py): its records are the six StreamsGroup* kinds.
STREAMS_GROUP_TYPE = GroupType(STREAMS, StreamsGroupManager, StreamsGroupRecords)
