"""The ``lean`` producer state (after the lean producer state proposal; the default): the latest batch per producer id only.

It keeps ONLY the latest batch per producer id, packed into a
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

What "max.in.flight.sequence.number.per.connection" counts (the lean producer state proposal names it, `max_in_flight`
here): SEQUENCE NUMBERS, not batches. A count of batches (like the client's
max.in.flight.requests.per.connection, at most 5 with idempotence) is what bounds which batches a
conforming client can retry, but lean state keeps no batch boundaries below the latest batch, so
"within 5 batches" cannot be checked; the only distance it can measure is in sequence numbers, which
is also what the proposal's name says. The window must then cover every sequence number a client can
legitimately resend: all its in-flight batches, each of many records. A window of 5 sequence numbers
would answer OUT_OF_ORDER_SEQUENCE_NUMBER to the ordinary retry of the oldest of 5 multi-record
batches after a dropped connection: an error for data that is in the log, whereas
DUPLICATE_SEQUENCE_NUMBER is what the Java client completes as a success without offsets
(Sender.completeBatch).

The default is the proposal's: DEFAULT_MAX_IN_FLIGHT = 10,000,000 sequence numbers ("a default value of
10 million as max inflight sequence number possible that should not hit throttling"). Today's
clients keep at most 5 batches in flight (librdkafka caps a batch at batch.num.messages = 10,000
records; the Java client's 16 KiB batch.size holds about 2,300 minimal uncompressed records), so
10 million covers them with room to spare, and it is what the proposal's phase 2 producers are told
(the broker sends it on the wire, minibroker.protocol.extensions): such a producer keeps many batches in
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

Rules 1-4 are Kafka's (kafka.py); 5-7 replace Kafka's five retained batches. Pure: no clock, no trio.
"""

from __future__ import annotations

import struct
import sys
from typing import TYPE_CHECKING, Iterator

from minibroker.protocol.errors import ErrorCode
from minibroker.storage.producer_state.manager import (
    ACCEPT,
    BatchMetadata,
    ProducerAppendInfo,
    ProducerStateEntry,
    ProducerStateManager,
    next_sequence,
)
from minibroker.storage.producer_state.snapshot import SEQUENCE_SPACE, SnapshotRow

if TYPE_CHECKING:
    from minibroker.protocol.records import BatchHeader

# epoch i16, last_sequence i32, last_offset i64, offset_delta i32, last_append_ms i64: 26 bytes.
_LEAN = struct.Struct("<hiqiq")
_LEAN_SIZE = _LEAN.size
_LEAN_LAST_APPEND = struct.Struct("<q")
_LEAN_LAST_APPEND_AT = 18
# Rebuild the record array when this many slots are free and they outnumber the live ones.
_MIN_FREE_TO_COMPACT = 1024


