"""AuditLog (minibroker.audit) against a real LogManager: what it writes is exactly what the broker
recorded, where and when the contract says, and the pipeline's plain reader gets it back unchanged.
No Spark here (tests/pipeline/test_pipeline.py reads the same files through Spark)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from minibroker.audit import AuditLog
from minibroker.pipeline.segments import iter_audit_events, segment_files
from minibroker.protocol.records import decode_records, iter_headers
from minibroker.storage.audit_format import (
    AUDIT_FIELD_NAMES,
    AUDIT_TOPIC,
    audit_event,
    decode_event,
    encode_event,
    user_of,
)
from minibroker.storage.config import LogConfig
from minibroker.storage.manager import LogManager

NOW = 1_767_225_600_000
BROKER = LogConfig.from_broker({})


def make_event(i: int, **changes) -> dict:
    event = audit_event(
        ts=NOW + i, principal=f"User:user-{i % 3}", client_id=f"client-{i % 2}", listener="PLAINTEXT",
        api="Produce", api_key=0, api_version=11, topic="orders", partition=i % 4, bytes=100 + i,
        records=1 + i % 5, producer_id=1000 + i % 7, producer_epoch=0, pid_new=i % 2 == 0,
    )
    event.update(changes)
    return event


def segment_batches(data_dir) -> list[bytes]:
    batches = []
    for path, _, _ in segment_files(data_dir):
        data = Path(path).read_bytes()
        batches += [data[h.position : h.position + h.size] for h in iter_headers(data)]
    return batches


@pytest.fixture
def logs(tmp_path):
    manager = LogManager.open(tmp_path, BROKER, NOW)
    yield manager
    manager.close()


def test_flush_writes_one_batch_keyed_by_principal_and_reads_back_identical(tmp_path, logs):
    """One flush = one uncompressed v2 batch on partition 0 of the internal topic; key = principal,
    value = compact JSON; reading the data dir gives back the very events, in order, at offsets 0..n-1."""
    audit = AuditLog(logs)
    events = [make_event(i) for i in range(50)]
    events.append(make_event(50, api="InitProducerId", api_key=22, topic=None, partition=-1, pid_new=None))
    for event in events:
        audit.record(event)
    assert logs.topic(AUDIT_TOPIC) is None  # nothing is written before a flush
    assert audit.flush(NOW + 100) == len(events)

    info = logs.topic(AUDIT_TOPIC)
    assert info is not None and info.num_partitions == 1
    batches = segment_batches(tmp_path)
    assert len(batches) == 1
    records = list(decode_records(batches[0]))
    assert [key for _, _, key, _ in records] == [e["principal"].encode() for e in events]
    assert [value for _, _, _, value in records] == [
        json.dumps(e, separators=(",", ":")).encode() for e in events
    ]
    assert all(ts == NOW + 100 for _, ts, _, _ in records)

    assert list(iter_audit_events(tmp_path)) == list(enumerate(events))


def test_events_survive_a_restart_and_later_flushes_append(tmp_path):
    logs = LogManager.open(tmp_path, BROKER, NOW)
    audit = AuditLog(logs)
    first = [make_event(i) for i in range(10)]
    for event in first:
        audit.record(event)
    audit.close(NOW + 10)
    logs.close()

    logs = LogManager.open(tmp_path, BROKER, NOW + 20)
    audit = AuditLog(logs)
    second = [make_event(i) for i in range(10, 15)]
    for event in second:
        audit.record(event)
    audit.flush(NOW + 30)
    logs.close()
    assert [e for _, e in iter_audit_events(tmp_path)] == first + second
    assert len(segment_batches(tmp_path)) == 2


def test_maybe_flush_waits_for_the_interval(logs):
    audit = AuditLog(logs, flush_interval_ms=1000)
    assert audit.maybe_flush(NOW) is False  # nothing buffered
    audit.record(make_event(0))
    assert audit.maybe_flush(NOW) is False  # the interval starts with the first check
    assert audit.maybe_flush(NOW + 999) is False
    assert audit.maybe_flush(NOW + 1000) is True
    assert audit.buffered == 0 and audit.written == 1
    audit.record(make_event(1))
    assert audit.maybe_flush(NOW + 1999) is False
    assert audit.maybe_flush(NOW + 2000) is True
    assert audit.written == 2


def test_max_buffered_flushes_from_record_at_the_events_ts(tmp_path, logs):
    audit = AuditLog(logs, max_buffered=4)
    for i in range(3):
        audit.record(make_event(i))
    assert audit.written == 0 and audit.buffered == 3
    audit.record(make_event(3))
    assert audit.written == 4 and audit.buffered == 0
    [batch] = segment_batches(tmp_path)
    assert {ts for _, ts, _, _ in decode_records(batch)} == {NOW + 3}


def test_topic_created_on_first_use_with_the_configured_retention(logs):
    audit = AuditLog(logs, topic_configs={"retention.ms": "3600000", "retention.bytes": "1048576"})
    audit.record(make_event(0))
    audit.flush(NOW)
    info = logs.topic(AUDIT_TOPIC)
    assert info.overrides == {"retention.ms": "3600000", "retention.bytes": "1048576"}
    assert info.config.retention_ms == 3_600_000 and info.config.retention_bytes == 1_048_576


def test_a_deleted_topic_is_recreated(tmp_path, logs):
    audit = AuditLog(logs)
    audit.record(make_event(0))
    audit.flush(NOW)
    logs.delete_topic(AUDIT_TOPIC)
    audit.record(make_event(1))
    audit.flush(NOW + 1)
    assert [e for _, e in iter_audit_events(tmp_path)] == [make_event(1)]


def test_a_large_flush_is_split_under_max_message_bytes(tmp_path, logs):
    """The topic's max.message.bytes bounds each batch, so any consumer can fetch them."""
    audit = AuditLog(logs, topic_configs={"max.message.bytes": "4096"})
    events = [make_event(i, client_id="x" * 200) for i in range(100)]
    for event in events:
        audit.record(event)
    audit.flush(NOW)
    batches = segment_batches(tmp_path)
    assert len(batches) > 1
    assert all(len(b) <= 4096 for b in batches)
    assert [e for _, e in iter_audit_events(tmp_path)] == events


