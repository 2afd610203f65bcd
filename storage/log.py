"""`PartitionLog`: the on-disk log of one topic partition (Kafka's UnifiedLog + LocalLog, minus
replication; compaction is minibroker.storage.cleaner's, which swaps cleaned segments in through
`replace_segments`).

Layout: a directory `<data_dir>/<topic>-<partition>/` holding segments named by base offset padded to
20 digits (`00000000000000000000.log`, `.index`, `.timeindex`, `.txnindex`; see `minibroker.storage.segment`,
`minibroker.storage.index` and `minibroker.storage.txn_index` for the formats), an optional `log-start-offset` file (written by DeleteRecords)
and, while the files are consistent, a `clean-shutdown` marker (`minibroker.storage.log_dir`: those files, and
the leftovers removed when the directory is listed).

Descriptors (docs/storage.md): a log holds none of its own. Its segments borrow their `.log` file's from a
`storage.file_cache.FileCache` shared by every log of the broker (bounded by log.max.open.files,
least recently used closed first), and index files are written lazily, through descriptors opened
for the write. A log can be registered without reading anything (`register`) and is loaded at its
first use, so ten thousand idle partitions cost neither descriptors nor start-up time.

Appends store the producer's batches as they are, assigning offsets (baseOffset sits outside the
CRC). For LogAppendTime topics the batch's maxTimestamp and timestamp-type bit are rewritten and its
CRC recomputed, once per batch. Payload bytes are never copied: each batch goes to `os.writev` as a
fresh 8-byte offset (or a rewritten 61-byte header) plus a view of the rest.

Flush policy (Kafka's defaults):
* every append reaches the OS (`os.writev`) before it returns, so the data survives the broker process
  being killed (SIGKILL) right after the acknowledgement; surviving power loss is left to the OS page
  cache, as in Kafka, unless configured otherwise:
* `flush.messages` (default never): fsync once that many offsets were appended since the last flush;
* `flush.ms` (default never): `maybe_flush(now_ms)` fsyncs when the oldest unflushed append is older;
* a segment is fsynced (log and indexes) when it is rolled, and everything on a clean close, before the
  clean-shutdown marker is written (the LogManager syncs the file system once for all its logs).

The clean-shutdown marker: written by a clean close (and by `create`: an empty log is consistent),
removed before the first change to the log's files after it is loaded (`_begin_write`), not at the
load: a log that was only read keeps it, so a crash leaves nothing to recover there. What loading
trusts with and without it: `minibroker.storage.log_loader`.

Replication (Kafka's UnifiedLog's high watermark and leader-epoch cache): `high_watermark` is the
offset below which every record is on every in-sync replica, what consumers read up to. A log whose
partition has no other replica (`high_watermark_follows_end`, the default) has it at the log end;
the replica manager of a replicated partition moves it (`update_high_watermark`). `leader_epochs`
(minibroker.storage.leader_epoch) says where each leader epoch began: a leader's append in a newer
epoch (`leader_epoch`, set by the replica manager; None for a log of no partition leader: tools,
tests) starts that epoch at its first offset; truncation drops the epochs past the cut.

Not thread-safe: call from one thread. Reads are consistent with interleaved appends (they never go
past the whole batches already written), but retention and deletion close files a concurrent reader in
another thread might be using.
"""

from __future__ import annotations

import errno
import logging
import os
import shutil
from bisect import bisect_right
from pathlib import Path
from typing import Callable, Iterator, Literal, NamedTuple, overload

from minibroker.protocol.errors import ApiError, ErrorCode
from minibroker.protocol.records.batch import (
    APPEND_FIELDS,
    HEADER_SIZE,
    LOG_OVERHEAD,
    BatchHeader,
    assign_offsets,
    batch_buffers,
    batch_spans,
)
from minibroker.protocol.records.codec import ControlRecord, read_control_record
from minibroker.protocol.records.validation import CorruptRecordError
from minibroker.storage.config import LogConfig
from minibroker.storage.errors import NotLeaderError
from minibroker.storage.file_cache import FileCache
from minibroker.storage.files import fsync_directory
from minibroker.storage.index import NO_TIMESTAMP
from minibroker.storage.leader_epoch import UNDEFINED_EPOCH, LeaderEpochCache
from minibroker.storage.log_dir import (
    DELETED_SUFFIX,
    SWAP_SUFFIX,
    create_marker,
    has_marker,
    list_segments,
    read_log_start_offset,
    remove_marker,
    segment_files,
    write_log_start_offset,
)
from minibroker.storage.log_loader import load_segments
from minibroker.storage.producer_state.snapshot import CorruptSnapshot, list_snapshots, read_snapshot
from minibroker.storage.producer_state.txns import AbortedTxn, OngoingTxns
from minibroker.storage.retention import segments_past_retention
from minibroker.storage.segment import LOG_SUFFIX, LogSegment, segment_name
from minibroker.storage.timestamps import latest_timestamp, offset_for_timestamp
from minibroker.storage.txn_index import CorruptTxnIndex

logger = logging.getLogger(__name__)

MAX_RELATIVE_OFFSET = 0x7FFFFFFF
PRIVATE_CACHE_CAPACITY = 16  # open segment files of a log opened without a shared cache


