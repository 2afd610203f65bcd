"""What a handler is given and what it gives back: the handler contract, and the broker's services
by name.

A handler is `async def handle(ctx: RequestContext, request) -> Reply | None` (minibroker.handlers
has the registry). `RequestContext` is one request: the connection it came on, its header and
schema, the handler's facts, when it arrived, and the broker's services by name (`ctx.logs`,
`ctx.cluster`, `ctx.groups`, `ctx.shares`, `ctx.txns`, `ctx.quotas`, `ctx.clock`, `ctx.auth`, `ctx.audit`, ...),
so that a reader sees at the top of this module everything the API layer may touch (Kafka's
`KafkaApis` constructor does the same: `replicaManager`, `groupCoordinator`, `txnCoordinator`,
`authorizer`, `quotas`, `time`). The services are one `BrokerServices` per broker, built by
`minibroker.broker.Broker` (the composition root); a test may build one of its own with fakes for
what the handler under test does not use.

`cluster` is the one place handlers ask for brokers, topics, partitions, leaders, replicas,
coordinators and the controller (minibroker.cluster.ClusterView); `config` is the broker config in
force now (dynamic broker configs, KIP-226, replace it while the broker runs).

Authorization sits here, where every request's principal and listener are known: a handler asks
`ctx.authorize(operation, resource_type, name)`, `ctx.filter_authorized(...)` and
`ctx.authorized_operations(resource_type, name)` at the point it knows the resource
(minibroker.auth.AuthHelper decides; with no authorizer, everything is allowed).

This module imports no handler and nothing that imports one: every module of the shell may import
it (tests/broker/test_import_graph.py keeps the shell's imports free of cycles).
"""

from __future__ import annotations

import dataclasses
import enum
import math
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Iterable, Mapping

from minibroker.auth import CLUSTER_RESOURCE, ResourceType as _ResourceType

if TYPE_CHECKING:
    from minibroker.audit import AuditLog
    from minibroker.auth import AclOperation, AuthHelper, ResourceType
    from minibroker.client_quotas import BrokerQuotas
    from minibroker.clock import BrokerClock
    from minibroker.cluster import ClusterView
    from minibroker.config import BrokerConfig
    from minibroker.dynamic_config import DynamicBrokerConfigs
    from minibroker.errors import StorageErrorLog
    from minibroker.faults import FaultInjector
    from minibroker.features import Features
    from minibroker.fetch_sessions import FetchSessions
    from minibroker.telemetry import ClientMetrics
    from minibroker.group_configs import GroupConfigs
    from minibroker.listeners import ListenerSecurity
    from minibroker.groups.coordinator import GroupCoordinator
    from minibroker.producers import ProducerIds, ProducerStates
    from minibroker.protocol.messages import ApiSchema, RequestHeader
    from minibroker.purgatory import Purgatory
    from minibroker.replica_manager import ReplicaManager
    from minibroker.share.manager import SharePartitionManager
    from minibroker.storage.manager import LogManager
    from minibroker.transactions.coordinator import TransactionCoordinator

__all__ = ["BrokerMetrics", "BrokerServices", "ByteRate", "Connection", "HandleFn", "Handler", "Reply",
           "RequestContext", "SaslPhase"]


# ---- the handler contract ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Reply:
    """A handler's answer. `body`: the response's fields, throttle_time left out; `throttle_ms`: a
    throttle the handler decided itself, for a quota it enforces (the producer-id quota), which the
    response carries and the connection waits out like a client-quota throttle."""

    body: dict[str, Any]
    throttle_ms: int = 0


HandleFn = Callable[["RequestContext", Any], Awaitable["Reply | None"]]


class ByteRate(enum.Enum):
    """The client byte-rate quota an API is charged to, as Kafka's KafkaApis charges it. The value is
    the quota's key (and the audit's throttle_quota)."""

    PRODUCE = "producer_byte_rate"  # the request's size; the request is handled and answered anyway
    FETCH = "consumer_byte_rate"  # the response's size; a throttled response is answered empty


class SaslPhase(enum.Enum):
    """When a connection on a SASL listener may send an API before it is authenticated (Kafka's
    SaslServerAuthenticator states); any other API closes the connection."""

    HANDSHAKE = "before its SaslHandshake"
    AUTHENTICATE = "after its SaslHandshake"


