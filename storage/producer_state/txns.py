"""The ongoing transactions of one partition (Kafka's ProducerStateManager.ongoingTxns, TxnMetadata,
CompletedTxn): which producers have a transaction open here, from which offset, in first-offset order.

A transaction starts at the first transactional batch of a producer that has none open, and ends at
its COMMIT or ABORT marker (a control batch). The first unstable offset is the first offset of the
oldest open transaction; the last stable offset (LSO) of the partition is that, else the high
watermark (UnifiedLog.lastStableOffset). When an ABORT ends a transaction that wrote data here, the
partition's transaction index (minibroker.storage.txn_index) gets an entry whose last stable offset is the first
offset of the oldest transaction still open (another producer's), else the marker's offset + 1
(ProducerStateManager.lastStableOffset(CompletedTxn)): a fetch that searches the index stops there.

Used by both producer state managers (the same for the lean and kafka modes) and by the rebuild of a
damaged transaction index (minibroker.storage.log). Pure: no I/O, no clock.
"""

from __future__ import annotations

from typing import Iterable, Iterator, NamedTuple

__all__ = ["AbortedTxn", "CompletedTxn", "OngoingTxns"]


class CompletedTxn(NamedTuple):
    """A transaction a marker ended (Kafka's CompletedTxn): `last_offset` is the marker's offset."""

    producer_id: int
    first_offset: int
    last_offset: int
    is_aborted: bool


class AbortedTxn(NamedTuple):
    """One entry of a transaction index (Kafka's AbortedTxn)."""

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


class OngoingTxns:
    """producer id -> first offset of its open transaction, kept in first-offset order (offsets only
    grow as batches are appended, so insertion order is first-offset order; a snapshot's rows are
    sorted when loaded)."""

    __slots__ = ("_first",)

    def __init__(self) -> None:
        self._first: dict[int, int] = {}

    def __len__(self) -> int:
        return len(self._first)

    def __contains__(self, producer_id: object) -> bool:
        return producer_id in self._first

    def items(self) -> Iterator[tuple[int, int]]:
        """(producer id, first offset), oldest transaction first."""
        return iter(self._first.items())

    def first_offset(self, producer_id: int) -> int | None:
        return self._first.get(producer_id)

    def begin(self, producer_id: int, first_offset: int) -> None:
        """A transactional batch at `first_offset`: opens the producer's transaction unless it has one."""
        if producer_id not in self._first:
            self._first[producer_id] = first_offset

    def load(self, open_txns: Iterable[tuple[int, int]]) -> None:
        """Replace the state with these (producer id, first offset) pairs, in any order."""
        self._first = dict(sorted(open_txns, key=lambda pair: pair[1]))

    def clear(self) -> None:
        self._first = {}

    def discard(self, producer_id: int) -> None:
        self._first.pop(producer_id, None)

    @property
    def first_unstable_offset(self) -> int | None:
        """The first offset of the oldest open transaction, None when none is open."""
        for first in self._first.values():
            return first
        return None

    def peek_end(self, producer_id: int, marker_offset: int, abort: bool) -> tuple[CompletedTxn | None, int]:
        """What a marker at `marker_offset` would complete, changing nothing: the CompletedTxn (None
        when the producer has no transaction open here: a marker without data changes neither the
        LSO nor the index, as in Kafka) and the last stable offset an index entry for it records."""
        first = self._first.get(producer_id)
        if first is None:
            return None, marker_offset + 1
        lso = marker_offset + 1
        for other, other_first in self._first.items():
            if other != producer_id:
                lso = other_first
                break
        return CompletedTxn(producer_id, first, marker_offset, abort), lso

    def end(self, producer_id: int, marker_offset: int, abort: bool) -> AbortedTxn | None:
        """Apply a marker; returns the transaction index entry it calls for (an ABORT of a
        transaction that wrote data here), else None."""
        completed, lso = self.peek_end(producer_id, marker_offset, abort)
        self._first.pop(producer_id, None)
        if completed is None or not abort:
            return None
        return AbortedTxn(producer_id, completed.first_offset, marker_offset, lso)
