"""KIP-848 consumer groups over the wire with exact requests: ApiVersions advertises
ConsumerGroupHeartbeat and ConsumerGroupDescribe; a group of two members reconciles at both
versions; ConsumerGroupDescribe v0/v1, DescribeGroups v5/v6 and ListGroups v5 show what Kafka 4
shows for each group type; OffsetCommit and OffsetFetch check the member epoch; static members and
their epochs survive a broker restart (the records in __consumer_offsets); and the protocol can be
switched off (group.coordinator.rebalance.protocols), which answers UNSUPPORTED_VERSION.
"""

from __future__ import annotations

import pytest

from tests.support.wire import WireClient, create_topic, request

HEARTBEAT, DESCRIBE, COMMIT, FETCH, LIST, CLASSIC_DESCRIBE, API_VERSIONS = 68, 69, 8, 9, 16, 15, 18
NONE, UNSUPPORTED_VERSION, GROUP_ID_NOT_FOUND, STALE_MEMBER_EPOCH = 0, 35, 69, 113
INVALID_REQUEST, UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID, INVALID_GROUP_ID = 42, 25, 82, 24




def heartbeat(client, version, group, member, epoch, topics=None, owned=None, instance=None, assignor=None,
              rebalance_timeout=-1):
    return client.request(request(
        HEARTBEAT, version, group_id=group, member_id=member, member_epoch=epoch, instance_id=instance,
        rack_id=None, rebalance_timeout=rebalance_timeout, subscribed_topic_names=topics,
        subscribed_topic_regex=None, server_assignor=assignor,
        topic_partitions=None if owned is None else [{"topic_id": t, "partitions": ps} for t, ps in owned.items()]))


def join(client, version, group, member, topic, instance=None):
    return heartbeat(client, version, group, member, 0, topics=[topic], owned={}, instance=instance,
                     rebalance_timeout=30_000)


def owned(response) -> dict:
    return {tp.topic_id: tuple(tp.partitions) for tp in response.assignment.topic_partitions}


class Member:
    """A consumer over the wire: heartbeats with its epoch and what it owns."""

    def __init__(self, client, version, group, member_id, topic, instance=None):
        self.client, self.version, self.group, self.member_id = client, version, group, member_id
        self.topic, self.instance = topic, instance
        self.epoch, self.owned = 0, {}

    def beat(self):
        if self.epoch == 0:
            response = join(self.client, self.version, self.group, self.member_id, self.topic, self.instance)
        else:
            response = heartbeat(self.client, self.version, self.group, self.member_id, self.epoch,
                                 owned=self.owned)
        assert response.error_code == NONE, response.error_message
        self.member_id, self.epoch = response.member_id, response.member_epoch
        if response.assignment is not None:
            self.owned = owned(response)
        return response


def test_api_versions_advertises_the_consumer_group_apis(broker):
    with WireClient(broker.bootstrap) as client:
        response = client.request(request(API_VERSIONS, 3, client_software_name="t", client_software_version="1"))
    ranges = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
    assert ranges[HEARTBEAT] == (0, 1) and ranges[DESCRIBE] == (0, 1)


