"""PartitionLog on real files: append/read round trips across segment rolls, KIP-74 reads, offset
range errors, reopen after clean and unclean shutdowns, torn writes and corrupt tails, rebuilt
indexes, retention, DeleteRecords, timestamps lookups. Also checks tests/support/batches.py against
kafka-python's encoder, and that storage stays free of trio and minibroker."""

from __future__ import annotations

import os
import struct
import tempfile
from pathlib import Path

import pytest
from crc32c import crc32c
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from minibroker.protocol.records import check_batch, iter_headers, set_base_offset
from minibroker.storage.config import LogConfig
from minibroker.storage.log import OffsetOutOfRangeError, PartitionLog
from minibroker.storage.log_dir import CLEAN_SHUTDOWN_FILE
from tests.support.batches import make_batch, make_value_batch as batch

T0 = 1_700_000_000_000


def small_config(**changes) -> LogConfig:
    base = dict(segment_bytes=400, index_interval_bytes=64)
    base.update(changes)
    return LogConfig(**base)


def stored(raw: bytes, base_offset: int, leader_epoch: int | None = None) -> bytes:
    """What the log holds of one batch `raw` appended at `base_offset` by a leader at `leader_epoch`:
    the offsets assigned and the epoch stamped (Kafka's appendAsLeader), nothing else changed; a log
    no leader writes (`leader_epoch` None: tools, tests) keeps the producer's epoch."""
    copy = bytearray(raw)
    set_base_offset(copy, 0, base_offset)
    if leader_epoch is not None:
        struct.pack_into(">i", copy, 12, leader_epoch)
    return bytes(copy)


class Model:
    """What the log should hold: the batches with their assigned offsets, in order."""

    def __init__(self) -> None:
        self.batches: list[tuple[int, int, bytes]] = []  # (base, last, stored bytes)
        self.end = 0

    def append(self, raw: bytes) -> tuple[int, int]:
        count = struct.unpack_from(">i", raw, 23)[0] + 1
        base, last = self.end, self.end + count - 1
        self.batches.append((base, last, stored(raw, base)))
        self.end = last + 1
        return base, last

    def read(self, offset: int, max_bytes: int, min_one_batch: bool = True) -> bytes:
        out: list[bytes] = []
        total = 0
        for base, last, data in self.batches:
            if last < offset:
                continue
            if total + len(data) > max_bytes:
                if not out and min_one_batch:
                    out.append(data)
                break
            out.append(data)
            total += len(data)
        return b"".join(out)


def fill(log: PartitionLog, model: Model, n: int, now_ms: int = 0, **kwargs) -> None:
    for i in range(n):
        raw = batch(count=1 + i % 3, size=5 + (i * 7) % 40, ts=T0 + i, **kwargs)
        result = log.append(raw, now_ms)
        assert (result.base_offset, result.last_offset) == model.append(raw)


def assert_same(log: PartitionLog, model: Model) -> None:
    assert log.log_end_offset == model.end
    assert log.read(0, 10**9) == model.read(0, 10**9)
    assert log.size_bytes == sum(len(d) for _, _, d in model.batches)


# -- encoder ------------------------------------------------------------------------------------


def test_make_batch_matches_kafka_python_encoder():
    builder = DefaultRecordBatchBuilder(2, 0, False, 7, 3, 11, 1 << 20)
    records = [(b"k1", b"v1", T0), (None, b"value-2", T0 + 5), (b"k3", None, T0 - 2)]
    for i, (key, value, ts) in enumerate(records):
        builder.append(i, ts, key, value, [("h", b"x"), ("n", None)])
    theirs = bytes(builder.build())
    ours = make_batch(
        [(k, v) for k, v, _ in records],
        timestamps=[ts for _, _, ts in records],
        headers=[("h", b"x"), ("n", None)],
        producer_id=7, producer_epoch=3, base_sequence=11,
        partition_leader_epoch=0,  # kafka-python writes 0 where the Java producer writes -1
    )
    assert ours == theirs
    decoded = list(DefaultRecordBatch(bytearray(ours)))
    assert [(r.key, r.value, r.timestamp) for r in decoded] == records
    check_batch(ours)


# -- append and read ----------------------------------------------------------------------------


@settings(max_examples=25, deadline=None)
@given(
    sizes=st.lists(st.tuples(st.integers(1, 4), st.integers(0, 120)), min_size=1, max_size=30),
    segment_bytes=st.integers(150, 1200),
    index_interval=st.integers(0, 300),
    reads=st.lists(st.tuples(st.integers(0, 200), st.integers(0, 1500), st.booleans()), max_size=15),
)
def test_round_trip_across_rolls_and_reopen(sizes, segment_bytes, index_interval, reads):
    config = LogConfig(segment_bytes=segment_bytes, index_interval_bytes=index_interval)
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp) / "t-0"
        log = PartitionLog.open(directory, config, 0)
        model = Model()
        for i, (count, size) in enumerate(sizes):
            raw = batch(count=count, size=size, ts=T0 + i)
            result = log.append(raw, i)
            assert (result.base_offset, result.last_offset) == model.append(raw)

        def check(log):
            assert log.log_end_offset == model.end
            for offset, max_bytes, min_one in reads:
                offset %= model.end + 1
                got = log.read(offset, max_bytes, min_one_batch=min_one)
                assert got == model.read(offset, max_bytes, min_one)
            for offset in range(model.end):
                first = next(iter_headers(log.read(offset, 1)))
                assert first.base_offset <= offset <= first.last_offset

        check(log)
        log.close()
        log = PartitionLog.open(directory, config, 1000)
        check(log)
        log.close(clean=False)
        log = PartitionLog.open(directory, config, 2000)
        check(log)
        log.close()


