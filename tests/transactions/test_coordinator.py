"""The transaction coordinator's trio shell on trio's MockClock, over a real `__transaction_state` log
in a temporary directory: the timer task aborts a transaction past its timeout (an epoch bump, ABORT
markers to its partitions) at the abort interval and not before; a marker the log side refuses keeps
the transaction prepared (answered CONCURRENT_TRANSACTIONS) until the timer writes it; a
transaction prepared when the broker died is completed from the log at the next start; a failed
write to the transaction log changes nothing and answers NOT_COORDINATOR; an idle transactional id
expires (a tombstone) at the expiration check, an open one does not. On a cluster (a placement the
test drives): a write is answered once the ISR acknowledges it, COORDINATOR_NOT_AVAILABLE when it
does not or the ISR is under min.insync.replicas; another broker's election makes this one answer
NOT_COORDINATOR and send verifications to it; its own election answers
COORDINATOR_LOAD_IN_PROGRESS until the state is loaded, then completes what was prepared, retrying
the refused markers after 100 ms.

The marker writer here records the calls (the log side's markers are exercised by the client tests).
"""

from __future__ import annotations

import itertools

import trio
import trio.testing

from minibroker.clock import BrokerClock
from minibroker.transactions.coordinator import Placement, TransactionCoordinator
from minibroker.transactions.state import TxnConfig, TxnState
from minibroker.protocol.errors import ErrorCode
from minibroker.storage.config import LogConfig
from minibroker.storage.manager import LogManager
from minibroker.storage.transaction_store import TransactionStore
from tests.support.clock import run

E = ErrorCode


class Markers:
    def __init__(self):
        self.calls = []
        self.fail = set()

    def __call__(self, pid, epoch, commit, coordinator_epoch, partitions):
        self.calls.append((pid, epoch, commit, tuple(partitions)))
        return {tp: E.kafka_storage_error if tp in self.fail else E.none for tp in partitions}


def coordinator(data_dir, markers, ids=None, config=None, **kw):
    logs = LogManager.open(data_dir, LogConfig.from_broker({}), 0)
    store = TransactionStore.open(logs, 0)
    ids = ids or itertools.count(100)
    return logs, TransactionCoordinator(store, allocate=lambda: next(ids), clock=BrokerClock(), markers=markers,
                                        config=config or TxnConfig(), abort_interval_ms=100, **kw)




def test_timer_aborts_a_timed_out_transaction_with_an_epoch_bump(tmp_path):
    markers = Markers()

    async def main():
        logs, c = coordinator(tmp_path, markers)
        error, pid, epoch = await c.init_producer_id("t", 1000)
        assert (error, epoch) == (E.none, 0)
        assert await c.add_partitions("t", pid, 0, [("a", 0), ("b", 3)]) == E.none
        async with trio.open_nursery() as nursery:
            nursery.start_soon(c.run)
            await trio.sleep(0.95)
            assert c.txns["t"].state is TxnState.ONGOING and markers.calls == []
            await trio.sleep(0.2)  # past the timeout, at the next abort check
            nursery.cancel_scope.cancel()
        assert markers.calls == [(pid, 1, False, (("a", 0), ("b", 3)))]
        assert c.txns["t"].state is TxnState.COMPLETE_ABORT and c.timed_out_aborts == 1
        assert await c.end_txn("t", pid, 0, True) == E.producer_fenced
        logs.close(clean=True)

    run(main)


