"""The transaction coordinator's decisions, without I/O or a clock (Kafka's TransactionCoordinator and
TransactionMetadata, KIP-98 with KIP-360/KIP-588 epoch handling, transaction version 1: the
protocol a client uses while the broker does not finalize `transaction.version` 2).

Every request method takes `now_ms` (wall-clock milliseconds, what `__transaction_state` stores) and
answers an error code and, when the request changes a transactional id's state, the new
`TxnMetadata` (a `Transition`). Nothing here changes until the shell has written the transition to
`__transaction_state` and calls `apply`: what a client is told is on disk first, as Kafka answers
only once its append is replicated. Kafka's "pending state" (a transition written but not yet
acknowledged) has no counterpart: the shell's appends are synchronous, and the one long transition,
the markers of a PrepareCommit/PrepareAbort, is a state of its own that requests are answered
CONCURRENT_TRANSACTIONS in until it completes.

States (Kafka's TransactionState): Empty -> Ongoing (AddPartitionsToTxn / AddOffsetsToTxn) ->
PrepareCommit/PrepareAbort (EndTxn; the markers go to every partition) -> CompleteCommit/CompleteAbort
-> Ongoing (the next transaction) or Empty (InitProducerId). InitProducerId on an Ongoing transaction
fences it: the epoch is bumped, the transaction aborted with the new epoch, and the request answered
CONCURRENT_TRANSACTIONS (the client retries and gets the epoch bumped once more). A transaction
Ongoing longer than its timeout is aborted the same way (the epoch bump fences the producer).

Epochs (TransactionMetadata.prepareIncrementProducerEpoch): an InitProducerId without a producer id
bumps the epoch; with one (v3+, KIP-360) it must name the current producer id and its current epoch
(bumped) or the epoch before the last bump (a retry whose answer was lost: the current epoch is
answered again); anything else is PRODUCER_FENCED. An epoch at 32766 or more is exhausted: the next
InitProducerId hands out a fresh producer id at epoch 0 (KIP-588), remembering the old one as the
previous producer id, which a retry may still name.

Transactions version 2 (KIP-890 part 2: EndTxn v5, Kafka's endTransaction for a client whose
`clientTransactionVersion` supports the epoch bump): every end bumps the epoch, and the markers are
written at the bumped epoch, so a late batch of the ended transaction is fenced by the partition's
producer state. The answer carries the producer id and epoch the client goes on with. A retry is
told apart from the next end by its epoch: one below the current epoch (the bump it did not hear of)
is a retry, answered NONE with the current id and epoch when it asks for what was done (an abort
after CompleteAbort, a commit after CompleteCommit), INVALID_TXN_STATE otherwise. An abort with
nothing added (Empty, CompleteCommit, CompleteAbort) still bumps the epoch. At an exhausted epoch
(32766) the end allocates the producer id that follows (`next_producer_id`, kept in the prepared
record): the markers go out at 32767 under the old id, and the completed transaction hands over the
new id at epoch 0, which is what the client is answered; a retry naming the old id at 32766 is
answered the new one.
"""

from __future__ import annotations

import dataclasses
from minibroker.regex import compile_client_regex
from dataclasses import dataclass, field
from typing import Callable, Iterable

from minibroker.protocol.errors import ErrorCode
from minibroker.storage.transaction_records import NO_PRODUCER_EPOCH, NO_PRODUCER_ID, TxnRecord, TxnState

__all__ = ["EndResult", "TxnConfig", "TxnMetadata", "TransactionStateMachine", "TopicPartition", "TxnState", "is_epoch_exhausted"]

TopicPartition = tuple[str, int]
MAX_EPOCH = 32767

# The states in which a transactional id may expire (Kafka's isExpirationAllowed).
EXPIRABLE = (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)
PREPARED = (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)


def is_epoch_exhausted(epoch: int) -> bool:
    """Kafka keeps the last epoch for fencing: an epoch of 32766 or more is not bumped again."""
    return epoch >= MAX_EPOCH - 1


