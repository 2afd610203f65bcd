"""Configs (DescribeConfigs, AlterConfigs, IncrementalAlterConfigs, ListConfigResources; topic,
broker and group resources), the cluster (DescribeCluster, DescribeLogDirs, AlterReplicaLogDirs,
ElectLeaders, Alter/ListPartitionReassignments, DescribeQuorum), client quotas and SCRAM users."""

from __future__ import annotations

import time

from tests.conformance.corpus import create_topic, produce, records
from tests.support.conformance import Run, StepFailed, scenario

TOPIC, BROKER, BROKER_LOGGER, GROUP = 2, 4, 8, 32
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
TOPIC_CONFIG, GROUP_CONFIG = 1, 8  # DescribeConfigs' config_source of a resource's own setting
DYNAMIC_DEFAULT_BROKER_CONFIG = 3  # ... of a cluster-wide broker default


def describe_configs(run: Run, resource_type: int, name: str, keys=None, *, version: int = 4, synonyms=True,
                     label: str | None = None, record: bool = True):
    return run.call(32, version, {"resources": [{"resource_type": resource_type, "resource_name": name,
                                                 "configuration_keys": keys}],
                                  "include_synonyms": synonyms, "include_documentation": False}, label=label,
                    record=record)


def wait_for_configs(run: Run, resource_type: int, name: str, values: dict[str, str | None],
                     sources: tuple[int, ...] = (TOPIC_CONFIG, GROUP_CONFIG)) -> None:
    """Until a resource's dynamic configs are `values` (None: not set on the resource itself). Kafka
    applies an alteration through its metadata log, a moment later (longer on a loaded machine)."""
    def settled() -> bool:
        (result,) = describe_configs(run, resource_type, name, list(values), synonyms=False, record=False).results
        own = {c.name: c.value for c in result.configs if c.config_source in sources}
        return all(own.get(key) == value for key, value in values.items())
    _settle(run, settled, f"{name}'s configs {values}")


def wait_for_quotas(run: Run, components: list[dict], values: dict[str, float]) -> None:
    """Until DescribeClientQuotas (strict) answers `values` for the entity (empty: no quota). Kafka
    applies a quota change through its metadata log, a moment later (longer on a loaded machine)."""
    def settled() -> bool:
        answer = run.call(48, 1, {"components": components, "strict": True}, record=False)
        got = {v.key: v.value for entry in answer.entries for v in entry.values}
        return got == values
    _settle(run, settled, f"the quotas of {components}: {values}")


def _settle(run: Run, settled, what: str) -> None:
    """A wait for what the scenario itself set: never reaching it is a bug of the scenario (a harness
    error, loud even when both brokers time out alike), not an observation of the brokers."""
    try:
        run.wait_until(settled, timeout=30)
    except StepFailed:
        raise RuntimeError(f"never settled on {what}") from None


def incremental(run: Run, resource_type: int, name: str, ops, *, validate_only=False, label: str | None = None):
    return run.call(44, 1, {"resources": [{"resource_type": resource_type, "resource_name": name, "configs": [
        {"name": k, "config_operation": op, "value": v} for k, op, v in ops]}], "validate_only": validate_only},
        label=label)


