"""The transaction index (`.txnindex`, minibroker.storage.txn_index) and the log's transaction reads
(KIP-98): the file's bytes, collecting aborted transactions across segments, reads bounded by the
last stable offset, the index going with its segment (truncation, retention, DeleteRecords, unclean
recovery), and damage rebuilt from the log.

Transactions are written the way minibroker.txn_markers writes them (a control batch through the
append path, its index entry from the producer state), on a real PartitionLog.
"""

from __future__ import annotations

import dataclasses
import os
import struct

import pytest

from minibroker.protocol.records import ATTR_TRANSACTIONAL, encode_batch, encode_control_batch, iter_headers, read_header
from minibroker.protocol.records.codec import CONTROL_ABORT, CONTROL_COMMIT, ControlRecord
from minibroker.storage.config import LogConfig
from minibroker.storage.log import PartitionLog
from minibroker.storage.producer_state import ProducerStateManager
from minibroker.storage.producer_state.txns import AbortedTxn
from minibroker.storage.txn_index import ENTRY_SIZE, TransactionIndex

NOW = 1_000


class Writer:
    """Appends data and markers to a log as the broker does, keeping producer state beside it."""

    def __init__(self, log: PartitionLog) -> None:
        self.log = log
        self.psm = ProducerStateManager.for_mode("lean")
        self.sequences: dict[int, int] = {}

    def data(self, pid: int = -1, value: bytes = b"v", count: int = 1) -> int:
        records = [(b"k", value)] * count
        if pid < 0:
            raw = encode_batch(records, NOW)
        else:
            seq = self.sequences.get(pid, 0)
            self.sequences[pid] = seq + count
            raw = encode_batch(records, NOW, producer_id=pid, producer_epoch=0, base_sequence=seq,
                               attributes=ATTR_TRANSACTIONAL)
        result = self.log.append(raw, NOW)
        self.psm.update(dataclasses.replace(read_header(raw), base_offset=result.base_offset), NOW)
        return result.base_offset

    def end(self, pid: int, commit: bool) -> int:
        raw = encode_control_batch(pid, 0, 0, commit, NOW)
        result = self.log.append(raw, NOW)
        completed, lso = self.psm.peek_marker(pid, result.base_offset, not commit)
        if completed is not None and completed.is_aborted:
            self.log.append_aborted_txn(AbortedTxn(pid, completed.first_offset, result.base_offset, lso))
        marker = ControlRecord(CONTROL_COMMIT if commit else CONTROL_ABORT, 0)
        self.psm.update(dataclasses.replace(read_header(raw), base_offset=result.base_offset), NOW, marker)
        return result.base_offset


def small(**changes) -> LogConfig:
    return LogConfig(**{"segment_bytes": 400, "index_interval_bytes": 1, **changes})


def scenario(log: PartitionLog) -> tuple[Writer, list[AbortedTxn]]:
    """Producers 1 and 2 interleaved, 1 aborted twice, 2 committed, 3 aborted, several segments."""
    w = Writer(log)
    w.data(1)            # 0  pid 1, first transaction
    w.data()             # 1  plain
    w.data(2)            # 2  pid 2
    w.data(1)            # 3
    w.end(1, False)      # 4  ABORT 1 (2 still open: LSO 2)
    w.data()             # 5
    w.end(2, True)       # 6  COMMIT 2
    w.data(1)            # 7  pid 1, second transaction
    w.data(3)            # 8  pid 3
    w.end(3, False)      # 9  ABORT 3 (1 open: LSO 7)
    w.end(1, False)      # 10 ABORT 1 (nothing open: LSO 11)
    w.data()             # 11
    expected = [AbortedTxn(1, 0, 4, 2), AbortedTxn(3, 8, 9, 7), AbortedTxn(1, 7, 10, 11)]
    return w, expected


def all_entries(log: PartitionLog) -> list[AbortedTxn]:
    return [e for s in log.segments for e in s.txn_index.entries(s.next_offset)]


def test_entries_are_kafkas_34_byte_abortedtxn(tmp_path):
    index = TransactionIndex.empty(tmp_path / "00000000000000000000.txnindex", 0)
    index.append(AbortedTxn(7, 3, 9, 5))
    index.append(AbortedTxn(8, 10, 12, 13))
    data = (tmp_path / "00000000000000000000.txnindex").read_bytes()
    assert len(data) == 2 * ENTRY_SIZE == 68
    assert data[:ENTRY_SIZE] == struct.pack(">hqqqq", 0, 7, 3, 9, 5)
    again = TransactionIndex(index.path, 0)
    assert again.entries(13) == [AbortedTxn(7, 3, 9, 5), AbortedTxn(8, 10, 12, 13)]
    with pytest.raises(ValueError):
        again.append(AbortedTxn(9, 11, 12, 13))  # markers only move forwards


