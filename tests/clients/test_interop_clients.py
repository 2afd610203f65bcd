"""Real clients produce to and consume from minibroker exactly as against Apache Kafka, and the
data outlives a broker restart.

Each library creates a 3-partition topic with its own admin client, produces 5,000 keyed records
with headers (idempotent, acks=all), and reads them back from the earliest offset by assign();
the records must come back byte for byte, in order, at consecutive offsets. The broker is then
restarted on the same data dir and the same records are read again.
"""


import pytest

from tests.support.clients import ALL
from tests.support.clients import expected_records, make_messages, normalise

pytestmark = pytest.mark.interop

PARTITIONS = 3
COUNT = 5000


@pytest.mark.parametrize("client", ALL, ids=lambda c: c.name)
def test_produce_consume_restart(client, start_broker, unique, tmp_path):
    topic = unique(f"interop-{client.name}")
    messages = make_messages(seed=len(client.name))
    expected = expected_records(messages)
    with start_broker() as broker:
        client.create_topic(broker.bootstrap, topic, PARTITIONS)
        offsets = client.produce(broker.bootstrap, topic, messages)
        assert sorted(offsets) == sorted(o for _, o, *_ in expected)
        assert normalise(client.consume(broker.bootstrap, topic, PARTITIONS, COUNT)) == expected
    with start_broker() as broker:
        assert normalise(client.consume(broker.bootstrap, topic, PARTITIONS, COUNT)) == expected


@pytest.mark.parametrize("reader", ALL, ids=lambda c: c.name)
def test_each_client_reads_what_another_wrote(reader, broker, unique):
    """Batches are stored as the producer sent them, so any client can read any other's."""
    topic = unique("cross")
    writer = ALL[(ALL.index(reader) + 1) % len(ALL)]
    messages = make_messages(seed=7)[:600]
    writer.create_topic(broker.bootstrap, topic, PARTITIONS)
    writer.produce(broker.bootstrap, topic, messages)
    assert normalise(reader.consume(broker.bootstrap, topic, PARTITIONS, len(messages))) == expected_records(messages)
