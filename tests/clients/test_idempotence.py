"""Idempotent producers keep exactly-once, in-order delivery per partition through forced retries
(responses dropped after the append, connections closed after the append) and through a broker
killed with SIGKILL mid-stream and restarted on its data dir. Real clients, real sockets; the faults
come from the broker's fault injection (minibroker.faults)."""

import os
import re
import signal
import subprocess
import sys
import threading
import time

import pytest

from minibroker.faults import FaultRule
from tests.support.clients import ALL, Message

pytestmark = [
    pytest.mark.interop,
    # kafka-python leaves its sockets to the garbage collector when the broker dies under it.
    pytest.mark.filterwarnings("ignore:unclosed <socket.socket:ResourceWarning"),
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]

PARTITIONS = 3
COUNT = 10_000

# Short timeouts so a dropped response turns into a retry quickly, and small batches so that the
# 10,000 records travel in many produce requests (faults hit some of them, with others in flight).
RETRY_CONFIG = {
    "kafka-python": {"request_timeout_ms": 3000, "retry_backoff_ms": 50, "batch_size": 4096},
    # librdkafka times requests out by socket.timeout.ms (then reconnects); request.timeout.ms is
    # only the broker-side acks timeout.
    "confluent-kafka": {"socket.timeout.ms": 3000, "retry.backoff.ms": 50, "message.timeout.ms": 120000,
                        "batch.num.messages": 200, "linger.ms": 2},
    # aiokafka's send() also waits at most request_timeout_ms for room in a full batch, which a broker
    # restarting on a loaded machine can take longer than 3 s to make: the kill closes the connection
    # at once, so a longer timeout costs the test nothing when all goes well.
    "aiokafka": {"request_timeout_ms": 15000, "retry_backoff_ms": 50, "max_batch_size": 4096},
}


def numbered(count=COUNT):
    return [Message(partition=i % PARTITIONS, key=b"k%d" % i, value=b"%d" % i, headers=()) for i in range(count)]


def assert_exactly_once_in_order(records, messages):
    by_partition: dict[int, list[bytes]] = {}
    for partition, offset, key, value, headers in sorted(records, key=lambda r: (r[0], r[1])):
        by_partition.setdefault(partition, []).append(value)
    for p in range(PARTITIONS):
        expected = [m.value for m in messages if m.partition == p]
        got = by_partition.get(p, [])
        assert len(got) == len(set(got)), f"partition {p}: {len(got) - len(set(got))} duplicate(s)"
        assert got == expected, f"partition {p}: {len(got)} records, expected {len(expected)} in order"


# aiokafka is left out of "drop": it times a request out without closing the connection and
# retries on the same silent connection, so its sends fail (a client limitation; see docs/testing.md, "Faults").
CASES = [(c, f) for c in ALL for f in ("close", "drop") if not (c.name == "aiokafka" and f == "drop")]


@pytest.mark.parametrize("mode", ["lean", "kafka"])
@pytest.mark.parametrize("client, fault", CASES, ids=[f"{c.name}-{f}" for c, f in CASES])
def test_retries_after_faults_keep_exactly_once(client, fault, mode, start_broker, unique):
    topic = unique(f"idem-{fault}")
    messages = numbered()
    with start_broker(producer_state_mode=mode) as broker:
        client.create_topic(broker.bootstrap, topic, PARTITIONS)
        # A drop costs the client a request timeout, a close only a reconnect.
        limit = 2 if fault == "drop" else 6
        rule = broker.broker.faults.add(FaultRule("Produce", fault, every=5, limit=limit))
        client.produce(broker.bootstrap, topic, messages, **RETRY_CONFIG[client.name])
        assert rule.fired > 0, "no fault was injected: the test proved nothing"
        broker.broker.faults.clear()
        records = client.consume(broker.bootstrap, topic, PARTITIONS, COUNT, timeout=60)
    assert_exactly_once_in_order(records, messages)


def _spawn(port: int, data_dir) -> tuple[subprocess.Popen, str]:
    """`minibroker serve` on `port` (0: one it picks); the process and the address it reports."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "minibroker.cli", "serve", "--listen", f"127.0.0.1:{port}",
         "--data-dir", str(data_dir), "--log-level", "WARNING"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )
    line = proc.stdout.readline()
    match = re.search(r"bootstrap\.servers=(\S+)", line)
    assert match, line
    return proc, match.group(1)


@pytest.mark.parametrize("client", ALL, ids=lambda c: c.name)
def test_sigkill_mid_stream_and_restart(client, tmp_path, unique):
    """Kill -9 the broker while a producer streams; restart it on the same data dir and port. The
    producer's retries must be recognised as duplicates (producer state recovered from snapshot and
    log), so every record is stored exactly once, in order. The first broker binds a port of its
    own choosing and reports it; the restart takes that port back (the producer knows no other)."""
    topic = unique("sigkill")
    messages = numbered()
    proc, bootstrap = _spawn(0, tmp_path / "data")
    port = int(bootstrap.rsplit(":", 1)[1])
    restarted = []
    try:
        client.create_topic(bootstrap, topic, PARTITIONS)
        data_dir = tmp_path / "data"

        def killer():
            # Kill once a good part of the stream has landed, then come back on the same port.
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                size = sum(f.stat().st_size for f in data_dir.glob(f"{topic}-*/*.log"))
                if size > 60_000:
                    break
                time.sleep(0.005)
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
            time.sleep(0.3)
            restarted.append(_spawn(port, data_dir)[0])

        thread = threading.Thread(target=killer)
        thread.start()
        client.produce(bootstrap, topic, messages, **RETRY_CONFIG[client.name])
        thread.join(timeout=90)
        assert restarted, "the broker was never killed and restarted"
        records = client.consume(bootstrap, topic, PARTITIONS, COUNT, timeout=60)
    finally:
        for p in [proc, *restarted]:
            if p.poll() is None:
                p.terminate()
                p.wait(30)
            if p.stdout:
                p.stdout.close()
    assert_exactly_once_in_order(records, messages)
