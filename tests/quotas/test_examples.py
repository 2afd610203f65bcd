"""The cluster view (quotas/cluster.py) and the two example callbacks of KIP-257 (quotas/examples/),
with explicit `now`: their tags, their limits, the throttles those limits give through Kafka's
ClientQuotaManager arithmetic, and the re-reading of live limits after `update_cluster_metadata`.

Throttle arithmetic used below (Kafka's default window, 11 samples of 1 s): a first burst of S bytes
is measured over the padded 10 s, so against a limit of Q B/s the throttle is (S/10 - Q)/Q * 10 000 ms.
"""

from __future__ import annotations

import pytest

from minibroker.quotas.callback import ClientQuotaEntity, DEFAULT, QuotaType, load_callback
from minibroker.quotas.client_quota import ClientQuotaManager
from minibroker.quotas.cluster import Cluster, Node, PartitionInfo
from minibroker.quotas.examples.group_quota import GroupQuotaCallback
from minibroker.quotas.examples.partition_quota import PartitionQuotaCallback

NODES = [Node(1, "b1", 9092), Node(2, "b2", 9092), Node(3, "b3", 9092, rack="r3")]


def cluster(layout: dict[str, list[int | None]], cluster_id: str = "c") -> Cluster:
    """layout: topic -> the leader of each partition."""
    return Cluster.of(cluster_id, NODES, [
        PartitionInfo(topic, index, leader, () if leader is None else (leader,))
        for topic, leaders in layout.items() for index, leader in enumerate(leaders)
    ], controller=1)


# ---- the cluster view --------------------------------------------------------------------------


def test_cluster_lookups_over_several_brokers():
    view = cluster({"orders": [1, 2, 3, 1], "logs": [2, None]})
    assert view.topics() == {"orders", "logs"}
    assert [p.partition for p in view.partitions_for_topic("orders")] == [0, 1, 2, 3]
    assert view.partitions_for_topic("missing") == ()
    assert [(p.topic, p.partition) for p in view.partitions_for_node(1)] == [("orders", 0), ("orders", 3)]
    assert [(p.topic, p.partition) for p in view.partitions_for_node(2)] == [("logs", 0), ("orders", 1)]
    assert view.leader_for("orders", 2) == Node(3, "b3", 9092, rack="r3")
    assert view.leader_for("logs", 1) is None  # no leader
    assert view.leader_for("orders", 9) is None and view.node(4) is None


def test_cluster_views_are_immutable_values():
    a = cluster({"t": [1, 2]})
    assert a == cluster({"t": [1, 2]}) and hash(a.nodes) == hash(cluster({"t": [1, 2]}).nodes)
    assert a != cluster({"t": [2, 1]})
    with pytest.raises(AttributeError):
        a.cluster_id = "other"  # type: ignore[misc]


# ---- group quota (scenario 1) ------------------------------------------------------------------


def group_callback(**groups: str) -> GroupQuotaCallback:
    callback = GroupQuotaCallback()
    callback.configure({f"client.quota.callback.group.{name}": members for name, members in groups.items()})
    return callback


def test_group_members_share_one_sensor_and_its_throttle():
    """Two users and a client id of one group fill one sensor: 8,000 B from alice is within the
    group's 1000 B/s (0 ms), 4,000 more from bob's client makes 12,000 B over 10 s, 1,200 B/s:
    throttle (1200 - 1000) / 1000 * 10 000 = 2000 ms. A non-member sending the same is not throttled,
    and a member for a quota type the group has no value for keeps Kafka's defaults."""
    callback = group_callback(analytics="user:alice,user:bob,client-id:report")
    manager = ClientQuotaManager(QuotaType.PRODUCE, callback)
    manager.update_quota(ClientQuotaEntity.of(user="analytics"), 1000.0)
    assert manager.record_and_get_throttle_time_ms("alice", "c1", 8000, 0) == 0
    assert manager.record_and_get_throttle_time_ms("bob", "c2", 4000, 0) == 2000
    assert manager.record_and_get_throttle_time_ms("carol", "report", 1, 0) > 2000  # client-id member
    assert manager.record_and_get_throttle_time_ms("carol", "other", 4000, 0) == 0
    assert sorted(map(str, manager.sensor_bounds())) == sorted(map(str, [
        ({"user": "", "client-id": "", "group": "analytics"}, 1000.0),
        ({"user": "", "client-id": "other"}, None),
    ]))
    assert callback.quota_metric_tags(QuotaType.FETCH, "alice", "c1") == {"user": "", "client-id": "c1"}


