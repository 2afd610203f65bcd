"""LayeredBloomFilter: rotation, expiry at exact times, full layers, the layer cap, shape changes."""

import pytest

from minibroker.quotas.bloom import ABSENT, CURRENT, OLDER, LayeredBloomFilter, Shape

# 4 layers over 4 s: a new target every 1000 ms, each layer gone 4000 ms after it began.
WINDOW_MS = 4000
LAYERS = 4


def make(shape=None, **kwargs):
    return LayeredBloomFilter(shape or Shape.from_np(100, 0.001), LAYERS, WINDOW_MS, **kwargs)


def test_empty_filter():
    f = make()
    assert f.is_empty(0)
    assert not f.contains(1, 0)
    assert f.find(1, 0) == []
    assert f.locate(1, 0) == ABSENT
    assert f.layer_count_live(0) == 0
    assert f.estimated_fpp(0) == 0.0


def test_first_add_creates_a_layer_anchored_at_now():
    f = make()
    assert f.add(7, 500) is True
    assert f.layer_times() == [(500, 4500)]
    assert f.contains(7, 500)
    assert f.find(7, 500) == [0]
    assert f.add(7, 600) is False  # already there: nothing changes, no new layer
    assert f.layer_times() == [(500, 4500)]


def test_rotation_happens_at_exactly_one_period():
    f = make()
    f.add(1, 0)
    f.add(2, 999)  # one period is 1000 ms: still the same target
    assert f.layer_times() == [(0, 4000)]
    f.add(3, 1000)  # now - created >= period: a new target
    assert f.layer_times() == [(0, 4000), (1000, 5000)]
    assert f.find(1, 1000) == [0]
    assert f.find(3, 1000) == [1]


def test_rotation_is_lazy_and_anchored_at_the_add():
    f = make()
    f.add(1, 0)
    f.add(2, 2500)  # nothing at 1000 or 2000: the next layer starts at 2500
    assert f.layer_times() == [(0, 4000), (2500, 6500)]
    f.add(3, 3499)
    assert f.layer_times() == [(0, 4000), (2500, 6500)]
    f.add(4, 3500)
    assert f.layer_times() == [(0, 4000), (2500, 6500), (3500, 7500)]


def test_period_that_is_not_a_whole_millisecond():
    f = LayeredBloomFilter(Shape.from_np(100, 0.001), 3, 1000)  # period 333.33 ms
    f.add(1, 0)
    f.add(2, 333)
    assert len(f.layer_times()) == 1
    f.add(3, 334)
    assert len(f.layer_times()) == 2


def test_expiry_boundary_is_half_open():
    f = make()
    f.add(1, 0)
    # live for 0 <= now < 4000
    assert f.contains(1, 3999)
    assert f.layer_count_live(3999) == 1
    assert not f.contains(1, 4000)
    assert f.layer_count_live(4000) == 0
    assert f.is_empty(4000)


def test_only_expired_layers_are_dropped():
    f = make()
    f.add(1, 0)
    f.add(2, 1000)
    f.add(3, 2000)
    assert f.find(1, 3999) == [0] and f.find(3, 3999) == [2]
    assert not f.contains(1, 4000)
    assert f.find(2, 4000) == [0]  # indexes are over live layers, oldest first
    assert f.find(3, 4000) == [1]
    assert f.layer_times() == [(1000, 5000), (2000, 6000)]
    assert f.contains(3, 5999) and not f.contains(3, 6000)


def test_full_target_gets_a_new_layer_at_the_same_time():
    shape = Shape.from_np(3, 0.01)
    f = make(shape)
    for pid in (10, 20, 30):
        f.add(pid, 0)
    assert f.layer_sizes() == [3]
    f.add(40, 0)
    assert f.layer_sizes() == [3, 1]
    assert f.layer_times() == [(0, 4000), (0, 4000)]
    for pid in (10, 20, 30, 40):
        assert f.contains(pid, 0)


