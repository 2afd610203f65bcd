"""Several brokers in one process (minibroker.testing.running_cluster): placement, replication,
leader moves, a broker killed and started again, with confluent-kafka (librdkafka) as the client.

One cluster for the module (three brokers, replication factor 3, min.insync.replicas 2, a broker
session of one second so that a killed broker is fenced quickly); each test its own topic."""

from __future__ import annotations

import time
import uuid

import pytest

from minibroker.protocol.entities import build
from minibroker.protocol.errors import ErrorCode
from minibroker.testing import running_cluster
from tests.support.batches import make_batch
from tests.support.wire import WireClient, ms, schema

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

pytestmark = pytest.mark.interop


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with running_cluster(3, tmp_path_factory.mktemp("cluster"), default_replication_factor=3,
                         min_insync_replicas=2, broker_session_timeout_ms=1000,
                         broker_heartbeat_interval_ms=200, replica_lag_time_max_ms=2000,
                         replica_fetch_backoff_ms=100) as running:
        yield running


def _topic(cluster, partitions: int = 3, **configs: str) -> str:
    name = f"t-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    for future in admin.create_topics([NewTopic(name, partitions, config=configs)]).values():
        future.result(10)
    return name


def _wait(predicate, timeout: float = 15.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def _full_isr(cluster, topic: str, partitions: int) -> bool:
    return all(len(cluster.isr(topic, p)) == 3 for p in range(partitions))


class Producing:
    """An idempotent acks=all producer that remembers what was acknowledged, per partition."""

    def __init__(self, cluster, topic: str) -> None:
        self.topic = topic
        self.acked: dict[int, list[int]] = {}
        self.failed: list[str] = []
        self.next = 0
        self.producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True,
                                  "linger.ms": 5, "retry.backoff.ms": 50, "topic.metadata.refresh.interval.ms": 500})

    def _done(self, err, msg) -> None:
        if err is not None:
            self.failed.append(str(err))
        else:
            self.acked.setdefault(msg.partition(), []).append(int(msg.value()))

    def send(self, count: int) -> None:
        for _ in range(count):
            self.producer.produce(self.topic, str(self.next).encode(), key=str(self.next % 7).encode(),
                                  on_delivery=self._done)
            self.next += 1
            self.producer.poll(0)
        assert self.producer.flush(30) == 0
        assert not self.failed, self.failed[:3]


def _consume_all(cluster, topic: str, expected: int) -> dict[int, list[int]]:
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": f"g-{uuid.uuid4().hex[:6]}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    got: dict[int, list[int]] = {}
    deadline = time.monotonic() + 30
    try:
        while sum(map(len, got.values())) < expected and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                got.setdefault(message.partition(), []).append(int(message.value()))
    finally:
        consumer.close()
    return got


def test_brokers_one_cluster_id_and_replicas_spread(cluster):
    topic = _topic(cluster, 3)
    ids = set()
    for node in cluster.node_ids:
        metadata = AdminClient({"bootstrap.servers": cluster.broker_bootstrap(node)}).list_topics(timeout=10)
        ids.add(metadata.cluster_id)
        assert sorted(metadata.brokers) == [1, 2, 3]
        partitions = metadata.topics[topic].partitions
        assert all(sorted(p.replicas) == [1, 2, 3] and sorted(p.isrs) == [1, 2, 3] for p in partitions.values())
        # Kafka's placement: each partition's first replica (its preferred leader) on another broker.
        assert sorted(p.leader for p in partitions.values()) == [1, 2, 3]
    assert len(ids) == 1
    assert [b["state"] for b in cluster.brokers()] == ["running"] * 3
    assert [b["controller"] for b in cluster.brokers()] == [True, False, False]


