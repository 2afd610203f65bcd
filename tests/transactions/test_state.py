"""The transaction coordinator's pure state machine (minibroker/transactions/state.py) on plain calls:
the transitions of Kafka's TransactionMetadata, fencing by InitProducerId, KIP-360 epoch bumps and
retries, KIP-588's fresh producer id at an exhausted epoch, EndTxn's answers in each state, the
timeout abort's epoch bump, KIP-890 part 1 verification, id expiration and ListTransactions'
filters."""

from __future__ import annotations

import itertools

import pytest

from minibroker.transactions.state import TransactionStateMachine, TxnConfig, TxnState
from minibroker.protocol.errors import ErrorCode

E = ErrorCode


class Harness:
    def __init__(self, **config):
        self.sm = TransactionStateMachine(TxnConfig(**config))
        self.ids = itertools.count(1000)
        self.now = 1_000_000

    def init(self, tid="t", timeout=60_000, pid=-1, epoch=-1):
        result = self.sm.init_producer_id(tid, timeout, pid, epoch, self.now, lambda: next(self.ids))
        if result.transition is not None:
            self.sm.apply(result.transition)
        return result

    def add(self, pid, epoch, parts, tid="t"):
        error, transition = self.sm.add_partitions(tid, pid, epoch, parts, self.now)
        if transition is not None:
            self.sm.apply(transition)
        return error

    def end(self, pid, epoch, commit, tid="t", complete=True):
        error, transition = self.sm.end_txn(tid, pid, epoch, commit, self.now)
        if transition is not None:
            self.sm.apply(transition)
            if complete:
                self.sm.apply(self.sm.complete(transition, self.now))
        return error

    def txn(self, tid="t"):
        return self.sm.txns[tid]


def test_first_init_allocates_a_producer_id_at_epoch_0_and_each_init_bumps_it():
    h = Harness()
    r = h.init()
    assert (r.error, r.producer_id, r.producer_epoch) == (E.none, 1000, 0)
    assert h.txn().state is TxnState.EMPTY
    r = h.init()
    assert (r.error, r.producer_id, r.producer_epoch) == (E.none, 1000, 1)


def test_a_transaction_commits_through_prepare_and_complete():
    h = Harness()
    r = h.init()
    assert h.add(r.producer_id, 0, [("a", 0), ("b", 1)]) == E.none
    txn = h.txn()
    assert (txn.state, txn.partitions, txn.start_ms) == (TxnState.ONGOING, {("a", 0), ("b", 1)}, h.now)
    h.now += 5
    assert h.add(r.producer_id, 0, [("a", 0)]) == E.none  # already in: nothing to write
    error, prepare = h.sm.end_txn("t", r.producer_id, 0, True, h.now)
    assert error == E.none and prepare.state is TxnState.PREPARE_COMMIT and prepare.partitions == {("a", 0), ("b", 1)}
    h.sm.apply(prepare)
    # While the markers are owed: the same end is CONCURRENT_TRANSACTIONS, the other one invalid.
    assert h.sm.end_txn("t", r.producer_id, 0, True, h.now) == (E.concurrent_transactions, None)
    assert h.sm.end_txn("t", r.producer_id, 0, False, h.now) == (E.invalid_txn_state, None)
    assert h.add(r.producer_id, 0, [("c", 0)]) == E.concurrent_transactions
    assert h.init().error == E.concurrent_transactions
    h.sm.apply(h.sm.complete(prepare, h.now))
    assert h.txn().state is TxnState.COMPLETE_COMMIT and not h.txn().partitions
    # A retried commit is NONE, an abort now INVALID_TXN_STATE; the next transaction starts afresh.
    assert h.end(r.producer_id, 0, True) == E.none
    assert h.end(r.producer_id, 0, False) == E.invalid_txn_state
    h.now += 10
    assert h.add(r.producer_id, 0, [("c", 0)]) == E.none
    assert h.txn().partitions == {("c", 0)} and h.txn().start_ms == h.now


