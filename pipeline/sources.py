"""Spark Python data sources for the audit topic's raw records, shaped like Spark's own Kafka source.

Both yield Spark's Kafka-source columns (`RAW_SCHEMA`: key, value, topic, partition, offset,
timestamp, timestampType) and split their input the way Spark's Kafka source does, so one audit
partition becomes many tasks; `minibroker.pipeline.read` parses the values with `from_json` in Spark.

* `KafkaRecordsSource`, format "minibroker_kafka": any broker over the Kafka protocol (minibroker, or
  a Kafka cluster the audit was copied to), through confluent-kafka (librdkafka: the fastest Python
  consumer, installed with the pipeline extra). Options follow Spark's Kafka source:
  `kafka.bootstrap.servers` (required) and any other `kafka.<key>` for the consumer (librdkafka's
  names, which are Kafka's for security: `kafka.security.protocol`, `kafka.sasl.mechanism`,
  `kafka.sasl.username`, ...), `subscribe` (the topic), `startingOffsets` / `endingOffsets`
  ("earliest" / "latest", or Spark's JSON `{"topic": {"0": 42}}`), `minPartitions`,
  `maxRecordsPerPartition`, `kafkaConsumer.pollTimeoutMs`. The offsets are resolved once, on the
  driver, when the source is planned: a batch read sees a fixed snapshot even while the broker keeps
  appending. Each offset range is read by its own consumer with `assign` (no consumer group is
  joined, nothing is committed), up to the end of its range; gaps (transaction markers, compaction)
  are fine.
* `SegmentRecordsSource`, format "minibroker_segments": a broker's data directory, offline (the
  files must be readable where the tasks run). Options: `path` (the data dir), `subscribe`,
  `minPartitions`, `maxBytesPerPartition`. Each segment file is cut into byte ranges at batch
  boundaries, found by walking the batch headers on the driver (12 bytes read per batch: Kafka's
  FileRecords walk; the index files are not trusted for it); a task reads its range's whole
  batches, like a fetch, so a batch still being written is not seen. Records below the partition's
  log start offset (DeleteRecords, retention) are skipped; control and compressed batches (the broker
  writes neither) are skipped with a warning. Never opens the log through `minibroker.storage.log` (that would
  run recovery on a live broker's files).

Splitting (both, as Spark's KafkaOffsetRangeCalculator): a range is cut into
max(ceil(size / max-per-partition), its share of `minPartitions`) pieces of equal size.
"""

from __future__ import annotations

import json
import logging
import math
import time
from dataclasses import dataclass
from pathlib import Path

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from minibroker.storage.audit_format import AUDIT_TOPIC

__all__ = [
    "KAFKA_FORMAT",
    "RAW_SCHEMA",
    "SEGMENTS_FORMAT",
    "KafkaRecordsSource",
    "OffsetRange",
    "SegmentRecordsSource",
    "kafka_offset_ranges",
    "segment_byte_ranges",
    "split_sizes",
]

log = logging.getLogger(__name__)

KAFKA_FORMAT = "minibroker_kafka"
SEGMENTS_FORMAT = "minibroker_segments"

RAW_SCHEMA = StructType([
    StructField("key", BinaryType(), True),
    StructField("value", BinaryType(), True),
    StructField("topic", StringType(), True),
    StructField("partition", IntegerType(), True),
    StructField("offset", LongType(), True),
    StructField("timestamp", TimestampType(), True),
    StructField("timestampType", IntegerType(), True),
])

ARROW_BATCH_ROWS = 65_536
DEFAULT_MAX_RECORDS_PER_PARTITION = 500_000
DEFAULT_MAX_BYTES_PER_PARTITION = 128 * 1024 * 1024  # spark.sql.files.maxPartitionBytes' default
DEFAULT_POLL_TIMEOUT_MS = 120_000  # how long a task waits for records it knows exist
PLANNING_TIMEOUT_S = 10.0  # a broker that does not answer in this long is reported
PIPELINE_GROUP_ID = "minibroker-pipeline"  # librdkafka wants one; assign() never joins it


