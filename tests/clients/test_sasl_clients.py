"""Real clients on the SASL_PLAINTEXT listener: kafka-python, confluent-kafka (librdkafka) and
aiokafka with PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512. The right password produces and consumes; a
wrong one is a clean client-side error while the broker keeps serving others; quotas set on a user
apply to that principal only."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.request

import pytest

from minibroker.admin_client import AdminClient

pytestmark = pytest.mark.interop

USERS = {"alice": "alice-secret", "bob": "bob-secret"}
MECHANISMS = ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]


@pytest.fixture(scope="module")
def sasl_broker(tmp_path_factory):
    from minibroker.testing import running_broker

    with running_broker(tmp_path_factory.mktemp("sasl") / "data", sasl_users=USERS, quota_window_num=2,
                        metrics_listen="127.0.0.1:0") as running:
        yield running


# ---- one produce-and-consume round trip per client ---------------------------------------------


def kafka_python_round_trip(bootstrap, topic, mechanism, user, password, values):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    auth = dict(security_protocol="SASL_PLAINTEXT", sasl_mechanism=mechanism,
                sasl_plain_username=user, sasl_plain_password=password)
    producer = KafkaProducer(bootstrap_servers=bootstrap, max_block_ms=5000, **auth)
    try:
        for v in values:
            producer.send(topic, v, partition=0)
        producer.flush(timeout=30)
    finally:
        producer.close(timeout=10)
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, auto_offset_reset="earliest", **auth)
    try:
        consumer.assign([TopicPartition(topic, 0)])
        got, deadline = [], time.monotonic() + 30
        while len(got) < len(values) and time.monotonic() < deadline:
            for batch in consumer.poll(timeout_ms=500).values():
                got += [r.value for r in batch]
        return got
    finally:
        consumer.close()


def confluent_auth(mechanism, user, password):
    return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": mechanism,
            "sasl.username": user, "sasl.password": password}


def confluent_round_trip(bootstrap, topic, mechanism, user, password, values):
    from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

    auth = confluent_auth(mechanism, user, password)
    errors = []
    producer = Producer({"bootstrap.servers": bootstrap, **auth, "message.timeout.ms": 30000})
    for v in values:
        producer.produce(topic, v, partition=0, on_delivery=lambda err, msg: err and errors.append(err))
    assert producer.flush(30) == 0 and not errors
    consumer = Consumer({"bootstrap.servers": bootstrap, **auth, "group.id": f"g-{topic}",
                         "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        got, deadline = [], time.monotonic() + 30
        while len(got) < len(values) and time.monotonic() < deadline:
            got += [m.value() for m in consumer.consume(100, timeout=0.5) if not m.error()]
        return got
    finally:
        consumer.close()


def aiokafka_round_trip(bootstrap, topic, mechanism, user, password, values):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

    auth = dict(security_protocol="SASL_PLAINTEXT", sasl_mechanism=mechanism,
                sasl_plain_username=user, sasl_plain_password=password)

    async def run():
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, **auth)
        await producer.start()
        try:
            for v in values:
                await producer.send_and_wait(topic, v, partition=0)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None, auto_offset_reset="earliest", **auth)
        await consumer.start()
        try:
            consumer.assign([TopicPartition(topic, 0)])
            await consumer.seek_to_beginning()
            got, deadline = [], time.monotonic() + 30
            while len(got) < len(values) and time.monotonic() < deadline:
                for batch in (await consumer.getmany(timeout_ms=500)).values():
                    got += [r.value for r in batch]
            return got
        finally:
            await consumer.stop()

    return asyncio.run(run())


ROUND_TRIPS = {"kafka-python": kafka_python_round_trip, "confluent-kafka": confluent_round_trip,
               "aiokafka": aiokafka_round_trip}


@pytest.mark.parametrize("mechanism", MECHANISMS)
@pytest.mark.parametrize("client", list(ROUND_TRIPS))
def test_right_password_produces_and_consumes(sasl_broker, unique, client, mechanism):
    topic = unique(f"sasl-{client}-{mechanism}".lower())
    values = [f"{mechanism}-{i}".encode() for i in range(20)]
    assert ROUND_TRIPS[client](sasl_broker.sasl_bootstrap, topic, mechanism, "alice", USERS["alice"], values) == values


# ---- a wrong password ------------------------------------------------------------------------------


def kafka_python_wrong(bootstrap, mechanism):
    from kafka import KafkaProducer
    from kafka.errors import KafkaError

    # With api_version given the constructor does not connect, so the producer can be closed cleanly;
    # the send then fails once metadata cannot be had (the authentication failure is logged).
    producer = KafkaProducer(bootstrap_servers=bootstrap, security_protocol="SASL_PLAINTEXT",
                             sasl_mechanism=mechanism, sasl_plain_username="alice", sasl_plain_password="wrong",
                             api_version=(2, 6), max_block_ms=2000)
    try:
        with pytest.raises(KafkaError):
            producer.send("never", b"x").get(timeout=10)
    finally:
        producer.close(timeout=5)


def confluent_wrong(bootstrap, mechanism):
    from confluent_kafka import KafkaError, Producer

    errors = []
    producer = Producer({"bootstrap.servers": bootstrap, **confluent_auth(mechanism, "alice", "wrong"),
                         "error_cb": errors.append})
    deadline = time.monotonic() + 10
    while not errors and time.monotonic() < deadline:
        producer.poll(0.1)
    assert errors and errors[0].code() == KafkaError._AUTHENTICATION
    assert "Authentication failed" in errors[0].str()


def aiokafka_wrong(bootstrap, mechanism):
    from aiokafka import AIOKafkaProducer
    from aiokafka.errors import KafkaError

    async def run():
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, security_protocol="SASL_PLAINTEXT",
                                    sasl_mechanism=mechanism, sasl_plain_username="alice",
                                    sasl_plain_password="wrong")
        try:
            with pytest.raises(KafkaError):
                await producer.start()
        finally:
            await producer.stop()

    asyncio.run(run())


WRONG = {"kafka-python": kafka_python_wrong, "confluent-kafka": confluent_wrong, "aiokafka": aiokafka_wrong}


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512"])
@pytest.mark.parametrize("client", list(WRONG))
def test_wrong_password_fails_cleanly_and_the_broker_keeps_serving(sasl_broker, unique, client, mechanism):
    WRONG[client](sasl_broker.sasl_bootstrap, mechanism)
    topic = unique("after-wrong")
    assert confluent_round_trip(sasl_broker.sasl_bootstrap, topic, "SCRAM-SHA-256", "bob", USERS["bob"], [b"ok"]) == [b"ok"]


# ---- quotas per principal ------------------------------------------------------------------------


def push_for(bootstrap, topic, user, seconds):
    """A confluent producer pushing 1 kB records as fast as it can; (acked bytes, total throttle ms)."""
    from confluent_kafka import Producer

    acked, throttle = [0], [0]

    def stats(text):
        for b in json.loads(text)["brokers"].values():
            throttle[0] += b.get("throttle", {}).get("sum", 0)

    producer = Producer({"bootstrap.servers": bootstrap, **confluent_auth("SCRAM-SHA-256", user, USERS[user]),
                         "client.id": "per-user", "batch.size": 16384, "linger.ms": 5,
                         "statistics.interval.ms": 200, "stats_cb": stats})
    value = b"u" * 1000
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            producer.produce(topic, value, partition=0,
                             on_delivery=lambda err, msg: err is None and acked.__setitem__(0, acked[0] + len(msg.value())))
        except BufferError:
            producer.poll(0.01)
        producer.poll(0)
    producer.purge()
    producer.flush(10)
    return acked[0], throttle[0]


def test_a_user_quota_throttles_that_principal_only(sasl_broker, unique):
    quota = 100_000
    with AdminClient(sasl_broker.bootstrap) as admin:
        result = admin.call(49, {"entries": [{"entity": [{"entity_type": "user", "entity_name": "alice"}],
                                              "ops": [{"key": "producer_byte_rate", "value": quota, "remove": False}]}],
                                 "validate_only": False})
        assert result.entries[0].error_code == 0
    try:
        topic = unique("per-user")
        alice_bytes, alice_throttle = push_for(sasl_broker.sasl_bootstrap, topic, "alice", 3)
        bob_bytes, bob_throttle = push_for(sasl_broker.sasl_bootstrap, topic, "bob", 3)
        assert alice_throttle > 0 and bob_throttle == 0
        # 3 s at the quota plus the one-window burst (2 samples), with slack for batch granularity.
        assert alice_bytes < 1.5 * quota * 4
        assert bob_bytes > 5 * alice_bytes
        scraped = urllib.request.urlopen(sasl_broker.metrics_url, timeout=10).read().decode()
        assert 'kafka_server_produce_byte_rate{user="alice",client_id=""}' in scraped
        assert 'kafka_server_produce_throttle_time{user="alice",client_id=""}' in scraped
    finally:
        with AdminClient(sasl_broker.bootstrap) as admin:
            admin.call(49, {"entries": [{"entity": [{"entity_type": "user", "entity_name": "alice"}],
                                         "ops": [{"key": "producer_byte_rate", "value": 0, "remove": True}]}],
                            "validate_only": False})