def test_end_without_a_transaction_and_bad_ids():
    h = Harness()
    r = h.init()
    assert h.end(r.producer_id, 0, True) == E.invalid_txn_state  # Empty
    assert h.end(r.producer_id + 1, 0, True) == E.invalid_producer_id_mapping
    assert h.end(r.producer_id, 0, True, tid="nobody") == E.invalid_producer_id_mapping
    assert h.add(r.producer_id, 0, [("a", 0)], tid="") == E.invalid_request
    assert h.init(tid="").error == E.invalid_request


def test_transaction_timeout_is_checked_against_the_maximum():
    h = Harness(max_timeout_ms=1000)
    assert h.init(timeout=1001).error == E.invalid_transaction_timeout
    assert h.init(timeout=0).error == E.invalid_transaction_timeout
    assert h.init(timeout=1000).error == E.none


def test_a_new_producer_fences_the_old_epoch_and_aborts_its_transaction():
    h = Harness()
    old = h.init()
    h.add(old.producer_id, 0, [("a", 0)])
    r = h.sm.init_producer_id("t", 60_000, -1, -1, h.now, lambda: 1)
    assert r.error == E.concurrent_transactions and r.aborts
    fence = r.transition
    assert (fence.state, fence.producer_epoch, fence.partitions) == (TxnState.PREPARE_ABORT, 1, {("a", 0)})
    h.sm.apply(fence)
    h.sm.apply(h.sm.complete(fence, h.now))
    # The retry gets the epoch bumped once more; the zombie is fenced everywhere.
    r = h.init()
    assert (r.error, r.producer_id, r.producer_epoch) == (E.none, old.producer_id, 2)
    assert h.add(old.producer_id, 0, [("a", 0)]) == E.producer_fenced
    assert h.end(old.producer_id, 0, True) == E.producer_fenced
    assert h.sm.verify("t", old.producer_id, 0, [("a", 0)])[0] == E.producer_fenced


def test_kip360_bump_with_the_current_epoch_and_the_retry_of_a_lost_answer():
    h = Harness()
    r = h.init()
    pid = r.producer_id
    assert h.init(pid=pid, epoch=0).producer_epoch == 1  # bump from the current epoch
    again = h.init(pid=pid, epoch=0)  # the answer was lost: the same epoch again, no bump
    assert (again.error, again.producer_epoch, again.transition) == (E.none, 1, None)
    assert h.init(pid=pid, epoch=5).error == E.producer_fenced  # neither current nor last
    assert h.init(pid=pid + 7, epoch=1).error == E.producer_fenced  # another producer id


def test_exhausted_epoch_rotates_to_a_fresh_producer_id():
    h = Harness()
    r = h.init()
    h.sm.apply(h.txn().but(producer_epoch=32766))
    rotated = h.init(pid=r.producer_id, epoch=32766)
    assert (rotated.error, rotated.producer_epoch) == (E.none, 0) and rotated.producer_id != r.producer_id
    assert h.txn().previous_producer_id == r.producer_id
    # A retry naming the old id at its exhausted epoch gets the rotated id again.
    retry = h.init(pid=r.producer_id, epoch=32766)
    assert (retry.error, retry.producer_id, retry.producer_epoch) == (E.none, rotated.producer_id, 0)
    # Without a producer id (a restarted producer) an exhausted epoch rotates too.
    h.sm.apply(h.txn().but(producer_epoch=32767))
    fresh = h.init()
    assert fresh.producer_epoch == 0 and fresh.producer_id not in (r.producer_id, rotated.producer_id)


def test_fencing_at_an_exhausted_epoch_bumps_it_to_the_last_and_the_retry_rotates():
    # Kafka's prepareFenceProducerEpoch (shouldUseLastEpochToFenceWhenEpochsAreExhausted): 32766 is
    # fenced at 32767, the epoch kept for fencing; only a new producer id follows it.
    h = Harness()
    r = h.init()
    h.sm.apply(h.txn().but(producer_epoch=32766))
    h.add(r.producer_id, 32766, [("a", 0)])
    fence = h.init().transition
    assert fence.producer_epoch == 32767
    h.sm.apply(h.sm.complete(fence, h.now))
    retry = h.init()
    assert retry.producer_id != r.producer_id and retry.producer_epoch == 0