def test_segments_roll_at_segment_bytes_and_are_named_by_base_offset(tmp_path):
    log = PartitionLog.open(tmp_path / "t-0", small_config(), 0)
    rolls = []
    log.on_roll = rolls.append
    model = Model()
    fill(log, model, 30)
    assert len(log.segments) > 3
    bases = [s.base_offset for s in log.segments]
    assert rolls == bases[1:]
    for segment in log.segments[:-1]:
        assert segment.size <= 400
    names = sorted(p.name for p in (tmp_path / "t-0").glob("*.log"))
    assert names == [f"{b:020d}.log" for b in bases]
    assert_same(log, model)
    log.close()


def test_oversized_batch_gets_its_own_segment_and_min_one_batch(tmp_path):
    log = PartitionLog.open(tmp_path / "t-0", small_config(), 0)
    model = Model()
    fill(log, model, 2)
    big = batch(count=2, size=1000)
    log.append(big, 0)
    model.append(big)
    fill(log, model, 2)
    big_base = model.batches[2][0]
    assert log.read(big_base, 100) == model.batches[2][2]
    assert log.read(big_base, 100, min_one_batch=False) == b""
    assert log.read(0, 10**6) == model.read(0, 10**6)
    log.close()


def test_read_bounds_and_offset_out_of_range(tmp_path):
    log = PartitionLog.open(tmp_path / "t-0", small_config(), 0)
    model = Model()
    fill(log, model, 5)
    assert log.read(model.end, 1000) == b""
    for bad in (-1, model.end + 1):
        with pytest.raises(OffsetOutOfRangeError):
            log.read(bad, 1000)
    # A read from the middle of a batch starts at that batch.
    base, last, data = model.batches[2]
    if last > base:
        assert log.read(last, len(data)) == data
    log.close()


def test_empty_log(tmp_path):
    log = PartitionLog.open(tmp_path / "t-0", small_config(), 0)
    assert (log.log_start_offset, log.log_end_offset, log.size_bytes) == (0, 0, 0)
    assert log.read(0, 100) == b""
    assert log.offset_for_timestamp(0) is None
    assert log.latest_timestamp() == (-1, -1)
    assert list(log.iter_batch_headers(0)) == []
    log.close()
    log = PartitionLog.open(tmp_path / "t-0", small_config(), 0)
    assert log.log_end_offset == 0
    log.close(clean=False)
    log = PartitionLog.open(tmp_path / "t-0", small_config(), 0)
    assert log.log_end_offset == 0
    log.close()


def test_append_several_batches_at_once(tmp_path):
    log = PartitionLog.open(tmp_path / "t-0", LogConfig(), 0)
    raws = [batch(count=2), batch(count=3, ts=T0 + 9), batch(count=1, ts=T0 + 4)]
    result = log.append(b"".join(raws), 5)
    assert (result.base_offset, result.last_offset, result.max_timestamp) == (0, 5, T0 + 9)
    assert result.log_append_time_ms == -1
    headers = list(iter_headers(log.read(0, 10**6)))
    assert [(h.base_offset, h.last_offset) for h in headers] == [(0, 1), (2, 4), (5, 5)]
    with pytest.raises(ValueError):
        log.append(raws[0][:-1], 5)
    assert log.log_end_offset == 6
    log.close()


def test_log_append_time_rewrites_max_timestamp_and_crc(tmp_path):
    config = LogConfig(message_timestamp_type="LogAppendTime")
    log = PartitionLog.open(tmp_path / "t-0", config, 0)
    raw = batch(count=3, ts=T0)
    now = T0 + 12345
    result = log.append(memoryview(raw), now)
    assert result.log_append_time_ms == now and result.max_timestamp == now
    data = log.read(0, 10**6)
    header = check_batch(data)
    assert header.max_timestamp == now and header.attributes & 0x08
    assert header.base_timestamp == T0  # only maxTimestamp and the type bit change
    decoded = list(DefaultRecordBatch(bytearray(data)))
    assert [r.timestamp for r in decoded] == [now] * 3
    assert log.offset_for_timestamp(now) == (0, now)
    log.close()


def test_input_buffer_is_not_modified(tmp_path):
    log = PartitionLog.open(tmp_path / "t-0", LogConfig(), 0)
    log.append(batch(), 0)
    raw = bytearray(batch(count=2))
    before = bytes(raw)
    log.append(raw, 0)
    assert bytes(raw) == before
    assert log.read(1, 10**6) == stored(before, 1)
    log.close()


