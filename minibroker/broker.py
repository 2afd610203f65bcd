"""The broker: state shared by all connections, and request dispatch.

`Broker.handle_frame` turns one request frame into a `Response`: the response frame (or None for
acks=0), the quota throttle time the connection must wait before its next request (KIP-219), and
whether to close the connection after it (failed SASL authentication). Errors
are split the h11 way: a peer that sends bytes we cannot parse, an API we do not have, or a version we
do not serve gets its connection closed (ProtocolError; Kafka does the same), except ApiVersions, which
always gets an answer a v0 reader can parse. A fault in our own code is logged with its traceback and
closes only that connection.

`Broker` is the composition root: it opens the data directory and builds each collaborator from the
narrow things it uses (the logs, the producer state, the coordinators, the quotas, the cluster view,
...), wires them by constructor arguments and explicit subscriptions, and hands the handlers the
result as one `BrokerServices` (minibroker.context; each request's `RequestContext` reads it).
`run(nursery)` starts its background tasks; minibroker.server serves it.
"""

from __future__ import annotations

import functools
import logging
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence, cast

import trio

from minibroker.acls import build_authorizer
from minibroker.auth import AuthHelper, Authorizer
from minibroker.cluster import BrokerEndpoints, ClusterView
from minibroker.client_quotas import BrokerQuotas
from minibroker.clock import BrokerClock
from minibroker.group_configs import GroupConfigs
from minibroker.internal_topics import configure_internal_topics
from minibroker.config import BrokerConfig
from minibroker.context import BrokerMetrics, BrokerServices, Connection, Handler, RequestContext
from minibroker.descriptors import default_open_files_cap, open_files_limit, process_budget
from minibroker.dynamic_config import DynamicBrokerConfigs, apply as apply_dynamic_config
from minibroker.errors import StartupError, StorageErrorLog
from minibroker.groups.coordinator import GroupCoordinator
from minibroker.groups.registry import DEFAULT_GROUP_TYPES
from minibroker.groups.share_group import SHARE
from minibroker.groups.share_manager import ShareGroupManager, ShareGroupSettings
from minibroker.groups.types import GroupTypes
from minibroker.handlers import ByteRate, Reply, SaslPhase, api_version_list, load_all
from minibroker.limits import ConnectionQuotas, RequestMemoryPool
from minibroker.listeners import listener_securities, unbound_listener
from minibroker.log_context import broker_log_context
from minibroker.log_cleaner import LogCleanerTask
from minibroker.audit import AuditLog, quota_settings
from minibroker.control.rules import RequestControl
from minibroker.faults import FaultInjector
from minibroker.features import Features
from minibroker.telemetry import ClientMetrics
from minibroker.fetch_sessions import MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS, FetchSessionCache, FetchSessions
from minibroker.producers import ProducerIds, ProducerStates
from minibroker.replica_manager import AppendOutcome, ReplicaManager
from minibroker.replication import BrokerUnavailable, Replication, ReplicationSettings
from minibroker.transactions.channel import TxnChannel
from minibroker.transactions.coordinator import TransactionCoordinator
from minibroker.purgatory import Purgatory
from minibroker.txn_markers import MarkerResult, TxnMarker
from minibroker.sasl import UserStore
from minibroker.share.coordinator import RoutedShareCoordinator, ShareCoordinator, ShareStateError
from minibroker.storage.share_state import TOPIC as SHARE_STATE_TOPIC
from minibroker.share.manager import ShareGroupConfigsView, SharePartitionManager
from minibroker.scram_credentials import ScramCredentialStore
from minibroker.protocol.entities import build
from minibroker.protocol.records import BatchHeader
from minibroker.protocol.errors import ErrorCode
from minibroker.protocol.extensions import MAX_IN_FLIGHT_SEQUENCE_APIS, max_in_flight_sequence_field
from minibroker.protocol.fetch_response import FrameParts, encode_fetch_response
from minibroker.protocol.produce_response import encode_produce_response
from minibroker.quotas.client_quota import combine_throttle_time_ms
from minibroker.protocol.messages import (
    API_VERSIONS_KEY,
    ProtocolError,
    UnknownApiKeyError,
    UnsupportedVersionError,
    api_schema,
    decode_request,
    encode_response,
    RequestHeader,
    parse_header,
    peek_api,
)
from minibroker.storage.transaction_store import TOPIC as TXN_TOPIC
from minibroker.storage.config import LogConfig
from minibroker.storage.errors import DamagedFileError, storage_error_message
from minibroker.storage.file_cache import FileCache
from minibroker.storage.lock import DataDirLock
from minibroker.storage.files import write_atomically
from minibroker.storage.log import PartitionLog
from minibroker.storage.manager import LogManager
from minibroker.storage.producer_ids import ProducerIdAllocator
from minibroker.storage.controller import Controller
from minibroker.metadata import BrokerMetadata
from minibroker.storage.metadata_image import (
    FenceBrokerRecord, MetadataRecord, PartitionChangeRecord, PartitionRecord, RegisterBrokerRecord,
    RemoveTopicRecord, TopicRecord, UnfenceBrokerRecord)
from minibroker.metadata_migration import legacy_importer

# What the quota callback's Cluster is made of (KIP-257): topics, their partitions' leaders and
# replicas, and the brokers that are up.
CLUSTER_SHAPE_RECORDS = (TopicRecord, PartitionRecord, PartitionChangeRecord, RemoveTopicRecord,
                         RegisterBrokerRecord, FenceBrokerRecord, UnfenceBrokerRecord)

