"""The cluster as this broker sees it: its brokers, who leads and replicates each partition, the
reassignments in progress, and the KRaft quorum.

minibroker is one combined KRaft node (broker and controller in one process): every partition has
this broker as its only replica, its leader and its preferred leader, in leader epoch 0; no
reassignment is ever in progress; the quorum is one voter, this node, which leads it. Handlers of
the admin APIs that move leaders and replicas (ElectLeaders, Alter/ListPartitionReassignments,
DescribeQuorum), and Metadata, DescribeCluster and FindCoordinator, ask here rather than assuming
this node, so that replication across several brokers changes these answers in one place.

A view is built from what it reads: the node id, the cluster id, the topics (the broker's
LogManager) and the addresses clients reach this broker at (`BrokerEndpoints`, filled in once the
listeners are bound).

The metadata log (`__cluster_metadata`) is not kept on disk; its offsets are modelled: the log
holds one record per topic, per partition and per topic config override of the state at start,
plus one per change since (a topic created, deleted, or its configs or partition count changed),
which is how a KRaft controller's log grows with the same changes. So the quorum's high watermark
moves when and only when the metadata does (Kafka's also moves with its periodic no-op records).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable

from minibroker.quotas.cluster import Cluster, Node, PartitionInfo

if TYPE_CHECKING:
    from minibroker.config import Listener
    from minibroker.storage.manager import LogManager

METADATA_TOPIC = "__cluster_metadata"
METADATA_PARTITION = 0
QUORUM_LEADER_EPOCH = 1  # a freshly formatted KRaft node elects itself leader in epoch 1


@dataclass(frozen=True, slots=True)
class PartitionAssignment:
    """One partition's replicas and leadership, as the controller records them."""

    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    adding_replicas: tuple[int, ...] = ()
    removing_replicas: tuple[int, ...] = ()

    @property
    def preferred_leader(self) -> int:
        return self.replicas[0]

    @property
    def has_preferred_leader(self) -> bool:
        return self.leader == self.preferred_leader

    @property
    def reassignment_in_progress(self) -> bool:
        return bool(self.adding_replicas or self.removing_replicas)


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
    def __init__(self, node_id: int, cluster_id: str, topics: LogManager, endpoints: BrokerEndpoints) -> None:
        self.node_id = node_id
        self.cluster_id = cluster_id
        self._topics = topics
        self.endpoints = endpoints
        self._image = self._metadata_image()
        # The state at start, as a snapshot of the metadata log would hold it.
        self._metadata_end_offset = sum(1 + n + len(o) for _, n, o in self._image.values())

    @property
    def controller_id(self) -> int:
        return self.node_id  # a combined node is its own (active) controller

    def broker_ids(self) -> tuple[int, ...]:
        return (self.node_id,)

    def is_registered(self, node_id: int) -> bool:
        return node_id in self.broker_ids()

    def broker_endpoint(self, listener: str | None = None) -> dict[str, Any]:
        """This broker as clients of `listener` must reach it (the first listener by default)."""
        host, port = self.endpoints.get(listener)
        return {"node_id": self.node_id, "broker_id": self.node_id, "host": host, "port": port, "rack": None}

    def brokers(self, listener: str | None = None) -> list[dict[str, Any]]:
        """Every registered broker as clients of `listener` reach it (Metadata's and
        DescribeCluster's list): this one."""
        return [self.broker_endpoint(listener)]

    def coordinator(self, listener: str | None = None) -> dict[str, Any]:
        """The broker that coordinates a group or a transactional id (FindCoordinator): this one,
        which holds the one partition of `__consumer_offsets` and of `__transaction_state`."""
        return self.broker_endpoint(listener)

    def listeners(self, node_id: int) -> dict[str, tuple[str, int]]:
        """A broker's advertised address per listener name (DescribeQuorum's nodes)."""
        return dict(self.endpoints.listeners) if node_id == self.node_id else {}

    def has_topic(self, topic: str) -> bool:
        return self._topics.topic(topic) is not None

    def partition(self, topic: str, partition: int) -> PartitionAssignment | None:
        """The partition's assignment, or None when the topic or partition does not exist."""
        info = self._topics.topic(topic)
        if info is None or not 0 <= partition < info.num_partitions:
            return None
        node = self.node_id
        return PartitionAssignment(leader=node, leader_epoch=0, replicas=(node,), isr=(node,))

    def reassigning_partitions(self) -> dict[tuple[str, int], PartitionAssignment]:
        """The partitions with a reassignment in progress: none on one broker."""
        return {}

    def quorum(self) -> QuorumState:
        """The metadata quorum: one voter, this node, leading; no observers (a combined node's
        broker is the voter itself)."""
        end = self._observe_metadata()
        me = QuorumReplica(self.node_id, end)
        return QuorumState(self.node_id, QUORUM_LEADER_EPOCH, end, (me,), ())

    def _observe_metadata(self) -> int:
        """Advance the modelled metadata log by the changes since the last look (module docstring)."""
        image = self._metadata_image()
        for topic_id, (_, partitions, overrides) in image.items():
            if topic_id not in self._image:
                self._metadata_end_offset += 1 + partitions + len(overrides)
            elif self._image[topic_id] != image[topic_id]:
                self._metadata_end_offset += 1
        self._metadata_end_offset += sum(1 for topic_id in self._image if topic_id not in image)
        self._image = image
        return self._metadata_end_offset

    def snapshot(self) -> Cluster:
        """The cluster as an immutable value, as the quota callback receives it (KIP-257): the
        brokers with the addresses clients reach them at, and every partition's leader and replicas."""
        endpoint = self.broker_endpoint()
        nodes = [Node(node_id, endpoint["host"], endpoint["port"], endpoint["rack"])
                 for node_id in self.broker_ids() if node_id == endpoint["node_id"]]
        partitions = []
        for info in self._topics.topics():
            for index in range(info.num_partitions):
                assignment = self.partition(info.name, index)
                if assignment is not None:
                    partitions.append(PartitionInfo(info.name, index, assignment.leader, assignment.replicas))
        return Cluster.of(self.cluster_id, nodes, partitions, controller=self.controller_id)

    def _metadata_image(self) -> dict:
        return {
            info.topic_id: (info.name, info.num_partitions, tuple(sorted(info.overrides.items())))
            for info in self._topics.topics()
        }
