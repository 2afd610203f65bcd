"""DescribeTopicPartitions (key 75), v0 (KIP-966): topics and their partitions a page at a time, which
Java 4's Admin.describeTopics uses instead of Metadata. As Kafka's
DescribeTopicPartitionsRequestHandler and KRaftMetadataCache.getTopicMetadataForDescribeTopicResponse:

- an empty topic list means every topic; topics are answered in name order, each name once; with a
  cursor, only topics from the cursor's on, the cursor's topic from its partition on;
- at most response_partition_limit partitions per response, capped at `max.request.partition.size.limit`
  (2000) and at least 1. A topic cut short by the limit is answered with the partitions that fit and
  next_cursor names it and its first partition left out; when the limit is used up exactly, the
  cursor names the next topic at partition 0; a complete answer has a null cursor;
- a named topic that does not exist answers UNKNOWN_TOPIC_OR_PARTITION (INVALID_TOPIC_EXCEPTION for
  an illegal name) with no partitions, in its place in the order; with the whole list, none can;
- a cursor whose topic is not in the request's list, or with a negative partition, fails the request:
  INVALID_REQUEST on every requested topic, as Kafka's getErrorResponse.

Topics and partitions are described as Metadata describes them (leader, epoch, replicas and ISR
from the cluster view); the eligible-leader-replica lists (KIP-966) are empty, never null: Kafka
sends empty ones, and Java's Admin fails on a null one.

Authorization (Kafka's DescribeTopicPartitionsRequestHandler): DESCRIBE on each topic; asked for
every topic, the ones the principal may not describe are left out; named, they are answered
TOPIC_AUTHORIZATION_FAILED (29) with a zero topic id, after the page.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from minibroker.handlers import Reply, handler
from minibroker.handlers.metadata import topic_metadata
from minibroker.auth import AclOperation, ResourceType
from minibroker.protocol.errors import ErrorCode
from minibroker.storage.config import InvalidTopicError, is_internal, validate_topic_name

if TYPE_CHECKING:
    from minibroker.context import RequestContext

ZERO_UUID = None  # kio encodes None as the all-zero uuid


def _error_response(request: Any, code: ErrorCode) -> Reply:
    return Reply({
        "topics": [{"error_code": code, "name": t.name, "topic_id": ZERO_UUID, "is_internal": False,
                    "partitions": ()} for t in request.topics],
        "next_cursor": None,
    })


def _missing(ctx: RequestContext, name: str) -> dict[str, Any]:
    try:
        validate_topic_name(name)
        code = ErrorCode.unknown_topic_or_partition
    except InvalidTopicError:
        code = ErrorCode.invalid_topic_exception
    return {"error_code": code, "name": name, "topic_id": ZERO_UUID, "is_internal": is_internal(name),
            "partitions": (), "topic_authorized_operations": ctx.authorized_operations(ResourceType.TOPIC, name)}


@handler(75, 0, 0, client_throttles_from=0)
async def describe_topic_partitions(ctx: RequestContext, request: Any) -> Reply:
    cursor = request.cursor
    cursor_topic = cursor.topic_name if cursor is not None else ""
    fetch_all = not request.topics
    unauthorized: list[dict[str, Any]] = []
    if fetch_all:
        names = {info.name for info in ctx.logs.topics() if info.name >= cursor_topic}
    else:
        names = {t.name for t in request.topics if t.name >= cursor_topic}
        if cursor is not None and cursor.topic_name not in names:
            return _error_response(request, ErrorCode.invalid_request)
    allowed = set(ctx.filter_authorized(AclOperation.DESCRIBE, ResourceType.TOPIC, sorted(names)))
    if not fetch_all:
        unauthorized = [{"error_code": ErrorCode.topic_authorization_failed, "name": name, "topic_id": ZERO_UUID,
                         "is_internal": False, "partitions": ()} for name in sorted(names - allowed)]
    names &= allowed
    if cursor is not None and cursor.partition_index < 0:
        return _error_response(request, ErrorCode.invalid_request)
    remaining = max(min(ctx.config["max.request.partition.size.limit"], request.response_partition_limit), 1)
    topics = []
    next_cursor = None
    for name in sorted(names):
        if remaining == 0:
            # The limit is used up exactly: the next page starts at this topic.
            next_cursor = {"topic_name": name, "partition_index": 0}
            break
        info = ctx.logs.topic(name)
        if info is None:
            if not fetch_all:
                topics.append(_missing(ctx, name))
            continue
        start = cursor.partition_index if cursor is not None and name == cursor_topic else 0
        upper = min(info.num_partitions, start + remaining)
        topic = topic_metadata(ctx, info, include_ops=True)  # as Metadata describes it
        # No eligible leader replicas: empty lists, as Kafka sends them (Java's Admin fails on null).
        topic["partitions"] = [{**p, "eligible_leader_replicas": (), "last_known_elr": ()}
                               for p in topic["partitions"][start:upper]]
        topics.append(topic)
        if upper < info.num_partitions:
            next_cursor = {"topic_name": name, "partition_index": upper}
            break
        remaining -= max(upper - start, 0)
    return Reply({"topics": topics + unauthorized, "next_cursor": next_cursor})
