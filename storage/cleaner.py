"""The log cleaner: compaction of `cleanup.policy=compact` logs, with the semantics of Kafka's
LogCleanerManager (which log, which offsets), Cleaner (how) and SkimpyOffsetMap (the key map).

Choosing (`log_to_clean`, `choose_filthiest`), Kafka's LogCleanerManager.grabFilthiestCompactedLog:
a log's *clean* section runs from its start to its first dirty offset (the `cleaner-offset-checkpoint`
entry, the log start offset when there is none or it is out of range); its *cleanable* section from
there to the first uncleanable offset: the active segment's base offset, or the first dirty segment
whose largest timestamp is within min.compaction.lag.ms of now, whichever comes first (snapped to a
segment's base). The log is cleanable when the cleanable section's share of both sections (the
dirty ratio) exceeds min.cleanable.dirty.ratio, or when some dirty segment's first batch is older
than max.compaction.lag.ms (and there are cleanable bytes); the dirtiest cleanable log goes first.
One addition of ours (`CleaningRound.tombstone_horizon`): a log whose clean section holds tombstones
past their delete horizon is cleanable too, so a tombstone goes delete.retention.ms after it was
first cleaned even when nothing more is written (Kafka waits for the next cleaning).

Cleaning (`clean`, on any thread; `commit`, on the log's owner's), Kafka's Cleaner.doClean:

1. the offset map (`OffsetMap`): for every key in the cleanable section, its last offset. The map
   holds at most log.cleaner.dedupe.buffer.size / 24 x 0.9 keys (Kafka's 16-byte MD5 plus 8-byte
   offset per slot, its load factor); when it fills, this round stops at the last whole batch mapped
   and the rest waits for the next round (records past the map's latest offset are all kept);
2. the segments from the log start up to the map's end are grouped (consecutive segments whose sizes,
   and index sizes, add up to at most segment.bytes and segment.index.bytes, offsets within an i32
   of the group's base: Kafka's groupSegmentsBySize) and each group is rewritten into one `.cleaned`
   segment named by the group's base offset. A record stays when it has no key-map entry above its
   offset (it is its key's latest) and it is not a tombstone past its delete horizon; records past
   the map's end all stay. A keyless record (impossible in a compacted topic: Produce refuses them)
   goes, as in Kafka.
3. batches are rewritten as Kafka's MemoryRecords.filterTo writes them: a batch that keeps all its
   records and needs no delete horizon is copied byte for byte; one that keeps some is rebuilt with
   the same base offset, LAST offset delta (so the producer's last sequence survives), magic,
   attributes (codec, timestamp type, transactional and control bits), partition leader epoch,
   producer id, epoch and base sequence, its kept records with their own offsets, timestamps and
   headers, recompressed with the same codec; a batch whose records all go is dropped, except
   (empty, header only: Kafka's writeEmptyHeader) the last data batch of a producer id
   (`producer_last_offsets`: so an idempotent producer's sequence state survives a restart that
   rebuilds it from the log) and the last batch of each group (Kafka keeps the round's last, so the
   log end stays known; keeping each group's makes a `.swap`'s offset range exact on recovery).
4. delete horizons (KIP-534): the first cleaning that keeps a tombstone stamps its batch with the
   delete-horizon flag (attributes bit 6) and baseTimestamp = now + delete.retention.ms (record
   timestamp deltas are re-based, so every record keeps its timestamp); a later cleaning at or past
   the horizon removes the tombstone.
5. transactions: nothing at or after the last stable offset is cleaned (an open transaction may
   still abort); the records of aborted transactions never enter the key map, so they never
   supersede a committed value (they are themselves superseded by later values, and otherwise
   kept, hidden from read_committed consumers by the transaction index, which carries over into
   the cleaned segment); transaction markers are all kept. Kafka goes further (aborted batches
   discarded at once, a marker dropped once its transaction's records are gone and its delete
   horizon has passed): not done here.

Crash safety (Kafka's `.cleaned` / `.swap` / `.deleted` suffixes): each `.cleaned` segment (log and
both indexes) is fsynced complete before `commit` swaps it in through `PartitionLog.replace_segments`
(rename to `.swap`, old segments to `.deleted`, swap to final name, fsyncing the directory between).
At the next load `minibroker.storage.log_dir` removes `.cleaned` and `.deleted` files and completes `.swap`s, so
a kill at any point leaves either the old segments or the cleaned one, never both, never neither.

The checkpoint (`read_checkpoint` / `write_checkpoint`): Kafka's `cleaner-offset-checkpoint` in
the data directory, "0" (version), the entry count, then "topic partition offset" lines, written
atomically; where the next round's dirty section starts. An unreadable one is logged and treated as
empty: cleaning from the log start again costs time, never records.

Pure: no clock (`now_ms` is an argument), no trio; `clean` does only file I/O on the log's directory
and never changes the log's in-memory state, so it can run on a worker thread while the log's owner
appends (only segments below the active one are read, and `commit` checks they are still the log's).
"""

