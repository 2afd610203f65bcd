"""Quotas per broker on a cluster of three, as Kafka's are (docs/cluster.md, "Quotas per broker").

Each broker enforces client quotas on what it receives, with its own sensors:

- a byte-rate quota: a confluent-kafka producer whose partitions are led by three brokers sends, in
  one burst, what one broker would throttle, unthrottled (each broker sees a third of it); a second
  producer sending the same bytes to one broker is throttled by that broker only; once each broker's
  own share passes the quota, each of the three throttles it (the throttle times librdkafka reports
  per broker, and each broker's throttle-time metric);
- the producer-id quota (KIP-936's stated limitation): N new producer ids per window per broker, so
  a client whose producers reach three brokers registers up to 3N;
- the KIP-257 partition-proportional example callback: every broker's callback is told the whole
  cluster on each leader change (updateClusterMetadata) and scales a quota by the partitions its own
  broker leads; a move_leader moves the limits of the live sensors on the brokers that lost and
  gained the leadership.

Rates are measured over the quota window (11 samples of 1 s: at least 10 s), so a burst sent within
a few seconds is measured against that window whatever the machine's speed; nothing waits out a
throttle.
"""

from __future__ import annotations

import math
import uuid

import pytest

from minibroker.admin_client import AdminClient
from minibroker.protocol.entities import to_ms
from minibroker.protocol.records import encode_batch
from minibroker.testing import running_cluster

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Producer  # noqa: E402

pytestmark = pytest.mark.interop

QUOTA = 1000.0  # bytes/s: over a 10 s window, one broker lets a burst of about 10 KB through
VALUE = b"v" * 500
PID_RATE = 2  # new producer ids per window, per broker
PID_QUOTA_ERROR = 19  # NOT_ENOUGH_REPLICAS, producer.id.quota.error.code's default


