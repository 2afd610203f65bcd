"""ACLs: CreateAcls, DescribeAcls and DeleteAcls (v1-v3, their validation and filters), then what each
API answers the SASL user bob, who is no super user, with and without the ACLs Kafka asks for. Both
brokers run Kafka's StandardAuthorizer with ANONYMOUS and alice as super users
(tests/support/kafka_reference.REFERENCE_SECURITY)."""

from __future__ import annotations

from tests.conformance.corpus import create_topic, find_coordinator, init_producer_id, produce, records
from tests.conformance.corpus.streams import heartbeat, topology
from tests.support.conformance import Run, scenario
from tests.support.kafka_reference import SASL_USERS

TOPIC, GROUP, CLUSTER, TXN = 2, 3, 4, 5
ANY_TYPE, ANY_PATTERN, MATCH, LITERAL, PREFIXED = 1, 1, 2, 3, 4
ANY_OP, ALL, READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE = 1, 2, 3, 4, 5, 6, 7, 8
IDEMPOTENT_WRITE, DESCRIBE_CONFIGS = 12, 10
ANY_PERMISSION, DENY, ALLOW = 1, 2, 3


def binding(kind: int, name: str, principal: str, operation: int, permission: int = ALLOW,
            pattern: int = LITERAL, host: str = "*") -> dict:
    return {"resource_type": kind, "resource_name": name, "resource_pattern_type": pattern, "principal": principal,
            "host": host, "operation": operation, "permission_type": permission}


def acl_filter(kind: int = ANY_TYPE, name: str | None = None, pattern: int = ANY_PATTERN, principal: str | None = None,
               operation: int = ANY_OP, permission: int = ANY_PERMISSION, host: str | None = None) -> dict:
    return {"resource_type_filter": kind, "resource_name_filter": name, "pattern_type_filter": pattern,
            "principal_filter": principal, "host_filter": host, "operation": operation,
            "permission_type": permission}


def create_acls(run: Run, *bindings: dict, version: int = 3, label: str | None = None, conn: str = "main"):
    return run.call(30, version, {"creations": list(bindings)}, label=label, conn=conn)


def visible(run: Run, name: str, count: int) -> None:
    """Until DescribeAcls shows `count` bindings for `name` (Kafka's broker learns of ACLs from its
    metadata log a moment after CreateAcls is answered)."""
    run.wait_until(lambda: sum(len(r.acls) for r in run.call(29, 3, acl_filter(name=name), record=False).resources)
                   == count)


@scenario("acls/create-describe-delete", apis=(29, 30, 31))
def _(run: Run) -> None:
    """CreateAcls of literal, prefixed and wildcard bindings and of ones Kafka refuses (an ANY or MATCH
    pattern, a cluster not named kafka-cluster, an empty name, ANY operation or permission), at v1 and
    v3; a binding created twice; DescribeAcls by resource, by MATCH (the patterns that apply to a
    name), by principal, by permission; DeleteAcls by exact binding and by wider filters."""
    orders, pay = run.name("orders"), run.name("pay")
    create_acls(run, binding(TOPIC, orders, "User:bob", READ), binding(TOPIC, orders, "User:bob", WRITE),
                binding(TOPIC, pay, "User:bob", ALL, pattern=PREFIXED),
                binding(TOPIC, "*", "User:eve", READ, DENY),
                binding(GROUP, run.name("g"), "User:*", READ, host="10.0.0.9"),
                binding(CLUSTER, "kafka-cluster", "User:bob", IDEMPOTENT_WRITE), label="valid bindings")
    create_acls(run, binding(TOPIC, orders, "User:bob", READ), version=1, label="again, v1")
    for label, refused in (("ANY pattern", binding(TOPIC, run.name("x"), "User:bob", READ, pattern=ANY_PATTERN)),
                           ("MATCH pattern", binding(TOPIC, run.name("x"), "User:bob", READ, pattern=MATCH)),
                           ("ANY resource type", binding(ANY_TYPE, run.name("x"), "User:bob", READ)),
                           ("ANY operation", binding(TOPIC, run.name("x"), "User:bob", ANY_OP)),
                           ("ANY permission", binding(TOPIC, run.name("x"), "User:bob", READ, ANY_PERMISSION)),
                           ("a cluster named otherwise", binding(CLUSTER, "other", "User:bob", ALTER)),
                           ("an empty name", binding(TOPIC, "", "User:bob", READ))):
        # (each alone: some of them fail the whole request in Kafka)
        create_acls(run, refused, binding(TOPIC, run.name("y"), "User:bob", READ), label=f"refused: {label}")
    visible(run, orders, 2)
    for version in (1, 3):
        run.call(29, version, acl_filter(TOPIC, orders, LITERAL), label=f"one topic v{version}")
    run.call(29, 3, acl_filter(TOPIC, orders + "-eu", MATCH), label="MATCH: the wildcard (no prefix of it)")
    run.call(29, 3, acl_filter(TOPIC, pay + "-eu", MATCH), label="MATCH: the prefix and the wildcard")
    run.call(29, 3, acl_filter(GROUP, None, ANY_PATTERN), label="every group binding")
    run.call(29, 3, acl_filter(TOPIC, orders, ANY_PATTERN, principal="User:bob", operation=WRITE),
             label="by principal and operation")
    run.call(31, 3, {"filters": [acl_filter(TOPIC, orders, LITERAL, "User:bob", WRITE, ALLOW, "*")]},
             label="delete one")
    run.call(31, 1, {"filters": [acl_filter(TOPIC, pay, PREFIXED), acl_filter(GROUP, run.name("g"), MATCH)]},
             label="delete by wider filters, v1")
    run.call(29, 3, acl_filter(TOPIC, orders, ANY_PATTERN), label="after the deletes")
    run.call(31, 3, {"filters": [acl_filter(TOPIC, "*", LITERAL, "User:eve"),
                                 acl_filter(CLUSTER, "kafka-cluster", LITERAL, "User:bob"),
                                 acl_filter(TOPIC, run.name("y"), LITERAL)]}, label="clean up")


