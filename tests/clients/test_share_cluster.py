"""confluent-kafka's ShareConsumer on a three-broker cluster (KIP-932 share partitions on several
brokers): records consumed across a leader move of an RF-3 topic, and across moves of the share
coordinator itself (the leader of `__share_group_state`), none acknowledged lost, none delivered
again beyond Kafka's semantics (a record acknowledged before a move is never delivered again;
every record is delivered).

Each broker reaches the share coordinator of the broker leading `__share_group_state` (as Kafka
chooses it), and the new leader of the topic's partition loads the share partition's state from it;
a broker that comes to lead `__share_group_state` loads every share partition's state from its
replica (Kafka's share coordinator load).
"""

from __future__ import annotations

import threading
import time

import pytest
from confluent_kafka import ShareConsumer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

from minibroker.admin_client import AdminClient as WireAdmin
from minibroker.testing import running_cluster
from minibroker.storage.share_state import TOPIC as SHARE_STATE
from minibroker.storage.share_state import ACKNOWLEDGED, ShareStateKey
from tests.support.share_client import FAST, lag, produce

pytestmark = pytest.mark.interop


class _Consumer:
    """An explicit-acknowledgement share consumer that accepts every record it gets."""

    def __init__(self, bootstrap: str, topic: str, group: str) -> None:
        self.consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group,
                                       "share.acknowledgement.mode": "explicit", "log_level": 3})
        self.consumer.subscribe([topic])
        self.got: list[tuple[int, int]] = []

    def poll_until(self, count: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and len({o for o, _ in self.got}) < count:
            for m in self.consumer.poll(0.5):
                assert m.error() is None, m.error()
                self.got.append((m.offset(), m.delivery_count()))
                self.consumer.acknowledge(m)
            self.consumer.commit_sync()

    def acknowledged(self) -> set[int]:
        return {o for o, _ in self.got}


def _setup(cluster, topic: str, group: str) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 3)])[topic].result()
    resource = ConfigResource("group", group, incremental_configs=[
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in FAST.items()])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result()


def test_share_consumer_across_a_leader_move(tmp_path):
    with running_cluster(brokers=3, data_dir=tmp_path / "data", default_replication_factor=3) as cluster:
        _setup(cluster, "queue", "workers")
        produce(cluster.bootstrap, "queue", 40)
        consumer = _Consumer(cluster.bootstrap, "queue", "workers")
        try:
            consumer.poll_until(20, 15)
            assert consumer.got, "nothing consumed before the leader move"
            before = len(consumer.got)
            acknowledged = consumer.acknowledged()
            other = next(b for b in (1, 2, 3) if b != cluster.leader("queue", 0))
            cluster.move_leader("queue", 0, other)
            produce(cluster.bootstrap, "queue", 20, start=40)
            consumer.poll_until(60, 30)
        finally:
            consumer.consumer.close()
        offsets = [o for o, _ in consumer.got]
        assert set(offsets) == set(range(60))
        after_move = offsets[before:]
        assert not acknowledged & set(after_move), "an acknowledged record was delivered again"


