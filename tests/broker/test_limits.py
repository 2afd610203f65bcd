"""Resource limits (minibroker/limits.py, docs/limits.md): what a client can
make the broker take on is bounded, and what is refused is answered, not a dropped connection.

Partitions: max.broker.partitions (50,000 by default) bounds Metadata
auto-creation and CreateTopics; KRaft's 10,000 partitions per CreateTopics request.
Connections: max.connections, max.connections.per.ip(.overrides), connections.max.idle.ms (slowloris
included), sasl.server.max.receive.size, queued.max.request.bytes; real sockets where no time is
measured, trio's MockClock where it is.
"""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import time

import pytest
import trio
import trio.testing

from minibroker.broker import Broker
from minibroker.config import BrokerConfig, ConfigError
from minibroker.limits import RequestMemoryPool
from minibroker.server import serve_connection
from minibroker.protocol.entities import build
from tests.support.wire import create_topic, ms
from tests.support.metrics import scrape
from tests.support.wire import WireClient, encode_request, schema
from tests.support.wire import api_versions_ok
from tests.support.clock import run

MINIBROKER = [sys.executable, "-m", "minibroker.cli"]


def metadata(client, names, version=12, allow=True):
    return client.request(build(schema(3, version), {
        "topics": [{"name": n, "topic_id": None} for n in names], "allow_auto_topic_creation": allow,
        "include_topic_authorized_operations": False}))


def create_topics(client, specs, validate_only=False):
    req = schema(19, 7)
    mod = __import__(req.__module__, fromlist=["CreatableTopic"])
    topics = tuple(mod.CreatableTopic(name=n, num_partitions=p, replication_factor=-1, assignments=(), configs=())
                   for n, p in specs)
    return client.request(req(topics=topics, timeout=ms(5000), validate_only=validate_only)).topics


# ---- partitions ------------------------------------------------------------------------------------


def user_topics(broker) -> list[str]:
    return sorted(broker.in_broker(lambda: [t.name for t in broker.broker.logs.topics() if not t.name.startswith("__")]))


def test_the_soft_open_file_limit_is_raised_to_the_hard_one_as_the_jvm_does():
    import resource

    result = subprocess.run(
        [sys.executable, "-c", "from minibroker.descriptors import raise_open_files_limit as r; print(r()[1])"],
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (300, 1200)),
        capture_output=True, text=True, check=True,
    )
    assert result.stdout.split() == ["1200"]


def test_metadata_auto_creates_up_to_the_cap_then_answers_unknown_topic(start_broker, unique):
    names = [unique("auto") for _ in range(4)]
    with start_broker(num_partitions="2", max_broker_partitions="6") as broker, WireClient(broker.bootstrap) as c:
        response = metadata(c, names[:3] + ["bad/name"] + names[3:])
        codes = [t.error_code for t in response.topics]
        # __consumer_offsets holds 1, then 2 + 2 fit; a third topic would make 7 > 6.
        assert codes == [0, 0, 3, 17, 3]
        assert [len(t.partitions) for t in response.topics[:2]] == [2, 2]
        assert user_topics(broker) == sorted(names[:2])
        # An explicit CreateTopics of one partition still fits.
        assert create_topic(c, unique("one"), 1).error_code == 0


def test_create_topics_over_the_cap_is_a_policy_violation_naming_the_limit(start_broker, unique):
    a, b, c_name = unique("cap"), unique("cap"), unique("cap")
    with start_broker(max_broker_partitions="11") as broker, WireClient(broker.bootstrap) as c:
        results = create_topics(c, [(a, 6), (b, 6), ("bad/name", 6), (c_name, 4)])
        assert [r.error_code for r in results] == [0, 44, 17, 0]  # with __consumer_offsets' 1: 7, 13, -, 11
        assert "max.broker.partitions=11" in results[1].error_message
        assert "holds 7" in results[1].error_message
        (checked,) = create_topics(c, [(unique("cap"), 1)], validate_only=True)
        assert checked.error_code == 44  # validate_only applies the same policy
        assert not list(broker.data_dir.glob(f"{b}-*"))