def test_timed_out_transactions_are_aborted_with_an_epoch_bump():
    h = Harness()
    r = h.init(timeout=1000)
    h.add(r.producer_id, 0, [("a", 0)])
    assert h.sm.next_timeout_ms() == h.now + 1000
    assert h.sm.timed_out(h.now + 1000) == []
    assert h.sm.timed_out(h.now + 1001) == [h.txn().transactional_id]
    assert h.sm.fence_timed_out(h.txn().transactional_id, r.producer_id + 1, h.now + 1001) is None
    abort = h.sm.fence_timed_out(h.txn().transactional_id, r.producer_id, h.now + 1001)
    assert (abort.state, abort.producer_epoch, abort.partitions) == (TxnState.PREPARE_ABORT, 1, {("a", 0)})
    h.sm.apply(abort)
    h.sm.apply(h.sm.complete(abort, h.now))
    assert h.txn().state is TxnState.COMPLETE_ABORT
    # The producer is fenced: its commit, its next transaction and its KIP-360 recovery.
    assert h.end(r.producer_id, 0, True) == E.producer_fenced
    assert h.add(r.producer_id, 0, [("a", 0)]) == E.producer_fenced
    assert h.init(pid=r.producer_id, epoch=0).error == E.producer_fenced
    assert h.init().producer_epoch == 2  # a new instance carries on


def test_verification_of_produce_partitions():
    h = Harness()
    r = h.init()
    assert h.sm.verify("t", r.producer_id, 0, [("a", 0)]) == (E.none, {("a", 0): E.transaction_abortable})
    h.add(r.producer_id, 0, [("a", 0)])
    assert h.sm.verify("t", r.producer_id, 0, [("a", 0), ("a", 1)]) == (
        E.none, {("a", 0): E.none, ("a", 1): E.transaction_abortable})
    assert h.sm.verify("t", r.producer_id + 1, 0, [("a", 0)])[0] == E.invalid_producer_id_mapping
    h.end(r.producer_id, 0, True, complete=False)
    assert h.sm.verify("t", r.producer_id, 0, [("a", 0)])[0] == E.concurrent_transactions


def test_idle_transactional_ids_expire_but_open_ones_do_not():
    h = Harness(id_expiration_ms=1000)
    h.init(tid="idle")
    r = h.init(tid="busy")
    h.add(r.producer_id, 0, [("a", 0)], tid="busy")
    assert h.sm.expired(h.now + 999) == []
    assert h.sm.expired(h.now + 1000) == ["idle"]


def test_list_filters():
    h = Harness()
    a = h.init(tid="app-a")
    h.init(tid="app-b")
    h.init(tid="other")
    h.add(a.producer_id, 0, [("x", 0)], tid="app-a")
    unknown, found = h.sm.list(["Ongoing", "Bogus"], now_ms=h.now)
    assert unknown == ["Bogus"] and [t.transactional_id for t in found] == ["app-a"]
    assert [t.transactional_id for t in h.sm.list(pattern="app-.*", now_ms=h.now)[1]] == ["app-a", "app-b"]
    assert [t.transactional_id for t in h.sm.list(producer_ids=[a.producer_id], now_ms=h.now)[1]] == ["app-a"]
    assert h.sm.list(duration_ms=10, now_ms=h.now + 10)[1] == []
    assert [t.transactional_id for t in h.sm.list(duration_ms=10, now_ms=h.now + 11)[1]] == ["app-a"]


@pytest.mark.timeout(60)
def test_a_transactional_id_pattern_is_matched_in_linear_time_and_read_as_re2():
    """ListTransactions v2's pattern comes from a client and runs on the event loop: a pattern that
    makes a backtracking engine run for minutes (`(a|a)*b` against 40 a's: 2**40 paths in Python's
    re) answers at once; RE2 refuses backreferences (the handler answers INVALID_REGULAR_EXPRESSION)."""
    from minibroker.regex import RegexError

    h = Harness()
    h.init(tid="a" * 40)
    h.init(tid="aab")
    assert [t.transactional_id for t in h.sm.list(pattern="(a|a)*b", now_ms=h.now)[1]] == ["aab"]
    with pytest.raises(RegexError):
        h.sm.list(pattern=r"(a)\1", now_ms=h.now)


