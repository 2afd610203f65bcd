"""`minibroker configs`: describe and alter client quotas on a running broker, as kafka-configs.sh does.

Talks to the broker over the wire (DescribeClientQuotas, AlterClientQuotas) with the small blocking
client in minibroker.admin_client. Arguments and output follow Kafka's ConfigCommand for quota
entities: `--entity-type users|clients|ips` with `--entity-name NAME` or `--entity-default`, repeated
for a <user, client-id> pair (or the shortcuts `--user`, `--client`, `--ip`, `--user-defaults`,
`--client-defaults`); `--add-config 'k=v,...'` and `--delete-config 'k,...'` with `--alter`.
Unlike kafka-configs.sh, `--describe` without an entity lists every configured quota.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from minibroker.admin_client import AdminClient, AdminClientError, command_config
from minibroker.quotas.config import QUOTA_KEYS

EPILOG = """\
examples:
  minibroker configs --bootstrap-server 127.0.0.1:9092 --alter \\
      --add-config 'producer_byte_rate=1048576,consumer_byte_rate=2000' --entity-type users --entity-name alice
  minibroker configs --bootstrap-server 127.0.0.1:9092 --alter --delete-config producer_byte_rate \\
      --entity-type users --entity-name alice
  minibroker configs --bootstrap-server 127.0.0.1:9092 --alter --add-config producer_byte_rate=500000 \\
      --entity-type users --entity-name alice --entity-type clients --entity-name slow
  minibroker configs --bootstrap-server 127.0.0.1:9092 --alter --add-config consumer_byte_rate=1000000 \\
      --entity-type clients --entity-default
  minibroker configs --bootstrap-server 127.0.0.1:9092 --describe --entity-type users --entity-name alice
  minibroker configs --bootstrap-server 127.0.0.1:9092 --describe        # every configured quota

