"""ListOffsets by timestamp and by the special timestamps, through real clients' offset lookups: the
answer is the exact record, as Kafka gives it, never the base offset of its batch.

Each client produces ten records with timestamps T0, T0+10, ... T0+90 in ONE batch (a long linger;
the test reads the stored batch headers to prove it is one batch, with the codec asked for), then
looks up T0+45: the answer must be offset 5 with timestamp T0+50, in a compressed batch as in an
uncompressed one. MAX_TIMESTAMP (-3) on a batch whose timestamps are out of order (KIP-734; here base+100,
base+400, base+200) must be offset 1 with base+400, the record carrying the largest timestamp.
EARLIEST_LOCAL (-4) is the log start, LATEST_TIERED (-5) is -1 (nothing is tiered), as Kafka answers
without tiered storage.
"""

from __future__ import annotations

import pytest

from minibroker.protocol.compression import CODEC_NAMES
from tests.support.wire import create_topics

pytestmark = pytest.mark.interop

T0 = 1_700_000_000_000
TIMESTAMPS = [T0 + 10 * i for i in range(10)]
TARGET, EXPECTED = T0 + 45, (5, T0 + 50)
OUT_OF_ORDER = [T0 + 100, T0 + 400, T0 + 200]


def stored_batches(broker, topic) -> list[tuple[int, str]]:
    """(record count, codec) of each batch stored in partition 0."""
    log = broker.broker.logs.log(topic, 0)
    return [(h.records_count, CODEC_NAMES[h.compression]) for h in log.iter_batch_headers(0)]


def confluent_produce(bootstrap, topic, timestamps, codec):
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 1000, "compression.type": codec,
                         "enable.idempotence": True})
    errors = []
    for i, ts in enumerate(timestamps):
        producer.produce(topic, value=b"value-%d" % i * 8, partition=0, timestamp=ts,
                         on_delivery=lambda err, msg: err and errors.append(err))
    assert producer.flush(30) == 0 and not errors, errors
    del producer


def kafka_python_produce(bootstrap, topic, timestamps, codec):
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=1000,
                             compression_type=None if codec == "none" else codec)
    try:
        futures = [producer.send(topic, value=b"value-%d" % i * 8, partition=0, timestamp_ms=ts)
                   for i, ts in enumerate(timestamps)]
        producer.flush(30)
        for f in futures:
            f.get(30)
    finally:
        producer.close(10)



CONFLUENT_CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


def timestamped_topics(broker, unique, prefix, codecs, produce, max_codec):
    """A topic per codec holding TIMESTAMPS in one batch, and one holding OUT_OF_ORDER in one batch,
    each produced by `produce(bootstrap, topic, timestamps, codec)`: ({codec: topic}, max topic)."""
    topics = {codec: unique(f"{prefix}-{codec}") for codec in codecs}
    max_topic = unique(f"{prefix}-max")
    create_topics(broker.bootstrap, [*topics.values(), max_topic])
    for codec, topic in topics.items():
        produce(broker.bootstrap, topic, TIMESTAMPS, codec)
        assert stored_batches(broker, topic) == [(10, codec)]
    produce(broker.bootstrap, max_topic, OUT_OF_ORDER, max_codec)
    assert stored_batches(broker, max_topic) == [(3, max_codec)]
    return topics, max_topic


def test_confluent_offsets_for_times_and_max_timestamp(broker, unique):
    """librdkafka's consumer offsets_for_times and AdminClient.list_offsets, on batches it
    compressed with each codec it has."""
    from confluent_kafka import Consumer, TopicPartition
    from confluent_kafka.admin import AdminClient, OffsetSpec

    topics, max_topic = timestamped_topics(broker, unique, "ts", CONFLUENT_CODECS, confluent_produce, "lz4")

    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": unique("ts-group")})
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    try:
        for codec, topic in topics.items():
            (found,) = consumer.offsets_for_times([TopicPartition(topic, 0, TARGET)], timeout=30)
            assert found.offset == EXPECTED[0], codec
            tp = TopicPartition(topic, 0)
            info = admin.list_offsets({tp: OffsetSpec.for_timestamp(TARGET)})[tp].result(timeout=30)
            assert (info.offset, info.timestamp) == EXPECTED, codec
        tp = TopicPartition(max_topic, 0)
        info = admin.list_offsets({tp: OffsetSpec.max_timestamp()})[tp].result(timeout=30)
        assert (info.offset, info.timestamp) == (1, T0 + 400)
    finally:
        consumer.close()


