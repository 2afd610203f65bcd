"""The group coordinator's durability on a cluster, as Kafka's: the coordinator (the leader of the
group's `__consumer_offsets` partition) answers a commit, a join, a sync or a KIP-848 heartbeat only
once what it wrote is acknowledged by the ISR (acks=-1, min.insync.replicas of the topic), so a
coordinator killed right after it answered loses nothing it acknowledged; a broker that does not
coordinate answers NOT_COORDINATOR; a new coordinator loads a classic group with its members, so a
member goes on in its generation without a rebalance."""

from __future__ import annotations

import time
import uuid

import pytest

from minibroker.protocol.entities import build
from minibroker.protocol.errors import ErrorCode
from minibroker.storage.offsets_store import TOPIC as OFFSETS
from minibroker.testing import running_cluster
from tests.support.wire import WireClient, schema

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

pytestmark = pytest.mark.interop


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with running_cluster(3, tmp_path_factory.mktemp("coordinators"), default_replication_factor=3,
                         min_insync_replicas=2, broker_session_timeout_ms=1000,
                         broker_heartbeat_interval_ms=200, replica_lag_time_max_ms=2000,
                         replica_fetch_backoff_ms=100, offsets_commit_timeout_ms=2000) as running:
        yield running


def _topic(cluster, partitions: int) -> str:
    name = f"t-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    for future in admin.create_topics([NewTopic(name, partitions)]).values():
        future.result(10)
    return name