@pytest.fixture(scope="module", params=["lean", "kafka"])
def moded_cluster(request, tmp_path_factory):
    """A cluster per producer-state mode (producer.state.mode), for the idempotence test."""
    if request.param == "lean":
        yield request.getfixturevalue("cluster")
        return
    with running_cluster(3, tmp_path_factory.mktemp("cluster-kafka-mode"), default_replication_factor=3,
                         min_insync_replicas=2, broker_session_timeout_ms=1000, broker_heartbeat_interval_ms=200,
                         replica_lag_time_max_ms=2000, replica_fetch_backoff_ms=100,
                         producer_state_mode="kafka") as running:
        yield running


def test_idempotent_producer_through_leader_moves_and_a_kill(moded_cluster):
    """In both producer-state modes: the new leaders rebuild each producer's state from the log
    they replicated, so the producer's sequence numbers carry across every move and the kill."""
    cluster = moded_cluster
    topic = _topic(cluster, 3)
    producing = Producing(cluster, topic)
    producing.send(200)
    for partition in range(3):  # three leader moves, each to another ISR member
        leader = cluster.leader(topic, partition)
        target = next(b for b in cluster.isr(topic, partition) if b != leader)
        cluster.move_leader(topic, partition, target)
        assert cluster.leader(topic, partition) == target
        producing.send(100)
    assert cluster.shuffle_leaders([topic]) == 3
    producing.send(100)
    victim = cluster.leader(topic, 0)
    cluster.stop(victim, kill=True)
    producing.send(200)  # goes on once the controller fences it (broker.session.timeout.ms) and 0 has a new leader
    assert cluster.leader(topic, 0) != victim
    cluster.start(victim)
    _wait(lambda: _full_isr(cluster, topic, 3), what="the restarted broker back in every ISR")
    producing.send(100)
    got = _consume_all(cluster, topic, producing.next)
    assert got == producing.acked  # every acknowledged record once, in order per partition
    assert sum(map(len, got.values())) == producing.next == 900


def test_a_request_to_a_follower_names_the_leader(cluster):
    topic = _topic(cluster, 1)
    leader = cluster.leader(topic, 0)
    follower = next(b for b in cluster.replicas(topic, 0) if b != leader)
    request = build(schema(0, 10), {"transactional_id": None, "acks": -1, "timeout": ms(5000), "topic_data": [
        {"name": topic, "partition_data": [{"index": 0, "records": make_batch([(None, b"v")])}]}]})
    with WireClient(cluster.broker_bootstrap(follower)) as client:
        response = client.request(request)
    [part] = response.responses[0].partition_responses
    assert part.error_code == ErrorCode.not_leader_or_follower
    assert part.current_leader.leader_id == leader  # KIP-951
    [endpoint] = response.node_endpoints
    assert (endpoint.node_id, f"{endpoint.host}:{endpoint.port}") == (leader, cluster.broker_bootstrap(leader))


def test_acks_all_refused_under_min_insync_replicas(cluster):
    topic = _topic(cluster, 1, **{"min.insync.replicas": "3"})
    leader = cluster.leader(topic, 0)
    other = next(b for b in cluster.replicas(topic, 0) if b != leader)
    cluster.stop(other)  # a controlled shutdown: it leaves the ISR at once
    try:
        assert len(cluster.isr(topic, 0)) == 2
        request = build(schema(0, 9), {"transactional_id": None, "acks": -1, "timeout": ms(5000), "topic_data": [
            {"name": topic, "partition_data": [{"index": 0, "records": make_batch([(None, b"v")])}]}]})
        with WireClient(cluster.broker_bootstrap(leader)) as client:
            [part] = client.request(request).responses[0].partition_responses
        assert part.error_code == ErrorCode.not_enough_replicas
    finally:
        cluster.start(other)
    _wait(lambda: _full_isr(cluster, topic, 1), what="the restarted broker back in the ISR")


