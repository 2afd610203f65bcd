"""ProducerIdQuotaManager (KIP-936): who is tracked, when a new id is throttled and for how long, what
"known" means, and what memory a user costs.

Most tests use a window W of 4 s in 4 layers: an admission slot and a Bloom layer every 1000 ms, each
layer gone 4000 ms after it began; `producer_ids_rate` R admits floor(R) new ids per W.
"""

import math

import pytest

from minibroker.quotas.bloom import CURRENT, OLDER
from minibroker.quotas.producer_id_quota import MAX_THROTTLE_TIME_MS, ProducerIdQuotaManager, TrackResult

W = 4000


def manager(**kwargs):
    kwargs.setdefault("window_size_seconds", W / 1000)
    kwargs.setdefault("layer_count", 4)
    return ProducerIdQuotaManager(**kwargs)


def admit_all(m, user, pids, now_ms, has_state=None):
    results = [m.track(user, pid, now_ms, has_state) for pid in pids]
    assert all(r.admitted and not r.known for r in results), results
    return results


NO_STATE = lambda: False  # noqa: E731  (a broker where no id has producer state)


# -- who is tracked ------------------------------------------------------------------------------


def test_unlimited_users_are_not_tracked():
    m = manager()
    calls = []
    for pid in range(1000):
        r = m.track("alice", pid, 0, lambda: calls.append(1) or False)
        assert r == TrackResult(known=False, throttle_time_ms=0, tracked=False)
    assert calls == []  # producer state is not even asked
    assert not m.is_tracked("alice")
    assert m.tracked_principals() == []
    assert m.memory_bytes() == 0 and m.memory_bytes("alice") == 0
    assert m.metrics(0) == []


def test_user_quota_overrides_the_default():
    m = manager()
    m.update_quota(None, 1.0)
    m.update_quota("alice", 2.0)
    assert m.quota_for("alice") == 2.0
    assert m.quota_for("bob") == 1.0
    admit_all(m, "alice", range(2), 0)
    assert m.track("alice", 1000, 0).throttle_time_ms > 0
    admit_all(m, "bob", range(1), 0)
    assert m.track("bob", 1000, 0).throttle_time_ms > 0


def test_removing_quotas_falls_back_then_untracks():
    m = manager()
    m.update_quota(None, 1.0)
    m.update_quota("alice", 5.0)
    m.track("alice", 1, 0)
    assert m.quota_for("alice") == 5.0
    m.update_quota("alice", None)
    assert m.quota_for("alice") == 1.0
    assert m.is_tracked("alice")
    m.update_quota(None, None)
    assert m.quota_for("alice") is None
    # unlimited now: its state is dropped at once, and it stays untracked
    assert not m.is_tracked("alice")
    assert m.track("alice", 1, 0).tracked is False
    assert m.memory_bytes() == 0


def test_only_the_user_default_applies_to_unknown_users():
    m = manager()
    m.update_quota("alice", 1.0)
    assert m.track("bob", 1, 0).tracked is False
    assert m.track("alice", 1, 0).tracked is True


@pytest.mark.parametrize("bad", [0, -1.0, math.nan, math.inf])
def test_invalid_quota_values(bad):
    with pytest.raises(ValueError):
        manager().update_quota("alice", bad)


@pytest.mark.parametrize("kwargs, key", [
    ({"window_size_seconds": 0}, "window.size.seconds"),
    ({"layer_count": 0}, "layer.count"),
    ({"window_size_seconds": 0.002, "layer_count": 3}, "layer.count"),  # more layers than ms in W
    ({"false_positive_rate": 1.0}, "false.positive.rate"),
    ({"false_positive_rate": 0.0}, "false.positive.rate"),
    ({"max_layers_per_principal": 0}, "max_layers_per_principal"),
])
def test_constructor_validation_names_the_setting(kwargs, key):
    with pytest.raises(ValueError, match=key.replace(".", r"\.")):
        ProducerIdQuotaManager(**kwargs)