def _wait(predicate, timeout: float = 15.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def _produce(cluster, topic: str, count: int) -> None:
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for i in range(count):
        producer.produce(topic, str(i).encode(), partition=i % 2)
    assert producer.flush(15) == 0


def _coordinator(cluster, group: str) -> tuple[int, int]:
    """(the partition of __consumer_offsets holding the group, its leader)."""
    _, partition = cluster.in_cluster(lambda: cluster.runtime.coordinator_partition(group=group))
    return partition, cluster.leader(OFFSETS, partition)


def _committed(cluster, group: str, topic: str, partitions: int) -> dict[int, int]:
    """The group's committed offsets as its coordinator answers OffsetFetch now."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    request = confluent_kafka.ConsumerGroupTopicPartitions(
        group, [TopicPartition(topic, p) for p in range(partitions)])
    [future] = admin.list_consumer_group_offsets([request], request_timeout=20).values()
    return {tp.partition: tp.offset for tp in future.result(30).topic_partitions}


def _consumer(cluster, group: str, protocol: str) -> Consumer:
    settings = {"bootstrap.servers": cluster.bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                "enable.auto.commit": False, "group.protocol": protocol}
    if protocol == "classic":
        settings["session.timeout.ms"] = 6000
    return Consumer(settings)


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_offsets_acknowledged_survive_a_kill_of_the_group_coordinator(cluster, protocol):
    """Every commit the coordinator acknowledged is on the ISR before the answer, so the broker
    elected in its place (from the ISR) has it: killed (-9) right after the last acknowledgement,
    every acknowledged offset is read back from the new coordinator."""
    topic, group = _topic(cluster, 2), f"kill-{protocol}-{uuid.uuid4().hex[:6]}"
    _produce(cluster, topic, 40)
    consumer = _consumer(cluster, group, protocol)
    consumer.subscribe([topic])
    acknowledged: dict[int, int] = {}
    try:
        deadline = time.monotonic() + 30
        while sum(acknowledged.values()) < 40 and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is None or message.error() is not None:
                continue
            done = consumer.commit(offsets=[TopicPartition(topic, message.partition(), message.offset() + 1)],
                                   asynchronous=False)
            assert done[0].error is None, done
            acknowledged[message.partition()] = message.offset() + 1
        assert acknowledged == {0: 20, 1: 20}
        partition, old = _coordinator(cluster, group)
        cluster.stop(old, kill=True)  # at once: nothing more is fetched from it
    finally:
        consumer.close()
    try:
        _wait(lambda: cluster.leader(OFFSETS, partition) not in (old, -1), what="a new group coordinator")
        assert _committed(cluster, group, topic, 2) == acknowledged
    finally:
        cluster.start(old)
        _wait(lambda: len(cluster.isr(OFFSETS, partition)) == 3, what="the restarted broker back in the ISR")


@pytest.mark.parametrize("how", ["move", "kill"])
def test_a_classic_member_keeps_its_generation_across_a_coordinator_move(cluster, how):
    """The new coordinator (after a move, or after the old one is killed) loads the classic group
    with its members and assignment (Kafka's GroupMetadataValue): the member's next heartbeat and
    commit are answered in its generation, no rebalance, nothing read twice."""
    topic, group = _topic(cluster, 2), f"gen-{uuid.uuid4().hex[:6]}"
    _produce(cluster, topic, 40)
    consumer = _consumer(cluster, group, "classic")
    consumer.subscribe([topic])
    got: list[int] = []

    def read(count: int) -> None:
        deadline = time.monotonic() + 30
        while len(got) < count and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                got.append(int(message.value()))
                consumer.commit(message, asynchronous=False)  # raises on any refusal

    def state(node: int) -> tuple[str, int, list[str]]:
        def read_state():
            classic = cluster.broker(node).groups.classic.classic_group(group)
            return classic.state_name, classic.generation_id, sorted(classic.members)
        return cluster.in_cluster(read_state)

    try:
        read(20)
        partition, old = _coordinator(cluster, group)
        before = state(old)
        assert before[0] == "Stable" and len(before[2]) == 1
        if how == "move":
            new = next(b for b in cluster.isr(OFFSETS, partition) if b != old)
            cluster.move_coordinator(group=group, broker=new)
        else:
            cluster.stop(old, kill=True)
            _wait(lambda: cluster.leader(OFFSETS, partition) not in (old, -1), what="a new group coordinator")
            new = cluster.leader(OFFSETS, partition)
        assert state(new) == before  # loaded with its member, in its generation
        read(40)
        time.sleep(1.0)  # heartbeats reach the new coordinator
        assert state(new) == before  # no rebalance: the member went on in its generation
    finally:
        consumer.close()
        if how == "kill":
            cluster.start(old)
            _wait(lambda: len(cluster.isr(OFFSETS, partition)) == 3, what="the restarted broker back in the ISR")
    assert sorted(got) == sorted(list(range(0, 40, 2)) + list(range(1, 40, 2)))  # each once
    assert _committed(cluster, group, topic, 2) == {0: 20, 1: 20}


def test_a_broker_that_does_not_coordinate_answers_not_coordinator(cluster):
    """A group request sent to a broker that does not lead the group's partition of
    __consumer_offsets gets NOT_COORDINATOR (the client finds the coordinator again); one that led
    it before a move has unloaded its groups."""
    group = f"nc-{uuid.uuid4().hex[:6]}"
    _topic(cluster, 1)
    partition, leader = _coordinator(cluster, group)
    other = next(b for b in cluster.node_ids if b != leader)
    heartbeat = build(schema(12, 4), {"group_id": group, "generation_id": 1, "member_id": "m",
                                      "group_instance_id": None})
    commit = build(schema(8, 8), {"group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
                                  "group_instance_id": None, "topics": [{"name": "x", "partitions": [
                                      {"partition_index": 0, "committed_offset": 1, "committed_leader_epoch": -1,
                                       "committed_metadata": ""}]}]})
    with WireClient(cluster.broker_bootstrap(other)) as client:
        assert client.request(heartbeat).error_code == ErrorCode.not_coordinator
        [topic] = client.request(commit).topics
        assert topic.partitions[0].error_code == ErrorCode.not_coordinator
    with WireClient(cluster.broker_bootstrap(leader)) as client:
        assert client.request(heartbeat).error_code == ErrorCode.unknown_member_id
        [topic] = client.request(commit).topics  # a simple group's commit
        assert topic.partitions[0].error_code == ErrorCode.unknown_topic_or_partition
    cluster.move_coordinator(group=group, broker=other)
    with WireClient(cluster.broker_bootstrap(leader)) as client:
        assert client.request(heartbeat).error_code == ErrorCode.not_coordinator
    assert cluster.in_cluster(lambda: group in cluster.broker(leader).groups.groups) is False


def test_a_commit_under_min_insync_replicas_is_refused_and_not_written(cluster):
    """Kafka's coordinator appends with acks=-1: while the ISR of __consumer_offsets is smaller than
    min.insync.replicas (2 here), a commit is refused (NOT_ENOUGH_REPLICAS, answered
    COORDINATOR_NOT_AVAILABLE) and nothing is appended; once the ISR is back it is taken."""
    group = f"isr-{uuid.uuid4().hex[:6]}"
    topic = _topic(cluster, 1)
    partition, leader = _coordinator(cluster, group)
    followers = [b for b in cluster.replicas(OFFSETS, partition) if b != leader]
    commit = build(schema(8, 8), {"group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
                                  "group_instance_id": None, "topics": [{"name": topic, "partitions": [
                                      {"partition_index": 0, "committed_offset": 7, "committed_leader_epoch": -1,
                                       "committed_metadata": ""}]}]})
    log_end = lambda: cluster.in_cluster(lambda: cluster.broker(leader).logs.log(OFFSETS, partition).log_end_offset)  # noqa: E731
    for follower in followers:
        cluster.stop(follower)  # a controlled shutdown: it leaves the ISR at once
    try:
        assert cluster.isr(OFFSETS, partition) == (leader,)
        before = log_end()
        with WireClient(cluster.broker_bootstrap(leader)) as client:
            [answer] = client.request(commit).topics
        assert answer.partitions[0].error_code == ErrorCode.coordinator_not_available
        assert log_end() == before
    finally:
        for follower in followers:
            cluster.start(follower)
    _wait(lambda: len(cluster.isr(OFFSETS, partition)) == 3, what="the followers back in the ISR")
    with WireClient(cluster.broker_bootstrap(leader)) as client:
        [answer] = client.request(commit).topics
    assert answer.partitions[0].error_code == ErrorCode.none
    assert _committed(cluster, group, topic, 1) == {0: 7}


def test_internal_topics_take_their_own_replication_factors(tmp_path):
    """__consumer_offsets is made with offsets.topic.replication.factor, not
    default.replication.factor; left at its default (3), it is capped at the brokers of the cluster
    (two here), and transaction.state.log.min.isr at the factor."""
    with running_cluster(2, tmp_path / "two", broker_session_timeout_ms=1000,
                         broker_heartbeat_interval_ms=200) as two:
        assert len(two.replicas(OFFSETS, 0)) == 2
        topic = _topic(two, 1)
        assert len(two.replicas(topic, 0)) == 1  # default.replication.factor
        controller = two.controller
        made = two.in_cluster(lambda: controller.create_topic(
            "__transaction_state", 1, {}, 0, log_config=two.broker(1).logs.broker_config, validate_only=True))
        image, config = made
        assert len(image.partitions[0].replicas) == 2 and config.min_insync_replicas == 2


def test_an_offsets_factor_above_the_brokers_is_kafkas_coordinator_not_available(tmp_path):
    """offsets.topic.replication.factor set above the brokers registered: as Kafka 4.4,
    __consumer_offsets is not created (INVALID_REPLICATION_FACTOR), FindCoordinator answers
    COORDINATOR_NOT_AVAILABLE and a group request NOT_COORDINATOR; the creation is tried again at
    each FindCoordinator."""
    find = build(schema(10, 4), {"key_type": 0, "coordinator_keys": ["g"]})
    heartbeat = build(schema(12, 4), {"group_id": "g", "generation_id": 1, "member_id": "m",
                                      "group_instance_id": None})
    with running_cluster(1, tmp_path / "one", offsets_topic_replication_factor=3) as one:
        with WireClient(one.bootstrap) as client:
            [coordinator] = client.request(find).coordinators
            assert coordinator.error_code == ErrorCode.coordinator_not_available and coordinator.node_id == -1
            assert client.request(heartbeat).error_code == ErrorCode.not_coordinator
        assert one.in_cluster(lambda: one.broker(1).logs.topic(OFFSETS)) is None
