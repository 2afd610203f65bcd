"""The controller-mutation quota (KIP-599, `controller_mutation_rate`): the token-bucket arithmetic
with explicit `now`, the three handlers in the broker shell on trio's MockClock, then real clients.

Kafka's rule (StrictControllerMutationQuota, Sensor.checkQuotas for a TokenBucket): a strict quota
refuses a topic only while the bucket is already below zero; otherwise the topic is admitted and its
partitions are taken whatever their number, so the bucket may go negative and the topics after it
are refused. Burst B = quota.window.num * quota.window.size.seconds * rate (11 * 1 s * rate by
default); the throttle time is round(-tokens / rate * 1000), less the time since it was measured.
"""

from __future__ import annotations

import datetime

import pytest


from minibroker.quotas.callback import DEFAULT, ClientQuotaEntity
from minibroker.quotas.client_quota import ControllerMutationQuotaManager
from tests.support.broker_shell import decode, new_broker, set_quota, simple_frame
from tests.support.clock import run

ANY = ClientQuotaEntity.of(user=DEFAULT, client_id=DEFAULT)
THROTTLED = 89


def manager(rate: float, entity: ClientQuotaEntity = ANY) -> ControllerMutationQuotaManager:
    m = ControllerMutationQuotaManager()
    m.update_quota(entity, rate)
    return m


def test_strict_admits_while_the_bucket_is_not_negative_then_refuses():
    """Rate 10/s: B = 110. A 100-partition topic leaves 10; a 30-partition topic is still admitted
    (10 >= 0) and takes the bucket to -20; the next topic, of any size, is refused with
    20 / 10 s = 2000 ms, nothing recorded; at +2 s the bucket is back at 0 and admits again."""
    m = manager(10)
    quota = m.new_quota_for("alice", "app", strict=True, now_ms=0)
    assert quota.record(100, 0) and quota.record(30, 0)
    assert not quota.record(1, 0) and quota.is_exceeded
    assert quota.throttle_time_ms(0) == 2000
    assert quota.throttle_time_ms(500) == 1500  # Kafka deducts the time since the violation
    halfway = m.new_quota_for("alice", "app", True, 1000)
    assert not halfway.record(1, 1000) and halfway.throttle_time_ms(1000) == 1000  # -10 left
    later = m.new_quota_for("alice", "app", True, 2000)
    assert later.record(1, 2000) and later.throttle_time_ms(2000) == 0
    # Metrics: the rate of what was admitted, the balance (0 + ... - 1 = -1).
    snapshot = {name: value for group, name, _, value in m.metrics_snapshot(2000)}
    assert snapshot["tokens"] == -1.0 and snapshot["mutation-rate"] > 0


def test_permissive_always_admits_and_throttles_by_the_deficit():
    m = manager(10)
    quota = m.new_quota_for("alice", "app", strict=False, now_ms=0)
    assert quota.record(100, 0) and quota.throttle_time_ms(0) == 0  # 110 -> 10
    assert quota.record(60, 0) and quota.record(5, 0)  # 10 -> -50 -> -55: still admitted
    assert quota.throttle_time_ms(0) == 5500 and not quota.is_exceeded


def test_burst_follows_the_quota_window_settings():
    from minibroker.quotas.rate import MetricConfig

    m = ControllerMutationQuotaManager(metric_config=MetricConfig(samples=2, window_ms=3000))
    m.update_quota(ANY, 2.0)  # B = 2 * 3 s * 2 = 12
    quota = m.new_quota_for("u", "c", True, 0)
    assert quota.record(12, 0) and quota.record(3, 0) and not quota.record(1, 0)
    assert quota.throttle_time_ms(0) == 1500