def login_bob(run: Run, conn: str = "bob") -> None:
    run.conn(conn, sasl=True)
    run.call(17, 1, {"mechanism": "PLAIN"}, conn=conn, record=False)
    answer = run.call(36, 2, {"auth_bytes": f"\0bob\0{SASL_USERS['bob']}".encode()}, conn=conn, record=False)
    assert answer.error_code == 0


@scenario("acls/refused", apis=(0, 1, 2, 3, 8, 9, 10, 11, 15, 16, 19, 20, 22, 29, 30, 32, 37, 42, 48, 60, 75))
def _(run: Run) -> None:
    """What bob, without ACLs, is answered: Metadata (a named topic, all topics, auto-creation),
    Produce, Fetch, ListOffsets, OffsetCommit, OffsetFetch, FindCoordinator, JoinGroup,
    DescribeGroups, ListGroups, CreateTopics, DeleteTopics, CreatePartitions, DeleteGroups,
    InitProducerId, DescribeConfigs, DescribeClientQuotas, DescribeAcls, CreateAcls,
    DescribeTopicPartitions, DescribeCluster's authorized operations."""
    topic, group = run.name("t"), run.name("g")
    create_topic(run, topic)
    produce(run, topic, records(["a", "b", "c"]), record=False)
    login_bob(run)
    run.call(3, 12, {"topics": [{"name": topic}], "allow_auto_topic_creation": False,
                     "include_topic_authorized_operations": True}, conn="bob", label="Metadata of the topic",
             drop=("brokers", "cluster_id", "controller_id"))
    run.call(3, 12, {"topics": [{"name": run.name("new")}], "allow_auto_topic_creation": True}, conn="bob",
             label="Metadata auto-creating", drop=("brokers", "cluster_id", "controller_id"))
    run.call(3, 12, {"topics": None, "allow_auto_topic_creation": False}, conn="bob", label="Metadata of every topic",
             drop=("brokers", "cluster_id", "controller_id"))
    run.call(0, 9, {"acks": -1, "timeout": 5000, "topic_data": [
        {"name": topic, "partition_data": [{"index": 0, "records": records(["bob"])}]}]}, conn="bob", label="Produce")
    run.call(1, 12, {"replica_id": -1, "max_bytes": 1 << 20, "session_epoch": -1, "topics": [
        {"topic": topic, "partitions": [{"partition": 0, "partition_max_bytes": 1 << 20}]}]}, conn="bob",
        label="Fetch", drop=("session_id",))
    run.call(2, 7, {"replica_id": -1, "topics": [{"name": topic, "partitions": [{"partition_index": 0,
                                                                                 "timestamp": -1}]}]},
             conn="bob", label="ListOffsets")
    run.call(8, 8, {"group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
                    "topics": [{"name": topic, "partitions": [{"partition_index": 0, "committed_offset": 1}]}]},
             conn="bob", label="OffsetCommit")
    run.call(9, 8, {"groups": [{"group_id": group, "topics": None}]}, conn="bob", label="OffsetFetch")
    run.call(10, 4, {"key_type": 0, "coordinator_keys": [group]}, conn="bob", label="FindCoordinator group")
    run.call(10, 4, {"key_type": 1, "coordinator_keys": [run.name("txn")]}, conn="bob",
             label="FindCoordinator transaction")
    run.call(11, 9, {"group_id": group, "session_timeout": 10000, "rebalance_timeout": 10000, "member_id": "",
                     "protocol_type": "consumer", "protocols": [{"name": "range", "metadata": b""}]}, conn="bob",
             label="JoinGroup")
    run.call(15, 5, {"groups": [group], "include_authorized_operations": True}, conn="bob", label="DescribeGroups")
    run.call(16, 5, {}, conn="bob", label="ListGroups")
    run.call(19, 7, {"topics": [{"name": run.name("c"), "num_partitions": 1, "replication_factor": 1}],
                     "timeout": 5000}, conn="bob", label="CreateTopics")
    run.call(20, 6, {"topics": [{"name": topic}], "timeout": 5000}, conn="bob", label="DeleteTopics")
    run.call(37, 3, {"topics": [{"name": topic, "count": 2}], "timeout": 5000, "validate_only": True}, conn="bob",
             label="CreatePartitions")
    run.call(42, 2, {"groups_names": [group]}, conn="bob", label="DeleteGroups")
    run.call(22, 5, {"transactional_id": None, "transaction_timeout": 60000, "producer_id": -1, "producer_epoch": -1},
             conn="bob", label="InitProducerId idempotent")
    run.call(22, 5, {"transactional_id": run.name("txn"), "transaction_timeout": 60000, "producer_id": -1,
                     "producer_epoch": -1}, conn="bob", label="InitProducerId transactional")
    run.call(32, 4, {"resources": [{"resource_type": 2, "resource_name": topic, "configuration_keys": None},
                                   {"resource_type": 4, "resource_name": "1", "configuration_keys": None}],
                     "include_synonyms": False}, conn="bob", label="DescribeConfigs")
    run.call(48, 1, {"components": [], "strict": False}, conn="bob", label="DescribeClientQuotas")
    run.call(29, 3, acl_filter(), conn="bob", label="DescribeAcls")
    create_acls(run, binding(TOPIC, topic, "User:bob", ALL), conn="bob", label="CreateAcls")
    run.call(75, 0, {"topics": [{"name": topic}], "response_partition_limit": 10, "cursor": None}, conn="bob",
             label="DescribeTopicPartitions")
    run.call(60, 1, {"include_cluster_authorized_operations": True, "endpoint_type": 1}, conn="bob",
             label="DescribeCluster", drop=("brokers", "cluster_id", "controller_id"))


