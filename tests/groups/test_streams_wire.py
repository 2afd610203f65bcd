"""KIP-1071 streams groups over the wire with exact requests (StreamsGroupHeartbeat v0,
StreamsGroupDescribe v0), as Kafka 4.4's coordinator answers them: the topology of the first member
initializes the group, its internal topics are created with the partition counts the coordinator
decides (MISSING_INTERNAL_TOPICS until then), tasks are assigned and moved between members only once
released (epochs, UNREVOKED_TASKS), members leave and are fenced, the group's records bring it back
after a restart, and the protocol can be switched off.
"""

from __future__ import annotations

from minibroker.protocol.entities import build, to_ms
from tests.support.wire import WireClient, schema

HEARTBEAT, DESCRIBE, COMMIT, FETCH, LIST, CLASSIC_DESCRIBE, API_VERSIONS, DELETE = 88, 89, 8, 9, 16, 15, 18, 42
NONE, UNSUPPORTED_VERSION, GROUP_ID_NOT_FOUND, STALE_MEMBER_EPOCH = 0, 35, 69, 113
INVALID_REQUEST, UNKNOWN_MEMBER_ID, FENCED_MEMBER_EPOCH, NON_EMPTY_GROUP = 42, 25, 110, 68
STREAMS_INVALID_TOPOLOGY = 130
MISSING_SOURCE_TOPICS, MISSING_INTERNAL_TOPICS, STALE_TOPOLOGY = 1, 3, 0


def req(api: int, version: int, **fields):
    return build(schema(api, version), fields)


def create_topic(client, name, partitions):
    response = client.request(req(19, 7, timeout=5000, validate_only=False, topics=[{
        "name": name, "num_partitions": partitions, "replication_factor": 1, "assignments": [], "configs": []}]))
    assert response.topics[0].error_code == NONE
    return response.topics[0].topic_id


def topology(app: str, source: str, epoch: int = 1) -> dict:
    """A word count's: subtopology 0 reads `source` and writes a repartition topic; subtopology 1
    reads it into a store with a changelog."""
    repartition, changelog = f"{app}-words-repartition", f"{app}-counts-changelog"
    info = {"partitions": 0, "replication_factor": 0}
    return {"epoch": epoch, "subtopologies": [
        {"subtopology_id": "0", "source_topics": [source], "source_topic_regex": [], "state_changelog_topics": [],
         "repartition_sink_topics": [repartition], "repartition_source_topics": [], "copartition_groups": []},
        {"subtopology_id": "1", "source_topics": [], "source_topic_regex": [],
         "state_changelog_topics": [{"name": changelog, **info, "topic_configs": [
             {"key": "cleanup.policy", "value": "compact"}]}],
         "repartition_sink_topics": [],
         "repartition_source_topics": [{"name": repartition, **info, "topic_configs": [
             {"key": "cleanup.policy", "value": "delete"}]}],
         "copartition_groups": []},
    ]}


def heartbeat(client, group, member, epoch, *, topo=None, tasks=None, process="p1", instance=None,
              rebalance_timeout=-1, endpoint_epoch=0):
    """`tasks`: (active, standby, warmup) as {subtopology: [partitions]}, None: not sent."""
    def ids(t):
        return [{"subtopology_id": s, "partitions": list(ps)} for s, ps in sorted(t.items())]
    return client.request(req(
        HEARTBEAT, 0, group_id=group, member_id=member, member_epoch=epoch,
        endpoint_information_epoch=endpoint_epoch, instance_id=instance, rack_id=None,
        rebalance_timeout=rebalance_timeout, topology=topo,
        active_tasks=None if tasks is None else ids(tasks[0]),
        standby_tasks=None if tasks is None else ids(tasks[1]),
        warmup_tasks=None if tasks is None else ids(tasks[2]),
        process_id=process if epoch == 0 else None, user_endpoint=None,
        client_tags=[] if epoch == 0 else None, task_offsets=None, task_end_offsets=None,
        shutdown_application=False))


