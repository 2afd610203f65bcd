"""`minibroker topics` against a live broker: kafka-topics.sh's options, checks and output, and what
each command did as the broker's own state shows it; `minibroker --help` lists every command on one
line."""

import base64
import os
import subprocess
import sys

import pytest

from minibroker.cli import build_parser, main
from minibroker.testing import running_broker

MINIBROKER = [sys.executable, "-m", "minibroker.cli"]


def topics(capsys, bootstrap, *argv):
    """(exit code, stdout lines, stderr) of `minibroker topics --bootstrap-server B ARGV` in process."""
    code = main(["topics", "--bootstrap-server", bootstrap, *argv])
    captured = capsys.readouterr()
    return code, captured.out.splitlines(), captured.err


def partitions_of(broker, topic):
    info = broker.broker.logs.topic(topic)
    return None if info is None else info.num_partitions


def test_create_describe_alter_delete_as_kafka_topics_prints_them(broker, capsys, unique):
    topic = unique("orders")
    code, out, _ = topics(capsys, broker.bootstrap, "--create", "--topic", topic, "--partitions", "3",
                          "--replication-factor", "1", "--config", "retention.ms=3600000",
                          "--config", "max.message.bytes = 2000000")
    assert (code, out) == (0, [f"Created topic {topic}."])
    assert partitions_of(broker, topic) == 3

    code, out, _ = topics(capsys, broker.bootstrap, "--describe", "--topic", topic)
    topic_id = base64.urlsafe_b64encode(broker.broker.logs.topic(topic).topic_id.bytes).decode().rstrip("=")
    assert code == 0
    assert out[0] == (f"Topic: {topic}\tTopicId: {topic_id}\tPartitionCount: 3\tReplicationFactor: 1\t"
                      "Configs: max.message.bytes=2000000,retention.ms=3600000")
    assert out[1:] == [f"\tTopic: {topic}\tPartition: {p}\tLeader: 1\tReplicas: 1\tIsr: 1\tElr: \tLastKnownElr: "
                       for p in range(3)]

    code, out, _ = topics(capsys, broker.bootstrap, "--alter", "--topic", topic, "--partitions", "5")
    assert (code, out) == (0, [])
    assert partitions_of(broker, topic) == 5

    code, out, _ = topics(capsys, broker.bootstrap, "--delete", "--topic", topic)
    assert (code, out) == (0, [])
    assert partitions_of(broker, topic) is None


def test_list_is_sorted_and_filtered_by_regex_and_internal(broker, capsys, unique):
    names = [unique("b-list"), unique("a-list"), unique("a-other")]
    for name in names:
        assert topics(capsys, broker.bootstrap, "--create", "--topic", name)[0] == 0
    # The broker creates __consumer_offsets at start; --list includes it unless --exclude-internal.
    code, out, _ = topics(capsys, broker.bootstrap, "--list")
    assert code == 0 and out == sorted(out) and set(names) <= set(out) and "__consumer_offsets" in out
    code, out, _ = topics(capsys, broker.bootstrap, "--list", "--exclude-internal")
    assert "__consumer_offsets" not in out and set(names) <= set(out)
    # --topic is a regular expression matched in full; ',' separates alternatives.
    assert topics(capsys, broker.bootstrap, "--list", "--topic", "a-.*")[1] == sorted(names[1:])
    assert topics(capsys, broker.bootstrap, "--list", "--topic", f"{names[0]},{names[1]}")[1] == sorted(names[:2])
    assert topics(capsys, broker.bootstrap, "--list", "--topic", "list")[1] == [""]  # no full match: Kafka's blank line


def test_partition_count_defaults_to_the_brokers_num_partitions(tmp_path, capsys, unique):
    with running_broker(tmp_path / "data", num_partitions=4) as running:
        topic = unique("defaults")
        assert topics(capsys, running.bootstrap, "--create", "--topic", topic)[0] == 0
        assert partitions_of(running, topic) == 4


def test_describe_pages_through_the_partitions(broker, capsys, unique):
    topic = unique("paged")
    topics(capsys, broker.bootstrap, "--create", "--topic", topic, "--partitions", "7")
    code, out, _ = topics(capsys, broker.bootstrap, "--describe", "--topic", topic,
                          "--partition-size-limit-per-response", "2")
    assert code == 0 and out[0].startswith(f"Topic: {topic}\t") and "PartitionCount: 7" in out[0]
    assert [line.split("\t")[2] for line in out[1:]] == [f"Partition: {p}" for p in range(7)]


def test_describe_reports_and_overrides_filter_as_kafka_does(broker, capsys, unique):
    plain, tuned = unique("plain"), unique("tuned")
    topics(capsys, broker.bootstrap, "--create", "--topic", plain)
    topics(capsys, broker.bootstrap, "--create", "--topic", tuned, "--config", "cleanup.policy=compact")
    pattern = f"{plain},{tuned}"
    out = topics(capsys, broker.bootstrap, "--describe", "--topic", pattern, "--topics-with-overrides")[1]
    assert len(out) == 1 and out[0].startswith(f"Topic: {tuned}\t") and out[0].endswith("Configs: cleanup.policy=compact")
    # One broker: every partition has its whole ISR, which is min.insync.replicas (1).
    assert topics(capsys, broker.bootstrap, "--describe", "--topic", pattern, "--under-replicated-partitions")[1] == []
    assert topics(capsys, broker.bootstrap, "--describe", "--topic", pattern, "--unavailable-partitions")[1] == []
    at_min = topics(capsys, broker.bootstrap, "--describe", "--topic", pattern, "--at-min-isr-partitions")[1]
    assert [line.split("\t")[1] for line in at_min] == [f"Topic: {plain}", f"Topic: {tuned}"]


