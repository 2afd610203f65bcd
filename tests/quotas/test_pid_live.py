"""The producer-id quota (KIP-936) in a live broker, with real clients and real restarts.

- KIP-936's example, scaled to a short window: with producer_ids_rate = 100 per window, 100 fresh
  producers are admitted, the 101st (a real client of each library) is throttled with the default
  `producer.id.quota.error.code` and a throttle time, and its retry after the throttle is admitted
  once a slot frees: every record stored exactly once (docs/clients.md's table says what each client does
  with each candidate code; scripts/pid_quota_client_reactions measures it).
- Over SASL principals: alice's new producer ids beyond her rate are rejected before anything is
  appended (no log data, no producer state), known ones keep producing, bob (no quota) is untouched.
- A long-lived producer is never throttled across restarts (kill -9 and clean), even on a partition
  where it never produced before, while its user is over the quota: producer state, recovered from
  the log and snapshots, is what makes an id known.
"""

import os
import signal
import subprocess
import sys

import pytest

from minibroker.admin_client import AdminClient
from minibroker.protocol.entities import to_ms
from minibroker.protocol.records import encode_batch
from tests.support.clients import ALL, KafkaPython, Message
from tests.support.wire import create_topics

pytestmark = pytest.mark.interop

USERS = {"alice": "alice-secret", "bob": "bob-secret"}
DEFAULT_CODE = 19  # NOT_ENOUGH_REPLICAS: retried by every client measured


def client_for(bootstrap, user=None):
    if user is None:
        return AdminClient(bootstrap)
    return AdminClient(bootstrap, sasl_mechanism="PLAIN", sasl_username=user, sasl_password=USERS[user])


def set_rate(bootstrap, user, rate):
    with AdminClient(bootstrap) as admin:
        response = admin.call(49, {"entries": [{"entity": [{"entity_type": "user", "entity_name": user}],
                                                "ops": [{"key": "producer_ids_rate", "value": float(rate), "remove": False}]}],
                                   "validate_only": False})
        assert response.entries[0].error_code == 0, response.entries[0].error_message



def init_pid(c):
    init = c.call(22, {"transactional_id": None, "transaction_timeout": 60000, "producer_id": -1, "producer_epoch": -1})
    assert init.error_code == 0
    return init.producer_id


def send(c, topic, pid, sequence=0, partition=0, value=b"v"):
    """One batch of one record from producer `pid`: (error code, throttle ms)."""
    batch = encode_batch([(b"k", value)], 1_700_000_000_000, producer_id=pid, producer_epoch=0, base_sequence=sequence)
    response = c.call(0, {"transactional_id": None, "acks": -1, "timeout": 5000,
                          "topic_data": [{"name": topic, "partition_data": [{"index": partition, "records": batch}]}]},
                      version=9)
    return int(response.responses[0].partition_responses[0].error_code), to_ms(response.throttle_time)


def fresh_producer_sends(bootstrap, topic, user=None, partition=0):
    """A new idempotent producer (own connection, own PID) sends one record: (error, throttle, pid)."""
    with client_for(bootstrap, user) as c:
        pid = init_pid(c)
        return (*send(c, topic, pid, partition=partition), pid)


# -- KIP-936's example -------------------------------------------------------------------------------

# 5 s in slots of 1 s: the 101st producer must come within 5 s of the first admission (slow machines
# included), and then waits at most 6 s.
KIP_WINDOW = {"producer_id_quota_window_size_seconds": "5", "producer_id_quota_cache_layer_count": "5"}
CONFIG = {
    "kafka-python": {"request_timeout_ms": 20000},
    "confluent-kafka": {"message.timeout.ms": 30000},
    "aiokafka": {"request_timeout_ms": 20000},
}


@pytest.mark.parametrize("client", ALL, ids=lambda c: c.name)
def test_the_seeds_example_the_101st_new_producer_waits_for_a_slot(client, unique, tmp_path):
    """"User-A has producer_ids_rate 100 PID per 1hr ... the leader will only store 100 PIDs in 1
    hour and throttle any unseen PID", with a 5 s window: 100 fresh producers (crash-looping ones, on
    the raw wire) are admitted; the 101st, a real idempotent producer, is throttled with the default
    error code, retries after the throttle, is admitted once the first slot frees, and its records
    are stored exactly once, in order."""
    from minibroker.testing import running_broker

    topic = unique("kip936")
    with running_broker(tmp_path / "data", **KIP_WINDOW) as broker:
        create_topics(broker.bootstrap, [topic])
        set_rate(broker.bootstrap, "ANONYMOUS", 100)  # PLAINTEXT clients are User:ANONYMOUS
        quota = broker.broker.pid_quota
        with AdminClient(broker.bootstrap) as c:
            for _ in range(100):
                assert send(c, topic, init_pid(c)) == (0, 0)
            code, throttle = send(c, topic, init_pid(c))  # the 101st fresh id, on the wire
        assert code == DEFAULT_CODE and 0 < throttle <= 6000  # at most the window plus one layer
        assert quota.admitted_total == 100 and quota.rejected_total == 1
        log = broker.broker.logs.log(topic, 0)
        assert log.log_end_offset == 100 and broker.broker.producer_states.entry_count == 100

        messages = [Message(0, b"k", b"record-%d" % i, ()) for i in range(5)]
        client.produce(broker.bootstrap, topic, messages, **CONFIG[client.name])
        assert quota.rejected_total >= 2, "the real client's new producer id was never throttled"
        assert quota.admitted_total == 101  # admitted once a slot freed
        values = [r[3] for r in client.consume(broker.bootstrap, topic, 1, 105) if r[1] >= 100]
        assert values == [m.value for m in messages]


