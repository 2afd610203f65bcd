"""Transactions: InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, TxnOffsetCommit, EndTxn,
DescribeTransactions, ListTransactions, WriteTxnMarkers; markers, LSO and read_committed fetches."""

from __future__ import annotations

import time

from tests.conformance.corpus import create_topic, fetch, find_coordinator, init_producer_id, produce, read_all
from tests.conformance.corpus.groups import join, sync
from tests.support.batches import make_batch
from tests.support.conformance import Run, scenario


def txn_batch(values, pid, epoch, seq):
    return make_batch([(None, v.encode()) for v in values], producer_id=pid, producer_epoch=epoch,
                      base_sequence=seq, transactional=True)


def add_partitions(run: Run, txn: str, pid: int, epoch: int, topic: str, partitions=(0,), *, version: int = 3,
                   label: str | None = None):
    if version >= 4:
        return run.call(24, version, {"transactions": [{"transactional_id": txn, "producer_id": pid,
                                                        "producer_epoch": epoch, "verify_only": False,
                                                        "topics": [{"name": topic, "partitions": list(partitions)}]}]},
                        label=label)
    return run.call(24, version, {"v3_and_below_transactional_id": txn, "v3_and_below_producer_id": pid,
                                  "v3_and_below_producer_epoch": epoch,
                                  "v3_and_below_topics": [{"name": topic, "partitions": list(partitions)}]},
                    label=label)


def end_txn(run: Run, txn: str, pid: int, epoch: int, commit: bool, *, version: int = 3, label: str | None = None,
            record: bool = True):
    """EndTxn, retried while the coordinator answers CONCURRENT_TRANSACTIONS (the previous
    transaction's markers still being written), as clients retry it."""
    body = {"transactional_id": txn, "producer_id": pid, "producer_epoch": epoch, "committed": commit}

    def ask():
        response = run.call(26, version, body, record=False)
        return None if response.error_code == 51 else response

    response = run.wait_until(ask, timeout=30, interval=0.05)
    if record:
        run.record(label or f"EndTxn v{version}", response)
    return response


def describe_txn(run: Run, txn: str, label: str):
    run.call(65, 0, {"transactional_ids": [txn]}, label=label, drop=("transaction_start_time_ms",))


def settle(run: Run, txn: str):
    """Until the transaction's markers are written (DescribeTransactions leaves PrepareCommit/Abort)."""
    def done():
        response = run.call(65, 0, {"transactional_ids": [txn]}, record=False)
        states = getattr(response, "transaction_states", None)
        return states is None or states[0].transaction_state not in ("PrepareCommit", "PrepareAbort")

    run.wait_until(done)


@scenario("transactions/commit-and-abort", apis=(22, 24, 26, 0, 1, 2, 65, 66))
def _(run: Run) -> None:
    """A transactional producer at librdkafka's versions: init, add a partition, produce, LSO below
    the open transaction, commit (COMMIT marker), a second transaction aborted (ABORT marker,
    aborted_transactions in a read_committed fetch), Describe/ListTransactions along the way, then
    their errors: an unknown state filter, an unknown transactional id."""
    topic, txn = run.name("t"), run.name("txn")
    create_topic(run, topic)
    find_coordinator(run, txn, 1)
    init = init_producer_id(run, txn, version=4)
    pid, epoch = init.producer_id, init.producer_epoch
    describe_txn(run, txn, "empty")
    add_partitions(run, txn, pid, epoch, topic)
    produce(run, topic, txn_batch(["t1a", "t1b"], pid, epoch, 0), transactional_id=txn)
    describe_txn(run, txn, "ongoing")
    run.call(66, 1, {"state_filters": ["Ongoing"], "producer_id_filters": [pid], "duration_filter": -1},
             label="ListTransactions ongoing")
    fetch(run, topic, isolation_level=1, label="read_committed during the transaction")
    run.call(2, 7, {"replica_id": -1, "isolation_level": 1, "topics": [
        {"name": topic, "partitions": [{"partition_index": 0, "timestamp": -1}]}]}, label="latest read_committed")
    end_txn(run, txn, pid, epoch, True, label="commit")
    settle(run, txn)
    describe_txn(run, txn, "after commit")
    add_partitions(run, txn, pid, epoch, topic, label="second transaction")
    produce(run, topic, txn_batch(["t2"], pid, epoch, 2), transactional_id=txn)
    end_txn(run, txn, pid, epoch, False, label="abort")
    settle(run, txn)
    describe_txn(run, txn, "after abort")
    read_all(run, topic, isolation_level=1)
    read_all(run, topic, isolation_level=0)
    run.call(66, 0, {"state_filters": ["CompleteAbort"], "producer_id_filters": [pid]}, label="ListTransactions v0")
    run.call(66, 1, {"state_filters": ["NoSuchState", "CompleteAbort"], "producer_id_filters": [pid],
                     "duration_filter": -1}, label="ListTransactions with an unknown state")
    run.call(65, 0, {"transactional_ids": [run.name("unknown-txn")]}, label="DescribeTransactions of an unknown id")


