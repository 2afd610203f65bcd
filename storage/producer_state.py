"""Per-partition idempotent-producer state: which batches a producer id may append; its snapshots.

One `ProducerStateManager` per partition. The broker asks `check(header)` before appending a batch
that carries a producer id, appends only when the answer is `error_code == 0 and duplicate_of is
None`, and then calls `update(header_with_assigned_offset, now_ms)`. Recovery loads the newest
snapshot at or below the log end (`load_snapshot`) and replays the log after it through `update`,
without checks. Pure logic: no I/O other than the snapshot files, no clock (`now_ms` is an
argument), no trio.

Two modes:

``lean`` (seed 003, the default) keeps ONLY the latest batch per producer id, packed into a
26-byte record in one shared bytearray (epoch, last sequence, last offset, offset delta, time of the
last append); a dict maps the producer id to its record's slot. The first sequence and base offset
of the latest batch are derived from the offset delta (a data batch's last sequence is its base
sequence plus its last offset delta, as in Kafka's BatchMetadata). Rules for a batch from producer
id P with epoch E, first sequence F and last sequence L (sequences live in [0, 2**31) and wrap from
2147483647 to 0):

1. P unknown (never seen, or expired and removed): accept, whatever E and F are (KIP-360: the
   leader no longer answers UNKNOWN_PRODUCER_ID).
2. E < current epoch: INVALID_PRODUCER_EPOCH (47).
3. E > current epoch: accept if F == 0, else OUT_OF_ORDER_SEQUENCE_NUMBER (45).
4. Same epoch, F == next(latest L) (latest L + 1, or 0 after 2147483647): accept.
5. Same epoch, (F, L) equal to the latest batch's: DUPLICATE_SEQUENCE_NUMBER (46) with the
   latest batch's (base offset, last offset) in `duplicate_of`, whatever the window.
6. Same epoch, the whole batch lies in the duplicate window, the `max_in_flight` sequence numbers
   ending at the latest L: DUPLICATE_SEQUENCE_NUMBER (46), `duplicate_of` None (offset -1).
   Precisely, with d = (latest L - F) mod 2**31 (how far F lies below the latest last sequence,
   counted around the wrap): duplicate iff  batch.last_offset_delta <= d < max_in_flight.
   `d < max_in_flight` puts F in the window {latest L - k mod 2**31 : 0 <= k < max_in_flight};
   `last_offset_delta <= d` says the batch ends at or below the latest L (it does not straddle
   it). See "Why the arithmetic holds" below for why this never mistakes a batch ahead of the
   expected sequence for a duplicate.
7. Anything else: OUT_OF_ORDER_SEQUENCE_NUMBER (45).

What "max.in.flight.sequence.number.per.connection" counts (seed 003 names it, `max_in_flight`
here): SEQUENCE NUMBERS, not batches. A count of batches (like the client's
max.in.flight.requests.per.connection, at most 5 with idempotence) is what bounds which batches a
conforming client can retry, but lean state keeps no batch boundaries below the latest batch, so
"within 5 batches" cannot be checked; the only distance it can measure is in sequence numbers, which
is also what the seed's name says. The window must then cover every sequence number a client can
legitimately resend: all its in-flight batches, each of many records. A window of 5 sequence numbers
would answer OUT_OF_ORDER_SEQUENCE_NUMBER to the ordinary retry of the oldest of 5 multi-record
batches after a dropped connection: an error for data that is in the log, whereas
DUPLICATE_SEQUENCE_NUMBER is what the Java client completes as a success without offsets
(Sender.completeBatch).

The default is the seed's: DEFAULT_MAX_IN_FLIGHT = 10,000,000 sequence numbers ("a default value of
10 million as max inflight sequence number possible that should not hit throttling"). Today's
clients keep at most 5 batches in flight (librdkafka caps a batch at batch.num.messages = 10,000
records; the Java client's 16 KiB batch.size holds about 2,300 minimal uncompressed records), so
10 million covers them with room to spare, and it is what the seed's phase 2 producers are told
(the broker sends it on the wire, protocol.extensions): such a producer keeps many batches in
flight and throttles itself only when its unacknowledged sequence numbers on a partition would
exceed the window. The residual risk of a wide window is a false duplicate for sequences this
broker never stored, which only happens when the producer's state was lost (expiry, KIP-360
re-acceptance at an arbitrary sequence) and an older batch then arrives after a newer one.

Why the arithmetic holds (at 10,000,000 and at any window up to 2**30). Sequence numbers live on a
circle of 2**31. A conforming producer with latest appended sequence L has its unacknowledged
sequences in (L, L + W] and everything it may resend in (L - W, L], W = max_in_flight: two arcs of W
each, which never overlap as long as 2 * W <= 2**31 (W <= 2**30, checked by the constructor). With
d = (L - F) mod 2**31, a resend has d in [0, W) and an early arrival F = L + 1 + k (0 <= k < W) has
d = 2**31 - 1 - k >= 2**31 - W > W - 1, so it is never in the duplicate range: the two cases are
told apart exactly, across the wrap from 2147483647 to 0 too. At the default, 10,000,000 is 1/214 of
the circle: over 2.1 billion sequence numbers separate the far ends of the two arcs.

``kafka`` follows Apache Kafka (ProducerStateEntry, ProducerAppendInfo): the last
KAFKA_BATCHES_TO_RETAIN = 5 batches of the current epoch per producer id, as __slots__ objects. A
batch with the current epoch and exactly the first and last sequence of a retained batch is a
duplicate: answered NONE (0) with the ORIGINAL offsets and not appended. Otherwise rules 1-4 above,
and OUT_OF_ORDER_SEQUENCE_NUMBER for anything else. `max_in_flight` plays no part in this mode.

Both modes reject a batch that has a producer id but no base sequence with INVALID_RECORD (87), as
Kafka's LogValidator does. Transactional batches get no special treatment here; the caller decides
whether it accepts them at all.

Expiry: `update` records `now_ms` as the producer's last append time; `remove_expired(now_ms)`
removes producer ids with now_ms - last_append_ms >= expiration_ms (producer.id.expiration.ms,
default 86,400,000). Kafka measures from the batch's max timestamp (client-controlled); the wall
clock of the append is what this broker's shell owns. A producer id that has expired but not yet
been removed is still validated against its state: `check` has no clock.

Snapshots use Kafka's producer snapshot layout (version 1), described by the construct schemas
below. Each entry holds the latest batch only, in both modes, as Kafka writes it; the `timestamp`
field holds the time of the producer's last append (what expiry measures from), so expiry carries
over a restart. `coordinator_epoch` is written as -1 and `current_txn_first_offset` as -1 (no
transactions). A snapshot that fails its CRC, is truncated or holds impossible values is logged,
deleted and never trusted; the next older one is tried.
"""