from __future__ import annotations

import hashlib
import logging
import os
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Iterator, Mapping, NamedTuple, Sequence

from crc32c import crc32c

from minibroker.protocol.compression import DecompressionError, compress, decompress
from minibroker.protocol.records.batch import (
    ATTR_COMPRESSION_MASK,
    ATTR_CONTROL,
    ATTR_TIMESTAMP_TYPE,
    ATTR_TRANSACTIONAL,
    BATCH_HEADER,
    CRC_AT,
    CRC_START,
    HEADER_SIZE,
    LOG_OVERHEAD,
    BatchHeader,
    iter_headers,
)
from minibroker.protocol.records.validation import MAX_COMPRESSION_RATIO, CorruptRecordError
from minibroker.protocol.records.varint import read_varint, write_varint
from minibroker.storage.config import LONG_MAX
from minibroker.storage.files import unlink_if_exists, write_atomically
from minibroker.storage.log_dir import CLEANED_SUFFIX
from minibroker.storage.segment import LogSegment, segment_paths, txn_index_path

if TYPE_CHECKING:
    from minibroker.storage.log import PartitionLog
    from minibroker.storage.producer_state.txns import AbortedTxn

__all__ = [
    "CHECKPOINT_FILE",
    "DELETE_HORIZON_FLAG",
    "CleaningAborted",
    "CleaningResult",
    "CleaningRound",
    "LogToClean",
    "OffsetMap",
    "choose_filthiest",
    "clean",
    "commit",
    "discard",
    "group_segments_by_size",
    "log_to_clean",
    "read_checkpoint",
    "write_checkpoint",
]

logger = logging.getLogger(__name__)

DELETE_HORIZON_FLAG = 0x40  # attributes bit 6: baseTimestamp holds the delete horizon (KIP-534)
OFFSET_MAP_ENTRY_BYTES = 24  # Kafka's SkimpyOffsetMap slot: an MD5 of the key and an 8-byte offset
CHECKPOINT_FILE = "cleaner-offset-checkpoint"
READ_CHUNK = 1 << 20  # bytes of a segment read at once
WRITE_CHUNK = 1 << 20  # bytes of cleaned batches buffered before a write
YIELD_EVERY = 64  # batches between two releases of the GIL (see `_batches`)
INT32_MAX = 0x7FFFFFFF
_UINT32 = struct.Struct(">I")


class CleaningAborted(Exception):
    """The round was abandoned (its log deleted or changed under it, the broker stopping)."""


# -- the offset map ----------------------------------------------------------------------------------


