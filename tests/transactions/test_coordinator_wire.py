"""The transaction coordinator over the wire, with exact requests (minibroker.admin_client): the flow
InitProducerId -> AddPartitionsToTxn -> Produce -> EndTxn with real markers in the log and a
read_committed Fetch seeing only the committed transaction; KIP-890 part 1 refusing a batch to a
partition not in the transaction; TxnOffsetCommit offsets invisible (and UNSTABLE_OFFSET_COMMIT for
require_stable) until the commit; AddPartitionsToTxn v4+'s batched and verify-only forms; the
version-mapped error codes; DescribeTransactions, ListTransactions and FindCoordinator key type 1;
ApiVersions advertising exactly the versions served."""

from __future__ import annotations

from minibroker.admin_client import AdminClient
from minibroker.metrics_http import render
from tests.support.txn_wire import E_NONE, FENCED, INVALID_EPOCH, INVALID_TXN_STATE, add, create, end, fetch, init, produce


def test_commit_abort_and_read_committed(broker, unique):
    topic, tid = unique("txw"), unique("tid")
    with AdminClient(broker.bootstrap) as c:
        create(c, topic)
        code, pid, epoch = init(c, tid)
        assert (code, epoch) == (E_NONE, 0)
        # KIP-890 part 1: nothing is appended to a partition not in the transaction.
        assert produce(c, tid, topic, 0, pid, 0, 0, [b"early"]) == INVALID_TXN_STATE
        assert add(c, tid, pid, 0, topic, [0, 1]) == {(topic, 0): E_NONE, (topic, 1): E_NONE}
        assert produce(c, tid, topic, 0, pid, 0, 0, [b"c1", b"c2"]) == E_NONE
        p, _ = fetch(c, topic, 0, 1)
        assert (p.last_stable_offset, p.high_watermark) == (0, 2)  # open: nothing is stable
        assert end(c, tid, pid, 0, True) == E_NONE
        assert end(c, tid, pid, 0, True) == E_NONE  # a retry of a finished commit
        assert end(c, tid, pid, 0, False) == INVALID_TXN_STATE
        p, headers = fetch(c, topic, 0, 1)
        assert p.last_stable_offset == 3 and [h.is_control for h in headers] == [False, True]
        # Partition 1 was in the transaction without data: it got a marker too.
        assert [h.is_control for h in fetch(c, topic, 1, 1)[1]] == [True]
        # The next transaction aborts: read_committed gets its records with the aborted list.
        add(c, tid, pid, 0, topic, [0])
        assert produce(c, tid, topic, 0, pid, 0, 2, [b"a1"]) == E_NONE
        assert end(c, tid, pid, 0, False) == E_NONE
        p, headers = fetch(c, topic, 0, 1)
        assert [(a.producer_id, a.first_offset) for a in p.aborted_transactions] == [(pid, 3)]
        assert p.last_stable_offset == 5
        r = c.call(65, {"transactional_ids": [tid, "nobody"]})
        described, missing = r.transaction_states
        assert (described.transaction_state, described.producer_id, described.producer_epoch) == (
            "CompleteAbort", pid, 0)
        assert int(missing.error_code) == 105  # TRANSACTIONAL_ID_NOT_FOUND
        r = c.call(66, {"state_filters": ["CompleteAbort", "Nope"], "producer_id_filters": [pid],
                        "duration_filter": -1, "transactional_id_pattern": None})
        assert list(r.unknown_state_filters) == ["Nope"]
        assert [(s.transactional_id, s.transaction_state) for s in r.transaction_states] == [(tid, "CompleteAbort")]