def test_defaults_follow_the_kip():
    m = ProducerIdQuotaManager()
    assert m.window_ms == 3_600_000  # producer.id.quota.window.size.seconds = 3600
    assert m.layer_count == 4  # KIP-936's worked example
    assert m.false_positive_rate == 0.001
    assert m.max_layers_per_principal == 16
    # layers are sized for rate / layer count ids (the prototype): 100 per hour -> 25 -> the floor of 32
    assert m.shape_for(100).capacity == 32
    assert m.shape_for(10_000).capacity == 2500
    # ... at most 65,536 ids, so a huge rate does not allocate huge layers up front
    assert m.shape_for(1e12).capacity == 65_536
    assert ProducerIdQuotaManager(min_layer_capacity=1).shape_for(0.5).capacity == 1


# -- the contract: floor(R) new ids per W ------------------------------------------------------------


def test_the_seeds_example_100_per_hour():
    """"User-A has producer_ids_rate 100 PID per 1hr ... the leader will only store 100 PIDs in 1
    hour and throttle any unseen PID": the 101st new id in the hour is throttled until a slot frees,
    and admitted when it retries then."""
    hour = 3_600_000
    m = ProducerIdQuotaManager()  # W = 1 h in 4 layers of 15 min
    m.update_quota("User-A", 100)
    t0 = 1_700_000_000_000 - 1_700_000_000_000 % (hour // 4)  # a slot boundary, to read the figures
    for i in range(100):  # one every 30 s: the 100th at t0 + 49.5 min
        assert m.track("User-A", i, t0 + i * 30_000, NO_STATE).admitted
    r = m.track("User-A", 100, t0 + 100 * 30_000, NO_STATE)  # 50 min in: the 101st
    assert not r.known and r.throttle_time_ms > 0
    # The first slot (t0 .. t0 + 15 min, 30 admissions) stops counting once it lies entirely more
    # than an hour back: at t0 + 1 h 15 min - 1 ms.
    assert 100 * 30_000 + r.throttle_time_ms == hour + hour // 4 - 1
    retry_at = t0 + 100 * 30_000 + r.throttle_time_ms
    assert m.track("User-A", 100, retry_at - 1, NO_STATE).throttle_time_ms == 1
    assert m.track("User-A", 100, retry_at, NO_STATE).admitted
    assert m.track("User-A", 100, retry_at, lambda: True).known  # from now on it is known
    # 30 slots freed with that slot: 29 more fit, the 31st waits for the next slot
    admit_all(m, "User-A", range(1000, 1029), retry_at, NO_STATE)
    assert m.track("User-A", 2000, retry_at, NO_STATE).throttle_time_ms == hour // 4


@pytest.mark.parametrize("rate, per_window", [(1, 1), (2, 2), (2.5, 2), (2.999, 2), (3, 3), (100, 100)])
def test_a_burst_admits_floor_rate_ids(rate, per_window):
    m = manager()
    m.update_quota("alice", rate)
    admit_all(m, "alice", range(per_window), 0)
    r = m.track("alice", 10**6, 0)
    # all in slot 0, which leaves the lookback when now - W + 1 reaches 1000: at 1000 + W - 1
    assert r.throttle_time_ms == 1000 + W - 1
    assert m.tokens("alice", 0) == 0


def test_a_fraction_below_one_stretches_the_window():
    m = manager()
    m.update_quota("alice", 0.5)  # one new id per 2 W = 8 s
    assert m.track("alice", 1, 0).admitted
    r = m.track("alice", 2, 0)
    assert r.throttle_time_ms == 1000 + 2 * W - 1  # slot 0 counts until its end + T - 1
    assert m.track("alice", 2, 2 * W).throttle_time_ms == 999
    assert m.track("alice", 2, 1000 + 2 * W - 1).admitted
    m.update_quota("bob", 0.3)  # T = ceil(4000 / 0.3) = 13334 ms
    assert m.track("bob", 1, 0).admitted
    assert m.track("bob", 2, 0).throttle_time_ms == 1000 + 13_334 - 1


def test_throttle_time_is_the_exact_wait_for_the_oldest_slot():
    m = manager()
    m.update_quota("alice", 3)
    assert m.track("alice", 1, 500).admitted  # slot 0
    assert m.track("alice", 2, 1500).admitted  # slot 1
    assert m.track("alice", 3, 2500).admitted  # slot 2
    r = m.track("alice", 4, 3000)
    assert r.throttle_time_ms == 1000 + W - 1 - 3000  # slot 0 leaves at 4999
    assert m.track("alice", 4, 4998).throttle_time_ms == 1
    assert m.track("alice", 4, 4999).admitted
    assert m.track("alice", 5, 4999).throttle_time_ms == 2000 + W - 1 - 4999  # slot 1 next


def test_throttle_time_is_capped_at_int32():
    m = manager(window_size_seconds=3600)
    m.update_quota("alice", 1e-6)  # one id per 3.6e9 s
    m.track("alice", 1, 0)
    assert m.track("alice", 2, 0).throttle_time_ms == MAX_THROTTLE_TIME_MS


def test_rejected_ids_are_recorded_nowhere():
    m = manager()
    m.update_quota("alice", 1)
    admit_all(m, "alice", [1], 0)
    filter_ = m.filter_for("alice")
    before = filter_.layer_sizes()
    slots = m.window_for("alice").slots()
    assert m.track("alice", 500, 0).throttle_time_ms > 0
    assert filter_.locate(500, 0) not in (CURRENT, OLDER)
    assert filter_.layer_sizes() == before and m.window_for("alice").slots() == slots
    # its retry is judged afresh: still new, still throttled, for less time
    assert m.track("alice", 500, 10).throttle_time_ms == 1000 + W - 1 - 10


def test_users_are_throttled_independently():
    m = manager()
    m.update_quota(None, 1.0)
    admit_all(m, "alice", [1], 0)
    assert m.track("alice", 100, 0).throttle_time_ms > 0
    admit_all(m, "bob", [1], 0)  # the same id is new for bob, who has his own window


def test_quota_change_applies_at_once():
    m = manager()
    m.update_quota("alice", 1.0)
    admit_all(m, "alice", [1], 0)
    assert m.track("alice", 2, 0).throttle_time_ms > 0
    m.update_quota("alice", 3.0)
    admit_all(m, "alice", [2, 3], 0)  # the admission already made counts against the new quota
    assert m.track("alice", 4, 0).throttle_time_ms > 0


def test_quota_change_reshapes_new_layers_only():
    m = manager()
    m.update_quota("alice", 10.0)
    m.track("alice", 1, 0)
    filter_ = m.filter_for("alice")
    old_shape = m.shape_for(10.0)
    m.update_quota("alice", 4000.0)
    new_shape = m.shape_for(4000.0)
    assert new_shape.capacity == 1000 and old_shape.capacity == 32
    m.track("alice", 2, 500)  # same target layer, old shape
    assert [layer.shape for layer in filter_._layers] == [old_shape]
    m.track("alice", 3, 1000)  # rotated: the new layer has the new shape
    assert [layer.shape for layer in filter_._layers] == [old_shape, new_shape]
    for pid in (1, 2, 3):
        assert m.track("alice", pid, 1000).known


# -- known means known: producer state is the authority ----------------------------------------------


def test_an_id_with_producer_state_is_known_even_when_the_filter_never_saw_it():
    # The broker restarted (the filter is empty) or the producer was silent for longer than W.
    m = manager()
    m.update_quota("alice", 1)
    admit_all(m, "alice", [1], 0, NO_STATE)
    assert m.track("alice", 2, 0, NO_STATE).throttle_time_ms > 0  # alice is over her quota
    r = m.track("alice", 99, 0, lambda: True)  # 99 has producer state
    assert r == TrackResult(known=True, throttle_time_ms=0)
    assert m.filter_for("alice").contains(99, 0)  # learned back: the next batch is a filter hit
    assert m.totals()["known-from-state"] == 1
    assert m.tokens("alice", 0) == 0 and m.window_for("alice").slots() == [(0, 1)]  # not charged


def test_a_filter_claim_without_producer_state_is_a_false_positive_and_is_charged():
    m = manager()
    m.update_quota("alice", 2)
    admit_all(m, "alice", [7], 0, NO_STATE)
    # 7 is in the filter, but its producer state is gone (expired, its topic deleted ...): exactly
    # what a Bloom false positive looks like to the broker.
    r = m.track("alice", 7, 10, NO_STATE)
    assert r == TrackResult(known=False, throttle_time_ms=0, false_positive=True)
    assert m.window_for("alice").slots() == [(0, 2)]  # charged
    r = m.track("alice", 7, 20, NO_STATE)
    assert r.false_positive and r.throttle_time_ms > 0  # and throttled once the window is full
    assert m.totals()["false-positives"] == 2
    values = {name: value for _, name, value in m.metrics(20)}
    assert values["false-positives"] == 2


def test_real_bloom_false_positives_never_pass_uncharged():
    # Tiny layers (capacity 1, p = 0.5) claim most unseen ids: with producer state consulted, every
    # claim of an id without state is charged, so the window still admits exactly its allowance.
    m = manager(false_positive_rate=0.5, min_layer_capacity=1, max_layer_capacity=1)
    m.update_quota("alice", 50)
    admitted = false_positives = 0
    for pid in range(2000):
        r = m.track("alice", pid, 0, NO_STATE)
        admitted += r.admitted
        false_positives += r.false_positive
    assert admitted == 50
    assert false_positives > 100  # the filter did claim plenty of them
    # without producer state to ask (has_state None), the filter's word is taken: they pass
    trusting = manager(false_positive_rate=0.5, min_layer_capacity=1, max_layer_capacity=1)
    trusting.update_quota("alice", 50)
    passed = sum(trusting.track("alice", pid, 0).admitted for pid in range(2000))
    assert passed > 50


def test_known_ids_are_never_throttled():
    m = manager()
    m.update_quota("alice", 2)
    admit_all(m, "alice", [1, 2], 0, NO_STATE)
    assert m.track("alice", 99, 0, NO_STATE).throttle_time_ms > 0  # over quota for new ids
    for t in range(0, 30_000, 50):
        for pid in (1, 2):
            assert m.track("alice", pid, t, lambda: True) == TrackResult(known=True, throttle_time_ms=0)


def test_producer_state_is_asked_once_and_only_when_tracked():
    m = manager()
    m.update_quota("alice", 5)
    asked = []

    def has_state():
        asked.append(1)
        return True

    for pid in range(3):
        m.track("alice", pid, 0, has_state)
    assert len(asked) == 3


# -- remembering ids: layers, expiry, rejected alternative 8 --------------------------------------------


def test_layers_rotate_every_w_over_l_and_expire_at_w():
    m = manager()
    m.update_quota("alice", 100)
    for t in (0, 999, 1000, 2500, 3400):
        m.track("alice", t, t)
    assert m.filter_for("alice").layer_times() == [(0, 4000), (1000, 5000), (2500, 6500)]
    m.track("alice", 10_000, 4000)  # the first layer is gone at 4000
    assert m.filter_for("alice").layer_times()[0] == (1000, 5000)


def test_a_layer_extends_early_when_full():
    m = manager()
    m.update_quota("alice", 400)  # layers of 400 / 4 = 100 ids
    admit_all(m, "alice", range(250), 0)
    assert m.filter_for("alice").layer_sizes() == [100, 100, 50]


def test_long_lived_id_is_carried_into_the_newest_layer():
    # KIP-936 rejected alternative 8: without the re-add, a producer that keeps producing would
    # count as new once the layer that first saw it expired.
    m = manager()
    m.update_quota("alice", 1)
    assert m.track("alice", 7, 0).admitted
    filter_ = m.filter_for("alice")
    assert m.track("alice", 7, 2000).known  # only in the first layer: re-added to a new one
    assert filter_.layer_times() == [(0, 4000), (2000, 6000)]
    assert filter_.find(7, 2000) == [0, 1]
    assert m.track("alice", 7, 4500).known  # the first layer is gone; still known, nothing charged
    assert m.track("alice", 8, 4500).throttle_time_ms > 0  # slot 0 still counts until 4999


def test_a_producer_that_keeps_producing_is_counted_once():
    m = manager()
    m.update_quota("alice", 1)
    results = [m.track("alice", 42, t, lambda: True) for t in range(0, 200_000, 700)]
    assert results[0].known  # it had producer state from the start
    assert all(r == TrackResult(known=True, throttle_time_ms=0) for r in results)
    assert m.filter_for("alice").layer_count_live(200_000) <= 5


def test_id_seen_in_the_current_layer_is_not_re_added():
    m = manager()
    m.update_quota("alice", 10)
    m.track("alice", 7, 0)
    m.track("alice", 8, 1000)  # rotates: layer 2 starts at 1000
    assert m.track("alice", 7, 1500).known  # only in layer 1: re-added into layer 2
    sizes = m.filter_for("alice").layer_sizes()
    assert sizes == [1, 2]
    assert m.track("alice", 7, 1999).known  # now current: nothing more
    assert m.filter_for("alice").layer_sizes() == sizes


# -- memory: cleanup and bounds ------------------------------------------------------------------


def test_cleanup_removes_a_user_once_its_layers_and_counts_expired():
    m = manager()
    m.update_quota("alice", 1)
    m.track("alice", 1, 0)  # layer until 4000; slot 0 counts until 4999
    m.cleanup(4000)
    assert m.is_tracked("alice")  # no layer left, but its admission still counts
    assert m.filter_for("alice").is_empty(4000)
    m.cleanup(4998)
    assert m.is_tracked("alice")
    m.cleanup(4999)
    assert not m.is_tracked("alice")
    assert m.memory_bytes() == 0
    admit_all(m, "alice", [100], 4999)  # back with a fresh window


def test_next_cleanup_is_when_cleanup_next_drops_something():
    m = manager()
    changes = []
    m.on_change = lambda: changes.append(1)
    assert m.next_cleanup_ms() is None  # nothing tracked: nothing ever due
    m.update_quota("alice", 1)
    assert changes == []  # no user is tracked yet, so nothing can have become due sooner
    m.track("alice", 1, 0)  # layer until 4000; slot 0 counts until 4999
    assert changes == [1]  # a user newly tracked
    m.track("alice", 1, 10)
    assert changes == [1]  # a known id changes nothing that is due
    due = m.next_cleanup_ms()
    assert due == 4000
    m.cleanup(due - 1)
    assert m.filter_for("alice").layer_sizes() == [1]  # a millisecond early: nothing to drop
    m.cleanup(due)
    assert m.filter_for("alice").layer_sizes() == []
    assert m.next_cleanup_ms() == 4999
    m.cleanup(4998)
    assert m.is_tracked("alice")
    m.cleanup(4999)
    assert not m.is_tracked("alice") and m.next_cleanup_ms() is None


def test_a_rate_change_moves_the_next_cleanup_and_says_so():
    m = manager()
    m.update_quota("alice", 0.5)  # T = 2 W: an admission counts for 8000 ms
    m.track("alice", 1, 0)
    m.cleanup(4000)  # the layer is gone, the admission still counts
    assert m.next_cleanup_ms() == 8999
    changes = []
    m.on_change = lambda: changes.append(1)
    m.update_quota("alice", 2)  # T = W: it stops counting 4000 ms sooner
    assert changes == [1]
    assert m.next_cleanup_ms() == 4999


def test_cleanup_keeps_active_users():
    m = manager()
    m.update_quota(None, 10)
    m.track("alice", 1, 0)
    m.track("bob", 1, 0)
    m.track("bob", 1, 3000)  # re-added at 3000: bob's layer lives until 7000
    m.cleanup(5000)
    assert m.tracked_principals() == ["bob"]
    m.cleanup(7000)
    assert m.tracked_principals() == []


def test_a_storm_of_new_ids_costs_only_the_layers_the_quota_admits():
    m = ProducerIdQuotaManager()  # the KIP's defaults: W = 1 h, 4 layers
    m.update_quota("storm", 1000)  # layers of 250
    per_layer = m.shape_for(1000).m / 8
    admitted = rejected = 0
    memory_after_admissions = None
    for pid in range(100_000):
        r = m.track("storm", 10**9 + pid, 0, NO_STATE)
        admitted += r.admitted
        rejected += r.throttle_time_ms > 0
        if pid == 1000:
            memory_after_admissions = m.memory_bytes("storm")
    assert admitted == 1000 and rejected == 99_000
    assert m.filter_for("storm").layer_count_live(0) == 4  # 1000 ids in full layers of 250
    assert m.memory_bytes("storm") <= 4 * (per_layer + 200) + 1024
    assert m.memory_bytes("storm") == memory_after_admissions  # the 99,000 rejected took nothing


def test_sustained_storm_memory_stays_bounded():
    m = manager()  # W = 4 s, layers of 1 s
    m.update_quota("storm", 40)  # layers of 32 (the floor)
    per_layer = m.shape_for(40).m / 8
    pid = peak_layers = admitted = 0
    for t in range(0, 60_000, 10):  # 1000 new ids per second for a minute
        for _ in range(10):
            pid += 1
            admitted += m.track("storm", pid, t, NO_STATE).admitted
        peak_layers = max(peak_layers, m.filter_for("storm").layer_count_live(t))
        assert m.memory_bytes("storm") <= m.max_layers_per_principal * (per_layer + 200) + 1024
    assert peak_layers <= 2 * 4 + 2
    # 40 per W at most, and the slots free up at least every W + W / L
    assert 40 * 60_000 // 5000 <= admitted <= 40 * 60_000 // 4000 + 40


def test_layer_cap_bounds_memory_absolutely():
    m = manager(max_layers_per_principal=3)
    m.update_quota("alice", 10)
    for t in range(4):  # a new layer every second
        assert m.track("alice", t, t * 1000).admitted
    filter_ = m.filter_for("alice")
    assert filter_.layer_count_live(3000) == 3
    assert filter_.layer_times() == [(1000, 5000), (2000, 6000), (3000, 7000)]
    # the id in the dropped layer is unknown to the filter; producer state still makes it known
    assert m.track("alice", 0, 3000, lambda: True).known
    assert m.track("alice", 3, 3000).known


# -- metrics -------------------------------------------------------------------------------------


def test_metrics_are_in_ids_per_window():
    m = manager()
    m.update_quota("alice", 2.5)
    admit_all(m, "alice", [1, 2], 0)
    values = {name: value for user, name, value in m.metrics(0) if user == "alice"}
    assert set(values) == {"rate", "tokens", "throttle-time", "false-positives", "known-from-state",
                           "estimated-fpp", "memory-bytes"}
    assert values["rate"] == 2  # new ids in the last W
    assert values["tokens"] == 0
    assert math.isnan(values["throttle-time"])  # nothing throttled yet (Kafka's Avg)
    assert 0 < values["estimated-fpp"] < 1
    assert values["memory-bytes"] == m.memory_bytes("alice")
    t1 = m.track("alice", 3, 0).throttle_time_ms
    t2 = m.track("alice", 3, 500).throttle_time_ms
    values = {name: value for _, name, value in m.metrics(500)}
    assert values["throttle-time"] == pytest.approx((t1 + t2) / 2)
    values = {name: value for _, name, value in m.metrics(5000)}
    assert values["rate"] == 0 and values["tokens"] == 2
    assert m.totals() == {"admitted": 2, "rejected": 2, "false-positives": 0, "known-from-state": 0}


def test_metrics_only_for_tracked_users():
    m = manager()
    m.update_quota("alice", 1.0)
    m.track("alice", 1, 0)
    m.track("bob", 1, 0)
    assert {user for user, _, _ in m.metrics(0)} == {"alice"}
