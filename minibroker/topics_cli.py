"""`minibroker topics`: create, list, describe, alter and delete topics on a running broker, as
kafka-topics.sh does.

Talks to the broker over the wire with the small blocking client in minibroker.admin_client:
CreateTopics, Metadata (to list), DescribeTopicPartitions (paged; Metadata on a broker without it)
with DescribeConfigs (to describe), CreatePartitions (--alter) and DeleteTopics. Options, checks and
output follow Kafka's TopicCommand: one action of --create, --list, --describe, --alter, --delete;
`--topic` is a regular expression (full match; ',' separates alternatives) except with --create;
`--describe` prints a topic line (TopicId, PartitionCount, ReplicationFactor, the configs that are
not defaults) and a line per partition (Leader, Replicas, Isr, Elr, LastKnownElr), tab separated;
a failed request prints "Error while executing topic command : <the broker's message>" and exits 1.
As in Kafka 4, topic configs are set with --create only (kafka-configs.sh or IncrementalAlterConfigs
change them afterwards).
"""

from __future__ import annotations

import argparse
import re
import sys
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from minibroker.admin_client import AdminClient, AdminClientError
from minibroker.protocol.errors import ErrorCode

EPILOG = """\
examples:
  minibroker topics --bootstrap-server 127.0.0.1:9092 --create --topic orders --partitions 3 \\
      --config retention.ms=3600000 --config cleanup.policy=compact
  minibroker topics --bootstrap-server 127.0.0.1:9092 --list
  minibroker topics --bootstrap-server 127.0.0.1:9092 --describe --topic orders
  minibroker topics --bootstrap-server 127.0.0.1:9092 --describe --topic 'orders.*' --topics-with-overrides
  minibroker topics --bootstrap-server 127.0.0.1:9092 --alter --topic orders --partitions 6
  minibroker topics --bootstrap-server 127.0.0.1:9092 --delete --topic orders

--topic is a regular expression matched against whole names, except with --create.
On a SASL_PLAINTEXT listener pass --command-config with security.protocol=SASL_PLAINTEXT,
sasl.mechanism=PLAIN|SCRAM-SHA-256|SCRAM-SHA-512 and sasl.username/sasl.password (or Kafka's
sasl.jaas.config=... username="..." password="...";).
"""

ACTIONS = ("create", "list", "describe", "alter", "delete")
SOURCE_DEFAULT_CONFIG = 5  # DescribeConfigs' DEFAULT_CONFIG: Kafka's ConfigEntry.isDefault()
TOPIC_RESOURCE = 2
ZERO_UUID = uuid.UUID(int=0)
_ALTER_CONFIGS_HINT = " (To alter topic configurations, the kafka-configs tool can be used.)"


class UsageError(Exception):
    """What Kafka's TopicCommand refuses as an IllegalArgumentException: options that do not go
    together, a bad value, a topic that does not exist as expected (on stderr, exit 1)."""


class CommandError(Exception):
    """What a request answered or a check found: printed as kafka-topics prints it (exit 1)."""


@dataclass
class _Partition:
    index: int
    leader: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    elr: tuple[int, ...] | None = None
    last_known_elr: tuple[int, ...] | None = None