@pytest.mark.parametrize("version", [0, 1])
def test_two_members_reconcile_and_describe(broker, unique, version):
    topic, group = unique("cg-wire"), unique("cg-wire")
    with WireClient(broker.bootstrap) as client:
        created = create_topic(client, topic, 4)
        assert created.error_code == NONE
        topic_id = created.topic_id
        a = Member(client, version, group, "" if version == 0 else "member-a", topic)
        first = a.beat()
        assert first.member_epoch == 1 and first.heartbeat_interval.total_seconds() == 1.0
        assert a.member_id and a.owned == {topic_id: (0, 1, 2, 3)}
        b = Member(client, version, group, "" if version == 0 else "member-b", topic)
        for _ in range(4):
            b.beat()
            a.beat()
        assert sorted(len(m.owned[topic_id]) for m in (a, b)) == [2, 2]
        assert set(a.owned[topic_id]) | set(b.owned[topic_id]) == {0, 1, 2, 3}
        if version == 1:
            empty = join(client, 1, group, "", topic)
            assert (empty.error_code, empty.error_message) == (INVALID_REQUEST, "MemberId can't be empty.")
        for describe_version in (0, 1):
            (described,) = client.request(request(DESCRIBE, describe_version, group_ids=[group],
                                              include_authorized_operations=True)).groups
            assert (described.error_code, described.group_state, described.group_epoch,
                    described.assignment_epoch, described.assignor_name) == (NONE, "Stable", 2, 2, "uniform")
            members = {m.member_id: m for m in described.members}
            assert set(members) == {a.member_id, b.member_id}
            for m in (a, b):
                d = members[m.member_id]
                assert d.member_epoch == 2 and d.subscribed_topic_names == (topic,)
                assert [(tp.topic_id, tp.topic_name, tuple(tp.partitions)) for tp in d.assignment.topic_partitions] \
                    == [(topic_id, topic, m.owned[topic_id])]
                assert d.assignment == d.target_assignment
                assert d.client_id == "wire-test" and d.client_host == "/127.0.0.1"
                if describe_version == 1:
                    assert d.member_type == 1
        left = heartbeat(client, version, group, a.member_id, -1)
        assert (left.error_code, left.member_epoch) == (NONE, -1)


def test_describe_and_list_show_each_group_type_as_kafka_4(broker, unique):
    topic, consumer_group, classic_group = unique("cg-types"), unique("cg-new"), unique("cg-classic")
    with WireClient(broker.bootstrap) as client:
        assert create_topic(client, topic, 1).error_code == NONE
        Member(client, 1, consumer_group, "m", topic).beat()
        # A classic (simple) group: offsets only.
        client.request(request(COMMIT, 8, group_id=classic_group, generation_id_or_member_epoch=-1, member_id="",
                           group_instance_id=None, topics=[{"name": topic, "partitions": [
                               {"partition_index": 0, "committed_offset": 1, "committed_leader_epoch": -1,
                                "committed_metadata": None}]}]))
        described = client.request(request(DESCRIBE, 1, group_ids=[classic_group, unique("nope"), ""],
                                       include_authorized_operations=False)).groups
        assert [(d.error_code, d.error_message) for d in described] == [
            (GROUP_ID_NOT_FOUND, f"Group {classic_group} is not a consumer group."),
            (GROUP_ID_NOT_FOUND, f"Group {described[1].group_id} not found."),
            (INVALID_GROUP_ID, "Group id can't be empty.")]
        (v5,) = client.request(request(CLASSIC_DESCRIBE, 5, groups=[consumer_group],
                                   include_authorized_operations=False)).groups
        assert (v5.error_code, v5.group_state, v5.members) == (NONE, "Dead", ())
        (v6,) = client.request(request(CLASSIC_DESCRIBE, 6, groups=[consumer_group],
                                   include_authorized_operations=False)).groups
        assert (v6.error_code, v6.error_message, v6.group_state) == (
            GROUP_ID_NOT_FOUND, f"Group {consumer_group} is not a classic group.", "Dead")
        listed = client.request(request(LIST, 5, states_filter=[], types_filter=[])).groups
        kinds = {g.group_id: (g.group_type, g.protocol_type, g.group_state) for g in listed}
        assert kinds[consumer_group] == ("consumer", "consumer", "Stable")
        assert kinds[classic_group] == ("classic", "", "Empty")
        only = client.request(request(LIST, 5, states_filter=[], types_filter=["consumer"])).groups
        assert consumer_group in {g.group_id for g in only} and classic_group not in {g.group_id for g in only}


