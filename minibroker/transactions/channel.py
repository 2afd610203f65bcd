"""How the transaction coordinator reaches the other brokers of a cluster, in process (Kafka's
TransactionMarkerChannelManager and AddPartitionsToTxnManager), and where its partition of
`__transaction_state` lives (`placement`, minibroker.transactions.coordinator.Placement).

* Markers (`write_markers`): the partitions of a transaction are grouped by their leader (the
  controller's metadata, as the coordinator's broker sees it) and each leader gets one
  WriteTxnMarkers, handled by that broker's own handler (`Broker.internal_request`), the leaders
  in parallel. A broker that no longer leads a partition answers NOT_LEADER_OR_FOLLOWER for it, as
  does a partition without a leader up or a stopped broker: the coordinator sends those again
  (minibroker.transactions.coordinator). A partition of a topic that is gone is
  UNKNOWN_TOPIC_OR_PARTITION (dropped, as Kafka drops it). The coordinator's own broker gets its
  markers the same way.
* Verification (`forward`, KIP-890): a partition leader asks the coordinator's broker with an
  AddPartitionsToTxn v5 (verify_only for part 1, an add for transactions version 2), as Kafka's
  AddPartitionsToTxnManager does; a coordinator that is not up is COORDINATOR_NOT_AVAILABLE.
* Replication of the state (`wait_replicated`, `in_sync`): a write to `__transaction_state` is
  acknowledged once its high watermark passes it (acks=all); with one replica there is nothing to
  wait for.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Callable

import trio

from minibroker.protocol.errors import ErrorCode
from minibroker.replication import BrokerUnavailable
from minibroker.storage.transaction_store import TOPIC
from minibroker.transactions.coordinator import Placement
from minibroker.txn_markers import MarkerResult, TopicPartition

if TYPE_CHECKING:
    from minibroker.cluster import ClusterView
    from minibroker.replication import Replication
    from minibroker.storage.manager import LogManager

__all__ = ["TxnChannel"]

log = logging.getLogger(__name__)

ADD_PARTITIONS_TO_TXN, WRITE_TXN_MARKERS = 24, 27
TXN_PARTITION = (TOPIC, 0)


class TxnChannel:
    """One broker's side of it. `broker(node_id)`: the running broker of a node id, in process
    (None when stopped); this broker's own id gives this broker."""

    def __init__(self, node_id: int, cluster: ClusterView, logs: LogManager, replication: Replication,
                 broker: Callable[[int], Any]) -> None:
        self.node_id = node_id
        self.cluster = cluster
        self.logs = logs
        self.replication = replication
        self.broker = broker
        self.client_id = f"broker-{node_id}-txn"

    def placement(self) -> Placement:
        return Placement(self.node_id, self.leadership, self.wait_replicated, self.in_sync, self.forward)

    # -- __transaction_state ---------------------------------------------------------------------

    def leadership(self) -> tuple[int, int] | None:
        registration = self.cluster.partition(*TXN_PARTITION)
        if registration is None:
            return None
        leader = registration.leader
        if leader >= 0 and leader != self.node_id and leader not in self.cluster.broker_ids():
            leader = -1  # fenced: no coordinator until the controller elects another
        return leader, registration.leader_epoch

    def _replicated(self) -> bool:
        registration = self.cluster.partition(*TXN_PARTITION)
        return registration is not None and len(registration.replicas) > 1

    def in_sync(self) -> bool:
        plog = self.logs.log(*TXN_PARTITION)
        if plog is None or not self._replicated():
            return True
        return len(self.replication.isr(*TXN_PARTITION)) >= plog.config.min_insync_replicas

    async def wait_replicated(self, offset: int, timeout_ms: int) -> ErrorCode:
        if not self._replicated():
            return ErrorCode.none
        return await self.replication.wait_written(TXN_PARTITION, offset, timeout_ms)

    # -- to other brokers --------------------------------------------------------------------------

    async def _request(self, node: int, api_key: int, version: int, body: dict[str, Any]) -> dict[str, Any] | None:
        broker = self.broker(node)
        if broker is None:
            return None
        try:
            return await broker.internal_request(api_key, version, body, self.client_id)
        except BrokerUnavailable:
            return None

    async def forward(self, node: int, transactional_id: str, producer_id: int, producer_epoch: int,
                      partitions: list[TopicPartition], verify_only: bool
                      ) -> tuple[ErrorCode, dict[TopicPartition, ErrorCode]]:
        by_topic: dict[str, list[int]] = {}
        for topic, partition in partitions:
            by_topic.setdefault(topic, []).append(partition)
        body = {"transactions": [{
            "transactional_id": transactional_id, "producer_id": producer_id, "producer_epoch": producer_epoch,
            "verify_only": verify_only,
            "topics": [{"name": topic, "partitions": parts} for topic, parts in by_topic.items()]}]}
        reply = await self._request(node, ADD_PARTITIONS_TO_TXN, 5, body)
        if reply is None:
            return ErrorCode.coordinator_not_available, {}
        error = ErrorCode(reply.get("error_code", 0))
        answers: dict[TopicPartition, ErrorCode] = {}
        for txn in reply.get("results_by_transaction", ()):
            for topic in txn["topic_results"]:
                for row in topic["results_by_partition"]:
                    answers[(topic["name"], row["partition_index"])] = ErrorCode(row["partition_error_code"])
        return error, answers

    async def write_markers(self, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
                            partitions: list[TopicPartition]) -> MarkerResult:
        """One transaction's marker to each of its partitions' leaders (module docstring)."""
        result: MarkerResult = {}
        by_leader: dict[int, list[TopicPartition]] = {}
        for tp in partitions:
            registration = self.cluster.partition(*tp)
            if registration is None:
                result[tp] = ErrorCode.unknown_topic_or_partition
            elif registration.leader < 0:
                result[tp] = ErrorCode.not_leader_or_follower
            else:
                by_leader.setdefault(registration.leader, []).append(tp)

        async def send(node: int, tps: list[TopicPartition]) -> None:
            by_topic: dict[str, list[int]] = {}
            for topic, partition in tps:
                by_topic.setdefault(topic, []).append(partition)
            body = {"markers": [{
                "producer_id": producer_id, "producer_epoch": producer_epoch, "transaction_result": commit,
                "coordinator_epoch": coordinator_epoch,
                "topics": [{"name": topic, "partition_indexes": parts} for topic, parts in by_topic.items()]}]}
            reply = await self._request(node, WRITE_TXN_MARKERS, 1, body)
            answered: dict[TopicPartition, ErrorCode] = {}
            if reply is not None:
                for marker in reply.get("markers", ()):
                    for topic in marker["topics"]:
                        for row in topic["partitions"]:
                            answered[(topic["name"], row["partition_index"])] = ErrorCode(row["error_code"])
            for tp in tps:
                result[tp] = answered.get(tp, ErrorCode.not_leader_or_follower)

        if len(by_leader) == 1:
            [(node, tps)] = by_leader.items()
            await send(node, tps)
        elif by_leader:
            async with trio.open_nursery() as nursery:
                for node, tps in by_leader.items():
                    nursery.start_soon(send, node, tps)
        return result
