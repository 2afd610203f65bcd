"""A data directory written by an earlier version (tests/data/legacy/data-dir.tar.gz, made by
make_data_dir.py beside it with the code of main before the metadata log): its first start imports
every per-purpose file into the metadata log once and removes them, and every topic, topic id,
record, committed offset, client quota, SCRAM credential, dynamic broker config, group config and
producer-id block is as it was, then and at every later start."""

from __future__ import annotations

import json
import logging
import shutil
import tarfile
from pathlib import Path

import pytest

from minibroker.admin_client import AdminClient, AdminClientError
from minibroker.testing import running_broker
from tests.support.damage import sole_error
from tests.support.metadata import metadata_of

ARCHIVE = Path(__file__).resolve().parents[1] / "data" / "legacy" / "data-dir.tar.gz"
LEGACY_FILES = ["broker-configs.json", "client-quotas.json", "group-configs.json", "producer-ids",
                "scram-credentials.json"]


def unpack(tmp_path: Path) -> Path:
    with tarfile.open(ARCHIVE) as tar:
        tar.extractall(tmp_path, filter="data")
    return tmp_path / "data"


def topic_ids(data: Path) -> dict[str, str]:
    return {path.stem: json.loads(path.read_text())["topic_id"] for path in (data / "topics").glob("*.json")}


def check_state(running) -> None:
    broker = running.broker
    logs = broker.logs
    assert {t.name for t in logs.topics()} == {"orders", "compacted", "__consumer_offsets"}
    assert logs.topic("orders").num_partitions == 3
    assert [logs.log("orders", p).log_end_offset for p in range(3)] == [2, 3, 4]
    assert logs.topic("orders").overrides == {"retention.ms": "3600000", "cleanup.policy": "delete"}
    assert logs.log("orders", 1).config.retention_ms == 3600000
    assert logs.log("compacted", 0).config.retention_ms == 7200000  # the cluster default, dynamic
    assert broker.config.log_config.retention_bytes == 1073741824  # this broker's, dynamic
    assert broker.groups.store.offsets["legacy-group"][("orders", 0)].offset == 2
    assert broker.group_configs.value("legacy-group", "consumer.session.timeout.ms") == 50000
    quotas = {entity.entries: dict(values) for entity, values in broker.quotas.store.entities()}
    assert quotas == {(("user", "alice"),): {"producer_byte_rate": 1024.0},
                      (("client-id", None),): {"consumer_byte_rate": 2048.0}}
    assert running.in_broker(broker.quotas.produce.quota_limit, "alice", "any") == 1024.0
    assert running.in_broker(broker.producer_ids.allocate) >= 1000  # past every block handed out


def logs_in(bootstrap: str, user: str, password: str) -> bool:
    try:
        with AdminClient(bootstrap, sasl_mechanism="SCRAM-SHA-512", sasl_username=user, sasl_password=password):
            return True
    except AdminClientError:
        return False


def test_an_earlier_data_dir_is_imported_once_and_keeps_everything(tmp_path, caplog):
    data = unpack(tmp_path)
    ids = topic_ids(data)
    with caplog.at_level(logging.INFO, logger="minibroker.storage.controller"):
        with running_broker(data, sasl_users={"admin": "admin-pw"}) as running:
            check_state(running)
            assert logs_in(running.sasl_bootstrap, "bob", "bob-secret")
            assert not logs_in(running.sasl_bootstrap, "bob", "wrong")
            assert {t.name: str(t.topic_id) for t in running.broker.logs.topics()} == ids
    assert "imported 3 topic(s)" in caplog.text
    # The files are gone; the metadata log holds it all, and each partition names its topic.
    assert not (data / "topics").exists() and not any((data / name).exists() for name in LEGACY_FILES)
    assert (data / "orders-2" / "partition.metadata").read_text().startswith("version: 0\n")
    with metadata_of(data) as controller:
        assert {t.name: str(t.topic_id) for t in controller.image.topics.by_name.values()} == ids
        assert controller.image.producer_ids.next_producer_id >= 1000
    caplog.clear()
    with running_broker(data, sasl_users={"admin": "admin-pw"}) as running:
        check_state(running)
        assert logs_in(running.sasl_bootstrap, "bob", "bob-secret")
    assert "imported" not in caplog.text


def test_an_import_cut_short_before_the_files_went_removes_them_at_the_next_start(tmp_path, caplog):
    data = unpack(tmp_path)
    kept = tmp_path / "kept"
    kept.mkdir()
    for name in LEGACY_FILES:
        shutil.copy(data / name, kept / name)
    shutil.copytree(data / "topics", kept / "topics")
    with running_broker(data):
        pass
    for name in LEGACY_FILES:  # as if the first start had stopped after its commit
        shutil.copy(kept / name, data / name)
    shutil.copytree(kept / "topics", data / "topics")
    with caplog.at_level(logging.WARNING, logger="minibroker.storage.controller"):
        with running_broker(data) as running:
            check_state(running)
    assert "imported into the metadata log by an earlier start" in caplog.text
    assert not (data / "topics").exists() and not any((data / name).exists() for name in LEGACY_FILES)


@pytest.mark.parametrize("name, content, message", [
    ("client-quotas.json", "{not json", "malformed quota store"),
    ("scram-credentials.json", '{"version": 1, "credentials": {"x": {"SCRAM-SHA-256": {"salt": "!!"}}}}',
     "unreadable SCRAM credentials"),
    ("broker-configs.json", "{broken", "unreadable dynamic broker configs"),
    ("topics/orders.json", '{"name": "orders"}', "unreadable topic file"),
])
def test_a_damaged_file_of_an_earlier_version_stops_the_import_naming_it(tmp_path, name, content, message):
    data = unpack(tmp_path)
    (data / name).write_text(content)
    with pytest.raises(BaseException) as failed:
        with running_broker(data):
            pass
    error = sole_error(failed.value)
    assert str(data / name) in str(error) and message in str(error)
    assert (data / name).read_text() == content  # nothing removed: fix it and start again
    assert all((data / other).exists() for other in LEGACY_FILES)
    with metadata_of(data) as controller:
        assert not controller.image.topics.by_name  # nothing imported
