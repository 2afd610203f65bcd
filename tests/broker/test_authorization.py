"""The table of API -> required operations (minibroker/handlers/authorization.py) is what the handlers
ask: every API is sent, covering each condition of its checks, to a broker whose authorizer records
what it is asked, allowing everything, then everything but the cluster's operations, then nothing;
the operations and resource types asked are exactly the table's, and denied requests are answered
with the table's errors. Every API the broker serves has a row."""

from __future__ import annotations

import dataclasses
import uuid

import pytest
import trio
import trio.testing
from kio.serial.errors import OutOfBoundValue

from minibroker.auth import AclOperation, ResourceType
from minibroker.broker import Broker
from minibroker.config import BrokerConfig
from minibroker.context import Connection
from minibroker.handlers import load_all
from minibroker.handlers.authorization import REQUIRED, required_pairs
from minibroker.protocol.errors import ErrorCode
from minibroker.protocol.messages import api_name
from tests.support.batches import make_batch
from tests.support.broker_shell import decode
from tests.support.conformance import request as make_request
from tests.support.wire import encode_request

TOPIC, GROUP, TXN = "t", "g", "tx"
SHARE_MEMBER = str(uuid.uuid4())


class Recording:
    """Allows what `allow(resource type)` says, and records every (operation, resource type) asked."""

    def __init__(self) -> None:
        self.allow = lambda resource_type: True
        self.asked: list[tuple[AclOperation, ResourceType, str]] = []

    def authorize(self, principal, listener, host, operation, resource_type, name, log_if_denied=True) -> bool:
        self.asked.append((operation, resource_type, name))
        return self.allow(resource_type)

    def authorize_by_resource_type(self, principal, listener, host, operation, resource_type) -> bool:
        self.asked.append((operation, resource_type, "*"))
        return self.allow(resource_type)


def topic_id(broker: Broker, name: str = TOPIC) -> uuid.UUID:
    info = broker.logs.topic(name) or broker.logs.create_topic(name, 1, {}, 0)
    return info.topic_id