@scenario("acls/granted", apis=(0, 1, 3, 8, 9, 10, 11, 22, 29, 30, 31))
def _(run: Run) -> None:
    """The ACLs Kafka asks for, granted to bob one by one: READ on the topic (then Metadata describes
    it: READ implies DESCRIBE, and Fetch reads it), WRITE (Produce, and an idempotent InitProducerId:
    WRITE on some topic, KIP-679), READ on the group (OffsetCommit, OffsetFetch, FindCoordinator,
    JoinGroup); a DENY on the topic then wins over the ALLOWs; the authorized operations follow."""
    topic, group = run.name("t"), run.name("g")
    create_topic(run, topic)
    produce(run, topic, records(["a", "b"]), record=False)
    find_coordinator(run, group)  # (Kafka makes __consumer_offsets on first use: ready before bob asks)
    init_producer_id(run, None, record=False)  # (and allocates producer ids in blocks)
    login_bob(run)
    create_acls(run, binding(TOPIC, topic, "User:bob", READ), label="READ on the topic")
    visible(run, topic, 1)
    run.call(3, 12, {"topics": [{"name": topic}], "allow_auto_topic_creation": False,
                     "include_topic_authorized_operations": True}, conn="bob", label="Metadata with READ",
             drop=("brokers", "cluster_id", "controller_id"))
    run.call(1, 12, {"replica_id": -1, "max_bytes": 1 << 20, "session_epoch": -1, "topics": [
        {"topic": topic, "partitions": [{"partition": 0, "partition_max_bytes": 1 << 20}]}]}, conn="bob",
        label="Fetch with READ", drop=("session_id", "records"))
    run.call(22, 5, {"transactional_id": None, "transaction_timeout": 60000, "producer_id": -1,
                     "producer_epoch": -1}, conn="bob", label="InitProducerId without WRITE anywhere")
    create_acls(run, binding(TOPIC, topic, "User:bob", WRITE), binding(GROUP, group, "User:bob", READ),
                label="WRITE on the topic, READ on the group")
    visible(run, topic, 2)
    run.call(0, 9, {"acks": -1, "timeout": 5000, "topic_data": [
        {"name": topic, "partition_data": [{"index": 0, "records": records(["bob"])}]}]}, conn="bob", label="Produce",
        drop=("log_append_time", "base_offset"))
    run.call(22, 5, {"transactional_id": None, "transaction_timeout": 60000, "producer_id": -1,
                     "producer_epoch": -1}, conn="bob", label="InitProducerId with WRITE on a topic",
             drop=("producer_id",))
    run.call(8, 8, {"group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
                    "topics": [{"name": topic, "partitions": [{"partition_index": 0, "committed_offset": 1}]}]},
             conn="bob", label="OffsetCommit")
    run.call(9, 8, {"groups": [{"group_id": group, "topics": None}]}, conn="bob", label="OffsetFetch")
    run.call(10, 4, {"key_type": 0, "coordinator_keys": [group]}, conn="bob", label="FindCoordinator",
             drop=("node_id",))
    create_acls(run, binding(TOPIC, topic, "User:bob", READ, DENY), label="DENY READ on the topic")
    visible(run, topic, 3)
    run.call(1, 12, {"replica_id": -1, "max_bytes": 1 << 20, "session_epoch": -1, "topics": [
        {"topic": topic, "partitions": [{"partition": 0, "partition_max_bytes": 1 << 20}]}]}, conn="bob",
        label="Fetch denied", drop=("session_id",))
    run.call(3, 12, {"topics": [{"name": topic}], "allow_auto_topic_creation": False,
                     "include_topic_authorized_operations": True}, conn="bob",
             label="Metadata: WRITE still implies DESCRIBE", drop=("brokers", "cluster_id", "controller_id"))
    run.call(31, 3, {"filters": [acl_filter(TOPIC, topic, LITERAL), acl_filter(GROUP, group, LITERAL)]},
             label="clean up")


