"""request_percentage charges what Kafka charges (KIP-124): the request handler's time AND the
network thread's time to read the request and send the response, not the handler's alone.

In the shell, a connection whose stream burns a known amount of CPU on each read and each send shows
where each part goes: reading counts before the throttle is computed (so it can throttle the request
itself), sending is recorded once the response is out (so the next request pays for it), as Kafka's
`recordNoThrottle` does. With a real client (kafka-python), the request-time metric accounts for the
CPU the broker's thread actually spent; the benchmark scripts/bench_request_quota shows the same for
a throttled client's process CPU.
"""

from __future__ import annotations

import struct
import threading
import time

import pytest
import trio
import trio.testing

from minibroker.broker import Connection
from minibroker.server import serve_connection
from tests.support.broker_shell import new_broker, set_quota, simple_frame
from tests.support.clock import run

READ_COST_NS = 10_000_000
SEND_COST_NS = 20_000_000


def burn_cpu(ns: int) -> None:
    end = time.thread_time_ns() + ns
    while time.thread_time_ns() < end:
        pass


class CostlyStream(trio.abc.HalfCloseableStream):
    """A real in-memory stream whose reads and sends cost the broker thread a known CPU time, as
    reading a large request or writing a large response does."""

    def __init__(self, inner) -> None:
        self.inner = inner

    async def receive_some(self, max_bytes=None):
        data = await self.inner.receive_some(max_bytes)
        if data:
            burn_cpu(READ_COST_NS)
        return data

    async def send_all(self, data):
        burn_cpu(SEND_COST_NS)
        await self.inner.send_all(data)

    async def wait_send_all_might_not_block(self):
        await self.inner.wait_send_all_might_not_block()

    async def send_eof(self):
        await self.inner.send_eof()

    async def aclose(self):
        await self.inner.aclose()


def api_versions_frame(client_id: str) -> bytes:
    return simple_frame(18, 3, client_id, client_software_name="t", client_software_version="1")


async def exchange(broker, frames: list[bytes]) -> list[bytes]:
    """Each frame in turn over a CostlyStream into the broker's connection loop; the responses."""
    client, server = trio.testing.memory_stream_pair()
    responses: list[bytes] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(serve_connection, broker, CostlyStream(server), Connection("costly"))
        buffer = b""
        for frame in frames:
            await client.send_all(struct.pack(">i", len(frame)) + frame)
            while len(buffer) < 4 or len(buffer) < 4 + struct.unpack_from(">i", buffer)[0]:
                buffer += await client.receive_some(1 << 20)
            size = struct.unpack_from(">i", buffer)[0]
            responses.append(buffer[4:4 + size])
            buffer = buffer[4 + size:]
        await client.aclose()
    return responses


def recorded_percent_seconds(broker, client_id: str) -> float:
    """The percent-seconds the request quota holds for a client-id-level quota."""
    return broker.quotas.request.recorded_total({"user": "", "client-id": client_id}, broker.clock.monotonic_ms()) or 0.0


def test_reading_and_sending_are_charged_to_the_request(tmp_path):
    """Three requests whose reads cost 10 ms and sends 20 ms of CPU each are charged at least 90 ms:
    3 x 30 ms = 9 percent-seconds (a handler-only charge would be a fraction of one)."""
    broker = new_broker(tmp_path)
    set_quota(broker, [("client-id", "costly")], "request_percentage", 1e6)  # never throttles

    async def main():
        await exchange(broker, [api_versions_frame("costly")] * 3)
        assert recorded_percent_seconds(broker, "costly") >= 3 * (READ_COST_NS + SEND_COST_NS) * 100 / 1e9

    run(main)
    broker.close()


def test_the_read_counts_before_the_throttle_and_the_send_after_it(tmp_path):
    """request_percentage = 0.05: 5 ms of CPU per padded 10 s window. The request's own read (10 ms)
    already exceeds it, so its own response is throttled (ApiVersions' handler alone uses well under
    5 ms); its 20 ms send is recorded once the response is out, so it is in the quota's total
    afterwards."""
    from tests.support.broker_shell import decode, throttle_of

    broker = new_broker(tmp_path)
    set_quota(broker, [("client-id", "costly")], "request_percentage", 0.05)

    async def main():
        [response] = await exchange(broker, [api_versions_frame("costly")])
        assert throttle_of(decode(struct.pack(">i", len(response)) + response, 18, 3)) > 0
        assert recorded_percent_seconds(broker, "costly") >= (READ_COST_NS + SEND_COST_NS) * 100 / 1e9

    run(main)
    broker.close()


@pytest.mark.interop
def test_the_metric_accounts_for_the_cpu_the_broker_spent(start_broker, unique):
    """kafka-python sends 300 Metadata requests; the request time the broker recorded for it
    accounts for at least 80 % of the CPU its thread used meanwhile (the rest: housekeeping tasks,
    charged to nobody). CPU accounting, not a timing: both sides are CPU time of one thread."""
    from kafka import KafkaAdminClient

    from tests.support.quota_clients import alter_quota

    client_id = unique("cpu")
    with start_broker(quota_window_num=61) as running:
        alter_quota(running.bootstrap, [("client-id", client_id)], "request_percentage", 1e6)
        [thread] = [t for t in threading.enumerate() if t.name == "minibroker"]
        clock = time.pthread_getcpuclockid(thread.ident)
        admin = KafkaAdminClient(bootstrap_servers=running.bootstrap, client_id=client_id)
        try:
            admin.list_topics()  # connected and warmed up
            before_ns = time.clock_gettime_ns(clock)
            recorded_before = running.in_broker(recorded_percent_seconds, running.broker, client_id)
            for _ in range(300):
                admin.list_topics()
            spent_ns = time.clock_gettime_ns(clock) - before_ns
            recorded = running.in_broker(recorded_percent_seconds, running.broker, client_id) - recorded_before
        finally:
            admin.close()
    recorded_ns = recorded * 1e9 / 100
    print(f"recorded {recorded_ns / 1e6:.1f} ms of {spent_ns / 1e6:.1f} ms of broker thread CPU")
    assert recorded_ns >= 0.8 * spent_ns