def requests(broker: Broker) -> list[tuple[int, int, dict]]:
    """One request per condition of each API's checks, in an order that gives the later ones state
    (a transaction, a consumer group) to find."""
    tid = topic_id(broker)
    txn_batch = make_batch([(None, b"v")], producer_id=1, producer_epoch=0, base_sequence=0, transactional=True)
    partitions = [{"partition_index": 0}]
    streams = f"sg-{uuid.uuid4().hex[:8]}"  # a new streams group each time, its changelog to create
    return [
        (22, 5, {"transactional_id": TXN, "transaction_timeout": 60000, "producer_id": -1, "producer_epoch": -1}),
        (22, 5, {"transactional_id": None, "transaction_timeout": 60000, "producer_id": -1, "producer_epoch": -1}),
        (24, 3, {"v3_and_below_transactional_id": TXN, "v3_and_below_producer_id": 0,
                 "v3_and_below_producer_epoch": 0, "v3_and_below_topics": [{"name": TOPIC, "partitions": [0]}]}),
        (24, 4, {"transactions": [{"transactional_id": TXN, "producer_id": 0, "producer_epoch": 0,
                                   "verify_only": True, "topics": [{"name": TOPIC, "partitions": [0]}]}]}),
        (0, 9, {"acks": -1, "timeout": 5000, "transactional_id": TXN, "topic_data": [
            {"name": TOPIC, "partition_data": [{"index": 0, "records": txn_batch}]}]}),
        (0, 9, {"acks": -1, "timeout": 5000, "transactional_id": None, "topic_data": [
            {"name": TOPIC, "partition_data": [{"index": 0, "records": make_batch([(None, b"v")])}]}]}),
        (1, 12, {"replica_id": -1, "max_bytes": 1 << 20, "session_epoch": -1, "topics": [
            {"topic": TOPIC, "partitions": [{"partition": 0, "partition_max_bytes": 1 << 20}]}]}),
        (1, 12, {"replica_id": 1, "max_bytes": 1 << 20, "session_epoch": -1, "topics": [
            {"topic": TOPIC, "partitions": [{"partition": 0, "partition_max_bytes": 1 << 20}]}]}),
        (2, 7, {"replica_id": -1, "topics": [{"name": TOPIC, "partitions": [{"partition_index": 0, "timestamp": -1}]}]}),
        (23, 4, {"replica_id": -1, "topics": [{"topic": TOPIC, "partitions": [
            {"partition": 0, "current_leader_epoch": -1, "leader_epoch": 0}]}]}),
        (3, 12, {"topics": [{"name": TOPIC}, {"name": f"auto-{uuid.uuid4().hex[:8]}"}], "allow_auto_topic_creation": True}),
        (3, 12, {"topics": None, "allow_auto_topic_creation": False}),
        (3, 10, {"topics": [{"name": TOPIC}], "allow_auto_topic_creation": False,
                 "include_cluster_authorized_operations": True}),
        (8, 8, {"group_id": GROUP, "generation_id_or_member_epoch": -1, "member_id": "",
                "topics": [{"name": TOPIC, "partitions": [{"partition_index": 0, "committed_offset": 1}]}]}),
        (9, 8, {"groups": [{"group_id": GROUP, "topics": [{"name": TOPIC, "partition_indexes": [0]}]}]}),
        (9, 8, {"groups": [{"group_id": GROUP, "topics": None}]}),
        (10, 4, {"key_type": 0, "coordinator_keys": [GROUP]}),
        (10, 4, {"key_type": 1, "coordinator_keys": [TXN]}),
        (10, 6, {"key_type": 2, "coordinator_keys": [f"{GROUP}:{tid}:0"]}),
        (11, 9, {"group_id": "classic", "session_timeout": 10000, "rebalance_timeout": 10000, "member_id": "",
                 "protocol_type": "consumer", "protocols": []}),
        (12, 4, {"group_id": "classic", "generation_id": 1, "member_id": "m"}),
        (13, 5, {"group_id": "classic", "members": [{"member_id": "m"}]}),
        (14, 5, {"group_id": "classic", "generation_id": 1, "member_id": "m", "protocol_type": "consumer",
                 "protocol_name": "range", "assignments": []}),
        (15, 5, {"groups": [GROUP], "include_authorized_operations": False}),
        (16, 5, {}),
        (17, 1, {"mechanism": "PLAIN"}),
        (18, 3, {"client_software_name": "t", "client_software_version": "1"}),
        (19, 7, {"topics": [{"name": "created", "num_partitions": 1, "replication_factor": 1}]}),
        (20, 6, {"topics": [{"name": None, "topic_id": topic_id(broker, "doomed")}]}),
        (20, 6, {"topics": [{"name": "created", "topic_id": None}]}),
        (21, 2, {"topics": [{"name": TOPIC, "partitions": [{"partition_index": 0, "offset": 0}]}]}),
        (25, 4, {"transactional_id": TXN, "producer_id": 0, "producer_epoch": 0, "group_id": GROUP}),
        (28, 4, {"transactional_id": TXN, "group_id": GROUP, "producer_id": 0, "producer_epoch": 0,
                 "generation_id": -1, "member_id": "", "topics": [{"name": TOPIC, "partitions": [
                     {"partition_index": 0, "committed_offset": 0}]}]}),
        (65, 0, {"transactional_ids": [TXN]}),
        (66, 1, {"state_filters": [], "producer_id_filters": []}),
        (26, 4, {"transactional_id": TXN, "producer_id": 0, "producer_epoch": 0, "committed": False}),
        (27, 1, {"markers": [{"producer_id": 5, "producer_epoch": 0, "transaction_result": False,
                              "coordinator_epoch": 0, "topics": [{"name": TOPIC, "partition_indexes": [0]}]}]}),
        (29, 3, {"resource_type_filter": 1, "pattern_type_filter": 1, "operation": 1, "permission_type": 1}),
        (30, 3, {"creations": [{"resource_type": 2, "resource_name": "x", "resource_pattern_type": 3,
                                "principal": "User:a", "host": "*", "operation": 3, "permission_type": 3}]}),
        (31, 3, {"filters": [{"resource_type_filter": 1, "pattern_type_filter": 1, "operation": 1,
                              "permission_type": 1}]}),
        (32, 4, {"resources": [{"resource_type": 4, "resource_name": "1", "configuration_keys": None},
                               {"resource_type": 2, "resource_name": TOPIC, "configuration_keys": None},
                               {"resource_type": 32, "resource_name": GROUP, "configuration_keys": None}]}),
        (33, 2, {"resources": [{"resource_type": 4, "resource_name": "", "configs": []},
                               {"resource_type": 2, "resource_name": TOPIC, "configs": []},
                               {"resource_type": 32, "resource_name": GROUP, "configs": []}], "validate_only": True}),
        (44, 1, {"resources": [{"resource_type": 4, "resource_name": "", "configs": []},
                               {"resource_type": 2, "resource_name": TOPIC, "configs": []},
                               {"resource_type": 32, "resource_name": GROUP, "configs": []}], "validate_only": True}),
        (34, 2, {"dirs": [{"path": "/nowhere", "topics": [{"name": TOPIC, "partitions": [0]}]}]}),
        (35, 4, {"topics": None}),
        (36, 2, {"auth_bytes": b""}),
        (37, 3, {"topics": [{"name": TOPIC, "count": 3, "assignments": None}], "validate_only": True}),
        (42, 2, {"groups_names": ["nobody"]}),
        (43, 2, {"election_type": 0, "topic_partitions": [{"topic": TOPIC, "partitions": [0]}]}),
        (45, 0, {"topics": [{"name": TOPIC, "partitions": [{"partition_index": 0, "replicas": [1]}]}]}),
        (46, 0, {"topics": None}),
        (47, 0, {"group_id": GROUP, "topics": [{"name": TOPIC, "partitions": partitions}]}),
        (48, 1, {"components": [], "strict": False}),
        (49, 1, {"entries": [{"entity": [{"entity_type": "user", "entity_name": "a"}],
                              "ops": [{"key": "producer_byte_rate", "value": 1000.0, "remove": False}]}],
                 "validate_only": True}),
        (50, 0, {"users": None}),
        (51, 0, {"deletions": [{"name": "a", "mechanism": 1}], "upsertions": []}),
        (55, 2, {"topics": [{"topic_name": "__cluster_metadata", "partitions": [{"partition_index": 0}]}]}),
        (60, 1, {"include_cluster_authorized_operations": True, "endpoint_type": 1}),
        (61, 0, {"topics": [{"name": TOPIC, "partition_indexes": [0]}]}),
        (68, 1, {"group_id": "cg", "member_id": str(uuid.uuid4()), "member_epoch": 0, "rebalance_timeout": 10000,
                 "subscribed_topic_names": [TOPIC], "topic_partitions": []}),
        (69, 1, {"group_ids": ["cg"], "include_authorized_operations": False}),
        (88, 0, {"group_id": streams, "member_id": str(uuid.uuid4()), "member_epoch": 0, "endpoint_information_epoch": 0,
                 "instance_id": None, "rack_id": None, "rebalance_timeout": 10000, "topology": {"epoch": 0, "subtopologies": [
                     {"subtopology_id": "0", "source_topics": [TOPIC], "source_topic_regex": [],
                      "state_changelog_topics": [{"name": f"{streams}-changelog", "partitions": 0, "replication_factor": 0,
                                                  "topic_configs": []}],
                      "repartition_sink_topics": [], "repartition_source_topics": [], "copartition_groups": []}]},
                 "active_tasks": [], "standby_tasks": [], "warmup_tasks": [], "process_id": "p", "user_endpoint": None,
                 "client_tags": [], "task_offsets": None, "task_end_offsets": None, "shutdown_application": False}),
        (89, 0, {"group_ids": [streams], "include_authorized_operations": False}),
        (76, 1, {"group_id": "shg", "member_id": SHARE_MEMBER, "member_epoch": 0, "rack_id": None,
                 "subscribed_topic_names": [TOPIC]}),
        (76, 1, {"group_id": "shg", "member_id": SHARE_MEMBER, "member_epoch": 1, "rack_id": None,
                 "subscribed_topic_names": None}),
        (77, 1, {"group_ids": ["shg"], "include_authorized_operations": False}),
        (78, 1, {"group_id": "shg", "member_id": SHARE_MEMBER, "share_session_epoch": 0, "max_wait": 0,
                 "min_bytes": 1, "max_bytes": 1 << 20, "max_records": 500, "batch_size": 500,
                 "topics": [{"topic_id": tid, "partitions": [{"partition_index": 0, "acknowledgement_batches": []}]}],
                 "forgotten_topics_data": []}),
        (79, 1, {"group_id": "shg", "member_id": SHARE_MEMBER, "share_session_epoch": 1, "topics": [
            {"topic_id": tid, "partitions": [{"partition_index": 0, "acknowledgement_batches": [
                {"first_offset": 0, "last_offset": 0, "acknowledge_types": [1]}]}]}]}),
        (90, 1, {"groups": [{"group_id": "shg", "topics": [{"topic_name": TOPIC, "partitions": [0]}]}]}),
        (90, 1, {"groups": [{"group_id": "shg", "topics": None}]}),
        (91, 0, {"group_id": "shg-idle", "topics": [{"topic_name": TOPIC, "partitions": [
            {"partition_index": 0, "start_offset": 0}]}]}),
        (92, 0, {"group_id": "shg-idle", "topics": [{"topic_name": TOPIC}]}),
        (74, 1, {"resource_types": []}),
        (75, 0, {"topics": [{"name": TOPIC}], "response_partition_limit": 100, "cursor": None}),
        (57, 1, {"feature_updates": [], "validate_only": True}),
        (71, 0, {"client_instance_id": uuid.UUID(int=0)}),
        (72, 0, {"client_instance_id": uuid.uuid4(), "subscription_id": 0, "terminating": True,
                 "compression_type": 0, "metrics": b""}),
    ]


