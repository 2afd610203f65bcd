"""The committed-offsets store: its record batches are real v2 batches (checked by our own batch
checks and by kafka-python's decoder), its records are Kafka's OffsetCommit and GroupMetadata
layouts (checked by a reader written from Kafka's specs, not by ours), records in the layout this
broker wrote before still load, its state survives reopening the log, and its self-compaction keeps
the state while dropping the old records. Hypothesis compares the store with a dict and round-trips
the values.
"""

from __future__ import annotations

import struct

from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch

from minibroker.groups.classic_group import ClassicGroup
from minibroker.protocol.records import check_produce_records, decode_records, encode_batch, iter_headers
from minibroker.storage.config import LogConfig
from minibroker.storage.group_records import (
    StoredMember,
    group_key,
    group_value,
    offset_key,
    offset_value,
    parse_group_value,
    parse_offset_value,
)
from minibroker.storage.manager import LogManager
from tests.support.cleaning import clean_fully
from minibroker.storage.offsets_store import (
    TOPIC,
    OffsetAndMetadata,
    OffsetsStore,
    StoredGroup,
)


def open_store(data_dir) -> tuple[LogManager, OffsetsStore]:
    logs = LogManager.open(data_dir, LogConfig.from_broker({}), 0)
    return logs, OffsetsStore.open(logs, 0)


def test_batches_are_valid_v2_batches_that_kafka_python_reads():
    records = [(b"k1", b"v1"), (b"k2", None), (b"k3", b"x" * 300)]
    batch = encode_batch(records, 1_700_000_000_123)
    header = check_produce_records(batch)
    assert (header.records_count, header.base_timestamp, header.producer_id) == (3, 1_700_000_000_123, -1)
    assert [(k, v) for _, _, k, v in decode_records(batch)] == records
    decoded = [(r.key, r.value, r.offset, r.timestamp) for r in DefaultRecordBatch(batch)]
    assert decoded == [(k, v, i, 1_700_000_000_123) for i, (k, v) in enumerate(records)]


def test_state_survives_reopening(tmp_path):
    logs, store = open_store(tmp_path)
    store.commit("g1", {("t", 0): OffsetAndMetadata(10, 3, "meta", 111, -1),
                        ("t", 1): OffsetAndMetadata(20, -1, "", 112, 9999)}, 113)
    store.commit("g1", {("t", 0): OffsetAndMetadata(11, 3, "later", 114)}, 114)
    store.commit("g2", {("u", 5): OffsetAndMetadata(7, -1, "", 115)}, 115)
    store.write_group("classic", "g1", StoredGroup("consumer", 4, "range", 0, 116), 116)
    store.remove_offsets("g1", [("t", 1)], 117)
    store.commit("gone", {("t", 0): OffsetAndMetadata(1, -1, "", 118)}, 118)
    store.write_group("classic", "gone", StoredGroup("consumer", 1, "", 0, 118), 118)
    store.delete_group("gone", 119)
    expected = (store.offsets, store.group_records("classic").groups)
    assert logs.topic(TOPIC).config.cleanup_policy == "compact"  # time retention never applies
    logs.close()

    logs, reopened = open_store(tmp_path)
    assert (reopened.offsets, reopened.group_records("classic").groups) == expected
    assert reopened.offsets == {
        "g1": {("t", 0): OffsetAndMetadata(11, 3, "later", 114)},
        "g2": {("u", 5): OffsetAndMetadata(7, -1, "", 115)},
    }
    assert reopened.group_records("classic").groups == {"g1": StoredGroup("consumer", 4, "range", 0, 116)}
    logs.close()


def test_the_log_cleaner_keeps_the_live_state_and_drops_old_records(tmp_path):
    logs, store = open_store(tmp_path)
    log = logs.log(TOPIC, 0)
    for i in range(200):
        store.commit("g", {("t", p): OffsetAndMetadata(i, -1, "", i) for p in range(3)}, i)
    assert clean_fully(log, 1000) >= 1
    assert len(raw_records(logs)) == 3  # one batch held all three partitions' last commits
    state = dict(store.offsets)
    store.commit("g", {("t", 0): OffsetAndMetadata(999, -1, "", 1001)}, 1001)
    logs.close()
    logs, reopened = open_store(tmp_path)
    assert reopened.offsets == {"g": {**state["g"], ("t", 0): OffsetAndMetadata(999, -1, "", 1001)}}
    logs.close()


