"""The KIP-848 consumer group records (storage/consumer_group_records.py) against Kafka's JSON
schemas: fixed values assembled here byte by byte from the schemas' field order and flexible
encoding (not by the module's own writer), round trips by Hypothesis, every strict prefix of a value
rejected cleanly, tagged fields Kafka may add skipped, and the store replaying them across a
reopen and a compaction.
"""

from __future__ import annotations

import struct
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minibroker.protocol.records import decode_records, iter_headers
from minibroker.storage.config import LogConfig
from minibroker.storage.consumer_group_records import (
    StoredConsumerGroup,
    StoredConsumerMember,
    StoredMemberAssignment,
    StoredTopicMetadata,
    consumer_key,
    current_assignment_value,
    epoch_value,
    member_metadata_value,
    parse_consumer_key,
    parse_current_assignment_value,
    parse_epoch_value,
    parse_member_metadata_value,
    parse_partition_metadata_value,
    parse_target_assignment_value,
    partition_metadata_value,
    target_assignment_value,
)
from minibroker.storage.manager import LogManager
from minibroker.storage.offsets_store import OffsetsStore
from tests.support.cleaning import clean_fully

TOPIC = uuid.UUID("0123456789abcdef0123456789abcdef")


def compact(text: str | None) -> bytes:
    """A compact (nullable) string: unsigned varint length + 1, 0 for null (lengths < 127 here)."""
    if text is None:
        return b"\x00"
    data = text.encode()
    return bytes([len(data) + 1]) + data


def test_keys_are_the_record_type_and_int16_strings():
    assert consumer_key(3, "g") == b"\x00\x03" + b"\x00\x01g"
    assert consumer_key(8, "g", "m-1") == b"\x00\x08" + b"\x00\x01g" + b"\x00\x03m-1"
    assert parse_consumer_key(5, consumer_key(5, "grp", "mem")[2:]) == ("grp", "mem")
    assert parse_consumer_key(6, consumer_key(6, "grp")[2:]) == ("grp", None)
    with pytest.raises(ValueError):
        parse_consumer_key(5, consumer_key(3, "grp")[2:])  # a member key without its member


def test_values_match_kafkas_layouts_byte_for_byte():
    no_tags = b"\x00"
    assert epoch_value(7) == b"\x00\x00" + struct.pack(">i", 7) + no_tags
    member = StoredConsumerMember("inst", None, "client", "/10.0.0.1", ("a", "b"), "x.*", 45000, "uniform")
    assert member_metadata_value(member) == (
        b"\x00\x00" + compact("inst") + compact(None) + compact("client") + compact("/10.0.0.1")
        + b"\x03" + compact("a") + compact("b") + compact("x.*") + struct.pack(">i", 45000)
        + compact("uniform") + no_tags)
    assert target_assignment_value({TOPIC: frozenset({2, 0})}) == (
        b"\x00\x00" + b"\x02" + TOPIC.bytes + b"\x03" + struct.pack(">ii", 0, 2) + no_tags + no_tags)
    current = StoredMemberAssignment(5, 4, 1, {TOPIC: frozenset({1})}, {TOPIC: frozenset({3})})
    assert current_assignment_value(current) == (
        b"\x00\x00" + struct.pack(">iib", 5, 4, 1)
        + b"\x02" + TOPIC.bytes + b"\x02" + struct.pack(">i", 1) + no_tags
        + b"\x02" + TOPIC.bytes + b"\x02" + struct.pack(">i", 3) + no_tags + no_tags)
    assert partition_metadata_value((StoredTopicMetadata(TOPIC, "orders", 6),)) == (
        b"\x00\x00" + b"\x02" + TOPIC.bytes + compact("orders") + struct.pack(">i", 6) + b"\x01" + no_tags + no_tags)


def test_tagged_fields_are_skipped_and_racks_read_past():
    # A member record of a classic-protocol member (tag 0), as Kafka 4 writes for mixed groups.
    body = (compact(None) + compact(None) + compact("c") + compact("h") + b"\x01" + compact(None)
            + struct.pack(">i", -1) + compact(None))
    tagged = b"\x01" + b"\x00" + b"\x03" + b"abc"
    parsed = parse_member_metadata_value(b"\x00\x00" + body + tagged)
    assert (parsed.client_id, parsed.subscribed_topic_names, parsed.server_assignor) == ("c", (), None)
    # Subscription metadata with racks per partition (Kafka 4.0 with rack-aware brokers).
    racks = b"\x02" + struct.pack(">i", 0) + b"\x02" + compact("r1") + b"\x00"
    value = b"\x00\x00" + b"\x02" + TOPIC.bytes + compact("t") + struct.pack(">i", 1) + racks + b"\x00" + b"\x00"
    assert parse_partition_metadata_value(value) == (StoredTopicMetadata(TOPIC, "t", 1),)
    assert parse_epoch_value(epoch_value(3)[:-1] + b"\x01\x05\x02xy", "epoch") == 3


