"""`minibroker share-groups` (minibroker.share_groups_cli) against a running broker, its output
shaped as Kafka 4.4's kafka-share-groups.sh prints it: --list (with --state), --describe of offsets,
members and state (with --verbose), --reset-offsets (a dry run, then --execute) and
--delete-offsets on an empty group, refusals for a group with members, and --delete."""

from __future__ import annotations

import io

from minibroker.cli import build_parser
from minibroker.share_groups_cli import run
from tests.support.share_client import produce, setup


def cli(bootstrap: str, *args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    parsed = build_parser().parse_args(["share-groups", "--bootstrap-server", bootstrap, *args])
    code = run(parsed, out, err)
    return code, out.getvalue(), err.getvalue()


def join_and_fetch(admin, group: str, member: str, topic_id) -> None:
    joined = admin.call(76, {"group_id": group, "member_id": member, "member_epoch": 0, "rack_id": None,
                             "subscribed_topic_names": [admin_topic(admin, topic_id)]})
    assert joined.error_code == 0
    again = admin.call(76, {"group_id": group, "member_id": member, "member_epoch": joined.member_epoch, "rack_id": None,
                            "subscribed_topic_names": None})
    assert again.assignment is not None  # the share partitions, initialized at the join
    fetched = admin.call(78, {"group_id": group, "member_id": member, "share_session_epoch": 0, "max_wait": 0,
                              "min_bytes": 1, "max_bytes": 1 << 20, "max_records": 500, "batch_size": 500,
                              "topics": [{"topic_id": topic_id, "partitions": [
                                  {"partition_index": 0, "acknowledgement_batches": []}]}], "forgotten_topics_data": []})
    assert fetched.error_code == 0
    acked = admin.call(79, {"group_id": group, "member_id": member, "share_session_epoch": 1, "topics": [
        {"topic_id": topic_id, "partitions": [{"partition_index": 0, "acknowledgement_batches": [
            {"first_offset": 0, "last_offset": 3, "acknowledge_types": [1]}]}]}]})
    assert acked.responses[0].partitions[0].error_code == 0


def admin_topic(admin, topic_id) -> str:
    return admin.topic_names[topic_id]


def test_list_describe_reset_delete(broker, admin, unique):
    topic, group = unique("cli-topic"), unique("cli-group")
    setup(admin, topic, group, partitions=2)
    produce(broker.bootstrap, topic, 20, per_batch=5)
    topic_id = broker.broker.logs.topic(topic).topic_id
    admin.topic_names = {topic_id: topic}
    member = "cli-member-0001"
    join_and_fetch(admin, group, member, topic_id)

    code, out, _ = cli(broker.bootstrap, "--list")
    assert code == 0 and out.splitlines() == [group]
    code, out, _ = cli(broker.bootstrap, "--list", "--state", "stable")
    width = max(15, len(group))
    assert out.splitlines() == [f"{'GROUP':<{width}} STATE", f"{group:<{width}} Stable"]

    code, out, _ = cli(broker.bootstrap, "--describe", "--group", group)
    lines = out.splitlines()
    tlen = max(15, len(topic))
    assert lines[1] == f"{'GROUP':<{width}} {'TOPIC':<{tlen}} {'PARTITION':<10} {'START-OFFSET':<13} LAG"
    partition0 = lines[2].split()
    end0 = broker.broker.logs.log(topic, 0).log_end_offset
    assert partition0[:3] == [group, topic, "0"] and partition0[4] == str(end0 - 4)  # 4 accepted

    code, out, _ = cli(broker.bootstrap, "--describe", "--group", group, "--members", "--verbose")
    header, row = out.splitlines()[1:3]
    assert header.split() == ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "MEMBER-EPOCH", "ASSIGNMENT"]
    assert row.split() == [group, member, "/127.0.0.1", "minibroker-admin", "2", "3", f"{topic}:0,1"]

    code, out, _ = cli(broker.bootstrap, "--describe", "--group", group, "--state")
    header, row = out.splitlines()[1:3]
    assert header.split()[:4] == ["GROUP", "COORDINATOR", "(ID)", "STATE"] and row.split()[-2:] == ["Stable", "1"]

    code, out, err = cli(broker.bootstrap, "--reset-offsets", "--group", group, "--topic", topic, "--to-earliest",
                         "--execute")
    assert code == 1 and err.strip() == f"Share group '{group}' is not empty."
    admin.call(76, {"group_id": group, "member_id": member, "member_epoch": -1, "rack_id": None,
                    "subscribed_topic_names": None})

    code, out, _ = cli(broker.bootstrap, "--reset-offsets", "--group", group, "--topic", f"{topic}:1", "--to-offset", "3")
    assert out.splitlines()[1:] == [f"{'GROUP':<{width}} {'TOPIC':<{tlen}} {'PARTITION':<10} NEW-OFFSET",
                                    f"{group:<{width}} {topic:<{tlen}} {'1':<10} 3"]
    code, out, _ = cli(broker.bootstrap, "--describe", "--group", group, "--offsets")
    assert out.splitlines()[3].split()[3] == "-"  # a dry run changed nothing: partition 1 was never fetched
    code, out, _ = cli(broker.bootstrap, "--reset-offsets", "--group", group, "--topic", topic, "--to-latest", "--execute")
    ends = [str(broker.broker.logs.log(topic, p).log_end_offset) for p in (0, 1)]
    assert [line.split()[-1] for line in out.splitlines()[2:]] == ends
    code, out, err = cli(broker.bootstrap, "--describe", "--group", group)
    assert [line.split()[3:] for line in out.splitlines()[2:]] == [[ends[0], "0"], [ends[1], "0"]]
    code, out, err = cli(broker.bootstrap, "--describe", "--group", group, "--members")
    assert (out.strip(), err.strip()) == ("", f"Share group '{group}' has no active members.")

    code, out, _ = cli(broker.bootstrap, "--delete-offsets", "--group", group, "--topic", topic)
    assert out.splitlines()[1:] == [f"{'TOPIC':<{tlen}} STATUS", f"{topic:<{tlen}} Successful"]
    code, out, _ = cli(broker.bootstrap, "--describe", "--group", group)
    assert out.strip() == f"Share group '{group}' has no offset information."
    code, out, _ = cli(broker.bootstrap, "--delete", "--group", group, "--group", "no-such-group")
    assert out.splitlines()[:3] == [
        "", "Error: Deletion of some share groups failed:",
        "* Group 'no-such-group' could not be deleted due to: org.apache.kafka.common.errors.GroupIdNotFoundException: "
        "Group 'no-such-group' is not a share group."]
    assert out.splitlines()[-1] == f"These share groups were deleted successfully: '{group}'"
    code, out, _ = cli(broker.bootstrap, "--list")
    assert out == ""
    code, _, err = cli(broker.bootstrap, "--describe")
    assert code == 1 and "takes one of these options" in err
