"""Producer state after an unclean stop is rebuilt before the broker serves (docs/benchmarks.md):
a recovered partition whose log runs EAGER_REBUILD_BYTES or more past its newest snapshot is
replayed while the Broker is constructed (before any listener exists) and snapshotted at its log
end; smaller ones, and every partition after a clean stop, stay lazy. Real files on disk, the
Broker built in process as `minibroker serve` builds it."""

from __future__ import annotations

import time

from minibroker.broker import Broker
from minibroker.config import BrokerConfig
from minibroker.producers import EAGER_REBUILD_BYTES, replay_bytes
from minibroker.protocol.errors import ErrorCode
from minibroker.protocol.records import read_header
from minibroker.storage.config import LogConfig
from minibroker.storage.manager import LogManager
from minibroker.storage.producer_state.snapshot import list_snapshots
from tests.support.batches import make_batch

BIG_PIDS = (11, 12, 13)
SMALL_PID = 99
VALUE = bytes(200)


def write_logs(data_dir, *, clean: bool, threads_of_big: int = 1) -> dict[str, int]:
    """Topics `big-<i>` (idempotent batches past EAGER_REBUILD_BYTES, producers BIG_PIDS in turn)
    and `small` (two batches of SMALL_PID); closed cleanly or not. Batches per big partition."""
    now_ms = int(time.time() * 1000)
    logs = LogManager.open(data_dir, LogConfig(), now_ms)
    count = EAGER_REBUILD_BYTES // len(make_batch([(None, VALUE)] * 5)) + 10
    for i in range(threads_of_big):
        logs.create_topic(f"big-{i}", 1, {}, now_ms)
        log = logs.log(f"big-{i}", 0)
        for n in range(count):
            pid = BIG_PIDS[n % len(BIG_PIDS)]
            log.append(make_batch([(None, VALUE)] * 5, producer_id=pid, producer_epoch=0,
                                  base_sequence=5 * (n // len(BIG_PIDS)), timestamp_ms=now_ms), now_ms)
    logs.create_topic("small", 1, {}, now_ms)
    for n in range(2):
        logs.log("small", 0).append(make_batch([(None, b"v")], producer_id=SMALL_PID, producer_epoch=0,
                                               base_sequence=n, timestamp_ms=now_ms), now_ms)
    logs.close(clean=clean)
    return {"batches": count}


def start(data_dir, **overrides) -> Broker:
    props = {"log.dirs": str(data_dir), "listeners": "127.0.0.1:0"}
    props.update({k.replace("_", "."): str(v) for k, v in overrides.items()})
    return Broker(BrokerConfig(props))


def test_unclean_stop_rebuilds_large_partitions_before_serving(tmp_path, caplog):
    written = write_logs(tmp_path / "data", clean=False)
    caplog.set_level("INFO", logger="minibroker.producers")
    broker = start(tmp_path / "data")
    try:
        # Before any request: the big partition's producers are loaded, the small one's are not.
        assert broker.producer_states.entry_count == len(BIG_PIDS)
        big = broker.logs.log("big-0", 0)
        assert [offset for offset, _ in list_snapshots(big.directory)] == [big.log_end_offset]
        assert replay_bytes(big) == 0
        assert list_snapshots(broker.logs.log("small", 0).directory) == []
        assert any("rebuilt the producer state of 1 partition(s)" in r.getMessage() for r in caplog.records)
        # The state rebuilt is the log's: the last batch again is a duplicate, the next one fits.
        n = written["batches"] - 1
        pid = BIG_PIDS[n % len(BIG_PIDS)]
        last = make_batch([(None, VALUE)] * 5, producer_id=pid, producer_epoch=0,
                          base_sequence=5 * (n // len(BIG_PIDS)))
        now_ms = broker.clock.now_ms()
        end = big.log_end_offset
        duplicate = broker.append_checked("big-0", 0, big, read_header(last), last, now_ms)
        assert (duplicate.error_code, big.log_end_offset) == (ErrorCode.duplicate_sequence_number, end)
        assert duplicate.base_offset == end - 5
        following = make_batch([(None, VALUE)], producer_id=pid, producer_epoch=0,
                               base_sequence=5 * (n // len(BIG_PIDS)) + 5)
        appended = broker.append_checked("big-0", 0, big, read_header(following), following, now_ms)
        assert (appended.error_code, appended.base_offset) == (ErrorCode.none, end)
    finally:
        broker.close()


def test_several_large_partitions_rebuild_on_recovery_threads(tmp_path):
    write_logs(tmp_path / "data", clean=False, threads_of_big=3)
    broker = start(tmp_path / "data", num_recovery_threads_per_data_dir=2)
    try:
        assert broker.producer_states.entry_count == 3 * len(BIG_PIDS)
        for i in range(3):
            log = broker.logs.log(f"big-{i}", 0)
            assert [offset for offset, _ in list_snapshots(log.directory)] == [log.log_end_offset]
    finally:
        broker.close()


def test_clean_stop_leaves_every_partition_lazy(tmp_path):
    write_logs(tmp_path / "data", clean=True)
    broker = start(tmp_path / "data")
    try:
        assert broker.producer_states.entry_count == 0
        assert list_snapshots(tmp_path / "data" / "big-0") == []
        assert broker.producer_states.holds(SMALL_PID, broker.clock.now_ms())  # loaded at first use
    finally:
        broker.close()


def test_replay_bytes_counts_from_the_newest_snapshot(tmp_path):
    """From the batch holding the newest snapshot's offset to the log end; a snapshot above the log
    end (left by a truncation) is not counted as one."""
    now_ms = int(time.time() * 1000)
    logs = LogManager.open(tmp_path / "data", LogConfig(), now_ms)
    logs.create_topic("t", 1, {}, now_ms)
    log = logs.log("t", 0)
    batch = make_batch([(None, VALUE)], producer_id=5, producer_epoch=0, base_sequence=0)
    try:
        assert replay_bytes(log) == 0
        for _ in range(10):
            log.append(batch, now_ms)
        assert replay_bytes(log) == 10 * len(batch)
        (log.directory / f"{4:020d}.snapshot").write_bytes(b"")  # only its name is read here
        assert replay_bytes(log) == 6 * len(batch)
        (log.directory / f"{50:020d}.snapshot").write_bytes(b"")
        assert replay_bytes(log) == 6 * len(batch)
        (log.directory / f"{10:020d}.snapshot").write_bytes(b"")
        assert replay_bytes(log) == 0
    finally:
        logs.close()
