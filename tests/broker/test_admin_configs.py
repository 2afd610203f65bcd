"""AlterConfigs, IncrementalAlterConfigs and DescribeConfigs (KIP-226 for the dynamic ones): topic configs and dynamic
broker configs applied live, kept across restarts, and described with Kafka's sources and synonyms;
through exact requests for the refusals, and through Java's Admin, confluent-kafka and kafka-python."""

import logging

import pytest

from minibroker.admin_client import AdminClient
from tests.support.metadata import metadata_of
from tests.support.batches import make_batch
from tests.support.wire import create_topic_with as create

SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
TOPIC, BROKER = 2, 4
DYNAMIC_TOPIC, DYNAMIC_BROKER, DYNAMIC_DEFAULT, STATIC, DEFAULT = 1, 2, 3, 4, 5



def incremental(admin, *resources, validate_only=False, version=None):
    """resources: (type, name, [(key, op, value), ...]); returns [(error code, message), ...]."""
    body = {"resources": [{"resource_type": t, "resource_name": n,
                           "configs": [{"name": k, "config_operation": op, "value": v} for k, op, v in ops]}
                          for t, n, ops in resources], "validate_only": validate_only}
    return [(int(r.error_code), r.error_message) for r in admin.call(44, body, version=version).responses]


def legacy(admin, *resources, validate_only=False, version=None):
    body = {"resources": [{"resource_type": t, "resource_name": n,
                           "configs": [{"name": k, "value": v} for k, v in configs]}
                          for t, n, configs in resources], "validate_only": validate_only}
    return [(int(r.error_code), r.error_message) for r in admin.call(33, body, version=version).responses]


def described(admin, resource_type, name, keys=None):
    response = admin.call(32, {"resources": [{"resource_type": resource_type, "resource_name": name,
                                              "configuration_keys": keys}],
                               "include_synonyms": True, "include_documentation": False})
    (result,) = response.results
    assert result.error_code == 0, result.error_message
    return {c.name: (c.value, c.config_source, [(s.name, s.value, s.source) for s in c.synonyms], c.read_only)
            for c in result.configs}


# ---- topic configs over the wire ---------------------------------------------------------------------

def test_incremental_operations_on_a_topic(admin, broker, unique):
    """SET, DELETE, APPEND and SUBTRACT in order, on the overrides; APPEND starts from the default
    when the key is unset and adds only what is missing."""
    topic = unique("inc")
    create(admin, topic, configs=[("segment.ms", "100000")])
    assert incremental(admin, (TOPIC, topic, [("retention.ms", SET, "1234"), ("segment.ms", DELETE, None),
                                              ("cleanup.policy", APPEND, "compact,delete")])) == [(0, None)]
    assert broker.broker.logs.topic(topic).overrides == {"retention.ms": "1234", "cleanup.policy": "delete,compact"}
    assert incremental(admin, (TOPIC, topic, [("cleanup.policy", SUBTRACT, "delete")]), version=0) == [(0, None)]
    info = broker.broker.logs.topic(topic)
    assert info.overrides == {"retention.ms": "1234", "cleanup.policy": "compact"}
    assert broker.broker.logs.log(topic, 0).config.retention_ms == 1234  # the open log has it
    configs = described(admin, TOPIC, topic, ["retention.ms", "segment.ms", "cleanup.policy"])
    assert configs["retention.ms"][:2] == ("1234", DYNAMIC_TOPIC)
    assert configs["segment.ms"][:2] == ("604800000", DEFAULT)
    assert configs["cleanup.policy"][2] == [("cleanup.policy", "compact", DYNAMIC_TOPIC),
                                            ("log.cleanup.policy", "delete", DEFAULT)]


