"""Real clients against both brokers: confluent-kafka (librdkafka), kafka-python, aiokafka and the
Java client drive the same story, and what each client observed is compared, normalised as the raw
scenarios' answers are (wall-clock timestamps, ids).

The story, one scenario per client library (`clients/<library>`):
- produce six keyed records with headers and CreateTime timestamps to two partitions, and one to a
  LogAppendTime topic: the offsets, timestamps and timestamp types the delivery reports give;
- a record over the topic's max.message.bytes: the error the client raises;
- a consumer group reads the six back and commits: the records as read (offsets, timestamps and
  their types, headers, the leader epoch where the client shows it) and the committed offsets;
- a group of two consumers (range assignor) on four partitions: the assignment once both have
  partitions (which member gets which half depends on member ids the broker picks: the halves are
  compared, not who got them);
- transactions committed, aborted, committed: the offsets delivered, then what a read_committed and
  a read_uncommitted consumer read;
- a transactional producer fenced by a second one with its transactional id: the errors raised;
- a fetch from an offset past the end with no reset policy: the error raised.
Each step's exception, if any, is recorded by its class name (its message, which names ids and
offsets in each client's words, is not compared).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any, Callable

from tests.conformance.corpus import TS, create_topic
from tests.support.conformance import Run, scenario

# Consumers join in seconds: Kafka's minimum session timeout is 6 s, and a member that must rejoin
# learns of a rebalance on its next heartbeat. A deadline, not a wait: a story ends as soon as its
# client has what it waits for; 60 s leaves room for a Kafka JVM on a loaded 2-core machine (the
# suite runs on two workers), where a group's first read once took longer than 30 s.
SESSION_MS = 6000
HEARTBEAT_MS = 300
DEADLINE_S = 60

Records = list[dict[str, Any]]


def _messages() -> list[tuple[int, str, str, list[tuple[str, bytes]], int]]:
    """(partition, key, value, headers, CreateTime) of the six records every client produces."""
    return [(i % 2, f"k{i}", f"v{i}", [("h", str(i).encode())], TS + i) for i in range(6)]


def _sorted(records: Records) -> Records:
    return sorted(records, key=lambda r: (r["partition"], r["offset"]))


def _halves(assignment: list[list[int]]) -> list[list[int]]:
    return sorted(sorted(a) for a in assignment)


def _deadline() -> float:
    return time.monotonic() + DEADLINE_S


# Exceptions that are the story's own bugs, never a client's answer: they fail the scenario (a
# harness error) instead of being recorded alike for both brokers.
HARNESS_ERRORS = (TypeError, AttributeError, NameError, ImportError, KeyError, IndexError, AssertionError)


def _step(run: Run, label: str, fn: Callable[[], Any]) -> None:
    """Run one step of the story and note what the client observed, or the exception it raised."""
    try:
        run.note(label, fn())
    except HARNESS_ERRORS:
        raise
    except Exception as exc:  # a client's error is an observation: compared by its class
        run.note(label, {"raised": type(exc).__name__})


class _Topics:
    """The story's topics, created (and waited for) before any client runs."""

    def __init__(self, run: Run) -> None:
        self.records, self.log_append, self.small = run.name("t"), run.name("lat"), run.name("small")
        self.pair, self.txn = run.name("pair"), run.name("txn")
        create_topic(run, self.records, 2)
        create_topic(run, self.log_append, 1, {"message.timestamp.type": "LogAppendTime"})
        create_topic(run, self.small, 1, {"max.message.bytes": "1000"})
        create_topic(run, self.pair, 4)
        create_topic(run, self.txn, 2)


def _story(run: Run, client: Any) -> None:
    topics = _Topics(run)
    group, pair_group = run.name("g"), run.name("pair-g")
    _step(run, "produce", lambda: client.produce(topics.records, _messages()))
    _step(run, "produce to a LogAppendTime topic", lambda: client.produce(topics.log_append, [(0, "k", "v", [], TS)]))
    _step(run, "produce over max.message.bytes",
          lambda: client.produce(topics.small, [(0, None, "x" * 3000, [], TS)], idempotent=False))
    _step(run, "group reads and commits", lambda: client.group_read(topics.records, group, 6, 2))
    _step(run, "read the LogAppendTime topic", lambda: client.read(topics.log_append, 1, "read_uncommitted"))
    _step(run, "a group of two", lambda: client.group_of_two(topics.pair, pair_group, 4))
    _step(run, "transactions: commit 2, abort 1, commit 1",
          lambda: client.transactions(topics.txn, run.name("txn-id"), [("commit", 2), ("abort", 1), ("commit", 1)]))
    _step(run, "read_committed", lambda: client.read(topics.txn, 2, "read_committed"))
    _step(run, "read_uncommitted", lambda: client.read(topics.txn, 2, "read_uncommitted"))
    _step(run, "a fenced producer", lambda: client.fenced(topics.txn, run.name("fenced-id")))
    _step(run, "fetch past the end, no reset policy", lambda: client.out_of_range(topics.records))


