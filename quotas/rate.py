"""Kafka's sampled statistics, as its quota sensors use them.

Follows ``org.apache.kafka.common.metrics``: ``SampledStat`` (``stats/SampledStat.java``),
``Rate`` with ``WindowedSum`` (``stats/Rate.java``), ``Avg``, ``Max``, ``TokenBucket`` (KIP-599)
and a one-quota ``Sensor`` (``Sensor.java``, ``Quota.java``, ``QuotaUtils.java``).

Windowing, exactly as Kafka does it:

- A stat keeps up to ``samples + 1`` samples of ``window_ms`` each (the extra one is the sample that
  started before the monitored span but still overlaps it). A record goes into the current sample,
  or, once that sample is ``window_ms`` old, into the next slot, which is reset first.
- Before measuring, a sample whose last event is ``samples * window_ms`` or more in the past is reset
  (its start moves to ``now``).
- ``Rate = sum of samples / window``, with ``window = now - start of the oldest sample``, padded with
  empty whole windows so it is at least ``samples - 1`` windows plus the elapsed part of the current
  one, and never below 1 ms.

Violations are returned, not raised: ``Sensor.record`` returns a ``QuotaViolation`` (or ``None``),
so the hot path of a quota check costs no exception.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from typing import Final, NamedTuple

__all__ = [
    "Avg",
    "Max",
    "MetricConfig",
    "QuotaViolation",
    "Rate",
    "SampledStat",
    "Sensor",
    "TokenBucket",
    "WindowedSum",
    "round_half_up",
]


@dataclass(frozen=True, slots=True)
class MetricConfig:
    """``quota.window.num`` samples of ``quota.window.size.seconds`` each (Kafka: 11 of 1 s)."""

    samples: int = 11
    window_ms: int = 1000

    def __post_init__(self) -> None:
        if self.samples < 1:
            raise ValueError(f"samples must be at least 1, got {self.samples}")
        if self.window_ms < 1:
            raise ValueError(f"window_ms must be at least 1, got {self.window_ms}")


_NO_START: Final = sys.maxsize


def round_half_up(x: float) -> int:
    """Java's ``Math.round``: half rounds up (Python's ``round`` rounds half to even)."""
    return math.floor(x + 0.5)


class QuotaViolation(NamedTuple):
    """A sensor's value broke its bound. ``throttle_time_ms`` is the delay that brings it back."""

    value: float
    bound: float
    throttle_time_ms: int


class _Sample:
    __slots__ = ("value", "event_count", "start_ms", "last_event_ms")

    def __init__(self, value: float, now_ms: int) -> None:
        self.value = value
        self.event_count = 0
        self.start_ms = now_ms
        self.last_event_ms = now_ms

    def reset(self, value: float, now_ms: int) -> None:
        self.value = value
        self.event_count = 0
        self.start_ms = now_ms
        self.last_event_ms = now_ms

    def __repr__(self) -> str:
        return (
            f"_Sample(value={self.value}, events={self.event_count}, "
            f"start_ms={self.start_ms}, last_event_ms={self.last_event_ms})"
        )


class SampledStat:
    """A scalar measured over rolling time samples; subclasses say how samples combine."""

    __slots__ = ("config", "_samples", "_current")

    initial_value: float = 0.0

    def __init__(self, config: MetricConfig) -> None:
        self.config = config
        self._samples: list[_Sample] = []
        self._current = 0

    def record(self, value: float, now_ms: int) -> None:
        samples = self._samples
        if not samples:
            samples.append(_Sample(self.initial_value, now_ms))
        sample = samples[self._current]
        if now_ms - sample.start_ms >= self.config.window_ms:
            sample = self._advance(now_ms)
        self._update(sample, value)
        sample.event_count += 1
        sample.last_event_ms = now_ms

    def measure(self, now_ms: int) -> float:
        self._purge_obsolete(now_ms)
        return self._combine()

    def _advance(self, now_ms: int) -> _Sample:
        # samples + 1 slots: one more than the monitored span, for the overlapping oldest sample.
        self._current = (self._current + 1) % (self.config.samples + 1)
        if self._current >= len(self._samples):
            sample = _Sample(self.initial_value, now_ms)
            self._samples.append(sample)
            return sample
        sample = self._samples[self._current]
        sample.reset(self.initial_value, now_ms)
        return sample

    def _purge_obsolete(self, now_ms: int) -> None:
        # A sample stays while any of its events is inside the monitored span, even if it started
        # before it.
        expire_age = self.config.samples * self.config.window_ms
        for sample in self._samples:
            if now_ms - sample.last_event_ms >= expire_age:
                sample.reset(self.initial_value, now_ms)

    def _update(self, sample: _Sample, value: float) -> None:
        raise NotImplementedError

    def _combine(self) -> float:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}(current={self._current}, samples={self._samples})"


