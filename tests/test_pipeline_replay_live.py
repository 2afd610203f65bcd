"""The strongest check of the pipeline: a live broker's own audit, replayed through the pipeline with
the broker's own settings, reproduces the broker's producer-id quota decisions exactly.

1. A broker with `audit.enable=true`, SASL users, and producer_ids_rate = 3 new PIDs per window of
   1 s for alice (set with AlterClientQuotas over SASL, as an operator would): the long-lived
   producer and two short-lived ones are admitted, the other short-lived ones rejected.
2. Real idempotent clients (confluent-kafka / librdkafka) authenticated as alice: one long-lived
   producer sending throughout (its PID stays known) and a string of short-lived ones (each a new
   PID), some of which the quota rejects; and bob, who has no quota.
3. The broker is stopped (the audit is flushed at close) and its data dir read by the pipeline, with
   the quota settings taken from the broker's own quota store (client-quotas.json).
4. Per Produce event (joined on the audit offset): the replay's `pid_new` equals the broker's; the
   batches the replay rejects are exactly those the broker refused; and each request's throttle time
   equals the broker's.
"""

from __future__ import annotations

import time

import pytest

from minibroker.config import BROKER_CONFIGS
from pipeline.cli import QUOTA_STORE_FILE
from pipeline.read import read_data_dir
from pipeline.replay import QuotaSettings, replay
from tests.test_pipeline import spark  # noqa: F401  (the module's SparkSession fixture)

WIRED = "audit.enable" in BROKER_CONFIGS
pytestmark = [
    pytest.mark.interop,
    pytest.mark.skipif(
        not WIRED,
        reason="waits for the broker wiring: the `audit.enable` config key, Broker.audit = "
        "minibroker.audit.AuditLog(self.logs, ...) when it is true, and audit.close(now) in Broker.close "
        "(the Produce handler already calls broker.audit.record_produce)",
    ),
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


def drive(bootstrap: str, topic: str) -> None:
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


def test_replaying_the_broker_audit_reproduces_its_pid_quota_decisions(spark, tmp_path):  # noqa: F811
    from confluent_kafka.admin import AdminClient, NewTopic

    from minibroker.admin_client import AdminClient as MiniAdmin
    from minibroker.testing import running_broker

    data_dir = tmp_path / "data"
    topic = "audited"
    with running_broker(
        data_dir, sasl_users=USERS, audit_enable="true",
        producer_id_quota_window_size_seconds=str(WINDOW_SIZE_S), producer_id_quota_cache_layer_count=str(LAYERS),
        # 89: librdkafka does not retry it, so each short-lived producer's fate is settled at once (with
        # the default, 19, they would retry into the late producer's window).
        producer_id_quota_error_code="89",
    ) as broker:
        with MiniAdmin(broker.sasl_bootstrap, sasl_mechanism="PLAIN", sasl_username="alice",
                       sasl_password=USERS["alice"]) as admin:
            response = admin.call(49, {
                "entries": [{"entity": [{"entity_type": "user", "entity_name": "alice"}],
                             "ops": [{"key": "producer_ids_rate", "value": RATE, "remove": False}]}],
                "validate_only": False,
            })
            assert [e.error_code for e in response.entries] == [0]
        admin = AdminClient({"bootstrap.servers": broker.sasl_bootstrap, **auth("alice")})
        for future in admin.create_topics([NewTopic(topic, 2, 1)]).values():
            future.result(timeout=30)
        drive(broker.sasl_bootstrap, topic)
    # The broker is closed: its audit is complete on disk.

    events = read_data_dir(spark, data_dir).cache()
    # The settings come from the broker's own quota store, as scripts/pipeline reads them.
    setting = QuotaSettings.from_quota_store(
        "broker's quotas", (data_dir / QUOTA_STORE_FILE).read_bytes(),
        pid_window_size_seconds=WINDOW_SIZE_S, pid_layer_count=LAYERS,
    )
    assert setting.user_producer_ids_rates == (("alice", RATE),) and setting.producer_ids_rate is None
    decisions = {r.seq: r for r in replay(events, [setting]).collect()}
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
    # Each request's throttle time (a request = one client's batches at one ts) is the broker's.
    requests: dict[tuple, list[int]] = {}
    for s in alice:
        requests.setdefault((audit[s].client_id, audit[s].ts), []).append(s)
    for seqs in requests.values():
        assert max(audit[s].throttle_time_ms for s in seqs) == max(decisions[s].pid_throttle_ms for s in seqs)
        if any(decisions[s].pid_throttle_ms for s in seqs):
            assert {audit[s].throttle_quota for s in seqs if audit[s].error_code} == {"producer_ids_rate"}
