"""Real consumer groups against minibroker: kafka-python, confluent-kafka and aiokafka.

For each library, one story on a 6-partition topic:
1. three members of one group join and share the partitions (two each);
2. 3,000 records are produced and consumed, each by the member that owns its partition;
3. one member commits and leaves (close), 3,000 more records are produced, and the two others take
   over its partitions and consume them;
4. every one of the 6,000 records was consumed exactly once across the group, and no partition was
   owned by two members at once (from the assignment callbacks, on one clock);
5. the broker restarts on the same data dir: the committed offsets are still there (OffsetFetch), and
   a new member of the group consumes only the 600 records produced after the restart.

Members commit what they processed synchronously after each poll and in the revoke callback (no
auto-commit), so a partition changes hands exactly at the committed position. Group timeouts are
short (session 6 s, heartbeat 1 s, max poll interval 10 s). Durations are printed, never asserted.

The same story runs with confluent-kafka's group.protocol=consumer (librdkafka's KIP-848 consumer):
the coordinator assigns, members reconcile incrementally, and the session and heartbeat interval
are the broker's (group.consumer.*).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter

import pytest

from tests.support.clients import ALL, Message
from tests.support.wire import WireClient

pytestmark = pytest.mark.interop

PARTITIONS = 6
FIRST = SECOND = 3000
AFTER_RESTART = 600
SESSION_MS, HEARTBEAT_MS, MAX_POLL_MS = 6000, 1000, 10_000
WAIT = 60.0


class Shared:
    """What all members of one test record, under one lock, on one clock."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.records: list[tuple[str, int, int, bytes]] = []  # member, partition, offset, value
        self.events: list[tuple[float, str, str, frozenset[int]]] = []  # time, member, kind, partitions

    def consumed(self, member: str, partition: int, offset: int, value: bytes) -> None:
        with self.lock:
            self.records.append((member, partition, offset, value))

    def event(self, member: str, kind: str, partitions) -> None:
        with self.lock:
            self.events.append((time.monotonic(), member, kind, frozenset(partitions)))

    def count(self, member: str | None = None) -> int:
        with self.lock:
            return sum(1 for r in self.records if member is None or r[0] == member)


