"""A partition log's high watermark and leader-epoch cache (Kafka's UnifiedLog and
LeaderEpochFileCache): the high watermark is the log end while the partition has no other replica
and what the replica manager sets otherwise; a leader's append in a newer epoch starts that epoch,
kept in `leader-epoch-checkpoint` in Kafka's format; truncation drops the epochs past the cut;
OffsetForLeaderEpoch's answers against a plain model."""

from __future__ import annotations

from hypothesis import given, strategies as st

from minibroker.storage.config import LogConfig
from minibroker.storage.leader_epoch import LeaderEpochCache
from minibroker.storage.log import PartitionLog
from tests.support.batches import make_batch


def test_the_high_watermark_follows_the_end_until_a_replica_manager_sets_it(tmp_path):
    log = PartitionLog.open(tmp_path / "t-0", LogConfig(), 0)
    log.append(make_batch([(None, b"a"), (None, b"b")]), 0)
    assert log.high_watermark_follows_end and log.high_watermark == log.log_end_offset == 2
    log.update_high_watermark(1)
    log.append(make_batch([(None, b"c")]), 0)
    assert log.high_watermark == 1 and log.log_end_offset == 3
    assert log.read(0, 1 << 20, max_offset=log.high_watermark).count(b"c") == 0
    log.update_high_watermark(10)  # never past the end
    assert log.high_watermark == 3
    log.close()


def test_a_leader_appending_in_a_newer_epoch_starts_it_in_the_checkpoint(tmp_path):
    directory = tmp_path / "t-0"
    log = PartitionLog.open(directory, LogConfig(), 0)
    log.append(make_batch([(None, b"none")]), 0)  # no leader epoch: a log of no partition leader
    assert not (directory / "leader-epoch-checkpoint").exists()
    log.leader_epoch = 0
    log.append(make_batch([(None, b"a")]), 0)
    log.append(make_batch([(None, b"b")]), 0)
    log.leader_epoch = 3
    log.append(make_batch([(None, b"c"), (None, b"d")]), 0)
    assert (directory / "leader-epoch-checkpoint").read_text() == "0\n2\n0 1\n3 3\n"
    assert [log.epoch_of(o) for o in range(5)] == [-1, 0, 0, 3, 3]
    assert log.latest_epoch == 3
    log.truncate_to(3)
    assert (directory / "leader-epoch-checkpoint").read_text() == "0\n1\n0 1\n"
    log.close()
    reopened = PartitionLog.open(directory, LogConfig(), 0)
    assert reopened.leader_epochs.entries == [(0, 1)] and reopened.latest_epoch == 0
    reopened.close()


def test_an_unreadable_checkpoint_starts_the_epochs_afresh(tmp_path):
    (tmp_path / "leader-epoch-checkpoint").write_text("0\n3\n1 0\n")
    assert LeaderEpochCache.load(tmp_path).entries == []


def model_end_offset(entries, requested, log_end):
    """Kafka's rule, written plainly: the largest epoch <= requested, and where the next began;
    the log end for the latest epoch; undefined for one older or newer than every epoch."""
    if requested < 0 or not entries:
        return -1, -1
    if requested == entries[-1][0]:
        return requested, log_end
    below = [e for e in entries if e[0] <= requested]
    if not below:
        return -1, -1
    later = [e for e in entries if e[0] > requested]
    if not later:  # newer than every epoch known (Kafka 4.4 answers UNDEFINED: the conformance corpus)
        return -1, -1
    return below[-1][0], later[0][1]


@given(st.lists(st.integers(0, 6), min_size=0, max_size=6, unique=True).map(sorted), st.integers(-1, 8))
def test_end_offset_for_agrees_with_kafkas_rule(epochs, requested):
    entries = [(epoch, 10 * i) for i, epoch in enumerate(epochs)]
    cache = LeaderEpochCache("/nonexistent", list(entries))
    assert cache.end_offset_for(requested, 100) == model_end_offset(entries, requested, 100)