def test_precedence_and_unbounded_when_off():
    """Off until a controller_mutation_rate exists anywhere (no sensor, nothing recorded); then
    Kafka's <user, client-id> precedence picks the bucket: alice/app's own 1/s beats the default."""
    m = ControllerMutationQuotaManager()
    assert not m.new_quota_for("alice", "app", True, 0).bounded
    m.update_quota(ANY, 100.0)
    m.update_quota(ClientQuotaEntity.of(user="alice", client_id="app"), 1.0)
    alice = m.new_quota_for("alice", "app", True, 0)
    assert alice.record(11, 0) and alice.record(1, 0) and not alice.record(1, 0)  # B = 11
    bob = m.new_quota_for("bob", "app", True, 0)
    assert bob.record(1100, 0) and bob.record(1, 0)  # B = 1100, shared default bucket
    assert m.quota_limit("alice", "other") == 100.0
    assert m.record_and_get_throttle_time_ms("alice", "app", 1, 0) == 1000  # Kafka's manager-level check


# ---- the shell, on MockClock ----------------------------------------------------------------------


def _create_frame(version: int, client_id: str, topics: list[tuple[str, int]], validate_only=False) -> bytes:
    return simple_frame(19, version, client_id, timeout=datetime.timedelta(seconds=5), validate_only=validate_only,
                        topics=[{"name": n, "num_partitions": p, "replication_factor": 1, "assignments": [],
                                 "configs": []} for n, p in topics])


def test_handlers_strict_and_permissive_on_mock_clock(tmp_path):
    """controller_mutation_rate=1 on the client id (B = 11). CreateTopics v7 of 4 topics x 4
    partitions: 11 -> 7 -> 3 -> -1 admitted, the fourth refused with 89 and 1000 ms; the connection
    is muted for it. 500 ms later CreatePartitions v3 (strict) is refused with 500 ms; at +1 s
    DeleteTopics v5 deletes a 4-partition topic (0 -> -4, 4000 ms). CreateTopics v5 (permissive)
    then creates its topic anyway and throttles 4000 + 2000 = 6000 ms."""

    async def main():
        import trio

        broker = new_broker(tmp_path)
        from minibroker.broker import Connection

        set_quota(broker, [("client-id", "ops")], "controller_mutation_rate", 1.0)
        conn = Connection("test")
        response = await broker.handle_frame(_create_frame(7, "ops", [(f"t{i}", 4) for i in range(4)]), conn)
        body = decode(response.data, 19, 7)
        assert [t.error_code for t in body.topics] == [0, 0, 0, THROTTLED]
        assert body.topics[3].error_message == "The throttling quota has been exceeded."
        assert body.throttle_time == datetime.timedelta(milliseconds=1000) and response.throttle_ms == 1000
        assert broker.logs.topic("t3") is None
        await trio.sleep(0.5)
        grow = simple_frame(37, 3, "ops", timeout=datetime.timedelta(seconds=5), validate_only=False,
                            topics=[{"name": "t0", "count": 6, "assignments": None}])
        response = await broker.handle_frame(grow, conn)
        body = decode(response.data, 37, 3)
        assert [r.error_code for r in body.results] == [THROTTLED] and response.throttle_ms == 500
        assert broker.logs.topic("t0").num_partitions == 4
        await trio.sleep(0.5)
        delete = simple_frame(20, 5, "ops", timeout=datetime.timedelta(seconds=5), topic_names=["t1", "t2"])
        body = decode((await broker.handle_frame(delete, conn)).data, 20, 5)
        assert [r.error_code for r in body.responses] == [0, THROTTLED]  # 0 -> -4, then refused
        response = await broker.handle_frame(_create_frame(5, "ops", [("old", 2)]), conn)
        body = decode(response.data, 19, 5)
        assert [t.error_code for t in body.topics] == [0] and broker.logs.topic("old") is not None
        assert response.throttle_ms == 6000  # -4 - 2 = -6 tokens at 1/s
        # The throttle-time metric of the ControllerMutation group saw the throttles.
        names = {name for _, name, _, _ in broker.quotas.controller_mutation.metrics_snapshot(0)}
        assert names == {"mutation-rate", "tokens", "throttle-time"}
        broker.close()

    run(main)


