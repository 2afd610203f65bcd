"""KIP-932 share groups driven by plain calls on the pure coordinator shard, against Kafka 4.4's
GroupMetadataManager (share part) and SimpleAssignor: joining initializes the share partitions of the
subscribed topics with the share coordinator before they are assigned; several members share a
partition; epochs and the errors and messages Kafka answers; leaving and session expiry; one group id
one type; the admin side (alter and delete offsets, which need an empty group); a restart from the
records; and the simple assignor's properties under random groups.

Time is a number passed in; wall-clock milliseconds follow it.
"""

from __future__ import annotations

import uuid

from hypothesis import given, settings
from hypothesis import strategies as st

from minibroker.groups.api import GroupConfig
from minibroker.groups.share_assignor import simple_assign
from minibroker.groups.share_group import ShareGroup
from minibroker.groups.share_manager import Refused, ShareGroupHeartbeatRequest, ShareGroupManager, ShareGroupSettings
from minibroker.groups.shard import GroupCoordinatorShard
from minibroker.protocol.errors import ErrorCode
from minibroker.storage.config import LogConfig
from minibroker.storage.manager import LogManager
from minibroker.storage.offsets_store import OffsetsStore
from minibroker.storage.share_state import ShareStateKey
from tests.support.consumer_group_sim import FakeTopics

GROUP = "sg"
A, B, C = "member-aaaa", "member-bbbb", "member-cccc"


class FakeShareState:
    """The share coordinator's initialize/delete, recorded."""

    def __init__(self) -> None:
        self.initialized: dict[ShareStateKey, tuple[int, int]] = {}
        self.deleted: list[ShareStateKey] = []

    def initialize_state(self, key, state_epoch, start_offset):
        self.initialized[key] = (state_epoch, start_offset)

    def delete_state(self, key):
        self.deleted.append(key)
        self.initialized.pop(key, None)


class Harness:
    def __init__(self, topics: FakeTopics | None = None, store: OffsetsStore | None = None, **settings) -> None:
        self.topics = topics or FakeTopics(t=2, u=3)
        self.now = 100.0
        self.store = store if store is not None else OffsetsStore()
        self.shard = GroupCoordinatorShard(GroupConfig(), self.store, self.now_ms, self.topics)
        self.state = FakeShareState()
        self.known: dict[str, dict[str, tuple[int, ...]]] = {}
        settings = {"session_timeout_ms": 10_000, "heartbeat_interval_ms": 1000, "assignment_interval_ms": 0,
                    **settings}
        self.manager.configure(ShareGroupSettings(**settings), self.state)

    @property
    def manager(self) -> ShareGroupManager:
        manager = self.shard.manager("share")
        assert isinstance(manager, ShareGroupManager)
        return manager

    @property
    def now_ms(self) -> int:
        return int(self.now * 1000)

    def heartbeat(self, member: str, epoch: int, topics: tuple[str, ...] | None = ("t",), group: str = GROUP):
        result = self.manager.heartbeat(self.now, self.now_ms, ShareGroupHeartbeatRequest(
            group, member, epoch, client_id="c", client_host="/127.0.0.1", subscribed_topic_names=topics))
        if result.assignment is not None:
            self.known[member] = self.assignment(result)  # what a client keeps until told otherwise
        return result

    def advance(self, seconds: float) -> None:
        self.now += seconds
        self.shard.tick(self.now, self.now_ms)

    @property
    def group(self) -> ShareGroup:
        group = self.shard.groups[GROUP]
        assert isinstance(group, ShareGroup)
        return group

    def assignment(self, result) -> dict[str, tuple[int, ...]]:
        names = {t.topic_id: t.name for t in self.topics.topics()}
        return {names[t]: ps for t, ps in (result.assignment or {}).items()}


