"""The pipeline's Spark-free parts: the needed-rate arithmetic against the real ProducerIdQuotaManager,
the replay's ordering rule, and the synthetic trace generator."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from pipeline.gen import generate
from pipeline.model import needed_rate, rejects_any
from pipeline.replay import QuotaSettings, replay_principal
from quotas.producer_id_quota import ProducerIdQuotaManager

WINDOW_NUM, WINDOW_S = 3, 2.0


def rejections(times_ms, rate) -> int:
    """New PIDs (all distinct) at these times through the broker's own quota class."""
    manager = ProducerIdQuotaManager(window_num=WINDOW_NUM, window_size_seconds=WINDOW_S)
    manager.update_quota("u", rate)
    return sum(manager.track("u", 10_000 + i, int(t)).throttle_time_ms > 0 for i, t in enumerate(times_ms))


@pytest.mark.parametrize("seed", range(6))
def test_needed_rate_is_the_boundary_of_the_real_quota(seed):
    """At the computed rate (plus a hair) the broker's ProducerIdQuotaManager rejects none of the new
    PIDs; 3% below it, it rejects some. Bursts and quiet spells, so the cap on the bucket matters."""
    rng = np.random.default_rng(seed)
    bursts = [t0 + rng.integers(0, 200, rng.integers(1, 40)) for t0 in np.sort(rng.integers(0, 60_000, 12))]
    times = np.sort(np.concatenate(bursts))
    rate = needed_rate(times, WINDOW_NUM, WINDOW_S)
    assert rate > 0
    assert rejections(times, rate * 1.0001) == 0
    assert rejections(times, rate * 0.97) > 0
    assert not rejects_any(times / 1000, rate * 1.0001, WINDOW_NUM * WINDOW_S)


def test_needed_rate_small_cases():
    w = WINDOW_NUM * WINDOW_S  # 6 s of burst per unit of rate
    assert needed_rate([], WINDOW_NUM, WINDOW_S) == 0
    assert needed_rate([5], WINDOW_NUM, WINDOW_S) == 0  # a full bucket admits one PID more than it holds
    assert needed_rate([0, 0, 0], WINDOW_NUM, WINDOW_S) == pytest.approx(2 / w, rel=1e-5)
    # Two PIDs 4 s apart: 1 / (6 + 4).
    assert needed_rate([0, 4000], WINDOW_NUM, WINDOW_S) == pytest.approx(1 / 10, rel=1e-5)
    # A steady 5 PIDs per second for 100 s: (n - 1) / (W + span) with span = 99.8 s.
    steady = np.arange(500) * 200
    assert needed_rate(steady, WINDOW_NUM, WINDOW_S) == pytest.approx(499 / (w + 99.8), rel=1e-5)


def test_replay_orders_by_ts_then_seq_not_by_input_order():
    """Events arrive in any order (Spark gives a group's rows unordered); the replay sorts by (ts, seq)
    the way the broker made its decisions: the second PID at the same ms is the one rejected."""
    pdf = pd.DataFrame({
        "principal": "User:u", "client_id": "c", "seq": [3, 1, 2, 0], "ts": [1000, 0, 0, 0], "topic": "t",
        "partition": 0, "producer_id": [9, 8, 7, 6], "bytes": 10, "error_code": 0, "throttle_quota": "",
    })
    setting = QuotaSettings("q", producer_ids_rate=0.5, pid_window_num=2, pid_window_size_seconds=1.0)
    out = replay_principal(pdf, [setting])
    # burst 1 token: PID 6 (seq 0) 1 -> 0, PID 8 (seq 1) 0 -> -1, PID 7 (seq 2) rejected: wait 2 s;
    # at 1000, -1 + 0.5 = -0.5: PID 9 rejected, 1 s.
    assert list(out.seq) == [0, 1, 2, 3]
    assert list(out.producer_id) == [6, 8, 7, 9]
    assert list(out.pid_throttle_ms) == [0, 0, 2000, 1000]


