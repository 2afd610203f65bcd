"""Classic groups (FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit,
OffsetFetch, DescribeGroups, ListGroups, DeleteGroups, OffsetDelete) and KIP-848 consumer groups
(ConsumerGroupHeartbeat, ConsumerGroupDescribe)."""

from __future__ import annotations

import struct
from typing import Any

from tests.conformance.corpus import create_topic, find_coordinator
from tests.support.conformance import Run, scenario

SESSION_MS = 10000  # within both brokers' group.min/max.session.timeout.ms


def _string(s: str) -> bytes:
    return struct.pack(">h", len(s)) + s.encode()


def subscription(*topics: str) -> bytes:
    """ConsumerProtocolSubscription v0: the topics, no user data."""
    return struct.pack(">hi", 0, len(topics)) + b"".join(_string(t) for t in topics) + struct.pack(">i", -1)


def assignment(topic: str, partitions: list[int]) -> bytes:
    """ConsumerProtocolAssignment v0: one topic's partitions, no user data."""
    return (struct.pack(">hi", 0, 1) + _string(topic) + struct.pack(">i", len(partitions))
            + b"".join(struct.pack(">i", p) for p in partitions) + struct.pack(">i", -1))


def join_body(group: str, member_id: str, topic: str, instance: str | None = None) -> dict[str, Any]:
    return {"group_id": group, "session_timeout": SESSION_MS, "rebalance_timeout": SESSION_MS,
            "member_id": member_id, "group_instance_id": instance, "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": subscription(topic)}], "reason": None}


def join(run: Run, group: str, topic: str, *, conn: str = "main", version: int = 5, member_id: str = "",
         instance: str | None = None, label: str | None = None) -> Any:
    """JoinGroup as a new member (v4+: MEMBER_ID_REQUIRED first, recorded, then again with the id)."""
    response = run.call(11, version, join_body(group, member_id, topic, instance), conn=conn,
                        label=f"{label or 'join'} (first)" if version >= 4 and not member_id and instance is None else label)
    if response.error_code == 79:  # MEMBER_ID_REQUIRED
        response = run.call(11, version, join_body(group, response.member_id, topic, instance), conn=conn,
                            label=label)
    return response


def sync(run: Run, group: str, joined: Any, topic: str, *, conn: str = "main", version: int = 3,
         partitions: dict[str, list[int]] | None = None, instance: str | None = None, label: str | None = None) -> Any:
    assignments = []
    if joined.leader == joined.member_id:
        members = [m.member_id for m in joined.members]
        partitions = partitions or {m: [0] if i == 0 else [] for i, m in enumerate(members)}
        assignments = [{"member_id": m, "assignment": assignment(topic, partitions.get(m, []))} for m in members]
    return run.call(14, version, {"group_id": group, "generation_id": joined.generation_id,
                                  "member_id": joined.member_id, "group_instance_id": instance,
                                  "protocol_type": "consumer", "protocol_name": "range",
                                  "assignments": assignments}, conn=conn, label=label)


def heartbeat(run: Run, group: str, generation: int, member_id: str, *, conn: str = "main", version: int = 3,
              label: str | None = None, record: bool = True) -> Any:
    return run.call(12, version, {"group_id": group, "generation_id": generation, "member_id": member_id},
                    conn=conn, label=label, record=record)


def describe(run: Run, *groups: str, version: int = 5, label: str | None = None) -> Any:
    return run.call(15, version, {"groups": list(groups), "include_authorized_operations": True}, label=label)


@scenario("groups/find-coordinator", apis=(10,))
def _(run: Run) -> None:
    """FindCoordinator for a group at v0-v3 (one key; aiokafka v1, librdkafka v2) and v4-v6 (batched;
    kafka-python, Java), for a transactional id, and with an invalid key type."""
    group = run.name("g")
    find_coordinator(run, group)
    for version in (0, 1, 2, 3):
        run.call(10, version, {"key": group, "key_type": 0})
    for version in (4, 6):
        run.call(10, version, {"key_type": 0, "coordinator_keys": [group, run.name("other")]})
    find_coordinator(run, run.name("txn"), 1)
    run.call(10, 4, {"key_type": 1, "coordinator_keys": [run.name("txn")]}, label="transaction coordinator")
    run.call(10, 4, {"key_type": 7, "coordinator_keys": [group]}, label="unknown key type")
    run.call(10, 3, {"key": "", "key_type": 0}, label="empty group id")