class MemberThread:
    """One group member on its own thread; `assignment` follows its rebalance callbacks."""

    def __init__(self, client: str, name: str, bootstrap: str, group: str, topic: str, shared: Shared,
                 protocol: str = "classic"):
        self.client, self.name, self.bootstrap, self.protocol = client, name, bootstrap, protocol
        self.group, self.topic, self.shared = group, topic, shared
        self.assignment: set[int] = set()
        self.processed: dict[int, int] = {}  # partition -> next offset to commit
        self.committed: dict[int, int] = {}
        self.stop_requested = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name=f"{client}-{name}", daemon=True)

    def start(self) -> MemberThread:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.stop_requested.set()
        self.thread.join(timeout=60)
        assert not self.thread.is_alive(), f"{self.name} did not stop"
        if self.error is not None:
            raise self.error

    # Bookkeeping shared by the three libraries.

    def _on_assigned(self, partitions) -> None:
        partitions = set(partitions)
        self.shared.event(self.name, "assigned", partitions)
        self.assignment |= set(partitions)

    def _on_revoked(self, partitions) -> None:
        partitions = set(partitions)
        self.shared.event(self.name, "revoked", partitions)
        self.assignment -= set(partitions)

    def _processed(self, partition: int, offset: int, value: bytes) -> None:
        self.shared.consumed(self.name, partition, offset, value)
        self.processed[partition] = offset + 1

    def _to_commit(self, partitions=None) -> dict[int, int]:
        return {p: o for p, o in self.processed.items()
                if (partitions is None or p in partitions) and self.committed.get(p) != o}

    def _run(self) -> None:
        try:
            getattr(self, "_run_" + self.client.replace("-", "_"))()
        except BaseException as exc:  # reported by stop()
            self.error = exc

    def _finish(self) -> None:
        """Called after the last commit, just before close: it consumes nothing after this."""
        self.shared.event(self.name, "closed", self.assignment)
        self.assignment = set()

    # kafka-python

    def _run_kafka_python(self) -> None:
        from kafka import ConsumerRebalanceListener, KafkaConsumer, TopicPartition
        from kafka.structs import OffsetAndMetadata

        member = self
        consumer = KafkaConsumer(
            bootstrap_servers=self.bootstrap, group_id=self.group, client_id=self.name,
            enable_auto_commit=False, auto_offset_reset="earliest",
            session_timeout_ms=SESSION_MS, heartbeat_interval_ms=HEARTBEAT_MS,
            max_poll_interval_ms=MAX_POLL_MS,
        )

        def commit(partitions=None) -> None:
            offsets = member._to_commit(partitions)
            if offsets:
                consumer.commit({TopicPartition(member.topic, p): OffsetAndMetadata(o, "", -1)
                                 for p, o in offsets.items()})
                member.committed.update(offsets)

        class Listener(ConsumerRebalanceListener):
            def on_partitions_revoked(self, revoked):
                commit({tp.partition for tp in revoked})
                member._on_revoked(tp.partition for tp in revoked)

            def on_partitions_assigned(self, assigned):
                member._on_assigned(tp.partition for tp in assigned)

        # kafka-python 3.0.12 can lose a finished join when a poll() times out while its SyncGroup
        # is in flight and the rejoin was one the leader asked for itself (its topic metadata
        # arrived after its first assignment): it then never applies the assignment and stops
        # heartbeating. Fetching the topic's metadata first, and polls long enough for a join
        # round trip, keep clear of it.
        consumer.partitions_for_topic(self.topic)
        consumer.subscribe([self.topic], listener=Listener())
        try:
            while not self.stop_requested.is_set():
                for batch in consumer.poll(timeout_ms=500).values():
                    for r in batch:
                        self._processed(r.partition, r.offset, r.value)
                commit()
            commit()
            self._finish()
        finally:
            consumer.close(autocommit=False)

    # confluent-kafka

    def _run_confluent_kafka(self) -> None:
        from confluent_kafka import Consumer, TopicPartition

        member = self
        config = {
            "bootstrap.servers": self.bootstrap, "group.id": self.group, "client.id": self.name,
            "enable.auto.commit": False, "auto.offset.reset": "earliest", "max.poll.interval.ms": MAX_POLL_MS,
        }
        if self.protocol == "consumer":
            config["group.protocol"] = "consumer"  # KIP-848: the broker sets session and heartbeat
        else:
            config.update({"session.timeout.ms": SESSION_MS, "heartbeat.interval.ms": HEARTBEAT_MS})
        consumer = Consumer(config)

        def commit(partitions=None) -> None:
            offsets = member._to_commit(partitions)
            if offsets:
                consumer.commit(offsets=[TopicPartition(member.topic, p, o) for p, o in offsets.items()],
                                asynchronous=False)
                member.committed.update(offsets)

        def on_revoke(_, partitions):
            commit({tp.partition for tp in partitions})
            member._on_revoked(tp.partition for tp in partitions)

        def on_assign(_, partitions):
            member._on_assigned(tp.partition for tp in partitions)

        consumer.subscribe([self.topic], on_assign=on_assign, on_revoke=on_revoke)
        try:
            while not self.stop_requested.is_set():
                for msg in consumer.consume(num_messages=500, timeout=0.1):
                    if msg.error():
                        raise RuntimeError(msg.error())
                    self._processed(msg.partition(), msg.offset(), msg.value())
                commit()
            commit()
            self._finish()
        finally:
            consumer.close()

    # aiokafka

    def _run_aiokafka(self) -> None:
        asyncio.run(self._aiokafka())

    async def _aiokafka(self) -> None:
        from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition

        member = self
        consumer = AIOKafkaConsumer(
            bootstrap_servers=self.bootstrap, group_id=self.group, client_id=self.name,
            enable_auto_commit=False, auto_offset_reset="earliest",
            session_timeout_ms=SESSION_MS, heartbeat_interval_ms=HEARTBEAT_MS,
            max_poll_interval_ms=MAX_POLL_MS, rebalance_timeout_ms=MAX_POLL_MS,
        )

        async def commit(partitions=None) -> None:
            offsets = member._to_commit(partitions)
            if offsets:
                await consumer.commit({TopicPartition(member.topic, p): o for p, o in offsets.items()})
                member.committed.update(offsets)

        class Listener(ConsumerRebalanceListener):
            async def on_partitions_revoked(self, revoked):
                await commit({tp.partition for tp in revoked})
                member._on_revoked(tp.partition for tp in revoked)

            async def on_partitions_assigned(self, assigned):
                member._on_assigned(tp.partition for tp in assigned)

        await consumer.start()
        try:
            consumer.subscribe([self.topic], listener=Listener())
            while not self.stop_requested.is_set():
                batches = await consumer.getmany(timeout_ms=100)
                for batch in batches.values():
                    for r in batch:
                        self._processed(r.partition, r.offset, r.value)
                await commit()
            await commit()
            self._finish()
        finally:
            await consumer.stop()


def wait_until(condition, what: str, timeout: float = WAIT) -> float:
    started = time.monotonic()
    while not condition():
        assert time.monotonic() - started < timeout, f"timed out waiting for {what}"
        time.sleep(0.05)
    return time.monotonic() - started


def shares_all_partitions(members) -> bool:
    """Every partition owned once and the members balanced: a KIP-848 group reconciles member by
    member, so covering the topic is not yet the end of the rebalance."""
    owned = [set(m.assignment) for m in members]
    sizes = [len(o) for o in owned]
    return (min(sizes) > 0 and max(sizes) - min(sizes) <= 1 and sum(sizes) == PARTITIONS
            and set().union(*owned) == set(range(PARTITIONS)))


