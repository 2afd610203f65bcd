"""The strongest check of the pipeline: a live broker's own audit, read over the Kafka protocol and
replayed with the quota configuration the broker recorded in it, reproduces the broker's
producer-id quota decisions exactly, also across a quota change in the middle.

1. A broker with `audit.enable=true`, SASL users, and producer_ids_rate = 3 new PIDs per window of
   1 s for alice (set with AlterClientQuotas over SASL, as an operator would): the long-lived
   producer and two short-lived ones are admitted, the other short-lived ones rejected.
2. Real idempotent clients (confluent-kafka / librdkafka) authenticated as alice: one long-lived
   producer sending throughout (its PID stays known) and a string of short-lived ones (each a new
   PID), some of which the quota rejects; and bob, who has no quota. Then alice's quota is raised to
   100 and a second storm is admitted whole (under 3 it would not have been).
3. While the broker still runs, the pipeline reads its audit over SASL (consumer settings as
   `--consumer-property` passes them) in several offset ranges, and takes the quotas and window
   settings from the audit's own quota-configuration events: no setting is given by hand.
4. Per Produce event (joined on the audit offset): the replay's `pid_new` equals the broker's; the
   batches the replay rejects are exactly those the broker refused; each request's throttle time
   equals the broker's. The aggregated replay, with alice's history split by time into chunks that
   carry the quota state over, counts no event that differs; a replay that ignores the recorded
   change does.
"""

from __future__ import annotations

import time

import pytest

from minibroker.config import BROKER_CONFIGS
from minibroker.pipeline.model import StateMemoryModel
from minibroker.pipeline.read import decision_events, quota_records, read_kafka
from minibroker.pipeline.replay import QuotaSettings, replay
from minibroker.pipeline.timeline import QuotaTimeline
from minibroker.pipeline.whatif import totals_table, whatif

WIRED = "audit.enable" in BROKER_CONFIGS
pytestmark = [
    pytest.mark.interop,
    pytest.mark.skipif(not WIRED, reason="needs the broker's audit.enable"),
]

USERS = {"alice": "alice-secret", "bob": "bob-secret"}
RATE = 3.0
WINDOW_SIZE_S = 1
LAYERS = 4
SHORT_LIVED = 6


def auth(user: str) -> dict:
    return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.username": user,
            "sasl.password": USERS[user]}


def idempotent_producer(bootstrap: str, user: str, client_id: str):
    from confluent_kafka import Producer

    return Producer({"bootstrap.servers": bootstrap, **auth(user), "client.id": client_id,
                     "enable.idempotence": True, "linger.ms": 5, "message.timeout.ms": 4000})


def send(producer, topic: str, n: int) -> None:
    for i in range(n):
        producer.produce(topic, b"v%d" % i, partition=i % 2)
    producer.flush(10)


def drive(bootstrap: str, topic: str, alter) -> None:
    long_lived = idempotent_producer(bootstrap, "alice", "alice-long-lived")
    send(long_lived, topic, 4)
    # Short-lived producers all at once: a storm of new PIDs, more than the burst admits.
    shorts = [idempotent_producer(bootstrap, "alice", f"alice-short-{k}") for k in range(SHORT_LIVED)]
    for short in shorts:
        for i in range(3):
            short.produce(topic, b"s%d" % i, partition=i % 2)
    for short in shorts:
        short.flush(10)
    send(long_lived, topic, 2)
    bob = idempotent_producer(bootstrap, "bob", "bob")
    send(bob, topic, 4)
    time.sleep(1.6)  # past the window plus one layer: alice's next new PID is admitted again
    late = idempotent_producer(bootstrap, "alice", "alice-late")
    send(late, topic, 2)
    send(long_lived, topic, 2)
    alter(RAISED)  # the operator raises alice's quota: the next storm is admitted whole
    after = [idempotent_producer(bootstrap, "alice", f"alice-after-{k}") for k in range(SHORT_LIVED)]
    for producer in after:
        producer.produce(topic, b"a", partition=0)
    for producer in after:
        producer.flush(10)


RAISED = 100.0