ops = st.lists(
    st.one_of(
        st.tuples(st.just("commit"), st.sampled_from("ab"), st.sampled_from(["t", "u"]),
                  st.integers(0, 2), st.integers(0, 10**6), st.text(max_size=5)),
        st.tuples(st.just("remove"), st.sampled_from("ab"), st.sampled_from(["t", "u"]), st.integers(0, 2)),
        st.tuples(st.just("group"), st.sampled_from("ab"), st.integers(0, 50)),
        st.tuples(st.just("delete"), st.sampled_from("ab")),
        st.tuples(st.just("clean")),
        st.tuples(st.just("reopen")),
    ),
    max_size=40,
)


@settings(max_examples=60, deadline=None)
@given(ops=ops)
def test_store_matches_a_dict_model_across_reopens_and_cleanings(tmp_path_factory, ops):
    data_dir = tmp_path_factory.mktemp("offsets")
    logs, store = open_store(data_dir)
    offsets: dict[str, dict] = {}
    groups: dict[str, StoredGroup] = {}
    for now, op in enumerate(ops):
        kind = op[0]
        if kind == "commit":
            _, group, topic, partition, offset, metadata = op
            om = OffsetAndMetadata(offset, -1, metadata, now)
            store.commit(group, {(topic, partition): om}, now)
            offsets.setdefault(group, {})[(topic, partition)] = om
        elif kind == "remove":
            _, group, topic, partition = op
            store.remove_offsets(group, [(topic, partition)], now)
            offsets.get(group, {}).pop((topic, partition), None)
        elif kind == "group":
            stored = StoredGroup("consumer", op[2], "range", 0, now)
            store.write_group("classic", op[1], stored, now)
            groups[op[1]] = stored
        elif kind == "delete":
            store.delete_group(op[1], now)
            offsets.pop(op[1], None)
            groups.pop(op[1], None)
        elif kind == "clean":
            clean_fully(store.log, now)
        else:
            logs.close()
            logs, store = open_store(data_dir)
        assert store.offsets == {g: o for g, o in offsets.items() if o}
        assert store.group_records("classic").groups == groups
    logs.close()


# --- Kafka's record layouts ------------------------------------------------------------------------


class KafkaReader:
    """A reader of Kafka's non-flexible types, written from the group-coordinator's JSON specs
    (OffsetCommitKey/Value.json, GroupMetadataKey/Value.json), independent of storage.group_records."""

    def __init__(self, data: bytes) -> None:
        self.data, self.at = data, 0

    def _take(self, fmt: str):
        (value,) = struct.unpack_from(fmt, self.data, self.at)
        self.at += struct.calcsize(fmt)
        return value

    def int16(self) -> int:
        return self._take(">h")

    def int32(self) -> int:
        return self._take(">i")

    def int64(self) -> int:
        return self._take(">q")

    def string(self, nullable: bool = False) -> str | None:
        length = self.int16()
        if length < 0:
            assert nullable
            return None
        self.at += length
        return self.data[self.at - length:self.at].decode()

    def bytes_(self) -> bytes:
        length = self.int32()
        self.at += length
        return self.data[self.at - length:self.at]

    def end(self) -> None:
        assert self.at == len(self.data), f"{len(self.data) - self.at} bytes left over"


def kafka_offset_key(key: bytes) -> tuple[str, str, int]:
    r = KafkaReader(key)
    assert r.int16() == 1  # OffsetCommitKey's record type
    parsed = (r.string(), r.string(), r.int32())
    r.end()
    return parsed


def kafka_offset_value(value: bytes) -> dict:
    r = KafkaReader(value)
    version = r.int16()
    assert version in (1, 3), version  # what Kafka 4 writes
    out = {"version": version, "offset": r.int64()}
    if version >= 3:
        out["leaderEpoch"] = r.int32()
    out["metadata"] = r.string()
    out["commitTimestamp"] = r.int64()
    if version == 1:
        out["expireTimestamp"] = r.int64()
    r.end()
    return out


def kafka_group_value(value: bytes) -> dict:
    r = KafkaReader(value)
    version = r.int16()
    assert version == 3, version
    out = {"protocolType": r.string(), "generation": r.int32(), "protocol": r.string(nullable=True),
           "leader": r.string(nullable=True), "currentStateTimestamp": r.int64(), "members": []}
    for _ in range(r.int32()):
        out["members"].append({
            "memberId": r.string(), "groupInstanceId": r.string(nullable=True), "clientId": r.string(),
            "clientHost": r.string(), "rebalanceTimeout": r.int32(), "sessionTimeout": r.int32(),
            "subscription": r.bytes_(), "assignment": r.bytes_()})
    r.end()
    return out


def raw_records(logs: LogManager) -> list[tuple[bytes, bytes | None]]:
    log = logs.log(TOPIC, 0)
    data = log.read(log.log_start_offset, 1 << 20)
    return [(k, v) for header in iter_headers(data)
            for _, _, k, v in decode_records(memoryview(data)[header.position:header.position + header.size])]


