"""The producer-id quota's admission window against a naive reference that keeps exact timestamps.

The contract (minibroker.quotas.producer_id_quota): with allowance A = floor(R) (1 below R = 1) over a lookback
T = W (W / R below 1), no interval of length T ever holds more than A admissions. The implementation
counts per slot of W / L; these properties check, for arbitrary rates, layer counts and arrival times
(including several at one millisecond and a clock that stands still):

1. conservative: every sliding interval [a, a + T) holds at most A admitted ids (exact timestamps);
2. not more conservative than one slot: an id is rejected only if the exact count of admissions in
   (t - T - W/L, t] already reaches A;
3. the throttle time is exact: retried at t + throttle - 1 it is still rejected, at t + throttle it is
   admitted (nothing else admitted meanwhile);
4. the manager, with producer state answering "no" for every id, admits exactly what the window does.
"""

import bisect
import copy
import math

from hypothesis import given, settings
from hypothesis import strategies as st

from minibroker.quotas.producer_id_quota import AdmissionWindow, ProducerIdQuotaManager, allowance, lookback_ms

rates = st.one_of(
    st.integers(1, 12).map(float),
    st.floats(0.05, 12.0, allow_nan=False, allow_infinity=False),
)
arrivals = st.lists(st.integers(0, 3000), min_size=1, max_size=120).map(lambda gaps: [sum(gaps[: i + 1]) for i in range(len(gaps))])


def max_in_any_interval(times: list[int], length: int) -> int:
    """The most timestamps any half-open interval [a, a + length) holds (exact, sorted input)."""
    best = 0
    for i, t in enumerate(times):
        best = max(best, bisect.bisect_left(times, t + length) - i)
    return best


@settings(max_examples=300, deadline=None)
@given(rate=rates, window_ms=st.integers(4, 20_000), layers=st.integers(1, 8), times=arrivals)
def test_the_window_is_conservative_and_at_most_one_slot_too_strict(rate, window_ms, layers, times):
    layers = min(layers, window_ms)
    window = AdmissionWindow(window_ms, layers)
    limit, lookback = allowance(rate), lookback_ms(rate, window_ms)
    slot_ms = math.ceil(window_ms / layers)
    admitted: list[int] = []
    for t in times:
        wait = window.admit_or_wait(t, rate)
        if wait == 0:
            admitted.append(t)
        else:
            # 2. rejected only when the exact count one slot further back is already full
            recent = len(admitted) - bisect.bisect_right(admitted, t - lookback - slot_ms)
            assert recent >= limit, (t, admitted, limit)
    # 1. the guarantee, for every sliding interval of length T
    assert max_in_any_interval(admitted, lookback) <= limit


@settings(max_examples=300, deadline=None)
@given(rate=rates, window_ms=st.integers(4, 20_000), layers=st.integers(1, 8), times=arrivals)
def test_the_throttle_time_is_exact(rate, window_ms, layers, times):
    layers = min(layers, window_ms)
    window = AdmissionWindow(window_ms, layers)
    for t in times:
        wait = window.admit_or_wait(t, rate)
        if wait == 0:
            continue
        early, on_time = copy.deepcopy(window), copy.deepcopy(window)
        if wait > 1:
            assert early.admit_or_wait(t + wait - 1, rate) > 0
        assert on_time.admit_or_wait(t + wait, rate) == 0


@settings(max_examples=100, deadline=None)
@given(rate=rates, window_ms=st.integers(4, 20_000), layers=st.integers(1, 8), times=arrivals)
def test_the_manager_admits_what_the_window_admits(rate, window_ms, layers, times):
    layers = min(layers, window_ms)
    m = ProducerIdQuotaManager(window_size_seconds=window_ms / 1000, layer_count=layers)
    m.update_quota("alice", rate)
    window = AdmissionWindow(window_ms, layers)
    for pid, t in enumerate(times):
        r = m.track("alice", pid, t, lambda: False)
        assert not r.known
        assert r.throttle_time_ms == window.admit_or_wait(t, rate)
