"""Spark-free arithmetic behind the report: the producer-state memory model and the smallest
`producer_ids_rate` a principal needs.

Memory per producer-state entry (one producer id on one partition), Python objects as the broker
holds them, measured with tracemalloc the way `scripts/bench_producer_state` does (100,000 producer
ids, CPython 3.11; `measure_entry_bytes()` re-measures on the running interpreter and
`scripts/pipeline --measure-state-memory` uses that instead):

* lean (the lean producer state proposal, the broker's default): one 26-byte record in a shared
  bytearray plus a dict slot: 143.1 bytes per entry, however many batches the producer sent;
* kafka (Kafka's ProducerStateEntry, the last 5 batches): 444.4 bytes with one batch retained, then
  704.4, 908.4, 1112.4 and 1316.4 with 2..5 (an entry object, a list, a slotted object per batch).

Needed rate. The producer-id quota (minibroker.quotas.producer_id_quota) admits a new PID at t while the new
PIDs admitted in the slots of W / L (fixed grid, slot = floor(t L / W)) that overlap (t - T, t] are
fewer than the allowance: floor(q) over T = W for q >= 1, one over T = ceil(W / q) below 1. Every
new PID of a trace is admitted iff each finds fewer than the allowance before it in its lookback, so
with c_j = the earlier new PIDs in the slots overlapping (t_j - W, t_j], the smallest q >= 1 is
max(c_j) + 1; when every c_j is 0, rates below 1 work down to W / T_max, with T_max the longest
lookback that still separates each PID's slot from the previous one's. `needed_rate` computes both
with numpy (sorted slots and searchsorted), so millions of new PIDs take well under a second.
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
    from minibroker.protocol.records import BatchHeader
    from minibroker.storage.producer_state import ProducerStateManager

    def per_entry(mode: str, batches: int) -> float:
        gc.collect()
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        psm = ProducerStateManager.for_mode(mode)
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


def needed_rate(times_ms, window_size_seconds: float, layer_count: int) -> float:
    """The smallest producer_ids_rate (new PIDs per window of `window_size_seconds`, split in
    `layer_count` slots) that admits every new PID at these times (ms, any order); 0 for at most one
    PID (any rate admits a single one)."""
    times = np.sort(np.asarray(times_ms, dtype=np.int64))
    if len(times) <= 1:
        return 0.0
    window_ms = round(window_size_seconds * 1000)
    slots = times * layer_count // window_ms
    first = (times - window_ms + 1) * layer_count // window_ms  # first slot overlapping (t - W, t]
    before = np.arange(len(times)) - np.searchsorted(slots, first, side="left")
    most = int(before.max())
    if most > 0:
        return float(most + 1)
    # One PID per lookback at most: how long may the lookback be? T <= t_j + 1 - start(slot_{j-1} + 1).
    next_start = -(-(slots[:-1] + 1) * window_ms // layer_count)
    longest = int((times[1:] + 1 - next_start).min())
    return window_ms / longest
