"""The broker's one clock (minibroker.clock) and what it makes testable: under trio's
MockClock(autojump_threshold=0) the wall-clock reading moves with virtual time, so the producer-id
quota's window and producer-state expiry, which run on wall-clock milliseconds, are driven by
`trio.sleep` in a test that takes milliseconds; and each broker's clock can be moved on its own
(`BrokerClock.advance`): two brokers in one trio run, one moved a minute ahead, expire producer ids
and fence group members on that one only.
"""

from __future__ import annotations

import time

import trio

import pytest

from minibroker.broker import Broker, Connection
from minibroker.clock import BrokerClock
from minibroker.config import BrokerConfig
from minibroker.groups.consumer_group import ConsumerGroup
from minibroker.server import serve
from tests.support.broker_shell import TOPIC, decode, idempotent_produce_frame, set_quota
from tests.support.consumer_group_sim import SimConsumer
from tests.support.clock import run

HOUR_S = 3600




def new_broker(tmp_path, clock: BrokerClock | None = None, data: str = "data", **overrides) -> Broker:
    props = {"log.dirs": str(tmp_path / data), "listeners": "127.0.0.1:0"}
    props.update({k.replace("_", "."): str(v) for k, v in overrides.items()})
    broker = Broker(BrokerConfig(props), clock=clock)
    broker.logs.create_topic(TOPIC, 1, {}, broker.clock.now_ms())
    return broker


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


def test_advance_wakes_what_is_due_and_keeps_the_rest_on_the_clock():
    """Moving the clock 30 s, 1 s in: a sleep due at 10 s wakes at once, a sleep due at 100 s stays
    due at 100 s of the clock (70 s of trio's); a deadline now past cancels its scope, and a fail_
    scope raises; both readings jump by exactly the advance."""
    clock = BrokerClock(wall_ms=lambda: 1_700_000_000_000)
    woke: dict[str, float] = {}
    scopes: dict[str, object] = {}

    async def sleeper(name: str, seconds: float) -> None:
        await clock.sleep(seconds)
        woke[name] = trio.current_time()

    async def deadline(name: str, seconds: float, fail: bool = False) -> None:
        try:
            with (clock.fail_after if fail else clock.move_on_after)(seconds) as scope:
                await trio.sleep_forever()
        except trio.TooSlowError:
            scopes[name] = "too slow"
            return
        scopes[name] = scope.cancelled_caught

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(sleeper, "soon", 10)
            nursery.start_soon(sleeper, "late", 100)
            nursery.start_soon(deadline, "past", 20)
            nursery.start_soon(deadline, "failed", 25, True)
            await trio.sleep(1)
            wall, mono, mono_ms = clock.now_ms(), clock.monotonic(), clock.monotonic_ms()
            clock.advance(30)
            assert clock.skew == 30
            assert (clock.now_ms(), clock.monotonic(), clock.monotonic_ms()) == (wall + 30_000, mono + 30,
                                                                                 mono_ms + 30_000)
            for _ in range(3):  # no time passes: the woken tasks run
                await trio.lowlevel.checkpoint()
            assert trio.current_time() == 1
            assert woke == {"soon": 1} and scopes == {"past": True, "failed": "too slow"}
            await trio.sleep(68.999)
            assert "late" not in woke
        assert woke == {"soon": 1, "late": 70}

    run(main)


def test_a_clock_moves_only_forward():
    clock = BrokerClock()
    for bad in (-1, float("inf"), float("nan")):
        with pytest.raises(ValueError):
            clock.advance(bad)
    clock.advance(5)  # outside a run: the wall clock is the system's plus the skew
    assert clock.now_ms() - time.time_ns() // 1_000_000 in range(4_990, 5_001)


def test_two_brokers_in_one_run_each_on_its_own_clock(tmp_path):
    """Two brokers served in one trio run, each built beforehand with a BrokerClock of its own. Both
    hold producer id 7 and a KIP-848 group member with a 45 s session; one broker's clock is moved a
    minute ahead: there, and only there, the producer id expires (producer.id.expiration.ms 60 s)
    and the member is fenced when its session runs out, while the other broker, on the same trio
    clock, keeps both."""
    clocks = [BrokerClock(), BrokerClock()]
    brokers = [new_broker(tmp_path, clock, data=f"data-{i}", node_id=i, producer_id_expiration_ms=60_000,
                          producer_id_expiration_check_interval_ms=1000, group_consumer_session_timeout_ms=45_000)
               for i, clock in enumerate(clocks)]
    moved, still = brokers
    members = [SimConsumer("g", "m", (TOPIC,)) for _ in brokers]

    def send(broker: Broker):
        return lambda request: broker.groups.consumer_group_heartbeat(broker.clock.monotonic(), request)

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            for broker in brokers:
                await nursery.start(lambda task_status, b=broker: serve(broker=b, task_status=task_status))
            for broker, member in zip(brokers, members):
                assert await produce(broker, 7) == (0, 0)
                member.heartbeat(send(broker))
                assert member.epoch > 0 and "m" in broker.groups.groups["g"].members
            await trio.sleep(5)
            moved.clock.advance(60)
            await trio.sleep(2)  # the next expiry check, and the member's session end, on the moved clock
            assert not moved.producer_states.holds(7, moved.clock.now_ms())
            assert still.producer_states.holds(7, still.clock.now_ms())
            group = moved.groups.groups["g"]
            assert isinstance(group, ConsumerGroup) and "m" not in group.members
            assert "m" in still.groups.groups["g"].members
            assert still.clock.now_ms() < moved.clock.now_ms() - 59_000
            nursery.cancel_scope.cancel()

    run(main)


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
