"""Which operations each API needs: the one table, beside the handlers (Kafka's KafkaApis and
AuthHelper checks, ControllerApis for the APIs a KRaft broker forwards, as of Kafka 4.4).

Each handler asks at the point it knows the resource (`ctx.authorize`, `ctx.filter_authorized`,
`ctx.authorize_cluster`, `ctx.authorize_by_resource_type`; minibroker.context); this table says
what it must ask, and tests/broker/test_authorization.py sends every API with an authorizer that
denies and records, and checks the handler asked exactly this. docs/security.md prints it.

A `Check`: the operation, the resource type, which resource of the type (`of`), the error a refusal
answers (None: the resource is silently left out of a list, or the denial only changes a field), and
when the check applies (`when`, empty: always). Checks an API makes only to fill in
authorized-operations fields (KIP-430) are not listed: those ask every supported operation.
Without an authorizer (authorizer.class.name empty) every check allows.
"""

from __future__ import annotations

from dataclasses import dataclass

from minibroker.auth import AclOperation as Op
from minibroker.auth import ResourceType as Rt
from minibroker.protocol.errors import ErrorCode

__all__ = ["Check", "REQUIRED"]

TOPIC_DENIED = ErrorCode.topic_authorization_failed
GROUP_DENIED = ErrorCode.group_authorization_failed
CLUSTER_DENIED = ErrorCode.cluster_authorization_failed
TXN_DENIED = ErrorCode.transactional_id_authorization_failed


@dataclass(frozen=True)
class Check:
    operation: Op
    resource: Rt
    of: str
    refused: ErrorCode | None
    when: str = ""


def _topic(op: Op, refused: ErrorCode | None = TOPIC_DENIED, when: str = "", of: str = "each topic") -> Check:
    return Check(op, Rt.TOPIC, of, refused, when)


def _group(op: Op, refused: ErrorCode | None = GROUP_DENIED, when: str = "", of: str = "the group") -> Check:
    return Check(op, Rt.GROUP, of, refused, when)


def _cluster(op: Op, refused: ErrorCode | None = CLUSTER_DENIED, when: str = "") -> Check:
    return Check(op, Rt.CLUSTER, "the cluster", refused, when)


def _txn(op: Op, refused: ErrorCode | None = TXN_DENIED, when: str = "",
         of: str = "the transactional id") -> Check:
    return Check(op, Rt.TRANSACTIONAL_ID, of, refused, when)


