"""Transactions version 2 (KIP-890 part 2) over the wire, with exact requests: the `transaction.version`
feature in ApiVersions and UpdateFeatures (kept in the data directory across a restart); one
commit/abort flow run under both protocols (version 1: AddPartitionsToTxn, Produce v11, EndTxn v4 at
a constant epoch; version 2: Produce v12 adding its partition, EndTxn v5 bumping the epoch, the
markers at the bumped epoch, a late batch of the ended transaction fenced); TxnOffsetCommit v5
without AddOffsetsToTxn; an end at an exhausted epoch handing over a new producer id; the
TransactionLogValue version written at each level."""

from __future__ import annotations

import pytest
import trio

from minibroker.admin_client import AdminClient
from minibroker.protocol.records import decode_records, iter_headers
from minibroker.storage.transaction_records import parse_transaction_value
from minibroker.storage.transaction_store import TOPIC as TXN_TOPIC
from minibroker.transactions.state import TxnState
from tests.support.txn_wire import E_NONE, INVALID_EPOCH, add, create, end, end_v2, fetch, init, produce

TRANSACTION_ABORTABLE, INVALID_UPDATE_VERSION = 120, 95


def features(c, version=4, name="transaction.version"):
    """ApiVersions' supported and finalized levels of the feature `name` (the others aside), and the epoch."""
    r = c.call(18, {"client_software_name": "t", "client_software_version": "1"}, version=version)
    return ({f.name: (f.min_version, f.max_version) for f in r.supported_features if f.name == name},
            {f.name: (f.min_version_level, f.max_version_level) for f in r.finalized_features if f.name == name},
            r.finalized_features_epoch)


def update_features(c, level, upgrade_type=1, validate_only=False, version=1):
    body = {"timeout": 5000, "validate_only": validate_only,
            "feature_updates": [{"feature": "transaction.version", "max_version_level": level,
                                 "upgrade_type": upgrade_type}]}
    r = c.call(57, body, version=version)
    return int(r.error_code), r.error_message


def test_api_versions_finalizes_transaction_version_2_and_update_features_changes_it(start_broker, tmp_path):
    data = tmp_path / "data"
    with start_broker(data) as broker, AdminClient(broker.bootstrap) as c:
        supported, finalized, epoch = features(c)
        assert supported == {"transaction.version": (0, 2)} and finalized == {"transaction.version": (2, 2)}
        assert epoch >= 0
        # KAFKA-17011: below v4 a supported feature whose minimum is 0 is left out; finalized stays.
        assert features(c, version=3)[:2] == ({}, {"transaction.version": (2, 2)})
        # A downgrade needs a downgrade type (Kafka's message); an unknown feature or level is refused.
        code, message = update_features(c, 1)
        assert code == INVALID_UPDATE_VERSION and "downgrade" in message
        assert update_features(c, 3, upgrade_type=2)[0] == INVALID_UPDATE_VERSION
        assert update_features(c, 1, upgrade_type=2, validate_only=True) == (E_NONE, None)
        assert features(c)[1] == {"transaction.version": (2, 2)}
        assert update_features(c, 1, upgrade_type=2) == (E_NONE, None)
        _, finalized, epoch2 = features(c)
        assert finalized == {"transaction.version": (1, 1)} and epoch2 > epoch
        assert broker.broker.transactions.transaction_version == 1
        # v0's allow_downgrade; level 0 removes the feature from the finalized list.
        r = c.call(57, {"timeout": 5000, "feature_updates": [
            {"feature": "transaction.version", "max_version_level": 0, "allow_downgrade": True}]}, version=0)
        assert int(r.error_code) == E_NONE and [(int(x.error_code), x.error_message) for x in r.results] == [
            (E_NONE, "NONE")]
        assert features(c)[1] == {}
    # The level is kept in the data directory: it wins over the setting at the next start.
    with start_broker(data, transaction_version="2") as broker, AdminClient(broker.bootstrap) as c:
        assert features(c)[1] == {}
        assert update_features(c, 2) == (E_NONE, None)
        assert features(c)[1] == {"transaction.version": (2, 2)}


