"""The PySpark pipeline on small inputs with answers worked out by hand: reading traces, the summary,
the what-if replay through the project's own quota classes, the producer-state model, the answer,
and the whole report. One SparkSession (local[2]) for the run (tests/conftest.py)."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from minibroker.pipeline import jobs
from minibroker.pipeline.gen import generate, write_trace
from minibroker.pipeline.model import KAFKA_BYTES_BY_BATCHES, StateMemoryModel
from minibroker.pipeline.read import decision_events, read_data_dir, read_trace
from minibroker.pipeline.replay import QuotaSettings, replay
from minibroker.pipeline.report import build_report
from minibroker.pipeline.schema import EVENTS_SCHEMA
from minibroker.pipeline.whatif import state_table, totals_table, whatif, windows_table
from minibroker.storage.audit_format import AUDIT_FIELD_NAMES, audit_event

T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z, a whole number of seconds and minutes


def ev(ts, principal, pid=-1, *, api="Produce", client="c1", topic="t", partition=0, nbytes=100, records=1,
       error=0, throttle=0, quota="", pid_new=None, seq=None):
    api_key = {"Produce": 0, "Fetch": 1, "InitProducerId": 22}[api]
    event = audit_event(
        ts=T0 + ts, principal=principal, client_id=client, listener="PLAINTEXT", api=api, api_key=api_key,
        api_version=9, topic=None if api == "InitProducerId" else topic, partition=partition, bytes=nbytes,
        records=records, producer_id=pid, producer_epoch=0 if pid >= 0 else -1, error_code=error,
        throttle_time_ms=throttle, throttle_quota=quota, pid_new=pid_new,
    )
    event["seq"] = seq
    return event


def frame(spark, events):
    rows = [{**e, "seq": i if e["seq"] is None else e["seq"]} for i, e in enumerate(events)]
    return spark.createDataFrame([tuple(r[f.name] for f in EVENTS_SCHEMA.fields) for r in rows], EVENTS_SCHEMA)


# alice: PIDs 1-4 at t=0 (one request of 4 batches), 1 again at 100, 4 retried at 500, 4 and 5 at 1000.
# bob: PID 7 at 0, 300, 1200; fetches at 100 and 1100 (the second throttled 250 ms by the broker).
HAND = [
    ev(0, "User:alice", 1, api="InitProducerId", nbytes=0, records=0),
    ev(0, "User:alice", 1, partition=0), ev(0, "User:alice", 2, partition=1),
    ev(0, "User:alice", 3, partition=2), ev(0, "User:alice", 4, partition=3),
    ev(100, "User:alice", 1), ev(500, "User:alice", 4), ev(1000, "User:alice", 4), ev(1000, "User:alice", 5),
    ev(0, "User:bob", 7, client="b1", nbytes=1000), ev(300, "User:bob", 7, client="b1", nbytes=1000),
    ev(1200, "User:bob", 7, client="b1", nbytes=1000),
    ev(100, "User:bob", api="Fetch", client="b2", nbytes=500, records=5),
    ev(1100, "User:bob", api="Fetch", client="b2", nbytes=0, records=0, throttle=250,
       quota="consumer_byte_rate"),
]
PID_WINDOW = dict(pid_window_size_seconds=1.0, pid_layer_count=2)  # W = 1 s, slots of 500 ms
ALICE_3 = QuotaSettings("alice=3", user_producer_ids_rates=(("alice", 3.0),), **PID_WINDOW)


def types(schema):
    return [(f.name, f.dataType) for f in schema.fields]


def rows_by(df, *key):
    """{key value (a tuple for several columns): row dict}"""
    if len(key) == 1:
        return {r[key[0]]: r.asDict() for r in df.collect()}
    return {tuple(r[k] for k in key): r.asDict() for r in df.collect()}


# -- reading --------------------------------------------------------------------------------------


def test_trace_readers_parquet_and_json_lines_agree_with_the_generator(spark, tmp_path):
    table = generate(3000, seed=3)
    expected = table.to_pylist()
    for name in ("trace.parquet", "trace.jsonl"):
        path = write_trace(table, tmp_path / name)
        df = decision_events(read_trace(spark, path))
        assert types(df.schema) == types(EVENTS_SCHEMA)
        rows = sorted((r.asDict() for r in df.collect()), key=lambda r: r["seq"])
        assert rows == expected, name


def test_trace_without_seq_keeps_file_order(spark, tmp_path):
    path = tmp_path / "plain.jsonl"
    events = [{k: v for k, v in e.items() if k != "seq"} for e in HAND]
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    rows = sorted(decision_events(read_trace(spark, path)).collect(), key=lambda r: r["seq"])
    assert [{k: r[k] for k in AUDIT_FIELD_NAMES} for r in rows] == events


# -- summary --------------------------------------------------------------------------------------


def test_summary_by_hand(spark):
    out = rows_by(jobs.summary(frame(spark, HAND), 1000), "window_start_ms", "principal", "client_id")
    alice0 = out[(T0, "User:alice", "c1")]
    # InitProducerId + 4 batches at 0, one at 100, one at 500: 7 events, 3 requests (distinct api, ts:
    # InitProducerId@0, Produce@0, @100, @500 -> 4), PIDs 1-4.
    assert (alice0["events"], alice0["requests"], alice0["distinct_pids"], alice0["distinct_pids_approx"]) == (7, 4, 4, 4)
    assert alice0["produce_bytes"] == 600 and alice0["produce_records"] == 6
    alice1 = out[(T0 + 1000, "User:alice", "c1")]
    assert (alice1["events"], alice1["requests"], alice1["distinct_pids"]) == (2, 1, 2)
    bob_p0 = out[(T0, "User:bob", "b1")]
    assert (bob_p0["events"], bob_p0["distinct_pids"], bob_p0["produce_bytes"]) == (2, 1, 2000)
    bob_f1 = out[(T0 + 1000, "User:bob", "b2")]
    assert (bob_f1["fetch_bytes"], bob_f1["distinct_pids"], bob_f1["throttled_events"]) == (0, 0, 1)
    assert (bob_f1["throttle_p50_ms"], bob_f1["throttle_p99_ms"], bob_f1["throttle_max_ms"]) == (250, 250, 250)
    assert out[(T0, "User:bob", "b2")]["fetch_bytes"] == 500
    assert len(out) == 6


# -- replay ---------------------------------------------------------------------------------------

# Under producer_ids_rate=3 for alice, W = 1 s in slots of 500 ms: 3 new PIDs in any second.
# t=0 PIDs 1,2,3 admitted (slot 0 holds 3); PID 4 rejected until slot 0 leaves the lookback (t - W + 1
# reaches 500: t = 1499). t=100 PID 1 known (it has producer state). t=500 PID 4 (no state: its batch
# was never appended) rejected, 999 ms. t=1000 PID 4 and PID 5 rejected, 499 ms each.
ALICE_EXPECTED = [  # (ts, pid, pid_new, pid_throttle_ms)
    (0, 1, True, 0), (0, 2, True, 0), (0, 3, True, 0), (0, 4, True, 1499),
    (100, 1, False, 0), (500, 4, True, 999), (1000, 4, True, 499), (1000, 5, True, 499),
]


def test_replay_reproduces_hand_computed_pid_quota_decisions(spark):
    decisions = replay(frame(spark, HAND), [ALICE_3])
    alice = sorted((r for r in decisions.collect() if r.principal == "User:alice"), key=lambda r: r.seq)
    assert [(r.ts - T0, r.producer_id, r.pid_new, r.pid_throttle_ms) for r in alice] == ALICE_EXPECTED
    assert [r.appended for r in alice] == [t == 0 for *_, t in ALICE_EXPECTED]
    bob = [r for r in decisions.collect() if r.principal == "User:bob"]
    assert len(bob) == 3 and all(r.pid_new is None and r.pid_throttle_ms == 0 for r in bob)  # no quota


def test_replay_totals_and_windows_by_hand(spark):
    default_3 = QuotaSettings("all=3", producer_ids_rate=3.0, **PID_WINDOW)
    aggregates = whatif(frame(spark, HAND), [ALICE_3, default_3], 1000, StateMemoryModel()).cache()
    totals = rows_by(totals_table(aggregates), "setting", "principal")
    alice = totals[("alice=3", "User:alice")]
    assert alice == {
        "setting": "alice=3", "principal": "User:alice",
        "produce_events": 8, "produce_requests": 4,  # (client, ts): 0, 100, 500, 1000
        "new_pid_events": 7, "new_pids": 5, "pid_throttled_pids": 2,  # PIDs 4 and 5
        "pid_rejected_batches": 4, "byte_throttled_events": 0,
        "throttled_requests": 3, "max_throttle_ms": 1499, "sum_throttle_ms": 1499 + 999 + 499,
        "mismatched_events": 0,
    }
    bob = totals[("all=3", "User:bob")]  # PID 7: new at 0, then known (it has producer state)
    assert (bob["new_pid_events"], bob["new_pids"], bob["pid_rejected_batches"]) == (1, 1, 0)
    assert totals[("alice=3", "User:bob")]["new_pid_events"] == 0

    windows = rows_by(windows_table(aggregates), "setting", "principal", "window_start_ms")
    w0, w1 = windows[("alice=3", "User:alice", T0)], windows[("alice=3", "User:alice", T0 + 1000)]
    assert (w0["pid_rejected_batches"], w0["throttled_requests"], w0["sum_throttle_ms"]) == (2, 2, 1499 + 999)
    assert (w1["pid_rejected_batches"], w1["throttled_requests"], w1["sum_throttle_ms"]) == (2, 1, 499)


def test_replay_byte_rate_quota_by_hand(spark):
    """producer_byte_rate=50 B/s, 11 samples of 1 s (Kafka's defaults). Kafka's Rate pads its window
    to 10 whole samples plus the current one's elapsed part; throttle = (rate - quota) / quota x window.
    100 B at 0 and 100 B at 0: 20 B/s, no throttle. 600 B at 500: 800 B / 10.5 s = 76.2 B/s ->
    (800 / 10.5 - 50) / 50 x 10500 = 5500 ms. 100 B at 5000: 900 B / 10 s (5 s elapsed + 5 padded)
    = 90 B/s -> (90 - 50) / 50 x 10000 = 8000 ms."""
    events = [ev(0, "User:carol", -1), ev(0, "User:carol", -1, partition=1),
              ev(500, "User:carol", -1, nbytes=600), ev(5000, "User:carol", -1)]
    decisions = replay(frame(spark, events), [QuotaSettings("bytes", producer_byte_rate=50.0)])
    assert [r.byte_throttle_ms for r in sorted(decisions.collect(), key=lambda r: r.seq)] == [0, 0, 5500, 8000]


def test_state_over_time_by_hand(spark):
    """Expiration 1 s, 1 s windows. Window 0: PID 1 on p0 (batches at 0 and 500), PID 2 on p0 and on
    p1: 3 entries, 4 retained batches. They expire at 1500 and 1000: window 1 holds none. PID 3 at
    2500: 1 entry in window 2 (its expiry at 3500 is past the trace)."""
    events = [ev(0, "User:a", 1), ev(500, "User:a", 1), ev(0, "User:a", 2), ev(0, "User:a", 2, partition=1),
              ev(1500, "User:a", -1), ev(2500, "User:a", 3)]
    model = StateMemoryModel()
    aggregates = whatif(frame(spark, events), [QuotaSettings("none")], 1000, model, expiration_ms=1000)
    state = rows_by(state_table(aggregates, model), "window_start_ms")
    k = KAFKA_BYTES_BY_BATCHES
    assert [(state[T0 + w]["entries"], state[T0 + w]["kafka_batches"]) for w in (0, 1000, 2000)] == [
        (3, 4), (0, 0), (1, 1)
    ]
    assert state[T0]["lean_bytes"] == pytest.approx(3 * model.lean)
    assert state[T0]["kafka_bytes"] == pytest.approx(k[2] + 2 * k[1])
    assert state[T0 + 1000]["kafka_bytes"] == pytest.approx(0)
    assert state[T0 + 2000]["kafka_bytes"] == pytest.approx(k[1])


def test_rejected_pids_hold_no_state(spark):
    model = StateMemoryModel()
    aggregates = whatif(frame(spark, HAND), [QuotaSettings("none", **PID_WINDOW), ALICE_3], 1000, model,
                        expiration_ms=60_000)
    state = state_table(aggregates, model)
    entries = {(r.setting, r.window_start_ms): r.entries for r in state.collect()}
    # Entries are (PID, partition). No quota: alice's (1,p0) (2,p1) (3,p2) (4,p3), then (4,p0) at 500
    # and (5,p0) at 1000, and bob's (7,p0): 7 by window 1. alice=3: every batch of PIDs 4 and 5 is
    # rejected, so both windows hold (1,p0) (2,p1) (3,p2) and bob's (7,p0).
    assert entries[("none", T0 + 1000)] == 7
    assert entries[("alice=3", T0)] == 4
    assert entries[("alice=3", T0 + 1000)] == 4


def test_user_needs_by_hand(spark):
    """alice's new PIDs: 1-4 at 0 and 5 at 1000 (PID 4's retries are not new: it was seen 500 ms
    before, within the memory given). With W = 1 s in slots of 500 ms, PID 5 at 1000 still counts
    slot 0 (it overlaps (0, 1000]), which holds 4: the rate that admits them all is 5; the audit
    (1.2 s) is longer than W, so that is measured, not estimated. bob: one PID, any rate admits it."""
    new_pids = jobs.new_pid_events(frame(spark, HAND), memory_ms=1000)
    needs = jobs.user_needs(new_pids, 1.0, 2, span_ms=1200).set_index("principal")
    alice, bob = needs.loc["User:alice"], needs.loc["User:bob"]
    assert (alice.new_pids, alice.needed_rate, alice.per_window, alice.estimated) == (5, 5, 5, False)
    assert (bob.new_pids, bob.needed_rate) == (1, 0)


# -- the whole report -----------------------------------------------------------------------------


def test_report_end_to_end(spark, tmp_path):
    """A small synthetic trace with a quota window (1 s) short enough for the burst to run out. The
    first lines answer the question: the new-producer-per-batch user is far above the others, a
    default rate X throttles only it, Y nobody (both values the broker accepts, counted by the
    replay); the candidates given and the "observed" row are replayed beside them; page, plots and
    tables are all written."""
    from minibroker.pipeline.recommend import accepted
    from minibroker.pipeline.report import OBSERVED

    trace = write_trace(generate(8000, seed=11), tmp_path / "trace.parquet")
    out = tmp_path / "report"
    candidates = [QuotaSettings(f"producer_ids_rate={r}", producer_ids_rate=r, pid_window_size_seconds=1.0)
                  for r in (3, 30)]
    result = build_report(read_trace(spark, trace), out=out, candidates=candidates, window_ms=2000,
                          source=str(trace), flags={"pid_window_size_seconds": 1.0})
    assert result.events == 8000
    found = result.answer
    assert found.outliers == ["User:lambda-ingest"] and not found.estimated  # 12 s of audit, W = 1 s
    x, y = found.throttle_rate, found.nobody_rate
    assert accepted(x) and accepted(y) and x < y
    totals = result.totals.set_index(["setting", "principal"])
    rejected = totals["pid_rejected_batches"]
    lam = rejected[(f"producer_ids_rate={x:g}", "User:lambda-ingest")]
    assert lam > 0 and rejected.xs(f"producer_ids_rate={x:g}").drop("User:lambda-ingest").sum() == 0
    assert rejected.xs(f"producer_ids_rate={y:g}").sum() == 0
    assert result.headline[0] == (f"A default producer_ids_rate of {x:,g} throttles only lambda-ingest "
                                  f"({lam:,} batches); {y:,g} throttles nobody.")
    assert "new producer ids per 1 s" in result.headline[1] and "measured, not estimated" in result.headline[1]
    assert rejected.xs(OBSERVED).sum() == 0 and rejected[("producer_ids_rate=3", "User:lambda-ingest")] > 0
    assert rejected.xs("no quota").sum() == 0

    page = (out / "index.html").read_text()
    assert page.index(result.headline[0].split(";")[0]) < page.index("What each setting would have done")
    for text in ("observed (what the broker decided)", "producer_ids_rate=3", "producer_ids_rate=30",
                 "pids_per_window.png", "throttle_over_time.png", "state_size.png", "does not record"):
        assert text in page, text
    for png in ("pids_per_window.png", "throttle_over_time.png", "state_size.png"):
        data = (out / png).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000
    for table in ("summary", "new_pids_per_window", "replay_windows", "replay_totals.parquet", "state_over_time",
                  "user_needs.parquet"):
        assert pq.read_table(out / table).num_rows > 0, table
    state = pq.read_table(out / "state_over_time").to_pandas()
    last = state.sort_values("window_start_ms").groupby("setting").last()
    assert last.loc["no quota", "entries"] > last.loc["producer_ids_rate=3", "entries"]
    assert (last.kafka_bytes > last.lean_bytes).all()


def test_report_of_an_empty_audit(spark, tmp_path):
    result = build_report(read_data_dir(spark, tmp_path), out=tmp_path / "r", source=str(tmp_path))
    assert result.events == 0
    assert "No decisions in the audit" in (tmp_path / "r" / "index.html").read_text()


def test_settings_from_the_brokers_quota_store(tmp_path):
    """scripts/pipeline on a data dir whose audit records no quota configuration falls back on the
    broker's quota store (user-level quotas only)."""
    from minibroker.pipeline.cli import QUOTA_STORE_FILE, fallback_from, parser
    from minibroker.quotas.config import QuotaConfigStore

    store = QuotaConfigStore()
    results = store.alter([
        ([("user", "alice")], [("producer_ids_rate", 2.0, False)]),
        ([("user", None)], [("producer_ids_rate", 1.0, False)]),
        ([("user", "bob")], [("producer_byte_rate", 1e6, False)]),
        ([("user", "bob"), ("client-id", "x")], [("producer_byte_rate", 5.0, False)]),  # per client: skipped
    ])
    assert [code for _, code, _ in results] == [0, 0, 0, 0]
    (tmp_path / QUOTA_STORE_FILE).write_text(store.to_json())
    own = fallback_from(parser().parse_args(["--data-dir", str(tmp_path)]))
    assert own.name == "broker's quotas"
    assert own.producer_ids_rate == 1.0 and own.user_producer_ids_rates == (("alice", 2.0),)
    assert own.producer_byte_rate is None and own.user_producer_byte_rates == (("bob", 1e6),)
    assert own.pid_rate_for("alice") == 2.0 and own.pid_rate_for("carol") == 1.0
    assert fallback_from(parser().parse_args([])) is None


