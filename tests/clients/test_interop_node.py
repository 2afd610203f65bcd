"""kafkajs (Node) against minibroker, through tests/node/client.js (its npm install checked once per
session, see tests/support/drivers.py).

- kafkajs's admin creates the topic; its idempotent producer writes 1,000 keyed records with headers
  (DescribeProducers shows one producer per partition with the last sequence); librdkafka reads them
  byte for byte;
- kafkajs has no assign(): its consumers are group members. One reads 600 records from the earliest
  offset, commits and leaves; a second reads the other 400 from the committed offsets (none twice,
  none missed, byte for byte); admin.describeGroups and fetchOffsets then show an Empty group at the
  log end;
- a group of two members shares four partitions; records produced once every partition is owned
  are read exactly once, by both members;
- a transactional producer commits and aborts; a kafkajs consumer (read_committed, its default) sees
  only the committed records, a read_uncommitted one all of them.
"""

from __future__ import annotations

import pytest

from tests.support.clients import Confluent, expected_records, normalise
from tests.support.drivers import (ApiLog, active_producers, committed_offsets, driver_messages, of_type,
                                   records)

pytestmark = pytest.mark.interop

PARTITIONS = 3
COUNT = 1000


@pytest.fixture
def api_log(broker):
    log = ApiLog(b"mb-kafkajs")
    log.watch(broker)
    yield log
    print(f"\nkafkajs sent: {log}")


def test_kafkajs_produce_and_group_consume(kafkajs, broker, admin, unique, api_log):
    topic, group = unique("node"), unique("node-group")
    out = kafkajs.run(["create-topic", broker.bootstrap, topic, PARTITIONS],
                      ["produce", broker.bootstrap, topic, PARTITIONS, COUNT],
                      ["group-consume", broker.bootstrap, topic, group, 600],
                      ["group-consume", broker.bootstrap, topic, group, COUNT - 600],
                      ["describe-group", broker.bootstrap, group, topic])
    assert [(c["topic"], c["partitions"], c["created"]) for c in of_type(out, "created")] == [(topic, PARTITIONS, True)]
    expected = expected_records(driver_messages(COUNT, PARTITIONS))
    got = of_type(out, "record")
    assert len(got) == COUNT and normalise(records(got)) == expected
    assert [(g["state"], g["protocol_type"], g["members"]) for g in of_type(out, "group")] == [("Empty", "consumer", 0)]
    assert sorted((o["partition"], o["offset"]) for o in of_type(out, "offset")) == [(0, 334), (1, 333), (2, 333)]
    assert committed_offsets(admin, group, topic, PARTITIONS) == {0: 334, 1: 333, 2: 333}
    assert normalise(Confluent().consume(broker.bootstrap, topic, PARTITIONS, COUNT)) == expected
    producers = active_producers(admin, topic, PARTITIONS)
    assert {p: [(s.producer_epoch, s.last_sequence) for s in ps] for p, ps in producers.items()} == {
        0: [(0, 333)], 1: [(0, 332)], 2: [(0, 332)]}
    assert {"init_producer_id", "join_group", "sync_group", "offset_commit", "describe_groups"} <= set(api_log.seen)


def test_kafkajs_consumer_group_of_two(kafkajs, broker, admin, unique, api_log):
    topic, group = unique("node-two"), unique("node-two-group")
    count, partitions = 400, 4
    out = kafkajs.run(["create-topic", broker.bootstrap, topic, partitions],
                      ["group", broker.bootstrap, topic, group, 2, partitions, count])
    assert len(of_type(out, "stable")) == 1
    got = of_type(out, "record")
    assert len(got) == count and normalise(records(got)) == expected_records(driver_messages(count, partitions))
    readers: dict[int, set] = {}
    for line in got:
        readers.setdefault(line["partition"], set()).add(line["member"])
    assert sorted(readers) == list(range(partitions)) and all(len(m) == 1 for m in readers.values())
    assert set().union(*readers.values()) == {"0", "1"}
    assert committed_offsets(admin, group, topic, partitions) == {p: count // partitions for p in range(partitions)}


def test_kafkajs_transactional_producer(kafkajs, broker, unique, api_log):
    topic, txn_id = unique("node-txn"), unique("node-txn-id")
    out = kafkajs.run(["create-topic", broker.bootstrap, topic, 1],
                      ["txn-produce", broker.bootstrap, topic, txn_id, "commit:3,abort:2,commit:1"],
                      ["group-consume", broker.bootstrap, topic, unique("node-rc"), 4],
                      ["group-consume", broker.bootstrap, topic, unique("node-ru"), 6, "read_uncommitted"])
    assert [(t["outcome"], t["records"]) for t in of_type(out, "txn")] == [("commit", 3), ("abort", 2), ("commit", 1)]
    got = [(r[1], r[2], r[3]) for r in records(of_type(out, "record"))]
    committed = [(0, b"t0-0", b"commit-0-0"), (1, b"t0-1", b"commit-0-1"), (2, b"t0-2", b"commit-0-2"),
                 (7, b"t2-0", b"commit-2-0")]  # offset 3 is the first commit marker, 6 the abort marker
    aborted = [(4, b"t1-0", b"abort-1-0"), (5, b"t1-1", b"abort-1-1")]
    assert sorted(got[:4]) == committed
    assert sorted(got[4:]) == sorted(committed + aborted)
    assert {"add_partitions_to_txn", "end_txn"} <= set(api_log.seen)
