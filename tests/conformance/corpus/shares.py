"""Share groups (KIP-932): ShareGroupHeartbeat, ShareGroupDescribe, ShareFetch, ShareAcknowledge,
DescribeShareGroupOffsets, AlterShareGroupOffsets, DeleteShareGroupOffsets, with the share.* group
configs, ListGroups' share type and DeleteGroups of a share group. Versions are the Java client's
(kafka-clients 4.4): ShareGroupHeartbeat v1, ShareFetch and ShareAcknowledge v2."""

from __future__ import annotations

from typing import Any

from tests.conformance.corpus import TS, create_topic, find_coordinator, produce
from tests.conformance.corpus.admin import DELETE, GROUP, SET, describe_configs, incremental
from tests.support.batches import make_batch
from tests.support.conformance import Run, scenario

MEMBER_A = "conformance-member-aaaaaaaaaaaaa"  # share members name themselves (at most 36 characters)
MEMBER_B = "conformance-member-bbbbbbbbbbbbb"
MEMBER_C = "conformance-member-ccccccccccccc"
ACCEPT, RELEASE, REJECT, GAP = 1, 2, 3, 0


def records(values: list[str]) -> bytes:
    # (the corpus's `records` is shadowed by its records module once that is imported)
    return make_batch([(None, v.encode()) for v in values], timestamp_ms=TS)


def heartbeat(run: Run, group: str, member: str, epoch: int, topics: list[str] | None, *, conn: str = "main",
              label: str | None = None, record: bool = True) -> Any:
    return run.call(76, 1, {"group_id": group, "member_id": member, "member_epoch": epoch, "rack_id": None,
                            "subscribed_topic_names": topics}, conn=conn, label=label, record=record)


def join(run: Run, group: str, member: str, topic: str, *, conn: str = "main") -> int:
    """A member joins (recorded), then heartbeats until it has share partitions (Kafka initializes
    a new topic's after the join's answer, and assigns them at a later heartbeat); then a full
    heartbeat is recorded. Its epoch."""
    joined = heartbeat(run, group, member, 0, [topic], conn=conn, label=f"{member[-1]} joins")
    epoch = joined.member_epoch
    has = bool(joined.assignment and joined.assignment.topic_partitions)

    def assigned():
        nonlocal epoch
        answer = heartbeat(run, group, member, epoch, None, conn=conn, record=False)
        epoch = answer.member_epoch
        return answer.assignment is not None and answer.assignment.topic_partitions
    if not has:
        run.wait_until(assigned, timeout=30, interval=0.2)
    heartbeat(run, group, member, epoch, [topic], conn=conn, label=f"{member[-1]} assigned")
    return epoch


def no_assignment_interval(run: Run, group: str) -> None:
    """share.assignment.interval.ms=0 on the group: each heartbeat that needs a new target
    assignment computes it (Kafka's default of 1000 would make what a member gets depend on the
    scenario's timing)."""
    incremental(run, GROUP, group, [("share.assignment.interval.ms", SET, "0")], label="assignment interval 0")


def share_fetch(run: Run, group: str, member: str, epoch: int, topic_id: Any, *, acks=(), fetch=True,
                conn: str = "main", label: str | None = None, max_wait: int = 5000) -> Any:
    partitions = [{"partition_index": 0, "acknowledgement_batches": [
        {"first_offset": f, "last_offset": last, "acknowledge_types": list(types)} for f, last, types in acks]}]
    return run.call(78, 2, {
        "group_id": group, "member_id": member, "share_session_epoch": epoch, "max_wait": max_wait if fetch else 0,
        "min_bytes": 1, "max_bytes": 1 << 20, "max_records": 500, "batch_size": 500, "share_acquire_mode": 0,
        "is_renew_ack": False, "topics": [{"topic_id": topic_id, "partitions": partitions}] if fetch or acks else [],
        "forgotten_topics_data": []}, conn=conn, label=label)


def share_ack(run: Run, group: str, member: str, epoch: int, topic_id: Any, acks, *, conn: str = "main",
              label: str | None = None) -> Any:
    return run.call(79, 2, {"group_id": group, "member_id": member, "share_session_epoch": epoch,
                            "is_renew_ack": False, "topics": [{"topic_id": topic_id, "partitions": [
                                {"partition_index": 0, "acknowledgement_batches": [
                                    {"first_offset": f, "last_offset": last, "acknowledge_types": list(types)}
                                    for f, last, types in acks]}]}]}, conn=conn, label=label)