def produce(client, bootstrap: str, topic: str, prefix: str, count: int) -> set[bytes]:
    values = [b"%s-%d" % (prefix.encode(), i) for i in range(count)]
    client.produce(bootstrap, topic, [Message(i % PARTITIONS, None, v, ()) for i, v in enumerate(values)])
    return set(values)


def ownership_overlaps(events, end: float) -> list[str]:
    """Partitions held by two members at the same time, from assigned/revoked/closed events."""
    intervals: dict[int, list[tuple[float, float, str]]] = {}
    held: dict[tuple[str, int], float] = {}
    for at, member, kind, partitions in sorted(events):
        for p in partitions:
            if kind == "assigned":
                held.setdefault((member, p), at)
            elif (member, p) in held:
                intervals.setdefault(p, []).append((held.pop((member, p)), at, member))
    for (member, p), since in held.items():
        intervals.setdefault(p, []).append((since, end, member))
    problems = []
    for p, spans in intervals.items():
        spans.sort()
        for (s1, e1, m1), (s2, e2, m2) in zip(spans, spans[1:]):
            if m1 != m2 and s2 < e1:
                problems.append(f"partition {p}: {m1} until {e1:.3f}, {m2} from {s2:.3f}")
    return problems


def committed_offsets(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    from kio.schema.offset_fetch.v8.request import (
        OffsetFetchRequest, OffsetFetchRequestGroup, OffsetFetchRequestTopics)

    request = OffsetFetchRequest(groups=(OffsetFetchRequestGroup(
        group_id=group, topics=(OffsetFetchRequestTopics(name=topic, partition_indexes=tuple(range(PARTITIONS))),)),))
    with WireClient(bootstrap) as client:
        response = client.request(request)
    (answer,) = response.groups
    return {p.partition_index: p.committed_offset for t in answer.topics for p in t.partitions}


CASES = [(client, "classic") for client in ALL] + [
    (next(c for c in ALL if c.name == "confluent-kafka"), "consumer")]


@pytest.mark.parametrize("client, protocol", CASES,
                         ids=lambda c: c if isinstance(c, str) else c.name)
def test_group_shares_rebalances_and_resumes_after_restart(client, protocol, start_broker, unique):
    topic, group = unique(f"grp-{client.name}"), unique(f"g-{client.name}-{protocol}")
    shared = Shared()
    timings = {}
    with start_broker() as broker:
        client.create_topic(broker.bootstrap, topic, PARTITIONS)
        members = [MemberThread(client.name, n, broker.bootstrap, group, topic, shared, protocol).start()
                   for n in ("A", "B", "C")]
        try:
            timings["three members share the partitions"] = wait_until(
                lambda: shares_all_partitions(members), "three members to share the topic")
            assert all(len(m.assignment) == 2 for m in members)
            expected = produce(client, broker.bootstrap, topic, "first", FIRST)
            timings["first 3000 consumed"] = wait_until(lambda: shared.count() >= FIRST, "the first records")
            leaving, staying = members[2], members[:2]
            left_partitions = set(leaving.assignment)
            leaving.stop()
            timings["two members take over"] = wait_until(
                lambda: shares_all_partitions(staying), "the remaining members to take over")
            expected |= produce(client, broker.bootstrap, topic, "second", SECOND)
            timings["second 3000 consumed"] = wait_until(
                lambda: shared.count() >= FIRST + SECOND, "the second records")
        finally:
            for m in members:
                m.stop()
        end = time.monotonic()

    positions = Counter((p, o) for _, p, o, _ in shared.records)
    assert [k for k, n in positions.items() if n > 1] == [], "records consumed more than once"
    assert {v for *_, v in shared.records} == expected
    assert all(shared.count(m.name) > 0 for m in members), "every member consumed"
    taken_over = {p for name, p, _, v in shared.records if v.startswith(b"second") and name != "C"}
    assert left_partitions <= taken_over, "the leaver's partitions moved to the others"
    assert ownership_overlaps(shared.events, end) == []

    with start_broker() as broker:
        assert committed_offsets(broker.bootstrap, group, topic) == {
            p: (FIRST + SECOND) // PARTITIONS for p in range(PARTITIONS)}
        fresh = produce(client, broker.bootstrap, topic, "after-restart", AFTER_RESTART)
        before = shared.count()
        newcomer = MemberThread(client.name, "D", broker.bootstrap, group, topic, shared, protocol).start()
        try:
            timings["newcomer consumes the rest"] = wait_until(
                lambda: shared.count("D") >= AFTER_RESTART, "the newcomer to consume")
        finally:
            newcomer.stop()
    assert {v for name, *_, v in shared.records[before:] if name == "D"} == fresh
    assert shared.count("D") == AFTER_RESTART
    print(f"\n{client.name} ({protocol}): " + ", ".join(f"{k} {v:.2f}s" for k, v in timings.items()))