@scenario("groups/classic-lifecycle", apis=(11, 14, 12, 13, 8, 9, 15, 16))
def _(run: Run) -> None:
    """A classic group's life at librdkafka's versions: MEMBER_ID_REQUIRED, join, sync, heartbeat,
    commit and fetch offsets, describe (Stable), list, a second member joins (REBALANCE_IN_PROGRESS
    for the first, both rejoin, generation 2), leave, describe (Empty)."""
    topic, group = run.name("t"), run.name("g")
    create_topic(run, topic, 2)
    find_coordinator(run, group)
    a = join(run, group, topic, conn="a", label="a joins")
    sync(run, group, a, topic, conn="a", partitions={a.member_id: [0, 1]}, label="a syncs")
    heartbeat(run, group, a.generation_id, a.member_id, conn="a", label="a heartbeats")
    run.call(8, 9, {"group_id": group, "generation_id_or_member_epoch": a.generation_id, "member_id": a.member_id,
                    "topics": [{"name": topic, "partitions": [{"partition_index": 0, "committed_offset": 5,
                                                               "committed_metadata": "meta"}]}]}, conn="a")
    run.call(9, 8, {"groups": [{"group_id": group, "topics": [{"name": topic, "partition_indexes": [0, 1]}]}],
                    "require_stable": True}, conn="a")
    describe(run, group, label="describe stable")
    run.call(16, 4, {"states_filter": ["Stable"]}, label="list stable", drop=("groups",))
    listed = run.call(16, 5, {"states_filter": [], "types_filter": []}, record=False)
    run.note("listed", [(g.group_id, g.protocol_type, g.group_state, g.group_type) for g in listed.groups
                        if g.group_id == group])
    # b joins: its JoinGroup waits for a to rejoin
    first = run.call(11, 5, join_body(group, "", topic), conn="b", label="b joins (first)")
    run.send(11, 5, join_body(group, first.member_id, topic), conn="b")
    run.wait_until(lambda: heartbeat(run, group, a.generation_id, a.member_id, conn="a", record=False).error_code == 27)
    heartbeat(run, group, a.generation_id, a.member_id, conn="a", label="a heartbeats during rebalance")
    a2 = run.call(11, 5, join_body(group, a.member_id, topic), conn="a", label="a rejoins")
    b = run.recv(conn="b", label="b joined")
    leader, follower = (a2, "a"), (b, "b")
    if b.member_id == b.leader:
        leader, follower = (b, "b"), (a2, "a")
    run.send(14, 3, {"group_id": group, "generation_id": follower[0].generation_id, "member_id": follower[0].member_id,
                     "assignments": []}, conn=follower[1])
    sync(run, group, leader[0], topic, conn=leader[1],
         partitions={a2.member_id: [0], b.member_id: [1]}, label="leader syncs")
    run.recv(conn=follower[1], label="follower synced")
    heartbeat(run, group, a.generation_id, a.member_id, conn="a", label="a heartbeats at an old generation")
    run.call(13, 3, {"group_id": group, "members": [{"member_id": a.member_id, "group_instance_id": None},
                                                    {"member_id": "unknown-member", "group_instance_id": None}]},
             label="a leaves, and an unknown member")
    run.call(13, 1, {"group_id": group, "member_id": b.member_id}, label="b leaves (v1)")
    describe(run, group, label="describe empty")