from __future__ import annotations

import logging
import os
import re
import struct
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Iterator, NamedTuple

from construct import Const, Int16sb, Int32sb, Int32ub, Int64sb, PrefixedArray, Struct, Terminated
from crc32c import crc32c

from storage.log import write_atomically

if TYPE_CHECKING:
    from protocol.records import BatchHeader

logger = logging.getLogger(__name__)

NONE = 0
OUT_OF_ORDER_SEQUENCE_NUMBER = 45
DUPLICATE_SEQUENCE_NUMBER = 46
INVALID_PRODUCER_EPOCH = 47
INVALID_RECORD = 87

SEQUENCE_SPACE = 1 << 31  # sequences are int32 >= 0; 2147483647 is followed by 0
MAX_SEQUENCE = SEQUENCE_SPACE - 1
DEFAULT_MAX_IN_FLIGHT = 10_000_000  # sequence numbers (seed 003's default); see the module docstring
DEFAULT_EXPIRATION_MS = 86_400_000  # producer.id.expiration.ms
KAFKA_BATCHES_TO_RETAIN = 5  # ProducerStateEntry.NUM_BATCHES_TO_RETAIN
SNAPSHOTS_TO_KEEP = 2
MODES = ("lean", "kafka")

# --- On-disk format -------------------------------------------------------------------------------
# Kafka's producer snapshot, version 1 (ProducerStateManager.PID_SNAPSHOT_MAP_SCHEMA). All integers
# are big-endian. The CRC32C covers everything after the crc field: the entry count and the entries.