def test_move_coordinator_moves_find_coordinator(cluster):
    group = f"g-{uuid.uuid4().hex[:6]}"
    topic = _topic(cluster, 1)
    _consume_all(cluster, topic, 0)  # makes __consumer_offsets exist
    offsets, partition = cluster.in_cluster(lambda: cluster.runtime.coordinator_partition(group=group))
    target = next(b for b in cluster.isr(offsets, partition) if b != cluster.leader(offsets, partition))
    cluster.move_coordinator(group=group, broker=target)
    request = build(schema(10, 4), {"key_type": 0, "coordinator_keys": [group]})
    with WireClient(cluster.broker_bootstrap(1)) as client:
        [coordinator] = client.request(request).coordinators
    assert coordinator.node_id == target
    with pytest.raises(ValueError, match="not a replica|not in the ISR|stopped"):
        cluster.move_leader(offsets, partition, 99)


def test_elect_leaders_and_alter_partition_reassignments_act(cluster):
    topic = _topic(cluster, 1)
    preferred = cluster.replicas(topic, 0)[0]
    other = next(b for b in cluster.isr(topic, 0) if b != preferred)
    cluster.move_leader(topic, 0, other)
    elect = build(schema(43, 2), {"election_type": 0, "timeout_ms": 5000,
                                  "topic_partitions": [{"topic": topic, "partitions": [0]}]})
    with WireClient(cluster.broker_bootstrap(1)) as client:
        [result] = client.request(elect).replica_election_results[0].partition_result
        assert result.error_code == ErrorCode.none
        assert cluster.leader(topic, 0) == preferred  # the preferred replica leads again
        [result] = client.request(elect).replica_election_results[0].partition_result
        assert result.error_code == ErrorCode.election_not_needed

    producing = Producing(cluster, topic)
    producing.send(50)
    target = tuple(b for b in cluster.node_ids if b != preferred)  # two replicas: min.insync.replicas=2
    reassign = build(schema(45, 0), {"timeout_ms": 5000, "topics": [
        {"name": topic, "partitions": [{"partition_index": 0, "replicas": list(target)}]}]})
    with WireClient(cluster.broker_bootstrap(1)) as client:
        [part] = client.request(reassign).responses[0].partitions
    assert part.error_code == ErrorCode.none
    _wait(lambda: cluster.replicas(topic, 0) == target, what="the reassignment to complete")
    assert cluster.leader(topic, 0) == target[0]  # the removed leader handed over
    producing.send(50)
    assert _consume_all(cluster, topic, 100) == producing.acked


@pytest.mark.parametrize("client", ["confluent-kafka", "kafka-python", "aiokafka"])
def test_consumers_over_fetch_sessions_across_a_leader_move(cluster, client):
    """KIP-227 sessions (kafka-python's) and sessionless fetches (librdkafka's, aiokafka's) across a
    leader move: the old leader answers NOT_LEADER_OR_FOLLOWER, the client fetches from the new one."""
    from tests.support.fetch_session_consumers import CONSUMERS, consume_across_a_change

    assert client in CONSUMERS
    topic = _topic(cluster, 2)
    leader = cluster.leader(topic, 0)
    other = next(b for b in cluster.isr(topic, 0) if b != leader)
    seen = consume_across_a_change(cluster.bootstrap, topic, f"fs-{uuid.uuid4().hex[:6]}", client,
                                   lambda _admin: cluster.move_leader(topic, 0, other), 0)
    assert cluster.leader(topic, 0) == other
    assert sorted(k for p, k in seen if k.startswith(b"new")) == [b"new-0", b"new-1", b"new-2"]
    assert len(seen) == 9


@pytest.mark.minibroker(brokers=2, default_replication_factor=2, broker_rack="r1")
def test_the_minibroker_cluster_fixture_takes_the_marker(minibroker_cluster):
    assert minibroker_cluster.node_ids == [1, 2]
    assert [(b["node_id"], b["rack"], b["state"]) for b in minibroker_cluster.brokers()] == [
        (1, "r1", "running"), (2, "r1", "running")]
    topic = _topic(minibroker_cluster, 2)
    assert all(sorted(minibroker_cluster.replicas(topic, p)) == [1, 2] for p in range(2))