@pytest.mark.parametrize("ops, code, message", [
    ([("retention.ms", SET, "abc")], 40, "Invalid config retention.ms: value 'abc' is not a number"),
    ([("segment.bytes", SET, "1000")], 40, "Invalid config segment.bytes: value 1000 must be at least 1048576"),
    ([("no.such.config", SET, "1")], 40, "Unknown topic config name: no.such.config"),
    ([("retention.ms", APPEND, "1")], 40, "Can't APPEND to key retention.ms because its type is not LIST."),
    ([("retention.ms", SUBTRACT, "1")], 40, "Can't SUBTRACT to key retention.ms because its type is not LIST."),
    ([("cleanup.policy", APPEND, "forever")], 40, "Invalid config cleanup.policy: 'forever' is not one of compact, delete"),
    ([("min.compaction.lag.ms", SET, "10"), ("max.compaction.lag.ms", SET, "5")], 40,
     "Invalid config min.compaction.lag.ms: conflict topic config setting min.compaction.lag.ms (10) > max.compaction.lag.ms (5)"),
    ([("remote.storage.enable", SET, "true")], 40, "Invalid config remote.storage.enable: Tiered Storage "
     "functionality is disabled in the broker. Topic cannot be configured with remote log storage."),
    ([("retention.ms", SET, "1"), ("retention.ms", DELETE, None)], 42, "Error due to duplicate config keys"),
    ([("retention.ms", SET, None), ("segment.ms", SET, None)], 42, "Null value not supported for : retention.ms, segment.ms"),
    ([("retention.ms", 9, "1")], 42, "Unknown operations type 9"),
])
def test_incremental_refusals_change_nothing(admin, broker, unique, ops, code, message):
    """Kafka's errors and messages, the key named; a refused resource keeps all its configs."""
    topic = unique("refused")
    create(admin, topic, configs=[("retention.ms", "1000")])
    assert incremental(admin, (TOPIC, topic, [("segment.ms", SET, "99999")] * 0 + ops)) == [(code, message)]
    assert broker.broker.logs.topic(topic).overrides == {"retention.ms": "1000"}


def test_resource_errors(admin, broker, unique):
    """Unknown topic (after its configs are found valid, as the controller checks), default topic,
    illegal name, a resource twice (both answered), unknown resource type; each resource on its own."""
    topic = unique("res")
    create(admin, topic)
    missing = unique("missing")
    answers = incremental(admin, (TOPIC, missing, [("retention.ms", SET, "1")]),
                          (TOPIC, missing + "x", [("retention.ms", SET, "x")]),
                          (TOPIC, "", [("retention.ms", SET, "1")]),
                          (TOPIC, "a/b", [("retention.ms", SET, "1")]),
                          (TOPIC, topic, [("retention.ms", SET, "1")]),
                          (TOPIC, topic, [("retention.ms", SET, "2")]),
                          (32, "group", [("consumer.session.timeout.ms", SET, "1")]),
                          (99, "thing", [("a", SET, "1")]))
    assert answers[0] == (3, f"The topic '{missing}' does not exist.")
    assert answers[1][0] == 40  # the bad value is found before the missing topic
    assert answers[2] == (42, "Default topic resources are not allowed.")
    assert answers[3][0] == 17
    assert answers[4] == answers[5] == (42, "Each resource must appear at most once.")
    # GROUP (32, Kafka 4's group configs): a value below the broker's minimum session is refused.
    assert answers[6][0] == 40 and "consumer.session.timeout.ms" in answers[6][1]
    assert answers[7] == (42, "Unknown resource type 99")
    assert broker.broker.logs.topic(topic).overrides == {}


def test_validate_only_and_legacy_alter_configs(admin, broker, unique):
    """validate_only checks and changes nothing; legacy AlterConfigs (v0-2) makes the given keys the
    topic's whole set of overrides."""
    topic = unique("legacy")
    create(admin, topic, configs=[("retention.ms", "1000"), ("segment.ms", "100000")])
    assert incremental(admin, (TOPIC, topic, [("retention.ms", SET, "5")]), validate_only=True) == [(0, None)]
    assert legacy(admin, (TOPIC, topic, [("max.message.bytes", "5000")]), validate_only=True) == [(0, None)]
    assert broker.broker.logs.topic(topic).overrides == {"retention.ms": "1000", "segment.ms": "100000"}
    for version in (0, 2):
        assert legacy(admin, (TOPIC, topic, [("max.message.bytes", str(5000 + version))]), version=version) == [(0, None)]
        assert broker.broker.logs.topic(topic).overrides == {"max.message.bytes": str(5000 + version)}
    assert legacy(admin, (TOPIC, topic, [("max.message.bytes", None)]))[0][0] == 42
    assert legacy(admin, (TOPIC, topic, [("retention.ms", "x")]))[0][0] == 40


