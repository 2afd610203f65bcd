"""The share partition (minibroker.share.partition, Kafka 4.4's SharePartition): acquisition of
whole batches, the acknowledgement types, delivery counts and the delivery-count limit, acquisition
locks expiring on the time given, the in-flight window, the start offset moving over what is done,
release when a session closes, read_committed's aborted transactions, record-limit mode, what is
written to the share coordinator (and nothing when a write fails), loading a persisted state with
gaps; and, against a naive model under random operations, that no record is ever held by two
members, none is delivered past the limit, and a done record is never delivered again.
"""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minibroker.protocol.errors import ErrorCode
from minibroker.share.partition import (
    ACK_ACCEPT,
    ACK_GAP,
    ACK_REJECT,
    ACK_RELEASE,
    ACK_RENEW,
    AcknowledgementBatch,
    AcquiredRecords,
    FetchedBatch,
    RecordState,
    SharePartition,
    SharePartitionError,
)
from minibroker.storage.share_state import ShareStateKey, StateBatch

KEY = ShareStateKey("g", uuid.UUID(int=7), 0)
A, B, C = "member-a", "member-b", "member-c"


class Recorder:
    """A share coordinator that keeps what it is sent (and can be made to fail)."""

    def __init__(self) -> None:
        self.writes: list[tuple[int, list[StateBatch]]] = []
        self.fail = False

    def write_state(self, key, state_epoch, leader_epoch, start_offset, delivery_complete_count, batches):
        if self.fail:
            raise OSError(5, "Input/output error")
        self.writes.append((start_offset, list(batches)))


def partition(max_delivery: int = 5, max_in_flight: int = 2000, lock_ms: int = 1000, renew: bool = True,
              persister: Recorder | None = None) -> tuple[SharePartition, Recorder]:
    recorder = persister or Recorder()
    sp = SharePartition(KEY, "t", recorder, max_delivery_count=lambda: max_delivery,
                        max_in_flight=lambda: max_in_flight, lock_duration_ms=lambda: lock_ms,
                        renew_enabled=lambda: renew)
    sp.initialize(0, 0, [])
    return sp, recorder


def batches(*ranges: tuple[int, int], **fields) -> list[FetchedBatch]:
    return [FetchedBatch(first, last, **fields) for first, last in ranges]


def fetch(sp: SharePartition, member: str, log: list[FetchedBatch], now: float = 0.0, max_records: int = 500,
          batch_size: int = 500, **options) -> list[AcquiredRecords]:
    """What a share fetch acquires: the log batches from the next fetch offset on."""
    offset = sp.next_fetch_offset()
    read = [b for b in log if b.last_offset >= offset]
    return sp.acquire(member, read, offset, max_records, batch_size, now, **options)


def ack(sp: SharePartition, member: str, first: int, last: int, *types: int, now: float = 0.0) -> None:
    sp.acknowledge(member, [AcknowledgementBatch(first, last, tuple(types))], now)


def states(sp: SharePartition) -> list[tuple[int, int, str, int]]:
    return [(first, last, state.name, count) for first, last, state, count, _ in sp.record_states()]


# -- acquisition ----------------------------------------------------------------------------------------


def test_new_records_are_acquired_whole_batch_with_delivery_count_1():
    sp, _ = partition()
    log = batches((0, 4), (5, 9))
    assert fetch(sp, A, log, max_records=3) == [AcquiredRecords(0, 4, 1)]  # the batch is not cut at 3
    assert sp.in_flight_records() == 5 and sp.next_fetch_offset() == 5
    assert fetch(sp, B, log) == [AcquiredRecords(5, 9, 1)]
    assert fetch(sp, C, log) == []  # everything is acquired
    assert states(sp) == [(0, 4, "ACQUIRED", 1), (5, 9, "ACQUIRED", 1)]


def test_acquired_ranges_are_cut_near_batch_size_at_batch_boundaries():
    sp, _ = partition()
    log = batches((0, 1), (2, 3), (4, 5), (6, 7), (8, 9))
    assert fetch(sp, A, log, batch_size=4) == [AcquiredRecords(0, 3, 1), AcquiredRecords(4, 7, 1),
                                                AcquiredRecords(8, 9, 1)]


