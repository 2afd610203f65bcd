"""What a transaction marker is: `TxnMarker`, one WritableTxnMarker of WriteTxnMarkers (Kafka's key
27), and `MarkerResult`, its error code per partition. minibroker.replica_manager writes them
(`ReplicaManager.write_txn_markers`, in process; the module docstring there lists the codes); the
transaction coordinator is given its `write_markers`, and WriteTxnMarkers itself is served too
(handlers/write_txn_markers.py), as Kafka serves it to brokers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from minibroker.protocol.errors import ErrorCode

__all__ = ["MarkerResult", "TopicPartition", "TxnMarker"]

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
