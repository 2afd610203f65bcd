"""Transactions with the real Java client (kafka-clients 4.4.0's KafkaProducer with a
transactional.id, KafkaConsumer with isolation.level), the reference implementation of the protocol,
on transactions version 2 (the broker's default `transaction.version`: EndTxn v5, partitions added
by Produce) and version 1 (AddPartitionsToTxn, EndTxn v4), the requests' versions read from the
broker's per-version request counts:

- one JVM runs, against one broker: committed and aborted transactions over two partitions; a zombie
  fenced by a second producer with its transactional id (the broker aborts the zombie's open
  transaction; the zombie's next send fails); a transaction left open by a producer that went away
  (the broker aborts it once transaction.timeout.ms passes); a producer that outlives its
  transaction.timeout.ms (fenced: its late send and commit fail); then read_committed and
  read_uncommitted consumers, which see exactly the committed records, and every record,
  respectively (Java drops the aborted ones itself from the aborted-transactions list); Java's
  Admin.listTransactions / describeTransactions then list and describe every transactional id;
- exactly-once end to end (KIP-98): a consume-transform-produce loop (read_committed group consumer,
  transactional producer, sendOffsetsToTransaction) run while the broker process is killed -9 twice
  and restarted on its address; a read_committed consumer then sees every input record's output
  exactly once.
"""

from __future__ import annotations

import json
import signal
import time
from collections import Counter
from pathlib import Path

import pytest

from minibroker.protocol.records import decode_records, iter_headers
from minibroker.storage.transaction_records import TxnState, parse_transaction_value
from tests.support.broker_process import BrokerProcess
from tests.support.java_client import of_type

pytestmark = pytest.mark.interop


def keys(lines, partition=None):
    return sorted(line["key"] for line in of_type(lines, "record") if partition in (None, line["partition"]))


@pytest.mark.parametrize("txn_version", [1, 2])
def test_commit_abort_zombie_timeout_and_isolation_levels(java, start_broker, unique, txn_version):
    topic = unique("jtxn")
    a, z, o, t = (unique(name) for name in ("A", "Z", "O", "T"))
    with start_broker(transaction_abort_timed_out_transaction_cleanup_interval_ms="200",
                      transaction_version=str(txn_version)) as broker:
        bs = broker.bootstrap
        first = java.run(
            ["create-topic", bs, topic, 2],
            ["txn-produce", bs, topic, 2, a, "commit:4,abort:3,commit:2"],
            ["txn-zombie", bs, topic, z],
            ["txn-produce", bs, topic, 2, o, "open:3", 1000],
            ["txn-produce", bs, topic, 2, t, "commit:1,timeout:2", 1500],
            ["consume-isolation", bs, topic, 2, "read_committed"],
        )
        uncommitted = java.run(["consume-isolation", bs, topic, 2, "read_uncommitted"], ["list-transactions", bs])
        coordinator = broker.broker.transactions
        assert coordinator.txns[o].state.kafka_name == "CompleteAbort"
        assert coordinator.timed_out_aborts == 2  # the open one and the one that outlived its timeout
        versions = {key: n for key, n in broker.broker.metrics.request_versions.items()
                    if key[0] in ("end_txn", "add_partitions_to_txn", "produce")}
    # The client chose its protocol from ApiVersions' finalized transaction.version (KIP-890 part 2).
    if txn_version == 2:
        # EndTxn v5 at every end, and no AddPartitionsToTxn: the Produce v12+ batches add their partitions.
        assert {v for (api, v) in versions if api == "end_txn"} == {5}
        assert not any(api == "add_partitions_to_txn" for api, _ in versions)
        assert min(v for (api, v) in versions if api == "produce") >= 12
    else:
        assert {v for (api, v) in versions if api == "end_txn"} == {4}
        assert versions[("add_partitions_to_txn", 3)] > 0
        assert max(v for (api, v) in versions if api == "produce") <= 11
    events = {(e["event"], e["step"]): e["cause"] for e in of_type(first, "txn")}
    # The zombie's send after it was fenced, and the late send after the timeout abort, fail with
    # INVALID_PRODUCER_EPOCH (Java's InvalidProducerEpochException).
    assert events[("commit-failed", "a")] == "InvalidProducerEpochException"
    assert events[("timeout-failed", f"{t}/timeout1")] == "InvalidProducerEpochException"
    assert ("left-open", f"{o}/open0") in events
    committed = [f"{a}/commit0-{i}" for i in range(4)] + [f"{a}/commit2-{i}" for i in range(2)] + [
        "new-0", f"{t}/commit0-0"]
    assert keys(first) == sorted(committed)
    aborted = [f"{a}/abort1-{i}" for i in range(3)] + ["zombie-0"] + [f"{o}/open0-{i}" for i in range(3)] + [
        f"{t}/timeout1-{i}" for i in range(2)]
    assert keys(uncommitted) == sorted(committed + aborted)
    # Both consumers stop at the same end: nothing is left open, so the last stable offset is the log end.
    assert of_type(first, "end") == of_type(uncommitted, "end")
    # Java's Admin lists and describes the four transactional ids (KIP-664); it parses the state
    # names (a name it did not know would read as UNKNOWN).
    listed = {line["id"]: line["state"] for line in of_type(uncommitted, "txn-listing")}
    assert listed == {a: "CompleteCommit", z: "CompleteCommit", o: "CompleteAbort", t: "CompleteAbort"}
    described = {line["id"]: (line["state"], line["epoch"], line["timeout_ms"], line["partitions"])
                 for line in of_type(uncommitted, "txn-description")}
    # The zombie's id: two producers (epochs 0, 1), the fencing abort bumped it to 1 then the second
    # InitProducerId to 2; the timed-out ones: the abort's bump. Under transactions version 2 every
    # end bumps it once more: A's three transactions, the second producer's commit, T's commit.
    if txn_version == 2:
        assert described == {a: ("CompleteCommit", 3, 60000, 0), z: ("CompleteCommit", 3, 60000, 0),
                             o: ("CompleteAbort", 1, 1000, 0), t: ("CompleteAbort", 2, 1500, 0)}
    else:
        assert described == {a: ("CompleteCommit", 0, 60000, 0), z: ("CompleteCommit", 2, 60000, 0),
                             o: ("CompleteAbort", 1, 1000, 0), t: ("CompleteAbort", 1, 1500, 0)}


