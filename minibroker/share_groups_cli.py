"""`minibroker share-groups`: list, describe, delete share groups and reset or delete their offsets on
a running broker, as Kafka 4.4's kafka-share-groups.sh (ShareGroupCommand) does.

Talks to the broker over the wire with the small blocking client in minibroker.admin_client:
ListGroups (type "share"), ShareGroupDescribe, DescribeShareGroupOffsets, DeleteGroups,
AlterShareGroupOffsets, DeleteShareGroupOffsets, and FindCoordinator / ListOffsets / Metadata where
the tool needs them. One action of --list, --describe, --delete, --reset-offsets, --delete-offsets;
the output is ShareGroupCommand's, column for column:

    --list [--state [STATES]]      group ids, or GROUP STATE rows
    --describe [--offsets]         GROUP TOPIC PARTITION START-OFFSET LAG (--verbose: LEADER-EPOCH)
    --describe --members           GROUP CONSUMER-ID HOST CLIENT-ID #PARTITIONS ASSIGNMENT
                                   (--verbose: MEMBER-EPOCH)
    --describe --state             GROUP COORDINATOR (ID) STATE #MEMBERS (--verbose: GROUP-EPOCH,
                                   ASSIGNMENT-EPOCH)
    --reset-offsets                GROUP TOPIC PARTITION NEW-OFFSET (a dry run unless --execute)
    --delete-offsets               TOPIC STATUS
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, TextIO

from minibroker.admin_client import AdminClient, AdminClientError
from minibroker.protocol.errors import ErrorCode

EPILOG = """\
examples:
  minibroker share-groups --bootstrap-server 127.0.0.1:9092 --list --state
  minibroker share-groups --bootstrap-server 127.0.0.1:9092 --describe --group orders-workers
  minibroker share-groups --bootstrap-server 127.0.0.1:9092 --describe --group orders-workers --members --verbose
  minibroker share-groups --bootstrap-server 127.0.0.1:9092 --reset-offsets --group orders-workers \\
      --topic orders --to-earliest --execute
  minibroker share-groups --bootstrap-server 127.0.0.1:9092 --delete-offsets --group orders-workers --topic orders
  minibroker share-groups --bootstrap-server 127.0.0.1:9092 --delete --group orders-workers

A share group's offsets can be reset or deleted only while it has no members.
"""

ACTIONS = ("list", "describe", "delete", "reset_offsets", "delete_offsets")
SHARE_STATES = ("Empty", "Stable", "Dead")


class UsageError(Exception):
    """Options that do not go together (printed with the usage hint, exit 1)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT", help="the broker to talk to")
    parser.add_argument("--command-config", metavar="FILE", type=Path, help="client properties (SASL settings)")
    action = parser.add_argument_group("actions (exactly one)")
    action.add_argument("--list", action="store_true", help="list all share groups")
    action.add_argument("--describe", action="store_true", help="describe share groups (offsets by default)")
    action.add_argument("--delete", action="store_true", help="delete share groups (they must be empty)")
    action.add_argument("--reset-offsets", action="store_true",
                        help="reset a share group's start offsets (a dry run unless --execute; the group must be empty)")
    action.add_argument("--delete-offsets", action="store_true",
                        help="delete a share group's offsets of some topics (the group must be empty)")
    parser.add_argument("--group", action="append", default=[], metavar="GROUP", help="a share group (repeatable)")
    parser.add_argument("--all-groups", action="store_true", help="every share group (--describe, --delete)")
    parser.add_argument("--members", action="store_true", help="with --describe: the members")
    parser.add_argument("--offsets", action="store_true", help="with --describe: the start offsets and lag (default)")
    parser.add_argument("--state", nargs="?", const="", default=None, metavar="STATES",
                        help="with --describe: the group's state; with --list: each group's state, only those in STATES")
    parser.add_argument("--verbose", action="store_true", help="with --describe: more columns")
    parser.add_argument("--topic", action="append", default=[], metavar="TOPIC[:P,P...]",
                        help="with --reset-offsets or --delete-offsets: a topic (and partitions)")
    parser.add_argument("--all-topics", action="store_true", help="with --reset-offsets: every topic the group has offsets of")
    parser.add_argument("--to-earliest", action="store_true", help="reset to the log start offset")
    parser.add_argument("--to-latest", action="store_true", help="reset to the log end offset")
    parser.add_argument("--to-offset", type=int, metavar="OFFSET", help="reset to this offset")
    parser.add_argument("--to-datetime", metavar="YYYY-MM-DDTHH:mm:SS.sss",
                        help="reset to the first offset at or after this time (UTC unless it names a zone)")
    parser.add_argument("--dry-run", action="store_true", help="with --reset-offsets: show the new offsets only (default)")
    parser.add_argument("--execute", action="store_true", help="with --reset-offsets: apply them")
    parser.add_argument("--timeout", type=int, metavar="MS", help="accepted for Kafka's sake")


