"""Transactions across the brokers of a cluster, with confluent-kafka (librdkafka) as the client: the
transaction coordinator (the leader of __transaction_state) sends its markers to the leader of each
partition, three different brokers here, and to the group coordinator's broker for the offsets; a
partition leader verifies a transactional batch with the coordinator wherever it runs (KIP-890);
the coordinator moves (between transactions, in the middle of one, with a commit's markers still
owed, and by a kill -9) and the new one loads __transaction_state from its replica.

One cluster for the module (three brokers, replication factor 3, min.insync.replicas 2, a broker
session of one second); each test its own topic and transactional id. A read_committed consumer
reads every partition to its end and must see exactly the committed records."""

from __future__ import annotations

import time
import uuid

import pytest

from minibroker.protocol.errors import ErrorCode
from minibroker.storage.transaction_store import TOPIC as TXN_TOPIC
from minibroker.testing import running_cluster
from minibroker.transactions.state import TxnState
from tests.support.wire import WireClient, ms, request

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

pytestmark = pytest.mark.interop

PARTITIONS = 3


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with running_cluster(3, tmp_path_factory.mktemp("txn-cluster"), default_replication_factor=3,
                         min_insync_replicas=2, broker_session_timeout_ms=1000,
                         broker_heartbeat_interval_ms=200, replica_lag_time_max_ms=2000,
                         replica_fetch_backoff_ms=100, replica_fetch_wait_max_ms=100) as running:
        yield running


def _wait(predicate, timeout: float = 20.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def _topic(cluster) -> str:
    """A topic whose three partitions are led by three different brokers."""
    name = f"tx-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    for future in admin.create_topics([NewTopic(name, PARTITIONS)]).values():
        future.result(10)
    _wait(lambda: all(len(cluster.isr(name, p)) == 3 for p in range(PARTITIONS)), what="full ISRs")
    for partition, broker in zip(range(PARTITIONS), cluster.node_ids):
        if cluster.leader(name, partition) != broker:
            cluster.move_leader(name, partition, broker)
    assert {cluster.leader(name, p) for p in range(PARTITIONS)} == set(cluster.node_ids)
    return name


def _producer(cluster, tid: str) -> Producer:
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": tid, "linger.ms": 5,
                         "retry.backoff.ms": 50, "topic.metadata.refresh.interval.ms": 500})
    producer.init_transactions(20)
    return producer


def _send(producer: Producer, topic: str, values: list[str]) -> None:
    for i, value in enumerate(values):
        producer.produce(topic, value.encode(), partition=i % PARTITIONS)
    assert producer.flush(20) == 0


def _read_committed(cluster, topic: str, isolation: str = "read_committed") -> list[str]:
    """Every record of the topic a consumer of `isolation` reads, to the end of each partition."""
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": f"r-{uuid.uuid4().hex[:6]}",
                         "isolation.level": isolation, "enable.auto.commit": False,
                         "enable.partition.eof": True})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    got: list[str] = []
    at_end: set[int] = set()
    deadline = time.monotonic() + 20
    try:
        while len(at_end) < PARTITIONS and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is None:
                continue
            if message.error() is not None:
                if message.error().code() == confluent_kafka.KafkaError._PARTITION_EOF:
                    at_end.add(message.partition())
                continue
            at_end.discard(message.partition())
            got.append(message.value().decode())
    finally:
        consumer.close()
    assert len(at_end) == PARTITIONS, "the consumer did not reach the end of every partition"
    return got


def _coordinator(cluster) -> int:
    return cluster.leader(TXN_TOPIC, 0)


def _wait_completed(cluster, tid: str) -> None:
    """Until the coordinator has completed the transaction (its markers are all in)."""
    def completed() -> bool:
        broker = cluster.broker(_coordinator(cluster))
        txn = broker.transactions.txns.get(tid) if broker is not None else None
        return txn is not None and txn.state in (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)
    _wait(completed, what=f"the transaction of {tid} completed")


