"""The pipeline's Spark-free parts: the needed-rate arithmetic against the real ProducerIdQuotaManager,
the replay's ordering rule and producer-state model, and the synthetic trace generator."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from minibroker.pipeline.gen import generate
from minibroker.pipeline.model import needed_rate
from minibroker.pipeline.replay import QuotaSettings, replay_principal
from minibroker.quotas.producer_id_quota import ProducerIdQuotaManager

WINDOW_S, LAYERS = 2.0, 4  # W = 2 s in slots of 500 ms


def frame_of(**columns) -> pd.DataFrame:
    """One principal's Produce events (pipeline.replay.INPUT_COLUMNS), defaults for what is not given."""
    n = len(columns["seq"])
    base = {"principal": "User:u", "client_id": "c", "topic": "t", "partition": 0, "producer_id": -1, "bytes": 10,
            "error_code": 0, "throttle_quota": "", "pid_new": None, "throttle_time_ms": 0}
    return pd.DataFrame({**{k: [v] * n for k, v in base.items()}, **columns})


def rejections(times_ms, rate) -> int:
    """New PIDs (all distinct, none with producer state) at these times through the broker's own
    quota class."""
    manager = ProducerIdQuotaManager(window_size_seconds=WINDOW_S, layer_count=LAYERS)
    manager.update_quota("u", rate)
    return sum(manager.track("u", 10_000 + i, int(t), lambda: False).throttle_time_ms > 0
               for i, t in enumerate(times_ms))


@pytest.mark.parametrize("seed", range(8))
def test_needed_rate_is_the_boundary_of_the_real_quota(seed):
    """At the computed rate the broker's ProducerIdQuotaManager rejects none of the new PIDs; just
    below it (one id fewer per window, or a longer lookback below 1), it rejects some. Bursts and
    quiet spells (seeds 0-3), and sparse PIDs that need a rate below 1 (seeds 4-7)."""
    rng = np.random.default_rng(seed)
    if seed < 4:
        bursts = [t0 + rng.integers(0, 200, rng.integers(1, 40)) for t0 in np.sort(rng.integers(0, 60_000, 12))]
        times = np.sort(np.concatenate(bursts))
    else:
        times = np.cumsum(rng.integers(2_500, 9_000, 20))
    rate = needed_rate(times, WINDOW_S, LAYERS)
    assert rate > 0 and (seed < 4) == (rate >= 1)
    assert rejections(times, rate) == 0
    below = rate - 1 if rate >= 2 else rate * 0.999
    assert rejections(times, below) > 0


def test_needed_rate_small_cases():
    assert needed_rate([], WINDOW_S, LAYERS) == 0
    assert needed_rate([5], WINDOW_S, LAYERS) == 0  # any rate admits a single PID
    assert needed_rate([0, 0, 0], WINDOW_S, LAYERS) == 3
    # Two PIDs 4 s apart: a lookback up to 4000 + 1 - 500 (the end of the first one's slot) keeps
    # them apart, so W / 3501 per window.
    assert needed_rate([0, 4000], WINDOW_S, LAYERS) == pytest.approx(2000 / 3501)
    # A steady 5 PIDs per second: 10 in any 2 s, but the quota's lookback reaches up to one slot of
    # 500 ms further back: at t = 2400 it counts slot 0 from 0, 12 PIDs before this one, so 13.
    steady = np.arange(500) * 200
    assert needed_rate(steady, WINDOW_S, LAYERS) == 13
    assert rejections(steady, 13) == 0 and rejections(steady, 12) > 0