quota keys: """ + ", ".join(QUOTA_KEYS) + """
On an SSL, SASL_PLAINTEXT or SASL_SSL listener pass --command-config with Kafka's client
properties: security.protocol, ssl.truststore.location (PEM or PKCS12), ssl.keystore.location for a
client certificate, sasl.mechanism=PLAIN|SCRAM-SHA-256|SCRAM-SHA-512|OAUTHBEARER and
sasl.username/sasl.password (or Kafka's sasl.jaas.config=... username="..." password="...";).
"""

ENTITY_TYPES = {"users": "user", "clients": "client-id", "ips": "ip"}
_DESCRIBE_NAMES = {"user": "user-principal", "client-id": "client-id", "ip": "ip"}
MATCH_EXACT, MATCH_DEFAULT, MATCH_ANY = 0, 1, 2


class UsageError(Exception):
    pass


class _Entity(argparse.Action):
    """Keeps --entity-type/--entity-name/--entity-default (and shortcuts) in command-line order."""

    def __init__(self, option_strings, dest, kind: str, entity_type: str | None = None, **kwargs) -> None:
        self.kind = kind
        self.entity_type = entity_type
        super().__init__(option_strings, dest, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        items = list(getattr(namespace, "entity_parts", None) or [])
        if self.kind == "type":
            items.append(("type", values))
        elif self.kind == "name":
            items.append(("name", values))
        elif self.kind == "default":
            items.append(("name", None))
        elif self.kind == "shortcut":
            items += [("type", self.entity_type), ("name", values)]
        else:  # shortcut default
            items += [("type", self.entity_type), ("name", None)]
        namespace.entity_parts = items


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT", help="the broker to talk to")
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--describe", action="store_true", help="list quotas matching the entities given")
    action.add_argument("--alter", action="store_true", help="add or delete quota configs of one entity")
    parser.add_argument("--entity-type", action=_Entity, kind="type", choices=sorted(ENTITY_TYPES),
                        help="users, clients or ips (repeat with users and clients for a pair)")
    parser.add_argument("--entity-name", action=_Entity, kind="name", metavar="NAME",
                        help="the name for the preceding --entity-type")
    parser.add_argument("--entity-default", action=_Entity, kind="default", nargs=0,
                        help="the default entity for the preceding --entity-type")
    parser.add_argument("--user", action=_Entity, kind="shortcut", entity_type="users", metavar="NAME",
                        help="same as --entity-type users --entity-name NAME")
    parser.add_argument("--client", action=_Entity, kind="shortcut", entity_type="clients", metavar="ID",
                        help="same as --entity-type clients --entity-name ID")
    parser.add_argument("--ip", action=_Entity, kind="shortcut", entity_type="ips", metavar="IP",
                        help="same as --entity-type ips --entity-name IP")
    parser.add_argument("--user-defaults", action=_Entity, kind="shortcut-default", entity_type="users", nargs=0,
                        help="same as --entity-type users --entity-default")
    parser.add_argument("--client-defaults", action=_Entity, kind="shortcut-default", entity_type="clients",
                        nargs=0, help="same as --entity-type clients --entity-default")
    parser.add_argument("--add-config", metavar="K=V,...", help="quota configs to set, e.g. producer_byte_rate=1048576")
    parser.add_argument("--delete-config", metavar="K,...", help="quota configs to remove")
    parser.add_argument("--command-config", metavar="FILE", type=Path,
                        help="client properties (TLS and SASL settings: security.protocol, ssl.*, sasl.*)")
    parser.set_defaults(entity_parts=[])


def _entities(parts: list[tuple[str, str | None]], alter: bool) -> list[tuple[str, str | None, bool]]:
    """(protocol entity type, name or None for the default, name given) per --entity-type."""
    types: list[str] = []
    names: list[str | None] = []
    for kind, value in parts:
        if kind == "type":
            types.append(value)  # type: ignore[arg-type]
        else:
            names.append(value)
    if len(names) > len(types):
        raise UsageError("more entity names than entity types: give --entity-type before each --entity-name")
    if len(set(types)) != len(types):
        raise UsageError("each --entity-type may appear once")
    if alter and len(names) != len(types):
        raise UsageError("--entity-name or --entity-default must be specified with each --entity-type for --alter")
    out = []
    for i, entity_type in enumerate(types):
        given = i < len(names)
        out.append((ENTITY_TYPES[entity_type], names[i] if given else None, given))
    return out


def _parse_add(text: str) -> list[tuple[str, float]]:
    ops = []
    for item in (p.strip() for p in text.split(",")):
        if not item:
            continue
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep:
            raise UsageError(f"--add-config expects key=value pairs, got {item!r}")
        _check_key(key)
        try:
            ops.append((key, float(value)))
        except ValueError:
            raise UsageError(f"Cannot parse quota configuration value for {key}: {value.strip()}") from None
    if not ops:
        raise UsageError("--add-config is empty")
    return ops


def _parse_delete(text: str) -> list[str]:
    keys = [k.strip() for k in text.split(",") if k.strip()]
    for key in keys:
        _check_key(key)
    if not keys:
        raise UsageError("--delete-config is empty")
    return keys


def _check_key(key: str) -> None:
    if key not in QUOTA_KEYS:
        raise UsageError(f"unknown quota config {key!r}; known: {', '.join(QUOTA_KEYS)}")


def _command_config(path: Path | None) -> dict:
    """AdminClient's connection settings from --command-config (minibroker.admin_client.command_config)."""
    try:
        return command_config(path)
    except AdminClientError as exc:
        raise UsageError(str(exc)) from None


def _components(entities: list[tuple[str, str | None, bool]]) -> list[dict]:
    return [
        {"entity_type": t, "match_type": (MATCH_EXACT if name is not None else MATCH_DEFAULT) if given else MATCH_ANY,
         "match": name if given else None}
        for t, name, given in entities
    ]


def _describe(client: AdminClient, entities, strict: bool) -> list[tuple[list[tuple[str, str | None]], dict]]:
    response = client.call(48, {"components": _components(entities), "strict": strict})
    if response.error_code != 0:
        raise AdminClientError(response.error_message or f"DescribeClientQuotas failed ({int(response.error_code)})")
    return [
        ([(e.entity_type, e.entity_name) for e in entry.entity], {v.key: float(v.value) for v in entry.values})
        for entry in response.entries or ()
    ]


def _entity_text(pairs: list[tuple[str, str | None]]) -> str:
    order = {"user": 0, "client-id": 1, "ip": 2}
    parts = []
    for entity_type, name in sorted(pairs, key=lambda p: order.get(p[0], 3)):
        label = _DESCRIBE_NAMES.get(entity_type, entity_type)
        parts.append(f"{label} '{name}'" if name is not None else f"the default {label}")
    return ", ".join(parts)


def run(args: argparse.Namespace, out=sys.stdout, err=sys.stderr) -> int:
    try:
        entities = _entities(args.entity_parts, args.alter)
        if args.alter:
            if not entities:
                raise UsageError("--entity-type must be specified with --alter")
            if not args.add_config and not args.delete_config:
                raise UsageError("--add-config or --delete-config must be specified with --alter")
            adds = _parse_add(args.add_config) if args.add_config else []
            deletes = _parse_delete(args.delete_config) if args.delete_config else []
            overlap = {k for k, _ in adds} & set(deletes)
            if overlap:
                raise UsageError(f"a config is both added and deleted: {', '.join(sorted(overlap))}")
        elif args.add_config or args.delete_config:
            raise UsageError("--add-config and --delete-config go with --alter")
        connection = _command_config(args.command_config)
        with AdminClient(args.bootstrap_server, client_id="minibroker-configs", **connection) as client:
            if args.describe:
                for pairs, values in _describe(client, entities, strict=bool(entities)):
                    text = ", ".join(f"{k}={v!r}" for k, v in values.items())
                    print(f"Quota configs for {_entity_text(pairs)} are {text}", file=out)
                return 0
            return _alter(client, entities, adds, deletes, out)
    except (UsageError, AdminClientError) as exc:
        print(f"minibroker configs: {exc}", file=err)
        return 1


def _alter(client: AdminClient, entities, adds, deletes, out) -> int:
    pairs = [(t, name) for t, name, _ in entities]
    if deletes:
        current = _describe(client, entities, strict=True)
        configured = current[0][1] if current else {}
        missing = [k for k in deletes if k not in configured]
        if missing:
            raise AdminClientError(f"Invalid config(s): {','.join(missing)} (not set on {_entity_text(pairs)})")
    ops = [{"key": k, "value": v, "remove": False} for k, v in adds]
    ops += [{"key": k, "value": 0.0, "remove": True} for k in deletes]
    response = client.call(49, {
        "entries": [{"entity": [{"entity_type": t, "entity_name": n} for t, n in pairs], "ops": ops}],
        "validate_only": False,
    })
    for entry in response.entries:
        if entry.error_code != 0:
            raise AdminClientError(entry.error_message or f"AlterClientQuotas failed ({int(entry.error_code)})")
    head_type = next(k for k, v in ENTITY_TYPES.items() if v == pairs[0][0])
    if pairs[0][1] is not None:
        print(f"Completed updating config for {head_type[:-1]} {pairs[0][1]}.", file=out)
    else:
        print(f"Completed updating default config for {head_type} in the cluster.", file=out)
    return 0
