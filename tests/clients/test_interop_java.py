"""The real Java client (kafka-clients 4.4.0, the reference implementation) against minibroker.

Java sends the newest versions of everything (Produce v13 with topic ids, Fetch v17/18, Metadata
v13, ApiVersions v5 then v4, JoinGroup v9, OffsetCommit/OffsetFetch v10 ...), so these tests prove
the broker's newest versions against the client that defines them:

- the interop story of test_interop_clients: a 3-partition topic created by Java's Admin, 5,000 keyed
  records with headers from Java's idempotent producer (acks=all), read back by assign() from the
  earliest offset byte for byte, by Java and by the Python clients, and again after a restart; and
  Java reads what kafka-python wrote;
- Java's compressed batches (gzip, snappy, lz4, zstd) are stored as sent and read by Java and
  librdkafka;
- a consumer group of two Java consumers (classic protocol): the second member's join rebalances
  the first, every record is read exactly once, and the committed offsets are the log end;
- a KIP-848 consumer group of three Java consumers (group.protocol=consumer) shares six partitions,
  survives one leaving and resumes after a broker restart (KIP-848);
- Admin.alterClientQuotas / describeClientQuotas round trip.

tests/java/MiniClient.java is the Java side, compiled once per session (the `java` fixture, see
tests/support/java_client.py); each test runs its steps in as few JVMs as it can (start-up dominates on 2
cores).
"""

from __future__ import annotations

import json
from collections import defaultdict

import pytest

from minibroker.protocol.messages import peek_api
from tests.support.clients import ALL, KafkaPython, Message
from tests.support.java_client import of_type
from tests.support.clients import expected_records, make_messages, normalise

pytestmark = pytest.mark.interop

PARTITIONS = 3
COUNT = 5000


class ApiVersionLog:
    """Which (API, version) pairs Java's clients sent: the broker's handle_frame, wrapped."""

    def __init__(self):
        self.seen: dict[str, set[int]] = defaultdict(set)

    def watch(self, running):
        broker = running.broker
        original = broker.handle_frame

        async def handle_frame(frame, conn):
            api_key, version, _ = peek_api(frame)
            # Every request header has the client id as an INT16-length string at byte 8.
            length = int.from_bytes(frame[8:10], "big", signed=True)
            if length > 0 and frame[10:10 + length].startswith(b"mb-java"):
                handler = broker.handlers.get(api_key)
                self.seen[handler.name if handler else f"api{api_key}"].add(version)
            return await original(frame, conn)

        broker.handle_frame = handle_frame
        return running

    def __str__(self):
        return ", ".join(f"{name} v{'/'.join(map(str, sorted(v)))}" for name, v in sorted(self.seen.items()))


@pytest.fixture
def versions():
    log = ApiVersionLog()
    yield log
    print(f"\nJava sent: {log}")


def java_messages(count: int) -> list[Message]:
    """The records MiniClient's `produce` sends (the formula in its header comment)."""
    return [
        Message(
            partition=i % PARTITIONS,
            key=b"key-%d" % i,
            value=bytes((i * 131 + j * 29 + (j >> 3)) & 0xFF for j in range(i * 7919 % 301)),
            headers=(("trace", b"%d" % i), ("origin", (i * 2654435761 & 0xFFFFFFFF).to_bytes(4, "big"))),
        )
        for i in range(count)
    ]


def records(lines, topic=None):
    """MiniClient's record lines as the Record tuples of tests.support.clients."""
    return [
        (r["partition"], r["offset"],
         None if r["key"] is None else bytes.fromhex(r["key"]),
         None if r["value"] is None else bytes.fromhex(r["value"]),
         tuple((k, bytes.fromhex(v)) for k, v in r["headers"]))
        for r in lines
        if r["type"] == "record" and (topic is None or r["topic"] == topic)
    ]


