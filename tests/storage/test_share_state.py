"""Durable share state (minibroker.storage.share_state, Kafka 4.4's __share_group_state): its two
record kinds read back as written, merging state batches as Kafka's PersisterStateBatchCombiner does
(checked against a per-offset model), a store replayed from its log after updates and snapshots
(as after a restart or kill -9), pruning below the oldest latest snapshot, and an unreadable record
skipped and counted, never guessed around.
"""

from __future__ import annotations

import uuid

from hypothesis import given, settings
from hypothesis import strategies as st

from minibroker.storage.config import LogConfig
from minibroker.storage.manager import LogManager
from minibroker.storage.share_state import (
    SHARE_SNAPSHOT,
    SHARE_UPDATE,
    TOPIC,
    SharePartitionState,
    ShareStateKey,
    ShareStateStore,
    StateBatch,
    combine_state_batches,
    parse_snapshot_value,
    parse_state_key,
    parse_update_value,
    snapshot_value,
    state_key,
    update_value,
)

KEY = ShareStateKey("group", uuid.UUID(int=42), 3)

batch = st.builds(lambda first, length, state, count: StateBatch(first, first + length, state, count),
                  st.integers(0, 60), st.integers(0, 8), st.sampled_from([0, 2, 4]), st.integers(0, 6))


@given(st.lists(batch, max_size=6), st.integers(-1, 2**40), st.integers(-1, 2**31 - 1))
def test_records_read_back_as_written(batches, start_offset, count):
    state = SharePartitionState(5, 3, 7, start_offset, count, 1_700_000_000_000, 1_700_000_000_001, tuple(batches))
    assert parse_snapshot_value(snapshot_value(state)) == state
    assert parse_update_value(update_value(5, 7, start_offset, count, batches)) == (5, 7, start_offset, count,
                                                                                     tuple(batches))
    for record_type in (SHARE_SNAPSHOT, SHARE_UPDATE):
        assert parse_state_key(state_key(record_type, KEY)) == (record_type, KEY)


@given(st.binary(max_size=80))
def test_arbitrary_bytes_are_refused_cleanly(data):
    for parse in (parse_snapshot_value, parse_update_value, parse_state_key):
        try:
            parse(data)
        except ValueError:
            pass


def _model(batches: list[StateBatch], start: int) -> list[StateBatch]:
    """Per offset: the covering batch with the highest (delivery count, state), from `start` on."""
    winner: dict[int, tuple[int, int]] = {}
    for b in batches:
        for offset in range(max(b.first_offset, start if start != -1 else b.first_offset), b.last_offset + 1):
            winner[offset] = max(winner.get(offset, (-1, -1)), (b.delivery_count, b.delivery_state))
    out: list[StateBatch] = []
    for offset in sorted(winner):
        count, state = winner[offset]
        if out and out[-1].last_offset + 1 == offset and (out[-1].delivery_count, out[-1].delivery_state) == (count, state):
            out[-1] = out[-1]._replace(last_offset=offset)
        else:
            out.append(StateBatch(offset, offset, state, count))
    return out


@settings(max_examples=300)
@given(st.lists(batch, max_size=6), st.lists(batch, max_size=6), st.integers(-1, 40))
def test_merging_state_batches_matches_a_per_offset_model(so_far, new, start):
    assert list(combine_state_batches(so_far, new, start)) == _model(so_far + new, start)


def open_store(tmp_path) -> tuple[LogManager, ShareStateStore]:
    logs = LogManager.open(tmp_path / "data", LogConfig.from_broker({}), 0)
    return logs, ShareStateStore.open(logs, 0)


def test_a_store_replays_to_the_state_it_wrote_across_updates_and_snapshots(tmp_path):
    logs, store = open_store(tmp_path)
    assert logs.topic(TOPIC) is None  # created at the first write, as Kafka creates it when needed
    store.write_snapshot(KEY, SharePartitionState(0, 1, 0, -1, -1, 5, 5), 5)
    store.write_update(KEY, 0, 0, 3, (StateBatch(0, 2, 2, 1), StateBatch(3, 4, 0, 1)), 6)
    store.write_update(KEY, 0, 3, 4, (StateBatch(3, 3, 4, 2),), 7)
    expected = store.states[KEY]
    assert expected.start_offset == 3 and expected.batches == (StateBatch(3, 3, 4, 2), StateBatch(4, 4, 0, 1))
    logs.close(clean=False)  # as a kill -9 leaves it: nothing flushed beyond the appends
    logs, reopened = open_store(tmp_path)
    assert reopened.states[KEY] == expected and reopened.updates_since_snapshot[KEY] == 2
    reopened.write_snapshot(KEY, expected, 8)
    other = ShareStateKey("group", uuid.UUID(int=43), 0)
    reopened.write_snapshot(other, SharePartitionState(0, 1, 0, 0), 9)
    # The records below the oldest of the latest snapshots are not needed any more.
    assert reopened.last_redundant_offset() == 3
    reopened.log.delete_records_before(3)
    reopened.delete(other, 10)
    logs.close()
    logs, pruned = open_store(tmp_path)
    assert pruned.states == {KEY: expected} and pruned.skipped_records == 0
    logs.close()


def test_an_unreadable_record_is_skipped_and_counted(tmp_path):
    from minibroker.protocol.records import encode_batch

    logs, store = open_store(tmp_path)
    store.write_snapshot(KEY, SharePartitionState(0, 1, 0, 0), 1)
    store.log.append(encode_batch([(state_key(SHARE_UPDATE, KEY), b"\x00\x00\x01")], 2), 2)
    logs.close()
    logs, reopened = open_store(tmp_path)
    assert reopened.skipped_records == 1 and not reopened.replay_complete
    assert reopened.states[KEY].start_offset == 0  # what could be read is kept
    logs.close()
