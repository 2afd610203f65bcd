"""What the coordinators' internal topics share (`__consumer_offsets`, `__transaction_state`): a log of
key/value records replayed from its start at load (the last record of a key wins, a null value
deletes it), appended to in uncompressed v2 batches, and compacted by the store itself.

Kafka keeps coordinator state in compacted internal topics and rebuilds its caches by replaying them
(CoordinatorLoaderImpl, TransactionStateManager.loadTransactionMetadata). There is no log cleaner in
this broker (cleanup.policy=compact is stored but acts as delete), so a store compacts itself: when
the log holds many more records than live keys, it rolls a new segment, rewrites the live state
there, and moves the log start past the old records (DeleteRecords), which deletes the old
segments. A crash half-way leaves the old records in place, and replaying them before the new copy
gives the same state. A replay that had to skip unreadable records (damage) never compacts: the
records it could not read stay in the log, where a person can still recover them.

No I/O beyond the PartitionLog given, no clock (callers pass `now_ms`), no trio.
"""

from __future__ import annotations

import logging
import struct
from typing import TYPE_CHECKING, Sequence, TypeVar

from construct import ConstructError

from protocol.records import BatchHeader, decode_records, encode_batch, iter_headers

if TYPE_CHECKING:
    from storage.log import PartitionLog
    from storage.manager import LogManager

__all__ = ["INTERNAL_TOPIC_CONFIGS", "CoordinatorLog", "Record"]

log = logging.getLogger(__name__)

Record = tuple[bytes | None, bytes | None]

# Kafka's settings of its internal topics (offsets.topic.segment.bytes and
# transaction.state.log.segment.bytes are 100 MiB), plus no time retention: without a cleaner, time
# retention would delete live state.
INTERNAL_TOPIC_CONFIGS = {
    "cleanup.policy": "compact",
    "retention.ms": "-1",
    "retention.bytes": "-1",
    "segment.bytes": str(100 * 1024 * 1024),
}

# Batches written here stay well under the default max.message.bytes.
MAX_RECORDS_PER_BATCH = 2000
# Compact when the log holds more than this many records beyond twice the live ones.
COMPACT_SLACK = 10_000
READ_CHUNK = 1 << 20


Store = TypeVar("Store", bound="CoordinatorLog")


class CoordinatorLog:
    """A store over one partition of an internal topic. Subclasses say how a record changes their
    state (`_replay`, `_reset`) and what the live state is (`live_record_list`)."""

    topic = ""
    topic_configs: dict[str, str] = {}
    # Created at the first write rather than at open (Kafka creates __transaction_state when the
    # first transactional id looks for its coordinator): a broker never used for it has no such topic.
    created_lazily = False

    @classmethod
    def open(cls: type[Store], logs: LogManager, now_ms: int) -> Store:
        """Open (creating it now, or at the first write when `created_lazily`) the store's topic in
        `logs`, replay it, compact it if due."""
        if logs.topic(cls.topic) is None:
            if cls.created_lazily:
                store = cls(None)
                store._logs = logs
                return store
            logs.create_topic(cls.topic, 1, cls.topic_configs, now_ms)
        store = cls(logs.log(cls.topic, 0))
        store.load()
        store.maybe_compact(now_ms)
        return store

    def __init__(self, log: PartitionLog | None = None) -> None:
        self.log = log
        self.records_in_log = 0  # records replayed or appended since the log start
        self.skipped_records = 0  # records that could not be decoded at load
        self.replay_complete = True  # False when the load skipped or stopped short of anything
        self._logs: LogManager | None = None  # where to create the topic at the first write

    # -- what a subclass defines ------------------------------------------------------------------

    def _reset(self) -> None:
        raise NotImplementedError

    def _replay(self, key: bytes, value: bytes | None) -> None:
        """Apply one record; ConstructError or ValueError for one that cannot be read."""
        raise NotImplementedError

    def live_record_list(self) -> list[Record]:
        """The records that rewrite the live state (what a compaction keeps)."""
        raise NotImplementedError

    def live_records(self) -> int:
        raise NotImplementedError

    def can_compact(self) -> bool:
        """False while the state holds something the log alone carries (pending transactions)."""
        return True

    # -- loading ----------------------------------------------------------------------------------

    def load(self) -> None:
        self._reset()
        self.records_in_log = 0
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
            log.error("%s: the replay was incomplete (%d unreadable record(s)); the log is left as it "
                      "is (no compaction) so that nothing more is lost", self.topic, self.skipped_records)

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
            self.records_in_log += 1
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
        for start in range(0, len(records), MAX_RECORDS_PER_BATCH):
            chunk = list(records[start : start + MAX_RECORDS_PER_BATCH])
            self.log.append(encode_batch(chunk, now_ms), now_ms)
            self.records_in_log += len(chunk)

    # -- compaction -------------------------------------------------------------------------------

    def maybe_compact(self, now_ms: int, slack: int = COMPACT_SLACK) -> bool:
        """Rewrite the live state and drop the old records when they are mostly dead."""
        if self.log is None or self.records_in_log <= 2 * self.live_records() + slack:
            return False
        if not self.replay_complete:
            # Compaction drops the old records; the ones the replay could not read would go with
            # them, and with them any chance of recovering what they held.
            return False
        if not self.can_compact():
            return False
        start = self.log.roll(now_ms)
        records = self.live_record_list()
        self.records_in_log = 0
        self._append(records, now_ms)
        self.log.delete_records_before(start)
        log.info("%s: compacted to %d live records", self.topic, len(records))
        return True
