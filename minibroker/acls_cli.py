"""`minibroker acls`: add, list and remove ACLs on a running broker, as kafka-acls.sh does.

Talks to the broker over the wire (CreateAcls, DescribeAcls, DeleteAcls) with the small blocking
client in minibroker.admin_client, so it works on any listener (--command-config with Kafka's client
properties for SSL and SASL). Arguments and output follow Kafka's AclCommand:

    --add | --remove | --list
    --topic T | --group G | --cluster | --transactional-id T | --delegation-token T | --user-principal U
        (repeatable; --list and --remove without one mean every resource)
    --resource-pattern-type LITERAL | PREFIXED (--list and --remove also ANY and MATCH; default LITERAL)
    --allow-principal P, --deny-principal P (User:alice), --allow-host H, --deny-host H (default *)
    --operation OP (repeatable; default All), or --producer / --consumer (with --idempotent,
        --group, --transactional-id) for the ACLs a producer or a consumer needs
    --principal P (--list: only the ACLs of that principal)

The broker must have an authorizer (authorizer.class.name), as Kafka's must: without one it answers
SECURITY_DISABLED, reported as such.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Iterable

from minibroker.acls import (
    OPERATION_ALL,
    OPERATION_ANY,
    RESOURCE_ANY,
    AclBinding,
    PatternType,
    PermissionType,
    operation_name,
    resource_type_name,
)
from minibroker.admin_client import AdminClient, AdminClientError, command_config
from minibroker.auth import AclOperation, ResourceType

EPILOG = """\
examples:
  minibroker acls --bootstrap-server 127.0.0.1:9092 --add --allow-principal User:alice \\
      --operation Read --operation Write --topic orders
  minibroker acls --bootstrap-server 127.0.0.1:9092 --add --allow-principal User:alice \\
      --producer --topic orders --idempotent
  minibroker acls --bootstrap-server 127.0.0.1:9092 --add --allow-principal User:bob \\
      --consumer --topic orders --group billing
  minibroker acls --bootstrap-server 127.0.0.1:9092 --add --allow-principal User:alice \\
      --operation All --topic orders- --resource-pattern-type prefixed
  minibroker acls --bootstrap-server 127.0.0.1:9092 --add --deny-principal User:eve --operation Read --topic '*'
  minibroker acls --bootstrap-server 127.0.0.1:9092 --list
  minibroker acls --bootstrap-server 127.0.0.1:9092 --list --topic orders --resource-pattern-type match
  minibroker acls --bootstrap-server 127.0.0.1:9092 --remove --allow-principal User:alice --topic orders

