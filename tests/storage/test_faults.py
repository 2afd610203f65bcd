"""Storage faults (disk full, read-only data directory, out of file descriptors) never leave a log
inconsistent, and it recovers by itself once the disk works again: a failed append leaves nothing
behind (a partial write is cut away, now or before the next append), a failed roll leaves the old
segment active, index files are rewritten from memory, and a reopened log matches what was
acknowledged. Over the wire: KAFKA_STORAGE_ERROR per partition (NOT_COORDINATOR for offset
commits, as Kafka maps it), the connection stays open, no restart is needed. Faults are injected
at the storage layer's boundary with the OS (tests/support/faultyfs.py); a real read-only directory is
used where the test does not run as root."""

from __future__ import annotations

import errno
import os
import struct

import pytest

from minibroker.admin_client import AdminClient
from minibroker.testing import running_broker
from minibroker.storage.config import LogConfig
from minibroker.storage.log import PartitionLog
from tests.support.batches import make_batch
from tests.support.faultyfs import install, is_index_fd
from tests.support.wire import produced

KAFKA_STORAGE_ERROR, NOT_COORDINATOR = 56, 16


def batch(i: int, n: int = 3) -> bytes:
    return make_batch([(b"k", b"value-%d-%d" % (i, j)) for j in range(n)])


def contents(log) -> bytes:
    return log.read(0, 1 << 30)


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EROFS, errno.EIO])
@pytest.mark.parametrize("partial", [False, True])
def test_a_failed_write_leaves_nothing_behind_and_the_log_carries_on(tmp_path, monkeypatch, code, partial):
    log = PartitionLog.open(tmp_path / "t-0", LogConfig(index_interval_bytes=0), 0)
    log.append(batch(0), 0)
    fake = install(monkeypatch)
    fake.partial_writes = partial
    before = (contents(log), log.log_end_offset, log.size_bytes)
    fake.fail("writev", code)
    for i in range(3):
        with pytest.raises(OSError):
            log.append(batch(i + 1), 0)
    assert (contents(log), log.log_end_offset, log.size_bytes) == before
    assert os.path.getsize(log.active_segment.log_path) == log.size_bytes  # the partial write was cut
    fake.heal()
    assert log.append(batch(9), 0).base_offset == 3  # the next offset, no gap
    expected = contents(log)
    log.close(clean=False)
    reopened = PartitionLog.open(tmp_path / "t-0", LogConfig(index_interval_bytes=0), 0)
    assert contents(reopened) == expected and reopened.log_end_offset == 6
    reopened.close()


def test_a_partial_write_that_cannot_be_cut_is_cut_before_the_next_append(tmp_path, monkeypatch):
    """Read-only after a partial write: the cut fails too. Reads never see the torn bytes; the next
    append cuts them first (and fails while it cannot)."""
    log = PartitionLog.open(tmp_path / "t-0", LogConfig(), 0)
    log.append(batch(0), 0)
    fake = install(monkeypatch)
    fake.partial_writes = True
    fake.fail("writev", errno.EROFS)
    fake.fail("ftruncate", errno.EROFS)
    with pytest.raises(OSError):
        log.append(batch(1), 0)
    assert os.path.getsize(log.active_segment.log_path) > log.size_bytes  # torn bytes on disk
    assert log.read(0, 1 << 20) == contents(log) and log.log_end_offset == 3
    fake.heal()
    fake.fail("ftruncate", errno.EROFS)  # still read-only: the next append cannot cut, so it fails
    with pytest.raises(OSError):
        log.append(batch(1), 0)
    fake.heal()
    assert log.append(batch(2), 0).base_offset == 3
    assert os.path.getsize(log.active_segment.log_path) == log.size_bytes
    expected = stored_batches([batch(0), batch(2)])
    assert contents(log) == expected
    log.close(clean=True)
    reopened = PartitionLog.open(tmp_path / "t-0", LogConfig(), 0)
    assert reopened.log_end_offset == 6 and contents(reopened) == expected
    reopened.close()


def stored_batches(raws: list[bytes]) -> bytes:
    out, offset = b"", 0
    for raw in raws:
        out += struct.pack(">q", offset) + raw[8:]
        offset += struct.unpack_from(">i", raw, 57)[0]
    return out


def test_a_failed_fsync_under_flush_messages_1_takes_the_append_back(tmp_path, monkeypatch):
    log = PartitionLog.open(tmp_path / "t-0", LogConfig(flush_messages=1), 0)
    log.append(batch(0), 0)
    expected = contents(log)
    fake = install(monkeypatch)
    fake.fail("fsync", errno.EIO)
    with pytest.raises(OSError):
        log.append(batch(1), 0)
    assert contents(log) == expected and log.log_end_offset == 3
    fake.heal()
    assert log.append(batch(2), 0).base_offset == 3
    log.close()