# -- over SASL: whose ids are limited, and what is not stored ---------------------------------------------


def test_new_pids_beyond_the_rate_are_rejected_known_ones_and_other_users_are_not(unique, tmp_path):
    from minibroker.testing import running_broker

    topic = unique("pidq")
    with running_broker(tmp_path / "data", sasl_users=USERS, producer_id_quota_window_size_seconds="60") as broker:
        create_topics(broker.bootstrap, [topic])
        set_rate(broker.bootstrap, "alice", 20)  # 20 new producer ids per minute
        outcomes = [fresh_producer_sends(broker.sasl_bootstrap, topic, "alice") for _ in range(30)]
        accepted = [pid for code, _, pid in outcomes if code == 0]
        rejected = [(code, throttle) for code, throttle, _ in outcomes if code != 0]
        assert len(accepted) == 20 and len(rejected) == 10
        assert all(code == DEFAULT_CODE and 0 < throttle <= 80_000 for code, throttle in rejected)
        log = broker.broker.logs.log(topic, 0)
        assert log.log_end_offset == 20  # nothing of a rejected batch was appended
        assert broker.broker.producer_states.entry_count == 20  # nor any state created
        # A producer id with producer state is never throttled by the quota, even with alice over it.
        with client_for(broker.sasl_bootstrap, "alice") as c:
            assert send(c, topic, accepted[0], sequence=1) == (0, 0)
        # bob has no producer-id quota: every new producer id goes through.
        assert all(fresh_producer_sends(broker.sasl_bootstrap, topic, "bob")[0] == 0 for _ in range(25))


def test_a_fractional_rate_is_accepted_described_and_enforced(unique, tmp_path):
    """producer_ids_rate = 1.5 per window: AlterClientQuotas takes it, DescribeClientQuotas returns it,
    `minibroker configs` shows it, and it admits one new id per window (ids are whole)."""
    from minibroker.configs_cli import add_arguments, run
    from minibroker.testing import running_broker
    import argparse
    import io

    topic = unique("pidq-frac")
    with running_broker(tmp_path / "data", producer_id_quota_window_size_seconds="60") as broker:
        create_topics(broker.bootstrap, [topic])
        parser = argparse.ArgumentParser()
        add_arguments(parser)
        out, err = io.StringIO(), io.StringIO()
        assert run(parser.parse_args(["--bootstrap-server", broker.bootstrap, "--alter", "--add-config",
                                      "producer_ids_rate=1.5", "--entity-type", "users", "--entity-default"]),
                   out, err) == 0, err.getvalue()
        out = io.StringIO()
        assert run(parser.parse_args(["--bootstrap-server", broker.bootstrap, "--describe"]), out, err) == 0
        assert "Quota configs for the default user-principal are producer_ids_rate=1.5" in out.getvalue()
        assert [fresh_producer_sends(broker.bootstrap, topic)[0] for _ in range(3)] == [0, DEFAULT_CODE, DEFAULT_CODE]


def test_a_throttled_batch_holds_back_the_later_batches_of_its_producer(unique, tmp_path):
    """A client with several batches in flight (Java, librdkafka) has its second batch waiting in the
    socket while the connection is muted for the first one's throttle. Once the window frees, that
    second batch must NOT become the producer's first (an unknown producer id may start at any
    sequence): the retried first batch would then be answered DUPLICATE_SEQUENCE_NUMBER, which clients
    take for a success, and its records would be lost. So it is refused (same code, no throttle, the
    quota not asked) until the first batch is back; then both are stored, in order."""
    from minibroker.testing import running_broker

    topic = unique("pidq-order")
    with running_broker(tmp_path / "data", producer_id_quota_window_size_seconds="2",
                        producer_id_quota_cache_layer_count="2") as broker:
        create_topics(broker.bootstrap, [topic], 2)
        set_rate(broker.bootstrap, "ANONYMOUS", 1)
        assert fresh_producer_sends(broker.bootstrap, topic)[0] == 0  # the window is full
        quota = broker.broker.pid_quota
        with AdminClient(broker.bootstrap) as c:
            pid = init_pid(c)
            code, throttle = send(c, topic, pid, 0, value=b"first")
            assert code == DEFAULT_CODE and throttle > 0
            # Read after the mute, when the window has room again: held back all the same.
            assert send(c, topic, pid, 1, value=b"second") == (DEFAULT_CODE, 0)
            assert quota.rejected_total == 1 and quota.admitted_total == 1  # the quota was not asked
            assert send(c, topic, pid, 0, partition=1, value=b"other partition") == (0, 0)  # not held
            assert send(c, topic, pid, 0, value=b"first") == (0, 0)  # the retry of the first
            assert send(c, topic, pid, 1, value=b"second") == (0, 0)
        records = KafkaPython().consume(broker.bootstrap, topic, 2, 4, timeout=30)
        assert sorted((p, o, v) for p, o, _, v, _ in records) == [
            (0, 0, b"v"), (0, 1, b"first"), (0, 2, b"second"), (1, 0, b"other partition")]


