"""StreamsGroupDescribe (key 89), v0: KIP-1071 streams groups with their state, epochs, topology
(as configured against the topics once it is ready: the partition counts decided for the internal
topics; as the members sent it before) and members, each member's current and target tasks, process,
endpoint, client tags and reported task offsets (what Java's Admin.describeStreamsGroups and
kafka-streams-groups.sh --describe ask).

Errors per group, with Kafka's messages: GROUP_ID_NOT_FOUND for an unknown group ("Streams group g
not found.") or one of another type ("Group g is not a streams group."). With the streams protocol
off (group.coordinator.rebalance.protocols, streams.version) every group is UNSUPPORTED_VERSION. The
authorized operations (KIP-430) are those minibroker.auth allows. Its Kafka 4.4 clients throttle
themselves (AbstractResponse's default: the response has a throttle time).

Authorization (Kafka's handleStreamsGroupDescribe, KAFKA-18819): DESCRIBE on each group, else
GROUP_AUTHORIZATION_FAILED (30); a group whose topology names a topic the principal may not describe
is answered TOPIC_AUTHORIZATION_FAILED (29) with Kafka's message, its members not shown.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from minibroker.auth import NO_AUTHORIZED_OPERATIONS, AclOperation, ResourceType
from minibroker.handlers import Reply, handler
from minibroker.handlers.common import group_coordinator
from minibroker.groups.streams_topics import required_topics
from minibroker.handlers.streams_group_heartbeat import streams_enabled, streams_manager
from minibroker.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from minibroker.context import RequestContext
    from minibroker.groups.streams_group import StreamsGroup


def _task_ids(tasks) -> list[dict]:
    return [{"subtopology_id": s, "partitions": sorted(ps)} for s, ps in sorted(tasks.items())]


def _offsets(table: dict[str, dict[int, int]]) -> list[dict]:
    return [{"subtopology_id": s, "partition": p, "offset": o}
            for s in sorted(table) for p, o in sorted(table[s].items())]


def _topic_info(name: str, partitions: int, replication: int, configs) -> dict:
    return {"name": name, "partitions": partitions, "replication_factor": max(replication, 0),
            "topic_configs": [{"key": k, "value": v} for k, v in configs]}


def _topology(group: StreamsGroup) -> dict | None:
    configured = group.configured
    if configured is not None and configured.ready and configured.subtopologies is not None:
        return {"epoch": configured.topology_epoch, "subtopologies": [
            {"subtopology_id": sid, "source_topics": sorted(c.source_topics),
             "repartition_sink_topics": sorted(c.repartition_sink_topics),
             "state_changelog_topics": [_topic_info(t.name, t.partitions, t.replication_factor, t.configs)
                                        for t in sorted(c.state_changelog_topics.values(), key=lambda t: t.name)],
             "repartition_source_topics": [_topic_info(t.name, t.partitions, t.replication_factor, t.configs)
                                           for t in sorted(c.repartition_source_topics.values(), key=lambda t: t.name)]}
            for sid, c in sorted(configured.subtopologies.items())]}
    if group.topology is None:
        return None
    return {"epoch": group.topology.epoch, "subtopologies": [
        {"subtopology_id": s.subtopology_id, "source_topics": sorted(s.source_topics),
         "repartition_sink_topics": sorted(s.repartition_sink_topics),
         "state_changelog_topics": [_topic_info(t.name, t.partitions, t.replication_factor, t.configs)
                                    for t in sorted(s.state_changelog_topics, key=lambda t: t.name)],
         "repartition_source_topics": [_topic_info(t.name, t.partitions, t.replication_factor, t.configs)
                                       for t in sorted(s.repartition_source_topics, key=lambda t: t.name)]}
        for s in sorted(group.topology.subtopologies, key=lambda s: s.subtopology_id)]}


TOPICS_REFUSED = "The described group uses topics that the client is not authorized to describe."


def _refused(group_id: str, code: ErrorCode, message: str | None = None) -> dict:
    return {"error_code": code, "error_message": message, "group_id": group_id, "group_state": "", "group_epoch": 0,
            "assignment_epoch": 0, "members": [], "authorized_operations": NO_AUTHORIZED_OPERATIONS}


@handler(89, 0, 0)
@group_coordinator
async def streams_group_describe(ctx: RequestContext, request: Any) -> Reply:
    if not streams_enabled(ctx):
        return Reply({"groups": [
            {"error_code": ErrorCode.unsupported_version, "group_id": g, "group_state": "", "group_epoch": 0,
             "assignment_epoch": 0, "members": []} for g in request.group_ids]})
    described: list[dict] = []
    allowed = ctx.filter_authorized(AclOperation.DESCRIBE, ResourceType.GROUP, request.group_ids)
    for group_id in request.group_ids:
        if group_id not in allowed:
            described.append(_refused(group_id, ErrorCode.group_authorization_failed))
    for d in streams_manager(ctx).describe(allowed):
        group = d.group
        if group is not None and group.topology is not None:
            names = required_topics(group.topology)
            if len(ctx.filter_authorized(AclOperation.DESCRIBE, ResourceType.TOPIC, names)) < len(names):
                described.append(_refused(group.group_id, ErrorCode.topic_authorization_failed, TOPICS_REFUSED))
                continue
        if group is None:
            described.append({"error_code": d.error, "error_message": d.message, "group_id": d.group_id,
                              "group_state": "", "group_epoch": 0, "assignment_epoch": 0, "members": [],
                              "authorized_operations": NO_AUTHORIZED_OPERATIONS})
            continue
        members = []
        for m in d.members:
            member = m.member
            members.append({
                "member_id": member.member_id, "member_epoch": member.member_epoch,
                "instance_id": member.instance_id, "rack_id": member.rack_id, "client_id": member.client_id,
                "client_host": member.client_host, "topology_epoch": member.topology_epoch,
                "process_id": member.process_id,
                "user_endpoint": None if member.user_endpoint is None else {
                    "host": member.user_endpoint[0], "port": member.user_endpoint[1]},
                "client_tags": [{"key": k, "value": v} for k, v in member.client_tags],
                "task_offsets": _offsets(m.task_offsets), "task_end_offsets": _offsets(m.task_end_offsets),
                "assignment": {"active_tasks": _task_ids(member.assigned.active),
                               "standby_tasks": _task_ids(member.assigned.standby),
                               "warmup_tasks": _task_ids(member.assigned.warmup)},
                "target_assignment": {"active_tasks": _task_ids(m.target.active),
                                      "standby_tasks": _task_ids(m.target.standby),
                                      "warmup_tasks": _task_ids(m.target.warmup)},
                "is_classic": False,
            })
        described.append({
            "error_code": ErrorCode.none, "error_message": None, "group_id": group.group_id,
            "group_state": group.state_name, "group_epoch": group.group_epoch,
            "assignment_epoch": group.assignment_epoch, "topology": _topology(group), "members": members,
            "authorized_operations": ctx.authorized_operations(ResourceType.GROUP, group.group_id)
            if request.include_authorized_operations else NO_AUTHORIZED_OPERATIONS,
        })
    return Reply({"groups": described})