# ---- confluent-kafka (librdkafka) -------------------------------------------------------------------

class Confluent:
    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap

    def _producer(self, **config: Any):
        from confluent_kafka import Producer

        return Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 5, "acks": "all", **config})

    def _consumer(self, **config: Any):
        from confluent_kafka import Consumer

        return Consumer({"bootstrap.servers": self.bootstrap, "enable.auto.commit": False,
                         "auto.offset.reset": "earliest", "session.timeout.ms": SESSION_MS,
                         "heartbeat.interval.ms": HEARTBEAT_MS, "partition.assignment.strategy": "range",
                         **config})

    @staticmethod
    def _delivered(results: list, index: int) -> Callable:
        def callback(err, msg) -> None:
            if err is not None:
                results[index] = {"error": err.name()}
            else:
                kind, ts = msg.timestamp()
                results[index] = {"partition": msg.partition(), "offset": msg.offset(),
                                  "timestamp_type": kind, "timestamp": ts}
        return callback

    def _send(self, producer, topic: str, messages, results: list, first: int = 0) -> None:
        for i, (partition, key, value, headers, ts) in enumerate(messages):
            producer.produce(topic, value=value, key=key, partition=partition, headers=headers, timestamp=ts,
                             on_delivery=self._delivered(results, first + i))

    def produce(self, topic: str, messages, idempotent: bool = True) -> list:
        producer = self._producer(**{"enable.idempotence": idempotent})
        results: list = [None] * len(messages)
        self._send(producer, topic, messages, results)
        if producer.flush(DEADLINE_S):
            raise TimeoutError("undelivered after the deadline")
        return results

    @staticmethod
    def _record(msg) -> dict[str, Any]:
        kind, ts = msg.timestamp()
        return {"partition": msg.partition(), "offset": msg.offset(), "key": msg.key(), "value": msg.value(),
                "headers": [[k, v] for k, v in msg.headers() or ()], "timestamp_type": kind, "timestamp": ts}

    def group_read(self, topic: str, group: str, count: int, partitions: int) -> dict[str, Any]:
        from confluent_kafka import TopicPartition

        consumer = self._consumer(**{"group.id": group})
        try:
            consumer.subscribe([topic])
            records: Records = []
            deadline = _deadline()
            while len(records) < count and time.monotonic() < deadline:
                for msg in consumer.consume(100, 0.2):
                    if msg.error():
                        raise RuntimeError(msg.error().name())
                    records.append(self._record(msg))
            consumer.commit(asynchronous=False)
            committed = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=10)
            return {"records": _sorted(records), "committed": sorted([tp.partition, tp.offset] for tp in committed)}
        finally:
            consumer.close()

    def read(self, topic: str, partitions: int, isolation: str) -> Records:
        from confluent_kafka import OFFSET_BEGINNING, KafkaError, TopicPartition

        consumer = self._consumer(**{"group.id": f"{topic}-{isolation}", "isolation.level": isolation,
                                     "enable.partition.eof": True})
        try:
            consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
            records: Records = []
            at_end: set[int] = set()
            deadline = _deadline()
            while len(at_end) < partitions and time.monotonic() < deadline:
                for msg in consumer.consume(100, 0.2):
                    if msg.error() and msg.error().code() == KafkaError._PARTITION_EOF:
                        at_end.add(msg.partition())
                    elif msg.error():
                        raise RuntimeError(msg.error().name())
                    else:
                        records.append(self._record(msg))
            return _sorted(records)
        finally:
            consumer.close()

    def group_of_two(self, topic: str, group: str, partitions: int) -> list[list[int]]:
        members = [self._consumer(**{"group.id": group}) for _ in range(2)]
        try:
            members[0].subscribe([topic])
            deadline = _deadline()
            while not members[0].assignment() and time.monotonic() < deadline:
                members[0].poll(0.1)
            members[1].subscribe([topic])
            while time.monotonic() < deadline:
                for m in members:
                    m.poll(0.05)
                owned = [[tp.partition for tp in m.assignment()] for m in members]
                if all(owned) and sorted(p for ps in owned for p in ps) == list(range(partitions)):
                    return _halves(owned)
            raise TimeoutError("the group of two did not settle")
        finally:
            for m in members:
                m.close()

    def transactions(self, topic: str, txn_id: str, plan: list[tuple[str, int]]) -> list:
        producer = self._producer(**{"transactional.id": txn_id})
        producer.init_transactions(DEADLINE_S)
        outcomes = []
        for n, (action, count) in enumerate(plan):
            producer.begin_transaction()
            results: list = [None] * count
            self._send(producer, topic, [(i % 2, f"{n}-{i}", f"{action}-{n}-{i}", [], TS) for i in range(count)], results)
            producer.flush(DEADLINE_S)
            if action == "commit":
                producer.commit_transaction(DEADLINE_S)
            else:
                producer.abort_transaction(DEADLINE_S)
            outcomes.append({"action": action, "delivered": results})
        return outcomes

    def fenced(self, topic: str, txn_id: str) -> dict[str, Any]:
        from confluent_kafka import KafkaException

        first = self._producer(**{"transactional.id": txn_id})
        first.init_transactions(DEADLINE_S)
        first.begin_transaction()
        first.produce(topic, value="zombie", partition=0)
        first.flush(DEADLINE_S)
        second = self._producer(**{"transactional.id": txn_id})
        second.init_transactions(DEADLINE_S)
        second.begin_transaction()
        second.produce(topic, value="new", partition=0)
        second.commit_transaction(DEADLINE_S)
        try:
            first.commit_transaction(DEADLINE_S)
            return {"first producer commits": "ok"}
        except KafkaException as exc:
            error = exc.args[0]
            return {"first producer commits": error.name(), "fatal": error.fatal()}

    def out_of_range(self, topic: str) -> dict[str, Any]:
        from confluent_kafka import TopicPartition

        consumer = self._consumer(**{"group.id": f"{topic}-oor", "auto.offset.reset": "error"})
        try:
            consumer.assign([TopicPartition(topic, 0, 1000)])
            deadline = _deadline()
            while time.monotonic() < deadline:
                msg = consumer.poll(0.2)
                if msg is not None and msg.error():
                    return {"error": msg.error().name()}
                if msg is not None:
                    return {"record": msg.offset()}
            raise TimeoutError("no error and no record")
        finally:
            consumer.close()


