"""What the group coordinator's callers see: its configuration, its answers, and `Group`, the
interface every group type implements for the type-agnostic parts (the registry, ListGroups,
DeleteGroups, committed offsets).

Kafka's counterpart of `Group` is `org.apache.kafka.coordinator.group.Group`, implemented by
`ClassicGroup` and `ConsumerGroup` (and share groups since 4.0): the offsets manager and the shard
ask a group to validate a commit, say whether it subscribes to a topic, and when its offsets may
expire, without knowing its type. Only the classic type exists here (classic_group.py); a KIP-848
consumer group would be a second class with this interface and its own manager beside
classic_manager.py.

Pure: no trio, no clock.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Protocol

from protocol.errors import ErrorCode

if TYPE_CHECKING:
    from minibroker.config import BrokerConfig
    from storage.offsets_store import OffsetAndMetadata

CLASSIC = "classic"  # ListGroups v5 group type
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

    @classmethod
    def from_broker(cls, config: BrokerConfig) -> GroupConfig:
        return cls(
            initial_rebalance_delay_ms=config["group.initial.rebalance.delay.ms"],
            min_session_timeout_ms=config["group.min.session.timeout.ms"],
            max_session_timeout_ms=config["group.max.session.timeout.ms"],
            offsets_retention_ms=config["offsets.retention.minutes"] * 60_000,
            offsets_retention_check_interval_ms=config["offsets.retention.check.interval.ms"],
        )


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


# --- answers -------------------------------------------------------------------------------------


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
    group_type: str  # ListGroups v5's type: "classic" (a KIP-848 group: "consumer")
    protocol_type: str | None  # ListGroups' protocol type; None when not known yet
    state_timestamp_ms: int  # wall clock, when the group entered its current state

    @property
    def state_name(self) -> str:
        """The state as ListGroups and DescribeGroups spell it (Kafka's stateAsString)."""
        ...

    def is_dead(self) -> bool: ...

    def is_empty(self) -> bool: ...

    def validate_offset_commit(self, generation_id: int, member_id: str, instance_id: str | None) -> ErrorCode:
        """Whether this member may commit offsets for the group now (OffsetCommit)."""
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
