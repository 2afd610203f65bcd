"""kill -9 of a broker process with transactions in flight: after the restart a committed transaction
is visible once, an open one stays open (its records not readable under read_committed, the last
stable offset held at its first offset) until its transaction.timeout.ms passes, when the restarted
coordinator aborts it (ABORT marker, the producer fenced), and nothing else changes; the
transactional ids' state and the group's committed transactional offsets came back from the logs.
The timeout passes when the test moves the broker's clock (the control endpoint's clock advance), so
a slow restart cannot let it pass early (by a minute: less than connections.max.idle.ms, which the same
advance would act on)."""

from __future__ import annotations

import json
import time
import urllib.request

from minibroker.admin_client import AdminClient
from tests.support.broker_process import BrokerProcess
from tests.support.txn_wire import add, create, end, fetch, init, produce


def test_kill_9_with_an_open_and_a_committed_transaction(tmp_path, unique):
    topic, done, stuck, group = unique("crash"), unique("done"), unique("stuck"), unique("g")
    broker = BrokerProcess(tmp_path / "data", overrides={
        "transaction.abort.timed.out.transaction.cleanup.interval.ms": "100", "control.listen": "127.0.0.1:0"})
    bs = broker.start()
    try:
        with AdminClient(bs) as c:
            create(c, topic, 1)
            _, open_pid, _ = init(c, stuck, timeout=60_000)
            add(c, stuck, open_pid, 0, topic, [0])
            assert produce(c, stuck, topic, 0, open_pid, 0, 0, [b"open-1", b"open-2"]) == 0
            _, pid, _ = init(c, done)
            add(c, done, pid, 0, topic, [0])
            assert produce(c, done, topic, 0, pid, 0, 0, [b"done-1"]) == 0
            c.call(25, {"transactional_id": done, "producer_id": pid, "producer_epoch": 0, "group_id": group})
            c.call(28, {"transactional_id": done, "group_id": group, "producer_id": pid, "producer_epoch": 0,
                        "topics": [{"name": topic, "partitions": [{"partition_index": 0, "committed_offset": 42,
                                                                    "committed_metadata": ""}]}]}, version=0)
            assert end(c, done, pid, 0, True) == 0
        broker.kill()
        bs = broker.restart()
        with AdminClient(bs) as c:
            p, headers = fetch(c, topic, 0, 1)
            assert p.last_stable_offset == 0 and headers == []  # the open transaction holds the LSO
            r = c.call(65, {"transactional_ids": [stuck, done]})
            assert [s.transaction_state for s in r.transaction_states] == ["Ongoing", "CompleteCommit"]
            r = c.call(9, {"group_id": group, "topics": [{"name": topic, "partition_indexes": [0]}],
                           "require_stable": True}, version=7)
            assert r.topics[0].partitions[0].committed_offset == 42
            advance = urllib.request.Request(broker.fields["control"].rstrip("/") + "/clock/advance",
                                             data=json.dumps({"seconds": 61}).encode(), method="POST")
            with urllib.request.urlopen(advance, timeout=30) as answer:
                assert answer.status == 200
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                p, headers = fetch(c, topic, 0, 1)
                if p.last_stable_offset > 0:
                    break
                time.sleep(0.1)
            # Aborted after its timeout: the committed transaction's record is readable once, the
            # open one's records are listed as aborted, and the stuck producer is fenced.
            assert p.last_stable_offset == p.high_watermark == 5
            assert [(a.producer_id, a.first_offset) for a in p.aborted_transactions] == [(open_pid, 0)]
            assert [h.base_offset for h in headers if not h.is_control] == [0, 2]
            assert [h.producer_id for h in headers if not h.is_control] == [open_pid, pid]
            assert end(c, stuck, open_pid, 0, True) == 90
            r = c.call(65, {"transactional_ids": [stuck]})
            assert (r.transaction_states[0].transaction_state, r.transaction_states[0].producer_epoch) == (
                "CompleteAbort", 1)
        assert "aborting it and fencing epoch 0" in broker.log()
    finally:
        broker.stop()
