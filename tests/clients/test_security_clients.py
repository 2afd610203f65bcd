"""Real clients over every listener type each supports, on the one-line TLS of
running_broker(tls=True): confluent-kafka (librdkafka) over SSL, mTLS, SASL_SSL with SCRAM and
OAUTHBEARER (its unsecured JWT); kafka-python and aiokafka over SSL and SASL_SSL; Java over SSL, mTLS
and SASL_SSL. Each produces and consumes. A principal mapped from a certificate subject gets its own
quota, and the clients re-authenticate (KIP-368) when the broker bounds their sessions. ACLs with real
clients are in test_acl_clients."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from minibroker.admin_client import AdminClient
from minibroker.testing import running_broker
from tests.support.java_client import of_type

pytestmark = pytest.mark.interop

USERS = {"alice": "alice-secret"}
OAUTH_JAAS = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;"
# On the MTLS listener a certificate's CN is its principal's name (CN=client,OU=clients,... -> client).
MAPPING = "RULE:^CN=([^,]+),OU=clients,.*$/$1/,DEFAULT"


@pytest.fixture(scope="module")
def secure(tmp_path_factory):
    with running_broker(tmp_path_factory.mktemp("secure") / "data", tls=True, sasl_users=USERS,
                        sasl_enabled_mechanisms="PLAIN,SCRAM-SHA-256,SCRAM-SHA-512,OAUTHBEARER", quota_window_num=2,
                        properties={"listener.name.sasl_ssl.oauthbearer.sasl.jaas.config": OAUTH_JAAS,
                                    "listener.name.mtls.ssl.principal.mapping.rules": MAPPING}) as running:
        yield running


def values_for(label: str, count: int = 20) -> list[bytes]:
    return [f"{label}-{i}".encode() for i in range(count)]


# ---- confluent-kafka (librdkafka) ----------------------------------------------------------------


def confluent_round_trip(bootstrap: str, settings: dict, topic: str, values: list[bytes],
                         already: int = 0) -> list[bytes]:
    """Produce `values` to partition 0, then read the partition from its start: the `already`
    records there before, then these."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

    errors: list = []
    producer = Producer({"bootstrap.servers": bootstrap, **settings, "message.timeout.ms": 30000})
    for value in values:
        producer.produce(topic, value, partition=0, on_delivery=lambda err, msg: err and errors.append(err))
    assert producer.flush(30) == 0 and not errors, errors
    consumer = Consumer({"bootstrap.servers": bootstrap, **settings, "group.id": f"g-{topic}",
                         "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        got: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(got) < already + len(values) and time.monotonic() < deadline:
            got += [m.value() for m in consumer.consume(100, timeout=0.5) if not m.error()]
        return got
    finally:
        consumer.close()


SCRAM = {"sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "alice", "sasl.password": USERS["alice"]}
UNSECURED_JWT = {"sasl.mechanism": "OAUTHBEARER", "enable.sasl.oauthbearer.unsecure.jwt": True,
                 "sasl.oauthbearer.config": "principal=svc-orders"}


@pytest.mark.parametrize("listener", ["ssl", "mtls", "sasl_ssl-scram", "sasl_ssl-oauthbearer"])
def test_confluent_kafka(secure, unique, listener):
    tls = secure.tls
    settings, bootstrap = {
        "ssl": (tls.confluent(), secure.ssl_bootstrap),
        "mtls": (tls.confluent(mtls=True), secure.mtls_bootstrap),
        "sasl_ssl-scram": (tls.confluent(sasl=True) | SCRAM, secure.sasl_ssl_bootstrap),
        "sasl_ssl-oauthbearer": (tls.confluent(sasl=True) | UNSECURED_JWT, secure.sasl_ssl_bootstrap),
    }[listener]
    values = values_for(listener)
    assert confluent_round_trip(bootstrap, settings, unique(f"rdkafka-{listener}"), values) == values


def test_confluent_kafka_is_refused_at_the_mtls_listener_without_a_certificate(secure):
    from confluent_kafka import KafkaError, Producer

    errors: list = []
    producer = Producer({"bootstrap.servers": secure.mtls_bootstrap, **secure.tls.confluent(),
                         "error_cb": errors.append})
    deadline = time.monotonic() + 15
    while not errors and time.monotonic() < deadline:
        producer.poll(0.1)
    assert errors and errors[0].code() in (KafkaError._SSL, KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN)


# ---- kafka-python and aiokafka --------------------------------------------------------------------


def kafka_python_round_trip(bootstrap: str, settings: dict, topic: str, values: list[bytes]) -> list[bytes]:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    producer = KafkaProducer(bootstrap_servers=bootstrap, max_block_ms=10000, **settings)
    try:
        for value in values:
            producer.send(topic, value, partition=0)
        producer.flush(timeout=30)
    finally:
        producer.close(timeout=10)
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, auto_offset_reset="earliest", **settings)
    try:
        consumer.assign([TopicPartition(topic, 0)])
        got: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(got) < len(values) and time.monotonic() < deadline:
            for batch in consumer.poll(timeout_ms=500).values():
                got += [r.value for r in batch]
        return got
    finally:
        consumer.close()


def aiokafka_round_trip(bootstrap: str, settings: dict, topic: str, values: list[bytes]) -> list[bytes]:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

    async def run() -> list[bytes]:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, **settings)
        await producer.start()
        try:
            for value in values:
                await producer.send_and_wait(topic, value, partition=0)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None, auto_offset_reset="earliest",
                                    **settings)
        await consumer.start()
        try:
            consumer.assign([TopicPartition(topic, 0)])
            await consumer.seek_to_beginning()
            got: list[bytes] = []
            deadline = time.monotonic() + 30
            while len(got) < len(values) and time.monotonic() < deadline:
                for batch in (await consumer.getmany(timeout_ms=500)).values():
                    got += [r.value for r in batch]
            return got
        finally:
            await consumer.stop()

    return asyncio.run(run())


