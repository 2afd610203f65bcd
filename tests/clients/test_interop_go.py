"""The Go clients people use against minibroker: franz-go (kgo, kadm), IBM's sarama and segmentio's
kafka-go, through the driver in tests/go/ (built once per session, see tests/support/drivers.py).

- each client's own admin call creates the topic (franz-go, sarama; sarama both at the newest
  versions it speaks and at its default Config.Version); its producer writes 1,000
  keyed records with headers (franz-go and sarama idempotently: DescribeProducers shows one producer
  per partition with the last sequence; kafka-go's producer is not idempotent and shows none), its
  consumer reads them back byte for byte by partition, and librdkafka reads them too;
- one member of a consumer group reads 600, commits and leaves; a second reads the other 400 from
  the committed offsets (none twice, none missed), and the committed offsets are the log end;
- a group of two members (franz-go classic and KIP-848, sarama classic) shares four partitions;
  records produced once every partition is owned are read exactly once, by both members;
- transactional producers (franz-go, sarama): committed and aborted transactions, read_committed
  consumers (the client's own and librdkafka) see only the committed records, at the offsets Kafka
  gives them (the commit and abort markers take one offset each);
- franz-go's GroupTransactSession: consume-transform-produce with the group's offsets committed in
  the transaction (AddOffsetsToTxn, TxnOffsetCommit);
- each Go client's gzip, snappy, lz4 and zstd batches, stored with that codec;
- franz-go's kadm admin calls, one after another, each answered without error.
Each test runs its steps in one driver process and prints which API versions the client sent.
"""

from __future__ import annotations

import pytest

from minibroker.protocol.records import iter_headers
from tests.support.clients import Confluent, expected_records, normalise
from tests.support.drivers import (ApiLog, active_producers, committed_offsets, driver_messages, of_type,
                                   records)

pytestmark = pytest.mark.interop

CLIENT_IDS = {"franz": b"mb-franz", "sarama": b"mb-sarama", "sarama-default": b"mb-sarama", "kafkago": b"mb-kafkago"}
PARTITIONS = 3
COUNT = 1000


@pytest.fixture
def api_log(request):
    logs: list[tuple[str, ApiLog]] = []

    def watch(broker, client):
        log = ApiLog(CLIENT_IDS[client])
        logs.append((client, log.watch(broker) and log))
        return log

    yield watch
    for client, log in logs:
        print(f"\n{client} sent: {log}")