# ---- kafka-python ------------------------------------------------------------------------------------

class KafkaPython:
    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap

    def _consumer(self, **config: Any):
        from kafka import KafkaConsumer
        from kafka.coordinator.assignors.range import RangePartitionAssignor

        return KafkaConsumer(**{"bootstrap_servers": self.bootstrap, "enable_auto_commit": False,
                                "auto_offset_reset": "earliest", "session_timeout_ms": SESSION_MS,
                                "heartbeat_interval_ms": HEARTBEAT_MS,
                                "partition_assignment_strategy": [RangePartitionAssignor], **config})

    @staticmethod
    def _record(r) -> dict[str, Any]:
        return {"partition": r.partition, "offset": r.offset, "key": r.key, "value": r.value,
                "headers": [[k, v] for k, v in r.headers], "timestamp_type": r.timestamp_type,
                "timestamp": r.timestamp, "leader_epoch": r.leader_epoch}

    @staticmethod
    def _subscribe(consumer, topic: str) -> None:
        """Subscribe once the consumer knows the topic's partitions. Joining first, a kafka-python
        3.0 leader assigns nothing, rejoins when the metadata comes, and now and then never reads
        the SyncGroup answer of that second generation (its session then expires): seen against
        both brokers, 1 run in 10 or so; a client's race, not a broker's answer."""
        consumer.partitions_for_topic(topic)
        consumer.subscribe([topic])

    def produce(self, topic: str, messages, idempotent: bool = True) -> list:
        from kafka import KafkaProducer

        producer = KafkaProducer(bootstrap_servers=self.bootstrap, acks="all", linger_ms=5, enable_idempotence=idempotent)
        try:
            futures = [producer.send(topic, key=k.encode() if k else None, value=v.encode(), partition=p,
                                     headers=h, timestamp_ms=ts) for p, k, v, h, ts in messages]
            producer.flush(DEADLINE_S)
            out: list = []
            for f in futures:
                try:
                    m = f.get(DEADLINE_S)
                    out.append({"partition": m.partition, "offset": m.offset, "timestamp": m.timestamp})
                except Exception as exc:
                    out.append({"error": type(exc).__name__})
            return out
        finally:
            producer.close(5)

    def group_read(self, topic: str, group: str, count: int, partitions: int) -> dict[str, Any]:
        from kafka import TopicPartition

        # kafka-python 3.0's SyncGroup race (see _subscribe) leaves a consumer that never reads: a
        # consumer that read nothing in its share of the deadline is closed (nothing committed yet)
        # and a new one joins the same group; what the broker answers is still what is recorded.
        for attempt in range(3):
            consumer = self._consumer(group_id=group)
            self._subscribe(consumer, topic)
            records: Records = []
            deadline = time.monotonic() + DEADLINE_S / 3
            while len(records) < count and time.monotonic() < deadline:
                for batch in consumer.poll(timeout_ms=200).values():
                    records += [self._record(r) for r in batch]
            if records or attempt == 2:
                break
            consumer.close()
        try:
            consumer.commit()
            committed = [[p, consumer.committed(TopicPartition(topic, p))] for p in range(partitions)]
            return {"records": _sorted(records), "committed": committed}
        finally:
            consumer.close()

    def read(self, topic: str, partitions: int, isolation: str) -> Records:
        from kafka import TopicPartition

        consumer = self._consumer(group_id=None, isolation_level=isolation)
        try:
            tps = [TopicPartition(topic, p) for p in range(partitions)]
            consumer.assign(tps)
            for tp in tps:  # from offset 0, the log's start: no reset policy involved
                consumer.seek(tp, 0)
            end = consumer.end_offsets(tps)
            records: Records = []
            deadline = _deadline()
            while any(consumer.position(tp) < end[tp] for tp in tps) and time.monotonic() < deadline:
                for batch in consumer.poll(timeout_ms=200).values():
                    records += [self._record(r) for r in batch]
            return _sorted(records)
        finally:
            consumer.close()

    def group_of_two(self, topic: str, group: str, partitions: int) -> list[list[int]]:
        """Each member polls in a thread of its own, as applications run them (a member's poll
        blocks while its group rebalances), the second started once the first has its partitions;
        each knows the topic's partitions before it joins (`_subscribe`)."""
        import threading

        stop = threading.Event()
        members: list[Any] = []
        failures: list[BaseException] = []

        def poll(member) -> None:
            try:
                self._subscribe(member, topic)
                while not stop.is_set():
                    member.poll(timeout_ms=50)
            except BaseException as exc:
                failures.append(exc)

        threads: list[threading.Thread] = []

        def start() -> None:
            members.append(self._consumer(group_id=group))
            threads.append(threading.Thread(target=poll, args=(members[-1],), daemon=True))
            threads[-1].start()

        owned: list[list[int]] = []
        try:
            deadline = _deadline()
            start()
            while not members[0].assignment() and time.monotonic() < deadline and not failures:
                time.sleep(0.02)
            start()
            while time.monotonic() < deadline and not failures:
                owned = [[tp.partition for tp in m.assignment()] for m in members]
                if all(owned) and sorted(p for ps in owned for p in ps) == list(range(partitions)):
                    return _halves(owned)
                time.sleep(0.02)
            if failures:
                raise failures[0]
            raise TimeoutError(f"the group of two did not settle: {owned}")
        finally:
            stop.set()
            for t in threads:
                t.join(10)
            for m in members:
                m.close()

    def _txn_producer(self, txn_id: str):
        from kafka import KafkaProducer

        return KafkaProducer(bootstrap_servers=self.bootstrap, transactional_id=txn_id, acks="all")

    def transactions(self, topic: str, txn_id: str, plan: list[tuple[str, int]]) -> list:
        producer = self._txn_producer(txn_id)
        try:
            producer.init_transactions()
            outcomes = []
            for n, (action, count) in enumerate(plan):
                producer.begin_transaction()
                futures = [producer.send(topic, key=f"{n}-{i}".encode(), value=f"{action}-{n}-{i}".encode(),
                                         partition=i % 2, timestamp_ms=TS) for i in range(count)]
                producer.flush(DEADLINE_S)
                delivered = [{"partition": m.partition, "offset": m.offset, "timestamp": m.timestamp}
                             for m in (f.get(DEADLINE_S) for f in futures)]
                producer.commit_transaction() if action == "commit" else producer.abort_transaction()
                outcomes.append({"action": action, "delivered": delivered})
            return outcomes
        finally:
            producer.close(5)

    def fenced(self, topic: str, txn_id: str) -> dict[str, Any]:
        first, second = self._txn_producer(txn_id), None
        try:
            first.init_transactions()
            first.begin_transaction()
            first.send(topic, value=b"zombie", partition=0).get(DEADLINE_S)
            second = self._txn_producer(txn_id)
            second.init_transactions()
            second.begin_transaction()
            second.send(topic, value=b"new", partition=0)
            second.commit_transaction()
            try:
                first.commit_transaction()
                return {"first producer commits": "ok"}
            except Exception as exc:
                return {"first producer commits": type(exc).__name__}
        finally:
            first.close(0)
            if second is not None:
                second.close(5)

    def out_of_range(self, topic: str) -> dict[str, Any]:
        from kafka import TopicPartition

        consumer = self._consumer(group_id=None, auto_offset_reset="none")
        try:
            tp = TopicPartition(topic, 0)
            consumer.assign([tp])
            consumer.seek(tp, 1000)
            deadline = _deadline()
            while time.monotonic() < deadline:
                try:
                    got = consumer.poll(timeout_ms=200)
                except Exception as exc:
                    return {"raised": type(exc).__name__}
                if got:
                    return {"records": sum(len(b) for b in got.values())}
            raise TimeoutError("no error and no record")
        finally:
            consumer.close()