def test_joining_initializes_the_share_partitions_and_assigns_them_at_the_next_heartbeat():
    h = Harness()
    joined = h.heartbeat(A, 0)
    # A new group is at epoch 1 (Kafka 4.4's KAFKA-20268): the first join makes it 2.
    assert (joined.error, joined.member_epoch, joined.heartbeat_interval_ms) == (ErrorCode.none, 2, 1000)
    assert h.assignment(joined) == {}  # nothing is initialized yet when the target is computed
    tid = h.topics.id("t")
    # A new topic's share partitions start at -1: share.auto.offset.reset decides at the first fetch.
    assert h.state.initialized == {ShareStateKey(GROUP, tid, 0): (2, -1), ShareStateKey(GROUP, tid, 1): (2, -1)}
    assert h.group.state_name == "Stable" and h.group.initialized == {tid: ("t", frozenset({0, 1}))}
    # The next heartbeat finds initialized partitions nobody has: a new group epoch assigns them.
    again = h.heartbeat(A, 2, None)
    assert (again.member_epoch, h.assignment(again)) == (3, {"t": (0, 1)})
    # A heartbeat with nothing new sends no assignment; a full one (topics named) does.
    assert h.heartbeat(A, 3, None).assignment is None
    assert h.assignment(h.heartbeat(A, 3)) == {"t": (0, 1)}
    # Partitions added to the topic start at 0 (the group already reads it).
    h.topics.by_name["t"].num_partitions = 3
    h.heartbeat(A, 3, None)
    assert h.state.initialized[ShareStateKey(GROUP, tid, 2)] == (4, 0)
    assert h.known[A] == {"t": (0, 1)} and h.assignment(h.heartbeat(A, 4, None)) == {"t": (0, 1, 2)}


def test_the_assignment_interval_keeps_members_on_the_last_target_assignment():
    h = Harness(FakeTopics(t=1), assignment_interval_ms=1000)
    h.heartbeat(A, 0)  # epoch 2, computed at once (the group's first)
    h.advance(1.0)
    assert h.assignment(h.heartbeat(A, 2, None)) == {"t": (0,)}  # epoch 3: the initialized partition
    # B joins 0.5 s after the last computation: the group epoch moves, the target does not; B waits
    # at the assignment epoch with nothing, as Kafka answers (KIP-1263).
    h.advance(0.5)
    joined = h.heartbeat(B, 0)
    assert (joined.member_epoch, h.assignment(joined), h.group.group_epoch, h.group.assignment_epoch) == (3, {}, 4, 3)
    assert h.heartbeat(A, 3, None).assignment is None
    h.advance(0.5)  # the interval has passed: the next heartbeat computes epoch 4's target
    again = h.heartbeat(B, 3, None)
    assert (again.member_epoch, h.assignment(again)) == (4, {"t": (0,)})
    # The group's share.assignment.interval.ms overrides the broker's.
    assert h.manager.assignment_interval_ms(GROUP) == 1000


def test_members_share_partitions_one_partition_among_three():
    h = Harness(FakeTopics(t=1))
    for member in (A, B, C):
        h.heartbeat(member, 0)
    epochs = {m: h.heartbeat(m, h.group.members[m].member_epoch, None) for m in (A, B, C)}
    assert h.known == {A: {"t": (0,)}, B: {"t": (0,)}, C: {"t": (0,)}}
    assert all(r.member_epoch == h.group.group_epoch for r in epochs.values())


def test_partitions_are_split_when_there_are_more_than_members():
    h = Harness(FakeTopics(t=4))
    h.heartbeat(A, 0)
    h.heartbeat(B, 0)
    h.heartbeat(A, 2, None)
    a, b = h.known[A], h.known[B]
    assert sorted(a["t"] + b["t"]) == [0, 1, 2, 3] and len(a["t"]) == len(b["t"]) == 2


def test_kafkas_errors_and_messages():
    h = Harness()
    first = h.heartbeat(A, 0, ())
    assert (first.error, first.message) == (ErrorCode.invalid_request, "SubscribedTopicNames must be set in first request.")
    assert h.heartbeat("", 0).message == "Invalid member id in the request."
    assert h.heartbeat(A, -2).message == "MemberEpoch is invalid."
    unknown = h.heartbeat(A, 2)
    assert (unknown.error, unknown.message) == (ErrorCode.group_id_not_found, f"Share group {GROUP} not found.")
    h.heartbeat(A, 0)
    ahead = h.heartbeat(A, 5)
    assert ahead.error == ErrorCode.fenced_member_epoch and "greater member epoch (5)" in ahead.message
    stranger = h.heartbeat(B, 1)
    assert (stranger.error, stranger.message) == (ErrorCode.unknown_member_id,
                                                   f"Member {B} is not a member of group {GROUP}.")
    small = Harness(max_size=1)
    small.heartbeat(A, 0)
    full = small.heartbeat(B, 0)
    assert (full.error, full.message) == (ErrorCode.group_max_size_reached,
                                          "The share group has reached its maximum capacity of 1 members.")