@dataclass(frozen=True)
class TxnConfig:
    max_timeout_ms: int = 900_000  # transaction.max.timeout.ms
    id_expiration_ms: int = 604_800_000  # transactional.id.expiration.ms


@dataclass(frozen=True)
class TxnMetadata:
    """One transactional id's state (Kafka's TransactionMetadata)."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: frozenset[TopicPartition] = field(default_factory=frozenset)
    start_ms: int = -1
    last_update_ms: int = -1
    previous_producer_id: int = NO_PRODUCER_ID
    last_producer_epoch: int = NO_PRODUCER_EPOCH  # the epoch before the last bump; memory only
    # Transactions version 2: the producer id a prepared transaction at an exhausted epoch hands over.
    next_producer_id: int = NO_PRODUCER_ID
    client_transaction_version: int = 0  # of the request that made this state (Kafka's TransactionVersion)

    def record(self) -> TxnRecord:
        return TxnRecord(self.producer_id, self.producer_epoch, self.timeout_ms, self.state,
                         self.partitions, self.last_update_ms, self.start_ms,
                         previous_producer_id=self.previous_producer_id, next_producer_id=self.next_producer_id,
                         client_transaction_version=self.client_transaction_version)

    @classmethod
    def from_record(cls, transactional_id: str, record: TxnRecord) -> TxnMetadata:
        return cls(transactional_id, record.producer_id, record.producer_epoch, record.timeout_ms,
                   record.state, record.partitions, record.start_ms, record.last_update_ms,
                   record.previous_producer_id, next_producer_id=record.next_producer_id,
                   client_transaction_version=record.client_transaction_version)

    def but(self, **changes: object) -> TxnMetadata:
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]


@dataclass(frozen=True)
class EndResult:
    """What an EndTxn of transactions version 2 comes to: the error, the Prepare transition to write
    (None: nothing to write), and the producer id and epoch the response carries."""

    error: ErrorCode
    transition: TxnMetadata | None = None
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH


@dataclass(frozen=True)
class InitResult:
    error: ErrorCode
    producer_id: int = -1
    producer_epoch: int = -1
    transition: TxnMetadata | None = None  # to write (and apply) before answering
    # Set when an Ongoing transaction is fenced: the transition is its PrepareAbort, whose markers
    # the shell writes; the answer is CONCURRENT_TRANSACTIONS all the same.
    aborts: bool = False


class TransactionStateMachine:
    """The coordinator's state: `txns`, one TxnMetadata per transactional id."""

    def __init__(self, config: TxnConfig | None = None) -> None:
        self.config = config or TxnConfig()
        self.txns: dict[str, TxnMetadata] = {}

    # -- applying what was written ----------------------------------------------------------------

    def apply(self, metadata: TxnMetadata) -> None:
        self.txns[metadata.transactional_id] = metadata

    def remove(self, transactional_id: str) -> None:
        self.txns.pop(transactional_id, None)

    def load(self, transactional_id: str, record: TxnRecord | None) -> None:
        """Replay one `__transaction_state` record (None: a tombstone)."""
        if record is None:
            self.txns.pop(transactional_id, None)
        else:
            self.txns[transactional_id] = TxnMetadata.from_record(transactional_id, record)

    # -- InitProducerId ---------------------------------------------------------------------------

    def init_producer_id(self, transactional_id: str, timeout_ms: int, expected_pid: int, expected_epoch: int,
                         now_ms: int, allocate: Callable[[], int]) -> InitResult:
        """Kafka's handleInitProducerId for a transactional id. `allocate` hands out a fresh producer
        id (called only when one is needed). PRODUCER_FENCED is answered as such: the handler maps
        it to INVALID_PRODUCER_EPOCH for versions before 4."""
        if not transactional_id:
            return InitResult(ErrorCode.invalid_request)
        if not 0 < timeout_ms <= self.config.max_timeout_ms:
            return InitResult(ErrorCode.invalid_transaction_timeout)
        txn = self.txns.get(transactional_id)
        if txn is None:
            txn = TxnMetadata(transactional_id, allocate(), NO_PRODUCER_EPOCH, timeout_ms, TxnState.EMPTY,
                              last_update_ms=now_ms)
        if expected_pid >= 0 and not (
            txn.producer_epoch == NO_PRODUCER_EPOCH
            or expected_pid == txn.producer_id
            or (expected_pid == txn.previous_producer_id and is_epoch_exhausted(expected_epoch))
        ):
            return InitResult(ErrorCode.producer_fenced)
        if txn.state in PREPARED:
            return InitResult(ErrorCode.concurrent_transactions)
        if txn.state is TxnState.ONGOING:
            # Fence the producer and abort its transaction; the client retries (Kafka never returns
            # the fencing epoch: the retry bumps once more, or rotates an exhausted producer id).
            return InitResult(ErrorCode.concurrent_transactions, transition=self._fence_and_abort(txn, now_ms),
                              aborts=True)
        if txn.state not in EXPIRABLE:
            return InitResult(ErrorCode.invalid_txn_state)
        if expected_pid >= 0 and expected_pid == txn.previous_producer_id and expected_pid != txn.producer_id:
            # A retry of the InitProducerId that rotated the producer id (its answer was lost).
            return InitResult(ErrorCode.none, txn.producer_id, txn.producer_epoch)
        if is_epoch_exhausted(txn.producer_epoch) and (expected_pid < 0 or expected_epoch == txn.producer_epoch):
            new = txn.but(producer_id=allocate(), previous_producer_id=txn.producer_id, producer_epoch=0,
                          last_producer_epoch=NO_PRODUCER_EPOCH)
        elif expected_pid < 0 or NO_PRODUCER_EPOCH in (expected_epoch, txn.producer_epoch) \
                or expected_epoch == txn.producer_epoch:
            # A fresh id (epoch -1) takes any expected epoch, as Kafka's new TransactionMetadata.
            new = txn.but(producer_epoch=txn.producer_epoch + 1,
                          last_producer_epoch=NO_PRODUCER_EPOCH if expected_pid < 0 else txn.producer_epoch)
        elif expected_epoch == txn.last_producer_epoch:
            return InitResult(ErrorCode.none, txn.producer_id, txn.producer_epoch)  # a retry: no bump
        else:
            return InitResult(ErrorCode.producer_fenced)
        new = new.but(state=TxnState.EMPTY, partitions=frozenset(), timeout_ms=timeout_ms, start_ms=-1,
                      last_update_ms=now_ms)
        return InitResult(ErrorCode.none, new.producer_id, new.producer_epoch, new)

    def _fence_and_abort(self, txn: TxnMetadata, now_ms: int) -> TxnMetadata:
        """Kafka's prepareFenceProducerEpoch, then the abort: PrepareAbort at the epoch bumped once
        (under either transaction version; 32766 becomes 32767, the epoch kept for fencing, which
        only a new producer id follows), the previous epoch forgotten (a retry naming it is fenced)."""
        epoch = txn.producer_epoch if txn.producer_epoch >= MAX_EPOCH else txn.producer_epoch + 1
        return txn.but(producer_epoch=epoch, last_producer_epoch=NO_PRODUCER_EPOCH,
                       state=TxnState.PREPARE_ABORT, last_update_ms=now_ms, next_producer_id=NO_PRODUCER_ID)

    # -- AddPartitionsToTxn / AddOffsetsToTxn -----------------------------------------------------

    def _check_producer(self, transactional_id: str, producer_id: int, epoch: int) -> tuple[ErrorCode, TxnMetadata | None]:
        if not transactional_id:
            return ErrorCode.invalid_request, None
        txn = self.txns.get(transactional_id)
        if txn is None or txn.producer_id != producer_id:
            return ErrorCode.invalid_producer_id_mapping, None
        if txn.producer_epoch != epoch:
            return ErrorCode.producer_fenced, None
        return ErrorCode.none, txn

    def add_partitions(self, transactional_id: str, producer_id: int, epoch: int,
                       partitions: Iterable[TopicPartition], now_ms: int,
                       client_transaction_version: int = 0) -> tuple[ErrorCode, TxnMetadata | None]:
        """Kafka's handleAddPartitionsToTransaction: NONE and the Ongoing transition (None when every
        partition is in the transaction already), or the error for all the partitions.
        `client_transaction_version`: 2 for the adds of transactions version 2 (a Produce v12+ batch,
        a TxnOffsetCommit v5, a broker's AddPartitionsToTxn v4+ that is not verify-only)."""
        error, txn = self._check_producer(transactional_id, producer_id, epoch)
        if txn is None:
            return error, None
        if txn.state in PREPARED:
            return ErrorCode.concurrent_transactions, None
        if txn.state not in (TxnState.ONGOING, *EXPIRABLE):
            return ErrorCode.invalid_txn_state, None
        wanted = frozenset(partitions)
        if txn.state is TxnState.ONGOING and wanted <= txn.partitions:
            return ErrorCode.none, None
        starting = txn.state is not TxnState.ONGOING
        return ErrorCode.none, txn.but(
            state=TxnState.ONGOING,
            partitions=(frozenset() if starting else txn.partitions) | wanted,
            start_ms=now_ms if starting else txn.start_ms,
            last_update_ms=now_ms,
            client_transaction_version=client_transaction_version,
        )

    def verify(self, transactional_id: str, producer_id: int, epoch: int,
               partitions: Iterable[TopicPartition]) -> tuple[ErrorCode, dict[TopicPartition, ErrorCode]]:
        """KIP-890 part 1 (Kafka's handleVerifyPartitionsInTransaction): is each partition in the
        producer's ongoing transaction? (top-level error, or NONE and TRANSACTION_ABORTABLE per
        partition not in it; callers map the codes for the versions they answer)."""
        error, txn = self._check_producer(transactional_id, producer_id, epoch)
        if txn is None:
            return error, {}
        if txn.state in PREPARED:
            return ErrorCode.concurrent_transactions, {}
        inside = txn.state is TxnState.ONGOING
        return ErrorCode.none, {
            tp: ErrorCode.none if inside and tp in txn.partitions else ErrorCode.transaction_abortable
            for tp in partitions
        }

    # -- EndTxn -----------------------------------------------------------------------------------

    def end_txn(self, transactional_id: str, producer_id: int, epoch: int, commit: bool,
                now_ms: int) -> tuple[ErrorCode, TxnMetadata | None]:
        """Kafka's handleEndTransaction from a client of transactions version 0/1 (EndTxn v0-v4):
        NONE and the PrepareCommit/PrepareAbort transition, or NONE alone for a retry of an end
        already complete, or the error."""
        error, txn = self._check_producer(transactional_id, producer_id, epoch)
        if txn is None:
            return error, None
        state = txn.state
        if state is TxnState.ONGOING:
            return ErrorCode.none, txn.but(
                state=TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT, last_update_ms=now_ms,
                client_transaction_version=0, next_producer_id=NO_PRODUCER_ID)
        if state is (TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT):
            return ErrorCode.none, None
        if state is (TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT):
            return ErrorCode.concurrent_transactions, None
        return ErrorCode.invalid_txn_state, None

    def end_txn_v2(self, transactional_id: str, producer_id: int, epoch: int, commit: bool, now_ms: int,
                   allocate: Callable[[], int]) -> EndResult:
        """Kafka's endTransaction for transactions version 2 (EndTxn v5; see the module docstring):
        the error, the PrepareCommit/PrepareAbort to write (None when nothing is), and the producer
        id and epoch to answer (-1, -1 with an error). `allocate` is called at an exhausted epoch."""
        if not transactional_id:
            return EndResult(ErrorCode.invalid_request)
        txn = self.txns.get(transactional_id)
        if txn is None:
            return EndResult(ErrorCode.invalid_producer_id_mapping)
        state = txn.state
        # The client retried an end that rotated its producer id (it never heard of the new one).
        retry_on_overflow = (txn.previous_producer_id == producer_id and epoch == MAX_EPOCH - 1
                             and txn.producer_epoch == 0)
        retry_on_bump = txn.producer_epoch == epoch + 1  # it never heard of the bump
        if state in (TxnState.ONGOING, TxnState.EMPTY):
            valid_epoch = epoch == txn.producer_epoch
        elif state in PREPARED:
            valid_epoch = retry_on_bump
        else:
            valid_epoch = retry_on_bump or retry_on_overflow or epoch == txn.producer_epoch
        is_retry = retry_on_bump or retry_on_overflow
        if txn.producer_id != producer_id and not retry_on_overflow:
            return EndResult(ErrorCode.invalid_producer_id_mapping)
        if not valid_epoch:
            return EndResult(ErrorCode.producer_fenced)
        answered_again = EndResult(ErrorCode.none, None, txn.producer_id, txn.producer_epoch)
        if state is TxnState.ONGOING:
            return self._prepare_v2(txn, commit, False, now_ms, allocate)
        if state is TxnState.COMPLETE_COMMIT:
            if commit:
                return answered_again if is_retry else EndResult(ErrorCode.invalid_txn_state)
            return EndResult(ErrorCode.invalid_txn_state) if is_retry else self._prepare_v2(txn, False, True, now_ms, allocate)
        if state is TxnState.COMPLETE_ABORT:
            if commit:
                return EndResult(ErrorCode.invalid_txn_state)
            return answered_again if is_retry else self._prepare_v2(txn, False, True, now_ms, allocate)
        if state in PREPARED:
            same = state is (TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT)
            return EndResult(ErrorCode.concurrent_transactions if same else ErrorCode.invalid_txn_state)
        if state is TxnState.EMPTY and not commit:
            return self._prepare_v2(txn, False, True, now_ms, allocate)
        return EndResult(ErrorCode.invalid_txn_state)

    @staticmethod
    def _prepare_v2(txn: TxnMetadata, commit: bool, nothing_added: bool, now_ms: int,
                    allocate: Callable[[], int]) -> EndResult:
        """Kafka's prepareAbortOrCommit for transactions version 2: the epoch bumped (never past
        32767), the epoch before it kept as the last epoch, the next producer id allocated when the
        epoch is exhausted. An abort with nothing added starts (and ends) now."""
        next_producer_id = allocate() if is_epoch_exhausted(txn.producer_epoch) else NO_PRODUCER_ID
        bumped = txn.producer_epoch if txn.producer_epoch >= MAX_EPOCH else txn.producer_epoch + 1
        prepared = txn.but(
            state=TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT,
            producer_epoch=bumped, last_producer_epoch=txn.producer_epoch,
            start_ms=now_ms if nothing_added else txn.start_ms, last_update_ms=now_ms,
            next_producer_id=next_producer_id, client_transaction_version=2,
        )
        if next_producer_id != NO_PRODUCER_ID:
            return EndResult(ErrorCode.none, prepared, next_producer_id, 0)
        return EndResult(ErrorCode.none, prepared, txn.producer_id, bumped)

    def complete(self, txn: TxnMetadata, now_ms: int) -> TxnMetadata:
        """The CompleteCommit/CompleteAbort that follows a PrepareCommit/PrepareAbort whose markers
        are all written (the partitions are cleared, as Kafka's prepareComplete clears them). A
        transactions-version-2 end at an exhausted epoch hands over its next producer id at epoch 0
        here, remembering the old id as the previous one."""
        assert txn.state in PREPARED, txn
        completed = txn.but(state=TxnState.COMPLETE_COMMIT if txn.state is TxnState.PREPARE_COMMIT
                            else TxnState.COMPLETE_ABORT, partitions=frozenset(), last_update_ms=now_ms,
                            next_producer_id=NO_PRODUCER_ID)
        if txn.client_transaction_version >= 2 and txn.next_producer_id != NO_PRODUCER_ID:
            completed = completed.but(producer_id=txn.next_producer_id, producer_epoch=0,
                                      previous_producer_id=txn.producer_id)
        return completed

    # -- time -------------------------------------------------------------------------------------

    def timed_out(self, now_ms: int) -> list[str]:
        """Kafka's timedOutTransactions: the transactional ids whose Ongoing transaction is older
        than its timeout. Each is aborted through `fence_timed_out`, which reads it again."""
        return [tid for tid, txn in self.txns.items() if self._is_timed_out(txn, now_ms)]

    def fence_timed_out(self, transactional_id: str, producer_id: int, now_ms: int) -> TxnMetadata | None:
        """Kafka's abortTimedOutTransactions for one id, from its current metadata: the PrepareAbort
        that fences its producer (the epoch bumped, the partitions as they are now), or None when
        the transaction is no longer one to abort (ended, another producer id, a new transaction
        not timed out yet, or being ended: Kafka skips a pending transition)."""
        txn = self.txns.get(transactional_id)
        if txn is None or txn.producer_id != producer_id or not self._is_timed_out(txn, now_ms):
            return None
        return self._fence_and_abort(txn, now_ms)

    @staticmethod
    def _is_timed_out(txn: TxnMetadata, now_ms: int) -> bool:
        return txn.state is TxnState.ONGOING and txn.start_ms + txn.timeout_ms < now_ms

    def prepared(self) -> list[TxnMetadata]:
        """Transactions whose markers are still to be written (after a failure, or a restart)."""
        return [txn for txn in self.txns.values() if txn.state in PREPARED]

    def expired(self, now_ms: int) -> list[str]:
        """Transactional ids idle in Empty/CompleteCommit/CompleteAbort for transactional.id.expiration.ms."""
        return [tid for tid, txn in self.txns.items()
                if txn.state in EXPIRABLE and txn.last_update_ms <= now_ms - self.config.id_expiration_ms]

    def next_timeout_ms(self) -> int | None:
        """When the earliest Ongoing transaction times out (wall-clock ms), None when none is open."""
        deadlines = [txn.start_ms + txn.timeout_ms for txn in self.txns.values() if txn.state is TxnState.ONGOING]
        return min(deadlines) if deadlines else None

    # -- admin ------------------------------------------------------------------------------------

    def list(self, states: Iterable[str] = (), producer_ids: Iterable[int] = (), duration_ms: int = -1,
             pattern: str | None = None, now_ms: int = 0) -> tuple[list[str], list[TxnMetadata]]:
        """ListTransactions: (the state filters no state has, the transactions every filter keeps).
        `duration_ms` >= 0 keeps transactions running longer than that (KIP-994); `pattern` is a
        regular expression the whole transactional id matches (KIP-1152)."""
        names = {state.kafka_name: state for state in TxnState}
        unknown = [name for name in states if name not in names]
        wanted_states = {names[name] for name in states if name in names}
        wanted_pids = set(producer_ids)
        regex = compile_client_regex(pattern) if pattern else None
        if states and not wanted_states:
            return unknown, []
        found = [
            txn for tid, txn in sorted(self.txns.items())
            if (not wanted_states or txn.state in wanted_states)
            and (not wanted_pids or txn.producer_id in wanted_pids)
            and (duration_ms < 0 or (txn.start_ms >= 0 and now_ms - txn.start_ms > duration_ms))
            and (regex is None or regex.fullmatch(tid) is not None)
        ]
        return unknown, found