SNAPSHOT_VERSION = 1

PRODUCER_SNAPSHOT_ENTRY = Struct(
    "producer_id" / Int64sb,
    "epoch" / Int16sb,  # current epoch of the producer
    "last_sequence" / Int32sb,  # last sequence of its latest batch
    "last_offset" / Int64sb,  # last offset of its latest batch
    "offset_delta" / Int32sb,  # last offset - base offset of that batch (= last - first sequence)
    "timestamp" / Int64sb,  # here: wall-clock ms of the producer's last append (expiry's origin)
    "coordinator_epoch" / Int32sb,  # -1: no transactions
    "current_txn_first_offset" / Int64sb,  # -1: no ongoing transaction
)

PRODUCER_SNAPSHOT = Struct(
    "version" / Const(SNAPSHOT_VERSION, Int16sb),
    "crc" / Int32ub,  # CRC32C of bytes 6..end
    "entries" / PrefixedArray(Int32sb, PRODUCER_SNAPSHOT_ENTRY),
    Terminated,
)

# The fixed part in front of the entries, parsed on its own so the entries can be read in bulk.
PRODUCER_SNAPSHOT_HEADER = Struct(
    "version" / Int16sb,
    "crc" / Int32ub,
    "count" / Int32sb,
)
_CRC_START = 6
_ENTRIES_START = PRODUCER_SNAPSHOT_HEADER.sizeof()

# A snapshot of a busy partition holds up to millions of entries, and construct takes ~11 us per
# entry either way; the entries are therefore packed and unpacked with a struct.Struct derived
# field by field from PRODUCER_SNAPSHOT_ENTRY (never a compiled construct: struct checks lengths).
_SNAPSHOT_ENTRY = struct.Struct(
    ">" + "".join(field.subcon.fmtstr.lstrip("<>=!@") for field in PRODUCER_SNAPSHOT_ENTRY.subcons)
)
assert _SNAPSHOT_ENTRY.size == PRODUCER_SNAPSHOT_ENTRY.sizeof() == 46

_SNAPSHOT_NAME = re.compile(r"^(\d{20})\.snapshot$")
_TMP_SUFFIX = ".tmp"  # what storage.log.write_atomically leaves behind if a write is interrupted

# --- In-memory lean record ------------------------------------------------------------------------
# epoch i16, last_sequence i32, last_offset i64, offset_delta i32, last_append_ms i64: 26 bytes.
_LEAN = struct.Struct("<hiqiq")
_LEAN_SIZE = _LEAN.size
_LEAN_LAST_APPEND = struct.Struct("<q")
_LEAN_LAST_APPEND_AT = 18
# Rebuild the record array when this many slots are free and they outnumber the live ones.
_MIN_FREE_TO_COMPACT = 1024


def snapshot_path(directory: Path, offset: int) -> Path:
    """Where the snapshot taken at `offset` lives: `<directory>/<20-digit offset>.snapshot`."""
    return Path(directory) / f"{offset:020d}.snapshot"


