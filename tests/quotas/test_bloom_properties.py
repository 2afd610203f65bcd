"""Bloom filter properties: never a false negative; the false-positive rate the shape promises."""

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from minibroker.quotas.bloom import BloomFilter, LayeredBloomFilter, Shape

pids = st.integers(-(2**63), 2**63 - 1)


@given(st.lists(pids, max_size=300), st.integers(1, 200), st.sampled_from([0.5, 0.1, 0.01, 0.001]))
def test_no_false_negatives(added, n, p):
    bf = BloomFilter(Shape.from_np(n, p))  # often far past capacity: still no false negative
    for pid in added:
        bf.add(pid)
    for pid in added:
        assert bf.contains(pid)
    assert bf.cardinality() == sum(bin(b).count("1") for b in bf.bits)


# Each step: wait `dt` ms, then add a PID (new or one added before) or just look.
steps = st.lists(
    st.tuples(st.integers(0, 700), st.one_of(pids, st.integers(0, 20)), st.booleans()),
    max_size=80,
)


@settings(max_examples=100)
@given(steps, st.integers(1, 8), st.integers(1, 30), st.sampled_from([None, 200]))
def test_layered_no_false_negatives_while_the_layer_lives(ops, layer_count, capacity, max_layers):
    window_ms = 2000
    f = LayeredBloomFilter(Shape.from_np(capacity, 0.01), layer_count, window_ms, max_layers=max_layers)
    expires: dict[int, int] = {}  # pid -> latest expiry of a layer it was added to
    now = 0
    for dt, pid, do_add in ops:
        now += dt
        if do_add:
            f.add(pid, now)
            # the PID is now in the target, the newest layer
            expires[pid] = max(expires.get(pid, 0), f.layer_times()[-1][1])
        for known, until in expires.items():
            if now < until:
                assert f.contains(known, now), (known, now, until)
                assert f.find(known, now)
        # and never a live layer past its expiry
        f.cleanup(now)
        assert all(created <= now < exp for created, exp in f.layer_times())


def test_measured_false_positive_rate_matches_the_shape():
    # 10,000 PIDs handed out in a block, as Kafka's producer-id manager does, then a million random
    # PIDs never added: the share reported present is the shape's p, within 20%.
    shape = Shape.from_np(10_000, 0.001)
    bf = BloomFilter(shape)
    base = 7_000_000
    for pid in range(base, base + 10_000):
        bf.add(pid)
    rng = random.Random(936)
    probes = 1_000_000
    contains = bf.contains
    false_positives = 0
    for _ in range(probes):
        pid = rng.getrandbits(62) + 2**40  # far from the block: never an added PID
        if contains(pid):
            false_positives += 1
    rate = false_positives / probes
    assert abs(rate - 0.001) <= 0.2 * 0.001, rate
    # and the shape's own prediction at its load agrees as well
    assert abs(rate - shape.probability(10_000)) <= 0.2 * shape.probability(10_000)
