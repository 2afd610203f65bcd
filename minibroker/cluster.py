"""The cluster as a broker sees it: a view of the controller's metadata image
(minibroker.storage.metadata_image, Kafka's MetadataImage), and of where each broker is reached.

Every question a handler asks about the cluster is answered here, from the image: its brokers (the
registered, unfenced ones, each with its rack and the addresses of its listeners), who leads and
replicates each partition and in which leader epoch, the reassignments in progress, the controller
and the KRaft quorum, the coordinators. Metadata, DescribeCluster, FindCoordinator, CreateTopics
(through the controller), DescribeQuorum, ElectLeaders and the partition reassignment APIs read it.

The quorum is the controller's: one voter (the controller's node) leading the metadata log in the
epoch the log's `quorum-state` holds, its log end offset the log's, which is also the high
watermark (every record is committed when it is written); the other brokers are observers, caught
up (they read the same image). The addresses of the brokers are not metadata: they are set as each
broker binds its listeners (port 0 picks a port), in `BrokerEndpoints` kept per node.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable, Mapping

from minibroker.quotas.cluster import Cluster, Node, PartitionInfo
from minibroker.storage.metadata_image import PartitionRegistration
from minibroker.storage.metadata_log import METADATA_PARTITION, METADATA_TOPIC

if TYPE_CHECKING:
    from minibroker.config import Listener
    from minibroker.storage.controller import Controller
    from minibroker.storage.manager import LogManager

__all__ = ["BrokerEndpoints", "ClusterView", "METADATA_PARTITION", "METADATA_TOPIC", "PartitionAssignment",
           "QuorumReplica", "QuorumState"]

# One partition's replicas and leadership, as the controller records them.
PartitionAssignment = PartitionRegistration


@dataclass(frozen=True, slots=True)
class QuorumReplica:
    replica_id: int
    log_end_offset: int


@dataclass(frozen=True, slots=True)
class QuorumState:
    leader_id: int
    leader_epoch: int
    high_watermark: int
    voters: tuple[QuorumReplica, ...]
    observers: tuple[QuorumReplica, ...]


class BrokerEndpoints:
    """Where clients of each listener reach one broker: the advertised address (advertised.listeners,
    else the bound one), set as each listener is bound (port 0 picks a port). The first listener
    bound is the default."""

    def __init__(self, advertised: Iterable[Listener] = ()) -> None:
        self._advertised = {entry.name: (entry.host, entry.port) for entry in advertised}
        self.listeners: dict[str, tuple[str, int]] = {}  # name -> advertised (host, port)
        self.bound: dict[str, tuple[str, int]] = {}  # name -> the address actually bound
        self.default: tuple[str, int] = ("127.0.0.1", 0)

    def set(self, name: str, host: str, port: int) -> tuple[str, int]:
        """Record a bound listener; returns the address advertised for it."""
        self.bound[name] = (host, port)
        if name in self._advertised:
            endpoint = self._advertised[name]
        else:
            endpoint = (host if host not in ("0.0.0.0", "::", "") else "127.0.0.1", port)
        self.listeners[name] = endpoint
        if len(self.listeners) == 1:
            self.default = endpoint
        return endpoint

    def get(self, listener: str | None) -> tuple[str, int]:
        """The address for clients of `listener` (the default listener's when unknown or None)."""
        return self.listeners.get(listener or "", self.default)


class ClusterView:
    """One broker's view of the cluster (module docstring). `endpoints`: every broker's addresses by
    node id (this broker's among them)."""

    def __init__(self, node_id: int, cluster_id: str, controller: Controller, topics: LogManager,
                 endpoints: Mapping[int, BrokerEndpoints]) -> None:
        self.node_id = node_id
        self.cluster_id = cluster_id
        self.controller = controller
        self._topics = topics
        self._endpoints = endpoints

    @property
    def endpoints(self) -> BrokerEndpoints:
        """This broker's addresses."""
        return self._endpoints[self.node_id]

    @property
    def image(self):
        return self.controller.image

    @property
    def controller_id(self) -> int:
        """The controller as Metadata and DescribeCluster name it: the controller's node while it
        is a broker that is up, else (its broker stopped) the first broker that is up; a KRaft
        broker forwards what it is sent there, so any broker up answers."""
        brokers = self.broker_ids()
        controller = self.controller.node_id
        return controller if controller in brokers or not brokers else brokers[0]

    def broker_ids(self) -> tuple[int, ...]:
        """The brokers that are up: registered, not fenced (this one always: it is answering)."""
        alive = set(self.image.cluster.unfenced())
        alive.add(self.node_id)
        return tuple(sorted(alive))

    def is_registered(self, node_id: int) -> bool:
        return node_id in self.image.cluster.brokers or node_id == self.node_id

    def rack(self, node_id: int) -> str | None:
        registration = self.image.cluster.brokers.get(node_id)
        return registration.rack if registration is not None else None

    def broker_endpoint(self, listener: str | None = None, node_id: int | None = None) -> dict[str, Any]:
        """A broker (this one by default) as clients of `listener` must reach it."""
        node = self.node_id if node_id is None else node_id
        endpoints = self._endpoints.get(node)
        host, port = endpoints.get(listener) if endpoints is not None else ("", -1)
        return {"node_id": node, "broker_id": node, "host": host, "port": port, "rack": self.rack(node)}

    def brokers(self, listener: str | None = None) -> list[dict[str, Any]]:
        """Every broker that is up, as clients of `listener` reach it (Metadata's and
        DescribeCluster's list)."""
        return [self.broker_endpoint(listener, node) for node in self.broker_ids()]

    def coordinator_partition(self, topic: str, key: str) -> tuple[int, int]:
        """The partition of the coordinators' topic (`__consumer_offsets` for a group,
        `__transaction_state` for a transactional id) that holds `key`, as Kafka picks it
        (GroupCoordinatorService.partitionFor, TransactionStateManager.partitionFor): the absolute
        value of the key's Java hashCode modulo the topic's partition count; (partition, count), the
        count 0 while the topic does not exist yet."""
        image = self.image.topic(topic)
        count = image.num_partitions if image is not None else 0
        return (java_abs(java_string_hash(key)) % count if count else 0), count

    def coordinator(self, listener: str | None = None, topic: str | None = None, key: str = "") -> dict[str, Any]:
        """The broker that coordinates a group or a transactional id (FindCoordinator): the leader
        of the key's partition of `topic`; this broker while the topic does not exist yet (it is
        created by the first coordinator that needs it). node_id -1 when the partition has no
        leader up (COORDINATOR_NOT_AVAILABLE)."""
        if topic is None:
            return self.broker_endpoint(listener)
        partition, count = self.coordinator_partition(topic, key)
        if not count:
            return self.broker_endpoint(listener)
        registration = self.image.partition(topic, partition)
        leader = registration.leader if registration is not None else -1
        if leader < 0 or leader not in self.broker_ids():
            return {"node_id": -1, "broker_id": -1, "host": "", "port": -1, "rack": None}
        return self.broker_endpoint(listener, leader)

    def listeners(self, node_id: int) -> dict[str, tuple[str, int]]:
        """A broker's advertised address per listener name (DescribeQuorum's nodes)."""
        endpoints = self._endpoints.get(node_id)
        return dict(endpoints.listeners) if endpoints is not None else {}

    def has_topic(self, topic: str) -> bool:
        return self.image.topic(topic) is not None

    def partition(self, topic: str, partition: int) -> PartitionAssignment | None:
        """The partition's assignment, or None when the topic or partition does not exist."""
        return self.image.partition(topic, partition)

    def reassigning_partitions(self) -> dict[tuple[str, int], PartitionAssignment]:
        """The partitions with a reassignment in progress."""
        found = {}
        for name, topic in self.image.topics.by_name.items():
            for index, registration in topic.partitions.items():
                if registration.reassignment_in_progress:
                    found[(name, index)] = registration
        return found

    def quorum(self) -> QuorumState:
        """The metadata quorum: one voter, the controller, leading; the other brokers that are up
        observe it, caught up (module docstring)."""
        metadata = self.controller.metadata
        end = metadata.end_offset
        leader = self.controller.node_id
        observers = tuple(QuorumReplica(node, end) for node in self.broker_ids() if node != leader)
        return QuorumState(leader, metadata.leader_epoch, end, (QuorumReplica(leader, end),), observers)

    def snapshot(self) -> Cluster:
        """The cluster as an immutable value, as the quota callback receives it (KIP-257): the
        brokers with the addresses clients reach them at, and every partition's leader and replicas."""
        nodes = []
        for node_id in self.broker_ids():
            endpoint = self.broker_endpoint(None, node_id)
            nodes.append(Node(node_id, endpoint["host"], endpoint["port"], endpoint["rack"]))
        partitions = []
        for name in sorted(self.image.topics.by_name):
            topic = self.image.topics.by_name[name]
            for index in sorted(topic.partitions):
                registration = topic.partitions[index]
                partitions.append(PartitionInfo(name, index, registration.leader, registration.replicas))
        return Cluster.of(self.cluster_id, nodes, partitions, controller=self.controller_id)


def java_string_hash(text: str) -> int:
    """Java's String.hashCode: 31 * h + each UTF-16 code unit, as a signed 32-bit int."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def java_abs(n: int) -> int:
    """Kafka's Utils.abs: the absolute value, 0 for Integer.MIN_VALUE."""
    return 0 if n == -(1 << 31) else abs(n)