class OffsetOutOfRangeError(ApiError):
    """The offset is outside [log_start_offset, log_end_offset]: OFFSET_OUT_OF_RANGE."""

    error_code = ErrorCode.offset_out_of_range


class AppendResult(NamedTuple):
    """What an append assigned (a NamedTuple: made once per Produce partition, at a third of a
    frozen dataclass's cost)."""

    base_offset: int  # first offset assigned
    last_offset: int  # last offset assigned
    log_append_time_ms: int  # now_ms for LogAppendTime topics, else -1 (as in ProduceResponse)
    log_start_offset: int
    max_timestamp: int  # the largest maxTimestamp among the appended batches


def _max_segment_ms(config: LogConfig) -> int:
    """segment.ms, or max.compaction.lag.ms when that is shorter on a compacted topic (Kafka's
    LogConfig.maxSegmentMs: the active segment is never cleaned, so it must roll in time)."""
    if "compact" in config.cleanup_policy.split(",") and config.max_compaction_lag_ms > 0:
        return min(config.segment_ms, config.max_compaction_lag_ms)
    return config.segment_ms


class PartitionLog:
    """The segments of one partition. Use `PartitionLog.open`, `create` or `register`."""

    def __init__(self, directory: Path, config: LogConfig, now_ms: int,
                 files: FileCache | None = None) -> None:
        self.directory = directory
        self._config = config
        self._derive_config(config)
        # A log opened on its own (tests, tools) gets a small cache of its own.
        self._files = files if files is not None else FileCache(PRIVATE_CACHE_CAPACITY)
        self._registered_ms = now_ms  # the load time for segment.ms and flush.ms (see `load`)
        self._segments: list[LogSegment] | None = None  # None until loaded
        self._base_offsets: list[int] = []
        self._log_start_offset = 0
        self._size = 0
        self._unflushed_messages = 0
        self._last_flush_ms = 0
        self._marker = False  # the clean-shutdown marker is on disk (nothing changed since)
        self._closed = False
        self._unloaded_size: int | None = None
        self._single_segment: bool | None = None  # while unloaded: at most one segment on disk
        self._listing: list[int] | None = None  # segment base offsets listed ahead of `load`
        # Called with the new segment's base offset after a roll, before the batches that caused
        # it are appended (the owner snapshots producer state there).
        self.on_roll: Callable[[int], None] | None = None
        # Replication (module docstring): None while the high watermark follows the log end.
        self._high_watermark: int | None = None
        # The epoch this replica leads in, when it leads; stamped into each batch appended (Kafka's
        # appendAsLeader writes it into partitionLeaderEpoch); None keeps the producer's.
        self.leader_epoch: int | None = None
        self.follower = False  # a replica following its leader: appends are refused (NotLeaderError)
        self._epochs: LeaderEpochCache | None = None  # loaded at first use
        self._latest_epoch: int | None = None  # the cache's latest epoch, once known

    # -- opening ----------------------------------------------------------------------------------

    @classmethod
    def open(cls, directory: Path, config: LogConfig, now_ms: int, *,
             files: FileCache | None = None) -> PartitionLog:
        """Open the log in `directory` now, creating it if missing, recovering it if it was not
        closed cleanly."""
        log = cls.register(directory, config, now_ms, files=files)
        log.load()
        return log

    @classmethod
    def register(cls, directory: Path, config: LogConfig, now_ms: int, *,
                 files: FileCache | None = None) -> PartitionLog:
        """The log in `directory`, read nothing of: it is loaded at its first use (or by `load`).
        `now_ms` stands for the load time: Kafka loads every log at start, and a segment's age
        (segment.ms) and the flush.ms clock start from then."""
        return cls(directory if isinstance(directory, Path) else Path(directory), config, now_ms, files)

    @classmethod
    def create(cls, directory: Path, config: LogConfig, now_ms: int, *,
               files: FileCache | None = None, start_offset: int = 0) -> PartitionLog:
        """A new, empty log in a new directory `directory`: its first segment file and, since an
        empty log is consistent, its clean-shutdown marker (so that a crash before its first
        append leaves nothing to recover). Nothing is fsynced: the creator makes the directory's
        entry durable before it commits the creation."""
        directory = Path(directory)
        directory.mkdir(parents=True)
        log = cls(directory, config, now_ms, files)
        try:
            segment = log._new_segment(start_offset)
            try:
                create_marker(directory)
            except BaseException:
                segment.close()
                raise
        except BaseException:
            shutil.rmtree(directory, ignore_errors=True)
            raise
        log._marker = True
        log._set_loaded([segment], start_offset)
        return log

    def _new_segment(self, base_offset: int) -> LogSegment:
        config = self._config
        return LogSegment.create(self.directory, base_offset, index_interval_bytes=config.index_interval_bytes,
                                 max_index_size=config.segment_index_bytes, files=self._files)

    @property
    def loaded(self) -> bool:
        return self._segments is not None

    def _loaded_segments(self) -> list[LogSegment]:
        """The segments, the log loaded first if it was not."""
        if self._segments is None:
            self.load()
            assert self._segments is not None
        return self._segments

    @property
    def needs_recovery(self) -> bool:
        """Whether loading will scan the active segment: the log was not closed cleanly (no
        clean-shutdown marker), or was changed since it was loaded."""
        if self._segments is not None:
            return False
        return not has_marker(self.directory)

    def tail_bytes_on_disk(self) -> int:
        """The size of the last segment file (what a recovery scans). Lists the directory, and the
        `load` that follows uses that listing."""
        if self._listing is None:
            self.directory.mkdir(parents=True, exist_ok=True)
            self._listing = list_segments(self.directory)
        bases = self._listing
        return os.stat(self.directory / (segment_name(bases[-1]) + LOG_SUFFIX)).st_size if bases else 0

    def load(self) -> None:
        """Read the log's directory and its active segment's tail, or recover the active segment
        when the log was not closed cleanly. Idempotent; on an error the log stays unloaded (its
        descriptors given back) and the next use tries again."""
        if self._segments is not None:
            return
        if self._closed:  # a request still holding the log of a deleted topic
            raise OSError(errno.EBADF, "the log is closed", str(self.directory))
        directory = self.directory
        config = self._config
        directory.mkdir(parents=True, exist_ok=True)
        clean = has_marker(directory)
        self._marker = clean
        bases, self._listing = self._listing if self._listing is not None else list_segments(directory), None

        stored_start = read_log_start_offset(directory)
        segments: list[LogSegment] = []
        try:
            segments = load_segments(directory, bases, config, self._files, clean=clean,
                                     begin_write=self._begin_write, loaded_ms=self._registered_ms,
                                     start_offset=stored_start or 0)
            self._set_loaded(segments, stored_start or 0)
            if self._log_start_offset > self.log_end_offset:
                # DeleteRecords moved the start past data an unclean shutdown then lost: start afresh
                # at the recorded start offset, as Kafka's truncateFullyAndStartAt.
                self._truncate_fully_and_start_at(self._log_start_offset)
        except BaseException:
            for segment in segments:
                segment.close()
            self._segments = None
            raise

    def _set_loaded(self, segments: list[LogSegment], stored_start: int) -> None:
        self._segments = segments
        self._base_offsets = [s.base_offset for s in segments]
        self._size = sum(s.size for s in segments)
        self._log_start_offset = max(stored_start, segments[0].base_offset)
        self._last_flush_ms = self._registered_ms
        self._unloaded_size = self._single_segment = None

    def _begin_write(self) -> None:
        """Before the first change to the log's files since it was loaded clean: remove the
        clean-shutdown marker, so that a crash from here on makes the next load recover.

        Not fsynced (as Kafka deletes its .kafka_cleanshutdown): a killed process cannot undo an
        unlink, and a power cut that brings the marker back brings back the indexes of the last
        clean close with it, so the clean load's tail check (framing and offsets from the last
        index entry to the file's end, the CRC of the last batch) finds what was lost or torn and
        recovers the segment. A roll fsyncs the directory, and with it the unlink. An fsync here
        cost every partition's first write a few milliseconds (seconds for 10,000 partitions)."""
        if self._marker:
            remove_marker(self.directory)
            self._marker = False

    # -- properties -------------------------------------------------------------------------------

    @property
    def config(self) -> LogConfig:
        return self._config

    def update_config(self, config: LogConfig) -> None:
        self._config = config
        self._derive_config(config)
        for segment in self._segments or ():
            segment.index_interval_bytes = config.index_interval_bytes

    def _derive_config(self, config: LogConfig) -> None:
        """What every append reads of the config, derived once per config (not per append)."""
        self._segment_bytes = config.segment_bytes
        self._max_segment_ms = _max_segment_ms(config)
        self._flush_messages = config.flush_messages
        self._log_append_time = config.log_append_time

    @property
    def log_start_offset(self) -> int:
        self._loaded_segments()
        return self._log_start_offset

    @property
    def log_end_offset(self) -> int:
        segments = self._loaded_segments()
        return segments[-1].next_offset

    @property
    def high_watermark(self) -> int:
        """The offset below which every record is on every in-sync replica (module docstring)."""
        end = self._loaded_segments()[-1].next_offset
        hw = self._high_watermark
        return end if hw is None or hw > end else hw

    @property
    def high_watermark_follows_end(self) -> bool:
        return self._high_watermark is None

    def update_high_watermark(self, offset: int | None) -> None:
        """Set the high watermark (a replicated partition's replica manager); None: it follows the
        log end (the partition has no other replica). Never past the log end."""
        self._high_watermark = offset

    @property
    def leader_epochs(self) -> LeaderEpochCache:
        """Where each leader epoch began (loaded from `leader-epoch-checkpoint` at first use)."""
        if self._epochs is None:
            self._epochs = LeaderEpochCache.load(self.directory)
            self._latest_epoch = self._epochs.latest_epoch if self._epochs.entries else UNDEFINED_EPOCH
        return self._epochs

    def epoch_of(self, offset: int) -> int:
        """The leader epoch the record at `offset` was written in (ListOffsets' leader_epoch): from
        the cache; while the cache is empty (a leader that has appended nothing yet, a log of an
        earlier version), the epoch this replica leads in, else -1."""
        epochs = self.leader_epochs
        if not epochs.entries and self.leader_epoch is not None:
            return self.leader_epoch
        return epochs.epoch_at(offset)

    @property
    def latest_epoch(self) -> int:
        """The newest leader epoch of this replica: the cache's, or the one it leads in if newer."""
        epoch = self.leader_epochs.latest_epoch
        lead = self.leader_epoch
        return lead if lead is not None and lead > epoch else epoch

    @property
    def size_bytes(self) -> int:
        """The bytes of the log's segments; for a log not loaded yet, from the sizes of its files."""
        if self._segments is None:
            if self._unloaded_size is None:
                self._unloaded_size = sum(size for _, size in segment_files(self.directory))
            return self._unloaded_size
        return self._size

    @property
    def segments(self) -> list[LogSegment]:
        segments = self._loaded_segments()
        return list(segments)

    @property
    def active_segment(self) -> LogSegment:
        segments = self._loaded_segments()
        return segments[-1]

    # -- appending --------------------------------------------------------------------------------

    def append(self, records: bytes | bytearray | memoryview, now_ms: int) -> AppendResult:
        """Append one or more already-checked v2 batches, assigning consecutive offsets and stamping
        `leader_epoch` into each. NotLeaderError on a replica that follows its leader (nothing written)."""
        if self.follower:
            raise NotLeaderError(errno.EROFS, f"{self.directory.name} follows its leader: only the leader appends")
        segments = self._segments
        if segments is None:
            segments = self._loaded_segments()
        view = memoryview(records)
        if view.ndim != 1 or view.itemsize != 1:
            view = view.cast("B")
        total = len(view)
        if total < HEADER_SIZE:
            return self._append_batches(segments, view, now_ms)
        batch_length, attributes, last_offset_delta, batch_max_timestamp = APPEND_FIELDS.unpack_from(view)
        if batch_length + LOG_OVERHEAD != total:
            return self._append_batches(segments, view, now_ms)

        # One batch (a Produce request's partition): `_append_batches` without its lists.
        if self._marker:
            self._begin_write()
        active = segments[-1]
        first_offset = active.next_offset
        if active.size and self._should_roll(active, total, first_offset + last_offset_delta, now_ms):
            active = self._roll(now_ms)
            first_offset = active.next_offset
        if active.first_append_ms is None:
            active.first_append_ms = now_ms
        last_offset = first_offset + last_offset_delta
        if self._log_append_time:
            log_append_time_ms = batch_max_timestamp = now_ms
            buffers = batch_buffers(view, 0, total, first_offset, attributes, now_ms, self.leader_epoch)
        else:
            log_append_time_ms = -1
            buffers = batch_buffers(view, 0, total, first_offset, attributes, None, self.leader_epoch)
        active.append_batch(buffers, last_offset, batch_max_timestamp, total)  # OSError: nothing changed
        self._appended(first_offset, total, last_offset - first_offset + 1, now_ms)
        return AppendResult(first_offset, last_offset, log_append_time_ms, self._log_start_offset,
                            batch_max_timestamp if batch_max_timestamp > NO_TIMESTAMP else NO_TIMESTAMP)

    def _append_batches(self, segments: list[LogSegment], view: memoryview, now_ms: int) -> AppendResult:
        """`append` of any number of batches (ValueError when `view` does not hold whole ones)."""
        total = len(view)
        spans = batch_spans(view)
        count = sum(fields[6] + 1 for _, _, fields in spans)  # lastOffsetDelta + 1 each

        self._begin_write()
        active = segments[-1]
        first_offset = active.next_offset
        if active.size and self._should_roll(active, total, first_offset + count - 1, now_ms):
            active = self._roll(now_ms)
            first_offset = active.next_offset
        if active.first_append_ms is None:
            active.first_append_ms = now_ms

        log_append_time = self._log_append_time
        buffers, batches = assign_offsets(view, spans, first_offset, now_ms if log_append_time else None,
                                          self.leader_epoch)
        next_offset = batches[-1][0] + 1
        max_timestamp = max(NO_TIMESTAMP, *(batch_max for _, batch_max, _ in batches))

        active.append(buffers, batches, total)  # an OSError here leaves the segment as it was
        self._appended(first_offset, total, next_offset - first_offset, now_ms)
        return AppendResult(first_offset, next_offset - 1, now_ms if log_append_time else -1,
                            self._log_start_offset, max_timestamp)

    def append_replicated(self, records: bytes | bytearray | memoryview, now_ms: int) -> AppendResult:
        """A follower's append: the leader's batches as they are (their offsets and leader epochs
        kept, Kafka's appendAsFollower), starting at this log's end; each batch of a newer leader
        epoch starts that epoch in the cache. ValueError when they do not start at the log end or
        are not whole batches (nothing written)."""
        segments = self._loaded_segments()
        view = memoryview(records)
        if view.ndim != 1 or view.itemsize != 1:
            view = view.cast("B")
        spans = batch_spans(view)
        first_offset = spans[0][2][0]
        if first_offset != self.log_end_offset:
            raise ValueError(f"replicated batches start at {first_offset}, not at the log end {self.log_end_offset}")
        total = len(view)
        last_offset = spans[-1][2][0] + spans[-1][2][6]
        self._begin_write()
        active = segments[-1]
        if active.size and self._should_roll(active, total, last_offset, now_ms):
            active = self._roll(now_ms)
        if active.first_append_ms is None:
            active.first_append_ms = now_ms
        buffers = [view[position:position + size] for position, size, _ in spans]
        batches = [(fields[0] + fields[6], fields[8], size) for _, size, fields in spans]
        active.append(buffers, batches, total)  # an OSError here leaves the segment as it was
        epochs = self.leader_epochs
        for _, _, fields in spans:
            if fields[2] > epochs.latest_epoch:  # partitionLeaderEpoch
                epochs.assign(fields[2], fields[0])
        self._latest_epoch = epochs.latest_epoch
        self._size += total
        self._unflushed_messages += last_offset - first_offset + 1
        if self._unflushed_messages >= self._flush_messages:
            self.flush(now_ms)
        max_timestamp = max(NO_TIMESTAMP, *(fields[8] for _, _, fields in spans))
        return AppendResult(first_offset, last_offset, -1, self._log_start_offset, max_timestamp)

    def _appended(self, first_offset: int, size: int, count: int, now_ms: int) -> None:
        """After `count` offsets from `first_offset` (`size` bytes) were written: a newer leader
        epoch starts at them, and flush.messages. A flush that fails takes them back out (not
        durable, so not acknowledged: the client retries) and raises."""
        epoch = self.leader_epoch
        if epoch is not None and (self._latest_epoch is None or epoch > self._latest_epoch):
            self.leader_epochs.assign(epoch, first_offset)
            self._latest_epoch = self.leader_epochs.latest_epoch
        self._size += size
        self._unflushed_messages += count
        if self._unflushed_messages >= self._flush_messages:
            try:
                self.flush(now_ms)
            except OSError:
                self._unflushed_messages -= count
                self.truncate_to(first_offset)
                raise

    def _should_roll(self, active: LogSegment, size: int, last_offset: int, now_ms: int) -> bool:
        """Kafka's LogSegment.shouldRoll for a non-empty active segment: the append would overflow
        segment.bytes, or the segment is older than segment.ms (counted from its first append), or
        its indexes are full, or the offsets would not fit a relative (i32) offset."""
        if active.size + size > self._segment_bytes:
            return True
        if active.first_append_ms is not None and now_ms - active.first_append_ms > self._max_segment_ms:
            return True
        if last_offset - active.base_offset > MAX_RELATIVE_OFFSET:
            return True
        return active.indexes_full()

    def roll(self, now_ms: int) -> int:
        """Start a new segment at the log end (if the active one holds anything); returns its base."""
        segments = self._loaded_segments()
        if segments[-1].size:
            self._roll(now_ms)
        return segments[-1].base_offset

    def _roll(self, now_ms: int) -> LogSegment:
        """Start a new segment. An OSError (disk full, read-only, out of descriptors) leaves the old
        segment the active one, and the next append tries again."""
        self._begin_write()
        segments = self._loaded_segments()
        old = segments[-1]
        old.on_become_inactive()  # fsyncs: older segments need no scan after a crash
        new = self._new_segment(old.next_offset)
        try:
            fsync_directory(self.directory)
        except BaseException:
            new.delete()
            raise
        old.active = False
        segments.append(new)
        self._base_offsets.append(new.base_offset)
        self._unflushed_messages = 0
        self._last_flush_ms = now_ms
        if self.on_roll is not None:
            try:
                self.on_roll(new.base_offset)
            except OSError:  # a producer-state snapshot: the log replay recovers without it
                logger.exception("%s: the callback after rolling to %d failed", self.directory, new.base_offset)
        return new

    # -- flushing ---------------------------------------------------------------------------------

    def flush(self, now_ms: int | None = None) -> None:
        """fsync what was appended since the last flush."""
        if self._segments is None:
            return
        for segment in self._segments:
            segment.flush()
        self._unflushed_messages = 0
        if now_ms is not None:
            self._last_flush_ms = now_ms

    def maybe_flush(self, now_ms: int) -> bool:
        """flush.ms: fsync when data is waiting and the last flush is that old. True if flushed."""
        if self._segments is None:
            return False
        if self._unflushed_messages and now_ms - self._last_flush_ms >= self._config.flush_ms:
            self.flush(now_ms)
            return True
        return False

    # -- reading ----------------------------------------------------------------------------------

    def _check_offset(self, offset: int) -> None:
        if offset < self._log_start_offset or offset > self.log_end_offset:
            raise OffsetOutOfRangeError(
                f"offset {offset} is out of range [{self._log_start_offset}, "
                f"{self.log_end_offset}] of {self.directory.name}"
            )

    @overload
    def read(self, offset: int, max_bytes: int, *, min_one_batch: bool = True,
             max_offset: int | None = None, view: Literal[False] = False) -> bytes: ...

    @overload
    def read(self, offset: int, max_bytes: int, *, min_one_batch: bool = True,
             max_offset: int | None = None, view: bool) -> bytes | memoryview: ...

    def read(self, offset: int, max_bytes: int, *, min_one_batch: bool = True,
             max_offset: int | None = None, view: bool = False) -> bytes | memoryview:
        """Whole batches from the one holding `offset`, up to `max_bytes` (or the whole first batch
        when it alone is bigger and `min_one_batch`), continuing into later segments. `max_offset`:
        no batch at or past it (a batch boundary: the last stable offset of a read_committed fetch).
        `view`: bytes or a memoryview (LogSegment.read's), for a reader that only needs a buffer."""
        segments = self._loaded_segments()
        self._check_offset(offset)
        end_offset = self.log_end_offset if max_offset is None else min(max_offset, self.log_end_offset)
        if offset >= end_offset:
            return b""
        i = bisect_right(self._base_offsets, offset) - 1
        position = segments[i].find_position(offset)
        chunks: list[bytes | memoryview] = []
        remaining = max_bytes
        while i < len(segments):
            segment = segments[i]
            end = None
            if end_offset < segment.next_offset:  # the bound lies in this segment
                end = segment.find_position(end_offset) if end_offset > segment.base_offset else 0
            if position is not None:
                data = segment.read(
                    position, remaining, min_one_batch=min_one_batch and not chunks, end=end, view=view
                )
                if data:
                    chunks.append(data)
                    remaining -= len(data)
                if end is not None or position + len(data) < segment.size or remaining <= 0:
                    break
            i += 1
            position = 0
        if len(chunks) == 1:
            return chunks[0]
        return b"".join(chunks)

    def iter_batch_headers(self, from_offset: int) -> Iterator[BatchHeader]:
        """Headers of the batches from the one holding `from_offset` to the log end (at the time
        each segment is reached). `position` is the batch's position in its segment file."""
        for _, header in self._segment_headers(from_offset):
            yield header

    def _segment_headers(self, from_offset: int) -> Iterator[tuple[LogSegment, BatchHeader]]:
        """(segment, header) of each batch from the one holding `from_offset` to the log end."""
        segments = self._loaded_segments()
        if from_offset >= self.log_end_offset:
            return
        segments = list(segments)
        i = max(0, bisect_right([s.base_offset for s in segments], from_offset) - 1)
        position = segments[i].find_position(from_offset) if from_offset > segments[i].base_offset else 0
        for segment in segments[i:]:
            if segment.closed:
                return  # deleted while iterating
            if position is not None:
                for header in segment.headers(position):
                    if header.last_offset >= from_offset:
                        yield segment, header
            position = 0

    def iter_batches(self, from_offset: int) -> Iterator[tuple[BatchHeader, ControlRecord | None]]:
        """Like `iter_batch_headers`, with the control record of each control batch (read from the
        log: the replay of producer state needs a marker's type and coordinator epoch). A control
        batch whose record cannot be read is logged and given as None."""
        for segment, header in self._segment_headers(from_offset):
            marker = None
            if header.is_control:
                try:
                    marker = read_control_record(segment.read_batch(header))
                except CorruptRecordError as exc:
                    logger.error("%s: the control batch at offset %d cannot be read: %s",
                                 segment.log_path, header.base_offset, exc)
            yield header, marker

    # -- transactions -----------------------------------------------------------------------------

    def _segment_holding(self, offset: int) -> LogSegment:
        segments = self._loaded_segments()
        return segments[max(0, bisect_right(self._base_offsets, offset) - 1)]

    def append_aborted_txn(self, entry: AbortedTxn) -> None:
        """Record an aborted transaction in the transaction index of the segment holding its ABORT
        marker (just appended). An OSError leaves the index as it was."""
        self._begin_write()
        self._segment_holding(entry.last_offset).txn_index.append(entry)

    def ensure_aborted_txn(self, entry: AbortedTxn) -> bool:
        """The replay of producer state found this aborted transaction: add it to its segment's
        transaction index if the index lacks it (an entry lost with a crash). An index that holds
        later entries but not this one is rebuilt from the log. True when something changed."""
        segment = self._segment_holding(entry.last_offset)
        try:
            entries = segment.txn_index.entries(segment.next_offset)
        except CorruptTxnIndex as exc:
            self._rebuild_txn_index(segment, exc)
            return True
        if entry in entries:
            return False
        self._begin_write()
        if not entries or entries[-1].last_offset < entry.last_offset:
            logger.warning("%s: adding the aborted transaction of producer %d (offsets %d-%d) it lacked",
                           segment.txn_index.path, entry.producer_id, entry.first_offset, entry.last_offset)
            segment.txn_index.append(entry)
        else:
            self._rebuild_txn_index(segment, CorruptTxnIndex(
                f"lacks the aborted transaction of producer {entry.producer_id} ending at {entry.last_offset}"))
        return True

    def aborted_transactions(self, fetch_offset: int, upper_bound_offset: int) -> list[AbortedTxn]:
        """The aborted transactions overlapping [fetch_offset, upper_bound_offset), from the
        transaction indexes of the segment holding `fetch_offset` onwards (Kafka's
        UnifiedLog.collectAbortedTransactions). A damaged index is rebuilt from the log first."""
        segments = self._loaded_segments()
        i = max(0, bisect_right(self._base_offsets, fetch_offset) - 1)
        found: list[AbortedTxn] = []
        for segment in list(segments[i:]):
            self.txn_index_entries(segment)  # checked (and rebuilt if damaged) before collecting
            entries, complete = segment.txn_index.collect(fetch_offset, upper_bound_offset)
            found.extend(entries)
            if complete:
                break
        return found

    def txn_index_entries(self, segment: LogSegment) -> list[AbortedTxn]:
        """The aborted transactions in one segment's transaction index, the index rebuilt from the
        log first when it is damaged."""
        try:
            return segment.txn_index.entries(segment.next_offset)
        except CorruptTxnIndex as exc:
            self._rebuild_txn_index(segment, exc)
            return segment.txn_index.entries()

    def _rebuild_txn_index(self, segment: LogSegment, why: Exception) -> None:
        """Rebuild one segment's transaction index from the log: the open transactions at the
        segment's start come from the newest producer-state snapshot at or below it (else the
        log start), then the log is replayed to the segment's end (Kafka rebuilds it by recovering
        the segment against producer state)."""
        logger.warning("%s: %s; rebuilding it from the log", segment.txn_index.path, why)
        txns = OngoingTxns()
        start = self._log_start_offset
        for offset, path in reversed(list_snapshots(self.directory)):
            if self._log_start_offset <= offset <= segment.base_offset:
                try:
                    rows = read_snapshot(path)
                except (CorruptSnapshot, OSError):
                    continue
                txns.load((row[0], row[7]) for row in rows if row[7] >= 0)
                start = offset
                break
        entries = []
        for header, marker in self.iter_batches(start):
            if header.base_offset >= segment.next_offset:
                break
            if header.producer_id < 0:
                continue
            if header.is_control:
                if marker is None or marker.type > 1:
                    continue
                aborted = txns.end(header.producer_id, header.base_offset, marker.is_abort)
                if aborted is not None and header.base_offset >= segment.base_offset:
                    entries.append(aborted)
            elif header.is_transactional:
                txns.begin(header.producer_id, header.base_offset)
        self._begin_write()
        segment.txn_index.replace(entries)

    def offset_for_timestamp(self, timestamp_ms: int) -> tuple[int, int] | None:
        """ListOffsets by timestamp: (offset, timestamp) of the first record at or after the log
        start offset whose timestamp is >= `timestamp_ms`, None when none is (minibroker.storage.timestamps)."""
        return offset_for_timestamp(self._loaded_segments(), self._log_start_offset, timestamp_ms)

    def latest_timestamp(self) -> tuple[int, int]:
        """ListOffsets MAX_TIMESTAMP (-3, KIP-734): (offset, timestamp) of the first record carrying
        the largest timestamp in the log, (-1, -1) when it is empty (minibroker.storage.timestamps)."""
        return latest_timestamp(self._loaded_segments(), self._log_start_offset)

    # -- retention and truncation -----------------------------------------------------------------

    def enforce_retention(self, now_ms: int) -> int:
        """Delete the old segments retention.ms, retention.bytes and the log start offset leave
        behind (minibroker.storage.retention), never the active one; returns how many. A log not loaded yet
        is loaded only when it has more than one segment file (the active segment is never
        deleted; an unloaded log gains none), and its directory is listed once to find out."""
        if self._segments is None:
            if self._single_segment is None:
                self._single_segment = len(segment_files(self.directory)) <= 1
            if self._single_segment:
                return 0
        segments = self._loaded_segments()
        deleted = segments_past_retention(segments, self._log_start_offset, self._size, self._config, now_ms)
        for _ in range(deleted):
            self._delete_oldest_segment()
        if deleted:
            self._log_start_offset = max(self._log_start_offset, segments[0].base_offset)
        return deleted

    def holds_segments(self, segments: list[LogSegment]) -> bool:
        """Whether every one of `segments` is still one of the log's, in the same order and not the
        active one (the cleaner checks this before it swaps cleaned segments in)."""
        current = self._segments
        if current is None or self._closed or not segments:
            return False
        try:
            start = current.index(segments[0])
        except ValueError:
            return False
        return (current[start:start + len(segments)] == segments
                and start + len(segments) < len(current))

    def replace_segments(self, swaps: list[tuple[LogSegment, list[LogSegment]]]) -> None:
        """Swap cleaned segments in, each `new` (its files suffixed `.cleaned`) for the consecutive
        segments `old` it was cleaned from (Kafka's LocalLog.replaceSegments), crash-safe at every
        step, with two fsyncs of the directory whatever the number of groups:

        1. every `new`'s files are renamed `.cleaned` -> `.swap`, the directory fsynced: from here a
           restart completes each swap (minibroker.storage.log_dir) instead of discarding it;
        2. the old segments that do not share their `new`'s base offset are renamed `.deleted`;
        3. every `new`'s files are renamed `.swap` -> their final names, atomically replacing the
           old segment of the same base offset; the directory is fsynced;
        4. the `.deleted` files are removed.

        A crash before 1 leaves `.cleaned` files, removed at the next load (the old segments are
        intact); after 1, `.swap` files whose offset ranges name the old segments they replace."""
        segments = self._loaded_segments()
        assert all(self.holds_segments(old) for _, old in swaps), "the segments to replace are no longer the log's"
        self._begin_write()
        for new, _ in reversed(swaps):
            new.change_suffix(SWAP_SUFFIX)
        fsync_directory(self.directory)
        for new, old in swaps:
            for segment in old:
                segment.close()
                if segment.base_offset != new.base_offset:
                    segment.change_suffix(DELETED_SUFFIX)
            new.change_suffix("")
        fsync_directory(self.directory)
        for new, old in swaps:
            start = segments.index(old[0])
            new.next_offset = segments[start + len(old)].base_offset
            segments[start:start + len(old)] = [new]
            self._base_offsets[start:start + len(old)] = [new.base_offset]
            self._size += new.size - sum(segment.size for segment in old)
            for segment in old:
                if segment.base_offset != new.base_offset:
                    segment.delete()

    def _delete_oldest_segment(self) -> None:
        self._begin_write()
        segment = self._loaded_segments().pop(0)
        self._base_offsets.pop(0)
        self._size -= segment.size
        segment.delete()

    def delete_records_before(self, offset: int) -> int:
        """DeleteRecords: move the log start offset up to `offset` (persisted), deleting segments that
        fall entirely below it. Returns the new log start offset (the low watermark)."""
        segments = self._loaded_segments()
        if offset < 0 or offset > self.log_end_offset:
            raise OffsetOutOfRangeError(
                f"cannot delete records before {offset}: the log ends at {self.log_end_offset}"
            )
        if offset > self._log_start_offset:
            self._begin_write()
            self._log_start_offset = offset
            write_log_start_offset(self.directory, offset)
            while len(segments) > 1 and segments[1].base_offset <= offset:
                self._delete_oldest_segment()
        return self._log_start_offset

    def truncate_to(self, offset: int) -> None:
        """Remove every batch holding an offset >= `offset` (whole batches: the log end may end up
        below `offset` when it falls inside a batch)."""
        if offset >= self.log_end_offset:
            epochs = self.leader_epochs
            if epochs.entries and epochs.entries[-1][1] >= offset:  # an epoch begun at the end, with nothing in it
                self._truncate_epochs(offset)
            return
        self._begin_write()
        segments = self._loaded_segments()
        self._truncate_epochs(offset)
        if offset <= segments[0].base_offset:
            self._truncate_fully_and_start_at(offset)
            return
        while segments[-1].base_offset >= offset:
            segment = segments.pop()
            self._base_offsets.pop()
            self._size -= segment.size
            segment.delete()
        active = segments[-1]
        active.active = True
        self._size -= active.truncate_to(offset)
        active.first_append_ms = active.first_append_ms if active.size else None
        self._log_start_offset = min(self._log_start_offset, self.log_end_offset)

    def _truncate_epochs(self, offset: int) -> None:
        epochs = self.leader_epochs
        epochs.truncate_from_end(offset)
        self._latest_epoch = epochs.latest_epoch

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Drop every record and start the log afresh at `offset` (a follower whose leader's log
        starts past this one's end: Kafka's truncateFullyAndStartAt)."""
        self._loaded_segments()
        self._truncate_epochs(0)
        self._truncate_fully_and_start_at(offset)

    def _truncate_fully_and_start_at(self, offset: int) -> None:
        self._begin_write()
        for segment in self._loaded_segments():
            segment.delete()
        self._segments = [self._new_segment(offset)]
        self._base_offsets = [offset]
        self._size = 0
        self._log_start_offset = offset
        write_log_start_offset(self.directory, offset)

    # -- closing ----------------------------------------------------------------------------------

    def prepare_clean_close(self) -> bool:
        """The first half of a clean close, for a caller that makes many logs durable at once (one
        `sync_filesystem` instead of an fsync per file): the active segment's final time-index
        entry, and every index entry written to its file, without fsync. True when the log has
        changed since it was loaded clean (it needs that sync, then `mark_durable`)."""
        if self._segments is None or self._closed:
            return False
        active = self._segments[-1]
        if active.size:
            active.time_index.maybe_append(active.max_timestamp, active.offset_of_max_timestamp)
        for segment in self._segments:
            segment.write_indexes()
        return not self._marker

    def mark_durable(self) -> None:
        """The file system was synced since `prepare_clean_close`: nothing written before needs an
        fsync (a write that failed is still pending, and `close` writes and fsyncs it)."""
        for segment in self._segments or ():
            segment.mark_durable()

    def close(self, clean: bool = True) -> None:
        """Close the files. `clean`: make everything durable and write the clean-shutdown marker,
        so the next open trusts the indexes. `clean=False` leaves the files as a crash would. A log
        never loaded has nothing to do (its files, and its marker, are as they were); a log not
        changed since it was loaded clean keeps its marker and only writes index files rebuilt
        from the log meanwhile. Raises OSError when the flush fails: then no marker is written
        and the next start recovers the log."""
        if self._closed:
            return
        self._closed = True
        if self._segments is None:
            return
        try:
            if clean:
                active = self._segments[-1]
                if active.size:
                    active.time_index.maybe_append(active.max_timestamp, active.offset_of_max_timestamp)
                if self._marker:
                    for segment in self._segments:
                        segment.write_indexes()
                else:
                    self.flush()
                    # After the flush: a marker that exists says the files were durable. It needs
                    # no fsync of its own (losing it to a power cut only costs a recovery).
                    create_marker(self.directory)
                    self._marker = True
        finally:
            for segment in self._segments:
                segment.close()

    def delete(self) -> None:
        """Close the log and remove its directory."""
        self.close(clean=False)
        shutil.rmtree(self.directory, ignore_errors=True)
