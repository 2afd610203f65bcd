"""The KIP-932 share group protocol: ShareGroupHeartbeat, ShareGroupDescribe, the share groups'
timeouts, and the group side of the share-group admin APIs (the share half of Kafka 4.4's
`GroupMetadataManager`).

A heartbeat does, as Kafka's shareGroupHeartbeat:

1. validate the request (INVALID_REQUEST with Kafka's messages); epoch -1 leaves (`_leave`);
2. find the group, creating it for a join (epoch 0); a group id of another type is
   GROUP_ID_NOT_FOUND ("Group g is not a share group."), as Kafka keeps one type per id;
3. find or create the member: GROUP_MAX_SIZE_REACHED (`group.share.max.size`), UNKNOWN_MEMBER_ID,
   FENCED_MEMBER_EPOCH (an epoch ahead of the member's, or behind it and not its previous one);
4. update the member; bump the group epoch when a subscription changed, the subscribed topics
   changed (the metadata hash), or initialized share partitions are not all assigned (Kafka's
   initializedAssignmentPending). A new group's epoch is 1, as Kafka 4.4's (KAFKA-20268), so a
   first join makes it 2;
5. recompute the target assignment with the simple assignor (share_assignor.py) over the initialized
   partitions when the group epoch is ahead of the assignment epoch and `share.assignment.interval.ms`
   has passed since the last computation (KIP-1263; a group's first is at once); until then the
   members keep the last target and its epoch (a new member: none, at the assignment epoch);
6. move the member to its target (no revocation in a share group), schedule its session timeout
   (`share.session.timeout.ms`, the group's or the broker's);
7. initialize the share partitions of subscribed topics that have none yet, with the share
   coordinator (start offset -1, so `share.auto.offset.reset` decides at the first fetch; 0 for
   partitions added to a topic the group already reads), and record them (type 15). Kafka sends
   the InitializeShareGroupState after the answer and records the partitions initialized when it
   completes; here it is a call in process that completes at once. Either way a new topic's
   partitions are assigned from the member's next heartbeat on (with a new group epoch): a
   joining member's first answer has no partitions;
8. answer its id, epoch, the heartbeat interval (`share.heartbeat.interval.ms`) and its assignment
   when it joined, sent a full request (subscribed topics) or its assignment changed;
9. persist what changed as Kafka's records (storage/share_group_records.py).

Pure: `now` is monotonic seconds, `now_ms` wall-clock milliseconds; the shell supplies them and
fires the timers the shard schedules. The share coordinator (`share_state`) is called in process.
"""

from __future__ import annotations

import hashlib
import logging
import uuid
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Iterable, Mapping, Protocol, cast

from minibroker.groups.share_assignor import SIMPLE, simple_assign
from minibroker.groups.share_group import (
    LEAVE_GROUP_MEMBER_EPOCH,
    SHARE,
    ShareGroup,
    ShareGroupMember,
)
from minibroker.groups.types import GroupType
from minibroker.protocol.errors import ErrorCode
from minibroker.storage.errors import storage_error_message
from minibroker.storage.offsets_store import TOPIC
from minibroker.storage.share_group_records import ShareGroupRecords
from minibroker.storage.share_state import ShareStateKey

if TYPE_CHECKING:
    from minibroker.config import BrokerConfig
    from minibroker.groups.api import Group, TopicsImage
    from minibroker.groups.runtime import ShardRuntime

__all__ = ["SHARE_GROUP_TYPE", "ShareGroupDescription", "ShareGroupHeartbeatRequest", "ShareGroupHeartbeatResult",
           "ShareGroupManager", "ShareGroupSettings", "ShareMemberDescription", "ShareStateInitializer"]

log = logging.getLogger(__name__)

MAX_MEMBER_ID_LENGTH = 36  # Kafka's KafkaApis.isMemberIdValid


class ShareStateInitializer(Protocol):
    """The share coordinator's InitializeShareGroupState and DeleteShareGroupState, in process."""

    def initialize_state(self, key: ShareStateKey, state_epoch: int, start_offset: int) -> None: ...

    def delete_state(self, key: ShareStateKey) -> None: ...


