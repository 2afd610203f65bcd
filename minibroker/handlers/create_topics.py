"""CreateTopics (key 19), v2-v7, with Kafka's validation.

Per topic: a legal name (INVALID_TOPIC_EXCEPTION), a name not already taken (TOPIC_ALREADY_EXISTS),
1..10000 partitions or -1 for num.partitions (INVALID_PARTITIONS), replication factor 1 or -1 (one
broker: anything more is INVALID_REPLICATION_FACTOR), manual assignments only onto this broker and
never together with a count (INVALID_REQUEST), known topic configs with valid values
(INVALID_CONFIG), and a name at most once per request (INVALID_REQUEST). validate_only checks
without creating. v5+ answers the resulting partition count, replication factor and configs. A topic
whose partition directory already holds records no topic file accounts for, or a file-system error,
answers KAFKA_STORAGE_ERROR with a message naming the directory or file (nothing is deleted).
"""

from minibroker.broker import wall_clock_ms
from minibroker.handlers import handler
from minibroker.handlers.common import (
    INVALID_CONFIG,
    INVALID_PARTITIONS,
    INVALID_REPLICA_ASSIGNMENT,
    INVALID_REPLICATION_FACTOR,
    INVALID_REQUEST,
    INVALID_TOPIC_EXCEPTION,
    KAFKA_STORAGE_ERROR,
    TOPIC_ALREADY_EXISTS,
    log,
)
from minibroker.handlers.describe_configs import topic_config_entries
from storage.config import ConfigError
from storage.errors import storage_error_message
from storage.manager import InvalidPartitionsError, InvalidTopicError, StrayDataError, TopicExistsError


def _result(name, code, message=None, info=None, replication_factor=-1, configs=None) -> dict:
    return {
        "name": name,
        "topic_id": info.topic_id if info is not None else None,
        "error_code": code,
        "error_message": message,
        "topic_config_error_code": 0,
        "num_partitions": info.num_partitions if info is not None else -1,
        "replication_factor": replication_factor,
        "configs": configs,
    }


def _create_one(broker, topic, validate_only: bool) -> dict:
    name = topic.name
    partitions = topic.num_partitions
    replication = topic.replication_factor
    if topic.assignments:
        if partitions != -1 or replication != -1:
            return _result(name, INVALID_REQUEST, "Both numPartitions or replicationFactor and replicasAssignments were set. Both cannot be used at the same time.")
        for assignment in topic.assignments:
            if list(assignment.broker_ids) != [broker.node_id]:
                return _result(name, INVALID_REPLICA_ASSIGNMENT, f"partition {assignment.partition_index} is assigned to brokers {list(assignment.broker_ids)}; the only broker is {broker.node_id}")
        indexes = sorted(a.partition_index for a in topic.assignments)
        if indexes != list(range(len(indexes))):
            return _result(name, INVALID_REPLICA_ASSIGNMENT, "partitions must be numbered 0..n-1 in replica assignments")
        partitions = len(indexes)
    if partitions == -1:
        partitions = broker.config["num.partitions"]
    if replication not in (-1, 1):
        return _result(name, INVALID_REPLICATION_FACTOR, f"Unable to replicate the partition {replication} time(s): The target replication factor of {replication} cannot be reached because only 1 broker(s) are registered.")
    overrides = {}
    for entry in topic.configs:
        if entry.value is None:
            return _result(name, INVALID_REQUEST, f"Null value not supported for topic configs: {entry.name}")
        overrides[entry.name] = entry.value
    try:
        info = broker.logs.create_topic(name, partitions, overrides, wall_clock_ms(), validate_only=validate_only)
    except InvalidTopicError as exc:
        return _result(name, INVALID_TOPIC_EXCEPTION, str(exc))
    except TopicExistsError:
        return _result(name, TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
    except InvalidPartitionsError as exc:
        return _result(name, INVALID_PARTITIONS, str(exc))
    except ConfigError as exc:
        return _result(name, INVALID_CONFIG, str(exc))
    except StrayDataError as exc:
        log.error("not creating topic %s: %s", name, exc)
        return _result(name, KAFKA_STORAGE_ERROR, str(exc))
    except OSError as exc:
        log.error("could not create topic %s: %s", name, storage_error_message(exc))
        return _result(name, KAFKA_STORAGE_ERROR, storage_error_message(exc))
    if not validate_only:
        log.info("created topic %s (%d partitions, id %s)", name, info.num_partitions, info.topic_id)
    configs = [
        {"name": e["name"], "value": e["value"], "read_only": False, "config_source": e["config_source"], "is_sensitive": False}
        for e in topic_config_entries(broker, info)
    ]
    return _result(name, 0, None, info, 1, configs)


@handler(19, 2, 7)
async def create_topics(ctx, request):
    counts: dict[str, int] = {}
    for topic in request.topics:
        counts[topic.name] = counts.get(topic.name, 0) + 1
    results = []
    for topic in request.topics:
        if counts[topic.name] > 1:
            results.append(_result(topic.name, INVALID_REQUEST, "Create topics request from client contains a duplicate topic"))
        else:
            results.append(_create_one(ctx.broker, topic, request.validate_only))
    return {"throttle_time": 0, "topics": results}


__all__ = ["create_topics", "INVALID_PARTITIONS"]
