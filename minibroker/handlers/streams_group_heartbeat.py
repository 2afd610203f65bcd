"""StreamsGroupHeartbeat (key 88), v0: KIP-1071's streams rebalance protocol, the one call a Kafka
Streams member (a stream thread, with group.protocol=streams) makes to join, send its topology, get
its active, standby and warm-up tasks, reconcile them and leave.

Behaviour is the coordinator's (minibroker/groups/streams_manager.py); this is Kafka's KafkaApis
part around it:

* without `streams` in group.coordinator.rebalance.protocols, or with the streams.version feature
  at 0, the answer is UNSUPPORTED_VERSION, as Kafka's;
* a topology naming Kafka's internal topics is STREAMS_INVALID_TOPOLOGY ("Use of Kafka internal
  topics __consumer_offsets in a Kafka Streams topology is prohibited."), one naming an illegal
  topic likewise ("Topic names a,b are not valid topic names.");
* the internal topics the coordinator finds missing (repartition and changelog topics, with the
  partition counts it decided and the configs the topology declares) are created here, as Kafka's
  broker creates them for the group; the heartbeat that found them missing still answers
  MISSING_INTERNAL_TOPICS and the next one finds them. A topic that cannot be created is named in
  that status.

v1 (TopologyDescriptionRequired, with StreamsGroupTopologyDescriptionUpdate) is not served: kio has
no schema for it; Kafka Streams uses v0. Its Kafka 4.4 clients throttle themselves
(AbstractResponse's default: the response has a throttle time).

Authorization (Kafka's handleStreamsGroupHeartbeat, KAFKA-18819 and KAFKA-19412): READ on the group,
else GROUP_AUTHORIZATION_FAILED (30); DESCRIBE on every topic of the topology sent, else
TOPIC_AUTHORIZATION_FAILED (29), no message; an internal topic is created only with CREATE on the
cluster or on the topic, else the status MISSING_INTERNAL_TOPICS says "Unauthorized to CREATE on
topics ..." and the request does not fail.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import logging

from minibroker.groups.api import STREAMS
from minibroker.groups.streams_manager import StreamsGroupHeartbeatRequest, StreamsGroupHeartbeatResult
from minibroker.groups.streams_topics import MISSING_INTERNAL_TOPICS, java_hash_order, required_topics
from minibroker.auth import AclOperation, ResourceType
from minibroker.handlers import Reply, handler
from minibroker.handlers.common import group_coordinator
from minibroker.handlers.join_group import client_host
from minibroker.protocol.entities import to_ms
from minibroker.protocol.errors import ApiError, ErrorCode
from minibroker.storage.config import INTERNAL_TOPICS, validate_topic_name
from minibroker.storage.manager import TopicExistsError
from minibroker.storage.streams_group_records import CopartitionGroup, StoredTopology, Subtopology, TopicInfo

if TYPE_CHECKING:
    from minibroker.context import RequestContext
    from minibroker.groups.streams_manager import StreamsGroupManager

log = logging.getLogger(__name__)


def streams_enabled(ctx: RequestContext) -> bool:
    """Kafka's isStreamsGroupProtocolEnabled: the protocol listed and streams.version >= 1."""
    return ctx.groups.config.streams_protocol_enabled and ctx.features.streams_version >= 1


def streams_manager(ctx: RequestContext) -> StreamsGroupManager:
    return ctx.groups.manager(STREAMS)  # type: ignore[return-value]


def _topic_info(t: Any) -> TopicInfo:
    return TopicInfo(t.name, t.partitions, t.replication_factor, tuple((c.key, c.value) for c in t.topic_configs))


def topology_of(topology: Any) -> StoredTopology | None:
    if topology is None:
        return None
    return StoredTopology(topology.epoch, tuple(
        Subtopology(s.subtopology_id, tuple(s.source_topics), tuple(s.source_topic_regex),
                    tuple(_topic_info(t) for t in s.state_changelog_topics), tuple(s.repartition_sink_topics),
                    tuple(_topic_info(t) for t in s.repartition_source_topics),
                    tuple(CopartitionGroup(tuple(g.source_topics), tuple(g.source_topic_regex),
                                           tuple(g.repartition_source_topics)) for g in s.copartition_groups))
        for s in topology.subtopologies))