MEMBERS = (
    StoredMember("m-1", None, "client-1", "/10.0.0.1", 30_000, 10_000, b"sub-1", b"assigned-1"),
    StoredMember("m-2", "instance-2", "client-2", "/10.0.0.2", 45_000, 6_000, b"sub-2", b""),
)


def test_records_are_kafkas_offset_commit_and_group_metadata_layouts(tmp_path):
    """What the store writes decodes, byte for byte, as Kafka's OffsetCommitKey + OffsetCommitValue
    v3 (v1 for a commit with an expire timestamp) and GroupMetadataKey + GroupMetadataValue v3."""
    logs, store = open_store(tmp_path)
    store.commit("g", {("t", 0): OffsetAndMetadata(10, 7, "meta", 111),
                       ("t", 1): OffsetAndMetadata(20, -1, "", 112, 9999)}, 113)
    store.write_group("classic", "g", StoredGroup("consumer", 4, "range", 2, 116, "m-1", MEMBERS), 116)
    store.write_group("classic", "empty", StoredGroup("consumer", 5, "", 0, 117), 117)
    (k0, v0), (k1, v1), (kg, vg), (ke, ve) = raw_records(logs)
    assert kafka_offset_key(k0) == ("g", "t", 0) and kafka_offset_key(k1) == ("g", "t", 1)
    assert kafka_offset_value(v0) == {"version": 3, "offset": 10, "leaderEpoch": 7, "metadata": "meta",
                                      "commitTimestamp": 111}
    assert kafka_offset_value(v1) == {"version": 1, "offset": 20, "metadata": "", "commitTimestamp": 112,
                                      "expireTimestamp": 9999}
    assert kg == struct.pack(">hh", 2, 1) + b"g"  # GroupMetadataKey: record type 2, group
    assert kafka_group_value(vg) == {
        "protocolType": "consumer", "generation": 4, "protocol": "range", "leader": "m-1",
        "currentStateTimestamp": 116, "members": [
            {"memberId": "m-1", "groupInstanceId": None, "clientId": "client-1", "clientHost": "/10.0.0.1",
             "rebalanceTimeout": 30_000, "sessionTimeout": 10_000, "subscription": b"sub-1",
             "assignment": b"assigned-1"},
            {"memberId": "m-2", "groupInstanceId": "instance-2", "clientId": "client-2", "clientHost": "/10.0.0.2",
             "rebalanceTimeout": 45_000, "sessionTimeout": 6_000, "subscription": b"sub-2", "assignment": b""},
        ]}
    assert kafka_group_value(ve) == {"protocolType": "consumer", "generation": 5, "protocol": None, "leader": None,
                                     "currentStateTimestamp": 117, "members": []}
    logs.close()
    logs, reopened = open_store(tmp_path)
    assert reopened.group_records("classic").groups["g"] == StoredGroup("consumer", 4, "range", 2, 116, "m-1", MEMBERS)
    assert reopened.offsets["g"] == {("t", 0): OffsetAndMetadata(10, 7, "meta", 111),
                                     ("t", 1): OffsetAndMetadata(20, -1, "", 112, 9999)}
    logs.close()


def old_offset_value(offset: int, leader_epoch: int, metadata: str, commit_ms: int, expire_ms: int) -> bytes:
    """This broker's layout before Kafka's: version 0 of its own."""
    meta = metadata.encode()
    return struct.pack(">HqiH", 0, offset, leader_epoch, len(meta)) + meta + struct.pack(">qq", commit_ms, expire_ms)


def old_group_value(protocol_type: str, generation: int, protocol: str, members: int, state_ms: int) -> bytes:
    pt, p = protocol_type.encode(), protocol.encode()
    return (struct.pack(">HH", 0, len(pt)) + pt + struct.pack(">iH", generation, len(p)) + p
            + struct.pack(">iq", members, state_ms))


