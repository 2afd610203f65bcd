"""Kafka's windowed stats (quotas/rate.py) against hand-computed values.

Default config throughout: 11 samples of 1000 ms, so the padded window is at least 10 s plus the
elapsed part of the current sample, and a sample expires 11 s after its last event.
"""

import math

import pytest
from hypothesis import given, strategies as st

from minibroker.quotas.rate import Avg, Max, MetricConfig, QuotaViolation, Rate, Sensor, TokenBucket, round_half_up

CONFIG = MetricConfig()  # samples=11, window_ms=1000


def test_defaults_are_kafkas():
    assert (CONFIG.samples, CONFIG.window_ms) == (11, 1000)
    with pytest.raises(ValueError):
        MetricConfig(samples=0)
    with pytest.raises(ValueError):
        MetricConfig(window_ms=0)


def test_empty_rate_is_zero_over_padded_window():
    rate = Rate(CONFIG)
    # No sample yet: elapsed 0, 0 full windows < 10, so the window is padded to 10 000 ms.
    assert rate.window_size_ms(5_000) == 10_000
    assert rate.measure(5_000) == 0.0


def test_first_burst_is_padded_to_samples_minus_one_windows():
    rate = Rate(CONFIG)
    rate.record(1000, 0)
    # elapsed 0 -> padded to 10 full windows: 1000 / 10 s
    assert rate.window_size_ms(0) == 10_000
    assert rate.measure(0) == 100.0
    # elapsed 500 ms, 0 full windows -> 500 + 10 * 1000 = 10 500 ms: 1000 / 10.5 s
    assert rate.window_size_ms(500) == 10_500
    assert rate.measure(500) == pytest.approx(1000 / 10.5)
    # elapsed 3 200 ms, 3 full windows -> 3 200 + 7 * 1000 = 10 200 ms (padding keeps the fraction)
    assert rate.window_size_ms(3_200) == 10_200


def test_rate_over_full_windows_needs_no_padding():
    rate = Rate(CONFIG)
    for t in range(0, 11_000, 1000):  # 100 at t = 0, 1000, ..., 10 000: eleven samples
        rate.record(100, t)
    # oldest sample starts at 0; elapsed 10 000 = 10 full windows, no padding: 1100 / 10 s
    assert rate.window_size_ms(10_000) == 10_000
    assert rate.measure(10_000) == 110.0
    # half way through the current sample: 1100 / 10.5 s
    assert rate.measure(10_500) == pytest.approx(1100 / 10.5)


def test_sample_reset_when_last_event_is_samples_windows_old():
    rate = Rate(CONFIG)
    rate.record(1000, 0)
    # 10 999 ms after its last event the sample still counts: 1000 / 10.999 s
    assert rate.measure(10_999) == pytest.approx(1000 / 10.999)
    # at 11 000 ms (= samples * window) it is reset: nothing left
    assert rate.measure(11_000) == 0.0
    # and the reset sample now starts at 11 000, so the window is padded from there
    assert rate.window_size_ms(11_000) == 10_000


def test_overlapping_oldest_sample_is_kept_and_widens_the_window():
    rate = Rate(CONFIG)
    rate.record(100, 0)
    rate.record(100, 900)  # same sample: start 0, last event 900
    # At 11 500 the sample started 11.5 s ago but its last event is 10.6 s old (< 11 s): kept.
    # elapsed 11 500 = 11 full windows >= 10, so no padding: 200 / 11.5 s
    assert rate.window_size_ms(11_500) == 11_500
    assert rate.measure(11_500) == pytest.approx(200 / 11.5)


def test_ring_of_samples_plus_one_slots_recycles_the_oldest():
    rate = Rate(CONFIG)
    for t in range(0, 13_000, 1000):  # 13 records, 12 slots: t=12 000 reuses slot 0
        rate.record(100, t)
    # Slot 0 now holds t=12 000. The sample of t=1000 is 11 000 ms old at 12 000: reset.
    # Left: t = 2000 .. 12 000, eleven samples, 1100 in total; oldest starts at 2000, so the
    # window is 10 000 ms: 110 / s
    assert rate.measure(12_000) == 110.0


