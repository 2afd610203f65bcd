"""Admin calls from real clients' admin APIs, answered as a single-node Kafka answers them."""

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

pytestmark = pytest.mark.interop


def test_confluent_list_topics_for_all_topics(broker, unique):
    """librdkafka 2.16's Metadata v13 request for all topics ends with 3 bytes beyond its schema's
    fields. Kafka ignores them; closing the connection over them fails list_topics() every time."""
    topics = [unique("listed") for _ in range(2)]
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for future in admin.create_topics([NewTopic(t, 2) for t in topics], operation_timeout=10).values():
        future.result(timeout=30)
    before = broker.broker.metrics.closed_for_protocol_errors

    metadata = admin.list_topics(timeout=20)

    assert set(topics) <= set(metadata.topics)
    assert all(len(metadata.topics[t].partitions) == 2 for t in topics)
    assert list(metadata.brokers) == [broker.broker.node_id]
    assert broker.broker.metrics.closed_for_protocol_errors == before
    # The request is librdkafka's, bytes after its body included: the broker counted them.
    assert broker.broker.metrics.requests_with_trailing_bytes >= 1


# ---- the remaining admin APIs (and DescribeLogDirs), client by client ------------------------------

def produce_some(bootstrap, topic, partitions, count=200):
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(count):
        producer.produce(topic, value=b"x" * (50 + i % 7), partition=i % partitions)
    assert producer.flush(30) == 0
    del producer


def segment_bytes(data_dir, topic, partition) -> int:
    """What the partition's directory holds in segment files: the size DescribeLogDirs must report."""
    return sum(p.stat().st_size for p in (data_dir / f"{topic}-{partition}").glob("*.log"))