@pytest.mark.parametrize("log_append_time", [False, True])
@pytest.mark.parametrize("batches", [1, 3])
def test_each_batch_is_stamped_with_the_leader_epoch(tmp_path, log_append_time, batches):
    # Kafka's appendAsLeader writes the partition's leader epoch into partitionLeaderEpoch, which
    # the producer sent as -1 (Java) or 0 (kafka-python); the CRC does not cover it, so the batch
    # stays valid. Both append paths (one batch, several) and both timestamp types stamp it.
    # A log no leader writes (leader_epoch None: tools, tests) keeps the producer's epoch.
    log = PartitionLog.open(tmp_path / "t-0", LogConfig(message_timestamp_type="LogAppendTime" if log_append_time else "CreateTime"), 0)
    log.append(batch(partition_leader_epoch=-1), T0)
    log.leader_epoch = 0
    raw = b"".join(batch(count=2, partition_leader_epoch=-1) for _ in range(batches))
    log.append(raw, T0)
    log.leader_epoch = 7
    log.append(batch(partition_leader_epoch=-1), T0)
    headers = list(iter_headers(log.read(0, 10**6)))
    assert [h.partition_leader_epoch for h in headers] == [-1] + [0] * batches + [7]
    for h in headers:
        check_batch(log.read(h.base_offset, 10**6)[: h.size])
    log.close()


# -- reopen and recovery ------------------------------------------------------------------------


def _last_log_file(directory: Path) -> Path:
    return sorted(directory.glob("*.log"))[-1]


@pytest.mark.parametrize("garbage", [b"\x00", b"\xff" * 7, b"\x00" * 100, b"garbage" * 30])
def test_torn_write_is_truncated_after_unclean_shutdown(tmp_path, garbage):
    directory = tmp_path / "t-0"
    log = PartitionLog.open(directory, small_config(), 0)
    model = Model()
    fill(log, model, 12)
    log.close(clean=False)
    with open(_last_log_file(directory), "ab") as f:
        f.write(garbage)
    log = PartitionLog.open(directory, small_config(), 0)
    assert_same(log, model)
    fill(log, model, 5)
    assert_same(log, model)
    log.close()


def test_partial_batch_at_the_tail_is_truncated(tmp_path):
    directory = tmp_path / "t-0"
    log = PartitionLog.open(directory, small_config(), 0)
    model = Model()
    fill(log, model, 7)
    end = log.log_end_offset
    log.close(clean=False)
    torn = stored(batch(count=3, size=50), end)
    for cut in (1, 12, 61, len(torn) - 1):
        with open(_last_log_file(directory), "ab") as f:
            f.write(torn[:cut])
        log = PartitionLog.open(directory, small_config(), 0)
        assert_same(log, model)
        log.close(clean=False)


def test_garbage_after_clean_shutdown_is_caught_by_the_tail_check(tmp_path):
    directory = tmp_path / "t-0"
    log = PartitionLog.open(directory, small_config(), 0)
    model = Model()
    fill(log, model, 9)
    log.close()
    assert (directory / CLEAN_SHUTDOWN_FILE).exists()
    with open(_last_log_file(directory), "ab") as f:
        f.write(stored(batch(count=2), model.end)[:-3])
    log = PartitionLog.open(directory, small_config(), 0)
    assert not (directory / CLEAN_SHUTDOWN_FILE).exists()
    assert_same(log, model)
    log.close()


@pytest.mark.parametrize("clean", [False, True])
def test_corrupt_crc_in_tail_batch_is_truncated(tmp_path, clean):
    directory = tmp_path / "t-0"
    config = small_config(segment_bytes=100_000)
    log = PartitionLog.open(directory, config, 0)
    model = Model()
    fill(log, model, 6)
    log.close(clean=clean)
    path = _last_log_file(directory)
    data = bytearray(path.read_bytes())
    data[-2] ^= 0xFF  # inside the last batch's records, covered by its CRC
    path.write_bytes(bytes(data))
    model.batches.pop()
    model.end = model.batches[-1][1] + 1
    log = PartitionLog.open(directory, config, 0)
    assert_same(log, model)
    fill(log, model, 2)
    assert_same(log, model)
    log.close()


def test_last_segment_entirely_torn(tmp_path):
    directory = tmp_path / "t-0"
    log = PartitionLog.open(directory, small_config(), 0)
    model = Model()
    fill(log, model, 20)
    active_base = log.active_segment.base_offset
    assert active_base > 0
    log.close(clean=False)
    path = _last_log_file(directory)
    path.write_bytes(b"\x00" * 30)
    model.batches = [b for b in model.batches if b[0] < active_base]
    model.end = active_base
    log = PartitionLog.open(directory, small_config(), 0)
    assert_same(log, model)
    assert log.active_segment.size == 0
    fill(log, model, 3)
    assert_same(log, model)
    log.close()


def test_deleted_and_corrupt_index_files_are_rebuilt(tmp_path):
    directory = tmp_path / "t-0"
    config = small_config(index_interval_bytes=0)
    log = PartitionLog.open(directory, config, 0)
    model = Model()
    fill(log, model, 25)
    ts_answer = log.offset_for_timestamp(T0 + 10)
    log.close()
    before = {p.name: p.read_bytes() for p in directory.iterdir() if p.suffix in (".index", ".timeindex")}
    indexes = sorted(p for p in directory.iterdir() if p.suffix in (".index", ".timeindex"))
    for i, path in enumerate(indexes):
        if i % 3 == 0:
            path.unlink()
        elif i % 3 == 1:
            path.write_bytes(path.read_bytes() + b"\x01\x02\x03")
    log = PartitionLog.open(directory, config, 0)
    assert log.offset_for_timestamp(T0 + 10) == ts_answer
    for offset in range(model.end):
        assert log.read(offset, 10**6) == model.read(offset, 10**6)
    log.close()
    after = {p.name: p.read_bytes() for p in directory.iterdir() if p.suffix in (".index", ".timeindex")}
    assert after == before


