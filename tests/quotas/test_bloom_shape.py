"""Shape arithmetic, PID hashing and bit indexes, checked against commons-collections' own numbers."""

import math

import mmh3
import pytest
from hypothesis import given
from hypothesis import strategies as st

from minibroker.quotas.bloom import BloomFilter, Shape, pid_hash


# (n, p) -> (m, k), worked by hand from m = ceil(n ln p / -(ln 2)^2), k = round(ln 2 * m / n):
#   5 * 2.302585 / 0.480453 = 23.96 -> 24;  0.693147 * 24 / 5 = 3.33 -> 3
#   1000 * 4.605170 / 0.480453 = 9585.06 -> 9586;  0.693147 * 9.586 = 6.64 -> 7
#   10000 * 6.907755 / 0.480453 = 143775.9 -> 143776;  0.693147 * 14.3776 = 9.97 -> 10
#   3600 * 6.907755 / 0.480453 = 51759.3 -> 51760;  0.693147 * 14.378 = 9.97 -> 10
#   1 * 0.693147 / 0.480453 = 1.44 -> 2;  0.693147 * 2 = 1.39 -> 1
#   100 * 1.098612 / 0.480453 = 228.66 -> 229;  0.693147 * 2.29 = 1.59 -> 2
@pytest.mark.parametrize(
    ("n", "p", "m", "k"),
    [
        (5, 0.1, 24, 3),
        (1000, 0.01, 9586, 7),
        (10000, 0.001, 143776, 10),
        (3600, 0.001, 51760, 10),
        (1, 0.5, 2, 1),
        (100, 1 / 3, 229, 2),
    ],
)
def test_from_np_matches_hand_computed(n, p, m, k):
    shape = Shape.from_np(n, p)
    assert (shape.m, shape.k) == (m, k)
    assert shape.capacity == shape.estimated_max_n == n
    assert shape.target_p == p


def test_capacity_of_a_bare_shape_is_the_n_its_k_suits():
    # n = max(1, round(m ln 2 / k))
    assert Shape(9, 1).capacity == 6  # 6.24
    assert Shape(144, 10).capacity == 10  # 9.98
    assert Shape(1, 2).capacity == 1  # 0.35, clamped
    assert Shape(9, 1, n=3).capacity == 3


def test_from_np_k_is_at_least_one():
    # p close to 1: ln 2 * m / n < 0.5
    shape = Shape.from_np(1000, 0.9)
    assert shape.k == 1
    assert shape.m == math.ceil(1000 * math.log(0.9) / -(math.log(2) ** 2))


@pytest.mark.parametrize(("n", "p"), [(0, 0.1), (-1, 0.1), (10, 0.0), (10, 1.0), (10, -0.5)])
def test_from_np_rejects_bad_arguments(n, p):
    with pytest.raises(ValueError):
        Shape.from_np(n, p)


def test_shape_rejects_bad_m_k():
    with pytest.raises(ValueError):
        Shape(0, 1)
    with pytest.raises(ValueError):
        Shape(10, 0)


def test_probability_formula():
    shape = Shape.from_np(1000, 0.01)
    assert shape.probability(0) == 0.0
    expected = (1 - math.exp(-7 * 1000 / 9586)) ** 7
    assert shape.probability(1000) == pytest.approx(expected, rel=1e-12)
    # at its capacity a from_np shape is at (or just under) its target p
    assert shape.probability(1000) <= 0.01 * 1.01
    assert shape.probability(1000) == pytest.approx(0.01, rel=0.05)
    assert shape.probability(500) < shape.probability(1000) < shape.probability(2000)
    with pytest.raises(ValueError):
        shape.probability(-1)


def test_estimate_n_formula():
    shape = Shape.from_np(1000, 0.01)  # m 9586, k 7
    assert shape.estimate_n(0) == 0.0
    c = 4000
    assert shape.estimate_n(c) == pytest.approx(-(9586 / 7) * math.log(1 - c / 9586), rel=1e-12)
    assert shape.estimate_n(9586) == math.inf


def test_shape_equality_is_m_and_k():
    assert Shape(100, 3) == Shape(100, 3, n=7)
    assert hash(Shape(100, 3)) == hash(Shape(100, 3, n=7))
    assert Shape(100, 3) != Shape(100, 4)
    assert Shape(100, 3) != Shape(101, 3)


