"""The interface every producer state manager implements, and what it answers (Kafka's
ProducerStateManager / ProducerAppendInfo / ProducerStateEntry / BatchMetadata vocabulary).

One manager per partition. The broker asks `prepare_update(header)` before appending a batch that
carries a producer id, appends only when the answer `should_append`, and then calls
`update(header_with_assigned_offset, now_ms)`. Recovery loads the newest snapshot at or below the
log end (`truncate_and_reload`) and replays the log after it through `update`, without checks.

Both modes reject a batch that has a producer id but no base sequence with INVALID_RECORD, as
Kafka's LogValidator does, before their own rules (lean.py, kafka.py). Transactional batches get no
special treatment here; the caller decides whether it accepts them at all.

Expiry: `update` records `now_ms` as the producer's last append time; `remove_expired_producers`
removes producer ids with now_ms - last_append_ms >= expiration_ms (producer.id.expiration.ms,
default 86,400,000). Kafka measures from the batch's max timestamp (client-controlled); the wall
clock of the append is what this broker's shell owns. A producer id that has expired but not yet
been removed is still validated against its state: `prepare_update` has no clock.

Snapshots (snapshot.py) hold the latest batch of each producer id, in both modes, as Kafka writes
an entry; the `timestamp` field holds the time of the producer's last append (what expiry measures
from), so expiry carries over a restart.

Room for transactions (issue 14), not built: a ProducerStateEntry gains its coordinator epoch and the
first offset of its ongoing transaction (`current_txn_first_offset`, the snapshot fields written as
-1 today, carried by `_snapshot_rows` / `_load_rows`); `update` starts a transaction at the first
transactional batch of a producer and a control batch (the COMMIT/ABORT marker) ends it; the manager
keeps the ongoing transactions ordered by first offset, and the last stable offset is the smallest
of them (Kafka's firstUnstableOffset), else the high watermark.

Pure logic: no I/O other than the snapshot files, no clock (`now_ms` is an argument), no trio.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Iterator, NamedTuple

from protocol.errors import ErrorCode
from storage.files import unlink_if_exists
from storage.producer_state.snapshot import (
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
    from protocol.records import BatchHeader

logger = logging.getLogger(__name__)

MAX_SEQUENCE = SEQUENCE_SPACE - 1
DEFAULT_MAX_IN_FLIGHT = 10_000_000  # sequence numbers (seed 003's default); see lean.py
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
    batch_metadata: tuple[BatchMetadata, ...]  # oldest first; lean mode holds exactly one

    @property
    def first_seq(self) -> int:
        return self.batch_metadata[-1].first_seq

    @property
    def last_seq(self) -> int:
        return self.batch_metadata[-1].last_seq

    @property
    def first_data_offset(self) -> int:
        return self.batch_metadata[-1].first_offset

    @property
    def last_data_offset(self) -> int:
        return self.batch_metadata[-1].last_offset


class ProducerStateManager(ABC):
    """The producer-id state of one partition. Two implementations, chosen by
    `producer.state.mode`: LeanProducerStateManager ("lean", seed 003) and
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

    @abstractmethod
    def last_entry(self, producer_id: int) -> ProducerStateEntry | None:
        """The state of one producer id, or None when it has none."""

    @abstractmethod
    def memory_bytes(self) -> int:
        """The bytes this state occupies (sys.getsizeof of its containers and everything they hold;
        O(entries) to compute)."""

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
        return self._validate(header, producer_id, first)

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

    def update(self, header: BatchHeader, now_ms: int) -> None:
        """Record a batch that was appended at `header.base_offset` (also used for log replay).

        No checks: the latest batch simply replaces (lean) or joins (kafka) the state, and a
        different epoch starts the producer's state afresh, as Kafka's replay does.
        """
        if header.producer_id >= 0:
            self._append_batch(header, now_ms)

    @abstractmethod
    def _append_batch(self, header: BatchHeader, now_ms: int) -> None: ...

    @abstractmethod
    def remove_expired_producers(self, now_ms: int) -> int:
        """Remove the producer ids whose last append is expiration_ms or more before now_ms.

        Returns how many were removed.
        """

    @abstractmethod
    def clear(self) -> None: ...

    # --- snapshots ----------------------------------------------------------------------------

    @abstractmethod
    def _snapshot_rows(self) -> Iterator[SnapshotRow]:
        """One row per producer id (see snapshot.SnapshotRow)."""

    @abstractmethod
    def _load_rows(self, rows: list[SnapshotRow]) -> None:
        """Replace the state with a snapshot's rows."""

    def take_snapshot(self, directory: Path, offset: int) -> Path:
        """Write the state as `<directory>/<20-digit offset>.snapshot`, atomically; return its path."""
        return write_snapshot(directory, offset, self._snapshot_rows(), self.producer_id_count)

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
            self._load_rows(rows)
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