operations: All, Read, Write, Create, Delete, Alter, Describe, ClusterAction, DescribeConfigs,
AlterConfigs, IdempotentWrite, CreateTokens, DescribeTokens, TwoPhaseCommit.
The broker needs an authorizer: --override authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
"""

CLUSTER_NAME = "kafka-cluster"
ERROR_NAMES = {31: "CLUSTER_AUTHORIZATION_FAILED", 42: "INVALID_REQUEST", 54: "SECURITY_DISABLED"}


class UsageError(Exception):
    pass


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT", help="the broker to talk to")
    parser.add_argument("--command-config", metavar="FILE", type=Path,
                        help="client properties (TLS and SASL settings: security.protocol, ssl.*, sasl.*)")
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--add", action="store_true", help="add ACLs")
    action.add_argument("--remove", action="store_true", help="remove ACLs")
    action.add_argument("--list", action="store_true", help="list ACLs")
    resources = parser.add_argument_group("resources")
    resources.add_argument("--topic", action="append", default=[], metavar="TOPIC")
    resources.add_argument("--group", action="append", default=[], metavar="GROUP")
    resources.add_argument("--cluster", action="store_true", help="the cluster (kafka-cluster)")
    resources.add_argument("--transactional-id", action="append", default=[], metavar="ID")
    resources.add_argument("--delegation-token", action="append", default=[], metavar="TOKEN")
    resources.add_argument("--user-principal", action="append", default=[], metavar="PRINCIPAL")
    resources.add_argument("--resource-pattern-type", default="LITERAL", type=str.upper,
                           choices=["LITERAL", "PREFIXED", "ANY", "MATCH"],
                           help="LITERAL (default), PREFIXED; --list and --remove also ANY, MATCH")
    entries = parser.add_argument_group("entries")
    entries.add_argument("--allow-principal", action="append", default=[], metavar="PRINCIPAL")
    entries.add_argument("--deny-principal", action="append", default=[], metavar="PRINCIPAL")
    entries.add_argument("--allow-host", action="append", default=[], metavar="HOST")
    entries.add_argument("--deny-host", action="append", default=[], metavar="HOST")
    entries.add_argument("--operation", action="append", default=[], metavar="OPERATION")
    entries.add_argument("--principal", action="append", default=[], metavar="PRINCIPAL",
                         help="--list: only this principal's ACLs")
    entries.add_argument("--producer", action="store_true", help="WRITE, DESCRIBE, CREATE on the topics")
    entries.add_argument("--consumer", action="store_true", help="READ, DESCRIBE on the topics, READ on the groups")
    entries.add_argument("--idempotent", action="store_true", help="with --producer: IDEMPOTENT_WRITE on the cluster")
    entries.add_argument("--force", action="store_true", help="accepted for kafka-acls' sake (nothing is asked)")


def _operation(name: str) -> int:
    wanted = name.replace("_", "").replace("-", "").lower()
    if wanted == "all":
        return OPERATION_ALL
    for op in AclOperation:
        if op.name.replace("_", "").lower() == wanted:
            return int(op)
    raise UsageError(f"unknown operation {name!r}")


def _check_principal(principal: str) -> str:
    if ":" not in principal:
        raise UsageError(f"a principal is TYPE:NAME (User:alice), not {principal!r}")
    return principal


def _resources(args: argparse.Namespace) -> list[tuple[int, str]]:
    out: list[tuple[int, str]] = [(ResourceType.TOPIC, t) for t in args.topic]
    out += [(ResourceType.GROUP, g) for g in args.group]
    out += [(ResourceType.TRANSACTIONAL_ID, t) for t in args.transactional_id]
    out += [(ResourceType.DELEGATION_TOKEN, t) for t in args.delegation_token]
    out += [(ResourceType.USER, u) for u in args.user_principal]
    if args.cluster:
        out.append((ResourceType.CLUSTER, CLUSTER_NAME))
    return out


def _entries(args: argparse.Namespace, operations: list[int]) -> list[tuple[str, str, int, int]]:
    """(principal, host, operation, permission) for --allow-/--deny-principal (AclCommand)."""
    out = []
    for principals, hosts, permission in ((args.allow_principal, args.allow_host, PermissionType.ALLOW),
                                          (args.deny_principal, args.deny_host, PermissionType.DENY)):
        for principal in principals:
            for host in hosts or ["*"]:
                for op in operations:
                    out.append((_check_principal(principal), host, op, int(permission)))
    return out


def _bindings_to_add(args: argparse.Namespace) -> list[AclBinding]:
    if args.resource_pattern_type not in ("LITERAL", "PREFIXED"):
        raise UsageError("--add takes --resource-pattern-type LITERAL or PREFIXED")
    if not (args.allow_principal or args.deny_principal):
        raise UsageError("--add needs --allow-principal or --deny-principal")
    pattern = int(PatternType[args.resource_pattern_type])
    resources = _resources(args)
    if not resources:
        raise UsageError("--add needs a resource: --topic, --group, --cluster, --transactional-id, ...")
    if args.producer or args.consumer:
        return _convenience(args, pattern)
    operations = [_operation(name) for name in args.operation] or [OPERATION_ALL]
    return [AclBinding(kind, name, pattern, principal, host, op, permission)
            for kind, name in resources for principal, host, op, permission in _entries(args, operations)]


def _convenience(args: argparse.Namespace, pattern: int) -> list[AclBinding]:
    """AclCommand's --producer and --consumer."""
    op = AclOperation
    per_resource: list[tuple[int, str, list[int]]] = []
    if args.producer:
        per_resource += [(ResourceType.TOPIC, t, [op.WRITE, op.DESCRIBE, op.CREATE]) for t in args.topic]
        per_resource += [(ResourceType.TRANSACTIONAL_ID, t, [op.WRITE, op.DESCRIBE]) for t in args.transactional_id]
        if args.idempotent:
            per_resource.append((ResourceType.CLUSTER, CLUSTER_NAME, [op.IDEMPOTENT_WRITE]))
    if args.consumer:
        if not args.group:
            raise UsageError("--consumer needs --group")
        per_resource += [(ResourceType.TOPIC, t, [op.READ, op.DESCRIBE]) for t in args.topic]
        per_resource += [(ResourceType.GROUP, g, [op.READ]) for g in args.group]
    if not any(kind == ResourceType.TOPIC for kind, _, _ in per_resource):
        raise UsageError("--producer and --consumer need --topic")
    # The cluster is one resource: its binding is LITERAL whatever --resource-pattern-type says.
    return [AclBinding(kind, name, int(PatternType.LITERAL) if kind == ResourceType.CLUSTER else pattern, principal,
                       host, int(o), permission)
            for kind, name, ops in per_resource for principal, host, o, permission in _entries(args, ops)]


