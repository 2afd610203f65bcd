"""The pipeline's Spark jobs. Each takes DataFrames and returns one; nothing here writes files.

Windows are fixed, aligned to the epoch: `window_start_ms = floor(ts / window_ms) * window_ms`.

* `summary`: per window, principal and client id: events, requests (distinct (api, ts): a request's
  partitions share its `ts`), produce/fetch bytes and records, distinct producer ids exact and
  approximate (HyperLogLog++), and the throttle-time distribution over events.
* `new_pid_events`: when each principal's producer ids are NEW to the producer-id quota: at the first
  sighting, and again after a silence longer than `memory_ms` (the report passes
  producer.id.expiration.ms: the quota knows a PID as long as it has producer state). This is the
  demand the quota meters.
* `recommendations`: per principal, the smallest producer_ids_rate that would not have throttled it
  and the smallest candidate that did not, with the headroom.
"""

from __future__ import annotations

from typing import Sequence

import pandas as pd
from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from pipeline.model import needed_rate
from pipeline.replay import PRODUCE_KEY, QuotaSettings

__all__ = ["new_pid_events", "new_pids_per_window", "recommendations", "summary", "window_start"]


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


def _needed_rate_group(pdf: pd.DataFrame, window_size_seconds: float, layer_count: int) -> pd.DataFrame:
    return pd.DataFrame({
        "principal": [pdf["principal"].iat[0]],
        "new_pids": [len(pdf)],
        "needed_rate": [needed_rate(pdf["ts"].to_numpy(), window_size_seconds, layer_count)],
    })


def recommendations(
    new_pids: DataFrame,
    totals: pd.DataFrame,
    candidates: Sequence[QuotaSettings],
    window_ms: int,
) -> pd.DataFrame:
    """Per principal (a small pandas table): new PIDs, the peak per report window, `needed_rate`
    (the smallest producer_ids_rate that would have admitted every new PID of the trace: no window
    of it throttled), and `recommended_rate`: the smallest candidate under which the replay rejected
    none of its batches (`totals`: pipeline.whatif.totals_table as pandas), with `headroom` =
    recommended / needed."""
    if not candidates:
        raise ValueError("recommendations need at least one candidate setting")
    window_size = candidates[0].pid_window_size_seconds
    layer_count = candidates[0].pid_layer_count
    needed = (
        new_pids.select("principal", "ts")
        .groupBy("principal")
        .applyInPandas(
            lambda pdf: _needed_rate_group(pdf, window_size, layer_count),
            schema="principal string, new_pids long, needed_rate double",
        )
        .toPandas()
    )
    peaks = (
        new_pids_per_window(new_pids, window_ms)
        .groupBy("principal")
        .agg(F.max("new_pids").alias("peak_new_pids_per_window"))
        .toPandas()
    )
    rejected = totals[totals.setting.isin([c.name for c in candidates])]
    table = needed.merge(peaks, on="principal", how="left")
    rows = []
    by_rate = sorted(candidates, key=lambda c: c.producer_ids_rate or float("inf"))
    for record in table.itertuples(index=False):
        chosen = None
        for candidate in by_rate:
            hit = rejected[(rejected.setting == candidate.name) & (rejected.principal == record.principal)]
            if hit.empty or int(hit.pid_rejected_batches.iat[0]) == 0:
                chosen = candidate
                break
        rate = chosen.producer_ids_rate if chosen is not None else None
        rows.append({
            "recommended_rate": rate,
            "headroom": (rate / record.needed_rate) if rate and record.needed_rate else None,
            "note": "" if chosen is not None else "every candidate throttles it: above all candidate rates",
        })
    result = pd.concat([table, pd.DataFrame(rows, index=table.index)], axis=1)
    return result.sort_values("needed_rate", ascending=False, ignore_index=True)