@pytest.mark.parametrize("code", [errno.EMFILE, errno.ENOSPC, errno.EACCES])
def test_a_roll_that_cannot_create_the_new_segment_leaves_the_old_one_active(tmp_path, monkeypatch, code):
    config = LogConfig(segment_bytes=300, index_interval_bytes=0)
    log = PartitionLog.open(tmp_path / "t-0", config, 0)
    log.append(batch(0), 0)
    log.append(batch(1), 0)
    fake = install(monkeypatch)
    fake.fail("open", code, when=lambda path, *a: str(path).endswith(".log"))
    for i in range(3):
        with pytest.raises(OSError):
            log.append(batch(2 + i), 0)
    assert len(log.segments) == 1 and log.log_end_offset == 6
    assert sorted(p.name for p in (tmp_path / "t-0").iterdir() if p.suffix == ".log") == ["00000000000000000000.log"]
    fake.heal()
    assert log.append(batch(5), 0).base_offset == 6
    assert len(log.segments) == 2
    for offset in range(9):
        assert struct.unpack_from(">q", log.read(offset, 1))[0] == offset // 3 * 3
    log.close()


def test_index_files_that_cannot_be_written_are_rewritten_from_memory(tmp_path, monkeypatch):
    """Index entries reach their files at a flush (minibroker.storage.index); a flush whose index writes fail
    raises (nothing is called durable that is not), keeps every entry in memory, and the next
    flush, or the clean close, writes the files whole."""
    config = LogConfig(index_interval_bytes=0)
    log = PartitionLog.open(tmp_path / "t-0", config, 0)
    for i in range(10):
        log.append(batch(i), 0)  # appends write the log only
    assert not log.active_segment.index_path.exists()
    fake = install(monkeypatch)
    fake.fail("write", errno.ENOSPC, when=lambda fd, data: is_index_fd(fd))
    with pytest.raises(OSError):
        log.flush()
    assert len(log.active_segment.offset_index) == 9 and fake.calls_failed >= 1
    assert os.path.getsize(log.active_segment.index_path) == 0
    fake.heal()
    log.close(clean=True)  # the flush rewrites the index files
    segment = log.segments[0]
    assert os.path.getsize(segment.index_path) == 9 * 8 and os.path.getsize(segment.time_index_path) > 0
    reopened = PartitionLog.open(tmp_path / "t-0", config, 0)
    assert reopened.active_segment.offset_index.entries() == segment.offset_index.entries()
    reopened.close()


# ---- over the wire -------------------------------------------------------------------------------


def _produce(c, topic: str, value: bytes):
    return produced(c, topic, make_batch([(None, value)], timestamp_ms=0))


