"""Real clients under the control surface (minibroker.control): an error stack makes each client
retry exactly as many times as pushed (NOT_LEADER_OR_FOLLOWER on Produce and Fetch,
COORDINATOR_NOT_AVAILABLE on FindCoordinator, COORDINATOR_LOAD_IN_PROGRESS on JoinGroup), a captured
JoinGroup is asserted on, and the HTTP control endpoint is driven from Java (java.net.http, in
tests/java/MiniClient.java) and from Go (net/http, tests/go/control.go)."""

from __future__ import annotations

import json
import time

import pytest

from minibroker.testing import running_broker
from tests.support.clients import ALL, Message
from tests.support.fetch_session_consumers import CONSUMERS
from tests.support.java_client import of_type

pytestmark = pytest.mark.interop

NOT_LEADER, COORDINATOR_NOT_AVAILABLE, COORDINATOR_LOAD_IN_PROGRESS = 6, 15, 14
RETRIES = {"kafka-python": {"retries": 5}}  # kafka-python's producer does not retry by default


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with running_broker(tmp_path_factory.mktemp("control-clients") / "data", control_listen="127.0.0.1:0",
                        group_initial_rebalance_delay_ms=0) as running:
        yield running


@pytest.fixture(autouse=True)
def clean(broker):
    yield
    broker.errors.clear()


def names_topic(broker, topic):
    topic_id = broker.in_broker(lambda: broker.broker.logs.resolve(topic).topic_id)

    def check(body):
        entries = body.get("topic_data") or body.get("topics") or []
        return any(t.get("name") == topic or t.get("topic") == topic or t.get("topic_id") == str(topic_id)
                   for t in entries)
    return check


def outcomes(requests):
    """Each request's fate in order: the pushed code's "error", or "handled"."""
    return [r.answered_by or "handled" for r in requests]


def group_read(broker, client, topic, group, want):
    consumer, poll = CONSUMERS[client](broker.bootstrap, topic, group, want, 30)
    seen: set = set()
    deadline = time.monotonic() + 45
    try:
        while len(seen) < want and time.monotonic() < deadline:
            seen.update(poll())
    finally:
        consumer.close()
    return seen


@pytest.mark.parametrize("client", ALL, ids=lambda c: c.name)
def test_produce_retries_once_per_pushed_error(broker, client, unique):
    topic = unique(f"retry-{client.name}")
    client.create_topic(broker.bootstrap, topic, 1)
    broker.errors.push("Produce", ["NOT_LEADER_OR_FOLLOWER", NOT_LEADER], topic=topic)
    offsets = client.produce(broker.bootstrap, topic, [Message(0, b"k", b"v", ())], **RETRIES.get(client.name, {}))
    assert offsets == [0]
    produces = [r for r in broker.requests(api="Produce") if names_topic(broker, topic)(r.body)]
    assert outcomes(produces) == ["error", "error", "handled"]
    assert broker.broker.logs.log(topic, 0).log_end_offset == 1


@pytest.mark.parametrize("client", ALL, ids=lambda c: c.name)
def test_fetch_retries_after_each_pushed_error(broker, client, unique):
    topic = unique(f"fetch-{client.name}")
    client.create_topic(broker.bootstrap, topic, 1)
    client.produce(broker.bootstrap, topic, [Message(0, b"k%d" % i, b"v", ()) for i in range(3)],
                   **RETRIES.get(client.name, {}))
    broker.errors.push("Fetch", [NOT_LEADER, NOT_LEADER], topic=topic, partition=0)
    assert len(client.consume(broker.bootstrap, topic, 1, 3)) == 3
    fetches = [r for r in broker.requests(api="Fetch") if names_topic(broker, topic)(r.body)]
    assert outcomes(fetches)[:3] == ["error", "error", "handled"]
    assert broker.errors.pending() == []


@pytest.mark.parametrize("client", ALL, ids=lambda c: c.name)
def test_group_coordinator_and_join_errors_are_retried_as_pushed(broker, client, unique):
    """FindCoordinator answered COORDINATOR_NOT_AVAILABLE twice, then JoinGroup
    COORDINATOR_LOAD_IN_PROGRESS twice: the consumer asks again after each and joins; the captured
    JoinGroup says what the client asked for."""
    topic, group = unique(f"grp-{client.name}"), unique(f"g-{client.name}")
    client.create_topic(broker.bootstrap, topic, 1)
    client.produce(broker.bootstrap, topic, [Message(0, b"k%d" % i, b"v", ()) for i in range(3)],
                   **RETRIES.get(client.name, {}))
    broker.errors.push("FindCoordinator", ["COORDINATOR_NOT_AVAILABLE"] * 2, group=group)
    broker.errors.push("JoinGroup", [COORDINATOR_LOAD_IN_PROGRESS] * 2, group=group)
    assert len(group_read(broker, client.name, topic, group, 3)) == 3
    finds = [r for r in broker.requests(api="FindCoordinator")
             if r.body.get("key") == group or group in (r.body.get("coordinator_keys") or [])]
    assert outcomes(finds)[:3] == ["error", "error", "handled"]
    joins = [r for r in broker.requests(api="JoinGroup") if r.body["group_id"] == group]
    assert outcomes(joins)[:3] == ["error", "error", "handled"]
    assert broker.errors.pending() == []
    join = joins[-1].body
    assert join["protocol_type"] == "consumer"
    assert join["session_timeout"] == 6000
    assert join["protocols"] and all(p["name"] for p in join["protocols"])


