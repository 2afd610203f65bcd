"""Transactional producers of confluent-kafka (librdkafka) and aiokafka against minibroker, read by
the read_committed and read_uncommitted consumers of confluent-kafka, aiokafka and kafka-python.

Each producer commits a transaction, aborts one, and commits another with the consumed offsets of a
group (send_offsets_to_transaction: TxnOffsetCommit, visible once the transaction commits); the
aborted records lie between committed ones, so a consumer that failed to drop them would return
them among the records it reads. confluent-kafka's producer is then fenced by a second instance with
its transactional.id (librdkafka raises the fatal _FENCED error). aiokafka speaks the oldest versions
(FindCoordinator v1 key type 1, InitProducerId v0, AddPartitionsToTxn v0, EndTxn v0, TxnOffsetCommit
v0, Fetch v4 with isolation_level)."""

from __future__ import annotations

import asyncio
import time

import pytest

from tests.support.clients import AioKafka, Confluent, KafkaPython

pytestmark = pytest.mark.interop


def confluent_transactions(bootstrap, topic, tid, group):
    from confluent_kafka import KafkaException, Producer, TopicPartition

    def producer():
        return Producer({"bootstrap.servers": bootstrap, "transactional.id": tid,
                         "transaction.timeout.ms": 10000})

    p = producer()
    p.init_transactions(30)
    for step, (n, commit) in enumerate([(3, True), (2, False), (2, True)]):
        p.begin_transaction()
        for i in range(n):
            key = f"cf-{step}-{i}".encode()
            p.produce(topic, key=key, value=key, partition=i % 2)
        if step == 2:
            p.send_offsets_to_transaction([TopicPartition(topic, 0, 7)], _group_metadata(bootstrap, group), 30)
        p.flush(30)  # else librdkafka's abort purges the records it has not sent yet
        (p.commit_transaction if commit else p.abort_transaction)(30)
    # A second instance fences the first: the zombie's commit fails with a fatal error.
    p.begin_transaction()
    p.produce(topic, key=b"cf-zombie", value=b"cf-zombie", partition=0)
    p.flush(10)
    second = producer()
    second.init_transactions(30)
    with pytest.raises(KafkaException) as fenced:
        p.commit_transaction(30)
    error = fenced.value.args[0]
    del p, second
    return error


def _group_metadata(bootstrap, group):
    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        return consumer.consumer_group_metadata()
    finally:
        consumer.close()


def aiokafka_transactions(bootstrap, topic, tid, group):
    async def run():
        from aiokafka import AIOKafkaProducer, TopicPartition

        p = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=tid, enable_idempotence=True)
        await p.start()
        try:
            for step, (n, commit) in enumerate([(3, True), (2, False), (2, True)]):
                await p.begin_transaction()
                for i in range(n):
                    key = f"aio-{step}-{i}".encode()
                    await p.send(topic, key=key, value=key, partition=i % 2)
                if step == 2:
                    await p.send_offsets_to_transaction({TopicPartition(topic, 1): 5}, group)
                await (p.commit_transaction() if commit else p.abort_transaction())
        finally:
            await p.stop()
    asyncio.run(run())


def keys_of(records):
    return sorted(r[2].decode() for r in records)


@pytest.mark.parametrize("txn_version", [1, 2])
def test_confluent_and_aiokafka_transactions_with_both_isolation_levels(start_broker, unique, txn_version):
    # librdkafka and aiokafka speak transactions version 1 whatever the broker finalizes: a
    # broker at version 2 serves both protocols.
    with start_broker(transaction_version=str(txn_version)) as broker:
        _transactions_with_both_isolation_levels(broker, unique)
        versions = broker.broker.metrics.request_versions
    assert max(v for (api, v) in versions if api == "end_txn") <= 4


