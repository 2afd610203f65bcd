"""`minibroker` command line: `serve` runs a broker; `topics`, `configs` and `share-groups` manage a
running one, as kafka-topics.sh, kafka-configs.sh and kafka-share-groups.sh do; `control` drives its
control endpoint (docs/control.md). Each subcommand is one line of `minibroker --help`."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

import trio

from minibroker.config import BrokerConfig, ConfigError, help_table, parse_properties

DESCRIPTION = """\
minibroker: a Kafka broker in pure Python, for integration tests and for studying
idempotence and quota semantics. Real Kafka clients (Java, librdkafka, kafka-python,
aiokafka, ...) talk to it over the real wire protocol."""

SERVE_EPILOG = f"""\
Settings use Kafka's names, in a properties file (--config) or one at a time
(--override key=value, repeatable; later ones win). Broker settings:
{help_table()}
  log.segment.bytes, log.retention.ms, log.roll.ms, log.flush.interval.messages, ...
      Kafka's log settings (and the topic configs they default), with Kafka's defaults.

examples:
  minibroker serve
  minibroker serve --listen 127.0.0.1:19092 --data-dir /tmp/mb
  minibroker serve --override num.partitions=3 --override log.retention.ms=60000
  minibroker serve --brokers 3 --listen 127.0.0.1:19092 --override default.replication.factor=3
  minibroker serve --sasl-listen 127.0.0.1:9093 --sasl-user alice:alice-secret --metrics-listen 127.0.0.1:9100
  minibroker serve --tls-self-signed ./tls      # an SSL listener on 127.0.0.1:9093, certificates in ./tls
