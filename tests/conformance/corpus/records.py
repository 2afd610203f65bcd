"""Produce, Fetch, ListOffsets, DeleteRecords, DescribeProducers; idempotent producers."""

from __future__ import annotations

from tests.conformance.corpus import TS, create_topic, fetch, init_producer_id, produce, read_all, records
from tests.support.batches import make_batch
from tests.support.conformance import Ref, Run, scenario


@scenario("produce/versions", apis=(0, 1))
def _(run: Run) -> None:
    """One batch at each version clients send (v3 Java's oldest, v7 aiokafka and kafkajs, v9
    librdkafka, v10 librdkafka 2.16, v12) and by topic id (v13, Java 4); a fetch of them all."""
    topic = run.name("t")
    created = create_topic(run, topic)
    for version in (3, 5, 7, 8, 9, 10, 11, 12):
        produce(run, topic, records([f"v{version}"]), version=version)
    run.call(0, 13, {"acks": -1, "timeout": 30000, "topic_data": [
        {"topic_id": created.topics[0].topic_id, "partition_data": [{"index": 0, "records": records(["v13"])}]}]})
    run.call(0, 13, {"acks": -1, "timeout": 30000, "topic_data": [
        {"topic_id": "00000000-0000-0000-0000-00000000abcd", "partition_data": [{"index": 0, "records": records(["x"])}]}]},
        label="Produce v13 unknown topic id")
    fetch(run, topic)


@scenario("produce/errors", apis=(0,))
def _(run: Run) -> None:
    """Produce errors: unknown topic, unknown partition, acks 2 (INVALID_REQUIRED_ACKS), a batch over
    max.message.bytes (MESSAGE_TOO_LARGE), a bad CRC (CORRUPT_MESSAGE), a timestamp too far in the
    future (INVALID_TIMESTAMP, message.timestamp.after.max.ms), acks=0 (no answer; the next request
    answers), an empty records field."""
    topic = run.name("t")
    create_topic(run, topic, configs={"max.message.bytes": "2000"})
    produce(run, run.name("absent"), records(["a"]), label="unknown topic")
    produce(run, topic, records(["a"]), partition=7, label="unknown partition")
    produce(run, topic, records(["a"]), acks=2, label="acks 2")
    produce(run, topic, records(["x" * 3000]), label="too large")
    bad = bytearray(records(["crc"]))
    bad[-1] ^= 0xFF
    produce(run, topic, bytes(bad), label="bad crc")
    import time

    future = int(time.time() * 1000) + 2 * 3600 * 1000
    produce(run, topic, make_batch([(None, b"future")], timestamp_ms=future), label="timestamp 2 h ahead")
    produce(run, topic, make_batch([(None, b"past")], timestamp_ms=1000), label="timestamp in 1970")
    run.send(0, 9, {"acks": 0, "timeout": 30000, "topic_data": [
        {"name": topic, "partition_data": [{"index": 0, "records": records(["acks0"])}]}]}, answered=False)
    run.call(2, 7, {"replica_id": -1, "isolation_level": 0, "topics": [
        {"name": topic, "partitions": [{"partition_index": 0, "timestamp": -1}]}]}, label="after acks=0")
    read_all(run, topic)


@scenario("produce/compacted-keyless", apis=(0,))
def _(run: Run) -> None:
    """A batch with keyless records to a compacted topic: INVALID_RECORD with record_errors naming
    the keyless records (KIP-467), the batch refused whole; a keyed batch is accepted."""
    topic = run.name("t")
    create_topic(run, topic, configs={"cleanup.policy": "compact"})
    produce(run, topic, records(["a", "b", "c"], keys=["k1", None, "k3"]), label="one keyless of three")
    produce(run, topic, records(["a", "b"], keys=[None, None]), label="all keyless")
    produce(run, topic, records(["a", "b"], keys=["k1", "k2"]), label="keyed")
    produce(run, topic, records(["a", "b"], keys=[None, "k"]), version=7, label="keyless v7")
    produce(run, topic, records(["a", "b"], keys=[None, "k"]), version=3, label="keyless v3")
    fetch(run, topic)


