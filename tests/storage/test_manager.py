"""LogManager on a real data directory: topics survive reopen with the same ids and configs (kept
in the metadata log of its data directory), creation is validated in Kafka's order with Kafka's
errors, deletion removes the directories."""

from __future__ import annotations

import logging
import os
import shutil
import uuid

import pytest

from minibroker.storage.config import ConfigError, LogConfig
from minibroker.storage.errors import DamagedFileError
from minibroker.storage.manager import (
    InvalidPartitionsError,
    InvalidTopicError,
    LogManager,
    StrayDataError,
    TopicExistsError,
    UnknownTopicError,
)
from tests.support.batches import make_batch

BROKER = LogConfig.from_broker({"log.retention.hours": "24"})


def test_create_and_reopen_keeps_ids_configs_and_data(tmp_path):
    manager = LogManager.open(tmp_path, BROKER, 0)
    info = manager.create_topic("orders", 3, {"retention.ms": "1000", "cleanup.policy": "compact"}, 0)
    assert info.num_partitions == 3 and isinstance(info.topic_id, uuid.UUID)
    assert info.config.retention_ms == 1000 and info.config.segment_ms == BROKER.segment_ms
    internal = manager.create_topic("__consumer_offsets", 1, {}, 0)
    manager.log("orders", 2).append(make_batch([(b"k", b"v")]), 0)
    assert manager.log("orders", 3) is None and manager.log("nope", 0) is None
    manager.close()

    reopened = LogManager.open(tmp_path, BROKER, 0)
    again = reopened.topic("orders")
    assert again == info
    assert reopened.topic_by_id(info.topic_id) == info
    assert reopened.topic_by_id(internal.topic_id).name == "__consumer_offsets"
    assert [t.name for t in reopened.topics()] == ["__consumer_offsets", "orders"]
    assert reopened.log("orders", 2).log_end_offset == 1
    assert reopened.log("orders", 0).log_end_offset == 0
    reopened.close(clean=False)

    # The broker config is applied afresh on open; the overrides stay the topic's own.
    changed = LogManager.open(tmp_path, LogConfig.from_broker({"log.roll.ms": "5"}), 0)
    assert changed.topic("orders").config.segment_ms == 5
    assert changed.topic("orders").config.retention_ms == 1000
    changed.close()


