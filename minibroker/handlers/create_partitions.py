"""CreatePartitions (key 37), v0-v3: add partitions to topics, as a KRaft controller does
(ControllerApis.createPartitions, ReplicationControlManager.createPartitions).

Per topic, in Kafka's order: a name given twice in one request answers INVALID_REQUEST "Duplicate
topic name." once (those results come first); an unknown topic UNKNOWN_TOPIC_OR_PARTITION; a count
equal to or below the current one INVALID_PARTITIONS with Kafka's messages ("Topic already has 3
partition(s)." / "The topic t currently has 3 partition(s); 2 would not be an increase."); more than
10,000 partitions INVALID_PARTITIONS as at creation. Manual assignments must number one per new
partition and name only registered brokers, each once, as many as the topic's replication factor
(INVALID_REPLICA_ASSIGNMENT with Kafka's messages); without them the controller places the new
partitions after the topic's last one, as Kafka's striped placer continues. validate_only checks
without adding. A partition directory already there that holds records (one brought in by hand, say)
is never created over: KAFKA_STORAGE_ERROR naming it, as CreateTopics; so is a disk error.

The new partitions are empty logs with the topic's configs; the metadata log records them (the
commit point) before the answer. The change is announced through `LogManager.subscribe`, the one
place partition changes are published (the KIP-257 quota callback's cluster metadata hangs there);
Metadata, DescribeTopicPartitions and the cluster view (DescribeQuorum's metadata log) see the new
count at once.

The controller-mutation quota (KIP-599): a topic that passed its checks is charged the partitions it
adds, validate_only included (as KRaft); from v3 a topic over the quota is answered
THROTTLING_QUOTA_EXCEEDED and not grown (strict), before v3 it is grown and the response throttled
(permissive).

Authorization: ALTER on each topic, else TOPIC_AUTHORIZATION_FAILED (29), without a message.
"""

from __future__ import annotations

import logging

from typing import TYPE_CHECKING, Any

from minibroker.auth import AclOperation, ResourceType
from minibroker.handlers import Reply, handler
from minibroker.protocol.errors import ErrorCode
from minibroker.handlers.common import THROTTLING_QUOTA_EXCEEDED_MESSAGE, error_answer
from minibroker.protocol.errors import ApiError

if TYPE_CHECKING:
    from minibroker.context import RequestContext

log = logging.getLogger(__name__)


class _Refused(Exception):
    def __init__(self, code: ErrorCode, message: str | None) -> None:
        self.code = code
        self.message = message


def _check_assignments(ctx: RequestContext, name: str, current: int, count: int, assignments) -> None:
    """Kafka's checks of manual assignments (ReplicationControlManager.validateManualPartitionAssignment)."""
    additional = count - current
    if len(assignments) != additional:
        raise _Refused(ErrorCode.invalid_replica_assignment, f"Attempted to add {additional} additional partition(s), "
                                                   f"but only {len(assignments)} assignment(s) were specified.")
    cluster = ctx.cluster
    first = cluster.partition(name, 0)
    assert first is not None  # the topic exists (checked before)
    replication_factor = len(first.replicas)
    for assignment in assignments:
        replicas = sorted(assignment.broker_ids)
        if not replicas:
            raise _Refused(ErrorCode.invalid_replica_assignment, "The manual partition assignment includes an empty replica list.")
        previous = None
        for broker_id in replicas:
            if not cluster.is_registered(broker_id):
                raise _Refused(ErrorCode.invalid_replica_assignment, f"The manual partition assignment includes broker "
                                                           f"{broker_id}, but no such broker is registered.")
            if broker_id == previous:
                raise _Refused(ErrorCode.invalid_replica_assignment, f"The manual partition assignment includes the broker "
                                                           f"{broker_id} more than once.")
            previous = broker_id
        if len(replicas) != replication_factor:
            raise _Refused(ErrorCode.invalid_replica_assignment,
                           f"The manual partition assignment includes a partition with {len(replicas)} replica(s), "
                           f"but this is not consistent with previous partitions, which have "
                           f"{replication_factor} replica(s).")


def _create(ctx: RequestContext, topic, validate_only: bool, quota) -> None:
    logs = ctx.logs
    info = logs.topic(topic.name)
    if info is None:
        raise _Refused(ErrorCode.unknown_topic_or_partition, None)
    try:
        # The count checks come first: validate_only adds nothing.
        logs.add_partitions(topic.name, topic.count, ctx.clock.now_ms(), validate_only=True)
        if topic.assignments is not None:
            _check_assignments(ctx, topic.name, info.num_partitions, topic.count, topic.assignments)
        if not quota.record(topic.count - info.num_partitions, ctx.clock.monotonic_ms()):
            raise _Refused(ErrorCode.throttling_quota_exceeded, THROTTLING_QUOTA_EXCEEDED_MESSAGE)
        if not validate_only:
            assignments = None if topic.assignments is None else [list(a.broker_ids) for a in topic.assignments]
            logs.add_partitions(topic.name, topic.count, ctx.clock.now_ms(), assignments=assignments)
    except (ApiError, OSError) as exc:
        code, message = error_answer(ctx.storage_errors, exc, f"adding partitions to topic {topic.name}")
        # An unknown topic is answered without a message, as Kafka's controller does.
        raise _Refused(code, None if code == ErrorCode.unknown_topic_or_partition else message) from None
    if not validate_only:
        log.info("topic %s: %d partition(s), was %d", topic.name, topic.count, info.num_partitions)


STRICT_SINCE = 3  # KIP-599: THROTTLING_QUOTA_EXCEEDED from this version


@handler(37, 0, 3, client_throttles_from=1)
async def create_partitions(ctx: RequestContext, request: Any) -> Reply:
    quota = ctx.quotas.mutation_quota(ctx, STRICT_SINCE)
    counts: dict[str, int] = {}
    for topic in request.topics:
        counts[topic.name] = counts.get(topic.name, 0) + 1
    results = [{"name": name, "error_code": ErrorCode.invalid_request, "error_message": "Duplicate topic name."}
               for name, count in counts.items() if count > 1]
    allowed = set(ctx.filter_authorized(AclOperation.ALTER, ResourceType.TOPIC, [n for n, c in counts.items() if c == 1]))
    for topic in request.topics:
        if counts[topic.name] > 1:
            continue
        if topic.name not in allowed:
            results.append({"name": topic.name, "error_code": ErrorCode.topic_authorization_failed,
                            "error_message": None})
            continue
        try:
            _create(ctx, topic, bool(request.validate_only), quota)
        except _Refused as refused:
            results.append({"name": topic.name, "error_code": refused.code, "error_message": refused.message})
        else:
            results.append({"name": topic.name, "error_code": ErrorCode.none, "error_message": None})
    return Reply({"results": results}, ctx.quotas.mutation_throttle_ms(ctx, quota))