@pytest.mark.parametrize("state", [TxnState.EMPTY, TxnState.COMPLETE_ABORT, TxnState.COMPLETE_COMMIT])
def test_add_partitions_from_an_idle_state_starts_a_transaction(state):
    h = Harness()
    r = h.init()
    h.sm.apply(h.txn().but(state=state))
    assert h.add(r.producer_id, 0, [("a", 0)]) == E.none
    assert h.txn().state is TxnState.ONGOING and h.txn().start_ms == h.now


def test_kip360_bump_of_a_transactional_id_the_coordinator_does_not_know():
    """A producer bumping its epoch (KIP-360: its current producer id and epoch) for a transactional id
    the coordinator has no state for (expired, or a broker started afresh) gets a fresh producer id
    at epoch 0, as Kafka's fresh TransactionMetadata (epoch -1) takes any expected epoch; it is not
    fenced, which a Java producer would take as fatal."""
    h = Harness()
    result = h.init(pid=77, epoch=3)
    assert (result.error, result.producer_id, result.producer_epoch) == (E.none, 1000, 0)
    assert h.sm.txns["t"].producer_epoch == 0


# -- transactions version 2 (KIP-890 part 2, EndTxn v5) ------------------------------------------


def end_v2(h, pid, epoch, commit, tid="t", complete=True):
    result = h.sm.end_txn_v2(tid, pid, epoch, commit, h.now, lambda: next(h.ids))
    if result.transition is not None:
        h.sm.apply(result.transition)
        if complete:
            h.sm.apply(h.sm.complete(result.transition, h.now))
    return result.error, result.producer_id, result.producer_epoch


def test_v2_every_end_bumps_the_epoch_and_answers_it():
    h = Harness()
    r = h.init()
    pid = r.producer_id
    assert h.sm.add_partitions("t", pid, 0, [("a", 0)], h.now, 2)[1].client_transaction_version == 2
    h.add(pid, 0, [("a", 0)])
    result = h.sm.end_txn_v2("t", pid, 0, True, h.now, lambda: 0)
    prepared = result.transition
    assert (result.error, prepared.state, prepared.producer_epoch, prepared.last_producer_epoch) == (
        E.none, TxnState.PREPARE_COMMIT, 1, 0)
    assert (result.producer_id, result.producer_epoch) == (pid, 1)
    h.sm.apply(prepared)
    # While prepared: the retry (the old epoch) is CONCURRENT_TRANSACTIONS, the new epoch is fenced.
    assert end_v2(h, pid, 0, True, complete=False) == (E.concurrent_transactions, -1, -1)
    assert end_v2(h, pid, 1, True, complete=False) == (E.producer_fenced, -1, -1)
    h.sm.apply(h.sm.complete(prepared, h.now))
    assert (h.txn().state, h.txn().producer_epoch) == (TxnState.COMPLETE_COMMIT, 1)
    # A retry of the commit (epoch 0): NONE with the current id and epoch; an abort retry INVALID_TXN_STATE.
    assert end_v2(h, pid, 0, True) == (E.none, pid, 1)
    assert end_v2(h, pid, 0, False) == (E.invalid_txn_state, -1, -1)
    # A commit at the current epoch with nothing added: INVALID_TXN_STATE; an abort bumps anyway.
    assert end_v2(h, pid, 1, True) == (E.invalid_txn_state, -1, -1)
    assert end_v2(h, pid, 1, False) == (E.none, pid, 2)
    assert (h.txn().state, h.txn().start_ms) == (TxnState.COMPLETE_ABORT, h.now)
    assert end_v2(h, pid, 1, False) == (E.none, pid, 2)  # its retry
    assert end_v2(h, pid, 1, True) == (E.invalid_txn_state, -1, -1)
    # Older epochs are fenced; another producer id is INVALID_PRODUCER_ID_MAPPING.
    assert end_v2(h, pid, 0, False) == (E.producer_fenced, -1, -1)
    assert end_v2(h, pid + 1, 2, False) == (E.invalid_producer_id_mapping, -1, -1)
    assert end_v2(h, pid, 2, False, tid="nobody") == (E.invalid_producer_id_mapping, -1, -1)
    # The next transaction runs at the answered epoch; an older epoch cannot add to it.
    assert h.add(pid, 1, [("a", 0)]) == E.producer_fenced
    assert h.add(pid, 2, [("a", 0)]) == E.none
    assert end_v2(h, pid, 2, False) == (E.none, pid, 3)


