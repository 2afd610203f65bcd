"""The control endpoint (minibroker.control.http) and `minibroker control`: each verb over HTTP, on
a running_broker and on `minibroker serve --control-listen` (where a broker stops and starts again
on its port), and the errors that name the verb, API or broker at fault."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

from minibroker.cli import main
from minibroker.testing import running_broker, spawn_broker, stop_process
from tests.support.batches import make_batch
from tests.support.wire import WireClient, create_topic, produced, request


def call(url, method, path, body=None):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url + path, data=data, method=method)
    try:
        with urllib.request.urlopen(req, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with running_broker(tmp_path_factory.mktemp("http") / "data", control_listen="127.0.0.1:0") as running:
        yield running


def test_push_an_error_and_read_the_requests_over_http(broker, unique):
    url = broker.control_url
    assert url.startswith("http://127.0.0.1:")
    topic = unique("http")
    node = broker.broker.node_id
    status, answer = call(url, "GET", "/brokers")
    assert status == 200 and [{k: b[k] for k in ("node_id", "host", "port", "running")} for b in answer["brokers"]] \
        == [{"node_id": node, "host": broker.host, "port": broker.port, "running": True}]
    status, answer = call(url, "POST", "/errors", {"api": "Produce", "codes": ["NOT_LEADER_OR_FOLLOWER"], "topic": topic})
    assert status == 200 and answer["pushed"]["codes"] == [6]
    assert call(url, "GET", "/errors")[1]["stacks"][0]["topic"] == topic
    with WireClient(broker.bootstrap) as client:
        create_topic(client, topic)
        batch = make_batch([(b"k", b"v")])
        assert [produced(client, topic, batch).error_code for _ in range(2)] == [6, 0]
    status, answer = call(url, "GET", "/requests?api=Produce&client_id=wire-test")
    produces = [r for r in answer["requests"] if r["body"]["topic_data"][0]["name"] == topic]
    assert len(produces) == 2 and produces[0]["version"] == 9 and produces[0]["broker"] == node
    assert call(url, "DELETE", "/errors") == (200, {})


def test_clock_and_delay_and_connections(broker):
    url = broker.control_url
    before = broker.broker.clock.skew
    assert call(url, "POST", "/clock/advance", {"seconds": 90})[0] == 200
    assert broker.broker.clock.skew == before + 90
    assert call(url, "POST", "/delay", {"broker": broker.broker.node_id, "ms": 0})[0] == 200
    assert call(url, "POST", "/connections/close", {})[0] == 200
    assert call(url, "POST", "/connections/drop", {"api": "ListGroups", "count": 2})[0] == 200
    assert [(r.api, r.action, r.limit) for r in broker.broker.faults.rules] == [("ListGroups", "drop", 2)]
    broker.in_broker(broker.broker.faults.clear)
    assert call(url, "POST", "/connections/drop", {"api": "Nope"})[0] == 400


@pytest.mark.parametrize("method,path,body,status,message", [
    ("POST", "/errors", {"api": "Prodce", "codes": [6]}, 400, "unknown API 'Prodce'"),
    ("POST", "/errors", {"api": "Produce", "codes": [6], "broker": 7}, 400, "errors push: no running broker 7"),
    ("POST", "/delay", {"broker": 7, "ms": 5}, 400, "delay: no running broker 7"),
    ("POST", "/clock/advance", {"seconds": -1}, 400, "clock advance: the clock only moves forward"),
    ("POST", "/move-leader", {"topic": "t", "partition": 0, "broker": 1}, 400, "move-leader t 0 1: "),
    ("POST", "/move-coordinator", {"group": "g", "broker": 7}, 400, "move-coordinator"),
    ("POST", "/brokers/7/stop", {}, 400, "stop: no broker 7"),
    ("GET", "/nowhere", None, 404, "no control at /nowhere"),
])
def test_refusals_name_what_is_at_fault(broker, method, path, body, status, message):
    got, answer = call(broker.control_url, method, path, body)
    assert got == status and message in answer["error"], answer


def test_the_cli_verbs(broker, capsys, unique):
    url = broker.control_url
    base = ["control", "--control-url", url]
    assert main([*base, "errors", "push", "FindCoordinator", "COORDINATOR_NOT_AVAILABLE,15", "--group", "g1"]) == 0
    assert "pushed FindCoordinator 15,15" in capsys.readouterr().out
    assert main([*base, "errors", "push", "11", "16", "--client-id", "c"]) == 0  # an API key
    assert "pushed JoinGroup 16" in capsys.readouterr().out
    assert main([*base, "errors", "clear"]) == 0
    assert main([*base, "errors", "list"]) == 0
    assert capsys.readouterr().out.strip() == "ok"
    with WireClient(broker.bootstrap) as client:
        client.request(request(10, 3, key="cli-group", key_type=0))
    assert main([*base, "requests", "--api", "FindCoordinator", "--json"]) == 0
    captured = json.loads(capsys.readouterr().out)["requests"]
    assert any(r["body"]["key"] == "cli-group" for r in captured)
    assert main([*base, "brokers"]) == 0
    assert f"{broker.host}:{broker.port}\tyes" in capsys.readouterr().out
    assert main([*base, "delay", "99", "5"]) == 1
    assert "minibroker control delay: delay: no running broker 99" in capsys.readouterr().err
    assert main([*base, "move-leader", "t", "0", "1"]) == 1
    assert main([*base, "clock", "advance", "1"]) == 0
    assert main(["control", "--control-url", "http://127.0.0.1:1", "brokers"]) == 1
    assert "cannot reach the control endpoint http://127.0.0.1:1" in capsys.readouterr().err


def test_serve_stops_and_starts_its_broker_on_the_same_port(tmp_path, unique):
    """`minibroker serve --control-listen`: stop N and start N (the node id) keep the port and the data."""
    proc, fields = spawn_broker(tmp_path / "data", "--control-listen", "127.0.0.1:0")
    try:
        url, bootstrap = fields["control"].rstrip("/"), fields["bootstrap.servers"]
        [entry] = call(url, "GET", "/brokers")[1]["brokers"]
        node = entry["node_id"]
        topic = unique("restart")
        with WireClient(bootstrap) as client:
            create_topic(client, topic)
            assert produced(client, topic, make_batch([(b"k", b"before")])).error_code == 0
        assert main(["control", "--control-url", url, "stop", str(node)]) == 0
        with pytest.raises(OSError):
            WireClient(bootstrap, timeout=5)
        assert call(url, "GET", "/brokers")[1]["brokers"][0]["running"] is False
        assert main(["control", "--control-url", url, "stop", str(node), "--kill"]) == 1
        assert main(["control", "--control-url", url, "start", str(node)]) == 0
        with WireClient(bootstrap) as client:
            after = produced(client, topic, make_batch([(b"k", b"after")]))
        assert (after.error_code, after.base_offset) == (0, 1)
        assert main(["control", "--control-url", url, "stop", str(node + 1)]) == 1
    finally:
        stop_process(proc)
