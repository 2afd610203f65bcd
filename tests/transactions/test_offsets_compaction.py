"""Transactional offsets in the compacted `__consumer_offsets` log: the transactional batches that
TxnOffsetCommit writes there are tracked by the partition's producer state like any other, so an
aborted transaction's offsets get their `.txnindex` entry and the log cleaner never lets them
supersede a committed offset (a committed offset survives an aborted transaction, a cleaning and a
restart), and an open transaction holds the partition's last stable offset."""

from __future__ import annotations

from minibroker.admin_client import AdminClient
from minibroker.storage.config import LogConfig
from minibroker.storage.manager import LogManager
from minibroker.storage.offsets_store import TOPIC as OFFSETS
from tests.support.cleaning import clean_fully
from tests.support.txn_wire import E_NONE, create, end, fetch, init


def txn_commit_offset(c, tid, pid, group, topic, offset):
    r = c.call(25, {"transactional_id": tid, "producer_id": pid, "producer_epoch": 0, "group_id": group})
    assert int(r.error_code) == E_NONE
    r = c.call(28, {"transactional_id": tid, "group_id": group, "producer_id": pid, "producer_epoch": 0,
                    "generation_id": -1, "member_id": "", "group_instance_id": None,
                    "topics": [{"name": topic, "partitions": [{"partition_index": 0, "committed_offset": offset,
                                                                "committed_leader_epoch": -1,
                                                                "committed_metadata": ""}]}]}, version=3)
    assert int(r.topics[0].partitions[0].error_code) == E_NONE


def fetched(c, group, topic):
    r = c.call(9, {"group_id": group, "topics": [{"name": topic, "partition_indexes": [0]}],
                   "require_stable": True}, version=7)
    p = r.topics[0].partitions[0]
    return int(p.error_code), p.committed_offset


def test_an_aborted_transactions_offsets_never_replace_a_committed_one(start_broker, unique, tmp_path):
    topic, tid, group = unique("txc"), unique("tid"), unique("group")
    with start_broker() as broker, AdminClient(broker.bootstrap) as c:
        create(c, topic, 1)
        _, pid, _ = init(c, tid)
        txn_commit_offset(c, tid, pid, group, topic, 5)
        assert end(c, tid, pid, 0, True) == E_NONE
        assert fetched(c, group, topic) == (E_NONE, 5)
        txn_commit_offset(c, tid, pid, group, topic, 9)
        p, _ = fetch(c, OFFSETS, 0, 1)
        assert p.last_stable_offset < p.high_watermark  # the open transaction's offsets are not stable
        assert end(c, tid, pid, 0, False) == E_NONE
        p, _ = fetch(c, OFFSETS, 0, 1)
        assert [(a.producer_id, a.first_offset) for a in p.aborted_transactions] == [(pid, p.high_watermark - 2)]
        assert fetched(c, group, topic) == (E_NONE, 5)
    logs = LogManager.open(tmp_path / "data", LogConfig.from_broker({}), 0)
    try:
        clean_fully(logs.log(OFFSETS, 0), 0)
    finally:
        logs.close()
    with start_broker() as broker, AdminClient(broker.bootstrap) as c:
        assert fetched(c, group, topic) == (E_NONE, 5)
