"""ACLs with real clients (authorizer.class.name=...StandardAuthorizer, super.users=User:admin, SASL
users): Java's Admin creates, describes and deletes ACLs; a Java producer without WRITE on a topic is
refused with TopicAuthorizationException and a Java consumer without READ on its group with
GroupAuthorizationException, while the same principal with the ACLs Kafka asks for, and a super user
with none, produce and consume; librdkafka sees the same refusals; an idempotent producer needs
IDEMPOTENT_WRITE or WRITE on some topic (KIP-679)."""

from __future__ import annotations

import time

import pytest

from minibroker.testing import running_broker
from tests.support.java_client import of_type

pytestmark = pytest.mark.interop

USERS = {"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret"}
AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"


@pytest.fixture(scope="module")
def acl_broker(tmp_path_factory):
    with running_broker(tmp_path_factory.mktemp("acls") / "data", sasl_users=USERS, authorizer_class_name=AUTHORIZER,
                        super_users="User:admin") as running:
        yield running


def java_as(user: str) -> dict[str, str]:
    return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
            "sasl.jaas.config": "org.apache.kafka.common.security.plain.PlainLoginModule required "
                                f'username="{user}" password="{USERS[user]}";'}


def acl(resource: str, name: str, principal: str, operation: str, permission: str = "ALLOW",
        pattern: str = "LITERAL") -> str:
    return f"{resource}|{name}|{pattern}|{principal}|*|{operation}|{permission}"


def test_java_admin_creates_describes_and_deletes_acls(acl_broker, java, unique):
    topic = unique("acl-admin")
    admin = java_as("admin")
    lines = java.call(
        ["create-acls", acl_broker.sasl_bootstrap, ";".join([
            acl("TOPIC", topic, "User:alice", "READ"), acl("TOPIC", topic, "User:alice", "WRITE"),
            acl("TOPIC", f"{topic}-", "User:bob", "ALL", pattern="PREFIXED"),
            acl("GROUP", "*", "User:eve", "READ", "DENY")])],
        ["describe-acls", acl_broker.sasl_bootstrap, f"TOPIC|{topic}|MATCH|null|null|ANY|ANY"],
        ["delete-acls", acl_broker.sasl_bootstrap, f"TOPIC|{topic}|LITERAL|User:alice|null|WRITE|ALLOW"],
        ["describe-acls", acl_broker.sasl_bootstrap, "ANY|null|ANY|null|null|ANY|ANY"],
        client_config=admin)
    assert [line["error"] for line in of_type(lines, "acl-created")] == [None] * 4
    described = [(a["name"], a["pattern_type"], a["operation"]) for a in of_type(lines, "acl")]
    # MATCH on the topic: its two literal ACLs (the prefixed one is for "<topic>-...", not this topic).
    assert sorted(described[:2]) == [(topic, "LITERAL", "READ"), (topic, "LITERAL", "WRITE")]
    assert [(a["acl"]["principal"], a["acl"]["operation"]) for a in of_type(lines, "acl-deleted")] == [
        ("User:alice", "WRITE")]
    remaining = {(a["resource_type"], a["name"], a["principal"], a["operation"], a["permission"])
                 for a in of_type(lines, "acl")[2:]}
    assert {("TOPIC", topic, "User:alice", "READ", "ALLOW"), ("TOPIC", f"{topic}-", "User:bob", "ALL", "ALLOW"),
            ("GROUP", "*", "User:eve", "READ", "DENY")} <= remaining
    assert ("TOPIC", topic, "User:alice", "WRITE", "ALLOW") not in remaining


def test_a_principal_not_allowed_to_alter_acls_is_refused(acl_broker, java, unique):
    lines = java.call(["create-acls", acl_broker.sasl_bootstrap, acl("TOPIC", unique("x"), "User:bob", "ALL")],
                     ["describe-acls", acl_broker.sasl_bootstrap], client_config=java_as("bob"))
    assert of_type(lines, "acl-created")[0]["error"] == "ClusterAuthorizationException"
    assert of_type(lines, "acl-error")[0]["error"] == "ClusterAuthorizationException"