def _transactions_with_both_isolation_levels(broker, unique):
    topic, group = unique("pytxn"), unique("pygroup")
    bs = broker.bootstrap
    Confluent().create_topic(bs, topic, 2)
    fenced = confluent_transactions(bs, topic, unique("cf"), group)
    assert fenced.fatal() and fenced.name() == "_FENCED", fenced
    aiokafka_transactions(bs, topic, unique("aio"), group)
    committed = [f"{c}-{s}-{i}" for c in ("cf", "aio") for s, n in ((0, 3), (2, 2)) for i in range(n)]
    everything = committed + [f"{c}-1-{i}" for c in ("cf", "aio") for i in range(2)] + ["cf-zombie"]
    for client in (Confluent(), AioKafka(), KafkaPython()):
        level = {"isolation_level": "read_committed"} if client.name != "confluent-kafka" else {
            "isolation.level": "read_committed"}
        got = client.consume(bs, topic, 2, len(committed), timeout=20, **level)
        assert keys_of(got) == sorted(committed), client.name
        uncommitted = {"isolation_level": "read_uncommitted"} if client.name != "confluent-kafka" else {
            "isolation.level": "read_uncommitted"}
        assert keys_of(client.consume(bs, topic, 2, len(everything), timeout=20, **uncommitted)) == sorted(
            everything), client.name
    # Offsets sent in each client's committed transaction are the group's.
    offsets = broker.broker.groups.fetch_offsets(group, [(topic, 0), (topic, 1)])
    assert [(tp, om.offset if om else None) for tp, om in offsets] == [((topic, 0), 7), ((topic, 1), 5)]


def test_what_librdkafka_and_aiokafka_do_when_fenced_or_timed_out(start_broker, unique):
    """docs/clients.md's "Transactions" table: each client's transactional producer fenced by a newer instance, and
    one whose transaction outlived transaction.timeout.ms (aborted by the broker, epoch bumped)."""
    from confluent_kafka import KafkaException, Producer

    with start_broker(transaction_abort_timed_out_transaction_cleanup_interval_ms="100") as broker:
        bs, topic = broker.bootstrap, unique("pyfence")
        Confluent().create_topic(bs, topic, 1)
        tid = unique("cf-timeout")
        p = Producer({"bootstrap.servers": bs, "transactional.id": tid, "transaction.timeout.ms": 1000})
        p.init_transactions(30)
        p.begin_transaction()
        p.produce(topic, key=b"k", value=b"v", partition=0)
        p.flush(10)
        before, deadline = broker.broker.transactions.timed_out_aborts, time.monotonic() + 20
        while broker.broker.transactions.timed_out_aborts == before and time.monotonic() < deadline:
            time.sleep(0.05)  # the broker aborts it (its thread runs the coordinator's timer)
        with pytest.raises(KafkaException) as timed_out:
            p.commit_transaction(30)
        error = timed_out.value.args[0]
        assert (error.name(), error.fatal()) == ("_FENCED", True), error
        del p

        async def aiokafka_cases():
            from aiokafka import AIOKafkaProducer
            from aiokafka.errors import KafkaError

            outcomes = {}
            zombie_id = unique("aio-zombie")
            zombie = AIOKafkaProducer(bootstrap_servers=bs, transactional_id=zombie_id)
            newer = AIOKafkaProducer(bootstrap_servers=bs, transactional_id=zombie_id)
            await zombie.start()
            try:
                await zombie.begin_transaction()
                await zombie.send_and_wait(topic, b"zombie", partition=0)
                await newer.start()
                try:
                    await zombie.send_and_wait(topic, b"late", partition=0)
                    await zombie.commit_transaction()
                    outcomes["fenced"] = None
                except KafkaError as exc:
                    outcomes["fenced"] = type(exc).__name__
            finally:
                await newer.stop()
                await zombie.stop()
            slow = AIOKafkaProducer(bootstrap_servers=bs, transactional_id=unique("aio-slow"),
                                    transaction_timeout_ms=1000)
            await slow.start()
            try:
                await slow.begin_transaction()
                await slow.send_and_wait(topic, b"slow", partition=0)
                await asyncio.sleep(1.6)
                try:
                    await slow.send_and_wait(topic, b"slow-late", partition=0)
                    await slow.commit_transaction()
                    outcomes["timed_out"] = None
                except KafkaError as exc:
                    outcomes["timed_out"] = type(exc).__name__
            finally:
                await slow.stop()
            return outcomes

        outcomes = asyncio.run(aiokafka_cases())
        assert outcomes == {"fenced": "ProducerFenced", "timed_out": "ProducerFenced"}, outcomes