# ---- aiokafka ----------------------------------------------------------------------------------------

class AioKafka:
    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap

    def _consumer(self, *topics: str, **config: Any):
        from aiokafka import AIOKafkaConsumer
        from aiokafka.coordinator.assignors.range import RangePartitionAssignor

        return AIOKafkaConsumer(*topics, **{"bootstrap_servers": self.bootstrap, "enable_auto_commit": False,
                                            "auto_offset_reset": "earliest", "session_timeout_ms": SESSION_MS,
                                            "heartbeat_interval_ms": HEARTBEAT_MS,
                                            "partition_assignment_strategy": (RangePartitionAssignor,), **config})

    @staticmethod
    def _record(r) -> dict[str, Any]:
        return {"partition": r.partition, "offset": r.offset, "key": r.key, "value": r.value,
                "headers": [[k, v] for k, v in r.headers], "timestamp_type": r.timestamp_type,
                "timestamp": r.timestamp}

    @staticmethod
    def _metadata(m) -> dict[str, Any]:
        return {"partition": m.partition, "offset": m.offset, "timestamp_type": m.timestamp_type,
                "timestamp": m.timestamp}

    def produce(self, topic: str, messages, idempotent: bool = True) -> list:
        async def go():
            from aiokafka import AIOKafkaProducer

            producer = AIOKafkaProducer(bootstrap_servers=self.bootstrap, acks="all", linger_ms=5,
                                        enable_idempotence=idempotent)
            await producer.start()
            try:
                futures = [await producer.send(topic, key=k.encode() if k else None, value=v.encode(), partition=p,
                                               headers=h, timestamp_ms=ts) for p, k, v, h, ts in messages]
                out: list = []
                for f in futures:
                    try:
                        out.append(self._metadata(await f))
                    except Exception as exc:
                        out.append({"error": type(exc).__name__})
                return out
            finally:
                await producer.stop()
        return asyncio.run(go())

    def group_read(self, topic: str, group: str, count: int, partitions: int) -> dict[str, Any]:
        async def go():
            from aiokafka import TopicPartition

            consumer = self._consumer(topic, group_id=group)
            await consumer.start()
            try:
                records: Records = []
                deadline = _deadline()
                while len(records) < count and time.monotonic() < deadline:
                    for batch in (await consumer.getmany(timeout_ms=200)).values():
                        records += [self._record(r) for r in batch]
                await consumer.commit()
                committed = [[p, await consumer.committed(TopicPartition(topic, p))] for p in range(partitions)]
                return {"records": _sorted(records), "committed": committed}
            finally:
                await consumer.stop()
        return asyncio.run(go())

    def read(self, topic: str, partitions: int, isolation: str) -> Records:
        async def go():
            from aiokafka import TopicPartition

            consumer = self._consumer(isolation_level=isolation)
            await consumer.start()
            try:
                tps = [TopicPartition(topic, p) for p in range(partitions)]
                consumer.assign(tps)
                for tp in tps:  # from offset 0, the log's start: no reset policy involved
                    consumer.seek(tp, 0)
                end = await consumer.end_offsets(tps)
                records: Records = []
                deadline = _deadline()
                while time.monotonic() < deadline:
                    positions = [await consumer.position(tp) for tp in tps]
                    if all(pos >= end[tp] for pos, tp in zip(positions, tps)):
                        break
                    for batch in (await consumer.getmany(timeout_ms=200)).values():
                        records += [self._record(r) for r in batch]
                return _sorted(records)
            finally:
                await consumer.stop()
        return asyncio.run(go())

    def group_of_two(self, topic: str, group: str, partitions: int) -> list[list[int]]:
        async def go():
            members = [self._consumer(topic, group_id=group) for _ in range(2)]
            await members[0].start()
            started = [members[0]]
            try:
                deadline = _deadline()
                while not members[0].assignment() and time.monotonic() < deadline:
                    await members[0].getmany(timeout_ms=100)
                await members[1].start()
                started.append(members[1])
                while time.monotonic() < deadline:
                    for m in members:
                        await m.getmany(timeout_ms=50)
                    owned = [[tp.partition for tp in m.assignment()] for m in members]
                    if all(owned) and sorted(p for ps in owned for p in ps) == list(range(partitions)):
                        return _halves(owned)
                raise TimeoutError("the group of two did not settle")
            finally:
                for m in started:
                    await m.stop()
        return asyncio.run(go())

    def _txn_producer(self, txn_id: str):
        from aiokafka import AIOKafkaProducer

        return AIOKafkaProducer(bootstrap_servers=self.bootstrap, transactional_id=txn_id, acks="all")

    def transactions(self, topic: str, txn_id: str, plan: list[tuple[str, int]]) -> list:
        async def go():
            producer = self._txn_producer(txn_id)
            await producer.start()
            try:
                outcomes = []
                for n, (action, count) in enumerate(plan):
                    await producer.begin_transaction()
                    futures = [await producer.send(topic, key=f"{n}-{i}".encode(), value=f"{action}-{n}-{i}".encode(),
                                                   partition=i % 2, timestamp_ms=TS) for i in range(count)]
                    delivered = [self._metadata(await f) for f in futures]
                    if action == "commit":
                        await producer.commit_transaction()
                    else:
                        await producer.abort_transaction()
                    outcomes.append({"action": action, "delivered": delivered})
                return outcomes
            finally:
                await producer.stop()
        return asyncio.run(go())

    def fenced(self, topic: str, txn_id: str) -> dict[str, Any]:
        async def go():
            first = self._txn_producer(txn_id)
            await first.start()
            second = None
            try:
                await first.begin_transaction()
                await first.send_and_wait(topic, b"zombie", partition=0)
                second = self._txn_producer(txn_id)
                await second.start()
                await second.begin_transaction()
                await second.send_and_wait(topic, b"new", partition=0)
                await second.commit_transaction()
                try:
                    await first.commit_transaction()
                    return {"first producer commits": "ok"}
                except Exception as exc:
                    return {"first producer commits": type(exc).__name__}
            finally:
                with contextlib.suppress(Exception):
                    await first.stop()
                if second is not None:
                    await second.stop()
        return asyncio.run(go())

    def out_of_range(self, topic: str) -> dict[str, Any]:
        async def go():
            from aiokafka import TopicPartition

            consumer = self._consumer(auto_offset_reset="none")
            await consumer.start()
            try:
                tp = TopicPartition(topic, 0)
                consumer.assign([tp])
                consumer.seek(tp, 1000)
                deadline = _deadline()
                while time.monotonic() < deadline:
                    try:
                        got = await consumer.getmany(timeout_ms=200)
                    except Exception as exc:
                        return {"raised": type(exc).__name__}
                    if got:
                        return {"records": sum(len(b) for b in got.values())}
                raise TimeoutError("no error and no record")
            finally:
                await consumer.stop()
        return asyncio.run(go())