def run(args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Run the parsed command; 0, or 1 after printing what failed (kafka-share-groups' exit codes)."""
    from minibroker.configs_cli import UsageError as PropertiesError
    from minibroker.configs_cli import _command_config

    out, err = out or sys.stdout, err or sys.stderr
    try:
        action = _check(args)
        connection = _command_config(args.command_config)
        with AdminClient(args.bootstrap_server, client_id="minibroker-share-groups", **connection) as client:
            return {"list": _list, "describe": _describe, "delete": _delete, "reset_offsets": _reset,
                    "delete_offsets": _delete_offsets}[action](client, args, out, err)
    except (UsageError, PropertiesError) as exc:
        print(exc, file=err)
        return 1
    except (AdminClientError, _Failed) as exc:
        print(f"\nError: Executing share group command failed due to {exc}", file=out)
        return 1


class _Failed(Exception):
    pass


def _check(args: argparse.Namespace) -> str:
    chosen = [name for name in ACTIONS if getattr(args, name)]
    if len(chosen) != 1:
        raise UsageError("Command must include exactly one action: --list, --describe, --delete, --reset-offsets, "
                         "--delete-offsets.")
    action = chosen[0]
    if action in ("describe", "delete") and not args.group and not args.all_groups:
        raise UsageError(f"Option [{'--' + action.replace('_', '-')}] takes one of these options: [all-groups], [group]")
    if action in ("reset_offsets", "delete_offsets") and len(args.group) != 1:
        raise UsageError(f"Option [{'--' + action.replace('_', '-')}] takes the option: [group]")
    if action == "delete_offsets" and not args.topic:
        raise UsageError("Option [delete-offsets] takes the following options: [topic], [group]")
    if action == "reset_offsets":
        scenarios = [args.to_earliest, args.to_latest, args.to_offset is not None, args.to_datetime is not None]
        if sum(bool(s) for s in scenarios) != 1:
            raise UsageError("Option '[reset-offsets]' requires one of the following scenarios: [to-offset], "
                             "[to-datetime], [to-earliest], [to-latest]")
        if args.dry_run and args.execute:
            raise UsageError("Option [reset-offsets] only accepts one of [execute, dry-run]")
    return action


def _share_groups(client: AdminClient) -> list[Any]:
    listed = client.call(16, {"states_filter": [], "types_filter": ["share"]}, version=5)
    if listed.error_code:
        raise _Failed(ErrorCode(listed.error_code).name)
    return sorted(listed.groups, key=lambda g: g.group_id)


def _list(client: AdminClient, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    groups = _share_groups(client)
    if args.state is None:
        for group in groups:
            print(group.group_id, file=out)
        return 0
    wanted = {s.strip().lower() for s in args.state.split(",") if s.strip()}
    unknown = wanted - {s.lower() for s in SHARE_STATES}
    if unknown:
        raise UsageError(f"Invalid state list '{args.state}'. Valid states are: {', '.join(SHARE_STATES)}")
    rows = [g for g in groups if not wanted or g.group_state.lower() in wanted]
    width = max([15] + [len(g.group_id) for g in rows])
    print(f"{'GROUP':<{width}} STATE", file=out)
    for group in rows:
        print(f"{group.group_id:<{width}} {group.group_state}", file=out)
    return 0


def _groups_of(client: AdminClient, args: argparse.Namespace) -> list[str]:
    return [g.group_id for g in _share_groups(client)] if args.all_groups else sorted(set(args.group))


def _describe_groups(client: AdminClient, group_ids: list[str]) -> dict[str, Any]:
    described = client.call(77, {"group_ids": group_ids, "include_authorized_operations": False}, version=1)
    result = {}
    for group in described.groups:
        if group.error_code:
            raise _Failed(group.error_message or ErrorCode(group.error_code).name)
        result[group.group_id] = group
    return result


def _describe(client: AdminClient, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    group_ids = _groups_of(client, args)
    descriptions = _describe_groups(client, group_ids)
    names = {}
    for group in descriptions.values():
        for member in group.members:
            for tp in member.assignment.topic_partitions:
                names[tp.topic_id] = tp.topic_name
    for group_id in sorted(descriptions):
        group = descriptions[group_id]
        if args.members:
            _print_members(group, args.verbose, out, err)
        elif args.state is not None:
            _print_state(client, group, args.verbose, out, err)
        else:
            _print_offsets(client, group_id, args.verbose, out)
    return 0


def _empty_group_note(group: Any, err: TextIO) -> None:
    if group.group_state == "Empty":
        print(f"\nShare group '{group.group_id}' has no active members.", file=err)


def _print_members(group: Any, verbose: bool, out: TextIO, err: TextIO) -> None:
    _empty_group_note(group, err)
    if not group.members:
        return
    members = sorted(group.members, key=lambda m: m.member_id)
    glen = max(15, len(group.group_id))
    clen = max([15] + [len(m.member_id) for m in members])
    hlen = max([15] + [len(m.client_host) for m in members])
    ilen = max([15] + [len(m.client_id) for m in members])

    def assignment(member: Any) -> str:
        return ";".join(sorted(f"{tp.topic_name}:{','.join(str(p) for p in sorted(tp.partitions))}"
                               for tp in member.assignment.topic_partitions))

    def count(member: Any) -> int:
        return sum(len(tp.partitions) for tp in member.assignment.topic_partitions)

    if verbose:
        print(f"\n{'GROUP':<{glen}} {'CONSUMER-ID':<{clen}} {'HOST':<{hlen}} {'CLIENT-ID':<{ilen}} {'#PARTITIONS':<12} "
              f"{'MEMBER-EPOCH':<13} ASSIGNMENT", end="", file=out)
        for m in members:
            print(f"\n{group.group_id:<{glen}} {m.member_id:<{clen}} {m.client_host:<{hlen}} {m.client_id:<{ilen}} "
                  f"{count(m):<12} {m.member_epoch:<13} {assignment(m)}", end="", file=out)
    else:
        print(f"\n{'GROUP':<{glen}} {'CONSUMER-ID':<{clen}} {'HOST':<{hlen}} {'CLIENT-ID':<{ilen}} {'#PARTITIONS':<12} "
              f"ASSIGNMENT", end="", file=out)
        for m in members:
            print(f"\n{group.group_id:<{glen}} {m.member_id:<{clen}} {m.client_host:<{hlen}} {m.client_id:<{ilen}} "
                  f"{count(m):<12} {assignment(m)}", end="", file=out)
    print(file=out)


def _print_state(client: AdminClient, group: Any, verbose: bool, out: TextIO, err: TextIO) -> None:
    _empty_group_note(group, err)
    found = client.call(10, {"key_type": 0, "coordinator_keys": [group.group_id]}, version=4).coordinators[0]
    coordinator = f"{found.host}:{found.port}  ({found.node_id})"
    glen, clen = max(15, len(group.group_id)), max(25, len(coordinator))
    if verbose:
        print(f"\n{'GROUP':<{glen}} {'COORDINATOR (ID)':<{clen}} {'STATE':<15} {'GROUP-EPOCH':<12} "
              f"{'ASSIGNMENT-EPOCH':<17} #MEMBERS", end="", file=out)
        print(f"\n{group.group_id:<{glen}} {coordinator:<{clen}} {group.group_state:<15} {group.group_epoch:<12} "
              f"{group.assignment_epoch:<17} {len(group.members)}", end="", file=out)
    else:
        print(f"\n{'GROUP':<{glen}} {'COORDINATOR (ID)':<{clen}} {'STATE':<15} #MEMBERS", end="", file=out)
        print(f"\n{group.group_id:<{glen}} {coordinator:<{clen}} {group.group_state:<15} {len(group.members)}", end="",
              file=out)
    print(file=out)


def _offsets(client: AdminClient, group_id: str) -> list[tuple[str, int, int, int, int]]:
    """(topic, partition, start offset, leader epoch, lag) of every share partition with state."""
    described = client.call(90, {"groups": [{"group_id": group_id, "topics": None}]}, version=1)
    (group,) = described.groups
    if group.error_code:
        raise _Failed(group.error_message or ErrorCode(group.error_code).name)
    return sorted((t.topic_name, p.partition_index, p.start_offset, p.leader_epoch, p.lag)
                  for t in group.topics for p in t.partitions)


def _print_offsets(client: AdminClient, group_id: str, verbose: bool, out: TextIO) -> None:
    rows = _offsets(client, group_id)
    if not rows:
        print(f"\nShare group '{group_id}' has no offset information.", file=out)
        return
    glen = max(15, len(group_id))
    tlen = max([15] + [len(r[0]) for r in rows])

    def show(value: int) -> str:
        return "-" if value == -1 else str(value)

    if verbose:
        print(f"\n{'GROUP':<{glen}} {'TOPIC':<{tlen}} {'PARTITION':<10} {'LEADER-EPOCH':<13} {'START-OFFSET':<13} LAG",
              end="", file=out)
    else:
        print(f"\n{'GROUP':<{glen}} {'TOPIC':<{tlen}} {'PARTITION':<10} {'START-OFFSET':<13} LAG", end="", file=out)
    for topic, partition, start, epoch, lag in rows:
        if verbose:
            print(f"\n{group_id:<{glen}} {topic:<{tlen}} {partition:<10} {show(epoch) if start != -1 else '-':<13} "
                  f"{show(start):<13} {show(lag)}", end="", file=out)
        else:
            print(f"\n{group_id:<{glen}} {topic:<{tlen}} {partition:<10} {show(start):<13} {show(lag)}", end="", file=out)
    print(file=out)


def _delete(client: AdminClient, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    listed = {g.group_id: g for g in _share_groups(client)}
    wanted = list(dict.fromkeys(list(listed) if args.all_groups else args.group))
    failed: dict[str, str] = {}
    for group_id in wanted:
        group = listed.get(group_id)
        if group is None:
            failed[group_id] = f"org.apache.kafka.common.errors.GroupIdNotFoundException: Group '{group_id}' is not a share group."
        elif group.group_state != "Empty":
            failed[group_id] = f"org.apache.kafka.common.errors.GroupNotEmptyException: Share group '{group_id}' is not EMPTY."
    to_delete = [g for g in wanted if g not in failed]
    deleted = []
    if to_delete:
        results = client.call(42, {"groups_names": to_delete}, version=2).results
        for result in results:
            if result.error_code:
                failed[result.group_id] = ErrorCode(result.error_code).name
            else:
                deleted.append(result.group_id)
    if not failed:
        print(f"Deletion of requested share groups ({', '.join(repr(g) for g in deleted)}) was successful.", file=out)
        return 0
    print("\nError: Deletion of some share groups failed:", file=out)
    for group_id, reason in failed.items():
        print(f"* Group '{group_id}' could not be deleted due to: {reason}", file=out)
    if deleted:
        print(f"\nThese share groups were deleted successfully: {', '.join(repr(g) for g in deleted)}", file=out)
    return 0


def _partitions_to_reset(client: AdminClient, args: argparse.Namespace, group_id: str) -> list[tuple[str, int]]:
    if args.all_topics or not args.topic:
        return [(topic, partition) for topic, partition, *_ in _offsets(client, group_id)]
    chosen: list[tuple[str, int]] = []
    plain = []
    for spec in args.topic:
        topic, sep, parts = spec.partition(":")
        if sep:
            chosen.extend((topic, int(p)) for p in parts.split(",") if p.strip())
        else:
            plain.append(topic)
    if plain:
        metadata = client.call(3, {"topics": [{"name": t, "topic_id": None} for t in plain],
                                   "allow_auto_topic_creation": False, "include_topic_authorized_operations": False},
                               version=12)
        for topic in metadata.topics:
            if topic.error_code:
                raise _Failed(f"{ErrorCode(topic.error_code).name} for topic {topic.name}")
            chosen.extend((topic.name, p.partition_index) for p in sorted(topic.partitions, key=lambda p: p.partition_index))
    return chosen


def _target_offsets(client: AdminClient, args: argparse.Namespace, partitions: list[tuple[str, int]]) -> dict:
    if args.to_offset is not None:
        return {tp: args.to_offset for tp in partitions}
    timestamp = -2 if args.to_earliest else -1
    if args.to_datetime is not None:
        from datetime import datetime, timezone

        moment = datetime.fromisoformat(args.to_datetime)
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=timezone.utc)
        timestamp = int(moment.timestamp() * 1000)
    by_topic: dict[str, list[int]] = {}
    for topic, partition in partitions:
        by_topic.setdefault(topic, []).append(partition)
    answer = client.call(2, {"replica_id": -1, "isolation_level": 0, "topics": [
        {"name": t, "partitions": [{"partition_index": p, "current_leader_epoch": -1, "timestamp": timestamp}
                                   for p in ps]} for t, ps in by_topic.items()]}, version=7)
    found = {}
    for topic in answer.topics:
        for p in topic.partitions:
            if p.error_code:
                raise _Failed(f"{ErrorCode(p.error_code).name} for {topic.name}-{p.partition_index}")
            found[(topic.name, p.partition_index)] = p.offset
    if args.to_datetime is not None:  # no record at or after the time: the log end, as Kafka resets
        missing = [tp for tp, offset in found.items() if offset == -1]
        if missing:
            found.update(_target_offsets(client, argparse.Namespace(**{**vars(args), "to_datetime": None,
                                                                       "to_latest": True}), missing))
    return found


def _reset(client: AdminClient, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    group_id = args.group[0]
    described = client.call(77, {"group_ids": [group_id], "include_authorized_operations": False}, version=1).groups[0]
    if described.error_code == 0 and described.group_state not in ("Empty", "Dead"):
        print(f"Share group '{group_id}' is not empty.", file=err)
        return 1
    partitions = _partitions_to_reset(client, args, group_id)
    targets = _target_offsets(client, args, partitions)
    if args.execute and targets:
        by_topic: dict[str, list[dict]] = {}
        for (topic, partition), offset in targets.items():
            by_topic.setdefault(topic, []).append({"partition_index": partition, "start_offset": offset})
        altered = client.call(91, {"group_id": group_id, "topics": [{"topic_name": t, "partitions": ps}
                                                                     for t, ps in by_topic.items()]}, version=0)
        if altered.error_code:
            raise _Failed(altered.error_message or ErrorCode(altered.error_code).name)
        for topic in altered.responses:
            for p in topic.partitions:
                if p.error_code:
                    raise _Failed(p.error_message or ErrorCode(p.error_code).name)
    if targets:
        glen = max(15, len(group_id))
        tlen = max([15] + [len(t) for t, _ in targets])
        print(f"\n{'GROUP':<{glen}} {'TOPIC':<{tlen}} {'PARTITION':<10} NEW-OFFSET", end="", file=out)
        for (topic, partition), offset in sorted(targets.items()):
            print(f"\n{group_id:<{glen}} {topic:<{tlen}} {partition:<10} {offset}", end="", file=out)
    print(file=out)
    return 0


def _delete_offsets(client: AdminClient, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    group_id = args.group[0]
    topics = sorted(set(args.topic))
    answer = client.call(92, {"group_id": group_id, "topics": [{"topic_name": t} for t in topics]}, version=0)
    if answer.error_code:
        print(f"\nError: {answer.error_message or ErrorCode(answer.error_code).name}", file=out)
    results = {t.topic_name: t for t in answer.responses}
    if results:
        tlen = max([15] + [len(t) for t in results])
        print(f"\n{'TOPIC':<{tlen}} STATUS", end="", file=out)
        for topic in sorted(results):
            r = results[topic]
            status = "Successful" if r.error_code == 0 else f"Error: {r.error_message or ErrorCode(r.error_code).name}"
            print(f"\n{topic:<{tlen}} {status}", end="", file=out)
    print(file=out)
    return 0