@pytest.mark.parametrize("client", ALL, ids=lambda c: c.name)
def test_metadata_errors_are_retried_as_pushed(broker, client, unique):
    """LEADER_NOT_AVAILABLE for the topic twice (each requested topic's error, at every version the
    clients send): the producer asks again after each, then sends."""
    topic = unique(f"meta-{client.name}")
    client.create_topic(broker.bootstrap, topic, 1)
    broker.errors.push("Metadata", ["LEADER_NOT_AVAILABLE"] * 2, topic=topic)
    assert client.produce(broker.bootstrap, topic, [Message(0, b"k", b"v", ())], **RETRIES.get(client.name, {})) == [0]
    asked = [r for r in broker.requests(api="Metadata") if any(t.get("name") == topic for t in r.body["topics"] or ())]
    assert outcomes(asked)[:3] == ["error", "error", "handled"]


def test_java_retries_group_and_metadata_errors_as_pushed(broker, java, unique):
    topic, group = unique("java-grp"), unique("java-g")
    url = broker.control_url
    pushes = [{"api": "Metadata", "codes": ["LEADER_NOT_AVAILABLE"] * 2, "topic": topic},
              {"api": "FindCoordinator", "codes": [COORDINATOR_NOT_AVAILABLE] * 2, "group": group},
              {"api": "JoinGroup", "codes": [COORDINATOR_LOAD_IN_PROGRESS] * 2, "group": group}]
    lines = java.run(["create-topic", broker.bootstrap, topic, 1],
                     *[["control", url, "POST", "/errors", json.dumps(p)] for p in pushes],
                     ["produce", broker.bootstrap, topic, 3],
                     ["group-consume", broker.bootstrap, topic, group, 3])
    assert all(line["status"] == 200 for line in of_type(lines, "control"))
    assert broker.errors.pending() == []
    asked = [r for r in broker.requests(api="Metadata") if any(t.get("name") == topic for t in r.body["topics"] or ())]
    assert outcomes(asked)[:3] == ["error", "error", "handled"]
    finds = [r for r in broker.requests(api="FindCoordinator") if group in (r.body.get("coordinator_keys") or [])]
    assert outcomes(finds)[:3] == ["error", "error", "handled"]
    joins = [r for r in broker.requests(api="JoinGroup") if r.body["group_id"] == group]
    assert outcomes(joins)[:3] == ["error", "error", "handled"]


def test_java_drives_the_endpoint_and_retries_as_pushed(broker, java, unique):
    """java.net.http pushes two NOT_LEADER_OR_FOLLOWER on Produce, the Java producer sends through
    them, and java.net.http reads the captured requests back."""
    topic = unique("java-control")
    url = broker.control_url
    push = json.dumps({"api": "Produce", "codes": ["NOT_LEADER_OR_FOLLOWER", 6], "topic": topic})
    lines = java.run(["create-topic", broker.bootstrap, topic, 1],
                     ["control", url, "POST", "/errors", push],
                     ["produce", broker.bootstrap, topic, 1],
                     ["control", url, "GET", "/requests?api=Produce&client_id="])
    pushed, requests = of_type(lines, "control")
    assert pushed["status"] == 200 and pushed["answer"]["pushed"]["codes"] == [6, 6]
    assert [p["offset"] for p in of_type(lines, "produced")] == [0]
    mine = [r for r in requests["answer"]["requests"] if names_topic(broker, topic)(r["body"])]
    assert [r["answered_by"] or "handled" for r in mine] == ["error", "error", "handled"]
    assert mine[0]["version"] >= 9


def test_go_drives_the_endpoint(broker, go_clients, unique):
    """net/http (the standard library) pushes an error, produces through a Go client, reads the
    captured requests back, and gets the endpoint's refusal naming the API."""
    topic = unique("go-control")
    url = broker.control_url
    push = json.dumps({"api": "Produce", "codes": [NOT_LEADER], "topic": topic})
    lines = go_clients.run(["franz", "create-topic", broker.bootstrap, topic, 1],
                           ["http", "control", url, "POST", "/errors", push],
                           ["franz", "produce", broker.bootstrap, topic, 1, 1],
                           ["http", "control", url, "GET", "/requests?api=Produce"],
                           ["http", "control", url, "POST", "/errors", json.dumps({"api": "Nope", "codes": [6]})])
    pushed, requests, refused = [line for line in lines if line["type"] == "control"]
    assert pushed["status"] == 200
    mine = [r for r in requests["answer"]["requests"] if names_topic(broker, topic)(r["body"])]
    assert [r["answered_by"] or "handled" for r in mine] == ["error", "handled"]
    assert refused["status"] == 400 and "unknown API 'Nope'" in refused["answer"]["error"]
