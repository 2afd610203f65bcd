"""What each setting would have done: the replay (minibroker.pipeline.replay) run in parallel across users AND
settings, hot users split by time with the quota state carried over, and aggregated inside the tasks
(numpy), so the per-event decisions (events x settings rows) never become a Spark table.

Per setting, user and report window, and per setting and user over the whole audit (TOTAL rows):

* `produce_events` (partition batches), `produce_requests` (a request = one client id at one `ts`),
  `new_pid_events` / `new_pids` (batches / distinct PIDs the quota saw as new), `pid_rejected_batches`
  / `pid_throttled_pids`, `byte_throttled_events`, `throttled_requests` and `max_throttle_ms` /
  `sum_throttle_ms` (a request's throttle is the largest of its batches'); `mismatched_events` (TOTAL
  rows of "the broker's quotas": events whose replayed producer-id decision differs from the one the
  broker recorded, 0 when the replay reproduces the broker);
* producer-state deltas: `d_entries`, `d_kafka_batches`, `d_kafka_bytes`: how the user's producer
  state changes in that window. An entry (a producer id on a partition, lean mode's unit) lives from
  its first appended batch until `expiration_ms` after its last (producer.id.expiration.ms; the
  broker's periodic check may keep it up to one check interval longer); a producer id back after a
  longer silence starts a new entry. Kafka mode retains up to 5 batches per entry, costed with the
  `StateMemoryModel`; PIDs the quota rejects are never appended and hold no state.

How the work is cut (`whatif`). The tasks are (user, chunk) x setting: the Produce events are
shuffled ONCE into one Spark partition per (user, chunk) group (Spark's own hash picks each group's
partition exactly, see `_partition_keys`), sorted and cached; then each setting runs a narrow
`mapInArrow` over that cache, so S settings make S x groups tasks without copying any row per
setting. A user is cut into chunks only when it alone would hold more than a fair share of the
work (`plan_chunks`), at report-window boundaries (a window is never split). Chunk k > 0 needs the
state the replay had at its start: one task per (hot user, setting) first runs the decisions alone
over the earlier chunks (the cheap part: no aggregation) and hands each chunk its carry
(`ChunkCarry`): the pickled `UserReplay` (quota managers, producer-state model, place in the quota
record), the PIDs already counted as new or throttled, and the open producer-state sessions, each
kept only for what appears again later. So a chunk's decisions and aggregates are exactly those of
one pass over the whole history (tests/pipeline/test_pipeline_model.py checks it on random cuts).

`state_table` adds the deltas of all users per window and accumulates them: the state the whole
broker would hold at the end of each window.
"""

from __future__ import annotations

import math
import pickle
from dataclasses import dataclass, field
from typing import Iterator, Sequence

import numpy as np
import pandas as pd
from pyspark import StorageLevel
from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from minibroker.pipeline.model import KAFKA_BATCHES_TO_RETAIN, StateMemoryModel
from minibroker.pipeline.replay import INPUT_COLUMNS, PRODUCE_KEY, Decisions, QuotaSettings, UserEvents, UserReplay
from minibroker.pipeline.timeline import DEFAULT_PRODUCER_ID_EXPIRATION_MS, QuotaTimeline
from minibroker.storage.audit_format import user_of

__all__ = [
    "AGGREGATE_SCHEMA",
    "ChunkCarry",
    "DEFAULT_PRODUCER_ID_EXPIRATION_MS",
    "TOTAL",
    "aggregate",
    "plan_chunks",
    "replay_chunks",
    "state_table",
    "totals_table",
    "whatif",
    "windows_table",
]

TOTAL = -1  # window_start_ms of the whole-audit rows
MIN_CHUNK_EVENTS = 100_000
MAX_GROUPS = 256  # more (user, chunk) groups than this are packed into this many partitions

COUNTS = [
    "produce_events", "produce_requests", "new_pid_events", "new_pids", "pid_rejected_batches",
    "pid_throttled_pids", "byte_throttled_events", "throttled_requests", "max_throttle_ms", "sum_throttle_ms",
]
DELTAS = ["d_entries", "d_kafka_batches"]
AGGREGATE_SCHEMA = (
    "setting string, principal string, window_start_ms long, "
    + ", ".join(f"{c} long" for c in COUNTS + DELTAS)
    + ", d_kafka_bytes double, mismatched_events long"
)
_COLUMNS = ["setting", "principal", "window_start_ms", *COUNTS, *DELTAS, "d_kafka_bytes", "mismatched_events"]