@scenario("produce/log-append-time", apis=(0, 1, 2))
def _(run: Run) -> None:
    """message.timestamp.type=LogAppendTime: the produce answer's log_append_time, the fetched
    batch's timestamps and attributes, ListOffsets by timestamp."""
    topic = run.name("t")
    create_topic(run, topic, configs={"message.timestamp.type": "LogAppendTime"})
    produce(run, topic, records(["a", "b"]))
    fetch(run, topic)
    run.call(2, 7, {"replica_id": -1, "isolation_level": 0, "topics": [
        {"name": topic, "partitions": [{"partition_index": 0, "timestamp": -3}]}]}, label="max timestamp")


@scenario("fetch/offsets-and-errors", apis=(1,))
def _(run: Run) -> None:
    """Fetch at the versions clients send (v4 oldest, v11 aiokafka/kafkajs, v12 flexible, v16
    librdkafka): records, high watermark, LSO, log start; OFFSET_OUT_OF_RANGE past the end,
    UNKNOWN_TOPIC_OR_PARTITION, UNKNOWN_TOPIC_ID (v13+), fetch at the end (empty)."""
    topic = run.name("t")
    created = create_topic(run, topic, 2)
    topic_id = created.topics[0].topic_id
    produce(run, topic, records(["a", "b", "c"]))
    produce(run, topic, records(["d"], timestamp_ms=TS + 5))
    for version in (4, 11):
        fetch(run, topic, 1, version=version)
    fetch(run, topic, 4, label="at the end")
    fetch(run, topic, 99, label="past the end")
    fetch(run, topic, 0, partition=5, label="unknown partition")
    fetch(run, run.name("absent"), 0, label="unknown topic")

    def by_id(version, tid, label):
        run.call(1, version, {"max_wait": 0, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
                              "session_id": 0, "session_epoch": -1, "topics": [{"topic_id": tid, "partitions": [
                                  {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}]}],
                              "forgotten_topics_data": []}, label=label)

    by_id(13, topic_id, "v13 by id")
    by_id(16, topic_id, "v16 by id")
    by_id(16, "00000000-0000-0000-0000-00000000abcd", "v16 unknown id")


@scenario("fetch/max-bytes", apis=(1,))
def _(run: Run) -> None:
    """partition_max_bytes smaller than the first batch: the first batch is returned whole anyway
    (KIP-74); a second partition gets nothing more once max_bytes is used up."""
    topic = run.name("t")
    create_topic(run, topic)
    for i in range(3):
        produce(run, topic, records([f"{i}" * 200] * 5), record=False)
    run.call(1, 11, {"max_wait": 0, "min_bytes": 1, "max_bytes": 300, "isolation_level": 0, "topics": [
        {"topic": topic, "partitions": [{"partition": 0, "fetch_offset": 0, "partition_max_bytes": 100}]}],
        "forgotten_topics_data": []})


@scenario("list_offsets/specs", apis=(2,))
def _(run: Run) -> None:
    """ListOffsets: earliest (-2), latest (-1), max timestamp (-3, KIP-734), earliest local (-4),
    latest tiered (-5), by timestamp (before, between, after all records), unknown partition, at the
    versions clients send (v1 kafka-python's oldest, v3 aiokafka, v7 librdkafka, v9+ Java)."""
    topic = run.name("t")
    create_topic(run, topic)
    produce(run, topic, records(["a", "b"], timestamps=[TS, TS + 10]), record=False)
    produce(run, topic, records(["c"], timestamp_ms=TS + 5), record=False)
    specs = (-2, -1, -3, -4, -5, TS - 1, TS + 1, TS + 10, TS + 11)
    for version in (1, 3, 7, 9, 10):
        run.call(2, version, {"replica_id": -1, "isolation_level": 0, "timeout": 30000, "topics": [
            {"name": topic, "partitions": [{"partition_index": 0, "timestamp": ts} for ts in specs[:1]]}]},
            label=f"earliest v{version}")
    for ts in specs:
        run.call(2, 9, {"replica_id": -1, "isolation_level": 0, "topics": [
            {"name": topic, "partitions": [{"partition_index": 0, "timestamp": ts}]}]}, label=f"spec {ts}")
    run.call(2, 9, {"replica_id": -1, "isolation_level": 0, "topics": [
        {"name": topic, "partitions": [{"partition_index": 3, "timestamp": -1}]},
        {"name": run.name("absent"), "partitions": [{"partition_index": 0, "timestamp": -1}]}]},
        label="unknown partition and topic")