def test_without_write_java_cannot_produce_and_without_read_on_the_group_cannot_consume(acl_broker, java, unique):
    topic, group, granted = unique("guarded"), unique("guarded-group"), unique("bobs")
    lines = java.call(
        ["create-topic", acl_broker.sasl_bootstrap, topic, 1], ["create-topic", acl_broker.sasl_bootstrap, granted, 1],
        # bob may write to his own topic (so his idempotent producer may start, KIP-679), not to `topic`;
        # alice may read `topic` but not read in `group`.
        ["create-acls", acl_broker.sasl_bootstrap, ";".join([
            acl("TOPIC", granted, "User:bob", "WRITE"), acl("TOPIC", topic, "User:alice", "READ")])],
        ["produce-check", acl_broker.sasl_bootstrap, topic],  # the super user
        client_config=java_as("admin"))
    assert of_type(lines, "produce-result")[0]["error"] is None
    refused = java.call(["produce-check", acl_broker.sasl_bootstrap, topic], client_config=java_as("bob"))
    assert of_type(refused, "produce-result")[0]["error"] == "TopicAuthorizationException"
    allowed = java.call(["produce-check", acl_broker.sasl_bootstrap, granted], client_config=java_as("bob"))
    assert of_type(allowed, "produce-result")[0]["error"] is None
    no_group = java.call(["consume-check", acl_broker.sasl_bootstrap, topic, group], client_config=java_as("alice"))
    assert of_type(no_group, "consume-result")[0]["error"] == "GroupAuthorizationException"
    java.call(["create-acls", acl_broker.sasl_bootstrap, acl("GROUP", group, "User:alice", "READ")],
             client_config=java_as("admin"))
    consumed = java.call(["consume-check", acl_broker.sasl_bootstrap, topic, group], client_config=java_as("alice"))
    assert of_type(consumed, "consume-result")[0] == {"type": "consume-result", "records": 1, "error": None}


def test_an_idempotent_producer_needs_idempotent_write_or_write_on_some_topic(acl_broker, java, unique):
    topic = unique("idempotence")
    java.call(["create-topic", acl_broker.sasl_bootstrap, topic, 1],
             ["create-acls", acl_broker.sasl_bootstrap, acl("TOPIC", topic, "User:alice", "DESCRIBE")],
             client_config=java_as("admin"))
    # alice may see the topic but write nowhere: InitProducerId is refused for the cluster.
    lines = java.call(["produce-check", acl_broker.sasl_bootstrap, topic], client_config=java_as("alice"))
    assert of_type(lines, "produce-result")[0]["error"] == "ClusterAuthorizationException"
    java.call(["create-acls", acl_broker.sasl_bootstrap, acl("CLUSTER", "kafka-cluster", "User:alice",
                                                             "IDEMPOTENT_WRITE")], client_config=java_as("admin"))
    lines = java.call(["produce-check", acl_broker.sasl_bootstrap, topic], client_config=java_as("alice"))
    assert of_type(lines, "produce-result")[0]["error"] == "TopicAuthorizationException"  # now: the topic's


def test_a_super_user_is_allowed_everything(acl_broker, java, unique):
    topic, group = unique("admin-topic"), unique("admin-group")
    lines = java.call(["create-topic", acl_broker.sasl_bootstrap, topic, 2, "retention.ms=3600000"],
                     ["produce", acl_broker.sasl_bootstrap, topic, 10],
                     ["group-consume", acl_broker.sasl_bootstrap, topic, group, 10],
                     ["alter-configs", acl_broker.sasl_bootstrap, "TOPIC", topic, "SET:retention.ms=7200000"],
                     ["describe-acls", acl_broker.sasl_bootstrap],
                     client_config=java_as("admin"))
    assert of_type(lines, "created") and len(of_type(lines, "produced")) == 10
    assert len(of_type(lines, "record")) == 10 and not of_type(lines, "acl-error")


# ---- librdkafka ----------------------------------------------------------------------------------------