EntryKey = tuple[str, int, int]  # (topic, partition, producer id)


@dataclass
class ChunkCarry:
    """What chunk k of a user needs from chunks 0..k-1 (see the module docstring). `future_*`: what
    appears again after chunk k (so chunk k keeps an entry open instead of closing it)."""

    replay: UserReplay | None = None
    counted_new: set[int] = field(default_factory=set)
    counted_rejected: set[int] = field(default_factory=set)
    sessions: dict[EntryKey, tuple[int, int]] = field(default_factory=dict)  # entry -> (last ts, batches)
    future_pids: set[int] = field(default_factory=set)
    future_entries: set[EntryKey] = field(default_factory=set)


# -- aggregation of one chunk ----------------------------------------------------------------------


def _distinct_per_group(groups: np.ndarray, values: np.ndarray, ngroups: int) -> np.ndarray:
    if not len(groups):
        return np.zeros(ngroups, dtype=np.int64)
    order = np.lexsort((values, groups))
    g, v = groups[order], values[order]
    first = np.ones(len(g), dtype=bool)
    first[1:] = (g[1:] != g[:-1]) | (v[1:] != v[:-1])
    return np.bincount(g[first], minlength=ngroups)


def _sessions(ev: UserEvents, d: Decisions, carry: ChunkCarry | None, expiration_ms: int):
    """The producer-state sessions of the appended batches (and of the entries carried in, as a
    pseudo batch at their last ts): arrays in entry-then-time order, and per row k (its 1-based
    place in its session)."""
    a = np.flatnonzero(d.appended & (ev.pid >= 0))
    topics = list(ev.topics)
    code = {name: i for i, name in enumerate(topics)}
    t_code, part, pid, ts, seq = ev.topic[a], ev.partition[a], ev.pid[a], ev.ts[a], ev.seq[a]
    pseudo = np.zeros(len(a), dtype=bool)
    k0 = np.zeros(len(a), dtype=np.int64)
    if carry is not None and carry.sessions:
        items = list(carry.sessions.items())
        extra_t = []
        for (topic, _, _), _ in items:
            if topic not in code:
                code[topic] = len(topics)
                topics.append(topic)
            extra_t.append(code[topic])
        t_code = np.concatenate([t_code, np.array(extra_t, dtype=np.int32)])
        part = np.concatenate([part, np.array([k[1] for k, _ in items], dtype=np.int32)])
        pid = np.concatenate([pid, np.array([k[2] for k, _ in items], dtype=np.int64)])
        ts = np.concatenate([ts, np.array([v[0] for _, v in items], dtype=np.int64)])
        seq = np.concatenate([seq, np.full(len(items), -1, dtype=np.int64)])
        pseudo = np.concatenate([pseudo, np.ones(len(items), dtype=bool)])
        k0 = np.concatenate([k0, np.array([v[1] for _, v in items], dtype=np.int64)])
    order = np.lexsort((seq, ts, pid, part, t_code))
    t_code, part, pid, ts, pseudo, k0 = t_code[order], part[order], pid[order], ts[order], pseudo[order], k0[order]
    m = len(ts)
    same = np.zeros(m, dtype=bool)
    if m:
        same[1:] = (t_code[1:] == t_code[:-1]) & (part[1:] == part[:-1]) & (pid[1:] == pid[:-1])
    gap = np.diff(ts, prepend=ts[:1]) if m else ts
    starts = ~same | (gap >= expiration_ms)
    session = np.cumsum(starts) - 1
    first = np.flatnonzero(starts)
    base = np.where(pseudo[first], k0[first] - 1, 0)
    k = np.arange(m) - first[session] + 1 + base[session] if m else np.zeros(0, dtype=np.int64)
    last = np.append(first[1:], m) - 1 if m else first
    # the entry's last session: the next session belongs to another entry (or there is none)
    entry_last = np.ones(len(last), dtype=bool)
    if len(last) > 1:
        nxt = first[1:]
        entry_last[:-1] = ~same[nxt]
    return topics, t_code, part, pid, ts, pseudo, k, first, last, entry_last


