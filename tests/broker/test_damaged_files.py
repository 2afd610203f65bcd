"""Every file the broker reads at start, damaged: the broker refuses to start with a message naming
the file (and deletes nothing), or recovers from what is on disk. Never both guess and delete
(docs/limits.md). Indexes, segments and snapshots, which are rebuilt from the log, are covered in
test_storage_index.py, test_storage_log.py and test_producer_state.py."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from minibroker.admin_client import AdminClient
from minibroker.testing import running_broker
from minibroker.protocol.records import decode_records, encode_batch, iter_headers
from minibroker.storage.config import LogConfig
from minibroker.storage.errors import DamagedFileError
from minibroker.storage.manager import LogManager
from minibroker.storage.offsets_store import TOPIC as OFFSETS_TOPIC, OffsetAndMetadata, OffsetsStore
from tests.support.cleaning import clean_fully
from tests.support.damage import sole_error

KAFKA_STORAGE_ERROR = 56


def _tree(root):
    return {str(p.relative_to(root)): p.read_bytes() if p.is_file() else None
            for p in sorted(root.rglob("*")) if p.name != ".lock"}


def _start_fails(data_dir) -> BaseException:
    with pytest.raises(BaseException) as failed:
        with running_broker(data_dir):
            pass
    return sole_error(failed.value)


def _commit(data_dir, offset: int) -> None:
    with running_broker(data_dir) as broker:
        def commit():
            broker.broker.groups.store.commit("g", {("t", 0): OffsetAndMetadata(offset, -1, "", 1)}, 1)
        broker.in_broker(commit)


def _metadata(broker, topic: str):
    with AdminClient(broker.bootstrap) as c:
        return c.call(3, {"topics": [{"name": topic}], "allow_auto_topic_creation": True}, version=4).topics[0]


@pytest.mark.parametrize("topic", ["user-topic", OFFSETS_TOPIC])
def test_a_damaged_metadata_log_stops_the_broker_and_nothing_is_deleted(tmp_path, topic):
    """The two failures this guards against, on the metadata log that now holds the topics: an unreadable
    topic was skipped and its directory deleted by the next auto-create; an unreadable
    __consumer_offsets wiped every group's committed offsets at start. A damaged record of the
    metadata log now stops the broker, naming the segment, and every byte stays."""
    data = tmp_path / "data"
    with running_broker(data) as broker:
        assert _metadata(broker, "user-topic").error_code == 0
        broker.in_broker(lambda: broker.broker.logs.log("user-topic", 0).append(encode_batch([(None, b"v")], 0), 0))
        broker.in_broker(lambda: broker.broker.logs.create_topic("later", 1, {}, 0))  # a batch after it
    _commit(data, 42)
    path = data / "__cluster_metadata-0" / "00000000000000000000.log"
    good = path.read_bytes()
    damaged = bytearray(good)
    damaged[good.index(b'"name":"%s"' % topic.encode()) + 8] ^= 0x20
    path.write_bytes(bytes(damaged))
    before = _tree(data)
    error = _start_fails(data)
    assert isinstance(error, DamagedFileError) and error.path == path and str(path) in str(error)
    assert _tree(data) == before
    # Restoring the file is all it takes: the committed offsets and the records are all there.
    path.write_bytes(good)
    with running_broker(data) as broker:
        assert broker.broker.groups.store.offsets["g"][("t", 0)].offset == 42
        assert broker.broker.logs.log("user-topic", 0).log_end_offset == 1


def test_a_lost_metadata_log_stops_the_broker_instead_of_recreating_the_topics(tmp_path):
    data = tmp_path / "data"
    _commit(data, 42)
    shutil.rmtree(data / "__cluster_metadata-0")
    error = _start_fails(data)
    assert isinstance(error, DamagedFileError) and "__cluster_metadata-0: missing" in str(error)
    assert f"{OFFSETS_TOPIC}-0" in str(error)
    assert (data / f"{OFFSETS_TOPIC}-0" / "00000000000000000000.log").stat().st_size > 0


def test_a_stray_partition_directory_with_records_is_never_auto_created_over(tmp_path):
    """A partition directory brought in by hand (no topic of the metadata log, none it saw deleted):
    kept, and never created over."""
    data = tmp_path / "data"
    with running_broker(data, num_partitions="1"):
        pass
    (data / "orphan-0").mkdir()
    (data / "orphan-0" / "00000000000000000000.log").write_bytes(encode_batch([(None, b"keep me")], 0))
    with running_broker(data, num_partitions="1") as broker:
        assert _metadata(broker, "orphan").error_code == KAFKA_STORAGE_ERROR
        assert broker.broker.logs.topic("orphan") is None
    assert (data / "orphan-0" / "00000000000000000000.log").stat().st_size > 0


@pytest.mark.parametrize("content", [b"", b"\xff\xfe\x00", b"version=1\nnode.id=1\n"])
def test_a_damaged_meta_properties_stops_the_broker_and_is_not_overwritten(tmp_path, content):
    data = tmp_path / "data"
    with running_broker(data):
        pass
    (data / "meta.properties").write_bytes(content)
    error = _start_fails(data)
    assert isinstance(error, DamagedFileError) and "meta.properties" in str(error)
    assert (data / "meta.properties").read_bytes() == content


@pytest.mark.parametrize("content", [b"{}", b"not json", b'{"version": 1, "next_block_start": -5}',
                                     b'{"version": 1, "next_block_start": "7"}'])
def test_a_damaged_producer_ids_file_of_an_earlier_version_stops_the_broker(tmp_path, content):
    """A data directory of a version before the metadata log, its producer-ids file damaged: the
    import refuses it, naming it (reusing ids would be worse than not starting)."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "producer-ids").write_bytes(content)
    error = _start_fails(data)
    assert isinstance(error, DamagedFileError) and str(data / "producer-ids") in str(error)
    assert (data / "producer-ids").read_bytes() == content