def test_replay_orders_by_ts_then_seq_not_by_input_order():
    """Events arrive in any order (Spark gives a group's rows unordered); the replay sorts by (ts, seq)
    the way the broker made its decisions: the third PID at the same ms is the one rejected."""
    pdf = pd.DataFrame({
        "principal": "User:u", "client_id": "c", "seq": [3, 1, 2, 0], "ts": [1000, 0, 0, 0], "topic": "t",
        "partition": 0, "producer_id": [9, 8, 7, 6], "bytes": 10, "error_code": 0, "throttle_quota": "",
    })
    setting = QuotaSettings("q", producer_ids_rate=2, pid_window_size_seconds=1.0, pid_layer_count=2)
    out = replay_principal(pdf, [setting])
    # 2 per second in slots of 500 ms: PIDs 6 and 8 (seq 0, 1) fill slot 0; PID 7 (seq 2) waits until
    # slot 0 leaves the lookback at 1499; PID 9 at 1000 waits 499 ms.
    assert list(out.seq) == [0, 1, 2, 3]
    assert list(out.producer_id) == [6, 8, 7, 9]
    assert list(out.pid_throttle_ms) == [0, 0, 1499, 499]


def test_replay_knows_the_pids_it_appended():
    """The replay's producer-state model: a PID whose batch it appended is known from then on, even
    after the quota's Bloom layers forgot it (W = 1 s here; PID 1 comes back after 5 s)."""
    pdf = pd.DataFrame({
        "principal": "User:u", "client_id": "c", "seq": [0, 1, 2], "ts": [0, 5000, 5000], "topic": "t",
        "partition": 0, "producer_id": [1, 1, 2], "bytes": 10, "error_code": 0, "throttle_quota": "",
    })
    out = replay_principal(pdf, [QuotaSettings("q", producer_ids_rate=1, pid_window_size_seconds=1.0)])
    assert list(out.pid_new) == [True, False, True] and list(out.pid_throttle_ms) == [0, 0, 0]


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


def test_aggregates_of_a_principal_without_producer_ids():
    """Non-idempotent producers (producer id -1): counted, never tracked, no producer state."""
    from minibroker.pipeline.model import StateMemoryModel
    from minibroker.pipeline.replay import UserEvents
    from minibroker.pipeline.timeline import QuotaTimeline
    from minibroker.pipeline.whatif import TOTAL, run_chunk

    pdf = frame_of(seq=[0, 1, 2], ts=[0, 10, 1500], partition=[0, 1, 0], producer_id=-1)
    rows = run_chunk(UserEvents.from_pandas(pdf), QuotaSettings("q", producer_ids_rate=1.0), QuotaTimeline(), None,
                     window_ms=1000, model=StateMemoryModel(), expiration_ms=60_000).set_index("window_start_ms")
    assert list(rows.index) == [0, 1000, TOTAL]
    assert list(rows.produce_events) == [2, 1, 3] and list(rows.produce_requests) == [2, 1, 3]
    assert (rows.new_pid_events == 0).all() and (rows.d_entries == 0).all() and (rows.d_kafka_bytes == 0).all()


def test_replay_tracks_batches_refused_after_the_quota():
    """A batch producer state refuses (INVALID_TXN_STATE: a non-transactional batch while its producer's
    transaction is open) was seen by the producer-id quota first, as the broker asks it (transactions, KIP-98):
    the replay tracks it too, and does not count it as appended."""
    pdf = pd.DataFrame({
        "principal": "User:u", "client_id": "c", "seq": [0, 1], "ts": [0, 0], "topic": "t",
        "partition": 0, "producer_id": [1, 2], "bytes": 10, "error_code": [48, 0], "throttle_quota": "",
    })
    out = replay_principal(pdf, [QuotaSettings("q", producer_ids_rate=1.0)])
    assert out.pid_new.iat[0] and not out.pid_new.isna().iat[1]
    assert list(out.producer_id) == [1, 2] and not out.appended.iat[0]