def last_state(data_dir: Path):
    """The last state the broker process wrote to __transaction_state (read from its segment files
    while it runs: appends are in the page cache, visible at once)."""
    last = None
    for segment in sorted((data_dir / "__transaction_state-0").glob("*.log")):
        data = segment.read_bytes()
        for header in iter_headers(data):
            for _, _, _, value in decode_records(memoryview(data)[header.position:header.position + header.size]):
                if value is not None:
                    last = parse_transaction_value(value)
    return last


def stopped_state(pid: int) -> str:
    """The process's state letter in /proc (T: stopped)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat[stat.rindex(")") + 2]


def kill_inside_a_transaction(broker: BrokerProcess, wanted: str, deadline_s: float = 20.0):
    """kill -9 the broker while its last transaction state is Ongoing with a partition of the topic
    `wanted` added (a transaction the client has not ended); the state it was killed in. The broker
    is sampled: stopped (SIGSTOP), its state read, killed if the state is the one wanted, else let go
    on (SIGCONT) for a few milliseconds (the client's steps are milliseconds apart)."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        broker.proc.send_signal(signal.SIGSTOP)
        while stopped_state(broker.proc.pid) != "T":  # the signal is delivered asynchronously
            time.sleep(0.0005)
        state = last_state(broker.data_dir)
        if state is not None and state.state is TxnState.ONGOING and any(t == wanted for t, _ in state.partitions):
            break
        broker.proc.send_signal(signal.SIGCONT)
        time.sleep(0.003)
    broker.kill()
    return last_state(broker.data_dir)


def test_exactly_once_loop_survives_two_kill_9(java, tmp_path, unique):
    """Exactly-once through two kill -9s (KIP-98): the first kill lands after the transaction's records were
    added, the second after its offsets were (TxnOffsetCommit: offsets pending in
    __consumer_offsets)."""
    count = 3000
    source, sink, group, tid = unique("in"), unique("out"), unique("eos"), unique("eos-txn")
    broker = BrokerProcess(tmp_path / "data", overrides={
        "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500"})
    bs = broker.start()
    try:
        java.run(["create-topic", bs, source, 2], ["create-topic", bs, sink, 2], ["produce", bs, source, count])
        loop = java.popen(["consume-transform-produce", bs, source, sink, group, tid, count])
        kills, progress, summary, killed_in = 0, [], None, []
        targets = [sink, "__consumer_offsets"]
        for raw in loop.stdout:
            if not raw.startswith("{"):
                continue
            line = json.loads(raw)
            if line["type"] == "progress":
                progress.append(line["committed"])
                if kills < 2 and line["committed"] >= (kills + 1) * count // 4:
                    killed_in.append(kill_inside_a_transaction(broker, targets[kills]))
                    broker.restart()
                    kills += 1
            elif line["type"] == "eos":
                summary = line
            elif line["type"] == "error":
                pytest.fail(f"the loop failed: {line}")
        assert loop.wait(60) == 0
        loop.stdout.close()
        assert kills == 2 and summary is not None and summary["committed"] == count, (kills, summary, progress)
        # Both kills hit an open transaction: its records, then its offsets, added and not yet ended.
        assert [state.state for state in killed_in] == [TxnState.ONGOING, TxnState.ONGOING], killed_in
        assert any(t == "__consumer_offsets" for t, _ in killed_in[1].partitions), killed_in
        lines = java.run(["consume-isolation", bs, sink, 2, "read_committed"])
        seen = Counter(line["key"] for line in of_type(lines, "record"))
        assert set(seen) == {f"key-{i}" for i in range(count)}
        assert max(seen.values()) == 1, [k for k, n in seen.items() if n > 1][:10]
    finally:
        broker.stop()
