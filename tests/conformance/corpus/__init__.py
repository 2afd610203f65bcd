"""The conformance corpus: scenarios run against Apache Kafka 4.4 and minibroker side by side
(tests/support/conformance.py is the engine; scripts/conformance and tests/conformance/ run it).

One module per area; each scenario is a function of a `Run` registered with `@scenario`. The
steps shared by many scenarios (a topic created, records produced, a member joined) are here.
Versions are the ones clients send (../shared/design/clients.md): librdkafka's, the Java client's,
kafka-python's and aiokafka's, and the oldest and newest a broker serves where they differ.
"""

from __future__ import annotations

from typing import Any, Sequence

from tests.support.batches import make_batch
from tests.support.conformance import Run

TS = 1_700_000_000_000  # a fixed CreateTime for produced records (not a wall-clock time)


def create_topic(run: Run, name: str, partitions: int = 1, configs: dict[str, str] | None = None, *,
                 record: bool = False, version: int = 7) -> Any:
    """CreateTopics (v7, what librdkafka and kafka-python send); not recorded unless asked. Waits
    until the topic's partitions are led (`wait_for_topic`), as clients wait by retrying."""
    response = run.call(19, version, {
        "topics": [{"name": name, "num_partitions": partitions, "replication_factor": 1,
                    "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()]}],
        "timeout": 30000, "validate_only": False}, record=record, label="create topic")
    if response.topics[0].error_code == 0:
        wait_for_topic(run, name, partitions)
    return response


def wait_for_topic(run: Run, name: str, partitions: int) -> None:
    """Until Metadata shows the topic's `partitions` with their leaders, and then until the leader
    serves each of them (ListOffsets answers it without error).

    Kafka's CreateTopics (and CreatePartitions) answer once the controller has committed the topic;
    the broker learns of it from the metadata log a moment later, and publishes it in two steps: its
    metadata cache first (Metadata then names the leader), its replica manager second (which creates
    the partition's log and makes it the leader). Between the two, a Produce, Fetch or ListOffsets
    of the partition is answered NOT_LEADER_OR_FOLLOWER: a transactional Produce right after
    create_topic was answered that way once, on a busy machine; eight partitions created while
    nothing else runs show it on most partitions. A client retries that error; a scenario waits
    for the leader instead, so that what it records does not depend on the timing."""
    def visible():
        response = run.call(3, 12, {"topics": [{"name": name, "topic_id": 0}], "allow_auto_topic_creation": False},
                            record=False)
        topic = response.topics[0]
        return topic.error_code == 0 and len(topic.partitions) == partitions and all(
            p.leader_id >= 0 for p in topic.partitions)

    def led():
        response = run.call(2, 7, {"replica_id": -1, "isolation_level": 0, "topics": [
            {"name": name, "partitions": [{"partition_index": p, "timestamp": -1} for p in range(partitions)]}]},
            record=False)
        return all(p.error_code == 0 for t in response.topics for p in t.partitions)

    run.wait_until(visible, timeout=30, interval=0.02)
    run.wait_until(led, timeout=30, interval=0.02)


def produce(run: Run, topic: str, batch: bytes, *, partition: int = 0, version: int = 9, acks: int = -1,
            transactional_id: str | None = None, record: bool = True, label: str | None = None,
            conn: str = "main") -> Any:
    """Produce one batch to one partition (v9: librdkafka's and aiokafka's flexible version)."""
    return run.call(0, version, {
        "transactional_id": transactional_id, "acks": acks, "timeout": 30000,
        "topic_data": [{"name": topic, "partition_data": [{"index": partition, "records": batch}]}],
    }, record=record, label=label, conn=conn)


def records(values: Sequence[str], *, keys: Sequence[str | None] | None = None, **kwargs: Any) -> bytes:
    keys = keys if keys is not None else [None] * len(values)
    return make_batch([(k.encode() if k is not None else None, v.encode()) for k, v in zip(keys, values)],
                      timestamp_ms=kwargs.pop("timestamp_ms", TS), **kwargs)


def fetch(run: Run, topic: str, offset: int = 0, *, partition: int = 0, version: int = 11,
          isolation_level: int = 0, max_wait_ms: int = 0, record: bool = True, label: str | None = None) -> Any:
    """Fetch one partition (v11: the newest by topic name; Java and librdkafka send v12+ and v16)."""
    return run.call(1, version, {
        "replica_id": -1, "max_wait": max_wait_ms, "min_bytes": 1, "max_bytes": 52428800,
        "isolation_level": isolation_level, "session_id": 0, "session_epoch": -1,
        "topics": [{"topic": topic, "partitions": [{
            "partition": partition, "current_leader_epoch": -1, "fetch_offset": offset,
            "log_start_offset": -1, "partition_max_bytes": 1048576}]}],
        "forgotten_topics_data": [], "rack_id": "",
    }, record=record, label=label)


def find_coordinator(run: Run, key: str, key_type: int = 0, *, record: bool = False) -> Any:
    """FindCoordinator v4 (batched keys), waiting until the coordinator is available (Kafka creates
    __consumer_offsets / __transaction_state on first use and answers COORDINATOR_NOT_AVAILABLE
    until then)."""
    def ask():
        response = run.call(10, 4, {"key_type": key_type, "coordinator_keys": [key]}, record=False)
        return response if response.coordinators[0].error_code == 0 else None
    response = run.wait_until(ask, timeout=60, interval=0.1)
    if key_type == 1:
        # Likewise the transaction coordinator's partition of __transaction_state.
        def txn_ready():
            described = run.call(65, 0, {"transactional_ids": [key]}, record=False)
            states = getattr(described, "transaction_states", None)
            return states is None or states[0].error_code not in RETRIABLE_GROUP
        run.wait_until(txn_ready, timeout=60, interval=0.1)
    if key_type == 0:
        # The coordinator answers COORDINATOR_LOAD_IN_PROGRESS / NOT_AVAILABLE until its partition of
        # __consumer_offsets is loaded: wait for a DescribeGroups that gets past that (clients retry).
        run.wait_until(lambda: run.call(15, 5, {"groups": [key], "include_authorized_operations": False},
                                        record=False).groups[0].error_code not in RETRIABLE_GROUP, timeout=60, interval=0.1)
    if record:
        run.record("FindCoordinator v4", response)
    return response


RETRIABLE_GROUP = {14, 15, 16}


# COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR, CONCURRENT_TRANSACTIONS
RETRIABLE = {14, 15, 16, 51}


def init_producer_id(run: Run, transactional_id: str | None, *, version: int = 4, timeout_ms: int = 60000,
                     record: bool = True, label: str | None = None, conn: str = "main", **fields: Any) -> Any:
    """InitProducerId, retried as clients retry it (Kafka allocates producer ids from the controller in
    blocks and answers COORDINATOR_LOAD_IN_PROGRESS while it fetches the first); the answer that
    ends the retries is recorded."""
    body = {"transactional_id": transactional_id, "transaction_timeout": timeout_ms, "producer_id": -1,
            "producer_epoch": -1, **fields}

    def ask():
        response = run.call(22, version, body, record=False, conn=conn)
        return None if response.error_code in RETRIABLE else response

    response = run.wait_until(ask, timeout=60, interval=0.1)
    if record:
        run.record(label or f"InitProducerId v{version}", response)
    return response


def read_all(run: Run, topic: str, *, isolation_level: int = 0, partition: int = 0, label: str | None = None) -> None:
    """Fetch from offset 0 until the end a consumer would stop at (the LSO for read_committed, else
    the high watermark), as a consumer does, and record what it read: the batches, the aborted
    transactions named, the last answer's offsets. A broker may answer a fetch with fewer batches
    than it has (Kafka does, right after transaction markers), so single answers are not compared."""
    from tests.support.conformance import decode_batches

    offset, batches, aborted, last = 0, [], [], None
    for _ in range(50):
        response = fetch(run, topic, offset, partition=partition, isolation_level=isolation_level, record=False)
        last = response.responses[0].partitions[0]
        data = decode_batches(bytes(last.records or b""))
        batches += data
        aborted += [(a.producer_id, a.first_offset) for a in last.aborted_transactions or ()]
        end = last.last_stable_offset if isolation_level else last.high_watermark
        if data:
            offset = data[-1]["base_offset"] + data[-1]["last_offset_delta"] + 1
        if last.error_code or offset >= end:
            break
    assert last is not None
    run.note(label or f"read all ({'read_committed' if isolation_level else 'read_uncommitted'})", {
        "error_code": last.error_code, "high_watermark": last.high_watermark,
        "last_stable_offset": last.last_stable_offset, "log_start_offset": last.log_start_offset,
        "aborted_transactions": sorted(set(aborted)), "batches": batches})