@scenario("delete_records/truncation", apis=(21, 2, 1))
def _(run: Run) -> None:
    """DeleteRecords: to an offset (log start moves), to -1 (the high watermark), past the end
    (OFFSET_OUT_OF_RANGE), unknown partition; then ListOffsets earliest and a fetch below the new
    log start (OFFSET_OUT_OF_RANGE)."""
    topic = run.name("t")
    create_topic(run, topic)
    for i in range(3):
        produce(run, topic, records([f"{i}a", f"{i}b"]), record=False)

    def delete(offset, partition=0, label=None):
        run.call(21, 2, {"topics": [{"name": topic, "partitions": [{"partition_index": partition, "offset": offset}]}],
                         "timeout": 30000}, label=label)

    delete(3, label="to 3")
    run.call(2, 7, {"replica_id": -1, "isolation_level": 0, "topics": [
        {"name": topic, "partitions": [{"partition_index": 0, "timestamp": -2}]}]}, label="earliest after")
    fetch(run, topic, 0, label="fetch below log start")
    fetch(run, topic, 3, label="fetch at log start")
    delete(2, label="backwards")
    delete(99, label="past the end")
    delete(-1, label="to the high watermark")
    delete(0, partition=4, label="unknown partition")


@scenario("idempotence/sequences", apis=(22, 0, 61))
def _(run: Run) -> None:
    """An idempotent producer (InitProducerId v4, librdkafka's): in-order batches, a duplicate of the
    last batch (answered with its original offset), an out-of-order sequence
    (OUT_OF_ORDER_SEQUENCE_NUMBER), a stale epoch, an unknown producer id; DescribeProducers."""
    topic = run.name("t")
    create_topic(run, topic)
    init = init_producer_id(run, None, version=4)
    pid, epoch = init.producer_id, init.producer_epoch

    def send(seq, values, label, pid=pid, epoch=epoch):
        produce(run, topic, make_batch([(None, v.encode()) for v in values], producer_id=pid,
                                       producer_epoch=epoch, base_sequence=seq), label=label)

    send(0, ["a", "b"], "seq 0")
    send(2, ["c"], "seq 2")
    send(2, ["c"], "seq 2 again (duplicate)")
    send(0, ["a", "b"], "seq 0 again (older duplicate)")
    send(5, ["gap"], "seq 5 (gap)")
    send(3, ["d"], "seq 3", epoch=epoch + 1)
    send(0, ["e"], "new epoch at seq 0", epoch=epoch + 1)
    send(1, ["f"], "old epoch", epoch=epoch)
    send(0, ["g"], "unknown producer id", pid=pid + 1000)
    send(7, ["h"], "new producer at seq 7", pid=pid + 1001)
    # Numbered here, in this order: DescribeProducers lists its producers in each broker's own order
    # (Kafka's is a hash map's), which would otherwise number the two new ids differently.
    run.note("producer ids sent without InitProducerId", [Ref("pid", str(pid + 1000)), Ref("pid", str(pid + 1001))])
    run.call(61, 0, {"topics": [{"name": topic, "partition_indexes": [0, 3]}]}, drop=("last_timestamp",))
    fetch(run, topic)


@scenario("offset_for_leader_epoch/ends", apis=(23,))
def _(run: Run) -> None:
    """OffsetForLeaderEpoch (KIP-101, KIP-320): where the current epoch ends (the log end), an epoch
    newer than any, the current leader epoch named right and too new (UNKNOWN_LEADER_EPOCH), an
    unknown partition and topic, at the versions clients send (v3 librdkafka, v4 Java)."""
    topic = run.name("t")
    create_topic(run, topic)
    produce(run, topic, records(["a", "b", "c"]), record=False)
    for version in (3, 4):
        run.call(23, version, {"replica_id": -1, "topics": [{"topic": topic, "partitions": [
            {"partition": 0, "current_leader_epoch": -1, "leader_epoch": 0},
            {"partition": 0, "current_leader_epoch": 0, "leader_epoch": 0},
            {"partition": 0, "current_leader_epoch": -1, "leader_epoch": 5},
            {"partition": 0, "current_leader_epoch": 7, "leader_epoch": 0},
            {"partition": 4, "current_leader_epoch": -1, "leader_epoch": 0}]},
            {"topic": run.name("absent"), "partitions": [
                {"partition": 0, "current_leader_epoch": -1, "leader_epoch": 0}]}]}, label=f"v{version}")