def _tasks(tasks: Any) -> dict[str, tuple[int, ...]] | None:
    return None if tasks is None else {t.subtopology_id: tuple(t.partitions) for t in tasks}


def _task_ids(tasks: dict[str, tuple[int, ...]] | None) -> list[dict] | None:
    return None if tasks is None else [{"subtopology_id": s, "partitions": ps} for s, ps in tasks.items()]


def _topology_error(topology: StoredTopology) -> str | None:
    """KafkaApis' checks of the topics a topology names."""
    names: dict[str, None] = {}
    for s in topology.subtopologies:
        for name in (*s.source_topics, *s.repartition_sink_topics, *(t.name for t in s.repartition_source_topics),
                     *(t.name for t in s.state_changelog_topics)):
            names.setdefault(name, None)
    prohibited = [n for n in names if n in INTERNAL_TOPICS]
    if prohibited:
        return f"Use of Kafka internal topics {','.join(prohibited)} in a Kafka Streams topology is prohibited."
    invalid = []
    for name in names:
        try:
            validate_topic_name(name)
        except ApiError:
            invalid.append(name)
    if invalid:
        return f"Topic names {','.join(invalid)} are not valid topic names."
    return None


def _refused(ctx: RequestContext, group_id: str, topology: StoredTopology | None) -> tuple[ErrorCode, str | None] | None:
    """READ on the group, then DESCRIBE on every topic of a topology sent (KAFKA-18819)."""
    if not ctx.authorize(AclOperation.READ, ResourceType.GROUP, group_id):
        return ErrorCode.group_authorization_failed, None
    if topology is not None:
        names = required_topics(topology)
        allowed = set(ctx.filter_authorized(AclOperation.DESCRIBE, ResourceType.TOPIC, names))
        if any(name not in allowed for name in names):
            return ErrorCode.topic_authorization_failed, None  # Kafka names none of them
    return None


def _create_internal_topics(ctx: RequestContext, result: StreamsGroupHeartbeatResult) -> None:
    """Create the topics the coordinator found missing, those the principal may CREATE (on the
    cluster or on the topic); name those that failed or were not allowed in the status (KAFKA-19412)."""
    failed = []
    wanted = list(result.to_create.values())
    if ctx.authorize_cluster(AclOperation.CREATE, log_if_denied=False):
        allowed = {topic.name for topic in wanted}
    else:
        allowed = set(ctx.filter_authorized(AclOperation.CREATE, ResourceType.TOPIC, [t.name for t in wanted]))
    unauthorized = [topic.name for topic in wanted if topic.name not in allowed]
    for topic in wanted:
        if topic.name not in allowed:
            continue
        try:
            info = ctx.logs.create_topic(topic.name, topic.partitions, dict(topic.configs), ctx.clock.now_ms())
        except TopicExistsError:
            continue
        except (ApiError, OSError, ValueError) as exc:
            failed.append(f"{topic.name}: {exc}")
            continue
        log.info("created internal topic %s (%d partitions) for streams group", info.name, info.num_partitions)
    if failed and result.status is not None:
        for i, (code, detail) in enumerate(result.status):
            if code == MISSING_INTERNAL_TOPICS:
                result.status[i] = (code, f"{detail}; Creating the topics failed: {', '.join(failed)}")
    if unauthorized and result.status is not None:
        refusal = f"Unauthorized to CREATE on topics {', '.join(java_hash_order(unauthorized))}."
        for i, (code, detail) in enumerate(result.status):
            if code == MISSING_INTERNAL_TOPICS:
                result.status[i] = (code, f"{detail}; {refusal}")
                break
        else:
            result.status.append((MISSING_INTERNAL_TOPICS, refusal))