@pytest.mark.parametrize("seed", range(4))
def test_the_replay_without_a_bloom_filter_decides_as_the_brokers_manager(seed):
    """The replay's ProducerIdQuotaManager holds no Bloom filter: with producer state as the
    authority (has_state), the filter never changes a decision. The broker's manager (real layered
    filter, here with a false-positive rate of 0.3 so that its claims without state happen often)
    and the replay's give the same known / throttle verdict for every call."""
    from minibroker.pipeline.replay import ReplayPidQuota

    rng = np.random.default_rng(seed)
    real = ProducerIdQuotaManager(window_size_seconds=2.0, layer_count=4, false_positive_rate=0.3,
                                  min_layer_capacity=1)
    mine = ReplayPidQuota(window_size_seconds=2.0, layer_count=4, false_positive_rate=0.3, min_layer_capacity=1)
    rate = float(rng.integers(1, 8))
    for manager in (real, mine):
        manager.update_quota("u", rate)
    state: set[int] = set()
    false_positives = 0
    for t in np.sort(rng.integers(0, 30_000, 3000)).tolist():
        pid = int(rng.integers(0, 400))
        a = real.track("u", pid, t, lambda: pid in state)  # noqa: B023
        b = mine.track("u", pid, t, lambda: pid in state)  # noqa: B023
        assert (a.known, a.throttle_time_ms) == (b.known, b.throttle_time_ms)
        false_positives += a.false_positive
        if a.throttle_time_ms == 0 and rng.random() < 0.9:  # most admitted batches are appended
            state.add(pid)
    assert false_positives > 0 and mine.memory_bytes() == 0


def _random_user(rng, n):
    ts = np.sort(rng.integers(0, 20_000, n))
    return frame_of(seq=np.arange(n), ts=ts, client_id=rng.choice(["a", "b"], n), topic=rng.choice(["t1", "t2"], n),
                    partition=rng.integers(0, 3, n), producer_id=rng.integers(-1, 25, n),
                    bytes=rng.integers(10, 1000, n), error_code=rng.choice([0, 0, 0, 45], n))


def _combined(frames):
    from minibroker.pipeline.whatif import COUNTS, DELTAS, TOTAL

    rows = pd.concat(frames, ignore_index=True)
    totals = rows[rows.window_start_ms == TOTAL]
    total = totals[[c for c in COUNTS if c != "max_throttle_ms"] + ["mismatched_events"]].sum()
    total["max_throttle_ms"] = totals.max_throttle_ms.max()
    windows = rows[rows.window_start_ms != TOTAL].groupby("window_start_ms")[COUNTS + DELTAS + ["d_kafka_bytes"]].sum()
    return total.sort_index().to_dict(), windows.sort_index().round(6)


