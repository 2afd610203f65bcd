"""CreatePartitions, DescribeTopicPartitions and DeleteRecords (KIP-195, KIP-966, KIP-107): exact requests for the
refusals and the paging rules, and the calls of Java's Admin, confluent-kafka and kafka-python."""


import pytest

from minibroker.admin_client import AdminClient
from tests.support.batches import make_batch
from tests.support.wire import create_topic_with as create
from tests.support.wire import produce as wire_produce



def produce(admin, topic, values, partition=0):
    """One batch per value; returns the base offsets."""
    offsets = []
    for value in values:
        (answer,) = wire_produce(admin, topic, make_batch([(None, value)]), partition=partition).responses[0] \
            .partition_responses
        assert answer.error_code == 0
        offsets.append(answer.base_offset)
    return offsets


def add_partitions(admin, *topics, validate_only=False, version=None):
    """topics: (name, count, assignments or None); returns [(name, code, message)]."""
    response = admin.call(37, {"topics": [{"name": n, "count": c, "assignments": a} for n, c, a in topics],
                               "timeout": 5000, "validate_only": validate_only}, version=version)
    return [(r.name, int(r.error_code), r.error_message) for r in response.results]


def delete_records(admin, topic, *partitions, version=None):
    """partitions: (index, offset); returns {index: (code, low watermark)}."""
    response = admin.call(21, {"topics": [{"name": topic, "partitions": [
        {"partition_index": p, "offset": o} for p, o in partitions]}], "timeout": 5000}, version=version)
    return {p.partition_index: (int(p.error_code), p.low_watermark) for p in response.topics[0].partitions}


# ---- CreatePartitions ----------------------------------------------------------------------------------

def test_create_partitions_refusals(admin, broker, unique):
    """Kafka's answers, each topic on its own: a duplicate name once (first), unknown topic, no
    increase, too many, assignments of the wrong number or naming another broker; validate_only adds
    nothing."""
    topic, other, missing = unique("cp"), unique("cp-other"), unique("cp-missing")
    create(admin, topic, 2)
    create(admin, other, 1)
    node = broker.broker.node_id
    answers = add_partitions(admin, (topic, 2, None), (other, 3, None), (other, 4, None), (missing, 3, None))
    assert answers == [(other, 42, "Duplicate topic name."), (topic, 37, "Topic already has 2 partition(s)."),
                       (missing, 3, None)]
    assert add_partitions(admin, (topic, 1, None), version=0) == [
        (topic, 37, f"The topic {topic} currently has 2 partition(s); 1 would not be an increase.")]
    assert add_partitions(admin, (topic, 10_001, None)) == [
        (topic, 37, "Number of partitions 10001 is above the limit of 10000.")]
    assert add_partitions(admin, (topic, 4, [{"broker_ids": [node]}])) == [
        (topic, 39, "Attempted to add 2 additional partition(s), but only 1 assignment(s) were specified.")]
    assert add_partitions(admin, (topic, 3, [{"broker_ids": [node + 1]}])) == [
        (topic, 39, f"The manual partition assignment includes broker {node + 1}, but no such broker is registered.")]
    assert add_partitions(admin, (topic, 3, [{"broker_ids": [node, node]}])) == [
        (topic, 39, f"The manual partition assignment includes the broker {node} more than once.")]
    assert add_partitions(admin, (topic, 3, [{"broker_ids": []}])) == [
        (topic, 39, "The manual partition assignment includes an empty replica list.")]
    assert add_partitions(admin, (topic, 5, None), validate_only=True) == [(topic, 0, None)]
    assert broker.broker.logs.topic(topic).num_partitions == 2
    assert add_partitions(admin, (topic, 3, [{"broker_ids": [node]}])) == [(topic, 0, None)]
    assert broker.broker.logs.topic(topic).num_partitions == 3