def _entry_keys(topics, t_code, part, pid, rows) -> list[EntryKey]:
    return [(topics[t_code[i]], int(part[i]), int(pid[i])) for i in rows]


def aggregate(ev: UserEvents, d: Decisions, *, setting: str, window_ms: int, model: StateMemoryModel,
              expiration_ms: int, carry: ChunkCarry | None = None, compare: bool = False) -> pd.DataFrame:
    """One user's decisions for one chunk (or its whole history) -> AGGREGATE_SCHEMA rows: a row
    per window (counts and state deltas) and a TOTAL row (counts over the chunk, to be added up with
    the other chunks' by `totals_table`). `compare`: count events whose producer-id decision differs
    from the broker's (for the setting that replays the broker's own quotas)."""
    n = len(ev)
    is_new = d.pid_new == 1
    rejected = d.pid_throttle_ms > 0
    throttle = np.maximum(d.pid_throttle_ms, d.byte_throttle_ms).astype(np.int64)
    win = ev.ts // window_ms * window_ms
    windows, widx = np.unique(win, return_inverse=True)
    nw = len(windows)
    counts = {
        "produce_events": np.bincount(widx, minlength=nw),
        "new_pid_events": np.bincount(widx, weights=is_new, minlength=nw),
        "pid_rejected_batches": np.bincount(widx, weights=rejected, minlength=nw),
        "byte_throttled_events": np.bincount(widx, weights=d.byte_throttle_ms > 0, minlength=nw),
        "new_pids": _distinct_per_group(widx[is_new], ev.pid[is_new], nw),
        "pid_throttled_pids": _distinct_per_group(widx[rejected], ev.pid[rejected], nw),
    }
    # Requests: one client id at one ts; its throttle is the largest of its batches'.
    order = np.lexsort((ev.client, ev.ts))
    ts_o, c_o = ev.ts[order], ev.client[order]
    first = np.ones(n, dtype=bool)
    if n:
        first[1:] = (ts_o[1:] != ts_o[:-1]) | (c_o[1:] != c_o[:-1])
    starts = np.flatnonzero(first)
    req_throttle = np.maximum.reduceat(throttle[order], starts) if n else throttle
    req_window = widx[order][starts]
    counts["produce_requests"] = np.bincount(req_window, minlength=nw)
    counts["throttled_requests"] = np.bincount(req_window, weights=req_throttle > 0, minlength=nw)
    max_throttle = np.zeros(nw, dtype=np.int64)
    np.maximum.at(max_throttle, req_window, req_throttle)
    counts["max_throttle_ms"] = max_throttle
    counts["sum_throttle_ms"] = np.bincount(req_window, weights=req_throttle, minlength=nw)
    rows = pd.DataFrame({"window_start_ms": windows.astype(np.int64),
                         **{c: np.asarray(counts[c]).astype(np.int64) for c in COUNTS}})

    # The TOTAL row: distinct PIDs not already counted by an earlier chunk.
    counted_new = carry.counted_new if carry is not None else set()
    counted_rejected = carry.counted_rejected if carry is not None else set()
    total = {c: int(rows[c].sum()) for c in COUNTS}
    total["new_pids"] = len(set(ev.pid[is_new].tolist()) - counted_new)
    total["pid_throttled_pids"] = len(set(ev.pid[rejected].tolist()) - counted_rejected)
    total["max_throttle_ms"] = int(rows["max_throttle_ms"].max()) if nw else 0
    mismatched = 0
    if compare:
        mismatched = int(((ev.audit_pid_new != d.pid_new) | (ev.audit_pid_rejected != rejected)).sum())

    deltas = _state_deltas(ev, d, window_ms, model, expiration_ms, carry)
    rows = rows.merge(deltas, on="window_start_ms", how="outer")
    rows = pd.concat([rows, pd.DataFrame([{**total, "window_start_ms": TOTAL}])], ignore_index=True)
    rows[COUNTS + DELTAS] = rows[COUNTS + DELTAS].fillna(0)
    rows["d_kafka_bytes"] = rows["d_kafka_bytes"].fillna(0.0).astype("float64")
    for column in ["window_start_ms", *COUNTS, *DELTAS]:
        rows[column] = rows[column].astype("int64")
    rows["mismatched_events"] = np.where(rows["window_start_ms"] == TOTAL, mismatched, 0).astype("int64")
    rows["setting"], rows["principal"] = setting, ev.principal
    return rows[_COLUMNS]


