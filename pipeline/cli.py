"""`scripts/pipeline`: read the audit, run the jobs, write the report.

By default it reads `__minibroker_audit` over the Kafka protocol from `--bootstrap-server`
(127.0.0.1:9092, minibroker's default listener), on local Spark with every core, and writes
./report/. `--data-dir` reads a broker's data directory instead (offline), `--trace` a Parquet or
JSON-lines file. The broker's quota configuration and window settings come from the audit itself
(minibroker.pipeline.timeline); the window flags are for what-if candidates, and a flag that disagrees with
the recorded setting is flagged in the report. Each stage prints a line with its counts and time;
Spark's progress bar and web UI are on unless `--quiet`; `--conf key=value` passes any Spark
setting; `--master spark://HOST:PORT` runs on a standalone cluster (scripts/spark_standalone).

Before Spark starts, it checks that the audit exists: a broker without `audit.enable=true` has no
audit topic, and the command exits 1 saying how to turn the audit on.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from minibroker.pipeline.model import StateMemoryModel, measure_entry_bytes
from minibroker.pipeline.replay import QuotaSettings
from minibroker.storage.audit_format import AUDIT_TOPIC

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"


def _rates(text: str) -> list[float]:
    try:
        rates = sorted({float(part) for part in text.split(",") if part.strip()})
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected numbers separated by commas, got {text!r}") from None
    if not rates or any(not (0 < r < float("inf")) for r in rates):
        raise argparse.ArgumentTypeError("rates must be positive, finite numbers (as AlterClientQuotas accepts them)")
    return rates


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {text!r}")
    return value


def _key_value(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key.strip(), value.strip()


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="scripts/pipeline",
        description="Read minibroker's audit stream, replay it under candidate producer-id quotas, and "
                    "answer which producer_ids_rate to set.",
    )
    source = p.add_argument_group("where the audit is (default: over the Kafka protocol)")
    source.add_argument("--bootstrap-server", metavar="HOST:PORT",
                        help=f"any broker holding the audit topic: minibroker, or a Kafka cluster it was copied to "
                             f"(default {DEFAULT_BOOTSTRAP})")
    source.add_argument("--consumer-property", metavar="KEY=VALUE", type=_key_value, action="append", default=[],
                        help="a consumer setting (librdkafka's names, e.g. security.protocol=SASL_PLAINTEXT); repeatable")
    source.add_argument("--command-config", metavar="FILE", type=Path,
                        help="consumer settings from a properties file (key=value lines)")
    source.add_argument("--data-dir", help="read a broker's data dir (log.dirs) instead, offline")
    source.add_argument("--trace", help="read this Parquet / JSON-lines trace instead")
    source.add_argument("--topic", default=AUDIT_TOPIC, help=f"audit topic (default {AUDIT_TOPIC})")
    source.add_argument("--max-records-per-partition", type=int, default=None,
                        help="records per Spark task when reading over the wire (default 500000)")
    source.add_argument("--max-bytes-per-partition", type=int, default=None,
                        help="bytes per Spark task when reading a data dir (default 128 MiB)")
    p.add_argument("--out", default="report", help="report directory (default ./report)")
    spark = p.add_argument_group("Spark")
    spark.add_argument("--master", default="local[*]", help="Spark master (default local[*]; spark://HOST:PORT for a "
                                                            "standalone cluster)")
    spark.add_argument("--conf", metavar="KEY=VALUE", type=_key_value, action="append", default=[],
                       help="a Spark setting, as spark-submit's --conf; repeatable")
    spark.add_argument("--quiet", action="store_true", help="no Spark progress bar and no web UI")
    spark.add_argument("--shuffle-partitions", type=int, default=8, help="spark.sql.shuffle.partitions (default 8)")
    what = p.add_argument_group("what to replay")
    what.add_argument("--rates", type=_rates, default=[],
                      help="more candidate producer_ids_rate values (new PIDs per window, fractions allowed as the "
                           "broker accepts them), besides the two the report picks")
    what.add_argument("--window-seconds", type=_positive, default=None,
                      help="report window (default: picked from the audit's length, at most 100 windows)")
    what.add_argument("--pid-window-seconds", type=float, default=None,
                      help="producer.id.quota.window.size.seconds for the candidates (default: as the broker recorded it)")
    what.add_argument("--pid-layer-count", type=int, default=None,
                      help="producer.id.quota.cache.layer.count for the candidates (default: as recorded)")
    what.add_argument("--producer-byte-rate", type=float, default=None,
                      help="also apply this producer_byte_rate (bytes/s, user default) in every candidate")
    what.add_argument("--producer-id-expiration-ms", type=int, default=None,
                      help="producer.id.expiration.ms for the producer-state model (default: as recorded, else 86400000)")
    what.add_argument("--measure-state-memory", action="store_true",
                      help="measure bytes per producer-state entry on this interpreter instead of the built-in figures")
    what.add_argument("--keep-decisions", action="store_true", help="also write every replay decision (large)")
    what.add_argument("--replay-chunk-events", type=int, default=None,
                      help="split any user with more produce events than this by time (default: as the cores need)")
    return p


# The broker's quota store (minibroker.client_quotas.QUOTA_STORE_FILE; pipeline does not import the broker).
QUOTA_STORE_FILE = "client-quotas.json"


def flags_from(args) -> dict:
    """The window settings given by hand (QuotaSettings field names)."""
    return {"pid_window_size_seconds": args.pid_window_seconds, "pid_layer_count": args.pid_layer_count}


def candidates_from(args) -> list[QuotaSettings]:
    flags = {k: v for k, v in flags_from(args).items() if v is not None}
    return [QuotaSettings(f"producer_ids_rate={rate:g}", producer_ids_rate=rate, producer_byte_rate=args.producer_byte_rate,
                          **flags) for rate in args.rates]


def fallback_from(args) -> QuotaSettings | None:
    """For a data dir whose audit records no quota configuration: the broker's quota store now."""
    if args.data_dir is None:
        return None
    store = Path(args.data_dir) / QUOTA_STORE_FILE
    if not store.is_file():
        return None
    return QuotaSettings.from_quota_store("broker's quotas", store.read_bytes())