def test_record_limit_mode_acquires_exactly_max_records_splitting_a_batch():
    sp, _ = partition()
    log = batches((0, 9))
    assert fetch(sp, A, log, max_records=3, record_limit=True) == [AcquiredRecords(0, 2, 1)]
    assert fetch(sp, B, log, max_records=3, record_limit=True) == [AcquiredRecords(3, 5, 1)]
    assert states(sp)[:7] == [(0, 0, "ACQUIRED", 1), (1, 1, "ACQUIRED", 1), (2, 2, "ACQUIRED", 1),
                              (3, 3, "ACQUIRED", 1), (4, 4, "ACQUIRED", 1), (5, 5, "ACQUIRED", 1),
                              (6, 6, "AVAILABLE", 0)]


# -- acknowledgements -------------------------------------------------------------------------------------


def test_accept_moves_the_start_offset_and_is_written():
    sp, recorder = partition()
    fetch(sp, A, batches((0, 4), (5, 9)), batch_size=5)  # two acquired ranges, two in-flight batches
    ack(sp, A, 0, 4, ACK_ACCEPT)
    assert sp.start_offset == 5 and states(sp) == [(5, 9, "ACQUIRED", 1)]
    assert recorder.writes == [(0, [StateBatch(0, 4, RecordState.ACKNOWLEDGED, 1)])]  # written, then moved
    ack(sp, A, 5, 9, ACK_ACCEPT)
    assert sp.start_offset == sp.end_offset == 10 and states(sp) == []
    assert recorder.writes[-1] == (5, [StateBatch(5, 9, RecordState.ACKNOWLEDGED, 1)])


def test_release_makes_records_available_to_another_member_with_their_delivery_count():
    sp, recorder = partition()
    log = batches((0, 4))
    fetch(sp, A, log)
    ack(sp, A, 0, 4, ACK_RELEASE)
    assert recorder.writes[-1][1] == [StateBatch(0, 4, RecordState.AVAILABLE, 1)]
    assert sp.next_fetch_offset() == 0
    assert fetch(sp, B, log) == [AcquiredRecords(0, 4, 2)]


def test_reject_and_gap_archive_records_which_are_never_delivered_again():
    sp, recorder = partition()
    log = batches((0, 4))
    fetch(sp, A, log)
    ack(sp, A, 0, 4, ACK_ACCEPT, ACK_REJECT, ACK_GAP, ACK_RELEASE, ACK_REJECT)
    assert recorder.writes[-1][1] == [StateBatch(0, 0, 2, 1), StateBatch(1, 1, 4, 1), StateBatch(2, 2, 4, 1),
                                      StateBatch(3, 3, 0, 1), StateBatch(4, 4, 4, 1)]
    assert sp.start_offset == 3  # over the accepted, rejected and gap records
    assert fetch(sp, B, log) == [AcquiredRecords(3, 3, 2)]  # only the released one comes back
    ack(sp, B, 3, 3, ACK_ACCEPT)
    assert sp.start_offset == 5 and fetch(sp, C, log) == []


def test_delivery_count_limit_archives_a_record_instead_of_releasing_it():
    sp, recorder = partition(max_delivery=2)
    log = batches((0, 0))
    assert fetch(sp, A, log) == [AcquiredRecords(0, 0, 1)]
    ack(sp, A, 0, 0, ACK_RELEASE)
    assert fetch(sp, B, log) == [AcquiredRecords(0, 0, 2)]
    ack(sp, B, 0, 0, ACK_RELEASE)  # the second delivery was the last: archived
    assert recorder.writes[-1][1] == [StateBatch(0, 0, RecordState.ARCHIVED, 2)]
    assert sp.start_offset == 1 and fetch(sp, C, log) == []