def test_each_timeout_abort_reads_the_transaction_as_it_is_then(tmp_path):
    # The scan finds t1, t2 and t3 timed out; t1's abort waits on its markers, and meanwhile t2's
    # producer commits and opens a new transaction and t3's producer adds a partition. t2's new
    # transaction is not aborted, t3's abort marks the partition it added (no LSO left stuck).
    release = trio.Event()
    calls = []

    async def markers(pid, epoch, commit, coordinator_epoch, partitions):
        calls.append((pid, epoch, commit, tuple(partitions)))
        if partitions[0] == ("a", 0):
            await release.wait()
        return {tp: E.none for tp in partitions}

    async def main():
        logs, c = coordinator(tmp_path, markers)
        pids = {}
        for tid, tp in (("t1", ("a", 0)), ("t2", ("b", 0)), ("t3", ("c", 0))):
            _, pids[tid], _ = await c.init_producer_id(tid, 1000)
            assert await c.add_partitions(tid, pids[tid], 0, [tp]) == E.none
        await trio.sleep(1.1)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(c.abort_timed_out)
            await trio.testing.wait_all_tasks_blocked()
            assert calls == [(pids["t1"], 1, False, (("a", 0),))]
            assert await c.end_txn("t2", pids["t2"], 0, True) == E.none
            assert await c.add_partitions("t2", pids["t2"], 0, [("b", 1)]) == E.none
            assert await c.add_partitions("t3", pids["t3"], 0, [("d", 0)]) == E.none
            release.set()
        assert calls[1:] == [(pids["t2"], 0, True, (("b", 0),)), (pids["t3"], 1, False, (("c", 0), ("d", 0)))]
        t2 = c.txns["t2"]
        assert (t2.state, t2.producer_epoch, t2.partitions) == (TxnState.ONGOING, 0, {("b", 1)})
        assert (c.txns["t3"].state, c.timed_out_aborts) == (TxnState.COMPLETE_ABORT, 2)
        logs.close(clean=True)

    run(main)


def test_markers_written_twice_at_once_complete_the_transaction_once(tmp_path):
    # The timer's retry of owed markers and the client's EndTxn both write a prepared transaction's
    # markers; whichever finishes second finds it complete and leaves it so.
    release = trio.Event()

    async def markers(pid, epoch, commit, coordinator_epoch, partitions):
        await release.wait()
        return {tp: E.none for tp in partitions}

    async def main():
        logs, c = coordinator(tmp_path, markers)
        _, pid, _ = await c.init_producer_id("t", 60000)
        assert await c.add_partitions("t", pid, 0, [("a", 0)]) == E.none
        results = []

        async def end():
            results.append(await c.end_txn("t", pid, 0, True))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(end)
            await trio.testing.wait_all_tasks_blocked()
            nursery.start_soon(c.complete_prepared)
            await trio.testing.wait_all_tasks_blocked()
            release.set()
        assert results == [E.none] and c.txns["t"].state is TxnState.COMPLETE_COMMIT
        logs.close(clean=True)

    run(main)


def test_a_refused_marker_keeps_the_transaction_prepared_until_the_timer_writes_it(tmp_path):
    markers = Markers()
    markers.fail = {("b", 0)}

    async def main():
        logs, c = coordinator(tmp_path, markers)
        _, pid, _ = await c.init_producer_id("t", 60_000)
        await c.add_partitions("t", pid, 0, [("a", 0), ("b", 0)])
        assert await c.end_txn("t", pid, 0, True) == E.none  # PrepareCommit is on disk
        assert c.txns["t"].state is TxnState.PREPARE_COMMIT
        assert await c.end_txn("t", pid, 0, True) == E.concurrent_transactions
        assert await c.add_partitions("t", pid, 0, [("a", 0)]) == E.concurrent_transactions
        markers.fail = set()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(c.run)
            await trio.sleep(0.15)
            nursery.cancel_scope.cancel()
        # Only the partition still owed a marker got it again.
        assert markers.calls[-1] == (pid, 0, True, (("b", 0),))
        assert c.txns["t"].state is TxnState.COMPLETE_COMMIT
        assert await c.end_txn("t", pid, 0, True) == E.none  # a retry of the finished commit
        logs.close(clean=True)

    run(main)