def test_an_unreadable_offsets_record_is_skipped_but_never_cleaned_away(tmp_path):
    """A damaged record in __consumer_offsets costs that commit (the replay skips it, logged); the
    log cleaner keeps it (nothing supersedes its key), where a person can still recover it."""
    logs = LogManager.open(tmp_path, LogConfig.from_broker({}), 0)
    store = OffsetsStore.open(logs, 0)
    for i in range(50):
        store.commit("g", {("t", 0): OffsetAndMetadata(i, -1, "", i)}, i)
    store.log.append(encode_batch([(b"\x00\x01garbage", b"\x00")], 0), 0)  # a key no reader can parse
    logs.close()
    logs = LogManager.open(tmp_path, LogConfig.from_broker({}), 0)
    reopened = OffsetsStore.open(logs, 0)
    assert reopened.offsets["g"][("t", 0)].offset == 49
    assert reopened.skipped_records == 1 and not reopened.replay_complete
    assert clean_fully(reopened.log, 10_000) >= 1
    data = reopened.log.read(0, 1 << 20)
    kept = [key for batch in iter_headers(data)
            for _, _, key, _ in decode_records(data[batch.position:batch.position + batch.size])]
    assert b"\x00\x01garbage" in kept and len(kept) < 51  # the old commits went, the damaged one stayed
    logs.close()


def test_the_cli_names_the_damaged_file_without_a_traceback(tmp_path):
    data = tmp_path / "data"
    with running_broker(data) as broker:
        broker.in_broker(lambda: broker.broker.logs.create_topic("t", 1, {}, 0))
        broker.in_broker(lambda: broker.broker.logs.create_topic("u", 1, {}, 0))
    path = data / "__cluster_metadata-0" / "00000000000000000000.log"
    damaged = bytearray(path.read_bytes())
    damaged[damaged.index(b'"name":"t"') + 8] ^= 0x20
    path.write_bytes(bytes(damaged))
    result = subprocess.run(
        [sys.executable, "-m", "minibroker.cli", "serve", "--listen", "127.0.0.1:0", "--data-dir", str(data)],
        capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 1
    assert str(path) in result.stderr and "Traceback" not in result.stderr
    assert path.read_bytes() == damaged
