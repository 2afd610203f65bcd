"""OffsetFetch (key 9), v1-v10: a group's committed offsets.

Partitions without a committed offset (unknown group, topic or partition) answer offset -1 with no
error, as Kafka does. v2+ asks for every partition the group has offsets for with a null topic list
and has a top-level error code; v5+ returns the committed leader epoch; v8+ batches groups; v10 names
topics by id (offsets of a deleted topic are left out of an all-topics answer). require_stable (v7+, a
read_committed consumer) answers UNSTABLE_OFFSET_COMMIT for the partitions an open transaction has
offsets pending for (KIP-447; the client retries), the committed offsets elsewhere. v9+ names the
fetching member of a KIP-848 consumer group, whose epoch must be current (STALE_MEMBER_EPOCH,
UNKNOWN_MEMBER_ID, for the group).

Authorization (Kafka's handleOffsetFetchRequest): DESCRIBE on the group, else the group is answered
GROUP_AUTHORIZATION_FAILED (30) with no topics; DESCRIBE on each topic asked for, else its
partitions are answered TOPIC_AUTHORIZATION_FAILED (29); asked for all of a group's offsets, the
topics it may not describe are left out.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from minibroker.auth import AclOperation, ResourceType
from minibroker.handlers import Reply, handler
from minibroker.handlers.common import group_coordinator
from minibroker.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from minibroker.context import RequestContext

NO_OFFSET = -1


def _partition(index: int, om, error: ErrorCode = ErrorCode.none) -> dict:
    return {
        "partition_index": index,
        "committed_offset": om.offset if om is not None else NO_OFFSET,
        "committed_leader_epoch": om.leader_epoch if om is not None else -1,
        "metadata": om.metadata if om is not None else "",
        "error_code": error,
    }


def fetch_group(ctx: RequestContext, group_id: str, topics, by_id: bool, member_id: str | None = None,
                member_epoch: int = -1, require_stable: bool = False) -> tuple[ErrorCode, list[dict]]:
    """(group error, topic entries) for one group; `topics` None means all."""
    groups, logs = ctx.groups, ctx.logs
    if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
        return ErrorCode.group_authorization_failed, []
    error = ErrorCode.invalid_group_id if not group_id else ErrorCode.none
    if not error and (member_error := groups.validate_offset_fetch(group_id, member_id, member_epoch)):
        return member_error, []
    # require_stable for all of a group's offsets: Kafka 4's group coordinator answers the committed
    # ones (pending transactional offsets are not among them), with no error.
    if topics is None:
        by_topic: dict[str, list] = {}
        for (topic, partition), om in groups.fetch_offsets(group_id, None):
            by_topic.setdefault(topic, []).append(_partition(partition, om))
        entries = []
        visible = set(ctx.filter_authorized(AclOperation.DESCRIBE, ResourceType.TOPIC, by_topic, log_if_denied=False))
        for topic, partitions in by_topic.items():
            info = logs.topic(topic)
            if by_id and info is None or topic not in visible:
                continue
            entries.append({"name": topic, "topic_id": info.topic_id if info else None,
                            "partitions": partitions})
        return error, entries
    entries = []
    for topic in topics:
        name: Any = getattr(topic, "name", None)
        topic_id = getattr(topic, "topic_id", None)
        if name is None:
            info = logs.resolve(None, topic_id)
            name = info.name if info is not None else None
        if name is not None and not ctx.authorize(AclOperation.DESCRIBE, ResourceType.TOPIC, name):
            entries.append({"name": name, "topic_id": topic_id, "partitions": [
                _partition(p, None, ErrorCode.topic_authorization_failed) for p in topic.partition_indexes]})
            continue
        wanted = [(name, p) for p in topic.partition_indexes]
        found = groups.fetch_offsets(group_id, wanted) if name is not None and not error else [
            ((name, p), None) for p in topic.partition_indexes]
        entries.append({
            "name": name or "",
            "topic_id": topic_id,
            "partitions": [
                _partition(p, None, ErrorCode.unstable_offset_commit)
                if require_stable and not error and groups.has_pending_offsets(group_id, [(name, p)])
                else _partition(p, om, error)
                for (_, p), om in found
            ],
        })
    return error, entries


@handler(9, 1, 10, client_throttles_from=4)
@group_coordinator
async def offset_fetch(ctx: RequestContext, request: Any) -> Reply:
    batched = getattr(request, "groups", None)
    if batched is None:
        error, topics = fetch_group(ctx, request.group_id, request.topics, by_id=False,
                                    require_stable=getattr(request, "require_stable", False))
        return Reply({"error_code": error, "topics": topics})
    by_id = ctx.version >= 10
    answer = []
    for group in batched:
        error, topics = fetch_group(ctx, group.group_id, group.topics, by_id,
                                    getattr(group, "member_id", None), getattr(group, "member_epoch", -1),
                                    require_stable=request.require_stable)
        answer.append({"group_id": group.group_id, "error_code": error, "topics": topics})
    return Reply({"groups": answer})
