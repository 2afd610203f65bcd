"""What each real client does when a produce is answered DUPLICATE_SEQUENCE_NUMBER,
OUT_OF_ORDER_SEQUENCE_NUMBER or INVALID_PRODUCER_EPOCH. The answers are injected (fault action
`error`: the batch is not appended), so each cell of docs/clients.md's table is observed, not assumed.

Observed (and asserted here): every client takes DUPLICATE_SEQUENCE_NUMBER as "already written" and
reports the send as successful, with an unknown offset (-1) for the duplicated batch's first record;
OUT_OF_ORDER_SEQUENCE_NUMBER and INVALID_PRODUCER_EPOCH fail the send (librdkafka raises them as
fatal idempotent-producer errors; aiokafka reports INVALID_PRODUCER_EPOCH as ProducerFenced).
"""

import pytest

from minibroker.faults import FaultRule
from tests.support.clients import ALL, Message

pytestmark = pytest.mark.interop

CONFIG = {
    "kafka-python": {"request_timeout_ms": 5000},
    "confluent-kafka": {"message.timeout.ms": 10000},
    "aiokafka": {"request_timeout_ms": 5000},
}

# What the application sees: the send's outcome, as a pattern found in the raised error.
EXPECTED_FAILURE = {
    (45, "kafka-python"): "OutOfOrderSequenceNumber",
    (45, "confluent-kafka"): "OUT_OF_ORDER_SEQUENCE_NUMBER|OutOfOrderSequence|Error 45|fatal",
    (45, "aiokafka"): "OutOfOrderSequenceNumber",
    (47, "kafka-python"): "InvalidProducerEpoch",
    (47, "confluent-kafka"): "INVALID_PRODUCER_EPOCH",
    (47, "aiokafka"): "ProducerFenced",
}


@pytest.mark.parametrize("code", [46, 45, 47], ids=["DUPLICATE_SEQUENCE_NUMBER", "OUT_OF_ORDER_SEQUENCE_NUMBER", "INVALID_PRODUCER_EPOCH"])
@pytest.mark.parametrize("client", ALL, ids=lambda c: c.name)
def test_client_reaction(client, code, broker, unique):
    topic = unique(f"err{code}")
    client.create_topic(broker.bootstrap, topic, 1)
    rule = broker.broker.faults.add(FaultRule("Produce", "error", error_code=code, limit=1))
    messages = [Message(0, b"k", b"v%d" % i, ()) for i in range(3)]
    if code == 46:
        offsets = client.produce(broker.bootstrap, topic, messages, **CONFIG[client.name])
        # "Delivered", although the broker appended nothing: the client trusts the duplicate answer.
        assert offsets[0] in (-1, None)
        assert broker.broker.logs.log(topic, 0).log_end_offset < len(messages)
    else:
        import re

        with pytest.raises(BaseException) as info:
            client.produce(broker.bootstrap, topic, messages, **CONFIG[client.name])
        text = f"{type(info.value).__name__} {info.value!r} {info.value}"
        assert re.search(EXPECTED_FAILURE[(code, client.name)], text), text
    assert rule.fired == 1
