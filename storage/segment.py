"""One log segment: a `.log` file of record batches plus its `.index`, `.timeindex` and `.txnindex`
(Kafka's LogSegment; the transaction index: minibroker.storage.txn_index).

The `.log` file holds v2 record batches exactly as produced, with their offsets assigned. Its name is
the segment's base offset (the first offset it may hold) padded to 20 digits; the index files share
the name. Writes go through `os.writev` on an O_APPEND descriptor (data reaches the OS before the
append returns), reads through `os.pread` bounded by the size of the whole batches written so far, so
a read never sees a half-written batch.

A segment holds no descriptor of its own: it borrows its `.log` file's from the log's
`storage.file_cache.FileCache` for each system call (opened on demand, closed when least recently
used: docs/storage.md), and its indexes are written lazily (minibroker.storage.index). Whether the file has data not
yet fsynced is the segment's to remember (`_dirty`), not the descriptor's, so closing an evicted
descriptor never loses a flush that is due.

Indexes are checked against the log (docs/limits.md: a plausible but wrong index made fetches skip
records silently): on load, Kafka's sanity checks and more (minibroker.storage.index); and every entry a lookup
uses is checked against the batch header it points at (the offset-index entry (O, P) must find, at
position P, the batch whose last offset is O; the time-index entry (T, O) the batch ending at O with
max timestamp T), which costs nothing extra for offset lookups (that header is read anyway by the
scan that follows). An entry that disagrees makes the segment rebuild both indexes from its log
(without truncating anything: only the active segment's recovery truncates) and answer again.
"""

from __future__ import annotations

import errno
import logging
import os
from pathlib import Path
from typing import Iterator, Sequence

from crc32c import crc32c

from minibroker.protocol.records.batch import CRC_START, LOG_OVERHEAD, OFFSET_AND_LENGTH, BatchHeader
from minibroker.storage.batch_scan import scan_headers, scan_verified, whole_batches_length, write_fully
from minibroker.storage.file_cache import FileCache
from minibroker.storage.files import unlink_if_exists
from minibroker.storage.index import NO_TIMESTAMP, OffsetIndex, TimeIndex
from minibroker.storage.timestamps import first_record_at_or_after
from minibroker.storage.txn_index import TXN_INDEX_SUFFIX, TransactionIndex

logger = logging.getLogger(__name__)

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
__all__ = ["INDEX_SUFFIX", "LOG_SUFFIX", "TIME_INDEX_SUFFIX", "TXN_INDEX_SUFFIX", "LogSegment", "segment_name"]


def segment_name(base_offset: int) -> str:
    return f"{base_offset:020d}"


def txn_index_path(directory: Path, base_offset: int, suffix: str = "") -> Path:
    """The `.txnindex` path of a segment, with `suffix` appended (as `segment_paths`). Apart from
    the other three: it exists only once the segment holds an aborted transaction."""
    return directory / (segment_name(base_offset) + TXN_INDEX_SUFFIX + suffix)


def segment_paths(directory: Path, base_offset: int, suffix: str = "") -> tuple[Path, Path, Path]:
    """The `.log`, `.index` and `.timeindex` paths of a segment, each with `suffix` appended (Kafka's
    file suffixes: `.cleaned` while the cleaner writes a segment, `.swap` while it is swapped in)."""
    name = segment_name(base_offset)
    return (directory / (name + LOG_SUFFIX + suffix), directory / (name + INDEX_SUFFIX + suffix),
            directory / (name + TIME_INDEX_SUFFIX + suffix))


