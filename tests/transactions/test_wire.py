"""Transactions over the wire, data side (KIP-98): transactional batches produced by hand, markers
through `Broker.write_txn_markers` (in process) and WriteTxnMarkers (key 27), then Fetch and
ListOffsets at both isolation levels, real consumers (confluent-kafka, Java) with
isolation.level=read_committed / read_uncommitted, DescribeProducers through Java's Admin, the
long poll woken by a marker, and a kill -9 with a transaction open.

The partition every test builds (`write_scenario`), offsets on the left:

    0 A txn "a0" | 1 plain "p1" | 2 B txn "b0" | 3 A txn "a1" | 4 ABORT A | 5 plain "p2"
    6 COMMIT B   | 7 C txn "c0" (left open)    | 8 plain "p3"

read_uncommitted sees every data record; read_committed sees p1, b0, p2 (below the LSO, 7, and not
aborted), then c0 and p3 once C commits.
"""

from __future__ import annotations

import threading
import time

import pytest

from minibroker.admin_client import AdminClient
from minibroker.testing import running_broker
from minibroker.txn_markers import TxnMarker
from minibroker.protocol.errors import ErrorCode
from minibroker.protocol.records import decode_records, iter_headers
from tests.support.broker_process import BrokerProcess
from tests.support.wire import create_topic_with
from tests.support.batches import make_batch
from tests.support.wire import produced

A, B, C = 9001, 9002, 9003
# These tests drive the data side alone, with made-up producer ids and markers written by hand: the
# coordinator's KIP-890 check is off, as Kafka's transaction.partition.verification.enable=false
# turns it off (tests/transactions/test_coordinator_wire.py has the whole flow with it on).
NO_VERIFICATION = {"transaction.partition.verification.enable": "false"}


@pytest.fixture
def broker(tmp_path):
    with running_broker(tmp_path / "data", **{k.replace(".", "_"): v for k, v in NO_VERIFICATION.items()}) as running:
        yield running
UNCOMMITTED = [b"a0", b"p1", b"b0", b"a1", b"p2", b"c0", b"p3"]
COMMITTED_BEFORE = [b"p1", b"b0", b"p2"]
COMMITTED_AFTER = [b"p1", b"b0", b"p2", b"c0", b"p3"]


def produce(client, topic, value, pid=-1, seq=-1, txn_id=None, epoch=0):
    batch = make_batch([(b"k", value)], timestamp_ms=int(time.time() * 1000), producer_id=pid,
                       producer_epoch=epoch if pid >= 0 else -1, base_sequence=seq, transactional=txn_id is not None)
    p = produced(client, topic, batch, transactional_id=txn_id)
    return p.error_code, p.base_offset


def fetch(client, topic, offset, isolation, version=11, topic_id=None, max_wait=0, min_bytes=0):
    partition = {"partition": 0, "current_leader_epoch": -1, "fetch_offset": offset, "last_fetched_epoch": -1,
                 "log_start_offset": -1, "partition_max_bytes": 1 << 20}
    response = client.call(1, version=version, body={
        "replica_id": -1, "replica_state": {"replica_id": -1, "replica_epoch": -1}, "cluster_id": None,
        "max_wait": max_wait, "min_bytes": min_bytes, "max_bytes": 1 << 20, "isolation_level": isolation,
        "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
        "topics": [{"topic": topic, "topic_id": topic_id, "partitions": [partition]}]})
    return response.responses[0].partitions[0]


def values(records: bytes, aborted=()) -> list[bytes]:
    """The data records a consumer keeps: control batches skipped, aborted transactions dropped
    (as a client applies the aborted list: a producer's records from its first offset to its marker)."""
    out = []
    aborted = sorted(((a.first_offset, a.producer_id) for a in aborted))
    dropping: set[int] = set()
    for header in iter_headers(records):
        while aborted and aborted[0][0] <= header.base_offset:
            dropping.add(aborted.pop(0)[1])
        if header.is_control:
            dropping.discard(header.producer_id)
            continue
        if header.producer_id in dropping and header.is_transactional:
            continue
        out += [v for _, _, _, v in decode_records(records[header.position:header.position + header.size])]
    return out