@scenario("configs/topic", apis=(32, 33, 44))
def _(run: Run) -> None:
    """A topic's configs: described with synonyms (v1, v4) and without keys (all); set with
    IncrementalAlterConfigs (SET, DELETE, APPEND, SUBTRACT) and AlterConfigs (v0 Java's old admin,
    v1); invalid values, unknown keys, an unknown topic, validate_only; SUBTRACT of the last
    cleanup.policy value (an empty list, Kafka 4.2+: delete with infinite retention)."""
    topic = run.name("t")
    create_topic(run, topic, configs={"retention.ms": "3600000"})
    keys = ["retention.ms", "cleanup.policy", "segment.bytes", "min.insync.replicas", "message.timestamp.type",
            "max.message.bytes", "compression.type"]
    describe_configs(run, TOPIC, topic, keys, version=1)
    describe_configs(run, TOPIC, topic, None, label="all configs", synonyms=False)
    incremental(run, TOPIC, topic, [("retention.ms", SET, "7200000"), ("segment.ms", SET, "600000")], label="set")
    incremental(run, TOPIC, topic, [("cleanup.policy", APPEND, "compact")], label="append compact")
    wait_for_configs(run, TOPIC, topic, {"retention.ms": "7200000", "segment.ms": "600000",
                                         "cleanup.policy": "delete,compact"})
    describe_configs(run, TOPIC, topic, keys, label="after append")
    incremental(run, TOPIC, topic, [("cleanup.policy", SUBTRACT, "delete")], label="subtract delete")
    incremental(run, TOPIC, topic, [("cleanup.policy", SUBTRACT, "compact")], label="subtract the last value")
    wait_for_configs(run, TOPIC, topic, {"cleanup.policy": ""})
    describe_configs(run, TOPIC, topic, ["cleanup.policy", "retention.ms"], label="empty cleanup.policy")
    incremental(run, TOPIC, topic, [("cleanup.policy", SET, "")], label="set an empty cleanup.policy")
    incremental(run, TOPIC, topic, [("retention.ms", DELETE, None)], label="delete")
    incremental(run, TOPIC, topic, [("retention.ms", SET, "soon")], label="invalid value")
    incremental(run, TOPIC, topic, [("no.such.config", SET, "1")], label="unknown key")
    incremental(run, TOPIC, topic, [("cleanup.policy", SET, "sometimes")], label="invalid cleanup.policy")
    incremental(run, TOPIC, topic, [("retention.ms", 9, "1")], label="unknown operation")
    incremental(run, TOPIC, topic, [("retention.ms", APPEND, "1")], label="append to a non-list")
    incremental(run, TOPIC, run.name("absent"), [("retention.ms", SET, "1")], label="unknown topic")
    incremental(run, TOPIC, topic, [("retention.ms", SET, "1")], validate_only=True, label="validate only")
    for version in (0, 1):
        run.call(33, version, {"resources": [{"resource_type": TOPIC, "resource_name": topic, "configs": [
            {"name": "retention.bytes", "value": "1000000"}]}], "validate_only": False})
    wait_for_configs(run, TOPIC, topic, {"retention.bytes": "1000000"})
    describe_configs(run, TOPIC, topic, keys + ["retention.bytes", "segment.ms"], label="after all")
    describe_configs(run, TOPIC, run.name("absent"), None, label="unknown topic")


@scenario("configs/broker", apis=(32, 44, 33))
def _(run: Run) -> None:
    """Broker configs: a few keys described with synonyms (values, sources, read-only flags),
    group.initial.rebalance.delay.ms among them; a dynamic broker default set and removed; a
    read-only key; an unknown broker id; BROKER_LOGGER."""
    keys = ["num.partitions", "log.retention.hours", "log.retention.ms", "message.max.bytes",
            "auto.create.topics.enable", "group.initial.rebalance.delay.ms", "group.min.session.timeout.ms",
            "group.consumer.session.timeout.ms", "group.consumer.heartbeat.interval.ms",
            "offsets.retention.minutes", "transaction.max.timeout.ms", "log.cleaner.enable"]
    describe_configs(run, BROKER, "1", keys)
    incremental(run, BROKER, "", [("log.retention.ms", SET, "86400000")], label="cluster default set")
    wait_for_configs(run, BROKER, "1", {"log.retention.ms": "86400000"}, sources=(DYNAMIC_DEFAULT_BROKER_CONFIG,))
    describe_configs(run, BROKER, "1", ["log.retention.ms", "log.retention.hours"], label="after set")
    incremental(run, BROKER, "", [("log.retention.ms", DELETE, None)], label="cluster default removed")
    incremental(run, BROKER, "1", [("node.id", SET, "2")], label="a read-only key")
    describe_configs(run, BROKER, "7", ["num.partitions"], label="unknown broker id")
    describe_configs(run, BROKER_LOGGER, "1", ["kafka.server.KafkaApis"], label="broker logger")


@scenario("configs/group", apis=(32, 44, 74))
def _(run: Run) -> None:
    """Group configs (KIP-848, resource type 32): consumer.session.timeout.ms,
    consumer.heartbeat.interval.ms described, set and validated against the broker's bounds;
    ListConfigResources lists the group."""
    group = run.name("g")
    group_keys = ["consumer.session.timeout.ms", "consumer.heartbeat.interval.ms"]
    describe_configs(run, GROUP, group, group_keys, label="defaults")
    incremental(run, GROUP, group, [("consumer.session.timeout.ms", SET, "50000"),
                                    ("consumer.heartbeat.interval.ms", SET, "6000")], label="set")
    wait_for_configs(run, GROUP, group, {"consumer.session.timeout.ms": "50000", "consumer.heartbeat.interval.ms": "6000"})
    describe_configs(run, GROUP, group, group_keys, label="after set")
    incremental(run, GROUP, group, [("consumer.session.timeout.ms", SET, "1")], label="below the broker minimum")
    incremental(run, GROUP, group, [("consumer.heartbeat.interval.ms", SET, "abc")], label="not a number")
    incremental(run, GROUP, group, [("no.such.group.config", SET, "1")], label="unknown key")
    incremental(run, GROUP, group, [("consumer.session.timeout.ms", DELETE, None)], label="delete")
    wait_for_configs(run, GROUP, group, {"consumer.session.timeout.ms": None, "consumer.heartbeat.interval.ms": "6000"})
    describe_configs(run, GROUP, group, group_keys, label="after delete")
    listed = run.call(74, 1, {"resource_types": [GROUP]}, record=False)
    run.note("groups listed", sorted(r.resource_name for r in listed.config_resources if r.resource_name == group))


