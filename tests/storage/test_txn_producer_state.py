"""Unit tests for transactions in minibroker.storage.producer_state (KIP-98), in both modes: when a
transaction opens and ends, the first unstable offset, the transaction rules (INVALID_TXN_STATE,
fenced marker epochs, fenced coordinator epochs, a marker's new epoch), expiry, snapshots and the
replay of a real log. Headers are built by hand, as in test_producer_state.py.
"""

from __future__ import annotations

import dataclasses

import pytest

from minibroker.protocol.errors import ErrorCode
from minibroker.protocol.records import ATTR_CONTROL, ATTR_TRANSACTIONAL, encode_batch, encode_control_batch, read_header
from minibroker.protocol.records.codec import CONTROL_ABORT, CONTROL_COMMIT, ControlRecord
from minibroker.storage.config import LogConfig
from minibroker.storage.log import PartitionLog
from minibroker.storage.producer_state import ProducerStateManager, list_snapshots
from minibroker.storage.producer_state.snapshot import read_snapshot
from minibroker.storage.producer_state.txns import AbortedTxn
from tests.support.batches import batch

MODES = ["lean", "kafka"]
A, B = 100, 200
NOW = 1_000


def txn(pid=A, epoch=0, first_seq=0, count=1, base_offset=0):
    return batch(pid, epoch, first_seq, count, base_offset, attributes=ATTR_TRANSACTIONAL)


def marker_header(pid=A, epoch=0, offset=0):
    return dataclasses.replace(batch(pid, epoch, 0, 1, offset, attributes=ATTR_TRANSACTIONAL | ATTR_CONTROL),
                               base_sequence=-1)


def end(psm, pid, offset, abort, epoch=0, coordinator_epoch=0, now=NOW):
    kind = CONTROL_ABORT if abort else CONTROL_COMMIT
    return psm.update(marker_header(pid, epoch, offset), now, ControlRecord(kind, coordinator_epoch))


@pytest.fixture(params=MODES)
def psm(request):
    return ProducerStateManager.for_mode(request.param)


def test_first_transactional_batch_opens_the_transaction_and_a_marker_closes_it(psm):
    assert psm.first_unstable_offset is None
    psm.update(txn(A, first_seq=0, count=3, base_offset=10), NOW)
    assert psm.first_unstable_offset == 10 and psm.current_txn_first_offset(A) == 10
    psm.update(txn(A, first_seq=3, count=2, base_offset=13), NOW)
    assert psm.first_unstable_offset == 10  # a later batch of the same transaction changes nothing
    assert psm.last_entry(A).current_txn_first_offset == 10
    assert end(psm, A, 15, abort=False) is None  # a COMMIT needs no index entry
    assert psm.first_unstable_offset is None and psm.current_txn_first_offset(A) is None
    entry = psm.last_entry(A)
    assert (entry.current_txn_first_offset, entry.coordinator_epoch, entry.last_seq) == (-1, 0, 4)


def test_open_transactions_are_kept_in_first_offset_order_and_an_abort_records_the_next_one(psm):
    psm.update(txn(A, base_offset=0), NOW)
    psm.update(batch(7, 0, 0, 1, 1), NOW)  # an idempotent producer: no transaction
    psm.update(txn(B, base_offset=2), NOW)
    assert psm.ongoing_transactions() == [(A, 0), (B, 2)]
    # A aborts while B's transaction is open: the LSO after it is B's first offset.
    assert end(psm, A, 3, abort=True) == AbortedTxn(A, 0, 3, 2)
    assert psm.first_unstable_offset == 2
    # B aborts with nothing else open: the LSO after it is its marker + 1.
    assert end(psm, B, 4, abort=True) == AbortedTxn(B, 2, 4, 5)
    assert psm.first_unstable_offset is None


def test_a_marker_without_data_here_changes_no_transaction(psm):
    assert end(psm, A, 0, abort=True) is None
    assert psm.first_unstable_offset is None
    entry = psm.last_entry(A)
    assert entry.producer_epoch == 0 and entry.batch_metadata == () and entry.last_seq == -1