class OffsetMap:
    """Key -> the offset of its last record in the part of the log mapped so far, bounded like
    Kafka's SkimpyOffsetMap: `memory` bytes of 24-byte slots, filled to `load_factor` at most. Keys
    are held by their MD5 digest, as Kafka's are (a collision would make the cleaner drop a record
    of the other key; at 2^-64 per pair it is Kafka's accepted risk too)."""

    def __init__(self, memory: int, load_factor: float = 0.9) -> None:
        self.slots = max(1, memory // OFFSET_MAP_ENTRY_BYTES)
        self.max_entries = max(1, int(self.slots * load_factor))
        self._offsets: dict[bytes, int] = {}
        self.latest_offset = -1  # the last offset mapped (records past it are not in the map)

    @staticmethod
    def _digest(key: bytes | memoryview) -> bytes:
        return hashlib.md5(key).digest()

    def put(self, key: bytes | memoryview, offset: int) -> None:
        self._offsets[self._digest(key)] = offset
        self.latest_offset = offset

    def get(self, key: bytes | memoryview) -> int:
        """The key's last mapped offset, -1 when it is not in the map."""
        return self._offsets.get(self._digest(key), -1)

    def __len__(self) -> int:
        return len(self._offsets)

    @property
    def full(self) -> bool:
        return len(self._offsets) >= self.max_entries

    @property
    def utilization(self) -> float:
        return len(self._offsets) / self.slots

    def clear(self) -> None:
        self._offsets.clear()
        self.latest_offset = -1


# -- the checkpoint file -----------------------------------------------------------------------------


def read_checkpoint(data_dir: Path) -> dict[tuple[str, int], int]:
    """The `cleaner-offset-checkpoint` entries, {(topic, partition): first dirty offset}; empty when
    the file is missing, and when it is unreadable (logged: the logs are then cleaned from their
    start, which is always correct)."""
    path = Path(data_dir) / CHECKPOINT_FILE
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError) as exc:
        logger.error("%s: unreadable (%s); compacted logs are cleaned from their start", path, exc)
        return {}
    try:
        if lines[0].strip() != "0":
            raise ValueError(f"version {lines[0].strip()!r}, expected 0")
        count = int(lines[1])
        entries = {}
        for line in lines[2:2 + count]:
            topic, partition, offset = line.split()
            entries[(topic, int(partition))] = int(offset)
        if len(entries) != count:
            raise ValueError(f"{len(entries)} entries, {count} declared")
        return entries
    except (IndexError, ValueError) as exc:
        logger.error("%s: unreadable (%s); compacted logs are cleaned from their start", path, exc)
        return {}


def write_checkpoint(data_dir: Path, entries: Mapping[tuple[str, int], int]) -> None:
    """Write the checkpoint atomically (Kafka's OffsetCheckpointFile format)."""
    lines = ["0", str(len(entries))]
    lines += [f"{topic} {partition} {offset}" for (topic, partition), offset in sorted(entries.items())]
    write_atomically(Path(data_dir) / CHECKPOINT_FILE, ("\n".join(lines) + "\n").encode())


# -- choosing ----------------------------------------------------------------------------------------


@dataclass
class LogToClean:
    """A compacted log's sections now (Kafka's LogToClean)."""

    topic: str
    partition: int
    log: PartitionLog
    first_dirty_offset: int
    first_uncleanable_offset: int
    clean_bytes: int
    cleanable_bytes: int
    need_compaction_now: bool  # max.compaction.lag.ms has passed for some dirty segment
    checkpoint_reset: bool  # the checkpoint was out of range and must be rewritten
    tombstones_due: bool = False  # the clean section holds tombstones past their horizon (ours)

    @property
    def total_bytes(self) -> int:
        return self.clean_bytes + self.cleanable_bytes

    @property
    def cleanable_ratio(self) -> float:
        return self.cleanable_bytes / self.total_bytes if self.total_bytes else 0.0

    @property
    def cleanable(self) -> bool:
        """Kafka's filter of grabFilthiestCompactedLog, plus our due tombstones."""
        if self.need_compaction_now and self.cleanable_bytes > 0:
            return True
        if self.tombstones_due and self.total_bytes > 0:
            return True
        return self.cleanable_ratio > self.log.config.min_cleanable_dirty_ratio


def _overlapping(segments: Sequence[LogSegment], start: int, end: int) -> list[LogSegment]:
    """Kafka's logSegments(from, to): the segments holding offsets in [start, end)."""
    return [s for i, s in enumerate(segments)
            if s.base_offset < end and (i + 1 == len(segments) or segments[i + 1].base_offset > start)]


