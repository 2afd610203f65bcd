"""Group consumers of three clients polled by hand (kafka-python, confluent-kafka, aiokafka), and the
flow of a consumer reading across a change of its topic (a partition added here; a leader change in
the cluster's tests): for the fetch-session tests (KIP-227)."""

from __future__ import annotations

import time
from typing import Callable

from minibroker.admin_client import AdminClient
from tests.support.clients import Confluent, Message


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


def consume_across_a_change(bootstrap: str, topic: str, group: str, client: str,
                            change: Callable[[AdminClient], None], new_partition: int, timeout: float = 30) -> set:
    """A group consumer of `client` reads the 6 records of partitions 0-1, then `change(admin)`
    happens (a partition added, a leader moved), 3 records go to `new_partition`, and it reads them:
    the (partition, key) pairs it saw (each once: with nothing committed a rebalance may read a
    partition again)."""
    with AdminClient(bootstrap.split(",")[0]) as c:  # (a cluster's bootstrap lists every broker)
        Confluent().produce(bootstrap, topic, [Message(i % 2, b"old-%d" % i, b"v", ()) for i in range(6)])
        consumer, poll = CONSUMERS[client](bootstrap, topic, group, 6, timeout)
        seen: set = set()
        try:
            deadline = time.monotonic() + timeout
            while len(seen) < 6 and time.monotonic() < deadline:
                seen.update(poll())
            change(c)
            Confluent().produce(bootstrap, topic, [Message(new_partition, b"new-%d" % i, b"v", ()) for i in range(3)])
            deadline = time.monotonic() + timeout
            while len(seen) < 9 and time.monotonic() < deadline:
                seen.update(poll())
        finally:
            consumer.close()
    return seen
