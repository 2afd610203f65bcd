"""OffsetDelete (KIP-496): a group's committed offsets deleted per partition, as Kafka's group
coordinator answers: GROUP_SUBSCRIBED_TO_TOPIC while its consumers subscribe to the topic (their
subscriptions read from the JoinGroup metadata), the group errors top-level; through exact requests
and through Java's Admin and kafka-python."""

import struct
import time

import pytest

from minibroker.groups.classic_group import consumer_subscription_topics
from minibroker.protocol.entities import build
from tests.support.wire import WireClient, schema

OFFSET_DELETE, COMMIT, FETCH, JOIN = 47, 8, 9, 11


def req(api: int, version: int, **fields):
    return build(schema(api, version), fields)


def subscription(*topics: str, version: int = 1) -> bytes:
    """ConsumerProtocolSubscription: version, topics, user data (and v1's owned partitions)."""
    body = struct.pack(">hi", version, len(topics))
    for topic in topics:
        body += struct.pack(">h", len(topic)) + topic.encode()
    body += struct.pack(">i", -1)  # no user data
    if version >= 1:
        body += struct.pack(">i", 0)  # no owned partitions
    return body


def create(client, topic, partitions=2):
    response = client.request(req(19, 7, timeout=5000, validate_only=False, topics=[{
        "name": topic, "num_partitions": partitions, "replication_factor": 1, "assignments": [], "configs": []}]))
    assert response.topics[0].error_code == 0


def commit(client, group, offsets, generation=-1, member=""):
    topics = {}
    for (topic, partition), offset in offsets.items():
        topics.setdefault(topic, []).append({"partition_index": partition, "committed_offset": offset,
                                             "committed_leader_epoch": -1, "committed_metadata": ""})
    response = client.request(req(COMMIT, 8, group_id=group, generation_id_or_member_epoch=generation,
                                  member_id=member, group_instance_id=None,
                                  topics=[{"name": t, "partitions": p} for t, p in topics.items()]))
    assert all(p.error_code == 0 for t in response.topics for p in t.partitions)


def committed(client, group, topic, partitions):
    response = client.request(req(FETCH, 7, group_id=group, require_stable=False,
                                  topics=[{"name": topic, "partition_indexes": partitions}]))
    return [p.committed_offset for p in response.topics[0].partitions]


def delete(client, group, topics):
    """topics: {topic: [partitions]}; returns (top-level error, {(topic, partition): error})."""
    response = client.request(req(OFFSET_DELETE, 0, group_id=group, topics=[
        {"name": t, "partitions": [{"partition_index": p} for p in ps]} for t, ps in topics.items()]))
    return int(response.error_code), {(t.name, p.partition_index): int(p.error_code)
                                      for t in response.topics for p in t.partitions}


def join(client, group, protocol_type, metadata):
    response = client.request(req(JOIN, 3, group_id=group, session_timeout=6000, rebalance_timeout=6000,
                                  member_id="", group_instance_id=None, protocol_type=protocol_type,
                                  protocols=[{"name": "range", "metadata": metadata}], reason=None))
    assert response.error_code == 0
    return response


def test_offsets_of_a_group_without_members_are_deleted(broker, unique):
    """A simple (assign()) group: every named partition answers NONE, committed or not, and its offset
    is gone; the group errors are top-level with no topics."""
    group, topic = unique("od-simple"), unique("od-topic")
    with WireClient(broker.bootstrap) as client:
        create(client, topic)
        commit(client, group, {(topic, 0): 5, (topic, 1): 7})
        assert delete(client, group, {topic: [0]}) == (0, {(topic, 0): 0})
        assert committed(client, group, topic, [0, 1]) == [-1, 7]
        assert delete(client, group, {topic: [0, 1]}) == (0, {(topic, 0): 0, (topic, 1): 0})
        assert committed(client, group, topic, [0, 1]) == [-1, -1]
        assert delete(client, unique("no-group"), {topic: [0]}) == (69, {})
        assert delete(client, "", {topic: [0]}) == (24, {})
    assert broker.broker.groups.store.offsets.get(group, {}) == {}


def test_unknown_topics_and_partitions(broker, unique):
    group, topic, missing = unique("od-unknown"), unique("od-known"), unique("od-missing")
    with WireClient(broker.bootstrap) as client:
        create(client, topic, 1)
        commit(client, group, {(topic, 0): 3})
        assert delete(client, group, {topic: [0, 4], missing: [0, 1]}) == (0, {
            (topic, 0): 0, (topic, 4): 3, (missing, 0): 3, (missing, 1): 3})