def log_to_clean(topic: str, partition: int, log: PartitionLog, checkpoint: int | None, now_ms: int,
                 tombstone_horizon: int | None = None, last_stable_offset: int | None = None) -> LogToClean:
    """The sections of `log` now (Kafka's cleanableOffsets, calculateCleanableBytes and
    maxCompactionDelay). `checkpoint`: its cleaner-offset-checkpoint entry; `tombstone_horizon`: the
    earliest delete horizon of the tombstones the last cleaning kept, if known; `last_stable_offset`:
    nothing at or after it is cleaned (an open transaction may still abort), as Kafka."""
    config = log.config
    segments = log.segments
    start, end = log.log_start_offset, log.log_end_offset
    first_dirty = start if checkpoint is None else checkpoint
    reset = checkpoint is not None and not start <= checkpoint <= end
    if reset:
        logger.warning("%s: resetting the first dirty offset to the log start offset %d: the checkpointed "
                       "offset %d is outside the log", log.directory.name, start, checkpoint)
        first_dirty = start
    active = segments[-1]
    uncleanable = active.base_offset if last_stable_offset is None else min(active.base_offset, last_stable_offset)
    dirty_inactive = [s for s in _overlapping(segments, first_dirty, LONG_MAX) if s is not active]
    if config.min_compaction_lag_ms > 0:
        for segment in dirty_inactive:
            if segment.max_timestamp > now_ms - config.min_compaction_lag_ms:
                uncleanable = min(uncleanable, segment.base_offset)
                break
    uncleanable = max(first_dirty, uncleanable)
    # Snapped down to the start of the segment holding it (calculateCleanableBytes:
    # nonActiveLogSegmentsFrom(uncleanable).head, else the active segment).
    first_uncleanable = _overlapping(segments, uncleanable, LONG_MAX)[0].base_offset
    if first_uncleanable < first_dirty:
        first_uncleanable = first_dirty
    cleanable_bytes = sum(s.size for s in _overlapping(segments, min(first_dirty, first_uncleanable), first_uncleanable))
    clean_bytes = sum(s.size for s in _overlapping(segments, -1, first_dirty))
    need_now = False
    if config.max_compaction_lag_ms < LONG_MAX:
        firsts = [h.max_timestamp for h in (next(s.headers(0), None) for s in dirty_inactive) if h is not None]
        firsts = [t for t in firsts if t > 0]
        need_now = bool(firsts) and min(firsts) < now_ms - max(config.max_compaction_lag_ms, 0)
    due = tombstone_horizon is not None and now_ms >= tombstone_horizon
    return LogToClean(topic, partition, log, first_dirty, first_uncleanable, clean_bytes, cleanable_bytes,
                      need_now, reset, due)


def choose_filthiest(candidates: Sequence[LogToClean]) -> LogToClean | None:
    """The cleanable log with the highest dirty ratio (None when none is cleanable)."""
    cleanable = [c for c in candidates if c.total_bytes > 0 and c.cleanable]
    return max(cleanable, key=lambda c: c.cleanable_ratio) if cleanable else None


# -- cleaning ----------------------------------------------------------------------------------------


@dataclass
class CleaningRound:
    """What one cleaning needs, taken from the log on its owner's thread (`CleaningRound.of`), so
    `clean` can run elsewhere: the segments then, below the active one."""

    log: PartitionLog
    directory: Path
    segments: list[LogSegment]  # the log's segments below the active one, oldest first
    next_offsets: list[int]  # each segment's next offset (the following segment's base)
    first_dirty_offset: int
    first_uncleanable_offset: int
    now_ms: int
    delete_retention_ms: int
    segment_bytes: int
    segment_index_bytes: int
    max_message_bytes: int
    # Producer id -> the last offset of its last data batch; None: read from the log by `clean`.
    producer_last_offsets: Mapping[int, int] | None
    # Segment base offset -> the aborted transactions in its `.txnindex`, read (and rebuilt if
    # damaged) on the owner's thread: a rebuild writes to the log, which only its owner may do.
    txn_entries: Mapping[int, list[AbortedTxn]] = field(default_factory=dict)
    aborted: bool = False  # set by the owner to stop the round at its next batch

    @classmethod
    def of(cls, target: LogToClean, now_ms: int, producer_last_offsets: Mapping[int, int] | None = None
           ) -> CleaningRound:
        """A round for `target`. `producer_last_offsets`: the live producers' last data batches (the
        producer state); None: `clean` keeps every producer id's last batch below the active
        segment, read from the log on its own thread."""
        log = target.log
        segments = log.segments
        inactive = segments[:-1]
        config = log.config
        return cls(log, log.directory, inactive, [s.base_offset for s in segments[1:]],
                   target.first_dirty_offset, target.first_uncleanable_offset, now_ms,
                   config.delete_retention_ms, config.segment_bytes, config.segment_index_bytes,
                   config.max_message_bytes,
                   None if producer_last_offsets is None else dict(producer_last_offsets),
                   {s.base_offset: list(log.txn_index_entries(s)) for s in inactive})


@dataclass
class CleaningStats:
    bytes_read: int = 0
    bytes_written: int = 0
    records_read: int = 0
    records_kept: int = 0
    map_records: int = 0
    map_utilization: float = 0.0


