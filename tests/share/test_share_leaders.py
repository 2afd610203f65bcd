"""ShareFetch and ShareAcknowledge on a three-broker cluster, over the wire: a share partition lives
on its partition's leader only, as in Kafka 4.4.

* ShareFetch of a partition this broker does not lead: NOT_LEADER_OR_FOLLOWER for it, its
  CurrentLeader (leader id and epoch) and the leader's address in NodeEndpoints (KafkaApis'
  processShareFetchResponse, KIP-951's hints), the same after a leader move for a share session the
  old leader still has;
* acknowledgements of a partition whose share partition this broker does not hold (ShareAcknowledge,
  or the acknowledgements a ShareFetch carries): UNKNOWN_TOPIC_OR_PARTITION (Kafka 4.4's
  SharePartitionManager.acknowledge), and nothing is acknowledged: the leader still holds the
  records acquired there;
* acknowledgements are answered once the share coordinator's write reached the ISR of
  `__share_group_state` (COORDINATOR_NOT_AVAILABLE after share.coordinator.write.timeout.ms when
  it cannot).
"""

from __future__ import annotations

import pytest

from minibroker.admin_client import AdminClient
from minibroker.protocol.errors import ErrorCode
from minibroker.storage.share_state import TOPIC as SHARE_STATE
from minibroker.testing import running_cluster
from tests.support.share_client import FAST, produce

G, MEMBER = "leaders", "member-1"
ACCEPT = 1


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with running_cluster(brokers=3, data_dir=tmp_path_factory.mktemp("share-leaders") / "data",
                         default_replication_factor=3) as running:
        yield running


def _client(cluster, node: int) -> AdminClient:
    return AdminClient(cluster.broker_bootstrap(node))


def _fetch(client: AdminClient, topic_id, epoch: int, acks=()):
    return client.call(78, {
        "group_id": G, "member_id": MEMBER, "share_session_epoch": epoch, "max_wait": 0, "min_bytes": 1,
        "max_bytes": 1 << 20, "max_records": 500, "batch_size": 500, "share_acquire_mode": 0, "is_renew_ack": False,
        "topics": [{"topic_id": topic_id, "partitions": [{"partition_index": 0, "acknowledgement_batches": [
            {"first_offset": f, "last_offset": last, "acknowledge_types": [ACCEPT]} for f, last in acks]}]}],
        "forgotten_topics_data": []})


def _acknowledge(client: AdminClient, topic_id, epoch: int, first: int, last: int):
    return client.call(79, {
        "group_id": G, "member_id": MEMBER, "share_session_epoch": epoch, "is_renew_ack": False,
        "topics": [{"topic_id": topic_id, "partitions": [{"partition_index": 0, "acknowledgement_batches": [
            {"first_offset": first, "last_offset": last, "acknowledge_types": [ACCEPT]}]}]}]})


def _create(cluster):
    """The topic `queue` (RF 3) and the group's share configs; the topic's id."""
    with _client(cluster, 1) as admin:
        created = admin.call(19, {"topics": [{"name": "queue", "num_partitions": 1, "replication_factor": 3,
                                              "assignments": [], "configs": []}], "timeout_ms": 5000,
                                  "validate_only": False})
        assert created.topics[0].error_code == 0
        altered = admin.call(44, {"resources": [{"resource_type": 32, "resource_name": G, "configs": [
            {"name": k, "config_operation": 0, "value": v} for k, v in FAST.items()]}], "validate_only": False})
        assert altered.responses[0].error_code == 0
        return created.topics[0].topic_id


def _join(cluster) -> None:
    """The member joins the share group at its coordinator and gets the partition (its second
    heartbeat: the first initializes the share partition)."""
    for node in (1, 2, 3):
        with _client(cluster, node) as client:
            body = {"group_id": G, "member_id": MEMBER, "member_epoch": 0, "rack_id": None,
                    "subscribed_topic_names": ["queue"]}
            joined = client.call(76, body)
            if joined.error_code == ErrorCode.not_coordinator:
                continue
            assert joined.error_code == 0, joined
            assigned = client.call(76, {**body, "member_epoch": joined.member_epoch, "subscribed_topic_names": None})
            assert assigned.error_code == 0 and assigned.assignment is not None, assigned
            return
    raise AssertionError("no broker coordinates the group")