@scenario("acls/streams", apis=(88, 89))
def _(run: Run) -> None:
    """KIP-1071's streams groups under ACLs, for bob: StreamsGroupHeartbeat and StreamsGroupDescribe
    without READ on the group; with it, a topology naming topics bob may not describe; with DESCRIBE
    on them, the join, whose internal topics bob may not create (a status, not an error); a describe
    of the group once one of its topics is no longer described."""
    source, group, app = run.name("src"), run.name("g"), run.name("app")
    create_topic(run, source, 1)
    find_coordinator(run, group)  # (Kafka makes __consumer_offsets on first use: ready before bob asks)
    # Kafka's group coordinator sees a new topic a moment after Metadata does: a probe group (the
    # super user's) whose topology reads only the source says when.
    probe, plain = run.name("probe"), {"epoch": 0, "subtopologies": [
        {"subtopology_id": "0", "source_topics": [source], "source_topic_regex": [], "state_changelog_topics": [],
         "repartition_sink_topics": [], "repartition_source_topics": [], "copartition_groups": []}]}

    def source_seen() -> bool:
        response = run.call(88, 0, heartbeat(probe, "probe", 0, topo=plain, tasks=({}, {}, {}),
                                             rebalance_timeout=30000), record=False)
        run.call(88, 0, heartbeat(probe, "probe", -1), record=False)
        return not any(s.status_code == 1 for s in response.status or ())

    run.wait_until(source_seen, timeout=30)
    login_bob(run)
    member = "conformance-streams-bob"
    joining = heartbeat(group, member, 0, topo=topology(app, source), tasks=({}, {}, {}), rebalance_timeout=30000)
    run.call(88, 0, joining, conn="bob", label="heartbeat without READ on the group")
    run.call(89, 0, {"group_ids": [group], "include_authorized_operations": True}, conn="bob",
             label="describe without DESCRIBE on the group")
    create_acls(run, binding(GROUP, group, "User:bob", READ), label="READ on the group")
    visible(run, group, 1)
    run.call(88, 0, joining, conn="bob", label="a topology naming topics bob may not describe")
    create_acls(run, binding(TOPIC, source, "User:bob", DESCRIBE), binding(TOPIC, app, "User:bob", DESCRIBE,
                                                                           pattern=PREFIXED),
                label="DESCRIBE on the source and the internal topics")
    visible(run, source, 1)
    visible(run, app, 1)
    joined = run.call(88, 0, joining, conn="bob", record=False)
    run.note("the join: error", joined.error_code)
    run.note("the join: statuses", sorted((s.status_code, s.status_detail) for s in joined.status or ()
                                          if s.status_code != 5))  # ASSIGNMENT_DELAYED aside (timing)
    described = run.call(89, 0, {"group_ids": [group], "include_authorized_operations": False}, conn="bob",
                         record=False)
    run.note("describe with DESCRIBE on every topic: error", described.groups[0].error_code)
    run.call(31, 3, {"filters": [acl_filter(TOPIC, source, LITERAL)]}, label="no more DESCRIBE on the source")
    visible(run, source, 0)
    run.call(89, 0, {"group_ids": [group], "include_authorized_operations": False}, conn="bob",
             label="describe of a group naming a topic bob may not describe",
             drop=("group_epoch", "assignment_epoch", "group_state"))
    run.call(88, 0, heartbeat(group, member, -1), conn="bob", record=False)
    run.call(31, 3, {"filters": [acl_filter(GROUP, group, LITERAL), acl_filter(TOPIC, app, PREFIXED)]},
             label="clean up")
