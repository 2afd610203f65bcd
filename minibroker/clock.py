"""The broker's one clock: every reading of time and every wait of the shell goes through it.

Everything below the shell (storage, quotas, producer state, the audit stream) takes the time as an
argument; this module is where the shell reads it, and where it sleeps and sets deadlines (the
layering test, tests/broker/test_layering.py, finds no trio time call anywhere else in minibroker/).

Readings, from one source, trio's clock (`trio.current_time()`) plus this broker's skew:

* `monotonic()` / `monotonic_ms()`: for deadlines, quota windows and intervals: what the purgatory,
  the client quota managers, the coordinators and the background tasks use.
* `now_ms()`: wall-clock milliseconds since the epoch, for what must mean the same to every process
  (record timestamps, retention, producer-id expiry, the producer-id quota and the audit events that
  replay it). It is the monotonic reading plus an offset taken from the system clock once per trio
  run, so inside a run it advances exactly as the monotonic reading does: under
  `trio.testing.MockClock` a test that sleeps an hour of virtual time sees an hour pass on both
  readings, in milliseconds of real time. Outside a trio run (opening the data directory before the
  server starts, closing it after, tools) it is the system clock (plus the skew). Inside one, a step
  of the system clock (an NTP correction) is not followed until the next run.

Waits: `sleep(seconds)`, `sleep_until(deadline)`, and deadlines as scopes, trio's four
(`move_on_after`, `move_on_at`, `fail_after`, `fail_at`) with deadlines on this clock. Each returns a
`ClockScope`, whose `with` gives the trio CancelScope inside (`cancelled_caught`, `cancel()`).

Moving one broker's time (trio's MockClock moves every task's): `advance(seconds)` adds to this
clock's skew. Both readings jump forward by that much, and everything waiting on this clock wakes as
if that time had passed: a sleeper or a deadline now past fires at once, one still ahead keeps its
place on this clock (and so comes sooner in trio's time). Several brokers in one trio run, each with
its own BrokerClock, can so be moved apart: a day ahead on one expires its producer ids, group
members and transactions while the others see nothing of it. The skew only grows: monotonic readings
never go back.
"""

from __future__ import annotations

import math
import time
from typing import Callable

import trio

__all__ = ["BrokerClock", "ClockScope", "system_wall_ms"]


def system_wall_ms() -> int:
    """The system's wall clock in milliseconds since the epoch."""
    return time.time_ns() // 1_000_000


class ClockScope:
    """A deadline on a BrokerClock around a block: `with clock.move_on_at(t) as scope:`, where
    `scope` is the trio CancelScope that enforces it (at `t` less the clock's skew in trio's time;
    moved whenever the skew is). A `fail` scope raises trio.TooSlowError when the deadline passed,
    as trio's fail_at does."""

    __slots__ = ("_clock", "_deadline", "_fail", "scope")

    def __init__(self, clock: BrokerClock, deadline: float, fail: bool = False) -> None:
        self._clock = clock
        self._deadline = deadline
        self._fail = fail
        self.scope = trio.CancelScope(deadline=deadline - clock._skew)

    @property
    def deadline(self) -> float:
        """The deadline, on the broker's clock (monotonic seconds)."""
        return self._deadline

    @deadline.setter
    def deadline(self, deadline: float) -> None:
        self._deadline = deadline
        self.scope.deadline = deadline - self._clock._skew

    def __enter__(self) -> trio.CancelScope:
        self._clock._scopes.add(self)
        return self.scope.__enter__()

    def __exit__(self, *exc: object) -> bool:
        self._clock._scopes.discard(self)
        suppressed = self.scope.__exit__(*exc)  # type: ignore[arg-type]
        if self._fail and self.scope.cancelled_caught:
            raise trio.TooSlowError
        return suppressed


class BrokerClock:
    """trio's clock plus a skew of this broker's own, and the wall clock derived from it (see the
    module docstring)."""

    def __init__(self, wall_ms: Callable[[], int] = system_wall_ms) -> None:
        self._wall_ms = wall_ms
        self._run_clock: object | None = None  # the trio clock the offset was taken against
        self._offset_ms = 0
        self._skew = 0.0  # seconds this clock is ahead of trio's (advance)
        self._scopes: set[ClockScope] = set()  # the deadlines now in force on this clock

    # -- readings -------------------------------------------------------------------------------------

    def monotonic(self) -> float:
        """trio's clock plus this broker's skew, in seconds (deadlines)."""
        return trio.current_time() + self._skew

    def monotonic_ms(self) -> int:
        """The monotonic reading in milliseconds (the client quota managers' time)."""
        return int((trio.current_time() + self._skew) * 1000)

    def now_ms(self) -> int:
        """Wall-clock milliseconds since the epoch, advancing with the monotonic reading in a run."""
        try:
            run_clock = trio.lowlevel.current_clock()
        except RuntimeError:  # not in a trio run
            return self._wall_ms() + int(self._skew * 1000)
        now = trio.current_time()
        if run_clock is not self._run_clock:
            self._run_clock = run_clock
            self._offset_ms = self._wall_ms() - int(now * 1000)
        return self._offset_ms + int((now + self._skew) * 1000)

    @property
    def skew(self) -> float:
        """How far (seconds) this clock has been moved ahead of trio's (`advance`)."""
        return self._skew

    # -- moving it ------------------------------------------------------------------------------------

    def advance(self, seconds: float) -> None:
        """Move this clock `seconds` ahead: both readings jump, and every sleep and deadline on it
        whose time is now past fires at once (at the next scheduling point); the others keep their
        place on this clock. Other brokers' clocks do not move."""
        if not seconds >= 0 or math.isinf(seconds):
            raise ValueError(f"a clock moves forward by a finite time, not {seconds!r}")
        self._skew += seconds
        for scope in list(self._scopes):
            scope.scope.deadline = scope._deadline - self._skew

    # -- waits ----------------------------------------------------------------------------------------

    def move_on_at(self, deadline: float) -> ClockScope:
        """A scope cancelled at `deadline` (this clock's monotonic seconds)."""
        return ClockScope(self, deadline)

    def move_on_after(self, seconds: float) -> ClockScope:
        if seconds < 0:
            raise ValueError("timeout must be non-negative")
        return ClockScope(self, self.monotonic() + seconds)

    def fail_at(self, deadline: float) -> ClockScope:
        """As move_on_at, raising trio.TooSlowError when the deadline passed."""
        return ClockScope(self, deadline, fail=True)

    def fail_after(self, seconds: float) -> ClockScope:
        if seconds < 0:
            raise ValueError("timeout must be non-negative")
        return ClockScope(self, self.monotonic() + seconds, fail=True)

    async def sleep_until(self, deadline: float) -> None:
        """Sleep until this clock reads `deadline` (at once when it already does, after a checkpoint)."""
        with ClockScope(self, deadline):
            await trio.sleep_forever()

    async def sleep(self, seconds: float) -> None:
        """Sleep `seconds` of this clock's time (less, in trio's, when the clock is advanced meanwhile)."""
        if seconds < 0:
            raise ValueError("duration must be non-negative")
        if seconds == 0:
            await trio.lowlevel.checkpoint()
            return
        with ClockScope(self, self.monotonic() + seconds):
            await trio.sleep_forever()