def _filters(args: argparse.Namespace, removing: bool) -> list[dict]:
    resources: list[tuple[int, str | None]] = list(_resources(args))
    if resources:
        pattern = int(PatternType[args.resource_pattern_type])
    elif removing:
        raise UsageError("--remove needs a resource: --topic, --group, --cluster, --transactional-id, ...")
    else:  # --list without a resource: every ACL
        resources, pattern = [(RESOURCE_ANY, None)], int(PatternType.ANY)
    operations = [_operation(name) for name in args.operation] or [OPERATION_ANY]
    entries: list[tuple[str | None, str | None, int, int]]
    if removing and (args.allow_principal or args.deny_principal):
        entries = list(_entries(args, operations))
    else:
        principals: list[str | None] = [_check_principal(p) for p in args.principal] or [None]
        entries = [(p, None, op, int(PermissionType.ANY)) for p in principals for op in operations]
    return [{"resource_type_filter": kind, "resource_name_filter": name, "pattern_type_filter": pattern,
             "principal_filter": principal, "host_filter": host, "operation": op, "permission_type": permission}
            for kind, name in resources for principal, host, op, permission in entries]


def _pattern_text(kind: int, name: str, pattern: int) -> str:
    return (f"ResourcePattern(resourceType={resource_type_name(kind)}, name={name}, "
            f"patternType={PatternType(pattern).name})")


def _entry_text(principal: str, host: str, op: int, permission: int) -> str:
    return (f"(principal={principal}, host={host}, operation={operation_name(op)}, "
            f"permissionType={PermissionType(permission).name})")


def _describe(client: AdminClient, filters: Iterable[dict]) -> dict[tuple[int, str, int], list[tuple]]:
    found: dict[tuple[int, str, int], list[tuple]] = {}
    for filter_ in filters:
        response = client.call(29, filter_)
        _raise_for(response.error_code, response.error_message)
        for resource in response.resources:
            key = (int(resource.resource_type), resource.resource_name, int(resource.pattern_type))
            entries = found.setdefault(key, [])
            for acl in resource.acls:
                entry = (acl.principal, acl.host, int(acl.operation), int(acl.permission_type))
                if entry not in entries:
                    entries.append(entry)
    return found


def _raise_for(code: int, message: str | None) -> None:
    if code:
        name = ERROR_NAMES.get(int(code), f"error {int(code)}")
        raise AdminClientError(f"{name}: {message}" if message else name)


def _print_acls(found: dict[tuple[int, str, int], list[tuple]], out) -> None:
    for (kind, name, pattern), entries in sorted(found.items()):
        print(f"Current ACLs for resource `{_pattern_text(kind, name, pattern)}`: ", file=out)
        for entry in entries:
            print(f" \t{_entry_text(*entry)} ", file=out)
        print(file=out)


def run(args: argparse.Namespace, out=sys.stdout, err=sys.stderr) -> int:
    try:
        # The arguments are checked before anything is sent.
        bindings = _bindings_to_add(args) if args.add else []
        filters = _filters(args, removing=args.remove) if not args.add else []
        settings = command_config(args.command_config)
        with AdminClient(args.bootstrap_server, client_id="minibroker-acls", **settings) as client:
            if args.add:
                _add(client, bindings, out)
            elif args.remove:
                response = client.call(31, {"filters": filters})
                removed = 0
                for result in response.filter_results:
                    _raise_for(result.error_code, result.error_message)
                    removed += len(result.matching_acls)
                print(f"Removed {removed} ACL(s).", file=out)
            else:
                _print_acls(_describe(client, filters), out)
        return 0
    except (UsageError, AdminClientError) as exc:
        print(f"minibroker acls: {exc}", file=err)
        return 1


def _add(client: AdminClient, bindings: list[AclBinding], out) -> None:
    by_resource: dict[tuple[int, str, int], list[AclBinding]] = {}
    for b in bindings:
        by_resource.setdefault((b.resource_type, b.name, b.pattern_type), []).append(b)
    for (kind, name, pattern), group in by_resource.items():
        print(f"Adding ACLs for resource `{_pattern_text(kind, name, pattern)}`: ", file=out)
        for b in group:
            print(f" \t{_entry_text(b.principal, b.host, b.operation, b.permission)} ", file=out)
        print(file=out)
    response = client.call(30, {"creations": [
        {"resource_type": b.resource_type, "resource_name": b.name, "resource_pattern_type": b.pattern_type,
         "principal": b.principal, "host": b.host, "operation": b.operation, "permission_type": b.permission}
        for b in bindings]})
    for result in response.results:
        _raise_for(result.error_code, result.error_message)
    _print_acls(_describe(client, [_exact_filter(k, n, p) for k, n, p in by_resource]), out)


def _exact_filter(kind: int, name: str, pattern: int) -> dict:
    return {"resource_type_filter": kind, "resource_name_filter": name, "pattern_type_filter": pattern,
            "principal_filter": None, "host_filter": None, "operation": OPERATION_ANY,
            "permission_type": int(PermissionType.ANY)}