@scenario("groups/classic-errors", apis=(11, 14, 12, 13, 8))
def _(run: Run) -> None:
    """Classic group errors: unknown member on every API, illegal generation, an invalid session
    timeout, an empty group id, an inconsistent protocol type, a group of another type."""
    topic, group = run.name("t"), run.name("g")
    create_topic(run, topic)
    find_coordinator(run, group)
    a = join(run, group, topic)
    sync(run, group, a, topic)
    heartbeat(run, group, a.generation_id, "nobody", label="heartbeat unknown member")
    heartbeat(run, group, a.generation_id + 5, a.member_id, label="heartbeat illegal generation")
    run.call(14, 3, {"group_id": group, "generation_id": a.generation_id, "member_id": "nobody", "assignments": []},
             label="sync unknown member")
    run.call(14, 3, {"group_id": group, "generation_id": a.generation_id + 5, "member_id": a.member_id,
                     "assignments": []}, label="sync illegal generation")
    run.call(11, 5, join_body(group, "nobody", topic), label="join unknown member")
    run.call(11, 5, {**join_body(group, "", topic), "session_timeout": 10}, label="session timeout 10 ms")
    run.call(11, 5, {**join_body(group, "", topic), "session_timeout": 3_600_000}, label="session timeout 1 h")
    run.call(11, 5, {**join_body(group, a.member_id, topic), "protocol_type": "other"}, label="other protocol type")
    run.call(11, 5, join_body("", "", topic), label="empty group id")
    run.call(8, 8, {"group_id": group, "generation_id_or_member_epoch": a.generation_id + 5, "member_id": a.member_id,
                    "topics": [{"name": topic, "partitions": [{"partition_index": 0, "committed_offset": 1}]}]},
             label="commit illegal generation")
    run.call(8, 8, {"group_id": group, "generation_id_or_member_epoch": a.generation_id, "member_id": "nobody",
                    "topics": [{"name": topic, "partitions": [{"partition_index": 0, "committed_offset": 1}]}]},
             label="commit unknown member")
    run.call(8, 8, {"group_id": group, "generation_id_or_member_epoch": a.generation_id, "member_id": a.member_id,
                    "topics": [{"name": run.name("absent"), "partitions": [{"partition_index": 0, "committed_offset": 1}]},
                               {"name": topic, "partitions": [{"partition_index": 9, "committed_offset": 1}]}]},
             label="commit unknown topic and partition")
    run.call(13, 0, {"group_id": group, "member_id": "nobody"}, label="leave unknown member v0")


@scenario("groups/static-members", apis=(11, 14, 12, 13))
def _(run: Run) -> None:
    """Static membership (KIP-345): a static member rejoins with a new member id and the old one is
    fenced (FENCED_INSTANCE_ID); leave by instance id."""
    topic, group = run.name("t"), run.name("g")
    create_topic(run, topic)
    find_coordinator(run, group)
    a = join(run, group, topic, version=7, instance="instance-1", label="static join")
    sync(run, group, a, topic, version=5, instance="instance-1")
    again = run.call(11, 7, join_body(group, "", topic, instance="instance-1"), label="same instance, new member id")
    run.call(12, 4, {"group_id": group, "generation_id": a.generation_id, "member_id": a.member_id,
                     "group_instance_id": "instance-1"}, label="old member id heartbeats")
    run.call(12, 4, {"group_id": group, "generation_id": again.generation_id, "member_id": again.member_id,
                     "group_instance_id": "instance-1"}, label="new member id heartbeats")
    run.call(13, 4, {"group_id": group, "members": [{"member_id": "", "group_instance_id": "instance-1"},
                                                    {"member_id": "", "group_instance_id": "instance-9"}]},
             label="leave by instance id")