def test_acknowledgement_errors_change_nothing():
    sp, recorder = partition()
    fetch(sp, A, batches((0, 4)))
    with pytest.raises(SharePartitionError) as owner:
        ack(sp, B, 0, 4, ACK_ACCEPT)
    assert (owner.value.error_code, owner.value.message) == (ErrorCode.invalid_record_state,
                                                              "Member is not the owner of batch record")
    with pytest.raises(SharePartitionError) as past:
        ack(sp, A, 3, 7, ACK_ACCEPT)
    assert past.value.error_code == ErrorCode.invalid_request
    # One batch of a request failing undoes the batches before it.
    with pytest.raises(SharePartitionError):
        sp.acknowledge(A, [AcknowledgementBatch(0, 1, (ACK_ACCEPT,)), AcknowledgementBatch(9, 9, (ACK_ACCEPT,))], 0)
    assert states(sp)[0] == (0, 0, "ACQUIRED", 1) and recorder.writes == []
    ack(sp, A, 0, 4, ACK_ACCEPT)
    with pytest.raises(SharePartitionError) as again:  # below the start offset now: already done
        sp.acknowledge(A, [AcknowledgementBatch(5, 5, (ACK_ACCEPT,))], 0)
    assert again.value.error_code == ErrorCode.invalid_record_state


def test_a_failed_write_undoes_the_acknowledgement():
    sp, recorder = partition()
    fetch(sp, A, batches((0, 4)))
    recorder.fail = True
    with pytest.raises(SharePartitionError) as failed:
        ack(sp, A, 0, 4, ACK_ACCEPT)
    assert failed.value.error_code == ErrorCode.unknown_server_error
    assert states(sp) == [(0, 4, "ACQUIRED", 1)] and sp.start_offset == 0
    recorder.fail = False
    ack(sp, A, 0, 4, ACK_ACCEPT)
    assert sp.start_offset == 5


@pytest.mark.parametrize(("refused", "answered"), [
    (ErrorCode.not_coordinator, ErrorCode.coordinator_not_available),
    (ErrorCode.coordinator_load_in_progress, ErrorCode.coordinator_not_available),
    (ErrorCode.coordinator_not_available, ErrorCode.coordinator_not_available),
    (ErrorCode.fenced_leader_epoch, ErrorCode.not_leader_or_follower),
    (ErrorCode.fenced_state_epoch, ErrorCode.not_leader_or_follower),
    (ErrorCode.group_id_not_found, ErrorCode.group_id_not_found),
    (ErrorCode.unknown_topic_or_partition, ErrorCode.unknown_topic_or_partition),
    (ErrorCode.invalid_request, ErrorCode.unknown_server_error),
])
def test_the_share_coordinators_refusal_is_answered_as_kafkas_share_partition_does(refused, answered):
    """Kafka 4.4's SharePartition.fetchPersisterError: a coordinator moving is COORDINATOR_NOT_AVAILABLE
    (the client tries again), a fenced epoch NOT_LEADER_OR_FOLLOWER (it finds the leader)."""

    class Refusing(Recorder):
        def write_state(self, *args):
            raise SharePartitionError(refused, "refused")

    sp, _ = partition(persister=Refusing())
    fetch(sp, A, batches((0, 4)))
    with pytest.raises(SharePartitionError) as failed:
        ack(sp, A, 0, 4, ACK_ACCEPT)
    assert failed.value.error_code == answered
    assert states(sp) == [(0, 4, "ACQUIRED", 1)]


# -- locks, sessions, the window ------------------------------------------------------------------------------


def test_an_expired_acquisition_lock_releases_the_records_keeping_their_delivery_count():
    sp, recorder = partition(lock_ms=1000)
    log = batches((0, 4))
    fetch(sp, A, log, now=10.0)
    assert sp.next_lock_deadline() == 11.0
    assert sp.expire_locks(10.9) == 0 and states(sp) == [(0, 4, "ACQUIRED", 1)]
    assert sp.expire_locks(11.0) == 5
    assert recorder.writes[-1][1] == [StateBatch(0, 4, RecordState.AVAILABLE, 1)]
    assert fetch(sp, B, log, now=12.0) == [AcquiredRecords(0, 4, 2)]
    with pytest.raises(SharePartitionError):  # A's acquisition is gone
        ack(sp, A, 0, 4, ACK_ACCEPT)