@dataclass(frozen=True, slots=True)
class Handler:
    api_key: int
    name: str  # the handler's name, as in metrics and fault rules: "produce", "init_producer_id"
    api_name: str  # Kafka's name for the API: "Produce", "InitProducerId"
    min_version: int
    max_version: int
    handle: HandleFn
    # KIP-219: the first version whose client waits by itself, where Kafka's response overrides
    # shouldClientThrottle; None: Kafka 4.4's default (from the first version with a throttle time).
    client_throttles_from: int | None = None
    byte_rate: ByteRate | None = None
    # The response a byte-rate throttle leaves, from the handler's body (ByteRate.FETCH's empty one).
    throttled_body: Callable[[dict[str, Any]], dict[str, Any]] | None = None
    sasl_phase: SaslPhase | None = None  # None: only once authenticated
    audited: bool = False  # its decisions are audit events (minibroker.audit)

    def client_throttles(self, version: int) -> bool:
        """Whether a client honours throttle_time in this version's response itself (else its next
        request just waits in the muted connection). Kafka's shouldClientThrottle, which only
        clients read: the version registered where Kafka's response overrides it, else Kafka
        4.4's AbstractResponse default, whether the response has a throttle time at this version
        (KAFKA-20828; 4.3's default was never)."""
        if self.client_throttles_from is not None:
            return version >= self.client_throttles_from
        from minibroker.protocol.messages import api_schema

        return any(f.name == "throttle_time" for f in dataclasses.fields(api_schema(self.api_key, version).response))


# ---- a connection and its requests --------------------------------------------------------------


@dataclass
class Connection:
    """What the broker knows about one client connection."""

    peer: str
    listener: str = "PLAINTEXT"
    principal: str = "User:ANONYMOUS"
    authenticated: bool = True  # False on a SASL listener until SaslAuthenticate succeeds
    # The SASL exchange in progress, after SaslHandshake until it completes (minibroker.sasl.SaslSession),
    # also while an authenticated connection re-authenticates (KIP-368).
    sasl: Any = None
    security: ListenerSecurity | None = None  # its listener's (minibroker.listeners); None: PLAINTEXT
    sasl_mechanism: str | None = None  # the mechanism it authenticated with
    # KIP-368: when its SASL session expires (the broker clock's monotonic seconds), None: never; and
    # when it last began to re-authenticate (at most once a second).
    session_expires_at: float | None = None
    reauth_started_at: float = -math.inf
    client_id: str = ""
    id: int = 0
    logged_trailing_bytes: bool = False
    inter_broker: bool = False  # another broker of the cluster, in process (a follower's fetches)
    # Request-time quota accounting of the request in progress (BrokerQuotas.*_request_cycle): the
    # task's CPU up to which it has been charged, and to whom.
    request_cpu_mark: int | None = None
    request_charge: tuple[str, str] | None = None
    # Producer-id quota: (topic, partition, producer id) -> (epoch, base sequence) of a batch the
    # quota throttled, whose later batches on this connection wait for it (handlers/produce.py).
    held_batches: dict | None = None
    # What ApiVersions v3+ said of the client (KIP-511): client telemetry's match selectors (KIP-714).
    software_name: str = ""
    software_version: str = ""

    @property
    def quota_user(self) -> str:
        """The quota entity `user`: the principal's name without `User:` (ANONYMOUS when none)."""
        return self.principal.partition(":")[2] or self.principal


@dataclass
class BrokerMetrics:
    requests: Counter = field(default_factory=Counter)  # by api name
    # by (api name, version), as Kafka's RequestsPerSec{request,version}: which protocol clients speak
    request_versions: Counter = field(default_factory=Counter)
    bytes_in: int = 0
    bytes_out: int = 0
    connections: int = 0
    connections_total: int = 0
    closed_for_protocol_errors: int = 0
    closed_idle: int = 0  # connections.max.idle.ms
    failed_tls_handshakes: int = 0
    expired_sessions_closed: int = 0  # KIP-368: Kafka's expired-connections-killed-count
    successful_reauthentications: int = 0
    requests_with_trailing_bytes: int = 0


@dataclass(eq=False, slots=True)
class BrokerServices:
    """One broker's collaborators, by name: what the API layer may touch (module docstring)."""

    node_id: int
    clock: BrokerClock
    configs: DynamicBrokerConfigs  # the config in force is `configs.config`
    logs: LogManager
    cluster: ClusterView
    replicas: ReplicaManager  # checked appends, transaction markers, the last stable offset
    producer_states: ProducerStates
    producer_ids: ProducerIds
    groups: GroupCoordinator
    group_configs: GroupConfigs  # Kafka 4's GROUP config resource
    shares: SharePartitionManager  # KIP-932's share partitions and share sessions
    txns: TransactionCoordinator
    quotas: BrokerQuotas
    auth: AuthHelper
    audit: AuditLog | None  # the audit stream, when audit.enable
    faults: FaultInjector
    purgatory: Purgatory  # delayed fetches, watched by topic-partition
    metrics: BrokerMetrics
    storage_errors: StorageErrorLog
    handlers: Mapping[int, Handler]  # this broker's registry (ApiVersions answers from it)
    features: Features  # finalized features (KIP-584): transaction.version
    fetch_sessions: FetchSessions  # incremental fetch sessions (KIP-227)
    client_metrics: ClientMetrics  # client telemetry (KIP-714): subscriptions and pushed metrics

    @property
    def config(self) -> BrokerConfig:
        return self.configs.config