def test_share_fetch_and_acknowledge_to_a_broker_that_does_not_lead(cluster):
    topic_id = _create(cluster)
    produce(cluster.bootstrap, "queue", 5, per_batch=5)
    _join(cluster)
    leader = cluster.leader("queue", 0)
    follower, other = (b for b in (1, 2, 3) if b != leader)
    epoch = cluster.in_cluster(lambda: cluster.controller.image.partition("queue", 0).leader_epoch)

    with _client(cluster, follower) as to_follower, _client(cluster, leader) as to_leader:
        refused = _fetch(to_follower, topic_id, 0)
        assert refused.error_code == 0
        (part,) = refused.responses[0].partitions
        assert part.error_code == ErrorCode.not_leader_or_follower and part.acquired_records == ()
        assert (part.current_leader.leader_id, part.current_leader.leader_epoch) == (leader, epoch)
        assert [(n.node_id, f"{n.host}:{n.port}") for n in refused.node_endpoints] == [
            (leader, cluster.broker_bootstrap(leader))]

        served = _fetch(to_leader, topic_id, 0)
        (part,) = served.responses[0].partitions
        assert part.error_code == 0 and [(r.first_offset, r.last_offset) for r in part.acquired_records] == [(0, 4)]
        assert part.current_leader.leader_id == 0 and served.node_endpoints == ()  # no hint when served

        # Acknowledging at the follower (its share session exists): it holds no share partition.
        wrong = _acknowledge(to_follower, topic_id, 1, 0, 4)
        (part,) = wrong.responses[0].partitions
        assert part.error_code == ErrorCode.unknown_topic_or_partition and wrong.node_endpoints == ()

        # The leader moves to the follower: the old leader's share session now gets the hint, and
        # the acknowledgement it carries is refused there.
        cluster.move_leader("queue", 0, follower)
        moved = _fetch(to_leader, topic_id, 1, acks=[(0, 1)])
        (part,) = moved.responses[0].partitions
        assert part.error_code == ErrorCode.not_leader_or_follower
        assert part.acknowledge_error_code == ErrorCode.unknown_topic_or_partition
        assert (part.current_leader.leader_id, part.current_leader.leader_epoch) == (follower, epoch + 1)
        assert [n.node_id for n in moved.node_endpoints] == [follower]

        # The new leader loads the share partition from the share coordinator and serves it (the
        # acquisition at the old leader was never written: the records are available again).
        at_new = _fetch(to_follower, topic_id, 2)
        (part,) = at_new.responses[0].partitions
        assert part.error_code == 0 and [(r.first_offset, r.last_offset) for r in part.acquired_records] == [(0, 4)]
        accepted = _acknowledge(to_follower, topic_id, 3, 0, 4)
        assert accepted.responses[0].partitions[0].error_code == 0
    with _client(cluster, other) as third:
        refused = _fetch(third, topic_id, 0)
        assert [n.node_id for n in refused.node_endpoints] == [follower]


def test_the_share_offset_apis_are_answered_by_the_group_coordinator_only(cluster):
    """DescribeShareGroupOffsets, AlterShareGroupOffsets and DeleteShareGroupOffsets are group
    coordinator requests (Kafka's GroupCoordinatorService): NOT_COORDINATOR from another broker."""
    group = "offsets-elsewhere"
    coordinator = cluster.leader("__consumer_offsets", 0)
    answered = {}
    for node in (1, 2, 3):
        with _client(cluster, node) as client:
            described = client.call(90, {"groups": [{"group_id": group, "topics": None}]})
            altered = client.call(91, {"group_id": group, "topics": []})
            deleted = client.call(92, {"group_id": group, "topics": []})
            answered[node] = (described.groups[0].error_code, altered.error_code, deleted.error_code)
    for node, codes in answered.items():
        if node == coordinator:
            assert ErrorCode.not_coordinator not in codes, codes
        else:
            assert codes == (ErrorCode.not_coordinator,) * 3, (node, codes)


def test_acknowledgements_are_answered_once_the_isr_has_them(tmp_path):
    """The share coordinator's writes wait for the ISR of __share_group_state (Kafka's acks=-1
    coordinator appends): with both followers killed (not yet fenced, so still in the ISR), an
    acknowledgement is appended but never replicated, and it is answered COORDINATOR_NOT_AVAILABLE
    after share.coordinator.write.timeout.ms, not NONE."""
    with running_cluster(brokers=3, data_dir=tmp_path / "data", default_replication_factor=3,
                         share_coordinator_write_timeout_ms=300) as running:
        topic_id = _create(running)
        produce(running.bootstrap, "queue", 5, per_batch=5)
        _join(running)
        coordinator = running.leader(SHARE_STATE, 0)
        if running.leader("queue", 0) != coordinator:
            running.move_leader("queue", 0, coordinator)
        with _client(running, coordinator) as client:
            (part,) = _fetch(client, topic_id, 0).responses[0].partitions
            assert [(r.first_offset, r.last_offset) for r in part.acquired_records] == [(0, 4)]
            for node in (b for b in (1, 2, 3) if b != coordinator):
                running.stop(node, kill=True)
            (part,) = _acknowledge(client, topic_id, 1, 0, 4).responses[0].partitions
            assert part.error_code == ErrorCode.coordinator_not_available, part