def test_an_unknown_version_is_refused():
    with pytest.raises(ValueError, match="version 1"):
        parse_epoch_value(b"\x00\x01" + epoch_value(1)[2:], "ConsumerGroupMetadataValue")


assignments = st.dictionaries(st.uuids(), st.frozensets(st.integers(0, 2**31 - 1), min_size=1, max_size=5), max_size=4)
names = st.text(max_size=20)
members = st.builds(StoredConsumerMember, st.none() | names, st.none() | names, names, names,
                    st.lists(names, max_size=4).map(tuple), st.none() | names,
                    st.integers(-(2**31), 2**31 - 1), st.none() | names)
currents = st.builds(StoredMemberAssignment, st.integers(-2, 2**31 - 1), st.integers(-2, 2**31 - 1),
                     st.sampled_from([0, 1, 2]), assignments, assignments)


@settings(max_examples=200, deadline=None)
@given(members, assignments, currents, st.lists(st.builds(StoredTopicMetadata, st.uuids(), names,
                                                             st.integers(0, 10_000)), max_size=3).map(tuple))
def test_values_round_trip_and_every_strict_prefix_is_refused(member, target, current, metadata):
    cases = [
        (member_metadata_value(member), parse_member_metadata_value, member),
        (target_assignment_value(target), parse_target_assignment_value, target),
        (current_assignment_value(current), parse_current_assignment_value, current),
        (partition_metadata_value(metadata), parse_partition_metadata_value, metadata),
    ]
    for value, parse, expected in cases:
        assert parse(value) == expected
        for cut in range(len(value)):
            with pytest.raises(ValueError):
                parse(value[:cut])
        with pytest.raises(ValueError):
            parse(value + b"\x00")


def test_a_huge_declared_array_is_refused_before_anything_is_built():
    value = b"\x00\x00" + b"\xff\xff\xff\xff\x07"  # 2**31 topics declared, none there
    with pytest.raises(ValueError, match="declared"):
        parse_target_assignment_value(value)


def test_the_store_replays_consumer_groups_across_reopen_and_compaction(tmp_path):
    logs = LogManager.open(tmp_path, LogConfig.from_broker({}), 0)
    store = OffsetsStore.open(logs, 0)
    member = StoredConsumerMember(None, None, "c", "/h", ("t",), None, 30000, None)
    group = StoredConsumerGroup(
        epoch=3, subscription_metadata=(StoredTopicMetadata(TOPIC, "t", 2),), assignment_epoch=3,
        members={"m1": member, "m2": member},
        target_assignments={"m1": {TOPIC: frozenset({0})}, "m2": {TOPIC: frozenset({1})}},
        current_assignments={"m1": StoredMemberAssignment(3, 2, 0, {TOPIC: frozenset({0})}, {}),
                             "m2": StoredMemberAssignment(3, 0, 0, {TOPIC: frozenset({1})}, {})})
    written = store.write_group("consumer", "g", group, 1)
    assert written == group.record_count() == 9
    assert store.write_group("consumer", "g", group, 2) == 0, "nothing changed, nothing written"
    smaller = StoredConsumerGroup(
        epoch=4, subscription_metadata=group.subscription_metadata, assignment_epoch=3, members={"m1": member},
        target_assignments={"m1": {TOPIC: frozenset({0})}},
        current_assignments={"m1": group.current_assignments["m1"]})
    assert store.write_group("consumer", "g", smaller, 3) == 4  # the epoch, and m2's three tombstones
    logs.close()
    logs = LogManager.open(tmp_path, LogConfig.from_broker({}), 0)
    reopened = OffsetsStore.open(logs, 0)
    assert reopened.group_records("consumer").groups == {"g": smaller}
    assert clean_fully(reopened.log, 4) >= 1
    logs.close()
    logs = LogManager.open(tmp_path, LogConfig.from_broker({}), 0)
    compacted = OffsetsStore.open(logs, 0)
    assert compacted.group_records("consumer").groups == {"g": smaller}
    data = compacted.log.read(0, 1 << 20)
    live = [key for batch in iter_headers(data)
            for _, _, key, value in decode_records(data[batch.position:batch.position + batch.size])
            if value is not None]
    assert len(live) == smaller.record_count()  # the cleaned log holds the live records (and tombstones)
    compacted.delete_group("g", 5)
    logs.close()
    logs = LogManager.open(tmp_path, LogConfig.from_broker({}), 0)
    assert OffsetsStore.open(logs, 0).group_records("consumer").groups == {}
    logs.close()
