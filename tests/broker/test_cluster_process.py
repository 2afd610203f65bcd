"""kill -9 of a whole three-broker process (`minibroker serve --brokers 3`) under three acks=all
producers: started again on the same data, the cluster still has every acknowledged record."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from minibroker.testing import spawn_broker, stop_process

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

pytestmark = pytest.mark.interop

OVERRIDES = {"default_replication_factor": "3", "min_insync_replicas": "2"}


def _produce_until(bootstrap: str, topic: str, tag: int, stop: threading.Event, acked: set[str]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 2,
                         "message.timeout.ms": 3000, "socket.timeout.ms": 1000, "log_level": 0})

    def done(err, msg) -> None:
        if err is None:
            acked.add(msg.value().decode())

    number = 0
    while not stop.is_set():
        try:
            producer.produce(topic, f"{tag}-{number}".encode(), on_delivery=done)
            number += 1
        except BufferError:
            pass
        producer.poll(0.001 if number % 20 else 0.01)
    producer.flush(4)  # what the dead cluster can no longer acknowledge fails: it is not counted


def test_kill_9_of_a_three_broker_process_loses_nothing_acknowledged(tmp_path):
    topic = "survives-kill-9"
    proc, fields = spawn_broker(tmp_path, "--brokers", "3", overrides=OVERRIDES)
    try:
        bootstrap = fields["bootstrap.servers"]
        assert len(bootstrap.split(",")) == 3
        admin = AdminClient({"bootstrap.servers": bootstrap})
        for future in admin.create_topics([NewTopic(topic, 3)]).values():
            future.result(10)
        acked: list[set[str]] = [set(), set(), set()]
        stop = threading.Event()
        threads = [threading.Thread(target=_produce_until, args=(bootstrap, topic, i, stop, acked[i]))
                   for i in range(3)]
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + 10
        while sum(map(len, acked)) < 1500 and time.monotonic() < deadline:
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)  # mid-stream: records in flight are lost, unacknowledged
        proc.wait(10)
        stop.set()
        for thread in threads:
            thread.join(30)
    finally:
        stop_process(proc)
    acknowledged = set().union(*acked)
    assert len(acknowledged) >= 300, "too few records were acknowledged before the kill to prove anything"

    proc, fields = spawn_broker(tmp_path, "--brokers", "3", overrides=OVERRIDES)
    try:
        consumer = Consumer({"bootstrap.servers": fields["bootstrap.servers"], "group.id": "after-kill-9",
                             "auto.offset.reset": "earliest", "enable.auto.commit": False})
        consumer.subscribe([topic])
        seen: list[str] = []
        deadline = time.monotonic() + 30
        while not acknowledged <= set(seen) and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                seen.append(message.value().decode())
        consumer.close()
    finally:
        stop_process(proc)
    assert acknowledged - set(seen) == set()  # nothing acknowledged is missing
    assert len(seen) == len(set(seen))  # and nothing is there twice (idempotent producers)
