"""`minibroker` command line: `serve` runs a broker; more subcommands join as features land."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

import trio

from minibroker.config import BrokerConfig, ConfigError, help_table

DESCRIPTION = """\
minibroker: a Kafka broker in pure Python, for integration tests and for studying
idempotence and quota semantics. Real Kafka clients (Java, librdkafka, kafka-python,
aiokafka, ...) talk to it over the real wire protocol."""

SERVE_EPILOG = f"""\
Settings use Kafka's names, in a properties file (--config) or one at a time
(--override key=value, repeatable; later ones win). Broker settings:
{help_table()}
  log.segment.bytes, log.retention.ms, log.roll.ms, log.flush.interval.messages, ...
                                   Kafka's log settings, with Kafka's defaults.

examples:
  minibroker serve
  minibroker serve --listen 127.0.0.1:19092 --data-dir /tmp/mb
  minibroker serve --override num.partitions=3 --override log.retention.ms=60000
"""


def _parse_override(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected key=value, got {text!r}")
    return key.strip(), value.strip()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="minibroker", description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    serve = sub.add_parser(
        "serve",
        help="run a broker until SIGINT/SIGTERM",
        description="Run a broker until SIGINT or SIGTERM, then shut down cleanly.",
        epilog=SERVE_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    serve.add_argument("--listen", metavar="HOST:PORT", help="address to listen on (default 127.0.0.1:9092; port 0 picks a free port)")
    serve.add_argument("--data-dir", metavar="DIR", help="where logs and state live (default ./data)")
    serve.add_argument("--config", metavar="FILE", type=Path, help="a Kafka-style server.properties file")
    serve.add_argument("--override", metavar="KEY=VALUE", type=_parse_override, action="append", default=[], help="set one config key (repeatable)")
    serve.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"], help="logging verbosity (default INFO)")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    logging.basicConfig(
        level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr
    )
    if args.command == "serve":
        return _serve(args)
    parser.error(f"unknown command {args.command}")
    return 2


def _serve(args: argparse.Namespace) -> int:
    from minibroker.server import serve_until_signalled

    overrides = dict(args.override)
    if args.listen:
        overrides["listeners"] = args.listen
    if args.data_dir:
        overrides["log.dirs"] = args.data_dir
    try:
        if args.config is not None and not args.config.is_file():
            raise ConfigError("--config", f"{args.config} is not a readable file")
        config = BrokerConfig.load(args.config, overrides)
        trio.run(serve_until_signalled, config)
    except ConfigError as exc:
        print(f"minibroker: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"minibroker: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