def test_a_non_transactional_batch_while_a_transaction_is_open_is_invalid_txn_state(psm):
    psm.update(txn(A, first_seq=0, base_offset=0), NOW)
    verdict = psm.prepare_update(batch(A, 0, 1, 1, 1))
    assert verdict.error_code == ErrorCode.invalid_txn_state and not verdict.should_append
    assert psm.prepare_update(txn(A, first_seq=1)).should_append
    end(psm, A, 1, abort=False)
    assert psm.prepare_update(batch(A, 0, 1, 1, 2)).should_append


def test_transactional_batches_follow_the_sequence_rules(psm):
    psm.update(txn(A, first_seq=0, count=2), NOW)
    assert psm.prepare_update(txn(A, first_seq=5)).error_code == ErrorCode.out_of_order_sequence_number
    assert psm.prepare_update(txn(A, epoch=0, first_seq=2)).should_append


def test_marker_epochs_are_checked_as_kafka_does(psm):
    psm.update(txn(A, epoch=3, base_offset=0), NOW)
    older = psm.prepare_marker(A, 2, 0)
    assert older.error_code == ErrorCode.invalid_producer_epoch
    assert psm.prepare_marker(A, 3, 0).should_append
    assert psm.prepare_marker(A, 4, 0).should_append  # a newer epoch (the coordinator bumped it)
    end(psm, A, 1, abort=True, epoch=3, coordinator_epoch=5)
    assert psm.prepare_marker(A, 3, 4).error_code == ErrorCode.transaction_coordinator_fenced
    assert psm.prepare_marker(A, 3, 5).should_append
    assert psm.prepare_marker(B, 0, 0).should_append  # no state: nothing to check against


def test_a_marker_of_a_newer_epoch_restarts_the_producer_at_sequence_zero(psm):
    psm.update(txn(A, epoch=0, first_seq=0, count=5, base_offset=0), NOW)
    end(psm, A, 5, abort=True, epoch=1)
    entry = psm.last_entry(A)
    assert entry.producer_epoch == 1 and entry.batch_metadata == ()
    assert psm.prepare_update(txn(A, epoch=1, first_seq=5)).error_code == ErrorCode.out_of_order_sequence_number
    assert psm.prepare_update(txn(A, epoch=0, first_seq=5)).error_code == ErrorCode.invalid_producer_epoch
    assert psm.prepare_update(txn(A, epoch=1, first_seq=0)).should_append
    # A marker of the same epoch keeps the batches (Kafka's ProducerStateEntry.update).
    psm.update(txn(A, epoch=1, first_seq=0, count=2, base_offset=6), NOW)
    end(psm, A, 8, abort=False, epoch=1)
    assert psm.last_entry(A).last_seq == 1
    assert psm.prepare_update(txn(A, epoch=1, first_seq=2)).should_append


def test_a_producer_with_an_open_transaction_never_expires(psm):
    psm.update(txn(A, base_offset=0), 0)
    psm.update(batch(B, 0, 0, 1, 1), 0)
    end(psm, 300, 2, abort=False, coordinator_epoch=1, now=0)
    assert psm.remove_expired_producers(psm.expiration_ms + 1) == 2  # B and 300, not A
    assert A in psm and B not in psm and 300 not in psm
    assert psm.last_entry(A).current_txn_first_offset == 0


