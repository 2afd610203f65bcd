"""The group APIs over the wire with exact requests, at every version the broker serves: KIP-394
member ids, the join/sync/heartbeat/leave round trip, a follower's SyncGroup parked until the leader's
assignment, offset commits and fetches (by name and by topic id), the errors Kafka answers, and
ListGroups / DescribeGroups / DeleteGroups, including a deletion that survives a restart.
"""

from __future__ import annotations

import threading

import pytest

from tests.support.wire import WireClient, create_topic, request

JOIN, SYNC, HEARTBEAT, LEAVE, COMMIT, FETCH, LIST, DESCRIBE, DELETE = 11, 14, 12, 13, 8, 9, 16, 15, 42
NONE, ILLEGAL_GENERATION, INCONSISTENT_GROUP_PROTOCOL, UNKNOWN_MEMBER_ID = 0, 22, 23, 25
REBALANCE_IN_PROGRESS, NON_EMPTY_GROUP, GROUP_ID_NOT_FOUND, MEMBER_ID_REQUIRED = 27, 68, 69, 79
UNKNOWN_TOPIC_OR_PARTITION, UNKNOWN_TOPIC_ID = 3, 100




def join_request(version, group, member_id="", protocol_type="consumer", metadata=b"meta",
                 instance=None):
    return request(JOIN, version, group_id=group, session_timeout=6000, rebalance_timeout=10_000,
               member_id=member_id, group_instance_id=instance, protocol_type=protocol_type,
               protocols=[{"name": "range", "metadata": metadata}], reason=None)


def join(client, version, group, **kwargs):
    """Join, doing the KIP-394 round trip when asked for a member id."""
    response = client.request(join_request(version, group, **kwargs))
    if response.error_code == MEMBER_ID_REQUIRED:
        assert version >= 4 and response.member_id
        response = client.request(join_request(version, group, member_id=response.member_id,
                                               **{k: v for k, v in kwargs.items() if k != "member_id"}))
    return response


def sync_request(version, group, joined, assignments=()):
    return request(SYNC, version, group_id=group, generation_id=joined.generation_id,
               member_id=joined.member_id, group_instance_id=None, protocol_type="consumer",
               protocol_name="range",
               assignments=[{"member_id": m, "assignment": a} for m, a in assignments])


@pytest.mark.parametrize("version", range(10))
def test_join_sync_heartbeat_leave_at_every_version(broker, unique, version):
    group = unique("wire-group")
    sync_v, heartbeat_v, leave_v = min(version, 5), min(version, 4), min(version, 5)
    with WireClient(broker.bootstrap) as client:
        if version >= 4:
            first = client.request(join_request(version, group))
            assert first.error_code == MEMBER_ID_REQUIRED and first.member_id
        joined = join(client, version, group)
        assert joined.error_code == NONE
        assert (joined.generation_id, joined.leader, joined.protocol_name) == (1, joined.member_id, "range")
        assert [(m.member_id, m.metadata) for m in joined.members] == [(joined.member_id, b"meta")]
        if version >= 7:
            assert joined.protocol_type == "consumer"
        synced = client.request(sync_request(sync_v, group, joined, [(joined.member_id, b"mine")]))
        assert (synced.error_code, synced.assignment) == (NONE, b"mine")
        beat = client.request(request(HEARTBEAT, heartbeat_v, group_id=group, generation_id=joined.generation_id,
                                  member_id=joined.member_id, group_instance_id=None))
        assert beat.error_code == NONE
        stale = client.request(request(HEARTBEAT, heartbeat_v, group_id=group, generation_id=0,
                                   member_id=joined.member_id, group_instance_id=None))
        assert stale.error_code == ILLEGAL_GENERATION
        left = client.request(request(LEAVE, leave_v, group_id=group, member_id=joined.member_id,
                                  members=[{"member_id": joined.member_id, "group_instance_id": None,
                                            "reason": "done"}]))
        assert left.error_code == NONE
        if leave_v >= 3:
            assert [(m.member_id, m.error_code) for m in left.members] == [(joined.member_id, NONE)]
        gone = client.request(request(HEARTBEAT, heartbeat_v, group_id=group, generation_id=joined.generation_id,
                                  member_id=joined.member_id, group_instance_id=None))
        assert gone.error_code == UNKNOWN_MEMBER_ID


