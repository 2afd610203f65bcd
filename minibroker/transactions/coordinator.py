"""The transaction coordinator in the trio shell: what the handlers call (Kafka's TransactionCoordinator
with its TransactionStateManager and TransactionMarkerChannelManager, on one broker).

Each request reads the broker clock, asks the pure `TransactionStateMachine` (state.py), writes the
transition it answers to `__transaction_state` (storage/transaction_store.py) and only then applies
it and answers: a client is never told of a state a kill -9 could lose. A failed write (the disk)
changes nothing and is answered NOT_COORDINATOR, as Kafka maps a failed append to the transaction
log: the client looks the coordinator up again and retries.

Ending a transaction (EndTxn, the fencing InitProducerId, the timeout) is Kafka's three steps:
PrepareCommit/PrepareAbort written, then the markers, COMMIT or ABORT control batches, written to
every partition of the transaction through the log side's `write_txn_markers` (WriteTxnMarkers'
semantics, in process: an error code per partition), then CompleteCommit/CompleteAbort written.
The markers of the `__consumer_offsets` partition also commit or drop the transaction's pending
offsets in the group coordinator. A partition whose marker fails (a disk fault) keeps the
transaction prepared: the timer task writes the markers again until they are all in; meanwhile
requests of the transactional id are answered CONCURRENT_TRANSACTIONS (the client retries). A marker
to a partition that no longer exists is dropped, as Kafka drops it. Kafka answers EndTxn once the
Prepare record is written and sends the markers after; here they are written before the answer too
(they are local appends), so a read_committed consumer sees a committed transaction as soon as its
producer has been told.

At start the state is replayed from `__transaction_state`; transactions found prepared get their
markers written again and complete (the markers are idempotent for the log: a second marker of an
ended transaction changes nothing), Ongoing ones are aborted once their timeout passes.

The timer task (`run`) wakes every `transaction.abort.timed.out.transaction.cleanup.interval.ms`
(Kafka's default 10 s) and aborts the Ongoing transactions older than their timeout (fencing the
producer with an epoch bump, as Kafka does), writes the markers still owed, and every
`transaction.remove.expired.transaction.cleanup.interval.ms` expires transactional ids idle for
`transactional.id.expiration.ms` (a tombstone each).
"""

from __future__ import annotations

import inspect
import logging
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Iterable


from minibroker.transactions.state import (
    PREPARED,
    InitResult,
    TopicPartition,
    TransactionStateMachine,
    TxnConfig,
    TxnMetadata,
    TxnState,
)
from minibroker.protocol.errors import ApiError, ErrorCode
from minibroker.storage.errors import storage_error_message
from minibroker.storage.offsets_store import TOPIC as OFFSETS_TOPIC
from minibroker.storage.transaction_store import TOPIC, TransactionStore

if TYPE_CHECKING:
    from minibroker.clock import BrokerClock
    from minibroker.config import BrokerConfig
    from minibroker.groups.coordinator import GroupCoordinator
    from minibroker.storage.manager import LogManager

__all__ = ["MarkerWriter", "TransactionCoordinator"]

log = logging.getLogger(__name__)

COORDINATOR_EPOCH = 0  # one broker, never re-elected: the coordinator epoch of every marker

# write_txn_markers(producer_id, producer_epoch, commit, coordinator_epoch, partitions) -> error per
# partition (WriteTxnMarkers' semantics), sync or async.
MarkerWriter = Callable[[int, int, bool, int, list[TopicPartition]],
                        "dict[TopicPartition, ErrorCode] | Awaitable[dict[TopicPartition, ErrorCode]]"]