@dataclass
class _Topic:
    name: str
    topic_id: uuid.UUID | None
    is_internal: bool
    partitions: list[_Partition] = field(default_factory=list)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT", help="the broker to talk to")
    parser.add_argument("--command-config", metavar="FILE", type=Path,
                        help="client properties (SASL settings for a SASL_PLAINTEXT listener)")
    action = parser.add_argument_group("actions (exactly one)")
    action.add_argument("--create", action="store_true", help="create a new topic")
    action.add_argument("--list", action="store_true", help="list all available topics")
    action.add_argument("--describe", action="store_true", help="list details for the given topics")
    action.add_argument("--alter", action="store_true", help="alter the number of partitions" + _ALTER_CONFIGS_HINT)
    action.add_argument("--delete", action="store_true", help="delete a topic")
    parser.add_argument("--topic", metavar="TOPIC",
                        help="the topic to create, alter, describe or delete; a regular expression except with --create")
    parser.add_argument("--topic-id", metavar="ID", help="the topic id to describe")
    parser.add_argument("--partitions", type=int, metavar="N",
                        help="the number of partitions of the topic created or altered (--create: the broker's "
                             "num.partitions when not given)")
    parser.add_argument("--replication-factor", type=int, metavar="R",
                        help="replication factor of the topic created (the broker's default.replication.factor "
                             "when not given)")
    parser.add_argument("--config", action="append", default=[], metavar="NAME=VALUE",
                        help="a topic config override of the topic created (repeatable); with --create only"
                             + _ALTER_CONFIGS_HINT)
    parser.add_argument("--if-exists", action="store_true",
                        help="with --alter, --delete or --describe: do nothing when the topic does not exist")
    parser.add_argument("--if-not-exists", action="store_true",
                        help="with --create: do not fail when the topic already exists")
    parser.add_argument("--exclude-internal", action="store_true",
                        help="leave internal topics out when listing or describing (they are included by default)")
    parser.add_argument("--topics-with-overrides", action="store_true",
                        help="with --describe: only topics that have overridden configs")
    for flag, text in (("--under-replicated-partitions", "only under-replicated partitions"),
                       ("--unavailable-partitions", "only partitions whose leader is not available"),
                       ("--under-min-isr-partitions", "only partitions whose ISR is smaller than min.insync.replicas"),
                       ("--at-min-isr-partitions", "only partitions whose ISR equals min.insync.replicas")):
        parser.add_argument(flag, action="store_true", help=f"with --describe: {text}")
    parser.add_argument("--partition-size-limit-per-response", type=int, metavar="N",
                        help="most partitions in one DescribeTopicPartitions response (default 2000)")


_REPORTS = ("under_replicated_partitions", "unavailable_partitions", "under_min_isr_partitions",
            "at_min_isr_partitions")
_ONLY_WITH = {  # option -> the actions it may go with (Kafka's checkInvalidArgs)
    "config": ("create",), "partitions": ("create", "alter"), "replication_factor": ("create",),
    "if_exists": ("alter", "delete", "describe"), "if_not_exists": ("create",),
    "exclude_internal": ("list", "describe"), "topics_with_overrides": ("describe",),
    "topic_id": ("describe",), "partition_size_limit_per_response": ("describe",),
    **{report: ("describe",) for report in _REPORTS},
}


def _check(args: argparse.Namespace) -> str:
    """The action, once the options make sense together (Kafka's TopicCommandOptions.checkArgs)."""
    chosen = [name for name in ACTIONS if getattr(args, name)]
    if len(chosen) != 1:
        raise UsageError("Command must include exactly one action: --list, --describe, --create, --alter or --delete")
    action = chosen[0]
    for option, actions in _ONLY_WITH.items():
        value = getattr(args, option)
        given = value is not None and value is not False and value != []  # (0 is given: `0 == False`)
        if given and action not in actions:
            flag = "--" + option.replace("_", "-")
            hint = _ALTER_CONFIGS_HINT if option == "config" and action == "alter" else ""
            raise UsageError(f"Option \"[{flag}]\" can't be used with option \"[--{action}]\"{hint}")
    if action not in ("list", "describe") and not args.topic:
        raise UsageError(f"Missing required argument \"[topic]\" (--{action} needs --topic)")
    if action == "alter" and args.partitions is None:
        raise UsageError("Missing required argument \"[partitions]\" (--alter changes the partition count)")
    if args.topics_with_overrides and any(getattr(args, r) for r in _REPORTS):
        raise UsageError("Option \"[--topics-with-overrides]\" can't be used with the partition reports")
    if sum(bool(getattr(args, r)) for r in _REPORTS) > 1:
        raise UsageError("Give at most one of --under-replicated-partitions, --unavailable-partitions, "
                         "--under-min-isr-partitions and --at-min-isr-partitions")
    return action


