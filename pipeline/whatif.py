"""What each candidate setting would have done: the replay decisions (pipeline.replay) aggregated per
principal in pandas, inside the same `applyInPandas` task that made them, so the per-event decisions
(events x settings rows) never become a Spark table; only small aggregates leave the task.

Per setting, principal and report window, and per setting and principal over the whole trace:

* `produce_events` (partition batches), `produce_requests` (a request = one client id at one `ts`),
  `new_pid_events` / `new_pids` (batches / distinct PIDs the quota saw as new), `pid_rejected_batches`
  / `pid_throttled_pids`, `byte_throttled_events`, `throttled_requests` and `max_throttle_ms` /
  `sum_throttle_ms` (a request's throttle is the largest of its batches');
* producer-state deltas: `d_entries`, `d_kafka_batches`, `d_kafka_bytes`: how the principal's
  producer state changes in that window. An entry (a producer id on a partition, lean mode's unit)
  lives from its first appended batch until `expiration_ms` after its last (producer.id.expiration.ms;
  the broker's periodic check may keep it up to one check interval longer); a producer id back after
  a longer silence starts a new entry. Kafka mode retains up to 5 batches per entry, costed with the
  `StateMemoryModel`; PIDs the quota rejects are never appended and hold no state.

`state_table` adds the deltas of all principals per window and accumulates them: the state the whole
broker would hold at the end of each window.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd
from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from pipeline.model import KAFKA_BATCHES_TO_RETAIN, StateMemoryModel
from pipeline.replay import INPUT_COLUMNS, PRODUCE_KEY, QuotaSettings, replay_principal

__all__ = [
    "AGGREGATE_SCHEMA",
    "DEFAULT_PRODUCER_ID_EXPIRATION_MS",
    "aggregate_decisions",
    "state_table",
    "totals_table",
    "whatif",
    "windows_table",
]

DEFAULT_PRODUCER_ID_EXPIRATION_MS = 86_400_000  # producer.id.expiration.ms
TOTAL = -1  # window_start_ms of the whole-trace rows

COUNTS = [
    "produce_events", "produce_requests", "new_pid_events", "new_pids", "pid_rejected_batches",
    "pid_throttled_pids", "byte_throttled_events", "throttled_requests", "max_throttle_ms", "sum_throttle_ms",
]
DELTAS = ["d_entries", "d_kafka_batches"]
AGGREGATE_SCHEMA = (
    "setting string, principal string, window_start_ms long, "
    + ", ".join(f"{c} long" for c in COUNTS + DELTAS)
    + ", d_kafka_bytes double"
)
_COLUMNS = ["setting", "principal", "window_start_ms", *COUNTS, *DELTAS, "d_kafka_bytes"]


def _counts(d: pd.DataFrame, by: list) -> pd.DataFrame:
    """The COUNTS of decision rows `d` per `by` (an empty list: one row for all of `d`)."""
    key = by or np.zeros(len(d), dtype=np.int8)  # no key: one group
    grouped = d.groupby(key, sort=False)
    out = pd.DataFrame({
        "produce_events": grouped.size(),
        "new_pid_events": grouped["is_new"].sum(),
        "pid_rejected_batches": grouped["rejected"].sum(),
        "byte_throttled_events": grouped["byte_throttled"].sum(),
    })
    for column, mask in (("new_pids", d.is_new.to_numpy()), ("pid_throttled_pids", d.rejected.to_numpy())):
        part = d[mask]
        out[column] = part.groupby(by or np.zeros(len(part), dtype=np.int8), sort=False)["producer_id"].nunique()
    requests = d.groupby([*by, "client_id", "ts"], sort=False)["throttle"].max().reset_index()
    requests["throttled"] = requests["throttle"] > 0
    per = requests.groupby(by or np.zeros(len(requests), dtype=np.int8), sort=False)
    out["produce_requests"] = per.size()
    out["throttled_requests"] = per["throttled"].sum()
    out["max_throttle_ms"] = per["throttle"].max()
    out["sum_throttle_ms"] = per["throttle"].sum()
    return out.fillna(0).astype("int64")


def _state_deltas(d: pd.DataFrame, window_ms: int, model: StateMemoryModel, expiration_ms: int) -> pd.DataFrame:
    """Producer-state deltas per window from the appended batches with a producer id."""
    a = d[d.appended & (d.producer_id >= 0)]
    if a.empty:
        columns = {c: pd.Series(dtype="int64") for c in DELTAS} | {"d_kafka_bytes": pd.Series(dtype="float64")}
        return pd.DataFrame(columns, index=pd.Index([], dtype="int64", name="window_start_ms"))
    a = a.sort_values(["topic", "partition", "producer_id", "ts", "seq"], kind="stable")
    key = a[["topic", "partition", "producer_id"]]
    same_entry = (key == key.shift()).all(axis=1).to_numpy()
    ts = a["ts"].to_numpy()
    gap = np.diff(ts, prepend=ts[0])
    starts = ~same_entry | (gap >= expiration_ms)  # a new entry (session) begins
    session = np.cumsum(starts)
    # k-th batch of its entry (1-based), and per entry its last ts and batch count.
    first_index = np.flatnonzero(starts)
    k = np.arange(len(a)) - first_index[session - 1] + 1
    kafka = np.asarray(model.kafka)
    retained = k <= KAFKA_BATCHES_TO_RETAIN
    add = pd.DataFrame({
        "ts": ts[retained],
        "d_entries": (k[retained] == 1).astype("int64"),
        "d_kafka_batches": np.ones(int(retained.sum()), dtype="int64"),
        "d_kafka_bytes": kafka[k[retained]] - kafka[k[retained] - 1],
    })
    last_index = np.append(first_index[1:], len(a)) - 1
    batches = np.minimum(last_index - first_index + 1, KAFKA_BATCHES_TO_RETAIN)
    remove = pd.DataFrame({
        "ts": ts[last_index] + expiration_ms,
        "d_entries": -np.ones(len(first_index), dtype="int64"),
        "d_kafka_batches": -batches.astype("int64"),
        "d_kafka_bytes": -kafka[batches],
    })
    deltas = pd.concat([add, remove], ignore_index=True)
    deltas["window_start_ms"] = deltas["ts"] // window_ms * window_ms
    return deltas.groupby("window_start_ms")[[*DELTAS, "d_kafka_bytes"]].sum()


def aggregate_decisions(
    decisions: pd.DataFrame, window_ms: int, model: StateMemoryModel, expiration_ms: int
) -> pd.DataFrame:
    """One principal's decisions (pipeline.replay.replay_principal) -> AGGREGATE_SCHEMA rows: per
    setting, a row per window (counts and state deltas) and a TOTAL row (counts over the trace)."""
    if decisions.empty:
        return pd.DataFrame({c: [] for c in _COLUMNS})
    d = decisions.assign(
        is_new=decisions["pid_new"].fillna(False).astype(bool),
        rejected=decisions["pid_throttle_ms"] > 0,
        byte_throttled=decisions["byte_throttle_ms"] > 0,
        throttle=np.maximum(decisions["pid_throttle_ms"], decisions["byte_throttle_ms"]),
        window_start_ms=decisions["ts"] // window_ms * window_ms,
    )
    principal = d["principal"].iat[0]
    frames = []
    for setting, part in d.groupby("setting", sort=False):
        windows = _counts(part, ["window_start_ms"]).join(
            _state_deltas(part, window_ms, model, expiration_ms), how="outer"
        )
        windows = windows.fillna(0).reset_index()
        total = _counts(part, []).reset_index(drop=True)
        total["window_start_ms"] = TOTAL
        rows = pd.concat([windows, total], ignore_index=True)
        rows["setting"], rows["principal"] = setting, principal
        frames.append(rows)
    out = pd.concat(frames, ignore_index=True)
    for column in DELTAS:
        out[column] = out[column].fillna(0)
    out["d_kafka_bytes"] = out["d_kafka_bytes"].fillna(0.0).astype("float64")
    for column in ["window_start_ms", *COUNTS, *DELTAS]:
        out[column] = out[column].astype("int64")
    return out[_COLUMNS]


def whatif(
    events: DataFrame,
    settings: Sequence[QuotaSettings],
    window_ms: int,
    model: StateMemoryModel,
    expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS,
) -> DataFrame:
    """Replay every principal under every setting and aggregate, one applyInPandas task per principal."""
    settings = tuple(settings)

    def replay_and_aggregate(pdf):  # a plain function: Spark inspects its (absent) type hints
        return aggregate_decisions(replay_principal(pdf, settings), window_ms, model, expiration_ms)

    produce = events.where(F.col("api_key") == PRODUCE_KEY).select(*INPUT_COLUMNS)
    return produce.groupBy("principal").applyInPandas(replay_and_aggregate, schema=AGGREGATE_SCHEMA)


def windows_table(aggregates: DataFrame) -> DataFrame:
    """Per setting, principal and window in which the principal produced: the counts."""
    return aggregates.where((F.col("window_start_ms") != TOTAL) & (F.col("produce_events") > 0)).select(
        "setting", "principal", "window_start_ms", *COUNTS
    )


def totals_table(aggregates: DataFrame) -> DataFrame:
    return aggregates.where(F.col("window_start_ms") == TOTAL).select("setting", "principal", *COUNTS)


def state_table(aggregates: DataFrame, model: StateMemoryModel) -> DataFrame:
    """Per setting and window up to the last window with a produce event: `entries` (lean mode's
    count), `lean_bytes`, `kafka_batches` and `kafka_bytes` at the END of the window."""
    windows = aggregates.where(F.col("window_start_ms") != TOTAL)
    last = windows.where(F.col("produce_events") > 0).agg(F.max("window_start_ms")).first()[0]
    running = Window.partitionBy("setting").orderBy("window_start_ms").rowsBetween(Window.unboundedPreceding, 0)
    per_window = (
        windows.where(F.col("window_start_ms") <= F.lit(last if last is not None else TOTAL))
        .groupBy("setting", "window_start_ms")
        .agg(*[F.sum(c).alias(c) for c in (*DELTAS, "d_kafka_bytes")])
    )
    return per_window.select(
        "setting",
        "window_start_ms",
        F.sum("d_entries").over(running).alias("entries"),
        (F.sum("d_entries").over(running) * F.lit(model.lean)).alias("lean_bytes"),
        F.sum("d_kafka_batches").over(running).alias("kafka_batches"),
        F.sum("d_kafka_bytes").over(running).alias("kafka_bytes"),
    )
