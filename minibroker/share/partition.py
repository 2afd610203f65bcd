"""A share partition: one partition of a topic as one share group consumes it (KIP-932; Kafka 4.4's
`SharePartition`, `InFlightBatch`, `InFlightState`, `RecordState`). Pure: no trio, no clock; `now`
(monotonic seconds, what acquisition locks expire on) is an argument, and the state is written
through the `SharePersister` it is given (the share coordinator, minibroker/share/coordinator.py).

The records between the share-partition start offset (SPSO) and end offset (SPEO) are in flight,
each in one of four states (Kafka's RecordState ids, which are also what is persisted):

    AVAILABLE (0)      may be acquired by any member
    ACQUIRED (1)       delivered to one member, locked until it acknowledges it or its lock expires
    ACKNOWLEDGED (2)   accepted: done
    ARCHIVED (4)       rejected, a gap, past the delivery-count limit, or below the start offset: done

`TRANSITIONS` below is every move, by the event that makes it. A record's delivery count goes up
by one at each acquisition; when a record would become AVAILABLE again at or above the delivery
count limit (`share.delivery.count.limit`), it is ARCHIVED instead. RENEW (KIP-1222) does not move a
record: it restarts its acquisition lock. The start offset moves over the leading run of
ACKNOWLEDGED/ARCHIVED records; records below it leave the cache.

How records are acquired (Kafka's `acquire`): a fetch reads whole log batches from the next fetch
offset; new records are acquired whole-batch (a log batch is never split when acquired for the
first time, so `max_records` may be exceeded to the end of a batch, as the ShareFetch spec says),
and cut into acquired ranges of about `batch_size` at batch boundaries. Records already in flight
are tracked per in-flight batch until a part of the batch has to be treated on its own (a partial
acknowledgement, a partial acquisition); then per offset. At most `max_in_flight` records
(`share.partition.max.record.locks`) may be in flight: past it, only records already in flight
are acquired again. A record on its last delivery attempts is delivered in smaller groups (Kafka's
throttling from half the delivery-count limit on), and alone at its last attempt. In record-limit
mode (ShareFetch v2's ShareAcquireMode 1) exactly `max_records` are acquired, a batch split if need be.

Persistence (Kafka's `writeShareGroupState`): every change that is not an acquisition is written
(state batches of AVAILABLE with their delivery counts, ACKNOWLEDGED and ARCHIVED records) before
the caller is answered; if the write fails, the change is undone and the caller gets the error. An
acquisition is not written: after a restart, a record that was acquired but never acknowledged,
released or timed out is delivered again with the delivery count last written, as in Kafka.

`acquire`, `acknowledge`, `release_acquired_records` and `expire_locks` return what the share
partition manager needs (minibroker/share/manager.py); `next_lock_deadline` is when to call
`expire_locks` again.
"""

from __future__ import annotations

import bisect
import enum
import heapq
import logging
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Iterable, Iterator, NamedTuple, Protocol

from minibroker.protocol.errors import ErrorCode
from minibroker.storage.share_state import StateBatch

if TYPE_CHECKING:
    from minibroker.storage.share_state import ShareStateKey

__all__ = ["ACK_GAP", "ACK_ACCEPT", "ACK_RELEASE", "ACK_REJECT", "ACK_RENEW", "AcknowledgementBatch",
           "AcquiredRecords", "FetchedBatch", "RecordState", "SharePartition", "SharePartitionError",
           "SharePersister", "TRANSITIONS"]

log = logging.getLogger(__name__)


class RecordState(enum.IntEnum):
    AVAILABLE = 0
    ACQUIRED = 1
    ACKNOWLEDGED = 2
    ARCHIVING = 3  # Kafka's dead-letter-queue hand-off (share.version 2); never entered here
    ARCHIVED = 4


AVAILABLE, ACQUIRED, ACKNOWLEDGED, ARCHIVED = (RecordState.AVAILABLE, RecordState.ACQUIRED,
                                                RecordState.ACKNOWLEDGED, RecordState.ARCHIVED)
TERMINAL = frozenset({ACKNOWLEDGED, ARCHIVED})

# Every move a record can make, by the event that makes it (h11's way of keeping a state machine
# in one table; docs/share-groups.md draws it from here). "delivery count" is what the move does
# to it; "+1" only on acquisition.
TRANSITIONS: dict[str, tuple[RecordState, RecordState, str]] = {
    "acquired by a share fetch": (AVAILABLE, ACQUIRED, "+1"),
    "ACCEPT": (ACQUIRED, ACKNOWLEDGED, "kept"),
    "RELEASE": (ACQUIRED, AVAILABLE, "kept; ARCHIVED at the delivery-count limit"),
    "REJECT": (ACQUIRED, ARCHIVED, "kept"),
    "GAP (an offset with no record)": (ACQUIRED, ARCHIVED, "kept"),
    "acquisition lock expired": (ACQUIRED, AVAILABLE, "kept; ARCHIVED at the limit or below the start offset"),
    "share session closed or connection lost": (ACQUIRED, AVAILABLE, "kept; ARCHIVED at the limit"),
    "aborted transaction (read_committed)": (ACQUIRED, ARCHIVED, "kept"),
    "start offset moved past it (log start moved)": (AVAILABLE, ARCHIVED, "kept"),
}
# The same moves as a table of what may follow what (Kafka's RecordState.validateTransition).
_VALID: dict[RecordState, frozenset[RecordState]] = {
    AVAILABLE: frozenset({ACQUIRED}),
    ACQUIRED: frozenset({AVAILABLE, ACKNOWLEDGED, ARCHIVED}),
    ACKNOWLEDGED: frozenset(),
    ARCHIVED: frozenset(),
}

