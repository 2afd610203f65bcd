"""Client byte-rate quotas holding a greedy client at its quota, on trio's MockClock: the broker's
whole enforcement path (Broker.handle_frame's throttle arithmetic and the connection loop's KIP-219
mute) against a client that sends its next request as soon as it has the previous response (after
CLIENT_PACE_S of its own, so that an unthrottled client runs at a finite 8 times the quota), which is
what a producer or consumer with more to do behaves like. Ten seconds of virtual time take well
under a second, and the rates are exact, so they are asserted tightly. How real clients fare against
these quotas over real time (they pace themselves, pipeline, and the machine is shared) is measured,
not asserted: scripts/bench_quota_clients.

As in that measurement, the broker runs with `quota.window.num=2` (1 s samples), where a quota
applied to a client that was unthrottled so far first admits about one window's worth of burst, and
a request is a small part of a second's quota (here the figures of the live measurement divided by
five: a 100 kB/s quota, 3.2 kB Produce requests, 16 kB Fetch responses).
"""

from __future__ import annotations

import struct

import trio
import trio.testing

from minibroker.broker import Broker, Connection
from minibroker.metrics_http import render
from minibroker.server import serve_connection
from minibroker.protocol.framing import FrameDecoder
from minibroker.protocol.records import iter_headers
from tests.support.batches import make_batch
from tests.support.broker_shell import TOPIC, decode, fetch_frame, new_broker, produce_frame, set_quota
from tests.support.clock import run

QUOTA = 100_000  # bytes per second
RUN_S = 10.0
WARMUP_S = 2.0
# The rate over the last 8 s of a greedy run may miss the quota by this fraction: one 16 kB Fetch
# response either side of the measurement's edges is 4 % of 8 s at 100 kB/s.
TOLERANCE = 0.05
RECORD = 3_200  # bytes of value per Produce request
FETCH_MAX_BYTES = 16_384
CLIENT_PACE_S = 0.004  # what a client takes between a response and its next request


class GreedyClient:
    """One connection to the broker (an in-memory stream served by the real connection loop) that
    sends its next request as soon as the previous response arrives."""

    def __init__(self, broker: Broker, nursery: trio.Nursery) -> None:
        self.stream, server = trio.testing.memory_stream_pair()
        nursery.start_soon(serve_connection, broker, server, Connection("mem"))
        self.decoder = FrameDecoder()

    async def request(self, frame: bytes) -> bytes:
        await trio.sleep(CLIENT_PACE_S)
        await self.stream.send_all(struct.pack(">i", len(frame)) + frame)
        while (response := self.decoder.next_frame()) is None:
            self.decoder.receive_data(await self.stream.receive_some(1 << 20))
        return struct.pack(">i", len(response)) + response  # as decode() expects it


def rate(events: list[tuple[float, int]], start: float, end: float) -> float:
    return sum(n for t, n in events if start <= t < end) / (end - start)


