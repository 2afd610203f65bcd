"""Bloom filters for the producer-id quota (KIP-936): a plain filter and a time-layered one.

Follows Apache commons-collections 4.5 `bloomfilter` (the library the KIP-936 prototype,
Claudenw/kafka `ProducerIDQuotaManagerCache`, builds on):

* `Shape` -- `Shape.fromNP`: m = ceil(n ln p / -(ln 2)^2), k = round(ln 2 * m / n) (Java rounding,
  half up; at least 1); P(n) = (1 - e^(-kn/m))^k; estimateN(c) = -(m/k) ln(1 - c/m).
* Bit indexes -- `EnhancedDoubleHasher`: idx = initial mod m, inc = increment mod m (both unsigned),
  then k-1 times ``idx -= inc; inc -= i`` wrapping into [0, m). For k <= m that loop equals the closed
  form idx_i = (initial - i*increment + i(i-1)(i-2)/6) mod m, which is what the hot path computes
  (one expression per index, no wrap tests); k > m keeps the library's block-restarting loop.
* The two 64-bit hash halves come from MurmurHash3 x64-128 (mmh3, seed 0) of the PID as 8 big-endian
  signed bytes, Kafka's on-wire int64: h1 is `initial`, h2 is `increment`. Stable across processes,
  unlike `hash()`.
* `LayeredBloomFilter` -- `LayerManager`/`LayeredBloomFilter`: the target (newest) layer is extended
  (`advanceOnCount` or the prototype's timer predicate) before an add, expired layers are dropped
  (`Cleanup.removeIf`), and `onMaxSize` caps the number of layers. There are no timers here: every
  method takes `now_ms` and does the due rotation and cleanup itself.

Time boundaries are half-open, like Kafka's sample windows: a layer created at t with window W is live
for t <= now < t + W (it is gone AT t + W), and the target rotates once now >= t + W / layer_count.

Pure: no trio, no clock, no threads. Memory is a `bytearray` of ceil(m/8) bytes per layer plus a fixed
object overhead (see `BloomFilter.memory_bytes`).
"""

from __future__ import annotations

import math
import struct
import sys
from collections.abc import Iterable

import mmh3

__all__ = [
    "ABSENT",
    "CURRENT",
    "HASH_SEED",
    "OLDER",
    "BloomFilter",
    "LayeredBloomFilter",
    "Shape",
    "pid_hash",
]

HASH_SEED = 0

_LN2 = math.log(2.0)
# ln(1 / 2^ln 2) = -(ln 2)^2, commons' DENOMINATOR.
_DENOMINATOR = -_LN2 * _LN2
_PID = struct.Struct(">q")
_pack_pid = _PID.pack
# Unsigned (h1, h2) of MurmurHash3_x64_128; the fastest mmh3 entry point for this (about 0.1 us).
_murmur = mmh3.mmh3_x64_128_utupledigest

# LayeredBloomFilter.locate results.
ABSENT = 0
OLDER = 1  # held only by layers that are no longer the target
CURRENT = 2  # held by the target layer, which is still inside its rotation period


def pid_hash(pid: int) -> tuple[int, int]:
    """(initial, increment) for `pid`: MurmurHash3 x64-128 of its 8-byte big-endian form."""
    return _murmur(_pack_pid(pid), HASH_SEED)