# Acknowledge types (ShareFetch/ShareAcknowledge AcknowledgeTypes) and the state each leads to.
ACK_GAP, ACK_ACCEPT, ACK_RELEASE, ACK_REJECT, ACK_RENEW = 0, 1, 2, 3, 4
_ACK_STATE = {ACK_GAP: ARCHIVED, ACK_ACCEPT: ACKNOWLEDGED, ACK_RELEASE: AVAILABLE, ACK_REJECT: ARCHIVED}

INCREASE, NO_OP, DECREASE = 1, 0, -1  # Kafka's DeliveryCountOps


class SharePartitionError(Exception):
    """An acknowledgement or state write refused: `error_code` is Kafka's answer."""

    def __init__(self, error_code: ErrorCode, message: str | None) -> None:
        super().__init__(message)
        self.error_code = error_code
        self.message = message


# The share coordinator's answers a share partition passes on as they are, and those it translates
# (Kafka 4.4's SharePartition.fetchPersisterError).
_COORDINATOR_MOVING = (ErrorCode.not_coordinator, ErrorCode.coordinator_not_available,
                       ErrorCode.coordinator_load_in_progress)
_FENCED = (ErrorCode.fenced_leader_epoch, ErrorCode.fenced_state_epoch)


def persister_error(exc: SharePartitionError) -> tuple[ErrorCode, str | None]:
    """What a share partition answers for the share coordinator's refusal of a read or a write
    (Kafka's fetchPersisterError): COORDINATOR_NOT_AVAILABLE while the coordinator moves or loads,
    NOT_LEADER_OR_FOLLOWER for a fenced leader or state epoch (the share partition is stale),
    GROUP_ID_NOT_FOUND and UNKNOWN_TOPIC_OR_PARTITION as they are, UNKNOWN_SERVER_ERROR otherwise."""
    code = exc.error_code
    if code in _COORDINATOR_MOVING:
        return ErrorCode.coordinator_not_available, exc.message
    if code in _FENCED:
        return ErrorCode.not_leader_or_follower, exc.message
    if code in (ErrorCode.group_id_not_found, ErrorCode.unknown_topic_or_partition):
        return code, exc.message
    return ErrorCode.unknown_server_error, exc.message


class SharePersister(Protocol):
    """Where a share partition's state is written (the share coordinator's WriteShareGroupState)."""

    def write_state(self, key: ShareStateKey, state_epoch: int, leader_epoch: int, start_offset: int,
                    delivery_complete_count: int, batches: list[StateBatch]) -> None:
        """Write the changed batches; SharePartitionError (or OSError) when it cannot."""
        ...


class AcquiredRecords(NamedTuple):
    first_offset: int
    last_offset: int
    delivery_count: int


class AcknowledgementBatch(NamedTuple):
    first_offset: int
    last_offset: int
    acknowledge_types: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class FetchedBatch:
    """What acquisition needs of one log batch read for a share fetch."""

    base_offset: int
    last_offset: int
    producer_id: int = -1
    transactional: bool = False
    control: bool = False
    abort_marker: bool = False  # a control batch holding an ABORT marker


class InFlightState:
    """One record's (or a whole in-flight batch's) state, delivery count, owner and lock."""

    __slots__ = ("state", "delivery_count", "member_id", "lock_id")

    def __init__(self, state: RecordState, delivery_count: int, member_id: str = "", lock_id: int = 0) -> None:
        self.state = state
        self.delivery_count = delivery_count
        self.member_id = member_id
        self.lock_id = lock_id  # the acquisition lock holding it (0: none)

    def copy(self) -> InFlightState:
        return InFlightState(self.state, self.delivery_count, self.member_id, self.lock_id)

    def saved(self) -> tuple:
        return self.state, self.delivery_count, self.member_id, self.lock_id

    def restore(self, saved: tuple) -> None:
        self.state, self.delivery_count, self.member_id, self.lock_id = saved

    def try_update(self, new_state: RecordState, ops: int, max_delivery_count: int, member_id: str) -> bool:
        """Kafka's InFlightState.tryUpdateState: a move to AVAILABLE at the delivery-count limit is
        a move to ARCHIVED; False when `_VALID` has no such move."""
        if new_state is AVAILABLE and ops != DECREASE and self.delivery_count >= max_delivery_count:
            new_state = ARCHIVED
        if new_state not in _VALID[self.state]:
            log.error("invalid record state transition %s -> %s", self.state.name, new_state.name)
            return False
        self.state = new_state
        if new_state is not ARCHIVED:
            self.delivery_count += ops
        self.member_id = member_id
        if new_state is not ACQUIRED:
            self.lock_id = 0
        return True

    def archive(self) -> None:
        self.state = ARCHIVED
        self.member_id = ""
        self.lock_id = 0

    def __repr__(self) -> str:
        return f"InFlightState({self.state.name}, count={self.delivery_count}, member={self.member_id!r})"


class InFlightBatch:
    """An offset range in flight: one state for the whole range until a part of it must be
    tracked alone, then one state per offset (Kafka's InFlightBatch)."""

    __slots__ = ("first_offset", "last_offset", "batch_state", "offset_state")

    def __init__(self, first: int, last: int, state: InFlightState) -> None:
        self.first_offset = first
        self.last_offset = last
        self.batch_state: InFlightState | None = state
        self.offset_state: dict[int, InFlightState] | None = None

    @property
    def state(self) -> InFlightState:
        assert self.batch_state is not None, "the batch is tracked per offset"
        return self.batch_state

    def split(self) -> None:
        """Track each offset on its own, each with the batch's state (and lock)."""
        if self.offset_state is None:
            batch = self.state
            self.offset_state = {o: batch.copy() for o in range(self.first_offset, self.last_offset + 1)}
            self.batch_state = None

    def split_acquired_up_to(self, target_offset: int) -> None:
        """Record-limit mode: offsets up to `target_offset` keep the batch's (ACQUIRED) state, the
        rest become AVAILABLE again with the delivery count they had (Kafka's
        maybeInitializeOffsetStateUpdate(targetOffset, ...))."""
        batch = self.state
        self.offset_state = {}
        for offset in range(self.first_offset, self.last_offset + 1):
            self.offset_state[offset] = (batch.copy() if offset <= target_offset
                                         else InFlightState(AVAILABLE, batch.delivery_count - 1))
        self.batch_state = None

    def states(self, first: int | None = None, last: int | None = None) -> Iterator[tuple[int, int, InFlightState]]:
        """(first, last, state) of each state in the batch overlapping [first, last]."""
        if self.offset_state is None:
            yield self.first_offset, self.last_offset, self.state
            return
        for offset, state in self.offset_state.items():
            if (first is None or offset >= first) and (last is None or offset <= last):
                yield offset, offset, state

    def __repr__(self) -> str:
        return f"InFlightBatch({self.first_offset}-{self.last_offset}, {self.batch_state or self.offset_state})"


