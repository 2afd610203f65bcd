"""The quota path in the broker shell, on trio's MockClock: what `Broker.handle_frame` charges and
returns, and what the connection loop does with it (KIP-219: the response at once, then the
connection muted, for every version as Kafka does). Quotas here use Kafka's default window (11 samples of 1 s), so a first request of S bytes
against a quota of Q B/s is measured over the padded 10 s: throttle = (S / 10 - Q) / Q * 10 000 ms,
which for Q = 1000 is exactly S - 10 000 ms.
"""

from __future__ import annotations

import dataclasses
import math
import struct
import time

import pytest
import trio
import trio.testing

from minibroker.broker import Broker, Connection
from minibroker.client_quotas import TaskClock
from minibroker.clock import BrokerClock
from minibroker.config import BrokerConfig, ConfigError
from minibroker.handlers import Reply, load_all
from minibroker.server import serve_connection
from minibroker.quotas.callback import ClientQuotaCallback, QuotaType
from tests.support.batches import make_batch
from tests.support.broker_shell import TOPIC, decode, fetch_frame, new_broker, produce_frame, set_quota, simple_frame, throttle_of
from tests.support.clock import run


# ---- the KIP-219 table ------------------------------------------------------------------------


@pytest.mark.parametrize("api_key, version, expected", [
    (0, 5, False), (0, 6, True), (0, 13, True),   # Produce
    (1, 7, False), (1, 8, True),                  # Fetch
    (3, 5, False), (3, 6, True),                  # Metadata
    (18, 1, False), (18, 2, True),                # ApiVersions
    (22, 0, False), (22, 1, True),                # InitProducerId
    (11, 2, False), (11, 3, True),                # JoinGroup
    (44, 0, False), (44, 1, True),                # IncrementalAlterConfigs
    (47, 0, False),                               # OffsetDelete: from v1, which is not served
    # Kafka 4.4's AbstractResponse default (KAFKA-20828; 4.3's was never): the client throttles
    # whenever the response has a throttle time, which each of these has at every version.
    (60, 0, True), (60, 1, True),                 # DescribeCluster
    (48, 1, True), (49, 1, True),                 # Describe/AlterClientQuotas
    (68, 1, True), (69, 1, True),                 # ConsumerGroupHeartbeat/Describe (KIP-848)
    (88, 0, True), (89, 0, True),                 # StreamsGroupHeartbeat/Describe (KIP-1071)
    (57, 1, True), (61, 0, True), (65, 0, True), (66, 1, True), (71, 0, True), (72, 0, True), (74, 0, True),
    # The share APIs (KIP-932)
    (76, 1, True), (77, 1, True),                 # ShareGroupHeartbeat/Describe
    (78, 1, True), (78, 2, True),                 # ShareFetch
    (79, 1, True), (79, 2, True),                 # ShareAcknowledge
    (90, 0, True), (90, 1, True),                 # DescribeShareGroupOffsets
    (91, 0, True), (92, 0, True),                 # Alter/DeleteShareGroupOffsets
])
def test_which_versions_throttle_themselves(api_key, version, expected):
    """Kafka's shouldClientThrottle per response: from those versions the client waits by itself."""
    assert load_all()[api_key].client_throttles(version) is expected


def test_every_served_version_with_a_throttle_time_throttles_on_the_client_unless_kafka_overrides_it(tmp_path):
    """Kafka 4.4's clients (kafka-clients 4.4.0's AbstractResponse, read with javap): a response
    throttles on the client when its schema has throttle_time_ms at that version, except in the
    responses that override shouldClientThrottle with a first version, registered here as
    `client_throttles_from` (Produce, Fetch, Metadata, the group and transaction APIs ...)."""
    from minibroker.protocol.messages import api_schema

    broker = new_broker(tmp_path)
    for key, h in broker.handlers.items():
        for version in range(h.min_version, h.max_version + 1):
            fields = {f.name for f in dataclasses.fields(api_schema(key, version).response)}
            if "throttle_time" not in fields:  # SASL, DescribeQuorum: no throttle time
                assert not h.client_throttles(version), (h.name, version)
            elif h.client_throttles_from is None:
                assert h.client_throttles(version), (h.name, version)
    broker.close()


# ---- Produce -------------------------------------------------------------------------------------