def test_the_old_layout_still_loads_and_survives_cleaning(tmp_path):
    """A data directory written before the change: its offsets and groups load as they were, new
    commits beside them are Kafka's; the log cleaner keeps each key's last record as it was written
    (an old-layout record until its key is written again), and the state reopens the same (a group
    that had members keeps what a restart used from it)."""
    logs = LogManager.open(tmp_path, LogConfig.from_broker({}), 0)
    OffsetsStore.open(logs, 0)  # creates the topic
    old = [
        (offset_key("g", "t", 0), old_offset_value(41, 3, "m", 100, -1)),
        (offset_key("g", "t", 1), old_offset_value(7, -1, "", 101, 50_000)),
        (offset_key("g", "t", 2), old_offset_value(1, -1, "", 102, -1)),
        (offset_key("g", "t", 2), None),
        (group_key("g"), old_group_value("consumer", 9, "range", 0, 103)),
        (group_key("busy"), old_group_value("consumer", 2, "roundrobin", 3, 104)),
        (offset_key("busy", "u", 0), old_offset_value(5, -1, "", 105, -1)),
    ]
    logs.log(TOPIC, 0).append(encode_batch(old, 106), 106)
    logs.close()

    logs, store = open_store(tmp_path)
    assert store.replay_complete and store.skipped_records == 0
    expected_offsets = {
        "g": {("t", 0): OffsetAndMetadata(41, 3, "m", 100), ("t", 1): OffsetAndMetadata(7, -1, "", 101, 50_000)},
        "busy": {("u", 0): OffsetAndMetadata(5, -1, "", 105)},
    }
    assert store.offsets == expected_offsets
    assert store.group_records("classic").groups == {"g": StoredGroup("consumer", 9, "range", 0, 103),
                            "busy": StoredGroup("consumer", 2, "roundrobin", 3, 104)}
    loaded = {g: ClassicGroup.from_record(g, s, 5_000) for g, s in store.group_records("classic").groups.items()}
    for offset in range(4, 20):  # records the cleaner will remove
        store.commit("g", {("t", 3): OffsetAndMetadata(offset, -1, "", 107)}, 107)
    assert kafka_offset_value(raw_records(logs)[-1][1])["version"] == 3
    expected_offsets["g"][("t", 3)] = OffsetAndMetadata(19, -1, "", 107)

    assert clean_fully(store.log, 108) >= 1
    records = raw_records(logs)
    # The six old records (the t2 tombstone kept until delete.retention.ms) and the last t3 commit.
    assert len(records) == 7
    assert kafka_offset_value(records[-1][1])["version"] == 3
    logs.close()

    logs, reopened = open_store(tmp_path)
    assert reopened.offsets == expected_offsets
    assert reopened.group_records("classic").groups["g"] == StoredGroup("consumer", 9, "range", 0, 103)
    assert reopened.group_records("classic").groups["busy"] == StoredGroup("consumer", 2, "roundrobin", 3, 104)  # still the old record
    for group_id, stored in reopened.group_records("classic").groups.items():
        again = ClassicGroup.from_record(group_id, stored, 5_000)
        before = loaded[group_id]
        assert (again.protocol_type, again.generation_id, again.state_timestamp_ms) == (
            before.protocol_type, before.generation_id, before.state_timestamp_ms)
    assert loaded["busy"].state_timestamp_ms == 5_000 and loaded["g"].state_timestamp_ms == 103
    logs.close()


def test_a_value_of_an_unknown_version_is_skipped(tmp_path):
    logs = LogManager.open(tmp_path, LogConfig.from_broker({}), 0)
    OffsetsStore.open(logs, 0)
    flexible = struct.pack(">hq", 4, 1) + b"\x00" * 14  # OffsetCommitValue v4 is not read here
    logs.log(TOPIC, 0).append(encode_batch([(offset_key("g", "t", 0), flexible),
                                            (offset_key("g", "t", 1), offset_value(OffsetAndMetadata(2, -1, "", 1)))],
                                           1), 1)
    logs.close()
    logs, store = open_store(tmp_path)
    assert store.offsets == {"g": {("t", 1): OffsetAndMetadata(2, -1, "", 1)}}
    assert (store.skipped_records, store.replay_complete) == (1, False)
    logs.close()


names = st.text(max_size=8)
stored_members = st.builds(StoredMember, names, st.none() | names, names, names, st.integers(0, 2**31 - 1),
                           st.integers(0, 2**31 - 1), st.binary(max_size=20), st.binary(max_size=20))


@settings(max_examples=200, deadline=None)
@given(offset=st.integers(-1, 2**63 - 1), epoch=st.integers(-1, 2**31 - 1), metadata=names,
       commit=st.integers(-1, 2**62), expire=st.integers(-1, 2**62))
def test_offset_values_round_trip(offset, epoch, metadata, commit, expire):
    if expire >= 0:
        epoch = -1  # OffsetCommit versions with a retention time carry no leader epoch (v1 has none)
    om = OffsetAndMetadata(offset, epoch, metadata, commit, expire)
    assert parse_offset_value(offset_value(om)) == om


@settings(max_examples=200, deadline=None)
@given(protocol_type=names, generation=st.integers(-1, 2**31 - 1), protocol=names,
       state=st.integers(-1, 2**62), leader=st.none() | names, members=st.lists(stored_members, max_size=3))
def test_group_values_round_trip(protocol_type, generation, protocol, state, leader, members):
    stored = StoredGroup(protocol_type, generation, protocol, len(members), state, leader, tuple(members))
    assert parse_group_value(group_value(stored)) == stored