def test_a_consumer_group_keeps_the_offsets_of_topics_it_subscribes_to(broker, unique):
    """While its member subscribes to `kept`, those partitions answer GROUP_SUBSCRIBED_TO_TOPIC and
    keep their offsets; `dropped`'s are deleted. A subscription that does not parse counts as
    subscribed to everything (Kafka's conservative answer)."""
    group, kept, dropped = unique("od-consumer"), unique("od-kept"), unique("od-dropped")
    with WireClient(broker.bootstrap) as client:
        create(client, kept)
        create(client, dropped)
        commit(client, group, {(kept, 0): 1, (kept, 1): 2, (dropped, 0): 3})
        join(client, group, "consumer", subscription(kept))
        assert delete(client, group, {kept: [0, 1], dropped: [0]}) == (0, {
            (kept, 0): 86, (kept, 1): 86, (dropped, 0): 0})
        assert committed(client, group, kept, [0, 1]) == [1, 2]
        assert committed(client, group, dropped, [0]) == [-1]

        garbled = unique("od-garbled")
        commit(client, garbled, {(dropped, 0): 3})
        join(client, garbled, "consumer", b"\x00\x01\xff\xff\xff")
        assert delete(client, garbled, {dropped: [0]}) == (0, {(dropped, 0): 86})


def test_a_non_consumer_group_with_members_is_refused(broker, unique):
    group, topic = unique("od-connect"), unique("od-connect-topic")
    with WireClient(broker.bootstrap) as client:
        create(client, topic, 1)
        commit(client, group, {(topic, 0): 1})
        join(client, group, "connect", b"worker")
        assert delete(client, group, {topic: [0]}) == (68, {})
        assert committed(client, group, topic, [0]) == [1]


@pytest.mark.parametrize("metadata, topics", [
    (subscription("a", "bb", version=0), ["a", "bb"]),
    (subscription("a", version=3), ["a"]),
    (subscription(), []),
    (b"", None),
    (b"\x00\x00\x00\x00\x00\x02\x00\x01a", None),  # two topics declared, one there
    (b"\x00\x00\x7f\xff\xff\xff", None),  # a count no bytes could hold
    (b"\x00\x00\x00\x00\x00\x01\x00\x09abc", None),  # a name longer than what is left
])
def test_consumer_subscription_topics_checks_lengths(metadata, topics):
    assert consumer_subscription_topics(metadata) == topics


@pytest.mark.interop
def test_java_and_kafka_python_delete_group_offsets(java, broker, unique):
    """A confluent-kafka consumer in the group subscribes to `kept`: Java's deleteConsumerGroupOffsets
    fails those partitions with GroupSubscribedToTopicException and deletes `dropped`'s; once the
    consumer has left, kafka-python's delete_group_offsets deletes `kept`'s."""
    from confluent_kafka import Consumer
    from kafka import TopicPartition
    from kafka.admin import KafkaAdminClient
    from kafka.errors import NoError

    group, kept, dropped = unique("od-java"), unique("od-java-kept"), unique("od-java-dropped")
    b = broker.bootstrap
    with WireClient(b) as client:
        create(client, dropped, 1)
        commit(client, group, {(dropped, 0): 4})
    out = java.run(["create-topic", b, kept, 1], ["produce", b, kept, 3])
    assert len([line for line in out if line["type"] == "produced"]) == 3

    consumer = Consumer({"bootstrap.servers": b, "group.id": group, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False, "session.timeout.ms": 6000})
    try:
        consumer.subscribe([kept])
        read, deadline = 0, time.monotonic() + 30
        while read < 3 and time.monotonic() < deadline:
            for message in consumer.consume(num_messages=10, timeout=0.5):
                assert message.error() is None
                read += 1
        assert read == 3
        consumer.commit(asynchronous=False)
        out = java.run(["delete-group-offsets", b, group, f"{kept}:0,{dropped}:0"])
        results = {line["partition"]: line["error"] for line in out if line["type"] == "group-offset-deleted"}
        assert results == {f"{kept}-0": "GroupSubscribedToTopicException", f"{dropped}-0": None}
        with WireClient(b) as client:
            assert committed(client, group, kept, [0]) == [3]
            assert committed(client, group, dropped, [0]) == [-1]
    finally:
        consumer.close()

    admin = KafkaAdminClient(bootstrap_servers=b)
    try:
        assert admin.delete_group_offsets(group, [TopicPartition(kept, 0)]) == {TopicPartition(kept, 0): NoError}
    finally:
        admin.close()
    with WireClient(b) as client:
        assert committed(client, group, kept, [0]) == [-1]