def test_max_layers_drops_the_oldest():
    shape = Shape.from_np(1, 0.001)  # every layer is full after one PID
    f = make(shape, max_layers=2)
    f.add(1, 0)
    f.add(2, 0)
    assert f.layer_count_live(0) == 2
    f.add(3, 0)
    assert f.layer_count_live(0) == 2
    assert f.contains(2, 0) and f.contains(3, 0)
    assert f.find(1, 0) == []  # forgotten with its layer (a false positive is all but impossible here)


def test_locate_current_older_absent():
    f = make()
    f.add(1, 0)
    assert f.locate(1, 999) == CURRENT
    # the target is due to rotate: a hit there no longer counts as current
    assert f.locate(1, 1000) == OLDER
    f.add(2, 1000)  # rotates
    assert f.locate(2, 1000) == CURRENT
    assert f.locate(1, 1000) == OLDER
    assert f.locate(3, 1000) == ABSENT
    assert f.locate(1, 4000) == ABSENT  # its layer expired


def test_set_shape_applies_to_new_layers_only():
    small = Shape.from_np(10, 0.01)
    big = Shape.from_np(1000, 0.001)
    f = make(small)
    f.add(1, 0)
    f.set_shape(big)
    f.add(2, 500)  # same target: keeps the small shape until it rotates
    assert [layer.shape for layer in f._layers] == [small]
    f.add(3, 1000)
    assert [layer.shape for layer in f._layers] == [small, big]
    # lookups hash each layer with its own shape
    assert f.find(1, 1000) == [0]
    assert f.find(2, 1000) == [0]
    assert f.find(3, 1000) == [1]
    assert f.locate(1, 1000) == OLDER
    assert f.locate(3, 1000) == CURRENT
    assert f.locate(4, 1000) == ABSENT


def test_estimated_fpp_combines_live_layers():
    shape = Shape.from_np(100, 0.01)
    f = make(shape)
    for pid in range(50):
        f.add(pid, 0)
    for pid in range(100, 180):
        f.add(pid, 1000)
    p = [shape.probability(layer.estimate_n()) for layer in f._layers]
    assert len(p) == 2
    assert f.estimated_fpp(1000) == pytest.approx(1 - (1 - p[0]) * (1 - p[1]), rel=1e-12)
    assert 0 < f.estimated_fpp(1000) < 0.02
    # the first layer expires at 4000, leaving the second
    assert f.estimated_fpp(4000) == pytest.approx(p[1], rel=1e-12)
    assert f.estimated_fpp(5000) == 0.0


def test_memory_tracks_live_layers():
    shape = Shape.from_np(3600, 0.001)
    f = make(shape)
    empty = f.memory_bytes()
    f.add(1, 0)
    one = f.memory_bytes()
    f.add(2, 1000)
    two = f.memory_bytes()
    per_layer = shape.m / 8
    assert one - empty == pytest.approx(per_layer, rel=0.05)
    assert two - one == pytest.approx(per_layer, rel=0.05)
    f.cleanup(4000)
    assert f.memory_bytes() <= one + 8  # the layer list may keep its slot
    f.cleanup(5000)
    assert f.memory_bytes() <= empty + 8


def test_constructor_validation():
    shape = Shape.from_np(10, 0.01)
    with pytest.raises(ValueError):
        LayeredBloomFilter(shape, 0, 1000)
    with pytest.raises(ValueError):
        LayeredBloomFilter(shape, 1, 0)
    with pytest.raises(ValueError):
        LayeredBloomFilter(shape, 1, 1000, max_layers=0)


def test_layer_count_bounded_by_time_when_nothing_is_full():
    f = make(Shape.from_np(10_000, 0.001))
    for t in range(0, 100_000, 100):
        f.add(t, t)
        # layers start at least one period apart and live layer_count periods
        assert f.layer_count_live(t) <= LAYERS
    assert f.layer_count_live(99_900) == LAYERS