def _arrow_schema():
    import pyarrow as pa

    return pa.schema([
        pa.field("key", pa.binary()), pa.field("value", pa.binary()), pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()), pa.field("offset", pa.int64()),
        pa.field("timestamp", pa.timestamp("us", tz="UTC")), pa.field("timestampType", pa.int32()),
    ])


class _Columns:
    """Rows collected column by column, handed out as Arrow RecordBatches of RAW_SCHEMA."""

    def __init__(self, topic: str, partition: int) -> None:
        self.topic, self.partition = topic, partition
        self.keys: list = []
        self.values: list = []
        self.offsets: list[int] = []
        self.timestamps: list[int] = []
        self.types: list[int] = []

    def __len__(self) -> int:
        return len(self.offsets)

    def batch(self):
        import pyarrow as pa

        n = len(self.offsets)
        batch = pa.RecordBatch.from_arrays([
            pa.array(self.keys, pa.binary()), pa.array(self.values, pa.binary()),
            pa.array([self.topic] * n, pa.string()), pa.array([self.partition] * n, pa.int32()),
            pa.array(self.offsets, pa.int64()),
            pa.array([t * 1000 for t in self.timestamps], pa.timestamp("us", tz="UTC")),
            pa.array(self.types, pa.int32()),
        ], schema=_arrow_schema())
        for column in (self.keys, self.values, self.offsets, self.timestamps, self.types):
            column.clear()  # in place: readers hold their append methods
        return batch


# -- splitting --------------------------------------------------------------------------------------


def split_sizes(sizes: list[int], max_per_part: int, min_parts: int) -> list[int]:
    """How many pieces each range of `sizes` is cut into: enough that none exceeds `max_per_part`,
    and together at least `min_parts` (shared in proportion to size), as Spark's Kafka source does."""
    total = sum(sizes)
    out = []
    for size in sizes:
        if size <= 0:
            out.append(0)
            continue
        by_max = math.ceil(size / max_per_part) if max_per_part > 0 else 1
        by_share = round(size / total * min_parts) if min_parts > 0 else 1
        out.append(max(1, by_max, by_share))
    return out


@dataclass(frozen=True)
class OffsetRange:
    topic: str
    partition: int
    start: int  # inclusive
    end: int  # exclusive

    @property
    def size(self) -> int:
        return self.end - self.start


def _cut(ranges: list[OffsetRange], max_records: int, min_parts: int) -> list[OffsetRange]:
    pieces = split_sizes([r.size for r in ranges], max_records, min_parts)
    out = []
    for r, n in zip(ranges, pieces):
        for i in range(n):
            start = r.start + r.size * i // n
            end = r.start + r.size * (i + 1) // n
            if end > start:
                out.append(OffsetRange(r.topic, r.partition, start, end))
    return out


# -- Kafka ------------------------------------------------------------------------------------------


def _consumer_config(options) -> dict[str, str]:
    servers = options.get("kafka.bootstrap.servers")
    if not servers:
        raise ValueError(f"{KAFKA_FORMAT} needs option('kafka.bootstrap.servers', 'HOST:PORT')")
    config = {key[len("kafka."):]: value for key, value in options.items() if key.startswith("kafka.")}
    config.setdefault("group.id", PIPELINE_GROUP_ID)
    config["enable.auto.commit"] = "false"
    config.setdefault("auto.offset.reset", "earliest")  # a range whose start retention deleted
    return config


def _offset_spec(text: str | None, default: str, topic: str) -> str | dict[int, int]:
    text = (text or default).strip()
    if text in ("earliest", "latest"):
        return text
    try:
        spec = json.loads(text)[topic]
        return {int(p): int(o) for p, o in spec.items()}
    except (ValueError, KeyError, TypeError, AttributeError):
        raise ValueError(f"offsets must be 'earliest', 'latest' or JSON like {{\"{topic}\": {{\"0\": 42}}}}: "
                         f"{text!r}") from None


