"""GET /metrics over HTTP: Prometheus text with the quota series per (user, client-id), scraped
while a client is being throttled, the producer-id quota series, and the broker's basics."""

from __future__ import annotations

import datetime
import socket
import urllib.error
import urllib.request

import pytest

from minibroker.protocol.entities import build
from tests.support.batches import make_batch
from tests.support.wire import WireClient, schema
from tests.support.metrics import scrape
from tests.support.wire import produce

ms = lambda n: datetime.timedelta(milliseconds=n)  # noqa: E731


@pytest.fixture
def metered(start_broker):
    with start_broker(sasl_users={"carol": "carol-pw"}, metrics_listen="127.0.0.1:0") as running:
        yield running


def test_a_throttled_client_shows_up_by_user_and_client_id(metered, unique):
    topic = unique("metered")
    with WireClient(metered.bootstrap) as admin:
        admin.request(build(schema(3, 12), {"topics": [{"name": topic, "topic_id": None}],
                                            "allow_auto_topic_creation": True,
                                            "include_topic_authorized_operations": False}))
        result = admin.request(build(schema(49, 1), {"entries": [
            {"entity": [{"entity_type": "user", "entity_name": "carol"}, {"entity_type": "client-id", "entity_name": None}],
             "ops": [{"key": "producer_byte_rate", "value": 1000, "remove": False}]},
            {"entity": [{"entity_type": "user", "entity_name": "carol"}],
             "ops": [{"key": "producer_ids_rate", "value": 5, "remove": False}]},
        ], "validate_only": False}))
        assert [e.error_code for e in result.entries] == [0, 0]
    with WireClient(metered.sasl_bootstrap) as c:  # wire.py's client id is "wire-test"
        c.request(schema(17, 1)(mechanism="PLAIN"))
        assert c.request(schema(36, 2)(auth_bytes=b"\0carol\0carol-pw")).error_code == 0
        first = produce(c, topic, make_batch([(None, b"m" * 20_000)]), acks=1)  # 20 kB against 1000 B/s over the padded 10 s: throttled
        assert first.throttle_time > datetime.timedelta(0)
        samples = scrape(metered.metrics_url)
    labels = '{user="carol",client_id="wire-test"}'
    assert samples[f"kafka_server_produce_byte_rate{labels}"] > 1000
    assert samples[f"kafka_server_produce_throttle_time{labels}"] == pytest.approx(
        first.throttle_time.total_seconds() * 1000)
    # No request quota is set, so no Request series; Fetch has none either.
    assert not any(name.startswith(("kafka_server_request_", "kafka_server_fetch_")) for name in samples)
    assert samples['minibroker_requests_total{api="produce"}'] == 1
    assert samples['minibroker_requests_total{api="sasl_authenticate"}'] == 1
    assert samples["minibroker_connections"] >= 1 and samples["minibroker_bytes_in_total"] > 20_000


def test_producer_id_quota_series(metered):
    """Once the PID quota tracks a user, metrics(now_ms) is exposed per user (KIP-936)."""
    broker = metered.broker

    def track():
        broker.pid_quota.update_quota("dave", 2.5)  # 2 new ids per window (ids are whole)
        now = broker.clock.now_ms()  # the PID quota runs on the wall clock
        for pid in (42, 43, 44):
            broker.pid_quota.track("dave", pid, now, lambda: False)
        broker.pid_quota.track("dave", 42, now, lambda: False)  # claimed by the filter, no state

    metered.in_broker(track)
    samples = scrape(metered.metrics_url)
    assert samples['kafka_server_producer_ids_rate{user="dave"}'] == 2  # ids per window, the quota's unit
    assert samples['kafka_server_producer_ids_tokens{user="dave"}'] == 0
    assert samples['kafka_server_producer_ids_throttle_time{user="dave"}'] > 0
    assert samples['kafka_server_producer_ids_false_positives{user="dave"}'] == 1
    assert samples['kafka_server_producer_ids_memory_bytes{user="dave"}'] > 0
    assert samples["minibroker_producer_id_quota_admitted_total"] == 2
    assert samples["minibroker_producer_id_quota_rejected_total"] == 2
    assert samples["minibroker_producer_id_quota_false_positives_total"] == 1


@pytest.mark.parametrize("request_line, status", [
    ("GET /other HTTP/1.1", 404),
    ("POST /metrics HTTP/1.1", 405),
    ("NONSENSE", 400),
])
def test_other_requests_get_an_http_error(metered, request_line, status):
    host, port = metered.metrics_url.split("/")[2].split(":")
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(f"{request_line}\r\nHost: x\r\n\r\n".encode())
        answer = b""
        while chunk := s.recv(4096):
            answer += chunk
    assert answer.startswith(f"HTTP/1.1 {status} ".encode())


def test_no_metrics_listener_unless_asked(broker):
    assert broker.metrics_url is None and broker.broker.metrics_address is None


def test_head_and_query_strings(metered):
    request = urllib.request.Request(metered.metrics_url + "?x=1", method="HEAD")
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 200 and response.read() == b""
    with pytest.raises(urllib.error.HTTPError):
        urllib.request.urlopen(metered.metrics_url.replace("/metrics", "/"), timeout=10)


def test_serve_flags_open_the_sasl_and_metrics_listeners(tmp_path):
    """`minibroker serve --sasl-listen --sasl-user --metrics-listen`: the ready line names every
    listener, the SASL one takes the user, /metrics answers, SIGTERM shuts down cleanly."""
    import signal
    import subprocess
    import sys

    from minibroker.admin_client import AdminClient

    proc = subprocess.Popen(
        [sys.executable, "-m", "minibroker.cli", "serve", "--listen", "127.0.0.1:0", "--sasl-listen", "127.0.0.1:0",
         "--sasl-user", "erin:erin-pw", "--sasl-user", "frank:frank-pw", "--metrics-listen", "127.0.0.1:0",
         "--data-dir", str(tmp_path / "data")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        fields = dict(part.split("=", 1) for part in line.split()[2:])
        assert set(fields) == {"bootstrap.servers", "data", "SASL_PLAINTEXT", "metrics"}, line
        for user in ("erin", "frank"):
            with AdminClient(fields["SASL_PLAINTEXT"], sasl_mechanism="SCRAM-SHA-256", sasl_username=user,
                             sasl_password=f"{user}-pw") as admin:
                assert admin.call(48, {"components": [], "strict": False}).error_code == 0
        assert "minibroker_requests_total" in urllib.request.urlopen(fields["metrics"], timeout=10).read().decode()
    finally:
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 0, stderr
