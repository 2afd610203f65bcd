"""The pipeline's Spark jobs. Each takes DataFrames and returns one; nothing here writes files.

Windows are fixed, aligned to the epoch: `window_start_ms = floor(ts / window_ms) * window_ms`.

* `summary`: per window, principal and client id: events, requests (distinct (api, ts): a request's
  partitions share its `ts`), produce/fetch bytes and records, distinct producer ids exact and
  approximate (HyperLogLog++), and the throttle-time distribution over events.
* `new_pid_events`: when each principal's producer ids are NEW to the producer-id quota: at the first
  sighting, and again after a silence longer than `memory_ms` (the report passes
  producer.id.expiration.ms: the quota knows a PID as long as it has producer state). This is the
  demand the quota meters.
* `user_needs`: per principal, the producer_ids_rate its new producer ids need (minibroker.pipeline.recommend);
* `observed_totals`: what the broker itself decided, per principal, beside the replay's totals.
"""

from __future__ import annotations

import pandas as pd
from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from minibroker.pipeline.recommend import per_window_need
from minibroker.pipeline.replay import PRODUCE_KEY

__all__ = ["new_pid_events", "new_pids_per_window", "observed_totals", "summary", "user_needs", "window_start"]


def window_start(window_ms: int):
    return (F.floor(F.col("ts") / F.lit(window_ms)) * F.lit(window_ms)).cast("long")


def _pid():
    return F.when(F.col("producer_id") >= 0, F.col("producer_id"))


def summary(events: DataFrame, window_ms: int) -> DataFrame:
    produce = F.col("api_key") == PRODUCE_KEY
    fetch = F.col("api_key") == 1
    throttle = F.col("throttle_time_ms")
    key = ["window_start_ms", "principal", "client_id"]
    windowed = events.withColumn("window_start_ms", window_start(window_ms))
    # Exact distinct counts as separate dedup-then-count jobs joined back: one aggregation holding
    # several DISTINCT aggregates plus a percentile is planned as an Expand that runs ~10x slower.
    totals = windowed.groupBy(*key).agg(
        F.count(F.lit(1)).alias("events"),
        F.sum(F.when(produce, F.col("bytes")).otherwise(0)).alias("produce_bytes"),
        F.sum(F.when(produce, F.col("records")).otherwise(0)).alias("produce_records"),
        F.sum(F.when(fetch, F.col("bytes")).otherwise(0)).alias("fetch_bytes"),
        F.sum(F.when(fetch, F.col("records")).otherwise(0)).alias("fetch_records"),
        F.approx_count_distinct(_pid(), 0.02).alias("distinct_pids_approx"),
        F.sum((throttle > 0).cast("long")).alias("throttled_events"),
        F.percentile_approx(throttle, [0.5, 0.9, 0.99], 10_000).alias("_q"),
        F.max(throttle).alias("throttle_max_ms"),
    )
    requests = windowed.select(*key, "api_key", "ts").distinct().groupBy(*key).agg(
        F.count(F.lit(1)).alias("requests")
    )
    pids = (
        windowed.where(F.col("producer_id") >= 0).select(*key, "producer_id").distinct()
        .groupBy(*key).agg(F.count(F.lit(1)).alias("distinct_pids"))
    )
    return (
        totals.join(requests, key, "left")
        .join(pids, key, "left")
        .select(
            *key, "events", "requests", "produce_bytes", "produce_records", "fetch_bytes", "fetch_records",
            F.coalesce(F.col("distinct_pids"), F.lit(0)).alias("distinct_pids"),
            "distinct_pids_approx", "throttled_events",
            F.col("_q")[0].alias("throttle_p50_ms"),
            F.col("_q")[1].alias("throttle_p90_ms"),
            F.col("_q")[2].alias("throttle_p99_ms"),
            "throttle_max_ms",
        )
    )


def new_pid_events(events: DataFrame, memory_ms: int) -> DataFrame:
    """(principal, producer_id, ts, seq) of each Produce event at which its PID is new (see module
    docstring); `memory_ms`: how long a silent PID stays known."""
    produce = events.where((F.col("api_key") == PRODUCE_KEY) & (F.col("producer_id") >= 0))
    order = Window.partitionBy("principal", "producer_id").orderBy("ts", "seq")
    previous = F.lag("ts").over(order)
    return (
        produce.select("principal", "producer_id", "ts", "seq")
        .withColumn("_prev", previous)
        .where(F.col("_prev").isNull() | (F.col("ts") - F.col("_prev") > memory_ms))
        .drop("_prev")
    )


def new_pids_per_window(new_pids: DataFrame, window_ms: int) -> DataFrame:
    return (
        new_pids.withColumn("window_start_ms", window_start(window_ms))
        .groupBy("principal", "window_start_ms")
        .agg(F.count(F.lit(1)).alias("new_pids"))
    )


def _needs_group(pdf: pd.DataFrame, window_size_seconds: float, layer_count: int, span_ms: int) -> pd.DataFrame:
    needed, per_window, estimated = per_window_need(pdf["ts"].to_numpy(), window_size_seconds, layer_count, span_ms)
    return pd.DataFrame({
        "principal": [pdf["principal"].iat[0]],
        "new_pids": [len(pdf)],
        "needed_rate": [needed],
        "per_window": [per_window],
        "estimated": [estimated],
    })


def user_needs(new_pids: DataFrame, window_size_seconds: float, layer_count: int, span_ms: int) -> pd.DataFrame:
    """Per principal with new producer ids (a small pandas table): how many, `needed_rate` (the
    smallest producer_ids_rate that admits them all over the audit) and `per_window` (over a whole
    window; estimated when the audit, `span_ms` long, is shorter than one), pipeline.recommend.per_window_need."""
    return (
        new_pids.select("principal", "ts")
        .groupBy("principal")
        .applyInPandas(
            lambda pdf: _needs_group(pdf, window_size_seconds, layer_count, span_ms),
            schema="principal string, new_pids long, needed_rate double, per_window double, estimated boolean",
        )
        .toPandas()
    )


def observed_totals(events: DataFrame) -> DataFrame:
    """What the broker itself decided, per principal, in the replay's columns (minibroker.pipeline.whatif
    COUNTS): its producer-id verdicts (`pid_new`, batches refused for `producer_ids_rate`) and the
    throttle time it gave each produce request (any quota)."""
    produce = events.where(F.col("api_key") == PRODUCE_KEY)
    is_new = F.coalesce(F.col("pid_new"), F.lit(False))
    rejected = F.col("throttle_quota") == "producer_ids_rate"
    per_event = produce.groupBy("principal").agg(
        F.count(F.lit(1)).alias("produce_events"),
        F.sum(is_new.cast("long")).alias("new_pid_events"),
        F.countDistinct(F.when(is_new, F.col("producer_id"))).alias("new_pids"),
        F.sum(rejected.cast("long")).alias("pid_rejected_batches"),
        F.countDistinct(F.when(rejected, F.col("producer_id"))).alias("pid_throttled_pids"),
        F.sum((F.col("throttle_quota") == "producer_byte_rate").cast("long")).alias("byte_throttled_events"),
    )
    requests = (
        produce.groupBy("principal", "client_id", "ts").agg(F.max("throttle_time_ms").alias("t"))
        .groupBy("principal").agg(
            F.count(F.lit(1)).alias("produce_requests"),
            F.sum((F.col("t") > 0).cast("long")).alias("throttled_requests"),
            F.max("t").cast("long").alias("max_throttle_ms"),
            F.sum("t").cast("long").alias("sum_throttle_ms"),
        )
    )
    return per_event.join(requests, "principal")