def test_one_group_id_is_one_type():
    h = Harness()
    h.shard.create_simple_group("classic-one", h.now_ms)
    other = h.heartbeat(A, 0, group="classic-one")
    assert (other.error, other.message) == (ErrorCode.group_id_not_found, "Group classic-one is not a share group.")


def test_leaving_and_session_expiry_fence_members_and_bump_the_epoch():
    h = Harness()
    h.heartbeat(A, 0)
    h.heartbeat(B, 0)
    left = h.heartbeat(B, -1, None)
    assert (left.error, left.member_epoch) == (ErrorCode.none, -1)
    assert list(h.group.members) == [A] and h.group.group_epoch == 4
    h.advance(9.0)
    h.heartbeat(A, h.group.members[A].member_epoch, None)
    h.advance(9.0)
    assert A in h.group.members  # its heartbeat kept it
    h.advance(2.0)
    assert h.group.members == {} and h.group.state_name == "Empty"


def test_alter_and_delete_offsets_need_an_empty_group():
    h = Harness()
    h.heartbeat(A, 0)
    try:
        h.manager.alter_offsets(h.now_ms, GROUP, {"t": {0: 5}})
        raise AssertionError("altered a group with members")
    except Refused as refused:
        assert (refused.error, refused.message) == (ErrorCode.non_empty_group, "The group is not empty.")
    h.heartbeat(A, -1, None)
    results = h.manager.alter_offsets(h.now_ms, GROUP, {"t": {0: 5, 7: 1}, "nope": {0: 1}})
    assert results["t"][0] == (ErrorCode.none, None)
    assert results["t"][7][0] == ErrorCode.unknown_topic_or_partition and results["nope"][0][0] == ErrorCode.unknown_topic_or_partition
    tid = h.topics.id("t")
    assert h.state.initialized[ShareStateKey(GROUP, tid, 0)] == (h.group.group_epoch, 5)
    deleted = h.manager.delete_offsets(h.now_ms, GROUP, ["t", "u"])
    assert deleted["t"] == (tid, ErrorCode.none, None)
    assert deleted["u"] == (None, ErrorCode.unknown_topic_or_partition, "There is no offset information to delete.")
    assert h.state.deleted == [ShareStateKey(GROUP, tid, 0), ShareStateKey(GROUP, tid, 1)] and not h.group.initialized


def test_a_restart_replays_the_group_from_its_records(tmp_path):
    logs = LogManager.open(tmp_path / "data", LogConfig.from_broker({}), 0)
    h = Harness(store=OffsetsStore.open(logs, 0))
    h.heartbeat(A, 0, ("t", "u"))
    h.heartbeat(B, 0, ("t",))
    before = h.group
    logs.close(clean=False)
    logs = LogManager.open(tmp_path / "data", LogConfig.from_broker({}), 0)
    again = Harness(h.topics, OffsetsStore.open(logs, 0))
    after = again.group
    assert (after.group_epoch, after.assignment_epoch, after.assignment_timestamp_ms, after.initialized) == (
        before.group_epoch, before.assignment_epoch, before.assignment_timestamp_ms, before.initialized)
    assert after.assignment_timestamp_ms == h.now_ms
    assert after.members == before.members and after.target_assignment == before.target_assignment
    # Loaded members' sessions start with the timers: one that does not come back is fenced.
    again.shard.start_timers(again.now)
    again.advance(11.0)
    assert again.group.members == {}
    logs.close()


@settings(max_examples=200)
@given(st.integers(1, 6), st.integers(1, 8), st.integers(0, 3))
def test_the_simple_assignor_shares_each_partition_evenly(members, partitions, seed):
    topic = uuid.UUID(int=1)
    ids = [f"m{i}" for i in range(members)]
    first = simple_assign({m: frozenset({topic}) for m in ids}, {}, {topic: partitions}, lambda t, p: True)
    # Every partition has a member, none more than ceil(members / partitions), members within one of each other.
    sharing = -(-members // partitions)
    holders = {p: [m for m in ids if p in first[m].get(topic, ())] for p in range(partitions)}
    assert all(1 <= len(h) <= sharing for h in holders.values())
    counts = [len(first[m].get(topic, ())) for m in ids]
    assert max(counts) - min(counts) <= 1 and min(counts) >= 1
    # Sticky: the same group computes the same assignment again.
    again = simple_assign({m: frozenset({topic}) for m in ids}, first, {topic: partitions}, lambda t, p: True)
    assert again == first