def list_snapshots(directory: Path) -> list[tuple[int, Path]]:
    """The snapshot files in `directory` as (offset, path), oldest first."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    found = []
    for name in names:
        match = _SNAPSHOT_NAME.match(name)
        if match:
            found.append((int(match.group(1)), Path(directory) / name))
    found.sort()
    return found


def _next_sequence(sequence: int) -> int:
    return 0 if sequence == MAX_SEQUENCE else sequence + 1


@dataclass(frozen=True, slots=True)
class CheckResult:
    """What to do with a batch.

    error_code 0 and duplicate_of None: append it. duplicate_of set: do not append; answer with
    these (base_offset, last_offset) of the original (kafka mode with error_code 0, lean mode with
    DUPLICATE_SEQUENCE_NUMBER for an exact copy of the latest batch). Any other error_code: answer
    it, do not append.
    """

    error_code: int
    duplicate_of: tuple[int, int] | None = None
    message: str = ""

    @property
    def should_append(self) -> bool:
        return self.error_code == NONE and self.duplicate_of is None


_ACCEPT = CheckResult(NONE, None, "")


class BatchMetadata(NamedTuple):
    """One retained batch, as `entry()` shows it."""

    first_seq: int
    last_seq: int
    base_offset: int
    last_offset: int


@dataclass(frozen=True, slots=True)
class ProducerEntry:
    """A read-only view of one producer id's state (for inspection and tests)."""

    producer_id: int
    epoch: int
    last_append_ms: int
    batches: tuple[BatchMetadata, ...]  # oldest first; lean mode holds exactly one

    @property
    def first_seq(self) -> int:
        return self.batches[-1].first_seq

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq

    @property
    def base_offset(self) -> int:
        return self.batches[-1].base_offset

    @property
    def last_offset(self) -> int:
        return self.batches[-1].last_offset


class _KafkaBatch:
    """Kafka's BatchMetadata: one of the retained batches of a producer id."""

    __slots__ = ("first_seq", "last_seq", "last_offset", "offset_delta", "timestamp")

    def __init__(
        self, first_seq: int, last_seq: int, last_offset: int, offset_delta: int, timestamp: int
    ) -> None:
        self.first_seq = first_seq
        self.last_seq = last_seq
        self.last_offset = last_offset
        self.offset_delta = offset_delta
        self.timestamp = timestamp  # the batch's max timestamp; -1 when loaded from a snapshot


class _KafkaEntry:
    """Kafka's ProducerStateEntry without the transaction fields."""

    __slots__ = ("epoch", "last_append_ms", "batches")

    def __init__(self, epoch: int, last_append_ms: int, batches: list[_KafkaBatch]) -> None:
        self.epoch = epoch
        self.last_append_ms = last_append_ms
        self.batches = batches  # current epoch only, oldest first, at most 5


class _CorruptSnapshot(Exception):
    pass