def tasks_of(task_ids) -> dict:
    return {t.subtopology_id: tuple(t.partitions) for t in task_ids or ()}


def statuses(response) -> dict:
    return {s.status_code: s.status_detail for s in response.status or ()}


class Member:
    """A Streams member over the wire: heartbeats with its epoch and the tasks it owns."""

    def __init__(self, client, group, member_id, topo, process):
        self.client, self.group, self.member_id, self.topo, self.process = client, group, member_id, topo, process
        self.epoch, self.active, self.standby, self.warmup = 0, {}, {}, {}

    def beat(self):
        if self.epoch == 0:
            response = heartbeat(self.client, self.group, self.member_id, 0, topo=self.topo, tasks=({}, {}, {}),
                                 process=self.process, rebalance_timeout=30_000)
        else:
            response = heartbeat(self.client, self.group, self.member_id, self.epoch,
                                 tasks=(self.active, self.standby, self.warmup))
        assert response.error_code == NONE, response.error_message
        self.epoch = response.member_epoch
        if response.active_tasks is not None:
            self.active, self.standby, self.warmup = (tasks_of(response.active_tasks),
                                                      tasks_of(response.standby_tasks), tasks_of(response.warmup_tasks))
        return response


def describe(client, group):
    return client.request(req(DESCRIBE, 0, group_ids=[group], include_authorized_operations=False)).groups[0]


def test_api_versions_advertises_the_streams_apis_and_streams_version(broker):
    with WireClient(broker.bootstrap) as client:
        response = client.request(req(API_VERSIONS, 3, client_software_name="t", client_software_version="1"))
    ranges = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
    assert ranges[HEARTBEAT] == (0, 0) and ranges[DESCRIBE] == (0, 0)
    finalized = {f.name: f.max_version_level for f in response.finalized_features}
    assert finalized["streams.version"] == 1


def test_the_topology_creates_its_internal_topics_then_tasks_are_assigned(broker, unique):
    source, group = unique("sg-in"), unique("sg-app")
    logs = broker.broker.logs
    with WireClient(broker.bootstrap) as client:
        create_topic(client, source, 3)
        a = Member(client, group, "a", topology(group, source), "p1")
        first = a.beat()
        # The first heartbeat finds the internal topics missing and they are created with the counts
        # the coordinator decided: the repartition topic as the source, the changelog as its tasks.
        (code, detail), = statuses(first).items()
        assert code == MISSING_INTERNAL_TOPICS and detail.startswith("Internal topics are missing: ")
        assert sorted(detail.split(": ", 1)[1].split(", ")) == [f"{group}-counts-changelog", f"{group}-words-repartition"]
        assert (first.member_epoch, tasks_of(first.active_tasks)) == (1, {})
        changelog, repartition = logs.topic(f"{group}-counts-changelog"), logs.topic(f"{group}-words-repartition")
        assert changelog.num_partitions == 3 and repartition.num_partitions == 3
        assert logs.log(changelog.name, 0).config.cleanup_policy == "compact"
        assert describe(client, group).group_state == "NotReady"
        # The next one validates the topology: a new group epoch, and every task to the member.
        second = a.beat()
        assert statuses(second) == {}
        assert second.member_epoch == 2
        assert (a.active, a.standby, a.warmup) == ({"0": (0, 1, 2), "1": (0, 1, 2)}, {}, {})
        assert to_ms(second.heartbeat_interval) == 1000 and to_ms(second.task_offset_interval) == 60_000
        d = describe(client, group)
        assert (d.error_code, d.group_state, d.group_epoch, d.assignment_epoch) == (NONE, "Stable", 2, 2)
        assert [(s.subtopology_id, [(t.name, t.partitions) for t in s.state_changelog_topics],
                 [(t.name, t.partitions) for t in s.repartition_source_topics]) for s in d.topology.subtopologies] == [
            ("0", [], []), ("1", [(f"{group}-counts-changelog", 3)], [(f"{group}-words-repartition", 3)])]
        (m,) = d.members
        assert (m.member_id, m.member_epoch, m.process_id, m.topology_epoch) == ("a", 2, "p1", 1)
        assert tasks_of(m.assignment.active_tasks) == tasks_of(m.target_assignment.active_tasks) == a.active
        # ListGroups and DescribeGroups see a streams group as Kafka 4.4 does.
        listed = client.request(req(LIST, 5, states_filter=[], types_filter=["streams"])).groups
        assert [(g.group_id, g.protocol_type, g.group_state, g.group_type) for g in listed
                if g.group_id == group] == [(group, "streams", "Stable", "streams")]
        (classic,) = client.request(req(CLASSIC_DESCRIBE, 6, groups=[group], include_authorized_operations=False)).groups
        assert (classic.error_code, classic.error_message) == (GROUP_ID_NOT_FOUND, f"Group {group} is not a classic group.")


