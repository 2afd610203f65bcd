"""OffsetCommit (key 8), v2-v10: store a group's consumed positions in `__consumer_offsets`.

Accepted from a member of the group's current generation, or with generation -1 and no member id
while the group has no members (assign() consumers and admin tools; this creates a "simple" group).
A stale generation gets ILLEGAL_GENERATION (GROUP_ID_NOT_FOUND from v9 when the group does not
exist), an unknown member UNKNOWN_MEMBER_ID, a commit while the group awaits its assignment
REBALANCE_IN_PROGRESS; a KIP-848 consumer group checks the member epoch instead (STALE_MEMBER_EPOCH,
and UNSUPPORTED_VERSION below v9, as Kafka). Partitions of unknown topics get
UNKNOWN_TOPIC_OR_PARTITION (v10 names topics by id: UNKNOWN_TOPIC_ID). v2-v4 retention_time sets
the offsets' own expiry; v6+ carries the leader epoch; v7+ group.instance.id. Errors are per
partition, as in Kafka.

Authorization (Kafka's handleOffsetCommitRequest): READ on the group, else every partition is
answered GROUP_AUTHORIZATION_FAILED (30); READ on each topic, else its partitions are answered
TOPIC_AUTHORIZATION_FAILED (29).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from minibroker.auth import AclOperation, ResourceType
from minibroker.handlers import Reply, handler
from minibroker.handlers.common import group_coordinator
from minibroker.protocol.entities import to_ms
from minibroker.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from minibroker.context import RequestContext


@handler(8, 2, 10, client_throttles_from=4)
@group_coordinator
async def offset_commit(ctx: RequestContext, request: Any) -> Reply:
    logs = ctx.logs
    if not ctx.authorize(AclOperation.READ, ResourceType.GROUP, request.group_id):
        code = ErrorCode.group_authorization_failed
        return Reply({"topics": [
            {"name": getattr(t, "name", None), "topic_id": getattr(t, "topic_id", None),
             "partitions": [{"partition_index": p.partition_index, "error_code": code} for p in t.partitions]}
            for t in request.topics]})
    offsets: dict[tuple[str, int], tuple[int, int, str | None]] = {}
    answers = []  # (topic entry, [(partition, name or None, error or None)])
    for topic in request.topics:
        name = getattr(topic, "name", None)
        topic_id = getattr(topic, "topic_id", None)
        info = logs.resolve(name, topic_id)
        missing = ErrorCode.unknown_topic_id if name is None else ErrorCode.unknown_topic_or_partition
        topic_name = info.name if info is not None else name
        if topic_name is not None and not ctx.authorize(AclOperation.READ, ResourceType.TOPIC, topic_name):
            missing, info = ErrorCode.topic_authorization_failed, None
        rows: list[tuple[int, ErrorCode | tuple[str, int]]] = []  # an error, or the offset's key
        for p in topic.partitions:
            if info is None or not 0 <= p.partition_index < info.num_partitions:
                rows.append((p.partition_index, missing))
                continue
            offsets[(info.name, p.partition_index)] = (
                p.committed_offset,
                getattr(p, "committed_leader_epoch", -1),
                p.committed_metadata,
            )
            rows.append((p.partition_index, (info.name, p.partition_index)))
        answers.append((name, topic_id, rows))
    retention = getattr(request, "retention_time", None)
    errors = ctx.groups.commit_offsets(
        ctx.clock.monotonic(),
        group_id=request.group_id,
        generation_id=request.generation_id_or_member_epoch,
        member_id=request.member_id,
        group_instance_id=getattr(request, "group_instance_id", None),
        offsets=offsets,
        retention_ms=-1 if retention is None else to_ms(retention),
        version=ctx.version,
    )
    return Reply({
        "topics": [
            {
                "name": name,
                "topic_id": topic_id,
                "partitions": [
                    {"partition_index": index, "error_code": errors[row] if isinstance(row, tuple) else row}
                    for index, row in rows
                ],
            }
            for name, topic_id, rows in answers
        ],
    })