def _configs(items: list[str]) -> dict[str, str]:
    """`--config` values: each exactly `key=val` (Kafka splits on '=' with the spaces around it)."""
    out = {}
    for item in items:
        parts = re.split(r"\s*=\s*", item)
        if len(parts) != 2:
            raise UsageError('requirement failed: Invalid topic config: all configs to be added must be in the '
                             'format "key=val".')
        out[parts[0].strip()] = parts[1].strip()
    return out


def _topic_pattern(text: str) -> re.Pattern[str]:
    """Kafka's TopicFilter.IncludeList: ',' for '|', surrounding quotes dropped, matched in full."""
    regex = re.sub(r"^[\"']+|[\"']+$", "", text.strip().replace(",", "|"))
    try:
        return re.compile(regex)
    except re.error as exc:
        raise UsageError(f"{text!r} is an invalid regex: {exc}") from None


def _error(code: int, message: str | None, what: str) -> CommandError:
    if message:
        return CommandError(message)
    try:
        name = ErrorCode(code).name.upper()
    except ValueError:
        name = f"error code {code}"
    return CommandError(f"{what} failed: {name}")


# ---- requests ---------------------------------------------------------------------------------------


def _metadata(client: AdminClient, names: list[str] | None) -> Any:
    body = {
        "topics": None if names is None else [{"name": n, "topic_id": None} for n in names],
        "allow_auto_topic_creation": False,
        "include_topic_authorized_operations": False,
        "include_cluster_authorized_operations": False,
    }
    return client.call(3, body)


def _all_topics(client: AdminClient) -> list[tuple[str, uuid.UUID | None, bool]]:
    """(name, topic id, internal) of every topic, by name (Admin.listTopics with listInternal)."""
    response = _metadata(client, None)
    out = []
    for topic in response.topics:
        if topic.error_code != 0 or topic.name is None:
            continue
        out.append((topic.name, getattr(topic, "topic_id", None), bool(getattr(topic, "is_internal", False))))
    return sorted(out)


def _matching(client: AdminClient, pattern: str | None, exclude_internal: bool) -> list[str]:
    """TopicCommand.getTopics: every topic (sorted), filtered by `--topic` and `--exclude-internal`."""
    regex = _topic_pattern(pattern) if pattern else None
    return [name for name, _, internal in _all_topics(client)
            if not (internal and exclude_internal) and (regex is None or regex.fullmatch(name))]


def _describe_partitions(client: AdminClient, names: list[str], limit: int | None) -> list[_Topic]:
    """Admin.describeTopics: DescribeTopicPartitions page by page (Metadata where the broker lacks it)."""
    if 75 not in client.versions:
        response = _metadata(client, names)
        topics = []
        for t in response.topics:
            if t.error_code != 0:
                raise _error(t.error_code, None, f"Describing topic {t.name}")
            topics.append(_Topic(t.name, getattr(t, "topic_id", None), bool(getattr(t, "is_internal", False)), [
                _Partition(p.partition_index, p.leader_id, tuple(p.replica_nodes), tuple(p.isr_nodes))
                for p in t.partitions]))
        return topics
    found: dict[str, _Topic] = {}
    cursor = None
    while True:
        response = client.call(75, {"topics": [{"name": n} for n in names], "response_partition_limit": limit or 2000,
                                    "cursor": cursor})
        for t in response.topics:
            if t.error_code != 0:
                raise _error(t.error_code, None, f"Describing topic {t.name}")
            topic = found.setdefault(t.name, _Topic(t.name, t.topic_id, t.is_internal))
            topic.partitions += [
                _Partition(p.partition_index, p.leader_id, tuple(p.replica_nodes), tuple(p.isr_nodes),
                           None if p.eligible_leader_replicas is None else tuple(p.eligible_leader_replicas),
                           None if p.last_known_elr is None else tuple(p.last_known_elr))
                for p in t.partitions]
        if response.next_cursor is None:
            return list(found.values())
        cursor = {"topic_name": response.next_cursor.topic_name,
                  "partition_index": response.next_cursor.partition_index}


