"""The ACL section of the cluster metadata image: every image has it, its records go through the JSON
codec unchanged, a snapshot writes the bindings as AccessControlEntryRecords in the order they were
added, and a record that does not fit (a binding added twice, one removed that is not there) is
refused as Kafka's AclControlManager refuses it."""

from __future__ import annotations

import uuid

import pytest

from minibroker.storage.acls_image import AccessControlEntryRecord, AclsImage, RemoveAccessControlEntryRecord
from minibroker.storage.metadata_image import MetadataImage, decode_record, encode_record, replay


def entry(name: str) -> AccessControlEntryRecord:
    return AccessControlEntryRecord(uuid.uuid4(), 2, name, 3, "User:alice", "*", 3, 3)


def test_the_records_round_trip_and_a_snapshot_rebuilds_the_section():
    first, second, third = entry("a"), entry("b"), entry("c")
    records = [first, second, RemoveAccessControlEntryRecord(first.id), third]
    for record in records:
        assert decode_record(encode_record(record)) == record
    image = replay(records)
    assert list(image.section(AclsImage).acls.values()) == [second, third]
    assert list(replay(image.records()).section(AclsImage).acls.values()) == [second, third]


def test_a_record_that_does_not_fit_is_refused():
    image = MetadataImage()
    record = entry("a")
    image.apply(record)
    with pytest.raises(ValueError, match="which exists"):
        image.apply(record)
    with pytest.raises(ValueError, match="which does not exist"):
        image.apply(RemoveAccessControlEntryRecord(uuid.uuid4()))
