"""kill -9 of the broker under a share consumer (Java's KafkaShareConsumer, acknowledging each record
explicitly with commitSync): after the restart on the same port the consumer carries on, every
record is delivered, no record whose acknowledgement the broker confirmed is delivered again (the
acknowledgements were in __share_group_state before the answer), the records delivered again are
only those not confirmed, with their delivery counts kept, and at the end the group has no lag.
"""

from __future__ import annotations

import time

import pytest

from minibroker.admin_client import AdminClient
from tests.support.broker_process import BrokerProcess
from tests.support.share_client import lag, produce, records, setup

pytestmark = pytest.mark.interop

COUNT = 200


def test_kill_9_of_the_broker_mid_stream_loses_no_acknowledgement(tmp_path, share_java, unique):
    topic, group = unique("crash"), unique("g")
    broker = BrokerProcess(tmp_path / "data", log_level="WARNING")
    bootstrap = broker.start()
    try:
        with AdminClient(bootstrap) as admin:
            setup(admin, topic, group, **{"share.record.lock.duration.ms": "3000"})
        produce(bootstrap, topic, COUNT)
        run = share_java.start(["consume", bootstrap, topic, group, 1, COUNT, "mode=explicit", "ack=accept",
                                "max.records=10", "commit.delay.ms=100", "timeout.ms=90000",
                                "linger.ms=500"])
        # Killed while the consumer holds records it acknowledged but has not committed yet.
        run.wait_for(lambda lines: len(records(lines)) >= 60 and lines[-1]["type"] == "record")
        broker.kill()
        killed = len(run.lines)
        time.sleep(0.5)
        broker.restart()
        lines = run.finish(150)
        assert any(line["type"] == "record" for line in lines[killed:]), "nothing consumed after the restart"
        delivered: dict[int, list[int]] = {}
        confirmed: dict[int, int] = {}  # offset -> index of the commit line that confirmed it
        for index, line in enumerate(lines):
            if line["type"] == "record":
                offset = line["offset"]
                assert offset not in confirmed, f"offset {offset} delivered again after its ACCEPT was confirmed"
                delivered.setdefault(offset, []).append(line["delivery_count"])
            elif line["type"] == "commit" and line["errors"].get(f"{topic}-0", "missing") is None:
                for offset in line["offsets"].get("0", []):
                    confirmed[offset] = index
        assert sorted(delivered) == list(range(COUNT))  # nothing lost
        assert all(counts == sorted(counts) and counts[-1] <= 5 for counts in delivered.values())
        again = {o for o, counts in delivered.items() if len(counts) > 1}
        assert again and len(again) <= 30, again  # what was in flight at the kill: a poll's worth or so
        with AdminClient(bootstrap) as admin:
            assert lag(admin, group) == {0: 0}
    finally:
        broker.stop()
