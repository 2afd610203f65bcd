"""confluent-kafka's ShareConsumer on a three-broker cluster (KIP-932 share partitions on several
brokers): records consumed across a leader move of an RF-3 topic, none acknowledged lost, none
delivered again beyond Kafka's semantics (a record acknowledged before the move is never delivered
again; every record is delivered).

Each broker reaches the share coordinator of the broker leading `__share_group_state` (as Kafka
chooses it), and the new leader of the topic's partition loads the share partition's state from it.
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka import ShareConsumer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

from minibroker.testing import running_cluster
from tests.support.share_client import FAST, produce

pytestmark = pytest.mark.interop


def test_share_consumer_across_a_leader_move(tmp_path):
    with running_cluster(brokers=3, data_dir=tmp_path / "data", default_replication_factor=3) as cluster:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        admin.create_topics([NewTopic("queue", 1, 3)])["queue"].result()
        group = ConfigResource("group", "workers", incremental_configs=[
            ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in FAST.items()])
        for future in admin.incremental_alter_configs([group]).values():
            future.result()
        produce(cluster.bootstrap, "queue", 40)
        consumer = ShareConsumer({"bootstrap.servers": cluster.bootstrap, "group.id": "workers",
                                  "share.acknowledgement.mode": "explicit", "log_level": 3})
        consumer.subscribe(["queue"])
        got: list[tuple[int, int]] = []

        def poll_until(count: int, timeout: float) -> None:
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline and len({o for o, _ in got}) < count:
                for m in consumer.poll(0.5):
                    assert m.error() is None, m.error()
                    got.append((m.offset(), m.delivery_count()))
                    consumer.acknowledge(m)
                consumer.commit_sync()

        try:
            poll_until(20, 15)
            assert got, "nothing consumed before the leader move"
            before = len(got)
            acknowledged = {o for o, _ in got}
            other = next(b for b in (1, 2, 3) if b != cluster.leader("queue", 0))
            cluster.move_leader("queue", 0, other)
            produce(cluster.bootstrap, "queue", 20, start=40)
            poll_until(60, 30)
        finally:
            consumer.close()
        offsets = [o for o, _ in got]
        assert set(offsets) == set(range(60))
        after_move = offsets[before:]
        assert not acknowledged & set(after_move), "an acknowledged record was delivered again"
