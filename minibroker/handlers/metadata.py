"""Metadata (key 3): the one broker, its topics, and auto-creation.

Quirks: a null topic list (v1+) means every topic, and so does an empty list at v0. Topics may be
named by id from v10 on; one with neither a name nor an id is answered INVALID_REQUEST, and before
v12 an error topic without a name is answered with the name "" (the field is not nullable there).
Auto-creation needs both `auto.create.topics.enable` and the request's allow_auto_topic_creation
(v4+; always allowed before), and room under max.broker.partitions (minibroker.limits): a topic
beyond it is answered UNKNOWN_TOPIC_OR_PARTITION, as if auto-creation were off (a warning is logged
with the count). Creating topics takes milliseconds each, so a request naming thousands lets other
connections in every few topics. Unlike KRaft Kafka, which answers LEADER_NOT_AVAILABLE until the
new topic's leader is elected, a topic created here is answered at once, so producers do not need a
second round trip.
"""

import logging

import trio

from minibroker.handlers import handler
from minibroker.handlers.common import (
    INVALID_REQUEST,
    INVALID_TOPIC_EXCEPTION,
    NO_AUTHORIZED_OPERATIONS,
    TOPIC_ALL_OPERATIONS,
    UNKNOWN_TOPIC_ID,
    UNKNOWN_TOPIC_OR_PARTITION,
    CLUSTER_ALL_OPERATIONS,
    create_topic_or_error,
)
from minibroker.limits import partitions_in_use
from storage.config import InvalidTopicError, validate_topic_name

log = logging.getLogger(__name__)
YIELD_EVERY = 16  # auto-created topics between checkpoints


def topic_metadata(broker, info, include_ops: bool) -> dict:
    node = broker.node_id
    return {
        "error_code": 0,
        "name": info.name,
        "topic_id": info.topic_id,
        "is_internal": info.name.startswith("__"),
        "partitions": [
            {
                "error_code": 0,
                "partition_index": p,
                "leader_id": node,
                "leader_epoch": 0,
                "replica_nodes": (node,),
                "isr_nodes": (node,),
                "offline_replicas": (),
            }
            for p in range(info.num_partitions)
        ],
        "topic_authorized_operations": TOPIC_ALL_OPERATIONS if include_ops else NO_AUTHORIZED_OPERATIONS,
    }


@handler(3, 0, 13)
async def metadata(ctx, request):
    broker = ctx.broker
    include_ops = getattr(request, "include_topic_authorized_operations", False)
    allow_create = getattr(request, "allow_auto_topic_creation", True) and broker.config[
        "auto.create.topics.enable"
    ]
    topics = []
    in_use = None  # partitions the broker holds, counted when a first topic is to be created
    created = refused = 0
    if request.topics is None or (ctx.version == 0 and not request.topics):
        topics = [topic_metadata(broker, info, include_ops) for info in broker.logs.topics()]
    else:
        for wanted in request.topics:
            name = getattr(wanted, "name", None)
            topic_id = getattr(wanted, "topic_id", None)
            if name is None and topic_id is None:
                # Neither a name nor an id (name is nullable from v10): Kafka's InvalidRequestException.
                topics.append(_error_topic(None, None, INVALID_REQUEST, ctx.version))
                continue
            if name is None:
                info = broker.logs.topic_by_id(topic_id)
                if info is None:
                    topics.append(_error_topic(None, topic_id, UNKNOWN_TOPIC_ID, ctx.version))
                    continue
            else:
                info = broker.logs.topic(name)
            if info is None:
                if not allow_create:
                    topics.append(_error_topic(name, None, UNKNOWN_TOPIC_OR_PARTITION))
                    continue
                if in_use is None:
                    in_use = partitions_in_use(broker.logs)
                if in_use + broker.config["num.partitions"] > broker.max_partitions:
                    refused += 1
                    topics.append(_error_topic(name, None, _refused_code(name)))
                    continue
                info, code = create_topic_or_error(broker, name)
                if info is None:
                    topics.append(_error_topic(name, None, code))
                    continue
                in_use += info.num_partitions
                created += 1
                if created % YIELD_EVERY == 0:
                    # Creating topics takes milliseconds each: let other connections in meanwhile.
                    await trio.lowlevel.checkpoint()
                    in_use = None  # others may have created or deleted topics
            topics.append(topic_metadata(broker, info, include_ops))
        if refused:
            log.warning(
                "%s: auto-creation of %d topic(s) refused, max.broker.partitions=%d reached",
                ctx.connection.peer, refused, broker.max_partitions,
            )
    return {
        "throttle_time": 0,
        "brokers": [broker.broker_endpoint(ctx.connection.listener)],
        "cluster_id": broker.cluster_id,
        "controller_id": broker.node_id,
        "topics": topics,
        "cluster_authorized_operations": CLUSTER_ALL_OPERATIONS
        if getattr(request, "include_cluster_authorized_operations", False)
        else NO_AUTHORIZED_OPERATIONS,
        "error_code": 0,
    }


def _refused_code(name: str) -> int:
    """Over the partition cap: the topic stays unknown, unless its name is illegal anyway."""
    try:
        validate_topic_name(name)
    except InvalidTopicError:
        return INVALID_TOPIC_EXCEPTION
    return UNKNOWN_TOPIC_OR_PARTITION


def _error_topic(name, topic_id, code, version: int = 12) -> dict:
    return {
        "error_code": code,
        "name": "" if name is None and version < 12 else name,
        "topic_id": topic_id,
        "is_internal": False,
        "partitions": (),
        "topic_authorized_operations": NO_AUTHORIZED_OPERATIONS,
    }


__all__ = ["metadata", "topic_metadata", "INVALID_TOPIC_EXCEPTION"]