def _state_deltas(ev: UserEvents, d: Decisions, window_ms: int, model: StateMemoryModel, expiration_ms: int,
                  carry: ChunkCarry | None) -> pd.DataFrame:
    """Producer-state deltas per window from the appended batches with a producer id; sessions
    carried in continue, and an entry that appears again later is left open (its next chunk closes it)."""
    topics, t_code, part, pid, ts, pseudo, k, first, last, entry_last = _sessions(ev, d, carry, expiration_ms)
    kafka = np.asarray(model.kafka)
    real = ~pseudo
    added = real & (k <= KAFKA_BATCHES_TO_RETAIN)
    kk = k[added]
    add = pd.DataFrame({
        "ts": ts[added],
        "d_entries": (kk == 1).astype("int64"),
        "d_kafka_batches": np.ones(len(kk), dtype="int64"),
        "d_kafka_bytes": kafka[kk] - kafka[kk - 1],
    })
    closes = np.ones(len(last), dtype=bool)
    future = carry.future_entries if carry is not None else set()
    if future and len(last):
        open_rows = [i for i, key in zip(range(len(last)), _entry_keys(topics, t_code, part, pid, last))
                     if entry_last[i] and key in future]
        closes[open_rows] = False
    ends = last[closes]
    batches = np.minimum(k[ends], KAFKA_BATCHES_TO_RETAIN)
    remove = pd.DataFrame({
        "ts": ts[ends] + expiration_ms,
        "d_entries": -np.ones(len(ends), dtype="int64"),
        "d_kafka_batches": -batches.astype("int64"),
        "d_kafka_bytes": -kafka[batches],
    })
    deltas = pd.concat([add, remove], ignore_index=True)
    if deltas.empty:
        return pd.DataFrame({"window_start_ms": pd.Series(dtype="int64"), "d_entries": pd.Series(dtype="int64"),
                             "d_kafka_batches": pd.Series(dtype="int64"), "d_kafka_bytes": pd.Series(dtype="float64")})
    deltas["window_start_ms"] = deltas["ts"] // window_ms * window_ms
    return deltas.groupby("window_start_ms", as_index=False)[[*DELTAS, "d_kafka_bytes"]].sum()


def next_carry(ev: UserEvents, d: Decisions, carry: ChunkCarry, replay: UserReplay, future_pids: set[int],
               expiration_ms: int) -> ChunkCarry:
    """The carry for the chunk after `ev` (whose decisions are `d`, made by `replay` from `carry`),
    keeping only what appears again after it (`carry.future_*`). Prunes `replay`'s producer-state
    model the same way; the caller snapshots it."""
    future_entries = carry.future_entries
    is_new = d.pid_new == 1
    rejected = d.pid_throttle_ms > 0
    topics, t_code, part, pid, ts, pseudo, k, first, last, entry_last = _sessions(ev, d, carry, expiration_ms)
    sessions = {}
    for i, key in zip(last[entry_last], _entry_keys(topics, t_code, part, pid, last[entry_last])):
        if key in future_entries:
            sessions[key] = (int(ts[i]), int(k[i]))
    replay.keep_only(future_pids)
    return ChunkCarry(
        counted_new=(carry.counted_new | set(ev.pid[is_new].tolist())) & future_pids,
        counted_rejected=(carry.counted_rejected | set(ev.pid[rejected].tolist())) & future_pids,
        sessions=sessions,
    )