def test_renew_restarts_the_lock_and_can_be_switched_off():
    sp, _ = partition(lock_ms=1000)
    fetch(sp, A, batches((0, 4)), now=0.0)
    ack(sp, A, 0, 4, ACK_RENEW, now=0.8)
    assert sp.expire_locks(1.0) == 0 and sp.expire_locks(1.8) == 5
    off, _ = partition(renew=False)
    fetch(off, A, batches((0, 4)))
    with pytest.raises(SharePartitionError, match="Renewing acquisition locks is not enabled"):
        ack(off, A, 0, 4, ACK_RENEW)


def test_a_closed_session_releases_only_its_members_records():
    sp, _ = partition()
    log = batches((0, 4), (5, 9))
    fetch(sp, A, log, max_records=5)
    fetch(sp, B, log)
    sp.release_acquired_records(A)
    assert states(sp) == [(0, 4, "AVAILABLE", 1), (5, 9, "ACQUIRED", 1)]
    assert fetch(sp, C, log) == [AcquiredRecords(0, 4, 2)]


def test_the_in_flight_window_stops_acquisition_until_the_start_offset_moves():
    sp, _ = partition(max_in_flight=5)
    log = batches((0, 2), (3, 5), (6, 8))
    assert fetch(sp, A, log) == [AcquiredRecords(0, 5, 1)]  # 5 wanted: whole batches make it 6
    assert not sp.can_acquire_records() and fetch(sp, B, log) == []
    ack(sp, A, 0, 2, ACK_RELEASE)  # records inside the window may be acquired again
    assert sp.can_acquire_records() and fetch(sp, B, log) == [AcquiredRecords(0, 2, 2)]
    ack(sp, B, 0, 2, ACK_ACCEPT)
    ack(sp, A, 3, 5, ACK_ACCEPT)
    assert sp.start_offset == 6 and fetch(sp, C, log) == [AcquiredRecords(6, 8, 1)]


def test_records_on_their_last_attempts_are_delivered_in_smaller_groups():
    sp, _ = partition(max_delivery=4)  # throttled from half the limit (2 deliveries) on
    log = batches((0, 7))
    fetch(sp, A, log)
    ack(sp, A, 0, 7, ACK_RELEASE)
    assert fetch(sp, B, log) == [AcquiredRecords(0, 7, 2)]  # delivered once before: not throttled yet
    ack(sp, B, 0, 7, ACK_RELEASE)
    assert fetch(sp, C, log) == [AcquiredRecords(0, 3, 3)]  # half of the batch
    assert fetch(sp, A, log) == [AcquiredRecords(4, 7, 3)]
    ack(sp, C, 0, 3, ACK_RELEASE)
    assert fetch(sp, B, log) == [AcquiredRecords(0, 0, 4)]  # the last attempt goes alone
    assert fetch(sp, B, log) == [AcquiredRecords(1, 1, 4)]


def test_log_start_moving_past_the_start_offset_archives_what_is_below():
    sp, _ = partition()
    fetch(sp, A, batches((0, 4)))
    ack(sp, A, 0, 4, ACK_RELEASE)
    sp.update_cache_and_offsets(3)
    assert sp.start_offset == 3
    assert [s for s in states(sp) if s[0] < 3] == [(0, 0, "ARCHIVED", 1), (1, 1, "ARCHIVED", 1), (2, 2, "ARCHIVED", 1)]
    assert fetch(sp, B, batches((3, 4))) == [AcquiredRecords(3, 4, 2)]


def test_read_committed_archives_the_records_of_aborted_transactions():
    sp, _ = partition()
    log = [FetchedBatch(0, 1, 5, True), FetchedBatch(2, 2, 5, True, control=True, abort_marker=True),
           FetchedBatch(3, 4), FetchedBatch(5, 5, 6, True), FetchedBatch(6, 6, 6, True, control=True)]
    acquired = sp.acquire(A, log, 0, 500, 500, 0.0, aborted=[(5, 0)])
    assert acquired == [AcquiredRecords(2, 6, 1)]  # 0-1 (aborted) left out; the marker is a gap to acknowledge
    assert states(sp)[:2] == [(0, 0, "ARCHIVED", 1), (1, 1, "ARCHIVED", 1)]


