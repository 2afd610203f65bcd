"""confluent-kafka's ShareConsumer (2.16, librdkafka's KIP-932 share consumer, "Preview") against
minibroker's share groups: implicit and explicit acknowledgement, three consumers on one partition
getting every record exactly once between them, a RELEASE delivered to another consumer at delivery
count 2, REJECTed records never delivered again, the delivery-count limit, and
share.auto.offset.reset latest and earliest.

librdkafka's close() sends its final ShareAcknowledge without the records of the last poll in
implicit mode (they are released, as Kafka's broker then releases them), so these consumers call
commit_sync() before close(), as an application that wants its last records accepted must.
"""

from __future__ import annotations

import threading
import time

import pytest
from confluent_kafka import AcknowledgeType, ShareConsumer

from tests.support.share_client import lag, produce, setup, setup_group

pytestmark = pytest.mark.interop



def consumer(bootstrap: str, group: str, mode: str = "implicit", **config: str) -> ShareConsumer:
    return ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, "share.acknowledgement.mode": mode,
                          "log_level": 3, **config})


def consume(c: ShareConsumer, topic: str, count: int, ack=None, timeout: float = 20.0, linger: float = 0.0):
    """Poll until `count` records were received (or `timeout`), then `linger` more; each record's
    (offset, delivery count, value); `ack(message)` gives an explicit acknowledgement type."""
    c.subscribe([topic])
    got = []
    deadline = time.monotonic() + timeout
    linger_until = None
    while time.monotonic() < deadline:
        if len(got) >= count:
            linger_until = linger_until or time.monotonic() + linger
            if time.monotonic() >= linger_until:
                break
        messages = c.poll(0.5)
        for m in messages:
            assert m.error() is None, m.error()
            got.append((m.offset(), m.delivery_count(), m.value().decode()))
            if ack is not None:
                c.acknowledge(m, ack(m))
        if messages and ack is not None:
            c.commit_sync()
    c.commit_sync()
    c.close()
    return got


def test_implicit_and_explicit_acknowledgement(broker, admin, unique):
    topic, implicit, explicit = unique("share"), unique("implicit"), unique("explicit")
    setup(admin, topic, implicit)
    setup_group(admin, explicit)
    produce(broker.bootstrap, topic, 50)
    first = consume(consumer(broker.bootstrap, implicit), topic, 50)
    second = consume(consumer(broker.bootstrap, explicit, "explicit"), topic, 50, ack=lambda m: AcknowledgeType.ACCEPT)
    for got in (first, second):
        assert sorted(offset for offset, _, _ in got) == list(range(50))
        assert {count for _, count, _ in got} == {1}
    assert lag(admin, implicit) == {0: 0} and lag(admin, explicit) == {0: 0}


def test_three_consumers_on_one_partition_get_every_record_exactly_once(broker, admin, unique):
    topic, group = unique("share"), unique("three")
    setup(admin, topic, group)
    produce(broker.bootstrap, topic, 300)
    seen: list[list[tuple]] = [[], [], []]
    total = threading.Event()

    def member(i: int) -> None:
        c = consumer(broker.bootstrap, group, "explicit", **{"max.poll.records": "10"})
        c.subscribe([topic])
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not total.is_set():
            messages = c.poll(0.3)
            for m in messages:
                seen[i].append((m.offset(), m.delivery_count()))
                c.acknowledge(m, AcknowledgeType.ACCEPT)
            if messages:
                c.commit_sync()
                time.sleep(0.05)
            if sum(len(s) for s in seen) >= 300:
                total.set()
        time.sleep(1.0)  # catch a second delivery, if there were one
        for m in c.poll(0.5):
            seen[i].append((m.offset(), m.delivery_count()))
        c.close()

    threads = [threading.Thread(target=member, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    offsets = sorted(offset for s in seen for offset, _ in s)
    assert offsets == list(range(300))
    assert sum(1 for s in seen if s) >= 2
    assert lag(admin, group) == {0: 0}


def test_release_reject_and_the_delivery_count_limit(broker, admin, unique):
    """A RELEASEd record goes to the next consumer at delivery count 2; a REJECTed one never comes
    back; with share.delivery.count.limit 2, a record released twice is archived."""
    topic, group = unique("share"), unique("acks")
    setup(admin, topic, group, **{"share.delivery.count.limit": "2"})
    produce(broker.bootstrap, topic, 10, per_batch=10)
    kinds = {0: AcknowledgeType.RELEASE, 1: AcknowledgeType.REJECT}
    first = consume(consumer(broker.bootstrap, group, "explicit"), topic, 10,
                    ack=lambda m: kinds.get(m.offset() % 2))
    assert sorted(o for o, _, _ in first) == list(range(10))
    second = consume(consumer(broker.bootstrap, group, "explicit"), topic, 5, ack=lambda m: AcknowledgeType.RELEASE,
                     timeout=5.0, linger=0.5)
    assert sorted((o, c) for o, c, _ in second) == [(o, 2) for o in range(0, 10, 2)]  # the released ones only
    third = consume(consumer(broker.bootstrap, group, "explicit"), topic, 1, ack=lambda m: AcknowledgeType.ACCEPT,
                    timeout=2.0)
    assert third == []  # released at the limit: archived
    assert lag(admin, group) == {0: 0}


def test_share_auto_offset_reset_latest_and_earliest(broker, admin, unique):
    topic, latest, earliest = unique("share"), unique("latest"), unique("earliest")
    setup(admin, topic, latest, **{"share.auto.offset.reset": "latest"})
    setup_group(admin, earliest)
    produce(broker.bootstrap, topic, 5)
    c = consumer(broker.bootstrap, latest)
    c.subscribe([topic])
    deadline = time.monotonic() + 20
    while not any(key[0] == latest for key in broker.broker.shares.partitions):
        assert time.monotonic() < deadline, "the share consumer never fetched"
        assert list(c.poll(0.2)) == []
    produce(broker.bootstrap, topic, 5, start=5)
    got = consume(c, topic, 5)
    assert sorted(o for o, _, _ in got) == [5, 6, 7, 8, 9]
    got = consume(consumer(broker.bootstrap, earliest), topic, 10)
    assert sorted(o for o, _, _ in got) == list(range(10))