def test_offsets_are_committed_and_fetched_by_member_epoch(broker, unique):
    topic, group = unique("cg-offsets"), unique("cg-offsets")
    with WireClient(broker.bootstrap) as client:
        assert create_topic(client, topic, 2).error_code == NONE
        m = Member(client, 1, group, "m-1", topic)
        m.beat()

        def commit(version, epoch, member="m-1"):
            response = client.request(request(COMMIT, version, group_id=group, generation_id_or_member_epoch=epoch,
                                          member_id=member, group_instance_id=None, retention_time=-1,
                                          topics=[{"name": topic, "partitions": [
                                              {"partition_index": 0, "committed_offset": 9,
                                               "committed_leader_epoch": -1, "committed_metadata": "x"}]}]))
            return response.topics[0].partitions[0].error_code

        def fetch(epoch, member="m-1"):
            (answer,) = client.request(request(FETCH, 9, require_stable=True, groups=[{
                "group_id": group, "member_id": member, "member_epoch": epoch,
                "topics": [{"name": topic, "partition_indexes": [0]}]}])).groups
            return answer.error_code, [p.committed_offset for t in answer.topics for p in t.partitions]

        assert commit(9, m.epoch) == NONE
        assert commit(9, m.epoch + 1) == STALE_MEMBER_EPOCH
        assert commit(8, m.epoch) == UNSUPPORTED_VERSION
        assert commit(9, -1, "") == UNKNOWN_MEMBER_ID
        assert fetch(m.epoch) == (NONE, [9])
        assert fetch(m.epoch + 1) == (STALE_MEMBER_EPOCH, [])
        assert fetch(m.epoch, "stranger") == (UNKNOWN_MEMBER_ID, [])
        assert fetch(-1, None) == (NONE, [9])  # admin tools


def test_static_members_and_epochs_survive_a_restart(start_broker, unique, tmp_path):
    topic, group = unique("cg-restart"), unique("cg-restart")
    with start_broker() as broker, WireClient(broker.bootstrap) as client:
        created = create_topic(client, topic, 4)
        assert created.error_code == NONE
        topic_id = created.topic_id
        a = Member(client, 1, group, "a-1", topic, instance="i-a")
        b = Member(client, 1, group, "b-1", topic, instance="i-b")
        for _ in range(4):
            a.beat()
            b.beat()
        before = client.request(request(DESCRIBE, 1, group_ids=[group], include_authorized_operations=False)).groups[0]
        # B goes away for a while, as a static member does on close.
        assert heartbeat(client, 1, group, "b-1", -2, instance="i-b").member_epoch == -2
    with start_broker() as broker, WireClient(broker.bootstrap) as client:
        after = client.request(request(DESCRIBE, 1, group_ids=[group], include_authorized_operations=False)).groups[0]
        assert (after.group_epoch, after.assignment_epoch) == (before.group_epoch, before.assignment_epoch)
        epochs = {m.member_id: m.member_epoch for m in after.members}
        assert epochs == {"a-1": a.epoch, "b-1": -2}
        a.client = client
        assert a.beat().member_epoch == a.epoch  # A goes on where it was: not fenced, not unknown
        # B's next incarnation gets B's partitions back, without a new group epoch.
        b_partitions = b.owned[topic_id]
        b2 = Member(client, 1, group, "b-2", topic, instance="i-b")
        b2.beat()
        assert b2.owned == {topic_id: b_partitions}
        final = client.request(request(DESCRIBE, 1, group_ids=[group], include_authorized_operations=False)).groups[0]
        assert final.group_epoch == before.group_epoch
        assert {m.member_id for m in final.members} == {"a-1", "b-2"}
        # The old incarnation is fenced by the new one.
        stale = heartbeat(client, 1, group, "b-1", b.epoch, owned=b.owned, instance="i-b")
        assert (stale.error_code, stale.error_message) == (
            FENCED_INSTANCE_ID, "Static member b-1 with instance id i-b was fenced by member b-2.")


def test_the_consumer_protocol_can_be_switched_off(start_broker, unique):
    with start_broker(group_coordinator_rebalance_protocols="classic") as broker, \
            WireClient(broker.bootstrap) as client:
        response = join(client, 1, unique("off"), "m", "t")
        assert response.error_code == UNSUPPORTED_VERSION
        (described,) = client.request(request(DESCRIBE, 0, group_ids=["g"], include_authorized_operations=False)).groups
        assert described.error_code == UNSUPPORTED_VERSION
