"""The metadata log and its image: every record type round-trips, the image a snapshot rebuilds is
the image the log built, a restart reads a snapshot and what came after it, a crash's torn batch is
recovered and a damaged one stops the open naming its file; and the controller's topic changes as
Kafka's controller makes them."""

from __future__ import annotations

import os
import random
import uuid

import pytest
from hypothesis import given, strategies as st

from minibroker.storage.config import LogConfig
from minibroker.storage.controller import Controller
from minibroker.storage.errors import DamagedFileError, InvalidReplicationFactorError
from minibroker.storage.metadata_image import (
    RECORD_TYPES,
    ClientQuotaRecord,
    ConfigRecord,
    FenceBrokerRecord,
    MetadataImage,
    PartitionChangeRecord,
    PartitionRecord,
    ProducerIdsRecord,
    RegisterBrokerRecord,
    RemoveTopicRecord,
    RemoveUserScramCredentialRecord,
    TopicRecord,
    UnfenceBrokerRecord,
    UserScramCredentialRecord,
    decode_record,
    encode_record,
    replay,
)
from minibroker.storage.metadata_log import METADATA_DIR, MetadataLog
from minibroker.storage.acls_image import AccessControlEntryRecord, RemoveAccessControlEntryRecord

ID = uuid.UUID("0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0")

EXAMPLES = [
    TopicRecord("t", ID),
    PartitionRecord(ID, 0, (1, 2, 3), (1, 2), 1, 4, 7, (3,), (), 1),
    PartitionChangeRecord(ID, 0, isr=(1,), leader=2),
    PartitionChangeRecord(ID, 0),
    RemoveTopicRecord(ID),
    ConfigRecord(2, "t", "retention.ms", "1000"),
    ConfigRecord(4, "", "log.retention.ms", None),
    ClientQuotaRecord((("user", "alice"), ("client-id", None)), "producer_byte_rate", 1024.5),
    ClientQuotaRecord((("ip", None),), "connection_creation_rate", 0.0, True),
    UserScramCredentialRecord("bob", 2, b"\x00salt", b"stored\xff", b"server", 8192),
    RemoveUserScramCredentialRecord("bob", 1),
    ProducerIdsRecord(1, 5, 3000),
    RegisterBrokerRecord(3, 10, "rack-a", True),
    FenceBrokerRecord(3, 10),
    UnfenceBrokerRecord(3, 10),
    AccessControlEntryRecord(ID, 2, "orders-", 4, "User:alice", "*", 4, 3),
    RemoveAccessControlEntryRecord(ID),
]


def test_every_record_type_has_an_example_and_round_trips():
    assert {type(r).type_name for r in EXAMPLES} == set(RECORD_TYPES) - {"SnapshotFooterRecord"}
    for record in EXAMPLES:
        assert decode_record(encode_record(record)) == record


@given(st.binary(max_size=64))
def test_any_bytes_decode_to_a_record_or_a_value_error(data):
    try:
        decode_record(data)
    except ValueError:
        pass


@pytest.mark.parametrize("data", [b'{"type": "TopicRecord", "version": 0, "name": 5, "topic_id": "x"}',
                                  b'{"type": "NoSuchRecord", "version": 0}',
                                  b'{"type": "TopicRecord", "version": 9, "name": "t"}',
                                  b'{"type": "TopicRecord", "version": 0}',
                                  b'{"type": "PartitionRecord", "version": 0, "replicas": "1,2"}'])
def test_a_record_that_does_not_read_says_why(data):
    with pytest.raises(ValueError):
        decode_record(data)


def test_partition_changes_move_the_epochs_as_kafka_does():
    image = replay([TopicRecord("t", ID), PartitionRecord(ID, 0, (1, 2), (1, 2), 1)])
    image.apply(PartitionChangeRecord(ID, 0, isr=(1,)))  # an ISR change: the leader epoch stays
    assert (image.partition("t", 0).leader_epoch, image.partition("t", 0).partition_epoch) == (0, 1)
    image.apply(PartitionChangeRecord(ID, 0, leader=2, isr=(2,)))  # a new leader: a new leader epoch
    registration = image.partition("t", 0)
    assert (registration.leader, registration.isr, registration.leader_epoch, registration.partition_epoch) == (
        2, (2,), 1, 2)
    image.apply(PartitionChangeRecord(ID, 0, leader=2))  # a leader given, even the same: bumped
    assert image.partition("t", 0).leader_epoch == 2