@pytest.mark.parametrize("client", ["franz", "sarama", "sarama-default", "kafkago"])
def test_go_produce_consume_and_group_commits(go_clients, broker, admin, unique, api_log, client):
    topic, group = unique(f"go-{client}"), unique(f"go-{client}-group")
    log = api_log(broker, client)
    creator = "franz" if client == "kafkago" else client  # kafka-go has no admin client to speak of
    out = go_clients.run([creator, "create-topic", broker.bootstrap, topic, PARTITIONS],
                         [client, "produce", broker.bootstrap, topic, PARTITIONS, COUNT],
                         [client, "consume", broker.bootstrap, topic, PARTITIONS, COUNT],
                         [client, "group-consume", broker.bootstrap, topic, group, 600],
                         [client, "group-consume", broker.bootstrap, topic, group, COUNT - 600])
    assert [(c["topic"], c["partitions"]) for c in of_type(out, "created")] == [(topic, PARTITIONS)]
    expected = expected_records(driver_messages(COUNT, PARTITIONS))
    consumed = [line for line in out if line["type"] == "record"]
    if client == "kafkago":
        # kafka-go's Reader gives an empty value as nil: it does not tell empty from null (franz-go and
        # librdkafka read the same records' empty values as empty, below).
        for line in consumed:
            line["value"] = "" if line["value"] is None else line["value"]
    assigned, grouped = consumed[:COUNT], consumed[COUNT:]
    assert normalise(records(assigned)) == expected
    # The group's two members together read every record once: the second began at the first's commits.
    assert len(grouped) == COUNT
    assert normalise(records(grouped)) == expected
    assert committed_offsets(admin, group, topic, PARTITIONS) == {0: 334, 1: 333, 2: 333}
    assert normalise(Confluent().consume(broker.bootstrap, topic, PARTITIONS, COUNT)) == expected
    producers = active_producers(admin, topic, PARTITIONS)
    if client == "kafkago":
        assert producers == {0: [], 1: [], 2: []}  # kafka-go's Writer is not idempotent
    else:
        # One idempotent producer per partition, its last sequence that of the partition's last record.
        assert {p: [(s.producer_epoch, s.last_sequence) for s in ps] for p, ps in producers.items()} == {
            0: [(0, 333)], 1: [(0, 332)], 2: [(0, 332)]}
        assert len({s.producer_id for ps in producers.values() for s in ps}) == 1
        produced = sorted((line["index"], line["partition"], line["offset"]) for line in of_type(out, "produced"))
        assert produced == [(i, i % PARTITIONS, i // PARTITIONS) for i in range(COUNT)]
    assert "produce" in log.seen and "fetch" in log.seen and "offset_commit" in log.seen


@pytest.mark.parametrize("client,protocol", [("franz", "classic"), ("franz", "consumer"), ("sarama", "classic")])
def test_go_consumer_group_of_two(go_clients, broker, admin, unique, api_log, client, protocol):
    topic, group = unique(f"go-{client}-two"), unique(f"go-{client}-{protocol}")
    log = api_log(broker, client)
    count, partitions = 400, 4
    out = go_clients.run([client, "create-topic", broker.bootstrap, topic, partitions],
                         [client, "group", broker.bootstrap, topic, group, 2, partitions, count, protocol])
    assert len(of_type(out, "stable")) == 1
    got = of_type(out, "record")
    assert len(got) == count and normalise(records(got)) == expected_records(driver_messages(count, partitions))
    readers = {}
    for line in got:
        readers.setdefault(line["partition"], set()).add(line["member"])
    # Both members read; each partition by one member (the group was stable before the records came).
    assert sorted(readers) == list(range(partitions)) and all(len(m) == 1 for m in readers.values())
    assert set().union(*readers.values()) == {"0", "1"}
    assert committed_offsets(admin, group, topic, partitions) == {p: count // partitions for p in range(partitions)}
    if protocol == "consumer":  # KIP-848: the broker assigns, over ConsumerGroupHeartbeat
        assert "consumer_group_heartbeat" in log.seen and "join_group" not in log.seen
    else:
        assert "join_group" in log.seen and "sync_group" in log.seen and "consumer_group_heartbeat" not in log.seen


@pytest.mark.parametrize("client", ["franz", "sarama"])
def test_go_transactional_producer(go_clients, broker, unique, api_log, client):
    topic, txn_id = unique(f"go-{client}-txn"), unique(f"go-{client}-txn-id")
    log = api_log(broker, client)
    out = go_clients.run([client, "create-topic", broker.bootstrap, topic, 1],
                         [client, "txn-produce", broker.bootstrap, topic, txn_id, "commit:3,abort:2,commit:1"],
                         [client, "consume", broker.bootstrap, topic, 1, 4, "read_committed"],
                         [client, "consume", broker.bootstrap, topic, 1, 6])
    assert [(t["outcome"], t["records"]) for t in of_type(out, "txn")] == [("commit", 3), ("abort", 2), ("commit", 1)]
    got = of_type(out, "record")
    committed = [(0, b"t0-0", b"commit-0-0"), (1, b"t0-1", b"commit-0-1"), (2, b"t0-2", b"commit-0-2"),
                 (7, b"t2-0", b"commit-2-0")]  # offset 3 is the first commit marker, 6 the abort marker
    aborted = [(4, b"t1-0", b"abort-1-0"), (5, b"t1-1", b"abort-1-1")]

    def seen(lines):
        return sorted((r[1], r[2], r[3]) for r in records(lines))

    assert seen(got[:4]) == committed
    assert seen(got[4:]) == sorted(committed[:3] + aborted + committed[3:])  # read_uncommitted sees all
    # librdkafka reads the Go client's transactions as committed too. (kafka-go's Reader is left out:
    # it neither hides the markers nor drops aborted records, read_committed or not.)
    librdkafka = Confluent().consume(broker.bootstrap, topic, 1, 4, **{"isolation.level": "read_committed"})
    assert sorted((offset, key, value) for _, offset, key, value, _ in librdkafka) == committed
    assert {"init_producer_id", "add_partitions_to_txn", "end_txn"} <= set(log.seen)


def test_franz_go_exactly_once_consume_transform_produce(go_clients, broker, admin, unique, api_log):
    source, sink = unique("go-eos-in"), unique("go-eos-out")
    group, txn_id = unique("go-eos-group"), unique("go-eos-txn")
    log = api_log(broker, "franz")
    count = 200
    out = go_clients.run(["franz", "create-topic", broker.bootstrap, source, 2],
                         ["franz", "create-topic", broker.bootstrap, sink, 1],
                         ["franz", "produce", broker.bootstrap, source, 2, count],
                         ["franz", "eos", broker.bootstrap, source, sink, group, txn_id, count],
                         ["franz", "consume", broker.bootstrap, sink, 1, count, "read_committed"])
    txns = of_type(out, "txn")
    assert txns and all(t["committed"] for t in txns) and sum(t["records"] for t in txns) == count
    transformed = [line for line in of_type(out, "record") if line["topic"] == sink]
    expected = sorted((m.key, m.value[::-1]) for m in driver_messages(count, 2))
    assert sorted((bytes.fromhex(r["key"]), bytes.fromhex(r["value"])) for r in transformed) == expected
    # The group's offsets were committed in the transactions, to the end of the input.
    assert committed_offsets(admin, group, source, 2) == {0: count // 2, 1: count // 2}
    # On transactions version 2 (the broker finalizes transaction.version 2, KIP-890 part 2)
    # franz-go sends no AddOffsetsToTxn: TxnOffsetCommit v5 adds the offsets partition, EndTxn v5
    # bumps the epoch.
    assert {"txn_offset_commit", "end_txn"} <= set(log.seen) and "add_offsets_to_txn" not in log.seen
    versions = broker.broker.metrics.request_versions
    assert versions[("end_txn", 5)] > 0 and versions[("txn_offset_commit", 5)] > 0


@pytest.mark.parametrize("client", ["franz", "sarama", "kafkago"])
def test_go_compressed_batches(go_clients, broker, unique, client):
    """Each codec's batches (gzip, snappy, lz4, zstd), as each Go client compresses them, are stored and
    read back byte for byte by the client and by librdkafka."""
    codecs = ("gzip", "snappy", "lz4", "zstd")
    topics = {codec: unique(f"go-{client}-{codec}") for codec in codecs}
    count, partitions = 300, 2
    steps = []
    for codec, topic in topics.items():
        steps += [["franz", "create-topic", broker.bootstrap, topic, partitions],
                  [client, "produce", broker.bootstrap, topic, partitions, count, 0, codec],
                  [client, "consume", broker.bootstrap, topic, partitions, count]]
    out = go_clients.run(*steps)
    expected = expected_records(driver_messages(count, partitions))
    for codec, topic in topics.items():
        got = [line for line in of_type(out, "record") if line["topic"] == topic]
        if client == "kafkago":  # an empty value read as nil (see above)
            for line in got:
                line["value"] = "" if line["value"] is None else line["value"]
        assert normalise(records(got)) == expected, codec
        assert normalise(Confluent().consume(broker.bootstrap, topic, partitions, count)) == expected, codec
    # The batches are stored compressed as sent (the codec in their attributes), not recompressed.
    ids = {"gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
    for codec, topic in topics.items():
        stored = {header.compression for p in range(partitions)
                  for segment in sorted((broker.data_dir / f"{topic}-{p}").glob("*.log"))
                  for header in iter_headers(segment.read_bytes())}
        assert stored == {ids[codec]}, codec


def test_franz_go_admin_calls(go_clients, broker, unique, api_log):
    """kadm's admin calls, one after another, each answered without error and as Kafka answers them."""
    topic, spare, group, txn_id = unique("go-admin"), unique("go-admin-spare"), unique("go-admin-group"), unique("go-txn")
    log = api_log(broker, "franz")
    out = go_clients.run(["franz", "create-topic", broker.bootstrap, topic, 2],
                         ["franz", "create-topic", broker.bootstrap, spare, 1],
                         ["franz", "produce", broker.bootstrap, topic, 2, 20],
                         ["franz", "group-consume", broker.bootstrap, topic, group, 20],
                         ["franz", "txn-produce", broker.bootstrap, topic, txn_id, "commit:1"],
                         ["franz", "admin", broker.bootstrap, topic, group, txn_id, spare])
    calls = {line["call"]: line for line in of_type(out, "admin")}
    assert {name: line["error"] for name, line in calls.items() if line["error"]} == {}
    result = {name: line["result"] for name, line in calls.items()}
    assert result["ListBrokers"] == {"brokers": 1}
    assert result["ListTopics"] == {"has_topic": True, "partitions": 2}
    assert result["DescribeTopicConfigs"] == {"retention.ms": "86400000", "source": "DYNAMIC_TOPIC_CONFIG"}
    # Partition 0: records 0-9, the transaction's record at 10, its commit marker at 11.
    assert result["ListStartOffsets"] == {"offsets": {"0": 0, "1": 0}}
    assert result["ListEndOffsets"] == {"offsets": {"0": 12, "1": 10}}
    assert result["ListCommittedOffsets"] == {"offsets": {"0": 12, "1": 10}}  # the last stable offsets
    assert result["DeleteRecords"] == {"low_watermark": 2}
    assert result["ListGroups"] == {"has_group": True, "state": "Empty"}
    assert result["Lag"] == {"total": 2}  # the group read partition 0 to 10; the end is 12
    assert result["FetchOffsets"] == {"partitions": 2}
    assert result["DescribeClientQuotas"] == {"producer_byte_rate": 1024}
    assert result["DescribeUserSCRAMs"] == {"credentials": 1}
    assert result["ListTransactions"] == {"has_txn": True, "state": "CompleteCommit"}
    assert result["DescribeTransactions"] == {"state": "CompleteCommit"}
    assert result["DescribeProducers"] == {"active": 2}  # the idempotent producer and the transactional one
    assert result["DescribeAllLogDirs"] == {"dirs": 1}
    assert {"create_partitions", "delete_records", "delete_groups", "offset_delete", "delete_topics",
            "incremental_alter_configs", "elect_leaders", "describe_log_dirs"} <= set(log.seen)
    topics = broker.in_broker(lambda: {info.name: info.num_partitions for info in broker.broker.logs.topics()})
    assert topics.get(topic) == 3 and spare not in topics  # CreatePartitions added one; DeleteTopics