def test_snapshots_keep_the_open_transaction_and_the_coordinator_epoch(psm, tmp_path):
    psm.update(txn(A, first_seq=0, count=2, base_offset=0), NOW)
    psm.update(batch(7, 0, 0, 1, 2), NOW)
    end(psm, B, 3, abort=False, epoch=2, coordinator_epoch=9)
    psm.update(txn(B, epoch=2, first_seq=0, base_offset=4), NOW)
    end(psm, A, 5, abort=True, coordinator_epoch=4)
    psm.update(txn(A, first_seq=2, base_offset=6), NOW)
    path = psm.take_snapshot(tmp_path, 7)
    rows = {row[0]: row for row in read_snapshot(path)}
    assert rows[A][6:] == (4, 6) and rows[B][6:] == (9, 4) and rows[7][6:] == (-1, -1)
    restored = ProducerStateManager.for_mode(psm.mode)
    assert restored.truncate_and_reload(tmp_path, 7) == 7
    assert restored.ongoing_transactions() == [(B, 4), (A, 6)]
    assert restored.first_unstable_offset == 4
    for pid in (A, B, 7):  # (kafka mode restores only the latest of the retained batches)
        before, after = psm.last_entry(pid), restored.last_entry(pid)
        assert after.batch_metadata[-1:] == before.batch_metadata[-1:]
        assert dataclasses.replace(after, batch_metadata=()) == dataclasses.replace(before, batch_metadata=())
    # The marker-only entry of a producer round-trips (last sequence -1: sequence 0 is next).
    restored2 = ProducerStateManager.for_mode(psm.mode)
    fresh = ProducerStateManager.for_mode(psm.mode)
    end(fresh, 55, 0, abort=True, epoch=3, coordinator_epoch=2)
    fresh.take_snapshot(tmp_path / "x", 1)
    restored2.truncate_and_reload(tmp_path / "x", 1)
    assert restored2.last_entry(55).batch_metadata == () and restored2.last_entry(55).producer_epoch == 3
    assert restored2.prepare_update(txn(55, epoch=3, first_seq=1)).error_code == ErrorCode.out_of_order_sequence_number
    assert restored2.prepare_update(txn(55, epoch=3, first_seq=0)).should_append


def test_clear_forgets_transactions(psm):
    psm.update(txn(A), NOW)
    psm.clear()
    assert psm.first_unstable_offset is None and A not in psm


@pytest.mark.parametrize("mode", MODES)
def test_replaying_a_real_log_rebuilds_open_and_aborted_transactions(mode, tmp_path):
    """Batches and markers written to a PartitionLog, replayed from it (`iter_batches` reads each
    marker's control record): the open transactions and the aborted entries match what the live
    state saw."""
    log = PartitionLog.create(tmp_path / "t-0", LogConfig(), 0)
    live = ProducerStateManager.for_mode(mode)
    aborted_live = []

    def append(data, marker=None):
        result = log.append(data, NOW)
        header = dataclasses.replace(read_header(data), base_offset=result.base_offset)
        entry = live.update(header, NOW, marker)
        if entry is not None:
            aborted_live.append(entry)

    append(encode_batch([(b"k", b"a0")], 1, producer_id=A, producer_epoch=0, base_sequence=0, attributes=ATTR_TRANSACTIONAL))
    append(encode_batch([(b"k", b"b0")], 1, producer_id=B, producer_epoch=0, base_sequence=0, attributes=ATTR_TRANSACTIONAL))
    append(encode_control_batch(A, 0, 1, False, 1), ControlRecord(CONTROL_ABORT, 1))
    append(encode_batch([(b"k", b"a1")], 1, producer_id=A, producer_epoch=0, base_sequence=1, attributes=ATTR_TRANSACTIONAL))
    append(encode_control_batch(B, 0, 1, True, 1), ControlRecord(CONTROL_COMMIT, 1))
    replayed = ProducerStateManager.for_mode(mode)
    aborted_replayed = [e for header, marker in log.iter_batches(0)
                        if (e := replayed.update(header, NOW, marker)) is not None]
    assert aborted_replayed == aborted_live == [AbortedTxn(A, 0, 2, 1)]
    assert replayed.ongoing_transactions() == live.ongoing_transactions() == [(A, 3)]
    assert replayed.last_entry(B) == live.last_entry(B)
    assert not list_snapshots(tmp_path / "t-0")
    log.close()
