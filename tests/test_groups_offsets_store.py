"""The committed-offsets store: its record batches are real v2 batches (checked by our own batch
checks and by kafka-python's decoder), its state survives reopening the log, and its self-compaction
keeps the state while dropping the old records. A Hypothesis model compares the store with a dict.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch

from protocol.records import check_produce_records, decode_records, encode_batch
from storage.config import LogConfig
from storage.manager import LogManager
from storage.offsets_store import (
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
    store.store_group("g1", StoredGroup("consumer", 4, "range", 0, 116), 116)
    store.remove_offsets("g1", [("t", 1)], 117)
    store.commit("gone", {("t", 0): OffsetAndMetadata(1, -1, "", 118)}, 118)
    store.store_group("gone", StoredGroup("consumer", 1, "", 0, 118), 118)
    store.delete_group("gone", 119)
    expected = (store.offsets, store.groups)
    assert logs.topic(TOPIC).overrides["retention.ms"] == "-1"
    logs.close()

    logs, reopened = open_store(tmp_path)
    assert (reopened.offsets, reopened.groups) == expected
    assert reopened.offsets == {
        "g1": {("t", 0): OffsetAndMetadata(11, 3, "later", 114)},
        "g2": {("u", 5): OffsetAndMetadata(7, -1, "", 115)},
    }
    assert reopened.groups == {"g1": StoredGroup("consumer", 4, "range", 0, 116)}
    logs.close()


def test_compaction_rewrites_live_state_and_drops_old_records(tmp_path):
    logs, store = open_store(tmp_path)
    log = logs.log(TOPIC, 0)
    for i in range(200):
        store.commit("g", {("t", p): OffsetAndMetadata(i, -1, "", i) for p in range(3)}, i)
    assert not store.maybe_compact(1000, slack=1000)
    assert store.maybe_compact(1000, slack=10)
    assert log.log_start_offset == 600 and store.records_in_log == 3
    state = dict(store.offsets)
    store.commit("g", {("t", 0): OffsetAndMetadata(999, -1, "", 1001)}, 1001)
    logs.close()
    logs, reopened = open_store(tmp_path)
    assert reopened.offsets == {"g": {**state["g"], ("t", 0): OffsetAndMetadata(999, -1, "", 1001)}}
    assert reopened.records_in_log == 4
    logs.close()


ops = st.lists(
    st.one_of(
        st.tuples(st.just("commit"), st.sampled_from("ab"), st.sampled_from(["t", "u"]),
                  st.integers(0, 2), st.integers(0, 10**6), st.text(max_size=5)),
        st.tuples(st.just("remove"), st.sampled_from("ab"), st.sampled_from(["t", "u"]), st.integers(0, 2)),
        st.tuples(st.just("group"), st.sampled_from("ab"), st.integers(0, 50)),
        st.tuples(st.just("delete"), st.sampled_from("ab")),
        st.tuples(st.just("compact")),
        st.tuples(st.just("reopen")),
    ),
    max_size=40,
)


@settings(max_examples=60, deadline=None)
@given(ops=ops)
def test_store_matches_a_dict_model_across_reopens_and_compactions(tmp_path_factory, ops):
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
            store.store_group(op[1], stored, now)
            groups[op[1]] = stored
        elif kind == "delete":
            store.delete_group(op[1], now)
            offsets.pop(op[1], None)
            groups.pop(op[1], None)
        elif kind == "compact":
            store.maybe_compact(now, slack=0)
        else:
            logs.close()
            logs, store = open_store(data_dir)
        assert store.offsets == {g: o for g, o in offsets.items() if o}
        assert store.groups == groups
    logs.close()
