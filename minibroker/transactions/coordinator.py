"""The transaction coordinator in the trio shell: what the handlers call (Kafka's TransactionCoordinator
with its TransactionStateManager and TransactionMarkerChannelManager).

Each request reads the broker clock, asks the pure `TransactionStateMachine` (state.py), writes the
transition it answers to `__transaction_state` (storage/transaction_store.py) and only then applies
it and answers: a client is never told of a state a kill -9 could lose. Transitions of one
transactional id are made one at a time (a lock per id: what Kafka's pending state guards). A
failed write changes nothing and is answered as Kafka's appendTransactionToLog maps it: a failed
append (the disk, a replica that no longer leads) NOT_COORDINATOR, an ISR under
min.insync.replicas or one that did not acknowledge in time COORDINATOR_NOT_AVAILABLE; the client
looks the coordinator up again and retries.

Several brokers (`Placement`, given by the broker): the coordinator of every transactional id is
the leader of `__transaction_state` (Kafka hashes ids over its partitions; here the topic has one,
so one broker coordinates them all). A write is answered once the ISR has it (the high watermark
passes it, acks=all as Kafka's appendTransactionToLog appends). Another broker answers
NOT_COORDINATOR; the broker that has just been elected and not yet loaded the partition
COORDINATOR_LOAD_IN_PROGRESS. On election (`become_coordinator`, from the broker's leadership
listener) it replays its replica of the log (TransactionStateManager's load) and completes what
was PrepareCommit/PrepareAbort there, sending their markers again; the broker that lost the
partition forgets its state (`resign`) and stops sending markers. A partition leader verifying a
transactional batch (KIP-890) reaches the coordinator through `Placement.forward` (an
AddPartitionsToTxn in process), wherever it runs. On one broker the placement is the broker itself
and none of this waits.

Ending a transaction (EndTxn, the fencing InitProducerId, the timeout) is Kafka's three steps:
PrepareCommit/PrepareAbort written, then the markers, COMMIT or ABORT control batches, written to
every partition of the transaction by the marker writer (the broker's: a WriteTxnMarkers to the
leader of each partition, in process, through that broker's handler, so the group coordinator of a
`__consumer_offsets` partition commits or drops the transaction's offsets as it writes the marker),
then CompleteCommit/CompleteAbort written. The client is answered once the Prepare record is
written and one attempt at the markers is made (on one broker they are local appends, so a
read_committed consumer sees a committed transaction as soon as its producer has been told). A
partition whose marker is refused (its leader moved: NOT_LEADER_OR_FOLLOWER; a disk fault) keeps
the transaction prepared: the markers still owed are sent again after MARKER_RETRY_BACKOFF_MS,
doubling up to the abort interval (Kafka's TransactionMarkerChannelManager retries them as the
metadata moves); meanwhile requests of the transactional id are answered CONCURRENT_TRANSACTIONS
(the client retries). A marker to a partition that no longer exists is dropped, as Kafka drops it;
one refused as fenced (TRANSACTION_COORDINATOR_FENCED, INVALID_PRODUCER_EPOCH) is not retried
quickly (Kafka stops sending it). The coordinator epoch of every marker is the leader epoch of
`__transaction_state` the coordinator loaded, so a deposed coordinator's late markers are fenced.

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
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, AsyncIterator, Awaitable, Callable, Iterable

import trio

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
from minibroker.storage.errors import InvalidReplicationFactorError, NotLeaderError, storage_error_message
from minibroker.storage.offsets_store import TOPIC as OFFSETS_TOPIC
from minibroker.storage.transaction_store import TOPIC, TransactionStore

if TYPE_CHECKING:
    from minibroker.clock import BrokerClock
    from minibroker.config import BrokerConfig
    from minibroker.storage.log import PartitionLog
    from minibroker.storage.manager import LogManager

__all__ = ["MARKER_RETRY_BACKOFF_MS", "MarkerWriter", "Placement", "TransactionCoordinator"]

log = logging.getLogger(__name__)

COORDINATOR_EPOCH = 0  # the coordinator epoch of the markers of a coordinator without a placement
MARKER_RETRY_BACKOFF_MS = 100  # Kafka's retry.backoff.ms, the first wait before markers are sent again
WRITE_TIMEOUT_MS = 30_000  # Kafka's request.timeout.ms: how long a state write waits for the ISR

# write_txn_markers(producer_id, producer_epoch, commit, coordinator_epoch, partitions) -> error per
# partition (WriteTxnMarkers' semantics), sync or async.
MarkerWriter = Callable[[int, int, bool, int, list[TopicPartition]],
                        "dict[TopicPartition, ErrorCode] | Awaitable[dict[TopicPartition, ErrorCode]]"]

# Marker errors after which the partition needs no marker: it is in, or the partition is gone (Kafka
# drops the markers of a deleted topic), or its log cannot take one (UNSUPPORTED_FOR_MESSAGE_FORMAT).
_MARKER_DONE = (ErrorCode.none, ErrorCode.unknown_topic_or_partition, ErrorCode.unsupported_for_message_format)
# Refused for good by this coordinator's epoch or the producer's: Kafka stops sending (a newer
# coordinator, if any, completes the transaction); retried here only at the abort interval.
_MARKER_FENCED = (ErrorCode.transaction_coordinator_fenced, ErrorCode.invalid_producer_epoch)
# What a produce or a TxnOffsetCommit is told when the coordinator could not be asked: retriable codes.
_COORDINATOR_UNREACHABLE = (ErrorCode.not_coordinator, ErrorCode.coordinator_not_available,
                            ErrorCode.coordinator_load_in_progress, ErrorCode.request_timed_out,
                            ErrorCode.concurrent_transactions)


@dataclass(frozen=True)
class Placement:
    """Where the coordinator's partition of `__transaction_state` lives (the broker's view of the
    cluster). `leadership()`: its (leader, leader epoch), None while the topic does not exist (this
    broker coordinates then, and creates it at its first write). `wait_replicated(offset,
    timeout_ms)`: NONE once the high watermark reaches `offset`, else the produce error (Kafka's
    acks=all append). `in_sync()`: whether the ISR is at least min.insync.replicas.
    `forward(node, transactional_id, producer_id, producer_epoch, partitions, verify_only)`: an
    AddPartitionsToTxn to the coordinator on `node` (top-level error, error per partition)."""

    node_id: int
    leadership: Callable[[], "tuple[int, int] | None"]
    wait_replicated: Callable[[int, int], Awaitable[ErrorCode]]
    in_sync: Callable[[], bool]
    forward: Callable[[int, str, int, int, list[TopicPartition], bool],
                      Awaitable[tuple[ErrorCode, dict[TopicPartition, ErrorCode]]]]


class TransactionCoordinator:
    def __init__(
        self,
        store: TransactionStore,
        *,
        allocate: Callable[[], int],
        clock: BrokerClock,
        markers: MarkerWriter | None = None,
        config: TxnConfig | None = None,
        abort_interval_ms: int = 10_000,
        expiration_interval_ms: int = 3_600_000,
        verification: bool = True,
        transaction_version: int = 2,
        placement: Placement | None = None,
        write_timeout_ms: int = WRITE_TIMEOUT_MS,
    ) -> None:
        self.store = store
        self.state = TransactionStateMachine(config)
        self.allocate = allocate
        self.clock = clock
        self.markers = markers
        self.abort_interval_ms = abort_interval_ms
        self.expiration_interval_ms = expiration_interval_ms
        self.verification = verification  # transaction.partition.verification.enable (KIP-890)
        # The finalized `transaction.version` feature (minibroker.features): from 2 the state is
        # written as TransactionLogValue v1. What a request means follows its own version (EndTxn v5,
        # Produce v12, TxnOffsetCommit v5 are transactions version 2), as in Kafka.
        self.transaction_version = transaction_version
        self.placement = placement
        self.write_timeout_ms = write_timeout_ms
        self.timed_out_aborts = 0  # for metrics and tests
        self._locks: dict[str, trio.Lock] = {}
        self._owed = trio.Event()  # set when markers are owed: the retry task sends them again
        # The leader epoch of __transaction_state whose state is loaded (None: not loaded here).
        self.loaded_epoch: int | None = None
        leadership = placement.leadership() if placement is not None else None
        if placement is None or leadership is None or leadership[0] == placement.node_id:
            for tid, record in store.records.items():
                self.state.load(tid, record)
            self.loaded_epoch = leadership[1] if leadership is not None else None

    @classmethod
    def open(cls, config: BrokerConfig, logs: LogManager, *, allocate: Callable[[], int], clock: BrokerClock,
             markers: MarkerWriter | None = None, transaction_version: int = 2,
             placement: Placement | None = None) -> TransactionCoordinator:
        store = TransactionStore.open(logs, clock.now_ms())
        coordinator = cls(
            store, allocate=allocate, clock=clock, markers=markers,
            config=TxnConfig(config["transaction.max.timeout.ms"], config["transactional.id.expiration.ms"]),
            abort_interval_ms=config["transaction.abort.timed.out.transaction.cleanup.interval.ms"],
            expiration_interval_ms=config["transaction.remove.expired.transaction.cleanup.interval.ms"],
            verification=config["transaction.partition.verification.enable"],
            transaction_version=transaction_version, placement=placement,
        )
        coordinator._log_loaded()
        return coordinator

    def _log_loaded(self) -> None:
        states: dict[str, int] = {}
        for txn in self.state.txns.values():
            states[txn.state.kafka_name] = states.get(txn.state.kafka_name, 0) + 1
        if states:
            log.info("%s: loaded %d transactional id(s): %s", TOPIC, len(self.state.txns),
                     ", ".join(f"{n} {s}" for s, n in sorted(states.items())))

    @property
    def txns(self) -> dict[str, TxnMetadata]:
        return self.state.txns

    # -- coordinating ----------------------------------------------------------------------------

    def status(self) -> ErrorCode:
        """NONE when this broker coordinates the transactional ids (it leads __transaction_state
        and has loaded it, or the topic does not exist yet), NOT_COORDINATOR when another broker
        does, COORDINATOR_LOAD_IN_PROGRESS when it was just elected and has not loaded it yet."""
        if self.placement is None:
            return ErrorCode.none
        leadership = self.placement.leadership()
        if leadership is None:
            return ErrorCode.none
        leader, epoch = leadership
        if leader != self.placement.node_id:
            return ErrorCode.not_coordinator
        if self.loaded_epoch != epoch:
            return ErrorCode.coordinator_load_in_progress
        return ErrorCode.none

    @property
    def coordinator_epoch(self) -> int:
        return self.loaded_epoch if self.loaded_epoch is not None else COORDINATOR_EPOCH

    def become_coordinator(self, leader_epoch: int, plog: PartitionLog | None) -> None:
        """This broker now leads `__transaction_state` in `leader_epoch`: replay its replica of the
        log (Kafka's loadTransactionsForTxnTopicPartition), then complete, in the background, what
        was prepared there (its markers sent again)."""
        if plog is not None:
            self.store.log = plog
        self.store.load()
        self.state.txns.clear()
        for tid, record in self.store.records.items():
            self.state.load(tid, record)
        self.loaded_epoch = leader_epoch
        log.info("%s-0: coordinator in epoch %d: loaded %d transactional id(s), %d prepared", TOPIC,
                 leader_epoch, len(self.state.txns), len(self.state.prepared()))
        if self.state.prepared():
            self._owed.set()

    def resign(self) -> None:
        """Another broker leads `__transaction_state` now: forget the state (Kafka's
        removeTransactionsForTxnTopicPartition); its requests are answered NOT_COORDINATOR and the
        markers still owed are left to the new coordinator."""
        if self.loaded_epoch is None and not self.state.txns:
            return
        log.info("%s-0: no longer the coordinator (was in epoch %s): %d transactional id(s) unloaded", TOPIC,
                 self.loaded_epoch, len(self.state.txns))
        self.loaded_epoch = None
        self.state.txns.clear()

    def coordinator_node(self) -> int | None:
        """The node id of the coordinator (None: this broker, the topic not existing yet; -1: no
        leader up)."""
        if self.placement is None:
            return None
        leadership = self.placement.leadership()
        return None if leadership is None else leadership[0]

    @asynccontextmanager
    async def _exclusive(self, transactional_id: str) -> AsyncIterator[None]:
        """One transition of a transactional id at a time (Kafka's pending state)."""
        lock = self._locks.get(transactional_id)
        if lock is None:
            lock = self._locks[transactional_id] = trio.Lock()
        try:
            async with lock:
                yield
        finally:
            if not lock.locked() and lock.statistics().tasks_waiting == 0 and self._locks.get(transactional_id) is lock:
                del self._locks[transactional_id]

    async def _write(self, txn: TxnMetadata) -> ErrorCode:
        """Persist one transition, wait until the ISR has it, then apply it; an error (nothing
        applied) when the log refused it, this broker does not coordinate, or the ISR did not take
        it (the module docstring)."""
        status = self.status()
        if status:
            return status
        if self.placement is not None and self.store.log is not None and not self.placement.in_sync():
            log.warning("%s: the ISR is smaller than min.insync.replicas: state of %r not written", TOPIC,
                        txn.transactional_id)
            return ErrorCode.coordinator_not_available
        epoch = self.loaded_epoch
        try:
            self.store.write(txn.transactional_id, txn.record(), self.clock.now_ms(),
                             1 if self.transaction_version >= 2 else 0)
        except NotLeaderError:
            return ErrorCode.not_coordinator
        except InvalidReplicationFactorError as exc:
            # transaction.state.log.replication.factor set above the brokers registered: Kafka does
            # not create the topic and answers COORDINATOR_NOT_AVAILABLE until enough brokers are up.
            log.warning("Auto topic creation failed for %s with error 'INVALID_REPLICATION_FACTOR': %s", TOPIC, exc)
            return ErrorCode.coordinator_not_available
        except (OSError, ApiError) as exc:  # ApiError: the topic could not be created (stray data)
            log.error("%s: writing the state of transactional id %r failed: %s", TOPIC, txn.transactional_id,
                      storage_error_message(exc) if isinstance(exc, OSError) else exc)
            return ErrorCode.not_coordinator
        if self.store.log is None:  # created by this write, on brokers this one is not among
            return ErrorCode.not_coordinator
        if self.placement is not None:
            status = self.status()
            if status:  # the write created the topic, led by another broker
                return status
            epoch = self.loaded_epoch if epoch is None else epoch
            code = await self.placement.wait_replicated(self.store.log.log_end_offset, self.write_timeout_ms)
            if code:
                log.warning("%s: the state of %r was not replicated: %s", TOPIC, txn.transactional_id, code.name)
                return ErrorCode.not_coordinator if code == ErrorCode.not_leader_or_follower \
                    else ErrorCode.coordinator_not_available
            if self.loaded_epoch != epoch:  # deposed (or reloaded) meanwhile
                return ErrorCode.not_coordinator
        self.state.apply(txn)
        return ErrorCode.none

    # -- requests ---------------------------------------------------------------------------------

    async def init_producer_id(self, transactional_id: str, timeout_ms: int, producer_id: int = -1,
                               producer_epoch: int = -1) -> tuple[ErrorCode, int, int]:
        """(error, producer id, epoch). PRODUCER_FENCED is left for the handler to map by version."""
        status = self.status()
        if status:
            return status, -1, -1
        async with self._exclusive(transactional_id):
            try:
                result: InitResult = self.state.init_producer_id(
                    transactional_id, timeout_ms, producer_id, producer_epoch, self.clock.now_ms(), self.allocate)
            except OSError as exc:  # the next block of producer ids could not be recorded
                log.error("allocating a producer id failed: %s", storage_error_message(exc))
                return ErrorCode.not_coordinator, -1, -1
            if result.transition is None:
                return result.error, result.producer_id, result.producer_epoch
            code = await self._write(result.transition)
            if code:
                return code, -1, -1
        if result.aborts:
            log.info("transactional id %r: a new producer fenced epoch %d; aborting its open transaction",
                     transactional_id, result.transition.producer_epoch - 1)
            await self._complete(result.transition)
        return result.error, result.producer_id, result.producer_epoch

    async def add_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                             partitions: Iterable[TopicPartition], client_transaction_version: int = 0) -> ErrorCode:
        status = self.status()
        if status:
            return status
        partitions = list(partitions)
        if transactional_id not in self._locks:
            # Nothing of the id is being written: a partition already in its transaction (every
            # batch of a transactions-version-2 producer asks) is answered without the lock.
            error, transition = self.state.add_partitions(
                transactional_id, producer_id, producer_epoch, partitions, self.clock.now_ms(),
                client_transaction_version)
            if transition is None:
                return error
        async with self._exclusive(transactional_id):
            error, transition = self.state.add_partitions(
                transactional_id, producer_id, producer_epoch, partitions, self.clock.now_ms(),
                client_transaction_version)
            if transition is not None:
                code = await self._write(transition)
                if code:
                    return code
        return error

    async def add_offsets(self, transactional_id: str, producer_id: int, producer_epoch: int, group_id: str) -> ErrorCode:
        """AddOffsetsToTxn: the group's offsets partition joins the transaction."""
        return await self.add_partitions(transactional_id, producer_id, producer_epoch, [offsets_partition(group_id)])

    def verify(self, transactional_id: str, producer_id: int, producer_epoch: int,
               partitions: Iterable[TopicPartition]) -> tuple[ErrorCode, dict[TopicPartition, ErrorCode]]:
        status = self.status()
        if status:
            return status, {}
        return self.state.verify(transactional_id, producer_id, producer_epoch, partitions)

    async def add_or_verify(self, transactional_id: str, producer_id: int, producer_epoch: int,
                            partitions: list[TopicPartition], verify_only: bool
                            ) -> tuple[ErrorCode, dict[TopicPartition, ErrorCode]]:
        """A partition leader's question to the coordinator (KIP-890: AddPartitionsToTxn v4+, a
        transactions-version-2 add, or `verify_only`), answered here or by the coordinator's broker
        (`Placement.forward`): (top-level error, error per partition)."""
        node = self.coordinator_node()
        if node is not None and self.placement is not None and node != self.placement.node_id:
            if node < 0:
                return ErrorCode.coordinator_not_available, {}
            return await self.placement.forward(node, transactional_id, producer_id, producer_epoch, partitions,
                                                verify_only)
        if verify_only:
            return self.verify(transactional_id, producer_id, producer_epoch, partitions)
        error = await self.add_partitions(transactional_id, producer_id, producer_epoch, partitions, 2)
        return error, {tp: error for tp in partitions}

    async def verify_produce(self, transactional_id: str | None, producer_id: int, producer_epoch: int, topic: str,
                             partition: int, version: int) -> ErrorCode:
        """KIP-890: a transactional batch is appended only to a partition of the producer's ongoing
        transaction. From Produce v12 (transactions version 2, part 2) the partition is added to the
        transaction here, as Kafka's AddPartitionsToTxnManager does for ADD_PARTITION (a client of
        version 2 sends no AddPartitionsToTxn); below it is only verified (part 1, when
        transaction.partition.verification.enable). Either way the coordinator is asked wherever it
        runs (`add_or_verify`). The codes as Kafka answers Produce (`version`: the request's): a
        fenced epoch INVALID_PRODUCER_EPOCH, a partition not in the transaction
        TRANSACTION_ABORTABLE from v11 and INVALID_TXN_STATE before (KAFKA-16314: KafkaApis hands
        ReplicaManager `genericError` for Produce versions above 10, and AddPartitionsToTxnManager
        maps TRANSACTION_ABORTABLE back to INVALID_TXN_STATE for older clients), a transaction being
        ended, a state that could not be written or a coordinator that could not be reached
        NOT_ENOUGH_REPLICAS (Kafka's conversion of CONCURRENT_TRANSACTIONS and the coordinator
        errors for Produce: a retriable code)."""
        if not transactional_id:
            return ErrorCode.invalid_txn_state
        tp = (topic, partition)
        if version < 12 and not self.verification:
            return ErrorCode.none
        error, by_partition = await self.add_or_verify(transactional_id, producer_id, producer_epoch, [tp],
                                                       version < 12)
        if not error:
            error = by_partition.get(tp, ErrorCode.none)
        if error == ErrorCode.producer_fenced:
            return ErrorCode.invalid_producer_epoch
        if error == ErrorCode.transaction_abortable and version < 11:
            return ErrorCode.invalid_txn_state
        if error in _COORDINATOR_UNREACHABLE:
            return ErrorCode.not_enough_replicas
        return error

    async def verify_offsets(self, transactional_id: str, producer_id: int, producer_epoch: int, group_id: str,
                             version: int) -> ErrorCode:
        """KIP-890 for TxnOffsetCommit: the group's offsets partition must be in the ongoing
        transaction. From v5 (transactions version 2) it is added here (the client sends no
        AddOffsetsToTxn; Kafka's txnOffsetCommitRequestVersionToTransactionSupportedOperation);
        below it is verified (AddOffsetsToTxn first). The group coordinator asks the transaction
        coordinator wherever it runs. A fenced epoch is INVALID_PRODUCER_EPOCH (TxnOffsetCommit has
        no PRODUCER_FENCED), a missing AddOffsetsToTxn TRANSACTION_ABORTABLE from v4,
        INVALID_TXN_STATE before; a transaction being ended CONCURRENT_TRANSACTIONS (the client
        retries it); a transaction coordinator that could not be reached COORDINATOR_NOT_AVAILABLE
        (Kafka's group coordinator maps NOT_ENOUGH_REPLICAS so: the client retries)."""
        partition = offsets_partition(group_id)
        if version < 5 and not self.verification:
            return ErrorCode.none
        error, by_partition = await self.add_or_verify(transactional_id, producer_id, producer_epoch, [partition],
                                                       version < 5)
        if not error:
            error = by_partition.get(partition, ErrorCode.none)
        if error == ErrorCode.producer_fenced:
            return ErrorCode.invalid_producer_epoch
        if error == ErrorCode.transaction_abortable and version < 4:
            return ErrorCode.invalid_txn_state
        if error in _COORDINATOR_UNREACHABLE and error != ErrorCode.concurrent_transactions:
            return ErrorCode.coordinator_not_available
        return error

    async def end_txn(self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool) -> ErrorCode:
        """EndTxn v0-v4 (transactions version 0/1)."""
        status = self.status()
        if status:
            return status
        async with self._exclusive(transactional_id):
            error, transition = self.state.end_txn(
                transactional_id, producer_id, producer_epoch, commit, self.clock.now_ms())
            if transition is None:
                return error
            code = await self._write(transition)
            if code:
                return code
        await self._complete(transition)
        return ErrorCode.none

    async def end_txn_v2(self, transactional_id: str, producer_id: int, producer_epoch: int,
                         commit: bool) -> tuple[ErrorCode, int, int]:
        """EndTxn v5 (transactions version 2): (error, the producer id and epoch to go on with; -1,
        -1 with an error). The end bumps the epoch; see minibroker.transactions.state."""
        status = self.status()
        if status:
            return status, -1, -1
        async with self._exclusive(transactional_id):
            try:
                result = self.state.end_txn_v2(transactional_id, producer_id, producer_epoch, commit,
                                               self.clock.now_ms(), self.allocate)
            except OSError as exc:  # the next block of producer ids could not be recorded
                log.error("allocating a producer id failed: %s", storage_error_message(exc))
                return ErrorCode.not_coordinator, -1, -1
            if result.transition is not None:
                code = await self._write(result.transition)
                if code:
                    return code, -1, -1
        if result.transition is not None:
            await self._complete(result.transition)
            if result.transition.next_producer_id >= 0:
                log.info("transactional id %r: producer id %d reached epoch %d; producer id %d follows it",
                         transactional_id, result.transition.producer_id, result.transition.producer_epoch,
                         result.transition.next_producer_id)
        return result.error, result.producer_id, result.producer_epoch

    def describe(self, transactional_id: str) -> TxnMetadata | None:
        return self.state.txns.get(transactional_id)

    def list(self, states: Iterable[str] = (), producer_ids: Iterable[int] = (), duration_ms: int = -1,
             pattern: str | None = None) -> tuple[list[str], list[TxnMetadata]]:
        return self.state.list(states, producer_ids, duration_ms, pattern, self.clock.now_ms())

    # -- markers ----------------------------------------------------------------------------------

    async def _complete(self, txn: TxnMetadata) -> bool:
        """Write the markers of a prepared transaction, then its CompleteCommit/CompleteAbort; False
        when a marker or the record could not be written (the retry task tries again)."""
        commit = txn.state is TxnState.PREPARE_COMMIT
        partitions = sorted(txn.partitions)
        epoch = self.loaded_epoch
        if partitions:
            if self.markers is None:
                log.error("transactional id %r: no marker writer; the transaction stays %s",
                          txn.transactional_id, txn.state.kafka_name)
                return False
            try:
                answer: Any = self.markers(txn.producer_id, txn.producer_epoch, commit, self.coordinator_epoch,
                                           partitions)
                if inspect.isawaitable(answer):
                    answer = await answer
            except OSError as exc:
                log.error("transactional id %r: writing the markers failed: %s", txn.transactional_id,
                          storage_error_message(exc))
                self._owed.set()
                return False
            errors: dict[TopicPartition, ErrorCode] = answer
            failed = {tp: code for tp, code in errors.items() if code not in _MARKER_DONE}
            if failed:
                log.warning("transactional id %r: markers not written to %s; retrying",
                            txn.transactional_id, ", ".join(f"{t}-{p} ({code.name})" for (t, p), code in failed.items()))
                current = self.state.txns.get(txn.transactional_id)
                if current is not None and current.state is txn.state and self.loaded_epoch == epoch:
                    # Only the partitions still owed a marker are kept (in memory: a restart or a
                    # new coordinator writes them all again, which the log takes as a no-op where
                    # they are in).
                    self.state.apply(current.but(partitions=frozenset(failed) & current.partitions))
                if any(code not in _MARKER_FENCED for code in failed.values()):
                    self._owed.set()
                return False
        async with self._exclusive(txn.transactional_id):
            current = self.state.txns.get(txn.transactional_id)
            if current is None or current.state is not txn.state or current.producer_epoch != txn.producer_epoch \
                    or self.loaded_epoch != epoch:
                # Completed meanwhile by another task writing the same markers (the client's EndTxn and
                # the retry of owed markers), or no longer ours: nothing is left to do.
                return current is not None and current.state not in PREPARED
            if await self._write(self.state.complete(current, self.clock.now_ms())):
                self._owed.set()
                return False
            return True

    # -- time -------------------------------------------------------------------------------------

    async def abort_timed_out(self) -> int:
        """Abort every Ongoing transaction past its timeout (fencing its producer); returns how many."""
        if self.status():
            return 0
        aborted = 0
        now_ms = self.clock.now_ms()
        for tid, producer_id in [(tid, self.state.txns[tid].producer_id) for tid in self.state.timed_out(now_ms)]:
            # Each abort awaits its markers, meanwhile the next transactions may change (ended, a
            # partition added, a new transaction): the abort is built from the metadata as it is
            # now, as Kafka re-reads it under its lock, never from the scan's copy.
            async with self._exclusive(tid):
                txn = self.state.fence_timed_out(tid, producer_id, self.clock.now_ms())
                if txn is None:
                    continue
                log.info("transactional id %r: transaction of producer id %d open longer than its timeout of "
                         "%d ms; aborting it and fencing epoch %d", tid, txn.producer_id, txn.timeout_ms,
                         self.state.txns[tid].producer_epoch)
                if await self._write(txn):
                    continue
            aborted += 1
            self.timed_out_aborts += 1
            await self._complete(txn)
        return aborted

    async def complete_prepared(self) -> int:
        """Write the markers still owed (after a failure, a restart or an election); returns how
        many completed."""
        if self.status():
            return 0
        done = 0
        for txn in self.state.prepared():
            if await self._complete(txn):
                done += 1
        return done

    def expire_ids(self) -> int:
        if self.status():
            return 0
        expired = [tid for tid in self.state.expired(self.clock.now_ms()) if tid not in self._locks]
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
        check every abort interval and the expiry check every expiration interval; beside it the
        retry of owed markers."""
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._retry_markers)
            await self.complete_prepared()
            next_expiry = self.clock.monotonic() + self.expiration_interval_ms / 1000
            while True:
                await self.clock.sleep(self.abort_interval_ms / 1000)
                await self.abort_timed_out()
                await self.complete_prepared()
                if self.clock.monotonic() >= next_expiry:
                    next_expiry = self.clock.monotonic() + self.expiration_interval_ms / 1000
                    self.expire_ids()

    async def _retry_markers(self) -> None:
        """Send the owed markers again, MARKER_RETRY_BACKOFF_MS after a refusal, the wait doubling
        up to the abort interval while they are refused, until none is owed."""
        while True:
            await self._owed.wait()
            backoff = MARKER_RETRY_BACKOFF_MS / 1000
            while True:
                self._owed = trio.Event()
                await self.clock.sleep(backoff)
                await self.complete_prepared()
                if not self._owed.is_set() or self.status():
                    break
                backoff = min(backoff * 2, self.abort_interval_ms / 1000)


def offsets_partition(group_id: str) -> TopicPartition:
    """The `__consumer_offsets` partition of a group: there is one here (Kafka hashes the group id
    over offsets.topic.num.partitions)."""
    return OFFSETS_TOPIC, 0