PYTHON_SASL = {"sasl_mechanism": "SCRAM-SHA-512", "sasl_plain_username": "alice",
               "sasl_plain_password": USERS["alice"]}


@pytest.mark.parametrize("listener", ["ssl", "mtls", "sasl_ssl"])
@pytest.mark.parametrize("client", ["kafka-python", "aiokafka"])
def test_python_clients(secure, unique, client, listener):
    tls = secure.tls
    settings_of = tls.kafka_python if client == "kafka-python" else tls.aiokafka
    settings, bootstrap = {
        "ssl": (settings_of(), secure.ssl_bootstrap),
        "mtls": (settings_of(mtls=True), secure.mtls_bootstrap),
        "sasl_ssl": (settings_of(sasl=True) | PYTHON_SASL, secure.sasl_ssl_bootstrap),
    }[listener]
    round_trip = kafka_python_round_trip if client == "kafka-python" else aiokafka_round_trip
    values = values_for(f"{client}-{listener}")
    assert round_trip(bootstrap, settings, unique(f"{client}-{listener}"), values) == values


# ---- Java -------------------------------------------------------------------------------------------


def java_config(secure, listener: str) -> tuple[str, dict[str, str]]:
    tls = secure.tls
    jaas = ('org.apache.kafka.common.security.scram.ScramLoginModule required username="alice" '
            f'password="{USERS["alice"]}";')
    return {
        "ssl": (secure.ssl_bootstrap, tls.java()),
        "mtls": (secure.mtls_bootstrap, tls.java(mtls=True)),
        "sasl_ssl": (secure.sasl_ssl_bootstrap, tls.java(sasl=True) | {"sasl.mechanism": "SCRAM-SHA-256",
                                                                        "sasl.jaas.config": jaas}),
    }[listener]


@pytest.mark.parametrize("listener", ["ssl", "mtls", "sasl_ssl"])
def test_java(secure, java, unique, listener):
    bootstrap, config = java_config(secure, listener)
    topic = unique(f"java-{listener}")
    lines = java.call(["create-topic", bootstrap, topic, 2], ["produce", bootstrap, topic, 50],
                     ["consume", bootstrap, topic, 2, 50], client_config=config)
    assert len(of_type(lines, "produced")) == 50
    assert len(of_type(lines, "record")) == 50


def test_java_is_refused_when_it_does_not_trust_the_broker(secure, java, unique, tmp_path):
    from minibroker.tls_material import TlsMaterial

    stranger = TlsMaterial.create(tmp_path / "stranger")
    lines = java.call(["produce-check", secure.ssl_bootstrap, unique("never"), "max.block.ms=5000"],
                     client_config=stranger.java())
    assert of_type(lines, "produce-result")[0]["error"] in ("SslAuthenticationException", "TimeoutException")


# ---- a principal from a certificate, and its quota ------------------------------------------------


def push_for(bootstrap: str, settings: dict, topic: str, seconds: float) -> tuple[int, int]:
    """A confluent producer pushing 1 kB records as fast as it can: (acked bytes, throttle ms)."""
    from confluent_kafka import Producer

    acked, throttle = [0], [0]

    def stats(text: str) -> None:
        for b in json.loads(text)["brokers"].values():
            throttle[0] += b.get("throttle", {}).get("sum", 0)

    producer = Producer({"bootstrap.servers": bootstrap, **settings, "client.id": "by-certificate",
                         "batch.size": 16384, "linger.ms": 5, "statistics.interval.ms": 200, "stats_cb": stats})
    value = b"c" * 1000
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            producer.produce(topic, value, partition=0,
                             on_delivery=lambda err, msg: err is None and acked.__setitem__(0, acked[0] + 1000))
        except BufferError:
            producer.poll(0.01)
        producer.poll(0)
    producer.purge()
    producer.flush(10)
    return acked[0], throttle[0]