def run_all(broker: Broker, recording: Recording) -> dict[str, list[tuple[set, object]]]:
    """api name -> [(the pairs asked, the response)] for every request."""
    out: dict[str, list[tuple[set, object]]] = {}
    reqs = requests(broker)

    async def main() -> None:
        for api_key, version, body in reqs:
            conn = Connection("10.0.0.9:5000", principal="User:bob", listener="PLAINTEXT")
            frame = encode_request(make_request(api_key, version, body))[4:]
            recording.asked.clear()
            response = await broker.handle_frame(frame, conn)
            try:
                answer = decode(response.data, api_key, version) if response.data is not None else None
            except OutOfBoundValue:  # kio reads no negative timestamp (an Empty transaction's start is -1)
                answer = "undecodable"
            out.setdefault(api_name(api_key), []).append(({(op, kind) for op, kind, _ in recording.asked}, answer))

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    return out


@pytest.fixture(scope="module")
def answered(tmp_path_factory):
    recording = Recording()
    data = tmp_path_factory.mktemp("authorization")
    broker = Broker(BrokerConfig({"log.dirs": str(data), "listeners": "127.0.0.1:0"}), authorizer=recording)
    # What only fills in authorized-operations fields (KIP-430) is not in the table: not recorded.
    computing = broker.auth.authorized_operations

    def unrecorded(*args):
        mark = len(recording.asked)
        try:
            return computing(*args)
        finally:
            del recording.asked[mark:]

    broker.auth.authorized_operations = unrecorded  # type: ignore[method-assign]
    broker.logs.create_topic(TOPIC, 2, {}, 0)
    broker.groups.commit_offsets(0, group_id=GROUP, generation_id=-1, member_id="", group_instance_id=None,
                                 offsets={(TOPIC, 0): (1, -1, None)}, retention_ms=-1, version=8)
    try:
        allowed = run_all(broker, recording)
        recording.allow = lambda resource_type: resource_type != ResourceType.CLUSTER
        for api, results in run_all(broker, recording).items():  # the checks made without the cluster's
            allowed[api] += results
        recording.allow = lambda resource_type: False
        denied = run_all(broker, recording)
    finally:
        broker.close()
    return allowed, denied