def kafka_offset_ranges(config: dict[str, str], topic: str, starting: str | dict[int, int] = "earliest",
                        ending: str | dict[int, int] = "latest",
                        timeout_s: float = PLANNING_TIMEOUT_S) -> list[OffsetRange]:
    """The topic's partitions as offset ranges (the watermarks at this moment where "earliest" /
    "latest"); [] when the topic does not exist. Raises RuntimeError naming the bootstrap servers
    when the cluster cannot be reached."""
    from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

    where = f"{topic} on {config.get('bootstrap.servers')}"
    consumer = Consumer(config)
    try:
        try:
            metadata = consumer.list_topics(topic, timeout=timeout_s)
        except KafkaException as exc:
            raise RuntimeError(f"cannot read {where}: {exc.args[0].str() if exc.args else exc}") from None
        described = metadata.topics.get(topic)
        if described is None or (described.error is not None
                                 and described.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART):
            return []
        if described.error is not None:
            raise RuntimeError(f"cannot read {where}: {described.error.str()}")
        ranges = []
        for partition in sorted(described.partitions):
            try:
                low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=timeout_s)
            except KafkaException as exc:
                raise RuntimeError(f"cannot list the offsets of {where}, partition {partition}: "
                                   f"{exc.args[0].str() if exc.args else exc}") from None
            start = low if starting == "earliest" else max(low, starting.get(partition, low))  # type: ignore[union-attr]
            end = high if ending == "latest" else min(high, ending.get(partition, high))  # type: ignore[union-attr]
            ranges.append(OffsetRange(topic, partition, start, max(start, end)))
        return ranges
    finally:
        consumer.close()


class _KafkaReader(DataSourceReader):
    def __init__(self, options) -> None:
        self.config = _consumer_config(options)
        self.topic = options.get("subscribe") or AUDIT_TOPIC
        self.starting = _offset_spec(options.get("startingOffsets"), "earliest", self.topic)
        self.ending = _offset_spec(options.get("endingOffsets"), "latest", self.topic)
        self.min_partitions = int(options.get("minPartitions") or 0)
        self.max_records = int(options.get("maxRecordsPerPartition") or DEFAULT_MAX_RECORDS_PER_PARTITION)
        self.poll_timeout_ms = int(options.get("kafkaConsumer.pollTimeoutMs") or DEFAULT_POLL_TIMEOUT_MS)
        self._ranges: list[OffsetRange] | None = None

    def partitions(self) -> list[InputPartition]:
        if self._ranges is None:
            ranges = kafka_offset_ranges(self.config, self.topic, self.starting, self.ending)
            self._ranges = _cut(ranges, self.max_records, self.min_partitions)
        return [InputPartition(r) for r in self._ranges]

    def read(self, partition: InputPartition):
        from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

        r: OffsetRange = partition.value
        consumer = Consumer({**self.config, "enable.partition.eof": "true"})
        columns = _Columns(r.topic, r.partition)
        keys, values, offsets, timestamps, types = (
            columns.keys.append, columns.values.append, columns.offsets.append,
            columns.timestamps.append, columns.types.append,
        )
        try:
            consumer.assign([TopicPartition(r.topic, r.partition, r.start)])
            waited_since = time.monotonic()
            first = None
            done = False
            while not done:
                messages = consumer.consume(num_messages=10_000, timeout=1.0)
                if not messages:
                    if (time.monotonic() - waited_since) * 1000 > self.poll_timeout_ms:
                        raise TimeoutError(
                            f"no records from {r.topic}-{r.partition} on {self.config.get('bootstrap.servers')} "
                            f"for {self.poll_timeout_ms} ms (reading offsets {r.start}..{r.end - 1}, "
                            f"{len(columns)} read in this batch); kafkaConsumer.pollTimeoutMs sets the wait")
                    continue
                waited_since = time.monotonic()
                for message in messages:
                    error = message.error()
                    if error is not None:
                        if error.code() == KafkaError._PARTITION_EOF:
                            done = True
                            break
                        raise KafkaException(error)
                    offset = message.offset()
                    if offset is None:  # only events lack one, and they came with an error above
                        continue
                    if offset >= r.end:
                        done = True
                        break
                    if first is None:
                        first = offset
                    keys(message.key())
                    values(message.value())
                    offsets(offset)
                    kind, ts = message.timestamp()
                    timestamps(ts)
                    types(max(kind - 1, 0))  # librdkafka: 1 create time, 2 log append time; Spark: 0, 1
                    if offset >= r.end - 1:
                        done = True
                        break
                if len(columns) >= ARROW_BATCH_ROWS:
                    yield columns.batch()
        finally:
            consumer.close()
        if first is not None and first > r.start:
            log.warning("%s-%d: offsets %d..%d were deleted (retention) before they were read",
                        r.topic, r.partition, r.start, first - 1)
        if len(columns):
            yield columns.batch()


