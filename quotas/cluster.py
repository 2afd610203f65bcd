"""What the quota callback is told about the cluster (KIP-257's `updateClusterMetadata(Cluster)`).

Kafka hands the callback its `org.apache.kafka.common.Cluster`: the brokers (nodes), every topic's
partitions with their leader and replicas, the controller and the cluster id. `Cluster` here is the
same information as an immutable value, built by the broker shell at start and whenever topics,
partitions, their leaders or the brokers change (minibroker.cluster.ClusterView.snapshot); callbacks
never see broker internals. Topics being deleted are not in it (as in Kafka).

On a cluster every broker has its own callback, and each is handed the whole cluster: a partition
names its leader by node id (None while it has none), so a callback computes "the partitions this
broker leads" from its own `node.id`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

__all__ = ["Cluster", "Node", "PartitionInfo"]


@dataclass(frozen=True, slots=True)
class Node:
    """A broker: its id and the address clients reach it at (Kafka's `Node`)."""

    id: int
    host: str
    port: int
    rack: str | None = None


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    """One partition: its leader's node id (None: no leader) and replicas (Kafka's `PartitionInfo`)."""

    topic: str
    partition: int
    leader: int | None
    replicas: tuple[int, ...] = ()


@dataclass(frozen=True)
class Cluster:
    """An immutable view of the cluster's brokers and partitions.

    Lookups mirror Kafka's `Cluster`: `topics()`, `partitions_for_topic`, `partitions_for_node`
    (the partitions a node leads), `leader_for`, `node`. Equal views compare equal, so a callback
    can tell whether anything it cares about changed.
    """

    cluster_id: str
    nodes: tuple[Node, ...]
    partitions: tuple[PartitionInfo, ...]
    controller: int | None = None
    _by_topic: dict[str, tuple[PartitionInfo, ...]] = field(init=False, repr=False, compare=False)
    _nodes_by_id: dict[int, Node] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        by_topic: dict[str, list[PartitionInfo]] = {}
        for info in self.partitions:
            by_topic.setdefault(info.topic, []).append(info)
        object.__setattr__(self, "_by_topic", {
            topic: tuple(sorted(infos, key=lambda p: p.partition)) for topic, infos in by_topic.items()
        })
        object.__setattr__(self, "_nodes_by_id", {node.id: node for node in self.nodes})

    @classmethod
    def of(cls, cluster_id: str, nodes: Iterable[Node], partitions: Iterable[PartitionInfo],
           controller: int | None = None) -> Cluster:
        """Build from any iterables, in a canonical order (nodes by id, partitions by topic and index)."""
        return cls(
            cluster_id,
            tuple(sorted(nodes, key=lambda n: n.id)),
            tuple(sorted(partitions, key=lambda p: (p.topic, p.partition))),
            controller,
        )

    def topics(self) -> frozenset[str]:
        return frozenset(self._by_topic)

    def partitions_for_topic(self, topic: str) -> tuple[PartitionInfo, ...]:
        return self._by_topic.get(topic, ())

    def partitions_for_node(self, node_id: int) -> tuple[PartitionInfo, ...]:
        """The partitions `node_id` leads."""
        return tuple(p for p in self.partitions if p.leader == node_id)

    def leader_for(self, topic: str, partition: int) -> Node | None:
        for info in self._by_topic.get(topic, ()):
            if info.partition == partition:
                return None if info.leader is None else self._nodes_by_id.get(info.leader)
        return None

    def node(self, node_id: int) -> Node | None:
        return self._nodes_by_id.get(node_id)