def test_validation_errors(tmp_path):
    manager = LogManager.open(tmp_path, BROKER, 0)
    manager.create_topic("a.b", 1, {}, 0)
    for name in ["", ".", "..", "x" * 250, "a/b"]:
        with pytest.raises(InvalidTopicError):
            manager.create_topic(name, 1, {}, 0)
    with pytest.raises(TopicExistsError) as exists:
        manager.create_topic("a.b", 1, {}, 0)
    assert exists.value.error_code == 36
    with pytest.raises(InvalidTopicError) as collides:
        manager.create_topic("a_b", 1, {}, 0)
    assert "collides" in str(collides.value) and collides.value.error_code == 17
    for count in (0, -1, 10_001):
        with pytest.raises(InvalidPartitionsError) as partitions:
            manager.create_topic("t", count, {}, 0)
        assert partitions.value.error_code == 37
    with pytest.raises(ConfigError) as unknown:
        manager.create_topic("t", 1, {"no.such": "1"}, 0)
    assert unknown.value.key == "no.such" and unknown.value.error_code == 40
    with pytest.raises(ConfigError) as bad:
        manager.create_topic("t", 1, {"retention.ms": "soon"}, 0)
    assert bad.value.key == "retention.ms" and "retention.ms" in str(bad.value)
    assert [t.name for t in manager.topics()] == ["a.b"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["__cluster_metadata-0", "a.b-0"]
    manager.close()


def test_validate_only_has_no_effect(tmp_path):
    manager = LogManager.open(tmp_path, BROKER, 0)
    info = manager.create_topic("t", 2, {"segment.ms": "10"}, 0, validate_only=True)
    assert info.config.segment_ms == 10
    assert manager.topic("t") is None
    assert not (tmp_path / "t-0").exists()
    manager.create_topic("t", 2, {}, 0)
    manager.close()


def test_delete_topic(tmp_path):
    manager = LogManager.open(tmp_path, BROKER, 0)
    info = manager.create_topic("gone", 2, {}, 0)
    manager.log("gone", 0).append(make_batch([(None, b"v")]), 0)
    manager.delete_topic("gone")
    assert manager.topic("gone") is None and manager.topic_by_id(info.topic_id) is None
    assert not (tmp_path / "gone-0").exists() and not (tmp_path / "gone-1").exists()
    assert manager.controller.image.topic("gone") is None
    assert info.topic_id in manager.controller.image.topics.deleted_ids
    with pytest.raises(UnknownTopicError) as unknown:
        manager.delete_topic("gone")
    assert unknown.value.error_code == 3
    again = manager.create_topic("gone", 1, {}, 0)
    assert again.topic_id != info.topic_id
    assert manager.log("gone", 0).log_end_offset == 0
    manager.close()


def test_alter_topic_config(tmp_path):
    manager = LogManager.open(tmp_path, BROKER, 0)
    manager.create_topic("t", 1, {"retention.ms": "1000"}, 0)
    with pytest.raises(ConfigError):
        manager.alter_topic_config("t", {"retention.ms": "x"})
    assert manager.topic("t").config.retention_ms == 1000
    manager.alter_topic_config("t", {"segment.ms": "77"})
    assert manager.log("t", 0).config.segment_ms == 77
    assert manager.log("t", 0).config.retention_ms == BROKER.retention_ms
    manager.close()
    reopened = LogManager.open(tmp_path, BROKER, 0)
    assert reopened.topic("t").overrides == {"segment.ms": "77"}
    reopened.close()


def test_add_partitions_grows_the_topic_and_survives_reopen(tmp_path):
    """CreatePartitions at the storage level: new empty logs after the existing ones, the old data
    untouched, the metadata log (the commit point) holding the new partitions, and the change
    announced."""
    manager = LogManager.open(tmp_path, BROKER, 0)
    announced = []
    manager.subscribe(announced.append)
    info = manager.create_topic("t", 2, {"retention.ms": "1000"}, 0)
    manager.log("t", 1).append(make_batch([(b"k", b"v")]), 0)
    assert manager.add_partitions("t", 4, 0, validate_only=True).num_partitions == 4
    assert manager.topic("t").num_partitions == 2 and not (tmp_path / "t-2").exists()
    grown = manager.add_partitions("t", 4, 0)
    assert (grown.num_partitions, grown.topic_id, grown.overrides) == (4, info.topic_id, {"retention.ms": "1000"})
    assert announced[-1] == "t"
    assert manager.log("t", 3).config.retention_ms == 1000 and manager.log("t", 3).log_end_offset == 0
    assert manager.log("t", 1).log_end_offset == 1
    manager.close()
    reopened = LogManager.open(tmp_path, BROKER, 0)
    assert reopened.topic("t").num_partitions == 4 and reopened.log("t", 1).log_end_offset == 1
    assert reopened.controller.image.topic("t").num_partitions == 4
    reopened.close()


@pytest.mark.parametrize("count, message", [
    (3, "Topic already has 3 partition(s)."),
    (2, "The topic t currently has 3 partition(s); 2 would not be an increase."),
    (0, "The topic t currently has 3 partition(s); 0 would not be an increase."),
    (10_001, "Number of partitions 10001 is above the limit of 10000."),
])
def test_add_partitions_never_shrinks(tmp_path, count, message):
    manager = LogManager.open(tmp_path, BROKER, 0)
    manager.create_topic("t", 3, {}, 0)
    with pytest.raises(InvalidPartitionsError) as refused:
        manager.add_partitions("t", count, 0)
    assert str(refused.value) == message
    with pytest.raises(UnknownTopicError):
        manager.add_partitions("nope", 4, 0)
    assert manager.topic("t").num_partitions == 3
    manager.close()


def test_add_partitions_never_creates_over_records(tmp_path):
    """A leftover directory of a new partition is reused when it holds no records (an addition cut
    short), and refused with StrayDataError naming it when it does."""
    manager = LogManager.open(tmp_path, BROKER, 0)
    manager.create_topic("t", 1, {}, 0)
    (tmp_path / "t-1").mkdir()
    (tmp_path / "t-1" / "00000000000000000000.log").write_bytes(b"")
    (tmp_path / "t-2").mkdir()
    (tmp_path / "t-2" / "00000000000000000000.log").write_bytes(make_batch([(None, b"old")]))
    with pytest.raises(StrayDataError, match="t-2"):
        manager.add_partitions("t", 3, 0)
    assert manager.topic("t").num_partitions == 1
    assert (tmp_path / "t-2" / "00000000000000000000.log").stat().st_size > 0
    manager.add_partitions("t", 2, 0)
    assert manager.log("t", 1).log_end_offset == 0
    manager.close()


def test_new_broker_defaults_reach_topics_without_an_override(tmp_path):
    manager = LogManager.open(tmp_path, BROKER, 0)
    manager.create_topic("own", 1, {"retention.ms": "1000", "min.compaction.lag.ms": "100"}, 0)
    manager.create_topic("inherits", 1, {}, 0)
    changed = LogConfig.from_broker({"log.retention.ms": "5000", "log.segment.bytes": "2097152"})
    manager.check_broker_config(changed)
    manager.set_broker_config(changed)
    assert manager.log("inherits", 0).config.retention_ms == 5000
    assert manager.log("own", 0).config.retention_ms == 1000
    assert manager.log("own", 0).config.segment_bytes == manager.topic("inherits").config.segment_bytes == 2097152
    # A default some topic's overrides contradict is refused before anything changes.
    with pytest.raises(ConfigError) as refused:
        manager.check_broker_config(LogConfig.from_broker({"log.cleaner.max.compaction.lag.ms": "50"}))
    assert "own" in str(refused.value)
    manager.close()


def test_stray_directories_are_kept_logged_and_never_created_over(tmp_path, caplog):
    manager = LogManager.open(tmp_path, BROKER, 0)
    manager.create_topic("t", 1, {}, 0)
    manager.close()
    (tmp_path / "unknown-0").mkdir()
    (tmp_path / "unknown-0" / "00000000000000000000.log").write_bytes(make_batch([(None, b"old")]))
    (tmp_path / "empty-0").mkdir()
    (tmp_path / "empty-0" / "00000000000000000000.log").write_bytes(b"")
    (tmp_path / "t-5").mkdir()
    (tmp_path / "not a partition").mkdir()
    (tmp_path / "meta.properties").write_text("cluster.id=x\n")
    with caplog.at_level(logging.WARNING, logger="minibroker.storage.manager"):
        reopened = LogManager.open(tmp_path, BROKER, 0)
    assert [t.name for t in reopened.topics()] == ["t"]
    logged = caplog.text
    assert "unknown-0 holds records" in logged and "t-5" in logged and "empty-0" in logged
    # A directory with records and no topic is never deleted to make room for a new topic.
    with pytest.raises(StrayDataError) as stray:
        reopened.create_topic("unknown", 1, {}, 0)
    assert stray.value.error_code == 56 and "unknown-0" in str(stray.value)
    assert (tmp_path / "unknown-0" / "00000000000000000000.log").stat().st_size > 0
    assert reopened.topic("unknown") is None and reopened.controller.image.topic("unknown") is None
    # One that holds no records (a creation cut short by a crash) is reused.
    reopened.create_topic("empty", 1, {}, 0)
    assert reopened.log("empty", 0).log_end_offset == 0
    reopened.close()


def test_a_damaged_metadata_log_stops_the_open_naming_it_and_deletes_nothing(tmp_path):
    """The metadata log decides what every partition directory is: a batch of it that does not
    check out (its CRC) stops the open, naming the segment, and no byte changes, whether the log
    was closed cleanly or not (a crash tears only the last batch)."""
    manager = LogManager.open(tmp_path, BROKER, 0)
    manager.create_topic("t", 2, {}, 0)
    manager.create_topic("u", 1, {}, 0)
    manager.log("t", 1).append(make_batch([(None, b"precious")]), 0)
    manager.close()
    segment = tmp_path / "__cluster_metadata-0" / "00000000000000000000.log"
    data = bytearray(segment.read_bytes())
    at = data.index(b'"name":"t"')  # inside the first topic's batch, with the second's after it
    data[at + 8] ^= 1
    segment.write_bytes(bytes(data))
    for clean in (True, False):
        if not clean:
            (tmp_path / "__cluster_metadata-0" / "clean-shutdown").unlink()
        before = _tree(tmp_path)
        with pytest.raises(DamagedFileError) as damaged:
            LogManager.open(tmp_path, BROKER, 0)
        assert damaged.value.path == segment
        assert str(segment) in str(damaged.value) and "restore" in str(damaged.value)
        assert _tree(tmp_path) == before


def test_a_stored_config_that_no_longer_validates_stops_the_open(tmp_path):
    """Dropping the setting would be a guess: a lost retention.ms=-1 is data deleted by retention.
    A topic config the broker's configuration no longer allows (min.compaction.lag.ms above a new
    max.compaction.lag.ms) stops the open naming the topic and the key."""
    manager = LogManager.open(tmp_path, BROKER, 0)
    manager.create_topic("t", 1, {"retention.ms": "-1", "min.compaction.lag.ms": "100"}, 0)
    manager.close()
    with pytest.raises(ConfigError) as refused:
        LogManager.open(tmp_path, LogConfig.from_broker({"log.cleaner.max.compaction.lag.ms": "50"}), 0)
    assert "min.compaction.lag.ms" in str(refused.value) and "topic t" in str(refused.value)
    reopened = LogManager.open(tmp_path, BROKER, 0)
    assert reopened.topic("t").config.retention_ms == -1
    reopened.close()


def test_a_deletion_cut_short_is_finished_at_the_next_open(tmp_path, monkeypatch):
    manager = LogManager.open(tmp_path, BROKER, 0)
    info = manager.create_topic("gone", 2, {}, 0)
    manager.create_topic("kept", 1, {}, 0)
    manager.log("gone", 0).append(make_batch([(None, b"v")]), 0)
    manager.close()
    # A crash after the deletion was committed, with one directory renamed and one not.
    monkeypatch.setattr(shutil, "rmtree", lambda *a, **k: None)
    manager = LogManager.open(tmp_path, BROKER, 0)
    manager.delete_topic("gone")
    manager.close(clean=False)
    monkeypatch.undo()
    os.rename(tmp_path / f"gone-1.{info.topic_id.hex}-delete", tmp_path / "gone-1")
    reopened = LogManager.open(tmp_path, BROKER, 0)
    assert [t.name for t in reopened.topics()] == ["kept"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["__cluster_metadata-0", "kept-0"]
    reopened.close()


def test_delete_topic_leaves_nothing_a_later_open_could_take_for_lost_data(tmp_path, monkeypatch):
    manager = LogManager.open(tmp_path, BROKER, 0)
    info = manager.create_topic("gone", 2, {}, 0)
    manager.log("gone", 1).append(make_batch([(None, b"v")]), 0)
    # The directories are renamed before the deletion is committed: stop right after the renames.
    monkeypatch.setattr(shutil, "rmtree", lambda *a, **k: None)
    manager.delete_topic("gone")
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["__cluster_metadata-0", f"gone-0.{info.topic_id.hex}-delete", f"gone-1.{info.topic_id.hex}-delete"]
    monkeypatch.undo()
    manager.close()
    LogManager.open(tmp_path, BROKER, 0).close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["__cluster_metadata-0"]


def test_a_failed_commit_leaves_the_topic_as_it_was(tmp_path, monkeypatch):
    """The metadata log refusing the change (disk full) undoes what was prepared: a creation's
    directories go, a deletion's renamed directories come back, and the topic is as it was."""
    manager = LogManager.open(tmp_path, BROKER, 0)
    manager.create_topic("kept", 2, {}, 0)
    manager.log("kept", 1).append(make_batch([(None, b"v")]), 0)

    def full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(manager.controller.metadata, "append", full)
    with pytest.raises(OSError):
        manager.create_topic("new", 3, {}, 0)
    with pytest.raises(OSError):
        manager.delete_topic("kept")
    monkeypatch.undo()
    assert manager.topic("new") is None and not (tmp_path / "new-0").exists()
    assert manager.log("kept", 1).log_end_offset == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["__cluster_metadata-0", "kept-0", "kept-1"]
    manager.close()


def _tree(root):
    return {
        str(path.relative_to(root)): path.read_bytes() if path.is_file() else None
        for path in sorted(root.rglob("*"))
    }


def test_partition_directories_name_their_topic_id(tmp_path):
    """Each partition directory keeps its topic's id in `partition.metadata`, as Kafka writes it."""
    manager = LogManager.open(tmp_path, BROKER, 0)
    info = manager.create_topic("t", 2, {"retention.ms": "1"}, 0)
    manager.close()
    import base64
    expected = base64.urlsafe_b64encode(info.topic_id.bytes).decode().rstrip("=")
    assert (tmp_path / "t-1" / "partition.metadata").read_text() == f"version: 0\ntopic_id: {expected}\n"


def test_retention_and_flush_over_all_logs(tmp_path):
    broker = LogConfig(segment_bytes=200, retention_bytes=0, flush_ms=10)
    manager = LogManager.open(tmp_path, broker, 0)
    manager.create_topic("a", 2, {}, 0)
    for partition in range(2):
        for _ in range(5):
            manager.log("a", partition).append(make_batch([(None, b"x" * 100)]), 0)
    assert manager.maybe_flush(100) == 2
    assert manager.enforce_retention(0) == 8  # everything but each active segment
    assert all(manager.log("a", p).log_start_offset == 4 for p in range(2))
    manager.close()