class WindowedSum(SampledStat):
    """The sum of what the live samples saw."""

    __slots__ = ()

    def _update(self, sample: _Sample, value: float) -> None:
        sample.value += value

    def _combine(self) -> float:
        return sum(sample.value for sample in self._samples)


class Rate(WindowedSum):
    """Sum per second over the sampled window (Kafka ``Rate`` over a ``WindowedSum``)."""

    __slots__ = ()

    def window_size_ms(self, now_ms: int) -> int:
        """The span the rate divides by: Kafka's ``Rate.windowSize``."""
        return self._total_and_window_ms(now_ms)[1]

    def measure(self, now_ms: int) -> float:
        total, window_ms = self._total_and_window_ms(now_ms)
        return total * 1000.0 / window_ms

    def total(self, now_ms: int) -> float:
        """What the live samples hold: the sum the rate divides by its window."""
        return self._total_and_window_ms(now_ms)[0]

    def check(self, bound: float, now_ms: int) -> QuotaViolation | None:
        """Kafka's ``Quota.acceptable`` (value <= bound) and ``QuotaUtils.throttleTime``.

        To bring an observed rate O back to the target T over the window W, wait X with
        O * W / (W + X) = T, so X = (O - T) / T * W, W being the precise window the rate used.
        """
        total, window_ms = self._total_and_window_ms(now_ms)
        value = total * 1000.0 / window_ms
        if value <= bound:
            return None
        return QuotaViolation(value, bound, round_half_up((value - bound) / bound * window_ms))

    def _total_and_window_ms(self, now_ms: int) -> tuple[float, int]:
        # Kafka purges obsolete samples, sums them and finds the oldest start in three passes; this
        # is the same in one, as it runs on every request.
        config = self.config
        samples = self._samples
        if not samples:
            samples.append(_Sample(0.0, now_ms))
        expire_age = config.samples * config.window_ms
        total = 0.0
        oldest_start = _NO_START
        for sample in samples:
            if now_ms - sample.last_event_ms >= expire_age:
                sample.reset(0.0, now_ms)
            else:
                total += sample.value
            if sample.start_ms < oldest_start:
                oldest_start = sample.start_ms
        window_ms = config.window_ms
        elapsed = now_ms - oldest_start
        # Java's int division truncates toward zero; only a clock that ran backwards makes
        # `elapsed` negative.
        full_windows = elapsed // window_ms if elapsed >= 0 else -(-elapsed // window_ms)
        min_full_windows = config.samples - 1
        if full_windows < min_full_windows:
            # Assume empty windows before the first sample (or after a long silence), so a first
            # burst is not divided by a few milliseconds.
            elapsed += (min_full_windows - full_windows) * window_ms
        return total, max(elapsed, 1)


class Avg(WindowedSum):
    """Average of the recorded values over the live samples; NaN when there are none (as Kafka)."""

    __slots__ = ()

    def _combine(self) -> float:
        count = 0
        total = 0.0
        for sample in self._samples:
            total += sample.value
            count += sample.event_count
        return total / count if count else math.nan


class Max(SampledStat):
    """Largest recorded value over the live samples; NaN when there are none (as Kafka)."""

    __slots__ = ()

    initial_value = -math.inf

    def _update(self, sample: _Sample, value: float) -> None:
        if value > sample.value:
            sample.value = value

    def _combine(self) -> float:
        if not any(sample.event_count for sample in self._samples):
            return math.nan
        return max(sample.value for sample in self._samples)