class LeanProducerStateManager(ProducerStateManager):
    mode = "lean"

    def __init__(self, *args: int, **kwargs: int) -> None:
        super().__init__(*args, **kwargs)
        # producer id -> slot in _records; freed slots are reused before the array grows.
        self._producers: dict[int, int] = {}
        self._records = bytearray()
        self._free: list[int] = []

    # --- inspection ---------------------------------------------------------------------------

    def _entry(self, producer_id: int) -> ProducerStateEntry | None:
        slot = self._producers.get(producer_id)
        if slot is None:
            return None
        epoch, last_seq, last_offset, delta, last_append_ms = _LEAN.unpack_from(self._records, slot * _LEAN_SIZE)
        if last_seq < 0:  # only a marker set its epoch: no batch
            return ProducerStateEntry(producer_id, epoch, last_append_ms, ())
        batch = BatchMetadata((last_seq - delta) % SEQUENCE_SPACE, last_seq, last_offset - delta, last_offset)
        return ProducerStateEntry(producer_id, epoch, last_append_ms, (batch,))

    def _memory_bytes(self) -> int:
        total = sys.getsizeof(self._producers) + sys.getsizeof(self._records) + sys.getsizeof(self._free)
        total += sum(sys.getsizeof(pid) + sys.getsizeof(slot) for pid, slot in self._producers.items())
        return total + sum(map(sys.getsizeof, self._free))

    # --- validation ---------------------------------------------------------------------------

    def _validate(self, header: BatchHeader, producer_id: int, first: int) -> ProducerAppendInfo:
        slot = self._producers.get(producer_id)
        if slot is None:
            return ACCEPT
        epoch, last_seq, last_offset, delta, _ = _LEAN.unpack_from(self._records, slot * _LEAN_SIZE)
        batch_epoch = header.producer_epoch
        if batch_epoch == epoch:
            if first == next_sequence(last_seq):
                return ACCEPT
            if last_seq < 0:  # a marker set the epoch, no batch since: only sequence 0 follows
                return self._out_of_order(producer_id, first, last_seq)
            latest_first = (last_seq - delta) % SEQUENCE_SPACE
            if first == latest_first and header.last_sequence == last_seq:
                return ProducerAppendInfo(
                    ErrorCode.duplicate_sequence_number,
                    (last_offset - delta, last_offset),
                    f"producer {producer_id} resent its latest batch {first}..{last_seq}",
                )
            below = (last_seq - first) % SEQUENCE_SPACE
            if header.last_offset_delta <= below < self.max_in_flight:
                return ProducerAppendInfo(
                    ErrorCode.duplicate_sequence_number,
                    None,
                    f"producer {producer_id} resent sequences {first}..{header.last_sequence}, "
                    f"at or below its last sequence {last_seq}",
                )
            return self._out_of_order(producer_id, first, last_seq)
        if batch_epoch < epoch:
            return self._fenced(producer_id, batch_epoch, epoch)
        if first == 0:
            return ACCEPT
        return self._new_epoch_not_at_zero(producer_id, batch_epoch, first, epoch)

    # --- state changes ------------------------------------------------------------------------

    def _slot(self, producer_id: int) -> int:
        slot = self._producers.get(producer_id)
        if slot is None:
            if self._free:
                slot = self._free.pop()
            else:
                slot = len(self._records) // _LEAN_SIZE
                self._records.extend(bytes(_LEAN_SIZE))
            self._producers[producer_id] = slot
        return slot

    def _append_batch(self, header: BatchHeader, now_ms: int) -> None:
        slot = self._slot(header.producer_id)
        delta = header.last_offset_delta
        _LEAN.pack_into(self._records, slot * _LEAN_SIZE, header.producer_epoch, header.last_sequence,
                        header.base_offset + delta, delta, now_ms)

    def _mark(self, producer_id: int, epoch: int, now_ms: int) -> None:
        known = producer_id in self._producers
        slot = self._slot(producer_id)
        at = slot * _LEAN_SIZE
        if known and _LEAN.unpack_from(self._records, at)[0] == epoch:
            _LEAN_LAST_APPEND.pack_into(self._records, at + _LEAN_LAST_APPEND_AT, now_ms)
        else:  # a new epoch, no batch yet: last sequence -1 (sequence 0 is next), as Kafka's empty entry
            _LEAN.pack_into(self._records, at, epoch, -1, -1, 0, now_ms)

    def _remove_expired(self, cutoff_ms: int, keep) -> list[int]:
        cutoff = cutoff_ms
        records = self._records
        read_time = _LEAN_LAST_APPEND.unpack_from
        expired = [
            (producer_id, slot)
            for producer_id, slot in self._producers.items()
            if read_time(records, slot * _LEAN_SIZE + _LEAN_LAST_APPEND_AT)[0] <= cutoff and producer_id not in keep
        ]
        for producer_id, slot in expired:
            del self._producers[producer_id]
            self._free.append(slot)
        if len(self._free) >= _MIN_FREE_TO_COMPACT and len(self._free) > len(self._producers):
            self._compact()
        return [producer_id for producer_id, _ in expired]

    def _compact(self) -> None:
        """Give back the memory of freed slots by rewriting the live records contiguously."""
        old = self._records
        records = bytearray(len(self._producers) * _LEAN_SIZE)
        slots = {}
        for new_slot, (producer_id, slot) in enumerate(self._producers.items()):
            start = slot * _LEAN_SIZE
            records[new_slot * _LEAN_SIZE : (new_slot + 1) * _LEAN_SIZE] = old[start : start + _LEAN_SIZE]
            slots[producer_id] = new_slot
        self._records = records
        self._producers = slots
        self._free = []

    def _clear_producers(self) -> None:
        self._producers = {}
        self._records = bytearray()
        self._free = []

    # --- snapshots ----------------------------------------------------------------------------

    def _snapshot_rows(self) -> Iterator[SnapshotRow]:
        records = self._records
        for producer_id, slot in self._producers.items():
            # coordinator_epoch and current_txn_first_offset: filled in by the manager.
            yield (producer_id, *_LEAN.unpack_from(records, slot * _LEAN_SIZE), -1, -1)

    def _load_rows(self, rows: list[SnapshotRow]) -> None:
        records = bytearray(len(rows) * _LEAN_SIZE)
        slots = {}
        for slot, row in enumerate(rows):
            producer_id, epoch, last_seq, last_offset, delta, last_append_ms, _, _ = row
            _LEAN.pack_into(records, slot * _LEAN_SIZE, epoch, last_seq, last_offset, delta, last_append_ms)
            slots[producer_id] = slot
        self._records = records
        self._producers = slots
        self._free = []