def test_commit_and_abort_over_partitions_led_by_three_brokers_with_offsets(cluster):
    topic, tid, group = _topic(cluster), f"tid-{uuid.uuid4().hex[:6]}", f"g-{uuid.uuid4().hex[:6]}"
    producer = _producer(cluster, tid)
    coordinator = _coordinator(cluster)
    # The group's offsets go to another broker than the transaction coordinator's.
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group, "enable.auto.commit": False})
    offsets, partition = cluster.in_cluster(lambda: cluster.runtime.coordinator_partition(group=group))
    other = next(b for b in cluster.node_ids if b != coordinator)
    if cluster.leader(offsets, partition) == coordinator:
        cluster.move_coordinator(group=group, broker=other)
    assert cluster.leader(offsets, partition) != coordinator
    try:
        producer.begin_transaction()
        _send(producer, topic, [f"c1-{i}" for i in range(6)])
        producer.send_offsets_to_transaction([TopicPartition(topic, 0, 42)], consumer.consumer_group_metadata(), 20)
        producer.commit_transaction(20)
        producer.begin_transaction()
        _send(producer, topic, [f"a-{i}" for i in range(6)])
        producer.send_offsets_to_transaction([TopicPartition(topic, 0, 99)], consumer.consumer_group_metadata(), 20)
        producer.abort_transaction(20)
        producer.begin_transaction()
        _send(producer, topic, [f"c2-{i}" for i in range(6)])
        producer.commit_transaction(20)
        _wait_completed(cluster, tid)
        assert sorted(_read_committed(cluster, topic)) == sorted([f"c1-{i}" for i in range(6)]
                                                                + [f"c2-{i}" for i in range(6)])
        # The aborted records are in every log: the ABORT markers hid them from read_committed.
        assert len(_read_committed(cluster, topic, "read_uncommitted")) == 18
        [committed] = consumer.committed([TopicPartition(topic, 0)], 10)
        assert committed.offset == 42  # the committed transaction's offset, not the aborted one's
    finally:
        consumer.close()


def test_a_coordinator_move_between_and_in_the_middle_of_transactions(cluster):
    topic, tid = _topic(cluster), f"tid-{uuid.uuid4().hex[:6]}"
    producer = _producer(cluster, tid)
    producer.begin_transaction()
    _send(producer, topic, [f"one-{i}" for i in range(6)])
    producer.commit_transaction(20)
    _wait_completed(cluster, tid)
    # Between two transactions.
    old = _coordinator(cluster)
    new = next(b for b in cluster.node_ids if b != old)
    cluster.move_coordinator(transactional_id=tid, broker=new)
    assert _coordinator(cluster) == new
    with WireClient(cluster.broker_bootstrap(old)) as client:  # the old coordinator refuses, over the wire
        for key, version, body in [(26, 3, {"producer_id": 0, "producer_epoch": 0, "committed": True}),
                                   (22, 4, {"transaction_timeout": ms(60_000), "producer_id": -1, "producer_epoch": -1})]:
            assert client.request(request(key, version, transactional_id=tid, **body)).error_code \
                == ErrorCode.not_coordinator
        [described] = client.request(request(65, 0, transactional_ids=[tid])).transaction_states
        assert described.error_code == ErrorCode.not_coordinator
    producer.begin_transaction()
    _send(producer, topic, [f"two-{i}" for i in range(6)])
    producer.commit_transaction(20)
    # In the middle of one: records of it written, the coordinator moves, more records, the commit.
    producer.begin_transaction()
    _send(producer, topic, [f"three-{i}" for i in range(3)])
    last = next(b for b in cluster.node_ids if b not in (old, new))
    cluster.move_coordinator(transactional_id=tid, broker=last)
    assert cluster.broker(last).transactions.txns[tid].state is TxnState.ONGOING  # loaded from its replica
    _send(producer, topic, [f"three-{i}" for i in range(3, 6)])
    producer.commit_transaction(20)
    _wait_completed(cluster, tid)
    got = _read_committed(cluster, topic)
    assert sorted(got) == sorted(f"{n}-{i}" for n in ("one", "two", "three") for i in range(6))


