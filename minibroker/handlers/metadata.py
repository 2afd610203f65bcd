"""Metadata (key 3): the one broker, its topics, and auto-creation.

Quirks: a null topic list (v1+) means every topic, and so does an empty list at v0. Topics may be
named by id from v10 on; one with neither a name nor an id is answered INVALID_REQUEST, and before
v12 an error topic without a name is answered with the name "" (the field is not nullable there).
Auto-creation needs both `auto.create.topics.enable` and the request's allow_auto_topic_creation
(v4+; always allowed before). Unlike KRaft Kafka, which answers
LEADER_NOT_AVAILABLE until the new topic's leader is elected, a topic created here is answered at
once, so producers do not need a second round trip.
"""

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
                if allow_create:
                    info, code = create_topic_or_error(broker, name)
                    if info is None:
                        topics.append(_error_topic(name, None, code))
                        continue
                else:
                    topics.append(_error_topic(name, None, UNKNOWN_TOPIC_OR_PARTITION))
                    continue
            topics.append(topic_metadata(broker, info, include_ops))
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