def test_produce_over_its_byte_rate_is_appended_then_throttled(tmp_path):
    """Kafka appends first and throttles after: the batch is in the log and the response carries
    throttle_time = S - 10 000 ms for a request of S bytes against 1000 B/s."""
    broker = new_broker(tmp_path)
    set_quota(broker, [("client-id", "slow")], "producer_byte_rate", 1000)

    async def main():
        frame = produce_frame("slow", 12_000)
        response = await broker.handle_frame(frame, Connection("test"))
        assert response.throttle_ms == len(frame) - 10_000 > 0
        assert not response.delay_response and not response.close
        body = decode(response.data, 0, 9)
        assert throttle_of(body) == response.throttle_ms
        assert body.responses[0].partition_responses[0].error_code == 0
        assert broker.logs.log(TOPIC, 0).log_end_offset == 1
        # Another client id has no quota: not throttled.
        other = await broker.handle_frame(produce_frame("fast", 12_000), Connection("test"))
        assert other.throttle_ms == 0 and throttle_of(decode(other.data, 0, 9)) == 0

    run(main)
    broker.close()


def test_acks_0_has_no_response_but_still_mutes_the_connection(tmp_path):
    broker = new_broker(tmp_path)
    set_quota(broker, [("client-id", "slow")], "producer_byte_rate", 1000)
    set_quota(broker, [("client-id", "slow")], "request_percentage", 0.000001)

    async def main():
        frame = produce_frame("slow", 12_000, acks=0)
        response = await broker.handle_frame(frame, Connection("test"))
        assert response.data is None
        # Only the byte rate: the request quota is skipped for acks=0, as in Kafka.
        assert response.throttle_ms == len(frame) - 10_000
        snapshot = {(g, n): v for g, n, _, v in broker.quotas.request.metrics_snapshot(trio.current_time())}
        assert ("Request", "request-time") not in snapshot

    run(main)
    broker.close()


def test_old_produce_versions_are_throttled_alike(tmp_path):
    broker = new_broker(tmp_path)
    set_quota(broker, [("client-id", "old")], "producer_byte_rate", 1000)

    async def main():
        frame = produce_frame("old", 12_000, version=5)
        response = await broker.handle_frame(frame, Connection("test"))
        assert response.throttle_ms == len(frame) - 10_000
        assert not response.delay_response

    run(main)
    broker.close()


# ---- Fetch ---------------------------------------------------------------------------------------


def test_fetch_over_quota_is_empty_and_not_counted_and_its_size_is_capped(tmp_path):
    """consumer_byte_rate 1000: one fetch may return 1000 * (11 - 1) * 1 s = 10 000 bytes; a fetch
    that would push the rate over gets an empty response with the throttle time, and its size is
    taken back out of the rate."""
    broker = new_broker(tmp_path)
    set_quota(broker, [("user", "ANONYMOUS"), ("client-id", "reader")], "consumer_byte_rate", 1000)
    log = broker.logs.log(TOPIC, 0)
    for _ in range(3):
        log.append(make_batch([(None, b"r" * 5500)]), 0)
    assert broker.quotas.fetch_max_bytes("ANONYMOUS", "reader") == 10_000

    async def main():
        first = await broker.handle_frame(fetch_frame("reader", 0), Connection("test"))
        body = decode(first.data, 1, 12)
        assert first.throttle_ms == 0
        records = body.responses[0].partitions[0].records
        assert records is not None and 5500 < len(records) < 10_000  # one batch: two exceed the cap
        [(_, _, tags, rate)] = [m for m in broker.quotas.fetch.metrics_snapshot(0) if m[1] == "byte-rate"]
        assert tags == {"user": "ANONYMOUS", "client-id": "reader"}
        second = await broker.handle_frame(fetch_frame("reader", 1), Connection("test"))
        body2 = decode(second.data, 1, 12)
        assert second.throttle_ms > 0 and throttle_of(body2) == second.throttle_ms
        assert body2.responses == () and body2.error_code == 0
        [(_, _, _, rate_after)] = [m for m in broker.quotas.fetch.metrics_snapshot(0) if m[1] == "byte-rate"]
        assert rate_after == pytest.approx(rate)  # the throttled fetch was taken back

    run(main)
    broker.close()


# ---- request time --------------------------------------------------------------------------------


def test_request_percentage_throttles_any_api_and_is_capped_at_one_window(tmp_path):
    broker = new_broker(tmp_path)
    set_quota(broker, [("client-id", "busy")], "request_percentage", 0.000001)

    async def main():
        meta = await broker.handle_frame(
            simple_frame(3, 12, "busy", topics=[], allow_auto_topic_creation=False,
                         include_topic_authorized_operations=False), Connection("test"))
        assert meta.throttle_ms == 1000 and not meta.delay_response  # capped at quota.window.size.seconds
        assert throttle_of(decode(meta.data, 3, 12)) == 1000
        cluster = await broker.handle_frame(
            simple_frame(60, 0, "busy", include_cluster_authorized_operations=False), Connection("test"))
        assert cluster.throttle_ms == 1000 and not cluster.delay_response  # DescribeCluster too
        versions = await broker.handle_frame(simple_frame(18, 3, "busy", client_software_name="t",
                                                          client_software_version="1"), Connection("test"))
        assert versions.throttle_ms == 1000  # ApiVersions is throttled too, as in Kafka (after authentication)

    run(main)
    broker.close()


