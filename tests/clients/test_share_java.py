"""Java's KafkaShareConsumer (kafka-clients 4.4, tests/java/ShareClient.java) against minibroker's
share groups (KIP-932), as an application's integration tests would use them: implicit and explicit
acknowledgement; three share consumers on one partition receiving every record exactly once between
them; a RELEASE re-delivered to another member at delivery count 2; REJECTed records never delivered
again; a consumer that stalls holding records (its records come back once their acquisition lock
expires) and one killed (its connection gone, its records come back at once); the delivery-count
limit archiving a record; share.auto.offset.reset latest and earliest; and the group as
Admin-level requests see it afterwards (DescribeShareGroupOffsets' lag).
"""

from __future__ import annotations

import time

import pytest
from tests.support.share_client import lag, produce, records, setup, setup_group, split_commands

pytestmark = pytest.mark.interop


def test_implicit_and_explicit_acknowledgement(broker, admin, share_java, unique):
    """Every record once; afterwards no lag: the implicit acknowledgements (at the next poll and on
    close) and the explicit ACCEPTs (commitSync) all reached the share partition."""
    topic, implicit, explicit = unique("share"), unique("implicit"), unique("explicit")
    setup(admin, topic, implicit)
    setup_group(admin, explicit)
    produce(broker.bootstrap, topic, 50)
    lines = share_java.run(["consume", broker.bootstrap, topic, implicit, 1, 50, "mode=implicit", "linger.ms=500"],
                           ["consume", broker.bootstrap, topic, explicit, 1, 50, "mode=explicit", "ack=accept",
                            "linger.ms=500"])
    first, second = split_commands(lines)
    for got in (first, second):
        assert sorted(r["offset"] for r in records(got)) == list(range(50))
        assert {r["delivery_count"] for r in records(got)} == {1}
        assert [r["value"] for r in sorted(records(got), key=lambda r: r["offset"])] == [f"v{i}" for i in range(50)]
    assert all(c["errors"] == {f"{topic}-0": None} for c in second if c["type"] == "commit")
    assert lag(admin, implicit) == {0: 0} and lag(admin, explicit) == {0: 0}


def test_three_consumers_on_one_partition_get_every_record_exactly_once(broker, admin, share_java, unique):
    topic, group = unique("share"), unique("three")
    setup(admin, topic, group)
    produce(broker.bootstrap, topic, 300)
    lines = share_java.run(["consume", broker.bootstrap, topic, group, 3, 300, "mode=explicit", "ack=accept",
                            "max.records=10", "process.ms=60", "linger.ms=1000"])
    got = records(lines)
    assert sorted(r["offset"] for r in got) == list(range(300))  # once each, between the three
    assert len({r["member"] for r in got}) >= 2  # they shared the partition
    assert lag(admin, group) == {0: 0}
    described = admin.call(77, {"group_ids": [group], "include_authorized_operations": False})
    assert described.groups[0].group_state == "Empty" and described.groups[0].members == ()


def test_a_release_is_delivered_to_another_member_with_delivery_count_2(broker, admin, share_java, unique):
    topic, group = unique("share"), unique("release")
    setup(admin, topic, group)
    produce(broker.bootstrap, topic, 10, per_batch=10)
    lines = share_java.run(["consume", broker.bootstrap, topic, group, 1, 10, "mode=explicit", "ack=release", "polls=1"],
                           ["consume", broker.bootstrap, topic, group, 1, 10, "mode=explicit", "ack=accept"])
    released, accepted = split_commands(lines)
    assert [(r["offset"], r["delivery_count"], r["ack"]) for r in records(released)] == [
        (i, 1, "RELEASE") for i in range(10)]
    assert [(r["offset"], r["delivery_count"]) for r in records(accepted)] == [(i, 2) for i in range(10)]
    assert lag(admin, group) == {0: 0}


