"""Client telemetry (KIP-714, minibroker.telemetry) with exact requests: CLIENT_METRICS subscriptions
through IncrementalAlterConfigs / DescribeConfigs / ListConfigResources (and their refusals), kept
across a restart; GetTelemetrySubscriptions matching them; PushTelemetry of OpenTelemetry MetricsData
(plain and compressed) with Kafka's checks in order; the pushed values on the metrics endpoint with the
client's id and instance id. The OTLP reader on its own: gauges, delta and cumulative sums, attributes,
and malformed payloads."""

from __future__ import annotations

import uuid

import pytest

from minibroker.admin_client import AdminClient
from minibroker.metrics_http import render
from minibroker.protocol.compression import compress
from minibroker.protocol.otlp import OtlpError, parse_metrics_data
from tests.support.otlp import counter, gauge, metrics_data, point

CLIENT_METRICS = 16
SET, DELETE, APPEND = 0, 1, 2
INVALID_REQUEST, THROTTLED, UNKNOWN_SUBSCRIPTION, TOO_LARGE, INVALID_RECORD = 42, 89, 117, 118, 87


def alter(c, name, *ops, validate_only=False):
    r = c.call(44, {"resources": [{"resource_type": CLIENT_METRICS, "resource_name": name, "configs": [
        {"name": k, "config_operation": op, "value": v} for k, op, v in ops]}], "validate_only": validate_only})
    (result,) = r.responses
    return int(result.error_code), result.error_message


def describe(c, name):
    r = c.call(32, {"resources": [{"resource_type": CLIENT_METRICS, "resource_name": name,
                                   "configuration_keys": None}], "include_synonyms": False,
                    "include_documentation": False})
    return {e.name: (e.value, e.config_source == 5) for e in r.results[0].configs}  # 5: DEFAULT_CONFIG


def listed(c):
    r = c.call(74, {"resource_types": [CLIENT_METRICS]}, version=1)
    return [x.resource_name for x in r.config_resources]


def subscriptions(c, instance_id=None):
    r = c.call(71, {"client_instance_id": instance_id or uuid.UUID(int=0)})
    return r


def push(c, instance_id, subscription_id, payload, compression=0, terminating=False):
    r = c.call(72, {"client_instance_id": instance_id, "subscription_id": subscription_id,
                    "terminating": terminating, "compression_type": compression,
                    "metrics": compress(compression, payload) if compression else payload})
    return int(r.error_code)


def test_subscriptions_are_client_metrics_config_resources(start_broker, tmp_path):
    data = tmp_path / "data"
    with start_broker(data) as broker, AdminClient(broker.bootstrap) as c:
        assert listed(c) == []
        assert alter(c, "prod", ("metrics", SET, "org.apache.kafka.producer."), ("interval.ms", SET, "1000"),
                     ("match", SET, "client_id=app-.*")) == (0, None)
        assert alter(c, "prod", ("metrics", APPEND, "org.apache.kafka.consumer.")) == (0, None)
        assert describe(c, "prod") == {
            "metrics": ("org.apache.kafka.producer.,org.apache.kafka.consumer.", False),
            "interval.ms": ("1000", False), "match": ("client_id=app-.*", False)}
        assert describe(c, "nobody") == {"metrics": ("", True), "interval.ms": ("300000", True), "match": ("", True)}
        # Kafka's refusals: an interval out of range, an unknown key, a bad selector; nothing changes.
        assert alter(c, "prod", ("interval.ms", SET, "50"))[0] == INVALID_REQUEST
        assert alter(c, "prod", ("nope", SET, "1"))[0] == INVALID_REQUEST
        assert alter(c, "prod", ("match", SET, "client_colour=red"))[0] == INVALID_REQUEST
        assert alter(c, "prod", ("match", SET, "client_id=("))[0] == INVALID_REQUEST
        assert alter(c, "other", ("metrics", SET, "*"), validate_only=True) == (0, None)
        assert listed(c) == ["prod"]
    with start_broker(data) as broker, AdminClient(broker.bootstrap) as c:
        assert listed(c) == ["prod"]  # kept in the data directory
        assert alter(c, "prod", ("metrics", DELETE, None), ("interval.ms", DELETE, None),
                     ("match", DELETE, None)) == (0, None)
        assert listed(c) == []  # every key removed: the subscription is gone


