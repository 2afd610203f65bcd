"""The log cleaner's storage half (minibroker.storage.cleaner): the key map, the choice of log and offsets, the
rewrite of batches, delete horizons, producers' last batches, the checkpoint file and the swap's
crash safety, on real segment files. Records are read back with kafka-python's own batch reader, so
a rewritten batch is checked by an independent decoder."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch

from minibroker.protocol.records import iter_headers
from minibroker.storage.cleaner import (
    CHECKPOINT_FILE,
    DELETE_HORIZON_FLAG,
    CleaningRound,
    OffsetMap,
    choose_filthiest,
    clean,
    commit,
    log_to_clean,
    read_checkpoint,
    write_checkpoint,
)
from minibroker.storage.config import LogConfig
from minibroker.storage.log import PartitionLog
from minibroker.storage.log_dir import CLEANED_SUFFIX, DELETED_SUFFIX, SWAP_SUFFIX
from tests.support.batches import DEFAULT_TIMESTAMP_MS, make_batch
from tests.support.cleaning import read_all

T0 = DEFAULT_TIMESTAMP_MS
DAY = 86_400_000


def compacted(**overrides) -> LogConfig:
    base = dict(cleanup_policy="compact", segment_bytes=1024, index_interval_bytes=128)
    base.update(overrides)
    return LogConfig(**base)


def write(log: PartitionLog, records, now_ms: int = T0, **batch_args) -> int:
    return log.append(make_batch(records, timestamp_ms=now_ms, **batch_args), now_ms).base_offset


def latest_by_key(records) -> dict:
    latest = {}
    for offset, _, key, value, _ in records:
        latest[key] = (offset, value)
    return latest


def clean_now(log: PartitionLog, now_ms: int, checkpoint: int | None = None, *, memory: int = 1 << 20,
              producers=None):
    target = log_to_clean("t", 0, log, checkpoint, now_ms)
    result = clean(CleaningRound.of(target, now_ms, producers), OffsetMap(memory))
    commit(result)
    assert result.complete
    return result


def leftovers(directory: Path) -> list[str]:
    return sorted(n for n in os.listdir(directory) if n.endswith((CLEANED_SUFFIX, SWAP_SUFFIX, DELETED_SUFFIX)))


# -- the key map -------------------------------------------------------------------------------------


def test_offset_map_is_bounded_like_kafkas_and_keeps_the_last_offset_per_key():
    offset_map = OffsetMap(24 * 10, load_factor=0.9)  # 10 slots of 24 bytes, 9 usable
    assert (offset_map.slots, offset_map.max_entries) == (10, 9)
    for offset in range(9):
        offset_map.put(b"k%d" % (offset % 3), offset)
    assert len(offset_map) == 3 and not offset_map.full
    assert offset_map.get(b"k0") == 6 and offset_map.get(b"absent") == -1
    assert offset_map.latest_offset == 8
    for i in range(6):
        offset_map.put(b"other%d" % i, 100 + i)
    assert offset_map.full


# -- choosing a log ----------------------------------------------------------------------------------


def test_dirty_ratio_checkpoint_and_threshold(tmp_path):
    log = PartitionLog.open(tmp_path / "t-0", compacted(min_cleanable_dirty_ratio=0.5), T0)
    for i in range(60):
        write(log, [(b"k%d" % (i % 3), b"v" * 40)])
    segments = log.segments
    assert len(segments) > 4
    fresh = log_to_clean("t", 0, log, None, T0)
    assert fresh.first_dirty_offset == 0 and fresh.first_uncleanable_offset == segments[-1].base_offset
    assert fresh.clean_bytes == 0 and fresh.cleanable_ratio == 1.0 and fresh.cleanable
    # Checkpointed most of the way: the dirty section is the last inactive segment only.
    checkpoint = segments[-2].base_offset
    mostly_clean = log_to_clean("t", 0, log, checkpoint, T0)
    assert mostly_clean.cleanable_bytes == segments[-2].size
    assert mostly_clean.cleanable_ratio < 0.5 and not mostly_clean.cleanable
    assert choose_filthiest([mostly_clean, fresh]) is fresh
    assert choose_filthiest([mostly_clean]) is None
    # A checkpoint past the log end is reset to the log start (Kafka's cleanableOffsets).
    reset = log_to_clean("t", 0, log, 10_000, T0)
    assert reset.checkpoint_reset and reset.first_dirty_offset == 0


def test_min_compaction_lag_stops_at_the_first_young_segment(tmp_path):
    lag = 60_000
    log = PartitionLog.open(tmp_path / "t-0", compacted(min_compaction_lag_ms=lag), T0)
    for i in range(40):  # the first 20 records old, the rest recent
        write(log, [(b"k", b"v" * 40)], now_ms=T0 if i < 20 else T0 + 10 * lag)
    now = T0 + 10 * lag + 1
    target = log_to_clean("t", 0, log, None, now)
    young = next(s for s in log.segments if s.max_timestamp > now - lag)
    assert target.first_uncleanable_offset == young.base_offset < log.active_segment.base_offset
    everything = log_to_clean("t", 0, log, None, now + lag)  # later, every inactive segment is old enough
    assert everything.first_uncleanable_offset == log.active_segment.base_offset


def test_max_compaction_lag_forces_cleaning_below_the_ratio(tmp_path):
    config = compacted(min_cleanable_dirty_ratio=0.99, max_compaction_lag_ms=DAY)
    log = PartitionLog.open(tmp_path / "t-0", config, T0)
    for i in range(60):
        write(log, [(b"k%d" % i, b"v" * 40)])
    checkpoint = log.segments[-3].base_offset
    early = log_to_clean("t", 0, log, checkpoint, T0 + DAY // 2)
    assert not early.need_compaction_now and not early.cleanable
    late = log_to_clean("t", 0, log, checkpoint, T0 + 2 * DAY)
    assert late.need_compaction_now and late.cleanable


def test_max_compaction_lag_rolls_the_active_segment(tmp_path):
    log = PartitionLog.open(tmp_path / "t-0", compacted(segment_bytes=1 << 20, max_compaction_lag_ms=1000), T0)
    write(log, [(b"k", b"1")], now_ms=T0)
    write(log, [(b"k", b"2")], now_ms=T0 + 2000)  # segment.ms is a week; the lag forces the roll
    assert len(log.segments) == 2


# -- cleaning ----------------------------------------------------------------------------------------


def test_latest_value_per_key_at_original_offsets_timestamps_and_headers_kept(tmp_path):
    log = PartitionLog.open(tmp_path / "t-0", compacted(), T0)
    for i in range(300):
        write(log, [(b"k%d" % (i % 3), b"value-%d" % i)], now_ms=T0 + i, headers=[("h", b"%d" % i)])
    before = read_all(log)
    active_base = log.active_segment.base_offset
    result = clean_now(log, T0 + 1000)
    after = read_all(log)
    assert result.end_offset == active_base
    cleaned_part = [r for r in after if r[0] < active_base]
    # Each key once below the active segment (plus the group's last batch, kept for its offsets).
    keys_below = [r[2] for r in cleaned_part]
    assert len(cleaned_part) <= 3 + len(result.swaps)
    assert set(keys_below) <= {b"k0", b"k1", b"k2"}
    assert latest_by_key(after) == latest_by_key(before)
    originals = {r[0]: r for r in before}
    assert all(originals[r[0]] == r for r in after)  # same offset, timestamp, key, value, headers
    assert [r[0] for r in after] == sorted({r[0] for r in after})
    assert log.log_end_offset == 300 and not leftovers(log.directory)
    assert sum(s.size for s in log.segments) == log.size_bytes
    # Reopened (indexes rebuilt from disk), the log reads the same.
    log.close()
    reopened = PartitionLog.open(tmp_path / "t-0", compacted(), T0)
    assert read_all(reopened) == after
    assert reopened.read(0, 1 << 20)  # offset 0 was cleaned away: reads start at the next batch


def test_tombstone_kept_until_delete_retention_after_its_first_cleaning(tmp_path):
    retention = DAY
    log = PartitionLog.open(tmp_path / "t-0", compacted(delete_retention_ms=retention), T0)
    for i in range(100):
        write(log, [(b"k%d" % (i % 3), b"v%d" % i)])
    tombstone_offset = write(log, [(b"k1", None)])
    for i in range(60):
        write(log, [(b"k2", b"w%d" % i)])
    first = T0 + 5000
    result = clean_now(log, first)
    assert result.tombstone_horizon == first + retention
    after = read_all(log)
    assert (b"k1" not in {r[2] for r in after if r[3] is not None})
    assert (tombstone_offset, None) == latest_by_key(after)[b"k1"]
    stamped = [h for h in iter_headers(log.read(0, 1 << 30)) if h.base_offset == tombstone_offset]
    assert stamped[0].attributes & DELETE_HORIZON_FLAG and stamped[0].base_timestamp == first + retention
    # The record's own timestamp survives the re-based delta.
    assert [r[1] for r in after if r[0] == tombstone_offset] == [T0]
    # Before the horizon a second cleaning keeps it; at the horizon it goes.
    clean_now(log, first + retention - 1, result.end_offset)
    assert latest_by_key(read_all(log))[b"k1"] == (tombstone_offset, None)
    log.roll(first + retention)
    clean_now(log, first + retention, log.segments[-2].base_offset)
    assert b"k1" not in latest_by_key(read_all(log))


def test_producer_last_batch_is_kept_empty_with_its_offsets_and_sequence(tmp_path):
    log = PartitionLog.open(tmp_path / "t-0", compacted(), T0)
    for seq in range(10):  # producer 7's batches, all superseded later by a producer-less writer
        write(log, [(b"k", b"p%d" % seq)], producer_id=7, producer_epoch=3, base_sequence=seq)
    last_of_producer = log.log_end_offset - 1
    for i in range(60):
        write(log, [(b"k", b"x%d" % i)])
    clean_now(log, T0 + 1, producers={7: last_of_producer})
    headers = list(iter_headers(log.read(0, 1 << 30)))
    mine = [h for h in headers if h.producer_id == 7]
    assert len(mine) == 1
    kept = mine[0]
    assert (kept.base_offset, kept.last_offset, kept.records_count) == (last_of_producer, last_of_producer, 0)
    assert (kept.producer_epoch, kept.base_sequence, kept.last_sequence) == (3, 9, 9)
    assert DefaultRecordBatch(bytearray(log.read(kept.base_offset, kept.size)[:kept.size])).validate_crc()
    # Without producer state the cleaner keeps every producer id's last batch, read from the log.
    log2 = PartitionLog.open(tmp_path / "u-0", compacted(), T0)
    for seq in range(10):
        write(log2, [(b"k", b"p%d" % seq)], producer_id=9, producer_epoch=0, base_sequence=seq)
    for i in range(60):
        write(log2, [(b"k", b"x%d" % i)])
    clean_now(log2, T0 + 1)
    assert [h.base_sequence for h in iter_headers(log2.read(0, 1 << 30)) if h.producer_id == 9] == [9]


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_partly_kept_compressed_batch_is_rewritten_with_its_codec(tmp_path, codec):
    log = PartitionLog.open(tmp_path / "t-0", compacted(), T0)
    batch_records = [(b"a", b"1"), (b"b", b"2"), (b"c", b"3"), (b"d", b"4")]
    write(log, batch_records, compression=codec, timestamps=[T0, T0 + 5, T0 + 9, T0 + 2], producer_id=4,
          producer_epoch=0, base_sequence=0)
    for i in range(60):
        write(log, [(b"a" if i % 2 else b"c", b"x%d" % i)])
    clean_now(log, T0 + 100, producers={})
    first = next(iter_headers(log.read(0, 1 << 30)))
    assert first.compression == {"gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}[codec]
    assert (first.base_offset, first.last_offset, first.records_count) == (0, 3, 2)
    assert (first.producer_id, first.base_sequence, first.max_timestamp) == (4, 0, T0 + 5)
    kept = [r for r in read_all(log) if r[0] < 4]
    assert [(r[0], r[1], r[2], r[3]) for r in kept] == [(1, T0 + 5, b"b", b"2"), (3, T0 + 2, b"d", b"4")]


def test_a_full_key_map_cleans_in_several_rounds(tmp_path):
    log = PartitionLog.open(tmp_path / "t-0", compacted(), T0)
    for i in range(200):
        write(log, [(b"k%d" % (i % 40), b"v%d" % i)])
    before = latest_by_key(read_all(log))
    small = 24 * 12  # room for 10 keys of 40
    first = clean_now(log, T0 + 1, memory=small)
    assert first.end_offset < log.active_segment.base_offset
    checkpoint = first.end_offset
    while checkpoint < log.active_segment.base_offset:
        checkpoint = clean_now(log, T0 + 1, checkpoint, memory=small).end_offset
    assert latest_by_key(read_all(log)) == before


# -- the checkpoint file -----------------------------------------------------------------------------


def test_checkpoint_file_round_trip_and_damage(tmp_path):
    write_checkpoint(tmp_path, {("orders", 1): 42, ("a.b", 0): 7})
    assert (tmp_path / CHECKPOINT_FILE).read_text() == "0\n2\na.b 0 7\norders 1 42\n"
    assert read_checkpoint(tmp_path) == {("orders", 1): 42, ("a.b", 0): 7}
    (tmp_path / CHECKPOINT_FILE).write_text("0\n3\norders 1 42\n")
    assert read_checkpoint(tmp_path) == {}  # damaged: clean from the start (logged)
    (tmp_path / CHECKPOINT_FILE).unlink()
    assert read_checkpoint(tmp_path) == {}


# -- crash safety ------------------------------------------------------------------------------------


def _dirty_log(directory: Path) -> PartitionLog:
    log = PartitionLog.open(directory, compacted(segment_bytes=600), T0)
    for i in range(120):
        write(log, [(b"k%d" % (i % 4), b"v%d" % i)])
    return log


def _crash_at(log: PartitionLog, step: str) -> None:
    """Run a cleaning up to `step` of its swap, then stop as a kill -9 would (nothing closed)."""
    target = log_to_clean("t", 0, log, None, T0 + 1)
    result = clean(CleaningRound.of(target, T0 + 1), OffsetMap(1 << 20))
    assert len(result.swaps) > 1
    if step == "cleaned":
        return
    first_cleaned, first_old = result.swaps[0]
    if step == "group-done":  # the first group swapped in completely, the others still .cleaned
        log.replace_segments([(first_cleaned, first_old)])
        return
    first_cleaned.change_suffix(SWAP_SUFFIX)
    if step == "swap":
        return
    for segment in first_old:
        if segment.base_offset != first_cleaned.base_offset:
            segment.change_suffix(DELETED_SUFFIX)
    if step == "old-deleted":
        return
    first_cleaned.change_suffix("")
    assert step == "swapped"


@pytest.mark.parametrize("step", ["cleaned", "swap", "old-deleted", "swapped", "group-done"])
def test_a_crash_at_any_step_of_the_swap_loses_and_duplicates_nothing(tmp_path, step):
    directory = tmp_path / "t-0"
    log = _dirty_log(directory)
    before = read_all(log)
    _crash_at(log, step)
    reopened = PartitionLog.open(directory, compacted(segment_bytes=600), T0)
    after = read_all(reopened)
    assert not leftovers(directory)
    offsets = [r[0] for r in after]
    assert offsets == sorted(set(offsets))  # nothing duplicated
    assert latest_by_key(after) == latest_by_key(before)  # nothing lost
    originals = {r[0]: r for r in before}
    assert all(originals[r[0]] == r for r in after)
    if step == "cleaned":
        assert after == before
    else:
        assert len(after) < len(before)  # the first group's swap was completed at the load
    assert reopened.log_end_offset == 120
    # And the log cleans to the end from there.
    clean_now(reopened, T0 + 2)
    assert latest_by_key(read_all(reopened)) == latest_by_key(before)


# -- the property --------------------------------------------------------------------------------------

entries = st.lists(st.tuples(st.sampled_from([b"a", b"b", b"c", b"d", b"e"]),
                             st.one_of(st.none(), st.binary(min_size=0, max_size=30))),
                   min_size=1, max_size=120)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(entries=entries, per_batch=st.integers(1, 4), segment_bytes=st.integers(150, 900),
       codec=st.sampled_from([None, "gzip", "zstd"]))
def test_property_cleaned_log_reads_the_latest_value_of_each_key_at_its_original_offset(
        tmp_path_factory, entries, per_batch, segment_bytes, codec):
    log = PartitionLog.open(tmp_path_factory.mktemp("p") / "t-0", compacted(segment_bytes=segment_bytes), T0)
    for start in range(0, len(entries), per_batch):
        write(log, entries[start:start + per_batch], compression=codec)
    write(log, [(b"z", b"end")])  # so every entry above is below the active segment once rolled
    log.roll(T0)
    before = read_all(log)
    clean_now(log, T0 + 1)  # tombstones stay: their horizon is a day away
    after = read_all(log)
    assert latest_by_key(after) == latest_by_key(before)
    originals = {r[0]: r for r in before}
    assert all(originals[r[0]] == r for r in after)
    last_offsets = {offset for offset, _ in latest_by_key(before).values()}
    assert {r[0] for r in after} >= last_offsets
    # Superseded records are gone (a group's last batch may keep a few for its offsets).
    superseded = [r for r in after if r[0] not in last_offsets]
    assert len(superseded) <= per_batch * len(log.segments)


def test_a_crash_between_the_swapped_log_and_its_indexes_rebuilds_the_indexes(tmp_path):
    """A kill -9 inside the last rename of a swap (LogSegment.change_suffix("")): the cleaned `.log`
    has taken the old base segment's name, its `.index` / `.timeindex` are still `.swap`. The old
    base segment's index files must not be taken for the cleaned segment's (Kafka's LogLoader deletes
    a base's indexes when it finds one of them `.swap`): here the old first segment's time index
    would give the cleaned segment (which holds the younger segments' records too) the first
    segment's largest timestamp, and time retention would delete the younger records with it."""
    directory = tmp_path / "t-0"
    config = compacted(cleanup_policy="compact,delete", segment_bytes=1 << 20, retention_ms=DAY)
    log = PartitionLog.open(directory, config, T0)
    for i in range(6):  # the old first segment: records two days older than the rest
        write(log, [(b"old%d" % i, b"v")], now_ms=T0)
    log.roll(T0)
    young = T0 + 2 * DAY
    for segment in range(2):
        for i in range(6):
            write(log, [(b"k%d" % (i % 2), b"v%d.%d" % (segment, i))], now_ms=young)
        log.roll(young)
    write(log, [(b"active", b"v")], now_ms=young)
    target = log_to_clean("t", 0, log, None, young)
    result = clean(CleaningRound.of(target, young), OffsetMap(1 << 20))
    assert len(result.swaps) == 1  # the three old segments into one
    cleaned, old = result.swaps[0]
    assert len(old) == 3
    cleaned.change_suffix(SWAP_SUFFIX)
    for segment in old[1:]:
        segment.change_suffix(DELETED_SUFFIX)
    # change_suffix("") cut short after the log's rename (the transaction index, renamed before it,
    # does not exist: no transaction here).
    os.replace(cleaned.log_path, directory / cleaned.log_path.name.removesuffix(SWAP_SUFFIX))

    reopened = PartitionLog.open(directory, config, young)
    before = latest_by_key(read_all(reopened))
    assert set(before) == {b"old%d" % i for i in range(6)} | {b"k0", b"k1", b"active"}
    assert not leftovers(directory)
    assert reopened.segments[0].max_timestamp == young
    reopened.enforce_retention(T0 + DAY + 1)  # the old records are past retention.ms, the young ones not
    assert latest_by_key(read_all(reopened)) == before


def test_a_due_tombstone_goes_in_one_round_when_nothing_new_was_written(tmp_path):
    """The round a due tombstone triggers on its own (LogToClean.tombstones_due: the dirty section is
    empty) cleans the clean section with an empty key map: the tombstone past its horizon goes, and
    the first dirty offset stays where it was (not reset to 0, which cleaned the whole log again)."""
    retention = DAY
    log = PartitionLog.open(tmp_path / "t-0", compacted(delete_retention_ms=retention), T0)
    for i in range(30):
        write(log, [(b"k%d" % (i % 3), b"v%d" % i)])
    write(log, [(b"k1", None)])
    write(log, [(b"k0", b"last")])
    log.roll(T0)
    write(log, [(b"active", b"v")])
    first = T0 + 5000
    result = clean_now(log, first)
    checkpoint = result.end_offset
    assert checkpoint == log.segments[-1].base_offset
    assert latest_by_key(read_all(log))[b"k1"][1] is None
    due = result.tombstone_horizon
    target = log_to_clean("t", 0, log, checkpoint, due, tombstone_horizon=due)
    assert target.tombstones_due and target.cleanable_bytes == 0
    second = clean(CleaningRound.of(target, due), OffsetMap(1 << 20))
    commit(second)
    assert second.end_offset == checkpoint
    assert b"k1" not in latest_by_key(read_all(log))
    assert second.tombstone_horizon is None