@handler(88, 0, 0)
@group_coordinator
async def streams_group_heartbeat(ctx: RequestContext, request: Any) -> Reply:
    if not streams_enabled(ctx):
        return Reply({"error_code": ErrorCode.unsupported_version, "member_id": "", "member_epoch": 0,
                      "heartbeat_interval": 0, "acceptable_recovery_lag": 0, "task_offset_interval": 0,
                      "endpoint_information_epoch": 0, "status": [], "active_tasks": None, "standby_tasks": None,
                      "warmup_tasks": None, "partitions_by_user_endpoint": None})
    topology = topology_of(request.topology)
    refused = _refused(ctx, request.group_id, topology)
    if refused is not None:
        return Reply({"error_code": refused[0], "error_message": refused[1], "member_id": "", "member_epoch": 0,
                      "heartbeat_interval": 0, "acceptable_recovery_lag": 0, "task_offset_interval": 0,
                      "endpoint_information_epoch": 0, "status": [], "active_tasks": None, "standby_tasks": None,
                      "warmup_tasks": None, "partitions_by_user_endpoint": None})
    problem = _topology_error(topology) if topology is not None else None
    if problem is not None:
        result = StreamsGroupHeartbeatResult(ErrorCode.streams_invalid_topology, problem)
    else:
        endpoint = request.user_endpoint
        req = StreamsGroupHeartbeatRequest(
            group_id=request.group_id, member_id=request.member_id, member_epoch=request.member_epoch,
            endpoint_information_epoch=request.endpoint_information_epoch,
            client_id=ctx.client_id or "", client_host=client_host(ctx),
            instance_id=request.instance_id, rack_id=request.rack_id,
            rebalance_timeout_ms=to_ms(request.rebalance_timeout), topology=topology,
            active=_tasks(request.active_tasks), standby=_tasks(request.standby_tasks),
            warmup=_tasks(request.warmup_tasks), process_id=request.process_id,
            user_endpoint=None if endpoint is None else (endpoint.host, endpoint.port),
            client_tags=None if request.client_tags is None else tuple((t.key, t.value) for t in request.client_tags),
            task_offsets=None if request.task_offsets is None else tuple(
                (t.subtopology_id, t.partition, t.offset) for t in request.task_offsets),
            task_end_offsets=None if request.task_end_offsets is None else tuple(
                (t.subtopology_id, t.partition, t.offset) for t in request.task_end_offsets),
            shutdown_application=request.shutdown_application)
        manager = streams_manager(ctx)
        result = ctx.groups.apply(lambda now, now_ms: manager.heartbeat(now, now_ms, req))
        if result.to_create:
            _create_internal_topics(ctx, result)
    endpoints = None
    if result.partitions_by_endpoint is not None:
        endpoints = [{"user_endpoint": {"host": host, "port": port},
                      "active_partitions": [{"topic": t, "partitions": ps} for t, ps in active.items()],
                      "standby_partitions": [{"topic": t, "partitions": ps} for t, ps in standby.items()]}
                     for host, port, active, standby in result.partitions_by_endpoint]
    return Reply({
        "error_code": result.error,
        "error_message": result.message,
        "member_id": result.member_id,
        "member_epoch": result.member_epoch,
        "heartbeat_interval": result.heartbeat_interval_ms,
        # v0's AcceptableRecoveryLagLegacy: Kafka 4.4 sets only v1's AcceptableRecoveryLag, so v0 says 0.
        "acceptable_recovery_lag": 0,
        "task_offset_interval": result.task_offset_interval_ms,
        # Not nullable in Kafka's answers: an error carries an empty list.
        "status": [{"status_code": c, "status_detail": d} for c, d in result.status or ()],
        "active_tasks": _task_ids(result.active),
        "standby_tasks": _task_ids(result.standby),
        "warmup_tasks": _task_ids(result.warmup),
        "endpoint_information_epoch": result.endpoint_information_epoch,
        "partitions_by_user_endpoint": endpoints,
    })