def _topic(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _alter_quota(bootstrap: str, entity: list[dict], key: str, value: float) -> None:
    with AdminClient(bootstrap) as admin:
        response = admin.call(49, {"entries": [{"entity": entity,
                                                "ops": [{"key": key, "value": value, "remove": False}]}],
                                   "validate_only": False})
        assert response.entries[0].error_code == 0, response.entries[0].error_message


def _create_led_by(cluster, topic: str, leaders: list[int]) -> None:
    """A topic with one partition per entry of `leaders`, partition p led by leaders[p]."""
    with AdminClient(cluster.broker_bootstrap(1)) as admin:
        response = admin.call(19, {"topics": [{"name": topic, "num_partitions": len(leaders),
                                               "replication_factor": -1, "assignments": [], "configs": []}],
                                   "timeout_ms": 10000, "validate_only": False})
        assert response.topics[0].error_code == 0, response.topics[0].error_message
    for partition, leader in enumerate(leaders):
        if cluster.leader(topic, partition) != leader:
            cluster.move_leader(topic, partition, leader)
    assert [cluster.leader(topic, p) for p in range(len(leaders))] == leaders


class Throttles:
    """A confluent-kafka producer that records the throttle times its brokers answer, per broker."""

    def __init__(self, cluster, client_id: str, **config) -> None:
        self.by_broker: dict[int, list[int]] = {}
        self.producer = Producer({"bootstrap.servers": cluster.bootstrap, "client.id": client_id, "acks": 1,
                                  "linger.ms": 20, "throttle_cb": self._throttled, **config})

    def _throttled(self, event) -> None:
        if event.throttle_time > 0:
            self.by_broker.setdefault(event.broker_id, []).append(event.throttle_time)

    def send(self, topic: str, partitions: list[int], records: int) -> None:
        failed = []
        for partition in partitions:
            for _ in range(records):
                self.producer.produce(topic, VALUE, partition=partition,
                                      on_delivery=lambda err, msg: err is not None and failed.append(err))
        assert self.producer.flush(20) == 0 and not failed, failed[:3]
        self.producer.poll(0)  # the throttle callbacks of the last responses

    def throttled_brokers(self) -> set[int]:
        return set(self.by_broker)


def _produce_metrics(cluster, node_id: int, client_id: str) -> tuple[float | None, float]:
    """Broker `node_id`'s produce quota for `client_id` (its limit) and throttle-time average (NaN:
    never throttled in the metric's window)."""
    broker = cluster.broker(node_id)

    def read():
        manager = broker.quotas.produce
        throttle = [value for group, name, tags, value in manager.metrics_snapshot(broker.clock.monotonic_ms())
                    if name == "throttle-time" and tags.get("client-id") == client_id]
        return manager.quota_limit("ANONYMOUS", client_id), (throttle[0] if throttle else math.nan)

    return cluster.in_cluster(read)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with running_cluster(3, tmp_path_factory.mktemp("quotas"), default_replication_factor=3,
                         min_insync_replicas=1, producer_id_quota_window_size_seconds="60") as running:
        yield running


def test_a_client_spread_over_three_brokers_gets_each_brokers_quota(cluster):
    """Three brokers each grant the byte-rate quota: 3 x 5 KB in a burst passes everywhere, while
    the same 15 KB to one broker is throttled there; then each broker throttles its own share."""
    topic = _topic("spread")
    _create_led_by(cluster, topic, [1, 2, 3])
    spread, single = f"spread-{uuid.uuid4().hex[:6]}", f"single-{uuid.uuid4().hex[:6]}"
    for client_id in (spread, single):
        _alter_quota(cluster.broker_bootstrap(1), [{"entity_type": "client-id", "entity_name": client_id}],
                     "producer_byte_rate", QUOTA)

    producer = Throttles(cluster, spread)
    producer.send(topic, [0, 1, 2], 10)  # 5 KB to each broker: 15 KB in all
    assert producer.throttled_brokers() == set()
    for node in (1, 2, 3):
        limit, throttle = _produce_metrics(cluster, node, spread)
        assert limit == QUOTA and math.isnan(throttle)  # each broker holds the whole quota

    one_broker = Throttles(cluster, single)
    one_broker.send(topic, [1], 30)  # the same 15 KB, all to broker 2
    assert one_broker.throttled_brokers() == {2}
    assert not math.isnan(_produce_metrics(cluster, 2, single)[1])
    assert all(math.isnan(_produce_metrics(cluster, node, single)[1]) for node in (1, 3))

    producer.send(topic, [0, 1, 2], 30)  # 15 KB more per broker: each one's own share is over
    assert producer.throttled_brokers() == {1, 2, 3}
    for node in (1, 2, 3):
        limit, throttle = _produce_metrics(cluster, node, spread)
        assert limit == QUOTA and throttle > 0


def _init_pid(client: AdminClient) -> int:
    init = client.call(22, {"transactional_id": None, "transaction_timeout": 60000, "producer_id": -1,
                            "producer_epoch": -1})
    assert init.error_code == 0
    return init.producer_id


def _send_as_new_producer(bootstrap: str, topic: str, partition: int) -> tuple[int, int]:
    """A fresh producer id sends one record to `bootstrap`'s broker: (error code, throttle ms)."""
    with AdminClient(bootstrap) as client:
        batch = encode_batch([(b"k", b"v")], 1_700_000_000_000, producer_id=_init_pid(client), producer_epoch=0,
                             base_sequence=0)
        response = client.call(0, {"transactional_id": None, "acks": -1, "timeout": 5000,
                                   "topic_data": [{"name": topic, "partition_data": [{"index": partition,
                                                                                       "records": batch}]}]},
                               version=9)
    return int(response.responses[0].partition_responses[0].error_code), to_ms(response.throttle_time)


def test_the_producer_id_quota_counts_per_broker(cluster):
    """producer_ids_rate N: two idempotent producers, each writing to partitions led by all three
    brokers, are admitted by each broker (3N registrations in all); a third new id is then over the
    quota on every broker."""
    topic = _topic("pids")
    _create_led_by(cluster, topic, [1, 2, 3])
    quotas = {node: cluster.broker(node).pid_quota for node in (1, 2, 3)}
    admitted = {node: quota.admitted_total for node, quota in quotas.items()}
    rejected = {node: quota.rejected_total for node, quota in quotas.items()}
    _alter_quota(cluster.broker_bootstrap(1), [{"entity_type": "user", "entity_name": "ANONYMOUS"}],
                 "producer_ids_rate", PID_RATE)

    for _ in range(PID_RATE):
        producer = Producer({"bootstrap.servers": cluster.bootstrap, "enable.idempotence": True, "linger.ms": 5})
        for partition in (0, 1, 2):
            producer.produce(topic, b"v", partition=partition)
        assert producer.flush(20) == 0
    assert {node: quotas[node].admitted_total - admitted[node] for node in quotas} == {1: PID_RATE, 2: PID_RATE,
                                                                                      3: PID_RATE}
    for node in (1, 2, 3):  # partition node-1 is led by broker `node`
        code, throttle = _send_as_new_producer(cluster.broker_bootstrap(node), topic, node - 1)
        assert code == PID_QUOTA_ERROR and throttle > 0
        assert quotas[node].rejected_total - rejected[node] == 1


def test_the_partition_proportional_callback_follows_each_brokers_leaderships(tmp_path):
    """KIP-257's example callback (scope=partition) on three brokers: each limit is the value times
    the partitions of the user's topics that broker leads; a move_leader changes the live limits of
    the brokers that lost and gained the partition, and every broker's callback saw the move; a
    broker stopped and started again, and ElectLeaders, move them too."""
    topic = _topic("scaled")
    properties = {"client.quota.callback.class":
                  "minibroker.quotas.examples.partition_quota:PartitionQuotaCallback",
                  "client.quota.callback.partition.topics.ANONYMOUS": "scaled-.*"}
    with running_cluster(3, tmp_path, properties=properties, default_replication_factor=3,
                         min_insync_replicas=1) as cluster:
        _create_led_by(cluster, topic, [1, 1, 2, 3])
        _alter_quota(cluster.broker_bootstrap(1), [{"entity_type": "user", "entity_name": "ANONYMOUS"}],
                     "producer_byte_rate", QUOTA)
        client_id = f"scaled-{uuid.uuid4().hex[:6]}"
        Throttles(cluster, client_id).send(topic, [0, 1, 2, 3], 1)  # live sensors on every broker

        def limits(*nodes: int) -> dict[int, list[float | None]]:
            def read(node):
                manager = cluster.broker(node).quotas.produce
                return [bound for tags, bound in manager.sensor_bounds() if tags.get("client-id") == client_id
                        or tags.get("partitions-of") == "ANONYMOUS"]
            return {node: cluster.in_cluster(read, node) for node in nodes or (1, 2, 3)}

        def counts(*nodes: int) -> dict[int, tuple[int, int]]:
            return {node: cluster.in_cluster(lambda n=node: cluster.broker(n).quotas.callback.counts["ANONYMOUS"])
                    for node in nodes or (1, 2, 3)}

        assert counts() == {1: (2, 4), 2: (1, 4), 3: (1, 4)}
        assert limits() == {1: [2 * QUOTA], 2: [QUOTA], 3: [QUOTA]}

        cluster.move_leader(topic, 0, 3)
        assert counts() == {1: (1, 4), 2: (1, 4), 3: (2, 4)}
        assert limits() == {1: [QUOTA], 2: [QUOTA], 3: [2 * QUOTA]}

        cluster.move_leader(topic, 2, 3)  # broker 2 leads none: it still grants one partition's worth
        assert counts() == {1: (1, 4), 2: (0, 4), 3: (3, 4)}
        assert limits() == {1: [QUOTA], 2: [QUOTA], 3: [3 * QUOTA]}

        # A controlled stop of broker 3 moves its three leaderships to 1 and 2: their callbacks
        # follow; started again, broker 3's callback learns the cluster as it is then.
        cluster.stop(3)
        led = [cluster.leader(topic, p) for p in range(4)]
        assert 3 not in led
        expected = {node: (led.count(node), 4) for node in (1, 2)}
        assert counts(1, 2) == expected
        assert limits(1, 2) == {node: [max(here, 1) * QUOTA] for node, (here, _) in expected.items()}
        cluster.start(3)
        led = [cluster.leader(topic, p) for p in range(4)]
        assert counts() == {node: (led.count(node), 4) for node in (1, 2, 3)}

        # ElectLeaders (preferred) gives each partition back to its first replica: every callback follows.
        preferred = [cluster.replicas(topic, p)[0] for p in range(4)]
        assert preferred != led
        with AdminClient(cluster.broker_bootstrap(1)) as admin:
            response = admin.call(43, {"election_type": 0, "timeout_ms": 10000,
                                       "topic_partitions": [{"topic": topic, "partitions": [0, 1, 2, 3]}]})
            assert response.error_code == 0
        assert [cluster.leader(topic, p) for p in range(4)] == preferred
        assert counts() == {node: (preferred.count(node), 4) for node in (1, 2, 3)}