@dataclass
class CleaningResult:
    """What `clean` produced: the cleaned segments, each with the old segments it replaces, and the
    offset the next round's dirty section starts at."""

    log: PartitionLog
    end_offset: int
    swaps: list[tuple[LogSegment, list[LogSegment]]]
    stats: CleaningStats = field(default_factory=CleaningStats)
    tombstone_horizon: int | None = None  # the earliest delete horizon of a kept tombstone
    committed: int = 0  # groups swapped in so far (`commit`)
    discarded: bool = False  # the groups not swapped in were given up

    @property
    def complete(self) -> bool:
        return self.committed == len(self.swaps)


def last_batches_by_producer(segments: Sequence[LogSegment]) -> dict[int, int]:
    """Producer id -> the last offset of its last data batch in the segments (header scan)."""
    last: dict[int, int] = {}
    for segment in segments:
        for header in segment.headers(0):
            if header.has_producer_id and not header.is_control:
                last[header.producer_id] = header.last_offset
    return last


class _Record(NamedTuple):
    offset: int
    timestamp: int
    key: bytes | None
    has_value: bool
    attributes: int
    rest: memoryview  # the record from its offset delta to its end (offset delta, key, value, headers)


def _records(batch: memoryview, header: BatchHeader, max_decompressed: int) -> list[_Record]:
    """The records of one batch (decompressed if need be). CorruptRecordError when they do not add up."""
    data: memoryview = batch[HEADER_SIZE:header.size]
    if header.compression:
        try:
            data = memoryview(decompress(header.compression, data, max_decompressed))
        except DecompressionError as exc:
            raise CorruptRecordError(f"batch at offset {header.base_offset}: {exc}") from None
    log_append_time = header.attributes & ATTR_TIMESTAMP_TYPE
    records = []
    position = 0
    for _ in range(header.records_count):
        length, position = read_varint(data, position, error=CorruptRecordError)
        end = position + length
        if length < 1 or end > len(data):
            raise CorruptRecordError(f"a record of the batch at offset {header.base_offset} runs past its end")
        attributes = data[position]
        timestamp_delta, at = read_varint(data, position + 1, error=CorruptRecordError)
        rest_start = at
        offset_delta, at = read_varint(data, at, error=CorruptRecordError)
        key_length, at = read_varint(data, at, error=CorruptRecordError)
        key = bytes(data[at:at + key_length]) if key_length >= 0 else None
        at += max(key_length, 0)
        value_length, at = read_varint(data, at, error=CorruptRecordError)
        if at > end:
            raise CorruptRecordError(f"a record of the batch at offset {header.base_offset} runs past its end")
        timestamp = header.max_timestamp if log_append_time else header.base_timestamp + timestamp_delta
        records.append(_Record(header.base_offset + offset_delta, timestamp, key, value_length >= 0, attributes,
                               data[rest_start:end]))
        position = end
    return records


def _write_batch(header: BatchHeader, attributes: int, base_timestamp: int, max_timestamp: int, count: int,
                 records: bytes) -> bytes:
    batch = bytearray(BATCH_HEADER.pack(
        header.base_offset, HEADER_SIZE - LOG_OVERHEAD + len(records), header.partition_leader_epoch, 2, 0,
        attributes, header.last_offset_delta, base_timestamp, max_timestamp, header.producer_id,
        header.producer_epoch, header.base_sequence, count))
    _UINT32.pack_into(batch, CRC_AT, crc32c(records, crc32c(memoryview(batch)[CRC_START:])))
    return bytes(batch + records)


def rebuild_batch(header: BatchHeader, kept: Sequence[_Record], delete_horizon: int | None) -> bytes:
    """The batch `header` begins, holding only `kept` (Kafka's buildRetainedRecordsInto): same base
    offset and last offset delta, same attributes and producer fields, the records re-based on the
    new base timestamp (the delete horizon when one is set), recompressed with the batch's codec."""
    if delete_horizon is not None:
        base_timestamp = delete_horizon
    else:
        base_timestamp = kept[0].timestamp
    if header.attributes & ATTR_TIMESTAMP_TYPE:
        max_timestamp = header.max_timestamp
    else:
        max_timestamp = max(record.timestamp for record in kept)
    body = bytearray()
    record = bytearray()
    for kept_record in kept:
        record.clear()
        record.append(kept_record.attributes)
        write_varint(kept_record.timestamp - base_timestamp, record)
        record += kept_record.rest
        write_varint(len(record), body)
        body += record
    codec = header.attributes & ATTR_COMPRESSION_MASK
    records = compress(codec, body) if codec else bytes(body)
    attributes = header.attributes & ~DELETE_HORIZON_FLAG
    if delete_horizon is not None:
        attributes |= DELETE_HORIZON_FLAG
    return _write_batch(header, attributes, base_timestamp, max_timestamp, len(kept), records)


