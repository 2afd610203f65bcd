"""Metadata (key 3): the cluster's brokers (those up), its topics, and auto-creation.

Quirks: a null topic list (v1+) means every topic, and so does an empty list at v0. From v12 on a
topic may be asked for by id (Java's Admin sends the id with an empty name, not a null one): as in
Kafka's handleTopicMetadataRequest, any non-zero id in the request makes it a lookup by id (names
alongside are ignored), and an unknown id is answered UNKNOWN_TOPIC_ID with a null name; ids in a
v10/v11 request, which Kafka refuses, are answered INVALID_REQUEST. A topic with neither a name nor
an id (the name is nullable from v10) is answered UNKNOWN_TOPIC_OR_PARTITION, with the name "" before
v12 (the response field is not nullable there).

Auto-creation needs both `auto.create.topics.enable` and the request's allow_auto_topic_creation
(v4+; always allowed before), and room under max.broker.partitions (minibroker.limits): a topic
beyond it is answered UNKNOWN_TOPIC_OR_PARTITION, as if auto-creation were off (a warning is logged
with the count). Creating topics takes milliseconds each, so a request naming thousands lets other
connections in every few topics. Unlike KRaft Kafka, which answers LEADER_NOT_AVAILABLE until the
new topic's leader is elected, a topic created here is answered at once, so producers do not need a
second round trip.

Metadata v13's top-level error code (KIP-1102) is NONE: Kafka's broker never sets it (a proxy or a
broker of the future may answer REBOOTSTRAP_REQUIRED, 129, to send clients back to their bootstrap
servers). An `error` fault rule (minibroker.faults, `Metadata:error:error_code=129`) answers it, so a
test can see its client rebootstrap; below v13 the rule's code goes to each requested topic.

Authorization (Kafka's handleTopicMetadataRequest): DESCRIBE on each topic. Asked for every topic,
the ones the principal may not describe are left out; named (or asked for by id), they are answered
TOPIC_AUTHORIZATION_FAILED (29) with a zero topic id (by id: with the id and a null name, which
are not secret). Auto-creation also needs CREATE on the cluster or on the topic, else the topic is
answered 29. The cluster's authorized operations (v8-v10) are 0 without DESCRIBE on the cluster.

Only Kafka's internal topics (`__consumer_offsets`, `__transaction_state`, `__share_group_state`)
are marked is_internal; the audit topic `__minibroker_audit` is an ordinary topic to clients
(consumable by name or pattern, as any topic), though only the broker may write it.
"""

from __future__ import annotations

import logging

from typing import TYPE_CHECKING, Any

import trio

from minibroker.auth import CLUSTER_RESOURCE, NO_AUTHORIZED_OPERATIONS, AclOperation, ResourceType
from minibroker.handlers import Reply, handler
from minibroker.handlers.common import create_topic_or_error
from minibroker.limits import partitions_in_use
from minibroker.protocol.errors import ErrorCode
from minibroker.storage.config import InvalidTopicError, is_internal, validate_topic_name

if TYPE_CHECKING:
    from minibroker.context import RequestContext

log = logging.getLogger(__name__)
YIELD_EVERY = 16  # auto-created topics between checkpoints


def topic_metadata(ctx: RequestContext, info, include_ops: bool) -> dict:
    """A topic's answer, from the cluster view: each partition's leader, epoch, replicas and ISR; the
    replicas on brokers that are down are offline; a partition without a leader is
    LEADER_NOT_AVAILABLE (Kafka's MetadataCache)."""
    partitions = []
    cluster = ctx.cluster
    alive = set(cluster.broker_ids())
    for index in range(info.num_partitions):
        assignment = cluster.partition(info.name, index)
        assert assignment is not None  # index < num_partitions
        leader = assignment.leader if assignment.leader in alive else -1
        partitions.append({
            "error_code": ErrorCode.none if leader >= 0 else ErrorCode.leader_not_available,
            "partition_index": index,
            "leader_id": leader,
            "leader_epoch": assignment.leader_epoch,
            "replica_nodes": assignment.replicas,
            "isr_nodes": assignment.isr,
            "offline_replicas": tuple(r for r in assignment.replicas if r not in alive),
        })
    return {
        "error_code": ErrorCode.none,
        "name": info.name,
        "topic_id": info.topic_id,
        "is_internal": is_internal(info.name),
        "partitions": partitions,
        "topic_authorized_operations": ctx.authorized_operations(ResourceType.TOPIC, info.name)
        if include_ops else NO_AUTHORIZED_OPERATIONS,
    }