def test_collect_stops_at_the_entry_whose_last_stable_offset_covers_the_range(tmp_path):
    index = TransactionIndex.empty(tmp_path / "x.txnindex", 0)
    for entry in (AbortedTxn(1, 0, 4, 2), AbortedTxn(3, 8, 9, 7), AbortedTxn(1, 7, 10, 11)):
        index.append(entry)
    assert index.collect(0, 2) == ([AbortedTxn(1, 0, 4, 2)], True)
    assert index.collect(5, 9) == ([AbortedTxn(3, 8, 9, 7), AbortedTxn(1, 7, 10, 11)], True)
    assert index.collect(5, 8) == ([AbortedTxn(1, 7, 10, 11)], True)
    assert index.collect(11, 20) == ([], False)  # the next segment may still hold one


def test_aborted_transactions_across_segments_and_the_lso_bounded_read(tmp_path):
    log = PartitionLog.create(tmp_path / "t-0", small(), 0)
    w, expected = scenario(log)
    assert len(log.segments) > 2
    assert all_entries(log) == expected
    assert log.aborted_transactions(0, 12) == expected
    assert log.aborted_transactions(5, 8) == [AbortedTxn(1, 7, 10, 11)]
    assert log.aborted_transactions(0, 3) == [AbortedTxn(1, 0, 4, 2)]
    assert log.aborted_transactions(11, 12) == []
    # Reads bounded by a last stable offset end at a batch boundary below it.
    w.data(4)  # 12: an open transaction
    w.data()   # 13
    assert w.psm.first_unstable_offset == 12
    offsets = [h.base_offset for h in iter_headers(log.read(0, 1 << 20, max_offset=12))]
    # (a read stops at its segment's end; continue from there)
    while offsets[-1] < 11:
        offsets += [h.base_offset for h in iter_headers(log.read(offsets[-1] + 1, 1 << 20, max_offset=12))]
    assert offsets == list(range(12))
    assert log.read(12, 1 << 20, max_offset=12) == b""
    assert log.read(13, 1 << 20, max_offset=12) == b""
    assert [h.base_offset for h in iter_headers(log.read(12, 1 << 20))] == [12, 13]
    log.close()


def test_the_index_survives_a_clean_restart_and_is_fsynced_with_its_segment(tmp_path):
    log = PartitionLog.create(tmp_path / "t-0", small(), 0)
    _, expected = scenario(log)
    log.close()
    log = PartitionLog.open(tmp_path / "t-0", small(), 0)
    assert all_entries(log) == expected and log.aborted_transactions(0, 12) == expected
    log.close()


def test_truncation_retention_and_delete_records_take_the_index_with_the_segment(tmp_path):
    log = PartitionLog.create(tmp_path / "t-0", small(), 0)
    scenario(log)
    log.truncate_to(10)  # the last ABORT goes with its marker
    assert all_entries(log) == [AbortedTxn(1, 0, 4, 2), AbortedTxn(3, 8, 9, 7)]
    txn_files = sorted(p.name for p in (tmp_path / "t-0").glob("*.txnindex"))
    first_with_entry = txn_files[0]
    log.delete_records_before(9)  # segments wholly below 9 go, their .txnindex files with them
    assert first_with_entry not in {p.name for p in (tmp_path / "t-0").glob("*.txnindex")}
    assert log.aborted_transactions(9, 10) == [AbortedTxn(3, 8, 9, 7)]
    log.close()


def test_unclean_recovery_drops_the_entry_of_a_torn_marker(tmp_path):
    log = PartitionLog.create(tmp_path / "t-0", LogConfig(), 0)
    w = Writer(log)
    w.data(1)
    w.end(1, False)
    w.data(2)
    w.end(2, False)
    log.close(clean=False)
    segment_log = next((tmp_path / "t-0").glob("*.log"))
    with open(segment_log, "r+b") as f:  # tear the last marker
        f.truncate(os.path.getsize(segment_log) - 5)
    log = PartitionLog.open(tmp_path / "t-0", LogConfig(), 0)
    assert log.log_end_offset == 3
    assert all_entries(log) == [AbortedTxn(1, 0, 1, 2)]
    assert len(next((tmp_path / "t-0").glob("*.txnindex")).read_bytes()) == ENTRY_SIZE
    log.close()