def test_produce_outside_the_transaction_is_transaction_abortable_from_v11(broker, unique):
    # KAFKA-16314: Produce v11 clients know TRANSACTION_ABORTABLE (120), older ones get
    # INVALID_TXN_STATE (48) for the same refusal; nothing is appended either way. From v12
    # (transactions version 2) the same batch adds its partition to the transaction and is appended.
    topic, tid = unique("txa"), unique("tid")
    with AdminClient(broker.bootstrap) as c:
        create(c, topic, 2)
        _, pid, _ = init(c, tid)
        assert add(c, tid, pid, 0, topic, [1]) == {(topic, 1): E_NONE}
        assert [produce(c, tid, topic, 0, pid, 0, 0, [b"x"], version=v) for v in (3, 9, 10, 11)] == [
            INVALID_TXN_STATE] * 3 + [120]
        assert fetch(c, topic, 0, 0)[1] == []
        assert produce(c, tid, topic, 0, pid, 0, 0, [b"x"], version=12) == E_NONE
        assert broker.broker.transactions.txns[tid].partitions == {(topic, 0), (topic, 1)}
        assert len(fetch(c, topic, 0, 0)[1]) == 1
        assert produce(c, tid, topic, 1, pid, 0, 0, [b"in"], version=11) == E_NONE


def test_fencing_and_version_mapped_codes(broker, unique):
    topic, tid = unique("txf"), unique("tid")
    with AdminClient(broker.bootstrap) as c:
        create(c, topic, 1)
        _, pid, _ = init(c, tid)
        add(c, tid, pid, 0, topic, [0])
        assert produce(c, tid, topic, 0, pid, 0, 0, [b"zombie"]) == E_NONE
        # A new producer with the id: its open transaction is aborted, CONCURRENT_TRANSACTIONS, retry.
        assert init(c, tid)[0] == 51
        code, pid2, epoch2 = init(c, tid)
        assert (code, pid2, epoch2) == (E_NONE, pid, 2)
        p, _ = fetch(c, topic, 0, 1)
        assert [a.producer_id for a in p.aborted_transactions] == [pid] and p.last_stable_offset == 2
        assert end(c, tid, pid, 0, True) == FENCED
        assert end(c, tid, pid, 0, True, version=1) == INVALID_EPOCH
        assert add(c, tid, pid, 0, topic, [0], version=1) == {(topic, 0): INVALID_EPOCH}
        assert produce(c, tid, topic, 0, pid, 0, 1, [b"late"]) == INVALID_EPOCH
        assert init(c, tid, pid=pid, epoch=0, version=4)[0] == FENCED
        assert init(c, tid, pid=pid, epoch=0, version=3)[0] == INVALID_EPOCH
        assert init(c, tid, timeout=900001)[0] == 50  # INVALID_TRANSACTION_TIMEOUT
        assert add(c, tid, pid + 1000, 0, topic, [0])[(topic, 0)] == 49  # INVALID_PRODUCER_ID_MAPPING
        r = c.call(24, {"v3_and_below_transactional_id": tid, "v3_and_below_producer_id": pid2,
                        "v3_and_below_producer_epoch": epoch2,
                        "v3_and_below_topics": [{"name": topic, "partitions": [0]},
                                                {"name": "no-such-topic", "partitions": [0]}]}, version=3)
        codes = {t.name: int(t.results_by_partition[0].partition_error_code) for t in r.results_by_topic_v3_and_below}
        assert codes == {topic: 55, "no-such-topic": 3}  # OPERATION_NOT_ATTEMPTED, UNKNOWN_TOPIC_OR_PARTITION
    metrics = broker.in_broker(render, broker.broker)
    assert 'minibroker_transactional_ids{state="Empty"} 1' in metrics.splitlines()
    assert "minibroker_transactions_timed_out_total 0" in metrics.splitlines()


def test_batched_and_verify_only_add_partitions(broker, unique):
    topic, tid = unique("txv"), unique("tid")
    with AdminClient(broker.bootstrap) as c:
        create(c, topic)
        _, pid, _ = init(c, tid)

        def v4(verify_only, partitions, version=5):
            r = c.call(24, {"transactions": [{"transactional_id": tid, "producer_id": pid, "producer_epoch": 0,
                                              "verify_only": verify_only,
                                              "topics": [{"name": topic, "partitions": partitions}]}]},
                       version=version)
            assert int(r.error_code) == 0
            (result,) = r.results_by_transaction
            return {p.partition_index: int(p.partition_error_code)
                    for t in result.topic_results for p in t.results_by_partition}

        assert v4(True, [0]) == {0: 120}  # TRANSACTION_ABORTABLE: not in the transaction
        assert v4(True, [0], version=4) == {0: INVALID_TXN_STATE}
        assert v4(False, [0]) == {0: E_NONE}
        assert v4(True, [0, 1]) == {0: E_NONE, 1: 120}