def test_replication_under_an_authorizer_that_denies_everyone_but_the_admin(tmp_path):
    """Followers fetch in process as the inter-broker principal, which the ACLs do not stop (Kafka's
    usual setup: the brokers' principal is a super user): an admin's acks=all produce with
    min.insync.replicas=3 is acknowledged, so every follower fetched; an anonymous client is refused."""
    with running_cluster(3, tmp_path, sasl_users={"admin": "admin-secret"}, default_replication_factor=3,
                         min_insync_replicas=3, super_users="User:admin",
                         authorizer_class_name="org.apache.kafka.metadata.authorizer.StandardAuthorizer") as secured:
        admin_settings = {"bootstrap.servers": secured.sasl_bootstrap, "security.protocol": "SASL_PLAINTEXT",
                          "sasl.mechanism": "PLAIN", "sasl.username": "admin", "sasl.password": "admin-secret"}
        admin = AdminClient(admin_settings)
        admin.create_topics([NewTopic("secured", 1)])["secured"].result(10)
        producer = Producer({**admin_settings, "acks": "all", "enable.idempotence": True})
        delivered = []
        for i in range(20):
            producer.produce("secured", b"%d" % i, on_delivery=lambda err, msg: delivered.append(err))
        assert producer.flush(20) == 0
        assert delivered == [None] * 20
        assert len(secured.isr("secured", 0)) == 3
        leader = secured.leader("secured", 0)
        request = build(schema(0, 9), {"transactional_id": None, "acks": -1, "timeout": ms(5000), "topic_data": [
            {"name": "secured", "partition_data": [{"index": 0, "records": make_batch([(None, b"v")])}]}]})
        with WireClient(secured.broker_bootstrap(leader)) as client:
            [part] = client.request(request).responses[0].partition_responses
        assert part.error_code == ErrorCode.topic_authorization_failed


def test_java_admin_elects_reassigns_and_describes_the_cluster(cluster, java):
    topic = _topic(cluster, 2)
    preferred = [cluster.replicas(topic, p)[0] for p in range(2)]
    for p in range(2):
        cluster.move_leader(topic, p, next(b for b in cluster.isr(topic, p) if b != preferred[p]))
    target = [b for b in cluster.node_ids if b != preferred[0]]
    b = cluster.bootstrap
    out = java.run(["describe-cluster", b],
                   ["elect-leaders", b, "preferred", f"{topic}:0,{topic}:1"],
                   ["elect-leaders", b, "preferred", f"{topic}:0"],
                   ["alter-reassignment", b, topic, 0, ",".join(map(str, target))])
    (described,) = [line for line in out if line["type"] == "cluster"]
    assert described["nodes"] == [[n, cluster.broker_bootstrap(n)] for n in cluster.node_ids]
    assert described["controller"] in cluster.node_ids
    elected = [(line["partition"], line["error"]) for line in out if line["type"] == "elected"]
    assert elected == [(f"{topic}-0", None), (f"{topic}-1", None), (f"{topic}-0", "ElectionNotNeededException")]
    assert [line["error"] for line in out if line["type"] == "reassigned"] == [None]
    _wait(lambda: cluster.replicas(topic, 0) == tuple(target), what="the reassignment to complete")
    assert cluster.leader(topic, 1) == preferred[1]
    assert cluster.leader(topic, 0) in target


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_a_consumer_group_survives_a_coordinator_move(cluster, protocol):
    """A group (classic, or KIP-848's) commits, its coordinator moves, the members go on: the new
    coordinator loaded the group from its replica of __consumer_offsets (a classic group with its
    members, as Kafka), so no commit is refused, nothing committed is read again and nothing is
    skipped."""
    topic, group = _topic(cluster, 2), f"mv-{protocol}-{uuid.uuid4().hex[:6]}"
    producing = Producing(cluster, topic)
    producing.send(60)
    settings = {"bootstrap.servers": cluster.bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                "enable.auto.commit": False, "group.protocol": protocol}
    if protocol == "classic":
        settings["session.timeout.ms"] = 6000
    consumer = Consumer(settings)
    consumer.subscribe([topic])
    got: list[int] = []
    refused: list[int] = []

    def read(count: int) -> None:
        deadline = time.monotonic() + 30
        while len(set(got)) < count and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                got.append(int(message.value()))
                try:
                    consumer.commit(message, asynchronous=False)
                except confluent_kafka.KafkaException as exc:
                    assert exc.args[0].code() in (confluent_kafka.KafkaError.UNKNOWN_MEMBER_ID,
                                                  confluent_kafka.KafkaError.REBALANCE_IN_PROGRESS,
                                                  confluent_kafka.KafkaError.ILLEGAL_GENERATION), exc
                    refused.append(got[-1])

    try:
        read(60)
        offsets, partition = cluster.in_cluster(lambda: cluster.runtime.coordinator_partition(group=group))
        old = cluster.leader(offsets, partition)
        new = next(b for b in cluster.isr(offsets, partition) if b != old)
        cluster.move_coordinator(group=group, broker=new)
        assert cluster.leader(offsets, partition) == new
        producing.send(60)
        read(120)
    finally:
        consumer.close()
    assert refused == []
    assert sorted(got) == list(range(120))  # nothing skipped, nothing read twice
    # and a new member of the group starts from what was committed: nothing left to read
    late = Consumer({**settings, "client.id": "late"})
    late.subscribe([topic])
    try:
        extra = [late.poll(0.5) for _ in range(6)]
    finally:
        late.close()
    assert [m for m in extra if m is not None and m.error() is None] == []