def test_describe_by_topic_id(broker, capsys, unique):
    topic = unique("by-id")
    topics(capsys, broker.bootstrap, "--create", "--topic", topic)
    topic_id = str(broker.broker.logs.topic(topic).topic_id)
    out = topics(capsys, broker.bootstrap, "--describe", "--topic-id", topic_id)[1]
    assert out[0].startswith(f"Topic: {topic}\t") and len(out) == 2


def test_errors_are_kafkas(broker, capsys, unique):
    topic = unique("errors")
    assert topics(capsys, broker.bootstrap, "--create", "--topic", topic)[0] == 0
    # The broker's answers, printed on stdout as TopicCommand.printException does.
    code, out, _ = topics(capsys, broker.bootstrap, "--create", "--topic", topic)
    assert (code, out) == (1, [f"Error while executing topic command : Topic '{topic}' already exists."])
    assert topics(capsys, broker.bootstrap, "--create", "--topic", topic, "--if-not-exists")[:2] == (0, [])
    code, out, _ = topics(capsys, broker.bootstrap, "--alter", "--topic", topic, "--partitions", "1")
    assert code == 1 and out[0].startswith("Error while executing topic command : ") and "1" in out[0]
    code, out, _ = topics(capsys, broker.bootstrap, "--create", "--topic", unique("bad"), "--config", "retention.ms=soon")
    assert code == 1 and "retention.ms" in out[0] and "soon" in out[0]
    # What TopicCommand refuses itself, on stderr.
    missing = unique("missing")
    for argv in (["--delete", "--topic", missing], ["--alter", "--topic", missing, "--partitions", "2"],
                 ["--describe", "--topic", missing]):
        code, out, err = topics(capsys, broker.bootstrap, *argv)
        assert (code, out, err.strip()) == (1, [], f"Topic '{missing}' does not exist as expected")
        assert topics(capsys, broker.bootstrap, *argv, "--if-exists")[:2] == (0, [])
    code, _, err = topics(capsys, broker.bootstrap, "--create", "--topic", unique("x"), "--config", "retention.ms")
    assert code == 1 and 'must be in the format "key=val"' in err
    code, _, err = topics(capsys, broker.bootstrap, "--alter", "--topic", topic, "--partitions", "3",
                          "--config", "retention.ms=1")
    assert code == 1 and "kafka-configs" in err
    code, _, err = topics(capsys, broker.bootstrap, "--list", "--describe")
    assert code == 1 and "exactly one action" in err
    code, _, err = topics(capsys, broker.bootstrap, "--list", "--partitions", "0")
    assert code == 1 and "can't be used with option \"[--list]\"" in err
    code, _, err = topics(capsys, broker.bootstrap, "--create", "--topic", unique("x"), "--partitions", "0")
    assert code == 1 and "The partitions must be greater than 0" in err


def test_unreachable_broker_is_named(capsys):
    code, out, _ = topics(capsys, "127.0.0.1:1", "--list")
    assert code == 1 and out[0].startswith("Error while executing topic command : cannot connect to 127.0.0.1:1")


def test_over_sasl_with_command_config(tmp_path, capsys, unique):
    with running_broker(tmp_path / "data", sasl_users={"alice": "alice-secret"}) as running:
        properties = tmp_path / "client.properties"
        properties.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-512\n"
                              "sasl.username=alice\nsasl.password=alice-secret\n")
        topic = unique("sasl")
        code, out, _ = topics(capsys, running.sasl_bootstrap, "--command-config", str(properties),
                              "--create", "--topic", topic)
        assert (code, out) == (0, [f"Created topic {topic}."])
        properties.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
                              "sasl.username=alice\nsasl.password=wrong\n")
        code, out, _ = topics(capsys, running.sasl_bootstrap, "--command-config", str(properties), "--list")
        assert code == 1 and "Authentication failed" in out[0]


def test_the_installed_command_runs(broker, unique):
    topic = unique("command")
    result = subprocess.run(MINIBROKER + ["topics", "--bootstrap-server", broker.bootstrap, "--create", "--topic",
                                          topic, "--partitions", "2"], capture_output=True, text=True, timeout=60)
    assert (result.returncode, result.stdout) == (0, f"Created topic {topic}.\n"), result.stderr
    assert partitions_of(broker, topic) == 2


def test_help_lists_every_command_on_one_line():
    result = subprocess.run(MINIBROKER + ["--help"], capture_output=True, text=True, check=True,
                            env={**os.environ, "COLUMNS": "80"})
    lines = result.stdout.splitlines()
    (sub,) = [a for a in build_parser()._actions if a.dest == "command"]
    assert set(sub.choices) >= {"serve", "topics", "configs"}
    for name in sub.choices:
        (line,) = [li for li in lines if li.split()[:1] == [name]]
        assert len(line.split()) > 3, f"{name} has no one-line description: {line!r}"
        following = lines[lines.index(line) + 1]
        assert following.split()[:1] in ([], ["options:"]) or following.split()[0] in sub.choices, (
            f"{name}'s description runs onto a second line: {following!r}")


@pytest.mark.parametrize("command", ["serve", "topics", "configs"])
def test_each_command_has_help_with_examples(command):
    out = subprocess.run(MINIBROKER + [command, "--help"], capture_output=True, text=True, check=True).stdout
    assert "examples:" in out and f"minibroker {command}" in out