def test_unclean_open_rebuilds_active_indexes(tmp_path):
    directory = tmp_path / "t-0"
    config = LogConfig(index_interval_bytes=0)
    log = PartitionLog.open(directory, config, 0)
    model = Model()
    fill(log, model, 10)
    log.close(clean=False)
    for path in directory.glob("*index"):
        path.write_bytes(b"")
    log = PartitionLog.open(directory, config, 0)
    assert len(log.active_segment.offset_index) > 0
    assert_same(log, model)
    for offset in range(model.end):
        assert log.read(offset, 1)[:8] == struct.pack(">q", max(b for b, _last, _ in model.batches if b <= offset))
    log.close()


# -- timestamps ---------------------------------------------------------------------------------


def test_offset_for_timestamp_and_latest_timestamp(tmp_path):
    """Kafka's answers: the first record with a timestamp >= the target, with its own timestamp, and
    the first record carrying the largest timestamp, never the base offset of the batch."""
    directory = tmp_path / "t-0"
    log = PartitionLog.open(directory, small_config(index_interval_bytes=0), 0)
    # Batches of 3 records with timestamps ts, ts+2, ts+1; batch i starts at T0 + 10 * i, offset 3 * i.
    for i in range(20):
        base = T0 + 10 * i
        log.append(make_batch([(None, b"x" * 20)] * 3, timestamps=[base, base + 2, base + 1]), 0)

    lookup = log.offset_for_timestamp
    assert lookup(T0 - 100) == (0, T0)
    assert lookup(T0) == (0, T0)
    assert lookup(T0 + 1) == (1, T0 + 2)  # the first record with ts >= target, not record 2's T0 + 1
    assert lookup(T0 + 3) == (3, T0 + 10)
    assert lookup(T0 + 101) == (31, T0 + 102)
    assert lookup(T0 + 192) == (58, T0 + 192)
    assert lookup(T0 + 193) is None
    assert log.latest_timestamp() == (58, T0 + 192)
    log.close()
    log = PartitionLog.open(directory, small_config(index_interval_bytes=0), 0)
    assert log.latest_timestamp() == (58, T0 + 192)
    assert log.offset_for_timestamp(T0 + 101) == (31, T0 + 102)
    log.delete_records_before(40)
    # Offsets 39 and 40 (in the batch holding 39..41) are searched from the log start: 40 is first.
    assert log.offset_for_timestamp(T0) == (40, T0 + 132)
    log.close()


@pytest.mark.parametrize("codec", ["gzip", "snappy", "snappy-xerial", "lz4", "zstd"])
def test_timestamp_lookups_inside_compressed_batches(tmp_path, codec):
    """A compressed batch is decompressed to answer the exact record: a target in the middle of a
    10-record batch gives that record, and the largest timestamp (out of order in its batch, and on
    a tie) gives the first record carrying it, before and after a reopen."""
    directory = tmp_path / "t-0"
    log = PartitionLog.open(directory, LogConfig(), 0)
    log.append(make_batch([(None, b"a%d" % i * 30) for i in range(10)],
                          timestamps=[T0 + 10 * i for i in range(10)], compression=codec), 0)
    # Offsets 10..19: 15 carries the largest timestamp, and so does 17 (a tie: 15 is the answer).
    out_of_order = [T0 + 200, T0 + 150, T0 + 300, T0 + 120, T0 + 250, T0 + 900, T0 + 100, T0 + 900,
                    T0 + 110, T0 + 130]
    log.append(make_batch([(b"k", b"b%d" % i * 30) for i in range(10)], timestamps=out_of_order,
                          compression=codec), 0)
    for reopen in (False, True):
        if reopen:
            log.close()
            log = PartitionLog.open(directory, LogConfig(), 0)
        assert log.offset_for_timestamp(T0 + 45) == (5, T0 + 50)
        assert log.offset_for_timestamp(T0 + 50) == (5, T0 + 50)
        assert log.offset_for_timestamp(T0 + 91) == (10, T0 + 200)
        assert log.offset_for_timestamp(T0 + 201) == (12, T0 + 300)
        assert log.offset_for_timestamp(T0 + 301) == (15, T0 + 900)
        assert log.offset_for_timestamp(T0 + 901) is None
        assert log.latest_timestamp() == (15, T0 + 900)
    log.close()


def test_log_append_time_compressed_batch_answers_its_first_record(tmp_path):
    """Every record of a LogAppendTime batch carries the append time (Kafka's DefaultRecord)."""
    log = PartitionLog.open(tmp_path / "t-0", LogConfig(message_timestamp_type="LogAppendTime"), 0)
    log.append(make_batch([(None, b"x")] * 4, timestamp_ms=1, compression="zstd"), T0)
    log.append(make_batch([(None, b"y")] * 4, timestamp_ms=1, compression="gzip"), T0 + 5000)
    assert log.offset_for_timestamp(2) == (0, T0)
    assert log.offset_for_timestamp(T0 + 1) == (4, T0 + 5000)
    assert log.latest_timestamp() == (4, T0 + 5000)
    log.close()