def test_a_snapshot_rebuilds_the_same_image():
    image = replay(EXAMPLES[:2] + [ConfigRecord(2, "t", "retention.ms", "1")] + EXAMPLES[7:14])
    image.apply(RemoveTopicRecord(ID))  # a deleted topic's id is remembered
    again = replay(image.records())
    assert list(again.records()) == list(image.records())
    assert again.topics.deleted_ids == {ID}


def test_the_log_survives_reopen_kill_and_snapshots(tmp_path):
    directory = tmp_path / METADATA_DIR
    log = MetadataLog.open(directory, 0, leader_id=1)
    assert (log.leader_epoch, log.end_offset) == (1, 0)
    log.append([RegisterBrokerRecord(1, 0), TopicRecord("t", ID), PartitionRecord(ID, 0, (1,), (1,), 1)], 0)
    log.append([ConfigRecord(2, "t", "retention.ms", "5")], 0)
    log.close(clean=False)  # killed: no snapshot, no clean-shutdown marker
    log = MetadataLog.open(directory, 0, leader_id=1)
    assert log.leader_epoch == 2 and log.end_offset == 4 and log.snapshot_offset == 0
    assert log.image.topic_configs("t") == {"retention.ms": "5"}
    log.close(clean=True, now_ms=0)  # a clean close snapshots
    assert sorted(n for n in os.listdir(directory) if n.endswith(".checkpoint")) == [
        "00000000000000000004-0000000002.checkpoint"]
    log = MetadataLog.open(directory, 0, leader_id=1)
    assert log.snapshot_offset == 4 and log.start_offset == 4 and log.image.topic("t").num_partitions == 1
    log.close(clean=False)


def test_a_torn_last_batch_is_recovered_and_a_damaged_one_before_it_stops_the_open(tmp_path):
    directory = tmp_path / METADATA_DIR
    log = MetadataLog.open(directory, 0, leader_id=1)
    log.append([TopicRecord("a", ID)], 0)
    log.append([TopicRecord("b", uuid.uuid4())], 0)
    log.close(clean=False)
    segment = directory / "00000000000000000000.log"
    whole = segment.read_bytes()
    segment.write_bytes(whole[:-7])  # the second batch torn by the crash
    log = MetadataLog.open(directory, 0, leader_id=1)
    assert log.end_offset == 1 and log.image.topic("b") is None and log.image.topic("a") is not None
    log.append([TopicRecord("b", uuid.uuid4())], 0)
    log.close(clean=False)
    damaged = bytearray(segment.read_bytes())
    damaged[damaged.index(b'"name":"a"') + 8] ^= 1  # the first batch, with a good one after it
    segment.write_bytes(bytes(damaged))
    with pytest.raises(DamagedFileError) as error:
        MetadataLog.open(directory, 0, leader_id=1)
    assert error.value.path == segment and segment.read_bytes() == damaged


def test_a_snapshot_without_its_footer_stops_the_open_naming_it(tmp_path):
    directory = tmp_path / METADATA_DIR
    log = MetadataLog.open(directory, 0, leader_id=1)
    log.append([TopicRecord("a", ID)], 0)
    path = log.snapshot(0)
    log.close(clean=False)
    path.write_bytes(path.read_bytes()[:-40])
    with pytest.raises(DamagedFileError) as error:
        MetadataLog.open(directory, 0, leader_id=1)
    assert error.value.path == path


def test_snapshots_come_every_so_many_bytes_and_let_old_segments_go(tmp_path):
    directory = tmp_path / METADATA_DIR
    log = MetadataLog.open(directory, 0, leader_id=1, snapshot_bytes=2000)
    for i in range(40):
        log.append([ConfigRecord(4, "", f"key.{i}", "x" * 50)], 0)
    assert log.snapshot_offset > 0 and log.start_offset == log.snapshot_offset
    log.close(clean=False)
    again = MetadataLog.open(directory, 0, leader_id=1, snapshot_bytes=2000)
    assert len(again.image.configs.get(4, "")) == 40
    again.close(clean=False)


# ---- the controller's topics -------------------------------------------------------------------------


def controller_with(tmp_path, brokers: dict[int, str | None], fenced=()) -> Controller:
    controller = Controller.open(tmp_path, 1, 0)
    controller.rng = random.Random(7)
    for broker_id, rack in brokers.items():
        controller.register_broker(broker_id, rack, 0)
    for broker_id in fenced:
        controller.fence_broker(broker_id, 0)
    return controller