def consumer_config(args) -> dict[str, str]:
    config: dict[str, str] = {}
    if args.command_config is not None:
        try:
            text = args.command_config.read_text()
        except OSError as exc:
            raise SystemExit(f"cannot read --command-config {args.command_config}: {exc.strerror}") from None
        for number, line in enumerate(text.splitlines(), 1):
            line = line.strip()
            if not line or line.startswith(("#", "!")):
                continue
            key, sep, value = line.partition("=")
            if not sep:
                raise SystemExit(f"{args.command_config}:{number}: expected key=value, got {line!r}")
            config[key.strip()] = value.strip()
    config.update(dict(args.consumer_property))
    return config


TURN_AUDIT_ON = ("Turn the audit on: start the broker with audit.enable=true (scripts/serve --override "
                 "audit.enable=true, or audit.enable=true in its properties file), run the clients again, then "
                 "run scripts/pipeline.")


def missing_audit(args, bootstrap: str) -> str | None:
    """Why there is no audit to read, or None when there is one (or the source is a trace file):
    the audit topic is created by the broker's first audit flush, only with audit.enable=true."""
    if args.trace:
        return None
    if args.data_dir:
        from minibroker.pipeline.segments import segment_files

        if segment_files(args.data_dir, args.topic):
            return None
        return f"no audit in the data dir {args.data_dir} (no {args.topic} partition there). {TURN_AUDIT_ON}"
    from minibroker.pipeline.sources import kafka_offset_ranges

    config = {"bootstrap.servers": bootstrap, "group.id": "minibroker-pipeline", **consumer_config(args)}
    if kafka_offset_ranges(config, args.topic):
        return None
    return f"no audit on {bootstrap}: the topic {args.topic} does not exist. {TURN_AUDIT_ON}"