@scenario("clients/confluent-kafka", apis=(0, 1, 2, 3, 8, 9, 10, 11, 12, 14, 22, 24, 26), clients=("confluent-kafka",))
def _(run: Run) -> None:
    """The story (see the module) told by confluent-kafka (librdkafka)."""
    _story(run, Confluent(run.bootstrap))


@scenario("clients/kafka-python", apis=(0, 1, 2, 3, 8, 9, 10, 11, 12, 14, 22, 24, 26), clients=("kafka-python",))
def _(run: Run) -> None:
    """The story (see the module) told by kafka-python, which also shows each record's leader epoch."""
    _story(run, KafkaPython(run.bootstrap))


@scenario("clients/aiokafka", apis=(0, 1, 2, 3, 8, 9, 10, 11, 12, 14, 22, 24, 26), clients=("aiokafka",))
def _(run: Run) -> None:
    """The story (see the module) told by aiokafka."""
    _story(run, AioKafka(run.bootstrap))


# ---- the Java client ---------------------------------------------------------------------------------

def _java(run: Run, *commands: list) -> list[dict[str, Any]]:
    """MiniClient commands (tests/java/MiniClient.java) in one JVM; its output lines, a failure
    included (an "error" line and the exit code), for the recording."""
    import json
    import subprocess

    from tests.support.java_client import JVM_OPTS

    client = run.java
    proc = subprocess.run(["java", *JVM_OPTS, "-cp", client.classpath, "MiniClient", *client._args(commands)],
                          capture_output=True, text=True, timeout=180)
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode:
        lines.append({"type": "exit", "code": proc.returncode})
    return lines