class _Cache:
    """The in-flight batches by first offset, in order (Kafka's NavigableMap cachedState)."""

    def __init__(self) -> None:
        self.keys: list[int] = []
        self.batches: dict[int, InFlightBatch] = {}

    def __bool__(self) -> bool:
        return bool(self.keys)

    def __len__(self) -> int:
        return len(self.keys)

    def put(self, batch: InFlightBatch) -> None:
        if batch.first_offset not in self.batches:
            bisect.insort(self.keys, batch.first_offset)
        self.batches[batch.first_offset] = batch

    def floor(self, offset: int) -> InFlightBatch | None:
        index = bisect.bisect_right(self.keys, offset)
        return self.batches[self.keys[index - 1]] if index else None

    def range(self, low: int, high: int) -> list[InFlightBatch]:
        """The batches whose first offset is in [low, high]."""
        return [self.batches[k] for k in self.keys[bisect.bisect_left(self.keys, low):bisect.bisect_right(self.keys, high)]]

    def first(self) -> InFlightBatch:
        return self.batches[self.keys[0]]

    def last(self) -> InFlightBatch:
        return self.batches[self.keys[-1]]

    def higher_key(self, offset: int) -> int | None:
        index = bisect.bisect_right(self.keys, offset)
        return self.keys[index] if index < len(self.keys) else None

    def lower_key(self, offset: int) -> int | None:
        index = bisect.bisect_left(self.keys, offset)
        return self.keys[index - 1] if index else None

    def remove_through(self, last_key: int) -> None:
        """Drop every batch whose first offset is at most `last_key`."""
        cut = bisect.bisect_right(self.keys, last_key)
        for key in self.keys[:cut]:
            del self.batches[key]
        del self.keys[:cut]

    def clear(self) -> None:
        self.keys.clear()
        self.batches.clear()

    def __iter__(self) -> Iterator[InFlightBatch]:
        return (self.batches[k] for k in list(self.keys))


class _GapWindow:
    """Offsets between the persisted state batches after a restart: records acquired but never
    written, acquirable as new ones (Kafka's GapWindow)."""

    __slots__ = ("end_offset", "gap_start_offset")

    def __init__(self, end_offset: int, gap_start_offset: int) -> None:
        self.end_offset = end_offset
        self.gap_start_offset = gap_start_offset


class _Changes:
    """The states a request changed and what they were, to write them or undo them."""

    def __init__(self) -> None:
        self.saved: dict[int, tuple[InFlightState, tuple]] = {}
        self.batches: list[StateBatch] = []

    def touch(self, state: InFlightState) -> None:
        self.saved.setdefault(id(state), (state, state.saved()))

    def persist(self, first: int, last: int, state: InFlightState) -> None:
        self.batches.append(StateBatch(first, last, int(state.state), state.delivery_count))

    def undo(self) -> None:
        for state, saved in self.saved.values():
            state.restore(saved)