def _progress(name: str, what: str, seconds: float) -> None:
    print(f"[pipeline] {name:<14} {seconds:7.1f} s  {what}", flush=True)


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    chosen = [name for name, value in (("--bootstrap-server", args.bootstrap_server), ("--data-dir", args.data_dir),
                                       ("--trace", args.trace)) if value]
    if len(chosen) > 1:
        print(f"give one of {', '.join(chosen)}", file=sys.stderr)
        return 2
    if args.data_dir is not None and not Path(args.data_dir).is_dir():
        print(f"no data dir {args.data_dir!r}", file=sys.stderr)
        return 2
    bootstrap: str = args.bootstrap_server or DEFAULT_BOOTSTRAP  # read only when neither file source is given
    source = args.trace or args.data_dir or f"{args.topic} on {bootstrap}"
    try:
        missing = missing_audit(args, bootstrap)
    except RuntimeError as exc:  # the broker cannot be reached: named in the message
        print(f"[pipeline] {exc}", file=sys.stderr)
        return 1
    if missing is not None:
        print(f"[pipeline] {missing}", file=sys.stderr)
        return 1
    model = measure_entry_bytes() if args.measure_state_memory else StateMemoryModel()

    from minibroker.pipeline.read import read_data_dir, read_kafka, read_trace
    from minibroker.pipeline.report import build_report
    from minibroker.pipeline.session import cpu_seconds_probe, spark_session

    started = time.perf_counter()
    spark = spark_session(args.master, shuffle_partitions=args.shuffle_partitions, conf=dict(args.conf),
                          quiet=args.quiet)
    try:
        context = spark.sparkContext
        ui = context.uiWebUrl
        print(f"[pipeline] reading {source} with Spark {context.master} ({context.defaultParallelism} cores"
              + (f"; UI {ui}" if ui else "") + ")", flush=True)
        parallel = 2 * context.defaultParallelism
        try:
            if args.trace:
                parsed = read_trace(spark, args.trace)
            elif args.data_dir:
                parsed = read_data_dir(spark, args.data_dir, args.topic, min_partitions=parallel,
                                       max_bytes_per_partition=args.max_bytes_per_partition)
            else:
                parsed = read_kafka(spark, bootstrap, args.topic, consumer_config=consumer_config(args),
                                    min_partitions=parallel, max_records_per_partition=args.max_records_per_partition)
        except (RuntimeError, FileNotFoundError, ValueError) as exc:
            print(f"[pipeline] {exc}", file=sys.stderr)
            return 1
        result = build_report(
            parsed,
            out=Path(args.out),
            candidates=candidates_from(args),
            window_ms=None if args.window_seconds is None else round(args.window_seconds * 1000),
            model=model,
            expiration_ms=args.producer_id_expiration_ms,
            source=str(source),
            keep_decisions=args.keep_decisions,
            flags=flags_from(args),
            fallback=fallback_from(args),
            progress=_progress,
            cpu=cpu_seconds_probe(spark),
            chunk_events=args.replay_chunk_events,
            producer_byte_rate=args.producer_byte_rate,
        )
    finally:
        spark.stop()
    print()
    for line in result.headline:
        print(line)
    for note in result.notes:
        print(f"note: {note}")
    if result.window_ms is not None:
        from minibroker.pipeline.report import duration_text

        print(f"report windows: {duration_text(result.window_ms)}"
              + (" (picked from the audit's length; --window-seconds sets another)" if result.window_picked else ""))
    print(f"\n{result.events:,} audit events from {source}; report: {result.out / 'index.html'} "
          f"({time.perf_counter() - started:.1f} s)")
    print("stage timings (s): " + ", ".join(f"{k} {v:.1f}" for k, v in result.timings.items()))
    if result.cores:
        print("stage cores busy: " + ", ".join(f"{k} {v:.1f}" for k, v in result.cores.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
