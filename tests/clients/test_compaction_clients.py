"""Log compaction with real clients (confluent-kafka): a compacted topic cleaned by the broker's log
cleaner reads back as Kafka's would, an idempotent producer carries on after its partition is
cleaned, and a kill -9 during cleaning loses and duplicates nothing.

The cleaner is driven deterministically: in-process brokers run one round at a time through
`broker.cleaner.clean_once` (the background task sleeps a long log.cleaner.backoff.ms); the killed
broker is watched through its metrics until it is seen cleaning."""

from __future__ import annotations

import os
import signal
import time
import urllib.request

import pytest
import trio

from minibroker.testing import running_broker, spawn_broker, stop_process
from tests.support.wire import create_topics

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402

KEYS = [b"k0", b"k1", b"k2"]
COMPACTED = {"cleanup.policy": "compact", "internal.segment.bytes": "8192", "min.cleanable.dirty.ratio": "0.01"}



def produce(bootstrap: str, records, producer: Producer | None = None, topic: str = "") -> list[tuple[bytes, bytes | None, int]]:
    """Produce (key, value) records in order; (key, value, offset) of each, as acknowledged."""
    own = producer is None
    producer = producer or Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    acked: list[tuple[bytes, bytes | None, int]] = []
    errors = []

    def report(err, msg):
        if err is not None:
            errors.append(err)
        else:
            acked.append((msg.key(), msg.value(), msg.offset()))

    for key, value in records:
        producer.produce(topic, key=key, value=value, partition=0, on_delivery=report)
        producer.poll(0)
    assert producer.flush(60) == 0
    assert not errors, errors
    if own:
        del producer
    return acked