@handler(3, 0, 13, client_throttles_from=6)
async def metadata(ctx: RequestContext, request: Any) -> Reply:
    include_ops = getattr(request, "include_topic_authorized_operations", False)
    allow_create = getattr(request, "allow_auto_topic_creation", True) and ctx.config[
        "auto.create.topics.enable"
    ]
    if request.topics is None or (ctx.version == 0 and not request.topics):
        topics = [topic_metadata(ctx, info, include_ops) for info in ctx.logs.topics()
                  if ctx.authorize(AclOperation.DESCRIBE, ResourceType.TOPIC, info.name, log_if_denied=False)]
    else:
        topic_ids = [t.topic_id for t in request.topics if getattr(t, "topic_id", None) is not None]
        if topic_ids and ctx.version < 12:
            topics = [_error_topic(t.name or "", t.topic_id, ErrorCode.invalid_request) for t in request.topics]
        elif topic_ids:
            topics = [_by_id(ctx, topic_id, include_ops) for topic_id in dict.fromkeys(topic_ids)]
        else:
            creation = _AutoCreation(ctx, allow_create)
            topics = []
            for t in request.topics:
                topics.append(_by_name(ctx, t.name, creation, include_ops, ctx.version))
                await creation.maybe_yield()
            creation.log_refused(ctx.connection.peer)
    cluster_operations = NO_AUTHORIZED_OPERATIONS
    if getattr(request, "include_cluster_authorized_operations", False):
        cluster_operations = ctx.authorized_operations(ResourceType.CLUSTER, CLUSTER_RESOURCE) \
            if ctx.authorize_cluster(AclOperation.DESCRIBE) else 0
    return Reply({
        "brokers": ctx.cluster.brokers(ctx.connection.listener),
        "cluster_id": ctx.cluster.cluster_id,
        "controller_id": ctx.cluster.controller_id,
        "topics": topics,
        "cluster_authorized_operations": cluster_operations,
        "error_code": ErrorCode.none,
    })


class _AutoCreation:
    """One request's auto-creation, within max.broker.partitions."""

    def __init__(self, ctx: RequestContext, allowed: bool) -> None:
        self.ctx = ctx
        self.max_partitions: int = ctx.config["max.broker.partitions"]
        self.allowed = allowed
        self.create_on_cluster: bool | None = None  # asked at the first topic to create
        self.in_use: int | None = None  # partitions the broker holds, counted at the first creation
        self.refused = 0
        self.since_yield = 0

    def may_create(self, name: str) -> bool:
        """CREATE on the cluster (asked once, not logged when denied) or on the topic."""
        if self.create_on_cluster is None:
            self.create_on_cluster = self.ctx.authorize_cluster(AclOperation.CREATE, log_if_denied=False)
        return self.create_on_cluster or self.ctx.authorize(AclOperation.CREATE, ResourceType.TOPIC, name)

    def create(self, name: str):
        """(info, 0), or (None, error code) when the topic cannot or may not be created."""
        ctx = self.ctx
        if self.in_use is None:
            self.in_use = partitions_in_use(ctx.logs)
        if self.in_use + ctx.config["num.partitions"] > self.max_partitions:
            self.refused += 1
            return None, _refused_code(name)
        info, code = create_topic_or_error(ctx, name)
        if info is not None:
            self.in_use += info.num_partitions
            self.since_yield += 1
        return info, code

    async def maybe_yield(self) -> None:
        if self.since_yield >= YIELD_EVERY:
            # Creating topics takes milliseconds each: let other connections in meanwhile.
            self.since_yield = 0
            await trio.lowlevel.checkpoint()
            self.in_use = None  # others may have created or deleted topics

    def log_refused(self, peer: str) -> None:
        if self.refused:
            log.warning("%s: auto-creation of %d topic(s) refused, max.broker.partitions=%d reached",
                        peer, self.refused, self.max_partitions)


def _refused_code(name: str) -> int:
    """Over the partition cap: the topic stays unknown, unless its name is illegal anyway."""
    try:
        validate_topic_name(name)
    except InvalidTopicError:
        return ErrorCode.invalid_topic_exception
    return ErrorCode.unknown_topic_or_partition


def _by_id(ctx: RequestContext, topic_id, include_ops: bool) -> dict:
    info = ctx.logs.topic_by_id(topic_id)
    if info is None:
        return _error_topic(None, topic_id, ErrorCode.unknown_topic_id)
    if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.TOPIC, info.name):
        return _error_topic(None, topic_id, ErrorCode.topic_authorization_failed)
    return topic_metadata(ctx, info, include_ops)


def _by_name(ctx: RequestContext, name: str | None, creation: _AutoCreation, include_ops: bool, version: int) -> dict:
    if name is None:  # v10+: neither a name nor an id
        return _error_topic(None, None, ErrorCode.unknown_topic_or_partition, version)
    if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.TOPIC, name):
        return _error_topic(name, None, ErrorCode.topic_authorization_failed)  # exists or not: not said
    info = ctx.logs.topic(name)
    if info is None:
        if not creation.allowed:
            # Kafka's KafkaApis: an illegal name is INVALID_TOPIC_EXCEPTION, a legal one unknown.
            return _error_topic(name, None, _refused_code(name), operations=_operations(ctx, name, include_ops))
        if not creation.may_create(name):
            return {**_error_topic(name, None, ErrorCode.topic_authorization_failed), "is_internal": is_internal(name)}
        info, code = creation.create(name)
        if info is None:
            return _error_topic(name, None, code, operations=_operations(ctx, name, include_ops))
    return topic_metadata(ctx, info, include_ops)


def _operations(ctx: RequestContext, name: str, include_ops: bool) -> int:
    """A named topic's authorized operations, which Kafka answers whether or not the topic exists."""
    return ctx.authorized_operations(ResourceType.TOPIC, name) if include_ops and name else NO_AUTHORIZED_OPERATIONS


def _error_topic(name, topic_id, code, version: int = 12, operations: int = NO_AUTHORIZED_OPERATIONS) -> dict:
    return {
        "error_code": code,
        "name": "" if name is None and version < 12 else name,
        "topic_id": topic_id,
        "is_internal": False,
        "partitions": (),
        "topic_authorized_operations": operations,
    }


__all__ = ["metadata", "topic_metadata"]