class _RawRecordsSource(DataSource):
    """A data source of RAW_SCHEMA rows (Spark's Kafka source's columns), named `FORMAT`, read by
    `READER(options)`."""

    FORMAT: str
    READER: type[DataSourceReader]

    @classmethod
    def name(cls) -> str:
        return cls.FORMAT

    def schema(self) -> StructType:
        return RAW_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return self.READER(self.options)


class KafkaRecordsSource(_RawRecordsSource):
    """`spark.read.format("minibroker_kafka").option("kafka.bootstrap.servers", ...).load()`."""

    FORMAT = KAFKA_FORMAT
    READER = _KafkaReader


# -- segment files ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ByteRange:
    path: str
    topic: str
    partition: int
    start: int  # position of the first batch
    end: int  # position after the last whole batch
    log_start_offset: int

    @property
    def size(self) -> int:
        return self.end - self.start


def segment_byte_ranges(data_dir: str | Path, topic: str = AUDIT_TOPIC,
                        max_bytes: int = DEFAULT_MAX_BYTES_PER_PARTITION, min_parts: int = 0) -> list[ByteRange]:
    """Every segment of the topic's partitions in `data_dir`, cut at batch boundaries into ranges
    (see the module docstring); [] when the topic is not there."""
    from minibroker.pipeline.segments import batch_positions, segment_files

    files = [(f.path, f.partition, f.log_start_offset, batch_positions(f.path)) for f in segment_files(data_dir, topic)]
    pieces = split_sizes([positions[-1] for *_, positions in files], max_bytes, min_parts)
    ranges = []
    for (path, partition, start_offset, positions), n in zip(files, pieces):
        if n == 0:
            continue
        total = positions[-1]
        cut, begin = 1, 0
        for position in positions[1:]:
            if position >= total * cut / n or position == total:
                ranges.append(ByteRange(path, topic, partition, begin, position, start_offset))
                begin = position
                cut += 1
        # every batch boundary is a candidate cut, so the ranges cover [0, total) exactly
    return ranges


class _SegmentReader(DataSourceReader):
    def __init__(self, options) -> None:
        path = options.get("path")
        if not path:
            raise ValueError(f"{SEGMENTS_FORMAT} needs option('path', <broker data dir>)")
        self.data_dir = str(Path(path).resolve())
        self.topic = options.get("subscribe") or AUDIT_TOPIC
        self.max_bytes = int(options.get("maxBytesPerPartition") or DEFAULT_MAX_BYTES_PER_PARTITION)
        self.min_partitions = int(options.get("minPartitions") or 0)

    def partitions(self) -> list[InputPartition]:
        return [InputPartition(r) for r in segment_byte_ranges(self.data_dir, self.topic, self.max_bytes,
                                                               self.min_partitions)]

    def read(self, partition: InputPartition):
        from minibroker.pipeline.segments import iter_records

        r: ByteRange = partition.value
        columns = _Columns(r.topic, r.partition)
        keys, values, offsets, timestamps, types = (columns.keys.append, columns.values.append,
                                                    columns.offsets.append, columns.timestamps.append,
                                                    columns.types.append)
        skipped = [0]
        for offset, ts, key, value, kind in iter_records(r.path, r.start, r.end, r.log_start_offset, skipped):
            keys(key)
            values(value)
            offsets(offset)
            timestamps(ts)
            types(kind)
            if len(columns) >= ARROW_BATCH_ROWS:
                yield columns.batch()
        if skipped[0]:
            log.warning("%s: skipped %d batch(es) that are not plain audit records", r.path, skipped[0])
        if len(columns):
            yield columns.batch()


class SegmentRecordsSource(_RawRecordsSource):
    """`spark.read.format("minibroker_segments").option("path", data_dir).load()`."""

    FORMAT = SEGMENTS_FORMAT
    READER = _SegmentReader