log = logging.getLogger(__name__)

# Produce: decoded in place (minibroker.protocol.produce_request), also from a frame received in place; its
# responses are written by protocol.produce_response.
PRODUCE_KEY = 0
FETCH_KEY = 1  # its responses are encoded by minibroker.protocol.fetch_response
SASL_HANDSHAKE_KEY = 17



@dataclass(slots=True)
class Response:
    """What one request produced, for the connection loop (server.py)."""

    data: bytes | FrameParts | None  # the response frame; None when there is none (acks=0)
    throttle_ms: int = 0  # quota throttle: read nothing more from the connection for this long
    # Hold the response back for throttle_ms (a failed authentication's delay) instead of sending it
    # at once and then muting the connection (a quota throttle, for every version, as Kafka does).
    delay_response: bool = False
    close: bool = False  # close the connection once the response is sent


def prepare_data_dir(data_dir: Path) -> None:
    if data_dir.exists() and not data_dir.is_dir():
        raise StartupError(f"log.dirs {data_dir} is not a directory")
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StartupError(f"cannot create log.dirs {data_dir}: {exc.strerror or exc}") from exc


def load_or_create_meta(data_dir: Path, node_id: int, cluster_id: str) -> str:
    """Keep the cluster id stable across restarts in meta.properties, as Kafka does. A file that is
    there but unreadable, or holds no cluster.id, stops the start (naming it): writing a fresh id over
    it would be a guess that turns the data directory into another cluster's."""
    meta = data_dir / "meta.properties"
    props: dict[str, str] = {}
    if meta.exists():
        try:
            text = meta.read_bytes().decode("utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise DamagedFileError(meta, f"unreadable ({exc})", _META_REMEDY) from exc
        for line in text.splitlines():
            if "=" in line and not line.startswith("#"):
                key, _, value = line.partition("=")
                props[key.strip()] = value.strip()
        if not props.get("cluster.id"):
            raise DamagedFileError(meta, "holds no cluster.id", _META_REMEDY)
    stored = props.get("cluster.id")
    if cluster_id and stored and cluster_id != stored:
        raise StartupError(f"cluster.id {cluster_id!r} does not match {stored!r} stored in {meta}")
    chosen = cluster_id or stored or _random_cluster_id()
    if stored != chosen or props.get("node.id") != str(node_id):
        write_atomically(meta, f"version=1\ncluster.id={chosen}\nnode.id={node_id}\n".encode())
    return chosen


_META_REMEDY = "restore it (version=1, cluster.id=..., node.id=...) or remove it to start with a new cluster id"


def _random_cluster_id() -> str:
    import base64

    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


class Broker:
    def __init__(self, config: BrokerConfig, *, clock: BrokerClock | None = None,
                 group_types: GroupTypes = DEFAULT_GROUP_TYPES, authorizer: Authorizer | None = None,
                 controller: Controller | None = None, peers: dict[int, BrokerEndpoints] | None = None,
                 peer: Callable[[int], Broker | None] | None = None) -> None:
        """`clock`: the broker's clock (minibroker.clock); a new BrokerClock by default, so that
        several brokers in one process each keep their own time. `group_types`: the group types its
        coordinator knows (minibroker.groups.types; classic and consumer groups by default).
        `authorizer`: what decides each request's operations (minibroker.auth); None allows all.
        `controller`: the cluster's controller (minibroker.storage.controller), when the broker is
        one of several; by default the broker is a cluster of one, whose controller keeps its
        metadata log in the broker's data directory. `peers`: where every broker of the cluster is
        reached, by node id (shared by the brokers of a cluster; this broker adds its own). `peer`:
        the running broker of a node id, in process (None when it is stopped): followers fetch
        from their leaders through it."""
        self.clock = clock if clock is not None else BrokerClock()
        self.controller = controller
        self._owns_controller = controller is None
        self.peers: dict[int, BrokerEndpoints] = peers if peers is not None else {}
        self.peer: Callable[[int], Broker | None] = peer if peer is not None else (lambda node_id: None)
        self.stopped = False  # stopped or killed: requests from other brokers in process are refused
        self.killed = False  # stopped as by kill -9: closed as a crash leaves it (`close`)
        self.group_types = group_types
        self.authorizer = authorizer
        self.node_id: int = config["node.id"]
        with broker_log_context(self.node_id):  # its log lines say "[broker N]"
            self._start(config)

    def _start(self, config: BrokerConfig) -> None:
        self.data_dir = config.data_dir
        prepare_data_dir(self.data_dir)
        # One broker per data directory (Kafka's .lock), taken before anything in it is read.
        self.lock = DataDirLock(self.data_dir)
        self.logs: LogManager  # set by _open (what its failure leaves open is closed there)
        self.files = self._open_file_cache(config)
        # Connections draw on the same descriptor budget: what the segment files' cap leaves.
        budget = process_budget()
        self.connection_share = budget.share("connections", max(1, budget.capacity - self.files.capacity))
        try:
            self._open(config)
        except BaseException:
            if hasattr(self, "logs"):  # the logs were opened, something after them failed
                self.logs.close(clean=False)
            if hasattr(self, "metadata"):
                self.metadata.close()
            if self._owns_controller and self.controller is not None:
                self.controller.close(clean=False)
            self._release_descriptors()
            raise

    @property
    def config(self) -> BrokerConfig:
        """The config in force: the properties under the dynamic broker configs (KIP-226)."""
        return self.dynamic_configs.config

    @property
    def log_config(self) -> LogConfig:
        return self.dynamic_configs.config.log_config

    @property
    def handlers(self) -> Mapping[int, Handler]:
        """This broker's handlers by api key (its own copy of the registry: replacing one here
        changes this broker only)."""
        return self.services.handlers

    @handlers.setter
    def handlers(self, handlers: Mapping[int, Handler]) -> None:
        self.services.handlers = handlers

    @property
    def listeners(self) -> dict[str, tuple[str, int]]:
        """Set once the listeners are bound (port 0 picks a port): name -> advertised (host, port)."""
        return self.endpoints.listeners

    @property
    def bound_listeners(self) -> dict[str, tuple[str, int]]:
        """name -> the address actually bound."""
        return self.endpoints.bound

    @property
    def advertised_host(self) -> str:
        return self.endpoints.default[0]

    @property
    def advertised_port(self) -> int:
        return self.endpoints.default[1]

    @staticmethod
    def _open_file_cache(config: BrokerConfig) -> FileCache:
        """The bounded set of open segment files, drawing on the process's descriptor budget."""
        budget = process_budget()
        cap = config["log.max.open.files"]
        if cap < 0:
            cap = default_open_files_cap(budget)
        elif cap > budget.capacity:
            log.warning("log.max.open.files=%d is more than the %d descriptors the limit of %d "
                        "leaves: raise the limit (ulimit -n)", cap, budget.capacity, open_files_limit())
        files = FileCache(cap)
        files.share = budget.share("files", cap, reclaim=files.reclaim)
        log.info("at most %d segment files open at once (log.max.open.files), under a descriptor "
                 "limit of %d (budget: %s)", cap, open_files_limit(), budget.describe())
        return files

    def _open(self, config: BrokerConfig) -> None:
        clock = self.clock
        self.cluster_id = load_or_create_meta(self.data_dir, self.node_id, config["cluster.id"])
        # The cluster's metadata (topics, assignments, configs, quotas, SCRAM, producer ids): a cluster
        # of one keeps its metadata log here, importing the files of an earlier version once.
        if self.controller is None:
            self.controller = Controller.open(
                self.data_dir, self.node_id, clock.now_ms(), files=self.files,
                legacy=legacy_importer(self.data_dir, self.node_id, config.log_config))
        if self._owns_controller:
            self.controller.default_replication_factor = config["default.replication.factor"]
            self.controller.unclean_leader_election = config.log_config.unclean_leader_election_enable
            configure_internal_topics(self.controller, config)
            # A broker of a cluster is registered by the cluster, once it listens.
            self.controller.register_broker(self.node_id, config["broker.rack"], clock.now_ms())
        self.metadata = BrokerMetadata(self.controller, clock, self.node_id)
        # Settings changed at runtime (KIP-226), kept in the metadata log, over the properties.
        self.dynamic_configs = DynamicBrokerConfigs.load(self.metadata, config)
        config = self.dynamic_configs.config
        for key in config.unknown_keys():
            log.warning("config %s was supplied but isn't a known config", key)
        self.storage_errors = StorageErrorLog(clock, logging.getLogger("minibroker.errors"))
        started = time.perf_counter()
        self.logs = LogManager.open(
            self.data_dir, config.log_config, clock.now_ms(),
            files=self.files, threads=config["num.recovery.threads.per.data.dir"],
            controller=self.controller, node_id=self.node_id,
        )
        recovery = self.logs.recovery
        log.info("registered %d partition(s) in %.0f ms; %d not closed cleanly were recovered%s",
                 recovery.partitions, (time.perf_counter() - started) * 1000, recovery.recovered,
                 f" on {recovery.threads} threads" if recovery.threads > 1 else "")
        # Where clients reach this broker, per listener (filled in as the listeners are bound), and
        # the cluster as it sees it: partition leaders, replicas, coordinators, the quorum.
        self.endpoints = BrokerEndpoints(config["advertised.listeners"])
        self.peers[self.node_id] = self.endpoints
        self.cluster = ClusterView(self.node_id, self.cluster_id, self.controller, self.logs, self.peers)
        self.connection_quotas = ConnectionQuotas(
            config["max.connections"], config["max.connections.per.ip"], config["max.connections.per.ip.overrides"],
            share=self.connection_share,
        )
        self.request_memory = RequestMemoryPool(config["queued.max.request.bytes"])
        self.producer_states = ProducerStates(config, self.logs)
        # Recovery: a large log an unclean stop left is replayed now, not on the event loop at its
        # first produce while every connection waits.
        self.producer_states.rebuild_recovered(recovery.recovered_partitions, clock.now_ms(),
                                               config["num.recovery.threads.per.data.dir"])
        # Blocks of producer ids from the controller, each in the metadata log before it is used.
        self.producer_ids = ProducerIds(ProducerIdAllocator(self._reserve_producer_ids), self.producer_states)
        # Lean producer state: the duplicate window rides on ApiVersions and InitProducerId responses (flexible
        # versions) in a tagged field, in lean mode only (minibroker.protocol.extensions).
        self.response_tags: dict[int, dict[int, bytes]] = {}
        if self.producer_states.mode == "lean":
            window_field = max_in_flight_sequence_field(self.producer_states.max_in_flight)
            self.response_tags = {api_key: window_field for api_key in MAX_IN_FLIGHT_SEQUENCE_APIS}
        self.faults = FaultInjector(config["fault.injection"])
        # Error stacks, hooks, delays and request capture for tests (minibroker.control).
        self.control = RequestControl(self.node_id, clock, self.faults, config["control.capture.requests"])
        self.fetch_purgatory = Purgatory("Fetch", clock)
        # Who leads and follows what, the followers' fetchers, the high watermarks (minibroker.replication).
        self.replication = Replication(self.node_id, self.logs, self.controller, self.producer_states,
                                       self.fetch_purgatory, clock, ReplicationSettings.from_config(config),
                                       peer=self.peer)
        self.replicas = ReplicaManager(self.logs, self.producer_states, self.fetch_purgatory, clock,
                                       self.storage_errors, replication=self.replication)
        self.metadata.subscribe(self.replication.on_metadata)
        self.replication.start()
        # Kafka 4's GROUP config resource (minibroker.group_configs); the consumer groups read it.
        self.group_configs = GroupConfigs(config, self.metadata)
        self.groups = GroupCoordinator.open(config, self.logs, clock, types=self.group_types,
                                            append_transactional=self.replicas.append_transactional_offsets,
                                            group_configs=self.group_configs)
        # Share groups (KIP-932): the share coordinator's state in __share_group_state, the share
        # partitions and sessions, and the share group type's settings and share coordinator.
        self.local_share_coordinator = ShareCoordinator.open(
            self.logs, now_ms=clock.now_ms,
            updates_per_snapshot=lambda: self.config["share.coordinator.snapshot.update.records.per.snapshot"])
        state_partition = self.cluster.partition(SHARE_STATE_TOPIC, 0)
        state_log = self.logs.log(SHARE_STATE_TOPIC, 0)
        if state_partition is not None and state_partition.leader == self.node_id and state_log is not None \
                and state_log.leader_epoch == state_partition.leader_epoch:
            self.local_share_coordinator.loaded_epoch = state_partition.leader_epoch  # loaded by its open
        self.local_share_coordinator.replicate(self.replication,
                                               lambda: self.config["share.coordinator.write.timeout.ms"])
        self.share_coordinator = cast(ShareCoordinator, RoutedShareCoordinator(
            self.local_share_coordinator, self._share_coordinator_leader))
        self.shares = SharePartitionManager(
            self.logs, self.replicas, self.share_coordinator, clock, self.fetch_purgatory,
            ShareGroupConfigsView(self.group_configs.get),
            max_sessions=lambda: self.config["group.share.max.share.sessions"],
            prune_interval_ms=lambda: self.config["share.coordinator.state.topic.prune.interval.ms"])
        if SHARE in self.groups.shard.managers:
            share_groups = self.groups.manager(SHARE)
            assert isinstance(share_groups, ShareGroupManager)
            share_groups.configure(ShareGroupSettings.from_broker(config), self.share_coordinator)
        # A coordinator move: the broker that now leads __consumer_offsets loads its groups from its
        # replica, the one that led it unloads them (NOT_COORDINATOR to its clients); the
        # coordinator answers once its writes are acknowledged by the ISR.
        self.groups.replicate(self.logs, self.replication, config["offsets.commit.timeout.ms"])
        self.replication.subscribe(self.groups.leadership_changed)
        self.replication.subscribe(self._on_leader_change)
        # Compaction of cleanup.policy=compact topics.
        self.cleaner = LogCleanerTask(config, self.logs, self.producer_states, clock)
        # KIP-227: incremental fetch sessions (Kafka's FetchSessionCache; its 2-minute eviction time).
        self.fetch_sessions = FetchSessions(FetchSessionCache(config["max.incremental.fetch.session.cache.slots"],
                                                              MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS))
        # Client telemetry (KIP-714): CLIENT_METRICS subscriptions and the metrics clients push.
        self.client_metrics = ClientMetrics.open(self.data_dir, config["telemetry.max.bytes"])
        # Finalized features (KIP-584): transaction.version, streams.version and share.version, kept in
        # the data dir once UpdateFeatures changed them.
        self.features = Features.open(self.data_dir, config["transaction.version"], config["streams.version"],
                                      config["share.version"])
        # The transaction coordinator, opened after the groups (a transaction prepared before a crash
        # commits its pending offsets). Produce asks it whether a transactional batch's partition is
        # in the producer's transaction (KIP-890, `verify_produce`), wherever it runs.
        # Its markers go to each partition's leader as a WriteTxnMarkers in process, the verification
        # of a transactional batch to the coordinator's broker (minibroker.transactions.channel); a
        # marker written to __consumer_offsets commits or drops the transaction's offsets here.
        self.txn_channel = TxnChannel(self.node_id, self.cluster, self.logs, self.replication,
                                      lambda node: self if node == self.node_id else self.peer(node))
        self.replicas.on_offsets_marker = lambda _partition, producer_id, commit: \
            self.groups.complete_transaction(producer_id, commit)
        self.transactions = TransactionCoordinator.open(
            config, self.logs, allocate=self.producer_ids.allocate, clock=clock,
            markers=self.txn_channel.write_markers, transaction_version=self.features.transaction_version,
            placement=self.txn_channel.placement())
        self.features.on_change.append(
            lambda levels: setattr(self.transactions, "transaction_version", self.features.transaction_version))
        self.features.on_change.append(lambda levels: self.shares.share_version_changed(self.features.share_version))
        self.metrics = BrokerMetrics()
        self.quotas = BrokerQuotas(config, self.metadata, clock)
        self.pid_quota = self.quotas.pid  # KIP-936; producer_ids_rate changes are routed to it
        # The quota callback learns the new cluster (KIP-257) on every broker, once per metadata
        # change that touches topics, partitions or brokers anywhere in the cluster: a topic created,
        # grown or deleted, and every leader or replica change (a leader move, a broker stopped or
        # started, ElectLeaders, a reassignment), as Kafka's DynamicTopicClusterQuotaPublisher calls
        # updateClusterMetadata. A callback that divides a quota by the partitions its own broker
        # leads follows leadership without a quota change.
        self.metadata.subscribe(self._on_cluster_metadata)
        # A dynamic broker config put in force reaches the topics' defaults and the quota window.
        self.dynamic_configs.subscribe(functools.partial(apply_dynamic_config, logs=self.logs, quotas=self.quotas))
        self.audit: AuditLog | None = None  # the audit stream of decisions, when audit.enable
        if config["audit.enable"]:
            self.audit = AuditLog(
                self.logs,
                flush_interval_ms=config["audit.flush.interval.ms"],
                topic_configs={"retention.ms": str(config["audit.retention.ms"])},
                on_append=lambda topic, partition: self.fetch_purgatory.check_and_complete((topic, partition)),
            )
            # The quotas the recorded decisions are made under (the pipeline replays them).
            self.audit.record_quota_config(clock.now_ms(), self.quotas.store.entities(), quota_settings(config))
        self.sasl_users = UserStore(config["sasl.users"], config["sasl.enabled.mechanisms"])
        # SCRAM users created and removed at runtime (AlterUserScramCredentials), kept in the metadata log.
        self.scram_credentials = ScramCredentialStore.open(self.sasl_users, self.metadata)
        # What each listener asks of its clients: TLS, SASL mechanisms (keystores are read now).
        self.listener_security = listener_securities(config)
        # ACLs (authorizer.class.name): Kafka's StandardAuthorizer on the metadata image's ACLs, unless the
        # broker was built with an authorizer of its own.
        if self.authorizer is None:
            self.authorizer = build_authorizer(config, self.metadata)
        self.auth = AuthHelper(self.sasl_users, self.scram_credentials, self.authorizer)
        self.metrics_address: tuple[str, int] | None = None  # GET /metrics, when metrics.listen is set
        self._next_connection_id = 0
        # What the handlers may touch, by name (minibroker.context).
        self.services = BrokerServices(
            node_id=self.node_id, clock=clock, configs=self.dynamic_configs, logs=self.logs, cluster=self.cluster,
            replicas=self.replicas, producer_states=self.producer_states, producer_ids=self.producer_ids,
            groups=self.groups, group_configs=self.group_configs, shares=self.shares, txns=self.transactions,
            quotas=self.quotas, auth=self.auth, audit=self.audit,
            faults=self.faults, purgatory=self.fetch_purgatory, metrics=self.metrics,
            storage_errors=self.storage_errors, handlers=load_all(), features=self.features,
            fetch_sessions=self.fetch_sessions, client_metrics=self.client_metrics,
        )

    def _reserve_producer_ids(self, block_size: int) -> int:
        assert self.controller is not None
        return self.controller.allocate_producer_ids(self.node_id, self.clock.now_ms(), block_size)

    # ---- lifecycle -------------------------------------------------------------------------

    def set_listener(self, host: str, port: int, name: str = "PLAINTEXT") -> None:
        """Record a bound listener and the address advertised for it (the first one is the default)."""
        self.endpoints.set(name, host, port)

    def run(self, nursery: trio.Nursery) -> None:
        """Start the broker's background tasks in `nursery`: retention, flushes and producer-id
        expiry, the group coordinator's timers, the share partitions' acquisition locks, the log
        cleaner, the transaction coordinator's timers, and the client quotas' housekeeping. They run until the nursery is cancelled."""
        nursery.start_soon(self.run_background)
        nursery.start_soon(self.groups.run)
        nursery.start_soon(self.shares.run)
        nursery.start_soon(self.cleaner.run)
        nursery.start_soon(self.transactions.run)
        nursery.start_soon(self.quotas.run_housekeeping)
        nursery.start_soon(self.quotas.run_pid_cache_cleanup)
        nursery.start_soon(self.replication.run, nursery)
        nursery.start_soon(self.replication.run_isr_checks)

    def _share_coordinator_leader(self, create: bool) -> ShareCoordinator:
        """The share coordinator: the one of the broker leading __share_group_state, loaded for
        its leader epoch (minibroker.share.coordinator.RoutedShareCoordinator)."""
        registration = self.cluster.partition(SHARE_STATE_TOPIC, 0)
        if registration is None:
            if not create:
                return self.local_share_coordinator  # no share state anywhere yet
            self.local_share_coordinator.create_topic()
            registration = self.cluster.partition(SHARE_STATE_TOPIC, 0)
            if registration is None:
                raise ShareStateError(ErrorCode.coordinator_not_available, "The coordinator is not available.")
        leader = self if registration.leader == self.node_id else (
            self.peer(registration.leader) if registration.leader >= 0 else None)
        if leader is None or leader.stopped:
            raise ShareStateError(ErrorCode.coordinator_not_available, "The coordinator is not available.")
        coordinator = leader.local_share_coordinator
        state_log = leader.logs.log(SHARE_STATE_TOPIC, 0)
        coordinator.ensure_loaded(registration.leader_epoch, state_log.leader_epoch if state_log is not None else None)
        return coordinator

    def _on_leader_change(self, topic: str, partition: int, registration: Any) -> None:
        if topic == SHARE_STATE_TOPIC:
            # The new share coordinator reads every share partition's state from its replica; the
            # one that led it before stops answering (Kafka's onElection / onResignation).
            if registration.leader == self.node_id:
                self.local_share_coordinator.become_leader(registration.leader_epoch)
            else:
                self.local_share_coordinator.resign()
        else:
            # A share partition is loaded again from the share coordinator by its new leader (Kafka's
            # SharePartitionListener drops it on a leadership change).
            self.shares.leadership_changed(topic, partition)
        if topic == TXN_TOPIC and hasattr(self, "transactions"):
            # A transaction coordinator move: the new leader loads __transaction_state from its
            # replica and completes what was prepared; the old one forgets it.
            if registration.leader == self.node_id:
                self.transactions.become_coordinator(registration.leader_epoch, self.logs.log(topic, partition))
            else:
                self.transactions.resign()

    def _on_cluster_metadata(self, records: Sequence[MetadataRecord]) -> None:
        if any(isinstance(record, CLUSTER_SHAPE_RECORDS) for record in records):
            self.publish_cluster_metadata()

    def publish_cluster_metadata(self) -> None:
        """KIP-257: tell the quota callback the cluster, at start (once the listeners are bound) and
        whenever topics, partitions, their leaders or the brokers change; if it says limits changed,
        every quota's is re-read."""
        self.quotas.update_cluster_metadata(self.cluster.snapshot)

    def new_connection(self, peer: str, listener: str = "PLAINTEXT") -> Connection:
        self._next_connection_id += 1
        self.metrics.connections += 1
        self.metrics.connections_total += 1
        security = self.listener_security.get(listener)
        if security is None:  # a connection made in process (a test's) on a listener not configured
            security = self.listener_security[listener] = unbound_listener(self.config, listener)
        return Connection(
            peer=peer,
            listener=listener,
            authenticated=security is None or not security.sasl,
            security=security,
            id=self._next_connection_id,
        )

    def connection_closed(self, conn: Connection) -> None:
        self.metrics.connections -= 1
        self.shares.connection_closed(conn.id)  # its share sessions end: their records are released
        self.quotas.forget_current_task()

    def close(self) -> None:
        with broker_log_context(self.node_id):
            self._close()

    def _close(self) -> None:
        self.stopped = True
        if self.killed:
            self._close_killed()
            return
        try:
            if self.audit is not None:
                self.audit.close(self.clock.now_ms())
            self.producer_states.snapshot_all()
            self.groups.close()
            self.quotas.close()
            self.replication.stop()
            self.fetch_purgatory.complete_all()
            self.metadata.close()
            self.logs.close(clean=True)
            if self._owns_controller and self.controller is not None:
                self.controller.close(clean=True, now_ms=self.clock.now_ms())
        finally:
            self._release_descriptors()

    def _close_killed(self) -> None:
        """What a kill -9 leaves: nothing flushed, snapshotted or marked clean (the logs are
        recovered at the next start, as after a crash); what waits is answered; the descriptors
        are given back (the process lives on)."""
        try:
            self.replication.stop()
            self.fetch_purgatory.complete_all()
            self.groups.close()
            self.metadata.close()
            self.logs.close(clean=False)
            if self._owns_controller and self.controller is not None:
                self.controller.close(clean=False)
        finally:
            self._release_descriptors()

    def _release_descriptors(self) -> None:
        self.files.close_all()
        if self.files.share is not None:
            self.files.share.close()
        self.connection_share.close()
        self.lock.release()  # even after a failed close: a restart in this process must work

    async def run_background(self) -> None:
        """Retention and the time-based flush policy, on their configured intervals."""
        retention_every = self.config["log.retention.check.interval.ms"] / 1000
        flush_every = self.config["log.flush.scheduler.interval.ms"] / 1000
        clock = self.clock
        next_retention = clock.monotonic() + retention_every
        expiry_every = self.config["producer.id.expiration.check.interval.ms"] / 1000
        next_expiry = clock.monotonic() + expiry_every
        while True:
            await clock.sleep(flush_every)
            now_ms = clock.now_ms()
            if self.audit is not None:
                self.audit.maybe_flush(now_ms)
            try:
                self.logs.maybe_flush(now_ms)
            except OSError as exc:  # a disk fault must not stop the broker: tried again next time
                log.error("flushing the logs failed: %s", storage_error_message(exc))
            if clock.monotonic() >= next_retention:
                next_retention = clock.monotonic() + retention_every
                try:
                    deleted = self.logs.enforce_retention(now_ms)
                except OSError as exc:
                    log.error("retention failed: %s", storage_error_message(exc))
                    deleted = 0
                if deleted:
                    log.info("retention deleted %d segment(s)", deleted)
            if clock.monotonic() >= next_expiry:
                next_expiry = clock.monotonic() + expiry_every
                expired = self.producer_states.remove_expired(now_ms)
                self.producer_ids.remove_expired(now_ms)
                if expired:
                    log.info("expired %d idle producer id(s)", expired)

    # ---- dispatch --------------------------------------------------------------------------

    async def handle_frame(self, frame: bytes | bytearray, conn: Connection) -> Response:
        """One request in, its Response out (the frame, None for acks=0, plus any quota throttle)."""
        self.metrics.bytes_in += len(frame) + 4
        api_key, version, correlation_id = peek_api(frame)
        handler = self.services.handlers.get(api_key)
        if handler is None:
            raise UnknownApiKeyError(f"unknown api key {api_key}")
        if (conn.sasl is not None or not conn.authenticated) and handler.sasl_phase is not (
                SaslPhase.HANDSHAKE if conn.sasl is None else SaslPhase.AUTHENTICATE):
            # Kafka's IllegalSaslStateException: the connection is closed.
            raise ProtocolError(f"unexpected {handler.name} request during SASL "
                                f"{'re-authentication' if conn.authenticated else 'authentication'}")
        if conn.session_expires_at is not None and self._session_expired(conn, api_key):
            return Response(None, close=True)
        if not handler.min_version <= version <= handler.max_version:
            if api_key == API_VERSIONS_KEY:
                return Response(self._api_versions_fallback(correlation_id))
            raise UnsupportedVersionError(
                f"{handler.name} v{version} is not supported "
                f"(v{handler.min_version}-v{handler.max_version})"
            )
        if type(frame) is not bytes and api_key != PRODUCE_KEY:
            frame = bytes(frame)  # received in place (minibroker.protocol.framing); kio's readers take bytes
        schema = api_schema(api_key, version)
        header = parse_header(frame, schema.flexible)
        request, trailing = decode_request(schema, frame, header.size)
        if header.client_id:
            conn.client_id = header.client_id
        if trailing:
            self._note_trailing_bytes(conn, handler.name, version, trailing)
        ctx = RequestContext(self.services, conn, header, schema, handler, self.clock.monotonic())
        self.metrics.requests[handler.name] += 1
        self.metrics.request_versions[handler.name, version] += 1
        if self.control.active:  # a test's controls: capture, delay, hooks, error stacks (minibroker.control)
            answered = await self.control.intercept(ctx, request)
            if answered is not None:
                return Response(None) if answered.data is None else self._response(ctx, answered.data)
        # Requests of the SASL exchange are answered outside the quotas, as by Kafka's authenticator.
        if self.quotas.any_enabled and conn.authenticated and conn.sasl is None:
            mark = self.audit.mark() if self.audit is not None and handler.audited else -1
            return await self._handle_with_quotas(ctx, request, len(frame), mark)
        reply = await handler.handle(ctx, request)
        if reply is None:
            return Response(None, close=ctx.close_connection)
        return self._response(ctx, self._encode(ctx, reply.body, reply.throttle_ms), reply.throttle_ms)

    def _session_expired(self, conn: Connection, api_key: int) -> bool:
        """KIP-368: a request on a connection whose SASL session has expired closes it, unless it is
        the SaslHandshake that re-authenticates it (Kafka's SocketServer: "Disconnecting expired
        channel"; the handshake is checked by its handler)."""
        expires = conn.session_expires_at
        now = self.clock.monotonic()
        if expires is None or now <= expires or api_key == SASL_HANDSHAKE_KEY or conn.sasl is not None:
            return False
        self.metrics.expired_sessions_closed += 1
        log.info("closing connection from %s (%s): its SASL session expired %.0f ms ago and it did not "
                 "re-authenticate (connections.max.reauth.ms or its token's lifetime; KIP-368)",
                 conn.peer, conn.principal, (now - expires) * 1000)
        return True

    def _note_trailing_bytes(self, conn: Connection, api: str, version: int, count: int) -> None:
        """Bytes after a well-formed body are ignored, as Kafka ignores them: counted, and logged once
        per connection at debug (a client that sends them sends them on every such request)."""
        self.metrics.requests_with_trailing_bytes += 1
        if not conn.logged_trailing_bytes:
            conn.logged_trailing_bytes = True
            log.debug("%s (client id %r) sent %s v%d with %d byte(s) after the body; ignored",
                      conn.peer, conn.client_id, api, version, count)

    async def _handle_with_quotas(self, ctx: RequestContext, request: Any, request_size: int,
                                  audit_mark: int = -1) -> Response:
        """Handle a request, then charge it to its client's quotas (see minibroker.client_quotas):
        the request time, and the byte rate its handler registered (minibroker.handlers.ByteRate)."""
        quotas = self.quotas
        conn = ctx.connection
        handler = ctx.handler
        timed = quotas.request.quotas_enabled  # only the request quota needs the CPU time
        if timed:
            quotas.mark_request_start(conn)
        reply = await handler.handle(ctx, request)
        byte_rate = handler.byte_rate
        data = None
        if byte_rate is ByteRate.FETCH and reply is not None:  # charged by the response's size
            data = self._encode(ctx, reply.body, reply.throttle_ms)
        now_ms = self.clock.monotonic_ms()
        user, client_id = conn.quota_user, ctx.client_id
        request_ms = 0
        if timed and reply is not None:
            # This request's CPU so far (read, decode, handle); the rest once it is sent (KIP-124).
            # A request without a response (acks=0) is exempt (Kafka's sendNoOpResponseExemptThrottle).
            request_ms = quotas.charge_request_time(conn, user, client_id, now_ms)
        bandwidth, bandwidth_ms = None, 0
        if byte_rate is ByteRate.PRODUCE:
            bandwidth = quotas.produce
            bandwidth_ms = bandwidth.record_and_get_throttle_time_ms(user, client_id, request_size, now_ms)
        elif data is not None and reply is not None and handler.throttled_body is not None:
            bandwidth = quotas.fetch
            bandwidth_ms = bandwidth.record_and_get_throttle_time_ms(user, client_id, len(data), now_ms)
            if bandwidth_ms or request_ms:
                # Nothing is returned, so nothing may count: an empty response with the throttle time.
                bandwidth.unrecord_quota_sensor(user, client_id, len(data), now_ms)
                reply = Reply(handler.throttled_body(reply.body), reply.throttle_ms)
                data = None
        throttle_ms, bandwidth_charged = combine_throttle_time_ms(bandwidth_ms, request_ms)
        if throttle_ms:
            charged = bandwidth if bandwidth_charged and bandwidth is not None else quotas.request
            charged.record_throttle_time(user, client_id, throttle_ms, now_ms)
            if audit_mark >= 0 and self.audit is not None:
                quota = byte_rate.value if charged is not quotas.request and byte_rate else "request_percentage"
                self.audit.amend(audit_mark, throttle_ms, quota, emptied=handler.throttled_body is not None)
        if reply is None:  # acks=0: no response, but the connection still waits out its byte rate
            return Response(None, bandwidth_ms, close=ctx.close_connection)
        # A throttle the handler set itself (a quota it enforces, e.g. producer ids) counts too.
        throttle_ms = max(throttle_ms, reply.throttle_ms)
        if data is None or throttle_ms:
            data = self._encode(ctx, reply.body, throttle_ms)
        return self._response(ctx, data, throttle_ms)

    def _encode(self, ctx: RequestContext, body: dict[str, Any], throttle_ms: int) -> bytes | FrameParts:
        """The response frame: `body` with the throttle time, in the request's version. A Produce
        response is written directly (minibroker.protocol.produce_response, kio's bytes without kio's objects); a
        Fetch response keeps its large records as buffers of their own (minibroker.protocol.fetch_response)."""
        schema = ctx.schema
        if schema.api_key == PRODUCE_KEY:
            return encode_produce_response(schema.version, ctx.header.correlation_id,
                                           {**body, "throttle_time": throttle_ms}, self.response_tags.get(PRODUCE_KEY))
        if schema.api_key == FETCH_KEY:
            return encode_fetch_response(schema, ctx.header.correlation_id, {**body, "throttle_time": throttle_ms},
                                         self.response_tags.get(schema.api_key))
        return encode_response(schema, ctx.header.correlation_id,
                               build(schema.response, {**body, "throttle_time": throttle_ms}),
                               self.response_tags.get(schema.api_key))

    def _response(self, ctx: RequestContext, data: bytes | FrameParts, throttle_ms: int = 0) -> Response:
        self.metrics.bytes_out += len(data)
        if ctx.close_connection:  # a failed SASL exchange: answer late, then close (Kafka)
            return Response(data, self.config["connection.failed.authentication.delay.ms"], True, True)
        return Response(data, throttle_ms)

    def _api_versions_fallback(self, correlation_id: int) -> bytes:
        """KIP-511: UNSUPPORTED_VERSION plus our ranges, in ApiVersions v0 (header v0) form."""
        schema = api_schema(API_VERSIONS_KEY, 0)
        body = {"error_code": ErrorCode.unsupported_version, "api_keys": api_version_list(self.services.handlers)}
        return encode_response(schema, correlation_id, build(schema.response, body))

    async def internal_request(self, api_key: int, version: int, body: dict[str, Any], client_id: str) -> dict[str, Any]:
        """A request from another broker of the cluster, in process (a follower's Fetch): kio's
        request built from `body`, handled by this broker's handler as one from a client is (the
        same read path), its response body returned. BrokerUnavailable when this broker is stopped."""
        if self.stopped:
            raise BrokerUnavailable(f"broker {self.node_id} is stopped")
        handler = self.services.handlers[api_key]
        schema = api_schema(api_key, version)
        request = build(schema.request, body)
        conn = Connection(peer=f"broker:{client_id}", listener="REPLICATION", client_id=client_id,
                          inter_broker=True)
        header = RequestHeader(api_key, version, 0, client_id, 0)
        ctx = RequestContext(self.services, conn, header, schema, handler, self.clock.monotonic())
        with broker_log_context(self.node_id):
            reply = await handler.handle(ctx, request)
        if self.stopped:
            raise BrokerUnavailable(f"broker {self.node_id} stopped while answering")
        return reply.body if reply is not None else {}

    # ---- conveniences for tests and tools (the handlers reach these through their context) ----

    def append_checked(self, topic: str, partition: int, log: PartitionLog, header: BatchHeader,
                       records: bytes | memoryview, now_ms: int) -> AppendOutcome:
        return self.replicas.append_checked(topic, partition, log, header, records, now_ms)

    def write_txn_markers(self, markers: Iterable[TxnMarker | tuple]) -> list[MarkerResult]:
        """WriteTxnMarkers in process: COMMIT/ABORT markers to partitions (minibroker.replica_manager)."""
        return self.replicas.write_txn_markers(markers)


__all__ = ["Broker", "Connection", "ProtocolError", "RequestContext", "Response", "StartupError"]