class TokenBucket:
    """KIP-599 token bucket: ``quota`` tokens per second refill, burst ``samples * window_s * quota``.

    Recording takes tokens (the balance may go negative); the quota is exhausted while the balance
    is below zero, and ``-tokens / quota`` seconds bring it back to zero. With no quota (``None``)
    nothing is tracked. Unlike Kafka, the quota is passed in rather than read from the metric's
    config, so a changed quota applies from the next call.

    A bucket is full at its first use with a quota. Kafka's starts empty with its last update at
    the epoch, which makes it full at any real time; this says the same without depending on where
    the caller's clock starts (a MockClock starts near 0).
    """

    __slots__ = ("config", "tokens", "last_update_ms")

    def __init__(self, config: MetricConfig) -> None:
        self.config = config
        self.tokens = 0.0
        self.last_update_ms: int | None = None

    def _refill(self, quota: float, now_ms: int) -> float:
        burst = self.config.samples * self.config.window_ms / 1000.0 * quota
        if self.last_update_ms is None:
            self.tokens = burst
        else:
            self.tokens = min(burst, self.tokens + quota * (now_ms - self.last_update_ms) / 1000.0)
        self.last_update_ms = now_ms
        return burst

    def record_with_quota(self, value: float, quota: float | None, now_ms: int) -> None:
        if quota is None:
            return
        burst = self._refill(quota, now_ms)
        self.tokens = min(burst, self.tokens - value)

    def measure_with_quota(self, quota: float | None, now_ms: int) -> float:
        if quota is None:
            return math.inf
        self._refill(quota, now_ms)
        return self.tokens

    def check(self, bound: float, now_ms: int) -> QuotaViolation | None:
        tokens = self.measure_with_quota(bound, now_ms)
        if tokens >= 0:
            return None
        # ControllerMutationQuotaManager.throttleTimeMs: the time to refill the deficit.
        return QuotaViolation(tokens, bound, round_half_up(-tokens / bound * 1000.0))

    def __repr__(self) -> str:
        return f"TokenBucket(tokens={self.tokens}, last_update_ms={self.last_update_ms})"


class Sensor:
    """One quota-bearing stat with an upper bound (``None`` = unlimited) and its last activity.

    ``record`` records first, then checks, as Kafka's ``Sensor.record(value, timeMs, true)`` does,
    and returns the violation instead of raising ``QuotaViolationException``. A sensor enforcing a
    ``TokenBucket`` may also keep an ``observed`` ``Rate`` of the same values, for the rate metric
    (Kafka's mutation sensor likewise holds a ``Rate`` beside its ``TokenBucket``).
    """

    __slots__ = ("stat", "bound", "last_record_ms", "observed")

    def __init__(self, stat: Rate | TokenBucket, bound: float | None, now_ms: int,
                 observed: Rate | None = None) -> None:
        self.stat = stat
        self.bound = bound
        self.last_record_ms = now_ms
        self.observed = observed

    def record(self, value: float, now_ms: int, check_quota: bool = True) -> QuotaViolation | None:
        self.last_record_ms = now_ms
        stat = self.stat
        if isinstance(stat, TokenBucket):
            stat.record_with_quota(value, self.bound, now_ms)
            if self.observed is not None:
                self.observed.record(value, now_ms)
        else:
            stat.record(value, now_ms)
        if check_quota and self.bound is not None:
            return stat.check(self.bound, now_ms)
        return None

    def check_quota(self, now_ms: int) -> QuotaViolation | None:
        """Check without recording (KIP-599 strict mode checks before it records)."""
        if self.bound is None:
            return None
        return self.stat.check(self.bound, now_ms)

    def measure(self, now_ms: int) -> float:
        stat = self.stat
        if isinstance(stat, TokenBucket):
            return stat.measure_with_quota(self.bound, now_ms)
        return stat.measure(now_ms)

    def __repr__(self) -> str:
        return f"Sensor(stat={self.stat!r}, bound={self.bound}, last_record_ms={self.last_record_ms})"