def test_topic_configs_apply_live_and_survive_a_restart(start_broker, unique, tmp_path):
    """max.message.bytes refuses the next bigger batch, message.timestamp.type=LogAppendTime stamps
    the next append, retention.ms=0 lets retention delete the closed segments; the overrides are in
    the topic file after a restart."""
    topic = unique("live")
    data = tmp_path / "live"
    with start_broker(data) as running, AdminClient(running.bootstrap) as admin:
        create(admin, topic, configs=[("internal.segment.bytes", "200")])

        def produce(value: bytes):
            response = admin.call(0, {"acks": -1, "timeout": 5000, "transactional_id": None, "topic_data": [
                {"name": topic, "partition_data": [{"index": 0, "records": make_batch([(None, value)])}]}]}, version=9)
            return response.responses[0].partition_responses[0]

        assert produce(b"x" * 400).error_code == 0
        assert incremental(admin, (TOPIC, topic, [("max.message.bytes", SET, "300"),
                                                  ("message.timestamp.type", SET, "LogAppendTime")])) == [(0, None)]
        refused = produce(b"x" * 400)
        assert refused.error_code == 10  # MESSAGE_TOO_LARGE
        stamped = produce(b"y" * 150)
        assert stamped.error_code == 0 and stamped.log_append_time is not None
        assert produce(b"z" * 150).base_offset == 2
        plog = running.broker.logs.log(topic, 0)
        assert len(plog.segments) == 3
        assert incremental(admin, (TOPIC, topic, [("retention.ms", SET, "0")])) == [(0, None)]
        deleted = running.in_broker(lambda: running.broker.logs.enforce_retention(2**62))
        assert deleted == 2 and plog.log_start_offset == 2
    with start_broker(data) as running:
        info = running.broker.logs.topic(topic)
        assert info.overrides == {"internal.segment.bytes": "200", "max.message.bytes": "300",
                                  "message.timestamp.type": "LogAppendTime", "retention.ms": "0"}
        assert running.broker.logs.log(topic, 0).config.max_message_bytes == 300


# ---- dynamic broker configs ----------------------------------------------------------------------------

def test_broker_configs_cluster_default_and_per_broker(admin, broker, unique):
    """A cluster-wide default reaches every topic without its own override at once; a per-broker
    value wins over it; each is described with its source and Kafka's synonyms; the resource named
    "" lists the dynamic defaults only."""
    node = str(broker.broker.node_id)
    own, inherits = unique("own"), unique("inherits")
    create(admin, own, configs=[("retention.ms", "1000")])
    create(admin, inherits)
    assert incremental(admin, (BROKER, "", [("log.retention.ms", SET, "600000"),
                                            ("log.segment.bytes", SET, "2097152")])) == [(0, None)]
    logs = broker.broker.logs
    assert logs.log(inherits, 0).config.retention_ms == 600000 and logs.log(own, 0).config.retention_ms == 1000
    assert logs.log(own, 0).config.segment_bytes == 2097152
    assert incremental(admin, (BROKER, node, [("log.retention.ms", SET, "700000")])) == [(0, None)]
    assert logs.log(inherits, 0).config.retention_ms == 700000

    per_broker = described(admin, BROKER, node, ["log.retention.ms", "log.retention.hours", "log.segment.bytes",
                                                  "num.partitions"])
    assert per_broker["log.retention.ms"] == ("700000", DYNAMIC_BROKER, [
        ("log.retention.ms", "700000", DYNAMIC_BROKER), ("log.retention.ms", "600000", DYNAMIC_DEFAULT),
        ("log.retention.hours", "168", DEFAULT)], False)
    assert per_broker["log.retention.hours"] == ("168", DEFAULT, [("log.retention.hours", "168", DEFAULT)], True)
    assert per_broker["num.partitions"][1] == DEFAULT and per_broker["num.partitions"][3] is True
    assert described(admin, BROKER, "") == {
        "log.retention.ms": ("600000", DYNAMIC_DEFAULT, [("log.retention.ms", "600000", DYNAMIC_DEFAULT)], False),
        "log.segment.bytes": ("2097152", DYNAMIC_DEFAULT, [("log.segment.bytes", "2097152", DYNAMIC_DEFAULT)], False)}
    topic = described(admin, TOPIC, inherits, ["retention.ms", "segment.bytes"])
    assert topic["retention.ms"][:3] == ("700000", DYNAMIC_BROKER, [
        ("log.retention.ms", "700000", DYNAMIC_BROKER), ("log.retention.ms", "600000", DYNAMIC_DEFAULT),
        ("log.retention.hours", "168", DEFAULT)])
    assert topic["segment.bytes"][:2] == ("2097152", DYNAMIC_DEFAULT)

    assert incremental(admin, (BROKER, node, [("log.retention.ms", DELETE, None)])) == [(0, None)]
    assert logs.log(inherits, 0).config.retention_ms == 600000