def confluent_as(user: str) -> dict:
    return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.username": user,
            "sasl.password": USERS[user]}


def test_confluent_kafka_sees_the_same_refusals(acl_broker, java, unique):
    from confluent_kafka import Consumer, KafkaError, Producer

    topic, group, granted = unique("rd-guarded"), unique("rd-group"), unique("rd-bobs")
    java.call(["create-topic", acl_broker.sasl_bootstrap, topic, 1], ["create-topic", acl_broker.sasl_bootstrap, granted, 1],
             ["produce", acl_broker.sasl_bootstrap, topic, 5],
             ["create-acls", acl_broker.sasl_bootstrap, ";".join([
                 acl("TOPIC", granted, "User:bob", "WRITE"), acl("TOPIC", topic, "User:alice", "READ")])],
             client_config=java_as("admin"))
    delivered: list = []
    producer = Producer({"bootstrap.servers": acl_broker.sasl_bootstrap, **confluent_as("bob"),
                         "message.timeout.ms": 10000})
    producer.produce(topic, b"no", partition=0, on_delivery=lambda err, msg: delivered.append(err))
    producer.flush(20)
    assert delivered and delivered[0] is not None and delivered[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    consumer = Consumer({"bootstrap.servers": acl_broker.sasl_bootstrap, **confluent_as("alice"), "group.id": group,
                         "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe([topic])
        error = None
        deadline = time.monotonic() + 20
        while error is None and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error():
                error = message.error()
        assert error is not None and error.code() == KafkaError.GROUP_AUTHORIZATION_FAILED
    finally:
        consumer.close()


def test_confluent_kafka_and_kafka_python_administer_acls(acl_broker, unique):
    """librdkafka's create_acls/describe_acls/delete_acls and kafka-python's, as the super user."""
    from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation, AclPermissionType, AdminClient,
                                       ResourcePatternType, ResourceType)
    from kafka.admin import (ACL, ACLFilter, ACLOperation, ACLPermissionType, ACLResourcePatternType,
                             KafkaAdminClient, ResourcePattern, ResourcePatternFilter)
    from kafka.admin import ResourceType as KResourceType

    topic, other = unique("rd-acl"), unique("kp-acl")
    admin = AdminClient({"bootstrap.servers": acl_broker.sasl_bootstrap, **confluent_as("admin")})
    binding = AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:alice", "*",
                         AclOperation.READ, AclPermissionType.ALLOW)
    for future in admin.create_acls([binding]).values():
        assert future.result(10) is None
    any_of_topic = AclBindingFilter(ResourceType.TOPIC, topic, ResourcePatternType.ANY, None, None,
                                    AclOperation.ANY, AclPermissionType.ANY)
    assert admin.describe_acls(any_of_topic).result(10) == [binding]
    kp = KafkaAdminClient(bootstrap_servers=acl_broker.sasl_bootstrap, security_protocol="SASL_PLAINTEXT",
                          sasl_mechanism="PLAIN", sasl_plain_username="admin", sasl_plain_password=USERS["admin"])
    try:
        acl = ACL("User:bob", "*", ACLOperation.WRITE, ACLPermissionType.ALLOW,
                  ResourcePattern(KResourceType.TOPIC, other, ACLResourcePatternType.PREFIXED))
        created = kp.create_acls([acl])
        assert created["succeeded"] == [acl] and not created["failed"]
        found, error = kp.describe_acls(ACLFilter("User:bob", None, ACLOperation.ANY, ACLPermissionType.ANY,
                                                  ResourcePatternFilter(KResourceType.TOPIC, other,
                                                                        ACLResourcePatternType.ANY)))
        assert [(a.principal, a.operation, a.resource_pattern.pattern_type) for a in found] == [
            ("User:bob", ACLOperation.WRITE, ACLResourcePatternType.PREFIXED)]
    finally:
        kp.close()
    deleted = admin.delete_acls([any_of_topic])[any_of_topic].result(10)
    assert deleted == [binding]
    assert admin.describe_acls(any_of_topic).result(10) == []