def test_tasks_move_to_a_new_member_only_once_released(broker, unique):
    source, group = unique("sg-in"), unique("sg-app")
    with WireClient(broker.bootstrap) as client:
        create_topic(client, source, 4)
        a = Member(client, group, "a", topology(group, source), "p1")
        a.beat()
        a.beat()
        assert a.active == {"0": (0, 1, 2, 3), "1": (0, 1, 2, 3)} and a.epoch == 2
        b = Member(client, group, "b", topology(group, source), "p2")
        joined = b.beat()
        # B joins at the new epoch with the tasks nobody holds: none yet, A still has them all.
        assert (joined.member_epoch, b.active) == (3, {})
        assert describe(client, group).group_state == "Reconciling"
        # A is told to give half up; it stays at its epoch until it does.
        revoking = a.beat()
        assert revoking.member_epoch == 2
        kept = a.active
        assert sum(len(ps) for ps in kept.values()) == 4
        assert {m.member_id: m.member_epoch for m in describe(client, group).members} == {"a": 2, "b": 3}
        # B still gets nothing while A owns them.
        b.beat()
        assert b.active == {}
        # A acknowledges (its heartbeat no longer reports them): it moves to epoch 3, B gets them.
        assert a.beat().member_epoch == 3
        b.beat()
        assert b.epoch == 3
        together = {(s, p) for m in (a, b) for s, ps in m.active.items() for p in ps}
        assert len(together) == 8 and not {(s, p) for s, ps in a.active.items() for p in ps} & {
            (s, p) for s, ps in b.active.items() for p in ps}
        assert describe(client, group).group_state == "Stable"
        # B leaves: the group epoch goes up and A gets every task back.
        left = heartbeat(client, group, "b", -1)
        assert (left.error_code, left.member_epoch) == (NONE, -1)
        a.beat()
        assert a.epoch == 4 and a.active == {"0": (0, 1, 2, 3), "1": (0, 1, 2, 3)}