def _topic_configs(client: AdminClient, names: list[str]) -> dict[str, list[tuple[str, str | None, bool]]]:
    """Each topic's configs as (name, value, is a default)."""
    if not names:
        return {}
    response = client.call(32, {"resources": [{"resource_type": TOPIC_RESOURCE, "resource_name": n,
                                               "configuration_keys": None} for n in names],
                                "include_synonyms": False, "include_documentation": False})
    out = {}
    for result in response.results:
        if result.error_code != 0:
            raise _error(result.error_code, result.error_message, f"Describing the configs of {result.resource_name}")
        out[result.resource_name] = [
            (c.name, c.value, (c.config_source == SOURCE_DEFAULT_CONFIG) if hasattr(c, "config_source")
             else bool(getattr(c, "is_default", False)))
            for c in result.configs]
    return out


# ---- actions ----------------------------------------------------------------------------------------


def _create(client: AdminClient, args: argparse.Namespace, out: TextIO) -> None:
    name = args.topic
    if args.replication_factor is not None and not 1 <= args.replication_factor <= 32767:
        raise UsageError("The replication factor must be between 1 and 32767 inclusive")
    if args.partitions is not None and args.partitions < 1:
        raise UsageError("The partitions must be greater than 0")
    configs = _configs(args.config)
    if "." in name or "_" in name:
        print("WARNING: Due to limitations in metric names, topics with a period ('.') or underscore ('_') could "
              "collide. To avoid issues it is best to use either, but not both.", file=out)
    response = client.call(19, {"topics": [{
        "name": name,
        "num_partitions": -1 if args.partitions is None else args.partitions,
        "replication_factor": -1 if args.replication_factor is None else args.replication_factor,
        "assignments": [],
        "configs": [{"name": k, "value": v} for k, v in configs.items()],
    }], "timeout": 30_000, "validate_only": False})
    (result,) = response.topics
    if result.error_code == ErrorCode.topic_already_exists and args.if_not_exists:
        return
    if result.error_code != 0:
        raise _error(result.error_code, result.error_message, f"Creating topic {name}")
    print(f"Created topic {name}.", file=out)


def _ensure_exists(found: list[str], args: argparse.Namespace) -> None:
    if args.topic and not found and not args.if_exists:
        raise UsageError(f"Topic '{args.topic}' does not exist as expected")


def _list(client: AdminClient, args: argparse.Namespace, out: TextIO) -> None:
    print("\n".join(_matching(client, args.topic, args.exclude_internal)), file=out)


def _delete(client: AdminClient, args: argparse.Namespace, out: TextIO) -> None:
    names = _matching(client, args.topic, args.exclude_internal)
    _ensure_exists(names, args)
    if not names:
        return
    response = client.call(20, {"topic_names": names, "topics": [{"name": n, "topic_id": None} for n in names],
                                "timeout": 30_000})
    for result in response.responses:
        if result.error_code != 0:
            raise _error(result.error_code, getattr(result, "error_message", None), f"Deleting topic {result.name}")


def _alter(client: AdminClient, args: argparse.Namespace, out: TextIO) -> None:
    names = _matching(client, args.topic, args.exclude_internal)
    _ensure_exists(names, args)
    if not names:
        return
    response = client.call(37, {"topics": [{"name": n, "count": args.partitions, "assignments": None} for n in names],
                                "timeout": 30_000, "validate_only": False})
    for result in response.results:
        if result.error_code != 0:
            raise _error(result.error_code, result.error_message, f"Altering topic {result.name}")