def list_latest(client, topic, isolation):
    response = client.call(2, version=7, body={"replica_id": -1, "isolation_level": isolation, "topics": [
        {"name": topic, "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}]}]})
    return response.topics[0].partitions[0].offset


def write_scenario(running, client, topic):
    assert produce(client, topic, b"a0", A, 0, "ta") == (ErrorCode.none, 0)
    assert produce(client, topic, b"p1") == (ErrorCode.none, 1)
    assert produce(client, topic, b"b0", B, 0, "tb") == (ErrorCode.none, 2)
    assert produce(client, topic, b"a1", A, 1, "ta") == (ErrorCode.none, 3)
    assert running.in_broker(running.broker.write_txn_markers, [TxnMarker(A, 0, 0, False, [(topic, 0)])]) == [
        {(topic, 0): ErrorCode.none}]
    assert produce(client, topic, b"p2") == (ErrorCode.none, 5)
    assert running.in_broker(running.broker.write_txn_markers, [(B, 0, 0, True, [(topic, 0)])]) == [
        {(topic, 0): ErrorCode.none}]
    assert produce(client, topic, b"c0", C, 0, "tc") == (ErrorCode.none, 7)
    assert produce(client, topic, b"p3") == (ErrorCode.none, 8)


@pytest.fixture
def scenario(broker, admin, unique):
    topic = unique("txn")
    create_topic_with(admin, topic)
    write_scenario(broker, admin, topic)
    return topic


def test_fetch_read_committed_stops_at_the_lso_and_lists_the_aborted_transaction(broker, admin, scenario):
    topic = scenario
    topic_id = admin.call(3, version=12, body={"topics": [{"name": topic, "topic_id": None}],
                                               "allow_auto_topic_creation": False,
                                               "include_topic_authorized_operations": False}).topics[0].topic_id
    for version in (4, 11, 12, 16):
        kwargs = {"version": version, "topic_id": topic_id} if version >= 13 else {"version": version}
        committed = fetch(admin, topic if version < 13 else None, 0, 1, **kwargs)
        assert (committed.high_watermark, committed.last_stable_offset) == (9, 7), version
        assert [(a.producer_id, a.first_offset) for a in committed.aborted_transactions] == [(A, 0)]
        assert [h.base_offset for h in iter_headers(committed.records)] == list(range(7))
        assert values(committed.records, committed.aborted_transactions) == COMMITTED_BEFORE
        uncommitted = fetch(admin, topic if version < 13 else None, 0, 0, **kwargs)
        assert (uncommitted.high_watermark, uncommitted.last_stable_offset) == (9, 7), version
        assert uncommitted.aborted_transactions is None
        assert values(uncommitted.records) == UNCOMMITTED
    # From the LSO, read_committed has nothing yet; above the aborted range, no aborted entry.
    assert fetch(admin, topic, 7, 1).records == b""
    assert list(fetch(admin, topic, 5, 1).aborted_transactions) == []
    assert list_latest(admin, topic, 1) == 7 and list_latest(admin, topic, 0) == 9
    # C commits: everything is stable.
    assert broker.in_broker(broker.broker.write_txn_markers, [(C, 0, 0, True, [(topic, 0)])])[0][(topic, 0)] == 0
    committed = fetch(admin, topic, 0, 1)
    assert (committed.high_watermark, committed.last_stable_offset) == (10, 10)
    assert values(committed.records, committed.aborted_transactions) == COMMITTED_AFTER
    assert list_latest(admin, topic, 1) == 10


def test_transaction_rules_on_produce_and_the_coordinators_seam(broker, admin, unique):
    topic = unique("txn-rules")
    create_topic_with(admin, topic)
    assert produce(admin, topic, b"x", A, 0, "ta") == (ErrorCode.none, 0)
    # A non-transactional batch while the transaction is open.
    assert produce(admin, topic, b"y", A, 1)[0] == ErrorCode.invalid_txn_state
    refused = []

    class Refuse:
        async def verify_produce(self, transactional_id, producer_id, producer_epoch, topic_name, partition, version):
            refused.append((transactional_id, producer_id, producer_epoch, topic_name, partition, version))
            return ErrorCode.invalid_txn_state

    services = broker.broker.services  # what the handlers reach (minibroker.context)
    default = services.txns
    services.txns = Refuse()
    try:
        assert produce(admin, topic, b"z", A, 1, "ta")[0] == ErrorCode.invalid_txn_state
        assert produce(admin, topic, b"plain")[0] == ErrorCode.none  # only transactional batches are asked
    finally:
        services.txns = default
    assert refused == [("ta", A, 0, topic, 0, 9)]  # with the request's version
    assert produce(admin, topic, b"z", A, 1, "ta") == (ErrorCode.none, 2)


def test_write_txn_markers_over_the_wire_checks_epochs(broker, admin, unique):
    topic = unique("txn-markers")
    create_topic_with(admin, topic)
    assert produce(admin, topic, b"x", A, 0, "ta", epoch=3) == (ErrorCode.none, 0)

    def markers(epoch, coordinator_epoch, commit=True, name=topic):
        response = admin.call(27, version=1, body={"markers": [{
            "producer_id": A, "producer_epoch": epoch, "transaction_result": commit, "coordinator_epoch": coordinator_epoch,
            "topics": [{"name": name, "partition_indexes": [0]}]}]})
        return response.markers[0].topics[0].partitions[0].error_code

    assert markers(2, 0) == ErrorCode.invalid_producer_epoch
    assert markers(3, 5, commit=False) == ErrorCode.none
    assert markers(3, 4) == ErrorCode.transaction_coordinator_fenced
    assert markers(3, 5, name=unique("missing")) == ErrorCode.unknown_topic_or_partition
    part = fetch(admin, topic, 0, 1)
    assert part.last_stable_offset == 2 and [(a.producer_id, a.first_offset) for a in part.aborted_transactions] == [(A, 0)]
    headers = list(iter_headers(part.records))
    assert [(h.base_offset, h.is_control, h.is_transactional, h.producer_epoch) for h in headers] == [
        (0, False, True, 3), (1, True, True, 3)]


def test_a_read_committed_long_poll_is_woken_by_the_marker(broker, admin, unique):
    topic = unique("txn-poll")
    create_topic_with(admin, topic)
    assert produce(admin, topic, b"x", A, 0, "ta") == (ErrorCode.none, 0)
    purgatory = broker.broker.fetch_purgatory
    expired_before = purgatory.expired
    result = {}

    def poll():
        with AdminClient(broker.bootstrap) as client:
            result["part"] = fetch(client, topic, 0, 1, max_wait=60_000, min_bytes=1)

    thread = threading.Thread(target=poll)
    thread.start()
    deadline = time.monotonic() + 30
    while broker.in_broker(purgatory.watched, (topic, 0)) == 0 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert broker.in_broker(purgatory.watched, (topic, 0)) == 1  # waiting: the record is not stable
    broker.in_broker(broker.broker.write_txn_markers, [(A, 0, 0, True, [(topic, 0)])])
    thread.join(60)
    assert purgatory.expired == expired_before  # completed by the marker, not by its deadline
    assert values(result["part"].records) == [b"x"] and result["part"].last_stable_offset == 2


def test_confluent_kafka_consumers_see_committed_or_all_records(broker, scenario):
    from confluent_kafka import Consumer, TopicPartition

    def consume(isolation):
        consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"g-{scenario}-{isolation}",
                             "enable.auto.commit": False, "isolation.level": isolation,
                             "enable.partition.eof": True})
        try:
            consumer.assign([TopicPartition(scenario, 0, 0)])
            got, deadline = [], time.monotonic() + 60
            while time.monotonic() < deadline:
                msg = consumer.poll(0.5)
                if msg is None:
                    continue
                if msg.error():
                    if msg.error().code() == -191:  # _PARTITION_EOF: at the end (the LSO for read_committed)
                        return got
                    raise RuntimeError(msg.error())
                got.append(msg.value())
            raise AssertionError(f"no end of partition after {got}")
        finally:
            consumer.close()

    assert consume("read_uncommitted") == UNCOMMITTED
    assert consume("read_committed") == COMMITTED_BEFORE
    broker.in_broker(broker.broker.write_txn_markers, [(C, 0, 0, True, [(scenario, 0)])])
    assert consume("read_committed") == COMMITTED_AFTER


def test_java_consumers_list_offsets_and_describe_producers(broker, scenario, java):
    hexes = lambda values: [v.hex() for v in values]  # noqa: E731
    out = java.run(["consume-isolated", broker.bootstrap, scenario, "read_committed"],
                   ["consume-isolated", broker.bootstrap, scenario, "read_uncommitted"],
                   ["describe-producers", broker.bootstrap, scenario, 0])
    runs, current = [], []
    for line in out:
        if line["type"] == "record":
            current.append(line["value"])
        elif line["type"] == "end":
            runs.append((current, line["end_offset"]))
            current = []
    assert runs == [(hexes(COMMITTED_BEFORE), 7), (hexes(UNCOMMITTED), 9)]
    producers = {line["producer_id"]: line for line in out if line["type"] == "producer"}
    assert set(producers) == {A, B, C}
    assert (producers[C]["txn_start_offset"], producers[C]["last_sequence"], producers[C]["epoch"]) == (7, 0, 0)
    assert producers[A]["txn_start_offset"] == -1 and producers[A]["coordinator_epoch"] == 0
    assert producers[A]["last_sequence"] == 1 and producers[A]["last_timestamp"] > 0


@pytest.mark.parametrize("mode", ["lean", "kafka"])
def test_kill_9_with_a_transaction_open_keeps_the_lso_at_its_first_offset(tmp_path, unique, mode):
    topic = unique("txn-kill")
    process = BrokerProcess(tmp_path / "data", log_level="WARNING", overrides={"producer.state.mode": mode, **NO_VERIFICATION})
    try:
        process.start()
        with AdminClient(process.bootstrap) as client:
            create_topic_with(client, topic)
            assert produce(client, topic, b"p0") == (ErrorCode.none, 0)
            assert produce(client, topic, b"a0", A, 0, "ta") == (ErrorCode.none, 1)
            assert produce(client, topic, b"b0", B, 0, "tb") == (ErrorCode.none, 2)
            response = client.call(27, version=1, body={"markers": [{
                "producer_id": B, "producer_epoch": 0, "transaction_result": False, "coordinator_epoch": 0,
                "topics": [{"name": topic, "partition_indexes": [0]}]}]})
            assert response.markers[0].topics[0].partitions[0].error_code == ErrorCode.none
            assert produce(client, topic, b"p1") == (ErrorCode.none, 4)
        process.kill()
        process.start()
        with AdminClient(process.bootstrap) as client:
            part = fetch(client, topic, 0, 1)
            assert (part.high_watermark, part.last_stable_offset) == (5, 1)
            assert values(part.records) == [b"p0"] and list_latest(client, topic, 1) == 1
            # The open transaction survived: a plain batch of its producer is still refused, and
            # its commit makes everything stable, B's aborted record still dropped.
            assert produce(client, topic, b"x", A, 1)[0] == ErrorCode.invalid_txn_state
            response = client.call(27, version=1, body={"markers": [{
                "producer_id": A, "producer_epoch": 0, "transaction_result": True, "coordinator_epoch": 0,
                "topics": [{"name": topic, "partition_indexes": [0]}]}]})
            assert response.markers[0].topics[0].partitions[0].error_code == ErrorCode.none
            part = fetch(client, topic, 0, 1)
            assert part.last_stable_offset == 6
            assert [(a.producer_id, a.first_offset) for a in part.aborted_transactions] == [(B, 2)]
            assert values(part.records, part.aborted_transactions) == [b"p0", b"a0", b"p1"]
    finally:
        process.stop()


def test_an_in_process_restart_keeps_transactions_from_the_snapshot(tmp_path, unique):
    """A clean shutdown snapshots producer state at the log end: the open transaction comes back
    from the snapshot's current_txn_first_offset, with no log to replay."""
    topic = unique("txn-restart")
    with running_broker(tmp_path / "data", transaction_partition_verification_enable="false") as running:
        with AdminClient(running.bootstrap) as client:
            create_topic_with(client, topic)
            write_scenario(running, client, topic)
    with running_broker(tmp_path / "data", transaction_partition_verification_enable="false") as running:
        with AdminClient(running.bootstrap) as client:
            part = fetch(client, topic, 0, 1)
            assert (part.high_watermark, part.last_stable_offset) == (9, 7)
            assert values(part.records, part.aborted_transactions) == COMMITTED_BEFORE