def test_kafka_python_admin_calls_answered_as_a_single_node_kraft_kafka(broker, unique):
    """kafka-python's KafkaAdminClient: DescribeLogDirs with the partitions' real sizes and the
    volume's bytes (and, at v5, kafka-python infers Kafka 4.3), DescribeQuorum (one voter, this
    broker, whose offsets move with the metadata), ListConfigResources, the reassignment calls,
    ElectLeaders and AlterReplicaLogDirs with Kafka's errors."""
    import os

    from kafka import TopicPartition
    from kafka.admin import KafkaAdminClient, NewTopic
    from kafka.errors import (ElectionNotNeededError, InvalidReplicationAssignmentError, LogDirNotFoundError,
                              NoError, NoReassignmentInProgressError, UnknownTopicOrPartitionError)
    from kafka.structs import TopicPartitionReplica

    topic, other = unique("kp-admin"), unique("kp-admin-other")
    node = broker.broker.node_id
    data_dir = broker.data_dir
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        admin.create_topics([NewTopic(topic, 2, 1)])
        produce_some(broker.bootstrap, topic, 2)
        assert admin.get_broker_version_data(node).broker_version == (4, 3)

        (described,) = admin.describe_log_dirs()
        (log_dir,) = described["log_dirs"]
        assert described["broker"] == node and log_dir["error_code"] == 0
        assert log_dir["log_dir"] == os.path.abspath(data_dir)
        statvfs = os.statvfs(data_dir)
        assert log_dir["total_bytes"] == statvfs.f_blocks * statvfs.f_frsize and 0 < log_dir["usable_bytes"]
        sizes = {(t["name"], p["partition_index"]): (p["partition_size"], p["offset_lag"], p["is_future_key"])
                 for t in log_dir["topics"] for p in t["partitions"]}
        for partition in range(2):
            size = segment_bytes(data_dir, topic, partition)
            assert size > 0 and sizes[(topic, partition)] == (size, 0, False)
        (only,) = admin.describe_log_dirs({topic: [1, 7]})
        assert [(t["name"], [p["partition_index"] for p in t["partitions"]])
                for t in only["log_dirs"][0]["topics"]] == [(topic, [1])]

        quorum = admin.describe_metadata_quorum()
        (partition,) = quorum["topics"][0]["partitions"]
        assert quorum["topics"][0]["topic_name"] == "__cluster_metadata" and partition["error"] is None
        (voter,) = partition["current_voters"]
        assert partition["leader_id"] == voter["replica_id"] == node and partition["observers"] == []
        assert voter["log_end_offset"] == partition["high_watermark"] > 0
        assert quorum["nodes"][0]["listeners"][0]["port"] == broker.port
        admin.create_topics([NewTopic(other, 3, 1)])
        (after,) = admin.describe_metadata_quorum()["topics"][0]["partitions"]
        assert after["high_watermark"] == partition["high_watermark"] + 4  # the topic and its 3 partitions

        resources = admin.list_config_resources()
        assert resources["broker"] == [str(node)] and resources["broker_logger"] == [str(node)]
        assert {topic, other} <= set(resources["topic"])

        assert admin.list_partition_reassignments() == {}
        tp = TopicPartition(topic, 0)
        assert admin.alter_partition_reassignments({tp: [node]}) == {tp: None}
        assert admin.alter_partition_reassignments({tp: [node, node + 1]}) == {tp: InvalidReplicationAssignmentError}
        assert admin.alter_partition_reassignments({tp: None}) == {tp: NoReassignmentInProgressError}
        assert admin.alter_partition_reassignments({TopicPartition(topic, 9): [node]}) == {
            TopicPartition(topic, 9): UnknownTopicOrPartitionError}

        elected = admin.elect_leaders(0, {topic: [0, 1], unique("missing"): [0]}, raise_errors=False)
        codes = {(r.topic, p.partition_id): p.error_code
                 for r in elected.replica_election_results for p in r.partition_result}
        assert sorted(codes.values()) == [UnknownTopicOrPartitionError.errno] + [ElectionNotNeededError.errno] * 2
        assert {k for k, v in codes.items() if v == ElectionNotNeededError.errno} == {(topic, 0), (topic, 1)}

        here, nowhere = TopicPartitionReplica(topic, 0, node), TopicPartitionReplica(topic, 1, node)
        assert admin.alter_replica_log_dirs({here: os.path.abspath(data_dir), nowhere: "/no/such/dir"}) == {
            here: NoError, nowhere: LogDirNotFoundError}
    finally:
        admin.close()


def test_confluent_elect_leaders(broker, unique):
    """confluent-kafka's AdminClient.elect_leaders: ELECTION_NOT_NEEDED for partitions led by their
    preferred replica, UNKNOWN_TOPIC_OR_PARTITION for one that does not exist; for all partitions,
    nothing to report."""
    from confluent_kafka import ElectionType, KafkaError, TopicPartition

    topic = unique("cf-elect")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for future in admin.create_topics([NewTopic(topic, 2)], operation_timeout=10).values():
        future.result(timeout=30)
    asked = [TopicPartition(topic, 0), TopicPartition(topic, 1), TopicPartition(topic, 5)]
    result = admin.elect_leaders(ElectionType.PREFERRED, asked).result(timeout=30)
    codes = {(tp.topic, tp.partition): error.code() for tp, error in result.items()}
    assert codes == {(topic, 0): KafkaError.ELECTION_NOT_NEEDED, (topic, 1): KafkaError.ELECTION_NOT_NEEDED,
                     (topic, 5): KafkaError.UNKNOWN_TOPIC_OR_PART}
    assert admin.elect_leaders(ElectionType.UNCLEAN, None).result(timeout=30) == {}
    del admin  # before the broker stops, so librdkafka does not log its reconnects


