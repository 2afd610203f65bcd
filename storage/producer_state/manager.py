"""The interface every producer state manager implements, and what it answers (Kafka's
ProducerStateManager / ProducerAppendInfo / ProducerStateEntry / BatchMetadata vocabulary).

One manager per partition. The broker asks `prepare_update(header)` before appending a batch that
carries a producer id, appends only when the answer `should_append`, and then calls
`update(header_with_assigned_offset, now_ms)`. Recovery loads the newest snapshot at or below the
log end (`truncate_and_reload`) and replays the log after it through `update`, without checks.

Both modes reject a batch that has a producer id but no base sequence with INVALID_RECORD, as
Kafka's LogValidator does, before their own rules (lean.py, kafka.py); transactional batches pass the
same rules, then the transaction rules below.

Expiry: `update` records `now_ms` as the producer's last append time; `remove_expired_producers`
removes producer ids with now_ms - last_append_ms >= expiration_ms (producer.id.expiration.ms,
default 86,400,000). Kafka measures from the batch's max timestamp (client-controlled); the wall
clock of the append is what this broker's shell owns. A producer id that has expired but not yet
been removed is still validated against its state: `prepare_update` has no clock.

Snapshots (snapshot.py) hold the latest batch of each producer id, in both modes, as Kafka writes
an entry; the `timestamp` field holds the time of the producer's last append (what expiry measures
from), so expiry carries over a restart; the coordinator epoch and the open transaction's first
offset are the entry's last two fields (-1 when none). A producer whose only record here is a marker
is written with last sequence -1, last offset -1 and offset delta 0, as Kafka writes an entry
without batches.

Transactions (KIP-98, Kafka's ProducerAppendInfo.appendDataBatch / appendEndTxnMarker), the same
in both modes: a producer's first transactional batch opens its transaction at that batch's base
offset (`current_txn_first_offset`); its COMMIT or ABORT marker (a control batch, written by the
transaction coordinator through `prepare_marker` / `update(header, now_ms, marker)`) closes it.
A non-transactional batch of a producer with a transaction open is INVALID_TXN_STATE; a marker whose
producer epoch is older than the producer's is INVALID_PRODUCER_EPOCH, one whose coordinator epoch
is older than the last marker's TRANSACTION_COORDINATOR_FENCED. A marker of a newer epoch starts the
producer's state afresh at that epoch with no batch (its next batch must start at sequence 0), as
Kafka's ProducerStateEntry.update does. The open transactions are kept in first-offset order
(storage.producer_state.txns.OngoingTxns): `first_unstable_offset` is the oldest's first offset, from
which the shell derives the partition's last stable offset. A producer with a transaction open never
expires (Kafka's isProducerExpired). Both fields live beside the mode's own state, only for the
producers that use transactions: a producer that never did costs nothing more.

Pure logic: no I/O other than the snapshot files, no clock (`now_ms` is an argument), no trio.
"""

from __future__ import annotations

import dataclasses
import logging
import sys
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Iterator, NamedTuple

from minibroker.protocol.errors import ErrorCode
from minibroker.storage.files import unlink_if_exists
from minibroker.storage.producer_state.txns import AbortedTxn, CompletedTxn, OngoingTxns
from minibroker.storage.producer_state.snapshot import (
    SEQUENCE_SPACE,
    SNAPSHOTS_TO_KEEP,
    CorruptSnapshot,
    SnapshotRow,
    list_snapshots,
    read_snapshot,
    remove_stale_temporaries,
    write_snapshot,
)

if TYPE_CHECKING:
    from minibroker.protocol.records import BatchHeader, ControlRecord

logger = logging.getLogger(__name__)

MAX_SEQUENCE = SEQUENCE_SPACE - 1
DEFAULT_MAX_IN_FLIGHT = 10_000_000  # sequence numbers (the lean producer state proposal's default); see lean.py
DEFAULT_EXPIRATION_MS = 86_400_000  # producer.id.expiration.ms


def next_sequence(sequence: int) -> int:
    return 0 if sequence == MAX_SEQUENCE else sequence + 1


@dataclass(frozen=True, slots=True)
class ProducerAppendInfo:
    """What validating one batch against its producer's state decided (Kafka's ProducerAppendInfo
    validates and accumulates the update; here `update` applies the batch after the append, when
    its offsets are known).

    error_code NONE and duplicate_of None: append it. duplicate_of set: do not append; answer with
    these (base_offset, last_offset) of the original (kafka mode with NONE, lean mode with
    DUPLICATE_SEQUENCE_NUMBER for an exact copy of the latest batch). Any other error_code: answer
    it, do not append.
    """

    error_code: ErrorCode
    duplicate_of: tuple[int, int] | None = None
    message: str = ""

    @property
    def should_append(self) -> bool:
        return self.error_code == ErrorCode.none and self.duplicate_of is None


