"""The authorization seam (minibroker.auth, reached through the request context): without an
authorizer everything is allowed and the authorized-operations bit sets (KIP-430) are the ones the
broker has always answered; with one, each operation on each resource is its to decide, for the
request's principal on its listener, and the bit sets of Metadata, DescribeTopicPartitions,
DescribeCluster, DescribeGroups and ConsumerGroupDescribe follow what it allows.
"""

from __future__ import annotations

import trio
from kio.index import load_request_schema

from minibroker.auth import NO_AUTHORIZED_OPERATIONS, AclOperation, ResourceType
from minibroker.broker import Broker
from minibroker.config import BrokerConfig
from minibroker.context import Connection, RequestContext
from minibroker.groups.api import ConsumerGroupHeartbeatRequest
from minibroker.protocol.entities import build
from minibroker.protocol.messages import RequestHeader, api_schema
from tests.support.broker_shell import decode
from tests.support.wire import encode_request

A = AclOperation
# What the broker answered before the seam, operation codes spelled out (Kafka's AclOperation).
TOPIC_OPERATIONS = sum(1 << op for op in (3, 4, 5, 6, 7, 8, 10, 11))  # READ .. ALTER_CONFIGS
CLUSTER_OPERATIONS = sum(1 << op for op in (5, 7, 8, 9, 10, 11, 12))  # CREATE .. IDEMPOTENT_WRITE
GROUP_OPERATIONS = sum(1 << op for op in (3, 6, 8, 10, 11))  # READ, DELETE, DESCRIBE, DESCRIBE/ALTER_CONFIGS


class DenyBob:
    """Bob may not DESCRIBE the topic "secret" nor DELETE any group, nor ALTER the cluster."""

    def __init__(self) -> None:
        self.asked: set[tuple] = set()

    def authorize(self, principal, listener, host, operation, resource_type, name) -> bool:
        self.asked.add((principal, listener, host, operation, resource_type, name))
        if principal != "User:bob":
            return True
        return not ((resource_type, name, operation) == (ResourceType.TOPIC, "secret", A.DESCRIBE)
                    or (resource_type, operation) in {(ResourceType.GROUP, A.DELETE), (ResourceType.CLUSTER, A.ALTER)})


def new_broker(tmp_path, authorizer=None) -> Broker:
    broker = Broker(BrokerConfig({"log.dirs": str(tmp_path / "data"), "listeners": "127.0.0.1:0"}),
                    authorizer=authorizer)
    for topic in ("open", "secret"):
        broker.logs.create_topic(topic, 1, {}, 0)
    heartbeat = ConsumerGroupHeartbeatRequest(
        group_id="cg", member_id="m", member_epoch=0, client_id="c", client_host="/h", instance_id=None,
        rack_id=None, rebalance_timeout_ms=10_000, subscribed_topic_names=("open",), subscribed_topic_regex=None,
        server_assignor=None, owned={}, api_version=1)

    async def join() -> None:
        broker.groups.consumer_group_heartbeat(broker.clock.monotonic(), heartbeat)

    trio.run(join)
    broker.groups.commit_offsets(0, group_id="simple", generation_id=-1, member_id="", group_instance_id=None,
                                 offsets={("open", 0): (1, -1, "")})
    return broker


