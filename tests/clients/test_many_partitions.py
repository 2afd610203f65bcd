"""Many partitions under a small descriptor limit, with a real client (docs/storage.md).

The broker runs in a child process whose RLIMIT_NOFILE is set with setrlimit (the limit a macOS
shell gives by default, 256), so the kernel's limit is real. Before the descriptor budget every partition held
three files open from its creation on, and a broker under `ulimit -n 1024` failed near 330
partitions. Here confluent-kafka (librdkafka) creates 2,000 partitions under 256 descriptors,
produces a record to each and reads each back; and a broker killed with SIGKILL while it holds its
files open (the open-file cache full, every partition changed) loses no acknowledged record."""

from __future__ import annotations

import re
import time

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.broker_process import BrokerProcess

EMFILE = re.compile(r"Too many open files|EMFILE|out of file descriptors")


def segment_files_open(broker: BrokerProcess, data) -> list[str]:
    return [path for path in broker.open_files_under(data) if path.endswith(".log")]


def create_topics(bootstrap: str, topics: list[str], partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for i in range(0, len(topics), 50):
        futures = admin.create_topics([NewTopic(t, partitions, 1) for t in topics[i : i + 50]],
                                      operation_timeout=60, request_timeout=120)
        for future in futures.values():
            future.result(timeout=120)


def produce_round_robin(bootstrap: str, partitions: list[tuple[str, int]], rounds: int
                        ) -> dict[tuple[str, int], list[tuple[int, bytes]]]:
    """Send `rounds` records to every partition in turn (acks=all); what was acknowledged, by
    partition: (offset, value)."""
    acknowledged: dict[tuple[str, int], list[tuple[int, bytes]]] = {tp: [] for tp in partitions}
    errors = []

    def delivered(err, msg) -> None:
        if err is not None:
            errors.append(err)
        else:
            acknowledged[(msg.topic(), msg.partition())].append((msg.offset(), msg.value()))

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    for r in range(rounds):
        for topic, partition in partitions:
            producer.produce(topic, b"%s/%d/%d" % (topic.encode(), partition, r), partition=partition,
                             on_delivery=delivered)
            producer.poll(0)
    assert producer.flush(120) == 0
    assert errors == []
    return acknowledged


def consume_all(bootstrap: str, partitions: list[tuple[str, int]], count: int
                ) -> dict[tuple[str, int], list[tuple[int, bytes]]]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "many-partitions",
                         "enable.auto.commit": False})
    got: dict[tuple[str, int], list[tuple[int, bytes]]] = {tp: [] for tp in partitions}
    try:
        consumer.assign([TopicPartition(t, p, OFFSET_BEGINNING) for t, p in partitions])
        received, deadline = 0, time.monotonic() + 120
        while received < count and time.monotonic() < deadline:
            for message in consumer.consume(5000, 0.5):
                assert message.error() is None, message.error()
                got[(message.topic(), message.partition())].append((message.offset(), message.value()))
                received += 1
    finally:
        consumer.close()
    return got


def test_2000_partitions_under_a_256_descriptor_limit(tmp_path, unique):
    prefix = unique("many")
    topics = [f"{prefix}-{i}" for i in range(200)]
    partitions = [(t, p) for t in topics for p in range(10)]
    data = tmp_path / "data"
    with BrokerProcess(data, nofile=256) as broker:
        assert re.search(r"at most 96 segment files open at once", broker.log())
        create_topics(broker.bootstrap, topics, 10)
        acknowledged = produce_round_robin(broker.bootstrap, partitions, 1)
        assert all(len(records) == 1 for records in acknowledged.values())
        assert consume_all(broker.bootstrap, partitions, len(partitions)) == acknowledged
        assert len(segment_files_open(broker, data)) <= 96
        assert broker.alive()
    assert not EMFILE.search(broker.log()), broker.log()[-3000:]


def test_kill_9_with_many_partitions_open_loses_nothing_acknowledged(tmp_path, unique):
    prefix = unique("kill")
    topics = [f"{prefix}-{i}" for i in range(40)]
    partitions = [(t, p) for t in topics for p in range(10)]
    data = tmp_path / "data"
    broker = BrokerProcess(data, nofile=256)
    try:
        broker.start()
        create_topics(broker.bootstrap, topics, 10)
        acknowledged = produce_round_robin(broker.bootstrap, partitions, 3)
        assert len(segment_files_open(broker, data)) == 96  # the cache is full of open segments
        broker.kill()  # at once, every record above acknowledged
        broker.start()
        assert re.search(r"registered 401 partition\(s\) in \d+ ms; 400 not closed cleanly were recovered",
                         broker.log())
        assert consume_all(broker.bootstrap, partitions, 3 * len(partitions)) == acknowledged
    finally:
        broker.stop()
