"""What the coordinators' internal topics share (`__consumer_offsets`, `__transaction_state`): a log of
key/value records replayed from its start at load (the last record of a key wins, a null value
deletes it), appended to in uncompressed v2 batches.

Kafka keeps coordinator state in compacted internal topics and rebuilds its caches by replaying them
(CoordinatorLoaderImpl, TransactionStateManager.loadTransactionMetadata). So does this broker: the
topics are ordinary compacted topics, cleaned by the log cleaner (minibroker.storage.cleaner), which keeps the
last record of each key, so a cleaned log replays to the same state. A record the replay cannot
read (damage) is skipped and logged; it stays in the log unless a later record of its key
supersedes it, where a person can still recover it.

No I/O beyond the PartitionLog given, no clock (callers pass `now_ms`), no trio.
"""

from __future__ import annotations

import logging
import struct
from typing import TYPE_CHECKING, Any, Callable, Sequence, TypeVar

from construct import ConstructError

from minibroker.protocol.records import BatchHeader, decode_records, encode_batch, iter_headers
from minibroker.storage.errors import InvalidReplicationFactorError

if TYPE_CHECKING:
    from minibroker.storage.log import PartitionLog
    from minibroker.storage.manager import LogManager

__all__ = ["INTERNAL_TOPIC_CONFIGS", "CoordinatorLog", "Record"]

log = logging.getLogger(__name__)

Record = tuple[bytes | None, bytes | None]

# Kafka's settings of its internal topics (offsets.topic.segment.bytes and
# transaction.state.log.segment.bytes are 100 MiB). A compact-only topic loses nothing to time or
# size retention (minibroker.storage.retention).
INTERNAL_TOPIC_CONFIGS = {
    "cleanup.policy": "compact",
    "segment.bytes": str(100 * 1024 * 1024),
}

# Batches written here stay well under the default max.message.bytes.
MAX_RECORDS_PER_BATCH = 2000
READ_CHUNK = 1 << 20


Store = TypeVar("Store", bound="CoordinatorLog")


class CoordinatorLog:
    """A store over one partition of an internal topic. Subclasses say how a record changes their
    state (`_replay`, `_reset`)."""

    topic = ""
    topic_configs: dict[str, str] = {}
    # Created at the first write rather than at open (Kafka creates __transaction_state when the
    # first transactional id looks for its coordinator): a broker never used for it has no such topic.
    created_lazily = False

    @classmethod
    def open(cls: type[Store], logs: LogManager, now_ms: int, **options: Any) -> Store:
        """Open (creating it now, or at the first write when `created_lazily`) the store's topic in
        `logs`, and replay it. `options` go to the store's constructor."""
        if logs.topic(cls.topic) is None:
            if not cls.created_lazily:
                try:
                    logs.create_topic(cls.topic, 1, cls.topic_configs, now_ms)
                except InvalidReplicationFactorError as exc:
                    # Kafka's auto-creation on a cluster smaller than the topic's replication
                    # factor: not created now; tried again when a client asks for its coordinator.
                    log.warning("Auto topic creation failed for %s with error 'INVALID_REPLICATION_FACTOR': %s",
                                cls.topic, exc)
            if logs.topic(cls.topic) is None:
                store = cls(None, **options)
                store._logs = logs
                return store
        store = cls(logs.log(cls.topic, 0), **options)
        store.load()
        return store

    def __init__(self, log: PartitionLog | None = None) -> None:
        self.log = log
        self.skipped_records = 0  # records that could not be decoded at load
        self.replay_complete = True  # False when the load skipped or stopped short of anything
        self._logs: LogManager | None = None  # where to create the topic at the first write
        # Called before each append; it may refuse it by raising (a coordinator on a cluster:
        # NotEnoughReplicasError under min.insync.replicas, as Kafka's acks=-1 append).
        self.before_append: Callable[[], None] | None = None

    # -- what a subclass defines ------------------------------------------------------------------

    def _reset(self) -> None:
        raise NotImplementedError

    def _replay(self, key: bytes, value: bytes | None) -> None:
        """Apply one record; ConstructError or ValueError for one that cannot be read."""
        raise NotImplementedError

    # -- loading ----------------------------------------------------------------------------------

    def load(self) -> None:
        self._reset()
        self.skipped_records = 0
        self.replay_complete = True
        if self.log is None:
            return
        position = self.log.log_start_offset
        while position < self.log.log_end_offset:
            data = self.log.read(position, READ_CHUNK)
            if not data:
                break
            advanced = False
            for header in iter_headers(data):
                if header.last_offset < position:
                    continue
                batch = memoryview(data)[header.position : header.position + header.size]
                self._replay_batch(batch, header)
                position = header.last_offset + 1
                advanced = True
            if not advanced:
                log.error("%s: cannot read past offset %d; stopping the replay", self.topic, position)
                self.replay_complete = False
                break
        if self.skipped_records:
            self.replay_complete = False
        if not self.replay_complete:
            log.error("%s: the replay was incomplete (%d unreadable record(s)); they stay in the log "
                      "unless a later record of the same key supersedes them", self.topic, self.skipped_records)

    def _replay_batch(self, batch: memoryview, header: BatchHeader) -> None:
        records: list[tuple[bytes, bytes | None]] = []
        try:
            for _, _, key, value in decode_records(batch):
                if key is None:
                    raise ValueError("record without a key")
                records.append((key, value))
        except (ValueError, struct.error) as exc:
            log.warning("%s: skipping unreadable batch at offset %d: %s", self.topic, header.base_offset, exc)
            self.skipped_records += 1
            return
        self._replay_records(records, header)

    def _replay_records(self, records: list[tuple[bytes, bytes | None]], header: BatchHeader) -> None:
        for key, value in records:
            try:
                self._replay(key, value)
            except (ConstructError, ValueError) as exc:
                self.skipped_records += 1
                log.warning("%s: skipping unreadable record near offset %d: %s",
                            self.topic, header.base_offset, exc)

    # -- writing ----------------------------------------------------------------------------------

    def _append(self, records: Sequence[Record], now_ms: int) -> None:
        if self.log is None and self._logs is not None and records:
            if self._logs.topic(self.topic) is None:
                self._logs.create_topic(self.topic, 1, self.topic_configs, now_ms)
            self.log = self._logs.log(self.topic, 0)
        if self.log is None or not records:
            return
        if self.before_append is not None:
            self.before_append()
        for start in range(0, len(records), MAX_RECORDS_PER_BATCH):
            chunk = list(records[start : start + MAX_RECORDS_PER_BATCH])
            self.log.append(encode_batch(chunk, now_ms), now_ms)