@pytest.mark.parametrize("seed", range(6))
def test_a_user_split_by_time_replays_exactly_as_in_one_pass(seed):
    """Cut a user's history at random window boundaries: the chunks, each starting from the carry
    of the ones before (quota managers, producer-state model, counted PIDs, open producer-state
    sessions, place in the quota record), add up to exactly the aggregates of one pass: counts,
    distinct PIDs, throttles, producer-state deltas. With quota changes and broker restarts in the
    record, and a byte-rate quota."""
    import pickle

    from minibroker.pipeline.model import StateMemoryModel
    from minibroker.pipeline.replay import UserEvents
    from minibroker.pipeline.timeline import QuotaTimeline
    from minibroker.pipeline.whatif import replay_chunks, run_chunk

    rng = np.random.default_rng(seed)
    events = UserEvents.from_pandas(_random_user(rng, int(rng.integers(100, 500))))
    records = [
        {"ts": 0, "seq": -10, "api": "QuotaConfig", "principal": "", "quota_settings": {
            "producer.id.quota.window.size.seconds": 2.0, "producer.id.quota.cache.layer.count": 4.0},
         "quotas": [{"entity": {"user": None}, "values": {"producer_ids_rate": 3.0}}]},
        {"ts": int(rng.integers(2000, 8000)), "seq": 10**6, "api": "AlterClientQuotas", "principal": "User:admin",
         "quotas": [{"entity": {"user": "u"}, "values": {"producer_ids_rate": 1.0, "producer_byte_rate": 3000.0}}],
         "quota_settings": None},
        {"ts": int(rng.integers(9000, 15000)), "seq": 10**6 + 1, "api": "QuotaConfig", "principal": "",
         "quotas": [{"entity": {"user": "u"}, "values": {"producer_ids_rate": 2.0}}],
         "quota_settings": {"producer.id.quota.window.size.seconds": 3.0}},
    ]
    timeline = QuotaTimeline.from_records(records)
    assert timeline.complete and timeline.restarts() == 2
    model, window_ms, expiration_ms = StateMemoryModel(), 1000, int(rng.integers(500, 5000))
    for setting in (QuotaSettings("broker", recorded=True),
                    QuotaSettings("candidate", producer_ids_rate=float(rng.integers(1, 5)), producer_byte_rate=5000.0)):
        whole = run_chunk(events, setting, timeline, None, window_ms=window_ms, model=model,
                          expiration_ms=expiration_ms)
        windows = np.unique(events.ts // window_ms * window_ms)
        cuts = np.sort(rng.choice(windows[1:], size=min(int(rng.integers(1, 5)), len(windows) - 1), replace=False))
        chunk_of = np.searchsorted(cuts, events.ts, side="right")
        carries = [pickle.loads(pickle.dumps(c)) for c in replay_chunks(events, chunk_of, setting, timeline,
                                                                         expiration_ms)]
        assert len(carries) == len(cuts) + 1
        bounds = np.searchsorted(chunk_of, np.arange(len(carries) + 1))
        parts = [run_chunk(events.slice(bounds[c], bounds[c + 1]), setting, timeline, carries[c], window_ms=window_ms,
                           model=model, expiration_ms=expiration_ms) for c in range(len(carries))]
        (total_a, windows_a), (total_b, windows_b) = _combined([whole]), _combined(parts)
        assert total_a == total_b
        pd.testing.assert_frame_equal(windows_a, windows_b)
        assert total_a["new_pid_events"] > 0


def test_the_broker_s_quotas_are_replayed_as_they_changed():
    """Recorded: the broker starts with no quota (W = 1 s in 2 slots); at 1000 alice gets
    producer_ids_rate 1; the broker restarts at 3000 (its admission counts start empty). PIDs:
    1 at 500 (untracked: null), 2 at 1100 (new, admitted), 3 at 1200 (new, throttled until slot
    1000-1499 leaves the lookback, when now - 1000 + 1 reaches 1500: 2499 - 1200 = 1299 ms), 1 at 1300
    (known: it has producer state), 4 at 2900 (admitted: 2's slot left the lookback), 5 at 3100
    (admitted: the restart emptied the counts), 6 at 3200 (throttled, 4499 - 3200 ms). A candidate with rate 1 throughout also counts PID 1 at 500 and,
    restarting with the broker, admits 5 too."""
    from minibroker.pipeline.replay import UserEvents, replay_user
    from minibroker.pipeline.timeline import QuotaTimeline

    settings = {"producer.id.quota.window.size.seconds": 1.0, "producer.id.quota.cache.layer.count": 2.0}
    timeline = QuotaTimeline.from_records([
        {"ts": 0, "seq": 0, "api": "QuotaConfig", "principal": "", "quotas": [], "quota_settings": settings},
        {"ts": 1000, "seq": 5, "api": "AlterClientQuotas", "principal": "User:admin", "quota_settings": None,
         "quotas": [{"entity": {"user": "alice"}, "values": {"producer_ids_rate": 1.0}},
                    {"entity": {"client-id": "x"}, "values": {"producer_byte_rate": 10.0}}]},
        {"ts": 3000, "seq": 20, "api": "QuotaConfig", "principal": "", "quota_settings": settings,
         "quotas": [{"entity": {"user": "alice"}, "values": {"producer_ids_rate": 1.0}}]},
    ])
    events = UserEvents.from_pandas(frame_of(
        principal="User:alice", seq=[1, 6, 7, 8, 9, 21, 22], ts=[500, 1100, 1200, 1300, 2900, 3100, 3200],
        producer_id=[1, 2, 3, 1, 4, 5, 6]))
    broker = replay_user(events, QuotaSettings("broker's quotas", recorded=True), timeline)
    assert broker.pid_new.tolist() == [-1, 1, 1, 0, 1, 1, 1]
    assert broker.pid_throttle_ms.tolist() == [0, 0, 1299, 0, 0, 0, 1299]
    candidate = replay_user(events, QuotaSettings("1", producer_ids_rate=1.0), timeline)
    assert candidate.pid_new.tolist() == [1, 1, 1, 0, 1, 1, 1]
    assert (candidate.pid_throttle_ms > 0).tolist() == [False, True, True, False, False, False, True]