def test_a_batch_too_big_to_decompress_is_answered_at_batch_granularity(tmp_path, monkeypatch, caplog):
    """The bound on decompressed bytes holds: over it, the batch's first offset and max timestamp
    answer (and a warning says why), instead of an allocation the batch's bytes do not justify."""
    import minibroker.storage.timestamps

    monkeypatch.setattr(minibroker.storage.timestamps, "MAX_DECOMPRESSED_BATCH_BYTES", 1000)
    log = PartitionLog.open(tmp_path / "t-0", LogConfig(), 0)
    log.append(make_batch([(None, bytes(500))] * 10, timestamps=[T0 + i for i in range(10)],
                          compression="zstd"), 0)
    assert log.offset_for_timestamp(T0 + 5) == (0, T0 + 9)
    assert log.latest_timestamp() == (0, T0 + 9)
    assert "batch granularity" in caplog.text
    monkeypatch.setattr(minibroker.storage.timestamps, "MAX_DECOMPRESSED_BATCH_BYTES", 10**6)
    assert log.offset_for_timestamp(T0 + 5) == (5, T0 + 5)
    log.close()


def test_iter_batch_headers(tmp_path):
    log = PartitionLog.open(tmp_path / "t-0", small_config(), 0)
    model = Model()
    fill(log, model, 20)
    for start in range(model.end):
        headers = list(log.iter_batch_headers(start))
        expected = [(b, last) for b, last, _ in model.batches if last >= start]
        assert [(h.base_offset, h.last_offset) for h in headers] == expected
    assert list(log.iter_batch_headers(model.end)) == []
    first = next(log.iter_batch_headers(0))
    assert first.position == 0 and first.producer_id == -1
    log.close()


# -- retention, DeleteRecords, rolling by time, flushing ---------------------------------------


def test_retention_by_bytes(tmp_path):
    log = PartitionLog.open(tmp_path / "t-0", small_config(), 0)
    model = Model()
    fill(log, model, 40)
    sizes = [s.size for s in log.segments]
    limit = sum(sizes) // 2
    log.update_config(small_config(retention_bytes=limit))
    expected = 0
    excess = sum(sizes) - limit
    for size in sizes[:-1]:
        if excess - size < 0:
            break
        excess -= size
        expected += 1
    assert log.enforce_retention(0) == expected > 0
    assert log.size_bytes == sum(sizes[expected:])
    assert log.log_start_offset == log.segments[0].base_offset
    with pytest.raises(OffsetOutOfRangeError):
        log.read(0, 100)
    start = log.log_start_offset
    assert log.read(start, 10**6) == model.read(start, 10**6)
    assert log.enforce_retention(0) == 0
    log.close()
    log = PartitionLog.open(tmp_path / "t-0", small_config(), 0)
    assert log.log_start_offset == start
    log.close()


def test_retention_by_time_never_deletes_the_active_segment(tmp_path):
    config = small_config(retention_ms=1000)
    log = PartitionLog.open(tmp_path / "t-0", config, 0)
    model = Model()
    fill(log, model, 30)  # timestamps T0 .. T0 + 29
    segments = log.segments
    assert log.enforce_retention(T0) == 0
    cutoff_segment = segments[2]
    now = cutoff_segment.max_timestamp + 1000 + 1  # segments 0..2 are now too old
    assert log.enforce_retention(now) == 3
    assert log.log_start_offset == segments[3].base_offset
    assert log.enforce_retention(T0 + 10**9) == len(segments) - 4
    assert len(log.segments) == 1 and log.log_start_offset == log.active_segment.base_offset
    assert log.log_end_offset == model.end
    fill(log, model, 1)
    log.close()
    forever = small_config(retention_ms=-1)
    log = PartitionLog.open(tmp_path / "t-1", forever, 0)
    fill(log, Model(), 30)
    assert log.enforce_retention(T0 + 10**12) == 0
    log.close()


def test_delete_records_before(tmp_path):
    directory = tmp_path / "t-0"
    log = PartitionLog.open(directory, small_config(), 0)
    model = Model()
    fill(log, model, 30)
    segments_before = len(log.segments)
    target = log.segments[3].base_offset + 1
    assert log.delete_records_before(target) == target
    assert log.log_start_offset == target
    assert len(log.segments) == segments_before - 3
    with pytest.raises(OffsetOutOfRangeError):
        log.read(target - 1, 100)
    assert log.read(target, 10**6) == model.read(target, 10**6)
    assert log.delete_records_before(2) == target  # never moves back
    with pytest.raises(OffsetOutOfRangeError):
        log.delete_records_before(model.end + 1)
    log.close(clean=False)
    log = PartitionLog.open(directory, small_config(), 0)
    assert log.log_start_offset == target
    everything = model.end
    assert log.delete_records_before(everything) == everything
    assert log.read(everything, 100) == b""
    fill(log, model, 2)
    assert log.read(everything, 10**6) == model.read(everything, 10**6)
    log.close()
    log = PartitionLog.open(directory, small_config(), 0)
    assert log.log_start_offset == everything
    assert log.log_end_offset == model.end
    log.close()


def test_roll_by_segment_ms(tmp_path):
    """A non-empty segment rolls once more than segment.ms passed since its first append."""
    config = LogConfig(segment_ms=1000)
    log = PartitionLog.open(tmp_path / "t-0", config, 0)
    rolls = []
    log.on_roll = rolls.append
    log.append(batch(), 10_000)
    log.append(batch(), 10_999)
    log.append(batch(), 11_000)
    assert rolls == []
    log.append(batch(), 11_001)
    assert rolls == [3] and len(log.segments) == 2
    log.append(batch(), 12_001)
    assert rolls == [3]
    log.append(batch(), 12_002)
    assert rolls == [3, 5]
    log.close()


