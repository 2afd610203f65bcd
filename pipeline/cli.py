"""`scripts/pipeline`: read the audit, run the jobs, write the report. Embedded defaults: the audit in
./data, local Spark on every core, the report in ./report/."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from pipeline.model import StateMemoryModel, measure_entry_bytes
from pipeline.replay import QuotaSettings
from pipeline.whatif import DEFAULT_PRODUCER_ID_EXPIRATION_MS
from quotas.producer_id_quota import DEFAULT_LAYER_COUNT, DEFAULT_WINDOW_SIZE_SECONDS
from storage.audit_format import AUDIT_TOPIC


def _rates(text: str) -> list[float]:
    try:
        rates = sorted({float(part) for part in text.split(",") if part.strip()})
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected numbers separated by commas, got {text!r}") from None
    if not rates or any(r <= 0 for r in rates):
        raise argparse.ArgumentTypeError("rates must be positive")
    return rates


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="scripts/pipeline",
        description="Summarise minibroker's audit stream and replay it under candidate producer-id quotas.",
    )
    p.add_argument("--data-dir", default="data", help="broker data dir (log.dirs) to read the audit from (default ./data)")
    p.add_argument("--trace", help="read this Parquet / JSON-lines trace instead of a data dir")
    # Reading a data dir also replays the broker's own quotas (its client-quotas.json), as "broker's quotas".
    p.add_argument("--topic", default=AUDIT_TOPIC, help=f"audit topic (default {AUDIT_TOPIC})")
    p.add_argument("--out", default="report", help="report directory (default ./report)")
    p.add_argument("--master", default="local[*]", help="Spark master (default local[*])")
    p.add_argument("--rates", type=_rates, default=[10.0, 50.0, 100.0],
                   help="candidate producer_ids_rate values, new PIDs per --pid-window-seconds, fractions "
                        "allowed as the broker accepts them (default 10,50,100)")
    p.add_argument("--window-seconds", type=float, default=60.0, help="report window (default 60)")
    p.add_argument("--pid-window-seconds", type=float, default=DEFAULT_WINDOW_SIZE_SECONDS,
                   help=f"producer.id.quota.window.size.seconds (default {DEFAULT_WINDOW_SIZE_SECONDS})")
    p.add_argument("--pid-layer-count", type=int, default=DEFAULT_LAYER_COUNT,
                   help=f"producer.id.quota.cache.layer.count (default {DEFAULT_LAYER_COUNT})")
    p.add_argument("--producer-byte-rate", type=float, default=None,
                   help="also apply this producer_byte_rate (bytes/s, user default) in every candidate")
    p.add_argument("--producer-id-expiration-ms", type=int, default=DEFAULT_PRODUCER_ID_EXPIRATION_MS,
                   help="producer.id.expiration.ms for the producer-state model (default 86400000)")
    p.add_argument("--measure-state-memory", action="store_true",
                   help="measure bytes per producer-state entry on this interpreter instead of the built-in figures")
    p.add_argument("--shuffle-partitions", type=int, default=8, help="spark.sql.shuffle.partitions (default 8)")
    p.add_argument("--keep-decisions", action="store_true", help="also write every replay decision (large)")
    return p


# The broker's quota store (minibroker.client_quotas.QUOTA_STORE_FILE; pipeline does not import the broker).
QUOTA_STORE_FILE = "client-quotas.json"


def settings_from(args) -> list[QuotaSettings]:
    common = dict(pid_window_size_seconds=args.pid_window_seconds, pid_layer_count=args.pid_layer_count)
    settings = [QuotaSettings("no quota", **common)]
    store = Path(args.data_dir) / QUOTA_STORE_FILE
    if args.trace is None and store.is_file():
        settings.append(QuotaSettings.from_quota_store("broker's quotas", store.read_bytes(), **common))
    for rate in args.rates:
        settings.append(QuotaSettings(
            f"producer_ids_rate={rate:g}", producer_ids_rate=rate,
            producer_byte_rate=args.producer_byte_rate, **common,
        ))
    return settings


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    source = args.trace if args.trace else args.data_dir
    if args.trace is None and not Path(args.data_dir).is_dir():
        print(f"no data dir {args.data_dir!r}: pass --data-dir or --trace", file=sys.stderr)
        return 2
    model = measure_entry_bytes() if args.measure_state_memory else StateMemoryModel()

    from pipeline.read import read_events
    from pipeline.report import build_report
    from pipeline.session import spark_session

    started = time.perf_counter()
    spark = spark_session(args.master, shuffle_partitions=args.shuffle_partitions)
    try:
        events = read_events(spark, data_dir=args.data_dir, trace=args.trace, topic=args.topic)
        result = build_report(
            events,
            out=Path(args.out),
            settings=settings_from(args),
            window_ms=round(args.window_seconds * 1000),
            model=model,
            expiration_ms=args.producer_id_expiration_ms,
            source=str(source),
            keep_decisions=args.keep_decisions,
        )
    finally:
        spark.stop()
    print(f"{result.events:,} audit events from {source}; report: {result.out / 'index.html'} "
          f"({time.perf_counter() - started:.1f} s)")
    print("stage timings (s): " + ", ".join(f"{k} {v:.1f}" for k, v in result.timings.items()))
    if result.recommendations is not None and not result.recommendations.empty:
        print(result.recommendations.to_string(index=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
