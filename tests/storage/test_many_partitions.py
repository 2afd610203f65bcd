"""Many partitions in few descriptors (docs/storage.md), on real files: the LogManager registers partitions
without opening them, loads one at its first use, keeps at most log.max.open.files segment files
open however many partitions are used (counted in /proc/self/fd), loses no record and no index entry
when files are evicted and reopened, recovers after a crash only the partitions changed since their
last clean load (on one thread or several), and closes cleanly with one sync of the file system."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

import minibroker.storage.manager
from minibroker.storage.config import LogConfig
from minibroker.storage.file_cache import FileCache
from minibroker.storage.log_dir import CLEAN_SHUTDOWN_FILE
from minibroker.storage.manager import LogManager
from tests.support.batches import make_batch
from tests.support.broker_process import open_files_under

T0 = 1_700_000_000_000
CONFIG = LogConfig(segment_bytes=600, index_interval_bytes=0)


def open_segment_files(data_dir: Path) -> list[str]:
    """The partitions' segment files open (the metadata log's, which the open reads, left out)."""
    return [path for path in open_files_under(data_dir)
            if path.endswith(".log") and "/__cluster_metadata-0/" not in path]


def value(topic: int, partition: int, i: int) -> bytes:
    return b"%d-%d-%d" % (topic, partition, i)


def batch_of(topic: int, partition: int, i: int, ts: int = T0) -> bytes:
    return make_batch([(None, value(topic, partition, i) * 4)], timestamp_ms=ts)


def values(log) -> list[bytes]:
    from minibroker.protocol.records import decode_records

    data, out, position = log.read(log.log_start_offset, 1 << 30), [], 0
    while position < len(data):
        size = int.from_bytes(data[position + 8 : position + 12], "big") + 12
        out += [v for _, _, _, v in decode_records(data[position : position + size])]
        position += size
    return out


def make_topics(data_dir: Path, topics: int, partitions: int, cache: int = 4) -> LogManager:
    manager = LogManager.open(data_dir, CONFIG, 0, files=FileCache(cache))
    for t in range(topics):
        manager.create_topic(f"t{t}", partitions, {}, 0)
    return manager


def test_idle_partitions_hold_no_descriptor_and_load_at_first_use(tmp_path):
    manager = make_topics(tmp_path, 20, 3)
    for t in range(20):
        manager.log(f"t{t}", 1).append(batch_of(t, 1, 0), 0)
    assert len(open_segment_files(tmp_path)) <= 4  # 60 partitions used, 4 files open
    manager.close()
    assert open_segment_files(tmp_path) == []

    reopened = LogManager.open(tmp_path, CONFIG, 0, files=FileCache(4))
    assert reopened.recovery.partitions == 60 and reopened.recovery.recovered == 0
    assert not any(log.loaded for _, _, log in reopened.logs())
    assert open_segment_files(tmp_path) == []
    assert reopened.log("t7", 1).size_bytes > 0 and not reopened.log("t7", 1).loaded  # from a listing
    assert values(reopened.log("t7", 1)) == [value(7, 1, 0) * 4]
    assert [(n, p) for n, p, log in reopened.logs() if log.loaded] == [("t7", 1)]
    assert len(open_segment_files(tmp_path)) == 1
    reopened.close()
    # Only read since its clean load: nothing to recover, whatever happens next.
    assert all((tmp_path / f"t{t}-{p}" / CLEAN_SHUTDOWN_FILE).exists() for t in range(20) for p in range(3))


def test_a_tiny_cache_serves_many_partitions_and_loses_nothing_on_eviction(tmp_path):
    """20 partitions, several segments each (rolls at 600 bytes), an index entry per batch, and
    three open files at most: reads match a model at every step; after a clean close and reopen
    every index file holds the entries it had in memory; after a crash every record is back."""
    rng = random.Random(21)
    manager = make_topics(tmp_path, 10, 2, cache=3)
    partitions = [(t, p) for t in range(10) for p in range(2)]
    model: dict[tuple[int, int], list[bytes]] = {tp: [] for tp in partitions}
    for i in range(300):
        t, p = rng.choice(partitions)
        log = manager.log(f"t{t}", p)
        log.append(batch_of(t, p, i, T0 + i), i)
        model[(t, p)].append(value(t, p, i) * 4)
        if i % 7 == 0:
            t, p = rng.choice(partitions)
            assert values(manager.log(f"t{t}", p)) == model[(t, p)]
        assert len(open_segment_files(tmp_path)) <= 3
    assert manager.files.evictions > 100
    assert max(len(manager.log(f"t{t}", p).segments) for t, p in partitions) > 3
    logs = {(t, p): manager.log(f"t{t}", p) for t, p in partitions}
    manager.close()  # (which adds each active segment's final time-index entry)
    indexes = {
        (t, p, s.base_offset): (s.offset_index.entries(), s.time_index.entries())
        for (t, p), log in logs.items() for s in log.segments
    }

    reopened = LogManager.open(tmp_path, CONFIG, 0, files=FileCache(3))
    assert reopened.recovery.recovered == 0
    for t, p in partitions:
        log = reopened.log(f"t{t}", p)
        assert values(log) == model[(t, p)]
        for s in log.segments:
            assert (s.offset_index.entries(), s.time_index.entries()) == indexes[(t, p, s.base_offset)]
    for i in range(40):  # change half of them, then crash
        t, p = partitions[i % 10 * 2]
        reopened.log(f"t{t}", p).append(batch_of(t, p, 1000 + i), 1000)
        model[(t, p)].append(value(t, p, 1000 + i) * 4)
    reopened.close(clean=False)

    after_crash = LogManager.open(tmp_path, CONFIG, 0, files=FileCache(3))
    assert after_crash.recovery.recovered == 10
    for t, p in partitions:
        assert values(after_crash.log(f"t{t}", p)) == model[(t, p)]
    after_crash.close()


@pytest.mark.parametrize("threads, large_from, used", [(1, None, 1), (3, 0, 2), (3, None, 1)])
def test_after_a_crash_only_the_partitions_changed_since_their_clean_load_are_recovered(
        tmp_path, monkeypatch, threads, large_from, used):
    """Recovered on worker threads when their last segment is large (here: any size, with
    PARALLEL_RECOVERY_BYTES 0); small ones on the calling thread (threads would only contend)."""
    if large_from is not None:
        monkeypatch.setattr(minibroker.storage.manager, "PARALLEL_RECOVERY_BYTES", large_from)
    manager = make_topics(tmp_path, 10, 1)
    for t in range(10):
        manager.log(f"t{t}", 0).append(batch_of(t, 0, 0), 0)
    manager.close()

    manager = LogManager.open(tmp_path, CONFIG, 0, files=FileCache(4))
    for t in (0, 1, 2):  # read only: stays clean
        assert values(manager.log(f"t{t}", 0)) == [value(t, 0, 0) * 4]
    for t in (3, 4):
        manager.log(f"t{t}", 0).append(batch_of(t, 0, 1), 0)
    with open(tmp_path / "t4-0" / "00000000000000000000.log", "ab") as torn:
        torn.write(batch_of(4, 0, 2)[:-5])  # a write the crash cut short
    manager.close(clean=False)
    marked = sorted(path.parent.name for path in tmp_path.glob(f"t*/{CLEAN_SHUTDOWN_FILE}"))
    assert marked == [f"t{t}-0" for t in (0, 1, 2, 5, 6, 7, 8, 9)]

    recovered = LogManager.open(tmp_path, CONFIG, 0, files=FileCache(4), threads=threads)
    assert (recovered.recovery.recovered, recovered.recovery.threads) == (2, used)
    assert sorted(n for n, _, log in recovered.logs() if log.loaded) == ["t3", "t4"]
    assert values(recovered.log("t4", 0)) == [value(4, 0, 0) * 4, value(4, 0, 1) * 4]
    assert all(values(recovered.log(f"t{t}", 0))[0] == value(t, 0, 0) * 4 for t in range(10))
    recovered.close()


def test_retention_loads_an_idle_log_only_when_it_has_old_segments(tmp_path):
    config = LogConfig(segment_bytes=300, index_interval_bytes=0, retention_ms=1000)
    manager = LogManager.open(tmp_path, config, 0)
    manager.create_topic("old", 1, {}, 0)
    manager.create_topic("single", 1, {}, 0)
    for i in range(6):
        manager.log("old", 0).append(batch_of(0, 0, i, T0), 0)
    manager.log("single", 0).append(batch_of(1, 0, 0, T0), 0)
    assert len(manager.log("old", 0).segments) > 1
    manager.close()

    reopened = LogManager.open(tmp_path, config, 0)
    assert reopened.enforce_retention(T0 + 10_000) >= 1
    assert reopened.log("old", 0).loaded and not reopened.log("single", 0).loaded
    assert len(reopened.log("old", 0).segments) == 1
    reopened.close()


@pytest.mark.parametrize("syncfs", [True, False])
def test_a_clean_close_leaves_every_changed_log_durable_and_marked(tmp_path, monkeypatch, syncfs):
    """One syncfs for the whole data directory where the kernel has it, an fsync per file where not:
    either way every changed log gets its index files and its marker, and reopens without recovery."""
    if not syncfs:
        monkeypatch.setattr(minibroker.storage.manager, "sync_filesystem", lambda directory: False)
    synced = []
    if syncfs:
        real = minibroker.storage.manager.sync_filesystem
        monkeypatch.setattr(minibroker.storage.manager, "sync_filesystem", lambda d: synced.append(d) or real(d))
    manager = make_topics(tmp_path, 8, 2)
    for t in range(8):
        manager.log(f"t{t}", 0).append(batch_of(t, 0, 0), 0)
    manager.close()
    assert synced == ([tmp_path] if syncfs else [])
    for t in range(8):
        assert (tmp_path / f"t{t}-0" / CLEAN_SHUTDOWN_FILE).exists()
        assert (tmp_path / f"t{t}-0" / "00000000000000000000.timeindex").stat().st_size == 12
    reopened = LogManager.open(tmp_path, CONFIG, 0)
    assert reopened.recovery.recovered == 0
    assert [values(reopened.log(f"t{t}", 0)) for t in range(8)] == [[value(t, 0, 0) * 4] for t in range(8)]
    reopened.close()