@pytest.mark.parametrize("damage", ["size", "version", "order", "outside"])
def test_a_damaged_index_is_rebuilt_from_the_log(tmp_path, damage, caplog):
    log = PartitionLog.create(tmp_path / "t-0", small(), 0)
    w, expected = scenario(log)
    # Snapshots as the broker takes them at rolls: the rebuild starts from one.
    w.psm.take_snapshot(tmp_path / "t-0", log.segments[-1].base_offset)
    log.close()
    path = next(p for p in sorted((tmp_path / "t-0").glob("*.txnindex")) if p.stat().st_size >= ENTRY_SIZE)
    data = bytearray(path.read_bytes())
    if damage == "size":
        data += b"\0\0\0"
    elif damage == "version":
        data[0:2] = b"\0\x07"
    elif damage == "order":
        data += data[:ENTRY_SIZE]  # a marker offset that goes backwards
    else:
        struct.pack_into(">q", data, 18, 1 << 40)  # a marker far outside the segment
    path.write_bytes(bytes(data))
    log = PartitionLog.open(tmp_path / "t-0", small(), 0)
    with caplog.at_level("WARNING"):
        assert log.aborted_transactions(0, 12) == expected
    assert str(path) in caplog.text and "rebuilding it from the log" in caplog.text
    assert all_entries(log) == expected
    log.close()
    assert all_entries(PartitionLog.open(tmp_path / "t-0", small(), 0)) == expected


def test_a_rebuild_without_any_snapshot_replays_from_the_log_start(tmp_path):
    log = PartitionLog.create(tmp_path / "t-0", small(), 0)
    _, expected = scenario(log)
    log.close()
    for path in (tmp_path / "t-0").glob("*.txnindex"):
        path.write_bytes(path.read_bytes() + b"x")
    log = PartitionLog.open(tmp_path / "t-0", small(), 0)
    assert log.aborted_transactions(0, 12) == expected
    log.close()


# -- the log cleaner and transactions ----------------------------------------------------------------

def test_cleaning_keeps_the_committed_value_an_aborted_one_came_after(tmp_path):
    """Kafka's cleaner never lets an aborted transaction's record supersede a key's value: here the
    key's last record belongs to an aborted transaction, so a read_committed consumer must still
    find the committed one after cleaning. The aborted transaction's entry carries over into the
    cleaned segment's index (so the record it covers stays hidden), nothing past the open
    transaction (the last stable offset) is cleaned, and a restart reads the same entries."""
    from tests.support.cleaning import clean_fully
    from tests.support.cleaning import read_all

    config = small(cleanup_policy="compact", segment_bytes=300)
    log = PartitionLog.create(tmp_path / "t-0", config, NOW)
    w = Writer(log)
    w.data(value=b"old")            # 0 plain
    w.data(1, value=b"committed")   # 1 pid 1
    w.end(1, True)                  # 2 COMMIT 1
    w.data(2, value=b"aborted")     # 3 pid 2
    w.end(2, False)                 # 4 ABORT 2
    for _ in range(3):
        w.data(value=b"filler", count=1)  # 5-7: more segments, all committed reading
    clean_fully(log, NOW)
    records = {offset: value for offset, _, _, value, _ in read_all(log)}
    aborted = log.aborted_transactions(0, log.log_end_offset)
    assert aborted == [AbortedTxn(2, 3, 4, 5)]
    hidden = {o for t in aborted for o in range(t.first_offset, t.last_offset + 1)}
    committed_view = [records[o] for o in sorted(records) if o not in hidden and records[o] is not None]
    # Here the fillers supersede key k, so this half proves the index entry carried into the cleaned
    # segment (above) and a committed reading ending at the last filler; the second log below, with
    # nothing after the aborted record, proves the committed value survives it.
    assert committed_view[-1] == b"filler"
    assert 0 not in records  # "old" superseded by later committed values

    log2 = PartitionLog.create(tmp_path / "u-0", config, NOW)
    w2 = Writer(log2)
    w2.data(value=b"old")            # 0
    w2.data(1, value=b"committed")   # 1
    w2.end(1, True)                  # 2
    w2.data(2, value=b"aborted")     # 3
    w2.end(2, False)                 # 4
    w2.data(3, value=b"open")        # 5: pid 3's transaction stays open: LSO 5
    w2.data(value=b"x", count=1)     # 6
    log2.roll(NOW)
    from minibroker.storage.cleaner import CleaningRound, OffsetMap, clean, commit, log_to_clean
    target = log_to_clean("u", 0, log2, None, NOW, last_stable_offset=5)
    assert target.first_uncleanable_offset <= 5
    commit(clean(CleaningRound.of(target, NOW), OffsetMap(1 << 20)))
    records2 = {offset: value for offset, _, _, value, _ in read_all(log2)}
    assert records2[1] == b"committed"  # the aborted record at 3 did not supersede it
    assert records2[5] == b"open" and records2[6] == b"x"  # past the LSO: untouched
    assert 0 not in records2
    assert log2.aborted_transactions(0, log2.log_end_offset) == [AbortedTxn(2, 3, 4, 5)]
    log2.close()
    reopened = PartitionLog.open(tmp_path / "u-0", config, NOW)
    reopened.load()
    assert reopened.aborted_transactions(0, reopened.log_end_offset) == [AbortedTxn(2, 3, 4, 5)]
    reopened.close()
    log.close()