@scenario("transactions/invalid-transitions", apis=(22, 24, 26, 25, 0))
def _(run: Run) -> None:
    """Transaction errors: EndTxn with no transaction (INVALID_TXN_STATE), a wrong producer id
    (INVALID_PRODUCER_ID_MAPPING), a stale epoch after a second InitProducerId fences the first
    (PRODUCER_FENCED / INVALID_PRODUCER_EPOCH) on EndTxn, AddPartitionsToTxn and Produce; an unknown
    transactional id; a transactional batch to a partition not added; an invalid timeout."""
    topic, txn = run.name("t"), run.name("txn")
    create_topic(run, topic)
    find_coordinator(run, txn, 1)
    first = init_producer_id(run, txn, version=4)
    pid, epoch = first.producer_id, first.producer_epoch
    end_txn(run, txn, pid, epoch, True, label="commit with no transaction")
    end_txn(run, txn, pid + 1000, epoch, True, label="wrong producer id")
    add_partitions(run, txn, pid + 1000, epoch, topic, label="add with a wrong producer id")
    produce(run, topic, txn_batch(["not added"], pid, epoch, 0), transactional_id=txn, label="produce, partition not added")
    add_partitions(run, txn, pid, epoch, topic, label="add")
    produce(run, topic, txn_batch(["a"], pid, epoch, 0), transactional_id=txn)
    second = init_producer_id(run, txn, version=4, label="second InitProducerId (fences the first)")
    add_partitions(run, txn, pid, epoch, topic, label="fenced producer adds")
    end_txn(run, txn, pid, epoch, True, label="fenced producer commits")
    produce(run, topic, txn_batch(["fenced"], pid, epoch, 1), transactional_id=txn, label="fenced producer produces")
    run.call(25, 3, {"transactional_id": txn, "producer_id": pid, "producer_epoch": epoch, "group_id": run.name("g")},
             label="fenced AddOffsetsToTxn")
    end_txn(run, run.name("unknown"), pid, epoch, True, label="unknown transactional id")
    end_txn(run, txn, second.producer_id, second.producer_epoch, False, label="abort with no transaction (new epoch)")
    init_producer_id(run, run.name("txn-timeout"), version=4, timeout_ms=3_600_000, label="timeout over the maximum")
    init_producer_id(run, run.name("txn-empty"), version=0, label="InitProducerId v0 (aiokafka)")
    run.call(22, 4, {"transactional_id": "", "transaction_timeout": 60000, "producer_id": -1, "producer_epoch": -1},
             label="empty transactional id")


@scenario("transactions/offsets", apis=(25, 28, 26, 9))
def _(run: Run) -> None:
    """Offsets in a transaction: AddOffsetsToTxn, TxnOffsetCommit v0 (aiokafka's, no member id) while
    the group has an active member, v3 with the member's generation (librdkafka), v3 with an unknown
    member and a stale generation; commit; OffsetFetch with require_stable."""
    topic, txn, group = run.name("t"), run.name("txn"), run.name("g")
    create_topic(run, topic)
    find_coordinator(run, txn, 1)
    find_coordinator(run, group)
    member = join(run, group, topic)
    sync(run, group, member, topic)
    init = init_producer_id(run, txn, version=4)
    pid, epoch = init.producer_id, init.producer_epoch
    run.call(25, 3, {"transactional_id": txn, "producer_id": pid, "producer_epoch": epoch, "group_id": group})

    def commit(version, offset, label, **fields):
        body = {"transactional_id": txn, "group_id": group, "producer_id": pid, "producer_epoch": epoch,
                "generation_id": -1, "member_id": "", "group_instance_id": None,
                "topics": [{"name": topic, "partitions": [{"partition_index": 0, "committed_offset": offset,
                                                           "committed_metadata": ""}]}], **fields}
        run.call(28, version, body, label=label)

    commit(0, 1, "v0 without member id, group has a member")
    commit(3, 2, "v3 with the member's generation", generation_id=member.generation_id, member_id=member.member_id)
    commit(3, 3, "v3 unknown member", generation_id=member.generation_id, member_id="nobody")
    commit(3, 4, "v3 stale generation", generation_id=member.generation_id + 5, member_id=member.member_id)
    run.call(9, 8, {"groups": [{"group_id": group, "topics": None}], "require_stable": True},
             label="require_stable with offsets pending")
    run.call(9, 8, {"groups": [{"group_id": group, "topics": [{"name": topic, "partition_indexes": [0]}]}],
                    "require_stable": True}, label="require_stable, the pending partition named")
    end_txn(run, txn, pid, epoch, True, label="commit")
    settle(run, txn)
    time.sleep(0.1)
    run.call(9, 8, {"groups": [{"group_id": group, "topics": None}], "require_stable": True}, label="after commit")


@scenario("transactions/write-txn-markers", apis=(27,))
def _(run: Run) -> None:
    """WriteTxnMarkers, the coordinator's request to partition leaders: a marker for a producer with
    no transaction on the partition, and for an unknown partition."""
    topic = run.name("t")
    create_topic(run, topic)
    run.call(27, 1, {"markers": [{"producer_id": 4242, "producer_epoch": 0, "transaction_result": True,
                                  "topics": [{"name": topic, "partition_indexes": [0, 5]}], "coordinator_epoch": 0}]})
