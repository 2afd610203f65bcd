"""The reference idempotent producer (producer/, lean producer state's producer side) against a live broker with
injected faults (minibroker.faults), in lean and kafka producer-state modes: every record lands
exactly once, in order, and the producer took each path the proposal describes (window read from the
broker, many batches in flight, DUPLICATE_SEQUENCE_NUMBER taken as delivered, resends on
OUT_OF_ORDER_SEQUENCE_NUMBER, an epoch bump on a real gap, waiting for the sequence window).

Faults, on Produce (minibroker.faults): `close` after the append (the connection closes instead of
answering: the batch IS in the log, so its resend is a duplicate), `error` with 6
NOT_LEADER_OR_FOLLOWER instead of the append (the batches behind it in flight arrive with a gap and
are answered OUT_OF_ORDER_SEQUENCE_NUMBER), and `error` with 45 instead of the append (for the oldest
unresolved batch: a gap the producer cannot explain, so it bumps its epoch). The injected 45 is kept
out of runs with `close`: it would be a lie about a batch that a lost connection left in doubt,
which a lean broker never tells (it answers such a resend 46).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

import minibroker.producer.core

from minibroker.faults import FaultRule
from minibroker.producer import IdempotentProducer
from minibroker.producer.core import KAFKA_MAX_IN_FLIGHT, ProducerCore
from minibroker.protocol.records import decode_records, iter_headers
from tests.support.wire import create_topics

PARTITIONS = 3
COUNT = 6000



def log_data(running, topic: str, partition: int) -> bytes:
    return running.in_broker(lambda: running.broker.logs.log(topic, partition).read(0, 1 << 30))


def log_headers(running, topic: str, partition: int):
    return list(iter_headers(log_data(running, topic, partition)))


def log_values(running, topic: str, partition: int) -> list[bytes]:
    """Every record value in the partition's log, in offset order (read from the broker's files)."""
    data = log_data(running, topic, partition)
    values: list[bytes] = []
    for header in iter_headers(data):
        values.extend(v for _o, _t, _k, v in decode_records(data[header.position:header.position + header.size]))
    return values


def produce_all(bootstrap: str, topic: str, count: int = COUNT, request_timeout_s: float = 5.0,
                **options) -> tuple[IdempotentProducer, list]:
    producer = IdempotentProducer(bootstrap, request_timeout_s=request_timeout_s, **options)
    deliveries = [producer.send(topic, i % PARTITIONS, b"%d" % i) for i in range(count)]
    producer.flush(120)
    producer.close()
    return producer, deliveries


def assert_exactly_once_in_order(running, topic: str, deliveries, count: int = COUNT) -> None:
    assert all(d.error is None and d.offset is not None for d in deliveries)
    for p in range(PARTITIONS):
        expected = [b"%d" % i for i in range(count) if i % PARTITIONS == p]
        got = log_values(running, topic, p)
        assert len(got) == len(set(got)), f"partition {p}: {len(got) - len(set(got))} duplicate(s)"
        assert got == expected, f"partition {p}: {len(got)} records, expected {len(expected)} in order"


CLOSE = FaultRule("Produce", "close", every=9, limit=6)
NOT_LEADER = FaultRule("Produce", "error", every=13, limit=6, error_code=6)
GAP = FaultRule("Produce", "error", every=41, limit=2, error_code=45)
LOSE = FaultRule("Produce", "lose", every=60, limit=3, count=30)


def add_faults(running, *rules: FaultRule) -> None:
    for rule in rules:
        running.broker.faults.add(FaultRule(rule.api, rule.action, every=rule.every, limit=rule.limit,
                                            error_code=rule.error_code, count=rule.count))


def test_lean_mode_many_batches_in_flight_through_faults(start_broker, unique):
    """Lean mode announces its 10,000,000 window; the producer keeps up to 50 batches in flight
    (more than Kafka's 5), and through closed connections and NOT_LEADER answers every record is
    written once, in order. The resends of written batches came back DUPLICATE_SEQUENCE_NUMBER and
    were taken as delivered; the batches behind a refused one came back OUT_OF_ORDER_SEQUENCE_NUMBER
    and were resent after it."""
    topic = unique("lean")
    with start_broker() as running:
        create_topics(running.bootstrap, [topic], PARTITIONS)
        add_faults(running, CLOSE, NOT_LEADER)
        producer, deliveries = produce_all(running.bootstrap, topic, batch_records=20)
        assert_exactly_once_in_order(running, topic, deliveries)
    stats = producer.stats
    assert producer.window == 10_000_000
    assert stats.max_in_flight_batches_seen > KAFKA_MAX_IN_FLIGHT
    assert stats.duplicates > 0 and stats.out_of_order > 0 and stats.retriable_errors > 0
    assert stats.connections > 1 and stats.delivered == COUNT and stats.failed == 0
    # Records the broker said were duplicates are delivered without offsets, the others with theirs.
    assert any(d.offset == -1 for d in deliveries) and any(d.offset > 0 for d in deliveries)


@pytest.mark.parametrize("mode, in_flight, exactly_once", [
    ("lean", 50, True),
    ("kafka", 5, True),
    ("kafka", 50, False),
])
def test_lost_responses_and_the_window(start_broker, unique, mode, in_flight, exactly_once):
    """The lean producer state proposal's claim. A `lose` fault writes up to 30 batches (about 10 per partition) without
    answering them, then breaks the connection; the producer resends them all. A lean broker answers
    every resend within its window DUPLICATE_SEQUENCE_NUMBER: exactly once with 50 in flight.
    Kafka's state keeps 5 batches per partition: with 5 in flight every resend is one of them
    (answered NONE, exactly once); with 50, the oldest resends are beyond them, come back
    OUT_OF_ORDER_SEQUENCE_NUMBER with nothing earlier unresolved, and the producer can only bump its
    epoch and write them again: duplicates."""
    topic = unique(f"lose-{mode}-{in_flight}")
    with start_broker(producer_state_mode=mode) as running:
        create_topics(running.bootstrap, [topic], PARTITIONS)
        add_faults(running, LOSE)
        producer, deliveries = produce_all(running.bootstrap, topic, batch_records=20,
                                           max_in_flight_batches=in_flight, request_timeout_s=1.0)
        values = [v for p in range(PARTITIONS) for v in log_values(running, topic, p)]
        if exactly_once:
            assert_exactly_once_in_order(running, topic, deliveries)
    stats = producer.stats
    assert stats.connections > 1 and stats.resends >= in_flight and stats.delivered == COUNT
    assert set(values) == {b"%d" % i for i in range(COUNT)}  # nothing lost, ever
    if exactly_once:
        assert stats.sequence_gaps == 0
    else:
        assert stats.sequence_gaps > 0 and len(values) > COUNT


def test_an_unexplained_gap_bumps_the_epoch_and_loses_nothing(start_broker, unique):
    """OUT_OF_ORDER_SEQUENCE_NUMBER for the oldest unresolved batch (injected: nothing was written)
    is a gap the producer cannot explain: it drains, bumps its epoch (KIP-360) and sends everything
    unresolved again from sequence 0. Nothing is lost, nothing doubled. (One batch in flight, so
    the injected answer always falls on the oldest unresolved batch; both faults fire.)"""
    topic = unique("gap")
    with start_broker() as running:
        create_topics(running.bootstrap, [topic], PARTITIONS)
        add_faults(running, GAP)
        producer, deliveries = produce_all(running.bootstrap, topic, count=2400, batch_records=20,
                                           max_in_flight_batches=1)
        assert_exactly_once_in_order(running, topic, deliveries, count=2400)
        epochs = {h.producer_epoch for p in range(PARTITIONS) for h in log_headers(running, topic, p)}
    assert producer.stats.sequence_gaps == producer.stats.epoch_bumps == GAP.limit
    assert epochs == set(range(GAP.limit + 1)) and producer.core.epoch == GAP.limit


def test_kafka_mode_keeps_to_five_batches_and_exactly_once(start_broker, unique):
    """A broker in kafka mode announces no window: the producer keeps Kafka's 5 batches in flight,
    and its resends fall within the 5 batches Kafka's state keeps, so they are answered NONE with
    their original offsets: exactly once, in order."""
    topic = unique("kafka")
    with start_broker(producer_state_mode="kafka") as running:
        create_topics(running.bootstrap, [topic], PARTITIONS)
        add_faults(running, CLOSE, NOT_LEADER)
        producer, deliveries = produce_all(running.bootstrap, topic, batch_records=20)
        assert_exactly_once_in_order(running, topic, deliveries)
    stats = producer.stats
    assert producer.window is None
    assert stats.max_in_flight_batches_seen == KAFKA_MAX_IN_FLIGHT
    assert stats.resends > 0 and stats.duplicates == 0  # kafka mode answers resends NONE
    assert stats.delivered == COUNT and stats.failed == 0


def test_the_producer_waits_for_the_sequence_window(start_broker, unique):
    """With the broker's window at 300 sequence numbers and batches of 20, no more than 300
    sequence numbers of a partition are ever unresolved, however many batches may be in flight:
    the producer waited for the window instead."""
    topic = unique("window")
    with start_broker(max_in_flight_sequence_number_per_connection=300) as running:
        create_topics(running.bootstrap, [topic], PARTITIONS)
        running.broker.faults.add(FaultRule("Produce", "close", every=7, limit=4))
        producer, deliveries = produce_all(running.bootstrap, topic, count=3000, batch_records=20,
                                           max_in_flight_batches=100)
        assert_exactly_once_in_order(running, topic, deliveries, count=3000)
    stats = producer.stats
    assert producer.window == 300
    assert stats.window_waits > 0
    assert 0 < stats.max_in_flight_sequences_seen <= 300
    assert stats.max_in_flight_batches_seen <= PARTITIONS * 300 // 20


def test_the_core_leaves_io_and_the_broker_out():
    """The core is sans-I/O: it imports neither the socket driver nor the broker, and its source
    reads no clock and opens no socket (time is an argument)."""
    code = ("import minibroker.producer.core, sys; "
            "bad = [m for m in sys.modules if m == 'minibroker.producer.client' or m.startswith(("
            "'minibroker.storage', 'minibroker.quotas', 'minibroker.server', 'minibroker.broker'))]; "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True)
    source = (Path(minibroker.producer.core.__file__)).read_text()
    assert not re.search(r"^\s*(import|from)\s+(socket|selectors|trio|time)\b|\btime\.(time|monotonic)", source, re.M)


def test_core_arguments_are_checked():
    with pytest.raises(ValueError, match="max_in_flight_batches"):
        ProducerCore(max_in_flight_batches=0)
    with pytest.raises(ValueError, match="batch_records"):
        ProducerCore(batch_records=0)


def test_the_producer_waits_out_a_quota_throttle(start_broker, unique):
    """KIP-219: a response's throttle_time_ms pauses the producer. With producer_byte_rate=20000 on
    its client id and a 2-sample window, 30 kB in 1 s is over the quota: the broker throttles, the
    producer records the pause, and everything is still delivered once."""
    from tests.support.quota_clients import alter_quota

    topic, client_id = unique("throttled"), unique("ref-throttled")
    with start_broker(quota_window_num=2) as running:
        create_topics(running.bootstrap, [topic], PARTITIONS)
        alter_quota(running.bootstrap, [("client-id", client_id)], "producer_byte_rate", 20_000)
        producer = IdempotentProducer(running.bootstrap, client_id=client_id, batch_records=10)
        deliveries = [producer.send(topic, 0, b"t" * 1000) for _ in range(30)]
        producer.flush(60)
        producer.close()
        values = log_values(running, topic, 0)
    assert producer.stats.throttled_ms > 0
    assert all(d.offset is not None for d in deliveries) and len(values) == 30