def _spans(keys: list[np.ndarray], chunk_of: np.ndarray) -> list[tuple[tuple, int, int]]:
    """(key, first chunk, last chunk) of each key (a tuple of the `keys` columns) found in more than
    one chunk."""
    if not len(chunk_of):
        return []
    order = np.lexsort((chunk_of, *reversed(keys)))
    sorted_keys = [k[order] for k in keys]
    chunks = chunk_of[order]
    starts = np.ones(len(order), dtype=bool)
    starts[1:] = np.any([k[1:] != k[:-1] for k in sorted_keys], axis=0)
    first = np.flatnonzero(starts)
    last = np.append(first[1:], len(order)) - 1
    spanning = chunks[first] != chunks[last]
    return [(tuple(int(k[i]) for k in sorted_keys), int(chunks[i]), int(chunks[j]))
            for i, j in zip(first[spanning], last[spanning])]


def replay_chunks(ev: UserEvents, chunk_of: np.ndarray, setting: QuotaSettings, timeline: QuotaTimeline,
                  expiration_ms: int) -> list[ChunkCarry]:
    """The carry for each chunk of one user's whole history (`chunk_of`: each event's chunk, 0..K-1,
    non-decreasing): the decisions alone over chunks 0..K-2 (phase A of `whatif`)."""
    chunks = int(chunk_of.max()) + 1 if len(chunk_of) else 1
    bounds = np.searchsorted(chunk_of, np.arange(chunks + 1), side="left")
    # What chunk k must carry on: the PIDs and entries seen up to k that appear again after it (a
    # long-lived producer; not the millions a new-producer-per-batch user opens and never reuses).
    future_pids: list[set[int]] = [set() for _ in range(chunks)]
    future_entries: list[set[EntryKey]] = [set() for _ in range(chunks)]
    with_pid = ev.pid >= 0
    pids, chunk_p = ev.pid[with_pid], chunk_of[with_pid]
    for (pid,), first, last in _spans([pids], chunk_p):
        for c in range(first, last):
            future_pids[c].add(pid)
    for (topic, partition, pid), first, last in _spans([ev.topic[with_pid], ev.partition[with_pid], pids], chunk_p):
        for c in range(first, last):
            future_entries[c].add((ev.topics[topic] if topic >= 0 else "", partition, pid))
    user = user_of(ev.principal)
    replay = UserReplay(user, setting, timeline.for_user(user), timeline.first_windows())
    carries: list[ChunkCarry] = []
    carry = ChunkCarry()  # chunk 0 starts fresh
    for c in range(chunks):
        carry.future_pids, carry.future_entries = future_pids[c], future_entries[c]
        carries.append(carry)
        if c == chunks - 1:
            break
        part = ev.slice(bounds[c], bounds[c + 1])
        decisions = replay.run(part)
        carry = next_carry(part, decisions, carry, replay, future_pids[c], expiration_ms)
        carry.replay = pickle.loads(pickle.dumps(replay))  # a snapshot: `replay` runs on
    return carries


def run_chunk(ev: UserEvents, setting: QuotaSettings, timeline: QuotaTimeline, carry: ChunkCarry | None, *,
              window_ms: int, model: StateMemoryModel, expiration_ms: int) -> pd.DataFrame:
    """Replay and aggregate one chunk (the whole history when `carry` is None)."""
    replay = carry.replay if carry is not None and carry.replay is not None else None
    if replay is None:
        user = user_of(ev.principal)
        replay = UserReplay(user, setting, timeline.for_user(user), timeline.first_windows())
    decisions = replay.run(ev)
    return aggregate(ev, decisions, setting=setting.name, window_ms=window_ms, model=model,
                     expiration_ms=expiration_ms, carry=carry, compare=setting.recorded)


# -- Spark: planning and running --------------------------------------------------------------------


def plan_chunks(user_counts: dict[str, int], settings: int, parallelism: int,
                chunk_events: int | None = None) -> dict[str, int]:
    """How many chunks each user's events are cut into: more than one only for a user holding more
    than a fair share of the work (each (user, setting) task costs about its event count; a task
    larger than half a core's share of S x N would leave cores idle at the end)."""
    total = sum(user_counts.values())
    if chunk_events is None:
        chunk_events = max(MIN_CHUNK_EVENTS, math.ceil(settings * total / (2 * max(1, parallelism))))
    return {user: max(1, math.ceil(n / chunk_events)) for user, n in user_counts.items()}


