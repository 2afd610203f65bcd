"""The transaction coordinator's requests over the wire, one helper per API (minibroker.admin_client
connections), for the tests that drive transactions by hand."""

from __future__ import annotations

from minibroker.protocol.records import iter_headers
from tests.support.batches import make_batch
from tests.support.wire import produced


E_NONE, INVALID_TXN_STATE, FENCED, INVALID_EPOCH = 0, 48, 90, 47


def create(c, topic, partitions=2):
    c.call(19, {"topics": [{"name": topic, "num_partitions": partitions, "replication_factor": 1,
                            "assignments": (), "configs": ()}], "timeout": 5000, "validate_only": False})


def init(c, tid, timeout=60000, pid=-1, epoch=-1, version=None):
    r = c.call(22, {"transactional_id": tid, "transaction_timeout": timeout, "producer_id": pid,
                    "producer_epoch": epoch}, version=version)
    return int(r.error_code), r.producer_id, r.producer_epoch


def add(c, tid, pid, epoch, topic, partitions, version=3):
    r = c.call(24, {"v3_and_below_transactional_id": tid, "v3_and_below_producer_id": pid,
                    "v3_and_below_producer_epoch": epoch,
                    "v3_and_below_topics": [{"name": topic, "partitions": partitions}]}, version=version)
    return {(t.name, p.partition_index): int(p.partition_error_code)
            for t in r.results_by_topic_v3_and_below for p in t.results_by_partition}


def end(c, tid, pid, epoch, commit, version=4):
    """EndTxn of transactions version 1 (v4 by default): the error code."""
    r = c.call(26, {"transactional_id": tid, "producer_id": pid, "producer_epoch": epoch, "committed": commit},
               version=version)
    return int(r.error_code)


def end_v2(c, tid, pid, epoch, commit, version=5):
    """EndTxn of transactions version 2 (v5): (error code, producer id, epoch) answered."""
    r = c.call(26, {"transactional_id": tid, "producer_id": pid, "producer_epoch": epoch, "committed": commit},
               version=version)
    return int(r.error_code), r.producer_id, r.producer_epoch


def produce(c, tid, topic, partition, pid, epoch, seq, values, version=9):
    batch = make_batch([(v, v) for v in values], producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                       transactional=True)
    return int(produced(c, topic, batch, partition=partition, version=version, transactional_id=tid).error_code)


def fetch(c, topic, partition, isolation):
    r = c.call(1, {"replica_id": -1, "max_wait": 0, "min_bytes": 0, "max_bytes": 1 << 20,
                   "isolation_level": isolation, "session_id": 0, "session_epoch": -1,
                   "topics": [{"topic": topic, "partitions": [{"partition": partition, "current_leader_epoch": -1,
                                                                 "fetch_offset": 0, "log_start_offset": -1,
                                                                 "partition_max_bytes": 1 << 20}]}],
                   "forgotten_topics_data": (), "rack_id": ""}, version=11)
    p = r.responses[0].partitions[0]
    headers = list(iter_headers(p.records or b""))
    return p, headers
