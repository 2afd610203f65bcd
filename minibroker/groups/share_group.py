"""A KIP-932 share group and its members (Kafka 4.4's `ShareGroup`, `ShareGroupMember`,
`ShareGroupAssignmentBuilder`), pure data and rules.

A share group's members consume its subscribed topics' partitions cooperatively: a partition may be
assigned to several members at once, and records, not partitions, are what members hold (the share
partitions, minibroker/share/). So there is no revocation: a member moves to a new target
assignment at its next heartbeat, in one step (Kafka's ShareGroupAssignmentBuilder).

The epochs are those of KIP-848 groups (consumer_group.py): the *group epoch* goes up when a member
joins, leaves or changes its subscription, when a subscribed topic's partitions change, and when
share partitions the group subscribes to become initialized; the *assignment epoch* is the group
epoch the target assignment was computed for; a member's *epoch* is the assignment epoch it has
caught up with.

Only initialized share partitions are assigned: the group coordinator first has the share
coordinator initialize a share partition's state (ShareGroupStatePartitionMetadata records which),
as Kafka does.

The group's state (Kafka's ShareGroupState): Empty (no members), Stable (members), Dead once
deleted.

Pure: no trio, no clock; deadlines are monotonic seconds the manager sets.
"""

from __future__ import annotations

import enum
import uuid
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Callable, Mapping

from minibroker.groups.api import GroupOverview
from minibroker.protocol.errors import ErrorCode
from minibroker.storage.share_group_records import (
    StoredShareAssignment,
    StoredShareGroup,
    StoredShareMember,
    StoredStatePartitions,
    TopicPartitionsInfo,
)

if TYPE_CHECKING:
    from minibroker.storage.group_records import OffsetAndMetadata

__all__ = ["SHARE", "SHARE_PROTOCOL_TYPE", "ShareGroup", "ShareGroupMember", "ShareGroupState", "normalize"]

SHARE = "share"  # ListGroups' group type
SHARE_PROTOCOL_TYPE = "share"  # Kafka's ShareGroup.PROTOCOL_TYPE
LEAVE_GROUP_MEMBER_EPOCH = -1
STABLE_MEMBER_STATE = 0  # Kafka's MemberState.STABLE: a share member is always stable

Assignment = Mapping[uuid.UUID, frozenset[int]]


def normalize(assignment: Mapping[uuid.UUID, object]) -> dict[uuid.UUID, frozenset[int]]:
    """An assignment without empty topics, its partitions as frozensets."""
    return {t: frozenset(ps) for t, ps in assignment.items() if ps}  # type: ignore[call-overload]


class ShareGroupState(enum.Enum):
    EMPTY = "Empty"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(frozen=True)
class ShareGroupMember:
    """One member of a share group (immutable: the manager builds updated copies)."""

    member_id: str
    member_epoch: int = 0
    previous_member_epoch: int = 0
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    assigned: Assignment = field(default_factory=dict)

    def with_target(self, target_epoch: int, target: Assignment, topic_ids: Callable[[str], uuid.UUID | None],
                    subscription_changed: bool) -> ShareGroupMember:
        """Kafka's ShareGroupAssignmentBuilder.build: at a new target epoch the member takes its
        target (the partitions of topics it subscribes to) and the epoch; with a changed
        subscription only the partitions."""
        subscribed = {tid for tid in map(topic_ids, self.subscribed_topic_names) if tid is not None}
        filtered = {t: ps for t, ps in target.items() if t in subscribed and ps}
        if target_epoch != self.member_epoch:
            return replace(self, assigned=filtered, member_epoch=target_epoch, previous_member_epoch=self.member_epoch)
        if subscription_changed:
            return replace(self, assigned=filtered)
        return self

    def stored_metadata(self) -> StoredShareMember:
        return StoredShareMember(self.rack_id, self.client_id, self.client_host, self.subscribed_topic_names)

    def stored_assignment(self) -> StoredShareAssignment:
        return StoredShareAssignment(self.member_epoch, self.previous_member_epoch, STABLE_MEMBER_STATE,
                                     dict(self.assigned))


