"""DescribeShareGroupOffsets (key 90), v0-v1: each share partition's start offset (and from v1 its
lag) for a share group (Java's Admin.listShareGroupOffsets, kafka-share-groups --describe).

Per group, as Kafka 4.4: UNSUPPORTED_VERSION with share.version below 1, GROUP_AUTHORIZATION_FAILED
without DESCRIBE on the group. Topics null: every share partition the group has state for; an empty
list: nothing. A named topic the principal may not DESCRIBE is TOPIC_AUTHORIZATION_FAILED; an
unknown topic, or a partition without state, has start offset -1 (no error, as Kafka answers). The
lag (Kafka's computeShareGroupLagAndBuildResponse) is the log end offset less the start offset less
the records at or after it whose delivery is complete; -1 while the start offset is not known.
An unknown group has no topics.
On a cluster only the group coordinator answers (NOT_COORDINATOR elsewhere; handlers/common.py).
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from minibroker.auth import AclOperation, ResourceType
from minibroker.handlers import Reply, handler
from minibroker.handlers.common import group_coordinator
from minibroker.handlers.share_group_heartbeat import share_groups_enabled, share_manager
from minibroker.protocol.errors import ErrorCode
from minibroker.share.coordinator import ShareStateError
from minibroker.storage.share_state import ShareStateKey

if TYPE_CHECKING:
    from minibroker.context import RequestContext

ZERO_UUID = uuid.UUID(int=0)


def _partition(ctx: RequestContext, group_id: str, topic_id: uuid.UUID, topic: str, index: int) -> dict[str, Any]:
    try:
        summary = ctx.shares.coordinator.read_summary(ShareStateKey(group_id, topic_id, index))
    except ShareStateError as exc:  # the share coordinator is moving (a partition's error, as Kafka's)
        return {"partition_index": index, "start_offset": -1, "leader_epoch": -1, "lag": -1,
                "error_code": exc.error_code, "error_message": exc.message}
    lag = -1
    plog = ctx.logs.log(topic, index)
    if summary.start_offset != -1 and summary.delivery_complete_count != -1 and plog is not None:
        lag = plog.log_end_offset - summary.start_offset - summary.delivery_complete_count
    return {"partition_index": index, "start_offset": summary.start_offset, "leader_epoch": summary.leader_epoch,
            "lag": lag, "error_code": ErrorCode.none, "error_message": None}


def _describe(ctx: RequestContext, group: Any) -> dict[str, Any]:
    group_id = group.group_id
    if not share_groups_enabled(ctx):
        return {"group_id": group_id, "topics": [], "error_code": ErrorCode.unsupported_version, "error_message": None}
    if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
        return {"group_id": group_id, "topics": [], "error_code": ErrorCode.group_authorization_failed,
                "error_message": None}
    topics = []
    if group.topics is None:
        manager = share_manager(ctx)
        try:
            initialized = manager.initialized_partitions(group_id)
        except Exception:  # noqa: BLE001 - no such share group: nothing initialized (Kafka's empty map)
            initialized = {}
        for topic_id, (_, partitions) in sorted(initialized.items(), key=lambda item: item[1][0]):
            info = ctx.logs.topic_by_id(topic_id)
            if info is None or not ctx.authorize(AclOperation.DESCRIBE, ResourceType.TOPIC, info.name):
                continue
            topics.append({"topic_name": info.name, "topic_id": topic_id,
                           "partitions": [_partition(ctx, group_id, topic_id, info.name, p) for p in sorted(partitions)]})
    else:
        for requested in group.topics:
            name = requested.topic_name
            if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.TOPIC, name):
                topics.append({"topic_name": name, "topic_id": ZERO_UUID, "partitions": [
                    {"partition_index": p, "start_offset": -1, "leader_epoch": 0, "lag": -1,
                     "error_code": ErrorCode.topic_authorization_failed, "error_message": None}
                    for p in requested.partitions]})
                continue
            info = ctx.logs.topic(name)
            if info is None:
                topics.append({"topic_name": name, "topic_id": ZERO_UUID, "partitions": [
                    {"partition_index": p, "start_offset": -1, "leader_epoch": 0, "lag": -1,
                     "error_code": ErrorCode.none, "error_message": None} for p in requested.partitions]})
                continue
            topics.append({"topic_name": name, "topic_id": info.topic_id,
                           "partitions": [_partition(ctx, group_id, info.topic_id, name, p) for p in requested.partitions]})
    return {"group_id": group_id, "topics": topics, "error_code": ErrorCode.none, "error_message": None}


# KIP-219: Kafka 4.4 clients wait out the throttle time of every response that carries one (KAFKA-20828).
@handler(90, 0, 1, client_throttles_from=0)
@group_coordinator
async def describe_share_group_offsets(ctx: RequestContext, request: Any) -> Reply:
    return Reply({"groups": [_describe(ctx, group) for group in request.groups]})