def test_every_served_api_has_a_row():
    served = {handler.api_name for handler in load_all().values()}
    assert served == set(REQUIRED), (f"missing: {sorted(served - set(REQUIRED))}, "
                                     f"not served: {sorted(set(REQUIRED) - served)}")


@pytest.mark.parametrize("api", sorted(REQUIRED))
def test_the_handler_asks_what_the_table_says(answered, api):
    allowed, denied = answered
    asked = set().union(*(pairs for pairs, _ in allowed[api] + denied[api]))
    assert asked == required_pairs(api)


def _error_codes(value, found: set[int]) -> set[int]:
    if dataclasses.is_dataclass(value):
        for f in dataclasses.fields(value):
            item = getattr(value, f.name)
            if f.name.endswith("error_code") and item is not None:
                found.add(int(item))
            else:
                _error_codes(item, found)
    elif isinstance(value, tuple):
        for item in value:
            _error_codes(item, found)
    return found


@pytest.mark.parametrize("api", sorted(api for api, checks in REQUIRED.items() if any(c.refused for c in checks)))
def test_a_denied_request_is_answered_with_the_tables_error(answered, api):
    _, denied = answered
    refusals = {int(c.refused) for c in REQUIRED[api] if c.refused is not None}
    found: set[int] = set()
    for pairs, response in denied[api]:
        assert response is not None, f"{api}: no response"  # none of these requests is acks=0
        _error_codes(response, found)
    assert found & refusals, f"{api}: answered {sorted(found)}, the table's errors are {sorted(refusals)}"


def test_without_an_authorizer_nothing_is_refused(tmp_path):
    broker = Broker(BrokerConfig({"log.dirs": str(tmp_path / "data"), "listeners": "127.0.0.1:0"}))
    broker.logs.create_topic(TOPIC, 2, {}, 0)
    broker.groups.commit_offsets(0, group_id=GROUP, generation_id=-1, member_id="", group_instance_id=None,
                                 offsets={(TOPIC, 0): (1, -1, None)}, retention_ms=-1, version=8)
    try:
        everything = run_all(broker, Recording())
    finally:
        broker.close()
    refusals = {int(code) for code in (ErrorCode.topic_authorization_failed, ErrorCode.group_authorization_failed,
                                       ErrorCode.cluster_authorization_failed,
                                       ErrorCode.transactional_id_authorization_failed)}
    for api, results in everything.items():
        for _, response in results:
            assert not (_error_codes(response, set()) & refusals), api
