"""Both ProducerStateManager implementations (lean and kafka) against a naive reference model
(Hypothesis stateful test).

The model keeps a plain list of every batch accepted per producer id in its current epoch and states
each rule as directly as it can: duplicates of kafka mode are "one of the last five in the list",
lean mode's window is "the whole batch, unwrapped, fits in [last - window + 1, last]". The machine
produces random batches (next in sequence, resends, near misses, random sequences, sequences around
the 2**31 wrap, batches up to a whole window ahead, epoch bumps and fenced epochs), advances a fake
clock, expires producers, writes snapshots and "restarts": a fresh manager loads the newest
snapshot, then the log after it is replayed. The default window is the lean producer state proposal's 10,000,000.
"""

from __future__ import annotations

import copy
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from minibroker.protocol.records import BatchHeader
from minibroker.storage.producer_state import (
    DEFAULT_MAX_IN_FLIGHT,
    KafkaProducerStateManager,
    LeanProducerStateManager,
    ProducerStateManager,
    list_snapshots,
)

M = 2**31
EXPIRATION_MS = 1000
PIDS = [0, 1, 2, 2**63 - 1]
PID_CHOICES = [0, 0, 0, 1, 2**63 - 1, 2]  # mostly one producer, so its history grows long
KINDS = [
    "next", "next", "next", "next", "resend", "resend", "resend_latest", "near", "window_edge",
    "ahead",
    "random", "new_epoch", "new_epoch_not_zero", "old_epoch",
]


def header(pid: int, epoch: int, first_seq: int, count: int, base_offset: int = 0) -> BatchHeader:
    return BatchHeader(
        0, base_offset, 49 + count, 0, 2, 0, 0, count - 1, 0, 0, pid, epoch, first_seq, count
    )


@dataclass
class ModelBatch:
    first_seq: int
    count: int
    base_offset: int

    @property
    def last_seq(self) -> int:
        return (self.first_seq + self.count - 1) % M

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.count - 1


@dataclass
class ModelProducer:
    epoch: int
    batches: list[ModelBatch]  # every accepted batch of this epoch the state still knows of
    last_append_ms: int


@dataclass
class Model:
    mode: str
    window: int
    producers: dict[int, ModelProducer] = field(default_factory=dict)

    def check(self, pid: int, epoch: int, first: int, count: int):
        producer = self.producers.get(pid)
        if producer is None:
            return 0, None
        latest = producer.batches[-1]
        last = (first + count - 1) % M
        if self.mode == "kafka" and epoch == producer.epoch:
            for old in producer.batches[-5:]:
                if (old.first_seq, old.last_seq) == (first, last):
                    return 0, (old.base_offset, old.last_offset)
        if epoch < producer.epoch:
            return 47, None
        if epoch > producer.epoch:
            return (0, None) if first == 0 else (45, None)
        if first == (latest.last_seq + 1) % M:
            return 0, None
        if self.mode == "lean":
            if (first, last) == (latest.first_seq, latest.last_seq):
                return 46, (latest.base_offset, latest.last_offset)
            for shift in (-M, 0, M):
                low, high = first + shift, first + shift + count - 1
                if latest.last_seq - self.window + 1 <= low and high <= latest.last_seq:
                    return 46, None
        return 45, None

    def append(self, pid: int, epoch: int, first: int, count: int, base_offset: int, now: int):
        batch = ModelBatch(first, count, base_offset)
        producer = self.producers.get(pid)
        if producer is None or producer.epoch != epoch:
            self.producers[pid] = ModelProducer(epoch, [batch], now)
        else:
            producer.batches.append(batch)
            producer.last_append_ms = now

    def remove_expired(self, now: int) -> int:
        gone = [p for p, s in self.producers.items() if now - s.last_append_ms >= EXPIRATION_MS]
        for pid in gone:
            del self.producers[pid]
        return len(gone)