def _fetch_values(c, topic: str) -> list[bytes]:
    from minibroker.protocol.records import decode_records

    response = c.call(1, {"replica_id": -1, "max_wait": 0, "min_bytes": 1, "max_bytes": 1 << 20,
                          "isolation_level": 0, "session_id": 0, "session_epoch": -1,
                          "topics": [{"topic": topic, "partitions": [{
                              "partition": 0, "current_leader_epoch": -1, "fetch_offset": 0,
                              "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}],
                          "forgotten_topics_data": ()}, version=11)
    data = response.responses[0].partitions[0].records
    values, position = [], 0
    while position < len(data):
        size = struct.unpack_from(">i", data, position + 8)[0] + 12
        values += [v for _, _, _, v in decode_records(data[position : position + size])]
        position += size
    return values


def _create(c, name: str):
    return c.call(19, {"topics": [{"name": name, "num_partitions": 1, "replication_factor": 1,
                                   "assignments": (), "configs": ()}], "timeout": 5000,
                       "validate_only": False}).topics[0]


def _commit(c, topic: str, offset: int):
    response = c.call(8, {"group_id": "g", "generation_id_or_member_epoch": -1, "member_id": "",
                          "group_instance_id": None, "retention_time_ms": -1,
                          "topics": [{"name": topic, "partitions": [{"partition_index": 0, "committed_offset": offset,
                                                                     "committed_leader_epoch": -1,
                                                                     "committed_metadata": ""}]}]}, version=8)
    return response.topics[0].partitions[0].error_code


def test_a_full_disk_answers_kafka_storage_error_and_the_broker_recovers_by_itself(tmp_path, monkeypatch):
    data = tmp_path / "data"
    with running_broker(data) as broker:
        with AdminClient(broker.bootstrap) as c:
            assert _create(c, "t").error_code == 0
            assert _produce(c, "t", b"before").error_code == 0
            fake = install(monkeypatch)
            fake.fail("writev", errno.ENOSPC)
            fake.fail("open", errno.ENOSPC, when=lambda path, *a: not str(path).startswith("/proc"))
            refused = _produce(c, "t", b"lost")
            assert refused.error_code == KAFKA_STORAGE_ERROR and "No space left" in refused.error_message
            # The same connection goes on; what is stored is still served; nothing new is created.
            assert _fetch_values(c, "t") == [b"before"]
            created = _create(c, "u")
            assert created.error_code == KAFKA_STORAGE_ERROR and created.error_message
            assert _commit(c, "t", 1) == NOT_COORDINATOR
            init = c.call(22, {"transactional_id": None, "transaction_timeout": 60000,
                               "producer_id": -1, "producer_epoch": -1}, version=4)
            assert init.error_code == KAFKA_STORAGE_ERROR
            assert fake.calls_failed >= 4
            fake.heal()
            # Room again: no restart needed.
            after = _produce(c, "t", b"after")
            assert (after.error_code, after.base_offset) == (0, 1)
            assert _create(c, "u").error_code == 0
            assert _commit(c, "t", 2) == 0
            assert _fetch_values(c, "t") == [b"before", b"after"]
    with running_broker(data) as broker:
        with AdminClient(broker.bootstrap) as c:
            assert _fetch_values(c, "t") == [b"before", b"after"]
        assert broker.broker.groups.store.offsets["g"][("t", 0)].offset == 2


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only directories; the shim test above covers it")
def test_a_really_read_only_partition_directory_answers_kafka_storage_error(tmp_path):
    data = tmp_path / "data"
    with running_broker(data, log_segment_bytes=str(1 << 20)) as broker:
        with AdminClient(broker.bootstrap) as c:
            c.call(19, {"topics": [{"name": "t", "num_partitions": 1, "replication_factor": 1, "assignments": (),
                                    "configs": [{"name": "internal.segment.bytes", "value": "200"}]}],
                        "timeout": 5000, "validate_only": False})
            assert _produce(c, "t", b"x" * 150).error_code == 0
            directory = data / "t-0"
            directory.chmod(0o555)  # the next produce must roll into a new segment file: refused
            try:
                assert _produce(c, "t", b"y" * 150).error_code == KAFKA_STORAGE_ERROR
            finally:
                directory.chmod(0o755)
            assert _produce(c, "t", b"z" * 150).error_code == 0
            assert _fetch_values(c, "t") == [b"x" * 150, b"z" * 150]


def test_a_connection_flood_cannot_take_the_descriptors_segment_files_need(tmp_path):
    """Connections and segment files draw on one descriptor budget (minibroker.descriptors): under a
    real limit of 80, a broker keeps more topics than log.max.open.files lets it hold open, and a
    flood of idle connections larger than the process could accept waits in the listen backlog once
    the connections' share is taken, instead of taking the descriptors files need: every request
    that needs a file is still served, and the broker never hits EMFILE. (EMFILE itself, from
    descriptors outside the budget, answers KAFKA_STORAGE_ERROR: the faulty-filesystem tests above.)"""
    import socket

    from tests.support.broker_process import BrokerProcess

    flood: list[socket.socket] = []
    with BrokerProcess(tmp_path / "data", nofile=80, log_level="WARNING") as broker:
        host, port = broker.bootstrap.rsplit(":", 1)
        try:
            with AdminClient(broker.bootstrap) as c:
                assert {_create(c, f"t{i}").error_code for i in range(60)} == {0}
                assert _produce(c, "t0", b"v").error_code == 0
                for _ in range(100):  # more than the process could accept
                    sock = socket.socket()
                    sock.setblocking(False)
                    sock.connect_ex((host, int(port)))  # completes in the backlog, accepted or not
                    flood.append(sock)
                for i in range(60):
                    assert _produce(c, f"t{i}", b"w").error_code == 0
                assert _create(c, "again").error_code == 0
                assert _produce(c, "again", b"v").error_code == 0
                assert _fetch_values(c, "t0") == [b"v", b"w"]
            assert broker.alive()
        finally:
            for sock in flood:
                sock.close()
    log_text = broker.log_path.read_text()
    assert "Too many open files" not in log_text and "Traceback" not in log_text
