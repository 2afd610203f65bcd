"""The remaining admin APIs over the wire with exact requests, for the cases no client library
sends: the versions below what clients use, and the refusals Kafka gives to requests that are
wrong in themselves."""

import pytest

from tests.support.wire import create_topic_with


def create(admin, topic, partitions=2):
    create_topic_with(admin, topic, partitions)


@pytest.mark.parametrize("topics", [
    [("__cluster_metadata", [1])],
    [("other", [0])],
    [("__cluster_metadata", [0, 0])],
    [("__cluster_metadata", [0]), ("other", [3])],
])
def test_describe_quorum_of_anything_but_the_metadata_partition(admin, topics):
    """Kafka's raft client answers UNKNOWN_TOPIC_OR_PARTITION for every partition named unless the
    request names exactly __cluster_metadata-0."""
    request = {"topics": [{"topic_name": t, "partitions": [{"partition_index": p} for p in ps]} for t, ps in topics]}
    for version in (0, 2):
        response = admin.call(55, request, version=version)
        assert response.error_code == 0
        assert [(t.topic_name, [(p.partition_index, p.error_code) for p in t.partitions]) for t in response.topics] == [
            (t, [(p, 3) for p in ps]) for t, ps in topics]
        # The rest of each error partition as Kafka leaves it: the schema's zero defaults.
        assert {(p.leader_id, p.leader_epoch, p.high_watermark) for t in response.topics for p in t.partitions} == {(0, 0, 0)}


def test_describe_quorum_v0(admin, broker):
    response = admin.call(55, {"topics": [{"topic_name": "__cluster_metadata", "partitions": [{"partition_index": 0}]}]},
                          version=0)
    (partition,) = response.topics[0].partitions
    assert (partition.error_code, partition.leader_id) == (0, broker.broker.node_id)
    assert [v.replica_id for v in partition.current_voters] == [broker.broker.node_id]


def test_list_config_resources_versions_and_types(admin, broker, unique):
    topic = unique("lcr")
    create(admin, topic)
    node = str(broker.broker.node_id)
    assert admin.call(74, {}, version=0).config_resources == ()  # v0: client-metrics subscriptions only
    listed = admin.call(74, {"resource_types": [2, 4]}, version=1)
    assert [(r.resource_type, r.resource_name) for r in listed.config_resources] == [
        (4, node), *((2, name) for name in sorted(i.name for i in broker.broker.logs.topics()))]
    assert admin.call(74, {"resource_types": [32, 16]}, version=1).config_resources == ()
    refused = admin.call(74, {"resource_types": [2, 64]}, version=1)
    assert (refused.error_code, refused.config_resources) == (35, ())


def test_elect_leaders_versions_and_election_types(admin, unique):
    topic = unique("elect")
    create(admin, topic)
    v0 = admin.call(43, {"topic_partitions": [{"topic": topic, "partitions": [0, 1]}], "timeout": 5000}, version=0)
    assert [(p.partition_id, p.error_code) for p in v0.replica_election_results[0].partition_result] == [(0, 84), (1, 84)]
    everything = admin.call(43, {"election_type": 0, "topic_partitions": None, "timeout": 5000}, version=2)
    # Every topic is listed, none with a partition: no election was needed anywhere.
    assert topic in [r.topic for r in everything.replica_election_results]
    assert all(r.partition_result == () for r in everything.replica_election_results)
    bad = admin.call(43, {"election_type": 7, "topic_partitions": [{"topic": topic, "partitions": [0]}],
                          "timeout": 5000}, version=2)
    assert bad.error_code == 42
    assert [(p.partition_id, p.error_code) for p in bad.replica_election_results[0].partition_result] == [(0, 42)]


def test_list_partition_reassignments_of_named_partitions(admin, unique):
    topic = unique("lpr")
    create(admin, topic)
    response = admin.call(46, {"timeout": 5000, "topics": [{"name": topic, "partition_indexes": [0, 1, 5]}]})
    assert (response.error_code, response.topics) == (0, ())


def test_alter_partition_reassignments_v0(admin, broker, unique):
    topic = unique("apr")
    create(admin, topic)
    node = broker.broker.node_id
    response = admin.call(45, {"timeout": 5000, "topics": [{"name": topic, "partitions": [
        {"partition_index": 0, "replicas": [node]}, {"partition_index": 1, "replicas": []}]}]}, version=0)
    assert [(p.partition_index, p.error_code) for p in response.responses[0].partitions] == [(0, 0), (1, 39)]
    assert response.responses[0].partitions[1].error_message == (
        "The manual partition assignment includes an empty replica list.")


def test_describe_log_dirs_v1_and_alter_with_a_name_too_long_for_a_future_dir(admin, broker, unique):
    import os

    topic = unique("dld")
    create(admin, topic)
    v1 = admin.call(35, {"topics": [{"topic": topic, "partitions": [0]}]}, version=1)
    (result,) = v1.results
    assert result.log_dir == os.path.abspath(broker.data_dir)
    assert [(t.name, [p.partition_index for p in t.partitions]) for t in result.topics] == [(topic, [0])]
    long_name = "t" * 220  # a valid topic name, but "<name>-0.<32 hex>-future" is over 255 characters
    create(admin, long_name, 1)
    altered = admin.call(34, {"dirs": [{"path": os.path.abspath(broker.data_dir),
                                        "topics": [{"name": long_name, "partitions": [0]},
                                                   {"name": unique("absent"), "partitions": [0]}]}]})
    assert [[p.error_code for p in t.partitions] for t in altered.results] == [[17], [3]]