@scenario("cluster/describe", apis=(60, 3))
def _(run: Run) -> None:
    """DescribeCluster (v0, v1 with endpoint type, v2 with fenced brokers) with the cluster's
    authorized operations; Metadata's cluster operations (v8-v10)."""
    for version in (0, 1, 2):
        run.call(60, version, {"include_cluster_authorized_operations": True, "endpoint_type": 1,
                               "include_fenced_brokers": True})
    run.call(60, 1, {"include_cluster_authorized_operations": False, "endpoint_type": 2}, label="controller endpoints")
    run.call(3, 9, {"topics": [], "allow_auto_topic_creation": False, "include_cluster_authorized_operations": True,
                    "include_topic_authorized_operations": False}, label="Metadata v9 cluster operations")


@scenario("cluster/log-dirs-and-replicas", apis=(35, 34, 43, 45, 46))
def _(run: Run) -> None:
    """DescribeLogDirs of a topic (sizes), AlterReplicaLogDirs to an unknown dir, ElectLeaders
    (preferred: ELECTION_NOT_NEEDED), partition reassignments to the same and another broker,
    ListPartitionReassignments."""
    topic = run.name("t")
    create_topic(run, topic, 2)
    produce(run, topic, records(["a", "b"]), record=False)
    for version in (1, 4):
        run.call(35, version, {"topics": [{"topic": topic, "partitions": [0, 1, 7]}]},
                 drop=("log_dir", "total_bytes", "usable_bytes"))
    run.call(34, 2, {"dirs": [{"path": "/nonexistent", "topics": [{"name": topic, "partitions": [0]}]}]})
    run.call(43, 2, {"election_type": 0, "topic_partitions": [{"topic": topic, "partitions": [0, 9]}], "timeout": 30000})
    run.call(43, 2, {"election_type": 1, "topic_partitions": [{"topic": run.name("absent"), "partitions": [0]}],
                     "timeout": 30000}, label="unclean election, unknown topic")
    run.call(45, 0, {"timeout": 30000, "topics": [{"name": topic, "partitions": [
        {"partition_index": 0, "replicas": [1]}, {"partition_index": 1, "replicas": [2]}]}]})
    run.call(45, 0, {"timeout": 30000, "topics": [{"name": run.name("absent"), "partitions": [
        {"partition_index": 0, "replicas": [1]}]}]}, label="reassign an unknown topic")
    run.call(46, 0, {"timeout": 30000, "topics": None})


@scenario("cluster/describe-quorum", apis=(55,))
def _(run: Run) -> None:
    """DescribeQuorum of __cluster_metadata (the one KRaft node): leader and voter, and of another
    topic (INVALID_REQUEST / UNKNOWN_TOPIC_OR_PARTITION)."""
    for version in (0, 2):
        run.call(55, version, {"topics": [{"topic_name": "__cluster_metadata", "partitions": [{"partition_index": 0}]}]},
                 drop=("leader_epoch", "high_watermark", "log_end_offset", "replica_directory_id", "nodes"))
    run.call(55, 2, {"topics": [{"topic_name": "other", "partitions": [{"partition_index": 0}]}]}, label="other topic")


