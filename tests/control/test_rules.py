"""Error stacks, hooks, delays, capture and closing connections (minibroker.control) on a running
broker, over the wire: what each control makes the broker answer, and that today's `error` fault
rules now answer any API the same way."""

from __future__ import annotations

import select

import pytest

from minibroker.control import Answer, ControlError, Delay
from minibroker.faults import FaultRule
from minibroker.testing import running_broker
from tests.support.batches import make_batch
from tests.support.wire import WireClient, create_topic, produced, request

NOT_LEADER, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR = 6, 15, 16


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with running_broker(tmp_path_factory.mktemp("control") / "data") as running:
        yield running


@pytest.fixture(autouse=True)
def clean(broker):
    yield
    broker.errors.clear()
    for hook in list(broker.broker.control.plane.hooks):
        broker.unhook(hook)
    broker.delay(broker.broker.node_id, 0)
    broker.broker.faults.clear()


def find_coordinator(client, group):
    return client.request(request(10, 3, key=group, key_type=0))


def list_offsets(client, topic, partition=0):
    return client.request(request(2, 7, replica_id=-1, isolation_level=0, topics=[
        {"name": topic, "partitions": [{"partition_index": partition, "current_leader_epoch": -1,
                                        "timestamp": -1}]}]))


def test_a_stack_answers_the_next_requests_in_order_then_lets_them_through(broker, unique):
    topic = unique("stack")
    with WireClient(broker.bootstrap) as client:
        create_topic(client, topic)
        broker.errors.push("Produce", ["NOT_LEADER_OR_FOLLOWER", 0, 58])
        batch = make_batch([(b"k", b"v")])
        codes = [produced(client, topic, batch).error_code for _ in range(4)]
        assert codes == [NOT_LEADER, 0, 58, 0]
        assert broker.errors.pending() == []
    # Two appended (the 0 let one through), two answered instead of handled.
    assert broker.broker.logs.log(topic, 0).log_end_offset == 2


def test_filters_pick_the_requests_by_topic_partition_group_and_client(broker, unique):
    topic, other, group = unique("picked"), unique("spared"), unique("g")
    with WireClient(broker.bootstrap) as client:
        create_topic(client, topic, partitions=2)
        create_topic(client, other)
        broker.errors.push("ListOffsets", NOT_LEADER, topic=topic, partition=1)
        broker.errors.push("FindCoordinator", COORDINATOR_NOT_AVAILABLE, group=group)
        broker.errors.push("FindCoordinator", NOT_COORDINATOR, client_id="someone-else")
        assert list_offsets(client, other).topics[0].partitions[0].error_code == 0
        assert list_offsets(client, topic, 0).topics[0].partitions[0].error_code == 0
        answered = list_offsets(client, topic, 1).topics[0].partitions[0]
        assert (answered.partition_index, answered.error_code) == (1, NOT_LEADER)
        assert find_coordinator(client, "another-group").error_code == 0
        assert find_coordinator(client, group).error_code == COORDINATOR_NOT_AVAILABLE
        assert find_coordinator(client, group).error_code == 0
    assert [s["client_id"] for s in broker.errors.pending()] == ["someone-else"]


def test_any_api_and_its_top_level_error(broker, unique):
    group = unique("jg")
    broker.errors.push("join_group", [COORDINATOR_NOT_AVAILABLE])  # snake case, as the handlers' names
    with WireClient(broker.bootstrap) as client:
        response = client.request(request(11, 5, group_id=group, session_timeout=10000, rebalance_timeout=10000,
                                          member_id="", group_instance_id=None, protocol_type="consumer",
                                          protocols=[{"name": "range", "metadata": b""}]))
    assert (response.error_code, response.generation_id, response.members) == (COORDINATOR_NOT_AVAILABLE, -1, ())


def test_unknown_api_code_and_partition_without_topic_are_refused_by_name(broker):
    with pytest.raises(ControlError, match="unknown API 'Produc'"):
        broker.errors.push("Produc", 6)
    with pytest.raises(ControlError, match="unknown error code 'NOT_A_CODE'"):
        broker.errors.push("Produce", "NOT_A_CODE")
    with pytest.raises(ControlError, match="errors push Fetch: a partition needs its topic"):
        broker.errors.push("Fetch", 6, partition=0)
    with pytest.raises(ControlError, match="delay: no running broker 99"):
        broker.delay(99, 10)