def operations_answered(broker: Broker, principal: str) -> dict[str, int]:
    """Every authorized-operations field the five APIs answer, asked by `principal`."""
    conn = Connection("10.0.0.7:5555", principal=principal)

    async def call(api_key: int, version: int, body: dict):
        frame = encode_request(build(load_request_schema(api_key, version), body))[4:]
        return decode((await broker.handle_frame(frame, conn)).data, api_key, version)

    answered: dict[str, int] = {}

    async def main() -> None:
        metadata = await call(3, 10, {"topics": [{"name": "open", "topic_id": None}, {"name": "secret", "topic_id": None}],
                                      "allow_auto_topic_creation": False, "include_topic_authorized_operations": True,
                                      "include_cluster_authorized_operations": True})
        answered.update({f"metadata {t.name}": t.topic_authorized_operations for t in metadata.topics})
        answered["metadata cluster"] = metadata.cluster_authorized_operations
        partitions = await call(75, 0, {"topics": [{"name": "open"}, {"name": "secret"}, {"name": "missing"}],
                                        "response_partition_limit": 100, "cursor": None})
        answered.update({f"partitions {t.name}": t.topic_authorized_operations for t in partitions.topics})
        cluster = await call(60, 1, {"include_cluster_authorized_operations": True, "endpoint_type": 1})
        answered["describe cluster"] = cluster.cluster_authorized_operations
        groups = await call(15, 5, {"groups": ["simple"], "include_authorized_operations": True})
        answered["describe group simple"] = groups.groups[0].authorized_operations
        consumer = await call(69, 0, {"group_ids": ["cg"], "include_authorized_operations": True})
        answered["describe consumer group cg"] = consumer.groups[0].authorized_operations

    trio.run(main)
    return answered


def test_without_an_authorizer_every_supported_operation_is_answered_as_before(tmp_path):
    broker = new_broker(tmp_path)
    assert operations_answered(broker, "User:bob") == {
        "metadata open": TOPIC_OPERATIONS, "metadata secret": TOPIC_OPERATIONS, "metadata cluster": CLUSTER_OPERATIONS,
        "partitions open": TOPIC_OPERATIONS, "partitions secret": TOPIC_OPERATIONS,
        "partitions missing": TOPIC_OPERATIONS, "describe cluster": CLUSTER_OPERATIONS,
        "describe group simple": GROUP_OPERATIONS, "describe consumer group cg": GROUP_OPERATIONS}
    broker.close()


def test_an_authorizer_decides_each_operation_for_the_requests_principal_and_listener(tmp_path):
    denied = DenyBob()
    broker = new_broker(tmp_path, denied)
    # A topic bob may not describe is answered TOPIC_AUTHORIZATION_FAILED, its operations not computed.
    assert operations_answered(broker, "User:bob") == {
        "metadata open": TOPIC_OPERATIONS, "metadata secret": NO_AUTHORIZED_OPERATIONS,
        "metadata cluster": CLUSTER_OPERATIONS & ~(1 << A.ALTER),
        "partitions open": TOPIC_OPERATIONS, "partitions secret": NO_AUTHORIZED_OPERATIONS,
        "partitions missing": TOPIC_OPERATIONS,
        "describe cluster": CLUSTER_OPERATIONS & ~(1 << A.ALTER),
        "describe group simple": GROUP_OPERATIONS & ~(1 << A.DELETE),
        "describe consumer group cg": GROUP_OPERATIONS & ~(1 << A.DELETE)}
    assert ("User:bob", "PLAINTEXT", "10.0.0.7", A.DESCRIBE, ResourceType.TOPIC, "secret") in denied.asked
    assert ("User:bob", "PLAINTEXT", "10.0.0.7", A.ALTER, ResourceType.CLUSTER, "kafka-cluster") in denied.asked
    assert set(operations_answered(broker, "User:alice").values()) == {
        TOPIC_OPERATIONS, CLUSTER_OPERATIONS, GROUP_OPERATIONS}
    # The checks a handler makes where it knows the resource.
    ctx = RequestContext(broker.services, Connection("10.0.0.7:5555", principal="User:bob"),
                         RequestHeader(3, 10, 1, "c", 0), api_schema(3, 10), broker.handlers[3], 0.0)
    assert ctx.principal == "User:bob" and ctx.listener == "PLAINTEXT"
    assert not ctx.authorize(A.DESCRIBE, ResourceType.TOPIC, "secret")
    assert ctx.authorize(A.READ, ResourceType.TOPIC, "secret")
    assert ctx.filter_authorized(A.DESCRIBE, ResourceType.TOPIC, ["secret", "open", "x"]) == ["open", "x"]
    broker.close()
