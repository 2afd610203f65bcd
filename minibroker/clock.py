"""The broker's one clock: trio's, with the wall clock derived from it.

Everything below the shell (storage, quotas, producer state, the audit stream) takes the time as an
argument; this module is where the shell reads it. Two readings, one source:

* `monotonic()` / `monotonic_ms()`: trio's clock (`trio.current_time()`), for deadlines, quota
  windows and intervals: what the purgatory, the client quota managers and the background tasks use.
* `now_ms()`: wall-clock milliseconds since the epoch, for what must mean the same to every process
  (record timestamps, retention, producer-id expiry, the producer-id quota and the audit events that
  replay it). It is trio's clock plus an offset taken from the system clock once per trio run, so
  inside a run it advances exactly as trio's clock does: under `trio.testing.MockClock` a test that
  sleeps an hour of virtual time sees an hour pass on both readings, in milliseconds of real time.

Outside a trio run (opening the data directory before the server starts, closing it after, tools)
`now_ms()` is the system clock itself. Inside one, a step of the system clock (an NTP correction)
is not followed until the next run: the wall clock is the run's start plus the monotonic time since.

Each `Broker` owns one `BrokerClock` (passed in, or a new one): a harness that runs several brokers
in one process can give each its own and move one forward without the others.
"""

from __future__ import annotations

import time
from typing import Callable

import trio

__all__ = ["BrokerClock", "system_wall_ms"]


def system_wall_ms() -> int:
    """The system's wall clock in milliseconds since the epoch."""
    return time.time_ns() // 1_000_000


class BrokerClock:
    """trio's monotonic clock plus the wall clock derived from it (see the module docstring)."""

    def __init__(self, wall_ms: Callable[[], int] = system_wall_ms) -> None:
        self._wall_ms = wall_ms
        self._run_clock: object | None = None  # the trio clock the offset was taken against
        self._offset_ms = 0

    def monotonic(self) -> float:
        """trio's clock, in seconds (deadlines)."""
        return trio.current_time()

    def monotonic_ms(self) -> int:
        """trio's clock, in milliseconds (the client quota managers' time)."""
        return int(trio.current_time() * 1000)

    def now_ms(self) -> int:
        """Wall-clock milliseconds since the epoch, advancing with trio's clock inside a run."""
        try:
            run_clock = trio.lowlevel.current_clock()
        except RuntimeError:  # not in a trio run
            return self._wall_ms()
        now = int(trio.current_time() * 1000)
        if run_clock is not self._run_clock:
            self._run_clock = run_clock
            self._offset_ms = self._wall_ms() - now
        return self._offset_ms + now
