"""The brokers' clock moved by a test (`advance`, minibroker.clock.BrokerClock), seen by a real
client (confluent-kafka) and by admin requests: after a day, an idle producer id has expired and
the producer's next send still lands; a segment past its topic's retention is deleted (rolled by
segment.ms at the next append, then removed by the retention check); an open transaction past its
timeout is aborted and its producer fenced. A day of the broker's time in a second of the test's."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import KafkaException, Producer

from minibroker.admin_client import AdminClient
from tests.support.wire import create_topics

pytestmark = pytest.mark.interop


def wait_for(condition, what, timeout=10.0):
    """Poll until `condition()` is true: the broker's background task runs once the clock moved."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{what} did not happen"
        time.sleep(0.05)


def active_producers(bootstrap, topic):
    # A new connection each time: an advanced clock closes idle ones (connections.max.idle.ms).
    with AdminClient(bootstrap) as admin:
        response = admin.call(61, {"topics": [{"name": topic, "partition_indexes": [0]}]}, version=0)
    return [(p.producer_id, p.last_sequence) for p in response.topics[0].partitions[0].active_producers]


def test_a_day_expires_the_idle_producer_id_and_the_retained_segment(broker, unique):
    topic, retained = unique("pid"), unique("retained")
    create_topics(broker.bootstrap, [topic])
    create_topics(broker.bootstrap, [retained], configs={"retention.ms": "3600000", "segment.ms": "3600000"})
    producer = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True})
    for i in range(3):
        producer.produce(topic, b"v%d" % i, partition=0)
    producer.produce(retained, b"old", partition=0)
    assert producer.flush(30) == 0
    [(producer_id, last_sequence)] = active_producers(broker.bootstrap, topic)
    assert last_sequence == 2

    broker.advance(hours=25)  # producer.id.expiration.ms is a day (Kafka's default)
    wait_for(lambda: active_producers(broker.bootstrap, topic) == [], "producer-id expiry")
    log = broker.broker.logs.log(retained, 0)
    assert (log.log_start_offset, log.log_end_offset) == (0, 1)  # the active segment stays

    producer.produce(topic, b"again", partition=0)  # the client gets past the expired state
    producer.produce(retained, b"new", partition=0)  # rolls: the segment is older than segment.ms
    assert producer.flush(30) == 0
    assert [p for p, _ in active_producers(broker.bootstrap, topic)] == [producer_id]
    assert broker.broker.logs.log(topic, 0).log_end_offset == 4

    broker.advance(minutes=5)  # log.retention.check.interval.ms
    wait_for(lambda: broker.broker.logs.log(retained, 0).log_start_offset == 1, "retention")
    del producer


def test_an_open_transaction_times_out_and_its_producer_is_fenced(broker, unique):
    topic, txn = unique("txn"), unique("txn-id")
    create_topics(broker.bootstrap, [topic])
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": txn,
                         "transaction.timeout.ms": 60000})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, b"never committed", partition=0)
    assert producer.flush(30) == 0

    broker.advance(minutes=2)

    def state():
        with AdminClient(broker.bootstrap) as admin:
            return admin.call(65, {"transactional_ids": [txn]}, version=0).transaction_states[0].transaction_state
    wait_for(lambda: state() == "CompleteAbort", "the transaction timeout")
    with pytest.raises(KafkaException) as raised:
        producer.commit_transaction(30)
    error = raised.value.args[0]
    assert error.fatal() and error.name() == "_FENCED", error
    log = broker.broker.logs.log(topic, 0)
    assert log.log_end_offset == 2  # the record and the abort marker
    del producer
