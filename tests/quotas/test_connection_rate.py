"""Connection-creation quotas (KIP-612): the acceptor's decisions with explicit `now`
(quotas/connection_quota.py), then real sockets from two loopback addresses.

With Kafka's default window (11 samples of 1 s) a rate is measured over at least 10 s, so at one
instant a limit of R connections/s admits 10 * R of them; connection 10 * R + 1 measures
(10 * R + 1) / 10 and its throttle is that excess over R, as a fraction of R, times the 10 s
window: 1000 / R ms, capped at one window (quota.window.size.seconds).
"""

from __future__ import annotations

import socket

from minibroker.quotas.connection_quota import ConnectionRateQuotas
from minibroker.quotas.rate import MetricConfig
from tests.support.wire import api_versions_ok
from tests.support.metrics import scrape
from tests.support.wire import WireClient

KAFKA_WINDOW = MetricConfig(samples=11, window_ms=1000)


def test_ip_rate_refuses_and_takes_the_connection_back_from_every_rate():
    q = ConnectionRateQuotas(KAFKA_WINDOW, listener_rates={"PLAINTEXT": 2**31 - 1})
    q.set_ip_rate("10.0.0.2", 5)
    assert [q.record_ip("PLAINTEXT", "10.0.0.2", 0) for _ in range(50)] == [None] * 50
    refused = q.record_ip("PLAINTEXT", "10.0.0.2", 0)
    assert refused is not None and (refused.rate, refused.throttle_ms) == (5, 200)  # 5.1 vs 5 over 10 s
    assert q.record_ip("PLAINTEXT", "10.0.0.2", 0).throttle_ms == 200  # the refusal was not counted
    assert q.record_ip("PLAINTEXT", "10.0.0.1", 0) is None  # another address: no quota at all
    series = {(name, tuple(tags.items())): v for name, tags, v in q.metrics_snapshot(0)}
    assert series[("connection-accept-rate", (("ip", "10.0.0.2"),))] == 5.0
    assert series[("ip-connection-accept-throttle-time", (("listener", "PLAINTEXT"),))] == 200.0
    assert q.totals() == {"PLAINTEXT": (0, 2)}


def test_default_ip_entity_and_its_precedence():
    q = ConnectionRateQuotas(KAFKA_WINDOW)
    q.set_ip_rate(None, 1)  # the default IP entity: every address, 10 at once
    q.set_ip_rate("10.0.0.9", 3)
    assert (q.rate_for_ip("10.0.0.1"), q.rate_for_ip("10.0.0.9")) == (1, 3)
    admitted = sum(q.record_ip("L", "10.0.0.1", 0) is None for _ in range(12))
    assert admitted == 10
    assert q.record_ip("L", "10.0.0.1", 0).throttle_ms == 1000  # 1.1 vs 1: capped at the 1 s window
    q.set_ip_rate("10.0.0.1", 2)  # a live sensor takes the new limit at once
    assert q.record_ip("L", "10.0.0.1", 0) is None
    q.set_ip_rate("10.0.0.9", None)  # removed: back to the default
    assert q.rate_for_ip("10.0.0.9") == 1
    q.set_ip_rate(None, None)
    assert q.record_ip("L", "10.0.0.7", 0) is None and q.rate_for_ip("10.0.0.7") == 2**31 - 1


def test_broker_and_listener_rates_delay_the_acceptor():
    """max.connection.creation.rate=3 broker-wide, 2 on listener B: A's 31st connection waits
    (3.1 - 3) / 3 * 10 s = 333 ms; B's 21st waits for the listener, (2.1 - 2) / 2 * 10 s = 500 ms,
    the larger of its two throttles. The protected (inter-broker) listener skips the broker rate."""
    q = ConnectionRateQuotas(KAFKA_WINDOW, broker_rate=3, listener_rates={"A": 3, "B": 2, "C": 2**31 - 1},
                             protected_listener="C")
    assert [q.record_accept("A", 0) for _ in range(30)] == [0] * 30
    assert q.record_accept("A", 0) == 333
    assert q.record_accept("C", 0) == 0  # protected: the broker's 32 connections do not count
    later = 60_000  # the window has moved on
    assert [q.record_accept("B", later) for _ in range(20)] == [0] * 20
    assert q.record_accept("B", later) == 500
    assert q.totals()["A"] == (1, 0) and q.totals()["B"] == (1, 0)