def consume_all(bootstrap: str, topic: str) -> list[tuple[int, bytes, bytes | None]]:
    """(offset, key, value) of every record from the start to the high watermark."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-reader",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        _, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)
        consumer.assign([TopicPartition(topic, 0, 0)])
        out = []
        deadline = time.monotonic() + 60
        while (not out or out[-1][0] < high - 1) and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None or msg.error():
                continue
            out.append((msg.offset(), msg.key(), msg.value()))
        return out
    finally:
        consumer.close()


def latest(records) -> dict[bytes, tuple[int, bytes | None]]:
    """Key -> (offset, value) of its last record, from (key, value, offset) or (offset, key, value)."""
    found = {}
    for record in records:
        offset, key, value = record if isinstance(record[0], int) else (record[2], record[0], record[1])
        found[key] = (offset, value)
    return found


def clean_until_done(running) -> int:
    """Run cleaning rounds on the broker until no log needs one; how many ran."""
    rounds = 0
    while trio.from_thread.run(running.broker.cleaner.clean_once, trio_token=running.trio_token) is not None:
        rounds += 1
        assert rounds < 100
    return rounds


def test_compacted_topic_reads_latest_value_per_key_at_original_offsets_and_tombstone_expires(unique, tmp_path):
    topic = unique("compacted")
    with running_broker(tmp_path / "data", log_cleaner_backoff_ms="3600000") as running:
        create_topics(running.bootstrap, [topic], configs={**COMPACTED, "delete.retention.ms": "1000", "segment.ms": "100"})
        updates = [(KEYS[i % 3], b"value-%d" % i) for i in range(3000)]
        acked = produce(running.bootstrap, updates + [(b"k1", None)], topic=topic)
        time.sleep(0.2)  # past segment.ms: the next record rolls a new active segment, so the
        produce(running.bootstrap, [(b"k2", b"after")], topic=topic)  # tombstone's can be cleaned
        expected = latest(acked)
        before = consume_all(running.bootstrap, topic)
        assert len(before) == 3002
        log = running.broker.logs.log(topic, 0)
        size_before = log.size_bytes
        assert clean_until_done(running) >= 1
        after = consume_all(running.bootstrap, topic)
        assert len(after) < 100 and log.size_bytes < size_before / 10
        by_offset = {offset: (key, value) for offset, key, value in before}
        assert all(by_offset[offset] == (key, value) for offset, key, value in after)  # original offsets
        found = latest(after)
        assert found[b"k0"] == expected[b"k0"]
        assert found[b"k1"] == expected[b"k1"] and found[b"k1"][1] is None  # the tombstone, still there
        assert found[b"k2"][1] == b"after"
        # delete.retention.ms after the cleaning that first kept it, the next cleaning removes it.
        horizon = running.broker.cleaner.tombstone_horizons[(topic, 0)]
        while running.broker.clock.now_ms() < horizon:
            time.sleep(0.05)
        assert clean_until_done(running) >= 1
        final = consume_all(running.bootstrap, topic)
        assert b"k1" not in latest(final)
        assert latest(final)[b"k0"] == expected[b"k0"]


def test_idempotent_producer_continues_after_its_partition_is_cleaned(unique, tmp_path):
    """The idempotent producer's batches are all superseded by another producer's and cleaned away
    but for its last (kept empty, with its sequence); the broker restarts on the same port with its
    producer-state snapshots removed, so the state is rebuilt from the cleaned log; the producer
    carries on without an OutOfOrderSequence or UnknownProducerId error."""
    topic = unique("idem-compacted")
    data_dir = tmp_path / "data"
    with running_broker(data_dir, log_cleaner_backoff_ms="3600000") as running:
        port = running.port
        create_topics(running.bootstrap, [topic], configs={**COMPACTED, "segment.ms": "100"})
        producer = Producer({"bootstrap.servers": running.bootstrap, "enable.idempotence": True, "linger.ms": 5,
                             "batch.num.messages": 20})  # many batches, so many segments
        first = produce(running.bootstrap, [(KEYS[i % 3], b"a%d" % i) for i in range(600)], producer, topic)
        produce(running.bootstrap, [(KEYS[i % 3], b"plain%d" % i) for i in range(600)], topic=topic)
        time.sleep(0.2)  # past segment.ms: the next record rolls, and all of the above can be cleaned
        produce(running.bootstrap, [(b"other", b"x")], topic=topic)
        assert clean_until_done(running) >= 1
        plog = running.broker.logs.log(topic, 0)
        kept = [h for h in plog.iter_batch_headers(0) if h.has_producer_id]
        # All its records superseded: only empty batches remain, its last one among them (a
        # segment group's last batch is kept empty too, for its offsets).
        assert kept and all(h.records_count == 0 for h in kept) and kept[-1].last_offset == first[-1][2]
    for snapshot in (data_dir / f"{topic}-0").glob("*.snapshot"):
        snapshot.unlink()
    with running_broker(data_dir, log_cleaner_backoff_ms="3600000", listeners=f"127.0.0.1:{port}") as running:
        second = produce(running.bootstrap, [(KEYS[i % 3], b"b%d" % i) for i in range(300)], producer, topic)
        assert len(second) == 300  # delivered, no error
        found = latest(consume_all(running.bootstrap, topic))
        assert {key: found[key] for key in KEYS} == {key: found_at for key, found_at in latest(second).items()}


def _metric(url: str, name: str) -> float:
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    return next(float(line.split()[-1]) for line in text.splitlines() if line.startswith(name + " "))


def test_kill_9_during_cleaning_loses_and_duplicates_nothing(unique, tmp_path):
    """Written with the cleaner off, then a broker that cleans at once is killed -9 while the
    metrics say it is cleaning; a third broker recovers the log (completing or discarding the swap)
    and cleans it again; every acknowledged record is still readable unless a later record of its
    key superseded it, at its own offset, once."""
    topic = unique("kill-cleaning")
    data_dir = tmp_path / "data"
    proc, fields = spawn_broker(data_dir, overrides={"log_cleaner_enable": "false"})
    try:
        bootstrap = fields["bootstrap.servers"]
        create_topics(bootstrap, [topic], configs=COMPACTED)
        keys = [b"key-%02d" % i for i in range(20)]
        acked = produce(bootstrap, [(keys[i % 20], b"%06d-" % i + b"x" * 200) for i in range(12000)], topic=topic)
    finally:
        stop_process(proc)
    proc, fields = spawn_broker(data_dir, metrics=True, overrides={"log_cleaner_backoff_ms": "10"})
    try:
        seen_cleaning = False
        deadline = time.monotonic() + 60
        while not seen_cleaning and time.monotonic() < deadline:
            seen_cleaning = _metric(fields["metrics"], "minibroker_log_cleaner_in_progress") == 1
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)
        assert seen_cleaning, "the cleaner was never seen at work"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
        if proc.stdout:
            proc.stdout.close()
    proc, fields = spawn_broker(data_dir, metrics=True, overrides={"log_cleaner_backoff_ms": "10"})
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not (
                _metric(fields["metrics"], "minibroker_log_cleaner_runs_total") >= 1
                and _metric(fields["metrics"], "minibroker_log_cleaner_in_progress") == 0):
            time.sleep(0.05)
        records = consume_all(fields["bootstrap.servers"], topic)
    finally:
        stop_process(proc)
    offsets = [offset for offset, _, _ in records]
    assert offsets == sorted(set(offsets))  # nothing duplicated
    by_offset = {offset: (key, value) for key, value, offset in acked}
    assert all(by_offset[offset] == (key, value) for offset, key, value in records)  # nothing invented
    assert latest(records) == latest(acked)  # nothing lost: every key's last acknowledged value
    assert len(records) < len(acked)  # and the log was cleaned after the restart
    assert not [p for p in (data_dir / f"{topic}-0").iterdir() if p.suffix in (".cleaned", ".swap", ".deleted")]
