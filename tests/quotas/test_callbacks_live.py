"""KIP-257's cluster hook and its two example callbacks in a live broker, driven by a real
client (kafka-python): the callback is told the cluster at start and after every topic creation
(CreateTopics and auto-creation) and deletion; a group of client ids shares one quota; a
partition-proportional limit follows the client's partitions as topics come and go.

Throttles are asserted as present or absent where the arithmetic leaves a wide margin, never as
timings. Kafka's default window (11 x 1 s) measures a first burst over 10 to 11 s, so S bytes
against a limit of Q B/s throttle exactly when S / (10 to 11 s) > Q.
"""

from __future__ import annotations

import pytest

from minibroker.quotas.callback import DefaultQuotaCallback
from tests.support.quota_clients import RECORD, alter_quota, produce

pytestmark = pytest.mark.interop

class RecordingCallback(DefaultQuotaCallback):
    """Keeps every cluster view it is told about, and asks for no re-read."""

    def __init__(self) -> None:
        super().__init__()
        self.views = []

    def update_cluster_metadata(self, cluster) -> bool:
        self.views.append(cluster)
        return False


def views(running):
    return running.in_broker(lambda: list(running.broker.quotas.callback.views))


def layout(view) -> dict[str, list[int | None]]:
    return {t: [p.leader for p in view.partitions_for_topic(t)] for t in sorted(view.topics())}


def test_the_callback_learns_the_cluster_at_start_and_on_every_topic_change(start_broker, unique):
    """At start, then after auto-creation (Metadata), CreateTopics, CreatePartitions and
    DeleteTopics, each once: the view lists every topic's partitions, led by this node (node.id 7)."""
    from kafka import KafkaProducer
    from kafka.admin import KafkaAdminClient, NewPartitions, NewTopic

    auto, created = unique("auto"), unique("created")
    with start_broker(client_quota_callback_class="tests.quotas.test_callbacks_live:RecordingCallback",
                      num_partitions=2, node_id=7) as running:
        [start] = views(running)
        assert start.cluster_id == running.broker.cluster_id and start.controller == 7
        assert [(n.id, n.host, n.port) for n in start.nodes] == [(7, running.host, running.port)]
        assert layout(start) == {"__consumer_offsets": [7]}

        producer = KafkaProducer(bootstrap_servers=running.bootstrap)  # auto-creates via Metadata
        producer.send(auto, RECORD).get(30)
        producer.close()
        assert layout(views(running)[-1]) == {"__consumer_offsets": [7], auto: [7, 7]}

        admin = KafkaAdminClient(bootstrap_servers=running.bootstrap)
        try:
            admin.create_topics([NewTopic(created, 3, 1)])
            assert layout(views(running)[-1])[created] == [7, 7, 7]
            admin.create_partitions({created: NewPartitions(5)})
            assert layout(views(running)[-1])[created] == [7, 7, 7, 7, 7]
            admin.delete_topics([auto])
            assert layout(views(running)[-1]) == {"__consumer_offsets": [7], created: [7, 7, 7, 7, 7]}
        finally:
            admin.close()
        assert len(views(running)) == 5  # start, auto-create, create, add partitions, delete: one each


def produce_bounds(running):
    return running.in_broker(lambda: running.broker.quotas.produce.sensor_bounds())


def test_group_quota_two_client_ids_share_one_quota(start_broker, unique):
    """Group 'analytics' = client ids report-a and report-b, 2000 B/s on the group. report-a sends
    15 kB (1.4-1.5 kB/s: within the quota on its own, not throttled); report-b then sends 12 kB,
    which alone would be 1.1-1.2 kB/s, but the group's sensor now holds 27 kB, 2.5-2.7 kB/s: b is
    throttled. A client outside the group sending the same 12 kB is not. The broker holds one sensor
    for the group, limited at the group's value, and none for a or b by their own names."""
    topic = unique("grp")
    a, b, outsider = unique("report-a"), unique("report-b"), unique("other")
    with start_broker(client_quota_callback_class="minibroker.quotas.examples.group_quota:GroupQuotaCallback",
                      **{"client_quota_callback_group_analytics": f"client-id:{a},client-id:{b}"}) as running:
        alter_quota(running.bootstrap, [("user", "analytics")], "producer_byte_rate", 2000)
        assert produce(running.bootstrap, topic, a, 15) == 0
        assert produce(running.bootstrap, topic, b, 12) > 0
        assert produce(running.bootstrap, topic, outsider, 12) == 0
        bounds = produce_bounds(running)
    assert ({"user": "", "client-id": "", "group": "analytics"}, 2000.0) in bounds
    assert ({"user": "", "client-id": outsider}, None) in bounds
    assert not any(tags.get("client-id") in (a, b) for tags, _ in bounds)


def test_partition_quota_follows_the_clients_partitions(start_broker, unique):
    """ANONYMOUS uses the topics pq-<id>-*, at 1000 B/s per partition led here. With 1 partition the
    limit is 1000: 15 kB (1.4-1.5 kB/s) is throttled. Creating a 3-partition topic of its own makes
    4 partitions, and the live limit becomes 4000 without any quota change: 5 kB more (20 kB in all,
    1.8-2 kB/s) is not throttled. Deleting that topic brings the limit back to 1000: 1 kB more
    (21 kB, 1.9-2.1 kB/s) is throttled again. Growing its first topic to 2 partitions makes 2000."""
    from kafka.admin import KafkaAdminClient, NewPartitions, NewTopic

    prefix = unique("pq")
    first, more = f"{prefix}-a", f"{prefix}-more"
    with start_broker(client_quota_callback_class="minibroker.quotas.examples.partition_quota:PartitionQuotaCallback",
                      **{"client_quota_callback_partition_topics_ANONYMOUS": f"{prefix}-.*"}) as running:
        admin = KafkaAdminClient(bootstrap_servers=running.bootstrap)
        try:
            admin.create_topics([NewTopic(first, 1, 1)])
            alter_quota(running.bootstrap, [("user", "ANONYMOUS")], "producer_byte_rate", 1000)
            assert produce(running.bootstrap, first, "pq-client", 15) > 0
            tags = {"user": "ANONYMOUS", "client-id": "", "partitions-of": "ANONYMOUS"}
            assert produce_bounds(running) == [(tags, 1000.0)]

            admin.create_topics([NewTopic(more, 3, 1)])
            assert produce_bounds(running) == [(tags, 4000.0)]
            assert produce(running.bootstrap, first, "pq-client", 5) == 0

            admin.delete_topics([more])
            assert produce_bounds(running) == [(tags, 1000.0)]
            assert produce(running.bootstrap, first, "pq-client", 1) > 0

            admin.create_partitions({first: NewPartitions(2)})  # CreatePartitions moves it too
            assert produce_bounds(running) == [(tags, 2000.0)]
        finally:
            admin.close()
