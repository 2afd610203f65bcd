"""The pure parts of KIP-1071 streams groups: the six record kinds in Kafka 4.4's layouts (written,
replayed, tombstoned), the topology's configuration against the topics (partition counts of
repartition and changelog topics, copartitioning, statuses), the sticky task assignor (stickiness,
balance, standbys never beside their active task), and the reconciliation (revoke before assign,
tasks held by another process stay unassigned until released).
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass

import pytest

from minibroker.groups.streams_assignor import MemberSpec, SubtopologySpec, assign
from minibroker.groups.streams_group import (
    AssignedTasks,
    MemberState,
    StreamsGroup,
    StreamsGroupMember,
    TaskSet,
    reconcile,
)
from minibroker.groups.streams_topics import (
    INCORRECTLY_PARTITIONED_TOPICS,
    MISSING_INTERNAL_TOPICS,
    MISSING_SOURCE_TOPICS,
    InvalidTopology,
    configure_topics,
)
from minibroker.storage.streams_group_records import (
    CopartitionGroup,
    StoredStreamsAssignment,
    StoredStreamsGroup,
    StoredStreamsGroupMetadata,
    StoredStreamsMember,
    StoredTasks,
    StoredTopology,
    StreamsGroupRecords,
    Subtopology,
    TopicInfo,
    metadata_value,
    parse_current_value,
    current_value,
)


@dataclass(frozen=True)
class Topic:
    name: str
    topic_id: uuid.UUID
    num_partitions: int


class Topics:
    def __init__(self, **counts: int) -> None:
        self.by_name = {name.replace("_", "-"): Topic(name.replace("_", "-"), uuid.uuid4(), n) for name, n in counts.items()}

    def topic(self, name):
        return self.by_name.get(name)

    def topic_by_id(self, topic_id):
        return next((t for t in self.by_name.values() if t.topic_id == topic_id), None)

    def topics(self):
        return list(self.by_name.values())


WORD_COUNT = StoredTopology(3, (
    Subtopology("0", source_topics=("in",), repartition_sink_topics=("app-rep",)),
    Subtopology("1", state_changelog_topics=(TopicInfo("app-changelog", 0, 0, (("cleanup.policy", "compact"),)),),
                repartition_source_topics=(TopicInfo("app-rep"),)),
))


def test_records_round_trip_and_tombstone():
    stored = StoredStreamsGroup(
        metadata=StoredStreamsGroupMetadata(7, -12345, 3, (("num.standby.replicas", "0"),)),
        topology=WORD_COUNT,
        assignment_epoch=(7, 1_700_000_000_000),
        members={"m": StoredStreamsMember("i", None, "client", "/127.0.0.1", 30000, 3, "proc", ("h", 8080),
                                          (("zone", "a"),))},
        target_assignments={"m": StoredTasks({"0": frozenset({0, 1})}, {"1": frozenset({2})}, {})},
        current_assignments={"m": StoredStreamsAssignment(7, 6, 2, {"0": {0: 5, 1: 7}}, {}, {}, {"1": {3: 2}},
                                                          {"0": frozenset({4})}, {})},
    )
    written = StreamsGroupRecords()
    records = written.changes("g", stored)
    # Kafka's record key types, in its heartbeat's order.
    assert [struct.unpack(">h", key[:2])[0] for key, _ in records] == [23, 19, 17, 21, 20, 22]
    replayed = StreamsGroupRecords()
    for key, value in records:
        replayed.replay(struct.unpack(">h", key[:2])[0], key, value)
    assert replayed.groups["g"] == stored
    replayed.apply("g", stored)
    tombstones = replayed.changes("g", None)
    assert all(value is None for _, value in tombstones)
    assert [struct.unpack(">h", key[:2])[0] for key, _ in tombstones] == [22, 21, 20, 19, 17, 23]
    for key, value in tombstones:
        replayed.replay(struct.unpack(">h", key[:2])[0], key, value)
    assert replayed.groups == {}


def test_record_values_are_kafkas_layouts():
    # StreamsGroupMetadataValue v0: epoch, metadata hash, and tagged fields only when not default.
    assert metadata_value(StoredStreamsGroupMetadata(1, 2)) == b"\x00\x00" + struct.pack(">iq", 1, 2) + b"\x00"
    assert metadata_value(StoredStreamsGroupMetadata(1, 2, validated_topology_epoch=0)) == (
        b"\x00\x00" + struct.pack(">iq", 1, 2) + b"\x01\x00\x04" + struct.pack(">i", 0))
    # Active tasks carry their assignment epochs in tag 0 of each TaskIds.
    value = current_value(StoredStreamsAssignment(3, 2, 1, {"s": {1: 3}}, {}, {}, {}, {}, {}))
    assert value == (b"\x00\x00" + struct.pack(">iib", 3, 2, 1) + b"\x02" + b"\x02s" + b"\x02" + struct.pack(">i", 1)
                     + b"\x01\x00\x05\x02" + struct.pack(">i", 3) + b"\x01\x01" + b"\x01\x01\x01" + b"\x00")
    assert parse_current_value(value).active == {"s": {1: 3}}
    with pytest.raises(ValueError):
        parse_current_value(value[:-3])


def test_the_topology_is_configured_against_the_topics():
    configured = configure_topics(WORD_COUNT, Topics(**{"in": 4}), 1)
    assert configured.error is not None and configured.error.status == MISSING_INTERNAL_TOPICS
    # Named in the order of Kafka's HashMap of them (the conformance corpus checks it against Kafka).
    assert str(configured.error) == "Internal topics are missing: app-rep, app-changelog"
    assert {t.name: (t.partitions, t.configs) for t in configured.to_create.values()} == {
        "app-rep": (4, ()), "app-changelog": (4, (("cleanup.policy", "compact"),))}
    assert {s: (c.number_of_tasks, c.stateful) for s, c in configured.subtopologies.items()} == {
        "0": (4, False), "1": (4, True)}
    ready = configure_topics(WORD_COUNT, Topics(**{"in": 4, "app_rep": 4, "app_changelog": 4}), 1)
    assert ready.ready and not ready.to_create
    wrong = configure_topics(WORD_COUNT, Topics(**{"in": 4, "app_rep": 2}), 1)
    assert wrong.error.status == INCORRECTLY_PARTITIONED_TOPICS
    assert str(wrong.error) == "Existing topic app-rep has different number of partitions: expected 4, found 2"
    missing = configure_topics(WORD_COUNT, Topics(), 1)
    assert (missing.error.status, str(missing.error)) == (MISSING_SOURCE_TOPICS, "Source topics in are missing.")
    # A join of two topics that are not copartitioned.
    join = StoredTopology(1, (Subtopology("0", source_topics=("l", "r"),
                                          copartition_groups=(CopartitionGroup(source_topics=(0, 1)),)),))
    uneven = configure_topics(join, Topics(l=2, r=3), 1)
    assert (uneven.error.status, str(uneven.error)) == (
        INCORRECTLY_PARTITIONED_TOPICS, "Following topics do not have the same number of partitions: [{l=2, r=3}]")
    # A repartition topic nobody writes.
    orphan = StoredTopology(1, (Subtopology("0", repartition_source_topics=(TopicInfo("x"),)),))
    with pytest.raises(InvalidTopology):
        configure_topics(orphan, Topics(), 1)


def test_the_sticky_assignor_balances_keeps_tasks_and_places_standbys_apart():
    subs = {"0": SubtopologySpec(4, False), "1": SubtopologySpec(4, True)}
    first = assign({"a": MemberSpec("p1", {}, {})}, subs, 0)
    assert first["a"] == ({"0": frozenset(range(4)), "1": frozenset(range(4))}, {})
    # A second process joins: half of the tasks move, the rest stay where they were.
    second = assign({"a": MemberSpec("p1", first["a"][0], {}), "b": MemberSpec("p2", {}, {})}, subs, 0)
    a_tasks = {(s, p) for s, ps in second["a"][0].items() for p in ps}
    b_tasks = {(s, p) for s, ps in second["b"][0].items() for p in ps}
    assert len(a_tasks) == len(b_tasks) == 4 and not a_tasks & b_tasks
    again = assign({"a": MemberSpec("p1", second["a"][0], {}), "b": MemberSpec("p2", second["b"][0], {})}, subs, 0)
    assert again == second  # sticky: nothing moves when nothing changed
    # One standby of each stateful task, never on the process running it.
    with_standby = assign({"a": MemberSpec("p1", second["a"][0], {}), "b": MemberSpec("p2", second["b"][0], {})},
                          subs, 1)
    for member, other in (("a", "b"), ("b", "a")):
        standby = {(s, p) for s, ps in with_standby[member][1].items() for p in ps}
        active_elsewhere = {(s, p) for s, ps in with_standby[other][0].items() for p in ps if s == "1"}
        assert standby == active_elsewhere
    # Two members of one process share its load.
    shared = assign({"a": MemberSpec("p1", {}, {}), "c": MemberSpec("p1", {}, {})}, subs, 1)
    assert sum(len(ps) for ps in shared["a"][0].values()) == sum(len(ps) for ps in shared["c"][0].values()) == 4
    assert shared["a"][1] == shared["c"][1] == {}  # no other process for the standbys


def _holders(group: StreamsGroup, excluding=None):
    return group.holders(excluding)


def test_reconciliation_revokes_before_it_assigns():
    group = StreamsGroup("g")
    a = StreamsGroupMember("a", member_epoch=1, process_id="p1",
                           assigned=AssignedTasks({"0": {0: 1, 1: 1}}))
    b = StreamsGroupMember("b", member_epoch=0, process_id="p2")
    group.update_member(a)
    group.update_member(b)
    target_a, target_b = TaskSet({"0": frozenset({0})}), TaskSet({"0": frozenset({1})})
    # B cannot get task 1 while A holds it.
    b2 = reconcile(b, 2, target_b, group.holders(), TaskSet())
    assert (b2.member_epoch, b2.state, b2.assigned.active) == (2, MemberState.UNRELEASED_TASKS, {})
    group.update_member(b2)
    # A must revoke task 1 first: it stays at epoch 1.
    a2 = reconcile(a, 2, target_a, group.holders(), TaskSet({"0": frozenset({0, 1})}))
    assert (a2.member_epoch, a2.state) == (1, MemberState.UNREVOKED_TASKS)
    assert (a2.assigned.active, a2.pending_revocation.active) == ({"0": {0: 1}}, {"0": {1: 1}})
    group.update_member(a2)
    # Still owned: nothing changes.
    assert reconcile(a2, 2, target_a, group.holders(), TaskSet({"0": frozenset({0, 1})})) == a2
    # Released: A reaches epoch 2, keeping task 0 at the epoch it got it.
    a3 = reconcile(a2, 2, target_a, group.holders(), TaskSet({"0": frozenset({0})}))
    assert (a3.member_epoch, a3.state, a3.assigned.active) == (2, MemberState.STABLE, {"0": {0: 1}})
    group.update_member(a3)
    # Now B gets task 1, assigned at epoch 2.
    b3 = reconcile(b2, 2, target_b, group.holders(), TaskSet())
    assert (b3.member_epoch, b3.state, b3.assigned.active) == (2, MemberState.STABLE, {"0": {1: 2}})
    # An active task that becomes a standby of the same member changes at once.
    demoted = reconcile(a3, 3, TaskSet({}, {"0": frozenset({0})}), group.holders(), TaskSet({"0": frozenset({0})}))
    assert demoted.assigned.standby == {"0": frozenset({0})} and demoted.state is MemberState.UNREVOKED_TASKS