def topic_id_of(run: Run, topic: str) -> Any:
    response = run.call(3, 12, {"topics": [{"name": topic, "topic_id": 0}], "allow_auto_topic_creation": False},
                        record=False)
    return response.topics[0].topic_id


@scenario("shares/heartbeat-and-describe", apis=(76, 77, 16))
def _(run: Run) -> None:
    """A share group's members: the join (no partitions until they are initialized), the assigned
    heartbeat, a second member sharing the one partition, a third joining within
    share.assignment.interval.ms (nothing for it yet), ShareGroupDescribe, ListGroups with the
    share type, leaving; and ShareGroupHeartbeat's refusals (an empty or too long member id, no
    topics at the join, an unknown member, an epoch ahead, a group of another type)."""
    topic, group = run.name("t"), run.name("g")
    create_topic(run, topic, 1)
    find_coordinator(run, group)
    no_assignment_interval(run, group)
    epoch_a = join(run, group, MEMBER_A, topic, conn="a")
    epoch_b = join(run, group, MEMBER_B, topic, conn="b")
    heartbeat(run, group, MEMBER_A, epoch_a, None, conn="a", label="a heartbeats after b joined")
    # With an assignment interval (KIP-1263) a new member waits at the last assignment's epoch.
    incremental(run, GROUP, group, [("share.assignment.interval.ms", SET, "15000")], label="assignment interval 15 s")
    heartbeat(run, group, MEMBER_C, 0, [topic], conn="c", label="c joins within the interval")
    heartbeat(run, group, MEMBER_B, epoch_b, None, conn="b", label="b heartbeats within the interval")
    heartbeat(run, group, MEMBER_C, -1, None, conn="c", label="c leaves")
    run.call(77, 1, {"group_ids": [group, run.name("absent")], "include_authorized_operations": True},
             label="describe")
    listed = run.call(16, 5, {"states_filter": [], "types_filter": ["share"]}, record=False)
    run.note("listed", [(g.group_id, g.protocol_type, g.group_state, g.group_type) for g in listed.groups
                        if g.group_id == group])
    heartbeat(run, group, MEMBER_B, -1, None, conn="b", label="b leaves")
    heartbeat(run, group, "", 0, [topic], label="empty member id")
    heartbeat(run, group, "x" * 37, 0, [topic], label="member id too long")
    heartbeat(run, group, MEMBER_B, 0, [], label="no topics at the join")
    heartbeat(run, group, MEMBER_B, 3, None, label="unknown member")
    heartbeat(run, group, MEMBER_A, 99, None, conn="a", label="epoch ahead")
    classic = run.name("classic")
    run.call(8, 9, {"group_id": classic, "generation_id_or_member_epoch": -1, "member_id": "",
                    "topics": [{"name": topic, "partitions": [{"partition_index": 0, "committed_offset": 1,
                                                               "committed_metadata": ""}]}]}, record=False)
    heartbeat(run, classic, MEMBER_A, 0, [topic], label="a classic group's id")