def test_sasl_exchange_before_authentication_is_exempt(tmp_path):
    broker = new_broker(tmp_path, sasl_users="alice:pw")
    set_quota(broker, [("client-id", "auth")], "request_percentage", 0.000001)

    async def main():
        conn = broker.new_connection("test", "SASL_PLAINTEXT")
        versions = await broker.handle_frame(simple_frame(18, 3, "auth", client_software_name="t",
                                                          client_software_version="1"), conn)
        handshake = await broker.handle_frame(simple_frame(17, 1, "auth", mechanism="PLAIN"), conn)
        auth = await broker.handle_frame(simple_frame(36, 2, "auth", auth_bytes=b"\0alice\0pw"), conn)
        assert (versions.throttle_ms, handshake.throttle_ms, auth.throttle_ms) == (0, 0, 0)
        assert conn.authenticated and conn.principal == "User:alice" and conn.quota_user == "alice"
        assert broker.quotas.request.sensor_count() == 0
        after = await broker.handle_frame(simple_frame(18, 3, "auth", client_software_name="t",
                                                       client_software_version="1"), conn)
        assert after.throttle_ms == 1000

    run(main)
    broker.close()


def test_time_waiting_in_the_purgatory_is_not_request_time(tmp_path):
    """A Fetch long-poll that waits 300 ms records only its own running time (its CPU), not the time
    it waits (on MockClock the wait takes no real time, but 300 ms of the clock pass: charging the
    clock time would count them)."""
    broker = new_broker(tmp_path)
    set_quota(broker, [("client-id", "poller")], "request_percentage", 1000)

    async def main():
        response = await broker.handle_frame(fetch_frame("poller", 0, max_wait=300, min_bytes=1), Connection("t"))
        assert response.throttle_ms == 0
        [(_, _, _, rate)] = [m for m in broker.quotas.request.metrics_snapshot(broker.clock.monotonic_ms()) if m[1] == "request-time"]
        # 300 ms counted would be 30 percent-seconds over the padded 10 s window: 3 %.
        assert rate < 0.5

    run(main)
    broker.close()


def _burn_cpu(ns: int) -> None:
    end = time.thread_time_ns() + ns
    while time.thread_time_ns() < end:
        pass


def test_task_clock_charges_watched_tasks_their_cpu_not_their_sleeps():
    """A watched task is charged at least the CPU it burns in its steps (20 ms in two steps), not
    the 50 ms it sleeps between them; an unwatched task's 30 ms of CPU is charged to no one."""
    clock = TaskClock()

    async def other():
        _burn_cpu(30_000_000)

    async def main():
        trio.lowlevel.add_instrument(clock)
        task = trio.lowlevel.current_task()
        clock.watch(task)
        before = clock.cpu_ns(task)
        _burn_cpu(10_000_000)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(other)
            await trio.sleep(0.05)
        _burn_cpu(10_000_000)
        charged = clock.cpu_ns(task) - before
        assert 20_000_000 <= charged < 20_000_000 + 30_000_000  # not the other task's 30 ms
        clock.forget(task)
        assert len(clock) == 0
        trio.lowlevel.remove_instrument(clock)

    run(main)


# ---- the connection loop -----------------------------------------------------------------------


async def _exchange(broker: Broker, frames: list[bytes]) -> list[float]:
    """Send frames back to back over an in-memory connection; the virtual times their responses arrive."""
    client, server = trio.testing.memory_stream_pair()
    arrivals: list[float] = []
    start = trio.current_time()

    async def read_responses():
        buffer = b""
        while len(arrivals) < len(frames):
            buffer += await client.receive_some(1 << 20)
            while len(buffer) >= 4 and len(buffer) >= 4 + struct.unpack_from(">i", buffer)[0]:
                size = struct.unpack_from(">i", buffer)[0]
                buffer = buffer[4 + size:]
                arrivals.append(trio.current_time() - start)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(serve_connection, broker, server, Connection("mem"))
        await client.send_all(b"".join(struct.pack(">i", len(f)) + f for f in frames))
        await read_responses()
        await client.aclose()
    return arrivals


