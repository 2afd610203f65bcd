"""Synthetic audit traces (`scripts/gen_trace`): what a broker with `audit.enable=true` and no quotas
would record for a mixed population of clients, at any size, vectorised with numpy and pyarrow.

Per second of trace time (the trace lasts events / 657 seconds: 1M events ~ 25 min, 10M ~ 4.2 h):

* 10 well-behaved users (`User:svc-00` .. `svc-09`): 3 long-lived idempotent producers each (one
  producer id for the whole trace) sending about 4 batches a second each to topic `svc-NN-events`
  (6 partitions), and 2 consumers each fetching 3 partitions about twice a second: ~240 events/s.
* a crash-looping user (`User:etl-crashloop`): 8 instances, each crashing after an exponential
  lifetime of mean 8 s and restarting with a new producer id (InitProducerId, then ~2 batches a
  second): ~1 new producer id and ~17 events per second.
* a new-producer-per-batch user (`User:lambda-ingest`): 200 producers a second, each doing
  InitProducerId and sending a single batch 5-50 ms later: 200 new producer ids and 400 events/s.

Events carry every audit field (`minibroker.storage.audit_format`), `throttle_time_ms` 0 and `pid_new` null (no
quota was set), plus `seq`: the order the broker would have recorded them in.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa

from minibroker.storage.audit_format import AUDIT_FIELDS

__all__ = ["EVENTS_PER_SECOND", "generate", "write_trace"]

START_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z
WB_USERS = 10
WB_PRODUCERS = 3
WB_CONSUMERS = 2
WB_PARTITIONS = 6
CRASH_INSTANCES = 8
CRASH_MEAN_LIFE_S = 8.0
CRASH_BATCHES_PER_S = 2.0
PER_BATCH_PIDS_PER_S = 200.0
INGEST_PARTITIONS = 12
EVENTS_PER_SECOND = 240 + CRASH_INSTANCES / CRASH_MEAN_LIFE_S + CRASH_INSTANCES * CRASH_BATCHES_PER_S + 2 * PER_BATCH_PIDS_PER_S

_ARROW = {"long": pa.int64(), "int": pa.int32(), "string": pa.string(), "boolean": pa.bool_()}


def _dictionary(indices: np.ndarray, names: list) -> pa.DictionaryArray:
    return pa.DictionaryArray.from_arrays(pa.array(indices, pa.int32()), pa.array(names, pa.string()))


def generate(events: int, seed: int = 7, start_ms: int = START_MS) -> pa.Table:
    """A trace of exactly `events` events, sorted by time (`seq` = row number)."""
    if events < 10:
        raise ValueError("a trace needs at least 10 events")
    rng = np.random.default_rng(seed)
    duration_s = events / EVENTS_PER_SECOND
    duration_ms = max(1, int(duration_s * 1000))

    # Names: one table for every string column, indices into it.
    wb_users = [f"svc-{u:02d}" for u in range(WB_USERS)]
    names = (
        [f"User:{u}" for u in wb_users] + ["User:etl-crashloop", "User:lambda-ingest"]
        + [f"{u}-producer-{k}" for u in wb_users for k in range(WB_PRODUCERS)]
        + [f"{u}-consumer-{k}" for u in wb_users for k in range(WB_CONSUMERS)]
        + [f"etl-worker-{i}" for i in range(CRASH_INSTANCES)] + ["lambda-ingest"]
        + [f"{u}-events" for u in wb_users] + ["etl-output", "ingest"]
    )
    at = {name: i for i, name in enumerate(names)}
    principal_wb = np.array([at[f"User:{u}"] for u in wb_users])
    producer_client = np.array([[at[f"{u}-producer-{k}"] for k in range(WB_PRODUCERS)] for u in wb_users])
    consumer_client = np.array([[at[f"{u}-consumer-{k}"] for k in range(WB_CONSUMERS)] for u in wb_users])
    topic_wb = np.array([at[f"{u}-events"] for u in wb_users])

    parts: list[dict[str, np.ndarray]] = []

    def part(ts, principal, client, api, topic, partition, nbytes, records, pid, epoch):
        n = len(ts)
        parts.append({
            "ts": ts.astype(np.int64), "principal": np.broadcast_to(principal, n).astype(np.int32),
            "client_id": np.broadcast_to(client, n).astype(np.int32), "api": np.full(n, api, np.int8),
            "topic": np.broadcast_to(topic, n).astype(np.int32),
            "partition": np.broadcast_to(partition, n).astype(np.int32),
            "bytes": np.broadcast_to(nbytes, n).astype(np.int64),
            "records": np.broadcast_to(records, n).astype(np.int32),
            "producer_id": np.broadcast_to(pid, n).astype(np.int64),
            "producer_epoch": np.broadcast_to(epoch, n).astype(np.int32),
        })

    def batch_sizes(n):
        size = np.clip(rng.lognormal(9.0, 0.8, n), 200, 900_000).astype(np.int64)
        return size, np.maximum(1, size // 180)

    # New-producer-per-batch user: a producer id per batch.
    n_lambda = int(duration_s * PER_BATCH_PIDS_PER_S)
    t0 = rng.integers(0, duration_ms, n_lambda)
    pids = 1_000_000 + np.argsort(np.argsort(t0, kind="stable"), kind="stable")  # handed out in time order
    size, records = batch_sizes(n_lambda)
    lambda_p, lambda_c = at["User:lambda-ingest"], at["lambda-ingest"]
    part(t0, lambda_p, lambda_c, 2, -1, -1, 0, 0, pids, 0)
    part(t0 + rng.integers(5, 51, n_lambda), lambda_p, lambda_c, 0, at["ingest"],
         rng.integers(0, INGEST_PARTITIONS, n_lambda), size, records, pids, 0)

    # Crash-looping user: lives of exponential length, a new producer id per life.
    next_pid = 100_000
    for instance in range(CRASH_INSTANCES):
        lives = rng.exponential(CRASH_MEAN_LIFE_S * 1000, int(duration_s / CRASH_MEAN_LIFE_S * 3) + 10)
        starts = np.concatenate([[0], np.cumsum(lives)]).astype(np.int64)
        starts = starts[starts < duration_ms]
        life_pids = next_pid + np.arange(len(starts))
        next_pid += len(starts)
        client = at[f"etl-worker-{instance}"]
        part(starts, at["User:etl-crashloop"], client, 2, -1, -1, 0, 0, life_pids, 0)
        n = rng.poisson(duration_s * CRASH_BATCHES_PER_S)
        ts = np.sort(rng.integers(0, duration_ms, n))
        life = np.searchsorted(starts, ts, side="right") - 1
        ts = np.maximum(ts, starts[life] + 5)  # a batch comes after its producer's InitProducerId
        size, records = batch_sizes(n)
        part(ts, at["User:etl-crashloop"], client, 0, at["etl-output"], rng.integers(0, 4, n),
             size, records, life_pids[life], 0)

    # Well-behaved users fill the rest: half produce, half fetch.
    remaining = events - sum(len(p["ts"]) for p in parts)
    if remaining < 0:
        raise ValueError("too few events for this mix")
    n_produce = remaining // 2
    n_fetch = remaining - n_produce
    user = rng.integers(0, WB_USERS, n_produce)
    producer = rng.integers(0, WB_PRODUCERS, n_produce)
    size, records = batch_sizes(n_produce)
    part(rng.integers(0, duration_ms, n_produce), principal_wb[user], producer_client[user, producer], 0,
         topic_wb[user], rng.integers(0, WB_PARTITIONS, n_produce), size, records,
         1000 + user * WB_PRODUCERS + producer, 0)
    user = rng.integers(0, WB_USERS, n_fetch)
    consumer = rng.integers(0, WB_CONSUMERS, n_fetch)
    size, records = batch_sizes(n_fetch)
    empty = rng.random(n_fetch) < 0.3  # some fetches return nothing
    part(rng.integers(0, duration_ms, n_fetch), principal_wb[user], consumer_client[user, consumer], 1,
         topic_wb[user], rng.integers(0, WB_PARTITIONS, n_fetch), np.where(empty, 0, size),
         np.where(empty, 0, records), -1, -1)

    columns = {key: np.concatenate([p[key] for p in parts]) for key in parts[0]}
    order = np.argsort(columns["ts"], kind="stable")
    columns = {key: value[order] for key, value in columns.items()}
    n = len(order)
    api = columns["api"]
    api_names = np.array(["Produce", "Fetch", "InitProducerId"], dtype=object)
    data = {
        "ts": columns["ts"] + start_ms,
        "principal": _dictionary(columns["principal"], names),
        "client_id": _dictionary(columns["client_id"], names),
        "listener": _dictionary(np.zeros(n, np.int32), ["PLAINTEXT"]),
        "api": _dictionary(api.astype(np.int32), list(api_names)),
        "api_key": np.array([0, 1, 22], np.int32)[api],
        "api_version": np.array([11, 16, 5], np.int32)[api],
        "topic": pa.DictionaryArray.from_arrays(
            pa.array(columns["topic"], pa.int32(), mask=columns["topic"] < 0), pa.array(names, pa.string())
        ),
        "partition": columns["partition"],
        "bytes": columns["bytes"],
        "records": columns["records"],
        "producer_id": columns["producer_id"],
        "producer_epoch": columns["producer_epoch"],
        "error_code": np.zeros(n, np.int32),
        "throttle_time_ms": np.zeros(n, np.int32),
        "throttle_quota": _dictionary(np.zeros(n, np.int32), [""]),
        "pid_new": pa.nulls(n, pa.bool_()),
        "seq": np.arange(n, dtype=np.int64),
    }
    arrays = []
    fields = []
    for name, kind, nullable in (*AUDIT_FIELDS, ("seq", "long", False)):
        value = data[name]
        array = value if isinstance(value, pa.Array) else pa.array(value, _ARROW[kind])
        arrays.append(array)
        fields.append(pa.field(name, array.type, nullable))
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields))


def write_trace(table: pa.Table, out: str | Path) -> Path:
    """Parquet for *.parquet, JSON lines (one event object per line) for *.jsonl / *.json."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    name = out.name.lower()
    if name.endswith(".parquet"):
        import pyarrow.parquet as pq

        pq.write_table(table, out, row_group_size=250_000, compression="zstd")  # readers split by row group
    elif name.endswith((".jsonl", ".json", ".ndjson")):
        with open(out, "w", encoding="utf-8") as file:
            for start in range(0, table.num_rows, 500_000):
                text = table.slice(start, 500_000).to_pandas().to_json(orient="records", lines=True)
                file.write(text if text.endswith("\n") else text + "\n")
    else:
        raise ValueError(f"{out}: name it *.parquet or *.jsonl")
    return out


def main(argv: list[str] | None = None) -> int:
    import argparse
    import time

    parser = argparse.ArgumentParser(prog="scripts/gen_trace", description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000, help="how many events (default 1,000,000)")
    parser.add_argument("--out", default="trace.parquet", help="*.parquet or *.jsonl (default trace.parquet)")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    started = time.perf_counter()
    table = generate(args.events, seed=args.seed)
    generated = time.perf_counter() - started
    path = write_trace(table, args.out)
    span_s = (table.column("ts")[-1].as_py() - table.column("ts")[0].as_py()) / 1000
    print(f"{table.num_rows:,} events over {span_s / 60:,.1f} min -> {path} "
          f"({path.stat().st_size / 1e6:,.1f} MB; generated in {generated:.1f} s, "
          f"written in {time.perf_counter() - started - generated:.1f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
