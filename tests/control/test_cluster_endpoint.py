"""The control surface on several brokers in one process (running_cluster): the brokers share one
set of controls (a stack pushed without a broker is consumed wherever the request lands), and the
HTTP endpoint's cluster verbs (stop --kill, start, move-leader, shuffle-leaders, move-coordinator)
reach the cluster, its refusals named. Runs where the tree has running_cluster."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

from minibroker import testing
from minibroker.admin_client import AdminClient
from tests.support.clients import Confluent, Message

running_cluster = getattr(testing, "running_cluster", None)
pytestmark = pytest.mark.skipif(running_cluster is None, reason="needs several brokers in one process")


def call(url, method, path, body=None):
    data = json.dumps(body).encode() if body is not None else None
    try:
        with urllib.request.urlopen(urllib.request.Request(url + path, data=data, method=method), timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_the_cluster_verbs_over_http(tmp_path, unique):
    topic = unique("cluster-control")
    assert running_cluster is not None
    with running_cluster(brokers=3, data_dir=tmp_path / "data", control_listen="127.0.0.1:0",
                         default_replication_factor=3) as cluster:
        url = cluster.control_url
        brokers = call(url, "GET", "/brokers")[1]["brokers"]
        assert [b["node_id"] for b in brokers] == cluster.node_ids and all(b["running"] for b in brokers)
        with AdminClient(cluster.bootstrap.split(",")[0]) as admin:
            created = admin.call(19, {"topics": [{"name": topic, "num_partitions": 1, "replication_factor": 3,
                                                  "assignments": [], "configs": []}],
                                      "timeout": 30000, "validate_only": False}, version=7)
            assert created.topics[0].error_code == 0
        cluster.errors.push("Produce", ["NOT_LEADER_OR_FOLLOWER"] * 2, topic=topic)
        assert Confluent().produce(cluster.bootstrap, topic, [Message(0, b"k", b"v", ())]) == [0]
        produces = [r for r in cluster.requests(api="Produce") if r.body["topic_data"][0].get("name") == topic]
        assert [r.answered_by for r in produces] == ["error", "error", None]
        assert len({id(cluster.broker(n).control.plane) for n in cluster.node_ids}) == 1

        leader = cluster.leader(topic, 0)
        other = next(n for n in cluster.node_ids if n != leader)
        assert call(url, "POST", "/move-leader", {"topic": topic, "partition": 0, "broker": other}) == (200, {})
        assert cluster.leader(topic, 0) == other
        status, answer = call(url, "POST", "/move-leader", {"topic": topic, "partition": 7, "broker": other})
        assert status == 400 and answer["error"].startswith(f"move-leader {topic} 7 {other}: ")
        assert call(url, "POST", "/shuffle-leaders", {})[0] == 200
        moved = call(url, "POST", "/move-coordinator", {"group": "g", "broker": other})
        assert moved[0] == 200, moved
        assert call(url, "POST", f"/brokers/{other}/stop", {"kill": True})[0] == 200
        assert [b["running"] for b in call(url, "GET", "/brokers")[1]["brokers"] if b["node_id"] == other] == [False]
        assert call(url, "POST", f"/brokers/{other}/start", {})[0] == 200
        cluster.requests()  # a control call joins the restarted broker to the shared controls
        assert len({id(cluster.broker(n).control.plane) for n in cluster.node_ids}) == 1