def test_java_produce_consume_restart_and_cross_read(java, versions, start_broker, unique):
    """Java's Admin, idempotent producer and assign() consumer; Python clients read Java's records
    and Java reads kafka-python's, before and after a broker restart."""
    topic, python_topic = unique("java"), unique("java-from-python")
    expected = expected_records(java_messages(COUNT))
    python_messages = make_messages(seed=11)[:600]
    with start_broker() as broker:
        versions.watch(broker)
        KafkaPython().create_topic(broker.bootstrap, python_topic, PARTITIONS)
        KafkaPython().produce(broker.bootstrap, python_topic, python_messages)
        out = java.run(["create-topic", broker.bootstrap, topic, PARTITIONS],
                       ["produce", broker.bootstrap, topic, COUNT],
                       ["consume", broker.bootstrap, topic, PARTITIONS, COUNT],
                       ["consume", broker.bootstrap, python_topic, PARTITIONS, len(python_messages)])
        assert [(c["topic"], c["partitions"]) for c in of_type(out, "created")] == [(topic, PARTITIONS)]
        produced = of_type(out, "produced")
        assert [(p["partition"], p["offset"]) for p in produced] == [
            (i % PARTITIONS, i // PARTITIONS) for i in range(COUNT)]
        assert normalise(records(out, topic)) == expected
        assert normalise(records(out, python_topic)) == expected_records(python_messages)
        for client in ALL:
            assert normalise(client.consume(broker.bootstrap, topic, PARTITIONS, COUNT)) == expected, client.name
    with start_broker() as broker:
        versions.watch(broker)
        out = java.run(["consume", broker.bootstrap, topic, PARTITIONS, COUNT])
        assert normalise(records(out, topic)) == expected
    # The newest versions, topic ids included, are what Java sent (it would fall back silently).
    assert max(versions.seen["produce"]) == 13
    assert max(versions.seen["fetch"]) >= 17
    assert max(versions.seen["metadata"]) == 13
    # Java 4.4 opens each connection with ApiVersions v5 (its request adds the cluster id and node id
    # the client expects); the broker serves ApiVersions up to v4, so it answers UNSUPPORTED_VERSION
    # with its range, and Java asks again at v4 on the same connection.
    assert versions.seen["api_versions"] == {4, 5}


def test_java_compressed_batches(java, versions, broker, unique):
    """Java's gzip/snappy/lz4/zstd batches are kept as sent: Java and librdkafka read them back."""
    versions.watch(broker)
    count = 1500
    codecs = ["gzip", "snappy", "lz4", "zstd"]
    topics = {codec: unique(f"java-{codec}") for codec in codecs}
    steps = [["create-topic", broker.bootstrap, topics[c], PARTITIONS] for c in codecs]
    steps += [["produce", broker.bootstrap, topics[c], count, c] for c in codecs]
    steps += [["consume", broker.bootstrap, topics[c], PARTITIONS, count] for c in codecs]
    out = java.run(*steps)
    expected = expected_records(java_messages(count))
    confluent = next(c for c in ALL if c.name == "confluent-kafka")
    for codec, topic in topics.items():
        assert normalise(records(out, topic)) == expected, codec
        assert normalise(confluent.consume(broker.bootstrap, topic, PARTITIONS, count)) == expected, codec


def test_java_consumer_group(java, versions, broker, unique):
    """Two Java consumers in one group (classic protocol, short session): the second's join
    rebalances the first, the final assignment splits the partitions between them, every record is
    read exactly once, and the offsets they commit are the log end (kafka-python reads them back)."""
    versions.watch(broker)
    topic, group = unique("java-group"), unique("java-group")
    count = 3000
    out = java.run(["create-topic", broker.bootstrap, topic, PARTITIONS],
                   ["produce", broker.bootstrap, topic, count],
                   ["group-consume", broker.bootstrap, topic, group, count, 2])
    got = records(out, topic)
    assert len({(p, o) for p, o, *_ in got}) == len(got), "a record was read twice"
    assert normalise(got) == expected_records(java_messages(count))
    final = {line["member"]: set(line["partitions"]) for line in of_type(out, "final")}
    assert set(final) == {"member-0", "member-1"} and all(final.values()), final
    assert sorted(p for parts in final.values() for p in parts) == list(range(PARTITIONS)), final
    assert len(of_type(out, "assigned")) >= 3, "the second member's join did not rebalance the first"
    committed = {line["partition"]: line["offset"] for line in of_type(out, "committed")}
    assert committed == {p: count // PARTITIONS for p in range(PARTITIONS)}

    from kafka import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, client_id="mb-test-admin")
    try:
        offsets = admin.list_group_offsets({group: None})[group]
    finally:
        admin.close()
    assert {tp.partition: meta.offset for tp, meta in offsets.items() if tp.topic == topic} == committed
    assert max(versions.seen["join_group"]) == 9
    assert max(versions.seen["offset_commit"]) >= 9


def ownership_overlaps(lines) -> list[str]:
    """Partitions two members held at once, from MiniClient's assigned/revoked/lost/closed events,
    which a global sequence number orders across the JVM's consumer threads."""
    held: dict[int, tuple[str, int]] = {}  # partition -> (member, since)
    problems = []
    for event in sorted((e for e in lines if e["type"] in ("assigned", "revoked", "lost", "closed")),
                        key=lambda e: e["seq"]):
        for p in event["partitions"]:
            if event["type"] == "assigned":
                if p in held and held[p][0] != event["member"]:
                    problems.append(f"partition {p}: {event['member']} at {event['seq']} while {held[p][0]} "
                                    f"held it since {held[p][1]}")
                held[p] = (event["member"], event["seq"])
            elif held.get(p, ("",))[0] == event["member"]:
                del held[p]
    return problems


def shares(lines, what) -> dict[str, set[int]]:
    (shared,) = [line for line in of_type(lines, "shared") if line["what"] == what]
    return {member: set(ps) for member, ps in shared["owners"].items()}


def test_java_kip848_group_shares_six_partitions_and_resumes_after_a_restart(java, versions, start_broker, unique):
    """A KIP-848 group end to end: three Java consumers with group.protocol=consumer join one
    after another and share six partitions two each; 1,200 records are read; the third leaves and
    the other two take over its partitions and read 600 more; every record is read exactly once, no
    partition is held by two consumers at once (revoke before assign), and the committed offsets
    are the log end. After a broker restart, Admin.describeConsumerGroups shows the group with the
    epoch it had, and three new consumers read exactly the 600 records produced after the restart,
    from the committed offsets."""
    topic, group = unique("java-848"), unique("java-848")
    first, second, after = 1200, 600, 600
    with start_broker() as broker:
        versions.watch(broker)
        b = broker.bootstrap
        out = java.run(["create-topic", b, topic, 6],
                       ["kip848-group", b, topic, group, 3, "first", first, second],
                       ["describe-consumer-group", b, group], ["list-groups", b])
    got = records(out, topic)
    assert len(got) == first + second
    assert len({(p, o) for p, o, *_ in got}) == len(got), "a record was read twice"
    values = sorted(v.decode() for *_, v, _ in got)
    assert values == sorted([f"first-{i}" for i in range(first)] + [f"first-after-leave-{i}" for i in range(second)])
    all_three = shares(out, "all")
    assert set(all_three) == {"member-0", "member-1", "member-2"}
    assert sorted(len(ps) for ps in all_three.values()) == [2, 2, 2]
    after_leave = shares(out, "after-leave")
    assert set(after_leave) == {"member-0", "member-1"} and sorted(len(ps) for ps in after_leave.values()) == [3, 3]
    readers = {r["partition"] for r in of_type(out, "record")
               if bytes.fromhex(r["value"]).startswith(b"first-after-leave") and r["member"] != "member-2"}
    assert all_three["member-2"] <= readers, "the leaver's partitions were taken over"
    assert ownership_overlaps(out) == []
    committed: dict[int, int] = {}
    for line in of_type(out, "committed"):
        committed[line["partition"]] = max(committed.get(line["partition"], 0), line["offset"])
    assert committed == {p: (first + second) // 6 for p in range(6)}
    (described,) = of_type(out, "consumer-group")
    assert (described["group_type"], described["state"], described["members"]) == ("Consumer", "Empty", [])
    epoch = described["group_epoch"]
    assert epoch >= 6  # three joins, one leave, two closes
    assert {g["group"]: g["group_type"] for g in of_type(out, "group")}[group] == "Consumer"
    assert versions.seen["consumer_group_heartbeat"] == {1}
    assert min(versions.seen["offset_commit"]) >= 9 and max(versions.seen["offset_fetch"]) >= 9
    assert "join_group" not in versions.seen

    with start_broker() as broker:
        versions.watch(broker)
        b = broker.bootstrap
        out = java.run(["describe-consumer-group", b, group],
                       ["kip848-group", b, topic, group, 3, "after-restart", after],
                       ["describe-consumer-group", b, group])
    before, later = of_type(out, "consumer-group")
    assert (before["group_epoch"], before["state"]) == (epoch, "Empty"), "the group came back as it was"
    got = records(out, topic)
    assert sorted(v.decode() for *_, v, _ in got) == sorted(f"after-restart-{i}" for i in range(after))
    assert {(p, o) for p, o, *_ in got} == {(p, (first + second) // 6 + i) for p in range(6) for i in range(after // 6)}
    assert sorted(len(ps) for ps in shares(out, "all").values()) == [2, 2, 2]
    assert ownership_overlaps(out) == []
    assert later["group_epoch"] > epoch


def test_java_admin_client_quotas(java, versions, broker, unique):
    """Admin.alterClientQuotas then describeClientQuotas: set, default entity, a user+client-id pair,
    removal of one key (which drops an entity with no keys left), and KIP-936's producer_ids_rate,
    a double (2.5 new producer ids per window)."""
    versions.watch(broker)
    alice, app = unique("alice"), unique("app")
    b = broker.bootstrap
    out = java.run(["alter-quota", b, "user", alice, "producer_byte_rate", 1048576],
                   ["alter-quota", b, "user", alice, "consumer_byte_rate", 2000],
                   ["alter-quota", b, "user,client-id", f"{alice},{app}", "request_percentage", 12.5],
                   ["alter-quota", b, "client-id", "<default>", "consumer_byte_rate", 5000],
                   ["alter-quota", b, "user", "<default>", "producer_ids_rate", 2.5],
                   ["describe-quotas", b],
                   ["alter-quota", b, "user", alice, "producer_byte_rate", "remove"],
                   ["alter-quota", b, "user", alice, "consumer_byte_rate", "remove"],
                   ["describe-quotas", b])
    done = [line["command"] for line in out if line["type"] == "done"]
    split = [i for i, line in enumerate(out) if line["type"] == "done" and line["command"] == "describe-quotas"]
    first, second = out[:split[0]], out[split[0] + 1:split[1]]

    def quotas(lines):
        return {json.dumps(q["entity"], sort_keys=True): q["values"] for q in of_type(lines, "quota")}

    assert done.count("alter-quota") == 7
    assert quotas(first) == {
        json.dumps({"user": alice}): {"consumer_byte_rate": 2000.0, "producer_byte_rate": 1048576.0},
        json.dumps({"client-id": app, "user": alice}, sort_keys=True): {"request_percentage": 12.5},
        json.dumps({"client-id": None}): {"consumer_byte_rate": 5000.0},
        json.dumps({"user": None}): {"producer_ids_rate": 2.5},
    }
    assert quotas(second) == {
        json.dumps({"client-id": app, "user": alice}, sort_keys=True): {"request_percentage": 12.5},
        json.dumps({"client-id": None}): {"consumer_byte_rate": 5000.0},
        json.dumps({"user": None}): {"producer_ids_rate": 2.5},
    }
    assert broker.broker.pid_quota.quota_for("anyone") == 2.5
    assert versions.seen["alter_client_quotas"] == {1} and versions.seen["describe_client_quotas"] == {1}


# What the Java producer does with each answer to its produce (docs/clients.md's tables): the answer is
# injected (fault action `error`, nothing appended), or comes from the producer-id quota.
JAVA_REACTION = {
    46: "produced",  # DUPLICATE_SEQUENCE_NUMBER: taken as already written (offset -1)
    45: "bumped",  # OUT_OF_ORDER_SEQUENCE_NUMBER: bumps its epoch itself and sends again
    47: "InvalidProducerEpochException",
}


@pytest.mark.parametrize("code", sorted(JAVA_REACTION), ids=lambda c: str(c))
def test_java_reaction_to_producer_state_errors(java, broker, unique, code):
    from minibroker.faults import FaultRule

    topic = unique(f"java-err{code}")
    java.run(["create-topic", broker.bootstrap, topic, 1])
    rule = broker.broker.faults.add(FaultRule("Produce", "error", error_code=code, limit=1))
    lines = [line for line in java.run(["produce-outcome", broker.bootstrap, topic, 3, 10000])
             if line["type"] in ("produced", "failed")]
    assert rule.fired == 1
    first = lines[0]
    inits = broker.broker.metrics.requests["init_producer_id"]
    if JAVA_REACTION[code] == "produced":
        assert first["type"] == "produced" and first["offset"] == -1 and inits == 1
    elif JAVA_REACTION[code] == "bumped":
        # Delivered after all, each record once, by batches of the next epoch from sequence 0. (Under
        # load Java may split the 3 records into 2 batches and resend them in another order.)
        from minibroker.protocol.records import iter_headers

        assert all(line["type"] == "produced" for line in lines), lines
        assert sorted(line["offset"] for line in lines) == [0, 1, 2], lines
        stored = list(iter_headers(broker.broker.logs.log(topic, 0).read(0, 1 << 20)))
        assert sum(h.records_count for h in stored) == 3
        # The refused batch came back under the bumped epoch from sequence 0. (A second batch sent
        # behind it may have been appended first, under epoch 0: a producer id the partition has no
        # state for is accepted at any sequence, in Kafka as here.)
        assert any(h.producer_epoch == 1 and h.base_sequence == 0 for h in stored), stored
    else:
        assert first["type"] == "failed" and JAVA_REACTION[code] in first["error"], first


def test_java_reaction_to_the_producer_id_quota(java, start_broker, unique):
    """The producer-id quota's default answer (19 NOT_ENOUGH_REPLICAS with throttle_time_ms) is retried
    by the Java producer, which waits out the throttle: once the window frees a slot its new producer
    id is admitted and every record, sent in many small batches in flight at once, is stored exactly
    once, in order."""
    from minibroker.admin_client import AdminClient
    from minibroker.protocol.records import encode_batch

    topic = unique("java-pidq")
    count = 200
    # 8 s in slots of 2 s: Java's first produce comes within 8 s of the filler even on a slow machine.
    with start_broker(producer_id_quota_window_size_seconds="8", producer_id_quota_cache_layer_count="4") as broker:
        java.run(["create-topic", broker.bootstrap, topic, 1])
        with AdminClient(broker.bootstrap) as admin:  # PLAINTEXT clients are User:ANONYMOUS
            admin.call(49, {"entries": [{"entity": [{"entity_type": "user", "entity_name": "ANONYMOUS"}],
                                         "ops": [{"key": "producer_ids_rate", "value": 1.0, "remove": False}]}],
                            "validate_only": False})
            # One fresh producer id of our own fills the window (1 per 8 s).
            pid = admin.call(22, {"transactional_id": None, "transaction_timeout": 60000, "producer_id": -1,
                                  "producer_epoch": -1}).producer_id
            r = admin.call(0, {"transactional_id": None, "acks": -1, "timeout": 5000, "topic_data": [
                {"name": topic, "partition_data": [{"index": 0, "records": encode_batch(
                    [(b"k", b"filler")], 1_700_000_000_000, producer_id=pid, producer_epoch=0, base_sequence=0)}]}]},
                version=9)
            assert r.responses[0].partition_responses[0].error_code == 0
        quota = broker.broker.pid_quota
        lines = [line for line in java.run(["produce-outcome", broker.bootstrap, topic, count, 30000, 1024])
                 if line["type"] in ("produced", "failed")]
        assert quota.rejected_total >= 1, "the quota never throttled Java's producer: the test proves nothing"
        assert [line["type"] for line in lines] == ["produced"] * count, lines[:3]
        assert [line["offset"] for line in lines] == list(range(1, count + 1))  # in order, after the filler
        assert broker.broker.logs.log(topic, 0).log_end_offset == count + 1