def test_kip_219_response_at_once_then_the_connection_is_muted(tmp_path):
    broker = new_broker(tmp_path)
    set_quota(broker, [("client-id", "slow")], "producer_byte_rate", 1000)

    async def main():
        frame = produce_frame("slow", 12_000)
        first_throttle = len(frame) - 10_000
        arrivals = await _exchange(broker, [frame, frame])
        assert arrivals[0] == pytest.approx(0, abs=0.001)
        assert arrivals[1] >= first_throttle / 1000

    run(main)
    broker.close()


def test_old_clients_get_their_response_at_once_too_and_their_next_request_waits(tmp_path):
    # Kafka sends every throttled response at once and mutes the channel, whatever the version
    # (RequestHandlerHelper.throttle; shouldClientThrottle is read by clients only): an old
    # client, which does not wait by itself, finds its next request waiting instead.
    broker = new_broker(tmp_path)
    set_quota(broker, [("client-id", "old")], "producer_byte_rate", 1000)

    async def main():
        frame = produce_frame("old", 12_000, version=5)
        arrivals = await _exchange(broker, [frame, frame])
        assert arrivals[0] == pytest.approx(0, abs=0.001)
        assert arrivals[1] >= (len(frame) - 10_000) / 1000

    run(main)
    broker.close()


def test_quotas_take_effect_live_and_removal_frees_the_client(tmp_path):
    broker = new_broker(tmp_path)

    async def main():
        frame = produce_frame("live", 12_000)
        assert (await broker.handle_frame(frame, Connection("t"))).throttle_ms == 0
        set_quota(broker, [("client-id", "live")], "producer_byte_rate", 1000)
        assert (await broker.handle_frame(frame, Connection("t"))).throttle_ms > 0
        set_quota(broker, [("client-id", "live")], "producer_byte_rate", None)
        assert (await broker.handle_frame(frame, Connection("t"))).throttle_ms == 0

    run(main)
    broker.close()


def test_producer_ids_rate_reaches_the_pid_quota(tmp_path):
    broker = new_broker(tmp_path)
    set_quota(broker, [("user", "alice")], "producer_ids_rate", 2.5)
    set_quota(broker, [("user", None)], "producer_ids_rate", 1)
    assert broker.pid_quota.quota_for("alice") == 2.5 and broker.pid_quota.quota_for("bob") == 1
    set_quota(broker, [("user", None)], "producer_ids_rate", None)
    assert broker.pid_quota.quota_for("bob") is None
    broker.close()


def test_producer_id_quota_settings(tmp_path):
    broker = new_broker(tmp_path, producer_id_quota_window_size_seconds=60, producer_id_quota_cache_layer_count=6,
                        producer_id_quota_cache_false_positive_rate=0.01)
    quota = broker.pid_quota
    assert (quota.window_ms, quota.layer_count, quota.false_positive_rate) == (60_000, 6, 0.01)
    broker.close()
    defaults = new_broker(tmp_path / "other")
    quota = defaults.pid_quota
    assert (quota.window_ms, quota.layer_count, quota.false_positive_rate) == (3_600_000, 4, 0.001)
    assert defaults.quotas.pid_cleanup_interval_s == 0.010  # KIP-936's table
    assert defaults.config["producer.id.quota.error.code"] == 19
    defaults.close()


def test_the_producer_id_cleanup_wakes_only_when_there_is_something_to_drop(tmp_path):
    props = {"log.dirs": str(tmp_path / "data"), "listeners": "127.0.0.1:0",
             "producer.id.quota.window.size.seconds": "4", "producer.id.quota.cache.layer.count": "4"}
    # 1,700,000,000,250 ms: the first id's layer expires at +4000 ms, its count (slot 0 of W / L =
    # 1000 ms, which began 250 ms earlier) at +4749 ms.
    broker = Broker(BrokerConfig(props), clock=BrokerClock(wall_ms=lambda: 1_700_000_000_250))
    set_quota(broker, [("user", "alice")], "producer_ids_rate", 1)
    quota = broker.pid_quota
    clock = trio.testing.MockClock()

    def next_timer() -> float:
        return trio.lowlevel.current_statistics().seconds_to_next_deadline

    async def settle_at(t: float) -> None:
        clock.jump(t - trio.current_time())
        await trio.testing.wait_all_tasks_blocked()

    async def main():
        async with trio.open_nursery() as nursery:
            nursery.start_soon(broker.quotas.run_pid_cache_cleanup)
            await trio.testing.wait_all_tasks_blocked()
            assert next_timer() == math.inf  # nothing tracked: no timer (the KIP's would wake every 10 ms)
            await settle_at(1.0)
            quota.track("alice", 1, broker.clock.now_ms())
            await trio.testing.wait_all_tasks_blocked()
            assert next_timer() == pytest.approx(0.010)  # woken by the new user: a pass, then one interval
            await settle_at(1.010)
            assert next_timer() == pytest.approx(3.990)  # asleep until the layer expires
            await settle_at(4.999)
            assert quota.filter_for("alice").layer_sizes() == [1]
            await settle_at(5.0)
            assert quota.filter_for("alice").layer_sizes() == [] and quota.is_tracked("alice")
            await settle_at(5.010)  # one interval on, it looks for the next: the count, at 5.749
            assert next_timer() == pytest.approx(0.739)
            await settle_at(5.749)
            assert not quota.is_tracked("alice")
            await settle_at(5.759)
            assert next_timer() == math.inf  # nothing left to track
            nursery.cancel_scope.cancel()

    trio.run(main, clock=clock)
    broker.close()