def test_a_greedy_producer_is_held_at_its_producer_byte_rate_and_freed_when_it_goes(tmp_path):
    """A producer gets its producer_byte_rate (set while it runs, after 1 s unthrottled) within 5 %
    once 2 s have passed; its responses carry the throttle; another client id, on its own
    connection at the same time, is not throttled at all; removing the quota frees the first."""
    broker = new_broker(tmp_path, quota_window_num=2)
    slow_frame, fast_frame = produce_frame("slow", RECORD, version=9), produce_frame("fast", RECORD, version=9)
    acked: dict[str, list[tuple[float, int]]] = {"slow": [], "fast": []}
    throttles: dict[str, list[int]] = {"slow": [], "fast": []}  # the responses' throttle_time (ms)

    async def produce_until(client: GreedyClient, frame: bytes, name: str, end: float) -> None:
        while trio.current_time() < end:
            response = decode(await client.request(frame), 0, 9)
            assert response.responses[0].partition_responses[0].error_code == 0
            acked[name].append((trio.current_time(), len(frame)))  # what the quota counts
            throttles[name].append(round(response.throttle_time.total_seconds() * 1000))

    async def main():
        async with trio.open_nursery() as nursery:
            slow, fast = GreedyClient(broker, nursery), GreedyClient(broker, nursery)
            await produce_until(slow, slow_frame, "slow", 1.0)  # unthrottled first
            unthrottled = rate(acked["slow"], 0, 1.0)
            set_quota(broker, [("client-id", "slow")], "producer_byte_rate", QUOTA)
            quota_at = trio.current_time()
            async with trio.open_nursery() as both:
                both.start_soon(produce_until, slow, slow_frame, "slow", quota_at + RUN_S)
                both.start_soon(produce_until, fast, fast_frame, "fast", quota_at + RUN_S)
            throttled = rate(acked["slow"], quota_at + WARMUP_S, quota_at + RUN_S)
            fast_rate = rate(acked["fast"], quota_at + WARMUP_S, quota_at + RUN_S)
            exposition = render(broker)
            set_quota(broker, [("client-id", "slow")], "producer_byte_rate", None)
            freed_at = trio.current_time()
            await produce_until(slow, slow_frame, "slow", freed_at + 2.0)
            freed = rate(acked["slow"], freed_at + 0.5, freed_at + 2.0)
            nursery.cancel_scope.cancel()
        assert abs(throttled - QUOTA) <= TOLERANCE * QUOTA, f"{throttled:.0f} B/s against {QUOTA}"
        assert max(throttles["slow"]) > 0 and max(throttles["fast"]) == 0
        assert fast_rate > 3 * QUOTA and unthrottled > 3 * QUOTA and freed > 3 * QUOTA
        assert 'kafka_server_produce_byte_rate{user="",client_id="slow"}' in exposition
        assert 'kafka_server_produce_throttle_time{user="",client_id="slow"}' in exposition

    run(main)
    broker.close()


def test_a_greedy_consumer_is_held_at_its_consumer_byte_rate_and_freed_when_it_goes(tmp_path):
    """A consumer reading as fast as it can gets its consumer_byte_rate within 5 % once 2 s have
    passed (throttled fetches are answered empty); another consumer reads the same data meanwhile,
    unthrottled, all of it; removing the quota lets the first read the rest within a second."""
    broker = new_broker(tmp_path, quota_window_num=2, fetch_max_bytes=FETCH_MAX_BYTES)
    log = broker.logs.log(TOPIC, 0)
    for _ in range(300):  # 2.4 MB of 1 kB records in 8 kB batches: two per fetch
        log.append(make_batch([(None, b"q" * 1000)] * 8), 0)
    set_quota(broker, [("client-id", "slowc")], "consumer_byte_rate", QUOTA)
    got: dict[str, list[tuple[float, int]]] = {"slowc": [], "fastc": []}
    throttles: dict[str, list[int]] = {"slowc": [], "fastc": []}
    offsets = {"slowc": 0, "fastc": 0}

    async def consume_until(client: GreedyClient, name: str, end: float) -> None:
        while trio.current_time() < end and offsets[name] < log.log_end_offset:
            raw = await client.request(fetch_frame(name, offsets[name]))
            response = decode(raw, 1, 12)
            throttles[name].append(round(response.throttle_time.total_seconds() * 1000))
            for topic in response.responses:
                for partition in topic.partitions:
                    headers = list(iter_headers(partition.records or b""))
                    if headers:
                        got[name].append((trio.current_time(), len(raw)))  # what the quota counts
                        offsets[name] = headers[-1].last_offset + 1

    async def main():
        async with trio.open_nursery() as nursery:
            slow, fast = GreedyClient(broker, nursery), GreedyClient(broker, nursery)
            start = trio.current_time()
            async with trio.open_nursery() as both:
                both.start_soon(consume_until, slow, "slowc", start + RUN_S)
                both.start_soon(consume_until, fast, "fastc", start + RUN_S)
            throttled = rate(got["slowc"], start + WARMUP_S, start + RUN_S)
            set_quota(broker, [("client-id", "slowc")], "consumer_byte_rate", None)
            freed_at = trio.current_time()
            await consume_until(slow, "slowc", freed_at + 5.0)
            freed_for = trio.current_time() - freed_at
            nursery.cancel_scope.cancel()
        assert abs(throttled - QUOTA) <= TOLERANCE * QUOTA, f"{throttled:.0f} B/s against {QUOTA}"
        assert max(throttles["slowc"]) > 0 and max(throttles["fastc"]) == 0
        assert offsets["fastc"] == log.log_end_offset  # all of it, unthrottled, within the run
        assert offsets["slowc"] == log.log_end_offset  # and the rest at once once freed
        assert freed_for < 1.0

    run(main)
    broker.close()