def test_replay_counts_a_pid_rejected_by_the_broker_as_appendable():
    """A batch the broker itself rejected for its producer-id quota would have been appended under a
    looser candidate; one refused for another reason (here OUT_OF_ORDER_SEQUENCE_NUMBER) would not."""
    pdf = pd.DataFrame({
        "principal": "User:u", "client_id": "c", "seq": [0, 1, 2], "ts": [0, 1, 2], "topic": "t",
        "partition": 0, "producer_id": [1, 2, 3], "bytes": 10, "error_code": [0, 89, 45],
        "throttle_quota": ["", "producer_ids_rate", ""],
    })
    out = replay_principal(pdf, [QuotaSettings("none")])
    assert list(out.appended) == [True, True, False]


def test_generated_trace_has_the_advertised_population():
    table = generate(50_000, seed=5).to_pandas()
    assert len(table) == 50_000
    assert (np.diff(table.ts) >= 0).all() and (table.seq == np.arange(50_000)).all()
    produce = table[table.api == "Produce"]
    pids = produce.groupby("principal", observed=True).producer_id.nunique()
    assert all(pids[f"User:svc-{u:02d}"] == 3 for u in range(10))  # long-lived producers
    per_batch = produce[produce.principal == "User:lambda-ingest"]
    assert per_batch.producer_id.is_unique  # a new producer per batch
    init = table[table.api == "InitProducerId"]
    assert set(per_batch.producer_id) == set(init[init.principal == "User:lambda-ingest"].producer_id)
    crash = produce[produce.principal == "User:etl-crashloop"]
    batches_per_pid = crash.groupby("producer_id").size()
    assert 20 < len(batches_per_pid) and batches_per_pid.median() < 40  # short lives, new PID each
    first_batch = crash.groupby("producer_id").ts.min()
    started = init.set_index("producer_id").ts
    assert (first_batch >= started.reindex(first_batch.index)).all()  # InitProducerId comes first
    fetch = table[table.api == "Fetch"]
    assert (fetch.producer_id == -1).all() and fetch.topic.notna().all() and init.topic.isna().all()
    assert (table.throttle_time_ms == 0).all() and table.pid_new.isna().all()


def test_pipeline_imports_neither_the_broker_nor_trio():
    """pipeline/ reads what the broker wrote; it depends on storage, protocol and quotas only."""
    import subprocess
    import sys

    code = (
        "import sys, pipeline.cli, pipeline.read, pipeline.report, pipeline.whatif, pipeline.gen; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('minibroker', 'trio')))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert result.stdout.strip() == "[]"


def test_aggregates_of_a_principal_without_producer_ids():
    """Non-idempotent producers (producer id -1): counted, never tracked, no producer state."""
    from pipeline.model import StateMemoryModel
    from pipeline.whatif import TOTAL, aggregate_decisions

    pdf = pd.DataFrame({
        "principal": "User:u", "client_id": "c", "seq": [0, 1, 2], "ts": [0, 10, 1500], "topic": "t",
        "partition": [0, 1, 0], "producer_id": -1, "bytes": 10, "error_code": 0, "throttle_quota": "",
    })
    decisions = replay_principal(pdf, [QuotaSettings("q", producer_ids_rate=1.0)])
    rows = aggregate_decisions(decisions, 1000, StateMemoryModel(), 60_000).set_index("window_start_ms")
    assert list(rows.index) == [0, 1000, TOTAL]
    assert list(rows.produce_events) == [2, 1, 3] and list(rows.produce_requests) == [2, 1, 3]
    assert (rows.new_pid_events == 0).all() and (rows.d_entries == 0).all() and (rows.d_kafka_bytes == 0).all()


def test_replay_does_not_track_batches_refused_before_the_quota():
    """Transactional batches are refused (INVALID_TXN_STATE) before the producer-id quota is asked."""
    pdf = pd.DataFrame({
        "principal": "User:u", "client_id": "c", "seq": [0, 1], "ts": [0, 0], "topic": "t",
        "partition": 0, "producer_id": [1, 2], "bytes": 10, "error_code": [48, 0], "throttle_quota": "",
    })
    out = replay_principal(pdf, [QuotaSettings("q", producer_ids_rate=1.0)])
    assert out.pid_new.isna().iat[0] and out.pid_new.iat[1]
    assert list(out.producer_id) == [1, 2] and not out.appended.iat[0]
