"""What the group coordinator's callers see: its configuration, its answers, and `Group`, the
interface every group type implements for the type-agnostic parts (the registry, ListGroups,
DeleteGroups, committed offsets).

Kafka's counterpart of `Group` is `org.apache.kafka.coordinator.group.Group`, implemented by
`ClassicGroup` and `ConsumerGroup` (and share groups since 4.0): the offsets manager and the shard
ask a group to validate a commit, say whether it subscribes to a topic, and when its offsets may
expire, without knowing its type. Two types are built in: classic groups (classic_group.py, run by
classic_manager.py) and KIP-848 consumer groups (consumer_group.py, run by consumer_manager.py);
others plug in through the registry (types.py). A group id is one type at a time.

Pure: no trio, no clock.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Protocol

from minibroker.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from minibroker.config import BrokerConfig
    from minibroker.storage.offsets_store import OffsetAndMetadata

CLASSIC = "classic"  # ListGroups v5 group types
CONSUMER = "consumer"
STREAMS = "streams"  # KIP-1071 streams groups (groups/streams_manager.py)
CONSUMER_PROTOCOL_TYPE = "consumer"  # the Java consumer's (and every client's) protocol type
NEW_MEMBER_JOIN_TIMEOUT_MS = 300_000  # Kafka's classicGroupNewMemberJoinTimeoutMs
OFFSET_METADATA_MAX_BYTES = 4096  # Kafka's offset.metadata.max.bytes default


@dataclass(frozen=True)
class GroupConfig:
    initial_rebalance_delay_ms: int = 0
    min_session_timeout_ms: int = 1000
    max_session_timeout_ms: int = 1_800_000
    offsets_retention_ms: int = 10080 * 60_000
    offsets_retention_check_interval_ms: int = 600_000
    new_member_join_timeout_ms: int = NEW_MEMBER_JOIN_TIMEOUT_MS
    offset_metadata_max_bytes: int = OFFSET_METADATA_MAX_BYTES
    # KIP-848 consumer groups (group.consumer.*), and which group protocols are served.
    rebalance_protocols: tuple[str, ...] = (CLASSIC, CONSUMER, STREAMS)
    consumer_session_timeout_ms: int = 10_000
    consumer_heartbeat_interval_ms: int = 1000
    consumer_max_size: int = 2**31 - 1
    consumer_assignors: tuple[str, ...] = ("uniform", "range")  # the first is the default
    # KIP-1071 streams groups (group.streams.*).
    streams_session_timeout_ms: int = 10_000
    streams_heartbeat_interval_ms: int = 1000
    streams_max_size: int = 2**31 - 1
    streams_num_standby_replicas: int = 0
    streams_initial_rebalance_delay_ms: int = 0
    streams_assignment_interval_ms: int = 0
    streams_task_offset_interval_ms: int = 60_000
    streams_acceptable_recovery_lag: int = 10_000

    @classmethod
    def from_broker(cls, config: BrokerConfig) -> GroupConfig:
        return cls(
            initial_rebalance_delay_ms=config["group.initial.rebalance.delay.ms"],
            min_session_timeout_ms=config["group.min.session.timeout.ms"],
            max_session_timeout_ms=config["group.max.session.timeout.ms"],
            offsets_retention_ms=config["offsets.retention.minutes"] * 60_000,
            offsets_retention_check_interval_ms=config["offsets.retention.check.interval.ms"],
            rebalance_protocols=config["group.coordinator.rebalance.protocols"],
            consumer_session_timeout_ms=config["group.consumer.session.timeout.ms"],
            consumer_heartbeat_interval_ms=config["group.consumer.heartbeat.interval.ms"],
            consumer_max_size=config["group.consumer.max.size"],
            consumer_assignors=config["group.consumer.assignors"],
            streams_session_timeout_ms=config["group.streams.session.timeout.ms"],
            streams_heartbeat_interval_ms=config["group.streams.heartbeat.interval.ms"],
            streams_max_size=config["group.streams.max.size"],
            streams_num_standby_replicas=config["group.streams.num.standby.replicas"],
            streams_initial_rebalance_delay_ms=config["group.streams.initial.rebalance.delay.ms"],
            streams_assignment_interval_ms=config["group.streams.assignment.interval.ms"],
            streams_task_offset_interval_ms=config["group.streams.task.offset.interval.ms"],
            streams_acceptable_recovery_lag=config["group.streams.acceptable.recovery.lag"],
        )

    @property
    def consumer_protocol_enabled(self) -> bool:
        return CONSUMER in self.rebalance_protocols

    @property
    def streams_protocol_enabled(self) -> bool:
        return STREAMS in self.rebalance_protocols


class TopicInfo(Protocol):
    """What a consumer group reads of a topic (storage's TopicInfo is one; read-only, as it is frozen)."""

    @property
    def name(self) -> str: ...

    @property
    def topic_id(self) -> uuid.UUID: ...

    @property
    def num_partitions(self) -> int: ...


class TopicsImage(Protocol):
    """The topics a consumer group's subscriptions resolve against (Kafka's metadata image); the
    broker's LogManager is one."""

    def topic(self, name: str) -> TopicInfo | None: ...

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicInfo | None: ...

    def topics(self) -> Iterable[TopicInfo]: ...


class NoTopics:
    """A TopicsImage without topics (a coordinator built without the broker's logs)."""

    def topic(self, name: str) -> None:
        return None

    def topic_by_id(self, topic_id: uuid.UUID) -> None:
        return None

    def topics(self) -> list:
        return []


# --- requests ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class JoinGroupRequest:
    """A JoinGroup, as the classic protocol sees it whatever the request's version."""

    group_id: str
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]  # (name, metadata), in the member's order of preference
    require_known_member_id: bool  # v4+: KIP-394's MEMBER_ID_REQUIRED round trip
    supports_skip_assignment: bool = False  # v9+
    reason: str | None = None


