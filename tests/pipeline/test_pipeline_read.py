"""Reading the audit into Spark: over the Kafka protocol from a running broker (offset ranges, one
partition read by several tasks), from its data directory (byte ranges at batch boundaries), and the
JSON parsed by Spark with the declared schema. Both readers must give exactly what the broker wrote."""

from __future__ import annotations

import pytest

from minibroker.audit import AuditLog
from minibroker.pipeline.read import PARSED_SCHEMA, decision_events, quota_records, read_data_dir, read_kafka
from minibroker.pipeline.sources import segment_byte_ranges, split_sizes
from minibroker.storage.audit_format import AUDIT_FIELD_NAMES, AUDIT_TOPIC, audit_event
from minibroker.storage.config import LogConfig
from minibroker.storage.manager import LogManager

T0 = 1_767_225_600_000


def event(i: int) -> dict:
    return audit_event(ts=T0 + i, principal=f"User:u{i % 3}", client_id="c", listener="PLAINTEXT", api="Produce",
                       api_key=0, api_version=9, topic="t", partition=i % 2, bytes=100 + i, records=1,
                       producer_id=1000 + i % 7, producer_epoch=0)


def write_audit(data_dir, n: int, flush_every: int = 7, segment_bytes: int = 4000) -> list[dict]:
    logs = LogManager.open(data_dir, LogConfig.from_broker({}), T0)
    audit = AuditLog(logs, topic_configs={"internal.segment.bytes": str(segment_bytes)})
    written = []
    for i in range(n):
        audit.record(event(i))
        written.append(event(i))
        if i % flush_every == flush_every - 1:
            audit.flush(T0 + i)
    audit.close(T0 + n)
    logs.close()
    return written


def test_split_sizes_follow_sparks_kafka_source():
    assert split_sizes([100, 0, 10], max_per_part=30, min_parts=0) == [4, 0, 1]
    assert split_sizes([100, 100], max_per_part=1000, min_parts=6) == [3, 3]  # minPartitions shared by size
    assert split_sizes([90, 10], max_per_part=1000, min_parts=4) == [4, 1]


def test_segment_ranges_cut_at_batch_boundaries_and_cover_every_byte(tmp_path):
    write_audit(tmp_path, 200, segment_bytes=20_000)
    files = sorted((tmp_path / f"{AUDIT_TOPIC}-0").glob("*.log"))
    ranges = segment_byte_ranges(tmp_path, max_bytes=1500)
    assert len(ranges) > 2 * len(files) > 2  # segments themselves are cut, not one task per segment
    for path in files:
        mine = [r for r in ranges if r.path == str(path)]
        assert mine[0].start == 0 and mine[-1].end == path.stat().st_size
        assert all(a.end == b.start for a, b in zip(mine, mine[1:]))
        data = path.read_bytes()
        for r in mine:  # each range starts with a batch: its base offset and magic 2 at byte 16
            assert data[r.start + 16] == 2


def test_data_dir_reader_splits_by_bytes_and_returns_exactly_what_was_written(spark, tmp_path):
    written = write_audit(tmp_path, 300, segment_bytes=20_000)
    parsed = read_data_dir(spark, tmp_path, max_bytes_per_partition=3000)
    assert parsed.rdd.getNumPartitions() > len(list((tmp_path / f"{AUDIT_TOPIC}-0").glob("*.log")))
    assert parsed.schema == PARSED_SCHEMA
    rows = sorted((r.asDict() for r in decision_events(parsed).collect()), key=lambda r: r["seq"])
    assert [r["seq"] for r in rows] == list(range(300))
    assert [{k: r[k] for k in AUDIT_FIELD_NAMES} for r in rows] == written


def test_data_dir_without_audit_is_empty(spark, tmp_path):
    assert read_data_dir(spark, tmp_path).count() == 0


def test_kafka_reader_reads_a_running_broker_in_offset_ranges(spark, tmp_path, unique):
    """A live broker's audit, read over the wire with a tiny maxRecordsPerPartition: one partition
    becomes many tasks, and together they return the same events as the data directory (the quota
    configuration event included); a topic that does not exist reads as empty."""
    from confluent_kafka import Producer

    from minibroker.testing import running_broker

    topic = unique("audited")
    with running_broker(tmp_path / "data", audit_enable="true", audit_flush_interval_ms="50") as broker:
        producer = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True, "linger.ms": 0})
        for i in range(40):
            producer.produce(topic, b"v%d" % i)
            producer.flush(10)
        broker.in_broker(lambda: broker.broker.audit.flush(0))
        parsed = read_kafka(spark, broker.bootstrap, max_records_per_partition=7).cache()
        assert parsed.rdd.getNumPartitions() >= 6
        over_wire = sorted((r.asDict() for r in parsed.collect()), key=lambda r: r["seq"])
        assert read_kafka(spark, broker.bootstrap, topic="no-such-audit").count() == 0
    on_disk = sorted((r.asDict() for r in read_data_dir(spark, tmp_path / "data").collect()), key=lambda r: r["seq"])
    assert over_wire == on_disk[:len(over_wire)] and len(over_wire) >= 42
    assert [r["seq"] for r in over_wire] == list(range(len(over_wire)))
    produce = [r for r in over_wire if r["api"] == "Produce"]
    assert len(produce) == 40 and all(r["producer_id"] >= 0 and r["topic"] == topic for r in produce)
    (start,) = quota_records(parsed)
    assert start["api"] == "QuotaConfig" and start["quotas"] == []
    assert start["quota_settings"]["producer.id.quota.window.size.seconds"] == 3600
    parsed.unpersist()


def test_values_that_are_not_audit_events_are_skipped(spark, tmp_path):
    """A client may produce anything to the topic: Spark's from_json turns it into nulls, skipped."""
    from minibroker.protocol.records import encode_batch

    logs = LogManager.open(tmp_path, LogConfig.from_broker({}), T0)
    audit = AuditLog(logs)
    audit.record(event(0))
    audit.flush(T0)
    logs.log(AUDIT_TOPIC, 0).append(encode_batch([(b"k", b"not json"), (None, b"[1, 2]"), (b"k", None)], T0), T0)
    audit.record(event(1))
    audit.close(T0 + 1)
    logs.close()
    rows = decision_events(read_data_dir(spark, tmp_path)).collect()
    assert sorted((r.seq, r.ts) for r in rows) == [(0, T0), (4, T0 + 1)]


def test_an_unreachable_broker_is_named_in_the_error():
    from minibroker.pipeline.sources import kafka_offset_ranges

    with pytest.raises(RuntimeError, match="127.0.0.1:1"):
        kafka_offset_ranges({"bootstrap.servers": "127.0.0.1:1", "group.id": "g"}, AUDIT_TOPIC, timeout_s=2)