def empty_batch(header: BatchHeader) -> bytes:
    """The header-only batch Kafka's cleaner keeps for a producer's last batch (writeEmptyHeader):
    no records, no codec, the batch's offsets, producer fields and flags, its max timestamp."""
    attributes = header.attributes & (ATTR_TIMESTAMP_TYPE | ATTR_TRANSACTIONAL | ATTR_CONTROL)
    return _write_batch(header, attributes, header.max_timestamp, header.max_timestamp, 0, b"")


def _clean_batch(batch: memoryview, header: BatchHeader, offset_map: OffsetMap, now_ms: int,
                 delete_retention_ms: int, retain_empty: bool, max_decompressed: int,
                 stats: CleaningStats) -> tuple[bytes | memoryview | None, int | None]:
    """What of one batch the cleaned segment holds (None: nothing), and the delete horizon of the
    tombstones it keeps (None if it keeps none)."""
    if header.is_control:
        # Transaction markers stay for now. Kafka's rule goes here once transactions exist: a
        # marker is discarded when its transaction's records are all gone and its own delete
        # horizon (set at its first cleaning) has passed; aborted batches are discarded at once.
        return batch, None
    records = _records(batch, header, max_decompressed)
    stats.records_read += len(records)
    horizon = header.base_timestamp if header.attributes & DELETE_HORIZON_FLAG else None
    latest = offset_map.latest_offset
    kept = []
    tombstones = False
    for record in records:
        if record.offset > latest:
            keep = True  # past what was mapped this round: the next round decides
        elif record.key is None:
            keep = False  # keyless records cannot be compacted (Kafka drops them too)
        else:
            keep = record.offset >= offset_map.get(record.key) and (
                record.has_value or horizon is None or now_ms < horizon)
        if keep:
            kept.append(record)
            tombstones = tombstones or not record.has_value
    stats.records_kept += len(kept)
    needs_horizon = tombstones and horizon is None
    if needs_horizon:
        horizon = now_ms + delete_retention_ms
    kept_horizon = horizon if tombstones else None
    if len(kept) == len(records) and not needs_horizon:
        return batch, kept_horizon
    if kept:
        return rebuild_batch(header, kept, horizon), kept_horizon
    if retain_empty:
        return empty_batch(header), None
    return None, None


def _batches(segment: LogSegment, position: int, round_: CleaningRound) -> Iterator[tuple[BatchHeader, memoryview]]:
    """The whole batches of an inactive segment from `position`, read a chunk at a time."""
    end = segment.size
    while position < end:
        if round_.aborted:
            raise CleaningAborted(str(segment.log_path))
        chunk = memoryview(segment._pread(min(READ_CHUNK, end - position), position))
        consumed = 0
        for count, header in enumerate(iter_headers(chunk), 1):
            yield header, chunk[header.position:header.position + header.size]
            consumed = header.position + header.size
            if not count % YIELD_EVERY:
                # Release the GIL now and then: the owner's thread (the broker's event loop) waits
                # for it otherwise up to the interpreter's switch interval at each of its steps.
                os.sched_yield()
        if consumed == 0:  # one batch bigger than a chunk
            big = next(segment.headers(position), None)
            if big is None:
                raise CorruptRecordError(f"{segment.log_path}: no whole batch at byte {position}")
            yield big, memoryview(segment._pread(big.size, position))
            consumed = big.size
        position += consumed


def _max_decompressed(round_: CleaningRound, header: BatchHeader) -> int:
    return max(round_.max_message_bytes, header.size) * MAX_COMPRESSION_RATIO