class RequestContext:
    """One request being handled: where it came from, what it is, and the broker's services (the
    module docstring). Made for every request, so it is slotted and the services are read through
    the one `services` reference."""

    __slots__ = ("services", "connection", "header", "schema", "handler", "received_at", "close_connection")

    def __init__(self, services: BrokerServices, connection: Connection, header: RequestHeader, schema: ApiSchema,
                 handler: Handler, received_at: float) -> None:
        self.services = services
        self.connection = connection
        self.header = header
        self.schema = schema
        self.handler = handler
        self.received_at = received_at  # the broker clock's monotonic reading
        self.close_connection = False  # close after this response (a failed SASL exchange)

    @property
    def version(self) -> int:
        return self.header.api_version

    @property
    def client_id(self) -> str:
        return self.header.client_id or ""

    @property
    def principal(self) -> str:
        """Who sent the request ("User:ANONYMOUS" until a SASL exchange names someone)."""
        return self.connection.principal

    @property
    def listener(self) -> str:
        """The listener the request came on (its name: PLAINTEXT, SASL_PLAINTEXT, ...)."""
        return self.connection.listener

    # -- authorization (minibroker.auth) -----------------------------------------------------------

    def authorize(self, operation: AclOperation, resource_type: ResourceType, name: str,
                  log_if_denied: bool = True) -> bool:
        """May this request's principal, on its listener, perform `operation` on the resource?
        `log_if_denied=False` where a denial is not a refusal (a filtered list, Kafka's logIfDenied)."""
        return self.services.auth.authorize(self.connection, operation, resource_type, name, log_if_denied)

    def authorize_cluster(self, operation: AclOperation, log_if_denied: bool = True) -> bool:
        """`operation` on the one CLUSTER resource (kafka-cluster)."""
        return self.services.auth.authorize(self.connection, operation, _ResourceType.CLUSTER,
                                             CLUSTER_RESOURCE, log_if_denied)

    def filter_authorized(self, operation: AclOperation, resource_type: ResourceType,
                          names: Iterable[str], log_if_denied: bool = True) -> list[str]:
        """The names `operation` is allowed on, in their order."""
        return self.services.auth.filter_authorized(self.connection, operation, resource_type, names, log_if_denied)

    def authorized_operations(self, resource_type: ResourceType, name: str) -> int:
        """KIP-430's bit set: the operations supported on the resource that are allowed."""
        return self.services.auth.authorized_operations(self.connection, resource_type, name)

    def authorize_by_resource_type(self, operation: AclOperation, resource_type: ResourceType) -> bool:
        """KIP-679: is `operation` allowed on some resource of the type?"""
        return self.services.auth.authorize_by_resource_type(self.connection, operation, resource_type)

    # -- the services (BrokerServices) --------------------------------------------------------------

    @property
    def node_id(self) -> int:
        return self.services.node_id

    @property
    def clock(self) -> BrokerClock:
        return self.services.clock

    @property
    def config(self) -> BrokerConfig:
        """The broker config in force now (dynamic broker configs change it)."""
        return self.services.configs.config

    @property
    def configs(self) -> DynamicBrokerConfigs:
        return self.services.configs

    @property
    def logs(self) -> LogManager:
        return self.services.logs

    @property
    def cluster(self) -> ClusterView:
        return self.services.cluster

    @property
    def replicas(self) -> ReplicaManager:
        return self.services.replicas

    @property
    def producer_states(self) -> ProducerStates:
        return self.services.producer_states

    @property
    def producer_ids(self) -> ProducerIds:
        return self.services.producer_ids

    @property
    def groups(self) -> GroupCoordinator:
        return self.services.groups

    @property
    def group_configs(self) -> GroupConfigs:
        return self.services.group_configs

    @property
    def shares(self) -> SharePartitionManager:
        return self.services.shares

    @property
    def txns(self) -> TransactionCoordinator:
        return self.services.txns

    @property
    def quotas(self) -> BrokerQuotas:
        return self.services.quotas

    @property
    def auth(self) -> AuthHelper:
        return self.services.auth

    @property
    def audit(self) -> AuditLog | None:
        return self.services.audit

    @property
    def faults(self) -> FaultInjector:
        return self.services.faults

    @property
    def purgatory(self) -> Purgatory:
        return self.services.purgatory

    @property
    def metrics(self) -> BrokerMetrics:
        return self.services.metrics

    @property
    def storage_errors(self) -> StorageErrorLog:
        return self.services.storage_errors

    @property
    def handlers(self) -> Mapping[int, Handler]:
        return self.services.handlers

    @property
    def features(self) -> Features:
        return self.services.features

    @property
    def fetch_sessions(self) -> FetchSessions:
        return self.services.fetch_sessions

    @property
    def client_metrics(self) -> ClientMetrics:
        return self.services.client_metrics