def test_epochs_fence_stale_and_unknown_members(broker, unique):
    source, group = unique("sg-in"), unique("sg-app")
    with WireClient(broker.bootstrap) as client:
        create_topic(client, source, 2)
        a = Member(client, group, "a", topology(group, source), "p1")
        a.beat()
        a.beat()
        ahead = heartbeat(client, group, "a", a.epoch + 1, tasks=(a.active, {}, {}))
        assert (ahead.error_code, ahead.error_message) == (
            FENCED_MEMBER_EPOCH, f"The streams group member has a greater member epoch ({a.epoch + 1}) than the one "
                                 f"known by the group coordinator ({a.epoch}). The member must abandon all its "
                                 f"partitions and rejoin.")
        behind = heartbeat(client, group, "a", a.epoch - 2 if a.epoch > 1 else 0, tasks=(a.active, {}, {}))
        assert behind.error_code in (FENCED_MEMBER_EPOCH, INVALID_REQUEST)
        unknown = heartbeat(client, group, "nobody", 1, tasks=({}, {}, {}))
        assert (unknown.error_code, unknown.error_message) == (
            UNKNOWN_MEMBER_ID, f"Member nobody is not a member of group {group}.")
        missing = heartbeat(client, unique("no-group"), "m", 1, tasks=({}, {}, {}))
        assert missing.error_code == GROUP_ID_NOT_FOUND
        no_topology = heartbeat(client, group, "c", 0, tasks=({}, {}, {}), rebalance_timeout=1000)
        assert (no_topology.error_code, no_topology.error_message) == (
            INVALID_REQUEST, "Topology must be non-null when (re-)joining.")
        internal = heartbeat(client, unique("g"), "c", 0, topo=topology("x", "__consumer_offsets"),
                             tasks=({}, {}, {}), rebalance_timeout=1000)
        assert (internal.error_code, internal.error_message) == (
            STREAMS_INVALID_TOPOLOGY, "Use of Kafka internal topics __consumer_offsets in a Kafka Streams topology "
                                      "is prohibited.")
        # A task the topology does not have.
        bogus = heartbeat(client, group, "a", a.epoch, tasks=({"0": [7]}, {}, {}))
        assert (bogus.error_code, bogus.error_message) == (
            INVALID_REQUEST, "Task 7 for subtopology 0 is invalid. Number of tasks for this subtopology: 2")
        # OffsetCommit is checked against the member's epoch.
        commit = client.request(req(COMMIT, 9, group_id=group, generation_id_or_member_epoch=a.epoch + 5,
                                    member_id="a", group_instance_id=None, retention_time_ms=-1, topics=[
                                        {"name": source, "partitions": [{"partition_index": 0, "committed_offset": 1,
                                                                         "committed_leader_epoch": -1,
                                                                         "committed_metadata": ""}]}]))
        assert commit.topics[0].partitions[0].error_code == STALE_MEMBER_EPOCH
        commit = client.request(req(COMMIT, 9, group_id=group, generation_id_or_member_epoch=a.epoch,
                                    member_id="a", group_instance_id=None, retention_time_ms=-1, topics=[
                                        {"name": source, "partitions": [{"partition_index": 0, "committed_offset": 1,
                                                                         "committed_leader_epoch": -1,
                                                                         "committed_metadata": ""}]}]))
        assert commit.topics[0].partitions[0].error_code == NONE
        # OffsetFetch naming the member checks its epoch too.
        for epoch, expected in ((a.epoch, NONE), (a.epoch + 1, STALE_MEMBER_EPOCH)):
            (answer,) = client.request(req(FETCH, 9, require_stable=True, groups=[{
                "group_id": group, "member_id": "a", "member_epoch": epoch,
                "topics": [{"name": source, "partition_indexes": [0]}]}])).groups
            assert answer.error_code == expected
        # A group with members is not deleted.
        (result,) = client.request(req(DELETE, 2, groups_names=[group])).results
        assert result.error_code == NON_EMPTY_GROUP


def test_missing_source_topics_are_a_status_not_an_error(broker, unique):
    group, source = unique("sg-app"), unique("sg-later")
    with WireClient(broker.bootstrap) as client:
        response = heartbeat(client, group, "a", 0, topo=topology(group, source), tasks=({}, {}, {}),
                             rebalance_timeout=1000)
        assert response.error_code == NONE
        assert statuses(response) == {MISSING_SOURCE_TOPICS: f"Source topics {source} are missing."}
        assert describe(client, group).group_state == "NotReady"
        assert broker.broker.logs.topic(f"{group}-words-repartition") is None
        # Once the source exists, the next heartbeat configures the topology and creates the rest.
        create_topic(client, source, 1)
        again = heartbeat(client, group, "a", response.member_epoch, tasks=({}, {}, {}))
        assert MISSING_INTERNAL_TOPICS in statuses(again)
        assert broker.broker.logs.topic(f"{group}-words-repartition").num_partitions == 1


