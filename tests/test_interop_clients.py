"""Real clients produce to and consume from minibroker exactly as against Apache Kafka, and the
data outlives a broker restart.

Each library creates a 3-partition topic with its own admin client, produces 5,000 keyed records
with headers (idempotent, acks=all), and reads them back from the earliest offset by assign();
the records must come back byte for byte, in order, at consecutive offsets. The broker is then
restarted on the same data dir and the same records are read again.
"""

import random

import pytest

from tests.clients import ALL, Message

pytestmark = pytest.mark.interop

PARTITIONS = 3
COUNT = 5000


def make_messages(seed: int) -> list[Message]:
    rng = random.Random(seed)
    return [
        Message(
            partition=i % PARTITIONS,
            key=b"key-%d" % i,
            value=rng.randbytes(rng.randint(0, 300)),
            headers=(("trace", b"%d" % i), ("origin", rng.randbytes(4))),
        )
        for i in range(COUNT)
    ]


def expected_records(messages):
    per_partition: dict[int, int] = {}
    expected = []
    for m in messages:
        offset = per_partition.get(m.partition, 0)
        per_partition[m.partition] = offset + 1
        expected.append((m.partition, offset, m.key, m.value, m.headers))
    return sorted(expected, key=lambda r: (r[0], r[1]))


def normalise(records):
    return sorted(
        ((p, o, k, v, tuple((hk, bytes(hv)) for hk, hv in h)) for p, o, k, v, h in records),
        key=lambda r: (r[0], r[1]),
    )


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
