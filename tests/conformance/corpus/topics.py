"""ApiVersions, Metadata, CreateTopics, DeleteTopics, CreatePartitions, DescribeTopicPartitions."""

from __future__ import annotations

from tests.conformance.corpus import create_topic, wait_for_topic
from tests.support.conformance import Run, scenario


def api_label(api_key: int) -> str:
    from minibroker.protocol.messages import UnknownApiKeyError, api_name

    try:
        return f"{api_name(api_key)}({api_key})"
    except UnknownApiKeyError:
        return f"api-{api_key}"


@scenario("api_versions/v0-v4", apis=(18,))
def _(run: Run) -> None:
    """What each version answers, v0 (aiokafka) to v4 (Java, kafka-python); the version ranges of
    the APIs both brokers serve are compared, and which APIs each serves."""
    for version in range(5):
        body = {"client_software_name": "conformance", "client_software_version": "1.0"} if version >= 3 else {}
        response = run.call(18, version, body, record=False, conn=f"v{version}")
        run.note(f"ApiVersions v{version} error", int(response.error_code))
    response = run.call(18, 4, {"client_software_name": "conformance", "client_software_version": "1.0"},
                        record=False, conn="keys")
    run.note("version ranges", {api_label(int(k.api_key)): f"{k.min_version}-{k.max_version}"
                                for k in response.api_keys})
    run.note("supported features", sorted((f.name, int(f.min_version), int(f.max_version))
                                          for f in response.supported_features))
    run.note("finalized features", sorted((f.name, int(f.max_version_level))
                                          for f in response.finalized_features))


@scenario("api_versions/unsupported-version", apis=(18,))
def _(run: Run) -> None:
    """An ApiVersions request at a version the broker lacks (v127, in a flexible header as a newer
    client sends it) is answered in v0 with UNSUPPORTED_VERSION and the ApiVersions range (KIP-511)."""
    from tests.support.wire import encode_request, schema

    conn = run.conn()
    request = schema(18, 3)(client_software_name="conformance", client_software_version="1.0")
    raw = bytearray(encode_request(request, 7, "conformance"))
    raw[6:8] = (127).to_bytes(2, "big")  # request_api_version
    conn.sock.sendall(bytes(raw))
    import struct

    from minibroker.protocol.messages import decode_response

    (size,) = struct.unpack(">i", conn._recv_exact(4))
    _, response = decode_response(18, 0, conn._recv_exact(size))
    run.note("error", int(response.error_code))
    run.note("api versions range", [(int(k.api_key), int(k.min_version), int(k.max_version))
                                    for k in response.api_keys if k.api_key == 18])


@scenario("metadata/topics", apis=(3, 19))
def _(run: Run) -> None:
    """Metadata of an existing topic, an unknown one (auto-creation off) and an invalid name, at the
    versions clients send: v5 (aiokafka), v9, v12 (topic ids), v13 (librdkafka, Java); v1 (which
    always asks for auto-creation) of an existing topic."""
    topic = run.name("t")
    create_topic(run, topic, 3)
    run.call(3, 1, {"topics": [{"name": topic}]})
    for version in (5, 9, 12, 13):
        topics = [{"name": n, "topic_id": 0} for n in (topic, run.name("absent"), "bad/name")]
        body = {"topics": topics, "allow_auto_topic_creation": False,
                "include_topic_authorized_operations": version >= 8}
        run.call(3, version, body)
    run.call(3, 12, {"topics": None, "allow_auto_topic_creation": False}, label="all topics", drop=("topics",))


@scenario("metadata/auto-create", apis=(3,))
def _(run: Run) -> None:
    """Metadata v9 with allow_auto_topic_creation: a new topic is created (num.partitions), answered
    LEADER_NOT_AVAILABLE or with its partition, then listed."""
    topic = run.name("auto")
    run.call(3, 9, {"topics": [{"name": topic}], "allow_auto_topic_creation": True}, label="first answer",
             drop=("partitions",))

    def ready():
        response = run.call(3, 9, {"topics": [{"name": topic}], "allow_auto_topic_creation": False}, record=False)
        return response if response.topics[0].error_code == 0 and response.topics[0].partitions else None

    run.record("Metadata v9 after creation", run.wait_until(ready))


@scenario("metadata/all-topics-by-id", apis=(3,))
def _(run: Run) -> None:
    """Metadata v12 by topic id: a known id, an unknown id (UNKNOWN_TOPIC_ID)."""
    topic = run.name("t")
    created = create_topic(run, topic)
    topic_id = created.topics[0].topic_id
    run.call(3, 12, {"topics": [{"name": None, "topic_id": topic_id}], "allow_auto_topic_creation": False})
    run.call(3, 12, {"topics": [{"name": None, "topic_id": "00000000-0000-0000-0000-00000000abcd"}],
                     "allow_auto_topic_creation": False})