# ---- real clients ---------------------------------------------------------------------------------


def test_java_admin_gets_throttling_quota_exceeded_with_the_throttle_time(java, broker, unique):
    """Java's Admin (CreateTopics v7, retryOnQuotaViolation=false) creating 8 topics x 2 partitions
    at controller_mutation_rate=1 on its client id: 6 fit (11 -> -1), the last two fail with
    ThrottlingQuotaExceededException whose throttle time is the response's: at most the 1000 ms
    a deficit of 1 token at 1/s takes, less what elapsed in the broker."""
    prefix = unique("jq")
    out = java.run(["alter-quota", broker.bootstrap, "client-id", "mb-java-admin", "controller_mutation_rate", 1],
                   ["create-topics-once", broker.bootstrap, prefix, 8, 2])
    results = {line["topic"]: line for line in out if line["type"] == "topic-created"}
    failed = sorted(t for t, r in results.items() if r["error"] is not None)
    assert failed == [f"{prefix}-6", f"{prefix}-7"]
    for topic in failed:
        assert results[topic]["error"] == "ThrottlingQuotaExceededException"
        assert 0 < results[topic]["throttle_time_ms"] <= 1000
    assert broker.in_broker(lambda: broker.broker.logs.topic(f"{prefix}-5") is not None)


def test_kafka_python_admin_sees_the_error_code(broker, unique):
    """kafka-python's admin sends CreateTopics v7: the same per-topic code 89 as Java's, which it
    raises as ThrottlingQuotaExceededError; the topics before it were created."""
    from kafka.admin import KafkaAdminClient, NewTopic
    from kafka.errors import ThrottlingQuotaExceededError

    broker.in_broker(lambda: broker.broker.quotas.alter(
        [([("client-id", None)], [("controller_mutation_rate", 1.0, False)])], False))
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, client_id=unique("kp"))
    names = [unique("kpt") for _ in range(3)]
    try:
        with pytest.raises(ThrottlingQuotaExceededError) as raised:
            admin.create_topics([NewTopic(n, 6, 1) for n in names])  # 11 -> 5 -> -1 -> refused
    finally:
        admin.close()
    assert raised.value.errno == THROTTLED
    assert [broker.in_broker(lambda n=n: broker.broker.logs.topic(n) is not None) for n in names] == [True, True, False]


def test_confluent_admin_is_throttled_permissively(broker, unique):
    """librdkafka sends CreateTopics v4 and DeleteTopics v1, older than KIP-599's strict versions:
    as with Kafka every topic is created (and deleted), and the response's throttle time, which
    librdkafka reports through throttle_cb, is the bucket's deficit."""
    from confluent_kafka.admin import AdminClient, NewTopic

    broker.in_broker(lambda: broker.broker.quotas.alter(
        [([("client-id", None)], [("controller_mutation_rate", 1.0, False)])], False))
    throttles: list[int] = []
    admin = AdminClient({"bootstrap.servers": broker.bootstrap, "client.id": unique("ck"),
                         "throttle_cb": lambda event: throttles.append(event.throttle_time)})
    names = [unique("ckt") for _ in range(4)]
    for future in admin.create_topics([NewTopic(n, 4, 1) for n in names], operation_timeout=10).values():
        future.result()  # no error: permissive
    for future in admin.delete_topics(names[:1], operation_timeout=10).values():
        future.result()
    admin.poll(1.0)
    assert all(broker.in_broker(lambda n=n: broker.broker.logs.topic(n) is not None) for n in names[1:])
    # 11 - 16 = -5 tokens: a throttle of at most 5 s, then -9: at most 9 s (less the time elapsed).
    assert throttles and 0 < throttles[0] <= 5.0 and max(throttles) <= 9.0
