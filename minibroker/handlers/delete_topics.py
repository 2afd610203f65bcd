"""DeleteTopics (key 20), v1-v6: by name, or by id from v6.

The partition logs are closed and their directories removed at once; waiting fetches on them are
woken (they answer UNKNOWN_TOPIC_OR_PARTITION on their next read); the topic's producer state and
committed offsets go with it. The broker's own topics (`__consumer_offsets` and Kafka's other
internal topics, `__minibroker_audit`) are refused with INVALID_TOPIC_EXCEPTION: deleting the offsets
topic would drop every group's committed offsets. (kafka-topics.sh refuses internal topics the same
way, client-side; a KRaft controller would delete them.)

The controller-mutation quota (KIP-599): a topic about to be deleted is charged its partition count;
from v5 a topic over the quota is answered THROTTLING_QUOTA_EXCEEDED and kept (strict), before v5
it is deleted and the response throttled (permissive).

Authorization (Kafka's handleDeleteTopicsRequest): DELETE on each topic, else
TOPIC_AUTHORIZATION_FAILED (29), whether or not it exists; a topic named by id also needs DESCRIBE,
else it is answered 29 with a null name.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from minibroker.auth import AclOperation, ResourceType
from minibroker.handlers import Reply, handler
from minibroker.handlers.common import THROTTLING_QUOTA_EXCEEDED_MESSAGE, broker_owned, error_answer, log
from minibroker.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from minibroker.context import RequestContext


STRICT_SINCE = 5  # KIP-599: THROTTLING_QUOTA_EXCEEDED from this version
DENIED_MESSAGE = "Topic authorization failed."  # Kafka's ApiError(TOPIC_AUTHORIZATION_FAILED)


@handler(20, 1, 6, client_throttles_from=2)
async def delete_topics(ctx: RequestContext, request: Any) -> Reply:
    quota = ctx.quotas.mutation_quota(ctx, STRICT_SINCE)
    wanted = []
    if hasattr(request, "topic_names"):
        wanted = [(name, None) for name in request.topic_names]
    else:
        wanted = [(t.name, t.topic_id) for t in request.topics]
    results: list[dict[str, Any]] = []
    for name, topic_id in wanted:
        info = ctx.logs.resolve(name, topic_id)
        denied = ErrorCode.topic_authorization_failed
        if info is not None and name is None and not ctx.authorize(AclOperation.DESCRIBE, ResourceType.TOPIC,
                                                                   info.name):
            results.append({"name": None, "topic_id": topic_id, "error_code": denied, "error_message": DENIED_MESSAGE})
            continue
        if (info is not None or name is not None) and not ctx.authorize(
                AclOperation.DELETE, ResourceType.TOPIC, info.name if info is not None else name):
            results.append({"name": info.name if info is not None else name, "topic_id": topic_id,
                            "error_code": denied, "error_message": DENIED_MESSAGE})
            continue
        if info is None:
            code = ErrorCode.unknown_topic_or_partition if name is not None else ErrorCode.unknown_topic_id
            # Kafka's controller names an unknown id ("UnknownTopicIdException"), not an unknown name.
            message = None if name is not None else f"Topic id {topic_id} not found."
            results.append({"name": name, "topic_id": topic_id, "error_code": code, "error_message": message})
            continue
        if broker_owned(info.name):
            results.append({"name": info.name, "topic_id": info.topic_id, "error_code": ErrorCode.invalid_topic_exception,
                            "error_message": f"Cannot delete internal topic {info.name}"})
            continue
        if not quota.record(info.num_partitions, ctx.clock.monotonic_ms()):
            results.append({"name": info.name, "topic_id": info.topic_id,
                            "error_code": ErrorCode.throttling_quota_exceeded,
                            "error_message": THROTTLING_QUOTA_EXCEEDED_MESSAGE})
            continue
        try:
            ctx.logs.delete_topic(info.name, ctx.clock.now_ms())
        except OSError as exc:  # nothing was deleted (the renames are undone)
            code, message = error_answer(ctx.storage_errors, exc, f"deleting topic {info.name}")
            results.append({"name": info.name, "topic_id": info.topic_id, "error_code": code,
                            "error_message": message})
            continue
        ctx.producer_states.forget(info.name)
        ctx.groups.forget_topic(info.name, ctx.clock.now_ms())
        for partition in range(info.num_partitions):
            ctx.purgatory.check_and_complete((info.name, partition))
        log.info("deleted topic %s", info.name)
        results.append({"name": info.name, "topic_id": info.topic_id, "error_code": ErrorCode.none, "error_message": None})
    return Reply({"responses": results}, ctx.quotas.mutation_throttle_ms(ctx, quota))