class ProducerStateMachine(RuleBasedStateMachine):
    manager: type[ProducerStateManager] = LeanProducerStateManager
    window = DEFAULT_MAX_IN_FLIGHT

    def __init__(self) -> None:
        super().__init__()
        # tmpfs when there is one: the machine fsyncs every snapshot it writes.
        shm = "/dev/shm" if os.path.isdir("/dev/shm") else None
        self.directory = Path(tempfile.mkdtemp(prefix="producer-state-", dir=shm))
        self.mode = self.manager.mode
        self.psm = self.manager(self.window, EXPIRATION_MS)
        self.model = Model(self.mode, self.window)
        self.now = 0
        self.log: list[tuple[BatchHeader, int]] = []  # (appended header, append time)
        self.log_end = 0
        self.snapshots: dict[int, dict[int, ModelProducer]] = {}

    def teardown(self) -> None:
        shutil.rmtree(self.directory, ignore_errors=True)

    def _produce(self, data) -> None:
        pid = data.draw(st.sampled_from(PID_CHOICES), label="pid")
        count = data.draw(st.integers(1, 4), label="count")
        producer = self.model.producers.get(pid)
        if producer is None:
            epoch = data.draw(st.integers(0, 3), label="epoch")
            near_wrap = st.integers(M - 6, M - 1)
            first = data.draw(near_wrap | st.just(0) | st.integers(0, M - 1), label="first")
        else:
            latest = producer.batches[-1]
            kind = data.draw(st.sampled_from(KINDS), label="kind")
            epoch = producer.epoch
            first = (latest.last_seq + 1) % M
            if kind == "resend":
                old = data.draw(st.sampled_from(producer.batches), label="old")
                first, count = old.first_seq, old.count
            elif kind == "resend_latest":
                first, count = latest.first_seq, latest.count
            elif kind == "near":
                first = (latest.last_seq + data.draw(st.integers(-12, 3), label="delta")) % M
            elif kind == "window_edge":
                offset = data.draw(st.integers(-2, 1), label="offset")
                first = (latest.last_seq - self.window + offset) % M
            elif kind == "ahead":
                # A later in-flight batch of a conforming producer arriving early: up to a whole
                # window ahead of the expected sequence (the lean producer state proposal's producer never has more in
                # flight). It must never be taken for a duplicate, across the wrap too.
                ahead = data.draw(st.integers(1, self.window) | st.just(self.window), label="ahead")
                first = (latest.last_seq + 1 + ahead) % M
            elif kind == "random":
                first = data.draw(st.integers(0, M - 1), label="first")
            elif kind == "new_epoch":
                epoch, first = min(epoch + 1, 32767), 0
            elif kind == "new_epoch_not_zero":
                epoch = min(epoch + 1, 32767)
                first = data.draw(st.integers(1, M - 1), label="first")
            elif kind == "old_epoch" and epoch > 0:
                epoch -= 1
                first = data.draw(st.sampled_from([0, first]), label="first")
        incoming = header(pid, epoch, first, count)
        result = self.psm.prepare_update(incoming)
        expected = self.model.check(pid, epoch, first, count)
        assert (result.error_code, result.duplicate_of) == expected, result
        if result.error_code == 0 and result.duplicate_of is None:
            appended = header(pid, epoch, first, count, base_offset=self.log_end)
            self.psm.update(appended, self.now)
            self.model.append(pid, epoch, first, count, self.log_end, self.now)
            self.log.append((appended, self.now))
            self.log_end += count

    # Producing is most of what happens to a partition: three rules, so it is drawn more often.
    @rule(data=st.data())
    def produce(self, data) -> None:
        self._produce(data)

    @rule(data=st.data())
    def produce_more(self, data) -> None:
        self._produce(data)

    @rule(data=st.data())
    def produce_even_more(self, data) -> None:
        self._produce(data)

    @rule(
        ms=st.integers(0, 700) | st.sampled_from([EXPIRATION_MS - 1, EXPIRATION_MS]),
        expire=st.booleans(),
    )
    def tick(self, ms: int, expire: bool) -> None:
        self.now += ms
        if expire:
            assert self.psm.remove_expired_producers(self.now) == self.model.remove_expired(self.now)

    @rule(prune_below=st.none() | st.integers(0, 60))
    def snapshot(self, prune_below: int | None) -> None:
        self.psm.take_snapshot(self.directory, self.log_end)
        self.snapshots[self.log_end] = copy.deepcopy(self.model.producers)
        if prune_below is not None:
            self.psm.delete_snapshots_before(self.directory, prune_below, keep=2)
            newest = sorted(self.snapshots)[-2:]
            self.snapshots = {
                o: s for o, s in self.snapshots.items() if o >= prune_below or o in newest
            }
        assert [o for o, _ in list_snapshots(self.directory)] == sorted(self.snapshots)

    @rule()
    def restart(self) -> None:
        self.psm = self.manager(self.window, EXPIRATION_MS)
        loaded = self.psm.truncate_and_reload(self.directory, self.log_end)
        expected = max(self.snapshots, default=0)
        assert loaded == expected
        # A snapshot holds the latest batch of each producer only.
        producers = copy.deepcopy(self.snapshots.get(expected, {}))
        for producer in producers.values():
            producer.batches = producer.batches[-1:]
        self.model.producers = producers
        for appended, at in self.log:
            if appended.base_offset >= loaded:
                self.psm.update(appended, at)
                self.model.append(
                    appended.producer_id,
                    appended.producer_epoch,
                    appended.base_sequence,
                    appended.records_count,
                    appended.base_offset,
                    at,
                )

    @invariant()
    def same_state(self) -> None:
        assert self.psm.producer_id_count == len(self.model.producers)
        for pid in PIDS:
            producer = self.model.producers.get(pid)
            assert (pid in self.psm) == (producer is not None)
            entry = self.psm.last_entry(pid)
            if producer is None:
                assert entry is None
                continue
            expected = [
                (b.first_seq, b.last_seq, b.base_offset, b.last_offset)
                for b in producer.batches[-(5 if self.mode == "kafka" else 1) :]
            ]
            assert [tuple(b) for b in entry.batch_metadata] == expected
            assert (entry.producer_epoch, entry.last_append_ms) == (producer.epoch, producer.last_append_ms)


SETTINGS = settings(
    max_examples=80,
    stateful_step_count=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


class LeanDefaultWindow(ProducerStateMachine):
    manager = LeanProducerStateManager
    window = DEFAULT_MAX_IN_FLIGHT


class LeanNarrowWindow(ProducerStateMachine):
    manager = LeanProducerStateManager
    window = 6


class KafkaMode(ProducerStateMachine):
    manager = KafkaProducerStateManager


TestLeanDefaultWindow = LeanDefaultWindow.TestCase
TestLeanDefaultWindow.settings = SETTINGS
TestLeanNarrowWindow = LeanNarrowWindow.TestCase
TestLeanNarrowWindow.settings = SETTINGS
TestKafkaMode = KafkaMode.TestCase
TestKafkaMode.settings = SETTINGS
