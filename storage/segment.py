"""One log segment: a `.log` file of record batches plus its `.index` and `.timeindex` (Kafka's LogSegment).

The `.log` file holds v2 record batches exactly as produced, with their offsets assigned. Its name is
the segment's base offset (the first offset it may hold) padded to 20 digits; the index files share
the name. Writes go through `os.writev` on an O_APPEND descriptor (data reaches the OS before the
append returns), reads through `os.pread` bounded by the size of the whole batches written so far, so
a read never sees a half-written batch.

A segment holds no descriptor of its own: it borrows its `.log` file's from the log's
`storage.file_cache.FileCache` for each system call (opened on demand, closed when least recently
used: issue 21), and its indexes are written lazily (storage.index). Whether the file has data not
yet fsynced is the segment's to remember (`_dirty`), not the descriptor's, so closing an evicted
descriptor never loses a flush that is due.

Indexes are checked against the log (issue 11: a plausible but wrong index made fetches skip
records silently): on load, Kafka's sanity checks and more (storage.index); and every entry a lookup
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

from protocol.records import (
    BATCH_HEADER,
    CRC_START,
    HEADER_SIZE,
    LOG_OVERHEAD,
    OFFSET_AND_LENGTH,
    BatchHeader,
    InvalidRecordError,
    record_timestamps,
)
from protocol.compression import CODEC_NAMES, DecompressionLimitError
from storage.file_cache import FileCache
from storage.index import NO_TIMESTAMP, OffsetIndex, TimeIndex

logger = logging.getLogger(__name__)

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"

MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD  # batchLength of a batch with no record bytes
HEADER_SCAN_CHUNK = 64 * 1024  # read-ahead when walking headers (most batches are small)
RECOVERY_CHUNK = 4 * 1024 * 1024  # read-ahead when checking CRCs (every byte is read anyway)
IOV_MAX = 1024


def segment_name(base_offset: int) -> str:
    return f"{base_offset:020d}"


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
    ) -> None:
        name = segment_name(base_offset)
        self.directory = directory
        self.base_offset = base_offset
        self.log_path = directory / (name + LOG_SUFFIX)
        self.index_path = directory / (name + INDEX_SUFFIX)
        self.time_index_path = directory / (name + TIME_INDEX_SUFFIX)
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
        segment.active = True
        return segment

    @classmethod
    def open(
        cls, directory: Path, base_offset: int, *, index_interval_bytes: int, max_index_size: int,
        files: FileCache,
    ) -> LogSegment:
        """An existing segment, read nothing of (see `load_inactive` / `load_clean` / `recover`);
        no descriptor is opened until it is used."""
        path = directory / (segment_name(base_offset) + LOG_SUFFIX)
        return cls(
            directory,
            base_offset,
            index_interval_bytes=index_interval_bytes,
            max_index_size=max_index_size,
            files=files,
            size=os.stat(path).st_size,
        )

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
        for header in self._scan_headers(position, self.size):
            if expected_next is None:
                if header.last_offset != indexed_offset:
                    return False
            elif header.base_offset != expected_next:
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
        return self._rebuild(verify=True)

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
        scan = self._scan_verified if verify else self._scan_headers
        for header in scan(0, self.size):
            if header.base_offset != next_offset:
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
        return self.offset_index.is_full or self.time_index.is_full

    # -- writing --------------------------------------------------------------------------------

    def append(
        self,
        buffers: Sequence[bytes | bytearray | memoryview],
        batches: Sequence[tuple[int, int, int]],
        total_size: int,
    ) -> None:
        """Write `buffers` (whole batches, offsets assigned) at the end of the segment and index
        them. `batches` gives (last_offset, max_timestamp, size) of each batch in order."""
        start = self.size
        if self._torn_tail:
            # A failed write left bytes past `size` that could not be cut then: cut them first (an
            # O_APPEND write would land after them), or fail again.
            self._ftruncate(start)
            self._torn_tail = False
        fd = self._acquire()
        try:
            _write_fully(fd, buffers, total_size)
        except BaseException:
            # Never leave part of a batch behind: the next append would follow garbage. Reads
            # never see it meanwhile (they stop at `size`).
            try:
                os.ftruncate(fd, start)
            except OSError:
                self._torn_tail = True
            raise
        finally:
            self.files.release(self.log_path)
        self._dirty = True
        offset_index = self.offset_index
        time_index = self.time_index
        position = start
        for last_offset, max_timestamp, size in batches:
            if max_timestamp > self.max_timestamp:
                self.max_timestamp = max_timestamp
                self.offset_of_max_timestamp = last_offset
            if self.bytes_since_last_index_entry > self.index_interval_bytes:
                offset_index.append(last_offset, position)
                time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
                self.bytes_since_last_index_entry = 0
            position += size
            self.bytes_since_last_index_entry += size
        self.size = position
        self.next_offset = batches[-1][0] + 1

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

    def flush(self) -> None:
        """fsync the log file if it has unflushed data (reopening it if it was evicted), then write
        and fsync what the index files lack."""
        if self._dirty:
            fd = self._acquire()
            try:
                os.fsync(fd)
            finally:
                self.files.release(self.log_path)
            self._dirty = False
        if self._offset_index is not None:
            self._offset_index.flush()
        if self._time_index is not None:
            self._time_index.flush()

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
        return removed

    def close(self) -> None:
        """Give back the log file's descriptor. Nothing is written: a caller that wants the
        segment durable (a clean close) flushes it first; otherwise the files stay as a crash
        would leave them."""
        self.closed = True
        self.files.forget(self.log_path)

    def delete(self) -> None:
        self.close()
        for path in (self.log_path, self.index_path, self.time_index_path):
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass

    # -- reading --------------------------------------------------------------------------------

    def headers(self, position: int = 0) -> Iterator[BatchHeader]:
        """Headers of the batches from `position` to the current end; `position` fields are file
        positions in this segment."""
        return self._scan_headers(position, self.size)

    def find_position(self, offset: int) -> int | None:
        """File position of the batch holding `offset`, or None when it is past this segment. The
        index entry used is checked against the first header the scan reads (see the module
        docstring); on disagreement the indexes are rebuilt and the lookup repeated."""
        for attempt in range(2):
            indexed_offset, position = self.offset_index.lookup(offset)
            verified = position == 0
            for header in self._scan_headers(position, self.size):
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
        header = next(self._scan_headers(position, self.size), None)
        return header is not None and header.last_offset == offset and header.max_timestamp == timestamp

    def read(self, position: int, max_bytes: int, *, min_one_batch: bool) -> bytes:
        """Whole batches from `position`, at most `max_bytes` of them unless `min_one_batch` and the
        first batch alone is bigger (then that batch, KIP-74)."""
        end = self.size
        available = end - position
        if available <= 0:
            return b""
        data = self._pread(min(max_bytes, available), position) if max_bytes > 0 else b""
        whole = _whole_batches_length(data)
        if whole == len(data) and whole:
            return data
        if whole:
            return data[:whole]
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
        for header in self._scan_headers(position, self.size):
            if header.max_timestamp >= timestamp and header.last_offset >= start_offset:
                found = first_record_at_or_after(self.read_batch(header), header, timestamp, start_offset)
                if found is not None:
                    return found
        return None

    # -- the log file's descriptor, borrowed for one call -----------------------------------------

    def _acquire(self) -> int:
        if self.closed:  # a stale reference (its topic deleted, perhaps created again since)
            raise OSError(errno.EBADF, "the segment is closed", str(self.log_path))
        return self.files.acquire(self.log_path)

    def _pread(self, size: int, position: int) -> bytes:
        fd = self._acquire()
        try:
            return os.pread(fd, size, position)
        finally:
            self.files.release(self.log_path)

    def _ftruncate(self, length: int) -> None:
        fd = self._acquire()
        try:
            os.ftruncate(fd, length)
        finally:
            self.files.release(self.log_path)

    # -- scanning -------------------------------------------------------------------------------

    def _scan_headers(self, start: int, end: int) -> Iterator[BatchHeader]:
        """Headers of the well-framed batches in [start, end), stopping at the first malformed or
        torn one (no CRC check: this is data the broker wrote and already checked). The descriptor
        is borrowed for each read, never across a `yield`."""
        position = start
        buf = b""
        buf_start = start
        while position + HEADER_SIZE <= end:
            relative = position - buf_start
            if relative < 0 or relative + HEADER_SIZE > len(buf):
                buf = self._pread(min(HEADER_SCAN_CHUNK, end - position), position)
                buf_start, relative = position, 0
                if len(buf) < HEADER_SIZE:
                    return
            fields = BATCH_HEADER.unpack_from(buf, relative)
            length = fields[1]
            if length < MIN_BATCH_LENGTH or fields[3] != 2 or position + length + LOG_OVERHEAD > end:
                return
            yield BatchHeader(position, *fields)
            position += length + LOG_OVERHEAD

    def _scan_verified(self, start: int, end: int) -> Iterator[BatchHeader]:
        """Like `_scan_headers`, but reads every batch and stops at the first CRC mismatch."""
        position = start
        buf = b""
        buf_start = start
        while position + HEADER_SIZE <= end:
            relative = position - buf_start
            if relative + HEADER_SIZE > len(buf):
                buf = self._pread(min(RECOVERY_CHUNK, end - position), position)
                buf_start, relative = position, 0
                if len(buf) < HEADER_SIZE:
                    return
            fields = BATCH_HEADER.unpack_from(buf, relative)
            length = fields[1]
            size = length + LOG_OVERHEAD
            if length < MIN_BATCH_LENGTH or fields[3] != 2 or position + size > end:
                return
            if relative + size > len(buf):
                buf = self._pread(max(size, min(RECOVERY_CHUNK, end - position)), position)
                buf_start, relative = position, 0
                if len(buf) < size:
                    return
            if crc32c(memoryview(buf)[relative + CRC_START : relative + size]) != fields[4]:
                return
            yield BatchHeader(position, *fields)
            position += size


def _whole_batches_length(data: bytes) -> int:
    """Length of the prefix of `data` made of whole batches."""
    end = len(data)
    position = 0
    unpack = OFFSET_AND_LENGTH.unpack_from
    while position + LOG_OVERHEAD <= end:
        _, length = unpack(data, position)
        if length < MIN_BATCH_LENGTH:
            break
        next_position = position + length + LOG_OVERHEAD
        if next_position > end:
            break
        position = next_position
    return position


def _write_fully(fd: int, buffers: Sequence[bytes | bytearray | memoryview], total: int) -> None:
    if len(buffers) <= IOV_MAX:
        written = os.writev(fd, buffers)
        if written == total:
            return
    else:
        written = 0
        for i in range(0, len(buffers), IOV_MAX):
            group = buffers[i : i + IOV_MAX]
            expected = sum(len(b) for b in group)
            n = os.writev(fd, group)
            written += n
            if n != expected:
                break
        if written == total:
            return
    # A short write (rare: a signal, a full disk): finish the rest from a flat copy.
    rest = memoryview(b"".join(bytes(b) for b in buffers))[written:]
    while rest:
        n = os.write(fd, rest)
        if n <= 0:
            raise OSError("short write to the log")
        rest = rest[n:]


# -- record-level helpers (only for ListOffsets by timestamp, never on the produce/fetch path) ----

# A compressed batch is decompressed whole to find one record in it; one that would grow past this
# is answered at batch granularity instead (with a warning), so no batch costs unbounded memory.
MAX_DECOMPRESSED_BATCH_BYTES = 64 * 1024 * 1024


def _records(batch: bytes, header: BatchHeader) -> Iterator[tuple[int, int]] | None:
    """(offset, timestamp) of each record of `batch`, or None when they cannot be read (logged)."""
    try:
        return iter(list(record_timestamps(batch, max_decompressed=MAX_DECOMPRESSED_BATCH_BYTES)))
    except (InvalidRecordError, DecompressionLimitError) as exc:
        logger.warning(
            "batch at offsets %d-%d (%s): records not readable, answering at batch granularity: %s",
            header.base_offset, header.last_offset, CODEC_NAMES.get(header.compression, "?"), exc,
        )
        return None


def first_record_at_or_after(
    batch: bytes, header: BatchHeader, timestamp: int, start_offset: int
) -> tuple[int, int] | None:
    """Kafka's FileRecords.searchForTimestamp within one batch: (offset, timestamp) of its first
    record with timestamp >= `timestamp` and offset >= `start_offset`, None when it has none.
    Compressed batches are decompressed (this one batch only); a LogAppendTime batch's records all
    carry its max timestamp."""
    records = _records(batch, header)
    if records is None:
        if header.max_timestamp >= timestamp and header.last_offset >= start_offset:
            return max(header.base_offset, start_offset), header.max_timestamp
        return None
    for record_offset, record_timestamp in records:
        if record_timestamp >= timestamp and record_offset >= start_offset:
            return record_offset, record_timestamp
    return None


def record_with_timestamp(batch: bytes, header: BatchHeader, timestamp: int) -> int:
    """Kafka's RecordBatch.offsetOfMaxTimestamp: the offset of the first record of `batch` carrying
    `timestamp` (the batch's max timestamp), for ListOffsets MAX_TIMESTAMP; the batch's base offset
    when its records cannot be read."""
    for record_offset, record_timestamp in _records(batch, header) or ():
        if record_timestamp == timestamp:
            return record_offset
    return header.base_offset