def test_the_window_settings_shape_the_rate_and_the_cap():
    q = ConnectionRateQuotas(MetricConfig(samples=2, window_ms=10_000))
    q.set_ip_rate("10.0.0.2", 1)  # measured over at least (2 - 1) * 10 s: 10 at once
    assert sum(q.record_ip("L", "10.0.0.2", 0) is None for _ in range(10)) == 10
    assert q.record_ip("L", "10.0.0.2", 0).throttle_ms == 1000  # (1.1 - 1) / 1 * 10 s, cap 10 s
    assert q.expire_sensors(3_600_001) == 1


# ---- real sockets -------------------------------------------------------------------------------


def client_from(source: str, bootstrap: str) -> WireClient:
    """A WireClient whose socket is bound to `source` (127.0.0.2 reaches 127.0.0.1 on Linux loopback)."""
    host, port = bootstrap.rsplit(":", 1)
    client = WireClient.__new__(WireClient)
    client.sock = socket.create_connection((host, int(port)), timeout=10, source_address=(source, 0))
    client.correlation_id = 0
    return client


def answered(client: WireClient) -> bool:
    try:
        return api_versions_ok(client)
    except (ConnectionError, OSError):
        return False


def test_a_connection_storm_from_one_ip_is_held_to_its_rate_while_another_ip_connects(start_broker):
    """connection_creation_rate=1 on 127.0.0.2 with a window of 2 x 10 s: 10 connections at once are
    admitted, the next 4 are held (1000 ms each, computed as above) and closed unanswered; meanwhile
    127.0.0.1, with no quota, is answered, at once."""
    with start_broker(quota_window_num="2", quota_window_size_seconds="10", metrics_listen="127.0.0.1:0") as broker:
        broker.in_broker(lambda: broker.broker.quotas.alter(
            [([("ip", "127.0.0.2")], [("connection_creation_rate", 1.0, False)])], False))
        storm = [client_from("127.0.0.2", broker.bootstrap) for _ in range(14)]
        try:
            with client_from("127.0.0.1", broker.bootstrap) as other:
                assert answered(other)
            outcomes = [answered(c) for c in storm]
        finally:
            for c in storm:
                c.close()
        assert outcomes.count(True) == 10 and outcomes.count(False) == 4
        samples = scrape(broker.metrics_url)
        assert samples['minibroker_connections_refused_for_ip_rate_total{listener="PLAINTEXT"}'] == 4
        # Refused connections are taken back, so the measured rate never exceeds the limit.
        assert 0 < samples['kafka_network_socket_server_metrics_connection_accept_rate{ip="127.0.0.2"}'] <= 1.0


def test_max_connection_creation_rate_delays_but_does_not_refuse(start_broker):
    """max.connection.creation.rate=1 with a window of 2 x 10 s: the 11th connection waits (about
    1000 ms) in the acceptor and is then served; nothing is closed."""
    with start_broker(max_connection_creation_rate="1", quota_window_num="2", quota_window_size_seconds="10",
                      metrics_listen="127.0.0.1:0") as broker:
        clients = [WireClient(broker.bootstrap) for _ in range(11)]
        try:
            assert all(answered(c) for c in clients)
        finally:
            for c in clients:
                c.close()
        samples = scrape(broker.metrics_url)
        assert samples['minibroker_connection_accept_delays_total{listener="PLAINTEXT"}'] == 1
        # At most the 1000 ms computed above (less as the connections' spread widens the window).
        assert 0 < samples['kafka_network_socket_server_metrics_connection_accept_throttle_time{listener="PLAINTEXT"}'] <= 1000