def test_inconsistent_protocol_type_is_refused(broker, unique):
    group = unique("wire-group")
    with WireClient(broker.bootstrap) as a, WireClient(broker.bootstrap) as b:
        assert join(a, 5, group).error_code == NONE
        assert join(b, 5, group, protocol_type="connect").error_code == INCONSISTENT_GROUP_PROTOCOL


def test_follower_sync_is_parked_until_the_leader_assigns(start_broker, unique):
    group = unique("wire-group")
    # A short initial delay so that two joins a moment apart land in one generation.
    with start_broker(group_initial_rebalance_delay_ms="300") as broker:
        clients = [WireClient(broker.bootstrap) for _ in range(2)]
        joined = [None, None]

        def join_one(i):
            joined[i] = join(clients[i], 5, group, metadata=b"m%d" % i)

        threads = [threading.Thread(target=join_one, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert joined[0].generation_id == joined[1].generation_id == 1
        leader_i = 0 if joined[0].member_id == joined[0].leader else 1
        leader, follower = joined[leader_i], joined[1 - leader_i]
        assert len(leader.members) == 2 and follower.members == ()

        synced = {}
        waiting = threading.Thread(target=lambda: synced.update(
            follower=clients[1 - leader_i].request(sync_request(5, group, follower))))
        waiting.start()
        waiting.join(0.5)
        assert waiting.is_alive(), "the follower waits for the leader"
        answer = clients[leader_i].request(sync_request(
            5, group, leader, [(leader.member_id, b"L"), (follower.member_id, b"F")]))
        waiting.join(10)
        assert (answer.error_code, answer.assignment) == (NONE, b"L")
        assert (synced["follower"].error_code, synced["follower"].assignment) == (NONE, b"F")
        assert synced["follower"].protocol_name == "range"
        for c in clients:
            c.close()


def commit_request(version, group, topic, topic_id, partition, offset, generation=-1, member=""):
    return request(COMMIT, version, group_id=group, generation_id_or_member_epoch=generation, member_id=member,
               group_instance_id=None, retention_time=-1,
               topics=[{"name": topic, "topic_id": topic_id, "partitions": [{
                   "partition_index": partition, "committed_offset": offset, "committed_leader_epoch": 7,
                   "committed_metadata": f"v{version}"}]}])


def fetch_committed(client, version, group, topic, topic_id, partitions):
    topics = [{"name": topic, "topic_id": topic_id, "partition_indexes": partitions}]
    if version >= 8:
        response = client.request(request(FETCH, version, require_stable=False, groups=[{
            "group_id": group, "member_id": None, "member_epoch": -1, "topics": topics}]))
        (answer,) = response.groups
        assert answer.error_code == NONE
        entries = answer.topics
    else:
        response = client.request(request(FETCH, version, group_id=group, topics=topics, require_stable=False))
        entries = response.topics
    return {p.partition_index: (p.committed_offset, p.metadata) for t in entries for p in t.partitions}


@pytest.mark.parametrize("version", range(2, 11))
def test_simple_commit_and_fetch_at_every_version(broker, unique, version):
    group, topic = unique("wire-group"), unique("wire-topic")
    with WireClient(broker.bootstrap) as client:
        assert create_topic(client, topic, partitions=2).error_code == NONE
        topic_id = broker.broker.logs.topic(topic).topic_id
        committed = client.request(commit_request(version, group, topic, topic_id, 1, 42 + version))
        assert [(p.partition_index, p.error_code) for t in committed.topics for p in t.partitions] == [(1, NONE)]
        for fetch_v in range(1, 11):
            assert fetch_committed(client, fetch_v, group, topic, topic_id, [0, 1, 5]) == {
                0: (-1, ""), 1: (42 + version, f"v{version}"), 5: (-1, "")}, f"OffsetFetch v{fetch_v}"
        unknown = client.request(commit_request(version, group, "no-such-topic", _random_id(), 0, 1))
        expected = UNKNOWN_TOPIC_ID if version >= 10 else UNKNOWN_TOPIC_OR_PARTITION
        assert unknown.topics[0].partitions[0].error_code == expected


def _random_id():
    import uuid

    return uuid.uuid4()


def test_fetch_all_offsets_of_a_group(broker, unique):
    group, topic = unique("wire-group"), unique("wire-topic")
    with WireClient(broker.bootstrap) as client:
        create_topic(client, topic, partitions=3)
        for p in range(3):
            client.request(commit_request(8, group, topic, None, p, 10 * p))
        response = client.request(request(FETCH, 8, require_stable=False, groups=[{"group_id": group, "topics": None}]))
        (answer,) = response.groups
        assert [(t.name, [(p.partition_index, p.committed_offset) for p in t.partitions])
                for t in answer.topics] == [(topic, [(0, 0), (1, 10), (2, 20)])]


def test_commits_from_group_members_are_checked(broker, unique):
    group, topic = unique("wire-group"), unique("wire-topic")
    with WireClient(broker.bootstrap) as client:
        create_topic(client, topic)
        joined = join(client, 5, group)
        client.request(sync_request(5, group, joined, [(joined.member_id, b"")]))

        def commit(generation, member, version=8):
            response = client.request(commit_request(version, group, topic, None, 0, 5, generation, member))
            return response.topics[0].partitions[0].error_code

        assert commit(joined.generation_id, joined.member_id) == NONE
        assert commit(joined.generation_id - 1, joined.member_id) == ILLEGAL_GENERATION
        assert commit(joined.generation_id, "someone-else") == UNKNOWN_MEMBER_ID
        assert commit(-1, "") == UNKNOWN_MEMBER_ID  # a simple commit into a group in use
        other = unique("wire-group")
        response = client.request(commit_request(9, other, topic, None, 0, 5, 3, "m"))
        assert response.topics[0].partitions[0].error_code == GROUP_ID_NOT_FOUND


def test_list_describe_and_delete_groups(start_broker, unique):
    active, simple = unique("wire-active"), unique("wire-simple")
    topic = unique("wire-topic")
    with start_broker() as broker, WireClient(broker.bootstrap) as client:
        create_topic(client, topic)
        joined = join(client, 5, active)
        client.request(sync_request(5, active, joined, [(joined.member_id, b"assigned")]))
        client.request(commit_request(8, simple, topic, None, 0, 99))

        for version in range(6):
            listed = client.request(request(LIST, version, states_filter=[], types_filter=[]))
            assert listed.error_code == NONE
            found = {g.group_id: g for g in listed.groups}
            assert found[active].protocol_type == "consumer" and found[simple].protocol_type == ""
            if version >= 4:
                assert (found[active].group_state, found[simple].group_state) == ("Stable", "Empty")
        stable_only = client.request(request(LIST, 4, states_filter=["stable"]))
        assert active in {g.group_id for g in stable_only.groups}
        assert simple not in {g.group_id for g in stable_only.groups}

        for version in range(7):
            described = client.request(request(DESCRIBE, version, groups=[active, "wire-unknown"],
                                           include_authorized_operations=True))
            mine, unknown = described.groups
            assert (mine.error_code, mine.group_state, mine.protocol_data) == (NONE, "Stable", "range")
            (member,) = mine.members
            assert (member.member_id, member.member_metadata, member.member_assignment) == (
                joined.member_id, b"meta", b"assigned")
            assert member.client_host.startswith("/127.0.0.1")
            assert unknown.group_state == "Dead"
            assert unknown.error_code == (GROUP_ID_NOT_FOUND if version >= 6 else NONE)

        deleted = client.request(request(DELETE, 2, groups_names=[active, simple, "wire-unknown"]))
        assert [(r.group_id, r.error_code) for r in deleted.results] == [
            (active, NON_EMPTY_GROUP), (simple, NONE), ("wire-unknown", GROUP_ID_NOT_FOUND)]
        for version in (0, 1):
            again = client.request(request(DELETE, version, groups_names=[simple]))
            assert again.results[0].error_code == GROUP_ID_NOT_FOUND

    with start_broker() as broker, WireClient(broker.bootstrap) as client:
        listed = {g.group_id for g in client.request(request(LIST, 3)).groups}
        assert simple not in listed, "the deletion survives a restart"
        assert fetch_committed(client, 8, simple, topic, None, [0]) == {0: (-1, "")}


def test_deleting_a_topic_removes_its_committed_offsets(broker, unique):
    """Kafka drops a deleted topic's committed offsets; a topic recreated under the name starts clean."""
    from minibroker.admin_client import AdminClient

    topic, group = unique("gone"), unique("g")
    with AdminClient(broker.bootstrap) as c:
        c.call(19, {"topics": [{"name": topic, "num_partitions": 1, "replication_factor": 1,
                                "assignments": (), "configs": ()}], "timeout": 5000, "validate_only": False})
        commit = c.call(8, {"group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
                            "group_instance_id": None, "retention_time_ms": -1,
                            "topics": [{"name": topic, "partitions": [{"partition_index": 0, "committed_offset": 7,
                                                                       "committed_leader_epoch": -1,
                                                                       "committed_metadata": ""}]}]}, version=8)
        assert commit.topics[0].partitions[0].error_code == 0
        assert dict(broker.broker.groups.store.offsets[group])[(topic, 0)].offset == 7
        c.call(20, {"topic_names": [topic], "timeout": 5000}, version=5)
    assert (topic, 0) not in broker.broker.groups.store.offsets.get(group, {})


def test_offsets_in_the_old_record_layout_are_served_after_an_upgrade(start_broker, tmp_path):
    """A data directory whose __consumer_offsets holds records in the layout this broker wrote
    before Kafka's: the broker starts on it and serves those offsets and groups as they were."""
    import struct

    from minibroker.protocol.records import encode_batch
    from minibroker.storage.config import LogConfig
    from minibroker.storage.group_records import group_key, offset_key
    from minibroker.storage.manager import LogManager
    from minibroker.storage.offsets_store import TOPIC

    with start_broker() as broker, WireClient(broker.bootstrap) as client:
        assert create_topic(client, "old-t").error_code == NONE
    logs = LogManager.open(tmp_path / "data", LogConfig.from_broker({}), 0)
    meta, protocol_type = b"from-before", b"consumer"
    old_offset = (struct.pack(">HqiH", 0, 41, 3, len(meta)) + meta + struct.pack(">qq", 1_700_000_000_000, -1))
    old_group = (struct.pack(">HH", 0, len(protocol_type)) + protocol_type + struct.pack(">iH", 7, 0)
                 + struct.pack(">iq", 0, 1_700_000_000_000))
    logs.log(TOPIC, 0).append(encode_batch([(offset_key("old-g", "old-t", 0), old_offset),
                                            (group_key("old-g"), old_group)], 0), 0)
    logs.close()

    with start_broker() as broker, WireClient(broker.bootstrap) as client:
        assert fetch_committed(client, 8, "old-g", "old-t", None, [0]) == {0: (41, "from-before")}
        listed = {g.group_id: (g.protocol_type, g.group_state) for g in client.request(request(LIST, 4)).groups}
        assert listed["old-g"] == ("consumer", "Empty")