def test_the_group_survives_a_restart(start_broker, unique):
    source, group = unique("sg-in"), unique("sg-app")
    with start_broker() as broker, WireClient(broker.bootstrap) as client:
        create_topic(client, source, 2)
        a = Member(client, group, "a", topology(group, source), "p1")
        b = Member(client, group, "b", topology(group, source), "p2")
        for _ in range(4):
            a.beat()
            b.beat()
        before = describe(client, group)
    with start_broker() as broker, WireClient(broker.bootstrap) as client:
        after = describe(client, group)
        assert (after.group_state, after.group_epoch, after.assignment_epoch) == (
            before.group_state, before.group_epoch, before.assignment_epoch)
        assert after.topology.epoch == 1 and len(after.topology.subtopologies) == 2
        assert {m.member_id: (m.member_epoch, tasks_of(m.assignment.active_tasks)) for m in after.members} == {
            m.member_id: (m.member_epoch, tasks_of(m.assignment.active_tasks)) for m in before.members}
        # The members go on where they were: not fenced, no new epoch.
        a.client = b.client = client
        assert a.beat().member_epoch == a.epoch and b.beat().member_epoch == b.epoch
        assert describe(client, group).group_epoch == before.group_epoch


def test_the_streams_protocol_can_be_switched_off(start_broker, unique):
    for settings in ({"group_coordinator_rebalance_protocols": "classic,consumer"}, {"streams_version": "0"}):
        with start_broker(**settings) as broker, WireClient(broker.bootstrap) as client:
            response = heartbeat(client, unique("off"), "m", 0, topo=topology("x", "t"), tasks=({}, {}, {}),
                                 rebalance_timeout=1000)
            assert response.error_code == UNSUPPORTED_VERSION
            assert describe(client, "g").error_code == UNSUPPORTED_VERSION


def test_update_features_turns_streams_groups_off_and_on(broker, unique):
    from minibroker.admin_client import AdminClient

    def update(c, level, upgrade_type):
        r = c.call(57, {"timeout": 5000, "validate_only": False, "feature_updates": [
            {"feature": "streams.version", "max_version_level": level, "upgrade_type": upgrade_type}]}, version=1)
        return int(r.error_code)

    with AdminClient(broker.bootstrap) as c, WireClient(broker.bootstrap) as client:
        assert update(c, 2, 1) != NONE  # a level this broker does not support (Kafka's: 0-1)
        assert update(c, 0, 2) == NONE  # a safe downgrade: streams groups are no longer served
        response = heartbeat(client, unique("off"), "m", 0, topo=topology("x", "t"), tasks=({}, {}, {}),
                             rebalance_timeout=1000)
        assert response.error_code == UNSUPPORTED_VERSION
        assert update(c, 1, 1) == NONE
        response = heartbeat(client, unique("on"), "m", 0, topo=topology("x", unique("t")), tasks=({}, {}, {}),
                             rebalance_timeout=1000)
        assert response.error_code == NONE


def test_standby_tasks_go_to_another_process(start_broker, unique):
    source, group = unique("sg-in"), unique("sg-app")
    with start_broker(group_streams_num_standby_replicas="1") as broker, WireClient(broker.bootstrap) as client:
        create_topic(client, source, 2)
        a = Member(client, group, "a", topology(group, source), "p1")
        b = Member(client, group, "b", topology(group, source), "p2")
        for _ in range(4):
            a.beat()
            b.beat()
        # Subtopology 1 has a store: each of its tasks has a standby, on the process not running it.
        for member, other in ((a, b), (b, a)):
            assert member.standby.get("1", ()) == other.active.get("1", ()), (a.active, a.standby, b.active, b.standby)
        assert "0" not in a.standby and "0" not in b.standby  # stateless: no standby
        (d,) = client.request(req(DESCRIBE, 0, group_ids=[group], include_authorized_operations=False)).groups
        assert {m.member_id: tasks_of(m.assignment.standby_tasks) for m in d.members} == {
            "a": a.standby, "b": b.standby}