def test_flush_by_messages_and_by_time(tmp_path):
    log = PartitionLog.open(tmp_path / "t-0", LogConfig(flush_messages=3, flush_ms=100), 0)
    log.append(batch(count=2), 0)
    assert log.maybe_flush(50) is False
    assert log.maybe_flush(100) is True
    assert log.maybe_flush(500) is False  # nothing new
    log.append(batch(count=5), 600)  # reaches flush.messages: flushed at once
    assert log.maybe_flush(10_000) is False
    log.close()


def test_truncate_to(tmp_path):
    log = PartitionLog.open(tmp_path / "t-0", small_config(), 0)
    model = Model()
    fill(log, model, 20)
    cut = model.batches[10][0]
    log.truncate_to(cut)
    model.batches = model.batches[:10]
    model.end = cut
    assert_same(log, model)
    fill(log, model, 3)
    assert_same(log, model)
    log.close(clean=False)
    log = PartitionLog.open(tmp_path / "t-0", small_config(), 0)
    assert_same(log, model)
    log.close()


def test_delete_removes_the_directory(tmp_path):
    log = PartitionLog.open(tmp_path / "t-0", small_config(), 0)
    fill(log, Model(), 3)
    log.delete()
    assert not (tmp_path / "t-0").exists()


def test_large_batch_round_trip(tmp_path):
    log = PartitionLog.open(tmp_path / "t-0", LogConfig(message_timestamp_type="LogAppendTime"), 0)
    raw = make_batch([(None, os.urandom(1024 * 1024))])
    log.append(raw, 5)
    data = log.read(0, 1)
    assert len(data) == len(raw)
    check_batch(data)
    assert crc32c(data[21:]) == struct.unpack_from(">I", data, 17)[0]
    log.close()


def test_clean_open_trusts_the_log_and_unclean_open_scans_it(tmp_path):
    """A clean open reads no more than the active segment's tail: a corrupt batch in the middle is
    not noticed. An unclean open checks every batch of the active segment and truncates there."""
    directory = tmp_path / "t-0"
    config = LogConfig(index_interval_bytes=100)
    log = PartitionLog.open(directory, config, 0)
    model = Model()
    fill(log, model, 40)
    log.close()
    path = _last_log_file(directory)
    data = bytearray(path.read_bytes())
    victim_base, _, victim = model.batches[5]
    position = data.find(victim)
    data[position + len(victim) - 1] ^= 0xFF
    path.write_bytes(bytes(data))

    log = PartitionLog.open(directory, config, 0)
    assert log.log_end_offset == model.end
    log.close(clean=False)
    # A crash after only reading leaves the log clean: its marker stays until its first change.
    assert (directory / CLEAN_SHUTDOWN_FILE).exists()
    (directory / CLEAN_SHUTDOWN_FILE).unlink()  # as a crash after a change leaves it
    log = PartitionLog.open(directory, config, 0)
    assert log.log_end_offset == victim_base
    log.close()


# -- plausible but wrong indexes (docs/limits.md) -------------------------------------------------


def _index_entries(path: Path, entry: struct.Struct) -> list[tuple[int, int]]:
    return list(entry.iter_unpack(path.read_bytes()))


def _write_entries(path: Path, entry: struct.Struct, entries) -> None:
    path.write_bytes(b"".join(entry.pack(*e) for e in entries))


@pytest.mark.parametrize("clean", [True, False])
def test_a_plausible_but_wrong_offset_index_never_makes_a_read_skip_records(tmp_path, clean):
    """Every entry's position moved to the next batch's: still in order, still inside the file,
    so the load's sanity check passes it; the first lookup that uses an entry finds the batch at its
    position does not end at its offset, and the indexes are rebuilt from the log."""
    directory = tmp_path / "t-0"
    config = small_config(index_interval_bytes=0, segment_bytes=4000)
    log = PartitionLog.open(directory, config, 0)
    model = Model()
    fill(log, model, 60)
    assert len(log.segments) > 1
    log.close(clean=clean)
    originals = {}
    for path in sorted(directory.glob("*.index")):
        originals[path.name] = path.read_bytes()
        entries = _index_entries(path, struct.Struct(">ii"))
        shifted = [(o, p) for (o, _), (_, p) in zip(entries, entries[1:])]
        assert len(shifted) >= 3
        _write_entries(path, struct.Struct(">ii"), shifted)
    log = PartitionLog.open(directory, config, 0)
    for offset in range(model.end):
        assert log.read(offset, 1) == model.read(offset, 1), offset
    assert_same(log, model)
    log.close()
    # The rebuilt files are what the log had written (after a crash, the active segment had
    # written none: its entries reach the file at a flush, a roll or a clean close).
    assert {name: (directory / name).read_bytes() for name in originals} == originals


def test_a_plausible_but_wrong_time_index_never_makes_list_offsets_skip_records(tmp_path):
    directory = tmp_path / "t-0"
    config = small_config(index_interval_bytes=0, segment_bytes=4000)
    log = PartitionLog.open(directory, config, 0)
    model = Model()
    fill(log, model, 60)
    answers = {ts: log.offset_for_timestamp(ts) for ts in range(T0 - 1, T0 + 61)}
    log.close()
    for path in sorted(directory.glob("*.timeindex")):
        entries = _index_entries(path, struct.Struct(">qi"))
        # Each timestamp paired with the next entry's offset: in order, inside the segment, wrong.
        _write_entries(path, struct.Struct(">qi"), [(t, o) for (t, _), (_, o) in zip(entries, entries[1:])]
                       + entries[-1:])
    log = PartitionLog.open(directory, config, 0)
    assert {ts: log.offset_for_timestamp(ts) for ts in answers} == answers
    log.close()