def test_a_transaction_prepared_at_a_crash_completes_at_the_next_start(tmp_path):
    markers = Markers()
    markers.fail = {("a", 0)}

    async def first():
        logs, c = coordinator(tmp_path, markers)
        _, pid, _ = await c.init_producer_id("t", 60_000)
        await c.add_partitions("t", pid, 0, [("a", 0)])
        await c.end_txn("t", pid, 0, False)
        logs.close(clean=False)  # as a kill -9 leaves it: PrepareAbort is the last record

    run(first)
    again = Markers()

    async def second():
        logs, c = coordinator(tmp_path, again, ids=itertools.count(500))
        assert c.txns["t"].state is TxnState.PREPARE_ABORT
        async with trio.open_nursery() as nursery:
            nursery.start_soon(c.run)
            await trio.sleep(0.01)
            nursery.cancel_scope.cancel()
        assert again.calls == [(100, 0, False, (("a", 0),))]
        assert c.txns["t"].state is TxnState.COMPLETE_ABORT
        logs.close(clean=True)

    run(second)
    logs = LogManager.open(tmp_path, LogConfig.from_broker({}), 0)
    assert TransactionStore.open(logs, 0).records["t"].state is TxnState.COMPLETE_ABORT
    logs.close(clean=True)


def test_a_failed_log_write_changes_nothing(tmp_path):
    async def main():
        logs, c = coordinator(tmp_path, Markers())
        _, pid, _ = await c.init_producer_id("t", 60_000)

        def refuse(*_args, **_kwargs):
            raise OSError(28, "No space left on device")

        c.store.log.append = refuse
        assert await c.add_partitions("t", pid, 0, [("a", 0)]) == E.not_coordinator
        assert c.txns["t"].state is TxnState.EMPTY
        assert await c.init_producer_id("t", 60_000) == (E.not_coordinator, -1, -1)
        assert c.txns["t"].producer_epoch == 0
        logs.close(clean=False)

    run(main)


def test_idle_transactional_ids_expire_with_a_tombstone(tmp_path):
    async def main():
        logs, c = coordinator(tmp_path, Markers(), config=TxnConfig(id_expiration_ms=1000),
                              expiration_interval_ms=500)
        await c.init_producer_id("idle", 60_000)
        _, pid, _ = await c.init_producer_id("busy", 60_000)
        await c.add_partitions("busy", pid, 0, [("a", 0)])
        async with trio.open_nursery() as nursery:
            nursery.start_soon(c.run)
            await trio.sleep(0.9)
            assert set(c.txns) == {"idle", "busy"}
            await trio.sleep(0.7)
            nursery.cancel_scope.cancel()
        assert set(c.txns) == {"busy"}  # an open transaction never expires
        logs.close(clean=True)

    run(main)
    logs = LogManager.open(tmp_path, LogConfig.from_broker({}), 0)
    assert set(TransactionStore.open(logs, 0).records) == {"busy"}
    logs.close(clean=True)


class FakePlacement:
    """A coordinator's partition of __transaction_state on a cluster, as a test drives it: who
    leads it in which epoch, and whether the ISR acknowledges a write (`acks`: a trio channel of
    the answers, one per write)."""

    def __init__(self, node_id=1, leader=1, epoch=5):
        self.leader, self.epoch, self.in_sync_now = leader, epoch, True
        self.waits = []
        self.answers_in, self.answers_out = trio.open_memory_channel(10)
        self.placement = Placement(node_id, lambda: (self.leader, self.epoch), self.wait, lambda: self.in_sync_now,
                                   self.forward)
        self.forwarded = []

    async def wait(self, offset, timeout_ms):
        self.waits.append(offset)
        return await self.answers_out.receive()

    async def forward(self, node, tid, pid, epoch, partitions, verify_only):
        self.forwarded.append((node, tid, partitions, verify_only))
        return E.none, {tp: E.none for tp in partitions}


