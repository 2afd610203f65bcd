"""The real client libraries behind one small interface, so interop tests run the same story
against each: kafka-python, confluent-kafka (librdkafka) and aiokafka."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
import random

Record = tuple[int, int, bytes | None, bytes | None, tuple]  # partition, offset, key, value, headers


@dataclass
class Message:
    partition: int
    key: bytes | None
    value: bytes | None
    headers: tuple


class KafkaPython:
    name = "kafka-python"

    def create_topic(self, bootstrap, topic, partitions, configs=None):
        from kafka.admin import KafkaAdminClient, NewTopic

        admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="mb-test-admin")
        try:
            admin.create_topics([NewTopic(topic, partitions, 1, topic_configs=configs or {})])
        finally:
            admin.close()

    def produce(self, bootstrap, topic, messages: list[Message], **config):
        from kafka import KafkaProducer

        producer = KafkaProducer(bootstrap_servers=bootstrap, **{"acks": "all", "linger_ms": 5, **config})
        try:
            futures = [
                producer.send(topic, key=m.key, value=m.value, partition=m.partition, headers=list(m.headers))
                for m in messages
            ]
            producer.flush(timeout=60)
            return [f.get(timeout=60).offset for f in futures]
        finally:
            producer.close(timeout=10)

    def consume(self, bootstrap, topic, partitions, count, timeout=60, **config) -> list[Record]:
        from kafka import KafkaConsumer, TopicPartition

        consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False, **config,
                                 auto_offset_reset="earliest")
        try:
            consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
            consumer.seek_to_beginning()
            got: list[Record] = []
            deadline = time.monotonic() + timeout
            while len(got) < count and time.monotonic() < deadline:
                for batch in consumer.poll(timeout_ms=500).values():
                    got.extend((r.partition, r.offset, r.key, r.value, tuple(r.headers)) for r in batch)
            return got
        finally:
            consumer.close()


class Confluent:
    name = "confluent-kafka"

    def create_topic(self, bootstrap, topic, partitions, configs=None):
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": bootstrap})
        for future in admin.create_topics([NewTopic(topic, partitions, 1, config=configs or {})]).values():
            future.result(timeout=30)

    def produce(self, bootstrap, topic, messages: list[Message], **config):
        from confluent_kafka import Producer

        offsets: list[int | None] = [None] * len(messages)
        errors = []

        def delivered(index):
            def callback(err, msg):
                if err is not None:
                    errors.append(err)
                else:
                    offsets[index] = msg.offset()
            return callback

        def on_error(err):  # fatal idempotence errors arrive here; transport errors are retried
            if err.fatal():
                errors.append(err)

        producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                             "error_cb": on_error, **config})
        try:
            for i, m in enumerate(messages):
                while True:
                    try:
                        producer.produce(topic, value=m.value, key=m.key, partition=m.partition,
                                         headers=list(m.headers), on_delivery=delivered(i))
                        break
                    except BufferError:
                        producer.poll(0.1)
                producer.poll(0)
            remaining = producer.flush(60)
        except Exception as exc:  # a fatal error surfaces from produce()/poll()
            errors.append(exc)
            remaining = None
        finally:
            # Destroy the handle now (not at some later GC), so it stops reconnecting to a broker that
            # the test is about to stop.
            producer.purge()
            del producer
        if errors:
            raise RuntimeError(f"confluent-kafka produce failed: {errors!r}")
        assert remaining == 0, f"{remaining} message(s) undelivered after 60 s"
        return offsets

    def consume(self, bootstrap, topic, partitions, count, timeout=60, **config) -> list[Record]:
        from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"assign-{topic}",
                             "enable.auto.commit": False, "auto.offset.reset": "earliest", **config})
        try:
            consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
            got: list[Record] = []
            deadline = time.monotonic() + timeout
            while len(got) < count and time.monotonic() < deadline:
                for msg in consumer.consume(num_messages=1000, timeout=0.5):
                    if msg.error():
                        raise RuntimeError(msg.error())
                    got.append((msg.partition(), msg.offset(), msg.key(), msg.value(),
                                tuple(msg.headers() or ())))
            return got
        finally:
            consumer.close()


class AioKafka:
    name = "aiokafka"

    def create_topic(self, bootstrap, topic, partitions, configs=None):
        async def run():
            from aiokafka.admin import AIOKafkaAdminClient, NewTopic

            admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
            await admin.start()
            try:
                await admin.create_topics([NewTopic(topic, partitions, 1, topic_configs=configs or {})])
            finally:
                await admin.close()
        asyncio.run(run())

    def produce(self, bootstrap, topic, messages: list[Message], **config):
        async def run():
            from aiokafka import AIOKafkaProducer

            producer = AIOKafkaProducer(bootstrap_servers=bootstrap, **{"enable_idempotence": True, **config})
            await producer.start()
            try:
                await producer.partitions_for(topic)  # its metadata first: the sends below never wait
                futures = [
                    await producer.send(topic, value=m.value, key=m.key, partition=m.partition,
                                        headers=list(m.headers))
                    for m in messages
                ]
                await producer.flush()  # now, not after linger_ms
                return [(await f).offset for f in futures]
            finally:
                await producer.stop()
        return asyncio.run(run())

    def consume(self, bootstrap, topic, partitions, count, timeout=60, **config) -> list[Record]:
        async def run():
            from aiokafka import AIOKafkaConsumer, TopicPartition

            consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                                        enable_auto_commit=False, auto_offset_reset="earliest", **config)
            await consumer.start()
            try:
                tps = [TopicPartition(topic, p) for p in range(partitions)]
                consumer.assign(tps)
                await consumer.seek_to_beginning(*tps)
                got: list[Record] = []
                deadline = time.monotonic() + timeout
                while len(got) < count and time.monotonic() < deadline:
                    batches = await consumer.getmany(timeout_ms=500)
                    for batch in batches.values():
                        got.extend((r.partition, r.offset, r.key, r.value, tuple(r.headers)) for r in batch)
                return got
            finally:
                await consumer.stop()
        return asyncio.run(run())


ALL = [KafkaPython(), Confluent(), AioKafka()]


def make_messages(seed: int, count: int = 5000, partitions: int = 3) -> list[Message]:
    rng = random.Random(seed)
    return [
        Message(
            partition=i % partitions,
            key=b"key-%d" % i,
            value=rng.randbytes(rng.randint(0, 300)),
            headers=(("trace", b"%d" % i), ("origin", rng.randbytes(4))),
        )
        for i in range(count)
    ]


def expected_records(messages):
    per_partition: dict[int, int] = {}
    expected = []
    for m in messages:
        offset = per_partition.get(m.partition, 0)
        per_partition[m.partition] = offset + 1
        expected.append((m.partition, offset, m.key, m.value, m.headers))
    return sorted(expected, key=lambda r: (r[0], r[1]))


def normalise(records):
    return sorted(
        ((p, o, k, v, tuple((hk, bytes(hv)) for hk, hv in h)) for p, o, k, v, h in records),
        key=lambda r: (r[0], r[1]),
    )