class ProducerStateManager:
    """The producer-id state of one partition. See the module docstring for the rules."""

    def __init__(
        self,
        mode: str = "lean",
        max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
        expiration_ms: int = DEFAULT_EXPIRATION_MS,
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"producer state mode must be one of {MODES}, not {mode!r}")
        if not 1 <= max_in_flight <= SEQUENCE_SPACE // 2:
            raise ValueError(
                f"max_in_flight must be in [1, 2**30] sequence numbers, not {max_in_flight}"
            )
        if expiration_ms <= 0:
            raise ValueError(f"expiration_ms must be positive: {expiration_ms}")
        self.mode = mode
        self.max_in_flight = max_in_flight
        self.expiration_ms = expiration_ms
        self._lean = mode == "lean"
        # lean: producer id -> slot in _records; freed slots are reused before the array grows.
        self._slots: dict[int, int] = {}
        self._records = bytearray()
        self._free: list[int] = []
        # kafka: producer id -> entry.
        self._entries: dict[int, _KafkaEntry] = {}

    # --- inspection ---------------------------------------------------------------------------

    @property
    def entry_count(self) -> int:
        """How many producer ids have state here."""
        return len(self._slots) if self._lean else len(self._entries)

    def memory_bytes(self) -> int:
        """The bytes this state occupies: sys.getsizeof of its containers and of every object they
        hold (producer ids, slots, Kafka-mode entries, batch lists and batches with their fields).
        Walks every entry: O(entries). An int shared by several fields is counted each time."""
        if self._lean:
            total = sys.getsizeof(self._slots) + sys.getsizeof(self._records) + sys.getsizeof(self._free)
            total += sum(sys.getsizeof(pid) + sys.getsizeof(slot) for pid, slot in self._slots.items())
            return total + sum(map(sys.getsizeof, self._free))
        total = sys.getsizeof(self._entries)
        for producer_id, entry in self._entries.items():
            total += sys.getsizeof(producer_id) + sys.getsizeof(entry) + sys.getsizeof(entry.batches)
            total += sys.getsizeof(entry.epoch) + sys.getsizeof(entry.last_append_ms)
            for batch in entry.batches:
                total += sys.getsizeof(batch) + sum(sys.getsizeof(getattr(batch, f)) for f in _KafkaBatch.__slots__)
        return total

    def __contains__(self, producer_id: object) -> bool:
        return producer_id in (self._slots if self._lean else self._entries)

    def producer_ids(self) -> list[int]:
        return list(self._slots if self._lean else self._entries)

    def entry(self, producer_id: int) -> ProducerEntry | None:
        """The state of one producer id, or None when it has none."""
        if self._lean:
            slot = self._slots.get(producer_id)
            if slot is None:
                return None
            epoch, last_seq, last_offset, delta, last_append_ms = _LEAN.unpack_from(
                self._records, slot * _LEAN_SIZE
            )
            batch = BatchMetadata(
                (last_seq - delta) % SEQUENCE_SPACE, last_seq, last_offset - delta, last_offset
            )
            return ProducerEntry(producer_id, epoch, last_append_ms, (batch,))
        entry = self._entries.get(producer_id)
        if entry is None:
            return None
        batches = tuple(
            BatchMetadata(b.first_seq, b.last_seq, b.last_offset - b.offset_delta, b.last_offset)
            for b in entry.batches
        )
        return ProducerEntry(producer_id, entry.epoch, entry.last_append_ms, batches)

    # --- validation ---------------------------------------------------------------------------

    def check(self, header: BatchHeader) -> CheckResult:
        """Decide whether the batch may be appended. Pure: changes nothing."""
        producer_id = header.producer_id
        if producer_id < 0:
            return _ACCEPT
        first = header.base_sequence
        if first < 0:
            return CheckResult(
                INVALID_RECORD,
                None,
                f"batch of producer {producer_id} has no base sequence ({first})",
            )
        if self._lean:
            return self._check_lean(header, producer_id, first)
        return self._check_kafka(header, producer_id, first)

    def _check_lean(self, header: BatchHeader, producer_id: int, first: int) -> CheckResult:
        slot = self._slots.get(producer_id)
        if slot is None:
            return _ACCEPT
        epoch, last_seq, last_offset, delta, _ = _LEAN.unpack_from(self._records, slot * _LEAN_SIZE)
        batch_epoch = header.producer_epoch
        if batch_epoch == epoch:
            if first == _next_sequence(last_seq):
                return _ACCEPT
            latest_first = (last_seq - delta) % SEQUENCE_SPACE
            if first == latest_first and header.last_sequence == last_seq:
                return CheckResult(
                    DUPLICATE_SEQUENCE_NUMBER,
                    (last_offset - delta, last_offset),
                    f"producer {producer_id} resent its latest batch {first}..{last_seq}",
                )
            below = (last_seq - first) % SEQUENCE_SPACE
            if header.last_offset_delta <= below < self.max_in_flight:
                return CheckResult(
                    DUPLICATE_SEQUENCE_NUMBER,
                    None,
                    f"producer {producer_id} resent sequences {first}..{header.last_sequence}, "
                    f"at or below its last sequence {last_seq}",
                )
            return self._out_of_order(producer_id, first, last_seq)
        if batch_epoch < epoch:
            return self._fenced(producer_id, batch_epoch, epoch)
        if first == 0:
            return _ACCEPT
        return self._new_epoch_not_at_zero(producer_id, batch_epoch, first, epoch)

    def _check_kafka(self, header: BatchHeader, producer_id: int, first: int) -> CheckResult:
        entry = self._entries.get(producer_id)
        if entry is None:
            return _ACCEPT
        batch_epoch = header.producer_epoch
        if batch_epoch == entry.epoch:
            last = header.last_sequence
            for batch in entry.batches:
                if batch.first_seq == first and batch.last_seq == last:
                    return CheckResult(
                        NONE,
                        (batch.last_offset - batch.offset_delta, batch.last_offset),
                        f"producer {producer_id} resent retained batch {first}..{last}",
                    )
            last_seq = entry.batches[-1].last_seq
            if first == _next_sequence(last_seq):
                return _ACCEPT
            return self._out_of_order(producer_id, first, last_seq)
        if batch_epoch < entry.epoch:
            return self._fenced(producer_id, batch_epoch, entry.epoch)
        if first == 0:
            return _ACCEPT
        return self._new_epoch_not_at_zero(producer_id, batch_epoch, first, entry.epoch)

    @staticmethod
    def _out_of_order(producer_id: int, first: int, last_seq: int) -> CheckResult:
        return CheckResult(
            OUT_OF_ORDER_SEQUENCE_NUMBER,
            None,
            f"producer {producer_id}: sequence {first} does not follow last sequence {last_seq}",
        )

    @staticmethod
    def _fenced(producer_id: int, epoch: int, current: int) -> CheckResult:
        return CheckResult(
            INVALID_PRODUCER_EPOCH,
            None,
            f"producer {producer_id}: epoch {epoch} is older than the current epoch {current}",
        )

    @staticmethod
    def _new_epoch_not_at_zero(
        producer_id: int, epoch: int, first: int, current: int
    ) -> CheckResult:
        return CheckResult(
            OUT_OF_ORDER_SEQUENCE_NUMBER,
            None,
            f"producer {producer_id}: new epoch {epoch} (current {current}) must start at "
            f"sequence 0, not {first}",
        )

    # --- state changes ------------------------------------------------------------------------

    def update(self, header: BatchHeader, now_ms: int) -> None:
        """Record a batch that was appended at `header.base_offset` (also used for log replay).

        No checks: the latest batch simply replaces (lean) or joins (kafka) the state, and a
        different epoch starts the producer's state afresh, as Kafka's replay does.
        """
        producer_id = header.producer_id
        if producer_id < 0:
            return
        delta = header.last_offset_delta
        last_offset = header.base_offset + delta
        if self._lean:
            slot = self._slots.get(producer_id)
            if slot is None:
                if self._free:
                    slot = self._free.pop()
                else:
                    slot = len(self._records) // _LEAN_SIZE
                    self._records.extend(bytes(_LEAN_SIZE))
                self._slots[producer_id] = slot
            _LEAN.pack_into(
                self._records,
                slot * _LEAN_SIZE,
                header.producer_epoch,
                header.last_sequence,
                last_offset,
                delta,
                now_ms,
            )
            return
        batch = _KafkaBatch(
            header.base_sequence, header.last_sequence, last_offset, delta, header.max_timestamp
        )
        entry = self._entries.get(producer_id)
        if entry is None:
            self._entries[producer_id] = _KafkaEntry(header.producer_epoch, now_ms, [batch])
            return
        if entry.epoch != header.producer_epoch:
            entry.epoch = header.producer_epoch
            entry.batches = [batch]
        else:
            batches = entry.batches
            if len(batches) >= KAFKA_BATCHES_TO_RETAIN:
                del batches[0]
            batches.append(batch)
        entry.last_append_ms = now_ms

    def remove_expired(self, now_ms: int) -> int:
        """Remove the producer ids whose last append is expiration_ms or more before now_ms.

        Returns how many were removed.
        """
        cutoff = now_ms - self.expiration_ms
        if self._lean:
            records = self._records
            read_time = _LEAN_LAST_APPEND.unpack_from
            expired = [
                (producer_id, slot)
                for producer_id, slot in self._slots.items()
                if read_time(records, slot * _LEAN_SIZE + _LEAN_LAST_APPEND_AT)[0] <= cutoff
            ]
            for producer_id, slot in expired:
                del self._slots[producer_id]
                self._free.append(slot)
            if len(self._free) >= _MIN_FREE_TO_COMPACT and len(self._free) > len(self._slots):
                self._compact()
            return len(expired)
        gone = [pid for pid, entry in self._entries.items() if entry.last_append_ms <= cutoff]
        for producer_id in gone:
            del self._entries[producer_id]
        return len(gone)

    def _compact(self) -> None:
        """Give back the memory of freed slots by rewriting the live records contiguously."""
        old = self._records
        records = bytearray(len(self._slots) * _LEAN_SIZE)
        slots = {}
        for new_slot, (producer_id, slot) in enumerate(self._slots.items()):
            start = slot * _LEAN_SIZE
            end = start + _LEAN_SIZE
            records[new_slot * _LEAN_SIZE : (new_slot + 1) * _LEAN_SIZE] = old[start:end]
            slots[producer_id] = new_slot
        self._records = records
        self._slots = slots
        self._free = []

    def clear(self) -> None:
        self._slots = {}
        self._records = bytearray()
        self._free = []
        self._entries = {}

    # --- snapshots ----------------------------------------------------------------------------

    def _snapshot_entries(self) -> Iterator[tuple[int, int, int, int, int, int]]:
        """(producer_id, epoch, last_seq, last_offset, offset_delta, last_append_ms) of each."""
        if self._lean:
            records = self._records
            for producer_id, slot in self._slots.items():
                yield (producer_id, *_LEAN.unpack_from(records, slot * _LEAN_SIZE))
        else:
            for producer_id, entry in self._entries.items():
                latest = entry.batches[-1]
                yield (
                    producer_id,
                    entry.epoch,
                    latest.last_seq,
                    latest.last_offset,
                    latest.offset_delta,
                    entry.last_append_ms,
                )

    def write_snapshot(self, directory: Path, offset: int) -> Path:
        """Write the state as `<directory>/<20-digit offset>.snapshot`, atomically; return its path.

        Atomic: written to a temporary file, fsynced, renamed over the final name, and the
        directory fsynced, so a crash leaves either the old set of snapshots or the new one.
        """
        if offset < 0:
            raise ValueError(f"snapshot offset must be >= 0: {offset}")
        directory = Path(directory)
        count = self.entry_count
        entries = bytearray(count * _SNAPSHOT_ENTRY.size)
        position = 0
        pack_into = _SNAPSHOT_ENTRY.pack_into
        for producer_id, epoch, last_seq, last_offset, delta, appended in self._snapshot_entries():
            # coordinator_epoch and current_txn_first_offset: -1, no transactions.
            row = (producer_id, epoch, last_seq, last_offset, delta, appended, -1, -1)
            pack_into(entries, position, *row)
            position += _SNAPSHOT_ENTRY.size
        # The CRC covers bytes 6..end: the entry count, then the entries.
        crc = crc32c(entries, crc32c(Int32sb.build(count)))
        head = PRODUCER_SNAPSHOT_HEADER.build(
            {"version": SNAPSHOT_VERSION, "crc": crc, "count": count}
        )
        path = snapshot_path(directory, offset)
        directory.mkdir(parents=True, exist_ok=True)
        write_atomically(path, head, entries)
        return path

    def load_snapshot(self, directory: Path, log_end_offset: int) -> int:
        """Replace the state with the newest valid snapshot at or below `log_end_offset`.

        Returns that snapshot's offset, or 0 when there is none (the state is then empty); the
        caller replays the log from there through `update`. Snapshots above the log end (left by
        a log that has since been truncated) are deleted; a corrupt snapshot is logged, deleted and
        skipped. Expired producer ids are kept: call `remove_expired(now_ms)` after the replay.
        """
        directory = Path(directory)
        self.clear()
        _remove_stale_temporaries(directory)
        snapshots = list_snapshots(directory)
        for offset, path in snapshots:
            if offset > log_end_offset:
                logger.info(
                    "deleting producer-state snapshot %s: above the log end offset %d",
                    path,
                    log_end_offset,
                )
                _unlink(path)
        for offset, path in reversed([s for s in snapshots if s[0] <= log_end_offset]):
            try:
                rows = _read_snapshot(path)
            except _CorruptSnapshot as error:
                logger.warning("deleting corrupt producer-state snapshot %s: %s", path, error)
                _unlink(path)
                continue
            except FileNotFoundError:
                continue
            self._load_rows(rows)
            return offset
        return 0

    def _load_rows(self, rows: list[tuple[int, ...]]) -> None:
        if self._lean:
            records = bytearray(len(rows) * _LEAN_SIZE)
            slots = {}
            for slot, row in enumerate(rows):
                producer_id, epoch, last_seq, last_offset, delta, last_append_ms, _, _ = row
                _LEAN.pack_into(
                    records, slot * _LEAN_SIZE, epoch, last_seq, last_offset, delta, last_append_ms
                )
                slots[producer_id] = slot
            self._records = records
            self._slots = slots
            return
        entries = {}
        for producer_id, epoch, last_seq, last_offset, delta, last_append_ms, _, _ in rows:
            first_seq = (last_seq - delta) % SEQUENCE_SPACE
            batch = _KafkaBatch(first_seq, last_seq, last_offset, delta, -1)
            entries[producer_id] = _KafkaEntry(epoch, last_append_ms, [batch])
        self._entries = entries

    def delete_snapshots_below(
        self, directory: Path, offset: int, keep: int = SNAPSHOTS_TO_KEEP
    ) -> int:
        """Delete the snapshots below `offset`, but never the `keep` newest; return how many."""
        snapshots = list_snapshots(Path(directory))
        protected = {path for _, path in snapshots[-keep:]} if keep > 0 else set()
        deleted = 0
        for snapshot_offset, path in snapshots:
            if snapshot_offset < offset and path not in protected:
                _unlink(path)
                deleted += 1
        return deleted