@scenario("groups/offsets", apis=(8, 9, 47, 42, 16, 15))
def _(run: Run) -> None:
    """Offsets of a simple group (no members, generation -1): commit at v2 (kafka-python, aiokafka)
    and v8, fetch at v1, v5, v7 and v8 (batched), unknown partitions and groups; OffsetDelete;
    DeleteGroups of an empty, an unknown and a non-empty group."""
    topic, group = run.name("t"), run.name("g")
    create_topic(run, topic, 2)
    find_coordinator(run, group)
    run.call(8, 2, {"group_id": group, "generation_id_or_member_epoch": -1, "member_id": "", "retention_time": -1,
                    "topics": [{"name": topic, "partitions": [{"partition_index": 0, "committed_offset": 3,
                                                               "committed_metadata": None}]}]})
    run.call(8, 8, {"group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
                    "topics": [{"name": topic, "partitions": [{"partition_index": 1, "committed_offset": 7,
                                                               "committed_leader_epoch": 0, "committed_metadata": "m"}]}]})
    for version in (1, 5, 7):
        run.call(9, version, {"group_id": group, "topics": [{"name": topic, "partition_indexes": [0, 1, 5]}],
                              "require_stable": False})
    run.call(9, 7, {"group_id": group, "topics": None, "require_stable": False}, label="all offsets v7")
    run.call(9, 8, {"groups": [{"group_id": group, "topics": None}, {"group_id": run.name("none"), "topics": None}],
                    "require_stable": False}, label="batched v8")
    run.call(47, 0, {"group_id": group, "topics": [{"name": topic, "partitions": [{"partition_index": 0}]}]})
    run.call(47, 0, {"group_id": run.name("none"), "topics": [{"name": topic, "partitions": [{"partition_index": 0}]}]},
             label="OffsetDelete unknown group")
    run.call(9, 8, {"groups": [{"group_id": group, "topics": None}], "require_stable": False}, label="after delete")
    busy = run.name("busy")
    find_coordinator(run, busy)
    joined = join(run, busy, topic)
    sync(run, busy, joined, topic)
    run.call(47, 0, {"group_id": busy, "topics": [{"name": topic, "partitions": [{"partition_index": 0}]}]},
             label="OffsetDelete of a subscribed topic")
    run.call(42, 2, {"groups_names": [group, run.name("none"), busy]})
    run.call(15, 5, {"groups": [group], "include_authorized_operations": False}, label="deleted group described")


@scenario("groups/consumer-protocol", apis=(68, 69))
def _(run: Run) -> None:
    """A KIP-848 consumer group: join (epoch 0) with a server-side assignor, the assignment, a
    heartbeat, a stale epoch (FENCED_MEMBER_EPOCH), an unknown member (UNKNOWN_MEMBER_ID), an
    invalid assignor, describe, leave (epoch -1)."""
    topic, group = run.name("t"), run.name("g")
    create_topic(run, topic, 3)
    find_coordinator(run, group)
    base = {"group_id": group, "instance_id": None, "rack_id": None, "rebalance_timeout": 10000,
            "subscribed_topic_names": [topic], "subscribed_topic_regex": None, "server_assignor": "uniform",
            "topic_partitions": []}
    joined = run.call(68, 1, {**base, "member_id": "conformance-member-1", "member_epoch": 0}, record=False)
    # Kafka 4.4 computes target assignments asynchronously: when the joining heartbeat carries the
    # assignment and which epochs it passes through depend on timing, so the recording holds the
    # join's answer without them, and the assignment the member ends up with.
    run.record("join", joined, drop=("member_epoch", "assignment"))
    run.note("join epoch positive", joined.member_epoch > 0)
    state = {"epoch": joined.member_epoch, "assignment": joined.assignment}

    def assigned():
        if state["assignment"] is not None and state["assignment"].topic_partitions:
            return state["assignment"]
        response = run.call(68, 1, {"group_id": group, "member_id": joined.member_id, "member_epoch": state["epoch"],
                                    "rebalance_timeout": -1, "subscribed_topic_names": None, "server_assignor": None,
                                    "topic_partitions": None}, record=False)
        state["epoch"], state["assignment"] = response.member_epoch, response.assignment
        return None

    run.record("assignment", run.wait_until(assigned))
    run.call(68, 1, {**base, "member_id": joined.member_id, "member_epoch": state["epoch"] + 10}, label="stale epoch")
    run.call(68, 1, {**base, "member_id": "nobody-member", "member_epoch": 3}, label="unknown member")
    run.call(68, 1, {**base, "member_id": "conformance-member-2", "member_epoch": 0, "server_assignor": "nope"},
             label="unknown assignor")
    run.call(69, 1, {"group_ids": [group, run.name("none")], "include_authorized_operations": True},
             drop=("group_epoch", "assignment_epoch", "member_epoch"))
    run.call(68, 1, {"group_id": group, "member_id": joined.member_id, "member_epoch": -1, "rebalance_timeout": -1,
                     "subscribed_topic_names": None, "server_assignor": None, "topic_partitions": None},
             label="leave")