def _window_boundaries(histogram: list[tuple[int, int]], chunks: int) -> list[int]:
    """Cut points (window starts) splitting these (window start, events) into `chunks` nearly equal
    parts."""
    histogram = sorted(histogram)
    total = sum(c for _, c in histogram)
    bounds, running, next_cut = [], 0, 1
    for window, count in histogram:
        if next_cut < chunks and running >= total * next_cut / chunks and running > 0:
            bounds.append(window)
            next_cut += 1
        running += count
    return bounds


def _partition_keys(spark, partitions: int) -> list[int]:
    """For each partition index i, a long x with pmod(hash(x), partitions) == i: Spark's own hash
    partitioning (HashPartitioning is pmod(murmur3(x, 42), n), the SQL `hash`), so `repartition(n,
    key)` puts each (user, chunk) group in its own partition, no collision."""
    found: dict[int, int] = {}
    limit = 16 * partitions
    while len(found) < partitions:
        rows = spark.range(limit).select("id", F.expr(f"pmod(hash(id), {partitions})").alias("p")).collect()
        for row in rows:
            found.setdefault(row.p, row.id)
        limit *= 4
    return [found[i] for i in range(partitions)]


def _pack(groups: list[tuple[tuple[str, int], int]], bins: int) -> dict[tuple[str, int], int]:
    """Largest first into the least loaded bin (LPT)."""
    loads = [0] * bins
    out = {}
    for key, size in sorted(groups, key=lambda g: -g[1]):
        i = min(range(bins), key=loads.__getitem__)
        out[key] = i
        loads[i] += size
    return out


def _events_from_arrow(table) -> UserEvents:
    """A (user, chunk) group's rows (INPUT_COLUMNS, sorted by ts, seq) as UserEvents."""
    import pyarrow as pa
    import pyarrow.compute as pc

    def codes(column):
        encoded = table[column].combine_chunks().dictionary_encode()
        indices = encoded.indices.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int32)
        return [str(x) for x in encoded.dictionary.to_pylist()], indices

    def numbers(column, dtype, null=0):
        return table[column].fill_null(null).to_numpy().astype(dtype)

    quota = table["throttle_quota"].fill_null("")
    error = numbers("error_code", np.int64)
    clients, client = codes("client_id")
    topics, topic = codes("topic")
    pid_new = table["pid_new"]
    audit_new = pc.if_else(pc.is_null(pid_new), pa.scalar(-1, pa.int8()), pc.cast(pid_new.fill_null(False), pa.int8()))
    from minibroker.storage.audit_format import HELD_BY_PID_QUOTA, REFUSED_BEFORE_PID_QUOTA

    held = pc.equal(quota, HELD_BY_PID_QUOTA).to_numpy(zero_copy_only=False)
    own = pc.equal(quota, "producer_ids_rate").to_numpy(zero_copy_only=False)
    return UserEvents(
        principal=str(table["principal"][0]),
        ts=numbers("ts", np.int64), seq=numbers("seq", np.int64), pid=numbers("producer_id", np.int64, -1),
        trackable=~np.isin(error, list(REFUSED_BEFORE_PID_QUOTA)) & ~held,
        appendable=(error == 0) | own,
        nbytes=numbers("bytes", np.int64), client=client, clients=clients, topic=topic, topics=topics,
        partition=numbers("partition", np.int32, -1),
        audit_pid_new=audit_new.to_numpy(zero_copy_only=False).astype(np.int8),
        audit_pid_rejected=own,
    )


def _groups(table, keys: tuple[str, ...]) -> Iterator[tuple[tuple, object]]:
    """The groups of a table sorted by `keys`: (key values, the group's rows)."""
    import pyarrow.compute as pc

    n = table.num_rows
    if n == 0:
        return
    change = np.zeros(n - 1, dtype=bool)  # change[i]: row i + 1 starts a group
    for key in keys:
        column = table[key].combine_chunks()
        after, before = column.slice(1), column.slice(0, n - 1)
        # Values that differ, or a null beside a value (not_equal alone leaves those null).
        differs = pc.coalesce(pc.not_equal(after, before), pc.not_equal(pc.is_null(after), pc.is_null(before)))
        change |= differs.to_numpy(zero_copy_only=False)
    starts = [0, *(np.flatnonzero(change) + 1).tolist()]
    for start, stop in zip(starts, [*starts[1:], n]):
        yield tuple(table[key][start].as_py() for key in keys), table.slice(start, stop - start)