# By Kafka's API name (minibroker.handlers' Handler.api_name).
REQUIRED: dict[str, tuple[Check, ...]] = {
    "Produce": (_txn(Op.WRITE, when="the request holds transactional batches"), _topic(Op.WRITE)),
    "Fetch": (_topic(Op.READ, when="from a consumer"),
              _cluster(Op.CLUSTER_ACTION, TOPIC_DENIED, when="from a follower (replica id >= 0)")),
    "ListOffsets": (_topic(Op.DESCRIBE),),
    "OffsetForLeaderEpoch": (_topic(Op.DESCRIBE),),
    "Metadata": (_topic(Op.DESCRIBE, when="named (asked for every topic: left out)"),
                 _cluster(Op.CREATE, None, when="auto-creating a topic (else CREATE on it)"),
                 _topic(Op.CREATE, when="auto-creating it without CREATE on the cluster", of="each topic to create"),
                 _cluster(Op.DESCRIBE, None, when="cluster authorized operations asked (v8-v10): 0 without it")),
    "OffsetCommit": (_group(Op.READ), _topic(Op.READ)),
    "OffsetFetch": (_group(Op.DESCRIBE), _topic(Op.DESCRIBE, when="named (all of a group's: left out)")),
    "FindCoordinator": (_group(Op.DESCRIBE, when="key type 0 (a group)", of="the key"),
                        _txn(Op.DESCRIBE, when="key type 1 (a transactional id)", of="the key"),
                        _cluster(Op.CLUSTER_ACTION, when="key type 2 (a share group's state)")),
    "JoinGroup": (_group(Op.READ),),
    "Heartbeat": (_group(Op.READ),),
    "LeaveGroup": (_group(Op.READ),),
    "SyncGroup": (_group(Op.READ),),
    "DescribeGroups": (_group(Op.DESCRIBE, of="each group"),),
    "ListGroups": (_cluster(Op.DESCRIBE, None, when="lists every group"),
                   _group(Op.DESCRIBE, None, when="without DESCRIBE on the cluster: only these", of="each group")),
    "SaslHandshake": (),
    "ApiVersions": (),
    "CreateTopics": (_cluster(Op.CREATE, None, when="allows every topic (else CREATE on each)"),
                     _topic(Op.CREATE, when="without CREATE on the cluster"),
                     _topic(Op.DESCRIBE_CONFIGS, TOPIC_DENIED, when="to see its configs (topic_config_error_code)")),
    "DeleteTopics": (_topic(Op.DELETE), _topic(Op.DESCRIBE, when="named by id (then a null name)")),
    "DeleteRecords": (_topic(Op.DELETE),),
    "InitProducerId": (_txn(Op.WRITE, when="transactional"),
                       _cluster(Op.IDEMPOTENT_WRITE, when="idempotent, unless WRITE on some topic (KIP-679)"),
                       _topic(Op.WRITE, CLUSTER_DENIED, when="idempotent without IDEMPOTENT_WRITE: on any topic",
                              of="some topic")),
    "AddPartitionsToTxn": (_txn(Op.WRITE, when="v0-v3 (from a producer)"),
                           _topic(Op.WRITE, when="v0-v3; never an internal topic"),
                           _cluster(Op.CLUSTER_ACTION, when="v4+ (from a broker)")),
    "AddOffsetsToTxn": (_txn(Op.WRITE), _group(Op.READ)),
    "EndTxn": (_txn(Op.WRITE),),
    "WriteTxnMarkers": (_cluster(Op.ALTER, None, when="or else:"), _cluster(Op.CLUSTER_ACTION)),
    "TxnOffsetCommit": (_txn(Op.WRITE), _group(Op.READ), _topic(Op.READ)),
    "DescribeAcls": (_cluster(Op.DESCRIBE),),
    "CreateAcls": (_cluster(Op.ALTER),),
    "DeleteAcls": (_cluster(Op.ALTER),),
    "DescribeConfigs": (_cluster(Op.DESCRIBE_CONFIGS, when="BROKER, BROKER_LOGGER resources"),
                        _topic(Op.DESCRIBE_CONFIGS, when="TOPIC resources"),
                        _group(Op.DESCRIBE_CONFIGS, when="GROUP resources", of="each group")),
    "AlterConfigs": (_cluster(Op.ALTER_CONFIGS, when="BROKER resources"),
                     _topic(Op.ALTER_CONFIGS, when="TOPIC resources"),
                     _group(Op.ALTER_CONFIGS, when="GROUP resources", of="each group")),
    "AlterReplicaLogDirs": (_cluster(Op.ALTER),),
    "DescribeLogDirs": (_cluster(Op.DESCRIBE),),
    "SaslAuthenticate": (),
    "CreatePartitions": (_topic(Op.ALTER),),
    "DeleteGroups": (_group(Op.DELETE, of="each group"),),
    "ElectLeaders": (_cluster(Op.ALTER),),
    "IncrementalAlterConfigs": (_cluster(Op.ALTER_CONFIGS, when="BROKER, BROKER_LOGGER resources"),
                                _topic(Op.ALTER_CONFIGS, when="TOPIC resources"),
                                _group(Op.ALTER_CONFIGS, when="GROUP resources", of="each group")),
    "AlterPartitionReassignments": (_cluster(Op.ALTER),),
    "ListPartitionReassignments": (_cluster(Op.DESCRIBE),),
    "OffsetDelete": (_group(Op.DELETE), _topic(Op.READ)),
    "DescribeClientQuotas": (_cluster(Op.DESCRIBE_CONFIGS),),
    "AlterClientQuotas": (_cluster(Op.ALTER_CONFIGS),),
    "DescribeUserScramCredentials": (_cluster(Op.DESCRIBE),),
    "AlterUserScramCredentials": (_cluster(Op.ALTER),),
    "DescribeQuorum": (_cluster(Op.DESCRIBE),),
    "DescribeCluster": (_cluster(Op.DESCRIBE, None, when="cluster authorized operations asked: 0 without it"),),
    "DescribeProducers": (_topic(Op.READ),),
    "DescribeTransactions": (_txn(Op.DESCRIBE, of="each transactional id"),
                             _topic(Op.DESCRIBE, None, when="a transaction's topics: left out")),
    "ListTransactions": (_txn(Op.DESCRIBE, None, of="each transactional id"),),
    "ConsumerGroupHeartbeat": (_group(Op.READ), _topic(Op.DESCRIBE, when="each subscribed topic name")),
    "ConsumerGroupDescribe": (_group(Op.DESCRIBE, of="each group"),
                              _topic(Op.DESCRIBE, when="each topic its members subscribe to or are assigned")),
    "ListConfigResources": (_cluster(Op.DESCRIBE_CONFIGS),),
    "DescribeTopicPartitions": (_topic(Op.DESCRIBE, when="named (asked for every topic: left out)"),),
    "UpdateFeatures": (_cluster(Op.ALTER),),
    "StreamsGroupHeartbeat": (_group(Op.READ), _topic(Op.DESCRIBE, when="each topic of the topology sent"),
                              _cluster(Op.CREATE, None, when="to create internal topics (else CREATE on each)"),
                              _topic(Op.CREATE, None, when="an internal topic to create: else a status, no error",
                                     of="each internal topic")),
    "StreamsGroupDescribe": (_group(Op.DESCRIBE, of="each group"),
                             _topic(Op.DESCRIBE, when="each topic of the group's topology")),
    # KIP-932's share groups (Kafka 4.4's handleShareGroupHeartbeat ... handleDeleteShareGroupOffsetsRequest).
    "ShareGroupHeartbeat": (_group(Op.READ), _topic(Op.DESCRIBE, when="each subscribed topic name")),
    "ShareGroupDescribe": (_group(Op.DESCRIBE, of="each group"),
                           _topic(Op.DESCRIBE, when="each topic its members subscribe to or are assigned")),
    "ShareFetch": (_group(Op.READ), _topic(Op.READ)),
    "ShareAcknowledge": (_group(Op.READ), _topic(Op.READ)),
    "DescribeShareGroupOffsets": (_group(Op.DESCRIBE, of="each group"),
                                  _topic(Op.DESCRIBE, when="named (all of a group's: left out)")),
    "AlterShareGroupOffsets": (_group(Op.READ), _topic(Op.READ)),
    "DeleteShareGroupOffsets": (_group(Op.DELETE), _topic(Op.READ)),
    "GetTelemetrySubscriptions": (),  # KIP-714: every client may ask (Kafka checks nothing)
    "PushTelemetry": (),
}


def required_pairs(api_name: str) -> set[tuple[Op, Rt]]:
    """The (operation, resource type) pairs the API may ask."""
    return {(check.operation, check.resource) for check in REQUIRED[api_name]}