def test_group_value_changes_apply_to_the_live_sensor_and_removal_returns_members_to_defaults():
    callback = group_callback(analytics="user:alice")
    manager = ClientQuotaManager(QuotaType.PRODUCE, callback)
    group = ClientQuotaEntity.of(user="analytics")
    manager.update_quota(group, 1000.0)
    manager.update_quota(ClientQuotaEntity.of(user="alice"), 50.0)  # shadowed while the group has a value
    assert manager.record_and_get_throttle_time_ms("alice", "c", 12_000, 0) == 2000
    manager.update_quota(group, 2000.0)
    assert manager.sensor_bounds()[0][1] == 2000.0
    manager.remove_quota(group)
    # Back to alice's own user quota: 100 B over 10 s = 10 B/s against 50: no throttle.
    assert callback.quota_metric_tags(QuotaType.PRODUCE, "alice", "c") == {"user": "alice", "client-id": ""}
    assert manager.record_and_get_throttle_time_ms("alice", "c", 100, 0) == 0


@pytest.mark.parametrize("members, message", [
    ("alice", "is not user:NAME or client-id:NAME"),
    ("group:x", "is not user:NAME or client-id:NAME"),
    ("user:", "is not user:NAME or client-id:NAME"),
    (" , ", "has no members"),
])
def test_group_settings_are_checked(members, message):
    with pytest.raises(ValueError, match=message):
        group_callback(g=members)


def test_a_member_belongs_to_one_group_only():
    with pytest.raises(ValueError, match="already a member of group 'a'"):
        group_callback(a="user:alice", b="client-id:x,user:alice")


def test_user_membership_wins_over_client_id_membership():
    callback = group_callback(by_user="user:alice", by_client="client-id:app")
    assert callback.group_of("alice", "app") == "by_user"
    assert callback.group_of("bob", "app") == "by_client"
    assert callback.group_of("bob", "other") is None


# ---- partition-proportional quota (scenario 2) -----------------------------------------------------


def partition_callback(scope: str | None = None, node_id: int = 1, **topics: str) -> PartitionQuotaCallback:
    configs = {"node.id": str(node_id), **{f"client.quota.callback.partition.topics.{u}": p for u, p in topics.items()}}
    if scope is not None:
        configs["client.quota.callback.partition.scope"] = scope
    callback = PartitionQuotaCallback()
    callback.configure(configs)
    return callback


# alice uses orders (leaders 1, 2, 3, 1, 2, 3) and orders-eu (1, 1): node 1 leads 4 of her 8.
THREE_BROKERS = {"orders": [1, 2, 3, 1, 2, 3], "orders-eu": [1, 1], "audit": [1, 1, 1]}


@pytest.mark.parametrize("scope, node_id, limit", [
    ("partition", 1, 4 * 1000.0),   # 4 partitions led here, 1000 each
    ("partition", 2, 2 * 1000.0),
    ("partition", 4, 1 * 1000.0),   # a broker leading none of them: one partition's worth
    ("cluster", 1, 1000.0 * 4 / 8),  # alice's 1000 in total, shared out by leadership
    ("cluster", 3, 1000.0 * 2 / 8),
    ("cluster", 4, 1000.0 * 1 / 8),  # Kafka's test callback: 1/N where none is led
])
def test_partition_quota_limits_follow_leadership(scope, node_id, limit):
    callback = partition_callback(scope, node_id, alice="orders|orders-.*")
    assert callback.update_cluster_metadata(cluster(THREE_BROKERS)) is True
    callback.update_quota(QuotaType.PRODUCE, ClientQuotaEntity.of(user="alice"), 1000.0)
    callback.update_quota(QuotaType.REQUEST, ClientQuotaEntity.of(user="alice"), 30.0)
    tags = callback.quota_metric_tags(QuotaType.PRODUCE, "alice", "app")
    assert tags == {"user": "alice", "client-id": "", "partitions-of": "alice"}
    assert callback.quota_limit(QuotaType.PRODUCE, tags) == limit
    # Request time is CPU, not per partition: as set.
    request_tags = callback.quota_metric_tags(QuotaType.REQUEST, "alice", "app")
    assert request_tags == {"user": "alice", "client-id": ""}
    assert callback.quota_limit(QuotaType.REQUEST, request_tags) == 30.0