def test_a_new_coordinator_completes_a_commit_whose_markers_were_owed(cluster):
    """The coordinator's markers are refused (as by leaders that moved) after its PrepareCommit is
    written: the client is told the commit succeeded, the transaction stays PrepareCommit. The
    coordinator moves: the new one loads PrepareCommit from its replica and sends the markers."""
    topic, tid = _topic(cluster), f"tid-{uuid.uuid4().hex[:6]}"
    producer = _producer(cluster, tid)
    old = _coordinator(cluster)
    coordinator = cluster.broker(old).transactions
    real = coordinator.markers

    def refused(producer_id, producer_epoch, commit, coordinator_epoch, partitions):
        return {tp: ErrorCode.not_leader_or_follower for tp in partitions}

    producer.begin_transaction()
    _send(producer, topic, [f"owed-{i}" for i in range(6)])
    coordinator.markers = refused
    try:
        producer.commit_transaction(20)
        assert coordinator.txns[tid].state is TxnState.PREPARE_COMMIT
        assert _read_committed(cluster, topic) == []  # no marker: the last stable offsets stay
        new = next(b for b in cluster.node_ids if b != old)
        cluster.move_coordinator(transactional_id=tid, broker=new)
        _wait_completed(cluster, tid)
    finally:
        coordinator.markers = real
    assert sorted(_read_committed(cluster, topic)) == sorted(f"owed-{i}" for i in range(6))
    producer.begin_transaction()  # and the producer goes on with the new coordinator
    _send(producer, topic, ["after"])
    producer.commit_transaction(20)
    assert "after" in _read_committed(cluster, topic)


def test_the_coordinator_killed_loses_no_acknowledged_transaction_state(cluster):
    """State writes wait for the ISR: after a kill -9 of the coordinator's broker, the new
    coordinator knows the producer's committed transaction and its epoch, so the producer goes on
    (a lost write would make its next request fail as an unknown producer id mapping)."""
    topic, tid = _topic(cluster), f"tid-{uuid.uuid4().hex[:6]}"
    producer = _producer(cluster, tid)
    producer.begin_transaction()
    _send(producer, topic, [f"before-{i}" for i in range(6)])
    producer.commit_transaction(20)
    victim = _coordinator(cluster)
    cluster.stop(victim, kill=True)
    try:
        _wait(lambda: _coordinator(cluster) not in (victim, -1), what="a new coordinator")
        producer.begin_transaction()
        _send(producer, topic, [f"after-{i}" for i in range(6)])
        producer.commit_transaction(30)
        _wait_completed(cluster, tid)
        got = _read_committed(cluster, topic)
    finally:
        cluster.start(victim)
    assert sorted(got) == sorted(f"{n}-{i}" for n in ("before", "after") for i in range(6))


def test_java_transactions_version_2_over_three_leaders_and_a_coordinator_move(cluster, java):
    """Java 4.4 on transactions version 2: its Produce v12 batches add their partitions, each leader
    asking the coordinator's broker (an AddPartitionsToTxn add in process), and EndTxn v5 bumps the
    epoch at every end. The coordinator moves between the two runs; a read_committed consumer sees
    exactly the committed records of both (the records' values are their keys)."""
    topic, tid = _topic(cluster), f"jtid-{uuid.uuid4().hex[:6]}"
    first = java.call(["txn-produce", cluster.bootstrap, topic, PARTITIONS, tid, "commit:6,abort:3,commit:3"])
    old = _coordinator(cluster)
    cluster.move_coordinator(transactional_id=tid, broker=next(b for b in cluster.node_ids if b != old))
    second = java.call(["txn-produce", cluster.bootstrap, topic, PARTITIONS, tid, "commit:3"])
    events = [(e["event"], e["step"]) for e in first + second if e["type"] == "txn"]
    assert [e for e in events if e[0] != "initialized"] == [
        ("commit", f"{tid}/commit0"), ("abort", f"{tid}/abort1"), ("commit", f"{tid}/commit2"),
        ("commit", f"{tid}/commit0")], events
    _wait_completed(cluster, tid)
    committed = sorted(_read_committed(cluster, topic))
    assert committed == sorted([f"{tid}/commit0-{i}" for i in range(6)] + [f"{tid}/commit2-{i}" for i in range(3)]
                               + [f"{tid}/commit0-{i}" for i in range(3)])
    coordinator = cluster.broker(_coordinator(cluster))
    versions = {api: v for (api, v) in coordinator.metrics.request_versions if api == "end_txn"}
    assert versions == {"end_txn": 5}