def test_replaying_the_broker_audit_reproduces_its_pid_quota_decisions(spark, tmp_path):
    from confluent_kafka.admin import AdminClient, NewTopic

    from minibroker.admin_client import AdminClient as MiniAdmin
    from minibroker.testing import running_broker

    topic = "audited"
    with running_broker(
        tmp_path / "data", sasl_users=USERS, audit_enable="true", audit_flush_interval_ms="100",
        producer_id_quota_window_size_seconds=str(WINDOW_SIZE_S), producer_id_quota_cache_layer_count=str(LAYERS),
        # 89: librdkafka does not retry it, so each short-lived producer's fate is settled at once (with
        # the default, 19, they would retry into the late producer's window).
        producer_id_quota_error_code="89",
    ) as broker:
        def alter(rate: float) -> None:
            with MiniAdmin(broker.sasl_bootstrap, sasl_mechanism="PLAIN", sasl_username="alice",
                           sasl_password=USERS["alice"]) as admin:
                response = admin.call(49, {
                    "entries": [{"entity": [{"entity_type": "user", "entity_name": "alice"}],
                                 "ops": [{"key": "producer_ids_rate", "value": rate, "remove": False}]}],
                    "validate_only": False,
                })
                assert [e.error_code for e in response.entries] == [0]

        alter(RATE)
        admin = AdminClient({"bootstrap.servers": broker.sasl_bootstrap, **auth("alice")})
        for future in admin.create_topics([NewTopic(topic, 2, 1)]).values():
            future.result(timeout=30)
        drive(broker.sasl_bootstrap, topic, alter)
        broker.in_broker(lambda: broker.broker.audit.flush(0))
        # The broker still runs: its audit, over the wire, in ranges of 10 records.
        parsed = read_kafka(spark, broker.sasl_bootstrap, consumer_config={
            "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.username": "bob",
            "sasl.password": USERS["bob"]}, max_records_per_partition=10).cache()
        assert parsed.rdd.getNumPartitions() > 3
        events = decision_events(parsed).cache()
        timeline = QuotaTimeline.from_records(quota_records(parsed))

    # The quotas and the window, as the broker recorded them: no setting given by hand. Each change
    # lists what it changed (alice never had a producer_byte_rate: nothing of it was removed).
    assert timeline.complete and [s.quotas for s in timeline.changes()] == [
        (("alice", "producer_ids_rate", RATE),),
        (("alice", "producer_ids_rate", RAISED),),
    ]
    assert timeline.first_windows().pid_window_size_seconds == WINDOW_SIZE_S
    setting = QuotaSettings("broker's quotas", recorded=True)
    decisions = {r.seq: r for r in replay(events, [setting], timeline).collect()}
    audit = {r.seq: r for r in events.where("api_key = 0 AND producer_id >= 0").collect()}
    assert set(audit) <= set(decisions) and audit

    alice = [seq for seq, e in audit.items() if e.principal == "User:alice"]
    bob = [seq for seq, e in audit.items() if e.principal == "User:bob"]
    assert alice and bob

    # pid_new, event for event (bob has no quota: never tracked, null on both sides).
    assert {s: audit[s].pid_new for s in audit} == {s: decisions[s].pid_new for s in audit}
    assert all(audit[s].pid_new is None for s in bob)
    # The batches the broker refused for its producer-id quota are exactly those the replay rejects.
    broker_rejected = {s for s in alice if audit[s].error_code != 0}
    replay_rejected = {s for s in alice if decisions[s].pid_throttle_ms > 0}
    assert broker_rejected == replay_rejected
    assert replay_rejected, "the run should have driven alice over her quota"
    assert any(audit[s].pid_new is False for s in alice), "the long-lived producer's PID stays known"
    late = [s for s in alice if audit[s].client_id == "alice-late"]
    assert late and audit[min(late)].pid_new and audit[min(late)].error_code == 0, "a token came back"
    after = [s for s in alice if audit[s].client_id.startswith("alice-after-")]
    assert len(after) == SHORT_LIVED and all(audit[s].error_code == 0 for s in after), "the raise applied"
    # Each request's throttle time (a request = one client's batches at one ts) is the broker's.
    requests: dict[tuple, list[int]] = {}
    for s in alice:
        requests.setdefault((audit[s].client_id, audit[s].ts), []).append(s)
    for seqs in requests.values():
        assert max(audit[s].throttle_time_ms for s in seqs) == max(decisions[s].pid_throttle_ms for s in seqs)
        if any(decisions[s].pid_throttle_ms for s in seqs):
            assert {audit[s].throttle_quota for s in seqs if audit[s].error_code} == {"producer_ids_rate"}

    # The report's replay: alice split by time (chunks of 8 events, state carried over) still
    # reproduces every decision; ignoring the recorded raise does not.
    static = QuotaSettings("alice=3 throughout", user_producer_ids_rates=(("alice", RATE),))
    plan: dict = {}
    totals = totals_table(whatif(events, [setting, static], 1000, StateMemoryModel(), timeline=timeline,
                                 chunk_events=8, plan=plan)).toPandas().set_index(["setting", "principal"])
    assert plan["chunks"]["User:alice"] > 2 and plan["carries"] > 0
    assert totals.loc[("broker's quotas", "User:alice"), "pid_rejected_batches"] == len(broker_rejected)
    assert totals["mismatched_events"].sum() == 0  # only "broker's quotas" is compared, and it agrees
    assert totals.loc[("alice=3 throughout", "User:alice"), "pid_rejected_batches"] > len(broker_rejected)
    events.unpersist()
    parsed.unpersist()
