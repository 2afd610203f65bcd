"""Durable transaction coordinator state: the internal `__transaction_state` topic, written and read back.

Kafka's TransactionStateManager appends every transition of a transactional id (Empty, Ongoing with
its partitions, PrepareCommit/PrepareAbort, CompleteCommit/CompleteAbort) to `__transaction_state`
before it answers, and rebuilds its cache at start-up by replaying the topic, the last record of each
transactional id winning (a tombstone, once the id expired, deletes it). This does the same on one
partition of the broker's own storage (`__transaction_state-0`, created at the first write, as Kafka
creates the topic when it is first needed), with Kafka's record layouts
(storage/transaction_records.py) in uncompressed v2 batches (storage/coordinator_log.py), with
Kafka's topic settings (a compacted topic, cleaned by the log cleaner; transaction.state.log.segment.bytes
100 MiB, no compression).

No clock, no trio: callers pass `now_ms`.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from minibroker.storage.coordinator_log import INTERNAL_TOPIC_CONFIGS, CoordinatorLog
from minibroker.storage.transaction_records import (
    TxnRecord,
    parse_transaction_key,
    parse_transaction_value,
    transaction_key,
    transaction_value,
)

if TYPE_CHECKING:
    from minibroker.storage.log import PartitionLog

__all__ = ["TOPIC", "TOPIC_CONFIGS", "TransactionStore"]

log = logging.getLogger(__name__)

TOPIC = "__transaction_state"
TOPIC_CONFIGS = {**INTERNAL_TOPIC_CONFIGS, "compression.type": "uncompressed"}  # Kafka's ENFORCED_COMPRESSION


class TransactionStore(CoordinatorLog):
    """`records[transactional_id]`: each id's last persisted state."""

    topic = TOPIC
    topic_configs = TOPIC_CONFIGS
    created_lazily = True

    def __init__(self, log: PartitionLog | None = None) -> None:
        super().__init__(log)
        self.records: dict[str, TxnRecord] = {}

    def _reset(self) -> None:
        self.records.clear()

    def _replay(self, key: bytes, value: bytes | None) -> None:
        transactional_id = parse_transaction_key(key)
        if value is None:
            self.records.pop(transactional_id, None)
        else:
            self.records[transactional_id] = parse_transaction_value(value)

    def write(self, transactional_id: str, record: TxnRecord, now_ms: int, value_version: int = 0) -> None:
        """Persist one transition (raises OSError when the log cannot take it: nothing changed).
        `value_version`: TransactionLogValue's, 1 once `transaction.version` is 2 (as Kafka's
        TransactionVersion.transactionLogValueVersion), else 0."""
        self._append([(transaction_key(transactional_id), transaction_value(record, value_version))], now_ms)
        self.records[transactional_id] = record

    def delete(self, transactional_ids: list[str], now_ms: int) -> None:
        """Tombstones for expired transactional ids."""
        self._append([(transaction_key(tid), None) for tid in transactional_ids], now_ms)
        for tid in transactional_ids:
            self.records.pop(tid, None)