def test_kafka_python_offsets_for_times_and_max_timestamp(broker, unique):
    """kafka-python's consumer offsets_for_times and KafkaAdminClient.list_partition_offsets with
    MAX_TIMESTAMP, EARLIEST_LOCAL and LATEST_TIERED (kafka-python compresses with gzip itself; its
    other codecs need libraries the suite does not install)."""
    from kafka import KafkaConsumer, TopicPartition
    from kafka.admin import KafkaAdminClient, OffsetSpec

    topics, max_topic = timestamped_topics(broker, unique, "kp-ts", ["none", "gzip"], kafka_python_produce, "gzip")

    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap)
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        for codec, topic in topics.items():
            tp = TopicPartition(topic, 0)
            found = consumer.offsets_for_times({tp: TARGET})[tp]
            assert (found.offset, found.timestamp) == EXPECTED, codec
        tp = TopicPartition(max_topic, 0)
        answers = {spec: admin.list_partition_offsets({tp: spec})[tp]
                   for spec in (OffsetSpec.MAX_TIMESTAMP, OffsetSpec.EARLIEST_LOCAL, OffsetSpec.LATEST_TIERED)}
        assert (answers[OffsetSpec.MAX_TIMESTAMP].offset, answers[OffsetSpec.MAX_TIMESTAMP].timestamp) == (1, T0 + 400)
        assert (answers[OffsetSpec.EARLIEST_LOCAL].offset, answers[OffsetSpec.EARLIEST_LOCAL].timestamp) == (0, -1)
        assert (answers[OffsetSpec.LATEST_TIERED].offset, answers[OffsetSpec.LATEST_TIERED].timestamp) == (-1, -1)
    finally:
        consumer.close()
        admin.close()


def test_java_offsets_for_times_and_special_timestamps(java, broker, unique):
    """Java's KafkaConsumer.offsetsForTimes returns the broker's offset unchanged (it once
    returned 0 for record 5 of a 10-record batch): exact in batches Java compressed with each codec
    (its snappy is xerial-framed, its lz4 Kafka's frame). Admin.listOffsets answers max-timestamp,
    earliest-local and latest-tiered as Kafka does without tiered storage."""
    codecs = ["none", "gzip", "snappy", "lz4", "zstd"]
    topics = {codec: unique(f"java-ts-{codec}") for codec in codecs}
    max_topic = unique("java-ts-max")
    b = broker.bootstrap
    steps = [["create-topic", b, t, 1] for t in (*topics.values(), max_topic)]
    for codec, topic in topics.items():
        steps += [["produce-timestamps", b, topic, codec, ",".join(map(str, TIMESTAMPS))],
                  ["offsets-for-times", b, topic, TARGET]]
    steps += [["produce-timestamps", b, max_topic, "zstd", ",".join(map(str, OUT_OF_ORDER))]]
    steps += [["list-offsets", b, max_topic, spec]
              for spec in ("max-timestamp", "earliest-local", "latest-tiered", "earliest", "latest", T0 + 150)]
    out = java.run(*steps)
    for codec, topic in topics.items():
        assert stored_batches(broker, topic) == [(10, codec)]
    found = [(line["offset"], line["timestamp"]) for line in out if line["type"] == "offset-for-time"]
    assert found == [EXPECTED] * len(codecs)
    listed = {line["spec"]: (line["offset"], line["timestamp"], line["leader_epoch"])
              for line in out if line["type"] == "listed-offset"}
    assert listed == {
        "max-timestamp": (1, T0 + 400, 0),
        "earliest-local": (0, -1, 0),
        "latest-tiered": (-1, -1, None),  # Kafka answers leader epoch -1: no epoch
        "earliest": (0, -1, 0),
        "latest": (3, -1, 0),
        str(T0 + 150): (1, T0 + 400, 0),  # the first record at or after T0+150, not record 2 (T0+200)
    }


SPECIAL_CASES = [  # (version, timestamp) -> (error code, offset, timestamp), on the OUT_OF_ORDER batch
    ((11, -6), (0, -1, -1)),  # EARLIEST_PENDING_UPLOAD: nothing is tiered
    ((10, -6), (35, -1, -1)),  # -6 needs v11
    ((6, -3), (35, -1, -1)),  # MAX_TIMESTAMP needs v7
    ((7, -4), (35, -1, -1)),  # EARLIEST_LOCAL needs v8
    ((8, -5), (35, -1, -1)),  # LATEST_TIERED needs v9
    ((11, -7), (35, -1, -1)),  # no such special timestamp
    ((7, -3), (0, 1, T0 + 400)),
    ((1, T0 + 150), (0, 1, T0 + 400)),
]


def test_special_timestamps_and_the_versions_that_carry_them(broker, unique):
    """Kafka's ReplicaManager.isListOffsetsTimestampUnsupported, over the wire at exact versions."""
    from minibroker.admin_client import AdminClient

    topic = unique("ts-versions")
    create_topics(broker.bootstrap, [topic])
    confluent_produce(broker.bootstrap, topic, OUT_OF_ORDER, "none")
    answers = {}
    with AdminClient(broker.bootstrap) as admin:
        for version, timestamp in dict(SPECIAL_CASES):
            response = admin.call(2, {"replica_id": -1, "isolation_level": 0, "timeout": 5000, "topics": [
                {"name": topic, "partitions": [{"partition_index": 0, "current_leader_epoch": -1,
                                                "timestamp": timestamp}]}]}, version=version)
            (partition,) = response.topics[0].partitions
            answers[version, timestamp] = (partition.error_code, partition.offset, partition.timestamp)
    assert answers == dict(SPECIAL_CASES)