class Shape:
    """Number of bits `m` and hash functions `k`, plus the capacity `n` used to decide "full".

    `capacity` (also `estimated_max_n`) is the n the shape was built for by `from_np`, i.e. the number
    of items at which the false-positive probability reaches the requested p. A shape made directly
    from (m, k) gets n = max(1, round(m ln 2 / k)), the n for which that k is the optimal choice.
    """

    __slots__ = ("m", "k", "capacity", "target_p", "nbytes", "_terms")

    def __init__(self, m: int, k: int, n: int | None = None, p: float | None = None) -> None:
        if m < 1:
            raise ValueError(f"number of bits must be >= 1: {m}")
        if k < 1:
            raise ValueError(f"number of hash functions must be >= 1: {k}")
        self.m = m
        self.k = k
        self.capacity = n if n is not None else max(1, math.floor(m * _LN2 / k + 0.5))
        if self.capacity < 1:
            raise ValueError(f"capacity must be >= 1: {self.capacity}")
        # The requested p for from_np shapes; otherwise the probability at capacity.
        self.target_p = p if p is not None else self.probability(self.capacity)
        self.nbytes = (m + 7) >> 3
        # (i, -i, tetrahedral term) for the closed form; None selects the k > m loop.
        self._terms = tuple((i, i * (i - 1) * (i - 2) // 6) for i in range(k)) if k <= m else None

    @classmethod
    def from_np(cls, n: int, p: float) -> Shape:
        """commons `Shape.fromNP`: the smallest m for n items at probability p, and the best k."""
        if n < 1:
            raise ValueError(f"number of items must be >= 1: {n}")
        if not 0.0 < p < 1.0:
            raise ValueError(f"probability must be in (0, 1): {p}")
        m = math.ceil(n * math.log(p) / _DENOMINATOR)
        # Java's Math.round (half up), not Python's banker's round.
        k = max(1, math.floor(_LN2 * m / n + 0.5))
        return cls(m, k, n, p)

    @property
    def estimated_max_n(self) -> int:
        return self.capacity

    def probability(self, n: float) -> float:
        """False-positive probability after `n` items: (1 - e^(-kn/m))^k."""
        if n < 0:
            raise ValueError(f"number of items must be >= 0: {n}")
        if n == 0:
            return 0.0
        return (-math.expm1(-self.k * n / self.m)) ** self.k

    def estimate_n(self, cardinality: int) -> float:
        """Items that would set `cardinality` bits: -(m/k) ln(1 - c/m); inf when every bit is set."""
        if cardinality >= self.m:
            return math.inf
        return -(self.m / self.k) * math.log1p(-cardinality / self.m)

    def indexes(self, pid: int) -> list[int]:
        """The k bit indexes of `pid` (duplicates kept, in EnhancedDoubleHasher order)."""
        h1, h2 = _murmur(_pack_pid(pid), HASH_SEED)
        return self.indexes_from_hash(h1, h2)

    def indexes_from_hash(self, initial: int, increment: int) -> list[int]:
        m = self.m
        a = initial % m
        b = increment % m
        terms = self._terms
        if terms is not None:
            return [(a - i * b + t) % m for i, t in terms]
        return _indexes_k_over_m(a, b, m, self.k)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Shape):
            return self.m == other.m and self.k == other.k
        return NotImplemented

    def __hash__(self) -> int:
        return hash((self.m, self.k))

    def __repr__(self) -> str:
        return f"Shape(m={self.m}, k={self.k}, capacity={self.capacity})"


def _indexes_k_over_m(index: int, inc: int, m: int, k: int) -> list[int]:
    # commons restarts the tetrahedral counter for every block of m indexes when k > m.
    out: list[int] = []
    remaining = k
    while remaining > 0:
        block = min(remaining, m)
        remaining -= block
        for i in range(block):
            out.append(index)
            index -= inc
            if index < 0:
                index += m
            inc -= i
            if inc < 0:
                inc += m
    return out


def _bits_hold(bits: bytearray, xs: Iterable[int]) -> bool:
    for x in xs:
        if not bits[x >> 3] >> (x & 7) & 1:
            return False
    return True


class BloomFilter:
    """A simple Bloom filter over a `bytearray` of ceil(m/8) bytes.

    `cardinality()` (bits set) is kept as a running count, so it and `estimate_n()` are O(1).
    `n_added` counts the adds that set at least one new bit; the layered filter calls a layer full
    when it reaches the shape's capacity.
    """

    __slots__ = ("shape", "bits", "n_added", "_cardinality")

    def __init__(self, shape: Shape) -> None:
        self.shape = shape
        self.bits = bytearray(shape.nbytes)
        self.n_added = 0
        self._cardinality = 0

    def add(self, pid: int) -> bool:
        """Add `pid`; True when that changed the filter (False: it was already contained)."""
        return self.add_indexes(self.shape.indexes(pid))

    def add_indexes(self, xs: Iterable[int]) -> bool:
        bits = self.bits
        newly_set = 0
        for x in xs:
            byte = x >> 3
            mask = 1 << (x & 7)
            if not bits[byte] & mask:
                bits[byte] |= mask
                newly_set += 1
        if newly_set:
            self._cardinality += newly_set
            self.n_added += 1
            return True
        return False

    def contains(self, pid: int) -> bool:
        h1, h2 = _murmur(_pack_pid(pid), HASH_SEED)
        return self.contains_hash(h1, h2)

    def contains_hash(self, initial: int, increment: int) -> bool:
        shape = self.shape
        terms = shape._terms
        if terms is None:
            return _bits_hold(self.bits, shape.indexes_from_hash(initial, increment))
        # Computing each index only when the previous one hit: an absent item usually fails on the
        # first or second of k.
        bits = self.bits
        m = shape.m
        a = initial % m
        b = increment % m
        for i, t in terms:
            x = (a - i * b + t) % m
            if not bits[x >> 3] >> (x & 7) & 1:
                return False
        return True

    def cardinality(self) -> int:
        return self._cardinality

    def estimate_n(self) -> float:
        return self.shape.estimate_n(self._cardinality)

    def estimated_fpp(self) -> float:
        """P(estimated n); equal to (bits set / m)^k."""
        return self.shape.probability(self.estimate_n())

    def is_full(self) -> bool:
        return self.n_added >= self.shape.capacity

    def is_empty(self) -> bool:
        return self._cardinality == 0

    def memory_bytes(self) -> int:
        """The bit array plus this object's own fixed overhead (CPython `sys.getsizeof`)."""
        return sys.getsizeof(self) + sys.getsizeof(self.bits)


class _Layer(BloomFilter):
    __slots__ = ("created_at_ms", "expires_at_ms")

    def __init__(self, shape: Shape, created_at_ms: int, expires_at_ms: int) -> None:
        super().__init__(shape)
        self.created_at_ms = created_at_ms
        self.expires_at_ms = expires_at_ms


class LayeredBloomFilter:
    """Time-layered Bloom filter: remembers an item for `window_ms` after the layer that took it began.

    * The target is the newest layer. Before an add it is replaced by a fresh layer when the rotation
      period `window_ms / layer_count` has passed since it was created (now >= created + period), when
      it is full (`n_added` reached its shape's capacity), or when there is no live layer.
    * Each layer expires at created + window_ms; an expired layer is dropped by any call with a
      `now_ms` at or past that time (live iff now < expires).
    * Layers are created lazily, on the first add at or after a rotation is due, and anchored at that
      add's `now_ms` (as Kafka's sampled stats start a new sample at the recording time); so the
      filter never holds an empty layer and an idle filter holds nothing.
    * `max_layers` (commons `Cleanup.onMaxSize`): adding a layer beyond it drops the oldest first.
      This bounds memory absolutely; the cost is that items only in the dropped layer are forgotten.
    * `set_shape` changes the shape of layers created from then on; existing layers keep theirs.
    """

    __slots__ = ("shape", "layer_count", "window_ms", "max_layers", "_layers")

    def __init__(
        self,
        shape: Shape,
        layer_count: int,
        window_ms: int,
        *,
        max_layers: int | None = None,
    ) -> None:
        if layer_count < 1:
            raise ValueError(f"layer_count must be >= 1: {layer_count}")
        if window_ms < 1:
            raise ValueError(f"window_ms must be >= 1: {window_ms}")
        if max_layers is not None and max_layers < 1:
            raise ValueError(f"max_layers must be >= 1: {max_layers}")
        self.shape = shape
        self.layer_count = layer_count
        self.window_ms = window_ms
        self.max_layers = max_layers
        self._layers: list[_Layer] = []  # oldest first

    # -- maintenance -------------------------------------------------------------------------

    def set_shape(self, shape: Shape) -> None:
        self.shape = shape

    def cleanup(self, now_ms: int) -> None:
        """Drop every layer that has expired at `now_ms` (expires_at_ms <= now_ms)."""
        layers = self._layers
        if layers and layers[0].expires_at_ms <= now_ms:
            drop = 1
            while drop < len(layers) and layers[drop].expires_at_ms <= now_ms:
                drop += 1
            del layers[:drop]

    def next_expiry_ms(self) -> int | None:
        """When the oldest layer expires (None when there is none)."""
        return self._layers[0].expires_at_ms if self._layers else None

    def _rotation_due(self, layer: _Layer, now_ms: int) -> bool:
        # now - created >= window / layer_count, in integers.
        return (now_ms - layer.created_at_ms) * self.layer_count >= self.window_ms

    def _target(self, now_ms: int) -> _Layer:
        self.cleanup(now_ms)
        layers = self._layers
        if layers:
            target = layers[-1]
            if not target.is_full() and not self._rotation_due(target, now_ms):
                return target
        if self.max_layers is not None and len(layers) >= self.max_layers:
            del layers[: len(layers) - self.max_layers + 1]
        target = _Layer(self.shape, now_ms, now_ms + self.window_ms)
        layers.append(target)
        return target

    # -- queries and updates -----------------------------------------------------------------

    def add(self, pid: int, now_ms: int) -> bool:
        """Add `pid` to the target layer (rotating first if due); True when that layer changed."""
        h1, h2 = _murmur(_pack_pid(pid), HASH_SEED)
        return self.add_hash(h1, h2, now_ms)

    def add_hash(self, initial: int, increment: int, now_ms: int) -> bool:
        """`add` for a PID already hashed with `pid_hash`."""
        target = self._target(now_ms)
        return target.add_indexes(target.shape.indexes_from_hash(initial, increment))

    def contains(self, pid: int, now_ms: int) -> bool:
        return self.locate(pid, now_ms) != ABSENT

    def find(self, pid: int, now_ms: int) -> list[int]:
        """Indexes (0 = oldest) of the live layers that hold `pid`."""
        self.cleanup(now_ms)
        h1, h2 = _murmur(_pack_pid(pid), HASH_SEED)
        by_shape: dict[Shape, list[int]] = {}
        found = []
        for i, layer in enumerate(self._layers):
            xs = by_shape.get(layer.shape)
            if xs is None:
                xs = by_shape[layer.shape] = layer.shape.indexes_from_hash(h1, h2)
            if _bits_hold(layer.bits, xs):
                found.append(i)
        return found

    def locate(self, pid: int, now_ms: int) -> int:
        """`CURRENT` if the target holds `pid` and is not yet due to rotate, else `OLDER` if some live
        layer holds it, else `ABSENT`."""
        h1, h2 = _murmur(_pack_pid(pid), HASH_SEED)
        return self.locate_hash(h1, h2, now_ms)

    def locate_hash(self, initial: int, increment: int, now_ms: int) -> int:
        """`locate` for a PID already hashed with `pid_hash`. The hot path of the quota: the target
        layer is tested first, computing each index only while the previous ones hit."""
        layers = self._layers
        if layers and layers[0].expires_at_ms <= now_ms:
            self.cleanup(now_ms)
        if not layers:
            return ABSENT
        newest = layers[-1]
        shape = newest.shape
        terms = shape._terms
        if terms is None:
            hit = _bits_hold(newest.bits, shape.indexes_from_hash(initial, increment))
        else:
            bits = newest.bits
            m = shape.m
            a = initial % m
            b = increment % m
            for i, t in terms:
                x = (a - i * b + t) % m
                if not bits[x >> 3] >> (x & 7) & 1:
                    hit = False
                    break
            else:
                hit = True
        if hit:
            # _rotation_due, inlined
            if (now_ms - newest.created_at_ms) * self.layer_count >= self.window_ms:
                return OLDER
            return CURRENT
        if len(layers) == 1:
            return ABSENT
        xs = shape.indexes_from_hash(initial, increment)
        for j in range(len(layers) - 2, -1, -1):
            layer = layers[j]
            if layer.shape is not shape and layer.shape != shape:
                shape = layer.shape
                xs = shape.indexes_from_hash(initial, increment)
            bits = layer.bits
            for x in xs:
                if not bits[x >> 3] >> (x & 7) & 1:
                    break
            else:
                return OLDER
        return ABSENT

    # -- introspection -----------------------------------------------------------------------

    def layer_count_live(self, now_ms: int) -> int:
        self.cleanup(now_ms)
        return len(self._layers)

    def is_empty(self, now_ms: int) -> bool:
        self.cleanup(now_ms)
        return not self._layers

    def estimated_fpp(self, now_ms: int) -> float:
        """1 - prod(1 - p_i) over live layers, p_i from each layer's estimated n."""
        self.cleanup(now_ms)
        miss = 1.0
        for layer in self._layers:
            miss *= 1.0 - layer.estimated_fpp()
        return 1.0 - miss

    def memory_bytes(self) -> int:
        """Bytes held: every layer (bits + object) plus this object and its layer list."""
        return (
            sys.getsizeof(self)
            + sys.getsizeof(self._layers)
            + sum(layer.memory_bytes() for layer in self._layers)
        )

    def layer_times(self) -> list[tuple[int, int]]:
        """(created_at_ms, expires_at_ms) per layer, oldest first, as of the last cleanup."""
        return [(layer.created_at_ms, layer.expires_at_ms) for layer in self._layers]

    def layer_sizes(self) -> list[int]:
        """`n_added` per layer, oldest first."""
        return [layer.n_added for layer in self._layers]
