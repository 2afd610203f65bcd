"""The data side of transactions (issue 14), where the transaction coordinator meets the logs.

Two seams, the coordinator's to use (minibroker/transactions/ builds it):

* `write_txn_markers(broker, markers)` (also `Broker.write_txn_markers(markers)`): WriteTxnMarkers
  semantics (Kafka's WriteTxnMarkersRequest, key 27, in process): for each marker, a COMMIT or ABORT
  control batch appended to each of its partitions through the normal append path (the partition's
  producer state updated, the log end advanced, index entries written; an ABORT of a transaction that
  wrote data to the partition also goes into the segment's `.txnindex`), and the fetches waiting on
  the partition woken (a read_committed fetch waits for the last stable offset to move). Synchronous:
  it waits for nothing but the file writes (as every append here), so the coordinator may call it
  from any trio task. Each result maps (topic, partition) to an ErrorCode:
    NONE                            the marker is in the log;
    UNKNOWN_TOPIC_OR_PARTITION      no such partition;
    INVALID_PRODUCER_EPOCH          the marker's producer epoch is older than the partition's producer
                                    state (Kafka's ProducerAppendInfo.appendEndTxnMarker);
    TRANSACTION_COORDINATOR_FENCED  its coordinator epoch is older than the last marker's;
    KAFKA_STORAGE_ERROR             the disk failed (nothing written): retry later.
  A marker of a producer with no transaction open on the partition is still written (Kafka writes
  it too) and changes neither the last stable offset nor the index.

* `Broker.transactions`: what Produce asks before appending a transactional batch, KIP-890 part 1's
  verification that the partition was added to the producer's ongoing transaction:
  `verify_produce(transactional_id, producer_id, producer_epoch, topic, partition, version) -> ErrorCode`
  (`version`: the Produce request's, which decides the code of a partition not in the transaction).
  `AllowAllTransactions`, the default until the coordinator replaces it, answers NONE.

WriteTxnMarkers itself is also served (handlers/write_txn_markers.py), as Kafka serves it to brokers.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable, Protocol, Sequence

from minibroker.handlers.common import error_answer
from minibroker.protocol.errors import ErrorCode
from minibroker.protocol.records import encode_control_batch, read_header
from minibroker.protocol.records.codec import CONTROL_ABORT, CONTROL_COMMIT, ControlRecord
from minibroker.storage.producer_state.txns import AbortedTxn

if TYPE_CHECKING:
    from minibroker.broker import Broker

__all__ = ["AllowAllTransactions", "MarkerResult", "TxnMarker", "TransactionVerifier", "write_txn_markers"]

log = logging.getLogger(__name__)

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
    """The default `Broker.transactions`: every transactional batch passes (no coordinator checks)."""

    def verify_produce(self, transactional_id: str | None, producer_id: int, producer_epoch: int,
                       topic: str, partition: int, version: int) -> ErrorCode:
        return ErrorCode.none


def write_txn_markers(broker: Broker, markers: Iterable[TxnMarker | tuple]) -> list[MarkerResult]:
    """Write each marker to each of its partitions; one result per marker, in order (see the module
    docstring). A marker may be given as a plain tuple in TxnMarker's field order."""
    results = []
    now_ms = broker.clock.now_ms()
    for marker in markers:
        if not isinstance(marker, TxnMarker):
            marker = TxnMarker(*marker)
        result: MarkerResult = {}
        for topic, partition in marker.partitions:
            result[(topic, partition)] = write_marker(broker, marker, topic, partition, now_ms)
        results.append(result)
    return results


def write_marker(broker: Broker, marker: TxnMarker, topic: str, partition: int, now_ms: int) -> ErrorCode:
    """Append one marker to one partition (see `write_txn_markers`)."""
    plog = broker.logs.log(topic, partition)
    if plog is None:
        return ErrorCode.unknown_topic_or_partition
    try:
        psm = broker.producer_states.manager(topic, partition, plog, now_ms)
        verdict = psm.prepare_marker(marker.producer_id, marker.producer_epoch, marker.coordinator_epoch)
        if not verdict.should_append:
            log.info("%s-%d: %s marker refused: %s", topic, partition,
                     "COMMIT" if marker.commit else "ABORT", verdict.message)
            return ErrorCode(verdict.error_code)
        batch = encode_control_batch(marker.producer_id, marker.producer_epoch, marker.coordinator_epoch,
                                     marker.commit, now_ms)
        result = plog.append(batch, now_ms)
        completed, lso = psm.peek_marker(marker.producer_id, result.base_offset, not marker.commit)
        if completed is not None and completed.is_aborted:
            try:
                plog.append_aborted_txn(AbortedTxn(marker.producer_id, completed.first_offset,
                                                   result.base_offset, lso))
            except OSError:
                plog.truncate_to(result.base_offset)  # not indexed, so not written: the caller retries
                raise
        header = read_header(batch).at_offset(result.base_offset)
        control = ControlRecord(CONTROL_COMMIT if marker.commit else CONTROL_ABORT, marker.coordinator_epoch)
        psm.update(header, now_ms, control)
    except OSError as exc:
        code, _ = error_answer(broker, exc, f"{topic}-{partition}")
        return code
    broker.fetch_purgatory.check_and_complete((topic, partition))
    return ErrorCode.none