def _java_lines(lines: list[dict[str, Any]], *types: str, drop: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    return [{k: v for k, v in line.items() if k not in drop} for line in lines if line["type"] in types]


@scenario("clients/java", apis=(0, 1, 2, 3, 8, 9, 10, 11, 12, 14, 22, 24, 26, 28), clients=("java",))
def _(run: Run) -> None:
    """The story (see the module) told by the Java client (kafka-clients, through MiniClient): one
    JVM per broker runs it. Java splits a batch the broker refuses as too large and sends its
    records again in smaller batches, so the record over max.message.bytes is a batch of twenty
    small records here; the group of two is MiniClient's group-consume (two members joining one
    after another, committing as they go)."""
    topics = _Topics(run)
    group, txn_id, fenced_id = run.name("g"), run.name("txn-id"), run.name("fenced-id")
    boot = run.bootstrap
    stamps = ",".join(str(TS + i) for i in range(3))
    lines = _java(
        run,
        ["produce-timestamps", boot, topics.records, "none", stamps],
        ["produce-timestamps", boot, topics.log_append, "none", str(TS)],
        ["produce-outcome", boot, topics.small, 20, 30000],
        ["consume-isolation", boot, topics.records, 1, "read_uncommitted"],
        ["consume-isolation", boot, topics.log_append, 1, "read_uncommitted"],
        ["txn-produce", boot, topics.txn, 2, txn_id, "commit:2,abort:1,commit:1"],
        ["consume-isolation", boot, topics.txn, 2, "read_committed"],
        ["consume-isolation", boot, topics.txn, 2, "read_uncommitted"],
        ["txn-zombie", boot, topics.txn, fenced_id],
        ["produce", boot, topics.pair, 8],
        ["group-consume", boot, topics.pair, group, 8, 2],
    )
    by_command: list[list[dict[str, Any]]] = [[]]
    for line in lines:
        by_command[-1].append(line)
        if line["type"] == "done":
            by_command.append([])
    labels = ["produce", "produce to a LogAppendTime topic", "twenty records over max.message.bytes in one batch",
              "read", "read the LogAppendTime topic", "transactions: commit 2, abort 1, commit 1",
              "read_committed", "read_uncommitted", "a fenced producer", "produce to four partitions",
              "a group of two reads and commits"]
    for label, out in zip(labels, by_command):
        if label == "a group of two reads and commits":
            final = [line["partitions"] for line in out if line["type"] == "final"]
            run.note(label, {
                "final assignment": _halves(final),
                "records": _sorted(_java_lines(out, "record", drop=("member", "topic", "type"))),
                "committed": sorted([line["partition"], line["offset"]] for line in out if line["type"] == "committed"),
                "other": _java_lines(out, "error", "exit")})
        else:
            run.note(label, _java_lines(out, "produced", "failed", "record", "end", "txn", "error", "exit"))
    run.note("commands completed", len(by_command) - 1)