@dataclass(frozen=True)
class ConsumerGroupHeartbeatRequest:
    """A ConsumerGroupHeartbeat (KIP-848) as the coordinator sees it. None in a field means the
    member did not send it (unchanged since its last heartbeat), as on the wire."""

    group_id: str
    member_id: str
    member_epoch: int
    client_id: str = ""
    client_host: str = ""
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: tuple[str, ...] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    owned: Mapping[uuid.UUID, tuple[int, ...]] | None = None  # the TopicPartitions it owns
    api_version: int = 1


# --- answers -------------------------------------------------------------------------------------


@dataclass
class ConsumerGroupHeartbeatResult:
    error: ErrorCode
    message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    assignment: Mapping[uuid.UUID, tuple[int, ...]] | None = None  # None: not sent this time


@dataclass
class JoinResult:
    error: ErrorCode
    member_id: str = ""
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    members: list[tuple[str, str | None, bytes]] = field(default_factory=list)
    skip_assignment: bool = False


@dataclass
class SyncResult:
    error: ErrorCode
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


class Pending:
    """A response that a later event (another member's request, a timer) will produce."""

    __slots__ = ("result",)

    def __init__(self, result: Any = None) -> None:
        self.result = result

    @property
    def done(self) -> bool:
        return self.result is not None


@dataclass(frozen=True)
class GroupOverview:
    group_id: str
    protocol_type: str
    state: str
    group_type: str = CLASSIC


@dataclass(frozen=True)
class MemberDescription:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass(frozen=True)
class ConsumerMemberDescription:
    member_id: str
    instance_id: str | None
    rack_id: str | None
    member_epoch: int
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str | None
    assignment: Mapping[uuid.UUID, tuple[int, ...]]
    target_assignment: Mapping[uuid.UUID, tuple[int, ...]]


@dataclass(frozen=True)
class ConsumerGroupDescription:
    """ConsumerGroupDescribe's view of one group, or its error (GROUP_ID_NOT_FOUND ...)."""

    group_id: str
    error: ErrorCode = ErrorCode.none
    message: str | None = None
    state: str = ""
    group_epoch: int = 0
    assignment_epoch: int = 0
    assignor: str = ""
    members: tuple[ConsumerMemberDescription, ...] = ()


@dataclass(frozen=True)
class GroupDescription:
    group_id: str
    state: str
    protocol_type: str
    protocol: str
    members: list[MemberDescription]


# --- the interface of every group type -----------------------------------------------------------


class Group(Protocol):
    """What the type-agnostic parts of the coordinator ask of a group (Kafka's `Group`)."""

    group_id: str
    state_timestamp_ms: int  # wall clock, when the group entered its current state

    @property
    def group_type(self) -> str:
        """ListGroups v5's type: "classic", or "consumer" for a KIP-848 group."""
        ...

    @property
    def protocol_type(self) -> str | None:
        """ListGroups' protocol type ("consumer" for a consumer group); None when not known yet."""
        ...

    @property
    def state_name(self) -> str:
        """The state as ListGroups and DescribeGroups spell it (Kafka's stateAsString)."""
        ...

    def is_dead(self) -> bool: ...

    def is_empty(self) -> bool: ...

    def validate_offset_commit(self, generation_id: int, member_id: str, instance_id: str | None,
                               api_version: int = 9) -> ErrorCode:
        """Whether this member may commit offsets for the group now (OffsetCommit; the generation
        is a member epoch for a consumer group)."""
        ...

    def validate_offset_fetch(self, member_id: str | None, member_epoch: int) -> ErrorCode:
        """Whether this member may fetch the group's offsets (OffsetFetch v9+ names the member)."""
        ...

    def validate_offset_delete(self) -> ErrorCode:
        """Whether offsets may be deleted from the group now (OffsetDelete)."""
        ...

    def validate_delete_group(self) -> ErrorCode:
        """Whether the group may be deleted now (DeleteGroups)."""
        ...

    def is_subscribed_to_topic(self, topic: str) -> bool: ...

    def offset_expiration_base(self) -> Callable[[OffsetAndMetadata], int] | None:
        """The time an offset's retention counts from, or None while its offsets may not expire
        (Kafka's offsetExpirationCondition)."""
        ...

    def mark_dead(self, now_ms: int) -> None:
        """The group is being deleted: no request may use it any more."""
        ...