def test_the_setting_starts_a_new_data_directory_at_its_level(start_broker):
    with start_broker(transaction_version="1") as broker, AdminClient(broker.bootstrap) as c:
        assert features(c)[1] == {"transaction.version": (1, 1)}


def record_values(buf) -> list[bytes | None]:
    """The values of every record of every (uncompressed) batch in `buf`, markers skipped."""
    values: list[bytes | None] = []
    position = 0
    for header in iter_headers(buf or b""):
        values += [value for _, _, _, value in decode_records(bytes(buf[position:position + header.size]))]
        position += header.size
    return values


def control_batches(c, topic, partition):
    """(producer id, epoch, is_commit) of the markers in a partition."""
    p, headers = fetch(c, topic, partition, 0)
    return [(h.producer_id, h.producer_epoch, h.is_control) for h in headers if h.is_control]


@pytest.mark.parametrize("txn_version", [1, 2])
def test_commit_then_abort_under_each_transaction_version(broker, unique, txn_version):
    topic, tid = unique("tv"), unique("tid")
    with AdminClient(broker.bootstrap) as c:
        create(c, topic, 2)
        code, pid, epoch = init(c, tid)
        assert (code, epoch) == (E_NONE, 0)

        def run(commit, values, seq):
            nonlocal pid, epoch
            if txn_version == 1:
                assert add(c, tid, pid, epoch, topic, [0, 1]) == {(topic, 0): E_NONE, (topic, 1): E_NONE}
                assert produce(c, tid, topic, 0, pid, epoch, seq, values, version=11) == E_NONE
                assert produce(c, tid, topic, 1, pid, epoch, seq, values, version=11) == E_NONE
                assert end(c, tid, pid, epoch, commit) == E_NONE
                return
            # Version 2: the batches add their partitions; the end answers the bumped epoch.
            assert produce(c, tid, topic, 0, pid, epoch, 0, values, version=12) == E_NONE
            assert produce(c, tid, topic, 1, pid, epoch, 0, values, version=12) == E_NONE
            assert broker.broker.transactions.txns[tid].partitions == {(topic, 0), (topic, 1)}
            code, pid2, epoch2 = end_v2(c, tid, pid, epoch, commit)
            assert (code, pid2, epoch2) == (E_NONE, pid, epoch + 1)
            # A retry of the end (it never heard the answer) is answered the same.
            assert end_v2(c, tid, pid, epoch, commit) == (E_NONE, pid, epoch + 1)
            epoch = epoch2

        run(True, [b"c1", b"c2"], 0)
        run(False, [b"a1"], 2)
        p, _ = fetch(c, topic, 0, 1)  # read_committed: the aborted transaction comes with its list
        assert [a.producer_id for a in p.aborted_transactions] == [pid]
        assert p.last_stable_offset == p.high_watermark == 5
        assert record_values(p.records) == [b"c1", b"c2", b"a1"]
        markers = control_batches(c, topic, 0)
        if txn_version == 1:
            # One epoch throughout: the markers carry it.
            assert [(m[0], m[1]) for m in markers] == [(pid, 0), (pid, 0)]
            assert broker.broker.transactions.txns[tid].producer_epoch == 0
        else:
            # Each end's markers carry its bumped epoch, so a late batch of a finished transaction
            # (the old epoch) is fenced by the partition's producer state.
            assert [(m[0], m[1]) for m in markers] == [(pid, 1), (pid, 2)]
            assert produce(c, tid, topic, 0, pid, 0, 1, [b"late"], version=12) == INVALID_EPOCH
            txn = broker.broker.transactions.txns[tid]
            assert (txn.state, txn.producer_epoch, txn.client_transaction_version) == (TxnState.COMPLETE_ABORT, 2, 2)


