"""Running a test's trio code on virtual time: trio's MockClock with autojump_threshold=0, so a
timeout of minutes takes no real time, deterministically (style.md: no real sleeps in unit tests)."""

from __future__ import annotations

from typing import Any, Awaitable, Callable

import trio
import trio.testing


def run(main: Callable[..., Awaitable[Any]], *args: Any) -> Any:
    """`trio.run(main, *args)` on a MockClock that jumps whenever every task is blocked."""
    return trio.run(main, *args, clock=trio.testing.MockClock(autojump_threshold=0))
