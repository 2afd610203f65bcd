"""A bounded set of open segment files: at most `capacity` descriptors, least recently used closed
first, reopened on demand (docs/storage.md, "Partitions and file descriptors").

Kafka keeps every segment's files open (and its indexes mmapped) for the life of the log, and asks
its users to raise the descriptor limit. A test broker should not: here a partition's `.log` files
are opened when they are used and stay open only while they are among the `capacity` most recently
used, so ten thousand idle partitions hold no descriptor at all. The index files hold none either:
their entries live in memory (minibroker.storage.index) and are written at a flush, a roll or a clean close,
through a descriptor opened for that write and closed after it.

Every use of a descriptor is bracketed, `fd = cache.acquire(path)` ... `cache.release(path)`: while
acquired (pinned) a file is never closed, so a descriptor number cannot be closed and reused for
another file between a lookup and the `os.pread` that uses it (generators re-acquire for every
read, never across a `yield`). All I/O is positional (`os.pread`, and `os.writev` on an O_APPEND
descriptor), so a reopened file needs no seek state.

Closing a file evicted from the cache does not fsync it: what was written went to the OS with
`os.writev` before the append was acknowledged, closing loses none of it, and the segment itself
remembers that it has unflushed data: its next flush (flush.messages, flush.ms, a roll, a clean
close) opens the file again and fsyncs it (on Linux fsync writes back the file's dirty pages,
whichever descriptor wrote them). So eviction costs a close, and a reopen an open (microseconds).

Descriptors are drawn from a `minibroker.storage.descriptors` budget share when one is given. When none can
be had (the share is at its cap, the budget is full, or the kernel says EMFILE/ENFILE because
something outside the budget holds descriptors), the least recently used unpinned file is closed
and the open tried again; when no file is left to close, the open fails with an OSError(EMFILE)
whose message says what holds the descriptors: the caller answers KAFKA_STORAGE_ERROR for that
partition, as for any storage error, and nothing else fails.

Thread-safe: start-up recovery reads segments from several threads.
"""

from __future__ import annotations

import errno
import logging
import os
import threading
from collections import OrderedDict

from minibroker.storage.descriptors import Share

logger = logging.getLogger(__name__)

# Segment files are opened for appending (the active one) and positional reads (all of them); the
# same mode for every segment lets one cached descriptor serve a segment before and after its roll.
OPEN_FLAGS = os.O_RDWR | os.O_APPEND | getattr(os, "O_CLOEXEC", 0)
CREATE_FLAGS = OPEN_FLAGS | os.O_CREAT | os.O_TRUNC
_OUT_OF_DESCRIPTORS = (errno.EMFILE, errno.ENFILE)


class _Entry:
    __slots__ = ("fd", "pins", "doomed")

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.pins = 0
        self.doomed = False  # forgotten while pinned: closed at the last release


class FileCache:
    """Open descriptors by path, least recently used first (see the module docstring)."""

    def __init__(self, capacity: int, share: Share | None = None) -> None:
        if capacity < 1:
            raise ValueError(f"the open-file cache needs a capacity of at least 1, not {capacity}")
        self.capacity = capacity
        self.share = share
        self._open: OrderedDict[str, _Entry] = OrderedDict()
        self._lock = threading.Lock()
        # Counters for metrics and benchmarks.
        self.hits = 0
        self.opens = 0
        self.evictions = 0

    def __len__(self) -> int:
        return len(self._open)

    def __contains__(self, path: object) -> bool:
        return str(path) in self._open

    # -- use --------------------------------------------------------------------------------------

    def acquire(self, path: os.PathLike | str, *, create: bool = False) -> int:
        """The open descriptor of `path`, pinned until `release(path)`. Opens it (O_RDWR|O_APPEND)
        when it is not open, closing the least recently used file first when the cache is full.
        `create`: make a new, empty file (O_CREAT|O_TRUNC). Raises OSError when it cannot be opened."""
        key = path if path.__class__ is str else str(path)
        # lock.acquire()/release() rather than `with`: half the cost, and this runs twice per
        # append and per read.
        lock = self._lock
        lock.acquire()
        try:
            entry = self._open.get(key)
            if entry is not None:
                if not create:
                    self._open.move_to_end(key)
                    entry.pins += 1
                    self.hits += 1
                    return entry.fd
                if entry.pins > 0:
                    raise RuntimeError(f"{key} is created again while in use")
                del self._open[key]
                self._close(entry)
            fd = self._open_new(key, CREATE_FLAGS if create else OPEN_FLAGS)
            entry = _Entry(fd)
            entry.pins = 1
            self._open[key] = entry
            self.opens += 1
            return fd
        finally:
            lock.release()

    def release(self, path: os.PathLike | str) -> None:
        key = path if path.__class__ is str else str(path)
        lock = self._lock
        lock.acquire()
        try:
            entry = self._open.get(key)
            if entry is None:
                return
            entry.pins -= 1
            if entry.doomed and entry.pins <= 0:
                del self._open[key]
                self._close(entry)
        finally:
            lock.release()

    def forget(self, path: os.PathLike | str) -> None:
        """Close `path` if it is open (before it is deleted, renamed or the log closed)."""
        key = str(path)
        with self._lock:
            entry = self._open.get(key)
            if entry is None:
                return
            if entry.pins > 0:
                entry.doomed = True
                return
            del self._open[key]
            self._close(entry)

    def reclaim(self) -> bool:
        """Close the least recently used unpinned file, for another share of the budget (the
        connections). Never waits: a cache busy in another thread gives nothing this time."""
        if not self._lock.acquire(blocking=False):
            return False
        try:
            return self._evict_one()
        finally:
            self._lock.release()

    def close_all(self) -> None:
        with self._lock:
            for key in [k for k, e in self._open.items() if e.pins <= 0]:
                self._close(self._open.pop(key))

    def open_paths(self) -> list[str]:
        """The open files, least recently used first (for tests and diagnostics)."""
        with self._lock:
            return list(self._open)

    # -- inside the lock ---------------------------------------------------------------------------

    def _open_new(self, key: str, flags: int) -> int:
        while len(self._open) >= self.capacity:
            if not self._evict_one():
                break  # every open file is pinned (threads mid-read): the budget is the hard bound
        share = self.share
        if share is not None:
            while not share.try_acquire():
                if not self._evict_one():
                    raise self._exhausted(key)
        while True:
            try:
                return os.open(key, flags, 0o644)
            except OSError as exc:
                if exc.errno in _OUT_OF_DESCRIPTORS and self._evict_one():
                    continue  # the process table is fuller than the budget knew: make room
                if share is not None:
                    share.release()
                if exc.errno in _OUT_OF_DESCRIPTORS:
                    raise self._exhausted(key) from exc
                raise

    def _evict_one(self) -> bool:
        for key, entry in self._open.items():
            if entry.pins <= 0:
                del self._open[key]
                self._close(entry)
                self.evictions += 1
                return True
        return False

    def _close(self, entry: _Entry) -> None:
        try:
            os.close(entry.fd)
        except OSError as exc:  # EIO from a deferred write-back: the segment's next fsync reports it
            logger.warning("closing a segment file failed: %s", exc)
        finally:
            if self.share is not None:
                self.share.release()

    def _exhausted(self, key: str) -> OSError:
        where = self.share.budget.describe() if self.share is not None else f"{len(self._open)} open"
        return OSError(
            errno.EMFILE,
            f"out of file descriptors ({where}; the {len(self._open)} open segment files are all "
            f"in use); raise the process's limit (ulimit -n)",
            key,
        )
