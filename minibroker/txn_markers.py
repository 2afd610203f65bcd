"""The data side of transactions: what a transaction marker is, and what Produce asks the
transaction coordinator before it appends a transactional batch.

* `TxnMarker` / `MarkerResult`: one WritableTxnMarker of WriteTxnMarkers (Kafka's key 27) and its
  error code per partition. minibroker.replica_manager writes them (`ReplicaManager.write_txn_markers`,
  in process; the module docstring there lists the codes); the transaction coordinator is given its
  `write_markers`, and WriteTxnMarkers itself is served too (handlers/write_txn_markers.py), as Kafka
  serves it to brokers.

* `TransactionVerifier`: KIP-890 part 1's verification that a transactional batch's partition was
  added to the producer's ongoing transaction:
  `verify_produce(transactional_id, producer_id, producer_epoch, topic, partition, version) -> ErrorCode`
  (`version`: the Produce request's, which decides the code of a partition not in the transaction).
  The transaction coordinator is one; `AllowAllTransactions` answers NONE to every batch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence

from minibroker.protocol.errors import ErrorCode

__all__ = ["AllowAllTransactions", "MarkerResult", "TopicPartition", "TxnMarker", "TransactionVerifier"]

TopicPartition = tuple[str, int]
MarkerResult = dict[TopicPartition, ErrorCode]


@dataclass(frozen=True, slots=True)
class TxnMarker:
    """One WritableTxnMarker: the producer, its epoch, the coordinator's epoch, COMMIT (True) or
    ABORT (False), and the partitions to write it to."""

    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    commit: bool
    partitions: Sequence[TopicPartition]


class TransactionVerifier(Protocol):
    def verify_produce(self, transactional_id: str | None, producer_id: int, producer_epoch: int,
                       topic: str, partition: int, version: int) -> ErrorCode: ...


class AllowAllTransactions:
    """Every transactional batch passes (no coordinator checks)."""

    def verify_produce(self, transactional_id: str | None, producer_id: int, producer_epoch: int,
                       topic: str, partition: int, version: int) -> ErrorCode:
        return ErrorCode.none