def test_rejected_records_are_never_delivered_again(broker, admin, share_java, unique):
    topic, group = unique("share"), unique("reject")
    setup(admin, topic, group)
    produce(broker.bootstrap, topic, 20)
    lines = share_java.run(["consume", broker.bootstrap, topic, group, 1, 20, "mode=explicit", "ack=reject-odd"],
                           ["consume", broker.bootstrap, topic, group, 1, 1, "mode=explicit", "ack=accept",
                            "timeout.ms=2000"])
    first, second = split_commands(lines)
    assert {r["offset"]: r["ack"] for r in records(first)} == {
        i: "REJECT" if i % 2 else "ACCEPT" for i in range(20)}
    assert records(second) == []  # nothing comes back: rejected records are archived
    assert lag(admin, group) == {0: 0}


def test_a_stalled_or_killed_consumers_records_are_delivered_again(broker, admin, share_java, unique):
    """A consumer that stops polling keeps its records until their acquisition lock expires
    (share.record.lock.duration.ms: 2 seconds here); one killed loses its connection and its share
    session with it, so its records are released at once (Kafka's connection-close listener)."""
    topic, group = unique("share"), unique("stall")
    setup(admin, topic, group, **{"share.record.lock.duration.ms": "2000"})
    produce(broker.bootstrap, topic, 10)
    stalled = share_java.start(["consume", broker.bootstrap, topic, group, 1, 10, "mode=explicit", "ack=none",
                                "stall=true"])
    try:
        stalled.wait_for(lambda lines: any(line["type"] == "stalled" for line in lines))
        held = [r["offset"] for r in records(stalled.lines)]
        start = time.monotonic()
        lines = share_java.run(["consume", broker.bootstrap, topic, group, 1, len(held), "mode=explicit",
                                "ack=accept", "timeout.ms=20000"])
        again = records(lines)
        assert sorted(r["offset"] for r in again) == held and {r["delivery_count"] for r in again} == {2}
        assert time.monotonic() - start >= 1.0  # not before the lock could have expired (2 s from acquisition)
    finally:
        stalled.kill()
    produce(broker.bootstrap, topic, 10, start=10)
    killed = share_java.start(["consume", broker.bootstrap, topic, group, 1, 10, "mode=explicit", "ack=none",
                               "stall=true"])
    killed.wait_for(lambda lines: any(line["type"] == "stalled" for line in lines))
    held = [r["offset"] for r in records(killed.lines)]
    killed.kill()
    lines = share_java.run(["consume", broker.bootstrap, topic, group, 1, len(held), "mode=explicit", "ack=accept"])
    assert sorted(r["offset"] for r in records(lines)) == held
    assert {r["delivery_count"] for r in records(lines)} == {2}


def test_the_delivery_count_limit_archives_a_record(broker, admin, share_java, unique):
    topic, group = unique("share"), unique("limit")
    setup(admin, topic, group, **{"share.delivery.count.limit": "3"})
    produce(broker.bootstrap, topic, 4, per_batch=4)
    lines = share_java.run(["consume", broker.bootstrap, topic, group, 1, 4, "mode=explicit", "ack=release",
                            "timeout.ms=3000"])
    deliveries: dict[int, list[int]] = {}
    for r in records(lines):
        deliveries.setdefault(r["offset"], []).append(r["delivery_count"])
    assert deliveries == {i: [1, 2, 3] for i in range(4)}  # the third release archives them
    assert lag(admin, group) == {0: 0}


def test_share_auto_offset_reset_latest_and_earliest(broker, admin, share_java, unique):
    topic, latest, earliest = unique("share"), unique("latest"), unique("earliest")
    setup(admin, topic, latest, **{"share.auto.offset.reset": "latest"})
    setup_group(admin, earliest)
    produce(broker.bootstrap, topic, 5)
    run = share_java.start(["consume", broker.bootstrap, topic, latest, 1, 5, "mode=implicit", "linger.ms=500"])
    # Once the share partition is loaded (its start offset is the log end then), produce five more.
    deadline = time.monotonic() + 30
    while not any(key[0] == latest for key in broker.broker.shares.partitions):
        assert time.monotonic() < deadline, "the share consumer never fetched"
        time.sleep(0.05)
    produce(broker.bootstrap, topic, 5, start=5)
    got = records(run.finish())
    assert sorted(r["offset"] for r in got) == [5, 6, 7, 8, 9]
    lines = share_java.run(["consume", broker.bootstrap, topic, earliest, 1, 10, "mode=implicit", "linger.ms=500"])
    assert sorted(r["offset"] for r in records(lines)) == list(range(10))