def test_replicas_are_spread_over_brokers_and_racks_and_leaders_evenly(tmp_path):
    controller = controller_with(tmp_path, {1: "a", 2: "a", 3: "b", 4: "b", 5: "c", 6: "c"})
    topic, _ = controller.create_topic("t", 60, {}, 0, log_config=LogConfig(), replication_factor=3)
    racks = {1: "a", 2: "a", 3: "b", 4: "b", 5: "c", 6: "c"}
    leaders: dict[int, int] = {}
    replicas: dict[int, int] = {}
    for registration in topic.partitions.values():
        assert len(set(registration.replicas)) == 3
        assert {racks[b] for b in registration.replicas} == {"a", "b", "c"}  # one replica per rack
        assert registration.isr == registration.replicas and registration.leader == registration.replicas[0]
        leaders[registration.leader] = leaders.get(registration.leader, 0) + 1
        for b in registration.replicas:
            replicas[b] = replicas.get(b, 0) + 1
    assert leaders == {b: 10 for b in racks} and replicas == {b: 30 for b in racks}
    controller.close()


def test_fenced_brokers_never_lead_a_new_partition(tmp_path):
    controller = controller_with(tmp_path, {1: None, 2: None, 3: None}, fenced=[2])
    topic, _ = controller.create_topic("t", 12, {}, 0, log_config=LogConfig(), replication_factor=3)
    for registration in topic.partitions.values():
        assert registration.leader != 2 and 2 not in registration.isr and 2 in registration.replicas
    with pytest.raises(InvalidReplicationFactorError, match="only 3 broker"):
        controller.create_topic("u", 1, {}, 0, log_config=LogConfig(), replication_factor=4)
    controller.close()


def test_new_partitions_continue_the_stripes(tmp_path):
    controller = controller_with(tmp_path, {1: None, 2: None, 3: None})
    controller.create_topic("t", 3, {}, 0, log_config=LogConfig(), replication_factor=2)
    grown = controller.create_partitions("t", 9, 0)
    leaders = [grown.partitions[p].leader for p in range(9)]
    assert sorted(leaders) == [1, 1, 1, 2, 2, 2, 3, 3, 3]
    assert all(len(grown.partitions[p].replicas) == 2 for p in range(9))
    controller.close()


def test_the_image_is_the_same_after_a_restart(tmp_path):
    controller = controller_with(tmp_path, {1: "x", 2: "y"})
    controller.create_topic("t", 4, {"retention.ms": "7"}, 0, log_config=LogConfig(), replication_factor=2)
    controller.allocate_producer_ids(1, 0)
    before = list(controller.image.records())
    controller.close(clean=False)
    again = Controller.open(tmp_path, 1, 0)
    assert list(again.image.records()) == before
    assert isinstance(again.image, MetadataImage)
    again.close()


def test_a_section_of_another_module_joins_every_image_and_its_snapshots(tmp_path, monkeypatch):
    """The place the authorizer's ACL records go: a record type and a section registered from
    outside, replayed from the log and written to snapshots like the others."""
    from dataclasses import dataclass

    from minibroker.storage import metadata_image
    from minibroker.storage.metadata_image import ImageSection, MetadataRecord, record_type, register_section

    monkeypatch.setattr(metadata_image, "RECORD_TYPES", dict(metadata_image.RECORD_TYPES))
    monkeypatch.setattr(metadata_image, "SECTION_TYPES", list(metadata_image.SECTION_TYPES))

    @record_type
    @dataclass(frozen=True, slots=True)
    class ExampleAclRecord(MetadataRecord):
        principal: str

    @register_section
    class ExampleAcls(ImageSection):
        handles = (ExampleAclRecord,)

        def __init__(self) -> None:
            self.principals: list[str] = []

        def apply(self, record) -> None:
            self.principals.append(record.principal)

        def records(self):
            return iter(ExampleAclRecord(p) for p in self.principals)

    directory = tmp_path / METADATA_DIR
    log = MetadataLog.open(directory, 0, leader_id=1)
    log.append([ExampleAclRecord("User:alice")], 0)
    log.close(clean=True, now_ms=0)  # snapshotted
    again = MetadataLog.open(directory, 0, leader_id=1)
    assert again.image.section(ExampleAcls).principals == ["User:alice"]
    again.close(clean=False)