def test_txn_offset_commit_v5_adds_the_offsets_partition(broker, unique):
    topic, tid, group = unique("tvo"), unique("tid"), unique("group")
    with AdminClient(broker.bootstrap) as c:
        create(c, topic, 1)
        _, pid, _ = init(c, tid)

        def commit_offsets(offset, epoch, version):
            r = c.call(28, {"transactional_id": tid, "group_id": group, "producer_id": pid, "producer_epoch": epoch,
                            "generation_id": -1, "member_id": "", "group_instance_id": None,
                            "topics": [{"name": topic, "partitions": [{"partition_index": 0, "committed_offset": offset,
                                                                        "committed_leader_epoch": -1,
                                                                        "committed_metadata": ""}]}]},
                       version=version)
            return int(r.topics[0].partitions[0].error_code)

        def committed():
            r = c.call(9, {"group_id": group, "topics": [{"name": topic, "partition_indexes": [0]}],
                           "require_stable": True}, version=7)
            return int(r.topics[0].partitions[0].error_code), r.topics[0].partitions[0].committed_offset

        assert commit_offsets(5, 0, 4) == TRANSACTION_ABORTABLE  # v4: AddOffsetsToTxn first
        assert commit_offsets(5, 0, 5) == E_NONE  # v5: the offsets partition joins the transaction
        assert committed() == (88, -1)  # UNSTABLE_OFFSET_COMMIT while it is open
        assert end_v2(c, tid, pid, 0, True) == (E_NONE, pid, 1)
        assert committed() == (E_NONE, 5)
        assert commit_offsets(9, 0, 5) == INVALID_EPOCH  # the ended transaction's epoch is fenced
        assert commit_offsets(9, 1, 5) == E_NONE
        assert end_v2(c, tid, pid, 1, False) == (E_NONE, pid, 2)
        assert committed() == (E_NONE, 5)


def test_an_end_at_an_exhausted_epoch_hands_over_a_new_producer_id(broker, unique):
    topic, tid = unique("tvx"), unique("tid")
    with AdminClient(broker.bootstrap) as c:
        create(c, topic, 1)
        _, pid, _ = init(c, tid)
        coordinator = broker.broker.transactions
        # 32766 transactions are a long test: the state is put at that epoch as a restart would load it.
        trio.from_thread.run(lambda: coordinator._write(coordinator.txns[tid].but(producer_epoch=32766)),
                             trio_token=broker.trio_token)
        assert produce(c, tid, topic, 0, pid, 32766, 0, [b"last"], version=12) == E_NONE
        code, new_pid, new_epoch = end_v2(c, tid, pid, 32766, True)
        assert code == E_NONE and new_pid != pid and new_epoch == 0
        assert control_batches(c, topic, 0) == [(pid, 32767, True)]
        txn = coordinator.txns[tid]
        assert (txn.producer_id, txn.producer_epoch, txn.previous_producer_id) == (new_pid, 0, pid)
        # A retry naming the old id is answered the new one; the new id carries on at epoch 0.
        assert end_v2(c, tid, pid, 32766, True) == (E_NONE, new_pid, 0)
        assert produce(c, tid, topic, 0, new_pid, 0, 0, [b"next"], version=12) == E_NONE
        assert end_v2(c, tid, new_pid, 0, True) == (E_NONE, new_pid, 1)
        # The handover is in __transaction_state (TransactionLogValue v1's tags).
        values = [parse_transaction_value(v) for v in record_values(fetch(c, TXN_TOPIC, 0, 0)[0].records)
                  if v is not None]
        prepared = [v for v in values if v.next_producer_id == new_pid]
        assert prepared and prepared[0].state is TxnState.PREPARE_COMMIT and prepared[0].producer_id == pid


@pytest.mark.parametrize("txn_version,value_version", [(1, 0), (2, 1)])
def test_the_transaction_log_value_version_follows_the_feature(start_broker, unique, txn_version, value_version):
    tid = unique("tid")
    with start_broker(transaction_version=str(txn_version)) as broker, AdminClient(broker.bootstrap) as c:
        init(c, tid)
        p, _ = fetch(c, TXN_TOPIC, 0, 0)
        versions = {int.from_bytes(v[:2], "big") for v in record_values(p.records) if v is not None}
        assert versions == {value_version}
