"""Spark-free arithmetic behind the report: the producer-state memory model and the smallest
`producer_ids_rate` a principal needs.

Memory per producer-state entry (one producer id on one partition), Python objects as the broker
holds them, measured with tracemalloc the way `scripts/bench_producer_state` does (100,000 producer
ids, CPython 3.11; `measure_entry_bytes()` re-measures on the running interpreter and
`scripts/pipeline --measure-state-memory` uses that instead):

* lean (seed 003, the broker's default): one 26-byte record in a shared bytearray plus a dict slot:
  143.1 bytes per entry, however many batches the producer sent;
* kafka (Kafka's ProducerStateEntry, the last 5 batches): 444.4 bytes with one batch retained, then
  704.4, 908.4, 1112.4 and 1316.4 with 2..5 (an entry object, a list, a slotted object per batch).

Needed rate. The producer-id quota is a KIP-599 token bucket: burst B = W * q with W = window.num *
window.size seconds, refilled at q per second, starting full, and a new PID is admitted while the
balance is >= 0 (then costs one token). If the bucket was last full before new PID i, the balance
before new PID j is B - (j - i) + q * (t_j - t_i); so no new PID is ever rejected iff, for all i < j,

    j - i <= q * (W + t_j - t_i),

and the smallest such q is max over i < j of (j - i) / (W + t_j - t_i). `needed_rate` finds it by
bisection, each test O(n) with a running maximum (numpy), so millions of new PIDs take well under a
second.
"""

from __future__ import annotations

import gc
import tracemalloc

import numpy as np

__all__ = [
    "KAFKA_BATCHES_TO_RETAIN",
    "KAFKA_BYTES_BY_BATCHES",
    "LEAN_BYTES_PER_ENTRY",
    "StateMemoryModel",
    "measure_entry_bytes",
    "needed_rate",
    "rejects_any",
]

KAFKA_BATCHES_TO_RETAIN = 5
LEAN_BYTES_PER_ENTRY = 143.1
# Index k: bytes of a kafka-mode entry retaining k batches (k = 0 means no entry).
KAFKA_BYTES_BY_BATCHES = (0.0, 444.4, 704.4, 908.4, 1112.4, 1316.4)


class StateMemoryModel:
    """Bytes per producer-state entry: `lean` flat, `kafka[k]` for k retained batches (k <= 5)."""

    def __init__(self, lean: float = LEAN_BYTES_PER_ENTRY, kafka: tuple[float, ...] = KAFKA_BYTES_BY_BATCHES) -> None:
        if len(kafka) != KAFKA_BATCHES_TO_RETAIN + 1:
            raise ValueError(f"kafka needs {KAFKA_BATCHES_TO_RETAIN + 1} figures (0..5 batches)")
        self.lean = float(lean)
        self.kafka = tuple(float(x) for x in kafka)

    def describe(self) -> str:
        return (
            f"lean {self.lean:.0f} B per entry; kafka {self.kafka[1]:.0f} B with 1 batch retained, "
            f"{self.kafka[5]:.0f} B with 5"
        )


def measure_entry_bytes(entries: int = 20_000) -> StateMemoryModel:
    """Measure the model on this interpreter with the broker's own `ProducerStateManager`."""
    from protocol.records import BatchHeader
    from storage.producer_state import ProducerStateManager

    def per_entry(mode: str, batches: int) -> float:
        gc.collect()
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        psm = ProducerStateManager(mode)
        offset, now = 0, 1_700_000_000_000
        for round_ in range(batches):
            for i in range(entries):
                header = BatchHeader(0, offset, 249, 0, 2, 0, 0, 9, now, now, 1_000_000 + i, 0, round_ * 10, 10)
                psm.update(header, now + i)
                offset += 10
        gc.collect()
        used = tracemalloc.get_traced_memory()[0] - before
        tracemalloc.stop()
        del psm
        return used / entries

    kafka = (0.0, *(per_entry("kafka", k) for k in range(1, KAFKA_BATCHES_TO_RETAIN + 1)))
    return StateMemoryModel(per_entry("lean", 1), kafka)


def rejects_any(times_s: np.ndarray, rate: float, window_s: float) -> bool:
    """Would a bucket of `rate` (burst window_s * rate) reject any of these new-PID times?"""
    if len(times_s) == 0:
        return False
    index = np.arange(len(times_s), dtype=np.float64)
    g = rate * times_s - index  # balance before j relative to i: B + g_j - g_i
    return bool(np.any(g - np.maximum.accumulate(g) < -rate * window_s - 1e-9))


def needed_rate(times_ms, window_num: int, window_size_seconds: float, rel_tol: float = 1e-6) -> float:
    """The smallest producer_ids_rate (new PIDs per second) that admits every new PID at these times
    (ms, any order), for a quota window of window_num * window_size_seconds."""
    times_s = np.sort(np.asarray(times_ms, dtype=np.float64)) / 1000.0
    n = len(times_s)
    if n <= 1:
        return 0.0  # a full bucket admits one PID more than its tokens: any rate takes a single PID
    window_s = window_num * window_size_seconds
    low, high = 0.0, n / window_s  # at n / W the burst alone covers every PID
    while high - low > rel_tol * high:
        mid = (low + high) / 2
        if rejects_any(times_s, mid, window_s):
            low = mid
        else:
            high = mid
    return high