@pytest.mark.parametrize("suffix", [".index", ".timeindex"])
def test_index_entries_past_the_segment_fail_the_sanity_check(tmp_path, suffix):
    """Kafka's sanityCheck: the last entry's offset must lie inside the segment."""
    directory = tmp_path / "t-0"
    config = small_config(index_interval_bytes=0, segment_bytes=4000)
    log = PartitionLog.open(directory, config, 0)
    model = Model()
    fill(log, model, 60)
    first, second = log.segments[0], log.segments[1]
    log.close()
    path = first.index_path if suffix == ".index" else first.time_index_path
    entry = struct.Struct(">ii" if suffix == ".index" else ">qi")
    entries = _index_entries(path, entry)
    beyond = second.base_offset - first.base_offset + 5
    entries.append((beyond, entries[-1][1] + 1) if suffix == ".index" else (entries[-1][0] + 1, beyond))
    _write_entries(path, entry, entries)
    log = PartitionLog.open(directory, config, 0)
    segment = log.segments[0]
    assert segment.max_timestamp == max(struct.unpack_from(">q", d, 35)[0] for b, _, d in model.batches
                                        if b < second.base_offset)
    assert all(offset < second.base_offset for offset, _ in segment.offset_index.entries())
    assert all(offset < second.base_offset for _, offset in segment.time_index.entries())
    for offset in range(model.end):
        assert log.read(offset, 1) == model.read(offset, 1)
    log.close()


def test_a_wrong_last_time_entry_of_the_active_segment_is_caught_at_a_clean_open(tmp_path):
    directory = tmp_path / "t-0"
    config = small_config(index_interval_bytes=0, segment_bytes=10**6)
    log = PartitionLog.open(directory, config, 0)
    model = Model()
    fill(log, model, 20)
    latest = log.latest_timestamp()
    log.close()
    (path,) = directory.glob("*.timeindex")
    entries = _index_entries(path, struct.Struct(">qi"))
    entries[-1] = (entries[-1][0] + 1000, entries[-1][1])  # a max timestamp no batch has
    _write_entries(path, struct.Struct(">qi"), entries)
    log = PartitionLog.open(directory, config, 0)
    assert log.latest_timestamp() == latest
    assert_same(log, model)
    log.close()


def test_retention_by_time_checks_the_largest_timestamp_against_the_log(tmp_path):
    """A time index whose last entry claims an old timestamp must not get a segment deleted."""
    directory = tmp_path / "t-0"
    config = small_config(index_interval_bytes=0, segment_bytes=4000, retention_ms=1000)
    log = PartitionLog.open(directory, config, 0)
    model = Model()
    fill(log, model, 60)
    segments = len(log.segments)
    log.close()
    first = sorted(directory.glob("*.timeindex"))[0]
    entries = _index_entries(first, struct.Struct(">qi"))
    # Every timestamp 11 days earlier: still in order and inside the segment, and wrong.
    _write_entries(first, struct.Struct(">qi"), [(t - 10**9, o) for t, o in entries])
    log = PartitionLog.open(directory, config, 0)
    assert log.enforce_retention(T0 + 100) == 0
    assert len(log.segments) == segments and log.segments[0].max_timestamp > T0
    assert_same(log, model)
    log.close()


@pytest.mark.parametrize("content", [b"", b"garbage", b"\xff\xfe"])
def test_an_unreadable_log_start_offset_is_recovered_from_the_segments(tmp_path, content):
    """The checkpoint is rebuilt from what is on disk (the first segment's base offset): records
    it had hidden become readable again, and nothing is deleted."""
    directory = tmp_path / "t-0"
    config = small_config(segment_bytes=300)
    log = PartitionLog.open(directory, config, 0)
    model = Model()
    fill(log, model, 30)
    log.delete_records_before(log.segments[2].base_offset + 1)
    first_base = log.segments[0].base_offset
    log.close()
    (directory / "log-start-offset").write_bytes(content)
    log = PartitionLog.open(directory, config, 0)
    assert log.log_start_offset == first_base
    assert log.read(first_base, 1 << 20) == model.read(first_base, 1 << 20)
    log.close()


# -- the one-batch append and the general one ---------------------------------------------------


def _append_general(log: PartitionLog, raw: bytes, now_ms: int):
    """The append path for any number of batches, taken here for one (what `append` did for every
    append before it grew its one-batch path)."""
    return log._append_batches(log._loaded_segments(), memoryview(raw), now_ms)


