"""The transaction index of one segment, `<base offset>.txnindex` (Kafka's TransactionIndex).

One 34-byte entry per aborted transaction whose ABORT marker lies in the segment, in marker order
(Kafka's AbortedTxn, version 0, big-endian):

    version i16 (0) | producer id i64 | first offset i64 | last offset i64 | last stable offset i64

`first offset` is the transaction's first batch (perhaps in an older segment), `last offset` its
marker's offset, `last stable offset` the partition's LSO once the marker was appended (the first
offset of the oldest transaction still open, else the marker's offset + 1). A read_committed fetch
asks each segment from the one it reads onwards for the entries overlapping the range it returns,
and stops at the first entry whose last stable offset reaches the range's end
(`collect`, Kafka's collectAbortedTxns).

Entries are written as they are appended (one write, O_APPEND, so a killed broker keeps them) and
fsynced with the segment. A file that does not check out (a size that is not a multiple of 34, a
version other than 0, an entry outside the segment or out of order) raises CorruptTxnIndex when it
is loaded; the log then rebuilds it from the log itself (minibroker.storage.log), never guessing around it.
Pure file handling: no clock, no trio.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

from minibroker.storage.files import unlink_if_exists
from minibroker.storage.producer_state.txns import AbortedTxn

__all__ = ["ENTRY_SIZE", "TXN_INDEX_SUFFIX", "CorruptTxnIndex", "TransactionIndex"]

TXN_INDEX_SUFFIX = ".txnindex"
_ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE = _ENTRY.size
assert ENTRY_SIZE == 34
VERSION = 0


class CorruptTxnIndex(Exception):
    """The file cannot be trusted; the message says why (the caller names the file)."""


class TransactionIndex:
    """The entries of one segment's `.txnindex`, read at their first use and kept in memory."""

    def __init__(self, path: Path, base_offset: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self._entries: list[AbortedTxn] | None = None  # None until loaded
        self._dirty = False

    @classmethod
    def empty(cls, path: Path, base_offset: int) -> TransactionIndex:
        """A new segment's index: no file until its first entry."""
        index = cls(path, base_offset)
        index._entries = []
        return index

    @property
    def loaded(self) -> bool:
        return self._entries is not None

    def entries(self, next_offset: int | None = None) -> list[AbortedTxn]:
        """The entries (loaded, and checked, at the first call). `next_offset`: the offset after
        the segment's last batch, which every entry's marker lies below. CorruptTxnIndex when the
        file does not check out."""
        if self._entries is None:
            self._entries = self._read(next_offset)
        return self._entries

    def _read(self, next_offset: int | None) -> list[AbortedTxn]:
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return []
        if len(data) % ENTRY_SIZE:
            raise CorruptTxnIndex(f"{len(data)} bytes, not a whole number of {ENTRY_SIZE}-byte entries")
        entries = []
        previous = -1
        for version, producer_id, first, last, lso in _ENTRY.iter_unpack(data):
            if version != VERSION:
                raise CorruptTxnIndex(f"entry version {version}, expected {VERSION}")
            if (producer_id < 0 or not 0 <= first <= last or last < self.base_offset or last <= previous
                    or lso < 0 or (next_offset is not None and last >= next_offset)):
                raise CorruptTxnIndex(
                    f"impossible entry: producer {producer_id} first offset {first} last offset {last} "
                    f"last stable offset {lso} (segment from {self.base_offset}"
                    + (f" to {next_offset})" if next_offset is not None else ")")
                )
            previous = last
            entries.append(AbortedTxn(producer_id, first, last, lso))
        return entries

    def append(self, entry: AbortedTxn) -> None:
        """Add an entry (its marker after every entry's) and write it to the file at once."""
        entries = self.entries()
        if entries and entry.last_offset <= entries[-1].last_offset:
            raise ValueError(f"{self.path}: entry for marker {entry.last_offset} is not after "
                             f"{entries[-1].last_offset}")
        data = _ENTRY.pack(VERSION, *entry)
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            written = os.write(fd, data)
            if written != len(data):  # a short write to a regular file: the disk is full
                os.ftruncate(fd, len(entries) * ENTRY_SIZE)
                raise OSError(28, "short write", str(self.path))
        finally:
            os.close(fd)
        entries.append(entry)
        self._dirty = True

    def replace(self, entries: list[AbortedTxn]) -> None:
        """Rewrite the file with `entries` (a rebuild from the log)."""
        data = b"".join(_ENTRY.pack(VERSION, *entry) for entry in entries)
        if not data:
            unlink_if_exists(self.path)
        else:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                os.write(fd, data)
            finally:
                os.close(fd)
        self._entries = list(entries)
        self._dirty = bool(data)

    def truncate_to(self, offset: int) -> None:
        """Drop the entries whose marker is at or above `offset` (the log was cut there). A file
        that cannot be read is left to be rebuilt at its next use."""
        try:
            entries = self.entries()
        except CorruptTxnIndex:
            self._entries = None
            return
        kept = [entry for entry in entries if entry.last_offset < offset]
        if len(kept) == len(entries):
            return
        if kept:
            fd = os.open(self.path, os.O_WRONLY)
            try:
                os.ftruncate(fd, len(kept) * ENTRY_SIZE)
            finally:
                os.close(fd)
            self._dirty = True
        else:
            unlink_if_exists(self.path)
        self._entries = kept

    def collect(self, fetch_offset: int, upper_bound_offset: int) -> tuple[list[AbortedTxn], bool]:
        """Kafka's collectAbortedTxns: the entries whose transaction overlaps [fetch_offset,
        upper_bound_offset), and whether the search is complete (an entry's last stable offset
        reaches the upper bound: no later marker can end a transaction that began below it)."""
        found = []
        for entry in self.entries():
            if entry.last_offset >= fetch_offset and entry.first_offset < upper_bound_offset:
                found.append(entry)
            if entry.last_stable_offset >= upper_bound_offset:
                return found, True
        return found, False

    def flush(self) -> None:
        if self._dirty:
            try:
                fd = os.open(self.path, os.O_RDONLY)
            except FileNotFoundError:
                self._dirty = False
                return
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            self._dirty = False

    def mark_durable(self) -> None:
        self._dirty = False

    def forget(self) -> None:
        """Drop what was read: the next use reads the file again."""
        self._entries = None

    def delete(self) -> None:
        unlink_if_exists(self.path)
        self._entries = []
