"""CreateTopics (key 19), v2-v7, with Kafka's validation.

Per topic, checked by the controller (minibroker.storage.controller) in Kafka's order: a legal name
(INVALID_TOPIC_EXCEPTION), a name not already taken (TOPIC_ALREADY_EXISTS), manual assignments onto
registered brokers, each at most once per partition (INVALID_REPLICA_ASSIGNMENT), or 1..10000
partitions or -1 for num.partitions (INVALID_PARTITIONS) and a replication factor the registered
brokers can meet, -1 for default.replication.factor (INVALID_REPLICATION_FACTOR), known topic configs
with valid values (INVALID_CONFIG); here: assignments never together with a count (INVALID_REQUEST),
and a name at most once per request (INVALID_REQUEST). validate_only checks without creating.
Replicas are placed and leaders spread as Kafka's striped placer does, racks first. v5+ answers the resulting partition count, replication factor and configs. A topic
whose partition directory already holds records no topic file accounts for, or a file-system error,
answers KAFKA_STORAGE_ERROR with a message naming the directory or file (nothing is deleted).

The controller-mutation quota (KIP-599, minibroker.client_quotas): a topic that passed every other
check is charged its partition count; from v6 a topic over the quota is answered
THROTTLING_QUOTA_EXCEEDED and not created (strict), before v6 it is created and the response is
throttled (permissive). As KRaft's controller, validate_only is charged too.

Limits (minibroker.limits): a request asking for more than 10,000 partitions in all is refused
whole, every topic POLICY_VIOLATION "Excessively large number of partitions per request." (KRaft);
a topic that would take the broker past max.broker.partitions is POLICY_VIOLATION with a message
naming the limit, after its other checks (so a bad name is still INVALID_TOPIC_EXCEPTION).

Authorization (Kafka's ControllerApis.createTopics): CREATE on the cluster, or on each topic, else
the topic is answered TOPIC_AUTHORIZATION_FAILED (29) "Authorization failed."; a topic created
without DESCRIBE_CONFIGS on it is answered with no configs and topic_config_error_code 29.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from minibroker.auth import AclOperation, ResourceType
from minibroker.handlers import Reply, handler
from minibroker.handlers.common import THROTTLING_QUOTA_EXCEEDED_MESSAGE, error_answer, log
from minibroker.handlers.describe_configs import topic_config_entries
from minibroker.limits import MAX_PARTITIONS_PER_REQUEST, over_cap_message, partitions_in_use
from minibroker.protocol.errors import ApiError, ErrorCode
from minibroker.storage.manager import TopicExistsError

if TYPE_CHECKING:
    from minibroker.context import RequestContext


def _result(name, code, message=None, info=None, replication_factor=-1, configs=()) -> dict:
    return {
        "name": name,
        "topic_id": info.topic_id if info is not None else None,
        "error_code": code,
        "error_message": message,
        "topic_config_error_code": ErrorCode.none,
        "num_partitions": info.num_partitions if info is not None else -1,
        "replication_factor": replication_factor,
        "configs": configs,
    }


def _create_one(ctx: RequestContext, topic, validate_only: bool, in_use: list[int], quota) -> dict:
    """One topic; `in_use` is [partitions the broker holds], updated as topics are created; `quota`
    the request's controller-mutation quota, charged once the topic passed its checks."""
    name = topic.name
    partitions = topic.num_partitions
    replication = topic.replication_factor
    assignments = None
    if topic.assignments:
        if partitions != -1 or replication != -1:
            return _result(name, ErrorCode.invalid_request, "Both numPartitions or replicationFactor and replicasAssignments were set. Both cannot be used at the same time.")
        assignments = {a.partition_index: list(a.broker_ids) for a in topic.assignments}
        partitions = len(assignments)
    if partitions == -1:
        partitions = ctx.config["num.partitions"]
    overrides = {}
    for entry in topic.configs:
        if entry.value is None:
            return _result(name, ErrorCode.invalid_request, f"Null value not supported for topic configs: {entry.name}")
        overrides[entry.name] = entry.value
    # Over max.broker.partitions: validate only (so that other faults are answered first), then refuse.
    over_cap = isinstance(partitions, int) and in_use[0] + partitions > ctx.config["max.broker.partitions"]
    # With a mutation quota the topic is validated first, so only a topic about to be created is
    # charged (KRaft charges after its checks); without one, validation is the creation's own.
    charged = quota.bounded and not over_cap
    try:
        info = ctx.logs.create_topic(name, partitions, overrides, ctx.clock.now_ms(),
                                     validate_only=validate_only or over_cap or charged,
                                     replication_factor=replication, assignments=assignments)
        if charged:
            if not quota.record(info.num_partitions, ctx.clock.monotonic_ms()):
                return _result(name, ErrorCode.throttling_quota_exceeded, THROTTLING_QUOTA_EXCEEDED_MESSAGE)
            if not validate_only:
                info = ctx.logs.create_topic(name, partitions, overrides, ctx.clock.now_ms(),
                                             replication_factor=replication, assignments=assignments)
    except TopicExistsError:
        return _result(name, ErrorCode.topic_already_exists, f"Topic '{name}' already exists.")
    except (ApiError, OSError) as exc:
        return _result(name, *error_answer(ctx.storage_errors, exc, f"creating topic {name}"))
    if over_cap:
        message = over_cap_message(name, partitions, in_use[0], ctx.config["max.broker.partitions"])
        log.warning("refused CreateTopics: %s", message)
        return _result(name, ErrorCode.policy_violation, message)
    if not validate_only:
        in_use[0] += info.num_partitions
        log.info("created topic %s (%d partitions, id %s)", name, info.num_partitions, info.topic_id)
    configs = [
        {"name": e["name"], "value": e["value"], "read_only": False, "config_source": e["config_source"], "is_sensitive": False}
        for e in topic_config_entries(ctx, info)
    ]
    if assignments:
        replication_factor = len(assignments[0])
    else:
        replication_factor = ctx.config["default.replication.factor"] if replication == -1 else replication
    return _result(name, ErrorCode.none, None, info, replication_factor, configs)