def build_offset_map(round_: CleaningRound, offset_map: OffsetMap, stats: CleaningStats) -> None:
    """Kafka's buildOffsetMap over the cleanable section, stopping when the map is full."""
    offset_map.clear()
    start, end = round_.first_dirty_offset, round_.first_uncleanable_offset
    # Everything below the dirty section is under the map (cleaned against it) even when the dirty
    # section is empty: a round for due tombstones alone then cleans the clean section, and ends
    # where the dirty section starts (not at offset 0).
    offset_map.latest_offset = start - 1
    # The records of aborted transactions never supersede a key's value (Kafka's
    # CleanedTransactionMetadata): a read_committed consumer must still find the committed one.
    aborted: dict[int, list[tuple[int, int]]] = {}
    for entries in round_.txn_entries.values():
        for txn in entries:
            if txn.last_offset >= start and txn.first_offset < end:  # Kafka's collectAbortedTxns overlap
                aborted.setdefault(txn.producer_id, []).append((txn.first_offset, txn.last_offset))
    for segment, next_offset in zip(round_.segments, round_.next_offsets):
        if next_offset <= start or segment.base_offset >= end:
            continue
        position = segment.find_position(start) if start > segment.base_offset else 0
        if position is None:
            continue
        for header, batch in _batches(segment, position, round_):
            stats.bytes_read += header.size
            if not header.is_control and not (
                    header.is_transactional and any(first <= header.base_offset <= last
                                                    for first, last in aborted.get(header.producer_id, ()))):
                for record in _records(batch, header, _max_decompressed(round_, header)):
                    if record.key is not None and record.offset >= start:
                        if offset_map.full:
                            return
                        offset_map.put(record.key, record.offset)
                    stats.map_records += 1
            if header.last_offset >= start:
                offset_map.latest_offset = header.last_offset
        offset_map.latest_offset = min(next_offset, end) - 1  # past gaps to the segment's end


def group_segments_by_size(segments: Sequence[LogSegment], next_offsets: Sequence[int], max_size: int,
                           max_index_size: int) -> list[list[int]]:
    """Kafka's groupSegmentsBySize, as lists of indexes into `segments`: consecutive segments whose
    log sizes (and offset- and time-index sizes) add up to at most `max_size` (`max_index_size`),
    whose offsets stay within an i32 of the group's base offset."""
    groups: list[list[int]] = []
    i = 0
    while i < len(segments):
        group = [i]
        log_size = segments[i].size
        index_size, time_size = _index_sizes(segments[i])
        i += 1
        while i < len(segments):
            candidate = segments[i]
            index, time = _index_sizes(candidate)
            if (log_size + candidate.size > max_size or index_size + index > max_index_size
                    or time_size + time > max_index_size):
                break
            if candidate.size and next_offsets[i] - 1 - segments[group[0]].base_offset > INT32_MAX:
                break
            group.append(i)
            log_size += candidate.size
            index_size += index
            time_size += time
            i += 1
        groups.append(group)
    return groups


def _index_sizes(segment: LogSegment) -> tuple[int, int]:
    return len(segment.offset_index) * 8, len(segment.time_index) * 12


def clean(round_: CleaningRound, offset_map: OffsetMap) -> CleaningResult:
    """Build the offset map and write the cleaned segments (`.cleaned` files, fsynced, indexes
    built), without touching the log's state: `commit` swaps them in. On any failure the files
    written so far are removed and the error (OSError, CorruptRecordError, CleaningAborted) raised."""
    stats = CleaningStats()
    if round_.producer_last_offsets is None:
        # The segments below the active one: the active one's batches are never cleaned anyway.
        round_.producer_last_offsets = last_batches_by_producer(round_.segments)
    build_offset_map(round_, offset_map, stats)
    end_offset = offset_map.latest_offset + 1
    stats.map_utilization = offset_map.utilization
    count = sum(1 for s in round_.segments if s.base_offset < end_offset)
    segments, next_offsets = round_.segments[:count], round_.next_offsets[:count]
    config = round_.log.config
    result = CleaningResult(round_.log, end_offset, [], stats)
    try:
        for group in group_segments_by_size(segments, next_offsets, round_.segment_bytes, round_.segment_index_bytes):
            old = [segments[i] for i in group]
            cleaned, horizon = _clean_group(round_, old, offset_map, stats, config.index_interval_bytes)
            result.swaps.append((cleaned, old))
            if horizon is not None:
                result.tombstone_horizon = horizon if result.tombstone_horizon is None else min(
                    result.tombstone_horizon, horizon)
    except BaseException:
        discard(result)
        raise
    return result