class SharePartition:
    """One share partition (see the module docstring). `max_delivery_count`, `max_in_flight` and
    `lock_duration_ms` are callables: the group's configs may change while it runs."""

    def __init__(self, key: ShareStateKey, topic: str, persister: SharePersister, *,
                 max_delivery_count: Callable[[], int], max_in_flight: Callable[[], int],
                 lock_duration_ms: Callable[[], int], renew_enabled: Callable[[], bool] = lambda: True,
                 leader_epoch: int = 0) -> None:
        self.key = key
        self.topic = topic
        self.persister = persister
        self.max_delivery_count = max_delivery_count
        self.max_in_flight = max_in_flight
        self.lock_duration_ms = lock_duration_ms
        self.renew_enabled = renew_enabled
        self.leader_epoch = leader_epoch
        self.cache = _Cache()
        self.start_offset = 0
        self.end_offset = 0
        self.state_epoch = 0
        self.delivery_complete_count = 0
        self.find_next_fetch_offset = False
        self.gap_window: _GapWindow | None = None
        self._locks: list[tuple[float, int, int, int]] = []  # (deadline, lock id, first, last)
        self._next_lock_id = 0
        self.acquired_total = 0  # records acquired, for metrics and tests

    # -- loading ------------------------------------------------------------------------------------

    def initialize(self, start_offset: int, state_epoch: int, batches: Iterable[StateBatch]) -> None:
        """The state read from the share coordinator (Kafka's maybeInitialize), its start offset
        already resolved (share.auto.offset.reset for a new one). ValueError for batches that
        cannot be (below the start offset, inverted, or ACQUIRED)."""
        self.start_offset = start_offset
        self.state_epoch = state_epoch
        gap_start = -1
        previous_last = start_offset - 1
        for batch in batches:
            if batch.first_offset < start_offset:
                raise ValueError(f"state batch {batch.first_offset}-{batch.last_offset} is below the start offset "
                                 f"{start_offset}")
            if batch.last_offset < batch.first_offset:
                raise ValueError(f"state batch {batch.first_offset}-{batch.last_offset} is inverted")
            state = RecordState(batch.delivery_state)
            if state is ACQUIRED:
                raise ValueError(f"state batch {batch.first_offset}-{batch.last_offset} is ACQUIRED")
            if gap_start == -1 and batch.first_offset > previous_last + 1:
                gap_start = previous_last + 1
            previous_last = batch.last_offset
            self.cache.put(InFlightBatch(batch.first_offset, batch.last_offset, InFlightState(state, batch.delivery_count)))
            if state in TERMINAL:
                self.delivery_complete_count += batch.last_offset - batch.first_offset + 1
        if self.cache:
            self.find_next_fetch_offset = True
            self.end_offset = self.cache.last().last_offset
            if gap_start != -1:
                self.gap_window = _GapWindow(self.end_offset, gap_start)
            self._maybe_update_cached_state_and_offsets()
        else:
            self.end_offset = self.start_offset

    # -- reading the state ----------------------------------------------------------------------------

    def in_flight_records(self) -> int:
        return 0 if not self.cache else self.end_offset - self.start_offset + 1

    def _gap_window_active(self) -> bool:
        return self.gap_window is not None and self.gap_window.end_offset == self.end_offset

    def next_fetch_offset(self) -> int:
        """Where the next share fetch reads from (Kafka's nextFetchOffset): the first AVAILABLE
        record in flight when one may be there, else past the end of what is in flight."""
        in_cache = bool(self.cache) and self.start_offset <= self.cache.last().last_offset
        if not self.find_next_fetch_offset:
            return self.end_offset + 1 if in_cache else self.end_offset
        if not in_cache:
            self.find_next_fetch_offset = False
            return self.end_offset
        gap_start = self.gap_window.gap_start_offset if self._gap_window_active() else -1  # type: ignore[union-attr]
        for batch in self.cache:
            if self._gap_window_active():
                if batch.first_offset > gap_start:
                    return gap_start
                gap_start = max(batch.last_offset + 1, gap_start)
            for first, _, state in batch.states():
                if state.state is AVAILABLE:
                    return first
        self.find_next_fetch_offset = False
        return self.end_offset + 1

    def can_acquire_records(self) -> bool:
        """Kafka's canAcquireRecords: something in flight is AVAILABLE, or the window has room."""
        if self.next_fetch_offset() != self.end_offset + 1:
            return True
        return self.in_flight_records() < self.max_in_flight()

    def record_states(self) -> list[tuple[int, int, RecordState, int, str]]:
        """(first, last, state, delivery count, member) of everything in flight, for tests and tools."""
        return [(first, last, state.state, state.delivery_count, state.member_id)
                for batch in self.cache for first, last, state in batch.states()]

    # -- acquisition -----------------------------------------------------------------------------------

    def _new_lock(self, first: int, last: int, now: float) -> int:
        self._next_lock_id += 1
        deadline = now + self.lock_duration_ms() / 1000
        heapq.heappush(self._locks, (deadline, self._next_lock_id, first, last))
        return self._next_lock_id

    def next_lock_deadline(self) -> float | None:
        return self._locks[0][0] if self._locks else None

    def acquire(self, member_id: str, fetched: list[FetchedBatch], fetch_offset: int, max_fetch_records: int,
                batch_size: int, now: float, *, record_limit: bool = False,
                aborted: list[tuple[int, int]] | None = None) -> list[AcquiredRecords]:
        """Acquire records of `fetched` (the batches a read from `fetch_offset` returned) for the
        member: at most about `max_fetch_records` (whole batches). `aborted`: the aborted
        transactions (producer id, first offset) of a read_committed read, whose records are
        ARCHIVED instead. Returns the acquired ranges with their delivery counts."""
        if max_fetch_records <= 0 or not fetched:
            return []
        last_batch = fetched[-1]
        if last_batch.last_offset < self.start_offset:
            return []
        last_to_acquire, max_records = self._last_offset_and_max_records(fetch_offset, max_fetch_records,
                                                                         last_batch.last_offset)
        if max_records <= 0:
            return []
        first_batch = fetched[0]
        base_offset = first_batch.base_offset
        self._maybe_archive_stale_batches(fetch_offset, base_offset)
        floor = self.cache.floor(base_offset)
        if floor is None:
            if base_offset < self.start_offset:
                base_offset = self.start_offset
        elif floor.last_offset >= base_offset:
            base_offset = floor.first_offset
        overlapping = self.cache.range(min(first_batch.base_offset, base_offset), last_to_acquire)
        if not overlapping:
            result, count = self._acquire_new_batch_records(member_id, fetched, record_limit, base_offset,
                                                            last_to_acquire, batch_size, max_records, now)
            return self._filter_aborted(fetched, aborted, result)

        result = []
        acquired = 0
        gap_start = base_offset
        for batch in overlapping:
            if acquired >= max_records:
                break
            if self._gap_window_active():
                if gap_start < batch.first_offset:
                    new, count = self._acquire_new_batch_records(member_id, fetched, record_limit, gap_start,
                                                                 batch.first_offset - 1, batch_size,
                                                                 max_records - acquired, now)
                    result.extend(new)
                    acquired += count
                gap_start = batch.last_offset + 1
                if acquired >= max_records:
                    break
            full_match = batch.first_offset >= first_batch.base_offset and batch.last_offset <= last_to_acquire
            remaining = max_records - acquired
            record_limit_subset = record_limit and batch.last_offset - batch.first_offset + 1 > remaining
            throttle = self._should_throttle(batch, first_batch.base_offset, last_to_acquire)
            if throttle and acquired > 0:
                max_records = 0
                break
            if full_match and batch.offset_state is None and not record_limit_subset and not throttle:
                state = batch.state
                if state.state is AVAILABLE and state.try_update(ACQUIRED, INCREASE, self.max_delivery_count(), member_id):
                    if state.state is ACQUIRED:
                        state.lock_id = self._new_lock(batch.first_offset, batch.last_offset, now)
                        result.append(AcquiredRecords(batch.first_offset, batch.last_offset, state.delivery_count))
                        acquired += batch.last_offset - batch.first_offset + 1
                        self.acquired_total += batch.last_offset - batch.first_offset + 1
                continue
            if batch.offset_state is None:
                if batch.state.state is not AVAILABLE:
                    continue
                batch.split()
            count = self._acquire_subset(member_id, record_limit, remaining, first_batch.base_offset, last_to_acquire,
                                         batch, result, now)
            acquired += count
            if throttle and count > 0:
                max_records = 0
                break
        if acquired < max_records and overlapping[-1].last_offset < last_to_acquire:
            new, count = self._acquire_new_batch_records(member_id, fetched, record_limit,
                                                         overlapping[-1].last_offset + 1, last_to_acquire, batch_size,
                                                         max_records - acquired, now)
            result.extend(new)
            acquired += count
        if result:
            self._maybe_update_gap_window_start(result[-1].last_offset + 1)
            return self._filter_aborted(fetched, aborted, result)
        return result

    def _last_offset_and_max_records(self, fetch_offset: int, max_fetch_records: int, last_offset: int) -> tuple[int, int]:
        max_in_flight = self.max_in_flight()
        max_records = min(max_fetch_records, max_in_flight - self.in_flight_records())
        if max_records <= 0 and fetch_offset <= self.end_offset:
            # At the window's limit, but the fetch is inside it: re-acquire what is in flight.
            max_records = min(max_fetch_records, self.end_offset - fetch_offset + 1)
            last_offset = min(last_offset, self.end_offset)
        return last_offset, max_records

    def _acquire_new_batch_records(self, member_id: str, fetched: list[FetchedBatch], record_limit: bool,
                                   first_offset: int, last_offset: int, batch_size: int, max_records: int,
                                   now: float) -> tuple[list[AcquiredRecords], int]:
        first_acquired = first_offset
        if not self.cache and self.end_offset > first_acquired:
            first_acquired = self.end_offset
        last_acquired = last_offset
        if max_records < last_acquired - first_acquired + 1:
            # Whole batches: up to the end of the batch holding the max_records-th record.
            last_acquired = _last_offset_of_batch_with(fetched, first_acquired + max_records - 1)
            if self._gap_window_active() and last_acquired > last_offset:
                last_acquired = last_offset
        if last_acquired < first_acquired:
            return [], 0
        acquired = self._create_batches(member_id, fetched, record_limit, max_records, first_acquired, last_acquired,
                                        batch_size, now)
        if self.cache.first().first_offset == first_acquired:
            self.start_offset = first_acquired
        if last_acquired > self.end_offset:
            self.end_offset = last_acquired
        if record_limit:
            last_acquired = acquired[0].last_offset
        self._maybe_update_gap_window_start(last_acquired + 1)
        count = last_acquired - first_acquired + 1
        self.acquired_total += count
        return acquired, count

    def _create_batches(self, member_id: str, fetched: list[FetchedBatch], record_limit: bool, max_records: int,
                        first: int, last: int, batch_size: int, now: float) -> list[AcquiredRecords]:
        """Cut [first, last] into acquired ranges of about `batch_size` at log batch boundaries,
        each an in-flight batch, ACQUIRED with delivery count 1."""
        ranges: list[tuple[int, int]] = []
        current = first
        if not record_limit and last - first + 1 > batch_size > 0:
            for batch in fetched:
                if batch.base_offset > last:
                    break
                if batch.base_offset - current >= batch_size:
                    ranges.append((current, batch.base_offset - 1))
                    current = batch.base_offset
        ranges.append((current, last))
        if record_limit and ranges[0][1] - ranges[0][0] + 1 > max_records:
            start, end = ranges[0]
            lock_last = start + max_records - 1
            in_flight = InFlightBatch(start, end, InFlightState(ACQUIRED, 1, member_id, self._new_lock(start, lock_last, now)))
            in_flight.split_acquired_up_to(lock_last)
            self.find_next_fetch_offset = True
            self.cache.put(in_flight)
            return [AcquiredRecords(start, lock_last, 1)]
        for start, end in ranges:
            self.cache.put(InFlightBatch(start, end, InFlightState(ACQUIRED, 1, member_id, self._new_lock(start, end, now))))
        return [AcquiredRecords(start, end, 1) for start, end in ranges]

    def _throttle_limit(self) -> int:
        return max(2, math.ceil(self.max_delivery_count() / 2))

    def _should_throttle(self, batch: InFlightBatch, first: int, last: int) -> bool:
        """Whether AVAILABLE records of the batch are on their last delivery attempts (Kafka's
        shouldThrottleRecordsDelivery: from half the delivery-count limit on)."""
        limit = self._throttle_limit()
        if batch.offset_state is None:
            state = batch.state
            return state.state is AVAILABLE and state.delivery_count >= limit
        counts = [s.delivery_count for o, s in batch.offset_state.items() if first <= o <= last and s.state is AVAILABLE]
        return max(counts, default=0) >= limit

    def _acquire_subset(self, member_id: str, record_limit: bool, max_records: int, first: int, last: int,
                        batch: InFlightBatch, result: list[AcquiredRecords], now: float) -> int:
        """Acquire the AVAILABLE offsets of a per-offset batch within [first, last]."""
        assert batch.offset_state is not None
        acquired = 0
        throttled_max = -1
        max_delivery = self.max_delivery_count()
        limit = self._throttle_limit()
        ranges: list[AcquiredRecords] = []
        for offset, state in batch.offset_state.items():
            if offset < first:
                continue
            if offset > last:
                break
            if state.state is not AVAILABLE:
                continue
            if max_delivery > 2 and state.delivery_count == max_delivery - 1 and acquired > 0:
                break  # a record on its last attempt goes alone, in the next fetch
            if state.delivery_count >= limit and throttled_max < 0:
                throttled_max = max(1, len(batch.offset_state) >> (state.delivery_count - limit + 1))
            if not state.try_update(ACQUIRED, INCREASE, max_delivery, member_id) or state.state is not ACQUIRED:
                continue
            state.lock_id = self._new_lock(offset, offset, now)
            ranges.append(AcquiredRecords(offset, offset, state.delivery_count))
            acquired += 1
            if state.delivery_count == max_delivery and max_delivery > 2:
                break
            if record_limit and acquired == max_records:
                break
            if throttled_max > 0 and acquired == throttled_max:
                break
        result.extend(_coalesce(ranges))
        self.acquired_total += acquired
        return acquired

    def _maybe_update_gap_window_start(self, offset: int) -> None:
        if self.gap_window is None:
            return
        if self.gap_window.end_offset == self.end_offset and offset <= self.gap_window.end_offset:
            self.gap_window.gap_start_offset = offset
        else:
            self.gap_window = None

    def _maybe_archive_stale_batches(self, fetch_offset: int, base_offset: int) -> None:
        """AVAILABLE records below the read's first batch are gone from the log (compacted away):
        archive them (Kafka's maybeArchiveStaleBatches)."""
        if not self.cache or fetch_offset >= base_offset:
            return
        floor_offset = fetch_offset
        floor = self.cache.floor(fetch_offset)
        if floor is not None and floor.last_offset >= fetch_offset:
            floor_offset = floor.first_offset
        batches = [b for b in self.cache.range(floor_offset, base_offset - 1)]
        if batches and self._archive_records(fetch_offset, base_offset, batches, AVAILABLE, count_complete=True):
            self.find_next_fetch_offset = True

    def _archive_records(self, start: int, end: int, batches: Iterable[InFlightBatch], initial: RecordState, *,
                         count_complete: bool) -> bool:
        """Archive the records in [start, end) that are in `initial` state. Not persisted (Kafka
        archives these in memory only)."""
        archived = False
        for batch in batches:
            if batch.first_offset >= end:
                break
            if batch.offset_state is None and batch.first_offset >= start and batch.last_offset <= end - 1:
                if batch.state.state is initial:
                    batch.state.archive()
                    if count_complete:
                        self.delivery_complete_count += batch.last_offset - batch.first_offset + 1
                    archived = True
                continue
            if batch.offset_state is None:
                if batch.state.state is not initial:
                    continue
                batch.split()
            assert batch.offset_state is not None
            for offset, state in batch.offset_state.items():
                if start <= offset <= end - 1 and state.state is initial:
                    state.archive()
                    if count_complete:
                        self.delivery_complete_count += 1
                    archived = True
        return archived

    def _filter_aborted(self, fetched: list[FetchedBatch], aborted: list[tuple[int, int]] | None,
                        acquired: list[AcquiredRecords]) -> list[AcquiredRecords]:
        """read_committed: the batches of aborted transactions are ARCHIVED, not delivered (Kafka's
        filterAbortedTransactionalAcquiredRecords)."""
        if not aborted or not acquired:
            return acquired
        pending = sorted(aborted, key=lambda item: item[1])
        aborted_producers: set[int] = set()
        to_archive: list[FetchedBatch] = []
        for batch in fetched:
            if batch.producer_id < 0:
                continue
            while pending and pending[0][1] <= batch.last_offset:
                aborted_producers.add(pending.pop(0)[0])
            if batch.abort_marker:
                aborted_producers.discard(batch.producer_id)
            elif batch.transactional and not batch.control and batch.producer_id in aborted_producers:
                to_archive.append(batch)
        if not to_archive:
            return acquired
        for batch in to_archive:
            floor = self.cache.floor(batch.base_offset)
            if floor is None:
                continue
            self._archive_records(batch.base_offset, batch.last_offset + 1,
                                  self.cache.range(floor.first_offset, batch.last_offset), ACQUIRED, count_complete=True)
        kept: list[AcquiredRecords] = []
        for record in acquired:
            pieces = [record]
            for batch in to_archive:
                next_pieces = []
                for piece in pieces:
                    if piece.last_offset < batch.base_offset or piece.first_offset > batch.last_offset:
                        next_pieces.append(piece)
                        continue
                    if piece.first_offset < batch.base_offset:
                        next_pieces.append(piece._replace(last_offset=batch.base_offset - 1))
                    if piece.last_offset > batch.last_offset:
                        next_pieces.append(piece._replace(first_offset=batch.last_offset + 1))
                pieces = next_pieces
            kept.extend(pieces)
        return kept

    # -- acknowledgement --------------------------------------------------------------------------------

    def acknowledge(self, member_id: str, batches: list[AcknowledgementBatch], now: float) -> None:
        """Apply a member's acknowledgements (Kafka's acknowledge) and write them; a refusal or a
        failed write raises SharePartitionError and changes nothing."""
        changes = _Changes()
        try:
            for batch in batches:
                ack_types = batch.acknowledge_types
                if any(t not in _ACK_STATE and t != ACK_RENEW for t in ack_types):
                    raise SharePartitionError(ErrorCode.invalid_request, f"Invalid acknowledge type: {list(ack_types)}")
                if batch.last_offset < self.start_offset:
                    continue  # already archived
                for in_flight in self._batches_for_acknowledgement(batch):
                    self._acknowledge_batch(member_id, batch, in_flight, changes, now)
        except SharePartitionError:
            changes.undo()
            raise
        self._commit(changes)

    def _batches_for_acknowledgement(self, batch: AcknowledgementBatch) -> list[InFlightBatch]:
        floor = self.cache.floor(batch.first_offset)
        if floor is None:
            if not (batch.first_offset < self.start_offset <= batch.last_offset):
                raise SharePartitionError(ErrorCode.invalid_record_state,
                                          "Batch record not found. The request batch offsets are not found in the cache.")
            floor = self.cache.floor(self.start_offset)
            if floor is None:
                raise SharePartitionError(ErrorCode.invalid_record_state,
                                          "Batch record not found. The request batch offsets are not found in the cache.")
        found = self.cache.range(floor.first_offset, batch.last_offset)
        if found[-1].last_offset < batch.first_offset:
            raise SharePartitionError(ErrorCode.invalid_request,
                                      "Batch record not found. The first offset in request is past acquired records.")
        if batch.last_offset > found[-1].last_offset:
            raise SharePartitionError(ErrorCode.invalid_request,
                                      "Batch record not found. The last offset in request is past acquired records.")
        return found

    def _acknowledge_batch(self, member_id: str, batch: AcknowledgementBatch, in_flight: InFlightBatch,
                           changes: _Changes, now: float) -> None:
        if in_flight.last_offset < self.start_offset:
            return
        if in_flight.offset_state is None:
            owner = in_flight.state.member_id
            if owner == "":
                raise SharePartitionError(ErrorCode.invalid_record_state,
                                          "The batch cannot be acknowledged. The batch is not in the acquired state.")
            if owner != member_id:
                raise SharePartitionError(ErrorCode.invalid_record_state, "Member is not the owner of batch record")
        full_match = in_flight.first_offset >= batch.first_offset and in_flight.last_offset <= batch.last_offset
        per_offset = len(batch.acknowledge_types) > 1
        start_moved = in_flight.first_offset < self.start_offset <= in_flight.last_offset
        if full_match and in_flight.offset_state is None and not per_offset and not start_moved:
            state = in_flight.state
            if state.state is not ACQUIRED:
                raise SharePartitionError(ErrorCode.invalid_record_state,
                                          "The batch cannot be acknowledged. The batch is not in the acquired state.")
            self._apply_ack(batch.acknowledge_types[0], state, in_flight.first_offset, in_flight.last_offset, member_id,
                            changes, now)
            return
        if in_flight.offset_state is None:
            if in_flight.state.state is not ACQUIRED:
                raise SharePartitionError(ErrorCode.invalid_record_state,
                                          "The batch cannot be acknowledged. The subset batch is not in the acquired state.")
            in_flight.split()
        assert in_flight.offset_state is not None
        for offset, state in in_flight.offset_state.items():
            if offset < batch.first_offset or offset < self.start_offset:
                continue
            if offset > batch.last_offset:
                break
            if state.state is not ACQUIRED:
                raise SharePartitionError(ErrorCode.invalid_record_state,
                                          "The offset cannot be acknowledged. The offset is not acquired.")
            if state.member_id != member_id:
                raise SharePartitionError(ErrorCode.invalid_record_state, "Member is not the owner of offset")
            ack_type = batch.acknowledge_types[offset - batch.first_offset] if per_offset else batch.acknowledge_types[0]
            self._apply_ack(ack_type, state, offset, offset, member_id, changes, now)

    def _apply_ack(self, ack_type: int, state: InFlightState, first: int, last: int, member_id: str,
                   changes: _Changes, now: float) -> None:
        changes.touch(state)
        if ack_type == ACK_RENEW:
            if not self.renew_enabled():
                raise SharePartitionError(ErrorCode.invalid_record_state,
                                          "Renewing acquisition locks is not enabled for the group.")
            state.lock_id = self._new_lock(first, last, now)
            return
        if not state.try_update(_ACK_STATE[ack_type], NO_OP, self.max_delivery_count(), ""):
            raise SharePartitionError(ErrorCode.invalid_record_state, "Unable to acknowledge records for the batch")
        changes.persist(first, last, state)
        if state.state is AVAILABLE:
            self.find_next_fetch_offset = True
        if state.state in TERMINAL:
            self.delivery_complete_count += self._records_at_or_above_start(first, last)

    # -- release, lock expiry and the log start -------------------------------------------------------------

    def release_acquired_records(self, member_id: str) -> None:
        """The member's share session closed (or its connection): its acquired records become
        AVAILABLE again, delivery counts kept (Kafka's releaseAcquiredRecords)."""
        changes = _Changes()
        for batch in self.cache:
            if (batch.offset_state is None and batch.state.state is ACQUIRED and batch.state.member_id == member_id
                    and batch.first_offset < self.start_offset <= batch.last_offset):
                batch.split()
            for first, last, state in list(batch.states()):
                if state.state is not ACQUIRED or state.member_id not in (member_id, ""):
                    continue
                changes.touch(state)
                target = ARCHIVED if last < self.start_offset else AVAILABLE
                state.try_update(target, NO_OP, self.max_delivery_count(), "")
                changes.persist(first, last, state)
                if state.state is AVAILABLE:
                    self.find_next_fetch_offset = True
                else:
                    self.delivery_complete_count += self._records_at_or_above_start(first, last)
        self._commit(changes)

    def expire_locks(self, now: float) -> int:
        """Release the records whose acquisition lock expired by `now` (Kafka's
        releaseAcquisitionLockOnTimeout); returns how many records moved."""
        changes = _Changes()
        moved = 0
        while self._locks and self._locks[0][0] <= now:
            _, lock_id, first, last = heapq.heappop(self._locks)
            floor = self.cache.floor(first)
            if floor is None:
                continue
            for batch in self.cache.range(floor.first_offset, last):
                if (batch.offset_state is None and batch.state.state is ACQUIRED and batch.state.lock_id == lock_id
                        and batch.first_offset < self.start_offset <= batch.last_offset):
                    batch.split()
                for s_first, s_last, state in list(batch.states(first, last)):
                    if state.state is not ACQUIRED or state.lock_id != lock_id:
                        continue
                    changes.touch(state)
                    target = ARCHIVED if s_last < self.start_offset else AVAILABLE
                    state.try_update(target, NO_OP, self.max_delivery_count(), "")
                    changes.persist(s_first, s_last, state)
                    moved += s_last - s_first + 1
                    if state.state is AVAILABLE:
                        self.find_next_fetch_offset = True
                    else:
                        self.delivery_complete_count += self._records_at_or_above_start(s_first, s_last)
        if changes.batches:
            try:
                self._commit(changes)
            except SharePartitionError as exc:
                # The records are AVAILABLE again in memory (Kafka keeps the timeout's effect too).
                log.warning("%s-%s: writing the state after an acquisition lock timeout failed: %s", self.key.group_id,
                            self.topic, exc.message)
        return moved

    def update_cache_and_offsets(self, log_start_offset: int) -> None:
        """The log start offset moved past the start offset (retention, DeleteRecords): records
        below it are archived (Kafka's updateCacheAndOffsets)."""
        if log_start_offset <= self.start_offset:
            return
        if not self.cache:
            self.start_offset = self.end_offset = log_start_offset
            self.delivery_complete_count = 0
            return
        removed_terminal = self._terminal_records_below(log_start_offset)
        if self._archive_records(self.start_offset, log_start_offset, list(self.cache), AVAILABLE, count_complete=False):
            self.find_next_fetch_offset = True
        self.start_offset = log_start_offset
        self.delivery_complete_count -= removed_terminal
        if self.end_offset < self.start_offset:
            self.end_offset = self.start_offset

    def _terminal_records_below(self, new_start: int) -> int:
        count = 0
        for batch in self.cache:
            if batch.first_offset >= new_start:
                break
            for first, last, state in batch.states():
                low, high = max(self.start_offset, first), min(new_start - 1, last)
                if state.state in TERMINAL and low <= high:
                    count += high - low + 1
        return count

    def _records_at_or_above_start(self, first: int, last: int) -> int:
        return last - max(self.start_offset, first) + 1 if last >= self.start_offset else 0

    # -- writing --------------------------------------------------------------------------------------

    def _commit(self, changes: _Changes) -> None:
        """Write what changed (undoing it when the write fails), then move the start offset."""
        if not changes.batches:
            return
        try:
            self.persister.write_state(self.key, self.state_epoch, self.leader_epoch, self.start_offset,
                                       self.delivery_complete_count, changes.batches)
        except (SharePartitionError, OSError) as exc:
            changes.undo()
            for batch in self.cache:
                for _, _, state in batch.states():
                    if state.state is AVAILABLE:
                        self.find_next_fetch_offset = True
            self._recount_complete()
            if isinstance(exc, SharePartitionError):
                raise SharePartitionError(*persister_error(exc)) from exc
            raise SharePartitionError(ErrorCode.unknown_server_error,
                                      f"Failed to write the share group state for share partition "
                                      f"{self.key.group_id}-{self.topic}-{self.key.partition}: {exc}") from exc
        self._maybe_update_cached_state_and_offsets()

    def _recount_complete(self) -> None:
        self.delivery_complete_count = sum(
            self._records_at_or_above_start(first, last) for batch in self.cache
            for first, last, state in batch.states() if state.state in TERMINAL)

    def _maybe_update_cached_state_and_offsets(self) -> bool:
        """Move the start offset over the leading run of done records and drop the batches below
        it (Kafka's maybeUpdateCachedStateAndOffsets)."""
        if not self._can_move_start_offset():
            return False
        last_done, terminal = self._last_offset_acknowledged()
        if last_done == -1:
            return False
        last_cached = self.cache.last().last_offset
        if last_done == last_cached:
            self.start_offset = self.end_offset = last_cached + 1
            self.cache.clear()
            self.delivery_complete_count = 0
            return True
        floor = self.cache.floor(last_done)
        assert floor is not None
        remove_through: int | None
        if last_done == floor.last_offset:
            higher = self.cache.higher_key(last_done)
            if higher is not None and higher > self.start_offset:
                self.start_offset = higher
            if self._gap_window_active():
                self.start_offset = min(self.gap_window.gap_start_offset, self.start_offset)  # type: ignore[union-attr]
            remove_through = floor.first_offset
        else:
            if last_done + 1 > self.start_offset:
                self.start_offset = last_done + 1
            remove_through = None if floor.first_offset == self.cache.first().first_offset else self.cache.lower_key(floor.first_offset)
        self.delivery_complete_count -= terminal
        if remove_through is not None:
            self.cache.remove_through(remove_through)
        return True

    def _can_move_start_offset(self) -> bool:
        if not self.cache:
            return False
        floor = self.cache.floor(self.start_offset)
        if floor is None:
            return False  # an acquirable gap at the start
        if floor.offset_state is None:
            return floor.state.state in TERMINAL
        state = floor.offset_state.get(self.start_offset)
        return state is not None and state.state in TERMINAL

    def _last_offset_acknowledged(self) -> tuple[int, int]:
        last_done = -1
        terminal = 0
        for batch in self.cache:
            if self._gap_window_active() and batch.last_offset >= self.gap_window.gap_start_offset:  # type: ignore[union-attr]
                return last_done, terminal
            if batch.offset_state is None:
                if batch.state.state not in TERMINAL:
                    return last_done, terminal
                last_done = batch.last_offset
                terminal += self._records_at_or_above_start(batch.first_offset, batch.last_offset)
                continue
            for offset, state in batch.offset_state.items():
                if state.state not in TERMINAL:
                    return last_done, terminal
                last_done = offset
                if offset >= self.start_offset:
                    terminal += 1
        return last_done, terminal


def _last_offset_of_batch_with(fetched: list[FetchedBatch], offset: int) -> int:
    """The last offset of the fetched batch holding `offset` (batches are acquired whole), or
    `offset` itself when none does."""
    previous = None
    for batch in fetched:
        if offset < batch.base_offset:
            break
        previous = batch
    return previous.last_offset if previous is not None and offset <= previous.last_offset else offset


def _coalesce(ranges: list[AcquiredRecords]) -> list[AcquiredRecords]:
    """Neighbouring single-offset ranges with the same delivery count as one (Kafka's
    accumulateAcquiredRecords)."""
    out: list[AcquiredRecords] = []
    for record in ranges:
        if out and out[-1].last_offset + 1 == record.first_offset and out[-1].delivery_count == record.delivery_count:
            out[-1] = out[-1]._replace(last_offset=record.last_offset)
        else:
            out.append(record)
    return out
