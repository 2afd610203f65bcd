"""Real consumers over incremental fetch sessions (KIP-227, minibroker.fetch_sessions) while a partition
is added (CreatePartitions): kafka-python 3 opens a session and goes on incrementally, adding the new
partition to it; librdkafka 2.16 (confluent-kafka) and aiokafka 0.14 never ask for a session
(session epoch -1: sessionless full fetches), which the broker serves as before. Each consumer
subscribes in a group, reads what is there, sees the topic grow from 2 to 3 partitions (metadata
refresh, rebalance) and reads the records produced to the new partition.

A leader change inside a session (the other case KIP-227's clients handle: the partition's
FENCED_LEADER_EPOCH / NOT_LEADER errors end the session's use of it) needs a second broker; the
cluster's tests will add it through `consume_across_a_partition_added`'s `between` hook."""

from __future__ import annotations

import time

import pytest

from minibroker.admin_client import AdminClient
from tests.support.clients import Confluent, Message
from tests.support.txn_wire import create


def add_partition(c, topic, count):
    r = c.call(37, {"topics": [{"name": topic, "count": count, "assignments": None}], "timeout": 5000,
                    "validate_only": False})
    assert int(r.results[0].error_code) == 0


def kafka_python_group(bootstrap, topic, group, want, deadline_s):
    from kafka import KafkaConsumer

    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                             enable_auto_commit=False, metadata_max_age_ms=500, session_timeout_ms=6000,
                             heartbeat_interval_ms=500, fetch_max_wait_ms=100)
    return consumer, lambda: [(r.partition, r.key) for batch in consumer.poll(200).values() for r in batch]


def confluent_group(bootstrap, topic, group, want, deadline_s):
    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False, "topic.metadata.refresh.interval.ms": 500,
                         "session.timeout.ms": 6000, "heartbeat.interval.ms": 500, "fetch.wait.max.ms": 100})
    consumer.subscribe([topic])

    def poll():
        message = consumer.poll(0.2)
        return [] if message is None or message.error() else [(message.partition(), message.key())]
    return consumer, poll


def aiokafka_group(bootstrap, topic, group, want, deadline_s):
    import asyncio

    from aiokafka import AIOKafkaConsumer

    loop = asyncio.new_event_loop()

    async def start():
        started = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                                   enable_auto_commit=False, metadata_max_age_ms=500, session_timeout_ms=6000,
                                   heartbeat_interval_ms=500, fetch_max_wait_ms=100)
        await started.start()
        return started
    consumer = loop.run_until_complete(start())

    class Closing:
        def close(self):
            loop.run_until_complete(consumer.stop())
            loop.close()

    def poll():
        batches = loop.run_until_complete(consumer.getmany(timeout_ms=200))
        return [(r.partition, r.key) for records in batches.values() for r in records]
    return Closing(), poll


CONSUMERS = {"kafka-python": kafka_python_group, "confluent-kafka": confluent_group, "aiokafka": aiokafka_group}


@pytest.mark.parametrize("client", sorted(CONSUMERS))
def test_consume_across_a_partition_added(broker, unique, client):
    topic, group = unique("fsa"), unique("fsg")
    sessions = broker.broker.fetch_sessions
    with AdminClient(broker.bootstrap) as c:
        create(c, topic, 2)
        Confluent().produce(broker.bootstrap, topic, [Message(i % 2, b"old-%d" % i, b"v", ()) for i in range(6)])
        created, incremental = sessions.cache.created, sessions.incremental_fetches
        consumer, poll = CONSUMERS[client](broker.bootstrap, topic, group, 6, 30)
        # Nothing is committed: a rebalance may read a partition again from the start, so records
        # are counted once each.
        try:
            seen: set = set()
            deadline = time.monotonic() + 30
            while len(seen) < 6 and time.monotonic() < deadline:
                seen.update(poll())
            assert sorted(k for _, k in seen) == sorted(b"old-%d" % i for i in range(6))
            add_partition(c, topic, 3)
            Confluent().produce(broker.bootstrap, topic, [Message(2, b"new-%d" % i, b"v", ()) for i in range(3)])
            deadline = time.monotonic() + 30
            while len(seen) < 9 and time.monotonic() < deadline:
                seen.update(poll())
        finally:
            consumer.close()
    assert sorted(k for p, k in seen if p == 2) == [b"new-0", b"new-1", b"new-2"]
    assert len(seen) == 9
    if client == "kafka-python":
        # It fetched over a session: one opened, incremental fetches answered, none refused.
        assert sessions.cache.created > created and sessions.incremental_fetches > incremental
    else:
        assert sessions.incremental_fetches == incremental  # sessionless full fetches throughout