def _read_snapshot(path: Path) -> list[tuple[int, ...]]:
    """The entries of a snapshot file, each checked; raises _CorruptSnapshot for any fault."""
    data = path.read_bytes()
    if len(data) < _ENTRIES_START:
        raise _CorruptSnapshot(f"{len(data)} bytes, shorter than the {_ENTRIES_START}-byte header")
    header = PRODUCER_SNAPSHOT_HEADER.parse(data)
    if header.version != SNAPSHOT_VERSION:
        raise _CorruptSnapshot(f"version {header.version}, expected {SNAPSHOT_VERSION}")
    view = memoryview(data)
    actual = crc32c(view[_CRC_START:])
    if actual != header.crc:
        raise _CorruptSnapshot(f"CRC mismatch: stored {header.crc:#010x}, computed {actual:#010x}")
    count = header.count
    expected = _ENTRIES_START + count * _SNAPSHOT_ENTRY.size
    if count < 0 or len(data) != expected:
        raise _CorruptSnapshot(f"{count} entries need {expected} bytes, the file has {len(data)}")
    rows = list(_SNAPSHOT_ENTRY.iter_unpack(view[_ENTRIES_START:]))
    seen = set()
    for producer_id, epoch, last_seq, last_offset, delta, _, _, _ in rows:
        if producer_id in seen:
            raise _CorruptSnapshot(f"producer {producer_id} appears twice")
        if (
            producer_id < 0
            or epoch < 0
            or not 0 <= last_seq <= MAX_SEQUENCE
            or delta < 0
            or last_offset < delta
        ):
            raise _CorruptSnapshot(
                f"impossible entry: producer {producer_id} epoch {epoch} last sequence {last_seq} "
                f"last offset {last_offset} offset delta {delta}"
            )
        seen.add(producer_id)
    return rows


def _remove_stale_temporaries(directory: Path) -> None:
    """A crash during write_snapshot can leave a temporary file behind; it was never renamed."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return
    for name in names:
        if name.endswith(".snapshot" + _TMP_SUFFIX):
            _unlink(directory / name)


def _unlink(path: Path) -> None:
    try:
        path.unlink()
    except FileNotFoundError:
        pass


