"""The KIP-848 consumer group protocol: ConsumerGroupHeartbeat, ConsumerGroupDescribe and the
timeouts of consumer groups (the consumer half of Kafka's `GroupMetadataManager`, Kafka 4.0).

A heartbeat does, as Kafka's consumerGroupHeartbeat, in order:

1. validate the request (INVALID_REQUEST with Kafka's messages, UNSUPPORTED_ASSIGNOR,
   INVALID_REGULAR_EXPRESSION); epoch -1 (leave) and -2 (a static member leaving for a while) go to
   `_leave`;
2. find the group, creating it for a join (epoch 0): a new id, or an Empty classic group, which
   becomes a consumer group keeping its committed offsets; a classic group with members, or any
   other heartbeat to a group that is not a consumer group, is GROUP_ID_NOT_FOUND (Kafka with
   `group.consumer.migration.policy=disabled`: no online upgrade);
3. find or create the member: GROUP_MAX_SIZE_REACHED (`group.consumer.max.size`),
   UNKNOWN_MEMBER_ID, FENCED_MEMBER_EPOCH (an epoch ahead of or behind the member's, unless it is
   the previous one and the member owns only partitions it still has: a lost response), and for
   static members (instance id) UNRELEASED_INSTANCE_ID (the instance id is held by a live member),
   FENCED_INSTANCE_ID, or the replacement of a member that left with epoch -2 (it takes over that
   member's assignment and target);
4. update the member; bump the group epoch when the group is new, a subscription changed, or the
   subscribed topics' partition counts did (the subscription metadata, recomputed each time);
5. recompute the target assignment with the group's assignor when the group epoch is ahead of the
   assignment epoch (assignors.py);
6. reconcile the member (consumer_group.reconcile), schedule its session timeout
   (`group.consumer.session.timeout.ms`) and, while it must revoke, its rebalance timeout (the
   member's own, max.poll.interval.ms in Java), after which it is fenced;
7. answer its member id, epoch, the heartbeat interval (`group.consumer.heartbeat.interval.ms`),
   and its assignment when it sent a full request or the assignment changed;
8. persist what changed as Kafka's records (storage/consumer_group_records.py).

Subscribed topic regexes (ConsumerGroupHeartbeat v1) are resolved with RE2 (google-re2: Kafka uses
RE2/J, the same syntax; matching takes time linear in the topic name, so no client's pattern can
stall the event loop, which a backtracking engine such as Python's `re` cannot promise), in full
match, internal topics excluded, at each heartbeat, where Kafka resolves them in the background.
Not done: classic-protocol members inside a consumer group (Kafka 4's mixed groups and online
migration), rack-aware assignment, and per-group dynamic configs (GROUP config resources).

Pure: `now` is monotonic seconds (deadlines), `now_ms` wall-clock milliseconds; the shell
(coordinator.py) supplies them and fires the timers the shard schedules.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import replace
from typing import TYPE_CHECKING, Iterable, Mapping, cast

from minibroker.groups.api import (
    CLASSIC,
    CONSUMER,
    ConsumerGroupDescription,
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResult,
    ConsumerMemberDescription,
    TopicsImage,
)
from minibroker.groups.assignors import ASSIGNORS, MemberSpec, PartitionAssignorError
from minibroker.groups.consumer_group import (
    LEAVE_GROUP_MEMBER_EPOCH,
    LEAVE_GROUP_STATIC_MEMBER_EPOCH,
    Assignment,
    ConsumerGroup,
    ConsumerGroupMember,
    FencedMemberEpoch,
    MemberState,
    TopicMetadata,
    held_partitions,
    reconcile,
)
from minibroker.groups.types import GroupType
from minibroker.regex import RegexError, compile_client_regex
from minibroker.protocol.errors import ErrorCode
from minibroker.storage.consumer_group_records import ConsumerGroupRecords
from minibroker.storage.errors import storage_error_message
from minibroker.storage.offsets_store import TOPIC

if TYPE_CHECKING:
    from minibroker.groups.api import Group
    from minibroker.groups.runtime import ShardRuntime

log = logging.getLogger(__name__)


class Refused(Exception):
    """A request answered with an error; nothing was changed."""

    def __init__(self, error: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.error = error
        self.message = message


def _blank(value: str | None) -> bool:
    # Kafka's throwIfEmptyString: Java's trim() drops every character at or below U+0020.
    return value is not None and not value.strip("".join(chr(c) for c in range(33)))


def _sorted_assignment(assignment: Assignment) -> dict[uuid.UUID, tuple[int, ...]]:
    return {t: tuple(sorted(ps)) for t, ps in sorted(assignment.items(), key=lambda item: str(item[0]))}


def _is_subset(owned: Mapping[uuid.UUID, Iterable[int]] | None, assigned: Assignment) -> bool:
    if owned is None:
        return False
    return all(p in assigned.get(t, ()) for t, ps in owned.items() for p in ps)


def _is_internal(topic: str) -> bool:
    return topic.startswith("__")


class ConsumerGroupManager:
    """The consumer group protocol's requests and timers, on the groups the shard holds (the
    consumer group type's GroupTypeManager, groups/types.py)."""

    def __init__(self, shard: ShardRuntime) -> None:
        self.shard = shard
        self.config = shard.config
        self.rebalances = 0  # group epoch bumps, for tests and metrics

    # -- the group type (groups/types.py) ---------------------------------------------------------

    def load(self, now_ms: int) -> Iterable[Group]:
        """The consumer groups of the store's records (their members' sessions start with the timers)."""
        stored = self.shard.store.group_records(CONSUMER).groups
        return [ConsumerGroup.from_stored(group_id, record, now_ms) for group_id, record in stored.items()]

    def parked_deadline(self, group: Group) -> float | None:
        """None: a ConsumerGroupHeartbeat never waits."""
        return None

    def close(self, group: Group) -> None:
        """Nothing: no request waits on a consumer group."""

    @property
    def topics(self) -> TopicsImage:
        return self.shard.topics

    # -- ConsumerGroupHeartbeat ---------------------------------------------------------------------

    def heartbeat(self, now: float, now_ms: int, request: ConsumerGroupHeartbeatRequest
                  ) -> ConsumerGroupHeartbeatResult:
        if not self.config.consumer_protocol_enabled:
            return ConsumerGroupHeartbeatResult(
                ErrorCode.unsupported_version,
                "The consumer group protocol is not enabled: group.coordinator.rebalance.protocols "
                "does not include consumer.")
        self.start_timers(now)
        try:
            self._validate(request)
            if request.member_epoch in (LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH):
                return self._leave(now, now_ms, request)
            return self._heartbeat(now, now_ms, request)
        except Refused as refused:
            return ConsumerGroupHeartbeatResult(refused.error, refused.message)

    def _validate(self, req: ConsumerGroupHeartbeatRequest) -> None:
        """Kafka's throwIfConsumerGroupHeartbeatRequestIsInvalid, message for message."""
        invalid = ErrorCode.invalid_request
        if (req.api_version >= 1 or req.member_epoch > 0 or req.member_epoch == LEAVE_GROUP_MEMBER_EPOCH) and (
                not req.member_id or _blank(req.member_id)):
            raise Refused(invalid, "MemberId can't be empty.")
        if not req.group_id or _blank(req.group_id):
            raise Refused(invalid, "GroupId can't be empty.")
        if _blank(req.instance_id):
            raise Refused(invalid, "InstanceId can't be empty.")
        if _blank(req.rack_id):
            raise Refused(invalid, "RackId can't be empty.")
        if req.member_epoch == 0:
            if req.rebalance_timeout_ms == -1:
                raise Refused(invalid, "RebalanceTimeoutMs must be provided in first request.")
            if req.owned is None or any(req.owned.values()):
                raise Refused(invalid, "TopicPartitions must be empty when (re-)joining.")
            if req.subscribed_topic_names is None and req.subscribed_topic_regex is None:
                raise Refused(invalid, "Either SubscribedTopicNames or SubscribedTopicRegex must be non-null "
                                       "when (re-)joining.")
        elif req.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            if req.instance_id is None:
                raise Refused(invalid, "InstanceId can't be null.")
        elif req.member_epoch < LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            raise Refused(invalid, "MemberEpoch is invalid.")
        if req.server_assignor is not None and req.server_assignor not in self.config.consumer_assignors:
            raise Refused(ErrorCode.unsupported_assignor,
                          f"ServerAssignor {req.server_assignor} is not supported. Supported assignors: "
                          f"{', '.join(self.config.consumer_assignors)}.")
        if req.subscribed_topic_regex:
            try:
                compile_client_regex(req.subscribed_topic_regex)
            except RegexError as exc:
                raise Refused(ErrorCode.invalid_regular_expression,
                              f"SubscribedTopicRegex `{req.subscribed_topic_regex}` is not a valid regular "
                              f"expression: {exc}.") from None

    def _find_group(self, group_id: str, create: bool, now_ms: int) -> tuple[ConsumerGroup, Group | None]:
        """Kafka's getOrMaybeCreateConsumerGroup: (the group, an Empty classic group it replaces).
        A group created here is registered only when the heartbeat succeeds."""
        existing = self.shard.groups.get(group_id)
        if existing is None or existing.is_dead():
            if not create:
                raise Refused(ErrorCode.group_id_not_found, f"Consumer group {group_id} not found.")
            return ConsumerGroup(group_id, now_ms), None
        if existing.group_type == CONSUMER:
            return cast(ConsumerGroup, existing), None
        if create and existing.group_type == CLASSIC and existing.is_empty():
            return ConsumerGroup(group_id, now_ms), existing
        raise Refused(ErrorCode.group_id_not_found, f"Group {group_id} is not a consumer group.")

    def consumer_group(self, group_id: str) -> ConsumerGroup:
        """Kafka's consumerGroup(groupId): the group, or GROUP_ID_NOT_FOUND."""
        group = self.shard.groups.get(group_id)
        if group is None or group.is_dead():
            raise Refused(ErrorCode.group_id_not_found, f"Group {group_id} not found.")
        if group.group_type != CONSUMER:
            raise Refused(ErrorCode.group_id_not_found, f"Group {group_id} is not a consumer group.")
        return cast(ConsumerGroup, group)

    @staticmethod
    def _check_epoch(member: ConsumerGroupMember, received: int, owned) -> None:
        """Kafka's throwIfConsumerGroupMemberEpochIsInvalid."""
        if received > member.member_epoch:
            raise Refused(ErrorCode.fenced_member_epoch,
                          f"The consumer group member has a greater member epoch ({received}) than the one "
                          f"known by the group coordinator ({member.member_epoch}). The member must abandon "
                          f"all its partitions and rejoin.")
        if received < member.member_epoch and (
                received != member.previous_member_epoch or not _is_subset(owned, member.assigned)):
            # The previous epoch with a subset of the current partitions is a member whose
            # response with the new epoch was lost: accepted.
            raise Refused(ErrorCode.fenced_member_epoch,
                          f"The consumer group member has a smaller member epoch ({received}) than the one "
                          f"known by the group coordinator ({member.member_epoch}). The member must abandon "
                          f"all its partitions and rejoin.")

    def _find_member(self, group: ConsumerGroup, req: ConsumerGroupHeartbeatRequest, member_id: str,
                     create: bool) -> tuple[ConsumerGroupMember, ConsumerGroupMember | None]:
        """(the member, the static member it replaces)."""
        if req.instance_id is None:
            member = group.members.get(member_id)
            if member is None:
                if not create:
                    raise Refused(ErrorCode.unknown_member_id,
                                  f"Member {member_id} is not a member of group {group.group_id}.")
                member = ConsumerGroupMember(member_id)
                log.info("group %s: member %s joins the consumer group", group.group_id, member_id)
            self._check_epoch(member, req.member_epoch, req.owned)
            return member, None
        existing = group.static_member(req.instance_id)
        if create:
            if existing is None:
                log.info("group %s: static member %s (instance %s) joins the consumer group",
                         group.group_id, member_id, req.instance_id)
                return group.members.get(member_id) or ConsumerGroupMember(member_id), None
            if existing.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH:
                raise Refused(ErrorCode.unreleased_instance_id,
                              f"Static member {member_id} with instance id {req.instance_id} cannot join the "
                              f"group because the instance id is owned by {existing.member_id} member.")
            log.info("group %s: static member %s (instance %s) rejoins, replacing %s",
                     group.group_id, member_id, req.instance_id, existing.member_id)
            return replace(existing, member_id=member_id, member_epoch=0, previous_member_epoch=0), existing
        if existing is None:
            raise Refused(ErrorCode.unknown_member_id, f"Instance id {req.instance_id} is unknown.")
        if existing.member_id != member_id:
            raise Refused(ErrorCode.fenced_instance_id,
                          f"Static member {member_id} with instance id {req.instance_id} was fenced by member "
                          f"{existing.member_id}.")
        self._check_epoch(existing, req.member_epoch, req.owned)
        return existing, None

    def _heartbeat(self, now: float, now_ms: int, req: ConsumerGroupHeartbeatRequest) -> ConsumerGroupHeartbeatResult:
        create = req.member_epoch == 0
        group, replaced_classic = self._find_group(req.group_id, create, now_ms)
        member_id = req.member_id or str(uuid.uuid4())  # v0 lets the coordinator choose
        if (member_id not in group.members and group.static_member(req.instance_id) is None
                and len(group.members) >= self.config.consumer_max_size):
            raise Refused(ErrorCode.group_max_size_reached,
                          f"The consumer group has reached its maximum capacity of "
                          f"{self.config.consumer_max_size} members.")
        member, replaced = self._find_member(group, req, member_id, create)

        # 1. The member, updated with what the request says changed.
        names = member.subscribed_topic_names
        if req.subscribed_topic_names is not None:
            names = tuple(sorted(set(req.subscribed_topic_names)))
        regex = member.subscribed_topic_regex
        if req.subscribed_topic_regex is not None:
            regex = req.subscribed_topic_regex or None  # "" unsubscribes the regex
        updated = replace(
            member,
            instance_id=req.instance_id if req.instance_id is not None else member.instance_id,
            rack_id=req.rack_id if req.rack_id is not None else member.rack_id,
            rebalance_timeout_ms=req.rebalance_timeout_ms if req.rebalance_timeout_ms != -1
            else member.rebalance_timeout_ms,
            server_assignor=req.server_assignor if req.server_assignor is not None else member.server_assignor,
            subscribed_topic_names=names, subscribed_topic_regex=regex,
            client_id=req.client_id, client_host=req.client_host)
        bump = group.group_epoch == 0 or (names, regex) != (member.subscribed_topic_names,
                                                           member.subscribed_topic_regex)
        members_after = dict(group.members)
        if replaced is not None:
            members_after.pop(replaced.member_id, None)
        members_after[updated.member_id] = updated
        metadata = self._subscription_metadata(members_after.values())
        if metadata != group.subscription_metadata:
            bump = True
        group_epoch = group.group_epoch + 1 if bump else group.group_epoch

        # 2. The target assignment, when the group epoch moved past it.
        targets: dict[str, Assignment] | None = None
        if group_epoch > group.assignment_epoch:
            current = dict(group.target_assignment)
            if replaced is not None and replaced.member_id in current:
                current[updated.member_id] = current.pop(replaced.member_id)
            assignor = self._assignor(members_after.values())
            targets = self._compute_target(group, members_after, current, metadata, assignor)
            log.info("group %s: target assignment for epoch %d computed with the %s assignor",
                     group.group_id, group_epoch, assignor)
            target = targets.get(updated.member_id, {})
            target_epoch = group_epoch
        else:
            target = group.target_of(updated.member_id, updated.instance_id)
            target_epoch = group.assignment_epoch

        # 3. Reconcile the member towards its target.
        owned = None if req.owned is None else {t: frozenset(ps) for t, ps in req.owned.items()}
        # The partitions of a static member being replaced pass to its successor: free to it.
        held_by_replaced = set() if replaced is None else set(held_partitions(replaced))

        def partition_epoch(topic_id: uuid.UUID, p: int) -> int:
            return -1 if (topic_id, p) in held_by_replaced else group.partition_epoch(topic_id, p)
        if updated.is_reconciled_to(target_epoch):
            reconciled = updated
        else:
            try:
                reconciled = reconcile(updated, target_epoch, target, partition_epoch, owned)
            except FencedMemberEpoch as exc:
                raise Refused(ErrorCode.fenced_member_epoch, str(exc)) from None

        # Nothing was refused: apply it all.
        if self.shard.groups.get(group.group_id) is not group:
            self.shard.register(group)
            if replaced_classic is not None:
                log.info("group %s: the Empty classic group becomes a consumer group (its offsets stay)",
                         group.group_id)
        if replaced is not None:
            group.remove_member(replaced.member_id)
            if targets is None:
                # Kafka's replaceMember: the new member takes over the target assignment of the
                # static member it replaces (a recomputed one already has it under the new id).
                group.target_assignment[updated.member_id] = target
        if bump:
            group.group_epoch = group_epoch
            self.rebalances += 1
            log.info("group %s: group epoch %d", group.group_id, group_epoch)
        group.subscription_metadata = metadata
        if targets is not None:
            group.target_assignment = targets
            group.assignment_epoch = group_epoch
        group.update_member(reconciled)
        self._schedule_session(group, reconciled.member_id, now)
        if reconciled != updated:
            if reconciled.state is MemberState.UNREVOKED_PARTITIONS:
                deadline = now + max(reconciled.rebalance_timeout_ms, 0) / 1000
                group.rebalance_deadlines[reconciled.member_id] = (deadline, reconciled.member_epoch)
                self.shard.schedule(group.group_id, deadline)
            else:
                group.rebalance_deadlines.pop(reconciled.member_id, None)
        group.refresh_state(now_ms)
        self._persist(group, now_ms, drop_classic_record=replaced_classic is not None)

        full = req.member_epoch == 0 or (req.rebalance_timeout_ms != -1 and req.subscribed_topic_names is not None
                                         and req.owned is not None)
        send_assignment = full or reconciled.assigned != member.assigned
        return ConsumerGroupHeartbeatResult(
            ErrorCode.none, None, reconciled.member_id, reconciled.member_epoch,
            self._group_value(group.group_id, "consumer.heartbeat.interval.ms",
                              self.config.consumer_heartbeat_interval_ms),
            _sorted_assignment(reconciled.assigned) if send_assignment else None)

    # -- subscriptions and the target assignment ----------------------------------------------------

    def _subscribed_topics(self, members: Iterable[ConsumerGroupMember]) -> set[str]:
        names: set[str] = set()
        patterns = set()
        for member in members:
            names.update(member.subscribed_topic_names)
            if member.subscribed_topic_regex:
                patterns.add(member.subscribed_topic_regex)
        if patterns:
            names.update(self._resolve(patterns))
        return names

    def _resolve(self, patterns: Iterable[str]) -> set[str]:
        compiled = [compile_client_regex(p) for p in patterns]
        return {info.name for info in self.topics.topics()
                if not _is_internal(info.name) and any(c.fullmatch(info.name) for c in compiled)}

    def _member_topics(self, member: ConsumerGroupMember) -> set[str]:
        names = set(member.subscribed_topic_names)
        if member.subscribed_topic_regex:
            names |= self._resolve([member.subscribed_topic_regex])
        return names

    def _subscription_metadata(self, members: Iterable[ConsumerGroupMember]) -> dict[str, TopicMetadata]:
        """Kafka's computeSubscriptionMetadata: the subscribed topics that exist, with their ids and
        partition counts."""
        metadata = {}
        for name in sorted(self._subscribed_topics(members)):
            info = self.topics.topic(name)
            if info is not None:
                metadata[name] = TopicMetadata(info.topic_id, name, info.num_partitions)
        return metadata

    def _assignor(self, members: Iterable[ConsumerGroupMember]) -> str:
        votes: dict[str, int] = {}
        for member in members:
            if member.server_assignor is not None:
                votes[member.server_assignor] = votes.get(member.server_assignor, 0) + 1
        enabled = list(self.config.consumer_assignors)
        if not votes:
            return enabled[0]
        return max(votes, key=lambda name: (votes[name], -enabled.index(name) if name in enabled else -len(enabled)))

    def _compute_target(self, group: ConsumerGroup, members: Mapping[str, ConsumerGroupMember],
                        current: Mapping[str, Assignment], metadata: Mapping[str, TopicMetadata],
                        assignor: str) -> dict[str, Assignment]:
        """Kafka's TargetAssignmentBuilder: every member's subscription as topic ids of existing
        topics, its current target, and the assignor's answer."""
        specs = {}
        for member_id, member in members.items():
            topic_ids = frozenset(metadata[name].topic_id for name in self._member_topics(member) if name in metadata)
            specs[member_id] = MemberSpec(topic_ids, current.get(member_id, {}), member.instance_id)
        partitions = {t.topic_id: t.num_partitions for t in metadata.values()}
        try:
            result = ASSIGNORS[assignor](specs, partitions)
        except PartitionAssignorError as exc:
            log.error("group %s: the %s assignor failed: %s", group.group_id, assignor, exc)
            raise Refused(ErrorCode.unknown_server_error,
                          f"Failed to compute a new target assignment: {exc}") from None
        return {m: {t: ps for t, ps in a.items() if ps} for m, a in result.items()}

    # -- leaving and fencing ------------------------------------------------------------------------

    def _leave(self, now: float, now_ms: int, req: ConsumerGroupHeartbeatRequest) -> ConsumerGroupHeartbeatResult:
        """Kafka's consumerGroupLeave: epoch -1 leaves for good (the member is removed, the group
        epoch bumped); -2 is a static member going away for a while: it keeps its partitions and
        target, with epoch -2, until it rejoins or its session expires."""
        group = self.consumer_group(req.group_id)
        if req.instance_id is None:
            member = group.members.get(req.member_id)
            if member is None:
                raise Refused(ErrorCode.unknown_member_id,
                              f"Member {req.member_id} is not a member of group {group.group_id}.")
            log.info("group %s: member %s left the consumer group", group.group_id, member.member_id)
            self.fence(group, member, now_ms)
        else:
            member = group.static_member(req.instance_id)
            if member is None:
                raise Refused(ErrorCode.unknown_member_id, f"Instance id {req.instance_id} is unknown.")
            if member.member_id != req.member_id:
                raise Refused(ErrorCode.fenced_instance_id,
                              f"Static member {req.member_id} with instance id {req.instance_id} was fenced by "
                              f"member {member.member_id}.")
            if req.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
                log.info("group %s: static member %s (instance %s) left for now", group.group_id,
                         member.member_id, req.instance_id)
                group.update_member(replace(member, member_epoch=LEAVE_GROUP_STATIC_MEMBER_EPOCH,
                                            pending_revocation={}))
                group.rebalance_deadlines.pop(member.member_id, None)
                group.refresh_state(now_ms)
                self._persist(group, now_ms)
            else:
                log.info("group %s: static member %s (instance %s) left the consumer group", group.group_id,
                         member.member_id, req.instance_id)
                self.fence(group, member, now_ms)
        return ConsumerGroupHeartbeatResult(ErrorCode.none, None, req.member_id, req.member_epoch)

    def fence(self, group: ConsumerGroup, member: ConsumerGroupMember, now_ms: int) -> None:
        """Kafka's consumerGroupFenceMember: remove the member, refresh the subscription metadata
        and bump the group epoch; its partitions are free for the others at once."""
        group.remove_member(member.member_id)
        group.subscription_metadata = self._subscription_metadata(group.members.values())
        group.group_epoch += 1
        self.rebalances += 1
        group.refresh_state(now_ms)
        self._persist(group, now_ms)

    def _group_value(self, group_id: str, name: str, default: int) -> int:
        """A group config (KIP-848's dynamic group configs, minibroker.group_configs) of the group,
        else the broker's setting."""
        configs = self.shard.group_configs
        return configs.value(group_id, name) if configs is not None else default

    # -- timers -------------------------------------------------------------------------------------

    def _schedule_session(self, group: ConsumerGroup, member_id: str, now: float) -> None:
        timeout_ms = self._group_value(group.group_id, "consumer.session.timeout.ms",
                                       self.config.consumer_session_timeout_ms)
        deadline = now + timeout_ms / 1000
        group.session_deadlines[member_id] = deadline
        self.shard.schedule(group.group_id, deadline)

    def start_timers(self, now: float) -> None:
        """Start the session (and pending rebalance) timeouts of the members of groups loaded at
        start-up, as Kafka's onLoaded does: a member that does not come back is fenced."""
        for any_group in list(self.shard.groups.values()):
            if any_group.group_type != CONSUMER:
                continue
            group = cast(ConsumerGroup, any_group)
            if not group.sessions_started:
                group.sessions_started = True
                for member in group.members.values():
                    self._schedule_session(group, member.member_id, now)
                    if member.state is MemberState.UNREVOKED_PARTITIONS:
                        deadline = now + max(member.rebalance_timeout_ms, 0) / 1000
                        group.rebalance_deadlines[member.member_id] = (deadline, member.member_epoch)
                        self.shard.schedule(group.group_id, deadline)

    def fire_timers(self, any_group: Group, now: float, now_ms: int) -> None:
        """Fence the members whose session expired, or that did not revoke within their rebalance
        timeout (still at the epoch they had to leave)."""
        group = cast(ConsumerGroup, any_group)
        for member_id, deadline in sorted(group.session_deadlines.items(), key=lambda item: item[1]):
            member = group.members.get(member_id)
            if deadline <= now and member is not None:
                log.info("group %s: member %s fenced: its session expired", group.group_id, member_id)
                self.fence(group, member, now_ms)
        for member_id, (deadline, epoch) in sorted(group.rebalance_deadlines.items(), key=lambda item: item[1]):
            if deadline > now:
                continue
            del group.rebalance_deadlines[member_id]
            member = group.members.get(member_id)
            if member is not None and member.member_epoch == epoch:
                log.info("group %s: member %s fenced: it did not revoke its partitions within its rebalance "
                         "timeout (epoch %d)", group.group_id, member_id, epoch)
                self.fence(group, member, now_ms)

    # -- ConsumerGroupDescribe ----------------------------------------------------------------------

    def describe(self, group_ids: Iterable[str]) -> list[ConsumerGroupDescription]:
        described = []
        for group_id in group_ids:
            if not group_id:
                described.append(ConsumerGroupDescription(group_id, ErrorCode.invalid_group_id,
                                                          "Group id can't be empty."))
                continue
            try:
                group = self.consumer_group(group_id)
            except Refused as refused:
                described.append(ConsumerGroupDescription(group_id, refused.error, refused.message))
                continue
            described.append(ConsumerGroupDescription(
                group_id, ErrorCode.none, None, group.state_name, group.group_epoch, group.assignment_epoch,
                self._assignor(group.members.values()),
                tuple(ConsumerMemberDescription(
                    m.member_id, m.instance_id, m.rack_id, m.member_epoch, m.client_id, m.client_host,
                    m.subscribed_topic_names, m.subscribed_topic_regex, _sorted_assignment(m.assigned),
                    _sorted_assignment(group.target_assignment.get(m.member_id, {})))
                    for m in group.members.values())))
        return described

    # -- persistence --------------------------------------------------------------------------------

    def _persist(self, group: ConsumerGroup, now_ms: int, drop_classic_record: bool = False) -> None:
        """Write the group's changed records. On a storage error the running group goes on from
        memory; the store keeps what it last wrote, so the next write carries the difference."""
        try:
            self.shard.store.write_group(CONSUMER, group.group_id, group.to_stored(), now_ms,
                                         replacing=CLASSIC if drop_classic_record else None)
        except OSError as exc:
            log.error("group %s: storing the consumer group's records in %s failed: %s", group.group_id,
                      TOPIC, storage_error_message(exc))


# The KIP-848 consumer group type (groups/types.py): its records are the six ConsumerGroup* kinds.
CONSUMER_GROUP_TYPE = GroupType(CONSUMER, ConsumerGroupManager, ConsumerGroupRecords)
