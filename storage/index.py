"""Sparse per-segment indexes: `OffsetIndex` (offset -> file position) and `TimeIndex` (timestamp -> offset).

Same roles and file layouts as Kafka's `OffsetIndex` and `TimeIndex`, without the mmap and
preallocation: entries live in memory (two parallel `array`s, searched with bisect) and reach the file
lazily, when the segment is flushed (flush.messages, flush.ms), rolled or closed cleanly, through a
descriptor opened for that write and closed after it (docs/storage.md: an index holds no descriptor between
writes). Between writes the file holds a prefix of the entries in memory, which is all it needs to
be: the active segment's indexes are rebuilt from the log after an unclean shutdown anyway (Kafka
too), and an inactive segment's were written and fsynced when it was rolled.

* `.index`: entries of (relative offset i32, file position i32), big-endian, 8 bytes. The offset is a
  batch's LAST offset (as Kafka's LogSegment.append writes it) at the batch's start position, added
  once more than `index.interval.bytes` of log were written since the previous entry.
* `.timeindex`: entries of (timestamp i64, relative offset i32), 12 bytes: "the largest timestamp so
  far is T, first reached by the batch whose last offset is O". Only appended when T grows; a final
  entry is written when the segment stops being active (roll, clean close) so that the last entry
  gives the segment's largest timestamp without a scan.

A write appends the entries the file lacks, or rewrites the whole file (O_TRUNC, then the entries)
after a truncation or a rebuild; either way a crash leaves a prefix of whole entries plus at most one
torn entry, which the load check refuses. A write that fails (disk full, out of descriptors) leaves
the entries in memory and the file to be rewritten whole at the next write.

Indexes are loaded lazily (a clean open reads nothing but the active segment's), checked on load
as Kafka's sanityCheck does, and more strictly (`load` returns None when the file fails, and the
segment rebuilds it from the log): whole entries only; offsets (and positions, and timestamps) in
order; every entry inside the segment (offsets from the base offset up to, not including, the
segment's next offset when it is known; positions inside the log file). An index can pass all that
and still be wrong (a plausible file that belongs to other data); the segment therefore also checks
each entry it uses against the batch header it points at (minibroker.storage.segment).
"""

from __future__ import annotations

import logging
import os
import sys
from array import array
from bisect import bisect_right
from pathlib import Path
import struct

logger = logging.getLogger(__name__)

OFFSET_ENTRY = struct.Struct(">ii")
TIME_ENTRY = struct.Struct(">qi")
NO_TIMESTAMP = -1

_BIG_ENDIAN_HOST = sys.byteorder == "big"