def test_a_principal_mapped_from_a_certificate_gets_its_own_quota(secure, unique):
    quota = 100_000
    # The MTLS listener's rule names the client certificate's principal User:client.
    with AdminClient(secure.bootstrap) as admin:
        answer = admin.call(49, {"entries": [{"entity": [{"entity_type": "user", "entity_name": "client"}],
                                              "ops": [{"key": "producer_byte_rate", "value": quota, "remove": False}]}],
                                 "validate_only": False})
        assert answer.entries[0].error_code == 0
    try:
        topic = unique("by-certificate")
        mapped_bytes, mapped_throttle = push_for(secure.mtls_bootstrap, secure.tls.confluent(mtls=True), topic, 3)
        # The same certificate on the SSL listener (DEFAULT rule: the whole subject) is another principal.
        other_bytes, other_throttle = push_for(secure.ssl_bootstrap, secure.tls.confluent(mtls=True), topic, 3)
        assert mapped_throttle > 0 and other_throttle == 0
        assert mapped_bytes < 1.5 * quota * 4 and other_bytes > 3 * mapped_bytes
    finally:
        with AdminClient(secure.bootstrap) as admin:
            admin.call(49, {"entries": [{"entity": [{"entity_type": "user", "entity_name": "client"}],
                                         "ops": [{"key": "producer_byte_rate", "value": 0, "remove": True}]}],
                            "validate_only": False})


# ---- KIP-368: clients re-authenticate -------------------------------------------------------------


def steady(bootstrap: str, settings: dict, topic: str, seconds: float) -> tuple[int, list]:
    """A confluent producer sending a record every 20 ms or so (a client that floods its connection
    may leave no time to re-authenticate before the session ends, as with Kafka): (acked, errors)."""
    from confluent_kafka import Producer

    acked, errors = [0], []
    producer = Producer({"bootstrap.servers": bootstrap, **settings, "linger.ms": 0})
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        producer.produce(topic, b"steady", partition=0,
                         on_delivery=lambda err, msg: errors.append(err) if err else acked.__setitem__(0, acked[0] + 1))
        producer.poll(0.02)
    assert producer.flush(30) == 0
    return acked[0], errors


def test_clients_reauthenticate_when_sessions_are_bounded(tmp_path, java, unique):
    """connections.max.reauth.ms=2000 on SASL_SSL: librdkafka and Java keep producing across several
    session lifetimes, re-authenticating on their connections (none is closed for an expired session)."""
    with running_broker(tmp_path / "data", tls=True, sasl_users=USERS, connections_max_reauth_ms=2000) as running:
        settings = running.tls.confluent(sasl=True) | SCRAM
        acked, errors = steady(running.sasl_ssl_bootstrap, settings, unique("reauth-rdkafka"), 4)
        assert acked > 0 and not errors
        bootstrap, config = java_config(running, "sasl_ssl")
        topic = unique("reauth-java")
        lines = java.call(["create-topic", bootstrap, topic, 1], ["produce-for", bootstrap, topic, 4000],
                         client_config=config)
        [outcome] = of_type(lines, "produced-for")
        assert outcome["error"] is None and outcome["acked"] > 0
        metrics = running.broker.metrics
        assert metrics.successful_reauthentications >= 2
        assert metrics.expired_sessions_closed == 0


# ---- several brokers ------------------------------------------------------------------------------


def test_a_tls_cluster_keeps_serving_ssl_and_mtls_across_a_leader_move(tmp_path, unique):
    """running_cluster(tls=True): every broker has the SSL and mTLS listeners on one set of
    certificates; librdkafka follows a moved leader over TLS and reads every record back from the
    new leader's replica."""
    from minibroker.testing import running_cluster

    with running_cluster(brokers=3, data_dir=tmp_path / "data", tls=True, default_replication_factor=3,
                         min_insync_replicas=2) as cluster:
        assert cluster.ssl_bootstrap is not None and len(cluster.ssl_bootstrap.split(",")) == 3
        topic = unique("tls-cluster")
        first = values_for("before-move", 10)
        assert confluent_round_trip(cluster.ssl_bootstrap, cluster.tls.confluent(), topic, first) == first
        leader = cluster.leader(topic, 0)
        cluster.move_leader(topic, 0, next(n for n in cluster.node_ids if n != leader))
        assert cluster.leader(topic, 0) != leader
        later = values_for("after-move", 10)
        assert confluent_round_trip(cluster.mtls_bootstrap, cluster.tls.confluent(mtls=True), topic,
                                    later, already=len(first)) == first + later