def _clean_group(round_: CleaningRound, old: list[LogSegment], offset_map: OffsetMap, stats: CleaningStats,
                 index_interval_bytes: int) -> tuple[LogSegment, int | None]:
    """Rewrite the segments `old` into one `.cleaned` segment named by the first one's base offset."""
    base = old[0].base_offset
    directory = round_.directory
    paths = segment_paths(directory, base, CLEANED_SUFFIX)
    for path in (*paths, txn_index_path(directory, base, CLEANED_SUFFIX)):
        unlink_if_exists(path)  # a leftover of an earlier attempt
    fd = os.open(paths[0], os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    horizon: int | None = None
    producers = round_.producer_last_offsets or {}
    try:
        out = bytearray()
        pending: tuple[BatchHeader, memoryview] | None = None  # the previous batch (the last is kept)

        def emit(header: BatchHeader, batch: memoryview, last: bool) -> None:
            nonlocal horizon
            # Kept even when empty: the group's last batch, and a producer's last data batch.
            retain_empty = last or (header.has_producer_id
                                    and producers.get(header.producer_id) == header.last_offset)
            cleaned, kept_horizon = _clean_batch(
                batch, header, offset_map, round_.now_ms, round_.delete_retention_ms, retain_empty,
                _max_decompressed(round_, header), stats)
            if kept_horizon is not None:
                horizon = kept_horizon if horizon is None else min(horizon, kept_horizon)
            if cleaned is not None:
                out.extend(cleaned)
                if len(out) >= WRITE_CHUNK:
                    _write_all(fd, out)
                    stats.bytes_written += len(out)
                    out.clear()

        for segment in old:
            for header, batch in _batches(segment, 0, round_):
                stats.bytes_read += header.size
                if pending is not None:
                    emit(*pending, last=False)
                pending = (header, batch)
        if pending is not None:
            emit(*pending, last=True)
        _write_all(fd, out)
        stats.bytes_written += len(out)
        os.fsync(fd)
    finally:
        os.close(fd)
    modified = os.stat(old[-1].log_path).st_mtime_ns  # the retention clock of timestamp-less segments
    os.utime(paths[0], ns=(modified, modified))
    cleaned = LogSegment.open(directory, base, index_interval_bytes=index_interval_bytes,
                              max_index_size=round_.segment_index_bytes, files=round_.log._files,
                              suffix=CLEANED_SUFFIX)
    try:
        cleaned.rebuild_indexes()
        # Every control batch is kept (see the module docstring), so every aborted transaction the
        # old segments' indexes hold still ends in the cleaned one: their entries carry over.
        cleaned.txn_index.replace([entry for segment in old for entry in round_.txn_entries.get(segment.base_offset, ())])
        if cleaned.size:
            cleaned.time_index.maybe_append(cleaned.max_timestamp, cleaned.offset_of_max_timestamp)
        cleaned.flush()  # the indexes, fsynced: the segment is complete before it is swapped in
    finally:
        cleaned.files.forget(cleaned.log_path)
    return cleaned, horizon


def _write_all(fd: int, data: bytearray) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def discard(result: CleaningResult) -> None:
    """Remove the `.cleaned` files of the groups of a result that will not be swapped in."""
    for cleaned, _ in result.swaps[result.committed:]:
        if cleaned.suffix == CLEANED_SUFFIX:
            cleaned.delete()
    result.discarded = True


def commit(result: CleaningResult, limit: int | None = None) -> int:
    """Swap up to `limit` more cleaned groups in (`PartitionLog.replace_segments`: renames and two
    directory fsyncs), on the log owner's thread; the caller may run other work between calls, so
    a round of many groups never holds the thread long. A group whose old segments are no longer
    all the log's (retention, DeleteRecords or a truncation took some meanwhile) is discarded with
    every group after it. Returns how many groups this call swapped in (0: nothing is left)."""
    if result.discarded:
        return 0
    log = result.log
    end = len(result.swaps) if limit is None else min(len(result.swaps), result.committed + limit)
    ready = result.committed
    while ready < end and log.holds_segments(result.swaps[ready][1]):
        ready += 1
    swapped = ready - result.committed
    if swapped:
        log.replace_segments(result.swaps[result.committed:ready])
        result.committed = ready
    if ready < end:  # the log changed under this group: it and the rest are given up
        for cleaned, _ in result.swaps[ready:]:
            cleaned.delete()
        result.discarded = True
    return swapped