class _Index:
    entry: struct.Struct
    _relative_offsets: array

    def __init__(self, path: Path, base_offset: int, max_index_size: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self.max_entries = max(1, max_index_size // self.entry.size)
        self._on_disk: int | None = None  # entries the file holds (a prefix); None: rewrite it whole
        self._unsynced = False  # written since the last fsync

    # -- file handling ------------------------------------------------------------------------

    @property
    def pending(self) -> bool:
        """Whether the file lacks entries that are in memory (or must be rewritten)."""
        return self._on_disk is None or self._on_disk < len(self)

    def write(self, *, fsync: bool = False) -> None:
        """Bring the file up to the entries in memory (appending, or rewriting it whole); `fsync`:
        make it durable too. Raises OSError; the file is then rewritten whole at the next write."""
        on_disk = self._on_disk
        if on_disk is not None and on_disk >= len(self) and not (fsync and self._unsynced):
            return
        count = len(self)
        rewrite = on_disk is None
        flags = os.O_WRONLY | os.O_CREAT | (os.O_TRUNC if rewrite else os.O_APPEND)
        fd = os.open(self.path, flags | getattr(os, "O_CLOEXEC", 0), 0o644)
        self._on_disk = None  # until the write below is complete
        try:
            view = memoryview(self._serialize(0 if on_disk is None else on_disk))
            while view:  # os.write may write less than asked
                view = view[os.write(fd, view):]
            if fsync:
                os.fsync(fd)
        finally:
            os.close(fd)
        self._on_disk = count
        self._unsynced = not fsync

    def flush(self) -> None:
        self.write(fsync=True)

    def mark_durable(self) -> None:
        """The file system was synced: what the file holds needs no fsync of its own."""
        self._unsynced = False

    def close(self) -> None:
        """Write what the file lacks (no fsync). The entries stay in memory."""
        self.write()

    def delete(self) -> None:
        self._on_disk = None
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass

    def _loaded(self) -> None:
        """The entries in memory are exactly the file's (just read from it)."""
        self._on_disk = len(self)

    def _serialize(self, start: int) -> bytes:
        """The file's bytes of the entries from `start` on."""
        raise NotImplementedError

    def __len__(self) -> int:
        raise NotImplementedError

    @property
    def is_full(self) -> bool:
        # Both kinds keep an array of relative offsets, one per entry: its length without the
        # Python-level __len__ (checked before every append, by the roll decision).
        return len(self._relative_offsets) >= self.max_entries


class OffsetIndex(_Index):
    """Sparse map from offset to the file position of a batch, for one segment."""

    entry = OFFSET_ENTRY

    def __init__(self, path: Path, base_offset: int, max_index_size: int) -> None:
        super().__init__(path, base_offset, max_index_size)
        self._relative_offsets = array("i")
        self._positions = array("i")

    @classmethod
    def load(
        cls, path: Path, base_offset: int, max_index_size: int, log_size: int,
        next_offset: int | None = None,
    ) -> OffsetIndex | None:
        """Read an index file; None when it is missing or fails the sanity check. `next_offset`,
        when known, bounds the entries' offsets (Kafka: the last offset must lie inside the log)."""
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None
        if len(data) % OFFSET_ENTRY.size:
            return None
        index = cls(path, base_offset, max_index_size)
        flat = array("i")
        flat.frombytes(data)
        if not _BIG_ENDIAN_HOST:
            flat.byteswap()
        offsets, positions = flat[0::2], flat[1::2]
        if not _strictly_increasing(offsets) or not _strictly_increasing(positions):
            return None
        if offsets and (offsets[0] < 0 or positions[0] < 0 or positions[-1] >= log_size):
            return None
        if offsets and next_offset is not None and base_offset + offsets[-1] >= next_offset:
            return None
        index._relative_offsets, index._positions = offsets, positions
        index._loaded()
        return index

    def __len__(self) -> int:
        return len(self._relative_offsets)

    def _serialize(self, start: int) -> bytes:
        flat = array("i", bytes(8 * (len(self._positions) - start)))
        flat[0::2] = self._relative_offsets[start:]
        flat[1::2] = self._positions[start:]
        if not _BIG_ENDIAN_HOST:
            flat.byteswap()
        return flat.tobytes()

    def lookup(self, target_offset: int) -> tuple[int, int]:
        """(offset, position) of the largest entry with offset <= target, else (base_offset, 0)."""
        i = bisect_right(self._relative_offsets, target_offset - self.base_offset) - 1
        if i < 0:
            return self.base_offset, 0
        return self.base_offset + self._relative_offsets[i], self._positions[i]

    @property
    def last_entry(self) -> tuple[int, int]:
        if not self._positions:
            return self.base_offset, 0
        return self.base_offset + self._relative_offsets[-1], self._positions[-1]

    def entries(self) -> list[tuple[int, int]]:
        return [(self.base_offset + o, p) for o, p in zip(self._relative_offsets, self._positions)]

    def append(self, offset: int, position: int) -> None:
        relative = offset - self.base_offset
        if self._relative_offsets and relative <= self._relative_offsets[-1]:
            raise ValueError(f"offset index entry {offset} is not above the last entry")
        if relative < 0 or relative > 0x7FFFFFFF:
            raise ValueError(f"offset {offset} is out of range for base offset {self.base_offset}")
        self._relative_offsets.append(relative)
        self._positions.append(position)

    def truncate_to(self, offset: int) -> None:
        """Drop every entry whose offset is >= `offset` (Kafka's OffsetIndex.truncateTo)."""
        keep = bisect_right(self._relative_offsets, offset - self.base_offset - 1)
        if keep < len(self._relative_offsets):
            del self._relative_offsets[keep:]
            del self._positions[keep:]
            if self._on_disk is not None and self._on_disk > keep:
                self._on_disk = None


class TimeIndex(_Index):
    """Sparse map from timestamp to offset, for one segment."""

    entry = TIME_ENTRY

    def __init__(self, path: Path, base_offset: int, max_index_size: int) -> None:
        super().__init__(path, base_offset, max_index_size)
        self._timestamps = array("q")
        self._relative_offsets = array("i")

    @classmethod
    def load(
        cls, path: Path, base_offset: int, max_index_size: int, next_offset: int | None = None
    ) -> TimeIndex | None:
        """Read a time index file; None when it is missing or fails the sanity check."""
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None
        if len(data) % TIME_ENTRY.size:
            return None
        index = cls(path, base_offset, max_index_size)
        timestamps, offsets = index._timestamps, index._relative_offsets
        for timestamp, relative in TIME_ENTRY.iter_unpack(data):
            timestamps.append(timestamp)
            offsets.append(relative)
        if not _non_decreasing(timestamps) or not _non_decreasing(offsets):
            return None
        if offsets and offsets[0] < 0:
            return None
        if offsets and next_offset is not None and base_offset + offsets[-1] >= next_offset:
            return None
        index._loaded()
        return index

    @staticmethod
    def read_last_entry(path: Path) -> tuple[int, int] | None:
        """(timestamp, relative offset) of the file's last entry without loading it, or None when
        the file is missing, empty or not a whole number of entries."""
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            return None
        try:
            size = os.fstat(fd).st_size
            if size == 0 or size % TIME_ENTRY.size:
                return None
            return TIME_ENTRY.unpack(os.pread(fd, TIME_ENTRY.size, size - TIME_ENTRY.size))
        finally:
            os.close(fd)

    def __len__(self) -> int:
        return len(self._timestamps)

    def _serialize(self, start: int) -> bytes:
        return b"".join(
            TIME_ENTRY.pack(t, o)
            for t, o in zip(self._timestamps[start:], self._relative_offsets[start:])
        )

    def lookup(self, target_timestamp: int) -> tuple[int, int]:
        """(timestamp, offset) of the largest entry with timestamp <= target, else
        (NO_TIMESTAMP, base_offset)."""
        i = bisect_right(self._timestamps, target_timestamp) - 1
        if i < 0:
            return NO_TIMESTAMP, self.base_offset
        return self._timestamps[i], self.base_offset + self._relative_offsets[i]

    @property
    def last_entry(self) -> tuple[int, int]:
        if not self._timestamps:
            return NO_TIMESTAMP, self.base_offset
        return self._timestamps[-1], self.base_offset + self._relative_offsets[-1]

    def entries(self) -> list[tuple[int, int]]:
        return [(t, self.base_offset + o) for t, o in zip(self._timestamps, self._relative_offsets)]

    def maybe_append(self, timestamp: int, offset: int) -> bool:
        """Append (timestamp, offset) if the timestamp is above the last entry's; True if added."""
        if self._timestamps and timestamp <= self._timestamps[-1]:
            return False
        relative = offset - self.base_offset
        if self._relative_offsets and relative < self._relative_offsets[-1]:
            raise ValueError(f"time index offset {offset} is below the last entry")
        if relative < 0 or relative > 0x7FFFFFFF:
            raise ValueError(f"offset {offset} is out of range for base offset {self.base_offset}")
        self._timestamps.append(timestamp)
        self._relative_offsets.append(relative)
        return True

    def truncate_to(self, offset: int) -> None:
        """Drop every entry whose offset is >= `offset` (Kafka's TimeIndex.truncateTo)."""
        relative = offset - self.base_offset
        keep = len(self._relative_offsets)
        while keep and self._relative_offsets[keep - 1] >= relative:
            keep -= 1
        if keep < len(self._relative_offsets):
            del self._timestamps[keep:]
            del self._relative_offsets[keep:]
            if self._on_disk is not None and self._on_disk > keep:
                self._on_disk = None


def _strictly_increasing(values: array) -> bool:
    return all(a < b for a, b in zip(values, values[1:]))


def _non_decreasing(values: array) -> bool:
    return all(a <= b for a, b in zip(values, values[1:]))