def test_on_a_cluster_writes_wait_for_the_isr_and_only_the_loaded_leader_coordinates(tmp_path):
    markers = Markers()

    async def main():
        fake = FakePlacement()
        logs, c = coordinator(tmp_path, markers, placement=fake.placement)
        assert c.status() == E.none and c.coordinator_epoch == 5  # led here, in epoch 5, at open
        async with trio.open_nursery() as nursery:
            answers = []

            async def init():
                answers.append(await c.init_producer_id("t", 60_000))

            nursery.start_soon(init)
            await trio.testing.wait_all_tasks_blocked()
            # The Empty record is in the log, waiting for the ISR: nothing applied, nothing answered.
            assert answers == [] and "t" not in c.txns and fake.waits == [c.store.log.log_end_offset]
            await fake.answers_in.send(E.none)
        assert answers == [(E.none, 100, 0)] and c.txns["t"].state is TxnState.EMPTY
        # An ISR that does not acknowledge: COORDINATOR_NOT_AVAILABLE, the state unchanged.
        await fake.answers_in.send(E.not_enough_replicas_after_append)
        assert await c.add_partitions("t", 100, 0, [("a", 0)]) == E.coordinator_not_available
        assert c.txns["t"].state is TxnState.EMPTY
        fake.in_sync_now = False  # under min.insync.replicas: refused before anything is written
        end = c.store.log.log_end_offset
        assert await c.add_partitions("t", 100, 0, [("a", 0)]) == E.coordinator_not_available
        assert c.store.log.log_end_offset == end
        fake.in_sync_now = True
        await fake.answers_in.send(E.none)
        assert await c.add_partitions("t", 100, 0, [("a", 0)]) == E.none
        # Another broker is elected: this one answers NOT_COORDINATOR and forgets the state; a
        # partition leader's verification goes to the coordinator's broker.
        fake.leader, fake.epoch = 2, 6
        c.resign()
        assert await c.end_txn("t", 100, 0, True) == E.not_coordinator and c.txns == {}
        assert await c.verify_produce("t", 100, 0, "a", 0, 10) == E.none
        assert fake.forwarded == [(2, "t", [("a", 0)], True)]
        # Elected again: until it has loaded the partition, COORDINATOR_LOAD_IN_PROGRESS.
        fake.leader, fake.epoch = 1, 7
        assert await c.end_txn("t", 100, 0, True) == E.coordinator_load_in_progress
        c.become_coordinator(7, None)
        assert c.txns["t"].state is TxnState.ONGOING and c.coordinator_epoch == 7
        for _ in range(2):  # PrepareCommit, then CompleteCommit
            await fake.answers_in.send(E.none)
        assert await c.end_txn("t", 100, 0, True) == E.none
        assert markers.calls == [(100, 0, True, (("a", 0),))]
        assert c.txns["t"].state is TxnState.COMPLETE_COMMIT
        logs.close(clean=True)

    run(main)


def test_a_new_coordinator_completes_what_was_prepared_and_retries_refused_markers(tmp_path):
    markers = Markers()
    markers.fail = {("b", 0)}

    async def main():
        fake = FakePlacement()
        logs, c = coordinator(tmp_path, markers, placement=fake.placement)
        for _ in range(3):
            await fake.answers_in.send(E.none)
        _, pid, _ = await c.init_producer_id("t", 60_000)
        await c.add_partitions("t", pid, 0, [("a", 0), ("b", 0)])
        assert await c.end_txn("t", pid, 0, False) == E.none  # PrepareAbort written; b's marker refused
        assert c.txns["t"].state is TxnState.PREPARE_ABORT
        fake.leader, fake.epoch = 2, 6
        c.resign()
        # The next leader (here, this coordinator elected again) loads PrepareAbort and sends its markers.
        fake.leader, fake.epoch = 1, 7
        c.become_coordinator(7, None)
        markers.calls.clear()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(c.run)
            await trio.sleep(0.05)
            assert markers.calls == [(pid, 0, False, (("a", 0), ("b", 0)))]  # at open: all of them
            await trio.sleep(0.1)  # retried after 100 ms: still refused, only b's
            assert markers.calls[-1] == (pid, 0, False, (("b", 0),))
            markers.fail = set()
            await fake.answers_in.send(E.none)  # CompleteAbort
            await trio.sleep(0.5)
            nursery.cancel_scope.cancel()
        assert c.txns["t"].state is TxnState.COMPLETE_ABORT
        logs.close(clean=True)

    run(main)
