"""The broker's one clock (minibroker.clock) and what it makes testable: under trio's
MockClock(autojump_threshold=0) the wall-clock reading moves with virtual time, so the producer-id
quota's window and producer-state expiry, which run on wall-clock milliseconds, are driven by
`trio.sleep` in a test that takes milliseconds.
"""

from __future__ import annotations

import datetime
import time

import trio
import trio.testing

from minibroker.broker import Broker, Connection
from minibroker.clock import BrokerClock
from minibroker.config import BrokerConfig
from tests.support.batches import make_batch
from tests.support.broker_shell import TOPIC, decode, set_quota
from tests.support.wire import encode_request, schema

HOUR_S = 3600


def run(main) -> None:
    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


def new_broker(tmp_path, clock: BrokerClock | None = None, **overrides) -> Broker:
    props = {"log.dirs": str(tmp_path / "data"), "listeners": "127.0.0.1:0"}
    props.update({k.replace("_", "."): str(v) for k, v in overrides.items()})
    broker = Broker(BrokerConfig(props), clock=clock)
    broker.logs.create_topic(TOPIC, 1, {}, broker.clock.now_ms())
    return broker


def idempotent_produce_frame(producer_id: int, sequence: int = 0) -> bytes:
    req = schema(0, 9)
    mod = __import__(req.__module__, fromlist=["x"])
    records = make_batch([(None, b"v")], producer_id=producer_id, producer_epoch=0, base_sequence=sequence)
    data = mod.TopicProduceData(name=TOPIC, partition_data=(mod.PartitionProduceData(index=0, records=records),))
    request = req(acks=-1, timeout=datetime.timedelta(seconds=5), topic_data=(data,), transactional_id=None)
    return encode_request(request, client_id="clock-test")[4:]


async def produce(broker: Broker, producer_id: int, sequence: int = 0) -> tuple[int, int]:
    """(the partition's error code, the response's throttle time) of one idempotent batch."""
    response = await broker.handle_frame(idempotent_produce_frame(producer_id, sequence), Connection("t"))
    decoded = decode(response.data, 0, 9)
    return decoded.responses[0].partition_responses[0].error_code, response.throttle_ms


# ---- the clock itself ------------------------------------------------------------------------------


def test_wall_clock_moves_with_trios_clock_and_monotonic_is_trios():
    clock = BrokerClock(wall_ms=lambda: 1_700_000_000_000)

    async def main():
        start_wall, start_mono = clock.now_ms(), clock.monotonic_ms()
        assert start_wall == 1_700_000_000_000
        assert clock.monotonic() == trio.current_time()
        await trio.sleep(HOUR_S)
        assert clock.now_ms() - start_wall == HOUR_S * 1000
        assert clock.monotonic_ms() - start_mono == HOUR_S * 1000

    run(main)


def test_outside_a_trio_run_the_wall_clock_is_the_systems():
    before = time.time_ns() // 1_000_000
    now = BrokerClock().now_ms()
    assert before <= now <= time.time_ns() // 1_000_000


def test_each_run_takes_its_own_offset():
    """A MockClock starts at 0 in every run: the offset is taken again, so the wall clock does not
    jump back by the virtual time of an earlier run."""
    wall = [1_000_000]
    clock = BrokerClock(wall_ms=lambda: wall[0])

    async def main():
        first = clock.now_ms()
        await trio.sleep(100)
        assert clock.now_ms() == first + 100_000

    run(main)
    wall[0] = 2_000_000
    seen = []

    async def again():
        seen.append(clock.now_ms())

    run(again)
    assert seen == [2_000_000]


# ---- what runs on it -----------------------------------------------------------------------------


def test_producer_id_quota_window_runs_on_virtual_time(tmp_path):
    """Two new producer ids per 10 s window (KIP-936, 1 s slots): the third, 4 s after the first, is
    throttled until the first one's slot has left the window (6.999 s: the wall clock starts on a whole
    second, so the slot grid starts with the test); one virtual millisecond before that it is still
    throttled, at that time it is admitted."""
    clock = BrokerClock(wall_ms=lambda: 1_700_000_000_000)
    broker = new_broker(tmp_path, clock, producer_id_quota_window_size_seconds=10,
                        producer_id_quota_cache_layer_count=10)
    set_quota(broker, [("user", None)], "producer_ids_rate", 2)
    throttle_code = broker.config["producer.id.quota.error.code"]

    async def main():
        assert await produce(broker, 1) == (0, 0)
        await trio.sleep(4)
        assert await produce(broker, 2) == (0, 0)
        code, throttle_ms = await produce(broker, 3)
        assert code == throttle_code and throttle_ms == 6999
        await trio.sleep(6.998)
        assert (await produce(broker, 3))[0] == throttle_code
        await trio.sleep(0.001)
        assert await produce(broker, 3) == (0, 0)
        assert await produce(broker, 1, sequence=1) == (0, 0)  # a known id is never throttled

    run(main)
    broker.close()


def test_producer_state_expires_on_virtual_time(tmp_path):
    """producer.id.expiration.ms: a producer id idle that long is dropped by the background task
    (every producer.id.expiration.check.interval.ms), not before."""
    broker = new_broker(tmp_path, producer_id_expiration_ms=60_000,
                        producer_id_expiration_check_interval_ms=1000)

    async def main():
        async with trio.open_nursery() as nursery:
            nursery.start_soon(broker.run_background)
            assert await produce(broker, 7) == (0, 0)
            await trio.sleep(59)
            assert broker.producer_states.holds(7, broker.clock.now_ms())
            assert await produce(broker, 7, sequence=1) == (0, 0)  # active again: 60 s from here
            await trio.sleep(59.5)
            assert broker.producer_states.entry_count == 1
            await trio.sleep(1.5)
            assert broker.producer_states.entry_count == 0
            assert not broker.producer_states.holds(7, broker.clock.now_ms())
            nursery.cancel_scope.cancel()

    run(main)
    broker.close()
