"""Client telemetry (KIP-714) with the real Java client: a CLIENT_METRICS subscription made with Java's
Admin (incrementalAlterConfigs on ConfigResource.Type.CLIENT_METRICS), then a Java producer with its
defaults (enable.metrics.push=true) pushes its metrics, which are read from the broker's Prometheus
endpoint labelled with the producer's client id and client instance id (the id Java's
KafkaProducer.clientInstanceId() reports). (Java 4.3's producer does not get its terminating push
out before its close completes: the instance's metrics stay until they expire.)"""

from __future__ import annotations

import base64
import threading
import urllib.request
import uuid

import pytest

from tests.support.java_client import of_type

pytestmark = pytest.mark.interop


def kafka_uuid(text: str) -> uuid.UUID:
    """Kafka's Uuid.toString is URL-safe base64 without padding."""
    return uuid.UUID(bytes=base64.urlsafe_b64decode(text + "=="))


def test_a_java_producers_pushed_metrics_on_the_metrics_endpoint(java, start_broker, unique):
    topic, client_id = unique("tele"), unique("app")
    with start_broker(metrics_listen="127.0.0.1:0") as broker:
        bs = broker.bootstrap
        lines = java.run(
            ["create-topic", bs, topic, 1],
            ["alter-configs", bs, "CLIENT_METRICS", "producers",
             "SET:metrics=org.apache.kafka.producer.;SET:interval.ms=500;SET:match=client_id=app-.*"])
        assert of_type(lines, "configs-altered")[0]["error"] is None, lines
        scraped: list[str] = []

        def scrape_while_running():
            # The producer pushes every ~500 ms while it runs; the page is read during its run.
            for _ in range(40):
                page = urllib.request.urlopen(broker.metrics_url, timeout=10).read().decode()
                if f'client_id="{client_id}"' in page and "record_send_total" in page:
                    scraped.append(page)
                    return
                threading.Event().wait(0.25)

        reader = threading.Thread(target=scrape_while_running)
        reader.start()
        run = java.run(["produce-pushing", bs, topic, client_id, 6000])
        reader.join()
        instance = kafka_uuid(of_type(run, "client-instance")[0]["id"])
        assert scraped, "the producer's metrics never reached the metrics endpoint"
        page = scraped[0].splitlines()
        labels = f'client_id="{client_id}",client_instance_id="{instance}"'
        sends = [line for line in page
                 if line.startswith("minibroker_client_org_apache_kafka_producer_record_send_total{" + labels)]
        assert sends and float(sends[0].rsplit(" ", 1)[1]) > 0, [x for x in page if client_id in x][:20]
        # Only what the subscription asked for: producer metrics, no others.
        pushed = {line.split("{")[0] for line in page if client_id in line}
        assert pushed and all(name.startswith("minibroker_client_org_apache_kafka_producer_") for name in pushed)
        # Pushed over and over at the subscription's interval, none refused.
        kept = broker.broker.client_metrics.instances[instance]
        assert kept.pushes >= 2 and not kept.last_error
        versions = broker.broker.metrics.request_versions
        assert versions[("get_telemetry_subscriptions", 0)] >= 1 and versions[("push_telemetry", 0)] >= 2