def test_txn_offset_commit_is_visible_only_at_commit(broker, unique):
    topic, tid, group = unique("txo"), unique("tid"), unique("group")
    with AdminClient(broker.bootstrap) as c:
        create(c, topic, 1)
        _, pid, _ = init(c, tid)

        def commit_offsets(offset, version=3):
            r = c.call(28, {"transactional_id": tid, "group_id": group, "producer_id": pid, "producer_epoch": 0,
                            "generation_id": -1, "member_id": "", "group_instance_id": None,
                            "topics": [{"name": topic, "partitions": [{"partition_index": 0, "committed_offset": offset,
                                                                        "committed_leader_epoch": -1,
                                                                        "committed_metadata": ""}]}]},
                       version=version)
            return int(r.topics[0].partitions[0].error_code)

        def fetched(require_stable):
            r = c.call(9, {"group_id": group, "topics": [{"name": topic, "partition_indexes": [0]}],
                           "require_stable": require_stable}, version=7)
            p = r.topics[0].partitions[0]
            return int(p.error_code), p.committed_offset

        assert commit_offsets(5) == INVALID_TXN_STATE  # AddOffsetsToTxn first (KIP-890)
        assert commit_offsets(5, version=4) == 120
        r = c.call(25, {"transactional_id": tid, "producer_id": pid, "producer_epoch": 0, "group_id": group})
        assert int(r.error_code) == E_NONE
        assert commit_offsets(5) == E_NONE
        assert fetched(False) == (E_NONE, -1)
        assert fetched(True) == (88, -1)  # UNSTABLE_OFFSET_COMMIT
        assert end(c, tid, pid, 0, True) == E_NONE
        assert fetched(True) == (E_NONE, 5)
        # An aborted transaction's offsets are dropped.
        c.call(25, {"transactional_id": tid, "producer_id": pid, "producer_epoch": 0, "group_id": group})
        assert commit_offsets(9) == E_NONE
        assert end(c, tid, pid, 0, False) == E_NONE
        assert fetched(True) == (E_NONE, 5)


def test_find_coordinator_and_api_versions(broker):
    with AdminClient(broker.bootstrap) as c:
        r = c.call(10, {"key_type": 1, "coordinator_keys": ["a-txn", ""]}, version=4)
        found, empty = r.coordinators
        assert (int(found.error_code), found.port) == (0, broker.port)
        assert int(empty.error_code) == 42  # INVALID_REQUEST
        versions = c.versions  # the client's ApiVersions v0 answer
        assert {key: versions[key] for key in (22, 24, 25, 26, 27, 28, 61, 65, 66)} == {
            22: (0, 6), 24: (0, 5), 25: (0, 4), 26: (0, 5), 27: (1, 2), 28: (0, 5), 61: (0, 0),
            65: (0, 0), 66: (0, 2)}


def txn_commit_offset(c, tid, pid, epoch, group, topic, offset):
    r = c.call(28, {"transactional_id": tid, "group_id": group, "producer_id": pid, "producer_epoch": epoch,
                    "generation_id": -1, "member_id": "", "group_instance_id": None,
                    "topics": [{"name": topic, "partitions": [{"partition_index": 0, "committed_offset": offset,
                                                                "committed_leader_epoch": -1,
                                                                "committed_metadata": ""}]}]}, version=3)
    return int(r.topics[0].partitions[0].error_code)


def offset_fetch(c, group, topic):
    r = c.call(9, {"group_id": group, "topics": [{"name": topic, "partition_indexes": [0]}],
                   "require_stable": True}, version=7)
    p = r.topics[0].partitions[0]
    return int(p.error_code), p.committed_offset