def test_java_admin_calls(java, broker, unique):
    """Java's Admin, for the calls only it has (describeTopics by topic id, describeReplicaLogDirs,
    describeMetadataQuorum's nodes) and the rest: every answer as a single-node KRaft Kafka's."""
    import os

    topic = unique("java-admin")
    b, node, path = broker.bootstrap, broker.broker.node_id, os.path.abspath(broker.data_dir)
    out = java.run(["create-topic", b, topic, 2])
    topic_id = next(line["topic_id"] for line in out if line["type"] == "created")
    produce_some(b, topic, 2)
    out = java.run(["describe-topic-ids", b, f"{topic_id},AAAAAAAAAAAAAAAAAAAAAQ"],
                   ["describe-quorum", b],
                   ["describe-log-dirs", b, node],
                   ["list-config-resources", b, ""],
                   ["list-config-resources", b, "TOPIC"],
                   ["list-reassignments", b],
                   ["alter-reassignment", b, topic, 0, str(node)],
                   ["alter-reassignment", b, topic, 0, f"{node},{node + 1}"],
                   ["alter-reassignment", b, topic, 0, f"{node},{node}"],
                   ["alter-reassignment", b, topic, 0, f"{node}", "no-rf-change"],
                   ["alter-reassignment", b, topic, 0, "cancel"],
                   ["alter-reassignment", b, topic, 9, str(node)],
                   ["elect-leaders", b, "preferred", f"{topic}:0,{topic}:1,{topic}:4"],
                   ["elect-leaders", b, "unclean", "all"],
                   ["alter-log-dir", b, topic, 0, node, path],
                   ["alter-log-dir", b, topic, 0, node, "/no/such/dir"])

    def lines(kind, within=out):
        return [{k: v for k, v in line.items() if k != "type"} for line in within if line["type"] == kind]

    def output_of(command):
        """The lines each run of `command` printed, run by run."""
        runs, current = [], []
        for line in out:
            if line["type"] == "done":
                if line["command"] == command:
                    runs.append(current)
                current = []
            else:
                current.append(line)
        return runs

    assert lines("topic-by-id") == [
        {"topic_id": topic_id, "name": topic, "partitions": 2, "leader": node, "error": None},
        {"topic_id": "AAAAAAAAAAAAAAAAAAAAAQ", "error": "UnknownTopicIdException"}]
    (quorum,) = lines("quorum")
    (voter,) = quorum["voters"]
    assert (quorum["leader"], quorum["epoch"], quorum["observers"]) == (node, 1, 0)
    assert voter["id"] == node and voter["log_end_offset"] == quorum["high_watermark"] > 0
    assert voter["last_fetch"] > 0 and voter["last_caught_up"] > 0
    assert quorum["nodes"] == {str(node): [f"PLAINTEXT://127.0.0.1:{broker.port}"]}
    (log_dir,) = lines("log-dir")
    assert (log_dir["path"], log_dir["error"]) == (path, None) and log_dir["total"] >= log_dir["usable"] > 0
    for partition in range(2):
        assert log_dir["replicas"][f"{topic}-{partition}"] == [segment_bytes(broker.data_dir, topic, partition), 0, False]
    replica_dirs = {line["replica"]: (line["dir"], line["future_dir"]) for line in lines("replica-log-dir")}
    assert replica_dirs[f"{topic}-0"] == (path, None)
    everything, topics_only = [[(line["resource_type"], line["name"]) for line in lines("config-resource", run)]
                               for run in output_of("list-config-resources")]
    assert everything[:2] == [("BROKER_LOGGER", str(node)), ("BROKER", str(node))]
    assert everything[2:] == topics_only and ("TOPIC", topic) in topics_only
    assert lines("reassignments") == [{"count": 0}]
    assert [line["error"] for line in lines("reassigned")] == [
        None, "InvalidReplicaAssignmentException", "InvalidReplicaAssignmentException", None,
        "NoReassignmentInProgressException", "UnknownTopicOrPartitionException"]
    assert lines("elected") == [
        {"partition": f"{topic}-0", "error": "ElectionNotNeededException"},
        {"partition": f"{topic}-1", "error": "ElectionNotNeededException"},
        {"partition": f"{topic}-4", "error": "UnknownTopicOrPartitionException"}]
    assert [line["error"] for line in lines("log-dir-altered")] == [None, "LogDirNotFoundException"]