def _requested_partitions(topics, default: int) -> int:
    """Kafka's count for the per-request limit (ReplicationControlManager)."""
    total = 0
    for topic in topics:
        if topic.assignments:
            total += len(topic.assignments)
        elif topic.num_partitions == -1:
            total += default
        elif topic.num_partitions > 0:
            total += topic.num_partitions
    return total


STRICT_SINCE = 6  # KIP-599: THROTTLING_QUOTA_EXCEEDED from this version


def _authorized_for_create(ctx: RequestContext, names: list[str]) -> set[str]:
    """CREATE on the cluster allows every topic (not logged when denied), else CREATE on each topic."""
    if ctx.authorize_cluster(AclOperation.CREATE, log_if_denied=False):
        return set(names)
    return set(ctx.filter_authorized(AclOperation.CREATE, ResourceType.TOPIC, names))


@handler(19, 2, 7, client_throttles_from=3)
async def create_topics(ctx: RequestContext, request: Any) -> Reply:
    if _requested_partitions(request.topics, ctx.config["num.partitions"]) > MAX_PARTITIONS_PER_REQUEST:
        message = "Excessively large number of partitions per request."
        return Reply({"topics": [_result(t.name, ErrorCode.policy_violation, message) for t in request.topics]})
    counts: dict[str, int] = {}
    for topic in request.topics:
        counts[topic.name] = counts.get(topic.name, 0) + 1
    in_use = [partitions_in_use(ctx.logs)]
    quota = ctx.quotas.mutation_quota(ctx, STRICT_SINCE)
    may_create = _authorized_for_create(ctx, list(counts))
    describable = set(ctx.filter_authorized(AclOperation.DESCRIBE_CONFIGS, ResourceType.TOPIC, counts,
                                            log_if_denied=False))
    results = []
    answered: set[str] = set()
    for topic in request.topics:
        if counts[topic.name] > 1:
            # One answer per name, as Kafka's (its response is keyed by topic name).
            if topic.name not in answered:
                answered.add(topic.name)
                results.append(_result(topic.name, ErrorCode.invalid_request,
                                       "Create topics request from client contains a duplicate topic"))
        elif topic.name not in may_create:
            results.append(_result(topic.name, ErrorCode.topic_authorization_failed, "Authorization failed."))
        else:
            result = _create_one(ctx, topic, request.validate_only, in_use, quota)
            if topic.name not in describable and result["error_code"] == ErrorCode.none:
                # Kafka's ControllerApis: created, but its configs are not the principal's to see.
                result = {**result, "configs": (), "topic_config_error_code": ErrorCode.topic_authorization_failed}
            results.append(result)
    return Reply({"topics": results}, ctx.quotas.mutation_throttle_ms(ctx, quota))


__all__ = ["create_topics"]