def test_added_partitions_take_records_and_survive_a_restart(start_broker, tmp_path, unique):
    """The new partitions are there for Metadata at once, take records, and are in the metadata log:
    the quorum's offsets move by one PartitionRecord per new partition, as Kafka's do."""
    topic = unique("grow")
    data = tmp_path / "grow"
    with start_broker(data) as running, AdminClient(running.bootstrap) as admin:
        create(admin, topic, 1, configs=[("retention.ms", "3600000")])
        before = running.broker.cluster.quorum().high_watermark
        assert add_partitions(admin, (topic, 3, None)) == [(topic, 0, None)]
        assert running.broker.cluster.quorum().high_watermark == before + 2
        metadata = admin.call(3, {"topics": [{"name": topic, "topic_id": None}], "allow_auto_topic_creation": False,
                                  "include_topic_authorized_operations": False}, version=12)
        assert [p.partition_index for p in metadata.topics[0].partitions] == [0, 1, 2]
        assert produce(admin, topic, [b"a", b"b"], partition=2) == [0, 1]
        assert running.broker.logs.log(topic, 2).config.retention_ms == 3600000
    with start_broker(data) as running:
        assert running.broker.logs.topic(topic).num_partitions == 3
        assert running.broker.logs.log(topic, 2).log_end_offset == 2
        assert running.broker.controller.image.topic(topic).num_partitions == 3


@pytest.mark.interop
def test_confluent_and_kafka_python_create_partitions(broker, unique):
    from confluent_kafka import KafkaException, Producer
    from confluent_kafka.admin import AdminClient as ConfluentAdmin, NewPartitions, NewTopic
    from kafka.admin import KafkaAdminClient
    from kafka.errors import InvalidPartitionsError

    topic = unique("cf-cp")
    admin = ConfluentAdmin({"bootstrap.servers": broker.bootstrap})
    try:
        for future in admin.create_topics([NewTopic(topic, 1)]).values():
            future.result(timeout=30)
        for future in admin.create_partitions([NewPartitions(topic, 4)], validate_only=True).values():
            future.result(timeout=30)
        assert broker.broker.logs.topic(topic).num_partitions == 1
        for future in admin.create_partitions([NewPartitions(topic, 3)]).values():
            future.result(timeout=30)
        (future,) = admin.create_partitions([NewPartitions(topic, 2)]).values()
        with pytest.raises(KafkaException, match="would not be an increase"):
            future.result(timeout=30)
        producer = Producer({"bootstrap.servers": broker.bootstrap, "topic.metadata.refresh.interval.ms": 100})
        producer.produce(topic, value=b"to-the-new-one", partition=2)
        assert producer.flush(30) == 0
        del producer
        assert broker.broker.logs.log(topic, 2).log_end_offset == 1
    finally:
        del admin
    kp = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        kp.create_partitions({topic: 5})
        assert broker.broker.logs.topic(topic).num_partitions == 5
        with pytest.raises(InvalidPartitionsError):
            kp.create_partitions({topic: 5})
    finally:
        kp.close()


# ---- DescribeTopicPartitions ---------------------------------------------------------------------------

def page(admin, names, limit, cursor=None):
    response = admin.call(75, {"topics": [{"name": n} for n in names], "response_partition_limit": limit,
                               "cursor": cursor})
    topics = [(t.name, int(t.error_code), [p.partition_index for p in t.partitions]) for t in response.topics]
    cursor = None if response.next_cursor is None else (response.next_cursor.topic_name, response.next_cursor.partition_index)
    return topics, cursor


def test_describe_topic_partitions_pages_as_kafka(admin, broker, unique):
    """Name order, each name once; a topic cut short names its next partition in the cursor; a page
    that ends exactly at a topic's end points at the next topic's partition 0; unknown and illegal
    names answer errors in their place; the limit is at least 1."""
    a, b, c = sorted(unique(p) for p in ("dtp-a", "dtp-b", "dtp-c"))
    create(admin, a, 3)
    create(admin, b, 2)
    create(admin, c, 1)
    missing = a + "-missing"  # sorts after a, before b
    names = [c, missing, a, b, a, "bad/name"]
    assert page(admin, names, 2) == ([("bad/name", 17, []), (a, 0, [0, 1])], (a, 2))
    assert page(admin, names, 2, {"topic_name": a, "partition_index": 2}) == (
        [(a, 0, [2]), (missing, 3, []), (b, 0, [0])], (b, 1))
    assert page(admin, names, 1, {"topic_name": b, "partition_index": 1}) == ([(b, 0, [1])], (c, 0))
    assert page(admin, names, 5, {"topic_name": c, "partition_index": 0}) == ([(c, 0, [0])], None)
    assert page(admin, names, 0, {"topic_name": c, "partition_index": 7}) == ([(c, 0, [])], None)
    assert page(admin, [a], -5) == ([(a, 0, [0])], (a, 1))
    # Every topic: the ones that exist only.
    everything, cursor = page(admin, [], 2000)
    assert cursor is None and [t[0] for t in everything] == sorted(i.name for i in broker.broker.logs.topics())
    for bad in ({"topic_name": "zzz", "partition_index": 0}, {"topic_name": a, "partition_index": -1}):
        assert page(admin, [a, b], 10, bad) == ([(a, 42, []), (b, 42, [])], None)