"""


def _parse_override(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected key=value, got {text!r}")
    return key.strip(), value.strip()


class _CommandsFormatter(argparse.RawDescriptionHelpFormatter):
    """argparse's help, with the help column past the longest command name: argparse measures the
    commands one indent short of where it prints them, so `share-groups` would sit alone on its line."""

    def add_argument(self, action: argparse.Action) -> None:
        super().add_argument(action)
        if isinstance(action, argparse._SubParsersAction):
            for choice in action._get_subactions():
                length = len(self._format_action_invocation(choice)) + self._current_indent + self._indent_increment
                self._action_max_length = max(self._action_max_length, length)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="minibroker", description=DESCRIPTION, formatter_class=_CommandsFormatter,
        epilog="`minibroker COMMAND --help` shows a command's options and examples.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    serve = sub.add_parser(
        "serve",
        help="run a broker until SIGINT or SIGTERM",
        description="Run a broker until SIGINT or SIGTERM, then shut down cleanly.",
        epilog=SERVE_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    serve.add_argument("--listen", metavar="HOST:PORT", action="append", default=[],
                       help="address to listen on (default 127.0.0.1:9092; port 0 picks a free port); with --brokers N, "
                            "the first broker's (the others on the next ports), or give it once per broker")
    serve.add_argument("--brokers", metavar="N", type=int, default=1,
                       help="run a cluster of N brokers in this process (node ids from node.id up, data in DIR/broker-<id>, "
                            "one controller; default 1)")
    serve.add_argument("--data-dir", metavar="DIR", help="where logs and state live (default ./data)")
    serve.add_argument("--config", metavar="FILE", type=Path, help="a Kafka-style server.properties file")
    serve.add_argument("--override", metavar="KEY=VALUE", type=_parse_override, action="append", default=[], help="set one config key (repeatable)")
    serve.add_argument("--sasl-listen", metavar="HOST:PORT", help="also listen for SASL_PLAINTEXT clients here (PLAIN, SCRAM-SHA-256/512)")
    serve.add_argument("--sasl-user", metavar="NAME:PASSWORD", action="append", default=[], help="a user of the SASL listener (repeatable; adds to sasl.users)")
    serve.add_argument("--tls-self-signed", metavar="DIR", type=Path,
                       help="also listen for SSL clients (--ssl-listen, default 127.0.0.1:9093) with a throwaway CA and "
                            "certificates kept in DIR (made there the first time), and print the client settings")
    serve.add_argument("--ssl-listen", metavar="HOST:PORT", help="the SSL listener's address (with --tls-self-signed, "
                       "or with ssl.keystore.* settings of your own)")
    serve.add_argument("--control-listen", metavar="HOST:PORT", help="serve the HTTP control endpoint here (error stacks, delays, captured requests, the clock, stop/start; docs/control.md); loopback unless HOST names another address")
    serve.add_argument("--metrics-listen", metavar="HOST:PORT", help="serve GET /metrics (Prometheus text format) over HTTP here")
    serve.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"], help="logging verbosity (default INFO)")
    from minibroker import configs_cli

    configs = sub.add_parser(
        "configs",
        help="describe or alter client quotas, as kafka-configs.sh",
        description="Describe or alter client quotas on a running broker, as kafka-configs.sh does.",
        epilog=configs_cli.EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    configs_cli.add_arguments(configs)
    from minibroker import acls_cli

    acls = sub.add_parser(
        "acls",
        help="add, list or remove ACLs, as kafka-acls.sh",
        description="Add, list or remove ACLs on a running broker, as kafka-acls.sh does.",
        epilog=acls_cli.EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    acls_cli.add_arguments(acls)
    from minibroker import topics_cli

    topics = sub.add_parser(
        "topics",
        help="create, list, describe, alter, delete, as kafka-topics.sh",
        description="Create, list, describe, alter or delete topics on a running broker, as kafka-topics.sh does.",
        epilog=topics_cli.EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    topics_cli.add_arguments(topics)
    from minibroker import share_groups_cli

    share_groups = sub.add_parser(
        "share-groups",
        help="list, describe, reset, delete, as kafka-share-groups.sh",
        description="List, describe or delete share groups (KIP-932), and reset or delete their offsets, on a "
                    "running broker, as kafka-share-groups.sh does.",
        epilog=share_groups_cli.EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    share_groups_cli.add_arguments(share_groups)
    from minibroker.control import cli as control_cli

    control = sub.add_parser(
        "control",
        help="drive the control endpoint of a broker under test",
        description="Drive the control endpoint of `minibroker serve --control-listen` (docs/control.md).",
        epilog=control_cli.EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    control_cli.add_arguments(control)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    logging.basicConfig(
        level=getattr(args, "log_level", "WARNING"),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    if args.command == "serve":
        return _serve(args)
    if args.command == "configs":
        from minibroker import configs_cli

        return configs_cli.run(args)
    if args.command == "control":
        from minibroker.control import cli as control_cli

        return control_cli.run(args)
    if args.command == "topics":
        from minibroker import topics_cli

        return topics_cli.run(args)
    if args.command == "acls":
        from minibroker import acls_cli

        return acls_cli.run(args)
    if args.command == "share-groups":
        from minibroker import share_groups_cli

        return share_groups_cli.run(args)
    parser.error(f"unknown command {args.command}")
    return 2


def _serve(args: argparse.Namespace) -> int:
    from minibroker.errors import StartupError
    from minibroker.server import serve_until_signalled, sole_exception

    overrides = dict(args.override)
    if args.data_dir:
        overrides["log.dirs"] = args.data_dir
    try:
        if args.config is not None and not args.config.is_file():
            raise ConfigError("--config", f"{args.config} is not a readable file")
        file_props = parse_properties(args.config.read_text(), str(args.config)) if args.config else {}
        if args.brokers < 1:
            raise ConfigError("--brokers", f"a cluster has at least one broker, not {args.brokers}")
        if len(args.listen) > 1 and len(args.listen) != args.brokers:
            raise ConfigError("--listen", f"{len(args.listen)} addresses for {args.brokers} broker(s): give one, or one per broker")
        if args.listen or args.sasl_listen:
            listeners = (args.listen[0] if args.listen else None) or overrides.get("listeners") \
                or file_props.get("listeners", "127.0.0.1:9092")
            if args.sasl_listen:
                listeners += f",SASL_PLAINTEXT://{args.sasl_listen}"
            overrides["listeners"] = listeners
        if args.sasl_user:
            existing = overrides.get("sasl.users") or file_props.get("sasl.users", "")
            overrides["sasl.users"] = ",".join([u for u in [existing, *args.sasl_user] if u])
        if args.metrics_listen:
            overrides["metrics.listen"] = args.metrics_listen
        notes: list[str] = []
        if args.tls_self_signed or args.ssl_listen:
            base = overrides.get("listeners") or file_props.get("listeners", "127.0.0.1:9092")
            overrides["listeners"] = f"{base},SSL://{args.ssl_listen or '127.0.0.1:9093'}"
        if args.tls_self_signed:
            from minibroker.tls_material import TlsMaterial

            material = TlsMaterial.create_or_open(args.tls_self_signed)
            overrides.update(material.broker_properties("SSL", client_auth="requested"))
            notes = material.client_notes()
        if args.control_listen:
            overrides["control.listen"] = args.control_listen
            overrides.setdefault("control.capture.requests", "1000")
        config = BrokerConfig.load(args.config, overrides)
        try:
            if args.brokers == 1:
                trio.run(serve_until_signalled, config, True, notes)
            else:
                from minibroker.cluster_runtime import serve_cluster_until_signalled

                trio.run(serve_cluster_until_signalled, config, args.brokers, args.listen if len(args.listen) > 1 else ())
        except BaseExceptionGroup as group:  # a start-up failure inside trio's nurseries
            raise sole_exception(group) from None
    except ConfigError as exc:
        print(f"minibroker: {exc}", file=sys.stderr)
        return 2
    except (StartupError, OSError, ValueError) as exc:  # a port in use, a damaged file in the data dir, ...
        print(f"minibroker: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