def _concat(batches):
    import pyarrow as pa

    tables = [pa.Table.from_batches([b]) for b in batches if b.num_rows]
    return pa.concat_tables(tables) if tables else None


def _phase_a(index: int, setting: QuotaSettings, timeline: QuotaTimeline, expiration_ms: int):
    """The task of phase A for one setting: each hot user's whole history (its partition, sorted by
    principal, ts, seq) -> the carry of each of its chunks."""

    def run(batches):
        import pyarrow as pa

        table = _concat(batches)
        if table is None:
            return
        for _, part in _groups(table, ("principal",)):
            ev = _events_from_arrow(part)
            out = replay_chunks(ev, part["chunk"].to_numpy(), setting, timeline, expiration_ms)
            yield pa.RecordBatch.from_pydict({
                "setting": pa.array([index] * len(out), pa.int32()),
                "principal": pa.array([ev.principal] * len(out), pa.string()),
                "chunk": pa.array(range(len(out)), pa.int32()),
                "carry": pa.array([pickle.dumps(c) for c in out], pa.binary()),
            })

    return run


def _phase_b(setting: QuotaSettings, carries: dict, timeline: QuotaTimeline, window_ms: int, model: StateMemoryModel,
             expiration_ms: int):
    """The task of phase B for one setting: every (user, chunk) group of a partition -> aggregates."""

    def run(batches):
        import pyarrow as pa

        table = _concat(batches)
        if table is None:
            return
        for (principal, chunk_no), part in _groups(table, ("principal", "chunk")):
            blob = carries.get((principal, chunk_no))
            carry = pickle.loads(blob) if blob is not None else None
            rows = run_chunk(_events_from_arrow(part), setting, timeline, carry, window_ms=window_ms, model=model,
                             expiration_ms=expiration_ms)
            yield from pa.Table.from_pandas(rows, preserve_index=False).to_batches()

    return run