def test_partition_quota_reports_only_real_changes():
    callback = partition_callback(alice="orders.*")
    assert callback.update_cluster_metadata(cluster(THREE_BROKERS)) is True
    assert callback.update_cluster_metadata(cluster(THREE_BROKERS)) is False
    assert callback.update_cluster_metadata(cluster({**THREE_BROKERS, "audit": [1]})) is False  # not hers
    moved = {**THREE_BROKERS, "orders": [2, 2, 3, 1, 2, 3]}  # a leader moved off node 1
    assert callback.update_cluster_metadata(cluster(moved)) is True
    assert callback.counts == {"alice": (3, 8)}


def test_partition_quota_with_client_id_quotas_and_unmapped_users():
    """The partitions-of tag lets a client-id-level value be scaled too; an unmapped user's limit
    is the plain value."""
    callback = partition_callback(alice="orders")
    callback.update_cluster_metadata(cluster(THREE_BROKERS))
    callback.update_quota(QuotaType.FETCH, ClientQuotaEntity.of(client_id=DEFAULT), 500.0)
    alice = callback.quota_metric_tags(QuotaType.FETCH, "alice", "app")
    bob = callback.quota_metric_tags(QuotaType.FETCH, "bob", "app")
    assert alice == {"user": "", "client-id": "app", "partitions-of": "alice"}
    assert bob == {"user": "", "client-id": "app"}
    assert callback.quota_limit(QuotaType.FETCH, alice) == 2 * 500.0  # orders: node 1 leads 2
    assert callback.quota_limit(QuotaType.FETCH, bob) == 500.0


def test_metadata_change_then_refresh_moves_the_live_limit_and_the_throttle():
    """quotaResetRequired semantics: update_cluster_metadata returns True, the manager re-reads every
    live sensor's limit, and the next throttle follows the new limit. 12,000 B over 10 s is 1200 B/s:
    against 1000 (one partition) a throttle of 2000 ms; against 3000 (three) none."""
    callback = partition_callback(ANONYMOUS="pq-.*")
    manager = ClientQuotaManager(QuotaType.PRODUCE, callback)
    callback.update_cluster_metadata(cluster({"pq-a": [1]}))
    manager.update_quota(ClientQuotaEntity.of(user="ANONYMOUS"), 1000.0)
    assert manager.record_and_get_throttle_time_ms("ANONYMOUS", "c", 12_000, 0) == 2000
    if callback.update_cluster_metadata(cluster({"pq-a": [1], "pq-b": [1, 1]})):
        manager.refresh_quota_bounds()
    assert [bound for _, bound in manager.sensor_bounds()] == [3000.0]
    assert manager.record_and_get_throttle_time_ms("ANONYMOUS", "c", 0, 0) == 0


@pytest.mark.parametrize("configs, message", [
    ({"client.quota.callback.partition.scope": "broker"}, "is not one of partition, cluster"),
    ({"client.quota.callback.partition.topics.alice": "orders("}, "is not a regular expression"),
    ({"client.quota.callback.partition.topics.": "x"}, "a user name must follow"),
    ({"node.id": "one"}, "node.id"),
])
def test_partition_settings_are_checked(configs, message):
    with pytest.raises(ValueError, match=message):
        PartitionQuotaCallback().configure(configs)


@pytest.mark.parametrize("path", [
    "minibroker.quotas.examples.group_quota:GroupQuotaCallback",
    "minibroker.quotas.examples.partition_quota:PartitionQuotaCallback",
])
def test_the_examples_load_by_their_documented_names(path):
    assert load_callback(path).quota_reset_required(QuotaType.PRODUCE) is False