@scenario("create_topics/errors", apis=(19,))
def _(run: Run) -> None:
    """CreateTopics v7: success, TOPIC_ALREADY_EXISTS, INVALID_TOPIC_EXCEPTION (bad name, too long),
    INVALID_PARTITIONS, INVALID_REPLICATION_FACTOR, INVALID_CONFIG (unknown key, bad value), a
    duplicate name in one request (INVALID_REQUEST), validate_only, defaults (-1)."""
    topic = run.name("t")

    def create(name, partitions=1, rf=1, configs=(), validate_only=False, version=7, label=None):
        return run.call(19, version, {
            "topics": [{"name": name, "num_partitions": partitions, "replication_factor": rf,
                        "configs": [{"name": k, "value": v} for k, v in configs]}],
            "timeout": 30000, "validate_only": validate_only}, label=label)

    create(topic, 2, configs=[("retention.ms", "3600000")], label="create")
    create(topic, 2, label="again")
    create("bad name!", label="invalid name")
    create("x" * 250, label="name too long")
    create(".", label="dot")
    create(run.name("zero"), 0, label="zero partitions")
    create(run.name("rf3"), 1, 3, label="replication factor 3")
    create(run.name("rf0"), 1, 0, label="replication factor 0")
    create(run.name("unknown-config"), configs=[("no.such.config", "1")], label="unknown config")
    create(run.name("bad-value"), configs=[("retention.ms", "soon")], label="bad config value")
    create(run.name("bad-policy"), configs=[("cleanup.policy", "sometimes")], label="bad cleanup.policy")
    create(run.name("validate"), 4, validate_only=True, label="validate only")
    create(run.name("defaults"), -1, -1, label="defaults (-1, -1)")
    create(run.name("v2"), 1, version=2, label="v2")
    run.call(19, 7, {"topics": [{"name": run.name("dup"), "num_partitions": 1, "replication_factor": 1},
                                {"name": run.name("dup"), "num_partitions": 1, "replication_factor": 1}],
                     "timeout": 30000, "validate_only": False}, label="duplicate in request")
    wait_for_topic(run, topic, 2)  # Kafka's broker learns of the topic from the metadata log, a moment later
    run.call(3, 12, {"topics": [{"name": run.name("validate"), "topic_id": 0}, {"name": topic, "topic_id": 0}],
                     "allow_auto_topic_creation": False}, label="metadata after")


@scenario("create_topics/configs-returned", apis=(19,))
def _(run: Run) -> None:
    """CreateTopics v5+ answers the topic's configs (KIP-525): values, sources, read-only flags."""
    run.call(19, 7, {"topics": [{"name": run.name("t"), "num_partitions": 1, "replication_factor": 1,
                                 "configs": [{"name": "cleanup.policy", "value": "compact"},
                                             {"name": "retention.ms", "value": "1000"}]}],
                     "timeout": 30000, "validate_only": False})


@scenario("delete_topics/errors", apis=(20, 3))
def _(run: Run) -> None:
    """DeleteTopics: by name (v4, librdkafka; v6, Java), unknown name, by topic id (v6), unknown id."""
    a, b = run.name("a"), run.name("b")
    create_topic(run, a)
    created = create_topic(run, b)
    run.call(20, 4, {"topic_names": [a, run.name("absent")], "timeout": 30000})
    run.call(20, 6, {"topics": [{"name": None, "topic_id": created.topics[0].topic_id},
                                {"name": None, "topic_id": "00000000-0000-0000-0000-00000000abcd"}],
                     "timeout": 30000})

    def gone():  # Kafka's brokers learn of a deletion from the metadata log a moment later
        response = run.call(3, 12, {"topics": [{"name": a, "topic_id": 0}, {"name": b, "topic_id": 0}],
                                    "allow_auto_topic_creation": False}, record=False)
        return all(t.error_code == 3 for t in response.topics)

    run.wait_until(gone, timeout=10)
    run.call(3, 12, {"topics": [{"name": a, "topic_id": 0}, {"name": b, "topic_id": 0}],
                     "allow_auto_topic_creation": False}, label="metadata after")


@scenario("create_partitions/errors", apis=(37,))
def _(run: Run) -> None:
    """CreatePartitions v3: grow, same count (INVALID_PARTITIONS), fewer, unknown topic, validate_only,
    duplicate topic in one request."""
    topic = run.name("t")
    create_topic(run, topic, 2)

    def grow(name, count, validate_only=False, label=None):
        return run.call(37, 3, {"topics": [{"name": name, "count": count, "assignments": None}],
                                "timeout": 30000, "validate_only": validate_only}, label=label)

    grow(topic, 4, label="grow to 4")
    grow(topic, 4, label="same count")
    grow(topic, 2, label="fewer")
    grow(run.name("absent"), 3, label="unknown topic")
    grow(topic, 6, validate_only=True, label="validate only")
    run.call(37, 3, {"topics": [{"name": topic, "count": 8, "assignments": None},
                                {"name": topic, "count": 9, "assignments": None}],
                     "timeout": 30000, "validate_only": False}, label="duplicate topic")
    wait_for_topic(run, topic, 4)  # the partitions added, seen by Kafka's broker a moment after its answer
    run.call(3, 12, {"topics": [{"name": topic, "topic_id": 0}], "allow_auto_topic_creation": False},
             label="metadata after")


@scenario("describe_topic_partitions/paging", apis=(75,))
def _(run: Run) -> None:
    """DescribeTopicPartitions v0 (KIP-966, the Java Admin's describeTopics): a topic, an unknown one,
    a response limit that pages with a cursor."""
    topic = run.name("t")
    create_topic(run, topic, 3)
    run.call(75, 0, {"topics": [{"name": topic}, {"name": run.name("absent")}], "response_partition_limit": 2000,
                     "cursor": None})
    first = run.call(75, 0, {"topics": [{"name": topic}], "response_partition_limit": 2, "cursor": None},
                     label="limit 2")
    cursor = first.next_cursor
    if cursor is not None:
        run.call(75, 0, {"topics": [{"name": topic}], "response_partition_limit": 2,
                         "cursor": {"topic_name": cursor.topic_name, "partition_index": cursor.partition_index}},
                 label="next page")