def test_broker_config_refusals(admin, broker):
    """Read-only keys and bad values are INVALID_REQUEST, as Kafka's dynamic validation answers; the
    resource must be "" or this broker's id; APPEND only to a LIST key; nothing changes."""
    node = broker.broker.node_id
    assert incremental(admin, (BROKER, str(node), [("log.retention.hours", SET, "5"), ("num.partitions", SET, "3")])) == [
        (42, "Cannot update these configs dynamically: Set(log.retention.hours, num.partitions)")]
    assert incremental(admin, (BROKER, "", [("log.retention.ms", SET, "soon")])) == [
        (42, "invalid value for log.retention.ms: value 'soon' is not a number")]
    assert incremental(admin, (BROKER, "", [("quota.window.num", SET, "0")]))[0][0] == 42
    assert incremental(admin, (BROKER, str(node + 1), [("log.retention.ms", SET, "1")])) == [
        (42, f"Unexpected broker id, expected {node}, but received {node + 1}")]
    assert incremental(admin, (BROKER, "x", [("log.retention.ms", SET, "1")])) == [
        (42, "Node id must be an integer, but it is: x")]
    assert incremental(admin, (BROKER, "", [("log.retention.ms", APPEND, "1")])) == [
        (40, "Config value append is not allowed for config key: log.retention.ms")]
    assert incremental(admin, (BROKER, "", [("log.cleanup.policy", APPEND, "compact")])) == [(0, None)]
    assert broker.broker.config.log_config.cleanup_policy == "delete,compact"
    assert legacy(admin, (BROKER, "", [("sasl.users", "eve:pw")])) == [
        (42, "Cannot update these configs dynamically: Set(sasl.users)")]
    assert broker.broker.dynamic_configs.level(False) == {"log.cleanup.policy": "delete,compact"}


def test_a_default_that_contradicts_a_topic_is_refused(admin, broker, unique):
    topic = unique("lag")
    create(admin, topic, configs=[("min.compaction.lag.ms", "1000")])
    ((code, message),) = incremental(admin, (BROKER, "", [("log.cleaner.max.compaction.lag.ms", SET, "10")]))
    assert code == 42 and topic in message
    assert broker.broker.dynamic_configs.level(False) == {}


def test_quota_window_is_dynamic(admin, broker):
    """quota.window.num / quota.window.size.seconds, static in Kafka, apply to the quota managers at
    once here (they start new windows)."""
    quotas = broker.broker.quotas
    assert incremental(admin, (BROKER, "", [("quota.window.num", SET, "3"),
                                            ("quota.window.size.seconds", SET, "2")])) == [(0, None)]
    for manager in quotas.managers:
        assert (manager.metric_config.samples, manager.metric_config.window_ms) == (3, 2000)
    assert quotas.request.max_throttle_time_ms == 2000


def test_dynamic_broker_configs_survive_a_restart(start_broker, tmp_path, unique, caplog):
    """The metadata log holds both levels (ConfigRecords of the BROKER resource, "" for the cluster
    default, the node id for the broker); on restart they are in force again over the properties;
    a stored value no longer valid is ignored with a log line."""
    data = tmp_path / "dyn"
    topic = unique("after")
    with start_broker(data, log_retention_hours="1") as running, AdminClient(running.bootstrap) as admin:
        node = str(running.broker.node_id)
        create(admin, topic)
        assert incremental(admin, (BROKER, "", [("log.retention.ms", SET, "120000"), ("plugin.custom", SET, "x")]),
                           (BROKER, node, [("min.insync.replicas", SET, "2")])) == [(0, None), (0, None)]
    with metadata_of(data) as controller:
        assert controller.image.configs.get(4, "") == {"log.retention.ms": "120000", "plugin.custom": "x"}
        assert controller.image.configs.get(4, node) == {"min.insync.replicas": "2"}
    with start_broker(data, log_retention_hours="1") as running, AdminClient(running.bootstrap) as admin:
        assert running.broker.logs.log(topic, 0).config.retention_ms == 120000
        assert running.broker.logs.log(topic, 0).config.min_insync_replicas == 2
        configs = described(admin, TOPIC, topic, ["retention.ms"])
        assert configs["retention.ms"][2] == [("log.retention.ms", "120000", DYNAMIC_DEFAULT),
                                              ("log.retention.hours", "1", STATIC), ("log.retention.hours", "168", DEFAULT)]
        assert described(admin, BROKER, node, ["plugin.custom"])["plugin.custom"][:2] == ("x", DYNAMIC_DEFAULT)
    with metadata_of(data) as controller:  # a value this version does not accept
        controller.replace_configs(4, node, {"min.insync.replicas": "none"}, 0)
    with caplog.at_level(logging.ERROR), start_broker(data) as running:
        assert running.broker.config.log_config.min_insync_replicas == 1
        assert running.broker.config.log_config.retention_ms == 120000
    assert "ignoring the broker config min.insync.replicas='none'" in caplog.text