@pytest.mark.parametrize("key, value, reason", [
    ("producer.id.quota.cache.false.positive.rate", "1.5", "between 0 and 1"),
    ("producer.id.quota.cache.false.positive.rate", "often", "expected a number"),
    ("producer.id.quota.cache.layer.count", "0", "at least 1"),
    ("producer.id.quota.window.size.seconds", "0", "at least 1"),
    ("producer.id.quota.cache.cleanup.scheduler.interval.ms", "0", "at least 1"),
    ("producer.id.quota.error.code", "0", "between 1 and 32767"),
])
def test_bad_producer_id_quota_settings_name_the_key(key, value, reason):
    with pytest.raises(ConfigError, match=reason) as info:
        BrokerConfig({key: value})
    assert info.value.key == key


def test_more_layers_than_milliseconds_in_the_window_names_the_key(tmp_path):
    with pytest.raises(ConfigError) as info:
        new_broker(tmp_path, producer_id_quota_window_size_seconds=1, producer_id_quota_cache_layer_count=1001)
    assert info.value.key == "producer.id.quota.cache.layer.count"


def test_window_num_is_accepted_with_a_warning(tmp_path, caplog):
    broker = new_broker(tmp_path, producer_id_quota_window_num=11)
    assert "producer.id.quota.window.num has no effect" in caplog.text
    broker.close()


# ---- a custom callback (KIP-257) ------------------------------------------------------------------


class OneQuotaForAll(ClientQuotaCallback):
    """Every client shares one Produce quota of 1000 B/s, whatever is configured."""

    def quota_metric_tags(self, quota_type, principal, client_id):
        return {"tenant": "all"}

    def quota_limit(self, quota_type, metric_tags):
        return 1000.0 if quota_type is QuotaType.PRODUCE else None

    def update_quota(self, quota_type, entity, new_value):
        pass

    def remove_quota(self, quota_type, entity):
        pass


def test_client_quota_callback_class_replaces_the_default(tmp_path):
    broker = new_broker(tmp_path, client_quota_callback_class="tests.quotas.test_shell:OneQuotaForAll")

    async def main():
        frame = produce_frame("anyone", 12_000)
        response = await broker.handle_frame(frame, Connection("test"))
        assert response.throttle_ms == len(frame) - 10_000
        [(group, name, tags, _)] = [m for m in broker.quotas.produce.metrics_snapshot(0) if m[1] == "byte-rate"]
        assert tags == {"tenant": "all"}

    run(main)
    broker.close()


def test_a_bad_callback_class_names_the_key(tmp_path):
    with pytest.raises(ConfigError) as info:
        new_broker(tmp_path, client_quota_callback_class="tests.nowhere:Nothing")
    assert info.value.key == "client.quota.callback.class"


def test_a_throttle_the_handler_sets_itself_also_mutes(tmp_path):
    """A handler enforcing its own quota (the producer-id quota) reports throttle_time; the
    connection waits it out like a client-quota throttle, with or without client quotas configured."""
    broker = new_broker(tmp_path)
    real = broker.handlers[3].handle

    async def throttling_metadata(ctx, request):
        return Reply((await real(ctx, request)).body, throttle_ms=250)

    broker.handlers = {**broker.handlers, 3: dataclasses.replace(broker.handlers[3], handle=throttling_metadata)}
    frame = simple_frame(3, 12, "x", topics=[], allow_auto_topic_creation=False,
                         include_topic_authorized_operations=False)

    async def main():
        assert (await broker.handle_frame(frame, Connection("t"))).throttle_ms == 250
        set_quota(broker, [("client-id", "x")], "request_percentage", 1e6)
        response = await broker.handle_frame(frame, Connection("t"))
        assert response.throttle_ms == 250 and throttle_of(decode(response.data, 3, 12)) == 250

    run(main)
    broker.close()
