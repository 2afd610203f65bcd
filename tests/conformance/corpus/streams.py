"""KIP-1071 streams groups (StreamsGroupHeartbeat v0, StreamsGroupDescribe v0), as Kafka Streams 4.4
with group.protocol=streams sends them: a member joins with a topology whose internal topics do not
exist yet (MISSING_INTERNAL_TOPICS, the broker creates them), gets its tasks, is described, is
refused as Kafka refuses (stale epoch, unknown member, a join without a topology, Kafka's internal
topics in a topology, a task the topology does not have), and leaves; a topology whose source topic
is missing answers MISSING_SOURCE_TOPICS.

Kafka 4.4 waits group.streams.initial.rebalance.delay.ms (3 s) before a new group's first
assignment and answers ASSIGNMENT_DELAYED meanwhile; minibroker's default is 0 (docs/differences.md):
the join's statuses are compared without it, and the tasks are awaited.
"""

from __future__ import annotations

from tests.conformance.corpus import create_topic, find_coordinator
from tests.support.conformance import Run, scenario

ASSIGNMENT_DELAYED = 5


def topology(app: str, source: str) -> dict:
    """A word count's: subtopology 0 reads the source and writes a repartition topic, subtopology 1
    counts into a store with a changelog."""
    info = {"partitions": 0, "replication_factor": 0}
    return {"epoch": 0, "subtopologies": [
        {"subtopology_id": "0", "source_topics": [source], "source_topic_regex": [], "state_changelog_topics": [],
         "repartition_sink_topics": [f"{app}-rep"], "repartition_source_topics": [], "copartition_groups": []},
        {"subtopology_id": "1", "source_topics": [], "source_topic_regex": [],
         "state_changelog_topics": [{"name": f"{app}-store-changelog", **info,
                                     "topic_configs": [{"key": "cleanup.policy", "value": "compact"}]}],
         "repartition_sink_topics": [],
         "repartition_source_topics": [{"name": f"{app}-rep", **info,
                                        "topic_configs": [{"key": "cleanup.policy", "value": "delete"}]}],
         "copartition_groups": []}]}


def heartbeat(group: str, member: str, epoch: int, *, topo=None, tasks=None, rebalance_timeout=-1) -> dict:
    def ids(t):
        return [{"subtopology_id": s, "partitions": ps} for s, ps in sorted(t.items())]
    return {"group_id": group, "member_id": member, "member_epoch": epoch, "endpoint_information_epoch": 0,
            "instance_id": None, "rack_id": None, "rebalance_timeout": rebalance_timeout, "topology": topo,
            "active_tasks": None if tasks is None else ids(tasks[0]),
            "standby_tasks": None if tasks is None else ids(tasks[1]),
            "warmup_tasks": None if tasks is None else ids(tasks[2]),
            "process_id": "conformance-process" if epoch == 0 else None, "user_endpoint": None,
            "client_tags": [] if epoch == 0 else None, "task_offsets": None, "task_end_offsets": None,
            "shutdown_application": False}


def _statuses(response) -> list[tuple[int, str]]:
    return sorted((s.status_code, s.status_detail) for s in response.status or () if s.status_code != ASSIGNMENT_DELAYED)


@scenario("groups/streams-protocol", apis=(88, 89))
def _(run: Run) -> None:
    """A streams group: the join with a topology (MISSING_INTERNAL_TOPICS, the topics created with
    the partition counts the coordinator decided), the tasks, describe, a stale epoch, an unknown
    member, a join without a topology, an internal topic in a topology, an invalid task, a missing
    source topic, and the leave."""
    source, group, app = run.name("src"), run.name("g"), run.name("app")
    create_topic(run, source, 2)
    find_coordinator(run, group)
    # Kafka's group coordinator sees a new topic a moment after Metadata does: a probe group whose
    # topology reads only the source says when (no status once it is seen).
    probe, plain = run.name("probe"), {"epoch": 0, "subtopologies": [
        {"subtopology_id": "0", "source_topics": [source], "source_topic_regex": [], "state_changelog_topics": [],
         "repartition_sink_topics": [], "repartition_source_topics": [], "copartition_groups": []}]}
    probe_epoch = [0]

    def source_seen():
        body = heartbeat(probe, "probe", probe_epoch[0], topo=plain if probe_epoch[0] == 0 else None,
                         tasks=({}, {}, {}), rebalance_timeout=30000)
        response = run.call(88, 0, body, record=False)
        probe_epoch[0] = response.member_epoch
        return not any(s.status_code == 1 for s in response.status or ())

    run.wait_until(source_seen, timeout=30)
    run.call(88, 0, heartbeat(probe, "probe", -1), record=False)
    member = "conformance-streams-member"
    joined = run.call(88, 0, heartbeat(group, member, 0, topo=topology(app, source), tasks=({}, {}, {}),
                                       rebalance_timeout=30000), record=False)
    # Kafka computes the assignment after its initial delay: which epoch and tasks the join answers
    # depends on timing (the tasks are awaited below), its statuses are noted without ASSIGNMENT_DELAYED.
    run.record("join", joined, drop=("member_epoch", "status", "active_tasks", "standby_tasks", "warmup_tasks"))
    run.note("join statuses, ASSIGNMENT_DELAYED aside", _statuses(joined))
    state = {"epoch": joined.member_epoch, "active": None}

    def assigned():
        response = run.call(88, 0, heartbeat(group, member, state["epoch"], tasks=({}, {}, {})), record=False)
        state["epoch"] = response.member_epoch
        if response.active_tasks:
            state["active"] = {t.subtopology_id: sorted(t.partitions) for t in response.active_tasks}
        return state["active"]

    run.note("active tasks", run.wait_until(assigned, timeout=30))
    active = (state["active"], {}, {})
    run.call(89, 0, {"group_ids": [group, run.name("none")], "include_authorized_operations": True},
             drop=("group_epoch", "assignment_epoch", "member_epoch"))
    run.call(88, 0, heartbeat(group, member, state["epoch"] + 10, tasks=active), label="stale epoch")
    run.call(88, 0, heartbeat(group, "nobody", 3, tasks=({}, {}, {})), label="unknown member")
    run.call(88, 0, heartbeat(group, "another", 0, tasks=({}, {}, {}), rebalance_timeout=30000),
             label="join without a topology")
    run.call(88, 0, heartbeat(run.name("g2"), "m", 0, topo=topology(app, "__consumer_offsets"), tasks=({}, {}, {}),
                              rebalance_timeout=30000), label="internal topic in a topology")
    run.call(88, 0, heartbeat(group, member, state["epoch"], tasks=({"0": [7]}, {}, {})), label="invalid task")
    missing = run.call(88, 0, heartbeat(run.name("g3"), "m", 0, topo=topology(run.name("app3"), run.name("nowhere")),
                                        tasks=({}, {}, {}), rebalance_timeout=30000), record=False)
    run.note("missing source topic: error", missing.error_code)
    run.note("missing source topic: statuses", _statuses(missing))
    run.call(88, 0, heartbeat(group, member, -1), label="leave")