def test_describe_topic_partitions_limit_is_capped(start_broker, tmp_path, unique):
    topic = unique("capped")
    with start_broker(tmp_path / "cap", max_request_partition_size_limit="2") as running, \
            AdminClient(running.bootstrap) as admin:
        create(admin, topic, 3)
        assert page(admin, [topic], 1000) == ([(topic, 0, [0, 1])], (topic, 2))


@pytest.mark.interop
def test_java_describe_topics_pages_through_describe_topic_partitions(java, broker, unique):
    """Java 4's Admin.describeTopics asks DescribeTopicPartitions and follows its cursor: with 2
    partitions a response, 8 partitions over two topics take several requests and come back whole,
    leader and replicas included; an unknown topic fails on its own."""
    small, big, missing = unique("j-small"), unique("j-big"), unique("j-missing")
    b = broker.bootstrap
    before = broker.broker.metrics.requests["describe_topic_partitions"]
    out = java.run(["create-topic", b, small, 3], ["create-topic", b, big, 5],
                   ["create-partitions", b, big, 6],
                   ["describe-topics", b, f"{small},{big},{missing}", 2])
    topics = {line["name"]: line for line in out if line["type"] == "topic"}
    node = broker.broker.node_id
    assert topics[small]["partitions"] == [[p, node, 1, 1] for p in range(3)]
    assert topics[big]["partitions"] == [[p, node, 1, 1] for p in range(6)]
    assert topics[big]["topic_id"] == [line for line in out if line["type"] == "created"][1]["topic_id"]
    assert topics[missing]["error"] == "UnknownTopicOrPartitionException"
    assert broker.broker.metrics.requests["describe_topic_partitions"] - before >= 2 + 5  # pages of 2


@pytest.mark.interop
def test_kafka_python_describe_topic_partitions(broker, unique):
    from kafka.admin import KafkaAdminClient, NewTopic

    topic = unique("kp-dtp")
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        admin.create_topics([NewTopic(topic, 3, 1)])
        first = admin.describe_topic_partitions([topic], response_partition_limit=2)
        assert [p["partition_index"] for p in first["topics"][0]["partitions"]] == [0, 1]
        assert first["next_cursor"] == {"topic_name": topic, "partition_index": 2}
        rest = admin.describe_topic_partitions([topic], cursor=first["next_cursor"])
        assert [p["partition_index"] for p in rest["topics"][0]["partitions"]] == [2]
        assert rest["next_cursor"] is None
    finally:
        admin.close()


# ---- DeleteRecords -------------------------------------------------------------------------------------

def test_delete_records_moves_the_log_start(admin, broker, unique):
    """The low watermark moves up (never down); whole segments below it go at once; a fetch below it
    is OFFSET_OUT_OF_RANGE, at it returns records; ListOffsets EARLIEST follows; -1 means the high
    watermark; Kafka's refusals per partition."""
    topic = unique("dr")
    create(admin, topic, 2, configs=[("internal.segment.bytes", "250")])
    assert produce(admin, topic, [bytes([i]) * 40 for i in range(10)]) == list(range(10))
    plog = broker.broker.logs.log(topic, 0)
    assert len(plog.segments) == 5
    assert delete_records(admin, topic, (0, 5), (1, 0), (7, 0)) == {0: (0, 5), 1: (0, 0), 7: (3, -1)}
    assert [s.base_offset for s in plog.segments] == [4, 6, 8]  # the segment holding 4 and 5 stays
    assert delete_records(admin, topic, (0, 2), version=0) == {0: (0, 5)}
    assert delete_records(admin, topic, (0, 11), (1, -2)) == {0: (1, -1), 1: (1, -1)}

    def fetch(offset):
        response = admin.call(1, {"replica_id": -1, "max_wait": 0, "min_bytes": 0, "max_bytes": 1 << 20,
                                  "isolation_level": 0, "session_id": 0, "session_epoch": -1,
                                  "forgotten_topics_data": [], "rack_id": "",
                                  "topics": [{"topic": topic, "partitions": [
                                      {"partition": 0, "fetch_offset": offset, "partition_max_bytes": 1 << 20,
                                       "log_start_offset": -1, "current_leader_epoch": -1}]}]}, version=11)
        return response.responses[0].partitions[0]

    below = fetch(4)
    # OFFSET_OUT_OF_RANGE, and as Kafka's ReplicaManager answers a read that failed: -1 for the log
    # start and the high watermark (the conformance corpus checks it against Kafka); ListOffsets
    # EARLIEST below says where the log starts now.
    assert (below.error_code, below.log_start_offset, below.high_watermark) == (1, -1, -1)
    at = fetch(5)
    assert at.error_code == 0 and len(at.records) > 0

    def earliest():
        response = admin.call(2, {"replica_id": -1, "isolation_level": 0, "topics": [{"name": topic, "partitions": [
            {"partition_index": 0, "current_leader_epoch": -1, "timestamp": -2}]}]}, version=7)
        return response.topics[0].partitions[0].offset

    assert earliest() == 5
    assert delete_records(admin, topic, (0, -1)) == {0: (0, 10)}
    assert earliest() == 10 and fetch(10).error_code == 0


