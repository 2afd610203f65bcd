"""Read the audit into a typed DataFrame: over the Kafka protocol (the default), from a broker's data
directory (offline), or from a trace file (Parquet or JSON lines).

The broker and data-dir paths go through the Spark Python data sources in `minibroker.pipeline.sources`, which
yield the raw records as Spark's Kafka source does (key, value, offset, ...), split into offset or
byte ranges; `parse_records` then parses the values in Spark with `from_json` and the declared
schema (`pipeline.schema.AUDIT_SCHEMA`, the fields of `minibroker.storage.audit_format`). The result,
`PARSED_SCHEMA`, adds `seq` (the record's offset in the audit topic: the order in which the broker
made its decisions; a trace's own `seq` column, else its row order) and `config_json`: for a
quota-configuration event only, its JSON text (a handful of records, parsed on the driver by
`quota_records`; no nested column is carried through the 10M-row cache). A value that is not an
audit event (a client may produce anything to the topic) parses to nulls and is counted as skipped.

`decision_events` keeps the decisions (`pipeline.schema.EVENTS_SCHEMA`: Produce, Fetch,
InitProducerId); `quota_records` collects the quota-configuration events for `minibroker.pipeline.timeline`.
"""

from __future__ import annotations

import json
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StringType, StructField, StructType

from minibroker.pipeline.schema import AUDIT_SCHEMA, EVENTS_SCHEMA
from minibroker.pipeline.sources import (
    KAFKA_FORMAT,
    SEGMENTS_FORMAT,
    KafkaRecordsSource,
    SegmentRecordsSource,
    kafka_offset_ranges,
    segment_byte_ranges,
)
from minibroker.storage.audit_format import API_ALTER_CLIENT_QUOTAS, API_QUOTA_CONFIG, AUDIT_TOPIC

__all__ = [
    "PARSED_SCHEMA",
    "decision_events",
    "is_quota_config",
    "parse_records",
    "quota_records",
    "read_data_dir",
    "read_kafka",
    "read_trace",
]

PARSED_SCHEMA = StructType([*EVENTS_SCHEMA.fields, StructField("config_json", StringType(), True)])
CONFIG_APIS = (API_QUOTA_CONFIG[0], API_ALTER_CLIENT_QUOTAS[0])


def _empty(spark: SparkSession) -> DataFrame:
    return spark.createDataFrame([], PARSED_SCHEMA)


def parse_json(frame: DataFrame, text, seq) -> DataFrame:
    """JSON event texts (a string column of `frame`) and their `seq` -> PARSED_SCHEMA, parsed by
    Spark: once per record (the struct is parsed in one projection and taken apart in the next; one
    `from_json` per field would parse every record 18 times)."""
    parsed = frame.select(F.from_json(text, AUDIT_SCHEMA).alias("_e"), text.alias("_text"), seq.alias("seq"))
    config = F.col("_e.api").isin(*CONFIG_APIS)
    return parsed.select("_e.*", "seq", F.when(config, F.col("_text")).alias("config_json"))


def parse_records(raw: DataFrame) -> DataFrame:
    """Raw records (pipeline.sources.RAW_SCHEMA) -> PARSED_SCHEMA."""
    return parse_json(raw, F.col("value").cast("string"), F.col("offset"))


def read_kafka(spark: SparkSession, bootstrap_servers: str, topic: str = AUDIT_TOPIC, *,
               consumer_config: dict[str, str] | None = None, min_partitions: int | None = None,
               max_records_per_partition: int | None = None) -> DataFrame:
    """The audit topic on any broker, as it is now (offsets fixed when this is called); empty when
    the topic does not exist yet. `consumer_config`: librdkafka settings (security, ...)."""
    options = {"kafka.bootstrap.servers": bootstrap_servers, "subscribe": topic}
    options.update({f"kafka.{k}": v for k, v in (consumer_config or {}).items()})
    config = {k[len("kafka."):]: v for k, v in options.items() if k.startswith("kafka.")}
    config.setdefault("group.id", "minibroker-pipeline")
    ranges = kafka_offset_ranges(config, topic)
    if not any(r.size for r in ranges):
        return _empty(spark)
    # Spark's JSON offsets: the snapshot just taken, so planning again cannot move it.
    options["startingOffsets"] = _offsets_json(topic, {r.partition: r.start for r in ranges})
    options["endingOffsets"] = _offsets_json(topic, {r.partition: r.end for r in ranges})
    options.update(_splits(minPartitions=min_partitions, maxRecordsPerPartition=max_records_per_partition))
    spark.dataSource.register(KafkaRecordsSource)
    return parse_records(spark.read.format(KAFKA_FORMAT).options(**options).load())