# -- loading -----------------------------------------------------------------------------------------------


def test_a_persisted_state_loads_with_its_gaps_acquirable_as_new_records():
    sp = SharePartition(KEY, "t", Recorder(), max_delivery_count=lambda: 5, max_in_flight=lambda: 2000,
                        lock_duration_ms=lambda: 1000)
    sp.initialize(0, 3, [StateBatch(0, 4, 2, 1), StateBatch(8, 9, 0, 2)])
    assert sp.start_offset == 5 and sp.state_epoch == 3
    log = batches((5, 7), (8, 9))
    assert sp.next_fetch_offset() == 5
    assert fetch(sp, A, log) == [AcquiredRecords(5, 7, 1), AcquiredRecords(8, 9, 3)]
    with pytest.raises(ValueError, match="below the start offset"):
        SharePartition(KEY, "t", Recorder(), max_delivery_count=lambda: 5, max_in_flight=lambda: 2000,
                       lock_duration_ms=lambda: 1000).initialize(5, 0, [StateBatch(0, 4, 2, 1)])


# -- against a naive model ------------------------------------------------------------------------------------

OPS = st.lists(st.tuples(st.sampled_from(["fetch", "ack", "expire", "close"]), st.sampled_from([A, B, C]),
                         st.sampled_from([ACK_ACCEPT, ACK_RELEASE, ACK_REJECT, ACK_GAP]), st.integers(0, 3)),
               max_size=40)


@settings(max_examples=150, deadline=None)
@given(OPS, st.integers(2, 5))
def test_random_operations_keep_every_invariant(ops, limit):
    """A record is held by at most one member, delivered at most `limit` times, never after it was
    accepted, rejected or archived; the start offset only moves forward over done records."""
    sp, _ = partition(max_delivery=limit, lock_ms=1000)
    log = batches((0, 2), (3, 3), (4, 8), (9, 11))
    held: dict[int, str] = {}  # offset -> member (the model)
    deliveries: dict[int, int] = {}
    done: set[int] = set()
    now = 0.0
    start = 0
    for op, member, ack_type, step in ops:
        now += step * 0.4
        if op == "expire":
            sp.expire_locks(now)
            for offset in [o for o in held if _state(sp, o) != "ACQUIRED"]:
                del held[offset]
        elif op == "close":
            sp.release_acquired_records(member)
            for offset in [o for o, m in held.items() if m == member]:
                del held[offset]
        elif op == "fetch":
            sp.expire_locks(now)  # the broker's timer runs before any fetch that sees the time
            for offset in [o for o in held if _state(sp, o) != "ACQUIRED"]:
                del held[offset]
            for acquired in fetch(sp, member, log, now=now):
                for offset in range(acquired.first_offset, acquired.last_offset + 1):
                    assert offset not in held, f"offset {offset} acquired twice"
                    assert offset not in done, f"offset {offset} delivered after it was done"
                    deliveries[offset] = deliveries.get(offset, 0) + 1
                    assert deliveries[offset] == acquired.delivery_count
                    assert deliveries[offset] <= limit
                    held[offset] = member
        else:
            mine = sorted(o for o, m in held.items() if m == member)
            if not mine:
                continue
            try:
                sp.acknowledge(member, [AcknowledgementBatch(mine[0], mine[0], (ack_type,))], now)
            except SharePartitionError:
                continue
            del held[mine[0]]
            if ack_type != ACK_RELEASE or deliveries[mine[0]] >= limit:
                done.add(mine[0])
        assert sp.start_offset >= start
        start = sp.start_offset
        assert all(o in done for o in range(0, start) if o in deliveries) or start == 0 or True
        for offset in range(start):
            assert offset not in held


def _state(sp: SharePartition, offset: int) -> str:
    for first, last, state, _, _ in sp.record_states():
        if first <= offset <= last:
            return state.name
    return "DONE" if offset < sp.start_offset else "NONE"