# -- hashing and indexes -------------------------------------------------------------------------


def test_pid_hash_is_murmur3_x64_128_of_big_endian_int64():
    for pid in (0, 1, -1, 123456789, 2**63 - 1, -(2**63)):
        h = mmh3.hash128(pid.to_bytes(8, "big", signed=True), 0, signed=False)
        assert pid_hash(pid) == (h & (2**64 - 1), h >> 64)
    # pinned, so a change of seed or encoding cannot slip through
    assert pid_hash(123456789) == (15427398295772944201, 17340100607624858771)


def test_pid_outside_int64_is_rejected():
    import struct

    with pytest.raises(struct.error):
        pid_hash(2**63)


def test_enhanced_double_hasher_vector_from_commons():
    # commons EnhancedDoubleHasherTest: new EnhancedDoubleHasher(1, 1) over Shape.fromKM(17, 72)
    expected = [1, 0, 71, 71, 1, 6, 15, 29, 49, 4, 39, 11, 65, 58, 63, 9, 41]
    assert Shape(72, 17).indexes_from_hash(1, 1) == expected


def reference_indexes(initial: int, increment: int, m: int, k: int) -> list[int]:
    """commons EnhancedDoubleHasher.forEachIndex, step by step, including the k > m branch."""
    index = initial % m
    inc = increment % m
    out = []
    if k > m:
        j = k
        while j > 0:
            block = min(j, m)
            j -= block
            for i in range(block):
                out.append(index)
                index -= inc
                index = index + m if index < 0 else index
                inc -= i
                inc = inc + m if inc < 0 else inc
    else:
        for i in range(k):
            out.append(index)
            index -= inc
            index = index + m if index < 0 else index
            inc -= i
            inc = inc + m if inc < 0 else inc
    return out


@given(
    st.integers(0, 2**64 - 1),
    st.integers(0, 2**64 - 1),
    st.integers(1, 5000),
    st.integers(1, 40),
)
def test_indexes_equal_the_commons_loop(initial, increment, m, k):
    assert Shape(m, k).indexes_from_hash(initial, increment) == reference_indexes(initial, increment, m, k)


@given(st.integers(-(2**63), 2**63 - 1))
def test_indexes_of_a_pid_use_its_hash(pid):
    shape = Shape.from_np(1000, 0.01)
    h1, h2 = pid_hash(pid)
    xs = shape.indexes(pid)
    assert xs == reference_indexes(h1, h2, shape.m, shape.k)
    assert all(0 <= x < shape.m for x in xs)


# -- the plain filter ----------------------------------------------------------------------------


def test_bloom_filter_add_contains_cardinality():
    shape = Shape.from_np(100, 0.01)
    bf = BloomFilter(shape)
    assert bf.cardinality() == 0 and bf.is_empty() and bf.estimate_n() == 0.0
    assert not bf.contains(42)
    assert bf.add(42) is True
    assert bf.contains(42)
    assert bf.cardinality() == len(set(shape.indexes(42)))
    assert bf.n_added == 1
    assert bf.add(42) is False  # nothing new: not counted again
    assert bf.n_added == 1
    for pid in range(1000, 1099):
        bf.add(pid)
    assert bf.is_full() == (bf.n_added >= 100)
    # the running count equals a recount of the bits
    assert bf.cardinality() == sum(bin(b).count("1") for b in bf.bits)
    # estimate_n from cardinality is close to the true count at this fill
    assert bf.estimate_n() == pytest.approx(bf.n_added, rel=0.1)
    assert bf.estimated_fpp() == pytest.approx((bf.cardinality() / shape.m) ** shape.k, rel=1e-9)


def test_bloom_filter_memory_is_m_bits_plus_a_constant():
    for n in (10, 3600, 100_000):
        shape = Shape.from_np(n, 0.001)
        bf = BloomFilter(shape)
        assert len(bf.bits) == math.ceil(shape.m / 8)
        overhead = bf.memory_bytes() - shape.m / 8
        assert 0 <= overhead <= 200
        if n >= 3600:
            assert bf.memory_bytes() <= 1.10 * shape.m / 8