def test_kafka_quota_violation_example():
    # ClientQuotaManagerTest.testQuotaViolation: 400 B each second for 10 s, then 2300 at 10.5 s.
    rate = Rate(CONFIG)
    for t in range(0, 10_000, 1000):
        rate.record(400, t)
    rate.record(2300, 10_500)
    # (400 * 10 + 2300) / 10.5 s = 600 B/s; (600 - 500) / 500 * 10 500 ms = 2100 ms
    violation = rate.check(500, 10_500)
    assert violation == QuotaViolation(600.0, 500, 2100)
    assert rate.check(600, 10_500) is None  # equal to the bound is within it


def test_round_half_up_is_javas_math_round():
    assert round_half_up(2.5) == 3  # Python's round gives 2
    assert round_half_up(0.49) == 0
    assert round_half_up(-0.5) == 0
    assert round_half_up(-1.5) == -1


def test_avg_and_max_are_nan_without_events():
    avg, mx = Avg(CONFIG), Max(CONFIG)
    assert math.isnan(avg.measure(0)) and math.isnan(mx.measure(0))
    for t, v in ((0, 100), (1000, 300), (1500, 200)):
        avg.record(v, t)
        mx.record(v, t)
    assert avg.measure(2000) == 200.0  # (100 + 300 + 200) / 3
    assert mx.measure(2000) == 300.0
    # All three samples expire 11 s after their last event (1500).
    assert math.isnan(avg.measure(12_500))
    assert math.isnan(mx.measure(12_500))


def test_max_handles_negative_values():
    mx = Max(CONFIG)
    mx.record(-5, 0)
    assert mx.measure(0) == -5


def test_token_bucket_refill_burst_and_throttle():
    bucket = TokenBucket(CONFIG)
    quota = 10.0  # tokens per second; burst = 11 samples * 1 s * 10 = 110
    # Kafka starts at 0 tokens, last update 0: by t=100 s the bucket has refilled to the burst.
    assert bucket.measure_with_quota(quota, 100_000) == 110.0
    bucket.record_with_quota(150, quota, 100_000)
    assert bucket.tokens == -40.0
    # 40 tokens short at 10 / s: 4 s
    assert bucket.check(quota, 100_000) == QuotaViolation(-40.0, 10.0, 4000)
    # 1.5 s later 15 tokens came back: 25 short -> 2.5 s
    assert bucket.check(quota, 101_500).throttle_time_ms == 2500
    assert bucket.check(quota, 104_000) is None  # back at zero
    # Without a quota nothing is tracked.
    assert bucket.measure_with_quota(None, 0) == math.inf


def test_sensor_records_then_checks_and_returns_the_violation():
    sensor = Sensor(Rate(CONFIG), bound=100.0, now_ms=0)
    assert sensor.record(1000, 0) is None  # 1000 / 10 s = 100 <= 100
    violation = sensor.record(1, 0)  # 1001 / 10 s = 100.1 > 100
    # (100.1 - 100) / 100 * 10 000 ms = 10 ms
    assert violation == QuotaViolation(pytest.approx(100.1), 100.0, 10)
    assert sensor.last_record_ms == 0
    assert sensor.record(1, 5, check_quota=False) is None
    assert sensor.last_record_ms == 5
    sensor.bound = None  # unlimited
    assert sensor.record(10_000, 6) is None
    assert sensor.check_quota(6) is None


records = st.lists(
    st.tuples(st.integers(min_value=0, max_value=3_000), st.floats(min_value=0, max_value=1e9)),
    min_size=1,
    max_size=60,
)


@given(records, st.floats(min_value=1e-3, max_value=1e9))
def test_rate_never_negative_and_throttle_iff_over_quota(steps, quota):
    sensor = Sensor(Rate(CONFIG), bound=quota, now_ms=0)
    reference = Rate(CONFIG)
    now = 0
    for dt, value in steps:
        now += dt
        violation = sensor.record(value, now)
        reference.record(value, now)
        observed = reference.measure(now)
        assert observed >= 0.0
        assert (violation is not None) == (observed > quota)
        if violation is not None:
            assert violation.value == pytest.approx(observed)
            assert violation.throttle_time_ms >= 0
    assert reference.window_size_ms(now) >= (CONFIG.samples - 1) * CONFIG.window_ms