def test_throttled_clients_that_go_away_are_not_kept_for_their_throttle(unique, tmp_path):
    """A crash-looping producer is throttled for up to a window (10 min here) and goes away. Its
    muted connection must not live on for the throttle: the broker notices the close without reading
    (KIP-219's mute stands) and frees it, so a storm of them costs no memory."""
    import time

    from minibroker.testing import running_broker

    topic = unique("pidq-gone")
    with running_broker(tmp_path / "data", producer_id_quota_window_size_seconds="600") as broker:
        create_topics(broker.bootstrap, [topic])
        set_rate(broker.bootstrap, "ANONYMOUS", 1)
        assert fresh_producer_sends(broker.bootstrap, topic)[0] == 0
        outcomes = [fresh_producer_sends(broker.bootstrap, topic) for _ in range(20)]
        assert all(code == DEFAULT_CODE and throttle > 500_000 for code, throttle, _ in outcomes)
        deadline = time.monotonic() + 30
        while broker.broker.metrics.connections and time.monotonic() < deadline:
            time.sleep(0.02)
        assert broker.broker.metrics.connections == 0


# -- known means known, across restarts ------------------------------------------------------------------


def _spawn(data_dir, *overrides):
    proc = subprocess.Popen(
        [sys.executable, "-m", "minibroker.cli", "serve", "--listen", "127.0.0.1:0", "--data-dir", str(data_dir),
         "--log-level", "WARNING", *[a for o in overrides for a in ("--override", o)]],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )
    line = proc.stdout.readline()
    assert "ready" in line, line
    return proc, line.split("bootstrap.servers=")[1].split()[0]


def test_a_long_lived_producer_is_never_throttled_across_restarts(tmp_path, unique):
    """A long-lived producer's id has producer state; after kill -9 (state replayed from the log) and
    after a clean restart (from the snapshot) the quota's Bloom filter is empty and its window starts
    afresh, yet with its user over the quota the producer is not throttled, including its first batch
    to a partition it never produced to (its state lives on another partition, not loaded yet)."""
    data_dir = tmp_path / "data"
    topic, filler = unique("long-lived"), unique("fillers")
    window = "producer.id.quota.window.size.seconds=600"
    proc, bootstrap = _spawn(data_dir, window)
    procs = [proc]
    try:
        create_topics(bootstrap, [topic], 3)
        create_topics(bootstrap, [filler])
        set_rate(bootstrap, "ANONYMOUS", 1)  # kept in client-quotas.json across restarts
        with AdminClient(bootstrap) as c:
            pid = init_pid(c)
            assert send(c, topic, pid, 0, partition=0) == (0, 0)  # admitted: the window is full
            assert send(c, topic, pid, 1, partition=0) == (0, 0)  # known
        assert fresh_producer_sends(bootstrap, filler)[0] == DEFAULT_CODE  # over the quota

        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        proc, bootstrap = _spawn(data_dir, window)
        procs.append(proc)
        assert fresh_producer_sends(bootstrap, filler)[0] == 0  # a fresh window after the restart
        assert fresh_producer_sends(bootstrap, filler)[0] == DEFAULT_CODE  # ... now full again
        with AdminClient(bootstrap) as c:
            assert send(c, topic, pid, 2, partition=0) == (0, 0)  # state replayed from the log
            assert send(c, topic, pid, 0, partition=1) == (0, 0)  # a new partition: known all the same

        proc.send_signal(signal.SIGTERM)  # a clean shutdown writes producer-state snapshots
        assert proc.wait(30) == 0
        proc, bootstrap = _spawn(data_dir, window)
        procs.append(proc)
        assert fresh_producer_sends(bootstrap, filler)[0] == 0
        assert fresh_producer_sends(bootstrap, filler)[0] == DEFAULT_CODE
        with AdminClient(bootstrap) as c:
            assert send(c, topic, pid, 0, partition=2) == (0, 0)  # state on p0 and p1, not loaded yet
            assert send(c, topic, pid, 3, partition=0) == (0, 0)
        records = KafkaPython().consume(bootstrap, topic, 3, 6, timeout=30)
        # every batch of the long-lived producer, exactly once
        assert sorted((partition, offset) for partition, offset, *_ in records) == [
            (0, 0), (0, 1), (0, 2), (0, 3), (1, 0), (2, 0)]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(30)
            p.stdout.close()