ACCEPT = ProducerAppendInfo(ErrorCode.none, None, "")


class BatchMetadata(NamedTuple):
    """One retained batch, as `last_entry()` shows it (Kafka's BatchMetadata)."""

    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int


@dataclass(frozen=True, slots=True)
class ProducerStateEntry:
    """A read-only view of one producer id's state (Kafka's ProducerStateEntry)."""

    producer_id: int
    producer_epoch: int
    last_append_ms: int
    # Oldest first; lean mode holds at most one. Empty for a producer whose epoch only a marker set.
    batch_metadata: tuple[BatchMetadata, ...]
    coordinator_epoch: int = -1  # of the last marker, -1 when none
    current_txn_first_offset: int = -1  # first offset of its open transaction, -1 when none

    @property
    def first_seq(self) -> int:
        return self.batch_metadata[-1].first_seq if self.batch_metadata else -1

    @property
    def last_seq(self) -> int:
        return self.batch_metadata[-1].last_seq if self.batch_metadata else -1

    @property
    def first_data_offset(self) -> int:
        return self.batch_metadata[-1].first_offset if self.batch_metadata else -1

    @property
    def last_data_offset(self) -> int:
        return self.batch_metadata[-1].last_offset if self.batch_metadata else -1


class ProducerStateManager(ABC):
    """The producer-id state of one partition. Two implementations, chosen by
    `producer.state.mode`: LeanProducerStateManager ("lean", the lean producer state proposal) and
    KafkaProducerStateManager ("kafka"); `for_mode` makes one."""

    mode: ClassVar[str]
    _modes: ClassVar[dict[str, type[ProducerStateManager]]] = {}

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        ProducerStateManager._modes[cls.mode] = cls

    @staticmethod
    def for_mode(mode: str = "lean", max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
                 expiration_ms: int = DEFAULT_EXPIRATION_MS) -> ProducerStateManager:
        manager = ProducerStateManager._modes.get(mode)
        if manager is None:
            raise ValueError(f"producer state mode must be one of {tuple(ProducerStateManager._modes)}, "
                             f"not {mode!r}")
        return manager(max_in_flight, expiration_ms)

    def __init__(self, max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
                 expiration_ms: int = DEFAULT_EXPIRATION_MS) -> None:
        if not 1 <= max_in_flight <= SEQUENCE_SPACE // 2:
            raise ValueError(
                f"max_in_flight must be in [1, 2**30] sequence numbers, not {max_in_flight}"
            )
        if expiration_ms <= 0:
            raise ValueError(f"expiration_ms must be positive: {expiration_ms}")
        self.max_in_flight = max_in_flight
        self.expiration_ms = expiration_ms
        self._txns = OngoingTxns()
        self._coordinator_epochs: dict[int, int] = {}  # only producers that have had a marker

    # --- inspection ---------------------------------------------------------------------------

    # Every implementation keys its state by producer id here (what a key maps to is its own).
    _producers: dict[int, Any]

    @property
    def producer_id_count(self) -> int:
        """How many producer ids have state here."""
        return len(self._producers)

    def __contains__(self, producer_id: object) -> bool:
        return producer_id in self._producers

    def producer_ids(self) -> list[int]:
        return list(self._producers)

    def last_entry(self, producer_id: int) -> ProducerStateEntry | None:
        """The state of one producer id, or None when it has none."""
        entry = self._entry(producer_id)
        if entry is None:
            return None
        coordinator_epoch = self._coordinator_epochs.get(producer_id, -1)
        first = self._txns.first_offset(producer_id)
        if coordinator_epoch < 0 and first is None:
            return entry
        return dataclasses.replace(entry, coordinator_epoch=coordinator_epoch,
                                   current_txn_first_offset=-1 if first is None else first)

    def entries(self) -> Iterator[ProducerStateEntry]:
        """Every producer id's state (DescribeProducers)."""
        for producer_id in list(self._producers):
            entry = self.last_entry(producer_id)
            if entry is not None:
                yield entry

    @abstractmethod
    def _entry(self, producer_id: int) -> ProducerStateEntry | None:
        """The mode's view of one producer id, without the transaction fields."""

    def memory_bytes(self) -> int:
        """The bytes this state occupies (sys.getsizeof of its containers and everything they hold;
        O(entries) to compute)."""
        total = self._memory_bytes()
        for mapping in (self._coordinator_epochs, self._txns._first):  # only once transactions are used
            if mapping:
                total += sys.getsizeof(mapping) + sum(sys.getsizeof(k) + sys.getsizeof(v) for k, v in mapping.items())
        return total

    @abstractmethod
    def _memory_bytes(self) -> int:
        """The mode's own containers, as `memory_bytes` counts them."""

    # --- transactions -------------------------------------------------------------------------

    @property
    def first_unstable_offset(self) -> int | None:
        """The first offset of the oldest transaction open here (Kafka's firstUnstableOffset),
        None when none is open."""
        return self._txns.first_unstable_offset

    def ongoing_transactions(self) -> list[tuple[int, int]]:
        """(producer id, first offset) of each open transaction, oldest first."""
        return list(self._txns.items())

    def current_txn_first_offset(self, producer_id: int) -> int | None:
        return self._txns.first_offset(producer_id)

    def prepare_marker(self, producer_id: int, producer_epoch: int, coordinator_epoch: int) -> ProducerAppendInfo:
        """Whether a COMMIT/ABORT marker of this producer epoch and coordinator epoch may be
        appended (Kafka's appendEndTxnMarker checks). Pure: changes nothing."""
        entry = self._entry(producer_id)
        if entry is not None and producer_epoch < entry.producer_epoch:
            return ProducerAppendInfo(
                ErrorCode.invalid_producer_epoch,
                None,
                f"producer {producer_id}: marker epoch {producer_epoch} is older than the current epoch "
                f"{entry.producer_epoch}",
            )
        current = self._coordinator_epochs.get(producer_id, -1)
        if coordinator_epoch < current:
            return ProducerAppendInfo(
                ErrorCode.transaction_coordinator_fenced,
                None,
                f"producer {producer_id}: coordinator epoch {coordinator_epoch} is older than {current} (zombie coordinator)",
            )
        return ACCEPT

    def peek_marker(self, producer_id: int, marker_offset: int, abort: bool) -> tuple[CompletedTxn | None, int]:
        """What a marker at `marker_offset` would complete, and the last stable offset a transaction
        index entry for it records; changes nothing (see OngoingTxns.peek_end)."""
        return self._txns.peek_end(producer_id, marker_offset, abort)

    # --- validation ---------------------------------------------------------------------------

    def prepare_update(self, header: BatchHeader) -> ProducerAppendInfo:
        """Decide whether the batch may be appended. Pure: changes nothing."""
        producer_id = header.producer_id
        if producer_id < 0:
            return ACCEPT
        first = header.base_sequence
        if first < 0:
            return ProducerAppendInfo(
                ErrorCode.invalid_record,
                None,
                f"batch of producer {producer_id} has no base sequence ({first})",
            )
        verdict = self._validate(header, producer_id, first)
        if verdict.should_append and not header.is_transactional and producer_id in self._txns:
            return ProducerAppendInfo(
                ErrorCode.invalid_txn_state,
                None,
                f"producer {producer_id}: expected a transactional batch, its transaction is open since "
                f"offset {self._txns.first_offset(producer_id)}",
            )
        return verdict

    @abstractmethod
    def _validate(self, header: BatchHeader, producer_id: int, first: int) -> ProducerAppendInfo:
        """The mode's rules for a batch of a producer id with base sequence `first` (>= 0)."""

    @staticmethod
    def _out_of_order(producer_id: int, first: int, last_seq: int) -> ProducerAppendInfo:
        return ProducerAppendInfo(
            ErrorCode.out_of_order_sequence_number,
            None,
            f"producer {producer_id}: sequence {first} does not follow last sequence {last_seq}",
        )

    @staticmethod
    def _fenced(producer_id: int, epoch: int, current: int) -> ProducerAppendInfo:
        return ProducerAppendInfo(
            ErrorCode.invalid_producer_epoch,
            None,
            f"producer {producer_id}: epoch {epoch} is older than the current epoch {current}",
        )

    @staticmethod
    def _new_epoch_not_at_zero(producer_id: int, epoch: int, first: int, current: int) -> ProducerAppendInfo:
        return ProducerAppendInfo(
            ErrorCode.out_of_order_sequence_number,
            None,
            f"producer {producer_id}: new epoch {epoch} (current {current}) must start at "
            f"sequence 0, not {first}",
        )

    # --- state changes ------------------------------------------------------------------------

    def update(self, header: BatchHeader, now_ms: int, marker: ControlRecord | None = None) -> AbortedTxn | None:
        """Record a batch that was appended at `header.base_offset` (also used for log replay);
        `marker`: the control record of a control batch. Returns the transaction index entry an
        ABORT marker calls for, else None.

        No checks: the latest batch simply replaces (lean) or joins (kafka) the state, and a
        different epoch starts the producer's state afresh, as Kafka's replay does.
        """
        producer_id = header.producer_id
        if producer_id < 0:
            return None
        if header.is_control:
            if marker is None or marker.type > 1:  # not an end-transaction marker
                return None
            self._mark(producer_id, header.producer_epoch, now_ms)
            if marker.coordinator_epoch >= 0:
                self._coordinator_epochs[producer_id] = marker.coordinator_epoch
            return self._txns.end(producer_id, header.base_offset, marker.is_abort)
        self._append_batch(header, now_ms)
        if header.is_transactional:
            self._txns.begin(producer_id, header.base_offset)
        return None

    @abstractmethod
    def _append_batch(self, header: BatchHeader, now_ms: int) -> None: ...

    @abstractmethod
    def _mark(self, producer_id: int, epoch: int, now_ms: int) -> None:
        """A marker of `epoch` was appended: the producer's state at that epoch (afresh, with no
        batch, when the epoch differs), its last append `now_ms`."""

    def remove_expired_producers(self, now_ms: int) -> int:
        """Remove the producer ids whose last append is expiration_ms or more before now_ms, except
        those with a transaction open. Returns how many were removed."""
        removed = self._remove_expired(now_ms - self.expiration_ms, self._txns)
        for producer_id in removed:
            self._coordinator_epochs.pop(producer_id, None)
        return len(removed)

    @abstractmethod
    def _remove_expired(self, cutoff_ms: int, keep: OngoingTxns) -> list[int]:
        """Remove the producer ids last appended at or before `cutoff_ms` and not in `keep`;
        return them."""

    def clear(self) -> None:
        self._txns.clear()
        self._coordinator_epochs = {}
        self._clear_producers()

    @abstractmethod
    def _clear_producers(self) -> None: ...

    # --- snapshots ----------------------------------------------------------------------------

    @abstractmethod
    def _snapshot_rows(self) -> Iterator[SnapshotRow]:
        """One row per producer id (see snapshot.SnapshotRow), its last two fields -1."""

    @abstractmethod
    def _load_rows(self, rows: list[SnapshotRow]) -> None:
        """Replace the mode's state with a snapshot's rows."""

    def _rows_with_txns(self) -> Iterator[SnapshotRow]:
        coordinator_epochs, txns = self._coordinator_epochs, self._txns
        if not coordinator_epochs and not len(txns):
            yield from self._snapshot_rows()
            return
        for row in self._snapshot_rows():
            producer_id = row[0]
            first = txns.first_offset(producer_id)
            yield (*row[:6], coordinator_epochs.get(producer_id, -1), -1 if first is None else first)

    def _load_snapshot_rows(self, rows: list[SnapshotRow]) -> None:
        self._load_rows(rows)
        self._coordinator_epochs = {row[0]: row[6] for row in rows if row[6] >= 0}
        self._txns.load((row[0], row[7]) for row in rows if row[7] >= 0)

    def take_snapshot(self, directory: Path, offset: int) -> Path:
        """Write the state as `<directory>/<20-digit offset>.snapshot`, atomically; return its path."""
        return write_snapshot(directory, offset, self._rows_with_txns(), self.producer_id_count)

    def truncate_and_reload(self, directory: Path, log_end_offset: int) -> int:
        """Replace the state with the newest valid snapshot at or below `log_end_offset`.

        Returns that snapshot's offset, or 0 when there is none (the state is then empty); the
        caller replays the log from there through `update`. Snapshots above the log end (left by
        a log that has since been truncated) are deleted; a corrupt snapshot is logged, deleted and
        skipped. Expired producer ids are kept: call `remove_expired_producers(now_ms)` after the
        replay.
        """
        directory = Path(directory)
        self.clear()
        remove_stale_temporaries(directory)
        snapshots = list_snapshots(directory)
        for offset, path in snapshots:
            if offset > log_end_offset:
                logger.info(
                    "deleting producer-state snapshot %s: above the log end offset %d",
                    path,
                    log_end_offset,
                )
                unlink_if_exists(path)
        for offset, path in reversed([s for s in snapshots if s[0] <= log_end_offset]):
            try:
                rows = read_snapshot(path)
            except CorruptSnapshot as error:
                logger.warning("deleting corrupt producer-state snapshot %s: %s", path, error)
                unlink_if_exists(path)
                continue
            except FileNotFoundError:
                continue
            self._load_snapshot_rows(rows)
            return offset
        return 0

    @staticmethod
    def delete_snapshots_before(directory: Path, offset: int, keep: int = SNAPSHOTS_TO_KEEP) -> int:
        """Delete the snapshots below `offset`, but never the `keep` newest; return how many."""
        snapshots = list_snapshots(Path(directory))
        protected = {path for _, path in snapshots[-keep:]} if keep > 0 else set()
        deleted = 0
        for snapshot_offset, path in snapshots:
            if snapshot_offset < offset and path not in protected:
                unlink_if_exists(path)
                deleted += 1
        return deleted