def test_v2_empty_state_abort_bumps_and_commit_is_invalid():
    h = Harness()
    pid = h.init().producer_id
    assert end_v2(h, pid, 0, True) == (E.invalid_txn_state, -1, -1)
    assert end_v2(h, pid, 0, False) == (E.none, pid, 1)


def test_v2_an_end_at_an_exhausted_epoch_hands_over_a_new_producer_id():
    h = Harness()
    pid = h.init().producer_id
    h.sm.apply(h.txn().but(producer_epoch=32766))
    h.add(pid, 32766, [("a", 0)])
    result = h.sm.end_txn_v2("t", pid, 32766, True, h.now, lambda: next(h.ids))
    prepared = result.transition
    # The markers go out under the old id at 32767; the client is answered the new id at epoch 0.
    assert (prepared.producer_id, prepared.producer_epoch, prepared.next_producer_id) == (pid, 32767, 1001)
    assert (result.producer_id, result.producer_epoch) == (1001, 0)
    assert prepared.record().next_producer_id == 1001  # kept in TransactionLogValue v1's tag 1
    h.sm.apply(prepared)
    h.sm.apply(h.sm.complete(prepared, h.now))
    txn = h.txn()
    assert (txn.producer_id, txn.producer_epoch, txn.previous_producer_id, txn.next_producer_id) == (1001, 0, pid, -1)
    # A retry naming the old id at 32766 gets the new one; the new id carries on.
    assert end_v2(h, pid, 32766, True) == (E.none, 1001, 0)
    assert h.add(1001, 0, [("a", 0)]) == E.none
    assert end_v2(h, 1001, 0, True) == (E.none, 1001, 1)


def test_v2_fencing_by_a_new_producer_and_the_timeout_bump_once():
    h = Harness()
    pid = h.init().producer_id
    h.add(pid, 0, [("a", 0)])
    fence = h.init()
    assert fence.error == E.concurrent_transactions and fence.transition.producer_epoch == 1
    h.sm.apply(h.sm.complete(fence.transition, h.now))
    # The fenced producer's abort at epoch 0 reads as a retry of the abort done for it (Kafka's
    # table); its commit is INVALID_TXN_STATE; the new producer gets epoch 2.
    assert end_v2(h, pid, 0, True) == (E.invalid_txn_state, -1, -1)
    assert h.init().producer_epoch == 2
    assert end_v2(h, pid, 0, False) == (E.producer_fenced, -1, -1)


def test_v2_states_round_trip_through_the_log_record():
    from minibroker.storage.transaction_records import parse_transaction_value, transaction_value
    from minibroker.transactions.state import TxnMetadata

    h = Harness()
    pid = h.init().producer_id
    h.sm.apply(h.txn().but(producer_epoch=32766))
    h.add(pid, 32766, [("a", 0)])
    prepared = h.sm.end_txn_v2("t", pid, 32766, False, h.now, lambda: 77).transition
    back = TxnMetadata.from_record("t", parse_transaction_value(transaction_value(prepared.record(), 1)))
    assert back == prepared.but(last_producer_epoch=-1)  # the last epoch is memory only, as in Kafka
    # Version 0 has no tagged fields: what it cannot carry is lost, so Kafka writes v1 from TV2.
    v0 = parse_transaction_value(transaction_value(prepared.record(), 0))
    assert (v0.next_producer_id, v0.client_transaction_version) == (-1, 0)