def whatif(
    events: DataFrame,
    settings: Sequence[QuotaSettings],
    window_ms: int,
    model: StateMemoryModel,
    expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS,
    timeline: QuotaTimeline | None = None,
    *,
    parallelism: int | None = None,
    chunk_events: int | None = None,
    plan: dict | None = None,
    user_counts: dict[str, int] | None = None,
) -> DataFrame:
    """Replay every (user, setting) and aggregate (AGGREGATE_SCHEMA), as described in the module
    docstring. `chunk_events` forces the chunk size (tests); `plan`, if given, receives what was
    decided (groups, chunks, partitions, carries); `user_counts`: each principal's Produce events,
    when the caller has them already (else counted here)."""
    settings = tuple(settings)
    timeline = timeline or QuotaTimeline()
    spark = events.sparkSession
    parallelism = parallelism or spark.sparkContext.defaultParallelism
    produce = events.where(F.col("api_key") == PRODUCE_KEY).select(*INPUT_COLUMNS)
    if user_counts is None:
        user_counts = {r.principal: r["count"] for r in produce.groupBy("principal").count().collect()}
    user_counts = {u: n for u, n in user_counts.items() if n}
    chunks = plan_chunks(user_counts, len(settings), parallelism, chunk_events)
    hot = sorted(u for u, k in chunks.items() if k > 1)
    chunk = F.lit(0)
    bounds: dict[str, list[int]] = {}
    if hot:
        histogram: dict[str, list[tuple[int, int]]] = {u: [] for u in hot}
        windowed = produce.where(F.col("principal").isin(hot)).withColumn(
            "w", (F.floor(F.col("ts") / window_ms) * window_ms).cast("long"))
        for row in windowed.groupBy("principal", "w").count().collect():
            histogram[row.principal].append((row.w, row["count"]))
        for user in hot:
            bounds[user] = _window_boundaries(histogram[user], chunks[user])
        cases = F.lit(0)
        for user in hot:
            expr = sum((F.col("ts") >= F.lit(b)).cast("int") for b in bounds[user]) if bounds[user] else F.lit(0)
            cases = F.when(F.col("principal") == user, expr).otherwise(cases)
        chunk = cases
    produce = produce.withColumn("chunk", chunk.cast("int"))
    group_sizes: dict[tuple[str, int], int] = {}
    if hot:
        for row in produce.where(F.col("principal").isin(hot)).groupBy("principal", "chunk").count().collect():
            group_sizes[(row.principal, row.chunk)] = row["count"]
    for user, n in user_counts.items():
        if user not in bounds:
            group_sizes[(user, 0)] = n
    if not group_sizes:
        return spark.createDataFrame([], AGGREGATE_SCHEMA)
    partitions = min(len(group_sizes), MAX_GROUPS)
    where = _pack(list(group_sizes.items()), partitions)
    keys = _partition_keys(spark, partitions)
    mapping = spark.createDataFrame([(u, c, keys[p]) for (u, c), p in where.items()],
                                    "principal string, chunk int, part_key long")
    parted = (
        produce.join(F.broadcast(mapping), ["principal", "chunk"])
        .repartition(partitions, "part_key")
        .sortWithinPartitions("principal", "chunk", "ts", "seq")
        .persist(StorageLevel.MEMORY_AND_DISK)
    )

    # Phase A: the carries of the hot users' chunks, one task per (hot user, setting).
    carries: dict[tuple[int, str, int], bytes] = {}
    if hot:
        # One partition per hot user (the same exact-hash trick), sorted, cached: each setting's task
        # reads it narrowly.
        hot_keys = _partition_keys(spark, len(hot))
        hot_mapping = spark.createDataFrame([(u, hot_keys[i]) for i, u in enumerate(hot)],
                                            "principal string, part_key long")
        hot_rows = (
            produce.join(F.broadcast(hot_mapping), "principal")
            .repartition(len(hot), "part_key")
            .sortWithinPartitions("principal", "ts", "seq")
            .persist(StorageLevel.MEMORY_AND_DISK)
        )
        frames = []
        for index, setting in enumerate(settings):
            frames.append(hot_rows.mapInArrow(_phase_a(index, setting, timeline, expiration_ms),
                                              "setting int, principal string, chunk int, carry binary"))
        union = frames[0]
        for frame in frames[1:]:
            union = union.unionByName(frame)
        for row in union.collect():
            carries[(row.setting, row.principal, row.chunk)] = bytes(row.carry)
        hot_rows.unpersist()
    if plan is not None:
        plan.update(chunks=chunks, bounds=bounds, groups=group_sizes, partitions=partitions, where=where,
                    carries=len(carries))

    # Phase B: every (user, chunk) x setting, in parallel.
    outputs = []
    for index, setting in enumerate(settings):
        mine = {(u, c): blob for (s, u, c), blob in carries.items() if s == index}
        outputs.append(parted.mapInArrow(_phase_b(setting, mine, timeline, window_ms, model, expiration_ms),
                                         AGGREGATE_SCHEMA))
    result = outputs[0]
    for frame in outputs[1:]:
        result = result.unionByName(frame)
    result = result.persist(StorageLevel.MEMORY_AND_DISK)
    result.count()
    parted.unpersist()
    return result


# -- the report's tables ----------------------------------------------------------------------------


def windows_table(aggregates: DataFrame) -> DataFrame:
    """Per setting, user and window in which the user produced: the counts."""
    return aggregates.where((F.col("window_start_ms") != TOTAL) & (F.col("produce_events") > 0)).select(
        "setting", "principal", "window_start_ms", *COUNTS
    )


def totals_table(aggregates: DataFrame) -> DataFrame:
    """Per setting and user over the whole audit: the chunks' TOTAL rows added up."""
    sums = [F.sum(c).cast("long").alias(c) for c in COUNTS if c != "max_throttle_ms"]
    return (
        aggregates.where(F.col("window_start_ms") == TOTAL)
        .groupBy("setting", "principal")
        .agg(*sums, F.max("max_throttle_ms").cast("long").alias("max_throttle_ms"),
             F.sum("mismatched_events").cast("long").alias("mismatched_events"))
        .select("setting", "principal", *COUNTS, "mismatched_events")
    )


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