class ShareGroup:
    """A share group (the `Group` interface of groups/api.py, type "share")."""

    def __init__(self, group_id: str, now_ms: int = -1) -> None:
        self.group_id = group_id
        # A new group is at epoch 1 with an empty target assignment at epoch 1, as Kafka 4.4's
        # (KAFKA-20268): a first join makes the group epoch 2.
        self.group_epoch = 1
        self.metadata_hash = 0
        self.assignment_epoch = 1
        self.assignment_timestamp_ms = 0  # when the target assignment was last computed (0: never)
        self.members: dict[str, ShareGroupMember] = {}
        self.target_assignment: dict[str, dict[uuid.UUID, frozenset[int]]] = {}
        # Share partitions the share coordinator holds state for, by topic id: (name, partitions).
        self.initializing: dict[uuid.UUID, tuple[str, frozenset[int]]] = {}
        self.initialized: dict[uuid.UUID, tuple[str, frozenset[int]]] = {}
        self.deleting: dict[uuid.UUID, str] = {}
        self.state_timestamp_ms = now_ms
        self.session_deadlines: dict[str, float] = {}
        self.sessions_started = True  # False for a group loaded at start-up, until its timers are set
        self._dead = False
        self._state = ShareGroupState.EMPTY

    def __repr__(self) -> str:
        return f"ShareGroup({self.group_id!r}, {self.state_name}, epoch={self.group_epoch}, members={list(self.members)})"

    # -- the Group interface (groups/api.py) ---------------------------------------------------------

    @property
    def group_type(self) -> str:
        return SHARE

    @property
    def protocol_type(self) -> str:
        return SHARE_PROTOCOL_TYPE

    @property
    def state_name(self) -> str:
        return self._state.value

    def is_dead(self) -> bool:
        return self._dead

    def is_empty(self) -> bool:
        return not self.members

    def validate_offset_commit(self, generation_id: int, member_id: str, instance_id: str | None,
                               api_version: int = 9) -> ErrorCode:
        # A share group has no committed offsets of the classic kind (Kafka: "is not a consumer group").
        return ErrorCode.group_id_not_found

    def validate_offset_fetch(self, member_id: str | None, member_epoch: int) -> ErrorCode:
        return ErrorCode.group_id_not_found

    def validate_offset_delete(self) -> ErrorCode:
        return ErrorCode.group_id_not_found

    def validate_delete_group(self) -> ErrorCode:
        return ErrorCode.none if not self.members else ErrorCode.non_empty_group

    def is_subscribed_to_topic(self, topic: str) -> bool:
        return any(topic in m.subscribed_topic_names for m in self.members.values())

    def offset_expiration_base(self) -> Callable[[OffsetAndMetadata], int] | None:
        return None  # no committed offsets to expire

    def mark_dead(self, now_ms: int) -> None:
        self._dead = True
        self._state = ShareGroupState.DEAD
        self.state_timestamp_ms = now_ms
        self.session_deadlines.clear()

    def overview(self) -> GroupOverview:
        return GroupOverview(self.group_id, SHARE_PROTOCOL_TYPE, self.state_name, SHARE)

    # -- members ----------------------------------------------------------------------------------------

    def update_member(self, member: ShareGroupMember) -> None:
        self.members[member.member_id] = member

    def remove_member(self, member_id: str) -> ShareGroupMember | None:
        self.session_deadlines.pop(member_id, None)
        self.target_assignment.pop(member_id, None)
        return self.members.pop(member_id, None)

    def subscribed_topic_names(self) -> set[str]:
        return {name for m in self.members.values() for name in m.subscribed_topic_names}

    def refresh_state(self, now_ms: int) -> None:
        new = ShareGroupState.STABLE if self.members else ShareGroupState.EMPTY
        if self._dead:
            new = ShareGroupState.DEAD
        if new is not self._state:
            self._state = new
            self.state_timestamp_ms = now_ms

    def initialized_partitions(self) -> dict[uuid.UUID, frozenset[int]]:
        return {t: ps for t, (_, ps) in self.initialized.items()}

    def is_assignable(self, topic_id: uuid.UUID, partition: int) -> bool:
        entry = self.initialized.get(topic_id)
        return entry is not None and partition in entry[1]

    # -- records --------------------------------------------------------------------------------------

    def to_stored(self) -> StoredShareGroup:
        members = self.members.values()
        state_partitions = None
        if self.initializing or self.initialized or self.deleting:
            state_partitions = StoredStatePartitions(
                tuple(TopicPartitionsInfo(t, name, ps) for t, (name, ps) in self.initializing.items()),
                tuple(TopicPartitionsInfo(t, name, ps) for t, (name, ps) in self.initialized.items()),
                tuple(self.deleting.items()))
        if self.group_epoch <= 1 and not self.members and state_partitions is None:
            return StoredShareGroup()  # nothing happened to it yet: no records
        return StoredShareGroup(
            epoch=(self.group_epoch, self.metadata_hash),
            assignment=(self.assignment_epoch, self.assignment_timestamp_ms),
            members={m.member_id: m.stored_metadata() for m in members},
            target_assignments={m: dict(a) for m, a in self.target_assignment.items() if m in self.members},
            current_assignments={m.member_id: m.stored_assignment() for m in members},
            state_partitions=state_partitions,
        )

    @classmethod
    def from_stored(cls, group_id: str, stored: StoredShareGroup, now_ms: int) -> ShareGroup:
        """The group as its records describe it; its members' sessions start when the
        coordinator's timers do (`sessions_started`)."""
        group = cls(group_id, now_ms)
        if stored.epoch is not None:
            group.group_epoch, group.metadata_hash = stored.epoch
        group.assignment_epoch, group.assignment_timestamp_ms = stored.assignment or (0, 0)
        for member_id in sorted(set(stored.members) | set(stored.current_assignments)):
            metadata = stored.members.get(member_id)
            current = stored.current_assignments.get(member_id)
            member = ShareGroupMember(member_id)
            if metadata is not None:
                member = replace(member, rack_id=metadata.rack_id, client_id=metadata.client_id,
                                 client_host=metadata.client_host,
                                 subscribed_topic_names=tuple(metadata.subscribed_topic_names))
            if current is not None:
                member = replace(member, member_epoch=current.member_epoch,
                                 previous_member_epoch=current.previous_member_epoch,
                                 assigned=normalize(current.assigned))
            group.members[member_id] = member
        group.target_assignment = {m: normalize(a) for m, a in stored.target_assignments.items()}
        if stored.state_partitions is not None:
            group.initializing = {t.topic_id: (t.name, t.partitions) for t in stored.state_partitions.initializing}
            group.initialized = {t.topic_id: (t.name, t.partitions) for t in stored.state_partitions.initialized}
            group.deleting = dict(stored.state_partitions.deleting)
        group.sessions_started = not group.members
        group.refresh_state(now_ms)
        return group