def _describe(client: AdminClient, args: argparse.Namespace, out: TextIO) -> None:
    if args.topic_id:
        try:
            wanted = uuid.UUID(args.topic_id)
        except ValueError:
            raise UsageError(f"--topic-id {args.topic_id!r} is not a topic id") from None
    if args.topic_id and wanted != ZERO_UUID:
        names = [name for name, topic_id, internal in _all_topics(client)
                 if topic_id == wanted and not (internal and args.exclude_internal)]
        if not names and not args.if_exists:
            raise UsageError(f"TopicId '{args.topic_id}' does not exist as expected")
    else:
        names = _matching(client, args.topic, args.exclude_internal)
        _ensure_exists(names, args)
    if not names:
        return
    topics = sorted(_describe_partitions(client, names, args.partition_size_limit_per_response), key=lambda t: t.name)
    configs = _topic_configs(client, [t.name for t in topics])
    live = {int(b.node_id) for b in _metadata(client, []).brokers}
    reports = [r for r in _REPORTS if getattr(args, r)]
    for topic in topics:
        entries = configs.get(topic.name, [])
        min_isr = next((int(v) for n, v, _ in entries if n == "min.insync.replicas" and v is not None), 1)
        overridden = [(n, v) for n, v, default in entries if not default]
        partitions = sorted(topic.partitions, key=lambda p: p.index)
        if not reports and (not args.topics_with_overrides or overridden) and partitions:
            line = f"Topic: {topic.name}"
            if topic.topic_id is not None and topic.topic_id != ZERO_UUID:
                line += f"\tTopicId: {_kafka_uuid(topic.topic_id)}"
            line += (f"\tPartitionCount: {len(partitions)}\tReplicationFactor: {len(partitions[0].replicas)}"
                     f"\tConfigs: {','.join(f'{n}={v}' for n, v in overridden)}")
            print(line, file=out)
        if args.topics_with_overrides:
            continue
        for p in partitions:
            has_leader = p.leader >= 0
            shown = {
                "under_replicated_partitions": len(p.replicas) - len(p.isr) > 0,
                "unavailable_partitions": not has_leader or p.leader not in live,
                "under_min_isr_partitions": not has_leader or len(p.isr) < min_isr,
                "at_min_isr_partitions": len(p.isr) == min_isr,
            }
            if reports and not shown[reports[0]]:
                continue
            print(f"\tTopic: {topic.name}\tPartition: {p.index}\tLeader: {p.leader if has_leader else 'none'}"
                  f"\tReplicas: {_ids(p.replicas)}\tIsr: {_ids(p.isr)}"
                  f"\tElr: {'N/A' if p.elr is None else _ids(p.elr)}"
                  f"\tLastKnownElr: {'N/A' if p.last_known_elr is None else _ids(p.last_known_elr)}", file=out)


def _ids(ids: tuple[int, ...]) -> str:
    return ",".join(str(i) for i in ids)


def _kafka_uuid(value: uuid.UUID) -> str:
    """A topic id as Kafka prints it: URL-safe base64 of its 16 bytes, unpadded (Uuid.toString)."""
    import base64

    return base64.urlsafe_b64encode(value.bytes).decode().rstrip("=")


def run(args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Run the parsed command; 0, or 1 after printing what failed (kafka-topics' exit codes)."""
    from minibroker.configs_cli import UsageError as PropertiesError
    from minibroker.configs_cli import _command_config

    out = out or sys.stdout
    err = err or sys.stderr
    try:
        action = _check(args)
        connection = _command_config(args.command_config)
        with AdminClient(args.bootstrap_server, client_id="minibroker-topics", **connection) as client:
            {"create": _create, "list": _list, "describe": _describe, "alter": _alter, "delete": _delete}[action](
                client, args, out)
        return 0
    except (UsageError, PropertiesError) as exc:
        print(exc, file=err)
        return 1
    except (CommandError, AdminClientError) as exc:
        print(f"Error while executing topic command : {exc}", file=out)
        return 1