class TransactionCoordinator:
    def __init__(
        self,
        store: TransactionStore,
        *,
        allocate: Callable[[], int],
        clock: BrokerClock,
        groups: GroupCoordinator | None = None,
        markers: MarkerWriter | None = None,
        config: TxnConfig | None = None,
        abort_interval_ms: int = 10_000,
        expiration_interval_ms: int = 3_600_000,
        verification: bool = True,
        transaction_version: int = 2,
    ) -> None:
        self.store = store
        self.state = TransactionStateMachine(config)
        self.allocate = allocate
        self.clock = clock
        self.groups = groups
        self.markers = markers
        self.abort_interval_ms = abort_interval_ms
        self.expiration_interval_ms = expiration_interval_ms
        self.verification = verification  # transaction.partition.verification.enable (KIP-890)
        # The finalized `transaction.version` feature (minibroker.features): from 2 the state is
        # written as TransactionLogValue v1. What a request means follows its own version (EndTxn v5,
        # Produce v12, TxnOffsetCommit v5 are transactions version 2), as in Kafka.
        self.transaction_version = transaction_version
        self.timed_out_aborts = 0  # for metrics and tests
        for tid, record in store.records.items():
            self.state.load(tid, record)

    @classmethod
    def open(cls, config: BrokerConfig, logs: LogManager, *, allocate: Callable[[], int], clock: BrokerClock,
             groups: GroupCoordinator | None = None, markers: MarkerWriter | None = None,
             transaction_version: int = 2) -> TransactionCoordinator:
        store = TransactionStore.open(logs, clock.now_ms())
        coordinator = cls(
            store, allocate=allocate, clock=clock, groups=groups, markers=markers,
            config=TxnConfig(config["transaction.max.timeout.ms"], config["transactional.id.expiration.ms"]),
            abort_interval_ms=config["transaction.abort.timed.out.transaction.cleanup.interval.ms"],
            expiration_interval_ms=config["transaction.remove.expired.transaction.cleanup.interval.ms"],
            verification=config["transaction.partition.verification.enable"],
            transaction_version=transaction_version,
        )
        states: dict[str, int] = {}
        for txn in coordinator.state.txns.values():
            states[txn.state.kafka_name] = states.get(txn.state.kafka_name, 0) + 1
        if states:
            log.info("%s: loaded %d transactional id(s): %s", TOPIC, len(coordinator.state.txns),
                     ", ".join(f"{n} {s}" for s, n in sorted(states.items())))
        return coordinator

    @property
    def txns(self) -> dict[str, TxnMetadata]:
        return self.state.txns

    def _write(self, txn: TxnMetadata) -> bool:
        """Persist then apply one transition; False (nothing changed) when the log refused it."""
        try:
            self.store.write(txn.transactional_id, txn.record(), self.clock.now_ms(),
                             1 if self.transaction_version >= 2 else 0)
        except (OSError, ApiError) as exc:  # ApiError: the topic could not be created (stray data)
            log.error("%s: writing the state of transactional id %r failed: %s", TOPIC, txn.transactional_id,
                      storage_error_message(exc) if isinstance(exc, OSError) else exc)
            return False
        self.state.apply(txn)
        return True

    # -- requests ---------------------------------------------------------------------------------

    async def init_producer_id(self, transactional_id: str, timeout_ms: int, producer_id: int = -1,
                               producer_epoch: int = -1) -> tuple[ErrorCode, int, int]:
        """(error, producer id, epoch). PRODUCER_FENCED is left for the handler to map by version."""
        try:
            result: InitResult = self.state.init_producer_id(
                transactional_id, timeout_ms, producer_id, producer_epoch, self.clock.now_ms(), self.allocate)
        except OSError as exc:  # the next block of producer ids could not be recorded
            log.error("allocating a producer id failed: %s", storage_error_message(exc))
            return ErrorCode.not_coordinator, -1, -1
        if result.transition is None:
            return result.error, result.producer_id, result.producer_epoch
        if not self._write(result.transition):
            return ErrorCode.not_coordinator, -1, -1
        if result.aborts:
            log.info("transactional id %r: a new producer fenced epoch %d; aborting its open transaction",
                     transactional_id, result.transition.producer_epoch - 1)
            await self._complete(result.transition)
        return result.error, result.producer_id, result.producer_epoch

    def add_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                       partitions: Iterable[TopicPartition], client_transaction_version: int = 0) -> ErrorCode:
        error, transition = self.state.add_partitions(
            transactional_id, producer_id, producer_epoch, partitions, self.clock.now_ms(), client_transaction_version)
        if transition is not None and not self._write(transition):
            return ErrorCode.not_coordinator
        return error

    def add_offsets(self, transactional_id: str, producer_id: int, producer_epoch: int, group_id: str) -> ErrorCode:
        """AddOffsetsToTxn: the group's offsets partition joins the transaction."""
        return self.add_partitions(transactional_id, producer_id, producer_epoch, [offsets_partition(group_id)])

    def verify(self, transactional_id: str, producer_id: int, producer_epoch: int,
               partitions: Iterable[TopicPartition]) -> tuple[ErrorCode, dict[TopicPartition, ErrorCode]]:
        return self.state.verify(transactional_id, producer_id, producer_epoch, partitions)

    def verify_produce(self, transactional_id: str | None, producer_id: int, producer_epoch: int, topic: str,
                       partition: int, version: int) -> ErrorCode:
        """KIP-890: a transactional batch is appended only to a partition of the producer's ongoing
        transaction. From Produce v12 (transactions version 2, part 2) the partition is added to the
        transaction here, as Kafka's AddPartitionsToTxnManager does for ADD_PARTITION (a client of
        version 2 sends no AddPartitionsToTxn); below it is only verified (part 1, when
        transaction.partition.verification.enable). The codes as Kafka answers Produce (`version`:
        the request's): a fenced epoch INVALID_PRODUCER_EPOCH, a partition not in the transaction
        TRANSACTION_ABORTABLE from v11 and INVALID_TXN_STATE before (KAFKA-16314: KafkaApis hands
        ReplicaManager `genericError` for Produce versions above 10, and AddPartitionsToTxnManager
        maps TRANSACTION_ABORTABLE back to INVALID_TXN_STATE for older clients), a transaction being
        ended or a state that could not be written NOT_ENOUGH_REPLICAS (Kafka's conversion of
        CONCURRENT_TRANSACTIONS and the coordinator errors for Produce: a retriable code)."""
        if not transactional_id:
            return ErrorCode.invalid_txn_state
        if version >= 12:
            error = self.add_partitions(transactional_id, producer_id, producer_epoch, [(topic, partition)], 2)
        elif not self.verification:
            return ErrorCode.none
        else:
            error, by_partition = self.verify(transactional_id, producer_id, producer_epoch, [(topic, partition)])
            if not error:
                error = by_partition[(topic, partition)]
        if error == ErrorCode.producer_fenced:
            return ErrorCode.invalid_producer_epoch
        if error == ErrorCode.transaction_abortable and version < 11:
            return ErrorCode.invalid_txn_state
        if error in (ErrorCode.concurrent_transactions, ErrorCode.not_coordinator):
            return ErrorCode.not_enough_replicas
        return error

    def verify_offsets(self, transactional_id: str, producer_id: int, producer_epoch: int, group_id: str,
                       version: int) -> ErrorCode:
        """KIP-890 for TxnOffsetCommit: the group's offsets partition must be in the ongoing
        transaction. From v5 (transactions version 2) it is added here (the client sends no
        AddOffsetsToTxn; Kafka's txnOffsetCommitRequestVersionToTransactionSupportedOperation);
        below it is verified (AddOffsetsToTxn first). A fenced epoch is INVALID_PRODUCER_EPOCH
        (TxnOffsetCommit has no PRODUCER_FENCED), a missing AddOffsetsToTxn TRANSACTION_ABORTABLE
        from v4, INVALID_TXN_STATE before; a transaction being ended CONCURRENT_TRANSACTIONS (the
        client retries it)."""
        partition = offsets_partition(group_id)
        if version >= 5:
            error = self.add_partitions(transactional_id, producer_id, producer_epoch, [partition], 2)
        elif not self.verification:
            return ErrorCode.none
        else:
            error, by_partition = self.verify(transactional_id, producer_id, producer_epoch, [partition])
            if not error:
                error = by_partition[partition]
        if error == ErrorCode.producer_fenced:
            return ErrorCode.invalid_producer_epoch
        if error == ErrorCode.transaction_abortable and version < 4:
            return ErrorCode.invalid_txn_state
        return error

    async def end_txn(self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool) -> ErrorCode:
        """EndTxn v0-v4 (transactions version 0/1)."""
        error, transition = self.state.end_txn(
            transactional_id, producer_id, producer_epoch, commit, self.clock.now_ms())
        if transition is None:
            return error
        return ErrorCode.none if await self._prepare(transition) else ErrorCode.not_coordinator

    async def end_txn_v2(self, transactional_id: str, producer_id: int, producer_epoch: int,
                         commit: bool) -> tuple[ErrorCode, int, int]:
        """EndTxn v5 (transactions version 2): (error, the producer id and epoch to go on with; -1,
        -1 with an error). The end bumps the epoch; see minibroker.transactions.state."""
        try:
            result = self.state.end_txn_v2(transactional_id, producer_id, producer_epoch, commit,
                                           self.clock.now_ms(), self.allocate)
        except OSError as exc:  # the next block of producer ids could not be recorded
            log.error("allocating a producer id failed: %s", storage_error_message(exc))
            return ErrorCode.not_coordinator, -1, -1
        if result.transition is not None:
            if not await self._prepare(result.transition):
                return ErrorCode.not_coordinator, -1, -1
            if result.transition.next_producer_id >= 0:
                log.info("transactional id %r: producer id %d reached epoch %d; producer id %d follows it",
                         transactional_id, result.transition.producer_id, result.transition.producer_epoch,
                         result.transition.next_producer_id)
        return result.error, result.producer_id, result.producer_epoch

    async def _prepare(self, transition: TxnMetadata) -> bool:
        """Write a PrepareCommit/PrepareAbort, then its markers and its completion (False: the
        Prepare could not be written, nothing changed)."""
        if not self._write(transition):
            return False
        await self._complete(transition)
        return True

    def describe(self, transactional_id: str) -> TxnMetadata | None:
        return self.state.txns.get(transactional_id)

    def list(self, states: Iterable[str] = (), producer_ids: Iterable[int] = (), duration_ms: int = -1,
             pattern: str | None = None) -> tuple[list[str], list[TxnMetadata]]:
        return self.state.list(states, producer_ids, duration_ms, pattern, self.clock.now_ms())

    # -- markers ----------------------------------------------------------------------------------

    async def _complete(self, txn: TxnMetadata) -> bool:
        """Write the markers of a prepared transaction, then its CompleteCommit/CompleteAbort; False
        when a marker or the record could not be written (the timer task tries again)."""
        commit = txn.state is TxnState.PREPARE_COMMIT
        partitions = sorted(txn.partitions)
        if partitions:
            if self.markers is None:
                log.error("transactional id %r: no marker writer; the transaction stays %s",
                          txn.transactional_id, txn.state.kafka_name)
                return False
            try:
                answer: Any = self.markers(txn.producer_id, txn.producer_epoch, commit, COORDINATOR_EPOCH, partitions)
                if inspect.isawaitable(answer):
                    answer = await answer
            except OSError as exc:
                log.error("transactional id %r: writing the markers failed: %s", txn.transactional_id,
                          storage_error_message(exc))
                return False
            errors: dict[TopicPartition, ErrorCode] = answer
            failed = {tp: code for tp, code in errors.items()
                      if code not in (ErrorCode.none, ErrorCode.unknown_topic_or_partition)}
            if self.groups is not None and any(tp[0] == OFFSETS_TOPIC and not errors.get(tp) for tp in partitions):
                self.groups.complete_transaction(txn.producer_id, commit)
            if failed:
                log.warning("transactional id %r: markers not written to %s; retrying",
                            txn.transactional_id, ", ".join(f"{t}-{p} ({code.name})" for (t, p), code in failed.items()))
                current = self.state.txns.get(txn.transactional_id)
                if current is not None and current.state is txn.state:
                    # Only the partitions still owed a marker are kept (in memory: a restart
                    # writes them all again, which the log takes as a no-op where they are in).
                    self.state.apply(current.but(partitions=frozenset(failed)))
                return False
        current = self.state.txns.get(txn.transactional_id)
        if current is None or current.state is not txn.state or current.producer_epoch != txn.producer_epoch:
            # Completed meanwhile by another task writing the same markers (the client's EndTxn and
            # the timer's retry of owed markers): nothing is left to do.
            return current is not None and current.state not in PREPARED
        return self._write(self.state.complete(current, self.clock.now_ms()))

    # -- time -------------------------------------------------------------------------------------

    async def abort_timed_out(self) -> int:
        """Abort every Ongoing transaction past its timeout (fencing its producer); returns how many."""
        aborted = 0
        now_ms = self.clock.now_ms()
        for tid, producer_id in [(tid, self.state.txns[tid].producer_id) for tid in self.state.timed_out(now_ms)]:
            # Each abort awaits its markers, meanwhile the next transactions may change (ended, a
            # partition added, a new transaction): the abort is built from the metadata as it is
            # now, as Kafka re-reads it under its lock, never from the scan's copy.
            txn = self.state.fence_timed_out(tid, producer_id, self.clock.now_ms())
            if txn is None:
                continue
            log.info("transactional id %r: transaction of producer id %d open longer than its timeout of "
                     "%d ms; aborting it and fencing epoch %d", tid, txn.producer_id, txn.timeout_ms,
                     self.state.txns[tid].producer_epoch)
            if self._write(txn):
                aborted += 1
                self.timed_out_aborts += 1
                await self._complete(txn)
        return aborted

    async def complete_prepared(self) -> int:
        """Write the markers still owed (after a failure or a restart); returns how many completed."""
        done = 0
        for txn in self.state.prepared():
            if await self._complete(txn):
                done += 1
        return done

    def expire_ids(self) -> int:
        expired = self.state.expired(self.clock.now_ms())
        if not expired:
            return 0
        try:
            self.store.delete(expired, self.clock.now_ms())
        except OSError as exc:
            log.error("%s: expiring transactional ids failed: %s", TOPIC, storage_error_message(exc))
            return 0
        for tid in expired:
            self.state.remove(tid)
        log.info("expired %d transactional id(s) idle for transactional.id.expiration.ms", len(expired))
        return len(expired)

    async def run(self) -> None:
        """The timer task: prepared transactions completed at once (a restart's), then the timeout
        check every abort interval and the expiry check every expiration interval."""
        await self.complete_prepared()
        next_expiry = self.clock.monotonic() + self.expiration_interval_ms / 1000
        while True:
            await self.clock.sleep(self.abort_interval_ms / 1000)
            await self.abort_timed_out()
            await self.complete_prepared()
            if self.clock.monotonic() >= next_expiry:
                next_expiry = self.clock.monotonic() + self.expiration_interval_ms / 1000
                self.expire_ids()


def offsets_partition(group_id: str) -> TopicPartition:
    """The `__consumer_offsets` partition of a group: there is one here (Kafka hashes the group id
    over offsets.topic.num.partitions)."""
    return OFFSETS_TOPIC, 0