# ---- real clients --------------------------------------------------------------------------------------

@pytest.mark.interop
def test_java_admin_alters_and_describes_configs(java, broker, unique):
    """Java's Admin (incrementalAlterConfigs and describeConfigs with synonyms; Java 4 has no legacy
    alterConfigs): Kafka's exceptions for the refusals, the sources and synonyms Kafka reports."""
    topic = unique("java-cfg")
    b, node = broker.bootstrap, str(broker.broker.node_id)
    out = java.run(["create-topic", b, topic, 1],
                   ["alter-configs", b, "TOPIC", topic, "SET:retention.ms=86400000;APPEND:cleanup.policy=compact"],
                   ["alter-configs", b, "TOPIC", topic, "SET:retention.ms=tomorrow"],
                   ["alter-configs", b, "TOPIC", topic, "SET:segment.ms=1000", "validate-only"],
                   ["alter-configs", b, "TOPIC", unique("none"), "SET:retention.ms=1"],
                   ["alter-configs", b, "BROKER", "", "SET:log.retention.ms=3600000"],
                   ["alter-configs", b, "BROKER", node, "SET:log.retention.hours=1"],
                   ["describe-configs", b, "TOPIC", topic, "retention.ms,cleanup.policy,segment.ms,segment.bytes"],
                   ["describe-configs", b, "BROKER", node, "log.retention.ms,log.retention.hours"])
    altered = [(line["error"], line["message"]) for line in out if line["type"] == "configs-altered"]
    assert altered[0] == (None, None)
    assert altered[1] == ("InvalidConfigurationException", "Invalid config retention.ms: value 'tomorrow' is not a number")
    assert altered[2] == (None, None)
    assert altered[3][0] == "UnknownTopicOrPartitionException"
    assert altered[4] == (None, None)
    assert altered[5] == ("InvalidRequestException", "Cannot update these configs dynamically: Set(log.retention.hours)")
    configs = {line["name"]: line for line in out if line["type"] == "config"}
    assert (configs["retention.ms"]["value"], configs["retention.ms"]["source"]) == ("86400000", "DYNAMIC_TOPIC_CONFIG")
    assert configs["retention.ms"]["synonyms"] == [
        ["retention.ms", "86400000", "DYNAMIC_TOPIC_CONFIG"],
        ["log.retention.ms", "3600000", "DYNAMIC_DEFAULT_BROKER_CONFIG"],
        ["log.retention.hours", "168", "DEFAULT_CONFIG"]]
    assert (configs["cleanup.policy"]["value"], configs["cleanup.policy"]["config_type"]) == ("delete,compact", "LIST")
    assert (configs["segment.ms"]["value"], configs["segment.ms"]["source"]) == ("604800000", "DEFAULT_CONFIG")
    assert configs["segment.bytes"]["synonyms"] == [["log.segment.bytes", "1073741824", "DEFAULT_CONFIG"]]
    assert (configs["log.retention.ms"]["source"], configs["log.retention.ms"]["read_only"]) == (
        "DYNAMIC_DEFAULT_BROKER_CONFIG", False)
    assert configs["log.retention.hours"]["read_only"] is True
    assert broker.broker.logs.log(topic, 0).config.retention_ms == 86400000


