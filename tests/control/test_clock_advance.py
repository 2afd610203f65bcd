"""`advance` moves the broker's clock and what waits on it acts at once, over the wire: a classic
group member that stops heartbeating is removed at its session timeout, and an empty group's
committed offsets expire after offsets.retention.minutes (Kafka's 7 days); no test waits for them."""

from __future__ import annotations

import time

import pytest

from minibroker.testing import running_broker
from tests.support.wire import WireClient, create_topic, request


@pytest.fixture
def broker(tmp_path):
    with running_broker(tmp_path / "data") as running:
        yield running


def wait_for(condition, what, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{what} did not happen"
        time.sleep(0.05)


def describe(bootstrap, group):
    with WireClient(bootstrap) as client:  # a new connection: an advanced clock closes idle ones
        described = client.request(request(15, 5, groups=[group], include_authorized_operations=False)).groups[0]
    return described.group_state, [m.member_id for m in described.members]


def committed(bootstrap, group, topic):
    with WireClient(bootstrap) as client:
        response = client.request(request(9, 7, group_id=group, require_stable=False,
                                          topics=[{"name": topic, "partition_indexes": [0]}]))
    return response.topics[0].partitions[0].committed_offset


def join(client, group, member_id=""):
    return client.request(request(11, 5, group_id=group, session_timeout=10000, rebalance_timeout=10000,
                                  member_id=member_id, group_instance_id=None, protocol_type="consumer",
                                  protocols=[{"name": "range", "metadata": b""}]))


def test_a_silent_member_leaves_at_its_session_timeout(broker, unique):
    group = unique("session")
    with WireClient(broker.bootstrap) as client:
        first = join(client, group)  # MEMBER_ID_REQUIRED (KIP-394), then the join with that id
        joined = join(client, group, first.member_id)
        assert joined.error_code == 0
        synced = client.request(request(14, 3, group_id=group, generation_id=joined.generation_id,
                                        member_id=joined.member_id, group_instance_id=None,
                                        assignments=[{"member_id": joined.member_id, "assignment": b""}]))
        assert synced.error_code == 0
    assert describe(broker.bootstrap, group) == ("Stable", [joined.member_id])
    broker.advance(seconds=11)  # past session.timeout.ms, with no heartbeat
    wait_for(lambda: describe(broker.bootstrap, group) == ("Empty", []), "the session timeout")


def test_an_empty_groups_offsets_expire_after_the_retention(broker, unique):
    group, topic = unique("retained-offsets"), unique("t")
    with WireClient(broker.bootstrap) as client:
        create_topic(client, topic)
        response = client.request(request(8, 8, group_id=group, generation_id_or_member_epoch=-1, member_id="",
                                          group_instance_id=None, topics=[{"name": topic, "partitions": [
                                              {"partition_index": 0, "committed_offset": 42,
                                               "committed_leader_epoch": -1, "committed_metadata": None}]}]))
        assert response.topics[0].partitions[0].error_code == 0
    assert committed(broker.bootstrap, group, topic) == 42
    broker.advance(days=6)
    time.sleep(0.2)
    assert committed(broker.bootstrap, group, topic) == 42  # within the retention
    broker.advance(days=1, minutes=11)  # offsets.retention.minutes, then its check interval
    wait_for(lambda: committed(broker.bootstrap, group, topic) == -1, "offsets retention")