def test_a_fenced_txn_offset_commit_is_refused_without_verification(start_broker, unique):
    # With transaction.partition.verification.enable=false Kafka's group coordinator does not check
    # the producer epoch; the append to __consumer_offsets does (ProducerAppendInfo.checkProducerEpoch):
    # once the fencing's ABORT marker bumped the epoch there, a zombie's offsets are INVALID_PRODUCER_EPOCH,
    # never pending (where the next commit of the same producer id would have committed them).
    topic, tid, group = unique("txz"), unique("tid"), unique("group")
    with start_broker(transaction_partition_verification_enable="false") as broker, \
            AdminClient(broker.bootstrap) as c:
        create(c, topic, 1)
        _, pid, _ = init(c, tid)
        r = c.call(25, {"transactional_id": tid, "producer_id": pid, "producer_epoch": 0, "group_id": group})
        assert int(r.error_code) == E_NONE
        assert txn_commit_offset(c, tid, pid, 0, group, topic, 5) == E_NONE
        assert init(c, tid)[0] == 51  # a new instance: the open transaction is aborted at epoch 1
        assert init(c, tid) == (E_NONE, pid, 2)
        assert txn_commit_offset(c, tid, pid, 0, group, topic, 9) == INVALID_EPOCH  # the zombie
        assert offset_fetch(c, group, topic) == (E_NONE, -1)  # nothing pending
        r = c.call(25, {"transactional_id": tid, "producer_id": pid, "producer_epoch": 2, "group_id": group})
        assert txn_commit_offset(c, tid, pid, 2, group, topic, 7) == E_NONE
        assert end(c, tid, pid, 2, True) == E_NONE
        assert offset_fetch(c, group, topic) == (E_NONE, 7)


def test_pending_offsets_go_with_their_deleted_topic_or_group(start_broker, unique):
    # Kafka: deleting a topic or a group writes offset tombstones, and a tombstone also drops the
    # open transactions' pending offsets of that partition (OffsetMetadataManager.onPartitionsDeleted,
    # deleteAllOffsets, the tombstone's replay; GroupMetadata.removeOffsets in the older coordinator):
    # the transaction's commit does not bring them back, nor does the replay after a restart.
    gone, kept, tid, group, doomed = unique("txd"), unique("txk"), unique("tid"), unique("group"), unique("group")
    with start_broker() as broker, AdminClient(broker.bootstrap) as c:
        create(c, gone, 1)
        create(c, kept, 1)
        _, pid, _ = init(c, tid)
        for g in (group, doomed):
            r = c.call(25, {"transactional_id": tid, "producer_id": pid, "producer_epoch": 0, "group_id": g})
            assert int(r.error_code) == E_NONE
        assert txn_commit_offset(c, tid, pid, 0, group, gone, 5) == E_NONE
        assert txn_commit_offset(c, tid, pid, 0, group, kept, 6) == E_NONE
        assert txn_commit_offset(c, tid, pid, 0, doomed, kept, 7) == E_NONE
        r = c.call(20, {"topics": [{"name": gone, "topic_id": None}], "topic_names": [gone], "timeout": 5000})
        assert int(r.responses[0].error_code) == E_NONE
        r = c.call(42, {"groups_names": [doomed]})
        assert int(r.results[0].error_code) == E_NONE
        assert offset_fetch(c, doomed, kept) == (E_NONE, -1)  # no longer UNSTABLE_OFFSET_COMMIT
        assert offset_fetch(c, group, kept) == (88, -1)
        assert end(c, tid, pid, 0, True) == E_NONE
        after = (offset_fetch(c, group, gone), offset_fetch(c, group, kept), offset_fetch(c, doomed, kept))
        assert after == ((E_NONE, -1), (E_NONE, 6), (E_NONE, -1))
    with start_broker() as broker, AdminClient(broker.bootstrap) as c:
        assert (offset_fetch(c, group, gone), offset_fetch(c, group, kept), offset_fetch(c, doomed, kept)) == after