@pytest.mark.interop
def test_confluent_kafka_alters_and_describes_configs(broker, unique):
    """confluent-kafka's incremental_alter_configs, legacy alter_configs and describe_configs."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource,
                                       NewTopic, ResourceType)

    topic = unique("cf-cfg")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    try:
        for future in admin.create_topics([NewTopic(topic, 1)]).values():
            future.result(timeout=30)
        resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
            ConfigEntry("retention.bytes", "1048576", incremental_operation=AlterConfigOpType.SET),
            ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND)])
        for future in admin.incremental_alter_configs([resource]).values():
            future.result(timeout=30)
        assert broker.broker.logs.log(topic, 0).config.retention_bytes == 1048576
        bad = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
            ConfigEntry("segment.bytes", "12", incremental_operation=AlterConfigOpType.SET)])
        (future,) = admin.incremental_alter_configs([bad]).values()
        with pytest.raises(KafkaException, match="segment.bytes"):
            future.result(timeout=30)
        with pytest.warns(DeprecationWarning):  # the legacy AlterConfigs, still sent by this call
            (future,) = admin.alter_configs([ConfigResource(ResourceType.TOPIC, topic,
                                                            set_config={"segment.ms": "3600000"})]).values()
        future.result(timeout=30)
        assert broker.broker.logs.topic(topic).overrides == {"segment.ms": "3600000"}  # the legacy call replaces
        (future,) = admin.describe_configs([ConfigResource(ResourceType.TOPIC, topic)]).values()
        entries = future.result(timeout=30)
        assert entries["segment.ms"].value == "3600000"
        assert entries["segment.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
        assert entries["retention.bytes"].source == ConfigSource.DEFAULT_CONFIG.value
    finally:
        del admin


@pytest.mark.interop
def test_kafka_python_alters_and_describes_configs(broker, unique):
    """kafka-python's alter_configs, incremental (its default against this broker) and legacy, which
    first reads the modified configs back so as not to reset them."""
    from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient, NewTopic

    topic = unique("kp-cfg")
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        admin.create_topics([NewTopic(topic, 1, 1, topic_configs={"retention.ms": "1000"})])
        admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic, configs={"segment.ms": "7200000"})])
        assert broker.broker.logs.topic(topic).overrides == {"retention.ms": "1000", "segment.ms": "7200000"}
        admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic, configs={"max.message.bytes": "2000"})],
                            incremental=False)
        assert broker.broker.logs.topic(topic).overrides == {
            "retention.ms": "1000", "segment.ms": "7200000", "max.message.bytes": "2000"}
        modified = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
        assert set(modified["topic"][topic]) == {"retention.ms", "segment.ms", "max.message.bytes"}
        admin.alter_configs([ConfigResource(ConfigResourceType.BROKER, str(broker.broker.node_id),
                                            configs={"log.retention.bytes": "1073741824"})])
        assert broker.broker.config.log_config.retention_bytes == 1073741824
    finally:
        admin.close()


def test_group_configs_are_described_set_and_govern_the_consumer_group(admin, broker, unique):
    """The GROUP resource (KIP-848's group configs): a group's consumer.heartbeat.interval.ms is what
    its members are told in ConsumerGroupHeartbeat; DescribeConfigs shows it as GROUP_CONFIG (8)
    with the broker setting as its synonym; deleting it returns to the broker's value."""
    group, topic = unique("g"), unique("t")
    create(admin, topic)
    assert incremental(admin, (32, group, [("consumer.heartbeat.interval.ms", SET, "3000")])) == [(0, None)]
    described = admin.call(32, {"resources": [{"resource_type": 32, "resource_name": group,
                                               "configuration_keys": ["consumer.heartbeat.interval.ms"]}],
                                "include_synonyms": True, "include_documentation": False}, version=4)
    (entry,) = described.results[0].configs
    assert (entry.value, entry.config_source) == ("3000", 8)
    assert [(s.name, s.source) for s in entry.synonyms] == [
        ("consumer.heartbeat.interval.ms", 8), ("group.consumer.heartbeat.interval.ms", 5)]

    def heartbeat(member_id):
        return admin.call(68, {"group_id": group, "member_id": member_id, "member_epoch": 0, "instance_id": None,
                               "rack_id": None, "rebalance_timeout": 10000, "subscribed_topic_names": [topic],
                               "subscribed_topic_regex": None, "server_assignor": None, "topic_partitions": []},
                          version=1)

    assert heartbeat("member-a").heartbeat_interval.total_seconds() == 3.0
    assert incremental(admin, (32, group, [("consumer.heartbeat.interval.ms", 1, None)])) == [(0, None)]
    assert heartbeat("member-b").heartbeat_interval.total_seconds() == 1.0  # the broker's setting