def test_delete_records_refused_where_kafka_refuses(admin, broker, unique):
    compacted = unique("compacted")
    create(admin, compacted, configs=[("cleanup.policy", "compact")])
    assert delete_records(admin, compacted, (0, 0)) == {0: (44, -1)}  # POLICY_VIOLATION
    assert delete_records(admin, "__consumer_offsets", (0, 0)) == {0: (17, -1)}
    assert delete_records(admin, unique("nope"), (0, 0)) == {0: (3, -1)}


def test_deleted_records_stay_deleted_after_a_restart_and_retention(start_broker, tmp_path, unique):
    """The new start is in the partition's log-start-offset file; after a restart the records below
    stay invisible, and retention deletes the segment the start falls in once a later one begins
    past it."""
    topic = unique("dr-restart")
    data = tmp_path / "drr"
    with start_broker(data) as running, AdminClient(running.bootstrap) as admin:
        create(admin, topic, configs=[("internal.segment.bytes", "250")])
        produce(admin, topic, [bytes([i]) * 40 for i in range(6)])
        assert delete_records(admin, topic, (0, 3)) == {0: (0, 3)}
    assert (data / f"{topic}-0" / "log-start-offset").read_text().strip() == "3"
    with start_broker(data) as running, AdminClient(running.bootstrap) as admin:
        plog = running.broker.logs.log(topic, 0)
        assert plog.log_start_offset == 3 and [s.base_offset for s in plog.segments] == [2, 4]
        assert delete_records(admin, topic, (0, 4)) == {0: (0, 4)}
        assert [s.base_offset for s in plog.segments] == [4]


@pytest.mark.interop
def test_clients_delete_records(java, broker, unique):
    """Java's Admin.deleteRecords, confluent-kafka's delete_records and kafka-python's: the low
    watermark comes back, beyond the end is OffsetOutOfRange, and a consumer from the beginning
    starts at the new log start."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
    from confluent_kafka.admin import AdminClient as ConfluentAdmin
    from kafka import TopicPartition as KpTopicPartition
    from kafka.admin import KafkaAdminClient

    topic = unique("clients-dr")
    b = broker.bootstrap
    out = java.run(["create-topic", b, topic, 1], ["produce", b, topic, 30],
                   ["delete-records", b, topic, 0, 10], ["delete-records", b, topic, 0, 31])
    deleted = [line for line in out if line["type"] == "records-deleted"]
    assert [(d["low_watermark"], d["error"]) for d in deleted] == [(10, None), (None, "OffsetOutOfRangeException")]

    admin = ConfluentAdmin({"bootstrap.servers": b})
    try:
        (future,) = admin.delete_records([TopicPartition(topic, 0, 20)]).values()
        assert future.result(timeout=30).low_watermark == 20
    finally:
        del admin
    consumer = Consumer({"bootstrap.servers": b, "group.id": unique("dr-reader"), "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        offsets = []
        while len(offsets) < 10:
            for message in consumer.consume(num_messages=100, timeout=1):
                assert message.error() is None
                offsets.append(message.offset())
        assert offsets == list(range(20, 30))
    finally:
        consumer.close()

    kp = KafkaAdminClient(bootstrap_servers=b)
    try:
        result = kp.delete_records({KpTopicPartition(topic, 0): 25})
        assert result[KpTopicPartition(topic, 0)]["low_watermark"] == 25
    finally:
        kp.close()
    assert broker.broker.logs.log(topic, 0).log_start_offset == 25