@dataclass(frozen=True)
class ShareGroupSettings:
    """The broker's group.share.* settings the share groups use (the per-group ones through the
    GROUP config resource, minibroker.group_configs, fall back to these)."""

    session_timeout_ms: int = 45_000
    heartbeat_interval_ms: int = 5_000
    max_size: int = 200
    assignors: tuple[str, ...] = (SIMPLE,)
    assignment_interval_ms: int = 1_000

    @classmethod
    def from_broker(cls, config: BrokerConfig) -> ShareGroupSettings:
        return cls(session_timeout_ms=config["group.share.session.timeout.ms"],
                   heartbeat_interval_ms=config["group.share.heartbeat.interval.ms"],
                   max_size=config["group.share.max.size"],
                   assignors=config["group.share.assignors"],
                   assignment_interval_ms=config["group.share.assignment.interval.ms"])


@dataclass(frozen=True)
class ShareGroupHeartbeatRequest:
    """A ShareGroupHeartbeat as the coordinator sees it (None: not sent, unchanged)."""

    group_id: str
    member_id: str
    member_epoch: int
    client_id: str = ""
    client_host: str = ""
    rack_id: str | None = None
    subscribed_topic_names: tuple[str, ...] | None = None


@dataclass
class ShareGroupHeartbeatResult:
    error: ErrorCode
    message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    assignment: Mapping[uuid.UUID, tuple[int, ...]] | None = None  # None: not sent this time


@dataclass(frozen=True)
class ShareMemberDescription:
    member_id: str
    rack_id: str | None
    member_epoch: int
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    assignment: Mapping[uuid.UUID, tuple[int, ...]]


@dataclass(frozen=True)
class ShareGroupDescription:
    """ShareGroupDescribe's view of one group, or its error."""

    group_id: str
    error: ErrorCode = ErrorCode.none
    message: str | None = None
    state: str = ""
    group_epoch: int = 0
    assignment_epoch: int = 0
    assignor: str = SIMPLE
    members: tuple[ShareMemberDescription, ...] = ()