class LogSegment:
    """A segment of a partition log. `size` counts only whole batches; `next_offset` is the offset
    after the segment's last batch (kept current for the active segment; for the others it is the
    next segment's base offset, set by the log)."""

    def __init__(
        self,
        directory: Path,
        base_offset: int,
        *,
        index_interval_bytes: int,
        max_index_size: int,
        files: FileCache,
        size: int,
        suffix: str = "",
    ) -> None:
        self.directory = directory
        self.base_offset = base_offset
        self.suffix = suffix  # "" for a live segment; the cleaner's ".cleaned" / ".swap" (Kafka's)
        self.log_path, self.index_path, self.time_index_path = segment_paths(directory, base_offset, suffix)
        self._log_key = str(self.log_path)  # the file cache's key, made once (not per call)
        self.txn_index = TransactionIndex(txn_index_path(directory, base_offset, suffix), base_offset)
        self.index_interval_bytes = index_interval_bytes
        self.max_index_size = max_index_size
        self.files = files
        self.size = size
        self.next_offset = base_offset
        self.max_timestamp = NO_TIMESTAMP
        self.offset_of_max_timestamp = base_offset  # last offset of the batch holding max_timestamp
        self.first_append_ms: int | None = None  # for segment.ms rolls (see PartitionLog)
        self.bytes_since_last_index_entry = 0
        self._offset_index: OffsetIndex | None = None
        self._time_index: TimeIndex | None = None
        self._dirty = False
        self.active = False  # the log's last segment, the one appended to
        self._torn_tail = False  # bytes past `size` from a failed write, not yet cut
        self.closed = False

    # -- creation and loading -----------------------------------------------------------------

    @classmethod
    def create(
        cls, directory: Path, base_offset: int, *, index_interval_bytes: int, max_index_size: int,
        files: FileCache,
    ) -> LogSegment:
        """A new, empty segment (its `.log` file created now, its index files at its first flush)."""
        path = directory / (segment_name(base_offset) + LOG_SUFFIX)
        files.acquire(path, create=True)
        files.release(path)
        segment = cls(
            directory,
            base_offset,
            index_interval_bytes=index_interval_bytes,
            max_index_size=max_index_size,
            files=files,
            size=0,
        )
        segment._offset_index = OffsetIndex(segment.index_path, base_offset, max_index_size)
        segment._time_index = TimeIndex(segment.time_index_path, base_offset, max_index_size)
        segment.txn_index = TransactionIndex.empty(segment.txn_index.path, base_offset)
        segment.active = True
        return segment

    @classmethod
    def open(
        cls, directory: Path, base_offset: int, *, index_interval_bytes: int, max_index_size: int,
        files: FileCache, suffix: str = "",
    ) -> LogSegment:
        """An existing segment, read nothing of (see `load_inactive` / `load_clean` / `recover`);
        no descriptor is opened until it is used. `suffix`: a cleaned segment not yet swapped in."""
        path = segment_paths(directory, base_offset, suffix)[0]
        return cls(
            directory,
            base_offset,
            index_interval_bytes=index_interval_bytes,
            max_index_size=max_index_size,
            files=files,
            size=os.stat(path).st_size,
            suffix=suffix,
        )

    def change_suffix(self, suffix: str) -> None:
        """Rename the segment's files to carry `suffix` instead of their current one (Kafka's
        LogSegment.changeFileSuffixes), each by an atomic rename, replacing a file of that name (a
        swapped-in segment takes over the name of the one it replaces). Index files not written
        yet are written first. The caller fsyncs the directory."""
        self.write_indexes()
        self.files.forget(self._log_key)
        # The transaction index first: a `.log.swap` found at start-up then finds the cleaned
        # segment's index already renamed (minibroker.storage.log_dir completes swaps).
        txn_path = txn_index_path(self.directory, self.base_offset, suffix)
        try:
            os.replace(self.txn_index.path, txn_path)
        except FileNotFoundError:
            pass
        self.txn_index.path = txn_path
        new_paths = segment_paths(self.directory, self.base_offset, suffix)
        for old, new in zip((self.log_path, self.index_path, self.time_index_path), new_paths):
            try:
                os.replace(old, new)
            except FileNotFoundError:
                if old == self.log_path:
                    raise
        self.suffix = suffix
        self.log_path, self.index_path, self.time_index_path = new_paths
        self._log_key = str(self.log_path)
        if self._offset_index is not None:
            self._offset_index.path = self.index_path
        if self._time_index is not None:
            self._time_index.path = self.time_index_path

    def load_inactive(self) -> None:
        """Cheap load for a segment that is not the last: trust its files (fsynced at roll), read
        only the time index's last entry for the largest timestamp. Missing or badly sized index
        files are rebuilt from the log."""
        last = TimeIndex.read_last_entry(self.time_index_path)
        index_ok = (
            self.index_path.exists() and os.stat(self.index_path).st_size % 8 == 0
        )
        if last is not None and not 0 <= last[1] < self.next_offset - self.base_offset:
            logger.warning("%s: its last entry (offset %d) lies outside the segment; rebuilding",
                           self.time_index_path, self.base_offset + last[1])
            last = None
        if last is None or not index_ok:
            if self.size == 0 and index_ok and self.time_index_path.exists():
                return
            self._rebuild_inactive()
            return
        self.max_timestamp = last[0]
        self.offset_of_max_timestamp = self.base_offset + last[1]

    def load_clean(self) -> bool:
        """Load the last segment after a clean shutdown: trust the indexes and check only the tail
        (the batches after the last offset-index entry, and the CRC of the last batch). False when
        the check fails: the caller then `recover`s the segment. An empty segment needs no index
        file (a new one has none until its first flush)."""
        self.active = True
        if self.size == 0:
            self._offset_index = OffsetIndex(self.index_path, self.base_offset, self.max_index_size)
            self._time_index = TimeIndex(self.time_index_path, self.base_offset, self.max_index_size)
            self.next_offset = self.base_offset
            return True
        offset_index = OffsetIndex.load(
            self.index_path, self.base_offset, self.max_index_size, self.size
        )
        time_index = TimeIndex.load(self.time_index_path, self.base_offset, self.max_index_size)
        if offset_index is not None and time_index is not None:
            self._offset_index, self._time_index = offset_index, time_index
            if self._check_tail():
                return True
        return False

    def _check_tail(self) -> bool:
        index = self.offset_index
        time_index = self.time_index
        indexed_offset, position = index.last_entry
        self.max_timestamp, self.offset_of_max_timestamp = time_index.last_entry
        expected_next: int | None = self.base_offset if len(index) == 0 else None
        last: BatchHeader | None = None
        for header in scan_headers(self._pread, position, self.size):
            if expected_next is None:
                if header.last_offset != indexed_offset:
                    return False
            elif header.base_offset < expected_next:  # (a cleaned segment has gaps: offsets only grow)
                return False
            expected_next = header.last_offset + 1
            if header.max_timestamp > self.max_timestamp:
                self.max_timestamp = header.max_timestamp
                self.offset_of_max_timestamp = header.last_offset
            last = header
        if last is None:
            if self.size != 0:
                return False
            self.next_offset = self.base_offset
        else:
            if last.position + last.size != self.size:
                return False
            batch = self._pread(last.size, last.position)
            if len(batch) != last.size or crc32c(memoryview(batch)[CRC_START:]) != last.crc:
                return False
            self.next_offset = last.last_offset + 1
        if time_index.last_entry[1] >= self.next_offset and len(time_index):
            return False
        if len(time_index) and not self._time_entry_matches(*time_index.last_entry):
            return False
        self.bytes_since_last_index_entry = self.size - position
        return True

    def recover(self) -> int:
        """Scan every batch from the start checking framing, magic, offsets and CRC; truncate the
        file at the first bad or torn batch and rebuild both indexes. Returns bytes truncated."""
        self.active = True
        truncated = self._rebuild(verify=True)
        self.txn_index.truncate_to(self.next_offset)  # markers cut off with their batches
        return truncated

    def rebuild_indexes(self, *, verify: bool = False) -> int:
        return self._rebuild(verify=verify)

    def _rebuild_inactive(self) -> None:
        self._rebuild(verify=False, truncate=False)
        if self.size:
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
        self.write_indexes()

    def _index_disagrees(self, what: str) -> None:
        """An index entry in use disagrees with the log: rebuild both indexes from the log."""
        logger.warning("%s: %s disagrees with the log; rebuilding the segment's indexes",
                       self.log_path, what)
        self._rebuild(verify=False, truncate=False)
        if not self.active:
            if self.size:
                self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
            self.write_indexes()

    def _rebuild(self, *, verify: bool, truncate: bool = True) -> int:
        """Rebuild both indexes from the log. `truncate` (recovery of the active segment): cut the
        file at the first bad batch; otherwise the file is never changed, and a scan that stops
        early (damage inside an old segment) is logged."""
        offset_index = OffsetIndex(self.index_path, self.base_offset, self.max_index_size)
        time_index = TimeIndex(self.time_index_path, self.base_offset, self.max_index_size)
        self.max_timestamp = NO_TIMESTAMP
        self.offset_of_max_timestamp = self.base_offset
        bytes_since = 0
        valid_end = 0
        next_offset = self.base_offset
        scan = scan_verified if verify else scan_headers
        for header in scan(self._pread, 0, self.size):
            if header.base_offset < next_offset:  # offsets grow; gaps are a cleaned segment's
                break
            if header.max_timestamp > self.max_timestamp:
                self.max_timestamp = header.max_timestamp
                self.offset_of_max_timestamp = header.last_offset
            if bytes_since > self.index_interval_bytes:
                offset_index.append(header.last_offset, header.position)
                time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
                bytes_since = 0
            bytes_since += header.size
            valid_end = header.position + header.size
            next_offset = header.last_offset + 1
        truncated = self.size - valid_end
        if truncated and not truncate:
            logger.error("%s: the batches after byte %d cannot be read; the file is left as it is",
                         self.log_path, valid_end)
            truncated = 0
        elif truncated:
            self._ftruncate(valid_end)
            self.size = valid_end
            self._dirty = True
        if truncate or valid_end == self.size:
            self.next_offset = next_offset
        self.bytes_since_last_index_entry = bytes_since
        self._offset_index, self._time_index = offset_index, time_index  # written at the next write
        return truncated

    # -- indexes --------------------------------------------------------------------------------

    @property
    def offset_index(self) -> OffsetIndex:
        if self._offset_index is None:
            index = OffsetIndex.load(
                self.index_path, self.base_offset, self.max_index_size, self.size,
                self.next_offset if self.next_offset > self.base_offset else None,
            )
            if index is None:
                self._rebuild_inactive()
            else:
                self._offset_index = index
        assert self._offset_index is not None
        return self._offset_index

    @property
    def time_index(self) -> TimeIndex:
        if self._time_index is None:
            index = TimeIndex.load(
                self.time_index_path, self.base_offset, self.max_index_size,
                self.next_offset if self.next_offset > self.base_offset else None,
            )
            if index is None:
                self._rebuild_inactive()
            else:
                self._time_index = index
        assert self._time_index is not None
        return self._time_index

    def write_indexes(self) -> None:
        """Write what the index files lack, best effort (no fsync): after a rebuild of an inactive
        segment's indexes, so the next load finds them. A failure is logged; the entries stay in
        memory and the next flush writes them."""
        for index in (self._offset_index, self._time_index):
            if index is not None and index.pending:
                try:
                    index.write()
                except OSError as exc:
                    logger.warning("%s: could not write the rebuilt index (%s); writing it at the "
                                   "next flush", index.path, exc)

    def indexes_full(self) -> bool:
        offset_index, time_index = self._offset_index, self._time_index
        if offset_index is None or time_index is None:  # not loaded yet (never the active segment's)
            return self.offset_index.is_full or self.time_index.is_full
        return offset_index.is_full or time_index.is_full

    # -- writing --------------------------------------------------------------------------------

    def append(
        self,
        buffers: Sequence[bytes | bytearray | memoryview],
        batches: Sequence[tuple[int, int, int]],
        total_size: int,
    ) -> None:
        """Write `buffers` (whole batches, offsets assigned) at the end of the segment and index
        them. `batches` gives (last_offset, max_timestamp, size) of each batch in order."""
        self._write(buffers, total_size)
        for last_offset, max_timestamp, size in batches:
            self._appended(last_offset, max_timestamp, size)

    def append_batch(self, buffers: Sequence[bytes | bytearray | memoryview], last_offset: int,
                     max_timestamp: int, size: int) -> None:
        """`append` of a single batch (`size` bytes ending at `last_offset`): a Produce request's
        partition, without the lists."""
        self._write(buffers, size)
        self._appended(last_offset, max_timestamp, size)

    def _write(self, buffers: Sequence[bytes | bytearray | memoryview], total_size: int) -> None:
        """Write `buffers` at the end of the file, all of them or none (an OSError leaves the
        segment as it was)."""
        if self._torn_tail:
            # A failed write left bytes past `size` that could not be cut then: cut them first (an
            # O_APPEND write would land after them), or fail again.
            self._ftruncate(self.size)
            self._torn_tail = False
        fd = self._acquire()
        try:
            write_fully(fd, buffers, total_size)
        except BaseException:
            # Never leave part of a batch behind: the next append would follow garbage. Reads
            # never see it meanwhile (they stop at `size`).
            try:
                os.ftruncate(fd, self.size)
            except OSError:
                self._torn_tail = True
            raise
        finally:
            self.files.release(self._log_key)
        self._dirty = True

    def _appended(self, last_offset: int, max_timestamp: int, size: int) -> None:
        """Account for the batch just written at `size` (its position): the largest timestamp, an
        index entry once more than index.interval.bytes were written since the last one, and the
        segment's size and next offset (which make it readable)."""
        if max_timestamp > self.max_timestamp:
            self.max_timestamp = max_timestamp
            self.offset_of_max_timestamp = last_offset
        position = self.size
        if self.bytes_since_last_index_entry > self.index_interval_bytes:
            self.offset_index.append(last_offset, position)
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
            self.bytes_since_last_index_entry = size
        else:
            self.bytes_since_last_index_entry += size
        self.size = position + size
        self.next_offset = last_offset + 1

    def on_become_inactive(self) -> None:
        """Kafka's onBecomeInactiveSegment: record the largest timestamp as the time index's last
        entry, then make everything durable (the segment is never written again)."""
        if self.size:
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
        self.flush()

    def mark_durable(self) -> None:
        """The file system was synced (see PartitionLog.prepare_clean_close)."""
        self._dirty = False
        for index in (self._offset_index, self._time_index):
            if index is not None:
                index.mark_durable()
        self.txn_index.mark_durable()

    def flush(self) -> None:
        """fsync the log file if it has unflushed data (reopening it if it was evicted), then write
        and fsync what the index files lack."""
        if self._dirty:
            fd = self._acquire()
            try:
                os.fsync(fd)
            finally:
                self.files.release(self._log_key)
            self._dirty = False
        if self._offset_index is not None:
            self._offset_index.flush()
        if self._time_index is not None:
            self._time_index.flush()
        self.txn_index.flush()

    def truncate_to(self, offset: int) -> int:
        """Remove the batch holding `offset` and all after it (Kafka's LogSegment.truncateTo).
        Returns the bytes removed."""
        position = self.find_position(offset)
        if position is None:
            return 0
        removed = self.size - position
        self._ftruncate(position)
        self.size = position
        self._dirty = True
        self.rebuild_indexes()
        self.txn_index.truncate_to(self.next_offset)
        return removed

    def close(self) -> None:
        """Give back the log file's descriptor. Nothing is written: a caller that wants the
        segment durable (a clean close) flushes it first; otherwise the files stay as a crash
        would leave them."""
        self.closed = True
        self.files.forget(self._log_key)

    def delete(self) -> None:
        self.close()
        for path in (self.log_path, self.index_path, self.time_index_path):
            unlink_if_exists(path)
        self.txn_index.delete()

    # -- reading --------------------------------------------------------------------------------

    def headers(self, position: int = 0) -> Iterator[BatchHeader]:
        """Headers of the batches from `position` to the current end; `position` fields are file
        positions in this segment."""
        return scan_headers(self._pread, position, self.size)

    def find_position(self, offset: int) -> int | None:
        """File position of the batch holding `offset`, or None when it is past this segment. The
        index entry used is checked against the first header the scan reads (see the module
        docstring); on disagreement the indexes are rebuilt and the lookup repeated."""
        for attempt in range(2):
            indexed_offset, position = self.offset_index.lookup(offset)
            verified = position == 0
            for header in scan_headers(self._pread, position, self.size):
                if not verified:
                    if header.last_offset != indexed_offset:
                        break
                    verified = True
                if header.last_offset >= offset:
                    return header.position
            else:
                if verified:
                    return None
            if attempt == 0:
                self._index_disagrees(f"offset index entry (offset {indexed_offset}, position {position})")
        return None

    def verify_max_timestamp(self) -> bool:
        """Whether `max_timestamp` (read from the time index) is that of the batch it names; if not,
        the indexes are rebuilt from the log (which corrects it) and False is returned."""
        if self.max_timestamp == NO_TIMESTAMP or not self.size:
            return True
        if self._time_entry_matches(self.max_timestamp, self.offset_of_max_timestamp):
            return True
        self._index_disagrees(f"the largest timestamp {self.max_timestamp} at offset {self.offset_of_max_timestamp}")
        return False

    def _time_entry_matches(self, timestamp: int, offset: int) -> bool:
        """Whether the batch whose last offset is `offset` has max timestamp `timestamp` (what a
        time-index entry claims)."""
        position = self.find_position(offset)
        if position is None:
            return False
        header = next(scan_headers(self._pread, position, self.size), None)
        return header is not None and header.last_offset == offset and header.max_timestamp == timestamp

    def read(self, position: int, max_bytes: int, *, min_one_batch: bool, end: int | None = None,
             view: bool = False) -> bytes | memoryview:
        """Whole batches from `position`, at most `max_bytes` of them unless `min_one_batch` and the
        first batch alone is bigger (then that batch, KIP-74); none at or past the file position
        `end` (a batch boundary: a read_committed fetch stops at the last stable offset's batch).
        `view`: a read cut short of `max_bytes` at the last whole batch is a view of what was read,
        not a copy (a second buffer of up to a megabyte, allocated while the first is alive, costs
        about seven times the read itself: the in-process follower's fetch asks for it)."""
        end = self.size if end is None else min(end, self.size)
        available = end - position
        if available <= 0:
            return b""
        data = self._pread(min(max_bytes, available), position) if max_bytes > 0 else b""
        whole = whole_batches_length(data)
        if whole == len(data) and whole:
            return data
        if whole:
            return memoryview(data)[:whole] if view else data[:whole]
        if not min_one_batch:
            return b""
        if len(data) >= LOG_OVERHEAD:
            _, length = OFFSET_AND_LENGTH.unpack_from(data)
        else:
            _, length = OFFSET_AND_LENGTH.unpack(self._pread(LOG_OVERHEAD, position))
        return self._pread(length + LOG_OVERHEAD, position)

    def read_batch(self, header: BatchHeader) -> bytes:
        return self._pread(header.size, header.position)

    def find_offset_by_timestamp(self, timestamp: int, start_offset: int) -> tuple[int, int] | None:
        """Kafka's LogSegment.findOffsetByTimestamp: (offset, timestamp) of the first record at or
        after `start_offset` whose timestamp is >= `timestamp`, or None. Only the batches whose max
        timestamp reaches the target are read record by record (see `first_record_at_or_after`)."""
        indexed_timestamp, indexed_offset = self.time_index.lookup(timestamp)
        if indexed_timestamp != NO_TIMESTAMP and not self._time_entry_matches(indexed_timestamp, indexed_offset):
            self._index_disagrees(f"time index entry (timestamp {indexed_timestamp}, offset {indexed_offset})")
            _, indexed_offset = self.time_index.lookup(timestamp)
        position = self.find_position(max(indexed_offset, start_offset))
        if position is None:
            return None
        for header in scan_headers(self._pread, position, self.size):
            if header.max_timestamp >= timestamp and header.last_offset >= start_offset:
                found = first_record_at_or_after(self.read_batch(header), header, timestamp, start_offset)
                if found is not None:
                    return found
        return None

    # -- the log file's descriptor, borrowed for one call -----------------------------------------

    def _acquire(self) -> int:
        if self.closed:  # a stale reference (its topic deleted, perhaps created again since)
            raise OSError(errno.EBADF, "the segment is closed", str(self.log_path))
        return self.files.acquire(self._log_key)

    def _pread(self, size: int, position: int) -> bytes:
        fd = self._acquire()
        try:
            return os.pread(fd, size, position)
        finally:
            self.files.release(self._log_key)

    def _ftruncate(self, length: int) -> None:
        fd = self._acquire()
        try:
            os.ftruncate(fd, length)
        finally:
            self.files.release(self._log_key)
