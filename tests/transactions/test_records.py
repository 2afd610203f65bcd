"""`__transaction_state`: its records are Kafka's TransactionLogKey v0 / TransactionLogValue v0-1 byte for
byte (expected bytes written out field by field from Kafka's TransactionLogKey.json /
TransactionLogValue.json, not produced by our encoder), v1's tagged fields read back, damaged values
refused with a message, and the store's state survives reopening the log, tombstones included."""

from __future__ import annotations

import struct

import pytest

from minibroker.storage.config import LogConfig
from minibroker.storage.manager import LogManager
from minibroker.storage.transaction_records import (
    TxnRecord,
    TxnState,
    parse_transaction_key,
    parse_transaction_value,
    transaction_key,
    transaction_value,
)
from minibroker.storage.transaction_store import TOPIC, TransactionStore


def test_key_is_record_type_0_and_the_transactional_id():
    assert transaction_key("my-txn") == b"\x00\x00" + b"\x00\x06" + b"my-txn"
    assert parse_transaction_key(b"\x00\x00\x00\x03abc") == "abc"
    with pytest.raises(ValueError, match="record type 1"):
        parse_transaction_key(b"\x00\x01\x00\x03abc")


def test_value_v0_ongoing_byte_for_byte():
    record = TxnRecord(producer_id=4000, producer_epoch=3, timeout_ms=60000, state=TxnState.ONGOING,
                       partitions=frozenset({("b", 1), ("a", 2), ("a", 0)}), last_update_ms=1700000000500,
                       start_ms=1700000000000)
    expected = (
        struct.pack(">h", 0)  # version
        + struct.pack(">q", 4000) + struct.pack(">h", 3) + struct.pack(">i", 60000) + struct.pack(">b", 1)
        + struct.pack(">i", 2)  # two topics
        + struct.pack(">h", 1) + b"a" + struct.pack(">i", 2) + struct.pack(">ii", 0, 2)
        + struct.pack(">h", 1) + b"b" + struct.pack(">i", 1) + struct.pack(">i", 1)
        + struct.pack(">q", 1700000000500) + struct.pack(">q", 1700000000000)
    )
    assert transaction_value(record) == expected
    assert parse_transaction_value(expected) == record


def test_value_v0_empty_has_null_partitions():
    record = TxnRecord(7, 0, 900000, TxnState.EMPTY, frozenset(), 5, -1)
    expected = (struct.pack(">hqhib", 0, 7, 0, 900000, 0) + struct.pack(">i", -1) + struct.pack(">qq", 5, -1))
    assert transaction_value(record) == expected
    assert parse_transaction_value(expected) == record
    with pytest.raises(ValueError, match="Empty state"):
        transaction_value(TxnRecord(7, 0, 1, TxnState.EMPTY, frozenset({("a", 0)})))


def test_value_v1_flexible_with_tagged_fields():
    record = TxnRecord(9, 2, 1000, TxnState.PREPARE_COMMIT, frozenset({("t", 5)}), 11, 10,
                       previous_producer_id=8, client_transaction_version=2, next_producer_epoch=3)
    expected = (
        struct.pack(">hqhib", 1, 9, 2, 1000, 2)
        + bytes([2])  # compact array: one topic
        + bytes([2]) + b"t"  # compact string
        + bytes([2]) + struct.pack(">i", 5)  # compact array of one partition
        + bytes([0])  # the topic's tagged fields
        + struct.pack(">qq", 11, 10)
        + bytes([3])  # three tagged fields, in tag order; next_producer_id is at its default
        + bytes([0, 8]) + struct.pack(">q", 8)
        + bytes([2, 2]) + struct.pack(">h", 2)
        + bytes([3, 2]) + struct.pack(">h", 3)
    )
    assert transaction_value(record, version=1) == expected
    assert parse_transaction_value(expected) == record
    # An unknown tag is skipped, as a flexible reader must.
    unknown_tag = expected[:-19] + bytes([4]) + expected[-18:] + bytes([9, 1, 0xFF])
    assert parse_transaction_value(unknown_tag) == record


@pytest.mark.parametrize("damage, message", [
    (b"\x00\x02" + b"\x00" * 30, "version 2"),
    (struct.pack(">hqhib", 0, 1, 0, 1, 9) + struct.pack(">i", -1) + b"\x00" * 16, "unknown transaction state 9"),
    (struct.pack(">hqhib", 0, 1, 0, 1, 1) + struct.pack(">i", 1) + struct.pack(">h", 500), "runs past"),
    (transaction_value(TxnRecord(1, 0, 1, TxnState.EMPTY)) + b"\x00", "after the value"),
])
def test_damaged_values_are_refused(damage, message):
    with pytest.raises(ValueError, match=message):
        parse_transaction_value(damage)


def test_store_survives_reopening_with_tombstones(tmp_path):
    logs = LogManager.open(tmp_path, LogConfig.from_broker({}), 0)
    store = TransactionStore.open(logs, 0)
    ongoing = TxnRecord(1, 0, 1000, TxnState.ONGOING, frozenset({("a", 0)}), 5, 5)
    store.write("a", TxnRecord(1, 0, 1000, TxnState.EMPTY, frozenset(), 1, -1), 1)
    store.write("a", ongoing, 5)
    store.write("b", TxnRecord(2, 4, 1000, TxnState.COMPLETE_ABORT, frozenset(), 6, 2), 6)
    store.delete(["b"], 7)
    logs.close(clean=False)
    logs = LogManager.open(tmp_path, LogConfig.from_broker({}), 0)
    assert logs.topic(TOPIC) is not None
    reopened = TransactionStore.open(logs, 0)
    assert reopened.records == {"a": ongoing}
    # The log cleaner (an ordinary compacted topic) keeps the last record of each id; the cleaned
    # log replays to the same state.
    from tests.support.cleaning import clean_fully

    log = logs.log(TOPIC, 0)
    before = sum(h.records_count for h in log.iter_batch_headers(log.log_start_offset))
    clean_fully(log, 10)
    after = sum(h.records_count for h in log.iter_batch_headers(log.log_start_offset))
    assert before == 4 and after < before
    logs.close(clean=True)
    logs = LogManager.open(tmp_path, LogConfig.from_broker({}), 0)
    again = TransactionStore.open(logs, 0)
    assert again.records == {"a": ongoing}
    logs.close(clean=True)
