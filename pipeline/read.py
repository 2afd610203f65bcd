"""Read audit events into a typed DataFrame (`pipeline.schema.EVENTS_SCHEMA`): from a broker's data
directory, or from a trace file (Parquet or JSON lines).

Data directory: a Spark 4 Python data source (`AuditDataSource`, format "minibroker_audit"). Its
`partitions()` runs on the driver and lists the segment files of `__minibroker_audit-0`, one input
partition per segment; `read()` runs on the executors, walks one segment's batches with
`protocol.records.iter_headers` / `decode_records` (pipeline.segments), and yields pyarrow RecordBatches. Chosen over
parallelising the file list into an RDD and decoding in mapPartitions because rows then cross from
Python to the JVM as Arrow columns instead of pickled tuples, the schema is declared once, and the
reader is an ordinary `spark.read.format(...)` source that works the same on a cluster (there the
data directory must be on storage the executors can read). Safe on a live broker's files: see
pipeline.segments.

`seq` is the record's offset in the audit topic: the order in which the broker made its decisions.
For a trace, `seq` comes from the file's own `seq` column when it has one (`scripts/gen_trace` writes
it), else from the row order.
"""

from __future__ import annotations

from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from pipeline.schema import AUDIT_SCHEMA, EVENTS_SCHEMA
from pipeline.segments import audit_segment_files, iter_segment_events
from storage.audit_format import AUDIT_FIELD_NAMES, AUDIT_TOPIC

__all__ = [
    "AuditDataSource",
    "read_data_dir",
    "read_events",
    "read_trace",
]

FORMAT_NAME = "minibroker_audit"
ARROW_BATCH_ROWS = 65_536


# -- Spark: the data source -----------------------------------------------------------------------


class _Segment(InputPartition):
    def __init__(self, path: str, log_start_offset: int) -> None:
        super().__init__(path)
        self.path = path
        self.log_start_offset = log_start_offset


class _AuditReader(DataSourceReader):
    def __init__(self, data_dir: str, topic: str) -> None:
        self.data_dir = data_dir
        self.topic = topic

    def partitions(self) -> list[_Segment]:
        return [_Segment(path, start) for path, start in audit_segment_files(self.data_dir, self.topic)]

    def read(self, partition: _Segment):
        import pyarrow as pa

        arrow_schema = _arrow_schema()
        columns: list[list] = [[] for _ in range(len(AUDIT_FIELD_NAMES) + 1)]
        appenders = [column.append for column in columns]
        seq_append = appenders[-1]
        field_appenders = list(zip(AUDIT_FIELD_NAMES, appenders))
        rows = 0
        for offset, event in iter_segment_events(partition.path, partition.log_start_offset):
            for name, append in field_appenders:
                append(event[name])
            seq_append(offset)
            rows += 1
            if rows == ARROW_BATCH_ROWS:
                yield pa.RecordBatch.from_arrays(
                    [pa.array(c, type=f.type) for c, f in zip(columns, arrow_schema)], schema=arrow_schema
                )
                for column in columns:
                    column.clear()
                rows = 0
        if rows:
            yield pa.RecordBatch.from_arrays(
                [pa.array(c, type=f.type) for c, f in zip(columns, arrow_schema)], schema=arrow_schema
            )


def _arrow_schema():
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(EVENTS_SCHEMA)


class AuditDataSource(DataSource):
    """`spark.read.format("minibroker_audit").option("path", data_dir).load()`; option `topic`
    (default `__minibroker_audit`)."""

    @classmethod
    def name(cls) -> str:
        return FORMAT_NAME

    def schema(self) -> StructType:
        return EVENTS_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        path = self.options.get("path")
        if not path:
            raise ValueError("minibroker_audit needs option('path', <broker data dir>)")
        return _AuditReader(str(Path(path).resolve()), self.options.get("topic", AUDIT_TOPIC))


def read_data_dir(spark: SparkSession, data_dir: str | Path, topic: str = AUDIT_TOPIC) -> DataFrame:
    """The audit events a broker wrote into `data_dir` (its `log.dirs`); empty when there are none."""
    if not audit_segment_files(data_dir, topic):
        return spark.createDataFrame([], EVENTS_SCHEMA)
    spark.dataSource.register(AuditDataSource)
    return spark.read.format(FORMAT_NAME).option("path", str(data_dir)).option("topic", topic).load()


# -- Spark: traces --------------------------------------------------------------------------------


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
    """Audit events from a Parquet file or a JSON-lines file (or a directory of either)."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"trace {path} does not exist")
    if _trace_format(path) == "parquet":
        raw = spark.read.parquet(str(path))
    else:
        raw = spark.read.schema(EVENTS_SCHEMA).json(str(path))
    missing = [f.name for f in AUDIT_SCHEMA.fields if f.name not in raw.columns]
    if missing:
        raise ValueError(f"trace {path} lacks the audit field(s) {', '.join(missing)}")
    seq = F.col("seq").cast("long") if "seq" in raw.columns else F.lit(None).cast("long")
    columns = [F.col(f.name).cast(f.dataType).alias(f.name) for f in AUDIT_SCHEMA.fields]
    return raw.select(*columns, F.coalesce(seq, F.monotonically_increasing_id()).alias("seq"))


def read_events(
    spark: SparkSession, *, data_dir: str | Path | None = None, trace: str | Path | None = None,
    topic: str = AUDIT_TOPIC,
) -> DataFrame:
    """A trace when one is given, else the audit in `data_dir`."""
    if trace is not None:
        return read_trace(spark, trace)
    if data_dir is None:
        raise ValueError("give a data dir or a trace")
    return read_data_dir(spark, data_dir, topic)