def _splits(**options: int | None) -> dict[str, str]:
    """The split options that are set, as strings."""
    return {name: str(value) for name, value in options.items() if value}


def _offsets_json(topic: str, offsets: dict[int, int]) -> str:
    return json.dumps({topic: {str(p): o for p, o in offsets.items()}})


def read_data_dir(spark: SparkSession, data_dir: str | Path, topic: str = AUDIT_TOPIC, *,
                  min_partitions: int | None = None, max_bytes_per_partition: int | None = None) -> DataFrame:
    """The audit events a broker wrote into `data_dir` (its `log.dirs`); empty when there are none."""
    if not segment_byte_ranges(data_dir, topic):
        return _empty(spark)
    options = {"path": str(Path(data_dir).resolve()), "subscribe": topic}
    options.update(_splits(minPartitions=min_partitions, maxBytesPerPartition=max_bytes_per_partition))
    spark.dataSource.register(SegmentRecordsSource)
    return parse_records(spark.read.format(SEGMENTS_FORMAT).options(**options).load())


# -- traces ---------------------------------------------------------------------------------------


def _trace_format(path: Path) -> str:
    names = [path.name] if path.is_file() else [p.name for p in path.iterdir() if p.is_file()]
    for name in names:
        lowered = name.lower()
        if lowered.endswith(".parquet"):
            return "parquet"
        if lowered.endswith((".json", ".jsonl", ".ndjson", ".json.gz", ".jsonl.gz")):
            return "json"
    raise ValueError(f"{path}: not a Parquet or JSON-lines trace (expected *.parquet or *.jsonl)")


def read_trace(spark: SparkSession, path: str | Path) -> DataFrame:
    """Audit events from a Parquet file or a JSON-lines file (or a directory of either), e.g. the
    audit topic dumped by a console consumer, or `scripts/gen_trace`'s output. Spark splits the file
    (a Parquet file by row groups: one big row group is one task)."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"trace {path} does not exist")
    if _trace_format(path) == "json":
        lines = spark.read.text(str(path))
        # the line's own "seq" when it has one, else its place in the file
        seq = F.coalesce(F.get_json_object("value", "$.seq").cast("long"), F.monotonically_increasing_id())
        parsed = parse_json(lines, F.col("value"), seq)
    else:
        raw = spark.read.parquet(str(path))
        missing = [f.name for f in AUDIT_SCHEMA.fields if f.name not in raw.columns]
        if missing:
            raise ValueError(f"trace {path} lacks the audit field(s) {', '.join(missing)}")
        seq = F.col("seq").cast("long") if "seq" in raw.columns else F.lit(None).cast("long")
        columns = [F.col(f.name).cast(f.dataType).alias(f.name) for f in AUDIT_SCHEMA.fields]
        parsed = raw.select(*columns, F.coalesce(seq, F.monotonically_increasing_id()).alias("seq"),
                            F.lit(None).cast("string").alias("config_json"))
    return parsed


# -- the two kinds of events ----------------------------------------------------------------------


def is_quota_config():
    return F.col("config_json").isNotNull()


def is_audit_event():
    """A value that parsed as an audit event (anything else a client wrote to the topic is not)."""
    return F.col("ts").isNotNull() & F.col("api").isNotNull() & F.col("principal").isNotNull()


def decision_events(parsed: DataFrame) -> DataFrame:
    """The decisions (EVENTS_SCHEMA): every audit event but the quota-configuration ones."""
    return parsed.where(is_audit_event() & ~is_quota_config()).select(*EVENTS_SCHEMA.fieldNames())


def quota_records(parsed: DataFrame) -> list[dict]:
    """The quota-configuration events, in stream order: dicts of ts, seq, api, principal, quotas
    ([{"entity": {...}, "values": {...}}]) and quota_settings ({key: value})."""
    rows = parsed.where(is_audit_event() & is_quota_config()).select("seq", "config_json").collect()
    out = []
    for row in rows:
        try:
            event = json.loads(row.config_json)
        except ValueError:
            continue
        quotas = [
            {"entity": dict(q.get("entity") or {}), "values": dict(q.get("values") or {})}
            for q in (event.get("quotas") or []) if isinstance(q, dict)
        ]
        out.append({"ts": int(event["ts"]), "seq": row.seq, "api": event.get("api"),
                    "principal": event.get("principal") or "", "quotas": quotas,
                    "quota_settings": dict(event.get("quota_settings") or {})})
    return sorted(out, key=lambda r: (r["ts"], r["seq"]))