class Refused(Exception):
    def __init__(self, error: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.error = error
        self.message = message


def _blank(value: str | None) -> bool:
    # Kafka's throwIfEmptyString: Java's trim() drops every character at or below U+0020.
    return value is not None and not value.strip("".join(chr(c) for c in range(33)))


def _sorted_assignment(assignment: Mapping[uuid.UUID, frozenset[int]]) -> dict[uuid.UUID, tuple[int, ...]]:
    return {t: tuple(sorted(ps)) for t, ps in sorted(assignment.items(), key=lambda item: str(item[0])) if ps}


class ShareGroupManager:
    """The share group protocol's requests and timers, on the groups the shard holds (the share
    group type's GroupTypeManager, groups/types.py)."""

    def __init__(self, shard: ShardRuntime) -> None:
        self.shard = shard
        self.settings = ShareGroupSettings()
        self.share_state: ShareStateInitializer | None = None
        self.rebalances = 0

    def configure(self, settings: ShareGroupSettings, share_state: ShareStateInitializer | None) -> None:
        """The broker's settings and share coordinator (the broker calls this once it has both)."""
        self.settings = settings
        self.share_state = share_state

    @property
    def topics(self) -> TopicsImage:
        return self.shard.topics

    # -- the group type (groups/types.py) -------------------------------------------------------------

    def load(self, now_ms: int) -> Iterable[Group]:
        stored = self.shard.store.group_records(SHARE).groups
        return [ShareGroup.from_stored(group_id, record, now_ms) for group_id, record in stored.items()]

    def parked_deadline(self, group: Group) -> float | None:
        return None  # a ShareGroupHeartbeat never waits

    def close(self, group: Group) -> None:
        """Nothing: no request waits on a share group."""

    def start_timers(self, now: float) -> None:
        """The session timeouts of the members of groups loaded at start-up (a member that does
        not come back is fenced, as Kafka's onLoaded does)."""
        for any_group in list(self.shard.groups.values()):
            if any_group.group_type != SHARE:
                continue
            group = cast(ShareGroup, any_group)
            if not group.sessions_started:
                group.sessions_started = True
                for member_id in group.members:
                    self._schedule_session(group, member_id, now)

    def fire_timers(self, any_group: Group, now: float, now_ms: int) -> None:
        group = cast(ShareGroup, any_group)
        for member_id, deadline in sorted(group.session_deadlines.items(), key=lambda item: item[1]):
            member = group.members.get(member_id)
            if deadline <= now and member is not None:
                log.info("group %s: member %s fenced: its session expired", group.group_id, member_id)
                self.fence(group, member, now_ms)

    # -- configs ----------------------------------------------------------------------------------------

    def _group_value(self, group_id: str, name: str, default: int) -> int:
        configs = self.shard.group_configs
        return configs.value(group_id, name) if configs is not None else default

    def session_timeout_ms(self, group_id: str) -> int:
        return self._group_value(group_id, "share.session.timeout.ms", self.settings.session_timeout_ms)

    def heartbeat_interval_ms(self, group_id: str) -> int:
        return self._group_value(group_id, "share.heartbeat.interval.ms", self.settings.heartbeat_interval_ms)

    def assignment_interval_ms(self, group_id: str) -> int:
        return self._group_value(group_id, "share.assignment.interval.ms", self.settings.assignment_interval_ms)

    def _can_compute_assignment(self, group: ShareGroup, now_ms: int) -> bool:
        """Kafka's canComputeNextTargetAssignment: never computed yet, no interval, or the interval
        (`share.assignment.interval.ms`) since the last computation has passed."""
        if group.assignment_timestamp_ms == 0:
            return True
        interval = self.assignment_interval_ms(group.group_id)
        return interval == 0 or now_ms >= group.assignment_timestamp_ms + interval

    def _schedule_session(self, group: ShareGroup, member_id: str, now: float) -> None:
        deadline = now + self.session_timeout_ms(group.group_id) / 1000
        group.session_deadlines[member_id] = deadline
        self.shard.schedule(group.group_id, deadline)

    # -- finding groups -----------------------------------------------------------------------------------

    def share_group(self, group_id: str) -> ShareGroup:
        """Kafka's shareGroup(groupId): the group, or GROUP_ID_NOT_FOUND."""
        group = self.shard.groups.get(group_id)
        if group is None or group.is_dead():
            raise Refused(ErrorCode.group_id_not_found, f"Group {group_id} not found.")
        if group.group_type != SHARE:
            raise Refused(ErrorCode.group_id_not_found, f"Group {group_id} is not a share group.")
        return cast(ShareGroup, group)

    def _find_group(self, group_id: str, create: bool, now_ms: int) -> ShareGroup:
        """Kafka's getOrMaybeCreateShareGroup (a new group is registered only when the request succeeds)."""
        existing = self.shard.groups.get(group_id)
        if existing is None or existing.is_dead():
            if not create:
                raise Refused(ErrorCode.group_id_not_found, f"Share group {group_id} not found.")
            return ShareGroup(group_id, now_ms)
        if existing.group_type != SHARE:
            raise Refused(ErrorCode.group_id_not_found, f"Group {group_id} is not a share group.")
        return cast(ShareGroup, existing)

    # -- ShareGroupHeartbeat ----------------------------------------------------------------------------

    def heartbeat(self, now: float, now_ms: int, request: ShareGroupHeartbeatRequest) -> ShareGroupHeartbeatResult:
        self.start_timers(now)
        try:
            self._validate(request)
            if request.member_epoch == LEAVE_GROUP_MEMBER_EPOCH:
                return self._leave(now_ms, request)
            return self._heartbeat(now, now_ms, request)
        except Refused as refused:
            return ShareGroupHeartbeatResult(refused.error, refused.message)

    @staticmethod
    def _validate(req: ShareGroupHeartbeatRequest) -> None:
        """Kafka's KafkaApis member id check and throwIfShareGroupHeartbeatRequestIsInvalid."""
        invalid = ErrorCode.invalid_request
        if not req.member_id or len(req.member_id) > MAX_MEMBER_ID_LENGTH:
            raise Refused(invalid, "Invalid member id in the request.")
        if _blank(req.member_id):
            raise Refused(invalid, "MemberId can't be empty.")
        if not req.group_id or _blank(req.group_id):
            raise Refused(invalid, "GroupId can't be empty.")
        if _blank(req.rack_id):
            raise Refused(invalid, "RackId can't be empty.")
        if req.member_epoch == 0:
            if not req.subscribed_topic_names:
                raise Refused(invalid, "SubscribedTopicNames must be set in first request.")
        elif req.member_epoch < LEAVE_GROUP_MEMBER_EPOCH:
            raise Refused(invalid, "MemberEpoch is invalid.")

    @staticmethod
    def _check_epoch(member: ShareGroupMember, received: int) -> None:
        """Kafka's throwIfShareGroupMemberEpochIsInvalid."""
        if received == 0:
            return
        if received > member.member_epoch:
            raise Refused(ErrorCode.fenced_member_epoch,
                          f"The share group member has a greater member epoch ({received}) than the one known by the "
                          f"group coordinator ({member.member_epoch}). The member must abandon all its partitions "
                          f"and rejoin.")
        if received < member.member_epoch and received != member.previous_member_epoch:
            raise Refused(ErrorCode.fenced_member_epoch,
                          f"The share group member has a smaller member epoch ({received}) than the one known by the "
                          f"group coordinator ({member.member_epoch}), and it does not match the previous member "
                          f"epoch ({member.previous_member_epoch}). The member must abandon all its partitions and "
                          f"rejoin.")

    def _heartbeat(self, now: float, now_ms: int, req: ShareGroupHeartbeatRequest) -> ShareGroupHeartbeatResult:
        create = req.member_epoch == 0
        group = self._find_group(req.group_id, create, now_ms)
        if len(group.members) >= self.settings.max_size and req.member_id not in group.members:
            raise Refused(ErrorCode.group_max_size_reached,
                          f"The share group has reached its maximum capacity of {self.settings.max_size} members.")
        member = group.members.get(req.member_id)
        if member is None:
            if not create:
                raise Refused(ErrorCode.unknown_member_id,
                              f"Member {req.member_id} is not a member of group {group.group_id}.")
            member = ShareGroupMember(req.member_id)
            log.info("group %s: member %s joins the share group", group.group_id, req.member_id)
        self._check_epoch(member, req.member_epoch)

        names = member.subscribed_topic_names
        if req.subscribed_topic_names is not None:
            names = tuple(sorted(set(req.subscribed_topic_names)))
        updated = replace(member, rack_id=req.rack_id if req.rack_id is not None else member.rack_id,
                          subscribed_topic_names=names, client_id=req.client_id, client_host=req.client_host)
        subscription_changed = names != member.subscribed_topic_names
        bump = subscription_changed
        members_after = dict(group.members)
        members_after[updated.member_id] = updated
        subscribed = {name for m in members_after.values() for name in m.subscribed_topic_names}
        if group.assignment_epoch >= group.group_epoch and self._initialized_assignment_pending(group, subscribed):
            bump = True
        metadata_hash = self._metadata_hash(subscribed)
        if metadata_hash != group.metadata_hash:
            bump = True
        group_epoch = group.group_epoch + 1 if bump else group.group_epoch

        # Nothing was refused: apply it all.
        if self.shard.groups.get(group.group_id) is not group:
            self.shard.register(group)
        if bump:
            group.group_epoch = group_epoch
            group.metadata_hash = metadata_hash
            self.rebalances += 1
            log.info("group %s: group epoch %d", group.group_id, group_epoch)
        group.update_member(updated)
        if group.group_epoch > group.assignment_epoch and self._can_compute_assignment(group, now_ms):
            group.target_assignment = self._compute_target(group)
            group.assignment_epoch = group.group_epoch
            group.assignment_timestamp_ms = now_ms
            log.info("group %s: target assignment for epoch %d computed with the simple assignor", group.group_id,
                     group.group_epoch)
        reconciled = updated.with_target(group.assignment_epoch, group.target_assignment.get(updated.member_id, {}),
                                         self._topic_id, subscription_changed)
        group.update_member(reconciled)
        self._schedule_session(group, reconciled.member_id, now)
        group.refresh_state(now_ms)
        # Share partitions of subscribed topics without state are initialized now; they are
        # assigned from the next heartbeat on, which bumps the group epoch (as in Kafka, where the
        # initialization completes after this heartbeat's answer).
        self._initialize_share_partitions(group, subscribed, group_epoch, now_ms)
        self._persist(group, now_ms)

        send = req.member_epoch == 0 or req.subscribed_topic_names is not None or reconciled.assigned != member.assigned
        return ShareGroupHeartbeatResult(
            ErrorCode.none, None, reconciled.member_id, reconciled.member_epoch,
            self.heartbeat_interval_ms(group.group_id),
            _sorted_assignment(reconciled.assigned) if send else None)

    def _topic_id(self, name: str) -> uuid.UUID | None:
        info = self.topics.topic(name)
        return None if info is None else info.topic_id

    def _metadata_hash(self, names: Iterable[str]) -> int:
        """A hash of the subscribed topics that exist (ids, names, partition counts): it moves when
        one is created, deleted or gains partitions (Kafka's metadata hash; not its algorithm)."""
        digest = hashlib.blake2b(digest_size=8)
        for name in sorted(names):
            info = self.topics.topic(name)
            if info is not None:
                digest.update(f"{info.topic_id}:{name}:{info.num_partitions};".encode())
        return int.from_bytes(digest.digest(), "big", signed=True)

    def _initialized_assignment_pending(self, group: ShareGroup, subscribed: set[str]) -> bool:
        """Kafka's initializedAssignmentPending: an initialized subscribed partition no member has."""
        if not group.members or not group.initialized:
            return False
        assigned: dict[uuid.UUID, set[int]] = {}
        for assignment in group.target_assignment.values():
            for topic_id, ps in assignment.items():
                assigned.setdefault(topic_id, set()).update(ps)
        return any(name in subscribed and assigned.get(topic_id, set()) != set(ps)
                   for topic_id, (name, ps) in group.initialized.items())

    def _initialize_share_partitions(self, group: ShareGroup, subscribed: set[str], state_epoch: int,
                                     now_ms: int) -> bool:
        """Initialize the share partitions of subscribed topics that have no state yet (Kafka's
        maybeCreateInitializeShareGroupStateRequest and initializeShareGroupState); True when
        some were."""
        changed = False
        for name in sorted(subscribed):
            info = self.topics.topic(name)
            if info is None:
                continue
            known = group.initialized.get(info.topic_id)
            have = known[1] if known is not None else frozenset()
            missing = sorted(set(range(info.num_partitions)) - have)
            if not missing:
                continue
            # Partitions added to a topic the group already reads start at 0; a new topic's at -1
            # (share.auto.offset.reset decides when the share partition is first loaded).
            start_offset = 0 if known is not None or info.topic_id in group.initializing else -1
            done = []
            for partition in missing:
                key = ShareStateKey(group.group_id, info.topic_id, partition)
                try:
                    if self.share_state is not None:
                        self.share_state.initialize_state(key, state_epoch, start_offset)
                except Exception as exc:  # noqa: BLE001 - the share coordinator's refusal or a disk error
                    log.error("group %s: initializing the share partition %s-%d failed: %s", group.group_id, name,
                              partition, getattr(exc, "message", exc))
                    continue
                done.append(partition)
            if done:
                group.initialized[info.topic_id] = (name, have | frozenset(done))
                group.initializing.pop(info.topic_id, None)
                group.deleting.pop(info.topic_id, None)
                log.info("group %s: share partitions %s of %s initialized (start offset %d)", group.group_id, done,
                         name, start_offset)
                changed = True
        return changed

    def _compute_target(self, group: ShareGroup) -> dict[str, dict[uuid.UUID, frozenset[int]]]:
        subscriptions = {}
        partitions = {}
        for member in group.members.values():
            ids = set()
            for name in member.subscribed_topic_names:
                info = self.topics.topic(name)
                if info is not None:
                    ids.add(info.topic_id)
                    partitions[info.topic_id] = info.num_partitions
            subscriptions[member.member_id] = frozenset(ids)
        return simple_assign(subscriptions, group.target_assignment, partitions, group.is_assignable)

    # -- leaving and fencing -------------------------------------------------------------------------------

    def _leave(self, now_ms: int, req: ShareGroupHeartbeatRequest) -> ShareGroupHeartbeatResult:
        group = self.share_group(req.group_id)
        member = group.members.get(req.member_id)
        if member is None:
            raise Refused(ErrorCode.unknown_member_id,
                          f"Member {req.member_id} is not a member of group {group.group_id}.")
        log.info("group %s: member %s left the share group", group.group_id, member.member_id)
        self.fence(group, member, now_ms)
        return ShareGroupHeartbeatResult(ErrorCode.none, None, req.member_id, req.member_epoch)

    def fence(self, group: ShareGroup, member: ShareGroupMember, now_ms: int) -> None:
        """Kafka's shareGroupFenceMember: remove the member and bump the group epoch."""
        group.remove_member(member.member_id)
        group.metadata_hash = self._metadata_hash(group.subscribed_topic_names())
        group.group_epoch += 1
        if not group.members:  # an empty group's next member is assigned at once
            group.assignment_epoch, group.assignment_timestamp_ms = group.group_epoch, 0
        self.rebalances += 1
        group.refresh_state(now_ms)
        self._persist(group, now_ms)

    # -- ShareGroupDescribe ---------------------------------------------------------------------------------

    def describe(self, group_ids: Iterable[str]) -> list[ShareGroupDescription]:
        described = []
        for group_id in group_ids:
            try:
                group = self.share_group(group_id)
            except Refused as refused:
                described.append(ShareGroupDescription(group_id, refused.error, refused.message))
                continue
            described.append(ShareGroupDescription(
                group_id, ErrorCode.none, None, group.state_name, group.group_epoch, group.assignment_epoch, SIMPLE,
                tuple(ShareMemberDescription(m.member_id, m.rack_id, m.member_epoch, m.client_id, m.client_host,
                                             m.subscribed_topic_names, _sorted_assignment(m.assigned))
                      for m in group.members.values())))
        return described

    # -- the admin APIs' group side ----------------------------------------------------------------------------

    def initialized_partitions(self, group_id: str) -> dict[uuid.UUID, tuple[str, frozenset[int]]]:
        """The share partitions the group has state for (DescribeShareGroupOffsets of all topics)."""
        return dict(self.share_group(group_id).initialized)

    def alter_offsets(self, now_ms: int, group_id: str, offsets: Mapping[str, Mapping[int, int]]
                      ) -> dict[str, dict[int, tuple[ErrorCode, str | None]]]:
        """AlterShareGroupOffsets (Kafka's alterShareGroupOffsets): the group (created when absent)
        must be empty; each partition's share state is initialized again at the given start offset.
        Returns the errors by topic name and partition (Refused for the group as a whole)."""
        group = self._find_group(group_id, True, now_ms)
        if group.members:
            raise Refused(ErrorCode.non_empty_group, "The group is not empty.")
        if self.shard.groups.get(group_id) is not group:
            self.shard.register(group)
        results: dict[str, dict[int, tuple[ErrorCode, str | None]]] = {}
        for name, partitions in offsets.items():
            info = self.topics.topic(name)
            results[name] = {}
            done = set()
            for partition, start_offset in partitions.items():
                if info is None or not 0 <= partition < info.num_partitions:
                    results[name][partition] = (ErrorCode.unknown_topic_or_partition,
                                                "This server does not host this topic-partition.")
                    continue
                try:
                    if self.share_state is not None:
                        self.share_state.initialize_state(ShareStateKey(group_id, info.topic_id, partition),
                                                          group.group_epoch, start_offset)
                except Exception as exc:  # noqa: BLE001 - the share coordinator's refusal or a disk error
                    results[name][partition] = (getattr(exc, "error_code", ErrorCode.unknown_server_error),
                                                getattr(exc, "message", str(exc)))
                    continue
                results[name][partition] = (ErrorCode.none, None)
                done.add(partition)
            if info is not None and done:
                have = group.initialized.get(info.topic_id, (name, frozenset()))[1]
                group.initialized[info.topic_id] = (name, have | frozenset(done))
                group.deleting.pop(info.topic_id, None)
        group.refresh_state(now_ms)
        self._persist(group, now_ms)
        return results

    def delete_offsets(self, now_ms: int, group_id: str, topics: Iterable[str]
                       ) -> dict[str, tuple[uuid.UUID | None, ErrorCode, str | None]]:
        """DeleteShareGroupOffsets (Kafka's initiate/completeDeleteShareGroupOffsets): the group
        must exist and be empty; each topic's share state is deleted. Returns (topic id, error,
        message) by topic name (Refused for the group as a whole)."""
        group = self.share_group(group_id)
        if group.members:
            raise Refused(ErrorCode.non_empty_group, "The group is not empty.")
        results: dict[str, tuple[uuid.UUID | None, ErrorCode, str | None]] = {}
        for name in topics:
            info = self.topics.topic(name)
            if info is None:
                results[name] = (None, ErrorCode.unknown_topic_or_partition,
                                 "This server does not host this topic-partition.")
                continue
            entry = group.initialized.get(info.topic_id)
            if entry is None and info.topic_id not in group.deleting:
                results[name] = (None, ErrorCode.unknown_topic_or_partition, "There is no offset information to delete.")
                continue
            partitions = entry[1] if entry is not None else frozenset(range(info.num_partitions))
            group.initialized.pop(info.topic_id, None)
            group.deleting[info.topic_id] = name
            try:
                for partition in sorted(partitions):
                    if self.share_state is not None:
                        self.share_state.delete_state(ShareStateKey(group_id, info.topic_id, partition))
            except Exception as exc:  # noqa: BLE001 - a disk error: the topic stays in deleting
                results[name] = (info.topic_id, getattr(exc, "error_code", ErrorCode.unknown_server_error),
                                 getattr(exc, "message", str(exc)))
                continue
            group.deleting.pop(info.topic_id, None)
            results[name] = (info.topic_id, ErrorCode.none, None)
        self._persist(group, now_ms)
        return results

    def delete_share_state(self, group: ShareGroup) -> None:
        """A share group being deleted (DeleteGroups): its share partitions' state goes too
        (Kafka's shareGroupBuildPartitionDeleteRequest)."""
        if self.share_state is None:
            return
        for topic_id, (_, partitions) in list(group.initialized.items()) + [
                (t, ("", ps)) for t, (_, ps) in group.initializing.items()]:
            for partition in sorted(partitions):
                try:
                    self.share_state.delete_state(ShareStateKey(group.group_id, topic_id, partition))
                except Exception as exc:  # noqa: BLE001 - logged; the records stay for a person
                    log.error("group %s: deleting the share state of %s-%d failed: %s", group.group_id, topic_id,
                              partition, getattr(exc, "message", exc))

    # -- persistence -----------------------------------------------------------------------------------------

    def _persist(self, group: ShareGroup, now_ms: int) -> None:
        try:
            self.shard.store.write_group(SHARE, group.group_id, group.to_stored(), now_ms)
        except OSError as exc:
            log.error("group %s: storing the share group's records in %s failed: %s", group.group_id, TOPIC,
                      storage_error_message(exc))


# The KIP-932 share group type (groups/types.py): its records are the six ShareGroup* kinds.
SHARE_GROUP_TYPE = GroupType(SHARE, ShareGroupManager, ShareGroupRecords)