def test_a_follower_catches_up_over_fetches_cut_at_replica_fetch_max_bytes(tmp_path):
    """A follower's catch-up fetch is cut at replica.fetch.max.bytes, at the last whole batch: the
    leader hands that in-process read over as a view of what it read (LogSegment.read's `view`), and
    the follower's log ends up byte for byte the leader's."""
    with running_cluster(2, tmp_path, default_replication_factor=2, min_insync_replicas=1,
                         replica_fetch_max_bytes=1000, replica_fetch_backoff_ms=100) as cluster:
        topic = _topic(cluster, 1)
        leader = cluster.leader(topic, 0)
        follower = next(b for b in cluster.replicas(topic, 0) if b != leader)
        cluster.stop(follower)
        batches = [make_batch([(None, bytes([65 + n]) * 150)] * 2) for n in range(6)]  # about 400 bytes each
        with WireClient(cluster.broker_bootstrap(leader)) as client:
            for records in batches:
                request = build(schema(0, 9), {"transactional_id": None, "acks": 1, "timeout": ms(5000), "topic_data": [
                    {"name": topic, "partition_data": [{"index": 0, "records": records}]}]})
                [part] = client.request(request).responses[0].partition_responses
                assert part.error_code == ErrorCode.none
        reads: list[type] = []

        def spy() -> None:
            plog = cluster.broker(leader).logs.log(topic, 0)
            read = plog.read

            def recording(*args, **kwargs):
                data = read(*args, **kwargs)
                if kwargs.get("view"):
                    reads.append(type(data))
                return data
            plog.read = recording

        cluster.in_cluster(spy)
        cluster.start(follower)
        _wait(lambda: len(cluster.isr(topic, 0)) == 2, what="the follower back in the ISR")

        def log_bytes(node: int) -> bytes:
            plog = cluster.broker(node).logs.log(topic, 0)
            return bytes(plog.read(0, 1 << 20))

        assert memoryview in reads  # a read was cut (6 batches, 1000 bytes a fetch) and not copied
        leader_log, follower_log = cluster.in_cluster(log_bytes, leader), cluster.in_cluster(log_bytes, follower)
        assert len(leader_log) > 2000 and follower_log == leader_log