@scenario("quotas/client-quotas", apis=(48, 49))
def _(run: Run) -> None:
    """AlterClientQuotas and DescribeClientQuotas: a user and client-id quota set, described by
    exact match, by default and by any; removed; invalid keys, values and entity combinations."""
    user, client = run.name("user"), run.name("client")
    entity = [{"entity_type": "user", "entity_name": user}, {"entity_type": "client-id", "entity_name": client}]

    def alter(ops, ent=entity, validate_only=False, label=None):
        run.call(49, 1, {"entries": [{"entity": ent, "ops": ops}], "validate_only": validate_only}, label=label)

    alter([{"key": "producer_byte_rate", "value": 1048576.0, "remove": False},
           {"key": "consumer_byte_rate", "value": 2097152.0, "remove": False},
           {"key": "request_percentage", "value": 50.0, "remove": False}], label="set")
    alter([{"key": "controller_mutation_rate", "value": 10.0, "remove": False}],
          ent=[{"entity_type": "user", "entity_name": user}], label="user mutation rate")
    run.call(48, 1, {"components": [{"entity_type": "user", "match_type": 0, "match": user},
                                    {"entity_type": "client-id", "match_type": 0, "match": client}], "strict": True},
             label="describe exact")
    run.call(48, 1, {"components": [{"entity_type": "user", "match_type": 0, "match": user}], "strict": False},
             label="describe user, not strict")
    alter([{"key": "no_such_quota", "value": 1.0, "remove": False}], label="unknown key")
    alter([{"key": "producer_byte_rate", "value": -5.0, "remove": False}], label="negative value")
    alter([{"key": "connection_creation_rate", "value": 5.0, "remove": False}], label="connection rate on a user")
    alter([{"key": "producer_byte_rate", "value": 1.0, "remove": False}],
          ent=[{"entity_type": "ip", "entity_name": "127.0.0.1"}], label="byte rate on an ip")
    alter([{"key": "connection_creation_rate", "value": 100.0, "remove": False}],
          ent=[{"entity_type": "ip", "entity_name": "127.0.0.9"}], label="connection rate on an ip")
    alter([{"key": "producer_byte_rate", "value": 1.0, "remove": False}],
          ent=[{"entity_type": "user", "entity_name": user}, {"entity_type": "user", "entity_name": user}],
          label="duplicate entity type")
    alter([{"key": "producer_byte_rate", "value": 1.0, "remove": False}],
          ent=[{"entity_type": "nobody", "entity_name": user}], label="unknown entity type")
    alter([{"key": "producer_byte_rate", "value": 0.0, "remove": True},
           {"key": "consumer_byte_rate", "value": 0.0, "remove": True},
           {"key": "request_percentage", "value": 0.0, "remove": True}], label="remove")
    removed = [{"entity_type": "user", "match_type": 0, "match": user},
               {"entity_type": "client-id", "match_type": 0, "match": client}]
    wait_for_quotas(run, removed, {})
    run.call(48, 1, {"components": removed, "strict": True}, label="describe after remove")
    run.call(48, 1, {"components": [{"entity_type": "ip", "match_type": 0, "match": "127.0.0.9"}], "strict": True},
             label="describe ip")
    run.call(48, 1, {"components": [{"entity_type": "user", "match_type": 7, "match": None}], "strict": False},
             label="invalid match type")


@scenario("quotas/produce-throttle", apis=(0, 49))
def _(run: Run) -> None:
    """A client-id's producer_byte_rate of 1 KB/s and a 20 KB produce: throttle_time_ms in the
    answer (compared within the stated tolerance); Produce v5 (a client that does not wait by
    itself) over the quota on a connection of its own, answered at once as well; a client-id
    without a quota is not throttled."""
    topic = run.name("t")
    create_topic(run, topic)
    run.call(49, 1, {"entries": [{"entity": [{"entity_type": "client-id", "entity_name": "throttled-client"}],
                                  "ops": [{"key": "producer_byte_rate", "value": 1024.0, "remove": False}]}],
                     "validate_only": False}, record=False)
    wait_for_quotas(run, [{"entity_type": "client-id", "match_type": 0, "match": "throttled-client"}],
                    {"producer_byte_rate": 1024.0})
    run.conn("throttled", client_id="throttled-client")
    produce(run, topic, records(["x" * 20000]), conn="throttled", label="over the quota")
    run.conn("old", client_id="throttled-client")
    started = time.monotonic()
    produce(run, topic, records(["z" * 100]), conn="old", version=5, label="Produce v5 over the quota")
    run.note("Produce v5 over the quota: round trip",
             {"throttle_time_round_trip_ms": max(1, round((time.monotonic() - started) * 1000))})
    produce(run, topic, records(["y" * 100]), label="another client id")


@scenario("scram/users", apis=(50, 51))
def _(run: Run) -> None:
    """SCRAM credentials: describe the users both brokers were given (alice), an unknown user;
    upsert with too few iterations, an unknown mechanism; delete an unknown credential."""
    run.call(50, 0, {"users": [{"name": "alice"}, {"name": run.name("nobody")}]})
    run.call(50, 0, {"users": None}, label="all users")
    run.call(51, 0, {"deletions": [{"name": run.name("nobody"), "mechanism": 1}], "upsertions": [
        {"name": run.name("bob"), "mechanism": 1, "iterations": 100, "salt": b"salt", "salted_password": b"x" * 32},
        {"name": run.name("carol"), "mechanism": 9, "iterations": 8192, "salt": b"salt", "salted_password": b"x" * 32}]})
    run.call(51, 0, {"deletions": [], "upsertions": [
        {"name": run.name("dave"), "mechanism": 2, "iterations": 8192, "salt": b"salt", "salted_password": b"x" * 64}]},
        label="upsert")
    run.call(50, 0, {"users": [{"name": run.name("dave")}]}, label="describe upserted")