def test_a_create_topics_of_8000_partitions_is_answered(start_broker, unique):
    """It used to run the broker out of file descriptors and close the connection."""
    with start_broker(max_broker_partitions="100") as broker, WireClient(broker.bootstrap) as c:
        (result,) = create_topics(c, [(unique("huge"), 8000)])
        assert result.error_code == 44 and "8000" in result.error_message
        assert metadata(c, [], version=1).brokers


def test_more_than_10000_partitions_in_one_request_is_refused_whole_as_kraft_does(broker, unique):
    names = [unique("many") for _ in range(3)]
    with WireClient(broker.bootstrap) as c:
        results = create_topics(c, [(names[0], 5000), (names[1], 5000), (names[2], 1)])
        assert [r.error_code for r in results] == [44, 44, 44]
        assert {r.error_message for r in results} == {"Excessively large number of partitions per request."}
        assert metadata(c, names, allow=False).topics[0].error_code == 3


def test_7000_unknown_topics_in_one_metadata_request_leave_the_broker_serving(tmp_path):
    """The reported attack: one anonymous Metadata naming 7,000 unknown topics auto-created them
    all and ran the process out of file descriptors. Idle partitions now hold no descriptor, and
    max.broker.partitions bounds what one client can make the broker hold: under an open-file limit
    of 1,536 and a cap of 300, 299 topics are created (__consumer_offsets has the other partition),
    the rest answered UNKNOWN_TOPIC_OR_PARTITION, and every client is still served."""
    import resource

    def low_file_limit():
        resource.setrlimit(resource.RLIMIT_NOFILE, (1536, 1536))

    proc = subprocess.Popen(
        MINIBROKER + ["serve", "--listen", "127.0.0.1:0", "--data-dir", str(tmp_path / "d"),
                      "--log-level", "WARNING", "--override", "max.broker.partitions=300"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=low_file_limit,
    )
    try:
        line = proc.stdout.readline()
        assert line.startswith("minibroker ready"), proc.stderr.read()
        bootstrap = line.split("bootstrap.servers=")[1].split()[0]
        with WireClient(bootstrap, timeout=120) as c:
            response = metadata(c, [f"flood-{i}" for i in range(7000)], version=4)
            codes = [t.error_code for t in response.topics]
            assert codes.count(0) == 299 and codes.count(3) == 7000 - 299
        clients = [WireClient(bootstrap) for _ in range(50)]
        try:
            for client in clients:
                assert client.request(schema(18, 0)()).error_code == 0
        finally:
            for client in clients:
                client.close()
        open_files = len(os.listdir(f"/proc/{proc.pid}/fd")) if os.path.isdir("/proc") else 0
        assert open_files < 1536 - 500
    finally:
        proc.terminate()
        _, stderr = proc.communicate(timeout=60)
    assert "auto-creation of 6701 topic(s) refused, max.broker.partitions=300 reached" in stderr
    assert "Traceback" not in stderr


# ---- connections -----------------------------------------------------------------------------------


def test_max_connections_per_ip_closes_the_extra_connection_at_once(start_broker):
    with start_broker(max_connections_per_ip="2", metrics_listen="127.0.0.1:0") as broker:
        first, second = WireClient(broker.bootstrap), WireClient(broker.bootstrap)
        try:
            assert api_versions_ok(first) and api_versions_ok(second)
            with WireClient(broker.bootstrap) as third:
                assert third.is_closed_by_peer()
            second.close()
            # The slot is free again once the broker has seen the close.
            for _ in range(500):
                with WireClient(broker.bootstrap) as again:
                    try:
                        if api_versions_ok(again):
                            break
                    except ConnectionError:
                        time.sleep(0.01)
            else:
                pytest.fail("a connection closed by the client never freed its slot")
            assert scrape(broker.metrics_url)["minibroker_connections_rejected_total"] >= 1
        finally:
            first.close()
            second.close()


def test_max_connections_per_ip_overrides(start_broker):
    with start_broker(max_connections_per_ip="0", max_connections_per_ip_overrides="127.0.0.1:1") as broker:
        with WireClient(broker.bootstrap) as first:
            assert api_versions_ok(first)
            with WireClient(broker.bootstrap) as second:
                assert second.is_closed_by_peer()


def test_max_connections_stops_accepting_until_a_connection_closes(start_broker):
    """Kafka's acceptor waits at max.connections; the waiting client is served once a slot frees."""
    with start_broker(max_connections="2", metrics_listen="127.0.0.1:0") as broker:
        first, second = WireClient(broker.bootstrap), WireClient(broker.bootstrap)
        assert api_versions_ok(first) and api_versions_ok(second)
        with WireClient(broker.bootstrap, timeout=30) as third:  # connects: the kernel's backlog
            third.send_raw(encode_request(schema(18, 0)()))
            third.sock.settimeout(0.3)
            with pytest.raises(TimeoutError):
                third.recv_frame()  # not accepted, so not answered
            third.sock.settimeout(30)
            first.close()
            assert third.recv_frame()  # accepted and answered once a slot freed
        second.close()
        assert scrape(broker.metrics_url)["minibroker_connection_accept_waits_total"] >= 1


def test_idle_and_slowloris_connections_are_closed(start_broker):
    """Scaled down from the report (5,000 idle and 2,000 slowloris connections never closed): with
    connections.max.idle.ms=1000, idle connections and ones that dribble a frame a byte at a time
    are all closed; the broker keeps serving."""
    with start_broker(connections_max_idle_ms="1000", metrics_listen="127.0.0.1:0") as broker:
        idle = [WireClient(broker.bootstrap) for _ in range(30)]
        slow = [WireClient(broker.bootstrap) for _ in range(10)]
        frame = encode_request(schema(18, 0)())
        try:
            closed: set[int] = set()
            for step in range(len(frame) * 100):
                for i, client in enumerate(slow):
                    if i in closed:
                        continue
                    try:
                        client.send_raw(frame[step % len(frame): step % len(frame) + 1])
                    except OSError:
                        closed.add(i)
                if len(closed) == len(slow):
                    break
                time.sleep(0.05)
            assert len(closed) == len(slow), "a connection dribbling a frame was never closed"
            for client in idle:
                client.sock.settimeout(30)
                assert client.is_closed_by_peer()
            with WireClient(broker.bootstrap) as fresh:
                assert api_versions_ok(fresh)
            assert scrape(broker.metrics_url)["minibroker_connections_closed_idle_total"] >= 40
        finally:
            for client in idle + slow:
                client.close()


def _run_on_mock_clock(tmp_path, overrides, client_side, broker=None):
    """A connection loop over an in-memory stream on trio's MockClock; `client_side(client, close_times)`
    drives it. Returns (broker, virtual time the server closed the stream or None). A `broker` given
    (set up beforehand) is used instead of one made with `overrides`."""
    if broker is None:
        props = {"log.dirs": str(tmp_path / "d"), "listeners": "127.0.0.1:0"}
        props.update(overrides)
        broker = Broker(BrokerConfig(props))
    result = {}

    async def main():
        client, server = trio.testing.memory_stream_pair()
        conn = broker.new_connection("mem")

        async def serve():
            async with server:
                await serve_connection(broker, server, conn)
                result["closed_at"] = trio.current_time()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(serve)
            await client_side(client, result)
            nursery.cancel_scope.cancel()

    run(main)
    broker.close()
    return broker, result.get("closed_at")


def test_idle_time_counts_from_the_last_response_on_mock_clock(tmp_path):
    frame = encode_request(schema(18, 0)())

    async def active_then_idle(client, result):
        for _ in range(10):  # a request every 4 s: never 5 s without one
            await client.send_all(frame)
            assert await client.receive_some(1 << 16)
            result["last_response_at"] = trio.current_time()
            await trio.sleep(4)
        assert await client.receive_some(1) == b""

    result = {}

    async def client_side(client, shared):
        await active_then_idle(client, result)

    broker, closed_at = _run_on_mock_clock(tmp_path, {"connections.max.idle.ms": "5000"}, client_side)
    assert closed_at == pytest.approx(result["last_response_at"] + 5.0)  # 36 s + 5: open 41 s in all
    assert broker.metrics.closed_idle == 1


def test_a_dribbled_frame_does_not_reset_the_idle_time_on_mock_clock(tmp_path):
    frame = encode_request(schema(18, 0)())
    sent = []

    async def slowloris(client, result):
        with trio.move_on_after(60):
            for byte in frame:
                try:
                    await client.send_all(bytes([byte]))
                except trio.BrokenResourceError:  # closed by the broker
                    return
                sent.append(trio.current_time())
                await trio.sleep(1)

    broker, closed_at = _run_on_mock_clock(tmp_path, {"connections.max.idle.ms": "5000"}, slowloris)
    assert closed_at == pytest.approx(5.0)  # virtual time: 5 s after it connected, bytes or not
    # A byte a second until then; one due at the very instant of the close may go first (the idle
    # watch cancels the loop in the scheduler step after the one it wakes in).
    assert sent[:5] == [0, 1, 2, 3, 4] and sent[5:] in ([], [5]) and broker.metrics.closed_idle == 1


def _long_poll_fetch(broker: Broker, topic: str, max_wait_ms: int) -> bytes:
    """A Fetch frame (v12) from offset 0 of a new empty one-partition `topic`: it waits max_wait_ms."""
    broker.logs.create_topic(topic, 1, {}, 0)
    info = broker.logs.topic(topic)
    assert info is not None
    return encode_request(build(schema(1, 12), {
        "replica_id": -1, "max_wait": max_wait_ms, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
        "session_id": 0, "session_epoch": -1, "forgotten_topics_data": (), "rack_id": "",
        "topics": [{"topic": info.name, "topic_id": info.topic_id, "partitions": [{
            "partition": 0, "current_leader_epoch": -1, "fetch_offset": 0, "last_fetched_epoch": -1,
            "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}]}))


def test_idle_time_runs_from_the_response_not_through_a_long_poll_on_mock_clock(tmp_path):
    """connections.max.idle.ms counts only the time a request is being read: a Fetch that waits 3 s
    in purgatory on a connection with a 1 s idle limit is answered at 3 s, and the connection is
    closed 1 s after that answer, when no next request has come."""
    props = {"log.dirs": str(tmp_path / "d"), "listeners": "127.0.0.1:0", "connections.max.idle.ms": "1000"}
    broker = Broker(BrokerConfig(props))
    fetch = _long_poll_fetch(broker, "poll", 3000)
    times = {}

    async def poller(client, result):
        await client.send_all(fetch)
        assert await client.receive_some(1 << 16)
        times["answered"] = trio.current_time()
        with trio.move_on_after(60):
            while await client.receive_some(1 << 16):  # until the broker closes the connection
                pass

    _, times["closed"] = _run_on_mock_clock(tmp_path, {}, poller, broker=broker)
    assert times == {"answered": pytest.approx(3.0), "closed": pytest.approx(4.0)}
    assert broker.metrics.closed_idle == 1


# ---- SASL before authentication, and request memory ------------------------------------------------


def test_before_sasl_authentication_a_frame_is_capped_at_sasl_server_max_receive_size(start_broker):
    """8 unauthenticated connections each sending 100 MB used to take the RSS to 789 MB: each is
    now closed at its size prefix. Once authenticated, frames up to socket.request.max.bytes pass."""
    with start_broker(sasl_users={"alice": "pw"}, sasl_server_max_receive_size="65536") as broker:
        for _ in range(8):
            with WireClient(broker.sasl_bootstrap) as client:
                client.send_raw(struct.pack(">i", 100 << 20) + b"\0" * 1024)
                assert client.is_closed_by_peer()
        padded = encode_request(schema(18, 0)())
        padded = struct.pack(">i", len(padded) - 4 + 70_000) + padded[4:] + b"\0" * 70_000  # Kafka ignores the tail
        with WireClient(broker.sasl_bootstrap) as client:
            client.send_raw(padded)
            assert client.is_closed_by_peer()
        with WireClient(broker.sasl_bootstrap) as client:
            assert client.request(schema(17, 1)(mechanism="PLAIN")).error_code == 0
            assert client.request(schema(36, 2)(auth_bytes=b"\0alice\0pw")).error_code == 0
            client.send_raw(padded)
            assert client.recv_frame()
        with WireClient(broker.bootstrap) as plaintext:
            plaintext.send_raw(padded)
            assert plaintext.recv_frame()


def test_request_memory_pool_is_non_strict_and_wakes_waiters():
    async def main():
        pool = RequestMemoryPool(100)
        await pool.acquire(150)  # more than the pool, admitted while any memory is free (Kafka)
        order = []

        async def waiter(name, size):
            await pool.acquire(size)
            order.append((name, trio.current_time()))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(waiter, "b", 10)
            await trio.sleep(1)
            assert order == [] and pool.waits == 1
            pool.release(150)
        assert order == [("b", 1.0)] and pool.used == 10
        unbounded = RequestMemoryPool(-1)
        await unbounded.acquire(1 << 40)
        assert unbounded.used == 0

    run(main)


def test_queued_max_request_bytes_holds_back_reading_until_memory_is_released(tmp_path):
    """A long-poll Fetch padded to the whole pool (Kafka ignores the bytes after a body) holds it
    while it waits 3 s; another connection's request waits for the memory, then is answered."""
    props = {"log.dirs": str(tmp_path / "d"), "listeners": "127.0.0.1:0",
             "queued.max.request.bytes": "4096", "socket.request.max.bytes": "4096"}
    broker = Broker(BrokerConfig(props))
    fetch = _long_poll_fetch(broker, "pool", 3000)
    padding = 4096 - (len(fetch) - 4)
    fetch = struct.pack(">i", 4096) + fetch[4:] + b"\0" * padding

    async def main():
        arrivals = {}

        async def connection(name, frame, start_after):
            client, server = trio.testing.memory_stream_pair()
            conn = broker.new_connection(name)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(serve_connection, broker, server, conn)
                await trio.sleep(start_after)
                await client.send_all(frame)
                await client.receive_some(1 << 16)
                arrivals[name] = trio.current_time()
                nursery.cancel_scope.cancel()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(connection, "poller", fetch, 0)
            nursery.start_soon(connection, "other", encode_request(schema(18, 0)()), 0.5)
        assert arrivals["poller"] == pytest.approx(3.0)
        assert arrivals["other"] == pytest.approx(3.0)  # it waited for the poller's memory
        assert broker.request_memory.waits == 1 and broker.request_memory.used == 0

    run(main)
    broker.close()


@pytest.mark.parametrize("props, key", [
    ({"queued.max.request.bytes": "1000"}, "queued.max.request.bytes"),
    ({"max.connections.per.ip": "0"}, "max.connections.per.ip"),
    ({"connections.max.idle.ms": "100", "connection.failed.authentication.delay.ms": "100"},
     "connection.failed.authentication.delay.ms"),
    ({"max.connections.per.ip.overrides": "no-such-host.invalid:3"}, "max.connections.per.ip.overrides"),
    ({"max.connections.per.ip.overrides": "127.0.0.1"}, "max.connections.per.ip.overrides"),
    ({"max.broker.partitions": "0"}, "max.broker.partitions"),
])
def test_limit_settings_are_checked_as_kafka_checks_them(props, key):
    with pytest.raises(ConfigError) as info:
        BrokerConfig(props)
    assert info.value.key == key