def test_share_consumer_across_moves_of_the_share_coordinator(tmp_path):
    """The share coordinator moves three times while a consumer reads: `move_coordinator` (a leader
    move of `__share_group_state`), a controlled shutdown of the broker that leads it (started again after),
    and a kill -9 of the broker that leads it right after the consumer's last acknowledgements were
    answered. After each, the topic's leader moves too, so its share partition is loaded again from
    the new coordinator: what was acknowledged before is never delivered again, every record is
    delivered, and the coordinator's state ends with every record acknowledged (lag 0)."""
    with running_cluster(brokers=3, data_dir=tmp_path / "data", default_replication_factor=3,
                         broker_session_timeout_ms=1000, broker_heartbeat_interval_ms=200) as cluster:
        _setup(cluster, "jobs", "crew")
        produce(cluster.bootstrap, "jobs", 20)
        consumer = _Consumer(cluster.bootstrap, "jobs", "crew")
        down = None
        try:
            consumer.poll_until(20, 15)
            assert consumer.acknowledged() == set(range(20))
            for step, how in enumerate(("move", "stop", "kill")):
                if down is not None:
                    cluster.start(down)
                    down = None
                acknowledged = consumer.acknowledged()
                before = len(consumer.got)
                coordinator = cluster.leader(SHARE_STATE, 0)
                if how == "move":
                    cluster.move_coordinator(share_group="crew", broker=next(b for b in (1, 2, 3) if b != coordinator))
                else:
                    down = coordinator
                    cluster.stop(coordinator, kill=how == "kill")  # a stop moves its leaderships first
                deadline = time.monotonic() + 10  # a killed leader: until the controller fences it
                while cluster.leader(SHARE_STATE, 0) in (coordinator, -1) and time.monotonic() < deadline:
                    time.sleep(0.05)
                assert cluster.leader(SHARE_STATE, 0) not in (coordinator, -1)
                first = 20 + 20 * step
                produce(cluster.bootstrap, "jobs", 10, start=first)
                consumer.poll_until(first + 10, 20)
                # The topic's leader moves: its share partition is loaded from the new coordinator.
                others = [b for b in (1, 2, 3) if b not in (cluster.leader("jobs", 0), down)]
                cluster.move_leader("jobs", 0, others[0])
                produce(cluster.bootstrap, "jobs", 10, start=first + 10)
                consumer.poll_until(first + 20, 20)
                again = acknowledged & {o for o, _ in consumer.got[before:]}
                assert not again, f"acknowledged before the {how}, delivered again: {sorted(again)}"
        finally:
            consumer.consumer.close()
        assert consumer.acknowledged() == set(range(80))
        lags = []
        for node in (b for b in (1, 2, 3) if b != down):  # the group's coordinator answers, not the others
            with WireAdmin(cluster.broker_bootstrap(node)) as admin:
                lags.append(lag(admin, "crew"))
        assert {0: 0} in lags, lags


def test_java_share_consumer_across_a_leader_move(tmp_path, java):
    """Java's KafkaShareConsumer (MiniClient share-consume, the session's JVM) across a leader move
    of an RF-3 topic: it follows the partition to its new leader (ShareFetch at the old leader is
    answered NOT_LEADER_OR_FOLLOWER with the new leader's address), every record is delivered, and
    none the share coordinator recorded as acknowledged before the move is delivered again."""
    with running_cluster(brokers=3, data_dir=tmp_path / "data", default_replication_factor=3) as cluster:
        _setup(cluster, "tasks", "javas")
        produce(cluster.bootstrap, "tasks", 40)
        topic_id = cluster.in_cluster(lambda: cluster.controller.image.topics.by_name["tasks"].topic_id)
        key = ShareStateKey("javas", topic_id, 0)
        out: dict[str, list[dict]] = {}
        consumer = threading.Thread(target=lambda: out.update(
            lines=java.call(["share-consume", cluster.bootstrap, "tasks", "javas", 60], timeout=90)))
        consumer.start()
        try:
            deadline = time.monotonic() + 60
            acknowledged: set[int] = set()
            while len(acknowledged) < 20 and time.monotonic() < deadline and consumer.is_alive():
                time.sleep(0.05)
                acknowledged = cluster.in_cluster(lambda: _acknowledged(cluster, key))
            assert len(acknowledged) >= 20, f"the Java share consumer acknowledged {sorted(acknowledged)}"
            other = next(b for b in (1, 2, 3) if b != cluster.leader("tasks", 0))
            cluster.move_leader("tasks", 0, other)
            produce(cluster.bootstrap, "tasks", 20, start=40)
        finally:
            consumer.join(120)
        assert "lines" in out, "MiniClient share-consume failed"
        offsets = [line["offset"] for line in out["lines"] if line["type"] == "record"]
        assert set(offsets) == set(range(60))
        again = [o for o in sorted(acknowledged) if offsets.count(o) > 1]
        assert not again, f"acknowledged before the move, delivered again: {again}"
        assert cluster.in_cluster(lambda: _acknowledged(cluster, key)) == set(range(60))


def _acknowledged(cluster, key: ShareStateKey) -> set[int]:
    """The offsets the share coordinator holds as acknowledged: those below the share-partition
    start offset (the consumer accepts every record) and those of ACKNOWLEDGED state batches."""
    registration = cluster.runtime.controller.image.partition(SHARE_STATE, 0)
    leader = cluster.runtime.broker(registration.leader) if registration is not None else None
    state = leader.local_share_coordinator.store.states.get(key) if leader is not None else None
    if state is None:
        return set()
    done = set(range(max(state.start_offset, 0)))
    for batch in state.batches:
        if batch.delivery_state == ACKNOWLEDGED:
            done.update(range(batch.first_offset, batch.last_offset + 1))
    return done
