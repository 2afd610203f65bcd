"""Metadata v13's top-level error code (KIP-1102): NONE from this broker, as from Kafka's; an `error`
fault rule on Metadata answers it (REBOOTSTRAP_REQUIRED, 129, for a client's rebootstrap), and before
v13, which has no top-level error, each requested topic gets the rule's code."""

from __future__ import annotations

from minibroker.admin_client import AdminClient
from minibroker.faults import FaultRule
from tests.support.txn_wire import create

REBOOTSTRAP_REQUIRED = 129


def metadata(c, topics, version=13):
    return c.call(3, {"topics": [{"name": t, "topic_id": None} for t in topics], "allow_auto_topic_creation": False,
                      "include_topic_authorized_operations": False}, version=version)


def test_a_metadata_fault_answers_the_top_level_error(broker, unique):
    topic = unique("rb")
    with AdminClient(broker.bootstrap) as c:
        create(c, topic, 1)
        r = metadata(c, [topic])
        assert int(r.error_code) == 0 and len(r.brokers) == 1 and r.topics[0].name == topic
        rule = broker.in_broker(broker.broker.faults.add,
                                FaultRule("Metadata", "error", error_code=REBOOTSTRAP_REQUIRED, limit=2))
        r = metadata(c, [topic])
        assert (int(r.error_code), list(r.brokers), list(r.topics)) == (REBOOTSTRAP_REQUIRED, [], [])
        r = metadata(c, [topic], version=12)
        assert [(t.name, int(t.error_code)) for t in r.topics] == [(topic, REBOOTSTRAP_REQUIRED)]
        assert rule.fired == 2
        assert int(metadata(c, [topic]).error_code) == 0  # the rule's limit reached: answered again