def test_a_failed_flush_drops_its_events_and_counts_them(tmp_path, logs, caplog):
    """Auditing is best effort: a topic that cannot be created (its name collides with an existing
    topic's) costs the events, never the request that recorded them."""
    logs.create_topic("__minibroker.audit", 1, {}, NOW)
    audit = AuditLog(logs)
    audit.record(make_event(0))
    audit.record(make_event(1))
    assert audit.flush(NOW) == 0
    assert audit.dropped == 2 and audit.written == 0 and audit.buffered == 0
    assert "dropped 2 event(s)" in caplog.text


def test_the_reader_skips_what_is_not_an_audit_event(tmp_path, logs):
    """A client may produce to the internal topic like any other: non-JSON values are skipped."""
    from minibroker.protocol.records import encode_batch

    audit = AuditLog(logs)
    audit.record(make_event(0))
    audit.flush(NOW)
    logs.log(AUDIT_TOPIC, 0).append(encode_batch([(b"k", b"not json"), (None, b"[1, 2]")], NOW), NOW)
    audit.record(make_event(1))
    audit.flush(NOW + 1)
    assert list(iter_audit_events(tmp_path)) == [(0, make_event(0)), (3, make_event(1))]


def test_event_format_round_trip_and_field_order():
    event = make_event(3)
    assert tuple(event) == AUDIT_FIELD_NAMES
    assert decode_event(encode_event(event)) == event
    assert decode_event(b'{"ts": 5}') == {name: (5 if name == "ts" else None) for name in AUDIT_FIELD_NAMES}
    with pytest.raises(ValueError):
        decode_event(b"[1]")
    assert user_of("User:alice") == "alice" and user_of("ANONYMOUS") == "ANONYMOUS"


def test_audit_format_is_pure():
    """storage/audit_format.py is shared by the broker and the pipeline: no I/O, no trio, no Spark."""
    import minibroker.storage.audit_format as module

    source = Path(module.__file__).read_text()
    for forbidden in ("import trio", "pyspark", "import minibroker", "open(", "import time"):
        assert forbidden not in source


def test_call_site_helpers_build_contract_events(logs):
    """record_produce / record_fetch / record_init_producer_id: what the handlers call."""
    from types import SimpleNamespace

    from minibroker.protocol.records import read_header

    ctx = SimpleNamespace(connection=SimpleNamespace(principal="User:alice", listener="SASL_PLAINTEXT"),
                          client_id="p-1", version=11)
    batch = encode_batch_with_pid(pid=42, epoch=3, count=4)
    rejected = SimpleNamespace(response={"error_code": 89}, throttle_ms=500, header=read_header(batch), pid_new=True)
    audit = AuditLog(logs)
    audit.record_produce(ctx, "orders", 2, batch, rejected, NOW)
    audit.record_produce(ctx, None, 0, b"", SimpleNamespace(response={"error_code": 3}, throttle_ms=0, header=None,
                                                            pid_new=None), NOW + 1)
    audit.record_fetch(ctx, "orders", 2, 900, 9, 0, 0, "", NOW + 2)
    audit.record_init_producer_id(ctx, 43, 0, 0, 0, "", NOW + 3)
    common = dict(principal="User:alice", client_id="p-1", listener="SASL_PLAINTEXT", api_version=11)
    audit.flush(NOW + 4)
    assert [event for _, event in iter_audit_events(logs.data_dir)] == [
        audit_event(ts=NOW, api="Produce", api_key=0, topic="orders", partition=2, bytes=len(batch), records=4,
                    producer_id=42, producer_epoch=3, error_code=89, throttle_time_ms=500,
                    throttle_quota="producer_ids_rate", pid_new=True, **common),
        audit_event(ts=NOW + 1, api="Produce", api_key=0, topic=None, partition=0, error_code=3, **common),
        audit_event(ts=NOW + 2, api="Fetch", api_key=1, topic="orders", partition=2, bytes=900, records=9, **common),
        audit_event(ts=NOW + 3, api="InitProducerId", api_key=22, producer_id=43, producer_epoch=0, **common),
    ]


def encode_batch_with_pid(pid: int, epoch: int, count: int) -> bytes:
    from minibroker.protocol.records import encode_batch

    return encode_batch([(None, b"v")] * count, NOW, producer_id=pid, producer_epoch=epoch, base_sequence=0)