def test_cli_options():
    from minibroker.pipeline.cli import DEFAULT_BOOTSTRAP, candidates_from, consumer_config, parser

    args = parser().parse_args(["--rates", "50,0.5,10", "--pid-window-seconds", "60", "--producer-byte-rate", "1e6",
                                "--conf", "spark.executor.memory=2g", "--conf", "spark.ui.port=4050",
                                "--consumer-property", "security.protocol=SASL_PLAINTEXT"])
    candidates = candidates_from(args)
    assert [s.name for s in candidates] == ["producer_ids_rate=0.5", "producer_ids_rate=10", "producer_ids_rate=50"]
    assert candidates[0].producer_ids_rate == 0.5  # per window, fractions as the broker accepts them
    assert candidates[1].producer_byte_rate == 1e6
    assert all(s.pid_window_size_seconds == 60 and s.pid_layer_count is None for s in candidates)
    assert dict(args.conf) == {"spark.executor.memory": "2g", "spark.ui.port": "4050"}
    assert consumer_config(args) == {"security.protocol": "SASL_PLAINTEXT"}
    defaults = parser().parse_args([])
    assert defaults.bootstrap_server is None and DEFAULT_BOOTSTRAP == "127.0.0.1:9092"
    assert defaults.out == "report" and defaults.master == "local[*]" and not defaults.quiet
    with pytest.raises(SystemExit):
        parser().parse_args(["--rates", "0"])  # the broker refuses a rate <= 0