@scenario("shares/fetch-and-acknowledge", apis=(78, 79, 44, 32))
def _(run: Run) -> None:
    """A share consumer's records: share.auto.offset.reset=earliest set on the group and described,
    a ShareFetch that opens the session and acquires three batches, acknowledgements (ACCEPT,
    RELEASE, REJECT) by ShareAcknowledge, the released records acquired by another member at
    delivery count 2 and acknowledged in its next ShareFetch, the final ShareFetch closing a
    session; the session errors (not found, a wrong epoch, acknowledgements in the opening fetch,
    ShareAcknowledge at epoch 0) and a bad share group config."""
    topic, group = run.name("t"), run.name("g")
    create_topic(run, topic, 1)
    find_coordinator(run, group)
    no_assignment_interval(run, group)
    incremental(run, GROUP, group, [("share.auto.offset.reset", SET, "earliest")], label="earliest")
    incremental(run, GROUP, group, [("share.isolation.level", SET, "sometimes")], label="a bad isolation level")
    describe_configs(run, GROUP, group, ["share.auto.offset.reset", "share.isolation.level",
                                         "share.renew.acknowledge.enable"], label="share configs")
    for i in range(3):
        produce(run, topic, records([f"r{i}-a", f"r{i}-b"]), record=False)
    tid = topic_id_of(run, topic)
    join(run, group, MEMBER_A, topic, conn="a")
    share_fetch(run, group, MEMBER_A, 1, tid, conn="a", label="a: session not found")
    share_fetch(run, group, MEMBER_A, 0, tid, conn="a", acks=[(0, 0, [ACCEPT])], label="a: acks in the opening fetch")
    share_fetch(run, group, MEMBER_A, 0, tid, conn="a", label="a opens its session")
    share_fetch(run, group, MEMBER_A, 5, tid, conn="a", label="a: wrong epoch")
    share_ack(run, group, MEMBER_A, 0, tid, [(0, 0, [ACCEPT])], conn="a", label="a: acknowledge at epoch 0")
    share_ack(run, group, MEMBER_A, 1, tid, [(0, 5, [ACCEPT, ACCEPT, RELEASE, RELEASE, REJECT, REJECT])],
              conn="a", label="a acknowledges")
    join(run, group, MEMBER_B, topic, conn="b")
    share_fetch(run, group, MEMBER_B, 0, tid, conn="b", label="b gets the released records")
    share_fetch(run, group, MEMBER_B, 1, tid, conn="b", acks=[(2, 3, [ACCEPT])], max_wait=0,
                label="b accepts them in its next fetch")
    share_fetch(run, group, MEMBER_A, -1, tid, conn="a", fetch=False, label="a's final fetch")
    share_fetch(run, group, MEMBER_A, 3, tid, conn="a", label="a's session is gone")
    incremental(run, GROUP, group, [("share.auto.offset.reset", DELETE, None)], label="reset removed")


@scenario("shares/offsets", apis=(90, 91, 92, 42))
def _(run: Run) -> None:
    """A share group's offsets: described (all topics, and named ones with an unknown topic), altered
    while the group has a member (NON_EMPTY_GROUP) and once it is empty, deleted for a topic (and
    for one it has none of), the group deleted, and the admin APIs on a group that is not there."""
    topic, group = run.name("t"), run.name("g")
    create_topic(run, topic, 1)
    find_coordinator(run, group)
    incremental(run, GROUP, group, [("share.auto.offset.reset", SET, "earliest")], label="earliest")
    for i in range(2):
        produce(run, topic, records([f"o{i}-a", f"o{i}-b", f"o{i}-c"]), record=False)
    tid = topic_id_of(run, topic)
    join(run, group, MEMBER_A, topic)
    share_fetch(run, group, MEMBER_A, 0, tid, label="acquire")
    share_ack(run, group, MEMBER_A, 1, tid, [(0, 2, [ACCEPT])], label="accept the first batch")
    run.call(90, 1, {"groups": [{"group_id": group, "topics": None}]}, label="describe all")
    run.call(90, 1, {"groups": [{"group_id": group, "topics": [{"topic_name": topic, "partitions": [0]},
                                                               {"topic_name": run.name("absent"), "partitions": [0]}]}]},
             label="describe named")
    alter = {"group_id": group, "topics": [{"topic_name": topic, "partitions": [{"partition_index": 0, "start_offset": 4}]}]}
    run.call(91, 0, alter, label="alter with a member")
    heartbeat(run, group, MEMBER_A, -1, None, label="leave")
    run.call(91, 0, {"group_id": group, "topics": [
        {"topic_name": topic, "partitions": [{"partition_index": 0, "start_offset": 4}, {"partition_index": 5, "start_offset": 0}]}]},
        label="alter")
    run.call(90, 0, {"groups": [{"group_id": group, "topics": [{"topic_name": topic, "partitions": [0]}]}]},
             label="describe after alter (v0)")
    run.call(92, 0, {"group_id": group, "topics": [{"topic_name": topic}, {"topic_name": run.name("absent")}]},
             label="delete offsets")
    run.call(90, 1, {"groups": [{"group_id": group, "topics": None}]}, label="describe after delete")
    run.call(42, 2, {"groups_names": [group]}, label="delete the group")
    run.call(92, 0, {"group_id": group, "topics": [{"topic_name": topic}]}, label="delete offsets of no group")
    run.call(91, 0, {"group_id": run.name("new"), "topics": []}, label="alter a new group")