def test_captured_requests_are_plain_values(broker, unique):
    group = unique("cap")
    broker.clear_requests()
    with WireClient(broker.bootstrap) as client:
        find_coordinator(client, group)
    [captured] = broker.requests(api="FindCoordinator", client_id="wire-test")
    assert (captured.api, captured.version, captured.broker) == ("FindCoordinator", 3, broker.broker.node_id)
    assert captured.body == {"key": group, "key_type": 0}
    assert broker.requests(api=10) == [captured]
    assert captured.to_json()["body"]["key"] == group


def test_a_hook_answers_delays_or_lets_through(broker, unique):
    group = unique("hook")
    seen = []

    def decide(req):
        seen.append(req.request.key)
        return Answer(error="NOT_COORDINATOR") if req.request.key == group else None

    broker.hook(decide, api="FindCoordinator")
    with WireClient(broker.bootstrap) as client:
        assert find_coordinator(client, "other").error_code == 0
        assert find_coordinator(client, group).error_code == NOT_COORDINATOR
        assert find_coordinator(client, group).error_code == NOT_COORDINATOR
    assert seen == ["other", group, group]


def test_a_delay_holds_the_request_on_the_broker_clock(broker, unique):
    """An hour's delay (a hook's, then the broker's round trip): nothing is answered until the
    broker's clock is moved an hour on."""
    group = unique("held")
    for arm in (lambda: broker.hook(lambda r: Delay(3_600_000), api="FindCoordinator", once=True),
                lambda: broker.delay(broker.broker.node_id, 3_600_000)):
        arm()
        with WireClient(broker.bootstrap) as client:
            client.correlation_id += 1
            from tests.support.wire import encode_request

            client.send_raw(encode_request(request(10, 3, key=group, key_type=0), client.correlation_id))
            readable, _, _ = select.select([client.sock], [], [], 0.3)
            assert not readable, "answered before the delay was over"
            broker.advance(hours=1)
            assert client.recv_frame()  # answered at once
        broker.delay(broker.broker.node_id, 0)


def test_close_connections_on_demand(broker):
    with WireClient(broker.bootstrap) as a, WireClient(broker.bootstrap) as b:
        find_coordinator(a, "x")
        find_coordinator(b, "x")
        assert broker.close_connections() >= 2
        assert a.is_closed_by_peer() and b.is_closed_by_peer()


def test_the_error_fault_rule_answers_any_api(broker, unique):
    """`fault.injection`'s error action, once Produce and Metadata only, is the stacks' answer."""
    topic = unique("fault")
    with WireClient(broker.bootstrap) as client:
        create_topic(client, topic)
        rule = broker.broker.faults.add(FaultRule("ListOffsets", "error", error_code=NOT_LEADER, every=2, limit=1))
        try:
            codes = [list_offsets(client, topic).topics[0].partitions[0].error_code for _ in range(3)]
        finally:
            broker.broker.faults.clear()
    assert codes == [0, NOT_LEADER, 0]
    assert rule.fired == 1


def test_drop_and_close_the_next_requests(broker):
    broker.drop("FindCoordinator")
    with WireClient(broker.bootstrap, timeout=5) as client:
        from tests.support.wire import encode_request

        client.send_raw(encode_request(request(10, 3, key="x", key_type=0), 1))
        readable, _, _ = select.select([client.sock], [], [], 0.3)
        assert not readable  # handled, never answered: the connection went silent
    broker.drop("FindCoordinator", close=True)
    with WireClient(broker.bootstrap) as client:
        client.send_raw(encode_request(request(10, 3, key="x", key_type=0), 1))
        assert client.is_closed_by_peer()
    with WireClient(broker.bootstrap) as client:  # both used up
        assert find_coordinator(client, "x").error_code == 0
    with pytest.raises(ControlError, match="drop FindCoordinator: no running broker 42"):
        broker.drop("find_coordinator", broker=42)


def test_a_hook_that_raises_lets_the_request_through(broker):
    def broken(req):
        raise AssertionError("the test's own bug")

    hook = broker.hook(broken, api="FindCoordinator")
    with WireClient(broker.bootstrap) as client:
        assert find_coordinator(client, "x").error_code == 0
    assert (hook.calls, hook.errors) == (1, 1)