def _files(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


def _state(log: PartitionLog) -> list[tuple]:
    return [(s.base_offset, s.size, s.next_offset, s.max_timestamp, s.offset_of_max_timestamp,
             s.bytes_since_last_index_entry, s.first_append_ms, s.offset_index.entries(), s.time_index.entries())
            for s in log.segments]


@settings(max_examples=30, deadline=None)
@given(
    appends=st.lists(st.tuples(st.integers(1, 4), st.integers(0, 90), st.integers(-3, 3), st.integers(0, 400)),
                     min_size=1, max_size=40),
    segment_bytes=st.integers(150, 2000),
    index_interval=st.integers(0, 300),
    index_entries=st.integers(1, 6),
    segment_ms=st.sampled_from([1000, 10**9]),
    timestamp_type=st.sampled_from(["CreateTime", "LogAppendTime"]),
)
def test_the_one_batch_append_and_the_general_one_write_the_same_log(
        appends, segment_bytes, index_interval, index_entries, segment_ms, timestamp_type):
    """The Produce case's one-batch path of `append` against the general path, append by append:
    the same results, the same roll decisions (segment.bytes, segment.ms, full indexes: a
    segment.index.bytes of 1-6 entries), the same index entries (index.interval.bytes boundaries),
    the same bytes in every file."""
    config = LogConfig(segment_bytes=segment_bytes, index_interval_bytes=index_interval,
                       segment_index_bytes=12 * index_entries, segment_ms=segment_ms,
                       message_timestamp_type=timestamp_type)
    with tempfile.TemporaryDirectory() as tmp:
        fast = PartitionLog.open(Path(tmp) / "fast-0", config, 0)
        general = PartitionLog.open(Path(tmp) / "general-0", config, 0)
        now = 0
        for i, (count, size, ts_step, elapsed) in enumerate(appends):
            raw = batch(count=count, size=size, ts=T0 + 10 * i + ts_step)
            now += elapsed
            assert fast.append(raw, now) == _append_general(general, raw, now)
            assert _state(fast) == _state(general)
        assert fast.log_end_offset == sum(count for count, *_ in appends)
        fast.close()
        general.close()
        assert _files(Path(tmp) / "fast-0") == _files(Path(tmp) / "general-0")


@pytest.mark.parametrize("append", [PartitionLog.append, _append_general], ids=["one-batch", "general"])
def test_an_append_rolls_when_the_indexes_are_full(tmp_path, append):
    """segment.index.bytes bounds the entries of each index (Kafka rolls before an append to a
    segment whose offset or time index is full): 24 bytes = 3 offset entries, 2 time entries."""
    log = PartitionLog.open(tmp_path / "t-0", LogConfig(index_interval_bytes=0, segment_index_bytes=24), 0)
    for i in range(3):  # an entry in each index for every batch after the first (growing timestamps)
        append(log, batch(ts=T0 + i), 0)
    assert [s.base_offset for s in log.segments] == [0]
    active = log.active_segment
    assert (len(active.offset_index), len(active.time_index)) == (2, 2) and active.indexes_full()
    assert append(log, batch(ts=T0 + 3), 0).base_offset == 3
    assert [s.base_offset for s in log.segments] == [0, 3]
    log.close()


@pytest.mark.parametrize("append", [PartitionLog.append, _append_general], ids=["one-batch", "general"])
def test_an_append_rolls_when_its_offsets_would_not_fit_a_relative_offset(tmp_path, append):
    log = PartitionLog.open(tmp_path / "t-0", LogConfig(), 0)
    append(log, batch(count=2), 0)
    huge = bytearray(batch())
    struct.pack_into(">i", huge, 23, 0x7FFFFFFF - 1)  # lastOffsetDelta: the batch ends at 2 + 0x7FFFFFFE
    struct.pack_into(">I", huge, 17, crc32c(bytes(huge[21:])))
    assert append(log, bytes(huge), 0).last_offset == 0x7FFFFFFF + 1  # relative 0x7FFFFFFE in the new segment
    assert [s.base_offset for s in log.segments] == [0, 2]
    log.close()


@pytest.mark.parametrize("append", [PartitionLog.append, _append_general], ids=["one-batch", "general"])
@pytest.mark.parametrize("spare", [0, -1])
def test_an_append_rolls_only_when_it_would_pass_segment_bytes(tmp_path, append, spare):
    """Two batches fill segment.bytes exactly (spare 0: no roll) or pass it by one byte (a roll)."""
    raw = batch(count=2)
    log = PartitionLog.open(tmp_path / "t-0", LogConfig(segment_bytes=2 * len(raw) + spare), 0)
    append(log, raw, 0)
    append(log, raw, 0)
    assert [s.base_offset for s in log.segments] == ([0] if spare == 0 else [0, 2])
    append(log, raw, 0)
    assert [s.base_offset for s in log.segments] == ([0, 4] if spare == 0 else [0, 2, 4])
    log.close()


def test_a_read_cut_at_a_whole_batch_is_a_view_when_asked(tmp_path):
    """LogSegment.read's `view`: what a read cut short of max_bytes at the last whole batch returns
    is a memoryview of what was read (no copy), the same bytes as the copy; an uncut read stays bytes."""
    log = PartitionLog.open(tmp_path / "t-0", LogConfig(), 0)
    raws = [batch(count=2, size=100), batch(count=2, size=100), batch(count=2, size=100)]
    for raw in raws:
        log.append(raw, T0)
    cut = len(raws[0]) + len(raws[1]) + 10  # past two batches, inside the third
    copied, viewed = log.read(0, cut), log.read(0, cut, view=True)
    assert type(copied) is bytes and isinstance(viewed, memoryview)
    assert bytes(viewed) == copied and len(copied) == len(raws[0]) + len(raws[1])
    assert type(log.read(0, 1 << 20, view=True)) is bytes  # not cut: the read itself
    follower = PartitionLog.open(tmp_path / "f-0", LogConfig(), 0)
    follower.follower = True
    follower.append_replicated(viewed, T0)
    assert follower.read(0, 1 << 20) == copied
    log.close()
    follower.close()