def test_a_client_gets_its_subscription_and_pushes_its_metrics(start_broker):
    with start_broker() as broker, AdminClient(broker.bootstrap, client_id="app-1") as c:
        r = subscriptions(c)
        instance = r.client_instance_id
        assert int(r.error_code) == 0 and instance.int != 0 and list(r.requested_metrics) == []
        assert r.push_interval.total_seconds() == 300 and list(r.accepted_compression_types) == [4, 3, 1, 2]
        assert r.delta_temporality is True
        alter(c, "all-app", ("metrics", SET, "org.apache.kafka."), ("interval.ms", SET, "60000"),
              ("match", SET, "client_id=app-.*"))
        alter(c, "not-me", ("metrics", SET, "*"), ("match", SET, "client_id=other"))
        # The subscriptions changed: the client gets its new set at once (no throttle), with a new id.
        r2 = subscriptions(c, instance)
        assert int(r2.error_code) == 0 and list(r2.requested_metrics) == ["org.apache.kafka."]
        assert r2.push_interval.total_seconds() == 60 and r2.subscription_id != r.subscription_id
        payload = metrics_data(
            gauge("org.apache.kafka.producer.record.queue.time.avg", point(2.5)),
            counter("org.apache.kafka.producer.record.send.total", point(3, {"topic": "t"})))
        assert push(c, instance, r.subscription_id, payload) == UNKNOWN_SUBSCRIPTION  # the old id
        # After UNKNOWN_SUBSCRIPTION_ID the client may ask again at once (Kafka's exception to the
        # interval), and push right after.
        r2 = subscriptions(c, instance)
        assert int(r2.error_code) == 0
        assert push(c, instance, r2.subscription_id, payload, compression=4) == 0  # zstd
        # Pushed again before its interval (a minute) has passed: throttled, as Kafka does; asking
        # for the subscriptions again too.
        assert push(c, instance, r2.subscription_id, payload) == THROTTLED
        assert int(subscriptions(c, instance).error_code) == THROTTLED
        lines = broker.in_broker(render, broker.broker).splitlines()
        labels = f'client_id="app-1",client_instance_id="{instance}"'
        assert f"minibroker_client_org_apache_kafka_producer_record_queue_time_avg{{{labels}}} 2.5" in lines
        assert f'minibroker_client_org_apache_kafka_producer_record_send_total{{{labels},topic="t"}} 3' in lines
        assert "# TYPE minibroker_client_org_apache_kafka_producer_record_send_total counter" in lines
        # Deltas add up; a terminating push is taken whenever it comes, then the instance is no
        # longer shown, and its next push is refused (as Kafka's ClientMetricsManager does).
        assert push(c, instance, r2.subscription_id, metrics_data(
            counter("org.apache.kafka.producer.record.send.total", point(4, {"topic": "t"}))),
            terminating=True) == 0
        assert f"client_instance_id=\"{instance}\"" not in broker.in_broker(render, broker.broker)
        assert push(c, instance, r2.subscription_id, b"") == INVALID_REQUEST


def test_push_refusals(start_broker):
    with start_broker(telemetry_max_bytes="64") as broker, AdminClient(broker.bootstrap) as c:
        alter(c, "all", ("metrics", SET, "*"), ("interval.ms", SET, "100"))
        r = subscriptions(c)
        instance, sub = r.client_instance_id, r.subscription_id
        assert push(c, uuid.UUID(int=0), sub, b"") == INVALID_REQUEST
        assert push(c, instance, sub, b"x" * 65) == TOO_LARGE
        # Another client instance pushes what is not MetricsData (a truncated field).
        r = subscriptions(c)
        assert push(c, r.client_instance_id, r.subscription_id, b"\x0a\x05ab") == INVALID_RECORD
        # Its next push comes too early; a terminating one is taken, the one after that refused.
        assert push(c, r.client_instance_id, r.subscription_id, b"") == THROTTLED
        assert broker.broker.client_metrics.instances[r.client_instance_id].pushes == 0


def test_the_otlp_reader():
    payload = metrics_data(
        gauge("g", point(1.5, {"a": "1"}), point(-2, {"a": "2"})),
        counter("c", point(7), delta=False),
        resource={"service.name": "svc"})
    resource, metrics = parse_metrics_data(payload)
    assert resource == {"service.name": "svc"}
    assert [(m.name, m.kind, m.monotonic, m.temporality, [(p.attributes, p.value) for p in m.points])
            for m in metrics] == [("g", "gauge", False, 0, [((("a", "1"),), 1.5), ((("a", "2"),), -2.0)]),
                                  ("c", "sum", True, 2, [((), 7.0)])]
    for bad in (b"\x0a\x80", b"\x0a\x05abc", b"\x0f"):
        with pytest.raises(OtlpError):
            parse_metrics_data(bad)
